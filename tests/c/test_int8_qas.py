"""Trained int8 weights stored as their integers (quantization-aware scaling, QAS): the "_q8"
updates of runtime_c/et_qas.h against the float update they wrap and the stochastic rounding rule,
the pooled gradient's rows (PooledGradRows) against the kernels whose work they do, and a quantized
model trained through the Python API with a fused update: its weights stay integers that the
checkpoint, the API and the report see as the issue asks."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from edgetrain import api, artifacts
from edgetrain.ops.random import _hash, _unit
from edgetrain.trainer import integer
from gradcheck import kernel_library
from test_int8_layers import _pretrained

cffi = pytest.importorskip("cffi")
torch = pytest.importorskip("torch")

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
SEED = 0x51A5  # ET_QAS_SEED
WRAPPER = r"""
void t_sgd_q8(int n, const float *scale, int inner, uint32_t at, uint32_t counter, float lr, float weight_decay,
              int8_t *Q, const float *G)
{ et_sgd_q8_f32(n, scale, inner, at, counter, lr, 0.0f, 0.0f, 0, weight_decay, 1, Q, G, NULL); }
void t_sgd_q8_outer(int m, const float *A, int n, const float *B, const float *scale, int inner, uint32_t at,
                    uint32_t counter, float lr, int8_t *Q)
{ et_sgd_q8_outer_f32(m, A, n, B, scale, inner, at, counter, lr, 0.0f, 0.0f, 0, 0.01f, 1, Q, NULL); }
void t_adamw_q8_outer(int m, const float *A, int n, const float *B, const float *scale, int inner, uint32_t at,
                      uint32_t counter, int8_t *Q, float *M, float *V)
{ et_adamw_q8_outer_f32(m, A, n, B, scale, inner, at, counter, 0.01f, 0.01f, 0.9f, 0.999f, 1e-6f, 0.01f, Q, M, V); }
void t_sgd_q8_decay(int n, const float *scale, int inner, uint32_t at, uint32_t counter, float lr, int8_t *Q,
                    const float *G)
{ et_sgd_q8_f32(n, scale, inner, at, counter, lr, 0.0f, 0.0f, 0, 0.01f, 1, Q, G, NULL); }
void t_adamw_q8(int n, const float *scale, int inner, uint32_t at, uint32_t counter, float step_size, float lr,
                int8_t *Q, const float *G, float *M, float *V)
{ et_adamw_q8_f32(n, scale, inner, at, counter, step_size, lr, 0.9f, 0.999f, 1e-6f, 0.01f, Q, G, M, V); }
void t_adamw(int n, float step_size, float lr, float *W, const float *G, float *M, float *V)
{ et_adamw_f32(n, step_size, lr, 0.9f, 0.999f, 1e-6f, 0.01f, W, G, M, V); }
void t_rows(int N, int C, int plane, int first, int count, int from, int len, const float *G, float dq, float q,
            const uint32_t *mask, const uint32_t *relu_mask, float *Y)
{ et_pooled_grad_rows_f32(N, C, plane, first, count, from, len, G, dq, q, mask, relu_mask, Y); }
void t_chain(int N, int C, int plane, const float *G, float dq, float q, const uint32_t *mask,
             const uint32_t *relu_mask, float *Y)
{
    int in[3] = {1, 1, 0}, out[3] = {1, 1, 1}, k[3] = {1, 1, 0}, s[3] = {1, 1, 0}, d[3] = {1, 1, 1};
    int p[6] = {0, 0, 0, 0, 0, 0};
    in[2] = k[2] = s[2] = plane;
    et_average_pool_grad_f32(N * C, in, out, k, s, d, p, 1, G, Y);
    et_dequantize_grad_f32(1, 1, N * C * plane, Y, &dq, Y);
    et_quantize_grad_f32(1, 1, N * C * plane, Y, mask, &q, Y);
    if (relu_mask != NULL) et_relu_grad_f32(N * C * plane, Y, relu_mask, Y);
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return kernel_library(
        tmp_path_factory.mktemp("qas"),
        ["et_qas.h", "et_pool.h", "et_elementwise.h"],
        WRAPPER,
        "void t_sgd_q8(int, const float *, int, uint32_t, uint32_t, float, float, int8_t *, const float *);"
        "void t_adamw_q8(int, const float *, int, uint32_t, uint32_t, float, float, int8_t *, const float *,"
        " float *, float *);"
        "void t_adamw(int, float, float, float *, const float *, float *, float *);"
        "void t_sgd_q8_outer(int, const float *, int, const float *, const float *, int, uint32_t, uint32_t, float,"
        " int8_t *);"
        "void t_adamw_q8_outer(int, const float *, int, const float *, const float *, int, uint32_t, uint32_t,"
        " int8_t *, float *, float *);"
        "void t_sgd_q8_decay(int, const float *, int, uint32_t, uint32_t, float, int8_t *, const float *);"
        "void t_rows(int, int, int, int, int, int, int, const float *, float, float, const uint32_t *,"
        " const uint32_t *, float *);"
        "void t_chain(int, int, int, const float *, float, float, const uint32_t *, const uint32_t *, float *);",
    )


def _ptr(ffi, array, c_type):
    return ffi.from_buffer(f"{c_type}[]", array)


def _stochastic(x: np.ndarray, at: int, counter: int) -> np.ndarray:
    """The rounding rule: up with probability x - floor(x), by the bits of (seed, counter, element)."""
    index = np.arange(at, at + x.size, dtype=np.uint32)
    u = _unit(_hash(np.uint32(SEED) ^ _hash(np.uint32(counter) ^ _hash(index))))
    below = np.floor(x)
    return np.clip(below + (u < x - below), -128, 127).astype(np.int8)


def _problem(seed: int, channels: int = 6, inner: int = 50):
    rng = np.random.default_rng(seed)
    q = rng.integers(-128, 128, channels * inner).astype(np.int8)
    scale = rng.uniform(0.005, 0.05, channels).astype(np.float32)
    g = rng.normal(size=channels * inner).astype(np.float32)
    return q, scale, g, np.repeat(scale, inner)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_sgd_q8_is_the_sgd_step_rounded_stochastically(kernels, weight_decay):
    """torch.optim.SGD's step on the float values scale * q (DESIGN.md's formula, in float32), then
    each result rounded to the grid, up with the probability of its fraction: bit for bit, and the
    rounding is unbiased (its mean error is within the noise of so many draws)."""
    ffi, lib = kernels
    q, scale, g, scales = _problem(1)
    lr, at, counter = np.float32(0.05), 123, 7
    w = scales * q.astype(np.float32)
    step = g + np.float32(weight_decay) * w if weight_decay else g
    x = (w - lr * step) / scales
    got = q.copy()
    lib.t_sgd_q8(
        q.size,
        _ptr(ffi, scale, "float"),
        50,
        at,
        counter,
        lr,
        weight_decay,
        _ptr(ffi, got, "int8_t"),
        _ptr(ffi, g, "float"),
    )
    np.testing.assert_array_equal(got, _stochastic(x, at, counter))
    inside = np.abs(x) < 127
    error = got[inside] - x[inside]
    assert abs(error.mean()) < 4 * 0.5 / np.sqrt(inside.sum())  # a fraction's draw has sd <= 1/2
    assert np.all(np.abs(error) < 1)


def test_adamw_q8_is_the_float_adamw_step_rounded_stochastically(kernels):
    """The AdamW update: et_adamw_f32 on the float values (its moments kept as they leave it), each
    result rounded to the grid by the rule; over three steps, as the moments build up."""
    ffi, lib = kernels
    q, scale, g, scales = _problem(2)
    m, v = np.zeros_like(g), np.zeros_like(g)
    m_ref, v_ref = m.copy(), v.copy()
    for step in range(3):
        w = scales * q.astype(np.float32)
        lib.t_adamw(q.size, 0.01, 0.01, *(_ptr(ffi, a, "float") for a in (w, g, m_ref, v_ref)))
        want = _stochastic(w / scales, 40, step)
        weights = (_ptr(ffi, scale, "float"), 50, 40, step, 0.01, 0.01, _ptr(ffi, q, "int8_t"))
        lib.t_adamw_q8(q.size, *weights, *(_ptr(ffi, a, "float") for a in (g, m, v)))
        np.testing.assert_array_equal(q, want)
        np.testing.assert_array_equal(m, m_ref)
        np.testing.assert_array_equal(v, v_ref)


@pytest.mark.parametrize("rows, cols", [(3, 50), (7, 5), (1, 97)])
def test_q8_updates_from_an_outer_products_factors_are_those_from_the_product(kernels, rows, cols):
    """A weight whose gradient is the outer product of A and B (a batch of 1): "_q8_outer" makes it a
    chunk at a time, crossing rows, as each element 0 + A[i] * B[j] in float32; the weights and
    AdamW's moments are those the "_q8" update gives from the whole product, bit for bit."""
    ffi, lib = kernels
    rng = np.random.default_rng(rows * cols)
    a, b = (rng.normal(size=k).astype(np.float32) for k in (rows, cols))
    g = (np.float32(0) + np.outer(a, b)).astype(np.float32).ravel()
    q = rng.integers(-128, 128, rows * cols).astype(np.int8)
    scale = rng.uniform(0.005, 0.05, rows).astype(np.float32)
    factors = (rows, _ptr(ffi, a, "float"), cols, _ptr(ffi, b, "float"), _ptr(ffi, scale, "float"), cols, 9, 3)
    weights = (_ptr(ffi, scale, "float"), cols, 9, 3)
    whole, outer = q.copy(), q.copy()
    lib.t_sgd_q8_decay(q.size, *weights, 0.05, _ptr(ffi, whole, "int8_t"), _ptr(ffi, g, "float"))
    lib.t_sgd_q8_outer(*factors, 0.05, _ptr(ffi, outer, "int8_t"))
    np.testing.assert_array_equal(outer, whole)
    assert not np.array_equal(outer, q)
    moments = {kind: (np.full(q.size, 0.1, np.float32), np.full(q.size, 0.2, np.float32)) for kind in ("w", "o")}
    whole, outer = q.copy(), q.copy()
    lib.t_adamw_q8(
        q.size,
        *weights,
        0.01,
        0.01,
        _ptr(ffi, whole, "int8_t"),
        _ptr(ffi, g, "float"),
        *(_ptr(ffi, m, "float") for m in moments["w"]),
    )
    lib.t_adamw_q8_outer(*factors, _ptr(ffi, outer, "int8_t"), *(_ptr(ffi, m, "float") for m in moments["o"]))
    np.testing.assert_array_equal(outer, whole)
    for mine, theirs in zip(moments["o"], moments["w"]):
        np.testing.assert_array_equal(mine.view(np.uint32), theirs.view(np.uint32))


def test_every_registered_optimizer_has_an_integer_update():
    """A fused update of int8 weights stored as integers calls each optimizer's "_q8" kernel, or its
    "_q8_outer" one where it makes the gradient from its factors."""
    from edgetrain.ops import Update, optimizers

    text = (RUNTIME / "et_qas.h").read_text()
    assert {"AdamW", "SGD"} <= set(optimizers())
    for name, binding in optimizers().items():
        hyper = dict(binding.hyper)
        for suffix in ("_q8", "_q8_outer"):  # from the gradient, or from its factors (a batch of 1)
            state = (None,) * len(binding.slots(hyper))
            call = binding.update(Update((1,), (None,), None, state, 0.1, suffix), hyper)
            assert f"static inline void {call.fn}(" in text, name


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize(
    "n, channels, plane, first, count, start, length",
    [
        (1, 64, 125, 8, 8, 0, 125),
        (3, 10, 7, 3, 5, 0, 7),
        (2, 6, 9, 0, 6, 0, 9),
        (2, 12, 16, 0, 12, 4, 8),
        (3, 5, 9, 1, 3, 7, 2),
    ],
)
def test_pooled_rows_are_the_pool_and_quantization_gradients_bit_for_bit(
    kernels, n, channels, plane, first, count, start, length, relu
):
    """Rows [first, first + count) of each sample, at positions [start, start + length) of each,
    made from the pooled gradient alone, are those of the whole dY that et_average_pool_grad_f32,
    et_dequantize_grad_f32, et_quantize_grad_f32 and et_relu_grad_f32 make, bit for bit, at any bit
    offset of the masks."""
    ffi, lib = kernels
    rng = np.random.default_rng(n * 100 + plane)
    g = rng.normal(size=n * channels).astype(np.float32)
    g[0] = -0.0  # whose pool gradient is 0 + -0
    words = -(-n * channels * plane // 32)
    mask, relu_mask = (rng.integers(0, 2**32, words, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    masks = (_ptr(ffi, mask, "uint32_t"), _ptr(ffi, relu_mask, "uint32_t") if relu else ffi.NULL)
    whole = np.empty(n * channels * plane, np.float32)
    lib.t_chain(n, channels, plane, _ptr(ffi, g, "float"), 0.037, 0.041, *masks, _ptr(ffi, whole, "float"))
    rows = np.full(n * count * length, np.nan, np.float32)
    part = (first, count, start, length)
    lib.t_rows(n, channels, plane, *part, _ptr(ffi, g, "float"), 0.037, 0.041, *masks, _ptr(ffi, rows, "float"))
    want = whole.reshape(n, channels, plane)[:, first : first + count, start : start + length]
    np.testing.assert_array_equal(rows.view(np.uint32), want.ravel().view(np.uint32))


class _Pooled(torch.nn.Module):
    """A 3x3 convolution, a pointwise one and a classifier after a global average pool: the shape of
    the MLPerf Tiny models' heads."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.pointwise = torch.nn.Conv2d(8, 16, 1)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, x):
        x = torch.relu(self.pointwise(torch.relu(self.conv(x))))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def _data(rng, n: int):
    """Three classes of 8 x 8 noise, each with its own mean: what a pooled feature tells apart."""
    y = rng.integers(0, 3, n)
    x = rng.normal(size=(n, 1, 8, 8)) + y[:, None, None, None]
    return x.astype(np.float32), y.astype(np.int64)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The pre-trained _Pooled quantized to int8, the pointwise layer and classifier trained with a
    fused update: as QAS stores them, with the pooled gradient's rows left to the whole dY, and
    with float32 masters."""
    directory = tmp_path_factory.mktemp("qas_model")
    torch.manual_seed(0)
    model = _pretrained(_Pooled(), _data)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.randn(2, 1, 8, 8),), directory / "model.onnx", dynamo=False)
    calibration = [_data(rng, 2)[0] for _ in range(8)]
    options = dict(
        loss="CrossEntropyLoss", batch_size=2, update_policy="bias+last:2", learning_rate=0.01, fused_update=True
    )
    monkeypatch, out = pytest.MonkeyPatch(), {}
    for kind in ("QAS", "QAS, whole dY", "masters"):
        if kind == "QAS, whole dY":
            monkeypatch.setattr(integer, "_pooled", lambda *_: None)
        out[kind] = artifacts.generate_artifacts(
            str(directory / "model.onnx"),
            artifact_directory=directory / kind.replace(", ", "-"),
            quantize="int8",
            calibration_data=calibration,
            qas=kind != "masters",
            **options,
        )
    monkeypatch.undo()
    return out


def _module(out):
    state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
    return api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))


