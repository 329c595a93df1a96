"""Random ops: RandomUniform, RandomNormal, their *Like forms, and Bernoulli.

The training graph runs our seeded forms, which draw from the counter-based RNG of training-mode
Dropout (runtime_c/et_random.h): element i of a node's output is a function of the node's seed,
the trainer's step counter and i, so every target, a resumed run and the NumPy references below
draw the same bits, and every training step draws new ones. The eval and inference graphs put
each random value's mean in its place, written as plain ONNX (Expand of the mean, or Bernoulli's
probability itself), so torchvision's stochastic depth, x * (bernoulli(p) / p), is exactly x there.
No gradient flows through a random value, nor into Bernoulli's probability.
"""

import numpy as np

from ..errors import EdgetrainError
from ..ir import COUNTER, ET_DOMAIN, Node
from ..ir.graph import frozen_attrs
from .registry import Counter, op


def _hash(h):
    """et_hash_u32 (murmur3 fmix32) on uint32 arrays."""
    h = np.asarray(h, np.uint32)
    with np.errstate(over="ignore"):  # uint32 products wrap, as in C
        h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
        h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _bits(shape, seed, counter):
    """et_random_bits_ for every element of `shape`."""
    i = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint32)
    return _hash(np.uint32(seed & 0xFFFFFFFF) ^ _hash(np.uint32(int(counter) & 0xFFFFFFFF) ^ _hash(i)))


