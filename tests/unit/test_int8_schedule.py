"""trainer/integer.early_weight_chains: a quantized weight's straight-through gradients move up to
just after what they read, and never ahead of another reader of their input (each runs in place of
it), so a trained int8 weight's gradient dies as soon as its parameter has it."""

from __future__ import annotations

from edgetrain.ir import ET_DOMAIN, Node
from edgetrain.trainer.integer import early_weight_chains


def _node(op: str, inputs: tuple[str, ...], output: str) -> Node:
    return Node(op, inputs, (output,), {}, output, ET_DOMAIN)


FORWARD = [_node("QuantizedConv", ("x_q",), "y_q")]
BACKWARD = [
    _node("ConvGradWQuantized", ("dy", "x_q"), "dw"),
    _node("Sum", ("dw", "other"), "reads_dw"),  # another reader of dW: the chain must wait for it
    _node("DequantizeLinear", ("w_q",), "w"),
    _node("ConvGradXInPlace", ("dy", "w"), "dx"),
    _node("ReluGrad", ("dx", "mask"), "dx2"),
    _node("DequantizeLinearGrad", ("dw", "w_scale"), "dw_q"),
    _node("QuantizeLinearGrad", ("dw_q", "w_mask", "w_scale"), "w_grad"),
]


def test_weight_chain_runs_as_soon_as_its_input_is_ready():
    order = [n.outputs[0] for n in early_weight_chains(FORWARD + BACKWARD, len(FORWARD))]
    assert order == ["y_q", "dw", "reads_dw", "dw_q", "w_grad", "w", "dx", "dx2"]


def test_nothing_moves_without_a_weight_chain():
    nodes = FORWARD + BACKWARD[:5]
    assert early_weight_chains(nodes, len(FORWARD)) == nodes
