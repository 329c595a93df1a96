"""generate_artifacts: the ONNX Runtime-shaped entry point that writes a trainer's artifacts."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx

from . import checkpoint
from .codegen import render
from .codegen.emit import compile_batched, emit
from .errors import DynamicShapeError, EdgetrainError, ImportNote
from .files import write_artifact
from . import targets
from .frontend import load_model
from .frontend.quantize import quantize_int8
from .frontend.validate import check_prefix, check_ram
from .ir.to_onnx import to_onnx
from .lower import Affine, lower, lower_inference
from .memory.plan import plan as plan_memory
from .memory.policy import Plan, meet_budget, policy_parameters
from .memory.report import NO_MATPLOTLIB, can_plot, memory_report, write_report
from .optim import LossType, OptimizerSpec, OptimType
from .ir import COUNTER
from .trainer import Trainer, build_trainer, inference_only

__all__ = ["LossType", "OptimType", "generate_artifacts", "generate_inference"]

TARGETS = targets.names()

# batch_size's default: the most samples a step takes (ORT's tutorials train in batches of 32).
# Any batch from 1 to it runs, so a loader's short last batch needs no compile of its own.
DEFAULT_MAX_BATCH = 32


def generate_artifacts(
    model,
    requires_grad=None,
    frozen_params=None,
    loss=LossType.CrossEntropyLoss,
    optimizer=OptimType["AdamW"],
    artifact_directory="out",
    batch_size=None,
    target=None,
    *,
    prefix=None,
    ort_format=False,
    custom_op_library=None,
    additional_output_names=None,
    nominal_checkpoint=False,
    loss_input_names=None,
    c_prefix=None,
    dim_values=None,
    untie=False,
    frozen_bn=False,
    learning_rate=1e-3,
    ignore_index=None,
    class_weights=None,
    momentum=0.0,
    nesterov=False,
    weight_decay=0.0,
    max_grad_norm=None,
    federated=False,
    fused_update=False,
    update_policy=None,
    ram_budget=None,
    row_bands=False,
    quantize=None,
    calibration_data=None,
    qas=True,
    memory_plot=False,
    defer_free_dims=True,
) -> Path:
    """Compile the forward ONNX `model` into a trainer. Returns the artifact directory.

    ONNX Runtime's arguments: requires_grad / frozen_params (frozen_params may name any initializer,
    buffers and constants included); loss, a LossType, None (the model's output is the loss) or an
    edgetrain.onnxblock.Block; loss_input_names, the model output(s) the loss takes;
    additional_output_names, model outputs the training and evaluation steps return after the
    loss; nominal_checkpoint, also write `nominal_checkpoint` (the parameter table without
    values); prefix, a prefix of the artifact files' names (training_model.onnx, eval_model.onnx,
    optimizer_model.onnx, checkpoint, nominal_checkpoint). ort_format and custom_op_library are
    refused: edgetrain writes no ORT-format models and compiles every op from its own kernels.
    c_prefix: the prefix of the generated C functions (default "model"), so several trainers link
    into one program. prefix used to mean that: a C identifier not ending in "_" given as prefix
    without c_prefix is still taken so, with a DeprecationWarning, for this release.

    batch_size: the most samples one step takes (default DEFAULT_MAX_BATCH, 32): the trainer runs
    any batch from 1 to it, each exactly as a trainer compiled for that batch would, in memory
    planned for the largest. A model whose computation cannot follow the batch at run time (its
    inputs have fixed shapes, or a constant it reads changes with the batch) runs its compiled batch
    only, and says why (model.h, and the error for another batch).

    dim_values: fixes symbolic input dimensions other than the batch, by name ({"seq": 128}) or as
    {"input_ids:1": 128}. A dimension an operator ties to a weight's size (a Gemm's features) is
    fixed to it, with an ImportNote. One that nothing fixes is free: with defer_free_dims (the
    default) and no target, the ONNX artifacts and checkpoint are written without C, and the host's
    Module compiles the trainer at the shapes of its first call, and again when they change (each
    build cached); a device needs dim_values. Likewise, with batch_size left to its default, a
    Module given a larger batch compiles for it and carries its state over. untie: a parameter the
    export shares between layers becomes one copy per layer. frozen_bn: accept BatchNormalization
    that torch's exporter folded or wrote in inference form as frozen. What the import found (ties,
    restored batch norms) is warned as ImportNote, once, and listed in report.json with the
    parameters that train.

    federated: the C keeps a reference copy of the trainable parameters (one more copy of them in
    RAM) for set_reference / get_delta / apply_update.

    fused_update: each training step applies the optimizer to each parameter as soon as its
    gradient is final, so no gradient buffers exist (gradients do not accumulate across calls, and
    Optimizer.step() has nothing left to do). update_policy: which parameters train, by name of a
    sparse-update policy ("bias", "bias:K", "last:K", "bias+last:K", "bias:K+last:J"; see
    edgetrain.memory.policy), instead of requires_grad. ram_budget: bytes of RAM the trainer must
    fit in; cheaper plans (fused update, recomputation) are tried in turn, and the compile fails
    naming the smallest one reached. row_bands: the layers in front of the first one that trains (in
    eval_step and infer, every convolution up to the pooling) run a band of output rows at a time
    where that lowers the arena's peak, so their widest activations never exist whole; the rows two
    bands' windows share are computed in both (time for RAM; the results are the same bits). A
    ram_budget tries row bands after the fused update.
    memory_plot: also draw memory.png, the arena occupancy over train_step's schedule (needs
    matplotlib; off by default because drawing costs more than compiling a small model).

    quantize="int8": train quantization-aware, as a QDQ model (one that onnxruntime's quantize_static
    wrote) trains: int8 weights with a scale per output channel, int8 activations with a scale per
    tensor taken from calibration_data, batches of the model's inputs (edgetrain.frontend.quantize).
    qas: the trained weights of a quantized model (or a QDQ one) that symmetric int8 QuantizeLinear
    makes are stored as those integers, updated by quantization-aware scaling with stochastic
    rounding (runtime_c/et_qas.h); qas=False, or federated learning (whose references and deltas are
    floats), keeps float32 masters that every forward pass quantizes again. report.json's
    int8_trained_weights says which, and what it costs."""
    _refuse_ort_only(ort_format, custom_op_library)
    if quantize is not None:
        if quantize != "int8":
            raise EdgetrainError(f"quantize={quantize!r}: edgetrain quantizes to 'int8'")
        model = quantize_int8(model, calibration_data)
    elif calibration_data is not None:
        raise EdgetrainError("calibration_data calibrates quantize='int8', which is not given")
    file_prefix, prefix = _prefixes(prefix, c_prefix)
    if loss is not None and not isinstance(loss, (LossType, str)):
        model, loss = _with_loss_block(model, loss, loss_input_names), None
        loss_input_names = None  # the block's model has the loss as its one output
    # The compile's options as plain values: the stages read them, and a Module's recompile
    # (specialize) passes them back from the recipe kept beside the artifacts.
    options = dict(
        requires_grad=requires_grad,
        frozen_params=frozen_params,
        update_policy=update_policy,
        loss=None if loss is None else (loss.value if isinstance(loss, LossType) else LossType(loss).value),
        loss_input_names=loss_input_names,
        additional_output_names=additional_output_names,
        optimizer=optimizer.value if isinstance(optimizer, OptimType) else OptimType(optimizer).value,
        learning_rate=learning_rate,
        ignore_index=ignore_index,
        momentum=momentum,
        nesterov=nesterov,
        weight_decay=weight_decay,
        max_grad_norm=max_grad_norm,
        federated=federated,
        fused_update=fused_update,
        ram_budget=ram_budget,
        row_bands=bool(row_bands),
        qas=bool(qas),
        untie=untie,
        frozen_bn=frozen_bn,
        class_weights=None if class_weights is None else np.asarray(class_weights).tolist(),
    )
    stages = _Stages.of(model, prefix, _max_batch(batch_size), options)
    _check_options(stages.spec, target, requires_grad, frozen_params, update_policy, fused_update, memory_plot)
    (trainer, model_c), free = _compile(stages, dict(dim_values or {}), defer_free_dims and target is None)
    for message in (
        _unread_outputs(trainer.graph.outputs, options),
        _fixed_batch(model_c, batch_size),
        _probabilities_into_loss(trainer.graph, options),
        _classes_on_the_last_axis(trainer.graph, options),
    ):
        if message:  # said once: in report.json and as a warning
            stages.notes.append(message)
            warnings.warn(ImportNote(message), stacklevel=2)
    memory = model_c.memory  # the plan at the largest batch
    check_ram(memory.ram_bytes)

    out = _output_directory(Path.cwd() if artifact_directory is None else artifact_directory)
    if not free:
        for name, text in render(model_c).items():
            write_artifact(out / name, text)
    models = _onnx_models(trainer, prefix, model_c, stages.probes[id(model_c)], model, file_prefix)
    growable = batch_size is None and not model_c.fixed_batch
    if free or growable:
        recipe = dict(
            source=f"{file_prefix}source_model.onnx",
            free_dims=free,
            batch_grows=growable,
            c_prefix=prefix,
            dim_values=dict(dim_values or {}),
            options=options,
        )
        _keep_recipe(recipe, out, _proto(model), (models["training_model.onnx"], models["eval_model.onnx"]))
    for name, proto in models.items():
        write_artifact(out / f"{file_prefix}{name}", proto.SerializeToString())
    _write_checkpoints(trainer, out, file_prefix, nominal_checkpoint)
    _report(trainer, memory, stages.notes, free, target, out, file_prefix, memory_plot)
    return out


def _unread_outputs(outputs: list[str], options: dict) -> str | None:
    """A built-in loss reads one model output, the first unless loss_input_names says, as ONNX
    Runtime's does; a model with more (GoogLeNet's and Inception's auxiliary classifiers, which
    PyTorch's training scripts add to the loss) trains on that one alone: said once."""
    if options["loss"] is None or options["loss_input_names"] or len(outputs) < 2:
        return None
    return (
        f"the model has {len(outputs)} outputs and {options['loss']} reads the first, {outputs[0]!r}, alone "
        "(loss_input_names or --loss-input chooses another; an edgetrain.onnxblock loss combines several)"
    )


