/* edgetrain runtime: float transcendental functions.
 *
 * libm's expf/logf/tanhf differ between glibc, newlib and vendor libraries,
 * which would make training runs differ bit for bit between host and
 * device.  These versions use only IEEE single-precision +,-,*,/ and
 * sqrtf (correctly rounded everywhere), so they give the same bits on every
 * conforming target.  Checked against a float64 reference on all 2^32
 * inputs: et_expf, et_logf and et_tanhf are never more than 1 ulp from the
 * correctly rounded result (at most 0.99, 0.83 and 1.33 ulp from the exact
 * value). */
#ifndef ET_MATH_H
#define ET_MATH_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif

#define ET_INFINITY_BITS 0x7f800000u
#define ET_NAN_BITS 0x7fc00000u

/* Cody-Waite split of ln 2: LN2_HI has few enough significant bits that
 * k * LN2_HI is exact for every |k| <= 256 the reductions produce. */
#define ET_LN2_HI 0.693359375f
#define ET_LN2_LO (-2.12194440e-4f)
#define ET_LOG2E 1.44269504088896341f
/* 0x42b17217, the largest float whose exp is finite; below ET_EXP_MIN, exp
 * is under half the smallest subnormal. */
#define ET_EXP_MAX 88.72283172607421875f
#define ET_EXP_MIN (-103.972076416015625f)

/* The Cephes minimax for (exp(r) - 1 - r) / r^2 by Horner's rule, as an
 * expression, so that floats and vectors (below) share it. */
#define ET_EXPM1_POLY_(r)                                                                                    \
    (((((1.9875691500e-4f * (r) + 1.3981999507e-3f) * (r) + 8.3334519073e-3f) * (r) + 4.1665795894e-2f) * (r) + \
      1.6666665459e-1f) * (r) +                                                                                   \
     5.0000001201e-1f)

/* The shared core of et_expf and et_expm1f: x = k ln2 + r with |r| <= ln2/2
 * (Cody-Waite), and expm1(r) from the Cephes minimax for
 * (exp(r) - 1 - r) / r^2, with full relative precision. */
static inline float et_expm1_reduced_(float x, int *k_out)
{
    float fk, r, p;
    int k;
    fk = x * ET_LOG2E;
    k = (int)(fk + (fk < 0.0f ? -0.5f : 0.5f));
    fk = (float)k;
    r = (x - fk * ET_LN2_HI) - fk * ET_LN2_LO;
    p = ET_EXPM1_POLY_(r);
    *k_out = k;
    return p * (r * r) + r;
}

static inline float et_expf(float x)
{
    float p;
    int k;
    if (x != x)
        return x + x;
    if (x > ET_EXP_MAX)
        return et_f32_from_bits(ET_INFINITY_BITS);
    if (x < ET_EXP_MIN)
        return 0.0f;
    /* The 1 is added last so its rounding is the only one at full magnitude. */
    p = et_expm1_reduced_(x, &k) + 1.0f;
    /* 2^k itself may not be a normal float; scaling in two exact-then-
     * rounded steps keeps a single rounding into the subnormal range. */
    if (k > 127)
        return p * et_f32_from_bits((uint32_t)(127 + 127) << 23) * 2.0f;
    if (k < -126)
        return p * et_f32_from_bits((uint32_t)(k + 64 + 127) << 23) *
               et_f32_from_bits((uint32_t)(127 - 64) << 23);
    return p * et_f32_from_bits((uint32_t)(k + 127) << 23);
}

/* exp(x) - 1 without the cancellation near 0: expm1(x) = 2^k expm1(r) +
 * (2^k - 1), where the scaling and 2^k - 1 are exact for |k| <= 24, so only
 * the last addition rounds at full magnitude.  Checked against float64 expm1
 * on every float in [-100, 100]: at most 1.6 ulp from the exact value. */
static inline float et_expm1f(float x)
{
    float p, two_k;
    int k;
    if (x != x)
        return x + x;
    /* Past +-16 the subtraction cannot cancel (|e^x - 1| > 0.9999). */
    if (x < -16.0f || x > 16.0f)
        return et_expf(x) - 1.0f;
    p = et_expm1_reduced_(x, &k);
    if (k == 0)
        return p;
    two_k = et_f32_from_bits((uint32_t)(k + 127) << 23);
    return two_k * p + (two_k - 1.0f);
}

