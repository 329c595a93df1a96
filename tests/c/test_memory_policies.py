"""Memory policies through the generated C: a fused update (the optimizer inside train_step, no
gradient buffers), sparse-update policies and recomputation change where bytes live, never the
numbers. The reference is the default build (ONNX Runtime's accumulate-then-step semantics), whose
own trajectories tests/c/test_optimizers.py checks against NumPy."""

import json
import os

import numpy as np
import pytest

from edgetrain import api, artifacts, targets
from edgetrain.errors import EdgetrainError
from edgetrain.memory.policy import NOTHING_KEPT, Plan
from gradcheck import compile_module
from models import mlp, mlp_bn

pytest.importorskip("torch")
from examples.models.mlperf_tiny import ds_cnn, export_training

# Many models, a few steps of each: built at -Og, to the default build's bits (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("quick_build")


STEPS = 20
BATCH = 2


@pytest.fixture(scope="module")
def kws_small():
    """The KWS DS-CNN with 8 filters: every layer kind of the real one, at a fraction of the bytes."""
    return export_training(ds_cnn(filters=8), BATCH)[0]


def data(steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(BATCH, 1, 49, 10)).astype(np.float32), rng.integers(0, 12, BATCH)) for _ in range(steps)]


def train(module, batches, lr_schedule=False):
    """An ONNX Runtime training loop, unchanged for every build. Returns the parameters."""
    opt = api.Optimizer(None, module)
    scheduler = api.LinearLRScheduler(opt, 5, len(batches), 0.05) if lr_schedule else None
    module.train()
    for x, y in batches:
        module(x, y)
        opt.step()
        module.lazy_reset_grad()
        if scheduler:
            scheduler.step()
    return module.get_contiguous_parameters()


def force_plan(monkeypatch, plan: Plan):
    """Compile with `plan` whatever the budget, as meet_budget would once a budget demands it."""
    monkeypatch.setattr(artifacts, "meet_budget", lambda compile_, _plan, _budget, can_fuse: compile_(plan))


# (update policy, optimizer options, the fused build's plan): every policy kind with SGD, AdamW with
# its state, and each level of recomputation.
CASES = {
    "full-sgd-momentum": (None, {"momentum": 0.9}, Plan(True, True)),
    "bias-sgd": ("bias", {}, Plan(True, True, NOTHING_KEPT)),
    "last:3-sgd": ("last:3", {}, Plan(True)),
    "bias+last:2-sgd": ("bias+last:2", {}, Plan(True, True, 2)),
    "full-adamw": (None, {"optimizer": artifacts.OptimType.AdamW, "weight_decay": 0.01}, Plan(True)),
    # quantized: int8 activations kept in a byte, or recomputed with everything else
    "int8-bias+last:2-sgd": ("bias+last:2", {"quantize": "int8"}, Plan(True, True)),
    "int8-bias-sgd": ("bias", {"quantize": "int8"}, Plan(True, True, NOTHING_KEPT)),
}


@pytest.mark.parametrize("case", CASES)
def test_fused_update_matches_accumulate(case, kws_small, tmp_path, monkeypatch):
    policy, options, plan = CASES[case]
    if "quantize" in options:
        options = {**options, "calibration_data": [x for x, _ in data(2, seed=9)]}
    batches = data(STEPS)
    reference, _ = compile_module(kws_small, tmp_path / "accumulate", update_policy=policy, **options)
    initial = reference.get_contiguous_parameters()
    want = train(reference, batches, lr_schedule=True)
    force_plan(monkeypatch, plan)
    fused, state = compile_module(kws_small, tmp_path / "fused", update_policy=policy, fused_update=True, **options)
    got = train(fused, batches, lr_schedule=True)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max(), case
    assert np.abs(want - initial).max() > 1e-3  # the steps did train
    trainable = [p for p in state.parameters.values() if p.requires_grad]
    assert trainable and all(p.grad is None for p in trainable)  # no gradient buffers to view
    opt = api.Optimizer(None, fused)
    assert opt._steps() == STEPS  # the step count (and so the LR schedule) advanced in train_step


def test_fused_update_refuses_a_non_finite_step(tmp_path):
    module, state = compile_module(mlp_bn(batch=4), tmp_path, fused_update=True)
    before = module.get_contiguous_parameters()
    running = state.parameters["bn0.running_mean"].data.copy()
    x = np.full((4, 8), np.nan, np.float32)
    with pytest.raises(api.NonFiniteError):
        module.train()(x, np.zeros(4, np.int64))
    np.testing.assert_array_equal(module.get_contiguous_parameters(), before)
    np.testing.assert_array_equal(state.parameters["bn0.running_mean"].data, running)


