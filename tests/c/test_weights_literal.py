"""model_weights.h through the C compiler: the arrays hold exactly the floats' bits, the frozen ones
are read-only data (flash on a microcontroller) unless the build defines ET_FROZEN_WRITABLE, the
constants always, the parameters and buffers writable, the strict
build is clean even past C99's 4095-character string limit, and a big-endian target is refused."""

import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from edgetrain.codegen.emit import Floats, _environment

STRICT = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow", "-Wdouble-promotion"]
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

# Reads every array of model_weights.h through its float member and writes the bytes out; the
# parameters and buffers are written to first, as training does.
MAIN = r"""
#include <stdio.h>
#include "model_weights.h"
int main(void)
{
    et_params[0] = et_params[0];
    et_buffers[0] = et_buffers[0];
    return fwrite(et_params, sizeof et_params, 1, stdout) != 1 || fwrite(et_buffers, sizeof et_buffers, 1, stdout) != 1
        || fwrite(et_frozen, sizeof et_frozen, 1, stdout) != 1 || fwrite(et_consts, sizeof et_consts, 1, stdout) != 1;
}
"""


def every_byte() -> np.ndarray:
    """float32s whose bytes take every value at every position (NaNs with payloads, infinities,
    denormals, both zeros)."""
    bytes_ = np.arange(256, dtype=np.uint8)
    return np.stack([np.roll(bytes_, 67 * k) for k in range(4)], axis=1).reshape(-1).view("<f4")


def weights(tmp_path, params, buffers, consts, trainer=True, frozen=np.float32([4.0])):
    m = SimpleNamespace(
        param_init=Floats([params]),
        buffer_init=Floats([buffers]),
        consts=Floats([consts]),
        frozen_init=frozen,
        const_init=consts,
        integers=(),
    )
    (tmp_path / "model_weights.h").write_text(_environment().get_template("weights.h.j2").render(m=m, trainer=trainer))
    (tmp_path / "main.c").write_text(MAIN)


@pytest.mark.parametrize("writable", [False, True], ids=["target", "host"])
def test_arrays_hold_every_bit_and_frozen_ones_are_read_only(tmp_path, writable):
    rng = np.random.default_rng(0)
    params = np.concatenate([every_byte(), rng.normal(size=3000).astype(np.float32)])  # > 4095 characters
    buffers = np.float32([1.0, -0.0, np.inf])
    frozen = every_byte()[::3]
    consts = np.concatenate([every_byte()[::-1], np.float32([np.nan])])
    weights(tmp_path, params, buffers, consts, frozen=frozen)
    exe = tmp_path / "main"
    subprocess.run(
        [*STRICT, "-O2", *(["-DET_FROZEN_WRITABLE"] if writable else []), str(tmp_path / "main.c"), "-o", str(exe)],
        check=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, check=True).stdout
    assert out == b"".join(a.astype("<f4").tobytes() for a in (params, buffers, frozen, consts))
    symbols = dict(
        line.split()[::-1][:2]
        for line in subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
        if len(line.split()) == 3
    )
    assert symbols["et_consts"] in "rR" and symbols["et_params"] in "dD" and symbols["et_buffers"] in "dD"
    assert symbols["et_frozen"] in ("dD" if writable else "rR")


def test_inference_arrays_are_all_read_only(tmp_path):
    weights(tmp_path, np.float32([]), np.float32([2.0]), np.float32([3.0]), trainer=False)
    text = (tmp_path / "model_weights.h").read_text()
    assert "et_params" not in text and text.count("static const union") == 2


def test_big_endian_target_is_refused(tmp_path):
    weights(tmp_path, np.float32([1.0]), np.float32([2.0]), np.float32([3.0]))
    result = subprocess.run(
        [*STRICT, "-D__BIG_ENDIAN__", "-fsyntax-only", str(tmp_path / "main.c")], capture_output=True, text=True
    )
    assert result.returncode != 0 and "big-endian" in result.stderr