def _loss_input(graph, options: dict) -> str:
    """The output a built-in loss reads: the first, unless loss_input_names says."""
    return (options["loss_input_names"] or graph.outputs)[0]


# The function each built-in loss on logits applies itself.
_LOSS_ACTIVATION = {"CrossEntropyLoss": "Softmax", "BCEWithLogitsLoss": "Sigmoid"}


def _probabilities_into_loss(graph, options: dict) -> str | None:
    """A loss on logits given the output of that same function (a model exported with its final
    Softmax or Sigmoid, as for inference) applies it twice, which flattens the gradients: PyTorch's
    training takes the logits. Said once, naming the node."""
    activation = _LOSS_ACTIVATION.get(options["loss"])
    read = _loss_input(graph, options)
    node = graph.producers().get(read)
    if activation is None or node is None or node.op != activation:
        return None
    return (
        f"{options['loss']} reads {read!r}, the output of {activation} node {node.name!r}, and applies "
        f"{activation} again: train on the logits (export the model without its final {activation})"
    )


def _classes_on_the_last_axis(graph, options: dict) -> str | None:
    """CrossEntropyLoss takes the classes on axis 1, as torch's cross_entropy does. Logits of rank 3
    or more that a linear layer makes over their last axis (a token classifier's (batch, positions,
    classes), which PyTorch's training flattens before its loss) would have their positions taken
    as the classes: said once, with the way out."""
    read = _loss_input(graph, options)
    producers = graph.producers()
    node = producers.get(read)
    if node is not None and node.op == "Add":  # the linear layer's bias
        node = next((producers[i] for i in node.inputs if i in producers and producers[i].op == "MatMul"), None)
    shape = graph.shape(read)
    if options["loss"] != "CrossEntropyLoss" or len(shape) < 3 or node is None or node.op != "MatMul":
        return None
    weight = graph.shape(node.inputs[1])
    if len(weight) != 2 or weight[1] != shape[-1]:
        return None
    return (
        f"CrossEntropyLoss takes the classes on axis 1, as torch's cross_entropy does: {read!r} {shape} comes from "
        f"a linear layer over its last axis, so its {shape[1]} positions would be the classes (labels "
        f"{shape[:1] + shape[2:]}); for a class per position, export the logits transposed to (batch, classes, "
        "positions)"
    )


