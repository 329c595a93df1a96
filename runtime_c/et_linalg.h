/* edgetrain runtime: matrix products, and the fixed-order tiles and dot
 * products the convolution kernels share.
 *
 * Rounding is fixed by the C text, never by the compiler: outputs that
 * run along a contiguous row are summed over k = 0..K-1 in order, starting
 * from 0, a tile of them at a time with the partial sums in registers
 * (et_tile_f32_); a dot product of two contiguous vectors (op(B)
 * transposed, a weight gradient) keeps ET_LANES interleaved partial sums,
 * added in one stated order.  Either way every target computes the same
 * bits whether or not it vectorizes (no reassociation, no FMA contraction:
 * see et_common.h).  Y must not overlap A, B or C. */
#ifndef ET_LINALG_H
#define ET_LINALG_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif

/* Partial sums of a dot product: within each piece added (a whole dot
 * product, or one row of a convolution window), lane l holds the products
 * of elements l, l + ET_LANES, l + 2 * ET_LANES, ...  Eight lanes fill two
 * SSE or one AVX register and cost nothing on a scalar FPU. */
#define ET_LANES 8

/* S(0) S(1) ...: a statement per register of a tile.  Tiles keep their
 * sums and loads in variables named by number (c<row><half>, y<row>, p<lane>),
 * not in arrays, which gcc -O2 keeps in memory: a tile's loads and stores,
 * not its arithmetic, would set its pace. */
#define ET_EACH4_(S) S(0) S(1) S(2) S(3)
#define ET_EACH8_(S) S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7)

#if ET_VMLA
/* Zeros for one VLDM to clear up to sixteen registers: lanes that start from 0. */
static const float et_zeros_[2 * ET_LANES] = {0.0f};

/* et_dot_lanes_f32_'s whole blocks where the FPU has VMLA, in assembly: the lanes in s16-s23
 * throughout, and per block one VLDM of a's eight values, one of b's and eight VMLA (from C, gcc
 * spends an address on every load).  blocks >= 1. */
#define ET_LANE_MLA_(l, x, y) "vmla.f32 s" #l ", s" #x ", s" #y "\n\t"
#define ET_DOT8_BLOCKS_                                                                                  \
    "1:\n\t"                                                                                            \
    "vldmia %[a]!, {s0-s7}\n\t"                                                                         \
    "vldmia %[b]!, {s8-s15}\n\t"                                                                        \
    ET_LANE_MLA_(16, 0, 8) ET_LANE_MLA_(17, 1, 9) ET_LANE_MLA_(18, 2, 10) ET_LANE_MLA_(19, 3, 11)       \
    ET_LANE_MLA_(20, 4, 12) ET_LANE_MLA_(21, 5, 13) ET_LANE_MLA_(22, 6, 14) ET_LANE_MLA_(23, 7, 15)     \
    "subs %[n], %[n], #1\n\t"                                                                           \
    "bne 1b\n\t"
#define ET_DOT8_CLOBBERS_ "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", \
    "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "cc", "memory"

/* The lanes from `from` into `lane`. */
static inline void et_dot8_vmla_(int blocks, const float *a, const float *b, const float *from, float *lane)
{
    __asm__ volatile("vldmia %[f], {s16-s23}\n\t" ET_DOT8_BLOCKS_ "vstmia %[l], {s16-s23}"
                     : [a] "+r"(a), [b] "+r"(b), [n] "+r"(blocks)
                     : [f] "r"(from), [l] "r"(lane)
                     : ET_DOT8_CLOBBERS_);
}

/* The lanes from zeros, and their sum as et_dot_total_f32_ adds them, without storing them. */
static inline float et_dot8_total_vmla_(int blocks, const float *a, const float *b)
{
    float total;
    __asm__ volatile("vldmia %[z], {s16-s23}\n\t" ET_DOT8_BLOCKS_
                     "vadd.f32 s16, s16, s20\n\t"
                     "vadd.f32 s18, s18, s22\n\t"
                     "vadd.f32 s17, s17, s21\n\t"
                     "vadd.f32 s19, s19, s23\n\t"
                     "vadd.f32 s16, s16, s18\n\t"
                     "vadd.f32 s17, s17, s19\n\t"
                     "vadd.f32 %[t], s16, s17"
                     : [a] "+r"(a), [b] "+r"(b), [n] "+r"(blocks), [t] "=t"(total)
                     : [z] "r"(et_zeros_)
                     : ET_DOT8_CLOBBERS_);
    return total;
}
#undef ET_LANE_MLA_
#undef ET_DOT8_BLOCKS_
#undef ET_DOT8_CLOBBERS_
#endif

/* lane[j % ET_LANES] += a[j * a_step] * b[j] for j < n, the lanes in
 * registers (p<l>) through the whole blocks.  (Whole blocks are counted up
 * front: a `j + ET_LANES <= n` loop makes 32-bit gcc warn of an overflow
 * in the tail loop that follows.) */
static inline void et_dot_lanes_f32_(int n, const float *restrict a, int a_step, const float *restrict b,
                                     float *restrict lane)
{
    int blocks = a_step == 1 ? n / ET_LANES : 0, j;
#if ET_VMLA
    if (blocks > 0) {
        ET_PATH_("dot_lanes_vmla");
        et_dot8_vmla_(blocks, a, b, lane, lane);
    }
#else
    int i;
#define ET_SUMS_(l) float p##l = lane[l];
#define ET_ADD_(l) p##l = et_mla_(p##l, a[i * ET_LANES + l], b[i * ET_LANES + l]);
#define ET_STORE_(l) lane[l] = p##l;
    ET_EACH8_(ET_SUMS_)
    for (i = 0; i < blocks; ++i) {
        ET_EACH8_(ET_ADD_)
    }
    ET_EACH8_(ET_STORE_)
#undef ET_SUMS_
#undef ET_ADD_
#undef ET_STORE_
#endif
    for (j = blocks * ET_LANES; j < n; ++j)
        lane[j % ET_LANES] += a[j * a_step] * b[j];
}

