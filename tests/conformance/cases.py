"""Which ONNX backend node cases of each op edgetrain supports run against the generated C, and why
the others do not. test_onnx_backend_nodes.py fails when a case of a supported op (an op in the
registry's default domain, or one of FUNCTION_OPS, which compile as ONNX's function body for them,
or DFT and STFT, which compile as products with a constant matrix)
is missing here, so adding an op means listing its cases.

The cases are those onnx's generators make with a single node of the op; the `_expanded` variants
run the op's function body, made of other ops, and are not cases of the op.

A case runs as ONNX writes it (`included`) or, for an op that only moves values, with its
integer data as float32 (`as_float32`). An exclusion is one of two kinds:
- Refused: edgetrain deliberately does not accept the model, and says so in one line containing
  `error` (the test checks that it does);
- Skipped: the model compiles, but the case checks a behaviour that edgetrain deliberately does
  not have (`reason`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Refused:
    error: str


@dataclass(frozen=True)
class Skipped:
    reason: str


@dataclass(frozen=True)
class OpCases:
    included: tuple[str, ...]
    excluded: dict[str, Refused | Skipped] = field(default_factory=dict)
    # Cases whose integer data run as float32: the op only selects and moves values, all small
    # integers, so float32 gives exactly ONNX's expected values and the case checks the kernel.
    as_float32: tuple[str, ...] = ()

    @property
    def run(self) -> tuple[str, ...]:
        return self.included + self.as_float32

    @property
    def listed(self) -> tuple[str, ...]:
        return self.run + tuple(self.excluded)


# edgetrain computes float32, int32, int64 and bool tensors (integers and bools as int32_t in the C):
# other data types are refused at the model's inputs and outputs, and where a node computes them.
FLOAT_TYPE = Refused("edgetrain trains float32 models")  # float16, bfloat16, float64
SMALL_INT_DATA = Refused("model inputs must be float32")  # int8, int16, unsigned
NARROW_INPUT = Refused("model inputs must be float32, int32, int64 or bool")  # float8, float4, int4, int2
NARROW_OUTPUT = Refused("only float32, int32, int64 and bool tensors are computed at run time")  # as results
STRING_DATA = Refused("has dtype object")  # strings
# Ops without integer kernels: integer data (Div, Pow) or results (Dropout's mask, MaxPool's argmax).
INT_DATA = Refused("computes float32 tensors only")
NON_FLOAT_OUTPUT = INT_DATA
BOOL_DATA = Refused("computes float32 tensors only")  # bool data into an op of float32 arithmetic
EMPTY = Refused("is empty")  # a tensor with a zero-size axis
NOT_TENSOR = Refused("edgetrain computes tensors only")  # sequence and optional values
# Before opset 7 (Not's cases are opset 1's): older broadcasting and BatchNormalization forms.
OLD_OPSET = Refused("edgetrain needs opset 7 or newer")
TENSOR_EXPONENT = Refused("the exponent must be one constant value")  # Pow's kernel takes a scalar
# Resize modes the kernel does not implement.
CROP_AND_RESIZE = Refused("'tf_crop_and_resize'")
HALF_PIXEL_SYMMETRIC = Refused("'half_pixel_symmetric'")
ANTIALIAS = Refused("antialias=1")
ASPECT_RATIO = Refused("keep_aspect_ratio_policy")
# SoftmaxCrossEntropyLoss reduces by the mean, as edgetrain's losses do.
REDUCTION_NONE = Refused("reduction 'none' is not supported")
REDUCTION_SUM = Refused("reduction 'sum' is not supported")
PEEPHOLES = Refused("peepholes")
# GridSample's kernels sample 2-D planes, bilinearly or at the nearest pixel.
CUBIC_SAMPLING = Refused("only bilinear (linear) and nearest")
VOLUMES = Refused("only 2-D planes (a 4-D input) are supported")
BLOCKED = Refused("blocked quantization (block_size) is not supported")
# Running statistics are buffers a training step updates, so they are not the inference graph's outputs.
STATISTICS_OUTPUTS = Refused("running statistics are state")
# Attention's softmax_precision=DOUBLE computes its softmax in float64.
DOUBLE_SOFTMAX = Refused("produces float64")
CONSTANT_BOUNDS = Skipped(
    "a Range's length is its static shape, so its bounds are compile-time constants: the "
    "case has no run-time input, and the frontend folds integer ones"
)
RANDOM_MASK = Skipped(
    "training_mode=1: the expected values come from a NumPy random mask; infer runs the "
    "inference form (identity), and training draws edgetrain's own counter-seeded masks"
)
RANDOM_VALUES = Skipped(
    "the expected values come from NumPy's generator; infer runs the inference form (the "
    "mean: Bernoulli's probability), and training draws edgetrain's own counter-seeded values"
)
ALIGN_CORNERS_FRACTIONAL = Skipped(
    "align_corners with scales: onnx divides by the fractional length input*scale - 1 (onnx/onnx#2462); "
    "edgetrain divides by the output length - 1, as ONNX Runtime and PyTorch do, whose gradients it matches"
)

# Included cases compared more loosely than RTOL, with why: the expected values carry less precision.
TOLERANCE = {
    "test_averagepool_2d_ceil_last_window_starts_on_pad": (1e-3, "onnx writes the expected values to 4 digits"),
    "test_sce_NCd1d2d3d4d5_mean_weight": (1e-4, "a mean of 6480 float32 terms, summed in order"),
    "test_sce_NCd1d2d3d4d5_mean_weight_log_prob": (1e-4, "a mean of 6480 float32 terms, summed in order"),
}

# Ops with no kernel of their own that edgetrain compiles as ONNX's function body for them.
FUNCTION_OPS = {
    "Attention",
    "RMSNormalization",
    "RotaryEmbedding",
    "GroupNormalization",
    "Swish",
    "MeanVarianceNormalization",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceLogSum",
    "Shrink",
    "ThresholdedRelu",
    "SwiGLU",
    "CenterCropPad",
    "AffineGrid",
}

# Ops that the frontend rewrites into others (frontend/spectral.py).
REWRITTEN_OPS = {"DFT", "STFT"}

CASES: dict[str, OpCases] = {
    "Abs": OpCases(included=("test_abs",)),
    "STFT": OpCases(included=("test_stft", "test_stft_with_window")),
    "DFT": OpCases(
        included=(
            "test_dft_opset19",
            "test_dft_axis_opset19",
            "test_dft_inverse_opset19",
            "test_dft_rfft_opset19",
            "test_dft_irfft_opset19",
            "test_dft",
            "test_dft_axis",
            "test_dft_inverse",
            "test_dft_rfft",
            "test_dft_irfft",
        )
    ),
    "Acos": OpCases(included=("test_acos_example", "test_acos")),
    "Acosh": OpCases(included=("test_acosh_example", "test_acosh")),
    "Add": OpCases(
        included=("test_add", "test_add_bcast"),
        excluded={
            "test_add_int8": SMALL_INT_DATA,
            "test_add_int16": SMALL_INT_DATA,
            "test_add_uint8": SMALL_INT_DATA,
            "test_add_uint16": SMALL_INT_DATA,
            "test_add_uint32": SMALL_INT_DATA,
            "test_add_uint64": SMALL_INT_DATA,
        },
    ),
    "And": OpCases(
        included=(
            "test_and2d",
            "test_and3d",
            "test_and4d",
            "test_and_bcast3v1d",
            "test_and_bcast3v2d",
            "test_and_bcast4v2d",
            "test_and_bcast4v3d",
            "test_and_bcast4v4d",
        ),
    ),
    "ArgMax": OpCases(
        included=(
            "test_argmax_no_keepdims_example",
            "test_argmax_no_keepdims_random",
            "test_argmax_keepdims_example",
            "test_argmax_keepdims_random",
            "test_argmax_default_axis_example",
            "test_argmax_default_axis_random",
            "test_argmax_negative_axis_keepdims_example",
            "test_argmax_negative_axis_keepdims_random",
            "test_argmax_no_keepdims_example_select_last_index",
            "test_argmax_no_keepdims_random_select_last_index",
            "test_argmax_keepdims_example_select_last_index",
            "test_argmax_keepdims_random_select_last_index",
            "test_argmax_default_axis_example_select_last_index",
            "test_argmax_default_axis_random_select_last_index",
            "test_argmax_negative_axis_keepdims_example_select_last_index",
            "test_argmax_negative_axis_keepdims_random_select_last_index",
        )
    ),
    "ArgMin": OpCases(
        included=(
            "test_argmin_no_keepdims_example",
            "test_argmin_no_keepdims_random",
            "test_argmin_keepdims_example",
            "test_argmin_keepdims_random",
            "test_argmin_default_axis_example",
            "test_argmin_default_axis_random",
            "test_argmin_negative_axis_keepdims_example",
            "test_argmin_negative_axis_keepdims_random",
            "test_argmin_no_keepdims_example_select_last_index",
            "test_argmin_no_keepdims_random_select_last_index",
            "test_argmin_keepdims_example_select_last_index",
            "test_argmin_keepdims_random_select_last_index",
            "test_argmin_default_axis_example_select_last_index",
            "test_argmin_default_axis_random_select_last_index",
            "test_argmin_negative_axis_keepdims_example_select_last_index",
            "test_argmin_negative_axis_keepdims_random_select_last_index",
        )
    ),
    "AffineGrid": OpCases(
        included=(
            "test_affine_grid_2d",
            "test_affine_grid_2d_align_corners",
            "test_affine_grid_3d",
            "test_affine_grid_3d_align_corners",
        ),
    ),
    "Asin": OpCases(included=("test_asin_example", "test_asin")),
    "Asinh": OpCases(included=("test_asinh_example", "test_asinh")),
    "Atan": OpCases(included=("test_atan_example", "test_atan")),
    "Atanh": OpCases(included=("test_atanh_example", "test_atanh")),
    "Attention": OpCases(
        included=(
            "test_attention_4d",
            "test_attention_4d_gqa",
            "test_attention_4d_diff_heads_sizes",
            "test_attention_4d_scaled",
            "test_attention_4d_gqa_scaled",
            "test_attention_4d_diff_heads_sizes_scaled",
            "test_attention_4d_causal",
            "test_attention_4d_gqa_causal",
            "test_attention_4d_diff_heads_sizes_causal",
            "test_attention_4d_attn_mask",
            "test_attention_4d_attn_mask_3d",
            "test_attention_4d_attn_mask_3d_causal",
            "test_attention_4d_attn_mask_4d",
            "test_attention_4d_attn_mask_4d_causal",
            "test_attention_4d_attn_mask_bool",
            "test_attention_4d_attn_mask_bool_4d",
            "test_attention_4d_gqa_attn_mask",
            "test_attention_4d_diff_heads_sizes_attn_mask",
            "test_attention_4d_with_past_and_present",
            "test_attention_4d_gqa_with_past_and_present",
            "test_attention_4d_diff_heads_with_past_and_present",
            "test_attention_4d_diff_heads_with_past_and_present_mask3d",
            "test_attention_4d_diff_heads_with_past_and_present_mask4d",
            "test_attention_4d_softcap",
            "test_attention_4d_gqa_softcap",
            "test_attention_4d_diff_heads_sizes_softcap",
            "test_attention_4d_with_qk_matmul",
            "test_attention_4d_with_qk_matmul_bias",
            "test_attention_4d_with_qk_matmul_softcap",
            "test_attention_4d_with_qk_matmul_softmax",
            "test_attention_4d_with_past_and_present_qk_matmul_bias",
            "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask",
            "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask",
            "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal",
            "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
            "test_attention_4d_with_past_and_present_qk_matmul",
            "test_attention_3d",
            "test_attention_3d_gqa",
            "test_attention_3d_diff_heads_sizes",
            "test_attention_3d_scaled",
            "test_attention_3d_gqa_scaled",
            "test_attention_3d_diff_heads_sizes_scaled",
            "test_attention_3d_causal",
            "test_attention_3d_gqa_causal",
            "test_attention_3d_diff_heads_sizes_causal",
            "test_attention_3d_attn_mask",
            "test_attention_3d_gqa_attn_mask",
            "test_attention_3d_diff_heads_sizes_attn_mask",
            "test_attention_3d_softcap",
            "test_attention_3d_gqa_softcap",
            "test_attention_3d_diff_heads_sizes_softcap",
            "test_attention_3d_with_past_and_present",
            "test_attention_3d_gqa_with_past_and_present",
            "test_attention_3d_diff_heads_with_past_and_present",
            "test_attention_3d_with_past_and_present_qk_matmul",
            "test_attention_3d_with_past_and_present_qk_matmul_bias",
            "test_attention_3d_with_past_and_present_qk_matmul_softcap",
            "test_attention_3d_with_past_and_present_qk_matmul_softmax",
            "test_attention_3d_transpose_verification",
            "test_attention_4d_diff_heads_mask4d_padded_kv",
            "test_attention_4d_softcap_neginf_mask",
            "test_attention_4d_softcap_neginf_mask_poison",
            "test_attention_4d_gqa_causal_nonpad_decode",
            "test_attention_4d_causal_nonpad_continued_prefill",
            "test_attention_4d_causal_with_past_and_present",
            "test_attention_causal_boolmask_nan_robustness",
            "test_attention_23_boolmask_fullymasked_row_nan_robustness",
            "test_attention_4d_causal_nonpad_negative_offset_structural_empty",
            "test_attention_23_fullymasked_qk_matmul_output_mode3_zero",
            "test_attention_24_fullymasked_qk_matmul_output_mode3_zero",
            "test_attention_4d_causal_nonpad_attn_mask_composition",
            "test_attention_4d_causal_nonpad_batch_prefill",
            "test_attention_local_window",
            "test_attention_bidirectional_window",
            "test_attention_local_window_default",
            "test_attention_local_window_rank1_boolean_mask",
            "test_attention_local_window_with_past",
            "test_attention_local_window_ext_cache_rank3_head_mask",
            "test_attention_local_window_ext_cache_rank4_batch_mask",
            "test_attention_local_window_ext_cache_rank2_mask",
            "test_attention_3d_local_window",
        ),
        excluded={
            "test_attention_4d_fp16": FLOAT_TYPE,
            "test_attention_4d_gqa_with_past_and_present_fp16": FLOAT_TYPE,
            "test_attention_4d_causal_bf16": FLOAT_TYPE,
            "test_attention_4d_causal_fp16": FLOAT_TYPE,
            "test_attention_4d_padded_kv_bf16": FLOAT_TYPE,
            "test_attention_4d_causal_padded_kv_bf16": FLOAT_TYPE,
            "test_attention_4d_attn_mask_causal_bf16": FLOAT_TYPE,
            "test_attention_3d_causal_bf16": FLOAT_TYPE,
            "test_attention_4d_gqa_causal_nonpad_decode_fp16": FLOAT_TYPE,
            "test_attention_24_qk_matmul_output_mode3_softmax_precision": FLOAT_TYPE,
            "test_attention_local_window_ext_cache_float16_mask": FLOAT_TYPE,
            "test_attention_local_window_gqa_rank4_mask": DOUBLE_SOFTMAX,
        },
    ),
    "AveragePool": OpCases(
        included=(
            "test_averagepool_2d_precomputed_pads",
            "test_averagepool_2d_precomputed_pads_count_include_pad",
            "test_averagepool_2d_precomputed_strides",
            "test_averagepool_2d_precomputed_same_upper",
            "test_averagepool_1d_default",
            "test_averagepool_2d_default",
            "test_averagepool_3d_default",
            "test_averagepool_2d_same_upper",
            "test_averagepool_2d_same_lower",
            "test_averagepool_2d_pads",
            "test_averagepool_2d_pads_count_include_pad",
            "test_averagepool_2d_strides",
            "test_averagepool_2d_ceil",
            "test_averagepool_2d_ceil_last_window_starts_on_pad",
            "test_averagepool_2d_dilations",
            "test_averagepool_3d_dilations_small",
            "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
            "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False",
            "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
            "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False",
        )
    ),
    "BatchNormalization": OpCases(
        included=("test_batchnorm_example", "test_batchnorm_epsilon"),
        excluded={
            "test_batchnorm_example_training_mode": STATISTICS_OUTPUTS,
            "test_batchnorm_epsilon_training_mode": STATISTICS_OUTPUTS,
        },
    ),
    "Bernoulli": OpCases(
        included=(),
        excluded={
            "test_bernoulli": FLOAT_TYPE,
            "test_bernoulli_double": FLOAT_TYPE,
            "test_bernoulli_seed": RANDOM_VALUES,
        },
    ),
    "Cast": OpCases(
        included=(),
        excluded={
            "test_cast_FLOAT_to_FLOAT16": FLOAT_TYPE,
            "test_cast_FLOAT_to_DOUBLE": FLOAT_TYPE,
            "test_cast_FLOAT16_to_FLOAT": FLOAT_TYPE,
            "test_cast_FLOAT16_to_DOUBLE": FLOAT_TYPE,
            "test_cast_DOUBLE_to_FLOAT": FLOAT_TYPE,
            "test_cast_DOUBLE_to_FLOAT16": FLOAT_TYPE,
            "test_cast_FLOAT_to_BFLOAT16": FLOAT_TYPE,
            "test_cast_BFLOAT16_to_FLOAT": FLOAT_TYPE,
            "test_cast_FLOAT_to_FLOAT8E4M3FN": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_FLOAT8E4M3FN": FLOAT_TYPE,
            "test_cast_FLOAT_to_FLOAT8E4M3FNUZ": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_FLOAT8E4M3FNUZ": FLOAT_TYPE,
            "test_cast_FLOAT8E4M3FN_to_FLOAT": NARROW_INPUT,
            "test_cast_FLOAT8E4M3FN_to_FLOAT16": FLOAT_TYPE,
            "test_cast_FLOAT8E4M3FNUZ_to_FLOAT": NARROW_INPUT,
            "test_cast_FLOAT8E4M3FNUZ_to_FLOAT16": FLOAT_TYPE,
            "test_cast_FLOAT_to_FLOAT8E5M2": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_FLOAT8E5M2": FLOAT_TYPE,
            "test_cast_FLOAT_to_FLOAT8E5M2FNUZ": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_FLOAT8E5M2FNUZ": FLOAT_TYPE,
            "test_cast_FLOAT8E5M2_to_FLOAT": NARROW_INPUT,
            "test_cast_FLOAT8E5M2_to_FLOAT16": FLOAT_TYPE,
            "test_cast_FLOAT8E5M2FNUZ_to_FLOAT": NARROW_INPUT,
            "test_cast_FLOAT8E5M2FNUZ_to_FLOAT16": FLOAT_TYPE,
            "test_cast_FLOAT_to_UINT4": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_UINT4": FLOAT_TYPE,
            "test_cast_FLOAT_to_INT4": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_INT4": FLOAT_TYPE,
            "test_cast_UINT4_to_FLOAT": NARROW_INPUT,
            "test_cast_UINT4_to_FLOAT16": FLOAT_TYPE,
            "test_cast_UINT4_to_UINT8": NARROW_INPUT,
            "test_cast_INT4_to_FLOAT": NARROW_INPUT,
            "test_cast_INT4_to_FLOAT16": FLOAT_TYPE,
            "test_cast_INT4_to_INT8": NARROW_INPUT,
            "test_cast_FLOAT4E2M1_to_FLOAT": NARROW_INPUT,
            "test_cast_FLOAT4E2M1_to_FLOAT16": FLOAT_TYPE,
            "test_cast_FLOAT_to_FLOAT4E2M1": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_FLOAT4E2M1": FLOAT_TYPE,
            "test_cast_FLOAT_to_UINT2": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_UINT2": FLOAT_TYPE,
            "test_cast_FLOAT_to_INT2": NARROW_OUTPUT,
            "test_cast_FLOAT16_to_INT2": FLOAT_TYPE,
            "test_cast_UINT2_to_FLOAT": NARROW_INPUT,
            "test_cast_UINT2_to_FLOAT16": FLOAT_TYPE,
            "test_cast_UINT2_to_UINT8": NARROW_INPUT,
            "test_cast_INT2_to_FLOAT": NARROW_INPUT,
            "test_cast_INT2_to_FLOAT16": FLOAT_TYPE,
            "test_cast_INT2_to_INT8": NARROW_INPUT,
            "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN": NARROW_OUTPUT,
            "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ": NARROW_OUTPUT,
            "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2": NARROW_OUTPUT,
            "test_cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ": NARROW_OUTPUT,
            "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN": FLOAT_TYPE,
            "test_cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ": FLOAT_TYPE,
            "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2": FLOAT_TYPE,
            "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ": FLOAT_TYPE,
            "test_cast_e8m0_FLOAT_to_FLOAT8E8M0": NARROW_OUTPUT,
            "test_cast_e8m0_FLOAT16_to_FLOAT8E8M0": FLOAT_TYPE,
            "test_cast_e8m0_FLOAT8E8M0_to_FLOAT": NARROW_INPUT,
            "test_cast_e8m0_FLOAT8E8M0_to_FLOAT16": FLOAT_TYPE,
        },
    ),
    "Celu": OpCases(
        included=("test_celu",),
        excluded={
            "test_celu_float16": FLOAT_TYPE,
            "test_celu_bfloat16": FLOAT_TYPE,
        },
    ),
    "Ceil": OpCases(included=("test_ceil_example", "test_ceil")),
    "CenterCropPad": OpCases(
        included=(
            "test_center_crop_pad_crop",
            "test_center_crop_pad_pad",
            "test_center_crop_pad_crop_and_pad",
            "test_center_crop_pad_crop_axes_hwc",
            "test_center_crop_pad_crop_negative_axes_hwc",
            "test_center_crop_pad_crop_axes_chw",
        ),
    ),
    "Clip": OpCases(
        included=(
            "test_clip_example",
            "test_clip",
            "test_clip_inbounds",
            "test_clip_outbounds",
            "test_clip_splitbounds",
            "test_clip_min_greater_than_max",
            "test_clip_default_min",
            "test_clip_default_max",
            "test_clip_default_inbounds",
        ),
        excluded={
            "test_clip_default_int8_min": SMALL_INT_DATA,
            "test_clip_default_int8_max": SMALL_INT_DATA,
            "test_clip_default_int8_inbounds": SMALL_INT_DATA,
        },
    ),
    "Col2Im": OpCases(
        included=(
            "test_col2im",
            "test_col2im_5d",
            "test_col2im_dilations",
            "test_col2im_pads",
            "test_col2im_strides",
        )
    ),
    "Concat": OpCases(
        included=(
            "test_concat_1d_axis_0",
            "test_concat_1d_axis_negative_1",
            "test_concat_2d_axis_0",
            "test_concat_2d_axis_1",
            "test_concat_2d_axis_negative_2",
            "test_concat_2d_axis_negative_1",
            "test_concat_3d_axis_0",
            "test_concat_3d_axis_1",
            "test_concat_3d_axis_2",
            "test_concat_3d_axis_negative_3",
            "test_concat_3d_axis_negative_2",
            "test_concat_3d_axis_negative_1",
        )
    ),
    "Conv": OpCases(
        included=(
            "test_basic_conv_with_padding",
            "test_basic_conv_without_padding",
            "test_conv_with_strides_padding",
            "test_conv_with_strides_no_padding",
            "test_conv_with_strides_and_asymmetric_padding",
            "test_conv_with_autopad_same",
        )
    ),
    "ConvTranspose": OpCases(
        included=(
            "test_convtranspose",
            "test_convtranspose_1d",
            "test_convtranspose_3d",
            "test_convtranspose_output_shape",
            "test_convtranspose_pad",
            "test_convtranspose_kernel_shape",
            "test_convtranspose_pads",
            "test_convtranspose_dilations",
            "test_convtranspose_autopad_same",
            "test_convtranspose_group_2",
            "test_convtranspose_group_2_image_3",
        )
    ),
    "Cos": OpCases(included=("test_cos_example", "test_cos")),
    "Cosh": OpCases(included=("test_cosh_example", "test_cosh")),
    "CumSum": OpCases(
        included=("test_cumsum_2d_int32", "test_cumsum_1d_int32_exclusive"),
        excluded={
            "test_cumsum_1d": FLOAT_TYPE,
            "test_cumsum_1d_exclusive": FLOAT_TYPE,
            "test_cumsum_1d_reverse": FLOAT_TYPE,
            "test_cumsum_1d_reverse_exclusive": FLOAT_TYPE,
            "test_cumsum_2d_axis_0": FLOAT_TYPE,
            "test_cumsum_2d_axis_1": FLOAT_TYPE,
            "test_cumsum_2d_negative_axis": FLOAT_TYPE,
        },
    ),
    "DepthToSpace": OpCases(included=("test_depthtospace_example", "test_depthtospace_crd_mode_example")),
    "DequantizeLinear": OpCases(
        included=(),
        excluded={
            "test_dequantizelinear": SMALL_INT_DATA,
            "test_dequantizelinear_axis": SMALL_INT_DATA,
            "test_dequantizelinear_e4m3fn": NARROW_INPUT,
            "test_dequantizelinear_e4m3fn_float16": FLOAT_TYPE,
            "test_dequantizelinear_e4m3fn_zero_point": NARROW_INPUT,
            "test_dequantizelinear_e5m2": NARROW_INPUT,
            "test_dequantizelinear_uint16": SMALL_INT_DATA,
            "test_dequantizelinear_int16": SMALL_INT_DATA,
            "test_dequantizelinear_uint4": NARROW_INPUT,
            "test_dequantizelinear_int4": NARROW_INPUT,
            "test_dequantizelinear_uint2": NARROW_INPUT,
            "test_dequantizelinear_int2": NARROW_INPUT,
            "test_dequantizelinear_float4e2m1": NARROW_INPUT,
            "test_dequantizelinear_blocked": SMALL_INT_DATA,
        },
    ),
    "Div": OpCases(
        included=("test_div_example", "test_div", "test_div_bcast"),
        excluded={
            "test_div_int8": SMALL_INT_DATA,
            "test_div_int16": SMALL_INT_DATA,
            "test_div_int32_trunc": INT_DATA,
            "test_div_uint8": SMALL_INT_DATA,
            "test_div_uint16": SMALL_INT_DATA,
            "test_div_uint32": SMALL_INT_DATA,
            "test_div_uint64": SMALL_INT_DATA,
        },
    ),
    "Dropout": OpCases(
        included=(
            "test_dropout_default",
            "test_dropout_default_ratio",
            "test_training_dropout_zero_ratio",
            "test_dropout_default_old",
            "test_dropout_random_old",
        ),
        excluded={
            "test_dropout_default_mask": NON_FLOAT_OUTPUT,
            "test_dropout_default_mask_ratio": NON_FLOAT_OUTPUT,
            "test_training_dropout_default": RANDOM_MASK,
            "test_training_dropout_default_mask": NON_FLOAT_OUTPUT,
            "test_training_dropout": RANDOM_MASK,
            "test_training_dropout_mask": NON_FLOAT_OUTPUT,
            "test_training_dropout_zero_ratio_mask": NON_FLOAT_OUTPUT,
        },
    ),
    "Einsum": OpCases(
        included=(),
        excluded={
            "test_einsum_batch_diagonal": FLOAT_TYPE,
            "test_einsum_batch_matmul": FLOAT_TYPE,
            "test_einsum_batch_matmul_bfloat16": FLOAT_TYPE,
            "test_einsum_inner_prod": FLOAT_TYPE,
            "test_einsum_scalar": FLOAT_TYPE,
            "test_einsum_sum": FLOAT_TYPE,
            "test_einsum_sum_bfloat16": FLOAT_TYPE,
            "test_einsum_transpose": FLOAT_TYPE,
            "test_einsum_transpose_bfloat16": FLOAT_TYPE,
        },
    ),
    "Elu": OpCases(included=("test_elu_example", "test_elu", "test_elu_default")),
    "Equal": OpCases(
        included=("test_equal", "test_equal_bcast"),
        excluded={
            "test_equal_int8": SMALL_INT_DATA,
            "test_equal_int16": SMALL_INT_DATA,
            "test_equal_uint8": SMALL_INT_DATA,
            "test_equal_uint16": SMALL_INT_DATA,
            "test_equal_uint32": SMALL_INT_DATA,
            "test_equal_uint64": SMALL_INT_DATA,
            "test_equal_string": STRING_DATA,
            "test_equal_string_broadcast": STRING_DATA,
        },
    ),
    "Erf": OpCases(included=("test_erf",)),
    "Exp": OpCases(included=("test_exp_example", "test_exp")),
    "Expand": OpCases(included=("test_expand_dim_changed", "test_expand_dim_unchanged")),
    "Flatten": OpCases(
        included=(
            "test_flatten_axis0",
            "test_flatten_axis1",
            "test_flatten_axis2",
            "test_flatten_axis3",
            "test_flatten_default_axis",
            "test_flatten_negative_axis4",
            "test_flatten_negative_axis3",
            "test_flatten_negative_axis2",
            "test_flatten_negative_axis1",
        )
    ),
    "Floor": OpCases(included=("test_floor_example", "test_floor")),
    "GRU": OpCases(
        included=(
            "test_gru_defaults",
            "test_gru_with_initial_bias",
            "test_gru_seq_length",
            "test_gru_batchwise",
            "test_gru_reverse",
            "test_gru_bidirectional",
        )
    ),
    "GridSample": OpCases(
        included=(
            "test_gridsample",
            "test_gridsample_aligncorners_true",
            "test_gridsample_bilinear",
            "test_gridsample_bilinear_align_corners_0_additional_1",
            "test_gridsample_bilinear_align_corners_1_additional_1",
            "test_gridsample_border_padding",
            "test_gridsample_nearest",
            "test_gridsample_nearest_align_corners_0_additional_1",
            "test_gridsample_nearest_align_corners_1_additional_1",
            "test_gridsample_reflection_padding",
            "test_gridsample_zeros_padding",
        ),
        excluded={
            "test_gridsample_bicubic": CUBIC_SAMPLING,
            "test_gridsample_bicubic_align_corners_0_additional_1": CUBIC_SAMPLING,
            "test_gridsample_bicubic_align_corners_1_additional_1": CUBIC_SAMPLING,
            "test_gridsample_volumetric_bilinear_align_corners_0": VOLUMES,
            "test_gridsample_volumetric_bilinear_align_corners_1": VOLUMES,
            "test_gridsample_volumetric_nearest_align_corners_0": VOLUMES,
            "test_gridsample_volumetric_nearest_align_corners_1": VOLUMES,
        },
    ),
    "Gather": OpCases(
        included=("test_gather_0", "test_gather_1", "test_gather_2d_indices", "test_gather_negative_indices")
    ),
    "GatherElements": OpCases(
        included=("test_gather_elements_0", "test_gather_elements_1", "test_gather_elements_negative_indices")
    ),
    "GatherND": OpCases(
        included=(
            "test_gathernd_example_float32",
            "test_gathernd_example_int32",
            "test_gathernd_example_int32_batch_dim1",
        )
    ),
    "Gelu": OpCases(included=("test_gelu_tanh_1", "test_gelu_tanh_2", "test_gelu_default_1", "test_gelu_default_2")),
    "Gemm": OpCases(
        included=(
            "test_gemm_default_zero_bias",
            "test_gemm_default_no_bias",
            "test_gemm_default_scalar_bias",
            "test_gemm_default_single_elem_vector_bias",
            "test_gemm_default_vector_bias",
            "test_gemm_default_matrix_bias",
            "test_gemm_transposeA",
            "test_gemm_transposeB",
            "test_gemm_alpha",
            "test_gemm_beta",
            "test_gemm_all_attributes",
        )
    ),
    "GlobalAveragePool": OpCases(included=("test_globalaveragepool", "test_globalaveragepool_precomputed")),
    "GlobalMaxPool": OpCases(included=("test_globalmaxpool", "test_globalmaxpool_precomputed")),
    "Greater": OpCases(
        included=("test_greater", "test_greater_bcast"),
        excluded={
            "test_greater_int8": SMALL_INT_DATA,
            "test_greater_int16": SMALL_INT_DATA,
            "test_greater_uint8": SMALL_INT_DATA,
            "test_greater_uint16": SMALL_INT_DATA,
            "test_greater_uint32": SMALL_INT_DATA,
            "test_greater_uint64": SMALL_INT_DATA,
        },
    ),
    "GreaterOrEqual": OpCases(
        included=("test_greater_equal", "test_greater_equal_bcast"),
        excluded={
            "test_greater_equal_int8": SMALL_INT_DATA,
            "test_greater_equal_int16": SMALL_INT_DATA,
            "test_greater_equal_uint8": SMALL_INT_DATA,
            "test_greater_equal_uint16": SMALL_INT_DATA,
            "test_greater_equal_uint32": SMALL_INT_DATA,
            "test_greater_equal_uint64": SMALL_INT_DATA,
        },
    ),
    "GroupNormalization": OpCases(
        included=(
            "test_group_normalization_example",
            "test_group_normalization_epsilon",
        ),
    ),
    "HardSigmoid": OpCases(included=("test_hardsigmoid_example", "test_hardsigmoid", "test_hardsigmoid_default")),
    "HardSwish": OpCases(included=("test_hardswish",)),
    "Identity": OpCases(
        included=("test_identity",),
        excluded={
            "test_identity_sequence": NOT_TENSOR,
            "test_identity_opt": NOT_TENSOR,
        },
    ),
    "InstanceNormalization": OpCases(included=("test_instancenorm_example", "test_instancenorm_epsilon")),
    "IsInf": OpCases(
        included=("test_isinf", "test_isinf_positive", "test_isinf_negative"),
        excluded={
            "test_isinf_float16": FLOAT_TYPE,
        },
    ),
    "IsNaN": OpCases(
        included=("test_isnan",),
        excluded={
            "test_isnan_float16": FLOAT_TYPE,
        },
    ),
    "LSTM": OpCases(
        included=(
            "test_lstm_defaults",
            "test_lstm_with_initial_bias",
            "test_lstm_batchwise",
            "test_lstm_reverse",
            "test_lstm_bidirectional",
        ),
        excluded={
            "test_lstm_with_peepholes": PEEPHOLES,
        },
    ),
    "LayerNormalization": OpCases(
        included=(
            "test_layer_normalization_4d_axis0",
            "test_layer_normalization_4d_axis_negative_4",
            "test_layer_normalization_4d_axis1",
            "test_layer_normalization_4d_axis_negative_3",
            "test_layer_normalization_4d_axis2",
            "test_layer_normalization_4d_axis_negative_2",
            "test_layer_normalization_4d_axis3",
            "test_layer_normalization_4d_axis_negative_1",
            "test_layer_normalization_default_axis",
            "test_layer_normalization_2d_axis0",
            "test_layer_normalization_2d_axis_negative_2",
            "test_layer_normalization_2d_axis1",
            "test_layer_normalization_2d_axis_negative_1",
            "test_layer_normalization_3d_axis0_epsilon",
            "test_layer_normalization_3d_axis_negative_3_epsilon",
            "test_layer_normalization_3d_axis1_epsilon",
            "test_layer_normalization_3d_axis_negative_2_epsilon",
            "test_layer_normalization_3d_axis2_epsilon",
            "test_layer_normalization_3d_axis_negative_1_epsilon",
        )
    ),
    "LeakyRelu": OpCases(included=("test_leakyrelu_example", "test_leakyrelu", "test_leakyrelu_default")),
    "Less": OpCases(
        included=("test_less", "test_less_bcast"),
        excluded={
            "test_less_int8": SMALL_INT_DATA,
            "test_less_int16": SMALL_INT_DATA,
            "test_less_uint8": SMALL_INT_DATA,
            "test_less_uint16": SMALL_INT_DATA,
            "test_less_uint32": SMALL_INT_DATA,
            "test_less_uint64": SMALL_INT_DATA,
        },
    ),
    "LessOrEqual": OpCases(
        included=("test_less_equal", "test_less_equal_bcast"),
        excluded={
            "test_less_equal_int8": SMALL_INT_DATA,
            "test_less_equal_int16": SMALL_INT_DATA,
            "test_less_equal_uint8": SMALL_INT_DATA,
            "test_less_equal_uint16": SMALL_INT_DATA,
            "test_less_equal_uint32": SMALL_INT_DATA,
            "test_less_equal_uint64": SMALL_INT_DATA,
        },
    ),
    "Log": OpCases(included=("test_log_example", "test_log")),
    "LogSoftmax": OpCases(
        included=(
            "test_logsoftmax_example_1",
            "test_logsoftmax_large_number",
            "test_logsoftmax_axis_0",
            "test_logsoftmax_axis_1",
            "test_logsoftmax_axis_2",
            "test_logsoftmax_negative_axis",
            "test_logsoftmax_default_axis",
        )
    ),
    "MatMul": OpCases(
        included=(
            "test_matmul_2d",
            "test_matmul_3d",
            "test_matmul_4d",
            "test_matmul_bcast",
            "test_matmul_1d_3d",
            "test_matmul_4d_1d",
            "test_matmul_1d_1d",
        )
    ),
    "Max": OpCases(
        included=("test_max_example", "test_max_one_input", "test_max_two_inputs", "test_max_float32"),
        as_float32=("test_max_int32", "test_max_int64"),
        excluded={
            "test_max_int8": SMALL_INT_DATA,
            "test_max_int16": SMALL_INT_DATA,
            "test_max_uint8": SMALL_INT_DATA,
            "test_max_uint16": SMALL_INT_DATA,
            "test_max_uint32": SMALL_INT_DATA,
            "test_max_uint64": SMALL_INT_DATA,
            "test_max_float16": FLOAT_TYPE,
            "test_max_float64": FLOAT_TYPE,
        },
    ),
    "MaxPool": OpCases(
        included=(
            "test_maxpool_2d_precomputed_pads",
            "test_maxpool_2d_precomputed_strides",
            "test_maxpool_2d_precomputed_same_upper",
            "test_maxpool_1d_default",
            "test_maxpool_2d_default",
            "test_maxpool_3d_default",
            "test_maxpool_2d_same_upper",
            "test_maxpool_2d_same_lower",
            "test_maxpool_2d_pads",
            "test_maxpool_2d_strides",
            "test_maxpool_2d_ceil",
            "test_maxpool_2d_ceil_output_size_reduce_by_one",
            "test_maxpool_2d_dilations",
            "test_maxpool_3d_dilations",
            "test_maxpool_3d_dilations_use_ref_impl",
            "test_maxpool_3d_dilations_use_ref_impl_large",
        ),
        excluded={
            "test_maxpool_2d_uint8": SMALL_INT_DATA,
            "test_maxpool_with_argmax_2d_precomputed_pads": NON_FLOAT_OUTPUT,
            "test_maxpool_with_argmax_2d_precomputed_strides": NON_FLOAT_OUTPUT,
        },
    ),
    "MeanVarianceNormalization": OpCases(
        included=("test_mvn",),
    ),
    "Min": OpCases(
        included=("test_min_example", "test_min_one_input", "test_min_two_inputs", "test_min_float32"),
        as_float32=("test_min_int32", "test_min_int64"),
        excluded={
            "test_min_int8": SMALL_INT_DATA,
            "test_min_int16": SMALL_INT_DATA,
            "test_min_uint8": SMALL_INT_DATA,
            "test_min_uint16": SMALL_INT_DATA,
            "test_min_uint32": SMALL_INT_DATA,
            "test_min_uint64": SMALL_INT_DATA,
            "test_min_float16": FLOAT_TYPE,
            "test_min_float64": FLOAT_TYPE,
        },
    ),
    "Mish": OpCases(included=("test_mish",)),
    "Mod": OpCases(
        included=(
            "test_mod_broadcast",
            "test_mod_int64_fmod",
            "test_mod_mixed_sign_float32",
            "test_mod_mixed_sign_int32",
            "test_mod_mixed_sign_int64",
            "test_mod_float32_mixed_sign_fmod_0",
            "test_mod_float_edge_cases_fmod_0_float32",
        ),
        excluded={
            "test_mod_mixed_sign_float16": FLOAT_TYPE,
            "test_mod_mixed_sign_float64": FLOAT_TYPE,
            "test_mod_float16_mixed_sign_fmod_0": FLOAT_TYPE,
            "test_mod_float64_mixed_sign_fmod_0": FLOAT_TYPE,
            "test_mod_float_edge_cases_fmod_0_float16": FLOAT_TYPE,
            "test_mod_float_edge_cases_fmod_0_float64": FLOAT_TYPE,
            "test_mod_mixed_sign_int8": SMALL_INT_DATA,
            "test_mod_mixed_sign_int16": SMALL_INT_DATA,
            "test_mod_uint8": SMALL_INT_DATA,
            "test_mod_uint16": SMALL_INT_DATA,
            "test_mod_uint32": SMALL_INT_DATA,
            "test_mod_uint64": SMALL_INT_DATA,
        },
    ),
    "Mul": OpCases(
        included=("test_mul_example", "test_mul", "test_mul_bcast"),
        excluded={
            "test_mul_int8": SMALL_INT_DATA,
            "test_mul_int16": SMALL_INT_DATA,
            "test_mul_uint8": SMALL_INT_DATA,
            "test_mul_uint16": SMALL_INT_DATA,
            "test_mul_uint32": SMALL_INT_DATA,
            "test_mul_uint64": SMALL_INT_DATA,
        },
    ),
    "Neg": OpCases(included=("test_neg_example", "test_neg")),
    "Not": OpCases(
        included=(),
        excluded={
            "test_not_2d": OLD_OPSET,
            "test_not_3d": OLD_OPSET,
            "test_not_4d": OLD_OPSET,
        },
    ),
    "Or": OpCases(
        included=(
            "test_or2d",
            "test_or3d",
            "test_or4d",
            "test_or_bcast3v1d",
            "test_or_bcast3v2d",
            "test_or_bcast4v2d",
            "test_or_bcast4v3d",
            "test_or_bcast4v4d",
        ),
    ),
    "QuantizeLinear": OpCases(
        included=(
            "test_quantizelinear",
            "test_quantizelinear_axis",
            "test_quantizelinear_uint16",
            "test_quantizelinear_int16",
        ),
        excluded={
            "test_quantizelinear_e4m3fn": NARROW_OUTPUT,
            "test_quantizelinear_e5m2": NARROW_OUTPUT,
            "test_quantizelinear_uint4": NARROW_OUTPUT,
            "test_quantizelinear_int4": NARROW_OUTPUT,
            "test_quantizelinear_uint2": NARROW_OUTPUT,
            "test_quantizelinear_int2": NARROW_OUTPUT,
            "test_quantizelinear_float4e2m1": NARROW_OUTPUT,
            "test_quantizelinear_blocked_asymmetric": BLOCKED,
            "test_quantizelinear_blocked_symmetric": BLOCKED,
        },
    ),
    "PRelu": OpCases(included=("test_prelu_example", "test_prelu_broadcast")),
    "OneHot": OpCases(
        included=(
            "test_onehot_negative_indices",
            "test_onehot_out_of_range_indices",
            "test_onehot_with_axis",
            "test_onehot_with_negative_axis",
            "test_onehot_without_axis",
        ),
        excluded={"test_onehot_with_bfloat16_values": FLOAT_TYPE},
    ),
    "Pad": OpCases(
        included=("test_constant_pad", "test_constant_pad_axes", "test_constant_pad_negative_axes"),
        as_float32=("test_edge_pad", "test_reflect_pad", "test_wrap_pad"),
    ),
    "Pow": OpCases(
        included=("test_pow_bcast_scalar",),
        excluded={
            "test_pow_example": TENSOR_EXPONENT,
            "test_pow": TENSOR_EXPONENT,
            "test_pow_bcast_array": TENSOR_EXPONENT,
            "test_pow_types_float32_int64": TENSOR_EXPONENT,
            "test_pow_types_int64_float32": INT_DATA,
            "test_pow_types_float32_int32": TENSOR_EXPONENT,
            "test_pow_types_int32_float32": INT_DATA,
            "test_pow_types_float32_uint64": TENSOR_EXPONENT,
            "test_pow_types_float32_uint32": TENSOR_EXPONENT,
            "test_pow_types_int64_int64": INT_DATA,
            "test_pow_types_int32_int32": INT_DATA,
        },
    ),
    "RMSNormalization": OpCases(
        included=(
            "test_rms_normalization_4d_axis0",
            "test_rms_normalization_4d_axis_negative_4",
            "test_rms_normalization_4d_axis1",
            "test_rms_normalization_4d_axis_negative_3",
            "test_rms_normalization_4d_axis2",
            "test_rms_normalization_4d_axis_negative_2",
            "test_rms_normalization_4d_axis3",
            "test_rms_normalization_4d_axis_negative_1",
            "test_rms_normalization_default_axis",
            "test_rms_normalization_2d_axis0",
            "test_rms_normalization_2d_axis_negative_2",
            "test_rms_normalization_2d_axis1",
            "test_rms_normalization_2d_axis_negative_1",
            "test_rms_normalization_3d_axis0_epsilon",
            "test_rms_normalization_3d_axis_negative_3_epsilon",
            "test_rms_normalization_3d_axis1_epsilon",
            "test_rms_normalization_3d_axis_negative_2_epsilon",
            "test_rms_normalization_3d_axis2_epsilon",
            "test_rms_normalization_3d_axis_negative_1_epsilon",
        ),
    ),
    "RNN": OpCases(
        included=(
            "test_simple_rnn_defaults",
            "test_simple_rnn_with_initial_bias",
            "test_simple_rnn_batchwise",
            "test_simple_rnn_reverse",
            "test_simple_rnn_bidirectional",
            "test_rnn_seq_length",
        ),
    ),
    "Range": OpCases(
        included=(),
        excluded={
            "test_range_float_type_positive_delta": CONSTANT_BOUNDS,
            "test_range_float16_type_positive_delta": FLOAT_TYPE,
            "test_range_bfloat16_type_positive_delta": FLOAT_TYPE,
            "test_range_int32_type_negative_delta": CONSTANT_BOUNDS,
        },
    ),
    "Reciprocal": OpCases(included=("test_reciprocal_example", "test_reciprocal")),
    "ReduceL1": OpCases(
        included=(
            "test_reduce_l1_do_not_keepdims_example",
            "test_reduce_l1_do_not_keepdims_random",
            "test_reduce_l1_keep_dims_example",
            "test_reduce_l1_keep_dims_random",
            "test_reduce_l1_default_axes_keepdims_example",
            "test_reduce_l1_default_axes_keepdims_random",
            "test_reduce_l1_negative_axes_keep_dims_example",
            "test_reduce_l1_negative_axes_keep_dims_random",
        ),
        excluded={
            "test_reduce_l1_empty_set": EMPTY,
        },
    ),
    "ReduceL2": OpCases(
        included=(
            "test_reduce_l2_do_not_keepdims_example",
            "test_reduce_l2_do_not_keepdims_random",
            "test_reduce_l2_keep_dims_example",
            "test_reduce_l2_keep_dims_random",
            "test_reduce_l2_default_axes_keepdims_example",
            "test_reduce_l2_default_axes_keepdims_random",
            "test_reduce_l2_negative_axes_keep_dims_example",
            "test_reduce_l2_negative_axes_keep_dims_random",
        ),
        excluded={
            "test_reduce_l2_empty_set": EMPTY,
        },
    ),
    "ReduceLogSum": OpCases(
        included=(
            "test_reduce_log_sum_desc_axes",
            "test_reduce_log_sum_asc_axes",
            "test_reduce_log_sum_default",
            "test_reduce_log_sum_negative_axes",
        ),
        excluded={
            "test_reduce_log_sum_empty_set": EMPTY,
        },
    ),
    "ReduceLogSumExp": OpCases(
        included=(),
        excluded={
            "test_reduce_log_sum_exp_do_not_keepdims_example": FLOAT_TYPE,
            "test_reduce_log_sum_exp_do_not_keepdims_random": FLOAT_TYPE,
            "test_reduce_log_sum_exp_keepdims_example": FLOAT_TYPE,
            "test_reduce_log_sum_exp_keepdims_random": FLOAT_TYPE,
            "test_reduce_log_sum_exp_default_axes_keepdims_example": FLOAT_TYPE,
            "test_reduce_log_sum_exp_default_axes_keepdims_random": FLOAT_TYPE,
            "test_reduce_log_sum_exp_negative_axes_keepdims_example": FLOAT_TYPE,
            "test_reduce_log_sum_exp_negative_axes_keepdims_random": FLOAT_TYPE,
            "test_reduce_log_sum_exp_empty_set": EMPTY,
        },
    ),
    "ReduceMax": OpCases(
        included=(
            "test_reduce_max_do_not_keepdims_example",
            "test_reduce_max_do_not_keepdims_random",
            "test_reduce_max_keepdims_example",
            "test_reduce_max_keepdims_random",
            "test_reduce_max_default_axes_keepdim_example",
            "test_reduce_max_default_axes_keepdims_random",
            "test_reduce_max_negative_axes_keepdims_example",
            "test_reduce_max_negative_axes_keepdims_random",
        ),
        excluded={
            "test_reduce_max_bool_inputs": BOOL_DATA,
            "test_reduce_max_empty_set": EMPTY,
            "test_reduce_max_empty_set_bool": EMPTY,
        },
    ),
    "ReduceMean": OpCases(
        included=(
            "test_reduce_mean_do_not_keepdims_example",
            "test_reduce_mean_do_not_keepdims_random",
            "test_reduce_mean_keepdims_example",
            "test_reduce_mean_keepdims_random",
            "test_reduce_mean_default_axes_keepdims_example",
            "test_reduce_mean_default_axes_keepdims_random",
            "test_reduce_mean_negative_axes_keepdims_example",
            "test_reduce_mean_negative_axes_keepdims_random",
        )
    ),
    "ReduceMin": OpCases(
        included=(
            "test_reduce_min_do_not_keepdims_example",
            "test_reduce_min_do_not_keepdims_random",
            "test_reduce_min_keepdims_example",
            "test_reduce_min_keepdims_random",
            "test_reduce_min_default_axes_keepdims_example",
            "test_reduce_min_default_axes_keepdims_random",
            "test_reduce_min_negative_axes_keepdims_example",
            "test_reduce_min_negative_axes_keepdims_random",
        ),
        excluded={
            "test_reduce_min_bool_inputs": BOOL_DATA,
            "test_reduce_min_empty_set": EMPTY,
        },
    ),
    "ReduceSum": OpCases(
        included=(
            "test_reduce_sum_do_not_keepdims_example",
            "test_reduce_sum_do_not_keepdims_random",
            "test_reduce_sum_keepdims_example",
            "test_reduce_sum_keepdims_random",
            "test_reduce_sum_default_axes_keepdims_example",
            "test_reduce_sum_default_axes_keepdims_random",
            "test_reduce_sum_negative_axes_keepdims_example",
            "test_reduce_sum_negative_axes_keepdims_random",
            "test_reduce_sum_empty_axes_input_noop_example",
            "test_reduce_sum_empty_axes_input_noop",
        ),
        excluded={
            "test_reduce_sum_empty_set": EMPTY,
            "test_reduce_sum_empty_set_non_reduced_axis_zero": EMPTY,
        },
    ),
    "ReduceSumSquare": OpCases(
        included=(
            "test_reduce_sum_square_do_not_keepdims_example",
            "test_reduce_sum_square_do_not_keepdims_random",
            "test_reduce_sum_square_keepdims_example",
            "test_reduce_sum_square_keepdims_random",
            "test_reduce_sum_square_default_axes_keepdims_example",
            "test_reduce_sum_square_default_axes_keepdims_random",
            "test_reduce_sum_square_negative_axes_keepdims_example",
            "test_reduce_sum_square_negative_axes_keepdims_random",
        ),
        excluded={
            "test_reduce_sum_square_empty_set": EMPTY,
        },
    ),
    "Relu": OpCases(included=("test_relu",)),
    "Reshape": OpCases(
        included=(
            "test_reshape_reordered_all_dims",
            "test_reshape_reordered_last_dims",
            "test_reshape_reduced_dims",
            "test_reshape_extended_dims",
            "test_reshape_one_dim",
            "test_reshape_negative_dim",
            "test_reshape_negative_extended_dims",
            "test_reshape_zero_dim",
            "test_reshape_zero_and_negative_dim",
        ),
        excluded={
            "test_reshape_allowzero_reordered": EMPTY,
        },
    ),
    "Resize": OpCases(
        included=(
            "test_resize_upsample_scales_nearest",
            "test_resize_downsample_scales_nearest",
            "test_resize_upsample_sizes_nearest",
            "test_resize_downsample_sizes_nearest",
            "test_resize_upsample_scales_linear",
            "test_resize_upsample_scales_linear_align_corners",
            "test_resize_downsample_scales_linear",
            "test_resize_downsample_sizes_linear_pytorch_half_pixel",
            "test_resize_upsample_sizes_nearest_floor_align_corners",
            "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric",
            "test_resize_upsample_sizes_nearest_ceil_half_pixel",
            "test_resize_upsample_scales_nearest_axes_2_3",
            "test_resize_upsample_scales_nearest_axes_3_2",
            "test_resize_upsample_sizes_nearest_axes_2_3",
            "test_resize_upsample_sizes_nearest_axes_3_2",
            "test_resize_upsample_scales_cubic",
            "test_resize_upsample_scales_cubic_align_corners",
            "test_resize_downsample_scales_cubic",
            "test_resize_upsample_sizes_cubic",
            "test_resize_downsample_sizes_cubic",
            "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
            "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
            "test_resize_upsample_scales_cubic_asymmetric",
        ),
        excluded={
            "test_resize_downsample_scales_linear_align_corners": ALIGN_CORNERS_FRACTIONAL,
            "test_resize_downsample_scales_cubic_align_corners": ALIGN_CORNERS_FRACTIONAL,
            "test_resize_tf_crop_and_resize": CROP_AND_RESIZE,
            "test_resize_tf_crop_and_resize_extrapolation_value": CROP_AND_RESIZE,
            "test_resize_downsample_scales_linear_antialias": ANTIALIAS,
            "test_resize_downsample_sizes_linear_antialias": ANTIALIAS,
            "test_resize_downsample_scales_cubic_antialias": ANTIALIAS,
            "test_resize_downsample_sizes_cubic_antialias": ANTIALIAS,
            "test_resize_tf_crop_and_resize_axes_2_3": CROP_AND_RESIZE,
            "test_resize_tf_crop_and_resize_axes_3_2": CROP_AND_RESIZE,
            "test_resize_upsample_sizes_nearest_not_larger": ASPECT_RATIO,
            "test_resize_upsample_sizes_nearest_not_smaller": ASPECT_RATIO,
            "test_resize_downsample_sizes_nearest_not_larger": ASPECT_RATIO,
            "test_resize_downsample_sizes_nearest_not_smaller": ASPECT_RATIO,
            "test_resize_downsample_scales_linear_half_pixel_symmetric": HALF_PIXEL_SYMMETRIC,
            "test_resize_upsample_scales_linear_half_pixel_symmetric": HALF_PIXEL_SYMMETRIC,
        },
    ),
    "RotaryEmbedding": OpCases(
        included=(
            "test_rotary_embedding",
            "test_rotary_embedding_3d_input",
            "test_rotary_embedding_interleaved",
            "test_rotary_embedding_with_rotary_dim",
            "test_rotary_embedding_with_interleaved_rotary_dim",
            "test_rotary_embedding_no_position_ids",
            "test_rotary_embedding_no_position_ids_interleaved",
            "test_rotary_embedding_no_position_ids_rotary_dim",
        ),
    ),
    "Round": OpCases(included=("test_round",)),
    "ScatterElements": OpCases(
        included=(
            "test_scatter_elements_without_axis",
            "test_scatter_elements_with_axis",
            "test_scatter_elements_with_negative_indices",
            "test_scatter_elements_with_duplicate_indices",
            "test_scatter_elements_with_reduction_mul",
            "test_scatter_elements_with_reduction_max",
            "test_scatter_elements_with_reduction_min",
        )
    ),
    "ScatterND": OpCases(
        included=(
            "test_scatternd",
            "test_scatternd_add",
            "test_scatternd_multiply",
            "test_scatternd_max",
            "test_scatternd_min",
            "test_scatternd_max_with_element_indices",
            "test_scatternd_min_with_element_indices",
        )
    ),
    "Selu": OpCases(included=("test_selu_example", "test_selu", "test_selu_default")),
    "Shrink": OpCases(
        included=(
            "test_shrink_hard",
            "test_shrink_soft",
        ),
    ),
    "Sigmoid": OpCases(included=("test_sigmoid_example", "test_sigmoid")),
    "Sign": OpCases(included=("test_sign",)),
    "Sin": OpCases(included=("test_sin_example", "test_sin")),
    "Sinh": OpCases(included=("test_sinh_example", "test_sinh")),
    "Slice": OpCases(
        included=(
            "test_slice",
            "test_slice_neg",
            "test_slice_start_out_of_bounds",
            "test_slice_end_out_of_bounds",
            "test_slice_default_axes",
            "test_slice_default_steps",
            "test_slice_neg_steps",
            "test_slice_negative_axes",
        )
    ),
    "Softmax": OpCases(
        included=(
            "test_softmax_example",
            "test_softmax_large_number",
            "test_softmax_axis_0",
            "test_softmax_axis_1",
            "test_softmax_axis_2",
            "test_softmax_negative_axis",
            "test_softmax_default_axis",
        )
    ),
    "SoftmaxCrossEntropyLoss": OpCases(
        included=(
            "test_sce_mean",
            "test_sce_mean_log_prob",
            "test_sce_mean_3d",
            "test_sce_mean_3d_log_prob",
            "test_sce_mean_weight",
            "test_sce_mean_weight_log_prob",
            "test_sce_mean_weight_ii",
            "test_sce_mean_weight_ii_log_prob",
            "test_sce_mean_no_weight_ii",
            "test_sce_mean_no_weight_ii_log_prob",
            "test_sce_mean_weight_ii_3d",
            "test_sce_mean_weight_ii_3d_log_prob",
            "test_sce_mean_no_weight_ii_3d",
            "test_sce_mean_no_weight_ii_3d_log_prob",
            "test_sce_mean_weight_ii_4d",
            "test_sce_mean_weight_ii_4d_log_prob",
            "test_sce_mean_no_weight_ii_4d",
            "test_sce_mean_no_weight_ii_4d_log_prob",
            "test_sce_NCd1d2d3d4d5_mean_weight",
            "test_sce_NCd1d2d3d4d5_mean_weight_log_prob",
            "test_sce_NCd1_mean_weight_negative_ii",
            "test_sce_NCd1_mean_weight_negative_ii_log_prob",
        ),
        excluded={
            "test_sce_none": REDUCTION_NONE,
            "test_sce_none_log_prob": REDUCTION_NONE,
            "test_sce_none_weights": REDUCTION_NONE,
            "test_sce_none_weights_log_prob": REDUCTION_NONE,
            "test_sce_sum": REDUCTION_SUM,
            "test_sce_sum_log_prob": REDUCTION_SUM,
            "test_sce_NCd1d2d3d4d5_none_no_weight": REDUCTION_NONE,
            "test_sce_NCd1d2d3d4d5_none_no_weight_log_prob": REDUCTION_NONE,
            "test_sce_NCd1d2d3_none_no_weight_negative_ii": REDUCTION_NONE,
            "test_sce_NCd1d2d3_none_no_weight_negative_ii_log_prob": REDUCTION_NONE,
            "test_sce_NCd1d2d3_sum_weight_high_ii": REDUCTION_SUM,
            "test_sce_NCd1d2d3_sum_weight_high_ii_log_prob": REDUCTION_SUM,
        },
    ),
    "Softplus": OpCases(included=("test_softplus_example", "test_softplus")),
    "Softsign": OpCases(included=("test_softsign_example", "test_softsign")),
    "SpaceToDepth": OpCases(
        included=(
            "test_spacetodepth",
            "test_spacetodepth_example",
            "test_spacetodepth_dcr_mode_example",
            "test_spacetodepth_crd_mode_example",
        )
    ),
    "Split": OpCases(
        included=(
            "test_split_equal_parts_1d_opset13",
            "test_split_variable_parts_1d_opset13",
            "test_split_equal_parts_2d_opset13",
            "test_split_variable_parts_2d_opset13",
            "test_split_equal_parts_default_axis_opset13",
            "test_split_variable_parts_default_axis_opset13",
            "test_split_equal_parts_1d_opset18",
            "test_split_variable_parts_1d_opset18",
            "test_split_equal_parts_2d",
            "test_split_variable_parts_2d_opset18",
            "test_split_equal_parts_default_axis_opset18",
            "test_split_variable_parts_default_axis_opset18",
            "test_split_1d_uneven_split_opset18",
            "test_split_2d_uneven_split_opset18",
        ),
        excluded={
            "test_split_zero_size_splits_opset13": EMPTY,
            "test_split_zero_size_splits_opset18": EMPTY,
        },
    ),
    "Sqrt": OpCases(included=("test_sqrt_example", "test_sqrt")),
    "Squeeze": OpCases(included=("test_squeeze", "test_squeeze_negative_axes")),
    "Sub": OpCases(
        included=("test_sub_example", "test_sub", "test_sub_bcast"),
        excluded={
            "test_sub_int8": SMALL_INT_DATA,
            "test_sub_int16": SMALL_INT_DATA,
            "test_sub_uint8": SMALL_INT_DATA,
            "test_sub_uint16": SMALL_INT_DATA,
            "test_sub_uint32": SMALL_INT_DATA,
            "test_sub_uint64": SMALL_INT_DATA,
        },
    ),
    "SwiGLU": OpCases(
        included=(
            "test_swiglu",
            "test_swiglu_alpha",
        ),
        excluded={
            "test_swiglu_float16": FLOAT_TYPE,
        },
    ),
    "Swish": OpCases(
        included=("test_swish",),
    ),
    "Tan": OpCases(included=("test_tan_example", "test_tan")),
    "Tanh": OpCases(included=("test_tanh_example", "test_tanh")),
    "ThresholdedRelu": OpCases(
        included=(
            "test_thresholdedrelu_example",
            "test_thresholdedrelu",
            "test_thresholdedrelu_default",
        ),
    ),
    "Tile": OpCases(included=("test_tile", "test_tile_precomputed")),
    "TopK": OpCases(
        included=(
            "test_top_k",
            "test_top_k_negative_axis",
            "test_top_k_smallest",
            "test_top_k_same_values",
            "test_top_k_same_values_2d",
            "test_top_k_same_values_largest",
        ),
        excluded={
            "test_top_k_uint64": SMALL_INT_DATA,
        },
    ),
    "Transpose": OpCases(
        included=(
            "test_transpose_default",
            "test_transpose_all_permutations_0",
            "test_transpose_all_permutations_1",
            "test_transpose_all_permutations_2",
            "test_transpose_all_permutations_3",
            "test_transpose_all_permutations_4",
            "test_transpose_all_permutations_5",
        )
    ),
    "Trilu": OpCases(
        included=(),
        excluded={
            "test_triu_zero": EMPTY,
            "test_tril_zero": EMPTY,
        },
        as_float32=(
            "test_triu",
            "test_triu_neg",
            "test_triu_out_neg_out",
            "test_triu_pos",
            "test_triu_out_pos",
            "test_triu_square",
            "test_triu_square_neg",
            "test_triu_one_row",
            "test_tril",
            "test_tril_neg",
            "test_tril_out_neg",
            "test_tril_pos",
            "test_tril_out_pos",
            "test_tril_square",
            "test_tril_square_neg",
            "test_tril_one_row_neg",
        ),
    ),
    "Unsqueeze": OpCases(
        included=(
            "test_unsqueeze_axis_0",
            "test_unsqueeze_axis_1",
            "test_unsqueeze_axis_2",
            "test_unsqueeze_two_axes",
            "test_unsqueeze_three_axes",
            "test_unsqueeze_unsorted_axes",
            "test_unsqueeze_negative_axes",
        )
    ),
    "Where": OpCases(included=("test_where_example", "test_where_long_example")),
    "Xor": OpCases(
        included=(
            "test_xor2d",
            "test_xor3d",
            "test_xor4d",
            "test_xor_bcast3v1d",
            "test_xor_bcast3v2d",
            "test_xor_bcast4v2d",
            "test_xor_bcast4v3d",
            "test_xor_bcast4v4d",
        ),
    ),
}
