# Cortex-M55 (Armv8.1-M mainline) with its FPU, on QEMU's MPS3 AN547 board, running in the secure
# state it starts in. Without Helium's floating-point vectors (+nomve.fp): they flush subnormal
# inputs and results to zero (the architecture's standard FPSCR value, which QEMU follows), so gcc's
# vectorizer would make results differ from every other target's wherever a subnormal arises.
# Helium's integer vectors stay.
ARCH := -mcpu=cortex-m55+nomve.fp -mthumb -mfloat-abi=hard
MACHINE := mps3-an547
MEMORY_MAP := $(TARGETS_DIR)mps2/an547.ld
include $(TARGETS_DIR)mps2/mps2.mk
