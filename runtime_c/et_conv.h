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

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_LINALG_H
#include "et_linalg.h"
#endif

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
    if (*hi < *lo)  /* none; *lo may exceed n then */
        *hi = *lo;
}

static inline int et_conv_volume_(const int *v)
{
    return v[0] * v[1] * v[2];
}

/* Output channels that share each load of an input row: the kernels run
 * et_linalg.h's row blocks where a group has that many channels left, one
 * channel at a time otherwise. */
#define ET_CONV_ROWS ET_TILE_ROWS

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
                yr[j] = et_mla_(yr[j], wr, x[j]);
        else
            for (j = 0; j < n; ++j)
                yr[j * y_step] = et_mla_(yr[j * y_step], wr, x[j * x_step]);
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
 * small enough to sit on any stack.  (Weight gradients gather a piece of
 * their sums at a time, et_conv_piece_.) */
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

#if ET_VMLA
/* Eight floats a VLDM and a VSTM where the FPU has them, the last eight overlapping (n >= 8): a
 * third of the instructions of gcc's pieces, which go through eight core registers.  They move
 * bits, as a memcpy does: no arithmetic, so subnormals and NaNs pass unchanged. */
static inline void et_conv_copy8_vfp_(float *restrict dst, const float *restrict src, int n)
{
    const float *last_src = src + n - 8;
    float *last_dst = dst + n - 8;
    int blocks = n / 8;
    __asm__ volatile("1:\n\t"
                     "vldmia %[s]!, {s0-s7}\n\t"
                     "vstmia %[d]!, {s0-s7}\n\t"
                     "subs %[n], %[n], #1\n\t"
                     "bne 1b\n\t"
                     "vldmia %[ls], {s0-s7}\n\t"
                     "vstmia %[ld], {s0-s7}"
                     : [s] "+r"(src), [d] "+r"(dst), [n] "+r"(blocks)
                     : [ls] "r"(last_src), [ld] "r"(last_dst)
                     : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "cc", "memory");
}

/* dst[i] = 0 for i < n (n >= 4) likewise: four zeros a VSTM, the last four overlapping. */
static inline void et_conv_zero4_vfp_(float *dst, int n)
{
    float *last = dst + n - 4;
    int blocks = n / 4;
    __asm__ volatile("vldmia %[z], {s0-s3}\n\t"
                     "1:\n\t"
                     "vstmia %[d]!, {s0-s3}\n\t"
                     "subs %[n], %[n], #1\n\t"
                     "bne 1b\n\t"
                     "vstmia %[l], {s0-s3}"
                     : [d] "+r"(dst), [n] "+r"(blocks)
                     : [z] "r"(et_zeros_), [l] "r"(last)
                     : "s0", "s1", "s2", "s3", "cc", "memory");
}
#endif

/* dst[i] = src[i] for i < n: short runs (rows of small planes) inline,
 * in fixed-size pieces (the last one overlapping) that compile to plain
 * moves, rather than through a library call. */
static inline void et_conv_copy_(float *restrict dst, const float *restrict src, int n)
{
    if (n >= 8) {
#if ET_VMLA
        et_conv_copy8_vfp_(dst, src, n);
#else
        int i;
        for (i = 0; i + 8 <= n; i += 8)
            memcpy(dst + i, src + i, 8 * sizeof *dst);
        if (i < n)
            memcpy(dst + n - 8, src + n - 8, 8 * sizeof *dst);
#endif
    } else if (n >= 4) {
        memcpy(dst, src, 4 * sizeof *dst);
        memcpy(dst + n - 4, src + n - 4, 4 * sizeof *dst);
    } else {
        if (n > 0)
            dst[0] = src[0];
        if (n > 1)
            dst[1] = src[1];
        if (n > 2)
            dst[2] = src[2];
    }
}

/* dst[i] = 0 for i < n: the one to three zeros that border a clipped run
 * inline, where a call to memset would cost many times over. */
static inline void et_conv_zero_(float *dst, int n)
{
    if (n > 3) {
#if ET_VMLA
        et_conv_zero4_vfp_(dst, n);
#else
        memset(dst, 0, (size_t)n * sizeof *dst);
#endif
    } else if (n > 0) {
        dst[0] = 0.0f;
        dst[n / 2] = 0.0f;
        dst[n - 1] = 0.0f;
    }
}

/* et_conv_gather_ for a convolution, where output o reads input o*s + off
 * along each axis (and a transposed one with unit strides, which reads
 * o + off): every whole row reads the same span of its input row, worked
 * out once. */
static inline int et_conv_gather_rows_(const float *restrict Xc, const int *in, const int *out, const int *s,
                                       const int *off, int o0, int n, float *restrict col)
{
    int width = out[2], height = out[1], row = o0 / width, ox = o0 % width, oz = row / height, oy = row % height;
    int s2 = s[2], whole_lo, whole_hi, i, any = 0;
    unsigned in0 = (unsigned)in[0], in1 = (unsigned)in[1];
    float *end = col + n;
    et_conv_span_(s2, off[2], in[2], width, &whole_lo, &whole_hi);
    if (whole_hi > width)  /* no output reads an input */
        whole_lo = whole_hi = 0;
    while (col < end) {
        int len = width - ox < end - col ? width - ox : (int)(end - col), lo = whole_lo, hi = whole_hi;
        /* the input row, whose index is out of range where it is negative (as an unsigned, large) */
        unsigned iz = (unsigned)(oz * s[0] + off[0]), iy = (unsigned)(oy * s[1] + off[1]);
        const float *xrow = Xc + (iz < in0 && iy < in1 ? ((size_t)iz * in1 + iy) * (size_t)in[2] : 0);
        int at = ox * s2 + off[2];  /* output i of the segment reads xrow[at + i * s2] */
        if (iz >= in0 || iy >= in1)
            lo = hi = 0;
        else if (len < width) {
            et_conv_span_(s2, at, in[2], len, &lo, &hi);
            if (hi > len)
                lo = hi = 0;
        }
        et_conv_zero_(col, lo);
        if (s2 == 1)
            et_conv_copy_(col + lo, xrow + (hi > lo ? at + lo : 0), hi - lo);  /* (no pointer before X) */
        else
            for (i = lo; i < hi; ++i)
                col[i] = xrow[at + i * s2];
        et_conv_zero_(col + hi, len - hi);
        any |= hi > lo;
        col += len;
        ox = 0;
        if (++oy == height) {
            oy = 0;
            ++oz;
        }
    }
    return any;
}

/* col[i] = the input that output position o0 + i of a plane reads through
 * the tap whose offsets are `off` (et_conv_reads_), or 0 where there is
 * none; for i < n.  Gathered once, a tap's inputs serve every output
 * channel as one contiguous run.  Returns 0 when every col[i] is 0 for
 * want of an input, so that the caller can skip the run.  (Out of line:
 * gcc copied it into every convolution kernel, 1 KB of a microcontroller's
 * code.) */
