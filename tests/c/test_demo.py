"""End-to-end: `edgetrain demo` trains digits through the generated C and matches onnxruntime."""

import re

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("tqdm")
pytest.importorskip("onnxruntime")

from edgetrain.demo import run_demo


def test_demo_trains_digits_and_agrees_with_onnxruntime(tmp_path, capsys):
    # tests/conftest.py already points EDGETRAIN_CACHE at a per-session directory
    result = run_demo(epochs=10, directory=tmp_path / "demo")

    assert result["accuracy_before"] < 0.3  # an untrained 10-class model is near chance
    assert result["accuracy_after"] >= 0.95
    assert result["agreement"] == 1.0
    assert len(result["losses"]) == 10 and result["losses"][-1] < result["losses"][0]

    out = capsys.readouterr().out
    assert re.search(r"^held-out accuracy before training: \d+\.\d%$", out, re.M)
    assert re.search(r"^held-out accuracy after 10 epochs: \d+\.\d%$", out, re.M)
    assert re.search(r"^onnxruntime agrees with the generated C on (\d+)/\1 held-out predictions$", out, re.M)
    for name in ("mlp.onnx", "digits_infer.onnx", "trained.ckpt"):
        assert (tmp_path / "demo" / name).is_file()
