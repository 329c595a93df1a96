/* edgetrain runtime: an int8 layer (a convolution, or a matrix product as a
 * convolution of 1 x 1 positions) as an int8 deployment runs it: int8
 * input, int8 weights, int32 accumulation, the output requantized to int8;
 * a global average pool of an int8 tensor; and the gradients that read its
 * int8 tensors as they are kept (a weight gradient from the int8 input, by
 * blocks of output channels if need be, a pointwise input gradient from the
 * int8 weights).
 *
 * The layer stands for DequantizeLinear -> Conv (or Gemm) -> [Relu or
 * Clip] -> QuantizeLinear of a quantized model, whose float tensors in
 * between it never stores.  The sums are exact integers, so their order
 * does not matter; the requantization is a fixed sequence of IEEE
 * single-precision operations (et_quantize.h's rounding), so every target
 * gives the same integers.  Against the float layers it replaces, only the
 * rounding of the sums differs: an output may move by one quantization
 * step.  Quantized inputs are int8 or uint8 (x_type ET_Q_INT8 or
 * ET_Q_UINT8), read from their bytes.  Where the core has the DSP
 * extension, the layer's sums take two products per SMLAD. */
#ifndef ET_QCONV_H
#define ET_QCONV_H

#ifndef ET_CONV_H
#include "et_conv.h"
#endif
#ifndef ET_QUANTIZE_H
#include "et_quantize.h"
#endif

/* Cores with ARM's DSP extension (Cortex-M4, M7, M33, M55; ARMv7-A) add two
 * 16-bit products to a 32-bit sum in one SMLAD instruction, and widen two
 * of a word's four int8 weights to 16 bits in one SXTB16 (gcc's and
 * clang's builtins, which need no header).  The sums stay
 * exact integers, so adding products two at a time gives every target the
 * same sums. */
#if defined(__GNUC__) && defined(__ARM_FEATURE_SIMD32) && !defined(__ARM_BIG_ENDIAN) && !defined(ET_NO_SMLAD)
#define ET_SMLAD 1
#else
#define ET_SMLAD 0
#endif

enum { ET_QMASK_INSIDE = 1, ET_QMASK_ACTIVE = 2 };
enum { ET_QACT_NONE = 0, ET_QACT_RELU = 1, ET_QACT_CLIP = 2 };

/* X (int8 or uint8, by x_type) minus its zero point, from its bytes without a branch: an int8
 * value is its byte with the top bit flipped, less 128. */
typedef struct {
    const uint8_t *bytes;
    uint32_t flip;
    int32_t bias;
} et_q8_;

static inline et_q8_ et_q8_of_(const void *X, int x_type, int32_t x_zero)
{
    et_q8_ x;
    x.bytes = (const uint8_t *)X;
    x.flip = x_type == ET_Q_INT8 ? 0x80u : 0u;
    x.bias = (x_type == ET_Q_INT8 ? 128 : 0) + x_zero;
    return x;
}

static inline int32_t et_q8_at_(et_q8_ x, size_t j)
{
    return (int32_t)(x.bytes[j] ^ x.flip) - x.bias;
}

/* patch[c * k_size + t] = X[c] (the channels from x_at on) at the input
 * position that output position `at` reads through tap t, minus x_zero,
 * or 0 where the tap falls in the padding (which holds a dequantized 0). */
