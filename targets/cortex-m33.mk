# Cortex-M33 (Armv8-M mainline, the class of most new microcontrollers) with its single-precision
# FPU (FPv5, hard-float ABI), on QEMU's MPS2 AN505 board, running in the secure state it starts in.
ARCH := -mcpu=cortex-m33 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16
MACHINE := mps2-an505
MEMORY_MAP := $(TARGETS_DIR)mps2/an505.ld
include $(TARGETS_DIR)mps2/mps2.mk
