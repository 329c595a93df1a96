"""Quantized models as onnxruntime's quantize_static writes them (QDQ: int8 weights and int32
biases that DequantizeLinear reads, QuantizeLinear -> DequantizeLinear around activations) compile,
compute what onnxruntime computes, train, and export a QDQ model with the trained integers that
onnxruntime runs."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgetrain import api, artifacts

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

# Many models, a few steps of each: built at -Og, to the default build's bits (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("quick_build")


BATCH = 4


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 6, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(6 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self, batches):
        self.batches = iter(batches)

    def get_next(self):
        return next(self.batches, None)


def _data(rng, n):
    """Inputs and labels a nearest-centroid rule gives: a task the model can learn in a few steps."""
    centroids = np.random.default_rng(7).normal(size=(10, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, size=n)
    return (centroids[labels] + 0.5 * rng.normal(size=(n, 1, 8, 8))).astype(np.float32), labels.astype(np.int64)


def _as_pt2e_exports_it(model: onnx.ModelProto) -> dict[str, str]:
    """Rewrites a QDQ model into the form of a PyTorch model quantized by torch.ao's pt2e flow and
    exported by dynamo: int8 weights named `_frozen_param<k>`, their scales and zero points float32
    and int64 initializers that Cast nodes give DequantizeLinear, each layer's module in its node's
    record. Returns {layer: its int8 weight's name}."""
    inits = {i.name: i for i in model.graph.initializer}
    names, casts = {}, []
    for k, dq in enumerate(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits):
        weight = inits[dq.input[0]]
        if weight.data_type != onnx.TensorProto.INT8:
            continue  # an int32 bias
        names[weight.name.split(".")[0]] = weight.name = f"_frozen_param{k}"
        for slot, (buffer, dtype, to) in enumerate(
            [
                (f"_scale_{k}", np.float32, onnx.TensorProto.FLOAT),
                (f"_zero_point_{k}", np.int64, onnx.TensorProto.INT8),
            ],
            start=1,
        ):
            value = numpy_helper.to_array(inits[dq.input[slot]]).astype(dtype)
            model.graph.initializer.append(numpy_helper.from_array(value, buffer))
            casts.append(onnx.helper.make_node("Cast", [buffer], [f"{buffer}__cast"], to=to))
            dq.input[slot] = f"{buffer}__cast"
        dq.input[0] = weight.name
    for cast in reversed(casts):  # first, as their inputs are initializers
        model.graph.node.insert(0, cast)
    read = {name for node in model.graph.node for name in node.input}
    for init in [i for i in model.graph.initializer if i.name not in read]:  # the replaced scales
        model.graph.initializer.remove(init)
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            module = node.name.split("/")[1]  # the TorchScript exporter's '/conv/Conv'
            node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=str(["", module, node.op_type.lower()]))
    return names


