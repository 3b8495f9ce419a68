/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda executor's shared state (GPUs, slots, key tables, a wave in flight) and the calls between its files. */
#ifndef GP_CUDA_INTERNAL_H
#define GP_CUDA_INTERNAL_H

/*
 * batching/cuda/ is the cuda executor (gp_exec_cuda, batching/executor.h), a room per phase of a
 * batch. Calls go one way, down this list (a file calls only files below it, and none calls back):
 *
 *   run.c      the executor's table; a batch cut into waves on a slot, each wave through the phases
 *              (and stream-ordered requests to ordered.c)
 *   deliver.c  wait for the GPU, deliver to the callers, wipe (after success or failure)
 *   launch.c   issue: every CUDA call of a wave in stream order, its launches
 *   plan.c     plan, layout, fill: the wave's jobs and the pinned arena (no CUDA call)
 *   move.c     the wave's data across: DMA copies, outputs back in pieces to the callers
 *   ordered.c  stream-ordered device mode: a message's requests launched on the caller's stream
 *   devmem.c   device mode: the callers' CUDA pointers and streams checked
 *   device.c   the GPUs and their memory: opening, closing, arenas, staging pool, resident keys, events
 *
 * Below them all: this header (the structs, and the functions that cross files, each named
 * gp_cuda_*) and shape.h (what a request needs of a wave: static inline, for per-request loops).
 * Every file that makes CUDA calls includes batching/cuda_fault.h last (test builds: any call can
 * be made to fail; a site is its file and line).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "batching/chunk_plan.h"
#include "batching/copy_crew.h"
#include "batching/core/core.h"
#include "batching/key_table.h"
#include "batching/reg_cache.h"
#include "batching/stage.h"
#include "kernels/launch.h"
#include "batching/cuda/shape.h"

#define KEY_STRIDE ALIGN16(GP_KEY_SCHED_DEVICE_BYTES)
#define WIPES_PER_BATCH 64            /* freed keys' slots a batch clears at most */
#define GP_GPU_STEPS 5                /* DMA in, copy kernel in, kernel, copy kernel out, DMA out */
/* Events of a chunked wave (launch.c, issue_chunks): per chunk, its output back, its launch run,
 * its input arrived; then the wave's start. */
#define CHUNK_EVENTS(nchunks) (3 * (nchunks) + 1)
/* Requests of a wave whose input crosses from the caller's registered memory, at most (the rest
 * are copied in as before). */
#define GP_DIRECT_MAX 16
/* What each GPU's pool of stream-ordered blocks keeps reserved across synchronisations (device.c,
 * ordered_pool_open): blocks freed behind a message's work are made again from it without the
 * driver mapping memory anew. */
#define ORD_POOL_KEEP ((uint64_t)64 << 20)

/*
 * One slot per batch in flight: its own stream, pinned and device arenas and layout scratch, on one
 * GPU. Several slots per GPU (knob streams) let a batch copy in while the one before computes and
 * copies out (the queue flushes a second batch while the first runs); knob device=all puts slots on
 * every GPU.
 */
typedef struct gp_cuda_slot {
    pthread_mutex_t lock;        /* held by the leader running a batch in this slot */
    int device;
    gp_kernel_shape shape;       /* block, AES table layout, grid cap (kernels/launch.h) */
    cudaStream_t stream;
    /* A chunked wave's input pieces go ahead of its launches on `ahead`, and its output pieces
     * come back behind them on `back`, each stream ordered after `stream` by events (launch.c,
     * issue_chunks). */
    cudaStream_t ahead, back;
    cudaEvent_t copied;          /* a batch's results are back in `host` */
    cudaEvent_t callers;         /* device mode: the callers' work on the legacy default stream,
                                  * which this slot's batch waits for
                                  * (gp_cuda_issue_after_callers) */
    uint64_t *done;              /* pinned, mapped, DONE_WORDS words (device.c): the last batch's
                                  * ticket, from each block of its last kernel once its results are
                                  * back in `host` (deliver.c, wait_for_gpu) */
    uint64_t ticket;             /* the last batch's */
    /* Knob stats: timing events around a batch's steps on the GPU (DMA in, copy kernel in, batch
     * kernel, copy kernel out, DMA out); NULL without stats. */
    cudaEvent_t step[GP_GPU_STEPS + 1];
    uint8_t *host;               /* pinned, `cap` bytes, mapped: the GPU reads it at this address */
    uint8_t *dev;                /* device, `cap` bytes */
    size_t cap;
    /* Scratch for one batch's layout, grown with the batch. */
    size_t *order, *rank, *wave, order_cap;
    gp_job *jobs;
    size_t *mma;                 /* per request: its GHASH matrix's index in the batch, or NO_MMA
                                  * (plan.c) */
    uint64_t expect_ns;          /* how long this slot's batches take on the GPU (deliver.c,
                                  * wait_for_gpu) */
    uint8_t *where;              /* per request: enum gp_key_where of its key */
    uint32_t *kslot;             /* per request: its key's table slot, where it has one */
    uint32_t *uploads;           /* a batch's UPLOAD slots */
    gp_copy_run *runs;           /* a wave's copy crew runs (in, then out), one per large request */
    /* Events after each piece of the outputs that come back piece by piece (back_in_pieces); a
     * chunked wave's, CHUNK_EVENTS of them (launch.c, issue_chunks). */
    cudaEvent_t *piece_ev;
    size_t piece_ev_n;
    uint32_t wipes[WIPES_PER_BATCH];
} gp_cuda_slot;