static inline float et_logf(float x)
{
    uint32_t ix = et_f32_bits(x);
    int e = 0;
    float m, f, z, p, y, fe;
    if (x != x)
        return x + x;
    if ((ix & 0x7fffffffu) == 0)
        return -et_f32_from_bits(ET_INFINITY_BITS);
    if (ix & 0x80000000u)
        return et_f32_from_bits(ET_NAN_BITS);
    if (ix == ET_INFINITY_BITS)
        return x;
    if (ix < 0x00800000u) {
        /* Subnormal: make it normal exactly, then undo in the exponent. */
        ix = et_f32_bits(x * 8388608.0f);
        e = -23;
    }
    e += (int)(ix >> 23) - 127;
    m = et_f32_from_bits((ix & 0x007fffffu) | 0x3f800000u);
    /* Centre the mantissa on 1 so log(m) is small and f = m - 1 is exact
     * (Sterbenz); that keeps inputs near 1 accurate to full precision. */
    if (m > 1.41421356237f) {
        m *= 0.5f;
        e += 1;
    }
    f = m - 1.0f;
    fe = (float)e;
    z = f * f;
    /* Cephes minimax for (log(1+f) - f + f^2/2) / f^3 on
     * sqrt(1/2)-1 <= f <= sqrt(2)-1. */
    p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    y = p * f * z;
    /* Small terms first, the exact large term e*LN2_HI last. */
    y += fe * ET_LN2_LO;
    y += -0.5f * z;
    return (f + y) + fe * ET_LN2_HI;
}

/* The Cephes minimax for (tanh(x) - x) / x^3 near 0, in s = x^2. */
#define ET_TANH_POLY_(s) \
    ((((-5.70498872745e-3f * (s) + 2.06390887954e-2f) * (s) - 5.37397155531e-2f) * (s) + 1.33314422036e-1f) * (s) - \
     3.33332819422e-1f)

static inline float et_tanhf(float x)
{
    float a = x < 0.0f ? -x : x;
    float r, s;
    if (x != x)
        return x + x;
    if (a > 9.0f) {
        /* tanh(9) is within 1 ulp of 1. */
        r = 1.0f;
    } else if (a >= 0.625f) {
        /* Result >= 0.55, so the subtraction from 1 cannot cancel. */
        r = 1.0f - 2.0f / (et_expf(a + a) + 1.0f);
    } else {
        /* 1 - 2/(e+1) would cancel near 0; an odd polynomial (Cephes
         * minimax) keeps full relative accuracy down to the subnormals. */
        s = a * a;
        r = a + a * (ET_TANH_POLY_(s) * s);
    }
    return x < 0.0f ? -r : (x > 0.0f ? r : x); /* keeps the sign of zero */
}

/* Split by sign so exp never overflows: for x < 0, exp(x) <= 1. */
static inline float et_sigmoidf(float x)
{
    float e;
    if (x >= 0.0f)
        return 1.0f / (1.0f + et_expf(-x));
    e = et_expf(x);
    return e / (1.0f + e);
}

#if ET_VECTORS
/* et_expf, et_sigmoidf and et_tanhf on eight values at a time, from x to y
 * (which may be the same).  Every lane takes each branch of the scalar
 * function and keeps the one its own value takes, so each lane gives the
 * scalar function's bits (checked over all 2^32 inputs, NaN payloads
 * aside).  gcc makes no such branch-free loop of the scalar functions
 * itself: it will not convert to integer after a branch that clamps. */
#define ET_V8_(c) ((et_v8_){(c), (c), (c), (c), (c), (c), (c), (c)})
/* Lanes of `yes` where `mask` (a comparison's) is set, else of `no`. */
#define ET_PICK_V8_(mask, yes, no) ((et_v8_)(((et_i8_)(yes) & (mask)) | ((et_i8_)(no) & ~(mask))))

