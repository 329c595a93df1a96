"""Einsum. Equations that are batched matrix products (what attention and exporters write:
"bhid,bhjd->bhij", "bij,bjk->bik", "...ij,...jk->...ik") run on the Gemm kernels, permutations on
Transpose's, anything else on one strided contraction (et_einsum.h). An operand's gradient is again
an Einsum: dY contracted with the other operands."""

import string

import numpy as np

from ..errors import EdgetrainError
from .registry import at_least_1d, contiguous_strides, op

MAX_OPERANDS = 3  # et_einsum_f32's A, B and C


def parse(node, shapes) -> tuple[list[str], str, dict[str, int]]:
    """Each operand's letters and the output's, with '...' spelled out in letters of its own, and
    every letter's extent. An ellipsis axis of extent 1 that broadcasts against a longer one gets a
    letter only its operand has."""
    equation = str(node.attr("equation")).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise EdgetrainError(
            f"Einsum node '{node.name}': equation '{equation}' names {len(terms)} operands, the node has {len(shapes)}"
        )
    spare = iter(c for c in string.ascii_letters if c not in equation)
    ellipses = [
        tuple(shape[: len(shape) - len(term.replace("...", ""))]) if "..." in term else ()
        for term, shape in zip(terms, shapes)
    ]
    broadcast = np.broadcast_shapes(*ellipses)
    shared = "".join(next(spare) for _ in broadcast)
    operands: list[str] = []
    extents: dict[str, int] = {}
    for term, shape, dims in zip(terms, shapes, ellipses):
        lead = len(broadcast) - len(dims)
        own = "".join(shared[lead + i] if d == broadcast[lead + i] else next(spare) for i, d in enumerate(dims))
        letters = term.replace("...", own)
        if len(letters) != len(shape):
            raise EdgetrainError(f"Einsum node '{node.name}': term '{term}' does not fit an operand of shape {shape}")
        for c, d in zip(letters, shape):
            if extents.setdefault(c, d) != d:
                raise EdgetrainError(f"Einsum node '{node.name}': letter '{c}' has extents {extents[c]} and {d}")
        operands.append(letters)
    if arrow:
        output = rhs.replace("...", shared)
    else:  # implicit: the broadcast axes, then the letters that appear once, alphabetically
        named = lhs.replace("...", "").replace(",", "")
        output = shared + "".join(sorted(c for c in set(named) if named.count(c) == 1))
    return operands, output, extents


def _strides(letters, shape, order) -> tuple[int, ...]:
    """Element strides of an operand along the letters `order`: 0 for a letter it lacks, the sum
    over its axes for a repeated one (letters of extent 1, left out of `order`, address nothing)."""
    step = dict.fromkeys(order, 0)
    for c, s in zip(letters, contiguous_strides(shape)):
        if c in step:
            step[c] += s
    return tuple(step[c] for c in order)


def _gemm(a, b, y, extents):
    """(batch, M, N, K, trans_a, trans_b) with Y = A B as a batch of matrix products over contiguous
    operands, or None. Letters are already distinct and of extent > 1."""
    batch = "".join(c for c in y if c in a and c in b)
    m, n = "".join(c for c in y if c in a and c not in b), "".join(c for c in y if c in b and c not in a)
    inner = "".join(c for c in a if c in b and c not in y)
    if y != batch + m + n or set(a + b) != set(y + inner):
        return None

    def size(letters):
        return int(np.prod([extents[c] for c in letters], dtype=np.int64))

    for trans_a, layout_a in enumerate((batch + m + inner, batch + inner + m)):
        for trans_b, layout_b in enumerate((batch + inner + n, batch + n + inner)):
            if a == layout_a and b == layout_b:
                return size(batch), size(m), size(n), size(inner), trans_a, trans_b
    return None


@op("Einsum")
class Einsum:
    @staticmethod
    def kernel(k, node):
        names, y = node.inputs, node.outputs[0]
        shapes = [k.shape(n) for n in names]
        operands, output, extents = parse(node, shapes)
        if len(set(output)) != len(output):
            raise EdgetrainError(f"Einsum node '{node.name}': output letters '{output}' repeat")
        if len(operands) == 1 and sorted(operands[0]) == sorted(output) and len(set(output)) == len(output):
            perm = tuple(operands[0].index(c) for c in output)
            if perm == tuple(sorted(perm)):
                return [k.call("et_copy_f32", k.size(y), names[0], y)]
            return [k.call("et_transpose_f32", len(perm), shapes[0], perm, names[0], y)]

        # Axes of extent 1 address nothing: without them, layouts compare on the axes that matter.
        def drop(letters):
            return "".join(c for c in letters if extents[c] != 1)

        if len(operands) == 2 and all(len(set(drop(t))) == len(drop(t)) for t in operands):
            for (a, b), (x1, x2) in (((0, 1), names), ((1, 0), names[::-1])):
                plan = _gemm(drop(operands[a]), drop(operands[b]), drop(output), extents)
                if plan:
                    batch, m, n, depth, trans_a, trans_b = plan
                    return [k.call("et_einsum_gemm_f32", batch, m, n, depth, x1, trans_a, x2, trans_b, y)]
        if len(operands) > MAX_OPERANDS:
            raise EdgetrainError(
                f"Einsum node '{node.name}' has {len(operands)} operands; edgetrain contracts up "
                f"to {MAX_OPERANDS} at once"
            )
        free = drop(output)
        summed = "".join(dict.fromkeys(c for t in operands for c in drop(t) if c not in output))
        if max(len(free), len(summed)) > 8:  # ET_MAX_RANK
            raise EdgetrainError(f"Einsum node '{node.name}' has more than 8 output or summed letters")
        args = []
        for i in range(MAX_OPERANDS):
            if i < len(operands):
                strides = _strides(operands[i], shapes[i], free + summed)
                args += [at_least_1d(strides[: len(free)]) + at_least_1d(strides[len(free) :]), names[i]]
            else:
                args += [None, None]
        return [
            k.call(
                "et_einsum_f32",
                max(len(free), 1),
                at_least_1d(tuple(extents[c] for c in free)),
                max(len(summed), 1),
                at_least_1d(tuple(extents[c] for c in summed)),
                *args,
                y,
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        operands, output, extents = parse(node, [g.shape(n) for n in node.inputs])
        grads = []
        for i, name in enumerate(node.inputs):
            if not g.needs(i):
                grads.append(None)
                continue
            terms = [output] + operands[:i] + operands[i + 1 :]
            inputs = [dy[0]] + list(node.inputs[:i] + node.inputs[i + 1 :])
            # A letter repeated in the operand (a diagonal) is a fresh letter at each repeat, tied to
            # the first by an identity matrix.
            spare = iter(c for c in string.ascii_letters if c not in "".join(terms) + operands[i])
            target = ""
            for c in operands[i]:
                if c in target:
                    fresh = next(spare)
                    extents[fresh] = extents[c]
                    terms.append(c + fresh)
                    inputs.append(g.const(np.eye(extents[c], dtype=np.float32)))
                    c = fresh
                target += c
            # Letters only this operand has (summed away, or broadcast) come out of no contraction:
            # the result is expanded along them.
            have = set("".join(terms))
            d = g.emit("Einsum", inputs, {"equation": ",".join(terms) + "->" + "".join(c for c in target if c in have)})
            d = g.reshape(d, [extents[c] if c in have else 1 for c in target])
            if g.shape(d) != g.shape(name):
                d = g.emit("Expand", [d, g.ints(g.shape(name))])
            grads.append(d)
        return grads
