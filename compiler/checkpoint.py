"""The checkpoint format, shared byte for byte with the generated C (`save_checkpoint` /
`load_checkpoint` / `export_parameters` in templates/model.c.j2). Little-endian throughout:

    "ETCK"  u16 version  u16 contents  u64 fingerprint  u32 state_slots  u32 optimizer_step
    u32 dropout_counter  f32 learning_rate  u32 n_params  u32 table_bytes
    table: per tensor  u16 name_len, name, u8 kind (0 frozen, 1 trainable, 2 buffer), u8 rank, u32 dims[rank]
    data: the float32 values of every stored tensor, in table order
    optimizer state: per state slot (0 when saved without it), per trainable parameter, float32 values
    u32 n_properties; per property  u16 key_len, key, u8 kind (0 int64, 1 float64, 2 str), value
        (str: u32 byte length + UTF-8)
    u32 CRC-32 of everything before it

`contents` says which tensors carry values: 0 all of them; NOMINAL none (the table alone, like
ONNX Runtime's nominal checkpoint: an app ships without weights and takes the compiled-in ones or
receives real ones later); NO_FROZEN all but the frozen ones, which the compiled model already
holds (the export blob a device sends for merging into the inference model). A full checkpoint
reads the same whether its second field is taken as u32 version 1 or as u16 version + u16 0.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"ETCK"
FROZEN, TRAINABLE, BUFFER = 0, 1, 2  # tensor kinds: buffers are state a training step updates (BN statistics)
VERSION = 1
MAX_FLOATS = 2**29  # 2 GiB of float32: edgetrain's limit on any tensor (frontend/validate.py)
NOMINAL, NO_FROZEN = 1, 2  # `contents` flags
HEADER = struct.Struct("<4sHHQIIIfII")


class CheckpointError(ValueError):
    """A checkpoint that is truncated, corrupt, or of another format version."""


@dataclass
class CheckpointData:
    fingerprint: int | None  # None: a foreign checkpoint's (ONNX Runtime's carry none)
    names: list[str]
    kinds: list[int]
    arrays: list[np.ndarray]
    optimizer_state: list[list[np.ndarray]] | None = None  # [slot][trainable parameter]; None = not saved
    step: int = 0
    counter: int = 0
    learning_rate: float = 0.0
    properties: dict = field(default_factory=dict)
    contents: int = 0  # NOMINAL / NO_FROZEN: the tensors without stored values decode as zeros

    def stored(self, kind: int) -> bool:
        """Whether tensors of `kind` carry their values in this checkpoint."""
        return not self.contents & NOMINAL and not (kind == FROZEN and self.contents & NO_FROZEN)


def table_bytes(names, kinds, shapes) -> bytes:
    out = bytearray()
    for name, kind, shape in zip(names, kinds, shapes):
        raw = name.encode()
        out += struct.pack("<H", len(raw)) + raw + struct.pack("<BB", kind, len(shape))
        out += struct.pack(f"<{len(shape)}I", *shape)
    return bytes(out)


def encode(ck: CheckpointData) -> bytes:
    table = table_bytes(ck.names, ck.kinds, [a.shape for a in ck.arrays])
    slots = len(ck.optimizer_state or [])
    if ck.contents & ~(NOMINAL | NO_FROZEN) or (slots and ck.contents & NOMINAL):
        raise ValueError(f"invalid checkpoint contents {ck.contents} with {slots} optimizer state slots")
    out = bytearray(
        HEADER.pack(
            MAGIC,
            VERSION,
            ck.contents,
            ck.fingerprint,
            slots,
            ck.step,
            ck.counter,
            ck.learning_rate,
            len(ck.names),
            len(table),
        )
    )
    out += table
    for array, kind in zip(ck.arrays, ck.kinds):
        if ck.stored(kind):
            out += np.ascontiguousarray(array, dtype="<f4").tobytes()
    for slot in ck.optimizer_state or []:
        for array in slot:
            out += np.ascontiguousarray(array, dtype="<f4").tobytes()
    out += struct.pack("<I", len(ck.properties))
    for key, value in ck.properties.items():
        raw = str(key).encode()
        out += struct.pack("<H", len(raw)) + raw
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"property {key!r} must be int, float or str, not {type(value).__name__}")
        if isinstance(value, int):
            out += struct.pack("<Bq", 0, value)
        elif isinstance(value, float):
            out += struct.pack("<Bd", 1, value)
        else:
            text = value.encode()
            out += struct.pack("<BI", 2, len(text)) + text
    out += struct.pack("<I", zlib.crc32(out))
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise CheckpointError("checkpoint is truncated")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values if len(values) > 1 else values[0]

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CheckpointError("checkpoint is truncated")
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def floats(self, shape) -> np.ndarray:
        count = _count(shape)
        return np.frombuffer(self.raw(4 * count), dtype="<f4").astype(np.float32).reshape(shape)


def _count(shape) -> int:
    """Elements of a shape read from the file; bounded before anything is allocated (a forged
    table could otherwise ask for exabytes)."""
    count = 1
    for d in shape:
        count *= int(d)
    if count > MAX_FLOATS:
        raise CheckpointError(f"checkpoint tensor shape {tuple(shape)} is implausibly large")
    return count


def _zeros(shape) -> np.ndarray:
    _count(shape)
    return np.zeros(shape, np.float32)


def decode(data: bytes) -> CheckpointData:
    """The checkpoint in `data`; anything malformed raises CheckpointError, and nothing else."""
    try:
        return _decode(data)
    except UnicodeDecodeError:
        raise CheckpointError("checkpoint has a name or string property that is not UTF-8") from None


def _decode(data: bytes) -> CheckpointData:
    if len(data) < HEADER.size + 8 or data[:4] != MAGIC:
        raise CheckpointError("not an edgetrain checkpoint")
    if zlib.crc32(data[:-4]) != struct.unpack("<I", data[-4:])[0]:
        raise CheckpointError("checkpoint is corrupt (CRC mismatch)")
    r = _Reader(data[:-4])
    magic, version, contents, fingerprint, slots, step, counter, lr, n_params, n_table = r.take(HEADER.format)
    if version != VERSION:
        raise CheckpointError(f"checkpoint format version {version}; this edgetrain reads version {VERSION}")
    if contents & ~(NOMINAL | NO_FROZEN) or (slots and contents & NOMINAL):
        raise CheckpointError(f"checkpoint has unknown contents flags {contents}")
    names, kinds, shapes = [], [], []
    table_end = r.pos + n_table
    for _ in range(n_params):
        names.append(r.raw(r.take("<H")).decode())
        kind, rank = r.take("<BB")
        if kind not in (FROZEN, TRAINABLE, BUFFER):
            raise CheckpointError(f"checkpoint tensor {names[-1]!r} has unknown kind {kind}")
        kinds.append(kind)
        shapes.append(tuple(int(d) for d in np.atleast_1d(r.take(f"<{rank}I"))) if rank else ())
    if r.pos != table_end:
        raise CheckpointError("checkpoint parameter table is corrupt")
    ck = CheckpointData(fingerprint, names, kinds, [], contents=contents)
    arrays = [r.floats(shape) if ck.stored(kind) else _zeros(shape) for shape, kind in zip(shapes, kinds)]
    trainable_shapes = [s for s, k in zip(shapes, kinds) if k == TRAINABLE]
    state = [[r.floats(s) for s in trainable_shapes] for _ in range(slots)] if slots else None
    properties = {}
    for _ in range(r.take("<I")):
        key = r.raw(r.take("<H")).decode()
        kind = r.take("<B")
        if kind == 0:
            properties[key] = r.take("<q")
        elif kind == 1:
            properties[key] = r.take("<d")
        elif kind == 2:
            properties[key] = r.raw(r.take("<I")).decode()
        else:
            raise CheckpointError(f"checkpoint property {key!r} has unknown kind {kind}")
    if r.pos != len(r.data):
        raise CheckpointError("checkpoint has trailing bytes")
    return CheckpointData(fingerprint, names, kinds, arrays, state, step, counter, lr, properties, contents)


def adopt(foreign: CheckpointData, template: CheckpointData) -> CheckpointData:
    """`foreign` (another trainer's checkpoint, e.g. ONNX Runtime's: no fingerprint, its own order) as
    the checkpoint of the trainer whose own is `template`: the template's table, order and
    fingerprint, every tensor's value taken by name, the optimizer state when both have the same
    slots for every trainable parameter (else none: the trainer starts it, and the step count, afresh),
    the step, learning rate and properties. A frozen value must equal the one compiled into the trainer."""
    values = dict(zip(foreign.names, foreign.arrays))
    missing = [n for n in template.names if n not in values]
    if missing:
        raise CheckpointError(f"the checkpoint lacks {_listed(missing)}, which the trainer needs")
    misshaped = [
        f"{n!r} {values[n].shape} (the trainer's {a.shape})"
        for n, a in zip(template.names, template.arrays)
        if values[n].shape != a.shape
    ]
    if misshaped:
        raise CheckpointError(f"the checkpoint's shapes differ: {', '.join(misshaped)}")
    if foreign.contents & NOMINAL:
        return CheckpointData(
            template.fingerprint,
            list(template.names),
            list(template.kinds),
            [np.zeros_like(a) for a in template.arrays],
            contents=NOMINAL,
            learning_rate=foreign.learning_rate or template.learning_rate,
            properties=dict(foreign.properties),
        )
    changed = [
        n
        for n, k, a in zip(template.names, template.kinds, template.arrays)
        if k == FROZEN and template.stored(FROZEN) and not np.array_equal(values[n], a)
    ]
    if changed:
        raise CheckpointError(
            f"the checkpoint's {_listed(changed)} differ from the frozen values compiled into "
            "the trainer (compile it from the model with the checkpoint's weights)"
        )
    state = _moments(foreign, template, values)
    step = foreign.step if state is not None or not template.optimizer_state else 0
    return CheckpointData(
        template.fingerprint,
        list(template.names),
        list(template.kinds),
        [np.array(values[n], np.float32) for n in template.names],
        state,
        int(step),
        0,
        float(foreign.learning_rate or template.learning_rate),
        dict(foreign.properties),
    )


def _moments(foreign: CheckpointData, template: CheckpointData, values) -> list | None:
    """The foreign optimizer state in the template's order of trainable parameters, or None where its
    slots are not the template's."""
    ours = [n for n, k in zip(template.names, template.kinds) if k == TRAINABLE]
    theirs = {n: i for i, n in enumerate(n for n, k in zip(foreign.names, foreign.kinds) if k == TRAINABLE)}
    if not foreign.optimizer_state or len(foreign.optimizer_state) != len(template.optimizer_state or []):
        return None
    if any(n not in theirs for n in ours):
        return None
    state = [[np.array(slot[theirs[n]], np.float32) for n in ours] for slot in foreign.optimizer_state]
    if any(s.shape != values[n].shape for row in state for s, n in zip(row, ours)):
        raise CheckpointError("the checkpoint's optimizer state does not match its parameters' shapes")
    return state


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:8])
    return f"{shown}{f' and {len(names) - 8} more' if len(names) > 8 else ''}"
