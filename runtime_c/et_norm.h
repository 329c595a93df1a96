/* edgetrain runtime: BatchNormalization (inference form, and training form
 * with PyTorch's running statistics), InstanceNormalization and
 * LayerNormalization, with their gradients.
 *
 * Tensors are ONNX's [N, C, spatial...], seen as [N, C, inner]: channel c
 * of batch item n is the contiguous block X + (n * C + c) * inner.  A
 * BatchNormalization channel is N such blocks, C * inner apart; an
 * InstanceNormalization group is one block.  The helpers below work on
 * "blocks blocks of inner values, stride apart" so both share them.
 * Outputs must not overlap inputs. */
#ifndef ET_NORM_H
#define ET_NORM_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_LINALG_H
#include "et_linalg.h"
#endif

/* Every sum over a group is a long sum (et_linalg.h), each block a run.
 * lane[j % ET_LANES] = the sum of (x[j] - m)^2 over j < n, from 0: one piece. */
static inline void et_norm_lanes_sq_f32_(int n, const float *restrict x, float m, float *restrict lane)
{
    int blocks = n / ET_LANES, i, l;
    float d;
    for (l = 0; l < ET_LANES; ++l)
        lane[l] = 0.0f;
    for (i = 0; i < blocks; ++i)
        for (l = 0; l < ET_LANES; ++l) {
            d = x[i * ET_LANES + l] - m;
            lane[l] += d * d;
        }
    for (i = blocks * ET_LANES; i < n; ++i) {
        d = x[i] - m;
        lane[i % ET_LANES] += d * d;
    }
}

/* The same for the sums of dy[j] (into s) and dy[j] * (x[j] - m) (into sx). */
static inline void et_norm_lanes_grad_f32_(int n, const float *restrict dy, const float *restrict x, float m,
                                           float *restrict s, float *restrict sx)
{
    int blocks = n / ET_LANES, i, l;
    for (l = 0; l < ET_LANES; ++l)
        s[l] = sx[l] = 0.0f;
    for (i = 0; i < blocks; ++i)
        for (l = 0; l < ET_LANES; ++l) {
            s[l] += dy[i * ET_LANES + l];
            sx[l] += dy[i * ET_LANES + l] * (x[i * ET_LANES + l] - m);
        }
    for (i = blocks * ET_LANES; i < n; ++i) {
        s[i % ET_LANES] += dy[i];
        sx[i % ET_LANES] += dy[i] * (x[i] - m);
    }
}

/* Mean and biased variance.  Two passes: summing squared deviations from
 * the mean avoids the cancellation of E[x^2] - E[x]^2 when |mean| >> std. */
static inline void et_norm_moments_f32(int blocks, int inner, int stride, const float *X,
                                       float *mean, float *var)
{
    int b, i;
    float count = (float)blocks * (float)inner, m, lane[ET_LANES];
    et_sum_ sum;
    et_sum_start_(&sum);
    for (b = 0; b < blocks; ++b)
        et_sum_run_f32_(&sum, inner, X + (size_t)b * (size_t)stride);
    m = et_sum_total_(&sum) / count;
    et_sum_start_(&sum);
    for (b = 0; b < blocks; ++b)
        for (i = 0; i < inner; i += ET_SUM_PIECE) {
            et_norm_lanes_sq_f32_(inner - i < ET_SUM_PIECE ? inner - i : ET_SUM_PIECE,
                                  X + (size_t)b * (size_t)stride + (size_t)i, m, lane);
            et_sum_piece_(&sum, lane);
        }
    *mean = m;
    *var = et_sum_total_(&sum) / count;
}

/* *s = the sum of dY and *sx = that of dY * (X - mean) over one group. */
static inline void et_norm_grad_sums_f32_(int blocks, int inner, int stride, const float *dY, const float *X,
                                          float mean, float *s, float *sx)
{
    int b, i;
    float lane_s[ET_LANES], lane_sx[ET_LANES];
    et_sum_ sum_s, sum_sx;
    et_sum_start_(&sum_s);
    et_sum_start_(&sum_sx);
    for (b = 0; b < blocks; ++b)
        for (i = 0; i < inner; i += ET_SUM_PIECE) {
            size_t at = (size_t)b * (size_t)stride + (size_t)i;
            et_norm_lanes_grad_f32_(inner - i < ET_SUM_PIECE ? inner - i : ET_SUM_PIECE, dY + at, X + at, mean,
                                    lane_s, lane_sx);
            et_sum_piece_(&sum_s, lane_s);
            et_sum_piece_(&sum_sx, lane_sx);
        }
    *s = et_sum_total_(&sum_s);
    *sx = et_sum_total_(&sum_sx);
}

