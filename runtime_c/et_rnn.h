/* edgetrain runtime: RNN (tanh or ReLU), GRU and LSTM (ONNX semantics,
 * default activations), forward and backward through time, one direction
 * per call.
 *
 * Each call gets its direction's slices of W, R and B, and a geometry
 * `g` = {T, N, I, H, reverse, x_t, x_b, y_t, y_b, s_b}: element (t, n)
 * of X starts at t * x_t + n * x_b, hidden vector (t, n) of Y at
 * t * y_t + n * y_b, and batch row n of initial_h, initial_c, Y_h, Y_c
 * and their gradients at n * s_b.  The strides carry ONNX's two layouts
 * and the interleaving of bidirectional outputs.  B, initial_h and
 * initial_c may be NULL (zeros).
 *
 * The outputs double as working memory, so that no kernel needs a buffer
 * the memory planner does not see beyond a chunk of a step's gates on its
 * stack (ET_RNN_CHUNK): the GRU builds r (.) h in Y's slot for the step
 * before the new state is complete, the LSTM keeps its running cell state
 * in Y_c.  Y, Y_h (and Y_c) must therefore all be given and must not
 * overlap each other or the inputs.
 *
 * In training, `saved` keeps per step and batch row what the backward
 * pass needs (ET_GRU_SAVED or ET_LSTM_SAVED vectors of H), at
 * (t * N + n) * K * H; the backward pass reads the previous hidden state
 * from Y.  Backward carries dL/dh (and dL/dc) from step to step in dH0
 * (and dC0), which end as the gradients of the initial states.
 *
 * Forward takes the batch rows of a step two at a time, so that each row
 * of W and R read serves both (et_rnn_dots_).
 *
 * Backward runs in two passes.  The first goes back through time, as the
 * recurrence must, and leaves in each step's row of `saved` (read by then,
 * and read by nothing after the backward pass) the gradients of its
 * gates' pre-activations; R^T times them, the gradient carried to the step
 * before, is one matrix product per step over the batch.  The second
 * makes dW, dR and dX from them as matrix products in et_linalg.h's
 * register tiles, each weight gradient's sum over the steps in order of
 * time (t, then n, ascending). */
#ifndef ET_RNN_H
#define ET_RNN_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif
#ifndef ET_LINALG_H
#include "et_linalg.h"
#endif
#ifndef ET_ELEMENTWISE_H
#include "et_elementwise.h"
#endif

#define ET_RNN_SAVED 1  /* the new hidden state */
#define ET_GRU_SAVED 4  /* z, r, candidate, R_h h + Rb_h */
#define ET_LSTM_SAVED 5 /* i, o, f, candidate, new cell state */
/* The forward pass takes a step's gates this many hidden units at a time:
 * their pre-activations first, then each gate's activation over the run
 * (et_elementwise.h's kernels, vectorized where the host has vectors). */
#define ET_RNN_CHUNK 32

typedef struct {
    int T, N, I, H, reverse, x_t, x_b, y_t, y_b, s_b;
} et_rnn_geometry;

static inline et_rnn_geometry et_rnn_geometry_of(const int *g)
{
    et_rnn_geometry r;
    r.T = g[0];
    r.N = g[1];
    r.I = g[2];
    r.H = g[3];
    r.reverse = g[4];
    r.x_t = g[5];
    r.x_b = g[6];
    r.y_t = g[7];
    r.y_b = g[8];
    r.s_b = g[9];
    return r;
}

/* Where row (t, n) of X, of Y, and batch row n of the state tensors start;
 * where step t, row n of `saved` starts (k vectors per row). */
static inline size_t et_rnn_x_at(const et_rnn_geometry *g, int t, int n)
{
    return (size_t)t * (size_t)g->x_t + (size_t)n * (size_t)g->x_b;
}

static inline size_t et_rnn_y_at(const et_rnn_geometry *g, int t, int n)
{
    return (size_t)t * (size_t)g->y_t + (size_t)n * (size_t)g->y_b;
}

static inline size_t et_rnn_state_at(const et_rnn_geometry *g, int n)
{
    return (size_t)n * (size_t)g->s_b;
}

static inline size_t et_rnn_saved_at(const et_rnn_geometry *g, int t, int n, int k)
{
    return ((size_t)t * (size_t)g->N + (size_t)n) * (size_t)k * (size_t)g->H;
}

/* The time index of processing step s. */
static inline int et_rnn_time(const et_rnn_geometry *g, int s)
{
    return g->reverse ? g->T - 1 - s : s;
}

