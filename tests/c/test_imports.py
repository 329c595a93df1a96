"""Faithful imports (compiler/frontend/imports.py): what torch's exporters do to a model is undone or
reported in one line before anything compiles, never trained silently."""

from __future__ import annotations

import copy
import itertools
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import EdgetrainError, ImportNote, api, artifacts

torch = pytest.importorskip("torch")

# Many models, a few steps of each: built at -Og, to the default build's bits (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("quick_build")


B = 2


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def dynamo_export(model, x, path, optimize):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x,),
            path,
            dynamo=True,
            optimize=optimize,
            input_names=["x"],
            verbose=False,
            dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=16)},),
        )


def _loss_as_pytorch(module, model, x, labels):
    """One training step's loss through the trainer is PyTorch's cross-entropy on the same batch,
    whose backward pass leaves PyTorch's gradients in the model."""
    loss = module(x.numpy(), labels.numpy())
    want = torch.nn.functional.cross_entropy(model(x), labels)
    want.backward()
    assert abs(loss - want.item()) <= 1e-5


def compile_(path, tmp_path, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ImportNote)
        out = artifacts.generate_artifacts(
            path, batch_size=B, artifact_directory=tmp_path / "out", optimizer=artifacts.OptimType.SGD, **kwargs
        )
    notes = [str(w.message) for w in caught if issubclass(w.category, ImportNote)]
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    return api.Module(out / "training_model.onnx", state, out / "eval_model.onnx"), state, notes


def test_folded_batchnorm_is_refused_naming_both_ways_out(tmp_path):
    torch.manual_seed(0)
    dynamo_export(ConvBN().train(), torch.randn(B, 3, 8, 8), tmp_path / "m.onnx", optimize=True)
    with pytest.raises(EdgetrainError) as refusal:
        artifacts.generate_artifacts(tmp_path / "m.onnx", batch_size=B, artifact_directory=tmp_path / "out")
    message = str(refusal.value)
    assert "folded BatchNormalization" in message and "\n" not in message
    assert "training=torch.onnx.TrainingMode.TRAINING" in message and "frozen_bn=True" in message
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, frozen_bn=True)
    assert any("folded" in n for n in notes)


def test_dynamo_batchnorm_trains_in_training_mode_as_in_pytorch(tmp_path):
    torch.manual_seed(0)
    model, x = ConvBN().train(), torch.randn(B, 3, 8, 8)
    labels = torch.tensor([0, 2])
    dynamo_export(model, x, tmp_path / "m.onnx", optimize=False)
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert any("training-mode batch norms" in n for n in notes), notes
    _loss_as_pytorch(module, model, x, labels)
    for name in ("bn.weight", "bn.bias", "conv.weight"):
        got, ref = state.parameters[name].grad, dict(model.named_parameters())[name].grad.numpy()
        np.testing.assert_allclose(got, ref, atol=1e-5 * max(1, np.abs(ref).max()))
    np.testing.assert_allclose(state.parameters["bn.running_mean"].data, model.bn.running_mean.numpy(), atol=1e-6)


def _model(nodes, inits, shape=("batch", 4), out_shape=("batch", 4)):
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_only_parameters_train_by_default(tmp_path):
    rng = np.random.default_rng(0)
    model = _model(
        [
            helper.make_node("Gemm", ["x", "w_0", "b_0"], ["h"], transB=1, name="fc"),
            helper.make_node("Mul", ["h", "val_74"], ["s"], name="scale_by_exporter_constant"),
            helper.make_node("Mul", ["s", "head.gamma"], ["g"], name="gamma"),
            helper.make_node("Add", ["g", "rotary.inv_freq"], ["r"], name="buffer"),
            helper.make_node("Mul", ["r", "attn.lifted_tensor_2"], ["l"], name="module_constant"),
            helper.make_node("Mul", ["l", "embed.embed_scale"], ["e"], name="signature_buffer"),
            helper.make_node("Add", ["e", "blocks.0.attn_mask"], ["m"], name="mask_buffer"),
            # Swin V2's table of relative coordinates, a buffer that a MatMul reads (as its MLP's input)
            helper.make_node("MatMul", ["blocks.0.relative_coords_table", "m"], ["c"], name="table_buffer"),
            helper.make_node("Add", ["m", "c"], ["y"], name="sum"),
        ],
        {
            "w_0": rng.normal(size=(3, 4)),
            "b_0": np.zeros(3),
            "val_74": np.array(0.5),
            "head.gamma": np.ones(3),
            "rotary.inv_freq": np.ones(3),
            "attn.lifted_tensor_2": np.array(2.0),
            "embed.embed_scale": np.array(3.0),
            "blocks.0.attn_mask": np.zeros(3),
            "blocks.0.relative_coords_table": np.eye(B) * 0.1,
        },
        out_shape=(B, 3),
    )
    # As torch's dynamo exporter records a module's buffer in its graph signature.
    record = model.graph.value_info.add()
    record.CopyFrom(helper.make_tensor_value_info("embed.embed_scale", TensorProto.FLOAT, ()))
    helper.set_metadata_props(record, {"pkg.torch.export.graph_signature.InputSpec.kind": "BUFFER"})
    module, state, _ = compile_(model, tmp_path, loss=artifacts.LossType.MSELoss)
    trains = {n for n, p in state.parameters.items() if p.requires_grad}
    assert trains == {"w_0", "b_0", "head.gamma"}
    named = ["w_0", "val_74", "embed.embed_scale"]
    module, state, _ = compile_(model, tmp_path / "2", loss=artifacts.LossType.MSELoss, requires_grad=named)
    assert {n for n, p in state.parameters.items() if p.requires_grad} == set(named)


def test_ties_are_reported_once_and_untie_gives_each_layer_a_copy(tmp_path):
    rng = np.random.default_rng(0)
    model = _model(
        [
            helper.make_node("LayerNormalization", ["x", "ln.weight", "ln.bias"], ["a"], name="ln1"),
            helper.make_node("LayerNormalization", ["a", "ln.weight", "ln.bias"], ["y"], name="ln2"),
        ],
        {"ln.weight": np.ones(4), "ln.bias": np.zeros(4)},
    )
    x, t = rng.normal(size=(B, 4)).astype(np.float32), rng.normal(size=(B, 4)).astype(np.float32)
    module, state, notes = compile_(model, tmp_path, loss=artifacts.LossType.MSELoss)
    assert len(notes) == 1 and "'ln.weight' by 2 nodes" in notes[0] and "untie=True" in notes[0]
    tied_loss = module(x, t)
    tied = state.parameters["ln.weight"].grad.copy()
    module, state, notes = compile_(model, tmp_path / "untied", loss=artifacts.LossType.MSELoss, untie=True)
    assert len(notes) == 1 and "untied 2" in notes[0]
    copies = [n for n in state.parameters.keys() if n.startswith("ln.weight")]
    assert len(copies) == 2
    assert module(x, t) == tied_loss
    # A tied parameter's gradient is the sum of its layers' gradients.
    np.testing.assert_allclose(sum(state.parameters[n].grad for n in copies), tied, atol=1e-6)


