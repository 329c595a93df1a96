"""`edgetrain run`: the generated trainer plus a harness that trains it on embedded data, built for
a target by targets/Makefile and run there (under its emulator unless the target is the host)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from . import checkpoint, targets
from .codegen.emit import _environment
from .codegen.filters import c_float, c_int
from .errors import EdgetrainError
from .host.build import SOURCES


# Targets whose C library has no files: wasm32's (targets/wasm32) only prints.
NO_FILES = frozenset({"wasm32"})


@dataclass(frozen=True)
class HarnessModel:
    prefix: str
    label: str  # printed before each line when several models share the firmware
    batches: int
    x: tuple[float, ...]
    x_size: int
    label_type: str | None  # "float" | "int32_t"
    y: tuple
    y_size: int
    trainable: int


def _model_spec(directory: Path) -> tuple[str, int, str | None, int, int]:
    """(prefix, input floats, label C type, label count, trainable floats) of an artifact directory."""
    try:
        model = onnx.load(os.fspath(directory / "training_model.onnx"), load_external_data=False)
        data = checkpoint.decode((directory / "checkpoint").read_bytes())
    except OSError as exc:
        raise EdgetrainError(
            f"{directory} holds no artifacts ({exc.strerror}); run `edgetrain compile` first"
        ) from None
    meta = {p.key: p.value for p in model.metadata_props}
    infos = {i.name: i.type.tensor_type for i in model.graph.input}

    def size(name: str) -> int:
        return int(np.prod([d.dim_value for d in infos[name].shape.dim], dtype=np.int64))

    inputs = json.loads(meta["edgetrain.inputs"])
    if len(inputs) != 1:
        raise EdgetrainError(f"the model in {directory} has {len(inputs)} inputs; `run` feeds exactly one (x)")
    if infos[inputs[0]].elem_type != onnx.TensorProto.FLOAT:
        raise EdgetrainError(f"the model in {directory} takes integer indices as input; `run` feeds float x only")
    labels = meta.get("edgetrain.labels") or None
    label_type = (
        None if labels is None else ("float" if infos[labels].elem_type == onnx.TensorProto.FLOAT else "int32_t")
    )
    trainable = sum(a.size for a, k in zip(data.arrays, data.kinds) if k == checkpoint.TRAINABLE)
    return meta["edgetrain.prefix"], size(inputs[0]), label_type, size(labels) if labels else 0, trainable


def harness_model(directory, data) -> HarnessModel:
    """The harness's view of the trainer in `directory` fed with `data` (a path to an .npz holding x
    and y, or a mapping): the first axis of x and y indexes batches, which training cycles through."""
    directory = Path(directory)
    prefix, x_size, label_type, y_size, trainable = _model_spec(directory)
    try:
        arrays = np.load(data) if isinstance(data, (str, os.PathLike)) else data
    except (OSError, ValueError) as exc:
        raise EdgetrainError(f"cannot read the data {data}: {exc}") from None
    if "x" not in arrays:
        raise EdgetrainError("the data holds no array `x`")
    x = np.asarray(arrays["x"])
    if x.ndim == 0 or x.shape[0] == 0 or x[0].size != x_size or not np.issubdtype(x.dtype, np.number):
        raise EdgetrainError(
            f"x must be numbers of shape (batches, ...) with {x_size} values per batch, got {x.dtype} {x.shape}"
        )
    y: np.ndarray = np.zeros((x.shape[0], 0))
    if label_type is not None:
        if "y" not in arrays:
            raise EdgetrainError("the model has labels but the data holds no array `y`")
        y = np.asarray(arrays["y"])
        integral = np.issubdtype(y.dtype, np.integer)
        if y.ndim == 0 or y.shape[0] != x.shape[0] or y[0].size != y_size:
            raise EdgetrainError(
                f"y must be of shape ({x.shape[0]}, ...) with {y_size} labels per batch, got {y.shape}"
            )
        if integral != (label_type == "int32_t"):
            raise EdgetrainError(
                f"the model's labels are {'integers' if label_type == 'int32_t' else 'floats'}, y is {y.dtype}"
            )
        if integral and (y.min() < -(2**31) or y.max() >= 2**31):
            raise EdgetrainError("integer labels must fit int32")
    x = x.astype(np.float32).ravel()
    y = y.astype(np.float32 if label_type == "float" else np.int64).ravel()
    return HarnessModel(
        prefix=prefix,
        label="",
        batches=int(arrays["x"].shape[0]),
        x=tuple(x.tolist()),
        x_size=x_size,
        label_type=label_type,
        y=tuple(y.tolist()),
        y_size=y_size,
        trainable=trainable,
    )


def render_harness(
    models: list[HarnessModel], steps: int, lr: float | None, flash: bytes | None = None, save_every: int = 0
) -> str:
    env = _environment()
    env.globals.update(c_float=c_float, c_int=c_int)
    return env.get_template("harness.c.j2").render(
        models=models, steps=steps, lr=lr, flash=flash, cut=flash and flash + b".cut", save_every=save_every
    )


@dataclass(frozen=True)
class Firmware:
    """A harness built for a target by build_firmware, which `run` starts as often as wanted."""

    directory: Path
    target: str
    prefixes: tuple[str, ...]

    def run(self, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess | None:
        """Runs the firmware in `cwd` (default: its build directory), which relative flash paths are
        relative to; None when it did not finish within `timeout` seconds."""
        try:
            result = targets.make(
                f"TARGET={self.target}",
                f"BUILD={self.directory.resolve()}",
                f"MODELS={' '.join(self.prefixes)}",
                f"RUN_TIMEOUT={timeout:g}",
                "run",
                cwd=cwd or self.directory,
                timeout=timeout + 120,
            )
        except subprocess.TimeoutExpired:
            return None
        return None if "Error 124" in result.stderr else result  # 124: timeout(1) stopped the emulator


def build_firmware(
    models: list[tuple[os.PathLike, object]],
    target: str,
    steps: int,
    lr: float | None = None,
    build=None,
    flash=None,
    save_every: int = 0,
) -> Firmware:
    """Build one firmware that trains every (artifact directory, data) pair in turn for `steps` steps.
    With `flash` (a file path, relative to where the firmware runs), the first model resumes from the
    newest checkpoint in the file's two slots and saves one every `save_every` steps."""
    if not 0 <= steps < 2**32:
        raise EdgetrainError(f"steps must be in [0, 2**32), got {steps}")
    if lr is not None and not (np.isfinite(lr) and lr >= 0):
        raise EdgetrainError(f"learning rate must be finite and non-negative, got {lr}")
    if not 0 <= save_every < 2**32:
        raise EdgetrainError(f"the steps between saves must be in [0, 2**32), got {save_every}")
    if save_every and flash is None:
        raise EdgetrainError(f"saving every {save_every} steps needs a flash file (--flash)")
    if flash is not None and not os.fsencode(flash):
        raise EdgetrainError("the flash file needs a name")
    if flash is not None and target in NO_FILES:
        raise EdgetrainError(f"target {target} has no files for the flash slots (--flash)")
    if flash is not None and len(models) != 1:
        raise EdgetrainError(f"a flash file holds the checkpoints of one model, got {len(models)} models")
    spec = targets.load(target)
    spec.require()
    harness = [harness_model(d, data) for d, data in models]
    if len(harness) > 1:
        harness = [replace(m, label=f"{m.prefix} ") for m in harness]
    prefixes = [m.prefix for m in harness]
    if len(set(prefixes)) != len(prefixes):
        raise EdgetrainError(
            f"models linked into one firmware need distinct prefixes, got {', '.join(prefixes)} "
            "(`edgetrain compile --c-prefix`)"
        )
    build = Path(build or Path(models[0][0]) / "build" / target)
    flash = None if flash is None else os.fsencode(flash)
    make_firmware(
        [(d, m.prefix) for (d, _), m in zip(models, harness)],
        target,
        build,
        render_harness(harness, steps, lr, flash, save_every),
    )
    return Firmware(build, target, tuple(prefixes))


