/* edgetrain runtime: checks behind "a training step that is not finite changes nothing". */
#ifndef ET_FINITE_H
#define ET_FINITE_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif

/* The largest |X[i]| of n elements as its bit pattern shifted left by one, which drops the sign:
 * shifted so, floats order as their magnitudes do, with infinities and then NaNs above every finite
 * one.  An integer pass, which costs a Cortex-M about half what comparing floats does. */
static inline uint32_t et_magnitude_shifted_(int n, const float *X)
{
    uint32_t largest = 0, v;
    int i;
    for (i = 0; i < n; ++i) {
        v = et_f32_bits(X[i]) << 1;
        largest = v > largest ? v : largest;
    }
    return largest;
}

/* Whether Acc + G, the sum et_accumulate_f32 stores, is finite everywhere.  Gradients that are
 * finite one by one can still overflow their running sum; checking before any accumulator changes
 * lets train_step refuse such a step whole. */
static ET_NOINLINE int et_sum_finite_f32(int n, const float *G, const float *Acc)
{
    int i;
    for (i = 0; i < n; ++i)
        if (!et_is_finite_f32(Acc[i] + G[i]))
            return 0;
    return 1;
}

/* Whether every element 0 + A[i] * B[j] of an outer product is finite, read from its factors
 * alone: rounding is monotonic, so no product is larger in magnitude than the rounded product of
 * the largest factors, which is one of them.  A factor that is not finite is the largest of its
 * side, and its product with the other side's largest is not finite either (infinity times 0 is
 * NaN). */
static inline int et_outer_finite_f32(int m, const float *A, int n, const float *B)
{
    return et_is_finite_f32(et_f32_from_bits(et_magnitude_shifted_(m, A) >> 1) *
                            et_f32_from_bits(et_magnitude_shifted_(n, B) >> 1));
}

/* et_sum_finite_f32 for a gradient that is the outer product of A (m) and B (n). */
static inline int et_outer_sum_finite_f32(int m, const float *A, int n, const float *B, const float *Acc)
{
    int i, j;
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j)
            if (!et_is_finite_f32(Acc[(size_t)i * (size_t)n + (size_t)j] + (0.0f + A[i] * B[j])))
                return 0;
    return 1;
}

/* A status for the fused update: a parameter is updated only from a finite gradient. */
static inline int et_check_finite_f32(int n, const float *X)
{
    return et_all_finite_f32(n, X) ? ET_OK : ET_NON_FINITE;
}

/* et_check_finite_f32 for a gradient that is the outer product of A (m) and B (n). */
static inline int et_check_outer_finite_f32(int m, const float *A, int n, const float *B)
{
    return et_outer_finite_f32(m, A, n, B) ? ET_OK : ET_NON_FINITE;
}

#endif /* ET_FINITE_H */
