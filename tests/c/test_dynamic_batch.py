"""The batch is a maximum: a trainer compiled with batch_size=8 runs any batch n from 1 to 8, and a
step at n gives the loss, gradients, BatchNorm running statistics and updated parameters of a
trainer compiled for n, bit for bit. A model whose computation cannot follow the batch runs its
own batch only, and says why, in Python and in the C. ORT's tutorial loop (no batch_size, a short
last batch, export, onnxruntime at other batches) runs unchanged."""

from __future__ import annotations

import io
import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import ImportNote, api, artifacts
from edgetrain.host import load_library
from models import mlp, weighted_sum

torch = pytest.importorskip("torch")
onnxruntime = pytest.importorskip("onnxruntime")
nn = torch.nn

MAX = 8
BAD_ARGUMENT = 1


def export(module: nn.Module, shapes, names, outputs, training=False) -> onnx.ModelProto:
    """`module` exported by torch's TorchScript exporter with a symbolic batch axis on every input and
    output but a scalar loss (so it carries the Shape -> Reshape chains real exports have)."""
    module.train(training)
    buffer = io.BytesIO()
    axes = {n: {0: "batch"} for n in names + outputs if n != "loss"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes
        torch.onnx.export(
            module,
            tuple(torch.zeros(2, *s) for s in shapes),
            buffer,
            input_names=names,
            output_names=outputs,
            opset_version=17,
            do_constant_folding=False,
            dynamic_axes=axes,
            training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL,
            dynamo=False,
        )
    return onnx.load_from_string(buffer.getvalue())


def randomized(module: nn.Module, seed: int) -> nn.Module:
    """Distinct random values everywhere (a fresh BatchNorm's ones and zeros would be merged)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-0.5, 0.5)
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.8, 1.2)
                m.weight.uniform_(0.5, 1.5)
    return module


class CNN(nn.Module):
    """Conv -> BatchNorm (training form) -> ReLU -> MaxPool -> Conv -> ReLU -> AvgPool ->
    Reshape(batch, -1) -> Linear."""

    def __init__(self):
        super().__init__()
        self.c1, self.bn, self.c2, self.fc = (
            nn.Conv2d(1, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.Conv2d(4, 6, 3),
            nn.Linear(6, 3),
        )

    def forward(self, x):
        h = torch.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        h = nn.functional.avg_pool2d(torch.relu(self.c2(h)), 2)
        return self.fc(h.reshape(h.shape[0], -1))


class Pointwise(nn.Module):
    """Conv -> ReLU, then two pointwise Convs, each with a ReLU, a mean over the plane, Linear: in
    int8, whose pointwise input gradients read the dequantized weights again, which the backward
    pass places by weighing weight-gradient bytes against activation-gradient bytes."""

    def __init__(self):
        super().__init__()
        self.stem, self.squeeze, self.expand = (
            nn.Conv2d(1, 32, 3, padding=1),
            nn.Conv2d(32, 32, 1),
            nn.Conv2d(32, 64, 1),
        )
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        h = torch.relu(self.expand(torch.relu(self.squeeze(torch.relu(self.stem(x))))))
        return self.fc(h.mean((2, 3)))


class Sequence(nn.Module):
    """LayerNorm, Softmax over the sequence and a mean over it (ReduceMean)."""

    def __init__(self):
        super().__init__()
        self.ln, self.proj, self.score, self.out = nn.LayerNorm(8), nn.Linear(8, 8), nn.Linear(8, 1), nn.Linear(8, 3)

    def forward(self, x):
        h = self.proj(self.ln(x))
        return self.out((h * torch.softmax(self.score(h), dim=1)).mean(dim=1))


class Recurrent(nn.Module):
    def __init__(self, cell: str):
        super().__init__()
        self.rnn, self.fc = getattr(nn, cell)(4, 6, batch_first=True), nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


class OwnLoss(nn.Module):
    """The model computes its loss (loss=None) from two batched inputs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x, t):
        return ((self.fc(x) - t) ** 2).mean()


