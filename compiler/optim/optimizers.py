"""Optimizer semantics. The update itself runs in the generated C; this module describes it and
gives the ONNX reference its NumPy twin."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..ir import ET_DOMAIN
from ..ops.registry import op


class OptimType(Enum):
    AdamW = "AdamW"
    SGD = "SGD"


@dataclass(frozen=True)
class OptimizerSpec:
    kind: OptimType = OptimType.AdamW
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
    def state_slots(self) -> tuple[str, ...]:
        """Per-parameter state buffers, in checkpoint order."""
        if self.kind is OptimType.AdamW:
            return ("exp_avg", "exp_avg_sq")
        return ("momentum_buffer",) if self.momentum else ()

    def attrs(self) -> dict:
        if self.kind is OptimType.AdamW:
            return {"beta1": self.beta1, "beta2": self.beta2, "eps": self.eps, "weight_decay": self.weight_decay}
        return {"momentum": self.momentum, "dampening": self.dampening, "nesterov": int(self.nesterov),
                "weight_decay": self.weight_decay}


@op("AdamW", domain=ET_DOMAIN)
class AdamW:
    """(lr, step, W, G, M, V) -> (W, M, V): ONNX Runtime 1.19's AdamW, with t = step + 1."""

    kernel = None  # the generated optimizer_step calls et_adamw_f32 directly

    @staticmethod
    def shape(graph, node):
        return [graph.shape(n) for n in node.inputs[2:]]

    @staticmethod
    def reference(lr, step, w, g, m, v, beta1, beta2, eps, weight_decay):
        t = int(step) + 1
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        step_size = lr * np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        w = w - step_size * m / (np.sqrt(v) + eps)
        w = w - lr * weight_decay * w
        return [np.asarray(x, np.float32) for x in (w, m, v)]


@op("SGD", domain=ET_DOMAIN)
class SGD:
    """(lr, step, W, G[, Buf]) -> (W[, Buf]): torch.optim.SGD."""

    kernel = None

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