static ET_NOINLINE int et_conv_gather_(const float *restrict Xc, const int *in, const int *out, const int *s, int dir,
                                       const int *off, int o0, int n, float *restrict col)
{
    int row = o0 / out[2], ox = o0 % out[2], oz = row / out[1], oy = row % out[1], i, lo, hi, any = 0;
    float *end = col + n;
    if (dir > 0 || et_conv_volume_(s) == 1)
        return et_conv_gather_rows_(Xc, in, out, s, off, o0, n, col);
    while (col < end) {  /* a transposed convolution with strides */
        int len = out[2] - ox < end - col ? out[2] - ox : (int)(end - col);
        int iz = et_conv_reads_(oz, s[0], dir, off[0], in[0]), iy = et_conv_reads_(oy, s[1], dir, off[1], in[1]);
        /* Outputs `step` apart read neighbouring inputs, from the `first` output that reads one at all. */
        int step = s[2], first = 0, at = ox + off[2];
        const float *xrow = Xc + ((size_t)(iz > 0 ? iz : 0) * (size_t)in[1] + (size_t)(iy > 0 ? iy : 0)) * (size_t)in[2];
        lo = hi = 0;
        if (iz >= 0 && iy >= 0) {
            int reads;
            first = ((-at) % step + step) % step;
            at = (at + first) / step;
            reads = (len - first + step - 1) / step;
            et_conv_span_(1, at, in[2], reads, &lo, &hi);
            if (hi > reads)  /* no output reads an input: zeros alone */
                lo = hi = 0;
        }
        if (step == 1) {
            et_conv_zero_(col, lo);
            et_conv_copy_(col + lo, xrow + (hi > lo ? at + lo : 0), hi - lo);
            et_conv_zero_(col + hi, len - hi);
        } else {
            et_conv_zero_(col, len);
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

/* The kernel indices (kz, ky, kx) of flat tap index t (row-major). */
static inline void et_conv_tap_(int t, const int *k, int *kt)
{
    kt[0] = t / (k[1] * k[2]);
    kt[1] = t / k[2] % k[1];
    kt[2] = t % k[2];
}

/* Steps kt to the next tap, row-major; returns 1 where it wraps to the
 * first (the next input channel's taps follow). */
static inline int et_conv_next_tap_(int *kt, const int *k)
{
    int a;
    for (a = 2; a >= 0; --a) {
        if (++kt[a] < k[a])
            return 0;
        kt[a] = 0;
    }
    return 1;
}

/* The (oz, oy, ox) of flat output position o. */
static inline void et_conv_position_(int o, const int *out, int *at)
{
    at[0] = o / out[2] / out[1];
    at[1] = o / out[2] % out[1];
    at[2] = o % out[2];
}

/* Floats of stack the kernels may use for zero-padded copies of input
 * planes (et_conv_pad_), from which a tap's inputs are plain row copies
 * with no clipping.  Where a plane does not fit, they gather with
 * clipping instead (et_conv_gather_): the same values, so the same
 * results, only slower. */
#ifndef ET_CONV_SCRATCH
#define ET_CONV_SCRATCH (ET_VECTORS ? 16384 : 0)
#endif

/* Whether `floats` fit the scratch: never where there is none, which
 * leaves the padded paths out of such builds altogether. */
static inline int et_conv_fits_(size_t floats)
{
#if ET_CONV_SCRATCH > 0
    return floats <= (size_t)ET_CONV_SCRATCH;
#else
    (void)floats;
    return 0;
#endif
}

/* The zero margins that hold every input a tap reads, per axis: `lo`
 * before the input and up to the padded extent `dim`.  A convolution
 * (dir 1) reads position o*s + t*d - p; a transposed one with unit strides
 * (dir -1) reads o + p - t*d; for outputs o < out and taps t < k.
 * Returns the padded plane's size. */
static inline size_t et_conv_margins_(const int *in, const int *out, const int *k, const int *s, const int *d,
                                      const int *p, int dir, int *lo, int *dim)
{
    int a;
    for (a = 0; a < 3; ++a) {
        int first = dir > 0 ? -p[a] : p[a] - (k[a] - 1) * d[a];
        int last = dir > 0 ? (out[a] - 1) * s[a] + (k[a] - 1) * d[a] - p[a] : out[a] - 1 + p[a];
        lo[a] = first < 0 ? -first : 0;
        dim[a] = lo[a] + (last >= in[a] ? last + 1 : in[a]);
    }
    return (size_t)dim[0] * (size_t)dim[1] * (size_t)dim[2];
}

/* xp = `channels` planes of X (`in_size` apart) inside zero margins
 * (et_conv_margins_), each `plane` floats. */
static inline void et_conv_pad_(const float *X, int channels, size_t in_size, const int *in, const int *lo,
                                const int *dim, size_t plane, float *xp)
{
    int c, z, y;
    memset(xp, 0, (size_t)channels * plane * sizeof *xp);
    for (c = 0; c < channels; ++c)
        for (z = 0; z < in[0]; ++z)
            for (y = 0; y < in[1]; ++y)
                et_conv_copy_(xp + (size_t)c * plane + ((size_t)(z + lo[0]) * (size_t)dim[1] + (size_t)(y + lo[1])) *
                              (size_t)dim[2] + (size_t)lo[2],
                              X + (size_t)c * in_size + ((size_t)z * (size_t)in[1] + (size_t)y) * (size_t)in[2], in[2]);
}

/* col[i] = the input that the i-th output position from (oz, oy, ox) =
 * `from` reads through a tap, for i < n, from a padded plane
 * (et_conv_pad_): xp[(oz*s0 + off0, oy*s1 + off1, ox*s2 + off2)], where
 * `off` is the tap's offset into the padded plane.  Every read is in
 * range: one copy per output row. */
static inline void et_conv_gather_padded_(const float *xp, const int *dim, const int *out, const int *s,
                                          const int *off, const int *from, int n, float *restrict col)
{
    int oz = from[0], oy = from[1], ox = from[2], i;
    while (n > 0) {
        int len = out[2] - ox < n ? out[2] - ox : n;
        const float *x = xp + ((size_t)(oz * s[0] + off[0]) * (size_t)dim[1] + (size_t)(oy * s[1] + off[1])) *
                              (size_t)dim[2] + (size_t)(ox * s[2] + off[2]);
        if (s[2] == 1)
            et_conv_copy_(col, x, len);
        else
            for (i = 0; i < len; ++i)
                col[i] = x[i * s[2]];
        col += len;
        n -= len;
        ox = 0;
        if (++oy == out[1]) {
            oy = 0;
            ++oz;
        }
    }
}

/* The inputs of tap kt = (kz, ky, kx) for output positions o0 .. o0 + n
 * - 1 (the first at (oz, oy, ox) = `from`) into col: from the padded plane
 * xp where there is one (dims `dim`, margins `lo`), else gathered with
 * clipping from X's plane Xc.  Returns 0 when the tap reaches no input
 * there (et_conv_gather_). */
static inline int et_conv_tap_inputs_(const float *Xc, const float *xp, const int *lo, const int *dim, const int *kt,
                                      const int *in, const int *out, const int *s, const int *d, const int *p,
                                      int dir, int o0, const int *from, int n, float *col)
{
    int off[3], a;
    for (a = 0; a < 3; ++a)
        off[a] = (xp ? lo[a] : 0) + dir * (kt[a] * d[a] - p[a]);
    if (!xp)
        return et_conv_gather_(Xc, in, out, s, dir, off, o0, n, col);
    et_conv_gather_padded_(xp, dim, out, s, off, from, n, col);
    return 1;
}

/* Whether taps read in place from padded planes: with unit strides each
 * output row reads one contiguous run per tap. */
static inline int et_conv_direct_(const int *s, int padded)
{
    return padded && s[0] == 1 && s[1] == 1 && s[2] == 1;
}

/* Where tap kt of the channel `c` planes into the padded copy reads from
 * for the first output, for `dir` as in et_conv_margins_. */
static inline size_t et_conv_tap_offset_(const int *kt, const int *d, const int *p, const int *lo, const int *dim,
                                         int dir, size_t c, size_t plane)
{
    size_t off = 0;
    int a;
    for (a = 0; a < 3; ++a)
        off = off * (size_t)dim[a] + (size_t)(lo[a] + dir * (kt[a] * d[a] - p[a]));
    return c * plane + off;
}

/* y[m * out_size + i] = (started ? y[...] : 0) + (B ? B[m] : 0) for
 * channels m < Mg and i < len: the end of a convolution's sums. */
static inline void et_conv_finish_(int Mg, int len, int out_size, int started, const float *B, float *y)
{
    int m, i;
    for (m = 0; m < Mg; ++m) {
        float *ym = y + (size_t)m * (size_t)out_size, b = B ? B[m] : 0.0f;
        for (i = 0; i < len; ++i)
            ym[i] = (started ? ym[i] : 0.0f) + b;
    }
}

/* Group g's weights: W[g * Mg + m, c, t] of a convolution (dir 1, rows
 * w_m apart), W[g * Cg + c, m, t] of a transposed one (dir -1, input
 * channels w_c apart); m and c then count within the group. */
static inline const float *et_conv_group_weights_(const float *W, int g, int Mg, int Cg, int w_m, int w_c, int dir)
{
    return W + (dir > 0 ? (size_t)g * (size_t)Mg * (size_t)w_m : (size_t)g * (size_t)Cg * (size_t)w_c);
}

/* The taps q0 .. q_end - 1 of a group (q = c * k_size + t, c counted from
 * the padded block's first channel c0), at most ET_CONV_DIRECT_TAPS of
 * them: each one's weight offset (at) and where it reads the padded block
 * for the first output (bt, et_conv_tap_offset_).  Returns how many. */
#define ET_CONV_DIRECT_TAPS 256

static inline int et_conv_direct_taps_(int q0, int q_end, int c0, const int *k, const int *d, const int *p,
                                       const int *lo, const int *dim, int dir, size_t plane, int w_c, size_t *at,
                                       size_t *bt)
{
    int k_size = et_conv_volume_(k), c = q0 / k_size, q, taps, kt[3];
    et_conv_tap_(q0 % k_size, k, kt);
    for (taps = 0, q = q0; q < q_end && taps < ET_CONV_DIRECT_TAPS; ++q, ++taps) {
        at[taps] = (size_t)c * (size_t)w_c + (size_t)(q % k_size);
        bt[taps] = et_conv_tap_offset_(kt, d, p, lo, dim, dir, (size_t)(c - c0), plane);
        c += et_conv_next_tap_(kt, k);
    }
    return taps;
}

/* et_conv_chunked_f32_ with unit strides where a block of the group's
 * input planes fits ET_CONV_SCRATCH padded: each tile reads its output
 * row's inputs in place, taps ET_CONV_DIRECT_TAPS at a time (in order),
 * two rows to a tile where rows hold 8 outputs (or 16, on wide vectors). */
static inline void et_conv_direct_f32_(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                       const int *d, const int *p, int dir, const float *X, const float *W,
                                       int w_m, int w_c, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), n, g, m, q0, c0, cb, o0, len, rows, taps, pair, lo[3], dim[3], from[3];
    int s1[3] = {1, 1, 1};
    size_t plane = et_conv_margins_(in, out, k, s1, d, p, dir, lo, dim);
    int block = (int)(ET_CONV_SCRATCH / plane);
    size_t at[ET_CONV_DIRECT_TAPS], bt[ET_CONV_DIRECT_TAPS];  /* each tap's weights and inputs */
    float xp[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1];
    ET_PATH_(dir > 0 ? "conv_direct" : "transpose_direct");
    for (n = 0; n < N; ++n)
        for (g = 0; g < G; ++g) {
            const float *Xg = X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size;
            const float *Wg = et_conv_group_weights_(W, g, Mg, Cg, w_m, w_c, dir);
            float *Yg = Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size;
            for (c0 = 0; c0 < Cg; c0 += cb) {
                cb = Cg - c0 < block ? Cg - c0 : block;
                et_conv_pad_(Xg + (size_t)c0 * (size_t)in_size, cb, (size_t)in_size, in, lo, dim, plane, xp);
                for (q0 = c0 * k_size; q0 < (c0 + cb) * k_size; q0 += taps) {
                    taps = et_conv_direct_taps_(q0, (c0 + cb) * k_size, c0, k, d, p, lo, dim, dir, plane, w_c, at, bt);
                    for (o0 = 0; o0 < out_size; o0 += len) {
                        const float *b;
                        et_conv_position_(o0, out, from);
                        b = xp + ((size_t)from[0] * (size_t)dim[1] + (size_t)from[1]) * (size_t)dim[2];
                        pair = (out[2] == 8 || (ET_WIDE && out[2] == 16)) && from[1] + 1 < out[1];
                        len = out[2] * (1 + pair);
                        for (m = 0; m < Mg; m += rows) {
                            float *y = Yg + (size_t)m * (size_t)out_size + (size_t)o0;
                            int started = q0 > 0;
                            rows = Mg - m < ET_TILE_ROWS ? Mg - m : ET_TILE_ROWS;
#if ET_WIDE
                            if (pair && len == 32) {  /* two rows of 16 outputs */
                                int h;
                                ET_PATH_("direct_row_pairs_wide");
                                if (rows == ET_TILE_ROWS)
                                    et_tile_wide_f32_(taps, Wg + (size_t)m * (size_t)w_m, (size_t)w_m, at, b, bt,
                                                      (size_t)dim[2], y, (size_t)out_size, started);
                                else
                                    for (h = 0; h < 2; ++h)
                                        et_tiles_f32_(rows, 16, taps, Wg + (size_t)m * (size_t)w_m, (size_t)w_m, at,
                                                      b + (size_t)h * (size_t)dim[2], bt, y + 16 * h,
                                                      (size_t)out_size, started);
                                continue;
                            }
#endif
                            if (pair && len == 16) {
                                ET_PATH_("direct_row_pairs");
                                et_tile_f32_(rows, len, taps, Wg + (size_t)m * (size_t)w_m, (size_t)w_m, at, b, bt,
                                             (size_t)dim[2], y, (size_t)out_size, started);
                            } else
                                et_tiles_f32_(rows, len, taps, Wg + (size_t)m * (size_t)w_m, (size_t)w_m, at, b, bt,
                                              y, (size_t)out_size, started);
                        }
                    }
                }
            }
            et_conv_finish_(Mg, out_size, out_size, 1, B ? B + g * Mg : NULL, Yg);
        }
}

/* Whether tap kt reaches an input from any output of the plane, for a
 * convolution (dir 1) or a transposed one with unit strides (dir -1). */
static inline int et_conv_tap_reaches_(const int *kt, const int *in, const int *out, const int *s, const int *d,
                                       const int *p, int dir)
{
    int a, lo, hi;
    for (a = 0; a < 3; ++a) {
        et_conv_span_(dir > 0 ? s[a] : 1, dir * (kt[a] * d[a] - p[a]), in[a], out[a], &lo, &hi);
        if (hi <= lo)
            return 0;
    }
    return 1;
}

/* Output channels per block of et_conv_channels_f32_: its packed weights
 * take ET_CONV_DIRECT_TAPS times as many floats (32 KB of stack).  The
 * path runs only on builds with vector tiles and the scratch. */
#define ET_CONV_CHANNELS 32
#define ET_CONV_CHANNELS_ROOM (ET_VECTORS && ET_CONV_SCRATCH > 0)

/* et_conv_chunked_f32_ where output rows hold fewer than 8 positions and
 * the batch too few for et_conv_images_f32_, so tiles along positions
 * would run on scalars: here tiles run along output channels.  Per block
 * of ET_CONV_CHANNELS channels and block of taps, the weights are packed
 * transposed (wt[tap][channel]); each tile takes up to four positions of
 * an output row, read in place from the padded planes of as many images
 * as fit ET_CONV_SCRATCH, and adds into their sums in ys (position by
 * position, from 0), which go to Y with the bias at the end.  Each output
 * adds the products et_conv_direct_f32_ and et_conv_gathered_f32_ add, in
 * their order, less the taps that reach no input (their products are 0).
 * Returns 0, having done nothing, where that does not apply: no vector
 * tiles, fewer than 8 output channels a group, rows of 8 or more, a
 * transposed convolution with strides, kernels of more than
 * ET_CONV_DIRECT_TAPS taps, or planes too big for the scratch. */
static inline int et_conv_channels_f32_(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                        const int *s, const int *d, const int *p, int dir, const float *X,
                                        const float *W, int w_m, int w_c, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), n0, nb, i, g, m0, mb, c0, cb, q0, t, tap, j, o, rows, taps, kept, started;
    int lo[3], dim[3], from[3], kt[3];
    size_t plane = et_conv_margins_(in, out, k, s, d, p, dir, lo, dim), base;
    /* (no stack where the path cannot run) */
    size_t at[ET_CONV_CHANNELS_ROOM ? ET_CONV_DIRECT_TAPS : 1], bt[ET_CONV_CHANNELS_ROOM ? ET_CONV_DIRECT_TAPS : 1];
    size_t wt_at[ET_CONV_CHANNELS_ROOM ? ET_CONV_DIRECT_TAPS : 1];
    float xp[ET_CONV_CHANNELS_ROOM ? ET_CONV_SCRATCH : 1], ys[ET_CONV_CHANNELS_ROOM ? ET_CONV_SCRATCH : 1];
    float wt[ET_CONV_CHANNELS_ROOM ? ET_CONV_DIRECT_TAPS * ET_CONV_CHANNELS : 1];
    unsigned char reaches[ET_CONV_CHANNELS_ROOM ? ET_CONV_DIRECT_TAPS : 1];  /* whether each tap reaches an input */
    if (!ET_CONV_CHANNELS_ROOM || Mg < 8 || out[2] >= 8 || (dir < 0 && et_conv_volume_(s) > 1) ||
        k_size > ET_CONV_DIRECT_TAPS || !et_conv_fits_(plane) || !et_conv_fits_((size_t)out_size * ET_CONV_CHANNELS))
        return 0;
    ET_PATH_(dir > 0 ? "conv_channels" : "transpose_channels");
    for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k))
        reaches[t] = (unsigned char)et_conv_tap_reaches_(kt, in, out, s, d, p, dir);
    /* images a pass: their sums fit ys, and a padded plane of each fits xp */
    nb = (int)(ET_CONV_SCRATCH / ((size_t)out_size * ET_CONV_CHANNELS));
    nb = (size_t)nb * plane > ET_CONV_SCRATCH ? (int)(ET_CONV_SCRATCH / plane) : nb;
    for (g = 0; g < G; ++g)
        for (n0 = 0; n0 < N; n0 += nb) {
            int images = N - n0 < nb ? N - n0 : nb, block = (int)(ET_CONV_SCRATCH / ((size_t)images * plane));
            for (m0 = 0; m0 < Mg; m0 += mb) {
                const float *Wm = et_conv_group_weights_(W, g, Mg, Cg, w_m, w_c, dir) + (size_t)m0 * (size_t)w_m;
                mb = Mg - m0 < ET_CONV_CHANNELS ? Mg - m0 : ET_CONV_CHANNELS;
                started = 0;
                for (c0 = 0; c0 < Cg; c0 += cb) {
                    cb = Cg - c0 < block ? Cg - c0 : block;
                    for (i = 0; i < images; ++i)
                        et_conv_pad_(X + ((size_t)(n0 + i) * (size_t)C + (size_t)(g * Cg + c0)) * (size_t)in_size,
                                     cb, (size_t)in_size, in, lo, dim, plane, xp + (size_t)i * (size_t)cb * plane);
                    for (q0 = c0 * k_size; q0 < (c0 + cb) * k_size; q0 += taps) {
                        taps = et_conv_direct_taps_(q0, (c0 + cb) * k_size, c0, k, d, p, lo, dim, dir, plane, w_c,
                                                    at, bt);
                        for (kept = t = 0, tap = q0 % k_size; t < taps; ++t, tap = tap + 1 < k_size ? tap + 1 : 0) {
                            if (!reaches[tap])  /* the taps that reach an input, packed */
                                continue;
                            at[kept] = at[t];
                            bt[kept] = bt[t];
                            wt_at[kept] = (size_t)kept * (size_t)mb;
                            for (j = 0; j < mb; ++j)
                                wt[wt_at[kept] + (size_t)j] = Wm[(size_t)j * (size_t)w_m + at[kept]];
                            ++kept;
                        }
                        for (i = 0; kept && i < images; ++i)
                            for (o = 0; o < out_size; o += rows) {
                                et_conv_position_(o, out, from);
                                rows = out[2] - from[2] < ET_TILE_ROWS ? out[2] - from[2] : ET_TILE_ROWS;
                                base = (size_t)i * (size_t)cb * plane +
                                       ((size_t)(from[0] * s[0]) * (size_t)dim[1] + (size_t)(from[1] * s[1])) *
                                           (size_t)dim[2] + (size_t)(from[2] * s[2]);
                                et_tiles_f32_(rows, mb, kept, xp + base, (size_t)s[2], bt, wt, wt_at,
                                              ys + ((size_t)i * (size_t)out_size + (size_t)o) * (size_t)mb,
                                              (size_t)mb, started);
                            }
                        started |= kept > 0;
                    }
                }
                for (i = 0; i < images; ++i)
                    for (j = 0; j < mb; ++j) {
                        float *y = Y + ((size_t)(n0 + i) * (size_t)M + (size_t)(g * Mg + m0 + j)) * (size_t)out_size;
                        const float *sums = ys + (size_t)i * (size_t)out_size * (size_t)mb + (size_t)j;
                        float b = B ? B[g * Mg + m0 + j] : 0.0f;
                        for (o = 0; o < out_size; ++o)
                            y[o] = (started ? sums[(size_t)o * (size_t)mb] : 0.0f) + b;
                    }
            }
        }
    return 1;
}