def test_cli_prints_notes_and_what_trains(tmp_path):
    import subprocess
    import sys

    model = _model(
        [
            helper.make_node("LayerNormalization", ["x", "ln.weight", "ln.bias"], ["a"], name="ln1"),
            helper.make_node("LayerNormalization", ["a", "ln.weight", "ln.bias"], ["y"], name="ln2"),
        ],
        {"ln.weight": np.ones(4), "ln.bias": np.zeros(4)},
    )
    onnx.save(model, tmp_path / "m.onnx")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgetrain.cli",
            "compile",
            tmp_path / "m.onnx",
            "-o",
            tmp_path / "out",
            "--loss",
            "MSELoss",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "edgetrain: note:" in result.stderr and "--untie" in result.stderr
    assert "trains 2 parameter(s): ln.weight, ln.bias" in result.stdout


class TwoNorms(torch.nn.Module):
    """Two LayerNorms (equal fresh weights, which dynamo's optimizer merges) around Linear layers on a
    sequence (MatMul with a weight dynamo transposes into a new constant), and a convolution whose
    fresh bias of zeros the optimizer drops."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(5, 5, 1)
        self.inp = torch.nn.Linear(6, 8)
        self.norm1 = torch.nn.LayerNorm(8)
        self.mid = torch.nn.Linear(8, 8)
        self.norm2 = torch.nn.LayerNorm(8)
        self.out = torch.nn.Linear(8, 3)
        torch.nn.init.zeros_(self.conv.bias)

    def forward(self, x):
        return self.out(self.norm2(self.mid(self.norm1(self.inp(self.conv(x))))).mean(1))


def test_dynamo_optimized_export_trains_every_pytorch_parameter_under_its_name(tmp_path):
    torch.manual_seed(0)
    model, x, labels = TwoNorms().train(), torch.randn(B, 5, 6), torch.tensor([1, 2])
    dynamo_export(model, x, tmp_path / "m.onnx", optimize=True)
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert any("restored 1 zero bias" in n for n in notes), notes
    assert any("merged" in n and "each trains on its own" in n for n in notes), notes
    assert not any("read by more than one node" in n for n in notes), notes
    _loss_as_pytorch(module, model, x, labels)
    trains = {n for n, p in state.parameters.items() if p.requires_grad}
    assert trains == {n for n, _ in model.named_parameters()}, sorted(trains ^ {n for n, _ in model.named_parameters()})
    for name, param in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, param.grad.numpy(), atol=1e-5, err_msg=name)


class RelativeBias(torch.nn.Module):
    """A bias table gathered by a buffer of indices, as Swin's relative position bias is."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(7, 2))
        self.register_buffer("index", torch.randint(0, 7, (16,)), persistent=False)

    def forward(self):
        return self.table[self.index].view(4, 4, 2).permute(2, 0, 1)


class PositionBias(torch.nn.Module):
    """x plus a RelativeBias, whose gathered table dynamo's optimizer folds into one constant, through
    a Linear layer."""

    def __init__(self):
        super().__init__()
        self.relative, self.lin = RelativeBias(), torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x + self.relative()).mean((1, 2))


def test_a_parameter_the_dynamo_optimizer_folded_is_said_and_frozen_and_the_rest_trains(tmp_path):
    """The note names the folded table, not the buffer of indices it was gathered with (no parameter
    of PyTorch's, so nothing lost), and the Linear layer trains as in PyTorch."""
    torch.manual_seed(0)
    model, x, labels = PositionBias().train(), torch.randn(B, 2, 4, 4), torch.tensor([1, 2])
    dynamo_export(model, x, tmp_path / "m.onnx", optimize=True)
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    folded = [n for n in notes if "folded into constants or optimized away" in n]
    assert len(folded) == 1 and "1 PyTorch parameter(s)" in folded[0] and "(relative.table)" in folded[0], notes
    assert not [n for n in notes if "relative.table" in n and n not in folded], notes  # said once, as folded
    assert {n for n, p in state.parameters.items() if p.requires_grad} == {"lin.weight", "lin.bias"}
    _loss_as_pytorch(module, model, x, labels)
    for name in ("lin.weight", "lin.bias"):
        np.testing.assert_allclose(state.parameters[name].grad, model.get_parameter(name).grad.numpy(), atol=1e-5)


def test_a_real_tie_stays_tied_through_the_dynamo_optimizer(tmp_path):
    """One Linear applied twice: PyTorch's record names the same parameter at both calls, so it is a
    tie, not a merge."""
    torch.manual_seed(0)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 6)

        def forward(self, x):
            return self.lin(torch.relu(self.lin(x)))

    dynamo_export(Twice().train(), torch.randn(B, 6), tmp_path / "m.onnx", optimize=True)
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.MSELoss)
    assert any("read by more than one node" in n for n in notes), notes
    assert not any("merged" in n for n in notes), notes
    assert {n for n, p in state.parameters.items() if p.requires_grad} == {"lin.weight", "lin.bias"}


def test_torchscript_eval_export_with_folded_batchnorm_is_refused(tmp_path):
    """torch.onnx.export's TorchScript defaults (eval mode, constants folded) fold BatchNorm into the
    convolution under exporter names (onnx::Conv_*): refused like dynamo's folding; an eval-mode
    export that keeps BatchNorm trains it frozen, with a note."""
    torch.manual_seed(0)
    model, x = ConvBN().train(), torch.randn(B, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp_path / "folded.onnx", dynamo=False)
        torch.onnx.export(model, (x,), tmp_path / "eval.onnx", dynamo=False, do_constant_folding=False)
    with pytest.raises(EdgetrainError) as refusal:
        artifacts.generate_artifacts(tmp_path / "folded.onnx", batch_size=B, artifact_directory=tmp_path / "out")
    message = str(refusal.value)
    assert "eval-mode export" in message and "'/conv/Conv'" in message and "\n" not in message
    assert "do_constant_folding=False" in message and "frozen_bn=True" in message
    _, _, notes = compile_(tmp_path / "folded.onnx", tmp_path / "f", frozen_bn=True)
    assert any("folded" in n for n in notes), notes
    _, state, notes = compile_(tmp_path / "eval.onnx", tmp_path / "e")
    assert any("1 BatchNormalization node(s) are in inference form" in n for n in notes), notes
    assert state.parameters["bn.weight"].requires_grad


def test_batchnorm_without_momentum_says_its_statistics_are_the_last_batch(tmp_path):
    """PyTorch's BatchNorm with momentum=None keeps a cumulative average, which ONNX cannot say: the
    TorchScript exporter writes momentum 0, whose running statistics are each batch's own. A note says
    so; a BatchNorm with a momentum has none."""
    torch.manual_seed(0)
    model, x = ConvBN().train(), torch.randn(B, 3, 8, 8)
    for name, momentum in (("none", None), ("usual", 0.1)):
        model.bn.momentum = momentum
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (x,),
                tmp_path / f"{name}.onnx",
                dynamo=False,
                training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False,
            )
        _, _, notes = compile_(tmp_path / f"{name}.onnx", tmp_path / name)
        said = [n for n in notes if "momentum 0" in n]
        if momentum is None:
            assert len(said) == 1 and "running statistics become each batch's own" in said[0], notes
        else:
            assert not said, notes


