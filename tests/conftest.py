import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # shared helpers: gradcheck, models
sys.path.insert(1, str(Path(__file__).parent.parent / "examples" / "models"))  # reference models: mlperf_tiny


@pytest.fixture(autouse=True, scope="session")
def _build_cache(tmp_path_factory):
    """Compiled trainers go to a per-session cache, not the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGETRAIN_CACHE", str(tmp_path_factory.mktemp("edgetrain-cache")))
    yield
    mp.undo()


@pytest.fixture
def figure(record_property):
    """figure(text): a measured figure the test prints at the end of the run, even under -q and from
    pytest-xdist's workers (it travels in the test's report)."""
    return lambda text: record_property("figure", text)


def pytest_terminal_summary(terminalreporter):
    lines = [f"{report.nodeid.split('::')[-1]}: {value}" for report in terminalreporter.stats.get("passed", [])
             for key, value in report.user_properties if key == "figure"]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)
