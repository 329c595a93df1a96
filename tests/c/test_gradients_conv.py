"""Convolution and pooling gradients, computed by the generated C, against torch autograd.

One parametrized test over Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool and
GlobalMaxPool (1-D to 3-D, strides, asymmetric pads, auto_pad, dilations, groups, ceil_mode,
count_include_pad); each case is one op node followed by loss = ReduceSum(Y * R). ONNX's
asymmetric pads become F.pad in the torch reference. Every case also runs training_model.onnx
through onnx.reference (forward ops in torch, our gradient ops through their NumPy references),
so the artifacts describe what the C computes. Geometries without one agreed meaning must be
rejected, and a last test trains a small CNN exported by PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference.op_run import OpRun

from edgetrain import api, artifacts
from edgetrain.errors import EdgetrainError
from edgetrain.frontend import load_model
from edgetrain.lower import lower
from edgetrain.memory.plan import plan_function
from edgetrain.optim import LossType, OptimizerSpec, OptimType
from edgetrain.trainer import build_trainer
from gradcheck import TOL, Cases, assert_close, build_op_model, compile_module, run_case, ties

torch = pytest.importorskip("torch")

F = torch.nn.functional
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _torch_pads(begin, end):
    """ONNX [b0, b1, ..., e0, e1, ...] as F.pad's (last axis first) pairs."""
    return [p for b, e in zip(reversed(begin), reversed(end)) for p in (b, e)]


def _same_pads(in_spatial, kernel, strides, dilations, mode):
    """ONNX auto_pad SAME_*: output ceil(in / stride), the odd pad element at the end (UPPER) or
    the beginning (LOWER)."""
    begin, end = [], []
    for i, k, s, d in zip(in_spatial, kernel, strides, dilations):
        total = max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return begin, end


def _pads(attrs, x_shape, kernel):
    rank = len(kernel)
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad.startswith("SAME"):
        return _same_pads(x_shape[2:], kernel, strides, dilations, auto_pad)
    pads = attrs.get("pads", [0] * 2 * rank)
    return list(pads[:rank]), list(pads[rank:])


# ---- torch references ----


def torch_conv(attrs, x_shape, w_shape, b_shape=None):
    rank = len(x_shape) - 2
    begin, end = _pads(attrs, x_shape, w_shape[2:])

    def fn(x, w, b=None):
        return CONV[rank](
            F.pad(x, _torch_pads(begin, end)),
            w,
            b,
            stride=attrs.get("strides", 1),
            dilation=attrs.get("dilations", 1),
            groups=attrs.get("group", 1),
        )

    return fn


def torch_conv_transpose(attrs, x_shape, w_shape, b_shape=None):
    """Full transposed convolution (no pads), then ONNX's pads crop it; output_shape and SAME_*
    derive the pads from the output size as the ONNX spec says."""
    rank = len(x_shape) - 2
    kernel = w_shape[2:]
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    out_pad = attrs.get("output_padding", [0] * rank)
    full = [
        s * (i - 1) + p + (k - 1) * d + 1 for i, s, p, k, d in zip(x_shape[2:], strides, out_pad, kernel, dilations)
    ]
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or auto_pad.startswith("SAME"):
        out = attrs.get("output_shape") or [i * s for i, s in zip(x_shape[2:], strides)]
        total = [f - o for f, o in zip(full, out)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
    else:
        pads = attrs.get("pads", [0] * 2 * rank)
        begin, out = pads[:rank], [f - a - b for f, a, b in zip(full, pads[:rank], pads[rank:])]

    def fn(x, w, b=None):
        y = CONV_T[rank](
            x, w, b, stride=strides, output_padding=out_pad, dilation=dilations, groups=attrs.get("group", 1)
        )
        return y[(...,) + tuple(slice(a, a + o) for a, o in zip(begin, out))]

    return fn


def torch_max_pool(attrs, x_shape):
    """torch's own padding where it has the geometry (symmetric, at most half the window),
    otherwise F.pad with -inf."""
    rank = len(x_shape) - 2
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * rank)  # ONNX's default, not torch's (the window)
    begin, end = _pads(attrs, x_shape, kernel)
    own = begin == end and all(2 * b <= k for b, k in zip(begin, kernel))

    def fn(x):
        if not own:
            x = F.pad(x, _torch_pads(begin, end), value=-float("inf"))
        return MAX_POOL[rank](
            x,
            kernel,
            strides,
            begin if own else 0,
            attrs.get("dilations", 1),
            ceil_mode=bool(attrs.get("ceil_mode", 0)),
        )

    return fn


