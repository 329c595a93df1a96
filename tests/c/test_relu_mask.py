"""ReLU's gradient from a bit mask: the forward pass keeps one bit per element of a ReLU's result
(ReluMask, uint32 words in the arena) instead of its floats, which then die with their last forward
reader. The kernels are checked bit for bit against the float rule dX = (Y > 0 ? dY : 0), a trainer
against torch, and the plans for what stays alive into the backward pass; with BatchNormalization
frozen (the eval-mode export, as the Tiny Training Engine trains), MobileNetV1-0.25 at 96x96 trains
its biases and classifier in 256 KB."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgetrain.codegen.emit import build
from edgetrain.frontend import load_model
from edgetrain.memory.policy import policy_parameters, static_ram_bytes
from edgetrain.ops.elementwise import ReluMask
from edgetrain.optim import LossType, OptimizerSpec, OptimType
from edgetrain.trainer import build_trainer
from gradcheck import assert_close, compile_module

pytest.importorskip("torch")
import torch
from torch import nn

from examples.models.mlperf_tiny import MODELS, export_eval, export_training, freeze_batchnorm

cffi = pytest.importorskip("cffi")

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
KB = 1024


# ---- the kernels, bit for bit ----


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    build_dir = tmp_path_factory.mktemp("relu_mask")
    source = build_dir / "relu_mask.c"
    source.write_text(
        "\n".join((RUNTIME / h).read_text() for h in ("et_common.h", "et_math.h", "et_elementwise.h"))
        + "void t_mask(int n, const float *Y, uint32_t *mask) { et_relu_mask_f32(n, Y, mask); }\n"
        "void t_grad(int n, const float *dY, const uint32_t *mask, float *dX)"
        " { et_relu_grad_f32(n, dY, mask, dX); }\n"
    )
    lib = build_dir / "librelu_mask.so"
    subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
            "-shared",
            "-fPIC",
            str(source),
            "-o",
            str(lib),
        ],
        check=True,
        capture_output=True,
    )
    ffi = cffi.FFI()
    ffi.cdef("void t_mask(int, const float *, uint32_t *); void t_grad(int, const float *, const uint32_t *, float *);")
    return ffi, ffi.dlopen(str(lib))


EDGES = np.array([np.nan, -np.inf, -1.0, -1e-45, -0.0, 0.0, 1e-45, 1.0, np.inf], np.float32)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 100])
def test_mask_kernels_match_the_float_rule(kernels, n):
    ffi, lib = kernels
    rng = np.random.default_rng(n)
    y = np.where(rng.random(n) < 0.5, rng.choice(EDGES, n), rng.normal(size=n)).astype(np.float32)
    dy = np.where(rng.random(n) < 0.2, rng.choice(EDGES, n), rng.normal(size=n)).astype(np.float32)
    words = -(-n // 32)
    mask = np.full(words + 1, 0xFFFFFFFF, np.uint32)  # the last word is a guard the kernel must not touch
    lib.t_mask(n, ffi.cast("const float *", y.ctypes.data), ffi.cast("uint32_t *", mask.ctypes.data))
    assert mask[-1] == 0xFFFFFFFF
    # The ONNX reference reads the same bits; those past n are 0.
    np.testing.assert_array_equal(mask[:words], ReluMask.reference(y)[0])
    want = np.where(y > 0, dy, np.float32(0)).astype(np.float32)
    dx = np.empty_like(dy)
    lib.t_grad(
        n,
        ffi.cast("const float *", dy.ctypes.data),
        ffi.cast("const uint32_t *", mask.ctypes.data),
        ffi.cast("float *", dx.ctypes.data),
    )
    np.testing.assert_array_equal(dx.view(np.uint32), want.view(np.uint32))
    lib.t_grad(
        n,
        ffi.cast("const float *", dy.ctypes.data),
        ffi.cast("const uint32_t *", mask.ctypes.data),
        ffi.cast("float *", dy.ctypes.data),
    )  # in place, as the planner may put it
    np.testing.assert_array_equal(dy.view(np.uint32), want.view(np.uint32))


# ---- trainers ----


def compile_plan(model, policy):
    """(trainer, ModelC) of `model` with the policy's parameters, fused SGD update, without gcc."""
    names = policy_parameters(load_model(model, None), policy)
    trainer = build_trainer(
        load_model(model, None),
        loss=LossType.CrossEntropyLoss,
        optimizer=OptimizerSpec(OptimType.SGD),
        requires_grad=names,
    )
    return trainer, build(trainer, "model", fused_update=True)


