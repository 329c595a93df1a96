"""generate_artifacts: the ONNX Runtime-shaped entry point that writes a trainer's artifacts."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import onnx

from . import checkpoint
from .codegen import render
from .codegen.emit import Affine, build, build_inference, compile_batched
from .errors import EdgetrainError, ImportNote
from .files import write_artifact
from . import targets
from .frontend import load_model
from .frontend.validate import check_prefix, check_ram
from .ir.to_onnx import to_onnx
from .memory.policy import Plan, meet_budget, policy_parameters, static_ram_bytes
from .memory.report import NO_MATPLOTLIB, can_plot, memory_report, write_report
from .optim import LossType, OptimizerSpec, OptimType
from .ir import COUNTER
from .trainer import Trainer, build_trainer, inference_only

__all__ = ["LossType", "OptimType", "generate_artifacts", "generate_inference"]

TARGETS = targets.names()

# batch_size's default: the most samples a step takes (ORT's tutorials train in batches of 32).
# Any batch from 1 to it runs, so a loader's short last batch needs no compile of its own.
DEFAULT_MAX_BATCH = 32


def generate_artifacts(model, requires_grad=None, frozen_params=None, loss=LossType.CrossEntropyLoss,
                       optimizer=OptimType.AdamW, artifact_directory="out", batch_size=None, target=None, *,
                       dim_values=None, untie=False, frozen_bn=False,
                       learning_rate=1e-3, prefix="model", ignore_index=None, class_weights=None,
                       momentum=0.0, nesterov=False, weight_decay=0.0, max_grad_norm=None, federated=False,
                       nominal_checkpoint=False, fused_update=False, update_policy=None, ram_budget=None,
                       memory_plot=False) -> Path:
    """Compile the forward ONNX `model` into a trainer. Returns the artifact directory.

    batch_size: the most samples one step takes (default DEFAULT_MAX_BATCH, 32): the trainer runs
    any batch from 1 to it, each exactly as a trainer compiled for that batch would, in memory
    planned for the largest. A model whose computation cannot follow the batch at run time (its
    inputs have fixed shapes, or a constant it reads changes with the batch) runs its compiled batch
    only, and says why (model.h, and the error for another batch).

    dim_values: fixes symbolic input dimensions other than the batch, by name ({"seq": 128}) or as
    {"input_ids:1": 128}. untie: a parameter the export shares between layers becomes one copy per
    layer. frozen_bn: accept BatchNormalization that torch's exporter folded or wrote in inference
    form as frozen. What the import found (ties, restored batch norms) is warned as ImportNote, once,
    and listed in report.json with the parameters that train.

    federated: the C keeps a reference copy of the trainable parameters (one more copy of them in
    RAM) for set_reference / get_delta / apply_update. nominal_checkpoint: also write
    `checkpoint.nominal`, the parameter table without values, for shipping an app without weights.

    fused_update: each training step applies the optimizer to each parameter as soon as its
    gradient is final, so no gradient buffers exist (gradients do not accumulate across calls, and
    Optimizer.step() has nothing left to do). update_policy: which parameters train, by name of a
    sparse-update policy ("bias", "last:K", "bias+last:K"; see edgetrain.memory.policy), instead of
    requires_grad. ram_budget: bytes of RAM the trainer must fit in; cheaper plans (fused update,
    recomputation) are tried in turn, and the compile fails naming the smallest one reached.
    memory_plot: also draw memory.png, the arena occupancy over train_step's schedule (needs
    matplotlib; off by default because drawing costs more than compiling a small model)."""
    if target is not None and target not in TARGETS:
        raise EdgetrainError(f"unknown target {target!r}; known targets: {', '.join(TARGETS)}")
    optimizer = OptimType(optimizer.value if isinstance(optimizer, OptimType) else optimizer)
    if loss is not None:
        loss = LossType(loss.value if isinstance(loss, LossType) else loss)
    spec = OptimizerSpec(kind=optimizer, lr=float(learning_rate), weight_decay=float(weight_decay),
                         momentum=float(momentum), nesterov=bool(nesterov),
                         max_grad_norm=None if max_grad_norm is None else float(max_grad_norm))
    if nesterov and optimizer is OptimType.SGD and momentum <= 0:
        raise EdgetrainError("nesterov needs a positive momentum")
    check_prefix(prefix)
    if update_policy is not None and requires_grad is not None:
        raise EdgetrainError("give requires_grad or update_policy, not both")
    if memory_plot and not can_plot():
        raise EdgetrainError(NO_MATPLOTLIB)
    if fused_update and max_grad_norm is not None:
        raise EdgetrainError("fused_update cannot clip by global norm (max_grad_norm): the norm needs every "
                             "gradient before the first update")

    max_batch = _max_batch(batch_size)
    notes: list[str] = []
    probes = {}  # id(ModelC) -> the trainer at another batch, for the ONNX models' batch axis

    def compile_(plan: Plan):
        def trainer_at(batch: int) -> Trainer:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ImportNote)
                graph = load_model(model, batch, dim_values, untie=untie, frozen_bn=frozen_bn)
            for warning in caught:
                if issubclass(warning.category, ImportNote) and str(warning.message) not in notes:
                    notes.append(str(warning.message))
                    warnings.warn(warning.message, stacklevel=5)
            names = requires_grad if update_policy is None else policy_parameters(graph, update_policy)
            return build_trainer(graph, loss=loss, optimizer=spec, requires_grad=names, frozen_params=frozen_params,
                                 ignore_index=ignore_index, class_weights=class_weights, recompute=plan.recompute,
                                 keep_every=plan.keep_every)

        trainer, model_c, probe = compile_batched(
            trainer_at, lambda t, consts: build(t, prefix, federated, plan.fused_update, consts), max_batch)
        probes[id(model_c)] = probe
        return trainer, model_c

    trainer, model_c = meet_budget(compile_, Plan(bool(fused_update)), ram_budget,
                                   can_fuse=max_grad_norm is None)
    check_ram(static_ram_bytes(model_c))
    sources = render(model_c)

    out = _output_directory(artifact_directory)
    for name, text in sources.items():
        write_artifact(out / name, text)
    for name, proto in _onnx_models(trainer, prefix, model_c, probes[id(model_c)], model).items():
        write_artifact(out / name, proto.SerializeToString())
    write_artifact(out / "checkpoint", checkpoint.encode(initial_checkpoint(trainer)))
    if nominal_checkpoint:
        nominal = initial_checkpoint(trainer)
        nominal.optimizer_state, nominal.contents = None, checkpoint.NOMINAL
        write_artifact(out / "checkpoint.nominal", checkpoint.encode(nominal))
    report = memory_report(trainer, model_c)
    report["import"] = {"trainable": trainer.trainable, "frozen": trainer.frozen, "notes": notes}
    # A target's compiler measures flash and RAM (targets/<name>.mk); None, the library default,
    # spares the compile and reports the planner's host figures.
    report = targets.add_sizes(report, target, out / "model.c")
    write_report(report, out, memory_plot)
    return out


def generate_inference(model, artifact_directory="out", batch_size=None, *, prefix="model",
                       dim_values=None) -> Path:
    """Compile a model with nothing to train into model.c / model.h whose one function is `infer`
    (initializers compiled in as constants), for batches of 1 to batch_size (default
    DEFAULT_MAX_BATCH), as generate_artifacts. Returns the artifact directory."""
    check_prefix(prefix)
    _, model_c, _ = compile_batched(lambda batch: inference_only(load_model(model, batch, dim_values)),
                                    lambda t, consts: build_inference(t, prefix, consts), _max_batch(batch_size))
    check_ram(4 * (model_c.arena_floats + len(model_c.buffer_init)))
    sources = render(model_c)
    out = _output_directory(artifact_directory)
    for name, text in sources.items():
        write_artifact(out / name, text)
    return out


def _output_directory(artifact_directory) -> Path:
    out = Path(artifact_directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EdgetrainError(f"cannot create the artifact directory {out}: {exc.strerror}") from None
    return out


def initial_checkpoint(trainer: Trainer) -> checkpoint.CheckpointData:
    g = trainer.graph
    slots = trainer.optimizer.state_slots
    entries = trainer.checkpoint_entries
    return checkpoint.CheckpointData(
        fingerprint=trainer.fingerprint(), names=[n for n, _ in entries], kinds=[k for _, k in entries],
        arrays=[g.params[n] if k != checkpoint.BUFFER else g.buffers[n] for n, k in entries],
        optimizer_state=[[np.zeros_like(g.params[p]) for p in trainer.trainable] for _ in slots] or None,
        learning_rate=trainer.optimizer.lr)


def _max_batch(batch_size) -> int:
    if batch_size is None:
        return DEFAULT_MAX_BATCH
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise EdgetrainError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def _batch_meta(trainer: Trainer, model_c, model) -> dict:
    """What the host needs of the batch: the largest, why it is the only one (None when any smaller
    runs too), why a batch of 1 does not train (None when it does), and the data inputs, labels and
    outputs whose first axis it is, each with the name the user's model gives that axis ("" for
    none)."""
    g = trainer.graph
    sizes = dict(zip(g.inputs, model_c.input_sizes)) | dict(zip(g.outputs, model_c.output_sizes))
    if trainer.labels:
        sizes[trainer.labels] = model_c.label_size
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(os.fspath(model), load_external_data=False)
    named = {v.name: v.type.tensor_type.shape.dim[0].dim_param
             for v in list(proto.graph.input) + list(proto.graph.output) if len(v.type.tensor_type.shape.dim)}
    first = next((named.get(n, "") for n in g.inputs if isinstance(sizes[n], Affine)), "")
    return {"max": model_c.max_batch, "fixed": model_c.fixed_batch, "small": model_c.small_batch,
            "axes": {n: named.get(n, first) for n, size in sizes.items() if isinstance(size, Affine)}}


def _any_batch(proto: onnx.ModelProto, trainer: Trainer, probe: Trainer, axes: dict[str, str]) -> None:
    """Give the eval model its batch axis back, so ONNX Runtime runs its forward part (the exported
    inference model) at any batch: the batch axis named as in the user's model (other sizes that
    change with the batch left unnamed), and each Reshape shape whose one entry
    changes with the batch written as 0 there (copy the input's, where that is the batch) or -1.
    A constant changing otherwise leaves the model as it is."""
    g, other = trainer.graph, probe.graph
    changed = {n for n in g.constants
               if n in other.constants and not np.array_equal(g.constants[n], other.constants[n])}
    patched: dict[str, np.ndarray] = {}
    for node in trainer.eval_nodes:
        for slot, name in enumerate(node.inputs):
            if name not in changed:
                continue
            if node.op != "Reshape" or slot != 1 or node.attr("allowzero", 0):
                return
            shape, at_other = g.constants[name], other.constants[name]
            moving = np.flatnonzero(shape != at_other) if shape.shape == at_other.shape else ()
            if len(moving) != 1:
                return
            axis, data = moving[0], node.inputs[0]
            copies = axis < len(g.shape(data)) and (g.shape(data)[axis], other.shape(data)[axis]) == (
                shape[axis], at_other[axis])
            if not copies and -1 in shape:
                return
            new = shape.copy()
            new[axis] = 0 if copies else -1
            if not np.array_equal(patched.setdefault(name, new), new):
                return
    for tensor in proto.graph.initializer:
        if tensor.name in patched:
            tensor.CopyFrom(onnx.numpy_helper.from_array(patched[tensor.name], tensor.name))
    first = next(n for n in g.inputs if n in axes)
    batch = (g.shape(first)[0], other.shape(first)[0])
    for value in list(proto.graph.input) + list(proto.graph.value_info):
        if value.name not in other.values:
            continue
        for dim, here, there in zip(value.type.tensor_type.shape.dim, g.shape(value.name), other.shape(value.name)):
            if here != there:  # the batch, or a size that follows it
                dim.Clear()
                if (here, there) == batch and axes.get(value.name, axes[first]):
                    dim.dim_param = axes.get(value.name, axes[first])


def _onnx_models(trainer: Trainer, prefix: str, model_c, probe: Trainer | None, model) -> dict[str, onnx.ModelProto]:
    g = trainer.graph
    frozen = {p: g.params[p] for p in trainer.frozen}
    data = g.inputs + ([trainer.labels] if trainer.labels else [])
    counter = [COUNTER] if COUNTER in g.values else []
    grads = [trainer.grads[p] for p in trainer.trainable if trainer.grads[p]]
    renames = {trainer.grads[p]: f"{p}_grad" for p in trainer.trainable if trainer.grads[p]}
    renames |= {value: f"{buffer}_updated" for buffer, value in trainer.state_updates.items()}
    training = to_onnx(g, trainer.train_nodes, data + counter + trainer.trainable + trainer.buffers,
                       [trainer.loss] + grads + list(trainer.state_updates.values()), frozen, "training", renames)
    meta = {"edgetrain.prefix": prefix, "edgetrain.fingerprint": f"{trainer.fingerprint():016x}",
            "edgetrain.inputs": json.dumps(g.inputs),
            "edgetrain.labels": trainer.labels or "", "edgetrain.optimizer": trainer.optimizer.kind.value,
            "edgetrain.outputs": json.dumps([[n, list(g.shape(n))] for n in g.outputs]),
            "edgetrain.output_dtypes": json.dumps([str(g.values[n].dtype) for n in g.outputs])}
    batch = _batch_meta(trainer, model_c, model)
    meta["edgetrain.batch"] = json.dumps(batch)
    onnx.helper.set_model_props(training, meta)
    evaluation = to_onnx(g, trainer.eval_nodes, data + trainer.trainable + trainer.buffers, [trainer.loss], frozen,
                         "eval")
    if probe is not None and batch["axes"]:
        _any_batch(evaluation, trainer, probe, batch["axes"])
    onnx.helper.set_model_props(evaluation, meta)
    return {"training_model.onnx": training, "eval_model.onnx": evaluation,
            "optimizer_model.onnx": _optimizer_model(trainer)}


def _optimizer_model(trainer: Trainer) -> onnx.ModelProto:
    """One update node per parameter, executable by the ONNX reference with our ops."""
    from .ir import ET_DOMAIN
    from onnx import helper, TensorProto
    g, spec = trainer.graph, trainer.optimizer
    inputs = [helper.make_tensor_value_info("learning_rate", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("step", TensorProto.INT64, [])]
    outputs, nodes = [], []
    for p in trainer.trainable:
        shape = g.shape(p)
        state = [f"{p}.{slot}" for slot in spec.state_slots]
        names = [p, f"{p}_grad"] + state
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names]
        new = [f"{n}.updated" for n in [p] + state]
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in new]
        nodes.append(helper.make_node(spec.kind.value, ["learning_rate", "step"] + names, new,
                                      domain=ET_DOMAIN, **spec.attrs()))
    graph = helper.make_graph(nodes, "optimizer", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset), helper.make_opsetid(ET_DOMAIN, 1)],
                              producer_name="edgetrain")
    model.ir_version = min(model.ir_version, 10)
    return model
