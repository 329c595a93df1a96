"""LayerNormalization (opset 17): Y alone, as PyTorch exports it, or with the Mean and InvStdDev
outputs, whose gradients reach X as well. The kernels see X as [rows, inner], inner being the
axes from `axis` on; Scale and B hold one value per row position."""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .registry import op


def _rows(k, node, x, params) -> tuple[int, int]:
    """(rows, values per row) of X, checking Scale and B (`params`) hold one value per row position."""
    shape = k.shape(x)
    axis = int(node.attr("axis", -1)) % len(shape)
    rows, inner = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
    for name in params:
        if name and k.size(name) != inner:
            raise EdgetrainError(
                f"node '{node.name}' (LayerNormalization): '{name}' of shape {k.shape(name)} "
                f"must hold one value per normalized position {shape[axis:]}"
            )
    return rows, inner


def _moments(x, axis):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    return mean, ((x - mean) ** 2).mean(axis=axes, keepdims=True), axes


@op("LayerNormalization")
class LayerNormalization:
    @staticmethod
    def kernel(k, node):
        x, scale, b = (tuple(node.inputs) + ("",))[:3]
        y, mean, inv_std = (tuple(node.outputs) + ("", ""))[:3]
        eps = float(node.attr("epsilon", 1e-5))
        return [
            k.call(
                "et_layernorm_f32",
                *_rows(k, node, x, (scale, b)),
                eps,
                x,
                scale,
                b or None,
                y,
                mean or None,
                inv_std or None,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        x, scale, b = (tuple(node.inputs) + ("",))[:3]
        dy = list(dy) + [None] * (3 - len(dy))
        dy_y = dy[0] or g.const(np.zeros(g.shape(x), np.float32))
        dx, dscale, db = g.emit(
            "LayerNormalizationGrad",
            [dy_y, x, scale, dy[1] or "", dy[2] or ""],
            {"axis": int(node.attr("axis", -1)), "epsilon": float(node.attr("epsilon", 1e-5))},
            domain=ET_DOMAIN,
            outputs=3,
        )
        return [dx, dscale, db if b else None]


@op("LayerNormalizationGrad", domain=ET_DOMAIN)
class LayerNormalizationGrad:
    """(dY, X, Scale, dMean or "", dInvStdDev or "") -> (dX, dScale, dB)."""

    @staticmethod
    def kernel(k, node):
        dy, x, scale, dmean, dinv = node.inputs
        return [
            k.call(
                "et_layernorm_grad_f32",
                *_rows(k, node, x, (scale,)),
                float(node.attr("epsilon")),
                dy,
                x,
                scale,
                dmean or None,
                dinv or None,
                *node.outputs,
            )
        ]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1]), graph.shape(node.inputs[2]), graph.shape(node.inputs[2])]

    @staticmethod
    def reference(dy, x, scale, dmean=None, dinv=None, axis=-1, epsilon=1e-5):
        mean, var, axes = _moments(x.astype(np.float64), axis)
        inv = 1 / np.sqrt(var + epsilon)
        xhat = (x - mean) * inv
        g = dy * scale
        m = np.prod([x.shape[a] for a in axes])
        dx = inv * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
        if dmean is not None:
            dx = dx + dmean / m
        if dinv is not None:
            dx = dx - dinv * inv * inv * xhat / m
        lead = tuple(range(x.ndim - len(axes)))
        dscale = (dy * xhat).sum(axis=lead).reshape(scale.shape)
        return tuple(np.asarray(a, np.float32) for a in (dx, dscale, dy.sum(axis=lead).reshape(scale.shape)))
