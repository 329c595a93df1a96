"""Checks that refuse a malformed or hostile model file with one line naming the problem, before
any pass trusts the file: how it is read (external data stays inside the model's directory), its
graph structure (every value produced once, before it is read), dtypes, and sizes.

Size limit: no tensor, and no trainer's planned RAM (arena, parameters, gradients, optimizer
state and buffers), may exceed MAX_BYTES = 2 GiB. That keeps every element count inside the C
kernels' `int` and every byte count inside a 32-bit `size_t`, so nothing in the generated C can
overflow."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, helper, numpy_helper

from ..errors import EdgetrainError
from .imports import not_parameters, readers_of

MAX_BYTES = 2**31
FLOAT_TYPES = {
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16",
}


def read_model(path: str | os.PathLike) -> onnx.ModelProto:
    """The model at `path`, with its external data loaded only from inside its own directory."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise EdgetrainError(f"model file not found: {path}") from None
    except OSError as exc:
        raise EdgetrainError(f"cannot read model file {path}: {exc.strerror}") from None
    if not raw:
        raise EdgetrainError(f"model file {path} is empty")
    try:
        proto = onnx.load_from_string(raw)
    except Exception:  # protobuf's DecodeError says no more than this
        raise EdgetrainError(
            f"cannot read ONNX model {path}: not an ONNX protobuf (truncated or corrupt file)"
        ) from None
    if not proto.HasField("graph"):
        raise EdgetrainError(f"cannot read ONNX model {path}: the file holds no graph (not an ONNX model?)")
    external = [t for t in external_data_helper._get_all_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]
    base = path.resolve().parent
    for tensor in external:
        _check_external(tensor, base)
    if external:
        try:
            external_data_helper.load_external_data_for_model(proto, str(base))
        except Exception as exc:
            raise EdgetrainError(f"cannot load external data: {one_line(exc)}") from None
    return proto


def _check_external(tensor: onnx.TensorProto, base: Path) -> None:
    info = {e.key: e.value for e in tensor.external_data}
    what = f"initializer {tensor.name!r} keeps its data in"
    location = info.get("location", "")
    if not location:
        raise EdgetrainError(f"initializer {tensor.name!r} is marked external but names no file")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        raise EdgetrainError(f"{what} {location!r}: external data must be a relative path inside the model's directory")
    file = (base / location).resolve()  # resolves '..' and symbolic links alike
    if file != base and base not in file.parents:
        raise EdgetrainError(f"{what} {location!r}, outside the model's directory; refused")
    if not file.is_file():
        raise EdgetrainError(f"{what} {location!r}, which does not exist next to the model")
    try:
        offset, length = int(info.get("offset", 0)), info.get("length")
        length = None if length is None else int(length)
    except ValueError:
        raise EdgetrainError(f"initializer {tensor.name!r} has a non-numeric external data offset or length") from None
    available = file.stat().st_size - offset
    if offset < 0 or available < 0 or (length is not None and not 0 <= length <= available):
        raise EdgetrainError(
            f"{what} {location!r} at offset {offset} with length {length}, past the end of "
            f"that {file.stat().st_size}-byte file"
        )


def check_model(proto: onnx.ModelProto) -> None:
    """Structure, dtypes, initializer data and declared sizes of a freshly read model."""
    if proto.ir_version > onnx.IR_VERSION:
        raise EdgetrainError(f"model has IR version {proto.ir_version}; this onnx reads up to {onnx.IR_VERSION}")
    for tensor in external_data_helper._get_all_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:  # read_model loads it: a ModelProto was passed
            raise EdgetrainError(
                f"tensor {tensor.name!r} keeps its data in an external file; pass the model's path "
                "so edgetrain can check where that file is"
            )
    g = proto.graph
    if not g.output:
        raise EdgetrainError("the graph has no outputs")
    _check_dtypes(g, not_parameters(proto))
    _check_weights_present(g)
    _check_initializers(g)
    _check_structure(g)
    _check_names(g)
    for info in list(g.input) + list(g.value_info) + list(g.output):
        dims = info.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            check_tensor_size(info.name, tuple(d.dim_value for d in dims))
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise EdgetrainError(f"invalid ONNX model: {one_line(exc)}") from None


