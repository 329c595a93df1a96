/* edgetrain runtime: integer and bool tensors (attention masks, position
 * ids, labels, dropout masks).  The C keeps every integer tensor, int32 or
 * int64 in the model, and every bool tensor (0 or 1) as int32_t; kernels
 * whose name ends in _i32 take such tensors, those ending in _f32 take
 * floats and write int32_t where the op's result is integer or bool.
 *
 * Integer arithmetic wraps modulo 2^32, computed on uint32_t so no
 * overflow is undefined behaviour.  Shapes, strides and broadcasting are
 * as in et_elementwise.h; outputs must not overlap inputs unless a
 * function says otherwise. */
#ifndef ET_INTEGER_H
#define ET_INTEGER_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

/* A uint32_t as the int32_t with the same bits, without the
 * implementation-defined conversion. */
static inline int32_t et_wrap_i32_(uint32_t u)
{
    return u <= 0x7fffffffu ? (int32_t)u : -(int32_t)(~u) - 1;
}

/* ---- moving elements: the float kernels' integer twins ----
 * Expand, Gather, Where and Pad have theirs beside the float kernel, which
 * they share (et_elementwise.h, et_indexing.h, et_resize.h). */

static inline void et_copy_i32(int n, const int32_t *X, int32_t *Y)
{
    if (n > 0 && X != Y)
        memmove(Y, X, (size_t)n * sizeof(int32_t));
}

/* Transpose: output axis d is input axis perm[d], read through strides. */
static inline void et_transpose_i32(int rank, const int *in_shape, const int *perm,
                                    const int32_t *X, int32_t *Y)
{
    int in_strides[ET_MAX_RANK] = {0}, shape[ET_MAX_RANK] = {0}, strides[ET_MAX_RANK] = {0};
    int d, step = 1;
    if (rank < 1) {  /* a scalar */
        Y[0] = X[0];
        return;
    }
    for (d = rank - 1; d >= 0; --d) {
        in_strides[d] = step;
        step *= in_shape[d];
    }
    for (d = 0; d < rank; ++d) {
        shape[d] = in_shape[perm[d]];
        strides[d] = in_strides[perm[d]];
    }
    et_expand_i32(rank, shape, X, strides, Y);
}

static inline void et_copy_block_i32(int outer, int inner, const int32_t *X, int x_stride,
                                     int32_t *Y, int y_stride)
{
    int o;
    if (inner <= 0)
        return;
    for (o = 0; o < outer; ++o)
        memcpy(Y + (size_t)o * (size_t)y_stride, X + (size_t)o * (size_t)x_stride,
               (size_t)inner * sizeof(int32_t));
}

/* ---- broadcasting binary ops with an int32_t result ---- */

/* Y = EXPR(a, b) over two broadcast operands of type T (et_elementwise.h). */
#define ET_DEFINE_BINARY_I_(name, T, EXPR) ET_DEFINE_BROADCAST_(name, T, int32_t, EXPR)

ET_DEFINE_BINARY_I_(et_add_i32, int32_t, et_wrap_i32_((uint32_t)a + (uint32_t)b))
ET_DEFINE_BINARY_I_(et_sub_i32, int32_t, et_wrap_i32_((uint32_t)a - (uint32_t)b))
ET_DEFINE_BINARY_I_(et_mul_i32, int32_t, et_wrap_i32_((uint32_t)a * (uint32_t)b))
ET_DEFINE_BINARY_I_(et_and_i32, int32_t, a && b)
ET_DEFINE_BINARY_I_(et_or_i32, int32_t, a || b)
ET_DEFINE_BINARY_I_(et_xor_i32, int32_t, !a != !b)
/* Comparisons give 0 or 1; any comparison with NaN is false, as in ONNX. */
ET_DEFINE_BINARY_I_(et_equal_i32, int32_t, a == b)
ET_DEFINE_BINARY_I_(et_less_i32, int32_t, a < b)
ET_DEFINE_BINARY_I_(et_greater_i32, int32_t, a > b)
ET_DEFINE_BINARY_I_(et_less_equal_i32, int32_t, a <= b)
ET_DEFINE_BINARY_I_(et_greater_equal_i32, int32_t, a >= b)
ET_DEFINE_BINARY_I_(et_max_i32, int32_t, a > b ? a : b)
ET_DEFINE_BINARY_I_(et_min_i32, int32_t, a < b ? a : b)
ET_DEFINE_BINARY_I_(et_equal_f32, float, a == b)
ET_DEFINE_BINARY_I_(et_less_f32, float, a < b)
ET_DEFINE_BINARY_I_(et_greater_f32, float, a > b)
ET_DEFINE_BINARY_I_(et_less_equal_f32, float, a <= b)
ET_DEFINE_BINARY_I_(et_greater_equal_f32, float, a >= b)

