/* edgetrain runtime: convolution (ONNX Conv), transposed convolution
 * (ONNX ConvTranspose, which is also Conv's input gradient) and Conv's
 * weight gradient.
 *
 * Geometry is always 3-D: the compiler pads 1-D and 2-D problems with
 * leading unit axes (size 1, kernel 1, stride 1, dilation 1, pad 0), so one
 * loop nest serves every rank.  Arrays `in`, `out`, `k`, `s`, `d`, `p` hold
 * 3 ints each: input and output spatial sizes, kernel size, strides,
 * dilations and leading pads.  Trailing pads need no argument: taps that
 * fall outside the input contribute nothing, and the output size is given.
 * Along an axis, output position o reads input position o*s + k*d - p.
 *
 * Channel grouping follows ONNX: X has C channels, Y has M, group g uses
 * input channels [g*C/G, (g+1)*C/G) and output channels [g*M/G, (g+1)*M/G).
 * Conv weights are [M, C/G, k0, k1, k2]; ConvTranspose weights are
 * [C, M/G, k0, k1, k2].
 *
 * Every output element is summed in one fixed order (stated per kernel),
 * starting from 0 (or the bias), so results are bit-identical across
 * targets.  Outputs must not overlap inputs. */
#ifndef ET_CONV_H
#define ET_CONV_H

