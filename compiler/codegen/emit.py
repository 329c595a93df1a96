"""Trainer -> template data -> model.c / model.h. Graph passes never build C text: they hand the
templates frozen dataclasses, and the templates render them through the C-literal filters."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from importlib import resources

import jinja2
import numpy as np

from ..checkpoint import HEADER, table_bytes
from ..host.build import SOURCES
from ..errors import EdgetrainError
from ..ir import Node
from ..memory import Block, Interval, liveness_lower_bound, place
from ..ops import Call, Counter, KernelCtx, Tensor, Update, Var, lookup
from ..optim import OptimizerSpec
from ..trainer import Trainer
from .filters import FILTERS
from .runtime import every_runtime, used_runtime


@dataclass(frozen=True)
class Arg:
    kind: str  # ptr | int | float | ints | null | counter | var
    base: str = ""  # ptr: one of the generated storage identifiers; var: a train_step variable
    offset: int | Affine = 0
    value: object = None  # ptr to a tensor: (its name, the offset of the view into it)


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


class Floats:
    """Initial values, as one read-only float32 array (a tuple of a model's millions of Python floats
    takes seconds to make and to read back). Compares by value, like a tuple."""

    def __init__(self, arrays):
        arrays = [np.asarray(a, np.float32).ravel() for a in arrays]
        self.array = np.concatenate(arrays) if arrays else np.zeros(0, np.float32)
        self.array.flags.writeable = False

    def __len__(self) -> int:
        return self.array.size

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype, copy=False)

    def __eq__(self, other) -> bool:
        return isinstance(other, Floats) and np.array_equal(self.array, other.array)

    def __hash__(self) -> int:
        return hash(self.array.tobytes())


@dataclass(frozen=True)
class ParamInfo:
    kind: int  # checkpoint kind: 0 frozen (et_frozen), 1 trainable (et_params), 2 buffer (et_buffers)
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
    state_slots: int
    step_values: tuple[Local, ...]  # the optimizer's scalars, computed once per step before its updates
    optimizer_update: Stmt  # optimizer_step's one update of every trainable parameter
    learning_rate: float
    max_grad_norm: float | None
    fingerprint: int
    table: bytes
    header_bytes: int
    trainable_floats: int
    frozen_floats: int
    federated: bool  # keeps a reference copy of the trainable parameters for model deltas
    fused_update: bool  # train_step updates the parameters; no gradient buffers, optimizer_step does nothing
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

    # The frozen parameters have an array of their own (et_frozen), which a build defining
    # ET_FROZEN_WRITABLE keeps in RAM so they can be set; the constants' array stays in flash.
    @property
    def frozen_init(self) -> np.ndarray:
        return self.consts.array[:self.frozen_floats]

    @property
    def const_init(self) -> np.ndarray:
        return self.consts.array[self.frozen_floats:]

    @property
    def arena_views(self) -> frozenset[str]:
        """The arena members the C uses; the union declares those alone (cppcheck flags the others)."""
        outputs = self.infer_outputs + self.train_extra + self.eval_extra
        return self.train.arena_views | self.eval.arena_views | self.infer.arena_views | {a.base for a in outputs}


class _Storage:
    """Where every tensor lives: caller buffers, parameters, compiled constants or the arena."""

    def __init__(self, trainer: Trainer, batch_consts: dict[str, Affine | int] | None = None,
                 frozen_array: bool = True):
        """frozen_array: the frozen parameters go to et_frozen (a trainer's, see ModelC.frozen_init);
        otherwise to et_consts with the constants (an inference C, where nothing is ever set)."""
        g = trainer.graph
        self.trainer = trainer
        self.fixed: dict[str, Arg] = {name: Arg("ptr", f"x{i}") for i, name in enumerate(g.inputs)}
        # Constants that change with the batch (_batch_consts): a mean's 1 / count, which each
        # function computes from its batch count into et_batch_consts in order of first use, and
        # splats, compiled at their size at the largest batch.
        self.batch_consts = dict(batch_consts or {})
        self.batch_values: list[Affine] = []
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
        self.frozen_floats = 0  # the floats of self.consts that are in et_frozen
        for name in trainer.frozen:
            self._add_const(name, g.params[name])
        if frozen_array:  # the constants' offsets then start past them, at et_consts[0]
            self.fixed.update((name, replace(self.fixed[name], base="et_frozen")) for name in trainer.frozen)
            self.frozen_floats = self.const_floats
        self.int_consts: list[int] = []  # integer and bool constants read at run time, as int32_t

    def _add_const(self, name, array):
        self.fixed[name] = Arg("ptr", "et_consts", self.const_floats - self.frozen_floats)
        self.consts.append(np.asarray(array, np.float32).ravel())
        self.const_floats += int(np.asarray(array).size)

    def _add_int_const(self, name, array):
        array = np.asarray(array).ravel().astype(np.int64)
        outside = array[(array < -(2**31)) | (array >= 2**31)]
        if outside.size:
            raise EdgetrainError(f"constant '{name}' holds {int(outside[0])}, outside int32's range: the C keeps "
                                 "integer tensors as int32_t")
        self.fixed[name] = Arg("ptr", "et_int_consts", len(self.int_consts))
        self.int_consts += array.tolist()

    def locate(self, name: str) -> Arg | None:
        """Fixed storage for `name`, or None when it belongs in the arena."""
        if name not in self.fixed and isinstance(self.batch_consts.get(name), Affine):
            self.fixed[name] = Arg("ptr", "et_batch_consts", len(self.batch_values))
            self.batch_values.append(self.batch_consts[name])
        if name not in self.fixed and name in self.trainer.graph.constants:
            value = self.trainer.graph.constants[name]
            if name in self.batch_consts:
                value = np.full(self.batch_consts[name], value.flat[0], value.dtype)
            (self._add_int_const if _is_int(value.dtype) else self._add_const)(name, value)
        return self.fixed.get(name)


# The arena is a union of equally long float, uint32_t and int32_t arrays (templates/model.c.j2),
# so each tensor is read and written through an lvalue of its own type wherever the planner puts it.
# Integer tensors, int32 or int64 in the model, and bool ones (0 or 1) are all int32_t in the C.
_ARENA_VIEWS = {np.dtype(np.float32): "et_arena.f", np.dtype(np.uint32): "et_arena.u",
                **{np.dtype(t): "et_arena.i" for t in (np.int32, np.int64, np.bool_)}}


def _is_int(dtype) -> bool:
    return np.dtype(dtype).kind in "bi"


def _c_type(dtype) -> str:
    """The C type of a model input or output's elements."""
    return "int32_t" if _is_int(dtype) else "float"


def _words(value) -> int:
    """The 4-byte words a tensor takes in the arena: one per element, whatever its dtype."""
    return value.size


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
            return Arg("ptr", base.base, base.offset + a.offset, (a.name, a.offset))  # for _batched_arg
        return _plain_arg(a)

    stmts = tuple(Stmt(call.fn, tuple(arg(a) for a in call.args), call.checked, f"{node.op} {node.name}")
                  for call, node in calls)
    located = {name: storage.locate(name) or where[name] for name in results}
    return Function(stmts, total, liveness_lower_bound(intervals), blocks), located


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
    lr = Var("et_lr")
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
        update = opt.binding.update(Update(operand, g_arg, Tensor(param), tuple(state), lr, kind), opt.attrs())
        check = Call(f"et_check{kind}_finite_f32", (*operand, *g_arg), checked=True)
        i = max(made, last_read.get(param, -1), forward_done)
        after.setdefault(i, []).extend([check, update])
    return after


def _step_values(opt: OptimizerSpec) -> tuple[Local, ...]:
    return tuple(Local(v.type, v.name, v.fn, tuple(map(_plain_arg, v.args)))
                 for v in opt.binding.step_values(opt.attrs()))


def _whole_update(opt: OptimizerSpec, trainable_floats: int) -> Stmt:
    """optimizer_step's update: every trainable parameter at once, from the accumulated gradients."""
    state = tuple(Arg("ptr", "et_state", slot * trainable_floats) for slot in range(len(opt.state_slots)))
    call = opt.binding.update(Update((Var("ET_TRAINABLE"),), (Arg("ptr", "et_grads"),), Arg("ptr", "et_params"),
                                     state, Var("et_lr")), opt.attrs())
    return Stmt(call.fn, tuple(map(_plain_arg, call.args)), call.checked, "every trainable parameter")


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


def build(trainer: Trainer, prefix: str, federated: bool = False, fused_update: bool = False,
          batch_consts: dict[str, Affine | int] | None = None) -> ModelC:
    """fused_update: train_step applies the optimizer itself (see _fused_updates), and there are no
    gradient buffers; otherwise gradients accumulate into them for optimizer_step (ORT's semantics)."""
    g = trainer.graph
    storage = _Storage(trainer, batch_consts)
    # A fused update writes gradients and buffers inside the step; otherwise they are results.
    outer = _outer_products(trainer)
    kept = [] if fused_update else ([v for v in trainer.grads.values() if v and v not in outer]
                                    + [f for node in outer.values() for f in node.inputs]
                                    + list(trainer.state_updates.values()))
    train_nodes = [node for node in trainer.train_nodes if node not in outer.values()]
    extra = list(trainer.extra_outputs)
    train, train_at = _lower(trainer, storage, train_nodes, [trainer.loss] + extra + kept,
                             _fused_updates(trainer, storage, train_nodes, outer) if fused_update else None,
                             trainer.backward_start)
    evaluate, eval_at = _lower(trainer, storage, trainer.eval_nodes, [trainer.loss] + extra)
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
        input_types=tuple(_c_type(g.values[n].dtype) for n in g.inputs),
        label_type=None if labels is None else _c_type(labels.dtype),
        label_size=labels.size if labels else 0,
        output_sizes=tuple(g.values[n].size for n in g.outputs),
        output_types=tuple(_c_type(g.values[n].dtype) for n in g.outputs),
        train=train, eval=evaluate, infer=infer,
        train_loss=train_at[trainer.loss], eval_loss=eval_at[trainer.loss],
        infer_outputs=tuple(infer_at[n] for n in g.outputs),
        grads=tuple(grads), state_updates=updates, params=params,
        param_init=Floats(g.params[n] for n in trainer.trainable),
        buffer_init=Floats(g.buffers[n] for n in trainer.buffers), consts=Floats(storage.consts),
        int_consts=tuple(storage.int_consts),
        state_slots=len(opt.state_slots), step_values=_step_values(opt),
        optimizer_update=_whole_update(opt, storage.trainable_floats),
        learning_rate=opt.lr, max_grad_norm=opt.max_grad_norm,
        fingerprint=trainer.fingerprint(), table=table, header_bytes=HEADER.size,
        trainable_floats=storage.trainable_floats, frozen_floats=storage.frozen_floats, federated=bool(federated),
        fused_update=bool(fused_update), batch_consts=tuple(storage.batch_values),
        extra_outputs=tuple(g.outputs.index(n) for n in extra), train_extra=tuple(train_at[n] for n in extra),
        eval_extra=tuple(eval_at[n] for n in extra),
    )


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
    max_batch: int = 1  # as in ModelC
    fixed_batch: str | None = None
    batch_consts: tuple[Affine, ...] = ()

    @property
    def arena_floats(self) -> int:
        return self.infer.arena_floats

    @property
    def arena_views(self) -> frozenset[str]:
        return self.infer.arena_views | {a.base for a in self.infer_outputs}