def torch_global(reduce):
    def make(attrs, x_shape):
        axes = tuple(range(2, len(x_shape)))
        return lambda x: reduce(x, axes, keepdim=True)

    return make


def torch_average_pool(attrs, x_shape):
    """torch's own avg_pool where it has the geometry (symmetric pads, no dilation); otherwise a
    depthwise convolution with a ones kernel over the zero-padded input, divided by the same
    convolution of ones (count_include_pad 0) or by the window size (1)."""
    rank = len(x_shape) - 2
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    begin, end = _pads(attrs, x_shape, kernel)
    include = bool(attrs.get("count_include_pad", 0))
    ceil = bool(attrs.get("ceil_mode", 0))

    def fn(x):
        if begin == end and set(dilations) == {1} and all(2 * b <= k for b, k in zip(begin, kernel)):
            return AVG_POOL[rank](x, kernel, strides, begin, ceil_mode=ceil, count_include_pad=include)
        assert not ceil, "the convolution form has no ceil_mode"
        c = x.shape[1]
        ones = torch.ones((c, 1, *kernel))

        def window(t):
            return CONV[rank](F.pad(t, _torch_pads(begin, end)), ones, stride=strides, dilation=dilations, groups=c)

        count = window(torch.ones_like(x)) if not include else float(np.prod(kernel))
        return window(x) / count

    return fn


# ---- cases ----


def _torch_op(name, make):
    """Standard op `name` executed by its torch reference `make(attrs, *input shapes)`, for
    onnx.reference: its own ConvTranspose mishandles groups and output_shape, its MaxPool sizes
    SAME_LOWER outputs unlike shape inference, and its 1-D GlobalMaxPool drops an axis."""

    def _run(self, *inputs, **attrs):
        attrs = {k: list(v) if isinstance(v, (tuple, np.ndarray)) else v for k, v in attrs.items() if v is not None}
        with torch.no_grad():
            y = make(attrs, *(x.shape for x in inputs))(*(torch.from_numpy(np.asarray(x)) for x in inputs))
        return (y.numpy(),)

    return type(name, (OpRun,), {"op_domain": "", "_run": _run})


TORCH_OPS = [
    _torch_op("Conv", torch_conv),
    _torch_op("ConvTranspose", torch_conv_transpose),
    _torch_op("MaxPool", torch_max_pool),
    _torch_op("AveragePool", torch_average_pool),
    _torch_op("GlobalAveragePool", torch_global(torch.mean)),
    _torch_op("GlobalMaxPool", torch_global(torch.amax)),
]


CASES = Cases()


def case(name, op, inputs, attrs, torch_fn, kind="normal", opset=18):
    """inputs: operand -> shape; kind "ties" gives the first operand few distinct values. The
    reference runs the forward ops in torch (TORCH_OPS)."""
    specs = {
        operand: ties(shape) if kind == "ties" and i == 0 else shape
        for i, (operand, shape) in enumerate(inputs.items())
    }
    CASES.op(name, op, specs, torch_fn, attrs=attrs, opset=opset, reference_ops=TORCH_OPS)


def conv_case(name, x, w, attrs, bias=True):
    inputs = {"X": x, "W": w}
    if bias:
        inputs["B"] = (w[0],)
    case(name, "Conv", inputs, attrs, torch_conv(attrs, x, w))


