"""The speed benchmark runs end to end on the smallest model, through the Python API and the C driver
(no timing is asserted: the figures depend on the machine)."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench"


def test_speed_benchmark_times_the_python_api_and_the_c_driver(tmp_path):
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, str(BENCH / "speed.py"), "--quick", "--systems", "python,c",
                          "--models", "mlp", "--batches", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(out.read_text())["results"]["mlp/2"]
    for system in ("python", "c"):
        assert results[system]["ms"] > 0 and results[system]["rss_mb"] > 0
    assert results["python"]["rss_mb"] > results["c"]["rss_mb"]  # the interpreter, numpy and onnx
    assert "| mlp | 2 |" in run.stdout
