"""The training API, shaped like ONNX Runtime's on-device training API (onnxruntime.training.api)
so its users can move over by changing imports. Every number is computed by the generated C;
Python only moves buffers."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import onnx

from . import checkpoint
from .checkpoint import CheckpointError
from .export import merge_parameter_blob
from .files import write_artifact, write_atomic
from .host import load_library

__all__ = ["CheckpointError", "CheckpointState", "LinearLRScheduler", "Module", "NonFiniteError", "Optimizer",
           "Parameter", "merge_parameter_blob"]

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


class Parameter:
    """A named parameter. Once a Module is bound, `data` and `grad` are live views of the
    trainer's memory; frozen parameters are compiled in and read-only."""

    def __init__(self, name: str, data: np.ndarray, requires_grad: bool, grad: np.ndarray | None = None):
        self.name, self._data, self.requires_grad, self.grad = name, data, requires_grad, grad

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value) -> None:
        value = np.asarray(value, dtype=np.float32)
        if value.shape != self._data.shape:
            raise ValueError(f"parameter {self.name!r} expects shape {self._data.shape}, got {value.shape}")
        if not self._data.flags.writeable:
            raise ValueError(f"parameter {self.name!r} is frozen and compiled into the trainer")
        self._data[...] = value

    def __repr__(self) -> str:
        return f"Parameter({self.name!r}, shape={self._data.shape}, requires_grad={self.requires_grad})"


class CheckpointState:
    """Parameters, optimizer state and user properties, saved in edgetrain's checkpoint format.

    A nominal checkpoint (`is_nominal`) has the parameter table only: its parameters read as zeros
    until a Module is bound, which keeps the weights compiled into the trainer (real ones can follow
    through Module.copy_buffer_to_parameters or a full checkpoint)."""

    def __init__(self, data: checkpoint.CheckpointData):
        self._data = data
        self._module: Module | None = None
        self.is_nominal = bool(data.contents & checkpoint.NOMINAL)
        self.properties: dict = dict(data.properties)
        self.parameters: dict[str, Parameter] = {}
        for name, kind, array in zip(data.names, data.kinds, data.arrays):
            view = np.array(array, dtype=np.float32)
            view.flags.writeable = kind != checkpoint.FROZEN
            self.parameters[name] = Parameter(name, view, kind == checkpoint.TRAINABLE)
        self._kinds = dict(zip(data.names, data.kinds))

    @staticmethod
    def load_checkpoint(path: str | os.PathLike) -> "CheckpointState":
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror}") from None
        return CheckpointState(checkpoint.decode(raw))

    @staticmethod
    def save_checkpoint(state: "CheckpointState", path: str | os.PathLike, include_optimizer_state: bool = False) -> None:
        """Written durably (edgetrain.files.write_atomic): a crash, a kill or a full disk during the save
        leaves the previous checkpoint at `path`, whole."""
        data = checkpoint.encode(state._snapshot(include_optimizer_state))
        try:
            write_atomic(path, data)
        except OSError as exc:
            raise CheckpointError(f"cannot save checkpoint {path}: {exc.strerror or exc}") from None

    def _snapshot(self, include_optimizer_state: bool) -> checkpoint.CheckpointData:
        if self._module is not None:
            data = checkpoint.decode(self._module._save(include_optimizer_state))
        else:
            data = self._data
            for array, param in zip(data.arrays, self.parameters.values()):
                array[...] = param.data
            if not include_optimizer_state:
                data = checkpoint.CheckpointData(**{**data.__dict__, "optimizer_state": None})
        data.properties = dict(self.properties)
        return data

    def _bind(self, module: "Module") -> None:
        offsets = {checkpoint.TRAINABLE: 0, checkpoint.BUFFER: 0}
        if not self._data.stored(checkpoint.FROZEN):  # the trainer has the values this state lacks
            everything, at = module.get_contiguous_parameters(), 0
            for param in self.parameters.values():
                if self._kinds[param.name] == checkpoint.BUFFER:
                    continue
                if self._kinds[param.name] == checkpoint.FROZEN:
                    param._data = everything[at:at + param.data.size].reshape(param.data.shape)
                    param._data.flags.writeable = False
                at += param.data.size
        for param in self.parameters.values():
            kind = self._kinds[param.name]
            if kind == checkpoint.FROZEN:
                continue  # compiled into the trainer: the loaded values are the live ones
            shape, offset = param.data.shape, offsets[kind]
            if kind == checkpoint.TRAINABLE:
                param._data = module._view(module._lib_call("trainable_data"), offset, shape)
                grads = module._lib_call("trainable_grad")  # NULL for a fused update: no gradient buffers
                param.grad = None if grads == module._ffi.NULL else module._view(grads, offset, shape)
            else:
                param._data = module._view(module._lib_call("buffer_data"), offset, shape)
            offsets[kind] += param.data.size
        self._module = module
        self.is_nominal = False


