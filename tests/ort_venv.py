"""ONNX Runtime training 1.19.2 in its own venv (make bench/.venv-ort/.installed): its wheel brings an
`onnxruntime` module that would shadow the inference package the tests import, so tests run it as a
separate interpreter."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORT_PYTHON = ROOT / "bench" / ".venv-ort" / "bin" / "python"


def ort_python() -> Path:
    """The venv's interpreter: installed on CI, else the test skips, saying how to install it."""
    if not ORT_PYTHON.exists():
        if not os.environ.get("CI"):
            pytest.skip("ONNX Runtime training 1.19.2 is not installed: make bench/.venv-ort/.installed")
        subprocess.run(["make", "bench/.venv-ort/.installed"], cwd=ROOT, check=True, capture_output=True)
    return ORT_PYTHON
