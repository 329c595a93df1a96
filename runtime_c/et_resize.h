/* edgetrain runtime: Pad and Resize (nearest, linear and cubic), with gradients.
 *
 * Both map every output element to input elements axis by axis, so each
 * has one walker used in both directions: forward gathers
 * Y[o] = sum w * X[i]; backward scatters dX[i] += w * dY[o], visiting the
 * output in row-major order so the accumulation order is fixed.  The
 * per-axis mapping is recomputed only when that axis's index changes.
 * Outputs must not overlap inputs. */
#ifndef ET_RESIZE_H
#define ET_RESIZE_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif

enum { ET_PAD_CONSTANT = 0, ET_PAD_REFLECT = 1, ET_PAD_EDGE = 2, ET_PAD_WRAP = 3 };

/* The input index output index o of an axis reads (o - begin inside the
 * input), or -1 for the constant border.  Negative pads crop: the same
 * formula then selects an inner range.  Reflect repeats when the pad is
 * wider than the axis, as numpy.pad does. */
static inline int et_pad_source(int o, int begin, int n, int mode)
{
    int i = o - begin, period;
    if (i >= 0 && i < n)
        return i;
    if (n <= 0 || mode == ET_PAD_CONSTANT)
        return -1;
    if (mode == ET_PAD_EDGE)
        return i < 0 ? 0 : n - 1;
    if (mode == ET_PAD_WRAP) {
        i %= n;
        return i < 0 ? i + n : i;
    }
    if (n == 1)
        return 0;
    period = 2 * (n - 1);
    i %= period;
    if (i < 0)
        i += period;
    return i < n ? i : period - i;
}

/* The walk over a padded output in order: for each output element, the
 * offset of the input element it copies, or -1 on a constant border. */
struct et_pad_walk {
    int rank, mode;
    const int *in_shape, *out_shape, *begins;
    int strides[ET_MAX_RANK], idx[ET_MAX_RANK], part[ET_MAX_RANK];
};

static inline void et_pad_walk_part_(struct et_pad_walk *w, int d)
{
    int s = et_pad_source(w->idx[d], w->begins[d], w->in_shape[d], w->mode);
    w->part[d] = s < 0 ? -1 : s * w->strides[d];
}

/* Returns the number of output elements; *n_in gets the input's. */
static inline int et_pad_walk_start_(struct et_pad_walk *w, int rank, const int *in_shape, const int *out_shape,
                                     const int *begins, int mode, int *n_in)
{
    int d, n_out = 1;
    w->rank = rank;
    w->mode = mode;
    w->in_shape = in_shape;
    w->out_shape = out_shape;
    w->begins = begins;
    for (*n_in = 1, d = rank - 1; d >= 0; --d) {
        w->strides[d] = *n_in;
        w->idx[d] = 0;
        *n_in *= in_shape[d];
        n_out *= out_shape[d];
    }
    for (d = 0; d < rank; ++d)
        et_pad_walk_part_(w, d);
    return n_out;
}

static inline int et_pad_walk_source_(const struct et_pad_walk *w)
{
    int d, off = 0;
    for (d = 0; d < w->rank; ++d) {
        if (w->part[d] < 0)
            return -1;
        off += w->part[d];
    }
    return off;
}

static inline void et_pad_walk_next_(struct et_pad_walk *w)
{
    int d;
    for (d = w->rank - 1; d >= 0; --d) {
        if (++w->idx[d] >= w->out_shape[d])
            w->idx[d] = 0;
        et_pad_walk_part_(w, d);
        if (w->idx[d] != 0)
            break;
    }
}

/* forward: Y = pad(X); backward: dX = sum of dY over the outputs reading
 * each input (the constant border gets no gradient). */
