"""Assemble the trainer: the forward graph plus loss and backward nodes, split into the functions
the generated C exposes (train_step, eval_step, infer)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .autodiff import differentiate
from .errors import EdgetrainError
from .ir import ET_DOMAIN, Graph, Node
from .ir.graph import frozen_attrs
from .optim import LossType, OptimizerSpec, append_loss

COUNTER = "dropout_counter"  # the training-step counter that seeds dropout masks


@dataclass
class Trainer:
    graph: Graph  # every value of every function
    train_nodes: list[Node]
    eval_nodes: list[Node]
    infer_nodes: list[Node]
    loss: str
    labels: str | None
    trainable: list[str]
    frozen: list[str]
    grads: dict[str, str | None]  # trainable parameter -> its gradient value
    optimizer: OptimizerSpec

    @property
    def params(self) -> list[str]:
        """All parameters in checkpoint order: the model's initializer order."""
        return [p for p in self.graph.params if p in self.trainable or p in self.frozen]

    def fingerprint(self) -> int:
        """Identifies the compiled model: structure, shapes, frozen weights and optimizer layout."""
        h = hashlib.sha256()
        for node in self.train_nodes:
            h.update(repr((node.op, node.domain, [self.graph.values[n].shape if n in self.graph.values else ()
                                                   for n in node.inputs], sorted(node.attrs.items(), key=str))).encode())
        for name in self.params:
            h.update(repr((name, name in self.trainable, self.graph.shape(name))).encode())
            if name in self.frozen:
                h.update(self.graph.params[name].tobytes())
        h.update(repr((self.optimizer.kind.value, self.optimizer.state_slots)).encode())
        return int.from_bytes(h.digest()[:8], "little")


def _resolve_params(graph: Graph, requires_grad, frozen_params) -> tuple[list[str], list[str]]:
    named = list(requires_grad or []) + list(frozen_params or [])
    unknown = [n for n in named if n not in graph.params]
    if unknown:
        raise EdgetrainError("unknown initializer name(s) in requires_grad/frozen_params: " +
                             ", ".join(repr(n) for n in unknown) +
                             f"; trainable float initializers are: {', '.join(graph.params) or 'none'}")
    frozen = set(frozen_params or [])
    if requires_grad is None:
        trainable = [p for p in graph.params if p not in frozen]
    else:
        overlap = frozen & set(requires_grad)
        if overlap:
            raise EdgetrainError(f"parameter(s) both trainable and frozen: {', '.join(sorted(overlap))}")
        trainable = [p for p in graph.params if p in set(requires_grad)]
    return trainable, [p for p in graph.params if p not in trainable]


def _live(nodes: list[Node], wanted: list[str]) -> list[Node]:
    """The nodes needed to compute `wanted`, in their original order."""
    need, keep = set(wanted), []
    for node in reversed(nodes):
        if any(o in need for o in node.outputs):
            keep.append(node)
            need.update(node.inputs)
    return keep[::-1]


def _training_dropout(graph: Graph, nodes: list[Node]) -> list[Node]:
    """Model Dropout nodes are the identity at inference; in training they draw seeded masks."""
    out = []
    for index, node in enumerate(nodes):
        if node.op != "Dropout" or node.domain:
            out.append(node)
            continue
        ratio = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else ""
        ratio = float(graph.constants[ratio].reshape(())) if ratio else 0.5
        training = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
        if training and not bool(graph.constants[training].reshape(())):
            ratio = 0.0  # exported with training_mode=False: the model asked for no dropout
        mask = graph.add_value(graph.fresh("dropout_mask"), graph.shape(node.inputs[0]))
        if COUNTER not in graph.values:
            graph.add_value(COUNTER, (), np.int64)
        attrs = frozen_attrs({"ratio": ratio, "seed": int(node.attr("seed", index))})
        out.append(Node("Dropout", (node.inputs[0], COUNTER), (node.outputs[0], mask), attrs, node.name, ET_DOMAIN))
    return out


def build_trainer(graph: Graph, *, loss: LossType | None, optimizer: OptimizerSpec, requires_grad=None,
                  frozen_params=None, ignore_index=None, class_weights=None) -> Trainer:
    trainable, frozen = _resolve_params(graph, requires_grad, frozen_params)
    if not trainable:
        raise EdgetrainError("nothing to train: no trainable float initializers")
    forward = list(graph.nodes)
    loss_value, labels = append_loss(graph, loss, ignore_index=ignore_index, class_weights=class_weights)
    loss_nodes = graph.nodes[len(forward):]
    graph.nodes = _live(_training_dropout(graph, forward) + loss_nodes, [loss_value])
    grads = differentiate(graph, loss_value, trainable)
    train_nodes = graph.nodes
    graph.nodes = forward
    return Trainer(graph=graph, train_nodes=train_nodes, eval_nodes=_live(forward + loss_nodes, [loss_value]),
                   infer_nodes=_live(forward, graph.outputs), loss=loss_value, labels=labels,
                   trainable=trainable, frozen=frozen, grads=grads, optimizer=optimizer)
