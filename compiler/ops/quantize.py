"""QuantizeLinear and DequantizeLinear: the QDQ form of quantized models, as onnxruntime's
quantize_static and PyTorch's quantization-aware training export them.

A quantized tensor (int8, uint8, int16 or uint16; int32 for DequantizeLinear's biases) keeps its own
width in the C, or is an int32_t where the model outputs it (ir.Graph.c_type); the kernels
(runtime_c/et_quantize.h) take its type as an argument. Training
differentiates straight through the rounding, as torch.fake_quantize_* does: DequantizeLinear
passes dY * scale to the quantized tensor it read, and QuantizeLinear passes that gradient / scale
to its float input where the value was not saturated, 0 where it was. A Q -> DQ pair of one scale
thus gives dY inside the range and 0 outside, the gradient of quantization-aware training."""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .elementwise import pack_bits, unpack_bits
from .registry import op, split_axis


def _channels(k, node, x: str, scale: str) -> tuple[int, int, int]:
    """X as [outer][channels][inner] for `scale`: one channel per tensor, else the channels of `axis`."""
    if node.attr("block_size", 0):
        raise EdgetrainError(f"node '{node.name}' ({node.op}): blocked quantization (block_size) is not supported")
    shape = k.shape(x) or (1,)
    if k.size(scale) == 1 and len(k.shape(scale)) <= 1:
        return 1, 1, int(np.prod(shape, dtype=np.int64))
    return split_axis(shape, node.attr("axis", 1))


def _zero_point(node, slot: int = 2) -> str | None:
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
        return [k.call("et_quantize_f32", *layout, x, scale, _zero_point(node), qmin, qmax, y, _qtype(k, y))]

    @staticmethod
    def grad(g, node, dy):
        qmin, qmax = _range(g.graph.values[node.outputs[0]].dtype)
        attrs = {"axis": node.attr("axis", 1), "qmin": qmin, "qmax": qmax}
        mask = g.emit("QuantizeLinearMask", [*node.inputs[:2], _zero_point(node) or ""], attrs, domain=ET_DOMAIN)
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
        return [k.call("et_dequantize_f32", *layout, x, _qtype(k, x), scale, _zero_point(node), node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        dx = g.emit("DequantizeLinearGrad", [dy[0], node.inputs[1]], {"axis": node.attr("axis", 1)}, domain=ET_DOMAIN)
        return [dx, None, None]


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
        args = (x, scale, _zero_point(node), node.attr("qmin"), node.attr("qmax"), node.outputs[0])
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


@op("QuantizeLinearGrad", domain=ET_DOMAIN)
class QuantizeLinearGrad:
    """(dY, mask, scale) -> dX = dY / scale where the mask's bit is set, else 0."""

    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        dy, mask, scale = node.inputs
        layout = _channels(k, node, dy, scale)
        return [k.call("et_quantize_grad_f32", *layout, dy, mask, scale, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(dy, mask, scale, axis=1):
        inside = unpack_bits(mask, dy.shape)
        return (np.where(inside, dy / _per_channel(scale, dy, axis), 0).astype(np.float32),)


@op("DequantizeLinearGrad", domain=ET_DOMAIN)
class DequantizeLinearGrad:
    """(dY, scale) -> dX = dY * scale: the gradient DequantizeLinear passes to its quantized input."""

    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        dy, scale = node.inputs
        return [k.call("et_dequantize_grad_f32", *_channels(k, node, dy, scale), dy, scale, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(dy, scale, axis=1):
        return ((dy * _per_channel(scale, dy, axis)).astype(np.float32),)
