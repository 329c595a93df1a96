"""lower(trainer) -> Program: each C function's kernel calls from the op registry, with every
tensor's storage outside the arena decided (caller buffers, parameters, buffers, compiled
constants) and the optimizer's updates bound through its registry block."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..trainer import Trainer
from ..trainer.integer import pooled_gradient_blocks, weight_gradient_blocks
from ..checkpoint import HEADER, table_bytes
from ..errors import EdgetrainError
from ..ir import PER_WORD, Graph, Node, int32_in_c
from ..ops import Call, KernelCtx, OpDef, Tensor, Update, Var, lookup
from . import bands
from .program import Affine, Arg, Floats, GradRef, LoweredFunction, NodeInfo, ParamInfo, Program, StateRef, TensorType


class _Storage:
    """Where every tensor lives: caller buffers, parameters, compiled constants or the arena."""

    def __init__(
        self, trainer: Trainer, batch_consts: dict[str, Affine | np.ndarray] | None = None, frozen_array: bool = True
    ):
        """frozen_array: the frozen parameters go to et_frozen (a trainer's, see ModelC.frozen_init);
        otherwise to et_consts with the constants (an inference C, where nothing is ever set)."""
        g = trainer.graph
        self.trainer = trainer
        self.fixed: dict[str, Arg] = {name: Arg("ptr", f"x{i}") for i, name in enumerate(g.inputs)}
        # Constants that change with the batch (_batch_consts): a mean's 1 / count, which each
        # function computes from its batch count into et_batch_consts in order of first use, and
        # splats and values per sample, compiled as they are at the batch compiled for.
        self.batch_consts = dict(batch_consts or {})
        self.batch_values: list[Affine] = []
        if trainer.labels:
            self.fixed[trainer.labels] = Arg("ptr", "labels")
        offset = 0
        self.integers: list[int] = []  # et_qparams: the trained weights stored as int8 (QAS)
        # each trainable parameter's first element among all of theirs (et_state's layout)
        self.elements: dict[str, int] = {}
        self.trainable_elements = 0
        for name in trainer.trainable:
            self.elements[name] = self.trainable_elements
            self.trainable_elements += g.values[name].size
            stored = trainer.integer_weights.get(name)
            if stored is not None:  # the functions read its integers, which are the parameter
                self.fixed[name] = self.fixed[stored.values] = Arg("ptr", "et_qparams", len(self.integers))
                self.integers += stored.integers.tolist()
                continue
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
            self.add_const(name, g.params[name])
        if frozen_array:  # the constants' offsets then start past them, at et_consts[0]
            self.fixed.update((name, replace(self.fixed[name], base="et_frozen")) for name in trainer.frozen)
            self.frozen_floats = self.const_floats
        self.int_consts: list[int] = []  # integer and bool constants read at run time, as int32_t
        self.narrow: set[str] = set()  # int8 constants kept as int8_t (OpDef.narrow_inputs)
        self.narrow_consts: list[int] = []

    def add_const(self, name: str, array: Any) -> None:
        self.fixed[name] = Arg("ptr", "et_consts", self.const_floats - self.frozen_floats)
        self.consts.append(np.asarray(array, np.float32).ravel())
        self.const_floats += int(np.asarray(array).size)

    def _add_int_const(self, name: str, array: Any) -> None:
        array = np.asarray(array).ravel().astype(np.int64)
        outside = array[(array < -(2**31)) | (array >= 2**31)]
        if outside.size:
            raise EdgetrainError(
                f"constant '{name}' holds {int(outside[0])}, outside int32's range: the C keeps "
                "integer tensors as int32_t"
            )
        if name in self.narrow:
            if array.size and (array.min() < -128 or array.max() > 127):
                raise EdgetrainError(f"constant '{name}' is read as int8 but holds values outside its range")
            self.fixed[name] = Arg("ptr", "et_narrow_consts", len(self.narrow_consts))
            self.narrow_consts += array.tolist()
            return
        self.fixed[name] = Arg("ptr", "et_int_consts", len(self.int_consts))
        self.int_consts += array.tolist()

    def locate(self, name: str) -> Arg | None:
        """Fixed storage for `name`, or None when it belongs in the arena."""
        batch = self.batch_consts.get(name)
        if name not in self.fixed and isinstance(batch, Affine):
            self.fixed[name] = Arg("ptr", "et_batch_consts", len(self.batch_values))
            self.batch_values.append(batch)
        if name not in self.fixed and name in self.trainer.graph.constants:
            value = self.trainer.graph.constants[name]
            if isinstance(batch, np.ndarray):  # values at the batch compiled for, whatever this one's
                value = batch
            (self._add_int_const if int32_in_c(value.dtype) else self.add_const)(name, value)
        return self.fixed.get(name)


def _op(node: Node) -> OpDef:
    spec = lookup(node)
    if spec is None:  # the frontend admits registered ops only
        raise EdgetrainError(f"no kernel for op {node.op}")
    return spec


def offset_of(arg: Arg) -> int:
    """The offset of a tensor's fixed storage (only the arena's views ever follow the batch)."""
    assert isinstance(arg.offset, int)
    return arg.offset


def _function(
    trainer: Trainer,
    storage: _Storage,
    nodes: list[Node],
    results: list[str],
    after: dict[int, list[Call]] | None = None,
    backward_from: int | None = None,
    row_bands: tuple[int, int] = (0, 0),
    gradient_bands: tuple[int, int] = (0, 0),
) -> LoweredFunction:
    """Kernel calls for `nodes`, and the `after[i]` calls right after node i's."""
    ctx = KernelCtx(trainer.graph)
    calls: list[Call] = []
    owner: list[int] = []
    span: list[tuple[int, int]] = []  # per node: its first and last statement
    after_calls: list[tuple[int, ...]] = []
    storage.narrow.update(node.inputs[slot] for node in nodes for slot in _op(node).narrow_inputs)
    for i, node in enumerate(nodes):
        begin = len(calls)
        own = _op(node).kernel(ctx, node)
        calls += own
        owner += [i] * len(own)
        span.append((begin, max(begin, len(calls) - 1)))
        extra = (after or {}).get(i, ())
        after_calls.append(tuple(range(len(calls), len(calls) + len(extra))))
        calls += extra
        owner += [i] * len(extra)
    # In order of first use: locate() lays out compiled constants as it meets them, and the
    # generated C must not depend on Python's string hashing.
    used = dict.fromkeys([a.name for call in calls for a in call.args if isinstance(a, Tensor)] + list(results))
    arena = tuple(name for name in used if storage.locate(name) is None)
    infos = tuple(NodeInfo(n.op, n.name, tuple(n.inputs), tuple(n.outputs), tuple(_op(n).inplace)) for n in nodes)
    return LoweredFunction(
        tuple(calls),
        tuple(owner),
        infos,
        tuple(span),
        arena,
        tuple(results),
        backward_from,
        tuple(after_calls),
        row_bands,
        gradient_bands,
    )


