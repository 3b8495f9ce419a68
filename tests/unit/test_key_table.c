/* SPDX-License-Identifier: Apache-2.0 */
/* The resident key table's bookkeeping (batching/key_table.h): uploads, failed batches, freed keys
 * cleared before reuse, growth and its limit, over host memory standing in for the GPU's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>

#include "batching/key_table.h"

#define SLOT 64u   /* bytes a slot (the real table's is a key schedule's) */

typedef struct {
    int chunks_live, chunk_allocs, fail_alloc;
    int wipe_now_ok;              /* what wipe_now answers */
    int wipes_issued, wipes_done; /* wipes_done: what wipes_done answers */
    size_t freed_bytes;
} fake_gpu;

static uint64_t fake_chunk_alloc(void *ctx, size_t bytes)
{
    fake_gpu *f = ctx;
    void *p;

    if (f->fail_alloc || (p = malloc(bytes)) == NULL)
        return 0;
    memset(p, 0xA5, bytes);   /* device memory is not zero */
    f->chunks_live++;
    f->chunk_allocs++;
    return (uint64_t)(uintptr_t)p;
}

static void fake_chunk_free(void *ctx, uint64_t dev, size_t bytes)
{
    fake_gpu *f = ctx;

    f->chunks_live--;
    f->freed_bytes += bytes;
    free((void *)(uintptr_t)dev);
}

static int fake_wipe_now(void *ctx, uint64_t dev, size_t bytes)
{
    fake_gpu *f = ctx;

    if (!f->wipe_now_ok)
        return 0;
    memset((void *)(uintptr_t)dev, 0, bytes);
    f->wipes_issued++;
    return 1;
}

static int fake_wipes_done(void *ctx)
{
    return ((fake_gpu *)ctx)->wipes_done;
}

static const gp_key_table_ops fake_ops = {
    .chunk_alloc = fake_chunk_alloc,
    .chunk_free = fake_chunk_free,
    .wipe_now = fake_wipe_now,
    .wipes_done = fake_wipes_done,
};

/* One lookup in a batch of its own: begin, lookup, unlock. */
static enum gp_key_where lookup1(gp_key_table *t, uint32_t *ref, uint64_t id, uint64_t *batch, uint32_t *slot)
{
    enum gp_key_where w;

    *batch = gp_key_table_batch_begin(t);
    w = gp_key_table_lookup(t, ref, id, *batch, slot);
    gp_key_table_batch_unlock(t);
    return w;
}

static void fill(gp_key_table *t, uint32_t slot, uint8_t v)
{
    memset((void *)(uintptr_t)gp_key_table_addr(t, slot), v, SLOT);
}

