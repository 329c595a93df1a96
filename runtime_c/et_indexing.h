/* edgetrain runtime: ops that select elements (Slice, Tile, Gather, Trilu,
 * Where, Max, Min) and their gradients.
 *
 * Shapes arrive as a rank and an extent array (rank >= 1: scalars come as
 * one-element vectors); "strides" are element strides of an operand read
 * in the output's shape, 0 on broadcast axes.  Outputs must not overlap
 * inputs unless a function says otherwise.  Scatter-adds run in a fixed
 * order, so gradients are the same on every target. */
#ifndef ET_INDEXING_H
#define ET_INDEXING_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

/* Slice's forward pass is a strided read, et_expand_f32 from the first
 * selected element; its gradient writes dY back through the same strides
 * (negative for negative steps) into a dX that the caller zeroed.  Slice
 * never selects an element twice, so plain stores suffice. */
static inline void et_slice_grad_f32(int rank, const int *shape, const float *dY, float *dX,
                                     const int *x_strides)
{
    int n = et_numel_(rank, shape), i, o, inner, sx, xo = 0, unused = 0;
    int idx[ET_MAX_RANK] = {0};
    if (n == 0)
        return;
    inner = shape[rank - 1];
    sx = x_strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i)
            dX[xo + i * sx] = dY[o + i];
        et_bcast_next_(rank, shape, idx, x_strides, &xo, x_strides, &unused);
    }
}

/* ONNX Tile: output extent d is in_shape[d] * repeats[d].  Each output row
 * is the matching input row copied repeats[rank - 1] times.  Float and
 * int32_t tensors share it, as they share et_expand_b32_: it moves 4-byte
 * elements as bytes. */
static inline void et_tile_b32_(int rank, const int *in_shape, const int *repeats, const void *X, void *Y)
{
    const unsigned char *x = (const unsigned char *)X;
    unsigned char *y = (unsigned char *)Y;
    int in_strides[ET_MAX_RANK] = {0}, idx[ET_MAX_RANK] = {0};
    int d, n = 1, s = 1, o, r, xo, row, block;
    for (d = rank - 1; d >= 0; --d) {
        in_strides[d] = s;
        s *= in_shape[d];
        n *= in_shape[d] * repeats[d];
    }
    row = in_shape[rank - 1];
    block = row * repeats[rank - 1];
    if (n == 0)
        return;
    for (o = 0; o < n; o += block) {
        xo = 0;
        for (d = 0; d < rank - 1; ++d)
            xo += (idx[d] % in_shape[d]) * in_strides[d];
        for (r = 0; r < repeats[rank - 1]; ++r)
            memcpy(y + (size_t)(o + r * row) * 4u, x + (size_t)xo * 4u, (size_t)row * 4u);
        for (d = rank - 2; d >= 0; --d) {
            if (++idx[d] < in_shape[d] * repeats[d])
                break;
            idx[d] = 0;
        }
    }
}

static inline void et_tile_f32(int rank, const int *in_shape, const int *repeats, const float *X, float *Y)
{
    et_tile_b32_(rank, in_shape, repeats, X, Y);
}

static inline void et_tile_i32(int rank, const int *in_shape, const int *repeats, const int32_t *X, int32_t *Y)
{
    et_tile_b32_(rank, in_shape, repeats, X, Y);
}

/* Token indices come from user data at run time, so they are validated
 * before any kernel uses them: each must lie in [-axis_dim, axis_dim). */
static inline int et_check_indices(int n, const int32_t *indices, int axis_dim)
{
    int i;
    for (i = 0; i < n; ++i)
        if (indices[i] < -axis_dim || indices[i] >= axis_dim)
            return ET_BAD_ARGUMENT;
    return ET_OK;
}

/* Gather's indices come as compile-time constants (int) or as a model input
 * (int32_t, which is not int on every target): exactly one of the two
 * pointers is given.  Negative indices count from the end, as in ONNX. */
