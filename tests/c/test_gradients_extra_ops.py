"""Gradients of Sin, Cos, Reciprocal, Mish, ReduceMax, ReduceMin, ReduceL2, ReduceLogSumExp,
DepthToSpace and SpaceToDepth, computed by the generated C, against torch autograd; SiLU as
exporters write it (Sigmoid then Mul, either operand order); and et_sinf / et_cosf against float64.

A table of cases for gradcheck's harness: single-op cases are its OpCases (the C against torch, then
training_model.onnx through onnx.reference with our ops' NumPy references); graphs run its
check_graph_gradients. Operand values come from a generator seeded by the case id, so every case is
deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from gradcheck import Cases, ExportCase, check_graph_gradients, fixed, float_library, i64, normal, run_case, ulps

torch = pytest.importorskip("torch")

F = torch.nn.functional
RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"

CASES = Cases()
case = CASES.op


# ---- Sin, Cos (rotary embeddings), Reciprocal, Mish ----
case("2d", "Sin", {"X": normal((3, 4), 3.0)}, torch.sin)
case("large-angles", "Sin", {"X": fixed([[1e3, -2.5e4, 65536.0, 1e5], [3.14159274, -1.5707964, 0.0, 7e4]])}, torch.sin)
case("2d", "Cos", {"X": normal((3, 4), 3.0)}, torch.cos)
case("large-angles", "Cos", {"X": fixed([[1e3, -2.5e4, 65536.0, 1e5], [3.14159274, -1.5707964, 0.0, 7e4]])}, torch.cos)
case("2d", "Tan", {"X": fixed(np.linspace(-1.4, 1.4, 12, dtype=np.float32).reshape(3, 4))}, torch.tan)
case("2d", "Atan", {"X": normal((3, 4), 3.0)}, torch.atan)
case("2d", "Asin", {"X": fixed(np.linspace(-0.95, 0.95, 12, dtype=np.float32).reshape(3, 4))}, torch.asin)
case("2d", "Acos", {"X": fixed(np.linspace(-0.95, 0.95, 12, dtype=np.float32).reshape(3, 4))}, torch.acos)
case("2d", "Sinh", {"X": normal((3, 4), 2.0)}, torch.sinh)
case("2d", "Cosh", {"X": normal((3, 4), 2.0)}, torch.cosh)
case("2d", "Asinh", {"X": normal((3, 4), 3.0)}, torch.asinh)
case("2d", "Acosh", {"X": fixed(np.linspace(1.05, 6.0, 12, dtype=np.float32).reshape(3, 4))}, torch.acosh)
case("2d", "Atanh", {"X": fixed(np.linspace(-0.95, 0.95, 12, dtype=np.float32).reshape(3, 4))}, torch.atanh)
case("2d", "Reciprocal", {"X": normal((3, 4), 2.0, avoid=(0.0,))}, torch.reciprocal)
case("3d", "Reciprocal", {"X": normal((2, 3, 4), 0.5, avoid=(0.0,))}, torch.reciprocal)
case("2d", "Mish", {"X": normal((3, 4), 3.0)}, F.mish)
case(
    "wide-range",
    "Mish",
    {"X": fixed([[-100.0, -30.0, -8.0, -1.2, -1e-3, 0.0], [1e-3, 0.7, 5.0, 19.9, 20.1, 60.0]])},
    F.mish,
)

# ---- reductions (opset 18: axes as an input) ----
# Ties in rows and columns, for both the largest and the smallest elements.
TIES = [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, 5.0, -1.0, 2.0], [2.0, 2.0, -1.0, 0.0]]
for op, fn in (("ReduceMax", torch.amax), ("ReduceMin", torch.amin)):
    case("axis1-keepdims", op, {"X": normal((2, 3, 4))}, lambda x, f=fn: f(x, 1, keepdim=True), consts={"axes": i64(1)})
    case(
        "two-axes",
        op,
        {"X": normal((2, 3, 4))},
        lambda x, f=fn: f(x, (0, 2)),
        attrs={"keepdims": 0},
        consts={"axes": i64(0, -1)},
    )
    case("all-axes", op, {"X": normal((3, 5))}, lambda x, f=fn: f(x), attrs={"keepdims": 0})
    case("ties-rows", op, {"X": fixed(TIES)}, lambda x, f=fn: f(x, 1), attrs={"keepdims": 0}, consts={"axes": i64(1)})
    case("ties-cols", op, {"X": fixed(TIES)}, lambda x, f=fn: f(x, 0, keepdim=True), consts={"axes": i64(0)})
    case(
        "noop-empty-axes",
        op,
        {"X": normal((2, 3))},
        lambda x: x.clone(),
        attrs={"noop_with_empty_axes": 1},
        consts={"axes": np.zeros(0, np.int64)},
    )
case(
    "last-axis",
    "ReduceL2",
    {"X": normal((2, 3, 4))},
    lambda x: torch.linalg.vector_norm(x, dim=2),
    attrs={"keepdims": 0},
    consts={"axes": i64(2)},
)
case(
    "middle-axis-keepdims",
    "ReduceL2",
    {"X": normal((2, 5, 3))},
    lambda x: torch.linalg.vector_norm(x, dim=1, keepdim=True),
    consts={"axes": i64(-2)},
)
case(
    "zero-norm",
    "ReduceL2",
    {"X": fixed([[0.0, 0.0, 0.0], [1.0, -2.0, 2.0]])},
    lambda x: torch.linalg.vector_norm(x, dim=1),
    attrs={"keepdims": 0},
    consts={"axes": i64(1)},
)
case("all-axes", "ReduceL2", {"X": normal((4, 3))}, lambda x: torch.linalg.vector_norm(x, keepdim=True))
case(
    "last-axis",
    "ReduceLogSumExp",
    {"X": normal((3, 5), 2.0)},
    lambda x: torch.logsumexp(x, 1),
    attrs={"keepdims": 0},
    consts={"axes": i64(1)},
)
case(
    "large-values",
    "ReduceLogSumExp",
    {"X": normal((2, 3, 4), 60.0)},
    lambda x: torch.logsumexp(x, (0, 2), keepdim=True),
    consts={"axes": i64(0, 2)},
)
case(
    "all-axes",
    "ReduceLogSumExp",
    {"X": fixed([[100.0, 100.0, -3.0], [1e3, -1e3, 999.0]])},
    lambda x: torch.logsumexp(x, (0, 1)),
    attrs={"keepdims": 0},
)


# ---- DepthToSpace / SpaceToDepth (NCHW): DCR by hand, CRD is torch's pixel (un)shuffle ----


def depth_to_space_dcr(x, b):
    n, c, h, w = x.shape
    return x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2).reshape(n, c // (b * b), h * b, w * b)


def space_to_depth_dcr(x, b):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


case(
    "dcr-b2",
    "DepthToSpace",
    {"X": normal((2, 8, 2, 3))},
    lambda x: depth_to_space_dcr(x, 2),
    attrs={"blocksize": 2, "mode": "DCR"},
)
case(
    "default-mode-b3",
    "DepthToSpace",
    {"X": normal((1, 9, 2, 2))},
    lambda x: depth_to_space_dcr(x, 3),
    attrs={"blocksize": 3},
)
case(
    "crd-b2",
    "DepthToSpace",
    {"X": normal((2, 12, 3, 2))},
    lambda x: F.pixel_shuffle(x, 2),
    attrs={"blocksize": 2, "mode": "CRD"},
)
case("b2", "SpaceToDepth", {"X": normal((2, 3, 4, 6))}, lambda x: space_to_depth_dcr(x, 2), attrs={"blocksize": 2})
case(
    "dcr-b3-opset28",
    "SpaceToDepth",
    {"X": normal((1, 2, 6, 3))},
    lambda x: space_to_depth_dcr(x, 3),
    attrs={"blocksize": 3, "mode": "DCR"},
    opset=28,
)
case(
    "crd-b2-opset28",
    "SpaceToDepth",
    {"X": normal((2, 3, 4, 2))},
    lambda x: F.pixel_unshuffle(x, 2),
    attrs={"blocksize": 2, "mode": "CRD"},
    opset=28,
)


# ---- SiLU as exporters write it: Sigmoid then Mul, x * sigmoid(x) in either operand order ----


@dataclass
class SiluGraph:
    x_first: bool

    def run(self, tmp_path, seed: int) -> float:
        rng = np.random.default_rng(seed)
        x = normal((3, 4), 3.0)(rng)
        operands = ["X", "s"] if self.x_first else ["s", "X"]
        nodes = [helper.make_node("Sigmoid", ["X"], ["s"]), helper.make_node("Mul", operands, ["out"])]
        graph = helper.make_graph(
            nodes, "silu", [], [helper.make_empty_tensor_value_info("out")], [numpy_helper.from_array(x, "X")]
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        return check_graph_gradients(model, {"X": x}, lambda X: F.silu(X), tmp_path, rng)


def _mix(net, h):
    """This file's ops as torch's TorchScript exporter writes them (mish as Softplus, Tanh, Mul)."""
    return torch.cat(
        [
            F.silu(h),
            F.mish(h),
            torch.sin(h),
            torch.cos(h),
            1 / (h.abs() + 0.5),
            h.amax(1, keepdim=True),
            h.amin(0, keepdim=True).expand(3, 8),
            torch.logsumexp(h, 1, keepdim=True),
            torch.linalg.vector_norm(h, dim=1, keepdim=True),
            F.pixel_shuffle(h.reshape(3, 4, 1, 2), 2).reshape(3, 8),
        ],
        1,
    )


CASES += [
    pytest.param(SiluGraph(x_first=True), id="SiLU-x-times-sigmoid"),
    pytest.param(SiluGraph(x_first=False), id="SiLU-sigmoid-times-x"),
    pytest.param(ExportCase(lambda net, h: F.silu(h), 17, ("Sigmoid", "Mul")), id="SiLU-exported"),
    pytest.param(
        ExportCase(
            _mix,
            17,
            (
                "Sigmoid",
                "Softplus",
                "Sin",
                "Cos",
                "Reciprocal",
                "ReduceMax",
                "ReduceMin",
                "ReduceLogSumExp",
                "ReduceL2",
                "DepthToSpace",
            ),
            width=8,
        ),
        id="Mix-exported-opset17",
    ),
    pytest.param(
        ExportCase(_mix, 18, ("Sin", "ReduceMax", "ReduceL2", "DepthToSpace"), width=8), id="Mix-exported-opset18"
    ),
]


# ---- GridSample: X and the grid both train, against torch's grid_sample ----


def _grid(shape):
    """Grid coordinates over [-1.3, 1.3], so some fall outside the input, at least 0.02 away (in
    input pixels of up to 6) from the whole numbers where bilinear sampling's gradient jumps."""

    def make(rng):
        g = rng.uniform(-1.3, 1.3, size=shape).astype(np.float32)
        pixels = (g + 1) * 3
        near = np.abs(pixels - np.round(pixels)) < 0.02
        return np.where(near, g + 0.03, g).astype(np.float32)

    return make


