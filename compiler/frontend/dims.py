"""Symbolic input dimensions that the model itself fixes.

Exporters often name every input dimension symbolic (ONNX Runtime's training examples do: the
feature size of an MLP's input is 'input-0_dim1'), although a weight fixes it: a Gemm with a
784-column weight takes 784 features and nothing else. ONNX shape inference carries the names
forward but never back, so those dimensions are found here: run inference with the names in place,
and wherever an operator requires a named input dimension to equal a known size, that is the size.
Each one fixed is an ImportNote; a dimension nothing fixes stays symbolic."""

from __future__ import annotations

import warnings

import onnx
from onnx import shape_inference

from ..errors import ImportNote

Dim = int | str | None  # a known size, an input dimension's name, or unknown

# Operators whose inputs broadcast against each other (numpy's rule, aligned at the last axis).
_BROADCAST = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Where",
    "PRelu",
    "Equal",
    "Greater",
    "GreaterOrEqual",
    "Less",
    "LessOrEqual",
    "And",
    "Or",
    "Xor",
    "Mod",
    "BitShift",
}


def tie_to_constants(proto: onnx.ModelProto, data_inputs: list) -> None:
    """Fix, in `proto`'s inputs, each symbolic dimension an operator ties to a known size; repeat
    while one fixed dimension lets inference learn more."""
    while True:
        named = {
            d.dim_param
            for v in data_inputs
            for d in v.type.tensor_type.shape.dim
            if d.dim_param and not d.HasField("dim_value")
        }
        if not named:
            return
        forced = _forced_sizes(proto, named)
        if not forced:
            return
        for value in data_inputs:
            for axis, dim in enumerate(value.type.tensor_type.shape.dim):
                if dim.dim_param in forced and not dim.HasField("dim_value"):
                    size, node = forced[dim.dim_param]
                    warnings.warn(
                        ImportNote(
                            f"input '{value.name}' axis {axis} ('{dim.dim_param}') is fixed to {size}: node '{node}' "
                            "takes no other size"
                        ),
                        stacklevel=4,
                    )
                    dim.dim_value = size


def _forced_sizes(proto: onnx.ModelProto, named: set[str]) -> dict[str, tuple[int, str]]:
    """{dimension name: (the size an operator requires of it, that operator's name)}."""
    try:
        inferred = shape_inference.infer_shapes(proto)
    except Exception:  # the loader's strict inference reports what is wrong with the model
        return {}
    shapes = _shapes(inferred.graph)
    forced: dict[str, tuple[int, str]] = {}
    for node in inferred.graph.node:
        operands = [shapes.get(name) if name else None for name in node.input]
        for a, b in _equal_dims(node, operands):
            for dim, size in ((a, b), (b, a)):
                if isinstance(dim, str) and dim in named and isinstance(size, int):
                    forced.setdefault(dim, (size, node.name or node.op_type))
    return forced


def _shapes(graph: onnx.GraphProto) -> dict[str, list[Dim]]:
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            shapes[value.name] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
            ]
    for node in graph.node:  # Constant nodes' outputs, which inference may leave out of value_info
        if node.op_type == "Constant" and node.output[0] not in shapes:
            tensor = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
            if tensor is not None:
                shapes[node.output[0]] = list(tensor.dims)
    return shapes


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _equal_dims(node: onnx.NodeProto, operands: list[list[Dim] | None]) -> list[tuple[Dim, Dim]]:
    """Pairs of dimensions of the node's operands that the operator requires to be equal."""
    op = node.op_type
    x, w = (operands + [None, None])[:2]
    if op in _BROADCAST:
        return _broadcast_pairs([s for s in operands if s is not None])
    if x is None or w is None:
        return []
    if op == "MatMul" and len(x) >= 1 and len(w) >= 2:
        return [(x[-1], w[-2])]
    if op == "Gemm" and len(x) == 2 and len(w) == 2:
        return [(x[0 if _attr(node, "transA", 0) else 1], w[1 if _attr(node, "transB", 0) else 0])]
    if op == "Conv" and len(x) >= 2 and len(w) >= 2 and isinstance(w[1], int):
        return [(x[1], w[1] * _attr(node, "group", 1))]
    if op == "ConvTranspose" and len(x) >= 2 and len(w) >= 1:
        return [(x[1], w[0])]
    if op in ("BatchNormalization", "InstanceNormalization") and len(x) >= 2 and len(w) == 1:
        return [(x[1], w[0])]
    if op == "LayerNormalization":
        axis = _attr(node, "axis", -1) % len(x) if x else 0
        return list(zip(x[axis:], w)) if len(x) - axis == len(w) else []
    return []


def _broadcast_pairs(shapes: list[list[Dim]]) -> list[tuple[Dim, Dim]]:
    """Dimensions aligned at the last axis, where the known one is not 1 (a 1 broadcasts against any
    size, so it fixes nothing)."""
    pairs = []
    for i, a in enumerate(shapes):
        for b in shapes[i + 1 :]:
            pairs += [
                (p, q)
                for p, q in zip(reversed(a), reversed(b))
                if not (isinstance(p, int) and p == 1) and not (isinstance(q, int) and q == 1)
            ]
    return pairs
