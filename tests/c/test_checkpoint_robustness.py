"""A damaged checkpoint is refused with the right status (C) or CheckpointError (Python), and the
trainer's state stays exactly as it was: thousands of random corruptions through the C loader,
called directly, compared byte for byte with `Module._save(True)` before and after."""

import struct
import zlib

import numpy as np
import pytest

from edgetrain import api, artifacts, checkpoint
from models import mlp

BATCH = 4
CORRUPTIONS = 1500  # with a damaged CRC: the C must refuse every one
FORGED = 1500  # the CRC recomputed after the damage, so the parser behind it is exercised


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A trainer some steps into AdamW (parameters, moments, step and dropout counter all non-trivial),
    and its checkpoint with optimizer state and properties."""
    out = artifacts.generate_artifacts(
        mlp(dropout=0.25),
        artifact_directory=tmp_path_factory.mktemp("ck"),
        batch_size=BATCH,
        frozen_params=["fc0.bias"],
        learning_rate=0.05,
    )
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    opt = api.Optimizer(out / "optimizer_model.onnx", module)
    rng = np.random.default_rng(0)
    for _ in range(3):
        module(rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH))
        opt.step()
    state.properties.update(epoch=3, note="résumé", best=0.25)
    path = out / "trained_checkpoint"
    api.CheckpointState.save_checkpoint(state, path, include_optimizer_state=True)
    return out, module, path.read_bytes()


def load(module, raw: bytes) -> int:
    return module._lib_call("load_checkpoint", raw, len(raw))


def corrupt(raw: bytes, rng) -> bytes:
    """One random damage: truncation, bit flips, byte overwrites, insertion, deletion, appended bytes."""
    data = bytearray(raw)
    kind = rng.integers(6)
    if kind == 0:
        return bytes(data[: rng.integers(len(data))])
    if kind == 1:
        for _ in range(rng.integers(1, 4)):
            at = rng.integers(len(data))
            data[at] ^= 1 << rng.integers(8)
    elif kind == 2:
        for _ in range(rng.integers(1, 5)):
            at = rng.integers(len(data))
            data[at] = (data[at] + rng.integers(1, 256)) % 256
    elif kind == 3:
        at = rng.integers(len(data) + 1)
        data[at:at] = rng.integers(0, 256, rng.integers(1, 9), dtype=np.uint8).tobytes()
    elif kind == 4:
        at = rng.integers(len(data))
        del data[at : at + rng.integers(1, 9)]
    else:
        data += rng.integers(0, 256, rng.integers(1, 9), dtype=np.uint8).tobytes()
    return bytes(data)


def with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def test_random_corruptions_are_refused_and_change_nothing(trained):
    out, module, raw = trained
    assert load(module, raw) == api.OK
    before = module._save(True)
    rng = np.random.default_rng(2024)
    seen = {api.CORRUPT_CHECKPOINT: 0, api.WRONG_MODEL: 0}
    checked = 0
    while checked < CORRUPTIONS:
        bad = corrupt(raw, rng)
        if bad == raw:
            continue
        status = load(module, bad)
        assert status in seen, f"corruption accepted or misreported (status {status})"
        seen[status] += 1
        with pytest.raises(checkpoint.CheckpointError):
            checkpoint.decode(bad)
        assert module._save(True) == before
        checked += 1
    print(f"{checked} corruptions refused: {seen}")


def test_forged_crc_reaches_the_parser_which_never_half_loads(trained):
    """Damage behind a recomputed CRC is refused or loaded whole; Python raises nothing but
    CheckpointError on the same bytes."""
    out, module, raw = trained
    rng = np.random.default_rng(7)
    outcomes = {}
    for _ in range(FORGED):
        assert load(module, raw) == api.OK
        before = module._save(True)
        bad = with_crc(corrupt(raw[:-4], rng))
        status = load(module, bad)
        assert status in (api.OK, api.CORRUPT_CHECKPOINT, api.WRONG_MODEL)
        outcomes[status] = outcomes.get(status, 0) + 1
        if status != api.OK:
            assert module._save(True) == before
        try:
            checkpoint.decode(bad)
        except checkpoint.CheckpointError:
            pass
    print(f"{FORGED} forged checkpoints: {outcomes}")
    assert outcomes.get(api.CORRUPT_CHECKPOINT) and outcomes.get(api.WRONG_MODEL)


def header_field(raw: bytes, offset: int, fmt: str, value) -> bytes:
    body = bytearray(raw[:-4])
    struct.pack_into(fmt, body, offset, value)
    return with_crc(bytes(body))


CASES = {
    "truncated": (lambda raw, other: raw[: len(raw) // 2], api.CORRUPT_CHECKPOINT, "truncated|corrupt|not an"),
    "one bit flipped": (
        lambda raw, other: raw[:100] + bytes([raw[100] ^ 4]) + raw[101:],
        api.CORRUPT_CHECKPOINT,
        "CRC",
    ),
    "bit flipped in the CRC": (lambda raw, other: raw[:-1] + bytes([raw[-1] ^ 0x80]), api.CORRUPT_CHECKPOINT, "CRC"),
    "wrong version": (
        lambda raw, other: header_field(raw, 4, "<H", checkpoint.VERSION + 1),
        api.CORRUPT_CHECKPOINT,
        "version",
    ),
    "wrong magic": (lambda raw, other: with_crc(b"ETCX" + raw[4:-4]), api.CORRUPT_CHECKPOINT, "not an edgetrain"),
    "empty": (lambda raw, other: b"", api.CORRUPT_CHECKPOINT, "not an edgetrain"),
    "wrong model": (lambda raw, other: other, api.WRONG_MODEL, None),
    "wrong fingerprint": (lambda raw, other: header_field(raw, 8, "<Q", 12345), api.WRONG_MODEL, None),
}


@pytest.mark.parametrize("case", CASES)
def test_each_damage_has_its_status_and_exception(trained, tmp_path, case):
    out, module, raw = trained
    make, status, message = CASES[case]
    other = (
        artifacts.generate_artifacts(
            mlp(sizes=(8, 16, 3), seed=5), artifact_directory=tmp_path / "other", batch_size=BATCH
        )
        if case == "wrong model"
        else None
    )
    bad = make(raw, other and (other / "checkpoint").read_bytes())
    before = module._save(True)
    assert load(module, bad) == status
    assert module._save(True) == before
    (tmp_path / "bad").write_bytes(bad)
    if message:  # a checkpoint of another model is well formed: only the trainer can tell
        with pytest.raises(checkpoint.CheckpointError, match=message):
            api.CheckpointState.load_checkpoint(tmp_path / "bad")
    with pytest.raises(api.CheckpointError):
        api._check(load(module, bad), "load_checkpoint")
    if other:  # binding a Module to another model's checkpoint fails the same way
        with pytest.raises(api.CheckpointError, match="another model"):
            api.Module(out / "training_model.onnx", api.CheckpointState.load_checkpoint(other / "checkpoint"))
