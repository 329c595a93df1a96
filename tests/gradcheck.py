"""Gradient checks of the generated C trainer against torch autograd.

`check_op_gradients` builds a one-op ONNX model whose float operands are initializers (so each gets
a gradient), reduces the op's outputs to a scalar loss with random weights R fed as graph inputs,
compiles it with edgetrain, runs one training step through `api.Module`, and compares the loss and
every initializer's gradient with torch autograd in float32. `check_loss_gradients` does the same
for edgetrain's built-in losses against torch.nn.functional (reduction='mean').

Tolerance: max|C - torch| <= TOL * max(1, max|torch|), per compared tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import api, artifacts

torch = pytest.importorskip("torch")  # the reference: a module that imports this one is skipped without it

TOL = 1e-4

__all__ = ["TOL", "assert_close", "build_op_model", "check_loss_gradients", "check_op_gradients", "compile_module"]


def assert_close(got, want, what: str) -> float:
    """Assert max|got - want| <= TOL * max(1, max|want|); return the max error measured."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite values in the C result"
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    bound = TOL * max(1.0, float(np.max(np.abs(want), initial=0.0)))
    assert err <= bound, f"{what}: max|C - torch| = {err:.3g} > {bound:.3g}"
    return err


def compile_module(model, tmp_path, **kwargs) -> tuple[api.Module, api.CheckpointState]:
    """Generate the artifacts of `model` into tmp_path and bind a Module to a fresh state (SGD)."""
    kwargs.setdefault("optimizer", artifacts.OptimType.SGD)
    out = artifacts.generate_artifacts(model, artifact_directory=Path(tmp_path) / "artifacts", batch_size=None,
                                       **kwargs)
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return module, state