class TinyLM(torch.nn.Module):
    """An embedding tied to the output layer, attention (MultiheadAttention's in_proj_weight and its
    fresh out_proj bias of zeros), and a gain of zeros used as (1 + gain), which dynamo's optimizer
    folds into a constant."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.attn = torch.nn.MultiheadAttention(dim, 2, batch_first=True)
        self.scale = torch.nn.Module()
        self.scale.gain = torch.nn.Parameter(torch.zeros(dim))
        self.out = torch.nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        x = self.embed(ids)
        x = self.attn(x, x, x, need_weights=False)[0] * (1 + self.scale.gain)
        return self.out(x).mean(1)


def test_dynamo_optimized_ties_attention_and_folded_parameters(tmp_path):
    torch.manual_seed(0)
    model, ids, labels = TinyLM().train(), torch.randint(0, 11, (B, 5)), torch.tensor([1, 7])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids,), tmp_path / "m.onnx", dynamo=True, input_names=["ids"], verbose=False)
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert any("1 PyTorch parameter(s)" in n and "(scale.gain)" in n and "optimize=False" in n for n in notes), notes
    assert any("restored 1 zero bias" in n for n in notes), notes
    assert any("'out.weight' by 2 nodes" in n for n in notes), notes  # the tie, under one of its names
    _loss_as_pytorch(module, model, ids, labels)
    params = dict(model.named_parameters(remove_duplicate=False))
    trains = {n for n, p in state.parameters.items() if p.requires_grad}
    assert trains == set(params) - {"embed.weight", "scale.gain"}, sorted(trains)
    for name in trains:  # the tied weight's gradient holds the embedding's share: the tie trains as one
        np.testing.assert_allclose(state.parameters[name].grad, params[name].grad.numpy(), atol=1e-5, err_msg=name)


class TiedHead(torch.nn.Module):
    """An output layer tied to the embedding, as GPT-2's is, behind a Linear layer of its own."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.embed(ids)))).mean(1)


def test_torchscript_constant_folding_keeps_a_tie_under_the_other_layers_name(tmp_path):
    """With its constant folding on (the default), the TorchScript exporter keeps the tied parameter
    under the embedding's name alone and gives the head a transposed copy of its own (onnx::MatMul_*):
    the head reads the embedding's parameter again, so the tie trains as one, as in PyTorch."""
    torch.manual_seed(0)
    model, ids, labels = TiedHead().train(), torch.randint(0, 11, (B, 5)), torch.tensor([1, 7])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids,), tmp_path / "m.onnx", dynamo=False, training=torch.onnx.TrainingMode.TRAINING)
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert any("'embed.weight' by 2 nodes" in n for n in notes), notes
    _loss_as_pytorch(module, model, ids, labels)
    trains = {n for n, p in state.parameters.items() if p.requires_grad}
    assert trains == {"embed.weight", "mix.weight", "mix.bias"}, sorted(trains)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, param.grad.numpy(), atol=1e-5, err_msg=name)


class Blocks(torch.nn.Module):
    """Linear layers in nn.Sequential containers, with and without a bias: TorchScript scopes each
    under the container and again under its own name (/mlp/mlp.0/MatMul for mlp.0)."""

    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3, bias=False))

    def forward(self, x):
        return self.mlp(x)


def test_torchscript_constant_folding_keeps_the_state_dict_names_in_containers(tmp_path):
    torch.manual_seed(0)
    model, x = Blocks().train(), torch.randn(B, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp_path / "m.onnx", dynamo=False, training=torch.onnx.TrainingMode.TRAINING)
    _, state, _ = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert {n for n, _ in state.parameters.items()} == set(model.state_dict())


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.gamma = torch.nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x):
        return self.fc(x) * self.gamma.reshape(1, -1)


class Gains(torch.nn.Module):
    """A gain of the top module itself, used as (1 + gain), and two blocks' equal layer scales,
    reshaped: dynamo's optimizer folds each into a constant and merges the two equal ones, whose
    record then names one block's scale alone."""

    def __init__(self):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.zeros(4))
        self.blocks = torch.nn.Sequential(Scaled(), Scaled())

    def forward(self, x):
        return self.blocks(x) * (1 + self.gain)


def test_every_parameter_dynamo_folded_is_said_from_the_graph_signature(tmp_path):
    torch.manual_seed(0)
    model, x = Gains().train(), torch.randn(B, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp_path / "m.onnx", dynamo=True, input_names=["x"], verbose=False)
    _, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    folded = ["blocks.0.gamma", "blocks.1.gamma", "gain"]
    assert any("3 PyTorch parameter(s)" in n and f"({', '.join(folded)})" in n for n in notes), notes
    trains = {n for n, p in state.parameters.items() if p.requires_grad}
    assert trains == {n for n, _ in model.named_parameters()} - set(folded)
    # Named as PyTorch names it, the merged-away scale can be frozen but not trained.
    _, state, _ = compile_(tmp_path / "m.onnx", tmp_path / "f", frozen_params=["blocks.1.gamma"])
    assert {n for n, p in state.parameters.items() if p.requires_grad} == trains
    with pytest.raises(EdgetrainError, match="optimize=False"):
        compile_(tmp_path / "m.onnx", tmp_path / "r", requires_grad=["blocks.1.gamma"])


class OldOpsetCNN(torch.nn.Module):
    """Ops whose ONNX forms changed since opset 9: training-mode BatchNorm (five outputs before 14),
    Upsample (Resize from 10), Squeeze with its axes as an attribute (an input from 13), Dropout."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.0)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.interpolate(torch.nn.functional.max_pool2d(y, 2), scale_factor=2.0, mode="nearest")
        return self.fc(self.drop(y.mean(dim=(2, 3), keepdim=True).squeeze(3).squeeze(2)))


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_an_older_opset_export_trains_as_in_pytorch(opset, tmp_path):
    """ONNX's version converter lifts the model to edgetrain's opset; a BatchNormalization with its
    running statistics as outputs becomes opset 14's training mode, so the step is PyTorch's:
    loss, gradients and running statistics."""
    torch.manual_seed(0)
    model, x, labels = OldOpsetCNN().train(), torch.randn(B, 3, 8, 8), torch.tensor([0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x,),
            tmp_path / "m.onnx",
            dynamo=False,
            opset_version=opset,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            input_names=["x"],
            dynamic_axes={"x": {0: "batch"}},
        )
    exported = onnx.load(tmp_path / "m.onnx")
    assert exported.opset_import[0].version == opset
    assert [len(n.output) for n in exported.graph.node if n.op_type == "BatchNormalization"] == [5 if opset < 14 else 3]
    module, state, _ = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    _loss_as_pytorch(module, model, x, labels)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), atol=1e-5 * max(1, p.grad.abs().max()))
    for name in ("bn.running_mean", "bn.running_var"):
        np.testing.assert_allclose(state.parameters[name].data, model.state_dict()[name].numpy(), atol=1e-6)


def test_an_older_batchnorm_whose_saved_statistics_are_read_is_refused(tmp_path):
    """Opset 14 has no saved mean and variance; a model reading them cannot be lifted."""
    c = 2
    params = {k: np.ones(c) for k in ("scale", "bias", "mean", "var")}
    nodes = [
        helper.make_node(
            "BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["z", "rm", "rv", "sm", "sv"], name="bn"
        ),
        helper.make_node("Add", ["z", "sm"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (B, c))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (B, c))],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in params.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(EdgetrainError) as refusal:
        artifacts.generate_artifacts(
            model, batch_size=B, artifact_directory=tmp_path / "out", loss=artifacts.LossType.MSELoss
        )
    message = str(refusal.value)
    assert "BatchNormalization 'bn'" in message and "saved mean or variance" in message and "\n" not in message


class Mean(torch.nn.Module):
    def forward(self, x):
        return x.mean(1)


class Projection(torch.nn.Module):
    """A module's own tensor used transposed, beside another of its tensors: not a Linear's weight."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 6))
        self.gain = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return (x @ self.w.t()) * self.gain


