/* The A/B checkpoint slots (model_flash_save / model_flash_load, templates/model.c.j2) on a flash
 * kept in memory, which refuses what real flash refuses: programming a byte that is not erased, a
 * program call at an offset that is not a multiple of 8, anything outside a slot.
 *
 * Built by tests/c/test_flash_slots.py under AddressSanitizer and UndefinedBehaviorSanitizer against
 * a generated trainer (prefix "model", one float input of IN values per sample, integer labels).
 * Prints one line of figures and "ok", or the first failed check and exits 1. */
#include "model.c"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            printf("failed: %s (line %d)\n", #cond, __LINE__);               \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define CKPT MODEL_CHECKPOINT_BYTES
#define SLOT (CKPT + ET_FLASH_HEADER)

struct mem_flash {
    uint8_t bytes[2][SLOT];
    uint8_t erased;   /* what an erase leaves: 0xff, or 0x00 on some flashes */
    long budget;      /* bytes programmed before the power cut; -1: no cut */
    int fail_call;    /* the callback call (counted from 1) that fails; 0: none */
    int calls, erases, programs;
};

static struct mem_flash mem;

static int mem_erase(void *context, unsigned slot)
{
    struct mem_flash *m = context;
    CHECK(slot < 2u);
    if (++m->calls == m->fail_call) return -1;
    memset(m->bytes[slot], m->erased, SLOT);
    m->erases++;
    return 0;
}

static int mem_program(void *context, unsigned slot, size_t offset, const uint8_t *bytes, size_t n)
{
    struct mem_flash *m = context;
    size_t i, kept = n;
    CHECK(slot < 2u && offset % 8u == 0u && offset <= SLOT && n <= SLOT - offset);
    if (++m->calls == m->fail_call) return -1;
    if (m->budget >= 0 && (size_t)m->budget < n) kept = (size_t)m->budget;
    for (i = 0; i < kept; i++) {
        CHECK(m->bytes[slot][offset + i] == m->erased);
        m->bytes[slot][offset + i] = bytes[i];
    }
    if (m->budget >= 0) m->budget -= (long)kept;
    m->programs++;
    return kept == n ? 0 : -1;  /* a cut: nothing after this write happens */
}

static int mem_read(void *context, unsigned slot, size_t offset, uint8_t *bytes, size_t n)
{
    struct mem_flash *m = context;
    CHECK(slot < 2u && offset <= SLOT && n <= SLOT - offset);
    if (++m->calls == m->fail_call) return -1;
    memcpy(bytes, m->bytes[slot] + offset, n);
    return 0;
}

static struct et_flash flash = { &mem, SLOT, mem_erase, mem_program, mem_read };
static uint8_t buffer[CKPT];

static void blank(uint8_t erased)
{
    memset(&mem, 0, sizeof mem);
    mem.erased = erased;
    memset(mem.bytes, erased, sizeof mem.bytes);
    mem.budget = -1;
}

/* The trainer's state as a checkpoint with optimizer state. */
static void state(uint8_t *out)
{
    size_t written;
    CHECK(model_save_checkpoint(out, CKPT, 1, &written) == ET_OK && written == CKPT);
}

static int state_is(const uint8_t *expected)
{
    static uint8_t now[CKPT];
    state(now);
    return memcmp(now, expected, CKPT) == 0;
}

/* One training step on data that depends on k, so every call moves the state somewhere new. */
static void train(int k)
{
    float x[MODEL_MAX_BATCH * IN], loss;
    int32_t labels[MODEL_MAX_BATCH];
    int i;
    for (i = 0; i < MODEL_MAX_BATCH * IN; i++) x[i] = (float)((i * 7 + k * 3) % 11) / 5.0f - 1.0f;
    for (i = 0; i < MODEL_MAX_BATCH; i++) labels[i] = (i + k) % 3;
    CHECK(model_train_step(MODEL_MAX_BATCH, x, labels, &loss) == ET_OK);
    CHECK(model_optimizer_step() == ET_OK && model_lazy_reset_grad() == ET_OK);
}

