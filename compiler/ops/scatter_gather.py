"""Ops that read or write elements at given indices: GatherElements, ScatterElements, GatherND,
ScatterND, and TopK. Indices are compile-time constants (checked here) or integer tensors known at
run time, which the C keeps as int32_t and range-checks before any kernel uses them, as Gather's
token ids are."""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .elementwise import _f32
from .indexing import checked_indices, index_grad, node_label
from .integer import is_integer, typed
from .registry import contiguous_strides, op, split_axis

REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}  # et_scatter.h's ET_SCATTER_*


def _reduction(node) -> int:
    name = node.attr("reduction", "none")
    if name not in REDUCTIONS:
        raise EdgetrainError(f"{node_label(node)}: unknown reduction '{name}'")
    return REDUCTIONS[name]


def _scatter(k, node, call, fn, start, *args):
    """Y = `start` (zeros when None), then kernel `fn` combines the updates into it: `args` are the
    reduction and the updates (zeros when None), or for integer data the updates alone."""
    y = node.outputs[0]
    first = (
        k.call("et_fill_f32", k.size(y), 0.0, y)
        if start is None
        else k.call(typed(k, "et_copy", y), k.size(y), start, y)
    )
    return [first] + call(k, node, k.shape(y), fn, *args, y)


def _refuse_repeated(node, positions) -> None:
    """Constant indices that write an element twice with reduction 'none', which ONNX leaves
    undefined: the TorchScript exporter writes torch's index_add so, where PyTorch adds."""
    written = np.stack([p.ravel() for p in np.broadcast_arrays(*positions)], axis=1)
    if len(np.unique(written, axis=0)) < len(written):
        raise EdgetrainError(
            f"{node_label(node)}: its indices write an element more than once with reduction 'none', which "
            "ONNX leaves undefined (torch's TorchScript exporter writes index_add so; the dynamo exporter adds)"
        )


def _scatter_ops(family, call, fn, where, attr, update_grad):
    """Register Scatter{family} (ONNX) and two ops of our domain that serve the gradients of the
    family, each kernel `fn` run through `call`: Scatter{family}Grad and Gather{family}Grad.
    `attr` names the attribute that goes with the indices (None: none); `where(indices, shape,
    **attributes)` gives the NumPy index arrays of what the indices point at, in the indices'
    shape, for the references; `update_grad` is the (op, domain) that gathers the updates'
    gradient from dY."""

    @op(f"Scatter{family}", index_inputs=(1,))
    class Scatter:
        integer = True  # int data is moved, not computed: HuggingFace's shift of labels into decoder ids

        @staticmethod
        def kernel(k, node):
            data, indices, updates = node.inputs
            if _reduction(node) == REDUCTIONS["none"] and indices in k.graph.constants:
                attrs = {attr: int(node.attr(attr, 0))} if attr else {}
                _refuse_repeated(node, where(k.value_of(indices), k.shape(data), **attrs))
            if not is_integer(k.graph, data):
                return _scatter(k, node, call, fn, data, _reduction(node), updates)
            if _reduction(node) != REDUCTIONS["none"]:
                raise EdgetrainError(
                    f"{node_label(node)}: integer data is scattered with reduction 'none' only, "
                    f"not '{node.attr('reduction')}'"
                )
            return _scatter(k, node, call, fn.replace("_f32", "_i32"), data, updates)

        @staticmethod
        def grad(g, node, dy):
            reduction, indices = node.attr("reduction", "none"), node.inputs[1]
            if reduction not in ("none", "add"):
                raise EdgetrainError(
                    f"{node_label(node)}: no gradient for reduction '{reduction}' (only 'none' and 'add')"
                )
            attrs = {attr: int(node.attr(attr, 0))} if attr else {}
            # An overwritten element's gradient is 0; an added-to one passes dY through.
            ddata = (
                (
                    g.emit(f"Scatter{family}Grad", [dy[0], indices], attrs, domain=ET_DOMAIN)
                    if reduction == "none"
                    else dy[0]
                )
                if g.needs(0)
                else None
            )
            gather, domain = update_grad
            dupdates = g.emit(gather, [dy[0], indices], attrs, domain=domain) if g.needs(2) else None
            return [ddata, None, dupdates]

    @op(f"Scatter{family}Grad", domain=ET_DOMAIN)
    class ScatterGrad:
        """(dY, indices) -> dY with what the indices point at zeroed."""

        @staticmethod
        def kernel(k, node):
            return _scatter(k, node, call, fn, node.inputs[0], REDUCTIONS["none"], None)

        @staticmethod
        def shape(graph, node):
            return [graph.shape(node.inputs[0])]

        @staticmethod
        def reference(dy, indices, **attrs):
            dx = dy.copy()
            dx[where(indices, dy.shape, **attrs)] = 0
            return (dx,)

    @op(f"Gather{family}Grad", domain=ET_DOMAIN)
    class GatherGrad:
        """(dY, indices) -> dX of the data's `shape`: zeros plus dY added where the indices point
        (repeated indices sum their parts of dY in order)."""

        @staticmethod
        def kernel(k, node):
            return _scatter(k, node, call, fn, None, REDUCTIONS["add"], node.inputs[0])

        @staticmethod
        def shape(graph, node):
            return [tuple(node.attr("shape"))]

        @staticmethod
        def reference(dy, indices, shape, **attrs):
            dx = np.zeros(shape, np.float32)
            np.add.at(dx, where(indices, shape, **attrs), dy)
            return (dx,)


