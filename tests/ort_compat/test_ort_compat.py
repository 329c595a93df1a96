"""ONNX Runtime 1.19's own training API tests, unmodified, against edgetrain (issue 21).

The test files are not in this repository: fetch orttraining_test_ort_apis_py_bindings.py and
orttraining_test_ort_apis_onnxblock.py from microsoft/onnxruntime
(orttraining/orttraining/test/python/, tag v1.19.2; MIT licensed, keep its LICENSE with them) into a
folder and point EDGETRAIN_ORT_TESTS at it. Each file runs in a pytest subprocess with ort_shim as a
plugin, which maps onnxruntime.training.* to edgetrain and knows the expected failures; a
subprocess so that the mapped names never leak into this session's other tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ort_expected import EXPECTED_FAILURES, NOT_RUN, ONNXBLOCK, PY_BINDINGS

HERE = Path(__file__).parent
HOW = (
    "set EDGETRAIN_ORT_TESTS to a folder holding ONNX Runtime v1.19.2's "
    f"orttraining/orttraining/test/python/{PY_BINDINGS} and {ONNXBLOCK} (microsoft/onnxruntime on GitHub)"
)
TIME_LIMIT = 1500  # seconds for one file's run; the py_bindings file compiles about thirty trainers


def _ort_tests_dir() -> Path:
    folder = os.environ.get("EDGETRAIN_ORT_TESTS")
    if not folder:
        pytest.skip(f"ONNX Runtime's training tests are not vendored here: {HOW}")
    missing = [name for name in (PY_BINDINGS, ONNXBLOCK) if not (Path(folder) / name).is_file()]
    if missing:
        pytest.fail(f"EDGETRAIN_ORT_TESTS={folder} lacks {', '.join(missing)}: {HOW}")
    return Path(folder)


def _run(test_file: Path, work: Path) -> dict:
    """Run ORT's test file under the shim; the shim's JSON: each test's outcome, the tests not run."""
    (work / "pytest.ini").write_text("[pytest]\n")  # none of this repository's options or conftest
    results = work / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env.update(
        ORT_COMPAT_RESULTS=str(results),
        PYTHONDONTWRITEBYTECODE="1",  # nothing written by the ORT files
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(work / "pytest.ini"),
        "--rootdir",
        str(test_file.parent),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:logging",
        "-p",
        "ort_shim",
        "-q",
        "--tb=short",
        "-W",
        "ignore",
        str(test_file),
    ]
    run = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=TIME_LIMIT)
    if not results.is_file():
        pytest.fail(
            f"pytest on {test_file.name} wrote no results (exit {run.returncode}):\n{run.stdout[-3000:]}"
            f"{run.stderr[-3000:]}"
        )
    report = json.loads(results.read_text())
    report["output"] = run.stdout
    return report


def _summary(name: str, report: dict) -> str:
    counts = Counter(test["outcome"] for test in report["tests"])
    reasons = Counter(test["reason"] for test in report["tests"] if test["outcome"] == "xfailed")
    lines = [
        f"{name}: {counts['passed']} passed, {counts['xfailed']} expected failures, "
        f"{counts['failed']} unexpected failures, {counts['skipped']} skipped, "
        f"{len(report['not_run'])} not run"
    ]
    lines += [f"  expected failure x{n}: {reason}" for reason, n in reasons.items()]
    lines += [
        f"  UNEXPECTED {test['name']}: {test['message']}" for test in report["tests"] if test["outcome"] == "failed"
    ]
    lines += [f"  not run {test}: {reason}" for _, test, reason in report["not_run"]]
    return "\n".join(lines)


@pytest.mark.parametrize("file_name", [PY_BINDINGS, ONNXBLOCK])
def test_ort_training_tests_pass_against_edgetrain(file_name, tmp_path, figure):
    report = _run(_ort_tests_dir() / file_name, tmp_path)
    summary = _summary(file_name, report)
    figure(summary.replace("\n", "\n    "))
    outcomes = Counter(test["outcome"] for test in report["tests"])
    assert outcomes["failed"] == 0, f"unexpected failures:\n{summary}\n{report['output'][-6000:]}"
    assert outcomes["passed"] > 0 and not report["listed_but_absent"], (
        f"ORT's file has changed (none passed, or listed tests are gone: {report['listed_but_absent']})"
    )
    assert outcomes["skipped"] == 0, f"tests skipped:\n{summary}"
    assert outcomes["xfailed"] == len(EXPECTED_FAILURES[file_name]), summary
    assert {test.split("[")[0] for _, test, _ in report["not_run"]} == set(NOT_RUN.get(file_name, {})), summary