def conv_transpose_case(name, x, w, attrs, bias=True):
    inputs = {"X": x, "W": w}
    if bias:
        inputs["B"] = (w[1] * attrs.get("group", 1),)
    case(name, "ConvTranspose", inputs, attrs, torch_conv_transpose(attrs, x, w))


conv_case("1d-pad1", (2, 3, 7), (4, 3, 3), {"pads": [1, 1]})
conv_case(
    "1d-stride2-dil2-asym-nobias", (2, 3, 9), (2, 3, 3), {"strides": [2], "dilations": [2], "pads": [2, 0]}, bias=False
)
conv_case("1d-group2-same-upper-stride2", (1, 4, 8), (6, 2, 4), {"group": 2, "strides": [2], "auto_pad": "SAME_UPPER"})
conv_case("2d-3x3-pad1", (2, 3, 5, 6), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]})
conv_case(
    "2d-strides-dils-asym-group2",
    (2, 4, 7, 8),
    (6, 2, 3, 2),
    {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1], "group": 2},
)
conv_case(
    "2d-depthwise-mult2-stride2", (2, 3, 7, 6), (6, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1]}
)
conv_case("2d-depthwise-nobias", (1, 4, 5, 5), (4, 1, 3, 3), {"group": 4, "pads": [0, 1, 2, 1]}, bias=False)
conv_case("2d-1x1", (2, 5, 4, 3), (3, 5, 1, 1), {})
conv_case("2d-1x1-group2", (2, 4, 3, 3), (6, 2, 1, 1), {"group": 2})
# Input gradients that may take over dY's bytes (ConvGradXInPlace): no more input than output channels
# without groups, on a plane whose dX outweighs the kernel's scratch (160 positions of dY here), and
# depthwise at its size.
conv_case("2d-1x1-expand", (2, 3, 18, 18), (6, 3, 1, 1), {})
conv_case("2d-1x1-expand-small-plane", (2, 3, 4, 5), (6, 3, 1, 1), {})
conv_case("2d-depthwise-dil2-same", (2, 5, 6, 7), (5, 1, 3, 3), {"group": 5, "dilations": [2, 2], "pads": [2, 2, 2, 2]})
conv_case("2d-1x1-stride2-pad-end", (1, 3, 5, 5), (2, 3, 1, 1), {"strides": [2, 2], "pads": [0, 0, 1, 0]})
conv_case("2d-same-lower-stride2-k4", (1, 2, 7, 6), (3, 2, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"})
conv_case("2d-valid-stride3-k2", (2, 2, 8, 7), (3, 2, 2, 2), {"strides": [3, 3], "auto_pad": "VALID"})
conv_case("2d-same-upper-dil2", (1, 2, 6, 7), (2, 2, 3, 3), {"dilations": [2, 2], "auto_pad": "SAME_UPPER"})
conv_case("2d-big-pads-rect-kernel", (1, 2, 4, 5), (3, 2, 2, 3), {"pads": [2, 3, 2, 1], "strides": [1, 2]})
conv_case("3d", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]})
conv_case(
    "3d-group2-dil", (2, 2, 5, 4, 5), (2, 1, 2, 2, 3), {"group": 2, "dilations": [2, 1, 1], "pads": [0, 1, 1, 0, 0, 1]}
)
# Register tiles whole and partial (4 output channels by 16 positions), groups of 4 or more channels,
# and planes too large for the padded copies (the kernels then gather with clipping, to the same values).
conv_case("2d-group2-wide-pad1", (2, 4, 20, 20), (8, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]})
conv_case("2d-16ch-stride2", (2, 8, 9, 9), (16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]})
conv_case("2d-plane-beyond-scratch", (1, 2, 130, 130), (4, 2, 3, 3), {"pads": [1, 1, 1, 1]})
conv_case("2d-depthwise-beyond-scratch", (1, 2, 130, 130), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]})