/* A transposed convolution with strides (et_conv_chunked_f32_ with dir
 * -1) by phases: along the last axis, output positions o = q + s2 * u of
 * phase q < s2 receive only the taps kx with s2 dividing q + p2 - kx * d2,
 * each from the run of inputs u + (q + p2 - kx * d2) / s2, contiguous in
 * X.  So each phase is a convolution with unit strides that tiles read in
 * place from input planes padded along rows, and no tile multiplies the
 * zeros between inputs.  While the sums build, each output row holds its
 * phases one after the other; a last pass puts the positions back in
 * order.  Per output it adds the products of the taps that reach an input
 * along its phase, in the gathering path's order: the other kernels add 0
 * for the rest, which changes no finite sum (from +0, adding +0 or -0
 * never changes a sum; only an infinite weight would make NaN).  Returns
 * 0, having done nothing, where a padded plane or a row does not fit
 * ET_CONV_SCRATCH, or a kernel has more than ET_CONV_DIRECT_TAPS taps. */
static inline int et_conv_phases_f32_(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                      const int *s, const int *d, const int *p, const float *X, const float *W,
                                      int w_m, int w_c, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), n, g, m, c, c0, cb, t, h, q, u, at0, rows, taps, iz, iy, row, rows_out, reached;
    int kt[3], first = p[2] - (k[2] - 1) * d[2], lo = first < 0 ? (-first + s[2] - 1) / s[2] : 0;
    int reach = (out[2] - 1 + p[2]) / s[2] + 1, width = lo + (reach > in[2] ? reach : in[2]);
    int tap[ET_CONV_DIRECT_TAPS];  /* the taps that reach an input from a phase of a row, and where */
    size_t plane = (size_t)in[0] * (size_t)in[1] * (size_t)width, at[ET_CONV_DIRECT_TAPS], bt[ET_CONV_DIRECT_TAPS];
    size_t tap_at[ET_CONV_DIRECT_TAPS];
    int block = et_conv_fits_(plane) && et_conv_fits_((size_t)out[2]) ? (int)(ET_CONV_SCRATCH / plane) : 0;
    float xs[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1];
    if (!block || k_size > ET_CONV_DIRECT_TAPS)
        return 0;
    ET_PATH_("transpose_phases");
    rows_out = out[0] * out[1];
    for (n = 0; n < N; ++n)
        for (g = 0; g < G; ++g) {
            const float *Xg = X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size;
            const float *Wg = et_conv_group_weights_(W, g, Mg, Cg, w_m, w_c, -1);
            float *Yg = Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size;
            et_conv_finish_(Mg, out_size, out_size, 0, NULL, Yg);  /* every sum starts from 0 */
            for (c0 = 0; c0 < Cg; c0 += cb) {
                cb = Cg - c0 < block ? Cg - c0 : block;
                memset(xs, 0, (size_t)cb * plane * sizeof *xs);
                for (c = 0; c < cb; ++c)
                    for (row = 0; row < in[0] * in[1]; ++row)
                        memcpy(xs + (size_t)c * plane + (size_t)row * (size_t)width + (size_t)lo,
                               Xg + (size_t)(c0 + c) * (size_t)in_size + (size_t)row * (size_t)in[2],
                               (size_t)in[2] * sizeof *xs);
                for (row = 0; row < rows_out; ++row)
                    for (q = 0, at0 = 0; q < s[2] && q < out[2]; at0 += (out[2] - q + s[2] - 1) / s[2], ++q) {
                        int len = (out[2] - q + s[2] - 1) / s[2];  /* the phase's positions in the row */
                        float *y = Yg + (size_t)row * (size_t)out[2] + (size_t)at0;
                        for (reached = 0, t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k)) {
                            int off = q + p[2] - kt[2] * d[2], from = off / s[2];  /* the input u = 0 reads */
                            iz = et_conv_reads_(row / out[1], s[0], -1, p[0] - kt[0] * d[0], in[0]);
                            iy = et_conv_reads_(row % out[1], s[1], -1, p[1] - kt[1] * d[1], in[1]);
                            if (iz < 0 || iy < 0 || off % s[2] || from >= in[2] || from + len <= 0)
                                continue;  /* reaches no input from this phase of this row */
                            tap[reached] = t;
                            tap_at[reached++] = ((size_t)iz * (size_t)in[1] + (size_t)iy) * (size_t)width + (size_t)(lo + from);
                        }
                        for (taps = 0, c = c0; c < c0 + cb && reached; ++c)
                            for (h = 0; h < reached; ++h) {
                                at[taps] = (size_t)c * (size_t)w_c + (size_t)tap[h];
                                bt[taps] = (size_t)(c - c0) * plane + tap_at[h];
                                if (++taps < ET_CONV_DIRECT_TAPS && (c + 1 < c0 + cb || h + 1 < reached))
                                    continue;
                                for (m = 0; m < Mg; m += rows) {
                                    rows = Mg - m < ET_TILE_ROWS ? Mg - m : ET_TILE_ROWS;
                                    et_tiles_f32_(rows, len, taps, Wg + (size_t)m * (size_t)w_m, (size_t)w_m, at, xs,
                                                  bt, y + (size_t)m * (size_t)out_size, (size_t)out_size, 1);
                                }
                                taps = 0;
                            }
                        for (m = 0; m < Mg && taps; m += rows) {  /* the block's last taps, when the last one is skipped */
                            rows = Mg - m < ET_TILE_ROWS ? Mg - m : ET_TILE_ROWS;
                            et_tiles_f32_(rows, len, taps, Wg + (size_t)m * (size_t)w_m, (size_t)w_m, at, xs, bt,
                                          y + (size_t)m * (size_t)out_size, (size_t)out_size, 1);
                        }
                    }
            }
            for (m = 0; m < Mg; ++m)  /* each row's phases back into position order */
                for (row = 0; row < rows_out; ++row) {
                    float *y = Yg + (size_t)m * (size_t)out_size + (size_t)row * (size_t)out[2];
                    memcpy(xs, y, (size_t)out[2] * sizeof *xs);
                    for (q = 0, at0 = 0; q < s[2] && q < out[2]; at0 += (out[2] - q + s[2] - 1) / s[2], ++q)
                        for (u = 0; q + u * s[2] < out[2]; ++u)
                            y[q + u * s[2]] = xs[at0 + u];
                }
            et_conv_finish_(Mg, out_size, out_size, 1, B ? B + g * Mg : NULL, Yg);
        }
    return 1;
}

/* Taps gathered per block of et_conv_chunked_f32_: their runs of
 * ET_CONV_CHUNK inputs sit on the stack (4 KB on a scalar FPU, about what
 * a weight gradient's lanes and runs take there).  Each tile's sums go
 * back to memory once per block and the tiles are set up again, so fewer
 * taps a block cost more: 8 took 5 % more instructions on ResNet-8.  The
 * block size changes no result. */
#ifndef ET_CONV_TAPS
#define ET_CONV_TAPS (ET_VECTORS ? 32 : 16)
#endif

/* Every tile of a group's Mg output channels (weights w_m apart) takes the
 * products of a block of taps, whose weights are at `at` and whose inputs
 * for len outputs were gathered into col (ET_CONV_CHUNK apart); the sums
 * are y's rows, y_rs apart, added into where `started`. */
static inline void et_conv_gathered_tiles_(int Mg, int len, int taps, const float *Wg, int w_m, const size_t *at,
                                           const float *col, float *y, size_t y_rs, int started)
{
    int m, rows, q;
    size_t bt[ET_CONV_TAPS];
    for (q = 0; q < taps; ++q)
        bt[q] = (size_t)q * ET_CONV_CHUNK;
    for (m = 0; m < Mg; m += rows) {
        rows = Mg - m < ET_TILE_ROWS ? Mg - m : ET_TILE_ROWS;
        et_tiles_f32_(rows, len, taps, Wg + (size_t)m * (size_t)w_m, (size_t)w_m, at, col, bt, y + (size_t)m * y_rs,
                      y_rs, started);
    }
}

/* et_conv_chunked_f32_ by gathering: per chunk of output positions, a
 * block of taps has its inputs gathered once (et_conv_tap_inputs_: from
 * padded planes, as many as fit ET_CONV_SCRATCH, else with clipping),
 * then every tile of output channels takes the block's products.  A
 * transposed convolution with strides reaches each output row through
 * some taps only, so its chunks end with a row and the taps that reach
 * nothing there are left out (they would add only zeros). */
static inline void et_conv_gathered_f32_(int N, int C, int M, int G, const int *in, const int *out,
                                         const int *k, const int *s, const int *d, const int *p, int dir,
                                         const float *X, const float *W, int w_m, int w_c, const float *B,
                                         float *Y)
{
    int Cg = C / G, Mg = M / G, by_row = dir < 0 && s[0] * s[1] * s[2] > 1;
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int n, g, q, q0, c0, cb, o0, len, taps, started, lo[3], dim[3], from[3], kt[3];
    size_t plane = et_conv_margins_(in, out, k, s, d, p, dir, lo, dim);
    /* Channels padded at a time: all of the group where there is no room (gathering with clipping). */
    int padded = !by_row && et_conv_fits_(plane), block = padded ? (int)(ET_CONV_SCRATCH / plane) : Cg;
    size_t at[ET_CONV_TAPS];  /* each gathered tap's weights, for the group's first channel */
    float col[ET_CONV_TAPS][ET_CONV_CHUNK], xp[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1];
    ET_PATH_(by_row ? "transpose_gathered_by_row"
             : dir < 0 ? (padded ? "transpose_gathered_padded" : "transpose_gathered_clipped")
                       : padded ? "conv_gathered_padded" : "conv_gathered_clipped");
    for (n = 0; n < N; ++n)
        for (g = 0; g < G; ++g) {
            const float *Xg = X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size;
            const float *Wg = et_conv_group_weights_(W, g, Mg, Cg, w_m, w_c, dir);
            float *Yg = Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size;
            for (c0 = 0; c0 < Cg; c0 += cb) {
                cb = Cg - c0 < block ? Cg - c0 : block;
                if (padded)
                    et_conv_pad_(Xg + (size_t)c0 * (size_t)in_size, cb, (size_t)in_size, in, lo, dim, plane, xp);
                for (o0 = 0; o0 < out_size; o0 += len) {
                    len = (by_row ? (o0 / out[2] + 1) * out[2] : out_size) - o0;
                    len = len < ET_CONV_CHUNK ? len : ET_CONV_CHUNK;
                    started = c0 > 0;  /* earlier channel blocks added into every output */
                    et_conv_position_(o0, out, from);
                    for (q0 = c0 * k_size; q0 < (c0 + cb) * k_size; q0 += ET_CONV_TAPS) {
                        int c = q0 / k_size;
                        et_conv_tap_(q0 % k_size, k, kt);
                        for (taps = 0, q = q0; q < (c0 + cb) * k_size && q < q0 + ET_CONV_TAPS; ++q) {
                            if (et_conv_tap_inputs_(Xg + (size_t)c * (size_t)in_size,
                                                    padded ? xp + (size_t)(c - c0) * plane : NULL, lo, dim, kt, in,
                                                    out, s, d, p, dir, o0, from, len, col[taps]) || !by_row)
                                at[taps++] = (size_t)c * (size_t)w_c + (size_t)(q % k_size);
                            c += et_conv_next_tap_(kt, k);
                        }
                        if (!taps)
                            continue;
                        et_conv_gathered_tiles_(Mg, len, taps, Wg, w_m, at, col[0], Yg + o0, (size_t)out_size, started);
                        started = 1;
                    }
                    if (c0 + cb == Cg)  /* the sums are complete */
                        et_conv_finish_(Mg, len, out_size, started, B ? B + g * Mg : NULL, Yg + o0);
                }
            }
        }
}

/* et_conv_chunked_f32_ where output rows hold fewer than 8 positions but
 * the batch holds at least ET_CONV_IMAGES_MIN of them: like
 * et_conv_gathered_f32_, with chunks of positions that run on from one
 * image into the next, so that tiles along positions fill their vectors.
 * A block of taps has its inputs gathered from the padded planes of the
 * chunk's images, a block of channels at a time, where they fit
 * ET_CONV_SCRATCH (else, and for a transposed convolution with strides,
 * with clipping); taps that reach no input are left out (their products
 * are 0).  The chunk's sums build in ys (ET_CONV_SCRATCH), channel by
 * channel, and go to Y with the bias at the end.  Each output adds the
 * products the other paths add, in their order.  Returns 0, having done
 * nothing, where that does not apply: no vector tiles, rows of 8 or more,
 * fewer positions, more output channels than ys holds 16 positions of, or
 * a convolution with strides whose planes hold a whole chunk (gathered,
 * its chunks fill their vectors already). */
#define ET_CONV_IMAGES_MIN 16