static inline int et_gather_index_(const int *const_indices, const int32_t *indices, int j,
                                   int axis_dim)
{
    int k = const_indices ? const_indices[j] : (int)indices[j];
    return k < 0 ? k + axis_dim : k;
}

/* ONNX Gather with X viewed as [outer, axis_dim, inner] and Y as
 * [outer, n_indices, inner], for float and int32_t tensors (et_integer.h)
 * alike: rows of 4-byte elements move as bytes.  An index out of range,
 * which the callers rule out beforehand, gives a row of zeros, so a missed
 * check cannot read out of bounds. */
static inline void et_gather_b32_(int outer, int axis_dim, int inner, int n_indices,
                                  const int *const_indices, const int32_t *indices, const void *X,
                                  void *Y)
{
    const unsigned char *x = (const unsigned char *)X;
    unsigned char *dst;
    size_t row = (size_t)inner * 4u;
    int o, j, k;
    for (o = 0; o < outer; ++o)
        for (j = 0; j < n_indices; ++j) {
            k = et_gather_index_(const_indices, indices, j, axis_dim);
            dst = (unsigned char *)Y + ((size_t)o * (size_t)n_indices + (size_t)j) * row;
            if (k < 0 || k >= axis_dim)
                memset(dst, 0, row);
            else
                memcpy(dst, x + ((size_t)o * (size_t)axis_dim + (size_t)k) * row, row);
        }
}

static inline void et_gather_f32(int outer, int axis_dim, int inner, int n_indices,
                                 const int *const_indices, const int32_t *indices, const float *X,
                                 float *Y)
{
    et_gather_b32_(outer, axis_dim, inner, n_indices, const_indices, indices, X, Y);
}

static inline void et_gather_i32(int outer, int axis_dim, int inner, int n_indices,
                                 const int *const_indices, const int32_t *indices, const int32_t *X,
                                 int32_t *Y)
{
    et_gather_b32_(outer, axis_dim, inner, n_indices, const_indices, indices, X, Y);
}

/* Scatter-add of dY back to the gathered rows.  A repeated index sums its
 * rows in index order, so the result is the same on every target; an index
 * out of range adds nothing, and so does the index `skip` (an embedding's
 * padding row, whose gradient PyTorch leaves at zero; -1 for none). */
static inline void et_gather_grad_f32(int outer, int axis_dim, int inner, int n_indices,
                                      const int *const_indices, const int32_t *indices, int skip,
                                      const float *dY, float *dX)
{
    int o, j, k, i;
    float *dst;
    const float *src;
    for (i = 0; i < outer * axis_dim * inner; ++i)
        dX[i] = 0.0f;
    for (o = 0; o < outer; ++o)
        for (j = 0; j < n_indices; ++j) {
            k = et_gather_index_(const_indices, indices, j, axis_dim);
            if (k < 0 || k >= axis_dim || k == skip)
                continue;
            dst = dX + ((size_t)o * (size_t)axis_dim + (size_t)k) * (size_t)inner;
            src = dY + ((size_t)o * (size_t)n_indices + (size_t)j) * (size_t)inner;
            for (i = 0; i < inner; ++i)
                dst[i] += src[i];
        }
}

/* ONNX Trilu over `batch` matrices of rows x cols: keeps the elements with
 * col - row >= k (upper) or col - row <= k (lower) and zeroes the others. */
static inline void et_trilu_f32(int batch, int rows, int cols, int k, int upper, const float *X,
                                float *Y)
{
    int b, r, c;
    size_t at = 0;
    for (b = 0; b < batch; ++b)
        for (r = 0; r < rows; ++r)
            for (c = 0; c < cols; ++c, ++at)
                Y[at] = (upper ? c - r >= k : c - r <= k) ? X[at] : 0.0f;
}

