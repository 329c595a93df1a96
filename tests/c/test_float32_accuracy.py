"""Float32 accuracy: the C's gradients are as close to exact as PyTorch's float32 ones.

One training step of the MLPerf Tiny DS-CNN (KWS) and MobileNetV1-0.25 (VWW), exported in training
form, at batch 2: every gradient and every BatchNormalization running statistic is compared with
PyTorch autograd in float64 on the same weights and batch. Each tensor must be within
max(1e-4 * max(1, max|ref|), 3 x PyTorch float32's own error on it) (max|torch float32 - torch
float64|); both errors are printed (pytest -s). The same for a Conv + BatchNormalization block over
2 x 96 x 96 values, global average pooling and a Dense layer, whose float32 errors are a hundred times
below that floor: there the floor is 1e-6 * max(1, max|ref|).

Long float32 sums taken in order (BatchNormalization's statistics and gradients over 2 x 48 x 48
values, the convolutions' weight and bias gradients) made MobileNet's errors 4 to 5 times PyTorch's
and the block's up to 40 times; blocked and pairwise (et_linalg.h's long sums) they are about
PyTorch's. What remains is float32 rounding of each product and sum, where PyTorch's convolutions
fuse multiply-adds and the C's, the same bits on every target, may not.

ReLU's derivative jumps at 0: where float32 rounding leaves a ReLU input on the other side of 0 than
float64 does, the gradients below it move by percents, for PyTorch float32 as for the C, at places of
their own (in about one MobileNet batch in six each). That measures the kink, not the sums: the batch
is the first (by seed) whose ReLU inputs all lie farther from 0, in float64, than float32's largest
error in their layer (torch float32 against float64).
"""

import copy
import itertools

import numpy as np
import pytest

from edgetrain import api, artifacts

pytest.importorskip("torch")
import torch
from torch import nn

from examples.models.mlperf_tiny import MODELS, export_training

BATCH = 2
TIMES_TORCH = 3


def _conv_bn_block() -> nn.Module:
    """Conv 3x3 -> BatchNormalization (statistics and gradients over 2 x 96 x 96 values) -> ReLU ->
    global average pooling -> Dense."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    model.input_shape = (3, 96, 96)
    return model


# builder, classes, floor
CASES = {
    "kws": (MODELS["kws"]["build"], 12, 1e-4),
    "vww": (MODELS["vww"]["build"], 2, 1e-4),
    "conv_bn": (_conv_bn_block, 4, 1e-6),
}


def _step(net, x, target, dtype):
    """(gradients, running statistics) of one training step of `net` in `dtype`, as float64 arrays."""
    net = copy.deepcopy(net).to(dtype).train()
    nn.functional.cross_entropy(net(torch.from_numpy(x).to(dtype)), torch.from_numpy(target)).backward()
    return (
        {name: p.grad.double().numpy() for name, p in net.named_parameters()},
        {name: b.double().numpy() for name, b in net.named_buffers() if "running" in name},
    )


def _relu_inputs(net, x, dtype) -> list[np.ndarray]:
    net = copy.deepcopy(net).to(dtype).train()
    seen = []
    for module in net.modules():
        if isinstance(module, nn.ReLU):
            module.register_forward_hook(lambda m, args, out: seen.append(args[0].double().numpy()))
    with torch.no_grad():
        net(torch.from_numpy(x).to(dtype))
    return seen


def _batch(net, classes):
    """(seed, x, target): the first batch that float32 rounding cannot push across a ReLU's kink."""
    for seed in itertools.count():
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(BATCH, *net.input_shape)).astype(np.float32)
        target = rng.integers(0, classes, BATCH)
        exact, rounded = _relu_inputs(net, x, torch.float64), _relu_inputs(net, x, torch.float32)
        if all(np.abs(e).min() > np.abs(r - e).max() for e, r in zip(exact, rounded)):
            return seed, x, target


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    build, classes, floor = CASES[request.param]
    model, net = export_training(build(), BATCH)
    out = artifacts.generate_artifacts(
        model,
        artifact_directory=tmp_path_factory.mktemp(request.param),
        loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.SGD,
    )
    return request.param, out, net, classes, floor


def test_gradients_and_statistics_are_as_accurate_as_torch_float32(case):
    name, out, net, classes, floor = case
    seed, x, target = _batch(net, classes)
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    module(x, target)
    grads, stats = _step(net, x, target, torch.float64)
    rounded = dict(zip(("grads", "stats"), _step(net, x, target, torch.float32)))
    exact = {**grads, **stats}
    rounded = {**rounded["grads"], **rounded["stats"]}
    got = {**{k: state.parameters[k].grad for k in grads}, **{k: state.parameters[k].data for k in stats}}

    rows = []
    for k, want in exact.items():
        err = float(np.abs(got[k] - want).max())
        torch_err = float(np.abs(rounded[k] - want).max())
        bound = max(floor * max(1.0, float(np.abs(want).max())), TIMES_TORCH * torch_err)
        rows.append((err / bound, k, err, torch_err, bound))
    print(f"\n{name} (batch seed {seed}): tensor, max|C - float64|, max|torch float32 - float64|, bound")
    for ratio, k, err, torch_err, bound in sorted(rows, reverse=True):
        print(f"  {k:22s} {err:9.3g} {torch_err:9.3g} {bound:9.3g}  ({ratio:.2f} of the bound)")
    assert len(rows) == len(list(net.parameters())) + 2 * sum(
        isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules()
    )
    worst = max(rows)
    assert worst[0] <= 1, (
        f"{worst[1]}: max|C - float64| = {worst[2]:.3g} > {worst[4]:.3g} (torch float32: {worst[3]:.3g})"
    )
