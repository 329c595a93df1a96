"""ONNX's DFT as a product with a constant matrix: each DFT node over a signal axis of static length
becomes Transpose -> Reshape -> MatMul -> Reshape -> Transpose, whose gradients the trainer already
has; STFT, each frame's DFT, becomes a convolution strided by the frame step. The matrix holds the
transform's cosines and sines (computed in float64, stored as float32), with inverse's 1/n,
onesided's half spectrum (or, inverse, the real signal of one) and dft_length's zero padding or
truncation in it. A product takes n multiply-adds per output where an FFT takes about log2(n): a
price paid only by models that use the op (FNet mixes its tokens with two of them per layer)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import EdgetrainError


def as_products(graph: onnx.GraphProto, shapes: dict, constants: dict, opset: int) -> list | None:
    """The graph's nodes with each DFT and STFT node replaced by its product, or None when there is
    none. `shapes` gives static shapes (a tuple, or None), `constants` the values known at compile
    time, to which the products' matrices and shapes are added, and an STFT's window where it is an
    initializer: a window is part of the transform, never a parameter."""
    nodes = list(graph.node)
    if not any(_spectral(node) for node in nodes):
        return None
    initializers = {i.name: i for i in graph.initializer}
    for node in nodes:
        if node.op_type == "STFT" and len(node.input) > 2 and node.input[2] in initializers:
            constants.setdefault(node.input[2], numpy_helper.to_array(initializers[node.input[2]]))
    rewrite = {"DFT": _product, "STFT": _framed_product}
    return [
        made
        for node in nodes
        for made in (rewrite[node.op_type](node, shapes, constants, opset) if _spectral(node) else [node])
    ]


def _spectral(node: onnx.NodeProto) -> bool:
    return node.op_type in ("DFT", "STFT") and node.domain in ("", "ai.onnx")


def _product(node, shapes: dict, constants: dict, opset: int) -> list[onnx.NodeProto]:
    where = f"DFT '{node.name or node.output[0]}'"
    dims = shapes.get(node.input[0])
    if not dims or dims[-1] not in (1, 2):
        raise EdgetrainError(f"{where}: needs an input of static shape ending in 1 (real) or 2 (complex)")
    rank, parts = len(dims), dims[-1]
    attrs = {a.name: a.i for a in node.attribute}
    inverse, onesided = attrs.get("inverse", 0), attrs.get("onesided", 0)
    given = attrs.get("axis") if opset < 20 else _scalar(node, 2, constants, where, "axis")  # an input from opset 20
    axis = given if given is not None else (1 if opset < 20 else -2)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank - 2:
        raise EdgetrainError(f"{where}: axis {axis} is not a signal axis of an input of rank {rank}")
    n = dims[axis]
    length = _scalar(node, 1, constants, where, "dft_length")
    matrix, out_parts = _matrix(n, length, parts, inverse, onesided)
    others = [i for i in range(rank - 1) if i != axis]
    layout = [*others, rank - 1, axis]  # the input's axes in the order the product leaves them
    keep = [0] * len(others)  # Reshape's 0 copies a dimension, batch included, whatever its size
    name = _names(node, "dft")

    # One matrix for every DFT of the same kind and size (FNet has two for each of its layers).
    shared = f"__dft_matrix_{parts}x{n}_length{length}_inverse{inverse}_onesided{onesided}"
    constants[shared] = matrix
    constants[name("rows")] = np.array([*keep, parts * n], np.int64)  # the real values, then the imaginary
    constants[name("parts")] = np.array([*keep, out_parts, matrix.shape[1] // out_parts], np.int64)
    return [
        helper.make_node("Transpose", [node.input[0]], [name("signal")], perm=layout),
        helper.make_node("Reshape", [name("signal"), name("rows")], [name("flat")]),
        helper.make_node("MatMul", [name("flat"), shared], [name("spectrum")]),
        helper.make_node("Reshape", [name("spectrum"), name("parts")], [name("split")]),
        helper.make_node(
            "Transpose", [name("split")], [node.output[0]], name=node.name, perm=[layout.index(i) for i in range(rank)]
        ),
    ]


def _framed_product(node, shapes: dict, constants: dict, opset: int) -> list[onnx.NodeProto]:
    """STFT: each frame's DFT, as a convolution strided by the frame step whose filters are the
    DFT's matrix times the window: [batch, length, parts] -> [batch, frames, frequencies, 2]."""
    where = f"STFT '{node.name or node.output[0]}'"
    dims = shapes.get(node.input[0])
    if not dims or len(dims) != 3 or dims[-1] not in (1, 2):
        raise EdgetrainError(f"{where}: needs a signal of static shape [batch, length, 1 or 2]")
    parts, name = dims[-1], _names(node, "stft")
    window = node.input[2] if len(node.input) > 2 and node.input[2] else None
    step = _scalar(node, 1, constants, where, "frame_step")
    length = _scalar(node, 3, constants, where, "frame_length")
    if length is None and window is not None and shapes.get(window):
        length = shapes[window][0]
    if step is None or step < 1 or length is None or not 1 <= length <= dims[1]:
        raise EdgetrainError(f"{where}: needs a positive frame step and a frame length within the signal")
    onesided = next((a.i for a in node.attribute if a.name == "onesided"), 1)
    matrix, _ = _matrix(length, None, parts, 0, onesided)  # [parts * length, 2 * frequencies]
    constants[name("filters")] = np.ascontiguousarray(matrix.T.reshape(-1, parts, length))
    constants[name("parts")] = np.array([0, 2, matrix.shape[1] // 2, -1], np.int64)
    nodes = [helper.make_node("Transpose", [node.input[0]], [name("signal")], perm=[0, 2, 1])]
    filters = name("filters")
    if window is not None:  # folds into the filters where it is a constant
        nodes.append(helper.make_node("Mul", [filters, window], [name("windowed")]))
        filters = name("windowed")
    return nodes + [
        helper.make_node("Conv", [name("signal"), filters], [name("frames")], strides=[step]),
        helper.make_node("Reshape", [name("frames"), name("parts")], [name("split")]),
        helper.make_node("Transpose", [name("split")], [node.output[0]], name=node.name, perm=[0, 3, 2, 1]),
    ]


def _names(node, kind: str):
    """Names for the values a rewrite of `node` makes, after its output."""
    return lambda suffix: f"{node.output[0]}__{kind}_{suffix}"


def _scalar(node, slot: int, constants: dict, where: str, what: str) -> int | None:
    """The node's constant scalar input `slot`, or None where it is left out."""
    if len(node.input) <= slot or not node.input[slot]:
        return None
    value = constants.get(node.input[slot])
    if value is None or np.size(value) != 1:
        raise EdgetrainError(f"{where}: its {what} must be a constant scalar")
    return int(np.reshape(value, -1)[0])


def _matrix(n: int, length: int | None, parts: int, inverse: int, onesided: int) -> tuple[np.ndarray, int]:
    """(the matrix, 1 or 2: whether the output is real or complex). A row of the signal (its real
    values, then its imaginary ones) times the matrix gives the output's real values, then its
    imaginary ones. Signal values at or past `length` are left out (truncation); a longer `length`
    pads with zeros, which add nothing."""
    if inverse and onesided:  # a half spectrum in, the real signal out (NumPy's irfft)
        length = 2 * (n - 1) if length is None else length
        _check(length)
        k, t = np.arange(min(n, length // 2 + 1)), np.arange(length)
        theta = 2 * np.pi * np.outer(k, t) / length
        weight = np.where((k == 0) | (2 * k == length), 1.0, 2.0)[:, None] / length  # k and length - k
        matrix = np.zeros((parts * n, length))
        matrix[: k.size] = weight * np.cos(theta)
        if parts == 2:
            matrix[n : n + k.size] = -weight * np.sin(theta)
        return matrix.astype(np.float32), 1
    length = n if length is None else length
    _check(length)
    frequencies = length // 2 + 1 if onesided else length
    used = min(n, length)
    theta = 2 * np.pi * np.outer(np.arange(used), np.arange(frequencies)) / length
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    cos, sin = scale * np.cos(theta), scale * sign * np.sin(theta)
    matrix = np.zeros((parts * n, 2 * frequencies))
    # (a + ib)(cos + i sin) = (a cos - b sin) + i (a sin + b cos)
    matrix[:used, :frequencies], matrix[:used, frequencies:] = cos, sin
    if parts == 2:
        matrix[n : n + used, :frequencies], matrix[n : n + used, frequencies:] = -sin, cos
    return matrix.astype(np.float32), 2


def _check(length: int) -> None:
    if length < 1:
        raise EdgetrainError(f"DFT length {length}: must be positive")
