"""Ops on integer and bool tensors, as models compute attention masks, position ids, label shifts
and dropout masks: Cast, comparisons, logic, IsNaN / IsInf, Range, CumSum, ArgMax / ArgMin, OneHot.

The C keeps every integer tensor (int32 or int64 in the model) and every bool tensor (0 or 1) as
int32_t (runtime_c/et_integer.h): a kernel ending in _i32 takes such tensors, one ending in _f32
floats. Ops that also exist for floats elsewhere (Reshape, Slice, Gather, Where, Add, ...) pick
their kernel by dtype with `typed`. No gradient flows through integer or bool values."""

import numpy as np

from ..ir import int32_in_c
from .registry import at_least_1d, broadcast_strides, merged_axes, op, split_axis


def is_integer(graph, name: str) -> bool:
    """Integer and bool tensors: an int32_t each in the C."""
    return int32_in_c(graph.values[name].dtype)


def typed(k, stem: str, name: str) -> str:
    """The kernel `stem` for the dtype of tensor `name`: stem_i32 for integers and bools, else stem_f32."""
    return f"{stem}_i32" if is_integer(k.graph, name) else f"{stem}_f32"


def broadcast_call(k, fn: str, a: str, b: str, y: str):
    """The call of `fn(rank, shape, A, a_strides, B, b_strides, Y)` over Y's shape, A and B
    broadcast to it, with the axes they agree on merged."""
    out = at_least_1d(k.shape(y))
    shape, a_strides, b_strides = merged_axes(
        out, broadcast_strides(k.shape(a), out), broadcast_strides(k.shape(b), out)
    )
    return k.call(fn, len(shape), shape, a, a_strides, b, b_strides, y)


def _kind(graph, name: str) -> str:
    dtype = graph.values[name].dtype
    return "bool" if dtype == np.bool_ else ("int" if int32_in_c(dtype) else "float")


# ---- Cast: float <-> integer <-> bool; a cast that keeps the C type (int64 -> int32, bool -> int,
# float -> float) is a copy ----

_CASTS = {
    ("float", "int"): "et_f32_to_i32",
    ("float", "bool"): "et_f32_to_bool",
    ("int", "float"): "et_i32_to_f32",
    ("bool", "float"): "et_i32_to_f32",
    ("int", "bool"): "et_i32_to_bool",
}


@op("Cast")
class Cast:
    integer = True
    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        fn = _CASTS.get((_kind(k.graph, x), _kind(k.graph, y))) or typed(k, "et_copy", y)
        return [k.call(fn, k.size(y), x, y)]

    @staticmethod
    def grad(g, node, dy):
        return [dy[0]]  # asked only of float -> float: the driver gives integer values no gradient


# ---- broadcasting comparisons (bool result) and logic ----


def _broadcast(name, stem, by_input=True):
    """Register `name`, whose kernel `stem`_f32 / _i32 (picked by the first input's dtype, or always
    _i32) is fn(rank, shape, A, a_strides, B, b_strides, Y)."""

    class Broadcast:
        integer = True

        @staticmethod
        def kernel(k, node):
            a, b = node.inputs
            return [broadcast_call(k, typed(k, stem, a) if by_input else f"{stem}_i32", a, b, node.outputs[0])]

    op(name)(Broadcast)


for _name, _stem in (
    ("Equal", "et_equal"),
    ("Less", "et_less"),
    ("Greater", "et_greater"),
    ("LessOrEqual", "et_less_equal"),
    ("GreaterOrEqual", "et_greater_equal"),
):
    _broadcast(_name, _stem)
for _name, _stem in (("And", "et_and"), ("Or", "et_or"), ("Xor", "et_xor")):
    _broadcast(_name, _stem, by_input=False)


def _elementwise(name, fn, *attrs):
    """Register `name` with kernel fn(n, *attrs, X, Y); attrs are (attribute, default) pairs."""

    class Elementwise:
        integer = True

        @staticmethod
        def kernel(k, node):
            values = tuple(int(node.attr(a, d)) for a, d in attrs)
            return [k.call(fn, k.size(node.outputs[0]), *values, node.inputs[0], node.outputs[0])]

    op(name)(Elementwise)


_elementwise("Not", "et_not_i32")
_elementwise("IsNaN", "et_isnan_f32")
_elementwise("IsInf", "et_isinf_f32", ("detect_negative", 1), ("detect_positive", 1))


# ---- Range: its length is its output's static shape, so its bounds are compile-time constants.
# Integer bounds fold in the frontend (position ids as torch.arange exports them); float ones held
# in initializers reach the kernel. A bound computed at run time is refused, naming it. ----


@op("Range", const_inputs=(0, 1, 2))
class Range:
    @staticmethod
    def kernel(k, node):
        start, _, delta = (float(np.asarray(k.value_of(name)).reshape(())) for name in node.inputs)
        y = node.outputs[0]
        return [k.call("et_range_f32", k.size(y), start, delta, y)]


# ---- CumSum (the axis is a compile-time constant) ----


def _cumsum_axis(k, node) -> int:
    return int(np.asarray(k.value_of(node.inputs[1])).reshape(()))


@op("CumSum", const_inputs=(1,))
class CumSum:
    integer = True

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        outer, dim, inner = split_axis(at_least_1d(k.shape(x)), _cumsum_axis(k, node))
        return [
            k.call(
                typed(k, "et_cumsum", x),
                outer,
                dim,
                inner,
                int(node.attr("exclusive", 0)),
                int(node.attr("reverse", 0)),
                x,
                y,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        # Each input element reaches the sums after it (before it, reversed): the sums of dY
        # taken the other way round, leaving the element out exactly when the forward did.
        attrs = {"exclusive": int(node.attr("exclusive", 0)), "reverse": 1 - int(node.attr("reverse", 0))}
        return [g.emit("CumSum", [dy[0], node.inputs[1]], attrs), None]


# ---- OneHot (depth and the off and on values are compile-time constants) ----


@op("OneHot", const_inputs=(1, 2))
class OneHot:
    """Indices of either kind (floats truncated, as ONNX casts them) into a one-hot axis of either
    kind, as torch.nn.functional.one_hot exports it (int64, then cast)."""

    integer = True

    @staticmethod
    def kernel(k, node):
        indices, depth, values = node.inputs
        y = node.outputs[0]
        shape = k.shape(indices)
        axis = int(node.attr("axis", -1)) % (len(shape) + 1)
        outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
        kind = int if is_integer(k.graph, y) else float
        off, on = (kind(v) for v in np.asarray(k.value_of(values)).reshape(2))
        fn = f"{typed(k, 'et_one_hot', indices)}_{'i32' if kind is int else 'f32'}"
        return [k.call(fn, outer, int(np.asarray(k.value_of(depth)).reshape(-1)[0]), inner, indices, off, on, y)]

    @staticmethod
    def grad(g, node, dy):
        return [None, None, None]  # its result is a function of where the indices are, constant elsewhere


# ---- ArgMax / ArgMin ----


def _arg(stem):
    class Arg:
        integer = True

        @staticmethod
        def kernel(k, node):
            x, y = node.inputs[0], node.outputs[0]
            outer, dim, inner = split_axis(at_least_1d(k.shape(x)), int(node.attr("axis", 0)))
            return [k.call(typed(k, stem, x), outer, dim, inner, int(node.attr("select_last_index", 0)), x, y)]

    return Arg


op("ArgMax")(_arg("et_argmax"))
op("ArgMin")(_arg("et_argmin"))
