/* SPDX-License-Identifier: Apache-2.0 */
/* The staging pool (batching/stage.h): chunks, growth only when asked, its limit, failed
 * allocations, and every slab released, through a counting allocator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>

#include "batching/stage.h"

#define SLAB_BYTES ((size_t)GP_STAGE_SLAB_CHUNKS * GP_STAGE_CHUNK_BYTES)

typedef struct {
    int allocs, releases, fail_next;
    size_t live_bytes;
    uint64_t dev_base;   /* 0: plain memory; else pretend the GPU addresses the slab from here */
} fake_alloc;

static void *fake_alloc_fn(void *ctx, size_t bytes, uint64_t *dev)
{
    fake_alloc *f = ctx;
    void *p;

    if (f->fail_next) {
        f->fail_next = 0;
        return NULL;
    }
    if ((p = aligned_alloc(16, bytes)) == NULL)
        return NULL;
    f->allocs++;
    f->live_bytes += bytes;
    *dev = f->dev_base != 0 ? f->dev_base + (uint64_t)f->allocs * bytes : 0;
    return p;
}

static void fake_release_fn(void *ctx, void *mem, size_t bytes)
{
    fake_alloc *f = ctx;

    f->releases++;
    f->live_bytes -= bytes;
    free(mem);
}

/* A new pool has no chunk until the first grow; a get that finds none asks for a slab. */
static void test_grows_only_when_asked(void **state)
{
    fake_alloc f = { 0 };
    gp_stage_pool p;
    gp_stage_chunk *c[GP_STAGE_SLAB_CHUNKS + 1];

    (void)state;
    assert_true(gp_stage_pool_init(&p, 4 * SLAB_BYTES, fake_alloc_fn, fake_release_fn, &f));
    assert_int_equal(f.allocs, 0);
    gp_stage_grow(&p);
    assert_int_equal(f.allocs, 1);
    gp_stage_grow(&p);   /* nobody asked */
    assert_int_equal(f.allocs, 1);
    for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++) {
        c[i] = gp_stage_get(&p);
        assert_non_null(c[i]);
        assert_int_equal((uintptr_t)c[i]->host % 16, 0);
        assert_int_equal(c[i]->dev, 0);
        memset(c[i]->host, (int)i, GP_STAGE_CHUNK_BYTES);   /* whole chunks, no overlap (below) */
    }
    for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++)
        for (size_t k = 0; k < GP_STAGE_CHUNK_BYTES; k += 4096)
            assert_int_equal(c[i]->host[k], (uint8_t)i);
    assert_null(gp_stage_get(&p));   /* dry: the request runs unstaged, a slab is asked for */
    assert_int_equal(f.allocs, 1);
    gp_stage_grow(&p);
    assert_int_equal(f.allocs, 2);
    c[GP_STAGE_SLAB_CHUNKS] = gp_stage_get(&p);
    assert_non_null(c[GP_STAGE_SLAB_CHUNKS]);
    for (size_t i = 0; i <= GP_STAGE_SLAB_CHUNKS; i++)
        gp_stage_put(&p, c[i]);
    gp_stage_pool_cleanup(&p);
    assert_int_equal(f.releases, 2);
    assert_int_equal(f.live_bytes, 0);
}

/* The limit holds; a chunk put back is handed out again. */
static void test_limit_and_reuse(void **state)
{
    fake_alloc f = { 0 };
    gp_stage_pool p;
    gp_stage_chunk *c[GP_STAGE_SLAB_CHUNKS], *again;

    (void)state;
    assert_true(gp_stage_pool_init(&p, SLAB_BYTES, fake_alloc_fn, fake_release_fn, &f));
    gp_stage_grow(&p);
    for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++)
        assert_non_null(c[i] = gp_stage_get(&p));
    assert_null(gp_stage_get(&p));
    gp_stage_grow(&p);   /* at the limit: no second slab */
    assert_int_equal(f.allocs, 1);
    assert_null(gp_stage_get(&p));
    gp_stage_put(&p, c[5]);
    again = gp_stage_get(&p);
    assert_ptr_equal(again, c[5]);
    for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++)
        gp_stage_put(&p, c[i]);
    gp_stage_pool_cleanup(&p);
    assert_int_equal(f.releases, 1);
}

