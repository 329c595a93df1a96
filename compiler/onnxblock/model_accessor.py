"""The model the blocks build on: `base(model)` and `empty_base()` make it current for the duration
of a `with` statement, as onnxblock's context managers do."""

from __future__ import annotations

import copy
from contextlib import contextmanager

import onnx

from ..errors import EdgetrainError

# Blocks built without a base model say what to write: a new model imports the default domain only,
# at the opset every edgetrain build supports (the frontend converts it to the one it computes in).
DEFAULT_OPSET = 17


class ModelAccessor:
    """Holds the model the blocks change. `parameters_made` lists the initializers blocks created as
    layer parameters (a Linear's weight and bias), in creation order: a TrainingBlock trains those of
    its own blocks unless told otherwise."""

    def __init__(self, model: onnx.ModelProto):
        self._model = model
        self.parameters_made: list[str] = []

    @property
    def model(self) -> onnx.ModelProto:
        return self._model


_GLOBAL_ACCESSOR: ModelAccessor | None = None


def current() -> ModelAccessor:
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError(
            "No base model: call blocks inside `with onnxblock.base(model)` or `with onnxblock.empty_base()`."
        )
    return _GLOBAL_ACCESSOR


@contextmanager
def _registered(model: onnx.ModelProto):
    global _GLOBAL_ACCESSOR
    if _GLOBAL_ACCESSOR is not None:
        raise RuntimeError("Base onnx model already exists. Cannot create multiple ModelAccessors.")
    _GLOBAL_ACCESSOR = ModelAccessor(model)
    try:
        yield _GLOBAL_ACCESSOR
    finally:
        _GLOBAL_ACCESSOR = None


@contextmanager
def base(model: onnx.ModelProto):
    """Blocks called inside build on a copy of `model`; the accessor yielded holds it (`.model`)."""
    if model is None:
        raise RuntimeError(
            "Base onnx model cannot be None. Please use onnxblock.empty_base if you would like "
            "to build a model from scratch."
        )
    with _registered(copy.deepcopy(model)) as accessor:
        yield accessor


@contextmanager
def empty_base(opset_version: int | None = None):
    """Blocks called inside build a new model of the default ONNX domain at `opset_version`
    (default DEFAULT_OPSET), with the oldest IR version that opset allows so older runtimes load it."""
    opset = onnx.helper.make_opsetid("", opset_version or DEFAULT_OPSET)
    model = onnx.ModelProto(ir_version=onnx.helper.find_min_ir_version_for([opset]), producer_name="edgetrain")
    model.graph.name = "graph"
    model.opset_import.append(opset)
    with _registered(model) as accessor:
        yield accessor


@contextmanager
def custom_op_library(custom_op_library_path):
    """Refused: edgetrain compiles every op to C itself, so there is no op library to load."""
    raise EdgetrainError(
        "custom op libraries are not supported: edgetrain compiles each op of the model to C "
        "and has no runtime to load a library into"
    )
    yield  # unreachable: it makes this a generator, so the refusal comes at `with`, where ORT checks the path
