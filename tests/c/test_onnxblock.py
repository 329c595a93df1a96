"""edgetrain.onnxblock: losses and heads written as ONNX Runtime's onnxblock writes them.

Each loss block against torch.nn.functional: the plain ONNX it produces, run by onnxruntime, and the
trainer edgetrain compiles from it (generate_artifacts(with_loss(...), loss=None)): the loss and
d loss/d logits, through gradcheck's helpers. Then a custom TrainingBlock (a Linear head and a
loss on an exported network) compiled and trained, and the behaviours ONNX Runtime's own onnxblock
tests (orttraining_test_ort_apis_onnxblock.py) check for this subset, written for edgetrain.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import EdgetrainError, api, artifacts, onnxblock
from edgetrain.onnxblock import with_loss
from gradcheck import assert_close, compile_module

torch = pytest.importorskip("torch")
onnxruntime = pytest.importorskip("onnxruntime")

F = torch.nn.functional


def _logits_model(logits: np.ndarray) -> onnx.ModelProto:
    """logits_init (an initializer, so it gets a gradient) -> Identity -> the output 'logits'."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["logits_init"], ["logits"])],
        "logits",
        [],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits.shape)],
        [numpy_helper.from_array(logits, "logits_init")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_onnx(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _class_labels(rng, shape):
    return rng.integers(0, shape[1], size=(shape[0],) + shape[2:]).astype(np.int64)


W4 = np.array([0.5, 2.0, 1.0, 0.25], np.float32)
LOSS_CASES = {
    # id: (block factory, logits shape, target maker, torch loss(x, t))
    "mse": (lambda: onnxblock.loss.MSELoss(), (3, 4), "normal", F.mse_loss),
    "mse-sum": (
        lambda: onnxblock.loss.MSELoss("sum"),
        (2, 3, 2),
        "normal",
        lambda x, t: F.mse_loss(x, t, reduction="sum"),
    ),
    "l1": (lambda: onnxblock.loss.L1Loss(), (3, 4), "apart", F.l1_loss),
    "l1-sum": (lambda: onnxblock.loss.L1Loss("sum"), (5,), "apart", lambda x, t: F.l1_loss(x, t, reduction="sum")),
    "bce": (lambda: onnxblock.loss.BCEWithLogitsLoss(), (3, 4), "unit", F.binary_cross_entropy_with_logits),
    "bce-weights-sum": (
        lambda: onnxblock.loss.BCEWithLogitsLoss(weight=W4, reduction="sum", pos_weight=W4[::-1].copy()),
        (3, 4),
        "unit",
        lambda x, t: F.binary_cross_entropy_with_logits(
            x, t, weight=torch.from_numpy(W4), pos_weight=torch.from_numpy(W4[::-1].copy()), reduction="sum"
        ),
    ),
    # onnxblock's log(sigmoid(x)) form is infinite here; torch's and ours stay finite.
    "bce-extreme": (lambda: onnxblock.loss.BCEWithLogitsLoss(), (2, 3), "extreme", F.binary_cross_entropy_with_logits),
    "ce": (lambda: onnxblock.loss.CrossEntropyLoss(), (5, 4), "classes", F.cross_entropy),
    "ce-weight-ignore": (
        lambda: onnxblock.loss.CrossEntropyLoss(weight=W4, ignore_index=1),
        (6, 4),
        "classes",
        lambda x, t: F.cross_entropy(x, t, weight=torch.from_numpy(W4), ignore_index=1),
    ),
    "ce-NCd": (
        lambda: onnxblock.loss.CrossEntropyLoss(weight=W4),
        (2, 4, 3),
        "classes",
        lambda x, t: F.cross_entropy(x, t, weight=torch.from_numpy(W4)),
    ),
}


def _loss_inputs(rng, shape, kind):
    logits = (2 * rng.normal(size=shape)).astype(np.float32)
    if kind == "classes":
        return logits, _class_labels(rng, shape)
    if kind == "unit":
        return logits, rng.uniform(size=shape).astype(np.float32)
    if kind == "extreme":
        logits = np.array([[60.0, -60.0, 0.5], [-45.0, 45.0, -0.5]], np.float32)
        return logits, rng.uniform(size=shape).astype(np.float32)
    target = rng.normal(size=shape).astype(np.float32)
    if kind == "apart":  # |logits - target| >= 0.1: away from |.|'s kink
        step = rng.normal(size=shape)
        logits = (target + np.sign(step) * (np.abs(step) + 0.1)).astype(np.float32)
    return logits, target


@pytest.mark.parametrize("case", list(LOSS_CASES))
def test_loss_block_matches_torch(case, tmp_path):
    make_block, shape, kind, torch_loss = LOSS_CASES[case]
    logits, target = _loss_inputs(np.random.default_rng(len(case)), shape, kind)
    model = with_loss(make_block(), _logits_model(logits))
    assert [o.name for o in model.graph.output][0].startswith("onnx::")
    (target_input,) = [i.name for i in model.graph.input]
    assert target_input == ("labels" if kind == "classes" else "target")

    x = torch.tensor(logits, requires_grad=True)
    want = torch_loss(x, torch.from_numpy(target))
    want.backward()
    (ort_loss,) = _run_onnx(model, {target_input: target})
    assert_close(ort_loss, want.detach().numpy(), f"{case} loss (plain ONNX in onnxruntime)")

    module, state = compile_module(model, tmp_path, loss=None)
    assert_close(module(target), want.detach().numpy(), f"{case} loss (edgetrain)")
    assert_close(state.parameters["logits_init"].grad, x.grad.numpy(), f"{case} d loss/d logits (edgetrain)")
    assert len(state.parameters) == 1, "the loss's constants are not parameters"


class SmoothGap(onnxblock.Block):
    """A loss of most elementwise blocks: sum(clip(|x - t|, 0.05, 2) ** 1.5 / 2 - log(sigmoid(-x))) * 0.5.
    Written without calling Block.__init__, as ONNX Runtime's own custom-loss test does."""

    def __init__(self):
        self.sub, self.abs, self.clip = onnxblock.blocks.Sub(), onnxblock.blocks.Abs(), onnxblock.blocks.Clip(0.05, 2.0)
        self.pow, self.div, self.two = onnxblock.blocks.Pow(1.5), onnxblock.blocks.Div(), onnxblock.blocks.Constant(2.0)
        self.neg, self.sigmoid, self.log = onnxblock.blocks.Neg(), onnxblock.blocks.Sigmoid(), onnxblock.blocks.Log()
        self.add, self.mul, self.half = onnxblock.blocks.Add(), onnxblock.blocks.Mul(), onnxblock.blocks.Constant(0.5)
        self.sum, self.sub2 = onnxblock.blocks.ReduceSum(keepdims=False), onnxblock.blocks.Sub()

    def build(self, x, target="target"):
        target = onnxblock.blocks.InputLike(x)(target)
        gap = self.div(self.pow(self.clip(self.abs(self.sub(x, target)))), self.two())
        return self.mul(self.sum(self.sub2(gap, self.log(self.sigmoid(self.neg(x))))), self.half())


def test_custom_loss_of_elementwise_blocks_matches_torch(tmp_path):
    rng = np.random.default_rng(7)
    logits, target = _loss_inputs(rng, (3, 4), "apart")
    logits[0, :2] = target[0, :2] + np.array([0.01, 3.0], np.float32)  # one under, one over the clip bounds
    model = with_loss(SmoothGap(), _logits_model(logits))

    x = torch.tensor(logits, requires_grad=True)
    gap = (x - torch.from_numpy(target)).abs().clamp(0.05, 2.0) ** 1.5 / 2
    want = (gap - torch.log(torch.sigmoid(-x))).sum() * 0.5
    want.backward()
    module, state = compile_module(model, tmp_path, loss=None)
    assert_close(np.reshape(module(target), (1,)), [want.item()], "custom loss (edgetrain)")
    assert_close(state.parameters["logits_init"].grad, x.grad.numpy(), "custom loss d/d logits (edgetrain)")


# A network exported as ONNX Runtime's tests export theirs: every axis dynamic, opset 14, training mode.


class SimpleNet(torch.nn.Module):
    def __init__(self, input_size=12, hidden_size=8, num_classes=4):
        super().__init__()
        self.fc1, self.relu = torch.nn.Linear(input_size, hidden_size), torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(hidden_size, num_classes)

    def forward(self, model_input):
        return self.fc2(self.relu(self.fc1(model_input)))


def _export(net: torch.nn.Module, *inputs: torch.Tensor) -> onnx.ModelProto:
    outputs = net(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    names = {f"input-{i}": x for i, x in enumerate(inputs)} | {f"output-{i}": y for i, y in enumerate(outputs)}
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter, which ONNX Runtime's tests use, is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            net,
            inputs,
            buffer,
            dynamo=False,
            opset_version=14,
            do_constant_folding=False,
            training=torch.onnx.TrainingMode.TRAINING,
            input_names=[n for n in names if n[0] == "i"],
            output_names=[n for n in names if n[0] == "o"],
            dynamic_axes={n: {d: f"{n}_dim{d}" for d in range(t.dim())} for n, t in names.items()},
        )
    return onnx.load_from_string(buffer.getvalue())


@pytest.fixture(scope="module")
def simple_net():
    torch.manual_seed(0)
    net = SimpleNet()
    return net, _export(net, torch.randn(6, 12))


class Head(onnxblock.TrainingBlock):
    """A new Linear classifier on the network's features, with cross entropy."""

    def __init__(self, features, classes):
        super().__init__()
        self.linear = onnxblock.blocks.Linear(features, classes)
        self.loss = onnxblock.loss.CrossEntropyLoss()

    def build(self, features_name):
        return self.loss(self.linear(features_name))


def test_training_block_head_compiles_and_trains(simple_net, tmp_path):
    net, model = simple_net
    head = Head(4, 3)
    head.requires_grad("fc2.weight")
    head.requires_grad("fc2.bias", False)
    np.random.seed(3)
    with onnxblock.base(model):
        loss_name = head(model.graph.output[0].name)
    training, evaluation = head.to_model_proto()
    trainable, frozen = head.parameters()
    weight, bias = [t.name for t in trainable if t.name.startswith("onnx::linear.")]
    assert [t.name for t in trainable] == ["fc2.weight", weight, bias] and [t.name for t in frozen] == ["fc2.bias"]
    assert weight.startswith("onnx::linear.weight::") and bias.startswith("onnx::linear.bias::")
    assert [o.name for o in training.graph.output] == [loss_name] == [o.name for o in evaluation.graph.output]
    assert [i.name for i in training.graph.input] == ["input-0", "labels"]

    module, state = compile_module(
        training,
        tmp_path,
        loss=None,
        requires_grad=[t.name for t in trainable],
        optimizer=artifacts.OptimType.AdamW,
        dim_values={"input-0_dim1": 12},
    )
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 12)).astype(np.float32)
    labels = rng.integers(0, 3, size=8).astype(np.int64)
    loss = module(x, labels)

    arrays = {t.name: torch.tensor(numpy_helper.to_array(t), requires_grad=True) for t in trainable}
    features = F.linear(F.relu(net.fc1(torch.from_numpy(x))), arrays["fc2.weight"], net.fc2.bias)
    want = F.cross_entropy(features @ arrays[weight] + arrays[bias], torch.from_numpy(labels))
    want.backward()
    assert_close(loss, want.detach().numpy(), "head loss")
    for name, array in arrays.items():
        assert_close(state.parameters[name].grad, array.grad.numpy(), f"d loss/d {name}")
    assert not state.parameters["fc1.weight"].requires_grad and not state.parameters["fc2.bias"].requires_grad

    optimizer = api.Optimizer(None, module)
    optimizer.set_learning_rate(0.05)
    losses = []
    for _ in range(30):
        module.lazy_reset_grad()
        losses.append(float(module(x, labels)))
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0], f"the head did not learn: {losses[0]:.3f} -> {losses[-1]:.3f}"


