# WebAssembly (wasm32), run by Node.js: Debian's clang and wasm-ld with no C library and no
# Emscripten. wasm32/libc.c and wasm32/include give what the generated C takes from string.h and
# math.h, wasm32/stdio.c the harness's printf, which wasm32/run.mjs writes out.
# -Wno-unused-function: clang, unlike gcc, warns about the unused static inline runtime kernels
# pasted into model.c. -fvisibility=default with --export-dynamic exports the trainer's API;
# __heap_base tells edgetrain.js where the memory the C never uses begins. The stack goes first, so
# overflowing it traps instead of overwriting the trainer's data.
CC := clang
SIZE := llvm-size
NM := llvm-nm
ARCH := --target=wasm32 -mbulk-memory -fvisibility=default -Wno-unused-function -I$(TARGETS_DIR)wasm32/include
LDFLAGS := -nostdlib -Wl,--no-entry -Wl,--export-dynamic -Wl,--export=__heap_base -Wl,--stack-first \
           -Wl,--gc-sections
LDLIBS :=
BOARD_SOURCES := $(TARGETS_DIR)wasm32/libc.c $(TARGETS_DIR)wasm32/stdio.c
RUN := node $(TARGETS_DIR)wasm32/run.mjs
NEEDS := clang:clang wasm-ld:lld llvm-size:llvm node:nodejs