static inline int et_conv_images_f32_(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                      const int *s, const int *d, const int *p, int dir, const float *X,
                                      const float *W, int w_m, int w_c, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), chunk, g, m, q, q0, c, c0, cb, i, at_o, len, seg, taps, started, first, images;
    int padded, block, lo[3], dim[3], kt[3], from[3];
    int paddable = dir > 0 || et_conv_volume_(s) == 1;  /* et_conv_margins_ holds its reads */
    long e0, e;  /* a position of the batch: image e / out_size, output e % out_size */
    size_t plane = et_conv_margins_(in, out, k, s, d, p, dir, lo, dim);
    /* (no stack where the path cannot run) */
    size_t at[ET_CONV_CHANNELS_ROOM ? ET_CONV_TAPS : 1];
    float col[ET_CONV_CHANNELS_ROOM ? ET_CONV_TAPS : 1][ET_CONV_CHUNK];
    float ys[ET_CONV_CHANNELS_ROOM ? ET_CONV_SCRATCH : 1], xp[ET_CONV_CHANNELS_ROOM ? ET_CONV_SCRATCH : 1];
    chunk = ET_CONV_SCRATCH / (Mg > 0 ? Mg : 1) / ET_TILE_COLS * ET_TILE_COLS;
    chunk = chunk < ET_CONV_CHUNK ? chunk : ET_CONV_CHUNK;
    if (!ET_CONV_CHANNELS_ROOM || out[2] >= 8 || (long)N * out_size < ET_CONV_IMAGES_MIN || chunk < ET_TILE_COLS ||
        (dir > 0 && et_conv_volume_(s) > 1 && out_size >= ET_CONV_CHUNK))
        return 0;
    ET_PATH_(dir > 0 ? "conv_images" : "transpose_images");
    for (g = 0; g < G; ++g) {
        const float *Wg = et_conv_group_weights_(W, g, Mg, Cg, w_m, w_c, dir);
        for (e0 = 0; e0 < (long)N * out_size; e0 += len) {
            len = (long)N * out_size - e0 < chunk ? (int)((long)N * out_size - e0) : chunk;
            first = (int)(e0 / out_size);
            images = (int)((e0 + len - 1) / out_size) - first + 1;
            padded = paddable && et_conv_fits_((size_t)images * plane);
            block = padded ? (int)(ET_CONV_SCRATCH / ((size_t)images * plane)) : Cg;
            started = 0;
            for (c0 = 0; c0 < Cg; c0 += cb) {
                cb = Cg - c0 < block ? Cg - c0 : block;
                for (i = 0; padded && i < images; ++i)
                    et_conv_pad_(X + ((size_t)(first + i) * (size_t)C + (size_t)(g * Cg + c0)) * (size_t)in_size, cb,
                                 (size_t)in_size, in, lo, dim, plane, xp + (size_t)i * (size_t)cb * plane);
                for (q0 = c0 * k_size; q0 < (c0 + cb) * k_size; q0 += ET_CONV_TAPS) {
                    c = q0 / k_size;
                    et_conv_tap_(q0 % k_size, k, kt);
                    for (taps = 0, q = q0; q < (c0 + cb) * k_size && q < q0 + ET_CONV_TAPS; ++q) {
                        int any = 0, reaches = !padded || et_conv_tap_reaches_(kt, in, out, s, d, p, dir);
                        for (e = e0; reaches && e < e0 + len; e += seg) {  /* the chunk's run in each image */
                            i = (int)(e / out_size) - first;
                            at_o = (int)(e % out_size);
                            seg = out_size - at_o < e0 + len - e ? out_size - at_o : (int)(e0 + len - e);
                            et_conv_position_(at_o, out, from);
                            any |= et_conv_tap_inputs_(
                                X + ((size_t)(first + i) * (size_t)C + (size_t)(g * Cg + c)) * (size_t)in_size,
                                padded ? xp + ((size_t)i * (size_t)cb + (size_t)(c - c0)) * plane : NULL, lo, dim, kt,
                                in, out, s, d, p, dir, at_o, from, seg, col[taps] + (e - e0));
                        }
                        if (any)
                            at[taps++] = (size_t)c * (size_t)w_c + (size_t)(q % k_size);
                        c += et_conv_next_tap_(kt, k);
                    }
                    if (!taps)
                        continue;
                    et_conv_gathered_tiles_(Mg, len, taps, Wg, w_m, at, col[0], ys, (size_t)len, started);
                    started = 1;
                }
            }
            for (m = 0; m < Mg; ++m) {
                float b = B ? B[g * Mg + m] : 0.0f;
                for (i = 0; i < len; ++i) {
                    e = e0 + i;
                    Y[((size_t)(e / out_size) * (size_t)M + (size_t)(g * Mg + m)) * (size_t)out_size +
                      (size_t)(e % out_size)] = (started ? ys[(size_t)m * (size_t)len + (size_t)i] : 0.0f) + b;
                }
            }
        }
    }
    return 1;
}

/* Y[n, m] = (sum over c, t of W[m * w_m + c * w_c + t] * the input that
 * tap t reaches, in that order, from 0) + B[m], for groups of at least
 * ET_TILE_ROWS output channels, every tile of output channels taking a
 * block of taps' products at a time (et_tile_f32_).  `dir` is 1 for a
 * convolution, -1 for a transposed one, whose taps read back
 * (et_conv_reads_).  Where output rows are short, tiles run along
 * positions that run on from one image into the next
 * (et_conv_images_f32_) or along output channels (et_conv_channels_f32_).
 * Otherwise, with unit strides the tiles read padded input planes
 * in place (et_conv_direct_f32_), a transposed convolution with strides
 * reads padded rows phase by phase (et_conv_phases_f32_), the rest gather
 * their inputs (et_conv_gathered_f32_), as does any of them whose planes
 * do not fit ET_CONV_SCRATCH: each adds the same products in the same
 * order (the phases leave out products with no input, which are 0). */
static inline void et_conv_chunked_f32_(int N, int C, int M, int G, const int *in, const int *out,
                                        const int *k, const int *s, const int *d, const int *p, int dir,
                                        const float *X, const float *W, int w_m, int w_c, const float *B,
                                        float *Y)
{
    int lo[3], dim[3], by_row = dir < 0 && s[0] * s[1] * s[2] > 1;
    if (et_conv_images_f32_(N, C, M, G, in, out, k, s, d, p, dir, X, W, w_m, w_c, B, Y) ||
        et_conv_channels_f32_(N, C, M, G, in, out, k, s, d, p, dir, X, W, w_m, w_c, B, Y))
        return;
    if (!by_row && et_conv_direct_(s, et_conv_fits_(et_conv_margins_(in, out, k, s, d, p, dir, lo, dim))))
        et_conv_direct_f32_(N, C, M, G, in, out, k, d, p, dir, X, W, w_m, w_c, B, Y);
    else if (!by_row || !et_conv_phases_f32_(N, C, M, G, in, out, k, s, d, p, X, W, w_m, w_c, B, Y))
        et_conv_gathered_f32_(N, C, M, G, in, out, k, s, d, p, dir, X, W, w_m, w_c, B, Y);
}

/* Y[n, m] = (sum over c, t of W[m * w_m + c * w_c + t] * the input that
 * tap t reaches, in that order, from 0) + B[m], for groups of fewer than
 * ET_TILE_ROWS output channels (depthwise convolutions above all), where
 * the strides of the last two axes agree (and the first's, if it has more
 * than one output).  `dir` as for et_conv_chunked_f32_, -1 with unit
 * strides only.  The group's input planes are padded (et_conv_pad_); then
 * in the padded plane's coordinates output (oz, oy, ox) at q = (oz * dim1
 * + oy) * dim2 + ox reads q * stride + (the tap's offset), so each tap adds
 * into every output as one long strided run, positions past a row's end
 * included (their sums are dropped).  Returns 0, having done nothing, where
 * the planes do not fit ET_CONV_SCRATCH; a tap that falls outside the input
 * adds W * 0, so the kernels that clip instead give the same results
 * wherever the weights are finite. */
static inline int et_conv_narrow_f32_(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                      const int *s, const int *d, const int *p, int dir, const float *X,
                                      const float *W, int w_m, int w_c, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), n, g, m, c, t, a, oz, oy, lo[3], dim[3], kt[3];
    size_t plane = et_conv_margins_(in, out, k, s, d, p, dir, lo, dim), q, runs, step = (size_t)s[2];
    float xp[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1], *ys;
    if (!et_conv_fits_((size_t)(Cg + 1) * plane) || s[1] != s[2] || (out[0] > 1 && s[0] != s[2]) ||
        (dir < 0 && et_conv_volume_(s) != 1))
        return 0;
    ET_PATH_(dir > 0 ? "conv_narrow" : "transpose_narrow");
    ys = xp + (size_t)Cg * plane;  /* the sums, in the padded plane's coordinates */
    runs = ((size_t)(out[0] - 1) * (size_t)dim[1] + (size_t)(out[1] - 1)) * (size_t)dim[2] + (size_t)out[2];
    for (n = 0; n < N; ++n)
        for (g = 0; g < G; ++g) {
            et_conv_pad_(X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size, Cg,
                         (size_t)in_size, in, lo, dim, plane, xp);
            for (m = g * Mg; m < (g + 1) * Mg; ++m) {
                /* output channel m's weights */
                const float *Wm = et_conv_group_weights_(W, g, Mg, Cg, w_m, w_c, dir) + (size_t)(m - g * Mg) * (size_t)w_m;
                float *Ym = Y + ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size;
                for (q = 0; q < runs; ++q)
                    ys[q] = 0.0f;
                for (c = 0; c < Cg; ++c)
                    for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k)) {
                        const float *x = xp + (size_t)c * plane, w = Wm[(size_t)c * (size_t)w_c + (size_t)t];
                        size_t off = 0;
                        for (a = 0; a < 3; ++a)
                            off = off * (size_t)dim[a] + (size_t)(lo[a] + dir * (kt[a] * d[a] - p[a]));
                        x += off;
                        if (step == 1)
                            for (q = 0; q < runs; ++q)
                                ys[q] += w * x[q];
                        else
                            for (q = 0; q < runs; ++q)
                                ys[q] += w * x[q * step];
                    }
                for (oz = 0; oz < out[0]; ++oz)
                    for (oy = 0; oy < out[1]; ++oy) {
                        const float *y = ys + ((size_t)oz * (size_t)dim[1] + (size_t)oy) * (size_t)dim[2];
                        float *row = Ym + ((size_t)oz * (size_t)out[1] + (size_t)oy) * (size_t)out[2], b = B ? B[m] : 0.0f;
                        for (a = 0; a < out[2]; ++a)
                            row[a] = y[a] + b;
                    }
            }
        }
    return 1;
}

/* Channels of a depthwise convolution (one input and one output channel
 * per group) that run side by side, interleaved in the scratch. */
#define ET_CONV_DEPTHWISE_CHANNELS 8
#define ET_CONV_DEPTHWISE_TAPS 64  /* the largest kernel they take: 8 x 8, say */
#define ET_CONV_DEPTHWISE_RUN 4    /* outputs of a row at a time */

/* Channel c of ET_CONV_DEPTHWISE_CHANNELS interleaved padded planes (dims
 * `dim`, margins `lo`): xp[position * channels + c] = Xc's input i, at i *
 * put in the plane. */
static inline void et_conv_interleave_(const float *Xc, const int *in, const int *put, const int *lo,
                                       const int *dim, int c, float *xp)
{
    int iz, iy, ix, o = 0;
    for (iz = 0; iz < in[0]; ++iz)
        for (iy = 0; iy < in[1]; ++iy)
            for (ix = 0; ix < in[2]; ++ix, ++o)
                xp[(((size_t)(iz * put[0] + lo[0]) * (size_t)dim[1] + (size_t)(iy * put[1] + lo[1])) *
                    (size_t)dim[2] + (size_t)(ix * put[2] + lo[2])) * ET_CONV_DEPTHWISE_CHANNELS + (size_t)c] = Xc[o];
}

/* A depthwise convolution (dir 1, et_conv_f32) or transposed convolution
 * (dir -1, et_conv_transpose_f32), ET_CONV_DEPTHWISE_CHANNELS channels at
 * a time: their input planes go into the scratch padded and interleaved
 * channel by channel (a transposed one's inputs s apart, zeros between, so
 * that it reads its plane with unit strides), and each output sums its
 * taps in order, from 0, one multiply-add across the channels per tap,
 * then adds the bias (0 without one), as et_conv_narrow_f32_ does.  A tap
 * between or outside the inputs adds W * 0, as there.  Returns 0, having
 * done nothing, where the planes do not fit ET_CONV_SCRATCH or where the
 * other kernels are faster. */
static inline int et_conv_depthwise_f32_(int N, int C, const int *in, const int *out, const int *k, const int *s,
                                         const int *d, const int *p, int dir, const float *X, const float *W,
                                         const float *B, float *Y)
{
    enum { V = ET_CONV_DEPTHWISE_CHANNELS };
    static const int ones[3] = {1, 1, 1};
    const int *put = dir > 0 ? ones : s, *step = dir > 0 ? s : ones;  /* input i at i * put; output o reads o * step */
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int span[3], lo[3], dim[3], kt[3], a, n, c0, cb, c, t, o, oz, oy, ox, j, run;
    size_t plane, tap[ET_CONV_DEPTHWISE_TAPS];
    float xp[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1], wv[ET_CONV_SCRATCH > 0 ? ET_CONV_DEPTHWISE_TAPS * V : 1];
    for (a = 0; a < 3; ++a)
        span[a] = (in[a] - 1) * put[a] + 1;
    plane = et_conv_margins_(span, out, k, step, d, p, dir, lo, dim);
    if (!et_conv_fits_(plane * V) || k_size > ET_CONV_DEPTHWISE_TAPS ||
        (s[0] == 1 && s[1] == 1 && s[2] == 1 && out[2] >= ET_LANES))
        return 0;  /* unit strides over rows of 8 or more: et_conv_narrow_f32_'s long runs do better */
    ET_PATH_(dir > 0 ? "conv_depthwise" : "transpose_depthwise");
    for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k))
        tap[t] = et_conv_tap_offset_(kt, d, p, lo, dim, dir, 0, plane) * V;
    for (n = 0; n < N; ++n)
        for (c0 = 0; c0 < C; c0 += cb) {
            cb = C - c0 < V ? C - c0 : V;
            memset(xp, 0, plane * V * sizeof *xp);
            memset(wv, 0, sizeof wv);  /* channels past C: zeros */
            for (c = 0; c < cb; ++c) {  /* xp[position * V + c], wv[t * V + c] */
                const float *Xc = X + ((size_t)n * (size_t)C + (size_t)(c0 + c)) * (size_t)in_size;
                for (t = 0; t < k_size; ++t)
                    wv[t * V + c] = W[(size_t)(c0 + c) * (size_t)k_size + (size_t)t];
                et_conv_interleave_(Xc, in, put, lo, dim, c, xp);
            }
            for (oz = 0, o = 0; oz < out[0]; ++oz)
                for (oy = 0; oy < out[1]; ++oy)
                    for (ox = 0; ox < out[2]; ox += run, o += run) {  /* up to ET_CONV_DEPTHWISE_RUN outputs */
                        const float *x = xp + (((size_t)oz * (size_t)step[0] * (size_t)dim[1] +
                                                (size_t)oy * (size_t)step[1]) * (size_t)dim[2] +
                                               (size_t)ox * (size_t)step[2]) * V;
                        size_t hop = (size_t)step[2] * V;  /* from one output's inputs to the next's */
                        float acc[ET_CONV_DEPTHWISE_RUN][V] = {{0.0f}};
                        run = out[2] - ox < ET_CONV_DEPTHWISE_RUN ? out[2] - ox : ET_CONV_DEPTHWISE_RUN;
#if ET_VECTORS  /* each output's sums in one register, four outputs' chains of additions side by side */
                        if (run == ET_CONV_DEPTHWISE_RUN) {
                            et_v8_ s0 = {0.0f}, s1 = {0.0f}, s2 = {0.0f}, s3 = {0.0f}, w, x0, x1, x2, x3;
#define ET_LOAD_(j) memcpy(&x##j, x + tap[t] + j * hop, sizeof x##j);
#define ET_ADD_(j) s##j += w * x##j;
#define ET_STORE_(j) memcpy(acc[j], &s##j, sizeof acc[j]);
                            ET_PATH_("depthwise_runs_of_4");
                            for (t = 0; t < k_size; ++t) {
                                memcpy(&w, wv + t * V, sizeof w);
                                ET_EACH4_(ET_LOAD_)
                                ET_EACH4_(ET_ADD_)
                            }
                            ET_EACH4_(ET_STORE_)
#undef ET_LOAD_
#undef ET_ADD_
#undef ET_STORE_
                        } else
                            for (j = 0; j < run; ++j) {
                                et_v8_ sum = {0.0f}, w, xv;
                                for (t = 0; t < k_size; ++t) {
                                    memcpy(&w, wv + t * V, sizeof w);
                                    memcpy(&xv, x + tap[t] + (size_t)j * hop, sizeof xv);
                                    sum += w * xv;
                                }
                                memcpy(acc[j], &sum, sizeof acc[j]);
                            }
#else
                        for (j = 0; j < run; ++j)
                            for (t = 0; t < k_size; ++t)
                                for (c = 0; c < V; ++c)
                                    acc[j][c] += wv[t * V + c] * x[tap[t] + (size_t)j * hop + (size_t)c];
#endif
                        for (c = 0; c < cb; ++c)
                            for (j = 0; j < run; ++j)
                                Y[((size_t)n * (size_t)C + (size_t)(c0 + c)) * (size_t)out_size + (size_t)(o + j)] =
                                    acc[j][c] + (B ? B[c0 + c] : 0.0f);
                    }
        }
    return 1;
}

