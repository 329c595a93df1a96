/* edgetrain runtime: QuantizeLinear and DequantizeLinear, and their
 * gradients for quantization-aware training.
 *
 * A quantized tensor (int8, uint8, int16, uint16 or int32 in the model) keeps
 * its own width where the model computes it, and is an int32_t where the C
 * API hands it over (a model output), like every integer tensor
 * (et_integer.h): the kernels take it untyped, with its et_qtype.
 * Scales and zero points are per tensor or per channel of one axis: the
 * kernels see X as [outer][channels][inner] with channel c's scale[c] and
 * zero_point[c] (channels 1: per tensor; zero_point NULL: 0).
 *
 * Quantizing rounds x / scale to the nearest integer, ties to even, adds
 * the zero point and saturates to [qmin, qmax], as ONNX and onnxruntime
 * do, with IEEE single-precision operations only, so every target gives
 * the same integers.  The gradients are the straight-through estimator of
 * quantization-aware training (as torch.fake_quantize_* differentiates):
 * rounding passes the gradient, saturation stops it. */
#ifndef ET_QUANTIZE_H
#define ET_QUANTIZE_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif

enum et_qtype { ET_Q_INT32 = 0, ET_Q_INT8 = 1, ET_Q_UINT8 = 2, ET_Q_INT16 = 3, ET_Q_UINT16 = 4 };

static inline int32_t et_q_get_(const void *X, size_t j, int type)
{
    switch (type) {
    case ET_Q_INT8: return ((const int8_t *)X)[j];
    case ET_Q_UINT8: return ((const uint8_t *)X)[j];
    case ET_Q_INT16: return ((const int16_t *)X)[j];
    case ET_Q_UINT16: return ((const uint16_t *)X)[j];
    default: return ((const int32_t *)X)[j];
    }
}

/* v lies in the type's range (QuantizeLinear saturated it). */
static inline void et_q_put_(void *Y, size_t j, int type, int32_t v)
{
    switch (type) {
    case ET_Q_INT8: ((int8_t *)Y)[j] = (int8_t)v; break;
    case ET_Q_UINT8: ((uint8_t *)Y)[j] = (uint8_t)v; break;
    case ET_Q_INT16: ((int16_t *)Y)[j] = (int16_t)v; break;
    case ET_Q_UINT16: ((uint16_t *)Y)[j] = (uint16_t)v; break;
    default: ((int32_t *)Y)[j] = v; break;
    }
}

/* v rounded to the nearest integer, ties to even.  Adding 2^23 to a
 * magnitude below it leaves no fraction bits, so the sum is rounded by
 * the FPU's default round-to-nearest-even; from 2^23 on every float is an
 * integer already (and NaN stays NaN). */
static inline float et_round_even_f32_(float v)
{
    float a = v < 0.0f ? -v : v;
    if (!(a < 0x1p23f))
        return v;
    a = (a + 0x1p23f) - 0x1p23f;
    return v < 0.0f ? -a : a;
}

/* round(x / scale) + zero_point as a float, before saturation. */
static inline float et_quantized_f32_(float x, float scale, int32_t zero_point)
{
    return et_round_even_f32_(x / scale) + (float)zero_point;
}

/* q (a rounded value plus its zero point) saturated to [qmin, qmax]; NaN gives qmin. */
static inline int32_t et_saturate_(float q, int32_t qmin, int32_t qmax)
{
    return q > (float)qmin ? (q < (float)qmax ? (int32_t)q : qmax) : qmin;
}

/* Whether round(x * inverse) + zero_point lies in [qmin, qmax]: where QuantizeLinear's gradient
 * passes (et_quantize_mask_f32). */
static inline int et_quantize_inside_(float x, float inverse, float zero_point, int32_t qmin, int32_t qmax)
{
    float q = et_round_even_f32_(x * inverse) + zero_point;
    return q >= (float)qmin && q <= (float)qmax;
}

/* Y (of et_qtype y_type) = saturate(round(X / scale) + zero_point) in [qmin, qmax]; NaN gives
 * qmin. */
static inline void et_quantize_f32(int outer, int channels, int inner, const float *X, const float *scale,
                                   const int32_t *zero_point, int32_t qmin, int32_t qmax, void *Y, int y_type)
{
    size_t j = 0;
    int o, c, i;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < channels; ++c) {
            const int32_t zp = zero_point ? zero_point[c] : 0;
            for (i = 0; i < inner; ++i, ++j)
                et_q_put_(Y, j, y_type, et_saturate_(et_quantized_f32_(X[j], scale[c], zp), qmin, qmax));
        }
}

/* Y = X for n int8 values (a snapshot of a trained int8 weight's integers). */
static inline void et_copy_s8(int n, const int8_t *X, int8_t *Y)
{
    memcpy(Y, X, (size_t)n);
}

