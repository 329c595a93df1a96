"""Model text never reaches the generated C raw (DESIGN convention 6). Each case renames every
tensor, node and graph of one model (and fills its doc strings and metadata) with hostile text:
comment terminators, line breaks, preprocessor directives, string breakouts, non-ASCII, C
keywords and our own identifiers, names that collide once sanitized, 10 kB names, template
syntax. The generated C must be ASCII, carry none of that text, compile warning-free under strict
flags, and train bit for bit like the same model with plain names."""

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import EdgetrainError, api, artifacts

# Many models, a few steps of each: built at -Og, to the default build's bits (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("quick_build")


BATCH = 4
# Tensor names in the twin with plain names; every case maps each one to a hostile name.
TENSORS = ["x", "fc0.weight", "fc0.bias", "h", "hr", "ratio", "hd", "gain", "hg", "fc1.weight", "fc1.bias", "logits"]
NODES = ["fc0", "relu", "drop", "gain_mul", "fc1"]
KEYWORDS = [
    "int",
    "return",
    "static",
    "void",
    "main",
    "NULL",
    "et_arena",
    "et_params",
    "model_init",
    "x0",
    "float",
    "while",
    "et_grads",
    "st",
    "loss",
    "buffer",
    "et_crc32",
]


def numbered(payload):
    return lambda i: payload.format(i=i)


# case -> (name for the i-th tensor or node, text that must not appear in the C; None: the names
# are plain identifiers, which the C naturally contains)
CASES = {
    "comment_terminator": (numbered("w{i} */ int pwned_{i} = 1; /* "), "*/ int pwned"),
    "line_comment_continuation": (numbered("w{i} // pwned \\"), "// pwned"),
    "line_breaks": (numbered("w{i}\n#define pwned 1\r\nint pwned_{i};\f\v"), "#define pwned"),
    "include": (numbered('#include "/etc/passwd" {i}'), '#include "/etc/passwd"'),
    "string_breakout": (numbered('"); system("rm -rf /"); ("{i}'), 'system("'),
    "non_ascii": (numbered("вес_{i} 重み 🔥 \u202e\u200bé\u2028"), "вес"),
    "c_keywords": (lambda i: KEYWORDS[i % len(KEYWORDS)], None),
    "collide_after_sanitizing": (lambda i: f"v{'_/*+?'[i % 5]}{i // 5}", None),
    "huge_10kB": (lambda i: f"n{i}_" + "x" * 10240, "x" * 100),
    "trigraphs_digraphs": (numbered("??/ ??= %:include <%{i}%> ??' ??!"), "??"),
    "template_syntax": (numbered("{{{{ m.prefix }}}}{{% raw %}}{{# {i}"), "{{"),
    "format_and_escapes": (numbered("%s%n%x \\x41\\u0041\\0\\\\ {i}\x00\x7f\x1b[31m"), "%n"),
    "digits_only": (lambda i: str(i), None),
}


def build(name_of, hostile_text: str | None = None):
    """Gemm -> Relu -> Dropout -> Mul(gain, frozen) -> Gemm, every name from `name_of`."""
    t = {n: name_of(i) for i, n in enumerate(TENSORS)}
    node = {n: name_of(len(TENSORS) + i) for i, n in enumerate(NODES)}
    rng = np.random.default_rng(0)

    def init(name, shape, bound=0.4):
        return numpy_helper.from_array(rng.uniform(-bound, bound, shape).astype(np.float32), t[name])

    nodes = [
        helper.make_node("Gemm", [t["x"], t["fc0.weight"], t["fc0.bias"]], [t["h"]], transB=1, name=node["fc0"]),
        helper.make_node("Relu", [t["h"]], [t["hr"]], name=node["relu"]),
        helper.make_node("Dropout", [t["hr"], t["ratio"]], [t["hd"]], name=node["drop"]),
        helper.make_node("Mul", [t["hd"], t["gain"]], [t["hg"]], name=node["gain_mul"]),
        helper.make_node("Gemm", [t["hg"], t["fc1.weight"], t["fc1.bias"]], [t["logits"]], transB=1, name=node["fc1"]),
    ]
    inits = [
        init("fc0.weight", (16, 8)),
        init("fc0.bias", (16,)),
        numpy_helper.from_array(np.float32(0.25), t["ratio"]),
        init("gain", (16,), 2.0),
        init("fc1.weight", (3, 16)),
        init("fc1.bias", (3,)),
    ]
    graph = helper.make_graph(
        nodes,
        hostile_text or "mlp",
        [helper.make_tensor_value_info(t["x"], TensorProto.FLOAT, [BATCH, 8])],
        [helper.make_tensor_value_info(t["logits"], TensorProto.FLOAT, [BATCH, 3])],
        inits,
        doc_string=hostile_text or "",
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18)],
        producer_name=hostile_text or "t",
        doc_string=hostile_text or "",
    )
    if hostile_text:
        for n in model.graph.node:
            n.doc_string = hostile_text
        onnx.helper.set_model_props(model, {hostile_text: hostile_text, "evil */ #include <x>": "\n*/"})
    return model, t


