"""The generated C under dynamic checkers.

1. The files of the C test tier that reach every kernel family and every C API call (sanitized.py)
   run with every trainer built under AddressSanitizer and UndefinedBehaviorSanitizer
   (EDGETRAIN_SANITIZE=1, compiler/host/build.py) by clang (or gcc), its ASan runtime preloaded
   into Python; any report fails the run. A run that holds this test runs them here only, but for
   the kernel files (tests/conftest.py). Two canaries show first that the setup stops at what it
   is there for.
2. One trainer, linked into a standalone program that calls its whole API, runs under valgrind's
   memcheck.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sanitize.sanitized import DESELECT, SANITIZED, compiler_file, sanitizer_compiler

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent


def _sanitizer_env(logs: Path) -> dict[str, str]:
    """The environment of the sanitizer pass, its reports written under `logs`."""
    found = sanitizer_compiler()
    if found is None:
        pytest.skip(
            "no AddressSanitizer runtime: install the Debian packages clang and libclang-rt-dev (or gcc's libasan8)"
        )
    cc, libasan = found
    libstdcxx = compiler_file("libstdc++.so", cc)
    logs.mkdir()
    return dict(
        os.environ,
        EDGETRAIN_SANITIZE="1",
        CC=cc,
        # ASan must be first in the process; libstdc++ too, or ASan cannot intercept C++ throws of
        # libraries loaded later (torch).
        LD_PRELOAD=" ".join(p for p in (libasan, libstdcxx) if p),
        # Python itself does not free at exit. No symbolizer: the trainer's library is a deleted
        # copy that it could not read, and the llvm-symbolizer it starts outlives a failed run,
        # holding its output open.
        ASAN_OPTIONS=f"detect_leaks=0:symbolize=0:log_path={logs}/asan",
        UBSAN_OPTIONS=f"print_stacktrace=1:symbolize=0:log_path={logs}/ubsan",
    )


# Libraries in the form of a trainer's that read past a static array, seen by each sanitizer: UBSan
# checks an index into an array of known bounds, ASan every access through a pointer.
CANARIES = {
    "out of bounds": "int model_canary(int i) { return values[i]; }",
    "global-buffer-overflow": "int model_canary(int i) { const int *p = values; return p[i]; }",
}


@pytest.mark.skipif(os.environ.get("EDGETRAIN_SANITIZE") == "1", reason="already inside the sanitizer pass")
@pytest.mark.parametrize("report", CANARIES)
def test_the_pass_stops_at_an_out_of_bounds_read(report, tmp_path):
    """The pass's setup catches what it is there for: a library built by load_library in its
    environment, read out of bounds, stops Python with the sanitizer's report."""
    logs = tmp_path / "logs"
    env = dict(_sanitizer_env(logs), EDGETRAIN_CACHE=str(tmp_path / "cache"))
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "model.h").write_text("/* declarations-begin */ int model_canary(int i); /* declarations-end */\n")
    (canary / "model.c").write_text(f'#include "model.h"\nstatic int values[4];\n{CANARIES[report]}\n')
    script = "import sys; from edgetrain.host.build import load_library; load_library(sys.argv[1])[1].model_canary(4)"
    run = subprocess.run([sys.executable, "-c", script, str(canary)], cwd=ROOT, env=env, capture_output=True, text=True)
    # ASan writes to its log; UBSan's report, in the same process, goes to stderr
    reports = "\n".join(p.read_text() for p in sorted(logs.iterdir())) + run.stderr
    assert run.returncode != 0 and report in reports, reports[-4000:]


@pytest.mark.skipif(os.environ.get("EDGETRAIN_SANITIZE") == "1", reason="already inside the sanitizer pass")
def test_c_tier_under_asan_and_ubsan(tmp_path):
    logs = tmp_path / "logs"
    env = _sanitizer_env(logs)
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
