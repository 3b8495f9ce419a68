/* SPDX-License-Identifier: Apache-2.0 */
/* Resident keys: the slot bookkeeping of a GPU's key table (the device memory is the executor's). */
#include <stdlib.h>
#include <string.h>

#include "key_table.h"
#include "batching/base/mutex.h"

int gp_key_table_init(gp_key_table *t, size_t slot_bytes, uint32_t max_slots, const gp_key_table_ops *ops,
                      void *ctx)
{
    memset(t, 0, sizeof(*t));
    if (gp_mutex_init(&t->lock) != 0)
        return 0;
    t->slot_bytes = slot_bytes;
    t->max_chunks = (max_slots + GP_KEY_TABLE_CHUNK - 1) / GP_KEY_TABLE_CHUNK;
    if (t->max_chunks > GP_KEY_TABLE_MAX_CHUNKS)
        t->max_chunks = GP_KEY_TABLE_MAX_CHUNKS;
    t->next_batch = 1;
    t->ops = ops;
    t->ctx = ctx;
    return 1;
}

void gp_key_table_cleanup(gp_key_table *t)
{
    for (uint32_t c = 0; c < t->nchunks; c++)
        t->ops->chunk_free(t->ctx, t->chunk[c], (size_t)GP_KEY_TABLE_CHUNK * t->slot_bytes);
    free(t->slots);
    free(t->free_list);
    free(t->wipe_list);
    pthread_mutex_destroy(&t->lock);
    memset(t, 0, sizeof(*t));
}

uint64_t gp_key_table_batch_begin(gp_key_table *t)
{
    pthread_mutex_lock(&t->lock);
    return t->next_batch++;
}

void gp_key_table_batch_unlock(gp_key_table *t)
{
    pthread_mutex_unlock(&t->lock);
}

/* One more chunk of slots (lock held); 0 when the table may not or cannot grow. */
static int grow(gp_key_table *t)
{
    uint32_t n = t->nchunks * GP_KEY_TABLE_CHUNK, m = n + GP_KEY_TABLE_CHUNK;
    gp_key_slot *slots;
    uint32_t *fl, *wl;
    uint64_t dev;

    if (t->broken || t->nchunks >= t->max_chunks)
        return 0;
    slots = realloc(t->slots, m * sizeof(*slots));
    if (slots != NULL)
        t->slots = slots;
    fl = slots != NULL ? realloc(t->free_list, m * sizeof(*fl)) : NULL;
    if (fl != NULL)
        t->free_list = fl;
    wl = fl != NULL ? realloc(t->wipe_list, m * sizeof(*wl)) : NULL;
    if (wl != NULL)
        t->wipe_list = wl;
    if (wl == NULL || (dev = t->ops->chunk_alloc(t->ctx, (size_t)GP_KEY_TABLE_CHUNK * t->slot_bytes)) == 0) {
        t->broken = 1;   /* the arrays may have grown: harmless, n slots are in use */
        return 0;
    }
    memset(&t->slots[n], 0, GP_KEY_TABLE_CHUNK * sizeof(*slots));
    t->chunk[t->nchunks++] = dev;
    for (uint32_t s = m; s-- > n;)   /* lowest first off the stack */
        t->free_list[t->nfree++] = s;
    return 1;
}

/* A free slot (lock held), or UINT32_MAX: cleared slots first, then a new chunk. */
static uint32_t take_free(gp_key_table *t)
{
    if (t->nfree == 0 && t->nwiping > 0 && t->ops->wipes_done != NULL && t->ops->wipes_done(t->ctx)) {
        for (uint32_t s = 0; s < t->nchunks * GP_KEY_TABLE_CHUNK; s++) {
            if (t->slots[s].state == GP_KEY_SLOT_WIPING) {
                t->slots[s].state = GP_KEY_SLOT_FREE;
                t->free_list[t->nfree++] = s;
            }
        }
        t->nwiping = 0;
    }
    if (t->nfree == 0 && !grow(t))
        return UINT32_MAX;
    return t->free_list[--t->nfree];
}

