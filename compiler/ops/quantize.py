"""QuantizeLinear and DequantizeLinear: the QDQ form of quantized models, as onnxruntime's
quantize_static and PyTorch's quantization-aware training export them.

A quantized tensor (int8, uint8, int16 or uint16; int32 for DequantizeLinear's biases) keeps its own
width in the C, or is an int32_t where the model outputs it (ir.Graph.c_type); the kernels
(runtime_c/et_quantize.h) take its type as an argument. Training
differentiates straight through the rounding, as torch.fake_quantize_* does: DequantizeLinear
passes dY * scale to the quantized tensor it read, and QuantizeLinear passes that gradient / scale
to its float input where the value was not saturated, 0 where it was. A Q -> DQ pair of one scale
thus gives dY inside the range and 0 outside, the gradient of quantization-aware training."""

import itertools

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .conv import ConvGradW, Window, _conv_args
from .elementwise import pack_bits, unpack_bits
from .registry import Tensor, op, split_axis


def _channels(k, node, x: str, scale: str) -> tuple[int, int, int]:
    """X as [outer][channels][inner] for `scale`: one channel per tensor, else the channels of `axis`."""
    if node.attr("block_size", 0):
        raise EdgetrainError(f"node '{node.name}' ({node.op}): blocked quantization (block_size) is not supported")
    shape = k.shape(x) or (1,)
    if k.size(scale) == 1 and len(k.shape(scale)) <= 1:
        return 1, 1, int(np.prod(shape, dtype=np.int64))
    return split_axis(shape, node.attr("axis", 1))


def zero_point_of(node, slot: int = 2) -> str | None:
    """The node's zero-point input, or None where it has none (0)."""
    return node.inputs[slot] if len(node.inputs) > slot and node.inputs[slot] else None


# runtime_c/et_quantize.h's enum et_qtype, by the C type of a quantized tensor (ir.Graph.c_type).
_QTYPES = {"int32_t": 0, "int8_t": 1, "uint8_t": 2, "int16_t": 3, "uint16_t": 4}


def _qtype(k, name: str) -> int:
    return _QTYPES[k.graph.c_type(name)]