def make_firmware(trainers: list[tuple[os.PathLike, str]], target: str, build: Path, harness: str) -> Path:
    """Build `harness` (C text) with the trainers (artifact directory, prefix) for `target` in
    `build` through targets/Makefile; returns the program."""
    for directory, prefix in trainers:
        (build / prefix).mkdir(parents=True, exist_ok=True)
        for name in SOURCES:
            if (Path(directory) / name).exists():  # artifacts of earlier versions have no model_weights.h
                shutil.copy(Path(directory) / name, build / prefix / name)
    (build / "harness.c").write_bytes(harness.encode())
    result = targets.make(
        f"TARGET={target}", "BUILD=.", f"MODELS={' '.join(p for _, p in trainers)}", "firmware", cwd=build
    )
    if result.returncode != 0:
        raise EdgetrainError(
            f"building the firmware for {target} failed:\n{(result.stdout + result.stderr).strip()[-3000:]}"
        )
    return build / "firmware.elf"


def run(
    models: list[tuple[os.PathLike, object]],
    target: str,
    steps: int,
    lr: float | None = None,
    build=None,
    timeout: float = 300,
    flash=None,
    save_every: int = 0,
) -> str:
    """Build one firmware training every (artifact directory, data) pair in turn for `steps` steps,
    run it on `target`, and return what it printed. Lines carry the model's prefix when there are
    several models. `flash` and `save_every`: as build_firmware's, the path taken from here."""
    flash = None if flash is None else os.path.abspath(flash)
    firmware = build_firmware(models, target, steps, lr, build, flash, save_every)
    result = firmware.run(timeout)
    if result is None:
        raise EdgetrainError(f"the firmware did not finish on {target} within {timeout:g} s")
    if result.returncode != 0:
        raise EdgetrainError(
            f"running the firmware on {target} failed:\n{(result.stdout + result.stderr).strip()[-3000:]}"
        )
    return result.stdout