/* The hidden state step s starts from: the previous step's output, or the
 * initial state (NULL when that is absent, i.e. zero). */
static inline const float *et_rnn_prev(const et_rnn_geometry *g, const float *Y, const float *H0, int s, int n)
{
    if (s > 0)
        return Y + et_rnn_y_at(g, et_rnn_time(g, s - 1), n);
    return H0 ? H0 + et_rnn_state_at(g, n) : (const float *)0;
}

/* out[v * out_vs + r] = the dot product of row r of M (rows of n, one
 * after another) with vector v, at x + xt[v], for r < rows and v < taps <=
 * ET_DOT_TAPS, in ET_LANES partial sums added as et_linalg.h's (a single
 * running sum would wait on each addition): four rows by two vectors, or
 * eight rows by one, at a time in registers (et_dots_4x2_f32_,
 * et_dots_8x1_f32_), the rest a dot product each. */
static inline void et_rnn_dots_(int rows, int n, const float *M, int taps, const float *x, const size_t *xt, float *out,
                                size_t out_vs)
{
    float total[8];
    int r0 = 0, r, v, q;
    if (n % ET_LANES == 0 && taps == 2)
        for (; r0 + 4 <= rows; r0 += 4) {
            et_dots_4x2_f32_(n, M + (size_t)r0 * (size_t)n, (size_t)n, x + xt[0], xt[1] - xt[0], total);
            for (q = 0; q < 8; ++q)
                out[(size_t)(q % 2) * out_vs + (size_t)(r0 + q / 2)] = total[q];
        }
    if (n % ET_LANES == 0 && taps == 1)
        for (; r0 + 8 <= rows; r0 += 8)
            et_dots_8x1_f32_(n, M + (size_t)r0 * (size_t)n, (size_t)n, x + xt[0], out + r0);
    for (r = r0; r < rows; ++r)
        for (v = 0; v < taps; ++v) {
            float lane[ET_LANES] = {0.0f};
            et_dot_lanes_f32_(n, M + (size_t)r * (size_t)n, 1, x + xt[v], lane);
            out[(size_t)v * out_vs + (size_t)r] = et_dot_total_f32_(lane);
        }
}

/* A pair of batch rows (or the last one) of a step: `taps` rows, their
 * inputs at X + xt[v], the hidden states they start from at h + ht[v] (h
 * NULL: zeros, the first step without an initial state). */
typedef struct {
    int taps;
    size_t xt[ET_DOT_TAPS], ht[ET_DOT_TAPS];
    const float *h;
} et_rnn_rows_;

static inline et_rnn_rows_ et_rnn_rows_of_(const et_rnn_geometry *g, const float *Y, const float *H0, int s, int n0)
{
    et_rnn_rows_ rows;
    int v;
    memset(&rows, 0, sizeof rows);
    rows.taps = g->N - n0 < ET_DOT_TAPS ? g->N - n0 : ET_DOT_TAPS;
    rows.h = et_rnn_prev(g, Y, H0, s, 0);  /* batch row 0's state: where the others' offsets count from */
    for (v = 0; v < rows.taps; ++v) {
        rows.xt[v] = et_rnn_x_at(g, et_rnn_time(g, s), n0 + v);
        if (rows.h)
            rows.ht[v] = (size_t)(et_rnn_prev(g, Y, H0, s, n0 + v) - rows.h);
    }
    return rows;
}

/* Pre-activations of gate rows first.. first + n - 1 for each batch row v
 * of `rows`, at pre + v * ET_RNN_CHUNK: (Wb + Rb + W x) + R h.  `part`
 * holds ET_DOT_TAPS * ET_RNN_CHUNK values. */
static inline void et_rnn_pre_(const et_rnn_geometry *g, int gates, int first, int n, const float *W, const float *R,
                               const float *B, const float *X, const et_rnn_rows_ *rows, float *pre, float *part)
{
    int v, j;
    et_rnn_dots_(n, g->I, W + (size_t)first * (size_t)g->I, rows->taps, X, rows->xt, pre, ET_RNN_CHUNK);
    if (rows->h)
        et_rnn_dots_(n, g->H, R + (size_t)first * (size_t)g->H, rows->taps, rows->h, rows->ht, part, ET_RNN_CHUNK);
    for (v = 0; v < rows->taps; ++v)
        for (j = 0; j < n; ++j) {
            float *at = pre + v * ET_RNN_CHUNK + j;
            *at = (B ? B[first + j] + B[gates * g->H + first + j] : 0.0f) + *at;
            *at = *at + (rows->h ? part[v * ET_RNN_CHUNK + j] : 0.0f);
        }
}

