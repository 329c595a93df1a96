"""Third-party model code at small sizes, with random weights: torchvision and timm classifiers and
HuggingFace transformers built from configs (nothing is downloaded). Each entry builds a fresh
torch module and its example inputs."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import torch

BATCH, SEQ, VOCAB, CLASSES = 2, 8, 64, 10


@dataclass(frozen=True)
class ZooModel:
    build: Callable[[], torch.nn.Module]
    # "image": (x) -> logits, CrossEntropy; "audio" and "video": the same, x of `shape` after the batch
    # (a waveform, mel features by frames, a clip's channels by frames); "text": (ids, mask) -> logits;
    # "lm": (ids, mask, labels) -> loss
    kind: str
    image_size: int = 32
    random: bool = False  # draws random numbers in training (stochastic depth, dropout left on)
    shape: tuple[int, ...] = ()
    # torch's TorchScript exporter cannot export torch's fold (Col2Im) with a symbolic batch: its
    # symbolic reads the input's size, which it does not know, and fails with a TypeError
    exporters: tuple[str, ...] = ("torchscript", "dynamo")

    @property
    def one_input(self) -> bool:
        """x alone, with its batch the one symbolic dimension."""
        return self.kind in ("image", "audio", "video")

    def inputs(self, seed: int = 0) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """(model inputs, labels for edgetrain's CrossEntropyLoss or None when the model computes its loss)."""
        g = torch.Generator().manual_seed(seed)
        if self.kind == "image":
            x = torch.randn(BATCH, 3, self.image_size, self.image_size, generator=g)
            return (x,), torch.randint(0, CLASSES, (BATCH,), generator=g)
        if self.kind in ("audio", "video"):
            x = torch.randn(BATCH, *self.shape, generator=g)
            return (x,), torch.randint(0, CLASSES, (BATCH,), generator=g)
        # Id 0 is the padding token, whose lookups PyTorch's gradient skips (padding_idx); the
        # TorchScript export cannot say so, so the batch leaves it out (README: Exporting your model).
        ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
        mask = torch.ones(BATCH, SEQ, dtype=torch.long)
        mask[1, -3:] = 0  # a padded sequence: the attention mask matters
        if self.kind == "text":
            return (ids, mask), torch.randint(0, 3, (BATCH,), generator=g)
        labels = ids.clone()
        labels[1, -3:] = -100  # HuggingFace's ignore_index on the padding
        return (ids, mask, labels), None


def _tv():
    from zoo.torchvision_shim import torchvision

    return torchvision.models


def _r3d():
    r = _tv().video.resnet
    return r.VideoResNet(r.BasicBlock, [r.Conv3DSimple] * 4, [1, 1, 1, 1], r.BasicStem, num_classes=CLASSES)


def _efficientnet():
    _tv()
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    settings, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
    return EfficientNet(settings, dropout=0.2, stochastic_depth_prob=0.2, num_classes=CLASSES, last_channel=last)


def _regnet():
    _tv()
    from torchvision.models.regnet import BlockParams, RegNet

    return RegNet(BlockParams.from_init_params(depth=3, w_0=8, w_a=8.0, w_m=2.0, group_width=8), num_classes=CLASSES)


def _convnext():
    _tv()
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    return ConvNeXt(
        [CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], stochastic_depth_prob=0.0, num_classes=CLASSES
    )


def _vit():
    return _tv().VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=CLASSES
    )


def _volo():
    """timm's VOLO at a small size: its outlooker folds 3 x 3 windows back into the image (Col2Im)."""
    _tv()
    from timm.models.volo import VOLO

    return VOLO(
        layers=[1, 1, 1, 1],
        img_size=32,
        num_classes=CLASSES,
        stem_hidden_dim=16,
        embed_dims=[32, 64, 64, 64],
        num_heads=[1, 2, 2, 2],
    )


def _timm(name: str, **kwargs):
    def build():
        _tv()  # timm imports torchvision
        import timm

        return timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)

    return build


