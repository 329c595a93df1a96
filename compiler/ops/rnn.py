"""RNN, GRU and LSTM (ONNX semantics): forward, reverse and bidirectional, both layouts, optional
initial states, every output; the default activations (and ReLU for RNN, torch's
nonlinearity='relu'), no peepholes and no clipping.

Both graphs run the op with every output named, because the kernels use Y, Y_h (and Y_c) as
their working memory. The training graph runs our RNNTraining / GRUTraining / LSTMTraining
instead, which takes the same inputs and also outputs the gates (and LSTM cell states; an RNN's
new state) of every step; RNNGrad / GRUGrad / LSTMGrad backpropagate through time from those and
Y, carrying the gradient of the hidden (and cell) state from step to step in the outputs that end
as the initial states' gradients. They overwrite the gates in `saved` with the gates' gradients,
from which the weight gradients are then matrix products: `saved` is made for them alone and read
by nothing after them.

The kernels run one direction per call, on slices of the tensors (registry.Tensor offsets) and
with the strides that ONNX's layouts and bidirectional interleaving give (runtime_c/et_rnn.h).
Our six ops carry NumPy references, so onnx.reference can run training_model.onnx.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN, Node
from .norm import _f32
from .registry import Tensor, op

SEQUENCE_LENS = 4
INITIAL_STATES = 5  # initial_h, then LSTM's initial_c


@dataclass(frozen=True)
class _Family:
    op: str
    gates: int
    saved: int  # values kept per hidden unit, step and batch row for the backward pass
    states: int  # h, or h and c
    activations: tuple[str, ...]
    # Other activations the kernels compute, one per direction, chosen by their flag (its index + 1).
    other_activations: tuple[tuple[str, ...], ...] = ()

    def forward_kernel(self) -> str:
        return f"et_{self.op.lower()}_f32"

    def grad_kernel(self) -> str:
        return f"et_{self.op.lower()}_grad_f32"

    def activation_flag(self, attrs, directions: int) -> int | None:
        """0 for the default activations, i + 1 for other_activations[i], None for others."""
        named = _activations(attrs)
        if named is None:
            return 0
        options = [self.activations, *self.other_activations]
        return next((i for i, option in enumerate(options) if named == option * directions), None)

    def flag(self, attrs) -> int:
        """The kernels' attribute argument: GRU's linear_before_reset, RNN's ReLU (0 for LSTM)."""
        if self.op == "GRU":
            return int(attrs.get("linear_before_reset", 0))
        return self.activation_flag(attrs, _direction_count(attrs)) or 0

    def flags(self, node) -> list[int]:
        """The kernels' attribute arguments before the tensors."""
        return [self.flag(node.attrs)] if self.op != "LSTM" else []


RNN = _Family("RNN", gates=1, saved=1, states=1, activations=("tanh",), other_activations=(("relu",),))
GRU = _Family("GRU", gates=3, saved=4, states=1, activations=("sigmoid", "tanh"))
LSTM = _Family("LSTM", gates=4, saved=5, states=2, activations=("sigmoid", "tanh", "tanh"))


def _activations(attrs) -> tuple[str, ...] | None:
    given = attrs.get("activations")
    return None if given is None else tuple((a.decode() if isinstance(a, bytes) else a).lower() for a in given)


def _direction(attrs) -> str:
    direction = attrs.get("direction", "forward")
    return direction.decode() if isinstance(direction, bytes) else direction


def _direction_count(attrs) -> int:
    return 2 if _direction(attrs) == "bidirectional" else 1


