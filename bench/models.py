"""The benchmarked models: the digits MLP of `edgetrain demo`, the four MLPerf Tiny models and two
sequence taggers (GRU, LSTM), as PyTorch modules and as the ONNX graph every system trains.

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

# The taggers: token ids (VOCABULARY of them) -> embedding -> one recurrent layer -> a class per
# position. Their logits come flattened, (batch * positions, classes), beside one label per position:
# the form ONNX Runtime training's CrossEntropyLoss takes labels for.
VOCABULARY, POSITIONS, EMBEDDING, HIDDEN, TAGS = 64, 32, 32, 64, 8


class Tagger(nn.Module):
    def __init__(self, cell: str):
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, EMBEDDING)
        self.rnn = getattr(nn, cell)(EMBEDDING, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, TAGS)

    def forward(self, tokens):
        states, _ = self.rnn(self.embed(tokens))
        return self.head(states).reshape(-1, TAGS)


# name: (builder, one sample's shape, classes or None for a reconstruction loss)
MODELS = {
    "mlp": (
        lambda: nn.Sequential(nn.Linear(MLP_SIZES[0], MLP_SIZES[1]), nn.ReLU(), nn.Linear(MLP_SIZES[1], MLP_SIZES[2])),
        (MLP_SIZES[0],),
        MLP_SIZES[-1],
    ),
    **{name: (m["build"], m["input"], m["classes"]) for name, m in MLPERF_TINY.items()},
    "gru": (lambda: Tagger("GRU"), (POSITIONS,), TAGS),
    "lstm": (lambda: Tagger("LSTM"), (POSITIONS,), TAGS),
}
TAGGERS = ("gru", "lstm")  # their samples are token ids, their labels one per position


def _torchvision():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.zoo.torchvision_shim import torchvision

    return torchvision


def _mobilenet_v2() -> nn.Module:
    """torchvision's MobileNetV2 at width 0.35, the Tiny Training Engine's setting (10 classes)."""
    return _torchvision().models.mobilenet_v2(width_mult=0.35, num_classes=10)


def _distinct(build):
    """`build`, with every parameter moved a little off its initial value: torchvision starts many
    biases and BatchNormalization shifts at the same constant, which the exporter's constant folding
    would merge into one initializer."""

    def distinct() -> nn.Module:
        model = build()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.01)
        return model

    return distinct


# Models the default sweep leaves out (`speed.py --models resnet18,squeezenet`): third-party model
# code at sizes whose last layers have planes a few positions wide, as users bring it.
HELD_OUT = {
    "resnet18": (_distinct(lambda: _torchvision().models.resnet18(num_classes=10)), (3, 64, 64), 10),
    "squeezenet": (_distinct(lambda: _torchvision().models.squeezenet1_1(num_classes=10)), (3, 32, 32), 10),
}

# MODELS and the models only the memory bench measures (issue 24's MobileNetV2 at 128 x 128).
MEMORY_MODELS = {**MODELS, **HELD_OUT, "mbv2": (_mobilenet_v2, (3, 128, 128), 10)}


def torch_model(name: str, seed: int = 0) -> nn.Module:
    """The model in eval mode with its BatchNormalization layers frozen."""
    torch.manual_seed(seed)
    return freeze_batchnorm(MEMORY_MODELS[name][0]())


def export(model: nn.Module, name: str, batch: int) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """(eval-mode ONNX graph for a fixed batch, names of its trained and frozen parameters)."""
    dtype = torch.long if name in TAGGERS else torch.float32  # token ids or values
    graph = export_eval(model, batch, MEMORY_MODELS[name][1], dtype)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    missing = set(trainable + frozen) - {i.name for i in graph.graph.initializer}
    if missing:
        raise RuntimeError(f"the export of {name} renamed parameters {sorted(missing)}")
    return graph, trainable, frozen
