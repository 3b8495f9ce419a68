/* SPDX-License-Identifier: Apache-2.0 */
/* Staging chunks (stage.h): a free list over slabs the executor's allocator provides. */
#include <string.h>

#include <openssl/crypto.h>

#include "batching/base/mutex.h"
#include "stage.h"

int gp_stage_pool_init(gp_stage_pool *p, size_t max_bytes, gp_stage_alloc_fn alloc, gp_stage_release_fn release,
                       void *ctx)
{
    memset(p, 0, sizeof(*p));
    if (gp_mutex_init(&p->lock) != 0)
        return 0;
    for (unsigned i = 0; i < GP_STAGE_SHARDS; i++) {
        if (gp_mutex_init(&p->shards[i].lock) != 0) {
            while (i-- > 0)
                pthread_mutex_destroy(&p->shards[i].lock);
            pthread_mutex_destroy(&p->lock);
            return 0;
        }
    }
    p->max_slabs = max_bytes / ((size_t)GP_STAGE_SLAB_CHUNKS * GP_STAGE_CHUNK_BYTES);
    p->alloc = alloc;
    p->release = release;
    p->ctx = ctx;
    p->want_more = 1;            /* the first slab comes with the first gp_stage_grow */
    return 1;
}

void gp_stage_pool_cleanup(gp_stage_pool *p)
{
    while (p->slabs != NULL) {
        gp_stage_slab *s = p->slabs;

        p->slabs = s->next;
        p->release(p->ctx, s->mem, (size_t)GP_STAGE_SLAB_CHUNKS * GP_STAGE_CHUNK_BYTES);
        OPENSSL_free(s);
    }
    p->nslabs = 0;
    for (unsigned i = 0; i < GP_STAGE_SHARDS; i++) {
        p->shards[i].free = NULL;
        pthread_mutex_destroy(&p->shards[i].lock);
    }
    pthread_mutex_destroy(&p->lock);
}

void gp_stage_grow(gp_stage_pool *p)
{
    const size_t bytes = (size_t)GP_STAGE_SLAB_CHUNKS * GP_STAGE_CHUNK_BYTES;
    gp_stage_slab *s;
    uint64_t dev = 0;

    /* A peek without the lock first: this runs before every batch. */
    if (!__atomic_load_n(&p->want_more, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&p->lock);
    if (!p->broken && p->nslabs < p->max_slabs) {
        /* The allocation runs under the lock: it is rare (a few slabs a process) and gets wait
         * for nothing but the free list, which it does not touch until the slab is ready. */
        if ((s = OPENSSL_zalloc(sizeof(*s))) == NULL || (s->mem = p->alloc(p->ctx, bytes, &dev)) == NULL) {
            OPENSSL_free(s);
            p->broken = 1;
        } else {
            for (size_t i = 0; i < GP_STAGE_SLAB_CHUNKS; i++) {
                /* Dealt over the lists in runs, so that neighbouring descriptors (a cache line
                 * holds two or three; `next` is written at every put) mostly share an owner. */
                gp_stage_shard *sh = &p->shards[i * GP_STAGE_SHARDS / GP_STAGE_SLAB_CHUNKS];

                s->chunks[i].host = (uint8_t *)s->mem + i * GP_STAGE_CHUNK_BYTES;
                s->chunks[i].dev = dev != 0 ? dev + i * GP_STAGE_CHUNK_BYTES : 0;
                pthread_mutex_lock(&sh->lock);
                s->chunks[i].next = sh->free;
                sh->free = &s->chunks[i];
                pthread_mutex_unlock(&sh->lock);
            }
            s->next = p->slabs;
            p->slabs = s;
            p->nslabs++;
        }
    }
    __atomic_store_n(&p->want_more, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->lock);
}

/* The calling thread's own free list: dealt round-robin at its first use. */
static gp_stage_shard *own_shard(gp_stage_pool *p)
{
    static unsigned next;
    static __thread unsigned mine;   /* 1 + index; 0: not yet dealt */

    if (mine == 0)
        mine = 1 + __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % GP_STAGE_SHARDS;
    return &p->shards[mine - 1];
}

gp_stage_chunk *gp_stage_get(gp_stage_pool *p)
{
    gp_stage_shard *own = own_shard(p);
    gp_stage_chunk *c = NULL;

    for (unsigned k = 0; k < GP_STAGE_SHARDS && c == NULL; k++) {
        gp_stage_shard *sh = &p->shards[((unsigned)(own - p->shards) + k) % GP_STAGE_SHARDS];

        pthread_mutex_lock(&sh->lock);
        if ((c = sh->free) != NULL)
            sh->free = c->next;
        pthread_mutex_unlock(&sh->lock);
    }
    if (c == NULL)
        __atomic_store_n(&p->want_more, 1, __ATOMIC_RELAXED);
    return c;
}

void gp_stage_put(gp_stage_pool *p, gp_stage_chunk *c)
{
    gp_stage_shard *sh = own_shard(p);

    pthread_mutex_lock(&sh->lock);
    c->next = sh->free;
    sh->free = c;
    pthread_mutex_unlock(&sh->lock);
}
