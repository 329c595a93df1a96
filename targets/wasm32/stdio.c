/* printf for the harness on wasm32: text leaves through et_write and a double's %g through
 * et_write_g, both given by the JavaScript runner (run.mjs), which formats floats exactly as C's
 * printf does. Widths apply to d, u and x. The compiler turns some printf calls into putchar and
 * puts, so those are here too. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Hidden: the module exports the trainer's API, not these. */
#define ET_LIBC __attribute__((visibility("hidden")))

__attribute__((import_module("env"), import_name("et_write"))) void et_write(const char *bytes, size_t n);
__attribute__((import_module("env"), import_name("et_write_g"))) void et_write_g(double value, int precision);

static void et_write_number(unsigned long value, unsigned base, int width, char pad, int negative)
{
    char text[32];
    size_t at = sizeof text;
    do {
        text[--at] = "0123456789abcdef"[value % base];
        value /= base;
    } while (value != 0u);
    if (negative && pad == ' ') text[--at] = '-';
    while ((int)(sizeof text - at) < width - (negative && pad == '0') && at > 1u) text[--at] = pad;
    if (negative && pad == '0') text[--at] = '-';
    et_write(text + at, sizeof text - at);
}

/* One conversion, `p` just after its %; returns where the conversion's letter is. */
static const char *et_convert(const char *p, va_list *args)
{
    char pad = ' ';
    int width = 0, precision = -1, is_long = 0;
    if (*p == '0') pad = *p++;
    while (*p >= '0' && *p <= '9') width = 10 * width + (*p++ - '0');
    if (*p == '.')
        for (precision = 0, p++; *p >= '0' && *p <= '9'; p++) precision = 10 * precision + (*p - '0');
    if (*p == 'l') is_long = *p++ == 'l';
    switch (*p) {
    case 'd': {
        long v = is_long ? va_arg(*args, long) : va_arg(*args, int);
        et_write_number(v < 0 ? 0ul - (unsigned long)v : (unsigned long)v, 10u, width, pad, v < 0);
        break;
    }
    case 'u':
    case 'x':
        et_write_number(is_long ? va_arg(*args, unsigned long) : va_arg(*args, unsigned), *p == 'x' ? 16u : 10u,
                        width, pad, 0);
        break;
    case 's': {
        const char *s = va_arg(*args, const char *);
        size_t n = 0;
        while (s[n] != '\0') n++;
        et_write(s, n);
        break;
    }
    case 'g':
        et_write_g(va_arg(*args, double), precision < 0 ? 6 : precision);
        break;
    case '\0':  /* a format ending in % */
        return p - 1;
    default:  /* %% and conversions this printf does not know, as written */
        et_write(p, 1u);
    }
    return p;
}

ET_LIBC int printf(const char *format, ...)
{
    va_list args;
    const char *p, *text = format;
    va_start(args, format);
    for (p = format; *p != '\0'; p++) {
        if (*p != '%') continue;
        et_write(text, (size_t)(p - text));
        p = et_convert(p + 1, &args);
        text = p + 1;
    }
    et_write(text, (size_t)(p - text));
    va_end(args);
    return 0;
}

ET_LIBC int putchar(int c)
{
    char byte = (char)c;
    et_write(&byte, 1u);
    return c;
}

ET_LIBC int puts(const char *s)
{
    printf("%s\n", s);
    return 0;
}