static inline float et_rnn_at(const float *v, int i)
{
    return v ? v[i] : 0.0f;
}

static inline void et_rnn_zero(int n, float *y)
{
    int i;
    for (i = 0; i < n; ++i)
        y[i] = 0.0f;
}

/* dst = src (NULL: zeros) over the state rows of one direction. */
static inline void et_rnn_copy_state(const et_rnn_geometry *g, const float *src, float *dst)
{
    int n, j;
    for (n = 0; n < g->N; ++n)
        for (j = 0; j < g->H; ++j)
            dst[et_rnn_state_at(g, n) + (size_t)j] = src ? src[et_rnn_state_at(g, n) + (size_t)j] : 0.0f;
}

/* Zeroes this direction's weight gradients and, unless another direction
 * already wrote it, dX; seeds the carried state gradient from dY_h. */
static inline void et_rnn_grad_start(const et_rnn_geometry *g, int gates, int accumulate, const float *dY_h,
                                     float *dX, float *dW, float *dR, float *dB, float *dH0)
{
    int t, n;
    et_rnn_zero(gates * g->H * g->I, dW);
    et_rnn_zero(gates * g->H * g->H, dR);
    et_rnn_zero(2 * gates * g->H, dB);
    et_rnn_copy_state(g, dY_h, dH0);
    if (!accumulate)
        for (n = 0; n < g->N; ++n)
            for (t = 0; t < g->T; ++t)
                et_rnn_zero(g->I, dX + et_rnn_x_at(g, t, n));
}

/* Step k of a walk over rows: row (k / inner + shift, k % inner) of a
 * tensor whose (t, n) row starts at t * outer + n * across. */
typedef struct {
    int inner, shift;
    size_t outer, across;
} et_rnn_walk_;

static inline size_t et_rnn_walk_at_(const et_rnn_walk_ *w, int k)
{
    return (size_t)(k / w->inner + w->shift) * w->outer + (size_t)(k % w->inner) * w->across;
}

/* The walk over the rows of `saved` (k vectors of H each), step by step in order of time. */
static inline et_rnn_walk_ et_rnn_steps_(const et_rnn_geometry *g, int k)
{
    size_t row = (size_t)k * (size_t)g->H;
    et_rnn_walk_ steps = {g->N, 0, (size_t)g->N * row, row};
    return steps;
}

/* Y_i[j] += A_i[a_k] * B[b_k + j] over k0 <= k < k1 in order, for i < rows
 * and j < cols (A_i = A + i * a_rs, Y_i = Y + i * y_rs, a_k and b_k the
 * walks' step k): et_gemm_tiles_f32_'s blocking, each k's rows found by a
 * walk. */
static inline void et_rnn_products_(int rows, int cols, int k0, int k1, const float *A, size_t a_rs, et_rnn_walk_ a,
                                    const float *B, et_rnn_walk_ b, float *Y, size_t y_rs)
{
    size_t at[ET_GEMM_DEPTH], bt[ET_GEMM_DEPTH];
    int i, j0, k, kb, depth;
    for (j0 = 0; j0 < cols; j0 += ET_GEMM_COLS) {
        int n = cols - j0 < ET_GEMM_COLS ? cols - j0 : ET_GEMM_COLS;
        for (kb = k0; kb < k1; kb += depth) {
            depth = k1 - kb < ET_GEMM_DEPTH ? k1 - kb : ET_GEMM_DEPTH;
            for (k = 0; k < depth; ++k) {
                at[k] = et_rnn_walk_at_(&a, kb + k);
                bt[k] = et_rnn_walk_at_(&b, kb + k);
            }
            for (i = 0; i < rows; i += ET_TILE_ROWS)
                et_tiles_f32_(rows - i < ET_TILE_ROWS ? rows - i : ET_TILE_ROWS, n, depth, A + (size_t)i * a_rs, a_rs,
                              at, B + j0, bt, Y + (size_t)i * y_rs + (size_t)j0, y_rs, 1);
        }
    }
}

/* dR's rows from `first` on (`rows` of them) += the gates' gradients in
 * the columns of `saved` from `column` on, times the hidden state each
 * step started from: Y a step before in processing order, or H0 (absent:
 * zero) for the first step, whichever comes first in time first. */