def _fixed_batch(model_c, batch_size: int | None) -> str | None:
    """A trainer that runs one batch only (a model exported with fixed input shapes, whose batch is
    the sample's) is said when it is compiled, not first at a step of another batch, and so is a
    batch_size that it leaves aside."""
    if not model_c.fixed_batch:
        return None
    asked = f"; batch_size={batch_size} has no effect" if batch_size not in (None, model_c.max_batch) else ""
    return f"{model_c.fixed_batch}{asked}"


def _keep_recipe(recipe: dict, out: Path, source: onnx.ModelProto, protos) -> None:
    """Writes the source model beside the artifacts and the recipe into the training and eval
    models' metadata (edgetrain.recipe), whose free dimensions get their symbolic names back: what a
    Module needs to compile the trainer again at other shapes."""
    write_artifact(out / recipe["source"], source.SerializeToString())
    for proto in protos:
        _free_axes(proto, recipe["free_dims"])
        onnx.helper.set_model_props(
            proto, {**{p.key: p.value for p in proto.metadata_props}, "edgetrain.recipe": json.dumps(recipe)}
        )


def _report(trainer: Trainer, memory, notes, free, target, out: Path, file_prefix: str, memory_plot: bool) -> None:
    """report.json (and memory.png): the memory plan, what the import found and, with a target,
    the sizes its compiler measures."""
    report = memory_report(trainer, memory)
    report["import"] = {"trainable": trainer.trainable, "frozen": trainer.frozen, "notes": notes}
    if free:
        report["free_dims"] = free  # the memory figures are those of the stand-in size
    # A target's compiler measures flash and RAM (targets/<name>.mk); None, the library default,
    # spares the compile and reports the planner's host figures.
    report = targets.add_sizes(report, target, out / "model.c")
    if target == "wasm32" and not file_prefix:  # the tools find artifacts under their plain names
        from .wasm import build_module  # the module edgetrain.js loads: trainer, description, C library

        report["wasm_module_bytes"] = build_module(out).stat().st_size
    write_report(report, out, memory_plot)