/* Mod: fmod=1 takes the dividend's sign (C's %), fmod=0 the divisor's
 * (Python's %).  A zero divisor gives 0, where ONNX leaves it undefined and
 * C's % is undefined behaviour; so does -1, whose remainder is always 0 and
 * which C's % cannot take with INT32_MIN. */
static inline int32_t et_mod_i32_(int32_t a, int32_t b, int fmod)
{
    int32_t r;
    if (b == 0 || b == -1)
        return 0;
    r = a % b;
    return !fmod && r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

ET_DEFINE_BINARY_I_(et_mod_i32, int32_t, et_mod_i32_(a, b, 0))
ET_DEFINE_BINARY_I_(et_fmod_i32, int32_t, et_mod_i32_(a, b, 1))

#undef ET_DEFINE_BINARY_I_

/* ---- OneHot ----
 * Y[o, k, i] = on where indices[o, i] (a negative one counted from depth,
 * as Python counts) is k, off elsewhere; an index outside [-depth, depth)
 * marks nothing.  Float indices are truncated, as ONNX casts them; a NaN
 * marks nothing.  The kernel's name gives the indices' type, then the
 * result's. */
#define ET_DEFINE_ONE_HOT_(name, TI, TO)                                                                   \
    static inline void name(int outer, int depth, int inner, const TI *indices, TO off, TO on, TO *Y)     \
    {                                                                                                      \
        int o, i, k;                                                                                       \
        for (o = 0; o < outer; ++o)                                                                        \
            for (i = 0; i < inner; ++i) {                                                                  \
                TI v = indices[(size_t)o * (size_t)inner + (size_t)i];                                     \
                int hot = -1;                                                                              \
                if (v > (TI)(-depth - 1) && v < (TI)depth)                                                 \
                    hot = (int)v < 0 ? (int)v + depth : (int)v;                                            \
                for (k = 0; k < depth; ++k)                                                                \
                    Y[((size_t)o * (size_t)depth + (size_t)k) * (size_t)inner + (size_t)i] = k == hot ? on : off; \
            }                                                                                              \
    }

ET_DEFINE_ONE_HOT_(et_one_hot_i32_i32, int32_t, int32_t)
ET_DEFINE_ONE_HOT_(et_one_hot_i32_f32, int32_t, float)
ET_DEFINE_ONE_HOT_(et_one_hot_f32_i32, float, int32_t)
ET_DEFINE_ONE_HOT_(et_one_hot_f32_f32, float, float)

#undef ET_DEFINE_ONE_HOT_

/* ---- unary ops ---- */

static inline void et_neg_i32(int n, const int32_t *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_wrap_i32_(0u - (uint32_t)X[i]);
}

/* max wins when lo > hi, as in et_clip_f32. */
static inline void et_clip_i32(int n, int32_t lo, int32_t hi, const int32_t *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        int32_t y = X[i] < lo ? lo : X[i];
        Y[i] = y > hi ? hi : y;
    }
}

static inline void et_not_i32(int n, const int32_t *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = !X[i];
}

static inline void et_isnan_f32(int n, const float *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = X[i] != X[i];
}

static inline void et_isinf_f32(int n, int negative, int positive, const float *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        uint32_t bits = et_f32_bits(X[i]);
        Y[i] = (bits & 0x7fffffffu) == 0x7f800000u && ((bits >> 31) ? negative : positive);
    }
}

/* ---- Cast between float, integer and bool ---- */

/* Truncation toward zero, as ONNX says.  NaN and values outside int32's
 * range, which ONNX leaves undefined, give INT32_MIN: x86's "integer
 * indefinite", so the result is what NumPy and ONNX Runtime give on x86,
 * on every target. */
static inline void et_f32_to_i32(int n, const float *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = x >= -2147483648.0f && x < 2147483648.0f ? (int32_t)x : (-2147483647 - 1);
    }
}

/* Rounds to nearest, ties to even, beyond 2^24. */
static inline void et_i32_to_f32(int n, const int32_t *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = (float)X[i];
}

/* NaN is true, as any nonzero value. */
static inline void et_f32_to_bool(int n, const float *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = X[i] != 0.0f;
}

static inline void et_i32_to_bool(int n, const int32_t *X, int32_t *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = X[i] != 0;
}

/* ---- Range, CumSum, ArgMax / ArgMin ---- */

/* Range's n values from start, one addition of delta at a time, as ONNX
 * defines Range (a loop) and ONNX Runtime computes it. */
static inline void et_range_f32(int n, float start, float delta, float *Y)
{
    int i;
    float v = start;
    for (i = 0; i < n; ++i, v += delta)
        Y[i] = v;
}

