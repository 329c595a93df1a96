"""Models with nothing to train (issue 21): ONNX Runtime's generate_artifacts accepts a model without
trainable float initializers, or with all of them frozen, and so does edgetrain. The trainer's steps
compute the loss (and update the buffers, such as BatchNormalization's running statistics), the
optimizer step changes nothing but the step count, and checkpoints and the federated calls work on
zero parameters. Each model is exported from torch and its losses compared with torch's."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest

from edgetrain import api, artifacts, checkpoint, onnxblock

torch = pytest.importorskip("torch")

F = torch.nn.functional


def _export(module: torch.nn.Module, args: tuple, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    buffer = io.BytesIO()
    torch.onnx.export(
        module,
        args,
        buffer,
        dynamo=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=inputs,
        output_names=outputs,
    )
    return onnx.load_from_string(buffer.getvalue())


def _trainer(directory):
    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = api.Module(directory / "training_model.onnx", state, directory / "eval_model.onnx")
    return state, module, api.Optimizer(directory / "optimizer_model.onnx", module)


def _saved(state, path) -> checkpoint.CheckpointData:
    api.CheckpointState.save_checkpoint(state, path, include_optimizer_state=True)
    return checkpoint.decode(path.read_bytes())


def test_dropout_alone_evaluates_torchs_cross_entropy_and_its_optimizer_only_counts(tmp_path):
    torch.manual_seed(0)
    x, labels = torch.randn(4, 5), torch.tensor([0, 3, 1, 4])
    model = _export(torch.nn.Dropout(0.3), (x,), ["x"], ["y"])
    directory = artifacts.generate_artifacts(
        model,
        loss=artifacts.LossType.CrossEntropyLoss,
        federated=True,
        artifact_directory=tmp_path / "dropout",
        batch_size=4,
    )
    state, module, optimizer = _trainer(directory)
    assert len(state.parameters) == 0
    assert module.get_parameters_size() == module.get_parameters_size(trainable_only=False) == 0
    assert np.asarray(module.get_contiguous_parameters()).shape == (0,)

    module.eval()
    evaluated = float(module(x.numpy(), labels.numpy().astype(np.int64)))
    assert evaluated == pytest.approx(F.cross_entropy(x, labels).item(), rel=1e-6)
    with pytest.raises(ValueError, match="no gradients"):  # as for any trainer: no training step yet
        optimizer.step()
    module.train()
    trained = float(module(x.numpy(), labels.numpy().astype(np.int64)))
    assert np.isfinite(trained) and trained != evaluated  # dropout is on in training
    optimizer.step()
    module.lazy_reset_grad()

    module.set_reference()
    assert module.get_delta().shape == (0,)
    module.apply_delta(np.zeros(0, np.float32))
    saved = _saved(state, tmp_path / "ckpt")
    assert (saved.step, saved.names, saved.optimizer_state) == (1, [], [[], []])  # AdamW's two empty slots
    state2 = api.CheckpointState.load_checkpoint(tmp_path / "ckpt")
    module2 = api.Module(directory / "training_model.onnx", state2, directory / "eval_model.onnx").eval()
    assert float(module2(x.numpy(), labels.numpy().astype(np.int64))) == evaluated


class _AddConstants(torch.nn.Module):
    """a + x, b + y: as constants (Constant nodes), or as buffers (initializers, which requires_grad=[]
    leaves frozen)."""

    def __init__(self, as_buffers: bool):
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        a, b = torch.randn(3, 4, generator=generator), torch.randn(3, 4, generator=generator)
        if as_buffers:
            self.register_buffer("a", a)
            self.register_buffer("b", b)
        else:
            self.a, self.b = a, b

    def forward(self, x, y):
        return self.a + x, self.b + y


class _MSEPlusBCE(onnxblock.Block):
    def __init__(self):
        super().__init__()
        self.mse, self.bce = onnxblock.loss.MSELoss(), onnxblock.loss.BCEWithLogitsLoss()
        self.add = onnxblock.blocks.Add()

    def build(self, first: str, second: str) -> str:
        return self.add(self.mse(first, target_name="t1"), self.bce(second, target_name="t2"))


@pytest.mark.parametrize("as_buffers", [False, True], ids=["constants", "frozen-initializers"])
def test_constants_added_to_the_inputs_with_a_custom_loss_match_torch(tmp_path, as_buffers):
    torch.manual_seed(2)
    net = _AddConstants(as_buffers)
    x, y, t1, t2 = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.rand(3, 4)
    model = _export(net, (x, y), ["x", "y"], ["out1", "out2"])
    directory = artifacts.generate_artifacts(
        model,
        loss=_MSEPlusBCE(),
        requires_grad=[] if as_buffers else None,
        optimizer=artifacts.OptimType.SGD,
        artifact_directory=tmp_path / "add",
        batch_size=3,
    )
    state, module, optimizer = _trainer(directory)
    assert {name: p.requires_grad for name, p in state.parameters.items()} == (
        {"a": False, "b": False} if as_buffers else {}
    )
    expected = (F.mse_loss(net.a + x, t1) + F.binary_cross_entropy_with_logits(net.b + y, t2)).item()
    feeds = [v.numpy() for v in (x, y, t1, t2)]
    for mode in (module.train, module.eval):
        mode()
        assert float(module(*feeds)) == pytest.approx(expected, rel=1e-6)
    module.train()
    module(*feeds)
    optimizer.step()
    assert np.asarray(module.get_contiguous_parameters()).size == (24 if as_buffers else 0)
    assert module.get_parameters_size(trainable_only=True) == 0
    if as_buffers:
        np.testing.assert_array_equal(state.parameters["a"].data, net.a.numpy())


@pytest.mark.parametrize("fused_update", [False, True], ids=["optimizer-step", "fused-update"])
def test_batchnorm_with_frozen_scale_and_bias_updates_running_statistics_as_torch(tmp_path, fused_update):
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.BatchNorm2d(3))
    with torch.no_grad():
        net[0].weight.uniform_(0.5, 1.5)
        net[0].bias.normal_()
    model = _export(net, (torch.randn(4, 3, 2, 2),), ["x"], ["y"])
    directory = artifacts.generate_artifacts(
        model,
        loss=artifacts.LossType.MSELoss,
        frozen_params=["0.weight", "0.bias"],
        fused_update=fused_update,
        artifact_directory=tmp_path / "bn",
        batch_size=4,
    )
    state, module, optimizer = _trainer(directory)
    assert module.get_parameters_size() == 0 and module.get_parameters_size(trainable_only=False) == 6
    frozen = np.asarray(module.get_contiguous_parameters()).copy()
    net.train()
    for _ in range(3):
        x, target = torch.randn(4, 3, 2, 2), torch.randn(4, 3, 2, 2)
        loss = float(module(x.numpy(), target.numpy()))
        optimizer.step()
        module.lazy_reset_grad()
        with torch.no_grad():
            assert loss == pytest.approx(F.mse_loss(net(x), target).item(), rel=1e-5)
        for name in ("running_mean", "running_var"):
            np.testing.assert_allclose(
                state.parameters[f"0.{name}"].data, getattr(net[0], name).numpy(), rtol=1e-5, atol=1e-6
            )
    np.testing.assert_array_equal(np.asarray(module.get_contiguous_parameters()), frozen)
    np.testing.assert_array_equal(
        frozen, np.concatenate([net[0].weight.detach().numpy(), net[0].bias.detach().numpy()])
    )
    saved = _saved(state, tmp_path / "ckpt")
    assert saved.step == 3 and saved.kinds == [checkpoint.FROZEN] * 2 + [checkpoint.BUFFER] * 2
    np.testing.assert_array_equal(saved.arrays[2], state.parameters["0.running_mean"].data)