static inline void et_rnn_hidden_products_(const et_rnn_geometry *g, int rows, int column, int first,
                                           const float *saved, et_rnn_walk_ steps, const float *H0, const float *Y,
                                           float *dR)
{
    int N = g->N, T = g->T, H = g->H, start = g->reverse ? (T - 1) * N : 0; /* the steps that start from H0 */
    et_rnn_walk_ before = {N, g->reverse ? 1 : -1, (size_t)g->y_t, (size_t)g->y_b}, initial = {N, 0, 0, (size_t)g->s_b};
    const float *a = saved + column;
    float *y = dR + (size_t)first * (size_t)H;
    if (H0 && !g->reverse)
        et_rnn_products_(rows, H, start, start + N, a, 1, steps, H0, initial, y, (size_t)H);
    et_rnn_products_(rows, H, g->reverse ? 0 : N, g->reverse ? start : T * N, a, 1, steps, Y, before, y, (size_t)H);
    if (H0 && g->reverse)
        et_rnn_products_(rows, H, start, start + N, a, 1, steps, H0, initial, y, (size_t)H);
}

/* The second pass of backward, from the gates' gradients in the first
 * gates * H columns of each step's row of `saved` (k vectors of H): dW +=
 * them times X, and dX += them times W; the rows of dR of the first
 * `recurrent` gates += them times the previous hidden states.  The rest of
 * dR is the caller's. */
static inline void et_rnn_weight_grads(const et_rnn_geometry *g, int gates, int recurrent, int k, const float *saved,
                                       const float *X, const float *W, const float *H0, const float *Y, float *dX,
                                       float *dW, float *dR)
{
    int N = g->N, t;
    size_t row = (size_t)k * (size_t)g->H;
    et_rnn_walk_ steps = et_rnn_steps_(g, k), x = {N, 0, (size_t)g->x_t, (size_t)g->x_b};
    et_rnn_walk_ gate = {gates * g->H, 0, 0, 1}, weight = {gates * g->H, 0, 0, (size_t)g->I};
    et_rnn_products_(gates * g->H, g->I, 0, g->T * N, saved, 1, steps, X, x, dW, (size_t)g->I);
    et_rnn_hidden_products_(g, recurrent * g->H, 0, 0, saved, steps, H0, Y, dR);
    for (t = 0; t < g->T; ++t)
        et_rnn_products_(N, g->I, 0, gates * g->H, saved + (size_t)t * (size_t)N * row, row, gate, W, weight,
                         dX + (size_t)t * (size_t)g->x_t, (size_t)g->x_b);
}

/* RNN: h' = f(W x + R h + Wb + Rb), f tanh (relu = 0) or ReLU (relu = 1). */
static inline void et_rnn_f32(const int *geometry, int relu, const float *X, const float *W, const float *R,
                              const float *B, const float *H0, float *Y, float *Y_h, float *saved)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, s, n0, v, j, j0, len;
    float pre[ET_DOT_TAPS * ET_RNN_CHUNK], part[ET_DOT_TAPS * ET_RNN_CHUNK];
    for (s = 0; s < g.T; ++s) {
        int t = et_rnn_time(&g, s);
        for (n0 = 0; n0 < g.N; n0 += ET_DOT_TAPS) {
            et_rnn_rows_ rows = et_rnn_rows_of_(&g, Y, H0, s, n0);
            for (j0 = 0; j0 < H; j0 += len) {
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                et_rnn_pre_(&g, 1, j0, len, W, R, B, X, &rows, pre, part);
                for (v = 0; v < rows.taps; ++v) {
                    float *y = Y + et_rnn_y_at(&g, t, n0 + v) + j0, *yh = Y_h + et_rnn_state_at(&g, n0 + v) + j0;
                    float *sv = saved ? saved + et_rnn_saved_at(&g, t, n0 + v, ET_RNN_SAVED) + j0 : 0;
                    if (relu)
                        et_relu_f32(len, pre + v * ET_RNN_CHUNK, y);
                    else
                        et_tanh_f32(len, pre + v * ET_RNN_CHUNK, y);
                    for (j = 0; j < len; ++j) {
                        yh[j] = y[j];
                        if (sv)
                            sv[j] = y[j];
                    }
                }
            }
        }
    }
}