static inline void et_qconv_patch_(int Cg, const int *in, const int *k, const int *s, const int *d, const int *p,
                                   const int *at, et_q8_ X, size_t x_at, int16_t *patch)
{
    int in_size = et_conv_volume_(in), c, kz, ky, kx;
    if (et_conv_volume_(k) == 1) {  /* one tap (pointwise layers): one input position for every channel */
        const int iz = at[0] * s[0] - p[0], iy = at[1] * s[1] - p[1], ix = at[2] * s[2] - p[2];
        const int inside = iz >= 0 && iz < in[0] && iy >= 0 && iy < in[1] && ix >= 0 && ix < in[2];
        const size_t x_pos = inside ? ((size_t)iz * (size_t)in[1] + (size_t)iy) * (size_t)in[2] + (size_t)ix : 0;
        for (c = 0; c < Cg; ++c)
            patch[c] = (int16_t)(inside ? et_q8_at_(X, x_at + (size_t)c * (size_t)in_size + x_pos) : 0);
        return;
    }
    for (c = 0; c < Cg; ++c) {
        int16_t *t = patch + (size_t)c * (size_t)et_conv_volume_(k);
        for (kz = 0; kz < k[0]; ++kz) {
            int iz = at[0] * s[0] + kz * d[0] - p[0];
            for (ky = 0; ky < k[1]; ++ky) {
                int iy = at[1] * s[1] + ky * d[1] - p[1];
                int row = iz >= 0 && iz < in[0] && iy >= 0 && iy < in[1];
                size_t at_row = x_at + (size_t)c * (size_t)in_size;
                at_row += row ? ((size_t)iz * (size_t)in[1] + (size_t)iy) * (size_t)in[2] : 0;
                for (kx = 0; kx < k[2]; ++kx, ++t) {
                    int ix = at[2] * s[2] + kx * d[2] - p[2];
                    *t = (int16_t)(row && ix >= 0 && ix < in[2] ? et_q8_at_(X, at_row + (size_t)ix) : 0);
                }
            }
        }
    }
}

/* What an int8 layer does with the sum of an output: et_qconv_s8's arguments after the sums. */
struct et_qout_ {
    float x_scale;
    const float *w_scale;
    int w_channels;
    const float *B;
    int activation;
    float low, high, y_scale, inverse;
    int32_t y_zero, qmin, qmax;
    void *Y;
    int y_type;
    uint32_t *mask;
    int masks;
};

/* Element e (output channel m) of Y, and its mask bit, from its sum acc (et_qconv_s8's formulas). */
static inline void et_qconv_store_(const struct et_qout_ *out, int m, size_t e, int32_t acc)
{
    float v = (float)acc * (out->x_scale * out->w_scale[out->w_channels > 1 ? m : 0]);
    int active = 1;
    if (out->B)
        v = v + out->B[m];
    if (out->activation == ET_QACT_RELU) {
        v = v > 0.0f ? v : 0.0f;
        active = v > 0.0f;
    } else if (out->activation == ET_QACT_CLIP) {
        active = v >= out->low && v <= out->high;
        v = v < out->low ? out->low : v;
        v = v > out->high ? out->high : v;
    }
    et_q_put_(out->Y, e, out->y_type,
              et_saturate_(et_quantized_f32_(v, out->y_scale, out->y_zero), out->qmin, out->qmax));
    if (out->mask) {
        int pass = !(out->masks & ET_QMASK_ACTIVE) || active;
        pass &= !(out->masks & ET_QMASK_INSIDE) ||
                et_quantize_inside_(v, out->inverse, (float)out->y_zero, out->qmin, out->qmax);
        out->mask[e / 32u] |= (uint32_t)pass << (e % 32u);
    }
}

#if ET_SMLAD
/* acc + four products: of the halfwords of `even` with bytes 0 and 2 of
 * the word at w (SXTB16 widens them), and of `odd` with bytes 1 and 3. */
static inline int32_t et_smlad4_(uint32_t even, uint32_t odd, const int8_t *w, int32_t acc)
{
    uint32_t four, odd_bytes;
    memcpy(&four, w, sizeof four);
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(odd_bytes) : "r"(four));  /* gcc forms no SXTB16 with a rotation */
    acc = __builtin_arm_smlad((int32_t)even, __builtin_arm_sxtb16((int32_t)four), acc);
    return __builtin_arm_smlad((int32_t)odd, (int32_t)odd_bytes, acc);
}
#endif

/* sums[r] + the sum over j < taps of patch[j] * w_r[j] for r < 2 (w_1 = w_0
 * + w_rs), the patch in et_qconv_patch_order_'s order: with SMLAD, four
 * taps at a time, the patch's first pair of halfwords (taps 0 and 2) and
 * its second (1 and 3).  Two channels at a time keep the loop in registers. */
