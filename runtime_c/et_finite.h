/* edgetrain runtime: checks behind "a training step that is not finite changes nothing". */
#ifndef ET_FINITE_H
#define ET_FINITE_H

/* Whether Acc + G, the sum et_accumulate_f32 stores, is finite everywhere.  Gradients that are
 * finite one by one can still overflow their running sum; checking before any accumulator changes
 * lets train_step refuse such a step whole. */
static inline int et_sum_finite_f32(int n, const float *G, const float *Acc)
{
    int i;
    for (i = 0; i < n; ++i)
        if (!et_is_finite_f32(Acc[i] + G[i]))
            return 0;
    return 1;
}

/* A status for the fused update: a parameter is updated only from a finite gradient. */
static inline int et_check_finite_f32(int n, const float *X)
{
    return et_all_finite_f32(n, X) ? ET_OK : ET_NON_FINITE;
}

#endif /* ET_FINITE_H */
