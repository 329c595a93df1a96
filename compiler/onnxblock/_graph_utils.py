"""Names and lookups shared by the blocks: how onnxblock names what it adds, where a value's type
comes from, and which values become the graph's outputs."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import onnx

# One counter for the whole process, as onnxblock's: every name a block makes is unique even when
# the same block class is used twice in one model.
_tokens = itertools.count(1)


def generate_graph_name(token: str) -> str:
    """onnxblock's spelling of a generated name: onnx::<token>::<n>."""
    return f"onnx::{token}::{next(_tokens)}"


def node_arg_exists(model: onnx.ModelProto, name: str) -> bool:
    """Whether `name` is already a value of the model. Graph inputs and initializers count too, so a
    target the model declares but does not read yet is not declared twice."""
    graph = model.graph
    return (
        any(name in node.input or name in node.output for node in graph.node)
        or any(value.name == name for value in graph.input)
        or any(tensor.name == name for tensor in graph.initializer)
    )


def value_info_like(model: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    """A copy of the type of `name`: a graph input or output as onnxblock looks them up, else the type
    shape inference gives an intermediate value (so a loss can sit on a block's output, a head's
    logits, and still declare its target)."""
    graph = model.graph
    for value in list(graph.input) + list(graph.output):
        if value.name == name:
            return copy.deepcopy(value)
    for value in onnx.shape_inference.infer_shapes(model).graph.value_info:
        if value.name == name:
            return copy.deepcopy(value)
    raise LookupError(f"Could not find input or output with name {name}")


def register_graph_outputs(model: onnx.ModelProto, output_names) -> None:
    """Make `output_names` (a name or a sequence of names) the graph's outputs, in that order; each
    must be a graph output already or have a type in value_info (run shape inference first)."""
    names = [output_names] if isinstance(output_names, str) else list(output_names)
    known = {value.name: value for value in model.graph.value_info}
    known |= {value.name: value for value in model.graph.output}
    missing = [name for name in names if name not in known]
    if missing:
        raise LookupError(f"The provided name {missing[0]} is not a graph value info or a graph output.")
    outputs = [copy.deepcopy(known[name]) for name in names]
    del model.graph.output[:]
    model.graph.output.extend(outputs)


def add_constant(model: onnx.ModelProto, name: str, array) -> str:
    """A float32 constant named `name`, made by a Constant node rather than an initializer: it is
    part of the loss, not a parameter, so it stays out of the checkpoint and the parameter list."""
    tensor = onnx.numpy_helper.from_array(np.asarray(array, np.float32), f"{name}.value")
    model.graph.node.append(onnx.helper.make_node("Constant", [], [name], name=f"{name}.constant", value=tensor))
    return name