def _export_eval(net, path, dynamo: bool = False) -> None:
    """The export of `net` in eval mode (TorchScript's, or dynamo's), as a model is exported for deployment."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net.eval(), (torch.randn(BATCH, 1, 8, 8),), path, input_names=["x"], output_names=["logits"], dynamo=dynamo
        )


def _quantize_static(directory, rng, batches: int, per_channel: bool, data=_data) -> None:
    """directory/qdq.onnx from directory/float.onnx by quantize_static, calibrated on `batches`
    batches of `data`'s: int8 activations with per-channel weights, uint8 ones with per-tensor
    weights."""
    quantization.quantize_static(
        str(directory / "float.onnx"),
        str(directory / "qdq.onnx"),
        _Calibration([{"x": data(rng, BATCH)[0]} for _ in range(batches)]),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=per_channel,
        activation_type=quantization.QuantType.QInt8 if per_channel else quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
    )


@pytest.fixture(scope="module", params=["int8-per-channel", "uint8-per-tensor", "pt2e-form"])
def qdq_model(request, tmp_path_factory):
    """(the QDQ model's path, its output scale, {layer: its int8 weight's name}): quantize_static on a
    small CNN, calibrated on 8 batches (pt2e-form: rewritten as _as_pt2e_exports_it says)."""
    directory = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    _export_eval(_Net(), directory / "float.onnx")
    rng = np.random.default_rng(1)
    per_channel = request.param != "uint8-per-tensor"
    _quantize_static(directory, rng, 8, per_channel)
    model = onnx.load(directory / "qdq.onnx")
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert weights["conv.weight_quantized"].dtype == np.int8
    scale = float(weights[model.graph.node[-1].input[1]])
    names = {"conv": "conv.weight_quantized", "fc": "fc.weight_quantized"}
    if request.param == "pt2e-form":
        names = _as_pt2e_exports_it(model)
        onnx.save(model, directory / "qdq.onnx")
    return directory / "qdq.onnx", scale, names


def _trainer(path, out, notes: str | None = None):
    """(state, module) of the trainer compiled from `path` into `out`; with `notes`, a pattern the
    compile's ImportNote must match (without, its notes are not shown)."""
    with warnings.catch_warnings() if notes is None else pytest.warns(artifacts.ImportNote, match=notes):
        if notes is None:
            warnings.simplefilter("ignore")
        artifacts.generate_artifacts(
            str(path), artifact_directory=out, loss=artifacts.LossType.CrossEntropyLoss, batch_size=BATCH
        )
    state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
    module = api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
    return state, module


def sessions(path):
    """onnxruntime on the QDQ model: as written (float Q and DQ ops), which defines the model, and
    optimized (integer kernels). The optimized one is no reference everywhere: on x86 CPUs without
    VNNI, its u8 x s8 kernels add products in pairs that saturate at 16 bits (20 output steps off the
    model as written on such a machine), so tests hold the C to the model as written and show both."""
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), plain), ort.InferenceSession(str(path))


def _steps(a, b, scale) -> float:
    return float(np.abs(a - b).max() / scale)


def test_forward_is_onnxruntimes(qdq_model, tmp_path, figure):
    path, scale, _ = qdq_model
    state, module = _trainer(path, tmp_path / "out")
    assert {name for name, _ in state.parameters} == {"conv.weight", "conv.bias", "fc.weight", "fc.bias"}
    module.eval()
    as_written, optimized = sessions(path)
    rng = np.random.default_rng(2)
    worst = [0.0, 0.0]
    for _ in range(20):
        x = _data(rng, BATCH)[0]
        (ours,) = module.infer(x)
        worst[0] = max(worst[0], _steps(ours, as_written.run(None, {"x": x})[0], scale))
        worst[1] = max(worst[1], _steps(ours, optimized.run(None, {"x": x})[0], scale))
    figure(f"QDQ forward, output steps from onnxruntime: {worst[0]:g} (as written), {worst[1]:g} (integer kernels)")
    assert worst[0] <= 1 + 1e-3  # one step, as floats


def test_trains_and_exports_a_qdq_model_onnxruntime_runs(qdq_model, tmp_path, figure):
    path, scale, names = qdq_model
    state, module = _trainer(path, tmp_path / "out")
    optimizer = api.Optimizer(str(tmp_path / "out" / "optimizer_model.onnx"), module)
    rng = np.random.default_rng(3)
    x, y = _data(rng, 64)
    module.train()
    losses = []
    for _ in range(10):
        for i in range(0, 64, BATCH):
            losses.append(float(module(x[i : i + BATCH], y[i : i + BATCH])))
            optimizer.step()
            module.lazy_reset_grad()
    first, last = np.mean(losses[:16]), np.mean(losses[-16:])
    figure(f"QDQ training: mean loss {first:.3f} in the first epoch, {last:.3f} in the tenth")
    assert last < 0.6 * first

    module.export_model_for_inferencing(str(tmp_path / "inference.onnx"), ["logits"])
    exported = onnx.load(tmp_path / "inference.onnx")
    weights = {i.name: numpy_helper.to_array(i) for i in exported.graph.initializer}
    original = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    assert weights[names["conv"]].dtype == np.int8
    assert not np.array_equal(weights[names["fc"]], original[names["fc"]])
    module.eval()
    as_written, _ = sessions(tmp_path / "inference.onnx")
    worst = 0.0
    for i in range(0, 16, BATCH):
        (ours,) = module.infer(x[i : i + BATCH])
        worst = max(worst, _steps(ours, as_written.run(None, {"x": x[i : i + BATCH]})[0], scale))
    assert worst <= 1 + 1e-3  # one step, as floats


