"""Pad (constant, reflect, edge, wrap) and Resize (nearest, linear, cubic) with constant pads, scales
or sizes. Both map output indices to input indices axis by axis; their gradients scatter the
output gradient back through the same mapping."""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .integer import is_integer, typed
from .registry import op

PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


def _pads(k, node) -> tuple[list[int], list[int]]:
    """Per-axis (begins, ends) from the pads input and the optional axes input."""
    rank = len(k.shape(node.inputs[0]))
    inputs = tuple(node.inputs) + ("",) * 3
    pads = [int(p) for p in k.value_of(inputs[1]).ravel()]
    axes = [int(a) % rank for a in k.value_of(inputs[3]).ravel()] if inputs[3] else list(range(rank))
    begins, ends = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        begins[axis], ends[axis] = pads[i], pads[i + len(axes)]
    return begins, ends


def _pad_mode(node) -> str:
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise EdgetrainError(f"Pad '{node.name}': mode '{mode}' is not supported ({', '.join(PAD_MODES)})")
    return mode


def _pad_source(o: int, begin: int, n: int, mode: str) -> int:
    """NumPy twin of et_pad_source: the input index output index o reads, -1 for the border."""
    i = o - begin
    if 0 <= i < n:
        return i
    if n <= 0 or mode == "constant":
        return -1
    if mode == "edge":
        return 0 if i < 0 else n - 1
    if mode == "wrap":
        return i % n
    if n == 1:
        return 0
    i %= 2 * (n - 1)
    return i if i < n else 2 * (n - 1) - i


def _along_axes(x, matrices, transpose=False):
    """Apply one (out, in) matrix per axis: the separable linear maps Pad and Resize are."""
    order = range(x.ndim - 1, -1, -1) if transpose else range(x.ndim)
    for d in order:
        m = matrices[d].T if transpose else matrices[d]
        x = np.moveaxis(np.tensordot(m, np.moveaxis(x, d, 0), axes=1), 0, d)
    return x.astype(np.float32)


