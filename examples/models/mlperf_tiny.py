"""The four MLPerf Tiny reference models as PyTorch modules, and their export to ONNX in training form
(or in eval form, BatchNormalization frozen).

Layer sizes follow the MLPerf Tiny training references (Keras; Conv and Dense keep their biases as
there). TensorFlow's 'same' padding becomes PyTorch's symmetric padding with the same output sizes:
where TensorFlow pads one row more at the bottom or right, the extra row is at the top or left here,
which keeps every model free of separate Pad nodes. The references' Dropout layers are left out:
they make a training step non-deterministic, and these builders exist to check training steps
number for number.

    from mlperf_tiny import MODELS, export_training
    onnx_model, torch_model = export_training(MODELS["kws"]["build"](), batch=2)
"""

import io
import warnings

import onnx
import torch
from onnx import numpy_helper
from torch import nn

OPSET = 17  # BatchNormalization in training mode exports as one node with 3 outputs from opset 15


def _for_input(name, model):
    model.input_shape = MODELS[name]["input"]
    return model


def _conv_bn_relu(cin, cout, kernel=3, stride=1, padding=1, groups=1):
    return [nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups), nn.BatchNorm2d(cout), nn.ReLU()]


def _depthwise_separable(cin, cout, stride=1):
    return _conv_bn_relu(cin, cin, 3, stride, 1, groups=cin) + _conv_bn_relu(cin, cout, 1, 1, 0)


def ds_cnn(classes=12, filters=64) -> nn.Module:
    """Keyword spotting DS-CNN on 1x49x10 MFCC: Conv 10x4 stride 2 to 25x5, four depthwise-separable
    blocks, 25x5 average pooling, Dense."""
    layers = _conv_bn_relu(1, filters, (10, 4), 2, (5, 1))
    for _ in range(4):
        layers += _depthwise_separable(filters, filters)
    return _for_input("kws", nn.Sequential(*layers, nn.AvgPool2d((25, 5)), nn.Flatten(), nn.Linear(filters, classes)))


def mobilenet_v1_025(classes=2, alpha=0.25) -> nn.Module:
    """Visual wake words MobileNetV1 (width 0.25) on 3x96x96: Conv 3x3 stride 2, 13 depthwise-separable
    blocks down to 3x3, average pooling, Dense."""
    width = [int(c * alpha) for c in (32, 64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024)]
    strides = (1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1)
    layers = _conv_bn_relu(3, width[0], 3, 2, 1)
    for cin, cout, stride in zip(width, width[1:], strides):
        layers += _depthwise_separable(cin, cout, stride)
    return _for_input("vww", nn.Sequential(*layers, nn.AvgPool2d(3), nn.Flatten(), nn.Linear(width[-1], classes)))


class _ResidualStack(nn.Module):
    """Two 3x3 Conv+BN (ReLU between) added to the input, or to its 1x1 strided projection when the
    stack halves the resolution; ReLU after the sum."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn_relu(cin, cout, 3, stride, 1), nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout)
        )
        self.shortcut = nn.Conv2d(cin, cout, 1, stride) if stride != 1 else nn.Identity()

    def forward(self, x):
        return torch.relu(self.shortcut(x) + self.body(x))


def resnet8(classes=10, filters=16) -> nn.Module:
    """Image classification ResNet-8 on 3x32x32: Conv 3x3, three residual stacks (16, 32, 64 channels,
    the last two at stride 2), 8x8 average pooling, Dense."""
    return _for_input(
        "ic",
        nn.Sequential(
            *_conv_bn_relu(3, filters),
            _ResidualStack(filters, filters, 1),
            _ResidualStack(filters, 2 * filters, 2),
            _ResidualStack(2 * filters, 4 * filters, 2),
            nn.AvgPool2d(8),
            nn.Flatten(),
            nn.Linear(4 * filters, classes),
        ),
    )


def fc_autoencoder(inputs=640, hidden=128, bottleneck=8) -> nn.Module:
    """Anomaly detection (ToyADMOS) autoencoder on 640 log-mel values (5 frames x 128 bands):
    4 x Dense 128 + BN + ReLU, Dense 8 + BN + ReLU, 4 x Dense 128 + BN + ReLU, Dense 640."""
    sizes = [inputs] + [hidden] * 4 + [bottleneck] + [hidden] * 4
    layers = []
    for cin, cout in zip(sizes, sizes[1:]):
        layers += [nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU()]
    return _for_input("ad", nn.Sequential(*layers, nn.Linear(hidden, inputs)))


# input: one sample's shape (`model.input_shape`); classes: logits per sample (None: the model
# reconstructs its input); loss: the artifacts.LossType name the reference trains with.
MODELS = {
    "kws": {"build": ds_cnn, "input": (1, 49, 10), "classes": 12, "loss": "CrossEntropyLoss"},
    "vww": {"build": mobilenet_v1_025, "input": (3, 96, 96), "classes": 2, "loss": "CrossEntropyLoss"},
    "ic": {"build": resnet8, "input": (3, 32, 32), "classes": 10, "loss": "CrossEntropyLoss"},
    "ad": {"build": fc_autoencoder, "input": (640,), "classes": None, "loss": "MSELoss"},
}


def _export(model: nn.Module, batch: int, input_shape, mode, dtype=torch.float32) -> onnx.ModelProto:
    """`model` exported for a fixed batch (input "input" of `dtype`, output "output", no constant
    folding); the sample shape is the builder's (`model.input_shape`) unless given."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the exporter's notes on num_batches_tracked, which ONNX does not carry
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(batch, *(input_shape or model.input_shape), dtype=dtype),),
            buffer,
            input_names=["input"],
            output_names=["output"],
            opset_version=OPSET,
            training=mode,
            do_constant_folding=False,
            dynamo=False,
        )
    return onnx.load_from_string(buffer.getvalue())


def export_training(model: nn.Module, batch: int, seed: int = 0, input_shape=None):
    """(onnx.ModelProto, model): `model` exported in training form (BatchNormalization with batch
    statistics and running-statistics outputs), as ONNX Runtime's training tutorial does. `seed`
    re-initializes the weights first, so the returned module and the ONNX initializers hold the same
    values."""
    torch.manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    model.train()
    initial = {name: value.clone() for name, value in model.state_dict().items()}
    exported = _export(model, batch, input_shape, torch.onnx.TrainingMode.TRAINING)
    # Tracing ran a training-mode forward, which moved the running statistics of both: put them back.
    model.load_state_dict(initial)
    for tensor in exported.graph.initializer:
        if tensor.name in initial:
            tensor.CopyFrom(numpy_helper.from_array(initial[tensor.name].numpy(), tensor.name))
    return exported, model


def freeze_batchnorm(model: nn.Module) -> nn.Module:
    """`model` in eval mode with its BatchNormalization layers frozen (no gradient), holding
    statistics and affine values drawn as a trained model has them, from torch's current random
    state: a fresh layer's zeros and ones would be merged by the exporter into shared initializers
    read through Identity nodes."""
    model.eval()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
            module.requires_grad_(False)
    return model


def export_eval(model: nn.Module, batch: int, input_shape=None, dtype=torch.float32) -> onnx.ModelProto:
    """`model` exported in eval mode: BatchNormalization in inference form, its statistics constant
    (the form the Tiny Training Engine trains, and the only one ONNX Runtime training can). `dtype`:
    the input's (torch.long for token ids)."""
    return _export(model, batch, input_shape, torch.onnx.TrainingMode.EVAL, dtype)
