"""Every file of tests/corpus/malformed/ (written by tests/corpus/make_malformed.py) is refused with
one clear line: EdgetrainError from the API, `edgetrain: error: ...` and exit status 2 from the
CLI, never a traceback or an internal error."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgetrain import EdgetrainError, artifacts, cli
from corpus import make_malformed

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

# file -> a fragment its one-line error must contain
EXPECTED = {
    "empty.onnx": "is empty",
    "garbage.onnx": "not an ONNX protobuf",
    "truncated.onnx": "not an ONNX protobuf (truncated or corrupt file)",
    "text.onnx": "not an ONNX protobuf",
    "unsorted.onnx": "not topologically sorted: node 'relu' (Relu) reads 'h' before node 'fc0' (Gemm) produces it",
    "cycle.onnx": "cycle through node 'add_a' (Add) -> node 'relu_b' (Relu) -> node 'add_a' (Add)",
    "missing_initializer.onnx": "node 'fc0' (Gemm) reads 'fc0.weight', which no node, graph input or initializer",
    "missing_input.onnx": "node 'add' (Add) reads 'ghost', which no node",
    "duplicate_output.onnx": "value 'h' is produced twice: by node 'fc0' (Gemm) and by node 'relu_x' (Relu)",
    "overwrites_input.onnx": "value 'x' is produced twice: by graph input and by node 'relu_x'",
    "duplicate_initializer.onnx": "initializer 'fc1.bias' is defined twice",
    "no_outputs.onnx": "the graph has no outputs",
    "gemm_mismatch.onnx": "(op_type:Gemm, node name: fc0): [ShapeInferenceError] Dimension mismatch",
    "add_not_broadcastable.onnx": "(op_type:Add, node name: add): [ShapeInferenceError] Incompatible dimensions",
    "matmul_mismatch.onnx": "Incompatible dimensions for matrix multiplication",
    "initializer_data_size.onnx": "initializer 'fc0.weight' of shape (16, 8) has unreadable data",
    "float64_initializer.onnx": "unsupported dtype: 'x' is float64, 'y' is float64, 'w' is float64",
    "float16_input.onnx": "unsupported dtype: 'x' is float16",
    "huge_tensor.onnx": "tensor 'x' of shape (1048576, 1048576) needs 4 TiB; edgetrain's limit is 2 GiB",
    "dim_product_overflow.onnx": "tensor 'x' of shape (1099511627776, 1099511627776, 1099511627776) needs",
    "total_ram.onnx": "the trainer needs 3.03 GiB of RAM; edgetrain's limit is 2 GiB",
    "external_parent.onnx": "'../secret.bin', outside the model's directory; refused",
    "external_absolute.onnx": "'/etc/passwd': external data must be a relative path",
    "external_missing.onnx": "'weights_that_are_not_here.bin', which does not exist",
    "external_too_short.onnx": "at offset 0 with length 512, past the end of that 100-byte file",
    "opset_future.onnx": "model uses opset 99",
    "ir_version_future.onnx": "model has IR version 99",
    "opset_ancient.onnx": "model uses opset 6; edgetrain needs opset 7 or newer",
}
FILES = sorted(p.name for p in (CORPUS / "malformed").glob("*.onnx"))


def test_the_table_covers_the_corpus_which_the_script_reproduces(tmp_path):
    assert sorted(EXPECTED) == FILES and len(FILES) >= 15
    written = make_malformed.write(tmp_path)
    for path in written:
        assert path.read_bytes() == (CORPUS / "malformed" / path.name).read_bytes(), f"{path.name} is stale"


@pytest.mark.parametrize("name", FILES)
def test_malformed_model_is_refused_in_one_line(name, tmp_path):
    path = CORPUS / "malformed" / name
    with pytest.raises(EdgetrainError) as err:
        artifacts.generate_artifacts(path, artifact_directory=tmp_path / "api")
    message = str(err.value)
    assert EXPECTED[name] in message and "\n" not in message

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()) as stdout:
        with pytest.raises(SystemExit) as exit_:
            cli.main(["compile", str(path), "-o", str(tmp_path / "cli")])
    assert exit_.value.code == 2 and stdout.getvalue() == ""
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 1 and lines[0] == f"edgetrain: error: {message}"
    assert "internal error" not in lines[0] and "Traceback" not in lines[0]
    assert not (tmp_path / "api").exists() and not (tmp_path / "cli").exists()  # refused before writing


def test_the_command_exits_2_without_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "edgetrain.cli", "compile", str(CORPUS / "malformed" / "cycle.onnx"), "-o", os.devnull],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("edgetrain: error: the graph has a cycle") and len(result.stderr.splitlines()) == 1


def _external_model(directory: Path, location: str) -> Path:
    model, _ = make_malformed.external(location)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.onnx").write_bytes(model.SerializeToString())
    return directory / "model.onnx"


def test_external_data_outside_the_directory_is_refused_even_when_it_exists(tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 512)
    path = _external_model(tmp_path / "models", "../secret.bin")
    with pytest.raises(EdgetrainError, match="outside the model's directory"):
        artifacts.generate_artifacts(path, artifact_directory=tmp_path / "out")
    (tmp_path / "models" / "link.bin").symlink_to(tmp_path / "secret.bin")  # a link out is refused the same
    path = _external_model(tmp_path / "models", "link.bin")
    with pytest.raises(EdgetrainError, match="outside the model's directory"):
        artifacts.generate_artifacts(path, artifact_directory=tmp_path / "out")


def test_external_data_inside_the_directory_loads(tmp_path):
    """The same file layout with the data where it belongs compiles (so the refusals above are about
    the location, not external data as such)."""
    import numpy as np

    healthy = make_malformed.mlp()
    weight = (
        np.frombuffer(healthy.graph.initializer[0].raw_data, np.float32)
        if healthy.graph.initializer[0].raw_data
        else np.array(healthy.graph.initializer[0].float_data, np.float32)
    )
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "weights.bin").write_bytes(weight.astype("<f4").tobytes())
    path = _external_model(tmp_path / "models", "weights.bin")
    out = artifacts.generate_artifacts(path, artifact_directory=tmp_path / "out")
    assert (out / "model.c").exists()


def test_external_data_in_a_model_proto_is_refused(tmp_path):
    """Without the file's path there is no directory to keep the data inside: refused, not read
    relative to the working directory."""
    model, _ = make_malformed.external("weights.bin")
    with pytest.raises(EdgetrainError, match="pass the model's path"):
        artifacts.generate_artifacts(model, artifact_directory=tmp_path / "out")
