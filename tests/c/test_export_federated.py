"""Export to a clean inference model (from the host API and from a device's parameter blob) and the
federated-learning plumbing of the generated C: reference, delta, aggregated update."""

import json
import subprocess

import numpy as np
import onnx
import pytest

from edgetrain import api, artifacts
from edgetrain.export import merge_parameter_blob
from models import mlp, mlp_bn

onnxruntime = pytest.importorskip("onnxruntime")

BATCH = 8
STRICT = [
    "gcc",
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-Wshadow",
    "-Wdouble-promotion",
    "-Werror",
    "-pedantic",
    "-ffp-contract=off",
    "-c",
]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return artifacts.generate_artifacts(
        mlp(sizes=(64, 32, 16, 10), dropout=0.2),
        batch_size=BATCH,
        artifact_directory=tmp_path_factory.mktemp("fed"),
        frozen_params=["fc0.weight"],
        learning_rate=0.01,
        federated=True,
    )


def fresh(out):
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return state, module, api.Optimizer(out / "optimizer_model.onnx", module)


def batch(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, 64)).astype(np.float32), rng.integers(0, 10, BATCH)


def train(module, opt, steps, seed=0):
    for i in range(steps):
        module(*batch(seed + i))
        opt.step()
        module.lazy_reset_grad()


def run_onnxruntime(model, x):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def assert_relative(got, want, tolerance=1e-6):
    assert np.max(np.abs(got - want)) <= tolerance * np.max(np.abs(want))


def test_exported_model_is_clean_and_matches_the_c_infer(out, tmp_path):
    _, module, opt = fresh(out)
    train(module, opt, 5)
    module.export_model_for_inferencing(tmp_path / "infer.onnx", ["logits"])
    exported = onnx.load(tmp_path / "infer.onnx")
    onnx.checker.check_model(exported, full_check=True)
    assert not any(n.domain for n in exported.graph.node)  # no training or edgetrain ops
    assert [i.name for i in exported.graph.input] == ["x"] and not exported.metadata_props
    assert {n.op_type for n in exported.graph.node} <= {"Gemm", "Relu", "Dropout", "Identity"}
    for seed in range(3):
        x, _ = batch(100 + seed)
        assert_relative(run_onnxruntime(exported, x), module.infer(x)[0])


def test_batchnorm_exports_in_inference_form_with_the_trained_running_statistics(tmp_path):
    out = artifacts.generate_artifacts(
        mlp_bn(sizes=(64, 32, 10)), batch_size=BATCH, artifact_directory=tmp_path, learning_rate=0.01
    )
    state, module, opt = fresh(out)
    before = state.parameters["bn0.running_mean"].data.copy()
    train(module, opt, 5)
    assert not np.array_equal(state.parameters["bn0.running_mean"].data, before)  # the C updated them
    module.export_model_for_inferencing(tmp_path / "infer.onnx", ["logits"])
    exported = onnx.load(tmp_path / "infer.onnx")
    onnx.checker.check_model(exported, full_check=True)
    (bn,) = [n for n in exported.graph.node if n.op_type == "BatchNormalization"]
    assert len(bn.output) == 1 and all(a.i == 0 for a in bn.attribute if a.name == "training_mode")
    assert not any(n.domain for n in exported.graph.node)
    values = {i.name: onnx.numpy_helper.to_array(i) for i in exported.graph.initializer}
    for name in ("bn0.running_mean", "bn0.running_var", "bn0.weight"):
        np.testing.assert_array_equal(values[name], state.parameters[name].data)
    for seed in range(3):
        x, _ = batch(200 + seed)
        assert_relative(run_onnxruntime(exported, x), module.infer(x)[0])


def test_device_blob_merges_into_the_inference_model(out, tmp_path):
    """What a device sends: `<prefix>_export_parameters`, merged on the host with the artifacts."""
    _, module, opt = fresh(out)
    train(module, opt, 4)
    blob = module.export_parameters()
    (tmp_path / "blob").write_bytes(blob)
    x, _ = batch(7)
    want = module.infer(x)[0]
    for model in (out, out / "eval_model.onnx", onnx.load(out / "eval_model.onnx")):
        assert_relative(run_onnxruntime(merge_parameter_blob(model, tmp_path / "blob"), x), want)
    # A full checkpoint, from either side, is as good as a blob.
    merged = merge_parameter_blob(out, module._save(True), ["logits"])
    assert_relative(run_onnxruntime(merged, x), want)


