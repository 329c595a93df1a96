"""Ops that move data without arithmetic: reshapes, Transpose, Concat, Split, Expand."""

import numpy as np

from ..ir import ET_DOMAIN, PER_WORD
from .elementwise import pack_bits, unpack_bits
from .integer import typed
from .registry import Tensor, at_least_1d, broadcast_strides, op, split_axis


def _as_reshape(g, node, dy):
    return [g.reshape(dy[0], g.shape(node.inputs[0]))] + [None] * (len(node.inputs) - 1)


def _copy(k, node):
    y = node.outputs[0]
    return [k.call(typed(k, "et_copy", y), k.size(y), node.inputs[0], y)]


for _name, _consts in (("Reshape", (1,)), ("Flatten", ()), ("Squeeze", (1,)), ("Unsqueeze", (1,))):
    op(_name, const_inputs=_consts)(
        type(_name, (), {"kernel": staticmethod(_copy), "integer": True, "grad": staticmethod(_as_reshape)})
    )


def _perm(node, rank):
    perm = node.attr("perm")
    return tuple(perm) if perm is not None else tuple(reversed(range(rank)))


@op("Transpose")
class Transpose:
    integer = True

    @staticmethod
    def kernel(k, node):
        shape = k.shape(node.inputs[0])
        return [
            k.call(
                typed(k, "et_transpose", node.outputs[0]),
                len(shape),
                at_least_1d(shape),
                at_least_1d(_perm(node, len(shape))),
                node.inputs[0],
                node.outputs[0],
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        perm = _perm(node, len(g.shape(node.inputs[0])))
        return [g.emit("Transpose", [dy[0]], {"perm": [int(i) for i in np.argsort(perm)]})]


@op("Concat")
class Concat:
    integer = True

    @staticmethod
    def kernel(k, node):
        y = node.outputs[0]
        outer, _, inner = split_axis(k.shape(y), node.attr("axis"))
        row = k.size(y) // max(outer, 1)
        calls, offset = [], 0
        for x in node.inputs:
            width = k.size(x) // max(outer, 1)
            calls.append(k.call(typed(k, "et_copy_block", y), outer, width, x, width, Tensor(y, offset), row))
            offset += width
        return calls

    @staticmethod
    def grad(g, node, dy):
        axis = node.attr("axis")
        sizes = [g.shape(x)[axis] for x in node.inputs]
        parts = g.emit("Split", [dy[0], g.ints(sizes)], {"axis": axis}, outputs=len(sizes))
        return list(parts) if len(sizes) > 1 else [parts]


def _element_bytes(k, name: str) -> int:
    return 4 // PER_WORD[k.graph.c_type(name)]


def _row_size(shape) -> int:
    """Elements of a row of an NCH[W] tensor's planes."""
    return int(np.prod(shape[3:], dtype=np.int64))


@op("Rows", domain=ET_DOMAIN)
class Rows:
    """(X) -> rows [first, first + count) of every plane of an NCH[W] X (its axis 2), of any element
    type: the part of a tensor one row band reads (lower/bands.py)."""

    integer = True

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        (n, c, h), w = k.shape(x)[:3], _row_size(k.shape(x))
        first, count = node.attr("first"), node.attr("count")
        rows = count * w
        return [k.call("et_copy_rows", n * c, rows, _element_bytes(k, y), Tensor(x, first * w), h * w, y, rows)]

    @staticmethod
    def shape(graph, node):
        shape = graph.shape(node.inputs[0])
        return [(*shape[:2], node.attr("count"), *shape[3:])]

    @staticmethod
    def reference(x, first, count):
        return (x[:, :, first : first + count].copy(),)


@op("MaskRows", domain=ET_DOMAIN)
class MaskRows:
    """(mask) -> the bits of rows [first, first + count) of every plane of the NCH[W] tensor a bit
    mask describes (attributes planes, height and width: its N * C, H and row size), packed as
    mask's: the part of a ReLU's or a quantization's mask that one row band of its gradient reads
    (lower/bands.py)."""

    dtypes = (np.uint32,)

    @staticmethod
    def kernel(k, node):
        planes, height, width = node.attr("planes"), node.attr("height"), node.attr("width")
        first, count = node.attr("first"), node.attr("count")
        mask, y = node.inputs[0], node.outputs[0]
        return [k.call("et_mask_rows", planes, height * width, first * width, count * width, mask, y)]

    @staticmethod
    def shape(graph, node):
        return [(-(-node.attr("planes") * node.attr("count") * node.attr("width") // 32),)]

    @staticmethod
    def reference(mask, planes, height, width, first, count):
        bits = unpack_bits(mask, (planes, height, width))
        return (pack_bits(bits[:, first : first + count]),)


@op("JoinRows", domain=ET_DOMAIN)
class JoinRows:
    """(band, ...) -> the bands' rows one after another along axis 2 (Concat's, of any element
    type): a whole NCHW tensor from the row bands that made it (lower/bands.py)."""

    integer = True

    @staticmethod
    def kernel(k, node):
        y = node.outputs[0]
        (n, c, h), w = k.shape(y)[:3], _row_size(k.shape(y))
        calls, row = [], 0
        size = _element_bytes(k, y)
        for band in node.inputs:
            width = k.shape(band)[2] * w
            calls.append(k.call("et_copy_rows", n * c, width, size, band, width, Tensor(y, row * w), h * w))
            row += k.shape(band)[2]
        return calls

    @staticmethod
    def shape(graph, node):
        shape = graph.shape(node.inputs[0])
        return [(*shape[:2], sum(graph.shape(band)[2] for band in node.inputs), *shape[3:])]

    @staticmethod
    def reference(*bands):
        return (np.concatenate(bands, axis=2),)


@op("Split", const_inputs=(1,))
class Split:
    @staticmethod
    def kernel(k, node):
        x = node.inputs[0]
        outer, _, _ = split_axis(k.shape(x), node.attr("axis", 0))
        row = k.size(x) // max(outer, 1)
        calls, offset = [], 0
        for y in node.outputs:
            width = k.size(y) // max(outer, 1)
            calls.append(k.call("et_copy_block_f32", outer, width, Tensor(x, offset), row, y, width))
            offset += width
        return calls

    @staticmethod
    def grad(g, node, dy):
        parts = [d if d else g.const(np.zeros(g.shape(y), np.float32)) for d, y in zip(dy, node.outputs)]
        return [g.emit("Concat", parts, {"axis": node.attr("axis", 0)})] + [None] * (len(node.inputs) - 1)


@op("Expand", const_inputs=(1,))
class Expand:
    integer = True

    @staticmethod
    def kernel(k, node):
        x, y = node.inputs[0], node.outputs[0]
        shape = at_least_1d(k.shape(y))
        return [k.call(typed(k, "et_expand", y), len(shape), shape, x, broadcast_strides(k.shape(x), shape), y)]

    @staticmethod
    def grad(g, node, dy):
        return [dy[0], None]  # the driver sums the broadcast axes away