/* The taps t in [0, n) with 0 <= i0 + t * e < len (e nonzero, of either sign), as [*lo, *hi). */
static inline void et_conv_taps_(int e, int i0, int len, int n, int *lo, int *hi)
{
    if (e > 0)
        et_conv_span_(e, i0, len, n, lo, hi);
    else  /* mirrored: len - 1 - (i0 + t e) runs the other way */
        et_conv_span_(-e, len - 1 - i0, len, n, lo, hi);
}

/* A band of four output rows of a 3 x 3 depthwise kernel without
 * dilation, column by column: output j's tap (ky, kx) reads row iy + j sy
 * + ky ey, column ix + kx ex (ey and ex are 1, or -1 for a transposed
 * kernel).  That row is iy + u ey with u = ky + j D (D = sy ey), so
 * walking u upwards walks each output's taps in their order, ky then kx,
 * and every input row is loaded once (three values) for all the outputs
 * whose windows hold it, the nine weights in registers throughout.  Rows
 * outside the input are skipped, and a column's first or last tap outside
 * takes 0: W * 0 adds nothing to a sum from 0, which is never -0, as the
 * padded kernels' products with the margins add nothing. */
/* Column ox's window: its middle column's input (at), and whether its first or last column is outside. */
#define ET_DW3_COLUMN_                                                                              \
    int at = iy * width + ix + ex, left = (unsigned)ix >= (unsigned)width;                          \
    int right = (unsigned)(ix + 2 * ex) >= (unsigned)width;
/* Output j's tap row u - j dd (weights wr0 .. wr2 of the nine w0 .. w8), where row u (three
 * values v0 .. v2) is in its window. */
#define ET_DW3_OUT_(j)                                                                      \
    if ((unsigned)(u - (j) * dd) <= 2u) {                                                   \
        int ky = u - (j) * dd;                                                              \
        float wr0 = ky == 0 ? w0 : ky == 1 ? w3 : w6, wr1 = ky == 0 ? w1 : ky == 1 ? w4 : w7; \
        float wr2 = ky == 0 ? w2 : ky == 1 ? w5 : w8;                                       \
        a##j = et_mla_(et_mla_(et_mla_(a##j, wr0, v0), wr1, v1), wr2, v2);                  \
    }
/* The band's columns, rows u = u0 .. u1 of each.  Where D, u0 and u1 are literals and GCC unrolls
 * the loop, each output's tap for row u is a constant: sums and weights stay in registers.  (D is a
 * constant dd of the loop's own: the branch that fixes the function's D did not fold the taps.
 * Rows of their own for the columns whose edge taps are both inside, without a test a row, counted
 * 1 % fewer instructions on VWW, and made cppcheck's value flow three times as long.) */
#if defined(__GNUC__) && !defined(__clang__)
#define ET_DW3_UNROLL_ _Pragma("GCC unroll 9")
#else
#define ET_DW3_UNROLL_
#endif
#define ET_DW3_COLUMNS_(D, u0, u1, UNROLL)                                                          \
    const int dd = (D);                                                                             \
    for (ox = 0, ix = ix0; ox < out2; ++ox, ix += sx) {                                             \
        ET_DW3_COLUMN_                                                                              \
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;                                           \
        UNROLL                                                                                      \
        for (u = (u0); u <= (u1); ++u) {                                                            \
            const float *q = x + (at + u * step);                                                   \
            float v0 = left ? 0.0f : q[-ex], v1 = q[0], v2 = right ? 0.0f : q[ex];                   \
            ET_EACH4_(ET_DW3_OUT_)                                                                  \
        }                                                                                           \
        y[ox] = a0 + b;                                                                             \
        if (count > 1)                                                                              \
            y[out2 + ox] = a1 + b;                                                                  \
        if (count > 2)                                                                              \
            y[2 * out2 + ox] = a2 + b;                                                              \
        if (count > 3)                                                                              \
            y[3 * out2 + ox] = a3 + b;                                                              \
    }

/* et_conv_depthwise_planes_f32_'s band of `count` (up to 4) output rows y
 * (out2 outputs a row), as above, for a plane x whose rows are width long,
 * every column's middle tap inside: iy is the input row of the band's tap
 * row 0, step = ey * width, ix0 the input column of column 0's tap 0 (sx
 * apart); the band's rows u in [ua, ub] are inside.  A band at the
 * plane's edge (some rows outside, or fewer than four) walks the same rows
 * in a loop.  Out of line, so that its registers are its own. */
static ET_NOINLINE void et_conv_dw3_band_(int D, int count, int ua, int ub, const float *x, int iy, int step,
                                          int width, int ix0, int sx, int ex, const float *w, float b, float *y,
                                          int out2)
{
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
    int ox, ix, u, umin = D < 0 ? 3 * D : 0, umax = 2 + (D > 0 ? 3 * D : 0);
    if (count == 4 && ua <= umin && ub >= umax) {  /* every row inside: the loop's bounds are literals */
        if (D == 1) {
            ET_DW3_COLUMNS_(1, 0, 5, ET_DW3_UNROLL_)
        } else if (D == 2) {
            ET_DW3_COLUMNS_(2, 0, 8, ET_DW3_UNROLL_)
        } else {
            ET_DW3_COLUMNS_(-1, -3, 2, ET_DW3_UNROLL_)
        }
    } else {
        ET_DW3_COLUMNS_(D, umin > ua ? umin : ua, umax < ub ? umax : ub, )
    }
}
#undef ET_DW3_COLUMN_
#undef ET_DW3_OUT_
#undef ET_DW3_UNROLL_
#undef ET_DW3_COLUMNS_

/* A depthwise convolution (dir 1) or, with unit strides, transposed
 * convolution (dir -1) over planes (one depth), read in place: for builds
 * without the padded scratch (microcontrollers), where the row kernels
 * would set up each tap for a run of a few outputs.  Output (oy, ox) reads
 * input (oy sy + cy + ky ey, ox sx + cx + kx ex) through tap (ky, kx);
 * each output sums its taps in order, from 0, skipping those outside the
 * input (the padded kernels add them as W * 0), then adds the bias (0
 * without one).  Four outputs down a column whose taps all fall inside
 * keep their sums in registers, sharing each weight; 3 x 3 kernels go a
 * band of four rows at a time (et_conv_dw3_band_).  Returns 0, having done
 * nothing, where it does not apply. */
static inline int et_conv_depthwise_planes_f32_(int N, int C, const int *in, const int *out, const int *k,
                                                const int *s, const int *d, const int *p, int dir, const float *X,
                                                const float *W, const float *B, float *Y)
{
    int sy = dir > 0 ? s[1] : 1, sx = dir > 0 ? s[2] : 1, cy = -dir * p[1], cx = -dir * p[2];
    int ey = dir * d[1], ex = dir * d[2], in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), n, c, oy, ox, ky, kx, rows, lo, hi, lo3, hi3;
    /* et_conv_dw3_band_'s D where it applies (every column's middle tap inside), else 0 */
    int D = k[1] == 3 && k[2] == 3 && d[1] == 1 && d[2] == 1 && sy <= 2 && (unsigned)(cx + ex) < (unsigned)in[2] &&
                    (unsigned)((out[2] - 1) * sx + cx + ex) < (unsigned)in[2]
                ? sy * ey
                : 0;
    if (in[0] != 1 || out[0] != 1 || k[0] != 1 || (dir < 0 && (s[1] != 1 || s[2] != 1)))
        return 0;
    ET_PATH_(dir > 0 ? "conv_depthwise_planes" : "transpose_depthwise_planes");
    for (n = 0; n < N; ++n)
        for (c = 0; c < C; ++c) {
            const float *x = X + ((size_t)n * (size_t)C + (size_t)c) * (size_t)in_size;
            const float *w = W + (size_t)c * (size_t)k_size;
            float *y = Y + ((size_t)n * (size_t)C + (size_t)c) * (size_t)out_size, b = B ? B[c] : 0.0f;
            if (D != 0) {
                ET_PATH_(D == 2 ? "depthwise_planes_3x3_strided" : "depthwise_planes_3x3");
                for (oy = 0; oy < out[1]; oy += 4) {  /* the band's rows u inside: 0 <= iy + u ey < in[1] */
                    int iy = oy * sy + cy, ua = ey > 0 ? -iy : iy - in[1] + 1, ub = ey > 0 ? in[1] - 1 - iy : iy;
                    et_conv_dw3_band_(D, out[1] - oy < 4 ? out[1] - oy : 4, ua, ub, x, iy, ey * in[2], in[2], cx, sx,
                                      ex, w, b, y + (size_t)oy * (size_t)out[2], out[2]);
                }
                continue;
            }
            for (oy = 0; oy < out[1]; oy += rows) {
                int iy = oy * sy + cy, rs = sy * in[2];  /* tap row 0's input row; four rows' step */
                et_conv_taps_(ey, iy, in[1], k[1], &lo, &hi);
                et_conv_taps_(ey, iy + 3 * sy, in[1], k[1], &lo3, &hi3);
                rows = out[1] - oy >= 4 && lo == 0 && hi == k[1] && lo3 == 0 && hi3 == k[1] ? 4 : 1;
                if (rows == 4)
                    ET_PATH_("depthwise_planes_4_rows");
                for (ox = 0; ox < out[2]; ++ox) {
                    int ix = ox * sx + cx, kx0, kx1;
                    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                    et_conv_taps_(ex, ix, in[2], k[2], &kx0, &kx1);
                    for (ky = lo; ky < hi; ++ky) {
                        const float *r = x + (size_t)(iy + ky * ey) * (size_t)in[2], *wk = w + ky * k[2];
                        if (rows == 4)
                            for (kx = kx0; kx < kx1; ++kx) {
                                int at = ix + kx * ex;
                                a0 = et_mla_(a0, wk[kx], r[at]);
                                a1 = et_mla_(a1, wk[kx], r[at + rs]);
                                a2 = et_mla_(a2, wk[kx], r[at + 2 * rs]);
                                a3 = et_mla_(a3, wk[kx], r[at + 3 * rs]);
                            }
                        else
                            for (kx = kx0; kx < kx1; ++kx)
                                a0 = et_mla_(a0, wk[kx], r[ix + kx * ex]);
                    }
                    y[(size_t)oy * (size_t)out[2] + (size_t)ox] = a0 + b;
                    if (rows == 4) {
                        y[(size_t)(oy + 1) * (size_t)out[2] + (size_t)ox] = a1 + b;
                        y[(size_t)(oy + 2) * (size_t)out[2] + (size_t)ox] = a2 + b;
                        y[(size_t)(oy + 3) * (size_t)out[2] + (size_t)ox] = a3 + b;
                    }
                }
            }
        }
    return 1;
}

/* A pointwise convolution (et_conv_f32) over a plane of fewer than
 * ET_GEMM_NARROW positions: the group's weights, packed transposed into
 * the scratch (as many output channels as fit), let et_gemm_f32 run its
 * tiles along output channels.  The same products and order as a matrix
 * product on W itself.  Returns 0, having done nothing, where that does
 * not apply or pay. */
static inline int et_conv_pointwise_narrow_f32_(int N, int C, int M, int G, int out_size, const float *X,
                                                const float *W, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G, block = ET_CONV_SCRATCH / (Cg > 0 ? Cg : 1), n, g, m0, mb;
    float wt[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1];
    if (!ET_VECTORS || !et_conv_fits_((size_t)Cg * 8) || out_size >= ET_GEMM_NARROW ||
        out_size % ET_TILE_COLS == 0 || Mg < 8)
        return 0;
    ET_PATH_("conv_pointwise_narrow");
    for (g = 0; g < G; ++g)
        for (m0 = 0; m0 < Mg; m0 += mb) {
            mb = Mg - m0 < block ? Mg - m0 : block;
            et_transpose_f32_(mb, Cg, W + (size_t)(g * Mg + m0) * (size_t)Cg, wt);
            for (n = 0; n < N; ++n)
                et_gemm_f32(mb, out_size, Cg, 1.0f, wt, 1,
                            X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)out_size, 0, 1.0f,
                            B ? B + g * Mg + m0 : NULL, 1, 0,
                            Y + ((size_t)n * (size_t)M + (size_t)(g * Mg + m0)) * (size_t)out_size);
        }
    return 1;
}

/* Y[n, m] = (sum over c, kz, ky, kx, in that order, of
 * W[m, c, kz, ky, kx] * X[n, g*C/G + c, ...]) + B[m]; B may be NULL.
 * The inner loop runs along a contiguous output row.  A pointwise kernel
 * with unit strides and no padding is a matrix product per group, which
 * et_gemm_f32 runs with the same per-element order (c ascending, bias
 * last).  et_conv_f32_ref is the plain form of these sums. */
