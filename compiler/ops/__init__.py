"""Importing the op modules fills the registry."""

from . import elementwise, linalg, loss, reduce, shape, softmax  # noqa: F401
from .registry import REGISTRY, Call, Counter, KernelCtx, OpDef, Tensor, lookup, reference_ops

__all__ = ["REGISTRY", "Call", "Counter", "KernelCtx", "OpDef", "Tensor", "lookup", "reference_ops"]
