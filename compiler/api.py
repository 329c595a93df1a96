"""The training API, shaped like ONNX Runtime's on-device training API (onnxruntime.training.api)
so its users can move over by changing imports. Every number is computed by the generated C;
Python only moves buffers."""

from __future__ import annotations

import json
import numbers
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from . import checkpoint
from .artifacts import STAND_IN, specialize
from .checkpoint import CheckpointError
from .export import merge_parameter_blob
from .files import write_artifact, write_atomic
from .host import load_library
from .optim.optimizers import in_range

__all__ = [
    "CheckpointError",
    "CheckpointState",
    "LinearLRScheduler",
    "Module",
    "NonFiniteError",
    "Optimizer",
    "OrtValue",
    "Parameter",
    "Parameters",
    "Properties",
    "merge_parameter_blob",
]

OK, BAD_ARGUMENT, NON_FINITE, CORRUPT_CHECKPOINT, WRONG_MODEL, BUFFER_TOO_SMALL = range(6)


class NonFiniteError(ArithmeticError):
    """The step produced NaN or Inf; the trainer applied nothing."""


def _check(status: int, what: str) -> None:
    if status == OK:
        return
    if status == NON_FINITE:
        raise NonFiniteError(f"{what}: the loss or a gradient is not finite; nothing was updated")
    if status == CORRUPT_CHECKPOINT:
        raise CheckpointError(f"{what}: checkpoint is corrupt or truncated")
    if status == WRONG_MODEL:
        raise CheckpointError(f"{what}: checkpoint belongs to another model")
    if status == BUFFER_TOO_SMALL:
        raise ValueError(f"{what}: buffer has the wrong size")
    raise ValueError(f"{what}: invalid argument (status {status})")


class _Shape(tuple):
    """A shape that reads as numpy's tuple and, called, as ONNX Runtime's OrtValue.shape() list."""

    def __call__(self) -> list[int]:
        return list(self)


class OrtValue(np.ndarray):
    """ONNX Runtime's OrtValue for CPU tensors: an ndarray (so code written for edgetrain's arrays
    keeps working) with OrtValue's methods. `shape` is both numpy's tuple and ORT's shape()."""

    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        _cpu_only(device_type)
        return np.asarray(numpy_obj).view(OrtValue)  # shares the array's memory, as ORT's does

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        _cpu_only(device_type)
        return np.zeros(shape, element_type).view(OrtValue)

    @property
    def shape(self) -> _Shape:
        return _Shape(np.ndarray.shape.__get__(self))

    @shape.setter
    def shape(self, value) -> None:
        np.ndarray.shape.__set__(self, value)  # type: ignore[attr-defined]  # numpy's stubs: an overload

    def numpy(self) -> np.ndarray:
        return self.view(np.ndarray).copy()

    def data_type(self) -> str:
        name = onnx.TensorProto.DataType.Name(onnx.helper.np_dtype_to_tensor_dtype(self.dtype))
        return f"tensor({name.lower()})"

    def element_type(self) -> type:
        return self.dtype.type

    def device_name(self) -> str:
        return "cpu"

    def has_value(self) -> bool:
        return True

    def is_tensor(self) -> bool:
        return True

    def is_sparse_tensor(self) -> bool:
        return False

    def is_tensor_sequence(self) -> bool:
        return False

    def data_ptr(self) -> int:
        return self.ctypes.data

    def update_inplace(self, np_arr) -> None:
        self[...] = np_arr


def _cpu_only(device: str) -> None:
    if str(device).split(":")[0].lower() != "cpu":
        raise ValueError(f"device {device!r}: the host trainer runs on the CPU")


def _ortvalue_class(values) -> type[Any] | None:
    """The class of `values` if they are all OrtValues of one class (edgetrain's, or ONNX Runtime's)."""
    kind = type(values[0]) if values else None
    if kind is None or kind is np.ndarray:  # the usual case, answered first: at batch 1, a step's Python counts
        return None
    if not hasattr(kind, "ortvalue_from_numpy") or not all(isinstance(v, kind) for v in values):
        return None
    return kind


def _as_array(value) -> np.ndarray:
    """An ndarray from an ndarray, edgetrain's OrtValue or ONNX Runtime's own OrtValue (its .numpy())."""
    if isinstance(value, np.ndarray):
        return value.view(np.ndarray) if isinstance(value, OrtValue) else value
    if callable(getattr(value, "numpy", None)):
        return np.asarray(value.numpy())
    return np.asarray(value)


# ONNX Runtime's messages for a nominal checkpoint's state used before its parameters are loaded.
NOT_LOADED = "Please load the parameter states first"
NOT_ALL_LOADED = "Please load all the parameter states first"
MODEL_NOT_LOADED = "Please load the model parameters first."


