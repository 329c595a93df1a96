"""The arena planner: no two tensors live at the same time share bytes, and the arena stays
near the liveness lower bound."""

import importlib.util
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgetrain.codegen.emit import build
from edgetrain.errors import EdgetrainError
from edgetrain.frontend import load_model
from edgetrain.memory import ALIGN, KINDS, Interval, liveness_lower_bound, place
from edgetrain.memory.policy import NOTHING_KEPT, Plan, policy_parameters, static_ram_bytes
from edgetrain.optim import LossType, OptimizerSpec, OptimType
from edgetrain.trainer import build_trainer


def random_intervals(seed, n=60):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        start = int(rng.integers(0, 40))
        out.append(Interval(f"t{i}", start, start + int(rng.integers(0, 8)), int(rng.integers(1, 500))))
    return out


@pytest.mark.parametrize("packed", [True, False])  # unpacked: the batch probes' one best-fit pass
def test_live_tensors_never_overlap(packed):
    for seed in range(20):
        intervals = random_intervals(seed)
        offsets, total = place(intervals, packed)
        for a in intervals:
            assert offsets[a.name] % ALIGN == 0 and offsets[a.name] + a.size <= total
            for b in intervals:
                if a.name < b.name and a.start <= b.end and b.start <= a.end:
                    assert offsets[a.name] + a.size <= offsets[b.name] or offsets[b.name] + b.size <= offsets[a.name], (
                        a,
                        b,
                    )


def test_arena_close_to_lower_bound():
    ratios = []
    for seed in range(20):
        intervals = random_intervals(seed)
        _, total = place(intervals)
        bound = liveness_lower_bound(intervals)
        assert total >= bound
        ratios.append(total / bound)
    print(f"arena / liveness lower bound: mean {np.mean(ratios):.3f}, worst {max(ratios):.3f}")
    assert np.mean(ratios) < 1.25


@pytest.mark.parametrize("packed", [True, False])
def test_shrinking_tensors_never_overlap_in_any_segment(packed):
    """A tensor that holds fewer words from some statement on (an in-place output smaller than the
    input it took over) frees the rest for others from then; no two live segments share bytes."""
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        intervals = []
        for iv in random_intervals(seed):
            cuts = sorted({int(c) for c in rng.integers(iv.start + 1, iv.end + 2, size=2)} - {iv.end + 1})
            sizes = sorted(rng.integers(1, iv.size + 1, size=len(cuts)), reverse=True)
            intervals.append(Interval(iv.name, iv.start, iv.end, iv.size, tuple(zip(cuts, map(int, sizes)))))
        offsets, total = place(intervals, packed)
        segments = [(iv.name, *segment) for iv in intervals for segment in iv.segments()]
        for i, (a, a_start, a_end, a_words) in enumerate(segments):
            assert offsets[a] % ALIGN == 0 and offsets[a] + a_words <= total
            for b, b_start, b_end, b_words in segments[i + 1 :]:
                if a != b and a_start <= b_end and b_start <= a_end:
                    assert offsets[a] + a_words <= offsets[b] or offsets[b] + b_words <= offsets[a]
        bound = liveness_lower_bound(intervals)
        assert bound <= total < 1.5 * bound


def test_chain_reuses_memory():
    # a -> b -> c -> d: each tensor lives only while its consumer runs, so two buffers suffice.
    chain = [Interval(n, i, i + 1, 100) for i, n in enumerate("abcd")]
    _, total = place(chain)
    assert total == 2 * 100


# ---- the planner on the trainers the test suite compiles ----

KB = 1024


def compile_c(model, plan: Plan | None = None, optimizer=OptimType.SGD, loss=LossType.CrossEntropyLoss, **kwargs):
    plan = Plan() if plan is None else plan
    trainer = build_trainer(
        load_model(model, None),
        loss=loss,
        optimizer=OptimizerSpec(optimizer),
        recompute=plan.recompute,
        keep_every=plan.keep_every,
        **kwargs,
    )
    return trainer, build(trainer, "model", fused_update=plan.fused_update)