# ---- GatherElements / ScatterElements: one index per element, along `axis` ----


def _elements_walk(k, node, data_shape):
    """(index shape, data strides with 0 on the axis, the axis's stride, its extent): how position p
    of the indices addresses the data (et_scatter.h)."""
    index_shape = k.shape(node.inputs[1])
    axis = int(node.attr("axis", 0)) % len(data_shape)
    if len(index_shape) != len(data_shape) or any(
        i > d for a, (i, d) in enumerate(zip(index_shape, data_shape)) if a != axis
    ):
        raise EdgetrainError(
            f"{node_label(node)}: indices of shape {tuple(index_shape)} do not fit data of shape "
            f"{tuple(data_shape)} along axis {axis}"
        )
    strides = contiguous_strides(data_shape)
    return index_shape, tuple(0 if a == axis else s for a, s in enumerate(strides)), strides[axis], data_shape[axis]


def _elements_call(k, node, data_shape, fn, *args):
    """The range checks, then `fn(rank, index shape, walk strides, axis stride, axis extent, *args[:-2],
    constant indices, run-time indices, *args[-2:])`."""
    shape, walk, axis_stride, dim = _elements_walk(k, node, data_shape)
    checks, consts, runtime = checked_indices(k, node, (dim,))
    return checks + [k.call(fn, len(shape), shape, walk, axis_stride, dim, *args[:-2], consts, runtime, *args[-2:])]


def _positions(indices, shape, axis=0):
    """NumPy index arrays of the elements each index addresses (for the references)."""
    axis = axis % len(shape)
    where = list(np.indices(indices.shape))
    where[axis] = np.where(indices < 0, indices + shape[axis], indices)
    return tuple(where)


@op("GatherElements", index_inputs=(1,))
class GatherElements:
    integer = True  # RoBERTa gathers its int64 token type ids by position

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        return _elements_call(k, node, k.shape(x), typed(k, "et_gather_elements", x), x, y)

    grad = index_grad("GatherElementsGrad", "axis")


_scatter_ops("Elements", _elements_call, "et_scatter_elements_f32", _positions, "axis", ("GatherElements", ""))


# ---- GatherND / ScatterND: each index tuple (the indices' last axis) selects a slice of the data,
# within its batch: GatherND's first batch_dims axes of data and indices go together ----


def _nd_view(k, node, data_shape):
    """(tuples, tuples per batch, tuple length, the axes' extents and strides within a batch, slice
    size)."""
    index_shape = k.shape(node.inputs[1])
    batch, depth = int(node.attr("batch_dims", 0)), index_shape[-1]
    if tuple(index_shape[:batch]) != tuple(data_shape[:batch]) or not 1 <= depth <= len(data_shape) - batch:
        raise EdgetrainError(
            f"{node_label(node)}: index tuples of shape {tuple(index_shape)} for data of shape "
            f"{tuple(data_shape)} with batch_dims {batch}"
        )
    axes = data_shape[batch:]
    count = int(np.prod(index_shape[:-1], dtype=np.int64))
    per_batch = int(np.prod(index_shape[batch:-1], dtype=np.int64))
    inner = int(np.prod(axes[depth:], dtype=np.int64))
    return count, per_batch, depth, tuple(axes[:depth]), contiguous_strides(axes)[:depth], inner


