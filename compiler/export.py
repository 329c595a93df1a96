"""The inference model with trained weights: the eval model's forward part, with the trainable
parameters and buffers (BatchNorm running statistics) of a checkpoint or of a device's export blob
(`<prefix>_export_parameters`) written in as initializers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from . import checkpoint
from .checkpoint import CheckpointError
from .frontend.load import run_node

__all__ = ["merge_parameter_blob"]


def _eval_model(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return onnx.ModelProto.FromString(model.SerializeToString())  # the caller's copy stays as it is
    path = Path(model)
    return onnx.load(os.fspath(path / "eval_model.onnx" if path.is_dir() else path))


def merge_parameter_blob(model, blob, graph_output_names=None) -> onnx.ModelProto:
    """A forward-only ONNX model (no loss, no training ops, BatchNorm in inference form) holding the
    values of `blob`: bytes or a path of a checkpoint or export blob, written by the host or the C.

    model: an artifact directory, its eval_model.onnx, or that model as a ModelProto.
    graph_output_names: the outputs to keep; default the forward model's outputs."""
    raw = bytes(blob) if isinstance(blob, (bytes, bytearray, memoryview)) else Path(blob).read_bytes()
    data = checkpoint.decode(raw)
    proto = _eval_model(model)
    meta = {p.key: p.value for p in proto.metadata_props}
    if "edgetrain.inputs" not in meta:
        raise ValueError("not an edgetrain eval model (no edgetrain metadata); pass eval_model.onnx or its directory")
    if meta.get("edgetrain.fingerprint") not in (None, f"{data.fingerprint:016x}"):
        raise CheckpointError("the parameter blob belongs to another model")
    if data.contents & checkpoint.NOMINAL:
        raise CheckpointError("a nominal checkpoint carries no values to export")
    values = {n: a for n, k, a in zip(data.names, data.kinds, data.arrays) if k != checkpoint.FROZEN}
    inputs = {i.name: i for i in proto.graph.input}
    missing = [n for n in values if n not in inputs]
    if missing:
        raise CheckpointError(f"the parameter blob does not match the model: no input {missing[0]!r}")
    kept = [i for i in proto.graph.input if i.name not in values]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    proto.graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in values.items())
    names = (
        list(graph_output_names)
        if graph_output_names is not None
        else [n for n, _ in json.loads(meta["edgetrain.outputs"])]
    )
    inference = onnx.utils.Extractor(proto).extract_model(json.loads(meta["edgetrain.inputs"]), names)
    _name_batch_axis(inference, json.loads(meta.get("edgetrain.batch", "{}")).get("axes", {}))
    _quantize_weights(inference)
    del inference.metadata_props[:]
    return inference


def _quantize_weights(model: onnx.ModelProto) -> None:
    """A quantized model's weights are float values that QuantizeLinear quantizes in the ONNX models
    (frontend.imports.quantized_parameters; the trainer's master copies, or the values of the
    integers it stores): the inference model holds the quantized integers instead, read by
    DequantizeLinear as the model they came from was."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    inputs = set()
    for node in [n for n in graph.node if n.op_type == "QuantizeLinear"]:
        if not all(name in inits for name in node.input if name):
            continue
        inputs.update(node.input)
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        (values,) = run_node(node, {n: numpy_helper.to_array(inits[n]) for n in node.input if n}, opset)
        graph.node.remove(node)
        graph.initializer.append(numpy_helper.from_array(np.asarray(values), node.output[0]))
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    for init in [i for i in graph.initializer if i.name in inputs - read]:  # master copies and their scales
        graph.initializer.remove(init)


def _name_batch_axis(model: onnx.ModelProto, axes: dict[str, str]) -> None:
    """An eval model that runs any batch (its batched inputs' first axis symbolic) gives the
    outputs' first axis the name the user's model gave it, as the inputs have theirs."""
    symbolic = any(
        not v.type.tensor_type.shape.dim[0].HasField("dim_value") for v in model.graph.input if v.name in axes
    )
    for value in model.graph.output:
        if symbolic and value.name in axes and value.type.tensor_type.shape.dim:
            dim = value.type.tensor_type.shape.dim[0]
            dim.Clear()
            if axes[value.name]:
                dim.dim_param = axes[value.name]
