# 32-bit RISC-V microcontrollers with a single-precision FPU (RV32IMAFC, ilp32f hard-float ABI),
# on QEMU's virt board.
ARCH := -march=rv32imafc -mabi=ilp32f
include $(TARGETS_DIR)riscv-virt/riscv-virt.mk
