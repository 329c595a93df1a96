"""Assemble the trainer: the forward graph plus loss and backward nodes, split into the functions
the generated C exposes (train_step, eval_step, infer)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..autodiff import differentiate
from ..errors import EdgetrainError
from ..frontend.imports import default_trainable
from ..frontend.load import QDQ_OPSET, run_node
from ..ir import Graph, Node
from ..ops import require
from ..optim import LossType, OptimizerSpec, append_loss
from .integer import (
    IntegerWeight,
    compiled_weights,
    early_weight_chains,
    fuse_int8_layers,
    integer_weights,
    quantized_constant,
)
from .recompute import recompute as recompute_cheap


@dataclass
class Trainer:
    graph: Graph  # every value of every function
    train_nodes: list[Node]
    eval_nodes: list[Node]
    infer_nodes: list[Node]
    # eval_nodes as eval_model.onnx writes them: frozen weights keep their fake quantization, which
    # the exported inference model quantizes them from (the C's functions read them folded)
    eval_model_nodes: list[Node]
    loss: str
    labels: str | None
    trainable: list[str]
    frozen: list[str]
    grads: dict[str, str | None]  # trainable parameter -> its gradient value
    optimizer: OptimizerSpec
    state_updates: dict[str, str]  # buffer -> its new value after a training step
    backward_start: int = 0  # train_nodes[backward_start:] are the backward pass
    extra_outputs: tuple[str, ...] = ()  # model outputs train_step and eval_step return after the loss
    # frozen weights the functions read as compile-time integers (integer.compiled_weights): fixed
    compiled_weights: tuple[str, ...] = ()
    # trained weights stored as their int8 values and updated by QAS (integer.integer_weights)
    integer_weights: dict[str, IntegerWeight] = field(default_factory=dict)

    def read_as(self, param: str) -> str:
        """The tensor the functions read for trainable `param`: a stored int8 weight's integers."""
        stored = self.integer_weights.get(param)
        return param if stored is None else stored.values

    @property
    def params(self) -> list[str]:
        """Trainable and frozen parameters in the model's initializer order."""
        return [p for p in self.graph.params if p in self.trainable or p in self.frozen]

    @property
    def buffers(self) -> list[str]:
        return list(self.graph.buffers)

    @property
    def checkpoint_entries(self) -> list[tuple[str, int]]:
        """(name, kind) in checkpoint order; kind 0 frozen, 1 trainable, 2 buffer."""
        return [(p, int(p in self.trainable)) for p in self.params] + [(b, 2) for b in self.buffers]

    def fingerprint(self) -> int:
        """Identifies the compiled model: structure, parameter shapes, frozen weights and optimizer
        layout. The forward and loss nodes stand for the structure: the backward pass follows from
        them and the trainable set, so builds that differ only in their memory plan share
        checkpoints. The activations' shapes are left out: builds for another batch or input size
        (the host's Module compiles them as its inputs need) share checkpoints too."""
        h = hashlib.sha256()
        for node in self.train_nodes[: self.backward_start]:
            h.update(repr((node.op, node.domain, len(node.inputs), sorted(node.attrs.items(), key=str))).encode())
        for name, kind in self.checkpoint_entries:
            h.update(repr((name, kind, self.graph.shape(name))).encode())
            if name in self.frozen:
                h.update(self.graph.params[name].tobytes())
        h.update(repr((self.optimizer.kind.value, self.optimizer.state_slots)).encode())
        return int.from_bytes(h.digest()[:8], "little")


