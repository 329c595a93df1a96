/* Runs every fast path of et_linalg.h and et_conv.h against the plain
 * references beside them (et_gemm_f32_ref, et_conv_f32_ref,
 * et_conv_transpose_f32_ref, et_conv_grad_w_f32_ref) over random shapes,
 * and compares the bits; so too an outer-product gradient's accumulation
 * (against et_gemm_f32_ref's outer product) and plain SGD's update
 * (against its formula, W - lr G).  Each path is run through its kernel's dispatcher
 * and, where it is a function of its own, also called directly whichever
 * path the dispatcher picks (the fallbacks inline in the dispatchers run
 * where they pick them).  Prints
 * how often each path ran (ET_PATH_) and every mismatch; exits 1 on any.
 * Built by tests/c/test_kernel_references.py: argv[1] is the seed, argv[2]
 * the cases per kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void count_path(const char *name);
#define ET_PATH_(name) count_path(name)
#include "et_conv.h"
#include "et_optim.h"

#define MAX_PATHS 64
static const char *path_names[MAX_PATHS];
static long path_counts[MAX_PATHS];
static long mismatches, compared;

static void count_path(const char *name)
{
    int i;
    for (i = 0; i < MAX_PATHS && path_names[i]; ++i)
        if (!strcmp(path_names[i], name))
            break;
    if (i == MAX_PATHS)
        abort();
    path_names[i] = name;
    ++path_counts[i];
}

static uint32_t rng_state;

static uint32_t next_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* An integer in [lo, hi]. */
static int pick(int lo, int hi)
{
    return lo + (int)(next_u32() % (uint32_t)(hi - lo + 1));
}

/* Values of both signs, with full mantissas and a spread of exponents, so that any change in the
 * order of a sum changes its bits. */
static void fill(float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; ++i) {
        float v = (float)(next_u32() >> 8) / 16777216.0f * 2.0f - 1.0f;
        x[i] = v * (float)(1 << pick(0, 6));
    }
}

/* Output buffers start as different NaNs, so that an output a path leaves unwritten differs. */
static float *outputs(size_t n, uint32_t bits)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    size_t i;
    for (i = 0; i < n; ++i)
        y[i] = et_f32_from_bits(bits);
    return y;
}

static void check(const char *what, const float *want, const float *got, size_t n, const char *shape)
{
    size_t i;
    ++compared;
    if (!memcmp(want, got, n * sizeof *want))
        return;
    for (i = 0; i < n && et_f32_bits(want[i]) == et_f32_bits(got[i]); ++i)
        continue;
    ++mismatches;
    printf("mismatch %s %s at %lu: %.9g != %.9g\n", what, shape, (unsigned long)i, (double)got[i], (double)want[i]);
}

/* ---- matrix products ---- */

static void gemm_case(void)
{
    int M = pick(0, 3) ? pick(1, 12) : pick(13, 40);
    int N = pick(0, 2) ? pick(1, 40) : pick(41, 300);
    int K = pick(0, 3) == 0 ? 8 * pick(0, 12) : pick(0, 2) ? pick(0, 24) : pick(25, 150), ta = pick(0, 1), tb = pick(0, 1), layout = pick(0, 4);
    int c_rs = layout == 1 ? 0 : layout == 2 ? 1 : layout == 3 ? 0 : N, c_cs = layout == 2 || layout == 3 ? 0 : 1;
    float alpha = pick(0, 1) ? 1.0f : 0.75f, beta = 1.5f;
    size_t mk = (size_t)M * (size_t)K, kn = (size_t)K * (size_t)N, mn = (size_t)M * (size_t)N;
    float *A = malloc((mk ? mk : 1) * sizeof *A), *At = malloc((mk ? mk : 1) * sizeof *A);
    float *B = malloc((kn ? kn : 1) * sizeof *B), *C = malloc(mn * sizeof *C);
    float *want = outputs(mn, 0x7fc00001u), *got = outputs(mn, 0x7fc00002u);
    char shape[96];
    int i, k;
    fill(A, mk);
    fill(B, kn);
    fill(C, mn);
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d ta=%d tb=%d layout=%d", M, N, K, ta, tb, layout);
    et_gemm_f32_ref(M, N, K, alpha, A, ta, B, tb, beta, layout ? C : NULL, c_rs, c_cs, want);
    et_gemm_f32(M, N, K, alpha, A, ta, B, tb, beta, layout ? C : NULL, c_rs, c_cs, got);
    check("gemm", want, got, mn, shape);
    if (ta) {  /* the same products from A stored the other way: the paths for untransposed A */
        for (i = 0; i < M; ++i)
            for (k = 0; k < K; ++k)
                At[(size_t)i * (size_t)K + (size_t)k] = A[(size_t)k * (size_t)M + (size_t)i];
        memset(got, 0xff, mn * sizeof *got);
        et_gemm_f32(M, N, K, alpha, At, 0, B, tb, beta, layout ? C : NULL, c_rs, c_cs, got);
        check("gemm_a_stored_untransposed", want, got, mn, shape);
    }
    free(A);
    free(At);
    free(B);
    free(C);
    free(want);
    free(got);
}

