"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL2 and ReduceLogSumExp over constant axes."""

import numpy as np

from ..ir import ET_DOMAIN
from .integer import is_integer
from .registry import at_least_1d, contiguous_strides, merged_axes, op


def reduced_axes(k, node) -> tuple[int, ...]:
    rank = len(k.shape(node.inputs[0]))
    axes = k.value_of(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attr("axes")
    if axes is None or len(axes) == 0:
        return () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted(int(a) % rank for a in axes))


def _reduce(mean: bool):
    class Reduce:
        integer = not mean  # a sum of integers: HuggingFace counts the tokens that are not padding

        @staticmethod
        def kernel(k, node):
            x, y = node.inputs[0], node.outputs[0]
            shape, axes = k.shape(x), reduced_axes(k, node)
            kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
            out_strides = tuple(0 if i in axes else s for i, s in enumerate(contiguous_strides(kept)))
            walk = (len(at_least_1d(shape)), at_least_1d(shape), at_least_1d(out_strides) if shape else (0,))
            if is_integer(k.graph, x):
                return [k.call("et_reduce_sum_i32", *walk, x, y, k.size(y))]
            count = int(np.prod([shape[i] for i in axes], dtype=np.int64))
            scale = 1.0 / count if mean and count else 1.0
            return [k.call("et_reduce_sum_f32", *walk, scale, x, y, k.size(y))]

        @staticmethod
        def grad(g, node, dy):
            x = node.inputs[0]
            shape, axes = g.shape(x), reduced_axes(g, node)
            kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
            d = g.emit("Expand", [g.reshape(dy[0], kept), g.ints(shape)])
            if mean:
                count = int(np.prod([shape[i] for i in axes], dtype=np.int64))
                d = g.emit("Mul", [d, g.const(np.float32(1.0 / count))])
            return [d] + [None] * (len(node.inputs) - 1)

    return Reduce


op("ReduceSum", const_inputs=(1,))(_reduce(mean=False))
op("ReduceMean", const_inputs=(1,))(_reduce(mean=True))


# ---- ReduceMax, ReduceMin, ReduceL2, ReduceLogSumExp: kernels that walk each output's group of
# inputs, given X as two strided views (the kept axes in Y's order, the reduced axes) ----


def _views(shape, axes) -> tuple:
    """(rank, shape, strides) of the kept axes, then of the reduced axes, neighbours merged."""
    strides = contiguous_strides(shape)
    views = []
    for keep in (True, False):
        dims = [(d, s) for i, (d, s) in enumerate(zip(shape, strides)) if (i not in axes) == keep]
        merged, merged_strides = merged_axes(tuple(d for d, _ in dims), tuple(s for _, s in dims))
        views += [len(merged), merged, merged_strides]
    return tuple(views)


def _reduce_group(fn, grad_op):
    class Reduce:
        @staticmethod
        def kernel(k, node):
            return [
                k.call(fn, *_views(k.shape(node.inputs[0]), reduced_axes(k, node)), node.inputs[0], node.outputs[0])
            ]

        @staticmethod
        def grad(g, node, dy):
            axes = g.ints(reduced_axes(g, node))
            return [g.emit(grad_op, [dy[0], node.inputs[0], node.outputs[0], axes], domain=ET_DOMAIN)] + [None] * (
                len(node.inputs) - 1
            )

    return Reduce


op("ReduceMax", const_inputs=(1,))(_reduce_group("et_reduce_max_f32", "ReduceSelectGrad"))
op("ReduceMin", const_inputs=(1,))(_reduce_group("et_reduce_min_f32", "ReduceSelectGrad"))
op("ReduceL2", const_inputs=(1,))(_reduce_group("et_reduce_l2_f32", "ReduceL2Grad"))
op("ReduceLogSumExp", const_inputs=(1,))(_reduce_group("et_reduce_log_sum_exp_f32", "ReduceLogSumExpGrad"))


def _group_grad_op(name, fn, reference):
    """Our op `name(dY, X, Y, axes) -> dX` for Y = a reduction of X over the constant `axes`, with
    kernel `fn(views of X..., dY, X, Y, dX)` and NumPy `reference(dY, X, Y, axes)`, dY and Y of X's rank."""

    class GroupGrad:
        @staticmethod
        def kernel(k, node):
            dy, x, y, axes = node.inputs
            return [k.call(fn, *_views(k.shape(x), tuple(int(a) for a in k.value_of(axes))), dy, x, y, node.outputs[0])]

        @staticmethod
        def shape(graph, node):
            return [graph.shape(node.inputs[1])]

        @staticmethod
        def reference(dy, x, y, axes):
            axes = tuple(int(a) for a in axes)
            kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
            with np.errstate(divide="ignore", invalid="ignore"):
                return (np.asarray(reference(dy.reshape(kept), x, y.reshape(kept), axes), np.float32),)

    op(name, domain=ET_DOMAIN, const_inputs=(3,))(GroupGrad)


def _select_reference(dy, x, y, axes):
    ties = x == y
    return np.where(ties, dy / np.maximum(np.sum(ties, axis=axes, keepdims=True), 1), 0)


# torch.amax's rule: ties share the gradient evenly; torch's norm: 0 where the norm is 0.
_group_grad_op("ReduceSelectGrad", "et_reduce_select_grad_f32", _select_reference)
_group_grad_op("ReduceL2Grad", "et_reduce_l2_grad_f32", lambda dy, x, y, axes: np.where(y == 0, 0, x * (dy / y)))
_group_grad_op("ReduceLogSumExpGrad", "et_reduce_log_sum_exp_grad_f32", lambda dy, x, y, axes: dy * np.exp(x - y))
