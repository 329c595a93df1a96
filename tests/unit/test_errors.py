"""Bad input gets one clear line naming every problem; the CLI prints it and exits 2."""

import contextlib
import io
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import EdgetrainError, artifacts
from edgetrain.cli import main
from edgetrain.optim import OptimizerSpec, OptimType
from models import mlp


def model_with(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def unsupported_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    nodes = [
        helper.make_node("Hardmax", ["x"], ["a"], name="hardmax_a"),
        helper.make_node("Hardmax", ["a"], ["b"], name="hardmax_b"),
        helper.make_node("LpNormalization", ["b"], ["c"], name="lp_norm"),
        helper.make_node("Mul", ["c", "w"], ["y"], name="mul"),
    ]
    return model_with(nodes, [x], [y], [w])


def lstm_with_projection_dropped():
    """An LSTM of 12 units with a projection to 6, as torch's dynamo exporter writes it: hidden_size
    6 without the projection, W and R still 4 x 12 rows."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(1, 48, 5)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.normal(size=(1, 48, 6)).astype(np.float32), "R")
    return model_with(
        [helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm", hidden_size=6)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 1, 2, 6])],
        [w, r],
    )


def loop_over_run_time_values():
    """A Loop whose trip count and condition are constants and whose body reads the model's input,
    as the TorchScript exporter writes an EmbeddingBag: not folded into a constant, refused as an op."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["x", "x"], ["twice"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("twice", TensorProto.FLOAT, [2, 3]),
        ],
    )
    return model_with(
        [helper.make_node("Loop", ["trips", "cond"], ["ys"], name="loop", body=body)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("ys", TensorProto.FLOAT, [2, 2, 3])],
        [numpy_helper.from_array(np.array(2, np.int64), "trips"), numpy_helper.from_array(np.array(True), "cond")],
    )


