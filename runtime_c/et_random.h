/* edgetrain runtime: ONNX's random ops in training graphs (RandomUniform,
 * RandomNormal and their *Like forms, Bernoulli).
 *
 * Element i of a node's stream draws the bits et_dropout_f32 draws: a pure
 * function of (seed, counter, i), where the seed tells the node apart and
 * the counter is the trainer's count of training steps.  So every target,
 * a resumed run and the Python reference (compiler/ops/random.py) draw the
 * same values without generator state, and each step draws new ones. */
#ifndef ET_RANDOM_H
#define ET_RANDOM_H

#ifndef ET_COMMON_H
#include "et_common.h"
#endif
#ifndef ET_MATH_H
#include "et_math.h"
#endif

static inline uint32_t et_random_bits_(uint32_t seed, uint32_t counter, uint32_t i)
{
    return et_hash_u32(seed ^ et_hash_u32(counter ^ et_hash_u32(i)));
}

/* The top 24 bits: a float in [0, 1) on the grid of 2^-24, exactly. */
static inline float et_unit_f32_(uint32_t h)
{
    return (float)(h >> 8) * (1.0f / 16777216.0f);
}

/* Rejections a normal draw may take: each try fails with probability
 * 1 - pi/4, so all of them fail with probability below 1e-21. */
#define ET_POLAR_TRIES 32

/* A standard normal value from an element's bits, by Marsaglia's polar
 * method: (v1, v2) uniform in the unit disc gives v1 sqrt(-2 ln s / s) with
 * s = v1^2 + v2^2, exactly normal, with log and sqrt alone (no sin/cos).
 * Try j draws its pair from the element's bits hashed with 2j+1 and 2j+2,
 * so rejection needs no state and the result stays a function of
 * (seed, counter, i).  2u - 1 is exact, and the smallest nonzero s is
 * 2^-46, a normal float whose log et_logf takes. */
static inline float et_normal_f32_(uint32_t h)
{
    uint32_t j;
    for (j = 1u; j < 2u * ET_POLAR_TRIES; j += 2u) {
        float v1 = 2.0f * et_unit_f32_(et_hash_u32(h ^ et_hash_u32(j))) - 1.0f;
        float v2 = 2.0f * et_unit_f32_(et_hash_u32(h ^ et_hash_u32(j + 1u))) - 1.0f;
        float s = v1 * v1 + v2 * v2;
        if (s < 1.0f && s > 0.0f)
            return v1 * sqrtf(-2.0f * et_logf(s) / s);
    }
    return 0.0f; /* never reached in practice; the mean keeps it harmless */
}

static inline void et_random_uniform_f32(int n, float low, float high, uint32_t seed, uint32_t counter, float *Y)
{
    int i;
    float span = high - low;
    for (i = 0; i < n; ++i)
        Y[i] = low + span * et_unit_f32_(et_random_bits_(seed, counter, (uint32_t)i));
}

static inline void et_random_normal_f32(int n, float mean, float scale, uint32_t seed, uint32_t counter, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = mean + scale * et_normal_f32_(et_random_bits_(seed, counter, (uint32_t)i));
}

/* Y[i] = 1 with probability P[i]: u < P[i] for u uniform on the 2^-24 grid
 * (P = 0 never, P = 1 always).  Reads P[i] before writing Y[i], so Y may
 * be P. */
static inline void et_bernoulli_f32(int n, uint32_t seed, uint32_t counter, const float *P, float *Y)
{
    int i;
    for (i = 0; i < n; ++i)
        Y[i] = et_unit_f32_(et_random_bits_(seed, counter, (uint32_t)i)) < P[i] ? 1.0f : 0.0f;
}

#endif /* ET_RANDOM_H */