def _resolve_params(graph: Graph, requires_grad, frozen_params) -> tuple[list[str], list[str]]:
    """(trainable, frozen) parameters. frozen_params may name any initializer of the model, as ONNX
    Runtime users write it (every one they do not train): a buffer named there stays a buffer and
    is updated as its op says (BatchNormalization's running statistics), a constant stays one, and
    so does a parameter the exporter's optimizer folded into a constant."""
    initializers = set(graph.params) | set(graph.buffers) | set(graph.constants) | graph.folded
    unknown = [n for n in list(requires_grad or []) + list(frozen_params or []) if n not in initializers]
    gone = [n for n in unknown if n in graph.recorded]
    if gone:
        raise EdgetrainError(
            "requires_grad/frozen_params name PyTorch parameter(s) that the export no longer has: "
            f"{', '.join(repr(n) for n in gone)}; torch's exporter merged them into equal ones, folded them away or "
            "tied them to another name: export with optimize=False to keep each, or leave them out"
        )
    if unknown:
        raise EdgetrainError(
            "unknown initializer name(s) in requires_grad/frozen_params: "
            + ", ".join(repr(n) for n in unknown)
            + f"; trainable float initializers are: {', '.join(graph.params) or 'none'}"
        )
    not_trainable = [n for n in requires_grad or [] if n not in graph.params]
    if not_trainable:
        raise EdgetrainError(
            "requires_grad names initializer(s) that cannot train: "
            + ", ".join(f"{n!r} ({_why_not_trainable(graph, n)})" for n in not_trainable)
        )
    frozen = set(frozen_params or [])
    if requires_grad is None:
        default = default_trainable(graph.nodes, graph.params, graph.not_parameters)
        trainable = [p for p in graph.params if p not in frozen and p in default]
    else:
        overlap = frozen & set(requires_grad)
        if overlap:
            raise EdgetrainError(f"parameter(s) both trainable and frozen: {', '.join(sorted(overlap))}")
        trainable = [p for p in graph.params if p in set(requires_grad)]
    return trainable, [p for p in graph.params if p not in trainable]


def _why_not_trainable(graph: Graph, name: str) -> str:
    if name in graph.buffers:
        return "a buffer such as BatchNormalization's running statistics, which training updates by its op's rule"
    if name in graph.folded:
        return "torch's exporter folded it into a constant: export with optimize=False to train it"
    return "a constant the model reads, not a float parameter"


def _model_outputs(graph: Graph, names, what: str) -> list[str]:
    names = list(names or [])
    unknown = [n for n in names if n not in graph.outputs]
    if unknown:
        raise EdgetrainError(
            f"{what} must name outputs of the model; {', '.join(map(repr, unknown))} "
            f"{'is' if len(unknown) == 1 else 'are'} not (its outputs: {', '.join(graph.outputs)})"
        )
    return names


def _append_loss(graph: Graph, loss, loss_input_names, **options) -> tuple[str, str | None]:
    """The loss on the model output loss_input_names names (default: the first), as append_loss
    places it on the first output."""
    names = _model_outputs(graph, loss_input_names, "loss_input_names")
    if len(names) > 1:
        raise EdgetrainError(
            f"loss_input_names: a built-in loss (or loss=None) takes one model output, got "
            f"{len(names)}; write a loss with edgetrain.onnxblock to combine several"
        )
    outputs = list(graph.outputs)
    if names:
        graph.outputs = names + [n for n in outputs if n != names[0]]
    try:
        return append_loss(graph, loss, **options)
    finally:
        graph.outputs = outputs


def _live(nodes: list[Node], wanted: list[str]) -> list[Node]:
    """The nodes needed to compute `wanted`, in their original order."""
    need, keep = set(wanted), []
    for node in reversed(nodes):
        if any(o in need for o in node.outputs):
            keep.append(node)
            need.update(node.inputs)
    return keep[::-1]


def _variants(graph: Graph, nodes: list[Node], training: bool) -> list[Node]:
    """The nodes as the training (or inference) graph runs them."""
    out = []
    for index, node in enumerate(nodes):
        spec = require(node)
        out.append(spec.variant(graph, node, index, training) if spec.variant else node)
    return out


def _state_updates(nodes: list[Node]) -> dict[str, str]:
    """buffer -> the value holding its new contents after a training step."""
    updates = {}
    for node in nodes:
        spec = require(node)
        for in_slot, out_slot in (spec.state(node) if spec.state else {}).items():
            updates[node.inputs[in_slot]] = node.outputs[out_slot]
    return updates


