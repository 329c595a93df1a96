"""DFT, which edgetrain compiles as a product with a constant matrix of cosines and sines, and
STFT, a convolution with that matrix times the window, strided by the frame step
(frontend/spectral.py): forward and gradients of the generated C against torch.fft under autograd,
at opset 17 (axis an attribute) and 20 (axis an input), real and complex signals, inverse,
onesided (a real signal's half spectrum, and back) and dft_length's padding and truncation; the
forward against onnxruntime's own DFT over a grid of those; and a token-mixing block as FNet has
it, exported by dynamo, against PyTorch."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gradcheck import Cases, check_module_gradients, exported_by_dynamo, run_case
from edgetrain.frontend import spectral

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

CASES = Cases()
case = CASES.op


def _complex(transform, dim, n=None):
    """torch's transform of a signal stored as ONNX stores it: [..., 2] holds a complex value."""
    return lambda x: torch.view_as_real(transform(torch.view_as_complex(x), n=n, dim=dim))


def _real(transform, dim, n=None):
    """The same for a real signal, [..., 1]."""
    return lambda x: torch.view_as_real(transform(x[..., 0], n=n, dim=dim))


fft, ifft, rfft = torch.fft.fft, torch.fft.ifft, torch.fft.rfft
case("opset17-complex-axis1", "DFT", {"X": (2, 6, 2)}, _complex(fft, 1), opset=17)
case("opset17-real-axis2", "DFT", {"X": (2, 3, 5, 1)}, _real(fft, 2), attrs={"axis": 2}, opset=17)
case("opset17-inverse", "DFT", {"X": (3, 4, 2)}, _complex(ifft, 1), attrs={"inverse": 1}, opset=17)
case(
    "opset20-onesided-padded",
    "DFT",
    {"X": (2, 5, 1)},
    _real(rfft, 1, n=8),
    attrs={"onesided": 1},
    consts={"dft_length": np.array(8), "axis": np.array(1)},
    opset=20,
)
case(
    "opset20-truncated-axis0",
    "DFT",
    {"X": (7, 3, 2)},
    _complex(fft, 0, n=4),
    consts={"dft_length": np.array(4), "axis": np.array(0)},
    opset=20,
)
case(
    "opset20-irfft",
    "DFT",
    {"X": (2, 4, 2)},
    lambda x: torch.fft.irfft(torch.view_as_complex(x), n=6, dim=1).unsqueeze(-1),
    attrs={"inverse": 1, "onesided": 1},
    consts={"dft_length": np.array(6), "axis": np.array(1)},
    opset=20,
)
case("opset20-default-axis", "DFT", {"X": (2, 3, 4, 2)}, _complex(fft, 2), consts={"dft_length": None}, opset=20)


def _stft(n_fft, hop, window=None, onesided=True):
    """torch's STFT of a real signal [batch, length, 1], laid out as ONNX's [batch, frames, bins, 2]."""
    w = None if window is None else torch.from_numpy(window)

    def transform(x):
        spectrum = torch.stft(x[..., 0], n_fft, hop, window=w, center=False, onesided=onesided, return_complex=True)
        return torch.view_as_real(spectrum).transpose(1, 2)

    return transform


_HANN = np.hanning(12).astype(np.float32)
case(
    "STFT-hann-window",
    "STFT",
    {"X": (2, 40, 1)},
    _stft(12, 5, _HANN),
    attrs={"onesided": 1},  # the default, said: onnx's shape inference takes an absent one for 0
    consts={"frame_step": np.array(5), "window": _HANN},
    opset=17,
)
case(
    "STFT-length-twosided",
    "STFT",
    {"X": (2, 30, 1)},
    _stft(8, 3, onesided=False),
    attrs={"onesided": 0},
    consts={"frame_step": np.array(3), "window": None, "frame_length": np.array(8)},
    opset=17,
)


class _Mixing(torch.nn.Module):
    """FNet's token mixing: the real part of a 2-D DFT over sequence and hidden, added back and
    normalized, then a classifier."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 6)
        self.norm = torch.nn.LayerNorm(6)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x):
        h = self.embed(x)
        return self.out(self.norm(h + torch.fft.fftn(h, dim=(1, 2)).real))


def _fnet_block(tmp_path, rng) -> float:
    torch.manual_seed(int(rng.integers(2**31)))
    net, x = _Mixing(), torch.randn(2, 5, 4)
    model = exported_by_dynamo(net, x, tmp_path / "fnet.onnx")
    assert [n.op_type for n in model.graph.node].count("DFT") == 2
    return check_module_gradients(net, x, model, tmp_path, rng)


CASES.check("dynamo-fnet-token-mixing", _fnet_block)


class _Spectrogram(torch.nn.Module):
    """A classifier of raw audio: the magnitudes of a Hann-windowed STFT, averaged over time."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(9, 3)

    def forward(self, x):
        spectrum = torch.stft(x, 16, 8, window=torch.hann_window(16), center=False, return_complex=True)
        return self.out(spectrum.abs().mean(-1))


