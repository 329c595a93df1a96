"""MaxPool, AveragePool and their global forms (1-D to 3-D), with gradients.

MaxPool keeps no Indices: its gradient (MaxPoolGrad) finds each window's argmax again from X,
the first maximum in scan order as PyTorch picks it. AveragePool's gradient (AveragePoolGrad)
needs only the output gradient and the geometry. The global forms are one window covering the
whole plane and reuse the same kernels and gradient ops.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .conv import Window, window
from .registry import op


def _pool_window(node, x_shape, y_shape) -> Window:
    """The node's window, after checking that every window has an input tap. ceil_mode can make
    one that covers only padding; onnx shape inference keeps it where PyTorch drops it, and
    neither a maximum nor a mean of nothing is defined."""
    geo = window(node, x_shape[2:], y_shape[2:], node.attr("kernel_shape"))
    for axis, (i, o) in enumerate(zip(x_shape[2:], y_shape[2:])):
        empty = [j for j in range(o) if not geo.taps(axis, j, i)]
        if empty:
            raise EdgetrainError(
                f"{node.op} node '{node.name}': output position {empty[0]} of spatial axis "
                f"{axis} covers only padding (ceil_mode with pads {geo.begin + geo.end}); "
                "edgetrain cannot pool an empty window"
            )
    return geo


def _global_window(x_shape) -> Window:
    rank = len(x_shape) - 2
    return Window(tuple(x_shape[2:]), (1,) * rank, (1,) * rank, (0,) * rank, (0,) * rank)


def _max_pool_call(k, geo, x, y):
    xs, ys = k.shape(x), k.shape(y)
    return k.call("et_max_pool_f32", xs[0] * xs[1], *geo.c_args(xs[2:], ys[2:], trailing_pads=True), x, y)


def _average_pool_call(k, geo, count_include_pad, x, y):
    xs, ys = k.shape(x), k.shape(y)
    return k.call(
        "et_average_pool_f32",
        xs[0] * xs[1],
        *geo.c_args(xs[2:], ys[2:], trailing_pads=True),
        int(count_include_pad),
        x,
        y,
    )


def _max_pool_grad(g, geo, dy, x):
    return g.emit("MaxPoolGrad", [dy, x], geo.attrs(), domain=ET_DOMAIN)


def _average_pool_grad(g, geo, count_include_pad, dy, x):
    attrs = {**geo.attrs(), "count_include_pad": int(count_include_pad), "shape": list(g.shape(x))}
    return g.emit("AveragePoolGrad", [dy], attrs, domain=ET_DOMAIN)


@op("MaxPool")
class MaxPool:
    """Output 0 only: the Indices output is never computed (the frontend rejects a model that
    reads it, as it reads an int64 tensor), so storage_order does not matter."""

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        return [_max_pool_call(k, _pool_window(node, k.shape(x), k.shape(y)), x, y)]

    @staticmethod
    def grad(g, node, dy):
        x = node.inputs[0]
        return [_max_pool_grad(g, _pool_window(node, g.shape(x), g.shape(node.outputs[0])), dy[0], x)]


@op("AveragePool")
class AveragePool:
    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        geo = _pool_window(node, k.shape(x), k.shape(y))
        return [_average_pool_call(k, geo, node.attr("count_include_pad", 0), x, y)]

    @staticmethod
    def grad(g, node, dy):
        x = node.inputs[0]
        geo = _pool_window(node, g.shape(x), g.shape(node.outputs[0]))
        return [_average_pool_grad(g, geo, node.attr("count_include_pad", 0), dy[0], x)]


@op("GlobalMaxPool")
class GlobalMaxPool:
    @staticmethod
    def kernel(k, node):
        x = node.inputs[0]
        return [_max_pool_call(k, _global_window(k.shape(x)), x, node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        x = node.inputs[0]
        return [_max_pool_grad(g, _global_window(g.shape(x)), dy[0], x)]


@op("GlobalAveragePool")
class GlobalAveragePool:
    @staticmethod
    def kernel(k, node):
        x = node.inputs[0]
        return [_average_pool_call(k, _global_window(k.shape(x)), 0, x, node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        x = node.inputs[0]
        return [_average_pool_grad(g, _global_window(g.shape(x)), 0, dy[0], x)]


def _explicit(node, in_spatial, out_spatial) -> Window:
    return window(node, in_spatial, out_spatial, node.attr("kernel_shape"))


def _windows(geo: Window, in_spatial, out_spatial):
    """(output position, [input taps' positions per axis]) for every window, in output order."""
    for o in itertools.product(*map(range, out_spatial)):
        yield (
            o,
            [
                [j * geo.strides[a] - geo.begin[a] + t * geo.dilations[a] for t in geo.taps(a, j, i)]
                for a, (j, i) in enumerate(zip(o, in_spatial))
            ],
        )


@op("MaxPoolGrad", domain=ET_DOMAIN)
class MaxPoolGrad:
    """dX from (dY, X): each output's gradient goes to its window's first maximum in X."""

    @staticmethod
    def kernel(k, node):
        dy, x = node.inputs
        xs, dys = k.shape(x), k.shape(dy)
        geo = _explicit(node, xs[2:], dys[2:])
        return [
            k.call(
                "et_max_pool_grad_f32",
                xs[0] * xs[1],
                *geo.c_args(xs[2:], dys[2:], trailing_pads=True),
                dy,
                x,
                node.outputs[0],
            )
        ]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1])]

    @staticmethod
    def reference(dy, x, kernel_shape, strides, dilations, pads):
        geo = Window.explicit(kernel_shape, strides, dilations, pads)
        dx = np.zeros(x.shape, np.float64)
        for o, taps in _windows(geo, x.shape[2:], dy.shape[2:]):
            for plane in np.ndindex(*x.shape[:2]):
                # np.argmax takes the first maximum, and the first NaN over any number.
                at = np.unravel_index(int(np.argmax(x[plane][np.ix_(*taps)])), [len(t) for t in taps])
                dx[plane + tuple(t[j] for t, j in zip(taps, at))] += dy[plane + o]
        return (dx.astype(np.float32),)


