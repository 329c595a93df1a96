"""Row bands: the forward ops a function starts with whose results nothing reads but the last ones
(the frozen layers in front of the first trained one; in eval_step and infer, every convolution up
to the pooling) run a band of output rows at a time, so their widest activations never exist whole:
MCUNetV2's patch-based inference, along the rows alone. Each band computes, layer by layer, the
rows its output rows need (a window's rows overlap the next band's, and those are computed in
both), and JoinRows puts the last results together whole.

The bands give the same bits as the whole tensors: an output element's sum does not depend on the
rows around it, exactly for the integer layers, and for the float kernels because each keeps one
order of sums whatever its input's size (runtime_c's references). Where the split goes and how many
rows a band has is chosen by the bytes live at once, estimated per sample, at the largest batch a C
is compiled for; its other batches' compiles follow that choice (chosen), so their calls agree. No
split is made where none lowers that peak."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from ..ir import ET_DOMAIN, PER_WORD, Graph, Node
from ..ops import require
from ..ops.conv import Window, window

# Ops each of whose output rows reads the same rows of its inputs' planes, and nothing else of them.
_ROWWISE = frozenset(
    {
        "Abs",
        "Add",
        "BatchNormalization",
        "Clip",
        "DequantizeLinear",
        "Div",
        "Elu",
        "Erf",
        "Exp",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "LeakyRelu",
        "Max",
        "Min",
        "Mul",
        "Neg",
        "PRelu",
        "QuantizeLinear",
        "Relu",
        "Selu",
        "Sigmoid",
        "Softplus",
        "Sub",
        "Tanh",
    }
)
_POOLS = ("MaxPool", "AveragePool")
# Row-wise ops whose inputs after the first are per channel (axis 1), not broadcast as numpy's are.
_PER_CHANNEL = ("QuantizeLinear", "DequantizeLinear", "BatchNormalization")

Rows = tuple[int, int]  # [first, end)


class _NoBand(Exception):
    """A band's layer would read no row of its input (a window inside the padding alone)."""


def _windowed(node: Node) -> bool:
    if node.domain:
        return node.op == "QuantizedConv" and node.domain == ET_DOMAIN
    return node.op == "Conv" or node.op in _POOLS


def _window(graph: Graph, node: Node) -> Window:
    xs, ys = graph.shape(node.inputs[0]), graph.shape(node.outputs[0])
    kernel = graph.shape(node.inputs[1])[2:] if node.op == "Conv" else node.attr("kernel_shape")
    return window(node, xs[2:], ys[2:], kernel)


def _row_inputs(graph: Graph, node: Node) -> list[int] | None:
    """The input slots whose rows the node reads (a window's input, or those of an elementwise op
    as tall as its output); None where it cannot run a band of rows at a time. Rows are the first
    spatial axis of an output of one or two (N, C, H[, W])."""
    y = graph.shape(node.outputs[0])
    if len(y) not in (3, 4) or y[2] < 2:
        return None
    if _windowed(node):
        one_result = len(node.outputs) == (2 if node.op == "QuantizedConv" else 1)  # and its workspace
        if not one_result or node.attr("ceil_mode", 0) or len(graph.shape(node.inputs[0])) != len(y):
            return None
        return [0]
    if node.op not in _ROWWISE or node.domain or len(node.outputs) != 1 or node.attr("training_mode", 0):
        return None
    per_axis = node.op in ("QuantizeLinear", "DequantizeLinear") and graph.values[node.inputs[1]].size > 1
    if per_axis and node.attr("axis", 1) % len(y) != 1:
        return None
    if node.op in _PER_CHANNEL:
        return [0]
    slots = []
    for slot, name in enumerate(node.inputs):
        shape = graph.shape(name) if name else ()
        rows = 2 - (len(y) - len(shape))  # the rows axis, where the input broadcasts against Y
        if len(shape) == len(y) and shape[2] == y[2]:
            slots.append(slot)
        elif rows >= 0 and shape[rows] != 1:
            return None
    return slots


