"""Every core op's gradient, computed by the generated C, against torch autograd.

A table of cases for gradcheck's harness (one op node, then loss = ReduceSum(Y * R), compiled with
gcc); operand values come from a generator seeded by the case id, so every case is deterministic.
Dropout cases check the counter-based mask against `_dropout_mask`, the eval-mode identity and the
dropped fraction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain.ops.elementwise import _dropout_mask
from gradcheck import Cases, assert_close, compile_module, fixed, normal, outside0, positive, run_case

torch = pytest.importorskip("torch")

F = torch.nn.functional
CASES = Cases(reference=False)
case = CASES.op


def i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def f32(value) -> np.ndarray:
    return np.array(value, dtype=np.float32)


# ---- Gemm: Y = alpha * A' B' + beta * C ----


def _gemm(alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    def fn(a, b, c=None):
        a = a.T if trans_a else a
        b = b.T if trans_b else b
        y = alpha * (a @ b)
        return y if c is None else y + beta * c

    return fn


M, K, N = 3, 4, 5
for name, ta, tb, alpha, beta, c_shape in [
    ("noC", 0, 0, 1.0, 1.0, None),
    ("noC-transA-transB-alpha", 1, 1, 0.5, 1.0, None),
    ("C_N-transA", 1, 0, 1.0, 1.0, (N,)),
    ("C_1xN-transB-alpha", 0, 1, 0.5, 1.0, (1, N)),
    ("C_Mx1-transA-transB-beta", 1, 1, 1.0, 2.0, (M, 1)),
    ("C_MxN-alpha-beta", 0, 0, 1.5, 0.7, (M, N)),
    ("C_scalar-beta", 0, 1, 1.0, -0.3, ()),
    ("C_1x1", 1, 0, 2.0, 1.0, (1, 1)),
]:
    ops = {"A": (K, M) if ta else (M, K), "B": (N, K) if tb else (K, N)}
    if c_shape is not None:
        ops["C"] = c_shape
    case(
        name, "Gemm", ops, _gemm(alpha, beta, ta, tb), attrs={"alpha": alpha, "beta": beta, "transA": ta, "transB": tb}
    )

# A batch of one: a weight gradient that contracts over it is an outer product, which train_step
# never stores (the accumulator sums it from its two factors).
for name, ta, tb, (m, k, n) in [
    ("outer-transB", 0, 1, (1, 4, 5)),
    ("outer-transA", 1, 0, (1, 4, 5)),
    ("outer-N1", 0, 0, (3, 4, 1)),
]:
    case(
        name,
        "Gemm",
        {"A": (k, m) if ta else (m, k), "B": (n, k) if tb else (k, n)},
        _gemm(1.0, 1.0, ta, tb),
        attrs={"transA": ta, "transB": tb},
    )

# ---- MatMul (NumPy semantics) ----
for name, a, b in [
    ("2d", (3, 4), (4, 5)),
    ("batched", (2, 3, 4), (2, 4, 5)),
    ("bcast-batch", (2, 1, 3, 4), (3, 4, 2)),
    ("bcast-rank", (3, 4), (2, 4, 5)),
    ("bcast-both-sides", (2, 1, 3, 4), (1, 3, 4, 2)),
    ("1d-left", (4,), (4, 5)),
    ("1d-left-batched", (4,), (2, 4, 5)),
    ("1d-right", (3, 4), (4,)),
    ("1d-right-batched", (2, 3, 4), (4,)),
    ("1d-both", (4,), (4,)),
]:
    case(name, "MatMul", {"A": a, "B": b}, torch.matmul)

# ---- binary arithmetic with NumPy broadcasting ----
BINARY_SHAPES = [
    ("same", (2, 3), (2, 3)),
    ("both-bcast", (3, 1), (1, 4)),
    ("scalar-right", (2, 3), ()),
    ("scalar-left", (), (2, 3)),
    ("rank-left", (4,), (2, 3, 4)),
    ("rank-right-mixed", (2, 1, 4), (3, 1)),
]
for op, fn in [("Add", torch.add), ("Sub", torch.sub), ("Mul", torch.mul), ("Div", torch.div)]:
    for name, a, b in BINARY_SHAPES:
        case(name, op, {"A": a, "B": outside0(b) if op == "Div" else b}, fn)
# Mod, fmod=1 (the dividend's sign) and 0 (the divisor's): both operands train, d/db = -trunc(a/b)
# and -floor(a/b).
for name, a, b in BINARY_SHAPES:
    case(f"fmod-{name}", "Mod", {"A": normal(a, 3.0), "B": outside0(b)}, torch.fmod, attrs={"fmod": 1})
    case(name, "Mod", {"A": normal(a, 3.0), "B": outside0(b)}, torch.remainder, opset=28)

# ---- activations and unary math ----
case("2d", "Relu", {"X": outside0((3, 4))}, torch.relu)
case("3d", "Relu", {"X": outside0((2, 3, 4))}, torch.relu)
case("default-alpha", "LeakyRelu", {"X": outside0((3, 4))}, lambda x: F.leaky_relu(x, 0.01))
case("alpha0.2", "LeakyRelu", {"X": outside0((2, 3, 4))}, lambda x: F.leaky_relu(x, 0.2), attrs={"alpha": 0.2})
case("alpha1.5", "LeakyRelu", {"X": outside0((5,))}, lambda x: F.leaky_relu(x, 1.5), attrs={"alpha": 1.5})
case("2d", "Sigmoid", {"X": (3, 4)}, torch.sigmoid)
case("3d", "Sigmoid", {"X": (2, 3, 4)}, torch.sigmoid)
case("2d", "Tanh", {"X": (3, 4)}, torch.tanh)
case("3d", "Tanh", {"X": (2, 3, 4)}, torch.tanh)
case("2d", "Exp", {"X": (3, 4)}, torch.exp)
case("3d", "Exp", {"X": (2, 3, 4)}, torch.exp)
case("2d", "Log", {"X": positive((3, 4))}, torch.log)
case("3d", "Log", {"X": positive((2, 3, 4))}, torch.log)
case("2d", "Sqrt", {"X": positive((3, 4))}, torch.sqrt)
case("3d", "Sqrt", {"X": positive((2, 3, 4))}, torch.sqrt)
case("2d", "Neg", {"X": (3, 4)}, torch.neg)
case("scalar", "Neg", {"X": ()}, torch.neg)
case("2d", "Abs", {"X": outside0((3, 4))}, torch.abs)
case("3d", "Abs", {"X": outside0((2, 3, 4))}, torch.abs)
case("2d", "Identity", {"X": (3, 4)}, lambda x: x)
case("scalar", "Identity", {"X": ()}, lambda x: x)

for p in (2.0, 3.0, 0.5, -1.0, 1.7):
    case(f"exp{p:g}", "Pow", {"X": positive((3, 4))}, lambda x, p=p: torch.pow(x, p), consts={"P": f32(p)})

case(
    "min",
    "Clip",
    {"X": normal((3, 4), avoid=(-0.3,))},
    lambda x: torch.clamp(x, min=-0.3),
    consts={"lo": f32(-0.3), "hi": None},
)
case(
    "max",
    "Clip",
    {"X": normal((3, 4), avoid=(0.4,))},
    lambda x: torch.clamp(x, max=0.4),
    consts={"lo": None, "hi": f32(0.4)},
)
case(
    "min-max",
    "Clip",
    {"X": normal((2, 3, 4), avoid=(-0.5, 0.6))},
    lambda x: torch.clamp(x, -0.5, 0.6),
    consts={"lo": f32(-0.5), "hi": f32(0.6)},
)
case(
    "at-the-bounds",  # the gradient passes at min and max themselves, as torch.clamp's does (ClipMask)
    "Clip",
    {"X": fixed(np.array([[-0.5, 0.6, 0.0, -1.0], [2.0, 0.6, -0.5, 0.3]], np.float32))},
    lambda x: torch.clamp(x, -0.5, 0.6),
    consts={"lo": f32(-0.5), "hi": f32(0.6)},
)
case("none", "Clip", {"X": (3, 4)}, lambda x: x)

# ---- Softmax / LogSoftmax ----
for op, fn in [("Softmax", torch.softmax), ("LogSoftmax", torch.log_softmax)]:
    case("2d-default", op, {"X": (3, 5)}, lambda x, fn=fn: fn(x, -1))
    for axis in (0, 1, -1):
        case(f"3d-axis{axis}", op, {"X": (2, 3, 4)}, lambda x, fn=fn, axis=axis: fn(x, axis), attrs={"axis": axis})

# ---- shape ops ----
case("flatten2d", "Reshape", {"X": (2, 3, 4)}, lambda x: x.reshape(6, 4), consts={"shape": i64(6, 4)})
case("minus1", "Reshape", {"X": (2, 3, 4)}, lambda x: x.reshape(4, -1), consts={"shape": i64(4, -1)})
case("zero-copies-dim", "Reshape", {"X": (2, 3, 4)}, lambda x: x.reshape(2, 12), consts={"shape": i64(0, -1)})
case("to-4d", "Reshape", {"X": (6, 4)}, lambda x: x.reshape(2, 3, 2, 2), consts={"shape": i64(2, 3, 2, 2)})
for axis in (0, 1, 2, -1):
    case(
        f"axis{axis}",
        "Flatten",
        {"X": (2, 3, 4)},
        lambda x, axis=axis: x.reshape(int(np.prod((2, 3, 4)[: axis % 3 if axis < 0 else axis])), -1),
        attrs={"axis": axis},
    )
case("default", "Transpose", {"X": (2, 3, 4)}, lambda x: x.permute(2, 1, 0))
case("default-2d", "Transpose", {"X": (3, 5)}, lambda x: x.T)
case("perm102", "Transpose", {"X": (2, 3, 4)}, lambda x: x.permute(1, 0, 2), attrs={"perm": [1, 0, 2]})
case("perm201", "Transpose", {"X": (2, 3, 4)}, lambda x: x.permute(2, 0, 1), attrs={"perm": [2, 0, 1]})
case("perm1302", "Transpose", {"X": (2, 3, 4, 2)}, lambda x: x.permute(1, 3, 0, 2), attrs={"perm": [1, 3, 0, 2]})
case("axes0-2", "Squeeze", {"X": (1, 3, 1, 4)}, lambda x: x.reshape(3, 4), consts={"axes": i64(0, 2)})
case("axes-neg", "Squeeze", {"X": (3, 1, 4)}, lambda x: x.reshape(3, 4), consts={"axes": i64(-2)})
case("all", "Squeeze", {"X": (1, 3, 1, 4, 1)}, lambda x: x.reshape(3, 4))
case("axis0", "Unsqueeze", {"X": (3, 4)}, lambda x: x.reshape(1, 3, 4), consts={"axes": i64(0)})
case("axes1-neg1", "Unsqueeze", {"X": (3, 4)}, lambda x: x.reshape(3, 1, 4, 1), consts={"axes": i64(1, -1)})
case("axes0-3", "Unsqueeze", {"X": (3, 4)}, lambda x: x.reshape(1, 3, 4, 1), consts={"axes": i64(0, 3)})
case("axis0-2in", "Concat", {"A": (2, 3), "B": (1, 3)}, lambda a, b: torch.cat([a, b], 0), attrs={"axis": 0})
case(
    "axis1-3in",
    "Concat",
    {"A": (2, 3), "B": (2, 1), "C": (2, 2)},
    lambda a, b, c: torch.cat([a, b, c], 1),
    attrs={"axis": 1},
)
case(
    "axis0-3in-3d",
    "Concat",
    {"A": (1, 2, 3), "B": (2, 2, 3), "C": (1, 2, 3)},
    lambda a, b, c: torch.cat([a, b, c], 0),
    attrs={"axis": 0},
)
case("axis1-2in-3d", "Concat", {"A": (2, 1, 3), "B": (2, 3, 3)}, lambda a, b: torch.cat([a, b], 1), attrs={"axis": 1})
case(
    "axis-neg1-2in", "Concat", {"A": (2, 3, 2), "B": (2, 3, 1)}, lambda a, b: torch.cat([a, b], -1), attrs={"axis": -1}
)
case(
    "axis1-sizes",
    "Split",
    {"X": (2, 5)},
    lambda x: torch.split(x, [2, 3], 1),
    attrs={"axis": 1},
    consts={"split": i64(2, 3)},
    n_outputs=2,
)
case(
    "axis0-3way",
    "Split",
    {"X": (6, 2)},
    lambda x: torch.split(x, [1, 2, 3], 0),
    attrs={"axis": 0},
    consts={"split": i64(1, 2, 3)},
    n_outputs=3,
)

# ---- reductions (opset 18: axes as an input) ----
for op, fn in [("ReduceSum", torch.sum), ("ReduceMean", torch.mean)]:
    case(
        "axis1-keep",
        op,
        {"X": (2, 3, 4)},
        lambda x, fn=fn: fn(x, dim=(1,), keepdim=True),
        attrs={"keepdims": 1},
        consts={"axes": i64(1)},
    )
    case(
        "axes0,2-nokeep",
        op,
        {"X": (2, 3, 4)},
        lambda x, fn=fn: fn(x, dim=(0, 2)),
        attrs={"keepdims": 0},
        consts={"axes": i64(0, 2)},
    )
    case(
        "axis-neg1-nokeep",
        op,
        {"X": (2, 3, 4)},
        lambda x, fn=fn: fn(x, dim=(-1,)),
        attrs={"keepdims": 0},
        consts={"axes": i64(-1)},
    )
    case("all-omitted-nokeep", op, {"X": (2, 3, 4)}, lambda x, fn=fn: fn(x), attrs={"keepdims": 0})
    case("all-omitted-keep", op, {"X": (2, 3, 4)}, lambda x, fn=fn: fn(x, dim=(0, 1, 2), keepdim=True))
    case(
        "all-explicit-keep",
        op,
        {"X": (3, 4)},
        lambda x, fn=fn: fn(x, dim=(0, 1), keepdim=True),
        attrs={"keepdims": 1},
        consts={"axes": i64(0, 1)},
    )


# ---- Dropout: counter-based mask in training, identity in eval ----


def _dropout_model(shape, ratio, seed_attr=None, rng=None, training_mode=None):
    """W -> Identity -> Dropout(ratio) -> * R -> ReduceSum: Dropout is node 1, so its default seed is 1.
    ratio None omits the ratio input (ONNX default 0.5); training_mode None omits that input."""
    w = rng.normal(size=shape).astype(np.float32)
    drop_attrs = {} if seed_attr is None else {"seed": seed_attr}
    consts = [numpy_helper.from_array(w, "W")]
    drop_inputs = ["X", "ratio" if ratio is not None else ""]
    if ratio is not None:
        consts.append(numpy_helper.from_array(f32(ratio), "ratio"))
    if training_mode is not None:
        drop_inputs.append("training_mode")
        consts.append(numpy_helper.from_array(np.array(training_mode, np.bool_), "training_mode"))
    while not drop_inputs[-1]:
        drop_inputs.pop()
    nodes = [
        helper.make_node("Identity", ["W"], ["X"]),
        helper.make_node("Dropout", drop_inputs, ["Y"], **drop_attrs),
        helper.make_node("Mul", ["Y", "R"], ["YR"]),
        helper.make_node("ReduceSum", ["YR"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "dropout",
        [helper.make_tensor_value_info("R", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        consts,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), w


@dataclass
class DropoutCase:
    check: str  # "mask", "eval" or "fraction"
    shape: tuple
    ratio: float | None  # None: the ratio input is omitted, ONNX's default 0.5 applies
    seed_attr: int | None = None
    training_mode: bool | None = None  # False: exported for inference, so no dropout in training

    def run(self, tmp_path, seed: int) -> float:
        rng = np.random.default_rng(seed)
        model, w = _dropout_model(self.shape, self.ratio, self.seed_attr, rng, self.training_mode)
        ratio = 0.0 if self.training_mode is False else 0.5 if self.ratio is None else self.ratio
        module, state = compile_module(model, tmp_path, loss=None)
        r = rng.normal(size=self.shape).astype(np.float32)
        mask_seed = 1 if self.seed_attr is None else self.seed_attr
        grad = state.parameters["W"].grad
        if self.check == "mask":
            errors = []
            for counter in (0, 1):  # the counter advances once per training step
                module.lazy_reset_grad()
                loss = module(r)
                mask = _dropout_mask(self.shape, ratio, mask_seed, counter)
                if ratio == 0:
                    assert np.all(mask == 1)
                else:
                    assert np.any(mask == 0) and np.any(mask != 0)
                errors.append(assert_close(grad, r * mask, f"dropout grad, step {counter}"))
                errors.append(
                    assert_close(loss, np.sum((w * mask * r).astype(np.float64)), f"dropout loss, step {counter}")
                )
            assert ratio == 0 or not np.array_equal(
                _dropout_mask(self.shape, ratio, mask_seed, 0), _dropout_mask(self.shape, ratio, mask_seed, 1)
            )
            return max(errors)
        if self.check == "eval":
            module.eval()
            loss = module(r)
            err = assert_close(loss, np.sum((w * r).astype(np.float64)), "dropout eval loss")
            (out,) = module.infer(r)  # the first output is the loss itself
            return max(err, assert_close(out.reshape(()), np.sum((w * r).astype(np.float64)), "dropout infer"))
        assert self.check == "fraction"
        module(r)
        dropped = float(np.mean(grad == 0))
        assert abs(dropped - ratio) < 0.03, f"dropped {dropped:.3f} of the elements, ratio {ratio}"
        kept = grad != 0
        return assert_close(grad[kept], r[kept] / (np.float32(1) - np.float32(ratio)), "dropout kept scale")


CASES += [
    pytest.param(DropoutCase("mask", (4, 5), 0.3), id="Dropout-mask-node-index-seed"),
    pytest.param(DropoutCase("mask", (3, 7), 0.5, seed_attr=1234), id="Dropout-mask-seed-attr"),
    pytest.param(DropoutCase("mask", (4, 5), None), id="Dropout-mask-default-ratio"),
    pytest.param(DropoutCase("mask", (4, 5), 0.3, training_mode=True), id="Dropout-mask-training-mode-true"),
    pytest.param(DropoutCase("mask", (4, 5), 0.3, training_mode=False), id="Dropout-training-mode-false"),
    pytest.param(DropoutCase("eval", (4, 5), 0.4), id="Dropout-eval-identity"),
    pytest.param(DropoutCase("fraction", (64, 64), 0.25), id="Dropout-fraction"),
]


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)
