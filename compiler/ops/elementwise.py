"""Elementwise ops: activations, arithmetic with NumPy broadcasting, Clip, Pow, Dropout."""

import dataclasses

import numpy as np

from ..errors import EdgetrainError
from ..ir import COUNTER, ET_DOMAIN, Node
from ..ir.graph import frozen_attrs
from .integer import broadcast_call, is_integer
from .random import _bits, _unit
from .registry import Counter, op


def _unary(name, fn, grad=None, domain="", integer=None):
    """Register an op whose kernel is `fn(n, X, Y)`, or `integer(n, X, Y)` on integer tensors."""

    class Unary:
        inplace = (0,)

        @staticmethod
        def kernel(k, node):
            y = node.outputs[0]
            return [k.call(integer if integer and is_integer(k.graph, y) else fn, k.size(y), node.inputs[0], y)]

    Unary.grad = staticmethod(grad) if grad else None
    Unary.integer = bool(integer)
    op(name, domain=domain)(Unary)


def _grad_op(name, fn, reference, *attr_names):
    """Register one of our gradient ops `name(dY, S) -> dX` with kernel `fn(n, attrs..., dY, S, dX)`,
    where S is the forward input or output the derivative is computed from."""

    class GradOp:
        inplace = (0, 1)

        @staticmethod
        def kernel(k, node):
            attrs = tuple(float(node.attr(a)) for a in attr_names)
            return [k.call(fn, k.size(node.outputs[0]), *attrs, *node.inputs, node.outputs[0])]

        @staticmethod
        def shape(graph, node):
            return [graph.shape(node.inputs[0])]

    GradOp.reference = staticmethod(reference)
    op(name, domain=ET_DOMAIN)(GradOp)


def _f32(x):
    return (np.asarray(x, dtype=np.float32),)


# ---- ReLU's gradient needs only where its result is positive: one bit per element, element i at
# bit i % 32 of uint32 word i / 32. The forward pass keeps these bits, 1/32 of the result's bytes,
# so the float result dies with its last forward reader. ----


def unpack_bits(mask, shape):
    bits = np.unpackbits(mask.astype("<u4").view(np.uint8), bitorder="little")
    return bits[: int(np.prod(shape))].reshape(shape).astype(bool)


def pack_bits(flags) -> np.ndarray:
    """Booleans as the uint32 words of a bit mask."""
    packed = np.packbits(np.asarray(flags).ravel(), bitorder="little")
    return np.pad(packed, (0, -packed.size % 4)).view("<u4").astype(np.uint32)


