/* edgetrain runtime: data movement (Transpose, Concat/Split/Slice blocks)
 * and ReduceSum/ReduceMean.  Outputs must not overlap inputs. */
#ifndef ET_SHAPE_H
#define ET_SHAPE_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif
#ifndef ET_LINALG_H
#include "et_linalg.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif

/* ONNX Transpose: output axis d is input axis perm[d].  Walks the output
 * in order so writes are sequential; rank <= ET_MAX_RANK (0: a scalar). */
static inline void et_transpose_f32(int rank, const int *in_shape, const int *perm,
                                    const float *X, float *Y)
{
    int in_strides[ET_MAX_RANK] = {0}, shape[ET_MAX_RANK] = {0};
    int strides[ET_MAX_RANK] = {0}, idx[ET_MAX_RANK] = {0};
    int d, n = 1, o, i, inner, s, xo = 0;
    if (rank < 1) {
        Y[0] = X[0];
        return;
    }
    for (d = rank - 1; d >= 0; --d) {
        in_strides[d] = n;
        n *= in_shape[d];
    }
    if (n == 0)
        return;
    for (d = 0; d < rank; ++d) {
        shape[d] = in_shape[perm[d]];
        strides[d] = in_strides[perm[d]];
    }
    inner = shape[rank - 1];
    s = strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i)
            Y[o + i] = X[xo + i * s];
        for (d = rank - 2; d >= 0; --d) {
            xo += strides[d];
            if (++idx[d] < shape[d])
                break;
            xo -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
}

static ET_NOINLINE void et_copy_block_f32(int outer, int inner, const float *X, int x_stride,
                                          float *Y, int y_stride)
{
    int o;
    if (inner <= 0)
        return;
    for (o = 0; o < outer; ++o)
        memcpy(Y + (size_t)o * (size_t)y_stride, X + (size_t)o * (size_t)x_stride,
               (size_t)inner * sizeof(float));
}

/* et_copy_block_f32 for elements of any type, `size` bytes each (strides and
 * widths in elements): a row band's rows out of a tensor's planes, or back. */
static ET_NOINLINE void et_copy_rows(int outer, int inner, int size, const void *X, int x_stride, void *Y,
                                     int y_stride)
{
    const unsigned char *x = (const unsigned char *)X;
    unsigned char *y = (unsigned char *)Y;
    size_t row = (size_t)inner * (size_t)size;
    int o;
    if (inner <= 0)
        return;
    for (o = 0; o < outer; ++o)
        memcpy(y + (size_t)o * (size_t)y_stride * (size_t)size, x + (size_t)o * (size_t)x_stride * (size_t)size,
               row);
}

/* Bits [first, first + bits) of each of `planes` runs of plane_bits bits
 * of mask X (bit j: bit j % 32 of word j / 32), one run after another in
 * Y, the rest of its last word 0: the part of a gradient's bit mask that a
 * band of rows reads. */
static ET_NOINLINE void et_mask_rows(int planes, int plane_bits, int first, int bits, const uint32_t *X, uint32_t *Y)
{
    size_t p, i, to = 0;
    memset(Y, 0, ((size_t)planes * (size_t)bits + 31) / 32 * sizeof *Y);
    for (p = 0; p < (size_t)planes; ++p)
        for (i = 0; i < (size_t)bits; ++i, ++to) {
            size_t from = p * (size_t)plane_bits + (size_t)first + i;
            Y[to / 32] |= ((X[from / 32] >> (from % 32)) & 1u) << (to % 32);
        }
}

/* Whether X, read in memory order, is [outer][Y's elements][inner] with the
 * outer and inner axes summed (a bias gradient: N and the spatial axes of
 * NCHW), and the sizes of the three. */
static inline int et_reduce_blocks_(int rank, const int *in_shape, const int *out_strides, int *outer, int *mid,
                                    int *inner)
{
    int d;
    *outer = *mid = *inner = 1;
    for (d = rank - 1; d >= 0; --d) {
        if (in_shape[d] == 1)
            continue;
        if (out_strides[d] == 0 && *mid == 1)
            *inner *= in_shape[d];
        else if (out_strides[d] == *mid && *outer == 1)
            *mid *= in_shape[d];
        else if (out_strides[d] == 0)
            *outer *= in_shape[d];
        else
            return 0;
    }
    return 1;
}

