/* wasm32 has no C library: the memory functions the generated C and the harness call, defined in
 * ../libc.c. */
#ifndef ET_WASM_STRING_H
#define ET_WASM_STRING_H
#include <stddef.h>

void *memcpy(void *restrict to, const void *restrict from, size_t n);
void *memmove(void *to, const void *from, size_t n);
void *memset(void *to, int byte, size_t n);
int memcmp(const void *a, const void *b, size_t n);

#endif