# The behaviours ONNX Runtime's onnxblock tests check, for the blocks this package has.

FORWARD_LOSSES = {
    "mse": onnxblock.loss.MSELoss,
    "l1": onnxblock.loss.L1Loss,
    "ce": onnxblock.loss.CrossEntropyLoss,
    "bce": onnxblock.loss.BCEWithLogitsLoss,
}


def _simple_block(base_class, loss_class):
    class Simple(base_class):
        def __init__(self):
            super().__init__()
            self.loss = loss_class()

        def build(self, output_name):
            return self.loss(output_name)

    return Simple()


@pytest.mark.parametrize("base_class", [onnxblock.ForwardBlock, onnxblock.TrainingBlock])
@pytest.mark.parametrize("loss", list(FORWARD_LOSSES))
def test_loss_composition_and_execution(simple_net, base_class, loss):
    """ORT's test_loss_composition and test_*_loss_execution: stacked on the exported network, the
    block's model runs in onnxruntime, fed by graph input position, and equals torch's loss."""
    net, model = simple_net
    block = _simple_block(base_class, FORWARD_LOSSES[loss])
    with onnxblock.base(model):
        block(model.graph.output[0].name)
    built = block.to_model_proto() if base_class is onnxblock.ForwardBlock else block.to_model_proto()[0]
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 12)).astype(np.float32)
    target = _class_labels(rng, (5, 4)) if loss == "ce" else rng.uniform(size=(5, 4)).astype(np.float32)
    (got,) = _run_onnx(built, {built.graph.input[0].name: x, built.graph.input[1].name: target})
    torch_loss = {"mse": F.mse_loss, "l1": F.l1_loss, "ce": F.cross_entropy, "bce": F.binary_cross_entropy_with_logits}[
        loss
    ]
    with torch.no_grad():
        want = torch_loss(net(torch.from_numpy(x)), torch.from_numpy(target))
    assert np.allclose(got, want.numpy(), atol=1e-6)


