# What the RISC-V targets share: Debian's riscv64-unknown-elf-gcc with picolibc (its multilib for
# ARCH's -march/-mabi), our startup code and memory map, output and exit status through picolibc's
# semihosting library, and QEMU's virt board.
CC := riscv64-unknown-elf-gcc
SIZE := riscv64-unknown-elf-size
NM := riscv64-unknown-elf-nm
# picolibc's specs in the compile flags too: they name its headers (and the size report compiles alone).
ARCH += --specs=picolibc.specs
LDFLAGS := --oslib=semihost -nostartfiles -T $(TARGETS_DIR)riscv-virt/riscv-virt.ld \
           -Wl,--gc-sections
LDLIBS := -lm
BOARD_SOURCES := $(TARGETS_DIR)riscv-virt/startup.c
# The board starts the program at the start of RAM (-bios none); startup.c's stdout is the emulator's.
# QEMU_FLAGS: more emulator options, e.g. `-icount shift=0` to count instructions (bench/instructions.py).
RUN := qemu-system-riscv32 -M virt -bios none -nographic -monitor none -serial none $(QEMU_FLAGS) \
       -semihosting-config enable=on,target=native -kernel
NEEDS := riscv64-unknown-elf-gcc:gcc-riscv64-unknown-elf \
         /usr/lib/picolibc/riscv64-unknown-elf/picolibc.specs:picolibc-riscv64-unknown-elf \
         qemu-system-riscv32:qemu-system-misc
