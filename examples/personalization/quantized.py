"""Personalization of a quantized model: fine-tune a digits CNN pre-trained in PyTorch (float) to one
user's slanted handwriting, once as float32 and once int8 (quantize="int8": weights per channel,
activations per tensor, calibrated on the pre-training digits), with the same sparse update, and
compare the user's held-out accuracy.

1. Pre-train a small CNN on scikit-learn's digits, upsampled to 32x32, in PyTorch; export it.
2. The user's digits are real held-out digits, slanted by 10-20 degrees (run.py's user_handwriting).
3. Compile the export with update_policy "bias+last:1" (every bias and the classifier train) as
   float32 and as int8, and fine-tune each with AdamW on the same digits in the same order. The int8
   trainer stores its trained int8 weights as their integers and updates them by quantization-aware
   scaling (QAS) with stochastic rounding (up with the probability of the fraction).
4. For comparison, fine-tune the int8 model with float32 masters of those weights (qas=False); and,
   to show why the rounding is stochastic, with the masters rounded to the nearest point of their
   grids after every step, which is what QAS rounding to the nearest would leave.

Run: python examples/personalization/quantized.py   (needs the demo extra and torch).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from scipy import ndimage
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from edgetrain import api, artifacts

try:
    from .run import user_handwriting
except ImportError:  # run as a script
    from run import user_handwriting

BATCH = 10
SIZE = 32
POLICY = "bias+last:1"


def upsampled(images: np.ndarray) -> np.ndarray:
    """8x8 digits (values 0..1) as 1x32x32 images."""
    zoomed = [ndimage.zoom(img, SIZE / 8, order=1) for img in images.reshape(-1, 8, 8)]
    return np.stack(zoomed)[:, None].astype(np.float32)


def cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )


def pretrain(x: np.ndarray, y: np.ndarray, path: Path, seed: int, epochs: int) -> None:
    """Adam on every layer in PyTorch, then the TorchScript export at batch BATCH."""
    torch.manual_seed(seed)
    net = cnn()
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for rows in rng.permutation(len(x))[: len(x) // 32 * 32].reshape(-1, 32):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(torch.from_numpy(x[rows])), torch.from_numpy(y[rows])).backward()
            optimizer.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net.eval(), (torch.from_numpy(x[:BATCH]),), path, input_names=["x"], output_names=["logits"], dynamo=False
        )


def int8_weights(out: Path, state: api.CheckpointState) -> dict[str, tuple[np.ndarray, int, int]]:
    """The trained parameters that the training model quantizes to integers on every forward pass
    (the float masters of int8 weights): name -> (scale, broadcast to the weight, qmin, qmax)."""
    graph = onnx.load(str(out / "training_model.onnx"), load_external_data=False).graph
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    trained = {name for name, p in state.parameters.items() if p.requires_grad}
    found = {}
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] in trained:
            weight = state.parameters[node.input[0]].data
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % weight.ndim
            scale = inits[node.input[1]].astype(np.float32)
            if scale.ndim:
                scale = scale.reshape([-1 if d == axis else 1 for d in range(weight.ndim)])
            info = np.iinfo(inits[node.input[2]].dtype)
            found[node.input[0]] = (scale, int(info.min), int(info.max))
    return found


def on_grid(weight: np.ndarray, scale: np.ndarray, qmin: int, qmax: int) -> None:
    """`weight` rounded in place to the nearest point of its integer grid (ties to even, as
    QuantizeLinear rounds)."""
    weight[...] = np.clip(np.rint(weight / scale), qmin, qmax) * scale


def fine_tune(model: Path, out: Path, x, y, x_test, y_test, epochs: int, seed: int, nearest=False, **options) -> dict:
    """Held-out accuracy before and after fine-tuning with POLICY, the trainer's RAM and how its
    trained int8 weights train, with their bytes (report.json's int8_trained_weights). nearest:
    after each step, every trained int8 weight's float32 master is rounded to the nearest point of
    its integer grid (on_grid), as an update of the integers rounding to the nearest would leave it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifacts.generate_artifacts(
            model,
            artifact_directory=out,
            update_policy=POLICY,
            optimizer="AdamW",
            learning_rate=3e-3,
            **options,
        )
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    optimizer = api.Optimizer(out / "optimizer_model.onnx", module)
    grids = int8_weights(out, state) if nearest else {}

    def accuracy() -> float:
        module.eval()
        right = sum(
            int(np.sum(module.infer(x_test[i : i + BATCH])[0].argmax(axis=1) == y_test[i : i + BATCH]))
            for i in range(0, len(x_test) - BATCH + 1, BATCH)
        )
        return right / (len(x_test) // BATCH * BATCH)

    before = accuracy()
    module.train()
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for rows in rng.permutation(len(x))[: len(x) // BATCH * BATCH].reshape(-1, BATCH):
            module(x[rows], y[rows])
            optimizer.step()
            module.lazy_reset_grad()
            for name, (scale, qmin, qmax) in grids.items():
                on_grid(state.parameters[name].data, scale, qmin, qmax)
    report = json.loads((out / "report.json").read_text())
    trained = report.get("int8_trained_weights", {"update": "", "bytes": 0})
    return {
        "before": before,
        "after": accuracy(),
        "ram_bytes": report["ram_bytes"],
        "update": trained["update"],
        "int8_weight_bytes": trained["bytes"],
    }


def run(work: Path, seed: int = 0, pretrain_epochs: int = 30, finetune_epochs: int = 30, user_train: int = 150) -> dict:
    """{"float32": ..., "int8, QAS": ..., "int8, float32 masters": ..., "masters on grid, nearest": ...}:
    each fine_tune's figures, on the same data."""
    digits = load_digits()
    x, y = (digits.data / 16).astype(np.float32), digits.target
    x_train, _, y_train, y_rest, _, raw_rest = train_test_split(
        x, y, digits.data, test_size=0.4, stratify=y, random_state=seed
    )
    x_user = upsampled(user_handwriting(raw_rest, seed))
    x_user_train, x_user_test, y_user_train, y_user_test = train_test_split(
        x_user, y_rest, train_size=user_train, stratify=y_rest, random_state=seed
    )
    x_train = upsampled(x_train)
    pretrain(x_train, y_train, work / "pretrained.onnx", seed, pretrain_epochs)
    calibration = [x_train[i : i + BATCH] for i in range(0, 20 * BATCH, BATCH)]
    data = (x_user_train, y_user_train.astype(np.int64), x_user_test, y_user_test, finetune_epochs, seed)
    int8 = {"quantize": "int8", "calibration_data": calibration}
    return {
        "float32": fine_tune(work / "pretrained.onnx", work / "float32", *data),
        "int8, QAS": fine_tune(work / "pretrained.onnx", work / "int8", *data, **int8),
        "int8, float32 masters": fine_tune(work / "pretrained.onnx", work / "masters", *data, qas=False, **int8),
        "masters on grid, nearest": fine_tune(
            work / "pretrained.onnx", work / "nearest", *data, nearest=True, qas=False, **int8
        ),
        "user_test": len(x_user_test) // BATCH * BATCH,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = run(Path(tmp), seed=args.seed)
    print(f"user's slanted digits, {r['user_test']} held out; update policy {POLICY}")
    print(table(r))


def table(r: dict) -> str:
    """Each trainer's accuracy, its RAM, and how its trained int8 weights train with their bytes."""
    rows = [f"{'trainer':<25} {'before':>7} {'after':>7} {'RAM (host)':>11}  trained int8 weights"]
    rows += [
        f"{k:<25} {r[k]['before']:>7.3f} {r[k]['after']:>7.3f} {r[k]['ram_bytes']:>11,}  "
        + (f"{r[k]['update']}, {r[k]['int8_weight_bytes']:,} B" if r[k]["update"] else "-")
        for k in ("float32", "int8, QAS", "int8, float32 masters", "masters on grid, nearest")
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    main()