static int is_zero(gp_key_table *t, uint32_t slot)
{
    const uint8_t *p = (const uint8_t *)(uintptr_t)gp_key_table_addr(t, slot);

    for (size_t i = 0; i < SLOT; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

/* A new key is uploaded by its first batch, resident afterwards; another batch in flight
 * meanwhile carries it inline; the same batch's second request of it uses the slot. */
static void test_upload_then_resident(void **state)
{
    fake_gpu f = { 0 };
    gp_key_table t;
    uint32_t ref = 0, slot, slot2;
    uint64_t b1, b2;

    (void)state;
    assert_true(gp_key_table_init(&t, SLOT, 4096, &fake_ops, &f));
    b1 = gp_key_table_batch_begin(&t);
    assert_int_equal(gp_key_table_lookup(&t, &ref, 7, b1, &slot), GP_KEY_UPLOAD);
    assert_int_equal(ref, slot + 1);
    assert_int_equal(gp_key_table_lookup(&t, &ref, 7, b1, &slot2), GP_KEY_RESIDENT);
    assert_int_equal(slot2, slot);
    gp_key_table_batch_unlock(&t);
    assert_int_equal(lookup1(&t, &ref, 7, &b2, &slot2), GP_KEY_INLINE);   /* b1 still in flight */
    gp_key_table_batch_end(&t, b2, 1, NULL, 0, NULL, 0);
    gp_key_table_batch_end(&t, b1, 1, &slot, 1, NULL, 0);
    assert_int_equal(lookup1(&t, &ref, 7, &b2, &slot2), GP_KEY_RESIDENT);
    assert_int_equal(slot2, slot);
    gp_key_table_batch_end(&t, b2, 1, NULL, 0, NULL, 0);
    assert_int_equal(f.chunk_allocs, 1);
    gp_key_table_cleanup(&t);
    assert_int_equal(f.chunks_live, 0);
    assert_int_equal(f.freed_bytes, (size_t)GP_KEY_TABLE_CHUNK * SLOT);
}

/* A failed batch's upload is not trusted: the key looks again, and the slot is cleared by a later
 * batch before anyone gets it. */
static void test_failed_upload_is_wiped(void **state)
{
    fake_gpu f = { 0 };
    gp_key_table t;
    uint32_t ref = 0, slot, again, wipes[8];
    uint64_t b1, b2;
    size_t n;

    (void)state;
    assert_true(gp_key_table_init(&t, SLOT, 4096, &fake_ops, &f));
    assert_int_equal(lookup1(&t, &ref, 9, &b1, &slot), GP_KEY_UPLOAD);
    fill(&t, slot, 0x11);   /* part of the schedule made it */
    gp_key_table_batch_end(&t, b1, 0, &slot, 1, NULL, 0);
    assert_int_equal(ref, 0);

    b2 = gp_key_table_batch_begin(&t);
    n = gp_key_table_take_wipes(&t, b2, wipes, 8);
    assert_int_equal(n, 1);
    assert_int_equal(wipes[0], slot);
    assert_int_equal(gp_key_table_lookup(&t, &ref, 9, b2, &again), GP_KEY_UPLOAD);
    assert_int_not_equal(again, slot);   /* not the one being cleared */
    gp_key_table_batch_unlock(&t);
    memset((void *)(uintptr_t)gp_key_table_addr(&t, slot), 0, SLOT);   /* what the batch's copy does */
    gp_key_table_batch_end(&t, b2, 1, &again, 1, wipes, n);
    assert_true(is_zero(&t, slot));
    gp_key_table_cleanup(&t);
}

/* A freed key's slot: cleared at once where the thread may call the GPU, reused only once the
 * clear is known done; else cleared by the next batch, and reused after it. */
static void test_forget_wipes_before_reuse(void **state)
{
    fake_gpu f = { .wipe_now_ok = 1 };
    gp_key_table t;
    uint32_t ref = 0, ref2 = 0, ref3 = 0, slot, slot2, slot3, wipes[8];
    uint64_t b;
    size_t n;

    (void)state;
    /* One chunk only, so a cleared slot is what a new key must wait for. */
    assert_true(gp_key_table_init(&t, SLOT, GP_KEY_TABLE_CHUNK, &fake_ops, &f));
    assert_int_equal(lookup1(&t, &ref, 1, &b, &slot), GP_KEY_UPLOAD);
    fill(&t, slot, 0x22);
    gp_key_table_batch_end(&t, b, 1, &slot, 1, NULL, 0);
    gp_key_table_forget(&t, &ref, 1, 1);
    assert_int_equal(ref, 0);
    assert_int_equal(f.wipes_issued, 1);
    assert_true(is_zero(&t, slot));

    /* Take every other slot: the wiping one is not handed out until the wipes are done. */
    for (uint64_t id = 100; id < 100 + GP_KEY_TABLE_CHUNK - 1; id++) {
        uint32_t r = 0, s;

        assert_int_equal(lookup1(&t, &r, id, &b, &s), GP_KEY_UPLOAD);
        assert_int_not_equal(s, slot);
        gp_key_table_batch_end(&t, b, 1, &s, 1, NULL, 0);
    }
    assert_int_equal(lookup1(&t, &ref2, 2, &b, &slot2), GP_KEY_INLINE);   /* full, the clear not done */
    gp_key_table_batch_end(&t, b, 1, NULL, 0, NULL, 0);
    f.wipes_done = 1;
    assert_int_equal(lookup1(&t, &ref2, 2, &b, &slot2), GP_KEY_UPLOAD);
    assert_int_equal(slot2, slot);
    fill(&t, slot2, 0x33);
    gp_key_table_batch_end(&t, b, 1, &slot2, 1, NULL, 0);

    /* On an async job's stack (may_call 0): the next batch clears it. */
    gp_key_table_forget(&t, &ref2, 2, 0);
    assert_int_equal(f.wipes_issued, 1);
    b = gp_key_table_batch_begin(&t);
    assert_int_equal(gp_key_table_lookup(&t, &ref3, 3, b, &slot3), GP_KEY_INLINE);   /* still full */
    n = gp_key_table_take_wipes(&t, b, wipes, 8);
    gp_key_table_batch_unlock(&t);
    assert_int_equal(n, 1);
    assert_int_equal(wipes[0], slot2);
    memset((void *)(uintptr_t)gp_key_table_addr(&t, slot2), 0, SLOT);
    gp_key_table_batch_end(&t, b, 1, NULL, 0, wipes, n);
    assert_int_equal(lookup1(&t, &ref3, 3, &b, &slot3), GP_KEY_UPLOAD);
    assert_int_equal(slot3, slot2);
    gp_key_table_batch_end(&t, b, 1, &slot3, 1, NULL, 0);

    /* A batch that fails to clear gives the slot back to the wipe list. */
    gp_key_table_forget(&t, &ref3, 3, 0);
    b = gp_key_table_batch_begin(&t);
    n = gp_key_table_take_wipes(&t, b, wipes, 8);
    gp_key_table_batch_unlock(&t);
    assert_int_equal(n, 1);
    gp_key_table_batch_end(&t, b, 0, NULL, 0, wipes, n);
    b = gp_key_table_batch_begin(&t);
    assert_int_equal(gp_key_table_take_wipes(&t, b, wipes, 8), 1);
    gp_key_table_batch_unlock(&t);
    gp_key_table_batch_end(&t, b, 1, NULL, 0, wipes, 1);
    gp_key_table_cleanup(&t);
    assert_int_equal(f.chunks_live, 0);
}

/* Growth a chunk at a time up to the limit; then keys travel inline; a failed allocation stops
 * growth for good. A stale reference (a copied key's) gets a slot of its own. */
static void test_growth_limit_and_stale_refs(void **state)
{
    fake_gpu f = { 0 };
    gp_key_table t;
    uint32_t refs[2 * GP_KEY_TABLE_CHUNK + 1] = { 0 }, slot, copy;
    uint64_t b;

    (void)state;
    assert_true(gp_key_table_init(&t, SLOT, 2 * GP_KEY_TABLE_CHUNK, &fake_ops, &f));
    for (uint32_t i = 0; i < 2 * GP_KEY_TABLE_CHUNK; i++) {
        assert_int_equal(lookup1(&t, &refs[i], 1000 + i, &b, &slot), GP_KEY_UPLOAD);
        gp_key_table_batch_end(&t, b, 1, &slot, 1, NULL, 0);
    }
    assert_int_equal(f.chunk_allocs, 2);
    assert_int_equal(lookup1(&t, &refs[2 * GP_KEY_TABLE_CHUNK], 5, &b, &slot), GP_KEY_INLINE);
    gp_key_table_batch_end(&t, b, 1, NULL, 0, NULL, 0);
    assert_int_equal(f.chunk_allocs, 2);

    copy = refs[0];   /* gp_key_dup clears it, but a stale one must not alias the original's */
    gp_key_table_forget(&t, &refs[1], 1001, 0);
    assert_int_equal(lookup1(&t, &copy, 4242, &b, &slot), GP_KEY_INLINE);   /* the freed one is not clear yet */
    gp_key_table_batch_end(&t, b, 1, NULL, 0, NULL, 0);
    assert_int_equal(lookup1(&t, &refs[0], 1000, &b, &slot), GP_KEY_RESIDENT);
    gp_key_table_batch_end(&t, b, 1, NULL, 0, NULL, 0);
    gp_key_table_forget(&t, &copy, 4242, 1);   /* owns nothing: nothing happens */
    assert_int_equal(lookup1(&t, &refs[0], 1000, &b, &slot), GP_KEY_RESIDENT);
    gp_key_table_batch_end(&t, b, 1, NULL, 0, NULL, 0);
    gp_key_table_cleanup(&t);
    assert_int_equal(f.chunks_live, 0);

    f = (fake_gpu){ .fail_alloc = 1 };
    assert_true(gp_key_table_init(&t, SLOT, 4096, &fake_ops, &f));
    refs[0] = 0;
    assert_int_equal(lookup1(&t, &refs[0], 1, &b, &slot), GP_KEY_INLINE);
    gp_key_table_batch_end(&t, b, 1, NULL, 0, NULL, 0);
    f.fail_alloc = 0;
    assert_int_equal(lookup1(&t, &refs[0], 1, &b, &slot), GP_KEY_INLINE);   /* broken: no retry */
    gp_key_table_batch_end(&t, b, 1, NULL, 0, NULL, 0);
    assert_int_equal(refs[0], 0);
    gp_key_table_cleanup(&t);
}

/* Threads: batches looking keys up while others free theirs; no slot ever serves two live keys. */
#define THREADS 4
#define KEYS_PER_THREAD 300
#define ROUNDS 400

typedef struct {
    gp_key_table *t;
    int index;
    int failed;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    uint32_t refs[KEYS_PER_THREAD] = { 0 };
    uint64_t ids[KEYS_PER_THREAD];
    unsigned seed = (unsigned)w->index * 7919u + 1;

    for (int k = 0; k < KEYS_PER_THREAD; k++)
        ids[k] = ((uint64_t)w->index << 32) | (uint64_t)(k + 1);
    for (int round = 0; round < ROUNDS; round++) {
        uint32_t slots[16], up[16], wipes[8];
        int keys[16];
        size_t nup = 0, nw;
        uint64_t b = gp_key_table_batch_begin(w->t);

        for (int i = 0; i < 16; i++) {
            keys[i] = (int)(rand_r(&seed) % KEYS_PER_THREAD);
            switch (gp_key_table_lookup(w->t, &refs[keys[i]], ids[keys[i]], b, &slots[i])) {
            case GP_KEY_UPLOAD:
                up[nup++] = slots[i];
                break;
            case GP_KEY_RESIDENT:
                break;
            default:
                slots[i] = UINT32_MAX;
            }
        }
        nw = gp_key_table_take_wipes(w->t, b, wipes, 8);
        gp_key_table_batch_unlock(w->t);
        for (int i = 0; i < 16; i++)   /* "the kernel": each key's slot holds its id */
            if (slots[i] != UINT32_MAX)
                *(volatile uint64_t *)(uintptr_t)gp_key_table_addr(w->t, slots[i]) = ids[keys[i]];
        for (int i = 0; i < 16; i++)
            if (slots[i] != UINT32_MAX
                && *(volatile uint64_t *)(uintptr_t)gp_key_table_addr(w->t, slots[i]) != ids[keys[i]])
                w->failed = 1;
        for (size_t i = 0; i < nw; i++)
            *(volatile uint64_t *)(uintptr_t)gp_key_table_addr(w->t, wipes[i]) = 0;
        gp_key_table_batch_end(w->t, b, (round % 13) != 0, up, nup, wipes, nw);
        if (round % 3 == 0) {   /* free a key (the thread owns its keys: never in its own batch now) */
            int k = (int)(rand_r(&seed) % KEYS_PER_THREAD);

            gp_key_table_forget(w->t, &refs[k], ids[k], round % 2);
            ids[k] += (uint64_t)KEYS_PER_THREAD << 16;   /* a new key in its place */
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    fake_gpu f = { .wipe_now_ok = 1, .wipes_done = 1 };
    gp_key_table t;
    pthread_t th[THREADS];
    worker w[THREADS];

    (void)state;
    /* Fewer slots than keys: lookups fall back to inline, freed slots are cleared and reused. */
    assert_true(gp_key_table_init(&t, sizeof(uint64_t), GP_KEY_TABLE_CHUNK, &fake_ops, &f));
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){ .t = &t, .index = i };
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_false(w[i].failed);
    }
    gp_key_table_cleanup(&t);
    assert_int_equal(f.chunks_live, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_then_resident),
        cmocka_unit_test(test_failed_upload_is_wiped),
        cmocka_unit_test(test_forget_wipes_before_reuse),
        cmocka_unit_test(test_growth_limit_and_stale_refs),
        cmocka_unit_test(test_threads),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
