/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda executor: a batch as one pinned arena and three launches: copy in, kernel, copy out. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <openssl/crypto.h>

#include "batching/async_wait.h"
#include "batching/chunk_plan.h"
#include "batching/copy_crew.h"
#include "batching/core/core.h"
#include "batching/key_table.h"
#include "batching/kstate.h"
#include "kernels/launch.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

#define ARENA_MIN (1u << 20)
#define ALIGN16(x) (((x) + 15) & ~(size_t)15)
/* Partials and states of different requests never share a 128-byte line, so no finisher can see
 * a line another request's units pulled into its SM's L1 earlier. */
#define ALIGN128(x) (((x) + 127) & ~(size_t)127)
#define STATE_STRIDE ALIGN128(sizeof(gp_msg_state))
#define NO_MMA SIZE_MAX            /* a request without a GHASH matrix (kernels/ghash_mma.h) */
#define MMA_DEDUP 32               /* how far back a request looks for its key's matrix */
#define KEY_STRIDE ALIGN16(GP_KEY_SCHED_DEVICE_BYTES)
#define POWS_STRIDE ALIGN16(sizeof(gp_mac_pows))
#define STAGE_POOL_MAX (256u << 20)   /* mapped pinned memory for staged requests at most */
#define KEY_TABLE_MAX_SLOTS 65536u    /* resident keys per GPU (key_table.h): 150 MB at most */
#define WIPES_PER_BATCH 64            /* freed keys' slots a batch clears at most */
#define GP_GPU_STEPS 5                /* DMA in, copy kernel in, kernel, copy kernel out, DMA out */
/* A batch whose descriptors and inputs, and whose results, are each at most this many bytes has
 * them moved by its copy kernels (no copy calls); a larger one by the copy engines, which move
 * large buffers faster. */
#define FOLD_MAX (1u << 20)
/* A wave of at least this many unit refs has them made on the GPU by its copy kernel in
 * (GP_COPY_REFS entries, a request's run of units each), not written by the host ref by ref and
 * sent across PCIe: the refs grow with the data (one per 2 KiB unit), the entries do not. */
#define GEN_REFS_MIN 2048u
/*
 * Large requests (docs/architecture.md, "Large requests"). A request's data from SPREAD_MIN bytes up
 * is copied into and out of the pinned arena by the copy crew (copy_crew.h) in pieces, and a wave
 * that moves its inputs by DMA hands each piece to the GPU as soon as it is copied, so the host's
 * copies run on several cores at once and overlap the transfer. A request longer than a slice
 * (kstate.h, GP_SLICE_BYTES) runs as consecutive waves of a slice each on one slot
 * (run_leading_slices), which bounds a slot's arenas. A request alone in its wave has its kernel
 * launched in chunks (chunk_plan.h, issue_chunks), so that it runs under the copies.
 */
#define SPREAD_MIN (256u << 10)
/* Events of a chunked wave (issue_chunks): per chunk, its output back, its launch run, its input
 * arrived; then the wave's start. */
#define CHUNK_EVENTS(nchunks) (3 * (nchunks) + 1)
#define SPREAD_PIECE_MIN (128u << 10)
#define SPREAD_PIECE_MAX (1u << 20)
_Static_assert(sizeof(gp_mac_pows) <= GP_STAGE_POWS_BYTES, "a staging chunk holds a request's powers of r");

/* Clear secrets in memory we keep using (a store the compiler may not drop). */
static void gp_wipe(void *p, size_t n)
{
    explicit_bzero(p, n);
}

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
     * come back behind them on `back`, each stream ordered after `stream` by events (issue_chunks). */
    cudaStream_t ahead, back;
    cudaEvent_t copied;          /* a batch's results are back in `host` */
    cudaEvent_t callers;         /* device mode: the callers' work on the legacy default stream,
                                  * which this slot's batch waits for (issue_after_callers) */
    uint64_t *done;              /* pinned, mapped, DONE_WORDS words: the last batch's ticket, from
                                  * each block of its last kernel once its results are back in
                                  * `host` (wait_for_gpu) */
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
    size_t *mma;                 /* per request: its GHASH matrix's index in the batch, or NO_MMA */
    uint64_t expect_ns;          /* how long this slot's batches take on the GPU (wait_for_gpu) */
    uint8_t *where;              /* per request: enum gp_key_where of its key */
    uint32_t *kslot;             /* per request: its key's table slot, where it has one */
    uint32_t *uploads;           /* a batch's UPLOAD slots */
    gp_copy_run *runs;           /* a wave's copy crew runs (in, then out), one per large request */
    /* Events after each piece of the outputs that come back piece by piece (back_in_pieces); a
     * chunked wave's, CHUNK_EVENTS of them (issue_chunks). */
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

typedef struct gp_cuda {
    gp_cuda_slot *slots;
    int nslots;
    atomic_uint next;            /* which slot a batch waits for when none is free (slot_take) */
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
    PFN_cuCtxGetCurrent_v4000 ctx_current;
    CUcontext *primary;
    unsigned open_gen;           /* gp_fork_generation() at open: a child never touches the GPU */
    gp_cuda_keys keys[GP_KEY_TABLE_GPUS];
} gp_cuda;

/* A CUDA failure: the engine marks the executor failed at once (no new message comes to it) and
 * says the process's first in its one log line; the sticky error is cleared where there is one.
 * The GPU named is the thread's current device: every call is made under cudaSetDevice of its
 * slot's device (a cudaSetDevice that fails leaves the one before current). */
static int cuda_failed(gp_engine *e, const char *what, cudaError_t err)
{
    char words[192];
    int dev = -1;

    if ((cudaGetDevice)(&dev) != cudaSuccess)   /* in parentheses: never a test fault's interposition */
        dev = -1;
    snprintf(words, sizeof(words), "%s: %s, %s", what, cudaGetErrorName(err), cudaGetErrorString(err));
    gp_engine_executor_fault(e, &gp_exec_cuda, dev, words);
    (void)cudaGetLastError();
    return 0;
}

static void arena_free(gp_cuda_slot *c)
{
    if (c->dev != NULL)
        (void)cudaSetDevice(c->device);
    if (c->host != NULL) {
        OPENSSL_cleanse(c->host, c->cap);   /* held plaintext and key schedules */
        cudaFreeHost(c->host);
    }
    if (c->dev != NULL) {
        cudaMemset(c->dev, 0, c->cap);
        cudaFree(c->dev);
    }
    c->host = c->dev = NULL;
    c->cap = 0;
}

static int arena_alloc(gp_engine *e, gp_cuda_slot *c, size_t cap);

/* Pools sized at start and grown by doubling: no allocation per operation. */
static int arena_reserve(gp_engine *e, gp_cuda_slot *c, size_t need)
{
    size_t cap = c->cap != 0 ? c->cap : ARENA_MIN;
    gp_cuda *g = e->cuda;
    const uint64_t t0 = e->knobs.stats && c->cap != 0 ? gp_now_ns() : 0;   /* the opening's is not a growth */
    int ok;

    if (need <= c->cap)
        return 1;
    while (cap < need)
        cap *= 2;
    ok = arena_alloc(e, c, cap);
    if (t0 != 0 && g != NULL) {
        atomic_fetch_add_explicit(&g->st_grows, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_grow, gp_now_ns() - t0, memory_order_relaxed);
    }
    return ok;
}

/* The slot's arenas at `cap` bytes each, the old ones cleansed and freed first. */
static int arena_alloc(gp_engine *e, gp_cuda_slot *c, size_t cap)
{
    cudaError_t err;

    arena_free(c);
    if ((err = cudaSetDevice(c->device)) != cudaSuccess)
        return cuda_failed(e, "cudaSetDevice", err);
    if ((err = cudaHostAlloc((void **)&c->host, cap, cudaHostAllocMapped)) != cudaSuccess) {
        c->host = NULL;
        return cuda_failed(e, "cudaHostAlloc", err);
    }
    {
        /* The copy kernels read their lists and the batch's descriptors from here (unified
         * addressing, every 64-bit Linux CUDA platform: the GPU's address is the host's). */
        void *d = NULL;

        if ((err = cudaHostGetDevicePointer(&d, c->host, 0)) != cudaSuccess || d != (void *)c->host)
            return cuda_failed(e, "mapping the pinned arena at its host address",
                               err != cudaSuccess ? err : cudaErrorNotSupported);
    }
    if ((err = cudaMalloc((void **)&c->dev, cap)) != cudaSuccess) {
        c->dev = NULL;
        return cuda_failed(e, "cudaMalloc", err);
    }
    c->cap = cap;
    return 1;
}

/* The staging pool's memory: pinned, mapped into the GPU's address space (with unified addressing
 * the GPU's address is the host's, on every device; cudaHostGetDevicePointer says so), and
 * portable, so every slot's context may use it. */
static void *stage_alloc(void *ctx, size_t bytes, uint64_t *dev)
{
    gp_cuda *g = ctx;
    void *p = NULL, *d = NULL;

    if (cudaSetDevice(g->stage_device) != cudaSuccess
        || cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess || d != p) {
        /* Not the same address for every slot's device: do without staging. */
        (void)cudaGetLastError();
        cudaFreeHost(p);
        return NULL;
    }
    *dev = (uint64_t)(uintptr_t)d;
    return p;
}

static void stage_release(void *ctx, void *mem, size_t bytes)
{
    (void)ctx;
    OPENSSL_cleanse(mem, bytes);   /* held plaintext */
    cudaFreeHost(mem);
}

/* ---- resident keys: the device side of key_table.h ---- */

static void *driver_call(const char *name, unsigned int version);

/* The driver's cuCtxGetCurrent, found once (the module links no libcuda; NULL: not found). */
static PFN_cuCtxGetCurrent_v4000 ctx_get_current;
static pthread_once_t ctx_get_current_once = PTHREAD_ONCE_INIT;

static void ctx_get_current_find(void)
{
    ctx_get_current = (PFN_cuCtxGetCurrent_v4000)driver_call("cuCtxGetCurrent", 4000);
}

/* Make `dev` the calling thread's current device, keeping the one it had in *saved for
 * device_leave to put back: these run on the application's threads too, which may use CUDA. A
 * thread with no CUDA context current has none to put back (-1): the runtime's answer for it is
 * device 0, and setting that would open GPU 0's context, a GPU the executor may not use. */
static int device_enter(int dev, int *saved)
{
    CUcontext current = NULL;

    (void)pthread_once(&ctx_get_current_once, ctx_get_current_find);
    if ((ctx_get_current != NULL && (ctx_get_current(&current) != CUDA_SUCCESS || current == NULL))
        || cudaGetDevice(saved) != cudaSuccess)
        *saved = -1;
    return cudaSetDevice(dev) == cudaSuccess;
}

static void device_leave(int saved)
{
    if (saved >= 0)
        (void)cudaSetDevice(saved);
}

static uint64_t keys_chunk_alloc(void *ctx, size_t bytes)
{
    gp_cuda_keys *k = ctx;
    void *p = NULL;
    int saved;

    if (!device_enter(k->device, &saved) || cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        p = NULL;
    }
    device_leave(saved);
    return (uint64_t)(uintptr_t)p;
}

static void keys_chunk_free(void *ctx, uint64_t dev, size_t bytes)
{
    gp_cuda_keys *k = ctx;
    int saved;

    /* Cleared and freed even where the device cannot be made current (a failing GPU): a chunk
     * skipped here would stay allocated until the process exits, one per closed executor. */
    (void)device_enter(k->device, &saved);
    (void)cudaMemset((void *)(uintptr_t)dev, 0, bytes);   /* synchronous: cleared before the free */
    (void)cudaFree((void *)(uintptr_t)dev);
    (void)cudaGetLastError();
    device_leave(saved);
}

static int keys_wipe_now(void *ctx, uint64_t dev, size_t bytes)
{
    gp_cuda_keys *k = ctx;
    int saved, ok;

    ok = device_enter(k->device, &saved)
         && cudaMemsetAsync((void *)(uintptr_t)dev, 0, bytes, k->wipe_stream) == cudaSuccess
         && cudaEventRecord(k->wiped, k->wipe_stream) == cudaSuccess;
    if (!ok)
        (void)cudaGetLastError();
    device_leave(saved);
    return ok;
}

static int keys_wipes_done(void *ctx)
{
    gp_cuda_keys *k = ctx;
    cudaError_t err = cudaEventQuery(k->wiped);

    if (err != cudaSuccess && err != cudaErrorNotReady)
        (void)cudaGetLastError();
    return err == cudaSuccess;
}

static const gp_key_table_ops keys_ops = {
    .chunk_alloc = keys_chunk_alloc,
    .chunk_free = keys_chunk_free,
    .wipe_now = keys_wipe_now,
    .wipes_done = keys_wipes_done,
};

/* GPU `dev`'s key table (current device: dev); without one, keys go in every batch as before. */
static void keys_open(gp_cuda_keys *k, int dev)
{
    k->device = dev;
    if (cudaStreamCreateWithFlags(&k->wipe_stream, cudaStreamNonBlocking) != cudaSuccess
        || cudaEventCreateWithFlags(&k->wiped, cudaEventDisableTiming) != cudaSuccess
        || !gp_key_table_init(&k->table, KEY_STRIDE, KEY_TABLE_MAX_SLOTS, &keys_ops, k)) {
        (void)cudaGetLastError();
        return;
    }
    k->ready = 1;
}