/* The lanes' sum, pairwise in a fixed order. */
static inline float et_dot_total_f32_(const float *lane)
{
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* The dot product of a (its values a_step apart) and b, n values each: et_dot_lanes_f32_ from lanes
 * of 0, added up by et_dot_total_f32_. */
static inline float et_dot_f32_(int n, const float *a, int a_step, const float *b)
{
    float lane[ET_LANES];
#if ET_VMLA
    if (a_step == 1 && n >= ET_LANES && n % ET_LANES == 0) {  /* the lanes in registers from start to sum */
        ET_PATH_("dot_lanes_vmla");
        return et_dot8_total_vmla_(n / ET_LANES, a, b);
    }
#endif
    memset(lane, 0, sizeof lane);
    et_dot_lanes_f32_(n, a, a_step, b, lane);
    return et_dot_total_f32_(lane);
}

/* ---- Long sums ----
 * A float sum taken in order rounds at the size of its running total, so
 * its error grows with the count of values (7.7e-4 against float64 for a
 * BatchNormalization gradient over 4608 values, where PyTorch's float32 is
 * 1.1e-4).  Long sums here are blocked and pairwise, as PyTorch's and
 * NumPy's are, in an order the C text fixes.  Values come in runs (a row,
 * a plane); each run splits into pieces of ET_SUM_PIECE values from its
 * start; within a piece, lane l adds values l, l + ET_LANES, ... in
 * order, from 0; the pieces' lanes meet pairwise in a cascade
 * (et_cascade_push_), and et_dot_total_f32_ adds up the lanes.  A sum
 * from +0 is never -0, so its first addition is exact. */
#define ET_SUM_PIECE 128
#define ET_SUM_LEVELS 16  /* of a cascade: pairwise over 2^15 pieces, in order beyond */

/* Adds `piece` (`width` values, overwritten) as piece number `count`
 * (from 0) to a cascade whose level k (width values at level + k * width)
 * holds the sum of 2^k pieces while bit k of count is set: merges carry
 * upwards like a binary counter's, the older sum on the left.  The top
 * level, once used, adds every carry that reaches it. */
static inline void et_cascade_push_(float *level, int width, uint32_t count, float *piece)
{
    int k, i;
    for (k = 0; k + 1 < ET_SUM_LEVELS && (count & 1u); ++k, count >>= 1)
        for (i = 0; i < width; ++i)
            piece[i] = level[k * width + i] + piece[i];
    if (k + 1 == ET_SUM_LEVELS && count)
        for (i = 0; i < width; ++i)
            piece[i] = level[k * width + i] + piece[i];
    memcpy(level + k * width, piece, (size_t)width * sizeof *piece);
}

/* total = the cascade's sum after `count` pieces: from 0, each level in
 * use from the lowest up, added on the left. */
static inline void et_cascade_total_(const float *level, int width, uint32_t count, float *total)
{
    int k, i;
    for (i = 0; i < width; ++i)
        total[i] = 0.0f;
    for (k = 0; count && k < ET_SUM_LEVELS; ++k, count >>= 1)
        if ((count & 1u) || k + 1 == ET_SUM_LEVELS)  /* the top level is in use once anything reaches it */
            for (i = 0; i < width; ++i)
                total[i] = level[k * width + i] + total[i];
}

/* A long sum in progress: its pieces so far and their cascade of lanes. */
typedef struct {
    uint32_t pieces;
    float level[ET_SUM_LEVELS * ET_LANES];
} et_sum_;

static inline void et_sum_start_(et_sum_ *s)
{
    s->pieces = 0;
}

/* Adds a piece's lane sums (overwritten). */
static inline void et_sum_piece_(et_sum_ *s, float *lane)
{
    et_cascade_push_(s->level, ET_LANES, s->pieces++, lane);
}

static inline float et_sum_total_(const et_sum_ *s)
{
    float lane[ET_LANES];
    et_cascade_total_(s->level, ET_LANES, s->pieces, lane);
    return et_dot_total_f32_(lane);
}

/* lane[j % ET_LANES] = the sum of x[j] over j < n, from 0: one piece. */
static inline void et_sum_lanes_f32_(int n, const float *restrict x, float *restrict lane)
{
    int blocks = n / ET_LANES, i, l;
    for (l = 0; l < ET_LANES; ++l)
        lane[l] = 0.0f;
    for (i = 0; i < blocks; ++i)
        for (l = 0; l < ET_LANES; ++l)
            lane[l] += x[i * ET_LANES + l];
    for (i = blocks * ET_LANES; i < n; ++i)
        lane[i % ET_LANES] += x[i];
}

/* Adds the run x[0..n) to s. */
static inline void et_sum_run_f32_(et_sum_ *s, int n, const float *x)
{
    float lane[ET_LANES];
    int i;
    for (i = 0; i < n; i += ET_SUM_PIECE) {
        et_sum_lanes_f32_(n - i < ET_SUM_PIECE ? n - i : ET_SUM_PIECE, x + i, lane);
        et_sum_piece_(s, lane);
    }
}

/* A tile of a matrix product: ET_TILE_ROWS output rows by up to
 * ET_TILE_COLS contiguous outputs, whose partial sums stay in registers
 * while k runs. */
#define ET_TILE_ROWS 4
#define ET_TILE_COLS 16

/* et_tile_f32_'s sums (below) on a scalar FPU, for n outputs per row that
 * run contiguously in B.  Four rows by four outputs keep their sixteen sums
 * in registers while k runs, the four rows' entries of A for each k packed
 * side by side first (ap, ET_ROWS_DEPTH k at a time), so that a k costs
 * two short runs of loads and sixteen et_mla_; other rows go one at a
 * time, eight outputs at once.  Each sum still adds its products in k
 * order, from 0 unless `accumulate`, the stored sum carried from one
 * depth of packed A to the next. */
#define ET_ROWS_DEPTH 32  /* ap: 576 bytes of stack, with 16 zeros */

#if ET_VMLA
/* et_rows_f32_'s 4 x 4 tiles over rows of B `step` floats apart, where the FPU has VMLA, in
 * assembly: `tiles` tiles side by side along y's four rows (y_rs floats apart) in one call, so
 * that no tile pays a call's setup.  Row r's output t of a tile sums in s(4r + t), from 0 where
 * `fresh`, else from y; each k is one VLDM of its four packed entries of A (s16-s19), one of its
 * four values of B (s20-s23), and sixteen VMLA, so every sum adds its products in k order; then
 * the sums go to y, and the next tile starts four outputs on, A and B rewound.  From C, gcc spent
 * an address on every load and some thirty instructions a tile around the loop.  Where `fresh`,
 * sixteen zeros follow A's `depth` packed entries: one VLDM clears a tile's sums.  depth >= 1,
 * tiles >= 1; y walks down a tile's rows and back. */
/* The loop over k. */
#define ET_TILE4X4_K_                     \
    "1:\n\t"                              \
    "vldmia %[a]!, {s16-s19}\n\t"         \
    "vldmia %[b], {s20-s23}\n\t"          \
    "add %[b], %[b], %[s]\n\t"            \
    "vmla.f32 s0, s16, s20\n\t"           \
    "vmla.f32 s1, s16, s21\n\t"           \
    "vmla.f32 s2, s16, s22\n\t"           \
    "vmla.f32 s3, s16, s23\n\t"           \
    "vmla.f32 s4, s17, s20\n\t"           \
    "vmla.f32 s5, s17, s21\n\t"           \
    "vmla.f32 s6, s17, s22\n\t"           \
    "vmla.f32 s7, s17, s23\n\t"           \
    "vmla.f32 s8, s18, s20\n\t"           \
    "vmla.f32 s9, s18, s21\n\t"           \
    "vmla.f32 s10, s18, s22\n\t"          \
    "vmla.f32 s11, s18, s23\n\t"          \
    "vmla.f32 s12, s19, s20\n\t"          \
    "vmla.f32 s13, s19, s21\n\t"          \
    "vmla.f32 s14, s19, s22\n\t"          \
    "vmla.f32 s15, s19, s23\n\t"          \
    "cmp %[a], %[e]\n\t"                  \
    "bne 1b\n\t"
/* The sums to y's four rows, from the last up; y on to the next tile. */
#define ET_TILE4X4_STORE_                 \
    "vstmia %[y], {s12-s15}\n\t"          \
    "sub %[y], %[y], %[rs]\n\t"           \
    "vstmia %[y], {s8-s11}\n\t"           \
    "sub %[y], %[y], %[rs]\n\t"           \
    "vstmia %[y], {s4-s7}\n\t"            \
    "sub %[y], %[y], %[rs]\n\t"           \
    "vstmia %[y]!, {s0-s3}\n\t"
/* y from a tile's first row to its last. */
#define ET_TILE4X4_DOWN_                  \
    "add %[y], %[y], %[rs]\n\t"           \
    "add %[y], %[y], %[rs]\n\t"           \
    "add %[y], %[y], %[rs]\n\t"
/* A and B rewound for the next tile, and the loop over tiles. */
#define ET_TILE4X4_NEXT_                  \
    "sub %[a], %[a], %[as]\n\t"           \
    "sub %[b], %[b], %[bb]\n\t"           \
    "subs %[n], %[n], #1\n\t"             \
    "bne 2b"
#define ET_TILE4X4_OPERANDS_                                                                                    \
    : [a] "+r"(ap), [b] "+r"(bk), [n] "+r"(tiles), [y] "+r"(y)                                                  \
    : [e] "r"(a_end), [as] "r"(a_span), [s] "r"(step * sizeof *bk), [bb] "r"(b_back), [rs] "r"(y_rs * sizeof *y) \
    : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15",     \
      "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "cc", "memory"

static inline void et_tiles4x4_vmla_(int tiles, int depth, const float *ap, const float *bk, size_t step, int fresh,
                                     float *y, size_t y_rs)
{
    const float *a_end = ap + 4 * depth;
    size_t a_span = 4 * (size_t)depth * sizeof *ap, b_back = (size_t)depth * step * sizeof *bk - 4 * sizeof *bk;
    if (fresh)
        __asm__ volatile(
            "vldmia %[e], {s0-s15}\n\t"
            ET_TILE4X4_DOWN_
            "2:\n\t"
            ET_TILE4X4_K_
            ET_TILE4X4_STORE_
            "vldmia %[a], {s0-s15}\n\t"
            ET_TILE4X4_DOWN_
            ET_TILE4X4_NEXT_
            ET_TILE4X4_OPERANDS_);
    else
        __asm__ volatile(
            "2:\n\t"
            "vldmia %[y], {s0-s3}\n\t"
            "add %[y], %[y], %[rs]\n\t"
            "vldmia %[y], {s4-s7}\n\t"
            "add %[y], %[y], %[rs]\n\t"
            "vldmia %[y], {s8-s11}\n\t"
            "add %[y], %[y], %[rs]\n\t"
            "vldmia %[y], {s12-s15}\n\t"
            ET_TILE4X4_K_
            ET_TILE4X4_STORE_
            ET_TILE4X4_NEXT_
            ET_TILE4X4_OPERANDS_);
}
#undef ET_TILE4X4_K_
#undef ET_TILE4X4_STORE_
#undef ET_TILE4X4_DOWN_
#undef ET_TILE4X4_NEXT_
#undef ET_TILE4X4_OPERANDS_

/* The same for one row of eight outputs (the rows a 4 x 4 tile leaves, a batch of one's row): its
 * sums in s0-s7, from init's; each k is one load of its entry of A, one VLDM of its eight values of
 * B and eight VMLA. */
static inline void et_row8_vmla_(int depth, const float *ap, const float *bk, size_t step, const float *init,
                                 float *y)
{
    __asm__ volatile(
        "vldmia %[i], {s0-s7}\n\t"
        "1:\n\t"
        "vldmia %[a]!, {s16}\n\t"
        "vldmia %[b], {s8-s15}\n\t"
        "add %[b], %[b], %[s]\n\t"
        "vmla.f32 s0, s16, s8\n\t"
        "vmla.f32 s1, s16, s9\n\t"
        "vmla.f32 s2, s16, s10\n\t"
        "vmla.f32 s3, s16, s11\n\t"
        "vmla.f32 s4, s16, s12\n\t"
        "vmla.f32 s5, s16, s13\n\t"
        "vmla.f32 s6, s16, s14\n\t"
        "vmla.f32 s7, s16, s15\n\t"
        "subs %[n], %[n], #1\n\t"
        "bne 1b\n\t"
        "vstmia %[y], {s0-s7}"
        : [a] "+r"(ap), [b] "+r"(bk), [n] "+r"(depth)
        : [s] "r"(step * sizeof *bk), [i] "r"(init), [y] "r"(y)
        : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15",
          "s16", "cc", "memory");
}

/* et_rows_f32_'s packing of A where the FPU has VLDR, in assembly: ap[4k + r] = a[at[k] + r * a_rs]
 * for k < depth (>= 1) and r < 4, each k one load of its offset, four VLDR down the rows and one
 * VSTM (from C, gcc spent some 27 instructions a k).  Moves bits only. */
static inline void et_pack4_vfp_(int depth, const float *a, size_t a_rs, const size_t *at, float *ap)
{
    const float *p;
    __asm__ volatile("1:\n\t"
                     "ldr %[p], [%[t]], #4\n\t"
                     "add %[p], %[a], %[p], lsl #2\n\t"
                     "vldr s0, [%[p]]\n\t"
                     "add %[p], %[p], %[rs]\n\t"
                     "vldr s1, [%[p]]\n\t"
                     "add %[p], %[p], %[rs]\n\t"
                     "vldr s2, [%[p]]\n\t"
                     "add %[p], %[p], %[rs]\n\t"
                     "vldr s3, [%[p]]\n\t"
                     "vstmia %[ap]!, {s0-s3}\n\t"
                     "subs %[n], %[n], #1\n\t"
                     "bne 1b"
                     : [t] "+r"(at), [ap] "+r"(ap), [n] "+r"(depth), [p] "=&r"(p)
                     : [a] "r"(a), [rs] "r"(a_rs * sizeof *a)
                     : "s0", "s1", "s2", "s3", "cc", "memory");
}
#endif

/* The stride of B's rows bt[0 .. depth) where they are one stride apart (a plain product, a
 * pointwise convolution), else 0: then the tiles step through them, two k a pass, without
 * reading bt. */
static inline size_t et_rows_step_(int depth, const size_t *bt)
{
    size_t step = depth > 1 && bt[1] > bt[0] ? bt[1] - bt[0] : 0;
    int k;
    for (k = 2; step && k < depth; ++k)
        if (bt[k] != bt[0] + (size_t)k * step)
            step = 0;
    return step;
}

static inline void et_rows_f32_(int rows, int n, int K, const float *a, size_t a_rs, const size_t *at,
                                const float *restrict b, const size_t *bt, float *restrict y, size_t y_rs,
                                int accumulate)
{
    float ap[ET_TILE_ROWS * ET_ROWS_DEPTH + 16];  /* + the zeros of et_tiles4x4_vmla_ */
    int j, k, r, k0 = 0, depth;
    do {  /* once at least: K = 0 makes zeros */
        int fresh = k0 == 0 && !accumulate;  /* the sums start from 0 rather than from y */
        depth = K - k0 < ET_ROWS_DEPTH ? K - k0 : ET_ROWS_DEPTH;
        j = 0;
        if (rows == ET_TILE_ROWS) {
            size_t step = et_rows_step_(depth, bt + k0);
            ET_PATH_(step ? "rows_4x4_strided" : "rows_4x4");
#if ET_VMLA
            if (depth > 0)
                et_pack4_vfp_(depth, a, a_rs, at + k0, ap);
#else
            for (k = 0; k < depth; ++k) {  /* four rows' loads from one offset */
                const float *ak = a + at[k0 + k];
                ap[k * ET_TILE_ROWS] = ak[0];
                ap[k * ET_TILE_ROWS + 1] = ak[a_rs];
                ap[k * ET_TILE_ROWS + 2] = ak[2 * a_rs];
                ap[k * ET_TILE_ROWS + 3] = ak[3 * a_rs];
            }
#endif
#if ET_VMLA
            if (step && n >= 4) {
                for (k = 0; fresh && k < 16; ++k)  /* the zeros the tiles' sums start from */
                    ap[depth * ET_TILE_ROWS + k] = 0.0f;
                et_tiles4x4_vmla_(n / 4, depth, ap, b + bt[k0], step, fresh, y, y_rs);
                j = n / 4 * 4;
            }
#endif
            for (; j + 4 <= n; j += 4) {  /* row r's sums in c<r>0 .. c<r>3 */
#define ET_SUMS_(r) float c##r##0 = 0.0f, c##r##1 = 0.0f, c##r##2 = 0.0f, c##r##3 = 0.0f, *y##r = y + r * y_rs + j;
#define ET_LOAD_(r) c##r##0 = y##r[0]; c##r##1 = y##r[1]; c##r##2 = y##r[2]; c##r##3 = y##r[3];
#define ET_ADD_(r) c##r##0 = et_mla_(c##r##0, w[r], x0); c##r##1 = et_mla_(c##r##1, w[r], x1); \
                   c##r##2 = et_mla_(c##r##2, w[r], x2); c##r##3 = et_mla_(c##r##3, w[r], x3);
#define ET_K_(bk, w_k)                                                    \
    {                                                                     \
        const float *w = (w_k);                                           \
        float x0 = (bk)[0], x1 = (bk)[1], x2 = (bk)[2], x3 = (bk)[3];     \
        ET_EACH4_(ET_ADD_)                                                \
    }
#define ET_STORE_(r) y##r[0] = c##r##0; y##r[1] = c##r##1; y##r[2] = c##r##2; y##r[3] = c##r##3;
                ET_EACH4_(ET_SUMS_)
                if (!fresh) {
                    ET_EACH4_(ET_LOAD_)
                }
                if (step) {  /* two rows a pass, each k's four loads one address's offsets */
                    size_t o = bt[k0] + (size_t)j;
                    for (k = 0; k + 2 <= depth; k += 2, o += 2 * step) {
                        ET_K_(b + o, ap + k * ET_TILE_ROWS)
                        ET_K_(b + o + step, ap + (k + 1) * ET_TILE_ROWS)
                    }
                    if (k < depth)
                        ET_K_(b + o, ap + k * ET_TILE_ROWS)
                } else
                    for (k = 0; k < depth; ++k)
                        ET_K_(b + bt[k0 + k] + j, ap + k * ET_TILE_ROWS)
                ET_EACH4_(ET_STORE_)
#undef ET_SUMS_
#undef ET_LOAD_
#undef ET_ADD_
#undef ET_K_
#undef ET_STORE_
            }
        }
        for (r = 0; r < rows; ++r) {  /* the outputs the tiles left: eight at a time in c<l>, then one */
            const float *ar = a + r * a_rs;
            float *yr = y + r * y_rs;
            int i = j;
            ET_PATH_("rows_one");
#if ET_VMLA
            size_t step = n - i >= 8 ? et_rows_step_(depth, bt + k0) : 0;
            if (step) {
                static const float zeros[8] = {0.0f};
                ET_PATH_("rows_one_vmla");
                for (k = 0; k < depth; ++k)
                    ap[k] = ar[at[k0 + k]];
                for (; i + 8 <= n; i += 8)
                    et_row8_vmla_(depth, ap, b + bt[k0] + i, step, fresh ? zeros : yr + i, yr + i);
            }
#endif
            for (; i + 8 <= n; i += 8) {
#define ET_SUMS_(l) float c##l = fresh ? 0.0f : yr[i + l];
#define ET_ADD_(l) c##l = et_mla_(c##l, v, bk[l]);
#define ET_STORE_(l) yr[i + l] = c##l;
                ET_EACH8_(ET_SUMS_)
                for (k = 0; k < depth; ++k) {
                    const float *bk = b + bt[k0 + k] + i;
                    float v = ar[at[k0 + k]];
                    ET_EACH8_(ET_ADD_)
                }
                ET_EACH8_(ET_STORE_)
#undef ET_SUMS_
#undef ET_ADD_
#undef ET_STORE_
            }
            for (; i < n; ++i) {
                float c = fresh ? 0.0f : yr[i];
                for (k = 0; k < depth; ++k)
                    c = et_mla_(c, ar[at[k0 + k]], b[bt[k0 + k] + i]);
                yr[i] = c;
            }
        }
        k0 += depth;
    } while (k0 < K);
}

/* y_r[j] = (accumulate ? y_r[j] : 0) + a_r[at[0]] * b_j[bt[0]] +
 * a_r[at[1]] * b_j[bt[1]] + ... over k < K, added in k order, for rows
 * r < rows <= ET_TILE_ROWS (a_r = a + r * a_rs, y_r = y + r * y_rs) and
 * j < n <= ET_TILE_COLS, where b_j = b + j for the first 8 outputs and
 * b + b_hop + j - 8 after (b_hop 8: one run of B).  The offsets `at` and
 * `bt` say where each k's column of A and row of B are, so that a tile
 * reads both in place. */
static inline void et_tile_f32_(int rows, int n, int K, const float *restrict a, size_t a_rs, const size_t *at,
                                const float *restrict b, const size_t *bt, size_t b_hop, float *restrict y,
                                size_t y_rs, int accumulate)
{
    int j0 = 0, j;
#if ET_VECTORS
    int k, r;
    const float *a0 = a, *a1 = a + a_rs, *a2 = a + 2 * a_rs, *a3 = a + 3 * a_rs;
    if (rows == ET_TILE_ROWS && n == ET_TILE_COLS) {  /* row r's sums in c<r>0 (outputs 0..7) and c<r>1 */
#define ET_SUMS_(r) et_v8_ c##r##0 = {0}, c##r##1 = {0};
#define ET_LOAD_(r) memcpy(&c##r##0, y + r * y_rs, sizeof c##r##0); memcpy(&c##r##1, y + r * y_rs + 8, sizeof c##r##1);
#define ET_ADD_(r) c##r##0 += w##r * b0; c##r##1 += w##r * b1;
#define ET_STORE_(r) memcpy(y + r * y_rs, &c##r##0, sizeof c##r##0); memcpy(y + r * y_rs + 8, &c##r##1, sizeof c##r##1);
        ET_EACH4_(ET_SUMS_)
        ET_PATH_("tile_4x16");
        if (accumulate) {
            ET_EACH4_(ET_LOAD_)
        }
        for (k = 0; k < K; ++k) {
            const float *bk = b + bt[k];
            float w0 = a0[at[k]], w1 = a1[at[k]], w2 = a2[at[k]], w3 = a3[at[k]];
            et_v8_ b0, b1;
            memcpy(&b0, bk, sizeof b0);
            memcpy(&b1, bk + b_hop, sizeof b1);
            ET_IN_REGISTER_(b0);
            ET_IN_REGISTER_(b1);
            ET_EACH4_(ET_ADD_)
        }
        ET_EACH4_(ET_STORE_)
#undef ET_SUMS_
#undef ET_LOAD_
#undef ET_ADD_
#undef ET_STORE_
        return;
    }
    if (rows < ET_TILE_ROWS && n >= 8) {  /* a row at a time: 8 or 16 outputs */
        ET_PATH_("tile_rows_of_8_or_16");
        for (r = 0; r < rows; ++r) {
            const float *ar = a + (size_t)r * a_rs;
            float *yr = y + (size_t)r * y_rs;
            et_v8_ c0 = {0}, c1 = {0};
            if (accumulate) {
                memcpy(&c0, yr, sizeof c0);
                if (n == ET_TILE_COLS)
                    memcpy(&c1, yr + 8, sizeof c1);
            }
            for (k = 0; k < K; ++k) {
                et_v8_ b0, b1;
                memcpy(&b0, b + bt[k], sizeof b0);
                c0 += ar[at[k]] * b0;
                if (n == ET_TILE_COLS) {
                    memcpy(&b1, b + bt[k] + b_hop, sizeof b1);
                    c1 += ar[at[k]] * b1;
                }
            }
            memcpy(yr, &c0, sizeof c0);
            if (n == ET_TILE_COLS)
                memcpy(yr + 8, &c1, sizeof c1);
        }
        j0 = n == ET_TILE_COLS ? n : 8;
    }
    if (rows == ET_TILE_ROWS && n >= 8) {  /* the first 8 outputs of a short tile: row r's in c<r> */
#define ET_SUMS_(r) et_v8_ c##r = {0};
#define ET_LOAD_(r) memcpy(&c##r, y + r * y_rs, sizeof c##r);
#define ET_ADD_(r) c##r += a##r[at[k]] * b0;
#define ET_STORE_(r) memcpy(y + r * y_rs, &c##r, sizeof c##r);
        ET_EACH4_(ET_SUMS_)
        ET_PATH_("tile_4x8");
        if (accumulate) {
            ET_EACH4_(ET_LOAD_)
        }
        for (k = 0; k < K; ++k) {
            et_v8_ b0;
            memcpy(&b0, b + bt[k], sizeof b0);
            ET_EACH4_(ET_ADD_)
        }
        ET_EACH4_(ET_STORE_)
#undef ET_SUMS_
#undef ET_LOAD_
#undef ET_ADD_
#undef ET_STORE_
        j0 = 8;
    }
#endif
    /* What is left, on scalars: the outputs before 8 (at b + j), then those from 8 on (at b + b_hop). */
    for (j = j0; j < n; j = j < 8 ? 8 : n) {
        int end = j < 8 && n > 8 ? 8 : n;
        ET_PATH_("tile_scalar");
        et_rows_f32_(rows, end - j, K, a, a_rs, at, b + (j < 8 ? (size_t)j : b_hop + (size_t)(j - 8)), bt, y + j, y_rs,
                     accumulate);
    }
}

#if ET_WIDE
/* et_tile_f32_'s sums for ET_TILE_ROWS rows by 32 outputs, in two wide
 * registers a row (outputs 16 to 31 read B at b + b_hop): the eight sums
 * in flight of a 4 x 16 tile, on twice the outputs. */
static inline void et_tile_wide_f32_(int K, const float *restrict a, size_t a_rs, const size_t *at,
                                     const float *restrict b, const size_t *bt, size_t b_hop, float *restrict y,
                                     size_t y_rs, int accumulate)
{
    int k;
#define ET_SUMS_(r) et_v16_ c##r##0 = {0}, c##r##1 = {0};
#define ET_LOAD_(r) memcpy(&c##r##0, y + r * y_rs, sizeof c##r##0); memcpy(&c##r##1, y + r * y_rs + 16, sizeof c##r##1);
#define ET_ADD_(r) c##r##0 += a[r * a_rs + at[k]] * b0; c##r##1 += a[r * a_rs + at[k]] * b1;
#define ET_STORE_(r) memcpy(y + r * y_rs, &c##r##0, sizeof c##r##0); memcpy(y + r * y_rs + 16, &c##r##1, sizeof c##r##1);
    ET_EACH4_(ET_SUMS_)
    ET_PATH_("tile_4x32_wide");
    if (accumulate) {
        ET_EACH4_(ET_LOAD_)
    }
    for (k = 0; k < K; ++k) {
        et_v16_ b0, b1;
        memcpy(&b0, b + bt[k], sizeof b0);
        memcpy(&b1, b + bt[k] + b_hop, sizeof b1);
        ET_IN_WIDE_REGISTER_(b0);
        ET_IN_WIDE_REGISTER_(b1);
        ET_EACH4_(ET_ADD_)
    }
    ET_EACH4_(ET_STORE_)
#undef ET_SUMS_
#undef ET_LOAD_
#undef ET_ADD_
#undef ET_STORE_
}
#endif

/* et_tile_f32_ along a whole row block: n outputs per row, any n. */
static inline void et_tiles_f32_(int rows, int n, int K, const float *a, size_t a_rs, const size_t *at,
                                 const float *b, const size_t *bt, float *y, size_t y_rs, int accumulate)
{
#if ET_VECTORS
    int j = 0, k;
#if ET_WIDE
    for (; rows == ET_TILE_ROWS && j + 32 <= n; j += 32)
        et_tile_wide_f32_(K, a, a_rs, at, b + j, bt, 16, y + j, y_rs, accumulate);
#endif
    /* One row: a row's sums over k are chains of dependent additions, and
     * eight vectors of them side by side (64 outputs) keep the adder busy
     * where a tile's two would wait on it. */
    for (; rows == 1 && j + 64 <= n; j += 64) {
        float *yj = y + j;  /* outputs 8 h .. 8 h + 7 sum in c<h> */
#define ET_SUMS_(h) et_v8_ c##h = {0};
#define ET_LOAD_(h) memcpy(&c##h, yj + 8 * h, sizeof c##h);
#define ET_ADD_(h) memcpy(&v##h, bk + 8 * h, sizeof v##h); c##h += w * v##h;
#define ET_STORE_(h) memcpy(yj + 8 * h, &c##h, sizeof c##h);
        ET_EACH8_(ET_SUMS_)
        ET_PATH_("tiles_row_of_64");
        if (accumulate) {
            ET_EACH8_(ET_LOAD_)
        }
        for (k = 0; k < K; ++k) {
            const float *bk = b + bt[k] + j;
            float w = a[at[k]];
            et_v8_ v0, v1, v2, v3, v4, v5, v6, v7;
            ET_EACH8_(ET_ADD_)
        }
        ET_EACH8_(ET_STORE_)
#undef ET_SUMS_
#undef ET_LOAD_
#undef ET_ADD_
#undef ET_STORE_
    }
    for (; j < n; j += ET_TILE_COLS)
        et_tile_f32_(rows, n - j < ET_TILE_COLS ? n - j : ET_TILE_COLS, K, a, a_rs, at, b + j, bt, 8, y + j, y_rs,
                     accumulate);
#else
    et_rows_f32_(rows, n, K, a, a_rs, at, b, bt, y, y_rs, accumulate);
#endif
}

/* Taps of a weight-gradient tile (et_dot_tile_f32_): ET_DOT_TAPS in
 * vectors, up to ET_DOT_TILE_TAPS on a scalar FPU, whose 32 registers
 * hold a tile of 4 rows by 4 taps. */
#define ET_DOT_TAPS 2
#define ET_DOT_TILE_TAPS (ET_VECTORS ? ET_DOT_TAPS : 4)

#if ET_VECTORS
/* *dst (ET_LANES floats) = v, where `fresh`, else *dst + v. */
#define ET_LANES_ADD_(dst, v, fresh)               \
    do {                                           \
        et_v8_ s_ = (v);                           \
        if (!(fresh)) {                            \
            et_v8_ d_;                             \
            memcpy(&d_, (dst), sizeof d_);         \
            s_ = d_ + s_;                          \
        }                                          \
        memcpy((dst), &s_, sizeof s_);             \
    } while (0)

/* v = x[0], ..., x[rest - 1] and zeros: a tail's values in the lanes the
 * scalar form gives them (i % ET_LANES), so that a tail's products join
 * their lanes in registers.  The other lanes add 0 * 0 = +0, which changes
 * no sum: a sum from +0 is never -0. */
#define ET_TAIL_LOAD_(v, x, rest)                          \
    do {                                                   \
        float t_[ET_LANES] = {0.0f};                       \
        memcpy(t_, (x), (size_t)(rest) * sizeof *t_);      \
        memcpy(&(v), t_, sizeof(v));                       \
    } while (0)
#endif

#if ET_VMLA
/* et_dot_tile_f32_'s lanes for two rows of y and one tap x, where the FPU has VMLA, in assembly:
 * lane l of row 0 in s(l), of row 1 in s(8 + l), from init[0..15]; each block of eight values is
 * one VLDM of x (s16-s23), one of each row (s24-s31) and eight VMLA per row, so every lane adds its
 * products in order.  blocks >= 1. */
#define ET_DOT2_BLOCKS_                 \
    "vldmia %[i], {s0-s15}\n\t"         \
    "1:\n\t"                            \
    "vldmia %[x]!, {s16-s23}\n\t"       \
    "vldmia %[y0]!, {s24-s31}\n\t"      \
    "vmla.f32 s0, s24, s16\n\t"         \
    "vmla.f32 s1, s25, s17\n\t"         \
    "vmla.f32 s2, s26, s18\n\t"         \
    "vmla.f32 s3, s27, s19\n\t"         \
    "vmla.f32 s4, s28, s20\n\t"         \
    "vmla.f32 s5, s29, s21\n\t"         \
    "vmla.f32 s6, s30, s22\n\t"         \
    "vmla.f32 s7, s31, s23\n\t"         \
    "vldmia %[y1]!, {s24-s31}\n\t"      \
    "vmla.f32 s8, s24, s16\n\t"         \
    "vmla.f32 s9, s25, s17\n\t"         \
    "vmla.f32 s10, s26, s18\n\t"        \
    "vmla.f32 s11, s27, s19\n\t"        \
    "vmla.f32 s12, s28, s20\n\t"        \
    "vmla.f32 s13, s29, s21\n\t"        \
    "vmla.f32 s14, s30, s22\n\t"        \
    "vmla.f32 s15, s31, s23\n\t"        \
    "subs %[n], %[n], #1\n\t"           \
    "bne 1b\n\t"
#define ET_DOT2_CLOBBERS_ "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", \
    "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28",   \
    "s29", "s30", "s31", "cc", "memory"

/* The lanes go to c. */
static inline void et_dot2_vmla_(int blocks, const float *y0, const float *y1, const float *x, const float *init,
                                 float *c)
{
    __asm__ volatile(ET_DOT2_BLOCKS_ "vstmia %[c], {s0-s15}"
                     : [x] "+r"(x), [y0] "+r"(y0), [y1] "+r"(y1), [n] "+r"(blocks)
                     : [i] "r"(init), [c] "r"(c)
                     : ET_DOT2_CLOBBERS_);
}

/* A piece's last segment: after the blocks, its tail's values k < tail <= 7 join lanes k, last;
 * then row 0's lanes go to d0 and row 1's to d1, or where not `fresh` are added to them (d first,
 * as in C).  From C, the tail and the lanes' way out through memory cost more than a quarter of
 * the whole on KWS. */
#define ET_DOT2_TAIL_(k, offset, l0, l1)         \
    "cmp %[t], #" #k "\n\t"                    \
    "beq 2f\n\t"                               \
    "vldr s16, [%[x], #" #offset "]\n\t"       \
    "vldr s24, [%[y0], #" #offset "]\n\t"      \
    "vldr s25, [%[y1], #" #offset "]\n\t"      \
    "vmla.f32 s" #l0 ", s24, s16\n\t"          \
    "vmla.f32 s" #l1 ", s25, s16\n\t"
#define ET_DOT2_ADD_(l, d) "vadd.f32 s" #l ", s" #d ", s" #l "\n\t"
static inline void et_dot2_last_vmla_(int blocks, const float *y0, const float *y1, const float *x,
                                      const float *init, int tail, int fresh, float *d0, float *d1)
{
    __asm__ volatile(ET_DOT2_BLOCKS_
                     ET_DOT2_TAIL_(0, 0, 0, 8) ET_DOT2_TAIL_(1, 4, 1, 9) ET_DOT2_TAIL_(2, 8, 2, 10)
                     ET_DOT2_TAIL_(3, 12, 3, 11) ET_DOT2_TAIL_(4, 16, 4, 12) ET_DOT2_TAIL_(5, 20, 5, 13)
                     ET_DOT2_TAIL_(6, 24, 6, 14)
                     "2:\n\t"
                     "cmp %[f], #0\n\t"
                     "bne 3f\n\t"
                     "vldmia %[d0], {s16-s23}\n\t"
                     "vldmia %[d1], {s24-s31}\n\t"
                     ET_DOT2_ADD_(0, 16) ET_DOT2_ADD_(1, 17) ET_DOT2_ADD_(2, 18) ET_DOT2_ADD_(3, 19)
                     ET_DOT2_ADD_(4, 20) ET_DOT2_ADD_(5, 21) ET_DOT2_ADD_(6, 22) ET_DOT2_ADD_(7, 23)
                     ET_DOT2_ADD_(8, 24) ET_DOT2_ADD_(9, 25) ET_DOT2_ADD_(10, 26) ET_DOT2_ADD_(11, 27)
                     ET_DOT2_ADD_(12, 28) ET_DOT2_ADD_(13, 29) ET_DOT2_ADD_(14, 30) ET_DOT2_ADD_(15, 31)
                     "3:\n\t"
                     "vstmia %[d0], {s0-s7}\n\t"
                     "vstmia %[d1], {s8-s15}"
                     : [x] "+r"(x), [y0] "+r"(y0), [y1] "+r"(y1), [n] "+r"(blocks)
                     : [i] "r"(init), [t] "r"(tail), [f] "r"(fresh), [d0] "r"(d0), [d1] "r"(d1)
                     : ET_DOT2_CLOBBERS_);
}
#undef ET_DOT2_BLOCKS_
#undef ET_DOT2_CLOBBERS_
#undef ET_DOT2_TAIL_
#undef ET_DOT2_ADD_
#endif

/* The end of et_dot_tile_f32_'s piece whose sums went to `part`, on a
 * scalar FPU (vectors take a tail into their lanes): the products from i0
 * on of a single segment join their lanes, then the piece's lane sums go
 * to `lane`. */
static inline void et_dot_tail_f32_(int rows, int taps, int i0, int n, int fresh, float *restrict part,
                                    const float *restrict y, size_t y_rs, const float *restrict x, const size_t *xt,
                                    float *restrict lane, size_t lane_rs)
{
    int i, r, t, l;
    for (r = 0; r < rows; ++r)
        for (t = 0; t < taps; ++t) {
            float *p = part + (r * taps + t) * ET_LANES, *sum = lane + r * lane_rs + t * ET_LANES;
            for (i = i0; i < n; ++i) {
                ET_PATH_("dot_tail");
                p[i % ET_LANES] += y[r * y_rs + (size_t)i] * x[xt[t] + (size_t)i];
            }
            if (fresh)
                memcpy(sum, p, ET_LANES * sizeof *sum);
            else
                for (l = 0; l < ET_LANES; ++l)
                    sum[l] += p[l];
        }
}

/* lane[r * lane_rs + t * ET_LANES + l] += the lane sums of each piece (see
 * Long sums) of the products y_r[i] * x_t[i], for rows r < rows <=
 * ET_TILE_ROWS of y (`y_rs` apart) and taps t < taps <= ET_DOT_TILE_TAPS of x
 * (x_t = x + xt[t]).  The products come from `segs` segments of n values
 * (segment g reads y + g * y_ss and x + g * x_ss), `piece` segments to a
 * piece (the last may have fewer); within a piece, lane l adds those with
 * i % ET_LANES == l, segment by segment in order of i, from 0.  Where
 * `fresh`, the first piece's sums replace the lanes' values instead (the
 * same as adding them to 0: a sum from 0 is never -0).  Several segments
 * must be whole lane blocks (n % ET_LANES == 0).  That many dot products
 * share their loads. */
static inline void et_dot_tile_f32_(int rows, int taps, int segs, int piece, int fresh, int n,
                                    const float *restrict y, size_t y_rs, size_t y_ss, const float *restrict x,
                                    const size_t *xt, size_t x_ss, float *restrict lane, size_t lane_rs)
{
    int g0, g1, g, i0 = 0, r, t;
#if ET_VECTORS
    const int tail = n % ET_LANES != 0;
#else
    float part[ET_TILE_ROWS * ET_DOT_TILE_TAPS * ET_LANES];  /* a piece's sums with a tail: (r * taps + t) * ET_LANES + l */
#endif
    for (g0 = 0; g0 < segs; g0 = g1, fresh = 0) {
        g1 = segs - g0 < piece ? segs : g0 + piece;
#if ET_VECTORS
        if (rows == ET_TILE_ROWS && taps == ET_DOT_TAPS) {  /* row r's sums with tap t in c<r><t> */
#define ET_SUMS_(r) et_v8_ c##r##0 = {0}, c##r##1 = {0};
#define ET_LOAD_(r) memcpy(&y##r, yg + r * y_rs + i0, sizeof y##r);
#define ET_KEEP_(r) ET_IN_REGISTER_(y##r);
#define ET_ADD_(r) c##r##0 += y##r * x0; c##r##1 += y##r * x1;
#define ET_LANES_(r) ET_LANES_ADD_(lane + r * lane_rs, c##r##0, fresh); ET_LANES_ADD_(lane + r * lane_rs + 8, c##r##1, fresh);
#define ET_TAIL_(r) ET_TAIL_LOAD_(y##r, yg + r * y_rs + i0, n - i0);
            ET_EACH4_(ET_SUMS_)
            ET_PATH_("dot_tile_4x2");
            for (g = g0; g < g1; ++g) {
                const float *yg = y + (size_t)g * y_ss, *x0g = x + xt[0] + (size_t)g * x_ss;
                const float *x1g = x + xt[1] + (size_t)g * x_ss;
                et_v8_ x0, x1, y0, y1, y2, y3;
                for (i0 = 0; i0 + ET_LANES <= n; i0 += ET_LANES) {
                    memcpy(&x0, x0g + i0, sizeof x0);
                    memcpy(&x1, x1g + i0, sizeof x1);
                    ET_EACH4_(ET_LOAD_)
                    ET_IN_REGISTER_(x0);
                    ET_IN_REGISTER_(x1);
                    ET_EACH4_(ET_KEEP_)
                    ET_EACH4_(ET_ADD_)
                }
                if (tail) {  /* then there is one segment */
                    ET_PATH_("dot_tile_tail_in_lanes");
                    ET_TAIL_LOAD_(x0, x0g + i0, n - i0);
                    ET_TAIL_LOAD_(x1, x1g + i0, n - i0);
                    ET_EACH4_(ET_TAIL_)
                    ET_EACH4_(ET_ADD_)
                }
            }
            ET_EACH4_(ET_LANES_)
#undef ET_SUMS_
#undef ET_ADD_
#undef ET_TAIL_
#undef ET_LANES_
        } else if (rows == ET_TILE_ROWS && taps == 1) {  /* four rows' sums side by side, not one chain: c<r> */
#define ET_SUMS_(r) et_v8_ c##r = {0};
#define ET_ADD_(r) c##r += y##r * xv;
#define ET_LANES_(r) ET_LANES_ADD_(lane + r * lane_rs, c##r, fresh);
#define ET_TAIL_(r) ET_TAIL_LOAD_(y##r, yg + r * y_rs + i0, n - i0);
            ET_EACH4_(ET_SUMS_)
            ET_PATH_("dot_tile_4x1");
            for (g = g0; g < g1; ++g) {
                const float *yg = y + (size_t)g * y_ss, *xg = x + xt[0] + (size_t)g * x_ss;
                et_v8_ xv, y0, y1, y2, y3;
                for (i0 = 0; i0 + ET_LANES <= n; i0 += ET_LANES) {
                    memcpy(&xv, xg + i0, sizeof xv);
                    ET_EACH4_(ET_LOAD_)
                    ET_IN_REGISTER_(xv);
                    ET_EACH4_(ET_ADD_)
                }
                if (tail) {
                    ET_TAIL_LOAD_(xv, xg + i0, n - i0);
                    ET_EACH4_(ET_TAIL_)
                    ET_EACH4_(ET_ADD_)
                }
            }
            ET_EACH4_(ET_LANES_)
#undef ET_SUMS_
#undef ET_LOAD_
#undef ET_KEEP_
#undef ET_ADD_
#undef ET_TAIL_
#undef ET_LANES_
        } else
            for (r = 0; r < rows; ++r)
                for (t = 0; t < taps; ++t) {
                    et_v8_ c = {0};
                    ET_PATH_("dot_tile_one");
                    for (g = g0; g < g1; ++g) {
                        const float *xg = x + xt[t] + (size_t)g * x_ss, *yg = y + r * y_rs + (size_t)g * y_ss;
                        et_v8_ xv, yv;
                        for (i0 = 0; i0 + ET_LANES <= n; i0 += ET_LANES) {
                            memcpy(&xv, xg + i0, sizeof xv);
                            memcpy(&yv, yg + i0, sizeof yv);
                            c += yv * xv;
                        }
                        if (tail) {
                            ET_TAIL_LOAD_(xv, xg + i0, n - i0);
                            ET_TAIL_LOAD_(yv, yg + i0, n - i0);
                            c += yv * xv;
                        }
                    }
                    ET_LANES_ADD_(lane + r * lane_rs + t * ET_LANES, c, fresh);
                }
#else
        /* A scalar FPU.  Where it has VMLA, two rows and a tap at a time in assembly; elsewhere a
           whole tile of 4 rows by 4 or 2 taps goes a lane at a time, its sums with that lane (row r's
           with tap t in p<r><t>) in registers, so that each value loaded serves two or four
           products, the tail's value of the lane last.  Either writes its sums to `lane` itself.
           Other tiles keep a row and tap's eight lanes in registers, and leave the tail to
           et_dot_tail_f32_, which adds part to `lane`.  Every lane adds its products in order. */
#if ET_VMLA
        if (rows % 2 == 0 && n >= ET_LANES) {  /* two rows and a tap at a time, their lanes in registers */
            int whole = n - n % ET_LANES;
            ET_PATH_("dot_tile_vmla");
            for (r = 0; r < rows; r += 2)
                for (t = 0; t < taps; ++t) {
                    float c[2 * ET_LANES], *d = lane + r * lane_rs + t * ET_LANES;
                    const float *y0 = y + r * y_rs, *y1 = y0 + y_rs, *xt0 = x + xt[t];
                    for (g = g0; g + 1 < g1; ++g)
                        et_dot2_vmla_(whole / ET_LANES, y0 + (size_t)g * y_ss, y1 + (size_t)g * y_ss,
                                      xt0 + (size_t)g * x_ss, g == g0 ? et_zeros_ : c, c);
                    /* a tail comes with one segment only */
                    et_dot2_last_vmla_(whole / ET_LANES, y0 + (size_t)g * y_ss, y1 + (size_t)g * y_ss,
                                       xt0 + (size_t)g * x_ss, g == g0 ? et_zeros_ : c, n - whole, fresh, d,
                                       d + lane_rs);
                }
            continue;  /* the lanes have the piece's sums */
        }
#else
        if (rows == ET_TILE_ROWS && (taps == 4 || taps == 2)) {
            int whole = n - n % ET_LANES, i, l;
/* The tile's lane loop, for taps listed by ET_DOT_EACH_TAP_(S, r): S(r, 0) S(r, 1) ... */
#define ET_SUM1_(r, t) float p##r##t = 0.0f;
#define ET_XG_(r, t) const float *x##t##g = x + xt[t] + (size_t)g * x_ss;
#define ET_XTAIL_(r, t) const float *x##t##g = x + xt[t];
#define ET_MLA1_(r, t) p##r##t = et_mla_(p##r##t, v, x##t##g[at_]);
#define ET_STORE1_(r, t)                                                        \
    {                                                                           \
        float *d = lane + r * lane_rs + t * ET_LANES + l;                       \
        *d = fresh ? p##r##t : *d + p##r##t;                                    \
    }
#define ET_SUMS_(r) ET_DOT_EACH_TAP_(ET_SUM1_, r)
#define ET_ADD_(r, I)                                                           \
    {                                                                           \
        float v = yg[r * y_rs + (I)];                                           \
        int at_ = (I);                                                          \
        ET_DOT_EACH_TAP_(ET_MLA1_, r)                                           \
    }
#define ET_ADD1_(r) ET_ADD_(r, i)
#define ET_ADD2_(r) ET_ADD_(r, i + ET_LANES)
#define ET_STORE_(r) ET_DOT_EACH_TAP_(ET_STORE1_, r)
#define ET_LANE_TILE_                                                                        \
    for (l = 0; l < ET_LANES; ++l) {                                                         \
        ET_EACH4_(ET_SUMS_)                                                                  \
        for (g = g0; g < g1; ++g) {                                                          \
            const float *yg = y + (size_t)g * y_ss;                                          \
            ET_DOT_EACH_TAP_(ET_XG_, 0)                                                      \
            for (i = l; i + ET_LANES < whole; i += 2 * ET_LANES) { /* two values a pass */   \
                ET_EACH4_(ET_ADD1_)                                                          \
                ET_EACH4_(ET_ADD2_)                                                          \
            }                                                                                \
            if (i < whole) {                                                                 \
                ET_EACH4_(ET_ADD1_)                                                          \
            }                                                                                \
        }                                                                                    \
        if (whole + l < n) { /* the lane's value in the tail (then there is one segment) */  \
            const float *yg = y;                                                             \
            ET_DOT_EACH_TAP_(ET_XTAIL_, 0)                                                   \
            i = whole + l;                                                                   \
            ET_EACH4_(ET_ADD1_)                                                              \
        }                                                                                    \
        ET_EACH4_(ET_STORE_)                                                                 \
    }
            if (taps == 4) {
#define ET_DOT_EACH_TAP_(S, r) S(r, 0) S(r, 1) S(r, 2) S(r, 3)
                ET_PATH_("dot_tile_scalar_4x4");
                ET_LANE_TILE_
#undef ET_DOT_EACH_TAP_
            } else {
#define ET_DOT_EACH_TAP_(S, r) S(r, 0) S(r, 1)
                ET_PATH_("dot_tile_scalar_4x2");
                ET_LANE_TILE_
#undef ET_DOT_EACH_TAP_
            }
#undef ET_SUM1_
#undef ET_XG_
#undef ET_XTAIL_
#undef ET_MLA1_
#undef ET_STORE1_
#undef ET_SUMS_
#undef ET_ADD_
#undef ET_ADD1_
#undef ET_ADD2_
#undef ET_STORE_
#undef ET_LANE_TILE_
            continue;  /* the lanes have the piece's sums */
        }
#endif
        for (r = 0; r < rows; ++r)
            for (t = 0; t < taps; ++t) {
                float *p = part + (r * taps + t) * ET_LANES;
#define ET_SUMS_(l) float p##l = 0.0f;
#define ET_ADD_(l) p##l = et_mla_(p##l, a[l], b[l]);
#define ET_STORE_(l) p[l] = p##l;
                ET_EACH8_(ET_SUMS_)
                ET_PATH_("dot_tile_scalar");
                for (g = g0; g < g1; ++g) {
                    const float *a = y + r * y_rs + (size_t)g * y_ss, *b = x + xt[t] + (size_t)g * x_ss;
                    for (i0 = 0; i0 + ET_LANES <= n; i0 += ET_LANES, a += ET_LANES, b += ET_LANES) {
                        ET_EACH8_(ET_ADD_)
                    }
                }
                ET_EACH8_(ET_STORE_)
#undef ET_SUMS_
#undef ET_ADD_
#undef ET_STORE_
            }
        et_dot_tail_f32_(rows, taps, i0, n, fresh, part, y, y_rs, x, xt, lane, lane_rs);
#endif
    }
}

/* Blocks of a matrix product: ET_GEMM_DEPTH rows of B by ET_GEMM_COLS
 * columns stay in cache while every row tile of A reads them; a row
 * tile's ET_GEMM_DEPTH entries per row are packed for et_tile_f32_. */
#define ET_GEMM_COLS 256
#define ET_GEMM_DEPTH 64

/* Products with fewer columns than this, not a whole number of tiles wide
 * (a convolution over a small plane, the columns its positions), leave a
 * tile's vector lanes idle.  Where op(A) is stored transposed, its rows
 * run contiguously in memory, and tiles can run along them instead: their
 * rows are then output columns (four at a time), and a small buffer turns
 * each tile back.  Every output keeps its sum over k, in order. */
#define ET_GEMM_NARROW 64
#define ET_GEMM_NARROW_DEPTH 32  /* k per slice of the narrow product with A transposed */

/* y_r[j] += w_r * x[j] for j < n and four rows: each load of x serves
 * all four, and saying that nothing overlaps (restrict) lets compilers
 * vectorize over j; each y element still gets its own single product. */
static inline void et_axpy4_f32_(int n, float w0, float w1, float w2, float w3, const float *restrict x,
                                 float *restrict y0, float *restrict y1, float *restrict y2, float *restrict y3)
{
    int j;
    for (j = 0; j < n; ++j) {
        float xj = x[j];
        y0[j] = et_mla_(y0[j], w0, xj);
        y1[j] = et_mla_(y1[j], w1, xj);
        y2[j] = et_mla_(y2[j], w2, xj);
        y3[j] = et_mla_(y3[j], w3, xj);
    }
}

/* total[q] = et_dot_total_f32_ of lane vector c<q>, for eight at once: the
 * same additions in the same order, each step on whole vectors whose
 * lanes shuffles pair up first (lane l with l + 4, then 0 with 2 and 1
 * with 3, then the two halves). */
#define ET_DOT_TOTALS8_(c0, c1, c2, c3, c4, c5, c6, c7, total)                                                  \
    do {                                                                                                          \
        et_v8_ p0_ = ET_PICK_(c0, c1, 0, 1, 2, 3, 8, 9, 10, 11) + ET_PICK_(c0, c1, 4, 5, 6, 7, 12, 13, 14, 15);    \
        et_v8_ p1_ = ET_PICK_(c2, c3, 0, 1, 2, 3, 8, 9, 10, 11) + ET_PICK_(c2, c3, 4, 5, 6, 7, 12, 13, 14, 15);    \
        et_v8_ p2_ = ET_PICK_(c4, c5, 0, 1, 2, 3, 8, 9, 10, 11) + ET_PICK_(c4, c5, 4, 5, 6, 7, 12, 13, 14, 15);    \
        et_v8_ p3_ = ET_PICK_(c6, c7, 0, 1, 2, 3, 8, 9, 10, 11) + ET_PICK_(c6, c7, 4, 5, 6, 7, 12, 13, 14, 15);    \
        et_v8_ q0_ = ET_PICK_(p0_, p1_, 0, 1, 4, 5, 8, 9, 12, 13) + ET_PICK_(p0_, p1_, 2, 3, 6, 7, 10, 11, 14, 15); \
        et_v8_ q1_ = ET_PICK_(p2_, p3_, 0, 1, 4, 5, 8, 9, 12, 13) + ET_PICK_(p2_, p3_, 2, 3, 6, 7, 10, 11, 14, 15); \
        et_v8_ t_ = ET_PICK_(q0_, q1_, 0, 2, 4, 6, 8, 10, 12, 14) + ET_PICK_(q0_, q1_, 1, 3, 5, 7, 9, 11, 13, 15);  \
        memcpy(total, &t_, sizeof t_);                                                                            \
    } while (0)

/* total[q] = the dot product of y + y_off[q] and x + x_off[q] for q < 8,
 * one after the other: the kernels below on a scalar FPU. */
static inline void et_dots8_f32_(int K, const float *y, const size_t *y_off, const float *x, const size_t *x_off,
                                 float *total)
{
    int q;
    for (q = 0; q < 8; ++q)
        total[q] = et_dot_f32_(K, y + y_off[q], 1, x + x_off[q]);
}

/* total[2 r + t] = the dot product of y + r y_rs (r < 4) and x + t x_rs
 * (t < 2), K % ET_LANES == 0 values each, summed as et_dot_lanes_f32_ and
 * et_dot_total_f32_ sum it; with vectors, in registers throughout. */
static inline void et_dots_4x2_f32_(int K, const float *restrict y, size_t y_rs, const float *restrict x,
                                    size_t x_rs, float *total)
{
#if ET_VECTORS
    et_v8_ c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0}, c6 = {0}, c7 = {0};
    int i;
#define ET_LOAD_(r) memcpy(&v##r, y + r * y_rs + i, sizeof v##r);
#define ET_KEEP_(r) ET_IN_REGISTER_(v##r);
    for (i = 0; i < K; i += ET_LANES) {
        et_v8_ u0, u1, v0, v1, v2, v3;
        memcpy(&u0, x + i, sizeof u0);
        memcpy(&u1, x + x_rs + i, sizeof u1);
        ET_EACH4_(ET_LOAD_)
        ET_IN_REGISTER_(u0);
        ET_IN_REGISTER_(u1);
        ET_EACH4_(ET_KEEP_)
        c0 += v0 * u0;
        c1 += v0 * u1;
        c2 += v1 * u0;
        c3 += v1 * u1;
        c4 += v2 * u0;
        c5 += v2 * u1;
        c6 += v3 * u0;
        c7 += v3 * u1;
    }
#undef ET_LOAD_
#undef ET_KEEP_
    ET_DOT_TOTALS8_(c0, c1, c2, c3, c4, c5, c6, c7, total);
#else
    const size_t y_off[8] = {0, 0, y_rs, y_rs, 2 * y_rs, 2 * y_rs, 3 * y_rs, 3 * y_rs};
    const size_t x_off[8] = {0, x_rs, 0, x_rs, 0, x_rs, 0, x_rs};
    et_dots8_f32_(K, y, y_off, x, x_off, total);
#endif
}