/* Y = (X - mean) * a + b over one group (a = scale / sqrt(var + eps)). */
static inline void et_norm_apply_f32(int blocks, int inner, int stride, const float *X, float mean,
                                     float a, float b, float *Y)
{
    int k, i;
    size_t at;
    for (k = 0; k < blocks; ++k)
        for (i = 0; i < inner; ++i) {
            at = (size_t)k * (size_t)stride + (size_t)i;
            Y[at] = (X[at] - mean) * a + b;
        }
}

/* Backward through normalization with the group's own statistics (PyTorch's
 * batch_norm backward): with xmu = X - mean, M values in the group,
 *   dX = (dY - sum(dY) / M - xmu * sum(dY * xmu) * inv_std^2 / M) * scale * inv_std.
 * Returns sum(dY) and sum(dY * xmu) for dB and dscale. */
static inline void et_norm_group_grad_f32(int blocks, int inner, int stride, const float *dY,
                                          const float *X, float mean, float inv_std, float scale,
                                          float *dX, float *sum_dy, float *sum_dy_xmu)
{
    int k, i;
    size_t at;
    float count = (float)blocks * (float)inner, s, sx, mean_dy, proj, a;
    et_norm_grad_sums_f32_(blocks, inner, stride, dY, X, mean, &s, &sx);
    mean_dy = s / count;
    proj = sx * inv_std * inv_std / count;
    a = scale * inv_std;
    for (k = 0; k < blocks; ++k)
        for (i = 0; i < inner; ++i) {
            at = (size_t)k * (size_t)stride + (size_t)i;
            dX[at] = (dY[at] - mean_dy - (X[at] - mean) * proj) * a;
        }
    *sum_dy = s;
    *sum_dy_xmu = sx;
}

/* Inference form: normalizes with the given (running or constant) statistics. */
static ET_NOINLINE void et_batchnorm_f32(int n, int c, int inner, float epsilon, const float *X,
                                    const float *scale, const float *B, const float *mean,
                                    const float *var, float *Y)
{
    int ch;
    for (ch = 0; ch < c; ++ch)
        et_norm_apply_f32(n, inner, c * inner, X + (size_t)ch * (size_t)inner, mean[ch],
                          scale[ch] / sqrtf(var[ch] + epsilon), B[ch], Y + (size_t)ch * (size_t)inner);
}

/* Training form: normalizes with the batch statistics (biased variance) and,
 * when running_mean/running_var are given, writes their new values as
 * PyTorch updates them: running = momentum * running + (1 - momentum) * batch,
 * with the unbiased batch variance for running_var (momentum is ONNX's, i.e.
 * 1 - PyTorch's; the compiler guarantees more than one value per channel).
 * NULL running inputs/outputs: statistics not tracked.  saved_mean and
 * saved_inv_std = 1 / sqrt(var + eps) are kept for the gradient (NULL:
 * no gradient follows). */
static ET_NOINLINE void et_batchnorm_train_f32(int n, int c, int inner, float epsilon, float momentum,
                                          const float *X, const float *scale, const float *B,
                                          const float *running_mean, const float *running_var,
                                          float *Y, float *running_mean_out, float *running_var_out,
                                          float *saved_mean, float *saved_inv_std)
{
    int ch;
    float mean, var, inv_std, count = (float)n * (float)inner;
    for (ch = 0; ch < c; ++ch) {
        et_norm_moments_f32(n, inner, c * inner, X + (size_t)ch * (size_t)inner, &mean, &var);
        inv_std = 1.0f / sqrtf(var + epsilon);
        et_norm_apply_f32(n, inner, c * inner, X + (size_t)ch * (size_t)inner, mean, scale[ch] * inv_std,
                          B[ch], Y + (size_t)ch * (size_t)inner);
        if (saved_mean) {
            saved_mean[ch] = mean;
            saved_inv_std[ch] = inv_std;
        }
        if (running_mean_out) {
            running_mean_out[ch] = momentum * running_mean[ch] + (1.0f - momentum) * mean;
            running_var_out[ch] = momentum * running_var[ch] + (1.0f - momentum) * (var * count / (count - 1.0f));
        }
    }
}

