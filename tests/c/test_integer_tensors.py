"""Integer and bool tensors computed at run time (attention masks, position ids, label shifts,
dropout masks), which the generated C keeps as int32_t.

- Every op on integer or bool data: a one-node model compiled for inference, its outputs from the
  C against onnxruntime's, exactly (integers and bools) or to float32 rounding.
- A HuggingFace-style graph (an additive attention mask and position ids computed from an int64
  mask, labels shifted by Slice on int64 labels) trained one step: loss and gradients against
  torch autograd.
- The dropout pattern torch's dynamo exporter writes (random values -> Less -> Cast -> Mul).
- Out-of-range integers: ET_BAD_ARGUMENT from the C with nothing changed, ValueError from the API,
  and the model-level refusals (an int64 constant outside int32, ops without integer kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from edgetrain import api, artifacts
from edgetrain.errors import EdgetrainError
from edgetrain.host import load_library
from edgetrain.ir import Node
from edgetrain.ops import lookup

from gradcheck import assert_close, compile_module

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

F = torch.nn.functional
RNG = np.random.default_rng(7)


def i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def ints(shape, low=-9, high=10, dtype=np.int64) -> np.ndarray:
    return RNG.integers(low, high, size=shape).astype(dtype)


def floats(shape) -> np.ndarray:
    return RNG.normal(size=shape).astype(np.float32)


def bools(shape) -> np.ndarray:
    return RNG.random(shape) < 0.5


def _model(nodes, inputs: dict, consts: dict, opset: int = 18) -> onnx.ModelProto:
    """A model of `nodes` with `inputs` as graph inputs and `consts` as initializers; the outputs
    are the last node's, typed by onnx shape inference."""
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(o) for o in nodes[-1].output]
    graph = helper.make_graph(
        nodes, "integer", infos, outputs, [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _c_array(ffi, array: np.ndarray):
    return ffi.from_buffer("float[]" if array.dtype == np.float32 else "int32_t[]", array)


def run_c(model: onnx.ModelProto, feeds: list[np.ndarray], tmp_path) -> tuple[int, list[np.ndarray]]:
    """(status, outputs) of the generated C's infer: integer and bool data go in and come out as int32."""
    ffi, lib = load_library(artifacts.generate_inference(model, tmp_path / "c"))
    args = [np.ascontiguousarray(a if a.dtype == np.float32 else a.astype(np.int32)) for a in feeds]
    outs = [
        np.zeros(
            [d.dim_value for d in o.type.tensor_type.shape.dim],
            np.float32 if o.type.tensor_type.elem_type == TP.FLOAT else np.int32,
        )
        for o in model.graph.output
    ]
    status = lib.model_infer(lib.MODEL_MAX_BATCH, *[_c_array(ffi, a) for a in args + outs])
    return status, outs


def run_ort(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: a for i, a in zip(model.graph.input, feeds)})


# ---- one node on integer or bool data against onnxruntime ----


@dataclass
class OpCase:
    op: str
    inputs: dict  # name -> array, in node-input order; a name in `consts` is an initializer
    attrs: dict = field(default_factory=dict)
    consts: tuple = ()

    def model(self) -> tuple[onnx.ModelProto, list[np.ndarray]]:
        node = helper.make_node(self.op, list(self.inputs), ["result"], **self.attrs)
        runtime = {n: a for n, a in self.inputs.items() if n not in self.consts}
        return _model([node], runtime, {n: self.inputs[n] for n in self.consts}), list(runtime.values())


NAN, INF = np.float32(np.nan), np.float32(np.inf)
TRUNCATED = np.array([[-2.7, -0.5, 0.0, 0.5, 2.7, 1e3], [-1e3, 7.99, -7.99, 65537.9, -3.0, 3.0]], np.float32)
SPECIAL = np.array([[NAN, 1.0, -INF], [INF, -0.0, 2.5]], np.float32)

OPS = {
    # moved, not computed
    "Reshape-int64": OpCase("Reshape", {"X": ints((2, 6)), "shape": i64(3, 4)}, consts=("shape",)),
    "Flatten-bool": OpCase("Flatten", {"X": bools((2, 3, 2))}, {"axis": 2}),
    "Squeeze-int32": OpCase("Squeeze", {"X": ints((1, 3, 1), dtype=np.int32), "axes": i64(0, 2)}, consts=("axes",)),
    "Unsqueeze-int64": OpCase("Unsqueeze", {"X": ints((3,)), "axes": i64(0, -1)}, consts=("axes",)),
    "Identity-int64": OpCase("Identity", {"X": ints((2, 3))}),
    # HuggingFace's label shift: pad the labels with ignore_index, then slice
    "Pad-int64-constant": OpCase(
        "Pad", {"X": ints((2, 5)), "pads": i64(0, 0, 0, 1), "value": i64(-100)}, consts=("pads", "value")
    ),
    "Pad-bool-edge": OpCase("Pad", {"X": bools((2, 3)), "pads": i64(1, 0, 0, 2)}, {"mode": "edge"}, ("pads",)),
    "Slice-int64-negative-steps": OpCase(
        "Slice",
        {"X": ints((4, 5)), "starts": i64(3, -1), "ends": i64(0, -6), "axes": i64(0, 1), "steps": i64(-1, -2)},
        consts=("starts", "ends", "axes", "steps"),
    ),
    "Concat-int64-with-constant": OpCase("Concat", {"A": ints((2, 3)), "B": ints((2, 1))}, {"axis": 1}, ("B",)),
    "Concat-bool": OpCase("Concat", {"A": bools((1, 3)), "B": bools((2, 3))}, {"axis": 0}),
    "Expand-bool": OpCase("Expand", {"X": bools((1, 3)), "shape": i64(2, 1, 3)}, consts=("shape",)),
    # a masked autoencoder's shuffle repeats its kept ids over the hidden size
    "Tile-int64": OpCase("Tile", {"X": ints((2, 3, 1)), "repeats": i64(1, 2, 4)}, consts=("repeats",)),
    "Tile-bool": OpCase("Tile", {"X": bools((3,)), "repeats": i64(2)}, consts=("repeats",)),
    "Transpose-int32": OpCase("Transpose", {"X": ints((2, 3, 4), dtype=np.int32)}, {"perm": [2, 0, 1]}),
    "Gather-int64-runtime-indices": OpCase("Gather", {"X": ints((5, 3)), "I": i64(4, -1, 0, 2).reshape(2, 2)}),
    "Gather-bool-constant-indices": OpCase("Gather", {"X": bools((2, 4)), "I": i64(3, -4)}, {"axis": 1}, ("I",)),
    "Gather-float-computed-indices": OpCase("Gather", {"X": floats((6, 2)), "I": ints((3,), 0, 6, np.int32)}),
    "Where-int64": OpCase("Where", {"C": bools((2, 3)), "X": ints((2, 3)), "Y": ints((3,))}),
    "Where-float-runtime-condition": OpCase("Where", {"C": bools((3, 1)), "X": floats((3, 4)), "Y": floats(())}),
    "Where-int32-constant-condition": OpCase(
        "Where", {"C": bools((4,)), "X": ints((2, 4), dtype=np.int32), "Y": ints((2, 1), dtype=np.int32)}, consts=("C",)
    ),
    # Cast in every direction; float -> integer truncates toward zero
    "Cast-float-int64": OpCase("Cast", {"X": TRUNCATED}, {"to": TP.INT64}),
    "Cast-float-int32": OpCase("Cast", {"X": TRUNCATED}, {"to": TP.INT32}),
    "Cast-float-bool": OpCase("Cast", {"X": SPECIAL}, {"to": TP.BOOL}),
    "Cast-int64-float": OpCase(
        "Cast", {"X": np.array([[-3, 0, 2**24 + 1], [2**31 - 1, -(2**31), 7]], np.int64)}, {"to": TP.FLOAT}
    ),
    "Cast-bool-float": OpCase("Cast", {"X": bools((2, 3))}, {"to": TP.FLOAT}),
    "Cast-int64-bool": OpCase("Cast", {"X": ints((2, 3), -2, 3)}, {"to": TP.BOOL}),
    "Cast-bool-int64": OpCase("Cast", {"X": bools((2, 3))}, {"to": TP.INT64}),
    "Cast-int32-int64": OpCase("Cast", {"X": ints((2, 3), dtype=np.int32)}, {"to": TP.INT64}),
    "Cast-int64-int32": OpCase("Cast", {"X": ints((2, 3))}, {"to": TP.INT32}),
    "Cast-float-float": OpCase("Cast", {"X": SPECIAL}, {"to": TP.FLOAT}),
    # comparisons (float or integer operands, bool result) and logic
    "Equal-int64-bcast": OpCase("Equal", {"A": ints((2, 3), 0, 3), "B": ints((3,), 0, 3)}),
    "Equal-float": OpCase(
        "Equal", {"A": np.array([1.0, NAN, -0.0], np.float32), "B": np.array([1.0, NAN, 0.0], np.float32)}
    ),
    "Equal-bool": OpCase("Equal", {"A": bools((2, 3)), "B": bools((2, 3))}),
    "Less-float-nan": OpCase("Less", {"A": SPECIAL, "B": np.array([0.5, 2.0, -INF], np.float32)}),
    "Greater-int32": OpCase("Greater", {"A": ints((2, 3), dtype=np.int32), "B": ints((2, 1), dtype=np.int32)}),
    "LessOrEqual-int64": OpCase("LessOrEqual", {"A": ints((3, 4), -2, 3), "B": ints((4,), -2, 3)}),
    "GreaterOrEqual-float": OpCase("GreaterOrEqual", {"A": floats((2, 3)).round(), "B": floats((1, 3)).round()}),
    "Not": OpCase("Not", {"X": bools((2, 3))}),
    "And-bcast": OpCase("And", {"A": bools((2, 3)), "B": bools((3,))}),
    "Or": OpCase("Or", {"A": bools((2, 3)), "B": bools((2, 3))}),
    "Xor-bcast": OpCase("Xor", {"A": bools((2, 1)), "B": bools((1, 3))}),
    "IsNaN": OpCase("IsNaN", {"X": SPECIAL}),
    "IsInf": OpCase("IsInf", {"X": SPECIAL}),
    "IsInf-positive-only": OpCase("IsInf", {"X": SPECIAL}, {"detect_negative": 0}),
    # integer arithmetic
    "Add-int64-bcast": OpCase("Add", {"A": ints((2, 3)), "B": ints((3,))}),
    "Sub-int32-bcast": OpCase("Sub", {"A": ints((2, 3), dtype=np.int32), "B": ints((2, 1), dtype=np.int32)}),
    "Mul-int64-constant": OpCase("Mul", {"A": ints((2, 3)), "B": i64(-2)}, consts=("B",)),
    "Neg-int32": OpCase("Neg", {"X": ints((2, 3), dtype=np.int32)}),
    # DeBERTa clamps its relative positions; a bound beyond int32 clips nothing more
    "Clip-int64": OpCase("Clip", {"X": ints((3, 4)), "lo": i64(-3), "hi": i64(5)}, consts=("lo", "hi")),
    "Clip-int64-wide-bounds": OpCase(
        "Clip", {"X": ints((2, 3)), "lo": i64(-(2**40)), "hi": i64(2**40)}, consts=("lo", "hi")
    ),
    "Clip-int32-min-above-max": OpCase(
        "Clip",
        {"X": ints((2, 3), dtype=np.int32), "lo": np.array(4, np.int32), "hi": np.array(-2, np.int32)},
        consts=("lo", "hi"),
    ),
    # T5's relative position buckets: Min of int64 positions and the last bucket
    "Min-int64-bcast": OpCase("Min", {"A": ints((2, 3)), "B": ints((3,))}),
    "Max-int32-three": OpCase(
        "Max", {"A": ints((2, 3), dtype=np.int32), "B": ints((1, 3), dtype=np.int32), "C": ints((2, 1), dtype=np.int32)}
    ),
    "Min-int64-one": OpCase("Min", {"A": ints((2, 3))}),
    "CumSum-int64": OpCase("CumSum", {"X": ints((2, 5)), "axis": i64(1)}, consts=("axis",)),
    "CumSum-int64-exclusive": OpCase("CumSum", {"X": ints((2, 5)), "axis": i64(-1)}, {"exclusive": 1}, ("axis",)),
    "CumSum-int32-reverse": OpCase(
        "CumSum", {"X": ints((3, 4), dtype=np.int32), "axis": np.array(0, np.int32)}, {"reverse": 1}, ("axis",)
    ),
    "CumSum-int64-exclusive-reverse": OpCase(
        "CumSum", {"X": ints((2, 3, 4)), "axis": i64(1)}, {"exclusive": 1, "reverse": 1}, ("axis",)
    ),
    "CumSum-float": OpCase("CumSum", {"X": floats((3, 4)), "axis": i64(0)}, consts=("axis",)),
    "ArgMax-float-ties": OpCase(
        "ArgMax", {"X": np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)}, {"axis": 1, "keepdims": 0}
    ),
    "ArgMax-float-ties-last": OpCase(
        "ArgMax", {"X": np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)}, {"axis": 1, "select_last_index": 1}
    ),
    "ArgMin-int64": OpCase("ArgMin", {"X": ints((3, 4, 2), -3, 3)}, {"axis": -2}),
    "ArgMax-int32-axis0": OpCase("ArgMax", {"X": ints((4, 3), dtype=np.int32)}),
    # HuggingFace's shift of labels into decoder ids: ids[:, 1:] = labels[:, :-1]; ids[:, 0] = start
    "ScatterND-int64-slices": OpCase(
        "ScatterND", {"X": ints((3, 4)), "I": i64(2, 0).reshape(2, 1), "U": ints((2, 4))}, consts=("I",)
    ),
    "ScatterND-int64-runtime-indices": OpCase(
        "ScatterND", {"X": ints((2, 3)), "I": i64(1, 2, 0, -1).reshape(2, 2), "U": ints((2,))}
    ),
    "ScatterElements-int64-axis1": OpCase(
        "ScatterElements", {"X": ints((2, 4)), "I": i64(3, 0, 1, 2).reshape(2, 2), "U": ints((2, 2))}, {"axis": 1}
    ),
    "ScatterElements-bool": OpCase("ScatterElements", {"X": bools((4,)), "I": i64(-1, 0), "U": bools((2,))}),
    # mBART counts the tokens that are not padding
    "ReduceSum-int64-axis1": OpCase("ReduceSum", {"X": ints((3, 5)), "axes": i64(1)}, consts=("axes",)),
    "ReduceSum-int32-all-keepdims": OpCase("ReduceSum", {"X": ints((2, 3, 2), dtype=np.int32)}),
    "ReduceSum-int64-middle-axis": OpCase(
        "ReduceSum", {"X": ints((2, 3, 4), 0, 2), "axes": i64(-2)}, {"keepdims": 0}, ("axes",)
    ),
}


