"""ONNX Runtime training 1.19.2 in its own venv (make bench/.venv-ort/.installed): its wheel brings an
`onnxruntime` module that would shadow the inference package the tests import, so tests run it as a
separate interpreter."""

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORT_PYTHON = ROOT / "bench" / ".venv-ort" / "bin" / "python"
INSTALLED = ROOT / "bench" / ".venv-ort" / ".installed"  # make's stamp, touched once pip is done
LOCK = ROOT / "bench" / ".venv-ort.lock"
INSTALL = ["make", "bench/.venv-ort/.installed"]


def install_in_background() -> subprocess.Popen | None:
    """On CI, where the venv is missing, starts its install and returns the process: the install
    (about a minute, mostly pip) then overlaps the tests run before the first that needs it. The
    install holds the lock that ort_python waits on: it inherits the locked file, whose lock lasts
    until the install and its children have exited. None where the venv is there, off CI, or where
    another run holds the lock (the sanitizer pass's inner run, while its outer run installs)."""
    if INSTALLED.exists() or not os.environ.get("CI"):
        return None
    with LOCK.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        return subprocess.Popen(
            INSTALL,
            cwd=ROOT,
            pass_fds=(lock.fileno(),),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def ort_python() -> Path:
    """The venv's interpreter: installed on CI, else the test skips, saying how to install it. The
    stamp, not the interpreter, says it is ready: the interpreter exists from the install's first
    step, and a pytest-xdist worker that took it then found no onnxruntime in it."""
    if not INSTALLED.exists():
        if not os.environ.get("CI"):
            pytest.skip("ONNX Runtime training 1.19.2 is not installed: make bench/.venv-ort/.installed")
        with LOCK.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker installs (or the run, in the background); the others wait
            if not INSTALLED.exists():
                subprocess.run(INSTALL, cwd=ROOT, check=True, capture_output=True)
    return ORT_PYTHON
