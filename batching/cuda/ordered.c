/* SPDX-License-Identifier: Apache-2.0 */
/* Stream-ordered device mode: a message's requests launched on the caller's stream, planned from its shadow, its state kept on the GPU. */
#include <stdint.h>
#include <string.h>

#include <openssl/crypto.h>

#include "batching/async_wait.h"
#include "batching/cuda/internal.h"
#include "batching/kstate.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

/*
 * gp_executor.ordered_run and ordered_wait (batching/executor.h; engine.h, gp_msg_set_stream). A
 * stream-ordered message has a block of its own on the GPU that holds its data (allocated in
 * stream order on the caller's stream from the GPU's pool of such blocks, device.c
 * ordered_pool_open, and freed by cudaFreeAsync behind its last work, so no call here synchronises
 * the device): its state, its key schedule, and one request's descriptors, refs, span counters,
 * carried AAD, powers of r and partial MACs. Each request is two launches on the caller's stream
 * and the call returns:
 *   1. gp_ordered_kernel writes the request's descriptors into the block from its launch
 *      parameter (no host buffer has to outlive the call);
 *   2. the batch kernel runs the request in place on the caller's buffers and leaves the
 *      message's state in the block for the next request.
 * The stream orders them after the caller's earlier work and before its later work, and each
 * request after the one before it, so one block serves every request of the message in turn. The
 * host plans each request from the message's shadow state (batching/kstate.h), as the requests
 * before it will leave the state, without waiting for them. A tag is written by its kernel into
 * the message's mapped pinned chunk (batching/stage.h), and the state behind it; an event after
 * them is what GET_TAG and a decrypt Final wait for. The block, the chunk and the key's copy in
 * the block belong to the message until its release (gp_cuda_ordered_release), which clears the
 * block and frees it behind the message's work, and retires the chunk (device.c: back in the
 * pool once an event after that work has completed).
 *
 * A pipeline call's messages that start being queued together (ordered_batch) share one block,
 * chunk and event (ordered_block: a group): their states side by side, one key schedule, their
 * tags and states coming back side by side in the chunk. One released while others still hold
 * the block has its own slot cleared behind its work (ordered_slot_clear); the last of them to be
 * released clears and frees the block; messages released together (gp_cuda_ordered_release_all: a
 * pipeline's re-init or end) that hold all of it clear and free it once. A lone message's block
 * is a group of one.
 *
 * Requests it does not queue (GP_REQ_SYNC: the engine runs them synchronously, ordered after the
 * stream; the next one is queued again): a data request with body units whose buffers are off
 * their 16-byte boundary at the body (the units' vector accesses; the synchronous path copies
 * such data through its staged region: shape.h), or when no staging chunk is free, or when the
 * GPU has no room for the block the whole request needs (cudaErrorMemoryAllocation, found before
 * any of it is queued: the message is handed back, its queued work waited for).
 */

/*
 * A block serves n messages (n = 1: a lone message's; 2..GP_ORDERED_BATCH_MAX: a group, the
 * messages of a pipeline call that start being queued together, one key): their states side by
 * side (message i's at i * ORD_STATE_STRIDE), the key schedule, then the request area (one
 * request's part, ordered_layout, or a batch pass's, gp_ordered_pass_next). Its chunk (host,
 * mapped) lays the states and key out as the block does, going up once, then the messages' tags
 * and their states coming back. One event follows the block's last queued work.
 */
#define ORD_STATE_STRIDE 512u
#define ORD_KEY_AT(n) ((size_t)(n) * ORD_STATE_STRIDE)
#define ORD_REQ_AT(n) ((ORD_KEY_AT(n) + KEY_STRIDE + 127) & ~(size_t)127)
#define ORD_CH_TAG(n) ORD_REQ_AT(n)
#define ORD_CH_STATE(n) ((ORD_CH_TAG(n) + (size_t)(n) * 16 + 127) & ~(size_t)127)
#define ORD_CH_USED(n) (ORD_CH_STATE(n) + (size_t)(n) * ORD_STATE_STRIDE)
#define ORD_POWS_BYTES ALIGN16(sizeof(gp_mac_pows))
_Static_assert(sizeof(gp_msg_state) <= ORD_STATE_STRIDE && ORD_CH_USED(GP_ORDERED_BATCH_MAX) <= GP_STAGE_CHUNK_BYTES,
               "the chunk holds a group's host side");
#define ORD_MIN_BLOCK ((size_t)1 << 20)

typedef struct ordered_block {
    gp_cuda *g;
    int gpu;
    unsigned int n;              /* messages laid out in it */
    unsigned int holders;        /* messages still holding it (the last one's release frees it) */
    cudaStream_t stream;
    uint8_t *dev;                /* cudaMallocFromPoolAsync on `stream` */
    size_t cap;
    gp_stage_chunk *chunk;
    cudaEvent_t last;            /* after the block's last queued work */
    int synced;                  /* `last` waited for since it was last recorded (block_mark) */
    int failed;                  /* work of one of its messages failed */
} ordered_block;

typedef struct cuda_ordered {
    ordered_block *b;
    gp_engine *e;
    unsigned int slot;           /* its state at slot * ORD_STATE_STRIDE; its tag and state in the chunk */
    int state_back;              /* its state's copy behind b->last is current */
    int failed;
    gp_msg_state shadow;         /* the state the requests queued so far will leave */
} cuda_ordered;

static size_t state_at(const cuda_ordered *o)
{
    return (size_t)o->slot * ORD_STATE_STRIDE;
}

/* One request's part of the block, from its request area. */
typedef struct ordered_layout {
    size_t work, spans, aad, pows, partials, refs, end;
} ordered_layout;