static inline void et_qconv_dot2_(int taps, const int16_t *patch, const int8_t *w, int w_rs, int32_t *sums)
{
    int32_t a0 = sums[0], a1 = sums[1];
    int j = 0;
#if ET_SMLAD
    for (; j + 4 <= taps; j += 4) {
        uint32_t even, odd;
        memcpy(&even, patch + j, sizeof even);
        memcpy(&odd, patch + j + 2, sizeof odd);
        a0 = et_smlad4_(even, odd, w + j, a0);
        a1 = et_smlad4_(even, odd, w + w_rs + j, a1);
    }
#endif
    for (; j < taps; ++j) {
        a0 += (int32_t)patch[j] * (int32_t)w[j];
        a1 += (int32_t)patch[j] * (int32_t)w[w_rs + j];
    }
    sums[0] = a0;
    sums[1] = a1;
}

/* With SMLAD, each whole four taps of a gathered patch in the order 0, 2,
 * 1, 3: the order et_qconv_dot2_ reads them in, pairs of halfwords that
 * line up with SXTB16's pairs of weights. */
static inline void et_qconv_patch_order_(int taps, int16_t *patch)
{
#if ET_SMLAD
    int j;
    for (j = 0; j + 4 <= taps; j += 4) {
        const int16_t second = patch[j + 1];
        patch[j + 1] = patch[j + 2];
        patch[j + 2] = second;
    }
#else
    (void)taps;
    (void)patch;
#endif
}

/* Taps of a depthwise window that et_qconv_depthwise_ reads through a table of their offsets,
 * without bounds tests, where the whole window lies inside the input (3 x 3 to 7 x 7 windows).  */
#define ET_QDW_TAPS 64

/* A depthwise layer (one input and one output channel per group): each
 * plane's sums straight from X, without a patch.  An output whose window
 * lies inside the plane sums its taps' bytes through a table of offsets
 * (less x's bias times the sum of the weights, the same integer); those
 * near the border test each tap. */
static inline void et_qconv_depthwise_(int N, int C, const int *in, const int *out, const int *k, const int *s,
                                       const int *d, const int *p, et_q8_ X, const int8_t *W,
                                       const struct et_qout_ *q)
{
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int n, c, o, t, a, kz, ky, kx, at[3], kt[3], lo[3], hi[3], first[2], last[2];
    size_t offset[ET_QDW_TAPS];
    const int table = k_size <= ET_QDW_TAPS;
    for (a = 0; a < 3; ++a) {  /* the outputs whose first and last taps along axis a are inside */
        et_conv_span_(s[a], -p[a], in[a], out[a], &first[0], &first[1]);
        et_conv_span_(s[a], (k[a] - 1) * d[a] - p[a], in[a], out[a], &last[0], &last[1]);
        lo[a] = first[0] > last[0] ? first[0] : last[0];
        hi[a] = first[1] < last[1] ? first[1] : last[1];
    }
    for (t = 0, kt[0] = kt[1] = kt[2] = 0; table && t < k_size; ++t, et_conv_next_tap_(kt, k))
        offset[t] = ((size_t)(kt[0] * d[0]) * (size_t)in[1] + (size_t)(kt[1] * d[1])) * (size_t)in[2] +
                    (size_t)(kt[2] * d[2]);
    for (n = 0; n < N; ++n)
        for (c = 0; c < C; ++c) {
            const size_t plane = ((size_t)n * (size_t)C + (size_t)c) * (size_t)in_size;
            const int8_t *wc = W + (size_t)c * (size_t)k_size;
            int32_t w_sum = 0;
            for (t = 0; t < k_size; ++t)
                w_sum += wc[t];
            for (o = 0, at[0] = at[1] = at[2] = 0; o < out_size; ++o, et_conv_next_tap_(at, out)) {
                const int8_t *w = wc;
                int32_t acc = 0;
                if (table && at[0] >= lo[0] && at[0] < hi[0] && at[1] >= lo[1] && at[1] < hi[1] && at[2] >= lo[2] &&
                    at[2] < hi[2]) {
                    const uint8_t *x = X.bytes + plane +
                                       ((size_t)(at[0] * s[0] - p[0]) * (size_t)in[1] + (size_t)(at[1] * s[1] - p[1])) *
                                           (size_t)in[2] +
                                       (size_t)(at[2] * s[2] - p[2]);
                    for (t = 0; t < k_size; ++t)
                        acc += (int32_t)(x[offset[t]] ^ X.flip) * (int32_t)w[t];
                    acc -= X.bias * w_sum;
                } else
                    for (kz = 0; kz < k[0]; ++kz) {
                        int iz = at[0] * s[0] + kz * d[0] - p[0];
                        for (ky = 0; ky < k[1]; ++ky, w += k[2]) {
                            int iy = at[1] * s[1] + ky * d[1] - p[1];
                            size_t row = plane + ((size_t)iz * (size_t)in[1] + (size_t)iy) * (size_t)in[2];
                            if (iz < 0 || iz >= in[0] || iy < 0 || iy >= in[1])
                                continue;
                            for (kx = 0; kx < k[2]; ++kx) {
                                int ix = at[2] * s[2] + kx * d[2] - p[2];
                                if (ix >= 0 && ix < in[2])
                                    acc += et_q8_at_(X, row + (size_t)ix) * (int32_t)w[kx];
                            }
                        }
                    }
                et_qconv_store_(q, c, ((size_t)n * (size_t)C + (size_t)c) * (size_t)out_size + (size_t)o, acc);
            }
        }
}