/* The same for eight rows of y (r < 8) and one x: total[r]. */
static inline void et_dots_8x1_f32_(int K, const float *restrict y, size_t y_rs, const float *restrict x,
                                    float *total)
{
#if ET_VECTORS
    et_v8_ c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0}, c6 = {0}, c7 = {0};
    int i;
#define ET_LOAD_(r) memcpy(&v##r, y + r * y_rs + i, sizeof v##r);
#define ET_ADD_(r) c##r += v##r * u;
    for (i = 0; i < K; i += ET_LANES) {
        et_v8_ u, v0, v1, v2, v3, v4, v5, v6, v7;
        memcpy(&u, x + i, sizeof u);
        ET_EACH8_(ET_LOAD_)
        ET_IN_REGISTER_(u);
        ET_EACH8_(ET_ADD_)
    }
#undef ET_LOAD_
#undef ET_ADD_
    ET_DOT_TOTALS8_(c0, c1, c2, c3, c4, c5, c6, c7, total);
#else
    const size_t y_off[8] = {0, y_rs, 2 * y_rs, 3 * y_rs, 4 * y_rs, 5 * y_rs, 6 * y_rs, 7 * y_rs};
    const size_t x_off[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    et_dots8_f32_(K, y, y_off, x, x_off, total);
#endif
}

