from .losses import LossType, append_loss
from .optimizers import OptimizerSpec, OptimType

__all__ = ["LossType", "OptimType", "OptimizerSpec", "append_loss"]