def test_fused_update_refuses_global_norm_clipping(tmp_path):
    with pytest.raises(EdgetrainError, match="max_grad_norm"):
        artifacts.generate_artifacts(mlp(batch=4), artifact_directory=tmp_path, fused_update=True, max_grad_norm=1.0)


def test_ram_budget_picks_a_cheaper_plan_or_names_the_smallest(kws_small, tmp_path):
    default = artifacts.generate_artifacts(kws_small, artifact_directory=tmp_path / "a", optimizer="SGD")
    full = json.loads((default / "report.json").read_text())
    budget = full["ram_bytes"] // 2
    out = artifacts.generate_artifacts(kws_small, artifact_directory=tmp_path / "b", optimizer="SGD", ram_budget=budget)
    report = json.loads((out / "report.json").read_text())
    assert report["ram_bytes"] <= budget and report["update"] == "fused"
    with pytest.raises(EdgetrainError) as error:
        artifacts.generate_artifacts(kws_small, artifact_directory=tmp_path / "c", optimizer="SGD", ram_budget=1000)
    message = str(error.value)
    assert "\n" not in message and "smallest footprint reached is" in message and "recomputation" in message


def test_compile_command_takes_the_memory_options(kws_small, tmp_path, capsys):
    import onnx

    from edgetrain.cli import main

    onnx.save(kws_small, tmp_path / "kws.onnx")
    main(
        [
            "compile",
            str(tmp_path / "kws.onnx"),
            "-o",
            str(tmp_path / "out"),
            "--optimizer",
            "SGD",
            "--fused-update",
            "--update-policy",
            "bias+last:2",
            "--ram-budget",
            "200000",
        ]
    )
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["update"] == "fused" and report["ram_bytes"] <= 200000
    assert report["trainable_parameters"] < 500  # biases and the last two layers only
    capsys.readouterr()  # the first compile's output (a progress line when gcc takes a while)
    with pytest.raises(SystemExit) as exit_:
        main(["compile", str(tmp_path / "kws.onnx"), "-o", str(tmp_path / "bad"), "--ram-budget", "1000"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RAM budget of 1,000 B not met" in err


def test_memory_plans_share_checkpoints(kws_small, tmp_path, monkeypatch):
    """Fused update and recomputation change where bytes live, not the model: a checkpoint moves
    between the default build and the leanest one, and training continues bit-identically."""
    batches = data(4, seed=3)
    default, state = compile_module(kws_small, tmp_path / "default", momentum=0.9)
    train(default, batches[:2])
    api.CheckpointState.save_checkpoint(state, tmp_path / "ckpt", include_optimizer_state=True)
    want = train(default, batches[2:])
    force_plan(monkeypatch, Plan(True, True, NOTHING_KEPT))
    out = artifacts.generate_artifacts(kws_small, artifact_directory=tmp_path / "lean", optimizer="SGD", momentum=0.9)
    lean = api.Module(out / "training_model.onnx", api.CheckpointState.load_checkpoint(tmp_path / "ckpt"))
    np.testing.assert_array_equal(train(lean, batches[2:]), want)


def test_ram_bytes_is_what_the_target_compiler_allocates(tmp_path):
    """report.json's ram_bytes, the count the RAM budget is checked against, equals .data + .bss of
    the trainer compiled for cortex-m4 as arm-none-eabi-size measures them, for each kind of static
    storage: BatchNormalization's buffers, gradients (or none: fused), optimizer state, the federated
    copy and the counters."""
    missing = targets.load("cortex-m4").missing()
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"cortex-m4 tools missing: {missing}")
    builds = {
        "adamw": {},
        "fused-sgd-momentum-federated": {"fused_update": True, "optimizer": "SGD", "momentum": 0.9, "federated": True},
    }
    for name, options in builds.items():
        reports = {}
        for target in (None, "cortex-m4"):  # None: the planner's count, without compiling
            out = artifacts.generate_artifacts(
                mlp_bn(batch=4), artifact_directory=tmp_path / f"{name}-{target}", target=target, **options
            )
            reports[target] = json.loads((out / "report.json").read_text())
        planned, measured = reports[None], reports["cortex-m4"]
        assert measured["size_tool"] == "arm-none-eabi-size", name
        assert planned["ram_bytes"] == measured["ram_bytes"], name
        assert planned["ram_breakdown"] == measured["ram_breakdown"], name
