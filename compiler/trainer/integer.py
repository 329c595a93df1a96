"""Int8 layers: in a quantized model's functions, each DequantizeLinear -> Conv (or Gemm) -> [Relu or
Clip] -> QuantizeLinear becomes one QuantizedConv (ops/quantize.py), which reads int8, accumulates in
int32 and writes int8, so none of the layer's float tensors takes arena space; and a weight
gradient (ConvGradW) reads the int8 input the backward pass keeps rather than a float copy of it.

Runs on a function's finished node list (after differentiation and recomputation): the backward
pass keeps reading the bit masks the replaced QuantizeLinearMask, ReluMask and ClipMask nodes made,
which the int8 layer now makes. A layer is replaced only where nothing else reads the float tensors
it computes; its dequantized input stays where other nodes read it too."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import onnx

from ..frontend.load import QDQ_OPSET, run_node
from ..ir import ET_DOMAIN, Graph, Node
from ..ops import KernelCtx, require
from ..ops.conv import window
from ..ops.elementwise import Clip
from ..ops.quantize import GRAD_X_PIECE, zero_point_of

_X_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
# |x - x_zero| <= 255 and |w| <= 128: the sums of this many products fit an int32
_MAX_TAPS = (2**31 - 1) // (255 * 128)
# and the sums of this many |x - x_zero| (a pooled plane's)
_MAX_PLANE = (2**31 - 1) // 255


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
        elif _whole_plane(graph, node) and (dq := _dequantized(graph, node.inputs[0], producer, keep)):
            inputs = (dq.inputs[0], dq.inputs[1], zero_point_of(dq) or "")
            fused[id(node)] = Node("QuantizedGlobalAveragePool", inputs, node.outputs, {}, node.name, ET_DOMAIN)
        elif node.op == "ConvGradW" and (dq := _dequantized(graph, node.inputs[1], producer, keep)):
            fused[id(node)] = Node(
                "ConvGradWQuantized", (node.inputs[0], *dq.inputs), node.outputs, node.attrs, node.name, ET_DOMAIN
            )
        elif (
            node.op == "ConvGradXInPlace" and node.attr("group") == 1 and (weight := _weight(graph, node, producer, {}))
        ):
            scratch = graph.add_value(graph.fresh("scratch"), (graph.shape(node.inputs[0])[1] * GRAD_X_PIECE,))
            outputs = (node.outputs[0], scratch)
            inputs = (node.inputs[0], *weight)
            fused[id(node)] = Node(
                "ConvGradXQuantized", inputs, outputs, {"shape": node.attr("shape")}, node.name, ET_DOMAIN
            )
    out = [fused.get(id(n), n) for n in nodes if id(n) in fused or id(n) not in gone]
    out = [
        replace(n, inputs=tuple(renamed.get(i, i) for i in n.inputs)) if set(n.inputs) & set(renamed) else n
        for n in out
    ]
    # A DequantizeLinear that the int8 layers took the place of as readers may have none left.
    read = {name for n in out for name in n.inputs} | keep
    return [n for n in out if n.op != "DequantizeLinear" or n.outputs[0] in read]


def _whole_plane(graph: Graph, pool: Node) -> bool:
    """Whether `pool` averages each plane as one unpadded window (GlobalAveragePool does), whose int32
    sum of int8 values cannot overflow."""
    if pool.op not in ("GlobalAveragePool", "AveragePool") or pool.domain:
        return False
    xs = graph.shape(pool.inputs[0])
    if int(np.prod(xs[2:], dtype=np.int64)) > _MAX_PLANE:
        return False
    if pool.op == "GlobalAveragePool":
        return True
    geo = window(pool, xs[2:], graph.shape(pool.outputs[0])[2:], pool.attr("kernel_shape"))
    plain = not any(geo.begin) and not any(geo.end) and set(geo.dilations) <= {1}
    return plain and tuple(geo.kernel) == tuple(xs[2:])


def _per_tensor(graph: Graph, node: Node) -> bool:
    return graph.values[node.inputs[1]].size == 1


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


# A weight gradient made a block of output channels at a time (weight_gradient_blocks) is cut into
# at most this many blocks: each then holds an eighth of the gradient's bytes, or a little more.
_BLOCKS = 8


def weight_gradient_blocks(
    graph: Graph, nodes: list[Node], grads: dict[str, str | None], read_as: Callable[[str], str] = str
) -> tuple[list[Node], dict[str, list[tuple[str, int]]]]:
    """For a fused update (lower.lowering._fused_updates): each trained weight whose gradient an
    int8 layer's weight gradient (ConvGradWQuantized) makes, through the weight's straight-through
    chain where it has one, is differentiated a block of output channels at a time, each block's
    chain right after it, so the update can apply each block as it is made and the whole gradient
    never exists. Each block gives the same bits as the whole gradient's rows.

    The update may come before the weight's last reader (read_as(weight): a stored int8 weight's
    integers) where that reader can read a snapshot of the integers instead, taken before the first
    block's update; a float weight's readers read the int8 copy the forward pass made of it. Where
    the layer's output gradient comes from an average pool of the whole plane (_pooled), each block
    reads its own rows of it (PooledGradRows), before the whole of it is made. Returns the nodes
    and, per such weight, (each block's gradient, the element of the weight it starts at)."""
    producer = {out: (i, node) for i, node in enumerate(nodes) for out in node.outputs}
    read: dict[str, int] = {}
    last_read: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            read[name] = read.get(name, 0) + 1
            last_read[name] = i
    cut: dict[int, list[Node]] = {}  # the index of a node -> the nodes that run in its place
    gone: set[int] = set()  # the chains (and weight gradients) the blocks have in their place
    renamed: dict[int, tuple[str, str]] = {}  # id of a node -> (the weight it reads, its snapshot)
    blocks: dict[str, list[tuple[str, int]]] = {}
    for param, grad in grads.items():
        chain: list[Node] = []
        value = grad or ""
        while value in producer and producer[value][1].op in _WEIGHT_CHAIN:
            chain.insert(0, producer[value][1])
            value = chain[0].inputs[0]
        if value not in producer or read.get(grad or "", 0):
            continue
        at, made = producer[value]
        inner = graph.values[value].size // graph.shape(value)[0]
        rows = _block_rows(graph.shape(value)[0], inner)
        weight = read_as(param)
        read_later = last_read.get(weight, -1) > at
        if made.op != "ConvGradWQuantized" or (read_later and weight == param) or rows is None:
            continue
        if any(read.get(n.inputs[0]) != 1 or not _along_first_axis(graph, n) for n in chain):
            continue
        pooled = _pooled(graph, producer, made)
        start = at if pooled is None else pooled[0]  # the blocks run in place of the pool's gradient
        gone.update(id(n) for n in (*chain, made))
        cut[start] = []
        if read_later:  # stored int8 values, which the later readers read as the step began
            snapshot = graph.add_value(graph.fresh("snapshot"), graph.shape(weight), np.int8)
            cut[start].append(Node("IntegerSnapshot", (weight,), (snapshot,), {}, f"{made.name}_snapshot", ET_DOMAIN))
            renamed.update((id(n), (weight, snapshot)) for n in nodes[start:] if weight in n.inputs)
        blocks[param] = []
        channels = graph.shape(value)[0]
        for first in range(0, channels, rows):
            block = _weight_block(graph, made, chain, first, min(rows, channels - first), pooled)
            cut[start] += block
            blocks[param].append((block[-1].outputs[0], first * inner))
        if pooled is not None:  # then the whole dY, for the layer's other gradients
            cut[start].append(nodes[start])
    out_nodes = []
    for i, node in enumerate(nodes):
        if id(node) in renamed:
            old, new = renamed[id(node)]
            node = replace(node, inputs=tuple(new if name == old else name for name in node.inputs))
        out_nodes += cut.get(i, [] if id(nodes[i]) in gone else [node])
    return out_nodes, blocks


# The input gradients of a pointwise layer that pooled_gradient_blocks makes a block of rows at a time.
_POINTWISE_GRAD_X = ("ConvGradX", "ConvGradXInPlace", "ConvGradXQuantized")


def pooled_gradient_blocks(
    graph: Graph, nodes: list[Node], grads: dict[str, str | None]
) -> tuple[list[Node], dict[str, list[tuple[str, int]]]]:
    """For a fused update: a dY that an average pool of the whole plane makes of a pooled gradient
    (_pooled_dy: an int8 layer before a global average pool), read by nothing but its layer's bias
    gradient (a ReduceSum over every axis but the channels') and a pointwise input gradient, is
    never made whole. PooledGradRows makes its bias gradient a block of channels at a time, each
    block updated as it is made, and its input gradient a block of rows at a time (each a whole sum
    over the channels), which JoinRows puts together: the same bits as from the whole dY; where
    that takes fewer bytes (_smaller) and nothing reads the bias after its gradient. Returns the
    nodes and, per bias, (each block's gradient, the element it starts at)."""
    producer = {out: (i, node) for i, node in enumerate(nodes) for out in node.outputs}
    readers: dict[str, list[Node]] = {}
    for node in nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    trained = {grad: param for param, grad in grads.items() if grad}
    position = {id(node): i for i, node in enumerate(nodes)}
    last_read = {name: i for i, node in enumerate(nodes) for name in node.inputs}
    cut: dict[int, list[Node]] = {}
    gone: set[int] = set()
    blocks: dict[str, list[tuple[str, int]]] = {}
    for dy, users in readers.items():
        pooled = _pooled_dy(graph, producer, dy)
        if pooled is None or not all(_bias_sum(graph, u, trained, readers) or _pointwise_grad_x(u) for u in users):
            continue
        # a block's update comes before its sum's place: nothing may read the bias after it (a
        # forward op recomputed there)
        if any(last_read.get(trained[u.outputs[0]], -1) > position[id(u)] for u in users if u.op == "ReduceSum"):
            continue
        start, inputs, shape = pooled
        chain = [node for _, node in (producer[name] for name in _chain_values(producer, dy, start))]
        if any(len(readers.get(node.outputs[0], [])) != 1 for node in chain[:-1]) or not _smaller(graph, dy, users):
            continue
        for user in users:  # each where it was, after its other inputs
            made: list[Node] = []
            if user.op == "ReduceSum":
                param = trained[user.outputs[0]]
                blocks[param] = []
                for first, count in _pieces(shape[1]):
                    rows = _pooled_rows(graph, inputs, shape, f"{user.name}_{first}", channels=(first, count))
                    block = graph.add_value(graph.fresh("bias_grad_block"), (count,))
                    inputs_of_block = (rows.outputs[0], *user.inputs[1:])
                    made += [rows, replace(user, inputs=inputs_of_block, outputs=(block,), name=f"{user.name}_{first}")]
                    blocks[param].append((block, first))
            else:
                made += _grad_x_rows(graph, user, inputs, shape)
            cut[position[id(user)]] = made
        gone.update(id(node) for node in (*chain, *users))
    out: list[Node] = []
    for i, node in enumerate(nodes):
        out += cut.get(i, []) + ([] if id(node) in gone else [node])
    return out, blocks


def _smaller(graph: Graph, dy: str, users: list[Node]) -> bool:
    """Whether the blocks take fewer bytes at once than the whole dY does: a block of its rows, the
    input gradient's blocks and the whole input gradient they are joined into, against dY and the
    input gradient, unless that takes over dY's bytes (ConvGradXQuantized's, ConvGradXInPlace's)."""
    grad_x = [u for u in users if u.op != "ReduceSum"]
    if not grad_x:
        return True
    dy_size = graph.values[dy].size
    dx_size = sum(graph.values[u.outputs[0]].size for u in grad_x)
    in_place = all(u.op != "ConvGradX" for u in grad_x) and dx_size <= dy_size
    pieces = len(_pieces(graph.shape(dy)[2]))
    return 2 * dx_size + (dy_size + dx_size) / pieces < dy_size + (0 if in_place else dx_size)


def _pieces(total: int) -> list[tuple[int, int]]:
    """(first, count) of at most _BLOCKS pieces of `total` channels or rows, all as long but the last."""
    step = -(-total // _BLOCKS)
    return [(first, min(step, total - first)) for first in range(0, total, step)]


def _chain_values(producer: dict, dy: str, start: int) -> list[str]:
    """The values from the pool's gradient to dY, which _pooled_dy found made one from the other."""
    values = [dy]
    while producer[values[0]][0] != start:
        values.insert(0, producer[values[0]][1].inputs[0])
    return values


def _bias_sum(graph: Graph, node: Node, trained: dict[str, str], readers: dict[str, list[Node]]) -> bool:
    """Whether `node` sums dY over every axis but the channels' into a trained parameter's gradient
    that nothing else reads (a fused update reads it by blocks)."""
    if node.op != "ReduceSum" or node.outputs[0] not in trained or readers.get(node.outputs[0]):
        return False
    rank = len(graph.shape(node.inputs[0]))
    axes = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    every_but_channels = axes is not None and sorted(int(a) % rank for a in axes) == [0, *range(2, rank)]
    return every_but_channels and not node.attr("keepdims", 1) and node.attr("noop_with_empty_axes", 0) == 0


def _pointwise_grad_x(node: Node) -> bool:
    if node.op not in _POINTWISE_GRAD_X or node.domain != ET_DOMAIN:
        return False
    if node.op == "ConvGradXQuantized":
        return True
    one = set(node.attr("kernel_shape")) | set(node.attr("strides")) | set(node.attr("dilations"))
    return one == {1} and not any(node.attr("pads")) and int(node.attr("group")) == 1


def _pooled_rows(graph: Graph, inputs: tuple[str, ...], shape, name: str, channels, rows=None) -> Node:
    """PooledGradRows of dY's `channels` (first, count) and `rows` (first, count; default all)."""
    height = rows[1] if rows else shape[2]
    value = graph.add_value(graph.fresh("pooled_grad_rows"), (shape[0], channels[1], height, *shape[3:]))
    attrs = {"shape": list(shape), "channels": list(channels), **({"rows": list(rows)} if rows else {})}
    return Node("PooledGradRows", inputs, (value,), attrs, name, ET_DOMAIN)


def _grad_x_rows(graph: Graph, node: Node, inputs: tuple[str, ...], shape) -> list[Node]:
    """Pointwise input gradient `node` a block of dY's rows at a time, from PooledGradRows, joined."""
    made, parts = [], []
    for top, height in _pieces(shape[2]):
        name = f"{node.name}_rows_{top}"
        block = _pooled_rows(graph, inputs, shape, name, channels=(0, shape[1]), rows=(top, height))
        dx_shape = [*node.attr("shape")[:2], height, *node.attr("shape")[3:]]
        attrs = {**node.attrs, "shape": dx_shape}
        part = Node(node.op, (block.outputs[0], *node.inputs[1:]), (), attrs, "", node.domain)
        shape_of = require(part).shape
        assert shape_of is not None  # our own op's
        outputs = tuple(graph.add_value(graph.fresh("grad_x_rows"), s) for s in shape_of(graph, part))
        made += [block, replace(part, outputs=outputs, name=name)]
        parts.append(outputs[0])
    return made + [Node("JoinRows", tuple(parts), node.outputs[:1], {}, f"{node.name}_join", ET_DOMAIN)]


def _weight_block(graph: Graph, made: Node, chain: list[Node], first: int, count: int, pooled) -> list[Node]:
    """The nodes of one block of output channels of weight gradient `made`, its chain after it: from
    dY's rows [first, first + count) where `pooled` (_pooled) makes them, else from the whole dY."""
    shape = (count, *graph.shape(made.outputs[0])[1:])
    out = graph.add_value(graph.fresh("weight_grad_block"), shape)
    nodes, inputs, attrs = [], made.inputs, {**made.attrs, "channels": [first, count]}
    if pooled is not None:
        _, pool_inputs, dy_shape = pooled
        rows = _pooled_rows(graph, pool_inputs, dy_shape, f"{made.name}_rows_{first}", channels=(first, count))
        nodes.append(rows)
        inputs, attrs = (rows.outputs[0], *made.inputs[1:]), {**made.attrs, "channels": [0, count]}
    nodes.append(Node(made.op, inputs, (out,), attrs, f"{made.name}_{first}", made.domain))
    for node in chain:
        before, out = out, graph.add_value(graph.fresh("weight_grad_block"), shape)
        attrs = {**node.attrs, "first": first}
        nodes.append(Node(node.op, (before, *node.inputs[1:]), (out,), attrs, f"{node.name}_{first}", node.domain))
    return nodes


def _pooled(graph: Graph, producer: dict, made: Node) -> tuple[int, tuple[str, ...], tuple[int, ...]] | None:
    """Where weight gradient `made` (of one group) reads a dY that _pooled_dy makes: that."""
    return _pooled_dy(graph, producer, made.inputs[0]) if int(made.attr("group")) == 1 else None


def _pooled_dy(graph: Graph, producer: dict, dy: str) -> tuple[int, tuple[str, ...], tuple[int, ...]] | None:
    """Where AveragePoolGrad of one window over the whole plane, per-tensor DequantizeLinearGrad and
    QuantizeLinearGrad and an optional ReluGrad make `dy` of a pooled gradient (an int8 layer before
    a global average pool): (the AveragePoolGrad's index, PooledGradRows' inputs, dY's shape); else
    None."""

    def made_by(name: str) -> Node | None:
        return producer[name][1] if name in producer else None

    node, chain = made_by(dy), []
    relu = node if node is not None and node.op == "ReluGrad" else None
    if relu is not None:
        node = made_by(relu.inputs[0])
    for op in ("QuantizeLinearGrad", "DequantizeLinearGrad", "AveragePoolGrad"):
        if node is None or node.op != op:
            return None
        chain.append(node)
        node = made_by(node.inputs[0])
    quantize, dequantize, pool = chain
    shape = graph.shape(dy)
    whole = tuple(pool.attr("kernel_shape")) == tuple(shape[2:]) and not any(pool.attr("pads", [0]))
    per_tensor = all(graph.values[n.inputs[-1]].size == 1 for n in (quantize, dequantize))
    pooled_size = graph.values[pool.inputs[0]].size == shape[0] * shape[1]
    if not (whole and per_tensor and pooled_size):
        return None
    masks = (quantize.inputs[1], *(relu.inputs[1:] if relu else ()))
    inputs = (pool.inputs[0], masks[0], dequantize.inputs[1], quantize.inputs[2], *masks[1:])
    return producer[pool.outputs[0]][0], inputs, shape


def _block_rows(channels: int, inner: int) -> int | None:
    """Output channels per block of a weight gradient with `inner` elements per channel: the fewest
    that cut it into at most _BLOCKS blocks and start each block's mask bits at a word (a multiple
    of 32 elements); None where that is one block."""
    whole_words = 32 // math.gcd(inner, 32)
    rows = math.ceil(math.ceil(channels / _BLOCKS) / whole_words) * whole_words
    return rows if rows < channels else None


def _along_first_axis(graph: Graph, node: Node) -> bool:
    """Whether a straight-through node's scale is per tensor or per output channel (axis 0)."""
    return graph.values[node.inputs[-1]].size == 1 or node.attr("axis", 1) % len(graph.shape(node.inputs[0])) == 0


def _dequantized(graph: Graph, x: str, producer, keep) -> Node | None:
    """The DequantizeLinear that makes `x`, per tensor from int8 or uint8 bytes."""
    dq = producer.get(x)
    if dq is None or dq.op != "DequantizeLinear" or x in keep:
        return None
    # held in a byte (the model's outputs are int32_t in the C)
    return dq if _per_tensor(graph, dq) and graph.c_type(dq.inputs[0]) in ("int8_t", "uint8_t") else None


def _layer(graph: Graph, layer: Node, producer, readers, quantizers, keep) -> tuple[Node, list[Node], list[str]] | None:
    """The int8 layer for Conv or Gemm `layer`, the nodes it replaces and the masks they made (the
    layer's own first); None where it does not apply."""
    x, w, bias = (tuple(layer.inputs) + ("",))[:3]
    dq = _dequantized(graph, x, producer, keep)
    if dq is None:
        return None
    geometry = _geometry(graph, layer)
    weight = _weight(graph, layer, producer, quantizers)
    if geometry is None or weight is None:
        return None
    (w_q, w_scale), taps = weight, int(np.prod(graph.shape(w)[1:], dtype=np.int64))
    y = layer.outputs[0]
    act, act_mask, attrs = _activation(graph, readers.get(y, []))
    value = act.outputs[0] if act else y
    out = _quantized_output(graph, readers.get(value, []), value, relu=attrs["activation"] == "Relu")
    if out is None or taps > _MAX_TAPS or {y, value} & keep:
        return None
    q, inside, relu_mask = out
    masks = [m for m in (inside, relu_mask or act_mask) if m is not None]
    patch = graph.add_value(graph.fresh("patch"), (taps,), np.int16)
    # One mask serves both gradients: ReluGrad passes what QuantizeLinearGrad (its only input) passed
    # where the activation passed it, so each may apply both tests at once.
    node = Node(
        "QuantizedConv",
        (dq.inputs[0], dq.inputs[1], zero_point_of(dq) or "", w_q, w_scale, bias, q.inputs[1], zero_point_of(q) or ""),
        (q.outputs[0], patch, *(m.outputs[0] for m in masks[:1])),
        {**geometry, **attrs, "inside": int(inside is not None), "active": int(bool(relu_mask or act_mask))},
        layer.name,
        ET_DOMAIN,
    )
    replaced = [n for n in (layer, act, q, *masks) if n is not None]
    return node, replaced, [m.outputs[0] for m in masks]


def _activation(graph: Graph, after: list[Node]) -> tuple[Node | None, Node | None, dict]:
    """(the Relu or Clip that alone reads the layer's output, the ClipMask a Clip's gradient reads of
    that output, QuantizedConv's activation attributes); no activation otherwise (the caller then
    finds whether a QuantizeLinear alone reads the output)."""
    ops = sorted(n.op for n in after)
    if ops == ["Relu"]:
        return after[0], None, {"activation": "Relu", "low": 0.0, "high": 0.0}  # bounds unused
    if ops in (["Clip"], ["Clip", "ClipMask"]):
        clip = next(n for n in after if n.op == "Clip")
        low, high = Clip.bounds(KernelCtx(graph), clip)
        mask = next((n for n in after if n.op == "ClipMask"), None)
        if mask is None or (mask.attr("min"), mask.attr("max")) == (low, high):
            return clip, mask, {"activation": "Clip", "low": low, "high": high}
    return None, None, {"activation": "", "low": 0.0, "high": 0.0}


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


def _weight(graph: Graph, layer: Node, producer, quantizers) -> tuple[str, str] | None:
    """(int8 weight, its scale) of the layer, symmetric with one scale per output channel or per
    tensor; None where the weight is not such."""
    w = layer.inputs[1]
    node = producer.get(w)
    if node is not None and node.op == "DequantizeLinear":
        quantized = node.inputs[0]
    elif w in quantizers:
        node, quantized = quantizers[w], quantized_constant(graph, quantizers[w])
    else:
        return None
    zero = zero_point_of(node)
    if graph.values[quantized].dtype != np.int8 or (zero and np.any(graph.constants.get(zero, 1) != 0)):
        return None
    axis = node.attr("axis", 1) % len(graph.shape(w))
    if not _per_tensor(graph, node) and axis != 0:
        return None
    return quantized, node.inputs[1]


def quantized_constant(graph: Graph, q: Node) -> str:
    """The integers QuantizeLinear `q` makes of its constant input (a frozen weight), as a constant:
    computed once, for the frozen weight's fold and every function's int8 layer that reads them."""
    name = _values_name(q)
    if name not in graph.constants:
        graph.constants[name] = _quantized(graph, q)
        graph.add_value(name, graph.constants[name].shape, graph.constants[name].dtype)
    return name


def _quantized(graph: Graph, q: Node) -> np.ndarray:
    """What QuantizeLinear `q` makes of its constant or parameter input, as onnx.reference computes it."""
    feeds = {n: graph.params[n] if n in graph.params else graph.constants[n] for n in q.inputs if n}
    node = onnx.helper.make_node("QuantizeLinear", q.inputs, ["q"], **dict(q.attrs))
    (values,) = run_node(node, feeds, max(graph.opset, QDQ_OPSET))
    return np.asarray(values)


def _values_name(q: Node) -> str:
    return f"{q.outputs[0]}_values"


def compiled_weights(quantizers: dict[str, Node], functions: list[list[Node]]) -> list[str]:
    """The frozen weights that some function reads as integers computed at compile time (an int8
    layer's weights, quantized_constant's): a change to their float values, which the checkpoint
    and the API hold, would not reach those functions, so they may not change."""
    read = {name for nodes in functions for n in nodes for name in n.inputs}
    return [weight for weight, q in quantizers.items() if _values_name(q) in read]


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


@dataclass(frozen=True)
class IntegerWeight:
    """A trained weight stored as its int8 values alone (quantization-aware scaling, QAS): `values`
    is the int8 tensor the functions read, `scale` its constant scale, one per `inner` elements (per
    output channel, or one for the whole weight). The float weight is scale * values."""

    values: str
    scale: str
    inner: int
    quantizer: Node  # the QuantizeLinear the functions no longer run (the training model keeps it)
    integers: np.ndarray  # the initial int8 values, flat: what QuantizeLinear made of the weight


def integer_weights(
    graph: Graph, trainable: list[str], grads: dict[str, str | None], functions: list[list[Node]]
) -> tuple[list[list[Node]], dict[str, str | None], dict[str, IntegerWeight]]:
    """The functions and gradients with each trained weight that every function reads only through
    one symmetric int8 QuantizeLinear (a quantized model's trained weight), and whose values all
    quantize inside the range (_inside), stored as those integers:
    the QuantizeLinear goes, and the functions read the stored values in place of what it made. The
    weight's gradient is then its straight-through chain's input, the gradient of the dequantized
    weight (the chain's mask would pass every element: stored values are on the grid, in range),
    which the update (a "_q8" kernel, runtime_c/et_qas.h) applies as the float optimizer does to
    scale * values and rounds back to the grid stochastically. The weight's float value becomes the
    dequantized integers, as the checkpoint and the API hold it."""
    producer = {out: node for nodes in functions for node in nodes for out in node.outputs}
    read = [name for nodes in functions for node in nodes for name in node.inputs]
    stored: dict[str, IntegerWeight] = {}
    gone: set[int] = set()
    grads = dict(grads)
    for weight in trainable:
        readers = [n for nodes in functions for n in nodes if weight in n.inputs]
        quantizers = {_quantization(n) for n in readers if n.op == "QuantizeLinear"}
        if len(quantizers) != 1 or not all(n.op in ("QuantizeLinear", "QuantizeLinearMask") for n in readers):
            continue
        q = next(n for n in readers if n.op == "QuantizeLinear")
        chain = _straight_through(producer, grads.get(weight))
        if chain is None or read.count(chain[0].outputs[0]) != 1 or not _symmetric_int8(graph, q):
            continue
        if not _inside(graph, weight, q):
            continue
        scale = q.inputs[1]
        inner = graph.values[weight].size // graph.values[scale].size
        integers = _quantized(graph, q).ravel().astype(np.int8)
        stored[weight] = IntegerWeight(q.outputs[0], scale, inner, q, integers)
        scales = np.repeat(graph.constants[scale].ravel().astype(np.float32), inner)
        graph.params[weight] = (scales * integers.astype(np.float32)).reshape(graph.params[weight].shape)
        grads[weight] = chain[0].inputs[0]
        gone.update(id(n) for n in (*readers, *chain))
    return [[n for n in nodes if id(n) not in gone] for nodes in functions], grads, stored


def _quantization(q: Node) -> tuple:
    """What makes two QuantizeLinear nodes of a weight the same quantization."""
    return (*q.inputs, q.outputs[0], tuple(sorted(q.attrs.items(), key=str)))


def _straight_through(producer: dict[str, Node], grad: str | None) -> tuple[Node, Node] | None:
    """(DequantizeLinearGrad, QuantizeLinearGrad): the chain that makes `grad`, else None."""
    last = producer.get(grad or "")
    if last is None or last.op != "QuantizeLinearGrad":
        return None
    first = producer.get(last.inputs[0])
    return (first, last) if first is not None and first.op == "DequantizeLinearGrad" else None


def _inside(graph: Graph, weight: str, q: Node) -> bool:
    """Whether every value of `weight` quantizes inside int8's range, as QuantizeLinear rounds it and
    as its gradient's mask tests it (QuantizeLinearMask): then its integers give the same forward
    pass and the same gradient, and storing them loses nothing. A weight with values past the range
    (a PyTorch QAT export's largest of each channel, at 127.5 steps) keeps its float32 master, whose
    gradient stops there."""
    values = graph.params[weight].astype(np.float32)
    scale = graph.constants[q.inputs[1]].astype(np.float32)
    if scale.size > 1:
        scale = scale.reshape((-1,) + (1,) * (values.ndim - 1))
    steps = (values / scale, values * (np.float32(1) / scale))
    return all(np.all((np.rint(v) >= -128) & (np.rint(v) <= 127)) for v in steps)


def _symmetric_int8(graph: Graph, q: Node) -> bool:
    """Whether QuantizeLinear `q` makes int8 with a constant scale per tensor or per output channel
    and a zero point of 0 (the int8 layers' weights, _weight's test)."""
    zero = zero_point_of(q)
    if graph.values[q.outputs[0]].dtype != np.int8 or q.inputs[1] not in graph.constants:
        return False
    if zero and (zero not in graph.constants or np.any(graph.constants[zero] != 0)):
        return False
    return _per_tensor(graph, q) or q.attr("axis", 1) % len(graph.shape(q.inputs[0])) == 0
