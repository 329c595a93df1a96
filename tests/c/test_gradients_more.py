"""Gradients of the activation and indexing ops (Elu ... Gelu, Slice ... Min), computed by the
generated C, against torch autograd; plus the C erf against float64 math.erf.

A table of cases for gradcheck's harness. Single-op cases are its OpCases; Where (whose constant
comes first) and models exported by torch (Gelu as older opsets write it, Softplus with beta, a mix
of everything) are checked the same way on a hand-built or exported graph
(gradcheck.check_graph_gradients, gradcheck.ExportCase). Every case also runs training_model.onnx
through onnx.reference with our ops' NumPy references. Operand values come from a generator seeded
by the case id, so every case is deterministic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from edgetrain.runtime_c import headers

from gradcheck import Cases, ExportCase, away0, check_graph_gradients, fixed, float_library, i64, normal, run_case, ulps

torch = pytest.importorskip("torch")
F = torch.nn.functional
RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"


CASES = Cases()
case = CASES.op


# ---- ELU family ----
case("default", "Elu", {"X": normal((3, 4))}, F.elu)
case("alpha0.3-3d", "Elu", {"X": away0((2, 3, 4), 2.0)}, lambda x: F.elu(x, 0.3), attrs={"alpha": 0.3})
case("alpha2", "Elu", {"X": away0((5,), 3.0)}, lambda x: F.elu(x, 2.0), attrs={"alpha": 2.0})
case("default", "Selu", {"X": away0((3, 4), 2.0)}, F.selu)
case("alpha-gamma", "Selu", {"X": away0((2, 3, 2))}, lambda x: 1.2 * F.elu(x, 1.5), attrs={"alpha": 1.5, "gamma": 1.2})
case("default", "Celu", {"X": normal((3, 4), 2.0)}, F.celu)
case("alpha0.5", "Celu", {"X": normal((2, 3, 4), 2.0)}, lambda x: F.celu(x, 0.5), attrs={"alpha": 0.5})
case("alpha2.5", "Celu", {"X": normal((6,), 3.0)}, lambda x: F.celu(x, 2.5), attrs={"alpha": 2.5})

# ---- smooth and piecewise-linear activations ----
case("2d", "Softplus", {"X": normal((3, 4), 3.0)}, F.softplus)
case("wide-range", "Softplus", {"X": fixed([[-90.0, -30.0, -5.0, -1e-3], [0.0, 2.5, 25.0, 80.0]])}, F.softplus)
case("2d", "Softsign", {"X": normal((3, 4), 3.0)}, F.softsign)
case("3d", "Softsign", {"X": normal((2, 3, 4))}, F.softsign)
case(
    "onnx-default",
    "HardSigmoid",
    {"X": normal((4, 5), 3.0, avoid=(-2.5, 2.5))},
    lambda x: torch.clamp(0.2 * x + 0.5, 0, 1),
)
case(
    "torch-alpha",
    "HardSigmoid",
    {"X": normal((2, 3, 4), 4.0, avoid=(-3.0, 3.0))},
    F.hardsigmoid,
    attrs={"alpha": 1 / 6, "beta": 0.5},
)
case(
    "alpha-beta",
    "HardSigmoid",
    {"X": normal((4, 5), 3.0, avoid=(-3.0, 1 / 0.3 - 3.0))},
    lambda x: torch.clamp(0.3 * x + 0.9, 0, 1),
    attrs={"alpha": 0.3, "beta": 0.9},
)
case("2d", "HardSwish", {"X": normal((4, 5), 4.0, avoid=(-3.0, 3.0))}, F.hardswish)
case("3d", "HardSwish", {"X": normal((2, 3, 4), 2.0, avoid=(-3.0, 3.0))}, F.hardswish)

# ---- PRelu: slope broadcast to X, and trained ----
case(
    "channel-slope",
    "PRelu",
    {"X": away0((2, 3, 2, 2)), "slope": normal((3, 1, 1), 0.3)},
    lambda x, w: F.prelu(x, w.reshape(-1)),
)
case("single-slope", "PRelu", {"X": away0((2, 3, 4)), "slope": fixed([0.25])}, F.prelu)
case("full-slope", "PRelu", {"X": away0((3, 4)), "slope": normal((3, 4))}, lambda x, w: torch.where(x > 0, x, w * x))
case(
    "last-axis-slope",
    "PRelu",
    {"X": away0((2, 3, 4)), "slope": normal((4,))},
    lambda x, w: torch.where(x > 0, x, w * x),
)
case("scalar-slope", "PRelu", {"X": away0((5,)), "slope": fixed(0.1)}, lambda x, w: torch.where(x > 0, x, w * x))

# ---- Erf, Gelu (opset 20) ----
case("2d", "Erf", {"X": normal((3, 4), 1.5)}, torch.erf)
case("3d-wide", "Erf", {"X": normal((2, 3, 4), 3.0)}, torch.erf)
for approximate in ("none", "tanh"):
    case(
        f"{approximate}-2d",
        "Gelu",
        {"X": normal((3, 4), 2.0)},
        lambda x, a=approximate: F.gelu(x, approximate=a),
        attrs={"approximate": approximate},
        opset=20,
    )
    case(
        f"{approximate}-3d",
        "Gelu",
        {"X": normal((2, 3, 4), 3.0)},
        lambda x, a=approximate: F.gelu(x, approximate=a),
        attrs={"approximate": approximate},
        opset=20,
    )
case("default-attr", "Gelu", {"X": normal((7,), 2.0)}, F.gelu, opset=20)

# ---- Slice (opset 13+ form: starts, ends, axes, steps as constant inputs) ----
BIG = np.iinfo(np.int64).max
case(
    "axis1",
    "Slice",
    {"X": normal((3, 6))},
    lambda x: x[:, 1:5],
    consts={"starts": i64(1), "ends": i64(5), "axes": i64(1)},
)
case(
    "all-axes-no-axes-input",
    "Slice",
    {"X": normal((4, 5))},
    lambda x: x[1:3, 0:4],
    consts={"starts": i64(1, 0), "ends": i64(3, 4)},
)
case(
    "steps2-3d",
    "Slice",
    {"X": normal((4, 6, 3))},
    lambda x: x[0:4:2, 1:6:2],
    consts={"starts": i64(0, 1), "ends": i64(4, 6), "axes": i64(0, 1), "steps": i64(2, 2)},
)
case(
    "reverse",
    "Slice",
    {"X": normal((5, 4))},
    lambda x: x.flip(0),
    consts={"starts": i64(-1), "ends": i64(-BIG), "axes": i64(0), "steps": i64(-1)},
)
case(
    "negative-step2",
    "Slice",
    {"X": normal((3, 7))},
    lambda x: x.flip(1)[:, 1:6:2],
    consts={"starts": i64(5), "ends": i64(0), "axes": i64(-1), "steps": i64(-2)},
)
case(
    "clamped",
    "Slice",
    {"X": normal((3, 4))},
    lambda x: x[:, 2:],
    consts={"starts": i64(-100, 2), "ends": i64(100, BIG), "axes": i64(0, 1)},
)
case(
    "negative-start-end",
    "Slice",
    {"X": normal((2, 6, 2))},
    lambda x: x[:, -4:-1],
    consts={"starts": i64(-4), "ends": i64(-1), "axes": i64(-2)},
)
case(
    "mixed-steps",
    "Slice",
    {"X": normal((4, 5, 3))},
    lambda x: x[1:].flip(1)[:, 1:4].flip(2)[:, :, 0::2],
    consts={"starts": i64(1, 3, 2), "ends": i64(BIG, 0, -BIG), "axes": i64(0, 1, 2), "steps": i64(1, -1, -2)},
)

# ---- Split (opset 18: num_outputs, or sizes as an input) ----
case(
    "num_outputs-even",
    "Split",
    {"X": normal((2, 6))},
    lambda x: torch.split(x, 2, 1),
    attrs={"axis": 1, "num_outputs": 3},
    n_outputs=3,
)
case(
    "num_outputs-uneven",
    "Split",
    {"X": normal((7, 2))},
    lambda x: torch.split(x, 3, 0),
    attrs={"axis": 0, "num_outputs": 3},
    n_outputs=3,
)
case(
    "sizes-axis-neg",
    "Split",
    {"X": normal((2, 3, 5))},
    lambda x: torch.split(x, [1, 4], -1),
    attrs={"axis": -1},
    consts={"split": i64(1, 4)},
    n_outputs=2,
)

# ---- Expand ----
case("col-to-3d", "Expand", {"X": normal((3, 1))}, lambda x: x.expand(2, 3, 4), consts={"shape": i64(2, 3, 4)})
case("row", "Expand", {"X": normal((4,))}, lambda x: x.expand(3, 4), consts={"shape": i64(3, 1)})
case("scalar", "Expand", {"X": normal(())}, lambda x: x.expand(2, 3), consts={"shape": i64(2, 3)})

# ---- Tile ----
case("rows", "Tile", {"X": normal((2, 3))}, lambda x: torch.tile(x, (2, 1)), consts={"repeats": i64(2, 1)})
case("both", "Tile", {"X": normal((2, 3))}, lambda x: torch.tile(x, (3, 2)), consts={"repeats": i64(3, 2)})
case("3d-inner", "Tile", {"X": normal((2, 1, 3))}, lambda x: torch.tile(x, (1, 4, 2)), consts={"repeats": i64(1, 4, 2)})
case("3d-outer", "Tile", {"X": normal((2, 3, 2))}, lambda x: torch.tile(x, (2, 1, 1)), consts={"repeats": i64(2, 1, 1)})
case("ones", "Tile", {"X": normal((2, 3))}, lambda x: x.clone(), consts={"repeats": i64(1, 1)})

# ---- Gather with constant indices (gradient: scatter-add) ----
case(
    "axis0-dup",
    "Gather",
    {"X": normal((4, 3))},
    lambda x: torch.index_select(x, 0, torch.tensor([2, 0, 2])),
    consts={"indices": i64(2, 0, 2)},
)
case(
    "axis1-negative",
    "Gather",
    {"X": normal((3, 5))},
    lambda x: x[:, [4, 0, 3]],
    attrs={"axis": 1},
    consts={"indices": i64(-1, 0, -2)},
)
case(
    "embedding-2d-indices",
    "Gather",
    {"X": normal((6, 4))},
    lambda x: x[torch.tensor([[1, 5, 1], [0, 0, 3]])],
    consts={"indices": i64(1, 5, 1, 0, 0, 3).reshape(2, 3)},
)
case(
    "scalar-index",
    "Gather",
    {"X": normal((2, 4, 3))},
    lambda x: x[:, 2],
    attrs={"axis": 1},
    consts={"indices": np.array(-2, np.int64)},
)
case(
    "axis-neg-3d",
    "Gather",
    {"X": normal((2, 3, 4))},
    lambda x: x[..., torch.tensor([[3], [1]])],
    attrs={"axis": -1},
    consts={"indices": np.array([[3], [1]], np.int32)},
)

# ---- Max / Min: variadic, broadcasting; ties split equally (torch.maximum for two, amax for more) ----


def _amax(*xs):
    return torch.amax(torch.stack(torch.broadcast_tensors(*xs)), 0)


def _amin(*xs):
    return torch.amin(torch.stack(torch.broadcast_tensors(*xs)), 0)


case("same", "Max", {"A": normal((3, 4)), "B": normal((3, 4))}, torch.maximum)
case("bcast", "Max", {"A": normal((3, 1)), "B": normal((1, 4))}, torch.maximum)
case("3in-bcast", "Max", {"A": normal((2, 3, 4)), "B": normal((3, 1)), "C": normal((4,))}, _amax)
case("1in", "Max", {"A": normal((3, 4))}, lambda a: a.clone())
case(
    "ties",
    "Max",
    {"A": fixed([[1.0, 2.0, -1.0], [0.5, 3.0, -2.0]]), "B": fixed([[1.0, 1.0, -1.0], [0.5, 4.0, -2.5]])},
    torch.maximum,
)
case("ties-bcast", "Max", {"A": fixed([[1.0], [2.0]]), "B": fixed([1.0, 2.0, 0.0])}, torch.maximum)
case(
    "ties-3in",
    "Max",
    {"A": fixed([1.0, 2.0, 3.0, 0.0]), "B": fixed([1.0, 2.0, 1.0, 0.0]), "C": fixed([1.0, 0.0, 3.0, -1.0])},
    _amax,
)
case("same", "Min", {"A": normal((3, 4)), "B": normal((3, 4))}, torch.minimum)
case("bcast-scalar", "Min", {"A": normal((2, 3)), "B": normal(())}, torch.minimum)
case("3in", "Min", {"A": normal((2, 3)), "B": normal((2, 3)), "C": normal((1, 3))}, _amin)
case("ties", "Min", {"A": fixed([[1.0, 2.0], [0.5, -3.0]]), "B": fixed([[1.0, 1.0], [0.5, -3.0]])}, torch.minimum)


# ---- graphs: Where (constant condition first), exported models ----


@dataclass
class NodeCase:
    """One node with inputs in any order: value specs become trainable initializers, arrays stay
    constants; `check` names the output the loss uses (the others go unused)."""

    op: str
    inputs: dict  # name -> value spec (trainable) or np.ndarray (constant)
    torch_fn: Callable  # the trainable operands, by name -> the checked output
    outputs: tuple = ("out",)
    check: str = "out"
    attrs: dict = field(default_factory=dict)

    def run(self, tmp_path, seed: int) -> float:
        rng = np.random.default_rng(seed)
        values = {k: v if isinstance(v, np.ndarray) else v(rng) for k, v in self.inputs.items()}
        params = {k: v for k, v in values.items() if not isinstance(self.inputs[k], np.ndarray)}
        node = helper.make_node(self.op, list(values), list(self.outputs), **self.attrs)
        inits = [numpy_helper.from_array(v, k) for k, v in values.items()]
        graph = helper.make_graph([node], self.op, [], [helper.make_empty_tensor_value_info(self.check)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        return check_graph_gradients(model, params, self.torch_fn, tmp_path, rng)


def _where(cond: np.ndarray, x_shape, y_shape) -> NodeCase:
    mask = torch.from_numpy(cond)
    return NodeCase(
        "Where", {"cond": cond, "X": normal(x_shape), "Y": normal(y_shape)}, lambda X, Y: torch.where(mask, X, Y)
    )


_where_rng = np.random.default_rng(7)
CASES += [
    pytest.param(_where(_where_rng.random((3, 4)) < 0.5, (3, 4), (3, 4)), id="Where-same"),
    pytest.param(_where(_where_rng.random((1, 4)) < 0.5, (3, 1), ()), id="Where-bcast-all"),
    pytest.param(_where(_where_rng.random((2, 3, 4)) < 0.5, (3, 4), (4,)), id="Where-cond-largest"),
    pytest.param(_where(np.array(True), (2, 3), (2, 3)), id="Where-scalar-cond"),
    pytest.param(
        NodeCase(
            "Split",
            {"X": normal((2, 7))},
            lambda X: torch.split(X, 3, 1)[1],
            ("a", "b", "c"),
            "b",
            {"axis": 1, "num_outputs": 3},
        ),
        id="Split-unused-outputs",
    ),
]


@dataclass
class FoldedWhereCase:
    """Where whose condition comparisons of constants compute (pos >= 2 as Not(Less) Or Equal): the
    frontend folds them, so no boolean op runs in the trainer."""

    def run(self, tmp_path, seed: int) -> float:
        rng = np.random.default_rng(seed)
        x = normal((3, 4))(rng)
        pos = np.arange(4, dtype=np.int64)
        nodes = [
            helper.make_node("Less", ["pos", "lim"], ["lt"]),
            helper.make_node("Not", ["lt"], ["ge"]),
            helper.make_node("Equal", ["pos", "lim"], ["eq"]),
            helper.make_node("Or", ["ge", "eq"], ["cond"]),
            helper.make_node("Neg", ["X"], ["nx"]),
            helper.make_node("Where", ["cond", "X", "nx"], ["out"]),
        ]
        inits = [
            numpy_helper.from_array(x, "X"),
            numpy_helper.from_array(pos, "pos"),
            numpy_helper.from_array(np.array(2, np.int64), "lim"),
        ]
        graph = helper.make_graph(nodes, "where", [], [helper.make_empty_tensor_value_info("out")], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        mask = torch.from_numpy(pos >= 2)
        return check_graph_gradients(model, {"X": x}, lambda X: torch.where(mask, X, -X), tmp_path, rng)


CASES.append(pytest.param(FoldedWhereCase(), id="Where-folded-comparisons"))


def _mix(net, h):
    """Every activation and indexing op of this file, as torch exports them."""
    mask = torch.triu(torch.ones(3, 6)) > 0
    return torch.cat(
        [
            F.hardsigmoid(h),
            F.hardswish(h),
            F.celu(h, 0.5),
            F.selu(h),
            F.elu(h, 0.3),
            F.softsign(h),
            torch.erf(h),
            net.prelu(h.reshape(3, 3, 2)).reshape(3, 6),
            torch.maximum(h, h.flip(0)),
            torch.minimum(h, 0.1 * h[:, :1]),
            h[:, 1:5:2],
            h.index_select(1, torch.tensor([0, 2, 2])),
            torch.where(mask, h, -h),
        ],
        1,
    )


CASES += [
    pytest.param(ExportCase(lambda net, h: F.gelu(h), 17, ("Erf", "Div")), id="Gelu-exported-opset17-erf-form"),
    pytest.param(
        ExportCase(lambda net, h: F.gelu(h, approximate="tanh"), 17, ("Tanh",)), id="Gelu-exported-opset17-tanh-form"
    ),
    pytest.param(
        ExportCase(lambda net, h: F.gelu(h) + F.gelu(h, approximate="tanh"), 20, ("Gelu",)), id="Gelu-exported-opset20"
    ),
    pytest.param(
        ExportCase(lambda net, h: F.softplus(h, beta=2.0), 17, ("Softplus", "Mul", "Div")), id="Softplus-exported-beta2"
    ),
    pytest.param(
        ExportCase(
            _mix,
            17,
            (
                "HardSigmoid",
                "HardSwish",
                "Celu",
                "Selu",
                "Elu",
                "Erf",
                "PRelu",
                "Max",
                "Min",
                "Slice",
                "Gather",
                "Where",
            ),
        ),
        id="Mix-exported",
    ),
    # The exporter tests the input's rank in an If whose condition folds: the branch taken is inlined.
    pytest.param(
        ExportCase(lambda net, h: F.local_response_norm(h.unsqueeze(2), 3).squeeze(2), 17, ("If", "AveragePool")),
        id="LocalResponseNorm-exported-with-If",
    ),
    # Bounds computed in the graph: Max by the lower, Min by the upper, each bound trained through.
    pytest.param(
        ExportCase(
            lambda net, h: torch.clamp(h, min=-net.fc.bias.abs().mean(), max=h.mean(1, keepdim=True)), 17, ("Clip",)
        ),
        id="Clip-exported-by-tensors",
    ),
    # torch's one_hot: int64 OneHot of computed indices, then a cast; the mask passes the gradient.
    pytest.param(
        ExportCase(lambda net, h: h * F.one_hot(h.argmax(1), 6).float() + h, 17, ("OneHot", "ArgMax")),
        id="OneHot-exported",
    ),
]


# ---- the C erf against float64 math.erf ----

SIGNATURE = re.compile(r"static inline\s+([\w ]+?[\s*])(et_\w+)\(([^)]*)\)\s*\{", re.S)
SELECT = (
    "int rank, const int *shape, const float *A, const int *a_strides, const float *B, const int *b_strides, float *Y"
)
WHERE = (
    "int rank, const int *shape, const int32_t *Cond, const int *c_strides, const {T} *X, const int *x_strides, "
    "const {T} *Y, const int *y_strides, {T} *Out"
)


def instantiate(source: str) -> str:
    """One external caller per function of `source`: some warnings only appear once a static inline
    function is instantiated, as the generated trainers do."""
    sigs = [(ret.strip(), name, " ".join(params.split())) for ret, name, params in SIGNATURE.findall(source)]
    sigs += [("void", name, SELECT) for name in re.findall(r"ET_DEFINE_SELECT_\((et_\w+),", source)]
    sigs += [
        ("void", name, WHERE.format(T=t)) for name, t in re.findall(r"ET_DEFINE_WHERE_\((et_\w+), (\w+)\)", source)
    ]
    out = []
    for ret, name, params in sigs:
        args = ", ".join(re.findall(r"(\w+)\s*(?:,|$)", params))
        body = f"{name}({args});" if ret == "void" else f"return {name}({args});"
        out.append(f"{ret} use_{name}({params});\n{ret} use_{name}({params}) {{ {body} }}")
    return "\n".join(out)


@dataclass
class ErfAccuracy:
    """Compile the runtime with every function of et_activations.h and et_indexing.h instantiated,
    under the strictest flags, then compare et_erff and et_expm1f with float64 references on a
    dense sample of floats."""

    def run(self, tmp_path, seed: int) -> float:
        tested = ("et_activations.h", "et_indexing.h")
        base = [h for h in headers(*tested) if h not in tested]
        ours = "\n".join((RUNTIME / h).read_text() for h in tested)
        callers = instantiate(ours)
        assert all(f"use_{k}" in callers for k in ("et_max_f32", "et_gather_grad_f32", "et_where_i32"))
        fns = float_library(
            tmp_path,
            "\n".join((RUNTIME / h).read_text() for h in base) + ours + callers,
            {"t_erf": "et_erf_f32(n, x, y);", "t_expm1": "int i; for (i = 0; i < n; ++i) y[i] = et_expm1f(x[i]);"},
        )

        rng = np.random.default_rng(seed)
        # Every region of the approximation, its boundaries, tiny and huge magnitudes, and specials.
        x = np.concatenate(
            [
                rng.uniform(-4.5, 4.5, 60000),
                rng.uniform(-1.3, 1.3, 30000),
                np.exp(rng.uniform(-87, 5, 20000)) * rng.choice([-1, 1], 20000),
                [0.84375, 1.25, 4.0, 3.9192059, 3.919206, 1e-30, 1e-45, 20.0, 1e30],
            ]
        ).astype(np.float32)
        x = np.concatenate([x, -x])
        worst = 0.0
        for name, ref, sample, bound in (
            ("t_erf", math.erf, x, 1.1),  # measured on every float: 1.05 and 1.6
            ("t_expm1", math.expm1, x[np.abs(x) < 80], 1.7),
        ):
            err = ulps(fns[name](sample), np.array([ref(float(v)) for v in sample]))
            assert err.max() <= bound, f"{name}: {err.max():.3f} ulp at x = {sample[err.argmax()]!r}"
            worst = max(worst, float(err.max()))
        got = fns["t_erf"](np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32))
        assert got[0] == 1 and got[1] == -1 and np.isnan(got[2]) and got[3] == 0 and np.signbit(got[4])
        print(f"worst {worst:.3f} ulp")
        return 0.0


CASES.append(pytest.param(ErfAccuracy(), id="Erf-accuracy-vs-float64"))


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)
