"""RNN, GRU and LSTM: forward outputs and gradients through time of the generated C against torch
autograd, over directions, layouts, RNN's tanh and ReLU, linear_before_reset, present and absent
bias and initial states, and subsets of the outputs; and what the compiler refuses.

The torch side writes ONNX's recurrence out in torch ops (ONNX's gate order and bias layout; torch's
nn.GRU and nn.LSTM order their gates differently). Before it is trusted as the reference, each case
checks that recurrence against onnxruntime (layout 0; onnxruntime refuses layout 1) or onnx.reference
(layout 1) on the same operands. The cases are a table for gradcheck's harness, so each also runs
the generated training_model.onnx through onnx.reference with our ops' NumPy references
(RNNTraining, GRUGrad, ...) against the C.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from edgetrain.errors import EdgetrainError
from gradcheck import Cases, assert_close, build_op_model, check_reference, compile_module, op_gradients, run_case

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
STATES = {"RNN": ("initial_h",), "GRU": ("initial_h",), "LSTM": ("initial_h", "initial_c")}


def onnx_recurrence(op: str, attrs: dict, x, w, r, b=None, h0=None, c0=None):
    """ONNX's RNN / GRU / LSTM (default activations, or RNN's Relu) in torch ops: (Y, Y_h[, Y_c])."""
    layout, hidden = attrs.get("layout", 0), attrs["hidden_size"]
    direction, lbr = attrs.get("direction", "forward"), attrs.get("linear_before_reset", 0)
    if layout:  # compute in layout 0
        x = x.transpose(0, 1)
        h0, c0 = (None if s is None else s.transpose(0, 1) for s in (h0, c0))
    steps, batch = x.shape[:2]
    ys, hs, cs = [], [], []
    for d in range(w.shape[0]):
        zero = torch.zeros(batch, hidden)
        h = zero if h0 is None else h0[d]
        c = zero if c0 is None else c0[d]
        bias = torch.zeros(2 * GATES[op] * hidden) if b is None else b[d]
        wb, rb = bias.chunk(2)
        out = [None] * steps
        order = range(steps - 1, -1, -1) if direction == "reverse" or d == 1 else range(steps)
        for t in order:
            gx, gh = x[t] @ w[d].T + wb, h @ r[d].T + rb
            if op == "RNN":
                h = torch.relu(gx + gh) if attrs.get("activations") == ["Relu"] * w.shape[0] else torch.tanh(gx + gh)
            elif op == "GRU":
                (xz, xr, xh), (hz, hr, hh) = gx.chunk(3, 1), gh.chunk(3, 1)
                z, reset = torch.sigmoid(xz + hz), torch.sigmoid(xr + hr)
                if lbr:
                    cand = torch.tanh(xh + reset * hh)
                else:
                    cand = torch.tanh(xh + (reset * h) @ r[d][2 * hidden :].T + rb[2 * hidden :])
                h = (1 - z) * cand + z * h
            else:
                i, o, f, cand = (gx + gh).chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(cand)
                h = torch.sigmoid(o) * torch.tanh(c)
            out[t] = h
        ys.append(torch.stack(out))
        hs.append(h)
        cs.append(c)
    y, states = torch.stack(ys, 1), [torch.stack(hs), torch.stack(cs)][: len(STATES[op])]
    if layout:
        y, states = y.permute(2, 0, 1, 3), [s.transpose(0, 1) for s in states]
    return (y, *states)


@dataclass
class Case:
    op: str
    direction: str = "forward"
    layout: int = 0
    lbr: int = 0
    bias: bool = True
    states: tuple = ()  # which initial states are given
    full_lens: bool = False  # sequence_lens given, equal to the full length
    outputs: int = 0  # how many leading outputs the node names; 0: all
    dims: tuple = (3, 2, 4, 5)  # T, N, I, H
    relu: bool = False  # RNN's activations Relu (torch's nonlinearity='relu')

    def attrs(self) -> dict:
        attrs = {"hidden_size": self.dims[3], "direction": self.direction, "layout": self.layout}
        if self.relu:
            attrs["activations"] = ["Relu"] * (2 if self.direction == "bidirectional" else 1)
        return attrs | ({"linear_before_reset": self.lbr} if self.op == "GRU" else {})

    def operands(self, seed: int) -> tuple[dict, dict]:
        """(float operands in node-input order, None for omitted ones; constant operands)."""
        rng = np.random.default_rng(seed)
        (t, n, i, h), d, g = self.dims, 2 if self.direction == "bidirectional" else 1, GATES[self.op]
        state = (n, d, h) if self.layout else (d, n, h)
        inputs = {
            "X": rng.normal(size=(n, t, i) if self.layout else (t, n, i)),
            "W": rng.normal(scale=0.5, size=(d, g * h, i)),
            "R": rng.normal(scale=0.5, size=(d, g * h, h)),
            "B": rng.normal(scale=0.5, size=(d, 2 * g * h)) if self.bias else None,
        }
        if self.states:
            inputs["sequence_lens"] = None
            for name in STATES[self.op]:
                inputs[name] = rng.normal(size=state) if name in self.states else None
            while inputs[next(reversed(inputs))] is None:
                inputs.popitem()
        consts = {"sequence_lens": np.full(n, t, np.int32)} if self.full_lens else {}
        return {k: None if v is None else v.astype(np.float32) for k, v in inputs.items()}, consts

    def torch_fn(self, present: list[str]):
        def fn(*tensors):
            given = dict(zip(present, tensors))
            outs = onnx_recurrence(
                self.op,
                self.attrs(),
                given["X"],
                given["W"],
                given["R"],
                given.get("B"),
                given.get("initial_h"),
                given.get("initial_c"),
            )
            return outs[: self.outputs or len(outs)]

        return fn

    def run(self, tmp_path, seed: int) -> float:
        """The torch recurrence against ONNX's, then the C's loss and gradients against torch and the
        reference's against the C."""
        inputs, consts = self.operands(seed)
        n_outputs = self.outputs or 1 + len(STATES[self.op])
        present = {k: v for k, v in inputs.items() if v is not None}
        torch_fn = self.torch_fn(list(present))
        want = torch_fn(*[torch.from_numpy(v) for v in present.values()])
        for i, (got, ref) in enumerate(zip(_onnx_forward(self, inputs, consts, n_outputs), want)):
            assert_close(ref.detach().numpy(), got, f"torch recurrence output {i} vs ONNX runtime")
        result = op_gradients(
            self.op, inputs, self.attrs(), torch_fn, consts, tmp_path=tmp_path, n_outputs=n_outputs, seed=seed
        )
        return max(
            result.error,
            check_reference(tmp_path / "artifacts", {**result.feeds, **present}, result.loss, result.grads),
        )


