"""quantize="int8" (edgetrain.frontend.quantize): the scales it chooses, checked on the QDQ model it
writes under onnx.reference, and its one-line refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgetrain import artifacts
from edgetrain.cli import main
from edgetrain.errors import EdgetrainError
from edgetrain.frontend.quantize import quantize_int8


def _model() -> onnx.ModelProto:
    """Conv -> Relu -> Flatten -> Gemm, batch 2 of 1x4x4 images."""
    rng = np.random.default_rng(0)
    inits = {
        "conv.weight": rng.normal(size=(3, 1, 3, 3)) * np.array([1.0, 0.1, 3.0]).reshape(3, 1, 1, 1),
        "conv.bias": rng.normal(size=3),
        "fc.weight": rng.normal(size=(5, 48)),
        "fc.bias": rng.normal(size=5),
    }
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 4, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 5])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


CALIBRATION = [np.random.default_rng(i).normal(size=(2, 1, 4, 4)).astype(np.float32) for i in range(3)]


def _quantizers(model) -> dict[str, onnx.NodeProto]:
    return {n.input[0]: n for n in model.graph.node if n.op_type == "QuantizeLinear"}


def test_weights_are_symmetric_int8_per_output_channel():
    model = _model()
    quantized = quantize_int8(model, CALIBRATION)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    q = _quantizers(quantized)
    for name, axis in (("conv.weight", 0), ("fc.weight", 0)):
        node = q[name]
        assert helper.get_attribute_value(node.attribute[0]) == axis
        weight = inits[name]
        peak = np.abs(weight).reshape(weight.shape[0], -1).max(axis=1)
        np.testing.assert_array_equal(inits[node.input[1]], (peak / 127).astype(np.float32))
        assert inits[node.input[2]].dtype == np.int8 and not inits[node.input[2]].any()
    assert model.graph.node[0].op_type == "Conv"  # the caller's model is left as it was


def test_activations_cover_the_calibration_range_per_tensor():
    quantized = quantize_int8(_model(), CALIBRATION)
    q = _quantizers(quantized)
    assert set(q) == {"conv.weight", "fc.weight", "x", "c", "f"}  # the logits stay float
    codes = [q[name].output[0] for name in ("x", "c", "f")]
    quantized.opset_import[0].version = 19  # the same QuantizeLinear, in the oldest form onnx.reference runs
    evaluator = ReferenceEvaluator(quantized)
    seen = [evaluator.run(codes, {"x": batch}) for batch in CALIBRATION]
    for i, name in enumerate(("x", "c", "f")):
        values = np.concatenate([s[i].ravel() for s in seen])
        assert values.dtype == np.int8
        # the range ends at the extremes the calibration reached (0 always inside it)
        assert values.min() <= -127 or name == "f"  # ReLU's outputs are never negative
        assert values.max() >= 126


def test_refusals_are_one_line(tmp_path):
    with pytest.raises(EdgetrainError, match="needs calibration_data"):
        quantize_int8(_model(), None)
    with pytest.raises(EdgetrainError, match="calibration batch 0 does not run through the model"):
        quantize_int8(_model(), [np.zeros((3, 2), np.float32)])
    with pytest.raises(EdgetrainError, match="quantizes to 'int8'"):
        artifacts.generate_artifacts(
            _model(), artifact_directory=tmp_path, quantize="int4", calibration_data=CALIBRATION
        )
    with pytest.raises(EdgetrainError, match="calibration_data calibrates quantize='int8'"):
        artifacts.generate_artifacts(_model(), artifact_directory=tmp_path, calibration_data=CALIBRATION)


def test_command_line_quantizes_with_calibration_batches(tmp_path, capsys):
    onnx.save(_model(), tmp_path / "net.onnx")
    np.savez(tmp_path / "calibration.npz", x=np.stack(CALIBRATION))
    argv = ["compile", str(tmp_path / "net.onnx"), "-o", str(tmp_path / "out"), "--quantize", "int8"]
    assert main([*argv, "--calibration", str(tmp_path / "calibration.npz")]) == 0
    written = onnx.load(tmp_path / "out" / "eval_model.onnx")
    assert {n.op_type for n in written.graph.node} >= {"QuantizeLinear", "DequantizeLinear"}
    assert "train as float master copies" not in capsys.readouterr().err  # float weights: no integers to copy
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    assert "needs calibration_data" in capsys.readouterr().err