enum gp_key_where gp_key_table_lookup(gp_key_table *t, uint32_t *ref, uint64_t key_id, uint64_t batch,
                                      uint32_t *slot)
{
    uint32_t s = *ref - 1;
    gp_key_slot *k;

    if (*ref != 0 && s < t->nchunks * GP_KEY_TABLE_CHUNK && t->slots[s].owner == key_id) {
        k = &t->slots[s];
        *slot = s;
        if (k->state == GP_KEY_SLOT_RESIDENT
            || (k->state == GP_KEY_SLOT_UPLOADING && k->batch == batch))   /* filled before the kernel */
            return GP_KEY_RESIDENT;
        return GP_KEY_INLINE;   /* uploaded by a batch still in flight, which may yet fail */
    }
    if ((s = take_free(t)) == UINT32_MAX)
        return GP_KEY_INLINE;
    k = &t->slots[s];
    k->owner = key_id;
    k->batch = batch;
    k->ref = ref;
    k->state = GP_KEY_SLOT_UPLOADING;
    *ref = s + 1;
    *slot = s;
    return GP_KEY_UPLOAD;
}

size_t gp_key_table_take_wipes(gp_key_table *t, uint64_t batch, uint32_t *slots, size_t max)
{
    size_t n = 0;

    while (n < max && t->nwipe > 0) {
        uint32_t s = t->wipe_list[--t->nwipe];

        t->slots[s].wipe_taken = 1;
        t->slots[s].batch = batch;
        slots[n++] = s;
    }
    return n;
}

/* Slot s holds key material no key owns any more (lock held): clear it at the next chance. */
static void to_wipe(gp_key_table *t, uint32_t s)
{
    gp_key_slot *k = &t->slots[s];

    k->owner = 0;
    k->ref = NULL;
    k->state = GP_KEY_SLOT_WIPE;
    k->wipe_taken = 0;
    t->wipe_list[t->nwipe++] = s;
}

void gp_key_table_batch_end(gp_key_table *t, uint64_t batch, int ok, const uint32_t *uploads, size_t nup,
                            const uint32_t *wipes, size_t nwipes)
{
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < nup; i++) {
        gp_key_slot *k = &t->slots[uploads[i]];

        if (k->state != GP_KEY_SLOT_UPLOADING || k->batch != batch)
            continue;
        if (ok && k->owner != 0) {
            k->state = GP_KEY_SLOT_RESIDENT;
            k->ref = NULL;
            continue;
        }
        /* Failed (the slot may hold part of the schedule), or the key was freed meanwhile. */
        if (k->owner != 0 && k->ref != NULL)
            *k->ref = 0;   /* the key is alive (its request was in this batch): it looks again */
        to_wipe(t, uploads[i]);
    }
    for (size_t i = 0; i < nwipes; i++) {
        gp_key_slot *k = &t->slots[wipes[i]];

        if (k->state != GP_KEY_SLOT_WIPE || !k->wipe_taken || k->batch != batch)
            continue;
        k->wipe_taken = 0;
        if (ok) {
            k->state = GP_KEY_SLOT_FREE;
            t->free_list[t->nfree++] = wipes[i];
        } else {
            t->wipe_list[t->nwipe++] = wipes[i];
        }
    }
    pthread_mutex_unlock(&t->lock);
}

void gp_key_table_forget(gp_key_table *t, uint32_t *ref, uint64_t key_id, int may_call)
{
    uint32_t s = *ref - 1;
    gp_key_slot *k;

    if (*ref == 0)
        return;
    pthread_mutex_lock(&t->lock);
    *ref = 0;
    if (s < t->nchunks * GP_KEY_TABLE_CHUNK && (k = &t->slots[s])->owner == key_id) {
        k->owner = 0;
        k->ref = NULL;
        if (k->state == GP_KEY_SLOT_RESIDENT) {
            if (may_call && t->ops->wipe_now != NULL
                && t->ops->wipe_now(t->ctx, gp_key_table_addr(t, s), t->slot_bytes)) {
                k->state = GP_KEY_SLOT_WIPING;
                t->nwiping++;
            } else {
                to_wipe(t, s);
            }
        }
        /* UPLOADING (the key freed while its batch runs, which a caller should not do): the
         * batch's end sees no owner and wipes it. */
    }
    pthread_mutex_unlock(&t->lock);
}