def _check_dtypes(g: onnx.GraphProto, buffers: frozenset[str]) -> None:
    """Refuses values of other float types than float32, but a module's buffer (`buffers`) read only by
    casts to float32 (a bfloat16 normalizer of a float32 model): it folds into a float32
    constant, as the TorchScript exporter's Constant node of the same buffer does."""
    kinds = [(i.name, i.type.WhichOneof("value")) for i in list(g.input) + list(g.output)]
    other = [f"{name!r} is a {kind.removesuffix('_type')}" for name, kind in kinds if kind not in (None, "tensor_type")]
    if other:
        raise EdgetrainError("unsupported value type: " + ", ".join(other) + "; edgetrain computes tensors only")
    typed = [(i.name, i.type.tensor_type.elem_type) for i in list(g.input) + list(g.output)]
    readers = readers_of(g)
    cast_up = {
        name
        for name in buffers
        if readers.get(name)
        and all(
            n.op_type == "Cast" and helper.get_node_attr_value(n, "to") == onnx.TensorProto.FLOAT for n in readers[name]
        )
    }
    typed += [(i.name, i.data_type) for i in g.initializer if i.name not in cast_up]
    bad = [f"{name!r} is {FLOAT_TYPES[t]}" for name, t in typed if t in FLOAT_TYPES]
    if bad:
        raise EdgetrainError(
            "unsupported dtype: "
            + ", ".join(dict.fromkeys(bad))
            + "; edgetrain trains float32 models (convert the model to float32)"
        )


# The leaves of a torch module's state-dict names that hold trained values.
_STATE_LEAVES = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}
_WITHOUT_VALUES = "the model was exported without its parameters (export_params=False); export it with them"


def _state_dict_entry(name: str) -> bool:
    """A name torch gives a module's trained tensor: `fc.weight`, or `weight` for the top module's own."""
    return name.rsplit(".", 1)[-1] in _STATE_LEAVES