def _train(module, steps: int, seed: int = 5) -> list[float]:
    """Training steps, each of which applies the fused update itself."""
    module.train()
    rng = np.random.default_rng(seed)
    return [float(module(*_data(rng, 2))) for _ in range(steps)]


def _on_grid(module) -> dict[str, np.ndarray]:
    """Each trained int8 weight's values divided by its scale: integers, if it trains as integers."""
    meta = module._integer_weights
    return {
        name: module.state.parameters[name].data
        / np.asarray(scale, np.float32).reshape((-1,) + (1,) * (module.state.parameters[name].data.ndim - 1))
        for name, scale in meta.items()
    }


def test_trained_int8_weights_are_stored_and_trained_as_integers(builds, figure):
    """The report says QAS and counts the trained weights a byte each; the C keeps no float copy of
    them (parameters = the biases' floats and the integers); the model learns, and its weights stay
    on their grids."""
    report = json.loads((builds["QAS"] / "report.json").read_text())
    masters = json.loads((builds["masters"] / "report.json").read_text())
    entry = report["int8_trained_weights"]
    assert entry["update"] == "QAS, stochastic rounding"
    assert entry["weights"] == {"pointwise.weight": 128, "fc.weight": 48}
    assert entry["bytes"] == entry["as_integers_bytes"] == 176
    biases = 4 * (8 + 16 + 3)
    assert report["bytes_by_type"]["parameters"] == {"float": biases, "int8_t": 176}
    assert report["ram_breakdown"]["parameters"] == biases + 176
    assert masters["int8_trained_weights"]["update"] == "float32 master"
    assert masters["ram_breakdown"]["parameters"] == biases + 4 * 176
    model_c = (builds["QAS"] / "model.c").read_text()
    assert "static int8_t et_qparams[176]" in (builds["QAS"] / "model_weights.h").read_text()
    assert "et_adamw_q8_f32(" in model_c and "et_pooled_grad_rows_f32(" in model_c
    module = _module(builds["QAS"])
    losses = _train(module, 40)
    grid = _on_grid(module)
    figure(
        "QAS: mean loss of the first and last 10 of 40 steps "
        f"{np.mean(losses[:10]):.3f} -> {np.mean(losses[-10:]):.3f}; "
        f"parameters {report['ram_breakdown']['parameters']} B against {masters['ram_breakdown']['parameters']} B "
        "with float32 masters"
    )
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
    assert set(grid) == {"pointwise.weight", "fc.weight"}
    for name, values in grid.items():
        np.testing.assert_allclose(values, np.rint(values), atol=1e-3, err_msg=name)