def test_int8_fine_tuning_is_within_a_point_of_float32(tmp_path, figure):
    """The acceptance of quantized training: a CNN pre-trained in PyTorch, fine-tuned to slanted
    digits with the same sparse update as float32 and as int8 (quantize="int8")."""
    pytest.importorskip("sklearn")
    from examples.personalization import quantized

    result = quantized.run(tmp_path)
    figure(
        "fine-tuning on slanted digits, float32 against int8 (with float32 masters, and QAS):\n"
        + quantized.table(result)
    )
    for kind in ("float32", "int8, QAS", "int8, float32 masters"):
        assert result[kind]["after"] > result[kind]["before"] + 0.2
    # Trained int8 weights stored as their integers (quantization-aware scaling) reach the accuracy
    # with stochastic rounding, in a quarter of the masters' bytes, as the masters do; rounding to
    # the nearest falls more than the point behind.
    qas, masters = result["int8, QAS"], result["int8, float32 masters"]
    assert (qas["update"], masters["update"]) == ("QAS, stochastic rounding", "float32 master")
    assert 4 * qas["int8_weight_bytes"] == masters["int8_weight_bytes"] > 0
    for kind in ("int8, QAS", "int8, float32 masters"):
        assert result[kind]["after"] >= result["float32"]["after"] - 0.01, kind
    assert result["float32"]["after"] - result["masters on grid, nearest"]["after"] > 0.01