static inline void et_rnn_grad_f32(const int *geometry, int relu, int accumulate, const float *dY, const float *dY_h,
                                   const float *X, const float *W, const float *R, const float *H0, const float *Y,
                                   float *saved, float *dX, float *dW, float *dR, float *dB, float *dH0)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, N = g.N, s, n, j;
    et_rnn_walk_ gates = {H, 0, 0, 1}, rows = {H, 0, 0, (size_t)H};
    et_rnn_grad_start(&g, 1, accumulate, dY_h, dX, dW, dR, dB, dH0);
    for (s = g.T - 1; s >= 0; --s) {
        int t = et_rnn_time(&g, s);
        float *step = saved + et_rnn_saved_at(&g, t, 0, ET_RNN_SAVED); /* the step's rows, H apart */
        for (n = 0; n < N; ++n) {
            const float *dy = dY ? dY + et_rnn_y_at(&g, t, n) : 0;
            float *sv = step + (size_t)n * (size_t)H, *dh = dH0 + et_rnn_state_at(&g, n);
            /* The step's state, read, becomes its pre-activation's gradient in its place. */
            for (j = 0; j < H; ++j) {
                float h = sv[j], d_h = dh[j] + et_rnn_at(dy, j);
                sv[j] = relu ? (h > 0.0f ? d_h : 0.0f) : d_h * (1.0f - h * h);
                dh[j] = 0.0f;
                dB[j] += sv[j];
                dB[H + j] += sv[j];
            }
        }
        /* dh = R^T (the pre-activations' gradients), row by row of R in order */
        et_rnn_products_(N, H, 0, H, step, (size_t)H, gates, R, rows, dH0, (size_t)g.s_b);
    }
    et_rnn_weight_grads(&g, 1, 1, ET_RNN_SAVED, saved, X, W, H0, Y, dX, dW, dR);
}

/* GRU, gates z, r, h:
 *   z = sigmoid(Wz x + Rz h + bz), r = sigmoid(Wr x + Rr h + br),
 *   c = tanh(Wh x + Rh (r . h) + bh)            (linear_before_reset = 0)
 *   c = tanh(Wh x + Wbh + r . (Rh h + Rbh))     (linear_before_reset = 1)
 *   h' = (1 - z) . c + z . h */
static inline void et_gru_f32(const int *geometry, int linear_before_reset, const float *X, const float *W,
                              const float *R, const float *B, const float *H0, float *Y, float *Y_h,
                              float *saved)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, s, n0, n, v, j, j0, len;
    /* Per batch row v of a pair, at v * ET_RNN_CHUNK: pre-activations, then values. */
    float r[ET_DOT_TAPS * ET_RNN_CHUNK], z[ET_DOT_TAPS * ET_RNN_CHUNK], c[ET_DOT_TAPS * ET_RNN_CHUNK];
    float hr[ET_DOT_TAPS * ET_RNN_CHUNK], part[ET_DOT_TAPS * ET_RNN_CHUNK];
    for (s = 0; s < g.T; ++s) {
        int t = et_rnn_time(&g, s);
        for (n0 = 0; n0 < g.N; n0 += ET_DOT_TAPS) {
            et_rnn_rows_ rows = et_rnn_rows_of_(&g, Y, H0, s, n0);
            size_t yt[ET_DOT_TAPS] = {0}; /* the pair's rows of Y: r, or r . h, until the new state is complete */
            for (v = 0; v < rows.taps; ++v)
                yt[v] = et_rnn_y_at(&g, t, n0 + v);
            for (j0 = 0; j0 < H; j0 += len) { /* r, into Y's slot: every candidate reads all of it */
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                et_rnn_pre_(&g, 3, H + j0, len, W, R, B, X, &rows, r, part);
                for (v = 0; v < rows.taps; ++v) {
                    const float *h = rows.h ? rows.h + rows.ht[v] : 0;
                    float *rv = r + v * ET_RNN_CHUNK, *y = Y + yt[v];
                    float *sv = saved ? saved + et_rnn_saved_at(&g, t, n0 + v, ET_GRU_SAVED) : 0;
                    et_sigmoid_f32(len, rv, rv);
                    for (j = 0; j < len; ++j) {
                        y[j0 + j] = linear_before_reset ? rv[j] : rv[j] * et_rnn_at(h, j0 + j);
                        if (sv)
                            sv[H + j0 + j] = rv[j];
                    }
                }
            }
            for (j0 = 0; j0 < H; j0 += len) {
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                et_rnn_pre_(&g, 3, j0, len, W, R, B, X, &rows, z, part);
                et_rnn_dots_(len, g.I, W + (size_t)(2 * H + j0) * (size_t)g.I, rows.taps, X, rows.xt, c, ET_RNN_CHUNK);
                /* Rh times h (linear_before_reset; h absent: zeros), else times r . h */
                if (!linear_before_reset)
                    et_rnn_dots_(len, H, R + (size_t)(2 * H + j0) * (size_t)H, rows.taps, Y, yt, part, ET_RNN_CHUNK);
                else if (rows.h)
                    et_rnn_dots_(len, H, R + (size_t)(2 * H + j0) * (size_t)H, rows.taps, rows.h, rows.ht, part,
                                 ET_RNN_CHUNK);
                for (v = 0; v < rows.taps; ++v) {
                    const float *h = rows.h ? rows.h + rows.ht[v] : 0, *y = Y + yt[v];
                    float *zv = z + v * ET_RNN_CHUNK, *cv = c + v * ET_RNN_CHUNK, *hv = hr + v * ET_RNN_CHUNK;
                    float *yh = Y_h + et_rnn_state_at(&g, n0 + v);
                    float *sv = saved ? saved + et_rnn_saved_at(&g, t, n0 + v, ET_GRU_SAVED) : 0;
                    for (j = 0; j < len; ++j) {
                        int row = j0 + j;
                        const float *d = part + v * ET_RNN_CHUNK + j;
                        if (linear_before_reset) {
                            hv[j] = (h ? *d : 0.0f) + (B ? B[5 * H + row] : 0.0f);
                            cv[j] += (B ? B[2 * H + row] : 0.0f) + y[row] * hv[j];
                        } else {
                            hv[j] = 0.0f;
                            cv[j] += (B ? B[2 * H + row] + B[5 * H + row] : 0.0f) + *d;
                        }
                    }
                    et_sigmoid_f32(len, zv, zv);
                    et_tanh_f32(len, cv, cv);
                    for (j = 0; j < len; ++j) {
                        yh[j0 + j] = (1.0f - zv[j]) * cv[j] + zv[j] * et_rnn_at(h, j0 + j);
                        if (sv) {
                            sv[j0 + j] = zv[j];
                            sv[2 * H + j0 + j] = cv[j];
                            sv[3 * H + j0 + j] = hv[j];
                        }
                    }
                }
            }
            for (n = n0; n < n0 + rows.taps; ++n)
                memcpy(Y + et_rnn_y_at(&g, t, n), Y_h + et_rnn_state_at(&g, n), (size_t)H * sizeof *Y);
        }
    }
}

