"""Activations beyond the core set: the ELU family, Softplus, Softsign, HardSigmoid, HardSwish,
PRelu, Erf and Gelu (opset 20; the Erf-based form older exporters write needs only Erf)."""

import math

import numpy as np

from ..ir import ET_DOMAIN
from .elementwise import _f32, _grad_op
from .registry import at_least_1d, broadcast_strides, op

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _unary(name, fn, grad_op, attrs=lambda node: {}):
    """An op whose kernel is `fn(n, attrs..., X, Y)` and whose gradient is our `grad_op(dY, X)`
    with the same attributes."""

    class Unary:
        inplace = (0,)

        @staticmethod
        def kernel(k, node):
            values = tuple(float(v) for v in attrs(node).values())
            return [k.call(fn, k.size(node.outputs[0]), *values, node.inputs[0], node.outputs[0])]

        @staticmethod
        def grad(g, node, dy):
            return [g.emit(grad_op, [dy[0], node.inputs[0]], attrs(node), domain=ET_DOMAIN)]

    op(name)(Unary)


# ---- ELU family: one kernel, y = scale * (x > 0 ? x : alpha * expm1(input_scale * x)) ----


def _elu_reference(dy, x, alpha, scale, input_scale):
    neg = np.minimum(x, 0)  # the branch np.where discards must not overflow
    return _f32(np.where(x > 0, dy * scale, dy * (input_scale * alpha * scale) * np.exp(neg * input_scale)))


_grad_op("EluGrad", "et_elu_grad_f32", _elu_reference, "alpha", "scale", "input_scale")

# ONNX defaults; Selu's are the float32 values of the constants in its spec.
_unary(
    "Elu", "et_elu_f32", "EluGrad", lambda node: {"alpha": node.attr("alpha", 1.0), "scale": 1.0, "input_scale": 1.0}
)
_unary(
    "Selu",
    "et_elu_f32",
    "EluGrad",
    lambda node: {
        "alpha": node.attr("alpha", 1.67326319217681884765625),
        "scale": node.attr("gamma", 1.05070102214813232421875),
        "input_scale": 1.0,
    },
)
_unary(
    "Celu",
    "et_elu_f32",
    "EluGrad",
    lambda node: {"alpha": node.attr("alpha", 1.0), "scale": 1.0, "input_scale": 1.0 / node.attr("alpha", 1.0)},
)

# ---- smooth and piecewise-linear activations ----

# sigmoid(x) as (1 + tanh(x/2)) / 2, which cannot overflow
_grad_op("SoftplusGrad", "et_softplus_grad_f32", lambda dy, x: _f32(dy * 0.5 * (1 + np.tanh(0.5 * x))))
_grad_op("SoftsignGrad", "et_softsign_grad_f32", lambda dy, x: _f32(dy / np.square(1 + np.abs(x))))
_grad_op(
    "HardSigmoidGrad",
    "et_hard_sigmoid_grad_f32",
    lambda dy, x, alpha, beta: _f32(np.where((alpha * x + beta > 0) & (alpha * x + beta < 1), dy * alpha, 0)),
    "alpha",
    "beta",
)
_grad_op(
    "HardSwishGrad",
    "et_hard_swish_grad_f32",
    lambda dy, x: _f32(np.where(x < -3, 0, np.where(x <= 3, dy * (x / 3 + 0.5), dy))),
)
_grad_op("ErfGrad", "et_erf_grad_f32", lambda dy, x: _f32(dy * 2 / np.sqrt(np.pi) * np.exp(-x * x)))

_unary("Softplus", "et_softplus_f32", "SoftplusGrad")  # ONNX has no beta: exporters wrap it in Mul/Div
_unary("Softsign", "et_softsign_f32", "SoftsignGrad")
_unary(
    "HardSigmoid",
    "et_hard_sigmoid_f32",
    "HardSigmoidGrad",
    lambda node: {"alpha": node.attr("alpha", 0.2), "beta": node.attr("beta", 0.5)},
)
_unary("HardSwish", "et_hard_swish_f32", "HardSwishGrad")
_unary("Erf", "et_erf_f32", "ErfGrad")


# ---- Mish (opset 18): x tanh(softplus(x)) ----


def _mish_grad_reference(dy, x):
    t = np.tanh(np.logaddexp(0, x.astype(np.float64)))
    return _f32(dy * (t + x * 0.5 * (1 + np.tanh(0.5 * x)) * (1 - t * t)))


_grad_op("MishGrad", "et_mish_grad_f32", _mish_grad_reference)
_unary("Mish", "et_mish_f32", "MishGrad")


# ---- Gelu (opset 20) ----


def _approximate(node) -> str:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise NotImplementedError(f"Gelu approximate='{approximate}'")
    return approximate


@op("Gelu")
class Gelu:
    @staticmethod
    def kernel(k, node):
        fn = "et_gelu_tanh_f32" if _approximate(node) == "tanh" else "et_gelu_f32"
        return [k.call(fn, k.size(node.outputs[0]), node.inputs[0], node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        return [g.emit("GeluGrad", [dy[0], node.inputs[0]], {"approximate": _approximate(node)}, domain=ET_DOMAIN)]


@op("GeluGrad", domain=ET_DOMAIN)
class GeluGrad:
    @staticmethod
    def kernel(k, node):
        fn = "et_gelu_tanh_grad_f32" if _approximate(node) == "tanh" else "et_gelu_grad_f32"
        return [k.call(fn, k.size(node.outputs[0]), *node.inputs, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(dy, x, approximate):
        x = x.astype(np.float64)
        if approximate == "tanh":
            c = np.sqrt(2 / np.pi)
            t = np.tanh(c * (x + 0.044715 * x**3))
            d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
        else:
            d = 0.5 * (1 + _erf(x / np.sqrt(2))) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
        return _f32(dy * d)


# ---- PRelu: the slope broadcasts to X (unidirectionally) and may be trained ----


@op("PRelu")
class PRelu:
    @staticmethod
    def kernel(k, node):
        x, slope = node.inputs
        shape = at_least_1d(k.shape(x))
        return [
            k.call(
                "et_prelu_f32", len(shape), shape, x, slope, broadcast_strides(k.shape(slope), shape), node.outputs[0]
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        dx, dslope = g.emit("PReluGrad", [dy[0], *node.inputs], domain=ET_DOMAIN, outputs=2)
        return [dx, dslope]


@op("PReluGrad", domain=ET_DOMAIN)
class PReluGrad:
    """(dY, X, slope) -> (dX, dslope), dslope already summed to the slope's shape."""

    @staticmethod
    def kernel(k, node):
        dy, x, slope = node.inputs
        shape = at_least_1d(k.shape(x))
        return [
            k.call(
                "et_prelu_grad_f32",
                len(shape),
                shape,
                dy,
                x,
                slope,
                broadcast_strides(k.shape(slope), shape),
                k.size(slope),
                *node.outputs,
            )
        ]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1]), graph.shape(node.inputs[2])]

    @staticmethod
    def reference(dy, x, slope):
        dx = np.where(x > 0, dy, slope * dy)
        full = np.where(x > 0, 0, x * dy)
        lead = full.ndim - slope.ndim
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(slope.shape) if d == 1 and full.shape[lead + i] != 1
        )
        return _f32(dx)[0], _f32(np.sum(full, axis=axes).reshape(slope.shape))[0]