@pytest.mark.parametrize("case", OPS.values(), ids=OPS.keys())
def test_op_matches_onnxruntime(case, tmp_path):
    model, feeds = case.model()
    want = run_ort(model, feeds)
    status, got = run_c(model, feeds, tmp_path)
    assert status == 0
    for ours, theirs in zip(got, want, strict=True):
        assert ours.shape == theirs.shape
        if theirs.dtype == np.float32:
            np.testing.assert_array_equal(ours, theirs)  # moved or cast: every bit as onnxruntime's
        else:
            np.testing.assert_array_equal(ours, theirs.astype(np.int64))


def test_range_with_float_bounds_matches_onnxruntime(tmp_path):
    """Float bounds held in initializers reach Range's kernel (integer ones fold in the frontend):
    start + k * delta accumulated as ONNX Runtime does, to the bit."""
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    consts = {"start": np.float32(0.1), "limit": np.float32(3.0), "delta": np.float32(0.3)}
    model = _model(nodes, {"x": floats((10,))}, consts)
    feeds = [floats((10,))]
    status, got = run_c(model, feeds, tmp_path)
    assert status == 0
    np.testing.assert_array_equal(got[0], run_ort(model, feeds)[0])


# ---- a HuggingFace-style graph, trained one step against torch ----

B, T, D, C = 2, 5, 4, 3
IGNORE = -100


