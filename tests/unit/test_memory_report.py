"""The memory report: per function, the labelled arena blocks agree with the planned arena and its
liveness lower bound; report.txt shows the same figures; the occupancy plot is written."""

import json
import sys

import pytest

from edgetrain import artifacts, cli
from edgetrain.memory import KINDS
from models import mlp_bn


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return artifacts.generate_artifacts(mlp_bn(), optimizer=artifacts.OptimType.AdamW, batch_size=4,
                                        artifact_directory=tmp_path_factory.mktemp("report") / "out")


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
            for b in blocks[i + 1:]:
                live_together = a["start"] <= b["end"] and b["start"] <= a["end"]
                share_bytes = a["offset"] < b["offset"] + b["size"] and b["offset"] < a["offset"] + a["size"]
                assert not (live_together and share_bytes), (name, a, b)
        live = [[b["size"] for b in blocks if b["start"] <= point <= b["end"]]
                for point in range(max(b["end"] for b in blocks) + 1)]
        # The bound counts each block at its size rounded up to ALIGN floats (16 bytes).
        assert max(map(sum, live)) <= bound <= max(sum(size + 12 for size in sizes) for sizes in live)
        assert sum(f["peak_bytes_by_kind"].values()) == max(map(sum, live))


def test_training_blocks_are_labelled(report):
    kinds = {b["kind"] for b in report["functions"]["train_step"]["blocks"]}
    assert {"activation", "gradient"} <= kinds
    assert {b["kind"] for b in report["functions"]["infer"]["blocks"]} == {"activation"}


def test_table_shows_arena_beside_lower_bound(out, report):
    text = (out / "report.txt").read_text()
    assert f"total RAM {report['ram_bytes']:,} B" in " ".join(text.split())
    for name, f in report["functions"].items():
        row = next(line.split() for line in text.splitlines() if line.startswith(name + " "))
        ratio = f["arena_bytes"] / f["liveness_lower_bound_bytes"]
        assert row[1:4] == [f"{f['arena_bytes']:,}", f"{f['liveness_lower_bound_bytes']:,}", f"{ratio:.3f}"]
        assert row[4:] == [f"{f['peak_bytes_by_kind'][k]:,}" for k in KINDS]


def test_plot_is_written_next_to_the_c(out, capsys):
    pytest.importorskip("matplotlib")
    png = (out / "memory.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    (out / "memory.png").unlink()
    assert cli.main(["report", str(out), "--plot"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out / 'memory.png'}"
    assert (out / "memory.png").read_bytes().startswith(b"\x89PNG")


def test_without_matplotlib_plot_is_one_clear_error(out, tmp_path, monkeypatch, capsys):
    for module in ("matplotlib", "matplotlib.backends.backend_agg", "matplotlib.figure", "matplotlib.ticker"):
        monkeypatch.setitem(sys.modules, module, None)  # import of any of them now fails
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", str(out), "--plot"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err.startswith("edgetrain: error: ") and "pip install 'edgetrain[report]'" in err
    # Compiling still writes the report, without a plot.
    plain = artifacts.generate_artifacts(mlp_bn(), batch_size=4, artifact_directory=tmp_path / "plain")
    assert (plain / "report.json").exists() and not (plain / "memory.png").exists()


def test_fused_update_keeps_no_gradients(report, tmp_path):
    fused = artifacts.generate_artifacts(mlp_bn(), optimizer=artifacts.OptimType.AdamW, batch_size=4,
                                         fused_update=True, artifact_directory=tmp_path / "fused")
    fused_report = json.loads((fused / "report.json").read_text())
    assert not report["fused_update"] and fused_report["fused_update"]
    assert report["ram_breakdown"]["gradients"] == report["ram_breakdown"]["parameters"] > 0
    assert fused_report["ram_breakdown"]["gradients"] == 0
    assert "gradients (fused update: none kept)" in (fused / "report.txt").read_text()
