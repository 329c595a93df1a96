"""Target tier: the generated trainer built for every target (targets/*.mk) and run there, under
QEMU unless host. Training prints the same `step` lines and parameter hash everywhere, and both
equal what the host trainer computes through the Python API. A test skips only where a target's
tool is absent, naming the package; under CI (which installs them all) it fails instead."""

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import api, artifacts, codegen, firmware, targets
from edgetrain.cli import main
from edgetrain.errors import EdgetrainError
from edgetrain.ops import REGISTRY
from models import mlp

TARGETS = targets.names()
STEPS = 100


def need(target: str) -> targets.Target:
    spec = targets.load(target)
    missing = spec.missing()
    if missing:
        message = (
            f"target {target}: {', '.join(t for t, _ in missing)} missing; "
            f"apt-get install {' '.join(dict.fromkeys(p for _, p in missing))}"
        )
        if os.environ.get("CI"):
            pytest.fail(message + " (CI installs every target's packages: see .ci/run)")
        pytest.skip(message)
    return spec


def need_ops(model: onnx.ModelProto) -> None:
    absent = sorted({n.op_type for n in model.graph.node} - {op for domain, op in REGISTRY if domain == ""})
    if absent:
        pytest.skip(f"ops not registered yet: {', '.join(absent)}")


def _param(rng, name, shape, fan_in):
    bound = 1 / np.sqrt(fan_in)
    return numpy_helper.from_array(rng.uniform(-bound, bound, shape).astype(np.float32), name)