static int save(void)
{
    mem.calls = 0;
    return model_flash_save(&flash, buffer, sizeof buffer, 1);
}

static int load(void)
{
    mem.calls = 0;
    return model_flash_load(&flash, buffer, sizeof buffer);
}

static uint32_t sequence(unsigned slot)
{
    return et_get_u32(mem.bytes[slot] + 8);
}

/* A slot as flash_save writes it, with any sequence number and checkpoint. */
static void put_slot(unsigned slot, uint32_t seq, const uint8_t *checkpoint, size_t n)
{
    uint8_t *h = mem.bytes[slot];
    memset(h, mem.erased, SLOT);
    memcpy(h, et_slot_mark, sizeof et_slot_mark);
    et_put_u32(h + 8, seq);
    et_put_u32(h + 12, (uint32_t)n);
    et_put_u32(h + 20, 0u);
    memcpy(h + ET_FLASH_HEADER, checkpoint, n);
    et_put_u32(h + 16, et_slot_crc(h, checkpoint, n));
}

static uint8_t before[CKPT], older[CKPT], newer[CKPT];

/* A save cut after every count of programmed bytes, from none to all of them: until the last byte
 * of the mark, loading restores what was saved before (`older`, or nothing); the slot that held
 * the newest checkpoint is never touched. Returns the cut points checked. */
static int cut_everywhere(uint8_t erased, int both_slots_full)
{
    static struct mem_flash image;
    unsigned newest;
    long n;
    blank(erased);
    train(1);
    if (both_slots_full) {
        CHECK(save() == ET_OK);
        train(2);
    }
    state(older);
    CHECK(save() == ET_OK);
    newest = both_slots_full ? 1u : 0u;
    CHECK(sequence(newest) == (both_slots_full ? 2u : 1u));
    train(3);
    state(newer);
    image = mem;
    for (n = 0; n <= (long)SLOT; n++) {
        mem = image;
        mem.budget = n;
        CHECK(save() == (n < (long)SLOT ? ET_FLASH_ERROR : ET_OK));
        CHECK(memcmp(mem.bytes[newest], image.bytes[newest], SLOT) == 0);
        train(4);  /* the state after the cut differs from both checkpoints */
        mem.budget = -1;
        CHECK(load() == ET_OK);
        CHECK(state_is(n < (long)SLOT ? older : newer));
        CHECK(model_load_checkpoint(newer, CKPT) == ET_OK);
    }
    return (int)n;
}

