"""ONNX Runtime 1.19.2's training checkpoints in edgetrain (edgetrain.ort_checkpoint, `edgetrain
import-ort-checkpoint`): ORT itself, in its own venv, trains the model edgetrain compiles and saves
its checkpoint; edgetrain loads it and must hold ORT's parameters bit for bit and train on to ORT's
next losses."""

import json
import random
import subprocess
import sys

import numpy as np
import onnx
import pytest

from edgetrain import api, artifacts, checkpoint, cli, ort_checkpoint
from models import mlp
from ort_venv import ort_python

flatbuffers = pytest.importorskip("flatbuffers")

BATCH, TRAINED, RESUMED, LR = 4, 3, 2, 0.05
FROZEN = ["fc0.bias"]

# Runs in ORT's venv: train TRAINED AdamW steps at LR, save the checkpoint with the optimizer state and
# properties, go on RESUMED steps (the continued losses); then, as a user resuming would, load the
# checkpoint into a fresh Module and Optimizer and train the same RESUMED steps (the resumed losses).
ORT_SCRIPT = """
import json, sys
from pathlib import Path
import numpy as np, onnx, onnxruntime
from onnxruntime.training import api, artifacts

onnxruntime.set_default_logger_severity(3)
out, trained, resumed, lr = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
model = onnx.load(str(out / "model.onnx"))
frozen = json.loads(sys.argv[5])
requires_grad = [i.name for i in model.graph.initializer if i.name not in frozen]
(out / "ort").mkdir()
artifacts.generate_artifacts(model, requires_grad=requires_grad, frozen_params=frozen,
                             loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                             artifact_directory=str(out / "ort"), nominal_checkpoint=True)
optimizer_model = onnx.load(str(out / "ort/optimizer_model.onnx"))
optimizer_model.ir_version = 10  # ORT 1.19 reads IR 10 at most
onnx.save(optimizer_model, str(out / "ort/optimizer_model.onnx"))
batches = np.load(out / "batches.npz")

def session(checkpoint):
    state = api.CheckpointState.load_checkpoint(str(checkpoint))
    module = api.Module(str(out / "ort/training_model.onnx"), state, str(out / "ort/eval_model.onnx"))
    module.train()
    return state, module, api.Optimizer(str(out / "ort/optimizer_model.onnx"), module)

def steps(module, optimizer, first, count):
    losses = []
    for i in range(first, first + count):
        losses.append(float(module(batches["x"][i], batches["y"][i])))
        optimizer.step()
        module.lazy_reset_grad()
    return losses

state, module, optimizer = session(out / "ort/checkpoint")
optimizer.set_learning_rate(lr)
steps(module, optimizer, 0, trained)
state.properties["epoch"] = 3
state.properties["best"] = 0.25
state.properties["note"] = "r\\u00e9sum\\u00e9"
api.CheckpointState.save_checkpoint(state, str(out / "trained.ckpt"), include_optimizer_state=True)
np.savez(out / "parameters.npz", **{name: p.data for name, p in state.parameters})
continued = steps(module, optimizer, trained, resumed)
state, module, optimizer = session(out / "trained.ckpt")
print(json.dumps({"continued": continued, "resumed_lr": optimizer.get_learning_rate(),
                  "resumed": steps(module, optimizer, trained, resumed)}))
"""


