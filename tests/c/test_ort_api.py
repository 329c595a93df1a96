"""ONNX Runtime 1.19's training API surface (onnxruntime.training.api / .artifacts) over the
generated C, checked against PyTorch on the same weights: OrtValues in and out, the checkpoint
state's mapping semantics, nominal checkpoints, the scheduler's start, generate_artifacts'
ORT arguments, frozen buffers, losses written as onnxblocks and checkpoints of another trainer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from edgetrain import EdgetrainError, ImportNote, api, artifacts, checkpoint
from models import mlp, mlp_bn

torch = pytest.importorskip("torch")
onnxruntime = pytest.importorskip("onnxruntime")

BATCH = 4


class TorchMLP(torch.nn.Module):
    """models.mlp in PyTorch, with the same parameter names and weights."""

    def __init__(self, proto: onnx.ModelProto, bn: bool = False):
        super().__init__()
        arrays = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        self.fc0 = torch.nn.Linear(8, 16)
        self.bn0 = torch.nn.BatchNorm1d(16, eps=1e-5, momentum=0.1) if bn else None
        self.fc1 = torch.nn.Linear(16, 3)
        state = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
        if bn:
            state["bn0.num_batches_tracked"] = torch.tensor(0)
        self.load_state_dict(state)

    def forward(self, x):
        h = self.fc0(x)
        return self.fc1(torch.relu(self.bn0(h) if self.bn0 is not None else h))


def batch(seed, n=BATCH):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 8)).astype(np.float32), rng.integers(0, 3, n)


def torch_loss(model, x, y):
    return torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return artifacts.generate_artifacts(
        mlp(),
        artifact_directory=tmp_path_factory.mktemp("mlp"),
        batch_size=BATCH,
        requires_grad=["fc1.weight", "fc1.bias"],
        frozen_params=["fc0.weight", "fc0.bias"],
        nominal_checkpoint=True,
    )


def fresh(out, path="checkpoint", **options):
    state = api.CheckpointState.load_checkpoint(out / path)
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx", **options)
    return state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def test_names_and_ort_values_in_and_out(out):
    state, module, _ = fresh(out, session_options=object())
    graph = onnx.load(out / "training_model.onnx").graph
    assert module.input_names() == [i.name for i in graph.input][:2] == ["x", "labels"]
    assert module.output_names() == [o.name for o in graph.output][:1]
    x, y = batch(0)
    want = torch_loss(TorchMLP(mlp()), x, y).item()
    module.eval()
    plain = module(x, y)
    assert isinstance(plain, np.float32) and not isinstance(plain, api.OrtValue)
    loss = module(api.OrtValue.ortvalue_from_numpy(x), api.OrtValue.ortvalue_from_numpy(y))
    assert isinstance(loss, api.OrtValue) and loss.shape() == [] and loss.data_type() == "tensor(float)"
    assert np.isclose(loss.numpy(), want, rtol=1e-5) and type(loss.numpy()) is np.ndarray

    # ONNX Runtime's own OrtValues are read through their numpy(), and the loss comes back as one of them
    ort_loss = module(onnxruntime.OrtValue.ortvalue_from_numpy(x), onnxruntime.OrtValue.ortvalue_from_numpy(y))
    assert isinstance(ort_loss, onnxruntime.OrtValue) and np.isclose(ort_loss.numpy(), want, rtol=1e-5)

    params = module.get_contiguous_parameters()
    assert isinstance(params, api.OrtValue) and params.shape() == [module.get_parameters_size(False)]
    assert params.element_type() is np.float32 and params.device_name() == "cpu"
    np.testing.assert_array_equal(
        params.numpy(),
        np.concatenate(
            [state.parameters[n].data.ravel() for n in ("fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias")]
        ),
    )
    module.copy_buffer_to_parameters(api.OrtValue.ortvalue_from_numpy(params.numpy() * 0 + params.numpy()))
    with pytest.raises(ValueError, match="CPU"):
        api.OrtValue.ortvalue_from_numpy(x, "cuda")


def test_parameters_mapping_as_onnx_runtime(out):
    state, module, opt = fresh(out)
    pt = TorchMLP(mlp())
    assert len(state.parameters) == len(pt.state_dict())
    assert [name for name, _ in state.parameters] == list(pt.state_dict())
    for name, pt_param in pt.named_parameters():
        param = state.parameters[name]
        assert param.name == name and name in state.parameters
        np.testing.assert_array_equal(param.data, pt_param.detach().numpy())
        if name.startswith("fc0"):
            assert param.requires_grad is False and param.grad is None
        else:
            assert param.requires_grad is True and not param.grad.any() and param.grad.shape == param.data.shape
    with pytest.raises(KeyError, match="nope"):
        state.parameters["nope"]

    # Setting a trainable parameter by name: the C trains from the new values, as torch does.
    new = np.full((3, 16), 0.05, np.float32)
    state.parameters["fc1.weight"] = new
    np.testing.assert_array_equal(state.parameters["fc1.weight"].data, new)
    with torch.no_grad():
        pt.fc1.weight.copy_(torch.from_numpy(new))
    x, y = batch(1)
    loss = module(x, y)
    reference = torch_loss(pt, x, y)
    reference.backward()
    assert np.isclose(loss, reference.item(), rtol=1e-5)
    np.testing.assert_allclose(state.parameters["fc1.weight"].grad, pt.fc1.weight.grad.numpy(), atol=1e-6)
    assert state.parameters["fc0.weight"].grad is None


def test_exported_inference_model_holds_frozen_values_set_on_the_host(out, tmp_path):
    """The host keeps frozen parameters writable; the exported model must hold the values they have
    now, as the C computes with them, not those compiled in."""
    state, module, _ = fresh(out)
    pt = TorchMLP(mlp())
    new = np.linspace(-1, 1, 16 * 8, dtype=np.float32).reshape(16, 8)
    state.parameters["fc0.weight"] = new
    with torch.no_grad():
        pt.fc0.weight.copy_(torch.from_numpy(new))
    module.export_model_for_inferencing(tmp_path / "infer.onnx", ["logits"])
    x, _ = batch(2)
    session = onnxruntime.InferenceSession(tmp_path / "infer.onnx", providers=["CPUExecutionProvider"])
    expected = pt(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(module.infer(x)[0], expected, rtol=1e-5, atol=1e-6)


def test_nominal_checkpoint_refuses_use_until_loaded(out):
    nominal, module, opt = fresh(out, "nominal_checkpoint")
    x, y = batch(2)
    assert "fc1.weight" in nominal.parameters and len(nominal.parameters) == 4
    with pytest.raises(RuntimeError, match="Please load the parameter states first"):
        nominal.parameters["fc1.weight"]
    with pytest.raises(RuntimeError, match="Please load all the parameter states first"):
        nominal.parameters["fc1.weight"] = np.ones((3, 16), np.float32)
    for call in (module.get_contiguous_parameters, lambda: module(x, y), opt.step, lambda: module.eval()(x, y)):
        with pytest.raises(RuntimeError, match=r"Please load the model parameters first\."):
            call()
    assert module.get_parameters_size() == 3 * 16 + 3

    full_state, full, full_opt = fresh(out)
    module.train().copy_buffer_to_parameters(full.get_contiguous_parameters(), trainable_only=False)
    loss = module(x, y)
    assert loss == full(x, y) and np.isclose(loss, torch_loss(TorchMLP(mlp()), x, y).item(), rtol=1e-5)
    opt.step()
    full_opt.step()
    np.testing.assert_array_equal(module.get_contiguous_parameters(), full.get_contiguous_parameters())


def test_linear_scheduler_starts_at_the_factor_of_step_zero(out):
    _, module, opt = fresh(out)
    scheduler = api.LinearLRScheduler(opt, 1, 2, 0.2)
    assert opt.get_learning_rate() == 0.0  # warming up: initial_lr * 0 / 1
    module(*batch(3))
    opt.step()
    scheduler.step()
    assert np.isclose(opt.get_learning_rate(), 0.2)  # step 1 of 2 after a warm-up of 1: factor (2-1)/(2-1)


def test_additional_outputs_and_loss_input_names(tmp_path):
    proto = mlp()
    # A second output before the logits: the loss must be on the one loss_input_names names.
    proto.graph.output.insert(0, helper.make_tensor_value_info("h0r", onnx.TensorProto.FLOAT, ["batch", 16]))
    out = artifacts.generate_artifacts(
        proto,
        artifact_directory=tmp_path,
        batch_size=BATCH,
        loss_input_names=["logits"],
        additional_output_names=["logits", "h0r"],
    )
    state, module, _ = fresh(out)
    assert module.output_names() == [o.name for o in onnx.load(out / "training_model.onnx").graph.output][:3]
    assert module.output_names()[1:] == ["logits", "h0r"]
    assert [o.name for o in onnx.load(out / "eval_model.onnx").graph.output] == module.output_names()
    pt = TorchMLP(mlp())
    for n in (BATCH, 2):
        x, y = batch(4, n)
        loss, logits, hidden = module(x, y)
        reference = pt(torch.from_numpy(x))
        assert logits.shape == (n, 3) and hidden.shape == (n, 16)
        np.testing.assert_allclose(logits, reference.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(hidden, torch.relu(pt.fc0(torch.from_numpy(x))).detach().numpy(), atol=1e-5)
        assert np.isclose(loss, torch_loss(pt, x, y).item(), rtol=1e-5)
        module.lazy_reset_grad()
    module.eval()
    got = module(api.OrtValue.ortvalue_from_numpy(x), api.OrtValue.ortvalue_from_numpy(y))
    assert isinstance(got, tuple) and all(isinstance(v, api.OrtValue) for v in got)
    np.testing.assert_array_equal(got[1].numpy(), logits)
    with pytest.raises(EdgetrainError, match="'nope' is not"):
        artifacts.generate_artifacts(
            proto,
            artifact_directory=tmp_path / "bad",
            batch_size=BATCH,
            loss_input_names=["logits"],
            additional_output_names=["nope"],
        )


def test_a_loss_on_one_of_several_outputs_is_said(tmp_path):
    """A built-in loss takes the first output unless loss_input_names says: with more than one (an
    auxiliary classifier's), a note names the one it reads; naming it says nothing."""
    proto = mlp()
    proto.graph.output.insert(0, helper.make_tensor_value_info("h0r", onnx.TensorProto.FLOAT, ["batch", 16]))
    said = []
    for name, options in (("first", {}), ("named", {"loss_input_names": ["logits"]})):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ImportNote)
            out = artifacts.generate_artifacts(proto, artifact_directory=tmp_path / name, batch_size=BATCH, **options)
        notes = [str(w.message) for w in caught if issubclass(w.category, ImportNote)]
        assert notes == json.loads((out / "report.json").read_text())["import"]["notes"]
        said.append(notes)
    assert said[0] == [
        "the model has 2 outputs and CrossEntropyLoss reads the first, 'h0r', alone (loss_input_names or --loss-input "
        "chooses another; an edgetrain.onnxblock loss combines several)"
    ]
    assert said[1] == []
    onnx.save(proto, tmp_path / "m.onnx")
    for option, note in (([], True), (["--loss-input", "logits"], False)):
        command = [sys.executable, "-m", "edgetrain.cli", "compile", tmp_path / "m.onnx", "-o", tmp_path / "cli"]
        result = subprocess.run([*command, "--batch-size", str(BATCH), *option], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert ("reads the first, 'h0r'" in result.stderr) == note


@pytest.mark.parametrize(
    "activation, loss, said",
    [
        ("Softmax", "CrossEntropyLoss", True),
        ("Sigmoid", "BCEWithLogitsLoss", True),
        ("LogSoftmax", "CrossEntropyLoss", False),  # log_softmax of log-probabilities is themselves
        ("Softmax", "MSELoss", False),
    ],
)
def test_a_loss_on_logits_given_probabilities_is_said(tmp_path, activation, loss, said):
    """A model exported with its final Softmax (or Sigmoid) for inference, trained with the loss
    that applies it again: a note names the node and the way out."""
    proto = mlp()
    proto.graph.node.append(helper.make_node(activation, ["logits"], ["probabilities"], name="head"))
    proto.graph.output[0].name = "probabilities"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ImportNote)
        artifacts.generate_artifacts(proto, artifact_directory=tmp_path, batch_size=BATCH, loss=loss)
    notes = [str(w.message) for w in caught if issubclass(w.category, ImportNote)]
    message = f"{loss} reads 'probabilities', the output of {activation} node 'head', and applies {activation} again"
    assert any(message in n for n in notes) == said, notes


