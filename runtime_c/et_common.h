/* edgetrain runtime: shared definitions, byte-order helpers, CRC-32, hashing.
 *
 * Every runtime file is pasted into one generated C99 translation unit,
 * each after the files it uses, so everything here is static inline and
 * nothing warns when unused.  A file names what it uses as an #include
 * under that file's own guard: compiled from this directory the includes
 * bring it in; pasted in that order, the guard is already defined and the
 * generated file reads no other file.  The order is computed from these
 * #include lines (edgetrain.runtime_c.headers), nowhere written down.  Bit-identical results across targets rely on IEEE single
 * precision evaluation (FLT_EVAL_METHOD 0) and on no FMA contraction: ISO
 * C modes of GCC (-std=c99) already default to -ffp-contract=off, and GCC
 * rejects the standard FP_CONTRACT pragma under -Wall, so the build flags
 * carry that guarantee rather than this file. */
#ifndef ET_COMMON_H
#define ET_COMMON_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

#ifndef ET_STATUS_DEFINED
#define ET_STATUS_DEFINED
enum et_status {
    ET_OK = 0,
    ET_BAD_ARGUMENT = 1,
    ET_NON_FINITE = 2,
    ET_CORRUPT_CHECKPOINT = 3,
    ET_WRONG_MODEL = 4,
    ET_BUFFER_TOO_SMALL = 5,
    ET_NO_CHECKPOINT = 6,
    ET_FLASH_ERROR = 7
};
#endif

/* Fixed-size index arrays keep the kernels free of allocation; the
 * compiler rejects graphs with tensors of higher rank. */
#define ET_MAX_RANK 8

/* `static ET_NOINLINE` keeps out of line the kernels a step calls at most
 * nodes (finite checks, gradient sums and copies, ReLU, BatchNormalization):
 * gcc -O2 inlining a copy at each of hundreds of calls was a third of a big
 * model's build time, for no step time.  Kernels that take shapes, which gcc
 * specializes where it inlines them, and the helpers of kernels' loops stay
 * static inline.  unused keeps an uncalled kernel as quiet as an uncalled
 * static inline one (GCC refuses inline with noinline); other compilers inline. */
#if defined(__GNUC__)
#define ET_NOINLINE __attribute__((noinline, unused))
#else
#define ET_NOINLINE inline
#endif

/* A fast path's name as it starts: tests define ET_PATH_ to count which
 * paths ran (tests/c/test_kernel_references.py); elsewhere it is nothing. */
#ifndef ET_PATH_
#define ET_PATH_(name) ((void)0)
#endif

/* acc + a * b, the product rounded, then the sum: what C computes under -ffp-contract=off.  On
 * 32-bit ARM with a floating-point unit one VMLA.F32 does exactly that (it is not the fused VFMA),
 * where gcc, which forms no VMLA when contraction is off, spends a multiply and an add. */
#if defined(__GNUC__) && defined(__arm__) && defined(__ARM_FP) && (__ARM_FP & 4) && !defined(ET_NO_VMLA)
#define ET_VMLA 1
#else
#define ET_VMLA 0
#endif

static inline float et_mla_(float acc, float a, float b)
{
#if ET_VMLA
    __asm__("vmla.f32 %0, %1, %2" : "+t"(acc) : "t"(a), "t"(b));
    return acc;
#else
    return acc + a * b;
#endif
}

/* acc - a * b likewise: VMLS.F32. */
static inline float et_mls_(float acc, float a, float b)
{
#if ET_VMLA
    __asm__("vmls.f32 %0, %1, %2" : "+t"(acc) : "t"(a), "t"(b));
    return acc;
#else
    return acc - a * b;
#endif
}

/* Vectors.  Where GCC's vector extension maps onto IEEE SIMD units (x86
 * SSE/AVX, AArch64), register tiles keep their partial sums in vectors, and
 * elementwise functions run eight values at a time; elsewhere the same
 * arithmetic runs on scalars.  Each vector lane does exactly what its
 * scalar twin does (the same rounded operations in the same order), so both
 * forms give the same bits; ET_NO_VECTORS forces the
 * scalar form, which tests compare.  32-bit ARM NEON is left out: it
 * flushes subnormals to zero.  Vectors go through memcpy (no alignment or
 * aliasing assumptions) and never cross a function boundary (their
 * calling convention depends on -m flags). */
