"""Optimizer semantics. The update itself runs in the generated C; this module describes it and
gives the ONNX reference its NumPy twin."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..ir import ET_DOMAIN
from ..ops.registry import Call, OptimizerDef, StepValue, Update, Var, op, optimizers


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer a trainer compiles in: its kind (an op block below), learning rate and the
    hyperparameters; each kind takes those its block's `hyper` names, the others are ignored."""

    kind: OptimType
    lr: float = 1e-3
    # AdamW defaults are ONNX Runtime 1.19's generated AdamW.
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.0
    momentum: float = 0.0  # SGD
    dampening: float = 0.0
    nesterov: bool = False
    max_grad_norm: float | None = None  # global-norm clipping before the update

    @property
    def binding(self) -> OptimizerDef:
        return optimizers()[self.kind.value]

    @property
    def state_slots(self) -> tuple[str, ...]:
        """Per-parameter state buffers, in checkpoint order."""
        return tuple(self.binding.slots(self.attrs()))

    def attrs(self) -> dict:
        """The kind's hyperparameters, each of its default's type (nesterov an int, as ONNX attributes)."""
        return {name: type(default)(getattr(self, name, default)) for name, default in self.binding.hyper.items()}

    def problem(self) -> str | None:
        """Why these hyperparameters are out of range or cannot go together, or None."""
        if self.max_grad_norm is not None and not 0.0 < self.max_grad_norm <= FLOAT32_MAX:
            return f"max_grad_norm must be a finite number > 0, got {self.max_grad_norm}"
        check = self.binding.check
        return in_range({"learning rate": self.lr}, {"learning rate": (0.0, None)}) or (
            check(self.attrs()) if check else None
        )


FLOAT32_MAX = float(np.finfo(np.float32).max)


def in_range(values: dict, bounds: dict[str, tuple[float, float | None]]) -> str | None:
    """Why a value is outside its [low, high) (high None: any float32), as torch.optim says it for
    its own; NaN is outside every range. None when each is inside."""
    for name, (low, high) in bounds.items():
        value = values[name]
        if not (low <= value < high if high is not None else low <= value <= FLOAT32_MAX):
            upper = f" and < {high:g}" if high is not None else ""
            return f"{name} must be a finite number >= {low:g}{upper}, got {value}"
    return None


# Adding an optimizer is one block here (an op in ET_DOMAIN: its hyperparameters, state slots,
# C kernel binding and NumPy reference), one C kernel in runtime_c/et_optim.h, and one parameter in
# tests/c/test_optimizer_registry.py. Nothing else names an optimizer: OptimType, the CLI's choices, the
# generated C and the checkpoint's state all follow the registry.


@op("AdamW", domain=ET_DOMAIN)
class AdamW:
    """(lr, step, W, G, M, V) -> (W, M, V): ONNX Runtime 1.19's AdamW, with t = step + 1."""

    hyper = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.0}

    @staticmethod
    def check(h):
        return in_range(h, {"beta1": (0.0, 1.0), "beta2": (0.0, 1.0), "eps": (0.0, None), "weight_decay": (0.0, None)})

    @staticmethod
    def slots(h):
        return ("exp_avg", "exp_avg_sq")

    @staticmethod
    def step_values(h):
        # Adam's bias corrections, folded into one step size per step
        return [
            StepValue(
                "float",
                "et_step_size",
                "et_adam_step_size",
                (Var("et_lr"), h["beta1"], h["beta2"], Var("et_step + 1u")),
            )
        ]

    @staticmethod
    def update(u: Update, h) -> Call:
        return Call(
            f"et_adamw{u.suffix}_f32",
            (
                *u.operand,
                Var("et_step_size"),
                u.lr,
                h["beta1"],
                h["beta2"],
                h["eps"],
                h["weight_decay"],
                u.weights,
                *u.grad,
                *u.state,
            ),
        )

    @staticmethod
    def shape(graph, node):
        return [graph.shape(n) for n in node.inputs[2:]]

    @staticmethod
    def reference(lr, step, w, g, m, v, beta1, beta2, eps, weight_decay):
        t = int(step) + 1
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        step_size = lr * np.sqrt(1 - beta2**t) / (1 - beta1**t)
        w = w - step_size * m / (np.sqrt(v) + eps)
        w = w - lr * weight_decay * w
        return [np.asarray(x, np.float32) for x in (w, m, v)]


@op("SGD", domain=ET_DOMAIN)
class SGD:
    """(lr, step, W, G[, Buf]) -> (W[, Buf]): torch.optim.SGD."""

    hyper = {"momentum": 0.0, "dampening": 0.0, "nesterov": 0, "weight_decay": 0.0}

    @staticmethod
    def slots(h):
        return ("momentum_buffer",) if h["momentum"] else ()

    @staticmethod
    def step_values(h):
        return [StepValue("int", "et_first_step", None, (Var("et_step == 0u"),))]

    @staticmethod
    def check(h):
        if h["nesterov"] and h["momentum"] <= 0:
            return "nesterov needs a positive momentum"
        return in_range(h, {"momentum": (0.0, None), "dampening": (0.0, None), "weight_decay": (0.0, None)})

    @staticmethod
    def update(u: Update, h) -> Call:
        return Call(
            f"et_sgd{u.suffix}_f32",
            (
                *u.operand,
                u.lr,
                h["momentum"],
                h["dampening"],
                h["nesterov"],
                h["weight_decay"],
                Var("et_first_step"),
                u.weights,
                *u.grad,
                *(u.state or [None]),
            ),
        )

    @staticmethod
    def shape(graph, node):
        return [graph.shape(n) for n in node.inputs[2:3] + node.inputs[4:]]

    @staticmethod
    def reference(lr, step, w, g, buf=None, momentum=0.0, dampening=0.0, nesterov=0, weight_decay=0.0):
        g = g + weight_decay * w
        if momentum:
            buf = g if int(step) == 0 else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
        return [np.asarray(x, np.float32) for x in ((w, buf) if momentum else (w,))]


# ONNX Runtime's enum of optimizers, one member per registered optimizer op.
OptimType = Enum("OptimType", {name: name for name in optimizers()}, module=__name__)  # type: ignore[misc]
OptimType.__doc__ = "The optimizers a trainer compiles in (onnxruntime.training.artifacts.OptimType)."
