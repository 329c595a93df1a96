/* edgetrain runtime: activations beyond the core set (ELU family, Softplus,
 * Softsign, HardSigmoid, HardSwish, PRelu, Erf, Gelu) and their gradients.
 *
 * Like et_elementwise.h, every unary and gradient loop reads element i
 * before writing element i, so it also works in place (Y == X, dX == dY).
 * Gradients follow PyTorch's backward formulas (and its choice of branch at
 * the kinks) so trained weights match torch's. */
#ifndef ET_ACTIVATIONS_H
#define ET_ACTIVATIONS_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

#define ET_2_SQRTPI 1.1283792e+00f   /* 2 / sqrt(pi) */
#define ET_SQRT1_2 7.0710677e-01f    /* 1 / sqrt(2) */
#define ET_1_SQRT2PI 3.989423e-01f   /* 1 / sqrt(2 pi) */
#define ET_SQRT2_PI 7.978846e-01f    /* sqrt(2 / pi) */
#define ET_GELU_KAPPA 4.4715e-02f

/* erf to within 1.05 ulp of the exact value, so never more than 1 ulp from
 * the correctly rounded float (checked against float64 erf on every
 * non-negative float; erf is odd by construction).  Polynomials
 * fitted for this file (weighted least squares on Chebyshev nodes, float32
 * Horner error included), on |x|:
 *   [0, 0.84375)   erf = x + x P(x^2)           (P(0) = 2/sqrt(pi) - 1, so
 *                  the leading term x is exact and tiny x is exact-ish)
 *   [0.84375, 1.25) erf = erf(1) + Q(x - 1)    (no cancellation near 1)
 *   [1.25, 4)      erf = 1 - exp(-x^2) R(1/x - 0.525), R ~ erfc(x) e^{x^2}
 *   [4, inf]       erf = 1 (erf(x) rounds to 1 from x = 3.9192).
 * The rounding of x*x in the tail moves erfc by < 0.1 ulp of the result. */
static inline float et_erff(float x)
{
    float a = x < 0.0f ? -x : x;
    float s, p, r;
    if (x != x)
        return x + x;
    if (a < 8.4375e-01f) {
        s = x * x;
        p = 8.88406e-05f;
        p = p * s - 8.2509965e-04f;
        p = p * s + 5.2095167e-03f;
        p = p * s - 2.686243e-02f;
        p = p * s + 1.1283744e-01f;
        p = p * s - 3.7612638e-01f;
        p = p * s + 1.2837917e-01f;
        return x + x * p; /* odd, and keeps the sign of zero */
    }
    if (a < 1.25f) {
        s = a - 1.0f; /* exact (Sterbenz) */
        p = -5.323282e-03f;
        p = p * s + 1.5104473e-02f;
        p = p * s + 4.642776e-03f;
        p = p * s - 6.918501e-02f;
        p = p * s + 6.918406e-02f;
        p = p * s + 1.3836919e-01f;
        p = p * s - 4.151075e-01f;
        p = p * s + 4.151075e-01f;
        p = p * s + 1.35089e-08f;
        r = 8.427008e-01f + p;
    } else if (a < 4.0f) {
        s = 1.0f / a - 5.25e-01f;
        p = -4.8692033e-02f;
        p = p * s - 7.5123515e-03f;
        p = p * s + 6.2182814e-02f;
        p = p * s - 7.890073e-02f;
        p = p * s + 5.414844e-02f;
        p = p * s + 2.8791972e-02f;
        p = p * s - 1.8358408e-01f;
        p = p * s + 4.179561e-01f;
        p = p * s + 2.6595974e-01f;
        r = 1.0f - et_expf(-(a * a)) * p;
    } else {
        r = 1.0f;
    }
    return x < 0.0f ? -r : r;
}

/* ---- ELU family: Elu, Selu and Celu are all
 *   y = scale * x                                   for x > 0
 *   y = scale * alpha * expm1(input_scale * x)      otherwise
 * (Selu: scale = gamma; Celu: input_scale = 1/alpha), as in PyTorch's one
 * elu kernel.  NaN takes the second branch and stays NaN. */