def _region(graph: Graph, nodes: list[Node], end: int) -> tuple[list[int], list[list[int]]]:
    """The indices of the nodes, from the first on, that can run a band at a time (each reading the
    function's inputs or an earlier one's results), and the input slots each reads rows of. Nodes
    that read neither (a weight's dequantization) are passed over: they run before the bands."""
    made: set[str] = set()
    data = set(graph.inputs)
    region: list[int] = []
    slots: list[list[int]] = []
    for index, node in enumerate(nodes[:end]):
        if not any(name in made or name in data for name in node.inputs):
            continue
        rows = _row_inputs(graph, node)
        if rows is None or any(name in made for s, name in enumerate(node.inputs) if s not in rows):
            break
        region.append(index)
        slots.append(rows)
        made.update(node.outputs)
    return region, slots


def _input_rows(graph: Graph, node: Node, rows: Rows) -> tuple[Rows, int, int]:
    """The input rows a band of output `rows` reads, and the padding rows above and below them."""
    geo = _window(graph, node)
    height = graph.shape(node.inputs[0])[2]
    reach = (geo.kernel[0] - 1) * geo.dilations[0] + 1
    first = rows[0] * geo.strides[0] - geo.begin[0]
    end = (rows[1] - 1) * geo.strides[0] - geo.begin[0] + reach
    read = (max(first, 0), min(end, height))
    if read[0] >= read[1]:
        raise _NoBand
    return read, read[0] - first, end - read[1]


def _banded(graph: Graph, node: Node, rows: Rows) -> dict[str, Any]:
    """The node's attributes for a band of output rows: the padding it meets at the top and the
    bottom of the whole input, none between bands."""
    geo = _window(graph, node)
    _, above, below = _input_rows(graph, node, rows)
    attrs = {k: v for k, v in node.attrs.items() if k != "auto_pad"}
    attrs["pads"] = [above, *geo.begin[1:], below, *geo.end[1:]]
    return attrs


def _with_rows(shape: tuple[int, ...], rows: Rows) -> tuple[int, ...]:
    return (*shape[:2], rows[1] - rows[0], *shape[3:])


