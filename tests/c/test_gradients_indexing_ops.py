"""GatherElements, ScatterElements, GatherND, ScatterND, TopK and Einsum, computed by the generated C:
loss and gradients against torch autograd, and the forms without a gradient (ScatterElements /
ScatterND with reduction mul, max or min, GatherND on int and bool data, TopK's indices) forward
against onnxruntime.

A table of cases for gradcheck's harness. Cases whose operands come floats first go through
gradcheck.check_op_gradients; the others (indices between data and updates, indices fed at run
time as int32 or int64, TopK's unused second output) through `check_node`, which builds the same
one-node model and loss. Operand values come from a generator seeded by the case id. The other
tests check that run-time indices out of range are refused with the state untouched, what has no
gradient or no support is refused in one line, and which kernels Einsum equations run on.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import artifacts
from edgetrain.errors import EdgetrainError
from edgetrain.frontend import load_model
from edgetrain.host import load_library
from edgetrain.ops import KernelCtx, lookup
from gradcheck import Cases, assert_close, check_op_gradients, compile_module, i64, run_case

torch = pytest.importorskip("torch")
onnxruntime = pytest.importorskip("onnxruntime")


def _model(op, operands: dict, attrs: dict, outputs: list[str], shape, feeds=(), forward=False):
    """One `op` node reading `operands` in order. Training (forward=False): float operands are
    initializers (trained), integer ones constants except those named in `feeds` (model inputs), and
    loss = ReduceSum(Y * R) for the first output Y, of `shape`; the others stay unused.
    forward=True: float operands are model inputs too, and the outputs are the model's, typed by
    onnx shape inference."""
    nodes = [helper.make_node(op, list(operands), outputs, name="op", **attrs)]

    def is_input(name, v):
        return name in feeds or (forward and v.dtype == np.float32)

    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in operands.items()
        if is_input(n, v)
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in operands.items() if not is_input(n, v)]
    if forward:
        results = [helper.make_empty_tensor_value_info(o) for o in outputs]
    else:
        nodes += [
            helper.make_node("Mul", [outputs[0], "R"], ["YR"]),
            helper.make_node("ReduceSum", ["YR"], ["loss"], keepdims=0),
        ]
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, shape))
        results = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, op, inputs, results, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True) if forward else model


def check_node(
    op, operands: dict, torch_fn: Callable, attrs=None, *, tmp_path, outputs=("Y",), feeds=(), seed=0
) -> float:
    """check_op_gradients for a node whose operands come in any order (`operands`, by name), some
    integer ones fed at run time (`feeds`), and whose outputs after the first are unused. torch_fn
    takes the float operands, in order, as torch leaves."""
    floats = {n: v for n, v in operands.items() if v.dtype == np.float32}
    leaves = [torch.tensor(v, requires_grad=True) for v in floats.values()]
    y = torch_fn(*leaves)
    r = np.random.default_rng(seed + 12345).normal(size=tuple(y.shape)).astype(np.float32)
    module, state = compile_module(
        _model(op, operands, attrs or {}, list(outputs), r.shape, feeds), tmp_path, loss=None
    )
    loss = module(*[operands[n] for n in feeds], r)
    total = (y * torch.from_numpy(r)).sum()
    total.backward()
    errors = [assert_close(loss, total.detach().numpy(), f"{op} loss")]
    errors += [
        assert_close(state.parameters[n].grad, leaf.grad.numpy(), f"{op} d loss/d {n}")
        for n, leaf in zip(floats, leaves)
    ]
    return max(errors)


def check_forward(op, operands: dict, attrs: dict, *, tmp_path, feeds=(), outputs=("Y",)) -> float:
    """The node's outputs from the generated C's `infer` against onnxruntime's: float operands and
    those named in `feeds` fed (integer and bool ones as int32_t, as the C takes them), float
    outputs within tolerance, integer and bool ones exactly."""
    model = _model(op, operands, attrs, list(outputs), None, feeds, forward=True)
    fed = {i.name: operands[i.name] for i in model.graph.input}
    wants = onnxruntime.InferenceSession(model.SerializeToString()).run(None, fed)
    ffi, lib = load_library(artifacts.generate_inference(model, tmp_path / "infer"))

    def c_type(a):
        return "float[]" if a.dtype == np.float32 else "int32_t[]"

    args = [np.ascontiguousarray(v if v.dtype == np.float32 else v.astype(np.int32)) for v in fed.values()]
    gots = [np.zeros(w.shape, np.float32 if w.dtype == np.float32 else np.int32) for w in wants]
    lead = [lib.MODEL_MAX_BATCH] if ffi.typeof(lib.model_infer).args[0].cname == "int" else []  # the batch count
    assert lib.model_infer(*lead, *[ffi.from_buffer(c_type(a), a) for a in args + gots]) == 0
    errors = []
    for name, got, want in zip(outputs, gots, wants):
        if want.dtype == np.float32:
            errors.append(assert_close(got, want, f"{op} forward {name}"))
        else:
            np.testing.assert_array_equal(got, want.astype(np.int64), err_msg=f"{op} forward {name}")
            errors.append(0.0)
    return max(errors)


# ---- cases: each a function of (tmp_path, generator) ----

CASES = Cases()
case = CASES.check


def normal(rng, *shape) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


def _wrap(indices, extent) -> torch.Tensor:
    """ONNX's negative indices as torch's (which refuses them)."""
    return torch.from_numpy(np.where(indices < 0, indices + extent, indices).astype(np.int64))


# GatherElements: gradient is a scatter-add (repeated indices sum)
def gather_elements(name, shape, indices, axis, feed=None):
    def check(tmp_path, rng):
        x, idx = normal(rng, *shape), _wrap(indices, shape[axis])

        def torch_fn(x):
            return torch.gather(x, axis, idx)

        if feed is None:
            return check_op_gradients(
                "GatherElements", {"X": x}, {"axis": axis}, torch_fn, {"indices": indices}, tmp_path=tmp_path
            )
        return check_node(
            "GatherElements",
            {"X": x, "indices": indices.astype(feed)},
            torch_fn,
            {"axis": axis},
            tmp_path=tmp_path,
            feeds=("indices",),
        )

    case(f"GatherElements-{name}", check)


gather_elements("axis1-negative-repeated", (3, 4), i64([0, 3, -1], [2, 2, 0], [1, 0, -4]), 1)
gather_elements("axis0-smaller-indices", (4, 3, 5), i64([[3, 0], [1, 1]], [[0, 2], [3, 3]], [[-1, 2], [2, 0]]), 0)
gather_elements("axis-last-runtime-int64", (2, 5), i64([4, -5, 1, 1, 0, 3], [2, 2, -1, 0, 1, 3]), -1, np.int64)
gather_elements(
    "axis1-runtime-int32", (3, 4, 2), i64([[1, 0], [3, 3]], [[0, 1], [2, 0]], [[-1, 2], [0, 0]]), 1, np.int32
)


# GatherElements on integer data, forward (RoBERTa gathers its int64 token type ids by position)
def gather_elements_integers(name, shape, indices, axis, data, feeds):
    def check(tmp_path, rng):
        x = rng.integers(-1000, 1000, size=shape).astype(data)
        return check_forward(
            "GatherElements", {"X": x, "indices": indices}, {"axis": axis}, tmp_path=tmp_path, feeds=feeds
        )

    case(f"GatherElements-{name}", check)


gather_elements_integers(
    "int64-data-runtime-indices", (2, 5), i64([4, -5, 1], [2, 0, 3]), 1, np.int64, ("X", "indices")
)
gather_elements_integers(
    "int32-data-constant-indices", (3, 2, 4), i64([[2, 0, 1, -1]], [[0, 0, 2, 1]]), 0, np.int32, ("X",)
)


# ScatterElements: 'none' (unique indices: torch's gradient of an overwritten update assumes them) and 'add'
def scatter_elements(name, shape, indices, axis, reduction, feed=None):
    def check(tmp_path, rng):
        data, updates, idx = normal(rng, *shape), normal(rng, *indices.shape), _wrap(indices, shape[axis])
        ops = {"data": data, "indices": indices.astype(feed or np.int64), "updates": updates}
        if reduction in ("mul", "max", "min"):
            return check_forward("ScatterElements", ops, {"axis": axis, "reduction": reduction}, tmp_path=tmp_path)
        torch_fn = (
            (lambda d, u: d.scatter(axis, idx, u))
            if reduction == "none"
            else (lambda d, u: d.scatter_add(axis, idx, u))
        )
        return check_node(
            "ScatterElements",
            ops,
            torch_fn,
            {"axis": axis, "reduction": reduction},
            tmp_path=tmp_path,
            feeds=("indices",) if feed else (),
        )

    case(f"ScatterElements-{name}", check)


scatter_elements("none-axis0", (3, 4), i64([1, 0, 2, 2], [0, 2, 1, 0]), 0, "none")
scatter_elements("none-axis1-negative-smaller", (3, 5, 2), i64([[-1, 0], [1, 1]], [[2, 4], [0, 3]]), 1, "none")
scatter_elements("add-repeated", (2, 4), i64([1, 1, 3], [0, 0, 0]), 1, "add")
scatter_elements("add-runtime-int64", (4, 3), i64([3, 0, -1], [3, 3, 0]), 0, "add", np.int64)
scatter_elements("none-runtime-int32", (2, 3), i64([2, 0], [-2, 1]), 1, "none", np.int32)
for _reduction in ("mul", "max", "min"):
    scatter_elements(f"{_reduction}-forward", (3, 4), i64([1, 1, 3], [0, 2, 0], [2, 2, 2]), 1, _reduction)


# ScatterND: index tuples select slices (or elements)
def scatter_nd(name, shape, indices, reduction, feed=None):
    def check(tmp_path, rng):
        depth = indices.shape[-1]
        data, updates = normal(rng, *shape), normal(rng, *indices.shape[:-1], *shape[depth:])
        ops = {"data": data, "indices": indices.astype(feed or np.int64), "updates": updates}
        if reduction in ("mul", "max", "min"):
            return check_forward("ScatterND", ops, {"reduction": reduction}, tmp_path=tmp_path)
        where = tuple(_wrap(indices[..., j], shape[j]) for j in range(depth))

        def torch_fn(d, u):
            return d.index_put(where, u, accumulate=reduction == "add")

        return check_node(
            "ScatterND", ops, torch_fn, {"reduction": reduction}, tmp_path=tmp_path, feeds=("indices",) if feed else ()
        )

    case(f"ScatterND-{name}", check)


scatter_nd("none-slices", (4, 3, 2), i64([2], [0], [-1]), "none")
scatter_nd("none-elements", (3, 4), i64([[0, 1], [2, -1]], [[1, 0], [-3, 2]]), "none")
scatter_nd("add-repeated-rows", (3, 4), i64([1], [1], [-3], [1]), "add")
scatter_nd("add-runtime-int32", (2, 3, 4), i64([1, 2], [0, -1], [1, 2]), "add", np.int32)
scatter_nd("none-runtime-int64", (5, 2), i64([4], [0]), "none", np.int64)
for _reduction in ("mul", "max", "min"):
    scatter_nd(f"{_reduction}-forward", (4, 3), i64([1, 2], [1, 2], [3, 0]), _reduction)


# GatherND: index tuples select slices (or elements) within the first batch_dims axes; the gradient
# is a scatter-add (repeated tuples sum). Int and bool data run forward only, fed at run time.
def gather_nd(name, shape, indices, batch_dims=0, feed=None, data=None):
    def check(tmp_path, rng):
        attrs = {"batch_dims": batch_dims}
        if data is not None:
            x = rng.integers(-9, 10, size=shape).astype(data) if data != np.bool_ else rng.random(shape) < 0.5
            ops = {"X": x, "indices": indices.astype(feed or np.int64)}
            return check_forward("GatherND", ops, attrs, tmp_path=tmp_path, feeds=("X", "indices") if feed else ("X",))
        lead = indices.shape[:-1]
        # torch indexes with one tensor per axis: the batch axes' own positions, then the tuples' columns.
        where = tuple(
            torch.arange(shape[a]).view([-1 if d == a else 1 for d in range(len(lead))]) for a in range(batch_dims)
        )
        where += tuple(_wrap(indices[..., j], shape[batch_dims + j]) for j in range(indices.shape[-1]))
        x = normal(rng, *shape)

        def torch_fn(x):
            return x[where]

        if feed is None:
            return check_op_gradients("GatherND", {"X": x}, attrs, torch_fn, {"indices": indices}, tmp_path=tmp_path)
        return check_node(
            "GatherND",
            {"X": x, "indices": indices.astype(feed)},
            torch_fn,
            attrs,
            tmp_path=tmp_path,
            feeds=("indices",),
        )

    case(f"GatherND-{name}", check)


gather_nd("elements-repeated", (3, 4), i64([0, 1], [2, -1], [0, 1]))
gather_nd("slices-negative-repeated", (4, 3, 2), i64([[2], [0]], [[-1], [2]]))
gather_nd("one-tuple", (3, 4, 5), i64(1, -2))
gather_nd("batch1-slices", (2, 3, 4), i64([[1], [1]], [[2], [-3]]), batch_dims=1)
gather_nd(
    "batch2-elements",
    (2, 3, 4, 5),
    i64(
        [[[0, 4], [3, -1]], [[1, 1], [1, 1]], [[2, 0], [-4, 2]]],
        [[[3, 3], [0, 0]], [[-1, -5], [2, 2]], [[1, 4], [0, 1]]],
    ),
    batch_dims=2,
)
gather_nd("runtime-int64", (3, 4, 2), i64([2, 3], [-3, 0]), feed=np.int64)
gather_nd("batch1-runtime-int32", (2, 5, 3), i64([[4], [0], [4]], [[-1], [2], [3]]), batch_dims=1, feed=np.int32)
gather_nd("bool-data", (2, 1, 4, 4), i64([[0, 0, 3], [1, 0, 1]], [[1, 0, 0], [0, 0, -1]]), data=np.bool_)
gather_nd(
    "int64-data-batch1-runtime", (2, 3, 4), i64([[1], [-1]], [[0], [2]]), batch_dims=1, feed=np.int64, data=np.int64
)
gather_nd("int32-data-elements", (4, 3), i64([3, 2], [-4, 0], [1, 1]), data=np.int32)


# TopK: values' gradient goes to the chosen elements; the indices output stays unused
def topk(name, shape, count, axis, largest):
    def check(tmp_path, rng):
        x = normal(rng, *shape)
        return check_node(
            "TopK",
            {"X": x, "K": i64(count)},
            lambda x: torch.topk(x, count, axis, bool(largest))[0],
            {"axis": axis, "largest": largest},
            tmp_path=tmp_path,
            outputs=("Y", "I"),
        )

    case(f"TopK-{name}", check)


topk("last-axis-largest", (3, 6), 2, -1, 1)
topk("axis0-smallest", (5, 3), 3, 0, 0)
topk("middle-axis-all", (2, 4, 3), 4, 1, 1)


# TopK's values and int64 indices, forward: float data, and integer data with ties (equal values come
# lowest index first, as ONNX asks)
def topk_indices(name, shape, count, axis, largest, data=np.float32):
    def check(tmp_path, rng):
        x = normal(rng, *shape) if data == np.float32 else rng.integers(-2, 3, size=shape).astype(data)
        return check_forward(
            "TopK",
            {"X": x, "K": i64(count)},
            {"axis": axis, "largest": largest},
            tmp_path=tmp_path,
            feeds=("X",),
            outputs=("Y", "I"),
        )

    case(f"TopK-indices-{name}", check)


topk_indices("last-axis-largest", (3, 6), 3, -1, 1)
topk_indices("axis0-smallest", (5, 3), 2, 0, 0)
topk_indices("int64-ties-middle-axis", (2, 7, 3), 4, 1, 1, np.int64)
topk_indices("int32-ties-smallest", (3, 8), 5, 1, 0, np.int32)


# Einsum: the equations exporters and attention write, and the general contraction's forms
def einsum(equation, *shapes, name=""):
    def check(tmp_path, rng):
        xs = {f"X{i}": normal(rng, *s) for i, s in enumerate(shapes)}
        return check_op_gradients(
            "Einsum", xs, {"equation": equation}, lambda *a: torch.einsum(equation, *a), tmp_path=tmp_path
        )

    case(f"Einsum-{equation}{name}", check)


einsum("bhid,bhjd->bhij", (2, 3, 4, 5), (2, 3, 6, 5))
einsum("bhij,bhjd->bhid", (2, 2, 3, 4), (2, 2, 4, 5))
einsum("bij,bjk->bik", (2, 3, 4), (2, 4, 5))
einsum("ij->ji", (3, 4))
einsum("i,j->ij", (3,), (4,))
einsum("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5))
einsum("...ij,...jk->...ik", (2, 1, 3, 4), (1, 3, 4, 5), name="-broadcast")  # the broadcast axes' gradient is a sum
einsum("ii->i", (4, 4))
einsum("bii->b", (2, 3, 3))
einsum("ij->i", (3, 40))
einsum("i,i", (5,), (5,))
einsum("ij,jk", (3, 4), (4, 5))
einsum("bij,bjk->ikb", (2, 3, 4), (2, 4, 5))
einsum("ij,jk->i", (3, 4), (4, 5))
einsum("bik,bjk,bj->bi", (2, 3, 4), (2, 5, 4), (2, 5))


@pytest.mark.parametrize("spec", CASES)
def test_gradient(spec, tmp_path, request):
    run_case(spec, tmp_path, request)


# ---- run-time indices out of range, and what is refused ----

RUNTIME = {
    "GatherElements": ({"X": np.ones((3, 4), np.float32), "indices": np.zeros((2, 4), np.int64)}, {"axis": 0}, (2, 4)),
    "GatherND": ({"X": np.ones((3, 4), np.float32), "indices": np.zeros((2, 2), np.int64)}, {}, (2,)),
    "ScatterElements": (
        {
            "data": np.ones((3, 4), np.float32),
            "indices": np.zeros((2, 4), np.int64),
            "updates": np.ones((2, 4), np.float32),
        },
        {"axis": 0, "reduction": "add"},
        (3, 4),
    ),
    "ScatterND": (
        {
            "data": np.ones((3, 4), np.float32),
            "indices": np.zeros((2, 2), np.int64),
            "updates": np.ones((2,), np.float32),
        },
        {},
        (3, 4),
    ),
}


@pytest.mark.parametrize("op", sorted(RUNTIME))
def test_runtime_indices_out_of_range_are_refused_with_state_untouched(op, tmp_path):
    operands, attrs, out_shape = RUNTIME[op]
    module, state = compile_module(_model(op, operands, attrs, ["Y"], out_shape, ("indices",)), tmp_path, loss=None)
    r = np.random.default_rng(0).normal(size=out_shape).astype(np.float32)
    tuples = op in ("GatherND", "ScatterND")
    good = np.array([[2, -4], [0, 3]] if tuples else [[2, -3, 0, 1], [1, 1, 2, -1]])
    module(good, r)
    grads = {n: p.grad.copy() for n, p in state.parameters.items()}
    # Too large, too negative (index tuples: in the second column, whose extent is 4, not 3).
    for bad in ([[2, 0], [0, 4]], [[-4, 0], [0, 0]]) if tuples else ([[3, 0, 0, 0], [0] * 4], [[0] * 4, [0, 0, -4, 0]]):
        with pytest.raises(ValueError, match="out of range"):
            module(np.array(bad, np.int64), r)
        with pytest.raises(ValueError, match="out of range"):
            module.infer(np.array(bad, np.int32), r)
    for name, p in state.parameters.items():
        np.testing.assert_array_equal(p.grad, grads[name])
    module(good, r)  # accumulates onto the first step's gradients, and nothing else
    for name, p in state.parameters.items():
        np.testing.assert_array_equal(p.grad, 2 * grads[name])


REFUSED = [
    (
        "GatherElements",
        {"X": np.ones((3, 4), np.float32), "indices": i64([0, 4])},
        {"axis": 1},
        (1, 2),
        "index 4 out of range for an axis of 4",
    ),
    (
        "ScatterND",
        {"data": np.ones((3, 4), np.float32), "indices": i64([0, 1], [-4, 0]), "updates": np.ones(2, np.float32)},
        {},
        (3, 4),
        "index -4 out of range for an axis of 3",
    ),
    (
        "ScatterElements",
        {"data": np.ones((3, 4), np.float32), "indices": i64([0, 1]), "updates": np.ones((1, 2), np.float32)},
        {"reduction": "max"},
        (3, 4),
        "no gradient for reduction 'max' \\(only 'none' and 'add'\\)",
    ),
    (
        "GatherND",
        {"X": np.ones((2, 3, 4), np.float32), "indices": i64([[1, 0]], [[3, 0]])},
        {"batch_dims": 1},
        (2, 1),
        "index 3 out of range for an axis of 3",
    ),
]


@pytest.mark.parametrize("op, operands, attrs, out_shape, error", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_in_one_line(op, operands, attrs, out_shape, error, tmp_path):
    model = _model(op, operands, attrs, ["Y"], out_shape)
    with pytest.raises(EdgetrainError, match=error) as refused:
        compile_module(model, tmp_path, loss=None)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "equation, shapes, kernel",
    [
        ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)], "et_einsum_gemm_f32"),
        ("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 5)], "et_einsum_gemm_f32"),
        ("bhij,bhid->bhjd", [(2, 3, 4, 6), (2, 3, 4, 5)], "et_einsum_gemm_f32"),  # attention's key gradient
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], "et_einsum_gemm_f32"),
        ("bik,bkj->bji", [(2, 3, 4), (2, 4, 5)], "et_einsum_gemm_f32"),  # operands swapped
        ("...ij,...jk->...ik", [(1, 2, 3, 4), (1, 2, 4, 5)], "et_einsum_gemm_f32"),
        ("i,j->ij", [(3,), (4,)], "et_einsum_gemm_f32"),
        ("ij->ji", [(3, 4)], "et_transpose_f32"),
        ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)], "et_einsum_gemm_f32"),  # both transposed
        ("bij,bjk->ikb", [(2, 3, 4), (2, 4, 5)], "et_einsum_f32"),  # the batch axis last
        ("ii->i", [(3, 3)], "et_einsum_f32"),
    ],
)
def test_einsum_kernel_choice(equation, shapes, kernel):
    """Batched matrix products run on the Gemm kernels, permutations on Transpose's."""
    inputs = [helper.make_tensor_value_info(f"X{i}", TensorProto.FLOAT, s) for i, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [f"X{i}" for i in range(len(shapes))], ["Y"], equation=equation)
    out = np.einsum(equation, *[np.zeros(s) for s in shapes]).shape
    graph = helper.make_graph([node], "einsum", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, out)])
    ir = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    assert [call.fn for call in lookup(ir.nodes[0]).kernel(KernelCtx(ir), ir.nodes[0])] == [kernel]
