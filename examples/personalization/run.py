"""Personalization on the device: fine-tune only the last layer of a pre-trained digits classifier
to one user's handwriting, through the generated C.

1. Pre-train a 64-128-64-10 MLP on scikit-learn's digits (all layers, in the C trainer) and export it.
2. One user writes differently: their digits are real held-out digits, slanted by 10-20 degrees.
3. Compile the pre-trained model again with its feature layers frozen (they go to flash as
   constants) and fine-tune the last layer on a few of the user's digits.
4. Report the user's accuracy before and after, and the accuracy on the original test digits.

Run: python examples/personalization/run.py   (or `make personalize`). Needs the demo extra.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import ndimage
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from edgetrain import api, artifacts
from edgetrain.demo import build_mlp, predict

SIZES = (64, 128, 64, 10)
BATCH = 10  # the exported model keeps the batch size it was compiled with
FEATURES = ["fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"]  # frozen while personalizing


def user_handwriting(images: np.ndarray, seed: int) -> np.ndarray:
    """The user's style: real digits, slanted by 10-20 degrees on their 8x8 grid."""
    rng = np.random.default_rng(seed)
    slanted = [
        ndimage.rotate(img, rng.uniform(10, 20), reshape=False, order=1, mode="constant")
        for img in images.reshape(-1, 8, 8)
    ]
    return (np.clip(np.stack(slanted), 0, 16).reshape(-1, 64) / 16).astype(np.float32)


def trainer(out: Path):
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    return module, api.Optimizer(out / "optimizer_model.onnx", module)


def fit(module, opt, x, y, epochs: int, seed: int) -> None:
    """Mini-batch epochs over shuffled data; the last partial batch is dropped (fixed batch shape)."""
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x) - BATCH + 1, BATCH):
            take = order[start : start + BATCH]
            module(x[take], y[take].astype(np.int64))
            opt.step()
            module.lazy_reset_grad()


def accuracy(module, x, y) -> float:
    return float(np.mean(predict(lambda b: module.infer(b)[0], x, BATCH) == y))


def run(work: Path, seed: int = 0, pretrain_epochs: int = 30, finetune_epochs: int = 20, user_train: int = 150) -> dict:
    digits = load_digits()
    x, y = (digits.data / 16).astype(np.float32), digits.target
    x_train, x_rest, y_train, y_rest, _, raw_rest = train_test_split(
        x, y, digits.data, test_size=0.4, stratify=y, random_state=seed
    )
    # Half of the rest is the original test set; the other half is the user's (other digits).
    x_test, _, y_test, y_user, _, raw_user = train_test_split(
        x_rest, y_rest, raw_rest, test_size=0.5, stratify=y_rest, random_state=seed
    )
    x_user = user_handwriting(raw_user, seed)
    x_user_train, x_user_test, y_user_train, y_user_test = train_test_split(
        x_user, y_user, train_size=user_train, stratify=y_user, random_state=seed
    )

    # 1. Pre-training: every layer trainable.
    pre = artifacts.generate_artifacts(
        build_mlp(SIZES, seed), artifact_directory=work / "pretrain", batch_size=BATCH, learning_rate=1e-3
    )
    module, opt = trainer(pre)
    fit(module, opt, x_train, y_train, pretrain_epochs, seed)
    module.export_model_for_inferencing(work / "pretrained.onnx", ["logits"])

    # 2-3. The device build: feature layers frozen into flash, only the classifier head trains.
    dev = artifacts.generate_artifacts(
        work / "pretrained.onnx",
        artifact_directory=work / "device",
        frozen_params=FEATURES,
        optimizer="SGD",
        momentum=0.9,
        learning_rate=0.01,
    )
    module, opt = trainer(dev)
    before = accuracy(module, x_user_test, y_user_test), accuracy(module, x_test, y_test)
    fit(module, opt, x_user_train, y_user_train, finetune_epochs, seed)
    after = accuracy(module, x_user_test, y_user_test), accuracy(module, x_test, y_test)

    full, head = (json.loads((d / "report.json").read_text()) for d in (pre, dev))
    return {
        "user_before": before[0],
        "user_after": after[0],
        "original_before": before[1],
        "original_after": after[1],
        "user_train": len(x_user_train),
        "user_test": len(x_user_test),
        "original_test": len(x_test),
        "trainable": head["trainable_parameters"],
        "frozen": head["frozen_parameters"],
        "ram_full": full["ram_bytes"],
        "ram_head": head["ram_bytes"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="keep the artifacts here (default: a temporary directory)")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        r = run(args.out or Path(tmp), seed=args.seed)
    print(
        f"fine-tuned the last layer only: {r['trainable']} trainable parameters, {r['frozen']} frozen in flash; "
        f"training RAM {r['ram_head']:,} B (pre-training all layers with AdamW: {r['ram_full']:,} B)"
    )
    print(
        f"user's digits ({r['user_test']} held out, {r['user_train']} used to fine-tune): "
        f"accuracy before {r['user_before']:.3f}, after {r['user_after']:.3f}"
    )
    print(
        f"original digits ({r['original_test']} held out): accuracy before {r['original_before']:.3f}, "
        f"after {r['original_after']:.3f}"
    )
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