def test_int8_keeps_saved_activations_in_a_byte(tmp_path, figure):
    """A Conv -> BatchNormalization (training form) -> ReLU network trained with its biases and
    classifier: the backward pass reads each BatchNormalization's input, which the int8 trainer keeps
    as int8 and dequantizes again there, where float32 keeps four bytes."""
    from examples.models.mlperf_tiny import export_training

    layers = []
    for c_in, c_out in ((1, 16), (16, 16), (16, 16)):
        layers += [torch.nn.Conv2d(c_in, c_out, 3, padding=1), torch.nn.BatchNorm2d(c_out), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    net.input_shape = (1, 16, 16)
    model, _ = export_training(net, batch=2)
    calibration = [np.random.default_rng(i).normal(size=(2, 1, 16, 16)).astype(np.float32) for i in range(2)]
    arena = {}
    for kind, options in (("float32", {}), ("int8", {"quantize": "int8", "calibration_data": calibration})):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = artifacts.generate_artifacts(
                model, artifact_directory=tmp_path / kind, update_policy="bias+last:1", batch_size=2, **options
            )
        arena[kind] = json.loads((out / "report.json").read_text())["arena_by_function_bytes"]["train_step"]
    figure(f"train_step arena, biases + classifier: float32 {arena['float32']:,} B, int8 {arena['int8']:,} B")
    assert "int8_t s8[" in (tmp_path / "int8" / "model.c").read_text()
    peak = json.loads((tmp_path / "int8" / "report.json").read_text())["functions"]["train_step"]
    by_type = peak["peak_bytes_by_kind_and_type"]["activation"]
    assert by_type["int8_t"] > 0 and sum(by_type.values()) == peak["peak_bytes_by_kind"]["activation"]
    assert arena["int8"] < 0.8 * arena["float32"]  # 0.73 when written


class _PreActivation(torch.nn.Module):
    """BatchNorm after an activation, which no export can fold into a convolution."""

    def __init__(self):
        super().__init__()
        self.conv0 = torch.nn.Conv2d(1, 6, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(6)
        self.conv1 = torch.nn.Conv2d(6, 6, 3, padding=1)
        self.fc = torch.nn.Linear(6 * 8 * 8, 10)

    def forward(self, x):
        x = self.conv1(self.norm(torch.relu(self.conv0(x))))
        return self.fc(x.flatten(1))


def test_merged_initializers_of_a_quantized_model_stay_tensors_of_their_own(tmp_path):
    """The eval-mode export merges a fresh BatchNorm's running_var into its weight (both ones) and its
    running_mean into its bias (both zeros), restoring them through Identity nodes; quantize_static
    then quantizes the one tensor. Each statistic is its own constant again (before, the running
    variance was refused as computed): the forward is onnxruntime's, and training moves the
    BatchNorm's weight."""
    torch.manual_seed(0)
    _export_eval(_PreActivation(), tmp_path / "float.onnx")
    merged = [n for n in onnx.load(tmp_path / "float.onnx").graph.node if n.op_type == "Identity"]
    assert len(merged) == 2  # the condition under test: the statistics are Identity nodes
    rng = np.random.default_rng(4)
    _quantize_static(tmp_path, rng, 4, per_channel=True)
    state, module = _trainer(tmp_path / "qdq.onnx", tmp_path / "out")
    as_written, _ = sessions(tmp_path / "qdq.onnx")
    module.eval()
    x, y = _data(rng, BATCH)
    np.testing.assert_allclose(module.infer(x)[0], as_written.run(None, {"x": x})[0], rtol=0, atol=1e-5)
    weight = state.parameters["norm.weight"].data.copy()
    module.train()
    optimizer = api.Optimizer(str(tmp_path / "out" / "optimizer_model.onnx"), module)
    for _ in range(3):
        module(x, y.astype(np.int32))
        optimizer.step()
        module.lazy_reset_grad()
    assert not np.array_equal(state.parameters["norm.weight"].data, weight)
    module.eval()
    np.testing.assert_allclose(
        module.infer(x)[0], sessions(_exported(module, tmp_path))[0].run(None, {"x": x})[0], rtol=0, atol=1e-4
    )


class _Padded(torch.nn.Module):
    """A convolution, a padding by a constant value other than zero, a convolution."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.conv2 = torch.nn.Conv2d(4, 6, 3)
        self.fc = torch.nn.Linear(6 * 8 * 8, 10)

    def forward(self, x):
        padded = torch.nn.functional.pad(torch.relu(self.conv(x)), (2, 2, 2, 2), value=0.5)
        return self.fc(torch.relu(self.conv2(padded)).flatten(1))


def test_a_quantized_padding_value_is_the_constant_it_stands_for(tmp_path):
    """quantize_static quantizes Pad's padding value like a weight (MobileBERT's embeddings pad
    so): it is the constant its DequantizeLinear gives, not a weight to train, and the forward is
    onnxruntime's."""
    torch.manual_seed(0)
    _export_eval(_Padded(), tmp_path / "float.onnx")
    rng = np.random.default_rng(5)
    _quantize_static(tmp_path, rng, 4, per_channel=True)
    graph = onnx.load(tmp_path / "qdq.onnx").graph
    made = {o: n.op_type for n in graph.node for o in n.output}
    pad = next(n for n in graph.node if n.op_type == "Pad")
    assert made[pad.input[2]] == "DequantizeLinear"  # the condition under test
    state, module = _trainer(tmp_path / "qdq.onnx", tmp_path / "out")
    assert {n for n, p in state.parameters.items() if p.requires_grad} == {
        f"{layer}.{kind}" for layer in ("conv", "conv2", "fc") for kind in ("weight", "bias")
    }
    as_written, _ = sessions(tmp_path / "qdq.onnx")
    module.eval()
    x, y = _data(rng, BATCH)
    np.testing.assert_allclose(module.infer(x)[0], as_written.run(None, {"x": x})[0], rtol=0, atol=1e-5)
    assert _loss_falls(module, tmp_path / "out", x, y)


def _exported(module, tmp_path):
    module.export_model_for_inferencing(str(tmp_path / "inference.onnx"), ["logits"])
    return tmp_path / "inference.onnx"


def test_a_dynamically_quantized_model_is_refused_naming_its_integer_ops(tmp_path):
    """quantize_dynamic quantizes activations at run time for ConvInteger and MatMulInteger, which
    edgetrain does not compile: one line names them and their nodes."""
    _export_eval(_Net(), tmp_path / "float.onnx")
    quantization.quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx"))
    integer_ops = {n.op_type for n in onnx.load(tmp_path / "dynamic.onnx").graph.node} & {
        "ConvInteger",
        "MatMulInteger",
    }
    assert integer_ops
    with pytest.raises(artifacts.EdgetrainError) as refused:
        artifacts.generate_artifacts(str(tmp_path / "dynamic.onnx"), artifact_directory=tmp_path / "out")
    message = str(refused.value)
    assert message.startswith("unsupported ops: ") and "\n" not in message
    assert all(f"{op} (nodes '" in message for op in integer_ops)


def test_zero_biases_that_dynamo_dropped_come_back_in_a_quantized_model(tmp_path):
    """dynamo's optimizer drops a bias that is all zeros (torchvision initializes them so); its record
    says the call read the bias, which comes back as zeros and trains, as in PyTorch, also after
    quantize_static has put a DequantizeLinear before the weight. Before, such a model trained
    without its biases, and one with no float parameter left generated C that gcc refused."""
    torch.manual_seed(0)
    net = _Net().eval()
    for layer in (net.conv, net.fc):
        torch.nn.init.zeros_(layer.bias)
    _export_eval(net, tmp_path / "float.onnx", dynamo=True)
    read = {n.input[i] for n in onnx.load(tmp_path / "float.onnx").graph.node for i in range(len(n.input))}
    assert not {"conv.bias", "fc.bias"} & read  # the condition under test: the export dropped them
    _quantize_static(tmp_path, np.random.default_rng(5), 4, per_channel=True)
    state, module = _trainer(tmp_path / "qdq.onnx", tmp_path / "out")
    assert {"conv.bias", "fc.bias"} <= {name for name, _ in state.parameters}
    x, y = _data(np.random.default_rng(6), BATCH)
    module.eval()
    np.testing.assert_array_equal(module.infer(x)[0], sessions(tmp_path / "qdq.onnx")[0].run(None, {"x": x})[0])
    module.train()
    optimizer = api.Optimizer(str(tmp_path / "out" / "optimizer_model.onnx"), module)
    module(x, y.astype(np.int32))
    optimizer.step()
    assert np.abs(state.parameters["fc.bias"].data).max() > 0


class _Int8Only(torch.nn.Module):
    """Convolutions without biases: quantized, every parameter is an int8 weight."""

    def __init__(self):
        super().__init__()
        self.conv0 = torch.nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.conv1 = torch.nn.Conv2d(4, 10, 8, bias=False)

    def forward(self, x):
        return self.conv1(torch.relu(self.conv0(x))).flatten(1)


def test_a_model_of_int8_weights_alone_trains_and_round_trips(tmp_path):
    """With no float tensor to store, the C's parameter-buffer and checkpoint functions handle int8
    weights alone (before, gcc -Werror refused the C: a memcpy from a null source it could not rule
    out)."""
    torch.manual_seed(0)
    _export_eval(_Int8Only(), tmp_path / "float.onnx")
    _quantize_static(tmp_path, np.random.default_rng(7), 4, per_channel=True)
    state, module = _trainer(tmp_path / "qdq.onnx", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "report.json").read_text())["int8_trained_weights"]["weights"].keys() == {
        "conv0.weight",
        "conv1.weight",
    }
    x, y = _data(np.random.default_rng(8), BATCH)
    module.eval()
    np.testing.assert_allclose(module.infer(x)[0], sessions(tmp_path / "qdq.onnx")[0].run(None, {"x": x})[0], atol=1e-6)
    module.train()
    optimizer = api.Optimizer(str(tmp_path / "out" / "optimizer_model.onnx"), module)
    module(x, y.astype(np.int32))
    optimizer.step()
    trained = module.get_contiguous_parameters()
    api.CheckpointState.save_checkpoint(state, str(tmp_path / "trained"))
    module.copy_buffer_to_parameters(np.zeros_like(trained))
    assert not np.asarray(module.get_contiguous_parameters()).any()
    module.copy_buffer_to_parameters(trained)
    np.testing.assert_array_equal(module.get_contiguous_parameters(), trained)
    resumed = api.CheckpointState.load_checkpoint(str(tmp_path / "trained"))
    again = api.Module(
        str(tmp_path / "out" / "training_model.onnx"), resumed, str(tmp_path / "out" / "eval_model.onnx")
    )
    np.testing.assert_array_equal(again.get_contiguous_parameters(), trained)


