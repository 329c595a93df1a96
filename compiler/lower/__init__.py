"""Lowering: the trainer (edgetrain.autodiff's Trainer, the graph split into the functions the C
exposes) -> a Program. For each C function (train_step, eval_step, infer) the list of kernel calls
the op registry binds, their tensors referenced by name with each tensor's type (4-byte words and
dtype) and, for tensors outside the arena, their fixed storage (caller buffers, parameters,
buffers, compiled constants); the optimizer's updates (optimizer_step's, or the fused ones placed
inside train_step) bound through the registry like every other op; and what the checkpoint
functions and the parameter table need. No arena offsets: memory planning (edgetrain.memory.plan)
takes the Program and places the arena tensors; codegen emits the C from both."""

from .program import Affine, Arg, Floats, GradRef, LoweredFunction, NodeInfo, ParamInfo, Program, StateRef, TensorType
from .lowering import lower, lower_inference

__all__ = [
    "Affine",
    "Arg",
    "Floats",
    "GradRef",
    "LoweredFunction",
    "NodeInfo",
    "ParamInfo",
    "Program",
    "StateRef",
    "TensorType",
    "lower",
    "lower_inference",
]