static void ordered_layout_of(const ordered_block *b, const gp_job *j, ordered_layout *l)
{
    l->work = ORD_REQ_AT(b->n);
    l->spans = l->work + ALIGN16(sizeof(gp_work));
    l->aad = ALIGN16(l->spans + j->nspans * sizeof(uint32_t));
    l->pows = ALIGN16(l->aad + GP_ORDERED_AAD_MAX);
    l->partials = (l->pows + ORD_POWS_BYTES + 127) & ~(size_t)127;
    l->refs = ALIGN16(l->partials + (size_t)gp_partials_bytes(j));
    l->end = l->refs + ((size_t)j->nunits + 2) * sizeof(gp_unit_ref);
}

static const gp_kernel_shape *shape_of(const gp_cuda *g, int gpu)
{
    return &g->slots[(gpu - g->stage_device) * (g->nslots / g->ngpus)].shape;
}

static int ordered_failed(cuda_ordered *o, const char *what, cudaError_t err)
{
    o->failed = 1;
    o->b->failed = 1;
    gp_cuda_failed(o->e, what, err);
    return GP_REQ_FAILED;
}

/* The pool the block's memory comes from: its GPU's (device.c). */
static cudaMemPool_t pool_of(const ordered_block *b)
{
    return b->g->ord_pool[b->gpu - b->g->stage_device].pool;
}

/* A block's size for `need` bytes from `cap`: at least ORD_MIN_BLOCK, doubled until it holds them. */
static size_t ordered_cap(size_t cap, size_t need)
{
    while (cap < need)
        cap = cap < ORD_MIN_BLOCK ? ORD_MIN_BLOCK : cap * 2;
    return cap;
}

/*
 * The block large enough for `need` bytes: a larger one takes the states and key over in stream
 * order, and the old one is cleared and freed behind the work that reads it. Whatever it returns,
 * the block is whole: cudaErrorMemoryAllocation (no room on the GPU now; the allocation's, or
 * an enqueue's before the larger block took over) leaves it as it was, so a caller that has queued
 * nothing on it yet may decline; an error once the larger block has taken over (clearing or
 * freeing the old one) leaves the old one to leak uncleared rather than freed uncleared.
 */
static cudaError_t ordered_reserve(ordered_block *b, size_t need)
{
    uint8_t *grown = NULL, *old = b->dev;
    const size_t cap = ordered_cap(b->cap, need), old_cap = b->cap;
    cudaError_t err;

    if (need <= b->cap)
        return cudaSuccess;
    if ((err = cudaMallocFromPoolAsync((void **)&grown, cap, pool_of(b), b->stream)) != cudaSuccess)
        return err;
    if ((err = cudaMemcpyAsync(grown, old, ORD_REQ_AT(b->n), cudaMemcpyDeviceToDevice, b->stream)) != cudaSuccess) {
        (void)cudaFreeAsync(grown, b->stream);
        return err;
    }
    b->dev = grown;
    b->cap = cap;
    if ((err = cudaMemsetAsync(old, 0, old_cap, b->stream)) == cudaSuccess)
        err = cudaFreeAsync(old, b->stream);
    return err == cudaErrorMemoryAllocation ? cudaErrorUnknown : err;   /* the block changed: not a decline */
}

/* The block and chunk back, cleansed (the block in stream order behind its work is the caller's). */
static void ordered_block_drop(ordered_block *b)
{
    OPENSSL_cleanse(b->chunk->host, ORD_CH_USED(b->n));
    gp_stage_put(&b->g->stage, b->chunk);
    OPENSSL_clear_free(b, sizeof(*b));
}

/* The block's event recorded behind the work queued so far: what a wait now waits for. */
static cudaError_t block_mark(ordered_block *b)
{
    b->synced = 0;
    return cudaEventRecord(b->last, b->stream);
}

/*
 * The ordered state of messages ms[0..n) (one key), made at their first queued request from the
 * states they started with: one block, with their states and key schedule sent up from the chunk
 * in one copy (the chunk keeps them until the block's release, so the copy may run whenever the
 * stream gets there), `need` bytes at least (ordered_cap: a batch's block is made at the size its
 * passes need, not grown to it). 0, err cudaSuccess: no chunk free now; nothing changed.
 */
static int ordered_block_new(gp_engine *e, gp_msg *const *ms, unsigned int n, int gpu, uint64_t stream, size_t need,
                             cudaError_t *err)
{
    gp_cuda *g = e->cuda;
    cuda_ordered *os[GP_ORDERED_BATCH_MAX];
    ordered_block *b;
    unsigned int i;

    *err = cudaSuccess;
    if (!g->stage_ready || n == 0 || n > GP_ORDERED_BATCH_MAX)
        return 0;
    gp_stage_grow(&g->stage);
    if ((b = OPENSSL_zalloc(sizeof(*b))) == NULL)
        return 0;
    (void)gp_cuda_chunks_reap(g, 0);   /* released blocks' chunks whose work has run */
    if ((b->chunk = gp_stage_get(&g->stage)) == NULL
        && (gp_cuda_chunks_reap(g, 1) == 0 || (b->chunk = gp_stage_get(&g->stage)) == NULL)) {
        OPENSSL_free(b);
        return 0;
    }
    b->g = g;
    b->gpu = gpu;
    b->n = n;
    b->stream = (cudaStream_t)(uintptr_t)stream;
    for (i = 0; i < n; i++) {
        if ((os[i] = OPENSSL_zalloc(sizeof(*os[i]))) == NULL)
            goto fail;
        os[i]->b = b;
        os[i]->e = e;
        os[i]->slot = i;
        os[i]->shadow = ms[i]->st;
        memcpy(b->chunk->host + state_at(os[i]), &ms[i]->st, sizeof(ms[i]->st));
        memset(b->chunk->host + state_at(os[i]) + sizeof(ms[i]->st), 0, ORD_STATE_STRIDE - sizeof(ms[i]->st));
    }
    memcpy(b->chunk->host + ORD_KEY_AT(n), gp_key_sched_get(ms[0]->key), GP_KEY_SCHED_DEVICE_BYTES);
    if ((*err = cudaEventCreateWithFlags(&b->last, cudaEventDisableTiming)) != cudaSuccess)
        goto fail;
    b->cap = ordered_cap(0, need > ORD_REQ_AT(n) ? need : ORD_REQ_AT(n));
    if ((*err = cudaMallocFromPoolAsync((void **)&b->dev, b->cap, pool_of(b), b->stream)) != cudaSuccess)
        goto fail_event;
    if ((*err = cudaMemcpyAsync(b->dev, b->chunk->host, ORD_KEY_AT(n) + GP_KEY_SCHED_DEVICE_BYTES,
                                cudaMemcpyHostToDevice, b->stream)) != cudaSuccess) {
        (void)cudaFreeAsync(b->dev, b->stream);
        goto fail_event;
    }
    for (i = 0; i < n; i++)
        ms[i]->ordered = os[i];
    b->holders = n;
    return 1;
fail_event:
    (void)cudaEventDestroy(b->last);
fail:
    while (i-- > 0)
        OPENSSL_clear_free(os[i], sizeof(*os[i]));
    ordered_block_drop(b);
    return 0;
}

