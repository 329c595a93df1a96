"""Row bands (compiler/lower/bands.py): the layers a function starts with that no gradient reads run a
band of output rows at a time. The bands must give the bits the whole tensors give, in every
function and at every batch, and lower the arena; the reference for the numbers is the build
without bands (whose forward pass the other tiers check against onnxruntime and PyTorch), and
onnxruntime for the banded forward pass itself."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from edgetrain import api, artifacts
from edgetrain.host import load_library
from edgetrain.lower import bands as bands_module
from gradcheck import kernel_library

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

# Many models, a few steps of each: built at -Og, to the default build's bits (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("quick_build")


class _Windows(torch.nn.Module):
    """Every window a band splits, over planes whose heights no band count divides: a padded 5 x 5
    convolution, a padded strided max pool, a dilated depthwise convolution with a residual, a
    padded average pool that counts its padding, a strided convolution, then a global pool and the
    classifier, the one layer that trains."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 5, padding=2)
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)
        self.average = torch.nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=True)
        self.down = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(24, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.stem(x)))
        x = torch.nn.functional.relu6(self.depthwise(x) + x)
        x = torch.nn.functional.hardswish(self.down(self.average(x)))
        return self.fc(x.mean((2, 3)))


class _Waveform(torch.nn.Module):
    """The same windows along one axis (Conv1d and its pools), as audio front ends have them."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv1d(1, 16, 9, stride=2, padding=4)
        self.pool = torch.nn.MaxPool1d(3, stride=2, padding=1)
        self.depthwise = torch.nn.Conv1d(16, 16, 5, padding=4, dilation=2, groups=16)
        self.average = torch.nn.AvgPool1d(3, stride=1, padding=1)
        self.down = torch.nn.Conv1d(16, 24, 3, stride=2)
        self.fc = torch.nn.Linear(24, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.stem(x)))
        x = torch.relu(self.depthwise(x) + x)
        return self.fc(self.down(self.average(x)).mean(2))


class _InvertedResiduals(torch.nn.Module):
    """MobileNetV2 in small: a strided stem, an inverted residual block with its skip, two strided
    ones, a wide pointwise convolution on the small plane they leave, and a global pool before the
    classifier."""

    def __init__(self):
        super().__init__()

        def block(c_in, expand, c_out, stride):
            return torch.nn.Sequential(
                torch.nn.Conv2d(c_in, expand, 1),
                torch.nn.ReLU6(),
                torch.nn.Conv2d(expand, expand, 3, stride=stride, padding=1, groups=expand),
                torch.nn.ReLU6(),
                torch.nn.Conv2d(expand, c_out, 1),
            )

        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.same = block(8, 24, 8, 1)
        self.down = torch.nn.Sequential(block(8, 24, 16, 2), block(16, 48, 16, 2))
        self.head = torch.nn.Conv2d(16, 128, 1)
        self.fc = torch.nn.Linear(128, 4)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = x + self.same(x)
        x = torch.relu(self.head(self.down(x)))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def _export(model: torch.nn.Module, shape, path) -> str:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.eval(),
            (torch.randn(2, *shape),),
            path,
            dynamo=False,
            input_names=["x"],
            dynamic_axes={"x": {0: "batch"}},
        )
    return str(path)


def _build(model_path, directory, **options):
    out = artifacts.generate_artifacts(model_path, artifact_directory=directory, optimizer="SGD", **options)
    state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
    module = api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
    return module, json.loads((out / "report.json").read_text())


def _batches(rng, shape, classes, batch, steps):
    return [
        (rng.normal(size=(batch, *shape)).astype(np.float32), rng.integers(0, classes, batch).astype(np.int64))
        for _ in range(steps)
    ]


def _run(module, batches, probe):
    """Trains on `batches` (an SGD step each), then evaluates and infers on `probe`: (parameters,
    each step's loss, the evaluation loss, the outputs)."""
    optimizer = api.Optimizer(None, module)
    module.train()
    losses = []
    for x, y in batches:
        losses.append(np.asarray(module(x, y)).copy())
        optimizer.step()
        module.lazy_reset_grad()
    module.eval()
    evaluation = np.asarray(module(*probe)).copy()
    return module.get_contiguous_parameters().numpy(), np.array(losses), evaluation, module.infer(probe[0])[0]


def _same_bits(a, b):
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def _with_and_without_bands(path, directory, batches, probe, same_bits=True, **options) -> tuple[dict, dict]:
    """Builds of `path` without row bands and with them, each trained on `batches` and run on
    `probe` (_run), which must give the same bits unless not `same_bits`: (_run's results,
    report.json) by row_bands."""
    runs, reports = {}, {}
    for bands in (False, True):
        module, reports[bands] = _build(path, directory / str(bands), row_bands=bands, **options)
        runs[bands] = _run(module, batches, probe)
    for whole, banded in zip(runs[False], runs[True]) if same_bits else ():
        _same_bits(whole, banded)
    return runs, reports


def _int8_inverted_residuals(directory, seed: int, policy: str, max_batch, batch):
    """_InvertedResiduals exported and its int8 build's options (calibrated, `policy` trained by
    a fused update, learning rate 0.05): (model path, 5 batches of `batch`, options)."""
    path = _export(_InvertedResiduals(), (3, 96, 96), directory / "model.onnx")
    rng = np.random.default_rng(seed)
    calibration = [rng.normal(size=(1, 3, 96, 96)).astype(np.float32) for _ in range(4)]
    options = dict(
        quantize="int8",
        calibration_data=calibration,
        update_policy=policy,
        fused_update=True,
        batch_size=max_batch,
        learning_rate=0.05,
    )
    return path, _batches(rng, (3, 96, 96), 4, batch, 5), options


@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    directory = tmp_path_factory.mktemp("windows")
    return _export(_Windows(), (3, 45, 38), directory / "model.onnx"), directory


def test_float_bands_give_the_whole_tensors_bits_in_less_arena(windows, figure):
    """The classifier trains; everything before it runs in bands in train_step, eval_step and infer:
    the same losses and parameters over 4 steps at batch 3, the same evaluation and outputs at batch
    1, bit for bit, in a smaller arena."""
    path, directory = windows
    rng = np.random.default_rng(0)
    batches = _batches(rng, (3, 45, 38), 5, 3, 4)
    probe = _batches(rng, (3, 45, 38), 5, 1, 1)[0]
    _, reports = _with_and_without_bands(path, directory, batches, probe, update_policy="last:1")
    for name in ("train_step", "eval_step", "infer"):
        assert "row_bands" not in reports[False]["functions"][name]
        assert reports[True]["functions"][name]["row_bands"]["bands"] > 1
    arena = {bands: reports[bands]["arena_by_function_bytes"]["train_step"] for bands in (False, True)}
    figure(
        f"row bands, float: train_step arena {arena[False]:,} B whole, {arena[True]:,} B in bands "
        f"({reports[True]['functions']['train_step']['row_bands']})"
    )
    assert arena[True] < 0.6 * arena[False]


def test_banded_inference_is_what_onnxruntime_computes(windows, tmp_path):
    path, _ = windows
    out = artifacts.generate_artifacts(
        path, artifact_directory=tmp_path, optimizer="SGD", update_policy="last:1", row_bands=True
    )
    module = api.Module(
        str(out / "training_model.onnx"),
        api.CheckpointState.load_checkpoint(str(out / "checkpoint")),
        str(out / "eval_model.onnx"),
    )
    x = np.random.default_rng(1).normal(size=(2, 3, 45, 38)).astype(np.float32)
    module.eval()
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(module.infer(x)[0], want, rtol=1e-4, atol=1e-5)


def test_a_ram_budget_takes_row_bands_when_the_fused_update_is_not_enough(windows, figure):
    path, directory = windows
    whole = _build(path, directory / "whole", update_policy="last:1", fused_update=True)[1]["ram_bytes"]
    banded = _build(path, directory / "banded", update_policy="last:1", fused_update=True, row_bands=True)[1]
    budget = (whole + banded["ram_bytes"]) // 2
    _, report = _build(path, directory / "budget", update_policy="last:1", ram_budget=budget)
    figure(f"row bands under a budget of {budget:,} B: {report['ram_bytes']:,} B (without them {whole:,} B)")
    assert report["ram_bytes"] <= budget and "row_bands" in report["functions"]["train_step"]


@pytest.mark.parametrize("max_batch, batch", [(1, 1), (None, 3)], ids=["batch-1", "any-batch"])
def test_int8_bands_and_pooled_gradient_blocks_give_the_same_bits(tmp_path, figure, max_batch, batch):
    """MobileNetV2 in small, quantized to int8, the last three layers' biases and the classifier
    trained with a fused update: the layers before run in bands, and the pointwise layer before the
    pool makes its bias and input gradients from the pooled gradient's blocks. The same bits with
    and without bands, at batch 1 (the classifier's QAS update from the outer product's factors)
    and in a C for any batch (every batch's compile splits where the largest batch's does)."""
    path, batches, options = _int8_inverted_residuals(tmp_path, 2, "bias:3+last:1", max_batch, batch)
    runs, reports = _with_and_without_bands(path, tmp_path, batches, batches[0], **options)
    assert not np.array_equal(runs[True][1][0], runs[True][1][-1])  # it trains
    ram = {bands: reports[bands]["ram_bytes"] for bands in (False, True)}
    figure(f"row bands, int8, batch {batch}: ram_bytes {ram[False]:,} B whole, {ram[True]:,} B in bands")
    assert ram[True] < ram[False]
    blocks = reports[True]["functions"]["train_step"]["blocks"]
    assert [b for b in blocks if "pooled_grad_rows" in b["name"]]
    assert not [b for b in blocks if "averagepoolgrad" in b["name"]]


def test_compile_command_takes_row_bands_and_the_report_says_where(windows, tmp_path, capsys):
    from edgetrain.cli import main

    path, _ = windows
    main(["compile", path, "-o", str(tmp_path / "out"), "--update-policy", "last:1", "--row-bands"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    bands = report["functions"]["train_step"]["row_bands"]
    assert bands["ops"] >= 3 and bands["bands"] > 1
    said = f"train_step runs its first {bands['ops']} ops in {bands['bands']} row bands"
    assert said in capsys.readouterr().out and said in (tmp_path / "out" / "report.txt").read_text()


def test_inference_only_builds_take_row_bands(windows, tmp_path):
    """generate_inference's infer in bands: onnxruntime's outputs, the whole build's bits, in a
    smaller arena."""
    path, _ = windows
    x = np.random.default_rng(3).normal(size=(2, 3, 45, 38)).astype(np.float32)
    outputs, arena = {}, {}
    for bands in (False, True):
        out = artifacts.generate_inference(path, tmp_path / str(bands), row_bands=bands)
        ffi, lib = load_library(out)
        outputs[bands] = np.zeros((2, 5), np.float32)
        assert lib.model_infer(2, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", outputs[bands])) == 0
        arena[bands] = int(re.search(r"static union \{ float f\[(\d+)\]", (out / "model.c").read_text())[1])
    _same_bits(outputs[False], outputs[True])
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(outputs[True], want, rtol=1e-4, atol=1e-5)
    assert arena[True] < 0.6 * arena[False]


def test_one_dimensional_windows_take_row_bands(tmp_path, figure):
    """A waveform's convolutions and pools in bands of their one axis: the same bits in training,
    evaluation and inference, onnxruntime's outputs, a smaller arena."""
    path = _export(_Waveform(), (1, 1001), tmp_path / "model.onnx")
    rng = np.random.default_rng(4)
    batches = _batches(rng, (1, 1001), 5, 3, 3)
    probe = _batches(rng, (1, 1001), 5, 2, 1)[0]
    _, reports = _with_and_without_bands(path, tmp_path, batches, probe, update_policy="last:1")
    untrained = _build(path, tmp_path / "untrained", update_policy="last:1", row_bands=True)[0]
    untrained.eval()
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": probe[0]})
    np.testing.assert_allclose(untrained.infer(probe[0])[0], want, rtol=1e-4, atol=1e-5)
    assert reports[True]["functions"]["train_step"]["row_bands"]["bands"] > 1
    arena = {bands: reports[bands]["arena_bytes"] for bands in (False, True)}
    figure(f"row bands, one axis: arena {arena[False]:,} B whole, {arena[True]:,} B in bands")
    assert arena[True] < arena[False]


class _Tapering(torch.nn.Module):
    """Every bias trains, so the output gradient runs back to the stem at full resolution: a
    strided stem, a dilated depthwise convolution with its residual and a ReLU6, applied twice (its
    bias's gradient the sum of two), a widening pointwise one, a strided depthwise one and a
    strided pointwise one (a window that skips rows), then the pool and the classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
        self.widen = torch.nn.Conv2d(8, 16, 1)
        self.down = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)
        self.skip = torch.nn.Conv2d(16, 24, 1, stride=2)
        self.fc = torch.nn.Linear(24, 5)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        for _ in range(2):
            x = torch.nn.functional.relu6(self.depthwise(x) + x)
        x = torch.relu(self.down(torch.relu(self.widen(x))))
        return self.fc(torch.relu(self.skip(x)).mean((2, 3)))


def test_bias_gradients_in_row_bands_are_pytorchs(tmp_path, monkeypatch):
    """The backward pass's widest layers in bands (gradient_bands): each band makes its rows of the
    input gradients and sums the rows it owns into the biases' gradients. Checked against PyTorch's
    autograd at batch 3 of a C for any batch. In float, the forward pass's activations are as wide as
    the backward pass's gradients, so the bands lower no peak (the int8 test below shows the RAM):
    here they are forced, by taking away the forward pass's floor."""
    monkeypatch.setattr(bands_module, "_forward_floor", lambda *_: 0.0)
    torch.manual_seed(0)
    net = _Tapering()
    path = _export(net, (3, 41, 37), tmp_path / "model.onnx")
    rng = np.random.default_rng(4)
    x, y = _batches(rng, (3, 41, 37), 5, 3, 1)[0]
    grads = {}
    for bands in (False, True):
        out = artifacts.generate_artifacts(
            path, artifact_directory=tmp_path / str(bands), optimizer="SGD", update_policy="bias", row_bands=bands
        )
        report = json.loads((out / "report.json").read_text())
        state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
        module = api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
        module.train()
        module(x, y)
        grads[bands] = {name: p.grad.copy() for name, p in state.parameters.items() if p.requires_grad}
    assert "gradient_bands" not in report["functions"]["eval_step"]
    banded = report["functions"]["train_step"]["gradient_bands"]
    assert banded["bands"] > 1
    loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    want = {name: p.grad.numpy() for name, p in net.named_parameters() if name.endswith("bias")}
    assert set(grads[True]) == set(want)
    for name, grad in grads[True].items():
        np.testing.assert_allclose(grad, want[name], rtol=1e-4, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(grad, grads[False][name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("max_batch, batch", [(1, 1), (None, 2)], ids=["batch-1", "any-batch"])
def test_int8_bias_training_in_gradient_bands(tmp_path, figure, max_batch, batch):
    """MobileNetV2 in small, int8, every bias and the classifier trained with a fused update (VWW's
    policy): the backward pass's widest layers run in bands, their ReLU and quantization masks
    sliced by rows. The forward pass is the same bits; the biases' sums are added in another order,
    so five steps land within rounding of the build without bands, in less RAM."""
    path, batches, options = _int8_inverted_residuals(tmp_path, 5, "bias+last:1", max_batch, batch)
    runs, reports = _with_and_without_bands(path, tmp_path, batches, batches[0], same_bits=False, **options)
    (whole, losses, evaluation, outputs), banded = runs[False], runs[True]
    _same_bits(losses[0], banded[1][0])
    assert not np.array_equal(losses[0], losses[-1])  # it trains
    np.testing.assert_allclose(banded[0], whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(banded[1], losses, rtol=1e-5)
    np.testing.assert_allclose(banded[2], evaluation, rtol=1e-5)
    np.testing.assert_allclose(banded[3], outputs, rtol=1e-4, atol=1e-5)
    assert "gradient_bands" in reports[True]["functions"]["train_step"]
    ram = {bands: reports[bands]["ram_bytes"] for bands in (False, True)}
    figure(f"gradient bands, int8, batch {batch}: ram_bytes {ram[False]:,} B whole, {ram[True]:,} B in bands")
    assert ram[True] < ram[False]


@pytest.mark.parametrize(
    "planes, height, width, first, count", [(1, 5, 7, 0, 5), (6, 9, 5, 2, 3), (4, 48, 48, 40, 8), (3, 7, 1, 6, 1)]
)
def test_mask_rows_are_numpys_rows_of_the_unpacked_bits(tmp_path, planes, height, width, first, count):
    """et_mask_rows (MaskRows) at any bit offset: numpy's rows of the mask's bits, unpacked and
    packed again in numpy's little-endian bit order, every bit past the last 0."""
    ffi, lib = kernel_library(
        tmp_path,
        ["et_shape.h"],
        "void t_mask_rows(int p, int pb, int f, int b, const uint32_t *x, uint32_t *y)"
        " { et_mask_rows(p, pb, f, b, x, y); }\n",
        "void t_mask_rows(int p, int pb, int f, int b, const uint32_t *x, uint32_t *y);",
    )
    rng = np.random.default_rng(planes * height + first)
    bits = rng.integers(0, 2, (planes, height, width)).astype(bool)
    words = np.packbits(bits.ravel(), bitorder="little")
    mask = np.pad(words, (0, -words.size % 4)).view("<u4").copy()
    out = np.full(-(-planes * count * width // 32), 0xFFFFFFFF, np.uint32)
    x, y = (ffi.cast("uint32_t *", a.ctypes.data) for a in (mask, out))
    lib.t_mask_rows(planes, height * width, first * width, count * width, x, y)
    got = np.unpackbits(out.view(np.uint8), bitorder="little")
    want = bits[:, first : first + count].ravel()
    np.testing.assert_array_equal(got[: want.size], want)
    assert not got[want.size :].any()
