/* edgetrain runtime: elementwise kernels, their gradients, dropout and
 * broadcasting binary operators.
 *
 * Each loop reads element i before writing element i, so every unary and
 * gradient kernel also works in place (Y == X, dX == dY). */
#ifndef ET_ELEMENTWISE_H
#define ET_ELEMENTWISE_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif

/* NaN passes through (x != x) so the trainer's non-finite check sees it,
 * as it would in PyTorch. */
static ET_NOINLINE void et_relu_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = (x > 0.0f || x != x) ? x : 0.0f;
    }
}

/* What ReLU's gradient needs of Y, in 1/32 of its bytes: bit i % 32 of word i / 32 is
 * Y[i] > 0 (0 for NaN), and the bits past n in the last word are 0. */
static ET_NOINLINE void et_relu_mask_f32(int n, const float *Y, uint32_t *mask)
{
    int i, b, words = n / 32;
    for (i = 0; i < words; ++i) {  /* whole words: loops of 32 without a bound test vectorize */
        const float *y = Y + (size_t)i * 32u;
        uint32_t word = 0u;
        for (b = 0; b < 32; ++b)
            word |= (uint32_t)(y[b] > 0.0f) << b;
        mask[i] = word;
    }
    if (n % 32) {
        uint32_t word = 0u;
        for (b = 0; b < n % 32; ++b)
            word |= (uint32_t)(Y[(size_t)words * 32u + (size_t)b] > 0.0f) << b;
        mask[words] = word;
    }
}

/* The bits of lo <= X <= hi (NaN gives 0), laid out as et_relu_mask_f32's: where Clip passes its
 * gradient through (PyTorch's clamp: at the bounds too). */
static inline void et_clip_mask_f32(int n, float lo, float hi, const float *X, uint32_t *mask)
{
    int i, b, words = n / 32;
    for (i = 0; i < words; ++i) {
        const float *x = X + (size_t)i * 32u;
        uint32_t word = 0u;
        for (b = 0; b < 32; ++b)
            word |= (uint32_t)(x[b] >= lo && x[b] <= hi) << b;
        mask[i] = word;
    }
    if (n % 32) {
        uint32_t word = 0u;
        for (b = 0; b < n % 32; ++b) {
            float x = X[(size_t)words * 32u + (size_t)b];
            word |= (uint32_t)(x >= lo && x <= hi) << b;
        }
        mask[words] = word;
    }
}

static inline void et_leaky_relu_f32(int n, float alpha, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = x > 0.0f ? x : alpha * x;
    }
}

static inline void et_sigmoid_f32(int n, const float *X, float *Y)
{
    int i = 0;
#if ET_VECTORS
    for (; i + 8 <= n; i += 8)
        et_sigmoidf_v8_(X + i, Y + i);
#endif
    for (; i < n; ++i)
        Y[i] = et_sigmoidf(X[i]);
}

static inline void et_tanh_f32(int n, const float *X, float *Y)
{
    int i = 0;
#if ET_VECTORS
    for (; i + 8 <= n; i += 8)
        et_tanhf_v8_(X + i, Y + i);
#endif
    for (; i < n; ++i)
        Y[i] = et_tanhf(X[i]);
}

static inline void et_exp_f32(int n, const float *X, float *Y)
{
    int i = 0;
#if ET_VECTORS
    for (; i + 8 <= n; i += 8)
        et_expf_v8_(X + i, Y + i);
#endif
    for (; i < n; ++i)
        Y[i] = et_expf(X[i]);
}

static inline void et_log_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_logf(X[i]);
}

static inline void et_sin_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_sinf(X[i]);
}

static inline void et_cos_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_cosf(X[i]);
}

/* Y = f(X) for the other functions of et_math.h: Tan, Atan, Asin, Acos, Sinh, Cosh, Asinh,
 * Acosh, Atanh. */
#define ET_DEFINE_MAP_(name, f)                                                \
    static inline void name(int n, const float *X, float *Y)                  \
    {                                                                          \
        int i;                                                                 \
        for (i = 0; i < n; ++i)                                                \
            Y[i] = f(X[i]);                                                    \
    }

ET_DEFINE_MAP_(et_tan_f32, et_tanf)
ET_DEFINE_MAP_(et_atan_f32, et_atanf)
ET_DEFINE_MAP_(et_asin_f32, et_asinf)
ET_DEFINE_MAP_(et_acos_f32, et_acosf)
ET_DEFINE_MAP_(et_sinh_f32, et_sinhf)
ET_DEFINE_MAP_(et_cosh_f32, et_coshf)
ET_DEFINE_MAP_(et_asinh_f32, et_asinhf)
ET_DEFINE_MAP_(et_acosh_f32, et_acoshf)
ET_DEFINE_MAP_(et_atanh_f32, et_atanhf)