/* Y = A B^T for A of M rows and B of N rows, both of K contiguous values:
 * each output the dot product of et_dot_lanes_f32_, summed as
 * et_dot_total_f32_ sums it.  Tiles of eight outputs share their loads and,
 * with vectors, keep their sums in registers: four rows of A by two of B,
 * or with fewer rows of A (a batch of one) eight rows of B by one of A,
 * since a * b and b * a are the same float.  Outputs outside whole tiles
 * take a dot product each. */
static inline void et_gemm_dots_f32_(int M, int N, int K, const float *A, const float *B, float *Y)
{
    int i, j, tiled_rows = 0, tiled_cols = 0;  /* outputs (i < tiled_rows, j < tiled_cols) come from tiles */
    float total[8];
    if (K % ET_LANES == 0 && M >= ET_TILE_ROWS) {
        tiled_rows = M - M % ET_TILE_ROWS;
        tiled_cols = N - N % 2;
        ET_PATH_("dots_4x2");
        for (i = 0; i < tiled_rows; i += ET_TILE_ROWS)
            for (j = 0; j < tiled_cols; j += 2) {
                float *y = Y + (size_t)i * (size_t)N + (size_t)j;
                et_dots_4x2_f32_(K, A + (size_t)i * (size_t)K, (size_t)K, B + (size_t)j * (size_t)K, (size_t)K,
                                 total);
#define ET_STORE_(r) y[(size_t)r * (size_t)N] = total[2 * r]; y[(size_t)r * (size_t)N + 1] = total[2 * r + 1];
                ET_EACH4_(ET_STORE_)
#undef ET_STORE_
            }
    } else if (K % ET_LANES == 0) {
        tiled_rows = M;
        tiled_cols = N - N % 8;
        ET_PATH_("dots_8x1");
        for (i = 0; i < M; ++i)
            for (j = 0; j < tiled_cols; j += 8)
                et_dots_8x1_f32_(K, B + (size_t)j * (size_t)K, (size_t)K, A + (size_t)i * (size_t)K,
                                 Y + (size_t)i * (size_t)N + (size_t)j);
    }
    for (i = 0; i < M; ++i)
        for (j = i < tiled_rows ? tiled_cols : 0; j < N; ++j) {
            ET_PATH_("dots_one");
            Y[(size_t)i * (size_t)N + (size_t)j] =
                et_dot_f32_(K, A + (size_t)i * (size_t)K, 1, B + (size_t)j * (size_t)K);
        }
}

