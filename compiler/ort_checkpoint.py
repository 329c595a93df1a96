"""ONNX Runtime training checkpoints (the flatbuffers file `CheckpointState.save_checkpoint` writes in
ORT 1.19), read into edgetrain's CheckpointData (which checkpoint.adopt maps by name onto a trainer).

The file follows ORT's public schema (ort_training_checkpoint.fbs, with the Tensor table of ort.fbs).
It is read field slot by field slot through the flatbuffers package's Table API, every offset checked
against the buffer first: the file may come from anywhere, and flatbuffers itself checks nothing.

    Checkpoint      version:int32  module_state:ModuleState  optimizer_groups:[OptimizerGroup]
                    property_bag:PropertyBag                                    (file identifier "ODTC")
    ModuleState     requires_grad_params:[Tensor]  frozen_params:[Tensor]  is_nominal_state:bool
                    has_external_data:bool
    OptimizerGroup  group_name:string  step:int64  initial_learning_rate:float
                    optimizer_states:[ParameterOptimizerState]
    ParameterOptimizerState  param_name:string  momentums:[Tensor]
    PropertyBag     ints:[IntProperty]  floats:[FloatProperty]  strings:[StringProperty]  (name, value)
    Tensor          name:string  doc_string:string  dims:[int64]  data_type:int32  raw_data:[uint8]
                    string_data:[string]  external_data_offset:int64 = -1

ORT keeps a checkpoint's tensors in a second file, `<checkpoint>.data`, once they pass about 1.8 GB;
`load` reads it from beside the checkpoint and `read` takes its bytes as `external_data`.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from .checkpoint import FROZEN, MAX_FLOATS, NOMINAL, TRAINABLE, CheckpointData, CheckpointError

IDENTIFIER = b"ODTC"
KNOWN_VERSION = 2  # what ORT 1.19.2 writes; older versions lack fields, which read as their defaults
# ORT's AdamW keeps the first moment as "momentum0" and the second as "momentum1" (exp_avg, exp_avg_sq).
# ONNX TensorProto data types that have a float32 value, with their numpy types.
DTYPES = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}
DTYPE_NAMES = {
    8: "string",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
    17: "float8e4m3fn",
    18: "float8e4m3fnuz",
    19: "float8e5m2",
    20: "float8e5m2fnuz",
}


def _flatbuffers():
    try:
        import flatbuffers
        import flatbuffers.table
    except ImportError:
        raise CheckpointError(
            "reading ONNX Runtime checkpoints needs the flatbuffers package: pip install flatbuffers"
        ) from None
    return flatbuffers


def is_ort_checkpoint(raw: bytes) -> bool:
    """Whether `raw` carries ORT's checkpoint file identifier (bytes 4 to 8 of a flatbuffer)."""
    return len(raw) >= 8 and raw[4:8] == IDENTIFIER


class _Table:
    """One table of the buffer, its fields by slot (0 = the schema's first field)."""

    def __init__(self, fb, buf: memoryview, pos: int):
        self.fb, self.buf = fb, buf
        _need(buf, pos, 4)
        self.tab = fb.table.Table(buf, pos)
        vtable = pos - self.tab.Get(fb.number_types.SOffsetTFlags, pos)
        _need(buf, vtable, 4)
        size = self.tab.Get(fb.number_types.VOffsetTFlags, vtable)
        if size < 4 or size % 2:
            raise CheckpointError("ORT checkpoint is corrupt (a table's field list is malformed)")
        _need(buf, vtable, size)

    def _field(self, slot: int) -> int:
        """The buffer position of field `slot`, or 0 when the table leaves it out (its default)."""
        relative = self.tab.Offset(4 + 2 * slot)
        if relative:
            _need(self.buf, self.tab.Pos + relative, 1)
            return self.tab.Pos + relative
        return 0

    def scalar(self, slot: int, flags, default):
        at = self._field(slot)
        if not at:
            return default
        _need(self.buf, at, flags.bytewidth)
        return self.tab.Get(flags, at)

    def _target(self, at: int) -> int:
        _need(self.buf, at, 4)
        return self.tab.Indirect(at)

    def table(self, slot: int) -> _Table | None:
        at = self._field(slot)
        return _Table(self.fb, self.buf, self._target(at)) if at else None

    def _vector(self, slot: int, width: int) -> tuple[int, int]:
        """(position of the first element, element count) of a vector field; (0, 0) when absent."""
        at = self._field(slot)
        if not at:
            return 0, 0
        start = self._target(at)
        _need(self.buf, start, 4)
        count = self.tab.Get(self.fb.number_types.UOffsetTFlags, start)
        _need(self.buf, start + 4, count * width)  # bounds the count before any loop over it
        return start + 4, count

    def tables(self, slot: int) -> list[_Table]:
        start, count = self._vector(slot, 4)
        return [_Table(self.fb, self.buf, self._target(start + 4 * j)) for j in range(count)]

    def raw(self, slot: int) -> bytes:
        start, count = self._vector(slot, 1)
        return bytes(self.buf[start : start + count])

    def int64s(self, slot: int) -> list[int]:
        start, count = self._vector(slot, 8)
        return list(struct.unpack_from(f"<{count}q", self.buf, start)) if count else []

    def string(self, slot: int) -> str:
        at = self._field(slot)
        if not at:
            return ""
        start = self._target(at)
        _need(self.buf, start, 4)
        length = self.tab.Get(self.fb.number_types.UOffsetTFlags, start)
        _need(self.buf, start + 4, length)
        return self.tab.String(at).decode()


