/* What the generated C needs from a C library, for wasm32 without one. With bulk memory
 * (-mbulk-memory) the compiler turns the memory builtins into memory.copy and memory.fill
 * instructions, never into calls back to these functions. Hidden: the module exports the trainer's
 * API, not these. */
#include <math.h>
#include <string.h>

#define ET_LIBC __attribute__((visibility("hidden")))

ET_LIBC void *memcpy(void *restrict to, const void *restrict from, size_t n)
{
    __builtin_memcpy(to, from, n);
    return to;
}

ET_LIBC void *memmove(void *to, const void *from, size_t n)
{
    __builtin_memmove(to, from, n);
    return to;
}

ET_LIBC void *memset(void *to, int byte, size_t n)
{
    __builtin_memset(to, byte, n);
    return to;
}

ET_LIBC int memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    size_t i;
    for (i = 0; i < n; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

ET_LIBC float sqrtf(float x)
{
    return __builtin_sqrtf(x);
}
