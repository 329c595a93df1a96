"""A small CNN trained on scikit-learn's handwritten digits (8x8, 10 classes) by the generated C,
then scored on held-out digits with the C's inference (BatchNormalization on its running statistics).

    python examples/models/digits_cnn.py
"""

import tempfile
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from edgetrain import api, artifacts

try:
    from .mlperf_tiny import export_training
except ImportError:  # run as a script: python examples/models/digits_cnn.py
    from mlperf_tiny import export_training

BATCH = 32


def digits_cnn() -> nn.Module:
    """Two Conv 3x3 + BatchNorm + ReLU + MaxPool stages (8 and 16 channels), then Dense to 10."""
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 2 * 2, 10),
    )
    model.input_shape = (1, 8, 8)
    return model


def _batches(x, n):
    """`x` cut into batches of n (the trainer's fixed batch), the last one padded with the first rows."""
    return np.concatenate([x, x[: -len(x) % n]]).reshape(-1, n, *x.shape[1:])


def train_and_score(directory, epochs=15, seed=0) -> float:
    """Held-out accuracy after `epochs` of AdamW on 75 % of the digits."""
    digits = load_digits()
    x = (digits.images / 16).astype(np.float32)[:, None]
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=seed, stratify=digits.target
    )
    model, _ = export_training(digits_cnn(), BATCH, seed)
    out = artifacts.generate_artifacts(
        model, artifact_directory=directory, learning_rate=1e-2, optimizer=artifacts.OptimType.AdamW
    )
    state = api.CheckpointState.load_checkpoint(out / "checkpoint")
    module = api.Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    optimizer = api.Optimizer(out / "optimizer_model.onnx", module)
    rng = np.random.default_rng(seed)
    module.train()
    for _ in range(epochs):
        order = rng.permutation(len(x_train))[: len(x_train) // BATCH * BATCH].reshape(-1, BATCH)
        for rows in order:
            module(x_train[rows], y_train[rows])
            optimizer.step()
            module.lazy_reset_grad()
    module.eval()
    logits = np.concatenate([module.infer(batch)[0] for batch in _batches(x_test, BATCH)])[: len(x_test)]
    return float(np.mean(logits.argmax(axis=1) == y_test))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        print(f"held-out accuracy: {train_and_score(Path(tmp)):.3f}")
