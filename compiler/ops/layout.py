"""DepthToSpace and SpaceToDepth (both modes): each moves NCHW blocks as a Transpose of a 6-D view of
its input, and each one's gradient is the other's permutation with the same mode and block size."""

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .registry import op


def _mode(node) -> str:
    mode = node.attr("mode", "DCR")  # SpaceToDepth has a mode from opset 28; before it, DCR
    if mode not in ("DCR", "CRD"):
        raise EdgetrainError(f"node '{node.name}' ({node.op}): mode '{mode}' is neither DCR nor CRD")
    return mode


def _layout(shape, b: int, mode: str, to_space: bool):
    """(6-D view of X, its permutation into Y's order, Y's shape). DCR numbers the channels
    block-row, block-column, channel; CRD channel, block-row, block-column."""
    n, c, h, w = shape
    if to_space:
        depth = c // (b * b)
        if mode == "DCR":
            return (n, b, b, depth, h, w), (0, 3, 4, 1, 5, 2), (n, depth, h * b, w * b)
        return (n, depth, b, b, h, w), (0, 1, 4, 2, 5, 3), (n, depth, h * b, w * b)
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return (n, c, h // b, b, w // b, b), perm, (n, c * b * b, h // b, w // b)


def _block_ops(name: str, inverse: str, to_space: bool):
    """Register ONNX op `name` and its twin in our domain, which takes a mode at every opset (the
    gradient of SpaceToDepth in CRD mode is DepthToSpace in CRD mode, and the reverse)."""

    class Block:
        @staticmethod
        def kernel(k, node):
            view, perm, _ = _layout(k.shape(node.inputs[0]), int(node.attr("blocksize")), _mode(node), to_space)
            return [k.call("et_transpose_f32", len(view), view, perm, node.inputs[0], node.outputs[0])]

        @staticmethod
        def grad(g, node, dy):
            attrs = {"blocksize": int(node.attr("blocksize")), "mode": _mode(node)}
            return [g.emit(inverse, [dy[0]], attrs, domain=ET_DOMAIN)]

    class Twin(Block):
        @staticmethod
        def shape(graph, node):
            return [_layout(graph.shape(node.inputs[0]), int(node.attr("blocksize")), _mode(node), to_space)[2]]

        @staticmethod
        def reference(x, blocksize, mode):
            view, perm, out = _layout(x.shape, blocksize, mode, to_space)
            return (x.reshape(view).transpose(perm).reshape(out),)

    op(name)(Block)
    op(name, domain=ET_DOMAIN)(Twin)


_block_ops("DepthToSpace", "SpaceToDepth", to_space=True)
_block_ops("SpaceToDepth", "DepthToSpace", to_space=False)