/* ReduceSum of integers (a count of the tokens that are not padding):
 * Y[out_strides . p] += X[p] over the input's positions p in order, Y of
 * y_size elements, wrapping as Add does. */
static inline void et_reduce_sum_i32(int rank, const int *in_shape, const int *out_strides, const int32_t *X,
                                     int32_t *Y, int y_size)
{
    int idx[ET_MAX_RANK] = {0};
    int n = et_numel_(rank, in_shape), inner = in_shape[rank - 1], s = out_strides[rank - 1], o, i, yo = 0, unused = 0;
    for (o = 0; o < y_size; ++o)
        Y[o] = 0;
    for (o = 0; o < n; o += inner, et_bcast_next_(rank, in_shape, idx, out_strides, &yo, out_strides, &unused))
        for (i = 0; i < inner; ++i)
            Y[yo + i * s] = et_wrap_i32_((uint32_t)Y[yo + i * s] + (uint32_t)X[o + i]);
}

/* CumSum along the middle axis of X viewed as [outer, dim, inner], each
 * sum in order along the axis (from its end when reverse); exclusive sums
 * leave out the element itself. */
#define ET_DEFINE_CUMSUM_(name, T, ACC, ADD, OUT)                              \
    static inline void name(int outer, int dim, int inner, int exclusive,     \
                            int reverse, const T *X, T *Y)                    \
    {                                                                          \
        int o, j, i, k;                                                        \
        for (o = 0; o < outer; ++o)                                            \
            for (i = 0; i < inner; ++i) {                                      \
                ACC sum = 0;                                                   \
                for (j = 0; j < dim; ++j) {                                    \
                    size_t at;                                                 \
                    k = reverse ? dim - 1 - j : j;                             \
                    at = ((size_t)o * (size_t)dim + (size_t)k) * (size_t)inner \
                         + (size_t)i;                                          \
                    if (exclusive) {                                           \
                        T x = X[at];                                           \
                        Y[at] = OUT(sum);                                      \
                        sum = ADD(sum, x);                                     \
                    } else {                                                   \
                        sum = ADD(sum, X[at]);                                 \
                        Y[at] = OUT(sum);                                      \
                    }                                                          \
                }                                                              \
            }                                                                  \
    }

#define ET_ADD_F32_(s, x) ((s) + (x))
#define ET_ADD_U32_(s, x) ((s) + (uint32_t)(x))
#define ET_SAME_(s) (s)
ET_DEFINE_CUMSUM_(et_cumsum_f32, float, float, ET_ADD_F32_, ET_SAME_)
ET_DEFINE_CUMSUM_(et_cumsum_i32, int32_t, uint32_t, ET_ADD_U32_, et_wrap_i32_)
#undef ET_ADD_F32_
#undef ET_ADD_U32_
#undef ET_SAME_
#undef ET_DEFINE_CUMSUM_

/* ArgMax / ArgMin along the middle axis of [outer, dim, inner]: the first
 * extreme (the last with select_last).  NaN counts as the extreme, as in
 * NumPy and torch. */
#define ET_DEFINE_ARG_(name, T, CMP, ISNAN)                                    \
    static inline void name(int outer, int dim, int inner, int select_last,   \
                            const T *X, int32_t *Y)                           \
    {                                                                          \
        int o, j, i, best;                                                     \
        for (o = 0; o < outer; ++o)                                            \
            for (i = 0; i < inner; ++i) {                                      \
                const T *x = X + (size_t)o * (size_t)dim * (size_t)inner       \
                             + (size_t)i;                                      \
                T b = x[0];                                                    \
                best = 0;                                                      \
                for (j = 1; j < dim; ++j) {                                    \
                    T v = x[(size_t)j * (size_t)inner];                        \
                    if (ISNAN(b) ? (select_last && ISNAN(v))                   \
                                 : (ISNAN(v) || v CMP b                         \
                                    || (select_last && v == b))) {             \
                        b = v;                                                 \
                        best = j;                                              \
                    }                                                          \
                }                                                              \
                Y[(size_t)o * (size_t)inner + (size_t)i] = best;               \
            }                                                                  \
    }

#define ET_ISNAN_F32_(v) ((v) != (v))
#define ET_NEVER_NAN_(v) 0
ET_DEFINE_ARG_(et_argmax_f32, float, >, ET_ISNAN_F32_)
ET_DEFINE_ARG_(et_argmin_f32, float, <, ET_ISNAN_F32_)
ET_DEFINE_ARG_(et_argmax_i32, int32_t, >, ET_NEVER_NAN_)
ET_DEFINE_ARG_(et_argmin_i32, int32_t, <, ET_NEVER_NAN_)
#undef ET_ISNAN_F32_
#undef ET_NEVER_NAN_
#undef ET_DEFINE_ARG_

#endif /* ET_INTEGER_H */
