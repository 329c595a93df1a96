"""Models as PyTorch exports them (TorchScript exporter in training mode, and the default
dynamo exporter) train through edgetrain with PyTorch's gradients."""

import numpy as np
import onnx
import pytest

from edgetrain import api, artifacts

torch = pytest.importorskip("torch")

# Many models, a few steps of each: built at -Og, to the default build's bits (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("quick_build")


BATCH = 4


class Net(torch.nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 12)
        self.fc2 = torch.nn.Linear(12, 5)
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, x):
        h = torch.tanh(self.fc1(x.flatten(1)))
        return self.fc2(self.drop(torch.relu(h) * 0.5 + h.sigmoid()))


def export(net, path, exporter):
    x = torch.randn(BATCH, 4, 4)
    if exporter == "torchscript":
        torch.onnx.export(
            net,
            (x,),
            path,
            dynamo=False,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            input_names=["x"],
            output_names=["logits"],
            dynamic_axes={"x": {0: "batch"}},
        )
    else:
        torch.onnx.export(
            net,
            (x,),
            path,
            input_names=["x"],
            output_names=["logits"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
        )


def load(out):
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    return state, api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_exported_gradients_match_torch(tmp_path, exporter):
    torch.manual_seed(0)
    net = Net()
    export(net, tmp_path / "net.onnx", exporter)
    out = artifacts.generate_artifacts(tmp_path / "net.onnx", artifact_directory=tmp_path / "out", batch_size=BATCH)
    state, module = load(out)
    x = torch.randn(BATCH, 4, 4)
    y = torch.tensor([0, 3, 4, 1])
    loss = module(x.numpy(), y.numpy())
    reference = torch.nn.functional.cross_entropy(net(x), y)
    reference.backward()
    assert abs(loss - reference.item()) <= 1e-5
    for name, param in net.named_parameters():
        want = param.grad.numpy()
        got = state.parameters[name].grad
        assert np.max(np.abs(got - want)) <= 1e-4 * max(1.0, np.max(np.abs(want))), name


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_dropout_model_trains_and_evaluates_like_torch(tmp_path, exporter):
    torch.manual_seed(1)
    net = Net(dropout=0.3)
    export(net, tmp_path / "net.onnx", exporter)
    out = artifacts.generate_artifacts(
        tmp_path / "net.onnx", artifact_directory=tmp_path / "out", batch_size=BATCH, learning_rate=0.01
    )
    state, module = load(out)
    opt = api.Optimizer(out / "optimizer_model.onnx", module)
    x = torch.randn(BATCH, 4, 4)
    y = torch.tensor([0, 3, 4, 1])
    module.eval()
    net.eval()
    with torch.no_grad():
        want = torch.nn.functional.cross_entropy(net(x), y).item()
    before = module(x.numpy(), y.numpy())
    assert abs(before - want) <= 1e-5  # eval: dropout is the identity
    module.train()
    losses = []
    for _ in range(30):
        losses.append(module(x.numpy(), y.numpy()))
        opt.step()
        module.lazy_reset_grad()
    assert np.all(np.isfinite(losses))
    module.eval()
    assert module(x.numpy(), y.numpy()) < before


class ShapeArithmetic(torch.nn.Module):
    """Reshapes through x.size(), which the TorchScript exporter writes as Shape/Gather/Unsqueeze/
    Concat chains feeding Reshape, plus a matmul with a broadcast batch."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))
        self.scale = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        b = x.size(0)
        h = x.view(b, x.size(1), -1)  # (B, 2, 4)
        h = torch.matmul(h, self.w) * self.scale  # (B, 2, 3)
        return h.reshape(b, -1).softmax(dim=-1)


@pytest.mark.filterwarnings("ignore")
def test_shape_subgraphs_fold_to_constants(tmp_path):
    torch.manual_seed(2)
    net = ShapeArithmetic()
    x = torch.randn(BATCH, 2, 2, 2)
    torch.onnx.export(
        net,
        (x,),
        tmp_path / "net.onnx",
        dynamo=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}},
    )
    exported_ops = {n.op_type for n in onnx.load(tmp_path / "net.onnx").graph.node}
    assert {"Shape", "Gather"} <= exported_ops
    target = torch.rand(BATCH, 6)
    out = artifacts.generate_artifacts(
        tmp_path / "net.onnx", loss=artifacts.LossType.MSELoss, artifact_directory=tmp_path / "out", batch_size=BATCH
    )
    training_ops = {n.op_type for n in onnx.load(out / "training_model.onnx").graph.node}
    assert not training_ops & {"Shape", "Gather", "ConstantOfShape", "Cast"}
    state, module = load(out)
    loss = module(x.numpy(), target.numpy())
    reference = torch.nn.functional.mse_loss(net(x), target)
    reference.backward()
    assert abs(loss - reference.item()) <= 1e-6
    for name, param in net.named_parameters():
        want = param.grad.numpy()
        assert np.max(np.abs(state.parameters[name].grad - want)) <= 1e-4 * max(1.0, np.max(np.abs(want))), name