/* A failed allocation leaves the pool empty and stops further tries (every get then runs
 * unstaged); a device address is carried per chunk. */
static void test_failed_allocation_and_device_addresses(void **state)
{
    fake_alloc f = { .fail_next = 1 };
    gp_stage_pool p;
    gp_stage_chunk *c;

    (void)state;
    assert_true(gp_stage_pool_init(&p, 4 * SLAB_BYTES, fake_alloc_fn, fake_release_fn, &f));
    gp_stage_grow(&p);
    assert_int_equal(f.allocs, 0);
    assert_null(gp_stage_get(&p));
    gp_stage_grow(&p);
    assert_int_equal(f.allocs, 0);
    gp_stage_pool_cleanup(&p);

    f = (fake_alloc){ .dev_base = 1u << 20 };
    assert_true(gp_stage_pool_init(&p, 4 * SLAB_BYTES, fake_alloc_fn, fake_release_fn, &f));
    gp_stage_grow(&p);
    c = gp_stage_get(&p);
    assert_non_null(c);
    /* Chunks keep their offset from the slab in both address spaces. */
    assert_int_equal(c->dev - ((1u << 20) + SLAB_BYTES), (uint64_t)(c->host - p.slabs->chunks[0].host));
    gp_stage_put(&p, c);
    gp_stage_pool_cleanup(&p);
    assert_int_equal(f.live_bytes, 0);
}

/* Chunks a thread returned (to its own free list) are found by a thread with another list: a get
 * looks at every list before it reports the pool dry. */
typedef struct {
    gp_stage_pool *p;
    gp_stage_chunk **c;
    size_t n;
    int take;
} shard_arg;

static void *take_or_return(void *arg)
{
    shard_arg *a = arg;

    for (size_t i = 0; i < a->n; i++) {
        if (a->take)
            a->c[i] = gp_stage_get(a->p);
        else
            gp_stage_put(a->p, a->c[i]);
    }
    return NULL;
}

static void run_thread(shard_arg *a)
{
    pthread_t t;

    assert_int_equal(pthread_create(&t, NULL, take_or_return, a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_chunks_cross_threads(void **state)
{
    fake_alloc f = { 0 };
    gp_stage_pool p;
    gp_stage_chunk *c[GP_STAGE_SLAB_CHUNKS], *d[GP_STAGE_SLAB_CHUNKS];
    shard_arg take = { &p, c, GP_STAGE_SLAB_CHUNKS, 1 }, give = { &p, c, GP_STAGE_SLAB_CHUNKS, 0 };

    (void)state;
    assert_true(gp_stage_pool_init(&p, SLAB_BYTES, fake_alloc_fn, fake_release_fn, &f));
    gp_stage_grow(&p);
    run_thread(&take);   /* one thread takes the whole slab, from every list */
    for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++)
        assert_non_null(c[i]);
    run_thread(&give);   /* ... and returns it all to its own list */
    for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++) {   /* this thread finds every one */
        d[i] = gp_stage_get(&p);
        assert_non_null(d[i]);
        for (size_t k = 0; k < i; k++)
            assert_ptr_not_equal(d[i], d[k]);
    }
    assert_null(gp_stage_get(&p));
    for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++)
        gp_stage_put(&p, d[i]);
    gp_stage_pool_cleanup(&p);
    assert_int_equal(f.live_bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_only_when_asked),
        cmocka_unit_test(test_limit_and_reuse),
        cmocka_unit_test(test_failed_allocation_and_device_addresses),
        cmocka_unit_test(test_chunks_cross_threads),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
