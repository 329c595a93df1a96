"""Gemm and MatMul (batched, broadcasting, 1-D operands as in NumPy)."""

import numpy as np

from .registry import broadcast_strides, op


@op("Gemm")
class Gemm:
    @staticmethod
    def kernel(k, node):
        a, b, c = (tuple(node.inputs) + ("",))[:3]
        y = node.outputs[0]
        trans_a, trans_b = int(node.attr("transA", 0)), int(node.attr("transB", 0))
        m, n = k.shape(y)
        kdim = k.shape(a)[0 if trans_a else 1]
        c_rs, c_cs = broadcast_strides(k.shape(c), (m, n)) if c else (0, 0)
        return [
            k.call(
                "et_gemm_f32",
                m,
                n,
                kdim,
                float(node.attr("alpha", 1.0)),
                a,
                trans_a,
                b,
                trans_b,
                float(node.attr("beta", 1.0)),
                c or None,
                c_rs,
                c_cs,
                y,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        # Y = alpha * A' B' + beta * C with A' = A^T if transA (likewise B'):
        # dA' = alpha * dY B'^T and dB' = alpha * A'^T dY, transposed back where the input was.
        a, b = node.inputs[:2]
        ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
        alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
        d = dy[0]
        da = db = dc = None
        if g.needs(0):
            da = (
                g.emit("Gemm", [b, d], {"alpha": alpha, "transA": tb, "transB": 1})
                if ta
                else g.emit("Gemm", [d, b], {"alpha": alpha, "transB": 1 - tb})
            )
        if g.needs(1):
            db = (
                g.emit("Gemm", [d, a], {"alpha": alpha, "transA": 1, "transB": ta})
                if tb
                else g.emit("Gemm", [a, d], {"alpha": alpha, "transA": 1 - ta})
            )
        if len(node.inputs) > 2 and node.inputs[2] and g.needs(2):
            dc = d if beta == 1.0 else g.emit("Mul", [d, g.const(np.float32(beta))])
        return [da, db, dc]


def _matmul_views(a_shape, b_shape):
    """NumPy matmul as a batch of (M,K)x(K,N) products: 1-D operands gain a unit axis."""
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    return a2, b2, batch


@op("MatMul")
class MatMul:
    @staticmethod
    def kernel(k, node):
        a, b = node.inputs
        a2, b2, batch = _matmul_views(k.shape(a), k.shape(b))
        m, kdim, n = a2[-2], a2[-1], b2[-1]
        a_strides = tuple(s * m * kdim for s in broadcast_strides(a2[:-2], batch))
        b_strides = tuple(s * kdim * n for s in broadcast_strides(b2[:-2], batch))
        return [
            k.call(
                "et_matmul_f32",
                len(batch),
                batch or (0,),
                a_strides or (0,),
                b_strides or (0,),
                m,
                n,
                kdim,
                a,
                b,
                node.outputs[0],
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        a, b = node.inputs
        a2, b2, batch = _matmul_views(g.shape(a), g.shape(b))

        def swap(x, rank):
            return g.emit("Transpose", [x], {"perm": list(range(rank - 2)) + [rank - 1, rank - 2]})

        d = g.reshape(dy[0], batch + (a2[-2], b2[-1]))
        da = db = None
        if g.needs(0):
            da = g.emit("MatMul", [d, swap(g.reshape(b, b2), len(b2))])
            da = g.reshape(g.reduce_to(da, a2), g.shape(a))
        if g.needs(1):
            db = g.emit("MatMul", [swap(g.reshape(a, a2), len(a2)), d])
            db = g.reshape(g.reduce_to(db, b2), g.shape(b))
        return [da, db]
