/* SPDX-License-Identifier: Apache-2.0 */
/* Resident keys: which slot of a GPU's key table holds a key's schedule, so batches stop copying it. */
#ifndef GP_KEY_TABLE_H
#define GP_KEY_TABLE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A key's schedule (2.3 KiB, most of it GCM's powers of H) goes to the GPU once, into a slot of a
 * table in device memory, and later batches point at it: carried in every batch's arena, the
 * schedules cost each batch GPU time to copy in and the dispatcher's planning time to copy them
 * into the pinned arena, for keys that rarely change.
 *
 * A slot's life: FREE -> UPLOADING (a batch copies the schedule in before its kernel; the batch's
 * own requests of that key may use it, other batches in flight carry the key in their arenas as
 * before) -> RESIDENT when that batch completes -> WIPE when the key is freed, and FREE again once
 * the device has cleared it: at once on a stream of the table's own when the freeing thread may
 * make CUDA calls (`wipe_now`), else by the next batch on that GPU (gp_key_table_take_wipes). A
 * batch that fails leaves its uploads to be wiped the same way. The table holds no bytes itself:
 * the device memory is the caller's (ops), this file keeps the bookkeeping, so it is tested without
 * a GPU. One lock per table: a batch takes it once for all its lookups, a freed key once.
 */
#define GP_KEY_TABLE_CHUNK 1024u         /* slots per device allocation */
#define GP_KEY_TABLE_MAX_CHUNKS 64u      /* at most 65536 resident keys per GPU */

typedef struct gp_key_table_ops {
    /* `bytes` of device memory, its device address returned (0: none). */
    uint64_t (*chunk_alloc)(void *ctx, size_t bytes);
    /* Clear and free a chunk (no batch uses the table any more). */
    void (*chunk_free)(void *ctx, uint64_t dev, size_t bytes);
    /* Start clearing `bytes` at `dev` now; 1 if issued. NULL, or 0: the next batch does it. */
    int (*wipe_now)(void *ctx, uint64_t dev, size_t bytes);
    /* 1 once every clear wipe_now issued has completed. */
    int (*wipes_done)(void *ctx);
} gp_key_table_ops;

enum gp_key_slot_state { GP_KEY_SLOT_FREE, GP_KEY_SLOT_UPLOADING, GP_KEY_SLOT_RESIDENT, GP_KEY_SLOT_WIPE,
                         GP_KEY_SLOT_WIPING };

typedef struct gp_key_slot {
    uint64_t owner;              /* the key's id (gp_key.id); 0: none */
    uint64_t batch;              /* UPLOADING, or WIPE taken by a batch: that batch's number */
    uint32_t *ref;               /* UPLOADING: the key's slot reference, reset if the upload fails */
    uint8_t state;               /* enum gp_key_slot_state */
    uint8_t wipe_taken;          /* WIPE: a batch in flight is clearing it */
} gp_key_slot;

typedef struct gp_key_table {
    pthread_mutex_t lock;
    size_t slot_bytes;
    uint64_t chunk[GP_KEY_TABLE_MAX_CHUNKS];   /* device addresses */
    uint32_t nchunks;
    uint32_t max_chunks;
    gp_key_slot *slots;          /* nchunks * GP_KEY_TABLE_CHUNK */
    uint32_t *free_list, nfree;  /* FREE slots */
    uint32_t *wipe_list, nwipe;  /* WIPE slots no batch has taken */
    uint32_t nwiping;            /* slots in WIPING (cleared by wipe_now, not yet confirmed) */
    int broken;                  /* a chunk allocation failed: no more tries */
    uint64_t next_batch;
    const gp_key_table_ops *ops;
    void *ctx;
} gp_key_table;

/* An empty table of slots of slot_bytes, growing to max_slots (rounded up to whole chunks). */
int gp_key_table_init(gp_key_table *t, size_t slot_bytes, uint32_t max_slots, const gp_key_table_ops *ops,
                      void *ctx);
/* Frees the device memory (ops->chunk_free clears it first). */
void gp_key_table_cleanup(gp_key_table *t);

/* A batch's lookups: begin (takes the lock, returns the batch's number), lookups, end. */
uint64_t gp_key_table_batch_begin(gp_key_table *t);

enum gp_key_where { GP_KEY_INLINE, GP_KEY_RESIDENT, GP_KEY_UPLOAD };
/*
 * Where batch `batch` finds the key `key_id` whose reference to this table is *ref (slot + 1, 0:
 * none; the key's own field, changed here under the lock): RESIDENT in slot *slot; UPLOAD to slot
 * *slot, which the batch must fill before its kernel runs (the slot is the key's from now on);
 * INLINE: in the batch's arena as before (no slot free, or another batch in flight uploads it).
 */
enum gp_key_where gp_key_table_lookup(gp_key_table *t, uint32_t *ref, uint64_t key_id, uint64_t batch,
                                      uint32_t *slot);
/* Up to `max` slots of freed keys for batch `batch` to clear before its kernel runs. */
size_t gp_key_table_take_wipes(gp_key_table *t, uint64_t batch, uint32_t *slots, size_t max);
/* Releases the lock taken by batch_begin. */
void gp_key_table_batch_unlock(gp_key_table *t);
/* The batch is over (lock not held), with the slots its lookups returned UPLOAD for and those
 * take_wipes gave it: ok, the uploads are resident and the wipes done; else all are to be wiped. */
void gp_key_table_batch_end(gp_key_table *t, uint64_t batch, int ok, const uint32_t *uploads, size_t nup,
                            const uint32_t *wipes, size_t nwipes);

/* The key is being freed: its slot (if any) is cleared and reused. may_call: the caller may run
 * ops->wipe_now on its stack. */
void gp_key_table_forget(gp_key_table *t, uint32_t *ref, uint64_t key_id, int may_call);

/* The device address of slot s. */
static inline uint64_t gp_key_table_addr(const gp_key_table *t, uint32_t s)
{
    return t->chunk[s / GP_KEY_TABLE_CHUNK] + (uint64_t)(s % GP_KEY_TABLE_CHUNK) * t->slot_bytes;
}

#endif