/* Whether X, read in memory order, is [a][r][b] with the r axes summed and
 * Y [a][b] (a bias gradient over a kept last axis, a middle axis summed). */
static inline int et_reduce_columns_(int rank, const int *in_shape, const int *out_strides, int *a, int *r, int *b)
{
    int d, phase = 0;  /* in b, r, a */
    *a = *r = *b = 1;
    for (d = rank - 1; d >= 0; --d) {
        if (in_shape[d] == 1)
            continue;
        if (out_strides[d] != 0 && phase == 0)
            *b *= in_shape[d];
        else if (out_strides[d] == 0 && phase < 2) {
            phase = 1;
            *r *= in_shape[d];
        } else if (out_strides[d] != 0) {
            phase = 2;
            *a *= in_shape[d];
        } else
            return 0;
    }
    return 1;
}

/* Columns summed side by side in et_reduce_sum_f32: a cascade of that many
 * floats per level (2 KB) on the stack. */
#define ET_REDUCE_COLUMNS 32

/* Sums in a fixed order, the mean's 1/count applied once at the end, after
 * summing, as PyTorch does.  Contiguous runs (a plane of a bias gradient)
 * make each output a long sum (et_linalg.h); rows summed column by column
 * take pieces of ET_SUM_PIECE rows, each column in order from 0, and
 * the pieces meet in a cascade (et_cascade_push_); other patterns add in
 * memory order. */
static inline void et_reduce_sum_f32(int rank, const int *in_shape, const int *out_strides,
                                     float scale, const float *X, float *Y, int y_size)
{
    int idx[ET_MAX_RANK] = {0};
    int d, n = 1, o, i, inner, s, yo = 0, outer, mid, c, r, j, a, rows, cols, width;
    for (d = 0; d < rank; ++d)
        n *= in_shape[d];
    if (n > 0 && et_reduce_blocks_(rank, in_shape, out_strides, &outer, &mid, &inner) && inner > 1)
        for (c = 0; c < mid; ++c) {
            et_sum_ sum;
            et_sum_start_(&sum);
            for (o = 0; o < outer; ++o)
                et_sum_run_f32_(&sum, inner, X + ((size_t)o * (size_t)mid + (size_t)c) * (size_t)inner);
            Y[c] = et_sum_total_(&sum);
        }
    else if (n > 0 && et_reduce_columns_(rank, in_shape, out_strides, &a, &rows, &cols))
        for (o = 0; o < a; ++o)
            for (c = 0; c < cols; c += width) {
                float level[ET_SUM_LEVELS * ET_REDUCE_COLUMNS], piece[ET_REDUCE_COLUMNS];
                const float *x = X + (size_t)o * (size_t)rows * (size_t)cols + (size_t)c;
                uint32_t pieces = 0;
                width = cols - c < ET_REDUCE_COLUMNS ? cols - c : ET_REDUCE_COLUMNS;
                for (r = 0; r < rows; r += ET_SUM_PIECE, ++pieces) {
                    for (j = 0; j < width; ++j)
                        piece[j] = 0.0f;
                    for (i = r; i < rows && i < r + ET_SUM_PIECE; ++i)
                        for (j = 0; j < width; ++j)
                            piece[j] += x[(size_t)i * (size_t)cols + (size_t)j];
                    et_cascade_push_(level, width, pieces, piece);
                }
                et_cascade_total_(level, width, pieces, Y + (size_t)o * (size_t)cols + (size_t)c);
            }
    else {
        for (i = 0; i < y_size; ++i)
            Y[i] = 0.0f;
        if (n > 0) {
            inner = in_shape[rank - 1];
            s = out_strides[rank - 1];
            for (o = 0; o < n; o += inner) {
                for (i = 0; i < inner; ++i)
                    Y[yo + i * s] += X[o + i];
                for (d = rank - 2; d >= 0; --d) {
                    yo += out_strides[d];
                    if (++idx[d] < in_shape[d])
                        break;
                    yo -= out_strides[d] * in_shape[d];
                    idx[d] = 0;
                }
            }
        }
    }
    for (i = 0; i < y_size; ++i)
        Y[i] *= scale;
}

