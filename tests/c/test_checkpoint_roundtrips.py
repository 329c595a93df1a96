"""Checkpoints cross between the host Python API and the generated C in every direction, with and
without optimizer state, and training then continues bit for bit; nominal checkpoints and export
blobs are the same format with fewer values."""

import zlib

import numpy as np
import pytest

from edgetrain import api, artifacts, checkpoint
from models import mlp, mlp_bn

BATCH, STEPS = 4, 4
# Dropout makes the restored step counter matter, the frozen bias the frozen check, BatchNorm's
# running statistics the buffers; plain SGD has no optimizer state at all.
CASES = {
    "adamw": (lambda: mlp(dropout=0.25), dict(optimizer="AdamW")),
    "sgd_momentum": (lambda: mlp(dropout=0.25), dict(optimizer="SGD", momentum=0.9)),
    "sgd": (lambda: mlp(dropout=0.25), dict(optimizer="SGD")),
    "adamw_batchnorm": (mlp_bn, dict(optimizer="AdamW")),
}


@pytest.fixture(scope="module", params=list(CASES))
def out(request, tmp_path_factory):
    model, options = CASES[request.param]
    return artifacts.generate_artifacts(
        model(),
        artifact_directory=tmp_path_factory.mktemp(request.param),
        batch_size=BATCH,
        frozen_params=["fc0.bias"],
        learning_rate=0.05,
        nominal_checkpoint=True,
        **options,
    )


def fresh(out, state=None):
    state = state or api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def train(module, opt, steps, seed):
    losses = []
    for i in range(steps):
        rng = np.random.default_rng(seed + i)
        losses.append(module(rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH)))
        opt.step()
        module.lazy_reset_grad()
    return losses, module.get_contiguous_parameters()


def c_load(module, raw: bytes) -> None:
    assert module._lib_call("load_checkpoint", raw, len(raw)) == api.OK


@pytest.mark.parametrize("with_state", [True, False], ids=["with_state", "without_state"])
@pytest.mark.parametrize("direction", ["host_save_c_load", "c_save_host_load"])
def test_round_trip_continues_bit_identically(out, tmp_path, direction, with_state):
    state, module, opt = fresh(out)
    train(module, opt, STEPS, seed=0)
    opt.set_learning_rate(0.03)  # restored from the header either way
    c_bytes = module._save(with_state)
    saved = {n: p.data.copy() for n, p in state.parameters.items()}
    if not with_state and module._save(True) != c_bytes:
        # What a checkpoint without optimizer state means: the same weights, buffers, dropout step
        # counter and learning rate, with the optimizer starting afresh. (Plain SGD has no state:
        # there the uninterrupted run is the reference as it is.)
        c_load(module, c_bytes)
    expected = train(module, opt, STEPS, seed=STEPS)

    (tmp_path / "c").write_bytes(c_bytes)
    if direction == "host_save_c_load":
        host = api.CheckpointState.load_checkpoint(tmp_path / "c")
        api.CheckpointState.save_checkpoint(host, tmp_path / "host", include_optimizer_state=with_state)
        raw = (tmp_path / "host").read_bytes()
        assert raw == c_bytes  # the host's writer produces the C's bytes
        _, resumed, resumed_opt = fresh(out)
        c_load(resumed, raw)
    else:
        loaded = api.CheckpointState.load_checkpoint(tmp_path / "c")
        assert list(loaded.parameters.keys()) == list(saved)
        for name, param in loaded.parameters.items():
            np.testing.assert_array_equal(param.data, saved[name])
        _, resumed, resumed_opt = fresh(out, loaded)
    assert resumed_opt.get_learning_rate() == np.float32(0.03)
    got = train(resumed, resumed_opt, STEPS, seed=STEPS)
    assert got[0] == expected[0]
    np.testing.assert_array_equal(got[1], expected[1])
    assert resumed._save(True) == module._save(True)  # buffers and optimizer state too


def test_properties_survive_both_writers(out, tmp_path):
    state, module, opt = fresh(out)
    train(module, opt, 2, seed=0)
    state.properties.update(epoch=3, loss=0.125, user="ünïcode")
    api.CheckpointState.save_checkpoint(state, tmp_path / "host", include_optimizer_state=True)
    c_bytes = module._save(True)
    c_load(module, (tmp_path / "host").read_bytes())  # the C skips the properties it keeps no copy of
    assert module._save(True) == c_bytes
    reread = api.CheckpointState.load_checkpoint(tmp_path / "host")
    assert reread.properties == {"epoch": 3, "loss": 0.125, "user": "ünïcode"}


