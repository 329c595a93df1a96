/* edgetrain runtime: GridSample over 2-D planes (bilinear or nearest;
 * zeros, border or reflection padding; either align_corners), with the
 * gradients of X and of the grid, as PyTorch's grid_sample computes them.
 *
 * X is (N, C, H, W), the grid (N, Ho, Wo, 2), each (x, y) in [-1, 1]
 * across W and H, Y (N, C, Ho, Wo).  Backward scatters dX in the order of
 * the output (n, then position, then channel), so its sums have a fixed
 * order.  Outputs must not overlap inputs. */
#ifndef ET_GRID_H
#define ET_GRID_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

enum { ET_GRID_ZEROS = 0, ET_GRID_BORDER = 1, ET_GRID_REFLECTION = 2 };

/* The input coordinate of grid coordinate g across an axis of n, and in
 * *d its derivative by g: 0 where the border clips it, negated where a
 * reflection turns it.  A reflection folds about [0, n - 1] with
 * align_corners, about [-0.5, n - 0.5] without, then clips as the border
 * does. */
static inline float et_grid_coord_(float g, int n, int align_corners, int padding, float *d)
{
    float x = align_corners ? ((g + 1.0f) / 2.0f) * (float)(n - 1) : ((g + 1.0f) * (float)n - 1.0f) / 2.0f;
    *d = align_corners ? (float)(n - 1) / 2.0f : (float)n / 2.0f;
    if (padding == ET_GRID_REFLECTION) {
        float low = align_corners ? 0.0f : -0.5f, span = align_corners ? (float)(n - 1) : (float)n, extra;
        if (span <= 0.0f) {
            *d = 0.0f;
            return 0.0f;
        }
        x -= low;
        if (x < 0.0f) {
            x = -x;
            *d = -*d;
        }
        extra = et_fmodf(x, span);
        if (et_fmodf(et_floorf_(x / span), 2.0f) != 0.0f) { /* an odd number of folds */
            x = span - extra + low;
            *d = -*d;
        } else
            x = extra + low;
    }
    if (padding != ET_GRID_ZEROS) {
        if (x <= 0.0f || x >= (float)(n - 1))
            *d = 0.0f;
        x = x <= 0.0f ? 0.0f : (x >= (float)(n - 1) ? (float)(n - 1) : x);
    }
    return x;
}

/* Where one output position reads: the offsets in its plane (y * W + x)
 * of the taps nw, ne, sw, se (nearest: the first alone), -1 where a tap
 * falls outside; their weights; the fractions fx, fy and their
 * complements gx, gy (bilinear), and the coordinates' derivatives by the
 * grid's. */
typedef struct {
    int at[4];
    float w[4], fx, fy, gx, gy, dx, dy;
} et_grid_taps_;

static inline et_grid_taps_ et_grid_taps_of_(const float *g, int H, int W, int nearest, int padding,
                                              int align_corners)
{
    et_grid_taps_ t;
    float ix = et_grid_coord_(g[0], W, align_corners, padding, &t.dx);
    float iy = et_grid_coord_(g[1], H, align_corners, padding, &t.dy);
    int k;
    for (k = 0; k < 4; ++k) {
        t.at[k] = -1;
        t.w[k] = 0.0f;
    }
    t.fx = t.fy = t.gx = t.gy = 0.0f;
    /* Far outside (or NaN), no tap is inside, and no coordinate may become an int. */
    if (!(ix > -2.0f && ix < (float)W + 1.0f && iy > -2.0f && iy < (float)H + 1.0f))
        return t;
    if (nearest) {
        int x = (int)et_roundf_(ix), y = (int)et_roundf_(iy); /* halves to even, as nearbyint */
        if (x >= 0 && x < W && y >= 0 && y < H) {
            t.at[0] = y * W + x;
            t.w[0] = 1.0f;
        }
        return t;
    }
    {
        float x0 = et_floorf_(ix), y0 = et_floorf_(iy);
        int x = (int)x0, y = (int)y0;
        t.fx = ix - x0;
        t.gx = (x0 + 1.0f) - ix;
        t.fy = iy - y0;
        t.gy = (y0 + 1.0f) - iy;
        t.w[0] = t.gx * t.gy;
        t.w[1] = t.fx * t.gy;
        t.w[2] = t.gx * t.fy;
        t.w[3] = t.fx * t.fy;
        for (k = 0; k < 4; ++k) {
            int xk = x + (k & 1), yk = y + (k >> 1);
            t.at[k] = xk >= 0 && xk < W && yk >= 0 && yk < H ? yk * W + xk : -1;
        }
    }
    return t;
}

static inline void et_grid_sample_f32(int N, int C, int H, int W, int Ho, int Wo, int nearest, int padding,
                                      int align_corners, const float *X, const float *G, float *Y)
{
    size_t plane = (size_t)H * (size_t)W, P = (size_t)Ho * (size_t)Wo, p;
    int n, c, k;
    for (n = 0; n < N; ++n)
        for (p = 0; p < P; ++p) {
            et_grid_taps_ t = et_grid_taps_of_(G + ((size_t)n * P + p) * 2, H, W, nearest, padding, align_corners);
            for (c = 0; c < C; ++c) {
                const float *x = X + ((size_t)n * (size_t)C + (size_t)c) * plane;
                float y = 0.0f;
                for (k = 0; k < 4; ++k)
                    if (t.at[k] >= 0)
                        y += x[t.at[k]] * t.w[k];
                Y[((size_t)n * (size_t)C + (size_t)c) * P + p] = y;
            }
        }
}

/* dX (zeroed first) and dG of et_grid_sample_f32; nearest sampling gives
 * the grid no gradient, as PyTorch's. */
static inline void et_grid_sample_grad_f32(int N, int C, int H, int W, int Ho, int Wo, int nearest, int padding,
                                           int align_corners, const float *dY, const float *X, const float *G,
                                           float *dX, float *dG)
{
    size_t plane = (size_t)H * (size_t)W, P = (size_t)Ho * (size_t)Wo, p, i;
    int n, c, k;
    for (i = 0; i < (size_t)N * (size_t)C * plane; ++i)
        dX[i] = 0.0f;
    for (n = 0; n < N; ++n)
        for (p = 0; p < P; ++p) {
            const float *g = G + ((size_t)n * P + p) * 2;
            et_grid_taps_ t = et_grid_taps_of_(g, H, W, nearest, padding, align_corners);
            float gix = 0.0f, giy = 0.0f;
            for (c = 0; c < C; ++c) {
                size_t at = ((size_t)n * (size_t)C + (size_t)c) * plane;
                float d = dY[((size_t)n * (size_t)C + (size_t)c) * P + p], v[4];
                for (k = 0; k < 4; ++k) {
                    v[k] = t.at[k] >= 0 ? X[at + (size_t)t.at[k]] : 0.0f;
                    if (t.at[k] >= 0)
                        dX[at + (size_t)t.at[k]] += t.w[k] * d;
                }
                if (!nearest) {
                    gix -= v[0] * t.gy * d;
                    giy -= v[0] * t.gx * d;
                    gix += v[1] * t.gy * d;
                    giy -= v[1] * t.fx * d;
                    gix -= v[2] * t.fy * d;
                    giy += v[2] * t.gx * d;
                    gix += v[3] * t.fy * d;
                    giy += v[3] * t.fx * d;
                }
            }
            dG[((size_t)n * P + p) * 2] = t.dx * gix;
            dG[((size_t)n * P + p) * 2 + 1] = t.dy * giy;
        }
}

#endif