/* ---- ReduceMax, ReduceMin, ReduceL2, ReduceLogSumExp and their gradients ----
 * X is seen as two strided views: the kept axes (Y's, walked in Y's order)
 * and the reduced axes (one output's group), each (rank, shape, strides)
 * in elements of X.  A group is walked in X's row-major order, which fixes
 * the order of every sum. */

/* The next offset of a view walked in row-major order from idx (all zeros
 * at the start); after the last element, back to the first. */
static inline int et_view_next_(int rank, const int *shape, const int *strides, int *idx, int off)
{
    int d;
    for (d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d])
            return off + strides[d];
        idx[d] = 0;
        off -= strides[d] * (shape[d] - 1);
    }
    return off;
}

/* Largest (sign 1) or smallest (sign -1) element; NaN wins, as in torch.amax. */
static inline void et_reduce_select_(float sign, int out_rank, const int *out_shape, const int *out_strides,
                                     int red_rank, const int *red_shape, const int *red_strides,
                                     const float *X, float *Y)
{
    int n = et_numel_(out_rank, out_shape), m = et_numel_(red_rank, red_shape), o, r, base = 0;
    int out_idx[ET_MAX_RANK] = {0};
    for (o = 0; o < n; ++o) {
        int idx[ET_MAX_RANK] = {0}, off = base;
        float best = X[base];
        for (r = 1; r < m; ++r) {
            float x;
            off = et_view_next_(red_rank, red_shape, red_strides, idx, off);
            x = X[off];
            if (sign * x > sign * best || x != x)  /* once NaN, always NaN */
                best = x;
        }
        Y[o] = best;
        base = et_view_next_(out_rank, out_shape, out_strides, out_idx, base);
    }
}

static inline void et_reduce_max_f32(int out_rank, const int *out_shape, const int *out_strides, int red_rank,
                                     const int *red_shape, const int *red_strides, const float *X, float *Y)
{
    et_reduce_select_(1.0f, out_rank, out_shape, out_strides, red_rank, red_shape, red_strides, X, Y);
}

static inline void et_reduce_min_f32(int out_rank, const int *out_shape, const int *out_strides, int red_rank,
                                     const int *red_shape, const int *red_strides, const float *X, float *Y)
{
    et_reduce_select_(-1.0f, out_rank, out_shape, out_strides, red_rank, red_shape, red_strides, X, Y);
}

/* sqrt of the sum of squares, summed in order and not rescaled: like
 * torch's float32 norm, it overflows once the squares pass 3.4e38. */
static inline void et_reduce_l2_f32(int out_rank, const int *out_shape, const int *out_strides, int red_rank,
                                    const int *red_shape, const int *red_strides, const float *X, float *Y)
{
    int n = et_numel_(out_rank, out_shape), m = et_numel_(red_rank, red_shape), o, r, base = 0;
    int out_idx[ET_MAX_RANK] = {0};
    for (o = 0; o < n; ++o) {
        int idx[ET_MAX_RANK] = {0}, off = base;
        float sum = 0.0f;
        for (r = 0; r < m; ++r) {
            sum += X[off] * X[off];
            off = et_view_next_(red_rank, red_shape, red_strides, idx, off);
        }
        Y[o] = sqrtf(sum);
        base = et_view_next_(out_rank, out_shape, out_strides, out_idx, base);
    }
}

/* log(sum(exp(x - max))) + max, as torch.logsumexp computes it: no exp
 * overflows, and an infinite max is not subtracted (inf - inf). */
