"""`edgetrain package`: the trainer as a library a firmware developer drops in.

cmake: the package's static library, built through CMake with its arm-none-eabi toolchain file and
linked with the `edgetrain run` harness and the MPS2 startup code, trains on a Cortex-M4 under QEMU
to the same `step` lines and parameter hash as `edgetrain run --target cortex-m4`.
arduino: the library layout an Arduino build accepts, compiled as the Arduino build would for a
Cortex-M4 (C in GNU mode, the sketch as C++ against a stub of Arduino.h given here), and the example
sketch run on the host with that stub's Serial on stdin/stdout: frames in, the API's losses out."""

import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
from test_targets import make_data, need

from edgetrain import api, artifacts, firmware, package, targets
from edgetrain.cli import main
from models import mlp

STEPS = 20
MAX_BATCH = 4


def need_tool(command: str, debian_package: str) -> None:
    """Skip when `command` is absent, naming its package; under CI fail (as test_targets.need)."""
    if shutil.which(command) is None:
        message = f"{command} missing; apt-get install {debian_package}"
        (pytest.fail if os.environ.get("CI") else pytest.skip)(message)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """An MLP trainer for batches of 1 to 4, and five batches of 4 samples."""
    directory = tmp_path_factory.mktemp("package") / "out"
    artifacts.generate_artifacts(mlp(), artifact_directory=directory, batch_size=MAX_BATCH)
    data = make_data((MAX_BATCH, 8))
    np.savez(directory.parent / "data.npz", **data)
    return directory, data


def run(cmd, cwd=None, stdin=None) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, input=stdin, capture_output=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()[-3000:]
    return result


def core_flags() -> list[str]:
    return [f for f in targets.load("cortex-m4").cflags if f.startswith(("-mcpu", "-mthumb", "-mfloat", "-mfpu"))]


# ---- cmake ----

FIRMWARE_CMAKE = """cmake_minimum_required(VERSION 3.13)
project(firmware C)
add_subdirectory(${PACKAGE} package)
add_executable(firmware.elf harness.c ${MPS2}/startup.c)
set_target_properties(firmware.elf PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF)
target_link_libraries(firmware.elf PRIVATE edgetrain_model)
target_link_options(firmware.elf PRIVATE --specs=rdimon.specs -nostartfiles
                    -T ${MPS2}/an385.ld -T ${MPS2}/mps2.ld -Wl,--gc-sections)
"""


def test_cmake_package_trains_on_cortex_m4_as_edgetrain_run(trainer, tmp_path, capsys):
    need("cortex-m4")
    need_tool("cmake", "cmake")
    directory, _ = trainer
    data = directory.parent / "data.npz"
    assert main(["run", str(directory), "--target", "cortex-m4", "--data", str(data), "--steps", str(STEPS)]) == 0
    expected = capsys.readouterr().out.splitlines()
    assert len(expected) == STEPS + 1 and expected[-1].startswith("params sha256 ")

    assert main(["package", str(directory), "--format", "cmake", "-o", str(tmp_path / "pkg")]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'pkg'}/\n"
    source = tmp_path / "firmware"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(FIRMWARE_CMAKE)
    harness = firmware.render_harness([firmware.harness_model(directory, data)], STEPS, None)
    (source / "harness.c").write_text(harness)
    build = tmp_path / "build"
    # MinSizeRel (-Os), where `edgetrain run` builds with -O2: the bits do not depend on it.
    run(
        [
            "cmake",
            "-S",
            source,
            "-B",
            build,
            f"-DCMAKE_TOOLCHAIN_FILE={tmp_path / 'pkg/cmake/arm-none-eabi.cmake'}",
            f"-DPACKAGE={tmp_path / 'pkg'}",
            f"-DMPS2={targets.directory() / 'mps2'}",
            "-DCMAKE_BUILD_TYPE=MinSizeRel",
        ]
    )
    log = run(["cmake", "--build", build, "--verbose"]).stdout.decode()
    model_c = next(line for line in log.splitlines() if line.rstrip().endswith("src/model.c"))
    for flag in ["-std=c99", "-ffp-contract=off", "-fno-math-errno", *core_flags()]:
        assert f" {flag} " in model_c, flag
    assert re.search(r"libedgetrain_model\.a .*-lm\b", log)

    printed = run(
        [
            "qemu-system-arm",
            "-M",
            "mps2-an386",
            "-nographic",
            "-monitor",
            "none",
            "-serial",
            "none",
            "-semihosting-config",
            "enable=on,target=native",
            "-kernel",
            build / "firmware.elf",
        ]
    )
    assert printed.stdout.decode().splitlines() == expected


