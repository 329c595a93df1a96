/* wasm32 has no C library; the harness includes stdlib.h for what only its flash part uses, which
 * this target does not offer (no file system). */
#ifndef ET_WASM_STDLIB_H
#define ET_WASM_STDLIB_H
#include <stddef.h>
#endif