def _range(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _per_channel(array: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """A per-tensor or per-axis operand shaped to broadcast against x."""
    if array.ndim == 0 or array.size == 1:
        return array.reshape(())
    shape = [1] * x.ndim
    shape[axis % x.ndim] = array.size
    return array.reshape(shape)


@op("QuantizeLinear", const_inputs=(1, 2))
class QuantizeLinear:
    integer = True

    @staticmethod
    def kernel(k, node):
        x, scale, y = node.inputs[0], node.inputs[1], node.outputs[0]
        qmin, qmax = _range(k.graph.values[y].dtype)
        layout = _channels(k, node, x, scale)
        return [k.call("et_quantize_f32", *layout, x, scale, zero_point_of(node), qmin, qmax, y, _qtype(k, y))]

    @staticmethod
    def grad(g, node, dy):
        qmin, qmax = _range(g.graph.values[node.outputs[0]].dtype)
        attrs = {"axis": node.attr("axis", 1), "qmin": qmin, "qmax": qmax}
        mask = g.emit("QuantizeLinearMask", [*node.inputs[:2], zero_point_of(node) or ""], attrs, domain=ET_DOMAIN)
        dx = g.emit("QuantizeLinearGrad", [dy[0], mask, node.inputs[1]], {"axis": attrs["axis"]}, domain=ET_DOMAIN)
        return [dx, None, None]


@op("DequantizeLinear", const_inputs=(1, 2))
class DequantizeLinear:
    integer = True
    straight_through = (0,)

    @staticmethod
    def kernel(k, node):
        x, scale = node.inputs[0], node.inputs[1]
        layout = _channels(k, node, x, scale)
        return [k.call("et_dequantize_f32", *layout, x, _qtype(k, x), scale, zero_point_of(node), node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        dx = g.emit("DequantizeLinearGrad", [dy[0], node.inputs[1]], {"axis": node.attr("axis", 1)}, domain=ET_DOMAIN)
        return [dx, None, None]


@op("IntegerSnapshot", domain=ET_DOMAIN)
class IntegerSnapshot:
    """(X) -> a copy of int8 X as it is now, never in X's place: what the backward pass reads of a
    trained int8 weight after its update has rounded X anew (trainer/integer.py
    weight_gradient_blocks), so every gradient is still that of the step's starting weights."""

    dtypes = (np.int8,)

    @staticmethod
    def kernel(k, node):
        return [k.call("et_copy_s8", k.size(node.inputs[0]), node.inputs[0], node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(x):
        return (x.copy(),)


@op("QuantizeLinearMask", domain=ET_DOMAIN)
class QuantizeLinearMask:
    """(X, scale, zero_point) -> the bits of where X quantizes inside [qmin, qmax] (tested on X * (1 /
    scale), as torch.fake_quantize_* tests it: runtime_c/et_quantize.h): what QuantizeLinear's
    gradient keeps of the forward pass, 1/32 of X's bytes."""

    dtypes = (np.uint32,)
    residual = True

    @staticmethod
    def kernel(k, node):
        x, scale = node.inputs[:2]
        layout = _channels(k, node, x, scale)
        args = (x, scale, zero_point_of(node), node.attr("qmin"), node.attr("qmax"), node.outputs[0])
        return [k.call("et_quantize_mask_f32", *layout, *args)]

    @staticmethod
    def shape(graph, node):
        return [(-(-graph.values[node.inputs[0]].size // 32),)]

    @staticmethod
    def reference(x, scale, zero_point=None, axis=1, qmin=0, qmax=0):
        q = np.rint(x * (np.float32(1) / _per_channel(scale, x, axis)))
        if zero_point is not None:
            q = q + _per_channel(zero_point, x, axis).astype(np.float32)
        return (pack_bits((q >= qmin) & (q <= qmax)),)


# QuantizeLinearGrad and DequantizeLinearGrad may take a block of output channels of a weight's
# gradient (trainer/integer.py weight_gradient_blocks): dY then starts at channel `first` along axis 0,
# of the weight's scale (per tensor or along axis 0) and of QuantizeLinearGrad's mask, which holds
# the whole weight's bits.


def _block_scale(k, node, dy: str, scale: str) -> tuple[tuple[int, int, int], object]:
    """(dY's layout for the scale, the scale from the block's first channel)."""
    layout, first = _channels(k, node, dy, scale), int(node.attr("first", 0))
    return layout, Tensor(scale, first) if first and layout[1] > 1 else scale


def _block_start(dy_shape, first: int) -> int:
    """The element of the whole weight at which a block from channel `first` starts."""
    return first * int(np.prod(dy_shape[1:], dtype=np.int64))


def _block(array: np.ndarray, first: int, like: np.ndarray, axis: int) -> np.ndarray:
    """The per-channel `array` from channel `first`, as many channels as `like` has (per tensor: as is)."""
    return array if array.size == 1 else array.ravel()[first : first + like.shape[axis % like.ndim]]


@op("QuantizeLinearGrad", domain=ET_DOMAIN)
class QuantizeLinearGrad:
    """(dY, mask, scale) -> dX = dY / scale where the mask's bit is set, else 0."""

    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        dy, mask, scale = node.inputs
        layout, scale_arg = _block_scale(k, node, dy, scale)
        bit = _block_start(k.shape(dy), int(node.attr("first", 0)))
        assert bit % 32 == 0, "a block's bits start at a word of the mask"
        return [k.call("et_quantize_grad_f32", *layout, dy, Tensor(mask, bit // 32), scale_arg, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(dy, mask, scale, axis=1, first=0):
        start = _block_start(dy.shape, first)
        inside = unpack_bits(mask, (mask.size * 32,))[start : start + dy.size].reshape(dy.shape)
        scale = _per_channel(_block(scale, first, dy, axis), dy, axis)
        return (np.where(inside, dy / scale, 0).astype(np.float32),)


@op("DequantizeLinearGrad", domain=ET_DOMAIN)
class DequantizeLinearGrad:
    """(dY, scale) -> dX = dY * scale: the gradient DequantizeLinear passes to its quantized input."""

    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        dy, scale = node.inputs
        layout, scale_arg = _block_scale(k, node, dy, scale)
        return [k.call("et_dequantize_grad_f32", *layout, dy, scale_arg, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(dy, scale, axis=1, first=0):
        return ((dy * _per_channel(_block(scale, first, dy, axis), dy, axis)).astype(np.float32),)


@op("QuantizedConv", domain=ET_DOMAIN)
class QuantizedConv:
    """(X, x_scale, x_zero_point, W, w_scale, B, y_scale, y_zero_point) -> (Y, patch[, mask]):
    DequantizeLinear -> Conv (or Gemm, a Conv of one position) -> [Relu] -> QuantizeLinear as one
    int8 layer (runtime_c/et_qconv.h), which trainer/integer.py puts in their place. X and Y are
    quantized per tensor; W is int8, symmetric, per output channel or per tensor; B is float (or
    omitted); activation is "", "Relu" or "Clip" (to [low, high]). mask, where the backward pass
    reads one: the bits of where the value Y quantizes lies inside Y's range (attribute inside:
    QuantizeLinearMask's) and where the activation passes its gradient (active: ReluMask's or
    ClipMask's), both tests at once with both. patch is the kernel's int16 workspace."""

    dtypes = (np.int8, np.int16, np.uint32)
    narrow_inputs = (3,)

    @staticmethod
    def kernel(k, node):
        x, sx, zx, w, sw, b, sy, zy = node.inputs
        y, patch, *mask = node.outputs
        xs, ys = k.shape(x), k.shape(y)
        qmin, qmax = _range(k.graph.values[y].dtype)
        layer = (xs[0], xs[1], k.shape(w)[0], int(node.attr("group")), *_layer_window(node).c_args(xs[2:], ys[2:]))
        activation = (_ACTIVATIONS.index(node.attr("activation")), float(node.attr("low")), float(node.attr("high")))
        scales = (_scalar(k, sx), _scalar(k, zx, int), w, sw, k.size(sw), b or None, *activation)
        masks = int(node.attr("inside")) | 2 * int(node.attr("active"))
        output = (_scalar(k, sy), _scalar(k, zy, int), qmin, qmax, y, _qtype(k, y), *(mask or [None]), masks, patch)
        return [k.call("et_qconv_s8", *layer, x, _qtype(k, x), *scales, *output)]

    @staticmethod
    def shape(graph, node):
        x, w = graph.shape(node.inputs[0]), graph.shape(node.inputs[3])
        spatial = _layer_window(node).output(x[2:])
        mask = [(-(-x[0] * w[0] * int(np.prod(spatial, dtype=np.int64)) // 32),)] * (len(node.outputs) - 2)
        return [(x[0], w[0], *spatial), (int(np.prod(w[1:], dtype=np.int64)),), *mask]

    @staticmethod
    def reference(
        x,
        sx,
        zx,
        w,
        sw,
        b,
        sy,
        zy,
        kernel_shape,
        strides,
        dilations,
        pads,
        group,
        activation,
        low,
        high,
        inside,
        active,
    ):
        f32 = np.float32
        gemm = x.ndim == 2  # a Conv of one position
        acc = _integer_conv(
            x.astype(np.int64).reshape(*x.shape, *[1] * gemm) - (0 if zx is None else int(zx.flat[0])),
            w.astype(np.int64).reshape(*w.shape, *[1] * gemm),
            Window.explicit(kernel_shape, strides, dilations, pads),
            group,
        )
        acc = acc.reshape(acc.shape[:2]) if gemm else acc
        shape = (1, w.shape[0]) + (1,) * (acc.ndim - 2)
        v = acc.astype(f32) * (f32(sx.flat[0]) * sw.astype(f32).reshape(shape if sw.size > 1 else ()))
        if b is not None:
            v = v + b.astype(f32).reshape(shape)
        passes = np.ones(v.shape, bool)
        if activation == "Relu":
            v = np.maximum(v, f32(0))
            passes = v > 0
        elif activation == "Clip":
            passes = (v >= low) & (v <= high)
            v = np.minimum(np.maximum(v, f32(low)), f32(high))
        y_type = zy.dtype if zy is not None else np.dtype(np.uint8)
        y_zero = f32(0 if zy is None else int(zy.flat[0]))
        qmin, qmax = _range(y_type)
        outputs = [np.clip(np.rint(v / f32(sy.flat[0])) + y_zero, qmin, qmax).astype(y_type)]
        outputs.append(np.zeros(w[0].size, np.int16))
        q = np.rint(v * (f32(1) / f32(sy.flat[0]))) + y_zero
        passes = ((q >= qmin) & (q <= qmax) if inside else True) & (passes if active else True)
        return (*outputs, pack_bits(passes)) if inside or active else tuple(outputs)


@op("ConvGradWQuantized", domain=ET_DOMAIN)
class ConvGradWQuantized:
    """(dY, X, x_scale, x_zero_point) -> ConvGradW's dW from a quantized X (per tensor), which the
    backward pass then reads as it is kept, without a float copy (runtime_c/et_qconv.h)."""

    @staticmethod
    def kernel(k, node):
        dy, x, sx, zx = node.inputs
        conv = _conv_args(node, k.shape(x), k.shape(dy))
        first, count = node.attr("channels", (0, k.shape(dy)[1]))
        call = ("et_conv_grad_w_q8_f32", *conv, dy, x, _qtype(k, x), _scalar(k, sx), _scalar(k, zx, int))
        return [k.call(*call, int(first), int(count), node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        dys, xs = graph.shape(node.inputs[0]), graph.shape(node.inputs[1])
        count = node.attr("channels", (0, dys[1]))[1]
        return [(count, xs[1] // int(node.attr("group"))) + tuple(node.attr("kernel_shape"))]

    @staticmethod
    def reference(dy, x, sx, zx, kernel_shape, strides, dilations, pads, group, channels=None):
        """channels: (first, count), the block of output channels computed (default: all)."""
        dequantized = (x.astype(np.float64) - (0 if zx is None else int(zx.flat[0]))) * float(sx.flat[0])
        (dw,) = ConvGradW.reference(dy, dequantized, kernel_shape, strides, dilations, pads, group)
        first, count = channels or (0, dw.shape[0])
        return (dw[first : first + count],)


@op("PooledGradRows", domain=ET_DOMAIN)
class PooledGradRows:
    """(G, mask, dq_scale, q_scale[, relu_mask]) -> rows [first, first + count) of each sample's dY
    (attribute channels), of its rows [top, top + height) along its first spatial axis (attribute
    rows; default all), where dY is what AveragePoolGrad of one window over the whole plane,
    DequantizeLinearGrad, QuantizeLinearGrad (mask) and ReluGrad (relu_mask) make of the pooled
    gradient G [N, C]: each element the same float operations on the same values, so the same bits.
    A weight gradient reads it a block of output channels at a time (trainer/integer.py
    weight_gradient_blocks), a bias gradient and a pointwise input gradient a block of channels or
    of rows (pooled_gradient_blocks), so the whole dY need not exist. shape: the whole dY's."""

    @staticmethod
    def kernel(k, node):
        g, mask, dq_scale, q_scale, relu_mask = (tuple(node.inputs) + ("",))[:5]
        n, channels, *plane = node.attr("shape")
        first, count = node.attr("channels")
        top, height = node.attr("rows", (0, plane[0]))
        size, row = int(np.prod(plane, dtype=np.int64)), int(np.prod(plane[1:], dtype=np.int64))
        scales = (_scalar(k, dq_scale), _scalar(k, q_scale))
        masks = (mask, relu_mask or None)
        positions = (top * row, height * row)
        call = ("et_pooled_grad_rows_f32", n, channels, size, first, count, *positions, g, *scales, *masks)
        return [k.call(*call, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        n, _, *plane = node.attr("shape")
        height = node.attr("rows", (0, plane[0]))[1]
        return [(n, node.attr("channels")[1], height, *plane[1:])]

    @staticmethod
    def reference(g, mask, dq_scale, q_scale, relu_mask=None, shape=(), channels=(0, 0), rows=None):
        n, c, *plane = shape
        size, one = int(np.prod(plane, dtype=np.int64)), np.float32
        value = ((one(0) + g.reshape(n, c, 1).astype(one) / one(size)) * one(dq_scale.flat[0])) / one(q_scale.flat[0])
        passes = unpack_bits(mask, (n, c, size))
        if relu_mask is not None:
            passes &= unpack_bits(relu_mask, (n, c, size))
        dy = np.where(passes, np.broadcast_to(value, (n, c, size)), one(0)).reshape(n, c, *plane)
        first, count = channels
        top, height = rows or (0, plane[0])
        return (dy[:, first : first + count, top : top + height].astype(one),)


@op("QuantizedGlobalAveragePool", domain=ET_DOMAIN)
class QuantizedGlobalAveragePool:
    """(X, x_scale, x_zero_point) -> Y: GlobalAveragePool (or an AveragePool of one window over each
    unpadded plane) of DequantizeLinear(X), X int8 or uint8 per tensor, which trainer/integer.py puts
    in their place: each plane summed exactly in int32, then scaled (runtime_c/et_qconv.h), with no
    float copy of X."""

    @staticmethod
    def kernel(k, node):
        x, sx, zx = node.inputs
        xs = k.shape(x)
        plane = int(np.prod(xs[2:], dtype=np.int64))
        scale = (_scalar(k, sx), _scalar(k, zx, int))
        return [k.call("et_qmean_f32", xs[0] * xs[1], plane, x, _qtype(k, x), *scale, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        xs = graph.shape(node.inputs[0])
        return [(*xs[:2], *(1,) * (len(xs) - 2))]

    @staticmethod
    def reference(x, sx, zx=None):
        zero = 0 if zx is None else int(zx.flat[0])
        total = (x.astype(np.int64) - zero).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
        plane = np.float32(np.prod(x.shape[2:]))
        return ((np.float32(sx.flat[0]) * (total.astype(np.float32) / plane)).astype(np.float32),)


# et_qconv.h's ET_QACT_*, by QuantizedConv's activation attribute
_ACTIVATIONS = ("", "Relu", "Clip")


@op("ConvGradXQuantized", domain=ET_DOMAIN)
class ConvGradXQuantized:
    """(dY, W, w_scale) -> (dX, scratch): a pointwise convolution's input gradient (ConvGradXInPlace's,
    no groups) from its int8 weights, symmetric per output channel or per tensor, without a float copy
    of them (runtime_c/et_qconv.h). dX may take over dY's bytes, as ConvGradXInPlace's does."""

    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        dy, w, sw = node.inputs
        dx, scratch = node.outputs
        n, c, plane = k.shape(dx)[0], k.shape(dx)[1], int(np.prod(k.shape(dx)[2:], dtype=np.int64))
        return [k.call("et_conv_grad_x_q8_f32", n, c, k.shape(dy)[1], plane, dy, w, sw, k.size(sw), dx, scratch)]

    @staticmethod
    def shape(graph, node):
        return [tuple(node.attr("shape")), (graph.shape(node.inputs[0])[1] * GRAD_X_PIECE,)]

    @staticmethod
    def reference(dy, w, sw, shape):
        m = w.shape[0]
        weights = w.reshape(m, -1).astype(np.float64) * (sw.reshape(m, 1) if sw.size > 1 else sw.reshape(()))
        dx = np.einsum("nm...,mc->nc...", dy.astype(np.float64), weights)
        return dx.reshape(shape).astype(np.float32), np.zeros(m * GRAD_X_PIECE, np.float32)


# runtime_c/et_qconv.h's ET_QCONV_GRAD_PIECE: positions of dY per piece of ConvGradXQuantized's scratch
GRAD_X_PIECE = 16


def _scalar(k, name: str, kind=float):
    """A per-tensor scale or zero point as a literal (0 for an omitted zero point)."""
    return kind(k.value_of(name).flat[0]) if name else kind(0)


def _layer_window(node) -> Window:
    """QuantizedConv's explicit window."""
    return Window.explicit(*(node.attr(a) for a in ("kernel_shape", "strides", "dilations", "pads")))


def _integer_conv(x: np.ndarray, w: np.ndarray, geo: Window, group: int) -> np.ndarray:
    """Conv of integer arrays, exactly (int64), zero padding: [N, C, *S] by [M, C / group, *K]."""
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    spatial = geo.output(x.shape[2:])
    padded = np.pad(x, [(0, 0), (0, 0), *zip(geo.begin, geo.end)])
    y = np.zeros((n, group, m // group, *spatial), np.int64)
    for tap in itertools.product(*map(range, geo.kernel)):
        window = tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, geo.dilations, spatial, geo.strides)
        )
        xs = padded[(slice(None), slice(None)) + window].reshape(n, group, c // group, -1)
        ws = w[(slice(None), slice(None)) + tap].reshape(group, m // group, c // group)
        y += np.einsum("ngcp,gmc->ngmp", xs, ws).reshape(y.shape)
    return y.reshape(n, m, *spatial)