static inline void et_conv_f32(int N, int C, int M, int G, const int *in, const int *out,
                               const int *k, const int *s, const int *d, const int *p,
                               const float *X, const float *W, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G;
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k);
    int n, m, c, g, r, rows, oz, oy, ox, kz, ky, kx;
    if (et_conv_pointwise_(in, out, k, s, p)) {
        if (et_conv_pointwise_narrow_f32_(N, C, M, G, out_size, X, W, B, Y))
            return;
        ET_PATH_("conv_pointwise_gemm");
        for (n = 0; n < N; ++n)
            for (g = 0; g < G; ++g)
                et_gemm_f32(Mg, out_size, Cg, 1.0f, W + (size_t)g * (size_t)Mg * (size_t)Cg, 0,
                            X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size, 0,
                            1.0f, B ? B + (size_t)g * (size_t)Mg : NULL, 1, 0,
                            Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size);
        return;
    }
    if (Cg == 1 && Mg == 1 &&
        (et_conv_depthwise_f32_(N, C, in, out, k, s, d, p, 1, X, W, B, Y) ||
         (ET_CONV_SCRATCH == 0 && et_conv_depthwise_planes_f32_(N, C, in, out, k, s, d, p, 1, X, W, B, Y))))
        return;
    if (Mg >= ET_CONV_ROWS) {
        et_conv_chunked_f32_(N, C, M, G, in, out, k, s, d, p, 1, X, W, Cg * k_size, k_size, B, Y);
        return;
    }
    if (et_conv_narrow_f32_(N, C, M, G, in, out, k, s, d, p, 1, X, W, Cg * k_size, k_size, B, Y))
        return;
    ET_PATH_("conv_rows");  /* each input row's taps add into a contiguous output row, clipped */
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
 * Scattering keeps the inner loop on a contiguous input row.
 * et_conv_transpose_f32_ref is the plain form of these sums. */
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
        ET_PATH_("transpose_pointwise_gemm");
        for (n = 0; n < N; ++n)
            for (g = 0; g < G; ++g)
                et_gemm_f32(Mg, out_size, Cg, 1.0f, W + (size_t)g * (size_t)Cg * (size_t)Mg, 1,
                            X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg) * (size_t)in_size, 0,
                            1.0f, B ? B + (size_t)g * (size_t)Mg : NULL, 1, 0,
                            Y + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)out_size);
        return;
    }
    if (Cg == 1 && Mg == 1 &&
        (et_conv_depthwise_f32_(N, C, in, out, k, s, d, p, -1, X, W, B, Y) ||
         (ET_CONV_SCRATCH == 0 && et_conv_depthwise_planes_f32_(N, C, in, out, k, s, d, p, -1, X, W, B, Y))))
        return;
    if (Mg >= ET_CONV_ROWS) {
        et_conv_chunked_f32_(N, C, M, G, in, out, k, s, d, p, -1, X, W, k_size, Mg * k_size, B, Y);
        return;
    }
    if (et_conv_narrow_f32_(N, C, M, G, in, out, k, s, d, p, -1, X, W, k_size, Mg * k_size, B, Y))
        return;
    ET_PATH_("transpose_rows");  /* each input row scatters through its taps into output rows */
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

/* Conv's input gradient, dY (M channels, spatial size `out`) -> dX (C channels, size `in`): the
 * transposed convolution et_conv_transpose_f32 makes of dY with Conv's weights, without bias,
 * where dX may be dY itself (the memory plan put it there: the backward pass then holds one of the
 * two).  For the layers whose gradient rule picks this kernel (ConvGradXInPlace): a pointwise
 * convolution without groups and with no more input than output channels, or a depthwise one whose
 * planes keep their size.  In place, dX is made a piece at a time from a copy of that piece of dY
 * in T (t values): for a pointwise one, t / M positions of every channel of one sample, written to
 * planes n C + c <= n M + c, which hold either those positions' copied values or a sample done
 * before; for a depthwise one, t / plane whole planes, written back where they were.  Each output
 * is the sum the transposed convolution makes, in its order. */
static inline void et_conv_grad_x_f32(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                      const int *s, const int *d, const int *p, const float *dY, const float *W,
                                      float *dX, float *T, int t)
{
    int plane = et_conv_volume_(in), n, c, m, j, b;
    if (dX != dY) {
        et_conv_transpose_f32(N, M, C, G, out, in, k, s, d, p, dY, W, NULL, dX);
        return;
    }
    if (G == 1 && et_conv_pointwise_(in, out, k, s, p)) {
        ET_PATH_("grad_x_in_place_pointwise");
        for (n = 0; n < N; ++n)
            for (j = 0; j < plane; j += b) {
                b = t / M < plane - j ? t / M : plane - j;
                for (m = 0; m < M; ++m)
                    memcpy(T + (size_t)m * (size_t)b, dY + ((size_t)n * (size_t)M + (size_t)m) * (size_t)plane + j,
                           (size_t)b * sizeof *T);
                /* dX[n, c, j..] = the sum over m of W[m, c] * dY[n, m, j..]: a whole sample as
                 * et_conv_transpose_f32 makes it, pieces in tiles */
                if (b == plane)
                    et_gemm_f32(C, plane, M, 1.0f, W, 1, T, 0, 1.0f, NULL, 0, 0,
                                dX + (size_t)n * (size_t)C * (size_t)plane);
                else
                    et_gemm_tiles_f32_(C, b, M, W, 1, (size_t)C, T, (size_t)b,
                                       dX + (size_t)n * (size_t)C * (size_t)plane + j, (size_t)plane);
            }
        return;
    }
    ET_PATH_("grad_x_in_place_depthwise");
    for (n = 0; n < N; ++n)
        for (c = 0; c < C; c += b) {
            float *planes = dX + ((size_t)n * (size_t)C + (size_t)c) * (size_t)plane;
            b = t / plane < C - c ? t / plane : C - c;
            memcpy(T, planes, (size_t)b * (size_t)plane * sizeof *T);
            et_conv_transpose_f32(1, b, b, b, out, in, k, s, d, p, T, W + (size_t)c * (size_t)et_conv_volume_(k), NULL,
                                  planes);
        }
}

/* Weight gradients (et_conv_grad_w_f32) over output planes of at most
 * this many positions, for groups of at least ET_CONV_ROWS output
 * channels, sum their products in order rather than in lanes: over so few
 * positions each lane would take a handful of products, and adding the
 * lanes up would cost as much as the products. */
#define ET_CONV_GRAD_SHORT 64

/* Taps whose inputs et_conv_grad_w_short_f32_ gathers at a time, for
 * ET_CONV_CHUNK positions: 16 KB, which stays in cache while the tiles
 * read it. */
#define ET_CONV_GRAD_TAPS_SHORT 64

/* dW[m, q] (q = c * k_size + t) = the sum over n, in order from 0, of
 * each plane's sum over output position j, in order from 0, of
 * dY[n, m, j] * the input that j reads through tap t of input channel c
 * (et_conv_tap_inputs_, 0 outside X).  A plane (P <= ET_CONV_GRAD_SHORT =
 * ET_CONV_CHUNK positions) is one chunk.  On SIMD hosts tiles run along
 * q: the inputs of a block of taps at the plane's positions are gathered
 * into the scratch, a row per position, from a zero-padded copy of each
 * input plane where it fits.  Elsewhere each tap's gathered run serves
 * every output channel's sum. */
static inline void et_conv_grad_w_short_f32_(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                             const int *s, const int *d, const int *p, const float *dY,
                                             const float *X, float *dW)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), P = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), Q = Cg * k_size, g, n, m, q, c, i, taps, lo[3], dim[3], kt[3];
    static const int from[3] = {0, 0, 0};
    size_t plane = et_conv_margins_(in, out, k, s, d, p, 1, lo, dim);
    float col[4][ET_CONV_CHUNK];  /* gathered taps (one on SIMD hosts) */
    int q0, rows;
#if ET_VECTORS
    int pointwise = et_conv_pointwise_(in, out, k, s, p), width, pad_c, r;
    float part[ET_TILE_ROWS * ET_CONV_GRAD_TAPS_SHORT];  /* a tile's sums over one plane */
    int padded = !pointwise && et_conv_fits_(plane + (size_t)ET_CONV_CHUNK * ET_CONV_GRAD_TAPS_SHORT);
    size_t at[ET_CONV_CHUNK], bt[ET_CONV_CHUNK];
    float buf[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1], *xt = buf + (padded ? plane : 0);
    if (et_conv_fits_((size_t)ET_CONV_CHUNK * ET_CONV_GRAD_TAPS_SHORT)) {
        ET_PATH_(pointwise ? "grad_short_tiles_pointwise" : padded ? "grad_short_tiles_padded"
                                                                   : "grad_short_tiles_clipped");
        for (i = 0; i < ET_CONV_CHUNK; ++i) {
            at[i] = (size_t)i;
            bt[i] = (size_t)i * ET_CONV_GRAD_TAPS_SHORT;
        }
        for (g = 0; g < G; ++g)
            for (q0 = 0; q0 < Q; q0 += width) {
                width = Q - q0 < ET_CONV_GRAD_TAPS_SHORT ? Q - q0 : ET_CONV_GRAD_TAPS_SHORT;
                for (n = 0; n < N; ++n) {
                    for (q = q0, pad_c = -1; q < q0 + width; ++q) {
                        const float *Xc, *run = col[0];
                        c = q / k_size;
                        Xc = X + ((size_t)n * (size_t)C + (size_t)(g * Cg + c)) * (size_t)in_size;
                        if (pointwise)  /* the tap's inputs are the plane itself */
                            run = Xc;
                        else {
                            if (padded && c != pad_c)
                                et_conv_pad_(Xc, 1, (size_t)in_size, in, lo, dim, plane, buf);
                            pad_c = c;
                            et_conv_tap_(q % k_size, k, kt);
                            et_conv_tap_inputs_(Xc, padded ? buf : NULL, lo, dim, kt, in, out, s, d, p, 1, 0, from,
                                                P, col[0]);
                        }
                        for (i = 0; i < P; ++i)
                            xt[(size_t)i * ET_CONV_GRAD_TAPS_SHORT + (size_t)(q - q0)] = run[i];
                    }
                    for (m = 0; m < Mg; m += rows) {  /* the first plane's sums straight into dW, the others' added */
                        float *w = dW + (size_t)(g * Mg + m) * (size_t)Q + (size_t)q0;
                        rows = Mg - m < ET_TILE_ROWS ? Mg - m : ET_TILE_ROWS;
                        et_tiles_f32_(rows, width, P, dY + ((size_t)n * (size_t)M + (size_t)(g * Mg + m)) * (size_t)P,
                                      (size_t)P, at, xt, bt, n > 0 ? part : w,
                                      n > 0 ? (size_t)ET_CONV_GRAD_TAPS_SHORT : (size_t)Q, 0);
                        for (r = 0; r < rows && n > 0; ++r)
                            for (i = 0; i < width; ++i)
                                w[(size_t)r * (size_t)Q + (size_t)i] += part[r * ET_CONV_GRAD_TAPS_SHORT + i];
                    }
                }
            }
        return;
    }
#endif
    (void)plane;  /* no padded planes here: inputs are gathered with clipping */
    ET_PATH_("grad_short_gathered");
    for (g = 0; g < G; ++g)
        for (q0 = 0; q0 < Q; q0 += taps) {  /* up to 4 taps gathered at a time */
            taps = Q - q0 < 4 ? Q - q0 : 4;
            for (n = 0; n < N; ++n) {
                const float *dyn = dY + ((size_t)n * (size_t)M + (size_t)g * (size_t)Mg) * (size_t)P;
                float *w = dW + (size_t)g * (size_t)Mg * (size_t)Q + (size_t)q0;
                for (q = 0; q < taps; ++q) {
                    c = (q0 + q) / k_size;
                    et_conv_tap_((q0 + q) % k_size, k, kt);
                    et_conv_tap_inputs_(X + ((size_t)n * (size_t)C + (size_t)(g * Cg + c)) * (size_t)in_size, NULL,
                                        lo, dim, kt, in, out, s, d, p, 1, 0, from, P, col[q]);
                }
                for (m = 0; m < Mg; m += rows) {
                    rows = Mg - m >= 4 && q0 + 4 <= Q ? 4 : 1;
                    if (rows > 1) {  /* 4 output channels by 4 taps, their sums in c<r><t> */
                        const float *dy0 = dyn + (size_t)m * (size_t)P, *dy1 = dy0 + P, *dy2 = dy1 + P, *dy3 = dy2 + P;
#define ET_SUMS_(r) float c##r##0 = 0.0f, c##r##1 = 0.0f, c##r##2 = 0.0f, c##r##3 = 0.0f;
#define ET_ADD_(r)                                                                          \
    {                                                                                       \
        float v = dy##r[i];                                                                 \
        c##r##0 = et_mla_(c##r##0, v, x0);                                                  \
        c##r##1 = et_mla_(c##r##1, v, x1);                                                  \
        c##r##2 = et_mla_(c##r##2, v, x2);                                                  \
        c##r##3 = et_mla_(c##r##3, v, x3);                                                  \
    }
#define ET_STORE1_(r, t)                                                                    \
    {                                                                                       \
        float *wt = w + (size_t)(m + r) * (size_t)Q + t;                                    \
        *wt = n > 0 ? *wt + c##r##t : c##r##t;                                              \
    }
#define ET_STORE_(r) ET_STORE1_(r, 0) ET_STORE1_(r, 1) ET_STORE1_(r, 2) ET_STORE1_(r, 3)
                        ET_PATH_("grad_short_gathered_4x4");
                        ET_EACH4_(ET_SUMS_)
                        for (i = 0; i < P; ++i) {
                            float x0 = col[0][i], x1 = col[1][i], x2 = col[2][i], x3 = col[3][i];
                            ET_EACH4_(ET_ADD_)
                        }
                        ET_EACH4_(ET_STORE_)
#undef ET_SUMS_
#undef ET_ADD_
#undef ET_STORE1_
#undef ET_STORE_
                    } else
                        for (q = 0; q < taps; ++q) {
                            const float *dy = dyn + (size_t)m * (size_t)P;
                            float *wt = w + (size_t)m * (size_t)Q + (size_t)q, sum = 0.0f;
                            for (i = 0; i < P; ++i)
                                sum = et_mla_(sum, dy[i], col[q][i]);
                            *wt = n > 0 ? *wt + sum : sum;
                        }
                }
            }
        }
}

/* The piece of a weight gradient's sums over one dY plane (a long sum,
 * et_linalg.h) that starts at output position o, a piece's start: *rows
 * whole rows of one slice, as many as ET_SUM_PIECE positions hold, or
 * where rows are longer, the next ET_SUM_PIECE positions of one row; *len
 * positions per row.  The piece is positions o .. o + *rows * *len - 1. */
