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
from ..memory import Block, Interval, liveness_lower_bound, place
from ..ops import Call, Counter, KernelCtx, Tensor, lookup
from ..optim import OptimType
from ..trainer import Trainer
from .filters import FILTERS


@dataclass(frozen=True)
class Arg:
    kind: str  # ptr | int | float | ints | null | counter | var
    base: str = ""  # ptr: one of the generated storage identifiers; var: a train_step variable
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
    blocks: tuple[Block, ...]  # the arena's allocations, for the memory report


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
    grad: Arg | None  # None: the loss does not depend on this parameter, or `factors` make it
    offset: int
    size: int
    factors: tuple[Arg, Arg] | None = None  # the gradient is their outer product (_outer_products)
    rows: int = 0  # the first factor's length


@dataclass(frozen=True)
class ModelC:
    prefix: str
    input_sizes: tuple[int, ...]
    input_types: tuple[str, ...]  # "float" | "int32_t" (integer indices, such as token ids)
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
    fused_update: bool  # train_step updates the parameters; no gradient buffers, optimizer_step does nothing

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


# The arena is a union of equally long float and uint32_t arrays (templates/model.c.j2), so each
# tensor is read and written through an lvalue of its own type wherever the planner puts it.
_ARENA_VIEWS = {np.dtype(np.float32): "et_arena.f", np.dtype(np.uint32): "et_arena.u"}


def _words(value) -> int:
    """The 4-byte words a tensor takes in the arena."""
    return -(-value.size * value.dtype.itemsize // 4)


def _lower(trainer: Trainer, storage: _Storage, nodes: list[Node], results: list[str],
           after: dict[int, list[Call]] | None = None, backward_from: int | None = None) -> tuple[Function, dict]:
    """Kernel calls for `nodes` (and the `after[i]` calls right after node i's), with arena offsets
    planned from the tensors' lifetimes in statements. Values made from node `backward_from` on
    are gradients, the others activations."""
    g = trainer.graph
    ctx = KernelCtx(g)
    calls: list[tuple[Call, Node]] = []
    span: list[tuple[int, int]] = []  # per node: its first and last statement
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        begin = len(calls)
        calls += [(call, node) for call in lookup(node).kernel(ctx, node)]
        span.append((begin, max(begin, len(calls) - 1)))
        for name in node.outputs:
            first.setdefault(name, begin)
        for name in node.inputs:
            last[name] = span[-1][1]
        for call in (after or {}).get(i, ()):
            last.update((a.name, len(calls)) for a in call.args if isinstance(a, Tensor))
            calls.append((call, node))
    # In order of first use: locate() lays out compiled constants as it meets them, and the
    # generated C must not depend on Python's string hashing.
    used = dict.fromkeys([a.name for call, _ in calls for a in call.args if isinstance(a, Tensor)] + list(results))
    arena = {name for name in used if storage.locate(name) is None}
    end = max(len(calls) - 1, 0)
    for name in arena:
        last[name] = end if name in results else max(last.get(name, 0), first[name])
    root = _in_place(g, nodes, calls, span, arena, last, set(results))
    groups: dict[str, list[str]] = {}
    for name in sorted(arena, key=lambda n: (first[n], n)):
        groups.setdefault(root.get(name, name), []).append(name)
    intervals = [Interval(r, first[r], max(last[m] for m in members), _words(g.values[r]))
                 for r, members in groups.items()]
    offsets, total = place(intervals)
    where = {name: Arg("ptr", _ARENA_VIEWS[g.values[name].dtype], offsets[root.get(name, name)]) for name in arena}
    # Gradients are made by the backward pass, except forward nodes recomputed there (same name).
    forward = {(n.op, n.name) for n in nodes[:backward_from]}
    producer = {name: node for node in nodes[backward_from:] for name in node.outputs}
    kind = {r: "gradient" if r in producer and (producer[r].op, producer[r].name) not in forward else "activation"
            for r in groups}
    blocks = tuple(Block(" -> ".join(groups[iv.name]), kind[iv.name], 4 * offsets[iv.name], 4 * iv.size, iv.start,
                         iv.end) for iv in sorted(intervals, key=lambda iv: (iv.start, iv.name)))

    def arg(a) -> Arg:
        if isinstance(a, Arg):
            return a
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
                  for call, node in calls)
    located = {name: storage.locate(name) or where[name] for name in results}
    return Function(stmts, total, liveness_lower_bound(intervals), blocks), located