class Compiled(NamedTuple):
    """A trainer and the template data of its C, emitted with `memory`."""

    trainer: Trainer
    model_c: Any

    @property
    def memory(self) -> Any:
        return self.model_c.memory


# generate_artifacts' options that build_trainer takes as they are.
_TRAINER_OPTIONS = ("frozen_params", "ignore_index", "class_weights", "loss_input_names", "additional_output_names")


@dataclass
class _Stages:
    """generate_artifacts' compile, stage by stage: frontend (load_model) -> trainer (forward, loss,
    backward: build_trainer) -> lower -> plan_memory -> emit. compile_batched runs the chain at the
    batches it needs to write the C for any batch up to max_batch; meet_budget picks the memory
    policy (fused update, recomputation) from the plans' RAM."""

    model: Any
    prefix: str
    max_batch: int
    trainer_options: dict[str, Any]
    update_policy: str | None
    untie: bool
    frozen_bn: bool
    federated: bool
    fused_update: bool
    ram_budget: int | None
    row_bands: bool
    qas: bool
    notes: list[str] = field(default_factory=list)  # what the import found, each said once
    probes: dict[int, Any] = field(default_factory=dict)  # id(ModelC) -> the trainer at another batch

    @classmethod
    def of(cls, model: Any, prefix: str, max_batch: int, options: dict[str, Any]) -> _Stages:
        """The stages of generate_artifacts' options (as its body gathers them)."""
        spec = OptimizerSpec(
            kind=OptimType(options["optimizer"]),
            lr=float(options["learning_rate"]),
            weight_decay=float(options["weight_decay"]),
            momentum=float(options["momentum"]),
            nesterov=bool(options["nesterov"]),
            max_grad_norm=None if options["max_grad_norm"] is None else float(options["max_grad_norm"]),
        )
        policy = options["update_policy"]
        trainer_options = dict(
            loss=None if options["loss"] is None else LossType(options["loss"]),
            optimizer=spec,
            requires_grad=options["requires_grad"] if policy is None else None,
            **{k: options[k] for k in _TRAINER_OPTIONS},
        )
        return cls(
            model=model,
            prefix=prefix,
            max_batch=max_batch,
            trainer_options=trainer_options,
            update_policy=policy,
            untie=options["untie"],
            frozen_bn=options["frozen_bn"],
            federated=options["federated"],
            fused_update=bool(options["fused_update"]),
            ram_budget=options["ram_budget"],
            row_bands=bool(options.get("row_bands", False)),
            qas=options.get("qas", True),
        )

    @property
    def spec(self) -> OptimizerSpec:
        """The optimizer the trainer compiles in."""
        return self.trainer_options["optimizer"]

    def graph(self, batch: int, dims: dict) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ImportNote)
            graph = load_model(self.model, batch, dims, untie=self.untie, frozen_bn=self.frozen_bn)
        for warning in caught:
            if issubclass(warning.category, ImportNote) and str(warning.message) not in self.notes:
                self.notes.append(str(warning.message))
                warnings.warn(warning.message, stacklevel=6)
        return graph

    def trainer(self, graph: Any, policy: Plan) -> Trainer:
        options = dict(self.trainer_options)
        if self.update_policy is not None:
            options["requires_grad"] = policy_parameters(graph, self.update_policy)
        return build_trainer(
            graph,
            recompute=policy.recompute,
            keep_every=policy.keep_every,
            # federated learning keeps float references and deltas of every trainable parameter
            integer_updates=self.qas and not self.federated,
            **options,
        )

    def c(self, trainer: Trainer, consts: dict, policy: Plan, packed: bool = True, bands: dict | None = None) -> Any:
        """bands: the row bands this compile's largest batch chose (lower's row_bands), if any."""
        program = lower(trainer, self.prefix, self.federated, policy.fused_update, consts, bands)
        return emit(program, plan_memory(program, packed))

    def compile(self, policy: Plan, dims: dict) -> Compiled:
        bands: dict | None = {} if policy.row_bands else None
        trainer, model_c, probe = compile_batched(
            lambda batch: self.trainer(self.graph(batch, dims), policy),
            lambda t, consts, packed=True: self.c(t, consts, policy, packed, bands),
            self.max_batch,
        )
        self.probes[id(model_c)] = probe
        return Compiled(trainer, model_c)

    def within_budget(self, dims: dict) -> Compiled:
        can_fuse = self.spec.max_grad_norm is None
        return meet_budget(
            lambda policy: self.compile(policy, dims),
            Plan(self.fused_update, row_bands=self.row_bands),
            self.ram_budget,
            can_fuse=can_fuse,
        )


