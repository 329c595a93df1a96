"""Misusing the API raises ValueError naming what was expected, and changes nothing in the trainer."""

import numpy as np
import pytest

from edgetrain import EdgetrainError, api, artifacts
from models import mlp

BATCH = 4


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return artifacts.generate_artifacts(
        mlp(), artifact_directory=tmp_path_factory.mktemp("misuse"), batch_size=BATCH, frozen_params=["fc0.bias"]
    )


@pytest.fixture
def bound(out):
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH)


X, Y = batch()
BAD_CALLS = {
    "batch too large": ((np.concatenate([X, X[:1]]), np.append(Y, 0)), "takes batches of 1 to 4"),
    "empty batch": ((X[:0], Y[:0]), "a batch of 0 samples"),
    "features missing": ((X[:, :7], Y), r"expects shape \(4, 8\)"),
    "float64 input": ((X.astype(np.float64), Y), "expects dtype float32, got float64"),
    "python list": ((X.tolist(), Y), "expects dtype float32"),
    "int input": ((X.astype(np.int32), Y), "expects dtype float32, got int32"),
    "float labels": ((X, Y.astype(np.float32)), "integer class labels"),
    "labels of the wrong shape": ((X, Y[:, None]), r"input 'labels' expects shape \(4,\), got \(4, 1\)"),
    "fewer labels than samples": ((X, Y[:3]), "disagree on the batch: 'x' holds 4 samples, 'labels' holds 3"),
    "labels beyond int32": ((X, np.array([0, 1, 2, 2**40])), "int32 range"),
    "label out of range": ((X, np.array([0, 1, 2, 3])), r"\[0, number of classes\)"),
    "negative label": ((X, np.array([0, -5, 2, 1])), r"\[0, number of classes\)"),
    "labels missing": ((X,), r"expected 2 arrays \(x, labels\), got 1"),
    "one array too many": ((X, Y, Y), "expected 2 arrays"),
}


@pytest.mark.parametrize("case", BAD_CALLS)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_bad_module_calls(bound, case, mode):
    state, module, _ = bound
    module.train(mode == "train")
    args, message = BAD_CALLS[case]
    before = module._save(True)
    with pytest.raises(ValueError, match=message):
        module(*args)
    assert module._save(True) == before


def test_infer_takes_no_labels(bound):
    _, module, _ = bound
    with pytest.raises(ValueError, match=r"expected 1 arrays \(x\), got 2"):
        module.infer(X, Y)


def test_optimizer_step_needs_gradients(bound):
    state, module, opt = bound
    fresh = module._save(True)
    with pytest.raises(ValueError, match=r"no gradients since lazy_reset_grad\(\)"):
        opt.step()  # nothing computed yet
    assert module._save(True) == fresh

    module(X, Y)
    opt.step()
    opt.step()  # the same gradients again, as ONNX Runtime and PyTorch allow
    module.lazy_reset_grad()
    stepped = module._save(True)
    with pytest.raises(ValueError, match="run a training step first"):
        opt.step()
    module.eval()
    module(X, Y)  # eval mode computes no gradients
    with pytest.raises(ValueError, match="no gradients"):
        opt.step()
    module.train()
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(api.NonFiniteError):
        module(bad, Y)  # a refused step computes none either
    with pytest.raises(ValueError, match="no gradients"):
        opt.step()
    assert module._save(True) == stepped
    module(X, Y)
    opt.step()


@pytest.mark.parametrize(
    "lr, match",
    [
        (-0.1, "finite number >= 0"),
        (float("nan"), "finite number >= 0"),
        (float("inf"), "finite number >= 0"),
        (1e39, "finite number >= 0"),  # past float32, where the C keeps it
        ("0.1", "must be a number, got '0.1'"),
    ],
)
def test_bad_learning_rate(bound, lr, match):
    _, _, opt = bound
    old = opt.get_learning_rate()
    with pytest.raises(ValueError, match=match):
        opt.set_learning_rate(lr)
    assert opt.get_learning_rate() == old


def test_bad_scheduler(bound):
    _, _, opt = bound
    with pytest.raises(ValueError, match="step counts must be >= 0"):
        api.LinearLRScheduler(opt, -1, 10, 0.1)
    with pytest.raises(ValueError, match="finite number"):
        api.LinearLRScheduler(opt, 1, 10, float("nan"))


def test_bad_parameter_buffers_and_views(bound):
    state, module, _ = bound
    everything = module.get_contiguous_parameters()
    before = module._save(True)
    for bad in (everything[:-1], everything.astype(np.float64), everything.reshape(1, -1), everything.tolist()):
        with pytest.raises(ValueError, match=f"1-D float32 buffer of {everything.size} values"):
            module.copy_buffer_to_parameters(bad)
    with pytest.raises(ValueError, match="expects shape"):
        state.parameters["fc0.weight"].data = np.zeros((8, 16), np.float32)
    with pytest.raises(ValueError, match="expects shape"):  # a frozen parameter, which the host can set
        state.parameters["fc0.bias"].data = np.zeros(15, np.float32)
    assert module._save(True) == before


def test_bad_module_arguments(out):
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    with pytest.raises(ValueError, match="device 'cuda'"):
        api.Module(out / "training_model.onnx", state, device="cuda")


@pytest.mark.parametrize("prefix", ["my model", "1st", "x" * 42, "a;b", ""])
def test_bad_prefix(tmp_path, prefix):
    with pytest.raises(EdgetrainError, match="not a C identifier"):
        artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path, batch_size=BATCH, c_prefix=prefix)
