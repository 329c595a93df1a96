"""`edgetrain package`: the trainer of an artifact directory as a library a firmware developer drops
into a build. `cmake`: a static library target with the flags that keep results bit-identical and a
toolchain file for arm-none-eabi-gcc. `arduino`: an Arduino library (library.properties, src/, an
example sketch that trains on batches sent over the serial line)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from . import targets
from .codegen.emit import _environment
from .errors import EdgetrainError
from .files import write_artifact
from .frontend.validate import check_prefix
from .host.build import SOURCES

FORMATS = ("cmake", "arduino")
SKETCH = "TrainOverSerial"
# The cross toolchain file's default core: the one `edgetrain run --target cortex-m4` builds for.
DEFAULT_CORE = "cortex-m4"


@dataclass(frozen=True)
class Library:
    """What the package templates need of a trainer: names, and for the example sketch the data a
    training step takes (None where the sketch cannot feed the model)."""

    prefix: str
    name: str  # edgetrain_<prefix>: the CMake target, the Arduino library and its header
    x_per_sample: int | None
    label_type: str | None  # "float" | "int32_t" | None (the model's output is its loss)
    labels_per_sample: int
    fixed_batch: bool
    sketch_note: str | None  # why the sketch cannot feed the model


def package(directory, output=None, kind: str = "cmake") -> Path:
    """Write the `kind` of package (cmake, arduino) of the trainer in `directory` (from `edgetrain
    compile`) to `output` (default: directory/kind). Returns the package directory."""
    if kind not in FORMATS:
        raise EdgetrainError(f"unknown package format {kind!r}; formats: {', '.join(FORMATS)}")
    directory = Path(directory)
    library = _library(directory)
    output = Path(output) if output is not None else directory / kind
    if output.exists() and not output.is_dir():
        raise EdgetrainError(f"{output} is a file; the package needs a directory")
    files = _cmake_files(directory, library) if kind == "cmake" else _arduino_files(directory, library)
    for relative, data in files.items():
        path = output / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EdgetrainError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
        write_artifact(path, data)
    return output


def _library(directory: Path) -> Library:
    """The trainer's names and data from its training model's metadata (as `edgetrain run` reads it)."""
    if not directory.is_dir():
        raise EdgetrainError(f"no artifact directory {directory}; run `edgetrain compile MODEL -o {directory}` first")
    try:
        model = onnx.load(os.fspath(directory / "training_model.onnx"), load_external_data=False)
    except OSError as exc:
        raise EdgetrainError(f"{directory} holds no trainer ({exc.strerror}); run `edgetrain compile` first") from None
    except DecodeError:
        raise EdgetrainError(f"{directory}/training_model.onnx is not an ONNX model") from None
    missing = [n for n in ("model.c", "model.h") if not (directory / n).is_file()]
    if missing:
        raise EdgetrainError(f"{directory} holds no {' or '.join(missing)}; run `edgetrain compile` first")
    meta = {p.key: p.value for p in model.metadata_props}
    if not {"edgetrain.prefix", "edgetrain.inputs", "edgetrain.batch"} <= meta.keys():
        raise EdgetrainError(f"{directory} holds artifacts of an older edgetrain; compile the model again")
    prefix = meta["edgetrain.prefix"]
    check_prefix(prefix)  # it names files and directories of the package
    infos = {i.name: i.type.tensor_type for i in model.graph.input}
    batch = json.loads(meta["edgetrain.batch"])

    def per_sample(name: str) -> int:
        size = 1
        for dim in infos[name].shape.dim:
            size *= dim.dim_value
        return size // batch["max"]

    inputs, labels = json.loads(meta["edgetrain.inputs"]), meta.get("edgetrain.labels") or None
    note = None
    if len(inputs) != 1:
        note = f"the model has {len(inputs)} inputs; the example sketch sends one"
    elif infos[inputs[0]].elem_type != onnx.TensorProto.FLOAT:
        note = "the model takes integer indices as input; the example sketch sends floats"
    label_type = (
        None if labels is None else ("float" if infos[labels].elem_type == onnx.TensorProto.FLOAT else "int32_t")
    )
    return Library(
        prefix=prefix,
        name=f"edgetrain_{prefix}",
        x_per_sample=None if note else per_sample(inputs[0]),
        label_type=label_type,
        labels_per_sample=per_sample(labels) if labels else 0,
        fixed_batch=bool(batch["fixed"]),
        sketch_note=note,
    )


def _render(template: str, library: Library, **extra) -> str:
    return _environment().get_template(template).render(lib=library, **extra)


def _sources(directory: Path) -> dict[str, bytes]:
    """model.c, model.h and model_weights.h (which artifacts of earlier versions lack)."""
    return {n: (directory / n).read_bytes() for n in SOURCES if (directory / n).exists()}


def _cmake_files(directory: Path, library: Library) -> dict[str, bytes | str]:
    """CMakeLists.txt, the public header under include/<prefix>/ (so several models' headers sit
    side by side, as the harness includes them), the rest in src/, and the cross toolchain file."""
    sources = _sources(directory)
    core = [
        flag for flag in targets.load(DEFAULT_CORE).cflags if flag.startswith(("-mcpu", "-mthumb", "-mfloat", "-mfpu"))
    ]
    files: dict[str, bytes | str]
    files = {
        "CMakeLists.txt": _render("package_CMakeLists.txt.j2", library),
        "cmake/arm-none-eabi.cmake": _render(
            "package_arm-none-eabi.cmake.j2", library, core=DEFAULT_CORE, core_flags=" ".join(core)
        ),
        f"include/{library.prefix}/model.h": sources.pop("model.h"),
    }
    files.update({f"src/{name}": data for name, data in sources.items()})
    return files


def _arduino_files(directory: Path, library: Library) -> dict[str, bytes | str]:
    """library.properties, src/ with the trainer and a header named after the library (what a
    sketch includes, and what the Arduino build looks for to find the library), and the example."""
    if library.sketch_note:
        raise EdgetrainError(f"cannot package {directory} for Arduino: {library.sketch_note}")
    sources = _sources(directory)
    # Arduino compiles C in a GNU mode, where GCC fuses multiply-adds: the preamble turns that off.
    sources["model.c"] = _render("package_arduino_preamble.c.j2", library).encode() + sources["model.c"]
    files: dict[str, bytes | str]
    files = {
        "library.properties": _render("package_library.properties.j2", library, sketch=SKETCH),
        f"src/{library.name}.h": _render("package_library.h.j2", library),
        f"examples/{SKETCH}/{SKETCH}.ino": _render("package_sketch.ino.j2", library, sketch=SKETCH),
    }
    files.update({f"src/{name}": data for name, data in sources.items()})
    return files