int main(void)
{
    size_t size;
    int cuts = 0, k, save_calls, load_calls;
    CHECK(model_init() == ET_OK);
    CHECK(model_checkpoint_size(1, &size) == ET_OK && size == CKPT);

    /* Blank flash (either erased value): no checkpoint, and the trainer keeps its state. */
    blank(0xffu);
    state(before);
    CHECK(load() == ET_NO_CHECKPOINT && state_is(before));
    blank(0x00u);
    CHECK(load() == ET_NO_CHECKPOINT && state_is(before));

    /* Saves alternate between the slots with rising sequence numbers; loads take the newest. */
    blank(0xffu);
    CHECK(save() == ET_OK && sequence(0) == 1u && mem.bytes[1][0] == 0xffu);
    save_calls = mem.calls;
    train(1);
    CHECK(save() == ET_OK && sequence(1) == 2u && sequence(0) == 1u);
    train(2);
    state(newer);
    CHECK(save() == ET_OK && sequence(0) == 3u && sequence(1) == 2u);
    train(3);
    CHECK(load() == ET_OK && state_is(newer));
    load_calls = mem.calls;

    /* A cut at any byte of a save, into an empty slot or over the older checkpoint. */
    cuts += cut_everywhere(0xffu, 0);
    cuts += cut_everywhere(0xffu, 1);
    cuts += cut_everywhere(0x00u, 1);

    /* Sequence numbers wrap: 0 follows 0xffffffff, and the save after it goes to the other slot. */
    blank(0xffu);
    train(5);
    state(older);
    train(6);
    state(newer);
    put_slot(0, 0xffffffffu, older, CKPT);
    put_slot(1, 0u, newer, CKPT);
    CHECK(load() == ET_OK && state_is(newer));
    train(7);
    state(before);
    CHECK(save() == ET_OK && sequence(0) == 1u && sequence(1) == 0u);
    CHECK(load() == ET_OK && state_is(before));
    put_slot(0, 0x80000000u, older, CKPT);  /* 2^31 apart: no order, slot 0 counts as newest */
    put_slot(1, 0u, newer, CKPT);
    CHECK(load() == ET_OK && state_is(older));
    put_slot(0, 5u, older, CKPT);
    put_slot(1, 0x80000004u, newer, CKPT);  /* 2^31 - 1 ahead: newer */
    CHECK(load() == ET_OK && state_is(newer));

    /* A damaged newest checkpoint (payload or header) gives way to the older one. */
    put_slot(0, 7u, older, CKPT);
    put_slot(1, 8u, newer, CKPT);
    mem.bytes[1][ET_FLASH_HEADER + 100] ^= 0x10u;
    CHECK(load() == ET_OK && state_is(older));
    put_slot(1, 8u, newer, CKPT);
    mem.bytes[1][9] ^= 0x01u;
    CHECK(load() == ET_OK && state_is(older));
    mem.bytes[1][9] ^= 0x01u;
    mem.bytes[1][13] ^= 0x40u;  /* a length beyond the slot */
    CHECK(load() == ET_OK && state_is(older));

    /* An intact slot holding another model's checkpoint: refused, state unchanged, no fallback. */
    memcpy(before, newer, CKPT);
    before[8] ^= 0x01u;  /* the fingerprint */
    et_put_u32(before + CKPT - 4, et_crc32(0u, before, CKPT - 4));
    put_slot(1, 8u, before, CKPT);
    state(before);
    CHECK(load() == ET_WRONG_MODEL && state_is(before));

    /* A callback that fails: ET_FLASH_ERROR, the trainer as it was, and the newest checkpoint
     * still loads after a failed save. */
    for (k = 1; k <= save_calls; k++) {
        put_slot(0, 7u, older, CKPT);
        put_slot(1, 8u, newer, CKPT);
        train(8 + k);
        state(before);
        mem.fail_call = k;
        CHECK(save() == ET_FLASH_ERROR && state_is(before));
        mem.fail_call = 0;
        CHECK(load() == ET_OK && state_is(newer));
    }
    for (k = 1; k <= load_calls; k++) {
        put_slot(0, 7u, older, CKPT);
        put_slot(1, 8u, newer, CKPT);
        train(8 + k);
        state(before);
        mem.fail_call = k;
        CHECK(load() == ET_FLASH_ERROR && state_is(before));
        mem.fail_call = 0;
    }

    /* Too small: slot or buffer. Nothing is written and nothing is loaded. */
    blank(0xffu);
    flash.slot_size = SLOT - 1u;
    CHECK(save() == ET_BUFFER_TOO_SMALL && mem.calls == 0);
    flash.slot_size = ET_FLASH_HEADER - 1u;
    CHECK(save() == ET_BUFFER_TOO_SMALL && load() == ET_BUFFER_TOO_SMALL && mem.calls == 0);
    flash.slot_size = SLOT;
    CHECK(model_flash_save(&flash, buffer, CKPT - 1u, 1) == ET_BUFFER_TOO_SMALL && mem.erases == 0);
    put_slot(0, 1u, newer, CKPT);
    state(before);
    CHECK(model_flash_load(&flash, buffer, CKPT - 1u) == ET_BUFFER_TOO_SMALL && state_is(before));

    /* Missing pieces. */
    CHECK(model_flash_save(NULL, buffer, CKPT, 1) == ET_BAD_ARGUMENT);
    CHECK(model_flash_load(&flash, NULL, CKPT) == ET_BAD_ARGUMENT);
    flash.read = NULL;
    CHECK(model_flash_load(&flash, buffer, CKPT) == ET_BAD_ARGUMENT && state_is(before));

    printf("checkpoint %u bytes, %d cut points, %d callback calls per save, %d per load\nok\n",
           (unsigned)CKPT, cuts, save_calls, load_calls);
    return 0;
}
