/* edgetrain runtime: GatherElements, ScatterElements, GatherND, ScatterND
 * and TopK, and the scatters and gathers their gradients are made of.
 *
 * Indices come as compile-time constants (int) or as a model input
 * (int32_t): exactly one of the two pointers is given.  Negative indices
 * count from the end, as in ONNX.  Run-time indices are range-checked
 * before any kernel here runs; an index still out of range reads zero and
 * writes nothing, so a missed check cannot touch memory out of bounds.
 * Scatters run over the indices in row-major order, so a repeated index
 * combines its updates in the same order on every target. */
#ifndef ET_SCATTER_H
#define ET_SCATTER_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

/* Reductions of ScatterElements and ScatterND, as the compiler numbers them. */
#define ET_SCATTER_NONE 0
#define ET_SCATTER_ADD 1
#define ET_SCATTER_MUL 2
#define ET_SCATTER_MAX 3
#define ET_SCATTER_MIN 4

/* Index j, wrapped into [0, dim) when negative; possibly still out of range. */
static inline int et_scatter_index_(const int *const_indices, const int32_t *indices, int j, int dim)
{
    int k = const_indices ? const_indices[j] : (int)indices[j];
    return k < 0 ? k + dim : k;
}

/* What a scatter leaves at a position holding y when update u arrives.
 * max and min let NaN through, as NumPy's maximum and minimum do. */
static inline float et_scatter_combine_(int reduction, float y, float u)
{
    switch (reduction) {
    case ET_SCATTER_ADD:
        return y + u;
    case ET_SCATTER_MUL:
        return y * u;
    case ET_SCATTER_MAX:
        return u > y || u != u ? u : y;
    case ET_SCATTER_MIN:
        return u < y || u != u ? u : y;
    default:
        return u;
    }
}

/* ---- GatherElements / ScatterElements ----
 * The index tensor has `shape`; position p of it addresses the data element
 * at x_strides . p (the data's strides, 0 on the indexed axis) plus
 * index[p] * axis_stride. */

/* The walk both share.  Gathering, Y[p] = X at the element position p
 * addresses (0 when out of range), for float and int32_t tensors
 * (et_integer.h) alike: elements move as 4 bytes, as Gather's rows do
 * (et_gather_b32_).  Scattering, Y, which holds the data on entry, combines
 * X[p] into that element (X = NULL: zeros; with ET_SCATTER_NONE, the
 * positions' gradient through an overwrite is 0): float tensors with any
 * reduction (scatter 1), int32_t ones overwritten, 4 bytes moved
 * (scatter 2).  The choice is made once a row, so the inner loops stay
 * those of separate kernels. */
static inline void et_elements_walk_b32_(int rank, const int *shape, const int *x_strides, int axis_stride,
                                         int axis_dim, int scatter, int reduction, const int *const_indices,
                                         const int32_t *indices, const void *X, void *Y)
{
    const unsigned char *xb = (const unsigned char *)X;
    unsigned char *yb = (unsigned char *)Y;
    const float *xf = (const float *)X;
    float *yf = (float *)Y, *y;
    int n = et_numel_(rank, shape), o, i, k, inner, sx, xo = 0, unused = 0;
    int idx[ET_MAX_RANK] = {0};
    if (n == 0)
        return;
    inner = shape[rank - 1];
    sx = x_strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        if (!scatter)
            for (i = 0; i < inner; ++i) {
                k = et_scatter_index_(const_indices, indices, o + i, axis_dim);
                if (k < 0 || k >= axis_dim)
                    memset(yb + (size_t)(o + i) * 4u, 0, 4u);
                else
                    memcpy(yb + (size_t)(o + i) * 4u, xb + (size_t)(xo + i * sx + k * axis_stride) * 4u, 4u);
            }
        else if (scatter == 2)
            for (i = 0; i < inner; ++i) {
                k = et_scatter_index_(const_indices, indices, o + i, axis_dim);
                if (k >= 0 && k < axis_dim)
                    memcpy(yb + (size_t)(xo + i * sx + k * axis_stride) * 4u, xb + (size_t)(o + i) * 4u, 4u);
            }
        else
            for (i = 0; i < inner; ++i) {
                k = et_scatter_index_(const_indices, indices, o + i, axis_dim);
                if (k < 0 || k >= axis_dim)
                    continue;
                y = yf + xo + i * sx + k * axis_stride;
                *y = et_scatter_combine_(reduction, *y, xf ? xf[o + i] : 0.0f);
            }
        et_bcast_next_(rank, shape, idx, x_strides, &xo, x_strides, &unused);
    }
}

