"""Gradients of the ops sequence models are made of, computed by the generated C, against torch
autograd: embeddings (Gather with token ids fed at run time), LayerNormalization (one and three
outputs), Trilu, causal masks, and the 4-D forms of MatMul, Softmax, Gelu, Erf, Split, Slice and
Transpose that attention uses; cross entropy over sequences with padding ignored.

A table of cases for gradcheck's harness: single-op cases are its OpCases, small graphs
(embeddings, masks) go through `_check_graph`, the losses through check_loss_gradients. Shapes and
attributes are drawn from a seeded generator, so every run checks the same cases. The other
tests check what happens to token ids out of range and to integer inputs read by other ops.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgetrain import artifacts
from edgetrain.errors import EdgetrainError
from edgetrain.ops import reference_ops
from gradcheck import Cases, assert_close, build_op_model, check_loss_gradients, compile_module, fixed, i64, run_case

torch = pytest.importorskip("torch")

F = torch.nn.functional
RNG = np.random.default_rng(2024)


def normal(shape, scale=1.0) -> np.ndarray:
    return (RNG.normal(size=shape) * scale).astype(np.float32)


def _graph_model(nodes, params: dict, graph_inputs: dict, out_shape, opset: int = 18):
    """loss = ReduceSum(Y * R) after `nodes`, which read `params` (initializers) and `graph_inputs`
    (arrays fed at run time, typed by their dtype)."""
    nodes = list(nodes) + [
        helper.make_node("Mul", ["Y", "R"], ["YR"]),
        helper.make_node("ReduceSum", ["YR"], ["loss"], keepdims=0),
    ]
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in graph_inputs.items()
    ]
    inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, out_shape))
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in params.items()]
    graph = helper.make_graph(
        nodes, "sequence", inputs, [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check_graph(nodes, params: dict, graph_inputs: dict, torch_fn: Callable, tmp_path, opset: int = 18) -> float:
    """Compare the loss and the gradient of every float initializer in `params` with torch_fn
    (float initializers as torch leaves, then the graph inputs as tensors)."""
    leaves = {n: torch.tensor(v, requires_grad=True) for n, v in params.items() if v.dtype == np.float32}
    y = torch_fn(*leaves.values(), *[torch.from_numpy(v) for v in graph_inputs.values()])
    r = normal(tuple(y.shape))
    module, state = compile_module(_graph_model(nodes, params, graph_inputs, r.shape, opset), tmp_path, loss=None)
    loss = module(*graph_inputs.values(), r)
    total = (y * torch.from_numpy(r)).sum()
    total.backward()
    errors = [assert_close(loss, total.detach().numpy(), "loss")]
    errors += [assert_close(state.parameters[n].grad, leaf.grad.numpy(), f"d loss/d {n}") for n, leaf in leaves.items()]
    return max(errors)


CASES = Cases(reference=False)


def case(name: str, check: Callable) -> None:
    """check(tmp_path): its operands were drawn when the table was built (RNG)."""
    CASES.check(name, lambda tmp_path, rng: check(tmp_path))


def op_case(name: str, op: str, inputs: dict, torch_fn: Callable, **kwargs) -> None:
    """An OpCase on the operands `inputs` drawn here."""
    CASES.op(name, op, {k: fixed(v) for k, v in inputs.items()}, torch_fn, **kwargs)


# ---- Embeddings: Gather with token ids fed at run time (int64 or int32), constant positions ----


def embedding_case(name, vocab, dim, ids, axis=0):
    weight = normal((vocab, dim) if axis == 0 else (dim, vocab))
    case(
        f"Gather-runtime-{name}",
        lambda tmp_path: _check_graph(
            [helper.make_node("Gather", ["W", "ids"], ["Y"], axis=axis)],
            {"W": weight},
            {"ids": ids},
            lambda w, t: torch.index_select(w, axis, torch.where(t < 0, t + vocab, t).long().ravel()).reshape(
                w.shape[:axis] + tuple(t.shape) + w.shape[axis + 1 :]
            ),
            tmp_path,
        ),
    )


for name, dtype in [("int64", np.int64), ("int32", np.int32)]:
    vocab, n, t = int(RNG.integers(5, 12)), int(RNG.integers(1, 4)), int(RNG.integers(3, 7))
    ids = RNG.integers(-vocab, vocab, size=(n, t)).astype(dtype)
    ids.ravel()[:2] = ids.ravel()[-1]  # repeated tokens sum their rows
    embedding_case(f"{name}-{n}x{t}-vocab{vocab}", vocab, int(RNG.integers(2, 6)), ids)
embedding_case("axis1-int64", 6, 3, RNG.integers(0, 6, size=(4,)).astype(np.int64), axis=1)


def _token_and_position(tmp_path):
    """What a transformer's input layer is: token rows gathered by run-time ids plus position rows
    gathered by constant indices (which the exporter writes for arange)."""
    tokens, positions = normal((9, 4)), normal((6, 4))
    ids = RNG.integers(0, 9, size=(2, 5)).astype(np.int64)
    nodes = [
        helper.make_node("Gather", ["tok", "ids"], ["t"]),
        helper.make_node("Gather", ["pos", "where"], ["p"]),
        helper.make_node("Add", ["t", "p"], ["Y"]),
    ]
    params = {"tok": tokens, "pos": positions, "where": np.arange(5, dtype=np.int64)}
    return _check_graph(nodes, params, {"ids": ids}, lambda tok, pos, t: tok[t] + pos[:5], tmp_path)


case("Gather-token-plus-position", _token_and_position)


# ---- LayerNormalization: Y alone (PyTorch's export) or with Mean and InvStdDev in the loss ----


def _layernorm_torch(axis, eps, outputs):
    def fn(x, scale, b=None):
        axes = tuple(range(axis % x.ndim, x.ndim))
        y = F.layer_norm(
            x,
            x.shape[axes[0] :],
            scale.reshape(x.shape[axes[0] :]),
            None if b is None else b.reshape(x.shape[axes[0] :]),
            eps,
        )
        if outputs == 1:
            return y
        mean = x.mean(dim=axes, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=axes, keepdim=True)
        return y, mean, 1 / torch.sqrt(var + eps)

    return fn


for rank, outputs, bias in [(2, 1, True), (3, 1, False), (4, 1, True), (3, 3, True), (4, 3, False)]:
    shape = tuple(int(d) for d in RNG.integers(2, 5, size=rank))
    axis = int(RNG.integers(-rank + 1, rank)) if rank > 2 else -1
    eps = float(RNG.choice([1e-5, 1e-3, 1e-1]))
    inputs = {"X": normal(shape, 2.0) + 1.0, "Scale": normal(shape[axis:]) + 1.0}
    if bias:
        inputs["B"] = normal(shape[axis:])
    op_case(
        f"{rank}d-axis{axis}-eps{eps:g}-{outputs}out{'' if bias else '-nobias'}",
        "LayerNormalization",
        inputs,
        _layernorm_torch(axis, eps, outputs),
        attrs={"axis": axis, "epsilon": eps},
        n_outputs=outputs,
        opset=17,
    )
# PyTorch's normalized_shape as a flat scale of a row's values: one value per position either way
op_case(
    "scale-flat-over-2-axes",
    "LayerNormalization",
    {"X": normal((2, 3, 4)), "Scale": normal((12,))},
    lambda x, s: F.layer_norm(x, (3, 4), s.reshape(3, 4)),
    attrs={"axis": 1},
    opset=17,
)


# ---- Trilu (constant k), and causal masks that fold to constants ----

for name, shape, upper, k in [
    ("upper-k1-4d", (2, 2, 4, 4), 1, 1),
    ("lower-k-1", (3, 5), 0, -1),
    ("upper-default-k", (2, 4, 3), 1, None),
    ("lower-k-beyond", (3, 4), 0, -9),
]:
    fn = (lambda x, k=k: torch.triu(x, k or 0)) if upper else (lambda x, k=k: torch.tril(x, k or 0))
    op_case(
        name,
        "Trilu",
        {"X": normal(shape)},
        fn,
        attrs={"upper": upper},
        consts={} if k is None else {"k": np.array(k, np.int64)},
    )


def _masked_softmax(tmp_path, use_where):
    """Scores (N, heads, T, T) with a causal mask: additive -inf above the diagonal through Where on
    a folded Trilu of ones, or an additive constant mask; then softmax over the last axis."""
    t = 5
    x = normal((2, 2, t, t), 2.0)
    if use_where:
        nodes = [
            helper.make_node("Trilu", ["ones"], ["lower"], upper=0),
            helper.make_node("Cast", ["lower"], ["keep"], to=TensorProto.BOOL),
            helper.make_node("Constant", [], ["neg_inf"], value_float=-np.inf),
            helper.make_node("Where", ["keep", "X", "neg_inf"], ["masked"]),
        ]
        params = {"X": x, "ones": np.ones((t, t), np.int64)}
    else:
        mask = np.triu(np.full((t, t), -np.inf, np.float32), 1)
        nodes = [
            helper.make_node("Constant", [], ["mask"], value=numpy_helper.from_array(mask)),
            helper.make_node("Add", ["X", "mask"], ["masked"]),
        ]
        params = {"X": x}
    nodes.append(helper.make_node("Softmax", ["masked"], ["Y"], axis=-1))
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return _check_graph(nodes, params, {}, lambda s: torch.softmax(s.masked_fill(~causal, -torch.inf), -1), tmp_path)


case("causal-mask-where-folded-trilu", lambda tmp_path: _masked_softmax(tmp_path, True))
case("causal-mask-additive-constant", lambda tmp_path: _masked_softmax(tmp_path, False))


# ---- Attention's 4-D forms: batched MatMul with broadcasting, Softmax over any axis, ... ----

for a, b in [((2, 1, 3, 4), (3, 4, 5)), ((1, 2, 3, 4), (2, 1, 4, 3))]:
    op_case(
        f"{'x'.join(map(str, a))}@{'x'.join(map(str, b))}", "MatMul", {"A": normal(a), "B": normal(b)}, torch.matmul
    )


def _attention_chain(tmp_path):
    """One graph through the 4-D forms attention uses: Split into q, k, v; Transpose; batched MatMul;
    Softmax over a middle axis; Transpose back; a strided Slice; Gelu (both forms) and Erf."""
    nodes = [
        helper.make_node("Split", ["X"], ["q", "k", "v"], axis=-1, num_outputs=3),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("Transpose", ["o"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Slice", ["t", "starts", "ends", "axes", "steps"], ["sl"]),
        helper.make_node("Gelu", ["sl"], ["g1"], approximate="tanh"),
        helper.make_node("Gelu", ["sl"], ["g2"]),
        helper.make_node("Erf", ["g2"], ["e"]),
        helper.make_node("Add", ["g1", "e"], ["Y"]),
    ]
    params = {"X": normal((2, 3, 4, 12)), "starts": i64(1, 0), "ends": i64(4, 4), "axes": i64(1, 3), "steps": i64(1, 2)}

    def torch_fn(x):
        q, k, v = torch.split(x, 4, -1)
        t = (torch.softmax(q @ k.transpose(2, 3), 1) @ v).permute(0, 2, 1, 3)[:, 1:4, :, 0:4:2]
        return F.gelu(t, approximate="tanh") + torch.erf(F.gelu(t))

    return _check_graph(nodes, params, {}, torch_fn, tmp_path, opset=20)


case("attention-4d-chain", _attention_chain)


# ---- Cross entropy over sequences: logits (N, C, T...), labels (N, T...), padding ignored ----


def ce_case(name, logits_shape, ignore_index):
    classes = logits_shape[1]
    labels = RNG.integers(0, classes, size=(logits_shape[0],) + logits_shape[2:]).astype(np.int64)
    if ignore_index is not None:
        labels.ravel()[RNG.choice(labels.size, labels.size // 3, replace=False)] = ignore_index
    kwargs = {} if ignore_index is None else {"ignore_index": ignore_index}
    case(
        f"CrossEntropy-{name}",
        lambda tmp_path: check_loss_gradients(
            artifacts.LossType.CrossEntropyLoss,
            normal(logits_shape, 2.0),
            labels,
            lambda x, t: F.cross_entropy(x, t, reduction="mean", **kwargs),
            tmp_path=tmp_path,
            **kwargs,
        ),
    )


ce_case("NCT-padding-ignored", (3, 5, 6), -100)
ce_case("NCT-no-ignore", (2, 4, 7), None)
ce_case("NCHW-ignore-class0", (2, 4, 3, 2), 0)


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)


# ---- Token ids out of range, and integer inputs where they cannot go ----


def _embedding_module(tmp_path):
    model = _graph_model(
        [helper.make_node("Gather", ["W", "ids"], ["Y"])],
        {"W": normal((5, 3))},
        {"ids": np.zeros((2, 3), np.int64)},
        (2, 3, 3),
    )
    return compile_module(model, tmp_path, loss=None)


def test_token_ids_out_of_range_are_refused_with_state_untouched(tmp_path):
    module, state = _embedding_module(tmp_path)
    ids, r = np.array([[0, 4, -5], [1, 2, 3]]), normal((2, 3, 3))
    module(ids, r)
    grad, weight = state.parameters["W"].grad.copy(), state.parameters["W"].data.copy()
    for bad in ([[0, 5, 1], [1, 2, 3]], [[0, 1, 1], [-6, 2, 3]], [[0, 1, 1], [2**31 - 1, 0, 0]]):
        with pytest.raises(ValueError, match="out of range"):
            module(np.array(bad, np.int64), r)
        with pytest.raises(ValueError, match="out of range"):
            module.infer(np.array(bad, np.int64), r)
        module.eval()
        with pytest.raises(ValueError, match="out of range"):
            module(np.array(bad, np.int32), r)
        module.train()
    with pytest.raises(ValueError, match="int32 range"):
        module(np.array([[0, 2**31, 1], [1, 2, 3]]), r)
    np.testing.assert_array_equal(state.parameters["W"].grad, grad)
    np.testing.assert_array_equal(state.parameters["W"].data, weight)
    module(ids, r)  # accumulates onto the first step's gradient, and nothing else
    np.testing.assert_array_equal(state.parameters["W"].grad, 2 * grad)


def test_integer_inputs_only_reach_integer_kernels(tmp_path):
    nodes = [helper.make_node("Relu", ["ids"], ["row"], name="relu"), helper.make_node("Gather", ["W", "row"], ["Y"])]
    model = _graph_model(nodes, {"W": normal((6, 3))}, {"ids": np.zeros((2, 3), np.int64)}, (2, 3, 3))
    refused = "node 'relu' \\(Relu\\) reads int64 'ids' at input 0; Relu computes float32 tensors only"
    with pytest.raises(EdgetrainError, match=refused):
        compile_module(model, tmp_path, loss=None)
    model = _graph_model(
        [helper.make_node("Add", ["x", "W"], ["Y"])], {"W": normal((2,))}, {"x": np.zeros((2,), np.float64)}, (2,)
    )
    with pytest.raises(EdgetrainError, match="float64"):
        compile_module(model, tmp_path, loss=None)


def test_layernorm_gradient_reference_reproduces_the_c(tmp_path):
    """training_model.onnx run by onnx.reference, with our LayerNormalizationGrad's NumPy reference,
    gives the C's loss and gradients (three outputs, so dMean and dInvStdDev flow too)."""
    inputs = {"X": normal((2, 3, 4), 2.0), "Scale": normal((3, 4)), "B": normal((3, 4))}
    model, _, shapes = build_op_model("LayerNormalization", inputs, {"axis": 1, "epsilon": 1e-3}, {}, 3, 17)
    module, state = compile_module(model, tmp_path, loss=None)
    rs = {f"R{i}": normal(shape) for i, shape in enumerate(shapes)}
    loss = module(*rs.values())
    training = onnx.load(tmp_path / "artifacts" / "training_model.onnx")
    names = [o.name for o in training.graph.output]
    got = dict(zip(names, ReferenceEvaluator(training, new_ops=reference_ops()).run(None, {**rs, **inputs})))
    assert_close(got[names[0]], loss, "onnx.reference loss")
    for name in inputs:
        assert_close(got[f"{name}_grad"], state.parameters[name].grad, f"onnx.reference d loss/d {name}")