def hf_model() -> onnx.ModelProto:
    """x [B,T,D] + position embeddings P[position ids] -> one attention layer with an additive mask
    -> logits [B,T,C]; loss = cross entropy of logits[:, :-1] against labels[:, 1:], padding ignored.
    Everything about the mask, positions and labels is int64 or bool, computed at run time:
      mask_add = (1 - float(mask)) * -1e4                       (Cast, Sub, Mul, Unsqueeze)
      positions = where(mask == 0, 1, cumsum(mask, 1) - 1)      (CumSum, Sub, Equal, Where, Gather)
      targets = where(not bool(mask[:, 1:]), -100, labels[:, 1:]) (Slice, Cast, Not, Where)
    A second output, the position ids, comes from infer as int64."""
    n = helper.make_node
    nodes = [
        n("Cast", ["mask"], ["mask_f"], to=TP.FLOAT),
        n("Sub", ["one_f", "mask_f"], ["inv"]),
        n("Mul", ["inv", "big_neg"], ["mask_add"]),
        n("Unsqueeze", ["mask_add", "axis1"], ["mask_add3"]),
        n("CumSum", ["mask", "axis1"], ["cum"]),
        n("Sub", ["cum", "one_i"], ["pos_raw"]),
        n("Equal", ["mask", "zero_i"], ["is_pad"]),
        n("Where", ["is_pad", "one_i", "pos_raw"], ["positions"]),
        n("Gather", ["P", "positions"], ["pe"]),
        n("Add", ["x", "pe"], ["h"]),
        n("MatMul", ["h", "Wq"], ["q"]),
        n("Transpose", ["h"], ["hT"], perm=[0, 2, 1]),
        n("MatMul", ["q", "hT"], ["scores"]),
        n("Add", ["scores", "mask_add3"], ["masked"]),
        n("Softmax", ["masked"], ["attn"], axis=-1),
        n("MatMul", ["attn", "h"], ["ctx"]),
        n("MatMul", ["ctx", "W2"], ["logits"]),
        n("Slice", ["logits", "s0", "e_last", "axis1"], ["lg"]),
        n("Transpose", ["lg"], ["lgT"], perm=[0, 2, 1]),
        n("Slice", ["labels", "s1", "e_end", "axis1"], ["lab"]),
        n("Slice", ["mask", "s1", "e_end", "axis1"], ["keep"]),
        n("Cast", ["keep"], ["keep_b"], to=TP.BOOL),
        n("Not", ["keep_b"], ["pad"]),
        n("Where", ["pad", "ignore", "lab"], ["targets"]),
        n("SoftmaxCrossEntropyLoss", ["lgT", "targets"], ["loss"], ignore_index=IGNORE),
    ]
    rng = np.random.default_rng(3)
    inits = {"P": rng.normal(size=(T, D)), "Wq": rng.normal(size=(D, D)) * 0.5, "W2": rng.normal(size=(D, C))}
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    inits |= {
        "one_f": np.float32(1),
        "big_neg": np.float32(-1e4),
        "axis1": i64(1),
        "one_i": i64(1)[0],
        "zero_i": i64(0)[0],
        "s0": i64(0),
        "e_last": i64(-1),
        "s1": i64(1),
        "e_end": i64(T),
        "ignore": i64(IGNORE)[0],
    }
    inputs = [
        helper.make_tensor_value_info("x", TP.FLOAT, [B, T, D]),
        helper.make_tensor_value_info("mask", TP.INT64, [B, T]),
        helper.make_tensor_value_info("labels", TP.INT64, [B, T]),
    ]
    outputs = [
        helper.make_tensor_value_info("loss", TP.FLOAT, []),
        helper.make_tensor_value_info("positions", TP.INT64, [B, T]),
    ]
    graph = helper.make_graph(
        nodes, "hf", inputs, outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def hf_torch(params: dict, x, mask, labels):
    mask_t = torch.from_numpy(mask)
    mask_add = ((1 - mask_t.float()) * -1e4).unsqueeze(1)
    positions = torch.where(mask_t == 0, 1, torch.cumsum(mask_t, 1) - 1)
    h = torch.from_numpy(x) + params["P"][positions]
    scores = (h @ params["Wq"]) @ h.transpose(1, 2) + mask_add
    logits = torch.softmax(scores, -1) @ h @ params["W2"]
    targets = torch.where(mask_t[:, 1:] == 0, IGNORE, torch.from_numpy(labels)[:, 1:])
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, ignore_index=IGNORE), positions


