/* Reset and fault handling for the MPS2 boards: the vector table, copying initialized data to
 * RAM, clearing .bss, enabling the FPU where there is one, then main() and exit() through
 * newlib's semihosting (which ends QEMU with the program's status). */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* Arrays, not objects: the loops below walk from one linker symbol to the next. */
extern uint32_t __data_start__[], __data_end__[], __data_load__[], __bss_start__[], __bss_end__[], __stack_top__[];
extern void initialise_monitor_handles(void);
extern int main(void);

void Reset_Handler(void);
void Fault_Handler(void);
/* Linking with -nostartfiles drops crti/crtn; exit() still calls _fini. */
void _init(void);
void _fini(void);

void _init(void) {}
void _fini(void) {}

/* A fault ends the run with a status instead of hanging until the emulator's timeout. */
void Fault_Handler(void)
{
    _exit(70);
}

void Reset_Handler(void)
{
    const uint32_t *src = __data_load__;
    uint32_t *dst;
    for (dst = __data_start__; dst < __data_end__; dst++) *dst = *src++;
    for (dst = __bss_start__; dst < __bss_end__; dst++) *dst = 0u;
#if defined(__ARM_FP)
    /* CPACR: full access to coprocessors 10 and 11 (the FPU), before the first float instruction. */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    initialise_monitor_handles();
    exit(main());
}

/* The first word is the initial stack pointer, the others handlers (Armv7-M ARM, B1.5.3). */
union vector { void (*handler)(void); uint32_t *stack; };
__attribute__((section(".vectors"), used)) static const union vector vectors[16] = {
    { .stack = __stack_top__ }, { Reset_Handler },
    { Fault_Handler }, { Fault_Handler }, { Fault_Handler }, { Fault_Handler }, { Fault_Handler },
};
