import codecs
import doctest
import os
import re
import string
import struct
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain.codegen import filters


def test_filter_doctests():
    result = doctest.testmod(filters)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("value", [0.1, -1e-30, 3.4e38, 1e-45, 123.456, -0.0, 1.0])
def test_float_literal_is_exact(value):
    """The hex literal, read back as C would, is the same float32 bit pattern."""
    literal = filters.c_float(value)
    parsed = np.float32(float.fromhex(literal.rstrip("f")))
    assert struct.pack("<f", parsed) == struct.pack("<f", np.float32(value))


@pytest.mark.parametrize("hostile", ["*/ int x; /*", "a\nb", "#include <stdio.h>", '"); system("rm', "??/", "é" * 5000])
def test_comment_filter_neutralizes_model_text(hostile):
    text = filters.c_comment(hostile)
    assert "*/" not in text and "\n" not in text and "#" not in text and '"' not in text and "?" not in text
    assert len(text) <= 60


def every_byte() -> np.ndarray:
    """float32s whose bytes take every value at every position: NaNs with payloads, infinities,
    denormals and both zeros among them."""
    bytes_ = np.arange(256, dtype=np.uint8)
    return np.stack([np.roll(bytes_, 67 * k) for k in range(4)], axis=1).reshape(-1).view("<f4")


@pytest.mark.parametrize("per_line", [1, 3, 32])
def test_float_bytes_literal_holds_every_bit(per_line):
    """Python reads octal escapes (up to three digits), the simple escapes but \\? and backslash-newline
    as C does: the literal holds the floats' little-endian bytes, per_line bytes a line, in C99's basic
    source characters, every backslash starting one of those escapes and no quote or question mark
    left bare (so no trigraph can form)."""
    values = np.concatenate([every_byte(), np.float32([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4e38, 0.1])])
    text = filters.c_float_bytes(values, per_line)
    assert text[0] == text[-1] == '"'
    inner = text[1:-1]
    # A bare ? never occurs, so each \? is the escape (Python leaves it as two characters).
    assert codecs.escape_decode(inner.replace("\\?", "?").encode())[0] == values.astype("<f4").tobytes()
    bare = re.sub(r'\\(?:[0-7]{3}|[abtnvfr"?\\]|\n)', "", inner)
    assert set(bare) <= set(string.ascii_letters + string.digits + " !#%&'()*+,-./:;<=>[]^_{|}~")
    lines = text.split("\n")
    assert len(lines) == -(-values.size * 4 // per_line)
    assert all(len(line) <= 4 * per_line + 2 for line in lines)


def test_float_bytes_literal_of_a_tuple_is_that_of_the_array():
    values = np.random.default_rng(0).normal(size=100).astype(np.float32)
    assert filters.c_float_bytes(tuple(values.tolist())) == filters.c_float_bytes(values)


def test_identifier_filter_refuses_non_identifiers():
    with pytest.raises(ValueError):
        filters.c_ident("a b")


def test_generated_c_does_not_depend_on_string_hashing(tmp_path):
    """Compiled constants (here inference-form BatchNormalization statistics) are laid out in a
    fixed order: the same model gives the same model.c under any PYTHONHASHSEED."""
    rng = np.random.default_rng(0)
    nodes, inits = [], [numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "w")]
    value = "x"
    for i in range(6):
        stats = [
            numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), f"bn{i}.{part}")
            for part in ("scale", "bias", "mean", "var")
        ]
        inits += stats
        nodes.append(helper.make_node("BatchNormalization", [value, *(t.name for t in stats)], [f"y{i}"]))
        value = f"y{i}"
    nodes.append(helper.make_node("MatMul", [value, "w"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "bn_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "bn.onnx")
    script = (
        "import sys; from edgetrain import artifacts; artifacts.generate_artifacts(sys.argv[1], "
        "artifact_directory=sys.argv[2], loss=artifacts.LossType.CrossEntropyLoss, "
        "frozen_params=[f'bn{i}.{p}' for i in range(6) for p in ('scale', 'bias')])"
    )
    sources = []
    for seed in ("1", "2"):
        subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "bn.onnx"), str(tmp_path / seed)],
            check=True,
            env=dict(os.environ, PYTHONHASHSEED=seed),
        )
        sources.append((tmp_path / seed / "model.c").read_text() + (tmp_path / seed / "model_weights.h").read_text())
    assert "0x" in sources[0] and sources[0] == sources[1]