/* Y (cols x rows) = X (rows x cols) transposed, in blocks of 8 x 8 so that
 * both sides are read and written a cache line at a time. */
static inline void et_transpose_f32_(int rows, int cols, const float *restrict X, float *restrict Y)
{
    int r0, c0, r, c;
    for (r0 = 0; r0 < rows; r0 += 8)
        for (c0 = 0; c0 < cols; c0 += 8)
            for (c = c0; c < c0 + 8 && c < cols; ++c)
                for (r = r0; r < r0 + 8 && r < rows; ++r)
                    Y[(size_t)c * (size_t)rows + (size_t)r] = X[(size_t)r * (size_t)cols + (size_t)c];
}

#if ET_VMLA
/* The loop below, eight values at a time where the FPU has VMLA, in assembly.  Each product is a
 * VMLA into a register that a VLDM of eight zeros has just cleared: VMLA rounds the product, then
 * the sum, so that is 0 + w * x[j] to the bit, in one instruction rather than a VMUL and a VADD.
 * Adding, a VLDM of y and eight VADDs (y first, as in C) follow; one VSTM of y.  From C, gcc spends
 * a load, a store and an address on every value.  blocks >= 1. */
#define ET_PRODUCT_(i, j) "vmla.f32 s" #j ", %[w], s" #i "\n\t"
#define ET_PRODUCTS_ "vldmia %[z], {s8-s15}\n\t" \
    ET_PRODUCT_(0, 8) ET_PRODUCT_(1, 9) ET_PRODUCT_(2, 10) ET_PRODUCT_(3, 11) \
    ET_PRODUCT_(4, 12) ET_PRODUCT_(5, 13) ET_PRODUCT_(6, 14) ET_PRODUCT_(7, 15)