class Parameter:
    """A named parameter or buffer. Once a Module is bound, `data` and `grad` are live views of the
    trainer's memory, frozen parameters' data too: the host's build keeps them writable (a device's
    compiles them into flash). `grad` is None for frozen parameters and buffers (and in a
    fused-update build, which keeps no gradients)."""

    def __init__(
        self,
        name: str,
        data: np.ndarray,
        requires_grad: bool,
        grad: np.ndarray | None = None,
        state: CheckpointState | None = None,
    ):
        self.name, self._data, self.requires_grad, self._grad, self._state = name, data, requires_grad, grad, state
        self._integers: np.ndarray | None = None  # a trained weight stored as int8: a view of them
        self._scale = np.float32(0)  # and its scale, shaped to broadcast against them

    def _check_loaded(self, message: str) -> None:
        if self._state is not None and self._state.is_nominal:
            raise RuntimeError(message)

    @property
    def data(self) -> np.ndarray:
        """The values; of a trained weight stored as int8, a read-only copy of scale * integers."""
        self._check_loaded(NOT_LOADED)
        if self._integers is not None:
            values = self._scale * self._integers.astype(np.float32)
            values.flags.writeable = False
            return values
        return self._data

    @data.setter
    def data(self, value) -> None:
        self._check_loaded(NOT_ALL_LOADED)
        value = np.asarray(_as_array(value), dtype=np.float32)
        if value.shape != self._data.shape:
            raise ValueError(f"parameter {self.name!r} expects shape {self._data.shape}, got {value.shape}")
        if self._integers is not None:
            # the nearest point of the weight's grid, as the C's copy_buffer_to_parameters takes it
            if not np.all(np.isfinite(value)):
                raise ValueError(f"parameter {self.name!r} is stored as int8 and takes finite values only")
            self._integers[...] = np.clip(np.rint(value / self._scale), -128, 127).astype(np.int8)
            return
        if not self._data.flags.writeable:
            raise ValueError(f"parameter {self.name!r} is frozen and compiled into the trainer")
        self._data[...] = value

    @property
    def grad(self) -> np.ndarray | None:
        self._check_loaded(NOT_LOADED)
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        self._grad = value

    def __repr__(self) -> str:
        return f"Parameter(name={self.name}, shape={self._data.shape}, requires_grad={self.requires_grad})"


class Parameters:
    """The checkpoint's parameters and buffers by name, with ONNX Runtime's semantics: iterating
    yields (name, Parameter) pairs, `parameters[name] = array` sets the values, len() counts every
    tensor of the state (trainable, frozen and buffers, as a PyTorch state_dict does). keys(),
    values() and items() are there too, as for a dict."""

    def __init__(self, state: CheckpointState, entries: dict[str, Parameter]):
        self._state, self._entries = state, entries

    def __getitem__(self, name: str) -> Parameter:
        if name not in self._entries:
            raise KeyError(f"Parameter {name} not found.")
        if self._state.is_nominal:
            raise RuntimeError(NOT_LOADED)
        return self._entries[name]

    def __setitem__(self, name: str, value) -> None:
        if name not in self._entries:
            raise KeyError(f"Parameter {name} not found.")
        if self._state.is_nominal:
            raise RuntimeError(NOT_ALL_LOADED)
        self._entries[name].data = value

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(list(self._entries.items()))

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self):
        return self._entries.keys()

    def values(self):
        return self._entries.values()

    def items(self):
        return self._entries.items()

    def get(self, name: str, default=None):
        return self[name] if name in self else default

    def __repr__(self) -> str:
        return f"Parameters({list(self._entries)})"


class Properties(dict):
    """User properties (int, float or str), saved in the checkpoint. A dict, except that iterating
    yields (name, value) pairs, as ONNX Runtime's Properties does."""

    def __setitem__(self, name: str, value) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"property {name!r} must be int, float or str, not {type(value).__name__}")
        super().__setitem__(name, value)

    def __iter__(self):
        return iter(list(self.items()))