class TokenTypes(nn.Module):
    """A buffer of ids expanded to the batch and embedded, as BERT's token_type_ids are: once the
    batch is fixed, Gather's indices are a constant of one row of ids per sample."""

    def __init__(self):
        super().__init__()
        self.register_buffer("token_type_ids", torch.tensor([[0, 1, 1, 0, 1]]))
        self.types, self.fc = nn.Embedding(2, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.fc((x + self.types(self.token_type_ids.expand(x.shape[0], -1))).mean(1))


def classes(rng, n):
    return rng.integers(0, 3, n)


# name -> (model, loss, data maker: (rng, n) -> the step's arrays, inputs then labels[, more
# generate_artifacts options])
CASES = {
    "mlp-dropout": (
        lambda: mlp(dropout=0.25),
        "CrossEntropyLoss",
        lambda r, n: [r.normal(size=(n, 8)).astype(np.float32), classes(r, n)],
    ),
    "cnn-batchnorm": (
        lambda: export(randomized(CNN(), 0), [(1, 8, 8)], ["x"], ["logits"], training=True),
        "CrossEntropyLoss",
        lambda r, n: [r.normal(size=(n, 1, 8, 8)).astype(np.float32), classes(r, n)],
    ),
    "sequence": (
        lambda: export(randomized(Sequence(), 1), [(5, 8)], ["x"], ["y"]),
        "MSELoss",
        lambda r, n: [r.normal(size=(n, 5, 8)).astype(np.float32), r.normal(size=(n, 3)).astype(np.float32)],
    ),
    "gru": (
        lambda: export(randomized(Recurrent("GRU"), 2), [(5, 4)], ["x"], ["logits"]),
        "CrossEntropyLoss",
        lambda r, n: [r.normal(size=(n, 5, 4)).astype(np.float32), classes(r, n)],
    ),
    "lstm": (
        lambda: export(randomized(Recurrent("LSTM"), 3), [(5, 4)], ["x"], ["logits"]),
        "CrossEntropyLoss",
        lambda r, n: [r.normal(size=(n, 5, 4)).astype(np.float32), classes(r, n)],
    ),
    "per-sample-ids": (
        lambda: export(randomized(TokenTypes(), 5), [(5, 4)], ["x"], ["logits"]),
        "CrossEntropyLoss",
        lambda r, n: [r.normal(size=(n, 5, 4)).astype(np.float32), classes(r, n)],
    ),
    "int8-pointwise": (
        lambda: export(randomized(Pointwise(), 6), [(1, 2, 2)], ["x"], ["logits"]),
        "CrossEntropyLoss",
        lambda r, n: [r.normal(size=(n, 1, 2, 2)).astype(np.float32), classes(r, n)],
        {
            "quantize": "int8",
            "calibration_data": [
                np.random.default_rng(i).normal(size=(MAX, 1, 2, 2)).astype(np.float32) for i in (0, 1)
            ],
        },
    ),
    "loss-none": (
        lambda: export(randomized(OwnLoss(), 4), [(4,), (2,)], ["x", "t"], ["loss"]),
        None,
        lambda r, n: [r.normal(size=(n, 4)).astype(np.float32), r.normal(size=(n, 2)).astype(np.float32)],
    ),
}


def fresh(directory):
    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = api.Module(directory / "training_model.onnx", state, directory / "eval_model.onnx")
    return state, module, api.Optimizer(directory / "optimizer_model.onnx", module)


def one_step(directory, arrays, infer_inputs: int):
    """Everything a training step makes, then the optimizer step's parameters, the eval loss and
    the outputs of infer."""
    state, module, opt = fresh(directory)
    loss = module(*arrays)
    grads = {n: p.grad.copy() for n, p in state.parameters.items() if p.grad is not None}
    buffers = {n: p.data.copy() for n, p in state.parameters.items() if not p.requires_grad}
    opt.step()
    params = module.get_contiguous_parameters()
    module.eval()
    return {
        "loss": loss,
        "grads": grads,
        "buffers": buffers,
        "params": params,
        "eval": module(*arrays),
        "infer": module.infer(*arrays[:infer_inputs]),
    }


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """name -> batch -> artifact directory, compiled lazily."""
    built: dict[str, dict[int, object]] = {}

    def get(name: str, batch: int):
        if batch not in built.setdefault(name, {}):
            make, loss, _, *options = CASES[name]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the import's notes (the RNN exports' tied weights)
                built[name][batch] = artifacts.generate_artifacts(
                    make(),
                    loss=loss,
                    optimizer="SGD",
                    learning_rate=0.1,
                    momentum=0.9,
                    batch_size=batch,
                    artifact_directory=tmp_path_factory.mktemp(f"{name}-{batch}"),
                    **(options[0] if options else {}),
                )
        return built[name][batch]

    return get


