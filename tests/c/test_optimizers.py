"""Optimizer trajectories of the generated C against float64 NumPy implementations of the
formulas in DESIGN.md (AdamW as ONNX Runtime 1.19 generates it, SGD as torch.optim.SGD)."""

import numpy as np
import pytest

from edgetrain import api, artifacts
from models import weighted_sum

SHAPE = (6, 5)
STEPS = 50


def adamw(w, grads, lr, wd, lrs):
    b1, b2, eps = 0.9, 0.999, 1e-6
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for step, (g, lr_now) in enumerate(zip(grads, lrs)):
        t = step + 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr_now * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
        w = w - lr_now * wd * w
    return w


def sgd(w, grads, lr, wd, lrs, momentum=0.0, nesterov=False, clip=None):
    buf = None
    for g, lr_now in zip(grads, lrs):
        if clip is not None:
            norm = np.sqrt(np.sum(g * g))
            g = g * min(1.0, clip / (norm + 1e-6))
        g = g + wd * w
        if momentum:
            buf = g if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        w = w - lr_now * g
    return w


def run(tmp_path, optimizer, lr, schedule=None, **options):
    out = artifacts.generate_artifacts(
        weighted_sum(SHAPE), loss=None, optimizer=optimizer, learning_rate=lr, artifact_directory=tmp_path, **options
    )
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state)
    opt = api.Optimizer(out / "optimizer_model.onnx", module)
    scheduler = api.LinearLRScheduler(opt, *schedule, lr) if schedule else None
    w0 = state.parameters["W"].data.astype(np.float64).copy()
    rng = np.random.default_rng(1)
    grads, lrs = [], []
    for _ in range(STEPS):
        r = rng.normal(size=SHAPE).astype(np.float32)
        module(r)
        lrs.append(opt.get_learning_rate())
        opt.step()
        module.lazy_reset_grad()
        if scheduler:
            scheduler.step()
        grads.append(r.astype(np.float64))
    return w0, grads, lrs, state.parameters["W"].data.copy()


def assert_close(got, want):
    rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
    print(f"max relative difference after {STEPS} steps: {rel:.2e}")
    assert rel <= 1e-5


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_adamw_trajectory(tmp_path, wd):
    w0, grads, lrs, w = run(tmp_path, artifacts.OptimType.AdamW, 0.05, weight_decay=wd)
    assert_close(w, adamw(w0, grads, 0.05, wd, lrs))


def test_adamw_with_linear_schedule(tmp_path):
    w0, grads, lrs, w = run(tmp_path, artifacts.OptimType.AdamW, 0.05, schedule=(10, STEPS))
    factors = [s / 10 if s < 10 else max(0.0, (STEPS - s) / (STEPS - 10)) for s in range(STEPS)]
    # The scheduler sets initial_lr times the factor at the optimizer's step count, from its
    # construction on: 0 at step 0 while warming up (ORT semantics).
    assert np.allclose(lrs, [0.05 * f for f in factors], rtol=1e-6)
    assert_close(w, adamw(w0, grads, 0.05, 0.0, lrs))


@pytest.mark.parametrize(
    "momentum,nesterov,wd,clip",
    [(0.0, False, 0.0, None), (0.9, False, 0.0, None), (0.9, True, 0.01, None), (0.0, False, 0.0, 2.0)],
)
def test_sgd_trajectory(tmp_path, momentum, nesterov, wd, clip):
    w0, grads, lrs, w = run(
        tmp_path,
        artifacts.OptimType.SGD,
        0.02,
        momentum=momentum,
        nesterov=nesterov,
        weight_decay=wd,
        max_grad_norm=clip,
    )
    assert_close(w, sgd(w0, grads, 0.02, wd, lrs, momentum, nesterov, clip))


def test_gradients_accumulate_until_lazy_reset(tmp_path):
    out = artifacts.generate_artifacts(weighted_sum(SHAPE), loss=None, optimizer="SGD", artifact_directory=tmp_path)
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state)
    grad = state.parameters["W"].grad
    r1, r2, r3 = (np.full(SHAPE, v, np.float32) for v in (1.0, 2.0, 5.0))
    module(r1)
    module(r2)
    np.testing.assert_array_equal(grad, r1 + r2)
    module.lazy_reset_grad()
    np.testing.assert_array_equal(grad, r1 + r2)  # lazy: cleared by the next step, not now
    module(r3)
    np.testing.assert_array_equal(grad, r3)