class _ConvBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 6, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(6)
        self.fc = torch.nn.Linear(6 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.norm(self.conv(x))).flatten(1))


def _loss_falls(module, out, x, y) -> bool:
    """Whether five SGD steps on batch (x, y) lower the loss of `module` (its artifacts in `out`)."""
    module.train()
    optimizer = api.Optimizer(str(out / "optimizer_model.onnx"), module)
    first = last = float(module(x, y.astype(np.int32)))
    for _ in range(5):
        optimizer.step()
        module.lazy_reset_grad()
        last = float(module(x, y.astype(np.int32)))
    return last < first


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_batchnorm_folded_into_a_quantized_model_trains_as_deployed(dynamo, tmp_path):
    """An eval-mode export folds BatchNorm into the convolution, and quantize_static quantizes the
    folded weights: the model as deployed, which no BatchNorm can come back to. It trains as the
    folded convolution, with one note, from either exporter (dynamo's was refused as a float model's
    folded BatchNorm is, the TorchScript exporter's said nothing)."""
    torch.manual_seed(0)
    net = _ConvBn().eval()
    with torch.no_grad():  # statistics other than a fresh layer's, so that the folding shows
        net.norm.running_mean.uniform_(-0.5, 0.5)
        net.norm.running_var.uniform_(0.5, 2.0)
    _export_eval(net, tmp_path / "float.onnx", dynamo=dynamo)
    assert "BatchNormalization" not in {n.op_type for n in onnx.load(tmp_path / "float.onnx").graph.node}
    _quantize_static(tmp_path, np.random.default_rng(9), 4, per_channel=True)
    folded = r"BatchNormalization folded into 1 convolution\(s\) of the quantized model"
    state, module = _trainer(tmp_path / "qdq.onnx", tmp_path / "out", notes=folded)
    x, y = _data(np.random.default_rng(10), BATCH)
    module.eval()
    expected = sessions(tmp_path / "qdq.onnx")[0].run(None, {"x": x})[0]
    np.testing.assert_allclose(module.infer(x)[0], expected, rtol=0, atol=1e-5)
    assert _loss_falls(module, tmp_path / "out", x, y)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_batchnorm_folded_by_the_export_trains_as_deployed_under_quantize_int8(dynamo, tmp_path):
    """torch.onnx.export's defaults in eval mode fold BatchNorm into the convolution (the TorchScript
    exporter's onnx::Conv_* weights, dynamo's optimizer): the model as deployed. quantize="int8"
    folds BatchNorm itself, as int8 deployments do, so it takes that export too, with one note (it
    was refused as the float model's folded BatchNorm is), and computes what onnxruntime computes on
    the QDQ model it exports. A zero bias that dynamo's optimizer dropped comes back and trains."""
    torch.manual_seed(0)
    net = _ConvBn().eval()
    with torch.no_grad():
        net.norm.running_mean.uniform_(-0.5, 0.5)
        net.norm.running_var.uniform_(0.5, 2.0)
        net.fc.bias.zero_()
    _export_eval(net, tmp_path / "float.onnx", dynamo=dynamo)
    assert "BatchNormalization" not in {n.op_type for n in onnx.load(tmp_path / "float.onnx").graph.node}
    rng = np.random.default_rng(9)
    calibration = [_data(rng, BATCH)[0] for _ in range(4)]
    out = tmp_path / "out"
    folded = r"BatchNormalization folded into 1 convolution\(s\) of the quantized"
    with pytest.warns(artifacts.ImportNote, match=folded) as notes:
        artifacts.generate_artifacts(
            str(tmp_path / "float.onnx"),
            artifact_directory=out,
            loss=artifacts.LossType.CrossEntropyLoss,
            batch_size=BATCH,
            quantize="int8",
            calibration_data=calibration,
        )
    # BatchNorm's own parameters are in the folded weights, as that note says, not lost to the export
    assert not [str(n.message) for n in notes if "norm" in str(n.message) and "optimized away" in str(n.message)]
    state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
    module = api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
    x, y = _data(np.random.default_rng(10), BATCH)
    assert _loss_falls(module, out, x, y)
    assert np.any(state.parameters["fc.bias"].data != 0)  # trained from the zeros it was exported with
    module.eval()
    module.export_model_for_inferencing(str(tmp_path / "inference.onnx"), ["logits"])
    expected = sessions(tmp_path / "inference.onnx")[0].run(None, {"x": x})[0]
    np.testing.assert_allclose(module.infer(x)[0], expected, rtol=0, atol=1e-5)


