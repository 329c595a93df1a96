"""A 2-layer causal transformer (2 heads, d=32; token and learned position embeddings, pre-LN
blocks, hand-written attention under a causal mask, GELU MLP, LM head), exported by torch's
TorchScript exporter at opset 17 and by its dynamo exporter (as README's "Exporting your model"
calls each), trained one step through generate_artifacts and api.Module
with cross entropy over sequences (padding ignored): the loss and every parameter's gradient
match torch autograd to 2e-4 of the tensor's largest value, and the SGD step matches torch's."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgetrain import api, artifacts
from gradcheck import compile_module

torch = pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location(
    "tinygpt", Path(__file__).resolve().parents[2] / "examples" / "text" / "tinygpt.py"
)
tinygpt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tinygpt)

VOCAB, CONTEXT, BATCH, PAD = 11, 8, 3, -100
RTOL = 2e-4  # of the tensor's largest value
LR = 0.1


def _matched_initializers(model_path: Path, torch_model) -> dict[str, tuple[str, bool]]:
    """torch parameter -> (ONNX initializer, stored transposed). The TorchScript exporter renames
    the weights it transposes for MatMul, so match by value (every value is distinct: the
    parameters are random)."""
    inits = {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(model_path).graph.initializer
        if i.data_type == onnx.TensorProto.FLOAT
    }
    matched = {}
    for name, p in torch_model.named_parameters():
        p = p.detach().numpy()
        hits = [(n, False) for n, a in inits.items() if a.shape == p.shape and np.array_equal(a, p)]
        hits += [(n, True) for n, a in inits.items() if p.ndim == 2 and a.shape == p.T.shape and np.array_equal(a, p.T)]
        assert len(hits) == 1, f"{name}: {len(hits)} initializers hold its values"
        matched[name] = hits[0]
    return matched


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript-opset17", "dynamo"])
def test_one_training_step_matches_torch(dynamo, tmp_path):
    torch.manual_seed(0)
    model = tinygpt.TinyGPT(VOCAB, CONTEXT)
    with torch.no_grad():  # distinct values for _matched_initializers
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path / "tinygpt.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes about shapes it records as constants
        if dynamo:
            torch.onnx.export(
                model,
                (torch.zeros(BATCH, CONTEXT, dtype=torch.int64),),
                str(path),
                input_names=["ids"],
                output_names=["logits"],
                dynamo=True,
                optimize=False,
                verbose=False,
            )
        else:
            tinygpt.export(model, BATCH, CONTEXT, path)
    matched = _matched_initializers(path, model)
    module, state = compile_module(
        path, tmp_path, loss=artifacts.LossType.CrossEntropyLoss, ignore_index=PAD, learning_rate=LR
    )

    rng = np.random.default_rng(1)
    ids = rng.integers(0, VOCAB, size=(BATCH, CONTEXT))
    labels = np.roll(ids, -1, axis=1)
    labels[:, -2:] = PAD  # padded tail
    loss = module(ids, labels)
    want = torch.nn.functional.cross_entropy(model(torch.from_numpy(ids)), torch.from_numpy(labels), ignore_index=PAD)
    want.backward()
    assert abs(float(loss) - want.item()) <= RTOL * max(1.0, abs(want.item()))

    # PyTorch's names wherever the export keeps them or edgetrain restores them (dynamo's transposed
    # Linear weights); value matching finds the others.
    matched = {name: (name, False) if name in state.parameters else hit for name, hit in matched.items()}
    if dynamo:  # README's export: every weight by its own name
        assert all(init == name for name, (init, _) in matched.items()), matched
    errors = {}
    for name, p in model.named_parameters():
        init, transposed = matched[name]
        ref = p.grad.numpy().T if transposed else p.grad.numpy()
        errors[name] = float(np.max(np.abs(state.parameters[init].grad - ref)) / np.max(np.abs(ref)))
    assert len(errors) == 2 + 2 * 12 + 4  # embeddings, 12 tensors per block, final LayerNorm and head
    worst = max(errors, key=errors.get)
    print(f"max relative gradient error {errors[worst]:.3g} ({worst})")
    assert errors[worst] <= RTOL, errors

    api.Optimizer(tmp_path / "artifacts" / "optimizer_model.onnx", module).step()
    for name, p in model.named_parameters():
        init, transposed = matched[name]
        want = (p - LR * p.grad).detach().numpy()
        want = want.T if transposed else want
        np.testing.assert_allclose(state.parameters[init].data, want, rtol=0, atol=RTOL * np.max(np.abs(want)))
