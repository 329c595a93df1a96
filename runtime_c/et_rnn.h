/* edgetrain runtime: GRU and LSTM (ONNX semantics, default activations),
 * forward and backward through time, one direction per call.
 *
 * Each call gets its direction's slices of W, R and B, and a geometry
 * `g` = {T, N, I, H, reverse, x_t, x_b, y_t, y_b, s_b}: element (t, n)
 * of X starts at t * x_t + n * x_b, hidden vector (t, n) of Y at
 * t * y_t + n * y_b, and batch row n of initial_h, initial_c, Y_h, Y_c
 * and their gradients at n * s_b.  The strides carry ONNX's two layouts
 * and the interleaving of bidirectional outputs.  B, initial_h and
 * initial_c may be NULL (zeros).
 *
 * The outputs double as working memory, so no kernel needs a buffer the
 * memory planner does not see: the GRU builds r (.) h in Y's slot for the
 * step before the new state is complete, the LSTM keeps its running cell
 * state in Y_c.  Y, Y_h (and Y_c) must therefore all be given and must
 * not overlap each other or the inputs.
 *
 * In training, `saved` keeps per step and batch row what the backward
 * pass needs (ET_GRU_SAVED or ET_LSTM_SAVED vectors of H), at
 * (t * N + n) * K * H; the backward pass reads the previous hidden state
 * from Y.  Backward carries dL/dh (and dL/dc) from step to step in dH0
 * (and dC0), which end as the gradients of the initial states; `work`
 * holds 4 * H values.
 *
 * Backward runs in two passes.  The first goes back through time, as the
 * recurrence must, and leaves in each step's row of `saved` (read by then,
 * and read by nothing after the backward pass) the gradients of its
 * gates' pre-activations.  The second makes dW, dR and dX from them as
 * matrix products in et_linalg.h's register tiles, each weight gradient's
 * sum over the steps in order of time (t, then n, ascending). */
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

/* A gate row's dot product, in ET_LANES partial sums as et_linalg.h's (a
 * single running sum would wait on each addition before the next). */
static inline float et_rnn_dot(int n, const float *w, const float *v)
{
    float lane[ET_LANES] = {0.0f};
    if (!v)
        return 0.0f;
    et_dot_lanes_f32_(n, w, 1, v, lane);
    return et_dot_total_f32_(lane);
}

static inline float et_rnn_at(const float *v, int i)
{
    return v ? v[i] : 0.0f;
}

/* Pre-activation of gate row `row`: Wb + Rb + W x + R h. */
static inline float et_rnn_gate(const et_rnn_geometry *g, int gates, int row, const float *W, const float *R,
                                const float *B, const float *x, const float *h)
{
    float bias = B ? B[row] + B[gates * g->H + row] : 0.0f;
    return bias + et_rnn_dot(g->I, W + (size_t)row * (size_t)g->I, x) +
           et_rnn_dot(g->H, R + (size_t)row * (size_t)g->H, h);
}

