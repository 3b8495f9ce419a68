/* SPDX-License-Identifier: Apache-2.0 */
/* Staging chunks: an async job copies its data into one before it pauses and its result out after. */
#ifndef GP_STAGE_H
#define GP_STAGE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Without staging, a batch's dispatcher copies every request's input into the pinned arena and
 * every output back, one thread doing memcpy for hundreds of jobs: with many jobs in flight that
 * copy is most of a batch's time on the host. A staged request's job instead copies its own input into a chunk of memory the GPU can
 * read (mapped pinned memory from the cuda executor) right before it pauses, and its output out of
 * it right after it resumes, on the application's own thread; the GPU moves the chunk to and from
 * the arena (kernels/batch_kernel.cu gp_copy_kernel).
 *
 * Chunks come from slabs of GP_STAGE_SLAB_CHUNKS; a job never allocates (no CUDA call on its
 * 32 KiB stack): with none free it runs unstaged and asks for another slab, which the executor adds
 * from a thread's stack (gp_stage_grow) before its next batch, up to the pool's limit.
 */
#define GP_STAGE_MAX_BYTES (32u * 1024u)     /* a TLS record (16 KiB + 256) and speed's 16 KiB fit */
#define GP_STAGE_MIN_BYTES 2048u             /* below a unit the dispatcher's own copy costs little */
/* Input in the first half, output in the second: a batch that fails after the GPU wrote its output
 * is re-run on the CPU from the input, which must still be there. After them, room for a
 * ChaCha20-Poly1305 request's powers of r (kernels/batch_abi.h gp_mac_pows, made from the message's
 * one-time key), which the job's thread writes there (the cuda executor's prepare) so that the GPU
 * fetches them with the data: copied by the dispatcher, they made its part of a ChaCha20-Poly1305
 * batch several times a GCM batch's. The job clears them when it takes its result. */
#define GP_STAGE_POWS_OFF (2u * GP_STAGE_MAX_BYTES)
#define GP_STAGE_POWS_BYTES 2048u
#define GP_STAGE_CHUNK_BYTES (2u * GP_STAGE_MAX_BYTES + GP_STAGE_POWS_BYTES)
#define GP_STAGE_SLAB_CHUNKS 64u             /* 4.1 MiB a slab */

typedef struct gp_stage_chunk {
    uint8_t *host;               /* GP_STAGE_CHUNK_BYTES, 16-byte aligned; output at + GP_STAGE_MAX_BYTES */
    uint64_t dev;                /* the GPU's address of `host`; 0: plain memory (test pools) */
    struct gp_stage_chunk *next; /* in the free list */
} gp_stage_chunk;

typedef struct gp_stage_slab {
    struct gp_stage_slab *next;
    void *mem;
    gp_stage_chunk chunks[GP_STAGE_SLAB_CHUNKS];
} gp_stage_slab;

/* The memory behind the slabs: `alloc` returns `bytes` of it (and the GPU's address of it in *dev,
 * or 0) or NULL; `release` cleanses and frees it. */
typedef void *(*gp_stage_alloc_fn)(void *ctx, size_t bytes, uint64_t *dev);
typedef void (*gp_stage_release_fn)(void *ctx, void *mem, size_t bytes);

/*
 * Free chunks sit in several lists, each behind its own lock: a thread takes and returns chunks at
 * its own list and looks at the others only when that one is empty: with one list, threads of
 * async jobs contended for its lock, and a list per thread of a 16-core host (GP_STAGE_SHARDS)
 * beat two threads to a list.
 */
#define GP_STAGE_SHARDS 16u

typedef struct gp_stage_shard {
    _Alignas(64) pthread_mutex_t lock;
    gp_stage_chunk *free;
} gp_stage_shard;

typedef struct gp_stage_pool {
    pthread_mutex_t lock;        /* growth: the slab list and its count */
    gp_stage_shard shards[GP_STAGE_SHARDS];
    gp_stage_slab *slabs;
    size_t nslabs, max_slabs;
    int want_more;               /* a get found none free, or the pool is new: gp_stage_grow adds a
                                  * slab (__atomic: peeked without the lock) */
    int broken;                  /* an allocation failed: no more tries */
    gp_stage_alloc_fn alloc;
    gp_stage_release_fn release;
    void *ctx;
} gp_stage_pool;

/* An empty pool that may grow to max_bytes; 0 on failure. */
int gp_stage_pool_init(gp_stage_pool *p, size_t max_bytes, gp_stage_alloc_fn alloc, gp_stage_release_fn release,
                       void *ctx);
/* Every chunk must be back. */
void gp_stage_pool_cleanup(gp_stage_pool *p);
/* Add a slab if a get found none free (or none was made yet); on a thread's stack, never a job's. */
void gp_stage_grow(gp_stage_pool *p);
/* A free chunk, or NULL (then the request runs unstaged). Safe on a job's stack. */
gp_stage_chunk *gp_stage_get(gp_stage_pool *p);
void gp_stage_put(gp_stage_pool *p, gp_stage_chunk *c);

/* Whether a request of `len` bytes of data is worth staging. */
static inline int gp_stage_fits(size_t len)
{
    return len >= GP_STAGE_MIN_BYTES && len <= GP_STAGE_MAX_BYTES;
}

#endif