def test_torchscript_folded_transposed_weights_train_under_their_names(tmp_path):
    """The TorchScript exporter's default constant folding transposes a Linear weight into a new
    constant (onnx::MatMul_*) even in a training-mode export: the layer named in the node's scope
    gets its weight back under PyTorch's name and layout, with PyTorch's gradient. A module's own
    tensor that is no Linear's weight keeps the exporter's name, which a note gives. Sequential's
    numbered names (0.bias, read by an Add) train as the state_dict names they are."""
    torch.manual_seed(0)
    # Over a sequence, so Linear exports as MatMul (a batch of vectors exports as Gemm, which reads
    # the weight as it is)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), Projection(), Mean()).train()
    x, labels = torch.randn(B, 4, 5), torch.tensor([0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), tmp_path / "m.onnx", dynamo=False, training=torch.onnx.TrainingMode.TRAINING, input_names=["x"]
        )
    exported = {i.name for i in onnx.load(tmp_path / "m.onnx").graph.initializer}
    assert "0.weight" not in exported and len([n for n in exported if n.startswith("onnx::MatMul_")]) == 2
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    (copy,) = [n for n, _ in state.parameters.items() if n.startswith("onnx::MatMul_")]
    assert any(
        "1 weight(s) are transposed copies" in n and copy in n and "do_constant_folding=False" in n for n in notes
    )
    module(x.numpy(), labels.numpy())
    torch.nn.functional.cross_entropy(model(x), labels).backward()
    # Every parameter trains: Sequential's numbered names are state_dict names (biases read by Add).
    assert {n for n, p in state.parameters.items() if p.requires_grad} == {"0.weight", "0.bias", "2.gain", copy}
    torch_params = dict(model.named_parameters())
    for name in ("0.weight", "0.bias", "2.gain"):
        np.testing.assert_allclose(state.parameters[name].grad, torch_params[name].grad.numpy(), atol=1e-6)
    np.testing.assert_allclose(state.parameters[copy].grad, model[2].w.grad.numpy().T, atol=1e-6)


class GroupNormScaled(torch.nn.Module):
    """GroupNorm, a PReLU and a layer scale: each reshapes its parameter before use."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.gn = torch.nn.GroupNorm(2, 4)
        self.prelu = torch.nn.PReLU(4)
        self.gamma = torch.nn.Parameter(torch.rand(4) + 0.5)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc((self.prelu(self.gn(self.conv(x))) * self.gamma.reshape(1, -1, 1, 1)).mean((2, 3)))


def test_torchscript_folded_parameters_train_under_their_names_or_are_said(tmp_path):
    """The TorchScript exporter's default constant folding computes GroupNorm's reshaped scale and
    bias, PReLU's slope and a layer scale into constants named after their readers. The first three,
    whose modules the nodes' scopes name, train under PyTorch's names and shapes; the top module's
    layer scale stays frozen, which a note says, and named in requires_grad it trains too. Each
    with PyTorch's gradient."""
    torch.manual_seed(0)
    model = GroupNormScaled()
    with torch.no_grad():  # trained-looking values, so no two parameters are equal
        for p in model.parameters():
            p.add_(torch.rand_like(p))
    x, labels = torch.randn(B, 3, 6, 6), torch.tensor([0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp_path / "m.onnx", dynamo=False, input_names=["x"])
    inits = {i.name: i for i in onnx.load(tmp_path / "m.onnx").graph.initializer}
    assert len([n for n in inits if n.startswith("onnx::")]) == 4  # GroupNorm's two, the slope, gamma
    (gamma,) = [n for n in inits if n.startswith("onnx::Mul") and numpy_helper.to_array(inits[n]).ndim == 4]
    _, state, notes = compile_(tmp_path / "m.onnx", tmp_path / "a", loss=artifacts.LossType.CrossEntropyLoss)
    assert any("1 tensor(s)" in n and gamma in n and "stay frozen" in n and "requires_grad" in n for n in notes)
    named = {n for n, _ in model.named_parameters()} - {"gamma"}
    assert {n for n, p in state.parameters.items() if p.requires_grad} == named

    module, state, _ = compile_(
        tmp_path / "m.onnx", tmp_path / "b", requires_grad=[*named, gamma], loss=artifacts.LossType.CrossEntropyLoss
    )
    module(x.numpy(), labels.numpy())
    torch.nn.functional.cross_entropy(model(x), labels).backward()
    for name, p in model.named_parameters():
        got = state.parameters[name if name in named else gamma].grad
        np.testing.assert_allclose(got.reshape(p.shape), p.grad.numpy(), atol=1e-6, err_msg=name)
        if name in named:
            assert got.shape == p.shape


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(
    "model, x, weight",
    [
        (ConvBN, (B, 3, 8, 8), "'conv.weight'"),
        (lambda: torch.nn.Linear(4, 3), (B, 4), "'weight'"),  # the top module's own: no module path
    ],
    ids=["submodules", "top-module"],
)
def test_a_model_exported_without_its_parameters_is_refused(model, x, weight, dynamo, tmp_path):
    """export_params=False: TorchScript writes the parameters as graph inputs without values, which
    would compile into a model that reads its weights as data and trains nothing; dynamo leaves
    them unprovided. Both are refused in one line that names the export setting."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = {"optimize": False} if dynamo else {"training": torch.onnx.TrainingMode.TRAINING}
        torch.onnx.export(
            model().train(), (torch.randn(x),), tmp_path / "m.onnx", dynamo=dynamo, export_params=False, **options
        )
    with pytest.raises(EdgetrainError) as refusal:
        artifacts.generate_artifacts(tmp_path / "m.onnx", batch_size=B, artifact_directory=tmp_path / "out")
    message = str(refusal.value)
    assert weight in message and "export_params=False" in message and "\n" not in message


class ClassToken(torch.nn.Module):
    """A ViT's head: a parameter of the top module expanded over the batch and put before the tokens."""

    def __init__(self):
        super().__init__()
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, 6))
        self.proj = torch.nn.Linear(5, 6)
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        tokens = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), self.proj(x)], dim=1)
        return self.head(torch.tanh(tokens).mean(1) + tokens[:, 0])


