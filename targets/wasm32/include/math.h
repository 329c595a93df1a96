/* wasm32 has no C library: what the generated C takes from math.h. The runtime computes exp, log
 * and tanh itself (runtime_c/et_math.h); the square root is WebAssembly's f32.sqrt, correctly
 * rounded as IEEE 754 requires, like every target's. */
#ifndef ET_WASM_MATH_H
#define ET_WASM_MATH_H

#define INFINITY (__builtin_inff())
#define HUGE_VALF (__builtin_huge_valf())
#define NAN (__builtin_nanf(""))
float sqrtf(float x);

#endif
