"""Ops that ONNX defines as functions of other ops, which edgetrain compiles as the function's body
(frontend/load.py, _expand_function_ops): Attention, RMSNormalization and RotaryEmbedding (opset
23, where torch's exporter writes scaled_dot_product_attention and RMSNorm so: one case exports
such a block), GroupNormalization (21), Swish (24), MeanVarianceNormalization, ReduceSumSquare,
ReduceL1, Shrink and ThresholdedRelu. Gradients of the generated C against torch autograd, then
training_model.onnx through onnx.reference against the C (gradcheck's harness).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from gradcheck import (
    Cases,
    check_graph_gradients,
    check_module_gradients,
    exported_by_dynamo,
    i64,
    normal,
    outside0,
    positive,
    run_case,
)

torch = pytest.importorskip("torch")

F = torch.nn.functional

CASES = Cases()
case = CASES.op


# ---- Attention (opset 23): 4-D [batch, heads, sequence, head size] and 3-D [batch, sequence, heads x size] ----
case(
    "4d",
    "Attention",
    {"Q": (2, 2, 3, 4), "K": (2, 2, 5, 4), "V": (2, 2, 5, 4)},
    F.scaled_dot_product_attention,
    opset=23,
)
case(
    "4d-causal",
    "Attention",
    {"Q": (2, 2, 4, 4), "K": (2, 2, 4, 4), "V": (2, 2, 4, 4)},
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    attrs={"is_causal": 1},
    opset=23,
)
case(
    "4d-float-mask-scale",
    "Attention",
    {"Q": (2, 2, 3, 4), "K": (2, 2, 5, 4), "V": (2, 2, 5, 4), "bias": (3, 5)},  # a float mask
    lambda q, k, v, bias: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3),
    attrs={"scale": 0.3},
    opset=23,
)
_KEEP = np.array([[True, True, False, True, False], [True, False, True, True, True], [False, True, True, True, True]])
case(
    "4d-bool-mask",
    "Attention",
    {"Q": (2, 2, 3, 4), "K": (2, 2, 5, 4), "V": (2, 2, 5, 4)},
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(_KEEP)),
    consts={"attn_mask": _KEEP},
    opset=23,
)


def _heads(x, heads):
    """[batch, sequence, heads x size] -> [batch, heads, sequence, size]."""
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)


def _grouped_query_attention(q, k, v):
    y = F.scaled_dot_product_attention(_heads(q, 4), _heads(k, 2), _heads(v, 2), enable_gqa=True)
    return y.transpose(1, 2).reshape(q.shape[0], q.shape[1], -1)


case(
    "3d-grouped-query",
    "Attention",
    {"Q": (2, 3, 16), "K": (2, 5, 8), "V": (2, 5, 8)},
    _grouped_query_attention,
    attrs={"q_num_heads": 4, "kv_num_heads": 2},
    opset=23,
)

# ---- RMSNormalization (23), RotaryEmbedding (23), GroupNormalization (21), Swish (24) ----
case(
    "last-axis",
    "RMSNormalization",
    {"X": (2, 3, 4), "scale": (4,)},
    lambda x, s: F.rms_norm(x, (4,), s, eps=1e-5),
    opset=23,
)
case(
    "from-axis-1",
    "RMSNormalization",
    {"X": (2, 3, 4), "scale": (3, 4)},
    lambda x, s: F.rms_norm(x, (3, 4), s, eps=1e-3),
    attrs={"axis": 1, "epsilon": 1e-3},
    opset=23,
)


def _rotate(x, cos, sin):
    """Rotary embedding of the first and second halves of the last axis (not interleaved)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


case(
    "4d-cache-per-position",
    "RotaryEmbedding",
    {"X": (2, 2, 3, 4), "cos_cache": (2, 3, 2), "sin_cache": (2, 3, 2)},
    lambda x, c, s: _rotate(x, c[:, None], s[:, None]),
    opset=23,
)
_POSITIONS = i64([0, 1, 2], [2, 4, 3])
case(
    "3d-position-ids",
    "RotaryEmbedding",
    {"X": (2, 3, 8), "cos_cache": (5, 2), "sin_cache": (5, 2)},
    lambda x, c, s: (
        _rotate(_heads(x, 2), c[torch.tensor(_POSITIONS)][:, None], s[torch.tensor(_POSITIONS)][:, None])
        .transpose(1, 2)
        .reshape(2, 3, 8)
    ),
    consts={"position_ids": _POSITIONS},
    attrs={"num_heads": 2},
    opset=23,
)