#undef ET_DEFINE_MAP_

static inline void et_reciprocal_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = 1.0f / X[i];
}

static inline void et_sqrt_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = sqrtf(X[i]);
}

static inline void et_neg_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = -X[i];
}

static inline void et_abs_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_f32_from_bits(et_f32_bits(X[i]) & 0x7fffffffu);
}

/* sign(0) = 0 and sign(NaN) = NaN, as in ONNX and PyTorch. */
static inline float et_signf_(float x)
{
    return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x * 0.0f);
}

static inline void et_sign_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_signf_(X[i]);
}

/* floor(x), exact without libm: a float of magnitude 2^23 or more is whole already (as are
 * infinities, and NaN passes); below, converting to an integer truncates exactly.  A zero result
 * takes x's sign (floor(-0) = -0), as in ONNX and PyTorch. */
static inline float et_floorf_(float x)
{
    float t;
    if (!(x > -8388608.0f && x < 8388608.0f))
        return x;
    t = (float)(int32_t)x;
    if (t > x)
        t -= 1.0f;
    return t == 0.0f ? x * 0.0f : t;
}

static inline void et_floor_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_floorf_(X[i]);
}

static inline void et_ceil_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = -et_floorf_(-X[i]);
}

/* Round: to the nearest whole number, halves to the even one, as ONNX asks (x - floor(x) is exact). */
static inline float et_roundf_(float x)
{
    float f = et_floorf_(x), d = x - f;
    if (d > 0.5f || (d == 0.5f && et_floorf_(f * 0.5f) != f * 0.5f))
        f += 1.0f;
    return f == 0.0f ? x * 0.0f : f;
}

static inline void et_round_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_roundf_(X[i]);
}

static inline void et_pow_f32(int n, float p, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_powf_const(X[i], p);
}

/* Comparisons with NaN are false, so a NaN x falls through unchanged. */
static inline void et_clip_f32(int n, float lo, float hi, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float y = X[i] < lo ? lo : X[i];
        Y[i] = y > hi ? hi : y;  /* max wins when lo > hi, as ONNX and torch.clamp say */
    }
}

static ET_NOINLINE void et_copy_f32(int n, const float *X, float *Y)
{
    if (n > 0 && X != Y)
        memmove(Y, X, (size_t)n * sizeof(float));
}

static inline void et_scale_f32(int n, float s, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = s * X[i];
}

static inline void et_fill_f32(int n, float v, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = v;
}

/* ---- gradients ---- */

/* mask: et_relu_mask_f32's bits of the forward result, or et_clip_mask_f32's of the input. */
static ET_NOINLINE void et_relu_grad_f32(int n, const float *dY, const uint32_t *mask, float *dX)
{
    int i, b, words = n / 32;
    for (i = 0; i < words; ++i) {  /* a word at a time, as et_relu_mask_f32 makes them */
        const uint32_t word = mask[i];
        const float *dy = dY + (size_t)i * 32u;
        float *dx = dX + (size_t)i * 32u;
        for (b = 0; b < 32; ++b)
            dx[b] = (word >> b) & 1u ? dy[b] : 0.0f;
    }
    for (i = words * 32; i < n; ++i)
        dX[i] = (mask[words] >> (i & 31)) & 1u ? dY[i] : 0.0f;
}

static inline void et_leaky_relu_grad_f32(int n, float alpha, const float *dY,
                                          const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i)
        dX[i] = X[i] > 0.0f ? dY[i] : alpha * dY[i];
}

static inline void et_sigmoid_grad_f32(int n, const float *dY, const float *Y, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float y = Y[i];
        dX[i] = dY[i] * y * (1.0f - y);
    }
}

static inline void et_tanh_grad_f32(int n, const float *dY, const float *Y, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float y = Y[i];
        dX[i] = dY[i] * (1.0f - y * y);
    }
}

static inline void et_sqrt_grad_f32(int n, const float *dY, const float *Y, float *dX)
{
    int i;
    for (i = 0; i < n; ++i)
        dX[i] = dY[i] / (2.0f * Y[i]);
}

static inline void et_abs_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i)
        dX[i] = dY[i] * et_signf_(X[i]);
}

/* Grouped as dY * (p * x^(p-1)) like PyTorch's pow_backward; p == 0 gives
 * exact zeros there too, where p * x^-1 would be NaN at x == 0. */
static inline void et_pow_grad_f32(int n, float p, const float *dY, const float *X,
                                   float *dX)
{
    int i;
    for (i = 0; i < n; ++i)
        dX[i] = p == 0.0f ? 0.0f : dY[i] * (p * et_powf_const(X[i], p - 1.0f));
}

