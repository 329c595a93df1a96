"""The A/B checkpoint slots in flash (model_flash_save / model_flash_load), on the host: flash_slots.c
drives them over a flash kept in memory, under AddressSanitizer and UndefinedBehaviorSanitizer.
tests/target/test_power_cut.py cuts the power of a Cortex-M4 running them."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from edgetrain import artifacts
from edgetrain.host.build import CFLAGS, SANITIZE, load_library
from models import mlp, mlp_bn

HERE = Path(__file__).parent
IN = 4  # the model's inputs per sample, which flash_slots.c feeds


def test_slots_survive_a_cut_at_every_byte_and_failing_callbacks(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc missing; apt-get install gcc")
    out = artifacts.generate_artifacts(mlp(batch=2, sizes=(IN, 6, 3)), artifact_directory=tmp_path / "mlp")
    program = tmp_path / "flash_slots"
    build = subprocess.run(
        [
            "gcc",
            *CFLAGS,
            "-Wshadow",
            *SANITIZE,
            f"-DIN={IN}",
            "-I",
            str(out),
            str(HERE / "flash_slots.c"),
            "-o",
            str(program),
            "-lm",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    result = subprocess.run(
        [str(program)], capture_output=True, text=True, timeout=120, env={"ASAN_OPTIONS": "detect_leaks=0"}
    )
    assert result.returncode == 0 and result.stdout.endswith("ok\n"), result.stdout + result.stderr
    print(result.stdout.splitlines()[0])
    size, cuts = (int(n) for n in re.match(r"checkpoint (\d+) bytes, (\d+) cut points", result.stdout).groups())
    # Every programmed-byte count of a save, from none to all (checkpoint and 24-byte header),
    # in three layouts of the slots.
    assert cuts == 3 * (size + 24 + 1)


@pytest.mark.parametrize("kind", ["batchnorm_and_frozen", "sgd_without_state"])
def test_the_checkpoint_size_constant_is_the_functions(tmp_path, kind):
    """<PREFIX>_CHECKPOINT_BYTES (model.h, computed by the template) sizes firmware buffers: it must be
    what <prefix>_checkpoint_size(1) says for models with buffers, frozen tensors or no optimizer state."""
    if kind == "batchnorm_and_frozen":
        out = artifacts.generate_artifacts(
            mlp_bn(batch=2), artifact_directory=tmp_path / kind, frozen_params=["fc0.bias"]
        )
    else:
        out = artifacts.generate_artifacts(
            mlp(batch=2), artifact_directory=tmp_path / kind, optimizer=artifacts.OptimType.SGD
        )
    constant = int(re.search(r"#define MODEL_CHECKPOINT_BYTES (\d+)u", (out / "model.h").read_text()).group(1))
    ffi, lib = load_library(out)
    size = ffi.new("size_t *")
    assert lib.model_checkpoint_size(1, size) == 0 and size[0] == constant