static void keys_close(gp_cuda_keys *k)
{
    if (k->wipe_stream != NULL || k->wiped != NULL)
        (void)cudaSetDevice(k->device);   /* its stream and event are destroyed on their GPU */
    if (k->ready)
        gp_key_table_cleanup(&k->table);   /* clears and frees every chunk */
    k->ready = 0;
    if (k->wiped != NULL)
        cudaEventDestroy(k->wiped);
    if (k->wipe_stream != NULL)
        cudaStreamDestroy(k->wipe_stream);
    memset(k, 0, sizeof(*k));
}

/* The table of the GPU a slot runs on, or NULL. */
static gp_cuda_keys *keys_of(gp_cuda *g, const gp_cuda_slot *sl)
{
    int d = sl->device - g->stage_device;

    return d >= 0 && d < GP_KEY_TABLE_GPUS && g->keys[d].ready ? &g->keys[d] : NULL;
}

/* gp_executor.key_forget: the key's slots are cleared (from here when this thread may call CUDA,
 * i.e. not on an async job's small stack, else by the next batch on that GPU) and reused. */
static void cuda_key_forget(gp_engine *e, gp_key *k)
{
    gp_cuda *g = e->cuda;
    int may_call = !gp_async_in_job();

    if (g == NULL || g->open_gen != gp_fork_generation())
        return;
    for (int d = 0; d < GP_KEY_TABLE_GPUS; d++)
        if (k->table_slot[d] != 0 && g->keys[d].ready)
            gp_key_table_forget(&g->keys[d].table, &k->table_slot[d], k->id, may_call);
}

/*
 * gp_executor.mem_check: device mode's buffers (engine.h). cudaPointerGetAttributes says what memory
 * p is and on which GPU (an unknown pointer, freed or never allocated here, reads as unregistered
 * host memory); the driver gives the bounds of its allocation and the context that made it: one
 * other than the GPU's primary context (the runtime's, where the slots' streams run) is foreign,
 * its memory not mapped in ours (VMM allocations name none: cuMemMap'd memory is the process's).
 * Pinned host memory is refused too: the mode promises no PCIe traffic. Runs off an async job's
 * small stack (CUDA calls need more).
 */
typedef struct mem_query {
    gp_cuda *g;
    const void *p;
    size_t len;
    int gpu;
} mem_query;

static int mem_query_run(void *arg)
{
    mem_query *q = arg;
    struct cudaPointerAttributes a;
    CUdeviceptr base = 0, at = (CUdeviceptr)(uintptr_t)q->p;
    CUcontext owner = NULL;
    size_t size = 0;
    int saved, st;

    memset(&a, 0, sizeof(a));
    if (cudaPointerGetAttributes(&a, q->p) != cudaSuccess) {
        (void)cudaGetLastError();
        return GP_MEM_NOT_DEVICE;
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return GP_MEM_NOT_DEVICE;
    q->gpu = a.device;
    if (a.device < q->g->stage_device || a.device >= q->g->stage_device + q->g->ngpus)
        return GP_MEM_GPU_NOT_OPEN;
    if (!device_enter(a.device, &saved) || q->g->mem_range(&base, &size, at) != CUDA_SUCCESS)
        st = GP_MEM_NOT_DEVICE;
    else if (q->g->ptr_attr(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, at) == CUDA_SUCCESS && owner != NULL
             && owner != q->g->primary[a.device - q->g->stage_device])
        st = GP_MEM_NOT_DEVICE;   /* another context's: the GPU would fault on it in ours */
    else
        st = at - base > size || q->len > size - (size_t)(at - base) ? GP_MEM_PAST_END : GP_MEM_OK;
    (void)cudaGetLastError();
    device_leave(saved);
    return st;
}

static int cuda_mem_check(gp_engine *e, const void *p, size_t len, int *gpu)
{
    gp_cuda *g = e->cuda;
    mem_query q = { g, p, len, -1 };
    int st;

    if (g == NULL || g->mem_range == NULL || g->ptr_attr == NULL || g->ctx_current == NULL
        || g->open_gen != gp_fork_generation())
        return GP_MEM_NO_EXECUTOR;
    st = gp_async_in_job() ? gp_call_off_job_stack(mem_query_run, &q) : mem_query_run(&q);
    *gpu = q.gpu;
    return st;
}

static gp_stage_pool *cuda_stage_pool(gp_engine *e)
{
    gp_cuda *g = e->cuda;

    return g != NULL && g->stage_ready ? &g->stage : NULL;
}

static cudaError_t step_events_create(gp_engine *e, gp_cuda_slot *sl)
{
    cudaError_t err = cudaSuccess;

    /* Only with stats=steps: between a slot's steps they make each step run alone, and reading
     * them costs the dispatcher a wait, so a run that times its steps is slower than one that does
     * not. */
    for (int k = 0; k <= GP_GPU_STEPS && e->knobs.stats == GP_STATS_STEPS && err == cudaSuccess; k++)
        err = cudaEventCreate(&sl->step[k]);
    return err;
}

/*
 * Launch a kernel in the slot's stream; `early`: allowed to start before the kernel in front of it
 * ends (programmatic dependent launch, kernels/batch_kernel.cu: it waits in griddepcontrol.wait
 * before it reads what that kernel writes). Only where the shape says the code holds that wait.
 */
static cudaError_t launch(gp_cuda_slot *c, const void *fn, dim3 grid, dim3 block, void **args, size_t smem, int early)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg;

    if (!early || !c->shape.early_launch)
        return cudaLaunchKernel(fn, grid, block, args, smem, c->stream);
    memset(&attr, 0, sizeof(attr));
    memset(&cfg, 0, sizeof(cfg));
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelExC(&cfg, fn, args);
}

/*
 * A small batch runs as one launch (kernels/batch_kernel.cu gp_lone_kernel) when it is the only
 * batch in flight and needs nothing but its arena image moved: no staged data or powers, no key
 * uploads or slot clears, no GHASH matrix, descriptors and results small enough for the copy
 * kernels, and refs few enough that the cluster's blocks take them in one pass with at most
 * LONE_REFS_PER_BLOCK each. Its cluster is as many blocks as it has refs, up to
 * GP_LONE_MAX_BLOCKS. Beside other batches a cluster waits for SMs of one GPC to be free
 * together, where separate blocks start on any, so it is only for a batch alone in flight.
 */
#define LONE_REFS_PER_BLOCK 3u

static unsigned int lone_blocks(gp_engine *e, const gp_cuda *g, const gp_cuda_slot *c, size_t nrefs, int fold,
                                size_t nstaged, size_t nspows, size_t nup, size_t nwipes, size_t nmma)
{
    const unsigned int most = c->shape.lone_blocks;

#if GP_EXPERIMENT_SWITCHES
    if (g->lone_off)
        return 0;
#else
    (void)g;
#endif
    if (most == 0 || !fold || nstaged + nspows + nup + nwipes + nmma != 0
        || nrefs > (size_t)most * LONE_REFS_PER_BLOCK
        || atomic_load_explicit(&e->queue.inflight, memory_order_relaxed) > 1)
        return 0;
    return nrefs == 0 ? 1u : nrefs < most ? (unsigned int)nrefs : most;
}

/* The slot's done words (wait_for_gpu): a word for each block of a lone launch or of a copy kernel,
 * mapped at the same address. */
#define DONE_WORDS (GP_LONE_MAX_BLOCKS > GP_COPY_MAX_GRID ? GP_LONE_MAX_BLOCKS : GP_COPY_MAX_GRID)

static cudaError_t done_words_alloc(gp_cuda_slot *c)
{
    void *d = NULL;
    cudaError_t err;

    if ((err = cudaHostAlloc((void **)&c->done, DONE_WORDS * sizeof(*c->done), cudaHostAllocMapped))
        != cudaSuccess) {
        c->done = NULL;
        return err;
    }
    if ((err = cudaHostGetDevicePointer(&d, c->done, 0)) != cudaSuccess || d != (void *)c->done)
        return err != cudaSuccess ? err : cudaErrorInvalidValue;
    for (unsigned int b = 0; b < DONE_WORDS; b++)
        __atomic_store_n(&c->done[b], 0, __ATOMIC_RELAXED);
    c->ticket = 0;
    return cudaSuccess;
}

static cudaError_t launch_lone(gp_cuda_slot *c, const gp_lone_args *a, unsigned int blocks)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg;
    void *args[] = { (void *)a };

    gp_lone_config(&c->shape, blocks, c->stream, &cfg, &attr);
    return cudaLaunchKernelExC(&cfg, (const void *)gp_lone_kernel, args);
}

/* Knob stats: mark the end of step k - 1 (k = 0: the start) in the slot's stream. */
static cudaError_t step_mark(gp_cuda_slot *c, int k)
{
    return c->step[k] != NULL ? cudaEventRecord(c->step[k], c->stream) : cudaSuccess;
}

static void cuda_close(gp_engine *e);

/* The copy crew's threads: the copy_threads knob, else one per online CPU beyond the first, at
 * most 8 (the copies are bound by memory bandwidth: more threads buy little more). */
static int copy_threads(const gp_engine *e)
{
    const long n = gp_online_cpus();

    if (e->knobs.copy_threads > 0)
        return e->knobs.copy_threads;
    return n <= 1 ? 0 : n - 1 < 8 ? (int)(n - 1) : 8;
}

/* A driver function in the form it had in CUDA `version` (the PFN type it is cast to names that
 * version: a later version's form of the same call may take other arguments), or NULL. */
static void *driver_call(const char *name, unsigned int version)
{
    enum cudaDriverEntryPointQueryResult found;
    void *fn = NULL;

    if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) != cudaSuccess
        || found != cudaDriverEntryPointSuccess)
        fn = NULL;
    (void)cudaGetLastError();
    return fn;
}