static inline void et_pad_walk_f32(int rank, const int *in_shape, const int *out_shape, const int *begins,
                                   int mode, float value, const float *src, float *dst, int backward)
{
    struct et_pad_walk w;
    int n_in, o, off, n_out = et_pad_walk_start_(&w, rank, in_shape, out_shape, begins, mode, &n_in);
    if (backward)
        for (o = 0; o < n_in; ++o)
            dst[o] = 0.0f;
    for (o = 0; o < n_out; ++o, et_pad_walk_next_(&w)) {
        off = et_pad_walk_source_(&w);
        if (backward) {
            if (off >= 0)
                dst[off] += src[o];
        } else {
            dst[o] = off < 0 ? value : src[off];
        }
    }
}

/* Integer and bool tensors (labels shifted by a pad). */
static inline void et_pad_i32(int rank, const int *in_shape, const int *out_shape, const int *begins, int mode,
                              int32_t value, const int32_t *X, int32_t *Y)
{
    struct et_pad_walk w;
    int n_in, o, off, n_out = et_pad_walk_start_(&w, rank, in_shape, out_shape, begins, mode, &n_in);
    for (o = 0; o < n_out; ++o, et_pad_walk_next_(&w)) {
        off = et_pad_walk_source_(&w);
        Y[o] = off < 0 ? value : X[off];
    }
}

static inline void et_pad_f32(int rank, const int *in_shape, const int *out_shape, const int *begins, int mode,
                              float value, const float *X, float *Y)
{
    et_pad_walk_f32(rank, in_shape, out_shape, begins, mode, value, X, Y, 0);
}

static inline void et_pad_grad_f32(int rank, const int *in_shape, const int *out_shape, const int *begins,
                                   int mode, const float *dY, float *dX)
{
    et_pad_walk_f32(rank, in_shape, out_shape, begins, mode, 0.0f, dY, dX, 1);
}

/* ONNX coordinate_transformation_mode values we support. */
enum { ET_RESIZE_HALF_PIXEL = 0, ET_RESIZE_PYTORCH_HALF_PIXEL = 1, ET_RESIZE_ALIGN_CORNERS = 2,
       ET_RESIZE_ASYMMETRIC = 3 };
/* mode linear, mode nearest with its nearest_mode, or mode cubic. */
enum { ET_RESIZE_LINEAR = 0, ET_RESIZE_ROUND_PREFER_FLOOR = 1, ET_RESIZE_ROUND_PREFER_CEIL = 2,
       ET_RESIZE_FLOOR = 3, ET_RESIZE_CEIL = 4, ET_RESIZE_CUBIC = 5 };

/* The most input indices one output index of an axis reads: cubic's four. */
#define ET_RESIZE_TAPS 4

/* Output coordinate o in input coordinates, computed in float as ONNX
 * Runtime does. */
static inline float et_resize_coord(int o, int n_in, int n_out, float scale, int coord)
{
    if (coord == ET_RESIZE_ALIGN_CORNERS)
        return n_out <= 1 ? 0.0f : (float)o * (float)(n_in - 1) / (float)(n_out - 1);
    if (coord == ET_RESIZE_ASYMMETRIC)
        return (float)o / scale;
    if (coord == ET_RESIZE_PYTORCH_HALF_PIXEL && n_out <= 1)
        return 0.0f;
    return ((float)o + 0.5f) / scale - 0.5f;
}

/* The cubic convolution kernel with parameter a at distance d in [0, 2]:
 * ((a + 2) d - (a + 3)) d^2 + 1 within one sample, ((a d - 5 a) d + 8 a) d
 * - 4 a beyond, as ONNX's cubic_coeff_a defines it (PyTorch's bicubic is
 * a = -0.75). */
static inline float et_cubic_weight_(float d, float a)
{
    if (d <= 1.0f)
        return ((a + 2.0f) * d - (a + 3.0f)) * d * d + 1.0f;
    return ((a * d - 5.0f * a) * d + 8.0f * a) * d - 4.0f * a;
}