static inline void et_expf_v8_(const float *x, float *y)
{
    et_v8_ v, c, fk, r, p, fine;
    et_i8_ k, big, tiny, e;
    memcpy(&v, x, sizeof v);
    c = ET_PICK_V8_(v >= ET_EXP_MIN, v, ET_V8_(ET_EXP_MIN)); /* NaN too: no conversion of it to int */
    c = ET_PICK_V8_(c <= ET_EXP_MAX, c, ET_V8_(ET_EXP_MAX));
    fk = c * ET_LOG2E; /* et_expm1_reduced_ */
    k = __builtin_convertvector(fk + ET_PICK_V8_(fk < 0.0f, ET_V8_(-0.5f), ET_V8_(0.5f)), et_i8_);
    fk = __builtin_convertvector(k, et_v8_);
    r = (c - fk * ET_LN2_HI) - fk * ET_LN2_LO;
    p = (ET_EXPM1_POLY_(r) * (r * r) + r) + 1.0f;
    /* et_expf's scaling by 2^k: one power of two, then * 1 (exact) where k is a normal exponent */
    big = k > 127;
    tiny = k < -126;
    e = (big & 127) | (~big & ((tiny & (k + 64)) | (~tiny & k)));
    fine = ET_PICK_V8_(big, ET_V8_(2.0f), ET_PICK_V8_(tiny, ET_V8_(et_f32_from_bits((uint32_t)(127 - 64) << 23)),
                                                     ET_V8_(1.0f)));
    p = p * (et_v8_)((e + 127) << 23) * fine;
    p = ET_PICK_V8_(v < ET_EXP_MIN, ET_V8_(0.0f), p);
    p = ET_PICK_V8_(v > ET_EXP_MAX, ET_V8_(et_f32_from_bits(ET_INFINITY_BITS)), p);
    p = ET_PICK_V8_(v != v, v + v, p);
    memcpy(y, &p, sizeof p);
}

static inline void et_sigmoidf_v8_(const float *x, float *y)
{
    et_v8_ v, e;
    memcpy(&v, x, sizeof v);
    e = ET_PICK_V8_(v >= 0.0f, -v, v);
    et_expf_v8_((const float *)&e, (float *)&e);
    e = ET_PICK_V8_(v >= 0.0f, 1.0f / (1.0f + e), e / (1.0f + e));
    memcpy(y, &e, sizeof e);
}

static inline void et_tanhf_v8_(const float *x, float *y)
{
    et_v8_ v, a, e, s, r;
    memcpy(&v, x, sizeof v);
    a = ET_PICK_V8_(v < 0.0f, -v, v);
    e = ET_PICK_V8_(a <= 9.0f, a + a, ET_V8_(18.0f));
    et_expf_v8_((const float *)&e, (float *)&e);
    s = a * a;
    r = ET_PICK_V8_(a >= 0.625f, 1.0f - 2.0f / (e + 1.0f), a + a * (ET_TANH_POLY_(s) * s));
    r = ET_PICK_V8_(a > 9.0f, ET_V8_(1.0f), r);
    r = ET_PICK_V8_(v < 0.0f, -r, ET_PICK_V8_(v > 0.0f, r, v));
    r = ET_PICK_V8_(v != v, v + v, r);
    memcpy(y, &r, sizeof r);
}
#endif

/* log(1 + exp(-|x|)), the part of softplus that stable BCE adds.  e is in
 * (0, 1]; u = 1 + e loses e's low bits, and log(u) * e / (u - 1) puts them
 * back (Goldberg's log1p trick), which keeps full relative accuracy for
 * large |x| where the result is tiny. */
static inline float et_softplus_neg_abs(float x)
{
    float e, u;
    if (x != x)
        return x + x;
    e = et_expf(x < 0.0f ? x : -x);
    u = 1.0f + e;
    if (u == 1.0f)
        return e;
    return et_logf(u) * (e / (u - 1.0f));
}

/* x^p for a p fixed at compile time.  Integer powers use repeated
 * multiplication so x^2 is exactly x*x (as PyTorch and ONNX Runtime
 * compute it) and negative x works; other powers go through exp/log. */
static inline float et_powf_const(float x, float p)
{
    float ap = p < 0.0f ? -p : p;
    if (ap <= 64.0f && (float)(int)ap == ap) {
        int n = (int)ap;
        float r = 1.0f, b = x;
        while (n > 0) {
            if (n & 1)
                r *= b;
            n >>= 1;
            if (n > 0)
                b *= b;
        }
        return p < 0.0f ? 1.0f / r : r;
    }
    if (p == 0.5f)
        return sqrtf(x);
    if (x != x || p != p)
        return x + p;
    if (x == -et_f32_from_bits(ET_INFINITY_BITS))
        return p > 0.0f ? -x : 0.0f; /* IEEE pow(-inf, non-integer) */
    if (x < 0.0f)
        return et_f32_from_bits(ET_NAN_BITS);
    if (x == 0.0f)
        return p > 0.0f ? 0.0f : et_f32_from_bits(ET_INFINITY_BITS);
    return et_expf(p * et_logf(x));
}


/* fmod(a, b) = a - n*b for n = trunc(a/b), which a float holds exactly, so
 * long division by b's doublings gives it with no C library: each
 * subtraction is exact, since s <= r < 2s (Sterbenz).  The sign is a's;
 * NaN for an infinite a or a zero b, a itself for an infinite b. */