def test_parameters_follow_requires_grad(simple_net):
    """ORT's test_retrieve_parameters, test_set_requires_grad_on_parameters and
    test_retrieve_parameters_before_building_gradient_graph."""
    net, model = simple_net
    block = _simple_block(onnxblock.TrainingBlock, onnxblock.loss.MSELoss)
    with pytest.raises(RuntimeError, match="Please build the training model first before trying to retrieve"):
        block.parameters()
    with pytest.raises(RuntimeError, match="Please build the training and eval models first"):
        block.to_model_proto()
    for name, _ in net.named_parameters():
        block.requires_grad(name)
    with onnxblock.base(model):
        block(model.graph.output[0].name)
    trainable, frozen = block.parameters()
    assert not frozen
    assert [t.name for t in trainable] == [name for name, _ in net.named_parameters()]
    for tensor, (_, param) in zip(trainable, net.named_parameters()):
        assert np.array_equal(numpy_helper.to_array(tensor), param.detach().numpy())

    untouched = _simple_block(onnxblock.TrainingBlock, onnxblock.loss.MSELoss)
    untouched.requires_grad("fc2.weight", False)
    untouched.requires_grad("fc1.bias", False)
    untouched.requires_grad("fc1.weight")
    untouched.requires_grad("fc1.weight", False)
    untouched.requires_grad("fc1.weight")  # the last word wins
    with onnxblock.base(model):
        untouched(model.graph.output[0].name)
    trainable, frozen = untouched.parameters()
    assert [t.name for t in trainable] == ["fc1.weight"]  # none by default, as ONNX Runtime's
    assert {t.name for t in frozen} == {"fc2.weight", "fc1.bias"}


