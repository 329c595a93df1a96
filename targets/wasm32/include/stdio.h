/* wasm32 has no C library: printf for the harness (templates/harness.c.j2), in ../stdio.c, writes
 * through functions the JavaScript runner provides (run.mjs). It knows the conversions the harness
 * uses: d, u, x, s and g, with a zero flag, a width, a precision and the length l. */
#ifndef ET_WASM_STDIO_H
#define ET_WASM_STDIO_H

int printf(const char *format, ...);
int putchar(int c);
int puts(const char *s);

#endif