class _Bands:
    """The nodes of a region, split into bands of its results' rows: band() gives one band's
    nodes, the shapes of the values they make, and the band's part of each result; split() every
    band and the joins."""

    def __init__(self, graph: Graph, nodes: list[Node], slots: list[list[int]], results: list[str], tag: str):
        """tag: what the names of the values the bands make start with, after their whole value's."""
        self.graph, self.nodes, self.slots, self.results, self.tag = graph, nodes, slots, results, tag

    def band(self, rows: Rows, tag: str) -> tuple[list[Node], dict[str, tuple[tuple[int, ...], str]], list[str]]:
        graph = self.graph
        need: dict[str, Rows] = dict.fromkeys(self.results, rows)
        reads: dict[tuple[int, int], Rows] = {}
        for k in reversed(range(len(self.nodes))):
            node = self.nodes[k]
            made = need.get(node.outputs[0])
            if made is None:
                continue
            for slot in self.slots[k]:
                read = _input_rows(graph, node, made)[0] if _windowed(node) else made
                reads[k, slot] = read
                had = need.get(node.inputs[slot], read)
                need[node.inputs[slot]] = (min(had[0], read[0]), max(had[1], read[1]))
        steps: list[Node] = []
        shapes: dict[str, tuple[tuple[int, ...], str]] = {}  # a value the band makes -> its shape, whose part
        named: dict[str, str] = {}  # a value -> its rows need[value] in this band

        def part(name: str, want: Rows) -> str:
            """The band's tensor of rows `want` of `name`: its band's own, or those rows of it."""
            source, first = (named[name], want[0] - need[name][0]) if name in named else (name, want[0])
            if name in named and need[name] == want:
                return source
            part_name = f"{name}:{tag}:{want[0]}-{want[1]}"
            if part_name not in shapes:
                shapes[part_name] = (_with_rows(graph.shape(name), want), name)
                attrs = {"first": first, "count": want[1] - want[0]}
                steps.append(Node("Rows", (source,), (part_name,), attrs, part_name, ET_DOMAIN))
            return part_name

        for k, node in enumerate(self.nodes):
            made = need.get(node.outputs[0])
            if made is None:
                continue
            inputs = list(node.inputs)
            for slot in self.slots[k]:
                inputs[slot] = part(node.inputs[slot], reads[k, slot])
            outputs = tuple(f"{name}:{tag}" for name in node.outputs)
            shapes[outputs[0]] = (_with_rows(graph.shape(node.outputs[0]), made), node.outputs[0])
            shapes.update((o, (graph.shape(name), name)) for o, name in zip(outputs[1:], node.outputs[1:]))
            attrs = _banded(graph, node, made) if _windowed(node) else dict(node.attrs)
            steps.append(Node(node.op, tuple(inputs), outputs, attrs, f"{node.name}:{tag}", node.domain))
            named[node.outputs[0]] = outputs[0]
        return steps, shapes, [part(name, rows) for name in self.results]

    def split(self, height: int) -> tuple[list[Node], dict[str, tuple[tuple[int, ...], str]]]:
        """Every band of `height` rows (the last one what is left), then the joins of the results."""
        steps: list[Node] = []
        shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        parts: list[list[str]] = []
        total = self.graph.shape(self.results[0])[2]
        for index, first in enumerate(range(0, total, height)):
            band, made, pieces = self.band((first, min(first + height, total)), f"{self.tag}{index}")
            steps += band
            shapes.update(made)
            parts.append(pieces)
        for k, name in enumerate(self.results):
            steps.append(Node("JoinRows", tuple(p[k] for p in parts), (name,), {}, f"{name}:join", ET_DOMAIN))
        return steps, shapes


def _results(region: list[int], nodes: list[Node], keep: set[str]) -> list[list[str]]:
    """For each count j of region nodes, the values the first j make that something after them
    reads (a node outside them, or the function's caller)."""
    position = {index: j for j, index in enumerate(region)}
    last_reader: dict[str, int] = {}  # a value -> the last region position reading it (len: outside)
    for index, node in enumerate(nodes):
        for name in node.inputs:
            last_reader[name] = max(last_reader.get(name, -1), position.get(index, len(region)))
    for name in keep:
        last_reader[name] = len(region)
    out = []
    for j in range(1, len(region) + 1):
        made = [name for index in region[:j] for name in nodes[index].outputs]
        out.append([name for name in made if last_reader.get(name, -1) >= j])
    return out


def _profile(
    steps: list[Node], size: Callable[[str], float], c_type: Callable[[str], str], read_after: set[str]
) -> list[float]:
    """Bytes live at each step: a value from the step that makes it to its last reader (to the end
    for those read after the steps); one that an op writes over a dying input of its C type and no
    smaller (its `inplace` slots, as memory.plan reuses them) in that input's bytes."""
    last: dict[str, int] = {}
    for i, node in enumerate(steps):
        last.update((name, i) for name in node.inputs)
    last.update((name, len(steps)) for name in read_after)
    owner: dict[str, str] = {}  # a value -> the value whose bytes it takes over
    for i, node in enumerate(steps):
        for slot in require(node).inplace:
            x = node.inputs[slot] if slot < len(node.inputs) else ""
            y = node.outputs[0]
            dying = x in last and last[x] == i and x not in read_after
            if dying and c_type(x) == c_type(y) and size(y) <= size(x):
                owner[y] = owner.get(x, x)
                break
    end: dict[str, int] = {}
    for i, node in enumerate(steps):
        for name in node.outputs:
            root = owner.get(name, name)
            end[root] = max(end.get(root, i), last.get(name, i))
    change = [0.0] * (len(steps) + 2)
    for i, node in enumerate(steps):
        for name in node.outputs:
            if name not in owner:
                change[i] += size(name)
                change[end[name] + 1] -= size(name)
    live, total = [], 0.0
    for delta in change[: len(steps)]:
        total += delta
        live.append(total)
    return live