@dataclass(frozen=True)
class _Dims:
    T: int
    N: int
    I: int
    H: int
    D: int
    layout: int
    direction: str

    @staticmethod
    def of(x_shape, node) -> _Dims:
        layout = int(node.attr("layout", 0))
        t, n, i = (x_shape[1], x_shape[0], x_shape[2]) if layout else x_shape
        return _Dims(
            t, n, i, int(node.attr("hidden_size")), _direction_count(node.attrs), layout, _direction(node.attrs)
        )

    def y_shape(self) -> tuple[int, ...]:
        return (self.N, self.T, self.D, self.H) if self.layout else (self.T, self.D, self.N, self.H)

    def state_shape(self) -> tuple[int, ...]:
        return (self.N, self.D, self.H) if self.layout else (self.D, self.N, self.H)

    def geometry(self, d: int) -> tuple[int, ...]:
        """The kernels' {T, N, I, H, reverse, x_t, x_b, y_t, y_b, s_b} for direction d."""
        T, N, I, H, D = self.T, self.N, self.I, self.H, self.D
        reverse = int(_reverse(self.direction, d))
        if self.layout:
            return (T, N, I, H, reverse, I, T * I, D * H, T * D * H, D * H)
        return (T, N, I, H, reverse, N * I, I, D * N * H, H, H)

    def state_offset(self, d: int) -> int:
        """Where direction d starts in Y, Y_h, Y_c and the initial states (both layouts)."""
        return d * (self.H if self.layout else self.N * self.H)


def _reverse(direction: str, d: int) -> bool:
    """Whether direction d runs from the last step to the first."""
    return direction == "reverse" or d == 1


class _Slices:
    """Direction d's part of each operand, as kernel arguments (None for an absent operand)."""

    def __init__(self, fam: _Family, dims: _Dims, d: int):
        g, h = fam.gates, dims.H
        self.offsets = {
            "W": d * g * h * dims.I,
            "R": d * g * h * h,
            "B": d * 2 * g * h,
            "state": dims.state_offset(d),
            "saved": d * dims.T * dims.N * fam.saved * h,
        }

    def __call__(self, name: str, kind: str):
        return Tensor(name, self.offsets[kind]) if name else None


def _given(node: Node, slot: int) -> str:
    return node.inputs[slot] if slot < len(node.inputs) else ""


def _initial_states(fam: _Family, node: Node) -> list[str]:
    return [_given(node, INITIAL_STATES + i) for i in range(fam.states)]


def _check(fam: _Family, graph, node: Node, dims: _Dims) -> None:
    """Refuse, naming the node, what the kernels do not compute."""
    where = f"{fam.op} node '{node.name}'"
    if fam.activation_flag(node.attrs, dims.D) is None:
        supported = " or ".join(str(list(a)) for a in (fam.activations, *fam.other_activations))
        raise EdgetrainError(
            f"{where}: activations {list(_activations(node.attrs) or ())} are not supported; only {supported}"
        )
    if node.attr("clip") is not None:
        raise EdgetrainError(f"{where}: the clip attribute is not supported")
    if node.attr("input_forget", 0):
        raise EdgetrainError(f"{where}: input_forget=1 is not supported")
    if _given(node, 7):
        raise EdgetrainError(f"{where}: peepholes (input P) are not supported")
    lens = _given(node, SEQUENCE_LENS)
    if lens and not np.all(graph.constants[lens] == dims.T):
        raise EdgetrainError(f"{where}: sequence_lens other than the full length {dims.T} are not supported")
    # The kernels read each operand at the offsets these shapes give: an operand of another shape
    # (an LSTM with a projection, exported as one without it) would be read as something else.
    gh = fam.gates * dims.H
    expected = {1: (dims.D, gh, dims.I), 2: (dims.D, gh, dims.H), 3: (dims.D, 2 * gh)}
    expected.update((INITIAL_STATES + i, dims.state_shape()) for i in range(fam.states))
    for slot, shape in expected.items():
        name = _given(node, slot)
        if name and tuple(graph.shape(name)) != shape:
            raise EdgetrainError(
                f"{where}: input {slot} '{name}' has shape {list(graph.shape(name))}, where hidden_size "
                f"{dims.H} and {dims.D} direction(s) make it {list(shape)}"
            )


def _variant(fam: _Family, graph, node: Node, training: bool) -> Node:
    dims = _Dims.of(graph.shape(node.inputs[0]), node)
    _check(fam, graph, node, dims)
    shapes = [dims.y_shape()] + [dims.state_shape()] * fam.states
    outputs = list(node.outputs) + [""] * (1 + fam.states - len(node.outputs))
    outputs = [o or graph.add_value(graph.fresh(f"{fam.op.lower()}_out"), s) for o, s in zip(outputs, shapes)]
    if not training:
        return Node(node.op, node.inputs, tuple(outputs), node.attrs, node.name, node.domain)
    saved = graph.add_value(graph.fresh(f"{fam.op.lower()}_saved"), (dims.D, dims.T, dims.N, fam.saved * dims.H))
    return Node(f"{fam.op}Training", node.inputs, tuple(outputs) + (saved,), node.attrs, node.name, ET_DOMAIN)


