"""The generated C of a zoo of test models and options, byte for byte, against tests/c/golden_c.json:
a refactor of the compiler's middle (lowering, memory planning, emission) must not change the C it
writes. model.c is hashed from its "/* ---- model ---- */" marker on, so pruning the runtime kernels
it pastes before the marker does not count as a change; model.h, model_weights.h and report.json
(whose memory figures come from the planner) are hashed whole.

An intentional change regenerates the goldens: EDGETRAIN_UPDATE_GOLDEN=1 pytest tests/c/test_c_unchanged.py
(then say in the commit why the C changed)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest

from edgetrain import artifacts
from edgetrain.optim import OptimType
from models import mlp, mlp_bn, weighted_sum

GOLDEN = Path(__file__).with_name("golden_c.json")
UPDATE = os.environ.get("EDGETRAIN_UPDATE_GOLDEN") == "1"
MARKER = "/* ---- model ---- */"
ROOT = Path(__file__).resolve().parents[2]


def _example(relative: str, name: str):
    """An example model's module, loaded from its file (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kws():
    """The KWS DS-CNN with 4 filters: Conv, depthwise Conv, BatchNorm (running statistics), pooling."""
    tiny = _example("examples/models/mlperf_tiny.py", "golden_mlperf_tiny")
    return tiny.export_training(tiny.ds_cnn(filters=4), 2)[0]


def _gru(tmp_path: Path):
    """Embedding -> GRU -> Linear over every position, exported by torch's TorchScript exporter."""
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.rnn, self.head = (
                torch.nn.Embedding(7, 4),
                torch.nn.GRU(4, 5, batch_first=True),
                torch.nn.Linear(5, 3),
            )

        def forward(self, tokens):
            return self.head(self.rnn(self.embed(tokens))[0]).transpose(1, 2)

    torch.manual_seed(0)
    path = tmp_path / "gru.onnx"
    torch.onnx.export(
        Tagger(),
        (torch.zeros(2, 4, dtype=torch.int64),),
        str(path),
        input_names=["tokens"],
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
        dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}},
    )
    return path


def _transformer(tmp_path: Path):
    import torch

    gpt = _example("examples/text/tinygpt.py", "golden_tinygpt")
    torch.manual_seed(0)
    return gpt.export(gpt.TinyGPT(7, 4, dim=8, heads=2, layers=1), 2, 4, tmp_path / "gpt.onnx")


# name -> (model builder taking tmp_path, generate_artifacts options); options None: generate_inference
CASES = {
    "mlp-adamw": (lambda _: mlp(), {}),
    "mlp-sgd-nesterov": (
        lambda _: mlp(),
        dict(optimizer=OptimType.SGD, momentum=0.9, nesterov=True, weight_decay=0.01),
    ),
    "mlp-sgd-plain": (lambda _: mlp(dropout=0.25), dict(optimizer=OptimType.SGD, learning_rate=0.1)),
    "mlp-fused-adamw": (lambda _: mlp(), dict(fused_update=True, weight_decay=0.01)),
    "mlp-fused-sgd": (lambda _: mlp(), dict(fused_update=True, optimizer=OptimType.SGD, momentum=0.5)),
    "mlp-batch1-fused": (lambda _: mlp(), dict(fused_update=True, batch_size=1)),  # outer-product updates
    "mlp-batch1": (lambda _: mlp(), dict(batch_size=1, optimizer=OptimType.SGD)),
    "mlp-federated-frozen": (lambda _: mlp(), dict(federated=True, frozen_params=["fc0.weight"])),
    "mlp-clip": (lambda _: mlp(), dict(max_grad_norm=1.0, c_prefix="clip")),
    "mlp-bias-policy": (lambda _: mlp(), dict(update_policy="bias")),
    "mlp-bn-extra": (lambda _: mlp_bn(), dict(additional_output_names=["logits"], batch_size=4)),
    "mlp-bn-fused": (lambda _: mlp_bn(), dict(fused_update=True)),
    "weighted-sum-mse": (lambda _: weighted_sum([3, 4]), dict(loss=None, optimizer=OptimType.SGD)),
    "kws": (lambda _: _kws(), dict(batch_size=2)),
    # Footprints of the plans meet_budget tries, in turn: 82,896 B; fused 80,492; + recomputing cheap
    # ops 36,028; keeping 1 in 2 activations 28,060; 1 in 4 24,060; none 20,060
    "kws-keep-every-2": (lambda _: _kws(), dict(batch_size=2, ram_budget=30_000)),
    "kws-recompute-all": (lambda _: _kws(), dict(batch_size=2, ram_budget=21_000)),
    "kws-budget-unmet": (lambda _: _kws(), dict(batch_size=2, ram_budget=1)),
    "gru": (_gru, dict(batch_size=2)),
    "transformer": (_transformer, dict(loss_input_names=None, batch_size=2, ignore_index=-100)),
    "mlp-inference": (lambda _: mlp(), None),
    "kws-inference": (lambda _: _kws(), None),
}


def _digests(directory: Path) -> dict[str, str]:
    model_c = (directory / "model.c").read_text()
    assert MARKER in model_c
    texts = {"model.c": model_c[model_c.index(MARKER) :].encode()}
    for name in ("model.h", "model_weights.h", "report.json"):
        if (directory / name).exists():
            texts[name] = (directory / name).read_bytes()
    return {name: hashlib.sha256(text).hexdigest() for name, text in texts.items()}


def _generate(name: str, tmp_path: Path) -> dict[str, str]:
    build, options = CASES[name]
    out = tmp_path / "out"
    if options is None:
        artifacts.generate_inference(build(tmp_path), out, batch_size=3)
    else:
        try:
            artifacts.generate_artifacts(build(tmp_path), artifact_directory=out, **options)
        except artifacts.EdgetrainError as exc:  # a budget no plan meets: its message is the output
            return {"error": hashlib.sha256(str(exc).encode()).hexdigest()}
    return _digests(out)


@pytest.mark.parametrize("name", list(CASES))
def test_generated_c_is_unchanged(name, tmp_path):
    got = _generate(name, tmp_path)
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if UPDATE:
        golden[name] = got
        GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), indent=1) + "\n")
        return
    assert name in golden, f"no golden for {name}: run with EDGETRAIN_UPDATE_GOLDEN=1"
    changed = sorted(k for k in got if got[k] != golden[name].get(k))
    assert got == golden[name], f"{name}: the generated files changed ({changed})"