static inline void et_rnn_axpy(int n, float a, const float *x, float *y)
{
    int i;
    if (!x)
        return;
    for (i = 0; i < n; ++i)
        y[i] += a * x[i];
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
    int H = g.H, s, n, j, j0, len;
    float r[ET_RNN_CHUNK], z[ET_RNN_CHUNK], c[ET_RNN_CHUNK]; /* pre-activations, then values */
    for (s = 0; s < g.T; ++s) {
        int t = et_rnn_time(&g, s);
        for (n = 0; n < g.N; ++n) {
            const float *x = X + et_rnn_x_at(&g, t, n);
            const float *h = et_rnn_prev(&g, Y, H0, s, n);
            float *y = Y + et_rnn_y_at(&g, t, n);
            float *yh = Y_h + et_rnn_state_at(&g, n);
            float *sv = saved ? saved + et_rnn_saved_at(&g, t, n, ET_GRU_SAVED) : 0;
            for (j0 = 0; j0 < H; j0 += len) { /* r, into Y's slot: every candidate reads all of it */
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                for (j = 0; j < len; ++j)
                    r[j] = et_rnn_gate(&g, 3, H + j0 + j, W, R, B, x, h);
                et_sigmoid_f32(len, r, r);
                for (j = 0; j < len; ++j) {
                    y[j0 + j] = linear_before_reset ? r[j] : r[j] * et_rnn_at(h, j0 + j);
                    if (sv)
                        sv[H + j0 + j] = r[j];
                }
            }
            for (j0 = 0; j0 < H; j0 += len) {
                float hr[ET_RNN_CHUNK] = {0.0f};
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                for (j = 0; j < len; ++j) {
                    int row = j0 + j;
                    const float *rh = R + (size_t)(2 * H + row) * (size_t)H;
                    z[j] = et_rnn_gate(&g, 3, row, W, R, B, x, h);
                    c[j] = et_rnn_dot(g.I, W + (size_t)(2 * H + row) * (size_t)g.I, x);
                    if (linear_before_reset) {
                        hr[j] = et_rnn_dot(H, rh, h) + (B ? B[5 * H + row] : 0.0f);
                        c[j] += (B ? B[2 * H + row] : 0.0f) + y[row] * hr[j];
                    } else {
                        c[j] += (B ? B[2 * H + row] + B[5 * H + row] : 0.0f) + et_rnn_dot(H, rh, y);
                    }
                }
                et_sigmoid_f32(len, z, z);
                et_tanh_f32(len, c, c);
                for (j = 0; j < len; ++j) {
                    yh[j0 + j] = (1.0f - z[j]) * c[j] + z[j] * et_rnn_at(h, j0 + j);
                    if (sv) {
                        sv[j0 + j] = z[j];
                        sv[2 * H + j0 + j] = c[j];
                        sv[3 * H + j0 + j] = hr[j];
                    }
                }
            }
            for (j = 0; j < H; ++j)
                y[j] = yh[j];
        }
    }
}

