# What the MPS2 boards share: arm-none-eabi-gcc with newlib, our startup code and memory map,
# output through semihosting (newlib's rdimon), and QEMU's board emulation.
CC := arm-none-eabi-gcc
SIZE := arm-none-eabi-size
NM := arm-none-eabi-nm
# MEMORY_MAP: the board's memory map (a linker script of MEMORY only), given before the sections.
MEMORY_MAP ?= $(TARGETS_DIR)mps2/an385.ld
LDFLAGS := --specs=rdimon.specs -nostartfiles -T $(MEMORY_MAP) -T $(TARGETS_DIR)mps2/mps2.ld -Wl,--gc-sections
LDLIBS := -lm
BOARD_SOURCES := $(TARGETS_DIR)mps2/startup.c
# QEMU_FLAGS: more emulator options, e.g. `-icount shift=0` to count instructions (bench/instructions.py).
RUN := qemu-system-arm -M $(MACHINE) -nographic -monitor none -serial none $(QEMU_FLAGS) \
       -semihosting-config enable=on,target=native -kernel
NEEDS := arm-none-eabi-gcc:gcc-arm-none-eabi \
         /usr/lib/arm-none-eabi/newlib/rdimon.specs:libnewlib-arm-none-eabi \
         qemu-system-arm:qemu-system-arm