@pytest.mark.parametrize("transposed", [False, True])
def test_a_class_per_position_on_the_last_axis_is_said(tmp_path, transposed):
    """A token classifier's logits (batch, positions, classes) from a linear layer: CrossEntropyLoss
    takes axis 1 as the classes, as torch's cross_entropy does, so a note says how to export them;
    exported transposed to (batch, classes, positions), nothing is said."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    if transposed:
        nodes[-1].output[0] = "yt"
        nodes.append(helper.make_node("Transpose", ["yt"], ["y"], perm=[0, 2, 1]))
    shape = ["batch", 3, 5] if transposed else ["batch", 5, 3]
    graph = helper.make_graph(
        nodes,
        "tagger",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 5, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)],
        [
            numpy_helper.from_array(rng.normal(size=(8, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(np.zeros(3, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ImportNote)
        artifacts.generate_artifacts(model, artifact_directory=tmp_path, batch_size=BATCH)
    said = [str(w.message) for w in caught if "takes the classes on axis 1" in str(w.message)]
    assert len(said) == (0 if transposed else 1), said
    if said:
        assert f"'y' ({BATCH}, 5, 3)" in said[0] and "its 5 positions would be the classes" in said[0]


@pytest.mark.parametrize(
    "option, message",
    [(dict(ort_format=True), "ORT format"), (dict(custom_op_library="libcustom.so"), "custom op library")],
)
def test_onnx_runtime_only_options_are_refused_in_one_line(tmp_path, option, message):
    with pytest.raises(EdgetrainError, match=message) as refusal:
        artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path, batch_size=BATCH, **option)
    assert "\n" not in str(refusal.value)


def test_prefix_is_onnx_runtimes_file_prefix_and_c_prefix_the_c_one(tmp_path):
    out = artifacts.generate_artifacts(
        mlp(), artifact_directory=tmp_path / "ort", batch_size=BATCH, prefix="mnist_", nominal_checkpoint=True
    )
    names = {p.name for p in out.iterdir()}
    assert {
        "mnist_training_model.onnx",
        "mnist_eval_model.onnx",
        "mnist_optimizer_model.onnx",
        "mnist_checkpoint",
        "mnist_nominal_checkpoint",
    } <= names and "checkpoint" not in names
    assert "int model_train_step(" in (out / "model.h").read_text()
    state = api.CheckpointState.load_checkpoint(out / "mnist_checkpoint")
    assert np.isfinite(api.Module(out / "mnist_training_model.onnx", state)(*batch(5)))

    both = artifacts.generate_artifacts(
        mlp(), artifact_directory=tmp_path / "both", batch_size=BATCH, prefix="kws", c_prefix="kws_net"
    )
    assert (both / "kwstraining_model.onnx").exists() and "int kws_net_train_step(" in (both / "model.h").read_text()

    with pytest.warns(DeprecationWarning, match="c_prefix='kws'"):
        old = artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "old", batch_size=BATCH, prefix="kws")
    assert (old / "training_model.onnx").exists() and "int kws_train_step(" in (old / "model.h").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new spelling warns of nothing
        artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "new", batch_size=BATCH, c_prefix="kws")
    with pytest.raises(EdgetrainError, match="path separator"):
        artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "bad", batch_size=BATCH, prefix="a/b_")


def test_frozen_params_may_name_buffers_which_train_as_batchnorm_says(tmp_path):
    proto = mlp_bn()
    everything = [t.name for t in proto.graph.initializer]
    frozen = ["fc0.weight", "fc0.bias", "bn0.running_mean", "bn0.running_var"]
    out = artifacts.generate_artifacts(
        proto,
        artifact_directory=tmp_path,
        batch_size=BATCH,
        frozen_params=frozen,
        requires_grad=[n for n in everything if n not in frozen],
        optimizer=artifacts.OptimType.SGD,
    )
    state, module, _ = fresh(out)
    pt = TorchMLP(proto, bn=True).train()
    # Every tensor of the state_dict but the batch counter, which torch's export leaves out.
    assert {n for n, _ in state.parameters} == {n for n in pt.state_dict() if not n.endswith("num_batches_tracked")}
    x, y = batch(6)
    loss = module(x, y)
    reference = torch_loss(pt, x, y)
    assert np.isclose(loss, reference.item(), rtol=1e-5)
    for name in ("bn0.running_mean", "bn0.running_var"):
        assert state.parameters[name].grad is None and not state.parameters[name].requires_grad
        np.testing.assert_allclose(state.parameters[name].data, pt.state_dict()[name].numpy(), atol=1e-6)
    with pytest.raises(EdgetrainError, match="'bn0.running_mean' .*buffer") as refusal:
        artifacts.generate_artifacts(
            proto,
            artifact_directory=tmp_path / "bad",
            batch_size=BATCH,
            requires_grad=["fc1.weight", "bn0.running_mean"],
        )
    assert "\n" not in str(refusal.value)


def test_a_loss_written_as_an_onnxblock_compiles_like_the_built_in_one(tmp_path):
    onnxblock = pytest.importorskip("edgetrain.onnxblock", reason="edgetrain.onnxblock is not installed")
    if not hasattr(onnxblock, "with_loss"):
        pytest.skip("edgetrain.onnxblock has no with_loss entry point yet")
    block = onnxblock.loss.CrossEntropyLoss()
    out = artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "block", batch_size=BATCH, loss=block)
    built_in = artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "enum", batch_size=BATCH)
    x, y = batch(7)
    got, want = fresh(out)[1](x, y), fresh(built_in)[1](x, y)
    assert np.isclose(got, want, rtol=1e-6) and np.isclose(got, torch_loss(TorchMLP(mlp()), x, y).item(), rtol=1e-5)
    with pytest.raises(EdgetrainError, match="onnxblock.Block"):
        artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "bad", batch_size=BATCH, loss=object())


def foreign_copy(data: checkpoint.CheckpointData) -> checkpoint.CheckpointData:
    """`data` as another trainer writes it: no fingerprint, its tensors in reverse order (optimizer
    state aligned with its own trainable entries), every tensor marked trainable or not as ONNX
    Runtime does, and properties of its own."""
    order = list(reversed(range(len(data.names))))
    trainable = [data.names[i] for i in order if data.kinds[i] == checkpoint.TRAINABLE]
    ours = [n for n, k in zip(data.names, data.kinds) if k == checkpoint.TRAINABLE]
    state = [[slot[ours.index(n)] for n in trainable] for slot in data.optimizer_state or []] or None
    return checkpoint.CheckpointData(
        None,
        [data.names[i] for i in order],
        [data.kinds[i] for i in order],
        [data.arrays[i].copy() for i in order],
        state,
        data.step,
        0,
        data.learning_rate,
        {"epoch": 2},
    )


def test_another_trainers_checkpoint_maps_by_name_and_trains_on_identically(tmp_path, monkeypatch):
    out = artifacts.generate_artifacts(
        mlp(), artifact_directory=tmp_path, batch_size=BATCH, frozen_params=["fc0.bias"], learning_rate=0.05
    )
    _, trained, opt = fresh(out)
    for seed in range(3):
        trained(*batch(seed))
        opt.step()
        trained.lazy_reset_grad()
    opt.set_learning_rate(0.02)
    foreign = foreign_copy(checkpoint.decode(trained._save(True)))

    # load_checkpoint hands a file edgetrain.ort_checkpoint recognizes to its reader.
    fake = type(
        "FakeOrtCheckpoint",
        (),
        {"is_ort_checkpoint": staticmethod(lambda raw: raw == b"ORT!"), "read": staticmethod(lambda raw: foreign)},
    )
    monkeypatch.setattr(api, "_ort_checkpoint", lambda: fake)
    (tmp_path / "ort_checkpoint").write_bytes(b"ORT!")
    state = api.CheckpointState.load_checkpoint(tmp_path / "ort_checkpoint")
    module = api.Module(out / "training_model.onnx", state)
    resumed = api.Optimizer(out / "optimizer_model.onnx", module)
    assert resumed.get_learning_rate() == np.float32(0.02) and state.properties["epoch"] == 2
    assert [n for n, _ in state.parameters] == checkpoint.decode((out / "checkpoint").read_bytes()).names
    for step in range(2):
        assert module(*batch(10 + step)) == trained(*batch(10 + step))
        resumed.step()
        opt.step()
        np.testing.assert_array_equal(module.get_contiguous_parameters(), trained.get_contiguous_parameters())

    for broken, message in (
        (lambda d: d.names.__setitem__(0, "renamed"), "'fc1.bias'"),
        (
            lambda d: d.arrays.__setitem__(0, np.zeros((2, 2), np.float32)),
            re.escape("shapes differ: 'fc1.bias' (2, 2) (the trainer's (3,))"),
        ),
    ):
        data = foreign_copy(checkpoint.decode(trained._save(True)))
        broken(data)
        with pytest.raises(api.CheckpointError, match=message):
            api.Module(out / "training_model.onnx", api.CheckpointState(data))
