"""BatchNormalization (inference and training forms), InstanceNormalization, Pad and Resize:
gradients of the generated C against torch autograd, and BatchNorm's running statistics against
PyTorch's modules.

A table of cases for gradcheck's harness. Every single-op case also runs training_model.onnx
through onnx.reference with our ops' NumPy references and checks it reproduces the C's loss and
gradients. Resize modes
PyTorch lacks are checked against interpolation matrices taken from onnxruntime. The model cases
export torch models (TorchScript exporter in training or eval mode, and the dynamo exporter) and
train them in C next to torch.optim.SGD; the error cases check what the compiler refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgetrain import api, artifacts
from edgetrain.errors import EdgetrainError
from edgetrain.ops import REGISTRY, reference_ops
from gradcheck import Cases, assert_close, build_op_model, check_reference, compile_module, i64, run_case

torch = pytest.importorskip("torch")

F = torch.nn.functional


def f32(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


CASES = Cases()
case = CASES.op


# ---- BatchNormalization, inference form: constant statistics, trainable or frozen scale and B ----


def _stats(c, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=c).astype(np.float32), rng.uniform(0.5, 2.0, c).astype(np.float32)


for name, shape, eps, frozen in [
    ("2d", (4, 3), 1e-5, ()),
    ("3d-eps1e-3", (2, 3, 5), 1e-3, ()),
    ("4d", (2, 3, 2, 3), 1e-5, ()),
    ("4d-frozen-affine", (2, 3, 2, 3), 1e-5, ("scale", "B")),
    ("3d-frozen-scale", (3, 2, 4), 1e-5, ("scale",)),
]:
    mean, var = _stats(shape[1], len(shape))
    case(
        name,
        "BatchNormalization",
        {"X": shape, "scale": (shape[1],), "B": (shape[1],)},
        lambda x, s, b, mean=mean, var=var, eps=eps: F.batch_norm(
            x, torch.from_numpy(mean), torch.from_numpy(var), s, b, training=False, eps=eps
        ),
        attrs={"epsilon": eps},
        consts={"mean": mean, "var": var},
        frozen=frozen,
    )

# ---- InstanceNormalization ----
for name, shape, eps in [
    ("3d", (2, 3, 5), 1e-5),
    ("4d", (2, 3, 3, 4), 1e-5),
    ("4d-eps1e-2", (1, 2, 3, 3), 1e-2),
    ("5d", (2, 2, 2, 2, 3), 1e-5),
]:
    case(
        name,
        "InstanceNormalization",
        {"X": shape, "scale": (shape[1],), "B": (shape[1],)},
        lambda x, s, b, eps=eps: F.instance_norm(x, weight=s, bias=b, eps=eps),
        attrs={"epsilon": eps},
    )


# ---- Pad (opset 18: pads, constant_value and axes are inputs) ----


def _torch_pads(pads):
    """ONNX [b0, b1, ..., e0, e1, ...] -> F.pad's (b_last, e_last, b_prev, e_prev, ...), without
    the leading unpadded axes (F.pad's non-constant modes pad only the spatial ones)."""
    rank = len(pads) // 2
    first = next(d for d in range(rank) if pads[d] or pads[d + rank])
    return [int(p) for d in reversed(range(first, rank)) for p in (pads[d], pads[d + rank])]


for name, shape, pads, mode, value, axes in [  # onnx.reference's Pad (np.pad) cannot crop
    ("constant-4d", (1, 2, 3, 4), (0, 0, 1, 2, 0, 0, 2, 1), "constant", None, None),
    ("constant-value-3d", (2, 2, 3), (0, 1, 2, 1, 0, 3), "constant", 0.5, None),
    ("constant-crop", (2, 3, 5), (0, 0, -1, 0, 0, 2), "constant", -1.5, None),
    ("reflect-3d", (2, 2, 5), (0, 0, 2, 0, 0, 3), "reflect", None, None),
    ("reflect-4d", (1, 2, 4, 5), (0, 0, 1, 3, 0, 0, 3, 2), "reflect", None, None),
    ("edge-3d", (2, 2, 4), (0, 0, 3, 0, 0, 1), "edge", None, None),
    ("edge-4d", (1, 2, 3, 3), (0, 0, 2, 1, 0, 0, 1, 2), "edge", None, None),
    ("edge-5d", (1, 1, 2, 3, 2), (0, 0, 1, 1, 2, 0, 0, 1, 0, 1), "edge", None, None),
]:
    consts = {"pads": i64(*pads), "value": None if value is None else f32(value)}
    if axes is not None:
        consts["axes"] = axes
    case(
        name,
        "Pad",
        {"X": shape},
        lambda x, pads=pads, mode=mode, value=value: F.pad(
            x, _torch_pads(pads), mode={"edge": "replicate"}.get(mode, mode), value=value or 0.0
        ),
        attrs={"mode": mode},
        consts=consts,
        reference=min(pads) >= 0,
    )

# pads for some axes only (negative axes count from the end)
case(
    "axes-reflect",
    "Pad",
    {"X": (2, 3, 4, 5)},
    lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"),
    attrs={"mode": "reflect"},
    consts={"pads": i64(1, 2, 2, 1), "value": None, "axes": i64(2, -1)},
)
case(
    "axes-constant",
    "Pad",
    {"X": (2, 3, 4)},
    lambda x: F.pad(x, (1, 0, 0, 0, 2, 1), value=0.25),
    attrs={"mode": "constant"},
    consts={"pads": i64(2, 1, 1, 0), "value": f32(0.25), "axes": i64(0, 2)},
)
# pads wider than the axis, which F.pad refuses: numpy.pad's indices, gathered by torch
for mode, opset in (("reflect", 18), ("wrap", 19)):
    index = torch.from_numpy(np.pad(np.arange(3), (5, 7), mode))
    case(
        f"{mode}-wider-than-axis",
        "Pad",
        {"X": (2, 3)},
        lambda x, index=index: x[:, index],
        attrs={"mode": mode},
        consts={"pads": i64(0, 5, 0, 7)},
        opset=opset,
    )
# wrap (opset 19) is PyTorch's circular padding
case(
    "wrap-4d",
    "Pad",
    {"X": (1, 2, 3, 4)},
    lambda x: F.pad(x, (1, 3, 2, 1), mode="circular"),
    attrs={"mode": "wrap"},
    consts={"pads": i64(0, 0, 2, 1, 0, 0, 1, 3)},
    opset=19,
)


# ---- Resize: nearest, linear and cubic, scales or sizes ----


def _interp(**kwargs):
    return lambda x: F.interpolate(x, **kwargs)


def _resize(name, shape, torch_fn, *, scales=None, sizes=None, reference=True, **attrs):
    consts = {"roi": None, "scales": None if scales is None else f32(*scales)}
    if sizes is not None:
        consts["sizes"] = i64(*sizes)
    # onnx.reference's Resize cannot take negative axes
    reference = reference and min(attrs.get("axes", (0,))) >= 0
    case(name, "Resize", {"X": shape}, torch_fn, attrs=attrs, consts=consts, reference=reference)


NEAREST = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
_resize("nearest-x2", (1, 2, 3, 4), _interp(scale_factor=2, mode="nearest"), scales=(1, 1, 2, 2), **NEAREST)
_resize("nearest-x3-1d", (2, 2, 3), _interp(scale_factor=3, mode="nearest"), scales=(1, 1, 3), **NEAREST)
_resize("nearest-sizes-up", (1, 2, 4, 4), _interp(size=(5, 7), mode="nearest"), sizes=(1, 2, 5, 7), **NEAREST)
_resize("nearest-sizes-down", (1, 2, 6, 5), _interp(size=(4, 3), mode="nearest"), sizes=(1, 2, 4, 3), **NEAREST)
_resize("nearest-x2-axes", (1, 2, 3, 2), _interp(scale_factor=2, mode="nearest"), scales=(2, 2), axes=(2, 3), **NEAREST)
# F.interpolate(mode="nearest-exact"): half-pixel centres, halves rounded up
for coord in ("half_pixel", "pytorch_half_pixel"):
    exact = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": "round_prefer_ceil"}
    _resize(
        f"nearest-exact-x2-{coord}",
        (1, 2, 3, 3),
        _interp(scale_factor=2, mode="nearest-exact"),
        scales=(1, 1, 2, 2),
        **exact,
    )
    _resize(
        f"nearest-exact-sizes-{coord}",
        (1, 1, 4, 6),
        _interp(size=(7, 4), mode="nearest-exact"),
        sizes=(1, 1, 7, 4),
        **exact,
    )
# ONNX's default nearest_mode rounds halves down; with half-pixel centres and scale 2 no
# coordinate is a half, so it agrees with nearest-exact
_resize(
    "nearest-round-prefer-floor-x2",
    (1, 2, 3, 3),
    _interp(scale_factor=2, mode="nearest-exact"),
    scales=(1, 1, 2, 2),
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
)

for coord in ("half_pixel", "pytorch_half_pixel"):
    linear = {"mode": "linear", "coordinate_transformation_mode": coord}
    _resize(
        f"bilinear-x2-{coord}", (1, 2, 3, 4), _interp(scale_factor=2, mode="bilinear"), scales=(1, 1, 2, 2), **linear
    )
    _resize(
        f"bilinear-x1.5-{coord}",
        (2, 1, 4, 3),
        _interp(scale_factor=1.5, mode="bilinear"),
        scales=(1, 1, 1.5, 1.5),
        **linear,
    )
    _resize(
        f"bilinear-sizes-{coord}", (1, 2, 4, 4), _interp(size=(5, 7), mode="bilinear"), sizes=(1, 2, 5, 7), **linear
    )
    _resize(f"bilinear-down-{coord}", (1, 2, 6, 5), _interp(size=(4, 2), mode="bilinear"), sizes=(1, 2, 4, 2), **linear)
    _resize(f"linear-1d-x2-{coord}", (2, 3, 4), _interp(scale_factor=2, mode="linear"), scales=(1, 1, 2), **linear)
    _resize(
        f"trilinear-x2-{coord}",
        (1, 1, 2, 3, 2),
        _interp(scale_factor=2, mode="trilinear"),
        scales=(1, 1, 2, 2, 2),
        **linear,
    )
ALIGNED = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
_resize(
    "bilinear-align-corners-x2",
    (1, 2, 3, 4),
    _interp(scale_factor=2, mode="bilinear", align_corners=True),
    scales=(1, 1, 2, 2),
    **ALIGNED,
)
_resize(
    "bilinear-align-corners-sizes",
    (1, 2, 4, 4),
    _interp(size=(5, 7), mode="bilinear", align_corners=True),
    sizes=(1, 2, 5, 7),
    **ALIGNED,
)
_resize(
    "bilinear-align-corners-down",
    (1, 1, 5, 6),
    _interp(size=(3, 4), mode="bilinear", align_corners=True),
    sizes=(1, 1, 3, 4),
    **ALIGNED,
)
_resize(
    "bilinear-axes",
    (1, 2, 3, 4),
    _interp(scale_factor=2, mode="bilinear"),
    scales=(2, 2),
    axes=(-2, -1),
    mode="linear",
    coordinate_transformation_mode="half_pixel",
)
# PyTorch's bicubic is ONNX's cubic with cubic_coeff_a -0.75, as torch.onnx exports it.
for coord in ("half_pixel", "pytorch_half_pixel"):
    cubic = {"mode": "cubic", "coordinate_transformation_mode": coord, "cubic_coeff_a": -0.75}
    _resize(f"bicubic-x2-{coord}", (1, 2, 3, 4), _interp(scale_factor=2, mode="bicubic"), scales=(1, 1, 2, 2), **cubic)
    _resize(f"bicubic-sizes-{coord}", (2, 1, 4, 4), _interp(size=(5, 7), mode="bicubic"), sizes=(2, 1, 5, 7), **cubic)
    _resize(f"bicubic-down-{coord}", (1, 2, 7, 5), _interp(size=(4, 2), mode="bicubic"), sizes=(1, 2, 4, 2), **cubic)
# Antialiased (PIL's a = -0.5, taps outside left out, as dynamo exports it) filters only where it
# shrinks: growing, it is plain cubic (timm's ViT resizing its position table to a larger image).
_resize(
    "bicubic-antialias-growing",
    (1, 2, 3, 4),
    _interp(size=(6, 7), mode="bicubic", antialias=True),
    sizes=(1, 2, 6, 7),
    mode="cubic",
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.5,
    exclude_outside=1,
    antialias=1,
)
_resize(
    "bicubic-align-corners-sizes",
    (1, 2, 4, 4),
    _interp(size=(6, 3), mode="bicubic", align_corners=True),
    sizes=(1, 2, 6, 3),
    mode="cubic",
    coordinate_transformation_mode="align_corners",
    cubic_coeff_a=-0.75,
)


def _ort_resize(shape, *, scales=None, sizes=None, reference=True, **attrs):
    """Modes PyTorch has no equivalent of: torch applies, axis by axis, the interpolation matrix
    onnxruntime's Resize produces from an identity matrix, so autograd's transpose is the reference."""
    import onnxruntime

    def matrix(d):
        n_in = shape[d]
        axis_scales = None if scales is None else f32(1, scales[d])
        axis_sizes = None if sizes is None else i64(n_in, sizes[d])
        consts = {"roi": None, "scales": axis_scales}
        if axis_sizes is not None:
            consts["sizes"] = axis_sizes
        node = helper.make_node("Resize", ["X"] + [("" if v is None else k) for k, v in consts.items()], ["Y"], **attrs)
        inits = [numpy_helper.from_array(v, k) for k, v in consts.items() if v is not None]
        graph = helper.make_graph(
            [node],
            "m",
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n_in, n_in])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
            inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 10
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return torch.from_numpy(session.run(None, {"X": np.eye(n_in, dtype=np.float32)})[0].T.copy())

    def fn(x):
        for d in range(x.dim()):
            x = torch.movedim(torch.tensordot(matrix(d), torch.movedim(x, d, 0), dims=1), 0, d)
        return x

    given = f"scales{'x'.join(map(str, scales))}" if scales else f"sizes{'x'.join(map(str, sizes))}"
    name = "-".join(["ort", *map(str, attrs.values()), given])
    _resize(name, shape, fn, scales=scales, sizes=sizes, reference=reference, **attrs)