class _Attention(torch.nn.Module):
    """One head of self-attention over 6 tokens of 8 features, then a mean over the tokens and a
    classifier: MatMul of two activations (the scores, their mix of the values) beside the Linear
    layers' MatMul of an activation and a weight."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(8, 8) for _ in range(3))
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        scores = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / 8**0.5, dim=-1)
        return self.fc((scores @ self.v(x)).mean(1))


def _tokens(rng, n):
    """_data's images as 6 tokens of 8 features, and their labels."""
    x, y = _data(rng, n)
    return x[:, 0, :6, :], y


@pytest.mark.parametrize("how", ["quantize_static-per-channel", "quantize_static-uint8", "quantize-int8"])
def test_attention_quantized_computes_what_onnxruntime_computes_and_trains(how, tmp_path):
    """Transformers' layers quantized either way (quantize_static's QDQ MatMul, and quantize="int8"
    on the float export): the C computes what onnxruntime computes on the QDQ model (quantize_static's,
    or the one the trainer exports), and training lowers the loss."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Attention().eval(),
            (torch.randn(BATCH, 6, 8),),
            tmp_path / "float.onnx",
            input_names=["x"],
            output_names=["logits"],
            dynamo=False,
        )
    rng = np.random.default_rng(4)
    out = tmp_path / "out"
    options = dict(artifact_directory=out, loss=artifacts.LossType.CrossEntropyLoss, batch_size=BATCH)
    if how == "quantize-int8":
        calibration = [_tokens(rng, BATCH)[0] for _ in range(4)]
        artifacts.generate_artifacts(
            str(tmp_path / "float.onnx"), quantize="int8", calibration_data=calibration, **options
        )
    else:
        _quantize_static(tmp_path, rng, 4, per_channel=how.endswith("per-channel"), data=_tokens)
        assert "MatMul" in {n.op_type for n in onnx.load(tmp_path / "qdq.onnx").graph.node}
        artifacts.generate_artifacts(str(tmp_path / "qdq.onnx"), **options)
    state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
    module = api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
    x, y = _tokens(np.random.default_rng(5), BATCH)
    module.eval()
    module.export_model_for_inferencing(str(tmp_path / "inference.onnx"), ["logits"])
    exported = onnx.load(tmp_path / "inference.onnx")
    assert {"QuantizeLinear", "DequantizeLinear", "MatMul"} <= {n.op_type for n in exported.graph.node}
    model = tmp_path / ("inference.onnx" if how == "quantize-int8" else "qdq.onnx")
    expected = sessions(model)[0].run(None, {"x": x})[0]
    np.testing.assert_allclose(module.infer(x)[0], expected, rtol=0, atol=1e-5)
    assert _loss_falls(module, out, x, y)