def _check_weights_present(g: onnx.GraphProto) -> None:
    """torch's TorchScript exporter with export_params=False writes a module's parameters as graph
    inputs without values, and the model would compile into one that trains nothing, reading its
    weights as data (its dynamo exporter leaves them unprovided, which _check_structure refuses)."""
    if g.initializer:
        return
    named = [i.name for i in g.input if _state_dict_entry(i.name)]
    if named:
        shown = ", ".join(repr(n) for n in named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
        raise EdgetrainError(f"graph inputs {shown} are a module's parameters with no values: {_WITHOUT_VALUES}")


def _check_initializers(g: onnx.GraphProto) -> None:
    for tensor in g.initializer:
        if any(d < 0 for d in tensor.dims):
            raise EdgetrainError(f"initializer {tensor.name!r} has a negative dimension {tuple(tensor.dims)}")
        check_tensor_size(tensor.name, tuple(tensor.dims))
        try:
            array = numpy_helper.to_array(tensor)
        except Exception as exc:
            raise EdgetrainError(
                f"initializer {tensor.name!r} of shape {tuple(tensor.dims)} has unreadable data: {one_line(exc)}"
            ) from None
        if array.shape != tuple(tensor.dims):
            raise EdgetrainError(
                f"initializer {tensor.name!r} holds {array.size} values; its shape "
                f"{tuple(tensor.dims)} needs {int(np.prod(tensor.dims, dtype=object))}"
            )


def _label(node: onnx.NodeProto, index: int) -> str:
    return f"node {(node.name or f'{node.op_type}_{index}')!r} ({node.op_type})"


def _check_structure(g: onnx.GraphProto) -> None:
    """Single assignment and topological order, as the ONNX spec requires."""
    producer: dict[str, str] = {}
    for kind, names in (("graph input", [i.name for i in g.input]), ("initializer", [i.name for i in g.initializer])):
        for name in names:
            if name in producer and not (kind == "initializer" and producer[name] == "graph input"):
                raise EdgetrainError(f"{kind} {name!r} is defined twice")
            producer[name] = kind
    for index, node in enumerate(g.node):
        for name in node.output:
            if not name:
                continue
            if name in producer:
                raise EdgetrainError(
                    f"value {name!r} is produced twice: by {producer[name]} and by {_label(node, index)}"
                )
            producer[name] = _label(node, index)
    available = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    later = set()
    for index, node in enumerate(g.node):
        for name in node.input:
            if name in available:
                continue
            if name not in producer:
                unprovided = f"{_label(node, index)} reads {name!r}, which no node, graph input or initializer provides"
                if not g.initializer and _state_dict_entry(name):
                    unprovided += f": {_WITHOUT_VALUES}"
                raise EdgetrainError(unprovided)
            later.add(index)
        available.update(node.output)
    if later:
        cycle = _cycle(g)
        if cycle:
            raise EdgetrainError("the graph has a cycle through " + " -> ".join(cycle))
        index = min(later)
        node = g.node[index]
        name = next(n for n in node.input if n not in _available_before(g, index))
        raise EdgetrainError(
            f"the graph is not topologically sorted: {_label(node, index)} reads {name!r} before "
            f"{producer[name]} produces it"
        )
    for out in g.output:
        if out.name not in producer:
            raise EdgetrainError(f"graph output {out.name!r} is not produced by any node, input or initializer")


# Names the artifacts derive from a parameter p (training_model.onnx's gradients and updated
# buffers, optimizer_model.onnx's state and outputs), and names the trainer adds itself.
_DERIVED = ("{}_grad", "{}_updated", "{}.updated") + tuple(
    f"{{}}.{slot}{end}" for slot in ("exp_avg", "exp_avg_sq", "momentum_buffer") for end in ("", ".updated")
)
RESERVED = ("dropout_counter",)
MAX_NAME_BYTES = 65535  # the checkpoint stores a parameter name's length in 16 bits


def _check_names(g: onnx.GraphProto) -> None:
    names = {i.name for i in list(g.input) + list(g.output) + list(g.initializer)}
    names |= {o for node in g.node for o in node.output if o}
    for name in RESERVED:
        if name in names:
            raise EdgetrainError(f"the model has a value named {name!r}, a name edgetrain reserves; rename it")
    for tensor in g.initializer:
        if len(tensor.name.encode()) > MAX_NAME_BYTES:
            raise EdgetrainError(
                f"initializer name of {len(tensor.name.encode())} bytes; checkpoints hold names of "
                f"up to {MAX_NAME_BYTES} bytes"
            )
        if tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        for pattern in _DERIVED:
            if pattern.format(tensor.name) in names:
                raise EdgetrainError(
                    f"the model has a value named {pattern.format(tensor.name)!r}, the name the "
                    f"training artifacts give to a tensor derived from parameter {tensor.name!r}; "
                    "rename it"
                )


def check_prefix(prefix: str) -> None:
    """The C symbol prefix: user text that becomes part of every function name."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", str(prefix)):
        raise EdgetrainError(f"prefix {prefix!r} is not a C identifier of at most 41 characters")


def _available_before(g: onnx.GraphProto, index: int) -> set[str]:
    names = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    for node in g.node[:index]:
        names.update(node.output)
    return names


def _cycle(g: onnx.GraphProto) -> list[str]:
    """The nodes of one cycle, or [] when the nodes can be ordered (Kahn's algorithm, then a walk
    through what is left)."""
    made_by = {name: i for i, node in enumerate(g.node) for name in node.output if name}
    deps = {i: {made_by[n] for n in node.input if n in made_by} for i, node in enumerate(g.node)}
    left = set(deps)
    progress = True
    while progress:
        ready = {i for i in left if not deps[i] & left}
        left -= ready
        progress = bool(ready)
    if not left:
        return []
    walk, at = [], min(left)
    while at not in walk:
        walk.append(at)
        at = min(deps[at] & left)
    loop = walk[walk.index(at) :] + [at]
    return [_label(g.node[i], i) for i in reversed(loop)]


def check_tensor_size(name: str, shape: tuple[int, ...]) -> None:
    size = 4
    for d in shape:
        size *= int(d)  # Python ints: a product that would overflow in C is just large here
    if size > MAX_BYTES:
        raise EdgetrainError(
            f"tensor {name!r} of shape {tuple(shape)} needs {_bytes(size)}; edgetrain's limit is "
            f"{_bytes(MAX_BYTES)} per tensor and per trainer"
        )


def check_ram(ram_bytes: int) -> None:
    if ram_bytes > MAX_BYTES:
        raise EdgetrainError(
            f"the trainer needs {_bytes(ram_bytes)} of RAM; edgetrain's limit is {_bytes(MAX_BYTES)}"
            " (use a smaller batch size or freeze parameters)"
        )


def _bytes(n: int) -> str:
    for unit, scale in (("EiB", 2**60), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def one_line(exc: BaseException) -> str:
    """An exception's message as one line: onnx's checker and shape inference add context lines."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("==> Context")]
    return " ".join(lines)[:500] or type(exc).__name__