static int cuda_open(gp_engine *e)
{
    gp_cuda *c;
    int n = 0, first, ngpus, per_gpu;
    cudaError_t err = cudaGetDeviceCount(&n);

    if (err != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        if (e->knobs.backend == GP_BACKEND_CUDA)
            fprintf(stderr, "gpuprov: no usable GPU: %s\n",
                    err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
        return 0;
    }
    gp_exit_guard_runtime_loaded();   /* before the slow part: creating the contexts */
    if (e->knobs.device >= n) {
        fprintf(stderr, "gpuprov: device %d does not exist (%d GPU%s); the cuda executor is off\n",
                e->knobs.device, n, n == 1 ? "" : "s");
        return 0;
    }
    first = e->knobs.device == GP_DEVICE_ALL ? 0 : e->knobs.device;
    ngpus = e->knobs.device == GP_DEVICE_ALL ? n : 1;
    per_gpu = e->knobs.streams > 0 ? e->knobs.streams : 4;
    if ((c = OPENSSL_zalloc(sizeof(*c))) == NULL
        || (c->slots = OPENSSL_zalloc((size_t)ngpus * (size_t)per_gpu * sizeof(*c->slots))) == NULL) {
        OPENSSL_free(c);
        return 0;
    }
#if GP_TEST_HOOKS
    atomic_init(&c->fault_after, e->knobs.test.cuda_fault_after);
    atomic_init(&c->silent_after, e->knobs.test.cuda_silent_after);
    c->mma_any_batch = e->knobs.test.ghash_mma_any_batch;
#endif
#if GP_EXPERIMENT_SWITCHES
    c->lone_off = !e->knobs.exp.lone_launch;
    c->spread_off = !e->knobs.exp.spread;
#endif
    c->stage_device = first;
    c->ngpus = ngpus;
    c->open_gen = gp_fork_generation();
    c->mem_range = (PFN_cuMemGetAddressRange_v3020)driver_call("cuMemGetAddressRange", 3020);
    c->ptr_attr = (PFN_cuPointerGetAttribute_v4000)driver_call("cuPointerGetAttribute", 4000);
    c->ctx_current = (PFN_cuCtxGetCurrent_v4000)driver_call("cuCtxGetCurrent", 4000);
    if ((c->primary = OPENSSL_zalloc((size_t)ngpus * sizeof(*c->primary))) == NULL)
        c->mem_range = NULL;
    c->stage_ready = gp_stage_pool_init(&c->stage, STAGE_POOL_MAX, stage_alloc, stage_release, c);
    gp_copy_crew_init(&c->crew, copy_threads(e));
    e->cuda = c;
    for (int i = 0; i < ngpus * per_gpu; i++) {
        gp_cuda_slot *sl = &c->slots[i];

        pthread_mutex_init(&sl->lock, NULL);
        c->nslots = i + 1;
        sl->device = first + i / per_gpu;
        if ((err = cudaSetDevice(sl->device)) != cudaSuccess
            || (err = gp_kernel_prepare(&sl->shape)) != cudaSuccess
            || (err = cudaStreamCreateWithFlags(&sl->stream, cudaStreamNonBlocking)) != cudaSuccess
            || (err = cudaStreamCreateWithFlags(&sl->ahead, cudaStreamNonBlocking)) != cudaSuccess
            || (err = cudaStreamCreateWithFlags(&sl->back, cudaStreamNonBlocking)) != cudaSuccess
            || (err = cudaEventCreateWithFlags(&sl->copied, cudaEventDisableTiming | cudaEventBlockingSync))
                   != cudaSuccess
            || (err = cudaEventCreateWithFlags(&sl->callers, cudaEventDisableTiming)) != cudaSuccess
            || (err = done_words_alloc(sl)) != cudaSuccess
            || (err = step_events_create(e, sl)) != cudaSuccess) {
            cuda_failed(e, err == cudaErrorNotSupported
                               ? "device setup (the kernel built for this GPU wants a 128 KiB AES table per block, "
                                 "which it cannot hold: build with -Dgpu_sm=<its SM>)"
                               : "device setup", err);
            cuda_close(e);
            return 0;
        }
#if GP_TEST_HOOKS
        /* Test hook (no_early_launch): every launch waits for the one before it ends. */
        if (e->knobs.test.no_early_launch)
            sl->shape.early_launch = 0;
#endif
#if GP_EXPERIMENT_SWITCHES
        /* Experiment small_refs = N: at most N refs take the batch kernel's latency build (0:
         * none; A/B measurements); unset: as many as the GPU holds a warp each (kernels/launch.h). */
        if (e->knobs.exp.small_refs >= 0 && (unsigned int)e->knobs.exp.small_refs < sl->shape.small_refs)
            sl->shape.small_refs = (unsigned int)e->knobs.exp.small_refs;
#endif
        if (!arena_reserve(e, sl, ARENA_MIN)) {
            cuda_close(e);
            return 0;
        }
        if (i % per_gpu == 0 && i / per_gpu < GP_KEY_TABLE_GPUS)
            keys_open(&c->keys[i / per_gpu], sl->device);
        /* The runtime's context of this GPU, current since cudaSetDevice (device mode's check). */
        if (i % per_gpu == 0 && c->ctx_current != NULL && c->primary != NULL
            && c->ctx_current(&c->primary[i / per_gpu]) != CUDA_SUCCESS)
            c->mem_range = NULL;
    }
    /* The queue may now flush a batch while others run (queue.c). */
    atomic_store(&e->max_inflight, c->nslots);
    return 1;
}

/*
 * A batch's last kernel can say that its results are back: each of its blocks sets its done word
 * to the batch's ticket once its share is in the pinned arena (kernels/batch_kernel.cu: the copy
 * kernel out, and gp_lone_kernel's step 4). Reading those words is a load from a cache line the GPU
 * writes; an event query is a driver call, and the event says so only once the kernel has retired
 * and the stream moved on, so a lone call learns of its results sooner from the words. A look at a
 * batch with `blocks` done words reads them, and the event only
 * every GP_QUERY_US (a launch that fails never writes them); a batch without (blocks 0: its results
 * come back by DMA) asks the event each time.
 */
#define GP_QUERY_US 20

typedef struct gp_batch_end {
    unsigned int blocks;         /* done words the batch's last kernel sets (0: none) */
    uint64_t ticket;
    uint64_t query_at;           /* when a look next asks the event too */
} gp_batch_end;

static int words_done(const gp_cuda_slot *c, const gp_batch_end *b)
{
    for (unsigned int i = 0; i < b->blocks; i++)
        if (__atomic_load_n(&c->done[i], __ATOMIC_ACQUIRE) != b->ticket)
            return 0;
    return 1;
}

static cudaError_t batch_look(gp_cuda_slot *c, gp_batch_end *b, uint64_t now)
{
    if (b->blocks == 0)
        return cudaEventQuery(c->copied);
    if (words_done(c, b))
        return cudaSuccess;
    if (now < b->query_at)
        return cudaErrorNotReady;
    b->query_at = now + GP_QUERY_US * 1000u;
    return cudaEventQuery(c->copied);
}

/* The event has completed (or failed): a batch with done words must have set them all. */
static cudaError_t batch_ended(gp_cuda_slot *c, const gp_batch_end *b, cudaError_t err)
{
    if (err == cudaSuccess && !words_done(c, b))
        err = cudaErrorLaunchFailure;   /* its kernel ended without saying its results are back */
    return err;
}

/*
 * Wait for a batch's results as the wait knob says. Left to the runtime (cudaDeviceScheduleAuto),
 * the dispatcher spins for the whole batch. spin: poll (the batch's done words where it has them,
 * else the event; see batch_look above); block: sleep in the driver until the GPU signals (the
 * event is made with cudaEventBlockingSync), then check the words; adaptive: poll up to twice what
 * the slot's recent batches took (from `start`, its first CUDA call) and spin_us more, then sleep
 * in the driver. Whoever waits here, a dispatcher (an async jobs' batch) or a synchronous caller
 * leading its own batch, has nothing else to do until the results are in; it polls rather than
 * sleeping through the batch because a sleeper's wake-up comes late (later among busy threads),
 * which a caller pays on every call and the slot's next batch waits for.
 */
static cudaError_t wait_for_gpu(gp_engine *e, gp_cuda_slot *c, uint64_t start, gp_batch_end *b)
{
    uint64_t spin = (uint64_t)e->knobs.spin_us * 1000u, until, expect = c->expect_ns, t;
    cudaError_t err;

    b->query_at = gp_now_ns() + GP_QUERY_US * 1000u;
    if (e->knobs.wait == GP_WAIT_BLOCK)
        return batch_ended(c, b, cudaEventSynchronize(c->copied));
    until = gp_now_ns() + spin;
    if (e->knobs.wait == GP_WAIT_ADAPTIVE && start + 2 * expect + spin > until)
        until = start + 2 * expect + spin;
    while ((err = batch_look(c, b, t = gp_now_ns())) == cudaErrorNotReady) {
        if (e->knobs.wait == GP_WAIT_ADAPTIVE && t >= until) {
            err = cudaEventSynchronize(c->copied);
            break;
        }
    }
    err = batch_ended(c, b, err);
    /* What the next batch in this slot expects: a running mean of what this one took as seen here
     * (a batch that blocked reads long, and the mean forgets it in a few batches). */
    if (err == cudaSuccess) {
        uint64_t took = gp_now_ns() - start;

        c->expect_ns = expect == 0 ? took : (7 * expect + took) / 8;
    }
    return err;
}

static void cuda_close(gp_engine *e)
{
    gp_cuda *c = e->cuda;

    if (c == NULL)
        return;
    if (e->knobs.stats && atomic_load(&c->st_batches) > 0) {
        double nb = (double)atomic_load(&c->st_batches);
        /* The share of the slots' time from the first batch to the last that they held a batch. */
        double span = (double)(atomic_load(&c->st_last_ns) - atomic_load(&c->st_first_ns)) * c->nslots;
        double held = (double)(atomic_load(&c->st_ns_in) + atomic_load(&c->st_ns_gpu) + atomic_load(&c->st_ns_out));
        char steps[160] = "";   /* the GPU's own time per step, with stats=steps */

        gp_log_line("gpuprov cuda: batches=%.0f lone_launches=%.0f mean_reqs=%.1f staged=%.1f early_launch=%d per batch: "
                    "host_in_us=%.1f gpu_us=%.1f host_out_us=%.1f slots_busy=%.2f\n", nb,
                    (double)atomic_load(&c->st_lone), (double)atomic_load(&c->st_reqs) / nb,
                    (double)atomic_load(&c->st_staged) / nb, c->nslots > 0 && c->slots[0].shape.early_launch,
                    (double)atomic_load(&c->st_ns_in) / nb / 1e3,
                    (double)atomic_load(&c->st_ns_gpu) / nb / 1e3, (double)atomic_load(&c->st_ns_out) / nb / 1e3,
                    span > 0 ? held / span : 0.0);
        if (e->knobs.stats == GP_STATS_STEPS)
            snprintf(steps, sizeof(steps), " dma_in_us=%.1f copy_in_us=%.1f kernel_us=%.1f copy_out_us=%.1f dma_out_us=%.1f",
                     (double)atomic_load(&c->st_ns_step[0]) / nb / 1e3, (double)atomic_load(&c->st_ns_step[1]) / nb / 1e3,
                     (double)atomic_load(&c->st_ns_step[2]) / nb / 1e3, (double)atomic_load(&c->st_ns_step[3]) / nb / 1e3,
                     (double)atomic_load(&c->st_ns_step[4]) / nb / 1e3);
        gp_log_line("gpuprov cuda: per batch on the GPU: issue_us=%.1f%s; arena growths=%.0f taking %.1f ms\n",
                    (double)atomic_load(&c->st_ns_issue) / nb / 1e3, steps, (double)atomic_load(&c->st_grows),
                    (double)atomic_load(&c->st_ns_grow) / 1e6);
    }
    atomic_store(&e->max_inflight, 1);
    for (int i = 0; i < c->nslots; i++) {
        gp_cuda_slot *sl = &c->slots[i];

        (void)cudaSetDevice(sl->device);   /* the slot's objects are destroyed on their GPU */
        arena_free(sl);
        if (sl->copied != NULL)
            cudaEventDestroy(sl->copied);
        if (sl->callers != NULL)
            cudaEventDestroy(sl->callers);
        if (sl->done != NULL)
            cudaFreeHost(sl->done);
        for (int k = 0; k <= GP_GPU_STEPS; k++)
            if (sl->step[k] != NULL)
                cudaEventDestroy(sl->step[k]);
        if (sl->stream != NULL)
            cudaStreamDestroy(sl->stream);
        if (sl->ahead != NULL)
            cudaStreamDestroy(sl->ahead);
        if (sl->back != NULL)
            cudaStreamDestroy(sl->back);
        OPENSSL_free(sl->order);
        OPENSSL_free(sl->rank);
        OPENSSL_free(sl->wave);
        OPENSSL_free(sl->jobs);
        OPENSSL_free(sl->mma);
        OPENSSL_free(sl->where);
        OPENSSL_free(sl->kslot);
        OPENSSL_free(sl->uploads);
        OPENSSL_free(sl->runs);
        for (size_t k = 0; k < sl->piece_ev_n; k++)
            cudaEventDestroy(sl->piece_ev[k]);
        OPENSSL_free(sl->piece_ev);
        pthread_mutex_destroy(&sl->lock);
    }
    for (int d = 0; d < GP_KEY_TABLE_GPUS; d++)
        keys_close(&c->keys[d]);
    if (c->stage_ready)
        gp_stage_pool_cleanup(&c->stage);   /* no job holds a chunk: the engine is being freed */
    gp_copy_crew_stop(&c->crew);
    OPENSSL_free(c->slots);
    OPENSSL_free(c->primary);
    OPENSSL_free(c);
    e->cuda = NULL;
}

static uint32_t op_of(const gp_request *r)
{
    switch (r->kind) {
    case GP_REQ_AAD:
        return GP_OP_AAD;
    case GP_REQ_CRYPT:
        return r->msg->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT;
    default:
        return GP_OP_TAG;   /* TAG and VERIFY both compute the tag; VERIFY compares on the host */
    }
}

/* Bytes placed before a request's data so that its body starts on a 16-byte boundary (the units
 * then move it with 16-byte vector accesses). */
static size_t body_pad(const gp_job *j)
{
    return (16 - (size_t)(j->head_len % 16)) % 16;
}

/* Arena bytes a request's data takes (input, output or staged), its pad included. */
static size_t data_bytes(const gp_job *j)
{
    return ALIGN16(body_pad(j) + j->len);
}

/* Scratch arrays for a batch of n requests, grown by doubling. */
static int scratch_reserve(gp_cuda_slot *c, size_t n)
{
    size_t cap = c->order_cap != 0 ? c->order_cap : 64;

    if (n <= c->order_cap)
        return 1;
    while (cap < n)
        cap *= 2;
    OPENSSL_free(c->order);
    OPENSSL_free(c->rank);
    OPENSSL_free(c->wave);
    OPENSSL_free(c->jobs);
    OPENSSL_free(c->mma);
    OPENSSL_free(c->where);
    OPENSSL_free(c->kslot);
    OPENSSL_free(c->uploads);
    OPENSSL_free(c->runs);
    c->order = OPENSSL_malloc(cap * sizeof(*c->order));
    c->rank = OPENSSL_malloc(cap * sizeof(*c->rank));
    c->wave = OPENSSL_malloc(cap * sizeof(*c->wave));
    c->jobs = OPENSSL_malloc(cap * sizeof(*c->jobs));
    c->mma = OPENSSL_malloc(cap * sizeof(*c->mma));
    c->where = OPENSSL_malloc(cap * sizeof(*c->where));
    c->kslot = OPENSSL_malloc(cap * sizeof(*c->kslot));
    c->uploads = OPENSSL_malloc(cap * sizeof(*c->uploads));
    c->runs = OPENSSL_malloc(cap * sizeof(*c->runs));
    c->order_cap = c->order && c->rank && c->wave && c->jobs && c->mma && c->where && c->kslot && c->uploads
                   && c->runs ? cap : 0;
    return c->order_cap != 0;
}

/* Is r's data in a chunk the GPU reads and writes itself (stage.h)? */
static int staged_on_gpu(const gp_request *r)
{
    return r->kind == GP_REQ_CRYPT && r->stage != NULL && r->stage->dev != 0 && r->len > 0;
}

/* Whether request r's units take powers of r made for its message (ChaCha20-Poly1305), which the
 * batch carries beside the key (gp_work.pows_off)... */
static int carries_pows(const gp_request *r, const gp_job *j)
{
    return j->nunits > 0 && r->msg->st.alg == GP_ALG_CHACHA20_POLY1305;
}

/* ...or fetches from its staging chunk, where its job's thread wrote them (cuda_prepare). */
static int pows_staged(const gp_request *r, const gp_job *j)
{
    return carries_pows(r, j) && r->stage_pows && staged_on_gpu(r);
}

/*
 * Device mode (engine.h): r's data is CUDA memory on the slot's GPU. The batch kernel reads and
 * writes it where it is (gp_work offsets are addresses minus the arena's, kernels/batch_abi.h) when
 * its body starts on a 16-byte boundary in both buffers, as in the arena (body_pad: the units'
 * vector accesses, kernels/units.h); a caller whose buffers keep the message's offsets, from an
 * allocation's start, always has that. Otherwise the copy kernels move it through the device-only
 * staged region, as a staged request's data. Neither takes room in the pinned arena or a byte
 * across PCIe, and no host code touches it.
 */
static int devmem_data(const gp_request *r)
{
    return r->devmem && r->kind == GP_REQ_CRYPT && r->len > 0;
}

static int devmem_in_place(const gp_request *r, const gp_job *j)
{
    return devmem_data(r) && (((uintptr_t)r->in + j->head_len) & 15) == 0
           && (((uintptr_t)r->out + j->head_len) & 15) == 0;
}

static int devmem_copied(const gp_request *r, const gp_job *j)
{
    return devmem_data(r) && !devmem_in_place(r, j);
}

/* Pieces of at most GP_COPY_PIECE that `len` bytes take in a copy list. */
static size_t copy_pieces(uint64_t len)
{
    return (size_t)((len + GP_COPY_PIECE - 1) / GP_COPY_PIECE);
}

/* Append src -> dst (src 0: zeros) to a copy list as copy_pieces(len) entries. */
static void copy_add(gp_copy *list, size_t *n, uint64_t src, uint64_t dst, uint64_t len, uint32_t flags)
{
    for (uint64_t o = 0; o < len; o += GP_COPY_PIECE) {
        gp_copy *p = &list[(*n)++];

        p->src = src != 0 ? src + o : 0;
        p->dst = dst + o;
        p->len = len - o < GP_COPY_PIECE ? len - o : GP_COPY_PIECE;
        p->flags = flags;
        p->reserved = 0;
    }
}

/* Does request r's data go through the copy crew? (Never device-mode data: the host must not
 * touch it, and it takes no arena room.) */
static int spreads(const gp_request *r)
{
    return r->kind == GP_REQ_CRYPT && !staged_on_gpu(r) && !r->devmem && r->len >= SPREAD_MIN;
}

/* The crew's piece for `len` bytes: about a sixteenth, 64 KiB-aligned, within the bounds. */
static size_t spread_piece(size_t len)
{
    size_t p = ((len / 16) + 65535) & ~(size_t)65535;

    return p < SPREAD_PIECE_MIN ? SPREAD_PIECE_MIN : p > SPREAD_PIECE_MAX ? SPREAD_PIECE_MAX : p;
}

/*
 * Does request r, of a wave of m requests, have its output come back piece by piece, the copy
 * crew taking each piece to the caller as it lands (a DMA wave only)? The caller's output changes
 * before the wave is known to have succeeded; the request can still be re-run on the host from
 * its message's state, which moves only once every piece is in, because its input is intact:
 * untouched where the output does not overlap it, or, in place, put back from the pinned arena's
 * copy (pieces_end) before the request is handed back as failed. In place only where the
 * request is the wave's only one: there its pieces overlap the copy out with the transfers, while
 * in a wave of many (async jobs) the pieces' copies and waits cost more than they overlap
 * (RESULTS, "A lone caller from pageable memory"), and such an output is copied once the whole
 * wave is back, as one that overlaps its input partly always is.
 */
static int back_in_pieces(const gp_request *r, size_t m)
{
    return spreads(r) && ((r->out == r->in && m == 1) || r->out + r->len <= r->in || r->in + r->len <= r->out);
}

/* Bytes of the piece at `off` of a request's `len` bytes cut in pieces of `piece`: the last is short. */
static size_t piece_len(size_t len, size_t off, size_t piece)
{
    return len - off < piece ? len - off : piece;
}

/* The end of pieces [0, n) of a request's `len` bytes cut in pieces of `piece`. */
static size_t pieces_end_byte(size_t len, size_t n, size_t piece)
{
    return n * piece < len ? n * piece : len;
}

/* Pieces of a back_in_pieces request's output. */
static size_t out_pieces(const gp_request *r)
{
    const size_t p = spread_piece(r->len);

    return (r->len + p - 1) / p;
}

static uint64_t gpu_addr(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

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
 * issuing thread less: each copy call is a driver call. A batch larger than FOLD_MAX either way moves
 * its descriptors and inputs, and its results, by copy calls instead (DMA), and the device is
 * cleared by a memset that runs after the event, off the caller's path. A key resident in the key
 * table is not in the arena at all.
 *
 * A wave runs as named phases, in this order (run_wave): plan, layout, fill, issue, wait, deliver,
 * wipe. What each may assume and must leave is said at each one. gp_wave carries what one phase
 * computes for the next; it lives on the stack of the thread that runs the wave.
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
    size_t ndevmem;              /* device-mode data requests (issue_after_callers) */
    size_t ndevcopy;             /* of them, those copied through the staged region */
    /* layout: the arena's regions (offsets in both arenas) and the copy lists' room */
    size_t refs_off, work_off, spans_off, in_off, keys_off, mma_off, states_off, out_off, part_off, spows_off, stage_off;
    size_t lists_off, total, nin_cap, nout_cap;
    int fold;                    /* descriptors, inputs and results move by the copy kernels */
    int gen_refs;                /* the refs are made by the copy kernel in (GEN_REFS_MIN) */
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
    struct piece_source *psrc;   /* the crew's runs taking output pieces to the callers (pieces_start) */
    size_t npsrc;
    int pieces_started;
    /* issue and wait: */
    gp_batch_end end;
    uint64_t t0, t1, t2, t_issued;   /* stats; t1: the first CUDA call (0: none made) */
    uint64_t t_grow;             /* stats: of t1 - t0, growing the slot's arenas (counted apart) */
    int ok;
} gp_wave;

/*
 * plan: each request's job (gp_job_plan) on its message's state as it is now (a wave holds at most
 * one request per message), the unit refs they make, where each key is (resident in the GPU's key
 * table, uploaded by this wave, or carried in its arena: the table stays locked only for the
 * lookups), and which requests take a GHASH matrix (one copy per key). Touches no CUDA state and
 * no arena.
 */
static void wave_plan(gp_wave *wv)
{
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;

    for (size_t i = 0; i < m; i++) {
        gp_request *r = &reqs[idx[i]];
        uint64_t len = r->kind == GP_REQ_AAD || r->kind == GP_REQ_CRYPT ? r->len : 0;

        gp_job_plan(&c->jobs[i], &r->msg->st, op_of(r), len, (uint32_t)r->aad_len);
        wv->nrefs += !gp_lead_idle(&c->jobs[i], &r->msg->st) + c->jobs[i].nunits;
        wv->nspans += c->jobs[i].nspans;
        if (gp_alg_is_aes(r->msg->st.alg))
            wv->flags |= GP_BATCH_AES;
        if (staged_on_gpu(r)) {
            wv->nstaged++;
            wv->staged_pieces += copy_pieces(r->len);
        } else if (devmem_copied(r, &c->jobs[i])) {
            wv->ndevcopy++;
            wv->staged_pieces += copy_pieces(r->len);
        }
        wv->nspows += pows_staged(r, &c->jobs[i]);
        wv->ndevmem += devmem_data(r);
    }
    /* Where each key is: resident, to be uploaded by this batch, or carried in its arena. */
    if (wv->kt != NULL) {
        int d = (int)(wv->kt - g->keys);

        wv->kbatch = gp_key_table_batch_begin(&wv->kt->table);
        for (size_t i = 0; i < m; i++) {
            gp_key *k = reqs[idx[i]].msg->key;

            c->where[i] = (uint8_t)gp_key_table_lookup(&wv->kt->table, &k->table_slot[d], k->id, wv->kbatch, &c->kslot[i]);
            if (c->where[i] == GP_KEY_UPLOAD)
                c->uploads[wv->nup++] = c->kslot[i];
        }
        wv->nwipes = gp_key_table_take_wipes(&wv->kt->table, wv->kbatch, c->wipes, WIPES_PER_BATCH);
        gp_key_table_batch_unlock(&wv->kt->table);
    } else {
        memset(c->where, GP_KEY_INLINE, m * sizeof(*c->where));
    }
    for (size_t i = 0; i < m; i++) {
        const gp_request *r = &reqs[idx[i]];

        c->mma[i] = NO_MMA;
#if GP_TEST_HOOKS
        const uint64_t mma_min_warps = g->mma_any_batch ? 0 : gp_kernel_warps_at_once(&c->shape);
#else
        const uint64_t mma_min_warps = gp_kernel_warps_at_once(&c->shape);
#endif

        if (gp_ghash_mma_wanted(r->msg->st.alg, c->jobs[i].nunits, wv->nrefs - m, mma_min_warps)
            && gp_key_ghmma_get(r->msg->key) != NULL) {
            /* One copy per key: the same key among the batch's last MMA_DEDUP requests with one. */
            for (size_t k = i, seen = 0; k-- > 0 && seen < MMA_DEDUP && c->mma[i] == NO_MMA;) {
                if (c->mma[k] == NO_MMA)
                    continue;
                seen++;
                if (reqs[idx[k]].msg->key == r->msg->key)
                    c->mma[i] = c->mma[k];
            }
            if (c->mma[i] == NO_MMA)
                c->mma[i] = wv->nmma++;
        }
    }
}

/*
 * layout: the arena's regions, in the order the copy kernels and the wipe rely on (everything up to
 * the outputs goes in; states and partials come back; keys to the end are cleared), whether the
 * wave folds its copies into the copy kernels, and room in the pinned arena for both copy lists,
 * sized for the most entries they can take. 0: no arena (nothing has been written).
 */
static int piece_events(gp_cuda_slot *c, size_t n);

static int wave_layout(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;
    size_t off;

    wv->nchunks = 1;
    if (m == 1 && back_in_pieces(&reqs[idx[0]], 1)) {
        const gp_job *j = &c->jobs[0];

        wv->nchunks = gp_chunk_plan(j->len, j->head_len, j->body_len, j->nunits, spread_piece(j->len), wv->chunk);
        if (wv->nchunks > 1 && !piece_events(c, CHUNK_EVENTS(wv->nchunks)))
            wv->nchunks = 1;
    }
    /* + a claim counter per launch */
    wv->work_off = ALIGN16(wv->refs_off + (wv->nrefs + wv->nchunks) * sizeof(gp_unit_ref));
    wv->spans_off = ALIGN16(wv->work_off + m * sizeof(gp_work));   /* copied in with the descriptors */
    wv->in_off = ALIGN16(wv->spans_off + wv->nspans * sizeof(uint32_t));
    off = wv->in_off;
    for (size_t i = 0; i < m; i++)
        off += ALIGN16(c->jobs[i].aad_len)
               + (staged_on_gpu(&reqs[idx[i]]) || devmem_data(&reqs[idx[i]]) ? 0 : data_bytes(&c->jobs[i]));
    wv->keys_off = ALIGN128(off);
    off = wv->keys_off;
    for (size_t i = 0; i < m; i++)
        off += (c->where[i] != GP_KEY_RESIDENT ? KEY_STRIDE : 0)
               + (carries_pows(&reqs[idx[i]], &c->jobs[i]) && !pows_staged(&reqs[idx[i]], &c->jobs[i])
                  ? POWS_STRIDE : 0);
    wv->mma_off = ALIGN128(off);
    wv->states_off = wv->mma_off + wv->nmma * sizeof(gp_ghash_mma);
    wv->out_off = wv->states_off + m * STATE_STRIDE;
    off = wv->out_off;
    for (size_t i = 0; i < m; i++)
        off += staged_on_gpu(&reqs[idx[i]]) || devmem_data(&reqs[idx[i]]) ? 0
               : reqs[idx[i]].kind == GP_REQ_CRYPT ? data_bytes(&c->jobs[i])
               : reqs[idx[i]].kind == GP_REQ_AAD ? 0 : 16;
    wv->part_off = ALIGN128(off);
    off = wv->part_off;
    for (size_t i = 0; i < m; i++)
        off += ALIGN128((size_t)gp_partials_bytes(&c->jobs[i]));
    wv->spows_off = ALIGN128(off);   /* staged powers: device only, like staged data */
    off = wv->spows_off + wv->nspows * POWS_STRIDE;
    wv->stage_off = ALIGN128(off);
    off = wv->stage_off;
    for (size_t i = 0; i < m; i++)
        if (staged_on_gpu(&reqs[idx[i]]) || devmem_copied(&reqs[idx[i]], &c->jobs[i]))
            off += data_bytes(&c->jobs[i]);
    wv->total = off;
    /* The copy lists, sized for the most entries they can take. */
    wv->fold = wv->out_off <= FOLD_MAX && wv->part_off - wv->states_off <= FOLD_MAX;
    if (wv->fold)
        wv->nchunks = 1;   /* the copy kernels move a folded wave whole (never one of chunk size) */
    wv->gen_refs = wv->nrefs >= GEN_REFS_MIN;
    wv->nin_cap = (wv->fold ? copy_pieces(wv->out_off) : 0) + wv->staged_pieces + wv->nspows * copy_pieces(sizeof(gp_mac_pows))
              + wv->nup + wv->nwipes
              /* a request's units in entries of GP_COPY_REFS_MAX, its lead, and the claim
               * counters (each chunk's units may start a short entry of their own) */
              + (wv->gen_refs ? (wv->nrefs + GP_COPY_REFS_MAX - 1) / GP_COPY_REFS_MAX + 2 * m + 2 * wv->nchunks : 0);
    wv->lists_off = ALIGN16(wv->total);
    wv->nout_cap = wv->staged_pieces + copy_pieces(wv->states_off - wv->keys_off) + copy_pieces(wv->part_off - wv->states_off)
               + copy_pieces(wv->stage_off - wv->part_off);
    {
        const size_t need = wv->lists_off + (wv->nin_cap + wv->nout_cap) * sizeof(gp_copy);
        const uint64_t g0 = e->knobs.stats && need > c->cap ? gp_now_ns() : 0;

        if (!arena_reserve(e, c, need))
            return 0;
        if (g0 != 0)
            wv->t_grow = gp_now_ns() - g0;
    }
    wv->in_list = (gp_copy *)(c->host + wv->lists_off);
    wv->out_list = wv->in_list + wv->nin_cap;

    wv->refs = (gp_unit_ref *)(c->host + wv->refs_off);
    wv->work = (gp_work *)(c->host + wv->work_off);
    return 1;
}

/* The refs *ref.. of request i: n of them, units first, first + 1, ...; written into the pinned
 * arena, or (gen_refs) as GP_COPY_REFS entries of the copy kernel in, which makes them on the GPU. */
static void put_refs(gp_wave *wv, size_t *ref, size_t i, uint32_t first, uint32_t n)
{
    for (uint32_t k = 0; k < n;) {
        const uint32_t len = wv->gen_refs ? (n - k < GP_COPY_REFS_MAX ? n - k : GP_COPY_REFS_MAX) : 1;
        const uint64_t src = (uint64_t)i << 32 | (uint32_t)(first + k);

        if (wv->gen_refs) {
            gp_copy *p = &wv->in_list[wv->nin++];

            *p = (gp_copy){ .src = src, .dst = gpu_addr(wv->c->dev + wv->refs_off + *ref * sizeof(gp_unit_ref)),
                            .len = len, .flags = GP_COPY_REFS };
        } else {
            wv->refs[*ref] = gp_copy_ref(src, 0);
        }
        *ref += len;
        k += len;
    }
}

/*
 * fill: the pinned arena as the kernels read it: each request's work descriptor, carried AAD and
 * input, key schedule and powers unless resident or staged, GHASH matrix, state; the unit refs
 * (units first, the lead last) and the claim counter; the copy lists. Staged requests' data stays
 * in their chunks (only copy entries name it). No CUDA call.
 */
static void wave_fill(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;

    size_t in_pos = wv->in_off, part_pos = wv->part_off, out_pos = wv->out_off, stage_pos = wv->stage_off, ref = 0, mma_put = 0;
    size_t key_pos = wv->keys_off, spows_pos = wv->spows_off, span_pos = wv->spans_off;

    for (size_t i = 0; i < m; i++) {
        const gp_request *r = &reqs[idx[i]];
        gp_work *w = &wv->work[i];
        size_t pad = body_pad(&c->jobs[i]);

        memset(w, 0, sizeof(*w));
        w->job = c->jobs[i];
        if (w->job.aad_len > 0) {   /* carried AAD, then the request's own input */
            w->job.aad_off = in_pos;
            memcpy(c->host + in_pos, r->aad, w->job.aad_len);
            in_pos += ALIGN16(w->job.aad_len);
        }
        w->state_off = wv->states_off + i * STATE_STRIDE;
        w->partials_off = part_pos;
        if (staged_on_gpu(r)) {   /* in place, in the device-only region */
            w->in_off = w->out_off = stage_pos + pad;
            copy_add(wv->in_list, &wv->nin, r->stage->dev, gpu_addr(c->dev + w->in_off), w->job.len, 0);
            /* The chunk's output half: its input half must survive a batch that fails. */
            copy_add(wv->out_list, &wv->nout, gpu_addr(c->dev + w->in_off), r->stage->dev + GP_STAGE_MAX_BYTES,
                     w->job.len, wv->fold ? GP_COPY_WIPE_SRC : 0);
            stage_pos += data_bytes(&w->job);
        } else if (devmem_copied(r, &w->job)) {   /* device memory, through the staged region */
            w->in_off = w->out_off = stage_pos + pad;
            copy_add(wv->in_list, &wv->nin, gpu_addr(r->in), gpu_addr(c->dev + w->in_off), w->job.len, 0);
            copy_add(wv->out_list, &wv->nout, gpu_addr(c->dev + w->in_off), gpu_addr(r->out), w->job.len,
                     wv->fold ? GP_COPY_WIPE_SRC : 0);
            stage_pos += data_bytes(&w->job);
        } else if (devmem_data(r)) {   /* device memory, in place */
            w->in_off = gpu_addr(r->in) - gpu_addr(c->dev);
            w->out_off = gpu_addr(r->out) - gpu_addr(c->dev);
        } else {
            w->in_off = in_pos + pad;
            w->out_off = r->kind == GP_REQ_CRYPT ? out_pos + pad : out_pos;
            if (spreads(r) && gp_copy_start(&wv->g->crew, &c->runs[wv->nruns], c->host + w->in_off, r->in,
                                            w->job.len, spread_piece(w->job.len), GP_COPY_STREAMING))
                wv->nruns++;   /* the crew copies it while the wave fills; issue waits for it */
            else if (w->job.len > 0)
                memcpy(c->host + w->in_off, r->in, w->job.len);
            in_pos += data_bytes(&w->job);
            out_pos += r->kind == GP_REQ_CRYPT ? data_bytes(&w->job) : r->kind == GP_REQ_AAD ? 0 : 16;
        }
        /* The key as the device reads it (not the host's bitsliced round keys): in its table
         * slot, or here; a Poly1305 request's units take its message's powers of r. */
        if (c->where[i] != GP_KEY_RESIDENT) {
            memcpy(c->host + key_pos, gp_key_sched_get(r->msg->key), GP_KEY_SCHED_DEVICE_BYTES);
            w->key_off = key_pos;
            /* From the pinned arena: the device arena's copy is made by the same launch. */
            if (c->where[i] == GP_KEY_UPLOAD)
                copy_add(wv->in_list, &wv->nin, gpu_addr(c->host + key_pos), gp_key_table_addr(&wv->kt->table, c->kslot[i]),
                         GP_KEY_SCHED_DEVICE_BYTES, 0);
            key_pos += KEY_STRIDE;
        }
        if (c->where[i] != GP_KEY_INLINE)   /* resident, or uploaded before the kernel */
            w->key_off = gp_key_table_addr(&wv->kt->table, c->kslot[i]) - gpu_addr(c->dev);
        if (pows_staged(r, &w->job)) {
            copy_add(wv->in_list, &wv->nin, r->stage->dev + GP_STAGE_POWS_OFF, gpu_addr(c->dev + spows_pos),
                     sizeof(gp_mac_pows), 0);
            w->pows_off = spows_pos;
            spows_pos += POWS_STRIDE;
        } else if (carries_pows(r, &w->job)) {
            memcpy(c->host + key_pos, gp_kstate_pows(r->msg, gp_key_sched_get(r->msg->key), &c->jobs[i]),
                   sizeof(gp_mac_pows));
            w->pows_off = key_pos;
            key_pos += POWS_STRIDE;
        }
        if (c->mma[i] != NO_MMA) {
            w->ghmma_off = wv->mma_off + c->mma[i] * sizeof(gp_ghash_mma);
            if (c->mma[i] == mma_put) {   /* the key's first request in the batch */
                memcpy(c->host + w->ghmma_off, gp_key_ghmma_get(r->msg->key), sizeof(gp_ghash_mma));
                mma_put++;
            }
        }
        memcpy(c->host + w->state_off, &r->msg->st, sizeof(gp_msg_state));
        if (w->job.nspans != 0) {
            w->spans_off = (uint32_t)span_pos;   /* the descriptors' region: well under 4 GiB */
            memset(c->host + span_pos, 0, w->job.nspans * sizeof(uint32_t));
            span_pos += w->job.nspans * sizeof(uint32_t);
        }
        const int lead = gp_work_plan_lead(w, (gp_msg_state *)(c->host + w->state_off),
                                           (uint32_t *)(c->host + w->spans_off));
        part_pos += ALIGN128((size_t)gp_partials_bytes(&w->job));
        /* Units first, the lead last: a lane group's warp holds two groups, and a lead (one
         * lane of serial work) beside a unit in the same warp waited out the unit's whole
         * lane work before running; the lone request's finish then waited for the lead. A
         * chunked wave (m == 1) has each chunk's units, then its claim counter, zero
         * (kernels/batch_abi.h), and the lead in the first chunk, whose output piece it writes. */
        if (wv->nchunks == 1) {
            put_refs(wv, &ref, i, 0, w->job.nunits);
            if (lead)
                put_refs(wv, &ref, i, GP_UNIT_LEAD, 1);
        } else {
            for (size_t k = 0; k < wv->nchunks; k++) {
                wv->chunk_ref[k] = ref;
                put_refs(wv, &ref, i, wv->chunk[k].unit_lo, wv->chunk[k].unit_hi - wv->chunk[k].unit_lo);
                if (lead && k == 0)
                    put_refs(wv, &ref, i, GP_UNIT_LEAD, 1);
                wv->chunk_nref[k] = ref - wv->chunk_ref[k];
                put_refs(wv, &ref, 0, 0, 1);
            }
        }
    }
    if (wv->nchunks == 1)
        put_refs(wv, &ref, 0, 0, 1);   /* the claim counter, zero (kernels/batch_abi.h) */
    for (size_t i = 0; i < wv->nwipes; i++)   /* freed keys' slots, cleared */
        copy_add(wv->in_list, &wv->nin, 0, gp_key_table_addr(&wv->kt->table, c->wipes[i]), KEY_STRIDE, 0);
    if (wv->fold) {
        /* Descriptors and inputs in (but refs made on the GPU); results back, and what is left of
         * the batch cleared. */
        const size_t from = wv->gen_refs ? wv->work_off : 0;

        copy_add(wv->in_list, &wv->nin, gpu_addr(c->host + from), gpu_addr(c->dev + from), wv->out_off - from, 0);
        copy_add(wv->out_list, &wv->nout, 0, gpu_addr(c->dev + wv->keys_off), wv->states_off - wv->keys_off, 0);
        copy_add(wv->out_list, &wv->nout, gpu_addr(c->dev + wv->states_off), gpu_addr(c->host + wv->states_off),
                 wv->part_off - wv->states_off, GP_COPY_WIPE_SRC);
        copy_add(wv->out_list, &wv->nout, 0, gpu_addr(c->dev + wv->part_off), wv->stage_off - wv->part_off, 0);
    }
}

/* Until every copy crew run of the wave is done and no crew thread touches the arena. */
static void runs_finish(gp_wave *wv)
{
    for (size_t k = 0; k < wv->nruns; k++)
        gp_copy_finish(&wv->g->crew, &wv->c->runs[k]);
    wv->nruns = 0;
}

/*
 * A DMA wave's inputs, [0, out_off) of the arena (from work_off where the refs are made on the
 * GPU), to the GPU: the crew's runs (in arena order, as fill started them) piece by piece as each
 * piece is copied, the rest around them in one call each. Every run is finished on return,
 * whatever happened.
 */
static cudaError_t issue_copy_in(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err = cudaSuccess;
    size_t pos = wv->gen_refs ? wv->work_off : 0;   /* refs made on the GPU are not sent */

    for (size_t k = 0; k < wv->nruns && err == cudaSuccess; k++) {
        gp_copy_run *run = &c->runs[k];
        const size_t start = (size_t)(run->dst - c->host);

        if (start > pos)
            err = cudaMemcpyAsync(c->dev + pos, c->host + pos, start - pos, cudaMemcpyHostToDevice, c->stream);
        for (size_t p = 0; p < run->npieces && err == cudaSuccess; p++) {
            size_t off, len;

            gp_copy_wait_piece(run, p);
            gp_copy_piece_range(run, p, &off, &len);
            err = cudaMemcpyAsync(c->dev + start + off, run->dst + off, len, cudaMemcpyHostToDevice, c->stream);
        }
        pos = start + run->len;
    }
    if (err == cudaSuccess && wv->out_off > pos)
        err = cudaMemcpyAsync(c->dev + pos, c->host + pos, wv->out_off - pos, cudaMemcpyHostToDevice, c->stream);
    runs_finish(wv);
    return err;
}

/*
 * Device mode: the caller's buffers were written by its own CUDA work, which EVP does not tell us
 * about. The slot's stream is non-blocking, so nothing orders it after that work; a cudaMemcpy from
 * pageable memory returns before its DMA lands ("API synchronization behavior", CUDA Runtime API).
 * The batch waits for the legacy default stream of its device, which itself follows every blocking
 * stream's earlier work; work on the caller's non-blocking streams is the caller's to finish first
 * (README, "Data already on the GPU").
 */
static cudaError_t issue_after_callers(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err;

    if (wv->ndevmem == 0)
        return cudaSuccess;
    if ((err = cudaEventRecord(c->callers, cudaStreamLegacy)) != cudaSuccess)
        return err;
    return cudaStreamWaitEvent(c->stream, c->callers, 0);
}

/* At least n piece events in the slot (made once, kept); 0: not that many. They are made with the
 * slot's GPU current, as everything of the slot is: an event belongs to the GPU current when it is
 * made, and recording it in a stream of another GPU fails (cudaErrorInvalidResourceHandle). */
static int piece_events(gp_cuda_slot *c, size_t n)
{
    cudaEvent_t *more;

    if (n <= c->piece_ev_n)
        return 1;
    if (cudaSetDevice(c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if ((more = OPENSSL_realloc(c->piece_ev, n * sizeof(*more))) == NULL)
        return 0;
    c->piece_ev = more;
    while (c->piece_ev_n < n) {
        if (cudaEventCreateWithFlags(&c->piece_ev[c->piece_ev_n], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        c->piece_ev_n++;
    }
    return 1;
}

/*
 * A DMA wave's results, [states_off, part_off) of the arena, back to the pinned arena: the states
 * and every output but those that come back in pieces (back_in_pieces, when the slot has an event
 * for each piece), in one call for each stretch between them. The `copied` event follows this.
 */
static cudaError_t issue_copy_out(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err = cudaSuccess;
    size_t pos = wv->states_off, npieces = 0;

    for (size_t i = 0; i < wv->m; i++)
        if (back_in_pieces(&wv->reqs[wv->idx[i]], wv->m))
            npieces += out_pieces(&wv->reqs[wv->idx[i]]);
    wv->pieces_back = npieces > 0 && piece_events(c, npieces);
    for (size_t i = 0; i < wv->m && wv->pieces_back && err == cudaSuccess; i++) {
        const gp_request *r = &wv->reqs[wv->idx[i]];
        const size_t start = wv->work[i].out_off;

        if (!back_in_pieces(r, wv->m))
            continue;
        if (start > pos)
            err = cudaMemcpyAsync(c->host + pos, c->dev + pos, start - pos, cudaMemcpyDeviceToHost, c->stream);
        pos = start + r->len;
    }
    if (err == cudaSuccess && wv->part_off > pos)
        err = cudaMemcpyAsync(c->host + pos, c->dev + pos, wv->part_off - pos, cudaMemcpyDeviceToHost, c->stream);
    return err;
}

/* The outputs back_in_pieces, after `copied`: each piece, then its event (c->piece_ev in request
 * order), which the copy crew waits for before taking the piece to the caller. A chunked wave's
 * are back on the back stream already (issue_chunks). */
static cudaError_t issue_pieces_back(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err = cudaSuccess;
    size_t ev = 0;

    if (wv->nchunks > 1)
        return cudaSuccess;

    for (size_t i = 0; i < wv->m && err == cudaSuccess; i++) {
        const gp_request *r = &wv->reqs[wv->idx[i]];
        const size_t start = wv->work[i].out_off, piece = spread_piece(r->len);

        if (!back_in_pieces(r, wv->m))
            continue;
        for (size_t off = 0; off < r->len && err == cudaSuccess; off += piece) {
            const size_t len = piece_len(r->len, off, piece);

            if ((err = cudaMemcpyAsync(c->host + start + off, c->dev + start + off, len, cudaMemcpyDeviceToHost,
                                       c->stream)) == cudaSuccess)
                err = cudaEventRecord(c->piece_ev[ev++], c->stream);
        }
    }
    return err;
}

/* Launch the batch kernel over refs [first, first + n) of the wave, the claim counter after them
 * (`broken`: with an empty grid, the fault_after test hook's failing launch). */
static cudaError_t launch_refs(gp_wave *wv, size_t first, size_t n, int broken)
{
    gp_cuda_slot *c = wv->c;
    gp_unit_ref *drefs = (gp_unit_ref *)(c->dev + wv->refs_off) + first;
    gp_work *dwork = (gp_work *)(c->dev + wv->work_off);
    unsigned int nr = (unsigned int)n;
    uint8_t *darena = c->dev;
    void *args[] = { &drefs, &nr, &dwork, &darena, &wv->flags };
    dim3 grid, block;
    size_t smem;
    const void *kernel = gp_kernel_geometry(n, wv->flags, &c->shape, &grid, &block, &smem);

    if (broken)
        grid.x = 0;
    return launch(c, kernel, grid, block, args, smem, 0);
}

/*
 * A chunked wave (m == 1; chunk_plan.h) from its descriptors to its last launch. On the slot's
 * stream: the arena's inputs but the request's data, the copy kernel in (the refs, key uploads),
 * then each chunk's launch over its own refs, once its input pieces are in. On `ahead`, after the
 * slot's earlier work (the last wave's device cleanse): each chunk's new input pieces in one call,
 * as soon as the crew has copied them, so that they cross while the launches before run. On
 * `back`, once a launch has run: the output pieces it completes in one call, then the chunk's
 * event, which the crew waits for before taking them to the caller; the last launch completes
 * every piece left, which come back beside the states (no launch after it writes them). A call
 * per chunk, not per piece: each CUDA call costs the issuing thread microseconds, which a lone
 * caller waits through (bench/RESULTS.md, "Chunked launches"). Launches follow one another in
 * stream order, so the units of every chunk are counted before the last launch's, where the
 * request is finished (chunk_plan.h). Events in c->piece_ev (CHUNK_EVENTS): per chunk its output
 * back, then per chunk its launch run, then per chunk its input arrived, then the wave's start.
 * The crew's run is finished on return, whatever happened.
 */
static cudaError_t issue_chunks(gp_wave *wv, void **in_args, dim3 in_grid, unsigned int nc_in, int broken)
{
    gp_cuda_slot *c = wv->c;
    const gp_request *r = &wv->reqs[wv->idx[0]];
    gp_copy_run *run = wv->nruns > 0 ? &c->runs[0] : NULL;   /* NULL: fill copied the data itself */
    const size_t start = wv->work[0].in_off, out = wv->work[0].out_off, piece = spread_piece(r->len);
    const size_t pos = wv->gen_refs ? wv->work_off : 0;
    cudaEvent_t *ran = c->piece_ev + wv->nchunks, *arrived = ran + wv->nchunks, began = arrived[wv->nchunks];
    const dim3 copy_block = { GP_COPY_BLOCK, 1, 1 };
    cudaError_t err;
    size_t sent = 0, back = 0;

    if ((err = cudaEventRecord(began, c->stream)) == cudaSuccess)
        err = cudaStreamWaitEvent(c->ahead, began, 0);
    if (err == cudaSuccess && start > pos)
        err = cudaMemcpyAsync(c->dev + pos, c->host + pos, start - pos, cudaMemcpyHostToDevice, c->stream);
    if (err == cudaSuccess && wv->out_off > start + r->len)
        err = cudaMemcpyAsync(c->dev + start + r->len, c->host + start + r->len, wv->out_off - start - r->len,
                              cudaMemcpyHostToDevice, c->stream);
    if (err == cudaSuccess && nc_in > 0)
        err = launch(c, (const void *)gp_copy_kernel, in_grid, copy_block, in_args, 0, 0);
    if (err == cudaSuccess)
        err = step_mark(c, 2);
    for (size_t k = 0; k < wv->nchunks && err == cudaSuccess; k++) {
        const gp_chunk *ch = &wv->chunk[k];

        if (ch->in_pieces > sent) {
            const size_t off = sent * piece, end = pieces_end_byte(r->len, ch->in_pieces, piece);

            for (; run != NULL && sent < ch->in_pieces; sent++)
                gp_copy_wait_piece(run, sent);
            sent = ch->in_pieces;
            err = cudaMemcpyAsync(c->dev + start + off, c->host + start + off, end - off, cudaMemcpyHostToDevice,
                                  c->ahead);
        }
        if (err == cudaSuccess && (err = cudaEventRecord(arrived[k], c->ahead)) == cudaSuccess
            && (err = cudaStreamWaitEvent(c->stream, arrived[k], 0)) == cudaSuccess)
            err = launch_refs(wv, wv->chunk_ref[k], wv->chunk_nref[k], broken && k + 1 == wv->nchunks);
        if (err != cudaSuccess || ch->out_pieces == back)
            continue;
        if ((err = cudaEventRecord(ran[k], c->stream)) == cudaSuccess
            && (err = cudaStreamWaitEvent(c->back, ran[k], 0)) == cudaSuccess) {
            const size_t off = back * piece, end = pieces_end_byte(r->len, ch->out_pieces, piece);

            if ((err = cudaMemcpyAsync(c->host + out + off, c->dev + out + off, end - off, cudaMemcpyDeviceToHost,
                                       c->back)) == cudaSuccess
                && (err = cudaEventRecord(c->piece_ev[k], c->back)) == cudaSuccess)
                wv->early_ev = k + 1;
            back = ch->out_pieces;
        }
    }
    runs_finish(wv);
    return err;
}

/*
 * issue: every CUDA call of the wave, on the slot's stream, in stream order: the copy in (a call,
 * or the first copy kernel), the batch kernel (or the one lone launch; a chunked wave's copy in
 * and launches interleaved on three streams, issue_chunks), the copy out, the event, and an
 * unfolded wave's device clear. Every call checked: a failure (0) leaves the callers' buffers and
 * message states untouched, and the wipe phase lets the streams drain.
 */
static int wave_issue(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    cudaError_t err;

    gp_unit_ref *drefs = (gp_unit_ref *)(c->dev + wv->refs_off);
    gp_work *dwork = (gp_work *)(c->dev + wv->work_off);
    unsigned int nr = (unsigned int)wv->nrefs;
    uint8_t *darena = c->dev;
    void *args[] = { &drefs, &nr, &dwork, &darena, &wv->flags };
    const gp_copy *lin = wv->in_list, *lout = wv->out_list;   /* read by the GPU where they are: mapped */
    unsigned int nc_in = (unsigned int)wv->nin, nc_out = (unsigned int)wv->nout;
    gp_copy_head hin, hout;
    uint64_t no_done = 0, out_done = 0, out_ticket = 0, words = 0;
    void *in_args[] = { &hin, &lin, &nc_in, &no_done, &no_done };
    void *out_args[] = { &hout, &lout, &nc_out, &out_done, &out_ticket };
    dim3 block, grid, copy_block = { GP_COPY_BLOCK, 1, 1 };
    dim3 in_grid = { nc_in < GP_COPY_MAX_GRID ? nc_in : GP_COPY_MAX_GRID, 1, 1 };
    dim3 out_grid = { nc_out < GP_COPY_MAX_GRID ? nc_out : GP_COPY_MAX_GRID, 1, 1 };
    size_t smem;

    memset(&hin, 0, sizeof(hin));
    memset(&hout, 0, sizeof(hout));
    memcpy(hin.e, wv->in_list, (wv->nin < GP_COPY_INLINE ? wv->nin : GP_COPY_INLINE) * sizeof(gp_copy));
    memcpy(hout.e, wv->out_list, (wv->nout < GP_COPY_INLINE ? wv->nout : GP_COPY_INLINE) * sizeof(gp_copy));
    const unsigned int lone = lone_blocks(e, g, c, wv->nrefs, wv->fold, wv->nstaged + wv->ndevcopy, wv->nspows, wv->nup, wv->nwipes, wv->nmma);
    unsigned int lone_grid = lone;

    const void *kernel = gp_kernel_geometry(wv->nrefs, wv->flags, &c->shape, &grid, &block, &smem);
#if GP_TEST_HOOKS
    if (atomic_load(&g->fault_after) >= 0 && atomic_fetch_sub(&g->fault_after, 1) == 0)
        grid.x = lone_grid = 0;   /* test hook: cudaErrorInvalidConfiguration at launch */
#endif
    /* Which kernel says the results are back (wait_for_gpu): the lone launch, or the copy kernel
     * out of a folded batch (an unfolded batch's states come back by DMA after that kernel). A
     * dispatcher polls throughout (wait_for_gpu), so the words spare it a driver call a look,
     * which the other slots' launches would wait behind. */
    wv->end.blocks = lone > 0 ? lone_grid : wv->fold && nc_out > 0 ? out_grid.x : 0;
    if (wv->end.blocks > 0) {
        wv->end.ticket = ++c->ticket;
        words = gpu_addr((uint8_t *)c->done);
#if GP_TEST_HOOKS
        if (atomic_load(&g->silent_after) >= 0 && atomic_fetch_sub(&g->silent_after, 1) == 0)
            words = 0;   /* test hook: the kernel is not told */
#endif
    }
    if (lone == 0 && wv->end.blocks > 0) {
        out_done = words;
        out_ticket = wv->end.ticket;
    }
    wv->t1 = gp_now_ns();   /* the batch's first CUDA call: what wait_for_gpu times from */
    if (wv->fold)   /* the copy kernel reads the pinned arena: every input must be there */
        runs_finish(wv);
    if ((err = issue_after_callers(wv)) != cudaSuccess) {
        cuda_failed(e, "ordering after the caller's device work", err);
        return 0;
    }
    if ((err = step_mark(c, 0)) != cudaSuccess
        || (!wv->fold && wv->nchunks == 1 && (err = issue_copy_in(wv)) != cudaSuccess)
        || (err = step_mark(c, 1)) != cudaSuccess) {
        cuda_failed(e, "copy to the GPU", err);
        return 0;
    }
    /* In a small batch, the batch kernel right behind the copy kernel in and the copy kernel
     * out right behind the batch kernel launch early (launch): the launch gaps are a lone
     * call's latency. Not in a large one: its early blocks would sit on SMs, waiting, that the
     * other slots' kernels could use. Behind a DMA copy a launch waits as usual, and with the
     * stats' step events between them each step runs alone to be timed. */
    const int early = grid.x * 4 <= (wv->flags & GP_BATCH_AES ? c->shape.max_grid : c->shape.max_grid_plain)
                      && c->step[0] == NULL;

    if (wv->nchunks > 1) {
        /* The copy in and the kernel interleaved, chunk by chunk (the stats see the descriptors
         * as the DMA in, the data's pieces and the launches as the kernel step). */
        if ((err = issue_chunks(wv, in_args, in_grid, nc_in, grid.x == 0)) != cudaSuccess
            || (err = step_mark(c, 3)) != cudaSuccess
            || (nc_out > 0 && (err = launch(c, (const void *)gp_copy_kernel, out_grid, copy_block, out_args, 0, 0))
                                  != cudaSuccess)
            || (err = step_mark(c, 4)) != cudaSuccess) {
            cuda_failed(e, "chunked launch", err);
            return 0;
        }
    } else if (lone > 0) {
        /* One launch: copy in, refs and copy out as the phases of one cluster (the stats see
         * it all as the kernel step). */
        const gp_lone_args la = { gpu_addr(c->dev), gpu_addr(c->host), wv->work_off, wv->out_off, wv->states_off,
                                  wv->part_off - wv->states_off, wv->keys_off, wv->stage_off - wv->keys_off,
                                  words, wv->end.ticket, nr, wv->flags };

        if ((err = step_mark(c, 2)) != cudaSuccess || (err = launch_lone(c, &la, lone_grid)) != cudaSuccess
            || (err = step_mark(c, 3)) != cudaSuccess || (err = step_mark(c, 4)) != cudaSuccess) {
            cuda_failed(e, "kernel launch", err);
            return 0;
        }
        if (e->knobs.stats)
            atomic_fetch_add_explicit(&g->st_lone, 1, memory_order_relaxed);
    } else if ((nc_in > 0 && (err = launch(c, (const void *)gp_copy_kernel, in_grid, copy_block, in_args, 0, 0))
                          != cudaSuccess)
        || (err = step_mark(c, 2)) != cudaSuccess
        || (err = launch(c, kernel, grid, block, args, smem, early && nc_in > 0))
               != cudaSuccess
        || (err = step_mark(c, 3)) != cudaSuccess
        || (nc_out > 0 && (err = launch(c, (const void *)gp_copy_kernel, out_grid, copy_block, out_args, 0,
                                        early)) != cudaSuccess)
        || (err = step_mark(c, 4)) != cudaSuccess) {
        cuda_failed(e, "kernel launch", err);
        return 0;
    }
    if ((!wv->fold && (err = issue_copy_out(wv)) != cudaSuccess)
        || (err = step_mark(c, 5)) != cudaSuccess
        || (err = cudaEventRecord(c->copied, c->stream)) != cudaSuccess
        || (wv->pieces_back && (err = issue_pieces_back(wv)) != cudaSuccess)) {
        cuda_failed(e, "copy from the GPU", err);
        return 0;
    }
    /* Keys, states and partial MACs do not stay on the device after the batch (a folded batch's
     * second copy kernel cleared them already); nor do the outputs, once the back stream has taken
     * its pieces (the last one's event follows all of them there). */
    if ((wv->early_ev > 0 && (err = cudaStreamWaitEvent(c->stream, c->piece_ev[wv->early_ev - 1], 0))
                                     != cudaSuccess)
        || (!wv->fold && (err = cudaMemsetAsync(c->dev + wv->keys_off, 0, wv->total - wv->keys_off, c->stream))
                             != cudaSuccess)) {
        cuda_failed(e, "device cleanse", err);
        return 0;
    }
    if (e->knobs.stats)
        wv->t_issued = gp_now_ns();
    return 1;
}

/*
 * wait: until the results are in the pinned arena (wait_for_gpu: done words or the event, as the
 * wait knob says); with stats=steps, the step events' times. 0: the GPU failed.
 */
static int wave_wait(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    cudaError_t err;

    if ((err = wait_for_gpu(e, c, wv->t1, &wv->end)) != cudaSuccess) {
        cuda_failed(e, "synchronisation", err);
        return 0;
    }
    if (e->knobs.stats) {
        wv->t2 = gp_now_ns();
        /* Done words come before the stream's last step events: let those complete. */
        if (c->step[0] != NULL && (err = cudaEventSynchronize(c->copied)) != cudaSuccess) {
            cuda_failed(e, "synchronisation", err);
            return 0;
        }
        for (int k = 0; k < GP_GPU_STEPS && c->step[k] != NULL; k++) {
            float ms = 0;

            if (cudaEventElapsedTime(&ms, c->step[k], c->step[k + 1]) == cudaSuccess)
                atomic_fetch_add_explicit(&g->st_ns_step[k], (uint64_t)(ms * 1e6f), memory_order_relaxed);
        }
    }
    return 1;
}

/*
 * deliver: outputs, tags, verdicts and the advanced message states, only after a wait that
 * succeeded (a failed wave changes no message, so the engine can re-run it on the host). Tags are
 * compared in constant time.
 */
/* A piece of an output that comes back in pieces: there once its event says so (the copy crew asks,
 * from whichever thread copies the piece). */
typedef struct piece_source {
    gp_cuda_slot *c;
    size_t ev0;                  /* the request's first piece event */
    size_t req;                  /* the request's index in the wave */
    const gp_wave *chunked;      /* a chunked wave's: an event per chunk (issue_chunks) */
    _Atomic int err;             /* a cudaError_t from a wait that failed, for the log (any thread) */
} piece_source;

/* The event after output piece k of a chunked wave: its chunk's, the first whose launch completes
 * it. */
static size_t chunk_event(const gp_wave *wv, size_t k)
{
    size_t j = 0;

    while (j + 1 < wv->nchunks && wv->chunk[j].out_pieces <= k)
        j++;
    return j;
}

/* Crew threads take pieces of every slot, on any GPU: each wait makes the slot's GPU current
 * first, so no crew thread works in another GPU's context (without one, the runtime would open
 * device 0's, a GPU the executor may not use). */
static int piece_landed(void *arg, size_t k)
{
    piece_source *ps = arg;
    const size_t ev = ps->chunked != NULL ? chunk_event(ps->chunked, k) : ps->ev0 + k;
    cudaError_t err = cudaSetDevice(ps->c->device);

    if (err == cudaSuccess)
        err = cudaEventSynchronize(ps->c->piece_ev[ev]);

    if (err != cudaSuccess)
        atomic_store_explicit(&ps->err, (int)err, memory_order_relaxed);
    return err == cudaSuccess;
}

/* The copy crew's runs that take the outputs back_in_pieces to their callers, each piece once its
 * event says it has landed; only after a wave's issue, when every event is recorded. A run that
 * cannot start (no memory) leaves its request to fail in pieces_end. */
static void pieces_start(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    size_t ev = 0;

    wv->pieces_started = 1;
    wv->npsrc = 0;
    if ((wv->psrc = OPENSSL_malloc(wv->m * sizeof(*wv->psrc))) == NULL)
        return;
    for (size_t i = 0; i < wv->m; i++) {
        gp_request *r = &wv->reqs[wv->idx[i]];
        piece_source *ps = &wv->psrc[wv->npsrc];

        if (!back_in_pieces(r, wv->m))
            continue;
        ps->c = c;
        ps->ev0 = ev;
        ps->req = i;
        ps->chunked = wv->nchunks > 1 ? wv : NULL;
        atomic_init(&ps->err, cudaSuccess);
        if (gp_copy_start_when(&wv->g->crew, &c->runs[wv->npsrc], r->out, c->host + wv->work[i].out_off, r->len,
                               spread_piece(r->len), 0, piece_landed, ps))
            wv->npsrc++;
        ev += out_pieces(r);
    }
}

/*
 * Once every piece is with its caller: the states and statuses of the requests whose outputs come
 * back in pieces, where the wave got that far (`waited`: its results are in the pinned arena). 0 if
 * a piece did not come or the wave failed: those requests stay failed, their message states
 * untouched and, in place, their inputs put back, so the engine re-runs them on the host from both.
 */
static int pieces_end(gp_wave *wv, int waited)
{
    gp_cuda_slot *c = wv->c;
    size_t j = 0;
    int ok = waited && wv->psrc != NULL;

    for (size_t i = 0; i < wv->m; i++) {
        gp_request *r = &wv->reqs[wv->idx[i]];

        if (!back_in_pieces(r, wv->m))
            continue;
        if (j < wv->npsrc && wv->psrc[j].req == i) {
            if (gp_copy_finish(&wv->g->crew, &c->runs[j++]) && ok) {
                memcpy(&r->msg->st, c->host + wv->work[i].state_off, sizeof(gp_msg_state));
                r->status = GP_REQ_OK;
                continue;
            }
        }
        ok = 0;
    }
    /* In place, some pieces may have overwritten the input by now; the arena still holds it (the
     * copy in wrote it there, and nothing of the wave writes the inputs' region). */
    for (size_t i = 0; i < wv->m && !ok; i++) {
        gp_request *r = &wv->reqs[wv->idx[i]];

        if (back_in_pieces(r, wv->m) && r->status != GP_REQ_OK && r->out == r->in)
            memcpy(r->out, c->host + wv->work[i].in_off, r->len);
    }
    /* A piece whose wait failed is the GPU's failure like any other: said once (cuda_failed). */
    for (j = 0; j < wv->npsrc; j++) {
        const int err = atomic_load_explicit(&wv->psrc[j].err, memory_order_relaxed);

        if (err != cudaSuccess) {
            cuda_failed(wv->e, "copy from the GPU", (cudaError_t)err);
            break;
        }
    }
    OPENSSL_free(wv->psrc);
    wv->psrc = NULL;
    wv->npsrc = 0;
    wv->pieces_started = 0;
    return ok;
}

static int wave_deliver(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;
    int ok = 1;

    if (wv->pieces_back) {   /* first: the crew takes them as they land */
        if (!wv->pieces_started)
            pieces_start(wv);
        ok = pieces_end(wv, 1);
    }
    for (size_t i = 0; i < m; i++) {
        gp_request *r = &reqs[idx[i]];
        const gp_work *w = &wv->work[i];
        const uint8_t *res = c->host + w->out_off;

        if (wv->pieces_back && back_in_pieces(r, wv->m))
            continue;              /* delivered above */
        memcpy(&r->msg->st, c->host + w->state_off, sizeof(gp_msg_state));
        r->status = GP_REQ_OK;
        if (staged_on_gpu(r) || devmem_data(r)) {
            /* already in the chunk's output half (r->out), for its job to copy out; or in the
             * caller's device memory */
        } else if (r->kind == GP_REQ_CRYPT) {
            if (!spreads(r) || !gp_copy_start(&wv->g->crew, &c->runs[wv->nruns], r->out, res, r->len,
                                              spread_piece(r->len), 0))
                memcpy(r->out, res, r->len);
            else
                wv->nruns++;
        } else if (r->kind == GP_REQ_TAG) {
            memcpy(r->tag_out, res, 16);
        } else if (r->kind == GP_REQ_VERIFY) {
            /* Constant time (SP 800-38D §7.2 step 8). */
            r->status = r->taglen >= 1 && r->taglen <= 16 && CRYPTO_memcmp(res, r->tag_in, r->taglen) == 0
                        ? GP_REQ_OK : GP_REQ_BAD_TAG;
        }
    }
    runs_finish(wv);   /* the large outputs, copied by the crew and this thread at once */
    return ok;
}

/*
 * wipe: always, after success or failure. A wave that failed once its CUDA calls began lets the
 * stream drain before the pinned arena is cleared under it. Plans, keys, states and tags leave the
 * pinned arena, the job plans the slot; the key table's batch ends (its uploads count only on
 * success); the stats.
 */
static void wave_wipe(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;

    runs_finish(wv);   /* a wave that failed before issue may still have the crew at its inputs */
    if (!wv->ok && wv->t1 != 0) {
        /* A batch that failed once its CUDA calls began: let what was queued finish before the
         * pinned arena is cleared under it, then clear the device's copy (best effort: after a
         * sticky error neither can run). */
        (void)cudaStreamSynchronize(c->stream);
        (void)cudaStreamSynchronize(c->ahead);
        (void)cudaStreamSynchronize(c->back);
        (void)cudaMemsetAsync(c->dev, 0, wv->total, c->stream);
        (void)cudaGetLastError();
    }
    if (wv->total != 0 && wv->total <= c->cap) {
        /* Plans (counters), keys, states and tags must not linger in pinned memory; data buffers
         * are the callers' own bytes and are cleansed when the arena is freed. */
        for (size_t i = 0; i < m; i++)
            if (reqs[idx[i]].kind == GP_REQ_TAG || reqs[idx[i]].kind == GP_REQ_VERIFY)
                gp_wipe(c->host + ((gp_work *)(c->host + wv->work_off))[i].out_off, 16);
        gp_wipe(c->host + wv->work_off, wv->in_off - wv->work_off);
        gp_wipe(c->host + wv->keys_off, wv->out_off - wv->keys_off);
    }
    gp_wipe(c->jobs, m * sizeof(*c->jobs));
    if (wv->kbatch != 0)
        gp_key_table_batch_end(&wv->kt->table, wv->kbatch, wv->ok, c->uploads, wv->nup, c->wipes, wv->nwipes);
    if (e->knobs.stats && wv->ok) {
        uint64_t t3 = gp_now_ns();

        atomic_fetch_add_explicit(&g->st_batches, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_reqs, m, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_staged, wv->nstaged, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_in, wv->t1 - wv->t0 - wv->t_grow, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_gpu, wv->t2 - wv->t1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_issue, wv->t_issued - wv->t1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_out, t3 - wv->t2, memory_order_relaxed);
        {
            uint_fast64_t unset = 0;

            atomic_compare_exchange_strong(&g->st_first_ns, &unset, wv->t0);
            atomic_store_explicit(&g->st_last_ns, t3, memory_order_relaxed);
        }
    }
}

/* One wave: at most one request per message, so every request starts from the state its message
 * has now (cuda_run cuts a batch into waves). 1: every request has its status. */
static int run_wave(gp_engine *e, gp_cuda_slot *c, gp_request *reqs, const size_t *idx, size_t m)
{
    gp_wave wv;
    cudaError_t err;

    memset(&wv, 0, sizeof(wv));
    wv.e = e;
    wv.g = e->cuda;
    wv.c = c;
    wv.reqs = reqs;
    wv.idx = idx;
    wv.m = m;
    wv.kt = keys_of(wv.g, c);
    wv.t0 = e->knobs.stats ? gp_now_ns() : 0;
#if GP_EXPERIMENT_SWITCHES
    wv.flags = wv.g->spread_off ? GP_BATCH_NARROW : 0;
#endif
    /* The slot's streams, events and arenas belong to its GPU: a launch into its stream, or an
     * event recorded there, fails while another GPU is current (cudaErrorInvalidResourceHandle),
     * and an event made then belongs to that other GPU. The thread that runs this wave may have
     * run its last one on another GPU (a dispatcher, a caller, device = all), so the slot's GPU
     * is current from the first phase on: what the phases make (piece events, grown arenas) and
     * issue is that GPU's. */
    if ((err = cudaSetDevice(c->device)) != cudaSuccess) {
        cuda_failed(e, "cudaSetDevice", err);
        wave_wipe(&wv);
        return 0;
    }
    wave_plan(&wv);
    if (wave_layout(&wv)) {
        wave_fill(&wv);
        if (wave_issue(&wv)) {
            /* A chunked wave's first pieces are back already: the crew takes them to the caller
             * while the last chunk runs, and so does this thread, which would only wait. */
            if (wv.nchunks > 1 && wv.pieces_back) {
                pieces_start(&wv);
                for (size_t j = 0; j < wv.npsrc; j++)
                    gp_copy_help(&c->runs[j]);
            }
            if (wave_wait(&wv))
                wv.ok = wave_deliver(&wv);
        }
        if (wv.pieces_started)   /* the wave failed with the crew at its outputs */
            (void)pieces_end(&wv, 0);
    }
    wave_wipe(&wv);
    return wv.ok;
}

/* gp_executor.prepare, on the submitter's thread: a staged ChaCha20-Poly1305 request's powers of r
 * go straight into its chunk (stage.h), where the batch's copy kernel fetches them. */
static void cuda_prepare(gp_engine *e, gp_request *r)
{
    const gp_mac_pows *pw = gp_kstate_prepare_pows(r);

    (void)e;
    if (pw != NULL && staged_on_gpu(r)) {
        memcpy(r->stage->host + GP_STAGE_POWS_OFF, pw, sizeof(gp_mac_pows));
        r->stage_pows = 1;
    }
}

/* The i-th slot of [from, from + per * across) in the order slot_take tries them: slot 0 of each of
 * `across` GPUs, then slot 1 of each, ... */
static gp_cuda_slot *slot_nth(gp_cuda *g, int from, int per, int across, int i)
{
    return &g->slots[from + (i % across) * per + i / across];
}

/* A free slot, locked: the first free one in an order that alternates between the GPUs (slot 0 of
 * each GPU, then slot 1 of each, ...), else wait for one from a rotating start; gpu >= 0: one of
 * that GPU's (device mode: the GPU that holds the data runs it). Slots are laid out GPU by GPU,
 * nslots / ngpus each (cuda_open). Batches at once thus spread over every GPU first, and a caller
 * alone always takes the same slot, whose arenas have grown to its requests (a rotation would
 * grow every slot's in turn). */
static gp_cuda_slot *slot_take(gp_cuda *g, int gpu)
{
    const int per = g->nslots / g->ngpus, from = gpu >= 0 ? (gpu - g->stage_device) * per : 0;
    const int count = gpu >= 0 ? per : g->nslots, across = gpu >= 0 ? 1 : g->ngpus;
    gp_cuda_slot *sl;

    for (int i = 0; i < count; i++) {
        sl = slot_nth(g, from, per, across, i);
        if (pthread_mutex_trylock(&sl->lock) == 0)
            return sl;
    }
    sl = slot_nth(g, from, per, across, (int)(atomic_fetch_add(&g->next, 1) % (unsigned)count));
    pthread_mutex_lock(&sl->lock);
    return sl;
}

static int cuda_run_on(gp_engine *e, gp_request *reqs, size_t n, int gpu);

/*
 * A batch whose device-mode requests are on several GPUs: each GPU's share (the host-memory
 * requests with the first's) runs as a batch of its own in a slot of that GPU, on a copy of its
 * requests whose statuses come back. A message's requests share a GPU here: in device mode each
 * comes from an EVP call that waits for it, so a batch holds one request of each such message.
 */
static int cuda_run_split(gp_engine *e, gp_request *reqs, size_t n)
{
    gp_request *part = OPENSSL_malloc(n * sizeof(*part));
    size_t *from = OPENSSL_malloc(n * sizeof(*from));
    int ok = part != NULL && from != NULL, first = -1;

    for (size_t i = 0; i < n && first < 0; i++)
        if (reqs[i].devmem)
            first = reqs[i].gpu;
    for (size_t lead = 0; lead < n && ok; lead++) {
        size_t m = 0, k;
        const int gpu = reqs[lead].gpu;

        if (!reqs[lead].devmem)
            continue;
        for (k = 0; k < lead && !(reqs[k].devmem && reqs[k].gpu == gpu); k++)
            ;
        if (k < lead)
            continue;   /* this GPU's share ran already */
        for (size_t i = 0; i < n; i++)
            if (reqs[i].devmem ? reqs[i].gpu == gpu : gpu == first) {
                part[m] = reqs[i];
                from[m++] = i;
            }
        ok = cuda_run_on(e, part, m, gpu);
        for (size_t i = 0; i < m; i++)   /* the status, and what is left of a long one (run_leading_slices) */
            reqs[from[i]] = part[i];
    }
    OPENSSL_free(part);
    OPENSSL_free(from);
    return ok;
}

/*
 * A request longer than a slice (kstate.h): every slice but the last, each a wave of its own on this slot
 * from the state the one before left (the message's counter and MAC state carry from slice to slice
 * as they do from update to update; the AAD it carries goes with the first). `r` is left as its
 * last slice. On a failure `r` is what is left to do, from the state its message is in now, so
 * the engine's re-run on the host goes on where the GPU stopped, and nothing is done twice (an
 * in-place request's input is already gone where its output was written).
 */
static int run_leading_slices(gp_engine *e, gp_cuda_slot *c, gp_request *r, size_t slice)
{
    static const size_t first = 0;

    while (r->len > slice) {
        gp_request head = *r;

        head.len = slice;
        head.status = GP_REQ_FAILED;
        if (!run_wave(e, c, &head, &first, 1))
            return 0;
        r->in += slice;
        r->out += slice;
        r->len -= slice;
        r->aad = NULL;
        r->aad_len = 0;
    }
    return 1;
}

/* Is r sliced here? Device-mode data is not: it takes no arena room, and one launch covers it. */
static int is_long(const gp_request *r, size_t slice)
{
    return r->kind == GP_REQ_CRYPT && !staged_on_gpu(r) && !r->devmem && r->len > slice;
}

/* One wave of a batch, its long requests' leading slices first (the caller's view of each request
 * is restored once the wave has run: the engine counts its bytes). */
static int run_wave_sliced(gp_engine *e, gp_cuda_slot *c, gp_request *reqs, const size_t *idx, size_t m)
{
    struct whole { size_t at; gp_request r; } *whole = NULL;
    const size_t slice = gp_kstate_slice_bytes(e);
    size_t nlong = 0, k = 0;
    int ok = 1;

    for (size_t i = 0; i < m; i++)
        nlong += is_long(&reqs[idx[i]], slice);
    if (nlong == 0 || (whole = OPENSSL_malloc(nlong * sizeof(*whole))) == NULL)
        return run_wave(e, c, reqs, idx, m);   /* no memory: the long ones in one wave, arenas grown */
    for (size_t i = 0; i < m && ok; i++) {
        gp_request *r = &reqs[idx[i]];

        if (is_long(r, slice)) {
            whole[k].at = idx[i];
            whole[k++].r = *r;
            ok = run_leading_slices(e, c, r, slice);
        }
    }
    if (ok && (ok = run_wave(e, c, reqs, idx, m)))
        for (size_t j = 0; j < k; j++) {
            gp_request *r = &reqs[whole[j].at];
            const int status = r->status;

            *r = whole[j].r;
            r->status = status;
        }
    OPENSSL_free(whole);
    return ok;
}

/*
 * One wave of a batch, cut where its large requests (those the copy crew copies) would carry more
 * than a slice's worth of data together: async jobs with multi-MiB updates pile up while the slots
 * are busy, and a wave of all of them would grow the slot's pinned arena to their sum, with a GPU
 * no busier (each such request fills it). The parts run in order, as waves do.
 */
static int run_wave_bounded(gp_engine *e, gp_cuda_slot *c, gp_request *reqs, const size_t *idx, size_t m)
{
    const size_t slice = gp_kstate_slice_bytes(e);
    int ok = 1;

    for (size_t from = 0, to; from < m && ok; from = to) {
        size_t large = 0;

        for (to = from; to < m; to++) {
            const gp_request *r = &reqs[idx[to]];
            const size_t big = spreads(r) ? (r->len < slice ? r->len : slice) : 0;

            if (to > from && large + big > slice)
                break;
            large += big;
        }
        ok = run_wave_sliced(e, c, reqs, idx + from, to - from);
    }
    return ok;
}

/*
 * A batch runs in waves: wave w holds the w-th request of each message (requests of one message
 * run in order, each from the state the previous left). Real batches have one request per message
 * (an EVP call waits for its own), so one wave, one launch. On failure the finished waves stay
 * finished (status OK) and the rest is untouched for the engine to re-run on the host.
 */
static int cuda_run(gp_engine *e, gp_request *reqs, size_t n)
{
    int gpu = -1;

    for (size_t i = 0; i < n; i++) {
        if (!reqs[i].devmem)
            continue;
        if (gpu >= 0 && reqs[i].gpu != gpu)
            return cuda_run_split(e, reqs, n);
        gpu = reqs[i].gpu;
    }
    return cuda_run_on(e, reqs, n, gpu);
}

static int cuda_run_on(gp_engine *e, gp_request *reqs, size_t n, int gpu)
{
    gp_cuda *g = e->cuda;
    gp_cuda_slot *c;
    size_t nwaves = 0;
    int ok = 1;

    if (g->stage_ready)
        gp_stage_grow(&g->stage);   /* here, on a thread's stack: jobs only ask (stage.h) */
    c = slot_take(g, gpu);

    if (!scratch_reserve(c, n)) {
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        c->order[i] = i;
    qsort_r(c->order, n, sizeof(*c->order), gp_cmp_request_by_msg, reqs);
    for (size_t i = 0; i < n; i++) {
        size_t at = c->order[i];

        c->rank[at] = i > 0 && reqs[c->order[i - 1]].msg == reqs[at].msg ? c->rank[c->order[i - 1]] + 1 : 0;
        if (c->rank[at] + 1 > nwaves)
            nwaves = c->rank[at] + 1;
    }
    for (size_t w = 0; w < nwaves && ok; w++) {
        size_t m = 0;

        for (size_t i = 0; i < n; i++)
            if (c->rank[i] == w)
                c->wave[m++] = i;
        ok = run_wave_bounded(e, c, reqs, c->wave, m);
    }
    pthread_mutex_unlock(&c->lock);
    return ok;
}

const gp_executor gp_exec_cuda = {
    .name = "cuda",
    .id = GP_EXEC_CUDA,
    .open = cuda_open,
    .close = cuda_close,
    .msg_start = gp_kstate_msg_start,   /* same state format as the host executor */
    .run = cuda_run,
    .msg_copy = NULL,
    .msg_clear = NULL,
    .stage_pool = cuda_stage_pool,
    .prepare = cuda_prepare,
    .key_forget = cuda_key_forget,
    .mem_check = cuda_mem_check,
};