for mode, padding, corners, opset in [
    ("bilinear", "zeros", 0, 16),
    ("bilinear", "zeros", 1, 16),
    ("linear", "border", 0, 20),
    ("linear", "reflection", 0, 20),
    ("bilinear", "reflection", 1, 16),
    ("nearest", "zeros", 0, 16),
    ("nearest", "border", 1, 20),
]:
    torch_mode = "bilinear" if mode == "linear" else mode
    case(
        f"{mode}-{padding}-align{corners}",
        "GridSample",
        {"X": normal((2, 3, 5, 6)), "grid": _grid((2, 4, 3, 2))},
        lambda X, grid, m=torch_mode, p=padding, c=corners: F.grid_sample(
            X, grid, mode=m, padding_mode=p, align_corners=bool(c)
        ),
        attrs={"mode": mode, "padding_mode": padding, "align_corners": corners},
        opset=opset,
        reference=opset >= 20,  # onnx.reference knows opset 20's mode names only
    )


def _spatial_transformer(net, h):
    """A spatial transformer as users write one: an affine grid from a layer's output (AffineGrid,
    an ONNX function with an If on its rank), sampling an image made of the same output."""
    theta = net.prelu(h[:, :6].reshape(3, 3, 2)).reshape(3, 2, 3)
    image = h.reshape(3, 2, 2, 3)
    grid = F.affine_grid(theta, [3, 2, 4, 5], align_corners=False)
    return F.grid_sample(image, grid, align_corners=False).reshape(3, -1)


