"""Recomputation (gradient checkpointing): an activation the backward pass reads is computed again
there, from activations kept for backward anyway, so it need not stay alive from the forward pass
to the backward one."""

from __future__ import annotations

from ..ir import Graph, Node
from ..ops import require


def _cheap(graph: Graph, node: Node) -> bool:
    """Elementwise ops, batch normalization, dequantization and depthwise convolution: a few
    operations per element, against a full convolution's or matrix product's many."""
    if require(node).inplace or node.op in ("BatchNormalizationTraining", "DequantizeLinear"):
        return True
    return node.op == "Conv" and node.attr("group", 1) > 1 and node.attr("group") == graph.shape(node.inputs[0])[1]


def _rewired(node: Node, inputs: tuple[str, ...], outputs: tuple[str, ...] | None = None) -> Node:
    """`node` reading `inputs` (and writing `outputs`, when given) instead of its own."""
    return Node(node.op, inputs, node.outputs if outputs is None else outputs, node.attrs, node.name, node.domain)


def recompute(
    graph: Graph, nodes: list[Node], backward_start: int, keep_every: int = 0, only: frozenset[str] | None = None
) -> list[Node]:
    """`nodes` (forward, then backward from `backward_start`) with cheap activations recomputed.
    keep_every=K > 0 recomputes dear ones too (convolutions, matrix products), keeping only every
    K-th of those the backward pass reads as a checkpoint to recompute from: RAM for time. only:
    the ops counted cheap, instead of _cheap's."""
    forward, backward = nodes[:backward_start], list(nodes[backward_start:])

    def cheap(graph: Graph, node: Node) -> bool:
        return node.op in only if only is not None else _cheap(graph, node)

    producer = {out: node for node in forward for out in node.outputs}
    read_back = {name for node in backward for name in node.inputs}
    # Kept: secondary outputs (saved statistics), residuals (made to be kept), and dear results
    # (every K-th one with keep_every).
    dear = [
        node.outputs[0]
        for node in forward
        if node.outputs[0] in read_back and not cheap(graph, node) and not require(node).residual
    ]
    kept = {
        name
        for name in read_back
        if name in producer and (producer[name].outputs[0] != name or require(producer[name]).residual)
    }
    kept |= set(dear[keep_every - 1 :: keep_every] if keep_every else dear)
    if not keep_every:  # a quantized tensor stays in its own width, to dequantize from again
        kept |= {node.outputs[0] for node in forward if node.op == "QuantizeLinear"}

    def segment(value: str) -> list[Node] | None:
        """The forward nodes that recompute `value` from kept values, in order; None if there are none."""
        if value not in producer or value in kept:
            return []
        node = producer[value]
        if not (keep_every or cheap(graph, node)) or node.outputs[0] != value:
            return None
        chain: list[Node] = []
        for name in node.inputs:
            sub = segment(name) if name else []
            if sub is None:
                return None
            chain += [n for n in sub if n not in chain]
        return chain + [node]

    out = list(forward)
    for index, node in enumerate(backward):
        chain_nodes: list[Node] = []
        for value in dict.fromkeys(node.inputs):
            chain = segment(value)
            if not chain:
                continue
            renamed: dict[str, str] = {}
            for original in chain:
                outputs = tuple(
                    graph.add_value(graph.fresh("recomputed"), graph.shape(o), graph.values[o].dtype) if o else ""
                    for o in original.outputs
                )
                renamed.update(zip(original.outputs, outputs))
                chain_nodes.append(_rewired(original, tuple(renamed.get(i, i) for i in original.inputs), outputs))
            for later in range(index, len(backward)):  # every later reader takes the recomputed value
                b = backward[later]
                if value in b.inputs:
                    backward[later] = _rewired(b, tuple(renamed[value] if i == value else i for i in b.inputs))
        node = backward[index]
        if not chain_nodes:
            out.append(node)
            continue
        # The recomputation runs, once the node's other inputs exist, where the fewest gradient
        # bytes are live (a convolution's weight gradient before its input gradient is made). Last
        # of all, an input the node may overwrite (its op's inplace slots) and nothing later reads
        # gives it its bytes.
        made = {name for n in chain_nodes for name in n.outputs}
        at = max([i for i, n in enumerate(out) if set(n.outputs) & (set(node.inputs) - made)] + [len(forward) - 1])
        read_later = {name for n in backward[index:] for name in n.inputs}
        read_after = {name for n in backward[index + 1 :] for name in n.inputs}
        slots = [node.inputs[s] for s in require(node).inplace if s < len(node.inputs)]
        given = max((graph.values[x].size for x in slots if x and x not in read_after and x not in made), default=0)

        def live(p: int, read_later: set[str] = read_later, given: int = given) -> int:
            read = read_later | {name for n in out[p:] for name in n.inputs}
            values = sum(graph.values[v].size for n in out[len(forward) : p] for v in n.outputs if v in read)
            return values - (given if p == len(out) else 0)

        best = min(range(at + 1, len(out) + 1), key=lambda p: (live(p), -p))
        out[best:best] = chain_nodes + [node]
    return out