/* Y[n, m, o] = saturate(round(v / y_scale) + y_zero) in [qmin, qmax], with
 *   acc = the sum over c and taps t of (X - x_zero) * W[m, c, t] (int32, exact),
 *   v = (float)acc * (x_scale * w_scale[m]), plus B[m] where B is given, then the activation
 *   (ET_QACT_RELU: max(v, 0); ET_QACT_CLIP: v clamped to [low, high], as et_clip_f32 clamps):
 * the float value the replaced layers would quantize.  Conv's geometry and
 * grouping as et_conv.h's; W int8 with zero point 0, w_scale per output
 * channel (w_channels M) or per tensor (1).  Where given, `mask` gets the
 * bits of where the backward pass lets the gradient through (laid out as
 * et_relu_mask_f32's): those of et_quantize_mask_f32 (round(v * (1 /
 * y_scale)) + y_zero in [qmin, qmax]) where `masks` has ET_QMASK_INSIDE,
 * and of the activation's gradient where it has ET_QMASK_ACTIVE (ReLU:
 * et_relu_mask_f32's v > 0; clip: et_clip_mask_f32's low <= v <= high,
 * before clamping); with both, each bit is both tests.  `patch` holds
 * C / G * kernel volume int16: each output position's inputs, gathered
 * once for the output channels of its group. */
static inline void et_qconv_s8(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                               const int *s, const int *d, const int *p, const void *X, int x_type, float x_scale,
                               int32_t x_zero, const int8_t *W, const float *w_scale, int w_channels,
                               const float *B, int activation, float low, float high, float y_scale, int32_t y_zero,
                               int32_t qmin, int32_t qmax, void *Y, int y_type, uint32_t *mask, int masks,
                               int16_t *patch)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int taps = Cg * et_conv_volume_(k), n, g, m, o, at[3];
    const et_q8_ x = et_q8_of_(X, x_type, x_zero);
    const struct et_qout_ q = {x_scale, w_scale, w_channels, B, activation, low, high, y_scale, 1.0f / y_scale,
                               y_zero, qmin, qmax, Y, y_type, mask, masks};
    if (mask)
        memset(mask, 0, ((size_t)N * (size_t)M * (size_t)out_size + 31u) / 32u * sizeof *mask);
    if (Cg == 1 && Mg == 1) {
        et_qconv_depthwise_(N, C, in, out, k, s, d, p, x, W, &q);
        return;
    }
    for (n = 0; n < N; ++n)
        for (g = 0; g < G; ++g)
            for (o = 0, at[0] = at[1] = at[2] = 0; o < out_size; ++o, et_conv_next_tap_(at, out)) {
                et_qconv_patch_(Cg, in, k, s, d, p, at, x, ((size_t)n * (size_t)C + (size_t)(g * Cg)) * (size_t)in_size,
                                patch);
                et_qconv_patch_order_(taps, patch);
                for (m = g * Mg; m < (g + 1) * Mg; m += 2) {  /* 2 channels share each patch load */
                    const size_t e = ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size + (size_t)o;
                    const int pair = (g + 1) * Mg - m > 1;
                    int32_t sums[2] = {0, 0};
                    et_qconv_dot2_(taps, patch, W + (size_t)m * (size_t)taps, pair ? taps : 0, sums);
                    et_qconv_store_(&q, m, e, sums[0]);
                    if (pair)
                        et_qconv_store_(&q, m + 1, e + (size_t)out_size, sums[1]);
                }
            }
}