@op("ReluMask", domain=ET_DOMAIN)
class ReluMask:
    """Y -> the bits of Y > 0 (NaN gives 0)."""

    dtypes = (np.uint32,)
    residual = True

    @staticmethod
    def kernel(k, node):
        return [k.call("et_relu_mask_f32", k.size(node.inputs[0]), node.inputs[0], node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [(-(-graph.values[node.inputs[0]].size // 32),)]

    @staticmethod
    def reference(y):
        return (pack_bits(y > 0),)


@op("ClipMask", domain=ET_DOMAIN)
class ClipMask:
    """X -> the bits of min <= X <= max (NaN gives 0), where Clip passes its gradient through, as
    torch.clamp's does: ReluGrad applies them, and Clip can overwrite X."""

    dtypes = (np.uint32,)
    residual = True

    @staticmethod
    def kernel(k, node):
        lo, hi = float(node.attr("min")), float(node.attr("max"))
        return [k.call("et_clip_mask_f32", k.size(node.inputs[0]), lo, hi, node.inputs[0], node.outputs[0])]

    shape = ReluMask.shape

    @staticmethod
    def reference(x, min, max):
        return (pack_bits((x >= min) & (x <= max)),)


_grad_op("ReluGrad", "et_relu_grad_f32", lambda dy, mask: _f32(np.where(unpack_bits(mask, dy.shape), dy, 0)))
_grad_op("SigmoidGrad", "et_sigmoid_grad_f32", lambda dy, y: _f32(dy * y * (1 - y)))
_grad_op("TanhGrad", "et_tanh_grad_f32", lambda dy, y: _f32(dy * (1 - y * y)))
_grad_op("SqrtGrad", "et_sqrt_grad_f32", lambda dy, y: _f32(dy / (2 * y)))
_grad_op("LeakyReluGrad", "et_leaky_relu_grad_f32", lambda dy, x, alpha: _f32(np.where(x > 0, dy, alpha * dy)), "alpha")
_grad_op(
    "PowGrad", "et_pow_grad_f32", lambda dy, x, exponent: _f32(dy * exponent * np.power(x, exponent - 1)), "exponent"
)

_unary(
    "Relu",
    "et_relu_f32",
    lambda g, node, dy: [
        g.emit("ReluGrad", [dy[0], g.emit("ReluMask", [node.outputs[0]], domain=ET_DOMAIN)], domain=ET_DOMAIN)
    ],
)
_unary(
    "Sigmoid", "et_sigmoid_f32", lambda g, node, dy: [g.emit("SigmoidGrad", [dy[0], node.outputs[0]], domain=ET_DOMAIN)]
)
_unary("Tanh", "et_tanh_f32", lambda g, node, dy: [g.emit("TanhGrad", [dy[0], node.outputs[0]], domain=ET_DOMAIN)])
_unary("Sqrt", "et_sqrt_f32", lambda g, node, dy: [g.emit("SqrtGrad", [dy[0], node.outputs[0]], domain=ET_DOMAIN)])
# exp' is the result itself (convention 2: rules may use the forward result).
_unary("Exp", "et_exp_f32", lambda g, node, dy: [g.emit("Mul", [dy[0], node.outputs[0]])])
_unary("Log", "et_log_f32", lambda g, node, dy: [g.emit("Div", [dy[0], node.inputs[0]])])
_unary("Neg", "et_neg_f32", lambda g, node, dy: [g.emit("Neg", [dy[0]])], integer="et_neg_i32")
_unary("Abs", "et_abs_f32", lambda g, node, dy: [g.emit("Mul", [dy[0], g.emit("Sign", [node.inputs[0]])])])
_unary("Sign", "et_sign_f32", lambda g, node, dy: [None])  # zero almost everywhere
# Whole numbers, their gradient zero almost everywhere as Sign's (DeBERTa's log-bucketed positions).
_unary("Floor", "et_floor_f32", lambda g, node, dy: [None])
_unary("Ceil", "et_ceil_f32", lambda g, node, dy: [None])
_unary("Round", "et_round_f32", lambda g, node, dy: [None])
_unary("Identity", "et_copy_f32", lambda g, node, dy: [dy[0]], integer="et_copy_i32")


# Sin and Cos (rotary embeddings) from et_math.h; 1/x's derivative -1/x^2 is -y*y (torch's order).
_unary("Sin", "et_sin_f32", lambda g, node, dy: [g.emit("Mul", [dy[0], g.emit("Cos", [node.inputs[0]])])])
_unary(
    "Cos", "et_cos_f32", lambda g, node, dy: [g.emit("Neg", [g.emit("Mul", [dy[0], g.emit("Sin", [node.inputs[0]])])])]
)


def _one_minus_square(g, x):
    return g.emit("Sub", [g.const(np.float32(1.0)), g.emit("Mul", [x, x])])


def _one_plus_square(g, x):
    return g.emit("Add", [g.const(np.float32(1.0)), g.emit("Mul", [x, x])])


def _over_root(g, dy, v):
    """dy / sqrt(v)."""
    return g.emit("Div", [dy, g.emit("Sqrt", [v])])


# The other trigonometric and hyperbolic functions of et_math.h (within 3.5 ulp), with PyTorch's
# derivatives: tan' = 1 + tan^2, atan' = 1 / (1 + x^2), asin' = -acos' = 1 / sqrt(1 - x^2),
# sinh' = cosh, cosh' = sinh, asinh' = 1 / sqrt(x^2 + 1), acosh' = 1 / sqrt(x^2 - 1),
# atanh' = 1 / (1 - x^2).
_unary("Tan", "et_tan_f32", lambda g, node, dy: [g.emit("Mul", [dy[0], _one_plus_square(g, node.outputs[0])])])
_unary("Atan", "et_atan_f32", lambda g, node, dy: [g.emit("Div", [dy[0], _one_plus_square(g, node.inputs[0])])])
_unary("Asin", "et_asin_f32", lambda g, node, dy: [_over_root(g, dy[0], _one_minus_square(g, node.inputs[0]))])
_unary(
    "Acos",
    "et_acos_f32",
    lambda g, node, dy: [g.emit("Neg", [_over_root(g, dy[0], _one_minus_square(g, node.inputs[0]))])],
)
_unary("Sinh", "et_sinh_f32", lambda g, node, dy: [g.emit("Mul", [dy[0], g.emit("Cosh", [node.inputs[0]])])])
_unary("Cosh", "et_cosh_f32", lambda g, node, dy: [g.emit("Mul", [dy[0], g.emit("Sinh", [node.inputs[0]])])])
_unary("Asinh", "et_asinh_f32", lambda g, node, dy: [_over_root(g, dy[0], _one_plus_square(g, node.inputs[0]))])
_unary(
    "Acosh",
    "et_acosh_f32",
    lambda g, node, dy: [
        _over_root(g, dy[0], g.emit("Sub", [g.emit("Mul", [node.inputs[0], node.inputs[0]]), g.const(np.float32(1.0))]))
    ],
)
_unary("Atanh", "et_atanh_f32", lambda g, node, dy: [g.emit("Div", [dy[0], _one_minus_square(g, node.inputs[0])])])
_unary(
    "Reciprocal",
    "et_reciprocal_f32",
    lambda g, node, dy: [g.emit("Neg", [g.emit("Mul", [dy[0], g.emit("Mul", [node.outputs[0], node.outputs[0]])])])],
)


@op("LeakyRelu")
class LeakyRelu:
    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        alpha = float(node.attr("alpha", 0.01))
        return [k.call("et_leaky_relu_f32", k.size(node.outputs[0]), alpha, node.inputs[0], node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        alpha = float(node.attr("alpha", 0.01))
        return [g.emit("LeakyReluGrad", [dy[0], node.inputs[0]], {"alpha": alpha}, domain=ET_DOMAIN)]


def _scalar(k, name, default):
    return float(k.value_of(name).reshape(())) if name else default


@op("Clip", const_inputs=(1, 2))
class Clip:
    inplace = (0,)
    integer = True  # DeBERTa clamps its int64 relative positions

    @staticmethod
    def bounds(k, node):
        inputs = tuple(node.inputs) + ("", "")
        return _scalar(k, inputs[1], -np.inf), _scalar(k, inputs[2], np.inf)

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        if not is_integer(k.graph, y):
            return [k.call("et_clip_f32", k.size(y), *Clip.bounds(k, node), x, y)]
        # Bounds beyond int32_t, which holds every integer the C computes, clip nothing more there.
        int32 = np.iinfo(np.int32)
        lo, hi = (int(np.clip(b, int32.min, int32.max)) for b in Clip.bounds(k, node))
        return [k.call("et_clip_i32", k.size(y), lo, hi, x, y)]

    @staticmethod
    def grad(g, node, dy):
        lo, hi = Clip.bounds(g, node)
        mask = g.emit("ClipMask", [node.inputs[0]], {"min": lo, "max": hi}, domain=ET_DOMAIN)
        return [g.emit("ReluGrad", [dy[0], mask], domain=ET_DOMAIN)]


@op("Pow", const_inputs=(1,))
class Pow:
    @staticmethod
    def exponent(k, node):
        p = k.value_of(node.inputs[1])
        if p.size != 1:
            raise EdgetrainError(
                f"node '{node.name}' (Pow): the exponent must be one constant value, got shape {p.shape}"
            )
        return float(p.reshape(()))

    @staticmethod
    def kernel(k, node):
        p = Pow.exponent(k, node)
        return [k.call("et_pow_f32", k.size(node.outputs[0]), p, node.inputs[0], node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        p = Pow.exponent(g, node)
        return [g.emit("PowGrad", [dy[0], node.inputs[0]], {"exponent": p}, domain=ET_DOMAIN), None]


def _binary(name, fn, grad, integer=None):
    """Register an op whose kernel is `fn(rank, shape, A, a_strides, B, b_strides, Y)`, or
    `integer(...)` on integer tensors."""

    class Binary:
        inplace = (0, 1)  # each output element is written after its own inputs are read

        @staticmethod
        def kernel(k, node):
            a, b = node.inputs
            y = node.outputs[0]
            return [broadcast_call(k, integer if integer and is_integer(k.graph, y) else fn, a, b, y)]

    Binary.grad = staticmethod(grad)
    Binary.integer = bool(integer)
    op(name)(Binary)


# Gradients come back in the output's (broadcast) shape; the driver reduces them to each input's.
_binary("Add", "et_add_f32", lambda g, node, dy: [dy[0], dy[0]], integer="et_add_i32")
_binary(
    "Sub",
    "et_sub_f32",
    lambda g, node, dy: [dy[0], g.emit("Neg", [dy[0]]) if g.needs(1) else None],
    integer="et_sub_i32",
)
_binary(
    "Mul",
    "et_mul_f32",
    lambda g, node, dy: [
        g.emit("Mul", [dy[0], node.inputs[1]]) if g.needs(0) else None,
        g.emit("Mul", [dy[0], node.inputs[0]]) if g.needs(1) else None,
    ],
    integer="et_mul_i32",
)
# d(a/b)/db = -dy * a / b^2 = -dy * y / b
_binary(
    "Div",
    "et_div_f32",
    lambda g, node, dy: [
        g.emit("Div", [dy[0], node.inputs[1]]) if g.needs(0) else None,
        g.emit("Neg", [g.emit("Div", [g.emit("Mul", [dy[0], node.outputs[0]]), node.inputs[1]])])
        if g.needs(1)
        else None,
    ],
)


@op("Mod")
class Mod:
    """fmod=1: the dividend's sign, a - trunc(a/b) b (C's fmod, torch.fmod); fmod=0: the divisor's,
    a - floor(a/b) b (Python's %, torch.remainder)."""

    inplace = (0, 1)
    integer = True

    @staticmethod
    def kernel(k, node):
        a, b = node.inputs
        y = node.outputs[0]
        kind = "fmod" if node.attr("fmod", 0) else "mod"
        return [broadcast_call(k, f"et_{kind}_{'i32' if is_integer(k.graph, y) else 'f32'}", a, b, y)]

    @staticmethod
    def grad(g, node, dy):
        """d/da = 1; d/db = -trunc(a/b) or -floor(a/b), as PyTorch's, trunc(q) being sign(q) floor(|q|)."""
        if not g.needs(1):
            return [dy[0], None]
        q = g.emit("Div", [node.inputs[0], node.inputs[1]])
        if node.attr("fmod", 0):
            whole = g.emit("Mul", [g.emit("Sign", [q]), g.emit("Floor", [g.emit("Abs", [q])])])
        else:
            whole = g.emit("Floor", [q])
        return [dy[0], g.emit("Neg", [g.emit("Mul", [dy[0], whole])])]


def _dropout_mask(shape, ratio, seed, counter):
    """NumPy twin of et_dropout_f32, whose bits are those of the random ops (random.py), so the
    ONNX reference draws the same masks."""
    u = _unit(_bits(shape, seed, counter))
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(ratio))
    return np.where(u >= np.float32(ratio), scale, np.float32(0)).reshape(shape).astype(np.float32)


@op("Dropout", domain=ET_DOMAIN)
class Dropout:
    """Training-mode dropout: Y = X * Mask, where Mask holds 0 or 1/(1-ratio) drawn from
    (seed, training-step counter, element index) so every target draws the same mask."""

    @staticmethod
    def kernel(k, node):
        x, _ = node.inputs
        y, mask = node.outputs
        return [
            k.call(
                "et_dropout_f32", k.size(y), float(node.attr("ratio")), int(node.attr("seed")), Counter(), x, y, mask
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        return [g.emit("Mul", [dy[0], node.outputs[1]]), None]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])] * 2

    @staticmethod
    def reference(x, counter, ratio, seed):
        mask = _dropout_mask(x.shape, ratio, seed, int(counter))
        return x * mask, mask


@op("Dropout", const_inputs=(1, 2))
class OnnxDropout:
    """As written in the model, Dropout is the identity (inference); the training graph runs our
    seeded Dropout instead."""

    @staticmethod
    def kernel(k, node):
        return [k.call("et_copy_f32", k.size(node.outputs[0]), node.inputs[0], node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        return [dy[0], None, None]

    @staticmethod
    def variant(graph, node, index, training):
        if not training:
            # Without its training_mode input an ONNX Dropout is the identity, so the eval and
            # inference models (which ONNX Runtime may run) never drop, whatever the export said.
            return dataclasses.replace(node, inputs=tuple(node.inputs[:2]) + ("",) * (len(node.inputs) > 2))
        ratio, mode = (tuple(node.inputs) + ("", ""))[1:3]
        ratio = float(graph.constants[ratio].reshape(())) if ratio else 0.5
        if mode and not bool(graph.constants[mode].reshape(())):
            ratio = 0.0  # exported with training_mode=False: the model asked for no dropout
        mask = graph.add_value(graph.fresh("dropout_mask"), graph.shape(node.inputs[0]))
        if COUNTER not in graph.values:
            graph.add_value(COUNTER, (), np.int64)
        # Without a seed attribute, the node's position among the model's compute nodes (after
        # constant folding) seeds it, so two dropouts never share masks.
        attrs = frozen_attrs({"ratio": ratio, "seed": int(node.attr("seed", index))})
        return Node("Dropout", (node.inputs[0], COUNTER), (node.outputs[0], mask), attrs, node.name, ET_DOMAIN)