def _fused_updates(
    trainer: Trainer,
    storage: _Storage,
    nodes: list[Node],
    outer: dict[str, Node],
    blocks: dict[str, list[tuple[str, int]]],
) -> dict[int, list[Call]]:
    """Operator reordering: each parameter's optimizer update, placed right after the node where
    its gradient is final and the parameter's last reader has run (so every gradient is computed
    from the step's starting weights, as with a separate optimizer step). The gradient is then an
    arena temporary that dies at its update; one in `outer` (_outer_products) is never made, and
    the update reads its two factors. Once the forward pass is done and its loss and new buffer
    values (BatchNormalization's running statistics) are checked finite, the buffers are written,
    so those values need not stay in the arena through the backward pass either. A weight in
    `blocks` (trainer.integer.weight_gradient_blocks) is updated a block at a time, each block
    checked and applied right after its gradient is made."""
    g, opt = trainer.graph, trainer.optimizer
    index = {name: i for i, node in enumerate(nodes) for name in node.outputs}
    assert trainer.loss is not None
    last_read = {name: i for i, node in enumerate(nodes) for name in node.inputs}

    def check_finite(size: int, name: str) -> Call:
        return Call("et_check_finite_f32", (size, Tensor(name)), checked=True)

    buffers = trainer.state_updates.items()
    forward_done = max([index[trainer.loss]] + [index[value] for _, value in buffers])
    copies = [
        Call(
            "et_copy_f32",
            (g.values[value].size, Tensor(value), Arg("ptr", "et_buffers", offset_of(storage.fixed[buffer]))),
        )
        for buffer, value in buffers
    ]
    after = {
        forward_done: [check_finite(1, trainer.loss)] + [check_finite(g.values[v].size, v) for _, v in buffers] + copies
    }
    lr = Var("et_lr")

    def update(
        param: str, operand: tuple[object, ...], grad: tuple[object, ...], first: int = 0, suffix: str = ""
    ) -> Call:
        """The update of `param` from its element `first` on."""
        at = storage.elements[param] + first
        stored = trainer.integer_weights.get(param)
        if stored is None:
            update = Update(operand, grad, Tensor(param, first), _state(trainer, storage, at), lr, suffix)
            return opt.binding.update(update, opt.attrs())
        channel = first // stored.inner if g.values[stored.scale].size > 1 else 0
        weights, scale = Tensor(stored.values, first), Tensor(stored.scale, channel)
        return _integer_update(trainer, storage, param, operand, grad, first, weights, scale, suffix)

    for param, param_blocks in blocks.items():
        for part, first in param_blocks:
            size = g.values[part].size
            after.setdefault(index[part], []).extend(
                [check_finite(size, part), update(param, (size,), (Tensor(part),), first)]
            )
    for param in trainer.trainable:
        if param in blocks:
            continue
        size = g.values[param].size
        grad = trainer.grads[param]
        if grad is None:  # the loss does not depend on it; weight decay and momentum still act
            grad = f"{param}.zero_grad"
            storage.add_const(grad, np.zeros(size, np.float32))
        # The kernels take a gradient as (size, ..., W, G) or, from factors, as (m, A, n, B, ..., W).
        operand: tuple[object, ...]
        g_arg: tuple[object, ...]
        if grad in outer:
            a, b = outer[grad].inputs
            kind, operand, g_arg = "_outer", (g.values[a].size, Tensor(a), g.values[b].size, Tensor(b)), ()
            made = max(index.get(a, -1), index.get(b, -1))
        else:
            kind, operand, g_arg, made = "", (size,), (Tensor(grad),), index.get(grad, -1)
        check = Call(f"et_check{kind}_finite_f32", (*operand, *g_arg), checked=True)
        i = max(made, last_read.get(trainer.read_as(param), -1), forward_done)
        after.setdefault(i, []).extend([check, update(param, operand, g_arg, suffix=kind)])
    return after