/* ---- an outer-product gradient accumulated (or stored, at a reset), then a plain SGD update ---- */

static void update_case(void)
{
    int m = pick(1, 12), n = pick(0, 3) ? pick(1, 40) : pick(41, 300), reset = pick(0, 1);
    size_t mn = (size_t)m * (size_t)n, i;
    float *A = malloc((size_t)m * sizeof *A), *B = malloc((size_t)n * sizeof *B), *G = malloc(mn * sizeof *G);
    float *want = outputs(mn, 0x7fc00001u), *got = outputs(mn, 0x7fc00002u), lr = 0.375f;
    char shape[64];
    fill(A, (size_t)m);
    fill(B, (size_t)n);
    fill(G, mn);
    snprintf(shape, sizeof shape, "m=%d n=%d reset=%d", m, n, reset);
    et_gemm_f32_ref(m, n, 1, 1.0f, A, 0, B, 0, 0.0f, NULL, 0, 0, want);
    for (i = 0; !reset && i < mn; ++i)
        want[i] = G[i] + want[i];
    memcpy(got, G, mn * sizeof *got);
    et_outer_accumulate_f32(m, A, n, B, got, reset);
    check("outer_accumulate", want, got, mn, shape);
    for (i = 0; i < mn; ++i)  /* the parameters W = got, their gradient G */
        want[i] = got[i] - lr * G[i];
    et_sgd_f32((int)mn, lr, 0.0f, 0.0f, 0, 0.0f, 0, got, G, NULL);
    check("sgd", want, got, mn, shape);
    free(A);
    free(B);
    free(G);
    free(want);
    free(got);
}

/* ---- convolutions ---- */

static int volume(const int *v)
{
    return v[0] * v[1] * v[2];
}

typedef struct {
    int N, C, M, G, in[3], out[3], k[3], s[3], d[3], p[3];
} geometry;