def compile_and_bind(model, directory, frozen):
    out = artifacts.generate_artifacts(model, artifact_directory=directory, frozen_params=[frozen], learning_rate=0.05)
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return out, state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def run(state, module, opt, names):
    """Two training steps, an eval and an inference: every number the trainer produces."""
    rng = np.random.default_rng(1)
    results = []
    for _ in range(2):
        x, y = rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH)
        results.append(module(x, y))
        results += [
            state.parameters[names[p]].grad.copy() for p in ("fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias")
        ]
        opt.step()
        module.lazy_reset_grad()
    results.append(module.get_contiguous_parameters())
    module.eval()
    results.append(module(x, y))
    results += module.infer(x)
    return results


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    model, names = build(lambda i: (TENSORS + NODES)[i])
    _, state, module, opt = compile_and_bind(model, tmp_path_factory.mktemp("twin"), names["gain"])
    return run(state, module, opt, names)


@pytest.mark.parametrize("case", CASES)
def test_hostile_names(case, twin, tmp_path):
    name_of, forbidden = CASES[case]
    hostile_text = name_of(99)
    model, names = build(name_of, hostile_text)
    assert len({*names.values(), *(n.name for n in model.graph.node)}) == len(TENSORS) + len(NODES)
    out, state, module, opt = compile_and_bind(model, tmp_path / "out", names["gain"])

    for file in ("model.c", "model.h"):
        text = (out / file).read_text()
        assert text.isascii(), f"{file} has non-ASCII text"
        if forbidden is not None:
            assert forbidden not in text
            for name in list(names.values()) + [hostile_text]:
                assert name not in text
    # Beyond the host build's flags (already -Werror): comments, trigraphs and shadowing checked too.
    result = subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-pedantic",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wcomment",
            "-Wtrigraphs",
            "-Wshadow",
            "-Wdouble-promotion",
            "-fsyntax-only",
            str(out / "model.c"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr

    assert set(state.parameters.keys()) == {
        names[p] for p in ("fc0.weight", "fc0.bias", "gain", "fc1.weight", "fc1.bias")
    }
    got = run(state, module, opt, names)
    for a, b in zip(got, twin):  # bit for bit: names change nothing but the arena layout
        np.testing.assert_array_equal(a, b)

    api.CheckpointState.save_checkpoint(state, tmp_path / "ck", include_optimizer_state=True)
    reloaded = api.CheckpointState.load_checkpoint(tmp_path / "ck")
    assert list(reloaded.parameters.keys()) == list(state.parameters.keys())


def test_hostile_name_in_an_error_stays_one_line(tmp_path):
    name = "bad\nname */ \x00 #include <x>"
    model, _ = build(numbered(name + "{i}"), name)
    model.graph.node[1].op_type = "NoSuchOp"
    with pytest.raises(EdgetrainError) as err:
        artifacts.generate_artifacts(model, artifact_directory=tmp_path)
    message = str(err.value)
    assert "NoSuchOp" in message and "\n" not in message and "\x00" not in message