class _HF(torch.nn.Module):
    """Positional arguments for the exporters; returns logits, or the model's own LM loss."""

    def __init__(self, model, kind):
        super().__init__()
        self.m, self.kind = model, kind

    def forward(self, input_ids, attention_mask, labels=None):
        if self.kind == "text":
            return self.m(input_ids=input_ids, attention_mask=attention_mask).logits
        return self.m(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


def _hf_model(config_name, model_name, wrap, **config):
    """A builder of the transformers model from its config, wrapped for the exporters by `wrap`."""

    def build():
        import zoo.torchvision_shim  # noqa: F401  (transformers imports torchvision when it is installed)
        import transformers

        transformers.logging.set_verbosity_error()
        cfg = getattr(transformers, config_name)(**config)
        cfg._attn_implementation = "eager"
        return wrap(getattr(transformers, model_name)(cfg))

    return build


def _hf(config_name, model_name, kind, **config):
    return _hf_model(config_name, model_name, lambda model: _HF(model, kind), **config)


class _ByKeyword(torch.nn.Module):
    """A classifier called with its input by keyword (audio's `input_values` or `input_features`, an
    image's `pixel_values`)."""

    def __init__(self, model, key):
        super().__init__()
        self.m, self.key = model, key

    def forward(self, x):
        return self.m(**{self.key: x}).logits


def _hf_by_keyword(config_name, model_name, key, **config):
    return _hf_model(config_name, model_name, lambda model: _ByKeyword(model, key), **config)


_NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# BERT's and RoBERTa's shared configuration; Gemma's and Llama's.
_ENCODER = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    num_labels=3,
    classifier_dropout=0.0,
    **_NO_DROPOUT,
)
_DECODER = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=32,
)

_SEQ2SEQ = dict(  # BART's and Pegasus's encoder-decoders
    vocab_size=VOCAB,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=32,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    pad_token_id=0,
)