_ort_resize(
    (1, 1, 3, 4),
    scales=(1, 1, 2.5, 1.5),
    mode="nearest",
    coordinate_transformation_mode="asymmetric",
    nearest_mode="ceil",
)
_ort_resize(
    (1, 2, 4, 3),
    scales=(1, 1, 1.5, 2),
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="floor",
)
_ort_resize(
    (1, 1, 6, 6),
    sizes=(1, 1, 4, 7),
    mode="nearest",
    coordinate_transformation_mode="asymmetric",
    nearest_mode="round_prefer_floor",
)  # 6 -> 4: coordinates 1.5 and 4.5 are ties
_ort_resize(
    (1, 1, 6, 6),
    sizes=(1, 1, 4, 7),
    mode="nearest",
    coordinate_transformation_mode="asymmetric",
    nearest_mode="round_prefer_ceil",
)
_ort_resize(
    (1, 1, 5, 3),
    sizes=(1, 1, 7, 5),
    mode="nearest",
    coordinate_transformation_mode="align_corners",
    nearest_mode="round_prefer_floor",
)
_ort_resize((2, 1, 3, 4), scales=(1, 1, 2, 1.5), mode="linear", coordinate_transformation_mode="asymmetric")
_ort_resize((1, 2, 5, 6), scales=(1, 1, 0.6, 0.5), mode="linear", coordinate_transformation_mode="half_pixel")
_ort_resize((1, 1, 4, 5), sizes=(1, 1, 1, 3), mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
# Cubic beyond PyTorch's: another cubic_coeff_a, the taps outside the input left out, asymmetric.
CUBIC_A = {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}
_ort_resize((1, 1, 4, 5), scales=(1, 1, 2, 1.5), coordinate_transformation_mode="half_pixel", **CUBIC_A)
_ort_resize((1, 2, 6, 5), scales=(1, 1, 0.5, 0.6), coordinate_transformation_mode="half_pixel", **CUBIC_A)
_ort_resize((2, 1, 3, 4), scales=(1, 1, 2, 1.5), mode="cubic", coordinate_transformation_mode="asymmetric")
# An axis resized to length 1 reads coordinate 0 under pytorch_half_pixel, as ONNX says and onnxruntime
# does; onnx.reference's cubic reads the half-pixel coordinate there, so it is not the reference.
_ort_resize(
    (1, 1, 4, 5),
    sizes=(1, 1, 1, 3),
    mode="cubic",
    coordinate_transformation_mode="pytorch_half_pixel",
    reference=False,
)


# ---- BatchNormalization, training form: batch statistics, PyTorch's running statistics ----


def _bn_training_model(x, scale, b, mean, var, momentum, eps, outputs):
    """loss = sum(BN(X) * R) with every operand an initializer; the running statistics outputs
    are named as exporters write them (outputs=3) or left empty (outputs=1)."""
    names = ["Y", "mean_out", "var_out"] if outputs == 3 else ["Y", "", ""]
    nodes = [
        helper.make_node(
            "BatchNormalization",
            ["X", "scale", "B", "mean", "var"],
            names,
            name="bn",
            epsilon=eps,
            momentum=momentum,
            training_mode=1,
        ),
        helper.make_node("Mul", ["Y", "R0"], ["YR"]),
        helper.make_node("ReduceSum", ["YR"], ["loss"], keepdims=0),
    ]
    inits = [
        numpy_helper.from_array(v, n) for n, v in (("X", x), ("scale", scale), ("B", b), ("mean", mean), ("var", var))
    ]
    graph = helper.make_graph(
        nodes,
        "bn_training",
        [helper.make_tensor_value_info("R0", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


@dataclass
class BatchNormTrainingCase:
    """Training steps (no optimizer step, so the batch stays the same) then eval: loss and
    gradients through the batch statistics, running statistics after each step, and the eval loss
    on the running statistics, all against F.batch_norm."""

    shape: tuple
    momentum: float = 0.9  # ONNX's: PyTorch's momentum is 1 - this
    eps: float = 1e-5
    outputs: int = 3
    frozen: tuple = ()
    steps: int = 3

    def run(self, tmp_path, seed: int) -> float:
        rng = np.random.default_rng(seed)
        c = self.shape[1]
        x = (rng.normal(size=self.shape) * 2 + 0.5).astype(np.float32)
        scale, b = rng.normal(size=c).astype(np.float32), rng.normal(size=c).astype(np.float32)
        mean, var = rng.normal(size=c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
        r = rng.normal(size=self.shape).astype(np.float32)
        model = _bn_training_model(x, scale, b, mean, var, self.momentum, self.eps, self.outputs)
        module, state = compile_module(model, tmp_path, loss=None, frozen_params=list(self.frozen) or None)
        assert {n for n, p in state.parameters.items() if p.requires_grad} == {"X", "scale", "B"} - set(self.frozen)
        before = {name: p.data.copy() for name, p in state.parameters.items()}

        leaves = {
            n: torch.tensor(v, requires_grad=n not in self.frozen) for n, v in (("X", x), ("scale", scale), ("B", b))
        }
        running = {"mean": torch.from_numpy(mean.copy()), "var": torch.from_numpy(var.copy())}
        errors = []
        for step in range(self.steps):
            for leaf in leaves.values():
                leaf.grad = None
            module.lazy_reset_grad()
            loss = module(r)
            y = F.batch_norm(
                leaves["X"],
                running["mean"],
                running["var"],
                leaves["scale"],
                leaves["B"],
                training=True,
                momentum=1 - self.momentum,
                eps=self.eps,
            )
            total = (y * torch.from_numpy(r)).sum()
            total.backward()
            errors.append(assert_close(loss, total.detach().numpy(), f"step {step} loss"))
            grads = {}
            for name, leaf in leaves.items():
                if leaf.requires_grad:
                    grads[name] = state.parameters[name].grad
                    errors.append(assert_close(grads[name], leaf.grad.numpy(), f"step {step} d loss/d {name}"))
            for name, stat in running.items():
                assert not state.parameters[name].requires_grad
                errors.append(assert_close(state.parameters[name].data, stat.numpy(), f"step {step} running {name}"))
            if step == 0:
                errors.append(check_reference(tmp_path / "artifacts", {"R0": r, **before}, loss, grads))
                training = onnx.load(tmp_path / "artifacts" / "training_model.onnx")
                outs = ReferenceEvaluator(training, new_ops=reference_ops()).run(
                    None, {i.name: {"R0": r, **before}[i.name] for i in training.graph.input}
                )
                got = dict(zip([o.name for o in training.graph.output], outs))
                for name in running:
                    errors.append(
                        assert_close(
                            got[f"{name}_updated"], state.parameters[name].data, f"onnx.reference running {name}"
                        )
                    )
        module.eval()
        with torch.no_grad():
            y = F.batch_norm(
                leaves["X"], running["mean"], running["var"], leaves["scale"], leaves["B"], training=False, eps=self.eps
            )
        errors.append(assert_close(module(r), (y * torch.from_numpy(r)).sum().numpy(), "eval loss"))
        for name, stat in running.items():  # eval steps leave the statistics alone
            errors.append(assert_close(state.parameters[name].data, stat.numpy(), f"eval running {name}"))
        return max(errors)


for name, spec in [
    ("2d", BatchNormTrainingCase((6, 3))),
    ("3d-momentum0.8-eps1e-3", BatchNormTrainingCase((3, 2, 4), momentum=0.8, eps=1e-3)),
    ("4d", BatchNormTrainingCase((2, 3, 2, 3), momentum=0.7)),
    ("4d-batch1", BatchNormTrainingCase((1, 2, 3, 2))),
    ("unnamed-running-outputs", BatchNormTrainingCase((4, 3, 2), outputs=1)),
    ("frozen-affine", BatchNormTrainingCase((4, 3), frozen=("scale", "B"))),
]:
    CASES.append(pytest.param(spec, id=f"BatchNormalization-training-{name}"))


# ---- what the compiler refuses, with a message naming the node and the reason ----


@dataclass
class ErrorCase:
    model: Callable  # () -> onnx.ModelProto
    match: str

    def run(self, tmp_path, seed: int) -> float:
        with pytest.raises(EdgetrainError, match=self.match):
            compile_module(self.model(), tmp_path, loss=None)
        return 0.0


def _resize_model(scales=(1, 1, 2, 2), **attrs):
    return lambda: build_op_model(
        "Resize", {"X": np.ones((1, 1, 2, 2), np.float32)}, attrs, {"roi": None, "scales": f32(*scales)}
    )[0]


_ones = np.ones(3, np.float32)
for name, spec in [
    (
        "BatchNormalization-training-one-value-per-channel",
        ErrorCase(
            lambda: _bn_training_model(np.ones((1, 3), np.float32), _ones, _ones, _ones, _ones, 0.9, 1e-5, 3),
            "BatchNormalization 'bn' in training mode needs more than one value per channel",
        ),
    ),
    (
        "Resize-tf-crop-and-resize",
        ErrorCase(
            _resize_model(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
            "coordinate_transformation_mode 'tf_crop_and_resize'",
        ),
    ),
    (
        "Resize-antialias-shrinking",
        ErrorCase(
            _resize_model(scales=(1, 1, 0.5, 1), mode="linear", antialias=1), "antialias=1 where it shrinks an axis"
        ),
    ),
]:
    CASES.append(pytest.param(spec, id=f"error-{name}"))


# ---- PyTorch models, exported and trained in C next to torch ----


class MLP(torch.nn.Module):
    def __init__(self, **bn):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.bn = torch.nn.BatchNorm1d(8, **bn)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class InputNorm(torch.nn.Module):
    """BatchNorm1d on the raw features: nothing before it that an exporter could fold it into."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(6)
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(x)))


class Spatial(torch.nn.Module):
    """BatchNorm2d straight on an image, then Upsample and a linear head."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(2, momentum=0.2)
        self.up = torch.nn.Upsample(scale_factor=2, mode="bilinear")
        self.fc = torch.nn.Linear(2 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(self.up(self.bn(x)).flatten(1))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4, momentum=0.3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@dataclass
class ModelCase:
    """Exported model -> edgetrain (SGD) and torch.optim.SGD side by side: losses and parameters
    after every step, running statistics, eval loss (running statistics), and the running
    statistics surviving a checkpoint round trip into a fresh trainer."""

    make: Callable
    input_shape: tuple
    mode: str = "training"  # the export: "training", "eval" (TorchScript) or "dynamo" (eval)
    frozen: tuple = ()
    opset: int = 15
    steps: int = 4
    fresh: bool = False  # keep a fresh BatchNorm's statistics, which eval-mode exports merge with its affine

    def run(self, tmp_path, seed: int) -> float:
        torch.manual_seed(seed % 2**31)
        net = self.make()
        batch = self.input_shape[0]
        # Statistics that are not the defaults, unless fresh: eval-mode exports merge a fresh
        # BatchNorm's equal initializers (running_mean with bias, running_var with weight), which
        # must untie.
        with torch.no_grad():
            for module in net.modules() if not self.fresh else ():
                if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.track_running_stats:
                    module.running_mean.uniform_(-0.5, 0.5)
                    module.running_var.uniform_(0.5, 2.0)
        if self.mode != "training":
            net.eval()
        path = self.export(net, tmp_path / "net.onnx")
        out = artifacts.generate_artifacts(
            path,
            artifact_directory=tmp_path / "out",
            batch_size=batch,
            optimizer=artifacts.OptimType.SGD,
            learning_rate=0.1,
            frozen_params=list(self.frozen) or None,
        )
        state = api.CheckpointState.load_checkpoint(out / "checkpoint")
        module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
        opt = api.Optimizer(out / "optimizer_model.onnx", module)
        for name, param in net.named_parameters():
            param.requires_grad_(name not in self.frozen)
        buffers = {n: b for n, b in net.named_buffers() if "running" in n}
        trainable = {n for n, p in state.parameters.items() if p.requires_grad}
        assert trainable == {n for n, p in net.named_parameters() if p.requires_grad}
        running = {n for n, p in state.parameters.items() if "running" in n}
        assert running == (set(buffers) if self.mode == "training" else set())
        torch_opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.1)

        rng = np.random.default_rng(seed)
        errors = []
        for step in range(self.steps):
            x = rng.normal(size=self.input_shape).astype(np.float32)
            y = rng.integers(0, 3, batch)
            before = {n: p.data.copy() for n, p in state.parameters.items()}
            loss = module(x, y.astype(np.int32))
            if step == 0:
                errors.append(
                    check_reference(
                        out, {"x": x, "labels": y, **before}, loss, {n: state.parameters[n].grad for n in trainable}
                    )
                )
            opt.step()
            module.lazy_reset_grad()
            torch_opt.zero_grad()
            want = F.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
            want.backward()
            torch_opt.step()
            errors.append(assert_close(loss, want.item(), f"step {step} loss"))
            for name, param in net.named_parameters():
                errors.append(assert_close(state.parameters[name].data, param.detach().numpy(), f"step {step} {name}"))
            if self.mode == "training":
                for name, buf in buffers.items():
                    errors.append(assert_close(state.parameters[name].data, buf.numpy(), f"step {step} {name}"))

        return max(errors + self.after_training(tmp_path, net, out, state, module, buffers, rng))

    def export(self, net, path):
        """The model exported as the case says; returns its path."""
        x = torch.randn(*self.input_shape)
        if self.mode == "dynamo":
            torch.onnx.export(net, (x,), path, input_names=["x"], output_names=["logits"])
        else:
            torch.onnx.export(
                net,
                (x,),
                path,
                dynamo=False,
                opset_version=self.opset,
                input_names=["x"],
                output_names=["logits"],
                do_constant_folding=False,
                training=torch.onnx.TrainingMode.TRAINING if self.mode == "training" else torch.onnx.TrainingMode.EVAL,
            )
        return path

    def after_training(self, tmp_path, net, out, state, module, buffers, rng) -> list[float]:
        """The errors of the eval loss, of onnxruntime running the inference model (running
        statistics as initializers), and of the running statistics and eval loss after a checkpoint
        round trip into a fresh trainer."""
        errors = []
        x = rng.normal(size=self.input_shape).astype(np.float32)
        y = rng.integers(0, 3, self.input_shape[0])
        net.eval()
        with torch.no_grad():
            want = F.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y)).item()
        module.eval()
        errors.append(assert_close(module(x, y.astype(np.int32)), want, "eval loss"))
        import onnxruntime

        module.export_model_for_inferencing(tmp_path / "infer.onnx", ["logits"])
        session = onnxruntime.InferenceSession(str(tmp_path / "infer.onnx"), providers=["CPUExecutionProvider"])
        with torch.no_grad():
            logits = net(torch.from_numpy(x)).numpy()
        errors.append(assert_close(session.run(["logits"], {"x": x})[0], logits, "onnxruntime inference"))

        api.CheckpointState.save_checkpoint(state, tmp_path / "ckpt")
        restored = api.CheckpointState.load_checkpoint(tmp_path / "ckpt")
        fresh = api.Module(out / "training_model.onnx", restored, out / "eval_model.onnx").eval()
        for name, buf in buffers.items():
            if self.mode == "training":
                errors.append(assert_close(restored.parameters[name].data, buf.numpy(), f"restored {name}"))
        errors.append(assert_close(fresh(x, y.astype(np.int32)), want, "eval loss after checkpoint round trip"))
        return errors


for name, spec in [
    ("mlp-bn1d-opset15", ModelCase(lambda: MLP(momentum=0.3), (8, 6))),
    ("mlp-bn1d-opset14-default-momentum", ModelCase(MLP, (5, 6), opset=14)),
    ("mlp-bn1d-frozen-affine", ModelCase(lambda: MLP(momentum=0.2), (6, 6), frozen=("bn.weight", "bn.bias"))),
    ("mlp-bn1d-no-affine", ModelCase(lambda: MLP(affine=False), (6, 6))),
    ("mlp-bn1d-untracked", ModelCase(lambda: MLP(track_running_stats=False), (6, 6))),
    ("mlp-bn1d-untracked-eval-export", ModelCase(lambda: MLP(track_running_stats=False), (6, 6), mode="eval")),
    ("bn2d-upsample-opset18", ModelCase(Spatial, (3, 2, 3, 3), opset=18)),
    ("cnn-bn2d", ModelCase(CNN, (4, 1, 4, 4), opset=17)),
    ("mlp-bn1d-eval-export", ModelCase(MLP, (6, 6), mode="eval")),
    ("mlp-bn1d-eval-export-frozen-affine", ModelCase(MLP, (6, 6), mode="eval", frozen=("bn.weight", "bn.bias"))),
    ("input-bn1d-dynamo-eval-export-merged-initializers", ModelCase(InputNorm, (6, 6), mode="dynamo", fresh=True)),
    ("mlp-bn1d-eval-export-merged-initializers", ModelCase(MLP, (6, 6), mode="eval", fresh=True)),
]:
    marks = [pytest.mark.filterwarnings("ignore")]
    if name.startswith("cnn") and ("", "Conv") not in REGISTRY:
        marks.append(pytest.mark.skip(reason="no Conv op yet"))
    CASES.append(pytest.param(spec, id=f"model-{name}", marks=marks))


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)
