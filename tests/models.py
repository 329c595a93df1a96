"""Small ONNX models built with onnx.helper, shared by the tests."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from edgetrain.demo import build_mlp


def mlp(batch="batch", sizes=(8, 16, 3), seed=0, dropout=None, opset=18):
    """The demo's MLP, small: Gemm -> Relu [-> Dropout] -> Gemm."""
    return build_mlp(sizes, seed, batch=batch, dropout=dropout, opset=opset)


def weighted_sum(shape, seed=0):
    """loss = ReduceSum(W * r): the gradient of W is exactly the input r, whatever W is, so an
    optimizer's trajectory can be recomputed independently."""
    w = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    nodes = [helper.make_node("Mul", ["W", "r"], ["wr"]), helper.make_node("ReduceSum", ["wr"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes,
        "weighted_sum",
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(w, "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def mlp_bn(batch="batch", sizes=(8, 16, 3), seed=0):
    """Gemm -> BatchNormalization (training form: its running statistics are buffers) -> Relu ->
    Gemm, as torch exports an nn.BatchNorm1d MLP in training mode."""
    rng = np.random.default_rng(seed)
    fan_in, hidden, out = sizes
    arrays = {
        "fc0.weight": rng.uniform(-0.3, 0.3, (hidden, fan_in)),
        "fc0.bias": rng.uniform(-0.3, 0.3, hidden),
        "bn0.weight": rng.uniform(0.5, 1.5, hidden),
        "bn0.bias": rng.uniform(-0.2, 0.2, hidden),
        "bn0.running_mean": rng.uniform(-0.1, 0.1, hidden),
        "bn0.running_var": rng.uniform(0.8, 1.2, hidden),
        "fc1.weight": rng.uniform(-0.3, 0.3, (out, hidden)),
        "fc1.bias": rng.uniform(-0.3, 0.3, out),
    }
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    nodes = [
        helper.make_node("Gemm", ["x", "fc0.weight", "fc0.bias"], ["h"], transB=1),
        helper.make_node(
            "BatchNormalization",
            ["h", "bn0.weight", "bn0.bias", "bn0.running_mean", "bn0.running_var"],
            ["hn", "mean_out", "var_out"],
            epsilon=1e-5,
            momentum=0.9,
            training_mode=1,
        ),
        helper.make_node("Relu", ["hn"], ["hr"]),
        helper.make_node("Gemm", ["hr", "fc1.weight", "fc1.bias"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp_bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, fan_in])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, out])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
