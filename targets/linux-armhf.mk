# 32-bit ARM Linux boards (Debian armhf: ARMv7-A, VFPv3-D16, hard-float ABI), run by qemu-arm.
# Static linking: the emulator then needs no ARM root file system.
CC := arm-linux-gnueabihf-gcc
SIZE := arm-linux-gnueabihf-size
NM := arm-linux-gnueabihf-nm
ARCH :=
LDFLAGS := -static
LDLIBS := -lm
BOARD_SOURCES :=
RUN := qemu-arm
NEEDS := arm-linux-gnueabihf-gcc:gcc-arm-linux-gnueabihf \
         /usr/arm-linux-gnueabihf/lib/libc.a:libc6-dev-armhf-cross qemu-arm:qemu-user
