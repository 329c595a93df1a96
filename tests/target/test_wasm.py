"""wasm32 through JavaScript: the trainers of the target tier built as WebAssembly modules
(edgetrain.wasm.build_module) and driven by targets/wasm32/edgetrain.js under Node.js train bit for
bit as the host trainer does; the rest of the API returns the host's bytes; the module's float
formatting is C's printf("%.9g"). (`edgetrain run --target wasm32`, the C harness under Node.js,
is one of test_targets.py's targets.) Skips name the missing package; under CI they fail."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgetrain import api, artifacts, firmware, wasm
from edgetrain.errors import EdgetrainError
from models import mlp
from test_targets import CASES, STEPS, make_data, need, need_ops, reference_lines

DRIVER = Path(__file__).with_name("wasm_driver.mjs")


def node_lines(directory, data, steps, lr, work: Path, api_calls=False) -> list[str]:
    """What wasm_driver.mjs prints training the trainer in `directory` through edgetrain.js."""
    module = wasm.build_module(directory, work / "model.wasm")
    float_labels = np.issubdtype(data["y"].dtype, np.floating)
    np.ascontiguousarray(data["x"], "<f4").tofile(work / "x.bin")
    np.ascontiguousarray(data["y"], "<f4" if float_labels else "<i4").tofile(work / "y.bin")
    job = {
        "edgetrain": str(wasm.javascript()),
        "module": str(module),
        "x": str(work / "x.bin"),
        "y": str(work / "y.bin"),
        "floatLabels": bool(float_labels),
        "batches": len(data["x"]),
        "steps": steps,
        "lr": lr,
        "api": api_calls,
    }
    (work / "job.json").write_text(json.dumps(job))
    result = subprocess.run(["node", str(DRIVER), str(work / "job.json")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("name", list(CASES))
def test_edgetrain_js_trains_bit_identically_to_the_host(name, tmp_path):
    need("wasm32")
    build, shape, lr, optimizer, options = CASES[name]
    model = build()
    need_ops(model)
    directory = artifacts.generate_artifacts(
        model, artifact_directory=tmp_path / name, optimizer=artifacts.OptimType[optimizer], **options
    )
    data = make_data(shape)
    assert node_lines(directory, data, STEPS, lr, tmp_path) == reference_lines(directory, data, STEPS, lr)


def test_edgetrain_js_api_returns_the_host_bytes(tmp_path):
    """After 5 steps from a reference: evaluation, inference (whole and partial batch), the export
    blob, the checkpoint, the federated delta and an applied update equal the host trainer's bytes;
    failing calls raise the status's name and leave the trainer as it was; a checkpoint loads back."""
    need("wasm32")
    directory = artifacts.generate_artifacts(mlp(), artifact_directory=tmp_path / "mlp", batch_size=4, federated=True)
    data, lr, steps = make_data((4, 8)), 0.05, 5
    lines = node_lines(directory, data, steps, lr, tmp_path, api_calls=True)
    got = json.loads(lines[-1].removeprefix("api "))
    assert lines[:-1] == reference_lines(directory, data, steps, lr)

    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = api.Module(directory / "training_model.onnx", state)
    optimizer = api.Optimizer(directory / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(lr)
    module.set_reference()
    for i in range(steps):
        module(data["x"][i], data["y"][i])
        optimizer.step()
        module.lazy_reset_grad()
    assert got["steps"] == steps and got["learningRate"] == float(np.float32(lr))
    assert got["eval"] == f"{float(module.eval()(data['x'][1], data['y'][1])):.9g}"
    module.train()
    assert got["infer"] == [module.infer(data["x"][0])[0].tobytes().hex()]
    assert got["inferOne"] == module.infer(data["x"][0][:1])[0].tobytes().hex()
    assert got["export"] == module.export_parameters().hex()
    assert got["checkpoint"] == module._save(True).hex()
    assert got["errors"] == {
        "errors": [
            ["corrupt", "TrainerError", "ET_CORRUPT_CHECKPOINT"],
            ["badLabel", "TrainerError", "ET_BAD_ARGUMENT"],
            ["shortInput", "Error", None],
            ["tooSmall", "TrainerError", "ET_BUFFER_TOO_SMALL"],
        ],
        "unchanged": True,
    }
    assert got["delta"] == module.get_delta().tobytes().hex()
    module.apply_delta(module.get_delta(), 0.5)
    assert got["updated"] == module.get_contiguous_parameters(trainable_only=True).tobytes().hex()
    assert got["all"] == module.get_contiguous_parameters(trainable_only=False).tobytes().hex()
    assert got["restored"] is True and got["copiedBack"] is True


def test_module_description_and_size_report(tmp_path):
    spec = need("wasm32")
    directory = artifacts.generate_artifacts(
        mlp(sizes=(8, 16, 3)), artifact_directory=tmp_path / "mlp", batch_size=6, target="wasm32"
    )
    assert wasm.describe(directory) == {
        "prefix": "model",
        "maxBatch": 6,
        "inputs": [{"name": "x", "type": "float32", "batched": True, "size": 8}],
        "labels": {"name": "labels", "type": "int32", "batched": True, "size": 1},
        "outputs": [{"name": "logits", "type": "float32", "batched": True, "size": 3}],
    }
    report = json.loads((directory / "report.json").read_text())
    # llvm-size's text is the code section alone: with no read-only weights, the report's code
    obj = tmp_path / "model.o"
    subprocess.run([spec.cc, *spec.cflags, "-c", str(directory / "model.c"), "-o", str(obj)], check=True)
    text = int(subprocess.run([spec.size, "-B", str(obj)], capture_output=True, text=True).stdout.split()[6])
    segments = wasm.data_segments(obj.read_bytes())
    assert report["size_breakdown"]["code"] + report["size_breakdown"]["constant_weights"] == text + sum(
        n for s, n in segments.items() if s.startswith(".rodata.")
    )
    assert report["size_breakdown"]["arena"] == segments[".bss.et_arena"] == report["arena_bytes"]
    module = (directory / "model.wasm").read_bytes()  # what edgetrain.js loads, built with the report
    assert module[:4] == b"\0asm" and report["wasm_module_bytes"] == len(module) > text
    with pytest.raises(EdgetrainError, match="not a WebAssembly module"):
        wasm.data_segments(b"\x7fELF")


def test_wasm32_has_no_flash_file(tmp_path):
    directory = artifacts.generate_artifacts(mlp(batch=4), artifact_directory=tmp_path / "mlp")
    with pytest.raises(EdgetrainError, match="wasm32 has no files"):
        firmware.build_firmware([(directory, make_data((4, 8)))], "wasm32", 10, flash=tmp_path / "flash.bin")


def test_format_g_is_c_printf(tmp_path):
    """formatG against Python's %-formatting (correctly rounded, ties to even, as glibc's printf):
    random float32 values of every exponent (subnormals included), random doubles, and ties at the
    last digit kept; then what glibc prints for infinities and NaNs of either sign."""
    if shutil.which("node") is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("node missing; apt-get install nodejs")
    rng = np.random.default_rng(0)
    with np.errstate(invalid="ignore"):  # NaN patterns among them, dropped below
        singles = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64)
    doubles = rng.integers(0, 2**64, 5000, dtype=np.uint64).view(np.float64)
    ties = [
        1048576.125,
        -2097152.25,
        0.5,
        2.5,
        123456788.5,
        99999999.5,
        999999999.5,
        9.9999999995e-5,
        -0.0,
        5e-324,
        1.7976931348623157e308,
        1e-5,
        1e9,
        123456789.0,
    ]
    values = np.array([v for v in np.concatenate([singles, doubles, ties]) if np.isfinite(v)])
    specials = np.array([np.inf, -np.inf, np.nan, -np.nan])  # numpy's -nan has its sign bit set
    precisions = (9, 6, 1, 0, 17)
    bits = [str(b) for b in np.concatenate([values, specials]).view(np.uint64).tolist()]
    (tmp_path / "values.json").write_text(json.dumps({"bits": bits, "precisions": precisions}))
    script = f"""
        import {{ formatG }} from {json.dumps(wasm.javascript().as_uri())};
        import {{ readFileSync }} from "node:fs";
        const {{ bits, precisions }} = JSON.parse(readFileSync({json.dumps(str(tmp_path / "values.json"))}));
        const double = new DataView(new ArrayBuffer(8));
        const values = bits.map((b) => (double.setBigUint64(0, BigInt(b)), double.getFloat64(0)));
        const finite = values.slice(0, -4), specials = values.slice(-4);
        const lines = precisions.flatMap((p) => finite.map((v) => formatG(v, p)));
        process.stdout.write([...lines, ...specials.map((v) => formatG(v, 9))].join("\\n"));
    """
    result = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    got = result.stdout.split("\n")
    assert got[:-4] == [f"%.{p}g" % v for p in precisions for v in values.tolist()]
    assert got[-4:] == ["inf", "-inf", "nan", "-nan"]