CASES = {
    "loop over run-time values": (loop_over_run_time_values, {}, ["unsupported ops", "Loop", "'loop'"]),
    "unsupported ops": (
        unsupported_model,
        {},
        ["unsupported ops", "Hardmax", "'hardmax_a'", "'hardmax_b'", "LpNormalization", "'lp_norm'"],
    ),
    "unknown domain": (
        lambda: helper.make_model(
            helper.make_graph(
                [
                    helper.make_node("FusedThing", ["x"], ["a"], domain="com.example", name="fused"),
                    helper.make_node("Relu", ["a"], ["y"], name="relu"),
                ],
                "m",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
            ),
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
        ),
        {},
        ["unsupported ops", "com.example.FusedThing", "'fused'"],
    ),
    "dynamic non-batch axis": (
        lambda: model_with(
            [helper.make_node("Relu", ["x"], ["y"])],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "T"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "T"])],
        ),
        {"batch_size": 2, "defer_free_dims": False},
        ["dynamic shape", "'x' axis 1 (T)"],
    ),
    "int8 input": (
        lambda: model_with(
            [
                helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
                helper.make_node("Mul", ["xf", "w"], ["y"]),
            ],
            [helper.make_tensor_value_info("x", TensorProto.INT8, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
            [numpy_helper.from_array(np.ones(2, np.float32), "w")],
        ),
        {},
        ["input 'x'", "int8", "float32, int32, int64"],
    ),
    "int8 moved": (  # the C keeps int8 in a byte, which only QuantizeLinear and DequantizeLinear read
        lambda: model_with(
            [
                helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                helper.make_node("Reshape", ["q", "shape"], ["r"], name="reshape_q"),
                helper.make_node("DequantizeLinear", ["r", "s", "z"], ["d"]),
                helper.make_node("Mul", ["d", "w"], ["y"]),
            ],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
            [
                numpy_helper.from_array(np.float32(0.1), "s"),
                numpy_helper.from_array(np.int8(0), "z"),
                numpy_helper.from_array(np.array([6], np.int64), "shape"),
                numpy_helper.from_array(np.ones(6, np.float32), "w"),
            ],
            opset=19,
        ),
        {},
        ["'reshape_q' (Reshape) reads int8 'q'", "by QuantizeLinear and DequantizeLinear only"],
    ),
    "unknown requires_grad": (
        mlp,
        {"batch_size": 4, "requires_grad": ["fc0.weight", "nope"]},
        ["unknown initializer", "'nope'"],
    ),
    "unknown frozen": (mlp, {"batch_size": 4, "frozen_params": ["fc9.bias"]}, ["unknown initializer", "'fc9.bias'"]),
    "old opset": (lambda: mlp(opset=6), {"batch_size": 4}, ["opset 6", "opset 7 or newer"]),
    "rnn operand shape": (lstm_with_projection_dropped, {}, ["LSTM node 'lstm'", "input 1 'W'", "[1, 24, 5]"]),
    "scatter overwriting twice": (
        lambda: model_with(
            [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="index_add", axis=1)],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
            [
                numpy_helper.from_array(np.array([[0, 1, 1], [2, 3, 2]], np.int64), "i"),
                numpy_helper.from_array(np.ones((2, 3), np.float32), "u"),
            ],
        ),
        {},
        ["'index_add' (ScatterElements)", "more than once with reduction 'none'"],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_generate_artifacts_error(tmp_path, case):
    make, kwargs, fragments = CASES[case]
    with pytest.raises(EdgetrainError) as err:
        artifacts.generate_artifacts(make(), artifact_directory=tmp_path, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def cli(*args) -> subprocess.CompletedProcess:
    """The command line with `args`, run in this process: what it prints and its exit status.
    (tests/unit/test_malformed_corpus.py runs it as its own process.)"""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([str(a) for a in args])
        except SystemExit as exit:
            status = exit.code
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("case", CASES)
def test_cli_error_is_one_line_exit_2(tmp_path, case):
    make, kwargs, fragments = CASES[case]
    onnx.save(make(), tmp_path / "m.onnx")
    args = ["compile", tmp_path / "m.onnx", "-o", tmp_path / "out"]
    if "batch_size" in kwargs:
        args += ["--batch-size", kwargs["batch_size"]]
    for flag, key in (("--requires-grad", "requires_grad"), ("--frozen", "frozen_params")):
        if key in kwargs:
            args += [flag, *kwargs[key]]
    result = cli(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgetrain: error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# Settings out of range, or given where they change nothing: (generate_artifacts' arguments, the
# same on the command line or None where it cannot say it, what the one line says).
CE = {"batch_size": 4, "loss": artifacts.LossType.CrossEntropyLoss}
OPTION_CASES = {
    "nan learning rate": ({**CE, "learning_rate": float("nan")}, ["--lr", "nan"], ["learning rate", ">= 0", "nan"]),
    "negative learning rate": ({**CE, "learning_rate": -0.1}, ["--lr", "-0.1"], ["learning rate", ">= 0", "-0.1"]),
    "learning rate past float32": ({**CE, "learning_rate": 1e39}, ["--lr", "1e39"], ["learning rate", "finite"]),
    "negative momentum": (
        {**CE, "optimizer": "SGD", "momentum": -0.5},
        ["--optimizer", "SGD", "--momentum", "-0.5"],
        ["momentum must be a finite number >= 0", "-0.5"],
    ),
    "negative weight decay": ({**CE, "weight_decay": -1.0}, ["--weight-decay", "-1"], ["weight_decay", ">= 0"]),
    "negative max_grad_norm": ({**CE, "max_grad_norm": -1.0}, ["--max-grad-norm", "-1"], ["max_grad_norm", "> 0"]),
    "ignore_index with MSE": (
        {"batch_size": 4, "loss": artifacts.LossType.MSELoss, "ignore_index": 2},
        ["--loss", "MSELoss", "--ignore-index", "2"],
        ["ignore_index", "CrossEntropyLoss's", "not MSELoss's"],
    ),
    "fractional ignore_index": ({**CE, "ignore_index": 2.5}, None, ["ignore_index must be an int32", "2.5"]),
    "ignore_index past int32": ({**CE, "ignore_index": 2**40}, None, ["ignore_index must be an int32"]),
    "nan class weight": ({**CE, "class_weights": [1.0, float("nan"), 1.0]}, None, ["class_weights must be finite"]),
    "frozen_params as a string": ({**CE, "frozen_params": "fc0.bias"}, None, ["list of parameter names", "'fc0.bias'"]),
}


@pytest.mark.parametrize("case", OPTION_CASES)
def test_a_setting_out_of_range_is_refused_in_one_line(tmp_path, case):
    kwargs, flags, fragments = OPTION_CASES[case]
    with pytest.raises(EdgetrainError) as err:
        artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "api", **kwargs)
    assert "\n" not in str(err.value) and all(f in str(err.value) for f in fragments), str(err.value)
    assert not (tmp_path / "api").exists()
    if flags is not None:
        onnx.save(mlp(), tmp_path / "m.onnx")
        result = cli("compile", tmp_path / "m.onnx", "-o", tmp_path / "cli", "--batch-size", 4, *flags)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert all(f in result.stderr for f in fragments), result.stderr


@pytest.mark.parametrize(
    "hyper, fragment",
    [
        ({"beta1": 1.0}, "beta1 must be a finite number >= 0 and < 1, got 1.0"),
        ({"beta2": float("nan")}, "beta2 must be"),
        ({"eps": -1e-8}, "eps must be a finite number >= 0"),
    ],
)
def test_adamw_hyperparameters_out_of_range_are_a_problem(hyper, fragment):
    """AdamW's betas and eps, which generate_artifacts takes at their defaults, as torch.optim.AdamW bounds them."""
    assert fragment in OptimizerSpec(OptimType.AdamW, **hyper).problem()
    assert OptimizerSpec(OptimType.AdamW).problem() is None


def test_unfixed_dimension_names_every_fix_in_the_interfaces_spelling(tmp_path):
    model = model_with(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "T"])],
    )
    with pytest.raises(EdgetrainError, match=re.escape("dim_values={'T': SIZE} or dim_values={'x:1': SIZE}")):
        artifacts.generate_artifacts(model, artifact_directory=tmp_path, batch_size=2, defer_free_dims=False)
    with pytest.raises(EdgetrainError, match=re.escape("dim_values={'T': SIZE}")):  # a device's sizes are needed
        artifacts.generate_artifacts(model, artifact_directory=tmp_path, batch_size=2, target="cortex-m4")
    onnx.save(model, tmp_path / "m.onnx")
    result = cli("compile", tmp_path / "m.onnx", "-o", tmp_path / "out", "--batch-size", 2)
    assert "--dim T=SIZE or --dim x:1=SIZE" in result.stderr and "dim_values" not in result.stderr