#define ET_SUM_(i, j) "vadd.f32 s" #i ", s" #i ", s" #j "\n\t"
static inline void et_scaled8_vmla_(int blocks, float w, const float *x, float *y, int add)
{
    if (!add)
        __asm__ volatile(
            "1:\n\t"
            "vldmia %[x]!, {s0-s7}\n\t"
            ET_PRODUCTS_
            "vstmia %[y]!, {s8-s15}\n\t"
            "subs %[n], %[n], #1\n\t"
            "bne 1b"
            : [x] "+r"(x), [y] "+r"(y), [n] "+r"(blocks)
            : [w] "t"(w), [z] "r"(et_zeros_)
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14",
              "s15", "cc", "memory");
    else
        __asm__ volatile(
            "1:\n\t"
            "vldmia %[x]!, {s0-s7}\n\t"
            ET_PRODUCTS_
            "vldmia %[y], {s0-s7}\n\t"
            ET_SUM_(0, 8) ET_SUM_(1, 9) ET_SUM_(2, 10) ET_SUM_(3, 11)
            ET_SUM_(4, 12) ET_SUM_(5, 13) ET_SUM_(6, 14) ET_SUM_(7, 15)
            "vstmia %[y]!, {s0-s7}\n\t"
            "subs %[n], %[n], #1\n\t"
            "bne 1b"
            : [x] "+r"(x), [y] "+r"(y), [n] "+r"(blocks)
            : [w] "t"(w), [z] "r"(et_zeros_)
            : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14",
              "s15", "cc", "memory");
}
#undef ET_PRODUCT_
#undef ET_SUM_
#undef ET_PRODUCTS_
#endif