/* A lone message's ordered state (a block of its own, `need` bytes at least); NULL, err
 * cudaSuccess: no chunk free now. */
static cuda_ordered *ordered_new(gp_engine *e, gp_msg *m, int gpu, uint64_t stream, size_t need, cudaError_t *err)
{
    return ordered_block_new(e, &m, 1, gpu, stream, need, err) ? m->ordered : NULL;
}

/*
 * A launch pair on `stream`: the descriptor kernel `desc` (grid `sgrid` of GP_COPY_BLOCK threads,
 * its one parameter `desc_args`) writes the work descriptors and refs into the block at `base`,
 * then the batch kernel runs the `nr` refs at `refs` of the works at `works` there.
 */
static cudaError_t ordered_launch_pair(const void *desc, dim3 sgrid, void *desc_args, uint8_t *base, gp_unit_ref *refs,
                                       unsigned int nr, gp_work *works, unsigned int flags, const gp_kernel_shape *ks,
                                       cudaStream_t stream)
{
    const dim3 sblock = { GP_COPY_BLOCK, 1, 1 };
    void *sargs[1] = { desc_args }, *kargs[5] = { &refs, &nr, &works, &base, &flags };
    dim3 grid, block;
    size_t smem;
    const void *kernel = gp_kernel_geometry(nr, flags, ks, &grid, &block, &smem);
    cudaError_t err;

    if ((err = cudaLaunchKernel(desc, sgrid, sblock, sargs, 0, stream)) == cudaSuccess)
        err = cudaLaunchKernel(kernel, grid, block, kargs, smem, stream);
    return err;
}

/*
 * One request on the stream: its descriptors from the launch parameter (gp_ordered_kernel), then
 * the batch kernel on its refs. `in`/`out`: the data (device memory), an AAD piece (`in` in the
 * block's AAD room), or a tag's destination (`out`: the chunk, mapped). The shadow moves on.
 * need != NULL: only planned (nothing queued), the block's bytes it needs raised into *need.
 */
static cudaError_t ordered_launch(cuda_ordered *o, gp_msg *m, uint32_t op, const uint8_t *aad, size_t aad_len,
                                  const uint8_t *in, uint8_t *out, size_t len, size_t *need)
{
    gp_ordered_args args_mem, *args = &args_mem;   /* on a thread's stack (never a job's) */
    ordered_block *b = o->b;
    const gp_kernel_shape *ks = shape_of(b->g, b->gpu);
    gp_job j;
    ordered_layout l;
    unsigned int nr, flags = gp_alg_is_aes(o->shadow.alg) ? GP_BATCH_AES : 0;
    uint8_t *base;
    dim3 sgrid = { 1, 1, 1 };
    cudaError_t err;

    gp_job_plan(&j, &o->shadow, op, op == GP_OP_TAG ? 0 : len, (uint32_t)aad_len);
    ordered_layout_of(b, &j, &l);
    if (need != NULL) {
        *need = l.end > *need ? l.end : *need;
        gp_kstate_shadow_advance(&o->shadow, op, op == GP_OP_TAG ? 0 : len, (uint32_t)aad_len);
        OPENSSL_cleanse(&j, sizeof(j));
        return cudaSuccess;
    }
    memset(args, 0, sizeof(*args));
    if ((err = ordered_reserve(b, l.end)) != cudaSuccess)   /* reserved already (ordered_run_here) */
        return err;
    base = b->dev;
    args->work.job = j;
    args->work.key_off = ORD_KEY_AT(b->n);
    args->work.state_off = state_at(o);
    args->work.partials_off = l.partials;
    args->work.spans_off = (uint32_t)l.spans;
    args->work.in_off = gpu_addr(in) - gpu_addr(base);
    args->work.out_off = gpu_addr(out) - gpu_addr(base);
    if (aad_len > 0) {
        args->work.job.aad_off = l.aad;
        args->aad_at = gpu_addr(base + l.aad);
        args->aad_len = (uint32_t)aad_len;
        memcpy(args->aad, aad, aad_len);
    }
    if (j.nunits > 0 && o->shadow.alg == GP_ALG_CHACHA20_POLY1305) {
        args->work.pows_off = l.pows;
        args->pows_at = gpu_addr(base + l.pows);
        memcpy(&args->pows, gp_kstate_pows(m, gp_key_sched_get(m->key), &j), sizeof(gp_mac_pows));
    }
    args->work_at = gpu_addr(base + l.work);
    args->refs_at = gpu_addr(base + l.refs);
    args->spans_at = gpu_addr(base + l.spans);
    sgrid.x = (unsigned int)((j.nunits + 2 + GP_COPY_BLOCK - 1) / GP_COPY_BLOCK);
    if (sgrid.x > GP_COPY_MAX_GRID)
        sgrid.x = GP_COPY_MAX_GRID;
    /* The lead always runs (no idle lead: the state it would change is on the GPU, not here). */
    nr = j.nunits + 1;
    err = ordered_launch_pair((const void *)gp_ordered_kernel, sgrid, args, base, (gp_unit_ref *)(base + l.refs), nr,
                              (gp_work *)(base + l.work), flags, ks, b->stream);
    OPENSSL_cleanse(args, sizeof(*args));   /* the launch copied it (the powers are secret) */
    OPENSSL_cleanse(&j, sizeof(j));
    if (err == cudaSuccess)
        gp_kstate_shadow_advance(&o->shadow, op, op == GP_OP_TAG ? 0 : len, (uint32_t)aad_len);
    return err;
}

