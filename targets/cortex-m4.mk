# Cortex-M4F with its single-precision FPU (hard-float ABI), on QEMU's MPS2 AN386 board.
ARCH := -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16
MACHINE := mps2-an386
include $(TARGETS_DIR)mps2/mps2.mk