/* Gradient of the training form: flows through the batch statistics. */
static ET_NOINLINE void et_batchnorm_grad_f32(int n, int c, int inner, const float *dY, const float *X,
                                         const float *scale, const float *saved_mean,
                                         const float *saved_inv_std, float *dX, float *dscale, float *dB)
{
    int ch;
    float sum_dy, sum_dy_xmu;
    size_t at;
    for (ch = 0; ch < c; ++ch) {
        at = (size_t)ch * (size_t)inner;
        et_norm_group_grad_f32(n, inner, c * inner, dY + at, X + at, saved_mean[ch], saved_inv_std[ch],
                               scale[ch], dX + at, &sum_dy, &sum_dy_xmu);
        dB[ch] = sum_dy;
        dscale[ch] = sum_dy_xmu * saved_inv_std[ch];
    }
}

/* Gradient of the inference form: the statistics are constants, so
 * dX = dY * scale / sqrt(var + eps). */
static ET_NOINLINE void et_batchnorm_inference_grad_f32(int n, int c, int inner, float epsilon, const float *dY,
                                                   const float *X, const float *scale, const float *mean,
                                                   const float *var, float *dX, float *dscale, float *dB)
{
    int ch, k, i, j, len;
    size_t at;
    float inv_std, a, s, sx, lane_s[ET_LANES], lane_sx[ET_LANES];
    et_sum_ sum_s, sum_sx;
    for (ch = 0; ch < c; ++ch) {
        inv_std = 1.0f / sqrtf(var[ch] + epsilon);
        a = scale[ch] * inv_std;
        et_sum_start_(&sum_s);
        et_sum_start_(&sum_sx);
        for (k = 0; k < n; ++k)
            for (i = 0; i < inner; i += ET_SUM_PIECE) {  /* a piece's sums, and its dX while dY is at hand */
                at = ((size_t)k * (size_t)c + (size_t)ch) * (size_t)inner + (size_t)i;
                len = inner - i < ET_SUM_PIECE ? inner - i : ET_SUM_PIECE;
                et_norm_lanes_grad_f32_(len, dY + at, X + at, mean[ch], lane_s, lane_sx);
                et_sum_piece_(&sum_s, lane_s);
                et_sum_piece_(&sum_sx, lane_sx);
                for (j = 0; j < len; ++j)
                    dX[at + (size_t)j] = dY[at + (size_t)j] * a;
            }
        s = et_sum_total_(&sum_s);
        sx = et_sum_total_(&sum_sx);
        dB[ch] = s;
        dscale[ch] = sx * inv_std;
    }
}

/* Each (n, c) block normalized with its own statistics (biased variance). */
static inline void et_instancenorm_f32(int n, int c, int inner, float epsilon, const float *X,
                                       const float *scale, const float *B, float *Y)
{
    int k, ch;
    size_t at;
    float mean, var;
    for (k = 0; k < n; ++k)
        for (ch = 0; ch < c; ++ch) {
            at = ((size_t)k * (size_t)c + (size_t)ch) * (size_t)inner;
            et_norm_moments_f32(1, inner, inner, X + at, &mean, &var);
            et_norm_apply_f32(1, inner, inner, X + at, mean, scale[ch] / sqrtf(var + epsilon), B[ch], Y + at);
        }
}

/* Recomputes each block's statistics rather than keeping N * C of them
 * alive from the forward pass: one extra read of X, less arena. */