static inline void et_conv_piece_(int o, const int *out, int *rows, int *len)
{
    int left = out[1] - o / out[2] % out[1], ox = o % out[2];
    *rows = out[2] > ET_SUM_PIECE ? 1 : ET_SUM_PIECE / out[2] < left ? ET_SUM_PIECE / out[2] : left;
    *len = out[2] - ox < ET_SUM_PIECE ? out[2] - ox : ET_SUM_PIECE;
}

/* et_conv_grad_w_f32 for a depthwise convolution (one input and one output
 * channel per group), ET_CONV_DEPTHWISE_CHANNELS channels at a time: their
 * padded input planes and dY planes are interleaved channel by channel in
 * the scratch, so that each product of a tap at an output position is one
 * multiply-add across the channels, whatever the plane's shape or stride.
 * Every weight's lanes take the same products in the same order as
 * et_conv_grad_w_f32's (within a piece, lane l: its positions l, l +
 * ET_LANES, ...), and the same totals.  Returns 0, having done nothing,
 * where the interleaved planes do not fit ET_CONV_SCRATCH. */
static inline int et_conv_grad_w_depthwise_f32_(int N, int C, const int *in, const int *out, const int *k,
                                                const int *s, const int *d, const int *p, const float *dY,
                                                const float *X, float *dW)
{
    enum { V = ET_CONV_DEPTHWISE_CHANNELS, LANES = ET_CONV_SCRATCH > 0 ? ET_CONV_DEPTHWISE_TAPS * ET_LANES * V : 1 };
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    static const int ones[3] = {1, 1, 1};
    int lo[3], dim[3], kt[3], from[3], n, c0, cb, c, t, l, o, o0, i, j, r, rows, len;
    size_t plane = et_conv_margins_(in, out, k, s, d, p, 1, lo, dim), tap[ET_CONV_DEPTHWISE_TAPS];
    float xp[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1], *yp;
    /* At ((t * ET_LANES + l) * V + c: a piece's lanes, and the plane's. */
    float lane[LANES], sum[LANES];
    if (!et_conv_fits_((plane + (size_t)out_size) * V) || k_size > ET_CONV_DEPTHWISE_TAPS)
        return 0;
    yp = xp + plane * V;  /* only once it fits: a pointer beyond the array is undefined even unused */
    ET_PATH_("grad_depthwise");
    for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k))
        tap[t] = et_conv_tap_offset_(kt, d, p, lo, dim, 1, 0, plane);
    for (c0 = 0; c0 < C; c0 += cb) {
        cb = C - c0 < V ? C - c0 : V;
        memset(xp, 0, plane * V * sizeof *xp);  /* the margins stay 0 */
        for (c = cb; c < V; ++c)  /* the channels past C: zeros, whose sums are dropped */
            for (o = 0; o < out_size; ++o)
                yp[(size_t)o * V + (size_t)c] = 0.0f;
        for (n = 0; n < N; ++n) {
            for (c = 0; c < cb; ++c) {  /* xp[position * V + c], yp[o * V + c] */
                const float *Xc = X + ((size_t)n * (size_t)C + (size_t)(c0 + c)) * (size_t)in_size;
                const float *dYc = dY + ((size_t)n * (size_t)C + (size_t)(c0 + c)) * (size_t)out_size;
                et_conv_interleave_(Xc, in, ones, lo, dim, c, xp);
                for (o = 0; o < out_size; ++o)
                    yp[(size_t)o * V + (size_t)c] = dYc[o];
            }
            memset(sum, 0, (size_t)k_size * ET_LANES * V * sizeof *sum);
            for (o0 = 0; o0 < out_size; o0 += rows * len) {
                et_conv_piece_(o0, out, &rows, &len);
                et_conv_position_(o0, out, from);
                memset(lane, 0, (size_t)k_size * ET_LANES * V * sizeof *lane);
                for (r = 0, j = 0; r < rows; ++r)
                    for (i = 0; i < len; ++i, ++j) {  /* position j of the piece: lane j % ET_LANES */
                        const float *y = yp + (size_t)(o0 + j) * V;
                        const float *x = xp + (((size_t)from[0] * (size_t)s[0] * (size_t)dim[1] +
                                                (size_t)(from[1] + r) * (size_t)s[1]) * (size_t)dim[2] +
                                               (size_t)(from[2] + i) * (size_t)s[2]) * V;
#if ET_VECTORS  /* one vector per tap: the same sums, whatever the optimizer makes of the loops */
                        et_v8_ yv, xv, acc;
                        memcpy(&yv, y, sizeof yv);
                        for (t = 0; t < k_size; ++t) {
                            float *at = lane + ((size_t)t * ET_LANES + (size_t)(j % ET_LANES)) * V;
                            memcpy(&acc, at, sizeof acc);
                            memcpy(&xv, x + tap[t] * V, sizeof xv);
                            acc += yv * xv;
                            memcpy(at, &acc, sizeof acc);
                        }
#else
                        for (t = 0; t < k_size; ++t) {
                            float *acc = lane + ((size_t)t * ET_LANES + (size_t)(j % ET_LANES)) * V;
                            const float *xt = x + tap[t] * V;
                            for (c = 0; c < V; ++c)
                                acc[c] += y[c] * xt[c];
                        }
#endif
                    }
                for (i = 0; i < k_size * ET_LANES * V; ++i)
                    sum[i] += lane[i];
            }
            for (c = 0; c < cb; ++c)
                for (t = 0; t < k_size; ++t) {
                    float total[ET_LANES], *w = dW + (size_t)(c0 + c) * (size_t)k_size + (size_t)t, plane_total;
                    for (l = 0; l < ET_LANES; ++l)
                        total[l] = sum[((size_t)t * ET_LANES + (size_t)l) * V + (size_t)c];
                    plane_total = et_dot_total_f32_(total);
                    *w = n > 0 ? *w + plane_total : plane_total;
                }
        }
    }
    return 1;
}

/* w[h] = (add ? w[h] : 0) + et_dot_total_f32_ of lanes h (ET_LANES floats
 * each, one after the other) for h < taps: with vectors, eight totals at
 * once (ET_DOT_TOTALS8_), the same additions. */
static inline void et_conv_plane_totals_(int taps, const float *lane, int add, float *w)
{
    int h = 0;
#if ET_VECTORS
    for (; h + 8 <= taps; h += 8) {
        const float *at = lane + (size_t)h * ET_LANES;
        et_v8_ c0, c1, c2, c3, c4, c5, c6, c7, t;
        float total[8];
#define ET_LOAD_(q) memcpy(&c##q, at + 8 * q, sizeof c##q);
        ET_EACH8_(ET_LOAD_)
#undef ET_LOAD_
        ET_DOT_TOTALS8_(c0, c1, c2, c3, c4, c5, c6, c7, total);
        memcpy(&t, total, sizeof t);
        if (add) {
            et_v8_ old;
            memcpy(&old, w + h, sizeof old);
            t = old + t;
        }
        memcpy(w + h, &t, sizeof t);
    }
#endif
    for (; h < taps; ++h) {
        float total = et_dot_total_f32_(lane + (size_t)h * ET_LANES);
        w[h] = add ? w[h] + total : total;
    }
}

/* One piece's lanes (tap t's lane l at piece[t * ET_LANES + l]) of
 * et_conv_grad_w_depthwise_planes_f32_ for a 3 x 3 kernel without
 * dilation: lane l's nine sums stay in registers while it takes the
 * piece's positions l, l + ET_LANES, ... in order, from 0, each position's
 * window of X loaded once.  A window reaching outside X takes 0 there:
 * v * 0 adds nothing to a lane's sum, which starts from 0 and so is never
 * -0, as the gathered runs' zeros add nothing.  Windows whose rows are
 * inside and whose first or last column only is outside (a plane's edge
 * columns with a padding of 1) take the literal 0 there, not a test per
 * tap. */
#define ET_EACH9_(S) S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8)

static inline void et_conv_dw3_grad_piece_(const float *x, const float *g, const int *in, const int *out,
                                           const int *s, const int *p, int o0, int rows, int len, float *piece)
{
    /* The piece's positions are g[o0] .. g[o0 + rows len - 1] (whole rows, or a part of one): a
     * lane's next position is ET_LANES on in g, and its window's (iy, ix) moves with its column ox. */
    const int h = in[1], w = in[2], sy = s[1], sx = s[2], ox_end = o0 % out[2] + len, end = o0 + rows * len;
    int l, at, ox, iy, ix;
    for (l = 0; l < ET_LANES; ++l) {
#define ET_SUMS_(t) float p##t = 0.0f;
/* columns first .. last of the window inside (and its rows and middle column: rows_in); q, q1 and q2 at its
 * middle column's rows, so that each tap is a load at a constant offset */
#define ET_COLUMNS_(t, first, last) \
    x##t = (t) % 3 < (first) || (t) % 3 > (last) ? 0.0f : ((t) < 3 ? q : (t) < 6 ? q1 : q2)[(t) % 3 - 1];
#define ET_INSIDE_(t) ET_COLUMNS_(t, 0, 2)
#define ET_LEFT_(t) ET_COLUMNS_(t, 1, 2)
#define ET_RIGHT_(t) ET_COLUMNS_(t, 0, 1)
#define ET_CLIPPED_(t)                                                                                \
    x##t = (unsigned)(iy + (t) / 3) < (unsigned)h && (unsigned)(ix + (t) % 3) < (unsigned)w           \
               ? x[(iy + (t) / 3) * w + ix + (t) % 3]                                                 \
               : 0.0f;
#define ET_ADD_(t) p##t = et_mla_(p##t, v, x##t);
#define ET_STORE_(t) piece[(t) * ET_LANES + l] = p##t;
        ET_EACH9_(ET_SUMS_)
        at = o0 + l;
        ox = o0 % out[2] + l % len;
        iy = (o0 / out[2] + l / len) * sy - p[1];
        ix = ox * sx - p[2];
        for (; at < end; at += ET_LANES) {
            float v = g[at], x0, x1, x2, x3, x4, x5, x6, x7, x8;
            int rows_in = iy >= 0 && iy + 2 < h && ix + 1 >= 0 && ix + 1 < w, first_in = ix >= 0, last_in = ix + 2 < w;
            const float *q = x + (rows_in ? iy * w + ix + 1 : 0);
            const float *q1 = q + (rows_in ? w : 0), *q2 = q1 + (rows_in ? w : 0);
            if (rows_in && first_in && last_in) {
                ET_EACH9_(ET_INSIDE_)
            } else if (rows_in && last_in) {
                ET_EACH9_(ET_LEFT_)
            } else if (rows_in && first_in) {
                ET_EACH9_(ET_RIGHT_)
            } else {
                ET_EACH9_(ET_CLIPPED_)
            }
            ET_EACH9_(ET_ADD_)
            for (ox += ET_LANES, ix += ET_LANES * sx; ox >= ox_end; ox -= len, ix -= len * sx)
                iy += sy;
        }
        ET_EACH9_(ET_STORE_)
#undef ET_SUMS_
#undef ET_COLUMNS_
#undef ET_INSIDE_
#undef ET_LEFT_
#undef ET_RIGHT_
#undef ET_CLIPPED_
#undef ET_ADD_
#undef ET_STORE_
    }
}

/* et_conv_grad_w_f32 for a depthwise convolution over planes (one
 * depth), read in place: for builds without the padded scratch
 * (microcontrollers), where the lanes' runs would be gathered a row of a
 * few positions at a time.  Within each piece of a dY plane, every tap's
 * lane l takes the piece's positions l, l + ET_LANES, ... in order, from
 * 0, skipping the products whose input lies outside X (the gathered runs
 * hold 0 there); the pieces, the planes' totals and their sum over n are
 * et_conv_grad_w_f32's.  Returns 0, having done nothing, where it does
 * not apply. */
#define ET_CONV_PLANES_TAPS 16  /* the largest kernel it takes: 4 x 4, say (1 KB of lanes on the stack) */

static inline int et_conv_grad_w_depthwise_planes_f32_(int N, int C, const int *in, const int *out, const int *k,
                                                       const int *s, const int *d, const int *p, const float *dY,
                                                       const float *X, float *dW)
{
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int n, c, o0, rows, len, r, j, i, ky, kx, ky0, ky1, kx0, kx1, q;
    int three = k[1] == 3 && k[2] == 3 && d[1] == 1 && d[2] == 1;  /* et_conv_dw3_grad_piece_ applies */
    float piece[ET_CONV_PLANES_TAPS * ET_LANES], lane[ET_CONV_PLANES_TAPS * ET_LANES];
    if (in[0] != 1 || out[0] != 1 || k[0] != 1 || k_size > ET_CONV_PLANES_TAPS)
        return 0;
    ET_PATH_(three ? "grad_depthwise_planes_3x3" : "grad_depthwise_planes");
    for (c = 0; c < C; ++c)
        for (n = 0; n < N; ++n) {
            const float *x = X + ((size_t)n * (size_t)C + (size_t)c) * (size_t)in_size;
            const float *g = dY + ((size_t)n * (size_t)C + (size_t)c) * (size_t)out_size;
            for (o0 = 0; o0 < out_size; o0 += rows * len) {
                et_conv_piece_(o0, out, &rows, &len);
                if (three)
                    et_conv_dw3_grad_piece_(x, g, in, out, s, p, o0, rows, len, piece);
                else {
                    memset(piece, 0, (size_t)k_size * ET_LANES * sizeof *piece);
                    for (r = 0, i = 0; r < rows; ++r) {
                        int oy = o0 / out[2] + r, iy = oy * s[1] - p[1];
                        et_conv_span_(d[1], iy, in[1], k[1], &ky0, &ky1);
                        for (j = 0; j < len; ++j, ++i) {
                            int ox = o0 % out[2] + j, ix = ox * s[2] - p[2];
                            float v = g[(size_t)oy * (size_t)out[2] + (size_t)ox];
                            float *at = piece + (i % ET_LANES);  /* tap t's lane at t * ET_LANES */
                            et_conv_span_(d[2], ix, in[2], k[2], &kx0, &kx1);
                            for (ky = ky0; ky < ky1; ++ky) {
                                const float *xr = x + (size_t)(iy + ky * d[1]) * (size_t)in[2];
                                for (kx = kx0; kx < kx1; ++kx) {
                                    float *a = at + (ky * k[2] + kx) * ET_LANES;
                                    *a = et_mla_(*a, v, xr[ix + kx * d[2]]);
                                }
                            }
                        }
                    }
                }
                for (q = 0; q < k_size * ET_LANES; ++q)  /* the plane's pieces, added lane by lane */
                    lane[q] = o0 == 0 ? piece[q] : lane[q] + piece[q];
            }
            et_conv_plane_totals_(k_size, lane, n > 0, dW + (size_t)c * (size_t)k_size);
        }
    return 1;
}

