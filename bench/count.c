/* Instructions per training step, counted by QEMU under `-icount shift=0`, where every instruction
 * advances the virtual clock by 1 ns. On an MPS2 board (Cortex-M), its CMSDK timer 0 counts down
 * once per INSTRUCTIONS_PER_TICK ns: 40 at the AN385/AN386/AN500's 25 MHz, 50 at the AN505's
 * 20 MHz; on the MPS3 AN547, the core's SysTick. On RISC-V, the minstret counter: QEMU reads it
 * from the same clock under -icount, so it is the instruction count itself.
 * One step first (the arena's first use), then ET_STEPS steps between two readings. The only
 * file of this firmware that uses stdio. */
#include <stdint.h>
#include <stdio.h>
#include "model/model.h"
#include "data.h"

#if defined(__riscv)
/* rv32imac leaves Zicsr out of -march (see targets/riscv-virt/startup.c). */
#define COUNTER_READ(text, value) \
    __asm__ volatile(".option push\n\t.option arch, +zicsr\n\t" text "\n\t.option pop" : "=r"(value))

static void counter_start(void) {}

static uint64_t counter_read(void)
{
    uint32_t high, low, again;
    do {  /* the high half again, in case the low one wrapped between the reads */
        COUNTER_READ("csrr %0, minstreth", high);
        COUNTER_READ("csrr %0, minstret", low);
        COUNTER_READ("csrr %0, minstreth", again);
    } while (high != again);
    return (uint64_t)high << 32 | low;
}
#elif defined(BENCH_TIMER0)
/* data.h (bench/instructions.py) says where the board's timer is and how fast it runs. */
#define TIMER0 ((volatile uint32_t *)BENCH_TIMER0) /* CTRL, VALUE, RELOAD (CMSDK APB timer) */

static void counter_start(void)
{
    TIMER0[2] = 0xFFFFFFFFu;
    TIMER0[1] = 0xFFFFFFFFu;
    TIMER0[0] = 1u;
}

static uint64_t counter_read(void)
{
    return (uint64_t)(0xFFFFFFFFu - TIMER0[1]) * INSTRUCTIONS_PER_TICK;
}
#else
/* The core's SysTick where the board's timers are not CMSDK ones (the AN547's): 24 bits counting
 * down at the processor clock, INSTRUCTIONS_PER_4_TICKS instructions per four ticks (125 at the
 * AN547's 32 MHz). The counted steps must take fewer than 2^24 ticks. */
#define SYST ((volatile uint32_t *)0xE000E010u) /* CSR, RVR, CVR */

static void counter_start(void)
{
    SYST[1] = 0xFFFFFFu;
    SYST[2] = 0u;
    SYST[0] = 5u; /* enabled, the processor clock */
}

static uint64_t counter_read(void)
{
    /* Ticks since the start, when the value was 0: the first tick reloads it to 0xFFFFFF. */
    return (uint64_t)((0x1000000u - (SYST[2] & 0xFFFFFFu)) & 0xFFFFFFu) * INSTRUCTIONS_PER_4_TICKS / 4u;
}
#endif

static int step(void)
{
    float loss;
    int st = model_train_step(MODEL_MAX_BATCH, bench_x, bench_y, &loss);
    if (st == ET_OK) st = model_optimizer_step();
    if (st == ET_OK) st = model_lazy_reset_grad();
    return st;
}

int main(void)
{
    uint64_t start, end;
    unsigned i;
    int st = model_init();
    if (st == ET_OK) st = step();
    counter_start();
    start = counter_read();
    for (i = 0; st == ET_OK && i < ET_STEPS; i++) st = step();
    end = counter_read();
    if (st != ET_OK) {
        printf("error: a training step returned status %d\n", st);
        return 1;
    }
    printf("instructions per step %llu\n", (unsigned long long)((end - start) / ET_STEPS));
    return 0;
}