def _in_place(g, nodes, calls, span, arena, last, results) -> dict[str, str]:
    """Outputs that take over the bytes of an input dying at their node (the op's `inplace` slots:
    its kernel reads each element before writing it). Returns value -> the value whose bytes it
    uses."""
    root: dict[str, str] = {}
    for i, node in enumerate(nodes):
        slots = lookup(node).inplace
        first_stmt, last_stmt = span[i]
        if not slots or first_stmt != last_stmt or first_stmt >= len(calls) or calls[first_stmt][1] is not node:
            continue  # one kernel call, so nothing reads an input after the output is written
        y = node.outputs[0]
        for slot in slots:
            x = node.inputs[slot] if slot < len(node.inputs) else ""
            if (x in arena and y in arena and x not in results and last[x] == last_stmt
                    and (g.values[x].size, g.values[x].dtype) == (g.values[y].size, g.values[y].dtype)):
                root[y] = root.get(x, x)
                break
    return root


def _fused_updates(trainer: Trainer, storage: _Storage, nodes: list[Node],
                   outer: dict[str, Node]) -> dict[int, list[Call]]:
    """Operator reordering: each parameter's optimizer update, placed right after the node where
    its gradient is final and the parameter's last reader has run (so every gradient is computed
    from the step's starting weights, as with a separate optimizer step). The gradient is then an
    arena temporary that dies at its update; one in `outer` (_outer_products) is never made, and
    the update reads its two factors. Once the forward pass is done and its loss and new buffer
    values (BatchNormalization's running statistics) are checked finite, the buffers are written,
    so those values need not stay in the arena through the backward pass either."""
    g, opt = trainer.graph, trainer.optimizer
    index = {name: i for i, node in enumerate(nodes) for name in node.outputs}
    last_read = {name: i for i, node in enumerate(nodes) for name in node.inputs}

    def check_finite(size, name):
        return Call("et_check_finite_f32", (size, Tensor(name)), checked=True)

    buffers = trainer.state_updates.items()
    forward_done = max([index[trainer.loss]] + [index[value] for _, value in buffers])
    copies = [Call("et_copy_f32", (g.values[value].size, Tensor(value),
                                   Arg("ptr", "et_buffers", storage.fixed[buffer].offset))) for buffer, value in buffers]
    after = {forward_done: [check_finite(1, trainer.loss)] + [check_finite(g.values[v].size, v) for _, v in buffers]
             + copies}
    lr = Arg("var", "et_lr")
    for param in trainer.trainable:
        size, at = g.values[param].size, storage.fixed[param].offset
        grad = trainer.grads[param]
        if grad is None:  # the loss does not depend on it; weight decay and momentum still act
            grad = f"{param}.zero_grad"
            storage._add_const(grad, np.zeros(size, np.float32))
        state = [Arg("ptr", "et_state", slot * storage.trainable_floats + at) for slot in range(len(opt.state_slots))]
        # The kernels take a gradient as (size, ..., W, G) or, from factors, as (m, A, n, B, ..., W).
        if grad in outer:
            a, b = outer[grad].inputs
            kind, operand, g_arg = "_outer", (g.values[a].size, Tensor(a), g.values[b].size, Tensor(b)), ()
            made = max(index.get(a, -1), index.get(b, -1))
        else:
            kind, operand, g_arg, made = "", (size,), (Tensor(grad),), index.get(grad, -1)
        h = opt.attrs()
        if opt.kind is OptimType.AdamW:
            update = Call(f"et_adamw{kind}_f32", (*operand, Arg("var", "et_step_size"), lr, h["beta1"], h["beta2"],
                                                  h["eps"], h["weight_decay"], Tensor(param), *g_arg, *state))
        else:
            update = Call(f"et_sgd{kind}_f32", (*operand, lr, h["momentum"], h["dampening"], h["nesterov"],
                                                h["weight_decay"], Arg("var", "et_first_step"), Tensor(param), *g_arg,
                                                *(state or [None])))
        check = Call(f"et_check{kind}_finite_f32", (*operand, *g_arg), checked=True)
        i = max(made, last_read.get(param, -1), forward_done)
        after.setdefault(i, []).extend([check, update])
    return after


def _outer_products(trainer: Trainer) -> dict[str, Node]:
    """Gradients -> the Gemm making each as the outer product of two vectors (a contraction over a
    batch of 1), where nothing else reads it. train_step never stores such a gradient: it checks the
    factors and then sums their products straight into the accumulator, which saves the arena the
    gradient's size and the step two passes over it."""
    g = trainer.graph
    read = {name for node in trainer.train_nodes for name in node.inputs}
    made = {node.outputs[0]: node for node in trainer.train_nodes[trainer.backward_start:] if node.op == "Gemm"}
    products = {}
    for grad in trainer.grads.values():
        node = made.get(grad)
        if node is None or grad in read or len(node.inputs) > 2 or float(node.attr("alpha", 1.0)) != 1.0:
            continue
        a = node.inputs[0]
        if g.shape(a)[0 if int(node.attr("transA", 0)) else 1] == 1:
            products[grad] = node
    return products