@pytest.mark.parametrize("base_class", [onnxblock.ForwardBlock, onnxblock.TrainingBlock])
def test_weighted_average_of_two_losses(base_class, tmp_path):
    """ORT's test_weighted_average_model_composition (Constant, Mul, Add and two cross entropies
    with their own labels), then compiled and checked against torch."""

    class TwoOutputNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net1, self.net2 = SimpleNet(6, 5, 3), SimpleNet(6, 5, 3)

        def forward(self, x1, x2):
            return self.net1(x1), self.net2(x2)

    class WeightedAvg(base_class):
        def __init__(self, w1, w2):
            super().__init__()
            self.loss1, self.loss2 = onnxblock.loss.CrossEntropyLoss(), onnxblock.loss.CrossEntropyLoss()
            self.w1, self.w2 = onnxblock.blocks.Constant(w1), onnxblock.blocks.Constant(w2)
            self.mul, self.add = onnxblock.blocks.Mul(), onnxblock.blocks.Add()

        def build(self, name1, name2):
            return self.add(
                self.mul(self.w1(), self.loss1(name1, labels_name="labels1")),
                self.mul(self.w2(), self.loss2(name2, labels_name="labels2")),
            )

    torch.manual_seed(1)
    net = TwoOutputNet()
    model = _export(net, torch.randn(4, 6), torch.randn(4, 6))
    block = WeightedAvg(0.3, 0.7)
    with onnxblock.base(model):
        block(*[o.name for o in model.graph.output])
    built = block.to_model_proto() if base_class is onnxblock.ForwardBlock else block.to_model_proto()[0]
    assert [i.name for i in built.graph.input] == ["input-0", "input-1", "labels1", "labels2"]

    rng = np.random.default_rng(3)
    feeds = [
        rng.normal(size=(4, 6)).astype(np.float32),
        rng.normal(size=(4, 6)).astype(np.float32),
        rng.integers(0, 3, 4).astype(np.int64),
        rng.integers(0, 3, 4).astype(np.int64),
    ]
    out1, out2 = net(*map(torch.from_numpy, feeds[:2]))
    want = 0.3 * F.cross_entropy(out1, torch.from_numpy(feeds[2])) + 0.7 * F.cross_entropy(
        out2, torch.from_numpy(feeds[3])
    )
    want.backward()
    module, state = compile_module(built, tmp_path, loss=None, dim_values={"input-0_dim1": 6, "input-1_dim1": 6})
    assert_close(np.reshape(module(*feeds), (1,)), [want.item()], "weighted loss (edgetrain)")
    for name, param in net.named_parameters():
        assert_close(state.parameters[name].grad, param.grad.numpy(), f"d loss/d {name}")