def test_a_class_token_folded_over_a_static_batch_trains_as_in_pytorch(tmp_path):
    """torch.onnx.export(model, args, dynamo=True) with its defaults (a static batch, the optimizer
    on) folds `cls_token.expand(B, -1, -1)` into a constant named `expand`; it comes back as the
    parameter, with PyTorch's name, value and gradient."""
    torch.manual_seed(0)
    model, x, labels = ClassToken().train(), torch.randn(B, 4, 5), torch.tensor([1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp_path / "m.onnx", dynamo=True, verbose=False)
    assert "cls_token" not in {i.name for i in onnx.load(tmp_path / "m.onnx").graph.initializer}
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert any("restored 1 parameter(s)" in n and "cls_token" in n for n in notes), notes
    assert {n for n, p in state.parameters.items() if p.requires_grad} == {n for n, _ in model.named_parameters()}
    np.testing.assert_array_equal(state.parameters["cls_token"].data, model.cls_token.detach().numpy())
    _loss_as_pytorch(module, model, x, labels)
    np.testing.assert_allclose(state.parameters["cls_token"].grad, model.cls_token.grad.numpy(), atol=1e-5)


class Positions(torch.nn.Module):
    """A position table gathered at the positions of a static sequence, frozen as Whisper's is."""

    def __init__(self):
        super().__init__()
        self.positions = torch.nn.Embedding(4, 5)
        self.positions.weight.requires_grad_(False)
        self.head = torch.nn.Linear(5, 3)

    def forward(self, x):
        return self.head(x + self.positions(torch.arange(x.shape[1]))).mean(1)


def test_a_parameter_the_exporter_folded_away_can_be_named_frozen_but_not_trained(tmp_path):
    """With dynamo's defaults the table is folded into a constant and its name is gone: naming it in
    frozen_params, as README's export advice does for PyTorch's frozen parameters, compiles;
    naming it in requires_grad is refused in one line that says why."""
    model, x = Positions().train(), torch.randn(B, 4, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp_path / "m.onnx", dynamo=True, verbose=False)
    assert "positions.weight" not in {i.name for i in onnx.load(tmp_path / "m.onnx").graph.initializer}
    loss = artifacts.LossType.CrossEntropyLoss
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=loss, frozen_params=["positions.weight"])
    assert {n for n, p in state.parameters.items() if p.requires_grad} == {"head.weight", "head.bias"}
    with pytest.raises(EdgetrainError) as refusal:
        compile_(tmp_path / "m.onnx", tmp_path, loss=loss, requires_grad=["positions.weight", "head.weight"])
    message = str(refusal.value)
    assert "'positions.weight'" in message and "optimize=False" in message and "\n" not in message


def test_a_quantization_aware_convbn_folded_by_torchscript_is_refused_and_trains_exported_as_advised(tmp_path):
    """torch.ao's fused ConvBn for quantization-aware training scales its weight by BatchNorm before
    the fake quantization; TorchScript's constant folding (its default, in either mode) computes that
    weight into onnx::QuantizeLinear_*, so the convolution's and BatchNorm's parameters would not
    train as PyTorch's: refused, naming the way out. Exported as the refusal says, every parameter
    trains under its name, and the step is PyTorch's."""
    import torch.ao.quantization as tq

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)
            self.fc = torch.nn.Linear(4 * 6 * 6, 3)

        def forward(self, x):
            return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))

    torch.manual_seed(0)
    model = Net().train()
    tq.fuse_modules_qat(model, [["conv", "bn"]], inplace=True)
    model.qconfig = tq.QConfig(
        activation=tq.FakeQuantize.with_args(
            observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255, dtype=torch.quint8
        ),
        weight=tq.default_per_channel_weight_fake_quant,
    )
    tq.prepare_qat(model, inplace=True)
    for _ in range(3):
        model(torch.randn(4, 3, 8, 8))
    model.apply(tq.disable_observer)
    model.apply(torch.ao.nn.intrinsic.qat.freeze_bn_stats)
    x, labels = torch.randn(B, 3, 8, 8), torch.tensor([0, 2])
    training = torch.onnx.TrainingMode.TRAINING
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), tmp_path / "folded.onnx", dynamo=False, opset_version=13, training=training)
        torch.onnx.export(
            model,
            (x,),
            tmp_path / "m.onnx",
            dynamo=False,
            opset_version=13,
            training=training,
            do_constant_folding=False,
        )
    with pytest.raises(EdgetrainError) as refusal:
        artifacts.generate_artifacts(tmp_path / "folded.onnx", batch_size=B, artifact_directory=tmp_path / "out")
    message = str(refusal.value)
    assert "onnx::QuantizeLinear_*" in message and "do_constant_folding=False" in message and "\n" not in message
    module, state, _ = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert {n for n, p in state.parameters.items() if p.requires_grad} == {n for n, _ in model.named_parameters()}
    _loss_as_pytorch(module, model, x, labels)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, param.grad.numpy(), atol=1e-5, err_msg=name)


class Detached(torch.nn.Module):
    """A branch whose result the forward detaches: PyTorch trains its layer through the other use."""

    def __init__(self):
        super().__init__()
        self.branch = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.branch(x)
        return self.head(h.detach() + x) + 0.5 * h[:, :3]


def test_a_detach_the_dynamo_exporter_recorded_stops_the_gradient_as_in_pytorch(tmp_path):
    torch.manual_seed(0)
    model, x, labels = Detached().train(), torch.randn(B, 4), torch.tensor([0, 2, 1, 0][:B])
    dynamo_export(model, x, tmp_path / "m.onnx", optimize=False)
    module, state, _ = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    module.train()
    loss = module(x.numpy(), labels.numpy().astype(np.int64))
    torch.nn.functional.cross_entropy(model(x), labels).backward()
    for name, p in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert np.isclose(loss, torch.nn.functional.cross_entropy(model(x), labels).item(), rtol=1e-5)


def test_running_statistics_the_dynamo_export_dropped_are_said(tmp_path):
    """InstanceNorm with track_running_stats exports as its training-mode call alone; BatchNorm keeps
    its statistics and says nothing of the kind."""
    x = torch.randn(B, 3, 8, 8)
    dropped = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.InstanceNorm2d(4, track_running_stats=True))
    dynamo_export(
        torch.nn.Sequential(dropped, torch.nn.Flatten(), torch.nn.Linear(144, 3)), x, tmp_path / "i.onnx", False
    )
    *_, notes = compile_(tmp_path / "i.onnx", tmp_path / "i", loss=artifacts.LossType.CrossEntropyLoss)
    assert [n for n in notes if "dropped running statistics (0.1.running_mean, 0.1.running_var)" in n], notes
    dynamo_export(ConvBN().train(), x, tmp_path / "b.onnx", False)
    *_, notes = compile_(tmp_path / "b.onnx", tmp_path / "b", loss=artifacts.LossType.CrossEntropyLoss)
    assert not [n for n in notes if "running statistics" in n and "dropped" in n], notes


class DividedPool(torch.nn.Module):
    def __init__(self, divisor):
        super().__init__()
        self.conv, self.divisor = torch.nn.Conv2d(3, 4, 3), divisor

    def forward(self, x):
        return torch.nn.functional.avg_pool2d(self.conv(x), 2, divisor_override=self.divisor).flatten(1)


def test_an_average_pool_whose_divisor_override_the_export_dropped_is_refused(tmp_path):
    x = torch.randn(B, 3, 6, 6)
    dynamo_export(DividedPool(3), x, tmp_path / "d.onnx", False)
    with pytest.raises(
        EdgetrainError, match=r"'node_avg_pool2d' \(AveragePool\): PyTorch divides by divisor_override=3"
    ):
        compile_(tmp_path / "d.onnx", tmp_path / "d", loss=artifacts.LossType.MSELoss)
    dynamo_export(DividedPool(None), x, tmp_path / "n.onnx", False)
    compile_(tmp_path / "n.onnx", tmp_path / "n", loss=artifacts.LossType.MSELoss)