def _need(buf: memoryview, pos: int, size: int) -> None:
    if pos < 0 or size < 0 or pos + size > len(buf):
        raise CheckpointError("ORT checkpoint is truncated or corrupt (an offset points outside the file)")


def load(path: str | os.PathLike) -> CheckpointData:
    """read() of the ORT checkpoint file at `path`, with `<path>.data` when ORT put its tensors there."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        external = path.with_name(path.name + ".data")
        return read(raw, external.read_bytes() if external.exists() else None)
    except OSError as exc:
        raise CheckpointError(f"cannot read ORT checkpoint {exc.filename}: {exc.strerror}") from None


def read(raw: bytes, external_data: bytes | None = None) -> CheckpointData:
    """The ORT checkpoint in `raw` as CheckpointData: fingerprint None (a foreign checkpoint, mapped
    by name onto a trainer's own), tensors in ORT's order (its requires_grad parameters TRAINABLE, then
    its frozen ones FROZEN), float32 values, the AdamW moments as edgetrain's slots (exp_avg,
    exp_avg_sq), step, initial learning rate and properties. Anything malformed raises
    CheckpointError, and nothing else does."""
    if not is_ort_checkpoint(raw):
        raise CheckpointError("not an ONNX Runtime checkpoint (no ODTC file identifier)")
    fb = _flatbuffers()
    try:
        return _read(fb, memoryview(bytes(raw)), external_data)
    except CheckpointError:
        raise
    except UnicodeDecodeError:
        raise CheckpointError("ORT checkpoint has a name or string property that is not UTF-8") from None
    except (struct.error, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise CheckpointError(f"ORT checkpoint is corrupt ({exc})") from None


def _read(fb, buf: memoryview, external_data: bytes | None) -> CheckpointData:
    N = fb.number_types
    root = _Table(fb, buf, struct.unpack_from("<I", buf, 0)[0])
    version = root.scalar(0, N.Int32Flags, 0)
    if not 1 <= version <= KNOWN_VERSION:
        raise CheckpointError(
            f"ORT checkpoint format version {version}; edgetrain reads versions 1 to "
            f"{KNOWN_VERSION} (ONNX Runtime 1.19)"
        )
    module = root.table(1)
    if module is None:
        raise CheckpointError("ORT checkpoint has no parameters (no module state)")
    nominal = bool(module.scalar(2, N.BoolFlags, False))
    if module.scalar(3, N.BoolFlags, False) and external_data is None:
        raise CheckpointError(
            "ORT checkpoint keeps its tensors in an external data file (<checkpoint>.data), "
            "which was not given; keep it beside the checkpoint"
        )
    names, kinds, arrays = [], [], []
    for kind, slot in ((TRAINABLE, 0), (FROZEN, 1)):
        for tensor in module.tables(slot):
            name, array = _tensor(tensor, external_data, nominal)
            names.append(name)
            kinds.append(kind)
            arrays.append(array)
    if len(set(names)) != len(names):
        raise CheckpointError("ORT checkpoint names a parameter twice")
    state, step, lr = _optimizer(root.tables(2), names, kinds, arrays, external_data)
    properties = _properties(root.table(3), N)
    return CheckpointData(None, names, kinds, arrays, state, step, 0, lr, properties, NOMINAL if nominal else 0)


def _tensor(tensor: _Table, external_data: bytes | None, nominal: bool) -> tuple[str, np.ndarray]:
    N = tensor.fb.number_types
    name = tensor.string(0)
    dims = tensor.int64s(2)
    if any(d < 0 for d in dims):
        raise CheckpointError(f"ORT checkpoint tensor {name!r} has a negative dimension {dims}")
    count = 1
    for d in dims:
        count *= d
        if count > MAX_FLOATS:
            raise CheckpointError(f"ORT checkpoint tensor {name!r} has an implausibly large shape {dims}")
    code = tensor.scalar(3, N.Int32Flags, 0)
    if code not in DTYPES:
        kind = DTYPE_NAMES.get(code, f"unknown data type {code}")
        raise CheckpointError(f"ORT checkpoint tensor {name!r} holds {kind} values, which edgetrain does not train")
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    if nominal:  # ORT's nominal checkpoint: names and shapes only
        return name, np.zeros(dims, np.float32)
    offset = tensor.scalar(6, N.Int64Flags, -1)
    size = count * dtype.itemsize
    if offset >= 0:
        if external_data is None or offset + size > len(external_data):
            raise CheckpointError(f"ORT checkpoint tensor {name!r} lies outside its external data file")
        data = external_data[offset : offset + size]
    else:
        data = tensor.raw(4)
    if len(data) != size:
        raise CheckpointError(f"ORT checkpoint tensor {name!r} has {len(data)} bytes of data for shape {dims}")
    values = np.frombuffer(data, dtype).reshape(dims)
    converted = values.astype(np.float32)
    if dtype.kind in "iu" and not np.array_equal(converted.astype(dtype), values):
        raise CheckpointError(f"ORT checkpoint tensor {name!r} has integers that float32 cannot hold exactly")
    return name, converted


def _optimizer(groups: list[_Table], names, kinds, arrays, external_data):
    """(optimizer state [slot][trainable parameter], step, learning rate) of ORT's one optimizer group."""
    if not groups:
        return None, 0, 0.0
    if len(groups) > 1:
        raise CheckpointError(f"ORT checkpoint has {len(groups)} optimizer groups; edgetrain has one")
    group = groups[0]
    N = group.fb.number_types
    step = group.scalar(1, N.Int64Flags, 0)
    lr = group.scalar(2, N.Float32Flags, 0.0)
    if not 0 <= step < 2**32:
        raise CheckpointError(f"ORT checkpoint's optimizer step {step} is out of range")
    moments = {}
    for entry in group.tables(3):
        param = entry.string(0)
        found = dict(_tensor(t, external_data, False) for t in entry.tables(1))
        expected = [f"momentum{i}" for i in range(len(found))]
        if sorted(found) != sorted(expected):
            raise CheckpointError(f"ORT checkpoint's optimizer state of {param!r} has unknown entries {sorted(found)}")
        moments[param] = [found[n] for n in expected]
    trainable = [(n, a) for n, k, a in zip(names, kinds, arrays) if k == TRAINABLE]
    missing = [n for n, _ in trainable if n not in moments]
    if missing or len(moments) != len(trainable):
        raise CheckpointError(
            "ORT checkpoint's optimizer state does not cover its trainable parameters "
            f"(missing {missing or 'none'}, extra {sorted(set(moments) - set(names)) or 'none'})"
        )
    slots = {len(m) for m in moments.values()}
    if len(slots) > 1:
        raise CheckpointError("ORT checkpoint's parameters have different numbers of optimizer moments")
    count = slots.pop() if slots else 0
    for name, array in trainable:
        if any(m.shape != array.shape for m in moments[name]):
            raise CheckpointError(f"ORT checkpoint's optimizer state of {name!r} does not have its shape")
    state = [[moments[n][i] for n, _ in trainable] for i in range(count)] if count else None
    return state, int(step), float(lr)


def _properties(bag: _Table | None, N) -> dict:
    if bag is None:
        return {}
    properties = {}
    for slot, read_value in (
        (0, lambda p: p.scalar(1, N.Int64Flags, 0)),
        (1, lambda p: p.scalar(1, N.Float32Flags, 0.0)),
        (2, lambda p: p.string(1)),
    ):
        for prop in bag.tables(slot):
            properties[prop.string(0)] = read_value(prop)
    return properties