/* ceil(a / b) for b > 0 and a of either sign (C division truncates). */
static inline int et_conv_ceil_div_(int a, int b)
{
    return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

/* The positions t in [0, n) with 0 <= t*step + off < len, as [*lo, *hi).
 * Clipping ranges up front keeps bounds tests out of the inner loops. */
static inline void et_conv_span_(int step, int off, int len, int n, int *lo, int *hi)
{
    /* Unit steps (most taps) need no division. */
    int a = step == 1 ? -off : et_conv_ceil_div_(-off, step);
    int b = step == 1 ? len - off : et_conv_ceil_div_(len - off, step);
    *lo = a > 0 ? a : 0;
    *hi = b < n ? b : n;
    if (*hi < *lo)
        *hi = *lo;
}

static inline int et_conv_volume_(const int *v)
{
    return v[0] * v[1] * v[2];
}

/* Output channels that share each load of an input row: the forward and
 * transposed kernels run four output rows at once where a group has four
 * channels left, one otherwise. */
#define ET_CONV_ROWS 4

/* y_r[j * y_step] += w[r * w_step] * x[j * x_step] for j < n and rows
 * r < rows (1 or ET_CONV_ROWS), the rows `y_rs` apart: the inner loop of
 * both convolution directions.  Outputs never overlap inputs. */
static inline void et_conv_axpy_(int rows, int n, const float *w, int w_step, const float *restrict x,
                                 int x_step, float *restrict y, size_t y_rs, int y_step)
{
    int j, r;
    if (rows == ET_CONV_ROWS && x_step == 1 && y_step == 1) {
        et_axpy4_f32_(n, w[0], w[w_step], w[2 * w_step], w[3 * w_step], x, y, y + y_rs, y + 2 * y_rs,
                      y + 3 * y_rs);
        return;
    }
    for (r = 0; r < rows; ++r) {
        float wr = w[r * w_step];
        float *yr = y + r * y_rs;
        if (x_step == 1 && y_step == 1)
            for (j = 0; j < n; ++j)
                yr[j] += wr * x[j];
        else
            for (j = 0; j < n; ++j)
                yr[j * y_step] += wr * x[j * x_step];
    }
}

/* How many output channels from m on, within a group ending at m_end, run together. */
static inline int et_conv_rows_(int m, int m_end)
{
    return m_end - m >= ET_CONV_ROWS ? ET_CONV_ROWS : 1;
}

/* et_dot_lanes_f32_ of `a` with rows (1 or ET_CONV_ROWS) of b, `b_rs`
 * apart, into consecutive lane sets: each load of `a` serves every row,
 * and the rows' independent sums keep the FPU busy. */
static inline void et_conv_dot_rows_(int rows, int n, const float *restrict a, int a_step,
                                    const float *restrict b, size_t b_rs, float *restrict lane)
{
    int blocks = rows == ET_CONV_ROWS && a_step == 1 ? n / ET_LANES : 0, i, j, l, r;
    for (i = 0; i < blocks; ++i)
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

/* A 1x1 kernel with unit strides and no shift maps position i to i. */
static inline int et_conv_pointwise_(const int *in, const int *out, const int *k, const int *s,
                                     const int *p)
{
    int a;
    for (a = 0; a < 3; ++a)
        if (k[a] != 1 || s[a] != 1 || p[a] != 0 || in[a] != out[a])
            return 0;
    return 1;
}

/* Y[n, m] = (sum over c, kz, ky, kx, in that order, of
 * W[m, c, kz, ky, kx] * X[n, g*C/G + c, ...]) + B[m]; B may be NULL.
 * The inner loop runs along a contiguous output row.  A pointwise kernel
 * with unit strides and no padding is a matrix product per group, which
 * et_gemm_f32 runs with the same per-element order (c ascending, bias
 * last). */
static inline void et_conv_f32(int N, int C, int M, int G, const int *in, const int *out,
                               const int *k, const int *s, const int *d, const int *p,
                               const float *X, const float *W, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G;
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k);
    int n, m, c, g, r, rows, oz, oy, ox, kz, ky, kx;
    if (et_conv_pointwise_(in, out, k, s, p)) {
        for (n = 0; n < N; ++n)
            for (g = 0; g < G; ++g)
                et_gemm_f32(Mg, out_size, Cg, 1.0f, W + (size_t)g * (size_t)Mg * (size_t)Cg, 0,
                            X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size, 0,
                            1.0f, B ? B + (size_t)g * (size_t)Mg : NULL, 1, 0,
                            Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size);
        return;
    }
    for (n = 0; n < N; ++n)
        for (m = 0; m < M; m += rows) {
            int g0 = m / Mg;
            const float *Xg = X + ((size_t)n * (size_t)C + (size_t)g0 * (size_t)Cg) * (size_t)in_size;
            const float *Wm = W + (size_t)m * (size_t)Cg * (size_t)k_size;
            float *Ym = Y + ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size;
            rows = et_conv_rows_(m, (g0 + 1) * Mg);
            for (oz = 0; oz < out[0]; ++oz)
                for (oy = 0; oy < out[1]; ++oy) {
                    float *y = Ym + ((size_t)oz * (size_t)out[1] + (size_t)oy) * (size_t)out[2];
                    int z0, z1, y0, y1;
                    et_conv_span_(d[0], oz * s[0] - p[0], in[0], k[0], &z0, &z1);
                    et_conv_span_(d[1], oy * s[1] - p[1], in[1], k[1], &y0, &y1);
                    for (r = 0; r < rows; ++r)
                        for (ox = 0; ox < out[2]; ++ox)
                            y[r * out_size + ox] = 0.0f;
                    for (c = 0; c < Cg; ++c)
                        for (kz = z0; kz < z1; ++kz)
                            for (ky = y0; ky < y1; ++ky) {
                                int iz = oz * s[0] + kz * d[0] - p[0], iy = oy * s[1] + ky * d[1] - p[1];
                                const float *xrow = Xg + (size_t)c * (size_t)in_size +
                                                    ((size_t)iz * (size_t)in[1] + (size_t)iy) * (size_t)in[2];
                                const float *wrow = Wm + (size_t)c * (size_t)k_size +
                                                    ((size_t)kz * (size_t)k[1] + (size_t)ky) * (size_t)k[2];
                                for (kx = 0; kx < k[2]; ++kx) {
                                    int off = kx * d[2] - p[2], x0, x1;
                                    et_conv_span_(s[2], off, in[2], out[2], &x0, &x1);
                                    et_conv_axpy_(rows, x1 - x0, wrow + kx, Cg * k_size, xrow + x0 * s[2] + off, s[2],
                                                  y + x0, (size_t)out_size, 1);
                                }
                            }
                    for (r = 0; r < rows; ++r)
                        for (ox = 0; ox < out[2]; ++ox)
                            y[r * out_size + ox] += B ? B[m + r] : 0.0f;
                }
        }
}

/* Transposed convolution: X has C channels and spatial size `in`, Y has M
 * channels and size `out`, W is [C, M/G, k...]; each X element scatters
 * into Y at o = i*s + k*d - p.  Y[n, m] = (sum over c, kz, iz, ky, iy,
 * kx, ix, in that order) + B[m]; B may be NULL.  With B NULL this is
 * Conv's input gradient (dY -> dX, with Conv's own geometry and weights).
 * Scattering keeps the inner loop on a contiguous input row. */
static inline void et_conv_transpose_f32(int N, int C, int M, int G, const int *in,
                                         const int *out, const int *k, const int *s,
                                         const int *d, const int *p, const float *X,
                                         const float *W, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G;
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k);
    int n, m, c, g, i, rows, iz, iy, kz, ky, kx;
    if (et_conv_pointwise_(in, out, k, s, p)) {
        /* Y_g = W_g^T X_g: W_g is [C/G, M/G], read transposed. */
        for (n = 0; n < N; ++n)
            for (g = 0; g < G; ++g)
                et_gemm_f32(Mg, out_size, Cg, 1.0f, W + (size_t)g * (size_t)Cg * (size_t)Mg, 1,
                            X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size, 0,
                            1.0f, B ? B + (size_t)g * (size_t)Mg : NULL, 1, 0,
                            Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size);
        return;
    }
    for (n = 0; n < N; ++n)
        for (m = 0; m < M; m += rows) {
            int gi = m / Mg, mm = m % Mg;
            float *Ym = Y + ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size;
            rows = et_conv_rows_(m, (gi + 1) * Mg);
            for (i = 0; i < rows * out_size; ++i)
                Ym[i] = 0.0f;
            for (c = 0; c < Cg; ++c) {
                const float *Xc = X + ((size_t)n * (size_t)C + (size_t)gi * (size_t)Cg + (size_t)c) * (size_t)in_size;
                const float *Wc = W + (((size_t)gi * (size_t)Cg + (size_t)c) * (size_t)Mg + (size_t)mm) * (size_t)k_size;
                for (kz = 0; kz < k[0]; ++kz) {
                    int offz = kz * d[0] - p[0], z0, z1;
                    et_conv_span_(s[0], offz, out[0], in[0], &z0, &z1);
                    for (iz = z0; iz < z1; ++iz)
                        for (ky = 0; ky < k[1]; ++ky) {
                            int offy = ky * d[1] - p[1], y0, y1;
                            et_conv_span_(s[1], offy, out[1], in[1], &y0, &y1);
                            for (iy = y0; iy < y1; ++iy) {
                                const float *xrow = Xc + ((size_t)iz * (size_t)in[1] + (size_t)iy) * (size_t)in[2];
                                const float *wrow = Wc + ((size_t)kz * (size_t)k[1] + (size_t)ky) * (size_t)k[2];
                                float *yrow = Ym + ((size_t)(iz * s[0] + offz) * (size_t)out[1] +
                                                    (size_t)(iy * s[1] + offy)) * (size_t)out[2];
                                for (kx = 0; kx < k[2]; ++kx) {
                                    int offx = kx * d[2] - p[2], x0, x1;
                                    et_conv_span_(s[2], offx, out[2], in[2], &x0, &x1);
                                    et_conv_axpy_(rows, x1 - x0, wrow + kx, k_size, xrow + x0, 1,
                                                  yrow + x0 * s[2] + offx, (size_t)out_size, s[2]);
                                }
                            }
                        }
                }
            }
            if (B)
                for (i = 0; i < rows * out_size; ++i)
                    Ym[i] += B[m + i / out_size];
        }
}

