"""runtime_c as a library: every fast path against its plain reference, and headers that stand alone.

kernel_references.c runs the matrix product and the three convolution kernels, through their
dispatchers and each fast path called directly, on random shapes, and compares their bits with
et_gemm_f32_ref, et_conv_f32_ref, et_conv_transpose_f32_ref and et_conv_grad_w_f32_ref; and Conv's
input gradient made in place of its output gradient (et_conv_grad_x_f32) with the transposed one. It is built
the ways the generated C is: with vector tiles (host SIMD, and whatever -march=native adds), in the
scalar form of the microcontrollers, and that scalar form with the padded-plane scratch of the hosts;
ET_PATH_ counts which paths ran, so that a path the shapes stop reaching fails the test.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from edgetrain.host.build import SANITIZE
from edgetrain.runtime_c import headers

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
DRIVER = Path(__file__).with_name("kernel_references.c")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wdouble-promotion", "-O2"]
# In the sanitizer pass (tests/sanitize) the driver runs under ASan and UBSan too, at -O1, where its
# cases take half the time they take at -O0, and half as many of them: each still reaches every path
# (checked below), and the unsanitized pass compares 500 of them bit for bit.
SANITIZED = [*SANITIZE, "-O1"] if os.environ.get("EDGETRAIN_SANITIZE") == "1" else []
CASES = 250 if SANITIZED else 500  # per kernel and build: about 3 s of running each unsanitized

# The paths each build has (the names the headers give ET_PATH_).
COMMON = {
    "gemm_tiles",
    "gemm_outer",
    "gemm_dots_a_transposed",
    "dots_4x2",
    "dots_8x1",
    "dots_one",
    "rows_4x4",
    "rows_4x4_strided",
    "rows_one",
    "conv_pointwise_gemm",
    "transpose_pointwise_gemm",
    "conv_rows",
    "transpose_rows",
    "conv_gathered_clipped",
    "transpose_gathered_clipped",
    "transpose_gathered_by_row",
    "grad_lanes_pointwise",
    "grad_lanes_clipped",
    "grad_x_in_place_pointwise",
    "grad_x_in_place_depthwise",
    "conv_depthwise_planes",
    "transpose_depthwise_planes",
    "depthwise_planes_4_rows",
    "depthwise_planes_3x3",
    "depthwise_planes_3x3_strided",
    "grad_depthwise_planes",
    "grad_depthwise_planes_3x3",
}
SCRATCH = {  # the padded planes' paths: hosts, or a scalar build given the scratch
    "conv_direct",
    "transpose_direct",
    "direct_row_pairs",
    "transpose_phases",
    "conv_gathered_padded",
    "transpose_gathered_padded",
    "conv_narrow",
    "transpose_narrow",
    "conv_depthwise",
    "transpose_depthwise",
    "grad_depthwise",
    "grad_lanes_direct",
    "grad_lanes_padded",
    "tile_scalar",
}
VECTORS = {
    "tile_4x16",
    "tile_4x8",
    "tile_rows_of_8_or_16",
    "tiles_row_of_64",
    "gemm_narrow",
    "conv_pointwise_narrow",
    "conv_channels",
    "transpose_channels",
    "conv_images",
    "transpose_images",
    "dot_tile_4x2",
    "dot_tile_4x1",
    "dot_tile_one",
    "dot_tile_tail_in_lanes",
    "depthwise_runs_of_4",
    "grad_short_tiles_pointwise",
    "grad_short_tiles_padded",
    "grad_short_tiles_clipped",
}
SCALAR = {
    "dot_tile_scalar",
    "dot_tile_scalar_4x2",
    "dot_tile_scalar_4x4",
    "dot_tail",
    "grad_short_gathered",
    "grad_short_gathered_4x4",
}
WIDE = {"tile_4x32_wide", "direct_row_pairs_wide"}  # where the vectors have sixteen lanes (AVX-512)

BUILDS = {
    "native": (["-march=native"], COMMON | SCRATCH | VECTORS),
    "default": ([], COMMON | SCRATCH | VECTORS),
    "scalar": (["-DET_NO_VECTORS"], COMMON | SCALAR),
    "scalar_with_scratch": (["-DET_NO_VECTORS", "-DET_CONV_SCRATCH=16384"], COMMON | SCRATCH | SCALAR),
}


def _defines(flags: list[str]) -> str:
    """The macros gcc predefines with these flags."""
    return subprocess.run(
        ["gcc", *flags, "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True, text=True, check=True
    ).stdout


def vectors_build() -> bool:
    """Whether gcc's default target has the vector tiles (x86 SSE2, AArch64)."""
    return re.search(r"#define (__SSE2__|__aarch64__) 1", _defines([])) is not None