@pytest.mark.parametrize("n", [1, 3, MAX])
@pytest.mark.parametrize("name", list(CASES))
def test_a_smaller_batch_is_the_batch_compiled_alone(compiled, name, n):
    _, loss, data, *_ = CASES[name]
    arrays = data(np.random.default_rng(n), n)
    inputs = len(arrays) - (loss is not None)
    big, small = one_step(compiled(name, MAX), arrays, inputs), one_step(compiled(name, n), arrays, inputs)
    assert big["loss"].tobytes() == small["loss"].tobytes()
    assert big["eval"].tobytes() == small["eval"].tobytes()
    for what in ("grads", "buffers"):
        assert big[what].keys() == small[what].keys()
        for key in big[what]:
            np.testing.assert_array_equal(big[what][key], small[what][key], err_msg=f"{what} {key}", strict=True)
    np.testing.assert_array_equal(big["params"], small["params"], strict=True)
    assert [o.shape for o in big["infer"]] == [o.shape for o in small["infer"]]
    for got, want in zip(big["infer"], small["infer"]):
        np.testing.assert_array_equal(got, want, strict=True)
    assert big["grads"] and (name != "cnn-batchnorm" or big["buffers"])  # the comparison saw something


def test_the_c_refuses_a_batch_out_of_range_before_anything_changes(compiled):
    directory = compiled("mlp-dropout", MAX)
    ffi, lib = load_library(directory)
    assert lib.MODEL_MAX_BATCH == MAX
    assert lib.model_init() == 0
    x = np.ones((MAX + 1, 8), np.float32)
    labels = np.zeros(MAX + 1, np.int32)
    loss = ffi.new("float *", 7.0)
    y = np.full((MAX + 1, 3), 5.0, np.float32)
    before = np.frombuffer(ffi.buffer(lib.model_trainable_data(), 4 * 195), np.float32).copy()
    for n in (0, -1, MAX + 1):
        assert (
            lib.model_train_step(n, ffi.from_buffer("float[]", x), ffi.from_buffer("int32_t[]", labels), loss)
            == BAD_ARGUMENT
        )
        assert (
            lib.model_eval_step(n, ffi.from_buffer("float[]", x), ffi.from_buffer("int32_t[]", labels), loss)
            == BAD_ARGUMENT
        )
        assert lib.model_infer(n, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)) == BAD_ARGUMENT
    assert loss[0] == 7.0 and np.all(y == 5.0)
    assert lib.model_optimizer_step() == BAD_ARGUMENT  # no gradient was accumulated
    np.testing.assert_array_equal(np.frombuffer(ffi.buffer(lib.model_trainable_data(), 4 * 195), np.float32), before)
    # infer at n writes n rows, no more
    assert lib.model_infer(3, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)) == 0
    assert np.all(y[3:] == 5.0) and not np.any(y[:3] == 5.0)


def test_python_refuses_batches_out_of_range_and_disagreeing(compiled):
    _, module, _ = fresh(compiled("mlp-dropout", MAX))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="batches of 1 to 8"):
        module(rng.normal(size=(MAX + 1, 8)).astype(np.float32), classes(rng, MAX + 1))
    with pytest.raises(ValueError, match="batch of 0"):
        module.infer(np.zeros((0, 8), np.float32))
    with pytest.raises(ValueError, match="disagree on the batch: 'x' holds 3 samples, 'labels' holds 4"):
        module(rng.normal(size=(3, 8)).astype(np.float32), classes(rng, 4))
    with pytest.raises(ValueError, match=r"expects shape \(3, 8\), got \(3, 7\)"):
        module(rng.normal(size=(3, 7)).astype(np.float32), classes(rng, 3))


