"""A pytest plugin (loaded with `-p ort_shim` in the subprocess test_ort_compat.py starts) that runs
ONNX Runtime 1.19's own training API tests, unmodified, against edgetrain.

On import it maps onnxruntime.training, .api, .artifacts and .onnxblock (with its submodules) to
edgetrain's modules in sys.modules; the installed onnxruntime package stays what it is, for the
InferenceSession, OrtValue and SessionOptions the tests take from it. torch.onnx.export gets back the
default of the torch those tests were written for (export_with_torchscript_by_default). Then it:

- deselects the tests of ORT's onnxblock file that use onnxblock beyond the subset edgetrain
  implements (ort_expected.NOT_RUN, each with its reason);
- turns a listed expected failure (ort_expected.EXPECTED_FAILURES) into an expected-failure outcome only when it
  fails with the listed message; failing otherwise, or passing, is reported as a failure (a stale
  entry fails the run as surely as a new bug does);
- writes every test's outcome as JSON to $ORT_COMPAT_RESULTS for the calling test to count.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import sys
import types

import pytest
import torch.onnx

import edgetrain.api
import edgetrain.artifacts
import edgetrain.onnxblock
import onnxruntime

from ort_expected import OPTIM_REASON, EXPECTED_FAILURES, NOT_RUN


class _Unavailable:
    """Stands for an onnxblock.optim class edgetrain does not have. ORT's onnxblock test file builds
    ClipGradNorm(2.5) in a parametrize decorator, so the name must exist for the file to import at
    all; the tests that use it are in NOT_RUN, and any use says why."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"onnxblock.optim.{type(self).__name__}: {OPTIM_REASON}")


def _optim_stand_in() -> types.ModuleType:
    optim = types.ModuleType("onnxruntime.training.onnxblock.optim", _Unavailable.__doc__)
    for name in ("AdamW", "SGD", "ClipGradNorm"):
        setattr(optim, name, type(name, (_Unavailable,), {}))
    return optim


def _onnxblock_facade(optim: types.ModuleType) -> types.ModuleType:
    """onnxruntime.training.onnxblock: edgetrain.onnxblock's names (the same objects), plus optim."""
    facade = types.ModuleType("onnxruntime.training.onnxblock", edgetrain.onnxblock.__doc__)
    facade.__dict__.update({k: v for k, v in vars(edgetrain.onnxblock).items() if not k.startswith("__")})
    facade.__path__ = []  # a package, so `import onnxruntime.training.onnxblock.loss` resolves
    facade.optim = optim
    return facade


def install() -> None:
    """Map onnxruntime.training.* to edgetrain in sys.modules (the real onnxruntime stays)."""
    if hasattr(onnxruntime, "training") or "onnxruntime.training" in sys.modules:
        raise RuntimeError("this onnxruntime already has a training package: the shim would shadow it")
    optim = _optim_stand_in()
    onnxblock = _onnxblock_facade(optim)
    training = types.ModuleType("onnxruntime.training", "edgetrain, under ONNX Runtime training's names")
    training.__path__ = []
    training.api, training.artifacts, training.onnxblock = edgetrain.api, edgetrain.artifacts, onnxblock
    modules = {
        "onnxruntime.training": training,
        "onnxruntime.training.api": edgetrain.api,
        "onnxruntime.training.artifacts": edgetrain.artifacts,
        "onnxruntime.training.onnxblock": onnxblock,
        "onnxruntime.training.onnxblock.optim": optim,
    }
    for name, module in list(sys.modules.items()):  # edgetrain.onnxblock's submodules: loss, blocks, ...
        if name.startswith("edgetrain.onnxblock."):
            modules["onnxruntime.training.onnxblock." + name.split(".", 2)[2]] = module
    sys.modules.update(modules)
    onnxruntime.training = training


def export_with_torchscript_by_default() -> None:
    """ORT 1.19.2's tests were written for torch 2.4, whose torch.onnx.export is the TorchScript
    exporter; from torch 2.9 the default is dynamo=True, which refuses their dynamic_axes (every
    dimension named dynamic, the feature size too) before any ONNX exists. Restore the default they
    assume; a caller that passes dynamo gets what it asks for."""
    export = torch.onnx.export
    if "dynamo" not in inspect.signature(export).parameters:
        return

    @functools.wraps(export)
    def export_as_torch_2_4(*args, dynamo=False, **kwargs):
        return export(*args, dynamo=dynamo, **kwargs)

    torch.onnx.export = export_as_torch_2_4


install()
export_with_torchscript_by_default()


_results: list[dict] = []  # every test's outcome, in run order
_not_run: list[list[str]] = []  # [file, test, reason] of the deselected tests
_collected: set[tuple[str, str]] = set()


def _key(item) -> tuple[str, str]:
    return os.path.basename(str(item.path)), item.name


def _not_run_reason(item) -> str | None:
    file, name = _key(item)
    return NOT_RUN.get(file, {}).get(name.split("[")[0])


def pytest_collection_modifyitems(config, items):
    dropped = [item for item in items if _not_run_reason(item)]
    _not_run.extend([*_key(item), _not_run_reason(item)] for item in dropped)
    items[:] = [item for item in items if not _not_run_reason(item)]
    _collected.update(_key(item) for item in items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    expected = EXPECTED_FAILURES.get(_key(item)[0], {}).get(item.name)
    if expected is None or report.when != "call":
        return
    reason, pattern = expected
    if report.passed:
        report.outcome = "failed"
        report.longrepr = f"[XPASS(strict)] listed as an expected failure ({reason}), but it passes: drop the entry"
    elif report.failed:
        message = f"{call.excinfo.typename}: {call.excinfo.value}"
        if re.search(pattern, message):
            report.outcome = "skipped"
            report.wasxfail = reason
        else:
            report.longrepr = (
                f"listed as an expected failure ({reason}; message matching /{pattern}/), "
                f"but it fails otherwise:\n{report.longrepr}"
            )


def pytest_runtest_logreport(report):
    """One entry per test: its call phase's outcome, or the setup/teardown phase that failed."""
    if report.when != "call" and not report.failed:
        return
    entry = {"file": os.path.basename(report.location[0]), "name": report.nodeid.split("::")[-1]}
    if hasattr(report, "wasxfail"):
        entry.update(outcome="xfailed", reason=report.wasxfail)
    elif report.passed:
        entry.update(outcome="passed")
    elif report.failed:
        entry.update(outcome="failed", message=_one_line(report))
    else:
        entry.update(outcome="skipped", reason=_one_line(report))
    _results.append(entry)


def _one_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return " ".join(text.split())[:500]


def pytest_sessionfinish(session):
    path = os.environ.get("ORT_COMPAT_RESULTS")
    if not path:
        return
    files_run = {file for file, _ in _collected}
    stale = sorted(
        f"{file}::{name}"
        for file, names in EXPECTED_FAILURES.items()
        if file in files_run
        for name in names
        if (file, name) not in _collected
    )
    with open(path, "w", encoding="utf-8") as out:
        json.dump(
            {"tests": _results, "not_run": _not_run, "listed_but_absent": stale, "exitstatus": int(session.exitstatus)},
            out,
            indent=1,
        )


def pytest_collectreport(report):
    """A file that does not import (a name the shim lacks, say) is a failure of its own."""
    if report.failed:
        _results.append(
            {
                "file": os.path.basename(report.nodeid.split("::")[0]),
                "name": "<collection>",
                "outcome": "failed",
                "message": _one_line(report),
            }
        )
