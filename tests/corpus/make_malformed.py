"""Writes tests/corpus/malformed/: one broken model per file, each a way a model file can be wrong
that the compiler must refuse with one clear line (tests/unit/test_malformed_corpus.py holds the
expected message of each). Deterministic: running it again rewrites identical bytes.

    python tests/corpus/make_malformed.py [DIRECTORY]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).parent / "malformed"
F = TensorProto.FLOAT


def info(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name, shape, dtype=np.float32, seed=0):
    return numpy_helper.from_array(np.random.default_rng(seed).normal(size=shape).astype(dtype), name)


def model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "malformed", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_malformed")
    m.ir_version = 8
    return m


def mlp(**changes):
    """x[4,8] -> Gemm(fc0) -> Relu -> Gemm(fc1) -> logits[4,3]: the healthy model most cases break."""
    parts = {
        "nodes": [
            helper.make_node("Gemm", ["x", "fc0.weight", "fc0.bias"], ["h"], transB=1, name="fc0"),
            helper.make_node("Relu", ["h"], ["hr"], name="relu"),
            helper.make_node("Gemm", ["hr", "fc1.weight", "fc1.bias"], ["logits"], transB=1, name="fc1"),
        ],
        "inputs": [info("x", [4, 8])],
        "outputs": [info("logits", [4, 3])],
        "inits": [
            init("fc0.weight", (16, 8)),
            init("fc0.bias", (16,), seed=1),
            init("fc1.weight", (3, 16), seed=2),
            init("fc1.bias", (3,), seed=3),
        ],
    }
    parts.update(changes)
    return model(**parts)


def short_tensor(name, shape):
    """A tensor whose data holds 12 bytes where its shape needs more (make_tensor refuses to build it)."""
    tensor = TensorProto(name=name, data_type=F, dims=shape)
    tensor.raw_data = b"\0" * 12
    return tensor


def binary(op, a_shape, b_shape, out_shape):
    return model(
        [helper.make_node(op, ["x", "w"], ["y"], name=op.lower())],
        [info("x", a_shape)],
        [info("y", out_shape)],
        [init("w", b_shape)],
    )


def external(location, data=None):
    """fc0.weight stored outside the model file at `location` (written next to it when `data`)."""
    m = mlp()
    weight = m.graph.initializer[0]
    weight.ClearField("float_data")
    weight.raw_data = b""
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(16 * 8 * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    return m, data


def future_ir():
    m = mlp()
    m.ir_version = 99
    return m


def cases() -> dict[str, bytes | onnx.ModelProto | tuple]:
    healthy = mlp().SerializeToString()
    nodes = mlp().graph.node
    return {
        # -- files that are not models
        "empty": b"",
        "garbage": bytes(np.random.default_rng(7).integers(0, 256, 300, dtype=np.uint8)),
        "truncated": healthy[: len(healthy) // 2],
        "text": b"this is not an ONNX model\n",
        # -- graph structure
        "unsorted": mlp(nodes=[nodes[1], nodes[0], nodes[2]]),
        "cycle": model(
            [
                helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
                helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
            ],
            [info("x", [2, 3])],
            [info("b", [2, 3])],
        ),
        "missing_initializer": mlp(inits=mlp().graph.initializer[1:]),
        "missing_input": mlp(nodes=[nodes[0], helper.make_node("Add", ["h", "ghost"], ["hr"], name="add"), nodes[2]]),
        "duplicate_output": mlp(
            nodes=[nodes[0], helper.make_node("Relu", ["x"], ["h"], name="relu_x"), nodes[1], nodes[2]]
        ),
        "overwrites_input": mlp(nodes=[helper.make_node("Relu", ["x"], ["x"], name="relu_x")] + list(nodes)),
        "duplicate_initializer": mlp(inits=list(mlp().graph.initializer) + [init("fc1.bias", (3,), seed=9)]),
        "no_outputs": mlp(outputs=[]),
        # -- shapes
        "gemm_mismatch": mlp(inits=[init("fc0.weight", (16, 5))] + list(mlp().graph.initializer[1:])),
        "add_not_broadcastable": binary("Add", [2, 3], [4], [2, 3]),
        "matmul_mismatch": binary("MatMul", [2, 3], [4, 5], [2, 5]),
        "initializer_data_size": mlp(inits=[short_tensor("fc0.weight", (16, 8))] + list(mlp().graph.initializer[1:])),
        # -- dtypes
        "float64_initializer": model(
            [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
            [info("x", [2, 3], TensorProto.DOUBLE)],
            [info("y", [2, 3], TensorProto.DOUBLE)],
            [init("w", (3,), np.float64)],
        ),
        "float16_input": model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [info("x", [2, 3], TensorProto.FLOAT16)],
            [info("y", [2, 3], TensorProto.FLOAT16)],
        ),
        # -- sizes
        "huge_tensor": model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [info("x", [1 << 20, 1 << 20])],
            [info("y", [1 << 20, 1 << 20])],
        ),
        "dim_product_overflow": model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [info("x", [1 << 40] * 3)],
            [info("y", [1 << 40] * 3)],
        ),
        "total_ram": model(
            [
                helper.make_node("Mul", ["x", "w"], ["a"], name="scale"),
                helper.make_node("Relu", ["a"], ["b"], name="relu"),
                helper.make_node("Mul", ["b", "w"], ["y"], name="scale_again"),
            ],
            [info("x", [1 << 13, 1 << 15])],
            [info("y", [1 << 13, 1 << 15])],
            [init("w", ())],
        ),
        # -- external data
        "external_parent": external("../secret.bin"),
        "external_absolute": external("/etc/passwd"),
        "external_missing": external("weights_that_are_not_here.bin"),
        "external_too_short": external("external_too_short.bin", b"\0" * 100),
        # -- versions
        "opset_future": model(nodes, mlp().graph.input, mlp().graph.output, mlp().graph.initializer, opset=99),
        "ir_version_future": future_ir(),
        "opset_ancient": model(nodes, mlp().graph.input, mlp().graph.output, mlp().graph.initializer, opset=6),
    }


def write(directory: Path = HERE) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, case in cases().items():
        data = None
        if isinstance(case, tuple):
            case, data = case
        path = directory / f"{name}.onnx"
        path.write_bytes(case if isinstance(case, bytes) else case.SerializeToString(deterministic=True))
        written.append(path)
        if data is not None:
            path.with_suffix(".bin").write_bytes(data)
            written.append(path.with_suffix(".bin"))
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(path)
