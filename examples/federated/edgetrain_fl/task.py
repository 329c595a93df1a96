"""What the ClientApp, the ServerApp and run.py share: the model, the data split across clients,
and a small trainer over edgetrain's generated C (every loss, gradient, update and prediction is
computed there; Python moves buffers and counts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from edgetrain import api

SIZES = (64, 64, 10)
BATCH = 10
LEARNING_RATE = 0.05  # local SGD with momentum 0.9, restarted every round


def split_non_iid(labels: np.ndarray, clients: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Indices per client: each class is shared out in Dirichlet(alpha) proportions, so every client
    sees a few classes often and the others rarely (the usual non-IID benchmark split)."""
    while True:
        parts = [[] for _ in range(clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet([alpha] * clients)) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.extend(chunk)
        if min(len(p) for p in parts) >= 4 * BATCH:  # enough for local batches and a validation split
            return [np.sort(np.array(p)) for p in parts]


def prepare(work: Path, clients: int, seed: int = 0, alpha: float = 0.5) -> dict:
    """Write the trainer's artifacts and every client's data (its digits, 80 % to train and 20 %
    to evaluate on) into `work`."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from edgetrain import artifacts  # the compiler: run.py needs it, the clients do not
    from edgetrain.demo import build_mlp

    digits = load_digits()
    x, y = (digits.data / 16).astype(np.float32), digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=seed)
    rng = np.random.default_rng(seed)
    sizes = []
    for cid, idx in enumerate(split_non_iid(y_train, clients, alpha, rng)):
        idx = rng.permutation(idx)
        cut = int(0.8 * len(idx))
        np.savez(
            work / f"client{cid}.npz",
            x_train=x_train[idx[:cut]],
            y_train=y_train[idx[:cut]],
            x_val=x_train[idx[cut:]],
            y_val=y_train[idx[cut:]],
        )
        sizes.append(np.bincount(y_train[idx], minlength=10).tolist())
    np.savez(work / "test.npz", x=x_test, y=y_test)
    artifacts.generate_artifacts(
        build_mlp(SIZES, seed),
        artifact_directory=work / "artifacts",
        batch_size=BATCH,
        optimizer="SGD",
        momentum=0.9,
        learning_rate=LEARNING_RATE,
        federated=True,
    )
    info = {"clients": clients, "class_counts": sizes, "train": len(x_train), "test": len(x_test)}
    (work / "split.json").write_text(json.dumps(info))
    return info


class Trainer:
    """One client's (or the server's) trainer: the generated C, loaded fresh."""

    def __init__(self, work: Path):
        out = Path(work) / "artifacts"
        self.state = api.CheckpointState.load_checkpoint(out / "checkpoint")
        self.module = api.Module(out / "training_model.onnx", self.state, out / "eval_model.onnx")
        self.optimizer = api.Optimizer(out / "optimizer_model.onnx", self.module)
        self.names = [n for n, p in self.state.parameters.items() if p.requires_grad]

    def arrays(self) -> dict[str, np.ndarray]:
        """The trainable parameters by name (copies)."""
        return {n: self.state.parameters[n].data.copy() for n in self.names}

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        out, at = {}, 0
        for n in self.names:
            shape = self.state.parameters[n].data.shape
            size = int(np.prod(shape))
            out[n] = flat[at : at + size].reshape(shape)
            at += size
        return out

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        self.module.copy_buffer_to_parameters(
            np.concatenate([np.asarray(arrays[n], np.float32).ravel() for n in self.names]), trainable_only=True
        )

    def fit(self, x: np.ndarray, y: np.ndarray, epochs: int, seed: int) -> float:
        """Local epochs of shuffled mini-batches (the last partial batch is left for the next
        shuffle: the compiled batch size is fixed). Returns the mean training loss."""
        rng, losses = np.random.default_rng(seed), []
        self.module.train()
        for _ in range(epochs):
            order = rng.permutation(len(x))
            for start in range(0, len(x) - BATCH + 1, BATCH):
                take = order[start : start + BATCH]
                losses.append(self.module(x[take], y[take]))
                self.optimizer.step()
                self.module.lazy_reset_grad()
        return float(np.mean(losses))

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """(mean loss over the full batches, through eval_step; accuracy over every row, through
        infer with the last batch padded)."""
        self.module.eval()
        losses = [self.module(x[s : s + BATCH], y[s : s + BATCH]) for s in range(0, len(x) - BATCH + 1, BATCH)]
        correct = 0
        for start in range(0, len(x), BATCH):
            chunk = x[start : start + BATCH]
            padded = np.zeros((BATCH, x.shape[1]), np.float32)
            padded[: len(chunk)] = chunk
            correct += int((self.module.infer(padded)[0][: len(chunk)].argmax(1) == y[start : start + BATCH]).sum())
        return float(np.mean(losses)) if losses else float("nan"), correct / len(x)


def centralized_accuracy(work: Path, epochs: int, seed: int = 0) -> float:
    """The same model and optimizer trained on all the clients' training digits pooled."""
    parts = [np.load(p) for p in sorted(Path(work).glob("client*.npz"))]
    x = np.concatenate([p["x_train"] for p in parts])
    y = np.concatenate([p["y_train"] for p in parts])
    test = np.load(Path(work) / "test.npz")
    trainer = Trainer(work)
    trainer.fit(x, y, epochs, seed)
    return trainer.evaluate(test["x"], test["y"])[1]
