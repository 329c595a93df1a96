"""One benchmark measurement per process, so each system's peak RSS is its own.

`python workers.py SYSTEM DIR BUDGET` trains the model prepared in DIR (x.npy, y.npy and the
system's artifacts, see speed.py) single-threaded and prints one JSON line: the median step time,
the steps timed, the process's peak RSS and the losses of its first steps (the systems train the
same model on the same batch, so these must agree). A step is a training step (forward, loss,
backward), an optimizer step and a gradient reset. `python workers.py COMMAND DIR...` makes the
artifacts (PREPARE). Imports only numpy at the top: the ONNX Runtime commands run in ONNX Runtime's own venv,
which has no edgetrain.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

WARMUP_SECONDS = 0.05
MIN_STEPS, MAX_STEPS = 5, 5000
LOSSES = 3  # the first steps' losses reported (driver.c reports as many)


def median_step_ns(step, budget: float) -> tuple[int, int, list[float]]:
    """(median ns, steps timed, the first LOSSES losses): warm up, then time single steps until
    `budget` seconds have passed. `step()` returns the step's loss."""
    losses = [float(step()) for _ in range(LOSSES)]
    start = time.perf_counter()
    while time.perf_counter() - start < WARMUP_SECONDS:
        step()
    times = []
    start = time.perf_counter_ns()
    while len(times) < MAX_STEPS and (len(times) < MIN_STEPS or time.perf_counter_ns() - start < budget * 1e9):
        t0 = time.perf_counter_ns()
        step()
        times.append(time.perf_counter_ns() - t0)
    return int(np.median(times)), len(times), losses


def peak_rss_kb() -> int:
    """This process image's peak RSS (VmHWM): unlike ru_maxrss, which Linux carries across exec, it
    does not include the benchmark's own Python that started this process."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0])


def training_api_step(module, optimizer, x, y):
    """A step through ONNX Runtime's training API, or through ours, which has its shape."""
    module.train()

    def step():
        loss = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        return loss

    return step


def edgetrain_step(directory: Path, x, y):
    from edgetrain import api

    state = api.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = api.Module(directory / "training_model.onnx", state, directory / "eval_model.onnx")
    optimizer = api.Optimizer(directory / "optimizer_model.onnx", module)
    y = y.astype(np.int32) if np.issubdtype(y.dtype, np.integer) else y  # the trainer's label type
    return training_api_step(module, optimizer, x, y)


def ort_step(directory: Path, x, y):
    import onnxruntime
    from onnxruntime.training import api

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    module = api.Module(
        str(directory / "training_model.onnx"), state, str(directory / "eval_model.onnx"), session_options=options
    )
    optimizer = api.Optimizer(str(directory / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(json.loads((directory.parent / "spec.json").read_text())["lr"])
    return training_api_step(module, optimizer, x, y)


def torch_step(directory: Path, x, y):
    import torch
    from models import torch_model

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    spec = json.loads((directory.parent / "spec.json").read_text())
    model = torch_model(spec["model"])
    model.load_state_dict(torch.load(directory / "state.pt"))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=spec["lr"])
    loss_fn = torch.nn.functional.cross_entropy if np.issubdtype(y.dtype, np.integer) else torch.nn.functional.mse_loss
    x, y = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    return step


def cache_dir(directory: Path, mode: str) -> Path:
    """Where the trainer in `directory` keeps its shared library built in `mode`, the only one there."""
    return directory / f"cache-{mode}"


def edgetrain_generate(directory: Path, model: Path | None = None, **options) -> None:
    """Generate the trainer (PYTHONPATH picks the generator's revision), with generate_artifacts'
    `options` beside the case's; `model` in place of the case's, whose parameters of the case's
    lists it keeps train as they do there."""
    import onnx
    from edgetrain.artifacts import generate_artifacts

    spec = json.loads((directory.parent / "spec.json").read_text())
    model = model or directory.parent / "model.onnx"
    names = {i.name for i in onnx.load(str(model), load_external_data=False).graph.initializer}
    generate_artifacts(
        str(model),
        requires_grad=[n for n in spec["requires_grad"] if n in names],
        frozen_params=[n for n in spec["frozen"] if n in names],
        loss=spec["loss"],
        optimizer="SGD",
        learning_rate=spec["lr"],
        artifact_directory=directory,
        **options,
    )


def edgetrain_build(directory: Path) -> None:
    """Build the trainer's shared library in the build mode EDGETRAIN_BUILD says."""
    from edgetrain.host import load_library

    load_library(directory)


def ort_artifacts(directory: Path) -> None:
    import onnx
    from onnxruntime.training import artifacts

    spec = json.loads((directory.parent / "spec.json").read_text())
    # A ModelProto, not a path: from a path, ORT 1.19 saves scratch external data twice, which the onnx
    # of its venv refuses. Its scratch files land in the working directory (speed.py's temporary one).
    artifacts.generate_artifacts(
        onnx.load(str(directory.parent / "model.onnx")),
        requires_grad=spec["requires_grad"],
        frozen_params=spec["frozen"],
        loss=artifacts.LossType[spec["loss"]],
        optimizer=artifacts.OptimType.SGD,
        artifact_directory=str(directory),
    )
    optimizer = onnx.load(str(directory / "optimizer_model.onnx"))
    optimizer.ir_version = 10  # ONNX Runtime 1.19 reads IR 10 at most; newer onnx writes more
    onnx.save(optimizer, str(directory / "optimizer_model.onnx"))


STEPS = {"edgetrain": edgetrain_step, "ort": ort_step, "torch": torch_step}
PREPARE = {"edgetrain-generate": edgetrain_generate, "edgetrain-build": edgetrain_build, "ort-artifacts": ort_artifacts}


def main(command: str, *args: str) -> None:
    """`edgetrain-generate|edgetrain-build|ort-artifacts DIR...` or `edgetrain|ort|torch DIR BUDGET`."""
    directories = [Path(a) for a in (args if command in PREPARE else args[:1])]
    for directory in directories:
        # edgetrain builds into, and loads from, this directory's cache for the build mode
        os.environ["EDGETRAIN_CACHE"] = str(cache_dir(directory, os.environ.get("EDGETRAIN_BUILD", "reproducible")))
        if command in PREPARE:
            PREPARE[command](directory)
            continue
        x, y = np.load(directory.parent / "x.npy"), np.load(directory.parent / "y.npy")
        median, steps, losses = median_step_ns(STEPS[command](directory, x, y), float(args[1]))
        print(json.dumps({"median_ns": median, "steps": steps, "peak_rss_kb": peak_rss_kb(), "losses": losses}))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(*sys.argv[1:])