# ---- arduino ----

ARDUINO_H = r"""/* A stub of the Arduino core for the tests: Serial on stdin and stdout; the line ends at end of
   input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
struct StubSerial {
    void begin(unsigned long) {}
    explicit operator bool() const { return true; }
    int available() { int c = getchar(); if (c == EOF) exit(0); ungetc(c, stdin); return 1; }
    int read() { return getchar(); }
    void print(const char *text) { fputs(text, stdout); }
    void print(char c) { putchar(c); }
    void print(int value) { printf("%d", value); }
    void print(double value, int digits) { printf("%.*f", digits, value); }
    void println() { fputs("\r\n", stdout); }
};
static StubSerial Serial;
"""
MAIN_CPP = "void setup();\nvoid loop();\nint main() { setup(); for (;;) loop(); }\n"
# library.properties fields the Arduino library specification (1.5 format, rev. 2.2) requires, and
# its categories.
REQUIRED = ("name", "version", "author", "maintainer", "sentence", "paragraph", "category", "url", "architectures")
CATEGORIES = {
    "Display",
    "Communication",
    "Signal Input/Output",
    "Sensors",
    "Device Control",
    "Timing",
    "Data Storage",
    "Data Processing",
    "Other",
}
SKETCH = "examples/TrainOverSerial/TrainOverSerial.ino"


@pytest.fixture(scope="module")
def library(trainer, tmp_path_factory):
    directory, _ = trainer
    return package.package(directory, tmp_path_factory.mktemp("arduino") / "edgetrain_model", "arduino")


def test_arduino_library_layout(library):
    fields = dict(
        line.split("=", 1) for line in (library / "library.properties").read_text().splitlines() if "=" in line
    )
    assert all(fields.get(name, "").strip() for name in REQUIRED), fields
    assert fields["name"] == library.name == "edgetrain_model"
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _.\-]{0,62}", fields["name"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", fields["version"]) and fields["category"] in CATEGORIES
    assert fields["architectures"] == "*"
    src = library / "src"
    assert {p.name for p in src.iterdir()} == {"edgetrain_model.h", "model.c", "model.h", "model_weights.h"}
    assert all((src / h.strip()).is_file() for h in fields["includes"].split(","))
    # Each quoted include of the library and each library header the sketch names resolves in src/.
    for path in src.iterdir():
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M):
            assert (src / name).is_file(), (path.name, name)
    sketch = (library / SKETCH).read_text()
    assert "#include <edgetrain_model.h>" in sketch and "void setup()" in sketch and "void loop()" in sketch
    header = (src / "model.h").read_text()
    assert header.index('extern "C" {') < header.index("model_init") < header.rindex("#ifdef __cplusplus")


