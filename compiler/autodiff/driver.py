"""Reverse-mode differentiation. Gradient rules only say how one op's inputs get gradients; this
driver decides which nodes need differentiating, reduces broadcast gradients back to their
input's shape, and sums gradients that fan in from several consumers (convention 1)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from ..errors import EdgetrainError
from ..ir import Graph, Node
from ..ir.graph import frozen_attrs
from ..ops import require


class GraphBuilder:
    """Appends nodes to a graph, giving every new value its static shape as it is created."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def emit(self, op: str, inputs, attrs=None, *, domain: str = "", outputs: int = 1, names=None):
        outs = tuple(names) if names else tuple(self.graph.fresh(op.lower()) for _ in range(outputs))
        node = Node(op, tuple(inputs), outs, frozen_attrs(attrs or {}), name=outs[0], domain=domain)
        dtypes = require(node).dtypes
        for i, (name, shape) in enumerate(zip(outs, self._infer(node))):
            self.graph.add_value(name, shape, dtypes[i] if i < len(dtypes) else np.float32)
        self.graph.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def const(self, array) -> str:
        array = np.asarray(array)
        return self.graph.add_constant(array.astype(np.float32) if array.dtype.kind == "f" else array)

    def ints(self, values) -> str:
        return self.graph.add_constant(np.asarray(values, dtype=np.int64), "ints")

    def shape(self, name: str) -> tuple[int, ...]:
        return self.graph.shape(name)

    def value_of(self, name: str) -> np.ndarray:
        return self.graph.constants[name]

    def reshape(self, name: str, shape) -> str:
        shape = tuple(shape)
        return name if self.shape(name) == shape else self.emit("Reshape", [name, self.ints(shape)])

    def reduce_to(self, name: str, shape) -> str:
        """Sum a gradient in a broadcast shape down to `shape` (NumPy broadcasting, right-aligned)."""
        have, want = self.shape(name), tuple(shape)
        if have == want:
            return name
        lead = len(have) - len(want)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(want) if d == 1 and have[lead + i] != 1]
        summed = self.emit("ReduceSum", [name, self.ints(axes)], {"keepdims": 0}) if axes else name
        return self.reshape(summed, want)  # puts back the broadcast unit axes, when there were any

    def _infer(self, node: Node) -> list[tuple[int, ...]]:
        spec = require(node)
        if spec.shape is not None:
            return spec.shape(self.graph, node)
        proto = onnx.helper.make_node(node.op, node.inputs, node.outputs, **dict(node.attrs))
        types = {
            n: onnx.helper.make_tensor_type_proto(
                onnx.helper.np_dtype_to_tensor_dtype(self.graph.values[n].dtype), self.graph.values[n].shape
            )
            for n in node.inputs
            if n
        }
        constants = self.graph.constants
        data = {n: numpy_helper.from_array(constants[n], n) for n in node.inputs if n in constants}
        schema = onnx.defs.get_schema(node.op, self.graph.opset)
        inferred = shape_inference.infer_node_outputs(schema, proto, types, data)
        return [tuple(d.dim_value for d in inferred[n].tensor_type.shape.dim) for n in node.outputs]


class GradCtx(GraphBuilder):
    """What a gradient rule sees: the builder, plus which inputs of the current node need gradients."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self._needs: tuple[bool, ...] = ()

    def needs(self, slot: int) -> bool:
        return slot < len(self._needs) and self._needs[slot]


def differentiate(graph: Graph, loss: str, wrt: list[str]) -> tuple[dict[str, str | None], int]:
    """Append the backward pass of `loss` to `graph`. Returns each parameter's gradient value
    (None when the loss does not depend on it), and where the backward pass starts in
    graph.nodes: the residual nodes gradient rules emit run in the forward pass."""
    forward = list(graph.nodes)
    depends = set(wrt)  # values that depend on a parameter we differentiate (through no detach)
    for node in forward:
        if any(name in depends for name in node.inputs):
            depends.update(name for name in node.outputs if name not in graph.detached)
    reaches = {loss}  # values the loss depends on
    for node in reversed(forward):
        if any(name in reaches for name in node.outputs):
            reaches.update(n for n in node.inputs if n)

    g = GradCtx(graph)
    contributions: dict[str, list[str]] = {loss: [g.const(np.ones(graph.shape(loss), np.float32))]}

    def total(name: str) -> str | None:
        parts = contributions.get(name)
        if not parts:
            return None
        acc = parts[0]
        for part in parts[1:]:
            acc = g.emit("Add", [acc, part])
        contributions[name] = [acc]
        return acc

    for node in reversed(forward):
        if not any(name in reaches for name in node.outputs):
            continue
        spec = require(node)
        # Integer and bool values (indices, masks) take no gradient, quantized ones straight through.
        needs = tuple(
            bool(name)
            and name in depends
            and name in reaches
            and slot not in spec.const_inputs
            and (graph.values[name].dtype == np.float32 or slot in spec.straight_through)
            for slot, name in enumerate(node.inputs)
        )
        if not any(needs):
            continue
        dys = [total(name) for name in node.outputs]
        if all(d is None for d in dys):
            continue
        if spec.grad is None:
            raise EdgetrainError(f"op {node.op} (node '{node.name}') has no gradient rule")
        g._needs = needs
        grads = spec.grad(g, node, dys)
        for slot, (name, grad) in enumerate(zip(node.inputs, grads)):
            if needs[slot] and grad is not None:
                contributions.setdefault(name, []).append(g.reduce_to(grad, graph.shape(name)))
    grads = {name: total(name) for name in wrt}
    backward = graph.nodes[len(forward) :]
    residuals = [node for node in backward if require(node).residual]
    graph.nodes = _run_early(forward, residuals) + [node for node in backward if not require(node).residual]
    return grads, len(forward) + len(residuals)


def _run_early(forward: list[Node], residuals: list[Node]) -> list[Node]:
    """`forward` with each residual node right after the last producer of its inputs (they are
    forward values, parameters or constants), before anything else reads them."""
    made = {name: i for i, node in enumerate(forward) for name in node.outputs}
    after: dict[int, list[Node]] = {}
    for node in residuals:
        after.setdefault(max((made[n] for n in node.inputs if n in made), default=-1), []).append(node)
    return after.get(-1, []) + [n for i, node in enumerate(forward) for n in [node] + after.get(i, [])]
