"""Building blocks: each call adds nodes (and their constants) to the current base model and
returns the name of what it computed, so blocks compose by passing names. Every block here
emits plain ONNX of the default domain, named as onnxblock names it (onnx::<what>::<n>).
Constants (a Pow's exponent, a Constant block, a loss's weights) come from Constant nodes where
onnxblock makes initializers: they are not parameters, so they stay out of the checkpoint."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import onnx

from . import model_accessor
from ._graph_utils import add_constant, generate_graph_name, value_info_like

__all__ = [
    "Abs",
    "Add",
    "Block",
    "Cast",
    "Clip",
    "Constant",
    "Div",
    "InputLike",
    "Linear",
    "Log",
    "Mul",
    "Neg",
    "PassThrough",
    "Pow",
    "ReduceMean",
    "ReduceSum",
    "SequenceConstruct",
    "Sigmoid",
    "Sub",
]


class Block(ABC):
    """A piece of model. Subclasses implement `build(*input_names)`, which changes `self.base` (the
    current base model) and returns the name(s) of its result; calling the block runs build and
    checks that the model is still valid ONNX. Subclasses need not call Block.__init__.

    temp_file_name: ONNX Runtime's file for checking models over 2 GB; accepted so its callers run
    unchanged, and unused: the checker here takes a model of any size from memory."""

    # The model build() adds to: set by each call before build runs.
    base: onnx.ModelProto

    def __init__(self, temp_file_name: str = "temp.onnx"):
        self.base = None  # type: ignore[assignment]  # until the block is first called

    @abstractmethod
    def build(self, *args, **kwargs):
        """Add this block's nodes on top of the named inputs; return the output name(s)."""

    def __call__(self, *args, **kwargs):
        self.base = model_accessor.current().model
        output = self.build(*args, **kwargs)
        onnx.checker.check_model(self.base, full_check=True)
        return output

    def infer_shapes_on_base(self) -> onnx.ModelProto:
        """The current base model with the types shape inference gives every value."""
        return onnx.shape_inference.infer_shapes(model_accessor.current().model)


def _add_node(
    model: onnx.ModelProto, op_type: str, inputs: list[str], output_token: str, node_token: str = "", **attributes
) -> str:
    output = generate_graph_name(output_token)
    model.graph.node.append(
        onnx.helper.make_node(op_type, inputs, [output], generate_graph_name(node_token or op_type), **attributes)
    )
    return output


def _add_float(model: onnx.ModelProto, token: str, value, dims=(1,)) -> str:
    """A float32 constant holding `value` (onnxblock keeps its scalars as shape [1])."""
    return add_constant(model, generate_graph_name(token), np.full(dims, value, np.float32))


class _BinaryOp(Block):
    def __init__(self, op_type: str):
        super().__init__()
        self._op_type = op_type

    def build(self, input_name1: str, input_name2: str) -> str:
        return _add_node(self.base, self._op_type, [input_name1, input_name2], f"{self._op_type.lower()}_output")


class Add(_BinaryOp):
    def __init__(self):
        super().__init__("Add")


class Sub(_BinaryOp):
    def __init__(self):
        super().__init__("Sub")


class Mul(_BinaryOp):
    def __init__(self):
        super().__init__("Mul")


class Div(_BinaryOp):
    def __init__(self):
        super().__init__("Div")


class _UnaryOp(Block):
    def __init__(self, op_type: str, **attributes):
        super().__init__()
        self._op_type = op_type
        self._attributes = attributes

    def build(self, input_name: str) -> str:
        return _add_node(self.base, self._op_type, [input_name], f"{self._op_type.lower()}_output", **self._attributes)


class ReduceMean(_UnaryOp):
    """The mean over every axis (onnxblock gives no axes)."""

    def __init__(self, keepdims: bool = True):
        super().__init__("ReduceMean", keepdims=int(keepdims))


class ReduceSum(_UnaryOp):
    """The sum over every axis."""

    def __init__(self, keepdims: bool = True):
        super().__init__("ReduceSum", keepdims=int(keepdims))