def test_custom_loss_on_outputs_of_two_ranks(tmp_path):
    """ORT's test_custom_loss_function: a Block that does not call Block.__init__, MSE on a rank-4
    output plus BCE on a rank-3 one, given to generate_artifacts (here through with_loss)."""

    class TwoOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.randn(2, 3, 4, 5))
            self.b = torch.nn.Parameter(torch.randn(4, 3, 6))

        def forward(self, x, y):
            return self.a + x, self.b + y

    class CustomLossBlock(onnxblock.Block):
        def __init__(self):
            self._loss1, self._loss2 = onnxblock.loss.MSELoss(), onnxblock.loss.BCEWithLogitsLoss()
            self._add = onnxblock.blocks.Add()

        def build(self, input1, input2):
            return self._add(self._loss1(input1, target_name="target1"), self._loss2(input2, target_name="target2"))

    torch.manual_seed(2)
    net = TwoOutputs()
    shapes = [(2, 3, 4, 5), (4, 3, 6)]
    model = _export(net, *(torch.randn(*s) for s in shapes))
    built = with_loss(CustomLossBlock(), model)
    assert [i.name for i in built.graph.input] == ["input-0", "input-1", "target1", "target2"]
    assert len(built.graph.output) == 1 and not built.graph.output[0].type.tensor_type.shape.dim

    rng = np.random.default_rng(4)
    feeds = [rng.normal(size=s).astype(np.float32) for s in shapes] + [
        rng.normal(size=shapes[0]).astype(np.float32),
        rng.uniform(size=shapes[1]).astype(np.float32),
    ]
    out1, out2 = net(*map(torch.from_numpy, feeds[:2]))
    want = F.mse_loss(out1, torch.from_numpy(feeds[2])) + F.binary_cross_entropy_with_logits(
        out2, torch.from_numpy(feeds[3])
    )
    want.backward()
    # Every axis is fixed (the two leading ones differ, so neither is a batch); the targets' axes
    # carry the outputs' names.
    dims = {
        f"{io}-{i}_dim{d}": size for i, s in enumerate(shapes) for d, size in enumerate(s) for io in ("input", "output")
    }
    module, state = compile_module(built, tmp_path, loss=None, dim_values=dims)
    assert_close(module(*feeds), want.detach().numpy(), "custom loss (edgetrain)")
    assert_close(state.parameters["a"].grad, net.a.grad.numpy(), "d loss/d a")
    assert_close(state.parameters["b"].grad, net.b.grad.numpy(), "d loss/d b")


