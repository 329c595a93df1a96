from .cases import CASES

_OUTCOMES = {"passed": 0, "ran": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" and "::test_case_matches_onnx[" in report.nodeid:
        _OUTCOMES["ran"] += 1
        _OUTCOMES["passed"] += report.passed


def pytest_terminal_summary(terminalreporter):
    """The conformance figure, printed even under -q."""
    if _OUTCOMES["ran"]:
        excluded = sum(len(cases.excluded) for cases in CASES.values())
        collected = sum(len(cases.listed) for cases in CASES.values())
        terminalreporter.write_line(f"ONNX backend node tests: {_OUTCOMES['passed']} passed of {collected} collected "
                                    f"for supported ops, {excluded} excluded")