/* ONNX Where with three broadcast operands, for float and int32_t tensors
 * (et_integer.h) alike.  The condition is bool, an int32_t 0 or 1 like
 * every bool tensor. */
#define ET_DEFINE_WHERE_(name, T)                                              \
    static inline void name(int rank, const int *shape, const int32_t *Cond,  \
                            const int *c_strides, const T *X,                 \
                            const int *x_strides, const T *Y,                 \
                            const int *y_strides, T *Out)                     \
    {                                                                          \
        int n = et_numel_(rank, shape), i, o, d, inner, co, xo, yo;            \
        int idx[ET_MAX_RANK] = {0};                                            \
        if (n == 0)                                                            \
            return;                                                            \
        inner = shape[rank - 1];                                               \
        for (o = 0; o < n; o += inner) {                                       \
            for (d = 0, co = xo = yo = 0; d < rank - 1; ++d) {                 \
                co += idx[d] * c_strides[d];                                   \
                xo += idx[d] * x_strides[d];                                   \
                yo += idx[d] * y_strides[d];                                   \
            }                                                                  \
            for (i = 0; i < inner; ++i)                                        \
                Out[o + i] = Cond[co + i * c_strides[rank - 1]]                \
                                 ? X[xo + i * x_strides[rank - 1]]             \
                                 : Y[yo + i * y_strides[rank - 1]];            \
            for (d = rank - 2; d >= 0; --d) {                                  \
                if (++idx[d] < shape[d])                                       \
                    break;                                                     \
                idx[d] = 0;                                                    \
            }                                                                  \
        }                                                                      \
    }

ET_DEFINE_WHERE_(et_where_f32, float)
ET_DEFINE_WHERE_(et_where_i32, int32_t)
#undef ET_DEFINE_WHERE_

/* Elementwise max / min of two broadcast operands; NaN in either operand
 * gives NaN, as torch.maximum does.  Y may alias A when A is contiguous
 * and full-size (each element is read before it is written), which is how
 * variadic Max folds its inputs into the output. */
#define ET_DEFINE_SELECT_(name, CMP) ET_DEFINE_BROADCAST_(name, float, float, (a CMP b || a != a) ? a : b)

ET_DEFINE_SELECT_(et_max_f32, >)
ET_DEFINE_SELECT_(et_min_f32, <)

#undef ET_DEFINE_SELECT_

/* Max/Min gradient, in two passes over the output's shape: first Count
 * (zeroed by the caller) gains 1 for every input equal to the result Y,
 * then each input's dX = dY / Count where it equals Y, else 0.  Ties so
 * share dY equally, which for two inputs is torch.maximum's 1/2 each. */
static inline void et_count_equal_f32(int rank, const int *shape, const float *X,
                                      const int *x_strides, const float *Y, float *Count)
{
    int n = et_numel_(rank, shape), i, o, inner, sx, xo = 0, unused = 0;
    int idx[ET_MAX_RANK] = {0};
    if (n == 0)
        return;
    inner = shape[rank - 1];
    sx = x_strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i)
            if (X[xo + i * sx] == Y[o + i])
                Count[o + i] += 1.0f;
        et_bcast_next_(rank, shape, idx, x_strides, &xo, x_strides, &unused);
    }
}

/* dX holds the counts on entry and the gradient on return. */
static inline void et_minmax_grad_f32(int rank, const int *shape, const float *dY, const float *Y,
                                      const float *X, const int *x_strides, float *dX)
{
    int n = et_numel_(rank, shape), i, o, inner, sx, xo = 0, unused = 0;
    int idx[ET_MAX_RANK] = {0};
    if (n == 0)
        return;
    inner = shape[rank - 1];
    sx = x_strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i)
            dX[o + i] = X[xo + i * sx] == Y[o + i] ? dY[o + i] / dX[o + i] : 0.0f;
        et_bcast_next_(rank, shape, idx, x_strides, &xo, x_strides, &unused);
    }
}

#endif /* ET_INDEXING_H */