def _forward_kernel(fam: _Family, k, node: Node):
    """Forward calls; the training form's last output is `saved`."""
    x, w, r, b = (list(node.inputs) + [""])[:4]
    dims = _Dims.of(k.shape(x), node)
    states = list(node.outputs[: 1 + fam.states])
    saved = node.outputs[1 + fam.states] if len(node.outputs) > 1 + fam.states else ""
    calls = []
    for d in range(dims.D):
        at = _Slices(fam, dims, d)
        calls.append(
            k.call(
                fam.forward_kernel(),
                dims.geometry(d),
                *fam.flags(node),
                x,
                at(w, "W"),
                at(r, "R"),
                at(b, "B"),
                *[at(s, "state") for s in _initial_states(fam, node)],
                *[at(y, "state") for y in states],
                at(saved, "saved"),
            )
        )
    return calls


def _grad_rule(fam: _Family, g, node: Node, dy):
    x, w, r = node.inputs[:3]
    inits = _initial_states(fam, node)
    attrs = {
        key: node.attrs[key]
        for key in ("activations", "direction", "hidden_size", "layout", "linear_before_reset")
        if key in node.attrs
    }
    outs = g.emit(
        f"{fam.op}Grad",
        [d or "" for d in dy[: 1 + fam.states]] + [x, w, r] + inits + [node.outputs[0], node.outputs[-1]],
        attrs,
        domain=ET_DOMAIN,
        outputs=4 + fam.states,
    )
    dx, dw, dr, db = outs[:4]
    d_inits = [d if init else None for d, init in zip(outs[4 : 4 + fam.states], inits)]
    return [dx, dw, dr, db if _given(node, 3) else None, None] + d_inits


def _grad_kernel(fam: _Family, k, node: Node):
    s = fam.states
    dys, (x, w, r), inits, (y, saved) = (
        node.inputs[: 1 + s],
        node.inputs[1 + s : 4 + s],
        node.inputs[4 + s : 4 + 2 * s],
        node.inputs[4 + 2 * s :],
    )
    dx, dw, dr, db = node.outputs[:4]
    d_inits = node.outputs[4 : 4 + s]
    dims = _Dims.of(k.shape(x), node)
    calls = []
    for d in range(dims.D):
        at = _Slices(fam, dims, d)
        calls.append(
            k.call(
                fam.grad_kernel(),
                dims.geometry(d),
                *fam.flags(node),
                int(d > 0),
                *[at(v, "state") for v in dys],
                x,
                at(w, "W"),
                at(r, "R"),
                *[at(v, "state") for v in inits],
                at(y, "state"),
                at(saved, "saved"),
                dx,
                at(dw, "W"),
                at(dr, "R"),
                at(db, "B"),
                *[at(v, "state") for v in d_inits],
            )
        )
    return calls


def _grad_shapes(fam: _Family, graph, node: Node):
    x, w, r = node.inputs[1 + fam.states : 4 + fam.states]
    dims = _Dims.of(graph.shape(x), node)
    states = [dims.state_shape()] * fam.states
    return [graph.shape(x), graph.shape(w), graph.shape(r), (dims.D, 2 * fam.gates * dims.H), *states]


# ---- NumPy references (what onnx.reference runs for the training graph), in time-major layout ----


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _time_major(layout: int, x, states):
    """X (T, N, I) and initial states (D, N, H) from either layout (None stays None)."""
    swap = (lambda a: None if a is None else np.swapaxes(a, 0, 1)) if layout else (lambda a: a)
    return swap(x), [swap(a) for a in states]


def _directions(attrs, d_count):
    return [_reverse(_direction(attrs), d) for d in range(d_count)]