class SmoothedLoss(torch.nn.Module):
    def __init__(self, smoothing):
        super().__init__()
        self.fc, self.smoothing = torch.nn.Linear(4, 5), smoothing

    def forward(self, x, labels):
        return torch.nn.functional.cross_entropy(self.fc(x), labels, label_smoothing=self.smoothing)


def test_a_cross_entropy_whose_label_smoothing_the_export_dropped_is_refused(tmp_path):
    x, labels = torch.randn(B, 4), torch.tensor([1, 3])
    for smoothing in (0.1, 0.0):
        path = tmp_path / f"{smoothing}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                SmoothedLoss(smoothing), (x, labels), path, dynamo=True, optimize=False, input_names=["x", "labels"]
            )
        if smoothing:
            with pytest.raises(EdgetrainError, match=r"\(SoftmaxCrossEntropyLoss\): PyTorch smooths its labels by "):
                compile_(path, tmp_path / "s", loss=None)
        else:
            compile_(path, tmp_path / "u", loss=None)


class RunningNormalizer(torch.nn.Module):
    """Normalizes its input by a running mean that its forward updates (`update`), or only reads."""

    def __init__(self, update: bool):
        super().__init__()
        self.update = update
        self.register_buffer("center", torch.full((4,), 0.5))
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        if self.update:
            with torch.no_grad():
                self.center.mul_(0.9).add_(0.1 * x.mean(0))
        return self.fc(x - self.center)


@pytest.mark.parametrize("optimize", [False, True])
def test_a_buffer_the_forward_updates_is_noted(optimize, tmp_path):
    """Neither exporter writes a buffer's update back; the dynamo exporter's record marks the new value,
    and a note says the trainer leaves the buffer as it is. A buffer only read has no note."""
    for update in (True, False):
        path = tmp_path / f"{update}.onnx"
        dynamo_export(RunningNormalizer(update).train(), torch.randn(B, 4), path, optimize=optimize)
        _, state, notes = compile_(path, tmp_path / str(update))
        said = [n for n in notes if "buffer(s) of its own" in n]
        assert len(said) == int(update), notes
        assert "center" not in [n for n, p in state.parameters.items() if p.requires_grad]


class CenteredAfterLayer(torch.nn.Module):
    """A running mean of a trained layer's output, updated under no_grad and read by the forward, and a
    spectral_norm convolution, whose power iteration updates its buffers under no_grad likewise."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.utils.parametrizations.spectral_norm(torch.nn.Conv2d(3, 4, 3))
        self.fc1, self.fc2 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 3)
        self.register_buffer("center", torch.zeros(4))

    def forward(self, x):
        h = self.fc1(self.conv(x).mean((2, 3)))
        with torch.no_grad():
            self.center.mul_(0.5).add_(0.5 * h.mean(0))
        return self.fc2(h - self.center)


@pytest.mark.parametrize("optimize", [False, True])
def test_a_buffers_update_stops_the_gradient_as_in_pytorch(optimize, tmp_path):
    """PyTorch computes a buffer's update under no_grad (it could not backpropagate through the stored
    buffer on the next step otherwise); the export does not record that, but the dynamo exporter's
    record of the update does: without the stop, fc1's and the convolution's gradients took a share
    through the new mean and the power iteration."""
    torch.manual_seed(0)
    model, x = CenteredAfterLayer().train(), torch.randn(B, 3, 6, 6)
    reference = copy.deepcopy(model)
    dynamo_export(model, x, tmp_path / "m.onnx", optimize=optimize)
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert [n for n in notes if "buffer(s) of its own" in n], notes
    labels = torch.tensor([0, 2, 1, 0][:B])
    module.train()
    loss = module(x.numpy(), labels.numpy().astype(np.int64))
    want = torch.nn.functional.cross_entropy(reference(x), labels)
    want.backward()
    assert np.isclose(loss, want.item(), rtol=1e-5)
    folded = [n for n in notes if "folded into constants" in n]
    # dynamo's optimizer folds the whole power iteration, the weight with it, into a constant: said
    assert bool(folded) == optimize and all("conv.parametrizations.weight.original" in n for n in folded), notes
    for name, p in reference.named_parameters():
        if name in state.parameters:
            np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def step_beside_pytorch(model, x, target, optimize, tmp_path):
    """Exported by dynamo, compiled, and one training step through the C and through PyTorch (whose
    gradients stay on the model), the losses checked to agree: (the C's state, the import notes).
    Integer targets are class labels (CrossEntropyLoss), float ones MSELoss's."""
    dynamo_export(model, x, tmp_path / "m.onnx", optimize=optimize)
    labels = not target.is_floating_point()
    kind = artifacts.LossType.CrossEntropyLoss if labels else artifacts.LossType.MSELoss
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=kind)
    module.train()
    loss = module(x.numpy(), target.numpy())
    want = (torch.nn.functional.cross_entropy if labels else torch.nn.functional.mse_loss)(model(x), target)
    want.backward()
    assert np.isclose(loss, want.item(), rtol=1e-5)
    return state, notes


def assert_gradients_as_in_pytorch(state, model, but=()):
    """Every parameter's gradient from the C's step against PyTorch's on the model, but those named."""
    for name, p in model.named_parameters():
        if name not in but:
            np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


class TiedEmbedding(torch.nn.Module):
    """Token embeddings with a padding row, tied to the output projection as a language model's are
    (BART's and Pegasus's): the row's gradient is the projection's part alone."""

    def __init__(self, padding_idx, scale_grad_by_freq=False, vocab=7, dim=5):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)
        with torch.no_grad():
            self.embed.weight[self.embed.padding_idx or 0].normal_()  # the padding row is zeros when made

    def forward(self, ids):
        return torch.tanh(self.embed(ids)).mean(1) @ self.embed.weight.T


@pytest.mark.parametrize("optimize", [False, True], ids=["as_traced", "optimized"])
@pytest.mark.parametrize("padding_idx", [0, -2, None])
def test_an_embeddings_padding_row_the_dynamo_exporter_recorded_gets_no_gradient_from_its_lookups(
    padding_idx, optimize, tmp_path
):
    """Its optimizer also folds the transposed weight into a constant of its own, restored as a
    Transpose of the parameter."""
    torch.manual_seed(0)
    model = TiedEmbedding(padding_idx).train()
    ids = torch.tensor([[0, 5, 5, 2, 0, 1], [3, 5, 0, 6, 4, 0]][:B])  # the padding rows (0 and 5) fed unmasked
    state, _ = step_beside_pytorch(model, ids, torch.tensor([0, 5])[:B], optimize, tmp_path)
    np.testing.assert_allclose(state.parameters["embed.weight"].grad, model.embed.weight.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("folding", [False, True], ids=["as_traced", "folded"])
@pytest.mark.parametrize("padding_idx", [0, None])
def test_an_embeddings_row_of_zeros_in_a_torchscript_export_gets_no_gradient_from_its_lookups(
    padding_idx, folding, tmp_path
):
    """TorchScript keeps no record of padding_idx, but nn.Embedding makes that row zeros, and its
    gradient keeps it so: such a row is read as the padding row, with a note. Without a padding_idx
    (no row of zeros), every lookup trains its row. Constant folding gives the head a transposed copy
    of the table under a name of its own (no Linear reads it), which reads the table again: the tie
    trains as one."""
    torch.manual_seed(0)
    model = TiedEmbedding(padding_idx).train()
    if padding_idx is not None:
        with torch.no_grad():
            model.embed.weight[padding_idx] = 0.0  # as nn.Embedding makes it
    ids, labels = torch.tensor([[0, 5, 5, 2, 0, 1], [3, 5, 0, 6, 4, 0]][:B]), torch.tensor([0, 5])[:B]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids,),
            tmp_path / "m.onnx",
            dynamo=False,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=folding,
            input_names=["x"],
            dynamic_axes={"x": {0: "batch"}},
        )
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    module.train()
    _loss_as_pytorch(module, model, ids, labels)
    assert model.embed.weight.grad[0].abs().sum() > 0  # the head's part: the row trains, through the head alone
    np.testing.assert_allclose(state.parameters["embed.weight"].grad, model.embed.weight.grad, rtol=1e-5, atol=1e-6)
    padding = [n for n in notes if "padding_idx" in n]
    assert padding == (
        ["row 0 of 'embed.weight': all zeros" + padding[0].split("all zeros", 1)[1]] if padding_idx == 0 else []
    ), notes


