/* edgetrain runtime: max and average pooling (also the global forms,
 * which are one window covering the plane) and their gradients, and
 * Col2Im (torch's fold), whose blocks are windows of the same geometry.
 *
 * Geometry is 3-D as in et_conv.h: `in`, `out`, `k`, `s`, `d` hold 3 ints
 * (input and output spatial sizes, window, strides, dilations), `p` holds 6
 * (3 leading pads, then 3 trailing).  X is NC planes of `in`; window o reads
 * input positions o*s + k*d - p.  Taps in the padding are skipped; the
 * compiler rejects geometries with a window that has no input tap (ceil_mode
 * can create one), so every window has at least one.
 *
 * Windows are scanned in (kz, ky, kx) order and gradients are scattered in
 * output order, so sums have one fixed order.  Outputs must not overlap
 * inputs. */
#ifndef ET_POOL_H
#define ET_POOL_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_LINALG_H
#include "et_linalg.h"
#endif

/* ceil(a / b) for b > 0 and a of either sign (C division truncates). */
static inline int et_pool_ceil_div_(int a, int b)
{
    return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

/* The taps t in [0, n) with 0 <= t*step + off < len, as [*lo, *hi).  Most
 * windows lie inside the input, and take every tap without a division. */
static inline void et_pool_span_(int step, int off, int len, int n, int *lo, int *hi)
{
    int a, b;
    if (off >= 0 && off + (n - 1) * step < len) {
        *lo = 0;
        *hi = n;
        return;
    }
    a = et_pool_ceil_div_(-off, step);
    b = et_pool_ceil_div_(len - off, step);
    *lo = a > 0 ? a : 0;
    *hi = b < n ? b : n;
    if (*hi < *lo)
        *hi = *lo;
}

/* Window of output position o: first input position per axis, and the
 * taps [lo, hi) that land inside the input. */
static inline void et_pool_window_(const int *o, const int *in, const int *k, const int *s,
                                   const int *d, const int *p, int *start, int *lo, int *hi)
{
    int a;
    for (a = 0; a < 3; ++a) {
        start[a] = o[a] * s[a] - p[a];
        et_pool_span_(d[a], start[a], in[a], k[a], &lo[a], &hi[a]);
    }
}

/* Offsets into a plane are ints: a window's row may start in the padding
 * (a negative offset) although every tap read is inside the plane. */

/* Plane offset of the window's maximum: the first one in scan order, as
 * PyTorch picks it, so gradients of ties go where PyTorch sends them.
 * The first NaN counts as the maximum, so NaN propagates as in PyTorch. */
static inline int et_max_pool_argmax_(const float *x, const int *in, const int *d,
                                      const int *start, const int *lo, const int *hi)
{
    int kz, ky, kx, best = ((start[0] + lo[0] * d[0]) * in[1] + start[1] + lo[1] * d[1]) * in[2] +
                           start[2] + lo[2] * d[2];
    float m = -INFINITY;
    for (kz = lo[0]; kz < hi[0]; ++kz)
        for (ky = lo[1]; ky < hi[1]; ++ky) {
            int row = ((start[0] + kz * d[0]) * in[1] + start[1] + ky * d[1]) * in[2] + start[2];
            for (kx = lo[2]; kx < hi[2]; ++kx) {
                float v = x[row + kx * d[2]];
                if (v > m || (v != v && m == m)) {
                    m = v;
                    best = row + kx * d[2];
                }
            }
        }
    return best;
}

/* Row-major odometer over the 3 output axes; returns 0 after the last. */
static inline int et_pool_next_(int *o, const int *out)
{
    int a;
    for (a = 2; a >= 0; --a) {
        if (++o[a] < out[a])
            return 1;
        o[a] = 0;
    }
    return 0;
}

static inline int et_pool_volume_(const int *v)
{
    return v[0] * v[1] * v[2];
}

static inline void et_max_pool_f32(int NC, const int *in, const int *out, const int *k,
                                   const int *s, const int *d, const int *p, const float *X,
                                   float *Y)
{
    int in_size = et_pool_volume_(in), out_size = et_pool_volume_(out), plane;
    for (plane = 0; plane < NC; ++plane) {
        const float *x = X + (size_t)plane * (size_t)in_size;
        float *y = Y + (size_t)plane * (size_t)out_size;
        int o[3] = {0, 0, 0}, start[3], lo[3], hi[3], j = 0;
        do {
            et_pool_window_(o, in, k, s, d, p, start, lo, hi);
            y[j++] = x[et_max_pool_argmax_(x, in, d, start, lo, hi)];
        } while (et_pool_next_(o, out));
    }
}

/* The Indices output is not kept: the argmax is found again from X, which
 * the gradient keeps alive anyway, and costs no int64 tensor. */
static inline void et_max_pool_grad_f32(int NC, const int *in, const int *out, const int *k,
                                        const int *s, const int *d, const int *p,
                                        const float *dY, const float *X, float *dX)
{
    int in_size = et_pool_volume_(in), out_size = et_pool_volume_(out), plane, i;
    for (plane = 0; plane < NC; ++plane) {
        const float *x = X + (size_t)plane * (size_t)in_size;
        const float *dy = dY + (size_t)plane * (size_t)out_size;
        float *dx = dX + (size_t)plane * (size_t)in_size;
        int o[3] = {0, 0, 0}, start[3], lo[3], hi[3], j = 0;
        for (i = 0; i < in_size; ++i)
            dx[i] = 0.0f;
        do {
            et_pool_window_(o, in, k, s, d, p, start, lo, hi);
            dx[et_max_pool_argmax_(x, in, d, start, lo, hi)] += dy[j++];
        } while (et_pool_next_(o, out));
    }
}

/* The divisor of window o: its input taps, or with count_include_pad its
 * taps inside the padded extent [-p_begin, in + p_end) (PyTorch's and ONNX
 * Runtime's rule, which matters where ceil_mode lets a window run past it). */
static inline float et_average_pool_count_(int count_include_pad, const int *in, const int *k,
                                           const int *s, const int *d, const int *p,
                                           const int *o, const int *lo, const int *hi)
{
    int a, count = 1;
    for (a = 0; a < 3; ++a) {
        int plo, phi;
        if (count_include_pad)
            et_pool_span_(d[a], o[a] * s[a], in[a] + p[a] + p[a + 3], k[a], &plo, &phi);
        else
            plo = lo[a], phi = hi[a];
        count *= phi - plo;
    }
    return (float)count;
}

/* A window's sum: in order from 0 up to ET_SUM_PIECE values; beyond (a
 * global pool over a large plane), a long sum (et_linalg.h) whose runs are
 * the window's rows. */
static inline void et_average_pool_f32(int NC, const int *in, const int *out, const int *k,
                                       const int *s, const int *d, const int *p,
                                       int count_include_pad, const float *X, float *Y)
{
    int in_size = et_pool_volume_(in), out_size = et_pool_volume_(out), plane;
    for (plane = 0; plane < NC; ++plane) {
        const float *x = X + (size_t)plane * (size_t)in_size;
        float *y = Y + (size_t)plane * (size_t)out_size;
        int o[3] = {0, 0, 0}, start[3], lo[3], hi[3], j = 0, kz, ky, kx, i;
        do {
            float acc = 0.0f, run[ET_SUM_PIECE];
            et_sum_ sum;
            int width, values;
            et_pool_window_(o, in, k, s, d, p, start, lo, hi);
            width = hi[2] - lo[2];
            values = (hi[0] - lo[0]) * (hi[1] - lo[1]) * width;
            et_sum_start_(&sum);
            for (kz = lo[0]; kz < hi[0]; ++kz)
                for (ky = lo[1]; ky < hi[1]; ++ky) {
                    int row = ((start[0] + kz * d[0]) * in[1] + start[1] + ky * d[1]) * in[2] + start[2];
                    if (values <= ET_SUM_PIECE)
                        for (kx = lo[2]; kx < hi[2]; ++kx)
                            acc += x[row + kx * d[2]];
                    else
                        for (kx = lo[2]; kx < hi[2]; kx += ET_SUM_PIECE) {
                            int len = hi[2] - kx < ET_SUM_PIECE ? hi[2] - kx : ET_SUM_PIECE;
                            for (i = 0; i < len; ++i)
                                run[i] = x[row + (kx + i) * d[2]];
                            et_sum_run_f32_(&sum, len, run);
                        }
                }
            if (values > ET_SUM_PIECE)
                acc = et_sum_total_(&sum);
            y[j++] = acc / et_average_pool_count_(count_include_pad, in, k, s, d, p, o, lo, hi);
        } while (et_pool_next_(o, out));
    }
}

static inline void et_average_pool_grad_f32(int NC, const int *in, const int *out, const int *k,
                                            const int *s, const int *d, const int *p,
                                            int count_include_pad, const float *dY, float *dX)
{
    int in_size = et_pool_volume_(in), out_size = et_pool_volume_(out), plane, i;
    for (plane = 0; plane < NC; ++plane) {
        const float *dy = dY + (size_t)plane * (size_t)out_size;
        float *dx = dX + (size_t)plane * (size_t)in_size;
        int o[3] = {0, 0, 0}, start[3], lo[3], hi[3], j = 0, kz, ky, kx;
        for (i = 0; i < in_size; ++i)
            dx[i] = 0.0f;
        do {
            float g;
            et_pool_window_(o, in, k, s, d, p, start, lo, hi);
            g = dy[j++] / et_average_pool_count_(count_include_pad, in, k, s, d, p, o, lo, hi);
            for (kz = lo[0]; kz < hi[0]; ++kz)
                for (ky = lo[1]; ky < hi[1]; ++ky) {
                    int row = ((start[0] + kz * d[0]) * in[1] + start[1] + ky * d[1]) * in[2] + start[2];
                    for (kx = lo[2]; kx < hi[2]; ++kx)
                        dx[row + kx * d[2]] += g;
                }
        } while (et_pool_next_(o, out));
    }
}

/* Col2Im: plane c of the columns holds one row of L = volume(out) block
 * values per tap t of the window (taps in (kz, ky, kx) order), and value
 * (t, o) belongs at the image position of tap t of window o.  Gathering 0,
 * `from` is the columns and `to` the image: each position is the sum of
 * the values that land on it, added in (t, o) order as PyTorch's fold adds
 * them, and values in the padding are dropped.  Gathering 1 (the gradient,
 * torch's unfold), `from` is the image and each value of the columns `to`
 * is read back from its position, 0 in the padding. */
static inline void et_col2im_walk_(int NC, const int *in, const int *out, const int *k, const int *s,
                                   const int *d, const int *p, int gather, const float *from, float *to)
{
    int in_size = et_pool_volume_(in), out_size = et_pool_volume_(out), cols = et_pool_volume_(k) * out_size;
    int plane, i;
    for (plane = 0; plane < NC; ++plane) {
        const float *src = from + (size_t)plane * (size_t)(gather ? in_size : cols);
        float *dst = to + (size_t)plane * (size_t)(gather ? cols : in_size);
        int t[3] = {0, 0, 0}, lo[3], hi[3], oz, oy, ox, a, col = 0;
        for (i = 0; i < (gather ? cols : in_size); ++i)
            dst[i] = 0.0f;
        do {  /* the windows o in [lo, hi) put tap t inside the image */
            for (a = 0; a < 3; ++a)
                et_pool_span_(s[a], t[a] * d[a] - p[a], in[a], out[a], &lo[a], &hi[a]);
            for (oz = lo[0]; oz < hi[0]; ++oz)
                for (oy = lo[1]; oy < hi[1]; ++oy) {
                    int c = col + (oz * out[1] + oy) * out[2];
                    int x = ((oz * s[0] + t[0] * d[0] - p[0]) * in[1] + oy * s[1] + t[1] * d[1] - p[1]) * in[2] +
                            t[2] * d[2] - p[2];
                    if (gather)
                        for (ox = lo[2]; ox < hi[2]; ++ox)
                            dst[c + ox] = src[x + ox * s[2]];
                    else
                        for (ox = lo[2]; ox < hi[2]; ++ox)
                            dst[x + ox * s[2]] += src[c + ox];
                }
            col += out_size;
        } while (et_pool_next_(t, k));
    }
}

static inline void et_col2im_f32(int NC, const int *in, const int *out, const int *k, const int *s,
                                 const int *d, const int *p, const float *X, float *Y)
{
    et_col2im_walk_(NC, in, out, k, s, d, p, 0, X, Y);
}

static inline void et_col2im_grad_f32(int NC, const int *in, const int *out, const int *k, const int *s,
                                      const int *d, const int *p, const float *dY, float *dX)
{
    et_col2im_walk_(NC, in, out, k, s, d, p, 1, dY, dX);
}

#endif /* ET_POOL_H */