conv_transpose_case(
    "1d-stride2-pad1-outpad1", (2, 3, 5), (3, 4, 3), {"strides": [2], "pads": [1, 1], "output_padding": [1]}
)
conv_transpose_case("1d-dil2-group2-nobias", (1, 4, 6), (4, 3, 3), {"dilations": [2], "group": 2}, bias=False)
conv_transpose_case("2d-strides-asym-pads", (2, 3, 4, 3), (3, 2, 3, 3), {"strides": [2, 3], "pads": [1, 0, 0, 2]})
conv_transpose_case(
    "2d-group2-dil-outpad",
    (1, 4, 3, 4),
    (4, 3, 2, 3),
    {"strides": [2, 2], "dilations": [2, 1], "output_padding": [1, 1], "group": 2},
)
conv_transpose_case("2d-depthwise", (2, 3, 4, 4), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1]})
conv_transpose_case("2d-1x1", (2, 4, 3, 5), (4, 3, 1, 1), {})
conv_transpose_case("2d-output-shape", (1, 2, 3, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [6, 8]})
conv_transpose_case("2d-same-upper", (1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"})
conv_transpose_case(
    "2d-same-lower-even-kernel", (1, 2, 3, 4), (2, 2, 4, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}
)
conv_transpose_case("3d", (1, 2, 2, 3, 2), (2, 2, 2, 2, 3), {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]})
conv_transpose_case("2d-group2-wide", (1, 4, 5, 6), (4, 4, 3, 3), {"group": 2, "pads": [1, 0, 1, 1]})
conv_transpose_case("2d-depthwise-unit-stride", (2, 3, 5, 5), (3, 2, 3, 3), {"group": 3, "dilations": [2, 1]})


def max_pool_case(name, x, attrs, **kwargs):
    case(name, "MaxPool", {"X": x}, attrs, torch_max_pool(attrs, x), **kwargs)


def average_pool_case(name, x, attrs, **kwargs):
    case(name, "AveragePool", {"X": x}, attrs, torch_average_pool(attrs, x), **kwargs)


max_pool_case("1d-k3-s2", (2, 3, 9), {"kernel_shape": [3], "strides": [2]})
max_pool_case("1d-pad1-ceil", (1, 2, 8), {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "ceil_mode": 1})
max_pool_case("2d-k2-s2", (2, 3, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]})
max_pool_case("2d-k3-s2-pad1", (2, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
max_pool_case("2d-asym-pads-rect", (1, 3, 5, 6), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]})
max_pool_case("2d-dilations", (1, 2, 7, 7), {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 1, 1, 1]})
max_pool_case("2d-ceil", (2, 2, 6, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1})
max_pool_case("2d-same-upper", (1, 2, 5, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"})
max_pool_case("2d-same-lower", (1, 2, 5, 6), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"})
max_pool_case(
    "2d-ties-overlap", (2, 2, 5, 5), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, kind="ties"
)
max_pool_case("3d", (1, 2, 4, 5, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 1]})

average_pool_case("1d-k3", (2, 3, 7), {"kernel_shape": [3]})
average_pool_case(
    "1d-pad1-include", (1, 2, 8), {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "count_include_pad": 1}
)
average_pool_case("2d-k2-s2", (2, 3, 6, 4), {"kernel_shape": [2, 2], "strides": [2, 2]})
average_pool_case("2d-pad1-exclude", (1, 2, 6, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
average_pool_case(
    "2d-pad1-include",
    (1, 2, 6, 7),
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
)
average_pool_case(
    "2d-ceil-pad-exclude",
    (2, 2, 6, 6),
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
)
average_pool_case(
    "2d-ceil-pad-include",
    (2, 2, 6, 6),
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
)
average_pool_case(
    "2d-ceil-include", (1, 2, 7, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1}
)
average_pool_case("2d-asym-exclude", (1, 2, 5, 6), {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [2, 0, 0, 1]})
average_pool_case(
    "2d-asym-include",
    (1, 2, 5, 6),
    {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [2, 0, 0, 1], "count_include_pad": 1},
)
average_pool_case("2d-same-upper", (1, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"})
average_pool_case(
    "2d-dilations-opset19", (1, 2, 7, 6), {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 0]}, opset=19
)
average_pool_case(
    "3d",
    (1, 2, 4, 4, 5),
    {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2], "pads": [0, 1, 1, 0, 1, 1], "count_include_pad": 1},
)

for dims in ((2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)):
    case(f"{len(dims) - 2}d", "GlobalAveragePool", {"X": dims}, {}, torch_global(torch.mean)({}, dims))
    case(f"{len(dims) - 2}d", "GlobalMaxPool", {"X": dims}, {}, torch_global(torch.amax)({}, dims))
case("2d-adaptive-ties", "GlobalMaxPool", {"X": (2, 3, 3, 3)}, {}, lambda x: F.adaptive_max_pool2d(x, 1), kind="ties")


def torch_fold(image, block, attrs):
    """Col2Im as F.fold (two spatial axes; one gets a unit axis): onto the image padded at both
    ends, then cropped, since F.fold's padding is the same at both ends of an axis."""
    rank = len(image)
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    begin, end = pads[:rank], pads[rank:]
    lift = (lambda v, one: [one, *v]) if rank == 1 else (lambda v, one: list(v))
    padded = [i + b + e for i, b, e in zip(image, begin, end)]

    def fn(x):
        y = F.fold(x, lift(padded, 1), lift(block, 1), dilation=lift(dilations, 1), stride=lift(strides, 1))
        y = y[(..., *(slice(b, b + i) for b, i in zip(lift(begin, 0), lift(image, 1))))]
        return y.reshape(*y.shape[:2], *image)

    return fn


def col2im_case(name, channels, image, block, attrs):
    """Col2Im of `channels` planes of `image` from batch-2 columns, as many blocks as the geometry makes."""
    rank = len(image)
    pads = attrs.get("pads", [0] * 2 * rank)
    blocks = [
        (i + pads[a] + pads[a + rank] - (k - 1) * d - 1) // s + 1
        for a, (i, k, d, s) in enumerate(
            zip(image, block, attrs.get("dilations", [1] * rank), attrs.get("strides", [1] * rank))
        )
    ]
    x = (2, channels * int(np.prod(block)), int(np.prod(blocks)))
    consts = {"image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)}
    CASES.op(name, "Col2Im", {"input": x}, torch_fold(image, block, attrs), attrs=attrs, consts=consts)


# torch's fold and unfold: MobileViT's patches (blocks that tile the image), VOLO's overlapping 3 x 3
# windows with padding, and asymmetric pads, dilations and a 1-D image.
col2im_case("2d-patches", 3, (8, 8), (2, 2), {"strides": [2, 2]})
col2im_case("2d-overlap-pad1", 2, (6, 5), (3, 3), {"pads": [1, 1, 1, 1]})
col2im_case("2d-overlap-stride2-pad1", 2, (7, 6), (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]})
col2im_case("2d-asym-dil", 2, (5, 7), (2, 3), {"strides": [1, 2], "dilations": [2, 1], "pads": [1, 0, 2, 1]})
col2im_case("1d-stride2-pad1", 3, (9,), (3,), {"strides": [2], "pads": [1, 1]})


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)


@pytest.mark.parametrize(
    "op, inputs, attrs, match",
    [
        # onnx shape inference keeps a ceil_mode window starting past the input (PyTorch drops it).
        (
            "MaxPool",
            {"X": (1, 1, 7)},
            {"kernel_shape": [2], "strides": [3], "pads": [1, 1], "ceil_mode": 1},
            "covers only padding",
        ),
        (
            "AveragePool",
            {"X": (1, 1, 7)},
            {"kernel_shape": [2], "strides": [3], "pads": [1, 1], "ceil_mode": 1},
            "covers only padding",
        ),
        (
            "ConvTranspose",
            {"X": (1, 1, 3), "W": (1, 1, 4)},
            {"strides": [2], "auto_pad": "SAME_LOWER", "output_padding": [1]},
            "no agreed output size",
        ),
    ],
    ids=["MaxPool-empty-window", "AveragePool-empty-window", "ConvTranspose-same-output-padding"],
)
def test_ambiguous_geometry_is_rejected(op, inputs, attrs, match, tmp_path):
    values = {name: np.ones(shape, np.float32) for name, shape in inputs.items()}
    model, _, _ = build_op_model(op, values, attrs, {})
    with pytest.raises(EdgetrainError, match=match):
        compile_module(model, tmp_path, loss=None)


# ---- a CNN as PyTorch exports it ----


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


class SeparableCNN(torch.nn.Module):
    """A depthwise-separable block: the layers whose input gradient takes over dY's bytes."""

    def __init__(self):
        super().__init__()
        self.expand = torch.nn.Conv2d(2, 6, 1)
        self.depthwise = torch.nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.pointwise = torch.nn.Conv2d(6, 8, 1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.depthwise(torch.relu(self.expand(x))))
        return self.fc(torch.relu(self.pointwise(x)).mean((2, 3)))


def _trains_like_torch(net, tmp_path, batch: int, size: int = 8) -> None:
    """Exported by torch.onnx.export (TorchScript, training mode) to tmp_path / "cnn.onnx" and
    trained by SGD on size x size images: loss and gradients match torch over several steps."""
    torch.manual_seed(0)
    torch.onnx.export(
        net,
        (torch.randn(batch, 2, size, size),),
        tmp_path / "cnn.onnx",
        dynamo=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=["x"],
        output_names=["logits"],
        dynamic_axes={"x": {0: "batch"}},
    )
    lr = 0.1
    out = artifacts.generate_artifacts(
        tmp_path / "cnn.onnx",
        artifact_directory=tmp_path / "out",
        batch_size=batch,
        optimizer=artifacts.OptimType.SGD,
        learning_rate=lr,
    )
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    opt = api.Optimizer(out / "optimizer_model.onnx", module)
    torch_opt = torch.optim.SGD(net.parameters(), lr=lr)
    module.train()
    for step in range(3):
        x = torch.randn(batch, 2, size, size)
        y = torch.randint(0, 5, (batch,))
        loss = module(x.numpy(), y.numpy().astype(np.int64))
        torch_opt.zero_grad()
        want = F.cross_entropy(net(x), y)
        want.backward()
        assert abs(loss - want.item()) <= TOL * max(1.0, abs(want.item())), f"step {step} loss"
        for name, param in net.named_parameters():
            assert_close(state.parameters[name].grad, param.grad.numpy(), f"step {step} d loss/d {name}")
        opt.step()
        module.lazy_reset_grad()
        torch_opt.step()


@pytest.mark.filterwarnings("ignore")
def test_exported_cnn_trains_like_torch(tmp_path):
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm."""
    _trains_like_torch(SmallCNN(), tmp_path, batch=4)


@pytest.mark.filterwarnings("ignore")
def test_separable_block_trains_like_torch_with_input_gradients_in_place(tmp_path):
    """The depthwise and the expanding pointwise Conv make their input gradient in the bytes of their
    output gradient, and train as torch does, at a batch the kernel's pieces split. At 24 x 24, where
    the pointwise kernel's scratch (128 positions of dY) is smaller than a sample's dX."""
    _trains_like_torch(SeparableCNN(), tmp_path, batch=3, size=24)
    trainer = build_trainer(
        load_model(tmp_path / "cnn.onnx", 3), loss=LossType.CrossEntropyLoss, optimizer=OptimizerSpec(OptimType.SGD)
    )
    program = lower(trainer, "model")
    train = program.functions()["train"]
    offsets = plan_function(program, train).offsets
    in_place = [node for node in train.nodes if node.op == "ConvGradXInPlace"]
    assert len(in_place) == 2 and all(offsets[n.outputs[0]] == offsets[n.inputs[0]] for n in in_place)
