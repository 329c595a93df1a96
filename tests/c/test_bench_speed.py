"""The speed benchmark's machinery on the digits MLP at batch 1: every system trains the same model
(its first losses agree with PyTorch's, the C driver's bit for bit with the Python API's), FLOPs are
those counted by hand, and the instructions per step QEMU's clock counts agree with a trace of every
instruction executed. No timing is asserted: the figures depend on the machine."""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgetrain import targets
from edgetrain.demo import SIZES  # the MLP's layer widths

BENCH = Path(__file__).parents[2] / "bench"


@pytest.fixture(scope="module")
def speed():
    """bench/speed.py (its cases module as speed.cases), imported without its `models` module
    shadowing the tests' own."""
    saved = sys.modules.pop("models", None)
    path = list(sys.path)
    try:
        sys.path.insert(0, str(BENCH))
        import cases
        import speed

        speed.cases = cases
    finally:
        sys.path[:] = path
        sys.modules.pop("models", None)
        if saved is not None:
            sys.modules["models"] = saved
    return speed


def test_step_flops_are_the_products_multiply_accumulates(speed):
    # Conv 4->4 channels in 2 groups, 3x3 kernel, 6x6 -> 4x4, then Gemm 64 -> 5.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    w = onnx.numpy_helper.from_array(np.zeros((4, 2, 3, 3), np.float32), "w")
    v = onnx.numpy_helper.from_array(np.zeros((5, 64), np.float32), "v")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], group=2),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Flatten", ["r"], ["f"]),
            helper.make_node("Gemm", ["f", "v"], ["y"], transB=1),
        ],
        "g",
        [x],
        [y],
        [w, v],
    )
    conv_macs = (2 * 4 * 4 * 4) * (2 * 3 * 3)  # outputs x (input channels per group x kernel)
    gemm_macs = (2 * 5) * 64
    # The Conv reads the model's input: no input gradient, so forward and weight gradient only.
    assert speed.cases.step_flops(helper.make_model(graph)) == 2 * conv_macs * 2 + 2 * gemm_macs * 3


def test_every_system_trains_the_same_model_and_its_flops_and_instructions_count(speed, tmp_path):
    case = speed.Case("mlp", 1, tmp_path / "mlp-1")
    counting = not targets.load(speed.instructions.TARGET).missing()
    systems, counts = speed.prepare([case], ["python", "c", "torch"], tmp_path, None, counting)
    results = speed.measure([case], systems, repeat=1, budget=0.01)[case.key]
    assert speed.disagreements([case], {case.key: results}) == []
    losses = {s: np.float32(results[s]["losses"]) for s in systems}
    np.testing.assert_array_equal(losses["python"], losses["c"])
    np.testing.assert_allclose(losses["python"], losses["torch"], rtol=1e-5)
    assert losses["python"][2] < losses["python"][0]  # the steps train
    assert results["python"]["rss_mb"] > results["c"]["rss_mb"] > 0  # the interpreter, numpy and onnx
    assert case.flops == 2 * SIZES[0] * SIZES[1] * 2 + 2 * SIZES[1] * SIZES[2] * 3  # first layer: no input gradient
    table = speed.tables([case], systems, {case.key: results}, None, {})
    assert f"| mlp | 1 | {results['python']['ms']:.3f} |" in table

    if not counting:
        pytest.skip(f"{speed.instructions.TARGET} tools missing")
    counted = counts[case.key]["c"]
    traced = [
        executed_instructions(speed.instructions.firmware(case.directory, case.ours("c"), steps)) for steps in (1, 2)
    ]
    # The second firmware runs one step more; printing the figure costs the same to a few instructions.
    assert abs((traced[1] - traced[0]) - counted) < 1e-3 * counted


def executed_instructions(build: Path) -> int:
    """Every instruction the firmware in `build` executes, from QEMU's trace with one instruction
    per translation block (independent of the clock count.c reads)."""
    trace = targets.make(
        "TARGET=cortex-m4",
        "BUILD=.",
        "MODELS=model",
        "run",
        "QEMU_FLAGS=-singlestep -d exec,nochain -D /dev/stdout",
        cwd=build,
    )
    assert trace.returncode == 0, trace.stderr
    return trace.stdout.count("\nTrace ") + trace.stdout.startswith("Trace ")
