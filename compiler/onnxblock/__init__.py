"""Custom losses and small heads, written as ONNX Runtime's onnxblock writes them (Block,
ForwardBlock, TrainingBlock, base, empty_base, loss.*, blocks.*), producing plain ONNX that
edgetrain compiles: `artifacts.generate_artifacts(model, loss=MyLossBlock())`, or by hand
`generate_artifacts(with_loss(block, model), loss=None)`.

Not here: onnxblock.optim (edgetrain writes the optimizer itself), save_checkpoint and
load_checkpoint_to_model (see edgetrain.api.CheckpointState), and the blocks outside the default
ONNX domain (LabelEncoder, ReduceAllL2); custom_op_library is refused."""

from . import blocks, loss
from .blocks import Block
from .model_accessor import base, custom_op_library, empty_base
from .onnxblock import ForwardBlock, TrainingBlock, with_loss

__all__ = [
    "Block",
    "ForwardBlock",
    "TrainingBlock",
    "base",
    "blocks",
    "custom_op_library",
    "empty_base",
    "loss",
    "with_loss",
]