/* Conv's weight gradient: dW[m, c, kz, ky, kx] = sum over n, oz, oy, ox
 * of dY[n, m, o] * X[n, g*C/G + c, o*s + k*d - p], with Conv's geometry
 * (`in` is X's size, `out` is dY's): one dot product per weight, its rows
 * (n, oz, oy ascending; whole planes for a pointwise kernel) added into
 * et_linalg.h's lanes.  ConvTranspose's weight gradient is the same sum
 * with the roles of X and dY swapped. */
static inline void et_conv_grad_w_f32(int N, int C, int M, int G, const int *in,
                                      const int *out, const int *k, const int *s,
                                      const int *d, const int *p, const float *dY,
                                      const float *X, float *dW)
{
    int Cg = C / G, Mg = M / G, pointwise = et_conv_pointwise_(in, out, k, s, p);
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int n, m, c, r, rows, oz, oy, kz, ky, kx;
    for (m = 0; m < M; m += rows) {
        rows = et_conv_rows_(m, (m / Mg + 1) * Mg);
        for (c = 0; c < Cg; ++c)
            for (kz = 0; kz < k[0]; ++kz) {
                int offz = kz * d[0] - p[0], z0, z1;
                et_conv_span_(s[0], offz, in[0], out[0], &z0, &z1);
                for (ky = 0; ky < k[1]; ++ky) {
                    int offy = ky * d[1] - p[1], y0, y1;
                    et_conv_span_(s[1], offy, in[1], out[1], &y0, &y1);
                    for (kx = 0; kx < k[2]; ++kx) {
                        int offx = kx * d[2] - p[2], x0, x1;
                        float lane[ET_CONV_ROWS * ET_LANES] = {0.0f};
                        et_conv_span_(s[2], offx, in[2], out[2], &x0, &x1);
                        for (n = 0; n < N; ++n) {
                            const float *dYm = dY + ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size;
                            const float *Xc = X + ((size_t)n * (size_t)C + (size_t)(m / Mg) * (size_t)Cg +
                                                   (size_t)c) * (size_t)in_size;
                            if (pointwise) {
                                et_conv_dot_rows_(rows, out_size, Xc, 1, dYm, (size_t)out_size, lane);
                                continue;
                            }
                            for (oz = z0; oz < z1; ++oz)
                                for (oy = y0; oy < y1; ++oy) {
                                    size_t at = ((size_t)oz * (size_t)out[1] + (size_t)oy) * (size_t)out[2];
                                    const float *xrow = Xc + ((size_t)(oz * s[0] + offz) * (size_t)in[1] +
                                                              (size_t)(oy * s[1] + offy)) * (size_t)in[2];
                                    et_conv_dot_rows_(rows, x1 - x0, xrow + x0 * s[2] + offx, s[2], dYm + at + x0,
                                                     (size_t)out_size, lane);
                                }
                        }
                        for (r = 0; r < rows; ++r)
                            dW[((size_t)(m + r) * (size_t)Cg + (size_t)c) * (size_t)k_size +
                               ((size_t)kz * (size_t)k[1] + (size_t)ky) * (size_t)k[2] + (size_t)kx] =
                                et_dot_total_f32_(lane + r * ET_LANES);
                    }
                }
            }
    }
}

#endif /* ET_CONV_H */