CASES.append(
    pytest.param(
        ExportCase(_spatial_transformer, 20, ("AffineGrid", "GridSample"), width=12), id="SpatialTransformer-exported"
    )
)


# ---- et_math.h's functions against float64 ----


def _math_functions(tmp_path, bodies: dict[str, str]) -> dict:
    """float_library over et_math.h: {name: the function of an array whose C body is bodies[name]}."""
    source = "\n".join((RUNTIME / h).read_text() for h in ("et_common.h", "et_math.h"))
    return float_library(tmp_path, source, bodies)


def _elementwise(fn: str) -> str:
    """The body applying et_math.h's `fn` to each element."""
    return f"int i; for (i = 0; i < n; ++i) y[i] = {fn}(x[i]);"


@dataclass
class SinCosAccuracy:
    """et_sinf and et_cosf, compiled under the strictest flags, within 1 ulp of float64 sin and cos
    (at most 0.98 measured on every float) on a dense sample: the rotary range |x| < 1e5, every
    magnitude up to the largest float, and the floats nearest the multiples of pi/2 below 1e5,
    where the result is smallest and the argument reduction is hardest."""

    def run(self, tmp_path, seed: int) -> float:
        fns = _math_functions(tmp_path, {"t_sin": _elementwise("et_sinf"), "t_cos": _elementwise("et_cosf")})

        rng = np.random.default_rng(seed)
        k = np.arange(1, 63662, dtype=np.float64)
        near = (k * (math.pi / 2)).astype(np.float32)
        x = np.concatenate(
            [
                rng.uniform(-10, 10, 100_000),
                rng.uniform(-1e5, 1e5, 100_000),
                np.exp(rng.uniform(-100, 88.7, 100_000)) * rng.choice([-1, 1], 100_000),
                near,
                np.nextafter(near, np.float32(0)),
                np.nextafter(near, np.float32(np.inf)),
                [0.7853981, 0.78539819, 1e-30, 1e-45, 3.4028235e38, 1e5, 2.0**24, 2.0**60],
            ]
        ).astype(np.float32)
        x = np.concatenate([x, -x])
        worst = 0.0
        for name, ref in (("t_sin", np.sin), ("t_cos", np.cos)):
            err = ulps(fns[name](x), ref(x.astype(np.float64)))
            assert err.max() <= 1.0, f"{name}: {err.max():.3f} ulp at x = {x[err.argmax()]!r}"
            worst = max(worst, float(err.max()))
        specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
        got = {name: fns[f"t_{name}"](specials) for name in ("sin", "cos")}
        assert got["sin"][0] == 0 and not np.signbit(got["sin"][0]) and np.signbit(got["sin"][1])
        assert list(got["cos"][:2]) == [1, 1] and np.isnan(got["sin"][2:]).all() and np.isnan(got["cos"][2:]).all()
        print(f"worst {worst:.3f} ulp")
        return 0.0


