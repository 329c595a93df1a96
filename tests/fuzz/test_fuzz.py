"""libFuzzer on the generated checkpoint loader (fuzz_checkpoint.c): 60 seconds in CI, seeded with
valid checkpoints of a model that has every kind of stored tensor (trainable, frozen, BatchNorm
buffers) and AdamW state. Longer runs: `python tests/fuzz/test_fuzz.py SECONDS` (README.md here).
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).parent
CI_SECONDS = 60


def bn_model():
    """x -> Gemm (frozen bias) -> BatchNormalization (running statistics are buffers) -> Relu -> Gemm."""
    rng = np.random.default_rng(0)

    def init(name, shape, low=-0.5, high=0.5):
        return numpy_helper.from_array(rng.uniform(low, high, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Gemm", ["x", "fc0.weight", "fc0.bias"], ["h"], transB=1, name="fc0"),
        helper.make_node(
            "BatchNormalization",
            ["h", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
            ["hn", "bn.mean_out", "bn.var_out"],
            training_mode=1,
            name="bn",
        ),
        helper.make_node("Relu", ["hn"], ["hr"], name="relu"),
        helper.make_node("Gemm", ["hr", "fc1.weight", "fc1.bias"], ["logits"], transB=1, name="fc1"),
    ]
    inits = [
        init("fc0.weight", (6, 5)),
        init("fc0.bias", (6,)),
        init("bn.scale", (6,), 0.5, 1.5),
        init("bn.bias", (6,)),
        init("bn.mean", (6,)),
        init("bn.var", (6,), 0.5, 1.5),
        init("fc1.weight", (3, 6)),
        init("fc1.bias", (3,)),
    ]
    graph = helper.make_graph(
        nodes,
        "fuzz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def build(work: Path) -> tuple[Path, Path]:
    """(fuzzer executable, seed corpus directory)."""
    from edgetrain import api, artifacts

    out = artifacts.generate_artifacts(bn_model(), artifact_directory=work / "artifacts", frozen_params=["fc0.bias"])
    seeds = work / "seeds"
    seeds.mkdir()
    shutil.copy(out / "checkpoint", seeds / "initial")
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    opt = api.Optimizer(out / "optimizer_model.onnx", module)
    rng = np.random.default_rng(1)
    for _ in range(2):
        module(rng.normal(size=(4, 5)).astype(np.float32), rng.integers(0, 3, 4))
        opt.step()
    state.properties.update(epoch=2, name="seed", loss=0.5)
    api.CheckpointState.save_checkpoint(state, seeds / "trained", include_optimizer_state=True)
    api.CheckpointState.save_checkpoint(state, seeds / "trained_without_optimizer_state")
    exe = work / "fuzz_checkpoint"
    result = subprocess.run(
        [
            "clang",
            "-std=c99",
            "-g",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsanitize=fuzzer,address,undefined",
            "-fno-sanitize-recover=all",
            "-I",
            str(out),
            str(HERE / "fuzz_checkpoint.c"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(
            "building the fuzzer failed (libFuzzer ships in Debian's libclang-rt-14-dev):\n" + result.stderr[-3000:]
        )
    return exe, seeds


def fuzz(work: Path, seconds: int) -> dict[str, int]:
    """Run the fuzzer; returns libFuzzer's final statistics. Raises on any finding."""
    exe, seeds = build(work)
    corpus = work / "corpus"
    corpus.mkdir()
    result = subprocess.run(
        [
            str(exe),
            str(corpus),
            str(seeds),
            f"-max_total_time={seconds}",
            "-max_len=4096",
            "-timeout=10",
            # libFuzzer's RSS is the process's peak, which Linux carries over from the pytest worker
            # that started it (a worker that trained a zoo model reports gigabytes before one run):
            # its RSS limit would stop a clean run, so the limit is on each allocation instead.
            "-rss_limit_mb=0",
            "-malloc_limit_mb=2048",
            "-print_final_stats=1",
            f"-artifact_prefix={work}/",
        ],
        capture_output=True,
        text=True,
        env={"ASAN_OPTIONS": "detect_leaks=1", "PATH": "/usr/bin:/bin"},
    )
    stats = {k: int(v) for k, v in re.findall(r"^stat::(\w+):\s+(\d+)", result.stderr, re.M)}
    cov = re.findall(r"cov: (\d+) ft: (\d+)", result.stderr)
    if cov:
        stats["cov"], stats["ft"] = map(int, cov[-1])
    stats["corpus_files"] = len(list(corpus.iterdir()))
    if result.returncode != 0:
        raise AssertionError(f"the fuzzer found a problem (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return stats


@pytest.mark.skipif(
    shutil.which("clang") is None,
    reason="clang not found: install the Debian packages clang and libclang-rt-14-dev (libFuzzer)",
)
def test_fuzz_checkpoint_loader(tmp_path):
    stats = fuzz(tmp_path, CI_SECONDS)
    print(f"libFuzzer, {CI_SECONDS} s: {stats}")
    assert stats["number_of_executed_units"] > 1000


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(HERE.parent))
    with tempfile.TemporaryDirectory() as tmp:
        seconds = int(sys.argv[1]) if len(sys.argv) > 1 else CI_SECONDS
        print(f"libFuzzer, {seconds} s: {fuzz(Path(tmp), seconds)}")