def _id(case: Case) -> str:
    parts = (
        [case.op, case.direction, f"layout{case.layout}"]
        + (["lbr"] if case.lbr else [])
        + (["relu"] if case.relu else [])
        + ([] if case.bias else ["noB"])
        + list(case.states)
        + (["lens"] if case.full_lens else [])
        + ([f"{case.outputs}out"] if case.outputs else [])
    )
    return "-".join(parts)


CASES = Cases()
for _case in [
    Case("RNN", outputs=1),
    Case("RNN", relu=True, states=("initial_h",)),
    Case("RNN", "reverse", layout=1, bias=False, states=("initial_h",), dims=(4, 3, 2, 3)),
    Case("RNN", "bidirectional", relu=True, full_lens=True),
    Case("RNN", "bidirectional", layout=1, states=("initial_h",), outputs=1, dims=(14, 5, 17, 40)),
    Case("GRU", outputs=1),
    Case("GRU", lbr=1, states=("initial_h",)),
    Case("GRU", "reverse", layout=1, bias=False, states=("initial_h",), dims=(4, 3, 2, 3)),
    Case("GRU", "bidirectional", lbr=1, states=("initial_h",)),
    Case("GRU", "bidirectional", layout=1, full_lens=True, dims=(2, 1, 3, 4)),
    Case("GRU", "reverse", lbr=1, outputs=1, dims=(5, 2, 3, 2)),
    Case("GRU", "bidirectional", layout=1, lbr=1, states=("initial_h",), dims=(3, 2, 2, 3)),
    Case("LSTM", outputs=2),
    Case("LSTM", layout=1, states=("initial_h", "initial_c")),
    Case("LSTM", "reverse", bias=False, states=("initial_c",), dims=(4, 3, 2, 3)),
    Case("LSTM", "bidirectional", states=("initial_h", "initial_c")),
    Case("LSTM", "bidirectional", layout=1, full_lens=True, outputs=1, dims=(2, 3, 3, 2)),
    # Sizes that reach the weight gradients' register tiles, whole and partial, and their sums over
    # more steps (T * N = 70) than one block of depth.
    Case("GRU", "bidirectional", states=("initial_h",), dims=(14, 5, 19, 18)),
    Case("LSTM", "reverse", layout=1, states=("initial_h", "initial_c"), dims=(14, 5, 17, 20)),
    Case("LSTM", "reverse", layout=1, states=("initial_h",), dims=(5, 1, 2, 4)),
    # Input and hidden sizes in whole lane blocks: the forward's dot tiles, four gate rows by a pair
    # of batch rows and eight rows by the last odd one, over a run of gates and its remainder
    # (H = 40 is 32 + 8 hidden units).
    Case("GRU", "bidirectional", lbr=1, states=("initial_h",), dims=(4, 3, 8, 40)),
    Case("GRU", layout=1, dims=(3, 4, 16, 16)),
    Case("LSTM", "bidirectional", states=("initial_h", "initial_c"), dims=(3, 3, 16, 40)),
]:
    CASES.add(_id(_case), _case)


