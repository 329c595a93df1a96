/* A standalone program over one generated trainer (one float input of X_SIZE values, int32 class
 * labels of N_LABELS, one output of Y_SIZE, at the largest batch; sizes come as -D flags) that calls every function of
 * model.h the way firmware would, so valgrind's memcheck sees the whole C API outside Python.
 * Exits non-zero on any unexpected status. */
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

#define CHECK(call, want)                                                        \
    do {                                                                         \
        int st_ = (call);                                                        \
        if (st_ != (want)) {                                                     \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, st_); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

int main(void)
{
    static float x[X_SIZE], y[Y_SIZE];
    static int32_t labels[N_LABELS];
    float loss, lr;
    size_t n, size, written, i;
    uint32_t steps;
    uint8_t *ck, *again;
    float *params;

    CHECK(model_init(), ET_OK);
    for (i = 0; i < X_SIZE; i++) x[i] = (float)((i * 37u) % 11u) / 5.0f - 1.0f;
    for (i = 0; i < N_LABELS; i++) labels[i] = (int32_t)(i % 3u);
    for (i = 0; i < 3; i++) {
        CHECK(model_train_step(MODEL_MAX_BATCH, x, labels, &loss), ET_OK);
        CHECK(model_optimizer_step(), ET_OK);
        CHECK(model_lazy_reset_grad(), ET_OK);
    }
    CHECK(model_train_step(MODEL_MAX_BATCH, x, labels, &loss), ET_OK);
    CHECK(model_train_step(MODEL_MAX_BATCH, x, labels, &loss), ET_OK); /* accumulating */
    x[0] = 1.0f / 0.0f;
    CHECK(model_train_step(MODEL_MAX_BATCH, x, labels, &loss), ET_NON_FINITE);
    x[0] = 0.5f;
    CHECK(model_eval_step(MODEL_MAX_BATCH, x, labels, &loss), ET_OK);
    CHECK(model_infer(MODEL_MAX_BATCH, x, y), ET_OK);
    CHECK(model_train_step(MODEL_MAX_BATCH, NULL, labels, &loss), ET_BAD_ARGUMENT);
    CHECK(model_train_step(0, x, labels, &loss), ET_BAD_ARGUMENT);
    CHECK(model_train_step(MODEL_MAX_BATCH + 1, x, labels, &loss), ET_BAD_ARGUMENT);
    CHECK(model_infer(0, x, y), ET_BAD_ARGUMENT);

    CHECK(model_set_learning_rate(0.01f), ET_OK);
    CHECK(model_set_learning_rate(-1.0f), ET_BAD_ARGUMENT);
    CHECK(model_get_learning_rate(&lr), ET_OK);
    CHECK(model_optimizer_steps(&steps), ET_OK);

    CHECK(model_parameters_size(0, &n), ET_OK);
    params = malloc(n * sizeof *params);
    if (params == NULL) return 1;
    CHECK(model_copy_parameters_to_buffer(params, n, 0), ET_OK);
    CHECK(model_copy_buffer_to_parameters(params, n, 0), ET_OK);
    CHECK(model_copy_buffer_to_parameters(params, n - 1, 0), ET_BUFFER_TOO_SMALL);

    CHECK(model_checkpoint_size(1, &size), ET_OK);
    ck = malloc(size);
    again = malloc(size);
    if (ck == NULL || again == NULL) return 1;
    CHECK(model_save_checkpoint(ck, size, 1, &written), ET_OK);
    CHECK(model_save_checkpoint(ck, size - 1, 1, &written), ET_BUFFER_TOO_SMALL);
    CHECK(model_load_checkpoint(ck, size), ET_OK);
    for (i = 0; i < size; i += 7) {
        CHECK(model_load_checkpoint(ck, i), ET_CORRUPT_CHECKPOINT); /* every truncation */
    }
    ck[size / 2] ^= 1u;
    CHECK(model_load_checkpoint(ck, size), ET_CORRUPT_CHECKPOINT);
    ck[size / 2] ^= 1u;
    CHECK(model_save_checkpoint(again, size, 1, &written), ET_OK);
    for (i = 0; i < size; i++)
        if (ck[i] != again[i]) return 1;

    printf("valgrind driver: %zu-byte checkpoint, %zu parameters, loss %g\n", size, n, (double)loss);
    free(params);
    free(ck);
    free(again);
    return 0;
}
