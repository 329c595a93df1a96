"""A wheel holds the packages pyproject.toml lists, not those the editable install finds: a package
of compiler/ missing from the list imports here and fails in a non-editable install."""

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_compiler_is_listed_in_pyproject():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["edgetrain"] == "compiler"
    compiler = ROOT / "compiler"
    found = {
        ".".join(("edgetrain", *init.parent.relative_to(compiler).parts)) for init in compiler.rglob("__init__.py")
    }
    assert found, "no package found under compiler/"
    assert found - set(setuptools["packages"]) == set()