/* Where o's tag and its state coming back are in the chunk (host; tag_dev: as the GPU sees it). */
static uint8_t *tag_host(const cuda_ordered *o)
{
    return o->b->chunk->host + ORD_CH_TAG(o->b->n) + (size_t)o->slot * 16;
}

static uint64_t tag_dev(const cuda_ordered *o)
{
    return o->b->chunk->dev + ORD_CH_TAG(o->b->n) + (size_t)o->slot * 16;
}

static uint8_t *state_host(const cuda_ordered *o)
{
    return o->b->chunk->host + ORD_CH_STATE(o->b->n) + state_at(o);
}

/* The state behind the message's work, into the chunk, and the block's event after it. */
static cudaError_t ordered_state_back(cuda_ordered *o)
{
    ordered_block *b = o->b;
    cudaError_t err;

    if ((err = cudaMemcpyAsync(state_host(o), b->dev + state_at(o), sizeof(gp_msg_state), cudaMemcpyDeviceToHost,
                               b->stream)) == cudaSuccess
        && (err = block_mark(b)) == cudaSuccess)
        o->state_back = 1;
    return err;
}

typedef struct ordered_call {
    gp_engine *e;
    gp_request *r;
    uint64_t stream;
    uint8_t *tag;
    gp_msg *m;
    int st;
} ordered_call;

static int ordered_wait_here(void *arg);
static int ordered_release_here(void *arg);

/* Hand the message back to the synchronous path: its queued work done, its state in m->st (on
 * the thread that runs ordered_run_here: off a job's stack already). */
static int ordered_give_back(gp_engine *e, gp_msg *m)
{
    ordered_call w = { e, NULL, 0, NULL, m, 0 };

    if (m->ordered != NULL) {
        if (ordered_wait_here(&w) != GP_REQ_OK)
            return GP_REQ_FAILED;
        (void)ordered_release_here(m);
    }
    return GP_REQ_SYNC;
}

/* Request r's launches (op: its kind) on the stream; need != NULL: only planned, as ordered_launch. */
static cudaError_t ordered_request(gp_engine *e, cuda_ordered *o, gp_msg *m, const gp_request *r, uint32_t op,
                                   size_t *need)
{
    cudaError_t err = cudaSuccess;

    if (op == GP_OP_AAD) {
        /* In pieces the launch parameter holds, each carried by an AAD request of no bytes of its
         * own (the lead absorbs carried AAD first: the same MAC input in the same order). Held
         * AAD before it (none: an AAD request is not held when it is this long) goes first. */
        if (r->aad_len > 0)
            err = ordered_launch(o, m, GP_OP_AAD, r->aad, r->aad_len, NULL, NULL, 0, need);
        for (size_t off = 0; off < r->len && err == cudaSuccess; off += GP_ORDERED_AAD_MAX) {
            const size_t n = r->len - off < GP_ORDERED_AAD_MAX ? r->len - off : GP_ORDERED_AAD_MAX;

            err = ordered_launch(o, m, GP_OP_AAD, r->in + off, n, NULL, NULL, 0, need);
        }
    } else if (op == GP_OP_TAG) {
        err = ordered_launch(o, m, GP_OP_TAG, r->aad, r->aad_len, NULL, (uint8_t *)(uintptr_t)tag_dev(o), 0, need);
        if (err == cudaSuccess && need == NULL)
            err = ordered_state_back(o);
    } else {
        /* Long requests in slices (kstate.h): the block stays bounded, as the slots' arenas do. */
        const size_t slice = gp_kstate_slice_bytes(e);
        size_t off = 0;

        do {
            const size_t n = r->len - off < slice ? r->len - off : slice;

            err = ordered_launch(o, m, op, off == 0 ? r->aad : NULL, off == 0 ? r->aad_len : 0, r->in + off,
                                 r->out + off, n, need);
            off += n;
        } while (off < r->len && err == cudaSuccess);
    }
    return err;
}