def _as_c_dtype(name: str, dtype: np.dtype, value: np.ndarray) -> np.ndarray:
    """`value` in `dtype`, the one input `name` takes in C, where the conversion loses nothing:
    integers (class labels, indices, masks; int64 most often) and bools to int32."""
    if dtype == np.float32:
        raise ValueError(f"input {name!r} expects dtype float32, got {value.dtype}")
    if value.dtype.kind not in "biu":
        raise ValueError(f"input {name!r} expects integer class labels, indices or other integer or bool data "
                         f"(int32 in the C), got {value.dtype}")
    if value.size and (value.min() < -(2**31) or value.max() >= 2**31):
        raise ValueError(f"input {name!r} has values outside the int32 range")
    return value.astype(np.int32)


class Module:
    """The trainer generated next to `train_model_uri`, with `state` loaded into it."""

    def __init__(self, train_model_uri, state: CheckpointState, eval_model_uri=None, device: str = "cpu"):
        if device != "cpu":
            raise ValueError(f"device {device!r}: the host trainer runs on the CPU")
        self._dir = Path(train_model_uri).parent
        self._eval_model_uri = Path(eval_model_uri) if eval_model_uri else self._dir / "eval_model.onnx"
        model = onnx.load(os.fspath(train_model_uri), load_external_data=False)
        meta = {p.key: p.value for p in model.metadata_props}
        self._prefix = meta["edgetrain.prefix"]
        self._ffi, self._lib = load_library(self._dir)
        # The trainer's state is one static arena, and cffi releases the GIL during a C call: two threads'
        # calls at once would share it. Every C call holds this lock (the Optimizer's too). It is
        # reentrant, so a caller can hold it over several calls (`with module.lock:` around a step,
        # optimizer step and reset) to make them one step that no other thread's call splits.
        self.lock = threading.RLock()
        # Looked up once: at batch 1, a step's Python costs about as much as its C.
        self._functions = {name[len(self._prefix) + 1:]: getattr(self._lib, name) for name in dir(self._lib)
                           if name.startswith(f"{self._prefix}_")}
        # Any batch from 1 to the largest runs, unless `fixed` says why only the largest does; the
        # arrays named in `axes` hold the batch along their first axis.
        if "edgetrain.batch" not in meta:
            raise ValueError(f"{train_model_uri} was generated by an older edgetrain (no batch metadata): generate "
                             "the artifacts again")
        batch = json.loads(meta["edgetrain.batch"])
        self._max_batch, self._fixed_batch, batched = batch["max"], batch["fixed"], set(batch["axes"])
        self._small_batch = batch["small"]  # why a batch of 1 does not train, if it does not
        infos = {i.name: i for i in model.graph.input}
        self._inputs = [self._spec(infos[n], batched) for n in json.loads(meta["edgetrain.inputs"])]
        labels = [self._spec(infos[meta["edgetrain.labels"]], batched)] if meta.get("edgetrain.labels") else []
        self._step_inputs = self._inputs + labels  # what a training or evaluation step takes
        self._outputs = [(name, tuple(shape), name in batched) for name, shape in json.loads(meta["edgetrain.outputs"])]
        # infer writes integer and bool outputs as int32; they are returned in the model's dtype.
        self._output_dtypes = [np.dtype(d) for d in json.loads(meta.get("edgetrain.output_dtypes", "null"))
                               or ["float32"] * len(self._outputs)]
        self._loss = np.empty((), np.float32)  # written by each step, read before the next
        self._loss_arg = self._ffi.from_buffer("float[]", self._loss)
        _check(self._lib_call("init"), "init")
        raw = checkpoint.encode(state._snapshot(include_optimizer_state=True))
        _check(self._lib_call("load_checkpoint", raw, len(raw)), "loading the checkpoint state")
        state._bind(self)
        self.state = state
        self.training = True

    def _spec(self, info, batched: set[str]) -> tuple[str, tuple[int, ...], np.dtype, object, bool]:
        """(name, shape at the largest batch, dtype and C array type the C takes: float32, or int32 for
        class labels and indices, and whether its first axis is the batch)."""
        t = info.type.tensor_type
        dtype = np.dtype(np.float32 if t.elem_type == onnx.TensorProto.FLOAT else np.int32)
        return (info.name, tuple(d.dim_value for d in t.shape.dim), dtype,
                self._ffi.typeof("float[]" if dtype == np.float32 else "int32_t[]"), info.name in batched)

    def _lib_call(self, name: str, *args):
        with self.lock:
            return self._functions[name](*args)

    def _view(self, base, offset: int, shape) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._ffi.buffer(base + offset, 4 * size), dtype=np.float32).reshape(shape)

    def _arg(self, spec, value, n: int):
        name, shape, dtype, array_type, batched = spec
        if batched:
            shape = (n,) + shape[1:]
        if value.shape != shape:
            only_batch = self._fixed_batch and value.ndim == len(shape) and value.shape[1:] == shape[1:]
            raise ValueError(f"input {name!r} expects shape {shape}, got {value.shape}"
                             + (f"; {self._fixed_batch}" if only_batch else ""))
        if value.dtype != dtype:
            value = _as_c_dtype(name, dtype, value)
        return self._ffi.from_buffer(array_type, np.ascontiguousarray(value))

    def _data_args(self, args, specs) -> tuple[int, list]:
        """(the batch, the C arguments): the batch is the length of the first axis of the arrays that
        hold one, which must agree."""
        if len(args) != len(specs):
            names = ", ".join(s[0] for s in specs)
            raise ValueError(f"expected {len(specs)} arrays ({names}), got {len(args)}")
        arrays = [np.asarray(a) for a in args]
        rows = [(spec[0], a.shape[0] if a.ndim else 0) for spec, a in zip(specs, arrays) if spec[4]]
        n = rows[0][1] if rows else self._max_batch
        for name, count in rows:
            if count != n:
                raise ValueError(f"the inputs disagree on the batch: {rows[0][0]!r} holds {n} samples, "
                                 f"{name!r} holds {count}")
        if not 1 <= n <= self._max_batch:
            raise ValueError(f"a batch of {n} samples: this trainer takes batches of 1 to {self._max_batch} "
                             "(the batch_size it was compiled with)")
        return n, [self._arg(spec, a, n) for spec, a in zip(specs, arrays)]

    def __call__(self, *inputs) -> np.float32:
        """Train mode: forward and backward, accumulating gradients. Eval mode: the loss only. The
        batch is the inputs' first axis: any from 1 to the batch_size the trainer was compiled with,
        each giving the loss and gradients a trainer compiled for that batch would."""
        n, args = self._data_args(inputs, self._step_inputs)
        if n == 1 and self.training and self._small_batch:
            raise ValueError(self._small_batch)
        step = "train_step" if self.training else "eval_step"
        with self.lock:  # the loss buffer is shared too: read it before another call writes it
            status = self._lib_call(step, n, *args, self._loss_arg)
            loss = self._loss[()]
        if status == BAD_ARGUMENT:
            raise ValueError(f"{step}: an input is out of range for the model (class labels must lie in "
                             "[0, number of classes) or equal ignore_index; indices must lie in [-n, n) for an "
                             "axis of n)")
        _check(status, step)
        return loss

    def infer(self, *inputs) -> list[np.ndarray]:
        """The model's outputs for `inputs` (a batch of any size from 1 to the batch_size, as in
        __call__), computed by the generated C (dropout off)."""
        n, args = self._data_args(inputs, self._inputs)
        outs = [np.empty((n,) + shape[1:] if batched else shape, np.float32 if dtype == np.float32 else np.int32)
                for (_, shape, batched), dtype in zip(self._outputs, self._output_dtypes)]
        status = self._lib_call("infer", n, *args, *[self._ffi.from_buffer("float[]" if o.dtype == np.float32
                                                                        else "int32_t[]", o) for o in outs])
        if status == BAD_ARGUMENT:
            raise ValueError("infer: an index input is out of range for the model (indices must lie in [-n, n) "
                             "for an axis of n)")
        _check(status, "infer")
        return [o.astype(dtype, copy=False) for o, dtype in zip(outs, self._output_dtypes)]

    def train(self, mode: bool = True) -> "Module":
        self.training = bool(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def lazy_reset_grad(self) -> None:
        _check(self._lib_call("lazy_reset_grad"), "lazy_reset_grad")

    def get_parameters_size(self, trainable_only: bool = True) -> int:
        count = self._ffi.new("size_t *")
        _check(self._lib_call("parameters_size", int(trainable_only), count), "parameters_size")
        return int(count[0])

    def get_contiguous_parameters(self, trainable_only: bool = False) -> np.ndarray:
        out = np.empty(self.get_parameters_size(trainable_only), np.float32)
        _check(self._lib_call("copy_parameters_to_buffer", self._ffi.from_buffer("float[]", out), out.size,
                              int(trainable_only)), "copy_parameters_to_buffer")
        return out

    def copy_buffer_to_parameters(self, buffer, trainable_only: bool = False) -> None:
        buffer = np.ascontiguousarray(buffer)
        expected = self.get_parameters_size(trainable_only)
        if buffer.dtype != np.float32 or buffer.ndim != 1 or buffer.size != expected:
            raise ValueError(f"copy_buffer_to_parameters expects a 1-D float32 buffer of {expected} values, "
                             f"got {buffer.dtype} of shape {buffer.shape}")
        status = self._lib_call("copy_buffer_to_parameters", self._ffi.from_buffer("float[]", buffer), buffer.size,
                                int(trainable_only))
        if status == BAD_ARGUMENT:
            raise ValueError("copy_buffer_to_parameters: the buffer changes frozen parameters, which are compiled in")
        _check(status, "copy_buffer_to_parameters")

    def export_model_for_inferencing(self, inference_model_uri, graph_output_names) -> None:
        """Write a forward-only ONNX model with the current weights and buffers, merged from the C's
        export blob exactly as a device's blob is (edgetrain.export.merge_parameter_blob)."""
        model = merge_parameter_blob(self._eval_model_uri, self.export_parameters(), graph_output_names)
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
            raise ValueError(f"apply_delta expects a 1-D float32 buffer of {expected} values, "
                             f"got {delta.dtype} of shape {delta.shape}")
        status = self._lib_call(self._federated("apply_update"), self._ffi.from_buffer("float[]", delta), delta.size,
                                float(scale))
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
        status = self._module._lib_call("optimizer_step")
        if status == BAD_ARGUMENT:
            raise ValueError("Optimizer.step(): no gradients since lazy_reset_grad() or since the module was "
                             "created; run a training step first (module.train(); module(inputs, labels))")
        _check(status, "optimizer_step")

    def set_learning_rate(self, learning_rate: float) -> None:
        if not np.isfinite(learning_rate) or learning_rate < 0:
            raise ValueError(f"learning rate must be a finite number >= 0, got {learning_rate}")
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
    at `total_step_count`, driven by the optimizer's step count."""

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int, initial_lr: float):
        self._optimizer = optimizer
        self.warmup, self.total, self.initial_lr = int(warmup_step_count), int(total_step_count), float(initial_lr)
        if self.warmup < 0 or self.total < 0:
            raise ValueError(f"step counts must be >= 0, got warmup_step_count={self.warmup}, "
                             f"total_step_count={self.total}")
        optimizer.set_learning_rate(self.initial_lr)

    def factor(self, step: int) -> float:
        if step < self.warmup:
            return step / max(1, self.warmup)
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))

    def step(self) -> None:
        self._optimizer.set_learning_rate(self.initial_lr * self.factor(self._optimizer._steps()))