def _nd_call(k, node, data_shape, fn, *args):
    """The range checks, then `fn(count, per batch, depth, dims, strides, inner, *args[:-2], constant
    indices, run-time indices, *args[-2:])`."""
    count, per_batch, depth, dims, strides, inner = _nd_view(k, node, data_shape)
    checks, consts, runtime = checked_indices(k, node, dims)
    return checks + [k.call(fn, count, per_batch, depth, dims, strides, inner, *args[:-2], consts, runtime, *args[-2:])]


def _nd_positions(indices, shape, batch_dims=0):
    """NumPy index arrays of the slices the index tuples (the indices' last axis) select, wrapped,
    batch coordinates first, in the tuples' shape (for the references)."""
    batch = list(np.indices(indices.shape[:-1]))[:batch_dims]
    return tuple(batch + [np.mod(indices[..., j], shape[batch_dims + j]) for j in range(indices.shape[-1])])


@op("GatherND", index_inputs=(1,))
class GatherND:
    integer = True  # int and bool data are moved, not computed

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        return _nd_call(k, node, k.shape(x), typed(k, "et_gather_nd", x), x, y)

    grad = index_grad("GatherNDGrad", "batch_dims")


@op("GatherNDSlices", domain=ET_DOMAIN)
class GatherNDSlices:
    """GatherND with batch_dims 0 as ScatterND's update gradient, in edgetrain's domain: ScatterND's
    run-time indices may be int32, which ONNX's GatherND refuses."""

    kernel = staticmethod(GatherND.kernel)

    @staticmethod
    def shape(graph, node):
        index_shape = graph.shape(node.inputs[1])
        return [tuple(index_shape[:-1]) + tuple(graph.shape(node.inputs[0])[index_shape[-1] :])]

    @staticmethod
    def reference(x, indices):
        return _f32(x[_nd_positions(indices, x.shape)])


_scatter_ops("ND", _nd_call, "et_scatter_nd_f32", _nd_positions, None, ("GatherNDSlices", ET_DOMAIN))


# ---- TopK with a constant K, on float or integer data; its int64 indices are int32_t in the C, as
# every integer tensor. The gradient finds the chosen elements again. ----


def _topk_args(k, node, x, count) -> tuple[int, ...]:
    """(outer, line length, inner, K, largest) of TopK(x, count) viewed along its axis."""
    outer, n, inner = split_axis(k.shape(x), int(node.attr("axis", -1)))
    count = int(np.asarray(k.value_of(count)).ravel()[0])
    if not 1 <= count <= n:
        raise EdgetrainError(f"{node_label(node)}: K = {count} for an axis of {n}")
    return outer, n, inner, count, int(node.attr("largest", 1))


@op("TopK", const_inputs=(1,))
class TopK:
    integer = True

    @staticmethod
    def kernel(k, node):
        x, values = node.inputs[0], node.outputs[0]
        indices = (tuple(node.outputs) + ("",))[1]
        used = indices and (indices in k.graph.outputs or any(indices in n.inputs for n in k.graph.nodes))
        return [
            k.call(typed(k, "et_topk", x), *_topk_args(k, node, *node.inputs), x, values, indices if used else None)
        ]

    @staticmethod
    def grad(g, node, dy):
        dx = g.emit(
            "TopKGrad",
            [dy[0], node.inputs[0], node.inputs[1]],
            {"axis": int(node.attr("axis", -1)), "largest": int(node.attr("largest", 1))},
            domain=ET_DOMAIN,
        )
        return [dx, None]


@op("TopKGrad", domain=ET_DOMAIN, const_inputs=(2,))
class TopKGrad:
    """(dValues, X, K) -> dX: zeros, with dValues at the elements TopK chose."""

    @staticmethod
    def kernel(k, node):
        dy, x, count = node.inputs
        return [k.call("et_topk_grad_f32", *_topk_args(k, node, x, count), x, dy, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1])]

    @staticmethod
    def reference(dy, x, count, axis, largest):
        # A stable sort keeps equal values in index order, as the kernel does.
        order = np.argsort(-x if largest else x, axis=axis, kind="stable")
        chosen = np.take(order, np.arange(int(np.ravel(count)[0])), axis=axis)
        dx = np.zeros_like(x, dtype=np.float32)
        np.put_along_axis(dx, chosen, dy, axis=axis)
        return (dx,)