/* One GPU's table of resident keys (key_table.h) and what clears its slots. */
typedef struct gp_cuda_keys {
    gp_key_table table;
    int ready;
    int device;
    cudaStream_t wipe_stream;    /* clears a freed key's slot right away (gp_key_table ops) */
    cudaEvent_t wiped;           /* recorded after each such clear */
} gp_cuda_keys;

/* The steps of the opening (gp_cuda_open) whose time the stats report: the runtime's start
 * (cudaGetDeviceCount loads the driver), each GPU's context (its first cudaSetDevice), the kernels'
 * attributes (the module's loading), and the rest: streams, events, memory and threads. */
typedef enum gp_open_step { GP_OPEN_RUNTIME, GP_OPEN_CONTEXTS, GP_OPEN_KERNELS, GP_OPEN_OBJECTS, GP_OPEN_STEPS } gp_open_step;

typedef struct gp_cuda {
    gp_cuda_slot *slots;
    int nslots;
    atomic_uint next;            /* which slot a batch waits for when none is free (run.c,
                                  * slot_take) */
#if GP_TEST_HOOKS
    /* Test hook (cuda_fault_after = N): after N good batches, launch with an empty grid so the
     * runtime itself reports an error, to prove the fallback path. */
    atomic_long fault_after;
    /* Test hook (cuda_silent_after = N): after N good batches with done words, the batch's last
     * kernel is not told where they are, so it ends without writing them. */
    atomic_long silent_after;
    /* Test hook (ghash_mma_any_batch): GCM's tensor-core GHASH for batches of any size, so that
     * the gpu suite's small batches run it (only with build option ghash_mma). */
    int mma_any_batch;
#endif
#if GP_EXPERIMENT_SWITCHES
    /* Experiment lone_launch = 0: small batches take the three launches too (A/B measurements). */
    int lone_off;
    /* Experiment spread = 0: the latency kernels keep a warp per unit (GP_BATCH_NARROW; A/B
     * measurements of kernels/batch_kernel.cu's spread pass). */
    int spread_off;
#endif
    /* Knob stats: where a batch's time goes (nanoseconds summed over batches), printed at unload:
     * planning and copying into the pinned arena, the CUDA calls up to the results being back,
     * delivering results to the callers. */
    atomic_uint_fast64_t st_batches, st_reqs, st_ns_in, st_ns_gpu, st_ns_out, st_staged;
    atomic_uint_fast64_t st_lone;       /* batches run as one launch (gp_lone_kernel) */
    atomic_uint_fast64_t st_ns_issue;   /* of st_ns_gpu: issuing the batch's CUDA calls */
    atomic_uint_fast64_t st_ns_order;   /* of st_ns_issue: ordering it after the callers' streams */
    atomic_uint_fast64_t st_checks, st_ns_check;   /* device mode's pointer checks, their time */
    atomic_uint_fast64_t st_ns_step[GP_GPU_STEPS];   /* GPU time per step (the slots' step events) */
    atomic_uint_fast64_t st_first_ns, st_last_ns;     /* the first batch's start, the last one's end */
    atomic_uint_fast64_t st_grows, st_ns_grow;        /* arena growths after the opening, and their time */
    /* Async jobs' chunks (stage.h): mapped pinned memory, which the GPU reads and writes in place. */
    gp_stage_pool stage;
    int stage_ready;
    gp_copy_crew crew;           /* large requests' host copies (copy_crew.h) */
    int stage_device;            /* also the first GPU: key tables are indexed from it */
    int ngpus;                   /* GPUs with slots: stage_device onwards */
    /* Device mode (engine.h): driver calls, through the runtime's entry-point query (the module
     * links no libcuda; any NULL: device mode is not offered), and each GPU's primary context,
     * where the slots' streams live (ngpus entries). */
    PFN_cuMemGetAddressRange_v3020 mem_range;
    PFN_cuPointerGetAttribute_v4000 ptr_attr;
    PFN_cuPointerGetAttributes_v7000 ptr_attrs;   /* NULL: every check takes the long way (devmem.c) */
    PFN_cuCtxGetCurrent_v4000 ctx_current;
    PFN_cuStreamGetCtx_v9020 stream_ctx;   /* stream-ordered device mode: the caller's stream's
                                            * context (NULL: the mode is not offered) */
    CUcontext *primary;
    /* Stream-ordered device mode's blocks (ordered.c) come from these, one per GPU (ngpus
     * entries): a pool of gpuprov's own (own: destroyed at close), else the GPU's default pool. */
    struct gp_cuda_ord_pool {
        cudaMemPool_t pool;
        int own;
    } *ord_pool;
    /* Staging chunks that work queued on a stream still writes (a released stream-ordered block's
     * last copies): back in the pool once their events have completed (gp_cuda_chunk_retire). */
    pthread_mutex_t retired_lock;
    struct gp_cuda_retired *retired;
    unsigned open_gen;           /* gp_fork_generation() at open: a child never touches the GPU */
    uint64_t open_ns[GP_OPEN_STEPS];   /* the opening's time by step (gp_open_step), for stats */
    gp_cuda_keys keys[GP_KEY_TABLE_GPUS];
} gp_cuda;

