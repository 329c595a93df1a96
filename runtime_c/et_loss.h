/* edgetrain runtime: losses.  Softmax cross entropy follows PyTorch's
 * CrossEntropyLoss(weight, ignore_index, reduction='mean'); BCE follows
 * BCEWithLogitsLoss with reduction left to the graph. */
#ifndef ET_LOSS_H
#define ET_LOSS_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif
#ifndef ET_SOFTMAX_H
#include "et_softmax.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

/* Labels come from user data at run time, so they are validated before
 * they are used as indices. */
static inline int et_check_labels(int n, const int32_t *labels, int classes,
                                  int ignore_index)
{
    int i;
    for (i = 0; i < n; ++i) {
        int32_t t = labels[i];
        if (t != ignore_index && (t < 0 || t >= classes))
            return ET_BAD_ARGUMENT;
    }
    return ET_OK;
}

/* Weight of one target, or 0 if it takes no part in the loss.  Labels out
 * of range (which et_check_labels rejects beforehand) are treated as
 * ignored so a missed check cannot index out of bounds. */
static inline float et_target_weight_(int32_t t, int C, const float *weights,
                                      int ignore_index)
{
    if (t == ignore_index || t < 0 || t >= C)
        return 0.0f;
    return weights ? weights[t] : 1.0f;
}

/* X is [N, C, D], labels [N, D], log_prob [N, C, D].  When no target
 * counts (all ignored, or their weights sum to 0) PyTorch returns 0/0 =
 * NaN, which would stop training through the non-finite check over a batch
 * that merely has nothing to learn from; the loss is 0 instead, and the
 * gradient kernel correspondingly gives 0. */
static inline void et_softmax_cross_entropy_f32(int N, int C, int D, const float *X,
                                                const int32_t *labels,
                                                const float *weights, int ignore_index,
                                                float *loss, float *log_prob)
{
    int i, d;
    float num = 0.0f, den = 0.0f;
    et_log_softmax_f32(N, C, D, X, log_prob);
    for (i = 0; i < N; ++i)
        for (d = 0; d < D; ++d) {
            int32_t t = labels[(size_t)i * (size_t)D + (size_t)d];
            float w = et_target_weight_(t, C, weights, ignore_index);
            if (w == 0.0f)
                continue;
            num += w * -log_prob[((size_t)i * (size_t)C + (size_t)t) * (size_t)D + (size_t)d];
            den += w;
        }
    *loss = den != 0.0f ? num / den : 0.0f;
}

static inline void et_softmax_cross_entropy_grad_f32(int N, int C, int D,
                                                     const float *dloss,
                                                     const float *log_prob,
                                                     const int32_t *labels,
                                                     const float *weights,
                                                     int ignore_index, float *dX)
{
    int i, c, d;
    float den = 0.0f;
    /* Same order as the forward pass, so the same total weight. */
    for (i = 0; i < N * D; ++i)
        den += et_target_weight_(labels[i], C, weights, ignore_index);
    for (i = 0; i < N; ++i)
        for (d = 0; d < D; ++d) {
            int32_t t = labels[(size_t)i * (size_t)D + (size_t)d];
            float w = et_target_weight_(t, C, weights, ignore_index);
            float g = den != 0.0f ? dloss[0] * (w / den) : 0.0f;
            if (D == 1 && w != 0.0f) {  /* a row of C contiguous values: its exps eight at a time with vectors */
                float *dx = dX + (size_t)i * (size_t)C;
                et_exp_f32(C, log_prob + (size_t)i * (size_t)C, dx);
                for (c = 0; c < C; ++c)
                    dx[c] = g * (dx[c] - (c == t ? 1.0f : 0.0f));
                continue;
            }
            for (c = 0; c < C; ++c) {
                size_t k = ((size_t)i * (size_t)C + (size_t)c) * (size_t)D + (size_t)d;
                if (w == 0.0f)
                    dX[k] = 0.0f;
                else
                    dX[k] = g * (et_expf(log_prob[k]) - (c == t ? 1.0f : 0.0f));
            }
        }
}

/* max(x,0) - x*t + log(1 + exp(-|x|)) never exponentiates a positive
 * number, so it is finite for any finite x. */
static inline void et_bce_with_logits_f32(int n, const float *X, const float *T, float *L)
{
    int i;
    for (i = 0; i < n; ++i) {
        float x = X[i];
        L[i] = ((x > 0.0f ? x : 0.0f) - x * T[i]) + et_softplus_neg_abs(x);
    }
}

static inline void et_bce_with_logits_grad_f32(int n, const float *dL, const float *X,
                                               const float *T, float *dX)
{
    int i;
    for (i = 0; i < n; ++i)
        dX[i] = dL[i] * (et_sigmoidf(X[i]) - T[i]);
}

#endif /* ET_LOSS_H */
