/* libFuzzer target for the generated checkpoint loader.
 *
 * Built by tests/fuzz/test_fuzz.py against a generated trainer (prefix "model"):
 *     clang -g -O1 -fsanitize=fuzzer,address,undefined -I ARTIFACTS fuzz_checkpoint.c
 * Every input is tried twice: as it is, which the CRC almost always refuses, and with its last
 * four bytes replaced by the CRC of the rest, which lets the fuzzer reach the parser behind the
 * CRC. The property checked after each load: it returned ET_OK, or the trainer's state (as
 * save_checkpoint writes it: parameters, buffers, optimizer state, step, counter, learning rate)
 * is byte for byte what it was. Sanitizers catch any out-of-bounds read on the way. */
#include "model.c"

#include <stdlib.h>

static uint8_t *et_fuzz_before, *et_fuzz_after, *et_fuzz_input;
static size_t et_fuzz_state_bytes;

static void et_fuzz_save(uint8_t *to)
{
    size_t written;
    if (model_save_checkpoint(to, et_fuzz_state_bytes, 1, &written) != ET_OK || written != et_fuzz_state_bytes)
        abort();
}

static void et_fuzz_try(const uint8_t *data, size_t size)
{
    int status;
    et_fuzz_save(et_fuzz_before);
    status = model_load_checkpoint(data, size);
    if (status == ET_OK) {
        /* A well-formed checkpoint of this model: put the state back for the next input. */
        if (model_load_checkpoint(et_fuzz_before, et_fuzz_state_bytes) != ET_OK) abort();
        return;
    }
    if (status != ET_CORRUPT_CHECKPOINT && status != ET_WRONG_MODEL) abort();
    et_fuzz_save(et_fuzz_after);
    if (memcmp(et_fuzz_before, et_fuzz_after, et_fuzz_state_bytes) != 0) abort(); /* a refused load changed state */
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (model_init() != ET_OK || model_checkpoint_size(1, &et_fuzz_state_bytes) != ET_OK) abort();
    et_fuzz_before = malloc(et_fuzz_state_bytes);
    et_fuzz_after = malloc(et_fuzz_state_bytes);
    if (et_fuzz_before == NULL || et_fuzz_after == NULL) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    et_fuzz_try(data, size);
    if (size >= 4) {
        /* A private copy, so ASan still sees the exact input length. */
        et_fuzz_input = malloc(size);
        if (et_fuzz_input == NULL) abort();
        memcpy(et_fuzz_input, data, size);
        et_put_u32(et_fuzz_input + size - 4, et_crc32(0u, et_fuzz_input, size - 4));
        et_fuzz_try(et_fuzz_input, size);
        free(et_fuzz_input);
    }
    return 0;
}