def build(trainer: Trainer, prefix: str, federated: bool = False, fused_update: bool = False) -> ModelC:
    """fused_update: train_step applies the optimizer itself (see _fused_updates), and there are no
    gradient buffers; otherwise gradients accumulate into them for optimizer_step (ORT's semantics)."""
    g = trainer.graph
    storage = _Storage(trainer)
    # A fused update writes gradients and buffers inside the step; otherwise they are results.
    outer = _outer_products(trainer)
    kept = [] if fused_update else ([v for v in trainer.grads.values() if v and v not in outer]
                                    + [f for node in outer.values() for f in node.inputs]
                                    + list(trainer.state_updates.values()))
    train_nodes = [node for node in trainer.train_nodes if node not in outer.values()]
    train, train_at = _lower(trainer, storage, train_nodes, [trainer.loss] + kept,
                             _fused_updates(trainer, storage, train_nodes, outer) if fused_update else None,
                             trainer.backward_start)
    evaluate, eval_at = _lower(trainer, storage, trainer.eval_nodes, [trainer.loss])
    infer, infer_at = _lower(trainer, storage, trainer.infer_nodes, list(g.outputs))

    grads = []
    for name in [] if fused_update else trainer.trainable:  # a fused update keeps no gradients
        grad, offset, size = trainer.grads[name], storage.fixed[name].offset, g.values[name].size
        if grad in outer:
            a, b = outer[grad].inputs
            grads.append(GradInfo(None, offset, size, (train_at[a], train_at[b]), g.values[a].size))
        else:
            grads.append(GradInfo(train_at[grad] if grad else None, offset, size))
    entries = trainer.checkpoint_entries
    params = tuple(ParamInfo(kind, storage.fixed[name].offset, g.values[name].size, name) for name, kind in entries)
    table = table_bytes([n for n, _ in entries], [k for _, k in entries], [g.shape(n) for n, _ in entries])
    updates = tuple(StateUpdate(train_at[value], storage.fixed[buffer].offset, g.values[buffer].size)
                    for buffer, value in trainer.state_updates.items() if not fused_update)
    opt = trainer.optimizer
    labels = g.values[trainer.labels] if trainer.labels else None
    return ModelC(
        prefix=prefix,
        input_sizes=tuple(g.values[n].size for n in g.inputs),
        input_types=tuple("float" if g.values[n].dtype == np.float32 else "int32_t" for n in g.inputs),
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
        fused_update=bool(fused_update),
    )


@dataclass(frozen=True)
class InferenceC:
    """A model with nothing to train: the C holds `infer` alone, every initializer compiled in."""
    prefix: str
    input_sizes: tuple[int, ...]
    input_types: tuple[str, ...]
    output_sizes: tuple[int, ...]
    infer: Function
    infer_outputs: tuple[Arg, ...]
    buffer_init: tuple[float, ...]
    consts: tuple[float, ...]

    @property
    def arena_floats(self) -> int:
        return self.infer.arena_floats


def build_inference(trainer: Trainer, prefix: str) -> InferenceC:
    g = trainer.graph
    storage = _Storage(trainer)
    infer, infer_at = _lower(trainer, storage, trainer.infer_nodes, list(g.outputs))
    return InferenceC(
        prefix=prefix,
        input_sizes=tuple(g.values[n].size for n in g.inputs),
        input_types=tuple("float" if g.values[n].dtype == np.float32 else "int32_t" for n in g.inputs),
        output_sizes=tuple(g.values[n].size for n in g.outputs),
        infer=infer, infer_outputs=tuple(infer_at[n] for n in g.outputs),
        buffer_init=tuple(float(v) for n in trainer.buffers for v in g.buffers[n].ravel()),
        consts=tuple(float(v) for c in storage.consts for v in c),
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


def render(model: ModelC | InferenceC) -> tuple[str, str]:
    """(model.c, model.h)."""
    env = _environment()
    kind = "infer" if isinstance(model, InferenceC) else "model"
    return (env.get_template(f"{kind}.c.j2").render(m=model),
            env.get_template(f"{kind}.h.j2").render(m=model))