def _state(trainer: Trainer, storage: _Storage, at: int) -> tuple[Arg, ...]:
    """The optimizer state of the trainable elements from element `at` on, one per slot."""
    slots = range(len(trainer.optimizer.state_slots))
    return tuple(Arg("ptr", "et_state", slot * storage.trainable_elements + at) for slot in slots)


def _integer_update(
    trainer: Trainer,
    storage: _Storage,
    param: str,
    operand: tuple[object, ...],
    grad: tuple[object, ...],
    first: int,
    weights: object,
    scale: object,
    suffix: str = "",
) -> Call:
    """The "_q8" update (runtime_c/et_qas.h) of int8 weight `param` stored as integers, from its
    element `first` on (`weights` and `scale` from there, as the caller's arguments): its rounding
    draws from the step count and each element's index among every trainable element, so a fused
    update and optimizer_step round alike. suffix "_outer": from the factors of its gradient."""
    opt, stored = trainer.optimizer, trainer.integer_weights[param]
    at = storage.elements[param] + first
    operand = (*operand, scale, stored.inner, at, Var("et_step"))
    update = Update(operand, grad, weights, _state(trainer, storage, at), Var("et_lr"), "_q8" + suffix)
    return opt.binding.update(update, opt.attrs())


def _whole_update(trainer: Trainer, storage: _Storage) -> tuple[Call, ...]:
    """optimizer_step's updates from the accumulated gradients: every float trainable parameter at
    once, or where int8 weights are stored as integers, each run of float ones, and each of those."""
    opt = trainer.optimizer
    if not trainer.integer_weights:
        update = Update(
            (Var("ET_TRAINABLE"),),
            (Arg("ptr", "et_grads"),),
            Arg("ptr", "et_params"),
            _state(trainer, storage, 0),
            Var("et_lr"),
        )
        return (opt.binding.update(update, opt.attrs()),)
    calls: list[Call] = []
    run: list[str] = []  # consecutive float parameters, which lie in et_params in the same order
    for param in [*trainer.trainable, None]:
        if param is not None and param not in trainer.integer_weights:
            run.append(param)
            continue
        if run:
            at, size = storage.elements[run[0]], sum(trainer.graph.values[p].size for p in run)
            grads = (Arg("ptr", "et_grads", at),)
            update = Update((size,), grads, storage.fixed[run[0]], _state(trainer, storage, at), Var("et_lr"))
            calls.append(opt.binding.update(update, opt.attrs()))
            run = []
        if param is not None:
            size, grads = trainer.graph.values[param].size, (Arg("ptr", "et_grads", storage.elements[param]),)
            scale = storage.locate(trainer.integer_weights[param].scale)
            calls.append(_integer_update(trainer, storage, param, (size,), grads, 0, storage.fixed[param], scale))
    return tuple(calls)


