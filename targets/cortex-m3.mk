# Cortex-M3, no FPU: every float operation is libgcc's soft-float, on QEMU's MPS2 AN385 board.
ARCH := -mcpu=cortex-m3 -mthumb -mfloat-abi=soft
MACHINE := mps2-an385
include $(TARGETS_DIR)mps2/mps2.mk