/* The input indices output index o of an axis reads, taps[t], and their
 * weights w[t], for t < the count returned.  Linear clamps the coordinate
 * into [0, n_in - 1], which is what ONNX's edge-replicating neighbours and
 * PyTorch's index clamping amount to: taps lo and hi, weights 1 - w_hi and
 * w_hi.  Nearest reads one index, with weight 1.  Cubic reads floor(x) - 1
 * .. floor(x) + 2, each clamped into the axis (edge replication, PyTorch's
 * bounded reads); with exclude_outside, those outside weigh 0 and the rest
 * are divided by their sum.  Every rounding of a negative coordinate ends at
 * index 0 for linear and nearest, so their negatives are clamped first and
 * the float -> int conversions below are floors. */
static inline int et_resize_taps(int o, int n_in, int n_out, float scale, int coord, int mode, float cubic_a,
                                 int exclude_outside, int *taps, float *w)
{
    float x = et_resize_coord(o, n_in, n_out, scale, coord), frac, sum = 0.0f;
    int i, t;
    if (mode == ET_RESIZE_CUBIC) {
        i = (int)x;
        i -= (float)i > x;  /* floor */
        frac = x - (float)i;
        for (t = 0; t < ET_RESIZE_TAPS; ++t) {
            int at = i - 1 + t;
            float d = t < 2 ? frac + (float)(1 - t) : (float)(t - 1) - frac;
            w[t] = exclude_outside && (at < 0 || at >= n_in) ? 0.0f : et_cubic_weight_(d, cubic_a);
            taps[t] = at < 0 ? 0 : at >= n_in ? n_in - 1 : at;
            sum += w[t];
        }
        if (exclude_outside)
            for (t = 0; t < ET_RESIZE_TAPS; ++t)
                w[t] /= sum;
        return ET_RESIZE_TAPS;
    }
    if (x < 0.0f)
        x = 0.0f;
    if (mode == ET_RESIZE_LINEAR) {
        if (x > (float)(n_in - 1))
            x = (float)(n_in - 1);
        i = (int)x;
        taps[0] = i;
        taps[1] = i + 1 < n_in ? i + 1 : i;
        w[1] = x - (float)i;
        w[0] = 1.0f - w[1];
        return 2;
    }
    i = (int)x;
    frac = x - (float)i;
    if ((mode == ET_RESIZE_CEIL && frac > 0.0f) || (mode == ET_RESIZE_ROUND_PREFER_FLOOR && frac > 0.5f) ||
        (mode == ET_RESIZE_ROUND_PREFER_CEIL && frac >= 0.5f))
        ++i;
    taps[0] = i > n_in - 1 ? n_in - 1 : i;
    w[0] = 1.0f;
    return 1;
}

/* scales: ONNX's scales input, scales[scale_index[d]] for axis d (index
 * -1: axis not listed); NULL when the model gave sizes, so
 * scale = out / in as the spec defines.  Linear and cubic interpolate over
 * the taps of the k axes that change, every combination of one tap per
 * axis, the first axis's tap varying fastest; an unchanged axis maps
 * exactly to itself (one tap, its own index, weight 1), whatever its taps'
 * weights would round to.  Nearest reads one input. */
