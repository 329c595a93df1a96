"""generate_artifacts: the ONNX Runtime-shaped entry point that writes a trainer's artifacts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx

from . import checkpoint
from .codegen import render
from .codegen.emit import build
from .errors import EdgetrainError
from . import targets
from .frontend import load_model
from .frontend.validate import check_prefix, check_ram
from .ir.to_onnx import to_onnx
from .optim import LossType, OptimizerSpec, OptimType
from .ir import COUNTER
from .trainer import Trainer, build_trainer

__all__ = ["LossType", "OptimType", "generate_artifacts"]

TARGETS = targets.names()


def generate_artifacts(model, requires_grad=None, frozen_params=None, loss=LossType.CrossEntropyLoss,
                       optimizer=OptimType.AdamW, artifact_directory="out", batch_size=None, target=None, *,
                       learning_rate=1e-3, prefix="model", ignore_index=None, class_weights=None,
                       momentum=0.0, nesterov=False, weight_decay=0.0, max_grad_norm=None, federated=False,
                       nominal_checkpoint=False) -> Path:
    """Compile the forward ONNX `model` into a trainer. Returns the artifact directory.

    federated: the C keeps a reference copy of the trainable parameters (one more copy of them in
    RAM) for set_reference / get_delta / apply_update. nominal_checkpoint: also write
    `checkpoint.nominal`, the parameter table without values, for shipping an app without weights."""
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
    graph = load_model(model, batch_size)
    trainer = build_trainer(graph, loss=loss, optimizer=spec, requires_grad=requires_grad,
                            frozen_params=frozen_params, ignore_index=ignore_index, class_weights=class_weights)
    model_c = build(trainer, prefix, federated)
    check_ram(4 * (model_c.arena_floats + (2 + model_c.state_slots + model_c.federated) * model_c.trainable_floats
                   + len(model_c.buffer_init)))
    source, header = render(model_c)

    out = Path(artifact_directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.c").write_text(source)
    (out / "model.h").write_text(header)
    for name, proto in _onnx_models(trainer, prefix).items():
        onnx.save(proto, os.fspath(out / name))
    (out / "checkpoint").write_bytes(checkpoint.encode(initial_checkpoint(trainer)))
    if nominal_checkpoint:
        nominal = initial_checkpoint(trainer)
        nominal.optimizer_state, nominal.contents = None, checkpoint.NOMINAL
        (out / "checkpoint.nominal").write_bytes(checkpoint.encode(nominal))
    report = memory_report(trainer, model_c)
    # A target's compiler measures flash and RAM (targets/<name>.mk); None, the library default,
    # spares the compile and reports the planner's host figures.
    report = targets.add_sizes(report, target, out / "model.c")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.txt").write_text(format_report(report))
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


def _onnx_models(trainer: Trainer, prefix: str) -> dict[str, onnx.ModelProto]:
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
            "edgetrain.outputs": json.dumps([[n, list(g.shape(n))] for n in g.outputs])}
    onnx.helper.set_model_props(training, meta)
    evaluation = to_onnx(g, trainer.eval_nodes, data + trainer.trainable + trainer.buffers, [trainer.loss], frozen,
                         "eval")
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


def memory_report(trainer: Trainer, m) -> dict:
    f32 = 4
    trainable = m.trainable_floats * f32
    breakdown = {
        "arena": m.arena_floats * f32,
        "parameters": trainable,
        "gradients": trainable,
        "optimizer_state": m.state_slots * trainable,
        "federated_reference": trainable if m.federated else 0,
    }
    return {
        "target": "host",
        "arena_bytes": breakdown["arena"],
        "ram_bytes": sum(breakdown.values()),
        "ram_breakdown": breakdown,
        "flash_constants_bytes": len(m.consts) * f32,
        "liveness_lower_bound_bytes": {
            "train_step": m.train.lower_bound * f32, "eval_step": m.eval.lower_bound * f32,
            "infer": m.infer.lower_bound * f32},
        "arena_by_function_bytes": {
            "train_step": m.train.arena_floats * f32, "eval_step": m.eval.arena_floats * f32,
            "infer": m.infer.arena_floats * f32},
        "trainable_parameters": m.trainable_floats,
        "frozen_parameters": m.frozen_floats,
        "optimizer": trainer.optimizer.kind.value,
    }


def format_report(report: dict) -> str:
    rows = [("arena (activations, temporaries)", report["ram_breakdown"]["arena"]),
            ("trainable parameters", report["ram_breakdown"]["parameters"]),
            ("gradients", report["ram_breakdown"]["gradients"]),
            ("optimizer state", report["ram_breakdown"]["optimizer_state"]),
            *([("federated reference", report["ram_breakdown"]["federated_reference"])]
              if report["ram_breakdown"]["federated_reference"] else []),
            *([("other (buffers, counters, alignment)", report["ram_breakdown"]["other"])]
              if "other" in report["ram_breakdown"] else []),
            ("total RAM", report["ram_bytes"]),
            ("constants in flash (frozen weights)", report["flash_constants_bytes"])]
    width = max(len(r[0]) for r in rows)
    lines = [f"{label:<{width}}  {value:>12,} B" for label, value in rows]
    bound = report["liveness_lower_bound_bytes"]["train_step"]
    lines.append(f"{'train_step liveness lower bound':<{width}}  {bound:>12,} B")
    lines += targets.format_sizes(report, width)
    return "\n".join(lines) + "\n"
