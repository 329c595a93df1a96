"""Codegen: emit(Program, MemoryPlan) -> template data (ModelC, InferenceC: frozen dataclasses of
plain data), which render() turns into model.c / model.h through the C-literal filters. Takes the
lowered program (edgetrain.lower) and its memory plan (edgetrain.memory.plan); gives the C text.
compile_batched runs the three stages at a few batches to write the kernel arguments that follow
the batch as C expressions of it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, cast

import jinja2
import numpy as np

from ..errors import EdgetrainError
from ..ir import PER_WORD
from ..lower import Affine, Arg, Floats, LoweredFunction, ParamInfo, Program, lower, lower_inference
from ..memory import Block
from ..memory.plan import FunctionPlan, MemoryPlan, plan
from ..ops import Call, Counter, Tensor, Var
from ..runtime_c import headers as runtime_headers
from .filters import FILTERS
from .runtime import every_runtime, used_runtime


@dataclass(frozen=True)
class Stmt:
    fn: str
    args: tuple[Arg, ...]
    checked: bool
    comment: str  # model text: the template escapes it

    def __post_init__(self):
        # Kernel names come from the op registry; one built from model text would reach the C raw.
        if not re.fullmatch(r"et_[a-z0-9_]+", self.fn):
            raise ValueError(f"kernel name {self.fn!r} is not an et_* C identifier")


@dataclass(frozen=True)
class Local:
    """`const <type> <name> = <fn>(<args>);` (fn None: `= <args[0]>`): a scalar a function computes
    once before its kernel calls (an optimizer's StepValue)."""

    type: str
    name: str
    fn: str | None
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Function:
    stmts: tuple[Stmt, ...]
    arena_floats: int
    lower_bound: int
    blocks: tuple[Block, ...]  # the arena's allocations, for the memory report

    @property
    def arena_views(self) -> frozenset[str]:
        """The arena's members its statements read or write (_ARENA_VIEWS): et_arena.i for integer
        and bool tensors, et_arena.u for bit masks."""
        return frozenset(a.base for stmt in self.stmts for a in stmt.args if a.base.startswith("et_arena."))


@dataclass(frozen=True)
class StateUpdate:
    value: Arg  # the new contents, computed by train_step
    offset: int  # in et_buffers
    size: int


@dataclass(frozen=True)
class GradInfo:
    grad: Arg | None  # None: the loss does not depend on this parameter, or `factors` make it
    offset: int
    size: int
    factors: tuple[Arg, Arg] | None = None  # the gradient is their outer product (lower._outer_products)
    rows: int = 0  # the first factor's length


@dataclass(frozen=True)
class ModelC:
    prefix: str
    input_sizes: tuple[int, ...]
    input_types: tuple[str, ...]  # "float" | "int32_t" (integer and bool tensors)
    label_type: str | None  # "float" | "int32_t"
    label_size: int
    output_sizes: tuple[int, ...]
    output_types: tuple[str, ...]  # of infer's outputs, as input_types
    train: Function
    eval: Function
    infer: Function
    train_loss: Arg
    eval_loss: Arg
    infer_outputs: tuple[Arg, ...]
    grads: tuple[GradInfo, ...]
    state_updates: tuple[StateUpdate, ...]
    params: tuple[ParamInfo, ...]
    param_init: Floats
    buffer_init: Floats
    consts: Floats  # what stays in flash: the frozen parameters (frozen_floats), then the constants
    int_consts: tuple[int, ...]  # integer and bool constants read at run time
    narrow_consts: tuple[int, ...]  # int8 constants (an int8 layer's weights)
    state_slots: int
    step_values: tuple[Local, ...]  # the optimizer's scalars, computed once per step before its updates
    optimizer_update: tuple[Stmt, ...]  # optimizer_step's updates of every trainable parameter
    learning_rate: float
    max_grad_norm: float | None
    fingerprint: int
    table: bytes
    header_bytes: int
    trainable_floats: int  # in et_params
    trainable_elements: int  # of every trainable parameter (et_state's and the gradients' layout)
    integers: tuple[int, ...]  # et_qparams: trained int8 weights stored as integers (QAS)
    frozen_floats: int
    federated: bool  # keeps a reference copy of the trainable parameters for model deltas
    fused_update: bool  # train_step updates the parameters; no gradient buffers, optimizer_step does nothing
    memory: MemoryPlan  # the plan the C was emitted with (at the largest batch)
    max_batch: int = 1  # the C functions run any batch n from 1 to it (compile_batched)
    fixed_batch: str | None = None  # why they run max_batch alone; None when they run any
    batch_consts: tuple[Affine, ...] = ()  # et_batch_consts, computed from n at each call
    small_batch: str | None = None  # why train_step refuses a batch of 1 (BatchNorm over one value)
    # additional_output_names: indices into the outputs that train_step and eval_step also write,
    # and where each step leaves them
    extra_outputs: tuple[int, ...] = ()
    train_extra: tuple[Arg, ...] = ()
    eval_extra: tuple[Arg, ...] = ()

    @property
    def arena_floats(self) -> int:
        return max(self.train.arena_floats, self.eval.arena_floats, self.infer.arena_floats)

    @property
    def ram_bytes(self) -> int:
        return self.memory.ram_bytes

    # The frozen parameters have an array of their own (et_frozen), which a build defining
    # ET_FROZEN_WRITABLE keeps in RAM so they can be set; the constants' array stays in flash.
    @property
    def frozen_init(self) -> np.ndarray:
        return self.consts.array[: self.frozen_floats]

    @property
    def const_init(self) -> np.ndarray:
        return self.consts.array[self.frozen_floats :]

    @property
    def arena_views(self) -> frozenset[str]:
        """The arena members the C uses; the union declares those alone (cppcheck flags the others)."""
        outputs = self.infer_outputs + self.train_extra + self.eval_extra
        return self.train.arena_views | self.eval.arena_views | self.infer.arena_views | {a.base for a in outputs}


@dataclass(frozen=True)
class InferenceC:
    """A model with nothing to train: the C holds `infer` alone, every initializer compiled in."""

    prefix: str
    input_sizes: tuple[int, ...]
    input_types: tuple[str, ...]
    output_sizes: tuple[int, ...]
    output_types: tuple[str, ...]
    infer: Function
    infer_outputs: tuple[Arg, ...]
    buffer_init: Floats
    consts: Floats
    int_consts: tuple[int, ...]
    narrow_consts: tuple[int, ...]
    memory: MemoryPlan
    max_batch: int = 1  # as in ModelC
    fixed_batch: str | None = None
    batch_consts: tuple[Affine, ...] = ()

    @property
    def arena_floats(self) -> int:
        return self.infer.arena_floats

    @property
    def ram_bytes(self) -> int:
        return self.memory.ram_bytes

    @property
    def arena_views(self) -> frozenset[str]:
        return self.infer.arena_views | {a.base for a in self.infer_outputs}


# The generated C: model.c includes model.h and model_weights.h, the initial values.
SOURCES = ("model.c", "model.h", "model_weights.h")

# The arena is a union of equally long arrays of each C type its tensors have (templates/model.c.j2),
# so each tensor is read and written through an lvalue of its own type wherever the planner puts it.
# Integer tensors, int32 or int64 in the model, and bool ones (0 or 1) are all int32_t in the C;
# quantized ones keep their own width (ir.Graph.c_type).
_ARENA_VIEWS = {
    "float": "et_arena.f",
    "uint32_t": "et_arena.u",
    "int32_t": "et_arena.i",
    "int8_t": "et_arena.s8",
    "uint8_t": "et_arena.u8",
    "int16_t": "et_arena.s16",
    "uint16_t": "et_arena.u16",
}


def _plain_arg(a) -> Arg:
    """A kernel argument that is no tensor, as template data."""
    if isinstance(a, Arg):
        return a
    if isinstance(a, Var):
        return Arg("var", a.name)
    if isinstance(a, Counter):
        return Arg("counter")
    if a is None:
        return Arg("null")
    if isinstance(a, tuple):
        return Arg("ints", value=tuple(int(v) for v in a))
    if isinstance(a, (bool, int, np.integer)):
        return Arg("int", value=int(a))
    return Arg("float", value=float(a))


class _Places:
    """Where a function's tensors are: fixed storage (the Program's) or the arena (the plan's)."""

    def __init__(self, program: Program, offsets: dict[str, int]):
        self.program, self.offsets = program, offsets

    def at(self, name: str) -> Arg:
        fixed = self.program.fixed.get(name)
        if fixed is not None:
            return fixed
        c_type = self.program.tensors[name].c_type
        return Arg("ptr", _ARENA_VIEWS[c_type], self.offsets[name] * PER_WORD[c_type])  # words to elements

    def arg(self, a: object) -> Arg:
        if isinstance(a, Tensor):
            base = self.at(a.name)
            assert isinstance(base.offset, int)  # Program offsets are fixed; compile_batched writes n
            return Arg("ptr", base.base, base.offset + a.offset, (a.name, a.offset))  # for _batched_arg
        return _plain_arg(a)


def _emit_function(program: Program, f: LoweredFunction, planned: FunctionPlan) -> tuple[Function, _Places]:
    places = _Places(program, planned.offsets)
    stmts = tuple(
        Stmt(call.fn, tuple(places.arg(a) for a in call.args), call.checked, f.comment(i))
        for i, call in enumerate(f.calls)
    )
    return Function(stmts, planned.arena_floats, planned.lower_bound, planned.blocks), places


def _stmt(call: Call, comment: str) -> Stmt:
    return Stmt(call.fn, tuple(map(_plain_arg, call.args)), call.checked, comment)


def emit(program: Program, memory: MemoryPlan) -> ModelC | InferenceC:
    """The template data of `program` with its arena laid out as `memory` plans it."""
    infer, infer_at = _emit_function(program, program.infer, memory.functions["infer"])
    common: dict[str, Any] = dict(
        prefix=program.prefix,
        input_sizes=program.input_sizes,
        input_types=program.input_types,
        output_sizes=program.output_sizes,
        output_types=program.output_types,
        infer=infer,
        infer_outputs=tuple(map(infer_at.at, program.infer_outputs)),
        buffer_init=program.buffer_init,
        consts=program.consts,
        int_consts=program.int_consts,
        narrow_consts=program.narrow_consts,
        memory=memory,
        batch_consts=program.batch_consts,
    )
    if program.train is None or program.eval is None or not program.optimizer_update or program.loss is None:
        return InferenceC(**common)
    train, train_at = _emit_function(program, program.train, memory.functions["train"])
    evaluate, eval_at = _emit_function(program, program.eval, memory.functions["eval"])
    grads = tuple(
        GradInfo(
            train_at.at(g.grad) if g.grad else None,
            g.offset,
            g.size,
            (train_at.at(g.factors[0]), train_at.at(g.factors[1])) if g.factors else None,
            g.rows,
        )
        for g in program.grads
    )
    return ModelC(
        **common,
        label_type=program.label_type,
        label_size=program.label_size,
        train=train,
        eval=evaluate,
        train_loss=train_at.at(program.loss),
        eval_loss=eval_at.at(program.loss),
        grads=grads,
        state_updates=tuple(StateUpdate(train_at.at(u.value), u.offset, u.size) for u in program.state_updates),
        params=program.params,
        param_init=program.param_init or Floats([]),
        state_slots=program.state_slots,
        step_values=tuple(Local(v.type, v.name, v.fn, tuple(map(_plain_arg, v.args))) for v in program.step_values),
        optimizer_update=tuple(_stmt(call, "every trainable parameter") for call in program.optimizer_update),
        learning_rate=program.learning_rate,
        max_grad_norm=program.max_grad_norm,
        fingerprint=program.fingerprint,
        table=program.table,
        header_bytes=program.header_bytes,
        trainable_floats=program.trainable_floats,
        trainable_elements=program.trainable_elements,
        integers=program.integers,
        frozen_floats=program.frozen_floats,
        federated=program.federated,
        fused_update=program.fused_update,
        extra_outputs=program.extra_outputs,
        train_extra=tuple(map(train_at.at, program.extra)),
        eval_extra=tuple(map(eval_at.at, program.extra)),
    )


def build(
    trainer,
    prefix: str,
    federated: bool = False,
    fused_update: bool = False,
    batch_consts: dict[str, Affine | np.ndarray] | None = None,
) -> ModelC:
    """The three stages at once: lower, plan, emit (the trainer's template data)."""
    program = lower(trainer, prefix, federated, fused_update, batch_consts)
    model = emit(program, plan(program))
    assert isinstance(model, ModelC)
    return model


def build_inference(trainer, prefix: str, batch_consts: dict[str, Affine | np.ndarray] | None = None) -> InferenceC:
    program = lower_inference(trainer, prefix, batch_consts)
    model = emit(program, plan(program))
    assert isinstance(model, InferenceC)
    return model


# ---- the batch: a trainer compiled for a batch of N runs any batch n from 1 to N ----


class _Fixed(Exception):
    """Why a trainer runs only the batch it was compiled for."""


def compile_batched(trainer_at, lower, max_batch: int):
    """(trainer, model, probe) for batches of 1 to max_batch: `lower(trainer_at(max_batch), consts)`,
    whose arena, memory plan and buffers are those of the largest batch, with every kernel argument
    that changes with the batch written as a C expression of the batch count n the call runs.

    They are found by compiling at two more batches (_probes) and comparing the kernel calls, which
    must be the same calls on the same tensors: an integer that differs is affine in the batch (the
    first two builds fix the line, the third checks it), a float or a scalar constant (et_batch_consts)
    the float nearest 1 / affine (a mean's scale). Anything else that changes (another constant read
    at run time, different calls) leaves the model fixed at its batch, and `fixed_batch` says why.
    A model whose inputs have no batch axis is fixed at the leading size of its first input. `probe`
    is the trainer at another batch (None when the model compiles at no other), for the ONNX models.
    `lower` takes packed=False where the memory plan's offsets are not emitted (planner.place)."""
    trainer = trainer_at(max_batch)
    batches = [max_batch] + _probes(max_batch)
    try:
        trainers = [trainer, _in_order_of(trainer_at(batches[1]), trainer)]
    except EdgetrainError as exc:
        return trainer, _fixed(lower(trainer, {}), max_batch, f"it does not compile at batch {batches[1]}: {exc}"), None
    probe = trainers[1]
    try:
        axes = _batch_axes(trainers, batches)
    except _Fixed as why:
        return trainer, _fixed(lower(trainer, {}), max_batch, str(why)), probe
    g = trainer.graph
    if not any(name in axes for name in g.inputs):
        shape = g.shape(g.inputs[0]) if g.inputs else ()
        return (
            trainer,
            _fixed(
                lower(trainer, {}),
                shape[0] if shape else 1,
                "the model's inputs have fixed shapes (no symbolic batch axis)",
            ),
            probe,
        )
    if max_batch == 1:
        return trainer, _batch_sizes(lower(trainer, {}), trainer, axes, 1), probe
    try:
        try:
            trainers.append(_in_order_of(trainer_at(batches[2]), trainer))
        except EdgetrainError as exc:
            raise _Fixed(f"it does not compile at batch {batches[2]}: {exc}") from None
        consts = _batch_consts(trainers, batches)
        # the probes' arena offsets are compared with nothing (_batched_arg): no tight packing for them
        models = [lower(trainers[0], consts)] + [lower(t, consts, packed=False) for t in trainers[1:]]
        model = _batch_sizes(_batched(models, trainers, batches, consts), trainer, axes, max_batch)
    except _Fixed as why:
        return trainer, _fixed(lower(trainer, {}), max_batch, str(why)), probe
    if isinstance(model, ModelC):  # a model that does not compile at batch 1 does not train there
        try:
            trainer_at(1)
        except EdgetrainError as exc:
            model = replace(model, small_batch=f"a batch of 1 does not train: {exc}")
    return trainer, model, probe


def _in_order_of(trainer: Any, reference: Any) -> Any:
    """`trainer`, compiled at a probe's batch, with each function's nodes in the order `reference`'s
    (the largest batch's) has them, where both have the same nodes: an order chosen by weighing
    bytes (where a recomputation runs, trainer/recompute.py) can fall otherwise at another batch,
    when the bytes of weight gradients, which the batch leaves as they are, are weighed against
    those of activations. The two differ in shapes alone, so the one's order is the other's too;
    where it is not (each node still after what it reads), the trainer is left as it was."""
    ordered = {}
    for function in ("train_nodes", "eval_nodes", "infer_nodes"):
        nodes = getattr(trainer, function)
        rank = {key: i for i, key in enumerate(_named(getattr(reference, function)))}
        keys = _named(nodes)
        if set(keys) != set(rank):
            return trainer
        ordered[function] = [node for _, node in sorted(zip(keys, nodes), key=lambda pair: rank[pair[0]])]
        made = {name for node in nodes for name in node.outputs}
        seen: set[str] = set()
        for node in ordered[function]:
            if any(name in made and name not in seen for name in node.inputs):
                return trainer
            seen.update(node.outputs)
    return replace(trainer, **ordered, backward_start=reference.backward_start)


def _named(nodes: list[Any]) -> list[tuple[str, int]]:
    """Each node's name, and how many nodes of that name came before it (a recomputed node keeps
    its original's name)."""
    seen: dict[str, int] = {}
    keys = []
    for node in nodes:
        keys.append((node.name, seen.get(node.name, 0)))
        seen[node.name] = keys[-1][1] + 1
    return keys


def _fixed(model, max_batch: int, why: str):
    return replace(model, max_batch=max_batch, fixed_batch=f"the trainer runs batches of {max_batch} only: {why}")


def _probes(max_batch: int) -> list[int]:
    """Two more batches to compile at: above 1, since a batch of 1 takes other paths
    (_outer_products), and within the batches the C will run where there is room."""
    return [b for b in dict.fromkeys((max_batch - 1, 2, max_batch + 1, max_batch + 2)) if b >= 2 and b != max_batch][:2]


def _batch_axes(trainers, batches) -> set[str]:
    """The data inputs, labels and outputs whose first axis is the batch; the others' shapes must
    not change with it."""
    g = trainers[0].graph
    names = list(g.inputs) + ([trainers[0].labels] if trainers[0].labels else []) + list(g.outputs)
    axes = set()
    for name in names:
        shapes = [t.graph.shape(name) if name in t.graph.values else None for t in trainers]
        if all(s == shapes[0] for s in shapes):
            continue
        first = shapes[0]
        if first is None or not all(s and s[0] == b and s[1:] == first[1:] for s, b in zip(shapes, batches)):
            raise _Fixed(
                f"'{name}' changes shape with the batch other than along its first axis "
                f"({' and '.join(f'{s} at batch {b}' for s, b in zip(shapes, batches))})"
            )
        axes.add(name)
    return axes


def _batch_sizes(model, trainer, axes: set[str], max_batch: int):
    """`model` with the sizes of its batched data inputs, labels and outputs per sample times n."""
    g = trainer.graph

    def size(name, at):
        return Affine(at // max_batch, 0) if name in axes else at

    fields = dict(
        input_sizes=tuple(map(size, g.inputs, model.input_sizes)),
        output_sizes=tuple(map(size, g.outputs, model.output_sizes)),
        max_batch=max_batch,
    )
    if isinstance(model, ModelC) and trainer.labels:
        fields["label_size"] = size(trainer.labels, model.label_size)
    return replace(model, **fields)


def _batch_consts(trainers, batches) -> dict[str, Affine | np.ndarray]:
    """Constants that change with the batch in a way the C can follow: scalar floats that are the
    float nearest 1 / affine (-> that Affine, computed from n at each call); splats, one value
    repeated (a recurrent layer's initial zeros); and values per sample, each batch's the first of
    a longer one's, of a length affine in the batch (a decoder's causal mask expanded to the batch).
    The last two -> their values at the batch compiled for, of which a smaller batch reads the first."""
    found: dict[str, Affine | np.ndarray] = {}
    for name in trainers[0].graph.constants:
        values = [v for t in trainers if (v := t.graph.constants.get(name)) is not None]
        if len(values) < len(trainers) or all(
            v.shape == values[0].shape and np.array_equal(v, values[0]) for v in values
        ):
            continue
        if all(v.dtype == np.float32 and v.size == 1 for v in values):
            line = _fit([float(v.reshape(())) for v in values], batches, inverse=True)
            if isinstance(line, Affine):
                found[name] = line
        elif all(v.size and v.dtype == values[0].dtype for v in values) and (
            all(np.all(v == values[0].flat[0]) for v in values) or _per_sample([v.ravel() for v in values], batches)
        ):
            found[name] = values[0]
    return found


def _per_sample(rows: list[np.ndarray], batches) -> bool:
    """Each batch's values the first of the longest's, their count affine in the batch."""
    longest = max(rows, key=len)
    return all(np.array_equal(row, longest[: len(row)], equal_nan=row.dtype.kind == "f") for row in rows) and (
        _fit([len(row) for row in rows], batches) is not None
    )


def _fit(values, batches, inverse=False):
    """`values`, observed at `batches` (the largest first), as one value, an Affine, or None when
    they are neither. Integers that are never negative stay so down to batch 1; a count whose
    inverse is taken stays positive."""
    if all(v == values[0] or v != v and values[0] != values[0] for v in values):  # NaN too
        return values[0]
    if inverse:
        if not all(isinstance(v, float) and np.isfinite(v) and v != 0.0 for v in values):
            return None
        counts = [round(1.0 / v) for v in values]
        if any(c == 0 or float(np.float32(1.0 / c)) != float(np.float32(v)) for c, v in zip(counts, values)):
            return None
        line = _fit(counts, batches)
        return Affine(line.a, line.b, True) if isinstance(line, Affine) and min(line.at(1), counts[0]) > 0 else None
    if not all(isinstance(v, int) for v in values):
        return None
    a, rest = divmod(values[1] - values[0], batches[1] - batches[0])
    line = Affine(a, values[0] - a * batches[0])
    if rest or line.at(batches[2]) != values[2] or (min(values) >= 0 > line.at(1)):
        return None
    return line


def _batched(models, trainers, batches, consts):
    """models[0] with the kernel arguments that change across `models` (compiled at `batches`, with
    the _batch_consts `consts`) written in n."""
    m = models[0]
    functions = ("infer",) if isinstance(m, InferenceC) else ("train", "eval", "infer")
    for other in models[1:]:
        if (other.consts, other.int_consts, other.narrow_consts, other.batch_consts) != (
            m.consts,
            m.int_consts,
            m.narrow_consts,
            m.batch_consts,
        ):
            read = {
                a.value[0]
                for f in functions
                for s in getattr(m, f).stmts
                for a in s.args
                if a.kind == "ptr" and isinstance(a.value, tuple)
            }
            changed = [
                name
                for name in read - set(consts)
                if name in trainers[0].graph.constants
                and not all(
                    np.array_equal(trainers[0].graph.constants[name], t.graph.constants.get(name)) for t in trainers
                )
            ]
            raise _Fixed(
                f"constant tensor{'s' * (len(changed) > 1)} {', '.join(map(repr, sorted(changed)))} read at "
                "run time depend on the batch"
            )
    return replace(m, **{f: _batched_function([getattr(o, f) for o in models], batches, f) for f in functions})


def _batched_function(functions: list[Function], batches, name: str) -> Function:
    first = functions[0]
    for f, batch in zip(functions[1:], batches[1:]):
        if len(f.stmts) != len(first.stmts):
            raise _Fixed(
                f"{name} makes {len(first.stmts)} kernel calls at batch {batches[0]} and {len(f.stmts)} "
                f"at batch {batch}"
            )
    stmts = []
    for same in zip(*(f.stmts for f in functions)):
        s = same[0]
        for other, batch in zip(same[1:], batches[1:]):
            if (other.fn, other.checked, len(other.args)) != (s.fn, s.checked, len(s.args)):
                raise _Fixed(
                    f"{name} calls {s.fn} ({s.comment}) at batch {batches[0]} where it calls {other.fn} "
                    f"({other.comment}) at batch {batch}"
                )
        stmts.append(
            replace(
                s,
                args=tuple(
                    _batched_arg(
                        [o.args[k] for o in same], batches, f"argument {k + 1} of {s.fn} ({s.comment}) in {name}"
                    )
                    for k in range(len(s.args))
                ),
            )
        )
    return replace(first, stmts=tuple(stmts))


def _abridged(text: str, most: int = 60) -> str:
    """A value for a one-line message: a constant's values run to thousands of characters."""
    return text if len(text) <= most else f"{text[: most - 5]} ...)"


def _batched_arg(args: list[Arg], batches, where: str) -> Arg:
    first = args[0]

    def fixed(what):
        seen = ", ".join(f"{_abridged(str(what(a)))} at batch {b}" for a, b in zip(args, batches))
        return _Fixed(f"{where} is {seen}: not a C expression of the batch edgetrain can write")

    if any((a.kind, a.base) != (first.kind, first.base) for a in args):
        raise fixed(lambda a: f"{a.kind} {a.base}".strip())
    if first.kind == "ptr" and isinstance(first.value, tuple):  # a tensor, or a view into one
        places = [cast(tuple, a.value) for a in args]  # (the tensor, the view's offset into it)
        view = _fit([place[1] for place in places], batches)
        starts = {a.offset - place[1] for a, place in zip(args, places)}
        # A tensor's own place is the same at every batch, except in the arena: that is planned for
        # the largest batch, where every smaller batch's tensor fits.
        if (
            any(place[0] != first.value[0] for place in places)
            or view is None
            or (len(starts) > 1 and not first.base.startswith("et_arena"))
        ):
            raise fixed(lambda a: f"{a.value[0]!r} + {a.value[1]}")
        start = first.offset - first.value[1]
        return replace(first, offset=Affine(view.a, view.b + start) if isinstance(view, Affine) else start + view)
    if first.kind in ("int", "float"):
        value = _fit([a.value for a in args], batches, inverse=first.kind == "float")
        if value is None:
            raise fixed(lambda a: a.value)
        return replace(first, value=value)
    if first.kind == "ints":
        rows = [cast(tuple, a.value) for a in args]
        if any(len(row) != len(rows[0]) for row in rows):
            # Values per sample (a buffer expanded to the batch: BERT's token type ids, Gather's
            # indices of them): where each batch's are the first of a longer one's, of a length
            # affine in the batch, those of the batch compiled for serve every batch up to it, whose
            # kernel reads as many of them as its count says.
            if _per_sample([np.asarray(row) for row in rows], batches):
                return first
            raise fixed(lambda a: a.value)
        values = tuple(_fit(list(column), batches) for column in zip(*rows))
        if any(v is None for v in values):
            raise fixed(lambda a: a.value)
        return replace(first, value=values)
    if any(a != first for a in args):
        raise fixed(lambda a: f"{a.base} + {a.offset}")
    return first


@functools.cache  # one environment, so each template compiles once per process
def _environment() -> jinja2.Environment:
    templates = resources.files("edgetrain.templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    env.globals["runtime_kernels"] = _runtime_kernels
    env.globals["arena_union"] = _arena_union
    return env


def _arena_union(views: frozenset[str], floats: int) -> str:
    """The arena union's members: its floats, and as many bytes of each other C type its tensors have."""
    members = []
    for c_type, view in _ARENA_VIEWS.items():
        if c_type == "float" or view in views:
            per_word = PER_WORD[c_type]
            count = max(floats, 1) if per_word == 1 else f"{per_word} * {max(floats, 1)}"
            members.append(f"{c_type} {view.removeprefix('et_arena.')}[{count}];")
    return " ".join(members)


def _runtime_kernels(code: str, every_kernel: bool) -> str:
    """What a generated file pastes of runtime_c, its own part being `code`: the kernels that code
    calls and what they use, or every kernel. Pasted, the file stays one self-contained file."""
    runtime = resources.files("edgetrain.runtime_c")
    headers = tuple((runtime / name).read_text() for name in _runtime_files())
    return every_runtime(headers) if every_kernel else used_runtime(headers, code)


def _runtime_files() -> tuple[str, ...]:
    """Every kernel header, each after the headers it #includes (whose guards then skip those lines)."""
    return runtime_headers()


def render(model: ModelC | InferenceC, every_kernel: bool = False) -> dict[str, str]:
    """{file name: text} for SOURCES: model.c, model.h and the initial values model.c includes.
    model.c pastes the runtime kernels it uses; with every_kernel, all of them (the rest is the same)."""
    env = _environment()
    kind = "infer" if isinstance(model, InferenceC) else "model"
    return dict(
        zip(
            SOURCES,
            (
                env.get_template(f"{kind}.c.j2").render(m=model, every_kernel=every_kernel),
                env.get_template(f"{kind}.h.j2").render(m=model),
                env.get_template("weights.h.j2").render(m=model, trainer=kind == "model"),
            ),
        )
    )
