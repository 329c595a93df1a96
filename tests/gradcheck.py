"""The gradient tests' one harness: the generated C trainer against torch autograd.

Every op family's test file (tests/c/test_gradients*.py) is a table of cases, `CASES = Cases()`,
and one test parametrized over it that calls `run_case`. A case is anything with
`run(tmp_path, seed) -> max error`; most are `OpCase`s, added with `CASES.op(name, op, inputs,
torch_fn, ...)`:

- `op_gradients` builds a one-op ONNX model whose float operands are initializers (so each gets a
  gradient), reduces the op's outputs to a scalar loss with random weights R fed as graph inputs,
  compiles it with edgetrain, runs one training step through `api.Module`, and compares the loss
  and every trainable initializer's gradient with torch autograd in float32;
- `check_reference` then runs training_model.onnx through onnx.reference with our ops' NumPy
  references (and any forward ops given), and checks it computes the C's loss and gradients: the
  artifacts describe what the C computes.

`check_graph_gradients` does the same for a hand-built or exported graph, `check_loss_gradients`
for edgetrain's built-in losses against torch.nn.functional (reduction='mean'). Operand values come
from value specs (`normal`, `away0`, `outside0`, `positive`, `ties`, `fixed`, or a bare shape),
drawn from a generator seeded by the test's id, so every case is deterministic.

Tolerance: max|C - torch| <= TOL * max(1, max|torch|), per compared tensor.
"""

from __future__ import annotations

import subprocess
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgetrain import api, artifacts
from edgetrain.ops import reference_ops

torch = pytest.importorskip("torch")  # the reference: a module that imports this one is skipped without it

TOL = 1e-4

__all__ = [
    "TOL",
    "Cases",
    "Check",
    "ExportCase",
    "OpCase",
    "assert_close",
    "away0",
    "build_op_model",
    "check_graph_gradients",
    "check_loss_gradients",
    "check_module_gradients",
    "check_op_gradients",
    "check_reference",
    "compile_module",
    "exported_by_dynamo",
    "fixed",
    "float_library",
    "i64",
    "normal",
    "op_gradients",
    "outside0",
    "positive",
    "run_case",
    "ties",
    "ulps",
    "values",
]