/* A random geometry for a convolution (dir 1: `in` is X's, `out` Y's) or a transposed one (dir -1). */
static geometry random_geometry(int dir)
{
    geometry g;
    int a, kind = pick(0, 9), Cg, Mg, rank = pick(0, 4) ? 2 : pick(0, 1) ? 1 : 3;
    for (;;) {
        for (a = 0; a < 3; ++a) {
            int used = a >= 3 - rank, hi;
            g.k[a] = used ? (pick(0, 4) ? pick(1, 3) : pick(4, 7)) : 1;
            g.s[a] = used ? (pick(0, 2) ? 1 : pick(2, 3)) : 1;
            g.d[a] = used && pick(0, 3) == 0 ? 2 : 1;
            g.p[a] = used ? pick(0, g.k[a] - 1) : 0;
            hi = used ? pick(0, g.k[a] - 1) : 0;
            g.in[a] = used ? (rank == 3 ? pick(1, 6) : pick(1, 3) ? pick(1, 20) : pick(21, 140)) : 1;
            if (kind == 0) {  /* pointwise */
                g.k[a] = g.s[a] = g.d[a] = 1;
                g.p[a] = hi = 0;
            }
            if (kind == 1 && a == 2 && used)  /* rows of 8: paired rows, lane blocks */
                g.in[a] = dir > 0 ? 8 * g.s[a] : 8;
            if (kind == 4 && a == 2 && used)  /* short rows: tiles across images or along output channels */
                g.in[a] = pick(1, 7);
            if (kind == 2 && a > 0) {  /* a plane too big for the scratch: gathered with clipping */
                g.in[a] = pick(125, 140);
                g.k[a] = pick(1, 3);
                g.s[a] = g.d[a] = 1;
                g.p[a] = pick(0, g.k[a] - 1);
                hi = pick(0, g.k[a] - 1);
            }
            if (kind == 3 && dir > 0) {  /* the same, with few outputs (weight gradients' short sums) */
                g.in[a] = a < 2 ? 1 : pick(16400, 17000);
                g.k[a] = a < 2 ? 1 : pick(1, 3);
                g.s[a] = a < 2 ? 1 : 300;
                g.d[a] = 1;
                g.p[a] = a < 2 ? 0 : pick(0, g.k[a] - 1);
                hi = a < 2 ? 0 : pick(0, g.k[a] - 1);
            }
            if (kind == 9 && used && g.in[a] > 1) {  /* depthwise below: MobileNets' 3 x 3 layers, strided or not */
                g.k[a] = 3;
                g.d[a] = 1;
                g.s[a] = dir > 0 ? pick(1, 2) : 1;
                g.p[a] = hi = pick(0, 1);
            }
            if (dir > 0)
                g.out[a] = (g.in[a] + g.p[a] + hi - g.d[a] * (g.k[a] - 1) - 1) / g.s[a] + 1;
            else
                g.out[a] = (g.in[a] - 1) * g.s[a] - g.p[a] - hi + g.d[a] * (g.k[a] - 1) + 1 + pick(0, g.s[a] - 1);
            if (kind == 0)
                g.out[a] = g.in[a];
        }
        if (g.out[0] >= 1 && g.out[1] >= 1 && g.out[2] >= 1 && volume(g.in) <= 20000 && volume(g.out) <= 20000)
            break;
    }
    g.G = pick(0, 2) ? 1 : pick(2, 3);
    Cg = pick(1, 5);
    Mg = pick(0, 1) ? pick(1, 3) : pick(4, 12);
    if (kind == 4 && pick(0, 1)) {  /* many channels: blocks of them, and of taps */
        Cg = pick(1, 40);
        Mg = pick(8, 70);
    }
    if (kind >= 7) {  /* depthwise */
        g.G = pick(1, 20);
        Cg = Mg = 1;
    }
    if (volume(g.in) > 4000 || volume(g.out) > 4000) {  /* large planes: few channels */
        g.G = 1;
        Cg = pick(1, 2);
        Mg = pick(0, 1) ? 1 : 4;
    }
    g.N = kind == 4 ? pick(1, 9) : pick(1, 2);  /* short rows: positions that run on into the next image */
    g.C = g.G * Cg;
    g.M = g.G * Mg;
    return g;
}

static void describe(const geometry *g, char *shape, size_t n)
{
    snprintf(shape, n, "N=%d C=%d M=%d G=%d in=%dx%dx%d out=%dx%dx%d k=%dx%dx%d s=%d,%d,%d d=%d,%d,%d p=%d,%d,%d",
             g->N, g->C, g->M, g->G, g->in[0], g->in[1], g->in[2], g->out[0], g->out[1], g->out[2], g->k[0],
             g->k[1], g->k[2], g->s[0], g->s[1], g->s[2], g->d[0], g->d[1], g->d[2], g->p[0], g->p[1], g->p[2]);
}

