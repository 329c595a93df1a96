"""EDGETRAIN_BUILD (compiler/host/build.py): the quick build (-Og) trains to the bits of the default
one (-O2), as the zoo's tests, which build quick, rely on; an unknown mode is refused in one line.
CC=clang (the sanitizer pass's compiler) trains to gcc's bits."""

import shutil

import pytest

from edgetrain import artifacts
from edgetrain.errors import EdgetrainError
from edgetrain.host.build import build_mode_flags
from test_c_unchanged import CASES
from test_used_kernels import _trained


MODELS = ["kws", "mlp-bn-fused", "gru", "transformer"]


def _trained_with(name, variable, values, tmp_path, monkeypatch) -> list[bytes]:
    """The golden-C case `name` trained 3 steps in a build under each value of the environment variable."""
    build, options = CASES[name]
    out = tmp_path / "out"
    artifacts.generate_artifacts(build(tmp_path), artifact_directory=out, **options)
    trained = []
    for value in values:
        monkeypatch.setenv(variable, value)
        trained.append(_trained(out))
    return trained


@pytest.mark.parametrize("name", MODELS)
def test_the_quick_build_trains_to_the_default_builds_bits(name, tmp_path, monkeypatch):
    default, quick = _trained_with(name, "EDGETRAIN_BUILD", ["reproducible", "quick"], tmp_path, monkeypatch)
    assert quick == default


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang not found: install the Debian package clang")
@pytest.mark.parametrize("name", MODELS)
def test_clang_trains_to_gccs_bits(name, tmp_path, monkeypatch):
    """clang's build, with its dialect of the flags and its own vector code, keeps every sum's order."""
    gcc, clang = _trained_with(name, "CC", ["gcc", "clang"], tmp_path, monkeypatch)
    assert clang == gcc


def test_an_unknown_build_mode_is_refused(monkeypatch):
    monkeypatch.setenv("EDGETRAIN_BUILD", "turbo")
    with pytest.raises(
        EdgetrainError, match=r"EDGETRAIN_BUILD='turbo': known build modes are reproducible, fast, quick$"
    ):
        build_mode_flags()