ZOO: dict[str, ZooModel] = {
    # 64x64 leaves layer4 a 2x2 plane: at 1x1, BatchNorm over two values per channel makes the loss
    # so ill-conditioned that PyTorch's own float32 loss is off by 7e-3.
    "resnet18": ZooModel(lambda: _tv().resnet18(num_classes=CLASSES), "image", image_size=64),
    "mobilenet_v2": ZooModel(lambda: _tv().mobilenet_v2(num_classes=CLASSES, width_mult=0.25), "image"),
    "mobilenet_v3_small": ZooModel(
        lambda: _tv().mobilenet_v3_small(num_classes=CLASSES, width_mult=0.25, dropout=0.0), "image"
    ),
    "shufflenet_v2": ZooModel(lambda: _tv().shufflenet_v2_x0_5(num_classes=CLASSES), "image"),
    "squeezenet1_1": ZooModel(lambda: _tv().squeezenet1_1(num_classes=CLASSES, dropout=0.0), "image"),
    "efficientnet_b0": ZooModel(_efficientnet, "image", random=True),
    "mnasnet": ZooModel(lambda: _tv().mnasnet0_5(num_classes=CLASSES, dropout=0.0), "image"),
    "regnet": ZooModel(_regnet, "image"),
    "convnext": ZooModel(_convnext, "image"),
    "vit": ZooModel(_vit, "image"),
    # HuggingFace's Swin: attention within windows of 4x4 patches, shifted (a Roll) every other
    # block, with a relative position bias gathered from a table, and patch merging between stages.
    "swin": ZooModel(
        _hf_by_keyword(
            "SwinConfig",
            "SwinForImageClassification",
            "pixel_values",
            num_labels=CLASSES,
            image_size=32,
            patch_size=4,
            embed_dim=16,
            depths=[2, 1],
            num_heads=[1, 2],
            window_size=4,
            drop_path_rate=0.0,
            **_NO_DROPOUT,
        ),
        "image",
    ),
    # Its BatchNorms over 2x2 and 1x1 planes amplify float32 rounding to 1e-4 near the output, where
    # one ReLU input (at 32x32) or one MaxPool near-tie (at 64x64) lies closer than that to its kink;
    # C and PyTorch's float32 then route a gradient differently, which the bound cannot allow for. At 48x48
    # both make the float64 decisions, except one ReLU that both flip (checked for this seed, not in general).
    "googlenet": ZooModel(
        lambda: _tv().googlenet(num_classes=CLASSES, aux_logits=False, init_weights=True, dropout=0.0),
        "image",
        image_size=48,
    ),
    "densenet": ZooModel(
        lambda: _tv().densenet.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, num_classes=CLASSES),
        "image",
    ),
    # timm: MobileViT unfolds its feature maps into patches for a transformer and folds them back;
    # LCNet is depthwise convolutions with hard-swish and squeeze-excitation.
    "timm_mobilevit_xxs": ZooModel(_timm("mobilevit_xxs"), "image", image_size=64),
    "timm_lcnet_050": ZooModel(_timm("lcnet_050"), "image", image_size=64),
    "mobilevitv2": ZooModel(
        _hf_by_keyword(
            "MobileViTV2Config",
            "MobileViTV2ForImageClassification",
            "pixel_values",
            image_size=64,
            width_multiplier=0.25,
            num_labels=CLASSES,
        ),
        "image",
        image_size=64,
        exporters=("dynamo",),
    ),
    "timm_volo": ZooModel(_volo, "image", exporters=("dynamo",)),
    "bert": ZooModel(
        _hf("BertConfig", "BertForSequenceClassification", "text", max_position_embeddings=32, **_ENCODER), "text"
    ),
    # Gathers its int64 token type ids by position (GatherElements on integers); its positions count
    # from the padding id + 1.
    "roberta": ZooModel(
        _hf(
            "RobertaConfig",
            "RobertaForSequenceClassification",
            "text",
            max_position_embeddings=SEQ + 2,
            pad_token_id=0,
            **_ENCODER,
        ),
        "text",
    ),
    # Log-bucketed relative positions: Ceil, Sign and an integer Clip.
    "deberta_v2": ZooModel(
        _hf(
            "DebertaV2Config",
            "DebertaV2ForSequenceClassification",
            "text",
            max_position_embeddings=32,
            relative_attention=True,
            position_buckets=8,
            max_relative_positions=16,
            pos_att_type=["p2c", "c2p"],
            pooler_dropout=0.0,
            **_ENCODER,
        ),
        "text",
    ),
    "distilbert": ZooModel(
        _hf(
            "DistilBertConfig",
            "DistilBertForSequenceClassification",
            "text",
            vocab_size=VOCAB,
            dim=32,
            n_layers=2,
            n_heads=2,
            hidden_dim=64,
            max_position_embeddings=32,
            num_labels=3,
            dropout=0.0,
            attention_dropout=0.0,
            seq_classif_dropout=0.0,
        ),
        "text",
    ),
    "gpt2": ZooModel(
        _hf(
            "GPT2Config",
            "GPT2LMHeadModel",
            "lm",
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=32,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        ),
        "lm",
    ),
    # Scales its embeddings by a buffer (embed_scale), which dynamo's export lists beside the parameters.
    "gemma": ZooModel(_hf("GemmaConfig", "GemmaForCausalLM", "lm", head_dim=16, **_DECODER), "lm"),
    "llama": ZooModel(_hf("LlamaConfig", "LlamaForCausalLM", "lm", **_DECODER), "lm"),
    # Encoder-decoders with their LM loss: the labels shifted into decoder ids by integer scatters,
    # T5's log-bucketed relative positions, BART's buffer of logit biases (frozen, as in PyTorch).
    "t5": ZooModel(
        _hf(
            "T5Config",
            "T5ForConditionalGeneration",
            "lm",
            vocab_size=VOCAB,
            d_model=32,
            d_kv=16,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=1,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
            dropout_rate=0.0,
            pad_token_id=0,
            decoder_start_token_id=0,
        ),
        "lm",
    ),
    "bart": ZooModel(
        _hf(
            "BartConfig",
            "BartForConditionalGeneration",
            "lm",
            **_SEQ2SEQ,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=2,
        ),
        "lm",
    ),
    # Its decoder starts from the padding token, whose embedding row PyTorch's gradient skips
    # (padding_idx): the dynamo exporter records it, and in a TorchScript export the row is zeros.
    "pegasus": ZooModel(
        _hf(
            "PegasusConfig",
            "PegasusForConditionalGeneration",
            "lm",
            **_SEQ2SEQ,
            eos_token_id=1,
            decoder_start_token_id=0,
        ),
        "lm",
    ),
    # A waveform through a strided Conv1d stack with GroupNorm, a grouped positional convolution
    # under weight_norm, and a transformer; SpecAugment's masking (mask_time_prob) off, as dropout is.
    "wav2vec2": ZooModel(
        _hf_by_keyword(
            "Wav2Vec2Config",
            "Wav2Vec2ForSequenceClassification",
            "input_values",
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            conv_dim=(16, 16),
            conv_kernel=(10, 3),
            conv_stride=(5, 2),
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2,
            classifier_proj_size=16,
            num_labels=CLASSES,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            feat_proj_dropout=0.0,
            final_dropout=0.0,
            layerdrop=0.0,
            mask_time_prob=0.0,
        ),
        "audio",
        shape=(400,),
    ),
    # Mel features by frames; its encoder's sinusoidal position table is a parameter the model's
    # code freezes (requires_grad=False), which the ONNX file cannot say: frozen_params does.
    "whisper": ZooModel(
        _hf_by_keyword(
            "WhisperConfig",
            "WhisperForAudioClassification",
            "input_features",
            num_mel_bins=8,
            d_model=32,
            encoder_layers=2,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            max_source_positions=16,
            classifier_proj_size=16,
            num_labels=CLASSES,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            encoder_layerdrop=0.0,
        ),
        "audio",
        shape=(8, 32),
    ),
    # ALBERT runs one shared layer for every layer (a tie the export names once), from factorized
    # embeddings (a smaller embedding projected up).
    "albert": ZooModel(
        _hf(
            "AlbertConfig",
            "AlbertForSequenceClassification",
            "text",
            embedding_size=16,
            max_position_embeddings=32,
            **_ENCODER,
        ),
        "text",
    ),
    # MobileBERT: bottleneck projections around each block, and NoNorm (an elementwise scale and shift
    # in place of LayerNorm).
    "mobilebert": ZooModel(
        _hf(
            "MobileBertConfig",
            "MobileBertForSequenceClassification",
            "text",
            vocab_size=VOCAB,
            hidden_size=32,
            embedding_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intra_bottleneck_size=16,
            true_hidden_size=16,
            max_position_embeddings=32,
            num_labels=3,
            **_NO_DROPOUT,
        ),
        "text",
    ),
    # Mistral: grouped-query attention within a sliding window of 4 of the 8 positions.
    "mistral": ZooModel(_hf("MistralConfig", "MistralForCausalLM", "lm", sliding_window=4, **_DECODER), "lm"),
    # SegFormer's encoder: attention over keys and values reduced by a strided convolution, and a
    # feed-forward with a depthwise convolution between its layers, on overlapping patches.
    "segformer": ZooModel(
        _hf_by_keyword(
            "SegformerConfig",
            "SegformerForImageClassification",
            "pixel_values",
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[16, 32],
            patch_sizes=[7, 3],
            strides=[4, 2],
            num_attention_heads=[1, 2],
            mlp_ratios=[2, 2],
            num_labels=CLASSES,
            drop_path_rate=0.0,
            classifier_dropout_prob=0.0,
            **_NO_DROPOUT,
        ),
        "image",
    ),
    # ConvNeXt V2: global response normalization (each channel's L2 norm over the plane, divided by
    # the channels' mean of it).
    "convnextv2": ZooModel(
        _hf_by_keyword(
            "ConvNextV2Config",
            "ConvNextV2ForImageClassification",
            "pixel_values",
            num_stages=2,
            hidden_sizes=[16, 32],
            depths=[1, 1],
            num_labels=CLASSES,
            drop_path_rate=0.0,
        ),
        "image",
    ),
    # BEiT: a relative position bias per layer gathered from its table, and layer scale.
    "beit": ZooModel(
        _hf_by_keyword(
            "BeitConfig",
            "BeitForImageClassification",
            "pixel_values",
            image_size=32,
            patch_size=8,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            num_labels=CLASSES,
            use_relative_position_bias=True,
            drop_path_rate=0.0,
            **_NO_DROPOUT,
        ),
        "image",
    ),
    # timm's EdgeNeXt: depthwise convolutions with channels-last LayerNorm, and attention across
    # channels (transposed: a channels x channels map) over split depthwise features.
    "timm_edgenext": ZooModel(_timm("edgenext_xx_small"), "image", image_size=64),
    # A video clip through 3-D convolutions, BatchNorm3d and pooling over frames: 4 frames of 28x28.
    # At 32x32 one stem ReLU input lies 1.2e-8 from its kink, inside float32's rounding: C and each of
    # PyTorch's float32 convolutions decide it by the luck of their sums, which differ between CPUs, and
    # every gradient upstream follows (0.0008 in layer1's first weight). At 28x28 every ReLU input in
    # float64 is at least 8e-6 from its kink (checked for this seed, not in general).
    # torchvision's R3D with one block per stage (r3d_18 has two): every stage's strided first block
    # and shortcut, at 14 M parameters where its 33 M made it the zoo's slowest pair by far.
    "r3d": ZooModel(_r3d, "video", shape=(3, 4, 28, 28)),
}
