/* edgetrain runtime: softmax and log-softmax over the middle axis of X
 * viewed as [outer, n, inner], with their gradients.  Sums run over j in
 * order for reproducibility.  Y may be X (and dX may be dY): no input
 * value is read after its own slot has been written. */
#ifndef ET_SOFTMAX_H
#define ET_SOFTMAX_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

static inline float et_line_max_(int n, int inner, const float *X)
{
    int j;
    float m = X[0];
    for (j = 1; j < n; ++j)
        if (X[(size_t)j * (size_t)inner] > m)
            m = X[(size_t)j * (size_t)inner];
    return m;
}

/* Subtracting the max keeps exp from overflowing; the largest term is 1,
 * so the sum is >= 1 and the division is safe. */
static inline void et_softmax_f32(int outer, int n, int inner, const float *X, float *Y)
{
    int o, c, j;
    if (n <= 0)
        return;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < inner; ++c) {
            size_t base = (size_t)o * (size_t)n * (size_t)inner + (size_t)c;
            const float *x = X + base;
            float *y = Y + base;
            float m = et_line_max_(n, inner, x), s = 0.0f;
            if (inner == 1) {  /* a contiguous line: its exps eight at a time where the host has vectors */
                for (j = 0; j < n; ++j)
                    y[j] = x[j] - m;
                et_exp_f32(n, y, y);
                for (j = 0; j < n; ++j)
                    s += y[j];
            } else
                for (j = 0; j < n; ++j) {
                    float e = et_expf(x[(size_t)j * (size_t)inner] - m);
                    y[(size_t)j * (size_t)inner] = e;
                    s += e;
                }
            for (j = 0; j < n; ++j)
                y[(size_t)j * (size_t)inner] /= s;
        }
}

static inline void et_log_softmax_f32(int outer, int n, int inner, const float *X, float *Y)
{
    int o, c, j;
    if (n <= 0)
        return;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < inner; ++c) {
            size_t base = (size_t)o * (size_t)n * (size_t)inner + (size_t)c;
            const float *x = X + base;
            float *y = Y + base;
            float m = et_line_max_(n, inner, x), s = 0.0f, ls;
            if (inner == 1) {  /* a contiguous line: x - m in y, then its exps eight at a time, summed in order */
                float e[8];
                for (j = 0; j < n; ++j)
                    y[j] = x[j] - m;
                for (j = 0; j < n; j += 8) {
                    int l, count = n - j < 8 ? n - j : 8;
                    et_exp_f32(count, y + j, e);
                    for (l = 0; l < count; ++l)
                        s += e[l];
                }
                ls = et_logf(s);
                for (j = 0; j < n; ++j)
                    y[j] = y[j] - ls;
                continue;
            }
            for (j = 0; j < n; ++j)
                s += et_expf(x[(size_t)j * (size_t)inner] - m);
            ls = et_logf(s);
            for (j = 0; j < n; ++j)
                y[(size_t)j * (size_t)inner] = (x[(size_t)j * (size_t)inner] - m) - ls;
        }
}

static inline void et_softmax_grad_f32(int outer, int n, int inner, const float *dY,
                                       const float *Y, float *dX)
{
    int o, c, j;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < inner; ++c) {
            size_t base = (size_t)o * (size_t)n * (size_t)inner + (size_t)c;
            float dot = 0.0f;
            for (j = 0; j < n; ++j) {
                size_t k = base + (size_t)j * (size_t)inner;
                dot += dY[k] * Y[k];
            }
            for (j = 0; j < n; ++j) {
                size_t k = base + (size_t)j * (size_t)inner;
                dX[k] = Y[k] * (dY[k] - dot);
            }
        }
}

/* Y is the log-softmax output, so exp(Y) is the softmax. */
static inline void et_log_softmax_grad_f32(int outer, int n, int inner, const float *dY,
                                           const float *Y, float *dX)
{
    int o, c, j;
    for (o = 0; o < outer; ++o)
        for (c = 0; c < inner; ++c) {
            size_t base = (size_t)o * (size_t)n * (size_t)inner + (size_t)c;
            float s = 0.0f;
            for (j = 0; j < n; ++j)
                s += dY[base + (size_t)j * (size_t)inner];
            for (j = 0; j < n; ++j) {
                size_t k = base + (size_t)j * (size_t)inner;
                dX[k] = dY[k] - et_expf(Y[k]) * s;
            }
        }
}

#endif /* ET_SOFTMAX_H */
