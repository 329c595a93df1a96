"""Conv and ConvTranspose (1-D to 3-D, groups, dilations, any padding) and their gradients.

A convolution's input gradient is a transposed convolution with the same geometry and weights
(ConvGradX), and a transposed convolution's input gradient is a plain Conv. Both weight
gradients are one correlation of the convolution's input with its output gradient (ConvGradW),
with the roles of the two swapped for ConvTranspose. Gradient ops carry explicit pads, so no
auto_pad rule is evaluated twice.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .registry import op

MAX_SPATIAL = 3  # the C kernels loop over 3 spatial axes; lower ranks get leading unit axes


@dataclass(frozen=True)
class Window:
    """A sliding window along each spatial axis: output position o covers input positions
    o*stride + t*dilation - begin for taps t < kernel; `end` pads only shape the output."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]

    def attrs(self) -> dict:
        """Explicit attributes for the gradient ops (what onnx and the references read)."""
        return {
            "kernel_shape": list(self.kernel),
            "strides": list(self.strides),
            "dilations": list(self.dilations),
            "pads": list(self.begin + self.end),
        }

    def c_args(self, in_spatial, out_spatial, trailing_pads=False) -> tuple:
        """(in, out, kernel, strides, dilations, pads) as 3-axis int arrays for et_conv.h/et_pool.h."""

        def lift(values, fill):
            return (fill,) * (MAX_SPATIAL - len(values)) + tuple(int(v) for v in values)

        pads = lift(self.begin, 0) + (lift(self.end, 0) if trailing_pads else ())
        return (
            lift(in_spatial, 1),
            lift(out_spatial, 1),
            lift(self.kernel, 1),
            lift(self.strides, 1),
            lift(self.dilations, 1),
            pads,
        )

    @staticmethod
    def explicit(kernel_shape, strides, dilations, pads) -> Window:
        """The window of a gradient or int8 op's explicit attributes (pads: begins, then ends)."""
        rank = len(kernel_shape)
        return Window(tuple(kernel_shape), tuple(strides), tuple(dilations), tuple(pads[:rank]), tuple(pads[rank:]))

    def output(self, in_spatial) -> tuple[int, ...]:
        """The output size the window gives an input of `in_spatial`."""
        return tuple(
            (i + b + e - (k - 1) * d - 1) // s + 1
            for i, b, e, k, d, s in zip(in_spatial, self.begin, self.end, self.kernel, self.dilations, self.strides)
        )

    def taps(self, axis: int, o: int, length: int) -> range:
        """The taps of output position `o` along `axis` that land inside an input of `length`."""
        start, d = o * self.strides[axis] - self.begin[axis], self.dilations[axis]
        return range(-(start // d) if start < 0 else 0, min(self.kernel[axis], -((start - length) // d)))


def window(node, in_spatial, out_spatial, kernel) -> Window:
    """The node's window with ONNX auto_pad resolved against the (inferred) output size. SAME_*
    pads so that the output is ceil(in / stride), splitting the total evenly and putting an odd
    element at the end (SAME_UPPER) or the beginning (SAME_LOWER); VALID pads nothing."""
    rank = len(in_spatial)
    if not 1 <= rank <= MAX_SPATIAL:
        raise EdgetrainError(
            f"{node.op} node '{node.name}' has {rank} spatial axes; edgetrain supports 1 to {MAX_SPATIAL}"
        )
    strides = tuple(int(s) for s in node.attr("strides") or (1,) * rank)
    dilations = tuple(int(d) for d in node.attr("dilations") or (1,) * rank)
    kernel = tuple(int(k) for k in kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max(0, (o - 1) * s + (k - 1) * d + 1 - i)
            for i, o, k, s, d in zip(in_spatial, out_spatial, kernel, strides, dilations)
        ]
        begin = tuple(t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total)
        end = tuple(t - b for t, b in zip(total, begin))
    elif auto_pad == "VALID":
        begin = end = (0,) * rank
    else:
        pads = tuple(int(p) for p in node.attr("pads") or (0,) * (2 * rank))
        begin, end = pads[:rank], pads[rank:]
    return Window(kernel, strides, dilations, begin, end)


def _conv_window(node, x_shape, w_shape, y_shape) -> Window:
    w = window(node, x_shape[2:], y_shape[2:], w_shape[2:])
    natural = w.output(x_shape[2:])
    if natural != tuple(y_shape[2:]):  # a guard on the geometry both the kernels and the gradient rely on
        raise EdgetrainError(
            f"Conv node '{node.name}': output size {tuple(y_shape[2:])} does not follow "
            f"from its pads {w.begin + w.end} (expected {natural})"
        )
    return w


def _bias_grad(g, dy):
    """Sum over the batch and every spatial axis."""
    rank = len(g.shape(dy))
    return g.emit("ReduceSum", [dy, g.ints([0] + list(range(2, rank)))], {"keepdims": 0})


@op("Conv")
class Conv:
    @staticmethod
    def kernel(k, node):
        x, w, b = (tuple(node.inputs) + ("",))[:3]
        y = node.outputs[0]
        xs, ws, ys = k.shape(x), k.shape(w), k.shape(y)
        geo = _conv_window(node, xs, ws, ys)
        return [
            k.call(
                "et_conv_f32",
                xs[0],
                xs[1],
                ws[0],
                int(node.attr("group", 1)),
                *geo.c_args(xs[2:], ys[2:]),
                x,
                w,
                b or None,
                y,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        x, w, b = (tuple(node.inputs) + ("",))[:3]
        xs = g.shape(x)
        attrs = {
            **_conv_window(node, xs, g.shape(w), g.shape(node.outputs[0])).attrs(),
            "group": int(node.attr("group", 1)),
        }
        d = dy[0]
        in_place = g.needs(0) and _in_place_grad_x(xs, g.shape(d), attrs)
        dx = None
        if g.needs(0) and not in_place:
            dx = g.emit("ConvGradX", [d, w], {**attrs, "shape": list(xs)}, domain=ET_DOMAIN)
        dw = g.emit("ConvGradW", [d, x], attrs, domain=ET_DOMAIN) if g.needs(1) else None
        db = _bias_grad(g, d) if b and g.needs(2) else None
        if in_place:  # dY's last reader, so that dX can take over its bytes
            dx = g.emit("ConvGradXInPlace", [d, w], {**attrs, "shape": list(xs)}, domain=ET_DOMAIN, outputs=2)[0]
        return [dx, dw, db]


# The scratch of ConvGradXInPlace's kernel holds about this many values, the piece of dY it copies:
# of a pointwise layer, the positions of whole tiles (et_linalg.h's ET_TILE_COLS, 16), at least 64
# and else a whole sample's (whose product the kernel makes as the dispatching one would); of a
# depthwise layer, at least 8 planes (et_conv.h's ET_CONV_DEPTHWISE_CHANNELS). Narrower pieces would
# leave the kernels' vector lanes idle.
IN_PLACE_PIECE = 1024
IN_PLACE_COLUMNS, TILE_COLUMNS, IN_PLACE_PLANES = 64, 16, 8


def _in_place_grad_x(x_shape, dy_shape, attrs) -> bool:
    """Whether dX can take over dY's bytes (et_conv_grad_x_f32): a pointwise convolution without
    groups whose input has no more channels than its output, or a depthwise one (a channel per group)
    keeping its spatial size at unit strides; and its kernel's scratch is at most a sample's dX, the
    least that a dX of its own would cost (on small planes the scratch is a whole sample's dY, which
    outweighs a dX of fewer channels). Per sample, so that every batch makes the same choice."""
    c, m = x_shape[1], dy_shape[1]
    unit = all(v == 1 for v in attrs["strides"])
    if attrs["group"] == 1:
        fits = unit and all(v == 1 for v in attrs["kernel_shape"]) and not any(attrs["pads"]) and c <= m
    else:
        fits = attrs["group"] == c == m and unit and tuple(x_shape[2:]) == tuple(dy_shape[2:])
    return fits and _in_place_scratch(x_shape, m, attrs["group"]) <= int(np.prod(x_shape[1:]))


def _in_place_scratch(dx_shape, dy_channels: int, group: int) -> int:
    """Values of et_conv_grad_x_f32's scratch: the same positions of every channel of dY
    (pointwise), or whole planes (depthwise)."""
    plane = int(np.prod(dx_shape[2:]))
    if group == 1:
        columns = max(IN_PLACE_COLUMNS, IN_PLACE_PIECE // dy_channels // TILE_COLUMNS * TILE_COLUMNS)
        return dy_channels * (columns if columns < plane else plane)
    return plane * min(dx_shape[1], max(IN_PLACE_PLANES, IN_PLACE_PIECE // plane))


def _convtranspose_window(node, x_shape, w_shape, y_shape) -> Window:
    """ONNX ConvTranspose: explicit pads, or (output_shape given or auto_pad SAME_*) pads derived
    from total = stride*(in-1) + output_padding + dilated kernel - out, its odd element at the
    beginning unless SAME_UPPER. output_padding only adds output elements past the last one the
    input reaches, so the kernels need the leading pads and the output size alone."""
    rank = len(x_shape) - 2
    geo = window(node, x_shape[2:], y_shape[2:], w_shape[2:])
    auto_pad = node.attr("auto_pad", "NOTSET")
    if node.attr("output_shape") is None and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return geo
    out_pad = tuple(int(p) for p in node.attr("output_padding") or (0,) * rank)
    if auto_pad != "NOTSET" and node.attr("output_shape") is None and any(out_pad):
        # Shape inference adds output_padding to in * stride; ONNX Runtime keeps in * stride.
        raise EdgetrainError(
            f"ConvTranspose node '{node.name}': auto_pad {auto_pad} with output_padding has no "
            "agreed output size (onnx shape inference and ONNX Runtime differ); "
            "give explicit pads or output_shape"
        )
    total = [
        s * (i - 1) + op_ + (k - 1) * d + 1 - o
        for i, o, k, s, d, op_ in zip(x_shape[2:], y_shape[2:], geo.kernel, geo.strides, geo.dilations, out_pad)
    ]
    begin = tuple(t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total)
    return Window(geo.kernel, geo.strides, geo.dilations, begin, tuple(t - b for t, b in zip(total, begin)))


@op("ConvTranspose")
class ConvTranspose:
    @staticmethod
    def kernel(k, node):
        x, w, b = (tuple(node.inputs) + ("",))[:3]
        y = node.outputs[0]
        xs, ws, ys = k.shape(x), k.shape(w), k.shape(y)
        geo = _convtranspose_window(node, xs, ws, ys)
        return [
            k.call(
                "et_conv_transpose_f32",
                xs[0],
                xs[1],
                ys[1],
                int(node.attr("group", 1)),
                *geo.c_args(xs[2:], ys[2:]),
                x,
                w,
                b or None,
                y,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        # Y is the adjoint of a Conv from Y's shape to X's with the same weights and geometry, so
        # dX = Conv(dY, W) and dW = ConvGradW(X, dY) (X plays the output gradient's part).
        x, w, b = (tuple(node.inputs) + ("",))[:3]
        xs, ys = g.shape(x), g.shape(node.outputs[0])
        geo = _convtranspose_window(node, xs, g.shape(w), ys)
        # Trailing pads of the equivalent Conv: enough to reach every input position, never negative.
        end = []
        for i, o, k, s, d, b_ in zip(xs[2:], ys[2:], geo.kernel, geo.strides, geo.dilations, geo.begin):
            spare = o + b_ - (k - 1) * d - 1 - s * (i - 1)  # output positions past the last window
            if b_ < 0 or spare >= s:
                raise EdgetrainError(
                    f"ConvTranspose node '{node.name}': no gradient for leading pads {geo.begin} "
                    f"with output size {tuple(ys[2:])} (the equivalent Conv needs pads >= 0)"
                )
            end.append(max(0, -spare))
        attrs = {
            **Window(geo.kernel, geo.strides, geo.dilations, geo.begin, tuple(end)).attrs(),
            "group": int(node.attr("group", 1)),
        }
        d = dy[0]
        dx = g.emit("Conv", [d, w], attrs) if g.needs(0) else None
        dw = g.emit("ConvGradW", [x, d], attrs, domain=ET_DOMAIN) if g.needs(1) else None
        db = _bias_grad(g, d) if b and g.needs(2) else None
        return [dx, dw, db]


def _explicit(node, in_spatial, out_spatial) -> Window:
    return window(node, in_spatial, out_spatial, node.attr("kernel_shape"))


def _conv_args(node, x_shape, dy_shape) -> tuple:
    """(N, C, M, group, in, out, kernel, strides, dilations, pads) of the Conv whose gradient `node`
    makes, as et_conv.h's kernels take them."""
    geo = _explicit(node, x_shape[2:], dy_shape[2:])
    return (x_shape[0], x_shape[1], dy_shape[1], int(node.attr("group")), *geo.c_args(x_shape[2:], dy_shape[2:]))


@op("ConvGradX", domain=ET_DOMAIN)
class ConvGradX:
    """dX of Conv(X, W): the transposed convolution of dY with Conv's weights and geometry."""

    @staticmethod
    def kernel(k, node):
        dy, w = node.inputs
        dx = node.outputs[0]
        dys, xs = k.shape(dy), k.shape(dx)
        geo = _explicit(node, xs[2:], dys[2:])
        return [
            k.call(
                "et_conv_transpose_f32",
                dys[0],
                dys[1],
                xs[1],
                int(node.attr("group")),
                *geo.c_args(dys[2:], xs[2:]),
                dy,
                w,
                None,
                dx,
            )
        ]

    @staticmethod
    def shape(graph, node):
        return [tuple(node.attr("shape"))]

    @staticmethod
    def reference(dy, w, kernel_shape, strides, dilations, pads, group, shape):
        geo = Window.explicit(kernel_shape, strides, dilations, pads)
        n, m = dy.shape[:2]
        c = shape[1]
        dyg = dy.astype(np.float64).reshape(n, group, m // group, *dy.shape[2:])
        wg = w.astype(np.float64).reshape(group, m // group, c // group, *kernel_shape)
        dx, crop = _padded_zeros(geo, (n, group, c // group), shape[2:], dy.shape[2:])
        for tap in itertools.product(*map(range, kernel_shape)):
            dx[(...,) + _tap_slices(geo, tap, dy.shape[2:])] += np.einsum("ngm...,gmc->ngc...", dyg, wg[(...,) + tap])
        return (dx[(...,) + crop].reshape(shape).astype(np.float32),)


@op("ConvGradXInPlace", domain=ET_DOMAIN)
class ConvGradXInPlace:
    """ConvGradX for the layers whose dX may take over dY's bytes (_in_place_grad_x): (dY, W) ->
    (dX, the kernel's scratch). The memory plan decides whether it does."""

    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        dy, w = node.inputs
        dx, scratch = node.outputs
        conv = _conv_args(node, k.shape(dx), k.shape(dy))
        return [k.call("et_conv_grad_x_f32", *conv, dy, w, dx, scratch, k.size(scratch))]

    @staticmethod
    def shape(graph, node):
        shape = tuple(node.attr("shape"))
        return [shape, (_in_place_scratch(shape, graph.shape(node.inputs[0])[1], node.attr("group")),)]

    @staticmethod
    def reference(dy, w, kernel_shape, strides, dilations, pads, group, shape):
        (dx,) = ConvGradX.reference(dy, w, kernel_shape, strides, dilations, pads, group, shape)
        return dx, np.zeros(_in_place_scratch(shape, dy.shape[1], group), np.float32)


@op("ConvGradW", domain=ET_DOMAIN)
class ConvGradW:
    """dW of Conv(X, W) from dY and X: dW[m, c, t] = sum over n, o of dY[n, m, o] * X[n, c, o*s + t*d - p]."""

    @staticmethod
    def kernel(k, node):
        dy, x = node.inputs
        return [k.call("et_conv_grad_w_f32", *_conv_args(node, k.shape(x), k.shape(dy)), dy, x, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        dys, xs = graph.shape(node.inputs[0]), graph.shape(node.inputs[1])
        return [(dys[1], xs[1] // int(node.attr("group"))) + tuple(node.attr("kernel_shape"))]

    @staticmethod
    def reference(dy, x, kernel_shape, strides, dilations, pads, group):
        geo = Window.explicit(kernel_shape, strides, dilations, pads)
        n, c = x.shape[:2]
        m = dy.shape[1]
        dyg = dy.astype(np.float64).reshape(n, group, m // group, -1)
        xp, crop = _padded_zeros(geo, (n, group, c // group), x.shape[2:], dy.shape[2:])
        xp[(...,) + crop] = x.reshape(n, group, c // group, *x.shape[2:])
        dw = np.zeros((group, m // group, c // group, *kernel_shape))
        for tap in itertools.product(*map(range, kernel_shape)):
            xt = xp[(...,) + _tap_slices(geo, tap, dy.shape[2:])].reshape(n, group, c // group, -1)
            dw[(...,) + tap] = np.einsum("ngmo,ngco->gmc", dyg, xt)
        return (dw.reshape(m, c // group, *kernel_shape).astype(np.float32),)


# NumPy references: the input (or its gradient) lives in a zero buffer padded so that every tap of
# every window is inside it; a tap of all windows is then one strided slice.


def _padded_zeros(geo: Window, lead, in_spatial, out_spatial):
    """(zeros of lead + padded spatial shape, the slices of the unpadded input inside it)."""
    left = [max(0, b) for b in geo.begin]
    right = [
        max(0, (o - 1) * s + (k - 1) * d - b + 1 - i)
        for i, o, k, s, d, b in zip(in_spatial, out_spatial, geo.kernel, geo.strides, geo.dilations, geo.begin)
    ]
    shape = tuple(i + lo + hi for i, lo, hi in zip(in_spatial, left, right))
    return np.zeros(tuple(lead) + shape), tuple(slice(lo, lo + i) for lo, i in zip(left, in_spatial))


def _tap_slices(geo: Window, tap, out_spatial):
    """Positions o*s + t*d - begin for every output o, in the padded buffer's coordinates."""
    starts = [t * d - b + max(0, b) for t, d, b in zip(tap, geo.dilations, geo.begin)]
    return tuple(slice(a, a + (o - 1) * s + 1, s) for a, o, s in zip(starts, out_spatial, geo.strides))