def _frozen_fake_quantization(graph: Graph, nodes: list[Node], frozen: set[str]) -> list[Node]:
    """A frozen weight that QuantizeLinear -> DequantizeLinear fake-quantizes (a quantized model's,
    frontend.imports.quantized_parameters) is a constant: it takes the values the pair makes of it,
    which the pair leaves as they are, and the training graph reads it without the pair, so no step
    makes an integer and a float copy of it. The inference graph keeps the pair (the exported model
    quantizes the weight from it)."""
    readers: dict[str, list[Node]] = {}
    for node in nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    folded: dict[str, str] = {}  # a DequantizeLinear's output -> the weight it now is
    for q in nodes:
        weight = q.inputs[0] if q.op == "QuantizeLinear" else ""
        pairs = readers.get(q.outputs[0], [])
        if weight not in frozen or len(readers[weight]) != 1 or not pairs:
            continue
        if not all(dq.op == "DequantizeLinear" and _same_quantization(graph, q, dq) for dq in pairs):
            continue
        graph.params[weight] = _fake_quantized(graph, q)
        folded.update((dq.outputs[0], weight) for dq in pairs)
        folded[q.outputs[0]] = weight
    return [
        Node(n.op, tuple(folded.get(i, i) for i in n.inputs), n.outputs, n.attrs, n.name, n.domain)
        for n in nodes
        if not (set(n.outputs) & set(folded))
    ]


def _weight_quantizers(graph: Graph, nodes: list[Node], frozen: set[str]) -> dict[str, Node]:
    """The QuantizeLinear of each frozen weight in `nodes` (which keep them): what an int8 layer
    that reads the weight folded takes its int8 values from."""
    return {n.inputs[0]: n for n in nodes if n.op == "QuantizeLinear" and n.inputs[0] in frozen}


def _same_quantization(graph: Graph, q: Node, dq: Node) -> bool:
    """Whether the two read the same scale and zero point (by value: the frontend gives each reader
    of a float initializer held as a constant its own copy) along the same axis."""
    if dict(q.attrs) != dict(dq.attrs) or len(q.inputs) != len(dq.inputs):
        return False
    pairs = zip(q.inputs[1:], dq.inputs[1:])
    return all(a == b or np.array_equal(graph.constants[a], graph.constants[b]) for a, b in pairs)


def _fake_quantized(graph: Graph, q: Node) -> np.ndarray:
    """DequantizeLinear(QuantizeLinear(W)) of a constant W, as onnx.reference computes it."""
    dequantize = onnx.helper.make_node(
        "DequantizeLinear", [quantized_constant(graph, q), *q.inputs[1:]], ["y"], **dict(q.attrs)
    )
    feeds = {n: graph.params[n] if n in graph.params else graph.constants[n] for n in dequantize.input if n}
    (y,) = run_node(dequantize, feeds, max(graph.opset, QDQ_OPSET))
    return np.asarray(y, np.float32)


