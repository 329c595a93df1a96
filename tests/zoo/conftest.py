def pytest_terminal_summary(terminalreporter):
    """The zoo's table: model x exporter -> result, as the tests recorded it."""
    from zoo.test_zoo import RESULTS

    if not RESULTS:
        return
    terminalreporter.section("model zoo")
    for (model, exporter), result in sorted(RESULTS.items()):
        terminalreporter.write_line(f"{model:20s} {exporter:12s} {result}")
    ok = sum(r.startswith("ok") for r in RESULTS.values())
    terminalreporter.write_line(f"{ok}/{len(RESULTS)} (model, exporter) pairs train and match PyTorch")