def test_nominal_checkpoint_has_shapes_only_and_trains_once_given_weights(out, tmp_path):
    nominal_bytes = (out / "nominal_checkpoint").read_bytes()
    full = api.CheckpointState.load_checkpoint(out / "checkpoint")
    assert len(nominal_bytes) < len((out / "checkpoint").read_bytes())
    nominal = api.CheckpointState.load_checkpoint(out / "nominal_checkpoint")
    assert nominal.is_nominal and not full.is_nominal
    assert [name for name, _ in nominal.parameters] == [name for name, _ in full.parameters]
    for name, param in nominal.parameters:
        assert param.requires_grad == full.parameters[name].requires_grad
        with pytest.raises(RuntimeError, match="Please load the parameter states first"):
            _ = param.data
    api.CheckpointState.save_checkpoint(nominal, tmp_path / "again")  # unbound: still nominal
    assert (tmp_path / "again").read_bytes() == nominal_bytes

    # As in ONNX Runtime, a module bound to it refuses to run until real weights arrive: through a
    # parameter buffer (then it trains as the full checkpoint does), or a full checkpoint into the C.
    _, module, opt = fresh(out, nominal)
    assert nominal.is_nominal
    with pytest.raises(RuntimeError, match="Please load the model parameters first."):
        module(*[np.zeros((BATCH, 8), np.float32), np.zeros(BATCH, np.int64)])
    api.CheckpointState.save_checkpoint(nominal, tmp_path / "bound")  # bound, not loaded: still nominal
    assert (tmp_path / "bound").read_bytes() == nominal_bytes
    module.copy_buffer_to_parameters(fresh(out)[1].get_contiguous_parameters())
    assert not nominal.is_nominal
    for name, param in nominal.parameters:
        np.testing.assert_array_equal(param.data, full.parameters[name].data)
    expected = train(*fresh(out)[1:], STEPS, seed=0)
    assert train(module, opt, STEPS, seed=0)[0] == expected[0]

    _, later, _ = fresh(out, api.CheckpointState.load_checkpoint(out / "nominal_checkpoint"))
    later.copy_buffer_to_parameters(expected[1])
    np.testing.assert_array_equal(later.get_contiguous_parameters(), expected[1])
    _, trained, _ = fresh(out)
    trained.copy_buffer_to_parameters(expected[1])
    c_load(later, trained._save(True))
    assert later._save(True) == trained._save(True)

    # A nominal checkpoint still names its model: the C refuses another model's.
    other = artifacts.generate_artifacts(
        mlp(seed=7), artifact_directory=tmp_path / "other", batch_size=BATCH, nominal_checkpoint=True
    )
    raw = (other / "nominal_checkpoint").read_bytes()
    assert module._lib_call("load_checkpoint", raw, len(raw)) == api.WRONG_MODEL


def test_export_blob_is_a_checkpoint_without_frozen_values(out, tmp_path):
    state, module, opt = fresh(out)
    train(module, opt, 3, seed=0)
    blob = module.export_parameters()
    data = checkpoint.decode(blob)
    assert data.contents == checkpoint.NO_FROZEN and data.optimizer_state is None
    assert not data.arrays[data.names.index("fc0.bias")].any()
    assert len(blob) == len(module._save(False)) - 4 * state.parameters["fc0.bias"].data.size
    # The host writes the same bytes from the same values.
    host = checkpoint.decode(module._save(False))
    host.contents = checkpoint.NO_FROZEN
    assert checkpoint.encode(host) == blob
    # It loads on both sides; the frozen values come from the trainer.
    (tmp_path / "blob").write_bytes(blob)
    loaded = api.CheckpointState.load_checkpoint(tmp_path / "blob")
    _, resumed, _ = fresh(out, loaded)
    np.testing.assert_array_equal(loaded.parameters["fc0.bias"].data, state.parameters["fc0.bias"].data)
    np.testing.assert_array_equal(resumed.get_contiguous_parameters(), module.get_contiguous_parameters())


@pytest.mark.parametrize("contents", [4, checkpoint.NOMINAL | 8])
def test_unknown_contents_flags_are_refused_on_both_sides(out, tmp_path, contents):
    _, module, _ = fresh(out)
    before = module._save(True)
    raw = bytearray((out / "nominal_checkpoint").read_bytes())
    raw[6:8] = contents.to_bytes(2, "little")
    raw[-4:] = zlib.crc32(bytes(raw[:-4])).to_bytes(4, "little")
    with pytest.raises(api.CheckpointError, match="contents"):
        checkpoint.decode(bytes(raw))
    assert module._lib_call("load_checkpoint", bytes(raw), len(raw)) == api.CORRUPT_CHECKPOINT
    assert module._save(True) == before