def hf_data():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64)  # the second sequence is padded
    labels = rng.integers(0, C, size=(B, T)).astype(np.int64)
    return x, mask, labels


def test_hf_style_graph_trains_like_torch(tmp_path):
    model = hf_model()
    module, state = compile_module(model, tmp_path, loss=None, learning_rate=0.1)
    x, mask, labels = hf_data()
    loss = module(x, mask, labels)

    params = {
        k: torch.tensor(numpy_helper.to_array(i), requires_grad=True)
        for k, i in ((i.name, i) for i in model.graph.initializer)
        if k in ("P", "Wq", "W2")
    }
    want, positions = hf_torch(params, x, mask, labels)
    want.backward()
    assert_close(loss, want.detach().numpy(), "loss")
    for name, leaf in params.items():
        assert_close(state.parameters[name].grad, leaf.grad.numpy(), f"d loss / d {name}")

    before = {k: state.parameters[k].data.copy() for k in params}
    api.Optimizer(tmp_path / "artifacts" / "optimizer_model.onnx", module).step()
    for name, leaf in params.items():  # one SGD step
        assert_close(state.parameters[name].data, before[name] - 0.1 * leaf.grad.numpy(), f"{name} after a step")

    module.eval()
    out_loss, out_positions = module.infer(x, mask, labels)
    assert out_positions.dtype == np.int64
    np.testing.assert_array_equal(out_positions, positions.numpy())


