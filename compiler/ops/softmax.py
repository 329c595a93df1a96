"""Softmax and LogSoftmax over any axis; their gradients use the forward result."""

import numpy as np

from ..ir import ET_DOMAIN
from .registry import op, split_axis


def _softmax(name, fn, grad_name, grad_fn, reference):
    class Forward:
        @staticmethod
        def kernel(k, node):
            outer, n, inner = split_axis(k.shape(node.inputs[0]), node.attr("axis", -1))
            return [k.call(fn, outer, n, inner, node.inputs[0], node.outputs[0])]

        @staticmethod
        def grad(g, node, dy):
            return [g.emit(grad_name, [dy[0], node.outputs[0]], {"axis": node.attr("axis", -1)}, domain=ET_DOMAIN)]

    class Backward:
        @staticmethod
        def kernel(k, node):
            outer, n, inner = split_axis(k.shape(node.inputs[0]), node.attr("axis"))
            return [k.call(grad_fn, outer, n, inner, *node.inputs, node.outputs[0])]

        @staticmethod
        def shape(graph, node):
            return [graph.shape(node.inputs[0])]

    Backward.reference = staticmethod(reference)
    op(name)(Forward)
    op(grad_name, domain=ET_DOMAIN)(Backward)


_softmax(
    "Softmax",
    "et_softmax_f32",
    "SoftmaxGrad",
    "et_softmax_grad_f32",
    lambda dy, y, axis: (y * (dy - np.sum(dy * y, axis=axis, keepdims=True)),),
)
_softmax(
    "LogSoftmax",
    "et_log_softmax_f32",
    "LogSoftmaxGrad",
    "et_log_softmax_grad_f32",
    lambda dy, y, axis: (dy - np.exp(y) * np.sum(dy, axis=axis, keepdims=True),),
)