@pytest.mark.parametrize("build", list(BUILDS))
def test_every_fast_path_matches_its_reference_bit_for_bit(tmp_path, build):
    flags, expected = BUILDS[build]
    if "-DET_NO_VECTORS" not in flags and not vectors_build():
        pytest.skip("no vector tiles on this host's gcc target")
    if "#define __AVX512F__ 1" in _defines(flags):
        expected = expected | WIDE
    exe = tmp_path / "kernel_references"
    subprocess.run(["gcc", *STRICT, *flags, *SANITIZED, f"-I{RUNTIME}", str(DRIVER), "-o", str(exe)], check=True)
    seed = list(BUILDS).index(build) + 1
    # the driver links gcc's sanitizer runtimes itself: not the one the sanitizer pass preloads into Python
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([str(exe), str(seed), str(CASES)], capture_output=True, text=True, timeout=120, env=env)
    mismatches = [line for line in r.stdout.splitlines() if line.startswith("mismatch ")]
    assert r.returncode == 0 and not mismatches, (r.stderr + "\n".join(mismatches[:20]))[:4000]
    ran = {name: int(n) for name, n in re.findall(r"^path (\w+) (\d+)$", r.stdout, re.M)}
    assert set(ran) == expected, f"paths that ran: {sorted(ran)}; missing {sorted(expected - set(ran))}"
    compared = int(re.search(r"^compared (\d+)$", r.stdout, re.M).group(1))
    assert compared >= 4 * CASES  # the 4 dispatchers, and the paths that are functions of their own


def test_each_header_compiles_on_its_own(tmp_path):
    """A header's #include lines bring in everything it uses."""
    sources = []
    for h in headers():
        src = tmp_path / f"alone_{h[:-2]}.c"
        src.write_text(f'#include "{h}"\nint et_dummy_symbol;\n')
        sources.append(str(src))
    r = subprocess.run(
        ["gcc", *STRICT, "-Wmissing-prototypes", f"-I{RUNTIME}", "-c", *sources],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr


def test_pasted_in_order_the_headers_read_no_other_file(tmp_path):
    """As the generated model.c pastes them: every #include of a runtime header is skipped by its
    guard, so the file compiles where no runtime header is in reach."""
    src = tmp_path / "pasted.c"
    src.write_text("\n".join((RUNTIME / h).read_text() for h in headers()) + "\nint et_dummy_symbol;\n")
    r = subprocess.run(
        ["gcc", *STRICT, "-H", "-c", str(src), "-o", str(tmp_path / "pasted.o")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "et_" not in "".join(line for line in r.stderr.splitlines() if line.startswith(".")), r.stderr


def test_header_order_follows_the_includes():
    order = headers()
    assert sorted(order) == sorted(p.name for p in RUNTIME.glob("*.h"))
    for h in order:
        for used in re.findall(r'^#include "(et_\w+\.h)"', (RUNTIME / h).read_text(), re.M):
            assert order.index(used) < order.index(h), (used, h)
    assert headers("et_conv.h") == ("et_common.h", "et_linalg.h", "et_conv.h")
    with pytest.raises(ValueError, match="et_nothing.h"):
        headers("et_nothing.h")
