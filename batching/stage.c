/* SPDX-License-Identifier: Apache-2.0 */
/* Staging chunks (stage.h): a free list over slabs the executor's allocator provides. */
#include <string.h>

#include <openssl/crypto.h>

#include "stage.h"

int gp_stage_pool_init(gp_stage_pool *p, size_t max_bytes, gp_stage_alloc_fn alloc, gp_stage_release_fn release,
                       void *ctx)
{
    memset(p, 0, sizeof(*p));
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return 0;
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
    p->free = NULL;
    p->nslabs = 0;
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
                s->chunks[i].host = (uint8_t *)s->mem + i * GP_STAGE_CHUNK_BYTES;
                s->chunks[i].dev = dev != 0 ? dev + i * GP_STAGE_CHUNK_BYTES : 0;
                s->chunks[i].next = p->free;
                p->free = &s->chunks[i];
            }
            s->next = p->slabs;
            p->slabs = s;
            p->nslabs++;
        }
    }
    __atomic_store_n(&p->want_more, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->lock);
}

gp_stage_chunk *gp_stage_get(gp_stage_pool *p)
{
    gp_stage_chunk *c;

    pthread_mutex_lock(&p->lock);
    if ((c = p->free) != NULL)
        p->free = c->next;
    else
        __atomic_store_n(&p->want_more, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->lock);
    return c;
}

void gp_stage_put(gp_stage_pool *p, gp_stage_chunk *c)
{
    pthread_mutex_lock(&p->lock);
    c->next = p->free;
    p->free = c;
    pthread_mutex_unlock(&p->lock);
}