def _compile(stages: _Stages, dims: dict, defer: bool) -> tuple[Compiled, dict[str, str]]:
    """The compiled trainer, and the free input dimensions ({"name:axis": symbolic name}): with
    `defer`, a model some of whose dimensions nothing fixes is built at a stand-in size for the ONNX
    artifacts and checkpoint, which do not depend on it, and no C is written."""
    try:
        return stages.within_budget(dims), {}
    except DynamicShapeError as exc:
        if not defer:
            raise
        free = {f"{name}:{axis}": param for name, axis, param in exc.dims}
        try:
            compiled = stages.within_budget({**dims, **dict.fromkeys(free, STAND_IN)})
        except EdgetrainError:
            raise exc from None
    warnings.warn(
        ImportNote(
            f"{', '.join(f'{k} ({v})' if v else k for k, v in free.items())}: nothing fixes "
            "these input dimensions, so no C is written; the host's Module compiles the "
            "trainer at its first call's shapes (a device needs dim_values)"
        ),
        stacklevel=3,
    )
    return compiled, free


# The size a free input dimension takes while the ONNX artifacts and checkpoint are built.
STAND_IN = 1


def _proto(model) -> onnx.ModelProto:
    return model if isinstance(model, onnx.ModelProto) else onnx.load(os.fspath(model))


def _free_axes(proto: onnx.ModelProto, free: dict[str, str]) -> None:
    """Give the free input dimensions their symbolic names back in an artifact model's inputs; the
    shapes recorded inside, those of the stand-in size, are dropped."""
    if not free:
        return
    del proto.graph.value_info[:]
    for value in proto.graph.output:
        value.type.tensor_type.ClearField("shape")
    for value in proto.graph.input:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            key = f"{value.name}:{axis}"
            if key in free:
                dim.Clear()
                if free[key]:
                    dim.dim_param = free[key]


