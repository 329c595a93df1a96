/* edgetrain runtime: Einsum.
 *
 * The compiler spells an equation out as strides: the output's letters
 * ("free") and the letters summed over, each with an extent, and per
 * operand the element stride of every letter (0 where the operand lacks
 * it; a letter repeated in an operand, a diagonal, has the sum of its
 * axes' strides).  Equations that are batched matrix products, which is
 * what attention writes, go to the Gemm kernels instead. */
#ifndef ET_EINSUM_H
#define ET_EINSUM_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif
#ifndef ET_LINALG_H
#include "et_linalg.h"
#endif

/* Y (contiguous over the free letters) = the sum over the summed letters
 * of A * B * C, with up to three operands (C, or B and C, may be NULL).  Each
 * operand's strides list its free letters' strides, then its summed
 * ones'.  Terms are taken in row-major order of the summed letters, term
 * t into lane t % ET_LANES, and the lanes added as a dot product's are
 * (et_linalg.h): a fixed order, and a long sum's error grows like its
 * length over ET_LANES. */
static inline void et_einsum_f32(int free_rank, const int *free_shape, int sum_rank, const int *sum_shape,
                                 const int *a_strides, const float *A, const int *b_strides, const float *B,
                                 const int *c_strides, const float *C, float *Y)
{
    const float *ops[3] = {A, B, C};
    const int *strides[3] = {a_strides, b_strides, c_strides};
    int free_idx[ET_MAX_RANK] = {0}, sum_idx[ET_MAX_RANK];
    int n_free = et_numel_(free_rank, free_shape), n_sum = et_numel_(sum_rank, sum_shape);
    int base[3] = {0, 0, 0}, off[3], o, t, q, d, count = B ? (C ? 3 : 2) : 1;
    for (o = 0; o < n_free; ++o) {
        float lane[ET_LANES] = {0.0f}, term;
        for (q = 0; q < count; ++q)
            off[q] = base[q];
        for (d = 0; d < sum_rank; ++d)
            sum_idx[d] = 0;
        for (t = 0; t < n_sum; ++t) {
            term = ops[0][off[0]];
            for (q = 1; q < count; ++q)
                term *= ops[q][off[q]];
            lane[t % ET_LANES] += term;
            /* Row-major odometer over the summed letters. */
            for (d = sum_rank - 1; d >= 0; --d) {
                for (q = 0; q < count; ++q)
                    off[q] += strides[q][free_rank + d];
                if (++sum_idx[d] < sum_shape[d])
                    break;
                for (q = 0; q < count; ++q)
                    off[q] -= strides[q][free_rank + d] * sum_shape[d];
                sum_idx[d] = 0;
            }
        }
        Y[o] = et_dot_total_f32_(lane);
        for (d = free_rank - 1; d >= 0; --d) {
            for (q = 0; q < count; ++q)
                base[q] += strides[q][d];
            if (++free_idx[d] < free_shape[d])
                break;
            for (q = 0; q < count; ++q)
                base[q] -= strides[q][d] * free_shape[d];
            free_idx[d] = 0;
        }
    }
}

/* Y[t] = op(A[t]) op(B[t]) for t < batch: M x K times K x N, each operand
 * stored contiguously (op transposes where asked), Y[t] M x N. */
static inline void et_einsum_gemm_f32(int batch, int M, int N, int K, const float *A, int trans_a, const float *B,
                                      int trans_b, float *Y)
{
    int t;
    for (t = 0; t < batch; ++t)
        et_gemm_f32(M, N, K, 1.0f, A + (size_t)t * (size_t)M * (size_t)K, trans_a,
                    B + (size_t)t * (size_t)K * (size_t)N, trans_b, 0.0f, NULL, 0, 0,
                    Y + (size_t)t * (size_t)M * (size_t)N);
}

#endif /* ET_EINSUM_H */