def _forward_reference(fam: _Family, x, w, r, b, inits, flag: int, reverse: bool):
    """One direction: Y (T, N, H), saved (T, N, saved * H), and the last h and c; `flag` as the
    kernels take it (_Family.flag)."""
    steps, batch, hidden = x.shape[0], x.shape[1], r.shape[-1]
    wb, rb = np.split(np.zeros(2 * fam.gates * hidden) if b is None else b, 2)
    h, c = (np.zeros((batch, hidden)) if a is None else a for a in (list(inits) + [None])[:2])
    y, saved = np.zeros((steps, batch, hidden)), np.zeros((steps, batch, fam.saved * hidden))
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        gx, gh = x[t] @ w.T + wb, h @ r.T + rb
        if fam is RNN:
            h = np.maximum(gx + gh, 0) if flag else np.tanh(gx + gh)
            saved[t] = h
        elif fam is GRU:
            (xz, xr, xh), (hz, hr, hh) = np.split(gx, 3, axis=1), np.split(gh, 3, axis=1)
            z, reset = _sigmoid(xz + hz), _sigmoid(xr + hr)
            cand = np.tanh(xh + (reset * hh if flag else (reset * h) @ r[2 * hidden :].T + rb[2 * hidden :]))
            saved[t] = np.concatenate([z, reset, cand, hh if flag else np.zeros_like(z)], axis=1)
            h = (1 - z) * cand + z * h
        else:
            i, o, f, cand = np.split(gx + gh, 4, axis=1)
            i, o, f, cand = _sigmoid(i), _sigmoid(o), _sigmoid(f), np.tanh(cand)
            c = f * c + i * cand
            h = o * np.tanh(c)
            saved[t] = np.concatenate([i, o, f, cand, c], axis=1)
        y[t] = h
    return y, saved, h, c


def _backward_reference(fam: _Family, dy, dh, dc, x, w, r, inits, y, saved, flag: int, reverse: bool):
    """One direction back through time: dX, dW, dR, dB and the initial h and c's gradients."""
    steps, batch, hidden = x.shape[0], x.shape[1], r.shape[-1]
    order = list(range(steps - 1, -1, -1)) if reverse else list(range(steps))
    zeros = np.zeros((batch, hidden))
    h0, c0 = (zeros if a is None else a for a in (list(inits) + [None])[:2])
    dh, dc = (zeros if a is None else a for a in (dh, dc))
    dx, dw, dr, db = np.zeros_like(x), np.zeros_like(w), np.zeros_like(r), np.zeros(2 * fam.gates * hidden)
    for s in reversed(range(steps)):
        t = order[s]
        h = y[order[s - 1]] if s else h0
        d = dh + (0 if dy is None else dy[t])
        if fam is RNN:
            da = d * (saved[t] > 0) if flag else d * (1 - saved[t] ** 2)
            dh = da @ r
            dr += da.T @ h
            db += np.tile(da.sum(0), 2)
        elif fam is GRU:
            z, reset, cand, hr = np.split(saved[t], 4, axis=1)
            rh = r[2 * hidden :]
            da_c, da_z = d * (1 - z) * (1 - cand**2), d * (h - cand) * z * (1 - z)
            if flag:  # linear_before_reset; d_rec: the gradient of Rh h + Rbh
                d_rec = da_c * reset
                da_r = da_c * hr * reset * (1 - reset)
                dh = d * z + d_rec @ rh
                dr[2 * hidden :] += d_rec.T @ h
            else:  # d_rec: the gradient of Rh (r . h) + Rbh
                d_rec, d_rh = da_c, da_c @ rh
                da_r = d_rh * h * reset * (1 - reset)
                dh = d * z + d_rh * reset
                dr[2 * hidden :] += da_c.T @ (reset * h)
            da = np.concatenate([da_z, da_r, da_c], axis=1)
            dh = dh + da[:, : 2 * hidden] @ r[: 2 * hidden]
            dr[: 2 * hidden] += da[:, : 2 * hidden].T @ h
            db += np.concatenate([da.sum(0), da_z.sum(0), da_r.sum(0), d_rec.sum(0)])
        else:
            i, o, f, cand, cell = np.split(saved[t], 5, axis=1)
            c_prev = saved[order[s - 1]][:, 4 * hidden :] if s else c0
            tc = np.tanh(cell)
            d_c = dc + d * o * (1 - tc**2)
            da = np.concatenate(
                [d_c * cand * i * (1 - i), d * tc * o * (1 - o), d_c * c_prev * f * (1 - f), d_c * i * (1 - cand**2)],
                axis=1,
            )
            dc, dh = d_c * f, da @ r
            dr += da.T @ h
            db += np.tile(da.sum(0), 2)
        dw += da.T @ x[t]
        dx[t] += da @ w
    return dx, dw, dr, db, dh, dc