def test_out_of_range_integers_change_nothing(tmp_path):
    module, state = compile_module(hf_model(), tmp_path, loss=None)
    x, mask, labels = hf_data()
    module(x, mask, labels)
    grads = {k: p.grad.copy() for k, p in state.parameters.items()}
    weights = module.get_contiguous_parameters()

    too_long = mask.copy()
    too_long[0, 2] = 4  # cumsum reaches T: a position id past the embedding table (Gather's check)
    bad_label = labels.copy()
    bad_label[1, 1] = C  # a class that does not exist (the loss's check)
    for m, lab in ((too_long, labels), (mask, bad_label)):
        with pytest.raises(ValueError, match="out of range"):
            module(x, m, lab)
    with pytest.raises(ValueError, match="'mask' has values outside the int32 range"):
        module(x, mask * 2**40, labels)
    for name, grad in grads.items():
        np.testing.assert_array_equal(state.parameters[name].grad, grad)
    np.testing.assert_array_equal(module.get_contiguous_parameters(), weights)


def test_out_of_range_index_is_bad_argument(tmp_path):
    """Gather of an int64 model input: status ET_BAD_ARGUMENT (1), and the outputs are not written."""
    model, _ = OpCase("Gather", {"X": ints((5, 3)), "I": i64(0, 1)}).model()
    data = ints((5, 3))
    status, outs = run_c(model, [data, i64(0, 5)], tmp_path)
    assert status == 1 and not outs[0].any()
    status, outs = run_c(model, [data, i64(-5, 4)], tmp_path)
    assert status == 0 and np.array_equal(outs[0], data[[0, 4]])


