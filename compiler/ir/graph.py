"""The intermediate representation: ONNX semantics (opset 18 forms), static shapes, float32 tensors.

Nodes keep ONNX op names, inputs and attributes so every graph the compiler builds can be
written back out as ONNX and executed by an independent reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from collections.abc import Mapping

import numpy as np

ET_DOMAIN = "ai.edgetrain"  # our own ops: gradients, fused losses and optimizer updates
COUNTER = "dropout_counter"  # the trainer's count of training steps, which seeds dropout masks

# Quantized tensors (QuantizeLinear's outputs, DequantizeLinear's inputs), 8- and 16-bit integers, and
# the C type of one the model computes (not one it outputs, which the API gives as int32_t): its own
# width, a byte or two (runtime_c/et_quantize.h).
NARROW = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.uint16): "uint16_t",
}
QUANTIZED = frozenset(NARROW)


def int32_in_c(dtype: Any) -> bool:
    """Integer, bool and quantized tensors as the C's API and constants hold them: an int32_t each."""
    dtype = np.dtype(dtype)
    return dtype.kind in "bi" or dtype in QUANTIZED


# How many elements of each C type a tensor's elements can have fit one 4-byte word of the arena.
PER_WORD = {"float": 1, "uint32_t": 1, "int32_t": 1, "int8_t": 4, "uint8_t": 4, "int16_t": 2, "uint16_t": 2}


@dataclass(frozen=True)
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class Node:
    op: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input, as in ONNX
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    name: str = ""
    domain: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


@dataclass
class Graph:
    values: dict[str, Value]
    nodes: list[Node]
    inputs: list[str]  # data inputs fed by the caller
    outputs: list[str]
    params: dict[str, np.ndarray]  # float initializers that may be trained or frozen
    constants: dict[str, np.ndarray]  # known at compile time (shapes, axes, literal tensors)
    buffers: dict[str, np.ndarray] = field(default_factory=dict)  # state updated by training (BN statistics)
    # params the exporter recorded as a module's buffers or constant tensors: frozen unless named to train
    not_parameters: frozenset[str] = frozenset()
    # tensors the exporter's optimizer folded into constants and the graph no longer has: frozen
    folded: frozenset[str] = frozenset()
    # every parameter the dynamo export's graph signature lists, those the graph no longer has too
    recorded: frozenset[str] = frozenset()
    # values PyTorch's forward detached (x.detach(), recorded by the exporter): no gradient flows into them
    detached: frozenset[str] = frozenset()
    # a Gather's output -> the row of its data that its gradient skips (an embedding's padding_idx)
    padding_rows: dict[str, int] = field(default_factory=dict)
    opset: int = 18
    _counter: int = 0

    def fresh(self, hint: str) -> str:
        """A value name that cannot clash with the model's own names."""
        while True:
            self._counter += 1
            name = f"_et{self._counter}_{hint}"
            if name not in self.values:
                return name

    def add_value(self, name: str, shape, dtype=np.float32) -> str:
        self.values[name] = Value(name, tuple(int(d) for d in shape), np.dtype(dtype))
        return name

    def add_constant(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.constants[name] = array
        self.add_value(name, array.shape, array.dtype)
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        return self.values[name].shape

    def c_type(self, name: str) -> str:
        """The C type of tensor `name`'s elements where the model computes it: float, uint32_t (bit
        masks), int32_t (integers, bools, and the quantized tensors the model outputs), or a quantized
        tensor's own width (NARROW)."""
        dtype = self.values[name].dtype
        if dtype in NARROW and name not in self.outputs:
            return NARROW[dtype]
        if dtype == np.uint32:
            return "uint32_t"
        return "int32_t" if int32_in_c(dtype) else "float"

    def producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[tuple[Node, int]]]:
        users: dict[str, list[tuple[Node, int]]] = {}
        for node in self.nodes:
            for slot, name in enumerate(node.inputs):
                users.setdefault(name, []).append((node, slot))
        return users


def frozen_attrs(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(attrs))
