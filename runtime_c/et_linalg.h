/* edgetrain runtime: matrix products.
 *
 * Every output element is summed over k = 0..K-1 in order, starting from
 * 0, whatever the loop nest; the loop nests differ only to keep the inner
 * loop on contiguous memory.  That fixes the rounding, so host and device
 * agree bit for bit.  Y must not overlap A, B or C. */
#ifndef ET_LINALG_H
#define ET_LINALG_H

static inline void et_gemm_f32(int M, int N, int K, float alpha, const float *A,
                               int trans_a, const float *B, int trans_b, float beta,
                               const float *C, int c_rs, int c_cs, float *Y)
{
    /* Element (i,k) of op(A) is A[i*a_rs + k*a_ks]; likewise for B. */
    int a_rs = trans_a ? 1 : K, a_ks = trans_a ? M : 1;
    int b_ks = trans_b ? 1 : N, b_cs = trans_b ? K : 1;
    int i, j, k;
    for (i = 0; i < M; ++i) {
        float *y = Y + (size_t)i * (size_t)N;
        const float *a = A + (size_t)i * (size_t)a_rs;
        if (trans_b) {
            /* B rows are contiguous in k: plain dot products. */
            for (j = 0; j < N; ++j) {
                const float *b = B + (size_t)j * (size_t)b_cs;
                float acc = 0.0f;
                for (k = 0; k < K; ++k)
                    acc += a[k * a_ks] * b[k];
                y[j] = acc;
            }
        } else {
            /* B rows are contiguous in j: accumulate in the output row. */
            for (j = 0; j < N; ++j)
                y[j] = 0.0f;
            for (k = 0; k < K; ++k) {
                const float *b = B + (size_t)k * (size_t)b_ks;
                float aik = a[k * a_ks];
                for (j = 0; j < N; ++j)
                    y[j] += aik * b[j];
            }
        }
        for (j = 0; j < N; ++j) {
            float v = alpha * y[j];
            if (C)
                v += beta * C[(ptrdiff_t)i * c_rs + (ptrdiff_t)j * c_cs];
            y[j] = v;
        }
    }
}

static inline void et_matmul_f32(int batch_rank, const int *batch_shape,
                                 const int *a_strides, const int *b_strides, int M,
                                 int N, int K, const float *A, const float *B, float *Y)
{
    int idx[ET_MAX_RANK] = {0};
    int batches = 1, t, d;
    size_t ao = 0, bo = 0;
    for (d = 0; d < batch_rank; ++d)
        batches *= batch_shape[d];
    for (t = 0; t < batches; ++t) {
        et_gemm_f32(M, N, K, 1.0f, A + ao, 0, B + bo, 0, 0.0f, NULL, 0, 0,
                    Y + (size_t)t * (size_t)M * (size_t)N);
        /* Row-major odometer over the batch axes. */
        for (d = batch_rank - 1; d >= 0; --d) {
            ao += (size_t)a_strides[d];
            bo += (size_t)b_strides[d];
            if (++idx[d] < batch_shape[d])
                break;
            ao -= (size_t)a_strides[d] * (size_t)batch_shape[d];
            bo -= (size_t)b_strides[d] * (size_t)batch_shape[d];
            idx[d] = 0;
        }
    }
}

#endif /* ET_LINALG_H */
