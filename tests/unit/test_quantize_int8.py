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
from edgetrain.frontend.quantize import fold_batchnorm, quantize_int8


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
    # the logits stay float; the Conv's output is quantized after its Relu
    assert set(q) == {"conv.weight", "fc.weight", "x", "r", "f"}
    codes = [q[name].output[0] for name in ("x", "r", "f")]
    quantized.opset_import[0].version = 19  # the same QuantizeLinear, in the oldest form onnx.reference runs
    evaluator = ReferenceEvaluator(quantized)
    seen = [evaluator.run(codes, {"x": batch}) for batch in CALIBRATION]
    for i in range(len(codes)):
        values = np.concatenate([s[i].ravel() for s in seen])
        assert values.dtype == np.int8
        # the range ends at the extremes the calibration reached (0 always inside it)
        assert values.min() <= -127  # ReLU's 0 is the lowest code
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
    assert "train quantization-aware" not in capsys.readouterr().err  # float weights: no integers to copy
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    assert "needs calibration_data" in capsys.readouterr().err


def _conv_bn_model() -> onnx.ModelProto:
    """Two Conv -> BatchNormalization (inference) -> Relu layers, the first Conv without a bias, and
    a third Conv whose output a BatchNormalization and the model's output both read."""
    rng = np.random.default_rng(1)
    inits = {"w1": rng.normal(size=(4, 2, 3, 3)), "w2": rng.normal(size=(3, 4, 1, 1)), "b2": rng.normal(size=3)}
    inits["w3"] = rng.normal(size=(3, 3, 1, 1))
    for bn, channels in (("bn1", 4), ("bn2", 3), ("bn3", 3)):
        inits.update(
            {
                f"{bn}.scale": rng.uniform(0.5, 2, channels),
                f"{bn}.beta": rng.normal(size=channels),
                f"{bn}.mean": rng.normal(size=channels),
                f"{bn}.var": rng.uniform(0.1, 3, channels),
            }
        )
    params = {bn: [f"{bn}.{p}" for p in ("scale", "beta", "mean", "var")] for bn in ("bn1", "bn2", "bn3")}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", *params["bn1"]], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("BatchNormalization", ["c2", *params["bn2"]], ["n2"]),
        helper.make_node("Conv", ["n2", "w3"], ["c3"]),
        helper.make_node("BatchNormalization", ["c3", *params["bn3"]], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "convbn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 5, 5])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 5, 5]) for n in ("y", "c3")],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_batchnorm_after_a_conv_is_folded_into_it():
    model = _conv_bn_model()
    folded = onnx.ModelProto.FromString(model.SerializeToString())
    fold_batchnorm(folded.graph)
    onnx.checker.check_model(folded, full_check=True)
    # bn1 (Conv without a bias) and bn2 fold; bn3 stays, as the model also outputs its Conv's result
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Relu", "Conv", "Conv", "BatchNormalization"]
    assert {i.name for i in folded.graph.initializer} == {"w1", "bn1.beta", "w2", "b2", "w3"} | {
        f"bn3.{p}" for p in ("scale", "beta", "mean", "var")
    }
    x = np.random.default_rng(2).normal(size=(2, 2, 5, 5)).astype(np.float32)
    for before, after in zip(
        ReferenceEvaluator(model).run(None, {"x": x}), ReferenceEvaluator(folded).run(None, {"x": x})
    ):
        np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-5)
    quantized = quantize_int8(model, [x])
    assert sum(n.op_type == "BatchNormalization" for n in quantized.graph.node) == 1
    assert {"w1", "w2"} <= set(_quantizers(quantized))  # the folded weights are the ones quantized


def test_batchnorm_is_left_where_folding_would_change_another_layer():
    model = _conv_bn_model()
    shared = helper.make_node("Conv", ["x", "w1"], ["c0"], pads=[1, 1, 1, 1])  # w1 read twice
    model.graph.node.insert(0, shared)
    model.graph.output.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, [2, 4, 5, 5]))
    training = next(n for n in model.graph.node if n.output[0] == "n2")
    training.attribute.append(helper.make_attribute("training_mode", 1))
    fold_batchnorm(model.graph)
    assert sum(n.op_type == "BatchNormalization" for n in model.graph.node) == 3


def _layer_before_gemm(node: onnx.NodeProto, x_shape: list[int], extra, logits: list[int]) -> onnx.ModelProto:
    """x -> node -> Flatten -> Gemm: the Gemm's input, the node's output, is calibrated."""
    graph = helper.make_graph(
        [node, helper.make_node("Flatten", ["y"], ["f"]), helper.make_node("Gemm", ["f", "w"], ["logits"], transB=1)],
        "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits)],
        list(extra),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _calibrated_scale(model: onnx.ModelProto, batches) -> float:
    """The scale quantize="int8" gives the Gemm's input."""
    quantized = quantize_int8(model, batches)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    return float(inits[_quantizers(quantized)["f"].input[1]])


def test_calibration_runs_the_ops_onnx_reference_gets_wrong():
    """onnx.reference pads a stride-1 MaxPool twice under ceil_mode (GoogLeNet's pooling branches)
    and wants GatherElements' indices as long as the data (DeBERTa's relative positions): the
    calibration runs them as PyTorch computes them."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    batches = [rng.normal(size=(2, 1, 6, 6)).astype(np.float32) for _ in range(2)]
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1)
    w = numpy_helper.from_array(rng.normal(size=(3, 36)).astype(np.float32), "w")
    pooled = [torch.nn.functional.max_pool2d(torch.from_numpy(b), 3, 1, 1, ceil_mode=True).numpy() for b in batches]
    assert pooled[0].shape == (2, 1, 6, 6)
    expected = (max(p.max() for p in pooled) - min(0, min(p.min() for p in pooled))) / 255
    model = _layer_before_gemm(pool, [2, 1, 6, 6], [w], [2, 3])
    assert _calibrated_scale(model, batches) == pytest.approx(expected, rel=1e-6)

    indices = rng.integers(-4, 4, size=(1, 3))  # one row of three from data of 2 x 4
    gather = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    w = numpy_helper.from_array(rng.normal(size=(3, 3)).astype(np.float32), "w")
    batches = [rng.normal(size=(2, 4)).astype(np.float32) for _ in range(2)]
    model = _layer_before_gemm(gather, [2, 4], [w, numpy_helper.from_array(indices, "i")], [1, 3])
    positive = torch.from_numpy(indices % 4)
    gathered = [torch.gather(torch.from_numpy(b), 1, positive).numpy() for b in batches]
    expected = (max(0, max(g.max() for g in gathered)) - min(0, min(g.min() for g in gathered))) / 255
    assert _calibrated_scale(model, batches) == pytest.approx(expected, rel=1e-6)
