"""bench/instructions.py on RISC-V: count.c reads minstret, which QEMU drives from its instruction
clock under -icount, so the count per step must agree with QEMU's trace of every instruction the
firmware executes. riscv32-hf, for the trace's length (soft float runs 18 times as many)."""

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from edgetrain import artifacts, targets
from models import mlp

BENCH = Path(__file__).parents[2] / "bench"
TARGET = "riscv32-hf"


def bench_instructions():
    spec = importlib.util.spec_from_file_location("bench_instructions", BENCH / "instructions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def executed_instructions(build: Path, icount: str) -> int:
    """Every instruction the firmware in `build` executes, from QEMU's trace with one instruction
    per translation block (independent of minstret). The trace goes to a file of its own: on the
    emulator's stdout, the firmware's output would land inside the trace's lines. Under `icount`
    too, so minstret, which the firmware prints, reads the same in every run: on the host's clock
    its digits, and the instructions that print them, vary with the machine's load."""
    run = targets.make(
        f"TARGET={TARGET}",
        "BUILD=.",
        "MODELS=model",
        "run",
        f"QEMU_FLAGS={icount} -singlestep -d exec,nochain -D trace.log",
        cwd=build,
    )
    assert run.returncode == 0, run.stderr
    with open(build / "trace.log") as trace:
        return sum(line.startswith("Trace ") for line in trace)


def test_minstret_count_agrees_with_a_trace(tmp_path, figure):
    missing = targets.load(TARGET).missing()
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{TARGET} tools missing: {missing}")
    instructions = bench_instructions()
    ours = artifacts.generate_artifacts(mlp(batch=1), artifact_directory=tmp_path / "mlp")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((1, 8), dtype=np.float32))
    np.save(tmp_path / "y.npy", np.array([2]))
    counted = instructions.count(tmp_path, ours, 1, TARGET)
    traced = [
        executed_instructions(instructions.firmware(tmp_path, ours, steps, TARGET), instructions.ICOUNT)
        for steps in (1, 2)
    ]
    figure(f"{counted:,} instructions per step of the MLP on {TARGET}, {traced[1] - traced[0]:,} traced")
    # The second firmware runs one step more; printing the figure costs the same to a few instructions.
    assert abs((traced[1] - traced[0]) - counted) < 1e-3 * counted
    assert counted > 1000
