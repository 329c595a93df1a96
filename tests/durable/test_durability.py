"""Nothing lost on the host: a checkpoint save killed at any moment or cut short by a full disk leaves
the previous checkpoint whole; a damaged build cache entry is rebuilt, never opened; processes that
build one model at once all succeed; and threads sharing a Module never run two of its C calls at once."""

import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from edgetrain import api, artifacts, checkpoint
from edgetrain.host import build

BATCH = 4
KILLS = 400  # each forks the test process, torch and all: about 0.1 s
MID_SAVE = KILLS // 4  # kills that must land inside a save for the test to mean anything
CUTS = 200
DAMAGES = 40


def _state(values: int, seed: int) -> api.CheckpointState:
    """A checkpoint state of `values` float32 parameters (4 bytes each), not bound to a trainer."""
    rng = np.random.default_rng(seed)
    arrays = [
        rng.normal(size=(values // 2,)).astype(np.float32),
        rng.normal(size=(values - values // 2,)).astype(np.float32),
    ]
    data = checkpoint.CheckpointData(
        fingerprint=seed,
        names=["a", "b"],
        kinds=[checkpoint.TRAINABLE] * 2,
        arrays=arrays,
        optimizer_state=[[np.zeros_like(a) for a in arrays]],
        step=seed,
        learning_rate=0.01,
    )
    return api.CheckpointState(data)


def _encoded(state: api.CheckpointState) -> bytes:
    return checkpoint.encode(state._snapshot(include_optimizer_state=True))


def _partials(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*.partial"))


def test_a_save_killed_at_any_moment_leaves_the_old_or_the_new_checkpoint(tmp_path, figure):
    """SIGKILL at a random moment of a loop saving two 4 MB checkpoints (parameters and AdamW-sized
    optimizer state) in turn: the file is always bit-identical to one of the two, which both load;
    the kill often lands inside a save (its temporary file is left behind), which the next save
    clears away."""
    states = [_state(500_000, seed) for seed in (1, 2)]
    encoded = [_encoded(s) for s in states]
    path = tmp_path / "checkpoint"
    start = time.perf_counter()
    for state in states:
        api.CheckpointState.save_checkpoint(state, path, include_optimizer_state=True)
    save_seconds = (time.perf_counter() - start) / 2
    rng = random.Random(0)
    seen, mid_save, kills = Counter(), 0, 0
    # The share of kills inside a save is the share of the child's time between creating its temporary
    # file and renaming it, which the machine's load moves (encoding is CPU, the rest is disk): past
    # KILLS, more kills are drawn until MID_SAVE of them landed inside one, up to four times as many.
    while kills < KILLS or (mid_save < MID_SAVE and kills < 4 * KILLS):
        kills += 1
        ready, started = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child saves until it is killed; it never returns into pytest
            try:
                os.write(started, b"!")
                for i in range(10**9):
                    api.CheckpointState.save_checkpoint(states[i % 2], path, include_optimizer_state=True)
            finally:
                os._exit(1)
        # The moment is drawn from when the child starts saving, not from the fork, whose time
        # (the test process copied, torch and all) the machine's load moves.
        os.read(ready, 1)
        os.close(ready)
        os.close(started)
        time.sleep(rng.uniform(0, 2 * save_seconds))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raw = path.read_bytes()
        assert raw in encoded, "the checkpoint file is neither the old nor the new checkpoint"
        seen[encoded.index(raw)] += 1
        mid_save += bool(_partials(tmp_path))
    for raw in encoded:
        checkpoint.decode(raw)
    api.CheckpointState.save_checkpoint(states[0], path)  # clears the killed saves' temporary files
    assert _partials(tmp_path) == []
    figure(
        f"{kills} kills during saves of {len(encoded[0]) / 1e6:.1f} MB ({save_seconds * 1e3:.1f} ms each): "
        f"{mid_save} inside a save; the file was always whole: the first checkpoint {seen[0]} times, the second "
        f"{seen[1]}"
    )
    assert mid_save >= MID_SAVE, "too few kills landed inside a save for the test to mean anything"


def test_a_save_cut_short_by_a_full_disk_raises_and_keeps_the_old_checkpoint(tmp_path, figure):
    """A file-size limit (ulimit -f) cuts the save at a random offset: CheckpointError naming the path
    and the reason, the previous checkpoint still loads bit-identically, and no temporary file stays."""
    old, new = _state(100_000, 1), _state(100_000, 2)
    path = tmp_path / "checkpoint"
    api.CheckpointState.save_checkpoint(old, path, include_optimizer_state=True)
    before = path.read_bytes()
    size = len(_encoded(new))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    for offset in random.Random(0).sample(range(size), CUTS):
        resource.setrlimit(resource.RLIMIT_FSIZE, (offset, hard))  # Python ignores SIGXFSZ: writes fail EFBIG
        try:
            with pytest.raises(checkpoint.CheckpointError, match=f"cannot save checkpoint {path}: File too large"):
                api.CheckpointState.save_checkpoint(new, path, include_optimizer_state=True)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert path.read_bytes() == before
        assert _partials(tmp_path) == []
    loaded = api.CheckpointState.load_checkpoint(path)
    assert all(np.array_equal(p.data, q.data) for p, q in zip(loaded.parameters.values(), old.parameters.values()))
    figure(
        f"{CUTS} saves of {size:,} bytes cut at random offsets by a file-size limit: each raised CheckpointError, "
        "and the previous checkpoint loads bit-identically"
    )


def test_a_save_to_an_unwritable_place_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(checkpoint.CheckpointError, match=r"^cannot save checkpoint .*file/ck: Not a directory$"):
        api.CheckpointState.save_checkpoint(_state(10, 1), blocker / "ck")
    result = subprocess.run(
        [sys.executable, "-m", "edgetrain.cli", "compile", str(tmp_path / "nowhere.onnx"), "-o", str(blocker / "out")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Artifacts of two small models: the cache entry of the second is the first's impostor."""
    from models import mlp  # tests/models.py, on the path in pytest (this file also runs as a script)

    root = tmp_path_factory.mktemp("durable")
    first = artifacts.generate_artifacts(mlp(seed=1), artifact_directory=root / "first", batch_size=BATCH)
    second = artifacts.generate_artifacts(
        mlp(sizes=(8, 12, 3), seed=2), artifact_directory=root / "second", batch_size=BATCH
    )
    return first, second


def _module(directory: Path):
    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = api.Module(directory / "training_model.onnx", state)
    return module, api.Optimizer(directory / "optimizer_model.onnx", module)


def _train(directory: Path, steps: int = 3) -> np.ndarray:
    module, optimizer = _module(directory)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        module(rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH))
        optimizer.step()
        module.lazy_reset_grad()
    return module.get_contiguous_parameters()


def _entry(cache: Path, known: set[Path]) -> Path:
    """The one cache entry not in `known`."""
    (entry,) = set(cache.glob("*.so")) - known
    return entry


def test_a_damaged_cache_entry_is_rebuilt_and_trains_the_same(two_models, tmp_path, monkeypatch, figure):
    """Truncated, zeroed, deleted or replaced by another model's library, 40 times at random: the
    next Module checks the entry, rebuilds it, and trains bit-identically (a truncated library that
    was opened would die of SIGBUS; another model's would train something else)."""
    first, second = two_models
    monkeypatch.setenv("EDGETRAIN_CACHE", str(tmp_path))
    monkeypatch.setenv("EDGETRAIN_BUILD", "quick")  # a cache entry like any other; the test took 2/5 of its -O2 time
    reference = _train(first)
    entry = _entry(tmp_path, set())
    _train(second, steps=0)
    impostor = _entry(tmp_path, {entry}).read_bytes()
    good = entry.read_bytes()
    rng = random.Random(0)
    done = Counter()
    for _ in range(DAMAGES):
        damage = rng.choice(["truncate", "zero", "delete", "impostor"])
        if damage == "truncate":
            entry.write_bytes(good[: rng.randrange(len(good))])
        elif damage == "zero":
            start = rng.randrange(len(good))
            end = rng.randrange(start + 1, len(good) + 1)
            entry.write_bytes(good[:start] + bytes(end - start) + good[end:])
        elif damage == "delete":
            entry.unlink()
        else:
            entry.write_bytes(impostor)
        assert np.array_equal(_train(first), reference), damage
        assert entry.read_bytes() == good, "the rebuilt entry differs from the first build"
        done[damage] += 1
    figure(
        f"{DAMAGES} damaged cache entries rebuilt, each then training bit-identically: "
        + ", ".join(f"{n} {kind}" for kind, n in sorted(done.items()))
    )


def test_a_zeroed_range_inside_the_library_is_caught(two_models, tmp_path, monkeypatch):
    """The seal covers every byte: zeros over a few bytes in the middle of the library are enough."""
    first, _ = two_models
    monkeypatch.setenv("EDGETRAIN_CACHE", str(tmp_path))
    reference = _train(first)
    entry = _entry(tmp_path, set())
    good = bytearray(entry.read_bytes())
    good[len(good) // 2 : len(good) // 2 + 4] = bytes(4)
    entry.write_bytes(bytes(good))
    assert build._cached(entry, b"") is None
    assert np.array_equal(_train(first), reference)


CONCURRENT = 8


def test_processes_building_one_model_at_once_all_succeed(two_models, tmp_path, figure):
    """Eight processes load the same model into one empty cache at the same moment: each builds, one
    rename wins, and every one trains the same parameters."""
    first, _ = two_models
    env = {**os.environ, "EDGETRAIN_CACHE": str(tmp_path)}
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, str(first)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(CONCURRENT)
    ]
    results = [w.communicate(timeout=600) for w in workers]
    assert all(w.returncode == 0 for w in workers), [err.decode()[-500:] for _, err in results]
    assert len({out for out, _ in results}) == 1
    assert len(list(tmp_path.glob("*.so"))) == 1 and not list(tmp_path.glob("tmp*"))
    figure(f"{CONCURRENT} processes built one model into one empty cache at once: all succeeded, one entry")


def _batches(seed: int, count: int):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH)) for _ in range(count)]


THREADS, STEPS = 8, 40


def _run_threads(work) -> None:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_training_their_own_modules_match_sequential_runs(two_models, figure):
    first, _ = two_models
    batches = [_batches(i, STEPS) for i in range(THREADS)]

    def train(i: int, out: list) -> None:
        module, optimizer = _module(first)
        for x, y in batches[i]:
            module(x, y)
            optimizer.step()
            module.lazy_reset_grad()
        out[i] = module.get_contiguous_parameters()

    sequential, parallel = [None] * THREADS, [None] * THREADS
    for i in range(THREADS):
        train(i, sequential)
    _run_threads(lambda i: train(i, parallel))
    assert all(np.array_equal(s, p) for s, p in zip(sequential, parallel))
    figure(f"{THREADS} threads training {THREADS} modules: parameters bit-identical to {THREADS} sequential runs")


class _Watch:
    """Wraps a Module's C functions to record whether two ever ran at once (the C calls release the
    GIL; a short sleep inside each widens the window another thread would need)."""

    def __init__(self, module):
        self.inside, self.most, self.calls = 0, 0, 0
        self._count = threading.Lock()
        module._functions = {name: self._wrap(f) for name, f in module._functions.items()}

    def _wrap(self, function):
        def call(*args):
            with self._count:
                self.inside += 1
                self.calls += 1
                self.most = max(self.most, self.inside)
            time.sleep(0.0002)
            try:
                return function(*args)
            finally:
                with self._count:
                    self.inside -= 1

        return call


def _shared_training(module, optimizer, batches) -> None:
    def train(i: int) -> None:
        for x, y in batches[i]:
            with module.lock:  # one training step of three calls, which no other thread splits
                module(x, y)
                optimizer.step()
                module.lazy_reset_grad()

    _run_threads(train)


def test_threads_sharing_a_module_never_overlap_its_c_calls(two_models, figure):
    first, _ = two_models
    module, optimizer = _module(first)
    module.eval()
    x, y = _batches(0, 1)[0]
    expected = module(x, y)
    watch = _Watch(module)
    losses = []
    _run_threads(lambda i: losses.extend(module(x, y) for _ in range(STEPS)))
    assert watch.most == 1 and watch.calls == THREADS * STEPS
    assert all(loss == expected for loss in losses)

    module.train()
    batches = [_batches(i, STEPS // 4) for i in range(THREADS)]
    _shared_training(module, optimizer, batches)
    assert watch.most == 1
    assert optimizer._steps() == THREADS * (STEPS // 4)
    figure(
        f"{THREADS} threads sharing one module: {watch.calls} C calls, never two at once; "
        f"{optimizer._steps()} optimizer steps for {THREADS * (STEPS // 4)} steps taken"
    )


def test_the_watch_sees_overlap_without_the_lock(two_models):
    """The instrument can fail: with the module's lock replaced by a no-op, the threads' calls overlap."""
    first, _ = two_models
    module, _ = _module(first)
    module.eval()
    module.lock = _NoLock()
    watch = _Watch(module)
    x, y = _batches(0, 1)[0]
    _run_threads(lambda i: [module.infer(x) for _ in range(STEPS)])
    assert watch.most > 1


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":  # one of the concurrent builders: the trained parameters' bytes on stdout
    sys.stdout.buffer.write(_train(Path(sys.argv[1])).tobytes())
