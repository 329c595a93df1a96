# The machine you are on (x86-64 or aarch64): native gcc, and the program runs directly.
CC := gcc
SIZE := size
NM := nm
ARCH :=
LDFLAGS :=
LDLIBS := -lm
BOARD_SOURCES :=
RUN :=
# file-or-command:debian-package, for every tool the target needs
NEEDS := gcc:gcc /usr/include/stdio.h:libc6-dev size:binutils
