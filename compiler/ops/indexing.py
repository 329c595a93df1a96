"""Ops that select elements: Slice, Tile, Gather (constant or run-time indices), Trilu (constant k),
Where, and variadic Max / Min."""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .elementwise import _f32
from .integer import typed
from .registry import Tensor, at_least_1d, broadcast_strides, contiguous_strides, op, split_axis


# ---- Slice: starts, ends, axes and steps are compile-time constants ----


def _slice_ranges(shape, starts, ends, axes=None, steps=None) -> list[range]:
    """The indices each axis keeps. Python's slice.indices clamps exactly as ONNX Slice does
    (negative starts/ends count from the end; out-of-range values clamp, per step direction)."""
    ranges = [range(d) for d in shape]
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = int(axis) % len(shape)
        ranges[axis] = range(*slice(int(start), int(end), int(step)).indices(shape[axis]))
    return ranges


def _slice_view(k, node):
    """(offset of the first selected element, element strides of X read in Y's shape)."""
    x = node.inputs[0]
    consts = [k.value_of(name) if name else None for name in (tuple(node.inputs[1:]) + ("", ""))[:4]]
    ranges = _slice_ranges(k.shape(x), *consts)
    strides = contiguous_strides(k.shape(x))
    offset = sum(r.start * s for r, s in zip(ranges, strides) if len(r))
    return offset, tuple(r.step * s for r, s in zip(ranges, strides))


@op("Slice", const_inputs=(1, 2, 3, 4))
class Slice:
    integer = True

    @staticmethod
    def kernel(k, node):
        # A slice is a strided read from its first element: et_expand_f32 walks any strides,
        # negative ones included.
        x, y = node.inputs[0], node.outputs[0]
        offset, strides = _slice_view(k, node)
        return [k.call(typed(k, "et_expand", y), len(k.shape(y)), k.shape(y), Tensor(x, offset), strides, y)]

    @staticmethod
    def grad(g, node, dy):
        offset, strides = _slice_view(g, node)
        dx = g.emit(
            "SliceGrad",
            [dy[0]],
            {"shape": list(g.shape(node.inputs[0])), "offset": offset, "strides": list(strides)},
            domain=ET_DOMAIN,
        )
        return [dx] + [None] * (len(node.inputs) - 1)


@op("SliceGrad", domain=ET_DOMAIN)
class SliceGrad:
    """dY -> dX of the given shape: zeros, with dY written where the slice read (element `offset`
    onwards, `strides` per axis of dY)."""

    @staticmethod
    def kernel(k, node):
        dy, dx = node.inputs[0], node.outputs[0]
        return [
            k.call("et_fill_f32", k.size(dx), 0.0, dx),
            k.call(
                "et_slice_grad_f32",
                len(k.shape(dy)),
                k.shape(dy),
                dy,
                Tensor(dx, node.attr("offset")),
                tuple(node.attr("strides")),
            ),
        ]

    @staticmethod
    def shape(graph, node):
        return [tuple(node.attr("shape"))]

    @staticmethod
    def reference(dy, shape, offset, strides):
        dx = np.zeros(int(np.prod(shape)), np.float32)
        index = offset + sum(
            np.arange(n).reshape((-1,) + (1,) * (dy.ndim - 1 - axis)) * s
            for axis, (n, s) in enumerate(zip(dy.shape, strides))
        )
        dx[np.asarray(index).ravel()] = dy.ravel()
        return (dx.reshape(shape),)


# ---- Tile ----


def _repeats(k, node) -> tuple[int, ...]:
    return tuple(int(r) for r in k.value_of(node.inputs[1]))


@op("Tile", const_inputs=(1,))
class Tile:
    integer = True  # repeated token or position ids, as a masked autoencoder's shuffle makes

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        shape = at_least_1d(k.shape(x))
        return [k.call(typed(k, "et_tile", y), len(shape), shape, at_least_1d(_repeats(k, node)), x, y)]

    @staticmethod
    def grad(g, node, dy):
        # dY viewed as [r0, d0, r1, d1, ...] sums over the r axes; axes without repeats merge into
        # their neighbours so the view's rank stays small.
        view, axes = [], []
        for d, r in zip(g.shape(node.inputs[0]), _repeats(g, node)):
            if r != 1:
                axes.append(len(view))
                view.append(r)
                view.append(d)
            elif view:  # the last entry is always an extent, never a repeat
                view[-1] *= d
            else:
                view.append(d)
        if not axes:
            return [dy[0], None]
        summed = g.emit("ReduceSum", [g.reshape(dy[0], view), g.ints(axes)], {"keepdims": 0})
        return [g.reshape(summed, g.shape(node.inputs[0])), None]


