"""plan(Program) -> MemoryPlan: the arena tensors' lifetimes (liveness over each function's kernel
calls), in-place reuse of a dying input's bytes, their offsets in the one arena the functions
share, the labelled blocks of the memory report, and every static RAM category of the trainer."""

from __future__ import annotations

from dataclasses import dataclass

from ..lower import LoweredFunction, Program
from ..ops import Tensor
from .planner import Block, Interval, liveness_lower_bound, place

F32 = 4


@dataclass(frozen=True)
class FunctionPlan:
    offsets: dict[str, int]  # arena tensor -> its offset in the arena, in 4-byte words
    arena_floats: int
    lower_bound: int  # the liveness lower bound of its arena
    blocks: tuple[Block, ...]  # the arena's allocations, for the memory report
    row_bands: tuple[int, int] = (0, 0)  # the LoweredFunction's
    gradient_bands: tuple[int, int] = (0, 0)  # the LoweredFunction's


@dataclass(frozen=True)
class MemoryPlan:
    """functions: "train", "eval", "infer" (an inference C: "infer" alone). ram: bytes of every
    mutable static category of the C; ram_bytes their sum."""

    functions: dict[str, FunctionPlan]
    ram: dict[str, int]
    ram_bytes: int
    flash_constants_by_type: dict[str, int]  # the constants' bytes by the C type of their elements
    trainable_elements: int  # of every trainable parameter
    frozen_floats: int
    fused_update: bool
    integer_bytes: int = 0  # of the parameters': the trained weights stored as int8

    @property
    def flash_constants_bytes(self) -> int:
        return sum(self.flash_constants_by_type.values())

    @property
    def row_bands(self) -> bool:
        """Whether any function runs layers in row bands."""
        return any(f.row_bands[0] or f.gradient_bands[0] for f in self.functions.values())

    @property
    def arena_floats(self) -> int:
        return max(int(f.arena_floats) for f in self.functions.values())