class ShiftRight(torch.nn.Module):
    """MBart's shift of its labels: each row's last token moves to the front, taken by a gather and
    `.squeeze()`, which a batch of 1 turns into a scalar."""

    def __init__(self):
        super().__init__()
        self.embed, self.out = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3)

    def forward(self, ids):
        last = ids.gather(1, (ids.ne(0).sum(1) - 1).unsqueeze(-1)).squeeze()
        shifted = ids.clone()
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = last
        return self.out(torch.tanh(self.embed(shifted)).mean(1))


def test_a_squeeze_of_every_unit_axis_keeps_the_batch_axis_at_a_batch_of_1(tmp_path):
    """torch.export traces symbolic sizes as at least 2, so the graph after the Squeeze is written
    for a (batch,) result: at a batch of 1 it trains as PyTorch does, rather than failing shape
    inference (the batch axis squeezed too)."""
    torch.manual_seed(0)
    model = ShiftRight().train()
    ids = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0], [1, 2, 8, 9]])
    dynamo_export(model, ids, tmp_path / "m.onnx", optimize=True)
    module, state, _ = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    module.train()
    for rows in ([1], [0, 2]):
        model.zero_grad()
        module.lazy_reset_grad()
        _loss_as_pytorch(module, model, ids[rows], torch.tensor([2, 0])[: len(rows)])
        assert_gradients_as_in_pytorch(state, model)


class FoldedCopies(torch.nn.Module):
    """Parameters read directly and through a transpose, a view or an expansion, which dynamo's
    optimizer folds into constants of their own, one through a product, which is no rearrangement,
    and one through a transpose alone, which leaves it no initializer of its own."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 6))
        self.only_transposed = torch.nn.Parameter(torch.randn(4, 6))
        self.scale = torch.nn.Parameter(torch.randn(4))
        self.shift = torch.nn.Parameter(torch.randn(1, 6))
        self.doubled = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        h = (x @ self.w.T) * self.scale.view(1, -1) + self.scale + (x[:, None, :] * self.w).sum(-1)
        h = h + torch.tanh(x @ self.only_transposed.T)
        g = torch.cat([x, self.shift.expand(B, -1)]) + self.shift + x.repeat(2, 1) * (self.doubled * 2.0)
        return torch.cat([h, g[:B] + g[B:] + self.doubled], 1)


@pytest.mark.parametrize("optimize", [False, True], ids=["as_traced", "optimized"])
def test_a_parameters_copies_the_dynamo_optimizer_folded_train_it_as_in_pytorch(optimize, tmp_path):
    torch.manual_seed(0)
    model = FoldedCopies().train()
    state, notes = step_beside_pytorch(model, torch.randn(B, 6), torch.randn(B, 10), optimize, tmp_path)
    products = [n for n in notes if "computed from a parameter that also trains" in n]
    assert len(products) == optimize and all("(mul_" in n and "from doubled)" in n for n in products), notes
    assert_gradients_as_in_pytorch(state, model, but=["doubled"] if optimize else [])  # its product's copy: frozen


class ParallelNorms(torch.nn.Module):
    """Two fresh LayerNorms of one input (GPT-NeoX's parallel residual): dynamo's optimizer merges
    their equal parameters and then the two equal calls, leaving the second layer no node."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(6), torch.nn.LayerNorm(6)
        self.fc1, self.fc2 = torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.fc1(self.ln1(x)) + self.fc2(self.ln2(x))


@pytest.mark.parametrize("optimize", [False, True], ids=["as_traced", "optimized"])
def test_a_layer_the_dynamo_optimizer_merged_into_an_equal_one_is_said(optimize, tmp_path):
    torch.manual_seed(0)
    model = ParallelNorms().train()
    state, notes = step_beside_pytorch(model, torch.randn(B, 6), torch.randn(B, 3), optimize, tmp_path)
    said = [n for n in notes if "no node left in the export (ln2.bias, ln2.weight)" in n]
    assert len(said) == optimize, notes
    if optimize:  # frozen_params as README's recipe writes it names the parameter the export lost
        gone = r"name PyTorch parameter\(s\) that the export no longer has: 'ln2.weight'; .* optimize=False"
        with pytest.raises(EdgetrainError, match=gone):
            compile_(tmp_path / "m.onnx", tmp_path / "f", loss=artifacts.LossType.MSELoss, frozen_params=["ln2.weight"])
        return
    assert_gradients_as_in_pytorch(state, model)


class SharedLayer(torch.nn.Module):
    """One layer called twice, as ALBERT's are, beside a fresh LayerNorm equal to its own: dynamo's
    optimizer folds the layer's transposed weight into one constant both calls read and merges the
    LayerNorms' parameters."""

    def __init__(self):
        super().__init__()
        self.norm_in = torch.nn.LayerNorm(6)
        self.fc, self.norm = torch.nn.Linear(6, 6), torch.nn.LayerNorm(6)

    def forward(self, x):
        h = self.norm_in(x)
        for _ in range(2):
            h = self.norm(torch.tanh(self.fc(h)) + h)
        return h


@pytest.mark.parametrize("optimize", [False, True], ids=["as_traced", "optimized"])
def test_a_layer_called_twice_trains_its_parameters_once_as_in_pytorch(optimize, tmp_path):
    torch.manual_seed(0)
    model = SharedLayer().train()
    state, _ = step_beside_pytorch(model, torch.randn(B, 6), torch.randn(B, 6), optimize, tmp_path)
    assert sorted(n for n, p in state.parameters.items() if p.requires_grad) == sorted(
        n for n, _ in model.named_parameters()
    )
    assert_gradients_as_in_pytorch(state, model)


def test_an_embedding_that_scales_its_gradient_by_frequency_is_refused(tmp_path):
    ids = torch.tensor([[0, 5, 5, 2], [3, 5, 0, 6]])[:B]
    dynamo_export(TiedEmbedding(None, scale_grad_by_freq=True), ids, tmp_path / "m.onnx", optimize=False)
    with pytest.raises(EdgetrainError, match=r"'node_embedding' \(Gather\): .*scale_grad_by_freq=True") as refusal:
        compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    assert "\n" not in str(refusal.value)


class DropPath(torch.nn.Module):
    """A residual block with drop path: in training each row keeps its branch with probability
    `keep`, scaled by 1 / keep; in eval the branch is always there, unscaled. timm draws the mask
    with bernoulli_ (torchvision's stochastic depth alike), HuggingFace as floor(keep + rand)."""

    def __init__(self, keep: float, form: str):
        super().__init__()
        self.keep, self.form = keep, form
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        branch = torch.relu(self.fc(x))
        if self.training:
            if self.form == "bernoulli":
                mask = x.new_empty(x.shape[0], 1).bernoulli_(self.keep)
            else:
                mask = (self.keep + torch.rand(x.shape[0], 1, dtype=x.dtype)).floor_()
            branch = branch.div(self.keep) * mask
        return x + branch


@pytest.mark.parametrize("form", ["bernoulli", "floor"])
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_a_drop_path_draws_rows_in_training_and_is_the_whole_branch_in_eval(form, dynamo, tmp_path):
    """The exporters write the mask as a uniform draw and a threshold (frontend/imports.py's
    bernoulli_patterns): read as written, eval would take the uniform's mean and scale the branch
    by 1 / keep."""
    torch.manual_seed(0)
    model, x = DropPath(keep=0.6, form=form), torch.randn(B, 6)
    labels = torch.tensor([1, 4])
    if dynamo:
        dynamo_export(model.train(), x, tmp_path / "m.onnx", optimize=False)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model.train(),
                (x,),
                tmp_path / "m.onnx",
                dynamo=False,
                training=torch.onnx.TrainingMode.TRAINING,
                input_names=["x"],
                dynamic_axes={"x": {0: "batch"}},
            )
    module, state, notes = compile_(tmp_path / "m.onnx", tmp_path)
    assert not [n for n in notes if "random draw" in n], notes  # the mask is read as a Bernoulli
    with torch.no_grad():
        np.testing.assert_allclose(module.infer(x.numpy())[0], model.eval()(x).numpy(), rtol=1e-6, atol=1e-6)
        # The training loss of each row kept or dropped: a step's loss is one of these.
        x64, fc = x.double(), copy.deepcopy(model.fc).double()
        branch = torch.relu(fc(x64)) / model.keep
        losses = {
            kept: torch.nn.functional.cross_entropy(x64 + branch * torch.tensor(kept).double()[:, None], labels).item()
            for kept in itertools.product((0, 1), repeat=B)
        }
    module.train()
    seen = set()
    for _ in range(8):
        loss = module(x.numpy(), labels.numpy())
        kept = min(losses, key=lambda k: abs(losses[k] - loss))
        assert abs(losses[kept] - loss) < 1e-5, (loss, losses)
        seen.add(kept)
    assert len(seen) > 1, f"8 steps drew the same rows: {seen}"