@op("AveragePoolGrad", domain=ET_DOMAIN)
class AveragePoolGrad:
    """dX from dY: each output's gradient spread evenly over its window's input taps."""

    @staticmethod
    def kernel(k, node):
        dy, dx = node.inputs[0], node.outputs[0]
        xs, dys = k.shape(dx), k.shape(dy)
        geo = _explicit(node, xs[2:], dys[2:])
        return [
            k.call(
                "et_average_pool_grad_f32",
                xs[0] * xs[1],
                *geo.c_args(xs[2:], dys[2:], trailing_pads=True),
                int(node.attr("count_include_pad")),
                dy,
                dx,
            )
        ]

    @staticmethod
    def shape(graph, node):
        return [tuple(node.attr("shape"))]

    @staticmethod
    def reference(dy, kernel_shape, strides, dilations, pads, count_include_pad, shape):
        rank = len(kernel_shape)
        geo = Window.explicit(kernel_shape, strides, dilations, pads)
        padded = Window(geo.kernel, geo.strides, geo.dilations, (0,) * rank, (0,) * rank)  # window j starts at j*s
        dx = np.zeros(shape, np.float64)
        for o, taps in _windows(geo, shape[2:], dy.shape[2:]):
            if count_include_pad:  # taps inside the padded extent [-begin, in + end)
                count = np.prod(
                    [
                        len(padded.taps(a, j, i + b + e))
                        for a, (j, i, b, e) in enumerate(zip(o, shape[2:], geo.begin, geo.end))
                    ]
                )
            else:
                count = np.prod([len(t) for t in taps])
            dx[(slice(None), slice(None)) + np.ix_(*taps)] += (dy[(slice(None), slice(None)) + o] / count)[
                (...,) + (None,) * rank
            ]
        return (dx.astype(np.float32),)


def _col2im_window(k, node, x_shape) -> tuple[Window, tuple[int, ...], tuple[int, ...]]:
    """Col2Im's (window, image shape, blocks per axis), after checking that the columns are the
    blocks the geometry makes: ONNX shape inference takes the output shape from image_shape alone."""
    image = tuple(int(v) for v in k.value_of(node.inputs[1]).ravel())
    block = tuple(int(v) for v in k.value_of(node.inputs[2]).ravel())
    geo = window(node, image, image, block)
    blocks = geo.output(image)
    taps = int(np.prod(block))
    if min(blocks) < 1 or x_shape[2] != int(np.prod(blocks)) or x_shape[1] % taps:
        raise EdgetrainError(
            f"Col2Im node '{node.name}': input shape {tuple(x_shape)} is not the blocks of image {image} "
            f"with block {block}, strides {geo.strides}, dilations {geo.dilations} and pads {geo.begin + geo.end} "
            f"(expected (N, C * {taps}, {int(np.prod(blocks))}))"
        )
    return geo, image, blocks


def _col2im_call(k, fn, geo, image, blocks, y_shape, src, dst):
    """A call of et_col2im_f32 or its gradient for the N * C planes of the image of `y_shape`."""
    return k.call(fn, y_shape[0] * y_shape[1], *geo.c_args(image, blocks, trailing_pads=True), src, dst)


@op("Col2Im", const_inputs=(1, 2))
class Col2Im:
    """torch's fold: sums blocks of columns into an image. Its gradient gathers them back
    (Col2ImGrad, torch's unfold)."""

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        geo, image, blocks = _col2im_window(k, node, k.shape(x))
        return [_col2im_call(k, "et_col2im_f32", geo, image, blocks, k.shape(y), x, y)]

    @staticmethod
    def grad(g, node, dy):
        x = node.inputs[0]
        geo, _, _ = _col2im_window(g, node, g.shape(x))
        dx = g.emit("Col2ImGrad", [dy[0]], {**geo.attrs(), "shape": list(g.shape(x))}, domain=ET_DOMAIN)
        return [dx, None, None]


@op("Col2ImGrad", domain=ET_DOMAIN)
class Col2ImGrad:
    """dX of Col2Im from dY: each column value is the image gradient at its position, 0 in the padding."""

    @staticmethod
    def kernel(k, node):
        dy, dx = node.inputs[0], node.outputs[0]
        dys = k.shape(dy)
        geo = _explicit(node, dys[2:], dys[2:])
        return [_col2im_call(k, "et_col2im_grad_f32", geo, dys[2:], geo.output(dys[2:]), dys, dy, dx)]

    @staticmethod
    def shape(graph, node):
        return [tuple(node.attr("shape"))]

    @staticmethod
    def reference(dy, kernel_shape, strides, dilations, pads, shape):
        geo = Window.explicit(kernel_shape, strides, dilations, pads)
        blocks = geo.output(dy.shape[2:])
        dx = np.zeros((*dy.shape[:2], *kernel_shape, *blocks), np.float32)
        for t in itertools.product(*map(range, kernel_shape)):
            for o in itertools.product(*map(range, blocks)):
                at = [j * s - b + i * d for j, s, b, i, d in zip(o, geo.strides, geo.begin, t, geo.dilations)]
                if all(0 <= a < n for a, n in zip(at, dy.shape[2:])):
                    dx[(slice(None), slice(None)) + t + o] = dy[(slice(None), slice(None)) + tuple(at)]
        return (dx.reshape(shape),)
