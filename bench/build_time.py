"""Build time of a big model: torchvision's resnet18 (11.2 M parameters), 10 classes, 32x32 input.

    python bench/build_time.py [--batch-size N] [--keep DIR]       (or: make bench-build)

Exports resnet18 in training mode (BatchNormalization with batch statistics) with torch's TorchScript
exporter, then times generate_artifacts (ONNX -> model.c and model_weights.h) and the first
api.Module (the C compiler building the trainer, with an empty build cache), and prints the sizes of
model.c and model_weights.h. Everything runs on one core (this process is pinned to one CPU, and the
compiler inherits that; one BLAS/OpenMP thread). Each time is given as wall time and as CPU time
(this process and the compilers it ran), the latter split between the compilers and Python: on a
busy machine, only the CPU time says what an idle core would take, and the load averages printed
before and after say how busy it was. The budget is 10 s in total.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from tests.zoo.torchvision_shim import torchvision

BUDGET_SECONDS = 10.0


def clocks() -> tuple[float, float, float]:
    """(wall, CPU, compilers' CPU) seconds, CPU counting this process and the compilers it ran."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    compilers = children.ru_utime + children.ru_stime
    return time.perf_counter(), own.ru_utime + own.ru_stime + compilers, compilers


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def export(path: Path, batch_size: int) -> int:
    """resnet18's training-mode export to `path`; its parameter count."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    torch.onnx.export(
        model,
        (torch.randn(batch_size, 3, 32, 32),),
        str(path),
        dynamo=False,
        training=torch.onnx.TrainingMode.TRAINING,
        input_names=["x"],
        output_names=["logits"],
    )
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="write the artifacts here (default: a temporary directory)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EDGETRAIN_CACHE"] = str(Path(tmp, "cache"))  # so the first api.Module compiles
        from edgetrain import api, artifacts

        onnx_path = Path(tmp, "resnet18.onnx")
        parameters = export(onnx_path, args.batch_size)
        out = args.keep or Path(tmp, "out")
        before = load()
        start = clocks()
        artifacts.generate_artifacts(
            str(onnx_path),
            artifact_directory=out,
            batch_size=args.batch_size,
            loss=artifacts.LossType.CrossEntropyLoss,
            optimizer=artifacts.OptimType.SGD,
        )
        generated = clocks()
        api.Module(
            out / "training_model.onnx",
            api.CheckpointState.load_checkpoint(out / "checkpoint"),
            out / "eval_model.onnx",
        )
        loaded = clocks()
        sizes = {
            name: (out / name).stat().st_size for name in ("model.c", "model_weights.h") if (out / name).exists()
        }  # an edgetrain before model_weights.h has model.c alone
    print(
        f"resnet18: {parameters / 1e6:.1f} M parameters, batch {args.batch_size}, one core; {before} before, "
        f"{load()} after"
    )
    print(f"  {'seconds':<20} {'wall':>6} {'CPU':>6} {'of which compilers':>19}")
    for label, (w0, c0, k0), (w1, c1, k1) in (
        ("generate_artifacts", start, generated),
        ("first api.Module", generated, loaded),
        ("total", start, loaded),
    ):
        print(f"  {label:<20} {w1 - w0:6.1f} {c1 - c0:6.1f} {k1 - k0:19.1f}")
    total = loaded[1] - start[1]
    print(f"  {'budget':<20} {BUDGET_SECONDS:13.1f}  ({'met' if total <= BUDGET_SECONDS else 'over'} in CPU time)")
    for name, size in sizes.items():
        print(f"  {name:<20} {size / 2**20:6.1f} MB")


if __name__ == "__main__":
    main()
