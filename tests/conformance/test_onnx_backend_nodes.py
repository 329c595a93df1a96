"""ONNX's backend node test cases, run against the C that edgetrain generates.

The cases come from the generators that ship inside the `onnx` package
(onnx.backend.test.case.node), made in-process: each is one node with its inputs and the outputs
ONNX expects. cases.py lists every case of every op edgetrain supports, as run or excluded (with
why); the first test fails on a case it does not list.

Each case's node keeps its inputs as the op takes them: those the op needs at compile time
(the registry's const_inputs: axes, shapes, bounds; for an op compiled as its function body, its
integer inputs) become initializers, the others graph inputs
(integer and bool ones the C reads as int32; cases.py names the cases whose integer data run as
float32). The cases of one opset are merged into one model, names prefixed per case,
and compiled for inference only, so one gcc run covers them; each case is then its own test,
comparing its outputs from `infer` with ONNX's (integer and bool outputs exactly).

Tolerance: |C - ONNX| <= ATOL + RTOL * |ONNX| elementwise. RTOL = 1e-5 is about 80 float32 ulps:
room for sums accumulated in another order and for exp/log/tanh from et_math.h against ONNX's
NumPy values, and far below what a wrong index, pad or formula gives. ATOL = 5e-7, four ulps at
1.0, covers unit-scale results that cancel to about zero (the most any case needs is one ulp).
cases.py's TOLERANCE names the few cases whose expected values carry less precision than RTOL.
"""

from __future__ import annotations

import collections
import functools
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from edgetrain import artifacts
from edgetrain.errors import EdgetrainError
from edgetrain.host import load_library
from edgetrain.ops import REGISTRY

from .cases import CASES, FUNCTION_OPS, REWRITTEN_OPS, TOLERANCE, Refused

RTOL, ATOL = 1e-5, 5e-7
SUPPORTED = sorted({name for domain, name in REGISTRY if domain == ""} | FUNCTION_OPS | REWRITTEN_OPS)
INCLUDED = [name for cases in CASES.values() for name in cases.run]
AS_FLOAT32 = {name for cases in CASES.values() for name in cases.as_float32}
REFUSED = [
    (name, why.error) for cases in CASES.values() for name, why in cases.excluded.items() if isinstance(why, Refused)
]


@functools.cache
def backend_cases() -> dict[str, onnx.backend.test.case.test_case.TestCase]:
    """The node cases whose model is one node of an op edgetrain supports, by name. The
    `_expanded` variants run the op's function body, which is made of other ops: not included."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):  # generators overflow casts on purpose
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return {
        c.name: c
        for c in cases
        if "_expanded" not in c.name
        and len(c.model.graph.node) == 1
        and c.model.graph.node[0].domain in ("", "ai.onnx")
        and c.model.graph.node[0].op_type in SUPPORTED
    }


def op_of(case) -> str:
    return case.model.graph.node[0].op_type


def opset_of(case) -> int:
    return next(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))


def _const_inputs(case) -> frozenset[int]:
    """The input slots a case gives as initializers: the registry's const_inputs, and for an op
    compiled through other ops (its function body, or DFT's product), its integer inputs (axes,
    positions, lengths)."""
    node = case.model.graph.node[0]
    if ("", node.op_type) in REGISTRY:
        return REGISTRY[("", node.op_type)].const_inputs
    infos = {i.name: i for i in case.model.graph.input}
    return frozenset(
        slot
        for slot, name in enumerate(node.input)
        if name and infos[name].type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    )


def _fragment(case, tag: str):
    """The case's node, inputs, initializers and outputs, every name prefixed with `tag`."""
    node = onnx.NodeProto()
    node.CopyFrom(case.model.graph.node[0])
    rename = {n: f"{tag}_{n}" for n in list(node.input) + list(node.output) if n}
    node.input[:] = [rename.get(n, "") for n in node.input]
    node.output[:] = [rename.get(n, "") for n in node.output]
    node.name = tag
    as_float32 = case.name in AS_FLOAT32
    values, _ = case.data_sets[0]
    slots = [slot for slot, n in enumerate(case.model.graph.node[0].input) if n]
    infos = {i.name: i for i in case.model.graph.input}
    const_inputs = _const_inputs(case)
    inputs, initializers, feeds = [], [], []
    for slot, value in zip(slots, values):
        name = case.model.graph.node[0].input[slot]
        # data of a type NumPy has no dtype for (int4, float8): kept as written, refused anyway
        array = value if isinstance(value, onnx.TensorProto) else np.asarray(value)
        if slot not in const_inputs:
            info = onnx.ValueInfoProto()
            info.CopyFrom(infos[name])
            info.name = rename[name]
            if as_float32:
                array, info.type.tensor_type.elem_type = array.astype(np.float32), onnx.TensorProto.FLOAT
            inputs.append(info)
            feeds.append(array)
        elif isinstance(array, onnx.TensorProto):
            initializers.append(onnx.TensorProto())
            initializers[-1].CopyFrom(array)
            initializers[-1].name = rename[name]
        else:
            initializers.append(numpy_helper.from_array(array, rename[name]))
    outputs = []
    for info in case.model.graph.output:
        renamed = onnx.ValueInfoProto()
        renamed.CopyFrom(info)
        renamed.name = rename[info.name]
        if as_float32:
            renamed.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        outputs.append(renamed)
    return node, inputs, initializers, outputs, feeds