CASES.append(pytest.param(SinCosAccuracy(), id="SinCos-accuracy-vs-float64"))


@dataclass
class TrigAccuracy:
    """et_tanf, et_atanf, et_asinf, et_acosf, et_sinhf, et_coshf, et_asinhf, et_acoshf and
    et_atanhf, compiled under the strictest flags, within 3.5 ulp of float64 (measured at most 2.14,
    2.05, 2.76, 3.17, 2.00, 1.42, 2.45, 3.05 and 3.08) on their usual range and every magnitude
    where the result is finite, near 1 for acosh and atanh, with their special values."""

    def run(self, tmp_path, seed: int) -> float:
        names = ("tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh")
        fns = _math_functions(tmp_path, {f"t_{name}": _elementwise(f"et_{name}f") for name in names})
        rng = np.random.default_rng(seed)

        def spread(lo, hi):
            return np.exp(rng.uniform(lo, hi, 200_000)) * rng.choice([-1, 1], 200_000)

        samples = {
            "tan": (np.tan, np.concatenate([rng.uniform(-10, 10, 200_000), spread(-100, 10)])),
            "atan": (np.arctan, np.concatenate([rng.uniform(-3, 3, 200_000), spread(-100, 88)])),
            "asin": (np.arcsin, np.concatenate([rng.uniform(-1, 1, 200_000), spread(-100, 0)])),
            "acos": (np.arccos, np.concatenate([rng.uniform(-1, 1, 200_000), spread(-100, 0)])),
            "sinh": (np.sinh, np.concatenate([rng.uniform(-5, 5, 200_000), spread(-100, 4.48)])),
            "cosh": (np.cosh, np.concatenate([rng.uniform(-5, 5, 200_000), spread(-100, 4.48)])),
            "asinh": (np.arcsinh, np.concatenate([rng.uniform(-5, 5, 200_000), spread(-100, 88)])),
            "acosh": (
                np.arccosh,
                np.concatenate(
                    [rng.uniform(1, 5, 200_000), 1 + np.exp(rng.uniform(-30, 4, 200_000)), np.abs(spread(0, 88))]
                ),
            ),
            "atanh": (
                np.arctanh,
                np.concatenate(
                    [rng.uniform(-1, 1, 200_000), spread(-100, 0), 1 - np.exp(rng.uniform(-16, -1, 200_000))]
                ),
            ),
        }
        worst = 0.0
        for name, (ref, x) in samples.items():
            x = x.astype(np.float32)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                x = x[np.isfinite(ref(x.astype(np.float64)).astype(np.float32))]
            err = ulps(fns[f"t_{name}"](x), ref(x.astype(np.float64)))
            assert err.max() <= 3.5, f"{name}: {err.max():.3f} ulp at x = {x[err.argmax()]!r}"
            worst = max(worst, float(err.max()))
        specials = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0], np.float32)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            for name, (ref, _) in samples.items():
                got, want = fns[f"t_{name}"](specials), ref(specials.astype(np.float64)).astype(np.float32)
                same = (got == want) | (np.isnan(got) & np.isnan(want)) | (ulps(got, want.astype(np.float64)) <= 3.5)
                assert same.all(), f"{name}{tuple(specials[~same])} = {got[~same]}, float64 gives {want[~same]}"
        print(f"worst {worst:.3f} ulp")
        return 0.0