static inline void et_instancenorm_grad_f32(int n, int c, int inner, float epsilon, const float *dY,
                                            const float *X, const float *scale, float *dX, float *dscale,
                                            float *dB)
{
    int k, ch;
    size_t at;
    float mean, var, inv_std, sum_dy, sum_dy_xmu;
    for (ch = 0; ch < c; ++ch) {
        dscale[ch] = 0.0f;
        dB[ch] = 0.0f;
    }
    for (k = 0; k < n; ++k)
        for (ch = 0; ch < c; ++ch) {
            at = ((size_t)k * (size_t)c + (size_t)ch) * (size_t)inner;
            et_norm_moments_f32(1, inner, inner, X + at, &mean, &var);
            inv_std = 1.0f / sqrtf(var + epsilon);
            et_norm_group_grad_f32(1, inner, inner, dY + at, X + at, mean, inv_std, scale[ch], dX + at,
                                   &sum_dy, &sum_dy_xmu);
            dB[ch] += sum_dy;
            dscale[ch] += sum_dy_xmu * inv_std;
        }
}

/* LayerNormalization over rows of `inner` values (the axes from ONNX's axis
 * on), each with its own statistics; scale and B hold one value per row
 * position (B may be NULL).  Mean and InvStd, when not NULL, receive each
 * row's mean and 1 / sqrt(var + eps). */
static inline void et_layernorm_f32(int outer, int inner, float epsilon, const float *X,
                                    const float *scale, const float *B, float *Y, float *Mean,
                                    float *InvStd)
{
    int r, i;
    size_t at;
    float mean, var, inv_std;
    for (r = 0; r < outer; ++r) {
        at = (size_t)r * (size_t)inner;
        et_norm_moments_f32(1, inner, inner, X + at, &mean, &var);
        inv_std = 1.0f / sqrtf(var + epsilon);
        for (i = 0; i < inner; ++i)
            Y[at + (size_t)i] = (X[at + (size_t)i] - mean) * inv_std * scale[i] + (B ? B[i] : 0.0f);
        if (Mean)
            Mean[r] = mean;
        if (InvStd)
            InvStd[r] = inv_std;
    }
}

/* Recomputes each row's statistics (one extra read of X instead of keeping
 * them alive).  With xhat = (X - mean) * inv_std, g = dY * scale and M values
 * per row:
 *   dX = inv_std * (g - sum(g) / M - xhat * sum(g * xhat) / M)
 *        + dMean / M - dInvStd * inv_std^2 * xhat / M,
 * the last two terms from the gradients reaching the Mean and InvStdDev
 * outputs (NULL when the loss does not use them); d inv_std / dX follows from
 * var's derivative 2 (X - mean) / M.  dscale and dB sum dY * xhat and dY. */
static inline void et_layernorm_grad_f32(int outer, int inner, float epsilon, const float *dY,
                                         const float *X, const float *scale, const float *dMean,
                                         const float *dInvStd, float *dX, float *dscale, float *dB)
{
    int r, i;
    size_t at;
    float mean, var, inv_std, xhat, sum_g, sum_gx, count = (float)inner, extra_mean, extra_inv;
    for (i = 0; i < inner; ++i) {
        dscale[i] = 0.0f;
        dB[i] = 0.0f;
    }
    for (r = 0; r < outer; ++r) {
        at = (size_t)r * (size_t)inner;
        et_norm_moments_f32(1, inner, inner, X + at, &mean, &var);
        inv_std = 1.0f / sqrtf(var + epsilon);
        sum_g = 0.0f;
        sum_gx = 0.0f;
        for (i = 0; i < inner; ++i) {
            xhat = (X[at + (size_t)i] - mean) * inv_std;
            sum_g += dY[at + (size_t)i] * scale[i];
            sum_gx += dY[at + (size_t)i] * scale[i] * xhat;
            dscale[i] += dY[at + (size_t)i] * xhat;
            dB[i] += dY[at + (size_t)i];
        }
        extra_mean = dMean ? dMean[r] / count : 0.0f;
        extra_inv = dInvStd ? dInvStd[r] * inv_std * inv_std / count : 0.0f;
        for (i = 0; i < inner; ++i) {
            xhat = (X[at + (size_t)i] - mean) * inv_std;
            dX[at + (size_t)i] = inv_std * (dY[at + (size_t)i] * scale[i] - sum_g / count - xhat * sum_gx / count)
                                 + extra_mean - extra_inv * xhat;
        }
    }
}

#endif /* ET_NORM_H */