static inline void et_reduce_log_sum_exp_f32(int out_rank, const int *out_shape, const int *out_strides,
                                             int red_rank, const int *red_shape, const int *red_strides,
                                             const float *X, float *Y)
{
    int n = et_numel_(out_rank, out_shape), m = et_numel_(red_rank, red_shape), o, r, base = 0;
    int out_idx[ET_MAX_RANK] = {0};
    et_reduce_max_f32(out_rank, out_shape, out_strides, red_rank, red_shape, red_strides, X, Y);
    for (o = 0; o < n; ++o) {
        int idx[ET_MAX_RANK] = {0}, off = base;
        float top = Y[o], shift = et_is_finite_f32(top) ? top : 0.0f, sum = 0.0f;
        for (r = 0; r < m; ++r) {
            sum += et_expf(X[off] - shift);
            off = et_view_next_(red_rank, red_shape, red_strides, idx, off);
        }
        Y[o] = et_logf(sum) + top;
        base = et_view_next_(out_rank, out_shape, out_strides, out_idx, base);
    }
}

/* ReduceMax / ReduceMin gradient: dY goes to the elements equal to the
 * result, split evenly among ties (torch.amax's rule), 0 elsewhere. */
static inline void et_reduce_select_grad_f32(int out_rank, const int *out_shape, const int *out_strides,
                                             int red_rank, const int *red_shape, const int *red_strides,
                                             const float *dY, const float *X, const float *Y, float *dX)
{
    int n = et_numel_(out_rank, out_shape), m = et_numel_(red_rank, red_shape), o, r, base = 0, ties, off;
    int out_idx[ET_MAX_RANK] = {0}, idx[ET_MAX_RANK] = {0};
    float share;
    for (o = 0; o < n; ++o) {
        ties = 0;
        for (r = 0, off = base; r < m; ++r) {
            ties += X[off] == Y[o];
            off = et_view_next_(red_rank, red_shape, red_strides, idx, off);
        }
        share = dY[o] / (float)(ties ? ties : 1);
        for (r = 0, off = base; r < m; ++r) {
            dX[off] = X[off] == Y[o] ? share : 0.0f;
            off = et_view_next_(red_rank, red_shape, red_strides, idx, off);
        }
        base = et_view_next_(out_rank, out_shape, out_strides, out_idx, base);
    }
}

/* x * (dY / y), and 0 where y = 0 (torch's norm gradient). */
static inline void et_reduce_l2_grad_f32(int out_rank, const int *out_shape, const int *out_strides, int red_rank,
                                         const int *red_shape, const int *red_strides, const float *dY,
                                         const float *X, const float *Y, float *dX)
{
    int n = et_numel_(out_rank, out_shape), m = et_numel_(red_rank, red_shape), o, r, base = 0, off;
    int out_idx[ET_MAX_RANK] = {0}, idx[ET_MAX_RANK] = {0};
    for (o = 0; o < n; ++o) {
        float scale = Y[o] == 0.0f ? 0.0f : dY[o] / Y[o];
        for (r = 0, off = base; r < m; ++r) {
            dX[off] = X[off] * scale;
            off = et_view_next_(red_rank, red_shape, red_strides, idx, off);
        }
        base = et_view_next_(out_rank, out_shape, out_strides, out_idx, base);
    }
}

/* dY * exp(x - y): each element's softmax weight in its group. */
static inline void et_reduce_log_sum_exp_grad_f32(int out_rank, const int *out_shape, const int *out_strides,
                                                  int red_rank, const int *red_shape, const int *red_strides,
                                                  const float *dY, const float *X, const float *Y, float *dX)
{
    int n = et_numel_(out_rank, out_shape), m = et_numel_(red_rank, red_shape), o, r, base = 0, off;
    int out_idx[ET_MAX_RANK] = {0}, idx[ET_MAX_RANK] = {0};
    for (o = 0; o < n; ++o) {
        for (r = 0, off = base; r < m; ++r) {
            dX[off] = dY[o] * et_expf(X[off] - Y[o]);
            off = et_view_next_(red_rank, red_shape, red_strides, idx, off);
        }
        base = et_view_next_(out_rank, out_shape, out_strides, out_idx, base);
    }
}

#endif /* ET_SHAPE_H */
