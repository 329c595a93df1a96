"""Every registered optimizer, through the generated C, against its op block's own NumPy reference
(the one the ONNX reference runs optimizer_model.onnx with), as optimizer_step and as a fused update.
Adding an optimizer adds its block to edgetrain/optim/optimizers.py, its kernel to
runtime_c/et_optim.h and one entry to CASES here; the last test fails until it is there."""

import numpy as np
import pytest

from edgetrain import api, artifacts
from edgetrain.ir import ET_DOMAIN
from edgetrain.ops import REGISTRY, optimizers
from edgetrain.optim import OptimizerSpec, OptimType
from models import weighted_sum

SHAPE = (4, 5)
STEPS = 30
LR = 0.05

# optimizer -> generate_artifacts' hyperparameters, chosen so every term of its update acts
CASES = {
    "AdamW": dict(weight_decay=0.01),
    "SGD": dict(momentum=0.9, nesterov=True, weight_decay=0.01),
}


def _reference_trajectory(name: str, w: np.ndarray, grads: list[np.ndarray], hyper: dict) -> np.ndarray:
    """W after the op block's reference applied the updates, in float32 as the C computes."""
    reference = REGISTRY[(ET_DOMAIN, name)].reference
    state = [np.zeros_like(w) for _ in optimizers()[name].slots(hyper)]
    for step, g in enumerate(grads):
        w, *state = reference._run(None, np.float32(LR), np.int64(step), w, g, *state, **hyper)
    return w


@pytest.mark.parametrize("fused", [False, True], ids=["optimizer-step", "fused-update"])
@pytest.mark.parametrize("name", list(CASES))
def test_optimizer_matches_its_reference(name, fused, tmp_path):
    out = artifacts.generate_artifacts(
        weighted_sum(SHAPE),
        loss=None,
        optimizer=name,
        learning_rate=LR,
        artifact_directory=tmp_path,
        fused_update=fused,
        **CASES[name],
    )
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state)
    opt = api.Optimizer(out / "optimizer_model.onnx", module)
    w0 = state.parameters["W"].data.copy()
    rng = np.random.default_rng(2)
    grads = []
    for _ in range(STEPS):
        r = rng.normal(size=SHAPE).astype(np.float32)  # the gradient of W (loss = sum(W * r))
        module(r)
        opt.step()
        module.lazy_reset_grad()
        grads.append(r)
    hyper = OptimizerSpec(OptimType(name), **CASES[name]).attrs()
    want = _reference_trajectory(name, w0, grads, hyper)
    got = state.parameters["W"].data
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))
    assert not np.allclose(got, w0)  # the steps did move W


def test_every_registered_optimizer_is_tested():
    assert set(CASES) == set(optimizers())
