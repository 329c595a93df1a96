"""The Program: plain data between lowering, memory planning and codegen."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops import Call, StepValue


@dataclass(frozen=True)
class Affine:
    """a * n + b, n the batch count a C function runs (its first argument). inverse: the float
    nearest 1 / (a * n + b), rounded as Python's np.float32(1.0 / count) is (a mean's scale)."""

    a: int
    b: int
    inverse: bool = False

    def at(self, n: int) -> int | float:
        value = self.a * n + self.b
        return float(np.float32(1.0 / value)) if self.inverse else value


@dataclass(frozen=True)
class Arg:
    """A kernel argument as the C writes it."""

    kind: str  # ptr | int | float | ints | null | counter | var
    base: str = ""  # ptr: one of the generated storage identifiers; var: a train_step variable
    offset: int | Affine = 0
    value: object = None  # ptr to a tensor: (its name, the offset of the view into it)


@dataclass(frozen=True)
class TensorType:
    words: int  # 4-byte words: one per element, or per 4 or 2 of a quantized tensor's narrow ones
    dtype: np.dtype
    c_type: str = "float"  # of its elements in the C (ir.Graph.c_type)


@dataclass(frozen=True)
class NodeInfo:
    """What memory planning needs of a node: its tensors and the input slots its output may reuse."""

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    inplace: tuple[int, ...]


@dataclass(frozen=True)
class LoweredFunction:
    """One C function's kernel calls, in order. calls[i] belongs to nodes[owner[i]]; span[j] is the
    first and last call of node j's own kernel (calls placed after it, as fused updates are, follow
    its span). arena: the tensors with no fixed storage, in order of first use; results: tensors the
    function leaves for its caller, alive to its end. Values made from node backward_from on are
    gradients (for the memory report), the others activations."""

    calls: tuple[Call, ...]
    owner: tuple[int, ...]
    nodes: tuple[NodeInfo, ...]
    span: tuple[tuple[int, int], ...]
    arena: tuple[str, ...]
    results: tuple[str, ...]
    backward_from: int | None = None
    after: tuple[tuple[int, ...], ...] = ()  # per node: the calls placed right after its own
    row_bands: tuple[int, int] = (0, 0)  # how many of its first nodes run in row bands, in how many
    gradient_bands: tuple[int, int] = (0, 0)  # how many of its last nodes run in row bands, in how many

    def comment(self, i: int) -> str:
        node = self.nodes[self.owner[i]]
        return f"{node.op} {node.name}"


class Floats:
    """Initial values, as one read-only float32 array (a tuple of a model's millions of Python floats
    takes seconds to make and to read back). Compares by value, like a tuple."""

    def __init__(self, arrays: Iterable[Any]) -> None:
        arrays = [np.asarray(a, np.float32).ravel() for a in arrays]
        self.array = np.concatenate(arrays) if arrays else np.zeros(0, np.float32)
        self.array.flags.writeable = False

    def __len__(self) -> int:
        return self.array.size

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype, copy=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Floats) and np.array_equal(self.array, other.array)

    def __hash__(self) -> int:
        return hash(self.array.tobytes())


@dataclass(frozen=True)
class ParamInfo:
    kind: int  # checkpoint kind: 0 frozen (et_frozen), 1 trainable (et_params), 2 buffer (et_buffers)
    offset: int
    size: int
    name: str  # for comments only
    compiled: bool = False  # a frozen weight the functions read as compile-time integers: fixed
    # a trained weight stored as int8 in et_qparams (QAS): its float value is scale[j / inner] * q[j]
    scale: Arg | None = None
    inner: int = 0


@dataclass(frozen=True)
class GradRef:
    """A trainable parameter's gradient as train_step leaves it for accumulation."""

    grad: str | None  # None: the loss does not depend on this parameter, or `factors` make it
    offset: int
    size: int
    factors: tuple[str, str] | None = None  # the gradient is their outer product
    rows: int = 0  # the first factor's length


@dataclass(frozen=True)
class StateRef:
    value: str  # the buffer's new contents, computed by train_step
    offset: int  # in et_buffers
    size: int


@dataclass(frozen=True)
class Program:
    """A trainer lowered (functions None for an inference-only C, which has `infer` alone)."""

    prefix: str
    input_sizes: tuple[int, ...]
    input_types: tuple[str, ...]  # "float" | "int32_t" (integer and bool tensors)
    output_sizes: tuple[int, ...]
    output_types: tuple[str, ...]
    infer: LoweredFunction
    infer_outputs: tuple[str, ...]
    tensors: dict[str, TensorType]  # of every tensor in the arena
    fixed: dict[str, Arg]  # the storage of every tensor outside the arena
    buffer_init: Floats
    consts: Floats  # what stays in flash: the frozen parameters (frozen_floats), then the constants
    int_consts: tuple[int, ...]
    narrow_consts: tuple[int, ...]  # int8 constants (an int8 layer's weights), kept as int8_t
    batch_consts: tuple[Affine, ...]
    trainer: bool = True  # False: an inference-only C
    label_type: str | None = None
    label_size: int = 0
    train: LoweredFunction | None = None
    eval: LoweredFunction | None = None
    loss: str | None = None
    grads: tuple[GradRef, ...] = ()
    state_updates: tuple[StateRef, ...] = ()
    params: tuple[ParamInfo, ...] = ()
    param_init: Floats | None = None
    state_slots: int = 0
    step_values: tuple[StepValue, ...] = ()  # the optimizer's scalars, computed once per step
    optimizer_update: tuple[Call, ...] = ()  # optimizer_step's updates of every trainable parameter
    learning_rate: float = 0.0
    max_grad_norm: float | None = None
    fingerprint: int = 0
    table: bytes = b""
    header_bytes: int = 0
    trainable_floats: int = 0  # in et_params
    trainable_elements: int = 0  # of every trainable parameter, the int8 weights' too (et_state's layout)
    integers: tuple[int, ...] = ()  # et_qparams' initial values: the trained weights stored as int8
    frozen_floats: int = 0
    federated: bool = False
    fused_update: bool = False
    extra_outputs: tuple[int, ...] = ()  # indices into the outputs train_step and eval_step also write
    extra: tuple[str, ...] = ()  # those outputs' tensors

    def functions(self) -> dict[str, LoweredFunction]:
        if self.train is None or self.eval is None:
            return {"infer": self.infer}
        return {"train": self.train, "eval": self.eval, "infer": self.infer}