def assert_close(got, want, what: str) -> float:
    """Assert max|got - want| <= TOL * max(1, max|want|); return the max error measured."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite values in the C result"
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    bound = TOL * max(1.0, float(np.max(np.abs(want), initial=0.0)))
    assert err <= bound, f"{what}: max|C - torch| = {err:.3g} > {bound:.3g}"
    return err


def compile_module(model, tmp_path, **kwargs) -> tuple[api.Module, api.CheckpointState]:
    """Generate the artifacts of `model` into tmp_path and bind a Module to a fresh state (SGD)."""
    kwargs.setdefault("optimizer", artifacts.OptimType.SGD)
    out = artifacts.generate_artifacts(
        model, artifact_directory=Path(tmp_path) / "artifacts", batch_size=None, **kwargs
    )
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return module, state


def _output_shapes(op_type, inputs, attrs, const_inputs, n_outputs, opset):
    """The op's output shapes, from onnx shape inference on the single node."""
    from onnx import shape_inference

    names = _input_names(inputs, const_inputs)
    outs = [f"Y{i}" if n_outputs > 1 else "Y" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in {**inputs, **const_inputs}.items() if v is not None]
    graph = helper.make_graph([node], "shapes", [], [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    dims = {o.name: tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in inferred.graph.output}
    return outs, [dims[o] for o in outs]


def _input_names(inputs, const_inputs):
    """Node inputs: the float operands in order, then the constants; a None value is an omitted input."""
    names = [("" if v is None else k) for k, v in list(inputs.items()) + list(const_inputs.items())]
    while names and not names[-1]:
        names.pop()
    return names


def build_op_model(op_type: str, inputs: dict, attrs: dict, const_inputs: dict, n_outputs: int = 1, opset: int = 18):
    """loss = sum_i ReduceSum(Y_i * R_i), with the op's float operands as initializers and R_i graph
    inputs. Returns (model, output names, output shapes)."""
    outs, shapes = _output_shapes(op_type, inputs, attrs, const_inputs, n_outputs, opset)
    nodes = [helper.make_node(op_type, _input_names(inputs, const_inputs), outs, name="op", **attrs)]
    terms = []
    for i, y in enumerate(outs):
        term = "loss" if n_outputs == 1 else f"S{i}"
        nodes += [
            helper.make_node("Mul", [y, f"R{i}"], [f"YR{i}"]),
            helper.make_node("ReduceSum", [f"YR{i}"], [term], keepdims=0),
        ]
        terms.append(term)
    acc = terms[0]
    for i, t in enumerate(terms[1:]):
        nodes.append(helper.make_node("Add", [acc, t], ["loss" if i == len(terms) - 2 else f"acc{i}"]))
        acc = f"acc{i}"
    graph_inputs = [helper.make_tensor_value_info(f"R{i}", TensorProto.FLOAT, s) for i, s in enumerate(shapes)]
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inputs.items() if v is not None]
    inits += [numpy_helper.from_array(np.asarray(v), k) for k, v in const_inputs.items() if v is not None]
    graph = helper.make_graph(
        nodes, f"grad_{op_type}", graph_inputs, [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), outs, shapes


# ---- operand values: a spec is a function of the case's generator, or a bare shape (normal) ----


def normal(shape, scale=1.0, avoid=()) -> Callable:
    """Normal values times `scale`, nudged at least 0.1 away from each point in `avoid` (kinks, bounds)."""

    def make(rng):
        x = np.asarray(rng.normal(size=shape) * scale, np.float32)
        for point in avoid:
            near = np.abs(x - point) < 0.1
            x = np.where(near, x + np.where(x >= point, 0.2, -0.2), x).astype(np.float32)
        return np.asarray(x)

    return make


def away0(shape, scale=1.0) -> Callable:
    return normal(shape, scale, avoid=(0.0,))


def outside0(shape) -> Callable:
    """Normal values moved 0.25 further from 0: kinks at 0 (Relu, LeakyRelu, Abs) and denominators."""

    def make(rng):
        x = rng.normal(size=shape).astype(np.float32)
        return (np.sign(x) * (np.abs(x) + 0.25)).astype(np.float32)

    return make


def positive(shape) -> Callable:
    """Uniform in [0.5, 2]: Log, Sqrt and Pow bases."""
    return lambda rng: rng.uniform(0.5, 2.0, size=shape).astype(np.float32)


def ties(shape) -> Callable:
    """Few distinct values (-2 to 2): pooling windows and reductions hold equal maxima."""
    return lambda rng: rng.integers(-2, 3, size=shape).astype(np.float32)


def fixed(array) -> Callable:
    return lambda rng: np.asarray(array, np.float32)


def values(spec, rng) -> np.ndarray:
    return spec(rng) if callable(spec) else normal(spec)(rng)


def i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---- one op's loss and gradients against torch, and against onnx.reference ----


@dataclass
class Gradients:
    """One training step of a one-op model: the C's loss and gradients (trainable operands), the
    loss weights it was fed, and the largest error against torch."""

    loss: float
    grads: dict
    feeds: dict
    error: float


def _torch_step(torch_fn, present: dict, frozen, rs, shapes):
    """torch's loss and leaves after backward, for the same operands and loss weights."""
    leaves = [torch.tensor(v, requires_grad=name not in frozen) for name, v in present.items()]
    ys = torch_fn(*leaves)
    ys = ys if isinstance(ys, (tuple, list)) else (ys,)
    assert len(ys) == len(shapes), f"torch_fn returned {len(ys)} outputs, expected {len(shapes)}"
    for y, s in zip(ys, shapes):
        assert tuple(y.shape) == s, f"torch output shape {tuple(y.shape)} != ONNX shape {s}"
    total = sum((y * torch.from_numpy(r)).sum() for y, r in zip(ys, rs))
    total.backward()
    return total, leaves


def op_gradients(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    attrs: dict,
    torch_fn: Callable,
    const_inputs: dict[str, np.ndarray | None] | None = None,
    *,
    tmp_path,
    opset: int = 18,
    n_outputs: int = 1,
    seed: int = 0,
    frozen=(),
) -> Gradients:
    """Compare edgetrain's loss and gradients for one `op_type` node against torch autograd.

    inputs: the op's float operands (become initializers: trainable, or frozen if named in `frozen`),
        in node-input order; a None value leaves that optional input empty (e.g. a recurrence's B
        before its initial_h).
    const_inputs: constant operands that follow them (axes, shape, bounds, exponent, split sizes);
        a None value leaves that optional input empty (e.g. Clip's min). They are never parameters.
    torch_fn: maps the given float operands as torch tensors (same order) to Y, or a tuple of outputs."""
    const_inputs = dict(const_inputs or {})
    inputs = {k: None if v is None else np.asarray(v, np.float32) for k, v in inputs.items()}
    clash = {"loss"} | {f"{p}{i}" for p in ("R", "YR", "S", "Y", "acc") for i in range(n_outputs)} | {"Y"}
    assert not clash & (set(inputs) | set(const_inputs)), "operand names clash with the harness's names"
    model, _, shapes = build_op_model(op_type, inputs, attrs, const_inputs, n_outputs, opset)
    rng = np.random.default_rng(seed + 12345)
    rs = [rng.normal(size=s).astype(np.float32) for s in shapes]

    module, state = compile_module(model, tmp_path, loss=None, frozen_params=list(frozen) or None)
    present = {k: v for k, v in inputs.items() if v is not None}
    trainable = {n for n, p in state.parameters.items() if p.requires_grad}
    assert trainable == set(present) - set(frozen), f"trainable {sorted(trainable)}: constants are never parameters"
    loss = module(*rs)

    total, leaves = _torch_step(torch_fn, present, frozen, rs, shapes)
    errors = [assert_close(loss, total.detach().numpy(), f"{op_type} loss")]
    grads = {}
    for name, leaf in zip(present, leaves):
        if name in frozen:
            continue
        want = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        grads[name] = state.parameters[name].grad.copy()  # the C's buffer goes with the module
        errors.append(assert_close(grads[name], want.numpy(), f"{op_type} d loss/d {name}"))
    return Gradients(loss, grads, {f"R{i}": r for i, r in enumerate(rs)}, max(errors))


def check_op_gradients(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    attrs: dict,
    torch_fn: Callable,
    const_inputs: dict[str, np.ndarray | None] | None = None,
    *,
    tmp_path,
    opset: int = 18,
    n_outputs: int = 1,
    seed: int = 0,
) -> float:
    """op_gradients' largest error: the max absolute error over the loss and every gradient."""
    return op_gradients(
        op_type, inputs, attrs, torch_fn, const_inputs, tmp_path=tmp_path, opset=opset, n_outputs=n_outputs, seed=seed
    ).error


def check_reference(out: Path, feeds: dict, loss, grads: dict, new_ops=()) -> float:
    """training_model.onnx in the artifacts directory `out`, executed by onnx.reference with our ops'
    NumPy references (and `new_ops`: forward ops it lacks or gets wrong), computes `loss` and `grads`
    (the C's) from `feeds`, the model's inputs and initial parameters."""
    training = onnx.load(Path(out) / "training_model.onnx")
    names = [o.name for o in training.graph.output]
    evaluator = ReferenceEvaluator(training, new_ops=list(new_ops) + reference_ops())
    got = dict(zip(names, evaluator.run(None, {i.name: feeds[i.name] for i in training.graph.input})))
    errors = [assert_close(got[names[0]], loss, "onnx.reference loss")]
    errors += [
        assert_close(got[f"{name}_grad"], grad, f"onnx.reference d loss/d {name}") for name, grad in grads.items()
    ]
    return max(errors)


def check_loss_gradients(
    loss_type: artifacts.LossType,
    logits: np.ndarray,
    labels: np.ndarray,
    torch_loss: Callable,
    *,
    tmp_path,
    ignore_index: int | None = None,
    class_weights=None,
) -> float:
    """logits initializer -> Identity -> edgetrain's `loss_type`; compare the loss and d loss/d logits
    with `torch_loss(logits_tensor, labels_tensor)` (a torch.nn.functional loss, reduction='mean').
    Integer labels are converted to int64 for torch. Returns the max absolute error measured."""
    logits = np.asarray(logits, np.float32)
    nodes = [helper.make_node("Identity", ["logits_init"], ["logits"])]
    graph = helper.make_graph(
        nodes,
        f"loss_{loss_type.value}",
        [],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits.shape)],
        [numpy_helper.from_array(logits, "logits_init")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    module, state = compile_module(
        model, tmp_path, loss=loss_type, ignore_index=ignore_index, class_weights=class_weights
    )
    loss = module(labels)

    x = torch.tensor(logits, requires_grad=True)
    target = torch.from_numpy(np.asarray(labels, np.int64 if np.asarray(labels).dtype.kind in "iu" else np.float32))
    want = torch_loss(x, target)
    want.backward()
    name = loss_type.value
    errors = [
        assert_close(loss, want.detach().numpy(), f"{name} loss"),
        assert_close(state.parameters["logits_init"].grad, x.grad.numpy(), f"{name} d loss/d logits"),
    ]
    return max(errors)


# ---- graphs: hand-built, or exported by torch ----


def check_graph_gradients(
    model: onnx.ModelProto,
    params: dict[str, np.ndarray],
    torch_fn: Callable,
    tmp_path,
    rng,
    data: dict[str, np.ndarray] | None = None,
) -> float:
    """`model` computes Y from `data` inputs and the float initializers `params`; append
    loss = ReduceSum(Y * R), train one step and compare with torch_fn(*data, **params), then
    training_model.onnx under onnx.reference with the C."""
    data = data or {}
    graph = model.graph
    y = graph.output[0].name
    shape = tuple(
        torch_fn(*map(torch.from_numpy, data.values()), **{k: torch.from_numpy(v) for k, v in params.items()}).shape
    )
    graph.node.extend(
        [helper.make_node("Mul", [y, "R"], ["YR"]), helper.make_node("ReduceSum", ["YR"], ["loss"], keepdims=0)]
    )
    graph.input.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, shape))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    module, state = compile_module(model, tmp_path, loss=None)
    r = rng.normal(size=shape).astype(np.float32)
    loss = module(*data.values(), r)

    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    total = (torch_fn(*map(torch.from_numpy, data.values()), **leaves) * torch.from_numpy(r)).sum()
    total.backward()
    errors = [assert_close(loss, total.detach().numpy(), "loss")]
    for name, leaf in leaves.items():
        want = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        errors.append(assert_close(state.parameters[name].grad, want.numpy(), f"d loss/d {name}"))
    grads = {name: state.parameters[name].grad for name in leaves}
    return max(errors + [check_reference(Path(tmp_path) / "artifacts", {**data, "R": r, **params}, loss, grads)])


