"""quantize="int8": a float model put in the QDQ form a quantized model has, with scales edgetrain
chooses, so it trains quantization-aware as a QDQ model does (ops/quantize.py).

Weights (of Conv, ConvTranspose, Gemm and MatMul) are int8, symmetric, one scale per output
channel: max|W| / 127 over the channel, zero point 0. Activations (those layers' data inputs and
outputs, but the model's outputs) are int8 with one scale and zero point per tensor, asymmetric over
the range [min(0, lowest), max(0, highest)] that calibration batches reach, run through the float
model by onnx.reference. A layer's output that only a Relu or Clip (ReLU6) reads is quantized
after it instead: what an int8 layer with its activation fused writes, with one QuantizeLinear
less. The weights stay float initializers, quantized by QuantizeLinear on every forward pass: the
float master copies that training updates (as for a quantize_static model).

An inference-mode BatchNormalization right after a Conv is folded into that Conv's weight and bias
first, as every int8 deployment does (onnxruntime's quantization pre-processing, TFLite's
converter): the int8 weight is then the one the deployed layer computes with, and no float
normalization sits between two quantized layers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ..errors import EdgetrainError
from .imports import QUANTIZED_HERE, names_in, unused_name
from .load import REFERENCE_FIXES, _normalize_opset, _read
from .validate import check_model, one_line

# Layers whose weights and activations are quantized: op -> its weight's input slot.
_LAYERS = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}


def quantize_int8(model, calibration_data) -> onnx.ModelProto:
    """`model` (a path or ModelProto, not changed) in QDQ form, calibrated on `calibration_data`:
    an iterable of batches, each a dict of the model's inputs by name, or an array for a model with
    one input."""
    proto = onnx.ModelProto.FromString(_read(model).SerializeToString())
    check_model(proto)
    proto = _normalize_opset(proto)
    graph = proto.graph
    fold_batchnorm(graph)
    inits = {i.name: i for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    weights: dict[str, int | None] = {}
    activations: list[str] = []
    for node in graph.node:
        if node.op_type not in _LAYERS:
            continue
        for slot, name in enumerate(node.input[:2]):
            if name in inits:
                if slot == _LAYERS[node.op_type]:
                    weights.setdefault(name, _channel_axis(node, inits[name]))
            elif name:
                activations.append(name)
        output = node.output[0]
        after = readers.get(output, [])
        if output not in outputs and len(after) == 1 and after[0].op_type in ("Relu", "Clip"):
            output = after[0].output[0]  # quantized after its ReLU or ReLU6, as an int8 layer computes it
        activations += [output] if output not in outputs else []
    activations = list(dict.fromkeys(activations))
    if not weights and not activations:
        raise EdgetrainError("quantize='int8': the model has no Conv, ConvTranspose, Gemm or MatMul to quantize")
    ranges = _ranges(proto, activations, calibration_data)
    taken = names_in(graph)
    for name, axis in weights.items():
        values = numpy_helper.to_array(inits[name]).astype(np.float32)
        _insert(graph, taken, name, *_weight_scale(values, axis), axis)
    for name in activations:
        _insert(graph, taken, name, *_activation_scale(*ranges[name]), None)
    return proto


def fold_batchnorm(graph) -> None:
    """Folds each inference-mode BatchNormalization whose input is a float Conv's output, read by
    nothing else, into that Conv: W * k per output channel and (b - mean) * k + beta, k = scale /
    sqrt(var + epsilon). Every initializer it touches must be read by that Conv or BatchNormalization
    alone, so that no other layer changes."""
    inits = {i.name: i for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    readers: dict[str, int] = {}
    for name in [n for node in graph.node for n in node.input] + [v.name for v in [*graph.input, *graph.output]]:
        readers[name] = readers.get(name, 0) + 1
    producer = {out: node for node in graph.node for out in node.output}
    for bn in list(graph.node):
        conv = producer.get(bn.input[0]) if bn.op_type == "BatchNormalization" else None
        if conv is None or conv.op_type != "Conv" or readers[bn.input[0]] != 1:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
        own = [n for n in (*conv.input[1:3], *bn.input[1:5]) if n]
        if attrs.get("training_mode", 0) or any(n not in inits or readers[n] != 1 for n in own):
            continue
        scale, beta, mean, var = (numpy_helper.to_array(inits[n]) for n in bn.input[1:5])
        k = scale / np.sqrt(var + np.float32(attrs.get("epsilon", 1e-5)))
        weight = numpy_helper.to_array(inits[conv.input[1]])
        has_bias = len(conv.input) > 2 and conv.input[2]
        bias = numpy_helper.to_array(inits[conv.input[2]]) if has_bias else np.zeros(k.shape, np.float32)
        bias_name = conv.input[2] if has_bias else bn.input[2]  # beta becomes the bias it stands for
        inits[conv.input[1]].CopyFrom(
            numpy_helper.from_array(weight * k.reshape(-1, *[1] * (weight.ndim - 1)), conv.input[1])
        )
        inits[bias_name].CopyFrom(numpy_helper.from_array(((bias - mean) * k + beta).astype(np.float32), bias_name))
        conv.input[:] = [conv.input[0], conv.input[1], bias_name]
        conv.output[0] = bn.output[0]
        graph.node.remove(bn)
        dropped = set(bn.input[1:5]) - {bias_name}
        for init in [i for i in graph.initializer if i.name in dropped]:
            graph.initializer.remove(init)


def _channel_axis(node, weight) -> int | None:
    """The weight's axis of output channels, or None where one scale serves the whole tensor."""
    rank = len(weight.dims)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1 if attrs.get("group", 1) == 1 else None
    if node.op_type == "Gemm":
        return 0 if attrs.get("transB", 0) else 1
    return rank - 1 if rank == 2 else None  # MatMul's [K, N]


