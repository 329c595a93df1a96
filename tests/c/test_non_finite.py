"""A training step whose loss, gradients, gradient sums or BatchNorm statistics are not finite
returns ET_NON_FINITE (api.NonFiniteError) and changes nothing: parameters, gradient accumulators,
optimizer state, BatchNorm buffers, step and dropout counters stay bit-identical, so the next good
step runs exactly as if the bad one had never been tried."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import api, artifacts
from models import weighted_sum

BATCH = 4


def bn_dropout_model():
    """Gemm -> BatchNormalization -> Relu -> Dropout -> Gemm: every kind of state a step touches."""
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
        helper.make_node("Dropout", ["hr", "ratio"], ["hd"], name="drop"),
        helper.make_node("Gemm", ["hd", "fc1.weight", "fc1.bias"], ["logits"], transB=1, name="fc1"),
    ]
    inits = [
        init("fc0.weight", (6, 5)),
        init("fc0.bias", (6,)),
        init("bn.scale", (6,), 0.5, 1.5),
        init("bn.bias", (6,)),
        init("bn.mean", (6,)),
        init("bn.var", (6,), 0.5, 1.5),
        numpy_helper.from_array(np.float32(0.25), "ratio"),
        init("fc1.weight", (3, 6)),
        init("fc1.bias", (3,)),
    ]
    graph = helper.make_graph(
        nodes,
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 5])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return artifacts.generate_artifacts(
        bn_dropout_model(), artifact_directory=tmp_path_factory.mktemp("nf"), learning_rate=0.05
    )


def bind(out):
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def batch(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, 5)).astype(np.float32), rng.integers(0, 3, BATCH)


def snapshot(state, module):
    """Everything a step may change: the checkpoint bytes (parameters, buffers, optimizer state,
    step, dropout counter, learning rate) and the gradient accumulators."""
    return module._save(True), [p.grad.copy() for p in state.parameters.values() if p.requires_grad]


def bad_inputs():
    x, y = batch(9)
    cases = {}
    for label, value in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf)):
        bad = x.copy()
        bad[1, 2] = value
        cases[f"{label} input"] = (bad, y)
    cases["overflowing input"] = (np.full_like(x, 3e38), y)  # finite, but the first Gemm overflows
    cases["huge input"] = (x * np.float32(1e30), y)  # BatchNorm's variance of it overflows
    return cases


BAD = bad_inputs()


def test_non_finite_steps_change_nothing(out):
    state, module, opt = bind(out)
    twin_state, twin, twin_opt = bind(out)
    for m, o in ((module, opt), (twin, twin_opt)):
        m(*batch(0))
        o.step()
        m(*batch(1))  # gradients now accumulate: the reset flag is clear
    before = snapshot(state, module)

    for case, (x, y) in BAD.items():
        with pytest.raises(api.NonFiniteError, match="not finite"):
            module(x, y)
        after = snapshot(state, module)
        assert after[0] == before[0], case
        for a, b in zip(after[1], before[1]):
            np.testing.assert_array_equal(a, b, err_msg=case)

    # The next good step and update run exactly as on the twin that never saw a bad batch.
    for m, o in ((module, opt), (twin, twin_opt)):
        m(*batch(2))
        o.step()
    assert module._save(True) == twin._save(True)
    for a, b in zip(snapshot(state, module)[1], snapshot(twin_state, twin)[1]):
        np.testing.assert_array_equal(a, b)


def test_non_finite_parameter_refuses_every_step(out):
    state, module, opt = bind(out)
    state.parameters["fc1.weight"].data[0, 0] = np.nan
    before = snapshot(state, module)
    for seed in range(3):
        with pytest.raises(api.NonFiniteError):
            module(*batch(seed))
    assert module._save(True) == before[0]


def test_finite_gradients_whose_sum_overflows(tmp_path):
    """Each step's gradient is finite; their running sum is not: the second step is refused."""
    out = artifacts.generate_artifacts(weighted_sum((3,)), loss=None, optimizer="SGD", artifact_directory=tmp_path)
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state)
    w = state.parameters["W"]
    r = np.zeros(3, np.float32)
    r[np.argmin(np.abs(w.data))] = 3e38  # loss = sum(W * r) stays finite
    module(r)
    grad = w.grad.copy()
    with pytest.raises(api.NonFiniteError):
        module(r)
    np.testing.assert_array_equal(w.grad, grad)
    module.lazy_reset_grad()
    module(r)  # overwriting instead of adding: finite again
    np.testing.assert_array_equal(w.grad, r)


def outer_product_model():
    """loss = ReduceSum(Gemm(x, W, transB=1) * r) at batch 1: W's gradient is the outer product of r
    and x, which train_step checks from the two vectors without storing it. W is tiny, so an x
    near the float32 limit keeps the forward pass finite."""
    nodes = [
        helper.make_node("Gemm", ["x", "W"], ["y"], transB=1),
        helper.make_node("Mul", ["y", "r"], ["yr"]),
        helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "outer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 2]),
        ],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.full((2, 3), 1e-30, np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_outer_product_gradients_checked_from_their_factors(tmp_path):
    out = artifacts.generate_artifacts(outer_product_model(), loss=None, optimizer="SGD", artifact_directory=tmp_path)
    assert "et_outer_finite_f32(2, " in (out / "model.c").read_text()  # the path under test
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state)
    w = state.parameters["W"]
    x = np.array([[3e38, -1.0, 0.5]], np.float32)
    r = np.array([[1.0, -0.25]], np.float32)
    module(x, r)  # the largest product, 3e38, is finite
    np.testing.assert_array_equal(w.grad, np.outer(r, x))
    grad = w.grad.copy()
    with pytest.raises(api.NonFiniteError):
        module(x, r)  # each product finite, their running sums not
    np.testing.assert_array_equal(w.grad, grad)
    module.lazy_reset_grad()
    for bad_r in ([[1.2, 0.0]], [[0.0, -1.2]]):  # 1.2 * 3e38 overflows float32; the factors do not
        with pytest.raises(api.NonFiniteError):
            module(x, np.array(bad_r, np.float32))
        np.testing.assert_array_equal(w.grad, grad)
    module(x, r)
    np.testing.assert_array_equal(w.grad, grad)


def test_fused_update_from_outer_product_factors(tmp_path):
    """With a fused update the outer-product gradient is checked from its factors too, and a step
    whose products overflow updates nothing."""
    out = artifacts.generate_artifacts(
        outer_product_model(),
        loss=None,
        optimizer="SGD",
        learning_rate=0.5,
        fused_update=True,
        artifact_directory=tmp_path,
    )
    assert "et_sgd_outer_f32(2, " in (out / "model.c").read_text()  # the path under test
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state)
    w = state.parameters["W"]
    x = np.array([[3e38, -1.0, 0.5]], np.float32)
    before = w.data.copy()
    with pytest.raises(api.NonFiniteError):
        module(x, np.array([[1.2, 0.0]], np.float32))
    np.testing.assert_array_equal(w.data, before)
    r = np.array([[1.0, -0.25]], np.float32)
    module(x, r)
    np.testing.assert_array_equal(w.data, before - np.float32(0.5) * np.outer(r, x).astype(np.float32))