def check_module_gradients(net, x, model: onnx.ModelProto, tmp_path, rng) -> float:
    """`model`, an export of torch module `net` called on x alone: the initializers named as net's
    parameters train with net's gradients (check_graph_gradients)."""
    names = {i.name for i in model.graph.initializer}
    params = {k: v.detach().numpy().copy() for k, v in net.named_parameters() if k in names}

    def functional(x, **leaves):  # net with the leaves as its parameters
        return torch.func.functional_call(net, leaves, (x,))

    return check_graph_gradients(model, params, functional, tmp_path, rng, data={"x": x.numpy()})


def exported_by_dynamo(net, x, path: Path, **options) -> onnx.ModelProto:
    """torch module `net` called on x alone, exported by the dynamo exporter without its graph
    optimizer (README's recommended call); every parameter is an initializer of its own name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), path, dynamo=True, optimize=False, input_names=["x"], **options)
    model = onnx.load(path)
    assert {k for k, _ in net.named_parameters()} <= {i.name for i in model.graph.initializer}
    return model


def _export(net, x, opset: int, path: Path) -> onnx.ModelProto:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net,
            (x,),
            path,
            dynamo=False,
            opset_version=opset,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            input_names=["x"],
            output_names=["y"],
        )
    return onnx.load(path)


@dataclass
class ExportCase:
    """`act(net, h)` applied after a Linear layer (net also has a PReLU of 3 channels), exported by
    torch's TorchScript exporter at `opset`; `ops` must appear in the exported graph (so the case
    checks what it claims to)."""

    act: Callable
    opset: int
    ops: tuple
    width: int = 6

    def run(self, tmp_path, seed: int) -> float:
        torch.manual_seed(seed % 2**31)
        act = self.act

        class Net(torch.nn.Module):
            def __init__(self, width):
                super().__init__()
                self.fc = torch.nn.Linear(4, width)
                self.prelu = torch.nn.PReLU(3)

            def forward(self, x):
                return act(self, self.fc(x))

        net = Net(self.width)
        x = torch.randn(3, 4)
        model = _export(net, x, self.opset, tmp_path / "net.onnx")
        exported = {n.op_type for n in model.graph.node}
        assert set(self.ops) <= exported, f"export has {sorted(exported)}"
        return check_module_gradients(net, x, model, tmp_path, np.random.default_rng(seed))


# ---- the cases and the test ----


@dataclass
class OpCase:
    """One op node: its float operands (name -> value spec, or None for an omitted optional input)
    trainable unless named in `frozen`, loss = sum_i(Y_i * R_i), against torch_fn on the same
    operands; then, with `reference`, training_model.onnx under onnx.reference (`reference_ops`:
    forward ops it needs from us) against the C."""

    op: str
    inputs: dict
    torch_fn: Callable
    attrs: dict = field(default_factory=dict)
    consts: dict = field(default_factory=dict)  # name -> array, or None for an omitted input
    n_outputs: int = 1
    opset: int = 18
    frozen: tuple = ()
    reference: bool = True  # False: onnx.reference cannot run the forward op
    reference_ops: tuple = ()

    def run(self, tmp_path, seed: int) -> float:
        rng = np.random.default_rng(seed)
        inputs = {name: None if spec is None else values(spec, rng) for name, spec in self.inputs.items()}
        result = op_gradients(
            self.op,
            inputs,
            self.attrs,
            self.torch_fn,
            self.consts,
            tmp_path=tmp_path,
            opset=self.opset,
            n_outputs=self.n_outputs,
            seed=seed,
            frozen=self.frozen,
        )
        if not self.reference:
            return result.error
        present = {k: v for k, v in inputs.items() if v is not None}
        return max(
            result.error,
            check_reference(
                tmp_path / "artifacts", {**result.feeds, **present}, result.loss, result.grads, self.reference_ops
            ),
        )


@dataclass
class Check:
    """Any other check: fn(tmp_path, rng) -> the largest error it measured (it asserts each bound)."""

    fn: Callable

    def run(self, tmp_path, seed: int) -> float:
        return self.fn(tmp_path, np.random.default_rng(seed))


class Cases(list):
    """A test file's table: pytest params of cases, each with `run(tmp_path, seed) -> max error`.
    reference: whether this file's op cases also check training_model.onnx under onnx.reference."""

    def __init__(self, reference: bool = True):
        super().__init__()
        self.reference = reference

    def add(self, case_id: str, spec, marks=()) -> None:
        self.append(pytest.param(spec, id=case_id, marks=marks))

    def op(self, name: str, op: str, inputs: dict, torch_fn: Callable, **kwargs) -> None:
        """An OpCase, with the id '<op>-<name>'."""
        kwargs.setdefault("reference", self.reference)
        self.add(f"{op}-{name}", OpCase(op, inputs, torch_fn, **kwargs))

    def check(self, case_id: str, fn: Callable) -> None:
        self.add(case_id, Check(fn))


