import pytest


@pytest.fixture(autouse=True, scope="module")
def _quick_build(quick_build):
    """The zoo's trainers build quick (tests/conftest.py)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The zoo's result for a (model, exporter) travels in the test's report, so the table that
    tests/conftest.py prints gathers it from pytest-xdist's workers too."""
    report = yield
    from zoo.test_zoo import RESULTS

    params = getattr(item, "callspec", None) and item.callspec.params
    if call.when == "call" and params and (params.get("name"), params.get("exporter")) in RESULTS:
        report.user_properties.append(
            ("zoo", (params["name"], params["exporter"], RESULTS[params["name"], params["exporter"]]))
        )
    return report