static inline void et_resize_walk_f32(int rank, const int *in_shape, const int *out_shape, const float *scales,
                                      const int *scale_index, int coord, int mode, float cubic_a,
                                      int exclude_outside, const float *src, float *dst, int backward)
{
    int strides[ET_MAX_RANK] = {0}, idx[ET_MAX_RANK] = {0}, taps[ET_MAX_RANK][ET_RESIZE_TAPS] = {{0}};
    int active[ET_MAX_RANK] = {0}, n_taps[ET_MAX_RANK] = {0}, same[ET_MAX_RANK] = {0};
    float scale[ET_MAX_RANK] = {0.0f}, weight[ET_MAX_RANK][ET_RESIZE_TAPS] = {{0.0f}}, w, acc;
    int d, a, n_active = 0, n_in = 1, n_out = 1, o, k, rest, t, combinations = 1, base, off;
    for (d = rank - 1; d >= 0; --d) {
        strides[d] = n_in;
        n_in *= in_shape[d];
        n_out *= out_shape[d];
    }
    if (backward)
        for (o = 0; o < n_in; ++o)
            dst[o] = 0.0f;
    if (n_out == 0)
        return;
    for (d = 0; d < rank; ++d) {
        scale[d] = scales && scale_index[d] >= 0 ? scales[scale_index[d]]
                                                 : (float)out_shape[d] / (float)in_shape[d];
        n_taps[d] = et_resize_taps(0, in_shape[d], out_shape[d], scale[d], coord, mode, cubic_a, exclude_outside,
                                   taps[d], weight[d]);
        same[d] = n_taps[d] > 1 && in_shape[d] == out_shape[d] && scale[d] == 1.0f;
        if (same[d])
            taps[d][0] = 0;
        else if (n_taps[d] > 1) {
            active[n_active++] = d;
            combinations *= n_taps[d];
        }
    }
    for (o = 0; o < n_out; ++o) {
        base = 0;
        for (d = 0; d < rank; ++d)
            base += taps[d][0] * strides[d];
        acc = 0.0f;
        for (k = 0; k < combinations; ++k) {
            off = base;
            w = 1.0f;
            for (rest = k, a = 0; a < n_active; ++a) {
                d = active[a];
                t = rest % n_taps[d];
                rest /= n_taps[d];
                off += (taps[d][t] - taps[d][0]) * strides[d];
                w *= weight[d][t];
            }
            if (backward)
                dst[off] += w * src[o];
            else
                acc += w * src[off];
        }
        if (!backward)
            dst[o] = acc;
        for (d = rank - 1; d >= 0; --d) {
            if (++idx[d] >= out_shape[d])
                idx[d] = 0;
            if (same[d])
                taps[d][0] = idx[d];
            else
                et_resize_taps(idx[d], in_shape[d], out_shape[d], scale[d], coord, mode, cubic_a, exclude_outside,
                               taps[d], weight[d]);
            if (idx[d] != 0)
                break;
        }
    }
}

/* Nearest and linear. */
static inline void et_resize_f32(int rank, const int *in_shape, const int *out_shape, const float *scales,
                                 const int *scale_index, int coord, int mode, const float *X, float *Y)
{
    et_resize_walk_f32(rank, in_shape, out_shape, scales, scale_index, coord, mode, 0.0f, 0, X, Y, 0);
}

static inline void et_resize_grad_f32(int rank, const int *in_shape, const int *out_shape, const float *scales,
                                      const int *scale_index, int coord, int mode, const float *dY, float *dX)
{
    et_resize_walk_f32(rank, in_shape, out_shape, scales, scale_index, coord, mode, 0.0f, 0, dY, dX, 1);
}

/* Cubic, with ONNX's cubic_coeff_a and exclude_outside. */
static inline void et_resize_cubic_f32(int rank, const int *in_shape, const int *out_shape, const float *scales,
                                       const int *scale_index, int coord, float cubic_a, int exclude_outside,
                                       const float *X, float *Y)
{
    et_resize_walk_f32(rank, in_shape, out_shape, scales, scale_index, coord, ET_RESIZE_CUBIC, cubic_a,
                       exclude_outside, X, Y, 0);
}

static inline void et_resize_cubic_grad_f32(int rank, const int *in_shape, const int *out_shape,
                                            const float *scales, const int *scale_index, int coord, float cubic_a,
                                            int exclude_outside, const float *dY, float *dX)
{
    et_resize_walk_f32(rank, in_shape, out_shape, scales, scale_index, coord, ET_RESIZE_CUBIC, cubic_a,
                       exclude_outside, dY, dX, 1);
}

#endif /* ET_RESIZE_H */