/* Y[r] = x_scale * ((float)S / (float)plane), S the exact int32 sum of
 * X - x_zero over row r's plane values: a global average pool of a
 * quantized tensor (per tensor), read from its int8 or uint8 bytes rather
 * than a float copy of them.  plane * 255 fits an int32. */
static inline void et_qmean_f32(int rows, int plane, const void *X, int x_type, float x_scale, int32_t x_zero,
                                float *Y)
{
    const et_q8_ x = et_q8_of_(X, x_type, x_zero);
    int r, i;
    for (r = 0; r < rows; ++r) {
        int32_t sum = 0;
        for (i = 0; i < plane; ++i)
            sum += et_q8_at_(x, (size_t)r * (size_t)plane + (size_t)i);
        Y[r] = x_scale * ((float)sum / (float)plane);
    }
}

/* dW[m - first, c, t] for the output channels first <= m < first + count:
 * x_scale * the sum, over n and the rows of output positions in order, of
 * each row's sum (from 0, over o in order) of dY[n, m, o] * (X - x_zero) at
 * the input that o reads through t (none in the padding).  Conv's weight
 * gradient (et_conv_grad_w_f32's) from the int8 input a quantized model
 * keeps, never dequantized into a float tensor; a block of channels at a
 * time where a fused update applies each block as it is made.  Rows keep
 * the sums short (a long sum taken in order rounds at the size of its
 * total).  Four output channels at a time share each input's conversion;
 * no channel's sums depend on which others are computed with it. */
static inline void et_conv_grad_w_q8_f32(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                         const int *s, const int *d, const int *p, const float *dY, const void *X,
                                         int x_type, float x_scale, int32_t x_zero, int first, int count,
                                         float *dW)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), end = first + count;
    int k_size = et_conv_volume_(k), n, m, c, t, a, r, rows, oz, oy, ox, kt[3], lo[3], hi[3];
    const et_q8_ x = et_q8_of_(X, x_type, x_zero);
    for (c = 0; c < Cg; ++c)
        for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k)) {
            for (a = 0; a < 3; ++a)  /* the output positions whose input through t is inside X */
                et_conv_span_(s[a], kt[a] * d[a] - p[a], in[a], out[a], &lo[a], &hi[a]);
            for (m = first; m < end; m += rows) {
                float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                rows = (m / Mg + 1) * Mg - m < 4 || end - m < 4 ? 1 : 4;  /* 4 channels of one group, else 1 */
                for (n = 0; n < N; ++n) {
                    const size_t plane = ((size_t)n * (size_t)C + (size_t)((m / Mg) * Cg + c)) * (size_t)in_size;
                    const float *dy = dY + ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size;
                    for (oz = lo[0]; oz < hi[0]; ++oz)
                        for (oy = lo[1]; oy < hi[1]; ++oy) {
                            const size_t o = ((size_t)oz * (size_t)out[1] + (size_t)oy) * (size_t)out[2];
                            const size_t i = plane + ((size_t)(oz * s[0] + kt[0] * d[0] - p[0]) * (size_t)in[1] +
                                                      (size_t)(oy * s[1] + kt[1] * d[1] - p[1])) * (size_t)in[2] +
                                             (size_t)(kt[2] * d[2] - p[2]);
                            const float *y0 = dy + o, *y1 = y0 + out_size, *y2 = y1 + out_size, *y3 = y2 + out_size;
                            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                            if (rows == 4)
                                for (ox = lo[2]; ox < hi[2]; ++ox) {
                                    const float v = (float)et_q8_at_(x, i + (size_t)(ox * s[2]));
                                    s0 = et_mla_(s0, y0[ox], v);
                                    s1 = et_mla_(s1, y1[ox], v);
                                    s2 = et_mla_(s2, y2[ox], v);
                                    s3 = et_mla_(s3, y3[ox], v);
                                }
                            else
                                for (ox = lo[2]; ox < hi[2]; ++ox)
                                    s0 = et_mla_(s0, y0[ox], (float)et_q8_at_(x, i + (size_t)(ox * s[2])));
                            total[0] += s0;
                            total[1] += s1;
                            total[2] += s2;
                            total[3] += s3;
                        }
                }
                for (r = 0; r < rows; ++r)
                    dW[((size_t)(m - first + r) * (size_t)Cg + (size_t)c) * (size_t)k_size + (size_t)t] = x_scale * total[r];
            }
        }
}