static inline void et_gather_elements_f32(int rank, const int *shape, const int *x_strides, int axis_stride,
                                          int axis_dim, const int *const_indices, const int32_t *indices,
                                          const float *X, float *Y)
{
    et_elements_walk_b32_(rank, shape, x_strides, axis_stride, axis_dim, 0, ET_SCATTER_NONE, const_indices,
                          indices, X, Y);
}

static inline void et_gather_elements_i32(int rank, const int *shape, const int *x_strides, int axis_stride,
                                          int axis_dim, const int *const_indices, const int32_t *indices,
                                          const int32_t *X, int32_t *Y)
{
    et_elements_walk_b32_(rank, shape, x_strides, axis_stride, axis_dim, 0, ET_SCATTER_NONE, const_indices,
                          indices, X, Y);
}

static inline void et_scatter_elements_f32(int rank, const int *shape, const int *x_strides, int axis_stride,
                                           int axis_dim, int reduction, const int *const_indices,
                                           const int32_t *indices, const float *U, float *Y)
{
    et_elements_walk_b32_(rank, shape, x_strides, axis_stride, axis_dim, 1, reduction, const_indices, indices,
                          U, Y);
}

/* Integer data is moved, not computed: overwritten (reduction none). */
static inline void et_scatter_elements_i32(int rank, const int *shape, const int *x_strides, int axis_stride,
                                           int axis_dim, const int *const_indices, const int32_t *indices,
                                           const int32_t *U, int32_t *Y)
{
    et_elements_walk_b32_(rank, shape, x_strides, axis_stride, axis_dim, 2, ET_SCATTER_NONE, const_indices, indices,
                          U, Y);
}

/* ---- GatherND / ScatterND ----
 * n index tuples of k indices each; tuple t selects the slice of `inner`
 * elements at sum_j index[t][j] * strides[j], index[t][j] in [-dims[j], dims[j]),
 * within its batch.  GatherND's batch_dims make the tuples come `per_batch`
 * to a batch, each batch of the data dims[0] * strides[0] elements after
 * the one before (one batch: per_batch = n). */

/* Run-time tuples are checked column by column: each axis has its own extent. */
static inline int et_check_nd_indices(int n, int k, const int32_t *indices, const int *dims)
{
    int t, j;
    for (t = 0; t < n; ++t)
        for (j = 0; j < k; ++j)
            if (indices[t * k + j] < -dims[j] || indices[t * k + j] >= dims[j])
                return ET_BAD_ARGUMENT;
    return ET_OK;
}

/* Offset of tuple t's slice, or -1 when an index is out of range. */
static inline int et_nd_offset_(int t, int per_batch, int k, const int *dims, const int *strides,
                                const int *const_indices, const int32_t *indices)
{
    int j, v, off = t / per_batch * dims[0] * strides[0];
    for (j = 0; j < k; ++j) {
        v = et_scatter_index_(const_indices, indices, t * k + j, dims[j]);
        if (v < 0 || v >= dims[j])
            return -1;
        off += v * strides[j];
    }
    return off;
}

/* Y holds the data on entry; slice t of U (NULL: zeros) is combined into
 * the slice tuple t selects. */
static inline void et_scatter_nd_f32(int n, int per_batch, int k, const int *dims, const int *strides, int inner,
                                     int reduction, const int *const_indices, const int32_t *indices, const float *U,
                                     float *Y)
{
    int t, i, off;
    for (t = 0; t < n; ++t) {
        off = et_nd_offset_(t, per_batch, k, dims, strides, const_indices, indices);
        if (off < 0)
            continue;
        for (i = 0; i < inner; ++i)
            Y[off + i] = et_scatter_combine_(reduction, Y[off + i], U ? U[t * inner + i] : 0.0f);
    }
}

/* Integer data, overwritten (reduction none). */
static inline void et_scatter_nd_i32(int n, int per_batch, int k, const int *dims, const int *strides, int inner,
                                     const int *const_indices, const int32_t *indices, const int32_t *U, int32_t *Y)
{
    int t, i, off;
    for (t = 0; t < n; ++t) {
        off = et_nd_offset_(t, per_batch, k, dims, strides, const_indices, indices);
        for (i = 0; off >= 0 && i < inner; ++i)
            Y[off + i] = U[t * inner + i];
    }
}

/* GatherND: Y's slice t = the slice of X that tuple t selects (also
 * ScatterND's update gradient). */
#define ET_DEFINE_GATHER_ND_(name, T)                                          \
    static inline void name(int n, int per_batch, int k, const int *dims,     \
                            const int *strides, int inner,                    \
                            const int *const_indices, const int32_t *indices, \
                            const T *X, T *Y)                                 \
    {                                                                          \
        int t, i, off;                                                         \
        for (t = 0; t < n; ++t) {                                              \
            off = et_nd_offset_(t, per_batch, k, dims, strides, const_indices, \
                                indices);                                      \
            for (i = 0; i < inner; ++i)                                        \
                Y[t * inner + i] = off < 0 ? (T)0 : X[off + i];                \
        }                                                                      \
    }