static inline void et_gru_grad_f32(const int *geometry, int linear_before_reset, int accumulate, const float *dY,
                                   const float *dY_h, const float *X, const float *W, const float *R,
                                   const float *H0, const float *Y, float *saved, float *dX, float *dW, float *dR,
                                   float *dB, float *dH0)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, N = g.N, s, n, j;
    size_t row = ET_GRU_SAVED * (size_t)H, HH = (size_t)H * (size_t)H;
    et_rnn_walk_ steps = et_rnn_steps_(&g, ET_GRU_SAVED), gates1 = {H, 0, 0, 1}, rows1 = {H, 0, 0, (size_t)H};
    et_rnn_walk_ gates2 = {2 * H, 0, 0, 1}, rows2 = {2 * H, 0, 0, (size_t)H};
    et_rnn_grad_start(&g, 3, accumulate, dY_h, dX, dW, dR, dB, dH0);
    for (s = g.T - 1; s >= 0; --s) {
        int t = et_rnn_time(&g, s);
        float *step = saved + et_rnn_saved_at(&g, t, 0, ET_GRU_SAVED); /* the step's rows, `row` apart */
        /* Each row of saved becomes the gates' gradients: da_z, da_r, da_c, then d_hr or r . h. */
        for (n = 0; n < N; ++n) {
            const float *h = et_rnn_prev(&g, Y, H0, s, n);
            const float *dy = dY ? dY + et_rnn_y_at(&g, t, n) : 0;
            float *sv = step + (size_t)n * row;
            float *dh = dH0 + et_rnn_state_at(&g, n); /* dL/dh of this step in, of the previous out */
            for (j = 0; j < H; ++j) {
                float z = sv[j], r = sv[H + j], c = sv[2 * H + j], hr = sv[3 * H + j];
                float d = dh[j] + et_rnn_at(dy, j), da_c = d * (1.0f - z) * (1.0f - c * c);
                sv[j] = d * (et_rnn_at(h, j) - c) * z * (1.0f - z);
                sv[2 * H + j] = da_c;
                dh[j] = d * z;
                if (linear_before_reset) {
                    sv[H + j] = da_c * hr * r * (1.0f - r);
                    sv[3 * H + j] = da_c * r;
                } else {
                    sv[3 * H + j] = 0.0f; /* d_hr: Rh^T da_c, for every row at once below */
                }
            }
        }
        if (!linear_before_reset) { /* through Rh (r . h): dL/d(r . h) = Rh^T da_c, then r's gradient */
            et_rnn_products_(N, H, 0, H, step + 2 * H, row, gates1, R + 2 * HH, rows1, step + 3 * H, row);
            for (n = 0; n < N; ++n) {
                const float *h = et_rnn_prev(&g, Y, H0, s, n);
                float *sv = step + (size_t)n * row, *dh = dH0 + et_rnn_state_at(&g, n);
                for (j = 0; j < H; ++j) {
                    float r = sv[H + j], d_hr = sv[3 * H + j];
                    sv[H + j] = d_hr * et_rnn_at(h, j) * r * (1.0f - r);
                    dh[j] += d_hr * r;
                    sv[3 * H + j] = r * et_rnn_at(h, j); /* now r . h, which Rh's gradient multiplies */
                }
            }
        }
        for (n = 0; n < N; ++n) {
            const float *sv = step + (size_t)n * row;
            for (j = 0; j < H; ++j) {
                dB[j] += sv[j];
                dB[H + j] += sv[H + j];
                dB[2 * H + j] += sv[2 * H + j];
                dB[3 * H + j] += sv[j];
                dB[4 * H + j] += sv[H + j];
                /* Gate h's recurrent part: d_hr scales h (linear_before_reset), else da_c scales r . h. */
                dB[5 * H + j] += linear_before_reset ? sv[3 * H + j] : sv[2 * H + j];
            }
        }
        /* dh += Rz^T da_z + Rr^T da_r (+ Rh^T d_hr: linear_before_reset), row by row of R in order */
        et_rnn_products_(N, H, 0, 2 * H, step, row, gates2, R, rows2, dH0, (size_t)g.s_b);
        if (linear_before_reset)
            et_rnn_products_(N, H, 0, H, step + 3 * H, row, gates1, R + 2 * HH, rows1, dH0, (size_t)g.s_b);
    }
    et_rnn_weight_grads(&g, 3, 2, ET_GRU_SAVED, saved, X, W, H0, Y, dX, dW, dR);
    if (linear_before_reset) /* Rh's gradient: d_hr times h */
        et_rnn_hidden_products_(&g, H, 3 * H, 2 * H, saved, steps, H0, Y, dR);
    else /* da_c times r . h */
        et_rnn_products_(H, H, 0, g.T * g.N, saved + 2 * H, 1, steps, saved + 3 * H, steps, dR + 2 * HH, (size_t)H);
}

