/* Instructions per training step on an MPS2 board, counted by QEMU: run with `-icount shift=0`,
 * every instruction advances the virtual clock by 1 ns, and the board's CMSDK timer 0, clocked at
 * 25 MHz, counts down once per 40 ns, i.e. per 40 instructions. One step first (the arena's first
 * use), then ET_STEPS steps between two timer reads. The only file of this firmware that uses stdio. */
#include <stdint.h>
#include <stdio.h>
#include "model/model.h"
#include "data.h"

#define TIMER0 ((volatile uint32_t *)0x40000000u) /* CTRL, VALUE, RELOAD (CMSDK APB timer) */
#define INSTRUCTIONS_PER_TICK 40u                 /* 1 ns per instruction, 25 MHz timer */

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
    uint32_t start, end;
    unsigned i;
    int st = model_init();
    if (st == ET_OK) st = step();
    TIMER0[2] = 0xFFFFFFFFu;
    TIMER0[1] = 0xFFFFFFFFu;
    TIMER0[0] = 1u;
    start = TIMER0[1];
    for (i = 0; st == ET_OK && i < ET_STEPS; i++) st = step();
    end = TIMER0[1];
    if (st != ET_OK) {
        printf("error: a training step returned status %d\n", st);
        return 1;
    }
    printf("instructions per step %llu\n", (unsigned long long)(start - end) * INSTRUCTIONS_PER_TICK / ET_STEPS);
    return 0;
}