def test_arduino_library_compiles_for_cortex_m4(library, trainer, tmp_path):
    """As an Arduino core for a Cortex-M4F compiles a library and a sketch (C in GNU mode at -Os,
    where GCC fuses multiply-adds unless told not to; the sketch as C++ with Arduino.h first)."""
    need("cortex-m4")
    (tmp_path / "Arduino.h").write_text(ARDUINO_H)
    common = [*core_flags(), "-Os", "-ffunction-sections", "-fdata-sections", "-Wall", "-Wextra", "-Werror", "-c"]
    for name, source in (("package", library / "src/model.c"), ("artifacts", trainer[0] / "model.c")):
        run(["arm-none-eabi-gcc", "-std=gnu11", *common, source, "-o", tmp_path / f"{name}.o"])
    run(
        [
            "arm-none-eabi-g++",
            "-x",
            "c++",
            "-std=gnu++11",
            "-fno-rtti",
            "-fno-exceptions",
            "-fno-threadsafe-statics",
            *common,
            "-include",
            "Arduino.h",
            f"-I{tmp_path}",
            f"-I{library / 'src'}",
            library / SKETCH,
            "-o",
            tmp_path / "sketch.o",
        ]
    )

    def fused(obj) -> int:
        code = run(["arm-none-eabi-objdump", "-d", obj]).stdout.decode()
        return len(re.findall(r"\svfn?m[as]\.f32\s", code))

    assert fused(tmp_path / "package.o") == 0
    assert fused(tmp_path / "artifacts.o") > 0  # what the package's preamble prevents
    assert "setup" in run(["arm-none-eabi-nm", tmp_path / "sketch.o"]).stdout.decode()


def frame(x: np.ndarray, y: np.ndarray, n: int | None = None) -> bytes:
    """The sketch's frame: 'E' 'T', n (uint16), x and labels as little-endian 4-byte values."""
    n = len(x) if n is None else n
    return b"ET" + struct.pack("<H", n) + x.astype("<f4").tobytes() + y.astype("<i4").tobytes()


def test_arduino_sketch_trains_on_serial_frames(library, trainer, tmp_path):
    """Frames of 4 and 2 samples, noise between them, and refused frames (batch 0, batch 5): each good
    frame answers the loss the Python API computes for the same step, to the bit; a refused one
    answers `error 1` and leaves training as it was."""
    need_tool("g++", "g++")
    directory, data = trainer
    (tmp_path / "Arduino.h").write_text(ARDUINO_H)
    (tmp_path / "main.cpp").write_text(MAIN_CPP)
    run(["gcc", "-std=gnu11", "-O2", "-c", library / "src/model.c", "-o", tmp_path / "model.o"])
    run(
        [
            "g++",
            "-std=gnu++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-x",
            "c++",
            "-include",
            "Arduino.h",
            f"-I{tmp_path}",
            f"-I{library / 'src'}",
            "-c",
            library / SKETCH,
            "-o",
            tmp_path / "sketch.o",
        ]
    )
    run(["g++", tmp_path / "main.cpp", tmp_path / "sketch.o", tmp_path / "model.o", "-lm", "-o", tmp_path / "sketch"])

    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = api.Module(directory / "training_model.onnx", state, directory / "eval_model.onnx")
    optimizer = api.Optimizer(directory / "optimizer_model.onnx", module)
    module.train()
    stream, expected = b"noise E", ["ready"]
    for i in range(8):
        n = MAX_BATCH if i % 2 == 0 else 2
        x, y = data["x"][i % len(data["x"])][:n], data["y"][i % len(data["y"])][:n]
        if i == 3:
            stream += frame(x[:0], y[:0]) + b"\x00E" + frame(np.tile(x, (3, 1))[:5], np.tile(y, 3)[:5])
            expected += ["error 1", "error 1"]
        loss = np.float32(module(x, y))
        optimizer.step()
        module.lazy_reset_grad()
        stream += frame(x, y)
        expected.append(f"loss {float(loss):.6f} {struct.unpack('<I', loss.tobytes())[0]:08x}")
    printed = run([tmp_path / "sketch"], stdin=stream).stdout.decode()
    assert printed.split("\r\n") == expected + [""]


# ---- errors ----


def test_package_command_errors(trainer, tmp_path, capsys):
    directory, _ = trainer
    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    for argv, message in (
        ([str(tmp_path / "absent"), "--format", "cmake"], "no artifact directory"),
        ([str(tmp_path / "empty"), "--format", "cmake"], "holds no trainer"),
        ([str(directory), "--format", "zip"], "unknown package format 'zip'; formats: cmake, arduino"),
        (
            [str(directory), "--format", "arduino", "-o", str(tmp_path / "file")],
            "is a file; the package needs a directory",
        ),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["package", *argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and message in err and err.count("\n") == 1, err