def test_dim_values_fix_dimensions_by_name_and_by_input_axis(tmp_path):
    model = model_with(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("ReduceSum", ["h"], ["y"], keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "T", "U"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    out = artifacts.generate_inference(model, tmp_path / "a", dim_values={"T": 3, "x:2": 5})
    assert "15" in (out / "model.h").read_text() or "30" in (out / "model.c").read_text()
    with pytest.raises(EdgetrainError, match="names no symbolic input dimension: 'V'.*'T', 'U'"):
        artifacts.generate_inference(model, tmp_path / "b", dim_values={"T": 3, "U": 5, "V": 1})
    onnx.save(model, tmp_path / "m.onnx")
    # The shapes fixed, the model compiles: its output is the loss (--loss none), and with no
    # parameter its trainer trains nothing, as ONNX Runtime's would; it still computes the loss.
    result = cli(
        "compile", tmp_path / "m.onnx", "-o", tmp_path / "c", "--loss", "none", "--dim", "T=3", "--dim", "x:2=5"
    )
    assert result.returncode == 0, result.stderr
    assert "trains nothing" in result.stdout
    assert "et_params" not in (tmp_path / "c" / "model_weights.h").read_text()


@pytest.mark.parametrize("content", [b"", b"\x08\x07garbage\xff\xff", b"not a model at all"])
def test_unreadable_model_file(tmp_path, content):
    (tmp_path / "bad.onnx").write_bytes(content)
    result = cli("compile", tmp_path / "bad.onnx", "-o", tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.startswith("edgetrain: error: ") and len(result.stderr.splitlines()) == 1


def test_missing_model_file(tmp_path):
    result = cli("compile", tmp_path / "absent.onnx", "-o", tmp_path / "out")
    assert result.returncode == 2
    assert "not found" in result.stderr
