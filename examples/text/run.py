"""Personalize a character-level language model to a new style of writing, through the generated C.

1. Pre-train a tiny causal transformer (tinygpt.py: 2 layers, 2 heads, d=32) in PyTorch on the
   Gospel of Mark in the World English Bible: modern English prose.
2. Export it to ONNX and compile it into a C trainer with edgetrain (AdamW, cross entropy over
   every position of the sequence).
3. On the device, fine-tune it through the generated C on the first book of the Psalms (1-41) in
   the King James Version: Early Modern English verse ("thee", "thou", "walketh", "Selah").
4. Report the perplexity of held-out Psalms (the last tenth of the lines, never trained on)
   before and after, and of held-out Mark, computed by the C's eval step. The last batch of each
   held-out text is padded with ignore_index, which the loss skips.

Both texts are in the public domain (data/README.md). Run: python examples/text/run.py (or
`make text`); --quick runs a reduced version in about a minute.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from edgetrain import api, artifacts
from tinygpt import TinyGPT, export

DATA = Path(__file__).resolve().parent / "data"
PAD = -100  # ignore_index: padding in the last held-out batch


def load_texts() -> tuple[str, str, list[str]]:
    pretrain = (DATA / "mark_web.txt").read_text(encoding="utf-8")
    personal = (DATA / "psalms_kjv.txt").read_text(encoding="utf-8")
    return pretrain, personal, sorted(set(pretrain + personal))


def split_lines(text: str, held_out: float = 0.1) -> tuple[str, str]:
    """(training part, the last `held_out` of the lines)."""
    lines = text.splitlines(keepends=True)
    cut = len(lines) - max(1, int(len(lines) * held_out))
    return "".join(lines[:cut]), "".join(lines[cut:])


def random_windows(ids: np.ndarray, count: int, context: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """`count` windows of the text: inputs and the next characters they predict."""
    starts = rng.integers(0, len(ids) - context - 1, size=count)
    x = np.stack([ids[s : s + context] for s in starts])
    return x, np.stack([ids[s + 1 : s + context + 1] for s in starts])


def held_out_batches(ids: np.ndarray, batch: int, context: int):
    """Consecutive windows covering the text once, in batches of the compiled size; the labels of
    positions past the end are PAD."""
    windows = math.ceil((len(ids) - 1) / context)
    x = np.zeros((math.ceil(windows / batch) * batch, context), np.int64)
    y = np.full_like(x, PAD)
    for w in range(windows):
        chunk = ids[w * context : (w + 1) * context + 1]
        x[w, : len(chunk) - 1], y[w, : len(chunk) - 1] = chunk[:-1], chunk[1:]
    for start in range(0, len(x), batch):
        yield x[start : start + batch], y[start : start + batch]


def perplexity(module, ids: np.ndarray, batch: int, context: int) -> float:
    """exp of the mean loss per predicted character; each batch's mean loss comes from the C."""
    module.eval()
    total = count = 0.0
    for x, y in held_out_batches(ids, batch, context):
        n = int(np.sum(y != PAD))
        total += float(module(x, y)) * n
        count += n
    module.train()
    return math.exp(total / count)


def pretrain(model, ids, steps: int, batch: int, context: int, seed: int) -> None:
    """The vendor's side, in PyTorch. One thread: a model this small only loses time to threads
    waiting on each other."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            x, y = random_windows(ids, batch, context, rng)
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)


def sample(module, vocab: list[str], prompt: str, length: int, batch: int, context: int, seed: int) -> str:
    """Text continued by the C's forward pass (infer), one character at a time."""
    rng = np.random.default_rng(seed)
    index = {c: i for i, c in enumerate(vocab)}
    text = [index[c] for c in prompt]
    for _ in range(length):
        window = text[-context:]
        x = np.zeros((batch, context), np.int64)
        x[0, : len(window)] = window
        logits = module.infer(x)[0][0, :, len(window) - 1].astype(np.float64)
        p = np.exp((logits - logits.max()) / 0.7)
        text.append(int(rng.choice(len(vocab), p=p / p.sum())))
    return "".join(vocab[i] for i in text)


def run(
    out: Path,
    pretrain_steps: int = 1500,
    finetune_steps: int = 300,
    batch: int = 16,
    context: int = 64,
    seed: int = 0,
    verbose: bool = False,
) -> dict:
    pretrain_text, personal_text, vocab = load_texts()
    encode = lambda text: np.array([vocab.index(c) for c in text], np.int64)  # noqa: E731
    mark_train, mark_test = (encode(t) for t in split_lines(pretrain_text))
    psalms_train, psalms_test = (encode(t) for t in split_lines(personal_text))
    log = print if verbose else (lambda *a, **k: None)

    torch.manual_seed(seed)
    model = TinyGPT(len(vocab), context)
    started = time.perf_counter()
    pretrain(model, mark_train, pretrain_steps, 32, context, seed)
    log(f"pre-trained on Mark (WEB) in PyTorch: {pretrain_steps} steps, {time.perf_counter() - started:.1f} s")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes about shapes it records as constants
        path = export(model, batch, context, out / "tinygpt.onnx")
    artifacts.generate_artifacts(
        path,
        loss=artifacts.LossType.CrossEntropyLoss,
        ignore_index=PAD,
        optimizer=artifacts.OptimType.AdamW,
        learning_rate=2e-3,
        artifact_directory=out / "artifacts",
    )
    state = api.CheckpointState.load_checkpoint(out / "artifacts" / "checkpoint")
    module = api.Module(out / "artifacts" / "training_model.onnx", state, out / "artifacts" / "eval_model.onnx")
    opt = api.Optimizer(out / "artifacts" / "optimizer_model.onnx", module)

    result = {
        "psalms_before": perplexity(module, psalms_test, batch, context),
        "mark_before": perplexity(module, mark_test, batch, context),
    }
    log(
        f"held-out perplexity before fine-tuning: Psalms (KJV) {result['psalms_before']:.2f}, "
        f"Mark (WEB) {result['mark_before']:.2f}"
    )
    if verbose:
        log("sample before:", repr(sample(module, vocab, "Blessed is the ", 60, batch, context, seed)))

    rng = np.random.default_rng(seed + 1)
    started = time.perf_counter()
    for _ in range(finetune_steps):
        module(*random_windows(psalms_train, batch, context, rng))
        opt.step()
        module.lazy_reset_grad()
    result["finetune_seconds"] = time.perf_counter() - started
    log(
        f"fine-tuned on Psalms 1-41 (KJV) in the generated C: {finetune_steps} steps of {batch} x {context} "
        f"characters, {result['finetune_seconds']:.1f} s"
    )

    result["psalms_after"] = perplexity(module, psalms_test, batch, context)
    result["mark_after"] = perplexity(module, mark_test, batch, context)
    log(
        f"held-out perplexity after fine-tuning:  Psalms (KJV) {result['psalms_after']:.2f}, "
        f"Mark (WEB) {result['mark_after']:.2f}"
    )
    if verbose:
        log("sample after: ", repr(sample(module, vocab, "Blessed is the ", 60, batch, context, seed)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, help="where to write the model and artifacts (default: a temporary directory)"
    )
    parser.add_argument("--quick", action="store_true", help="a reduced run: fewer steps, smaller batches")
    args = parser.parse_args()
    steps = dict(pretrain_steps=300, finetune_steps=40, batch=8, context=32) if args.quick else {}
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        result = run(out, verbose=True, **steps)
    print(json.dumps({k: round(v, 3) for k, v in result.items()}))


if __name__ == "__main__":
    main()