/* LSTM, gates i, o, f, c (no peepholes):
 *   i, o, f = sigmoid(W x + R h + Wb + Rb), c~ = tanh(...),
 *   C' = f . C + i . c~, h' = o . tanh(C') */
static inline void et_lstm_f32(const int *geometry, const float *X, const float *W, const float *R, const float *B,
                               const float *H0, const float *C0, float *Y, float *Y_h, float *Y_c, float *saved)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, s, n0, v, j, q, j0, len;
    /* Gate q's pre-activations, then values, for batch row v of a pair at (q * ET_DOT_TAPS + v) * ET_RNN_CHUNK. */
    float gate[4 * ET_DOT_TAPS * ET_RNN_CHUNK], part[ET_DOT_TAPS * ET_RNN_CHUNK];
    et_rnn_copy_state(&g, C0, Y_c);
    for (s = 0; s < g.T; ++s) {
        int t = et_rnn_time(&g, s);
        for (n0 = 0; n0 < g.N; n0 += ET_DOT_TAPS) {
            et_rnn_rows_ rows = et_rnn_rows_of_(&g, Y, H0, s, n0);
            for (j0 = 0; j0 < H; j0 += len) {
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                for (q = 0; q < 4; ++q)
                    et_rnn_pre_(&g, 4, q * H + j0, len, W, R, B, X, &rows, gate + q * ET_DOT_TAPS * ET_RNN_CHUNK, part);
                for (v = 0; v < rows.taps; ++v) {
                    float *i = gate + v * ET_RNN_CHUNK, *o = i + ET_DOT_TAPS * ET_RNN_CHUNK;
                    float *f = o + ET_DOT_TAPS * ET_RNN_CHUNK, *c = f + ET_DOT_TAPS * ET_RNN_CHUNK;
                    float *y = Y + et_rnn_y_at(&g, t, n0 + v) + j0;
                    float *yh = Y_h + et_rnn_state_at(&g, n0 + v) + j0, *cell = Y_c + et_rnn_state_at(&g, n0 + v) + j0;
                    float *sv = saved ? saved + et_rnn_saved_at(&g, t, n0 + v, ET_LSTM_SAVED) + j0 : 0;
                    et_sigmoid_f32(len, i, i);
                    et_sigmoid_f32(len, o, o);
                    et_sigmoid_f32(len, f, f);
                    et_tanh_f32(len, c, c);
                    for (j = 0; j < len; ++j)
                        cell[j] = f[j] * cell[j] + i[j] * c[j];
                    et_tanh_f32(len, cell, y);
                    for (j = 0; j < len; ++j) {
                        y[j] = o[j] * y[j];
                        yh[j] = y[j];
                        if (sv) {
                            sv[j] = i[j];
                            sv[H + j] = o[j];
                            sv[2 * H + j] = f[j];
                            sv[3 * H + j] = c[j];
                            sv[4 * H + j] = cell[j];
                        }
                    }
                }
            }
        }
    }
}

