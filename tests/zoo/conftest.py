import pytest


@pytest.fixture(autouse=True)
def quick_build(monkeypatch):
    """The zoo's trainers build at -Og (EDGETRAIN_BUILD=quick, compiler/host/build.py): the same bits
    as the default -O2 build, several times faster to compile for a model of many small nodes, for
    the few steps each runs. The C tier and the targets test the optimized builds."""
    monkeypatch.setenv("EDGETRAIN_BUILD", "quick")


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
