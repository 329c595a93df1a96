"""`edgetrain demo`: train a small MLP on scikit-learn's bundled digits through the generated C.

Every loss, gradient, update and prediction below is computed by the compiled trainer; Python
only builds the model, feeds batches and counts. At the end the trained model is exported to
ONNX and run in onnxruntime to show the two agree. Needs the `demo` extra
(scikit-learn, tqdm, onnxruntime).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .api import CheckpointState, Module, Optimizer
from .artifacts import generate_artifacts
from .errors import EdgetrainError
from .optim import LossType, OptimType

SIZES = (64, 128, 10)  # 8x8 pixels -> hidden -> 10 digits
LEARNING_RATE = 3e-3  # AdamW at this rate passes 95% held-out accuracy in well under 10 epochs


def build_mlp(sizes=SIZES, seed=0, *, batch="batch", dropout=None, opset=18) -> onnx.ModelProto:
    """Gemm -> Relu [-> Dropout] -> ... -> Gemm, weights laid out as torch.nn.Linear's ([out, in],
    hence transB=1) and initialized as it does: uniform in +-1/sqrt(fan_in). `seed` is an int or a
    np.random.Generator (which then goes on from where the weights left it)."""
    rng = np.random.default_rng(seed)
    inits, nodes, x = [], [], "x"
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        bound = 1 / np.sqrt(fan_in)
        inits += [
            numpy_helper.from_array(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32), f"fc{i}.weight"),
            numpy_helper.from_array(rng.uniform(-bound, bound, fan_out).astype(np.float32), f"fc{i}.bias"),
        ]
        y = "logits" if i == len(sizes) - 2 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [y], transB=1, name=f"fc{i}"))
        if y != "logits":
            nodes.append(helper.make_node("Relu", [y], [f"{y}r"], name=f"relu{i}"))
            y = f"{y}r"
            if dropout is not None:
                inits.append(numpy_helper.from_array(np.array(dropout, np.float32), f"ratio{i}"))
                nodes.append(helper.make_node("Dropout", [y, f"ratio{i}"], [f"{y}d"], name=f"drop{i}"))
                y = f"{y}d"
        x = y
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, sizes[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="edgetrain")
    model.ir_version = 10  # readable by older onnxruntime releases too
    return model


def padded_batches(x: np.ndarray, batch_size: int):
    """Yield (batch, n_real): the trainer's batch shape is fixed, so the last partial batch is padded
    with zeros and only its first n_real rows are counted."""
    for start in range(0, len(x), batch_size):
        chunk = x[start : start + batch_size]
        n = len(chunk)
        if n < batch_size:
            chunk = np.concatenate([chunk, np.zeros((batch_size - n, x.shape[1]), x.dtype)])
        yield np.ascontiguousarray(chunk), n


def predict(run_batch, x: np.ndarray, batch_size: int) -> np.ndarray:
    """Class predictions for every row of x, one fixed-size batch at a time."""
    return np.concatenate([run_batch(batch)[:n].argmax(axis=1) for batch, n in padded_batches(x, batch_size)])


def run_demo(epochs: int = 10, directory="out/demo", batch_size: int = 32, seed: int = 0) -> dict:
    try:  # the demo extra, not a runtime dependency of the compiler
        import onnxruntime as ort
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        from tqdm import tqdm
    except ImportError as exc:
        raise EdgetrainError(f"the demo needs {exc.name}: pip install 'edgetrain[demo]'") from None

    started = time.perf_counter()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    onnx.save(build_mlp(seed=rng), str(out / "mlp.onnx"))
    digits = load_digits()  # bundled with scikit-learn: no download
    x = (digits.data / 16.0).astype(np.float32)  # pixels are 0..16
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)

    generate_artifacts(
        out / "mlp.onnx",
        loss=LossType.CrossEntropyLoss,
        optimizer=OptimType["AdamW"],
        batch_size=batch_size,
        learning_rate=LEARNING_RATE,
        artifact_directory=out,
    )
    state = CheckpointState.load_checkpoint(out / "checkpoint")
    module = Module(out / "training_model.onnx", state, out / "eval_model.onnx")
    optimizer = Optimizer(out / "optimizer_model.onnx", module)

    def c_logits(batch):
        return module.infer(batch)[0]  # infer returns every graph output; logits is the only one

    accuracy_before = float((predict(c_logits, x_test, batch_size) == y_test).mean())
    print(f"held-out accuracy before training: {accuracy_before:.1%}")

    module.train()
    losses = []
    steps = len(x_train) // batch_size  # the batch shape is compiled in: drop the last partial batch
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        total = 0.0
        bar = tqdm(range(steps), desc=f"epoch {epoch:>2}/{epochs}", unit="batch")
        for step in bar:
            idx = order[step * batch_size : (step + 1) * batch_size]
            loss = module(x_train[idx], y_train[idx])  # forward + backward in C, gradients accumulate
            optimizer.step()
            module.lazy_reset_grad()
            total += float(loss)
            bar.set_postfix(loss=f"{total / (step + 1):.4f}", refresh=False)  # tqdm redraws at its own pace
        losses.append(total / steps)

    c_pred = predict(c_logits, x_test, batch_size)
    accuracy_after = float((c_pred == y_test).mean())
    print(f"held-out accuracy after {epochs} epochs: {accuracy_after:.1%}")

    # The exported model is an ordinary ONNX graph with the trained weights baked in; it keeps the
    # trainer's fixed batch dimension, so it is fed the same padded batches.
    module.export_model_for_inferencing(out / "digits_infer.onnx", ["logits"])
    session = ort.InferenceSession(str(out / "digits_infer.onnx"), providers=["CPUExecutionProvider"])
    ort_pred = predict(lambda batch: session.run(["logits"], {"x": batch})[0], x_test, batch_size)
    agree = int((ort_pred == c_pred).sum())
    print(f"onnxruntime agrees with the generated C on {agree}/{len(c_pred)} held-out predictions")

    CheckpointState.save_checkpoint(state, out / "trained.ckpt", include_optimizer_state=True)
    elapsed = time.perf_counter() - started
    print(f"artifacts in {out}/ ({elapsed:.1f} s)")
    return {
        "accuracy_before": accuracy_before,
        "accuracy_after": accuracy_after,
        "agreement": agree / len(c_pred),
        "losses": losses,
        "seconds": elapsed,
    }