static inline void et_lstm_grad_f32(const int *geometry, int accumulate, const float *dY, const float *dY_h,
                                    const float *dY_c, const float *X, const float *W, const float *R,
                                    const float *H0, const float *C0, const float *Y, float *saved, float *dX,
                                    float *dW, float *dR, float *dB, float *dH0, float *dC0)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, N = g.N, s, n, j, j0, len, q;
    size_t row = ET_LSTM_SAVED * (size_t)H;
    et_rnn_walk_ gates = {4 * H, 0, 0, 1}, rows = {4 * H, 0, 0, (size_t)H};
    float tc[ET_RNN_CHUNK]; /* tanh of the cell states */
    et_rnn_grad_start(&g, 4, accumulate, dY_h, dX, dW, dR, dB, dH0);
    et_rnn_copy_state(&g, dY_c, dC0);
    for (s = g.T - 1; s >= 0; --s) {
        int t = et_rnn_time(&g, s);
        float *step = saved + et_rnn_saved_at(&g, t, 0, ET_LSTM_SAVED); /* the step's rows, `row` apart */
        for (n = 0; n < N; ++n) {
            const float *dy = dY ? dY + et_rnn_y_at(&g, t, n) : 0;
            float *sv = step + (size_t)n * row;
            const float *c_prev = s > 0 ? saved + et_rnn_saved_at(&g, et_rnn_time(&g, s - 1), n, ET_LSTM_SAVED) + 4 * H
                                        : (C0 ? C0 + et_rnn_state_at(&g, n) : 0);
            float *dh = dH0 + et_rnn_state_at(&g, n), *dc = dC0 + et_rnn_state_at(&g, n);
            /* The step's gates, read, become their gradients in their place (the cell state stays: the
             * step before reads it). */
            for (j0 = 0; j0 < H; j0 += len) {
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                et_tanh_f32(len, sv + 4 * H + j0, tc);
                for (j = j0; j < j0 + len; ++j) {
                    float i = sv[j], o = sv[H + j], f = sv[2 * H + j], c = sv[3 * H + j], t_c = tc[j - j0];
                    float d_h = dh[j] + et_rnn_at(dy, j);
                    float d_c = dc[j] + d_h * o * (1.0f - t_c * t_c);
                    sv[j] = d_c * c * i * (1.0f - i);
                    sv[H + j] = d_h * t_c * o * (1.0f - o);
                    sv[2 * H + j] = d_c * et_rnn_at(c_prev, j) * f * (1.0f - f);
                    sv[3 * H + j] = d_c * i * (1.0f - c * c);
                    dc[j] = d_c * f;
                    dh[j] = 0.0f;
                }
            }
            for (q = 0; q < 4 * H; ++q) {
                dB[q] += sv[q];
                dB[4 * H + q] += sv[q];
            }
        }
        /* dh = R^T (the gates' gradients), row by row of R in order */
        et_rnn_products_(N, H, 0, 4 * H, step, row, gates, R, rows, dH0, (size_t)g.s_b);
    }
    et_rnn_weight_grads(&g, 4, 4, ET_LSTM_SAVED, saved, X, W, H0, Y, dX, dW, dR);
}

#endif