# ---- Gather (gradient: scatter-add into the data). Indices are compile-time constants or
# integer tensors known at run time (token ids, position ids), range-checked before use. ----


def node_label(node) -> str:
    return f"node '{node.name}' ({node.op})"


def checked_indices(k, node, dims, name=None) -> tuple[list, tuple | None, str | None]:
    """(range checks, constant indices, run-time indices) of the node's index input `name`
    (default: input 1) addressing axes of extents `dims`: one extent for every index, or, for
    ScatterND's tuples, one per column. Constants out of range are refused here."""
    name = name or node.inputs[1]
    dims = tuple(int(d) for d in dims)
    if name not in k.graph.constants:
        count = k.size(name)
        check = (
            k.call("et_check_indices", count, name, dims[0], checked=True)
            if len(dims) == 1
            else k.call("et_check_nd_indices", count // len(dims), len(dims), name, dims, checked=True)
        )
        return [check], None, name
    values = k.value_of(name).astype(np.int64).reshape(-1, len(dims))
    bad = (values < -np.array(dims)) | (values >= np.array(dims))
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise EdgetrainError(
            f"{node_label(node)}: index {int(values[row, col])} out of range for an axis of {dims[col]}"
        )
    return [], tuple(int(i) for i in values.ravel()), None


def index_grad(grad_op: str, attr: str):
    """The gradient rule of an op that reads its data (input 0) at indices (input 1): `grad_op`(dY,
    indices) in our domain, with the node's `attr`, the data's shape and, for an embedding's Gather,
    the padding row its gradient skips; the indices get none."""

    def grad(g, node, dy):
        attrs = {attr: int(node.attr(attr, 0)), "shape": list(g.shape(node.inputs[0]))}
        if node.outputs[0] in g.graph.padding_rows:  # a Gather that is an embedding with a padding_idx
            attrs["skip"] = g.graph.padding_rows[node.outputs[0]]
        return [g.emit(grad_op, [dy[0], node.inputs[1]], attrs, domain=ET_DOMAIN), None]

    return staticmethod(grad)


def _gather_calls(k, node, data_shape, fn, *tensors):
    """Calls of `fn(outer, axis extent, inner, count, constant indices, run-time indices, *tensors)`
    with the data viewed as [outer, axis, inner]; run-time indices are range-checked first."""
    outer, dim, inner = split_axis(data_shape, int(node.attr("axis", 0)))
    checks, consts, runtime = checked_indices(k, node, (dim,))
    return checks + [k.call(fn, outer, dim, inner, k.size(node.inputs[1]), consts, runtime, *tensors)]


@op("Gather", index_inputs=(1,))
class Gather:
    integer = True

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        return _gather_calls(k, node, k.shape(x), typed(k, "et_gather", x), x, y)

    grad = index_grad("GatherGrad", "axis")


@op("GatherGrad", domain=ET_DOMAIN)
class GatherGrad:
    """(dY, indices) -> dX of the data's `shape`: zeros plus dY's slices added at their indices,
    but for the index `skip` (an embedding's padding row), if given. The indices stay an input so
    the same op serves indices known only at run time."""

    @staticmethod
    def kernel(k, node):
        dy, dx = node.inputs[0], node.outputs[0]
        return _gather_calls(k, node, k.shape(dx), "et_gather_grad_f32", int(node.attr("skip", -1)), dy, dx)

    @staticmethod
    def shape(graph, node):
        return [tuple(node.attr("shape"))]

    @staticmethod
    def reference(dy, indices, axis, shape, skip=-1):
        shape = tuple(shape)
        dx = np.zeros(shape, np.float32)
        axis = axis % len(shape)
        idx = np.where(indices < 0, indices + shape[axis], indices).ravel()
        moved = np.moveaxis(dx, axis, 0)  # a view: adding into it fills dx
        rows = np.moveaxis(dy.reshape(shape[:axis] + (idx.size,) + tuple(shape[axis + 1 :])), axis, 0)
        np.add.at(moved, idx[idx != skip], rows[idx != skip])
        return (dx,)


# ---- Trilu with a constant k (a Trilu of a constant, such as a causal mask, folds before this) ----


def _trilu_args(k, node) -> tuple[int, ...]:
    """(matrices, rows, cols, diagonal, upper) with the diagonal clamped to where it still matters."""
    shape = k.shape(node.inputs[0])
    rows, cols = shape[-2], shape[-1]
    given = (tuple(node.inputs) + ("",))[1]
    diagonal = int(k.value_of(given)) if given else 0
    return (
        int(np.prod(shape[:-2], dtype=np.int64)),
        rows,
        cols,
        max(-rows, min(cols, diagonal)),
        int(node.attr("upper", 1)),
    )


@op("Trilu", const_inputs=(1,))
class Trilu:
    @staticmethod
    def kernel(k, node):
        return [k.call("et_trilu_f32", *_trilu_args(k, node), node.inputs[0], node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        # Keeping or zeroing fixed positions is its own adjoint.
        return [g.emit("Trilu", [dy[0], *node.inputs[1:]], {"upper": int(node.attr("upper", 1))}), None]


# ---- Where: a bool condition (constant or computed), float or integer branches ----


@op("Where")
class Where:
    integer = True

    @staticmethod
    def kernel(k, node):
        y = node.outputs[0]
        shape = at_least_1d(k.shape(y))
        args = [a for name in node.inputs for a in (name, broadcast_strides(k.shape(name), shape))]
        return [k.call(typed(k, "et_where", y), len(shape), shape, *args, y)]

    @staticmethod
    def grad(g, node, dy):
        cond = node.inputs[0]
        zero = g.const(np.float32(0))
        return [
            None,
            g.emit("Where", [cond, dy[0], zero]) if g.needs(1) else None,
            g.emit("Where", [cond, zero, dy[0]]) if g.needs(2) else None,
        ]


# ---- Max / Min: variadic, broadcasting; ties share the gradient equally ----


def _extremum(stem):
    class Extremum:
        integer = True  # T5's relative positions bucketed with an int64 Min

        @staticmethod
        def kernel(k, node):
            y = node.outputs[0]
            shape = at_least_1d(k.shape(y))
            first = node.inputs[0]
            if len(node.inputs) == 1:
                expand = typed(k, "et_expand", first)
                return [k.call(expand, len(shape), shape, first, broadcast_strides(k.shape(first), shape), y)]
            # Fold the inputs into Y: after the first call Y holds the running result.
            calls, a, a_strides, fn = [], first, broadcast_strides(k.shape(first), shape), typed(k, stem, first)
            for b in node.inputs[1:]:
                calls.append(k.call(fn, len(shape), shape, a, a_strides, b, broadcast_strides(k.shape(b), shape), y))
                a, a_strides = y, contiguous_strides(shape)
            return calls

        @staticmethod
        def grad(g, node, dy):
            if len(node.inputs) == 1:
                return [dy[0]]
            return [
                g.emit("MinMaxGrad", [dy[0], node.outputs[0], *node.inputs], {"index": i}, domain=ET_DOMAIN)
                if g.needs(i)
                else None
                for i in range(len(node.inputs))
            ]

    return Extremum


op("Max")(_extremum("et_max"))
op("Min")(_extremum("et_min"))


@op("MinMaxGrad", domain=ET_DOMAIN)
class MinMaxGrad:
    """(dY, Y, X_0, ..., X_n-1) -> the gradient of X_index of Y = Max or Min(X_0, ...), in Y's shape:
    dY where X_index equals Y, divided by the number of inputs that do (torch's even split of ties)."""

    @staticmethod
    def kernel(k, node):
        dy, y, *xs = node.inputs
        dx = node.outputs[0]
        shape = at_least_1d(k.shape(y))
        strides = [broadcast_strides(k.shape(x), shape) for x in xs]
        target = int(node.attr("index"))
        return (
            [k.call("et_fill_f32", k.size(dx), 0.0, dx)]
            + [k.call("et_count_equal_f32", len(shape), shape, x, s, y, dx) for x, s in zip(xs, strides)]
            + [k.call("et_minmax_grad_f32", len(shape), shape, dy, y, xs[target], strides[target], dx)]
        )

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1])]

    @staticmethod
    def reference(dy, y, *xs, index):
        count = sum(np.broadcast_to(x == y, y.shape).astype(np.float32) for x in xs)
        return _f32(np.where(xs[index] == y, dy / np.maximum(count, 1), 0))