static int ordered_run_here(void *arg)
{
    ordered_call *c = arg;
    gp_request *r = c->r;
    gp_msg *m = r->msg;
    cuda_ordered *o = m->ordered;
    const uint32_t op = r->kind == GP_REQ_AAD ? GP_OP_AAD : r->kind == GP_REQ_CRYPT
                        ? (m->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT) : GP_OP_TAG;
    const int gpu = r->kind == GP_REQ_CRYPT && r->devmem ? r->gpu : o != NULL ? o->b->gpu : -1;
    cudaError_t err = cudaSuccess;
    int saved, st;

    if (o != NULL && o->failed)
        return GP_REQ_FAILED;
    if (gpu < 0)
        return ordered_give_back(c->e, m);   /* nothing of the message on a GPU yet: a tag of nothing */
    if (op == GP_OP_ENCRYPT || op == GP_OP_DECRYPT) {
        gp_job j;

        gp_job_plan(&j, o != NULL ? &o->shadow : &m->st, op, r->len, (uint32_t)r->aad_len);
        if (j.nunits > 0 && ((gpu_addr(r->in + j.head_len) & 15) != 0 || (gpu_addr(r->out + j.head_len) & 15) != 0))
            return ordered_give_back(c->e, m);
    }
    if (!gp_cuda_device_enter(gpu, &saved))
        return GP_REQ_FAILED;
    if (o == NULL && (o = ordered_new(c->e, m, gpu, c->stream, 0, &err)) == NULL) {
        st = GP_REQ_SYNC;   /* no chunk or no room: this one runs synchronously */
        if (err == cudaSuccess || err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
        } else {
            gp_cuda_failed(c->e, "stream-ordered setup", err);   /* the GPU current: the fault names it */
            st = GP_REQ_FAILED;
        }
        gp_cuda_device_leave(saved);
        return st;
    }
    /* The block's room for the whole request first, planned on the shadow before it moves: a GPU
     * without it declines the request (synchronous, as with no chunk) before any of it is queued. */
    {
        gp_msg_state sh = o->shadow;
        size_t need = 0;

        (void)ordered_request(c->e, o, m, r, op, &need);
        o->shadow = sh;
        OPENSSL_cleanse(&sh, sizeof(sh));
        if ((err = ordered_reserve(o->b, need)) == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            gp_cuda_device_leave(saved);
            return ordered_give_back(c->e, m);
        }
    }
    o->state_back = 0;
    if (err == cudaSuccess)
        err = ordered_request(c->e, o, m, r, op, NULL);
    if (err == cudaSuccess && op != GP_OP_TAG)
        err = block_mark(o->b);
    st = err == cudaSuccess ? GP_REQ_OK : ordered_failed(o, "stream-ordered launch", err);   /* the GPU current */
    gp_cuda_device_leave(saved);
    return st;
}

int gp_cuda_ordered_run(gp_engine *e, gp_request *r, uint64_t stream)
{
    ordered_call c = { e, r, stream, NULL, NULL, 0 };

    /* CUDA calls need more stack than an async job's (devmem.c) */
    return gp_async_in_job() ? gp_call_off_job_stack(ordered_run_here, &c) : ordered_run_here(&c);
}

/*
 * A pipeline call's requests on one stream (gp_exec_cuda.ordered_batch, batching/executor.h): the
 * messages' data requests or tags in passes (batching/kstate.h, gp_ordered_pass_next), each pass
 * one launch pair on the stream: gp_ordered_batch_kernel writes every slot's descriptors from its
 * parameter into the pass's lead block (its first slot's message's), then one batch kernel runs
 * them all. A slot's work reads and writes its own message's state and key schedule in that
 * message's block (offsets modulo 2^64 from the lead block, as gp_work's are) and its data in
 * place; its span counters, AAD, powers, partials and refs are the pass's, in the lead block's
 * request area, which the stream has finished with before the next pass or request rewrites it.
 * After the last pass each block's event is recorded once, after tags its messages' states
 * coming back first (a group's in one copy). The passes are planned once on copies of the shadows
 * before anything is queued, so each lead block is made or grown to its passes' need first: a GPU
 * without that room (cudaErrorMemoryAllocation) declines the batch, each request then alone, as
 * the other reasons to decline do, rather than failing it part-way.
 */
typedef struct ordered_batch_call {
    gp_engine *e;
    gp_request *reqs;
    size_t n;
    uint64_t stream;
} ordered_batch_call;

/* One pass: its descriptors into `args`, then its two launches. */
static cudaError_t ordered_pass_launch(cuda_ordered *const *os, const gp_request *reqs, const gp_ordered_pass *pass,
                                       gp_ordered_batch_args *args)
{
    ordered_block *lead = os[pass->s[0].req]->b;
    const size_t at = ORD_REQ_AT(lead->n);   /* the pass's area (planned from 0) */
    const gp_kernel_shape *ks = shape_of(lead->g, lead->gpu);
    dim3 sgrid = { 1, 1, 1 };
    unsigned int flags = 0;
    uint32_t most = 0;
    uint8_t *base;
    cudaError_t err;

    if ((err = ordered_reserve(lead, at + pass->end)) != cudaSuccess)   /* reserved already: nothing to do */
        return err;
    base = lead->dev;
    args->base = gpu_addr(base);
    args->works_at = gpu_addr(base + at + pass->works);
    args->refs_at = gpu_addr(base + at + pass->refs);
    args->nworks = pass->n;
    args->nrefs = pass->nrefs;
    for (uint32_t k = 0; k < pass->n; k++) {
        const gp_ordered_slot *sl = &pass->s[k];
        const gp_request *r = &reqs[sl->req];
        cuda_ordered *o = os[sl->req];
        gp_work *w = &args->work[k];
        const int tag = r->kind == GP_REQ_TAG;

        memset(w, 0, sizeof(*w));
        w->job = sl->job;
        w->key_off = gpu_addr(o->b->dev + ORD_KEY_AT(o->b->n)) - gpu_addr(base);
        w->state_off = gpu_addr(o->b->dev + state_at(o)) - gpu_addr(base);
        w->partials_off = at + sl->partials;
        w->spans_off = (uint32_t)(at + sl->spans);
        w->in_off = (tag ? 0 : gpu_addr(r->in + sl->off)) - gpu_addr(base);
        w->out_off = (tag ? tag_dev(o) : gpu_addr(r->out + sl->off)) - gpu_addr(base);
        if (sl->aad_len > 0) {
            w->job.aad_off = at + sl->aad;
            memcpy(args->extra + sl->extra_at, r->aad, sl->aad_len);
        }
        if (sl->pows) {
            w->pows_off = at + sl->pow_at;
            memcpy(args->extra + sl->extra_at + ALIGN16(sl->aad_len),
                   gp_kstate_pows(r->msg, gp_key_sched_get(r->msg->key), &sl->job), sizeof(gp_mac_pows));
        }
        args->ref_first[k] = sl->ref_first;
        args->extra_at[k] = sl->extra_at;
        flags |= gp_alg_is_aes(o->shadow.alg) ? GP_BATCH_AES : 0;
        most = sl->job.nunits + 1 > most ? sl->job.nunits + 1 : most;
    }
    sgrid.x = (most + GP_COPY_BLOCK - 1) / GP_COPY_BLOCK;
    if (sgrid.x > GP_COPY_MAX_GRID)
        sgrid.x = GP_COPY_MAX_GRID;
    sgrid.y = pass->n;
    err = ordered_launch_pair((const void *)gp_ordered_batch_kernel, sgrid, args, base,
                              (gp_unit_ref *)(base + at + pass->refs), pass->nrefs,
                              (gp_work *)(base + at + pass->works), flags, ks, lead->stream);
    OPENSSL_cleanse(args->extra, pass->extra);   /* the launch copied it (the powers are secret) */
    return err;
}