/* y[j] = 0 + w * x[j] for j < n: a sum over a single k, which starts
 * from 0 like every other (so -0 products give +0); with `add`, y[j] += that. */
static inline void et_scaled_row_f32_(int n, float w, const float *restrict x, float *restrict y, int add)
{
    int j = 0;
#if ET_VMLA
    if (n >= 8) {
        ET_PATH_("scaled_row_vmla");
        et_scaled8_vmla_(n / 8, w, x, y, add);
        j = n - n % 8;
    }
#endif
    if (add)  /* two loops, not one that tests add: gcc vectorizes these, and not that */
        for (; j < n; ++j)
            y[j] = y[j] + (0.0f + w * x[j]);
    else
        for (; j < n; ++j)
            y[j] = 0.0f + w * x[j];
}

/* et_accumulate_f32 for a gradient that is the outer product of A (m) and B (n), summed as the
 * Gemm that would have made it (K = 1 below): the gradient is never stored. */
static inline void et_outer_accumulate_f32(int m, const float *A, int n, const float *B, float *Acc, int reset)
{
    int i;
    for (i = 0; i < m; ++i)
        et_scaled_row_f32_(n, A[i], B, Acc + (size_t)i * (size_t)n, !reset);
}

/* Y = op(A) B in tiles (et_tiles_f32_), ET_GEMM_COLS columns and ET_GEMM_DEPTH rows of B at a
 * time: element (i, k) of op(A) is A[i * a_rs + k * a_ks], row k of B starts at B + k * b_rs and row
 * i of Y at Y + i * y_rs.  Each output sums over k in order, from 0 (K = 0 makes zeros). */