def _onnx_forward(case: Case, inputs: dict, consts: dict, n_outputs: int) -> list[np.ndarray]:
    """The node run by onnxruntime (layout 0) or onnx.reference (layout 1)."""
    model, names, _ = build_op_model(case.op, inputs, case.attrs(), consts, n_outputs)
    graph = helper.make_graph(
        [model.graph.node[0]],
        "forward",
        [],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None) for y in names],
        list(model.graph.initializer),
    )
    forward = helper.make_model(graph, opset_imports=list(model.opset_import))
    if case.layout == 0:
        forward.ir_version = 9
        return ort.InferenceSession(forward.SerializeToString()).run(None, {})
    return ReferenceEvaluator(forward).run(None, {})


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)


def _refused(tmp_path, op: str, attrs: dict, consts: dict | None, peephole: bool) -> str:
    t, n, i, h = 2, 1, 2, 3
    g = GATES[op]
    inputs = {"X": np.ones((t, n, i)), "W": np.ones((1, g * h, i)), "R": np.ones((1, g * h, h))}
    if peephole:
        inputs |= {"B": None, "sequence_lens": None, "initial_h": None, "initial_c": None, "P": np.ones((1, 3 * h))}
    inputs = {k: None if v is None else np.asarray(v, np.float32) for k, v in inputs.items()}
    model, _, _ = build_op_model(op, inputs, {"hidden_size": h, **attrs}, consts or {})
    model.graph.node[0].name = "rnn"
    with pytest.raises(EdgetrainError) as err:
        compile_module(model, tmp_path, loss=None)
    return str(err.value)


@pytest.mark.parametrize(
    "op, attrs, consts, peephole, message",
    [
        ("LSTM", {}, None, True, "LSTM node 'rnn': peepholes (input P) are not supported"),
        ("GRU", {"clip": 1.0}, None, False, "GRU node 'rnn': the clip attribute is not supported"),
        ("LSTM", {"input_forget": 1}, None, False, "LSTM node 'rnn': input_forget=1 is not supported"),
        (
            "GRU",
            {"activations": ["Relu", "Tanh"]},
            None,
            False,
            "GRU node 'rnn': activations ['relu', 'tanh'] are not supported",
        ),
        (
            "GRU",
            {},
            {"B": None, "sequence_lens": np.array([1], np.int32)},
            False,
            "GRU node 'rnn': sequence_lens other than the full length 2 are not supported",
        ),
    ],
)
def test_refused(op, attrs, consts, peephole, message, tmp_path):
    error = _refused(tmp_path, op, attrs, consts, peephole)
    assert message in error and "\n" not in error
