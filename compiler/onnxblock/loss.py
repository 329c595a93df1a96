"""The four losses of onnxblock as blocks of plain ONNX. Each declares its target as a new graph
input (named by the call, "target" or "labels" by default) unless the model has that value already,
and reduces as its `reduction` says: "mean" (default), "sum" or "none"."""

from __future__ import annotations

import onnx

from . import blocks
from ._graph_utils import add_constant, generate_graph_name, node_arg_exists, value_info_like

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss"]

_REDUCTIONS = ("mean", "sum", "none")


def _reduction(reduction: str):
    """The block that reduces a per-element loss, or None for "none" (the loss stays per element)."""
    if reduction not in _REDUCTIONS:
        raise RuntimeError(f"Reduction {reduction} not supported.")
    if reduction == "mean":
        return blocks.ReduceMean(keepdims=False)
    if reduction == "sum":
        return blocks.ReduceSum(keepdims=False)
    return None


def _reduce(block, name: str) -> str:
    return name if block is None else block(name)


def _target(model: onnx.ModelProto, like: str, target_name: str) -> str:
    """The target's name, declared as an input shaped like the prediction if the model lacks it."""
    if node_arg_exists(model, target_name):
        return target_name
    return blocks.InputLike(like)(target_name)


class MSELoss(blocks.Block):
    """reduce((input - target) ** 2)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self._reduce = _reduction(reduction)
        self._sub = blocks.Sub()
        self._square = blocks.Pow(2.0)

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        target = _target(self.base, loss_input_name, target_name)
        return _reduce(self._reduce, self._square(self._sub(loss_input_name, target)))


class L1Loss(blocks.Block):
    """reduce(|input - target|)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self._reduce = _reduction(reduction)
        self._abs = blocks.Abs()
        self._sub = blocks.Sub()

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        target = _target(self.base, loss_input_name, target_name)
        return _reduce(self._reduce, self._abs(self._sub(loss_input_name, target)))


class CrossEntropyLoss(blocks.Block):
    """SoftmaxCrossEntropyLoss over scores (N, C, d1, ...) and int64 labels (N, d1, ...), with
    optional class weights (shape (C,)) and an ignored label value, as torch.nn.CrossEntropyLoss."""

    def __init__(self, weight=None, reduction: str = "mean", ignore_index: int | None = None):
        super().__init__()
        _reduction(reduction)
        self._weight, self._reduction, self._ignore_index = weight, reduction, ignore_index

    def build(self, scores_input_name: str, labels_name: str = "labels") -> str:
        weight_name = generate_graph_name("celoss.weight")
        inputs = [scores_input_name, labels_name]
        if self._weight is not None:
            add_constant(self.base, weight_name, self._weight)
            inputs.append(weight_name)
        if not node_arg_exists(self.base, labels_name):
            self.base.graph.input.append(_labels_like(self.base, scores_input_name, labels_name))
        loss, log_prob = generate_graph_name("loss"), generate_graph_name("log_prob")
        self.base.graph.node.append(
            onnx.helper.make_node(
                "SoftmaxCrossEntropyLoss",
                inputs,
                [loss, log_prob],
                generate_graph_name("SoftmaxCrossEntropyLoss"),
                reduction=self._reduction,
                ignore_index=self._ignore_index,
            )
        )
        return loss


def _labels_like(model: onnx.ModelProto, scores: str, labels: str) -> onnx.ValueInfoProto:
    """int64 labels shaped as the scores without their class axis. That axis is 1, the operator's;
    onnxblock drops the last, which is the same for (N, C) scores and wrong for (N, C, d1, ...)."""
    value = value_info_like(model, scores)
    value.name = labels
    tensor = value.type.tensor_type
    tensor.elem_type = onnx.TensorProto.INT64
    if tensor.HasField("shape") and len(tensor.shape.dim) >= 2:
        del tensor.shape.dim[1]
    return value


class BCEWithLogitsLoss(blocks.Block):
    """Binary cross entropy on logits x with targets t in [0, 1], as torch.nn.BCEWithLogitsLoss:
    weight * ((1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)), reduced.

    onnxblock writes it as -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))), which is the same
    number where both are finite but infinite or NaN once |x| is large (sigmoid rounds to 0 or 1);
    softplus(-x) = -log sigmoid(x) keeps every term finite, and its gradient is sigmoid(x) - t."""

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__()
        self._reduce = _reduction(reduction)
        self._weight, self._pos_weight = weight, pos_weight
        self._neg, self._softplus = blocks.Neg(), blocks._UnaryOp("Softplus")
        self._sub, self._add, self._mul = blocks.Sub(), blocks.Add(), blocks.Mul()

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        pos_weight_name = generate_graph_name("bceloss.pos_weight")
        weight_name = generate_graph_name("bceloss.weight")
        ones = generate_graph_name("bceloss.sub_ones")
        add_constant(self.base, ones, [1.0])
        target = _target(self.base, loss_input_name, target_name)

        softplus = self._softplus(self._neg(loss_input_name))  # -log sigmoid(x)
        if self._pos_weight is not None:
            add_constant(self.base, pos_weight_name, self._pos_weight)
            scale = self._add(ones, self._mul(self._sub(pos_weight_name, ones), target))
            softplus = self._mul(scale, softplus)
        loss = self._add(self._mul(self._sub(ones, target), loss_input_name), softplus)
        if self._weight is not None:
            add_constant(self.base, weight_name, self._weight)
            loss = self._mul(weight_name, loss)
        return _reduce(self._reduce, loss)
