"""The personalization, federated-learning and text examples, end to end (the federated one reduced to
2 clients and 2 rounds per strategy; `make federated` runs the full one)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_personalization_improves_the_users_accuracy(tmp_path):
    sys.path.insert(0, str(EXAMPLES / "personalization"))
    try:
        import run as personalization
    finally:
        sys.path.pop(0)
    r = personalization.run(tmp_path)
    assert r["user_after"] >= r["user_before"] + 0.1
    assert r["original_before"] >= 0.9
    assert r["ram_head"] < r["ram_full"] / 10  # only the head's parameters, gradients and momentum


def _our_processes(flwr_home: Path) -> list[int]:
    """Processes whose environment points at this run's Flower home."""
    marker = f"FLWR_HOME={flwr_home}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if (
                marker in environ.read_bytes().split(b"\0")
                and (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            ):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_federated_example_runs_on_flowers_deployment_engine(tmp_path):
    pytest.importorskip("flwr")
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "federated" / "run.py"),
            "--clients",
            "2",
            "--rounds",
            "2",
            "--local-epochs",
            "2",
            "--strategy",
            "fedavg,fedadam",
            "--out",
            str(tmp_path),
            "--timeout",
            "280",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    rounds = [float(line.split()[-1]) for line in lines if re.fullmatch(r"round \d+ accuracy [0-9.]+", line)]
    assert len(rounds) == 4 and min(rounds[1], rounds[3]) > 0.5, result.stdout
    assert sum(line.startswith("clients' held-out digits: accuracy") for line in lines) == 2, result.stdout
    assert any(line.startswith("fedadam: final global accuracy") for line in lines)
    assert _our_processes(tmp_path / "flwr") == []  # SuperLink, SuperNodes and their children stopped


def test_text_example_fits_the_new_style_of_writing(tmp_path):
    """Reduced run: pre-train briefly in PyTorch, fine-tune in the generated C on the Psalms (KJV);
    the held-out Psalms' perplexity, measured by the C, goes down."""
    folder = EXAMPLES / "text"
    spec = importlib.util.spec_from_file_location("text_example", folder / "run.py")
    text = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))  # run.py imports tinygpt beside it
    try:
        spec.loader.exec_module(text)
    finally:
        sys.path.pop(0)
    r = text.run(tmp_path, pretrain_steps=80, finetune_steps=30, batch=8, context=32)
    assert r["psalms_after"] < 0.95 * r["psalms_before"], r
