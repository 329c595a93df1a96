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