def build_trainer(
    graph: Graph,
    *,
    loss: LossType | None,
    optimizer: OptimizerSpec,
    requires_grad=None,
    frozen_params=None,
    ignore_index=None,
    class_weights=None,
    recompute=False,
    keep_every=0,
    loss_input_names=None,
    additional_output_names=None,
    integer_updates=False,
) -> Trainer:
    """recompute: forward activations the backward pass reads are computed again there
    (edgetrain.trainer.recompute: cheap ones, or with keep_every=K all but every K-th), trading
    time for RAM. loss_input_names: the model output the loss is on (default: the first).
    additional_output_names: model outputs the training and evaluation steps return too.
    integer_updates: trained weights of int8 layers are stored as their integers and updated by
    quantization-aware scaling (integer.integer_weights) rather than kept as float32 masters."""
    trainable, frozen = _resolve_params(graph, requires_grad, frozen_params)
    extra = _model_outputs(graph, additional_output_names, "additional_output_names")
    model_nodes = list(graph.nodes)
    loss_value, labels = _append_loss(
        graph, loss, loss_input_names, ignore_index=ignore_index, class_weights=class_weights
    )
    if loss_value in extra:
        raise EdgetrainError(f"additional_output_names: {loss_value!r} is the loss, which every step returns first")
    loss_nodes = graph.nodes[len(model_nodes) :]
    training = _variants(graph, model_nodes, training=True)
    updates = _state_updates(training)
    graph.nodes = _live(training + loss_nodes, [loss_value] + extra + list(updates.values()))
    graph.nodes = _frozen_fake_quantization(graph, graph.nodes, set(frozen))
    grads, backward_start = differentiate(graph, loss_value, trainable)
    train_nodes = graph.nodes
    if recompute:
        train_nodes = recompute_cheap(graph, graph.nodes, backward_start, keep_every)
    elif any(node.op == "DequantizeLinear" for node in graph.nodes):
        # a quantized activation the backward pass reads is kept in its own width, dequantized there
        train_nodes = recompute_cheap(graph, graph.nodes, backward_start, only=frozenset(["DequantizeLinear"]))
    inference = _variants(graph, model_nodes, training=False)
    graph.nodes = inference
    eval_model_nodes = _live(inference + loss_nodes, [loss_value] + extra)
    quantizers = _weight_quantizers(graph, eval_model_nodes, set(frozen))
    keep = {loss_value, *extra, *updates.values(), *graph.outputs}
    fused_train = fuse_int8_layers(graph, train_nodes, quantizers, keep)
    kept = {id(n) for n in fused_train}
    first_backward = next((n for n in train_nodes[backward_start:] if id(n) in kept), None)
    backward_start = next((i for i, n in enumerate(fused_train) if n is first_backward), len(fused_train))
    fused_train = early_weight_chains(fused_train, backward_start)
    eval_nodes = fuse_int8_layers(
        graph, _frozen_fake_quantization(graph, eval_model_nodes, set(frozen)), quantizers, keep
    )
    infer_nodes = fuse_int8_layers(
        graph, _frozen_fake_quantization(graph, _live(inference, graph.outputs), set(frozen)), quantizers, keep
    )
    stored: dict[str, IntegerWeight] = {}
    if integer_updates:
        backward = {id(n) for n in fused_train[backward_start:]}
        functions, grads, stored = integer_weights(graph, trainable, grads, [fused_train, eval_nodes, infer_nodes])
        fused_train, eval_nodes, infer_nodes = functions
        backward_start = next((i for i, n in enumerate(fused_train) if id(n) in backward), len(fused_train))
    return Trainer(
        graph=graph,
        train_nodes=fused_train,
        eval_nodes=eval_nodes,
        infer_nodes=infer_nodes,
        eval_model_nodes=eval_model_nodes,
        loss=loss_value,
        labels=labels,
        trainable=trainable,
        frozen=frozen,
        grads=grads,
        optimizer=optimizer,
        state_updates=updates,
        backward_start=backward_start,
        extra_outputs=tuple(extra),
        compiled_weights=tuple(compiled_weights(quantizers, [fused_train, eval_nodes, infer_nodes])),
        integer_weights=stored,
    )


def inference_only(graph: Graph) -> Trainer:
    """A model with nothing to train, as its inference graph alone: every float initializer is
    frozen, and there is no loss, no training graph and no optimizer."""
    graph.nodes = _variants(graph, list(graph.nodes), training=False)
    live = _live(graph.nodes, graph.outputs)
    quantizers = _weight_quantizers(graph, live, set(graph.params))
    folded = _frozen_fake_quantization(graph, live, set(graph.params))
    infer = fuse_int8_layers(graph, folded, quantizers, set(graph.outputs))
    # Neither loss nor optimizer: lowering an inference-only trainer (lower_inference) reads neither.
    return Trainer(
        graph=graph,
        train_nodes=[],
        eval_nodes=[],
        infer_nodes=infer,
        eval_model_nodes=[],
        loss=None,  # type: ignore[arg-type]
        labels=None,
        trainable=[],
        frozen=list(graph.params),
        grads={},
        optimizer=None,  # type: ignore[arg-type]
        state_updates={},
        compiled_weights=tuple(compiled_weights(quantizers, [infer])),
    )
