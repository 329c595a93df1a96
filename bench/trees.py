"""The edgetrain of a git revision, or of the working tree, as a directory for PYTHONPATH: what the
benchmarks compare a starting point with (speed.py's c-start, memory.py --start)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def source_tree(revision: str | None, into: Path) -> Path:
    """The edgetrain package of a git revision, or of the working tree as it is now (None), laid out
    for PYTHONPATH (the sub-packages that pyproject.toml maps from the top level put back inside it).
    The run uses such a copy, so that edits made while it runs cannot mix two versions in it."""
    parts = ("compiler", "templates", "runtime_c", "targets")
    if revision:
        archive = subprocess.run(["git", "archive", revision, *parts], cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(into / "src", filter="data")
    else:
        for part in parts:
            shutil.copytree(ROOT / part, into / "src" / part, ignore=shutil.ignore_patterns("__pycache__"))
    package = into / "edgetrain"
    (into / "src" / "compiler").rename(package)
    for part, name in (("templates", "templates"), ("runtime_c", "runtime_c"), ("targets", "target_files")):
        (into / "src" / part).rename(package / name)
    return into