class NoisyMask(torch.nn.Module):
    """A mask drawn as rand > drop, a form the import does not read as a Bernoulli."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        return self.fc(x) * (torch.rand_like(x) > 0.3).float()


def test_a_draw_left_random_is_said_with_its_eval_mean(tmp_path):
    torch.manual_seed(0)
    dynamo_export(NoisyMask().train(), torch.randn(B, 6), tmp_path / "m.onnx", optimize=False)
    _, _, notes = compile_(tmp_path / "m.onnx", tmp_path)
    said = [n for n in notes if "random draw" in n]
    assert len(said) == 1 and "RandomUniformLike, mean 0.5" in said[0] and "eval and inference" in said[0], notes


class NegativePermute(torch.nn.Module):
    """A permute written with negative axes, as HuggingFace's Mamba2 writes one."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(x.permute(0, -1, 1)).mean(1)


def test_a_transpose_with_negative_axes_trains_as_in_pytorch(tmp_path):
    """The TorchScript exporter writes permute's negative axes into Transpose's perm, which ONNX
    counts from 0 only (its shape inference refused the model); they count from the end."""
    torch.manual_seed(0)
    model, x, labels = NegativePermute().train(), torch.randn(B, 5, 4), torch.tensor([0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), tmp_path / "m.onnx", dynamo=False, training=torch.onnx.TrainingMode.TRAINING, input_names=["x"]
        )
    (perm,) = [a.ints for n in onnx.load(tmp_path / "m.onnx").graph.node for a in n.attribute if a.name == "perm"]
    assert list(perm) == [0, -1, 1]  # what the case is about
    module, state, _ = compile_(tmp_path / "m.onnx", tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    module.train()
    _loss_as_pytorch(module, model, x, labels)
    np.testing.assert_allclose(state.parameters["fc.weight"].grad, model.fc.weight.grad.numpy(), atol=1e-6)


class EmptyRoute(torch.nn.Module):
    """Rows routed to adapters by a mask that is constant in the export (HF X-MOD's per-language
    adapters with the default language): adapter 1 takes no rows, a GatherND and ScatterND of none
    and a weight gradient summed over no rows."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.adapters = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(2)])
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.fc(x)
        route = torch.zeros(x.shape[0], dtype=torch.long)
        out = torch.zeros_like(h)
        for k, adapter in enumerate(self.adapters):
            mask = route == k
            out[mask] = adapter(h[mask])
        return self.head(out + h)


class CastBuffer(torch.nn.Module):
    """A bfloat16 buffer that a float32 forward casts up (HF RecurrentGemma's `normalizer`), or a
    bfloat16 weight that it casts likewise, which stays refused: it would freeze as a constant."""

    def __init__(self, weight: bool):
        super().__init__()
        self.fc = torch.nn.Linear(8, 3)
        scale = torch.tensor(8**0.5, dtype=torch.bfloat16)
        if weight:
            self.scale = torch.nn.Parameter(scale)
        else:
            self.register_buffer("scale", scale, persistent=False)

    def forward(self, x):
        return self.fc(x * self.scale.to(x.dtype))


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_route_of_no_rows_compiles_and_trains_as_in_pytorch(exporter, tmp_path):
    """Its C once held `(const int[]){}`, which C99 has not, and did not compile; the adapter with no
    rows gets zero gradients, as in PyTorch (its weight gradient, a product over K = 0, is zeros)."""
    torch.manual_seed(0)
    model, x = EmptyRoute(), torch.randn(B, 8)
    path = tmp_path / "m.onnx"
    if exporter == "dynamo":
        dynamo_export(model, x, path, optimize=False)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (x,),
                path,
                dynamo=False,
                input_names=["x"],
                dynamic_axes={"x": {0: "batch"}},
                do_constant_folding=False,
            )
    module, state, _ = compile_(path, tmp_path, loss=artifacts.LossType.CrossEntropyLoss)
    module.train()
    _loss_as_pytorch(module, model, x, torch.tensor([0, 2]))
    for name, p in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_bfloat16_buffer_cast_to_float32_compiles_and_a_bfloat16_weight_is_refused(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(B, 8)
    model = CastBuffer(weight=False)
    dynamo_export(model, x, tmp_path / "b.onnx", optimize=False)
    module, state, _ = compile_(tmp_path / "b.onnx", tmp_path / "b", loss=artifacts.LossType.CrossEntropyLoss)
    module.train()
    _loss_as_pytorch(module, model, x, torch.tensor([0, 2]))
    for name, p in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    dynamo_export(CastBuffer(weight=True), x, tmp_path / "w.onnx", optimize=False)
    with pytest.raises(EdgetrainError, match=r"unsupported dtype: 'scale' is bfloat16"):
        compile_(tmp_path / "w.onnx", tmp_path / "w", loss=artifacts.LossType.CrossEntropyLoss)
