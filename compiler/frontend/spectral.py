"""ONNX's DFT as a product with a constant matrix: each DFT node over a signal axis of static length
becomes Transpose -> Reshape -> MatMul -> Reshape -> Transpose, whose gradients the trainer already
has. The matrix holds the transform's cosines and sines (computed in float64, stored as float32),
with inverse's 1/n, onesided's half spectrum (or, inverse, the real signal of one) and
dft_length's zero padding or truncation in it.
A product takes n multiply-adds per output where an FFT takes about log2(n): a price paid only by
models that use the op (FNet mixes its tokens with two of them per layer)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..errors import EdgetrainError


def dft_as_products(nodes: list[onnx.NodeProto], shapes: dict, constants: dict, opset: int) -> list | None:
    """`nodes` with each DFT node replaced by its product, or None when there is none. `shapes`
    gives static shapes (a tuple, or None), `constants` the values known at compile time, to which
    the products' matrices and shapes are added."""
    if not any(_is_dft(node) for node in nodes):
        return None
    return [made for node in nodes for made in (_product(node, shapes, constants, opset) if _is_dft(node) else [node])]


def _is_dft(node: onnx.NodeProto) -> bool:
    return node.op_type == "DFT" and node.domain in ("", "ai.onnx")


def _product(node, shapes: dict, constants: dict, opset: int) -> list[onnx.NodeProto]:
    where = f"DFT '{node.name or node.output[0]}'"
    dims = shapes.get(node.input[0])
    if not dims or dims[-1] not in (1, 2):
        raise EdgetrainError(f"{where}: needs an input of static shape ending in 1 (real) or 2 (complex)")
    rank, parts = len(dims), dims[-1]
    attrs = {a.name: a.i for a in node.attribute}
    inverse, onesided = attrs.get("inverse", 0), attrs.get("onesided", 0)
    given = attrs.get("axis") if opset < 20 else _scalar(node, 2, constants, where)  # an input from opset 20
    axis = given if given is not None else (1 if opset < 20 else -2)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank - 2:
        raise EdgetrainError(f"{where}: axis {axis} is not a signal axis of an input of rank {rank}")
    n = dims[axis]
    length = _scalar(node, 1, constants, where)
    matrix, out_parts = _matrix(n, length, parts, inverse, onesided)
    others = [i for i in range(rank - 1) if i != axis]
    layout = [*others, rank - 1, axis]  # the input's axes in the order the product leaves them
    keep = [0] * len(others)  # Reshape's 0 copies a dimension, batch included, whatever its size

    def name(suffix: str) -> str:
        return f"{node.output[0]}__dft_{suffix}"

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


def _scalar(node, slot: int, constants: dict, where: str) -> int | None:
    """The node's constant scalar input `slot`, or None where it is left out."""
    if len(node.input) <= slot or not node.input[slot]:
        return None
    value = constants.get(node.input[slot])
    if value is None or np.size(value) != 1:
        raise EdgetrainError(f"{where}: its {('dft_length', 'axis')[slot - 1]} must be a constant scalar")
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
