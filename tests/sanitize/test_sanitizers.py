"""The generated C under dynamic checkers.

1. The whole C test tier (tests/c) runs a second time with every trainer built under
   AddressSanitizer and UndefinedBehaviorSanitizer (EDGETRAIN_SANITIZE=1, compiler/host/build.py),
   libasan preloaded into Python; any report fails the run.
2. One trainer, linked into a standalone program that calls its whole API, runs under valgrind's
   memcheck.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent


def _gcc_file(name: str) -> str | None:
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) else None


# Flower's example runs its trainers in SuperNode processes of its own; the same trainers (and the
# federated C calls) run in-process, sanitized, in test_demo.py and test_export_federated.py.
# The bench's tests run QEMU, whose coroutines (swapcontext) ASan warns about once preloaded; their
# trainers are the digits MLP and the core MLP, which test_demo.py and test_api.py run sanitized.
# Compile-only checks run no C, and the normal pass compiles the same. Training to an accuracy or
# over hundreds of steps repeats calls whose every path runs sanitized in the same models' one-step
# tests (test_one_step_matches_pytorch, the QDQ and int8 tests beside the fine-tuning).
DESELECT = [
    "tests/c/test_examples.py::test_federated_example_runs_on_flowers_deployment_engine",
    "tests/c/test_bench_speed.py::test_every_system_trains_the_same_model_and_its_flops_and_instructions_count",
    "tests/c/test_bench_instructions.py::test_minstret_count_agrees_with_a_trace",
    "tests/c/test_runtime_kernels.py::test_every_kernel_instantiates_without_warnings",
    "tests/c/test_runtime_kernels.py::test_headers_compile_for_cortex_m4",
    "tests/c/test_quantized_models.py::test_int8_fine_tuning_is_within_a_point_of_float32",
    "tests/c/test_mlperf_tiny.py::test_loss_decreases_over_200_steps",
    "tests/c/test_digits_cnn.py::test_digits_cnn_reaches_97_percent_held_out",
]


def _groups(n: int) -> list[list[str]]:
    """The C tier's files in n groups of similar size, run side by side."""
    files = sorted((ROOT / "tests" / "c").glob("test_*.py"), key=lambda p: -p.stat().st_size)
    groups: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for path in files:
        i = sizes.index(min(sizes))
        groups[i].append(str(path.relative_to(ROOT)))
        sizes[i] += path.stat().st_size
    return [g for g in groups if g]


@pytest.mark.skipif(os.environ.get("EDGETRAIN_SANITIZE") == "1", reason="already inside the sanitizer pass")
def test_c_tier_under_asan_and_ubsan(tmp_path):
    libasan, libstdcxx = _gcc_file("libasan.so"), _gcc_file("libstdc++.so")
    if libasan is None:
        pytest.skip("gcc's AddressSanitizer runtime not found: install the Debian package libasan8 (gcc-12 brings it)")
    logs = tmp_path / "logs"
    logs.mkdir()
    env = dict(
        os.environ,
        EDGETRAIN_SANITIZE="1",
        # ASan must be first in the process; libstdc++ too, or ASan cannot intercept C++ throws of
        # libraries loaded later (torch).
        LD_PRELOAD=" ".join(p for p in (libasan, libstdcxx) if p),
        ASAN_OPTIONS=f"detect_leaks=0:log_path={logs}/asan",  # Python itself does not free at exit
        UBSAN_OPTIONS=f"print_stacktrace=1:log_path={logs}/ubsan",
    )
    runs = []
    for i, files in enumerate(_groups(min(4, os.cpu_count() or 1))):
        command = [
            sys.executable,
            "-m",
            "pytest",
            *files,
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path}/run{i}",
            *(f"--deselect={d}" for d in DESELECT),
        ]
        runs.append(
            subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    outputs = [run.communicate()[0] for run in runs]
    reports = "\n".join(p.read_text()[:4000] for p in sorted(logs.iterdir()))
    tails = ["\n".join(out.splitlines()[-15:]) for out in outputs]
    assert not reports, "sanitizer reports:\n" + reports + "\n" + "\n".join(tails)
    for run, tail in zip(runs, tails):
        assert run.returncode == 0, f"the C tier failed under the sanitizers:\n{tail}"
    print(" | ".join(tail.splitlines()[-1] for tail in tails))


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not found: install the Debian package valgrind")
def test_one_trainer_under_valgrind(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "c"))
    from test_non_finite import BATCH, bn_dropout_model  # BatchNorm buffers, dropout, frozen and trainable

    from edgetrain import artifacts

    out = artifacts.generate_artifacts(
        bn_dropout_model(), artifact_directory=tmp_path / "out", frozen_params=["fc0.bias"]
    )
    exe = tmp_path / "driver"
    subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(out),
            f"-DX_SIZE={BATCH * 5}",
            f"-DN_LABELS={BATCH}",
            f"-DY_SIZE={BATCH * 3}",
            str(HERE / "valgrind_driver.c"),
            str(out / "model.c"),
            "-lm",
            "-o",
            str(exe),
        ],
        check=True,
    )
    result = subprocess.run(
        [
            "valgrind",
            "--error-exitcode=1",
            "--leak-check=full",
            "--errors-for-leak-kinds=all",
            "--track-origins=yes",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout
    assert "ERROR SUMMARY: 0 errors" in result.stderr
    print(result.stdout.strip(), "|", result.stderr.strip().splitlines()[-1])