/* A batch's end as its wait sees it: the done words its last kernel sets (deliver.c,
 * wait_for_gpu). */
typedef struct gp_batch_end {
    unsigned int blocks;         /* done words the batch's last kernel sets (0: none) */
    uint64_t ticket;
    uint64_t query_at;           /* when a look next asks the event too */
} gp_batch_end;

/*
 * One wave: at most one request per message, so every request starts from the state its message
 * has now. Arena: [unit refs][work][inputs: carried AAD, data][key schedules, powers of r]
 * [GHASH matrices][states][outputs][partials][staged powers of r][staged data], and in the pinned
 * arena only, after all of that, the two copy lists (kernels/batch_abi.h gp_copy), which the copy
 * kernels read there.
 *
 * Three launches. The first copy kernel takes everything up to the outputs to the GPU, staged
 * requests' data (and powers of r) from their chunks into the device-only region at the end (where
 * the batch kernel works on the data in place), and keys the GPU's key table (key_table.h) takes
 * now into their slots, and clears freed keys' slots. Then the batch kernel. The second copy kernel
 * brings states and outputs back, takes staged results to their chunks' output halves, and clears
 * everything of the batch on the device (keys, matrices, states, outputs, partial MACs, staged
 * powers and data). The host waits for that (an event). Without copy calls a batch costs the
 * issuing thread less: each copy call is a driver call. A batch larger than FOLD_MAX (plan.c)
 * either way moves its descriptors and inputs, and its results, by copy calls instead (DMA), and
 * the device is cleared by a memset that runs after the event, off the caller's path. A key
 * resident in the key table is not in the arena at all.
 *
 * A wave runs as named phases, in this order (run.c, run_wave): plan, layout, fill (plan.c),
 * issue (launch.c), wait, deliver, wipe (deliver.c). What each may assume and must leave is said
 * at each one. gp_wave carries what one phase computes for the next; it lives on the stack of the
 * thread that runs the wave.
 */