class Sigmoid(_UnaryOp):
    def __init__(self):
        super().__init__("Sigmoid")


class Log(_UnaryOp):
    def __init__(self):
        super().__init__("Log")


class Neg(_UnaryOp):
    def __init__(self):
        super().__init__("Neg")


class Abs(_UnaryOp):
    def __init__(self):
        super().__init__("Abs")


class Pow(Block):
    """input ** exponent, the exponent a float constant."""

    def __init__(self, exponent: float):
        super().__init__()
        self._exponent = exponent

    def build(self, pow_input_name: str) -> str:
        exponent = _add_float(self.base, "pow_exponent", self._exponent)
        return _add_node(self.base, "Pow", [pow_input_name, exponent], "pow_output")


class Constant(Block):
    """A float constant of shape [1]; calling it with no arguments returns its name."""

    def __init__(self, value_float: float):
        super().__init__()
        self._value = value_float

    def build(self) -> str:
        return _add_float(self.base, "initializer", self._value)


class Clip(Block):
    """Clip to [clip_min, clip_max]; a bound left None is not applied. The bounds are scalars, as
    the ONNX operator asks."""

    def __init__(self, clip_min: float | None = None, clip_max: float | None = None):
        super().__init__()
        self._min, self._max = clip_min, clip_max

    def build(self, clip_input_name: str) -> str:
        bounds = [
            "" if value is None else _add_float(self.base, token, value, dims=())
            for token, value in (("clip_min", self._min), ("clip_max", self._max))
        ]
        while bounds and not bounds[-1]:
            bounds.pop()
        return _add_node(self.base, "Clip", [clip_input_name] + bounds, "clip_output")


class Cast(Block):
    def __init__(self, to: int):
        super().__init__()
        self._to = to

    def build(self, cast_input_name: str) -> str:
        return _add_node(self.base, "Cast", [cast_input_name], "cast.output", to=self._to)


class SequenceConstruct(Block):
    def build(self, *sequence_input_names: str) -> str:
        return _add_node(self.base, "SequenceConstruct", list(sequence_input_names), "sequenceconstruct_output")


class PassThrough(Block):
    """Adds nothing: returns its input names as a tuple (a model whose output already is the loss)."""

    def build(self, *input_names: str) -> tuple[str, ...]:
        return input_names


class InputLike(Block):
    """A new graph input with the type and shape of the value named `like`; returns its name (the
    one given to the call, or a generated one)."""

    def __init__(self, like: str):
        super().__init__()
        self._like = like

    def build(self, input_name: str | None = None) -> str:
        value = value_info_like(self.base, self._like)
        value.name = input_name or generate_graph_name("input")
        self.base.graph.input.append(value)
        return value.name


class Linear(Block):
    """y = alpha * x @ W + beta * b (Gemm), W of shape (in_features, out_features) and b of
    (out_features,), both drawn from numpy's global standard normal generator as onnxblock does.
    They are recorded as parameters this block made, so a TrainingBlock around it trains them."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, alpha: float = 1.0, beta: float = 1.0):
        super().__init__()
        self._in_features, self._out_features = in_features, out_features
        self._bias, self._alpha, self._beta = bias, alpha, beta

    def build(self, linear_input_name: str) -> str:
        shapes: list[tuple[str, tuple[int, ...]]] = [("linear.weight", (self._in_features, self._out_features))]
        if self._bias:
            shapes.append(("linear.bias", (self._out_features,)))
        names = []
        for token, shape in shapes:
            names.append(generate_graph_name(token))
            self.base.graph.initializer.append(
                onnx.numpy_helper.from_array(np.random.randn(*shape).astype(np.float32), names[-1])
            )
        model_accessor.current().parameters_made.extend(names)
        return _add_node(
            self.base,
            "Gemm",
            [linear_input_name] + names,
            "linear.output",
            "linear",
            alpha=float(self._alpha),
            beta=float(self._beta),
        )