static inline void et_elu_f32(int n, float alpha, float scale, float input_scale,
                              const float *X, float *Y)
{
    int i;
    float neg = alpha * scale;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = x > 0.0f ? x * scale : et_expm1f(x * input_scale) * neg;
    }
}

/* PyTorch's elu_backward from the input: the x <= 0 branch owns x == 0. */
static inline void et_elu_grad_f32(int n, float alpha, float scale, float input_scale,
                                   const float *dY, const float *X, float *dX)
{
    int i;
    float neg = input_scale * (alpha * scale);
    for (i = 0; i < n; ++i) {
        float x = X[i];
        dX[i] = x > 0.0f ? dY[i] * scale : dY[i] * neg * et_expf(x * input_scale);
    }
}

/* log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): never overflows, and keeps
 * full precision for very negative x where the result is tiny. */
static inline void et_softplus_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = (x > 0.0f ? x : 0.0f) + et_softplus_neg_abs(x);
    }
}

static inline void et_softplus_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i)
        dX[i] = dY[i] * et_sigmoidf(X[i]);
}

static inline void et_softsign_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = x / (1.0f + (x < 0.0f ? -x : x));
    }
}

static inline void et_softsign_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float d = 1.0f + (X[i] < 0.0f ? -X[i] : X[i]);
        dX[i] = dY[i] / (d * d);
    }
}

/* ONNX HardSigmoid: clamp(alpha * x + beta, 0, 1); the defaults (0.2, 0.5)
 * differ from PyTorch's hardsigmoid (1/6, 0.5), which exports as alpha 1/6. */
static inline void et_hard_sigmoid_f32(int n, float alpha, float beta, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float t = alpha * X[i] + beta;
        Y[i] = t > 0.0f ? (t < 1.0f ? t : 1.0f) : (t != t ? t : 0.0f);
    }
}

/* Zero gradient on both flat parts and at the corners, like PyTorch's
 * hardsigmoid_backward (strict inequalities). */
static inline void et_hard_sigmoid_grad_f32(int n, float alpha, float beta, const float *dY,
                                            const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float t = alpha * X[i] + beta;
        dX[i] = (t > 0.0f && t < 1.0f) ? dY[i] * alpha : 0.0f;
    }
}

/* x * clamp(x/6 + 1/2, 0, 1), the ONNX definition (alpha = 1/6). */
static inline void et_hard_swish_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        float t = x * (1.0f / 6.0f) + 0.5f;
        Y[i] = x * (t > 0.0f ? (t < 1.0f ? t : 1.0f) : 0.0f);
    }
}

/* PyTorch's hardswish_backward: 0 below -3, x/3 + 1/2 on [-3, 3], 1 above. */
static inline void et_hard_swish_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        dX[i] = x < -3.0f ? 0.0f : (x <= 3.0f ? dY[i] * (x / 3.0f + 0.5f) : dY[i]);
    }
}

/* ---- PRelu: Y = X where X > 0, Slope * X elsewhere; Slope broadcasts to
 * X's shape (rank axes of `shape`) with element strides s_strides, 0 on
 * broadcast axes.  Walks X in row-major order. */
static inline void et_prelu_f32(int rank, const int *shape, const float *X, const float *Slope,
                                const int *s_strides, float *Y)
{
    int n = et_numel_(rank, shape), i, o, inner, ss, so = 0, unused = 0;
    int idx[ET_MAX_RANK] = {0};
    if (n == 0)
        return;
    inner = shape[rank - 1];
    ss = s_strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i) {
            float x = X[o + i];
            Y[o + i] = x > 0.0f ? x : Slope[so + i * ss] * x;
        }
        et_bcast_next_(rank, shape, idx, s_strides, &so, s_strides, &unused);
    }
}

/* dX in X's shape; dSlope in Slope's own (contiguous, s_size elements)
 * shape, summed in X's row-major order so the result does not depend on
 * the target.  Summing here instead of materializing X * dY in X's shape
 * saves a tensor the size of X. */