def _at(a, d):
    return None if a is None else a[d]


def _training_reference(fam: _Family):
    def reference(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, **attrs):
        layout, flag = attrs.get("layout", 0), fam.flag(attrs)
        x, inits = _time_major(layout, x, [initial_h, initial_c][: fam.states])
        runs = [
            _forward_reference(fam, x, w[d], r[d], _at(b, d), [_at(a, d) for a in inits], flag, reverse)
            for d, reverse in enumerate(_directions(attrs, w.shape[0]))
        ]
        y = np.stack([run[0] for run in runs], 1)  # (T, D, N, H)
        _, states = _time_major(layout, None, [np.stack([run[2 + k] for run in runs]) for k in range(fam.states)])
        return _f32(y.transpose(2, 0, 1, 3) if layout else y, *states, np.stack([run[1] for run in runs]))

    return reference


def _grad_reference(fam: _Family):
    def reference(*inputs, **attrs):
        k, layout, flag = fam.states, attrs.get("layout", 0), fam.flag(attrs)
        (dy, *d_states), (x, w, r), inits, (y, saved) = (
            inputs[: 1 + k],
            inputs[1 + k : 4 + k],
            inputs[4 + k : 4 + 2 * k],
            inputs[4 + 2 * k :],
        )
        x, inits = _time_major(layout, x, list(inits))
        _, d_states = _time_major(layout, None, d_states)
        dy, y = (None if a is None else (a.transpose(1, 2, 0, 3) if layout else a) for a in (dy, y))  # (T, D, N, H)
        runs = [
            _backward_reference(
                fam,
                None if dy is None else dy[:, d],
                *[_at(a, d) for a in d_states],
                *[None] * (2 - k),
                x,
                w[d],
                r[d],
                [_at(a, d) for a in inits],
                y[:, d],
                saved[d],
                flag,
                reverse,
            )
            for d, reverse in enumerate(_directions(attrs, w.shape[0]))
        ]
        dx = sum(run[0] for run in runs)
        _, d_inits = _time_major(layout, None, [np.stack([run[4 + j] for run in runs]) for j in range(k)])
        return _f32(
            dx.swapaxes(0, 1) if layout else dx,
            *[np.stack([run[j] for run in runs]) for j in (1, 2, 3)],
            *d_inits,
        )

    return reference


def _register(fam: _Family) -> None:
    @op(fam.op, const_inputs=(SEQUENCE_LENS,))
    class Forward:
        kernel = staticmethod(lambda k, node: _forward_kernel(fam, k, node))
        variant = staticmethod(lambda graph, node, index, training: _variant(fam, graph, node, training))

    @op(f"{fam.op}Training", domain=ET_DOMAIN, const_inputs=(SEQUENCE_LENS,))
    class Training:
        """The op's inputs -> (Y, Y_h[, Y_c], saved gates and cell states per step)."""

        kernel = staticmethod(lambda k, node: _forward_kernel(fam, k, node))
        grad = staticmethod(lambda g, node, dy: _grad_rule(fam, g, node, dy))
        reference = staticmethod(_training_reference(fam))

        @staticmethod
        def shape(graph, node):
            dims = _Dims.of(graph.shape(node.inputs[0]), node)
            return [dims.y_shape()] + [dims.state_shape()] * fam.states + [(dims.D, dims.T, dims.N, fam.saved * dims.H)]

    @op(f"{fam.op}Grad", domain=ET_DOMAIN)
    class Grad:
        """(dY, dY_h[, dY_c], X, W, R, initial_h[, initial_c], Y, saved) -> (dX, dW, dR, dB,
        d initial_h[, d initial_c]); absent gradients and initial states are ""."""

        kernel = staticmethod(lambda k, node: _grad_kernel(fam, k, node))
        shape = staticmethod(lambda graph, node: _grad_shapes(fam, graph, node))
        reference = staticmethod(_grad_reference(fam))


_register(RNN)
_register(GRU)
_register(LSTM)
