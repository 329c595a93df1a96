"""The benchmarked models: the digits MLP of `edgetrain demo` and the four MLPerf Tiny models, as
PyTorch modules and as the ONNX graph every system trains.

Every system trains the eval-mode export with BatchNormalization frozen (running statistics, fixed
scale and bias): ONNX Runtime training cannot train the training-mode export (DESIGN.md), and the
comparison is only fair on one graph. Conv, Gemm and the frozen BatchNormalization's backward still
run on every system.
"""

import sys
from pathlib import Path

import onnx
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))
from mlperf_tiny import MODELS as MLPERF_TINY, export_eval, freeze_batchnorm

from edgetrain.demo import SIZES as MLP_SIZES

# name: (builder, one sample's shape, classes or None for a reconstruction loss)
MODELS = {
    "mlp": (
        lambda: nn.Sequential(nn.Linear(MLP_SIZES[0], MLP_SIZES[1]), nn.ReLU(), nn.Linear(MLP_SIZES[1], MLP_SIZES[2])),
        (MLP_SIZES[0],),
        MLP_SIZES[-1],
    ),
    **{name: (m["build"], m["input"], m["classes"]) for name, m in MLPERF_TINY.items()},
}


def torch_model(name: str, seed: int = 0) -> nn.Module:
    """The model in eval mode with its BatchNormalization layers frozen."""
    torch.manual_seed(seed)
    return freeze_batchnorm(MODELS[name][0]())


def export(model: nn.Module, name: str, batch: int) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """(eval-mode ONNX graph for a fixed batch, names of its trained and frozen parameters)."""
    graph = export_eval(model, batch, MODELS[name][1])
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    missing = set(trainable + frozen) - {i.name for i in graph.graph.initializer}
    if missing:
        raise RuntimeError(f"the export of {name} renamed parameters {sorted(missing)}")
    return graph, trainable, frozen
