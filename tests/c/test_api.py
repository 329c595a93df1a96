"""The ORT-shaped API over the generated C: state views, checkpoints, parameter buffers, export,
input validation, and the ONNX artifacts executed by an independent reference."""

import subprocess

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from edgetrain import api, artifacts
from edgetrain.ops import reference_ops
from models import mlp

onnxruntime = pytest.importorskip("onnxruntime")

BATCH = 4


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mlp")
    return artifacts.generate_artifacts(
        mlp(dropout=0.25),
        artifact_directory=directory,
        batch_size=BATCH,
        frozen_params=["fc0.bias"],
        learning_rate=0.05,
    )


def fresh(out, path=None):
    state = api.CheckpointState.load_checkpoint(path or out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def batch(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, 8)).astype(np.float32), rng.integers(0, 3, BATCH)


def train(module, opt, steps, seed=0):
    losses = []
    for i in range(steps):
        losses.append(module(*batch(seed + i)))
        opt.step()
        module.lazy_reset_grad()
    return losses


def test_checkpoint_resume_continues_the_same_trajectory(out, tmp_path):
    state, module, opt = fresh(out)
    train(module, opt, 5)
    state.properties["epoch"] = 3
    state.properties["note"] = "résumé"
    state.properties["best"] = 0.25
    api.CheckpointState.save_checkpoint(state, tmp_path / "ck", include_optimizer_state=True)
    continued = train(module, opt, 5, seed=5)

    state2, module2, opt2 = fresh(out, tmp_path / "ck")
    assert state2.properties == {"epoch": 3, "note": "résumé", "best": 0.25}
    resumed = train(module2, opt2, 5, seed=5)
    assert resumed == continued  # bit-identical: params, AdamW moments, step and dropout counter restored
    np.testing.assert_array_equal(module.get_contiguous_parameters(), module2.get_contiguous_parameters())


def test_python_and_c_write_identical_checkpoints(out, tmp_path):
    state, module, _ = fresh(out)
    api.CheckpointState.save_checkpoint(state, tmp_path / "from_c", include_optimizer_state=True)
    unbound = api.CheckpointState.load_checkpoint(out / "checkpoint")
    api.CheckpointState.save_checkpoint(unbound, tmp_path / "from_python", include_optimizer_state=True)
    assert (tmp_path / "from_c").read_bytes() == (tmp_path / "from_python").read_bytes()
    assert (tmp_path / "from_c").read_bytes() == (out / "checkpoint").read_bytes()