def build_inference(trainer: Trainer, prefix: str, batch_consts: dict[str, Affine | int] | None = None) -> InferenceC:
    g = trainer.graph
    storage = _Storage(trainer, batch_consts, frozen_array=False)
    infer, infer_at = _lower(trainer, storage, trainer.infer_nodes, list(g.outputs))
    return InferenceC(
        prefix=prefix,
        input_sizes=tuple(g.values[n].size for n in g.inputs),
        input_types=tuple(_c_type(g.values[n].dtype) for n in g.inputs),
        output_sizes=tuple(g.values[n].size for n in g.outputs),
        output_types=tuple(_c_type(g.values[n].dtype) for n in g.outputs),
        infer=infer, infer_outputs=tuple(infer_at[n] for n in g.outputs),
        buffer_init=Floats(g.buffers[n] for n in trainer.buffers), consts=Floats(storage.consts),
        int_consts=tuple(storage.int_consts), batch_consts=tuple(storage.batch_values),
    )

# ---- the batch: a trainer compiled for a batch of N runs any batch n from 1 to N ----

@dataclass(frozen=True)
class Affine:
    """a * n + b, n the batch count a C function runs (its first argument). inverse: the float
    nearest 1 / (a * n + b), rounded as Python's np.float32(1.0 / count) is (a mean's scale)."""
    a: int
    b: int
    inverse: bool = False

    def at(self, n: int):
        value = self.a * n + self.b
        return float(np.float32(1.0 / value)) if self.inverse else value


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
    is the trainer at another batch (None when the model compiles at no other), for the ONNX models."""
    trainer = trainer_at(max_batch)
    batches = [max_batch] + _probes(max_batch)
    try:
        trainers = [trainer, trainer_at(batches[1])]
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
        return trainer, _fixed(lower(trainer, {}), shape[0] if shape else 1,
                               "the model's inputs have fixed shapes (no symbolic batch axis)"), probe
    if max_batch == 1:
        return trainer, _batch_sizes(lower(trainer, {}), trainer, axes, 1), probe
    try:
        try:
            trainers.append(trainer_at(batches[2]))
        except EdgetrainError as exc:
            raise _Fixed(f"it does not compile at batch {batches[2]}: {exc}") from None
        consts = _batch_consts(trainers, batches)
        models = [lower(t, consts) for t in trainers]
        model = _batch_sizes(_batched(models, trainers, batches, consts), trainer, axes, max_batch)
    except _Fixed as why:
        return trainer, _fixed(lower(trainer, {}), max_batch, str(why)), probe
    if isinstance(model, ModelC):  # a model that does not compile at batch 1 does not train there
        try:
            trainer_at(1)
        except EdgetrainError as exc:
            model = replace(model, small_batch=f"a batch of 1 does not train: {exc}")
    return trainer, model, probe


def _fixed(model, max_batch: int, why: str):
    return replace(model, max_batch=max_batch, fixed_batch=f"the trainer runs batches of {max_batch} only: {why}")


def _probes(max_batch: int) -> list[int]:
    """Two more batches to compile at: above 1, since a batch of 1 takes other paths
    (_outer_products), and within the batches the C will run where there is room."""
    return [b for b in dict.fromkeys((max_batch - 1, 2, max_batch + 1, max_batch + 2))
            if b >= 2 and b != max_batch][:2]


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
        if not all(s and s[0] == b and s[1:] == shapes[0][1:] for s, b in zip(shapes, batches)):
            raise _Fixed(f"'{name}' changes shape with the batch other than along its first axis "
                         f"({' and '.join(f'{s} at batch {b}' for s, b in zip(shapes, batches))})")
        axes.add(name)
    return axes


def _batch_sizes(model, trainer, axes: set[str], max_batch: int):
    """`model` with the sizes of its batched data inputs, labels and outputs per sample times n."""
    g = trainer.graph

    def size(name, at):
        return Affine(at // max_batch, 0) if name in axes else at

    fields = dict(input_sizes=tuple(map(size, g.inputs, model.input_sizes)),
                  output_sizes=tuple(map(size, g.outputs, model.output_sizes)), max_batch=max_batch)
    if isinstance(model, ModelC) and trainer.labels:
        fields["label_size"] = size(trainer.labels, model.label_size)
    return replace(model, **fields)


def _batch_consts(trainers, batches) -> dict[str, Affine | int]:
    """Constants that change with the batch in a way the C can follow: scalar floats that are the
    float nearest 1 / affine (-> that Affine, computed from n at each call), and splats, one value
    repeated (a recurrent layer's initial zeros; -> their size at the largest batch, of which a
    smaller batch reads a part)."""
    found = {}
    for name in trainers[0].graph.constants:
        values = [t.graph.constants.get(name) for t in trainers]
        if any(v is None for v in values) or all(
                v.shape == values[0].shape and np.array_equal(v, values[0]) for v in values):
            continue
        if all(v.dtype == np.float32 and v.size == 1 for v in values):
            line = _fit([float(v.reshape(())) for v in values], batches, inverse=True)
            if isinstance(line, Affine):
                found[name] = line
        elif all(v.size and v.dtype == values[0].dtype and np.all(v == values[0].flat[0]) for v in values):
            found[name] = values[0].size
    return found


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
        if (other.consts, other.int_consts, other.batch_consts) != (m.consts, m.int_consts, m.batch_consts):
            read = {a.value[0] for f in functions for s in getattr(m, f).stmts for a in s.args
                    if a.kind == "ptr" and isinstance(a.value, tuple)}
            changed = [name for name in read - set(consts) if name in trainers[0].graph.constants and not all(
                np.array_equal(trainers[0].graph.constants[name], t.graph.constants.get(name)) for t in trainers)]
            raise _Fixed(f"constant tensor{'s' * (len(changed) > 1)} {', '.join(map(repr, sorted(changed)))} read at "
                         "run time depend on the batch")
    return replace(m, **{f: _batched_function([getattr(o, f) for o in models], batches, f) for f in functions})


def _batched_function(functions: list[Function], batches, name: str) -> Function:
    first = functions[0]
    for f, batch in zip(functions[1:], batches[1:]):
        if len(f.stmts) != len(first.stmts):
            raise _Fixed(f"{name} makes {len(first.stmts)} kernel calls at batch {batches[0]} and {len(f.stmts)} "
                         f"at batch {batch}")
    stmts = []
    for same in zip(*(f.stmts for f in functions)):
        s = same[0]
        for other, batch in zip(same[1:], batches[1:]):
            if (other.fn, other.checked, len(other.args)) != (s.fn, s.checked, len(s.args)):
                raise _Fixed(f"{name} calls {s.fn} ({s.comment}) at batch {batches[0]} where it calls {other.fn} "
                             f"({other.comment}) at batch {batch}")
        stmts.append(replace(s, args=tuple(_batched_arg([o.args[k] for o in same], batches,
                                                        f"argument {k + 1} of {s.fn} ({s.comment}) in {name}")
                                           for k in range(len(s.args)))))
    return replace(first, stmts=tuple(stmts))


def _batched_arg(args: list[Arg], batches, where: str) -> Arg:
    first = args[0]

    def fixed(what):
        seen = ", ".join(f"{what(a)} at batch {b}" for a, b in zip(args, batches))
        return _Fixed(f"{where} is {seen}: not a C expression of the batch edgetrain can write")

    if any((a.kind, a.base) != (first.kind, first.base) for a in args):
        raise fixed(lambda a: f"{a.kind} {a.base}".strip())
    if first.kind == "ptr" and isinstance(first.value, tuple):  # a tensor, or a view into one
        view = _fit([a.value[1] for a in args], batches)
        starts = {a.offset - a.value[1] for a in args}
        # A tensor's own place is the same at every batch, except in the arena: that is planned for
        # the largest batch, where every smaller batch's tensor fits.
        if any(a.value[0] != first.value[0] for a in args) or view is None or (
                len(starts) > 1 and not first.base.startswith("et_arena")):
            raise fixed(lambda a: f"{a.value[0]!r} + {a.value[1]}")
        start = first.offset - first.value[1]
        return replace(first, offset=Affine(view.a, view.b + start) if isinstance(view, Affine) else start + view)
    if first.kind in ("int", "float"):
        value = _fit([a.value for a in args], batches, inverse=first.kind == "float")
        if value is None:
            raise fixed(lambda a: a.value)
        return replace(first, value=value)
    if first.kind == "ints":
        values = tuple(_fit(list(column), batches) for column in zip(*(a.value for a in args)))
        if any(len(a.value) != len(first.value) for a in args) or any(v is None for v in values):
            raise fixed(lambda a: a.value)
        return replace(first, value=values)
    if any(a != first for a in args):
        raise fixed(lambda a: f"{a.base} + {a.offset}")
    return first


def _environment() -> jinja2.Environment:
    templates = resources.files("edgetrain.templates")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    env.filters.update(FILTERS)
    env.globals["runtime_kernels"] = _runtime_kernels
    return env


def _runtime_kernels(code: str, every_kernel: bool) -> str:
    """What a generated file pastes of runtime_c, its own part being `code`: the kernels that code
    calls and what they use, or every kernel. Pasted, the file stays one self-contained file."""
    runtime = resources.files("edgetrain.runtime_c")
    headers = tuple((runtime / name).read_text() for name in _runtime_files())
    return every_runtime(headers) if every_kernel else used_runtime(headers, code)


# Every kernel file is pasted in: these in dependency order, then any others (which may use
# these, not each other) by name.
_RUNTIME_BASE = ("et_common.h", "et_math.h", "et_elementwise.h", "et_linalg.h", "et_shape.h", "et_softmax.h",
                 "et_loss.h", "et_optim.h")


def _runtime_files() -> tuple[str, ...]:
    names = sorted(f.name for f in resources.files("edgetrain.runtime_c").iterdir() if f.name.endswith(".h"))
    return _RUNTIME_BASE + tuple(n for n in names if n not in _RUNTIME_BASE)


def render(model: ModelC | InferenceC, every_kernel: bool = False) -> dict[str, str]:
    """{file name: text} for SOURCES: model.c, model.h and the initial values model.c includes.
    model.c pastes the runtime kernels it uses; with every_kernel, all of them (the rest is the same)."""
    env = _environment()
    kind = "infer" if isinstance(model, InferenceC) else "model"
    return dict(zip(SOURCES, (env.get_template(f"{kind}.c.j2").render(m=model, every_kernel=every_kernel),
                              env.get_template(f"{kind}.h.j2").render(m=model),
                              env.get_template("weights.h.j2").render(m=model, trainer=kind == "model"))))
