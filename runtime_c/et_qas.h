/* edgetrain runtime: the optimizer updates of trained int8 weights stored as integers. */
#ifndef ET_QAS_H
#define ET_QAS_H

#ifndef ET_OPTIM_H
#include "et_optim.h"
#endif
#ifndef ET_QUANTIZE_H
#include "et_quantize.h"
#endif
#ifndef ET_RANDOM_H
#include "et_random.h"
#endif

/* Quantization-aware scaling (QAS), as the Tiny Training Engine trains int8
 * weights: a trained weight is stored as its int8 values Q alone, its float
 * value being scale[j / inner] * Q[j].  The "_q8" updates run et_optim.h's
 * float update on those values, ET_QAS_CHUNK at a time on the stack, and
 * store each result back on the grid rounded stochastically: up with the
 * probability of its distance above the grid point below, so the update is
 * unbiased and steps smaller than a grid step are not lost on average.
 * Element j's draw is et_random.h's bits of (ET_QAS_SEED, counter, at + j),
 * at being its index among every trainable element and counter the
 * optimizer's step count, so every target and a resumed run round alike.  The result saturates to [-128, 127]. */
#define ET_QAS_CHUNK 32
#define ET_QAS_SEED 0x51A5u

/* The float values of Q from element `from` on, at most ET_QAS_CHUNK of
 * them, into w; returns how many, 0 past the end. */
static inline int et_qas_load_(int n, int from, const int8_t *Q, const float *scale, int inner, float *w)
{
    int j, len = n - from;
    if (len > ET_QAS_CHUNK)
        len = ET_QAS_CHUNK;
    for (j = 0; j < len; ++j)
        w[j] = scale[(from + j) / inner] * (float)Q[from + j];
    return len < 0 ? 0 : len;
}

static inline void et_qas_store_(int len, int from, const float *w, const float *scale, int inner, uint32_t at,
                                 uint32_t counter, int8_t *Q)
{
    int j;
    for (j = 0; j < len; ++j) {
        float x = w[j] / scale[(from + j) / inner], below, u;
        x = x > -129.0f ? (x < 128.0f ? x : 128.0f) : -129.0f; /* NaN too: it saturates to -128 */
        below = (float)(int32_t)x;  /* truncation, so one less where x is negative and not whole */
        if (below > x)
            below -= 1.0f;
        u = et_unit_f32_(et_random_bits_(ET_QAS_SEED, counter, at + (uint32_t)(from + j)));
        Q[from + j] = (int8_t)et_saturate_(u < x - below ? below + 1.0f : below, -128, 127);
    }
}

static inline void et_sgd_q8_f32(int n, const float *scale, int inner, uint32_t at, uint32_t counter, float lr,
                                 float momentum, float dampening, int nesterov, float weight_decay, int first_step,
                                 int8_t *Q, const float *G, float *Buf)
{
    float w[ET_QAS_CHUNK];
    int from, len;
    for (from = 0; (len = et_qas_load_(n, from, Q, scale, inner, w)) > 0; from += len) {
        et_sgd_f32(len, lr, momentum, dampening, nesterov, weight_decay, first_step, w, G + from,
                   Buf ? Buf + from : NULL);
        et_qas_store_(len, from, w, scale, inner, at, counter, Q);
    }
}

static inline void et_adamw_q8_f32(int n, const float *scale, int inner, uint32_t at, uint32_t counter,
                                   float step_size, float lr, float beta1, float beta2, float eps,
                                   float weight_decay, int8_t *Q, const float *G, float *M, float *V)
{
    float w[ET_QAS_CHUNK];
    int from, len;
    for (from = 0; (len = et_qas_load_(n, from, Q, scale, inner, w)) > 0; from += len) {
        et_adamw_f32(len, step_size, lr, beta1, beta2, eps, weight_decay, w, G + from, M + from, V + from);
        et_qas_store_(len, from, w, scale, inner, at, counter, Q);
    }
}

/* Elements [at, at + len) of the outer product of A (m) and B (n), into g:
 * et_optim.h's pieces of it, a chunk of a weight's elements crossing rows. */
static inline void et_outer_span_(int m, const float *A, int n, const float *B, size_t at, int len, float *g)
{
    int done = 0, piece;
    while (done < len && (piece = et_outer_piece_(m, A, n, B, at + (size_t)done, g + done)) > 0)
        done += piece < len - done ? piece : len - done;
}

/* The "_q8" updates for a gradient that is the outer product of A (m) and B
 * (n), as et_optim.h's "_outer" ones make it: a chunk at a time beside the
 * weights', never stored whole. */
static inline void et_sgd_q8_outer_f32(int m, const float *A, int n, const float *B, const float *scale, int inner,
                                       uint32_t at, uint32_t counter, float lr, float momentum, float dampening,
                                       int nesterov, float weight_decay, int first_step, int8_t *Q, float *Buf)
{
    float w[ET_QAS_CHUNK], g[ET_OUTER_CHUNK + ET_QAS_CHUNK];
    int from, len;
    for (from = 0; (len = et_qas_load_(m * n, from, Q, scale, inner, w)) > 0; from += len) {
        et_outer_span_(m, A, n, B, (size_t)from, len, g);
        et_sgd_f32(len, lr, momentum, dampening, nesterov, weight_decay, first_step, w, g, Buf ? Buf + from : NULL);
        et_qas_store_(len, from, w, scale, inner, at, counter, Q);
    }
}

static inline void et_adamw_q8_outer_f32(int m, const float *A, int n, const float *B, const float *scale, int inner,
                                         uint32_t at, uint32_t counter, float step_size, float lr, float beta1,
                                         float beta2, float eps, float weight_decay, int8_t *Q, float *M, float *V)
{
    float w[ET_QAS_CHUNK], g[ET_OUTER_CHUNK + ET_QAS_CHUNK];
    int from, len;
    for (from = 0; (len = et_qas_load_(m * n, from, Q, scale, inner, w)) > 0; from += len) {
        et_outer_span_(m, A, n, B, (size_t)from, len, g);
        et_adamw_f32(len, step_size, lr, beta1, beta2, eps, weight_decay, w, g, M + from, V + from);
        et_qas_store_(len, from, w, scale, inner, at, counter, Q);
    }
}

#endif /* ET_QAS_H */