/* What a batch needs of the heap: zeroed, cleansed at the end (the powers and shadows are secret). */
typedef struct ordered_batch_mem {
    gp_ordered_batch_args args;                /* the launch copies all of it (the slots' rewritten each pass) */
    gp_msg_state plan[GP_ORDERED_BATCH_MAX];   /* copies of the shadows, the passes first planned on */
} ordered_batch_mem;

/* The requests reqs[0..n) as the pass planner takes them, from the shadows `sh`. */
static void ordered_batch_reqs(const gp_request *reqs, size_t n, gp_msg_state *const *sh, gp_ordered_req *q)
{
    for (size_t i = 0; i < n; i++)
        q[i] = (gp_ordered_req){ .shadow = sh[i], .aad_len = (uint32_t)reqs[i].aad_len,
                                 .op = reqs[i].kind == GP_REQ_TAG ? GP_OP_TAG
                                       : reqs[i].msg->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT,
                                 .len = reqs[i].kind == GP_REQ_TAG ? 0 : reqs[i].len };
}

static int ordered_batch_here(void *arg)
{
    ordered_batch_call *c = arg;
    gp_request *reqs = c->reqs;
    const size_t n = c->n;
    cuda_ordered *os[GP_ORDERED_BATCH_MAX];
    gp_msg *fresh[GP_ORDERED_BATCH_MAX];
    gp_msg_state *sh[GP_ORDERED_BATCH_MAX];
    gp_ordered_req q[GP_ORDERED_BATCH_MAX];
    size_t need[GP_ORDERED_BATCH_MAX], group_need = 0;   /* a lead's request area; the group's */
    gp_ordered_pass pass;
    gp_ordered_batch_args *args;
    ordered_batch_mem *mem;
    cudaError_t err = cudaSuccess;
    int gpu = -1, saved;
    unsigned int nfresh = 0;

    if (n < 2 || n > GP_ORDERED_BATCH_MAX)
        return GP_REQ_SYNC;
    /* Whatever one of them needs of the single path (a hand-over, a failure to report, a tag of
     * nothing queued): all go alone, nothing changed. */
    for (size_t i = 0; i < n; i++) {
        const gp_request *r = &reqs[i];
        const cuda_ordered *o = r->msg->ordered;
        const int g = r->kind == GP_REQ_CRYPT && r->devmem ? r->gpu : o != NULL ? o->b->gpu : -1;

        if ((r->kind != GP_REQ_CRYPT && r->kind != GP_REQ_TAG) || r->aad_len > GP_MSG_AAD_HOLD || g < 0
            || (o != NULL && (o->failed || o->b->gpu != g)) || (gpu >= 0 && g != gpu))
            return GP_REQ_SYNC;
        gpu = g;
        if (r->kind == GP_REQ_CRYPT) {
            gp_job j;

            gp_job_plan(&j, o != NULL ? &o->shadow : &r->msg->st, r->msg->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT, r->len,
                        (uint32_t)r->aad_len);
            if (j.nunits > 0 && ((gpu_addr(r->in + j.head_len) & 15) != 0 || (gpu_addr(r->out + j.head_len) & 15) != 0))
                return GP_REQ_SYNC;
        }
    }
    if ((mem = OPENSSL_zalloc(sizeof(*mem))) == NULL)
        return GP_REQ_SYNC;
    args = &mem->args;
    /* The passes planned first on copies of the shadows (nothing moved): what each pass's lead
     * block needs of its request area, so that every block has its room before anything is
     * queued, and a GPU without that room declines the batch rather than failing mid-way. */
    for (size_t i = 0; i < n; i++) {
        const cuda_ordered *o = reqs[i].msg->ordered;

        mem->plan[i] = o != NULL ? o->shadow : reqs[i].msg->st;
        sh[i] = &mem->plan[i];
        need[i] = 0;
    }
    ordered_batch_reqs(reqs, n, sh, q);
    while (gp_ordered_pass_next(q, n, gp_kstate_slice_bytes(c->e), 0, &pass))
        if (pass.end > need[pass.s[0].req])
            need[pass.s[0].req] = pass.end;
    if (!gp_cuda_device_enter(gpu, &saved)) {
        OPENSSL_clear_free(mem, sizeof(*mem));
        return GP_REQ_SYNC;
    }
    /* Messages not queued before: one block for them all where they share a key (a pipeline's
     * first call), else one each; each made at the size its passes need. */
    for (size_t i = 0; i < n; i++)
        if (reqs[i].msg->ordered == NULL && reqs[i].msg->key == reqs[0].msg->key) {
            fresh[nfresh++] = reqs[i].msg;
            group_need = need[i] > group_need ? need[i] : group_need;
        }
    if (nfresh >= 2 && nfresh == n
        && !ordered_block_new(c->e, fresh, nfresh, gpu, c->stream, ORD_REQ_AT(nfresh) + group_need, &err))
        (void)cudaGetLastError();   /* then one each, below */
    for (size_t i = 0; i < n; i++) {
        gp_msg *m = reqs[i].msg;

        if ((os[i] = m->ordered) == NULL
            && (os[i] = ordered_new(c->e, m, gpu, c->stream, ORD_REQ_AT(1) + need[i], &err)) == NULL) {
            /* no chunk or no room now (those made stay their messages'): each alone */
            (void)cudaGetLastError();
            gp_cuda_device_leave(saved);
            OPENSSL_clear_free(mem, sizeof(*mem));
            return GP_REQ_SYNC;
        }
    }
    /* Blocks made before: grown to what their passes need (a block made above has its room). */
    err = cudaSuccess;
    for (size_t i = 0; i < n && err == cudaSuccess; i++)
        if (need[i] > 0)
            err = ordered_reserve(os[i]->b, ORD_REQ_AT(os[i]->b->n) + need[i]);
    if (err == cudaErrorMemoryAllocation) {
        /* no room now, nothing queued (the blocks are whole: ordered_reserve): each alone */
        (void)cudaGetLastError();
        gp_cuda_device_leave(saved);
        OPENSSL_clear_free(mem, sizeof(*mem));
        return GP_REQ_SYNC;
    }
    for (size_t i = 0; i < n; i++) {
        os[i]->state_back = 0;
        sh[i] = &os[i]->shadow;
    }
    ordered_batch_reqs(reqs, n, sh, q);
    /* From the first pass planned the shadows have moved: every request is queued, or fails. Each
     * pass is the one planned above, so its lead block has its room already. */
    while (err == cudaSuccess && gp_ordered_pass_next(q, n, gp_kstate_slice_bytes(c->e), 0, &pass))
        err = ordered_pass_launch(os, reqs, &pass, args);
    /* Behind the last pass, each block once: its messages' states back after tags, its event. */
    for (size_t i = 0; i < n && err == cudaSuccess; i++) {
        ordered_block *b = os[i]->b;
        int tags = 0, seen = 0;

        for (size_t k = 0; k < i; k++)
            seen |= os[k]->b == b;
        if (seen)
            continue;
        for (size_t k = i; k < n; k++)
            tags |= os[k]->b == b && reqs[k].kind == GP_REQ_TAG;
        if (tags && b->n == 1)
            err = ordered_state_back(os[i]);
        else if (tags && (err = cudaMemcpyAsync(b->chunk->host + ORD_CH_STATE(b->n), b->dev,
                                                (size_t)b->n * ORD_STATE_STRIDE, cudaMemcpyDeviceToHost,
                                                b->stream)) == cudaSuccess)
            for (size_t k = i; k < n; k++)
                os[k]->state_back |= os[k]->b == b;   /* every state of the block: behind the event below */
        if (err == cudaSuccess && !(tags && b->n == 1))
            err = block_mark(b);
    }
    OPENSSL_clear_free(mem, sizeof(*mem));
    for (size_t i = 0; i < n; i++) {
        if (err != cudaSuccess)
            os[i]->failed = os[i]->b->failed = 1;
        reqs[i].status = err == cudaSuccess ? GP_REQ_OK : GP_REQ_FAILED;
    }
    if (err != cudaSuccess)   /* with the stream's GPU current: the fault names it */
        gp_cuda_failed(c->e, "stream-ordered batch launch", err);
    gp_cuda_device_leave(saved);
    return GP_REQ_OK;
}