def test_eval_model_is_in_inference_mode():
    """What ORT's test_eval_model_has_no_training_mode_dropout/_batchnorm check of the eval model."""
    nodes = [
        helper.make_node("Dropout", ["x", "ratio", "mode"], ["d"]),
        helper.make_node("BatchNormalization", ["d", "s", "b", "m", "v"], ["y", "m_out", "v_out"], training_mode=1),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
        numpy_helper.from_array(np.array(True), "mode"),
    ]
    inits += [numpy_helper.from_array(np.ones(3, np.float32), n) for n in "sbmv"]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    block = _simple_block(onnxblock.TrainingBlock, onnxblock.loss.MSELoss)
    with onnxblock.base(model):
        block("y")
    training, evaluation = block.to_model_proto()
    assert training.graph.node[0].input[2] == "mode" and training.graph.node[1].attribute[0].i == 1
    assert evaluation.graph.node[0].input[2] == "" and evaluation.graph.node[1].attribute[0].i == 0


def test_with_loss_outputs_inputs_and_names(simple_net):
    """generate_artifacts' semantics: the loss on every model output (or loss_input_names), the loss
    first, then additional_output_names; ORT's names for what the blocks add."""
    _, model = simple_net
    built = with_loss(onnxblock.loss.MSELoss(), model, additional_output_names=["output-0"])
    loss, logits = [o.name for o in built.graph.output]
    assert logits == "output-0" and loss.startswith("onnx::reducemean_output::")
    assert [i.name for i in built.graph.input] == ["input-0", "target"]
    ops = [(n.op_type, n.name.rsplit("::", 1)[0]) for n in built.graph.node[len(model.graph.node) :]]
    assert ops == [
        ("Sub", "onnx::Sub"),
        ("Constant", "onnx::pow_exponent"),
        ("Pow", "onnx::Pow"),
        ("ReduceMean", "onnx::ReduceMean"),
    ]
    onnx.checker.check_model(built, full_check=True)
    assert model.graph.output[0].name == "output-0" and len(model.graph.node) == len(built.graph.node) - 4

    relu = next(n.output[0] for n in model.graph.node if n.op_type == "Relu")
    on_hidden = with_loss(onnxblock.loss.MSELoss(), model, loss_input_names=[relu])
    target = on_hidden.graph.input[1].type.tensor_type.shape.dim
    assert len(target) == 2 and len(on_hidden.graph.output) == 1


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda m: with_loss(onnxblock.loss.MSELoss("none"), m), "must be a scalar, but has shape"),
        (lambda m: with_loss(onnxblock.loss.L1Loss(), m, ["no_such_value"]), "L1Loss: Could not find input or output"),
        (lambda m: with_loss(torch.nn.MSELoss(), m), "a loss must be an edgetrain.onnxblock.Block"),
        (lambda m: with_loss(onnxblock.loss.MSELoss(), m, additional_output_names=["nope"]), "nope is not a graph"),
    ],
)
def test_with_loss_refuses_in_one_line(simple_net, bad, message):
    with pytest.raises(EdgetrainError, match=message) as caught:
        bad(simple_net[1])
    assert "\n" not in str(caught.value)


def test_base_and_empty_base():
    """One base at a time; a new model is plain ONNX at opset 17 unless told; blocks outside a base
    say what to do; the reduction must be one of ORT's; custom op libraries are refused."""
    with onnxblock.empty_base() as accessor:
        with pytest.raises(RuntimeError, match="already exists"):
            with onnxblock.base(onnx.ModelProto()):
                pass
        accessor.model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]))
        onnxblock.blocks.Add()("x", onnxblock.blocks.Constant(1.0)())
    assert [(o.domain, o.version) for o in accessor.model.opset_import] == [("", 17)]
    with onnxblock.empty_base(18) as accessor:
        pass
    assert accessor.model.opset_import[0].version == 18
    with pytest.raises(RuntimeError, match="No base model"):
        onnxblock.blocks.Neg()("x")
    with pytest.raises(RuntimeError, match="Reduction max not supported"):
        onnxblock.loss.MSELoss("max")
    with pytest.raises(EdgetrainError, match="custom op libraries are not supported"):
        with onnxblock.custom_op_library("ops.so"):
            pass


class Stack(onnxblock.ForwardBlock):
    def __init__(self, block, arity):
        super().__init__()
        self.block, self.arity = block, arity

    def build(self, a, b):
        return self.block(*(a, b)[: self.arity])


