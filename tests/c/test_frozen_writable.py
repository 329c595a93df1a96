"""Frozen parameters set through the host's API (ONNX Runtime's semantics): the host library defines
ET_FROZEN_WRITABLE, so `Parameter.data = ...`, `state.parameters[name] = ...`,
copy_buffer_to_parameters and checkpoints change them, and the trainer then computes bit for bit
as one compiled with those frozen values does. A build without the macro (every target's) keeps
them constants in flash and refuses to change them."""

import subprocess

import cffi
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgetrain import api, artifacts, checkpoint
from edgetrain.host.build import CFLAGS, declarations, load_library
from models import mlp

BATCH = 4
FROZEN = ["fc0.weight", "fc0.bias"]  # the first layer, as ORT's test freezes one
STEPS = 3


def compile_mlp(directory, frozen_values=None):
    """The MLP's artifacts with fc0 frozen, its values replaced by `frozen_values` (name -> array)."""
    model = mlp()
    for init in model.graph.initializer:
        if frozen_values and init.name in frozen_values:
            init.CopyFrom(numpy_helper.from_array(frozen_values[init.name], init.name))
    return artifacts.generate_artifacts(
        model, artifact_directory=directory, batch_size=BATCH, frozen_params=FROZEN, learning_rate=0.05
    )


def other_values(state, seed=1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=state.parameters[n].data.shape).astype(np.float32) for n in FROZEN}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return compile_mlp(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def changed(base):
    """Other frozen values, and artifacts compiled with them: the reference for a trainer that was set."""
    values = other_values(fresh(base)[0])
    return values, compile_mlp(base.parent / "reference", values)


def fresh(out, state=None):
    state = state or api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def run(module, opt) -> tuple[list[float], list[float], np.ndarray]:
    """Training losses, evaluation losses and every parameter after STEPS steps."""
    losses, evals = [], []
    for step in range(STEPS):
        rng = np.random.default_rng(step)
        x, y = rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH)
        module.train()
        losses.append(float(module(x, y)))
        opt.step()
        module.lazy_reset_grad()
        module.eval()
        evals.append(float(module(x, y)))
    return losses, evals, np.asarray(module.get_contiguous_parameters())


def assert_same_run(a, b) -> None:
    assert a[0] == b[0] and a[1] == b[1]
    np.testing.assert_array_equal(a[2], b[2])  # the frozen values too, which the run left as set


def test_setting_frozen_parameters_trains_as_if_compiled_with_them(base, changed):
    values, reference = changed
    state, module, opt = fresh(base)
    original = state.parameters["fc0.weight"].data.copy()
    state.parameters["fc0.weight"].data = values["fc0.weight"]  # both of ORT's ways of setting
    state.parameters["fc0.bias"] = values["fc0.bias"]
    for name in FROZEN:
        np.testing.assert_array_equal(state.parameters[name].data, values[name])
        assert state.parameters[name].grad is None and not state.parameters[name].requires_grad
    expected = run(*fresh(reference)[1:])
    assert_same_run(run(module, opt), expected)
    assert expected[0] != run(*fresh(base)[1:])[0]  # the values matter to the loss

    state.parameters["fc0.weight"] = original  # ORT's test restores them so
    np.testing.assert_array_equal(state.parameters["fc0.weight"].data, original)
    with pytest.raises(ValueError, match="expects shape"):
        state.parameters["fc0.bias"] = np.zeros(3, np.float32)


def test_copy_buffer_to_parameters_sets_frozen_values(base, changed):
    values, reference = changed
    _, expected_module, expected_opt = fresh(reference)
    everything = np.asarray(expected_module.get_contiguous_parameters())
    state, module, opt = fresh(base)
    trainable = np.asarray(module.get_contiguous_parameters(trainable_only=True)).copy()
    module.copy_buffer_to_parameters(trainable, trainable_only=True)  # leaves the frozen ones as they are
    assert not np.array_equal(state.parameters["fc0.weight"].data, values["fc0.weight"])
    module.copy_buffer_to_parameters(everything)
    for name in FROZEN:
        np.testing.assert_array_equal(state.parameters[name].data, values[name])
    assert_same_run(run(module, opt), run(expected_module, expected_opt))