/* ---- dropout ---- */

/* The mask is a pure function of (seed, counter, i), so the backward pass
 * and a resumed run reproduce it without stored generator state; the top
 * 24 bits of the hash give a uniform float in [0, 1) exactly. */
static inline void et_dropout_f32(int n, float ratio, uint32_t seed, uint32_t counter,
                                  const float *X, float *Y, float *Mask)
{
    int i;
    float scale = ratio < 1.0f ? 1.0f / (1.0f - ratio) : 0.0f;
    for (i = 0; i < n; ++i) {
        uint32_t h = et_hash_u32(seed ^ et_hash_u32(counter ^ et_hash_u32((uint32_t)i)));
        float u = (float)(h >> 8) * (1.0f / 16777216.0f);
        Mask[i] = u >= ratio ? scale : 0.0f;
        Y[i] = X[i] * Mask[i];
    }
}

/* ---- broadcasting ---- */

/* Element count of a shape; 0 if any extent is 0. */
static inline int et_numel_(int rank, const int *shape)
{
    int d, n = 1;
    for (d = 0; d < rank; ++d)
        n *= shape[d];
    return n;
}

/* 1 if strides describe a contiguous tensor of this shape (strides on
 * extent-1 axes are never used, so they may be anything). */
static inline int et_is_contiguous_(int rank, const int *shape, const int *strides)
{
    int d, expect = 1;
    for (d = rank - 1; d >= 0; --d) {
        if (shape[d] != 1 && strides[d] != expect)
            return 0;
        expect *= shape[d];
    }
    return 1;
}

static inline int et_is_scalar_(int rank, const int *shape, const int *strides)
{
    int d;
    for (d = 0; d < rank; ++d)
        if (shape[d] != 1 && strides[d] != 0)
            return 0;
    return 1;
}

/* Advances the row-major index of all but the innermost axis and keeps
 * two operand offsets in step with it, so the broadcast loop is written
 * once for every operator. */
static inline void et_bcast_next_(int rank, const int *shape, int *idx,
                                  const int *a_strides, int *a_off,
                                  const int *b_strides, int *b_off)
{
    int d;
    for (d = rank - 2; d >= 0; --d) {
        if (++idx[d] < shape[d]) {
            *a_off += a_strides[d];
            *b_off += b_strides[d];
            return;
        }
        idx[d] = 0;
        *a_off -= a_strides[d] * (shape[d] - 1);
        *b_off -= b_strides[d] * (shape[d] - 1);
    }
}

/* Y may alias A or B when that operand is contiguous and full-size: each
 * output element is written only after its own inputs are read. */
#define ET_DEFINE_BINARY_(name, OP)                                            \
    static inline void name(int rank, const int *shape, const float *A,       \
                            const int *a_strides, const float *B,             \
                            const int *b_strides, float *Y)                   \
    {                                                                          \
        int n = et_numel_(rank, shape), i, o, inner, sa, sb;                   \
        int idx[ET_MAX_RANK] = {0}, ao = 0, bo = 0;                            \
        if (n == 0)                                                            \
            return;                                                            \
        if (et_is_contiguous_(rank, shape, a_strides)) {                       \
            if (et_is_contiguous_(rank, shape, b_strides)) {                   \
                for (i = 0; i < n; ++i)                                        \
                    Y[i] = A[i] OP B[i];                                       \
                return;                                                        \
            }                                                                  \
            if (et_is_scalar_(rank, shape, b_strides)) {                       \
                float b = B[0];                                                \
                for (i = 0; i < n; ++i)                                        \
                    Y[i] = A[i] OP b;                                          \
                return;                                                        \
            }                                                                  \
        } else if (et_is_scalar_(rank, shape, a_strides) &&                    \
                   et_is_contiguous_(rank, shape, b_strides)) {                \
            float a = A[0];                                                    \
            for (i = 0; i < n; ++i)                                            \
                Y[i] = a OP B[i];                                              \
            return;                                                            \
        }                                                                      \
        inner = shape[rank - 1];                                               \
        sa = a_strides[rank - 1];                                              \
        sb = b_strides[rank - 1];                                              \
        for (o = 0; o < n; o += inner) {                                       \
            const float *a = A + ao, *b = B + bo;                              \
            if (sa == 1 && sb == 0) { /* a row against one value */           \
                const float v = b[0];                                          \
                for (i = 0; i < inner; ++i)                                    \
                    Y[o + i] = a[i] OP v;                                      \
            } else if (sa == 0 && sb == 1) {                                   \
                const float v = a[0];                                          \
                for (i = 0; i < inner; ++i)                                    \
                    Y[o + i] = v OP b[i];                                      \
            } else                                                             \
                for (i = 0; i < inner; ++i)                                    \
                    Y[o + i] = a[i * sa] OP b[i * sb];                         \
            et_bcast_next_(rank, shape, idx, a_strides, &ao, b_strides, &bo);  \
        }                                                                      \
    }