class CheckpointState:
    """Parameters, optimizer state and user properties, saved in edgetrain's checkpoint format.

    A nominal checkpoint (`is_nominal`) has the parameter table only. As in ONNX Runtime, its
    parameters cannot be read or set, and a Module bound to it neither trains, evaluates nor gives
    its parameters, until real ones arrive through Module.copy_buffer_to_parameters (the frozen
    parameters and buffers are compiled into the trainer).

    load_checkpoint also reads ONNX Runtime's checkpoint files (edgetrain.ort_checkpoint): a Module
    then maps them by name onto its own trainer (Module.__init__)."""

    def __init__(self, data: checkpoint.CheckpointData):
        self._module: Module | None = None
        self.is_nominal = bool(data.contents & checkpoint.NOMINAL)
        self.properties = Properties(data.properties)
        self._adopt(data)

    def _adopt(self, data: checkpoint.CheckpointData) -> None:
        self._data = data
        entries = {}
        for name, kind, array in zip(data.names, data.kinds, data.arrays):
            view = np.array(array, dtype=np.float32)
            entries[name] = Parameter(name, view, kind == checkpoint.TRAINABLE, state=self)
        self.parameters = Parameters(self, entries)
        self._kinds = dict(zip(data.names, data.kinds))

    @staticmethod
    def load_checkpoint(path: str | os.PathLike) -> CheckpointState:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror}") from None
        foreign = _ort_checkpoint()
        if foreign is not None and foreign.is_ort_checkpoint(raw):
            return CheckpointState(foreign.read(raw))
        return CheckpointState(checkpoint.decode(raw))

    @staticmethod
    def save_checkpoint(state: CheckpointState, path: str | os.PathLike, include_optimizer_state: bool = False) -> None:
        """Written durably (edgetrain.files.write_atomic): a crash, a kill or a full disk during the save
        leaves the previous checkpoint at `path`, whole."""
        data = checkpoint.encode(state._snapshot(include_optimizer_state))
        try:
            write_atomic(path, data)
        except OSError as exc:
            raise CheckpointError(f"cannot save checkpoint {path}: {exc.strerror or exc}") from None

    def _snapshot(self, include_optimizer_state: bool) -> checkpoint.CheckpointData:
        if self._module is not None and not self.is_nominal:
            data = checkpoint.decode(self._module._save(include_optimizer_state))
        else:
            data = self._data
            for array, param in zip(data.arrays, self.parameters.values()):
                array[...] = param._data
            if not include_optimizer_state:
                data = checkpoint.CheckpointData(**{**data.__dict__, "optimizer_state": None})
        data.properties = dict(self.properties)
        return data

    def _bind(self, module: Module) -> None:
        offsets = {checkpoint.TRAINABLE: 0, checkpoint.BUFFER: 0, checkpoint.FROZEN: 0}
        integers = 0  # the trained weights stored as int8 have an array of their own
        elements = 0  # of every trainable parameter: the gradients' layout
        params = self.parameters.values()
        # NULL where the library keeps the frozen parameters in flash (a build without
        # ET_FROZEN_WRITABLE): they are then read-only copies of the trainer's values.
        frozen = module._lib_call("frozen_data") if "frozen_data" in module._functions else module._ffi.NULL
        if frozen == module._ffi.NULL and not self._data.stored(checkpoint.FROZEN):  # values this state lacks
            everything, at = module._contiguous(trainable_only=False), 0
            for param in params:
                if self._kinds[param.name] == checkpoint.BUFFER:
                    continue
                if self._kinds[param.name] == checkpoint.FROZEN:
                    param._data = everything[at : at + param._data.size].reshape(param._data.shape)
                    param._data.flags.writeable = False
                at += param._data.size
        grads = module._lib_call("trainable_grad")  # NULL for a fused update: no gradient buffers
        for param in params:
            kind = self._kinds[param.name]
            shape, offset = param._data.shape, offsets[kind]
            param._integers = None
            if kind == checkpoint.FROZEN:
                if frozen == module._ffi.NULL:
                    param._data.flags.writeable = False  # the loaded values are the compiled ones
                else:
                    param._data = module._view(frozen, offset, shape)
                    # an int8 layer's weight, compiled in as integers: a new value would not reach it
                    param._data.flags.writeable = param.name not in module._compiled_weights
            elif kind == checkpoint.TRAINABLE:
                if param.name in module._integer_weights:
                    param._integers = module._view(module._lib_call("integer_data"), integers, shape, np.int8)
                    scale = np.asarray(module._integer_weights[param.name], np.float32)
                    param._scale = scale.reshape((-1,) + (1,) * (len(shape) - 1)) if scale.size > 1 else scale[0]
                    integers += param._data.size
                else:
                    param._data = module._view(module._lib_call("trainable_data"), offset, shape)
                param._grad = None if grads == module._ffi.NULL else module._view(grads, elements, shape)
                elements += param._data.size
                if param._grad is not None:
                    # Before the first step the gradients read as zeros (ONNX Runtime's); the C
                    # resets them itself at that step (the load left et_grad_reset set), so this
                    # only clears what an earlier Module of the same library left there.
                    param._grad[...] = 0
            else:
                param._data = module._view(module._lib_call("buffer_data"), offset, shape)
            if param._integers is None:  # (the int8 weights' array is apart)
                offsets[kind] += param._data.size
        self._module = module