# ---- dropout as torch's dynamo exporter writes it ----

P_DROP = 0.25


def dropout_model(random_op: bool) -> onnx.ModelProto:
    """loss = sum(R * (x @ W) * float(u < 1 - p) / (1 - p)), u from RandomUniformLike or a model
    input (the same pattern with the random values fed in)."""
    n = helper.make_node
    nodes = ([n("RandomUniformLike", ["h"], ["u"])] if random_op else []) + [
        n("Less", ["u", "keep"], ["kept"]),
        n("Cast", ["kept"], ["mask"], to=TP.FLOAT),
        n("Mul", ["h", "mask"], ["hm"]),
        n("Mul", ["hm", "scale"], ["y"]),
        n("Mul", ["y", "R"], ["yr"]),
        n("ReduceSum", ["yr"], ["loss"], keepdims=0),
    ]
    nodes.insert(0, n("MatMul", ["x", "W"], ["h"]))
    size = 16
    inputs = [helper.make_tensor_value_info(k, TP.FLOAT, [size, size]) for k in ["x", "R"] + ["u"] * (not random_op)]
    inits = {
        "W": np.random.default_rng(5).normal(size=(size, size)).astype(np.float32),
        "keep": np.float32(1 - P_DROP),
        "scale": np.float32(1 / (1 - P_DROP)),
    }
    graph = helper.make_graph(
        nodes,
        "dropout",
        inputs,
        [helper.make_tensor_value_info("loss", TP.FLOAT, [])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_dynamo_dropout_pattern_with_given_random_values(tmp_path):
    model = dropout_model(random_op=False)
    module, state = compile_module(model, tmp_path, loss=None)
    rng = np.random.default_rng(9)
    x, r, u = (
        rng.normal(size=(16, 16)).astype(np.float32),
        rng.normal(size=(16, 16)).astype(np.float32),
        rng.random((16, 16)).astype(np.float32),
    )
    loss = module(x, r, u)
    w = torch.tensor(numpy_helper.to_array(model.graph.initializer[0]), requires_grad=True)
    mask = (torch.from_numpy(u) < torch.tensor(np.float32(1 - P_DROP))).float()
    want = (((torch.from_numpy(x) @ w) * mask * torch.tensor(np.float32(1 / (1 - P_DROP)))) * torch.from_numpy(r)).sum()
    want.backward()
    assert 0 < mask.mean() < 1
    assert_close(loss, want.detach().numpy(), "loss")
    assert_close(state.parameters["W"].grad, w.grad.numpy(), "d loss / d W")


@pytest.mark.skipif(lookup(Node("RandomUniformLike", (), ())) is None, reason="RandomUniformLike is not supported yet")
def test_dynamo_dropout_pattern_with_random_uniform_like(tmp_path):
    """With x the identity, d loss / d W = R * mask / (1 - p): the mask the C drew, every element
    0 or 1, about 1 - p of them kept."""
    module, state = compile_module(dropout_model(random_op=True), tmp_path, loss=None)
    r = np.random.default_rng(10).uniform(0.5, 1.5, size=(16, 16)).astype(np.float32)
    module(np.eye(16, dtype=np.float32), r)
    mask = state.parameters["W"].grad / (r / np.float32(1 - P_DROP))
    assert np.all((np.abs(mask) < 1e-6) | (np.abs(mask - 1) < 1e-6))
    assert 0.6 < np.mean(mask) < 0.9


# ---- refusals, in one line naming the tensor ----


def _refusal(model, tmp_path) -> str:
    with pytest.raises(EdgetrainError) as refused:
        artifacts.generate_inference(model, tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_int64_constant_outside_int32_is_refused(tmp_path):
    model, _ = OpCase("Add", {"A": ints((2, 3)), "big": i64(2**40, 1, 2)}, consts=("big",)).model()
    assert "constant 'big' holds 1099511627776, outside int32's range" in _refusal(model, tmp_path)


def test_integer_data_for_a_float_only_op_is_refused(tmp_path):
    model, _ = OpCase("Div", {"A": ints((2, 3)), "B": ints((2, 3))}).model()
    assert "node 'Div_0' (Div) reads int64 'A' at input 0; Div computes float32 tensors only" in _refusal(
        model, tmp_path
    )


def test_float_indices_are_refused(tmp_path):
    """Class labels as probabilities (torch exports cross-entropy with soft targets so): not valid ONNX,
    and C that reads them as indices would not compile."""
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["X", "T"], ["loss"], name="ce")]
    model = _model(nodes, {"X": np.zeros((2, 3), np.float32), "T": np.zeros((2, 3), np.float32)}, {})
    assert (
        "node 'ce' (SoftmaxCrossEntropyLoss) reads float32 'T' at input 1; SoftmaxCrossEntropyLoss takes integer "
        in (_refusal(model, tmp_path))
    )


def test_integer_scatter_that_computes_is_refused(tmp_path):
    """Integer data is moved, not computed: a scatter that adds into it is refused."""
    case = OpCase("ScatterElements", {"X": ints((4,)), "I": i64(1, 2), "U": ints((2,))}, {"reduction": "add"})
    assert "integer data is scattered with reduction 'none' only, not 'add'" in _refusal(case.model()[0], tmp_path)


def test_runtime_range_is_refused_naming_its_bound(tmp_path):
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["Y"])]
    model = _model(nodes, {"limit": i64(5)[0]}, {"start": i64(0)[0], "delta": i64(1)[0]})
    assert "needs input 1 'limit' to be a constant" in _refusal(model, tmp_path)


def test_float64_tensor_is_refused(tmp_path):
    nodes = [helper.make_node("Cast", ["X"], ["D"], to=TP.DOUBLE), helper.make_node("Cast", ["D"], ["Y"], to=TP.FLOAT)]
    model = _model(nodes, {"X": floats((2, 3))}, {})
    assert (
        "node 'Cast_0' (Cast) produces float64 'D'; only float32, int32, int64 and bool tensors are computed"
        in _refusal(model, tmp_path)
    )
