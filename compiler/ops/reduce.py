"""ReduceSum and ReduceMean over constant axes."""

import numpy as np

from .registry import at_least_1d, contiguous_strides, op


def reduced_axes(k, node) -> tuple[int, ...]:
    rank = len(k.shape(node.inputs[0]))
    axes = k.value_of(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attr("axes")
    if axes is None or len(axes) == 0:
        return () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted(int(a) % rank for a in axes))


def _reduce(mean: bool):
    class Reduce:
        @staticmethod
        def kernel(k, node):
            x, y = node.inputs[0], node.outputs[0]
            shape, axes = k.shape(x), reduced_axes(k, node)
            kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
            out_strides = tuple(0 if i in axes else s for i, s in enumerate(contiguous_strides(kept)))
            count = int(np.prod([shape[i] for i in axes], dtype=np.int64))
            scale = 1.0 / count if mean and count else 1.0
            return [k.call("et_reduce_sum_f32", len(at_least_1d(shape)), at_least_1d(shape),
                           at_least_1d(out_strides) if shape else (0,), scale, x, y, k.size(y))]

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