#if defined(__GNUC__) && (defined(__SSE2__) || defined(__aarch64__)) && !defined(ET_NO_VECTORS)
#define ET_VECTORS 1
typedef float et_v8_ __attribute__((vector_size(32)));
/* Keeps a loaded vector in a register for all its uses (an empty asm that
 * takes it there): otherwise gcc folds each use into a load of its own,
 * and a tile's loads, not its arithmetic, set its pace.  Values are
 * untouched.  Only where an AVX register holds the whole vector. */
#ifdef __AVX__
#define ET_IN_REGISTER_(v) __asm__("" : "+x"(v))
#else
#define ET_IN_REGISTER_(v) (void)0
#endif
/* Lanes i0..i7 of the sixteen of a then b, as one vector. */
typedef int et_i8_ __attribute__((vector_size(32)));
#ifdef __clang__
#define ET_PICK_(a, b, i0, i1, i2, i3, i4, i5, i6, i7) __builtin_shufflevector(a, b, i0, i1, i2, i3, i4, i5, i6, i7)
#else
#define ET_PICK_(a, b, i0, i1, i2, i3, i4, i5, i6, i7) __builtin_shuffle(a, b, (et_i8_){i0, i1, i2, i3, i4, i5, i6, i7})
#endif
#else
#define ET_VECTORS 0
#endif

/* Wide vectors: sixteen lanes, where AVX-512 holds them in one register.
 * Only tiles use them, whose outputs are independent sums: a lane does
 * what its scalar twin does, as on eight lanes. */
#if ET_VECTORS && defined(__AVX512F__)
#define ET_WIDE 1
typedef float et_v16_ __attribute__((vector_size(64)));
#define ET_IN_WIDE_REGISTER_(v) __asm__("" : "+v"(v))
#else
#define ET_WIDE 0
#endif

/* memcpy is the only type pun that is defined behaviour in C99. */
static inline uint32_t et_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float et_f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Checkpoints must be readable on any host, so bytes are assembled by
 * shifting instead of copying native integers. */
static inline void et_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v & 0xffu);
    p[1] = (uint8_t)(v >> 8);
}

static inline void et_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v & 0xffu);
    p[1] = (uint8_t)((v >> 8) & 0xffu);
    p[2] = (uint8_t)((v >> 16) & 0xffu);
    p[3] = (uint8_t)(v >> 24);
}

static inline void et_put_u64(uint8_t *p, uint64_t v)
{
    et_put_u32(p, (uint32_t)(v & 0xffffffffu));
    et_put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t et_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t et_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline uint64_t et_get_u64(const uint8_t *p)
{
    return (uint64_t)et_get_u32(p) | ((uint64_t)et_get_u32(p + 4) << 32);
}

static inline void et_put_f32(uint8_t *p, float v)
{
    et_put_u32(p, et_f32_bits(v));
}

static inline float et_get_f32(const uint8_t *p)
{
    return et_f32_from_bits(et_get_u32(p));
}

/* zlib's CRC-32 so checkpoints can be verified with standard tools; pass
 * the previous result as crc to continue a running checksum.  Bitwise
 * rather than table-driven to keep 1 KiB of table out of flash. */
static inline uint32_t et_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    size_t i;
    int k;
    crc = ~crc;
    for (i = 0; i < n; ++i) {
        crc ^= p[i];
        for (k = 0; k < 8; ++k)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* Decided on the bit pattern so it still works under -ffinite-math-only. */
static inline int et_is_finite_f32(float x)
{
    return (et_f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

/* Values et_all_finite_f32 checks between two early exits: a block with
 * no exit inside vectorizes, and every training step checks each gradient;
 * a long one pays for its exit test (a vector's reduction) rarely. */
#define ET_FINITE_BLOCK 256

static ET_NOINLINE int et_all_finite_f32(int n, const float *X)
{
    int i, j, blocks = n / ET_FINITE_BLOCK;
    for (i = 0; i < blocks; ++i) {
        uint32_t bad = 0;
        for (j = 0; j < ET_FINITE_BLOCK; ++j)
            bad |= ~et_f32_bits(X[i * ET_FINITE_BLOCK + j]) & 0x7f800000u ? 0u : 1u;
        if (bad)
            return 0;
    }
    for (j = blocks * ET_FINITE_BLOCK; j < n; ++j)
        if (!et_is_finite_f32(X[j]))
            return 0;
    return 1;
}

/* murmur3 fmix32: a cheap bijective mixer, so counter-based random streams
 * (dropout) are reproducible without keeping generator state. */
static inline uint32_t et_hash_u32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

#endif /* ET_COMMON_H */
