"""Trainer -> template data -> model.c / model.h. Graph passes never build C text: they hand the
templates frozen dataclasses, and the templates render them through the C-literal filters."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import jinja2
import numpy as np

from ..checkpoint import HEADER, table_bytes
from ..ir import Node
from ..memory import Interval, liveness_lower_bound, place
from ..ops import Call, Counter, KernelCtx, Tensor, lookup
from ..optim import OptimType
from ..trainer import Trainer
from .filters import FILTERS


@dataclass(frozen=True)
class Arg:
    kind: str  # ptr | int | float | ints | null | counter
    base: str = ""  # ptr: one of the generated storage identifiers
    offset: int = 0
    value: object = None


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
class Copy:
    src: Arg
    size: int


@dataclass(frozen=True)
class Function:
    stmts: tuple[Stmt, ...]
    arena_floats: int
    lower_bound: int


@dataclass(frozen=True)
class ParamInfo:
    kind: int  # checkpoint kind: 0 frozen (et_consts), 1 trainable (et_params), 2 buffer (et_buffers)
    offset: int
    size: int
    name: str  # for comments only


@dataclass(frozen=True)
class StateUpdate:
    value: Arg  # the new contents, computed by train_step
    offset: int  # in et_buffers
    size: int


@dataclass(frozen=True)
class GradInfo:
    grad: Arg | None  # None: the loss does not depend on this parameter
    offset: int
    size: int


@dataclass(frozen=True)
class ModelC:
    prefix: str
    input_sizes: tuple[int, ...]
    label_type: str | None  # "float" | "int32_t"
    label_size: int
    output_sizes: tuple[int, ...]
    train: Function
    eval: Function
    infer: Function
    train_loss: Arg
    eval_loss: Arg
    infer_outputs: tuple[Arg, ...]
    grads: tuple[GradInfo, ...]
    state_updates: tuple[StateUpdate, ...]
    params: tuple[ParamInfo, ...]
    param_init: tuple[float, ...]
    buffer_init: tuple[float, ...]
    consts: tuple[float, ...]
    state_slots: int
    optimizer: str
    hyper: dict
    learning_rate: float
    max_grad_norm: float | None
    fingerprint: int
    table: bytes
    header_bytes: int
    trainable_floats: int
    frozen_floats: int
    federated: bool  # keeps a reference copy of the trainable parameters for model deltas

    @property
    def arena_floats(self) -> int:
        return max(self.train.arena_floats, self.eval.arena_floats, self.infer.arena_floats)


class _Storage:
    """Where every tensor lives: caller buffers, parameters, compiled constants or the arena."""

    def __init__(self, trainer: Trainer):
        g = trainer.graph
        self.trainer = trainer
        self.fixed: dict[str, Arg] = {name: Arg("ptr", f"x{i}") for i, name in enumerate(g.inputs)}
        if trainer.labels:
            self.fixed[trainer.labels] = Arg("ptr", "labels")
        offset = 0
        for name in trainer.trainable:
            self.fixed[name] = Arg("ptr", "et_params", offset)
            offset += g.values[name].size
        self.trainable_floats = offset
        offset = 0
        for name in trainer.buffers:
            self.fixed[name] = Arg("ptr", "et_buffers", offset)
            offset += g.values[name].size
        self.consts: list[np.ndarray] = []
        self.const_floats = 0
        for name in trainer.frozen:
            self._add_const(name, g.params[name])
        self.frozen_floats = self.const_floats

    def _add_const(self, name, array):
        self.fixed[name] = Arg("ptr", "et_consts", self.const_floats)
        self.consts.append(np.asarray(array, np.float32).ravel())
        self.const_floats += int(np.asarray(array).size)

    def locate(self, name: str) -> Arg | None:
        """Fixed storage for `name`, or None when it belongs in the arena."""
        if name not in self.fixed and name in self.trainer.graph.constants:
            self._add_const(name, self.trainer.graph.constants[name])
        return self.fixed.get(name)


def _lower(trainer: Trainer, storage: _Storage, nodes: list[Node], results: list[str]) -> tuple[Function, dict]:
    """Kernel calls for `nodes`, with arena offsets planned from the tensors' lifetimes."""
    ctx = KernelCtx(trainer.graph)
    calls: list[tuple[int, Call, Node]] = [(i, call, node) for i, node in enumerate(nodes)
                                           for call in lookup(node).kernel(ctx, node)]
    arena = {a.name for _, call, _ in calls for a in call.args if isinstance(a, Tensor)}
    arena = {name for name in arena | set(results) if storage.locate(name) is None}
    first, last = {}, {}
    for i, node in enumerate(nodes):
        for name in node.outputs:
            first.setdefault(name, i)
        for name in node.inputs:
            last[name] = i
    end = len(nodes)
    intervals = [Interval(name, first[name], end if name in results else max(last.get(name, 0), first[name]),
                          trainer.graph.values[name].size) for name in sorted(arena)]
    offsets, total = place(intervals)
    where = {name: Arg("ptr", "et_arena", off) for name, off in offsets.items()}

    def arg(a) -> Arg:
        if isinstance(a, Tensor):
            base = storage.locate(a.name) or where[a.name]
            return Arg("ptr", base.base, base.offset + a.offset)
        if isinstance(a, Counter):
            return Arg("counter")
        if a is None:
            return Arg("null")
        if isinstance(a, tuple):
            return Arg("ints", value=tuple(int(v) for v in a))
        if isinstance(a, (bool, int, np.integer)):
            return Arg("int", value=int(a))
        return Arg("float", value=float(a))

    stmts = tuple(Stmt(call.fn, tuple(arg(a) for a in call.args), call.checked, f"{node.op} {node.name}")
                  for _, call, node in calls)
    located = {name: storage.locate(name) or where[name] for name in results}
    return Function(stmts, total, liveness_lower_bound(intervals)), located


