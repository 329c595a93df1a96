"""Memory policies chosen at compile time: which parameters train (sparse update), whether the
optimizer runs inside the training step (fused update), and meeting a RAM budget with them."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import EdgetrainError
from ..ir import Graph

# A parameter of these ops at this input slot adds to the op's result: a bias.
_BIAS_SLOTS = {
    "Conv": 2,
    "ConvTranspose": 2,
    "Gemm": 2,
    "BatchNormalization": 2,
    "LayerNormalization": 2,
    "InstanceNormalization": 2,
    "GroupNormalization": 2,
}
_POLICY = re.compile(r"(?:(bias)(?::(\d+))?)?(?:(?:^|\+)last:(\d+))?")


def policy_parameters(graph: Graph, policy: str) -> list[str]:
    """The trainable parameters of a named sparse-update policy: "bias" (every bias), "bias:K" (the
    biases of the K parameterized layers nearest the output), "last:K" (every parameter of those K
    layers), or a bias policy and a last one joined by "+" ("bias+last:K", "bias:K+last:J": the Tiny
    Training Engine's sparse update, whose backward pass stops at the K-th layer from the output). A
    layer is an op with a float initializer among its inputs (Conv, Gemm, MatMul, BatchNormalization, ...)."""
    match = _POLICY.fullmatch(policy or "")
    if not policy or not match:
        raise EdgetrainError(
            f"unknown update policy {policy!r}; expected 'bias', 'bias:K', 'last:K', 'bias+last:K' or 'bias:K+last:J'"
        )
    bias, bias_layers, last = match.groups()
    stands_for = _quantized_params(graph)
    layers = [
        [stands_for.get(n, n) for n in node.inputs if stands_for.get(n, n) in graph.params]
        for node in graph.nodes
        if node.op not in _QDQ
    ]
    layers = [names for names in layers if names]

    def nearest(k: str) -> list[list[str]]:
        if not 0 < int(k) <= len(layers):
            raise EdgetrainError(
                f"update policy {policy!r}: K must lie in [1, {len(layers)}] (the model's parameterized layers)"
            )
        return layers[-int(k) :]

    chosen = {n for names in nearest(last) for n in names} if last is not None else set()
    if bias:
        biases = _biases(graph)
        chosen |= biases if bias_layers is None else {n for names in nearest(bias_layers) for n in names} & biases
    return [p for p in graph.params if p in chosen]


_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _quantized_params(graph: Graph) -> dict[str, str]:
    """The parameter that each value a QuantizeLinear -> DequantizeLinear chain makes of one stands
    for: a quantized model's layer reads its weight through them (frontend.imports.quantized_parameters)."""
    stands_for: dict[str, str] = {}
    for node in graph.nodes:
        source = stands_for.get(node.inputs[0], node.inputs[0]) if node.inputs else ""
        if node.op in _QDQ and source in graph.params:
            stands_for[node.outputs[0]] = source
    return stands_for


def _biases(graph: Graph) -> set[str]:
    found = set()
    for node in graph.nodes:
        slot = _BIAS_SLOTS.get(node.op)
        if slot is not None and slot < len(node.inputs) and node.inputs[slot] in graph.params:
            found.add(node.inputs[slot])
        if node.op == "Add":  # MatMul + Add, as Linear layers without Gemm export
            found.update(n for n in node.inputs if n in graph.params)
    return found


NOTHING_KEPT = 1 << 30  # keep_every beyond any model's activations: recompute from the inputs


@dataclass(frozen=True)
class Plan:
    """How a trainer trades RAM: fused update, then the leading layers no gradient reads in row
    bands (lower/bands.py), then recomputation of cheap forward ops, then of every op but every
    keep_every-th activation the backward pass reads (0: keep them all)."""

    fused_update: bool = False
    recompute: bool = False
    keep_every: int = 0
    row_bands: bool = False

    def describe(self) -> str:
        parts = ["fused update" if self.fused_update else "accumulated gradients"]
        if self.row_bands:
            parts.append("row bands")
        if self.keep_every >= NOTHING_KEPT:
            parts.append("recomputation of every activation from the inputs")
        elif self.keep_every:
            parts.append(f"recomputation keeping 1 in {self.keep_every} saved activations")
        elif self.recompute:
            parts.append("recomputation of cheap ops")
        return " + ".join(parts)


def static_ram_bytes(plan) -> int:
    """Every mutable static byte of the generated C: a MemoryPlan's (edgetrain.memory.plan) sum of
    its RAM categories, also read from the template data emitted with it."""
    return plan.ram_bytes


def meet_budget(compile_, plan: Plan, budget: int | None, *, can_fuse: bool):
    """The result of compile_(plan) for the first plan, from `plan` on, whose memory plan (the
    result's `memory`, an edgetrain.memory.plan.MemoryPlan) fits `budget` bytes of static RAM."""
    if budget is None:
        return compile_(plan)
    fused = plan.fused_update or can_fuse
    candidates = [plan, Plan(fused, row_bands=plan.row_bands)] + [
        Plan(fused, recompute, keep, row_bands=True)
        for recompute, keep in ((False, 0), (True, 0), (True, 2), (True, 4), (True, NOTHING_KEPT))
    ]
    best: tuple[int, Plan] | None = None
    for candidate in dict.fromkeys(candidates):
        result = compile_(candidate)
        size = result.memory.ram_bytes
        if size <= budget:
            return result
        if best is None or size < best[0]:  # said as it ran: row bands only where a layer took them
            best = (size, replace(candidate, row_bands=result.memory.row_bands))
    assert best is not None
    size, smallest = best
    raise EdgetrainError(
        f"RAM budget of {budget:,} B not met: the smallest footprint reached is {size:,} B, with "
        f"{smallest.describe()}; train fewer parameters (update_policy 'bias' or 'bias+last:K') "
        "or a smaller batch"
    )
