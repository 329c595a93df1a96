# 64-bit ARM Linux boards (Debian arm64: ARMv8-A, Raspberry Pi 3/4/5, Jetson), run by qemu-aarch64.
# The runtime's vector kernels (ET_VECTORS, runtime_c/et_linalg.h) run on NEON, as on the host:
# AArch64's Advanced SIMD is IEEE arithmetic (subnormals kept unless FPCR.FZ, which Linux leaves
# clear), and -ffp-contract=off keeps its multiplies and adds apart (no fmla).
# Static linking: the emulator then needs no ARM root file system.
CC := aarch64-linux-gnu-gcc
SIZE := aarch64-linux-gnu-size
NM := aarch64-linux-gnu-nm
ARCH :=
LDFLAGS := -static
LDLIBS := -lm
BOARD_SOURCES :=
RUN := qemu-aarch64
NEEDS := aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu \
         /usr/aarch64-linux-gnu/lib/libc.a:libc6-dev-arm64-cross qemu-aarch64:qemu-user