/* Y = (X - zero_point) * scale for X of et_qtype x_type, the difference taken in 64 bits (int32
 * tensors can be anything). */
static inline void et_dequantize_f32(int outer, int channels, int inner, const void *X, int x_type,
                                     const float *scale, const int32_t *zero_point, float *Y)
{
    size_t j = 0;
    int o, c, i;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < channels; ++c) {
            const int64_t zp = zero_point ? zero_point[c] : 0;
            for (i = 0; i < inner; ++i, ++j)
                Y[j] = (float)((int64_t)et_q_get_(X, j, x_type) - zp) * scale[c];
        }
}

/* dX = dY * scale: DequantizeLinear's derivative, into the integer tensor it read. */
static inline void et_dequantize_grad_f32(int outer, int channels, int inner, const float *dY, const float *scale,
                                          float *dX)
{
    int o, c, i;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < channels; ++c) {
            const size_t at = ((size_t)o * (size_t)channels + (size_t)c) * (size_t)inner;
            for (i = 0; i < inner; ++i)
                dX[at + (size_t)i] = dY[at + (size_t)i] * scale[c];
        }
}

/* The bits of where round(X * (1 / scale)) + zero_point lies in [qmin, qmax] (element j at bit
 * j % 32 of word j / 32), kept from the forward pass for et_quantize_grad_f32 so X need not live
 * until the backward one.  The range is tested on the reciprocal's product, as
 * torch.fake_quantize_* tests it, where the forward pass divides: the two differ only where
 * X / scale is a tie, and a symmetric scale (max|W| / 127.5, PyTorch's) makes the largest weight of
 * each channel one, which PyTorch keeps in range and trains. */
static inline void et_quantize_mask_f32(int outer, int channels, int inner, const float *X, const float *scale,
                                        const int32_t *zero_point, int32_t qmin, int32_t qmax, uint32_t *mask)
{
    size_t j = 0;
    int o, c, i;
    memset(mask, 0, ((size_t)outer * (size_t)channels * (size_t)inner + 31u) / 32u * sizeof *mask);
    for (o = 0; o < outer; ++o)
        for (c = 0; c < channels; ++c) {
            const float zp = zero_point ? (float)zero_point[c] : 0.0f, inverse = 1.0f / scale[c];
            for (i = 0; i < inner; ++i, ++j)
                mask[j / 32u] |= (uint32_t)et_quantize_inside_(X[j], inverse, zp, qmin, qmax) << (j % 32u);
        }
}

/* dX = dY / scale where the mask's bit is set, else 0: the straight-through estimator of
 * QuantizeLinear. */
static inline void et_quantize_grad_f32(int outer, int channels, int inner, const float *dY, const uint32_t *mask,
                                        const float *scale, float *dX)
{
    size_t j = 0;
    int o, c, i;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < channels; ++c)
            for (i = 0; i < inner; ++i, ++j)
                dX[j] = (mask[j / 32u] >> (j % 32u)) & 1u ? dY[j] / scale[c] : 0.0f;
}

/* Rows [first, first + count) of each of N samples' dY [N][C][plane], at the
 * positions [from, from + len) of each row, where dY is what
 * et_average_pool_grad_f32 over the whole plane (0 + g / plane), et_dequantize_grad_f32 (* dq_scale),
 * et_quantize_grad_f32 (/ q_scale where the mask's bit is set) and et_relu_grad_f32 (where
 * relu_mask's bit is set; NULL: no activation) make of the pooled gradient G [N][C]: the same
 * operations, so the same bits, without the whole dY.  Y is [N][count][len]. */
static inline void et_pooled_grad_rows_f32(int N, int C, int plane, int first, int count, int from, int len,
                                           const float *G, float dq_scale, float q_scale, const uint32_t *mask,
                                           const uint32_t *relu_mask, float *Y)
{
    int n, r, i;
    for (n = 0; n < N; ++n)
        for (r = 0; r < count; ++r) {
            const float value = ((0.0f + G[(size_t)n * (size_t)C + (size_t)(first + r)] / (float)plane) * dq_scale)
                                / q_scale;
            size_t j = ((size_t)n * (size_t)C + (size_t)(first + r)) * (size_t)plane + (size_t)from;
            float *y = Y + ((size_t)n * (size_t)count + (size_t)r) * (size_t)len;
            for (i = 0; i < len; ++i, ++j) {
                int passes = (mask[j / 32u] >> (j % 32u)) & 1u;
                if (relu_mask != NULL)
                    passes = passes && ((relu_mask[j / 32u] >> (j % 32u)) & 1u);
                y[i] = passes ? value : 0.0f;
            }
        }
}

#endif /* ET_QUANTIZE_H */