/* Positions per piece of et_conv_grad_x_q8_f32: its scratch holds them for every output channel. */
#define ET_QCONV_GRAD_PIECE 16

/* dX[n, c, o] = the sum over m, in order, from 0, of (float)W[m, c] *
 * (dY[n, m, o] * w_scale[m]): a pointwise convolution's input gradient
 * (no groups, C <= M) from its int8 weights, W dequantized one scale at a
 * time rather than as a float copy of it.  dX may take over dY's bytes:
 * the positions of a piece are copied to `scratch` (M * ET_QCONV_GRAD_PIECE
 * floats, scaled there) before any of their dX is written, and dX's
 * element lies at or before the dY elements of its position that the
 * sample's later pieces still need. */
static inline void et_conv_grad_x_q8_f32(int N, int C, int M, int plane, const float *dY, const int8_t *W,
                                         const float *w_scale, int w_channels, float *dX, float *scratch)
{
    int n, c, m, o, o0, len;
    for (n = 0; n < N; ++n)
        for (o0 = 0; o0 < plane; o0 += len) {
            const float *dy = dY + (size_t)n * (size_t)M * (size_t)plane + (size_t)o0;
            float *dx = dX + (size_t)n * (size_t)C * (size_t)plane + (size_t)o0;
            len = plane - o0 < ET_QCONV_GRAD_PIECE ? plane - o0 : ET_QCONV_GRAD_PIECE;
            for (m = 0; m < M; ++m) {
                const float scale = w_scale[w_channels > 1 ? m : 0];
                for (o = 0; o < len; ++o)
                    scratch[m * len + o] = dy[(size_t)m * (size_t)plane + (size_t)o] * scale;
            }
            for (c = 0; c < C; ++c) {
                float *dxc = dx + (size_t)c * (size_t)plane;
                for (o = 0; o + 8 <= len; o += 8) {  /* eight positions' sums in registers (p<l>) */
#define ET_SUMS_(l) float p##l = 0.0f;
#define ET_ADD_(l) p##l = et_mla_(p##l, w, y[l]);
#define ET_STORE_(l) dxc[o + l] = p##l;
                    ET_EACH8_(ET_SUMS_)
                    for (m = 0; m < M; ++m) {
                        const float w = (float)W[(size_t)m * (size_t)C + (size_t)c], *y = scratch + m * len + o;
                        ET_EACH8_(ET_ADD_)
                    }
                    ET_EACH8_(ET_STORE_)
#undef ET_SUMS_
#undef ET_ADD_
#undef ET_STORE_
                }
                for (; o < len; ++o) {
                    float sum = 0.0f;
                    for (m = 0; m < M; ++m)
                        sum = et_mla_(sum, (float)W[(size_t)m * (size_t)C + (size_t)c], scratch[m * len + o]);
                    dxc[o] = sum;
                }
            }
        }
}

#endif /* ET_QCONV_H */
