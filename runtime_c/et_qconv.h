/* edgetrain runtime: an int8 layer (a convolution, or a matrix product as a
 * convolution of 1 x 1 positions) as an int8 deployment runs it: int8
 * input, int8 weights, int32 accumulation, the output requantized to int8.
 *
 * It stands for DequantizeLinear -> Conv (or Gemm) -> [Relu] ->
 * QuantizeLinear of a quantized model, whose float tensors in between it
 * never stores.  The sums are exact integers, so their order does not
 * matter; the requantization is a fixed sequence of IEEE single-precision
 * operations (et_quantize.h's rounding), so every target gives the same
 * integers.  Against the float layers it replaces, only the rounding of
 * the sums differs: an output may move by one quantization step. */
#ifndef ET_QCONV_H
#define ET_QCONV_H

#ifndef ET_CONV_H
#include "et_conv.h"
#endif
#ifndef ET_QUANTIZE_H
#include "et_quantize.h"
#endif

/* patch[c * k_size + t] = X[n, g * Cg + c] at the input position that
 * output position `at` reads through tap t, minus x_zero, or 0 where the
 * tap falls in the padding (which holds a dequantized 0). */
static inline void et_qconv_patch_(int Cg, int c0, const int *in, const int *k, const int *s, const int *d,
                                   const int *p, const int *at, const void *X, size_t x_at, int x_type,
                                   int32_t x_zero, int16_t *patch)
{
    int in_size = et_conv_volume_(in), k_size = et_conv_volume_(k), c, t, a, kt[3];
    for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k)) {
        size_t offset = 0;
        int inside = 1;
        for (a = 0; a < 3; ++a) {
            int i = at[a] * s[a] + kt[a] * d[a] - p[a];
            inside &= i >= 0 && i < in[a];
            offset = offset * (size_t)in[a] + (size_t)i;
        }
        for (c = 0; c < Cg; ++c) {
            size_t j = x_at + (size_t)(c0 + c) * (size_t)in_size + offset;
            patch[c * k_size + t] = (int16_t)(inside ? et_q_get_(X, j, x_type) - x_zero : 0);
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
 * C / G * kernel volume int16. */
enum { ET_QMASK_INSIDE = 1, ET_QMASK_ACTIVE = 2 };
enum { ET_QACT_NONE = 0, ET_QACT_RELU = 1, ET_QACT_CLIP = 2 };
static inline void et_qconv_s8(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                               const int *s, const int *d, const int *p, const void *X, int x_type, float x_scale,
                               int32_t x_zero, const int8_t *W, const float *w_scale, int w_channels,
                               const float *B, int activation, float low, float high, float y_scale, int32_t y_zero,
                               int32_t qmin, int32_t qmax, void *Y, int y_type, uint32_t *mask, int masks,
                               int16_t *patch)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int taps = Cg * et_conv_volume_(k), n, g, m, o, j, at[3];
    size_t words = ((size_t)N * (size_t)M * (size_t)out_size + 31u) / 32u;
    const float inverse = 1.0f / y_scale;
    if (mask)
        memset(mask, 0, words * sizeof *mask);
    for (n = 0; n < N; ++n)
        for (g = 0; g < G; ++g)
            for (o = 0; o < out_size; ++o) {
                et_conv_position_(o, out, at);
                et_qconv_patch_(Cg, g * Cg, in, k, s, d, p, at, X, (size_t)n * (size_t)C * (size_t)in_size, x_type,
                                x_zero, patch);
                for (m = g * Mg; m < (g + 1) * Mg; ++m) {
                    const int8_t *Wm = W + (size_t)m * (size_t)taps;
                    const size_t e = ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size + (size_t)o;
                    int32_t acc = 0;
                    float v, q;
                    int active = 1;
                    for (j = 0; j < taps; ++j)
                        acc += (int32_t)patch[j] * (int32_t)Wm[j];
                    v = (float)acc * (x_scale * w_scale[w_channels > 1 ? m : 0]);
                    if (B)
                        v = v + B[m];
                    if (activation == ET_QACT_RELU) {
                        v = v > 0.0f ? v : 0.0f;
                        active = v > 0.0f;
                    } else if (activation == ET_QACT_CLIP) {
                        active = v >= low && v <= high;
                        v = v < low ? low : v;
                        v = v > high ? high : v;
                    }
                    q = et_quantized_f32_(v, y_scale, y_zero);
                    et_q_put_(Y, e, y_type, q > (float)qmin ? (q < (float)qmax ? (int32_t)q : qmax) : qmin);
                    if (mask) {
                        int pass = !(masks & ET_QMASK_ACTIVE) || active;
                        q = et_round_even_f32_(v * inverse) + (float)y_zero;
                        pass &= !(masks & ET_QMASK_INSIDE) || (q >= (float)qmin && q <= (float)qmax);
                        mask[e / 32u] |= (uint32_t)pass << (e % 32u);
                    }
                }
            }
}

/* dW[m, c, t] = x_scale * (the sum over n and output positions o, lane
 * by lane as et_dot_lanes_f32_ keeps them (position j of the run over n
 * and o in lane j % ET_LANES, from 0), then et_dot_total_f32_, of
 * dY[n, m, o] * (X - x_zero) at the input that o reads through t, 0 in the
 * padding): Conv's weight gradient (et_conv_grad_w_f32's) from the int8
 * input a quantized model keeps, never dequantized into a float tensor. */
static inline void et_conv_grad_w_q8_f32(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                         const int *s, const int *d, const int *p, const float *dY, const void *X,
                                         int x_type, float x_scale, int32_t x_zero, float *dW)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), n, m, c, o, t, a, l, j, at[3], kt[3];
    for (m = 0; m < M; ++m)
        for (c = 0; c < Cg; ++c)
            for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k)) {
                float lane[ET_LANES];
                for (l = 0; l < ET_LANES; ++l)
                    lane[l] = 0.0f;
                for (n = 0, j = 0; n < N; ++n) {
                    const float *dy = dY + ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size;
                    size_t plane = ((size_t)n * (size_t)C + (size_t)((m / Mg) * Cg + c)) * (size_t)in_size;
                    for (o = 0; o < out_size; ++o, ++j) {
                        size_t offset = 0;
                        int inside = 1;
                        et_conv_position_(o, out, at);
                        for (a = 0; a < 3; ++a) {
                            int i = at[a] * s[a] + kt[a] * d[a] - p[a];
                            inside &= i >= 0 && i < in[a];
                            offset = offset * (size_t)in[a] + (size_t)i;
                        }
                        if (inside)
                            lane[j % ET_LANES] = et_mla_(lane[j % ET_LANES], dy[o],
                                                         (float)(et_q_get_(X, plane + offset, x_type) - x_zero));
                    }
                }
                dW[((size_t)m * (size_t)Cg + (size_t)c) * (size_t)k_size + (size_t)t] = x_scale * et_dot_total_f32_(lane);
            }
}

#endif /* ET_QCONV_H */
