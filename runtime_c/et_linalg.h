/* edgetrain runtime: matrix products, and the fixed-order dot product the
 * convolution kernels share.
 *
 * Rounding is fixed by the C text, never by the compiler: outputs that
 * run along a contiguous row are summed over k = 0..K-1 in order, starting
 * from 0, with the loop over outputs innermost so compilers vectorize
 * across independent outputs; a dot product of two contiguous vectors
 * (op(B) transposed) keeps ET_LANES interleaved partial sums, added in one
 * stated order.  Either way every target computes the same bits whether
 * or not it vectorizes (no reassociation, no FMA contraction: see
 * et_common.h).  Y must not overlap A, B or C. */
#ifndef ET_LINALG_H
#define ET_LINALG_H

/* Partial sums of a dot product: within each piece added (a whole dot
 * product, or one row of a convolution window), lane l holds the products
 * of elements l, l + ET_LANES, l + 2 * ET_LANES, ...  Eight lanes fill two
 * SSE or one AVX register and cost nothing on a scalar FPU. */
#define ET_LANES 8

/* lane[j % ET_LANES] += a[j * a_step] * b[j] for j < n.  (Whole blocks
 * are counted up front: a `j + ET_LANES <= n` loop makes 32-bit gcc warn
 * of an overflow in the tail loop that follows.) */
static inline void et_dot_lanes_f32_(int n, const float *restrict a, int a_step, const float *restrict b,
                                     float *restrict lane)
{
    int blocks = a_step == 1 ? n / ET_LANES : 0, i, j, l;
    for (i = 0; i < blocks; ++i)
        for (l = 0; l < ET_LANES; ++l)
            lane[l] += a[i * ET_LANES + l] * b[i * ET_LANES + l];
    for (j = blocks * ET_LANES; j < n; ++j)
        lane[j % ET_LANES] += a[j * a_step] * b[j];
}

/* The lanes' sum, pairwise in a fixed order. */
static inline float et_dot_total_f32_(const float *lane)
{
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* Rows of op(A) that share each load of a B row: four output rows keep
 * their partial sums in registers or L1 while B streams past once. */
#define ET_GEMM_ROWS 4
/* Columns per block: a block of B rows (K x 64 floats) stays in cache
 * while every block of rows reads it. */
#define ET_GEMM_COLS 64

/* y_r[j] += w_r * x[j] for j < n and four rows: each load of x serves
 * all four, and saying that nothing overlaps (restrict) lets compilers
 * vectorize over j; each y element still gets its own single product. */
static inline void et_axpy4_f32_(int n, float w0, float w1, float w2, float w3, const float *restrict x,
                                 float *restrict y0, float *restrict y1, float *restrict y2, float *restrict y3)
{
    int j;
    for (j = 0; j < n; ++j) {
        float xj = x[j];
        y0[j] += w0 * xj;
        y1[j] += w1 * xj;
        y2[j] += w2 * xj;
        y3[j] += w3 * xj;
    }
}

/* y_r[j] = sum over k of a_r[k * a_ks] * B[k * N + j] for rows r < rows
 * (1 or ET_GEMM_ROWS), j < n: B row k is read once for all rows. */
static inline void et_gemm_rows_f32_(int rows, int n, int N, int K, const float *a, int a_rs, int a_ks,
                                     const float *restrict B, float *restrict y0, float *restrict y1,
                                     float *restrict y2, float *restrict y3)
{
    int j, k;
    for (j = 0; j < n; ++j)
        y0[j] = 0.0f;
    if (rows == 1) {
        for (k = 0; k < K; ++k) {
            const float *b = B + (size_t)k * (size_t)N;
            float a0 = a[k * a_ks];
            for (j = 0; j < n; ++j)
                y0[j] += a0 * b[j];
        }
        return;
    }
    for (j = 0; j < n; ++j)
        y1[j] = y2[j] = y3[j] = 0.0f;
    for (k = 0; k < K; ++k)
        et_axpy4_f32_(n, a[k * a_ks], a[a_rs + k * a_ks], a[2 * a_rs + k * a_ks], a[3 * a_rs + k * a_ks],
                      B + (size_t)k * (size_t)N, y0, y1, y2, y3);
}

static inline void et_gemm_f32(int M, int N, int K, float alpha, const float *A, int trans_a,
                               const float *B, int trans_b, float beta, const float *C, int c_rs,
                               int c_cs, float *Y)
{
    /* Element (i,k) of op(A) is A[i*a_rs + k*a_ks]. */
    int a_rs = trans_a ? 1 : K, a_ks = trans_a ? M : 1;
    int i, j, j0, n, rows;
    if (trans_b) {
        /* Rows of B are contiguous in k: one dot product per output. */
        for (i = 0; i < M; ++i)
            for (j = 0; j < N; ++j) {
                float lane[ET_LANES] = {0.0f};
                et_dot_lanes_f32_(K, A + (size_t)i * (size_t)a_rs, a_ks, B + (size_t)j * (size_t)K, lane);
                Y[(size_t)i * (size_t)N + (size_t)j] = et_dot_total_f32_(lane);
            }
    } else {
        for (j0 = 0; j0 < N; j0 += ET_GEMM_COLS) {
            n = N - j0 < ET_GEMM_COLS ? N - j0 : ET_GEMM_COLS;
            for (i = 0; i < M; i += rows) {
                float *y = Y + (size_t)i * (size_t)N + (size_t)j0;
                size_t next;  /* from one output row to the next, 0 past the last */
                rows = M - i < ET_GEMM_ROWS ? 1 : ET_GEMM_ROWS;
                next = rows == 1 ? 0 : (size_t)N;
                et_gemm_rows_f32_(rows, n, N, K, A + (size_t)i * (size_t)a_rs, a_rs, a_ks, B + j0, y, y + next,
                                  y + 2 * next, y + 3 * next);
            }
        }
    }
    if (alpha == 1.0f && !C)
        return;  /* multiplying by 1 changes no bits: save a pass over Y */
    for (i = 0; i < M; ++i)
        for (j = 0; j < N; ++j) {
            float *y = Y + (size_t)i * (size_t)N + (size_t)j;
            float v = alpha * *y;
            if (C)
                v += beta * C[(ptrdiff_t)i * c_rs + (ptrdiff_t)j * c_cs];
            *y = v;
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
