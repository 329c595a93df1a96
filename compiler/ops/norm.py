"""BatchNormalization and InstanceNormalization.

BatchNormalization as a model is written either in inference form (training_mode=0: exported in
eval mode, the statistics are constants) or in training form (training_mode=1: exported in
training mode). In training form its running mean and variance are buffers: the training graph
runs our BatchNormalizationTraining, which normalizes with the batch statistics and updates the
running ones exactly as PyTorch does (unbiased variance; ONNX's spec and ONNX Runtime use the
biased one), while the eval and inference graphs run the inference form on the running
statistics, as a PyTorch module does in eval mode.

The kernels see [N, C, spatial...] as [N, C, inner].
"""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN, Node
from ..ir.graph import frozen_attrs
from .registry import op


def _dims(shape) -> tuple[int, int, int]:
    return shape[0], shape[1], int(np.prod(shape[2:], dtype=np.int64))


def _channels(x) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Axes to reduce over, and the shape that broadcasts a per-channel vector against x."""
    return (0,) + tuple(range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)


def _f32(*arrays):
    return tuple(np.asarray(a, np.float32) for a in arrays)


@op("BatchNormalization", const_inputs=(3, 4))
class BatchNormalization:
    """Inference form: Y = (X - mean) * scale / sqrt(var + epsilon) + B with constant mean and
    var. A training-form node reaches the kernel only in eval and inference graphs, when its
    statistics are computed in the graph rather than tracked: it normalizes with the batch's."""

    inplace = (0,)  # a channel's Y is written after that channel's X is read (and its moments taken)

    @staticmethod
    def kernel(k, node):
        x, scale, b, mean, var = node.inputs
        eps = float(node.attr("epsilon", 1e-5))
        if node.attr("training_mode", 0):
            return [
                k.call(
                    "et_batchnorm_train_f32",
                    *_dims(k.shape(x)),
                    eps,
                    0.0,
                    x,
                    scale,
                    b,
                    None,
                    None,
                    node.outputs[0],
                    None,
                    None,
                    None,
                    None,
                )
            ]
        return [k.call("et_batchnorm_f32", *_dims(k.shape(x)), eps, x, scale, b, mean, var, node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        x, scale, b, mean, var = node.inputs
        eps = float(node.attr("epsilon", 1e-5))
        if g.needs(1):
            dx, dscale, db = g.emit(
                "BatchNormalizationInferenceGrad",
                [dy[0], x, scale, mean, var],
                {"epsilon": eps},
                domain=ET_DOMAIN,
                outputs=3,
            )
            return [dx, dscale, db, None, None]
        # Without the scale's gradient, nothing of the forward pass is read (frozen statistics, as
        # when training a deployed model's biases): dB sums dY per channel, and dX scales dY per
        # channel, in dY's bytes when dY dies there.
        shape = g.shape(dy[0])
        db = g.emit("ReduceSum", [dy[0], g.ints([0, *range(2, len(shape))])], {"keepdims": 0}) if g.needs(2) else None
        dx = None
        if g.needs(0):
            var_eps = g.value_of(var).astype(np.float32) + np.float32(eps)
            per_channel = g.emit("Mul", [scale, g.const(np.float32(1) / np.sqrt(var_eps))])
            dx = g.emit("Mul", [dy[0], g.reshape(per_channel, (shape[1],) + (1,) * (len(shape) - 2))])
        return [dx, None, db, None, None]

    @staticmethod
    def state(node):
        return {3: 1, 4: 2} if node.attr("training_mode", 0) else {}

    @staticmethod
    def variant(graph, node, index, training):
        if not node.attr("training_mode", 0):
            return node
        x, scale, b, mean, var = node.inputs
        # Statistics computed in the graph (PyTorch's track_running_stats=False) are not state:
        # such a layer normalizes with the batch statistics in eval mode too.
        tracked = mean in graph.buffers and var in graph.buffers
        if not training:
            if tracked and set(node.outputs[1:]) & set(graph.outputs):
                raise EdgetrainError(
                    f"BatchNormalization '{node.name}': its running statistics are state that "
                    "training updates, not model outputs"
                )
            return (
                Node(
                    node.op, node.inputs, node.outputs[:1], frozen_attrs({**node.attrs, "training_mode": 0}), node.name
                )
                if tracked
                else node
            )
        n, c, inner = _dims(graph.shape(x))
        if n * inner < 2:
            raise EdgetrainError(
                f"BatchNormalization '{node.name}' in training mode needs more than one value "
                f"per channel (batch {n} x spatial {inner}), as PyTorch does"
            )
        outputs = list(node.outputs) + [""] * (3 - len(node.outputs))
        if tracked:  # the running statistics are updated even when the model leaves them unnamed
            outputs[1:3] = [o or graph.add_value(graph.fresh("running_stat"), (c,)) for o in outputs[1:3]]
        else:
            outputs[1:3] = ["", ""]
        saved = [graph.add_value(graph.fresh(hint), (c,)) for hint in ("batch_mean", "batch_inv_std")]
        attrs = {"epsilon": float(node.attr("epsilon", 1e-5)), "momentum": float(node.attr("momentum", 0.9))}
        return Node(
            "BatchNormalizationTraining",
            (x, scale, b) + ((mean, var) if tracked else ()),
            tuple(outputs[:3] + saved),
            frozen_attrs(attrs),
            node.name,
            ET_DOMAIN,
        )


@op("BatchNormalizationTraining", domain=ET_DOMAIN)
class BatchNormalizationTraining:
    """(X, scale, B[, running_mean, running_var]) -> (Y, running_mean', running_var', batch mean,
    batch 1/sqrt(var + epsilon)). Without the running inputs, outputs 1 and 2 are empty."""

    inplace = (0,)  # a channel's Y is written after that channel's X is read (and its moments taken)

    @staticmethod
    def kernel(k, node):
        x, scale, b, mean, var = tuple(node.inputs) + ("",) * (5 - len(node.inputs))
        y, mean_out, var_out, saved_mean, saved_inv_std = node.outputs
        return [
            k.call(
                "et_batchnorm_train_f32",
                *_dims(k.shape(x)),
                float(node.attr("epsilon")),
                float(node.attr("momentum")),
                x,
                scale,
                b,
                mean or None,
                var or None,
                y,
                mean_out or None,
                var_out or None,
                saved_mean,
                saved_inv_std,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        x, scale = node.inputs[:2]
        dx, dscale, db = g.emit(
            "BatchNormalizationGrad", [dy[0], x, scale, *node.outputs[3:]], domain=ET_DOMAIN, outputs=3
        )
        return [dx, dscale, db, None, None][: len(node.inputs)]

    @staticmethod
    def state(node):
        return {3: 1, 4: 2} if len(node.inputs) > 3 else {}

    @staticmethod
    def shape(graph, node):
        c = graph.shape(node.inputs[0])[1]
        return [graph.shape(node.inputs[0])] + [(c,)] * 4

    @staticmethod
    def reference(x, scale, b, mean=None, var=None, epsilon=1e-5, momentum=0.9):
        axes, bshape = _channels(x)
        count = x.size // x.shape[1]
        batch_mean, batch_var = x.mean(axis=axes), x.var(axis=axes)
        inv_std = 1 / np.sqrt(batch_var + epsilon)
        y = (x - batch_mean.reshape(bshape)) * (scale * inv_std).reshape(bshape) + b.reshape(bshape)
        if mean is None:
            new_mean = new_var = np.zeros(0, np.float32)
        else:
            new_mean = momentum * mean + (1 - momentum) * batch_mean
            new_var = momentum * var + (1 - momentum) * batch_var * count / (count - 1)
        return _f32(y, new_mean, new_var, batch_mean, inv_std)


def _norm_grad(dy, x, scale, mean, inv_std, axes, bshape):
    """Backward through normalization with the statistics of the reduced `axes` themselves."""
    count = dy.size // np.prod([dy.shape[a] for a in range(dy.ndim) if a not in axes])
    xmu = x - mean
    sum_dy = dy.sum(axis=axes, keepdims=True)
    sum_dy_xmu = (dy * xmu).sum(axis=axes, keepdims=True)
    dx = (dy - sum_dy / count - xmu * sum_dy_xmu * inv_std**2 / count) * scale.reshape(bshape) * inv_std
    return dx, sum_dy, sum_dy_xmu * inv_std


@op("BatchNormalizationGrad", domain=ET_DOMAIN)
class BatchNormalizationGrad:
    """(dY, X, scale, batch mean, batch inv_std) -> (dX, dscale, dB), through the batch statistics."""

    inplace = (0, 1)  # a channel's dX is written after that channel's sums are taken

    @staticmethod
    def kernel(k, node):
        return [k.call("et_batchnorm_grad_f32", *_dims(k.shape(node.inputs[1])), *node.inputs, *node.outputs)]

    @staticmethod
    def shape(graph, node):
        c = graph.shape(node.inputs[1])[1]
        return [graph.shape(node.inputs[1]), (c,), (c,)]

    @staticmethod
    def reference(dy, x, scale, mean, inv_std):
        axes, bshape = _channels(x)
        dx, dsum, dscale = _norm_grad(dy, x, scale, mean.reshape(bshape), inv_std.reshape(bshape), axes, bshape)
        return _f32(dx, dscale.ravel(), dsum.ravel())


@op("BatchNormalizationInferenceGrad", domain=ET_DOMAIN)
class BatchNormalizationInferenceGrad:
    """(dY, X, scale, mean, var) -> (dX, dscale, dB) with mean and var constant."""

    @staticmethod
    def kernel(k, node):
        return [
            k.call(
                "et_batchnorm_inference_grad_f32",
                *_dims(k.shape(node.inputs[1])),
                float(node.attr("epsilon")),
                *node.inputs,
                *node.outputs,
            )
        ]

    @staticmethod
    def shape(graph, node):
        c = graph.shape(node.inputs[1])[1]
        return [graph.shape(node.inputs[1]), (c,), (c,)]

    @staticmethod
    def reference(dy, x, scale, mean, var, epsilon):
        axes, bshape = _channels(x)
        inv_std = 1 / np.sqrt(var + epsilon)
        xhat = (x - mean.reshape(bshape)) * inv_std.reshape(bshape)
        return _f32(dy * (scale * inv_std).reshape(bshape), (dy * xhat).sum(axis=axes), dy.sum(axis=axes))


@op("InstanceNormalization")
class InstanceNormalization:
    @staticmethod
    def kernel(k, node):
        x, scale, b = node.inputs
        return [
            k.call(
                "et_instancenorm_f32",
                *_dims(k.shape(x)),
                float(node.attr("epsilon", 1e-5)),
                x,
                scale,
                b,
                node.outputs[0],
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        x, scale, _ = node.inputs
        dx, dscale, db = g.emit(
            "InstanceNormalizationGrad",
            [dy[0], x, scale],
            {"epsilon": float(node.attr("epsilon", 1e-5))},
            domain=ET_DOMAIN,
            outputs=3,
        )
        return [dx, dscale, db]


@op("InstanceNormalizationGrad", domain=ET_DOMAIN)
class InstanceNormalizationGrad:
    """(dY, X, scale) -> (dX, dscale, dB); the per-(n, c) statistics are recomputed from X."""

    @staticmethod
    def kernel(k, node):
        return [
            k.call(
                "et_instancenorm_grad_f32",
                *_dims(k.shape(node.inputs[1])),
                float(node.attr("epsilon")),
                *node.inputs,
                *node.outputs,
            )
        ]

    @staticmethod
    def shape(graph, node):
        c = graph.shape(node.inputs[1])[1]
        return [graph.shape(node.inputs[1]), (c,), (c,)]

    @staticmethod
    def reference(dy, x, scale, epsilon):
        axes, bshape = tuple(range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
        mean = x.mean(axis=axes, keepdims=True)
        inv_std = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + epsilon)
        dx, dsum, dscale = _norm_grad(dy, x, scale, mean, inv_std, axes, bshape)
        return _f32(dx, dscale.sum(axis=0).ravel(), dsum.sum(axis=0).ravel())
