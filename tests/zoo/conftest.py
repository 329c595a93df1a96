import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The zoo's result for a (model, exporter) travels in the test's report, so the table below
    gathers it from pytest-xdist's workers too."""
    report = yield
    from zoo.test_zoo import RESULTS

    params = getattr(item, "callspec", None) and item.callspec.params
    if call.when == "call" and params and (params.get("name"), params.get("exporter")) in RESULTS:
        report.user_properties.append(("zoo", (params["name"], params["exporter"],
                                               RESULTS[params["name"], params["exporter"]])))
    return report


def pytest_terminal_summary(terminalreporter):
    """The zoo's table: model x exporter -> result, as the tests recorded it."""
    results = {(value[0], value[1]): value[2] for reports in terminalreporter.stats.values() for report in reports
               for key, value in getattr(report, "user_properties", []) if key == "zoo"}
    if not results:
        return
    terminalreporter.section("model zoo")
    for (model, exporter), result in sorted(results.items()):
        terminalreporter.write_line(f"{model:20s} {exporter:12s} {result}")
    ok = sum(r.startswith("ok") for r in results.values())
    terminalreporter.write_line(f"{ok}/{len(results)} (model, exporter) pairs train and match PyTorch")