static inline void et_prelu_grad_f32(int rank, const int *shape, const float *dY, const float *X,
                                     const float *Slope, const int *s_strides, int s_size,
                                     float *dX, float *dSlope)
{
    int n = et_numel_(rank, shape), i, o, inner, ss, so = 0, unused = 0;
    int idx[ET_MAX_RANK] = {0};
    for (i = 0; i < s_size; ++i)
        dSlope[i] = 0.0f;
    if (n == 0)
        return;
    inner = shape[rank - 1];
    ss = s_strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i) {
            float x = X[o + i], dy = dY[o + i];
            if (x > 0.0f) {
                dX[o + i] = dy;
            } else {
                dSlope[so + i * ss] += x * dy;
                dX[o + i] = Slope[so + i * ss] * dy;
            }
        }
        et_bcast_next_(rank, shape, idx, s_strides, &so, s_strides, &unused);
    }
}

/* ---- Erf and Gelu ---- */

static inline void et_erf_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_erff(X[i]);
}

static inline void et_erf_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        dX[i] = dY[i] * (ET_2_SQRTPI * et_expf(-(x * x)));
    }
}

/* Gelu, approximate = "none": x * Phi(x) = x/2 (1 + erf(x / sqrt 2)). */
static inline void et_gelu_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = x * 0.5f * (1.0f + et_erff(x * ET_SQRT1_2));
    }
}

/* Phi(x) + x phi(x), grouped as PyTorch's GeluBackward. */
static inline void et_gelu_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        float cdf = 0.5f * (1.0f + et_erff(x * ET_SQRT1_2));
        float pdf = ET_1_SQRT2PI * et_expf(x * x * -0.5f);
        dX[i] = dY[i] * (cdf + x * pdf);
    }
}

/* Gelu, approximate = "tanh": x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static inline void et_gelu_tanh_f32(int n, const float *X, float *Y)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        float inner = ET_SQRT2_PI * (x + ET_GELU_KAPPA * (x * x * x));
        Y[i] = 0.5f * x * (1.0f + et_tanhf(inner));
    }
}

static inline void et_gelu_tanh_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        float x_sq = x * x;
        float t = et_tanhf(ET_SQRT2_PI * (x + ET_GELU_KAPPA * (x_sq * x)));
        float left = 0.5f * x;
        float right_derivative = left * (1.0f - t * t) *
                                 (ET_SQRT2_PI * (1.0f + 3.0f * ET_GELU_KAPPA * x_sq));
        dX[i] = dY[i] * (0.5f * (1.0f + t) + right_derivative);
    }
}

/* Mish: x tanh(softplus(x)).  With n = e^x, tanh(log(1 + n)) = n (n + 2) /
 * (n (n + 2) + 2): every term is positive, so nothing cancels at any x, and
 * 1 - tanh is 2 / (n (n + 2) + 2) as exactly as the gradient needs it.
 * Past x = 20 (PyTorch's softplus threshold) the tanh is 1 and e^x would
 * overflow the products. */
static inline float et_mish_tanh_softplus_(float x, float *one_minus)
{
    float n = et_expf(x), u = n * (n + 2.0f), d = u + 2.0f;
    *one_minus = 2.0f / d;
    return u / d;
}

static inline void et_mish_f32(int n, const float *X, float *Y)
{
    int i;
    float unused;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        Y[i] = x > 20.0f ? x : x * et_mish_tanh_softplus_(x, &unused);
    }
}

/* d/dx = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)), as PyTorch's. */
static inline void et_mish_grad_f32(int n, const float *dY, const float *X, float *dX)
{
    int i;
    float om, t;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        if (x > 20.0f) {
            dX[i] = dY[i];
            continue;
        }
        t = et_mish_tanh_softplus_(x, &om);
        dX[i] = dY[i] * (t + x * et_sigmoidf(x) * (om * (1.0f + t)));
    }
}

#endif /* ET_ACTIVATIONS_H */