@pytest.fixture(scope="module")
def ort(tmp_path_factory):
    """ORT's run: its directory (checkpoints, parameters.npz, batches.npz, model.onnx) and losses."""
    python = ort_python()
    out = tmp_path_factory.mktemp("ort-checkpoint")
    onnx.save(mlp(), out / "model.onnx")
    rng = np.random.default_rng(7)
    np.savez(
        out / "batches.npz",
        x=rng.normal(size=(TRAINED + RESUMED, BATCH, 8)).astype(np.float32),
        y=rng.integers(0, 3, (TRAINED + RESUMED, BATCH)),
    )
    (out / "ort_side.py").write_text(ORT_SCRIPT)
    run = subprocess.run(
        [python, out / "ort_side.py", out, str(TRAINED), str(RESUMED), str(LR), json.dumps(FROZEN)],
        capture_output=True,
        text=True,
        cwd=out,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out, json.loads(run.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def trainer(ort):
    out, _ = ort
    return artifacts.generate_artifacts(
        str(out / "model.onnx"),
        frozen_params=FROZEN,
        batch_size=BATCH,
        learning_rate=LR,
        artifact_directory=out / "edgetrain",
    )


def _session(trainer, state):
    module = api.Module(trainer / "training_model.onnx", state, trainer / "eval_model.onnx")
    return module, api.Optimizer(trainer / "optimizer_model.onnx", module)


def _train_on(module, optimizer, out, lr=None):
    if lr is not None:
        optimizer.set_learning_rate(lr)
    batches, losses = np.load(out / "batches.npz"), []
    module.train()
    for i in range(TRAINED, TRAINED + RESUMED):
        losses.append(float(module(batches["x"][i], batches["y"][i])))
        optimizer.step()
        module.lazy_reset_grad()
    return losses, optimizer.get_learning_rate()


def _assert_holds_ort_parameters(state, out):
    expected = np.load(out / "parameters.npz")
    assert sorted(expected.files) == sorted(state.parameters.keys())
    for name in expected.files:
        np.testing.assert_array_equal(np.asarray(state.parameters[name].data), expected[name], strict=True)


def test_read_gives_ort_tensors_moments_step_and_properties(ort):
    out, _ = ort
    data = ort_checkpoint.load(out / "trained.ckpt")
    assert data.fingerprint is None
    kinds = dict(zip(data.names, data.kinds))
    assert kinds == {
        "fc0.weight": checkpoint.TRAINABLE,
        "fc1.weight": checkpoint.TRAINABLE,
        "fc1.bias": checkpoint.TRAINABLE,
        "fc0.bias": checkpoint.FROZEN,
    }
    expected = np.load(out / "parameters.npz")
    for name, array in zip(data.names, data.arrays):
        np.testing.assert_array_equal(array, expected[name], strict=True)
    assert data.step == TRAINED and data.properties == {"epoch": 3, "best": 0.25, "note": "résumé"}
    exp_avg, exp_avg_sq = data.optimizer_state  # edgetrain's AdamW slots, from ORT's momentum0/momentum1
    assert all((v > 0).all() for v in exp_avg_sq) and any((m < 0).any() for m in exp_avg)
    trainable = [a for a, k in zip(data.arrays, data.kinds) if k == checkpoint.TRAINABLE]
    assert [m.shape for m in exp_avg] == [v.shape for v in exp_avg_sq] == [a.shape for a in trainable]
    nominal = ort_checkpoint.load(out / "ort" / "nominal_checkpoint")
    assert nominal.contents == checkpoint.NOMINAL and sorted(nominal.names) == sorted(data.names)


def test_cli_import_trains_on_as_ort_does(ort, trainer, tmp_path, capsys):
    out, losses = ort
    assert (
        cli.main(
            ["import-ort-checkpoint", str(out / "trained.ckpt"), str(tmp_path / "ck"), "--artifacts", str(trainer)]
        )
        == 0
    )
    assert "with its optimizer state, step 3" in capsys.readouterr().out
    state = api.CheckpointState.load_checkpoint(tmp_path / "ck")
    module, optimizer = _session(trainer, state)
    _assert_holds_ort_parameters(state, out)  # the trainer's own memory, through the state's views
    resumed, lr = _train_on(module, optimizer, out)
    assert lr == pytest.approx(losses["resumed_lr"])  # ORT resumes at its group's initial learning rate
    np.testing.assert_allclose(resumed, losses["resumed"], rtol=0, atol=1e-5)
    state = api.CheckpointState.load_checkpoint(tmp_path / "ck")
    continued, _ = _train_on(*_session(trainer, state), out, lr=LR)
    np.testing.assert_allclose(continued, losses["continued"], rtol=0, atol=1e-5)


def test_load_checkpoint_reads_ort_files(ort, trainer):
    out, losses = ort
    try:
        state = api.CheckpointState.load_checkpoint(out / "trained.ckpt")
    except checkpoint.CheckpointError as exc:
        pytest.skip(f"CheckpointState.load_checkpoint does not read ORT checkpoints yet ({exc})")
    module, optimizer = _session(trainer, state)
    _assert_holds_ort_parameters(state, out)
    resumed, _ = _train_on(module, optimizer, out)
    np.testing.assert_allclose(resumed, losses["resumed"], rtol=0, atol=1e-5)


def test_cli_names_what_does_not_fit(ort, tmp_path, capsys):
    out, _ = ort
    wider = artifacts.generate_artifacts(mlp(sizes=(8, 12, 3)), batch_size=BATCH, artifact_directory=tmp_path / "w")
    other = onnx.load(out / "model.onnx")
    for init in other.graph.initializer:
        init.name = init.name.replace("fc1", "head")
    for node in other.graph.node:
        node.input[:] = [n.replace("fc1", "head") for n in node.input]
    renamed = artifacts.generate_artifacts(other, batch_size=BATCH, artifact_directory=tmp_path / "r")
    cases = [
        (wider, "shapes differ: 'fc0.weight' (16, 8) (the trainer's (12, 8))"),
        (renamed, "lacks 'head.weight', 'head.bias'"),
        (tmp_path, "no trainer checkpoint in"),
    ]
    for directory, message in cases:
        with pytest.raises(SystemExit) as exit_:
            cli.main(
                [
                    "import-ort-checkpoint",
                    str(out / "trained.ckpt"),
                    str(tmp_path / "ck"),
                    "--artifacts",
                    str(directory),
                ]
            )
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "ck").exists()


def test_external_data_is_read_from_beside_the_checkpoint(ort, tmp_path):
    """ORT moves tensors to <checkpoint>.data past about 1.8 GB; the same layout, built small here."""
    out, _ = ort
    data = ort_checkpoint.load(out / "trained.ckpt")
    raw, external = _odtc(data, external=True)
    (tmp_path / "big.ckpt").write_bytes(raw)
    with pytest.raises(checkpoint.CheckpointError, match="external data file"):
        ort_checkpoint.load(tmp_path / "big.ckpt")
    (tmp_path / "big.ckpt.data").write_bytes(external)
    again = ort_checkpoint.load(tmp_path / "big.ckpt")
    assert again.names == data.names
    for a, b in zip(again.arrays + sum(again.optimizer_state, []), data.arrays + sum(data.optimizer_state, [])):
        np.testing.assert_array_equal(a, b, strict=True)
    (tmp_path / "big.ckpt.data").write_bytes(external[:-4])
    with pytest.raises(checkpoint.CheckpointError, match="outside its external data file"):
        ort_checkpoint.load(tmp_path / "big.ckpt")


def test_damaged_checkpoints_raise_checkpoint_error_only(ort, figure):
    out, _ = ort
    raw = (out / "trained.ckpt").read_bytes()
    rng, failures = random.Random(0), 0
    for trial in range(3000):
        damaged = bytearray(raw)
        if trial % 3 == 0:
            damaged = damaged[: rng.randrange(len(raw))]
        else:
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(8, len(raw))  # past the identifier, which read() checks first
                damaged[at] ^= 1 << rng.randrange(8)
        try:
            ort_checkpoint.read(bytes(damaged))
        except checkpoint.CheckpointError as exc:
            assert "\n" not in str(exc)
            failures += 1
    assert failures > 1000
    figure(f"3000 damaged ORT checkpoints: {failures} refused with CheckpointError, the rest read")


def test_missing_flatbuffers_is_one_line(ort, monkeypatch):
    out, _ = ort
    monkeypatch.setitem(sys.modules, "flatbuffers", None)
    with pytest.raises(checkpoint.CheckpointError, match="needs the flatbuffers package: pip install flatbuffers"):
        ort_checkpoint.load(out / "trained.ckpt")
    # Telling the formats apart needs no flatbuffers: an edgetrain checkpoint still loads without it.
    assert ort_checkpoint.is_ort_checkpoint((out / "trained.ckpt").read_bytes())
    assert not ort_checkpoint.is_ort_checkpoint(
        checkpoint.encode(checkpoint.CheckpointData(1, ["w"], [checkpoint.TRAINABLE], [np.zeros(2, np.float32)]))
    )


def _odtc(data, external: bool) -> tuple[bytes, bytes]:
    """`data` written as ORT lays out a checkpoint (ort_training_checkpoint.fbs), its tensors in a
    separate data blob when `external`."""
    builder, blob = flatbuffers.Builder(1024), bytearray()

    def tensor(name, array):
        name_at = builder.CreateString(name)
        dims = builder.CreateNumpyVector(np.array(array.shape, np.int64))
        raw = None if external else builder.CreateByteVector(array.astype("<f4").tobytes())
        builder.StartObject(7)
        builder.PrependUOffsetTRelativeSlot(0, name_at, 0)
        builder.PrependUOffsetTRelativeSlot(2, dims, 0)
        builder.PrependInt32Slot(3, 1, 0)
        if external:
            builder.PrependInt64Slot(6, len(blob), -1)
            blob.extend(array.astype("<f4").tobytes())
        else:
            builder.PrependUOffsetTRelativeSlot(4, raw, 0)
        return builder.EndObject()

    def vector(offsets):
        builder.StartVector(4, len(offsets), 4)
        for at in reversed(offsets):
            builder.PrependUOffsetTRelative(at)
        return builder.EndVector()

    params = [
        [tensor(n, a) for n, a, k in zip(data.names, data.arrays, data.kinds) if k == kind]
        for kind in (checkpoint.TRAINABLE, checkpoint.FROZEN)
    ]
    trainable = [n for n, k in zip(data.names, data.kinds) if k == checkpoint.TRAINABLE]
    states = []
    for i, name in enumerate(trainable):
        momentums = vector([tensor(f"momentum{s}", slot[i]) for s, slot in enumerate(data.optimizer_state)])
        name_at = builder.CreateString(name)
        builder.StartObject(2)
        builder.PrependUOffsetTRelativeSlot(0, name_at, 0)
        builder.PrependUOffsetTRelativeSlot(1, momentums, 0)
        states.append(builder.EndObject())
    requires_grad, frozen, states = vector(params[0]), vector(params[1]), vector(states)
    builder.StartObject(4)
    builder.PrependUOffsetTRelativeSlot(0, requires_grad, 0)
    builder.PrependUOffsetTRelativeSlot(1, frozen, 0)
    builder.PrependBoolSlot(3, external, False)
    module = builder.EndObject()
    builder.StartObject(4)
    builder.PrependUOffsetTRelativeSlot(3, states, 0)
    builder.PrependInt64Slot(1, data.step, 0)
    group = vector([builder.EndObject()])
    builder.StartObject(4)
    builder.PrependInt32Slot(0, 2, 0)
    builder.PrependUOffsetTRelativeSlot(1, module, 0)
    builder.PrependUOffsetTRelativeSlot(2, group, 0)
    builder.Finish(builder.EndObject(), file_identifier=ort_checkpoint.IDENTIFIER)
    return bytes(builder.Output()), bytes(blob)
