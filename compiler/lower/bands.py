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
# Gradient ops whose output rows read the same rows of dY (input 0), with the slot of a bit mask of
# dY's shape whose bits of those rows they read too (None: no mask).
_MASKED: dict[str, int | None] = {"ReluGrad": 1, "QuantizeLinearGrad": 1, "DequantizeLinearGrad": None}
# Input gradients of convolutions: a transposed window over dY.
_TRANSPOSED = ("ConvGradX", "ConvGradXInPlace")
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


def _transposed_rows(graph: Graph, node: Node, rows: Rows) -> Rows:
    """The rows of dY whose windows reach the band of dX `rows` (a convolution's input gradient)."""
    geo = _window(graph, node)
    reach, stride = (geo.kernel[0] - 1) * geo.dilations[0], geo.strides[0]
    first = max(0, -(-(rows[0] + geo.begin[0] - reach) // stride))
    end = min(graph.shape(node.inputs[0])[2], (rows[1] - 1 + geo.begin[0]) // stride + 1)
    if first >= end:
        raise _NoBand
    return first, end


def _reads(graph: Graph, node: Node, rows: Rows) -> Rows:
    """The rows of its row inputs that a band of the node's output `rows` reads."""
    if node.op in _TRANSPOSED:
        return _transposed_rows(graph, node, rows)
    return _input_rows(graph, node, rows)[0] if _windowed(node) else rows


def _banded(graph: Graph, node: Node, rows: Rows) -> tuple[str, dict[str, Any]]:
    """The op and attributes of a band of the node's output rows: a window meets the padding at
    the top and the bottom of the whole input, none between bands; an input gradient's transposed
    window starts where the band's first dY row puts it."""
    if node.op in _TRANSPOSED:
        geo = _window(graph, node)
        first, end = _transposed_rows(graph, node, rows)
        begin = geo.begin[0] + rows[0] - first * geo.strides[0]  # dY row `first` is the band's row 0
        if begin < 0:
            raise _NoBand  # the C kernels take windows that start at or before their input's first row
        reach = (geo.kernel[0] - 1) * geo.dilations[0] + 1
        below = max(0, (end - first - 1) * geo.strides[0] + reach - begin - (rows[1] - rows[0]))
        shape = _with_rows(tuple(node.attr("shape")), rows)
        pads = [begin, *geo.begin[1:], below, *geo.end[1:]]
        # in a band, dX is small beside the whole: the plain kernel, not the one writing over dY
        return "ConvGradX", {**node.attrs, "pads": pads, "shape": list(shape)}
    if not _windowed(node):
        return node.op, dict(node.attrs)
    geo = _window(graph, node)
    _, above, below = _input_rows(graph, node, rows)
    attrs = {k: v for k, v in node.attrs.items() if k != "auto_pad"}
    attrs["pads"] = [above, *geo.begin[1:], below, *geo.end[1:]]
    return node.op, attrs


def _with_rows(shape: tuple[int, ...], rows: Rows) -> tuple[int, ...]:
    return (*shape[:2], rows[1] - rows[0], *shape[3:])


def _share(rows: Rows, total: int, height: int) -> Rows:
    """A band's rows of a tensor `height` rows tall, where it has `rows` of `total`: each band owns
    its part of every tensor, the parts of one tensor meeting without overlap."""
    return rows[0] * height // total, rows[1] * height // total


class _Bands:
    """The nodes of a region, split into bands of rows: band() gives one band's nodes, the shapes
    of the values they make, and the band's part of each result and of each sum; split() every
    band, the joins of the results and the totals of the sums. A sum (at `sums`, a position in
    nodes) is a ReduceSum over the rows axis (a bias gradient): each band sums the rows it owns."""

    def __init__(
        self,
        graph: Graph,
        nodes: list[Node],
        slots: list[list[int]],
        results: list[str],
        tag: str,
        sums: frozenset[int] = frozenset(),
    ):
        """tag: what the names of the values the bands make start with, after their whole value's."""
        self.graph, self.nodes, self.slots, self.results, self.tag = graph, nodes, slots, results, tag
        self.sums = sums
        self.owned = results + [nodes[k].inputs[0] for k in sorted(sums)]
        self.total = max(graph.shape(name)[2] for name in self.owned)

    def band(self, rows: Rows, tag: str) -> tuple[list[Node], dict[str, tuple[tuple[int, ...], str]], list[str]]:
        graph = self.graph
        owned = {name: _share(rows, self.total, graph.shape(name)[2]) for name in self.owned}
        need: dict[str, Rows] = {name: own for name, own in owned.items() if own[0] < own[1]}
        reads: dict[tuple[int, int], Rows] = {}
        for k in reversed(range(len(self.nodes))):
            node = self.nodes[k]
            made = need.get(node.outputs[0])
            if made is None or k in self.sums:
                continue
            for slot in self.slots[k]:
                read = _reads(graph, node, made)
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

        def mask_part(mask: str, of: str, want: Rows) -> str:
            """The bits of rows `want` of the tensor `of` that `mask` holds the bits of."""
            part_name = f"{mask}:{tag}:{want[0]}-{want[1]}"
            if part_name not in shapes:
                n, c, height, *row = graph.shape(of)
                attrs = {"planes": n * c, "height": height, "width": math.prod(row), "first": want[0]}
                attrs["count"] = want[1] - want[0]
                step = Node("MaskRows", (mask,), (part_name,), attrs, part_name, ET_DOMAIN)
                shape_of = require(step).shape
                assert shape_of is not None  # our own op's
                shapes[part_name] = (shape_of(graph, step)[0], mask)
                steps.append(step)
            return part_name

        parts = []
        for k, node in enumerate(self.nodes):
            if k in self.sums:
                x = node.inputs[0]
                if owned[x][0] < owned[x][1]:
                    output = f"{node.outputs[0]}:{tag}"
                    shapes[output] = (graph.shape(node.outputs[0]), node.outputs[0])
                    summed = (part(x, owned[x]), *node.inputs[1:])
                    steps.append(Node(node.op, summed, (output,), node.attrs, f"{node.name}:{tag}", node.domain))
                    parts.append(output)
                else:
                    parts.append("")
                continue
            made = need.get(node.outputs[0])
            if made is None:
                continue
            inputs = list(node.inputs)
            for slot in self.slots[k]:
                inputs[slot] = part(node.inputs[slot], reads[k, slot])
            masked = _MASKED.get(node.op)
            if masked is not None:
                inputs[masked] = mask_part(node.inputs[masked], node.inputs[0], made)
            op_name, attrs = _banded(graph, node, made)
            outputs = tuple(f"{name}:{tag}" for name in node.outputs[: 1 if op_name != node.op else None])
            shapes[outputs[0]] = (_with_rows(graph.shape(node.outputs[0]), made), node.outputs[0])
            shapes.update((o, (graph.shape(name), name)) for o, name in zip(outputs[1:], node.outputs[1:]))
            steps.append(Node(op_name, tuple(inputs), outputs, attrs, f"{node.name}:{tag}", node.domain))
            named[node.outputs[0]] = outputs[0]
        return steps, shapes, [part(name, owned[name]) for name in self.results] + parts

    def split(self, height: int) -> tuple[list[Node], dict[str, tuple[tuple[int, ...], str]]]:
        """Every band of `height` rows (the last one what is left), then the joins of the results
        and the sums of the bands' sums, in band order."""
        steps: list[Node] = []
        shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        parts: list[list[str]] = []
        for index, first in enumerate(range(0, self.total, height)):
            band, made, pieces = self.band((first, min(first + height, self.total)), f"{self.tag}{index}")
            steps += band
            shapes.update(made)
            parts.append(pieces)
        for k, name in enumerate(self.results):
            steps.append(Node("JoinRows", tuple(p[k] for p in parts), (name,), {}, f"{name}:join", ET_DOMAIN))
        for k, position in enumerate(sorted(self.sums), start=len(self.results)):
            name = self.nodes[position].outputs[0]
            pieces = [p[k] for p in parts if p[k]]
            total = pieces[0]
            for i, piece in enumerate(pieces[1:], start=1):
                last = i == len(pieces) - 1
                out = name if last else f"{name}:{self.tag}:sum{i}"
                shapes.setdefault(out, (self.graph.shape(name), name))
                steps.append(Node("Add", (total, piece), (out,), {}, f"{name}:{self.tag}:add{i}"))
                total = out
            if len(pieces) == 1:  # one band owns every row: its sum is the total
                steps = [_renamed(step, pieces[0], name) for step in steps]
        return steps, shapes


def _renamed(node: Node, old: str, new: str) -> Node:
    if old not in node.outputs:
        return node
    outputs = tuple(new if name == old else name for name in node.outputs)
    return Node(node.op, node.inputs, outputs, node.attrs, node.name, node.domain)


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
    ops: int  # how many of the nodes the function starts with (gradient_bands: ends with) run in bands
    height: int  # rows of their last results per band
    bands: int
    peak: float  # the most bytes per sample live at once, as estimated


class _Sizes:
    """Bytes per sample of the graph's values and of those the bands being tried make (made)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.batch = graph.shape(graph.inputs[0])[0] if graph.inputs and graph.shape(graph.inputs[0]) else 1
        self.made: dict[str, tuple[tuple[int, ...], str]] = {}  # a band's value -> its shape, its whole value

    def c_type(self, name: str) -> str:
        return self.graph.c_type(self.made[name][1] if name in self.made else name)

    def size(self, name: str) -> float:
        shape = self.made[name][0] if name in self.made else self.graph.shape(name)
        per_sample = self.batch if shape and shape[0] == self.batch else 1
        return math.prod(shape) * 4 / PER_WORD[self.c_type(name)] / per_sample

    def peak(self, steps: list[Node], read_after: set[str], start: int = 0) -> float:
        return max(_profile(steps, self.size, self.c_type, read_after)[start:], default=0.0)

    def work(self, steps: list[Node]) -> float:
        return sum(self.size(name) for step in steps for name in step.outputs[:1])


def _heights(total: int) -> list[int]:
    """Every band height that splits `total` rows into a different number of bands, tallest first."""
    return sorted({-(-total // m) for m in range(2, total + 1)}, reverse=True)


def _added(graph: Graph, shapes: dict[str, tuple[tuple[int, ...], str]]) -> None:
    for name, (shape, whole_value) in shapes.items():
        if name not in graph.values:
            graph.add_value(name, shape, graph.values[whole_value].dtype)


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
    sizes = _Sizes(graph)
    whole = _profile(nodes, sizes.size, sizes.c_type, keep)
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
        for height in _heights(bands.total):
            try:
                steps, shapes = bands.split(height)
            except _NoBand:
                continue
            sizes.made = shapes
            peak, work = max(sizes.peak(before + steps, read_after), after), sizes.work(steps)
            if (peak, work) < best[:2]:
                best = (peak, work, j, height)
    peak, _, j, height = best
    if not j:
        return Banding(nodes, 0, 0, 0, peak)
    last, banded = region[j - 1], set(region[:j])
    results = _results(region, nodes, keep)[j - 1]
    bands = _Bands(graph, [nodes[i] for i in region[:j]], slots[:j], results, tag)
    steps, made = bands.split(height)
    _added(graph, made)
    kept = [n for i, n in enumerate(nodes[:last]) if i not in banded]
    return Banding(kept + steps + nodes[last + 1 :], j, height, -(-bands.total // height), peak)


def _gradient_row_inputs(graph: Graph, node: Node) -> list[int] | None:
    """_row_inputs for the backward pass: also a convolution's input gradient and the gradient ops
    of _MASKED (not on a block of a weight's channels)."""
    if node.domain != ET_DOMAIN:
        return _row_inputs(graph, node)
    y = graph.shape(node.outputs[0])
    if len(y) not in (3, 4) or y[2] < 2 or len(graph.shape(node.inputs[0])) != len(y):
        return None
    if node.op in _TRANSPOSED:
        return [0]
    if node.op in _MASKED and not node.attr("first", 0) and node.attr("axis", 1) % len(y) == 1:
        masked = _MASKED[node.op]
        bits = graph.values[node.inputs[0]].size
        if masked is None or graph.values[node.inputs[masked]].size == -(-bits // 32):
            return [0]
    return None


def _sums_rows(graph: Graph, node: Node) -> bool:
    """Whether the node is a ReduceSum over the rows axis, among others (a bias gradient)."""
    if node.op != "ReduceSum" or node.domain or len(graph.shape(node.inputs[0])) not in (3, 4):
        return False
    axes = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attr("axes")
    if axes is None or len(axes) == 0:
        return not node.attr("noop_with_empty_axes", 0)
    return 2 in {int(a) % len(graph.shape(node.inputs[0])) for a in axes}


def _tail(
    graph: Graph, nodes: list[Node], first: int, keep: set[str]
) -> tuple[list[int], list[list[int]], set[int], list[int]]:
    """The nodes from `first` on that read what nodes[first] makes, and so on, where every one can
    run a band at a time and nothing after them or outside reads their results but sums over their
    rows: (their indices, the input slots each reads rows of, the positions of the sums among
    them, the indices of the nodes that read the sums, or what those make, to run after the
    bands); no indices where they cannot. The other nodes from `first` on run before the bands."""
    made: set[str] = set()
    later: set[str] = set()  # the sums, and what the nodes after the bands make of them
    region: list[int] = []
    slots: list[list[int]] = []
    sums: set[int] = set()
    after: list[int] = []
    for index in range(first, len(nodes)):
        node = nodes[index]
        reads = [name in made for name in node.inputs]
        if any(name in later for name in node.inputs):
            if any(reads):
                return [], [], set(), []
            after.append(index)  # a parameter's gradient summed over its uses, say
            later.update(node.outputs)
            continue
        if index > first and not any(reads):
            continue
        if index > first and _sums_rows(graph, node) and reads[0] and not any(reads[1:]):
            sums.add(len(region))
            later.update(node.outputs)
            slots.append([0])
        else:
            rows = _gradient_row_inputs(graph, node)
            masked = _MASKED.get(node.op) if node.domain == ET_DOMAIN else None
            if rows is None or any(read for s, read in enumerate(reads) if s not in rows and s != masked):
                return [], [], set(), []
            made.add(node.outputs[0])
            slots.append(rows)
        region.append(index)
    if made & (keep | set(graph.outputs)):
        return [], [], set(), []
    return region, slots, sums, after


def _forward_floor(graph: Graph, nodes: list[Node], start: int, whole: list[float]) -> float:
    """The peak of the forward pass (nodes[:start]) after the region row_bands may split: bands of
    the backward pass that go below it save nothing."""
    region, _ = _region(graph, nodes, start)
    return max(whole[region[-1] + 1 if region else 0 : start], default=0.0)


def gradient_bands(
    graph: Graph, nodes: list[Node], start: int, keep: set[str], chosen: tuple[int, int] | None = None
) -> Banding:
    """`nodes` with a region the backward pass (nodes[start:]) ends with run in row bands, where
    that lowers the backward pass's peak of live bytes: the input gradients of the widest layers,
    read by nothing but their bias gradients' sums and the layers below, are never made whole.
    Each band makes its rows of every gradient (and the rows of the layer above its windows need),
    takes the bits of them from the forward pass's masks (MaskRows), and sums the rows it owns of
    each bias gradient; the bands' sums are then added in band order. Those sums are over the same
    values as without bands, in another order: equal to rounding. Of the regions and heights that
    reach the lowest peak, the one that computes least. chosen: (ops, height) as in row_bands,
    ops counting the nodes from the first banded one to the end."""
    sizes = _Sizes(graph)
    whole = _profile(nodes, sizes.size, sizes.c_type, keep)
    if chosen == (0, 0) or start >= len(nodes):
        return Banding(nodes, 0, 0, 0, max(whole, default=0.0))
    tag = ":band"  # the search's; the bands chosen get a fresh one, made in every batch's compile alike
    top = max(range(start, len(nodes)), key=whole.__getitem__)  # a region must start at or before it
    floor = _forward_floor(graph, nodes, start, whole)
    best: tuple[float, float, int, int] = (max(max(whole[start:]), floor), 0.0, *(chosen or (0, 0)))
    # regions start at a layer's input gradient, its dY whole
    layers = [i for i in range(start, top + 1) if nodes[i].op in _TRANSPOSED or _windowed(nodes[i])]
    options: dict[int, tuple[_Bands, list[Node], list[Node]]] = {}  # first -> bands, nodes before, after
    for first in layers if chosen is None else [len(nodes) - chosen[0]]:
        if max(whole[start:first], default=0.0) >= best[0] and not chosen:
            break  # the steps before a region are as they were: no later one goes lower
        region, slots, sums, after = _tail(graph, nodes, first, keep)
        if not sums:  # gradients nothing sums are read by no one: autodiff made none such
            continue
        moved = set(region + after)
        passed = [n for i, n in enumerate(nodes[first:], start=first) if i not in moved]
        bands = _Bands(graph, [nodes[i] for i in region], slots, [], tag, frozenset(sums))
        options[first] = bands, nodes[:first] + passed, [nodes[i] for i in after]
        for height in [chosen[1]] if chosen else _heights(bands.total):
            try:
                steps, shapes = bands.split(height)
            except _NoBand:
                continue
            sizes.made = shapes
            peak = max(sizes.peak(options[first][1] + steps + options[first][2], keep, start), floor)
            work = sizes.work(steps)
            if (peak, work) < best[:2] or chosen:
                best = (peak, work, len(nodes) - first, height)
            if peak <= floor:
                break  # lower bands would only compute more
    _, _, ops, height = best
    if not ops or len(nodes) - ops not in options:
        return Banding(nodes, 0, 0, 0, max(whole, default=0.0))
    bands, before, behind = options[len(nodes) - ops]
    bands.tag = graph.fresh("band")
    steps, made = bands.split(height)
    _added(graph, made)
    sizes.made = made
    steps = before + steps + behind
    return Banding(steps, ops, height, -(-bands.total // height), sizes.peak(steps, keep))
