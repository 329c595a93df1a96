"""IR -> ONNX, so every graph the compiler builds can be checked and executed independently."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .graph import ET_DOMAIN, Graph, Node


def _info(graph: Graph, name: str) -> onnx.ValueInfoProto:
    value = graph.values[name]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)


def _attributes(node: Node) -> dict[str, Any]:
    """The node's attributes as onnx.helper takes them: lists where the IR keeps tuples."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in node.attrs.items()}


def to_onnx(
    graph: Graph,
    nodes: list[Node],
    inputs: list[str],
    outputs: list[str],
    initializers: dict[str, np.ndarray],
    name: str,
    renames: dict[str, str] | None = None,
) -> onnx.ModelProto:
    """A model computing `outputs` from `inputs`; `renames` gives some outputs public names
    (such as "<param>_grad") through Identity nodes."""
    used = {n for node in nodes for n in node.inputs if n}
    consts = {n: a for n, a in graph.constants.items() if n in used}
    protos = [
        helper.make_node(n.op, [i for i in n.inputs], list(n.outputs), name=n.name, domain=n.domain, **_attributes(n))
        for n in nodes
    ]
    out_names = []
    for out in outputs:
        public = (renames or {}).get(out, out)
        if public != out:
            protos.append(helper.make_node("Identity", [out], [public]))
        out_names.append(public)
    value_infos = [
        _info(graph, n)
        for n in sorted({o for node in nodes for o in node.outputs if o})
        if n in graph.values and n not in outputs
    ]
    out_infos = []
    for out, public in zip(outputs, out_names):
        info = _info(graph, out)
        info.name = public
        out_infos.append(info)
    g = helper.make_graph(
        protos,
        name,
        [_info(graph, n) for n in inputs],
        out_infos,
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in {**consts, **initializers}.items()],
        value_info=value_infos,
    )
    opsets = [helper.make_opsetid("", graph.opset), helper.make_opsetid(ET_DOMAIN, 1)]
    model = helper.make_model(g, opset_imports=opsets, producer_name="edgetrain")
    model.ir_version = min(model.ir_version, 10)  # readable by onnxruntime releases still in the field
    return model