def specialize(directory: Path, recipe: dict, max_batch: int, dims: dict[str, int]) -> Path:
    """The artifacts of the trainer `directory`'s recipe compiles at batches up to max_batch with
    the free dimensions `dims`: generated once into the build cache, then found there."""
    from .host.build import cache_dir

    source = Path(directory) / recipe["source"]
    key = hashlib.sha256(source.read_bytes())
    key.update(json.dumps([recipe, max_batch, sorted(dims.items())], sort_keys=True).encode())
    out = cache_dir() / "specialized" / key.hexdigest()[:24]
    if not (out / "training_model.onnx").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ImportNote)  # said when the artifacts were generated
                generate_artifacts(
                    source,
                    artifact_directory=tmp,
                    batch_size=max_batch,
                    c_prefix=recipe["c_prefix"],
                    dim_values={**recipe["dim_values"], **dims},
                    **recipe["options"],
                )
            try:
                os.replace(tmp, out)  # atomic: a concurrent specialization of the same shapes agrees
            except OSError:
                if not (out / "training_model.onnx").exists():
                    raise
            Path(tmp).mkdir(exist_ok=True)  # for the context manager's cleanup
    return out


def _check_options(
    spec: OptimizerSpec, target, requires_grad, frozen_params, update_policy, fused_update, memory_plot
) -> None:
    """generate_artifacts' arguments that cannot go together, or are unknown."""
    for name, names in (("requires_grad", requires_grad), ("frozen_params", frozen_params)):
        if isinstance(names, str):  # would be read a character at a time
            raise EdgetrainError(f"{name} takes a list of parameter names, not the string {names!r}")
    if target is not None and target not in TARGETS:
        raise EdgetrainError(f"unknown target {target!r}; known targets: {', '.join(TARGETS)}")
    if spec.problem():
        raise EdgetrainError(spec.problem())
    if update_policy is not None and requires_grad is not None:
        raise EdgetrainError("give requires_grad or update_policy, not both")
    if memory_plot and not can_plot():
        raise EdgetrainError(NO_MATPLOTLIB)
    if fused_update and spec.max_grad_norm is not None:
        raise EdgetrainError(
            "fused_update cannot clip by global norm (max_grad_norm): the norm needs every "
            "gradient before the first update"
        )


def _write_checkpoints(trainer: Trainer, out: Path, file_prefix: str, nominal_checkpoint: bool) -> None:
    """The initial checkpoint, and the nominal one (ONNX Runtime's name: the table without values)."""
    write_artifact(out / f"{file_prefix}checkpoint", checkpoint.encode(initial_checkpoint(trainer)))
    if nominal_checkpoint:
        nominal = initial_checkpoint(trainer)
        nominal.optimizer_state, nominal.contents = None, checkpoint.NOMINAL
        write_artifact(out / f"{file_prefix}nominal_checkpoint", checkpoint.encode(nominal))


# A prefix taken in its old meaning (the C prefix) when c_prefix is not given: ONNX Runtime's
# file-name prefixes end in a separator ("mnist_"), C prefixes rarely do.
_OLD_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?<!_)")


