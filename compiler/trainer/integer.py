"""Int8 layers: in a quantized model's functions, each DequantizeLinear -> Conv (or Gemm) -> [Relu]
-> QuantizeLinear becomes one QuantizedConv (ops/quantize.py), which reads int8, accumulates in
int32 and writes int8, so none of the layer's float tensors takes arena space; and a weight
gradient (ConvGradW) reads the int8 input the backward pass keeps rather than a float copy of it.

Runs on a function's finished node list (after differentiation and recomputation): the backward
pass keeps reading the bit masks the replaced QuantizeLinearMask and ReluMask nodes made, which the
int8 layer now makes. A layer is replaced only where nothing else reads its float tensors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx

from ..frontend.load import QDQ_OPSET, run_node
from ..ir import ET_DOMAIN, Graph, Node
from ..ops.conv import window

_X_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
# |x - x_zero| <= 255 and |w| <= 128: the sums of this many products fit an int32
_MAX_TAPS = (2**31 - 1) // (255 * 128)


def fuse_int8_layers(graph: Graph, nodes: list[Node], quantizers: dict[str, Node], keep: set[str]) -> list[Node]:
    """`nodes` with every int8 layer fused. quantizers: the QuantizeLinear of each frozen weight that
    the training graph reads already fake-quantized (trainer.assemble._frozen_fake_quantization);
    keep: values the function returns, which stay as they are."""
    producer = {out: node for node in nodes for out in node.outputs}
    readers: dict[str, list[Node]] = {}
    for node in nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    fused: dict[int, Node] = {}  # id of the layer's node -> its int8 layer
    gone: set[int] = set()
    renamed: dict[str, str] = {}  # a ReluMask's bits -> the layer's mask, which has them
    for node in nodes:
        if node.op in ("Conv", "Gemm") and not node.domain:
            match = _layer(graph, node, producer, readers, quantizers, keep)
            if match is not None:
                fused[id(node)], replaced, masks = match
                gone.update(map(id, replaced))
                renamed.update((m, masks[0]) for m in masks[1:])
        elif node.op == "ConvGradW" and (dq := _dequantized(graph, node.inputs[1], node, producer, readers, keep)):
            fused[id(node)] = Node(
                "ConvGradWQuantized", (node.inputs[0], *dq.inputs), node.outputs, node.attrs, node.name, ET_DOMAIN
            )
            gone.add(id(dq))
    out = [fused.get(id(n), n) for n in nodes if id(n) in fused or id(n) not in gone]
    return [
        replace(n, inputs=tuple(renamed.get(i, i) for i in n.inputs)) if set(n.inputs) & set(renamed) else n
        for n in out
    ]


def _only_reader(readers, name: str, node: Node) -> bool:
    return [id(n) for n in readers.get(name, [])] == [id(node)]


def _per_tensor(graph: Graph, node: Node) -> bool:
    return graph.values[node.inputs[1]].size == 1


def _zero(graph: Graph, node: Node) -> str:
    return node.inputs[2] if len(node.inputs) > 2 else ""


# The straight-through gradients of a quantized weight, in place of the weight's gradient.
_WEIGHT_CHAIN = ("DequantizeLinearGrad", "QuantizeLinearGrad")


def early_weight_chains(nodes: list[Node], backward_start: int) -> list[Node]:
    """The backward pass with each DequantizeLinearGrad and QuantizeLinearGrad moved up to just
    after what it reads is made and every other reader of its input has run: a trained int8
    weight's gradient then reaches its parameter (and a fused update) as soon as it exists, instead
    of staying alive while the layers below are differentiated. Each is in place and reads its
    input last, as before, so it takes no new arena space."""
    order = list(nodes[:backward_start])
    for node in nodes[backward_start:]:
        if node.op not in _WEIGHT_CHAIN:
            order.append(node)
            continue
        after = [i for i, n in enumerate(order) if set(n.outputs) & set(node.inputs) or node.inputs[0] in n.inputs]
        order.insert(max(after, default=backward_start - 1) + 1, node)
    return order


def _dequantized(graph: Graph, x: str, node: Node, producer, readers, keep) -> Node | None:
    """The DequantizeLinear that makes `x` for `node` alone, per tensor from int8 or uint8."""
    dq = producer.get(x)
    if dq is None or dq.op != "DequantizeLinear" or not _only_reader(readers, x, node) or x in keep:
        return None
    return dq if _per_tensor(graph, dq) and graph.values[dq.inputs[0]].dtype in _X_TYPES else None


def _layer(graph: Graph, layer: Node, producer, readers, quantizers, keep) -> tuple[Node, list[Node], list[str]] | None:
    """The int8 layer for Conv or Gemm `layer`, the nodes it replaces and the masks they made (the
    layer's own first); None where it does not apply."""
    x, w, bias = (tuple(layer.inputs) + ("",))[:3]
    dq = _dequantized(graph, x, layer, producer, readers, keep)
    if dq is None:
        return None
    geometry = _geometry(graph, layer)
    weight = _weight(graph, layer, producer, readers, quantizers)
    if geometry is None or weight is None:
        return None
    (w_q, w_scale, w_dq), taps = weight, int(np.prod(graph.shape(w)[1:], dtype=np.int64))
    y = layer.outputs[0]
    after = readers.get(y, [])
    relu = after[0] if len(after) == 1 and after[0].op == "Relu" and not after[0].domain else None
    value = relu.outputs[0] if relu else y
    out = _quantized_output(graph, readers.get(value, []), value, relu is not None)
    if out is None or taps > _MAX_TAPS or {y, value} & keep:
        return None
    q, inside, positive = out
    masks = [m for m in (inside, positive) if m is not None]
    patch = graph.add_value(graph.fresh("patch"), (taps,), np.int16)
    # One mask serves both gradients: ReluGrad passes what QuantizeLinearGrad (its only input) passed
    # where the value was positive, so each may apply both tests at once.
    node = Node(
        "QuantizedConv",
        (dq.inputs[0], dq.inputs[1], _zero(graph, dq), w_q, w_scale, bias, q.inputs[1], _zero(graph, q)),
        (q.outputs[0], patch, *(m.outputs[0] for m in masks[:1])),
        {
            **geometry,
            "relu": int(relu is not None),
            "inside": int(inside is not None),
            "positive": int(positive is not None),
        },
        layer.name,
        ET_DOMAIN,
    )
    replaced = [n for n in (dq, w_dq, layer, relu, q, *masks) if n is not None]
    return node, replaced, [m.outputs[0] for m in masks]


def _geometry(graph: Graph, layer: Node) -> dict | None:
    """The layer's explicit window and group, as QuantizedConv takes them (a Gemm's: one of a tap)."""
    if layer.op == "Gemm":
        plain = all(layer.attr(a, 1.0) == 1.0 for a in ("alpha", "beta"))
        if (
            not plain
            or layer.attr("transA", 0)
            or not layer.attr("transB", 0)
            or len(graph.shape(layer.inputs[0])) != 2
        ):
            return None
        bias = layer.inputs[2] if len(layer.inputs) > 2 else ""
        if bias and graph.shape(bias) != (graph.shape(layer.inputs[1])[0],):
            return None
        return {"kernel_shape": [1], "strides": [1], "dilations": [1], "pads": [0, 0], "group": 1}  # 1 x 1 positions
    xs, ys = graph.shape(layer.inputs[0]), graph.shape(layer.outputs[0])
    geo = window(layer, xs[2:], ys[2:], graph.shape(layer.inputs[1])[2:])
    return {**geo.attrs(), "group": int(layer.attr("group", 1))}


def _weight(graph: Graph, layer: Node, producer, readers, quantizers) -> tuple[str, str, Node | None] | None:
    """(int8 weight, its scale, the DequantizeLinear it replaces) of the layer, symmetric with one
    scale per output channel or per tensor; None where the weight is not such."""
    w = layer.inputs[1]
    dq = producer.get(w)
    if dq is not None and dq.op == "DequantizeLinear" and _only_reader(readers, w, layer):
        quantized, source = dq.inputs[0], dq
    elif w in quantizers:
        quantized, source = _int8_constant(graph, quantizers[w]), None
    else:
        return None
    node = source or quantizers[w]
    zero = _zero(graph, node)
    if graph.values[quantized].dtype != np.int8 or (zero and np.any(graph.constants.get(zero, 1) != 0)):
        return None
    axis = node.attr("axis", 1) % len(graph.shape(w))
    if not _per_tensor(graph, node) and axis != 0:
        return None
    return quantized, node.inputs[1], source


def _int8_constant(graph: Graph, q: Node) -> str:
    """The int8 values QuantizeLinear `q` makes of its frozen weight, as a constant."""
    name = f"{q.outputs[0]}_int8"  # one constant for every function that reads it
    if name not in graph.constants:
        feeds = {n: graph.params[n] if n in graph.params else graph.constants[n] for n in q.inputs if n}
        node = onnx.helper.make_node("QuantizeLinear", q.inputs, ["q"], **dict(q.attrs))
        (values,) = run_node(node, feeds, max(graph.opset, QDQ_OPSET))
        graph.constants[name] = np.asarray(values)
        graph.add_value(name, graph.constants[name].shape, graph.constants[name].dtype)
    return name


def _quantized_output(graph: Graph, after: list[Node], value: str, relu: bool):
    """(the QuantizeLinear of `value`, its QuantizeLinearMask, ReluMask) when those are all that read
    `value`, the QuantizeLinear per tensor into int8 or uint8; else None."""
    quantize = [n for n in after if n.op == "QuantizeLinear"]
    if len(quantize) != 1 or not _per_tensor(graph, quantize[0]):
        return None
    q = quantize[0]
    if graph.values[q.outputs[0]].dtype not in _X_TYPES:
        return None
    inside = [n for n in after if n.op == "QuantizeLinearMask" and n.inputs[1:] == (*q.inputs[1:], "")[:2]]
    positive = [n for n in after if relu and n.op == "ReluMask"]
    if len(inside) > 1 or len(positive) > 1 or len(after) != 1 + len(inside) + len(positive):
        return None
    return q, inside[0] if inside else None, positive[0] if positive else None