def test_merge_refuses_another_models_blob_and_nominal_checkpoints(out, tmp_path):
    other = artifacts.generate_artifacts(
        mlp(sizes=(64, 32, 16, 10), seed=3),
        batch_size=BATCH,
        artifact_directory=tmp_path / "other",
        frozen_params=["fc0.weight"],
        nominal_checkpoint=True,
    )
    with pytest.raises(api.CheckpointError, match="another model"):
        merge_parameter_blob(out, (other / "checkpoint").read_bytes())
    with pytest.raises(api.CheckpointError, match="nominal"):
        merge_parameter_blob(other, other / "nominal_checkpoint")


def test_delta_and_update_follow_their_definition_bit_for_bit(out):
    state, module, opt = fresh(out)
    module.set_reference()
    reference = module.get_contiguous_parameters(trainable_only=True)
    assert not module.get_delta().any()
    train(module, opt, 3)
    trained = module.get_contiguous_parameters(trainable_only=True)
    delta = module.get_delta()
    np.testing.assert_array_equal(delta, trained - reference)

    # The aggregated update replaces the local one and becomes the new reference.
    aggregated = (delta * np.float32(0.5)).astype(np.float32)
    module.apply_delta(aggregated, scale=0.8)
    updated = reference + np.float32(0.8) * aggregated
    np.testing.assert_array_equal(module.get_contiguous_parameters(trainable_only=True), updated)
    # fc1.weight follows fc0.bias in the blob
    np.testing.assert_array_equal(state.parameters["fc1.weight"].data.ravel(), updated[32 : 32 + 16 * 32])
    assert not module.get_delta().any()
    # Frozen parameters are not part of the federated vector.
    assert delta.size == module.get_parameters_size(trainable_only=True) < module.get_parameters_size(False)


def test_federated_calls_refuse_bad_input_and_leave_the_trainer_unchanged(out):
    _, module, opt = fresh(out)
    with pytest.raises(RuntimeError, match="set_reference"):
        module.get_delta()
    module.set_reference()
    train(module, opt, 1)
    before = module._save(True)
    size = module.get_parameters_size(trainable_only=True)
    with pytest.raises(ValueError, match=f"{size} values"):
        module.apply_delta(np.zeros(size - 1, np.float32))
    poisoned = np.zeros(size, np.float32)
    poisoned[-1] = np.inf
    with pytest.raises(api.NonFiniteError):
        module.apply_delta(poisoned)
    with pytest.raises(api.NonFiniteError):
        module.apply_delta(np.full(size, 3e38, np.float32), scale=10.0)  # finite, but overflows
    with pytest.raises(RuntimeError, match="scale"):
        module.apply_delta(np.zeros(size, np.float32), scale=float("nan"))
    assert module._save(True) == before


def test_federated_is_opt_in_and_costs_one_copy_of_the_trainable_parameters(out, tmp_path):
    plain = artifacts.generate_artifacts(
        mlp(sizes=(64, 32, 16, 10), dropout=0.2),
        batch_size=BATCH,
        artifact_directory=tmp_path / "plain",
        frozen_params=["fc0.weight"],
        learning_rate=0.01,
    )
    fed, base = (json.loads((d / "report.json").read_text()) for d in (out, plain))
    assert fed["ram_breakdown"]["federated_reference"] == fed["ram_breakdown"]["parameters"]
    assert base["ram_breakdown"]["federated_reference"] == 0
    # One copy of the trainable parameters, plus the 4-byte flag that says whether a reference is set.
    assert fed["ram_bytes"] - base["ram_bytes"] == fed["ram_breakdown"]["parameters"] + 4
    assert "federated reference" in (out / "report.txt").read_text()
    assert "set_reference" not in (plain / "model.h").read_text()
    state = api.CheckpointState.load_checkpoint(plain / "checkpoint")
    module = api.Module(plain / "training_model.onnx", state)
    with pytest.raises(RuntimeError, match="federated=True"):
        module.set_reference()
    for directory in (out, plain):
        result = subprocess.run(
            [*STRICT, str(directory / "model.c"), "-o", str(tmp_path / "m.o")], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
