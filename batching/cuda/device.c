/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda executor's GPUs and their memory: opening, closing, arenas, staging pool, resident keys, events. */
/*
 * Everything here is made at the opening (gp_cuda_open) or grown on demand by a phase (arenas,
 * scratch, piece events), and freed at the closing; nothing here runs a wave. The driver's own
 * calls (device mode's checks, a thread's current context) are looked up once through the
 * runtime, since the module links no libcuda.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "batching/async_wait.h"
#include "batching/cuda/internal.h"
#include "batching/reg_cache.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

#define ARENA_MIN (1u << 20)
#define STAGE_POOL_MAX (256u << 20)   /* mapped pinned memory for staged requests at most */
#define KEY_TABLE_MAX_SLOTS 65536u    /* resident keys per GPU (key_table.h): 200 MB at most */

/* A CUDA failure: the engine marks the executor failed at once (no new message comes to it) and
 * says the process's first in its one log line; the sticky error is cleared where there is one.
 * The GPU named is the thread's current device: every call is made under cudaSetDevice of its
 * slot's device (a cudaSetDevice that fails leaves the one before current). */
int gp_cuda_failed(gp_engine *e, const char *what, cudaError_t err)
{
    char words[192];
    int dev = -1;

    if ((cudaGetDevice)(&dev) != cudaSuccess)   /* in parentheses: never a test fault's interposition */
        dev = -1;
    snprintf(words, sizeof(words), "%s: %s, %s", what, cudaGetErrorName(err), cudaGetErrorString(err));
    gp_engine_executor_fault(e, e->exec[GP_EXEC_CUDA], dev, words);
    (void)cudaGetLastError();
    gp_reg_cache_close();   /* nothing of the callers' is lost: their buffers go back to copies */
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
int gp_cuda_arena_reserve(gp_engine *e, gp_cuda_slot *c, size_t need)
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
        return gp_cuda_failed(e, "cudaSetDevice", err);
    if ((err = cudaHostAlloc((void **)&c->host, cap, cudaHostAllocMapped)) != cudaSuccess) {
        c->host = NULL;
        return gp_cuda_failed(e, "cudaHostAlloc", err);
    }
    {
        /* The copy kernels read their lists and the batch's descriptors from here (unified
         * addressing, every 64-bit Linux CUDA platform: the GPU's address is the host's). */
        void *d = NULL;

        if ((err = cudaHostGetDevicePointer(&d, c->host, 0)) != cudaSuccess || d != (void *)c->host)
            return gp_cuda_failed(e, "mapping the pinned arena at its host address",
                                  err != cudaSuccess ? err : cudaErrorNotSupported);
    }
    if ((err = cudaMalloc((void **)&c->dev, cap)) != cudaSuccess) {
        c->dev = NULL;
        return gp_cuda_failed(e, "cudaMalloc", err);
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
    int saved, ok;

    /* The caller's GPU stays current: a stream-ordered request grows the pool between choosing
     * its GPU and making its objects there (ordered.c). */
    ok = gp_cuda_device_enter(g->stage_device, &saved)
         && cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) == cudaSuccess;
    if (ok && (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess || d != p)) {
        /* Not the same address for every slot's device: do without staging. */
        cudaFreeHost(p);
        ok = 0;
    }
    if (!ok)
        (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
    if (!ok)
        return NULL;
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
 * gp_cuda_device_leave to put back: these run on the application's threads too, which may use
 * CUDA. A thread with no CUDA context current has none to put back (-1): the runtime's answer for
 * it is device 0, and setting that would open GPU 0's context, a GPU the executor may not use. */
int gp_cuda_device_enter(int dev, int *saved)
{
    CUcontext current = NULL;

    (void)pthread_once(&ctx_get_current_once, ctx_get_current_find);
    if ((ctx_get_current != NULL && (ctx_get_current(&current) != CUDA_SUCCESS || current == NULL))
        || cudaGetDevice(saved) != cudaSuccess)
        *saved = -1;
    return cudaSetDevice(dev) == cudaSuccess;
}

void gp_cuda_device_leave(int saved)
{
    if (saved >= 0)
        (void)cudaSetDevice(saved);
}

static uint64_t keys_chunk_alloc(void *ctx, size_t bytes)
{
    gp_cuda_keys *k = ctx;
    void *p = NULL;
    int saved;

    if (!gp_cuda_device_enter(k->device, &saved) || cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        p = NULL;
    }
    gp_cuda_device_leave(saved);
    return (uint64_t)(uintptr_t)p;
}

static void keys_chunk_free(void *ctx, uint64_t dev, size_t bytes)
{
    gp_cuda_keys *k = ctx;
    int saved;

    /* Cleared and freed even where the device cannot be made current (a failing GPU): a chunk
     * skipped here would stay allocated until the process exits, one per closed executor. */
    (void)gp_cuda_device_enter(k->device, &saved);
    (void)cudaMemset((void *)(uintptr_t)dev, 0, bytes);   /* synchronous: cleared before the free */
    (void)cudaFree((void *)(uintptr_t)dev);
    (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
}

static int keys_wipe_now(void *ctx, uint64_t dev, size_t bytes)
{
    gp_cuda_keys *k = ctx;
    int saved, ok;

    ok = gp_cuda_device_enter(k->device, &saved)
         && cudaMemsetAsync((void *)(uintptr_t)dev, 0, bytes, k->wipe_stream) == cudaSuccess
         && cudaEventRecord(k->wiped, k->wipe_stream) == cudaSuccess;
    if (!ok)
        (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
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

/*
 * GPU `dev`'s pool of stream-ordered blocks (ordered.c; current device: dev): one of gpuprov's own
 * that keeps ORD_POOL_KEEP bytes reserved across synchronisations. The device's default pool
 * keeps none (its release threshold is 0), so each block made after a wait had its memory mapped
 * anew, stalling the stream (bench/RESULTS.md, "Stream-ordered pipelines"). Where the GPU makes
 * no pool, its default one. 0: neither (no stream-ordered mode).
 */
static int ordered_pool_open(struct gp_cuda_ord_pool *p, int dev)
{
    struct cudaMemPoolProps props;
    uint64_t keep = ORD_POOL_KEEP;

    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    if (cudaMemPoolCreate(&p->pool, &props) == cudaSuccess) {
        p->own = 1;
        if (cudaMemPoolSetAttribute(p->pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess)
            return 1;
        (void)cudaMemPoolDestroy(p->pool);
    }
    (void)cudaGetLastError();
    p->own = 0;
    if (cudaDeviceGetDefaultMemPool(&p->pool, dev) == cudaSuccess)
        return 1;
    (void)cudaGetLastError();
    p->pool = NULL;
    return 0;
}

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
gp_cuda_keys *gp_cuda_keys_of(gp_cuda *g, const gp_cuda_slot *sl)
{
    int d = sl->device - g->stage_device;

    return d >= 0 && d < GP_KEY_TABLE_GPUS && g->keys[d].ready ? &g->keys[d] : NULL;
}

/* gp_executor.key_forget: the key's slots are cleared (from here when this thread may call CUDA,
 * i.e. not on an async job's small stack, else by the next batch on that GPU) and reused. */
void gp_cuda_key_forget(gp_engine *e, gp_key *k)
{
    gp_cuda *g = e->cuda;
    int may_call = !gp_async_in_job();

    if (g == NULL || g->open_gen != gp_fork_generation())
        return;
    for (int d = 0; d < GP_KEY_TABLE_GPUS; d++)
        if (k->table_slot[d] != 0 && g->keys[d].ready)
            gp_key_table_forget(&g->keys[d].table, &k->table_slot[d], k->id, may_call);
}

gp_stage_pool *gp_cuda_stage_pool(gp_engine *e)
{
    gp_cuda *g = e->cuda;

    return g != NULL && g->stage_ready ? &g->stage : NULL;
}

/*
 * A staging chunk that work queued on a caller's stream still writes (stream-ordered device mode:
 * a released block's states and tags come back into it), given back cleansed once `done`, recorded
 * behind that work, has completed. A host function on the stream would give it back at the same
 * point, but the stream waits for the host thread that runs it, and a stream of many messages
 * stalled at each (bench/RESULTS.md, "Stream-ordered pipelines"); here the stream never waits.
 * The event becomes the list's, destroyed when the chunk goes back.
 */
struct gp_cuda_retired {
    gp_stage_chunk *chunk;
    size_t used;                 /* the bytes of it to cleanse */
    cudaEvent_t done;
    struct gp_cuda_retired *next;
};

/* A chunk whose work has completed: its event destroyed, its used bytes cleansed, back in the pool. */
static void chunk_back(gp_cuda *g, gp_stage_chunk *ch, size_t used, cudaEvent_t done)
{
    (void)cudaEventDestroy(done);
    OPENSSL_cleanse(ch->host, used);
    gp_stage_put(&g->stage, ch);
}

static void retired_put(gp_cuda *g, struct gp_cuda_retired *r)
{
    chunk_back(g, r->chunk, r->used, r->done);
    OPENSSL_free(r);
}

void gp_cuda_chunk_retire(gp_cuda *g, gp_stage_chunk *ch, size_t used, cudaEvent_t done)
{
    struct gp_cuda_retired *r = OPENSSL_malloc(sizeof(*r));

    if (r == NULL) {   /* no room to remember it: its work waited for here, then it goes back */
        if (cudaEventSynchronize(done) == cudaSuccess)
            chunk_back(g, ch, used, done);
        (void)cudaGetLastError();
        return;
    }
    *r = (struct gp_cuda_retired){ ch, used, done, NULL };
    pthread_mutex_lock(&g->retired_lock);
    r->next = g->retired;
    g->retired = r;
    pthread_mutex_unlock(&g->retired_lock);
}

/* The retired chunks whose work has completed, back in the pool; `wait`: when none has, wait for
 * one (a caller that needs a chunk). A chunk whose event fails (its stream's GPU failed) stays
 * out of the pool: work there may still write it. Returns the chunks given back. */
size_t gp_cuda_chunks_reap(gp_cuda *g, int wait)
{
    struct gp_cuda_retired **at, *r, *ready = NULL, *oldest = NULL;
    size_t n = 0;

    pthread_mutex_lock(&g->retired_lock);
    for (at = &g->retired; (r = *at) != NULL;) {
        const cudaError_t q = cudaEventQuery(r->done);

        if (q == cudaSuccess) {
            *at = r->next;
            r->next = ready;
            ready = r;
            continue;
        }
        if (q != cudaErrorNotReady) {   /* left to leak: its stream may still write it */
            *at = r->next;
            OPENSSL_free(r);
            continue;
        }
        oldest = r;   /* the list holds the newest first */
        at = &r->next;
    }
    if (ready == NULL && wait && oldest != NULL) {
        for (at = &g->retired; *at != oldest; at = &(*at)->next)
            ;
        *at = oldest->next;
        oldest->next = NULL;
    } else {
        oldest = NULL;
    }
    pthread_mutex_unlock(&g->retired_lock);
    (void)cudaGetLastError();   /* a query's cudaErrorNotReady */
    if (oldest != NULL) {
        if (cudaEventSynchronize(oldest->done) == cudaSuccess) {
            oldest->next = ready;
            ready = oldest;
        } else {
            (void)cudaGetLastError();
            OPENSSL_free(oldest);
        }
    }
    for (; ready != NULL; n++) {
        r = ready->next;
        retired_put(g, ready);
        ready = r;
    }
    return n;
}

/* At close: every retired chunk's work waited for, and the chunk back (or left, its GPU failed). */
static void chunks_drain(gp_cuda *g)
{
    while (g->retired != NULL) {
        struct gp_cuda_retired *r = g->retired;

        g->retired = r->next;
        if (cudaEventSynchronize(r->done) == cudaSuccess)
            retired_put(g, r);
        else
            OPENSSL_free(r);
    }
    (void)cudaGetLastError();
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

/* The slot's done words (deliver.c, wait_for_gpu): a word for each block of a lone launch or of a
 * copy kernel, mapped at the same address. */
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

/* At least n piece events in the slot (made once, kept); 0: not that many. They are made with the
 * slot's GPU current, as everything of the slot is: an event belongs to the GPU current when it is
 * made, and recording it in a stream of another GPU fails (cudaErrorInvalidResourceHandle). */
int gp_cuda_piece_events(gp_cuda_slot *c, size_t n)
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

/* One step of a slot's setup: on failure, its error and the name the log line gives it. */
static int setup_step(cudaError_t r, const char *name, cudaError_t *err, const char **what)
{
    *err = r;
    if (r == cudaSuccess)
        return 1;
    *what = name;
    return 0;
}

/*
 * The registration cache's calls into the driver (batching/reg_cache.h). Portable: a registration
 * made under one GPU is pinned memory to every GPU of the process (device = all), so each is made,
 * and undone, under the first GPU (arg), whichever GPU the calling thread last ran. Errors leave
 * nothing behind: a refused registration is a buffer that keeps being copied.
 */
static int reg_host(void *arg, void *base, size_t len)
{
    int saved, ok = gp_cuda_device_enter((int)(intptr_t)arg, &saved)
                    && cudaHostRegister(base, len, cudaHostRegisterPortable) == cudaSuccess;

    if (!ok)
        (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
    return ok;
}

static void unreg_host(void *arg, void *base, size_t len)
{
    int saved;

    (void)len;
    if (gp_cuda_device_enter((int)(intptr_t)arg, &saved))
        (void)cudaHostUnregister(base);
    (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
}

/* The time since *since goes to step; *since becomes now. */
static void open_step_end(gp_cuda *c, gp_open_step step, uint64_t *since)
{
    const uint64_t now = gp_now_ns();

    c->open_ns[step] += now - *since;
    *since = now;
}

int gp_cuda_open(gp_engine *e)
{
    gp_cuda *c;
    int n = 0, first, ngpus, per_gpu;
    const char *what = NULL;
    const uint64_t t_start = gp_now_ns();
    cudaError_t err = cudaGetDeviceCount(&n);
    uint64_t t_step = gp_now_ns();

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
    pthread_mutex_init(&c->retired_lock, NULL);
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
    c->open_ns[GP_OPEN_RUNTIME] = t_step - t_start;
    c->open_gen = gp_fork_generation();
    c->mem_range = (PFN_cuMemGetAddressRange_v3020)driver_call("cuMemGetAddressRange", 3020);
    c->ptr_attr = (PFN_cuPointerGetAttribute_v4000)driver_call("cuPointerGetAttribute", 4000);
    c->ptr_attrs = (PFN_cuPointerGetAttributes_v7000)driver_call("cuPointerGetAttributes", 7000);
    c->ctx_current = (PFN_cuCtxGetCurrent_v4000)driver_call("cuCtxGetCurrent", 4000);
    c->stream_ctx = (PFN_cuStreamGetCtx_v9020)driver_call("cuStreamGetCtx", 9020);
    if ((c->primary = OPENSSL_zalloc((size_t)ngpus * sizeof(*c->primary))) == NULL
        || (c->ord_pool = OPENSSL_zalloc((size_t)ngpus * sizeof(*c->ord_pool))) == NULL)
        c->mem_range = NULL;
    c->stage_ready = gp_stage_pool_init(&c->stage, STAGE_POOL_MAX, stage_alloc, stage_release, c);
    gp_copy_crew_init(&c->crew, copy_threads(e));
    if (e->knobs.reg_cache_mib > 0) {
        const gp_reg_ops reg = { reg_host, unreg_host, (void *)(intptr_t)first };

        (void)gp_reg_cache_open(&reg, (size_t)e->knobs.reg_cache_mib << 20);
    }
    e->cuda = c;
    open_step_end(c, GP_OPEN_OBJECTS, &t_step);
    for (int i = 0; i < ngpus * per_gpu; i++) {
        gp_cuda_slot *sl = &c->slots[i];

        pthread_mutex_init(&sl->lock, NULL);
        c->nslots = i + 1;
        sl->device = first + i / per_gpu;
        int ok = setup_step(cudaSetDevice(sl->device), "cudaSetDevice", &err, &what);

        open_step_end(c, GP_OPEN_CONTEXTS, &t_step);
        ok = ok && setup_step(gp_kernel_prepare(&sl->shape, sl->device), "the kernel's attributes", &err, &what);
        open_step_end(c, GP_OPEN_KERNELS, &t_step);
        if (!ok
            || !setup_step(cudaStreamCreateWithFlags(&sl->stream, cudaStreamNonBlocking), "cudaStreamCreate", &err, &what)
            || !setup_step(cudaStreamCreateWithFlags(&sl->ahead, cudaStreamNonBlocking), "cudaStreamCreate", &err, &what)
            || !setup_step(cudaStreamCreateWithFlags(&sl->back, cudaStreamNonBlocking), "cudaStreamCreate", &err, &what)
            || !setup_step(cudaEventCreateWithFlags(&sl->copied, cudaEventDisableTiming | cudaEventBlockingSync),
                           "cudaEventCreate", &err, &what)
            || !setup_step(cudaEventCreateWithFlags(&sl->callers, cudaEventDisableTiming), "cudaEventCreate", &err, &what)
            || !setup_step(done_words_alloc(sl), "cudaHostAlloc of the done words", &err, &what)
            || !setup_step(step_events_create(e, sl), "cudaEventCreate", &err, &what)) {
            gp_cuda_failed(e, err == cudaErrorNotSupported
                                  ? "the kernel's attributes (the kernel built for this GPU wants a 128 KiB AES table "
                                    "per block, which it cannot hold: build with -Dgpu_sm=<its SM>)"
                                  : what, err);
            gp_cuda_close(e);
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
        if (!gp_cuda_arena_reserve(e, sl, ARENA_MIN)) {
            gp_cuda_close(e);
            return 0;
        }
        if (i % per_gpu == 0 && i / per_gpu < GP_KEY_TABLE_GPUS)
            keys_open(&c->keys[i / per_gpu], sl->device);
        /* The runtime's context of this GPU, current since cudaSetDevice (device mode's check). */
        if (i % per_gpu == 0 && c->ctx_current != NULL && c->primary != NULL
            && c->ctx_current(&c->primary[i / per_gpu]) != CUDA_SUCCESS)
            c->mem_range = NULL;
        if (i % per_gpu == 0 && c->ord_pool != NULL && !ordered_pool_open(&c->ord_pool[i / per_gpu], sl->device))
            c->stream_ctx = NULL;   /* no pool for its blocks: the mode is not offered */
        open_step_end(c, GP_OPEN_OBJECTS, &t_step);
    }
    /* The queue may now flush a batch while others run (queue.c). */
    atomic_store(&e->max_inflight, c->nslots);
    return 1;
}

void gp_cuda_close(gp_engine *e)
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
        gp_log_line("gpuprov cuda: opened in %.1f ms: runtime %.1f, contexts %.1f, kernels %.1f, streams, events, memory and threads %.1f\n",
                    (double)(c->open_ns[GP_OPEN_RUNTIME] + c->open_ns[GP_OPEN_CONTEXTS] + c->open_ns[GP_OPEN_KERNELS]
                             + c->open_ns[GP_OPEN_OBJECTS]) / 1e6,
                    (double)c->open_ns[GP_OPEN_RUNTIME] / 1e6, (double)c->open_ns[GP_OPEN_CONTEXTS] / 1e6,
                    (double)c->open_ns[GP_OPEN_KERNELS] / 1e6, (double)c->open_ns[GP_OPEN_OBJECTS] / 1e6);
        gp_log_line("gpuprov cuda: per batch on the GPU: issue_us=%.1f (after_callers_us=%.1f)%s; arena growths=%.0f "
                    "taking %.1f ms; device-mode pointer checks=%.0f at %.2f us\n",
                    (double)atomic_load(&c->st_ns_issue) / nb / 1e3, (double)atomic_load(&c->st_ns_order) / nb / 1e3,
                    steps, (double)atomic_load(&c->st_grows), (double)atomic_load(&c->st_ns_grow) / 1e6,
                    (double)atomic_load(&c->st_checks),
                    atomic_load(&c->st_checks) > 0
                        ? (double)atomic_load(&c->st_ns_check) / (double)atomic_load(&c->st_checks) / 1e3 : 0.0);
    }
    if (e->knobs.stats && gp_reg_cache_on()) {
        gp_reg_counts rn;

        gp_reg_cache_counts(&rn);
        gp_log_line("gpuprov cuda: reg_cache hits=%llu misses=%llu registered=%llu invalidated=%llu refused=%llu "
                    "pinned_mib=%.1f\n", (unsigned long long)rn.hits, (unsigned long long)rn.misses,
                    (unsigned long long)rn.registered, (unsigned long long)rn.invalidated,
                    (unsigned long long)rn.refused, (double)rn.pinned_bytes / (1 << 20));
    }
    gp_reg_cache_close();   /* before the contexts go */
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
    for (int d = 0; c->ord_pool != NULL && d < c->ngpus; d++)
        if (c->ord_pool[d].own)
            (void)cudaMemPoolDestroy(c->ord_pool[d].pool);   /* freed once its last block is */
    chunks_drain(c);
    pthread_mutex_destroy(&c->retired_lock);
    if (c->stage_ready)
        gp_stage_pool_cleanup(&c->stage);   /* no job holds a chunk: the engine is being freed */
    gp_copy_crew_stop(&c->crew);
    OPENSSL_free(c->slots);
    OPENSSL_free(c->primary);
    OPENSSL_free(c->ord_pool);
    OPENSSL_free(c);
    e->cuda = NULL;
}

/* Scratch arrays for a batch of n requests, grown by doubling. */
int gp_cuda_scratch_reserve(gp_cuda_slot *c, size_t n)
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