TESTS = Path(__file__).resolve().parents[1]


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def suite_models():
    """{name: (forward model, loss)}: the models the test suite trains, at the batches it trains them:
    tests/models.py's, the MLPerf Tiny models (also at batch 1, issue 6's figures), the digits CNN,
    the recurrent taggers and the transformer."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")  # digits_cnn's data

    from examples.models.digits_cnn import BATCH as DIGITS_BATCH, digits_cnn
    from examples.models.mlperf_tiny import MODELS, export_training
    from models import mlp, mlp_bn, weighted_sum

    cross_entropy = LossType.CrossEntropyLoss
    models = {
        "mlp": (mlp(batch=4), cross_entropy),
        "mlp_dropout": (mlp(batch=4, dropout=0.1), cross_entropy),
        "mlp_bn": (mlp_bn(batch=4), cross_entropy),
        "weighted_sum": (weighted_sum((3, 4)), None),
        "digits_cnn": (export_training(digits_cnn(), DIGITS_BATCH)[0], cross_entropy),
    }
    # At tests/c/test_mlperf_tiny.py's batches, and at batch 1 but for the autoencoder (its
    # BatchNorm1d needs two values per channel).
    for name, spec in MODELS.items():
        for batch in {"ad": (2, 16)}.get(name, (1, 2)):
            models[f"{name}@{batch}"] = (export_training(spec["build"](), batch)[0], LossType(spec["loss"]))
    rnn, transformer = (
        _module(TESTS / "c" / "test_sequence_models_rnn.py"),
        _module(TESTS.parent / "examples" / "text" / "tinygpt.py"),
    )
    for cell, hidden, bidirectional, layers, decoder in rnn.TAGGERS:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on tracing and batch sizes
            tagger = rnn.export_tagger(rnn.Tagger(cell, hidden, bidirectional, layers, decoder))
        models[f"{cell}-{hidden}{'-bi' if bidirectional else ''}-{layers}{'-decoder' if decoder else ''}"] = (
            tagger,
            cross_entropy,
        )
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # tests/c/test_sequence_models_transformer.py's sizes: 11 tokens, context 8, batch 3.
        path = transformer.export(transformer.TinyGPT(11, 8), 3, 8, Path(tmp, "tinygpt.onnx"))
        models["tinygpt"] = (onnx.load(path), cross_entropy)
    return models


@pytest.fixture(scope="module")
def kws(suite_models):
    return suite_models["kws@1"][0]


PLANS = [Plan(), Plan(True), Plan(True, True), Plan(True, True, 2)]


def test_every_suite_model_plans_within_10_percent_of_the_bound(suite_models):
    """Issue 6's planner quality: planned arena <= 1.10 x liveness lower bound, for train_step,
    eval_step and infer, under each memory plan."""
    worst, over = {}, []
    for name, (model, loss) in suite_models.items():
        for plan in PLANS:
            _, m = compile_c(model, plan, loss=loss)
            for function, f in (("train_step", m.train), ("eval_step", m.eval), ("infer", m.infer)):
                ratio = f.arena_floats / max(f.lower_bound, 1)
                worst[name] = max(worst.get(name, 1.0), ratio)
                assert f.lower_bound <= f.arena_floats, (name, plan, function)
                if ratio > 1.10:
                    over.append((name, plan, function, round(ratio, 3)))
    print("arena / liveness lower bound, worst per model:", {k: round(v, 3) for k, v in worst.items()})
    assert not over


def test_blocks_describe_the_arena(suite_models):
    model, loss = suite_models["ic@1"]
    _, m = compile_c(model, Plan(True), loss=loss)
    blocks = m.train.blocks
    assert {b.kind for b in blocks} == {"activation", "gradient"} and all(b.kind in KINDS for b in blocks)
    for a in blocks:
        assert a.offset % (4 * ALIGN) == 0 and a.offset + a.size <= 4 * m.train.arena_floats
        assert 0 <= a.start <= a.end < len(m.train.stmts)
        for b in blocks:
            if a is not b and a.start <= b.end and b.start <= a.end:
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, (a, b)
    aligned = {b: -(-b.size // (4 * ALIGN)) * 4 * ALIGN for b in blocks}
    peak = max(sum(aligned[b] for b in blocks if b.start <= s <= b.end) for s in range(len(m.train.stmts)))
    assert peak == 4 * m.train.lower_bound


def elementwise_chain():
    """x -> Relu -> Sigmoid -> Mul(·, itself) -> Gemm: each elementwise op can overwrite its input."""
    nodes = [
        helper.make_node("Gemm", ["x", "w0"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Add", ["s", "s"], ["a"]),
        helper.make_node("Gemm", ["a", "w1"], ["y"]),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.ones((16, 64), np.float32), "w0"),
        onnx.numpy_helper.from_array(np.ones((64, 3), np.float32), "w1"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_elementwise_ops_run_in_place():
    _, m = compile_c(elementwise_chain())
    # Inference: h, r, s, a share one 8x64 buffer (Gemm's output cannot overwrite its input).
    assert m.infer.arena_floats == 8 * 64 + 8 * 3 + (-(8 * 3) % ALIGN)
    assert any(b.name == "h -> r -> s -> a" for b in m.infer.blocks)


def expanding_pointwise(size: int) -> onnx.ModelProto:
    """X (1, 16, size, size) -> Conv 3x3 -> Relu -> Conv 1x1 to 64 channels -> GlobalAveragePool ->
    Flatten: the pointwise layer's input gradient is needed, for the first layer's weights."""
    rng = np.random.default_rng(0)
    inits = [
        helper.make_tensor("wa", TensorProto.FLOAT, [16, 16, 3, 3], rng.normal(size=16 * 16 * 9)),
        helper.make_tensor("wb", TensorProto.FLOAT, [64, 16, 1, 1], rng.normal(size=64 * 16)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "wb"], ["b"]),
        helper.make_node("GlobalAveragePool", ["b"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "expanding_pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(("size", "in_place"), [(4, False), (32, True)])
def test_input_gradient_takes_over_dy_only_where_its_scratch_costs_less(size, in_place):
    """In place, the pointwise layer's dX takes over dY's bytes and its kernel needs a scratch of 64
    positions of dY's 64 channels, or of the whole plane when that is smaller: on a 4 x 4 plane that
    is a whole dY (1,024 floats) against a dX of its own of 256, so dX gets its own bytes; on 32 x 32,
    4,096 floats against 16,384, so it runs in place."""
    trainer, _ = compile_c(expanding_pointwise(size))
    backward = [n.op for n in trainer.train_nodes[trainer.backward_start :]]
    assert ("ConvGradXInPlace" in backward) == in_place and ("ConvGradX" in backward) != in_place


def test_named_update_policies(kws):
    graph = load_model(kws, None)
    biases = policy_parameters(graph, "bias")
    assert biases and all(graph.params[p].ndim == 1 for p in biases)
    assert len(biases) == 2 * 9 + 1  # every Conv's and BatchNorm's bias, and the classifier's
    last = policy_parameters(graph, "last:1")
    assert [graph.params[p].shape for p in last] == [(12, 64), (12,)]  # the classifier (Gemm)
    assert set(policy_parameters(graph, "bias+last:5")) == set(biases) | set(policy_parameters(graph, "last:5"))
    # the biases of the last 3 layers (pointwise Conv, BatchNormalization, classifier), and the classifier
    assert policy_parameters(graph, "bias:3") == biases[-3:]
    assert policy_parameters(graph, "bias:3+last:1") == [p for p in graph.params if p in set(last) | set(biases[-3:])]
    for bad in ("weights", "last:0", "last:99", "bias+", "", "bias:0", "bias:99", "bias:2last:1", "last:1+bias:2"):
        with pytest.raises(EdgetrainError, match="policy"):
            policy_parameters(graph, bad)


def test_sparse_update_prunes_the_backward_pass(kws):
    graph = load_model(kws, None)
    trainer, _ = compile_c(kws, requires_grad=policy_parameters(graph, "bias"))
    backward = [n.op for n in trainer.train_nodes[trainer.backward_start :]]
    # weights frozen; biases need dX, which the depthwise and pointwise layers make in place
    assert "ConvGradW" not in backward and "ConvGradXInPlace" in backward
    trainer, _ = compile_c(kws, requires_grad=policy_parameters(load_model(kws, None), "last:3"))
    backward = [n.op for n in trainer.train_nodes[trainer.backward_start :]]
    # Only the last pointwise Conv, its BatchNorm and the classifier train: dX stops at that Conv.
    assert backward.count("ConvGradW") == 1 and not {"ConvGradX", "ConvGradXInPlace"} & set(backward)


def test_kws_fits_the_sram_targets(kws):
    """MLPerf Tiny KWS DS-CNN, batch 1: full-model SGD with fused update in 400 KB, and biases, the
    last depthwise-separable block and the classifier in 160 KB, counting every static byte."""
    _, full = compile_c(kws, Plan(True, True))
    assert static_ram_bytes(full) <= 400 * KB
    _, sparse = compile_c(
        kws, Plan(True, True, NOTHING_KEPT), requires_grad=policy_parameters(load_model(kws, None), "bias+last:5")
    )
    assert static_ram_bytes(sparse) <= 160 * KB
    _, default = compile_c(kws)
    assert static_ram_bytes(default) > 2 * static_ram_bytes(full)
