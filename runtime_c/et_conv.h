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

/* Output channels that share each load of an input row: the kernels run
 * et_linalg.h's row blocks where a group has that many channels left, one
 * channel at a time otherwise. */
#define ET_CONV_ROWS ET_GEMM_ROWS

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

/* Output positions of one plane that the kernels gather a tap's inputs
 * for at a time: long enough for whole vector runs however short the rows,
 * small enough to sit on any stack; a multiple of ET_LANES so that a lane
 * of the weight gradient always holds the same plane positions. */
#define ET_CONV_CHUNK 64

/* Where output position o reads along one axis through a tap of offset
 * `off`: i = o*s + off for a convolution (dir 1); for a transposed one
 * (dir -1, off = p - t*d), the input i with i*s = o + off, if there is one.
 * Returns i, or a negative value when the tap reaches no input. */
static inline int et_conv_reads_(int o, int s, int dir, int off, int len)
{
    int at = dir > 0 ? o * s + off : o + off;
    if (dir < 0 && at % s)
        return -1;
    at = dir > 0 ? at : at / s;
    return at < len ? at : -1;
}

/* col[i] = the input that output position o0 + i of a plane reads through
 * the tap whose offsets are `off` (et_conv_reads_), or 0 where there is
 * none; for i < n.  Gathered once, a tap's inputs serve every output
 * channel as one contiguous run.  Returns 0 when every col[i] is 0 for
 * want of an input, so that the caller can skip the run. */
static inline int et_conv_gather_(const float *restrict Xc, const int *in, const int *out, const int *s, int dir,
                                  const int *off, int o0, int n, float *restrict col)
{
    int row = o0 / out[2], ox = o0 % out[2], oz = row / out[1], oy = row % out[1], i, lo, hi, any = 0;
    float *end = col + n;
    while (col < end) {
        int len = out[2] - ox < end - col ? out[2] - ox : (int)(end - col);
        int iz = et_conv_reads_(oz, s[0], dir, off[0], in[0]), iy = et_conv_reads_(oy, s[1], dir, off[1], in[1]);
        /* Outputs `step` apart read neighbouring inputs (step s for a transposed
         * convolution), from the `first` output that reads one at all. */
        int step = dir > 0 ? 1 : s[2], first = 0, at = dir > 0 ? ox * s[2] + off[2] : ox + off[2];
        const float *xrow = Xc + ((size_t)(iz > 0 ? iz : 0) * (size_t)in[1] + (size_t)(iy > 0 ? iy : 0)) * (size_t)in[2];
        lo = hi = 0;
        if (iz >= 0 && iy >= 0) {
            first = dir > 0 ? 0 : ((-at) % step + step) % step;
            at = dir > 0 ? at : (at + first) / step;
            et_conv_span_(dir > 0 ? s[2] : 1, at, in[2], (len - first + step - 1) / step, &lo, &hi);
        }
        if (step == 1) {
            for (i = 0; i < lo; ++i)
                col[i] = 0.0f;
            if (s[2] == 1 || dir < 0)
                for (i = lo; i < hi; ++i)
                    col[i] = xrow[at + i];
            else
                for (i = lo; i < hi; ++i)
                    col[i] = xrow[at + i * s[2]];
            for (i = hi; i < len; ++i)
                col[i] = 0.0f;
        } else {
            for (i = 0; i < len; ++i)
                col[i] = 0.0f;
            for (i = lo; i < hi; ++i)
                col[first + i * step] = xrow[at + i];
        }
        any |= hi > lo;
        col += len;
        ox = 0;
        if (++oy == out[1]) {
            oy = 0;
            ++oz;
        }
    }
    return any;
}

/* The tap offsets k*d - p of flat tap index t (kz, ky, kx row-major). */
static inline void et_conv_tap_(int t, const int *k, const int *d, const int *p, int *off)
{
    off[0] = t / (k[1] * k[2]) * d[0] - p[0];
    off[1] = t / k[2] % k[1] * d[1] - p[1];
    off[2] = t % k[2] * d[2] - p[2];
}

/* Y[n, m] = (sum over c, t of W[m * w_m + c * w_c + t] * the input that
 * tap t reaches, in that order) + B[m], for groups of at least
 * ET_CONV_ROWS output channels: per chunk of output positions, each tap's
 * inputs are gathered once (et_conv_gather_) and added into every output
 * channel of the group as one run.  `dir` is 1 for a convolution, -1 for a
 * transposed one, whose taps read back (et_conv_reads_).  A transposed
 * convolution with strides reaches each output row through some taps
 * only, so its chunks end with a row and the other taps are skipped. */