def _output_shapes(op_type, inputs, attrs, const_inputs, n_outputs, opset):
    """The op's output shapes, from onnx shape inference on the single node."""
    from onnx import shape_inference

    names = _input_names(inputs, const_inputs)
    outs = [f"Y{i}" if n_outputs > 1 else "Y" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in {**inputs, **const_inputs}.items() if v is not None]
    graph = helper.make_graph([node], "shapes", [], [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    dims = {o.name: tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in inferred.graph.output}
    return outs, [dims[o] for o in outs]


def _input_names(inputs, const_inputs):
    """Node inputs: the float operands in order, then the constants; a None value is an omitted input."""
    names = [("" if v is None else k) for k, v in list(inputs.items()) + list(const_inputs.items())]
    while names and not names[-1]:
        names.pop()
    return names


def build_op_model(op_type: str, inputs: dict, attrs: dict, const_inputs: dict, n_outputs: int = 1,
                   opset: int = 18):
    """loss = sum_i ReduceSum(Y_i * R_i), with the op's float operands as initializers and R_i graph
    inputs. Returns (model, output names, output shapes)."""
    outs, shapes = _output_shapes(op_type, inputs, attrs, const_inputs, n_outputs, opset)
    nodes = [helper.make_node(op_type, _input_names(inputs, const_inputs), outs, name="op", **attrs)]
    terms = []
    for i, y in enumerate(outs):
        term = "loss" if n_outputs == 1 else f"S{i}"
        nodes += [helper.make_node("Mul", [y, f"R{i}"], [f"YR{i}"]),
                  helper.make_node("ReduceSum", [f"YR{i}"], [term], keepdims=0)]
        terms.append(term)
    acc = terms[0]
    for i, t in enumerate(terms[1:]):
        nodes.append(helper.make_node("Add", [acc, t], ["loss" if i == len(terms) - 2 else f"acc{i}"]))
        acc = f"acc{i}"
    graph_inputs = [helper.make_tensor_value_info(f"R{i}", TensorProto.FLOAT, s) for i, s in enumerate(shapes)]
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inputs.items() if v is not None]
    inits += [numpy_helper.from_array(np.asarray(v), k) for k, v in const_inputs.items() if v is not None]
    graph = helper.make_graph(nodes, f"grad_{op_type}", graph_inputs,
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), outs, shapes


def check_op_gradients(op_type: str, inputs: dict[str, np.ndarray], attrs: dict, torch_fn: Callable,
                       const_inputs: dict[str, np.ndarray | None] | None = None, *, tmp_path, opset: int = 18,
                       n_outputs: int = 1, seed: int = 0) -> float:
    """Compare edgetrain's loss and gradients for one `op_type` node against torch autograd.

    inputs: the op's float operands (become trainable initializers), in node-input order; a None
        value leaves that optional input empty (e.g. a recurrence's B before its initial_h).
    const_inputs: constant operands that follow them (axes, shape, bounds, exponent, split sizes);
        a None value leaves that optional input empty (e.g. Clip's min).
    torch_fn: maps the given float operands as torch tensors (same order) to Y, or a tuple of outputs.
    Returns the max absolute error measured over the loss and every gradient."""
    const_inputs = dict(const_inputs or {})
    inputs = {k: None if v is None else np.asarray(v, np.float32) for k, v in inputs.items()}
    clash = {"loss"} | {f"{p}{i}" for p in ("R", "YR", "S", "Y", "acc") for i in range(n_outputs)} | {"Y"}
    assert not clash & (set(inputs) | set(const_inputs)), "operand names clash with the harness's names"
    model, _, shapes = build_op_model(op_type, inputs, attrs, const_inputs, n_outputs, opset)
    rng = np.random.default_rng(seed + 12345)
    rs = [rng.normal(size=s).astype(np.float32) for s in shapes]

    module, state = compile_module(model, tmp_path, loss=None)
    loss = module(*rs)

    present = {k: v for k, v in inputs.items() if v is not None}
    leaves = [torch.tensor(v, requires_grad=True) for v in present.values()]
    ys = torch_fn(*leaves)
    ys = ys if isinstance(ys, (tuple, list)) else (ys,)
    assert len(ys) == n_outputs, f"torch_fn returned {len(ys)} outputs, expected {n_outputs}"
    total = sum((y * torch.from_numpy(r)).sum() for y, r in zip(ys, rs))
    for y, s in zip(ys, shapes):
        assert tuple(y.shape) == s, f"torch output shape {tuple(y.shape)} != ONNX shape {s}"
    total.backward()

    errors = [assert_close(loss, total.detach().numpy(), f"{op_type} loss")]
    for name, leaf in zip(present, leaves):
        want = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        errors.append(assert_close(state.parameters[name].grad, want.numpy(), f"{op_type} d loss/d {name}"))
    return max(errors)


def check_loss_gradients(loss_type: artifacts.LossType, logits: np.ndarray, labels: np.ndarray,
                         torch_loss: Callable, *, tmp_path, ignore_index: int | None = None,
                         class_weights=None) -> float:
    """logits initializer -> Identity -> edgetrain's `loss_type`; compare the loss and d loss/d logits
    with `torch_loss(logits_tensor, labels_tensor)` (a torch.nn.functional loss, reduction='mean').
    Integer labels are converted to int64 for torch. Returns the max absolute error measured."""
    logits = np.asarray(logits, np.float32)
    nodes = [helper.make_node("Identity", ["logits_init"], ["logits"])]
    graph = helper.make_graph(nodes, f"loss_{loss_type.value}", [],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits.shape)],
                              [numpy_helper.from_array(logits, "logits_init")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    module, state = compile_module(model, tmp_path, loss=loss_type, ignore_index=ignore_index,
                                   class_weights=class_weights)
    loss = module(labels)

    x = torch.tensor(logits, requires_grad=True)
    target = torch.from_numpy(np.asarray(labels, np.int64 if np.asarray(labels).dtype.kind in "iu" else np.float32))
    want = torch_loss(x, target)
    want.backward()
    name = loss_type.value
    errors = [assert_close(loss, want.detach().numpy(), f"{name} loss"),
              assert_close(state.parameters["logits_init"].grad, x.grad.numpy(), f"{name} d loss/d logits")]
    return max(errors)