@op("Pad", const_inputs=(1, 2, 3))
class Pad:
    integer = True

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        begins, _ = _pads(k, node)
        inputs = tuple(node.inputs) + ("",) * 3
        value = k.value_of(inputs[2]).ravel()[0] if inputs[2] else 0
        value = int(value) if is_integer(k.graph, x) else float(value)
        return [
            k.call(
                typed(k, "et_pad", x),
                len(k.shape(x)),
                k.shape(x),
                k.shape(y),
                tuple(begins),
                PAD_MODES[_pad_mode(node)],
                value,
                x,
                y,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        begins, ends = _pads(g, node)
        dx = g.emit("PadGrad", [dy[0]], {"pads": begins + ends, "mode": _pad_mode(node)}, domain=ET_DOMAIN)
        return [dx] + [None] * (len(node.inputs) - 1)


@op("PadGrad", domain=ET_DOMAIN)
class PadGrad:
    """dY -> dX of Pad with full-rank pads [begins..., ends...]: each input element receives the
    gradients of every output element that copied it."""

    @staticmethod
    def kernel(k, node):
        dy, dx = node.inputs[0], node.outputs[0]
        rank = len(k.shape(dx))
        return [
            k.call(
                "et_pad_grad_f32",
                rank,
                k.shape(dx),
                k.shape(dy),
                tuple(node.attr("pads")[:rank]),
                PAD_MODES[node.attr("mode")],
                dy,
                dx,
            )
        ]

    @staticmethod
    def shape(graph, node):
        out, pads = graph.shape(node.inputs[0]), node.attr("pads")
        return [tuple(n - b - e for n, b, e in zip(out, pads[: len(out)], pads[len(out) :]))]

    @staticmethod
    def reference(dy, pads, mode):
        rank = dy.ndim
        shape = [n - b - e for n, b, e in zip(dy.shape, pads[:rank], pads[rank:])]
        matrices = []
        for n_out, n_in, begin in zip(dy.shape, shape, pads[:rank]):
            m = np.zeros((n_out, n_in))
            for o in range(n_out):
                i = _pad_source(o, begin, n_in, mode)
                if i >= 0:
                    m[o, i] = 1.0
            matrices.append(m)
        return (_along_axes(dy, matrices, transpose=True),)


COORDINATE_MODES = {"half_pixel": 0, "pytorch_half_pixel": 1, "align_corners": 2, "asymmetric": 3}
NEAREST_MODES = {"round_prefer_floor": 1, "round_prefer_ceil": 2, "floor": 3, "ceil": 4}
LINEAR, CUBIC = 0, 5
TAPS = 4  # the most input indices one output index of an axis reads: cubic's


def _resize_modes(attrs, name: str, in_shape, out_shape) -> tuple[int, int]:
    """(coordinate mode, interpolation) codes of et_resize_*, or an error naming what we lack.
    antialias filters only where linear or cubic shrink an axis (ONNX): elsewhere it changes nothing."""
    mode = attrs.get("mode", "nearest")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    problems = []
    if mode not in ("nearest", "linear", "cubic"):
        problems.append(f"mode '{mode}' (nearest, linear and cubic are)")
    if coord not in COORDINATE_MODES:
        problems.append(f"coordinate_transformation_mode '{coord}' ({', '.join(COORDINATE_MODES)} are)")
    if mode == "nearest" and nearest not in NEAREST_MODES:
        problems.append(f"nearest_mode '{nearest}'")
    if attrs.get("antialias", 0) and mode != "nearest" and any(o < i for i, o in zip(in_shape, out_shape)):
        problems.append("antialias=1 where it shrinks an axis")
    if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        problems.append(f"keep_aspect_ratio_policy '{attrs['keep_aspect_ratio_policy']}' (stretch is)")
    if problems:
        raise EdgetrainError(f"Resize '{name}': not supported: {'; '.join(problems)}")
    return COORDINATE_MODES[coord], LINEAR if mode == "linear" else CUBIC if mode == "cubic" else NEAREST_MODES[nearest]


def _cubic(attrs) -> tuple[float, int]:
    """ONNX's cubic_coeff_a and exclude_outside."""
    return float(attrs.get("cubic_coeff_a", -0.75)), int(attrs.get("exclude_outside", 0))


def _scale_index(attrs, rank: int, scales) -> tuple[int, ...]:
    """For each axis, its entry in the scales input (-1: not listed in `axes`)."""
    if scales is None:
        return (-1,) * rank
    axes = [int(a) % rank for a in attrs.get("axes") or range(rank)]
    return tuple(axes.index(d) if d in axes else -1 for d in range(rank))


def _scales_input(k, node, slot: int) -> str | None:
    """The scales input, when given and not empty (exporters pass an empty one next to sizes)."""
    name = node.inputs[slot] if len(node.inputs) > slot else ""
    return name if name and k.value_of(name).size else None


def _resize_call(k, fn, attrs, name, scales, src, dst, in_shape, out_shape):
    """et_resize_f32 or et_resize_cubic_f32, or their gradients (fn names the nearest and linear one)."""
    coord, mode = _resize_modes(attrs, name, in_shape, out_shape)
    where = (len(in_shape), in_shape, out_shape, scales, _scale_index(attrs, len(in_shape), scales), coord)
    if mode == CUBIC:
        return k.call(fn.replace("et_resize", "et_resize_cubic"), *where, *_cubic(attrs), src, dst)
    return k.call(fn, *where, mode, src, dst)


@op("Resize", const_inputs=(1, 2, 3))
class Resize:
    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        return [
            _resize_call(
                k, "et_resize_f32", node.attrs, node.name, _scales_input(k, node, 2), x, y, k.shape(x), k.shape(y)
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        x = node.inputs[0]
        scales = _scales_input(g, node, 2)
        dx = g.emit(
            "ResizeGrad",
            [dy[0]] + ([scales] if scales else []),
            {**node.attrs, "shape": list(g.shape(x))},
            domain=ET_DOMAIN,
        )
        return [dx] + [None] * (len(node.inputs) - 1)


def _cubic_weight(d, a):
    """et_cubic_weight_: the cubic convolution kernel at distance d in [0, 2], in float32."""
    f = np.float32
    if d <= 1:
        return ((a + f(2)) * d - (a + f(3))) * d * d + f(1)
    return ((a * d - f(5) * a) * d + f(8) * a) * d - f(4) * a


def _taps(o, n_in, n_out, scale, coord, mode, cubic_a=-0.75, exclude_outside=0):
    """NumPy twin of et_resize_taps, in float32: [(input index, weight)] of output index o."""
    f = np.float32
    if coord == COORDINATE_MODES["align_corners"]:
        x = f(0) if n_out <= 1 else f(o) * f(n_in - 1) / f(n_out - 1)
    elif coord == COORDINATE_MODES["asymmetric"]:
        x = f(o) / scale
    elif coord == COORDINATE_MODES["pytorch_half_pixel"] and n_out <= 1:
        x = f(0)
    else:
        x = (f(o) + f(0.5)) / scale - f(0.5)
    if mode == CUBIC:
        i = int(np.floor(x))
        frac, a = x - f(i), f(cubic_a)
        at = [i - 1 + t for t in range(TAPS)]
        distances = [frac + f(1), frac, f(1) - frac, f(2) - frac]
        w = [f(0) if exclude_outside and not 0 <= j < n_in else _cubic_weight(d, a) for j, d in zip(at, distances)]
        if exclude_outside:
            total = sum(w[1:], w[0])
            w = [v / total for v in w]
        return [(min(max(j, 0), n_in - 1), v) for j, v in zip(at, w)]
    x = max(x, f(0))
    if mode == LINEAR:
        x = min(x, f(n_in - 1))
        i = int(x)
        return [(i, f(1) - (x - f(i))), (min(i + 1, n_in - 1), x - f(i))]
    i = int(x)
    frac = x - f(i)
    if (
        (mode == NEAREST_MODES["ceil"] and frac > 0)
        or (mode == NEAREST_MODES["round_prefer_floor"] and frac > 0.5)
        or (mode == NEAREST_MODES["round_prefer_ceil"] and frac >= 0.5)
    ):
        i += 1
    return [(min(i, n_in - 1), f(1))]


@op("ResizeGrad", domain=ET_DOMAIN)
class ResizeGrad:
    """(dY[, scales]) -> dX of a Resize with the same attributes, X's shape in `shape`."""

    @staticmethod
    def kernel(k, node):
        dy, dx = node.inputs[0], node.outputs[0]
        return [
            _resize_call(
                k,
                "et_resize_grad_f32",
                node.attrs,
                node.name,
                _scales_input(k, node, 1),
                dy,
                dx,
                k.shape(dx),
                k.shape(dy),
            )
        ]

    @staticmethod
    def shape(graph, node):
        return [tuple(node.attr("shape"))]

    @staticmethod
    def reference(dy, scales=None, *, shape, **attrs):
        coord, mode = _resize_modes(attrs, "ResizeGrad", shape, dy.shape)
        scales = scales if scales is not None and scales.size else None
        index = _scale_index(attrs, dy.ndim, scales)
        matrices = []
        for d, (n_in, n_out) in enumerate(zip(shape, dy.shape)):
            scale = np.float32(scales[index[d]]) if index[d] >= 0 else np.float32(n_out) / np.float32(n_in)
            m = np.zeros((n_out, n_in))
            for o in range(n_out):
                for i, w in _taps(o, n_in, n_out, scale, coord, mode, *_cubic(attrs)):
                    m[o, i] += float(w)
            matrices.append(m)
        return (_along_axes(dy, matrices, transpose=True),)