ET_DEFINE_BINARY_(et_add_f32, +)
ET_DEFINE_BINARY_(et_sub_f32, -)
ET_DEFINE_BINARY_(et_mul_f32, *)
ET_DEFINE_BINARY_(et_div_f32, /)

#undef ET_DEFINE_BINARY_

/* Y = EXPR(a, b), of type R, over two broadcast operands a and b of type T
 * in one plain walk: Max and Min (et_indexing.h), and the comparisons,
 * logic and integer arithmetic (et_integer.h), define their kernels with
 * it.  Each element of Y is written after its own a and b are read. */
#define ET_DEFINE_BROADCAST_(name, T, R, EXPR)                                 \
    static inline void name(int rank, const int *shape, const T *A,           \
                            const int *a_strides, const T *B,                 \
                            const int *b_strides, R *Y)                       \
    {                                                                          \
        int n = et_numel_(rank, shape), i, o, inner, sa, sb;                   \
        int idx[ET_MAX_RANK] = {0}, ao = 0, bo = 0;                            \
        if (n == 0)                                                            \
            return;                                                            \
        inner = shape[rank - 1];                                               \
        sa = a_strides[rank - 1];                                              \
        sb = b_strides[rank - 1];                                              \
        for (o = 0; o < n; o += inner) {                                       \
            for (i = 0; i < inner; ++i) {                                      \
                const T a = A[ao + i * sa], b = B[bo + i * sb];                \
                Y[o + i] = (EXPR);                                             \
            }                                                                  \
            et_bcast_next_(rank, shape, idx, a_strides, &ao, b_strides, &bo);  \
        }                                                                      \
    }

/* Mod: fmod=1 takes the dividend's sign; fmod=0 the divisor's, from fmod
 * as Python's and PyTorch's remainder take it (b added once to a remainder
 * of the other sign; a zero with b's sign). */
static inline float et_remainderf_(float a, float b)
{
    float r = et_fmodf(a, b);
    if (r == 0.0f)
        return b < 0.0f ? -0.0f : 0.0f;
    return (r < 0.0f) != (b < 0.0f) ? r + b : r;
}

ET_DEFINE_BROADCAST_(et_fmod_f32, float, float, et_fmodf(a, b))
ET_DEFINE_BROADCAST_(et_mod_f32, float, float, et_remainderf_(a, b))

/* Y[o] = X[x_strides . index(o)]: Expand, and Slice from its first element.
 * Float and int32_t tensors (et_integer.h) share the walk: it moves 4-byte
 * elements as bytes, which keeps every bit, and a copy of a constant 4
 * bytes compiles to one load and one store, as a typed one does. */
static inline void et_expand_b32_(int rank, const int *shape, const void *X,
                                  const int *x_strides, void *Y)
{
    const unsigned char *x = (const unsigned char *)X;
    unsigned char *y = (unsigned char *)Y;
    int n = et_numel_(rank, shape), i, o, inner, sx;
    int idx[ET_MAX_RANK] = {0}, xo = 0, unused = 0;
    if (n == 0)
        return;
    inner = shape[rank - 1];
    sx = x_strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i)
            memcpy(y + (ptrdiff_t)(o + i) * 4, x + (ptrdiff_t)(xo + i * sx) * 4, 4);
        et_bcast_next_(rank, shape, idx, x_strides, &xo, x_strides, &unused);
    }
}

static inline void et_expand_f32(int rank, const int *shape, const float *X,
                                 const int *x_strides, float *Y)
{
    et_expand_b32_(rank, shape, X, x_strides, Y);
}

static inline void et_expand_i32(int rank, const int *shape, const int32_t *X,
                                 const int *x_strides, int32_t *Y)
{
    et_expand_b32_(rank, shape, X, x_strides, Y);
}

/* ---- accumulation ---- */

/* reset lets the first micro-batch overwrite instead of needing a
 * separate zeroing pass. */
static ET_NOINLINE void et_accumulate_f32(int n, const float *G, float *Acc, int reset)
{
    int i;
    if (reset) {
        et_copy_f32(n, G, Acc);
        return;
    }
    for (i = 0; i < n; ++i)
        Acc[i] += G[i];
}

/* Sequential so the result (e.g. a gradient-clipping norm) does not depend
 * on vector width. */
static inline float et_sum_squares_f32(int n, const float *X)
{
    int i;
    float s = 0.0f;
    for (i = 0; i < n; ++i)
        s += X[i] * X[i];
    return s;
}

#endif /* ET_ELEMENTWISE_H */
