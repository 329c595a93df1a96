"""Int8 layers (trainer/integer.py, runtime_c/et_qconv.h): a quantized model's DequantizeLinear ->
Conv or Gemm -> [Relu] -> QuantizeLinear runs as one integer kernel. Checked: the kernel bit for bit
against its NumPy reference (ops/quantize.py QuantizedConv) over convolution geometries, and a
quantized model end to end: every layer fused in every function, the forward pass within one
quantization step of onnxruntime on the exported QDQ model, training as the float layers train, and
no float tensor of a fused layer in the arena."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import onnx
import pytest

from edgetrain import api, artifacts
from edgetrain.ops.quantize import ConvGradWQuantized, ConvGradXQuantized, QuantizedConv, QuantizedGlobalAveragePool
from edgetrain.trainer import assemble
from gradcheck import kernel_library
from test_quantized_models import _data, sessions  # the same centroid task; onnxruntime as the reference

cffi = pytest.importorskip("cffi")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

WRAPPER = r"""
void t_qconv(int N, int C, int M, int G, const int *in, const int *out, const int *k, const int *s, const int *d,
             const int *p, const void *X, int x_type, float x_scale, int32_t x_zero, const int8_t *W,
             const float *w_scale, int w_channels, const float *B, int activation, float low, float high,
             float y_scale, int32_t y_zero,
             int32_t qmin, int32_t qmax, void *Y, int y_type, uint32_t *mask, int masks, int16_t *patch)
{ et_qconv_s8(N, C, M, G, in, out, k, s, d, p, X, x_type, x_scale, x_zero, W, w_scale, w_channels, B, activation,
              low, high, y_scale, y_zero, qmin, qmax, Y, y_type, mask, masks, patch); }
void t_grad_w(int N, int C, int M, int G, const int *in, const int *out, const int *k, const int *s, const int *d,
              const int *p, const float *dY, const void *X, int x_type, float x_scale, int32_t x_zero, int first,
              int count, float *dW)
{ et_conv_grad_w_q8_f32(N, C, M, G, in, out, k, s, d, p, dY, X, x_type, x_scale, x_zero, first, count, dW); }
void t_mean(int rows, int plane, const void *X, int x_type, float x_scale, int32_t x_zero, float *Y)
{ et_qmean_f32(rows, plane, X, x_type, x_scale, x_zero, Y); }
void t_grad_x(int N, int C, int M, int plane, const float *dY, const int8_t *W, const float *w_scale, int w_channels,
              float *dX, float *scratch)
{ et_conv_grad_x_q8_f32(N, C, M, plane, dY, W, w_scale, w_channels, dX, scratch); }
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    return kernel_library(
        tmp_path_factory.mktemp("qconv"),
        ["et_qconv.h"],
        WRAPPER,
        "void t_qconv(int, int, int, int, const int *, const int *, const int *, const int *, const int *,"
        " const int *, const void *, int, float, int32_t, const int8_t *, const float *, int, const float *, int,"
        " float, float,"
        " float, int32_t, int32_t, int32_t, void *, int, uint32_t *, int, int16_t *);"
        "void t_grad_w(int, int, int, int, const int *, const int *, const int *, const int *, const int *,"
        " const int *, const float *, const void *, int, float, int32_t, int, int, float *);"
        "void t_grad_x(int, int, int, int, const float *, const int8_t *, const float *, int, float *, float *);"
        "void t_mean(int, int, const void *, int, float, int32_t, float *);",
    )


QTYPE = {np.dtype(np.int8): 1, np.dtype(np.uint8): 2}

