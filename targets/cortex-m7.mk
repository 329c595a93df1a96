# Cortex-M7 with its single-precision FPU (FPv5, hard-float ABI), the class of the STM32F746, on
# QEMU's MPS2 AN500 board. FPv5 has fused multiply-adds, which -ffp-contract=off keeps out.
ARCH := -mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16
MACHINE := mps2-an500
include $(TARGETS_DIR)mps2/mps2.mk