def _ort_checkpoint():
    """edgetrain.ort_checkpoint, which reads ONNX Runtime's checkpoint files, or None without it."""
    try:
        from . import ort_checkpoint
    except ImportError:
        return None
    return ort_checkpoint


def _as_c_dtype(name: str, dtype: np.dtype, value: np.ndarray) -> np.ndarray:
    """`value` in `dtype`, the one input `name` takes in C, where the conversion loses nothing:
    integers (class labels, indices, masks; int64 most often) and bools to int32."""
    if dtype == np.float32:
        raise ValueError(f"input {name!r} expects dtype float32, got {value.dtype}")
    if value.dtype.kind not in "biu":
        raise ValueError(
            f"input {name!r} expects integer class labels, indices or other integer or bool data "
            f"(int32 in the C), got {value.dtype}"
        )
    if value.size and (value.min() < -(2**31) or value.max() >= 2**31):
        raise ValueError(f"input {name!r} has values outside the int32 range")
    return value.astype(np.int32)


class Module:
    """The trainer generated next to `train_model_uri`, with `state` loaded into it."""

    def __init__(
        self, train_model_uri, state: CheckpointState, eval_model_uri=None, device: str = "cpu", session_options=None
    ):
        """session_options: accepted for ONNX Runtime's signature; there is no session to configure."""
        _cpu_only(device)
        self._dir = Path(train_model_uri).parent
        sibling = Path(train_model_uri).name.replace("training_model", "eval_model")  # its file prefix kept
        self._eval_model_uri = Path(eval_model_uri) if eval_model_uri else self._dir / sibling
        model = onnx.load(os.fspath(train_model_uri), load_external_data=False)
        meta = {p.key: p.value for p in model.metadata_props}
        # The trainer's state is one static arena, and cffi releases the GIL during a C call: two threads'
        # calls at once would share it. Every C call holds this lock (the Optimizer's too). It is
        # reentrant, so a caller can hold it over several calls (`with module.lock:` around a step,
        # optimizer step and reset) to make them one step that no other thread's call splits.
        self.lock = threading.RLock()
        # How to compile the trainer again for a larger batch or other free dimensions (None: it
        # runs the shapes it was compiled for), and the free dimensions' sizes now.
        self._recipe = json.loads(meta["edgetrain.recipe"]) if "edgetrain.recipe" in meta else None
        self._free = dict.fromkeys(self._recipe["free_dims"], STAND_IN) if self._recipe else {}
        self._grads_pending = False  # a training step ran since the last lazy_reset_grad (or load)
        # The artifacts of free dimensions hold no C: compile it at the stand-in sizes until a call says more.
        if self._recipe and self._free:
            max_batch = json.loads(meta["edgetrain.batch"])["max"]
            self._load(specialize(self._dir, self._recipe, max_batch, self._free) / "training_model.onnx")
        else:
            self._load(Path(train_model_uri))
        if state._data.fingerprint is None:  # another trainer's checkpoint (ONNX Runtime's): by name
            own = self._dir / meta.get("edgetrain.checkpoint", "checkpoint")
            try:
                state._adopt(checkpoint.adopt(state._data, checkpoint.decode(own.read_bytes())))
            except OSError as exc:
                raise CheckpointError(f"cannot read this trainer's own checkpoint {own}: {exc.strerror}") from None
        raw = checkpoint.encode(state._snapshot(include_optimizer_state=True))
        _check(self._lib_call("load_checkpoint", raw, len(raw)), "loading the checkpoint state")
        state._bind(self)
        self.state = state
        self.training = True

    def _load(self, path: Path) -> None:
        """Load the trainer whose training model is `path`: the library generated beside it, and what
        the model's metadata says of the inputs, outputs and batch."""
        model = onnx.load(os.fspath(path), load_external_data=False)
        meta = {p.key: p.value for p in model.metadata_props}
        self._prefix = meta["edgetrain.prefix"]
        self._ffi, self._lib = load_library(path.parent)
        # The eval model exported from: the one given, unless this build is a recompile for other sizes.
        self._eval_model_in_use = self._eval_model_uri if path.parent == self._dir else path.parent / "eval_model.onnx"
        # Looked up once: at batch 1, a step's Python costs about as much as its C.
        self._functions = {
            name[len(self._prefix) + 1 :]: getattr(self._lib, name)
            for name in dir(self._lib)
            if name.startswith(f"{self._prefix}_")
        }
        # Any batch from 1 to the largest runs, unless `fixed` says why only the largest does; the
        # arrays named in `axes` hold the batch along their first axis.
        if "edgetrain.batch" not in meta:
            raise ValueError(
                f"{path} was generated by an older edgetrain (no batch metadata): generate the artifacts again"
            )
        batch = json.loads(meta["edgetrain.batch"])
        self._max_batch, self._fixed_batch, batched = batch["max"], batch["fixed"], set(batch["axes"])
        self._small_batch = batch["small"]  # why a batch of 1 does not train, if it does not
        self._compiled_weights = set(json.loads(meta.get("edgetrain.compiled_weights", "[]")))
        self._integer_weights = json.loads(meta.get("edgetrain.integer_weights", "{}"))
        infos = {i.name: i for i in model.graph.input}
        self._inputs = [self._spec(infos[n], batched) for n in json.loads(meta["edgetrain.inputs"])]
        labels = [self._spec(infos[meta["edgetrain.labels"]], batched)] if meta.get("edgetrain.labels") else []
        self._step_inputs = self._inputs + labels  # what a training or evaluation step takes
        self._outputs = [(name, tuple(shape), name in batched) for name, shape in json.loads(meta["edgetrain.outputs"])]
        # additional_output_names: outputs train_step and eval_step return after the loss.
        names = [name for name, _, _ in self._outputs]
        self._extra = [names.index(n) for n in json.loads(meta.get("edgetrain.additional_outputs", "[]"))]
        self._names = {
            "inputs": [s[0] for s in self._step_inputs],
            "outputs": [o.name for o in model.graph.output][: 1 + len(self._extra)],
        }
        # infer writes integer and bool outputs as int32; they are returned in the model's dtype.
        self._output_dtypes = [
            np.dtype(d)
            for d in json.loads(meta.get("edgetrain.output_dtypes", "null")) or ["float32"] * len(self._outputs)
        ]
        self._loss = np.empty((), np.float32)  # written by each step, read before the next
        self._loss_arg = self._ffi.from_buffer("float[]", self._loss)
        _check(self._lib_call("init"), "init")

    def _fit(self, arrays: list[np.ndarray], specs) -> None:
        """Compile the trainer again when `arrays` need a larger batch or other free sizes than it
        has, and carry its state (parameters, buffers, optimizer state and step, learning rate) over.
        A compile that fails leaves the module as it was."""
        if self._recipe is None or len(arrays) != len(specs):
            return
        rows = [a.shape[0] for spec, a in zip(specs, arrays) if spec[4] and a.ndim]
        batch = max([self._max_batch] + rows) if self._recipe["batch_grows"] else self._max_batch
        given = {spec[0]: a.shape for spec, a in zip(specs, arrays)}
        free = dict(self._free)
        for key in free:
            name, axis = key.rsplit(":", 1)
            if len(given.get(name, ())) > int(axis):
                free[key] = given[name][int(axis)]
        if batch == self._max_batch and free == self._free:
            return
        with self.lock:
            if self._grads_pending and self._lib_call("trainable_grad") != self._ffi.NULL:
                raise ValueError(
                    "these inputs need the trainer compiled again (another batch or input size), "
                    "which would drop the gradients accumulated since lazy_reset_grad(): call "
                    "optimizer.step() and lazy_reset_grad() first"
                )
            path = specialize(self._dir, self._recipe, batch, free) / "training_model.onnx"
            saved = self._save(include_optimizer_state=True)
            self._free = free
            self._load(path)
            _check(self._lib_call("load_checkpoint", saved, len(saved)), "carrying the state to the recompiled trainer")
            self.state._bind(self)

    def _spec(self, info, batched: set[str]) -> tuple[str, tuple[int, ...], np.dtype, object, bool]:
        """(name, shape at the largest batch, dtype and C array type the C takes: float32, or int32 for
        class labels and indices, and whether its first axis is the batch)."""
        t = info.type.tensor_type
        dtype = np.dtype(np.float32 if t.elem_type == onnx.TensorProto.FLOAT else np.int32)
        return (
            info.name,
            tuple(d.dim_value for d in t.shape.dim),
            dtype,
            self._ffi.typeof("float[]" if dtype == np.float32 else "int32_t[]"),
            info.name in batched,
        )

    def _lib_call(self, name: str, *args):
        with self.lock:
            return self._functions[name](*args)

    def _view(self, base, offset: int, shape, dtype=np.float32) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64))
        itemsize = np.dtype(dtype).itemsize
        return np.frombuffer(self._ffi.buffer(base + offset, itemsize * size), dtype=dtype).reshape(shape)

    def _arg(self, spec, value, n: int):
        name, shape, dtype, array_type, batched = spec
        if batched:
            shape = (n,) + shape[1:]
        if value.shape != shape:
            only_batch = self._fixed_batch and value.ndim == len(shape) and value.shape[1:] == shape[1:]
            raise ValueError(
                f"input {name!r} expects shape {shape}, got {value.shape}"
                + (f"; {self._fixed_batch}" if only_batch else "")
            )
        if value.dtype != dtype:
            value = _as_c_dtype(name, dtype, value)
        return self._ffi.from_buffer(array_type, np.ascontiguousarray(value))

    def _data_args(self, arrays: list[np.ndarray], specs) -> tuple[int, list]:
        """(the batch, the C arguments): the batch is the length of the first axis of the arrays that
        hold one, which must agree."""
        if len(arrays) != len(specs):
            names = ", ".join(s[0] for s in specs)
            raise ValueError(f"expected {len(specs)} arrays ({names}), got {len(arrays)}")
        first, n = None, self._max_batch
        for spec, a in zip(specs, arrays):
            if not spec[4]:
                continue
            count = a.shape[0] if a.ndim else 0
            if first is None:
                first, n = spec[0], count
            elif count != n:
                raise ValueError(
                    f"the inputs disagree on the batch: {first!r} holds {n} samples, {spec[0]!r} holds {count}"
                )
        if not 1 <= n <= self._max_batch:
            raise ValueError(
                f"a batch of {n} samples: this trainer takes batches of 1 to {self._max_batch} "
                "(the batch_size it was compiled with)"
            )
        return n, [self._arg(spec, a, n) for spec, a in zip(specs, arrays)]

    def __call__(self, *inputs):
        """Train mode: forward and backward, accumulating gradients. Eval mode: the loss only. The
        batch is the inputs' first axis: any from 1 to the batch_size the trainer was compiled with,
        each giving the loss and gradients a trainer compiled for that batch would.

        Returns the loss (np.float32), or, with additional_output_names, a tuple of the loss and
        those outputs. Inputs may be OrtValues (edgetrain's or ONNX Runtime's); given only those,
        the results are OrtValues, as ONNX Runtime returns them."""
        self._require_parameters()
        # OrtValues in give OrtValues out, of the inputs' own class (edgetrain's, or ONNX Runtime's).
        kind = _ortvalue_class(inputs)
        arrays = [_as_array(a) for a in inputs]
        self._fit(arrays, self._step_inputs)
        n, args = self._data_args(arrays, self._step_inputs)
        if n == 1 and self.training and self._small_batch:
            raise ValueError(self._small_batch)
        step = "train_step" if self.training else "eval_step"
        outs = self._output_arrays(n, self._extra)
        with self.lock:  # the loss buffer is shared too: read it before another call writes it
            status = self._functions[step](n, *args, self._loss_arg, *self._output_args(outs))
            loss = self._loss[()]
        if status == BAD_ARGUMENT:
            raise ValueError(
                f"{step}: an input is out of range for the model (class labels must lie in "
                "[0, number of classes) or equal ignore_index; indices must lie in [-n, n) for an "
                "axis of n)"
            )
        _check(status, step)
        self._grads_pending |= self.training
        if kind is None and not outs:
            return loss
        results = [loss] + [o.astype(self._output_dtypes[i], copy=False) for o, i in zip(outs, self._extra)]
        if kind is not None:
            results = [kind.ortvalue_from_numpy(np.asarray(r)) for r in results]
        return results[0] if len(results) == 1 else tuple(results)

    def _output_arrays(self, n: int, which) -> list[np.ndarray]:
        """Arrays for the outputs `which` (indices into the model's outputs) at a batch of n, in the
        C's types (integer and bool outputs as int32)."""
        arrays = []
        for i in which:
            _, shape, batched = self._outputs[i]
            c_type = np.float32 if self._output_dtypes[i] == np.float32 else np.int32
            arrays.append(np.empty((n,) + shape[1:] if batched else shape, c_type))
        return arrays

    def _output_args(self, arrays) -> list:
        return [self._ffi.from_buffer("float[]" if a.dtype == np.float32 else "int32_t[]", a) for a in arrays]

    def input_names(self) -> list[str]:
        """The inputs a step takes, in order: the model's data inputs, then the loss's labels (the
        training model's first graph inputs, as in ONNX Runtime)."""
        return list(self._names["inputs"])

    def output_names(self) -> list[str]:
        """What a step returns: the loss, then the additional_output_names."""
        return list(self._names["outputs"])

    def _require_parameters(self) -> None:
        if self.state.is_nominal:
            raise RuntimeError(MODEL_NOT_LOADED)

    def infer(self, *inputs) -> list[np.ndarray]:
        """The model's outputs for `inputs` (a batch of any size from 1 to the batch_size, as in
        __call__), computed by the generated C (dropout off)."""
        self._require_parameters()
        arrays = [_as_array(a) for a in inputs]
        self._fit(arrays, self._inputs)
        n, args = self._data_args(arrays, self._inputs)
        outs = self._output_arrays(n, range(len(self._outputs)))
        status = self._lib_call("infer", n, *args, *self._output_args(outs))
        if status == BAD_ARGUMENT:
            raise ValueError(
                "infer: an index input is out of range for the model (indices must lie in [-n, n) for an axis of n)"
            )
        _check(status, "infer")
        return [o.astype(dtype, copy=False) for o, dtype in zip(outs, self._output_dtypes)]

    def train(self, mode: bool = True) -> Module:
        self.training = bool(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def lazy_reset_grad(self) -> None:
        _check(self._lib_call("lazy_reset_grad"), "lazy_reset_grad")
        self._grads_pending = False

    def get_parameters_size(self, trainable_only: bool = True) -> int:
        count = self._ffi.new("size_t *")
        _check(self._lib_call("parameters_size", int(trainable_only), count), "parameters_size")
        return int(count[0])

    def get_contiguous_parameters(self, trainable_only: bool = False) -> OrtValue:
        """The trainable (and, unless trainable_only, frozen) parameters in one float32 OrtValue."""
        self._require_parameters()
        return self._contiguous(trainable_only).view(OrtValue)

    def _contiguous(self, trainable_only: bool) -> np.ndarray:
        out = np.empty(self.get_parameters_size(trainable_only), np.float32)
        _check(
            self._lib_call(
                "copy_parameters_to_buffer", self._ffi.from_buffer("float[]", out), out.size, int(trainable_only)
            ),
            "copy_parameters_to_buffer",
        )
        return out

    def copy_buffer_to_parameters(self, buffer, trainable_only: bool = False) -> None:
        """Set the parameters from a buffer laid out as get_contiguous_parameters' (an ndarray or
        an OrtValue), the frozen ones too unless trainable_only (where the library keeps them in
        flash, the buffer must repeat their values). This completes a nominal checkpoint's state,
        as in ONNX Runtime."""
        buffer = np.ascontiguousarray(_as_array(buffer))
        expected = self.get_parameters_size(trainable_only)
        if buffer.dtype != np.float32 or buffer.ndim != 1 or buffer.size != expected:
            raise ValueError(
                f"copy_buffer_to_parameters expects a 1-D float32 buffer of {expected} values, "
                f"got {buffer.dtype} of shape {buffer.shape}"
            )
        status = self._lib_call(
            "copy_buffer_to_parameters", self._ffi.from_buffer("float[]", buffer), buffer.size, int(trainable_only)
        )
        if status == BAD_ARGUMENT:
            raise ValueError(
                "copy_buffer_to_parameters: the buffer changes frozen parameters, which are compiled in, "
                "or gives a weight stored as int8 a value that is not finite"
            )
        _check(status, "copy_buffer_to_parameters")
        self.state.is_nominal = False

    def export_model_for_inferencing(self, inference_model_uri, graph_output_names) -> None:
        """Write a forward-only ONNX model with the current weights and buffers, merged from the C's
        export blob exactly as a device's blob is (edgetrain.export.merge_parameter_blob)."""
        evaluation = onnx.load(os.fspath(self._eval_model_in_use))
        # The host keeps frozen parameters writable: export the values they have now.
        for tensor in evaluation.graph.initializer:
            if self.state._kinds.get(tensor.name) == checkpoint.FROZEN:
                tensor.CopyFrom(numpy_helper.from_array(self.state.parameters[tensor.name]._data, tensor.name))
        model = merge_parameter_blob(evaluation, self.export_parameters(), graph_output_names)
        write_artifact(Path(inference_model_uri), model.SerializeToString())

    def export_parameters(self) -> bytes:
        """The C's export blob: trainable parameters and buffers in the checkpoint format."""
        size = self._ffi.new("size_t *")
        _check(self._lib_call("export_size", size), "export_size")
        buf = self._ffi.new("uint8_t[]", size[0])
        _check(self._lib_call("export_parameters", buf, size[0], size), "export_parameters")
        return bytes(self._ffi.buffer(buf, size[0]))

    # Federated learning (artifacts generated with federated=True): the change of the trainable
    # parameters since a reference, and aggregated updates applied to that reference.
    def _federated(self, name: str):
        if name not in self._functions:
            raise RuntimeError(f"{name}: the trainer was generated without federated=True")
        return name

    def set_reference(self) -> None:
        """Remember the trainable parameters as they are now (e.g. the global model just received)."""
        _check(self._lib_call(self._federated("set_reference")), "set_reference")

    def get_delta(self) -> np.ndarray:
        """Trainable parameters minus the reference, as one float32 vector."""
        out = np.empty(self.get_parameters_size(trainable_only=True), np.float32)
        status = self._lib_call(self._federated("get_delta"), self._ffi.from_buffer("float[]", out), out.size)
        if status == BAD_ARGUMENT:
            raise RuntimeError("get_delta: no reference; call set_reference first")
        _check(status, "get_delta")
        return out

    def apply_delta(self, delta, scale: float = 1.0) -> None:
        """Set the trainable parameters, and the reference, to reference + scale * delta."""
        delta = np.ascontiguousarray(delta)
        expected = self.get_parameters_size(trainable_only=True)
        if delta.dtype != np.float32 or delta.ndim != 1 or delta.size != expected:
            raise ValueError(
                f"apply_delta expects a 1-D float32 buffer of {expected} values, "
                f"got {delta.dtype} of shape {delta.shape}"
            )
        status = self._lib_call(
            self._federated("apply_update"), self._ffi.from_buffer("float[]", delta), delta.size, float(scale)
        )
        if status == BAD_ARGUMENT:
            raise RuntimeError("apply_delta: no reference (call set_reference first) or a non-finite scale")
        _check(status, "apply_delta")

    def _save(self, include_optimizer_state: bool) -> bytes:
        size = self._ffi.new("size_t *")
        _check(self._lib_call("checkpoint_size", int(include_optimizer_state), size), "checkpoint_size")
        buf = self._ffi.new("uint8_t[]", size[0])
        _check(self._lib_call("save_checkpoint", buf, size[0], int(include_optimizer_state), size), "save_checkpoint")
        return bytes(self._ffi.buffer(buf, size[0]))


class Optimizer:
    def __init__(self, optimizer_uri, module: Module):
        self._module = module

    def step(self) -> None:
        """Update the parameters from the gradients accumulated since the last lazy_reset_grad().

        A trainer compiled with fused_update=True updates the parameters inside each training call
        (and advances the step count the learning-rate scheduler reads); then step() does nothing,
        so an ONNX Runtime training loop runs unchanged.

        Raises ValueError when there are none: no training-mode call of the module succeeded since it
        was created, its checkpoint was loaded or lazy_reset_grad() ran (ONNX Runtime would silently
        reapply the previous gradients). Eval-mode calls compute no gradients."""
        self._module._require_parameters()
        status = self._module._lib_call("optimizer_step")
        if status == BAD_ARGUMENT:
            raise ValueError(
                "Optimizer.step(): no gradients since lazy_reset_grad() or since the module was "
                "created; run a training step first (module.train(); module(inputs, labels))"
            )
        _check(status, "optimizer_step")

    def set_learning_rate(self, learning_rate: float) -> None:
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real):
            raise ValueError(f"learning rate must be a number, got {learning_rate!r}")
        problem = in_range({"learning rate": float(learning_rate)}, {"learning rate": (0.0, None)})
        if problem:
            raise ValueError(problem)
        _check(self._module._lib_call("set_learning_rate", float(learning_rate)), "set_learning_rate")

    def get_learning_rate(self) -> float:
        lr = self._module._ffi.new("float *")
        _check(self._module._lib_call("get_learning_rate", lr), "get_learning_rate")
        return float(lr[0])

    def _steps(self) -> int:
        steps = self._module._ffi.new("uint32_t *")
        _check(self._module._lib_call("optimizer_steps", steps), "optimizer_steps")
        return int(steps[0])


class LinearLRScheduler:
    """ONNX Runtime's LinearLRScheduler: warm up linearly to `initial_lr`, then decay linearly to 0
    at `total_step_count`, driven by the optimizer's step count. As in ONNX Runtime, the learning
    rate is set at construction to initial_lr times the factor at the current step (0 at step 0
    with a warm-up)."""

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int, initial_lr: float):
        self._optimizer = optimizer
        self.warmup, self.total, self.initial_lr = int(warmup_step_count), int(total_step_count), float(initial_lr)
        if self.warmup < 0 or self.total < 0:
            raise ValueError(
                f"step counts must be >= 0, got warmup_step_count={self.warmup}, total_step_count={self.total}"
            )
        self.step()

    def factor(self, step: int) -> float:
        if step < self.warmup:
            return step / max(1, self.warmup)
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))

    def step(self) -> None:
        self._optimizer.set_learning_rate(self.initial_lr * self.factor(self._optimizer._steps()))
