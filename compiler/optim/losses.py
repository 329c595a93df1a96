"""Losses appended to the forward graph as ordinary nodes, so autodiff differentiates them like
any other op. All reduce by the mean, as PyTorch's defaults do."""

from __future__ import annotations

import numbers
from enum import Enum

import numpy as np

from ..autodiff import GraphBuilder
from ..errors import EdgetrainError
from ..ir import ET_DOMAIN, Graph
from ..ops.loss import NO_IGNORE


class LossType(Enum):
    MSELoss = "MSELoss"
    CrossEntropyLoss = "CrossEntropyLoss"
    BCEWithLogitsLoss = "BCEWithLogitsLoss"
    L1Loss = "L1Loss"


LABELS = "labels"


def append_loss(
    graph: Graph, loss: LossType | None, *, ignore_index: int | None = None, class_weights=None
) -> tuple[str, str | None]:
    """Add the loss on the model's first output. Returns (loss value, labels input or None)."""
    _check_class_options(loss, ignore_index, class_weights)
    output = graph.outputs[0]
    if loss is None:
        if graph.values[output].size != 1:
            raise EdgetrainError(
                f"loss=None needs the model's first output to be a scalar loss; "
                f"'{output}' has shape {graph.shape(output)}"
            )
        return output, None
    if LABELS in graph.values:
        raise EdgetrainError(f"the model already has a value named '{LABELS}'")
    b = GraphBuilder(graph)
    shape = graph.shape(output)
    if loss is LossType.CrossEntropyLoss:
        if len(shape) < 2:
            raise EdgetrainError(f"CrossEntropyLoss needs logits of shape (N, C, ...); '{output}' is {shape}")
        graph.add_value(LABELS, (shape[0],) + shape[2:], np.int64)
        inputs = [output, LABELS]
        if class_weights is not None:
            weights = np.asarray(class_weights, np.float32)
            if weights.shape != (shape[1],):
                raise EdgetrainError(f"class weights need shape ({shape[1]},), got {weights.shape}")
            inputs.append(b.const(weights))
        attrs = {"reduction": "mean"} | ({"ignore_index": int(ignore_index)} if ignore_index is not None else {})
        value, _ = b.emit("SoftmaxCrossEntropyLoss", inputs, attrs, outputs=2)
        return value, LABELS
    graph.add_value(LABELS, shape, np.float32)
    if loss is LossType.MSELoss:
        diff = b.emit("Sub", [output, LABELS])
        per_element = b.emit("Mul", [diff, diff])
    elif loss is LossType.L1Loss:
        per_element = b.emit("Abs", [b.emit("Sub", [output, LABELS])])
    else:
        per_element = b.emit("BCEWithLogits", [output, LABELS], domain=ET_DOMAIN)
    return b.emit("ReduceMean", [per_element], {"keepdims": 0}), LABELS


def _check_class_options(loss: LossType | None, ignore_index, class_weights) -> None:
    """ignore_index and class_weights belong to CrossEntropyLoss: with any other loss they would
    change nothing, unsaid. An ignored class is an int32 label; a class weight is finite and >= 0."""
    given = [
        name for name, value in (("ignore_index", ignore_index), ("class_weights", class_weights)) if value is not None
    ]
    if given and loss is not LossType.CrossEntropyLoss:
        other = loss.value if loss else "a loss of the model's own (loss=None)"
        raise EdgetrainError(f"{' and '.join(given)}: CrossEntropyLoss's option(s), not {other}'s")
    integral = isinstance(ignore_index, numbers.Integral) or (
        isinstance(ignore_index, numbers.Real) and float(ignore_index).is_integer()
    )
    if ignore_index is not None and (
        isinstance(ignore_index, bool) or not integral or not NO_IGNORE < int(ignore_index) < 2**31
    ):
        raise EdgetrainError(f"ignore_index must be an int32 class label, got {ignore_index!r}")
    if class_weights is not None:
        weights = np.asarray(class_weights, np.float64)
        if not (np.isfinite(weights).all() and (weights >= 0).all()):
            raise EdgetrainError(f"class_weights must be finite and >= 0, got {weights.tolist()}")