def _spectrogram_block(tmp_path, rng) -> float:
    torch.manual_seed(int(rng.integers(2**31)))
    net, x = _Spectrogram(), torch.randn(2, 64)
    model = exported_by_dynamo(net, x, tmp_path / "spectrogram.onnx")
    assert {"STFT", "HannWindow"} <= {n.op_type for n in model.graph.node}
    return check_module_gradients(net, x, model, tmp_path, rng)


CASES.check("dynamo-stft-spectrogram", _spectrogram_block)


@pytest.mark.parametrize("spec", CASES)
def test_dft_gradients(spec, tmp_path, request):
    run_case(spec, tmp_path, request)


def _one_node_model(op: str, shape, opset: int, operands: dict, **attrs) -> onnx.ModelProto:
    """`op` on a float input X of `shape`, its other inputs the constants `operands` in order (None:
    left out)."""
    inputs = ["X"] + [name if value is not None else "" for name, value in operands.items()]
    while not inputs[-1]:  # an omitted optional input is "" unless it is the last
        inputs.pop()
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["Y"], **attrs)],
        op.lower(),
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in operands.items() if v is not None],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _dft_model(shape, opset: int, axis, length, inverse: int, onesided: int) -> onnx.ModelProto:
    attrs = {"inverse": inverse, "onesided": onesided} | ({"axis": axis} if axis is not None and opset < 20 else {})
    operands = {"length": length} | ({"axis": axis} if opset >= 20 else {})
    return _one_node_model("DFT", shape, opset, operands, **attrs)


def _as_products(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """The single-node model with its DFT or STFT replaced as the frontend replaces it."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim) for v in inferred.input}
    shapes |= {i.name: tuple(i.dims) for i in model.graph.initializer}
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = spectral.as_products(model.graph, shapes, constants, opset)
    assert nodes is not None and not {"DFT", "STFT"} & {n.op_type for n in nodes}
    used = {name for n in nodes for name in n.input}
    initializers = [numpy_helper.from_array(v, k) for k, v in constants.items() if k in used]
    graph = helper.make_graph(nodes, "products", list(model.graph.input), list(model.graph.output), initializers)
    return helper.make_model(graph, opset_imports=list(model.opset_import))


def test_the_products_compute_what_onnxruntime_computes():
    """Over opsets, shapes, axes (given and default), directions, sides and lengths: each product's
    spectrum against onnxruntime's DFT on the same signal, both run by onnxruntime."""
    rng, compared = np.random.default_rng(0), 0
    grid = itertools.product(
        (17, 20), [(2, 5, 1), (2, 6, 2), (3, 4, 7, 2), (3, 4, 7, 1)], (None, 0, 1, -2), (0, 1), (0, 1), (None, 3, 9)
    )
    for opset, shape, axis, inverse, onesided, length in grid:
        signal_axis = (1 if opset < 20 else -2) if axis is None else axis
        if not -len(shape) <= signal_axis <= len(shape) - 2 or (onesided and (shape[-1] == 2 or inverse)):
            continue
        _assert_products_as_onnxruntime(_dft_model(shape, opset, axis, length, inverse, onesided), opset, rng)
        compared += 1
    assert compared > 100


def _assert_products_as_onnxruntime(model: onnx.ModelProto, opset: int, rng) -> None:
    """onnxruntime runs the model and its rewrite on one random signal, to the same values."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = rng.normal(size=shape).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"X": x})[0]
    got = ort.InferenceSession(_as_products(model, opset).SerializeToString()).run(None, {"X": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, float(np.abs(want).max())), rtol=0)


def test_stft_products_compute_what_onnxruntime_computes():
    """Over real and complex signals, frame steps, frame lengths given, taken from the window or
    both, and sides: each convolution's spectra against onnxruntime's STFT, both run by onnxruntime."""
    rng, compared = np.random.default_rng(1), 0
    for parts, step, frame, framing, onesided in itertools.product((1, 2), (1, 3, 8), (5, 16), range(3), (0, 1)):
        if onesided and parts == 2:
            continue
        window = np.hanning(frame).astype(np.float32) if framing else None
        operands = {"step": step, "window": window, "length": frame if framing != 1 else None}
        model = _one_node_model("STFT", (2, 40, parts), 17, operands, onesided=onesided)
        _assert_products_as_onnxruntime(model, 17, rng)
        compared += 1
    assert compared == 54


def test_transforms_of_one_kind_and_size_share_their_matrix():
    """FNet's layers each transform alike: one matrix in flash serves them all."""
    nodes = [helper.make_node("DFT", [f"X{i}"], [f"Y{i}"], axis=1) for i in range(3)]
    nodes.append(helper.make_node("DFT", ["X3"], ["Y3"], axis=1, inverse=1))
    shapes = {f"X{i}": (2, 6, 2) for i in range(4)}
    constants: dict = {}
    graph = helper.make_graph(nodes, "dfts", [], [])
    assert spectral.as_products(graph, shapes, constants, 18) is not None
    assert len([name for name in constants if name.startswith("__dft_matrix")]) == 2