def _prefixes(prefix, c_prefix) -> tuple[str, str]:
    """(the artifact files' name prefix, the C functions' prefix)."""
    if c_prefix is None and isinstance(prefix, str) and _OLD_PREFIX.fullmatch(prefix):
        warnings.warn(
            f"prefix={prefix!r} as the C function prefix is deprecated: pass c_prefix={prefix!r}; "
            "prefix is ONNX Runtime's artifact file-name prefix from the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        prefix, c_prefix = "", prefix
    file_prefix = "" if prefix is None else str(prefix)
    if any(c in file_prefix for c in "/\\\0"):
        raise EdgetrainError(f"prefix {file_prefix!r}: a file-name prefix cannot hold a path separator or NUL")
    c_prefix = "model" if c_prefix is None else c_prefix
    check_prefix(c_prefix)
    return file_prefix, c_prefix


def _refuse_ort_only(ort_format, custom_op_library) -> None:
    if ort_format:
        raise EdgetrainError(
            "ort_format=True: edgetrain writes ONNX models and a C trainer, not ONNX Runtime's "
            "ORT format; leave ort_format False"
        )
    if custom_op_library is not None:
        raise EdgetrainError(
            "custom_op_library: edgetrain compiles every op into C from its own kernels and "
            "cannot load a custom op library; the model must use standard ONNX ops"
        )


def _with_loss_block(model, block, loss_input_names) -> onnx.ModelProto:
    """`model` with the loss `block` (an edgetrain.onnxblock.Block) appended: its one output is the
    scalar loss, its extra inputs the loss's targets."""
    try:
        from . import onnxblock
    except ImportError:
        onnxblock = None  # type: ignore[assignment]
    if onnxblock is None or not isinstance(block, onnxblock.Block):
        raise EdgetrainError(
            f"loss must be a LossType, its name, None or an edgetrain.onnxblock.Block, got {type(block).__name__}"
        )
    proto = _proto(model)
    names = list(loss_input_names) if loss_input_names else [o.name for o in proto.graph.output]
    return onnxblock.with_loss(block, proto, names)


def generate_inference(
    model, artifact_directory="out", batch_size=None, *, prefix="model", dim_values=None, row_bands=False
) -> Path:
    """Compile a model with nothing to train into model.c / model.h whose one function is `infer`
    (initializers compiled in as constants), for batches of 1 to batch_size (default
    DEFAULT_MAX_BATCH), as generate_artifacts. row_bands: its layers up to the first that cannot
    (a global pool, a reshape) run a band of output rows at a time where that lowers its peak, as
    generate_artifacts' option. Returns the artifact directory."""
    check_prefix(prefix)

    bands: dict | None = {} if row_bands else None  # as the largest batch chooses them

    def lower_plan_emit(trainer: Trainer, consts: dict, packed: bool = True):
        program = lower_inference(trainer, prefix, consts, bands)
        return emit(program, plan_memory(program, packed))

    _, model_c, _ = compile_batched(
        lambda batch: inference_only(load_model(model, batch, dim_values)), lower_plan_emit, _max_batch(batch_size)
    )
    check_ram(model_c.memory.ram_bytes)
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
        fingerprint=trainer.fingerprint(),
        names=[n for n, _ in entries],
        kinds=[k for _, k in entries],
        arrays=[g.params[n] if k != checkpoint.BUFFER else g.buffers[n] for n, k in entries],
        optimizer_state=[[np.zeros_like(g.params[p]) for p in trainer.trainable] for _ in slots] or None,
        learning_rate=trainer.optimizer.lr,
    )


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
    named = {
        v.name: v.type.tensor_type.shape.dim[0].dim_param
        for v in list(proto.graph.input) + list(proto.graph.output)
        if len(v.type.tensor_type.shape.dim)
    }
    first = next((named.get(n, "") for n in g.inputs if isinstance(sizes[n], Affine)), "")
    return {
        "max": model_c.max_batch,
        "fixed": model_c.fixed_batch,
        "small": model_c.small_batch,
        "axes": {n: named.get(n, first) for n, size in sizes.items() if isinstance(size, Affine)},
    }


def _any_batch(proto: onnx.ModelProto, trainer: Trainer, probe: Trainer, axes: dict[str, str]) -> None:
    """Give the eval model its batch axis back, so ONNX Runtime runs its forward part (the exported
    inference model) at any batch: the batch axis named as in the user's model (other sizes that
    change with the batch left unnamed), and each Reshape shape whose one entry
    changes with the batch written as 0 there (copy the input's, where that is the batch) or -1.
    A constant changing otherwise leaves the model as it is."""
    g, other = trainer.graph, probe.graph
    changed = {
        n for n in g.constants if n in other.constants and not np.array_equal(g.constants[n], other.constants[n])
    }
    patched: dict[str, np.ndarray] = {}
    for node in trainer.eval_model_nodes:
        for slot, name in enumerate(node.inputs):
            if name not in changed:
                continue
            if node.op != "Reshape" or slot != 1 or node.attr("allowzero", 0):
                return
            shape, at_other = g.constants[name], other.constants[name]
            moving = np.flatnonzero(shape != at_other) if shape.shape == at_other.shape else np.empty(0, np.intp)
            if len(moving) != 1:
                return
            axis, data = moving[0], node.inputs[0]
            copies = axis < len(g.shape(data)) and (g.shape(data)[axis], other.shape(data)[axis]) == (
                shape[axis],
                at_other[axis],
            )
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