static inline void et_conv_chunked_f32_(int N, int C, int M, int G, const int *in, const int *out,
                                        const int *k, const int *s, const int *d, const int *p, int dir,
                                        const float *X, const float *W, int w_m, int w_c, const float *B,
                                        float *Y)
{
    int Cg = C / G, Mg = M / G, by_row = dir < 0 && s[0] * s[1] * s[2] > 1;
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int n, g, m, q, i, o0, len, rows, off[3];
    float col[2][ET_CONV_CHUNK];
    for (n = 0; n < N; ++n)
        for (g = 0; g < G; ++g)
            for (o0 = 0; o0 < out_size; o0 += len) {
                float *Yg = Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size + (size_t)o0;
                const float *Wg = W + (size_t)g * (size_t)Mg * (size_t)w_m + (size_t)g * (size_t)Cg * (size_t)w_c;
                len = (by_row ? (o0 / out[2] + 1) * out[2] : out_size) - o0;
                len = len < ET_CONV_CHUNK ? len : ET_CONV_CHUNK;
                for (m = 0; m < Mg; ++m)
                    for (i = 0; i < len; ++i)
                        Yg[(size_t)m * (size_t)out_size + (size_t)i] = 0.0f;
                for (q = 0; q < Cg * k_size; q += 2) {
                    int taps = Cg * k_size - q < 2 ? 1 : 2, any = 0, h;
                    size_t at[2];  /* where the weights of each tap start, for the group's first channel */
                    for (h = 0; h < taps; ++h) {
                        int c = (q + h) / k_size, t = (q + h) % k_size;
                        et_conv_tap_(t, k, d, p, off);
                        for (i = 0; i < 3; ++i)
                            off[i] *= dir;
                        any |= et_conv_gather_(X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg + (size_t)c) *
                                               (size_t)in_size, in, out, s, dir, off, o0, len, col[h]);
                        at[h] = (size_t)c * (size_t)w_c + (size_t)t;
                    }
                    if (!any)
                        continue;
                    for (m = 0; m < Mg; m += rows) {
                        const float *Wm = Wg + (size_t)m * (size_t)w_m;
                        rows = et_conv_rows_(m, Mg);
                        if (taps == 2)
                            et_axpy2_f32_(rows, len, Wm + at[0], Wm + at[1], w_m, col[0], col[1],
                                          Yg + (size_t)m * (size_t)out_size, (size_t)out_size);
                        else
                            et_conv_axpy_(rows, len, Wm + at[0], w_m, col[0], 1, Yg + (size_t)m * (size_t)out_size,
                                          (size_t)out_size, 1);
                    }
                }
                if (B)
                    for (m = 0; m < Mg; ++m)
                        for (i = 0; i < len; ++i)
                            Yg[(size_t)m * (size_t)out_size + (size_t)i] += B[g * Mg + m];
            }
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
    if (Mg >= ET_CONV_ROWS) {
        et_conv_chunked_f32_(N, C, M, G, in, out, k, s, d, p, 1, X, W, Cg * k_size, k_size, B, Y);
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
    if (Mg >= ET_CONV_ROWS) {
        et_conv_chunked_f32_(N, C, M, G, in, out, k, s, d, p, -1, X, W, k_size, Mg * k_size, B, Y);
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
 * (`in` is X's size, `out` is dY's): one dot product per weight, of each
 * dY plane (n ascending) with the tap's inputs (et_conv_gather_, 0 outside
 * X), added into et_linalg.h's lanes by plane position (lane l takes
 * positions l, l + ET_LANES, ...).  ConvTranspose's weight gradient is the
 * same sum with the roles of X and dY swapped.  Output channels of a group
 * run ET_CONV_GRAD_ROWS at a time, so that each gathered run serves them
 * all. */
#define ET_CONV_GRAD_ROWS 16

static inline void et_conv_grad_w_f32(int N, int C, int M, int G, const int *in,
                                      const int *out, const int *k, const int *s,
                                      const int *d, const int *p, const float *dY,
                                      const float *X, float *dW)
{
    int Cg = C / G, Mg = M / G, pointwise = et_conv_pointwise_(in, out, k, s, p);
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int n, g, m0, m, c, r, t, o0, rows, block, off[3];
    float col[ET_CONV_CHUNK];
    for (g = 0; g < G; ++g)
        for (m0 = g * Mg; m0 < (g + 1) * Mg; m0 += block) {
            block = (g + 1) * Mg - m0 < ET_CONV_GRAD_ROWS ? (g + 1) * Mg - m0 : ET_CONV_GRAD_ROWS;
            for (c = 0; c < Cg; ++c)
                for (t = 0; t < k_size; ++t) {
                    float lane[ET_CONV_GRAD_ROWS * ET_LANES] = {0.0f};
                    et_conv_tap_(t, k, d, p, off);
                    for (n = 0; n < N; ++n) {
                        const float *Xc = X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg + (size_t)c) * (size_t)in_size;
                        for (o0 = 0; o0 < out_size; o0 += ET_CONV_CHUNK) {
                            int len = out_size - o0 < ET_CONV_CHUNK ? out_size - o0 : ET_CONV_CHUNK;
                            if (!pointwise)
                                et_conv_gather_(Xc, in, out, s, 1, off, o0, len, col);
                            for (m = 0; m < block; m += rows) {
                                rows = et_conv_rows_(m, block);
                                et_dot_rows_f32_(rows, len, pointwise ? Xc + o0 : col, 1,
                                                  dY + ((size_t)n * (size_t)M + (size_t)(m0 + m)) * (size_t)out_size + (size_t)o0,
                                                  (size_t)out_size, lane + m * ET_LANES);
                            }
                        }
                    }
                    for (r = 0; r < block; ++r)
                        dW[((size_t)(m0 + r) * (size_t)Cg + (size_t)c) * (size_t)k_size + (size_t)t] =
                            et_dot_total_f32_(lane + r * ET_LANES);
                }
        }
}

#endif /* ET_CONV_H */
