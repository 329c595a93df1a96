/* edgetrain runtime: optimizer updates, one parameter tensor per call. */
#ifndef ET_OPTIM_H
#define ET_OPTIM_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_LINALG_H
#include "et_linalg.h"
#endif

/* beta^t by square-and-multiply on the float beta: O(log t) roundings
 * (relative error a few ulp even for t in the millions), and no libm
 * pow, whose results vary between targets. */
static inline float et_powu_(float b, uint32_t t)
{
    float r = 1.0f;
    while (t) {
        if (t & 1u)
            r *= b;
        t >>= 1;
        if (t)
            b *= b;
    }
    return r;
}

/* Adam's bias corrections folded into one step size per step t >= 1,
 * which leaves the per-element update with a single division. */
static inline float et_adam_step_size(float lr, float beta1, float beta2, uint32_t t)
{
    return lr * sqrtf(1.0f - et_powu_(beta2, t)) / (1.0f - et_powu_(beta1, t));
}

/* Update order of ONNX Runtime 1.19's AdamW: the moment-based step first,
 * then decoupled weight decay applied to the updated weight. */
static inline void et_adamw_f32(int n, float step_size, float lr, float beta1,
                                float beta2, float eps, float weight_decay, float *W,
                                const float *G, float *M, float *V)
{
    int i;
    float decay = lr * weight_decay;
    for (i = 0; i < n; ++i) {
        float g = G[i], w;
        float m = beta1 * M[i] + (1.0f - beta1) * g;
        float v = beta2 * V[i] + (1.0f - beta2) * g * g;
        M[i] = m;
        V[i] = v;
        w = W[i] - step_size * m / (sqrtf(v) + eps);
        W[i] = w - decay * w;
    }
}

#if ET_VMLA
/* W[i] = W[i] - lr G[i], fifteen at a time where the FPU has VMLA, in assembly: one VLDM of W and
 * one of G, fifteen VMLS (the multiply rounded, then the subtraction, as et_mls_), one VSTM.  From
 * C, gcc spends a load, a store and an address on every parameter.  Fifteen, because W and G then
 * fill s0-s29 and lr takes one of the two registers left.  blocks >= 1. */
#define ET_SGD_BLOCK 15
#define ET_MLS_(i, j) "vmls.f32 s" #i ", %[lr], s" #j "\n\t"
static inline void et_mls15_vmla_(int blocks, float lr, float *W, const float *G)
{
    __asm__ volatile(
        "1:\n\t"
        "vldmia %[w], {s0-s14}\n\t"
        "vldmia %[g]!, {s15-s29}\n\t"
        ET_MLS_(0, 15) ET_MLS_(1, 16) ET_MLS_(2, 17) ET_MLS_(3, 18) ET_MLS_(4, 19)
        ET_MLS_(5, 20) ET_MLS_(6, 21) ET_MLS_(7, 22) ET_MLS_(8, 23) ET_MLS_(9, 24)
        ET_MLS_(10, 25) ET_MLS_(11, 26) ET_MLS_(12, 27) ET_MLS_(13, 28) ET_MLS_(14, 29)
        "vstmia %[w]!, {s0-s14}\n\t"
        "subs %[n], %[n], #1\n\t"
        "bne 1b"
        : [w] "+r"(W), [g] "+r"(G), [n] "+r"(blocks)
        : [lr] "t"(lr)
        : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15",
          "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28", "s29", "cc",
          "memory");
}
#undef ET_MLS_
#endif

/* torch.optim.SGD (foreach=False) step for step.  The weight_decay and
 * momentum tests mirror PyTorch's: skipping the add is not the same as
 * adding 0 when w is infinite or g is -0. */
static inline void et_sgd_f32(int n, float lr, float momentum, float dampening,
                              int nesterov, float weight_decay, int first_step, float *W,
                              const float *G, float *Buf)
{
    int i = 0, end = n - n % 4;  /* (whole blocks counted up front: see et_dot_lanes_f32_) */
    if (weight_decay == 0.0f && momentum == 0.0f) {  /* plain SGD: a multiply-subtract per parameter */
#if ET_VMLA
        if (n >= ET_SGD_BLOCK) {
            ET_PATH_("sgd_vmla");
            et_mls15_vmla_(n / ET_SGD_BLOCK, lr, W, G);
            i = n - n % ET_SGD_BLOCK;
            end = n - (n - i) % 4;
        }
#endif
        for (; i < end; i += 4) {
            W[i] = et_mls_(W[i], lr, G[i]);
            W[i + 1] = et_mls_(W[i + 1], lr, G[i + 1]);
            W[i + 2] = et_mls_(W[i + 2], lr, G[i + 2]);
            W[i + 3] = et_mls_(W[i + 3], lr, G[i + 3]);
        }
        for (; i < n; ++i)
            W[i] = et_mls_(W[i], lr, G[i]);
        return;
    }
    for (; i < n; ++i) {
        float g = G[i];
        if (weight_decay != 0.0f)
            g = g + weight_decay * W[i];
        if (momentum != 0.0f) {
            float b = first_step ? g : momentum * Buf[i] + (1.0f - dampening) * g;
            Buf[i] = b;
            g = nesterov ? g + momentum * b : b;
        }
        W[i] = W[i] - lr * g;
    }
}

/* Elements of an outer-product gradient that the updates below hold at a time. */
#define ET_OUTER_CHUNK 64

/* The piece of the outer product of A (m) and B (n) from flat element `at`
 * to at most ET_OUTER_CHUNK elements on, within one row, into g: each
 * element 0 + A[i] * B[j], as the Gemm that would have made it
 * (et_scaled_row_f32_).  Returns its length, 0 past the end. */
static inline int et_outer_piece_(int m, const float *A, int n, const float *B, size_t at, float *g)
{
    size_t i = n > 0 ? at / (size_t)n : (size_t)m, j = n > 0 ? at % (size_t)n : 0;
    int len = n - (int)j < ET_OUTER_CHUNK ? n - (int)j : ET_OUTER_CHUNK;
    if (i >= (size_t)m)
        return 0;
    et_scaled_row_f32_(len, A[i], B + j, g, 0);
    return len;
}

/* The updates above for a gradient that is the outer product of A (m) and
 * B (n), made a piece at a time on the stack, never stored whole.  M, V and
 * Buf are laid out as W; Buf may be NULL. */
static inline void et_adamw_outer_f32(int m, const float *A, int n, const float *B, float step_size, float lr,
                                      float beta1, float beta2, float eps, float weight_decay, float *W, float *M,
                                      float *V)
{
    float g[ET_OUTER_CHUNK];
    size_t at;
    int len;
    for (at = 0; (len = et_outer_piece_(m, A, n, B, at, g)) > 0; at += (size_t)len)
        et_adamw_f32(len, step_size, lr, beta1, beta2, eps, weight_decay, W + at, g, M + at, V + at);
}

static inline void et_sgd_outer_f32(int m, const float *A, int n, const float *B, float lr, float momentum,
                                    float dampening, int nesterov, float weight_decay, int first_step, float *W,
                                    float *Buf)
{
    float g[ET_OUTER_CHUNK];
    size_t at;
    int len;
    for (at = 0; (len = et_outer_piece_(m, A, n, B, at, g)) > 0; at += (size_t)len)
        et_sgd_f32(len, lr, momentum, dampening, nesterov, weight_decay, first_step, W + at, g, Buf ? Buf + at : NULL);
}

#endif /* ET_OPTIM_H */