def _group_normalization(tmp_path, rng, opset: int) -> float:
    """GroupNormalization (21) of w * x, x a graph input (onnx's shape inference of the op fails when
    its input is an initializer): the gradients of its scale and bias, and through it of w. In an
    opset-23 model, its opset-21 body is converted to opset 23 first."""
    x = rng.normal(size=(2, 4, 3, 3)).astype(np.float32)
    params = {
        name: rng.normal(size=shape).astype(np.float32)
        for name, shape in [("w", (4, 1, 1)), ("scale", (4,)), ("bias", (4,))]
    }
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["xw"]),
        helper.make_node("GroupNormalization", ["xw", "scale", "bias"], ["Y"], num_groups=2),
    ]
    graph = helper.make_graph(
        nodes,
        "group_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, x.shape)],
        [numpy_helper.from_array(v, k) for k, v in params.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return check_graph_gradients(
        model, params, lambda x, w, scale, bias: F.group_norm(x * w, 2, scale, bias, eps=1e-5), tmp_path, rng, {"x": x}
    )


for _opset in (21, 23):
    CASES.check(f"GroupNormalization-per-channel-opset{_opset}", functools.partial(_group_normalization, opset=_opset))
case("alpha", "Swish", {"X": (3, 4)}, lambda x: x * torch.sigmoid(1.5 * x), attrs={"alpha": 1.5}, opset=24)

# ---- Older function ops ----


def _mean_variance_normalization(x):
    mean = x.mean((0, 2, 3), keepdim=True)
    return (x - mean) / (torch.sqrt((x * x).mean((0, 2, 3), keepdim=True) - mean * mean) + 1e-9)


case(
    "axes-0-2-3",
    "MeanVarianceNormalization",
    {"X": (2, 3, 4, 2)},
    _mean_variance_normalization,
    attrs={"axes": [0, 2, 3]},
)
case("axis-1", "ReduceSumSquare", {"X": (3, 4)}, lambda x: (x * x).sum(1, keepdim=True), consts={"axes": i64(1)})
case("axis-0", "ReduceL1", {"X": outside0((3, 4))}, lambda x: x.abs().sum(0, keepdim=True), consts={"axes": i64(0)})
case(
    "lambd-bias",
    "Shrink",
    {"X": normal((3, 4), 2.0, avoid=(-0.5, 0.5))},
    lambda x: torch.where(x < -0.5, x + 0.2, torch.where(x > 0.5, x - 0.2, torch.zeros_like(x))),
    attrs={"lambd": 0.5, "bias": 0.2},
)
case(
    "alpha",
    "ThresholdedRelu",
    {"X": normal((3, 4), 2.0, avoid=(0.7,))},
    lambda x: torch.where(x > 0.7, x, torch.zeros_like(x)),
    attrs={"alpha": 0.7},
)
case(
    "positive", "ReduceSumSquare", {"X": positive((2, 3))}, lambda x: (x * x).sum().reshape(1, 1), consts={"axes": None}
)


class _Block(torch.nn.Module):
    """Self-attention through scaled_dot_product_attention, then an RMSNorm: what torch's dynamo
    exporter writes as Attention and RMSNormalization at opset 23."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.norm = torch.nn.RMSNorm(8, eps=1e-5)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x):
        q, k, v = (_heads(t, 2) for t in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(x.shape)
        return self.out(self.norm(y + x))


def _exported_at_opset_23(tmp_path, rng) -> float:
    """The block exported by dynamo at opset 23 trains with PyTorch's gradients."""
    torch.manual_seed(int(rng.integers(2**31)))
    net, x = _Block(), torch.randn(2, 5, 8)
    model = exported_by_dynamo(net, x, tmp_path / "block.onnx", opset_version=23)
    assert {"Attention", "RMSNormalization"} <= {n.op_type for n in model.graph.node}
    return check_module_gradients(net, x, model, tmp_path, rng)


CASES.check("dynamo-opset-23-attention-rmsnorm", _exported_at_opset_23)


@pytest.mark.parametrize("spec", CASES)
def test_function_op_gradients(spec, tmp_path, request):
    run_case(spec, tmp_path, request)
