"""Blocks that finish a model: ForwardBlock (the forward model with the block's result as its
output), TrainingBlock (the model a trainer is compiled from, and its parameters), and with_loss,
the step generate_artifacts takes for a loss given as a block."""

from __future__ import annotations

import copy
from abc import abstractmethod

import onnx

from ..errors import EdgetrainError
from . import model_accessor
from ._graph_utils import register_graph_outputs
from .blocks import Block

__all__ = ["ForwardBlock", "TrainingBlock", "with_loss"]


class ForwardBlock(Block):
    """A block whose build returns the name(s) that become the model's outputs; after the call,
    to_model_proto() is the base model with those outputs (and the base model becomes it)."""

    def __init__(self) -> None:
        super().__init__()
        self._model = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Stack blocks on the inputs; return the name(s) of the graph output(s)."""

    def to_model_proto(self) -> onnx.ModelProto:
        if self._model is None:
            raise RuntimeError("Please build the forward models first before trying to retrieve it.")
        return self._model

    def __call__(self, *args, **kwargs):
        accessor = model_accessor.current()
        self.base = accessor.model
        output = self.build(*args, **kwargs)
        self._model = self.infer_shapes_on_base()
        register_graph_outputs(self._model, output)
        accessor.model.CopyFrom(self._model)
        return output


class TrainingBlock(Block):
    """A block whose build returns the loss's name (first) and any other outputs. After the call:

    to_model_proto() -> (training model, eval model): plain ONNX, the base model with those outputs;
    the eval model has Dropout and BatchNormalization in inference mode. Unlike ONNX Runtime's, they
    hold no gradient graph: edgetrain's compiler derives it (generate_artifacts(training_model,
    loss=None, requires_grad=[p.name for p in trainable])).

    parameters() -> (trainable, frozen) initializers, in model order. Trainable: the names given to
    requires_grad(name), as ONNX Runtime's, and also the parameters this block's own blocks created
    (a Linear head's weight and bias, whose generated names the user cannot know beforehand) unless
    requires_grad(name, False) froze them. Frozen: the names given requires_grad(name, False)."""

    def __init__(self) -> None:
        super().__init__()
        self._requires_grad: set[str] = set()
        self._frozen_params: set[str] = set()
        self._parameters = None
        self._training_model = None
        self._eval_model = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Stack blocks on the inputs; return the loss's name (then any other outputs' names)."""

    def requires_grad(self, argument_name: str, value: bool = True) -> None:
        """Train (value True) or freeze (False) the initializer `argument_name`; the last word wins."""
        if value:
            self._requires_grad.add(argument_name)
            self._frozen_params.discard(argument_name)
        else:
            self._requires_grad.discard(argument_name)
            self._frozen_params.add(argument_name)

    def parameters(self) -> tuple[list[onnx.TensorProto], list[onnx.TensorProto]]:
        if self._parameters is None:
            raise RuntimeError("Please build the training model first before trying to retrieve the parameters.")
        return self._parameters

    def to_model_proto(self) -> tuple[onnx.ModelProto, onnx.ModelProto]:
        if self._training_model is None or self._eval_model is None:
            raise RuntimeError("Please build the training and eval models first before trying to retrieve them.")
        return self._training_model, self._eval_model

    def __call__(self, *args, **kwargs):
        accessor = model_accessor.current()
        self.base = accessor.model
        made_before = len(accessor.parameters_made)
        output = self.build(*args, **kwargs)
        model = self.infer_shapes_on_base()
        register_graph_outputs(model, output)
        trainable = self._requires_grad | (set(accessor.parameters_made[made_before:]) - self._frozen_params)
        self._parameters = (
            [t for t in model.graph.initializer if t.name in trainable],
            [t for t in model.graph.initializer if t.name in self._frozen_params],
        )
        self._training_model, self._eval_model = model, _inference_mode(model)
        accessor.model.CopyFrom(model)
        return output


def _inference_mode(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with Dropout's training_mode input dropped and BatchNormalization's attribute 0."""
    model = copy.deepcopy(model)
    for node in model.graph.node:
        if node.op_type == "Dropout" and len(node.input) > 2:
            node.input[2] = ""
        for attribute in node.attribute:
            if node.op_type == "BatchNormalization" and attribute.name == "training_mode":
                attribute.i = 0
    return model


def with_loss(
    block: Block,
    model: onnx.ModelProto,
    loss_input_names: list[str] | None = None,
    *,
    additional_output_names: list[str] | None = None,
) -> onnx.ModelProto:
    """`model` with the loss `block` on top, as generate_artifacts builds it for a loss given as a
    block: the block is called with `loss_input_names`, or else every output name of the model. The
    result's outputs are the loss (a scalar), then the block's other results and
    additional_output_names; its new inputs are the targets the block declared. Shapes are inferred.
    A block that fails raises EdgetrainError naming the block and the reason, in one line."""
    if not isinstance(block, Block):
        raise EdgetrainError(f"a loss must be an edgetrain.onnxblock.Block or a LossType, got {type(block).__name__}")
    names = list(loss_input_names) if loss_input_names else [value.name for value in model.graph.output]
    try:
        with model_accessor.base(model) as accessor:
            output = block(*names)
            outputs = [output] if isinstance(output, str) else list(output)
            result = onnx.shape_inference.infer_shapes(accessor.model, strict_mode=True)
            register_graph_outputs(result, outputs + list(additional_output_names or []))
    except (
        LookupError,
        RuntimeError,
        ValueError,
        TypeError,
        onnx.checker.ValidationError,
        onnx.shape_inference.InferenceError,
    ) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EdgetrainError(f"loss block {type(block).__name__}: {reason}") from None
    _check_scalar(result.graph.output[0])
    return result


def _check_scalar(loss: onnx.ValueInfoProto) -> None:
    dims = loss.type.tensor_type.shape.dim
    if any(not (dim.HasField("dim_value") and dim.dim_value == 1) for dim in dims):
        shape = ", ".join(str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in dims)
        raise EdgetrainError(
            f"the loss '{loss.name}' must be a scalar, but has shape ({shape}); a loss with "
            "reduction='none' needs a reducing block after it"
        )