def build(trainer: Trainer, prefix: str, federated: bool = False) -> ModelC:
    g = trainer.graph
    storage = _Storage(trainer)
    grad_values = [v for v in trainer.grads.values() if v]
    train, train_at = _lower(trainer, storage, trainer.train_nodes,
                             [trainer.loss] + grad_values + list(trainer.state_updates.values()))
    evaluate, eval_at = _lower(trainer, storage, trainer.eval_nodes, [trainer.loss])
    infer, infer_at = _lower(trainer, storage, trainer.infer_nodes, list(g.outputs))

    offsets, grads = {}, []
    for name in trainer.trainable:
        offsets[name] = storage.fixed[name].offset
        grad = trainer.grads[name]
        grads.append(GradInfo(train_at[grad] if grad else None, offsets[name], g.values[name].size))
    entries = trainer.checkpoint_entries
    params = tuple(ParamInfo(kind, storage.fixed[name].offset, g.values[name].size, name) for name, kind in entries)
    table = table_bytes([n for n, _ in entries], [k for _, k in entries], [g.shape(n) for n, _ in entries])
    updates = tuple(StateUpdate(train_at[value], storage.fixed[buffer].offset, g.values[buffer].size)
                    for buffer, value in trainer.state_updates.items())
    opt = trainer.optimizer
    labels = g.values[trainer.labels] if trainer.labels else None
    return ModelC(
        prefix=prefix,
        input_sizes=tuple(g.values[n].size for n in g.inputs),
        label_type=None if labels is None else ("float" if labels.dtype == np.float32 else "int32_t"),
        label_size=labels.size if labels else 0,
        output_sizes=tuple(g.values[n].size for n in g.outputs),
        train=train, eval=evaluate, infer=infer,
        train_loss=train_at[trainer.loss], eval_loss=eval_at[trainer.loss],
        infer_outputs=tuple(infer_at[n] for n in g.outputs),
        grads=tuple(grads), state_updates=updates, params=params,
        param_init=tuple(np.concatenate([g.params[n].ravel() for n in trainer.trainable]).tolist()),
        buffer_init=tuple(np.concatenate([g.buffers[n].ravel() for n in trainer.buffers]).tolist())
        if trainer.buffers else (),
        consts=tuple(np.concatenate(storage.consts).tolist()) if storage.consts else (),
        state_slots=len(opt.state_slots), optimizer=opt.kind.value, hyper=opt.attrs(),
        learning_rate=opt.lr, max_grad_norm=opt.max_grad_norm,
        fingerprint=trainer.fingerprint(), table=table, header_bytes=HEADER.size,
        trainable_floats=storage.trainable_floats, frozen_floats=storage.frozen_floats, federated=bool(federated),
    )


def _environment() -> jinja2.Environment:
    templates = resources.files("edgetrain.templates")
    runtime = resources.files("edgetrain.runtime_c")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(templates), str(runtime)]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    env.filters.update(FILTERS)
    env.globals["runtime_files"] = _runtime_files()
    return env


# Every kernel file is pasted in: these in dependency order, then any others (which may use
# these, not each other) by name.
_RUNTIME_BASE = ("et_common.h", "et_math.h", "et_elementwise.h", "et_linalg.h", "et_shape.h", "et_softmax.h",
                 "et_loss.h", "et_optim.h")


def _runtime_files() -> tuple[str, ...]:
    names = sorted(f.name for f in resources.files("edgetrain.runtime_c").iterdir() if f.name.endswith(".h"))
    return _RUNTIME_BASE + tuple(n for n in names if n not in _RUNTIME_BASE)


def render(model: ModelC) -> tuple[str, str]:
    """(model.c, model.h)."""
    env = _environment()
    return (env.get_template("model.c.j2").render(m=model),
            env.get_template("model.h.j2").render(m=model))