def merge(names: list[str]) -> tuple[onnx.ModelProto, list[list[np.ndarray]], list[int]]:
    """One model running the named cases side by side; per case, its input arrays and output count."""
    cases = [backend_cases()[n] for n in names]
    nodes, inputs, initializers, outputs, feeds, n_outputs = [], [], [], [], [], []
    for index, case in enumerate(cases):
        node, ins, inits, outs, case_feeds = _fragment(case, f"c{index}")
        nodes.append(node)
        inputs += ins
        initializers += inits
        outputs += outs
        feeds.append(case_feeds)
        n_outputs.append(len(outs))
    graph = helper.make_graph(nodes, "backend_cases", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=list(cases[0].model.opset_import))
    model.ir_version = max(c.model.ir_version for c in cases)
    return model, feeds, n_outputs


def run_batch(names: list[str], directory: Path) -> dict[str, list[np.ndarray] | str]:
    """Each case's outputs from the generated C, or the one-line error that stopped it. A batch
    that fails to compile is split until the failing cases stand alone."""
    model, feeds, n_outputs = merge(names)
    try:
        ffi, lib = load_library(artifacts.generate_inference(model, directory / names[0]))
    except Exception as exc:  # an EdgetrainError, or a compiler bug that fails only the cases it hits
        if len(names) == 1:
            return {names[0]: f"{type(exc).__name__}: {exc}"}
        half = len(names) // 2
        return run_batch(names[:half], directory) | run_batch(names[half:], directory)
    args = [
        ffi.from_buffer("float[]", np.ascontiguousarray(a))
        if a.dtype == np.float32
        else ffi.from_buffer("int32_t[]", np.ascontiguousarray(a, np.int32))
        for case in feeds
        for a in case
    ]
    # Integer and bool outputs come back as int32, as the C keeps them.
    results = [
        np.zeros(
            [d.dim_value for d in o.type.tensor_type.shape.dim],
            np.float32 if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT else np.int32,
        )
        for o in model.graph.output
    ]
    status = lib.model_infer(
        lib.MODEL_MAX_BATCH,
        *args,
        *[ffi.from_buffer("float[]" if r.dtype == np.float32 else "int32_t[]", r) for r in results],
    )
    if status != 0:
        return {name: f"infer returned status {status}" for name in names}
    got, at = {}, 0
    for name, count, case_feeds in zip(names, n_outputs, feeds):
        # A case without run-time inputs folds at compile time: the C would compute nothing.
        got[name] = results[at : at + count] if case_feeds else "no run-time input"
        at += count
    return got


@pytest.fixture(scope="module")
def c_outputs(tmp_path_factory) -> dict[str, list[np.ndarray] | str]:
    """Every included case run through the generated C: one build per opset the cases use."""
    by_opset = collections.defaultdict(list)
    for name in INCLUDED:
        by_opset[opset_of(backend_cases()[name])].append(name)
    outputs = {}
    for opset, names in by_opset.items():
        outputs |= run_batch(names, tmp_path_factory.mktemp(f"opset{opset}"))
    return outputs


def test_table_lists_every_case_of_every_supported_op():
    collected = {name: op_of(case) for name, case in backend_cases().items()}
    listed = collections.Counter((name, op) for op, cases in CASES.items() for name in cases.listed)
    missing = sorted(set(collected.items()) - set(listed))
    assert not missing, f"cases of supported ops missing from cases.py (case, op): {missing}"
    stale = sorted(set(listed) - set(collected.items()))
    assert not stale, f"cases.py lists cases onnx does not generate for that op: {stale}"
    assert not [name for name, count in listed.items() if count > 1], "cases listed twice"
    assert set(TOLERANCE) <= set(INCLUDED), "a tolerance for a case that does not run"
    assert all(rtol > RTOL for rtol, _ in TOLERANCE.values())


@pytest.mark.parametrize("name", INCLUDED)
def test_case_matches_onnx(name, c_outputs):
    got = c_outputs[name]
    assert not isinstance(got, str), got
    rtol = TOLERANCE.get(name, (RTOL, ""))[0]
    for index, (ours, want) in enumerate(zip(got, backend_cases()[name].data_sets[0][1], strict=True)):
        if ours.dtype == np.int32:  # integers and bools: exactly
            np.testing.assert_array_equal(ours, np.asarray(want).astype(np.int64), err_msg=f"{name} output {index}")
        else:
            np.testing.assert_allclose(ours, want, rtol=rtol, atol=ATOL, err_msg=f"{name} output {index}")


@pytest.mark.parametrize("name, error", REFUSED)
def test_refused_case_is_refused_in_one_line(name, error, tmp_path):
    with pytest.raises(EdgetrainError, match=re.escape(error)) as refused:
        artifacts.generate_inference(merge([name])[0], tmp_path)
    assert "\n" not in str(refused.value)
