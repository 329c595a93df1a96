"""Sequence models with recurrent layers, exported from PyTorch (TorchScript exporter): token
embedding -> nn.GRU / nn.LSTM (batch_first) -> Linear, trained with CrossEntropyLoss over every
position (logits (N, C, T), labels (N, T)). One training step in C against torch autograd: the loss
and every parameter's gradient, mapped from torch's layout (gates r, z, n and i, f, g, o; separate
input and hidden biases) to ONNX's (z, r, h and i, o, f, c; one B). Then the eval loss in C, and
the exported inference model under onnxruntime, against torch's forward.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest

from edgetrain import artifacts
from gradcheck import compile_module

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

VOCAB, CLASSES, BATCH, STEPS = 11, 5, 3, 6
TOL = 2e-4  # relative to the largest gradient of each tensor
ONNX_GATE_ORDER = {"GRU": [1, 0, 2], "LSTM": [0, 3, 1, 2]}  # torch's gate chunks in ONNX's order


class Tagger(torch.nn.Module):
    """With `decoder`, a second recurrence reads the sequence again, starting from the first one's
    final state: its initial states are computed values that gradients flow back through."""

    def __init__(self, cell: str, hidden: int, bidirectional: bool, layers: int, decoder: bool):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 4)
        self.rnn = getattr(torch.nn, cell)(4, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)
        self.decoder = getattr(torch.nn, cell)(4, hidden, batch_first=True) if decoder else None
        self.head = torch.nn.Linear(hidden * (2 if bidirectional else 1), CLASSES)

    def forward(self, tokens):
        x = self.embed(tokens)
        y, state = self.rnn(x)
        if self.decoder is not None:
            y, _ = self.decoder(x, state)
        return self.head(y).transpose(1, 2)

    def recurrent_layers(self) -> list[tuple[torch.nn.Module, int]]:
        """(module, layer) of each recurrent node the exporter writes, in graph order."""
        return [(self.rnn, layer) for layer in range(self.rnn.num_layers)] + (
            [(self.decoder, 0)] if self.decoder is not None else []
        )


def _onnx_layout(rnn: torch.nn.Module, cell: str, layer: int) -> dict[str, torch.Tensor]:
    """Layer `layer`'s W, R, B gradients as ONNX lays them out (directions stacked)."""
    order = ONNX_GATE_ORDER[cell]

    def gates(t):
        return torch.cat([t.chunk(len(order))[i] for i in order])

    suffixes = [f"_l{layer}"] + ([f"_l{layer}_reverse"] if rnn.bidirectional else [])
    grad = {name: p.grad for name, p in rnn.named_parameters()}
    return {
        "W": torch.stack([gates(grad[f"weight_ih{s}"]) for s in suffixes]),
        "R": torch.stack([gates(grad[f"weight_hh{s}"]) for s in suffixes]),
        "B": torch.stack([torch.cat([gates(grad[f"bias_ih{s}"]), gates(grad[f"bias_hh{s}"])]) for s in suffixes]),
    }


def _expected_grads(model: onnx.ModelProto, tagger: Tagger, cell: str) -> dict[str, np.ndarray]:
    """Each trainable initializer of the exported model -> torch's gradient in that layout."""
    want = {
        "embed.weight": tagger.embed.weight.grad,
        "head.bias": tagger.head.bias.grad,
        "head.weight": tagger.head.weight.grad,  # the exporter's transposed copy, back under its name
    }
    nodes = [n for n in model.graph.node if n.op_type == cell]
    assert len(nodes) == len(tagger.recurrent_layers())
    for node, (rnn, layer) in zip(nodes, tagger.recurrent_layers()):
        for slot, name in zip(("W", "R", "B"), node.input[1:4]):
            want[name] = _onnx_layout(rnn, cell, layer)[slot]
    return {k: v.numpy() for k, v in want.items()}


# (cell, hidden, bidirectional, layers, decoder); tests/unit/test_planner.py plans these too.
TAGGERS = [
    ("GRU", 5, False, 1, False),
    ("GRU", 4, True, 1, False),
    ("LSTM", 5, False, 2, False),
    ("LSTM", 3, True, 1, False),
    ("LSTM", 4, False, 1, True),
]


def export_tagger(tagger: Tagger) -> onnx.ModelProto:
    """The tagger for BATCH sequences of STEPS tokens."""
    buffer = io.BytesIO()
    torch.onnx.export(
        tagger,
        (torch.zeros(BATCH, STEPS, dtype=torch.int64),),
        buffer,
        dynamo=False,
        opset_version=17,
        input_names=["tokens"],
        output_names=["logits"],
    )
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.filterwarnings("ignore")  # the exporter's notes on tracing and batch sizes
@pytest.mark.parametrize("cell, hidden, bidirectional, layers, decoder", TAGGERS)
def test_rnn_tagger_gradients(cell, hidden, bidirectional, layers, decoder, tmp_path):
    torch.manual_seed(hidden * 10 + layers)
    tagger = Tagger(cell, hidden, bidirectional, layers, decoder)
    rng = np.random.default_rng(hidden)
    tokens = rng.integers(0, VOCAB, size=(BATCH, STEPS), dtype=np.int64)
    labels = rng.integers(0, CLASSES, size=(BATCH, STEPS), dtype=np.int64)

    model = export_tagger(tagger)
    module, state = compile_module(model, tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    module.train()
    loss = module(tokens, labels)

    want_loss = torch.nn.functional.cross_entropy(tagger(torch.from_numpy(tokens)), torch.from_numpy(labels))
    want_loss.backward()
    assert abs(float(loss) - want_loss.item()) <= TOL * max(1.0, abs(want_loss.item()))
    want = _expected_grads(model, tagger, cell)
    assert set(want) == {n for n, p in state.parameters.items() if p.requires_grad}
    worst = 0.0
    for name, grad in want.items():
        scale = float(np.abs(grad).max())
        error = float(np.abs(state.parameters[name].grad - grad).max()) / scale
        assert error <= TOL, f"{cell} d loss/d {name}: max error {error:.3g} of max|g| {scale:.3g}"
        worst = max(worst, error)

    # The eval graph runs the ONNX op itself, and the exported inference model stays plain ONNX.
    module.eval()
    assert abs(float(module(tokens, labels)) - want_loss.item()) <= TOL * max(1.0, abs(want_loss.item()))
    module.export_model_for_inferencing(tmp_path / "infer.onnx", ["logits"])
    (logits,) = ort.InferenceSession(tmp_path / "infer.onnx").run(None, {"tokens": tokens})
    want_logits = tagger(torch.from_numpy(tokens)).detach().numpy()
    assert np.abs(logits - want_logits).max() <= TOL * max(1.0, np.abs(want_logits).max())
    print(
        f"{cell} hidden {hidden} bidirectional {bidirectional} layers {layers} decoder {decoder}: "
        f"max relative error {worst:.3g}"
    )
