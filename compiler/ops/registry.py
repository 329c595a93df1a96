"""One table of ops. Each op's kernel binding, gradient rule, and (for our own ops) shape rule
and Python reference sit together in one block, registered with `@op`."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
from onnx.reference.op_run import OpRun

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN, Graph, Node


# Kernel-call arguments: plain data that the template renders (convention 4).
@dataclass(frozen=True)
class Tensor:
    name: str
    offset: int = 0  # in elements, for views into part of a tensor (Concat, Split)


@dataclass(frozen=True)
class Counter:
    """The trainer's dropout counter: advances once per successful training step."""


@dataclass(frozen=True)
class Var:
    """A variable of the generated C function the call sits in, by its C name (the learning rate,
    a scalar an optimizer computes once per step)."""

    name: str


Arg = Tensor | Counter | Var | int | float | tuple | None


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple
    checked: bool = False  # returns a status that aborts the step when not ET_OK


class KernelCtx:
    """What a kernel binding may ask of the graph: shapes and compile-time constants."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def shape(self, name: str) -> tuple[int, ...]:
        return self.graph.shape(name)

    def size(self, name: str) -> int:
        return self.graph.values[name].size

    def value_of(self, name: str) -> np.ndarray:
        return self.graph.constants[name]

    def call(self, fn: str, *args, checked: bool = False) -> Call:
        return Call(fn, tuple(Tensor(a) if isinstance(a, str) else a for a in args), checked)


@dataclass(frozen=True)
class StepValue:
    """A scalar an optimizer computes once per step, before any of its updates:
    `const <type> <name> = <fn>(<args>);`, or `= <args[0]>` when fn is None."""

    type: str  # "float" | "int"
    name: str
    fn: str | None
    args: tuple


@dataclass(frozen=True)
class Update:
    """The operands of one optimizer update, as kernel arguments the binding places but never looks
    into: a whole trainable array (optimizer_step) or one parameter (a fused update). operand is
    (size,) with grad (G,), or (rows, A, cols, B) with grad () for a gradient the update makes as the
    outer product of A and B (suffix "_outer": the kernel name's variant for it)."""

    operand: tuple
    grad: tuple
    weights: object
    state: tuple  # one per state slot, in slot order
    lr: object
    suffix: str = ""


@dataclass(frozen=True)
class OptimizerDef:
    """An optimizer's binding, from its op block: hyper, its hyperparameters with their defaults
    (whose types the values take); slots(h), its per-parameter state buffers in checkpoint order;
    step_values(h), scalars each step computes once; update(Update, h), the kernel call; check(h),
    why the hyperparameters cannot go together (None when they can)."""

    hyper: dict
    slots: Callable[[dict], tuple[str, ...]]
    step_values: Callable[[dict], list[StepValue]]
    update: Callable[[Update, dict], Call]
    check: Callable[[dict], str | None] | None = None


@dataclass(frozen=True)
class OpDef:
    op: str
    domain: str
    kernel: Callable[[KernelCtx, Node], list[Call]]
    grad: Callable | None  # (GradCtx, node, output grads) -> one entry per input, None = no gradient
    const_inputs: frozenset[int]  # inputs that must be known at compile time (axes, shapes, bounds)
    index_inputs: frozenset[int]  # inputs that may be integer model inputs fed at run time (token ids)
    shape: Callable[[Graph, Node], list[tuple[int, ...]]] | None  # our own ops only; ONNX ops use onnx's
    reference: type[OpRun] | None  # our own ops only: the Python implementation tests execute
    # (graph, node, index, training) -> the node as the training or inference graph runs it,
    # for ops that behave differently in the two (Dropout, BatchNormalization).
    variant: Callable[[Graph, Node, int, bool], Node] | None
    # node -> {input slot: output slot}: inputs that are mutable state (BatchNormalization's running
    # statistics), and the outputs holding their new values after a training step.
    state: Callable[[Node], dict[int, int]] | None
    # Input slots whose bytes output 0 may take over when that input dies at this node: the
    # kernel reads each element of them before writing the same element of the output (or, for an
    # output smaller than the input, before overwriting it: ConvGradXInPlace).
    inplace: tuple[int, ...] = ()
    # Our own ops' output dtypes where not float32 (ReLU's bit mask is uint32 words).
    dtypes: tuple[type, ...] = ()
    # Computes what a gradient rule keeps of forward values, in fewer bytes than they take (ReLU's
    # bit mask): the driver runs it in the forward pass as soon as its inputs exist, so they need
    # not stay alive until the backward pass, and recomputation keeps its result.
    residual: bool = False
    # The kernel also takes integer and bool tensors (each an int32_t in the C) at any input or
    # output, picking its kernel by dtype; other ops compute float32 (integers only at index_inputs).
    integer: bool = False
    # Integer input slots that take a float gradient all the same: a quantized tensor, which
    # quantization-aware training differentiates straight through (ops/quantize.py).
    straight_through: tuple[int, ...] = ()
    # Optimizer ops (ET_DOMAIN): the update's binding, in place of `kernel`.
    optimizer: OptimizerDef | None = None
    # Constant input slots kept in flash in their own width (an int8 layer's weights), where other
    # integer constants are int32_t.
    narrow_inputs: tuple[int, ...] = ()


REGISTRY: dict[tuple[str, str], OpDef] = {}


def op(name: str, *, domain: str = "", const_inputs=(), index_inputs=()):
    """Register the class body's `kernel`, `grad`, `shape` and `reference` as op `name`."""

    def register(cls):
        reference = getattr(cls, "reference", None)
        REGISTRY[(domain, name)] = OpDef(
            op=name,
            domain=domain,
            kernel=getattr(cls, "kernel", None),
            grad=getattr(cls, "grad", None),
            const_inputs=frozenset(const_inputs),
            index_inputs=frozenset(index_inputs),
            shape=getattr(cls, "shape", None),
            reference=_reference_op(name, reference) if reference else None,
            variant=getattr(cls, "variant", None),
            state=getattr(cls, "state", None),
            inplace=tuple(getattr(cls, "inplace", ())),
            dtypes=tuple(getattr(cls, "dtypes", ())),
            residual=bool(getattr(cls, "residual", False)),
            integer=bool(getattr(cls, "integer", False)),
            straight_through=tuple(getattr(cls, "straight_through", ())),
            optimizer=_optimizer(cls),
            narrow_inputs=tuple(getattr(cls, "narrow_inputs", ())),
        )
        return cls

    return register


def _optimizer(cls) -> OptimizerDef | None:
    if not hasattr(cls, "update"):
        return None
    return OptimizerDef(
        hyper=dict(cls.hyper),
        slots=cls.slots,
        step_values=getattr(cls, "step_values", lambda h: []),
        update=cls.update,
        check=getattr(cls, "check", None),
    )


def lookup(node: Node) -> OpDef | None:
    return REGISTRY.get((node.domain, node.op))


def require(node: Node) -> OpDef:
    """The block of `node`'s op, past the frontend, which admits registered ops only."""
    spec = lookup(node)
    if spec is None:
        raise EdgetrainError(
            f"node '{node.name}': op {node.domain + '.' if node.domain else ''}{node.op} is not registered"
        )
    return spec


def optimizers() -> dict[str, OptimizerDef]:
    """Every registered optimizer, by op name, in order of registration."""
    return {d.op: d.optimizer for d in REGISTRY.values() if d.optimizer is not None}


def _reference_op(name: str, fn: Callable) -> type[OpRun]:
    """Wrap a NumPy function `fn(*inputs, **attributes) -> tuple` as an onnx.reference op."""

    def _run(self, *inputs, **attrs):  # onnx.reference passes the node's attributes by name
        return tuple(fn(*inputs, **attrs))

    return type(name, (OpRun,), {"op_domain": ET_DOMAIN, "_run": _run})


def reference_ops() -> list[type[OpRun]]:
    return [d.reference for d in REGISTRY.values() if d.reference is not None]


# Helpers shared by op blocks.


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def broadcast_strides(shape, out_shape) -> tuple[int, ...]:
    """Element strides of a contiguous `shape` read as `out_shape` (0 on broadcast axes)."""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    return tuple(
        0 if dim == 1 and out != 1 else s for dim, out, s in zip(padded, out_shape, contiguous_strides(padded))
    )


def merged_axes(shape, *strides) -> tuple[tuple[int, ...], ...]:
    """`shape` and each operand's `strides` with neighbouring axes that every operand reads as one
    run merged (and unit axes dropped), so a broadcast loop's innermost axis is as long as it can
    be: (1, C, H, W) against a per-channel (1, C, 1, 1) becomes (C, H*W). Returns (shape, *strides)."""
    axes = [(dim, *(s[d] for s in strides)) for d, dim in enumerate(shape) if dim != 1] or [(1, *(0 for _ in strides))]
    merged = [axes[0]]
    for dim, *inner in axes[1:]:
        outer_dim, *outer = merged[-1]
        if all(o == i * dim for o, i in zip(outer, inner)):
            merged[-1] = (outer_dim * dim, *inner)
        else:
            merged.append((dim, *inner))
    return tuple(zip(*merged))


def at_least_1d(shape) -> tuple[int, ...]:
    """Scalars go to the C kernels as one-element vectors."""
    return tuple(shape) or (1,)


def split_axis(shape, axis: int) -> tuple[int, int, int]:
    """View `shape` as [outer, shape[axis], inner]."""
    axis = axis % len(shape)
    return (int(np.prod(shape[:axis], dtype=np.int64)), shape[axis], int(np.prod(shape[axis + 1 :], dtype=np.int64)))
