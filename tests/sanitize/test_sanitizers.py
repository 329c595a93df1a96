"""The generated C under dynamic checkers.

1. The files of the C test tier that reach every kernel family and every C API call run a second
   time with every trainer built under AddressSanitizer and UndefinedBehaviorSanitizer
   (EDGETRAIN_SANITIZE=1, compiler/host/build.py), libasan preloaded into Python; any report fails
   the run.
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


# The C tier's files that run sanitized: every kernel family and every C API call. The others run
# whole models through kernels these reach (imports, accuracy, ONNX Runtime's API), compile without
# running, or drive QEMU or Flower's processes; the whole tier ran sanitized until it took 23 of
# the suite's 54 minutes on a 2-core machine.
SANITIZED = [
    "tests/c/test_kernel_references.py",  # every fast path of the product and the convolutions, random shapes
    "tests/c/test_runtime_kernels.py",  # the other kernels on their own, over sweeps of sizes
    "tests/c/test_api.py",
    "tests/c/test_demo.py",
    "tests/c/test_api_misuse.py",  # every C API call with bad arguments
    "tests/c/test_checkpoint_roundtrips.py",
    "tests/c/test_checkpoint_robustness.py",  # damaged and forged checkpoints through the C parser
    "tests/c/test_flash_slots.py",
    "tests/c/test_frozen_writable.py",
    "tests/c/test_non_finite.py",
    "tests/c/test_nothing_to_train.py",
    "tests/c/test_export_federated.py",
    "tests/c/test_dynamic_batch.py",  # every batch from 1 to the compiled one: the arena's batch expressions
    # every op family's gradient cases
    "tests/c/test_gradients.py",  # elementwise, activations, reductions, products
    "tests/c/test_gradients_conv.py",  # convolutions and pooling, 1-D to 3-D, every padding and stride
    "tests/c/test_gradients_norm.py",  # normalizations, Pad, Resize
    "tests/c/test_gradients_more.py",
    "tests/c/test_gradients_extra_ops.py",
    "tests/c/test_gradients_function_ops.py",
    "tests/c/test_gradients_indexing_ops.py",  # gather, scatter, slicing: indices read from tensors
    "tests/c/test_gradients_rnn.py",
    "tests/c/test_gradients_sequence.py",
    "tests/c/test_losses.py",
    "tests/c/test_random_ops.py",
    "tests/c/test_relu_mask.py",
    "tests/c/test_optimizers.py",
    "tests/c/test_int8_layers.py",
    "tests/c/test_int8_qas.py",
    "tests/c/test_integer_tensors.py",
]
# Within them, compile-only checks run no C, and the normal pass compiles the same.
DESELECT = [
    "tests/c/test_runtime_kernels.py::test_every_kernel_instantiates_without_warnings",
    "tests/c/test_runtime_kernels.py::test_headers_compile_for_cortex_m4",
]


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
    workers = os.cpu_count() or 1
    command = [
        sys.executable,
        "-m",
        "pytest",
        *SANITIZED,
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        f"--basetemp={tmp_path}/run",
        *(f"--deselect={d}" for d in DESELECT),
        # a worker per core, each taking whole files in this order (their compiled fixtures are built once)
        *(["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"] if workers > 1 else []),
    ]
    run = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reports = "\n".join(p.read_text()[:4000] for p in sorted(logs.iterdir()))
    tail = "\n".join(run.stdout.splitlines()[-15:])
    assert not reports, "sanitizer reports:\n" + reports + "\n" + tail
    assert run.returncode == 0, f"the C tier failed under the sanitizers:\n{tail}"
    print(tail.splitlines()[-1])


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
