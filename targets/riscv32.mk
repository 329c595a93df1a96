# 32-bit RISC-V microcontrollers without an FPU (RV32IMAC, ilp32 ABI): every float operation is
# libgcc's soft-float, on QEMU's virt board.
ARCH := -march=rv32imac -mabi=ilp32
include $(TARGETS_DIR)riscv-virt/riscv-virt.mk