static inline void et_gemm_tiles_f32_(int M, int N, int K, const float *A, size_t a_rs, size_t a_ks,
                                      const float *B, size_t b_rs, float *Y, size_t y_rs)
{
    size_t at[ET_GEMM_DEPTH], bt[ET_GEMM_DEPTH];
    int i, j0, k, k0, n, rows, depth;
    ET_PATH_("gemm_tiles");
    for (j0 = 0; j0 < N; j0 += ET_GEMM_COLS) {
        n = N - j0 < ET_GEMM_COLS ? N - j0 : ET_GEMM_COLS;
        for (i = 0; i < M; i += ET_TILE_ROWS) {
            rows = M - i < ET_TILE_ROWS ? M - i : ET_TILE_ROWS;
            k0 = 0;
            do {  /* once at least: K = 0 makes zeros */
                depth = K - k0 < ET_GEMM_DEPTH ? K - k0 : ET_GEMM_DEPTH;
                for (k = 0; k < depth; ++k) {
                    at[k] = (size_t)(k0 + k) * a_ks;
                    bt[k] = (size_t)(k0 + k) * b_rs;
                }
                et_tiles_f32_(rows, n, depth, A + (size_t)i * a_rs, a_rs, at, B + (size_t)j0, bt,
                              Y + (size_t)i * y_rs + (size_t)j0, y_rs, k0 > 0);
                k0 += depth;
            } while (k0 < K);
        }
    }
}

static inline void et_gemm_f32(int M, int N, int K, float alpha, const float *A, int trans_a,
                               const float *B, int trans_b, float beta, const float *C, int c_rs,
                               int c_cs, float *Y)
{
    /* Element (i,k) of op(A) is A[i*a_rs + k*a_ks]. */
    int a_rs = trans_a ? 1 : K, a_ks = trans_a ? M : 1;
    int i, j;
    if (K == 0)  /* every sum is empty, +0 (a weight gradient over no rows): no kernel's offsets to fill */
        for (i = 0; i < M; ++i)
            for (j = 0; j < N; ++j)
                Y[(size_t)i * (size_t)N + (size_t)j] = 0.0f;
    else if (trans_b && !trans_a)
        et_gemm_dots_f32_(M, N, K, A, B, Y);
    else if (trans_b) {
        /* Rows of B are contiguous in k: one dot product per output. */
        ET_PATH_("gemm_dots_a_transposed");
        for (i = 0; i < M; ++i)
            for (j = 0; j < N; ++j)
                Y[(size_t)i * (size_t)N + (size_t)j] =
                    et_dot_f32_(K, A + (size_t)i * (size_t)a_rs, a_ks, B + (size_t)j * (size_t)K);
    }
#if ET_VECTORS
    else if (trans_a && N < ET_GEMM_NARROW && N % ET_TILE_COLS && M >= 8 && K > 0) {
        /* Tile row r is output column j + r, read from B + j + r (k apart by N); tile column c is
         * output row i + c, read from A + i + c (k apart by M).  All N columns of 16 rows sum in
         * yt one slice of k at a time, so the slice's rows of A stay in cache across the tiles:
         * M floats apart, they share few cache sets when M is a power of two. */
        size_t at[ET_GEMM_NARROW_DEPTH], bt[ET_GEMM_NARROW_DEPTH];
        float yt[ET_GEMM_NARROW * ET_TILE_COLS];
        int c, k, k0, n, depth;
        ET_PATH_("gemm_narrow");
        for (k = 0; k < ET_GEMM_NARROW_DEPTH; ++k) {
            at[k] = (size_t)k * (size_t)N;
            bt[k] = (size_t)k * (size_t)M;
        }
        for (i = 0; i < M; i += ET_TILE_COLS) {
            n = M - i < ET_TILE_COLS ? M - i : ET_TILE_COLS;
            for (k0 = 0; k0 < K; k0 += depth) {
                depth = K - k0 < ET_GEMM_NARROW_DEPTH ? K - k0 : ET_GEMM_NARROW_DEPTH;
                for (j = 0; j < N; j += ET_TILE_ROWS)
                    et_tile_f32_(N - j < ET_TILE_ROWS ? N - j : ET_TILE_ROWS, n, depth,
                                 B + (size_t)k0 * (size_t)N + (size_t)j, 1, at, A + (size_t)k0 * (size_t)M + (size_t)i,
                                 bt, 8, yt + (size_t)j * ET_TILE_COLS, ET_TILE_COLS, k0 > 0);
            }
            for (j = 0; j < N; ++j)
                for (c = 0; c < n; ++c)
                    Y[(size_t)(i + c) * (size_t)N + (size_t)j] = yt[(size_t)j * ET_TILE_COLS + (size_t)c];
        }
    }
#endif
    else if (K == 1) {  /* an outer product (a weight gradient at batch 1): a row at a time, as the tiles sum it */
        ET_PATH_("gemm_outer");
        for (i = 0; i < M; ++i)
            et_scaled_row_f32_(N, A[(size_t)i * (size_t)a_rs], B, Y + (size_t)i * (size_t)N, 0);
    } else
        et_gemm_tiles_f32_(M, N, K, A, (size_t)a_rs, (size_t)a_ks, B, (size_t)N, Y, (size_t)N);
    if (alpha == 1.0f && !C)
        return;  /* multiplying by 1 changes no bits: save a pass over Y */
    for (i = 0; i < M; ++i) {
        float *y = Y + (size_t)i * (size_t)N;
        const float *c = C ? C + (ptrdiff_t)i * c_rs : NULL;
        if (!c)
            for (j = 0; j < N; ++j)
                y[j] = alpha * y[j];
        else if (c_cs == 1)  /* a row of C (a bias), a loop compilers vectorize */
            for (j = 0; j < N; ++j)
                y[j] = alpha * y[j] + beta * c[j];
        else
            for (j = 0; j < N; ++j)
                y[j] = alpha * y[j] + beta * c[(ptrdiff_t)j * c_cs];
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

/* ---- Reference ----
 * et_gemm_f32 (and so et_matmul_f32) as the obvious loops, one output at a
 * time, in the order of sums that every path above keeps: where op(B)'s
 * rows are contiguous (trans_b), a dot product in lanes (lane k %
 * ET_LANES takes the products of k in order, from 0; et_dot_total_f32_
 * adds the lanes up); otherwise the sum over k in order, from 0.  Then
 * alpha and beta, as et_gemm_f32 applies them.  Slow and plain: tests
 * check every fast path against it bit for bit. */
static inline void et_gemm_f32_ref(int M, int N, int K, float alpha, const float *A, int trans_a, const float *B,
                                   int trans_b, float beta, const float *C, int c_rs, int c_cs, float *Y)
{
    int i, j, k;
    for (i = 0; i < M; ++i)
        for (j = 0; j < N; ++j) {
            float lane[ET_LANES] = {0.0f}, sum = 0.0f, y;
            for (k = 0; k < K; ++k) {
                float a = trans_a ? A[(size_t)k * (size_t)M + (size_t)i] : A[(size_t)i * (size_t)K + (size_t)k];
                if (trans_b)
                    lane[k % ET_LANES] += a * B[(size_t)j * (size_t)K + (size_t)k];
                else
                    sum += a * B[(size_t)k * (size_t)N + (size_t)j];
            }
            y = trans_b ? et_dot_total_f32_(lane) : sum;
            if (alpha != 1.0f || C) {
                y = alpha * y;
                if (C)
                    y += beta * C[(ptrdiff_t)i * c_rs + (ptrdiff_t)j * c_cs];
            }
            Y[(size_t)i * (size_t)N + (size_t)j] = y;
        }
}

#endif /* ET_LINALG_H */