@pytest.mark.parametrize("damage", ["truncate", "flip", "wrong_model"])
def test_bad_checkpoint_is_refused_and_state_untouched(out, tmp_path, damage):
    state, module, opt = fresh(out)
    train(module, opt, 2)
    api.CheckpointState.save_checkpoint(state, tmp_path / "ck", include_optimizer_state=True)
    raw = bytearray((tmp_path / "ck").read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw[len(raw) // 3] ^= 0x10
    before = module._save(True)
    if damage == "wrong_model":
        other = artifacts.generate_artifacts(
            mlp(sizes=(8, 16, 3), seed=5), artifact_directory=tmp_path / "other", batch_size=BATCH
        )
        raw = bytearray((other / "checkpoint").read_bytes())
        assert module._lib_call("load_checkpoint", bytes(raw), len(raw)) == api.WRONG_MODEL
    else:
        with pytest.raises(api.CheckpointError):
            (tmp_path / "bad").write_bytes(raw)
            api.CheckpointState.load_checkpoint(tmp_path / "bad")
        status = module._lib_call("load_checkpoint", bytes(raw), len(raw))
        assert status == api.CORRUPT_CHECKPOINT
    assert module._save(True) == before


def test_live_views_and_parameter_buffers(out):
    state, module, opt = fresh(out)
    weight = state.parameters["fc0.weight"]
    assert weight.requires_grad and not state.parameters["fc0.bias"].requires_grad
    module(*batch(0))
    grad_copy = weight.grad.copy()
    old = weight.data.copy()
    opt.step()
    assert not np.array_equal(weight.data, old)  # the view sees the C update
    np.testing.assert_array_equal(weight.grad, grad_copy)

    everything = module.get_contiguous_parameters()
    trainable = module.get_contiguous_parameters(trainable_only=True)
    assert everything.size == sum(p.data.size for p in state.parameters.values())
    assert trainable.size == sum(p.data.size for p in state.parameters.values() if p.requires_grad)
    module.copy_buffer_to_parameters(trainable * 0 + 1, trainable_only=True)
    assert np.all(weight.data == 1)
    module.copy_buffer_to_parameters(everything)
    np.testing.assert_array_equal(module.get_contiguous_parameters(), everything)
    with pytest.raises(ValueError, match=f"{everything.size} values"):
        module.copy_buffer_to_parameters(everything[:-1])
    changed = everything.copy()
    changed[8 * 16] += 1  # first frozen bias value (fc0.bias follows fc0.weight): the host's build sets it
    module.copy_buffer_to_parameters(changed)
    assert state.parameters["fc0.bias"].data[0] == changed[8 * 16]
    np.testing.assert_array_equal(module.get_contiguous_parameters(), changed)


def test_wrong_inputs_raise_value_error_naming_the_shape(out):
    _, module, _ = fresh(out)
    x, y = batch(0)
    with pytest.raises(ValueError, match=r"\(4, 8\)"):
        module(x[:, :7], y)
    with pytest.raises(ValueError, match="disagree on the batch"):  # a batch of 2 runs, with 2 labels
        module(x[:2], y)
    with pytest.raises(ValueError, match="float32"):
        module(x.astype(np.float64), y)
    with pytest.raises(ValueError, match="integer class labels"):
        module(x, y.astype(np.float32))
    with pytest.raises(ValueError, match="expected 2 arrays"):
        module(x)
    with pytest.raises(ValueError, match=r"class labels must lie in \[0, number of classes\)"):
        module(x, np.array([0, 1, 2, 7]))  # label out of range


def test_export_runs_in_onnxruntime_with_the_c_outputs(out, tmp_path):
    state, module, opt = fresh(out)
    train(module, opt, 3)
    module.export_model_for_inferencing(tmp_path / "infer.onnx", ["logits"])
    exported = onnx.load(tmp_path / "infer.onnx")
    onnx.checker.check_model(exported, full_check=True)
    assert not any(n.domain for n in exported.graph.node)
    x, _ = batch(9)
    want = module.infer(x)[0]
    session = onnxruntime.InferenceSession(str(tmp_path / "infer.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_onnx_artifacts_check_and_execute_like_the_c(out):
    """training_model.onnx, run by onnx.reference with our ops, reproduces the C's loss and gradients."""
    state, module, _ = fresh(out)
    training = onnx.load(out / "training_model.onnx")
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        onnx.checker.check_model(onnx.load(out / name))
    x, y = batch(3)
    params = {n: p.data.copy() for n, p in state.parameters.items() if p.requires_grad}
    loss = module(x, y)
    feeds = {"x": x, "labels": y.astype(np.int64), "dropout_counter": np.array(0, np.int64), **params}
    outputs = [o.name for o in training.graph.output]
    results = dict(zip(outputs, ReferenceEvaluator(training, new_ops=reference_ops()).run(None, feeds)))
    assert abs(results[outputs[0]] - loss) <= 1e-5
    for name in params:
        np.testing.assert_allclose(results[f"{name}_grad"], state.parameters[name].grad, rtol=1e-4, atol=1e-6)


def test_generated_c_is_strict_c99_without_heap_or_stdio(out, tmp_path):
    source = (out / "model.c").read_text()
    for banned in ("malloc", "free(", "stdio", "printf"):
        assert banned not in source
    result = subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-c",
            str(out / "model.c"),
            "-o",
            str(tmp_path / "model.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_two_prefixed_models_link_into_one_program(tmp_path):
    for prefix, sizes in (("alpha", (8, 16, 3)), ("beta", (8, 4, 2))):
        artifacts.generate_artifacts(
            mlp(sizes=sizes), artifact_directory=tmp_path / prefix, batch_size=2, c_prefix=prefix
        )
    (tmp_path / "main.c").write_text(
        "int alpha_init(void);\nint beta_init(void);\nint main(void) { return alpha_init() + beta_init(); }\n"
    )
    objects = []
    for prefix in ("alpha", "beta"):
        obj = tmp_path / f"{prefix}.o"
        subprocess.run(
            [
                "gcc",
                "-std=c99",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-c",
                str(tmp_path / prefix / "model.c"),
                "-o",
                str(obj),
            ],
            check=True,
        )
        objects.append(str(obj))
    subprocess.run(["gcc", str(tmp_path / "main.c"), *objects, "-lm", "-o", str(tmp_path / "prog")], check=True)
    assert subprocess.run([str(tmp_path / "prog")]).returncode == 0