def _liveness(f: LoweredFunction) -> tuple[dict[str, int], dict[str, int]]:
    """Each tensor's first and last statement: made by its node's first call, read until the last
    call of each node reading it (or the call placed after a node that reads it); a result lives
    to the function's end."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    tensor_args = [[a.name for a in call.args if isinstance(a, Tensor)] for call in f.calls]
    for i, node in enumerate(f.nodes):
        begin, end = f.span[i]
        for name in node.outputs:
            first.setdefault(name, begin)
        for name in node.inputs:
            last[name] = end
        for k in f.after[i] if f.after else ():
            last.update((name, k) for name in tensor_args[k])
    end = max(len(f.calls) - 1, 0)
    results = set(f.results)
    for name in f.arena:
        last[name] = end if name in results else max(last.get(name, 0), first[name])
    return first, last


def _in_place(program: Program, f: LoweredFunction, last: dict[str, int]) -> dict[str, str]:
    """Outputs that take over the bytes of an input dying at their node (the op's `inplace` slots:
    its kernel reads each element before writing it, or as much of the input as it overwrites, where
    the output is smaller), of the same C type and no larger: the sizes along a chain of such
    outputs only shrink. Returns value -> the value whose bytes it uses."""
    root: dict[str, str] = {}
    arena, results, types = set(f.arena), set(f.results), program.tensors
    for i, node in enumerate(f.nodes):
        first_stmt, last_stmt = f.span[i]
        if not node.inplace or first_stmt != last_stmt or first_stmt >= len(f.calls) or f.owner[first_stmt] != i:
            continue  # one kernel call, so nothing reads an input after the output is written
        y = node.outputs[0]
        for slot in node.inplace:
            x = node.inputs[slot] if slot < len(node.inputs) else ""
            if (
                x in arena
                and y in arena
                and x not in results
                and last[x] == last_stmt
                and types[x].dtype == types[y].dtype
                and types[y].words <= types[x].words
            ):
                root[y] = root.get(x, x)
                break
    return root


def _kinds(f: LoweredFunction, roots: dict[str, list[str]]) -> dict[str, str]:
    """Gradients are made by the backward pass, except forward nodes recomputed there (same name)."""
    forward = {(n.op, n.name) for n in f.nodes[: f.backward_from]}
    producer = {name: node for node in f.nodes[f.backward_from :] for name in node.outputs}
    return {
        r: "gradient" if r in producer and (producer[r].op, producer[r].name) not in forward else "activation"
        for r in roots
    }


def _interval(
    program: Program, members: list[str], first: dict[str, int], last: dict[str, int]
) -> tuple[Interval, list[list[str]]]:
    """A group of tensors sharing bytes (in the order they take them over) as one interval, its
    first tensor's words until a smaller one takes over, whose words (the rest of the bytes free)
    from the statement after the one that writes it; and the tensors of each of its segments."""
    end = max(last[m] for m in members)
    runs, shrinks = [[members[0]]], []
    for before, name in zip(members, members[1:]):
        words = program.tensors[name].words
        if words < program.tensors[before].words and first[name] + 1 <= end:
            runs.append([])
            shrinks.append((first[name] + 1, words))
        runs[-1].append(name)
    return Interval(members[0], first[members[0]], end, program.tensors[members[0]].words, tuple(shrinks)), runs


def plan_function(program: Program, f: LoweredFunction, packed: bool = True) -> FunctionPlan:
    first, last = _liveness(f)
    root = _in_place(program, f, last)
    groups: dict[str, list[str]] = {}
    for name in sorted(f.arena, key=lambda n: (first[n], n)):
        groups.setdefault(root.get(name, name), []).append(name)
    segmented = {r: _interval(program, members, first, last) for r, members in groups.items()}
    intervals = [interval for interval, _ in segmented.values()]
    offsets, total = place(intervals, packed)
    kind = _kinds(f, groups)
    blocks = tuple(
        Block(
            " -> ".join(members),
            kind[iv.name],
            4 * offsets[iv.name],
            4 * words,
            start,
            end,
            program.tensors[iv.name].c_type,
        )
        for iv in sorted(intervals, key=lambda iv: (iv.start, iv.name))
        for members, (start, end, words) in zip(segmented[iv.name][1], iv.segments())
    )
    where = {name: offsets[root.get(name, name)] for name in f.arena}
    return FunctionPlan(where, total, liveness_lower_bound(intervals), blocks, f.row_bands, f.gradient_bands)


def _ram(program: Program, arena_floats: int) -> dict[str, int]:
    """Every mutable static byte of the C by category: the arena, trainable parameters (float, and
    int8 weights stored as integers), gradients (unless fused), optimizer state, the federated
    reference copy, and the rest (buffers and the scalar counters: step, counter, learning rate,
    reset flag[, reference flag]; a fused update never reads the reset flag, so the compiler drops
    it and it is not counted)."""
    per_element = program.trainable_elements * F32  # a float for each element of every parameter
    scalars = 3 + (not program.fused_update) + program.federated
    return {
        "arena": arena_floats * F32,
        "parameters": program.trainable_floats * F32 + len(program.integers),
        "gradients": 0 if program.fused_update else per_element,
        "optimizer_state": program.state_slots * per_element,
        "federated_reference": per_element if program.federated else 0,
        # C99 has no empty arrays: an arena without tensors is one float
        "other": F32 * ((arena_floats == 0) + len(program.buffer_init) + scalars),
    }


def plan(program: Program, packed: bool = True) -> MemoryPlan:
    """packed=False: offsets that are valid but not searched for the smallest arena (planner.place)."""
    functions = {name: plan_function(program, f, packed) for name, f in program.functions().items()}
    arena = max(f.arena_floats for f in functions.values())
    ram = _ram(program, arena) if program.trainer else {"arena": arena * F32, "other": F32 * len(program.buffer_init)}
    return MemoryPlan(
        functions,
        ram,
        sum(ram.values()),
        {"float": len(program.consts) * F32, "int8_t": len(program.narrow_consts)},
        program.trainable_elements,
        program.frozen_floats,
        program.fused_update,
        len(program.integers),
    )