static inline float et_fmodf(float a, float b)
{
    float r = a < 0.0f ? -a : a, m = b < 0.0f ? -b : b, s;
    if (r != r || m != m || r == et_f32_from_bits(ET_INFINITY_BITS) || m == 0.0f)
        return et_f32_from_bits(ET_NAN_BITS);
    if (r < m)
        return a;
    for (s = m; s <= r - s;)
        s *= 2.0f;
    for (;;) {
        if (r >= s)
            r -= s;
        if (s == m)
            break;
        s *= 0.5f;
    }
    return a < 0.0f ? -r : r;
}

/* Argument reduction for et_sinf and et_cosf, for every finite float
 * |x| > pi/4 (ix: its bits without the sign).  Returns the quadrant
 * q = round(|x| 2/pi) mod 4 and sets *hi + *lo to |x| - q pi/2, within
 * about 2^-64 pi/2 however large x is, so that results near the zeros of
 * sin and cos keep full relative precision.  Exact integer arithmetic
 * multiplies x's mantissa by a 128-bit window of the bits of 2/pi: the
 * bits before the window only add multiples of 4 to |x| 2/pi, the bits
 * after it less than 2^-89. */
static inline int et_reduce_pio2_(uint32_t ix, float *hi, float *lo)
{
    /* 2/pi to 224 bits, after 4 zero bytes that the window may start in. */
    static const uint8_t two_over_pi[32] = {
        0x00, 0x00, 0x00, 0x00, 0xa2, 0xf9, 0x83, 0x6e, 0x4e, 0x44, 0x15, 0x29, 0xfc, 0x27, 0x57, 0xd1,
        0xf5, 0x34, 0xdd, 0xc0, 0xdb, 0x62, 0x95, 0x99, 0x3c, 0x43, 0x90, 0x41, 0xfe, 0x51, 0x63, 0xab};
    int e = (int)(ix >> 23) - 126, k, q, neg = 0, z = 0;
    /* |x| = m 2^(8j - 24) with j = e / 8: taking the window from byte j puts
     * the binary point of m * window at bit 120, whatever x. */
    uint32_t m = ((ix & 0x007fffffu) | 0x00800000u) << (e & 7), word[4], a, b, a1, a0;
    const uint8_t *w = two_over_pi + (e >> 3);
    uint64_t t = 0, frac;
    float s0, s1, scale;
    for (k = 3; k >= 0; --k) {
        const uint8_t *v = w + 4 * k;
        t += (uint64_t)m * ((uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8 | v[3]);
        word[k] = (uint32_t)t;  /* bits 32 (3 - k) to 32 (3 - k) + 31 of the product */
        t >>= 32;
    }
    /* Bits 120-121 are the quadrant, bits 56-119 the fraction. */
    q = (int)(word[0] >> 24);
    frac = (uint64_t)(word[0] & 0x00ffffffu) << 40 | (uint64_t)word[1] << 8 | word[2] >> 24;
    if (frac >> 63) {  /* more than half a quadrant: the next one, and r < 0 */
        q += 1;
        neg = 1;
        frac = (uint64_t)0 - frac;
    }
    *hi = *lo = 0.0f;
    if (frac == 0)
        return q & 3;
    while (!(frac >> 63)) {
        frac <<= 1;
        ++z;
    }
    /* |r| = (a + b 2^-24) 2^-(24 + z) pi/2 with a, b the fraction's next
     * 24-bit pieces.  With a in 12-bit halves and pi/2 = P1 + P2 + P3, P1
     * and P2 of 12 bits, the products that carry the result are exact and
     * the only rounding of consequence is hi's. */
    a = (uint32_t)(frac >> 40);
    b = (uint32_t)(frac >> 16) & 0x00ffffffu;
    a1 = a >> 12;
    a0 = a & 0xfffu;
    s0 = (float)a1 * 4096.0f * 1.57080078125f;
    s1 = ((float)a1 * 4096.0f * -4.45358455181121826172e-6f + (float)a0 * 1.57080078125f) +
         ((float)a0 * -4.45358455181121826172e-6f + (float)a * -8.70551575271605315720e-10f +
          (float)b * 5.9604644775390625e-8f * 1.57079637050628662f);
    scale = et_f32_from_bits((uint32_t)(127 - 24 - z) << 23);
    *hi = s0 + s1;
    *lo = (s1 - (*hi - s0)) * scale;  /* exact: |s1| < |s0| */
    *hi *= scale;
    if (neg) {
        *hi = -*hi;
        *lo = -*lo;
    }
    return q & 3;
}

/* sin(r + c) for |r| <= pi/4 and |c| <= ulp(r): r + r^3 S(r^2) with S our
 * minimax fit for relative error (0.13 ulp with these float coefficients). */
static inline float et_sin_reduced_(float r, float c)
{
    float z = r * r, p;
    p = -1.95152868e-4f;
    p = p * z + 8.33216123e-3f;
    p = p * z - 1.66666552e-1f;
    return r + (r * z * p + c);
}

/* cos(r + c) = 1 - r^2/2 + r^4 C(r^2) - r c, C fit likewise (0.003 ulp).
 * Near |r| = pi/4, 1 - r^2/2 loses half an ulp to r^2's rounding and half
 * to its own: both are computed exactly (Dekker's split of r, and the error
 * of 1 - h) and added back with the small terms. */
static inline float et_cos_reduced_(float r, float c)
{
    float z = r * r, p, big = 4097.0f * r, rh = big - (big - r), rl = r - rh, zl, h, w;
    zl = ((rh * rh - z) + 2.0f * rh * rl) + rl * rl;
    h = 0.5f * z;
    w = 1.0f - h;
    p = 2.44331568e-5f;
    p = p * z - 1.38873165e-3f;
    p = p * z + 4.16666456e-2f;
    return w + ((((1.0f - w) - h) - 0.5f * zl) + (z * z * p - r * c));
}

/* sin(x) (cosine = 0) or cos(x) (cosine = 1, sin a quadrant on).  Checked
 * against float64 sin and cos on every float: within 0.98 ulp of the exact
 * value, so never more than 1 ulp from the correctly rounded float. */
static inline float et_sin_cos_(float x, int cosine)
{
    uint32_t ix = et_f32_bits(x) & 0x7fffffffu;
    float r = et_f32_from_bits(ix), c = 0.0f, y;
    int q = 0;
    if (ix >= ET_INFINITY_BITS)
        return x - x;  /* NaN for inf and NaN */
    if (ix > 0x3f490fdau)  /* the largest float below pi/4 */
        q = et_reduce_pio2_(ix, &r, &c);
    q += cosine;
    y = (q & 1) ? et_cos_reduced_(r, c) : et_sin_reduced_(r, c);
    if (q & 2)
        y = -y;
    return !cosine && et_f32_bits(x) >> 31 ? -y : y;  /* sin is odd, cos even */
}

static inline float et_sinf(float x)
{
    return et_sin_cos_(x, 0);
}

static inline float et_cosf(float x)
{
    return et_sin_cos_(x, 1);
}

/* tan = sin / cos, each within 1 ulp, so the quotient is within 3. */
static inline float et_tanf(float x)
{
    return et_sinf(x) / et_cosf(x);
}

/* atan(t) for |t| <= 2 - sqrt(3): its odd series to t^13 (the next term
 * is below 2^-28 of t). */
static inline float et_atan_series_(float t)
{
    float z = t * t;
    float p = -1.0f / 3.0f + z * (1.0f / 5.0f + z * (-1.0f / 7.0f + z * (1.0f / 9.0f + z * (-1.0f / 11.0f + z * (1.0f / 13.0f)))));
    return t + t * z * p;
}

/* atan: |x| > 1 folds to pi/2 - atan(1/|x|), then |x| > 2 - sqrt(3) to
 * pi/6 + atan((sqrt(3) |x| - 1) / (|x| + sqrt(3))); pi/2 and pi/6 are
 * added as a float and its remainder. */
static inline float et_atanf(float x)
{
    float a = x < 0.0f ? -x : x, r;
    int inverted = 0;
    if (x != x)
        return x + x;
    if (a > 1.0f) {
        a = 1.0f / a;
        inverted = 1;
    }
    if (a > 0.26794919f)
        r = 0.52359878f + (et_atan_series_((1.7320508f * a - 1.0f) / (a + 1.7320508f)) - 1.4630287e-08f);
    else
        r = et_atan_series_(a);
    if (inverted)
        r = 1.5707964f - (r + 4.3711388e-08f);
    return x < 0.0f ? -r : r;
}

/* asin(a) for 0 <= a <= 0.7: atan(a / sqrt(1 - a^2)), with 1 - a^2 as
 * (1 - a)(1 + a), the first factor exact from 1/2 on. */
static inline float et_asin_small_(float a)
{
    return et_atanf(a / sqrtf((1.0f - a) * (1.0f + a)));
}

/* asin: past 0.7, pi/2 - 2 asin(sqrt((1 - |x|) / 2)), whose argument is
 * exact up to its square root; NaN outside [-1, 1]. */
static inline float et_asinf(float x)
{
    float a = x < 0.0f ? -x : x, r;
    if (!(a <= 1.0f))
        return et_f32_from_bits(ET_NAN_BITS);
    if (a <= 0.7f)
        r = et_asin_small_(a);
    else
        r = 1.5707964f - (2.0f * et_asin_small_(sqrtf((1.0f - a) * 0.5f)) + 4.3711388e-08f);
    return x < 0.0f ? -r : r;
}

/* acos: pi/2 - asin(x) within 1/2 of 0, 2 asin(sqrt((1 - x) / 2)) above,
 * pi - 2 asin(sqrt((1 + x) / 2)) below. */
static inline float et_acosf(float x)
{
    if (!(x >= -1.0f && x <= 1.0f))
        return et_f32_from_bits(ET_NAN_BITS);
    if (x > 0.5f)
        return 2.0f * et_asin_small_(sqrtf((1.0f - x) * 0.5f));
    if (x < -0.5f)
        return 3.1415927f - (2.0f * et_asin_small_(sqrtf((1.0f + x) * 0.5f)) - 8.7422777e-08f);
    return 1.5707964f - (et_asinf(x) + 4.3711388e-08f);
}

/* sinh and cosh from e^|x|: below 1, sinh from expm1 without cancellation;
 * past 88, where e^|x| overflows before its half does, as (e^(|x|/2) / 2)
 * e^(|x|/2), e^-|x| being nothing there. */
static inline float et_sinhf(float x)
{
    float a = x < 0.0f ? -x : x, r, e;
    if (a < 1.0f) {
        e = et_expm1f(a);
        r = 0.5f * (e + e / (e + 1.0f));
    } else if (a > 88.0f) {
        e = et_expf(0.5f * a);
        r = (0.5f * e) * e;
    } else {
        e = et_expf(a);
        r = 0.5f * (e - 1.0f / e);
    }
    return x < 0.0f ? -r : r;
}

static inline float et_coshf(float x)
{
    float a = x < 0.0f ? -x : x, e;
    if (a > 88.0f) {
        e = et_expf(0.5f * a);
        return (0.5f * e) * e;
    }
    e = et_expf(a);
    return 0.5f * (e + 1.0f / e);
}

/* log(1 + u) without the rounding of 1 + u: w = 1 + u rounded, then
 * log(w) u / (w - 1), which the rounding cancels out of (Goldberg's
 * form, exact wherever w - 1 is). */
static inline float et_log1pf_(float u)
{
    float w = 1.0f + u;
    if (w == 1.0f)
        return u;
    return et_logf(w) * (u / (w - 1.0f));
}

/* asinh: log1p(a + a^2 / (1 + sqrt(1 + a^2))) for |x| below 2^12, log(|x|)
 * + log 2 above, where 1 + x^2 is x^2 in float. */
static inline float et_asinhf(float x)
{
    float a = x < 0.0f ? -x : x, r;
    if (a > 4096.0f)
        r = et_logf(a) + 0.69314718f;
    else
        r = et_log1pf_(a + a * a / (1.0f + sqrtf(1.0f + a * a)));
    return x < 0.0f ? -r : r;
}

/* acosh: log1p(t + sqrt(2t + t^2)) with t = x - 1 (exact below 2) up to
 * 2^12, log(x) + log 2 above; NaN below 1. */
static inline float et_acoshf(float x)
{
    float t = x - 1.0f;
    if (!(x >= 1.0f))
        return et_f32_from_bits(ET_NAN_BITS);
    if (x > 4096.0f)
        return et_logf(x) + 0.69314718f;
    return et_log1pf_(t + sqrtf(t * (t + 2.0f)));
}

/* atanh: log1p(2|x| / (1 - |x|)) / 2, 1 - |x| exact from 1/2 on; +-inf at
 * +-1, NaN beyond. */
static inline float et_atanhf(float x)
{
    float a = x < 0.0f ? -x : x, r;
    if (!(a <= 1.0f))
        return et_f32_from_bits(ET_NAN_BITS);
    r = a == 1.0f ? et_f32_from_bits(ET_INFINITY_BITS) : 0.5f * et_log1pf_(2.0f * a / (1.0f - a));
    return x < 0.0f ? -r : r;
}

#endif /* ET_MATH_H */