def kept_for_backward(trainer, m):
    """The train_step arena blocks live from the forward pass into the backward pass."""
    first = trainer.train_nodes[trainer.backward_start]
    start = next(i for i, s in enumerate(m.train.stmts) if s.comment == f"{first.op} {first.name}")
    return [b for b in m.train.blocks if b.start < start <= b.end]


def conv_relu_stack():
    """Two Conv+ReLU at 7x7 (392 values each, a mask of 12.25 words), average pooling, Dense."""
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(7),
        nn.Flatten(),
        nn.Linear(4, 5),
    )
    return export_training(net, batch=2, input_shape=(3, 7, 7))


def test_relu_results_die_in_the_forward_pass():
    model, _ = conv_relu_stack()
    trainer, m = compile_plan(model, "bias")
    relu_outputs = {n.outputs[0] for n in trainer.train_nodes if n.op == "Relu"}
    kept = kept_for_backward(trainer, m)
    names = {name for b in kept for name in b.name.split(" -> ")}
    assert len(relu_outputs) == 2 and not relu_outputs & names
    masks = [b for b in kept if b.name.endswith("relumask")]
    assert [b.size for b in masks] == [4 * 13] * 2  # 392 bits each, in whole uint32 words
    # Beside the masks, only the loss's own saved values (2 x 5 floats) cross over.
    assert sum(b.size for b in kept) - sum(b.size for b in masks) <= 4 * 2 * 5 + 4


def test_bias_training_matches_torch_step_by_step(tmp_path):
    model, net = conv_relu_stack()
    module, state = compile_module(model, tmp_path, update_policy="bias", fused_update=True, learning_rate=0.1)
    biases = {name: p for name, p in net.named_parameters() if name.endswith("bias")}
    for name, p in net.named_parameters():
        p.requires_grad_(name in biases)
    rng = np.random.default_rng(0)
    module.train()
    for _ in range(5):
        x, y = rng.normal(size=(2, 3, 7, 7)).astype(np.float32), rng.integers(0, 5, 2)
        module(x, y)
        net.zero_grad()
        nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        with torch.no_grad():
            for p in biases.values():
                p -= 0.1 * p.grad
        for name, p in biases.items():
            assert_close(state.parameters[name].data, p.detach().numpy(), name)
    assert all(np.any(p.grad.numpy() != 0) for p in biases.values())  # gradients did flow through both ReLUs


# ---- MobileNetV1-0.25 at 96x96 with BatchNormalization frozen ----


def test_vww_biases_and_classifier_fit_256_kb():
    """Issue 6's figure: every static byte of the trainer (fused SGD, batch 1) within 256 KB. Only
    the ReLU masks and the classifier's input cross from the forward pass into the backward pass:
    frozen statistics make BatchNormalization's bias gradient a channel sum, and its input
    gradient a per-channel scale."""
    torch.manual_seed(0)
    model = export_eval(freeze_batchnorm(MODELS["vww"]["build"]()), batch=1)
    trainer, m = compile_plan(model, "bias+last:1")
    assert static_ram_bytes(m) <= 256 * KB
    kept = kept_for_backward(trainer, m)
    masks = [b for b in kept if b.name.endswith("relumask")]
    assert len(masks) == sum(n.op == "Relu" for n in trainer.train_nodes)
    assert sum(b.size for b in kept) - sum(b.size for b in masks) <= 4 * (256 + 2 * 2 + 4)
    backward = {n.op for n in trainer.train_nodes[trainer.backward_start :]}
    assert not backward & {"BatchNormalizationInferenceGrad", "ConvGradW"}