def test_pooled_rows_give_the_same_weights_as_the_whole_gradient(builds):
    """The pointwise layer's gradients made from the pooled gradient's rows: its weight gradient a
    block of output channels at a time, its bias gradient likewise, its input gradient a block of
    rows at a time (each row's sums over every channel whole). The same weights after 15 steps, bit
    for bit, as the build that makes the whole dY first; the whole dY is never made."""
    assert "et_pooled_grad_rows_f32(" not in (builds["QAS, whole dY"] / "model.c").read_text()
    trained = {}
    for kind in ("QAS", "QAS, whole dY"):
        module = _module(builds[kind])
        _train(module, 15)
        trained[kind] = module.get_contiguous_parameters(trainable_only=True).numpy()
    np.testing.assert_array_equal(trained["QAS"], trained["QAS, whole dY"])
    blocks = json.loads((builds["QAS"] / "report.json").read_text())["functions"]["train_step"]["blocks"]
    rows = [b for b in blocks if "pooled_grad_rows" in b["name"]]
    assert not [b for b in blocks if "averagepoolgrad" in b["name"]]
    # weight: 16 channels in blocks of 4; input gradient: 8 rows one at a time; bias: blocks of 2 channels
    assert sorted(b["size"] for b in rows) == [2 * 2 * 64 * 4] * 8 + [2 * 16 * 8 * 4] * 8 + [2 * 4 * 64 * 4] * 4