def small_cnn(batch=4, seed=0) -> onnx.ModelProto:
    """Conv -> BatchNormalization (training form: batch statistics, running ones updated) -> Relu ->
    MaxPool -> Flatten -> Gemm on 1x8x8 images."""
    rng = np.random.default_rng(seed)
    c = 4
    inits = [
        _param(rng, "conv.weight", (c, 1, 3, 3), 9),
        _param(rng, "conv.bias", (c,), 9),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "bn.weight"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, c).astype(np.float32), "bn.bias"),
        numpy_helper.from_array(np.zeros(c, np.float32), "bn.running_mean"),
        numpy_helper.from_array(np.ones(c, np.float32), "bn.running_var"),
        _param(rng, "fc.weight", (3, c * 16), c * 16),
        _param(rng, "fc.bias", (3,), c * 16),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization",
            ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
            ["b", "bn.mean_out", "bn.var_out"],
            training_mode=1,
        ),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def conv_zoo(batch=2, seed=0) -> onnx.ModelProto:
    """One of each way the runtime runs a convolution, forward, input and weight gradients: host builds
    take register tiles and padded planes, the ARM targets scalar sums and clipped reads, which must
    agree bit for bit. 3x3 (4+ output channels, grouped), depthwise with strides 2 and 1, pointwise (over a
    6x6 plane: products along channels), strided 3x3 (its input gradient by phases), and a strided
    ConvTranspose, on 2x12x12 images. Weight gradients over the 6x6 and 3x3 planes sum in order, the
    others in lanes."""
    rng = np.random.default_rng(seed)
    layers = [
        ("c1", (8, 2, 3, 3), {"pads": [1, 1, 1, 1]}),
        ("c2", (8, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
        ("c3", (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("c4", (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
        ("c5", (16, 8, 1, 1), {}),
        ("c6", (16, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ]
    inits, nodes, x = [], [], "x"
    for name, shape, attrs in layers:
        inits += [
            _param(rng, f"{name}.weight", shape, int(np.prod(shape[1:]))),
            _param(rng, f"{name}.bias", shape[:1], int(np.prod(shape[1:]))),
        ]
        nodes += [
            helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [name], **attrs),
            helper.make_node("Relu", [name], [f"{name}.relu"]),
        ]
        x = f"{name}.relu"
    inits += [
        _param(rng, "t.weight", (16, 4, 2, 2), 64),
        _param(rng, "fc.weight", (3, 4), 4),
        _param(rng, "fc.bias", (3,), 4),
    ]
    nodes += [
        helper.make_node("ConvTranspose", [x, "t.weight"], ["t"], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["t"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "zoo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 2, 12, 12])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def qdq_cnn(batch=4, seed=0) -> onnx.ModelProto:
    """A quantized model in the QDQ form quantize_static writes: int8 weights per output channel and
    int32 biases that DequantizeLinear reads, the activations quantized and dequantized (int8, the
    logits uint8), Conv -> Relu -> MaxPool -> Flatten -> Gemm on 1x8x8 images."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def fake_quant(x, scale, zero_point):
        s, z = const(f"{x}.scale", np.float32(scale)), const(f"{x}.zero_point", zero_point)
        nodes.extend(
            [
                helper.make_node("QuantizeLinear", [x, s, z], [f"{x}.q"]),
                helper.make_node("DequantizeLinear", [f"{x}.q", s, z], [f"{x}.dq"]),
            ]
        )
        return f"{x}.dq"

    def layer(name, shape, input_scale):
        w = rng.uniform(-1, 1, shape) / np.sqrt(np.prod(shape[1:]))
        w_scale = (np.abs(w).reshape(shape[0], -1).max(axis=1) / 127).astype(np.float32)
        q = np.rint(w / w_scale.reshape(-1, *[1] * (len(shape) - 1))).astype(np.int8)
        b = np.rint(rng.uniform(-0.1, 0.1, shape[0]) / (input_scale * w_scale)).astype(np.int32)
        for part, values, scale in (("weight", q, w_scale), ("bias", b, (input_scale * w_scale).astype(np.float32))):
            args = [const(f"{name}.{part}_quantized", values), const(f"{name}.{part}_scale", scale)]
            args.append(const(f"{name}.{part}_zero_point", np.zeros(shape[0], values.dtype)))
            nodes.append(helper.make_node("DequantizeLinear", args, [f"{name}.{part}"], axis=0))
        return f"{name}.weight", f"{name}.bias"

    x = fake_quant("x", 0.02, np.int8(0))
    nodes.append(helper.make_node("Conv", [x, *layer("conv", (4, 1, 3, 3), 0.02)], ["c"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes += [
        helper.make_node("MaxPool", [fake_quant("r", 0.01, np.int8(-128))], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", *layer("fc", (3, 64), 0.01)], ["y"], transB=1),
    ]
    nodes.append(helper.make_node("Identity", [fake_quant("y", 0.01, np.uint8(128))], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "qdq_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _calibration(shape) -> dict:
    """generate_artifacts' options for quantize="int8", calibrated on 4 random batches of `shape`."""
    rng = np.random.default_rng(2)
    return {"quantize": "int8", "calibration_data": [rng.normal(size=shape).astype(np.float32) for _ in range(4)]}


# name: (model, input shape, learning rate or None for the default, optimizer, other options)
CASES = {
    "mlp": (lambda: mlp(batch=4), (4, 8), None, "AdamW", {}),
    "mlp_sgd": (lambda: mlp(batch=4), (4, 8), 0.05, "SGD", {}),  # plain SGD: its own update kernel
    "mlp_dropout": (lambda: mlp(batch=4, dropout=0.25), (4, 8), 0.01, "AdamW", {}),
    "cnn": (small_cnn, (4, 1, 8, 8), None, "AdamW", {}),
    "conv_zoo": (conv_zoo, (2, 2, 12, 12), None, "AdamW", {}),
    "qdq_cnn": (qdq_cnn, (4, 1, 8, 8), None, "AdamW", {}),  # quantization-aware: QuantizeLinear's rounding
    # int8 layers of every kind (full, grouped, depthwise, pointwise, strided): SMLAD where the core has
    # it; the frozen ones' weights compiled in as integers (et_fixed where frozen weights are writable)
    "conv_zoo_int8": (
        lambda: conv_zoo(batch=1),
        (1, 2, 12, 12),
        None,
        "AdamW",
        # fused: the trained int8 weights train as integers (QAS), stochastic rounding and all
        {**_calibration((1, 2, 12, 12)), "update_policy": "bias+last:2", "fused_update": True},
    ),
    # the same in row bands: the backward pass's last layers a band at a time, their masks sliced by rows
    "conv_zoo_int8_bands": (
        lambda: conv_zoo(batch=1),
        (1, 2, 12, 12),
        None,
        "AdamW",
        {**_calibration((1, 2, 12, 12)), "update_policy": "bias+last:2", "fused_update": True, "row_bands": True},
    ),
}


def make_data(shape, batches=5, classes=3, seed=1) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=(batches, *shape)).astype(np.float32),
        "y": rng.integers(0, classes, size=(batches, shape[0])),
    }


def reference_lines(directory, data, steps, lr=None, label="") -> list[str]:
    """What the harness must print, computed by the host trainer through the Python API."""
    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = api.Module(directory / "training_model.onnx", state, directory / "eval_model.onnx")
    optimizer = api.Optimizer(directory / "optimizer_model.onnx", module)
    if lr is not None:
        optimizer.set_learning_rate(lr)
    module.train()
    lines = []
    batches = len(data["x"])
    for i in range(steps):
        loss = module(data["x"][i % batches], data["y"][i % batches])
        optimizer.step()
        module.lazy_reset_grad()
        lines.append(f"{label}step {i} loss {float(np.float32(loss)):.9g}")
    params = module.get_contiguous_parameters(trainable_only=True).astype("<f4")
    return lines + [f"{label}params sha256 {hashlib.sha256(params.tobytes()).hexdigest()}"]


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    build, shape, lr, optimizer, options = CASES[request.param]
    model = build()
    need_ops(model)
    directory = tmp_path_factory.mktemp(request.param)
    artifacts.generate_artifacts(
        model, artifact_directory=directory, optimizer=artifacts.OptimType[optimizer], **options
    )
    if options.get("row_bands"):  # the case is there for its bands: they must be taken
        assert "gradient_bands" in json.loads((directory / "report.json").read_text())["functions"]["train_step"]
    data = make_data(shape)
    np.savez(directory / "data.npz", **data)
    return directory, lr, reference_lines(directory, data, STEPS, lr)


@pytest.mark.parametrize("target", TARGETS)
def test_training_is_bit_identical_on_every_target(case, target):
    directory, lr, expected = case
    need(target)
    printed = firmware.run(
        [(directory, directory / "data.npz")], target, STEPS, lr, build=directory / target, timeout=120
    )
    assert printed.splitlines() == expected


def test_two_models_link_into_one_firmware(tmp_path):
    need("cortex-m4")
    runs = []
    for prefix, sizes, seed in (("kws", (8, 16, 3), 0), ("anomaly", (6, 5, 6), 3)):
        directory = tmp_path / prefix
        loss = artifacts.LossType.CrossEntropyLoss if prefix == "kws" else artifacts.LossType.MSELoss
        artifacts.generate_artifacts(
            mlp(batch=2, sizes=sizes, seed=seed), artifact_directory=directory, loss=loss, c_prefix=prefix
        )
        data = make_data((2, sizes[0]), seed=seed)
        if prefix == "anomaly":  # an autoencoder: float targets
            data["y"] = data["x"] * 0.5
        runs.append((directory, data))
    printed = firmware.run(runs, "cortex-m4", 20, build=tmp_path / "firmware")
    expected = []
    for directory, data in runs:
        expected += reference_lines(directory, data, 20, label=f"{directory.name} ")
    got = printed.splitlines()
    assert sorted(got) == sorted(expected)
    assert got[:2] == [expected[0], expected[21]]  # the models take turns step by step


def test_size_report_on_every_target(tmp_path):
    model = mlp(batch=4, sizes=(16, 32, 4))
    for target in TARGETS:
        need(target)
        directory = artifacts.generate_artifacts(model, artifact_directory=tmp_path / target, target=target)
        report = json.loads((directory / "report.json").read_text())
        sizes = report["size_breakdown"]
        assert report["target"] == target and report["size_tool"] == targets.load(target).size
        assert report["flash_bytes"] == sizes["code"] + sizes["constant_weights"] + sizes["initial_values"]
        assert report["ram_bytes"] == sizes["arena"] + sizes["state"] == sum(report["ram_breakdown"].values())
        assert sizes["arena"] == report["arena_bytes"] == report["ram_breakdown"]["arena"]
        trainable = 4 * report["trainable_parameters"]
        assert sizes["initial_values"] >= trainable and sizes["state"] >= 4 * trainable  # params, grads, m, v
        assert 0 < sizes["code"] < 64 * 1024
        assert "total flash" in (directory / "report.txt").read_text()


def test_compile_command_records_the_target_sizes(tmp_path, capsys):
    need("cortex-m4")
    onnx.save(mlp(batch=4), tmp_path / "mlp.onnx")
    assert main(["compile", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "out"), "--target", "cortex-m4"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["target"] == "cortex-m4" and report["flash_bytes"] > 0 and report["ram_bytes"] > 0
    assert "measured for cortex-m4 by arm-none-eabi-size" in capsys.readouterr().out


def test_run_command_and_its_errors(tmp_path, capsys):
    need("host")
    directory = tmp_path / "mlp"
    artifacts.generate_artifacts(mlp(batch=4), artifact_directory=directory)
    data = make_data((4, 8), batches=2)
    np.savez(tmp_path / "data.npz", **data)
    assert main(["run", str(directory), "--data", str(tmp_path / "data.npz"), "--steps", "3", "--lr", "0.5"]) == 0
    assert capsys.readouterr().out.splitlines() == reference_lines(directory, data, 3, lr=0.5)
    np.savez(tmp_path / "float_labels.npz", x=data["x"], y=data["y"].astype(np.float32))
    np.savez(tmp_path / "wrong_shape.npz", x=data["x"][:, :, :4], y=data["y"])
    for name, message in (
        ("float_labels", "labels are integers"),
        ("wrong_shape", "32 values per batch"),
        ("missing", "cannot read the data"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["run", str(directory), "--data", str(tmp_path / f"{name}.npz"), "--steps", "1"])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_emulator_runs_are_bounded_by_a_timeout(tmp_path):
    need("cortex-m3")
    directory = artifacts.generate_artifacts(mlp(batch=4), artifact_directory=tmp_path / "mlp")
    with pytest.raises(EdgetrainError, match="did not finish on cortex-m3 within 2 s"):
        firmware.run([(directory, make_data((4, 8)))], "cortex-m3", 10**9, timeout=2)


def test_generated_c_is_cppcheck_clean(tmp_path, monkeypatch):
    """cppcheck over a trainer with every runtime kernel pasted into its model.c (which otherwise
    pastes only those it uses), so this checks them all.
    Suppressed: variableScope, a style suggestion (declare in the narrowest block) that the runtime
    declines on purpose, keeping a kernel's variables together at its top; it flags no defect."""
    if shutil.which("cppcheck") is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("cppcheck missing; apt-get install cppcheck")
    monkeypatch.setattr(artifacts, "render", functools.partial(codegen.render, every_kernel=True))
    directory = artifacts.generate_artifacts(
        mlp(batch=4, dropout=0.1), artifact_directory=tmp_path / "mlp", frozen_params=["fc0.bias"]
    )
    result = subprocess.run(
        [
            "cppcheck",
            "--std=c99",
            "--enable=warning,style,performance,portability",
            "--suppress=variableScope",
            "--error-exitcode=1",
            "--quiet",
            "--template={file}:{line}: {severity} {id}: {message}",
            str(directory / "model.c"),
        ],
        capture_output=True,
        text=True,
        timeout=600,  # about 110 s on an idle core: cppcheck's value flow over the unrolled depthwise bands
    )
    assert result.returncode == 0, result.stderr


def test_kws_dscnn_code_fits_48_kb(tmp_path):
    """MLPerf Tiny's KWS DS-CNN trainer on a Cortex-M4: code (flash minus constant weights and the
    parameters' initial values) stays within 48 KB."""
    need("cortex-m4")
    pytest.importorskip("torch")
    from examples.models.mlperf_tiny import ds_cnn, export_training

    model, _ = export_training(ds_cnn(), batch=1)
    need_ops(model)
    directory = artifacts.generate_artifacts(model, artifact_directory=tmp_path / "kws", target="cortex-m4")
    report = json.loads((directory / "report.json").read_text())
    print(json.dumps({k: report[k] for k in ("flash_bytes", "ram_bytes", "size_breakdown")}))
    assert report["size_breakdown"]["code"] <= 48 * 1024


def test_cortex_m55_has_no_helium_float_vectors(tmp_path):
    """Helium's floating-point vectors flush subnormals to zero (QEMU, as the architecture, runs them
    under the standard FPSCR value): emitted by gcc's vectorizer, they would make cortex-m55's results
    differ from every other target's wherever a subnormal arises. Its build leaves them out; with
    them allowed, the same C has them, so the check can see them."""
    spec = need("cortex-m55")
    directory = artifacts.generate_artifacts(mlp(batch=4, sizes=(16, 32, 4)), artifact_directory=tmp_path / "mlp")

    def float_vectors(cflags) -> int:
        compiled = subprocess.run(
            [spec.cc, *cflags, "-S", "-o", "-", str(directory / "model.c")], capture_output=True, text=True
        )
        assert compiled.returncode == 0, compiled.stderr
        return len(re.findall(r"\.f32\s+q\d", compiled.stdout))

    assert "-mcpu=cortex-m55+nomve.fp" in spec.cflags
    assert float_vectors(spec.cflags) == 0
    assert float_vectors([f for f in spec.cflags if not f.startswith("-mcpu")] + ["-mcpu=cortex-m55"]) > 0


def test_int8_layers_take_two_products_per_smlad_where_the_core_has_them(tmp_path):
    """An int8 model's layers sum with SMLAD on Cortex-M4 (the DSP extension) and without it on
    Cortex-M3 (none): the bit-identity cases above then check the two against each other."""
    build, _, _, _, options = CASES["conv_zoo_int8"]
    directory = artifacts.generate_artifacts(build(), artifact_directory=tmp_path / "int8", **options)

    def smlads(target: str) -> int:
        spec = need(target)
        compiled = subprocess.run(
            [spec.cc, *spec.cflags, "-S", "-o", "-", str(directory / "model.c")], capture_output=True, text=True
        )
        assert compiled.returncode == 0, compiled.stderr
        return len(re.findall(r"\bsmlad\b", compiled.stdout))

    assert smlads("cortex-m4") > 0
    assert smlads("cortex-m3") == 0


MVE_PROBE = r"""
#include <stdio.h>
#include <string.h>
#include <arm_mve.h>
int main(void)
{
    volatile float a = 1.5e-39f, b = 0.5f; /* a subnormal, and a subnormal product */
    float vector[4], scalar = a * b;
    unsigned long bits[2];
    vst1q_f32(vector, vmulq_f32(vdupq_n_f32(a), vdupq_n_f32(b)));
    memcpy(&bits[0], &vector[0], 4);
    memcpy(&bits[1], &scalar, 4);
    printf("vector %08lx scalar %08lx\n", bits[0], bits[1]);
    return 0;
}
"""


def _harness_alone(build, harness: str) -> None:
    """A firmware build directory (`make ... BUILD=build MODELS=model run`) whose program is `harness`
    alone: the one model the Makefile links is an empty translation unit."""
    (build / "model").mkdir()
    (build / "model" / "model.c").write_text("typedef int empty_translation_unit;\n")
    (build / "model" / "model.h").write_text("")
    (build / "harness.c").write_text(harness)


def test_helium_float_vectors_flush_subnormals(tmp_path):
    """Why cortex-m55 builds without Helium's float vectors: on QEMU's Cortex-M55 a subnormal
    product comes out +0 from VMUL.F32 on vectors, and as the subnormal it is from the scalar FPU."""
    need("cortex-m55")
    _harness_alone(tmp_path, MVE_PROBE)
    run = targets.make(
        "TARGET=cortex-m55",
        "BUILD=.",
        "MODELS=model",
        "ARCH=-mcpu=cortex-m55 -mthumb -mfloat-abi=hard",
        "run",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["vector", "00000000", "scalar", f"{np.float32(1.5e-39 * 0.5).view(np.uint32):08x}"]


# The 32-bit ARM targets: their scalar FPU paths (VMLA, and the assembly tile where there is one)
# and, on cortex-m3, the soft-float C.
ARM_TARGETS = [t for t in TARGETS if t.startswith("cortex-m") or t == "linux-armhf"]
KERNEL_CASES = 60  # per kernel: about 5 s on QEMU's Cortex-M4, and every path below reached
# Paths of the microcontrollers' builds that the shapes must reach (the host's test checks them all).
ARM_PATHS = {
    "rows_4x4_strided",
    "depthwise_planes_3x3",
    "depthwise_planes_3x3_strided",
    "grad_depthwise_planes_3x3",
}
# The weight-gradient lanes: in assembly where the FPU has VMLA, in C on cortex-m3's soft float.
LANES_PATH = {"cortex-m3": "dot_tile_scalar_4x4"}
# The loops in assembly where the FPU has VMLA (every ARM target but cortex-m3): dot products' lanes,
# the rows of a product that 4 x 4 tiles leave (a batch of one's), an outer product's rows (Gemm's at
# K = 1, a gradient's accumulation) and plain SGD.
VMLA_PATHS = {"dot_tile_vmla", "dot_lanes_vmla", "rows_one_vmla", "scaled_row_vmla", "sgd_vmla"}


@pytest.mark.parametrize("target", ARM_TARGETS)
def test_kernel_fast_paths_match_their_references_on_the_target(tmp_path, target):
    """tests/c/kernel_references.c, built for the target and run there: every fast path of the
    matrix product and the convolutions against its plain reference, bit for bit, on random shapes."""
    need(target)
    tests = Path(__file__).resolve().parents[1]
    for source in [*(tests.parent / "runtime_c").glob("*.h"), tests / "c" / "kernel_references.c"]:
        shutil.copy(source, tmp_path)
    _harness_alone(
        tmp_path,
        "#define main kernel_references_main\n"
        '#include "kernel_references.c"\n'
        "#undef main\n"
        "int main(void)\n{\n"
        f'    static char name[] = "kernel_references", seed[] = "7", cases[] = "{KERNEL_CASES}";\n'
        "    char *argv[] = {name, seed, cases, 0};\n"
        "    return kernel_references_main(3, argv);\n}\n",
    )
    run = targets.make(f"TARGET={target}", "BUILD=.", "MODELS=model", "RUN_TIMEOUT=300", "run", cwd=tmp_path)
    mismatches = [line for line in run.stdout.splitlines() if line.startswith("mismatch ")]
    assert run.returncode == 0 and not mismatches, (run.stderr + "\n".join(mismatches[:20]))[-4000:]
    ran = set(re.findall(r"^path (\w+) \d+$", run.stdout, re.M))
    expected = ARM_PATHS | ({LANES_PATH[target]} if target in LANES_PATH else VMLA_PATHS)
    assert expected <= ran, f"paths that did not run: {sorted(expected - ran)}"
    assert int(re.search(r"^compared (\d+)$", run.stdout, re.M).group(1)) >= 4 * KERNEL_CASES