CASES.append(pytest.param(TrigAccuracy(), id="Trig-accuracy-vs-float64"))


@dataclass
class FmodExact:
    """et_fmodf, compiled under the strictest flags, gives C's fmod bit for bit (NumPy's fmod, which
    is exact): every magnitude from the subnormals to the largest float, on both operands and with
    each sign, quotients up to 2^254, and the special operands (zeros, infinities, NaN)."""

    def run(self, tmp_path, seed: int) -> float:
        body = "int i, h = n / 2; for (i = 0; i < h; ++i) y[i] = et_fmodf(x[i], x[h + i]);"
        fmod = _math_functions(tmp_path, {"t_fmod": body})["t_fmod"]
        rng = np.random.default_rng(seed)
        n = 200_000

        def spread():
            return np.exp(rng.uniform(-103, 88.7, n)) * rng.choice([-1, 1], n)

        specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4028235e38, 1.5, -7.0], np.float32)
        a = np.concatenate([spread(), rng.normal(0, 10, n), np.repeat(specials, len(specials))]).astype(np.float32)
        b = np.concatenate([spread(), rng.normal(0, 2, n), np.tile(specials, len(specials))]).astype(np.float32)
        got = fmod(np.concatenate([a, b]))[: len(a)]
        with np.errstate(invalid="ignore"):
            want = np.fmod(a, b)
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), f"fmod({a[~same][0]!r}, {b[~same][0]!r}) = {got[~same][0]!r}, C's {want[~same][0]!r}"
        return 0.0


CASES.append(pytest.param(FmodExact(), id="Fmod-exact-vs-C"))


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)