def _weight_scale(values: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8: max|W| / 127 per channel (1 for an all-zero one), zero point 0."""
    if axis is None:
        peak = np.abs(values).max(initial=0.0)
    else:
        peak = np.abs(np.moveaxis(values, axis, 0)).reshape(values.shape[axis], -1).max(axis=1, initial=0.0)
    scale = np.where(peak > 0, peak / 127, 1.0).astype(np.float32)
    return scale, np.zeros(scale.shape, np.int8)


def _activation_scale(lowest: float, highest: float) -> tuple[np.ndarray, np.ndarray]:
    """Asymmetric int8 over [min(0, lowest), max(0, highest)], so that 0 is exact."""
    lo, hi = min(0.0, lowest), max(0.0, highest)
    scale = np.float32((hi - lo) / 255 if hi > lo else 1.0)
    zero_point = np.int8(np.clip(np.rint(-128 - lo / scale), -128, 127))
    return np.asarray(scale), np.asarray(zero_point)


def _batches(calibration_data, names: list[str]) -> Iterable[dict[str, np.ndarray]]:
    if calibration_data is None:
        raise EdgetrainError("quantize='int8' needs calibration_data: batches of the model's inputs")
    if isinstance(calibration_data, (np.ndarray, Mapping)):
        calibration_data = [calibration_data]
    for batch in calibration_data:
        if not isinstance(batch, Mapping):
            if len(names) != 1:
                raise EdgetrainError(f"calibration batches of a model with inputs {names} must be dicts by input name")
            batch = {names[0]: batch}
        yield {k: np.asarray(v) for k, v in batch.items()}


def _ranges(proto: onnx.ModelProto, names: list[str], calibration_data) -> dict[str, tuple[float, float]]:
    """The lowest and highest value of each of `names` over the calibration batches."""
    inits = {i.name for i in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in inits]
    evaluator = ReferenceEvaluator(proto, new_ops=REFERENCE_FIXES)
    ranges = {name: (np.inf, -np.inf) for name in names}
    seen = 0
    for batch in _batches(calibration_data, inputs):
        try:
            values = evaluator.run(names, batch)
        except Exception as exc:
            raise EdgetrainError(f"calibration batch {seen} does not run through the model: {one_line(exc)}") from None
        for name, value in zip(names, values):
            lo, hi = ranges[name]
            ranges[name] = (min(lo, float(np.min(value))), max(hi, float(np.max(value))))
        seen += 1
    if not seen:
        raise EdgetrainError("quantize='int8': calibration_data holds no batch")
    return ranges


def _insert(graph, taken: set[str], name: str, scale: np.ndarray, zero_point: np.ndarray, axis: int | None) -> None:
    """QuantizeLinear -> DequantizeLinear on value `name`, which every reader then reads dequantized."""
    s, z, q, dq = (_fresh(taken, f"{name}_{suffix}") for suffix in ("scale", "zero_point", "quantized", "dequantized"))
    graph.initializer.extend([numpy_helper.from_array(scale, s), numpy_helper.from_array(zero_point, z)])
    extra: dict[str, Any] = {} if axis is None else {"axis": axis}
    for node in graph.node:
        node.input[:] = [dq if i == name else i for i in node.input]
    nodes = [
        helper.make_node("QuantizeLinear", [name, s, z], [q], name=q, **extra),
        helper.make_node("DequantizeLinear", [q, s, z], [dq], name=dq, **extra),
    ]
    if axis is not None:  # a weight: what edgetrain quantized, not a fake quantization of the model's
        helper.set_metadata_props(nodes[0], {QUANTIZED_HERE: "int8"})
    producers = [i for i, node in enumerate(graph.node) if name in node.output]
    readers = [i for i, node in enumerate(graph.node) if dq in node.input]
    at = producers[0] + 1 if producers else min(readers, default=0)  # a weight's: before its layer
    for offset, node in enumerate(nodes):
        graph.node.insert(at + offset, node)


def _fresh(taken: set[str], name: str) -> str:
    name = unused_name(name, taken)
    taken.add(name)
    return name