def test_checkpoints_carry_frozen_values_that_were_set(base, changed, tmp_path):
    values, reference = changed
    state, module, opt = fresh(base)
    for name in FROZEN:
        state.parameters[name] = values[name]
    path = tmp_path / "ckpt"
    api.CheckpointState.save_checkpoint(state, path, include_optimizer_state=True)
    data = checkpoint.decode(path.read_bytes())
    saved = dict(zip(data.names, data.arrays))
    assert data.fingerprint == checkpoint.decode((base / "checkpoint").read_bytes()).fingerprint
    for name in FROZEN:
        np.testing.assert_array_equal(saved[name], values[name])

    loaded, module, opt = fresh(base, api.CheckpointState.load_checkpoint(path))
    for name in FROZEN:
        np.testing.assert_array_equal(loaded.parameters[name].data, values[name])
    assert_same_run(run(module, opt), run(*fresh(reference)[1:]))

    # The C's own load: a trainer holding the compiled values takes the changed ones.
    _, other, _ = fresh(base)
    raw = path.read_bytes()
    assert other._lib_call("load_checkpoint", raw, len(raw)) == api.OK
    assert other._save(True) == raw


def const_build(out, tmp_path):
    """(ffi, lib) of out's model.c built as a target builds it: without ET_FROZEN_WRITABLE."""
    library = tmp_path / "const.so"
    subprocess.run(["gcc", *CFLAGS, "-fPIC", "-shared", "-o", str(library), "model.c", "-lm"], cwd=out, check=True)
    symbols = subprocess.run(["nm", str(library)], capture_output=True, text=True, check=True).stdout
    assert " r et_frozen" in symbols or " R et_frozen" in symbols  # read-only data: flash on a device
    ffi = cffi.FFI()
    ffi.cdef(declarations((out / "model.h").read_text()))
    return ffi, ffi.dlopen(str(library))


def c_prefix(out) -> str:
    model = onnx.load(str(out / "training_model.onnx"), load_external_data=False)
    return {p.key: p.value for p in model.metadata_props}["edgetrain.prefix"]


def test_a_build_without_the_macro_keeps_frozen_values_constant(base, changed, tmp_path):
    values, _ = changed
    ffi, lib = const_build(base, tmp_path)
    prefix = c_prefix(base)
    call = lambda name, *args: getattr(lib, f"{prefix}_{name}")(*args)  # noqa: E731
    raw = (base / "checkpoint").read_bytes()
    assert call("init") == api.OK and call("frozen_data") == ffi.NULL
    assert call("load_checkpoint", raw, len(raw)) == api.OK

    count = ffi.new("size_t *")
    assert call("parameters_size", 0, count) == api.OK
    everything = ffi.new("float[]", count[0])
    assert call("copy_parameters_to_buffer", everything, count[0], 0) == api.OK
    assert call("copy_buffer_to_parameters", everything, count[0], 0) == api.OK  # repeating them is fine
    everything[0] += 1.0  # fc0.weight comes first
    assert call("copy_buffer_to_parameters", everything, count[0], 0) == api.BAD_ARGUMENT

    state, module, _ = fresh(base)
    for name in FROZEN:
        state.parameters[name] = values[name]
    changed_raw = module._save(True)
    assert call("load_checkpoint", changed_raw, len(changed_raw)) == api.WRONG_MODEL
    # Neither refusal changed the trainer: it saves what a fresh host trainer of the same checkpoint does.
    size, written = ffi.new("size_t *"), ffi.new("size_t *")
    assert call("checkpoint_size", 1, size) == api.OK
    saved = ffi.new("uint8_t[]", size[0])
    assert call("save_checkpoint", saved, size[0], 1, written) == api.OK
    assert bytes(ffi.buffer(saved, written[0])) == fresh(base)[1]._save(True)


def test_the_python_api_over_a_const_build_refuses_in_one_line(base, monkeypatch):
    monkeypatch.setattr(api, "load_library", lambda directory: load_library(directory, ("-UET_FROZEN_WRITABLE",)))
    state, module, _ = fresh(base)
    assert not state.parameters["fc0.weight"].data.flags.writeable
    with pytest.raises(ValueError, match="frozen and compiled into the trainer"):
        state.parameters["fc0.weight"] = np.ones((16, 8), np.float32)
    everything = np.asarray(module.get_contiguous_parameters()).copy()
    everything[0] += 1
    with pytest.raises(ValueError, match="frozen"):
        module.copy_buffer_to_parameters(everything)