def run_case(spec, tmp_path, request) -> None:
    """The body of every gradient test: the case's generator is seeded by the test's id."""
    seed = zlib.crc32(request.node.callspec.id.encode())
    print(f"max |C - reference| = {spec.run(tmp_path, seed):.3g}")  # each tensor's bound is asserted inside


# ---- C functions against float64 ----


def kernel_library(directory: Path, roots: list[str], wrapper: str, cdef: str):
    """(ffi, lib): runtime_c's headers `roots` (with every header they include, in order) and
    `wrapper`, the C functions a test calls, built under C99's strict flags into a shared library."""
    cffi = pytest.importorskip("cffi")
    from edgetrain.runtime_c import headers

    runtime = Path(__file__).resolve().parents[1] / "runtime_c"
    needed = dict.fromkeys(h for root in roots for h in headers(root))
    source, lib = directory / "kernels.c", directory / "libkernels.so"
    source.write_text("".join((runtime / h).read_text() + "\n" for h in needed) + wrapper)
    strict = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off", "-O2"]
    subprocess.run(["gcc", *strict, "-shared", "-fPIC", str(source), "-o", str(lib)], check=True)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    return ffi, ffi.dlopen(str(lib))


def float_library(tmp_path, source: str, bodies: dict[str, str]) -> dict[str, Callable]:
    """`source` and one `void name(int n, const float *x, float *y) { body }` per entry of `bodies`,
    built under the strictest flags: {name: a function of a float32 array}."""
    cffi = pytest.importorskip("cffi")
    sig = "void {}(int n, const float *x, float *y)"
    prototypes = "".join(sig.format(name) + ";\n" for name in bodies)
    src, so = tmp_path / "functions.c", tmp_path / "libfunctions.so"
    src.write_text(source + "\n" + prototypes + "".join(sig.format(n) + " { " + b + " }\n" for n, b in bodies.items()))
    flags = [
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Wshadow",
        "-Wdouble-promotion",
        "-Wmissing-prototypes",
        "-Werror",
        "-pedantic",
        "-ffp-contract=off",
        "-O2",
        "-shared",
        "-fPIC",
    ]
    result = subprocess.run(["gcc", *flags, str(src), "-o", str(so)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    ffi = cffi.FFI()
    ffi.cdef(prototypes)
    lib = ffi.dlopen(str(so))

    def wrap(fn):
        def call(x):
            x = np.ascontiguousarray(x, np.float32)
            y = np.empty_like(x)
            fn(len(x), ffi.cast("float *", x.ctypes.data), ffi.cast("float *", y.ctypes.data))
            return y

        return call

    return {name: wrap(getattr(lib, name)) for name in bodies}


def ulps(got, want) -> np.ndarray:
    """|got - want| in units in the last place of want rounded to float32 (want in float64)."""
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