def test_integer_weights_through_checkpoint_and_api(builds, tmp_path):
    """A checkpoint holds the integers' float values and gives them back exactly; the API reads them
    as floats, sets new values at the nearest grid point, and refuses non-finite ones (in a buffer
    too) before anything changes."""
    module = _module(builds["QAS"])
    _train(module, 5)
    before = module.get_contiguous_parameters(trainable_only=False).numpy().copy()
    api.CheckpointState.save_checkpoint(module.state, str(tmp_path / "checkpoint"))
    again = api.Module(
        str(builds["QAS"] / "training_model.onnx"),
        api.CheckpointState.load_checkpoint(str(tmp_path / "checkpoint")),
        str(builds["QAS"] / "eval_model.onnx"),
    )
    np.testing.assert_array_equal(again.get_contiguous_parameters(trainable_only=False).numpy(), before)
    weight = again.state.parameters["pointwise.weight"]
    scale = np.asarray(again._integer_weights["pointwise.weight"], np.float32).reshape(-1, 1, 1, 1)
    integers = np.rint(weight.data / scale)
    assert not weight.data.flags.writeable
    weight.data = weight.data + 0.3 * scale  # under half a step: the same integers
    np.testing.assert_array_equal(again.get_contiguous_parameters(trainable_only=False).numpy(), before)
    weight.data = weight.data + 0.7 * scale  # over half a step: one up, but where saturated
    np.testing.assert_array_equal(np.rint(weight.data / scale), np.minimum(integers + 1, 127))
    with pytest.raises(ValueError, match="finite"):
        weight.data = np.full(weight.data.shape, np.nan, np.float32)
    every = again.get_contiguous_parameters(trainable_only=True).numpy().copy()
    broken = every.copy()
    broken[8 : 8 + 128] = np.nan  # the pointwise weight's, after the 3x3 layer's bias
    with pytest.raises(ValueError, match="not finite"):
        again.copy_buffer_to_parameters(broken, trainable_only=True)
    np.testing.assert_array_equal(again.get_contiguous_parameters(trainable_only=True).numpy(), every)


def test_a_resumed_run_rounds_as_the_whole_run(builds, tmp_path):
    """The rounding draws from the step count, which a checkpoint with optimizer state keeps: a run
    stopped after 6 AdamW steps and resumed from its checkpoint ends on the weights of the run that
    never stopped, bit for bit."""
    batches = [_data(np.random.default_rng(11 + i), 2) for i in range(12)]
    whole = _module(builds["QAS"])
    whole.train()
    for i, batch in enumerate(batches):
        whole(*batch)
        if i == 5:
            api.CheckpointState.save_checkpoint(whole.state, str(tmp_path / "checkpoint"), include_optimizer_state=True)
    resumed = api.Module(
        str(builds["QAS"] / "training_model.onnx"),
        api.CheckpointState.load_checkpoint(str(tmp_path / "checkpoint")),
        str(builds["QAS"] / "eval_model.onnx"),
    )
    resumed.train()
    for batch in batches[6:]:
        resumed(*batch)
    got, want = (m.get_contiguous_parameters().numpy() for m in (resumed, whole))
    np.testing.assert_array_equal(got, want)