static inline void et_gru_grad_f32(const int *geometry, int linear_before_reset, int accumulate, const float *dY,
                                   const float *dY_h, const float *X, const float *W, const float *R,
                                   const float *H0, const float *Y, float *saved, float *dX, float *dW, float *dR,
                                   float *dB, float *dH0, float *work)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, s, n, j, k;
    float *da_z = work, *da_r = work + H, *da_c = work + 2 * H, *d_hr = work + 3 * H;
    et_rnn_walk_ steps = et_rnn_steps_(&g, ET_GRU_SAVED);
    et_rnn_grad_start(&g, 3, accumulate, dY_h, dX, dW, dR, dB, dH0);
    for (s = g.T - 1; s >= 0; --s) {
        int t = et_rnn_time(&g, s);
        for (n = 0; n < g.N; ++n) {
            const float *h = et_rnn_prev(&g, Y, H0, s, n);
            const float *dy = dY ? dY + et_rnn_y_at(&g, t, n) : 0;
            float *sv = saved + et_rnn_saved_at(&g, t, n, ET_GRU_SAVED);
            const float *z = sv, *r = sv + H, *c = sv + 2 * H, *hr = sv + 3 * H;
            float *dh = dH0 + et_rnn_state_at(&g, n); /* dL/dh of this step in, of the previous out */
            for (j = 0; j < H; ++j) {
                float d = dh[j] + et_rnn_at(dy, j);
                da_c[j] = d * (1.0f - z[j]) * (1.0f - c[j] * c[j]);
                da_z[j] = d * (et_rnn_at(h, j) - c[j]) * z[j] * (1.0f - z[j]);
                dh[j] = d * z[j];
                if (linear_before_reset) {
                    da_r[j] = da_c[j] * hr[j] * r[j] * (1.0f - r[j]);
                    d_hr[j] = da_c[j] * r[j];
                }
            }
            if (!linear_before_reset) { /* through Rh (r . h): dL/d(r . h) = Rh^T da_c, in d_hr */
                et_rnn_zero(H, d_hr);
                for (j = 0; j < H; ++j) /* row by row: each sum still in j order, the rows read in place */
                    et_rnn_axpy(H, da_c[j], R + (size_t)(2 * H + j) * (size_t)H, d_hr);
                for (k = 0; k < H; ++k) {
                    da_r[k] = d_hr[k] * et_rnn_at(h, k) * r[k] * (1.0f - r[k]);
                    dh[k] += d_hr[k] * r[k];
                    d_hr[k] = r[k] * et_rnn_at(h, k); /* now r . h, which Rh's gradient multiplies */
                }
            }
            for (j = 0; j < H; ++j) {
                dB[j] += da_z[j];
                dB[H + j] += da_r[j];
                dB[2 * H + j] += da_c[j];
                dB[3 * H + j] += da_z[j];
                dB[4 * H + j] += da_r[j];
                /* Gate h's recurrent part: d_hr scales h (linear_before_reset), else da_c scales r . h. */
                dB[5 * H + j] += linear_before_reset ? d_hr[j] : da_c[j];
                /* Rz, Rr and (linear_before_reset) Rh read h directly. */
                et_rnn_axpy(H, da_z[j], R + (size_t)j * (size_t)H, dh);
                et_rnn_axpy(H, da_r[j], R + (size_t)(H + j) * (size_t)H, dh);
                if (linear_before_reset)
                    et_rnn_axpy(H, d_hr[j], R + (size_t)(2 * H + j) * (size_t)H, dh);
            }
            /* The step's row of saved, read: da_z, da_r, da_c, then d_hr or r . h. */
            memcpy(sv, work, 4 * (size_t)H * sizeof *sv);
        }
    }
    et_rnn_weight_grads(&g, 3, 2, ET_GRU_SAVED, saved, X, W, H0, Y, dX, dW, dR);
    if (linear_before_reset) /* Rh's gradient: d_hr times h */
        et_rnn_hidden_products_(&g, H, 3 * H, 2 * H, saved, steps, H0, Y, dR);
    else /* da_c times r . h */
        et_rnn_products_(H, H, 0, g.T * g.N, saved + 2 * H, 1, steps, saved + 3 * H, steps,
                         dR + 2 * (size_t)H * (size_t)H, (size_t)H);
}

/* LSTM, gates i, o, f, c (no peepholes):
 *   i, o, f = sigmoid(W x + R h + Wb + Rb), c~ = tanh(...),
 *   C' = f . C + i . c~, h' = o . tanh(C') */
static inline void et_lstm_f32(const int *geometry, const float *X, const float *W, const float *R, const float *B,
                               const float *H0, const float *C0, float *Y, float *Y_h, float *Y_c, float *saved)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, s, n, j, q, j0, len;
    float gate[4 * ET_RNN_CHUNK]; /* gate q's pre-activations, then values, at q * ET_RNN_CHUNK */
    const float *i = gate, *o = gate + ET_RNN_CHUNK, *f = gate + 2 * ET_RNN_CHUNK, *c = gate + 3 * ET_RNN_CHUNK;
    et_rnn_copy_state(&g, C0, Y_c);
    for (s = 0; s < g.T; ++s) {
        int t = et_rnn_time(&g, s);
        for (n = 0; n < g.N; ++n) {
            const float *x = X + et_rnn_x_at(&g, t, n);
            const float *h = et_rnn_prev(&g, Y, H0, s, n);
            float *y = Y + et_rnn_y_at(&g, t, n);
            float *yh = Y_h + et_rnn_state_at(&g, n), *cell = Y_c + et_rnn_state_at(&g, n);
            float *sv = saved ? saved + et_rnn_saved_at(&g, t, n, ET_LSTM_SAVED) : 0;
            for (j0 = 0; j0 < H; j0 += len) {
                len = H - j0 < ET_RNN_CHUNK ? H - j0 : ET_RNN_CHUNK;
                for (q = 0; q < 4; ++q) {
                    for (j = 0; j < len; ++j)
                        gate[q * ET_RNN_CHUNK + j] = et_rnn_gate(&g, 4, q * H + j0 + j, W, R, B, x, h);
                    if (q < 3)
                        et_sigmoid_f32(len, gate + q * ET_RNN_CHUNK, gate + q * ET_RNN_CHUNK);
                    else
                        et_tanh_f32(len, gate + q * ET_RNN_CHUNK, gate + q * ET_RNN_CHUNK);
                }
                for (j = 0; j < len; ++j)
                    cell[j0 + j] = f[j] * cell[j0 + j] + i[j] * c[j];
                et_tanh_f32(len, cell + j0, y + j0);
                for (j = 0; j < len; ++j) {
                    y[j0 + j] = o[j] * y[j0 + j];
                    yh[j0 + j] = y[j0 + j];
                    if (sv) {
                        sv[j0 + j] = i[j];
                        sv[H + j0 + j] = o[j];
                        sv[2 * H + j0 + j] = f[j];
                        sv[3 * H + j0 + j] = c[j];
                        sv[4 * H + j0 + j] = cell[j0 + j];
                    }
                }
            }
        }
    }
}