def _unit(h):
    return (h >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def _logf(x):
    """et_logf's float32 operations, in its order, for normal positive x (all the polar method meets)."""
    ix = x.view(np.uint32)
    e = (ix >> np.uint32(23)).astype(np.int32) - 127
    m = ((ix & np.uint32(0x007FFFFF)) | np.uint32(0x3F800000)).view(np.float32)
    big = m > np.float32(1.41421356237)
    m = np.where(big, m * np.float32(0.5), m)
    f = m - np.float32(1)
    fe = (e + big).astype(np.float32)
    z = f * f
    p = np.full_like(f, np.float32(7.0376836292e-2))
    for c in (
        -1.1514610310e-1,
        1.1676998740e-1,
        -1.2420140846e-1,
        1.4249322787e-1,
        -1.6668057665e-1,
        2.0000714765e-1,
        -2.4999993993e-1,
        3.3333331174e-1,
    ):
        p = p * f + np.float32(c)
    y = p * f * z
    y = y + fe * np.float32(-2.12194440e-4)
    y = y + np.float32(-0.5) * z
    return (f + y) + fe * np.float32(0.693359375)


_POLAR_TRIES = 32  # ET_POLAR_TRIES


def _normal(h):
    """et_normal_f32_ on uint32 arrays: the polar method, try j from the bits hashed with 2j+1, 2j+2."""
    out, todo = np.zeros(h.shape, np.float32), np.ones(h.shape, bool)
    for j in range(1, 2 * _POLAR_TRIES, 2):
        v1 = np.float32(2) * _unit(_hash(h ^ _hash(np.uint32(j)))) - np.float32(1)
        v2 = np.float32(2) * _unit(_hash(h ^ _hash(np.uint32(j + 1)))) - np.float32(1)
        s = v1 * v1 + v2 * v2
        take = todo & (s < np.float32(1)) & (s > np.float32(0))
        s = np.where(take, s, np.float32(0.5))
        out = np.where(take, v1 * np.sqrt(np.float32(-2) * _logf(s) / s), out)
        todo &= ~take
        if not todo.any():
            break
    return out


def _seed(node, index: int) -> int:
    """The node's stream, as a C int (the kernel reads it as uint32). Without a `seed` attribute,
    the node's position among the model's compute nodes, as Dropout's, so no two random nodes share
    a stream; with one, its float32 bits hashed, so seed 0.0 is not the stream of the node at 0."""
    seed = node.attr("seed")
    s = index if seed is None else int(_hash(np.float32(seed).view(np.uint32) ^ np.uint32(0x9E3779B9)))
    return s - (1 << 32) if s >= 1 << 31 else s


def _float32_only(graph, node):
    dtype = graph.values[node.outputs[0]].dtype
    if dtype != np.float32:
        raise EdgetrainError(
            f"node '{node.name}' ({node.op}) draws {dtype} values; only float32 random "
            "values are supported (dtype attribute)"
        )


def _counter(graph) -> str:
    if COUNTER not in graph.values:
        graph.add_value(COUNTER, (), np.int64)
    return COUNTER


# The draws as models write them -> (our seeded op that draws them in training, their two
# parameters, by default 0 and 1).
DRAWS = {
    "RandomUniform": ("RandomUniformTraining", ("low", "high")),
    "RandomUniformLike": ("RandomUniformTraining", ("low", "high")),
    "RandomNormal": ("RandomNormalTraining", ("mean", "scale")),
    "RandomNormalLike": ("RandomNormalTraining", ("mean", "scale")),
}


def draw_parameters(op_type: str, attr) -> tuple[float, float]:
    """A draw's (low, high) or (mean, scale), `attr(name, default)` reading its attributes."""
    first, second = DRAWS[op_type][1]
    return float(attr(first, 0.0)), float(attr(second, 1.0))


def eval_mean(op_type: str, attr) -> float:
    """The value a draw takes in eval and inference: its distribution's mean."""
    a, b = draw_parameters(op_type, attr)
    return (a + b) / 2 if DRAWS[op_type][0] == "RandomUniformTraining" else a


def _fill_variant(graph, node, index, training):
    """variant of RandomUniform(Like) / RandomNormal(Like): our seeded op in training, else Expand
    of the mean."""
    _float32_only(graph, node)
    y = node.outputs[0]
    kind, params = DRAWS[node.op]
    if training:
        a, b = draw_parameters(node.op, node.attr)
        attrs = {"shape": graph.shape(y), params[0]: a, params[1]: b, "seed": _seed(node, index)}
        return Node(kind, (_counter(graph),), (y,), frozen_attrs(attrs), node.name, ET_DOMAIN)
    shape = graph.add_constant(np.array(graph.shape(y), np.int64), "shape")
    mean = graph.add_constant(np.array(eval_mean(node.op, node.attr), np.float32), "mean")
    return Node("Expand", (mean, shape), (y,), name=node.name)


# As the model writes them, these are never lowered: the variant replaces them in every graph.
for _name in DRAWS:
    op(_name)(type(_name, (), {"kernel": None, "variant": staticmethod(_fill_variant)}))


@op("Bernoulli")
class Bernoulli:
    kernel = None  # never lowered: the variant replaces it in every graph

    @staticmethod
    def variant(graph, node, index, training):
        _float32_only(graph, node)
        if training:
            return Node(
                "BernoulliTraining",
                (node.inputs[0], _counter(graph)),
                node.outputs,
                frozen_attrs({"seed": _seed(node, index)}),
                node.name,
                ET_DOMAIN,
            )
        return Node("Identity", node.inputs, node.outputs, name=node.name)


def _draw_op(name, fn, params, value):
    """Register our op `name`: (counter) -> values of the node's `shape`, value(a, b, bits) for the
    node's attributes `params` = (a, b) and each element's bits; kernel fn(n, a, b, seed, counter, Y)."""

    class Draw:
        @staticmethod
        def kernel(k, node):
            a, b = (float(node.attr(p)) for p in params)
            return [k.call(fn, k.size(node.outputs[0]), a, b, int(node.attr("seed")), Counter(), node.outputs[0])]

        @staticmethod
        def shape(graph, node):
            return [tuple(node.attr("shape"))]

        @staticmethod
        def reference(counter, shape, seed, **attrs):
            return (value(*(np.float32(attrs[p]) for p in params), _bits(shape, seed, counter)).reshape(shape),)

    op(name, domain=ET_DOMAIN)(Draw)


# low + (high - low) * u, u uniform on [0, 1); mean + scale * z, z standard normal
_draw_op(
    "RandomUniformTraining",
    "et_random_uniform_f32",
    ("low", "high"),
    lambda low, high, h: low + (high - low) * _unit(h),
)
_draw_op(
    "RandomNormalTraining", "et_random_normal_f32", ("mean", "scale"), lambda mean, scale, h: mean + scale * _normal(h)
)


@op("BernoulliTraining", domain=ET_DOMAIN)
class BernoulliTraining:
    """(P, counter) -> 1 with probability P, else 0."""

    inplace = (0,)

    @staticmethod
    def kernel(k, node):
        return [
            k.call(
                "et_bernoulli_f32",
                k.size(node.outputs[0]),
                int(node.attr("seed")),
                Counter(),
                node.inputs[0],
                node.outputs[0],
            )
        ]

    @staticmethod
    def grad(g, node, dy):
        return [None, None]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[0])]

    @staticmethod
    def reference(p, counter, seed):
        u = _unit(_bits(p.shape, seed, counter)).reshape(p.shape)
        return (np.where(u < p, np.float32(1), np.float32(0)),)