/* Runs each path of a convolution (dir 1) or transposed one (dir -1) that applies to g. */
static void conv_case(int dir)
{
    geometry g = random_geometry(dir);
    int Cg = g.C / g.G, Mg = g.M / g.G, k_size = volume(g.k), lo[3], dim[3], unit;
    int w_m = dir > 0 ? Cg * k_size : k_size, w_c = dir > 0 ? k_size : Mg * k_size;
    size_t nx = (size_t)g.N * (size_t)g.C * (size_t)volume(g.in), ny = (size_t)g.N * (size_t)g.M * (size_t)volume(g.out);
    size_t nw = (size_t)g.M * (size_t)Cg * (size_t)k_size;
    float *X = malloc(nx * sizeof *X), *W = malloc(nw * sizeof *W), *B = malloc((size_t)g.M * sizeof *B);
    float *want = outputs(ny, 0x7fc00001u), *got = outputs(ny, 0x7fc00002u), *bias = pick(0, 1) ? B : NULL;
    const char *name = dir > 0 ? "conv" : "transpose";
    char shape[256], what[64];
    fill(X, nx);
    fill(W, nw);
    fill(B, (size_t)g.M);
    describe(&g, shape, sizeof shape);
    unit = g.s[0] == 1 && g.s[1] == 1 && g.s[2] == 1;
    if (dir > 0)
        et_conv_f32_ref(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, X, W, bias, want);
    else
        et_conv_transpose_f32_ref(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, X, W, bias, want);
#define RUN_(path, call)                                                    \
    do {                                                                    \
        memset(got, 0xff, ny * sizeof *got);                                \
        if (call) {                                                         \
            snprintf(what, sizeof what, "%s:%s", name, path);               \
            check(what, want, got, ny, shape);                              \
        }                                                                   \
    } while (0)
    RUN_("dispatched", (dir > 0 ? et_conv_f32(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, X, W, bias, got)
                                : et_conv_transpose_f32(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, X, W,
                                                        bias, got),
                        1));
    if (!et_conv_pointwise_(g.in, g.out, g.k, g.s, g.p)) {  /* the pointwise kernels are matrix products */
        RUN_("direct", unit && et_conv_fits_(et_conv_margins_(g.in, g.out, g.k, g.s, g.d, g.p, dir, lo, dim)) &&
                           (et_conv_direct_f32_(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.d, g.p, dir, X, W, w_m, w_c,
                                                bias, got), 1));
        RUN_("phases", dir < 0 && !unit &&
                           et_conv_phases_f32_(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, X, W, w_m, w_c,
                                               bias, got));
        RUN_("gathered", (et_conv_gathered_f32_(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, dir, X, W, w_m,
                                                w_c, bias, got), 1));
        RUN_("images", et_conv_images_f32_(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, dir, X, W, w_m, w_c,
                                           bias, got));
        RUN_("channels", et_conv_channels_f32_(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, dir, X, W, w_m,
                                               w_c, bias, got));
        RUN_("narrow", et_conv_narrow_f32_(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, dir, X, W, w_m, w_c,
                                           bias, got));
        RUN_("depthwise", Cg == 1 && Mg == 1 &&
                              et_conv_depthwise_f32_(g.N, g.C, g.in, g.out, g.k, g.s, g.d, g.p, dir, X, W, bias, got));
        RUN_("depthwise_planes",
             Cg == 1 && Mg == 1 &&
                 et_conv_depthwise_planes_f32_(g.N, g.C, g.in, g.out, g.k, g.s, g.d, g.p, dir, X, W, bias, got));
    } else if (dir > 0)
        RUN_("pointwise_narrow",
             et_conv_pointwise_narrow_f32_(g.N, g.C, g.M, g.G, volume(g.out), X, W, bias, got));
#undef RUN_
    free(X);
    free(W);
    free(B);
    free(want);
    free(got);
}

/* Conv's weight gradient: each path whose order of sums is the one the reference takes for g. */
static void grad_w_case(void)
{
    geometry g = random_geometry(1);
    int Cg = g.C / g.G, Mg = g.M / g.G, k_size = volume(g.k);
    int in_order = Mg >= ET_CONV_ROWS && volume(g.out) <= ET_CONV_GRAD_SHORT;
    size_t nx = (size_t)g.N * (size_t)g.C * (size_t)volume(g.in), ny = (size_t)g.N * (size_t)g.M * (size_t)volume(g.out);
    size_t nw = (size_t)g.M * (size_t)Cg * (size_t)k_size;
    float *X = malloc(nx * sizeof *X), *dY = malloc(ny * sizeof *dY);
    float *want = outputs(nw, 0x7fc00001u), *got = outputs(nw, 0x7fc00002u);
    char shape[256];
    fill(X, nx);
    fill(dY, ny);
    describe(&g, shape, sizeof shape);
    et_conv_grad_w_f32_ref(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, dY, X, want);
    et_conv_grad_w_f32(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, dY, X, got);
    check("grad_w:dispatched", want, got, nw, shape);
    memset(got, 0xff, nw * sizeof *got);  /* depthwise, also where rows read in place are picked */
    if (!in_order && Cg == 1 && Mg == 1 &&
        et_conv_grad_w_depthwise_f32_(g.N, g.C, g.in, g.out, g.k, g.s, g.d, g.p, dY, X, got))
        check("grad_w:depthwise", want, got, nw, shape);
    memset(got, 0xff, nw * sizeof *got);
    if (!in_order && Cg == 1 && Mg == 1 &&
        et_conv_grad_w_depthwise_planes_f32_(g.N, g.C, g.in, g.out, g.k, g.s, g.d, g.p, dY, X, got))
        check("grad_w:depthwise_planes", want, got, nw, shape);
    free(X);
    free(dY);
    free(want);
    free(got);
}