/* Conv's weight gradient: dW[m, c, kz, ky, kx] = sum over n, oz, oy, ox
 * of dY[n, m, o] * X[n, g*C/G + c, o*s + k*d - p], with Conv's geometry
 * (`in` is X's size, `out` is dY's), the tap's input 0 outside X
 * (et_conv_tap_inputs_).  ConvTranspose's weight gradient is the same sum
 * with the roles of X and dY swapped.  Each weight's sum is a long sum
 * (et_linalg.h) in three levels: each piece of a dY plane
 * (et_conv_piece_) in lanes, lane l taking the piece's positions l, l +
 * ET_LANES, ... in order from 0; the plane's pieces added in order, lane
 * by lane, from 0; the planes' lane totals (et_dot_total_f32_) added in
 * order of n into dW.  Up to ET_CONV_GRAD_TAPS taps of one input channel
 * (of several, for a pointwise kernel) and ET_CONV_GRAD_ROWS output
 * channels of a group run together, so that each run of inputs and each
 * dY row serves them all (et_dot_tile_f32_).  With unit strides and rows
 * of whole lane blocks the runs are read in place from the padded plane,
 * whole pieces of ET_CONV_GRAD_RUN positions or so per call; otherwise a
 * piece's runs are gathered.  Either way lane l takes the same products
 * in the same order.  Over output planes of at most ET_CONV_GRAD_SHORT
 * positions groups of ET_CONV_ROWS output channels or more sum in order
 * instead, without lanes (et_conv_grad_w_short_f32_).
 * et_conv_grad_w_f32_ref is the plain form of these sums. */
#define ET_CONV_GRAD_ROWS (ET_VECTORS ? 64 : 16)  /* 16: 2 KB of lanes on a microcontroller's stack */
#define ET_CONV_GRAD_RUN 256
#define ET_CONV_GRAD_TAPS (ET_VECTORS ? 16 : ET_DOT_TILE_TAPS)

/* (A small function that chose among the paths and left the lanes to
 * another would be inlined into the generated code, and gcc -O2, given
 * the call's constant geometry, would warn of array bounds on paths that
 * the geometry never takes.) */
static inline void et_conv_grad_w_f32(int N, int C, int M, int G, const int *in,
                                      const int *out, const int *k, const int *s,
                                      const int *d, const int *p, const float *dY,
                                      const float *X, float *dW)
{
    int Cg = C / G, Mg = M / G, pointwise = et_conv_pointwise_(in, out, k, s, p);
    int in_size = et_conv_volume_(in), out_size = et_conv_volume_(out), k_size = et_conv_volume_(k);
    int n, g, m0, m, q0, h, r, o0, len, rows, block, taps, per, segs, lo[3], dim[3], from[3], kt[3];
    size_t plane = et_conv_margins_(in, out, k, s, d, p, 1, lo, dim), xt[ET_CONV_GRAD_TAPS];
    int padded = !pointwise && et_conv_fits_(plane);
    /* Rows of whole lane blocks are read in place from the padded plane, runs of other shapes gathered. */
    int direct = et_conv_direct_(s, padded) && out[2] % ET_LANES == 0;
    float col[ET_CONV_GRAD_TAPS][ET_SUM_PIECE], xp[ET_CONV_SCRATCH > 0 ? ET_CONV_SCRATCH : 1];
    if (Mg >= ET_CONV_ROWS && out_size <= ET_CONV_GRAD_SHORT) {
        et_conv_grad_w_short_f32_(N, C, M, G, in, out, k, s, d, p, dY, X, dW);
        return;
    }
    if (Cg == 1 && Mg == 1 && !direct &&
        (et_conv_grad_w_depthwise_f32_(N, C, in, out, k, s, d, p, dY, X, dW) ||
         (ET_CONV_SCRATCH == 0 && et_conv_grad_w_depthwise_planes_f32_(N, C, in, out, k, s, d, p, dY, X, dW))))
        return;  /* rows of whole lane blocks, read in place, are faster still */
    ET_PATH_(pointwise ? "grad_lanes_pointwise" : direct ? "grad_lanes_direct"
                                                : padded ? "grad_lanes_padded" : "grad_lanes_clipped");
    for (g = 0; g < G; ++g)
        for (m0 = g * Mg; m0 < (g + 1) * Mg; m0 += block) {
            block = (g + 1) * Mg - m0 < ET_CONV_GRAD_ROWS ? (g + 1) * Mg - m0 : ET_CONV_GRAD_ROWS;
            for (q0 = 0; q0 < Cg * k_size; q0 += taps) {
                float lane[ET_CONV_GRAD_ROWS * ET_CONV_GRAD_TAPS * ET_LANES];  /* the plane's sums */
                int c = q0 / k_size, end = pointwise ? Cg : (c + 1) * k_size;  /* taps of one plane */
                taps = end - q0 < ET_CONV_GRAD_TAPS ? end - q0 : ET_CONV_GRAD_TAPS;
                et_conv_tap_(q0 % k_size, k, kt);
                for (h = 0; h < taps; ++h) {  /* where each tap's run starts: in X, the scratch or the gathered runs */
                    xt[h] = pointwise ? (size_t)h * (size_t)in_size
                                      : direct ? et_conv_tap_offset_(kt, d, p, lo, dim, 1, 0, plane)
                                               : (size_t)h * ET_SUM_PIECE;
                    et_conv_next_tap_(kt, k);
                }
                for (n = 0; n < N; ++n) {
                    const float *Xc = X + ((size_t)n * (size_t)C + (size_t)g * (size_t)Cg + (size_t)c) * (size_t)in_size;
                    if (padded)
                        et_conv_pad_(Xc, 1, (size_t)in_size, in, lo, dim, plane, xp);
                    for (o0 = 0; o0 < out_size; o0 += segs * len) {
                        /* A pointwise kernel's taps are whole planes of X, read in place. */
                        const float *x = pointwise ? Xc + o0 : col[0];
                        et_conv_piece_(o0, out, &per, &len);
                        et_conv_position_(o0, out, from);
                        segs = 1;
                        if (direct) {  /* rows of one slice, ET_CONV_GRAD_RUN positions or so: dY stays in cache for every tap */
                            int whole = len < out[2] ? 1 : per * (ET_CONV_GRAD_RUN / (per * len) > 1 ? ET_CONV_GRAD_RUN / (per * len) : 1);
                            segs = out[1] - from[1] < whole ? out[1] - from[1] : whole;
                            x = xp + ((size_t)from[0] * (size_t)dim[1] + (size_t)from[1]) * (size_t)dim[2] + (size_t)from[2];
                        } else {  /* one run of the plane */
                            len *= per;
                            per = 1;
                            if (!pointwise)
                                for (h = 0, et_conv_tap_(q0 % k_size, k, kt); h < taps; ++h, et_conv_next_tap_(kt, k))
                                    et_conv_tap_inputs_(Xc, padded ? xp : NULL, lo, dim, kt, in, out, s, d, p, 1, o0,
                                                        from, len, col[h]);
                        }
                        for (m = 0; m < block; m += rows) {
                            rows = block - m < ET_TILE_ROWS ? block - m : ET_TILE_ROWS;
                            for (h = 0; h < taps; h += ET_DOT_TILE_TAPS)
                                et_dot_tile_f32_(rows, taps - h < ET_DOT_TILE_TAPS ? taps - h : ET_DOT_TILE_TAPS, segs,
                                                 per, o0 == 0, len, dY + ((size_t)n * (size_t)M + (size_t)(m0 + m)) * (size_t)out_size +
                                                 (size_t)o0, (size_t)out_size, (size_t)out[2], x, xt + h,
                                                 (size_t)dim[2],
                                                 lane + ((size_t)m * ET_CONV_GRAD_TAPS + (size_t)h) * ET_LANES,
                                                 ET_CONV_GRAD_TAPS * ET_LANES);
                        }
                    }
                    for (r = 0; r < block; ++r)  /* each plane's totals, into dW */
                        et_conv_plane_totals_(taps, lane + (size_t)r * ET_CONV_GRAD_TAPS * ET_LANES, n > 0,
                                              dW + (size_t)(m0 + r) * (size_t)Cg * (size_t)k_size + (size_t)q0);
                }
            }
        }
}

/* ---- References ----
 * The three kernels above as the obvious loops, one output (or weight) at
 * a time, in the order of sums each states: slow and plain, so that tests
 * check every fast path against them bit for bit.  Taps that reach no
 * input are skipped; the fast paths that add W * 0 for them instead give
 * the same sums wherever the values are finite. */

/* The input that output position `at` (oz, oy, ox) reads through tap kt
 * of plane Xc, or NULL where there is none: at o*s + kt*d - p for a
 * convolution (dir 1), at i with i*s = o + p - kt*d for a transposed one. */
static inline const float *et_conv_ref_input_(const float *Xc, const int *in, const int *at, const int *kt,
                                              const int *s, const int *d, const int *p, int dir)
{
    int a, i[3];
    for (a = 0; a < 3; ++a) {
        int r = dir > 0 ? at[a] * s[a] + kt[a] * d[a] - p[a] : at[a] + p[a] - kt[a] * d[a];
        if (r < 0 || (dir < 0 && r % s[a]))
            return NULL;
        i[a] = dir > 0 ? r : r / s[a];
        if (i[a] >= in[a])
            return NULL;
    }
    return Xc + ((size_t)i[0] * (size_t)in[1] + (size_t)i[1]) * (size_t)in[2] + (size_t)i[2];
}

/* Y[n, m, o] = (the sum over c, then taps t in order, from 0, of the weight
 * times the input that o reads through t) + (B ? B[m] : 0): et_conv_f32
 * (dir 1, W [M, C/G, k...]) and et_conv_transpose_f32 (dir -1, W [C, M/G,
 * k...]). */
static inline void et_conv_ref_f32_(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                    const int *s, const int *d, const int *p, int dir, const float *X,
                                    const float *W, const float *B, float *Y)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), n, m, c, t, o, at[3], kt[3];
    for (n = 0; n < N; ++n)
        for (m = 0; m < M; ++m)
            for (o = 0; o < out_size; ++o) {
                int g = m / Mg;
                float sum = 0.0f;
                et_conv_position_(o, out, at);
                for (c = 0; c < Cg; ++c) {
                    const float *Xc = X + ((size_t)n * (size_t)C + (size_t)(g * Cg + c)) * (size_t)in_size;
                    const float *Wc = W + (dir > 0 ? ((size_t)m * (size_t)Cg + (size_t)c) * (size_t)k_size
                                                   : ((size_t)(g * Cg + c) * (size_t)Mg + (size_t)(m - g * Mg)) *
                                                         (size_t)k_size);
                    for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k)) {
                        const float *x = et_conv_ref_input_(Xc, in, at, kt, s, d, p, dir);
                        if (x)
                            sum += Wc[t] * *x;
                    }
                }
                Y[((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size + (size_t)o] = sum + (B ? B[m] : 0.0f);
            }
}

static inline void et_conv_f32_ref(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                   const int *s, const int *d, const int *p, const float *X, const float *W,
                                   const float *B, float *Y)
{
    et_conv_ref_f32_(N, C, M, G, in, out, k, s, d, p, 1, X, W, B, Y);
}

static inline void et_conv_transpose_f32_ref(int N, int C, int M, int G, const int *in, const int *out,
                                             const int *k, const int *s, const int *d, const int *p,
                                             const float *X, const float *W, const float *B, float *Y)
{
    et_conv_ref_f32_(N, C, M, G, in, out, k, s, d, p, -1, X, W, B, Y);
}

/* dW[m, c, t] = the sum over n, in order, from the first plane's sum, of
 * each plane's sum of dY[n, m, o] times the input that o reads through t
 * (et_conv_grad_w_f32's long sum): with groups of ET_CONV_ROWS output
 * channels or more over planes of at most ET_CONV_GRAD_SHORT positions,
 * over o in order, from 0; otherwise in lanes, lane j % ET_LANES taking
 * position j of each piece (et_conv_piece_), in order from 0, the pieces'
 * lanes added in order from 0, and et_dot_total_f32_ of the lanes. */
static inline void et_conv_grad_w_f32_ref(int N, int C, int M, int G, const int *in, const int *out, const int *k,
                                          const int *s, const int *d, const int *p, const float *dY,
                                          const float *X, float *dW)
{
    int Cg = C / G, Mg = M / G, in_size = et_conv_volume_(in), out_size = et_conv_volume_(out);
    int k_size = et_conv_volume_(k), in_order = Mg >= ET_CONV_ROWS && out_size <= ET_CONV_GRAD_SHORT;
    int n, m, c, t, o0, j, l, rows, len, at[3], kt[3];
    for (m = 0; m < M; ++m)
        for (c = 0; c < Cg; ++c)
            for (t = 0, kt[0] = kt[1] = kt[2] = 0; t < k_size; ++t, et_conv_next_tap_(kt, k))
                for (n = 0; n < N; ++n) {
                    const float *Xc = X + ((size_t)n * (size_t)C + (size_t)(m / Mg * Cg + c)) * (size_t)in_size;
                    const float *dy = dY + ((size_t)n * (size_t)M + (size_t)m) * (size_t)out_size;
                    float *w = dW + ((size_t)m * (size_t)Cg + (size_t)c) * (size_t)k_size + (size_t)t;
                    float plane = 0.0f, lane[ET_LANES] = {0.0f};
                    for (o0 = 0; o0 < out_size; o0 += rows * len) {
                        float part[ET_LANES] = {0.0f};
                        et_conv_piece_(o0, out, &rows, &len);
                        for (j = 0; j < rows * len; ++j) {
                            const float *x;
                            et_conv_position_(o0 + j, out, at);
                            x = et_conv_ref_input_(Xc, in, at, kt, s, d, p, 1);
                            if (x && in_order)
                                plane += dy[o0 + j] * *x;
                            else if (x)
                                part[j % ET_LANES] += dy[o0 + j] * *x;
                        }
                        for (l = 0; l < ET_LANES; ++l)
                            lane[l] += part[l];
                    }
                    plane = in_order ? plane : et_dot_total_f32_(lane);
                    *w = n > 0 ? *w + plane : plane;
                }
}

#endif /* ET_CONV_H */
