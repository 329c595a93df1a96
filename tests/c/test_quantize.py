"""QuantizeLinear -> DequantizeLinear pairs train as quantization-aware training does: the C's loss
and gradients against torch.fake_quantize_* under autograd (the straight-through estimator),
per tensor and per channel, int8, uint8 and int16, then training_model.onnx under onnx.reference."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gradcheck import Cases, check_graph_gradients, run_case, torch

CASES = Cases()


def _fake_quant_model(w, scale, zero_point, axis, dtype):
    """Y = DequantizeLinear(QuantizeLinear(W)) for a trainable W."""
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(scale, "s")]
    args = ["W", "s"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(zero_point.astype(dtype), "z"))
        args.append("z")
    nodes = [
        helper.make_node("QuantizeLinear", args, ["q"], axis=axis),
        helper.make_node("DequantizeLinear", ["q", *args[1:]], ["Y"], axis=axis),
    ]
    graph = helper.make_graph(
        nodes, "fq", [], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, w.shape)], initializer=inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _fake_quant(shape, scale, zero_point, axis, dtype, spread):
    """A case: W ~ N(0, spread), so that some values saturate and the gradient stops there."""
    scale = np.asarray(scale, np.float32)
    zero_point = None if zero_point is None else np.asarray(zero_point)
    info = np.iinfo(dtype)

    def run(tmp_path, rng):
        w = (rng.normal(size=shape) * spread).astype(np.float32)
        model = _fake_quant_model(w, scale, zero_point, axis, dtype)
        zp = (
            torch.zeros(scale.shape, dtype=torch.int32)
            if zero_point is None
            else torch.tensor(zero_point.astype(np.int32))
        )

        def fake_quant(W):
            if scale.ndim == 0:
                return torch.fake_quantize_per_tensor_affine(W, float(scale), int(zp), int(info.min), int(info.max))
            return torch.fake_quantize_per_channel_affine(
                W, torch.tensor(scale), zp, axis % len(shape), int(info.min), int(info.max)
            )

        channel = [-1 if d == axis % len(shape) else 1 for d in range(len(shape))] if scale.ndim else []
        q = np.rint(w / scale.reshape(channel)) + (0 if zero_point is None else zero_point.reshape(channel))
        assert ((q < info.min) | (q > info.max)).any() and ((q >= info.min) & (q <= info.max)).any()
        return check_graph_gradients(model, {"W": w}, fake_quant, tmp_path, rng)

    return run


CASES.check("int8-per-channel", _fake_quant((3, 4, 5), [0.05, 0.1, 0.02], [3, -5, 0], 0, np.int8, 2.0))
CASES.check("int8-per-channel-last-axis", _fake_quant((4, 3), [0.02, 0.01, 0.03], [0, 0, 0], -1, np.int8, 2.0))
CASES.check("uint8-per-tensor", _fake_quant((6, 7), 0.02, 128, 1, np.uint8, 2.0))
CASES.check("uint8-no-zero-point", _fake_quant((10,), 0.01, None, 1, np.uint8, 1.0))
CASES.check("int16-per-tensor", _fake_quant((2, 3, 4), 1e-4, -7, 1, np.int16, 4.0))


def _qat_linear(tmp_path, rng):
    """A linear layer as quantization-aware training exports it: the input, the weight (per output
    channel) and the output fake-quantized; the bias float."""
    x = rng.normal(size=(5, 8)).astype(np.float32)
    params = {"W": (rng.normal(size=(6, 8)) * 0.3).astype(np.float32), "b": rng.normal(size=6).astype(np.float32)}
    w_scale = (np.abs(params["W"]).max(axis=1) / 127).astype(np.float32)
    consts = {
        "xs": np.float32(0.03),
        "xz": np.int8(-3),
        "ws": w_scale,
        "wz": np.zeros(6, np.int8),
        "ys": np.float32(0.02),
        "yz": np.uint8(128),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("QuantizeLinear", ["W", "ws", "wz"], ["wq"], axis=0),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Gemm", ["xd", "wd", "b"], ["h"], transB=1),
        helper.make_node("QuantizeLinear", ["h", "ys", "yz"], ["hq"]),
        helper.make_node("DequantizeLinear", ["hq", "ys", "yz"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (5, 6))],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in {**params, **consts}.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    fq = torch.fake_quantize_per_tensor_affine

    def reference(x, W, b):
        xd = fq(x, 0.03, -3, -128, 127)
        wd = torch.fake_quantize_per_channel_affine(
            W, torch.tensor(w_scale), torch.zeros(6, dtype=torch.int32), 0, -128, 127
        )
        return fq(xd @ wd.T + b, 0.02, 128, 0, 255)

    return check_graph_gradients(model, params, reference, tmp_path, rng, data={"x": x})


CASES.check("qat-linear", _qat_linear)


def _pytorch_qat(tmp_path, rng):
    """A model prepared for quantization-aware training by torch.ao.quantization (per-channel weights,
    uint8 activations), its observers run then frozen, as the TorchScript exporter writes it: the
    C's loss and gradients against the QAT model's own autograd."""
    import torch.ao.quantization as tq

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4 * 6 * 6, 5)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    torch.manual_seed(int(rng.integers(2**31)))
    net = Net().train()
    activation = tq.FakeQuantize.with_args(
        observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255, dtype=torch.quint8
    )
    net.qconfig = tq.QConfig(activation=activation, weight=tq.default_per_channel_weight_fake_quant)
    tq.prepare_qat(net, inplace=True)
    x = torch.randn(3, 1, 6, 6)
    for _ in range(4):
        net(torch.randn(3, 1, 6, 6))
    net.apply(tq.disable_observer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (x,), tmp_path / "qat.onnx", input_names=["x"], output_names=["y"], dynamo=False, opset_version=13
        )
    model = onnx.load(tmp_path / "qat.onnx")
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) == 4  # 2 weights, 2 activations
    names = ("conv.weight", "conv.bias", "fc.weight", "fc.bias")
    params = {k: v.detach().numpy().copy() for k, v in net.named_parameters() if k in names}

    def functional(x, **leaves):
        return torch.func.functional_call(net, leaves, (x,))

    return check_graph_gradients(model, params, functional, tmp_path, rng, data={"x": x.numpy()})


CASES.check("pytorch-qat-export", _pytorch_qat)


@pytest.mark.parametrize("spec", CASES)
def test_fake_quantization_trains_as_torch_does(spec, tmp_path, request):
    run_case(spec, tmp_path, request)