def _onnx_models(
    trainer: Trainer, prefix: str, model_c, probe: Trainer | None, model, file_prefix: str = ""
) -> dict[str, onnx.ModelProto]:
    g = trainer.graph
    frozen = {p: g.params[p] for p in trainer.frozen}
    data = g.inputs + ([trainer.labels] if trainer.labels else [])
    counter = [COUNTER] if COUNTER in g.values else []
    graded = {p: grad for p in trainer.trainable if (grad := trainer.grads[p])}
    grads = list(graded.values())
    renames = {grad: f"{p}_grad" for p, grad in graded.items()}
    renames |= {value: f"{buffer}_updated" for buffer, value in trainer.state_updates.items()}
    # a trained weight stored as int8 (QAS): the training model quantizes it as the C stores it
    integers = [stored.quantizer for stored in trainer.integer_weights.values()]
    training = to_onnx(
        g,
        integers + trainer.train_nodes,
        data + counter + trainer.trainable + trainer.buffers,
        [trainer.loss, *trainer.extra_outputs] + grads + list(trainer.state_updates.values()),
        frozen,
        "training",
        renames,
    )
    meta = {
        "edgetrain.prefix": prefix,
        "edgetrain.fingerprint": f"{trainer.fingerprint():016x}",
        "edgetrain.inputs": json.dumps(g.inputs),
        "edgetrain.labels": trainer.labels or "",
        "edgetrain.optimizer": trainer.optimizer.kind.value,
        "edgetrain.outputs": json.dumps([[n, list(g.shape(n))] for n in g.outputs]),
        "edgetrain.output_dtypes": json.dumps([str(g.values[n].dtype) for n in g.outputs]),
        "edgetrain.additional_outputs": json.dumps(list(trainer.extra_outputs)),
        "edgetrain.checkpoint": f"{file_prefix}checkpoint",
        # frozen weights that may not change (trainer.compiled_weights): read-only in the API
        "edgetrain.compiled_weights": json.dumps(list(trainer.compiled_weights)),
        # trained weights stored as int8 (QAS): each value is its channel's scale times an integer
        "edgetrain.integer_weights": json.dumps(
            {
                w: np.asarray(g.constants[s.scale], np.float32).ravel().tolist()
                for w, s in trainer.integer_weights.items()
            }
        ),
    }
    batch = _batch_meta(trainer, model_c, model)
    meta["edgetrain.batch"] = json.dumps(batch)
    onnx.helper.set_model_props(training, meta)
    evaluation = to_onnx(
        g,
        trainer.eval_model_nodes,
        data + trainer.trainable + trainer.buffers,
        [trainer.loss, *trainer.extra_outputs],
        frozen,
        "eval",
    )
    if probe is not None and batch["axes"]:
        _any_batch(evaluation, trainer, probe, batch["axes"])
    onnx.helper.set_model_props(evaluation, meta)
    return {
        "training_model.onnx": training,
        "eval_model.onnx": evaluation,
        "optimizer_model.onnx": _optimizer_model(trainer),
    }


def _optimizer_model(trainer: Trainer) -> onnx.ModelProto:
    """One update node per parameter, executable by the ONNX reference with our ops."""
    from .ir import ET_DOMAIN
    from onnx import helper, TensorProto

    g, spec = trainer.graph, trainer.optimizer
    inputs = [
        helper.make_tensor_value_info("learning_rate", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("step", TensorProto.INT64, []),
    ]
    outputs, nodes = [], []
    for p in trainer.trainable:
        shape = g.shape(p)
        state = [f"{p}.{slot}" for slot in spec.state_slots]
        names = [p, f"{p}_grad"] + state
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names]
        new = [f"{n}.updated" for n in [p] + state]
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in new]
        nodes.append(
            helper.make_node(spec.kind.value, ["learning_rate", "step"] + names, new, domain=ET_DOMAIN, **spec.attrs())
        )
    graph = helper.make_graph(nodes, "optimizer", inputs, outputs)
    model = helper.make_model(
        graph,
        producer_name="edgetrain",
        opset_imports=[helper.make_opsetid("", g.opset), helper.make_opsetid(ET_DOMAIN, 1)],
    )
    model.ir_version = min(model.ir_version, 10)
    return model
