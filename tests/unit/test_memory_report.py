"""The memory report: per function, the labelled arena blocks agree with the planned arena and its
liveness lower bound; report.txt shows the same figures; the occupancy plot is written when asked for."""

import json
import re
import sys

import onnx
import pytest

from edgetrain import artifacts, cli
from edgetrain.errors import EdgetrainError
from edgetrain.memory import KINDS
from edgetrain.memory.report import NO_MATPLOTLIB, can_plot
from models import mlp_bn


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return artifacts.generate_artifacts(
        mlp_bn(),
        optimizer=artifacts.OptimType.AdamW,
        batch_size=4,
        artifact_directory=tmp_path_factory.mktemp("report") / "out",
        memory_plot=can_plot(),
    )


@pytest.fixture(scope="module")
def report(out):
    return json.loads((out / "report.json").read_text())


def test_blocks_fit_the_arena_and_never_share_live_bytes(report):
    assert set(report["functions"]) == {"train_step", "eval_step", "infer"}
    for name, f in report["functions"].items():
        arena, bound, blocks = f["arena_bytes"], f["liveness_lower_bound_bytes"], f["blocks"]
        assert arena == report["arena_by_function_bytes"][name] and bound == report["liveness_lower_bound_bytes"][name]
        assert blocks and {b["kind"] for b in blocks} <= set(KINDS)
        assert 0 < bound <= arena <= report["arena_bytes"]
        for b in blocks:
            assert 0 <= b["offset"] and b["offset"] + b["size"] <= arena and b["start"] <= b["end"], b
        for i, a in enumerate(blocks):
            for b in blocks[i + 1 :]:
                live_together = a["start"] <= b["end"] and b["start"] <= a["end"]
                share_bytes = a["offset"] < b["offset"] + b["size"] and b["offset"] < a["offset"] + a["size"]
                assert not (live_together and share_bytes), (name, a, b)
        live = [
            [b["size"] for b in blocks if b["start"] <= point <= b["end"]]
            for point in range(max(b["end"] for b in blocks) + 1)
        ]
        # The bound counts each block at its size rounded up to ALIGN floats (16 bytes).
        assert max(map(sum, live)) <= bound <= max(sum(size + 12 for size in sizes) for sizes in live)
        assert sum(f["peak_bytes_by_kind"].values()) == max(map(sum, live))


def test_training_blocks_are_labelled(report):
    kinds = {b["kind"] for b in report["functions"]["train_step"]["blocks"]}
    assert {"activation", "gradient"} <= kinds
    assert {b["kind"] for b in report["functions"]["infer"]["blocks"]} == {"activation"}


def test_table_shows_arena_beside_lower_bound(out, report):
    text = (out / "report.txt").read_text()
    assert report["ram_bytes"] == sum(report["ram_breakdown"].values())
    assert report["ram_breakdown"]["other"] > 0  # BatchNormalization's running statistics, the counters
    assert f"total RAM {report['ram_bytes']:,} B" in " ".join(text.split())
    for name, f in report["functions"].items():
        row = next(line.split() for line in text.splitlines() if line.startswith(name + " "))
        ratio = f["arena_bytes"] / f["liveness_lower_bound_bytes"]
        assert row[1:4] == [f"{f['arena_bytes']:,}", f"{f['liveness_lower_bound_bytes']:,}", f"{ratio:.3f}"]
        assert row[4:] == [f"{f['peak_bytes_by_kind'][k]:,}" for k in KINDS]


def test_plot_is_written_next_to_the_c_when_asked_for(out, tmp_path, capsys):
    """generate_artifacts(memory_plot=True) and `edgetrain compile` draw it; the Python API by
    default does not, and removes the plot of an earlier build it would contradict."""
    pytest.importorskip("matplotlib")
    png = (out / "memory.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    (out / "memory.png").unlink()
    assert cli.main(["report", str(out), "--plot"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out / 'memory.png'}"
    assert (out / "memory.png").read_bytes().startswith(b"\x89PNG")

    onnx.save(mlp_bn(), tmp_path / "m.onnx")
    assert cli.main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "cli"), "--batch-size", "4"]) == 0
    assert (tmp_path / "cli" / "memory.png").read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.rstrip().endswith("report.txt memory.png")
    plain = artifacts.generate_artifacts(mlp_bn(), batch_size=4, artifact_directory=tmp_path / "cli")
    assert (plain / "report.json").exists() and not (plain / "memory.png").exists()


def test_without_matplotlib_plot_is_one_clear_error(out, tmp_path, monkeypatch, capsys):
    for module in ("matplotlib", "matplotlib.backends.backend_agg", "matplotlib.figure", "matplotlib.ticker"):
        monkeypatch.setitem(sys.modules, module, None)  # import of any of them now fails
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", str(out), "--plot"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err.startswith("edgetrain: error: ") and "pip install 'edgetrain[report]'" in err
    # Asking the Python API for a plot fails before compiling; the command compiles without one.
    with pytest.raises(EdgetrainError, match=re.escape(NO_MATPLOTLIB)):
        artifacts.generate_artifacts(mlp_bn(), batch_size=4, artifact_directory=tmp_path / "api", memory_plot=True)
    assert not (tmp_path / "api").exists()
    onnx.save(mlp_bn(), tmp_path / "m.onnx")
    assert cli.main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "cli"), "--batch-size", "4"]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"report.txt ({NO_MATPLOTLIB})")
    assert (tmp_path / "cli" / "report.json").exists() and not (tmp_path / "cli" / "memory.png").exists()


def test_fused_update_keeps_no_gradients(report, tmp_path):
    fused = artifacts.generate_artifacts(
        mlp_bn(),
        optimizer=artifacts.OptimType.AdamW,
        batch_size=4,
        fused_update=True,
        artifact_directory=tmp_path / "fused",
    )
    fused_report = json.loads((fused / "report.json").read_text())
    assert (report["update"], fused_report["update"]) == ("accumulate", "fused")
    assert report["ram_breakdown"]["gradients"] == report["ram_breakdown"]["parameters"] > 0
    assert fused_report["ram_breakdown"]["gradients"] == 0
    assert "gradients (fused update: none kept)" in (fused / "report.txt").read_text()


def test_bytes_by_type_split_each_category(report):
    """A float model: every RAM category but the arena in float, as ram_breakdown counts it, and the
    arena's live bytes at train_step's peak split by type (float and the bit masks' uint32_t)."""
    by_type = report["bytes_by_type"]
    for category in ("parameters", "gradients", "optimizer_state"):
        assert by_type[category] == {"float": report["ram_breakdown"][category]}
    peak = report["functions"]["train_step"]["peak_bytes_by_kind"]
    assert sum(by_type["arena_at_peak"].values()) == sum(peak.values())
    assert "int8_t" not in by_type["arena_at_peak"]
    assert by_type["flash_constants"] == {"float": report["flash_constants_bytes"]} or (
        "flash_constants" not in by_type and report["flash_constants_bytes"] == 0
    )
