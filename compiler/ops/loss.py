"""Loss ops: softmax cross-entropy (ONNX's op, our gradient) and stable BCE-with-logits."""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN, Node
from .registry import op

NO_IGNORE = -(2**31)  # ONNX's "no ignore_index": no int32 label can equal it and pass the range check


def _ce_dims(k, scores):
    shape = k.shape(scores)
    return shape[0], shape[1], int(np.prod(shape[2:], dtype=np.int64))


@op("SoftmaxCrossEntropyLoss", index_inputs=(1,))
class SoftmaxCrossEntropyLoss:
    """Mean reduction only (PyTorch's default): weighted mean over positions whose label is not ignored.
    The labels are a model input: the kernel reads them as int32."""

    @staticmethod
    def kernel(k, node):
        scores, labels, weights = (tuple(node.inputs) + ("",))[:3]
        reduction = node.attr("reduction", "mean")
        if reduction != "mean":
            raise EdgetrainError(
                f"node '{node.name}' (SoftmaxCrossEntropyLoss): reduction '{reduction}' is not supported (mean is)"
            )
        if labels in k.graph.constants:
            raise EdgetrainError(
                f"node '{node.name}' (SoftmaxCrossEntropyLoss): the labels must be a model input, not a constant"
            )
        n, c, d = _ce_dims(k, scores)
        ignore = int(node.attr("ignore_index", NO_IGNORE))
        return [
            k.call("et_check_labels", n * d, labels, c, ignore, checked=True),
            k.call(
                "et_softmax_cross_entropy_f32",
                n,
                c,
                d,
                scores,
                labels,
                weights or None,
                ignore,
                node.outputs[0],
                node.outputs[1],
            ),
        ]

    @staticmethod
    def grad(g, node, dy):
        scores, labels, weights = (tuple(node.inputs) + ("",))[:3]
        attrs = {"ignore_index": int(node.attr("ignore_index", NO_IGNORE))}
        inputs = [dy[0], node.outputs[1], labels] + ([weights] if weights else [])
        return [g.emit("SoftmaxCrossEntropyLossGrad", inputs, attrs, domain=ET_DOMAIN), None, None]

    @staticmethod
    def variant(graph, node, index, training):
        """The kernel writes the log-probabilities too: give them a value when the model does not."""
        if len(node.outputs) > 1 and node.outputs[1]:
            return node
        log_prob = graph.add_value(graph.fresh("log_prob"), graph.shape(node.inputs[0]))
        return Node(node.op, node.inputs, (node.outputs[0], log_prob), node.attrs, node.name)


@op("SoftmaxCrossEntropyLossGrad", domain=ET_DOMAIN)
class SoftmaxCrossEntropyLossGrad:
    @staticmethod
    def kernel(k, node):
        dloss, log_prob, labels, weights = (tuple(node.inputs) + ("",))[:4]
        n, c, d = _ce_dims(k, log_prob)
        return [
            k.call(
                "et_softmax_cross_entropy_grad_f32",
                n,
                c,
                d,
                dloss,
                log_prob,
                labels,
                weights or None,
                int(node.attr("ignore_index")),
                node.outputs[0],
            )
        ]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1])]

    @staticmethod
    def reference(dloss, log_prob, labels, weights=None, ignore_index=NO_IGNORE):
        n, c = log_prob.shape[:2]
        lp = log_prob.reshape(n, c, -1)
        lab = labels.reshape(n, -1).astype(np.int64)
        keep = lab != ignore_index
        safe = np.where(keep, lab, 0)
        w = (weights[safe] if weights is not None else np.ones_like(safe, np.float32)) * keep
        onehot = np.zeros_like(lp)
        np.put_along_axis(onehot, safe[:, None, :], 1.0, axis=1)
        total = w.sum()
        scale = np.float32(dloss) * w / total if total > 0 else np.zeros_like(w)
        return (((np.exp(lp) - onehot) * scale[:, None, :]).reshape(log_prob.shape).astype(np.float32),)


@op("BCEWithLogits", domain=ET_DOMAIN)
class BCEWithLogits:
    """Elementwise max(x,0) - x*t + log(1+exp(-|x|)): finite for any logit, unlike log(sigmoid(x))."""

    @staticmethod
    def kernel(k, node):
        x, t = node.inputs
        return [k.call("et_bce_with_logits_f32", k.size(x), x, t, node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        x, t = node.inputs
        return [g.emit("BCEWithLogitsGrad", [dy[0], x, t], domain=ET_DOMAIN), None]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(x, t):
        return ((np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))).astype(np.float32),)


@op("BCEWithLogitsGrad", domain=ET_DOMAIN)
class BCEWithLogitsGrad:
    @staticmethod
    def kernel(k, node):
        return [k.call("et_bce_with_logits_grad_f32", k.size(node.outputs[0]), *node.inputs, node.outputs[0])]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1])]

    @staticmethod
    def reference(dl, x, t):
        return ((dl * (1 / (1 + np.exp(-x)) - t)).astype(np.float32),)