class Banding(NamedTuple):
    nodes: list[Node]
    ops: int  # how many of the nodes the function starts with run in bands
    height: int  # rows of their last results per band
    bands: int
    peak: float  # the most bytes per sample live at once, as estimated


def row_bands(
    graph: Graph,
    nodes: list[Node],
    end: int,
    keep: set[str],
    floor: float = 0.0,
    chosen: tuple[int, int] | None = None,
) -> Banding:
    """`nodes` with the region the forward pass (nodes[:end]) starts with run in row bands, where
    that lowers the most bytes live at once, to `floor` at least (what another function sharing
    the arena needs): of the splits that reach the lowest peak, the one that computes least.
    keep: the values the function returns. chosen: (ops, height) to split at, as another
    batch's compile of the same function chose (the estimate, per sample, still weighs a batch's
    masks and workspaces a little differently)."""
    batch = graph.shape(graph.inputs[0])[0] if graph.inputs and graph.shape(graph.inputs[0]) else 1
    made: dict[str, tuple[tuple[int, ...], str]] = {}  # a band's value -> its shape, the value it is part of

    def c_type(name: str) -> str:
        return graph.c_type(made[name][1] if name in made else name)

    def size(name: str) -> float:
        shape = made[name][0] if name in made else graph.shape(name)
        per_sample = batch if shape and shape[0] == batch else 1
        return math.prod(shape) * 4 / PER_WORD[c_type(name)] / per_sample

    whole = _profile(nodes, size, c_type, keep)
    region, slots = _region(graph, nodes, end)
    if not region or chosen == (0, 0):
        return Banding(nodes, 0, 0, 0, max(whole, default=0.0))
    tag = graph.fresh("band")  # the functions share the graph, and each its own bands
    firsts = {nodes[i].outputs[0] for i in region}
    best: tuple[float, float, int, int] = (max(max(whole), floor), 0.0, *(chosen or (0, 0)))
    for j, results in enumerate(_results(region, nodes, keep) if chosen is None else [], start=1):
        last = region[j - 1]
        heights = {graph.shape(name)[2] for name in results}
        # every result a layer's own (not a workspace), of the C type of its bands (not an output)
        if len(heights) != 1 or not set(results) <= firsts - set(graph.outputs):
            continue
        after = max(max(whole[last + 1 :], default=0.0), floor)
        if after > best[0]:
            continue
        banded = set(region[:j])
        before = [n for i, n in enumerate(nodes[:last]) if i not in banded]
        read_after = {name for n in nodes[last + 1 :] for name in n.inputs} | keep
        bands = _Bands(graph, [nodes[i] for i in region[:j]], slots[:j], results, tag)
        (total,) = heights
        for height in sorted({-(-total // m) for m in range(2, total + 1)}, reverse=True):
            try:
                steps, shapes = bands.split(height)
            except _NoBand:
                continue
            made.clear()
            made.update(shapes)
            peak = max(max(_profile(before + steps, size, c_type, read_after)), after)
            work = sum(size(name) for step in steps for name in step.outputs[:1])
            if (peak, work) < best[:2]:
                best = (peak, work, j, height)
    peak, _, j, height = best
    if not j:
        return Banding(nodes, 0, 0, 0, peak)
    last, banded = region[j - 1], set(region[:j])
    results = _results(region, nodes, keep)[j - 1]
    steps, made = _Bands(graph, [nodes[i] for i in region[:j]], slots[:j], results, tag).split(height)
    for name, (shape, whole_value) in made.items():
        graph.add_value(name, shape, graph.values[whole_value].dtype)
    count = -(-graph.shape(results[0])[2] // height)
    kept = [n for i, n in enumerate(nodes[:last]) if i not in banded]
    return Banding(kept + steps + nodes[last + 1 :], j, height, count, peak)