int gp_cuda_ordered_batch(gp_engine *e, gp_request *reqs, size_t n, uint64_t stream)
{
    ordered_batch_call c = { e, reqs, n, stream };

    /* CUDA calls need more stack than an async job's (devmem.c) */
    return gp_async_in_job() ? gp_call_off_job_stack(ordered_batch_here, &c) : ordered_batch_here(&c);
}

static int ordered_wait_here(void *arg)
{
    ordered_call *c = arg;
    cuda_ordered *o = c->m->ordered;
    cudaError_t err = cudaSuccess;
    int saved;

    if (o == NULL)
        return GP_REQ_OK;   /* nothing queued: the state is the message's own */
    if (o->failed)
        return GP_REQ_FAILED;
    /* Behind a tag the state is on its way already; else (a copy of the context mid-message) it is
     * fetched now, and the wait covers what the caller queued since too (in a group: what it
     * queued for the block's other messages as well). A group's messages share the event: once
     * one has waited for it, the others' states and tags behind it are there (no CUDA call). */
    if (!o->state_back || !o->b->synced) {
        if (!gp_cuda_device_enter(o->b->gpu, &saved))
            return GP_REQ_FAILED;
        if (!o->state_back)
            err = ordered_state_back(o);
        if (err == cudaSuccess)
            err = cudaEventSynchronize(o->b->last);
        if (err != cudaSuccess) {
            (void)ordered_failed(o, "stream-ordered work", err);   /* the GPU current: the fault names it */
            gp_cuda_device_leave(saved);
            return GP_REQ_FAILED;
        }
        o->b->synced = 1;
        gp_cuda_device_leave(saved);
    }
    memcpy(&c->m->st, state_host(o), sizeof(gp_msg_state));
    if (c->tag != NULL)
        memcpy(c->tag, tag_host(o), 16);
    return GP_REQ_OK;
}

int gp_cuda_ordered_wait(gp_engine *e, gp_msg *m, uint8_t tag[16])
{
    ordered_call c = { e, NULL, 0, tag, m, 0 };

    return gp_async_in_job() ? gp_call_off_job_stack(ordered_wait_here, &c) : ordered_wait_here(&c);
}