def _outer_products(trainer: Trainer) -> dict[str, Node]:
    """Gradients -> the Gemm making each as the outer product of two vectors (a contraction over a
    batch of 1), where nothing else reads it. train_step never stores such a gradient: it checks the
    factors and then sums their products straight into the accumulator, which saves the arena the
    gradient's size and the step two passes over it."""
    g = trainer.graph
    read = {name for node in trainer.train_nodes for name in node.inputs}
    made = {node.outputs[0]: node for node in trainer.train_nodes[trainer.backward_start :] if node.op == "Gemm"}
    products: dict[str, Node] = {}
    for grad in trainer.grads.values():
        node = made.get(grad) if grad else None
        if grad is None or node is None or grad in read or len(node.inputs) > 2:
            continue
        if float(node.attr("alpha", 1.0)) != 1.0:
            continue
        a = node.inputs[0]
        if g.shape(a)[0 if int(node.attr("transA", 0)) else 1] == 1:
            products[grad] = node
    return products


def _tensors(trainer: Trainer, functions: tuple[LoweredFunction, ...]) -> dict[str, TensorType]:
    g = trainer.graph
    names = dict.fromkeys(n for f in functions for n in f.arena)
    return {name: _tensor_type(g, name) for name in names}


def _tensor_type(g: Graph, name: str) -> TensorType:
    c_type = g.c_type(name)
    return TensorType(-(-g.values[name].size // PER_WORD[c_type]), g.values[name].dtype, c_type)


def _grads(trainer: Trainer, storage: _Storage, outer: dict[str, Node], fused_update: bool) -> tuple[GradRef, ...]:
    g, grads = trainer.graph, []
    for name in [] if fused_update else trainer.trainable:  # a fused update keeps no gradients
        grad, offset, size = trainer.grads[name], storage.elements[name], g.values[name].size
        if grad in outer:
            a, b = outer[grad].inputs
            grads.append(GradRef(None, offset, size, (a, b), g.values[a].size))
        else:
            grads.append(GradRef(grad, offset, size))
    return tuple(grads)


def lower(
    trainer: Trainer,
    prefix: str,
    federated: bool = False,
    fused_update: bool = False,
    batch_consts: dict[str, Affine | np.ndarray] | None = None,
    row_bands: dict[str, tuple[int, int]] | None = None,
) -> Program:
    """fused_update: train_step applies the optimizer itself (see _fused_updates), and there are no
    gradient buffers; otherwise gradients accumulate into them for optimizer_step (ORT's semantics).
    row_bands: None, or each function's leading layers that no gradient reads run in row bands
    where that lowers its peak of live bytes (bands.py), as the dict's choices say: the first
    lowering of a compile (the largest batch's) chooses and records them, the other batches' follow
    them, so that a batched C's calls agree."""
    g = trainer.graph
    storage = _Storage(trainer, batch_consts)
    # A fused update writes gradients and buffers inside the step; otherwise they are results.
    outer = _outer_products(trainer)
    kept = (
        []
        if fused_update
        else (
            [v for v in trainer.grads.values() if v and v not in outer]
            + [f for node in outer.values() for f in node.inputs]
            + list(trainer.state_updates.values())
        )
    )
    train_nodes = [node for node in trainer.train_nodes if node not in outer.values()]
    blocks: dict[str, list[tuple[str, int]]] = {}
    if fused_update:
        train_nodes, blocks = weight_gradient_blocks(g, train_nodes, trainer.grads, trainer.read_as)
        train_nodes, bias_blocks = pooled_gradient_blocks(g, train_nodes, trainer.grads)
        blocks.update(bias_blocks)
    extra = list(trainer.extra_outputs)
    results = [trainer.loss] + extra + kept
    eval_nodes, infer_nodes, backward_start = trainer.eval_nodes, trainer.infer_nodes, trainer.backward_start
    banded = {"train": (0, 0), "eval": (0, 0), "infer": (0, 0), "gradients": (0, 0)}
    if row_bands is not None:
        # the backward pass first: the forward pass's bands need go no lower than its peak
        tail = bands.gradient_bands(g, train_nodes, backward_start, set(results), row_bands.get("gradients"))
        row_bands.setdefault("gradients", (tail.ops, tail.height))
        train_nodes = tail.nodes
        forward = len(train_nodes)
        split = _row_bands(row_bands, "train", g, train_nodes, backward_start, set(results))
        backward_start += len(split.nodes) - forward
        # eval_step and infer share train_step's arena: they need band no lower than its peak
        keep = {trainer.loss, *extra}
        evaluated = _row_bands(row_bands, "eval", g, eval_nodes, len(eval_nodes), keep, split.peak)
        inferred = _row_bands(row_bands, "infer", g, infer_nodes, len(infer_nodes), set(g.outputs), split.peak)
        train_nodes, eval_nodes, infer_nodes = split.nodes, evaluated.nodes, inferred.nodes
        functions = (("train", split), ("eval", evaluated), ("infer", inferred), ("gradients", tail))
        banded = {k: (b.ops, b.bands) for k, b in functions}
    train = _function(
        trainer,
        storage,
        train_nodes,
        results,
        _fused_updates(trainer, storage, train_nodes, outer, blocks) if fused_update else None,
        backward_start,
        banded["train"],
        banded["gradients"],
    )
    evaluate = _function(trainer, storage, eval_nodes, [trainer.loss] + extra, row_bands=banded["eval"])
    infer = _function(trainer, storage, infer_nodes, list(g.outputs), row_bands=banded["infer"])
    entries = trainer.checkpoint_entries
    # before the constants are taken: an int8 weight's scale may be first read here
    params = tuple(_param_info(trainer, storage, name, kind) for name, kind in entries)
    optimizer_update = _whole_update(trainer, storage)
    opt = trainer.optimizer
    labels = g.values[trainer.labels] if trainer.labels else None
    return Program(
        prefix=prefix,
        **_interface(trainer),
        infer=infer,
        infer_outputs=tuple(g.outputs),
        tensors=_tensors(trainer, (train, evaluate, infer)),
        fixed=dict(storage.fixed),
        buffer_init=Floats(g.buffers[n] for n in trainer.buffers),
        consts=Floats(storage.consts),
        int_consts=tuple(storage.int_consts),
        narrow_consts=tuple(storage.narrow_consts),
        batch_consts=tuple(storage.batch_values),
        label_type=None if labels is None else g.c_type(labels.name),
        label_size=labels.size if labels else 0,
        train=train,
        eval=evaluate,
        loss=trainer.loss,
        grads=_grads(trainer, storage, outer, fused_update),
        state_updates=tuple(
            StateRef(value, offset_of(storage.fixed[buffer]), g.values[buffer].size)
            for buffer, value in trainer.state_updates.items()
            if not fused_update
        ),
        params=params,
        param_init=Floats(g.params[n] for n in trainer.trainable if n not in trainer.integer_weights),
        state_slots=len(opt.state_slots),
        step_values=tuple(opt.binding.step_values(opt.attrs())),
        optimizer_update=optimizer_update,
        learning_rate=opt.lr,
        max_grad_norm=opt.max_grad_norm,
        fingerprint=trainer.fingerprint(),
        table=table_bytes([n for n, _ in entries], [k for _, k in entries], [g.shape(n) for n, _ in entries]),
        header_bytes=HEADER.size,
        trainable_floats=storage.trainable_floats,
        trainable_elements=storage.trainable_elements,
        integers=tuple(storage.integers),
        frozen_floats=storage.frozen_floats,
        federated=bool(federated),
        fused_update=bool(fused_update),
        extra_outputs=tuple(g.outputs.index(n) for n in extra),
        extra=tuple(extra),
    )


def _row_bands(
    choices: dict[str, tuple[int, int]],
    name: str,
    g: Graph,
    nodes: list[Node],
    end: int,
    keep: set[str],
    floor: float = 0.0,
) -> bands.Banding:
    """bands.row_bands of function `name`, as `choices` has it, or chosen now and recorded there."""
    split = bands.row_bands(g, nodes, end, keep, floor, choices.get(name))
    choices.setdefault(name, (split.ops, split.height))
    return split


def _param_info(trainer: Trainer, storage: _Storage, name: str, kind: int) -> ParamInfo:
    size, compiled = trainer.graph.values[name].size, name in trainer.compiled_weights
    stored = trainer.integer_weights.get(name)
    scale = None if stored is None else storage.locate(stored.scale)
    return ParamInfo(kind, offset_of(storage.fixed[name]), size, name, compiled, scale, stored.inner if stored else 0)


def _interface(trainer: Trainer) -> dict[str, Any]:
    g = trainer.graph
    return dict(
        input_sizes=tuple(g.values[n].size for n in g.inputs),
        input_types=tuple(g.c_type(n) for n in g.inputs),
        output_sizes=tuple(g.values[n].size for n in g.outputs),
        output_types=tuple(g.c_type(n) for n in g.outputs),
    )


def lower_inference(
    trainer: Trainer,
    prefix: str,
    batch_consts: dict[str, Affine | np.ndarray] | None = None,
    row_bands: dict[str, tuple[int, int]] | None = None,
) -> Program:
    """A model with nothing to train: `infer` alone, every initializer compiled in; row_bands as
    lower's."""
    g = trainer.graph
    storage = _Storage(trainer, batch_consts, frozen_array=False)
    nodes, banded = trainer.infer_nodes, (0, 0)
    if row_bands is not None:
        split = _row_bands(row_bands, "infer", g, nodes, len(nodes), set(g.outputs))
        nodes, banded = split.nodes, (split.ops, split.bands)
    infer = _function(trainer, storage, nodes, list(g.outputs), row_bands=banded)
    return Program(
        prefix=prefix,
        **_interface(trainer),
        infer=infer,
        infer_outputs=tuple(g.outputs),
        tensors=_tensors(trainer, (infer,)),
        fixed=dict(storage.fixed),
        buffer_init=Floats(g.buffers[n] for n in trainer.buffers),
        consts=Floats(storage.consts),
        int_consts=tuple(storage.int_consts),
        narrow_consts=tuple(storage.narrow_consts),
        batch_consts=tuple(storage.batch_values),
        trainer=False,
    )
