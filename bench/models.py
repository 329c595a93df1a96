"""The benchmarked models: the digits MLP of `edgetrain demo` and the four MLPerf Tiny models, as
PyTorch modules and as the ONNX graph every system trains.

Every system trains the eval-mode export with BatchNormalization frozen (running statistics, fixed
scale and bias): ONNX Runtime training cannot train the training-mode export (DESIGN.md), and the
comparison is only fair on one graph. Conv, Gemm and the frozen BatchNormalization's backward still
run on every system.
"""

import io
import sys
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))
from mlperf_tiny import MODELS as MLPERF_TINY, OPSET  # noqa: E402

from edgetrain.demo import SIZES as MLP_SIZES  # noqa: E402

# name: (builder, one sample's shape, classes or None for a reconstruction loss)
MODELS = {"mlp": (lambda: nn.Sequential(nn.Linear(MLP_SIZES[0], MLP_SIZES[1]), nn.ReLU(),
                                        nn.Linear(MLP_SIZES[1], MLP_SIZES[2])), (MLP_SIZES[0],), MLP_SIZES[-1]),
          **{name: (m["build"], m["input"], m["classes"]) for name, m in MLPERF_TINY.items()}}


def torch_model(name: str, seed: int = 0) -> nn.Module:
    """The model in eval mode with its BatchNormalization layers frozen."""
    torch.manual_seed(seed)
    model = MODELS[name][0]().eval()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            # Statistics and affine values as a trained model has them: a fresh layer's are zeros and
            # ones, which the exporter merges into shared initializers read through Identity nodes.
            with torch.no_grad():
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
            module.requires_grad_(False)
    return model


def export(model: nn.Module, name: str, batch: int) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """(eval-mode ONNX graph for a fixed batch, names of its trained and frozen parameters)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notes
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(batch, *MODELS[name][1]),), buffer, input_names=["input"],
                          output_names=["output"], opset_version=OPSET, training=torch.onnx.TrainingMode.EVAL,
                          do_constant_folding=False, dynamo=False)
    graph = onnx.load_from_string(buffer.getvalue())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    missing = set(trainable + frozen) - {i.name for i in graph.graph.initializer}
    if missing:
        raise RuntimeError(f"the export of {name} renamed parameters {sorted(missing)}")
    return graph, trainable, frozen