static inline void et_lstm_grad_f32(const int *geometry, int accumulate, const float *dY, const float *dY_h,
                                    const float *dY_c, const float *X, const float *W, const float *R,
                                    const float *H0, const float *C0, const float *Y, float *saved, float *dX,
                                    float *dW, float *dR, float *dB, float *dH0, float *dC0, float *work)
{
    et_rnn_geometry g = et_rnn_geometry_of(geometry);
    int H = g.H, s, n, j, q;
    et_rnn_grad_start(&g, 4, accumulate, dY_h, dX, dW, dR, dB, dH0);
    et_rnn_copy_state(&g, dY_c, dC0);
    for (s = g.T - 1; s >= 0; --s) {
        int t = et_rnn_time(&g, s);
        for (n = 0; n < g.N; ++n) {
            const float *dy = dY ? dY + et_rnn_y_at(&g, t, n) : 0;
            float *sv = saved + et_rnn_saved_at(&g, t, n, ET_LSTM_SAVED);
            const float *c_prev = s > 0 ? saved + et_rnn_saved_at(&g, et_rnn_time(&g, s - 1), n, ET_LSTM_SAVED) + 4 * H
                                        : (C0 ? C0 + et_rnn_state_at(&g, n) : 0);
            float *dh = dH0 + et_rnn_state_at(&g, n), *dc = dC0 + et_rnn_state_at(&g, n);
            for (j = 0; j < H; ++j) {
                float i = sv[j], o = sv[H + j], f = sv[2 * H + j], c = sv[3 * H + j];
                float tc = et_tanhf(sv[4 * H + j]);
                float d_h = dh[j] + et_rnn_at(dy, j);
                float d_c = dc[j] + d_h * o * (1.0f - tc * tc);
                work[j] = d_c * c * i * (1.0f - i);
                work[H + j] = d_h * tc * o * (1.0f - o);
                work[2 * H + j] = d_c * et_rnn_at(c_prev, j) * f * (1.0f - f);
                work[3 * H + j] = d_c * i * (1.0f - c * c);
                dc[j] = d_c * f;
                dh[j] = 0.0f;
            }
            for (q = 0; q < 4 * H; ++q) {
                dB[q] += work[q];
                dB[4 * H + q] += work[q];
                et_rnn_axpy(H, work[q], R + (size_t)q * (size_t)H, dh);
            }
            /* The step's gates, read: their gradients in their place (the cell state stays, the
             * step before reads it). */
            memcpy(sv, work, 4 * (size_t)H * sizeof *sv);
        }
    }
    et_rnn_weight_grads(&g, 4, 4, ET_LSTM_SAVED, saved, X, W, H0, Y, dX, dW, dR);
}

#endif