typedef struct gp_wave {
    gp_engine *e;
    gp_cuda *g;
    gp_cuda_slot *c;
    gp_request *reqs;
    const size_t *idx;           /* the wave's requests: reqs[idx[0..m)] */
    size_t m;
    gp_cuda_keys *kt;            /* the slot's GPU's key table, NULL: keys travel in the arena */
    uint64_t kbatch;             /* the key table's batch (0: none begun) */
    unsigned int flags;          /* GP_BATCH_* for the kernels */
    /* plan: */
    size_t nrefs, nmma, nup, nwipes, nstaged, staged_pieces, nspows;
    size_t nspans;               /* span counters of the wave's requests (kernels/units.h "Spans") */
    size_t ndevmem;              /* device-mode data requests (gp_cuda_issue_after_callers) */
    size_t ndevcopy;             /* of them, those copied through the staged region */
    /* layout: the arena's regions (offsets in both arenas) and the copy lists' room */
    size_t refs_off, work_off, spans_off, in_off, keys_off, mma_off, states_off, out_off, part_off, spows_off, stage_off;
    size_t lists_off, total, nin_cap, nout_cap;
    int fold;                    /* descriptors, inputs and results move by the copy kernels */
    int gen_refs;                /* the refs are made by the copy kernel in (plan.c, GEN_REFS_MIN) */
    gp_unit_ref *refs;
    gp_work *work;
    /* fill: */
    gp_copy *in_list, *out_list;
    size_t nin, nout;
    size_t nruns;                /* the copy crew's runs in c->runs (inputs in fill, outputs in deliver) */
    int pieces_back;             /* issue: outputs back_in_pieces come back piece by piece, each with
                                  * its event (c->piece_ev, in request order), or a chunked wave's
                                  * chunk by chunk, each chunk's pieces with one event */
    /* layout: the chunks of a request alone in its wave (chunk_plan.h; 1: one launch); fill: each
     * chunk's refs, from chunk_ref[j], with the claim counter after them */
    size_t nchunks;
    gp_chunk chunk[GP_CHUNKS_MAX];
    size_t chunk_ref[GP_CHUNKS_MAX], chunk_nref[GP_CHUNKS_MAX];
    size_t early_ev;             /* issue: 1 + the index of the last event after output pieces sent
                                  * back on the back stream, chunk by chunk; 0: none */
    /* layout: requests whose input crosses by DMA from the caller's registered memory
     * (gp_request.direct_in), each holding its registration until the wipe; fill: where in the
     * arena each goes */
    struct {
        size_t req;              /* index in the wave */
        size_t off, len;         /* its input's place in the device arena */
        gp_reg_use use, out_use; /* out_use: direct_out's */
    } direct[GP_DIRECT_MAX];
    size_t ndirect;
    struct piece_source *psrc;   /* the crew's runs taking output pieces to the callers (gp_cuda_pieces_start) */
    size_t npsrc;
    int pieces_started;
    /* issue and wait: */
    gp_batch_end end;
    uint64_t t0, t1, t2, t_issued;   /* stats; t1: the first CUDA call (0: none made) */
    uint64_t t_ordered;          /* stats: ordered after the callers' streams (from t1) */
    uint64_t t_grow;             /* stats: of t1 - t0, growing the slot's arenas (counted apart) */
    int ok;
} gp_wave;

/* device.c: the GPUs and their memory. */
int gp_cuda_open(gp_engine *e);
void gp_cuda_close(gp_engine *e);
int gp_cuda_failed(gp_engine *e, const char *what, cudaError_t err);
int gp_cuda_arena_reserve(gp_engine *e, gp_cuda_slot *c, size_t need);
int gp_cuda_scratch_reserve(gp_cuda_slot *c, size_t n);
int gp_cuda_piece_events(gp_cuda_slot *c, size_t n);
int gp_cuda_device_enter(int dev, int *saved);
void gp_cuda_device_leave(int saved);
gp_cuda_keys *gp_cuda_keys_of(gp_cuda *g, const gp_cuda_slot *sl);
void gp_cuda_key_forget(gp_engine *e, gp_key *k);
gp_stage_pool *gp_cuda_stage_pool(gp_engine *e);
void gp_cuda_chunk_retire(gp_cuda *g, gp_stage_chunk *ch, size_t used, cudaEvent_t done);
size_t gp_cuda_chunks_reap(gp_cuda *g, int wait);

/* ordered.c: stream-ordered device mode. */
int gp_cuda_ordered_run(gp_engine *e, gp_request *r, uint64_t stream);
int gp_cuda_ordered_batch(gp_engine *e, gp_request *reqs, size_t n, uint64_t stream);
int gp_cuda_ordered_wait(gp_engine *e, gp_msg *m, uint8_t tag[16]);
void gp_cuda_ordered_release(gp_msg *m);
void gp_cuda_ordered_release_all(gp_msg *const *ms, size_t n);

/* devmem.c: device mode. */
int gp_cuda_mem_check(gp_engine *e, const void *p, size_t len, int *gpu);
int gp_cuda_stream_check(gp_engine *e, uint64_t stream, int gpu);

/* plan.c: a wave's plan, layout and fill. */
void gp_cuda_wave_plan(gp_wave *wv);
int gp_cuda_wave_layout(gp_wave *wv);
void gp_cuda_wave_fill(gp_wave *wv);

/* move.c: a wave's data across. */
void gp_cuda_runs_finish(gp_wave *wv);
void gp_cuda_direct_release(gp_wave *wv);
cudaError_t gp_cuda_issue_copy_in(gp_wave *wv);
cudaError_t gp_cuda_issue_after_callers(gp_wave *wv);
cudaError_t gp_cuda_issue_copy_out(gp_wave *wv);
cudaError_t gp_cuda_issue_pieces_back(gp_wave *wv);
void gp_cuda_pieces_start(gp_wave *wv);
int gp_cuda_pieces_end(gp_wave *wv, int waited);

/* launch.c: a wave's issue. */
int gp_cuda_wave_issue(gp_wave *wv);

/* deliver.c: a wave's wait, delivery and wipe. */
int gp_cuda_wave_wait(gp_wave *wv);
int gp_cuda_wave_deliver(gp_wave *wv);
void gp_cuda_wave_wipe(gp_wave *wv);

#endif
