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

/* Rows that share each load of a common operand: four output rows of a
 * matrix product (or four dot products) keep their partial sums in
 * registers or L1 while the shared row streams past once. */
#define ET_GEMM_ROWS 4

/* et_dot_lanes_f32_ of `a` with rows (1 or ET_GEMM_ROWS) of b, `b_rs`
 * apart, into consecutive lane sets: each load of `a` serves every row,
 * and the rows' independent sums keep the FPU busy. */
static inline void et_dot_rows_f32_(int rows, int n, const float *restrict a, int a_step,
                                    const float *restrict b, size_t b_rs, float *restrict lane)
{
    int blocks = rows == ET_GEMM_ROWS && a_step == 1 ? n / ET_LANES : 0, i, j, l, r;
    /* Two blocks per pass: each lane is loaded and stored once for both,
     * and still adds their products one after the other. */
    for (i = 0; i + 1 < blocks; i += 2)
        for (l = 0; l < ET_LANES; ++l) {
            int at = i * ET_LANES + l, at2 = at + ET_LANES;
            float x = a[at], x2 = a[at2];
            lane[l] = (lane[l] + x * b[at]) + x2 * b[at2];
            lane[ET_LANES + l] = (lane[ET_LANES + l] + x * b[b_rs + at]) + x2 * b[b_rs + at2];
            lane[2 * ET_LANES + l] = (lane[2 * ET_LANES + l] + x * b[2 * b_rs + at]) + x2 * b[2 * b_rs + at2];
            lane[3 * ET_LANES + l] = (lane[3 * ET_LANES + l] + x * b[3 * b_rs + at]) + x2 * b[3 * b_rs + at2];
        }
    for (; i < blocks; ++i)
        for (l = 0; l < ET_LANES; ++l) {
            int at = i * ET_LANES + l;
            float x = a[at];
            lane[l] += x * b[at];
            lane[ET_LANES + l] += x * b[b_rs + at];
            lane[2 * ET_LANES + l] += x * b[2 * b_rs + at];
            lane[3 * ET_LANES + l] += x * b[3 * b_rs + at];
        }
    if (!blocks) {
        for (r = 0; r < rows; ++r)
            et_dot_lanes_f32_(n, a, a_step, b + r * b_rs, lane + r * ET_LANES);
        return;
    }
    for (r = 0; r < rows; ++r)  /* the tail after the whole blocks */
        for (j = blocks * ET_LANES; j < n; ++j)
            lane[r * ET_LANES + j % ET_LANES] += a[j] * b[r * b_rs + j];
}

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

/* y_r[j] = (y_r[j] + v[r * step] * x[j]) + w[r * step] * z[j] for rows
 * r < rows (1 or ET_GEMM_ROWS), the rows `y_rs` apart, and j < n: two
 * terms of each sum in one pass over the outputs, still added one after
 * the other, so each output is loaded and stored half as often. */
static inline void et_axpy2_f32_(int rows, int n, const float *v, const float *w, int step, const float *restrict x,
                                 const float *restrict z, float *restrict y, size_t y_rs)
{
    int j, r;
    if (rows == ET_GEMM_ROWS) {
        float v0 = v[0], v1 = v[step], v2 = v[2 * step], v3 = v[3 * step];
        float w0 = w[0], w1 = w[step], w2 = w[2 * step], w3 = w[3 * step];
        float *restrict y0 = y, *restrict y1 = y + y_rs, *restrict y2 = y + 2 * y_rs, *restrict y3 = y + 3 * y_rs;
        for (j = 0; j < n; ++j) {
            float xj = x[j], zj = z[j];
            y0[j] = (y0[j] + v0 * xj) + w0 * zj;
            y1[j] = (y1[j] + v1 * xj) + w1 * zj;
            y2[j] = (y2[j] + v2 * xj) + w2 * zj;
            y3[j] = (y3[j] + v3 * xj) + w3 * zj;
        }
        return;
    }
    for (r = 0; r < rows; ++r)
        for (j = 0; j < n; ++j)
            y[r * y_rs + (size_t)j] = (y[r * y_rs + (size_t)j] + v[r * step] * x[j]) + w[r * step] * z[j];
}

/* y_r[j] = sum over k of a_r[k * a_ks] * B[k * N + j] for rows r < rows
 * (1 or ET_GEMM_ROWS), `N` apart in y, and j < n: B row k is read once for
 * all rows.  The sum starts from its first product rather than from 0 +
 * that product: the same value, save that a -0 stays -0. */
static inline void et_gemm_rows_f32_(int rows, int n, int N, int K, const float *a, int a_rs, int a_ks,
                                     const float *restrict B, float *restrict y)
{
    int j, k, r;
    for (r = 0; r < rows; ++r) {
        float *restrict yr = y + (size_t)r * (size_t)N;
        if (!K)
            for (j = 0; j < n; ++j)
                yr[j] = 0.0f;
        else
            for (j = 0; j < n; ++j)
                yr[j] = a[r * a_rs] * B[j];
    }
    for (k = 1; k + 1 < K; k += 2)
        et_axpy2_f32_(rows, n, a + k * a_ks, a + (k + 1) * a_ks, a_rs, B + (size_t)k * (size_t)N,
                      B + (size_t)(k + 1) * (size_t)N, y, (size_t)N);
    if (k < K && rows == ET_GEMM_ROWS)
        et_axpy4_f32_(n, a[k * a_ks], a[a_rs + k * a_ks], a[2 * a_rs + k * a_ks], a[3 * a_rs + k * a_ks],
                      B + (size_t)k * (size_t)N, y, y + N, y + 2 * (size_t)N, y + 3 * (size_t)N);
    else if (k < K)
        for (j = 0; j < n; ++j)
            y[j] += a[k * a_ks] * B[(size_t)k * (size_t)N + (size_t)j];
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
                rows = M - i < ET_GEMM_ROWS ? 1 : ET_GEMM_ROWS;
                et_gemm_rows_f32_(rows, n, N, K, A + (size_t)i * (size_t)a_rs, a_rs, a_ks, B + j0,
                                  Y + (size_t)i * (size_t)N + (size_t)j0);
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