ET_DEFINE_GATHER_ND_(et_gather_nd_f32, float)
ET_DEFINE_GATHER_ND_(et_gather_nd_i32, int32_t)
#undef ET_DEFINE_GATHER_ND_

/* ---- TopK ----
 * X viewed as [outer, n, inner], each of the outer * inner lines along the
 * middle axis `inner` apart.  The chosen elements come in a strict total
 * order: by value (NaN above everything, as torch.topk has it), then by
 * position, lower first, as ONNX asks of equal values.  The j-th element
 * is the first one after the (j-1)-th in that order: k passes over the
 * line, with nothing to store, and the gradient finds the same elements
 * again rather than keeping their positions. */

/* For each element type: et_topk_before_<T>_(x, step, i, j, largest), 1 if
 * element i of line x comes before element j; et_topk_next_<T>_(x, step,
 * n, prev, largest), the element following `prev` (-1: the first) in the
 * order; and the kernel: Y ([outer, k, inner]) = the k first elements of
 * each line, in order, and I (NULL when unused) their positions. */
#define ET_DEFINE_TOPK_(sfx, T, ISNAN)                                         \
    static inline int et_topk_before_##sfx##_(const T *x, int step, int i,    \
                                              int j, int largest)             \
    {                                                                          \
        T a = x[i * step], b = x[j * step];                                    \
        int a_above = a > b || (ISNAN(a) && !ISNAN(b));                        \
        int b_above = b > a || (ISNAN(b) && !ISNAN(a));                        \
        if (a_above != b_above)                                                \
            return largest ? a_above : b_above;                                \
        return i < j;                                                          \
    }                                                                          \
                                                                               \
    static inline int et_topk_next_##sfx##_(const T *x, int step, int n,      \
                                            int prev, int largest)            \
    {                                                                          \
        int i, best = -1;                                                      \
        for (i = 0; i < n; ++i)                                                \
            if ((prev < 0 || et_topk_before_##sfx##_(x, step, prev, i,         \
                                                     largest)) &&              \
                (best < 0 || et_topk_before_##sfx##_(x, step, i, best,         \
                                                     largest)))                \
                best = i;                                                      \
        return best;                                                           \
    }                                                                          \
                                                                               \
    static inline void et_topk_##sfx(int outer, int n, int inner, int k,      \
                                     int largest, const T *X, T *Y,           \
                                     int32_t *I)                              \
    {                                                                          \
        int o, c, j, at;                                                       \
        size_t y;                                                              \
        for (o = 0; o < outer; ++o)                                            \
            for (c = 0; c < inner; ++c) {                                      \
                const T *x = X + (size_t)o * (size_t)n * (size_t)inner         \
                             + (size_t)c;                                      \
                for (j = 0, at = -1; j < k; ++j) {                             \
                    at = et_topk_next_##sfx##_(x, inner, n, at, largest);      \
                    y = ((size_t)o * (size_t)k + (size_t)j) * (size_t)inner    \
                        + (size_t)c;                                           \
                    Y[y] = x[at * inner];                                      \
                    if (I)                                                     \
                        I[y] = at;                                             \
                }                                                              \
            }                                                                  \
    }

#define ET_TOPK_ISNAN_F32_(v) ((v) != (v))
#define ET_TOPK_NEVER_NAN_(v) 0
ET_DEFINE_TOPK_(f32, float, ET_TOPK_ISNAN_F32_)
ET_DEFINE_TOPK_(i32, int32_t, ET_TOPK_NEVER_NAN_)
#undef ET_TOPK_ISNAN_F32_
#undef ET_TOPK_NEVER_NAN_
#undef ET_DEFINE_TOPK_

/* dX = zeros, with dY's j-th value of each line at its j-th element. */
static inline void et_topk_grad_f32(int outer, int n, int inner, int k, int largest, const float *X,
                                    const float *dY, float *dX)
{
    int o, c, j, at;
    size_t line;
    memset(dX, 0, (size_t)outer * (size_t)n * (size_t)inner * sizeof(float));
    for (o = 0; o < outer; ++o)
        for (c = 0; c < inner; ++c) {
            line = (size_t)o * (size_t)n * (size_t)inner + (size_t)c;
            for (j = 0, at = -1; j < k; ++j) {
                at = et_topk_next_f32_(X + line, inner, n, at, largest);
                dX[line + (size_t)at * (size_t)inner] = dY[((size_t)o * (size_t)k + (size_t)j) * (size_t)inner + (size_t)c];
            }
        }
}

#endif /* ET_SCATTER_H */