# (N, C, M, group, spatial input, kernel, strides, dilations, pads begin + end)
GEOMETRIES = {
    "3x3-padded": (2, 3, 4, 1, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    "depthwise-stride-2": (1, 6, 6, 6, (9, 8), (3, 3), (2, 2), (1, 1), (1, 0, 1, 1)),
    "pointwise": (3, 8, 5, 1, (4, 5), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    "grouped-dilated": (2, 4, 6, 2, (9, 9), (3, 2), (1, 2), (2, 1), (2, 0, 1, 1)),
    "1-d": (2, 3, 4, 1, (11,), (5,), (2,), (1,), (2, 2)),
    "gemm": (5, 12, 7, 1, (), (1,), (1,), (1,), (0, 0)),
}


def _c_args(values, fill: int):
    """3 ints, as et_conv.h takes a geometry: leading unit axes (or zero pads)."""
    return [fill] * (3 - len(values)) + list(values)


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type", [np.int8, np.uint8])
def test_kernel_is_its_reference_bit_for_bit(kernel, geometry, x_type):
    ffi, lib = kernel
    n, c, m, group, spatial, k, s, d, pads = GEOMETRIES[geometry]
    rng = np.random.default_rng(len(geometry) + (x_type == np.uint8))
    info = np.iinfo(x_type)
    x = rng.integers(info.min, info.max + 1, size=(n, c, *spatial)).astype(x_type)
    w = rng.integers(-127, 128, size=(m, c // group, *(k if spatial else ()))).astype(np.int8)
    x_zero = np.array(rng.integers(info.min, info.max + 1), x_type)
    y_zero = np.array(rng.integers(info.min, info.max + 1), x_type)
    sx, sy = np.float32(0.02), np.float32(rng.uniform(0.02, 0.05))
    sw = rng.uniform(0.001, 0.01, size=m if geometry != "pointwise" else 1).astype(np.float32)
    bias = rng.normal(scale=5.0, size=m).astype(np.float32)
    attrs = dict(kernel_shape=list(k), strides=list(s), dilations=list(d), pads=list(pads), group=group)
    activations = [("", 0.0, 0.0, 0), ("", 0.0, 0.0, 1), ("Relu", 0.0, np.inf, 2), ("Relu", 0.0, np.inf, 3)]
    activations += [("Clip", 0.0, 6.0, 3), ("Clip", -1.5, 2.0, 2)]
    for activation, low, high, masks in activations:
        inside, active = masks & 1, masks >> 1
        want = QuantizedConv.reference(
            x, sx, x_zero, w, sw, bias, sy, y_zero, **attrs, activation=activation, low=low, high=high,
            inside=inside, active=active,
        )  # fmt: skip
        out_spatial = want[0].shape[2:]
        y = np.zeros(want[0].shape, x_type)
        mask = np.zeros_like(want[2]) if masks else np.zeros(1, np.uint32)
        patch = np.zeros(w[0].size, np.int16)
        cast = lambda a, t: ffi.cast(t, a.ctypes.data)  # noqa: E731
        lib.t_qconv(
            n, c, m, group,
            _c_args(spatial, 1), _c_args(out_spatial, 1), _c_args(k[:len(spatial)], 1), _c_args(s[:len(spatial)], 1),
            _c_args(d[:len(spatial)], 1), _c_args(pads[:len(spatial)], 0),
            cast(x, "void *"), QTYPE[x.dtype], float(sx), int(x_zero), cast(w, "int8_t *"),
            cast(sw, "float *"), sw.size, cast(bias, "float *"), ["", "Relu", "Clip"].index(activation), low, high,
            float(sy), int(y_zero),
            int(info.min), int(info.max), cast(y, "void *"), QTYPE[x.dtype],
            cast(mask, "uint32_t *") if masks else ffi.NULL, masks, cast(patch, "int16_t *"),
        )  # fmt: skip
        np.testing.assert_array_equal(y, want[0])
        if masks:
            np.testing.assert_array_equal(mask, want[2])
            assert 0 < np.unpackbits(mask.view(np.uint8)).sum() < y.size  # some bits of each value
        assert len(np.unique(y)) > 3  # the outputs spread over the range, not all saturated


@pytest.mark.parametrize("geometry", [g for g in GEOMETRIES if g != "gemm"])
@pytest.mark.parametrize("x_type", [np.int8, np.uint8])
def test_weight_gradient_from_int8_input_is_its_reference(kernel, geometry, x_type):
    """et_conv_grad_w_q8_f32 against ConvGradWQuantized's reference (float64 on the dequantized input),
    and each block of output channels (as a fused update makes them) bit for bit the whole's rows."""
    ffi, lib = kernel
    n, c, m, group, spatial, k, s, d, pads = GEOMETRIES[geometry]
    rng = np.random.default_rng(7)
    info = np.iinfo(x_type)
    x = rng.integers(info.min, info.max + 1, size=(n, c, *spatial)).astype(x_type)
    x_zero, sx = np.array(3, x_type), np.float32(0.05)
    attrs = dict(kernel_shape=list(k), strides=list(s), dilations=list(d), pads=list(pads), group=group)
    out_spatial = QuantizedConv.reference(
        x, sx, x_zero, np.zeros((m, c // group, *k), np.int8), np.ones(1, np.float32), None, np.float32(1), x_zero,
        **attrs, activation="", low=0.0, high=0.0, inside=0, active=0,
    )[0].shape[2:]  # fmt: skip
    dy = rng.normal(size=(n, m, *out_spatial)).astype(np.float32)
    (want,) = ConvGradWQuantized.reference(dy, x, np.array(sx), x_zero, **attrs)
    cast = lambda a, t: ffi.cast(t, a.ctypes.data)  # noqa: E731

    def channels(first, count):
        dw = np.zeros((count, c // group, *k), np.float32)
        lib.t_grad_w(
            n, c, m, group, _c_args(spatial, 1), _c_args(out_spatial, 1), _c_args(k, 1), _c_args(s, 1),
            _c_args(d, 1), _c_args(pads[: len(spatial)], 0), cast(dy, "float *"), cast(x, "void *"), QTYPE[x.dtype],
            float(sx), int(x_zero), first, count, cast(dw, "float *"),
        )  # fmt: skip
        return dw

    whole = channels(0, m)
    np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    for first, count in ((0, 1), (1, m - 2), (m - 3, 3)):
        np.testing.assert_array_equal(channels(first, count), whole[first : first + count])


@pytest.mark.parametrize("x_type", [np.int8, np.uint8])
def test_global_average_pool_of_int8_is_its_reference(kernel, x_type):
    """et_qmean_f32 bit for bit against QuantizedGlobalAveragePool's reference, which is within a
    float rounding of the mean of the dequantized values in float64."""
    ffi, lib = kernel
    rng = np.random.default_rng(5)
    info = np.iinfo(x_type)
    x = rng.integers(info.min, info.max + 1, size=(2, 5, 25, 5)).astype(x_type)
    x_zero, sx = np.array(-7 if x_type == np.int8 else 130, x_type), np.float32(0.0371)
    (want,) = QuantizedGlobalAveragePool.reference(x, np.array(sx), x_zero)
    y = np.zeros(want.shape, np.float32)
    lib.t_mean(10, 125, ffi.cast("void *", x.ctypes.data), QTYPE[x.dtype], float(sx), int(x_zero),
               ffi.cast("float *", y.ctypes.data))  # fmt: skip
    np.testing.assert_array_equal(y, want)
    exact = (x.astype(np.float64) - int(x_zero)).mean(axis=(2, 3), keepdims=True) * float(sx)
    np.testing.assert_allclose(y, exact, rtol=3e-7, atol=1e-9)


@pytest.mark.parametrize("n, c, m, plane, per_channel", [(2, 5, 8, 37, True), (3, 8, 8, 16, False), (1, 3, 4, 1, True)])
def test_input_gradient_from_int8_weights_in_place(kernel, n, c, m, plane, per_channel):
    """et_conv_grad_x_q8_f32 against ConvGradXQuantized's reference, writing dX apart and over dY."""
    ffi, lib = kernel
    rng = np.random.default_rng(n * 100 + plane)
    dy = rng.normal(size=(n, m, plane)).astype(np.float32)
    w = rng.integers(-127, 128, size=(m, c, 1)).astype(np.int8)
    sw = rng.uniform(0.001, 0.01, size=m if per_channel else 1).astype(np.float32)
    want, scratch = ConvGradXQuantized.reference(dy, w, sw, shape=[n, c, plane])
    cast = lambda a, t: ffi.cast(t, a.ctypes.data)  # noqa: E731
    apart, shared = np.zeros(want.shape, np.float32), dy.copy()
    for out in (apart, shared):
        lib.t_grad_x(n, c, m, plane, cast(shared, "float *"), cast(w, "int8_t *"), cast(sw, "float *"), sw.size,
                     cast(out, "float *"), cast(np.zeros_like(scratch), "float *"))  # fmt: skip
    np.testing.assert_allclose(apart, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(shared.ravel()[: want.size].reshape(want.shape), apart)


class _Layers(torch.nn.Module):
    """Every kind of layer the int8 kernel takes: a padded 3x3, a depthwise with stride 2, a
    pointwise with ReLU6, a grouped and dilated one without activation, a hidden Linear with ReLU
    and the classifier."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.pointwise = torch.nn.Conv2d(8, 8, 1)
        self.grouped = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.hidden = torch.nn.Linear(8 * 16, 16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.relu(self.depthwise(x))
        x = torch.nn.functional.relu6(self.pointwise(x))  # exported as Clip
        x = self.grouped(x)
        return self.fc(torch.relu(self.hidden(x.flatten(1))))


def _pretrained(model: torch.nn.Module, data=_data) -> torch.nn.Module:
    """A few Adam steps in float on `data`'s task, so that the layers' features tell the classes
    apart: fixed activation scales calibrated on an untrained model saturate as soon as training
    moves it."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    rng = np.random.default_rng(9)
    for _ in range(40):
        x, y = data(rng, 16)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        optimizer.step()
    return model


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(float32 artifacts, int8 artifacts, int8 artifacts with nothing fused, int8 artifacts with a
    fused update, int8 artifacts whose trained weights keep float32 masters) of _Layers, batch 4:
    every bias and the last four layers trained, so that the first two convolutions read frozen int8
    weights and the others trained ones (the pointwise one's input gradient from its int8 weights)."""
    directory = tmp_path_factory.mktemp("int8_layers")
    torch.manual_seed(0)
    model = _pretrained(_Layers())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.eval(),
            (torch.randn(4, 1, 8, 8),),
            directory / "model.onnx",
            input_names=["input"],
            output_names=["logits"],
            dynamo=False,
        )
    rng = np.random.default_rng(1)
    options = dict(
        loss=artifacts.LossType.CrossEntropyLoss, batch_size=4, update_policy="bias+last:4", learning_rate=0.01
    )
    calibration = [_data(rng, 4)[0] for _ in range(8)]
    int8 = {"quantize": "int8", "calibration_data": calibration}
    out = {}
    monkeypatch = pytest.MonkeyPatch()
    fused = {**int8, "fused_update": True}
    kinds = (
        ("float32", {}),
        ("int8", int8),
        ("int8, fused update", fused),
        ("int8, float32 masters", {**int8, "qas": False}),
        ("int8, float layers", int8),
    )
    for kind, extra in kinds:
        if kind == "int8, float layers":  # the same QDQ model with nothing fused
            monkeypatch.setattr(assemble, "fuse_int8_layers", lambda graph, nodes, *_: nodes)
        out[kind] = artifacts.generate_artifacts(
            str(directory / "model.onnx"), artifact_directory=directory / kind.replace(", ", "-"), **options, **extra
        )
    monkeypatch.undo()
    return out


def _module(out):
    state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
    return api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))


def test_every_layer_is_an_int8_layer_in_every_function(compiled):
    model_c = (compiled["int8"] / "model.c").read_text()
    bodies = {f: model_c.split(f"int model_{f}(")[1].split("\n}\n")[0] for f in ("train_step", "eval_step", "infer")}
    for function, body in bodies.items():
        # five layers: the classifier's output is the model's, in float
        assert body.count("et_qconv_s8(") == 5, function
        assert "et_conv_f32(" not in body, function
    assert "static const int8_t et_narrow_consts[" in model_c  # the frozen int8 weights, a byte each
    assert bodies["train_step"].count("et_conv_grad_x_q8_f32(") == 1  # the pointwise layer's


def test_forward_is_within_a_step_of_onnxruntime(compiled, tmp_path, figure):
    out = compiled["int8"]
    module = _module(out)
    module.eval()
    module.export_model_for_inferencing(str(tmp_path / "inference.onnx"), ["logits"])
    exported = onnx.load(str(tmp_path / "inference.onnx"))
    assert {n.op_type for n in exported.graph.node} >= {"QuantizeLinear", "DequantizeLinear", "Conv"}
    session, _ = sessions(tmp_path / "inference.onnx")
    rng = np.random.default_rng(2)
    worst = 0.0
    for _ in range(10):
        x = _data(rng, 4)[0]
        worst = max(worst, float(np.abs(module.infer(x)[0] - session.run(None, {"input": x})[0]).max()))
    scale = _classifier_input_step(exported)
    figure(f"int8 layers: logits within {worst:.3g} of onnxruntime's (one input step moves them by up to {scale:.3g})")
    assert worst <= scale


def _classifier_input_step(model: onnx.ModelProto) -> float:
    """How far one quantization step of the classifier's input moves a logit at most: its scale
    times the largest row sum of |W|."""
    graph = model.graph
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    gemm = [n for n in graph.node if n.op_type == "Gemm"][-1]
    dq = next(n for n in graph.node if n.output[0] == gemm.input[0])
    weight_dq = next(n for n in graph.node if n.output[0] == gemm.input[1])  # int8 weights, a scale per row
    weight = inits[weight_dq.input[0]] * inits[weight_dq.input[1]].reshape(-1, 1)
    return float(inits[dq.input[1]]) * float(np.abs(weight).sum(axis=1).max())


def test_trains_as_the_float_layers_train(compiled, figure):
    """Fine-tuning on the same batches: the int8 layers learn, and their losses follow those of the
    same QDQ model computed with float layers (where only the rounding of the sums differs)."""
    losses = {}
    for kind, out in compiled.items():
        if kind in ("int8, fused update", "int8, float32 masters"):
            continue  # the int8 build's numbers (test_fused_update_by_blocks_gives_the_same_weights)
        module = _module(out)
        optimizer = api.Optimizer(str(out / "optimizer_model.onnx"), module)
        module.train()
        rng = np.random.default_rng(3)
        losses[kind] = []
        for _ in range(60):
            x, y = _data(rng, 4)
            losses[kind].append(float(module(x, y)))
            optimizer.step()
            module.lazy_reset_grad()
    first = {k: np.mean(v[:10]) for k, v in losses.items()}
    last = {k: np.mean(v[-10:]) for k, v in losses.items()}
    apart = np.abs(np.subtract(losses["int8"], losses["int8, float layers"]))
    figure(
        "mean loss of the first and last 10 of 60 steps: "
        + ", ".join(f"{k} {first[k]:.3f} -> {last[k]:.3f}" for k in losses)
        + f"; int8 layers against float layers: at most {apart.max():.2g} apart"
    )
    assert last["int8"] < 0.5 * first["int8"]
    assert apart.max() < 0.05 * max(losses["int8, float layers"])


def _trained_weights(out, steps: int) -> np.ndarray:
    module = _module(out)
    optimizer = api.Optimizer(str(out / "optimizer_model.onnx"), module)
    module.train()
    rng = np.random.default_rng(4)
    for _ in range(steps):
        module(*_data(rng, 4))
        optimizer.step()  # does nothing in a fused-update build
        module.lazy_reset_grad()
    return module.get_contiguous_parameters(trainable_only=False)


def test_fused_update_by_blocks_gives_the_same_weights(compiled):
    """With a fused update, the pointwise layer's weight gradient is made and applied a block of
    output channels at a time (trainer/integer.py weight_gradient_blocks), never whole; the weights
    after 10 AdamW steps are those of the build that accumulates whole gradients, bit for bit."""
    out = compiled["int8, fused update"]
    body = (out / "model.c").read_text().split("int model_train_step(")[1].split("\n}\n")[0]
    blocks = re.findall(r"et_conv_grad_w_q8_f32\([^;]*?, (\d+), (\d+), et_arena", body)
    assert ("0", "4") in blocks and ("4", "4") in blocks  # the pointwise weight's 8 channels in 2 blocks
    report = json.loads((out / "report.json").read_text())
    gradients = [b for b in report["functions"]["train_step"]["blocks"] if b["kind"] == "gradient"]
    assert max(b["size"] for b in gradients if "weight_grad_block" in b["name"]) == 4 * 4 * 8
    np.testing.assert_array_equal(_trained_weights(out, 10), _trained_weights(compiled["int8"], 10))


def test_no_float_tensor_of_a_fused_layer_in_the_arena(compiled):
    int8 = json.loads((compiled["int8"] / "report.json").read_text())
    unfused = json.loads((compiled["int8, float layers"] / "report.json").read_text())
    float32 = json.loads((compiled["float32"] / "report.json").read_text())
    for function in ("eval_step", "infer"):
        blocks = int8["functions"][function]["blocks"]
        floats = {part for b in blocks if b["c_type"] == "float" for part in b["name"].split(" -> ")}
        # the float results of Conv, Gemm and Relu are gone, but the classifier's (the model's output)
        layers = {f for f in floats if re.search(r"/(Conv|Gemm|Relu)[_\w]*_output_0$", f)}
        assert layers == {"logits"} or not layers, layers
        assert int8["arena_by_function_bytes"][function] < float32["arena_by_function_bytes"][function] / 2
        assert int8["arena_by_function_bytes"][function] < unfused["arena_by_function_bytes"][function]
    assert int8["ram_bytes"] <= unfused["ram_bytes"]


def test_frozen_int8_weights_cannot_change(compiled, tmp_path):
    """A frozen weight the int8 layers read as integers compiled in: a new float value would not
    reach them, so the host build (whose frozen weights are otherwise writable) refuses one, through
    the live view, a buffer or a checkpoint, before anything changes; the same values pass."""
    out = compiled["int8"]
    module = _module(out)
    state = module.state
    meta = {p.key: p.value for p in onnx.load(str(out / "training_model.onnx")).metadata_props}
    fixed = json.loads(meta["edgetrain.compiled_weights"])
    frozen = [n for n, p in state.parameters.items() if not p.requires_grad and p.data.ndim > 1]
    assert fixed and set(fixed) == set(frozen)  # the two frozen convolutions
    assert not state.parameters[fixed[0]].data.flags.writeable
    every = module.get_contiguous_parameters(trainable_only=False)
    module.copy_buffer_to_parameters(every, trainable_only=False)  # the same values
    changed = every + 1.0  # every parameter, the compiled weights among them
    with pytest.raises(ValueError, match="frozen parameters"):
        module.copy_buffer_to_parameters(changed, trainable_only=False)
    np.testing.assert_array_equal(module.get_contiguous_parameters(trainable_only=False), every)
    api.CheckpointState.save_checkpoint(state, str(tmp_path / "checkpoint"))
    loaded = api.CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    loaded.parameters[fixed[0]].data[...] += 1.0
    with pytest.raises(api.CheckpointError):
        api.Module(str(out / "training_model.onnx"), loaded, str(out / "eval_model.onnx"))
    float32 = _module(compiled["float32"]).state.parameters
    assert all(p.data.flags.writeable for p in float32.values())  # nothing compiled in


def test_report_says_how_trained_int8_weights_train(compiled):
    """report.json names the trained weights the model quantizes, how they train (as integers by
    QAS, or as float32 masters with qas=False) and what that costs; a float32 build has no entry."""
    state = api.CheckpointState.load_checkpoint(str(compiled["int8"] / "checkpoint"))
    for kind, update, per_element in (
        ("int8", "QAS, stochastic rounding", 1),
        ("int8, float32 masters", "float32 master", 4),
    ):
        report = json.loads((compiled[kind] / "report.json").read_text())
        trained = [n for n in report["import"]["trainable"] if state.parameters[n].data.ndim > 1]  # not the biases
        entry = report["int8_trained_weights"]
        assert entry["update"] == update, kind
        assert entry["weights"] == {n: state.parameters[n].data.size for n in trained}
        assert entry["master_bytes"] == 4 * entry["as_integers_bytes"] == 4 * sum(entry["weights"].values())
        assert entry["bytes"] == per_element * entry["as_integers_bytes"]
        assert report["ram_breakdown"]["parameters"] >= entry["bytes"]
    assert "int8_trained_weights" not in json.loads((compiled["float32"] / "report.json").read_text())


def test_report_counts_int8_and_float_bytes_per_category(compiled):
    """bytes_by_type: the frozen weights a byte each in flash (every element of the checkpoint's
    frozen weights), the arena's live bytes at train_step's peak by type (the kinds' split summed),
    the other RAM categories in float, but the trained int8 weights' integers."""
    report = json.loads((compiled["int8"] / "report.json").read_text())
    state = api.CheckpointState.load_checkpoint(str(compiled["int8"] / "checkpoint"))
    frozen = [p for name, p in state.parameters.items() if not p.requires_grad and name.endswith("weight")]
    by_type = report["bytes_by_type"]
    assert by_type["flash_constants"]["int8_t"] == sum(p.data.size for p in frozen) > 0
    assert sum(by_type["flash_constants"].values()) == report["flash_constants_bytes"]
    peak = report["functions"]["train_step"]
    assert sum(by_type["arena_at_peak"].values()) == sum(peak["peak_bytes_by_kind"].values())
    masters = json.loads((compiled["int8, float32 masters"] / "report.json").read_text())
    assert masters["bytes_by_type"]["arena_at_peak"]["int8_t"] > 0  # the int8 copies the masters make
    integers = report["int8_trained_weights"]["bytes"]
    assert by_type["parameters"] == {"float": report["ram_breakdown"]["parameters"] - integers, "int8_t": integers}
    float32 = json.loads((compiled["float32"] / "report.json").read_text())
    assert "int8_t" not in float32["bytes_by_type"]["arena_at_peak"]


def test_global_average_pool_reads_int8(tmp_path, figure):
    """A pool over each whole plane of a quantized tensor (KWS's and MobileNet's) reads its int8
    values in every function, with no float copy of them, and the logits stay within a step of
    onnxruntime's on the exported QDQ model."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_pretrained(net).eval(), (torch.randn(4, 1, 8, 8),), tmp_path / "model.onnx",
                          input_names=["input"], output_names=["logits"], dynamo=False)  # fmt: skip
    rng = np.random.default_rng(1)
    out = artifacts.generate_artifacts(
        str(tmp_path / "model.onnx"), artifact_directory=tmp_path / "out", batch_size=4, update_policy="bias",
        quantize="int8", calibration_data=[_data(rng, 4)[0] for _ in range(8)],
    )  # fmt: skip
    model_c = (out / "model.c").read_text()
    for function in ("train_step", "eval_step", "infer"):
        body = model_c.split(f"int model_{function}(")[1].split("\n}\n")[0]
        assert body.count("et_qmean_f32(") == 1 and "et_average_pool_f32(" not in body, function
    module = _module(out)
    module.eval()
    module.export_model_for_inferencing(str(tmp_path / "inference.onnx"), ["logits"])
    session, _ = sessions(tmp_path / "inference.onnx")
    worst = 0.0
    for _ in range(10):
        x = _data(rng, 4)[0]
        worst = max(worst, float(np.abs(module.infer(x)[0] - session.run(None, {"input": x})[0]).max()))
    step = _classifier_input_step(onnx.load(str(tmp_path / "inference.onnx")))
    figure(f"int8 global average pool: logits within {worst:.3g} of onnxruntime's (one input step: {step:.3g})")
    assert worst <= step


def test_an_inference_only_c_has_the_int8_layers(compiled, tmp_path):
    """The exported QDQ model compiled for inference alone runs the same int8 layers."""
    module = _module(compiled["int8"])
    module.export_model_for_inferencing(str(tmp_path / "inference.onnx"), ["logits"])
    artifacts.generate_inference(str(tmp_path / "inference.onnx"), tmp_path / "out", batch_size=4)
    model_c = (tmp_path / "out" / "model.c").read_text()
    body = model_c.split("int model_infer(")[1]
    assert body.count("et_qconv_s8(") == 5 and "et_conv_f32(" not in body