ELEMENTWISE = {
    "Add": (onnxblock.blocks.Add(), 2, np.add),
    "Sub": (onnxblock.blocks.Sub(), 2, np.subtract),
    "Mul": (onnxblock.blocks.Mul(), 2, np.multiply),
    "Div": (onnxblock.blocks.Div(), 2, np.divide),
    "Pow": (onnxblock.blocks.Pow(3.0), 1, lambda a: a**3),
    "Neg": (onnxblock.blocks.Neg(), 1, np.negative),
    "Abs": (onnxblock.blocks.Abs(), 1, np.abs),
    "Sigmoid": (onnxblock.blocks.Sigmoid(), 1, lambda a: 1 / (1 + np.exp(-a))),
    "Log": (onnxblock.blocks.Log(), 1, lambda a: np.log(np.abs(a))),
    "ReduceMean": (onnxblock.blocks.ReduceMean(), 1, lambda a: a.mean(keepdims=True)),
    "ReduceSum": (onnxblock.blocks.ReduceSum(keepdims=False), 1, np.sum),
    "Clip": (onnxblock.blocks.Clip(-0.5, 0.25), 1, lambda a: np.clip(a, -0.5, 0.25)),
    "Clip-max": (onnxblock.blocks.Clip(clip_max=0.25), 1, lambda a: np.minimum(a, 0.25)),
    "Cast": (onnxblock.blocks.Cast(TensorProto.INT64), 1, lambda a: a.astype(np.int64)),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_blocks(name):
    block, arity, reference = ELEMENTWISE[name]
    a = np.random.default_rng(5).normal(size=(2, 3)).astype(np.float32) * 3
    a = np.abs(a) if name == "Log" else a
    b = np.full((2, 3), 1.5, np.float32)
    with onnxblock.empty_base() as accessor:
        for n in "ab":
            accessor.model.graph.input.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]))
        stack = Stack(block, arity)
        stack("a", "b")
    (got,) = _run_onnx(stack.to_model_proto(), {"a": a, "b": b})
    want = reference(*(a, b)[:arity])
    assert got.dtype == want.dtype and np.allclose(got, want, rtol=1e-6, atol=1e-6)


def test_linear_is_onnxblock_gemm():
    np.random.seed(0)
    with onnxblock.empty_base() as accessor:
        accessor.model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]))
        stack = Stack(onnxblock.blocks.Linear(3, 2, alpha=2.0, beta=0.5), 1)
        out = stack("x", None)
    model = stack.to_model_proto()
    weight, bias = (numpy_helper.to_array(t) for t in model.graph.initializer)
    assert weight.shape == (3, 2) and bias.shape == (2,)
    assert out.startswith("onnx::linear.output::") and model.graph.node[0].name.startswith("onnx::linear::")
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (got,) = _run_onnx(model, {"x": x})
    assert np.allclose(got, 2.0 * x @ weight + 0.5 * bias, rtol=1e-5)
    assert [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == ["n", 2]


@pytest.mark.parametrize("reduction", ["sum", "none"])
@pytest.mark.parametrize("loss", list(FORWARD_LOSSES))
def test_reductions_in_onnxruntime(loss, reduction):
    """reduction='sum' and 'none' as torch's, in the plain ONNX (edgetrain's compiler trains a sum of
    MSE, L1 and BCE; its SoftmaxCrossEntropyLoss kernel reduces by the mean only)."""
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(3, 4)).astype(np.float32)
    target = _class_labels(rng, (3, 4)) if loss == "ce" else rng.uniform(size=(3, 4)).astype(np.float32)
    block = _simple_block(onnxblock.ForwardBlock, lambda: FORWARD_LOSSES[loss](reduction=reduction))
    model = _logits_model(logits)
    with onnxblock.base(model):
        block("logits")
    built = block.to_model_proto()
    (got,) = _run_onnx(built, {built.graph.input[0].name: target})
    torch_loss = {"mse": F.mse_loss, "l1": F.l1_loss, "ce": F.cross_entropy, "bce": F.binary_cross_entropy_with_logits}[
        loss
    ]
    want = torch_loss(torch.from_numpy(logits), torch.from_numpy(target), reduction=reduction).numpy()
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-6)