/*
 * A group's message let go while others still hold the block: its state (a Poly1305 key, E_K(J0),
 * keystream) must not outlive it there. Behind its work on the stream: its slot in the block
 * zeroed, then that zeroed slot copied over its state going up and coming back in the chunk and
 * over its tag there (the stream orders these after the copies that wrote them; nothing of the
 * group's reads the slot again). A call the stream does not take leaves the slot to the last
 * release, which clears the block and the chunk whole.
 */
static void ordered_slot_clear(const cuda_ordered *o)
{
    ordered_block *b = o->b;
    const uint8_t *zero = b->dev + state_at(o);
    cudaError_t err;
    int saved;

    if (!gp_cuda_device_enter(b->gpu, &saved))
        return;
    if ((err = cudaMemsetAsync(b->dev + state_at(o), 0, ORD_STATE_STRIDE, b->stream)) == cudaSuccess
        && (err = cudaMemcpyAsync(b->chunk->host + state_at(o), zero, ORD_STATE_STRIDE, cudaMemcpyDeviceToHost,
                                  b->stream)) == cudaSuccess
        && (err = cudaMemcpyAsync(state_host(o), zero, ORD_STATE_STRIDE, cudaMemcpyDeviceToHost, b->stream))
           == cudaSuccess)
        err = cudaMemcpyAsync(tag_host(o), zero, 16, cudaMemcpyDeviceToHost, b->stream);
    if (err != cudaSuccess)
        (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
}

/* The block's last holder gone: the block cleared (states, key, powers, partials) and freed behind
 * its work, its event recorded behind that, and the chunk retired (device.c: back in the pool once
 * the event has completed, the event with it). */
static void ordered_block_release(ordered_block *b)
{
    gp_cuda *g = b->g;
    cudaError_t err = cudaErrorUnknown;
    int saved;

    if (gp_cuda_device_enter(b->gpu, &saved)) {
        if ((err = cudaMemsetAsync(b->dev, 0, b->cap, b->stream)) == cudaSuccess
            && (err = cudaFreeAsync(b->dev, b->stream)) == cudaSuccess
            && (err = cudaEventRecord(b->last, b->stream)) == cudaSuccess) {
            gp_cuda_chunk_retire(g, b->chunk, ORD_CH_USED(b->n), b->last);
            OPENSSL_clear_free(b, sizeof(*b));
        } else {
            (void)cudaEventDestroy(b->last);   /* may be destroyed before it completes */
        }
        (void)cudaGetLastError();
        (void)gp_cuda_chunks_reap(g, 0);
        gp_cuda_device_leave(saved);
    }
    if (err == cudaSuccess)
        return;
    if (!b->failed)
        ordered_block_drop(b);   /* the stream took none of it: nothing of the block's can still run there */
    /* (a failed GPU's stream may still hold the block's work: its chunk and states are left) */
}

static int ordered_release_here(void *arg)
{
    gp_msg *m = arg;
    cuda_ordered *o = m->ordered;
    ordered_block *b = o->b;

    m->ordered = NULL;
    if (--b->holders > 0) {
        /* In a group, the others still run: only this message's slot is cleared, behind its work. */
        ordered_slot_clear(o);
        OPENSSL_clear_free(o, sizeof(*o));
        return 0;
    }
    OPENSSL_clear_free(o, sizeof(*o));
    ordered_block_release(b);
    return 0;
}

void gp_cuda_ordered_release(gp_msg *m)
{
    if (m->ordered == NULL || m->exec != &gp_exec_cuda)
        return;
    /* A job's stack is too small for CUDA calls (devmem.c). */
    if (gp_async_in_job())
        (void)gp_call_off_job_stack(ordered_release_here, m);
    else
        (void)ordered_release_here(m);
}

/*
 * gp_executor.msgs_clear: messages that end together (a pipeline's, at its re-init or free). A
 * block whose every holder is among them is cleared and freed whole, once: no slot of it is
 * cleared on its own first (ordered_slot_clear, four calls on the stream a message), which for a
 * pipeline call of 32 was most of the cost of queueing it. The others go one by one, as
 * gp_cuda_ordered_release.
 */
typedef struct ordered_ending {
    gp_msg *const *ms;
    size_t n;
} ordered_ending;

/* Does m hold block b (a stream-ordered message of this executor's)? */
static int holds(const gp_msg *m, const ordered_block *b)
{
    return m->ordered != NULL && m->exec == &gp_exec_cuda && ((const cuda_ordered *)m->ordered)->b == b;
}

static int ordered_release_all_here(void *arg)
{
    const ordered_ending *g = arg;

    for (size_t i = 0; i < g->n; i++) {
        ordered_block *b;
        unsigned int going = 0;

        if (g->ms[i]->ordered == NULL || g->ms[i]->exec != &gp_exec_cuda)
            continue;
        b = ((cuda_ordered *)g->ms[i]->ordered)->b;
        for (size_t k = i; k < g->n; k++)
            going += holds(g->ms[k], b);
        if (going < b->holders) {   /* others of the block stay: this one's slot alone */
            (void)ordered_release_here(g->ms[i]);
            continue;
        }
        for (size_t k = i; k < g->n; k++)
            if (holds(g->ms[k], b)) {
                OPENSSL_clear_free(g->ms[k]->ordered, sizeof(cuda_ordered));
                g->ms[k]->ordered = NULL;
            }
        b->holders = 0;
        ordered_block_release(b);
    }
    return 0;
}

void gp_cuda_ordered_release_all(gp_msg *const *ms, size_t n)
{
    ordered_ending g = { ms, n };

    /* A job's stack is too small for CUDA calls (devmem.c). */
    if (gp_async_in_job())
        (void)gp_call_off_job_stack(ordered_release_all_here, &g);
    else
        (void)ordered_release_all_here(&g);
}