def range_added(batch="batch") -> onnx.ModelProto:
    """y = Gemm(x + Range(batch - 1, -1, -1)[:, None]): the folded Range is a constant the C reads
    whose values (not only its size) change with the batch, and not as values per sample do (the
    first of the largest batch's), which the C cannot follow."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], end=1),
        helper.make_node("Squeeze", ["shape"], ["count"]),
        helper.make_node("Sub", ["count", "one"], ["last"]),
        helper.make_node("Range", ["last", "minus_one", "minus_one"], ["rows"]),
        helper.make_node("Cast", ["rows"], ["rows_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["rows_f", "axis"], ["column"]),
        helper.make_node("Add", ["x", "column"], ["shifted"]),
        helper.make_node("Gemm", ["shifted", "W", "B"], ["y"], transB=1),
    ]
    inits = [
        numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("minus_one", -1), ("one", 1), ("axis", [1]))
    ]
    inits += [
        numpy_helper.from_array(rng.normal(size=(3, 4)).astype(np.float32), "W"),
        numpy_helper.from_array(np.zeros(3, np.float32), "B"),
    ]
    graph = helper.make_graph(
        nodes,
        "range_added",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_model_the_c_cannot_follow_runs_its_batch_only_and_says_why(tmp_path):
    directory = artifacts.generate_artifacts(range_added(), loss="MSELoss", batch_size=4, artifact_directory=tmp_path)
    header = (directory / "model.h").read_text()
    assert "must be 4: the trainer runs batches of 4 only: constant tensor" in header
    _, module, _ = fresh(directory)
    rng = np.random.default_rng(1)
    x, t = rng.normal(size=(4, 4)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    assert np.isfinite(module(x, t))
    np.testing.assert_allclose(
        module.infer(x)[0],
        (x + np.arange(3, -1, -1)[:, None]) @ module.state.parameters["W"].data.T,
        rtol=1e-5,
        atol=1e-5,
    )
    with pytest.raises(
        ValueError,
        match=r"expects shape \(4, 4\), got \(3, 4\); the trainer runs batches of 4 only: "
        r"constant tensor '.+' read at run time depend on the batch",
    ):
        module(x[:3], t[:3])
    ffi, lib = load_library(directory)
    assert lib.model_init() == 0
    y = np.zeros((4, 3), np.float32)
    assert lib.model_infer(3, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)) == BAD_ARGUMENT
    assert lib.model_infer(4, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)) == 0


def test_a_model_without_a_batch_axis_runs_its_shapes(tmp_path):
    """... and says so when it compiles, with what it makes of a batch_size it cannot take."""
    with pytest.warns(ImportNote, match=r"runs batches of 3 only: .*no symbolic batch axis\); batch_size=8 has no"):
        artifacts.generate_artifacts(weighted_sum((3, 4)), loss=None, batch_size=8, artifact_directory=tmp_path / "8")
    with pytest.warns(ImportNote, match=r"runs batches of 3 only: .*no symbolic batch axis\)$"):
        directory = artifacts.generate_artifacts(weighted_sum((3, 4)), loss=None, artifact_directory=tmp_path)
    assert "runs batches of 3 only" in " ".join(json.loads((directory / "report.json").read_text())["import"]["notes"])
    assert "MODEL_MAX_BATCH 3" in (directory / "model.h").read_text()
    _, module, _ = fresh(directory)
    assert module(np.ones((3, 4), np.float32)) == pytest.approx(float(module.state.parameters["W"].data.sum()))
    with pytest.raises(ValueError, match="no symbolic batch axis"):
        module(np.ones((2, 4), np.float32))


def test_a_batchnorm_over_one_value_per_channel_does_not_train_a_batch_of_one(tmp_path):
    from models import mlp_bn

    directory = artifacts.generate_artifacts(mlp_bn(), batch_size=4, artifact_directory=tmp_path)
    _, module, _ = fresh(directory)
    x, y = np.ones((1, 8), np.float32), np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="a batch of 1 does not train: BatchNormalization"):
        module(x, y)
    ffi, lib = load_library(directory)
    loss = ffi.new("float *")
    assert lib.model_init() == 0
    assert (
        lib.model_train_step(1, ffi.from_buffer("float[]", x), ffi.from_buffer("int32_t[]", y.astype(np.int32)), loss)
        == BAD_ARGUMENT
    )
    module.eval()
    assert np.isfinite(module(x, y))  # evaluation uses the running statistics: one sample is fine


def test_ort_tutorial_loop_with_a_short_last_batch(tmp_path):
    """ONNX Runtime's training tutorial: artifacts without batch_size, an epoch over a loader whose
    last batch is short, then the inference model exported and run by onnxruntime at other batches."""
    make, loss, data = CASES["cnn-batchnorm"]
    out = artifacts.generate_artifacts(
        make(),
        requires_grad=None,
        loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.AdamW,
        artifact_directory=tmp_path / "out",
    )
    assert "MODEL_MAX_BATCH 32" in (out / "model.h").read_text()
    state, module, opt = fresh(out)
    x, y = data(np.random.default_rng(0), 70)
    module.train()
    losses = []
    for start in range(0, 70, 32):  # batches of 32, 32 and 6
        losses.append(module(x[start : start + 32], y[start : start + 32]))
        opt.step()
        module.lazy_reset_grad()
    assert len(losses) == 3 and all(np.isfinite(losses))
    module.eval()
    path = tmp_path / "inference.onnx"
    module.export_model_for_inferencing(path, ["logits"])
    exported = onnx.load(path)
    assert [d.dim_param for d in exported.graph.input[0].type.tensor_type.shape.dim[:1]] == ["batch"]
    assert [d.dim_param for d in exported.graph.output[0].type.tensor_type.shape.dim[:1]] == ["batch"]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for n in (1, 5):
        got = session.run(["logits"], {"x": x[:n]})[0]
        assert got.shape == (n, 3)
        np.testing.assert_allclose(got, module.infer(x[:n])[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["AdamW", "SGD"])
def test_a_fused_update_at_a_smaller_batch_is_the_batch_compiled_alone(tmp_path, optimizer):
    """At batch 1 a trainer compiled for 1 updates Gemm weights from outer-product factors; the
    trainer compiled for 8 runs its Gemms at n = 1 and must land on the same bits."""

    def trajectory(batch, n):
        directory = artifacts.generate_artifacts(
            mlp(),
            optimizer=optimizer,
            momentum=0.9 * (optimizer == "SGD"),
            fused_update=True,
            batch_size=batch,
            artifact_directory=tmp_path / f"{batch}-{n}",
        )
        _, module, opt = fresh(directory)
        losses = []
        for seed in range(3):
            rng = np.random.default_rng(seed)
            losses.append(module(rng.normal(size=(n, 8)).astype(np.float32), classes(rng, n)))
            opt.step()
        return losses, module.get_contiguous_parameters()

    for n in (1, 3):
        (big_losses, big), (small_losses, small) = trajectory(MAX, n), trajectory(n, n)
        assert [x.tobytes() for x in big_losses] == [x.tobytes() for x in small_losses]
        np.testing.assert_array_equal(big, small, strict=True)


def test_generate_inference_runs_any_batch(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(MAX, 8)).astype(np.float32)
    outputs = {}
    for batch in (MAX, 3):
        ffi, lib = load_library(artifacts.generate_inference(mlp(), tmp_path / str(batch), batch_size=batch))
        y = np.zeros((3, 3), np.float32)
        assert lib.model_infer(3, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)) == 0
        assert lib.model_infer(batch + 1, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)) == BAD_ARGUMENT
        outputs[batch] = y
    np.testing.assert_array_equal(outputs[MAX], outputs[3], strict=True)
