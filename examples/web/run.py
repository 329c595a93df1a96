"""Training in the browser: the digits classifier of `edgetrain demo` (same model, same data), its
generated C built for WebAssembly (wasm32, no Emscripten) and trained by index.html through
edgetrain.js, with a live loss curve, held-out accuracy, fine-tuning on a digit you draw, the
checkpoint to download and the fine-tuning's delta sent to a small aggregator: this server.

1. prepare(): artifacts (federated=True, for the delta), model.wasm, edgetrain.js and the digits as
   raw little-endian arrays in examples/web/build, with digits.npz: the training batches in the
   order the page takes them, so `edgetrain run build/artifacts --data build/digits.npz` prints the
   page's log on any target.
2. serve(): the page and its files, and POST /delta: the aggregator, which reports each delta and
   the average of those received.

Run: python examples/web/run.py [--port 8000]   (or `make web`), then open http://127.0.0.1:8000.
Needs the demo extra and the wasm32 target's packages (`make TARGET=wasm32 tools`).
"""

from __future__ import annotations

import argparse
import json
import shutil
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import onnx
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from edgetrain import api, artifacts, wasm
from edgetrain.demo import LEARNING_RATE, build_mlp

HERE = Path(__file__).parent
BATCH = 32  # as the demo
PAGE = ("index.html", "app.js")


def digits(seed: int = 0):
    """The demo's split, and one shuffled epoch of whole training batches, which the page cycles through."""
    rng = np.random.default_rng(seed)
    model = build_mlp(seed=rng)
    data = load_digits()  # bundled with scikit-learn: no download
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    batches = len(x_train) // BATCH
    order = rng.permutation(len(x_train))[: batches * BATCH]
    return model, x_train[order].reshape(batches, BATCH, -1), y_train[order].reshape(batches, BATCH), x_test, y_test


def prepare(out: Path = HERE / "build") -> Path:
    """Everything the page loads, in `out`; returns `out`."""
    model, x_train, y_train, x_test, y_test = digits()
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out / "digits.onnx"))
    directory = artifacts.generate_artifacts(
        out / "digits.onnx",
        loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.AdamW,
        batch_size=BATCH,
        learning_rate=LEARNING_RATE,
        federated=True,
        artifact_directory=out / "artifacts",
    )
    wasm.build_module(directory, out / "model.wasm")
    for name, array in (("train_x", x_train), ("train_y", y_train), ("test_x", x_test), ("test_y", y_test)):
        (out / f"{name}.bin").write_bytes(array.astype(array.dtype.newbyteorder("<")).tobytes())
    np.savez(out / "digits.npz", x=x_train, y=y_train)
    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    trainable = sum(p.data.size for p in state.parameters.values() if p.requires_grad)
    (out / "digits.json").write_text(
        json.dumps({"batches": len(x_train), "batchSize": BATCH, "pixels": 64, "classes": 10, "trainable": trainable})
    )
    for name in PAGE:
        shutil.copy(HERE / name, out / name)
    shutil.copy(wasm.javascript(), out / "edgetrain.js")
    return out


class Handler(SimpleHTTPRequestHandler):
    """The page's files, and POST /delta: a float32 delta of the trainable parameters."""

    def log_request(self, code="-", size="-"):
        """Not every request: the aggregator's lines stay readable (send_error still logs failures)."""

    def do_POST(self):
        if self.path != "/delta":
            return self.send_error(404, "the aggregator takes POST /delta")
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if len(body) % 4:
            return self.send_error(400, "a delta is float32 values")
        delta, received = np.frombuffer(body, "<f4"), self.server.deltas
        if delta.size != self.server.trainable:
            return self.send_error(400, f"expected {self.server.trainable} values, got {delta.size}")
        received.append(delta)
        report = {
            "values": delta.size,
            "changed": int(np.count_nonzero(delta)),
            "norm": float(np.linalg.norm(delta)),
            "deltas": len(received),
            "average_norm": float(np.linalg.norm(np.mean(received, axis=0))),
        }
        print(
            f"aggregator: delta {len(received)} from {self.client_address[0]}: {report['changed']} of "
            f"{delta.size} values changed, L2 norm {report['norm']:.4g}; the average of all "
            f"{len(received)} has norm {report['average_norm']:.4g}",
            flush=True,
        )
        body = json.dumps(report).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def server(directory: Path, port: int = 8000) -> ThreadingHTTPServer:
    """Serves `directory` (from prepare) on localhost:`port` (0: any free port) once started."""
    httpd = ThreadingHTTPServer(("127.0.0.1", port), partial(Handler, directory=str(directory)))
    httpd.deltas = []  # what the clients sent, in turn
    httpd.trainable = json.loads((directory / "digits.json").read_text())["trainable"]
    return httpd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    port = parser.parse_args().port
    directory = prepare()
    size = (directory / "model.wasm").stat().st_size
    print(f"built {directory}/model.wasm ({size:,} bytes); open http://127.0.0.1:{port} (Ctrl-C stops)")
    with server(directory, port) as httpd:
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