/* Conv's input gradient where dX takes over dY's bytes (et_conv_grad_x_f32), for the layers that
 * qualify: pointwise without groups (C <= M) and depthwise keeping the plane's size; in place and
 * apart, with scratch for a random number of pieces, against the transposed convolution. */
static void grad_x_case(void)
{
    geometry g;
    int a, pointwise = pick(0, 1), plane, t;
    size_t ny, nx, nw;
    float *dY, *W, *T, *want, *got, *shared;
    char shape[256];
    for (a = 0; a < 3; ++a) {
        g.k[a] = pointwise || a == 0 ? 1 : 2 * pick(0, 2) + 1;
        g.d[a] = pick(1, 2);
        g.s[a] = 1;
        g.p[a] = g.d[a] * (g.k[a] - 1) / 2;
        g.in[a] = g.out[a] = a == 0 ? 1 : pick(0, 3) ? pick(1, 12) : pick(13, 60);
    }
    g.N = pick(1, 3);
    g.M = pick(1, 40);
    g.C = pointwise ? pick(1, g.M) : g.M;
    g.G = pointwise ? 1 : g.C;
    plane = volume(g.in);
    t = pointwise ? g.M * pick(1, plane) : plane * pick(1, g.C);
    ny = (size_t)g.N * (size_t)g.M * (size_t)plane;
    nx = (size_t)g.N * (size_t)g.C * (size_t)plane;
    nw = (size_t)g.M * (size_t)(g.C / g.G) * (size_t)volume(g.k);
    dY = malloc(ny * sizeof *dY);
    W = malloc(nw * sizeof *W);
    T = malloc((size_t)t * sizeof *T);
    shared = malloc(ny * sizeof *shared);
    want = outputs(nx, 0x7fc00001u);
    got = outputs(nx, 0x7fc00002u);
    fill(dY, ny);
    fill(W, nw);
    describe(&g, shape, sizeof shape);
    et_conv_transpose_f32_ref(g.N, g.M, g.C, g.G, g.out, g.in, g.k, g.s, g.d, g.p, dY, W, NULL, want);
    et_conv_grad_x_f32(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, dY, W, got, T, t);
    check("grad_x:apart", want, got, nx, shape);
    memcpy(shared, dY, ny * sizeof *shared);
    et_conv_grad_x_f32(g.N, g.C, g.M, g.G, g.in, g.out, g.k, g.s, g.d, g.p, shared, W, shared, T, t);
    check("grad_x:in_place", want, shared, nx, shape);
    free(dY);
    free(W);
    free(T);
    free(shared);
    free(want);
    free(got);
}

int main(int argc, char **argv)
{
    int cases = argc > 2 ? atoi(argv[2]) : 100, i;
    rng_state = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) * 2654435761u + 1u : 1u;
    for (i = 0; i < cases; ++i) {
        gemm_case();
        conv_case(1);
        conv_case(-1);
        grad_w_case();
        grad_x_case();
    }
    for (i = 0; i < cases; ++i)  /* after the others, which so draw the shapes they always drew */
        update_case();
    for (i = 0; i < MAX_PATHS && path_names[i]; ++i)
        printf("path %s %ld\n", path_names[i], path_counts[i]);
    printf("compared %ld\nmismatches %ld\n", compared, mismatches);
    return mismatches != 0;
}
