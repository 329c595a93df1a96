"""Importing every op module in this package fills the registry: adding an op is adding a block
to one of them (or a new module), never editing a list elsewhere."""

import importlib
import pkgutil

from .registry import (
    REGISTRY,
    Call,
    Counter,
    KernelCtx,
    OpDef,
    OptimizerDef,
    StepValue,
    Tensor,
    Update,
    Var,
    lookup,
    optimizers,
    reference_ops,
    require,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "REGISTRY",
    "Call",
    "Counter",
    "KernelCtx",
    "OpDef",
    "OptimizerDef",
    "StepValue",
    "Tensor",
    "Update",
    "Var",
    "lookup",
    "optimizers",
    "reference_ops",
    "require",
]
