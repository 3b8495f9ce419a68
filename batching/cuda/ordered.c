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
 * stream order on the caller's stream: cudaMallocAsync, freed by cudaFreeAsync behind its last
 * work, so no call here synchronises the device): its state, its key schedule, and one request's
 * descriptors, refs, span counters, carried AAD, powers of r and partial MACs. Each request is two
 * launches on the caller's stream and the call returns:
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
 * block and frees it behind the message's work, and hands the chunk back from a host function
 * that the stream runs after that work.
 *
 * Requests it does not queue (GP_REQ_SYNC: the engine runs them synchronously, ordered after the
 * stream; the next one is queued again): a data request with body units whose buffers are off
 * their 16-byte boundary at the body (the units' vector accesses; the synchronous path copies
 * such data through its staged region: shape.h), or when no staging chunk is free.
 */

/* The block: the state, the key schedule, then one request's part (ordered_layout). */
#define ORD_STATE_AT 0u
#define ORD_KEY_AT 512u
#define ORD_REQ_AT (ORD_KEY_AT + ((KEY_STRIDE + 127) & ~(size_t)127))
#define ORD_POWS_BYTES ALIGN16(sizeof(gp_mac_pows))
/* The chunk (host, mapped): the state and key going up, the tag and the state coming back. */
#define ORD_CH_UP_STATE 0u
#define ORD_CH_UP_KEY 512u
#define ORD_CH_TAG 16384u
#define ORD_CH_STATE 16512u
#define ORD_CH_USED 17024u
_Static_assert(ORD_CH_UP_STATE == ORD_STATE_AT && ORD_CH_UP_KEY == ORD_KEY_AT, "the chunk's state and key lie as the block's");
_Static_assert(sizeof(gp_msg_state) <= 512 && ORD_CH_UP_KEY + KEY_STRIDE <= ORD_CH_TAG
               && ORD_CH_USED <= GP_STAGE_CHUNK_BYTES, "the chunk holds an ordered message's host side");
#define ORD_MIN_BLOCK ((size_t)1 << 20)

typedef struct cuda_ordered {
    gp_cuda *g;
    gp_engine *e;
    int gpu;
    cudaStream_t stream;
    uint8_t *dev;                /* the block (cudaMallocAsync on `stream`) */
    size_t dev_cap;
    gp_stage_chunk *chunk;       /* mapped pinned: tag and state back */
    cudaEvent_t last;            /* after the message's last queued request (and its tag, state) */
    int state_back;              /* the state copy behind `last` is current */
    int failed;
    gp_msg_state shadow;         /* the state the requests queued so far will leave */
} cuda_ordered;

/* One request's part of the block, from ORD_REQ_AT. */
typedef struct ordered_layout {
    size_t work, spans, aad, pows, partials, refs, end;
} ordered_layout;

static void ordered_layout_of(const gp_job *j, ordered_layout *l)
{
    l->work = ORD_REQ_AT;
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
    gp_cuda_failed(o->e, what, err);
    return GP_REQ_FAILED;
}

/* The block large enough for `need` bytes: a larger one takes the state and key over in stream
 * order, and the old one is freed behind the work that reads it. */
static cudaError_t ordered_reserve(cuda_ordered *o, size_t need)
{
    uint8_t *grown = NULL;
    size_t cap = o->dev_cap;
    cudaError_t err;

    if (need <= cap)
        return cudaSuccess;
    while (cap < need)
        cap = cap < ORD_MIN_BLOCK ? ORD_MIN_BLOCK : cap * 2;
    if ((err = cudaMallocAsync((void **)&grown, cap, o->stream)) != cudaSuccess)
        return err;
    if ((err = cudaMemcpyAsync(grown, o->dev, ORD_REQ_AT, cudaMemcpyDeviceToDevice, o->stream)) != cudaSuccess
        || (err = cudaMemsetAsync(o->dev, 0, o->dev_cap, o->stream)) != cudaSuccess
        || (err = cudaFreeAsync(o->dev, o->stream)) != cudaSuccess) {
        (void)cudaFreeAsync(grown, o->stream);
        return err;
    }
    o->dev = grown;
    o->dev_cap = cap;
    return cudaSuccess;
}

/* The message's ordered state, made at its first queued request from the state it started with:
 * the block, with its state and key schedule sent up from the chunk (which keeps them until the
 * release, so the copy may run whenever the stream gets there). NULL, err cudaSuccess: no chunk
 * free now. */
static cuda_ordered *ordered_new(gp_engine *e, gp_msg *m, int gpu, uint64_t stream, cudaError_t *err)
{
    gp_cuda *g = e->cuda;
    cuda_ordered *o;

    *err = cudaSuccess;
    if (!g->stage_ready)
        return NULL;
    gp_stage_grow(&g->stage);
    if ((o = OPENSSL_zalloc(sizeof(*o))) == NULL)
        return NULL;
    if ((o->chunk = gp_stage_get(&g->stage)) == NULL) {
        OPENSSL_free(o);
        return NULL;
    }
    o->g = g;
    o->e = e;
    o->gpu = gpu;
    o->stream = (cudaStream_t)(uintptr_t)stream;
    o->shadow = m->st;
    memcpy(o->chunk->host + ORD_CH_UP_STATE, &m->st, sizeof(m->st));
    memset(o->chunk->host + ORD_CH_UP_STATE + sizeof(m->st), 0, ORD_CH_UP_KEY - sizeof(m->st));   /* goes up too */
    memcpy(o->chunk->host + ORD_CH_UP_KEY, gp_key_sched_get(m->key), GP_KEY_SCHED_DEVICE_BYTES);
    if ((*err = cudaEventCreateWithFlags(&o->last, cudaEventDisableTiming)) != cudaSuccess)
        goto fail;
    if ((*err = cudaMallocAsync((void **)&o->dev, ORD_MIN_BLOCK, o->stream)) != cudaSuccess)
        goto fail_event;
    o->dev_cap = ORD_MIN_BLOCK;
    /* One copy: the chunk's state and key lie as the block's do. */
    if ((*err = cudaMemcpyAsync(o->dev + ORD_STATE_AT, o->chunk->host + ORD_CH_UP_STATE,
                                ORD_KEY_AT + GP_KEY_SCHED_DEVICE_BYTES, cudaMemcpyHostToDevice, o->stream)) != cudaSuccess) {
        (void)cudaFreeAsync(o->dev, o->stream);
        goto fail_event;
    }
    m->ordered = o;
    return o;
fail_event:
    (void)cudaEventDestroy(o->last);
fail:
    OPENSSL_cleanse(o->chunk->host, ORD_CH_USED);
    gp_stage_put(&g->stage, o->chunk);
    OPENSSL_free(o);
    return NULL;
}

/*
 * One request on the stream: its descriptors from the launch parameter (gp_ordered_kernel), then
 * the batch kernel on its refs. `in`/`out`: the data (device memory), an AAD piece (`in` in the
 * block's AAD room), or a tag's destination (`out`: the chunk, mapped). The shadow moves on.
 */
static cudaError_t ordered_launch(cuda_ordered *o, gp_msg *m, uint32_t op, const uint8_t *aad, size_t aad_len,
                                  const uint8_t *in, uint8_t *out, size_t len)
{
    gp_ordered_args args_mem, *args = &args_mem;   /* on a thread's stack (never a job's) */
    const gp_kernel_shape *ks = shape_of(o->g, o->gpu);
    gp_job j;
    ordered_layout l;
    unsigned int nr, flags = gp_alg_is_aes(o->shadow.alg) ? GP_BATCH_AES : 0;
    uint8_t *base;
    gp_unit_ref *drefs;
    gp_work *dwork;
    dim3 grid, block, sgrid = { 1, 1, 1 }, sblock = { GP_COPY_BLOCK, 1, 1 };
    size_t smem;
    const void *kernel;
    void *sargs[1], *kargs[5];
    cudaError_t err;

    memset(args, 0, sizeof(*args));
    gp_job_plan(&j, &o->shadow, op, op == GP_OP_TAG ? 0 : len, (uint32_t)aad_len);
    ordered_layout_of(&j, &l);
    if ((err = ordered_reserve(o, l.end)) != cudaSuccess)
        return err;
    base = o->dev;
    args->work.job = j;
    args->work.key_off = ORD_KEY_AT;
    args->work.state_off = ORD_STATE_AT;
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
    sargs[0] = args;
    /* The lead always runs (no idle lead: the state it would change is on the GPU, not here). */
    nr = j.nunits + 1;
    drefs = (gp_unit_ref *)(base + l.refs);
    dwork = (gp_work *)(base + l.work);
    kargs[0] = &drefs;
    kargs[1] = &nr;
    kargs[2] = &dwork;
    kargs[3] = &base;
    kargs[4] = &flags;
    kernel = gp_kernel_geometry(nr, flags, ks, &grid, &block, &smem);
    if ((err = cudaLaunchKernel((const void *)gp_ordered_kernel, sgrid, sblock, sargs, 0, o->stream)) == cudaSuccess)
        err = cudaLaunchKernel(kernel, grid, block, kargs, smem, o->stream);
    OPENSSL_cleanse(args, sizeof(*args));   /* the launch copied it (the powers are secret) */
    OPENSSL_cleanse(&j, sizeof(j));
    if (err == cudaSuccess)
        gp_kstate_shadow_advance(&o->shadow, op, op == GP_OP_TAG ? 0 : len, (uint32_t)aad_len);
    return err;
}

/* The state behind the message's work, into the chunk, and the event after it. */
static cudaError_t ordered_state_back(cuda_ordered *o)
{
    cudaError_t err;

    if ((err = cudaMemcpyAsync(o->chunk->host + ORD_CH_STATE, o->dev + ORD_STATE_AT, sizeof(gp_msg_state),
                               cudaMemcpyDeviceToHost, o->stream)) == cudaSuccess
        && (err = cudaEventRecord(o->last, o->stream)) == cudaSuccess)
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

static int ordered_run_here(void *arg)
{
    ordered_call *c = arg;
    gp_request *r = c->r;
    gp_msg *m = r->msg;
    cuda_ordered *o = m->ordered;
    const uint32_t op = r->kind == GP_REQ_AAD ? GP_OP_AAD : r->kind == GP_REQ_CRYPT
                        ? (m->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT) : GP_OP_TAG;
    const int gpu = r->kind == GP_REQ_CRYPT && r->devmem ? r->gpu : o != NULL ? o->gpu : -1;
    cudaError_t err = cudaSuccess;
    int saved;

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
    if (o == NULL && (o = ordered_new(c->e, m, gpu, c->stream, &err)) == NULL) {
        gp_cuda_device_leave(saved);
        if (err == cudaSuccess || err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            return GP_REQ_SYNC;   /* no chunk or no room: this one runs synchronously */
        }
        gp_cuda_failed(c->e, "stream-ordered setup", err);
        return GP_REQ_FAILED;
    }
    o->state_back = 0;
    if (op == GP_OP_AAD) {
        /* In pieces the launch parameter holds, each carried by an AAD request of no bytes of its
         * own (the lead absorbs carried AAD first: the same MAC input in the same order). Held
         * AAD before it (none: an AAD request is not held when it is this long) goes first. */
        if (r->aad_len > 0)
            err = ordered_launch(o, m, GP_OP_AAD, r->aad, r->aad_len, NULL, NULL, 0);
        for (size_t off = 0; off < r->len && err == cudaSuccess; off += GP_ORDERED_AAD_MAX) {
            const size_t n = r->len - off < GP_ORDERED_AAD_MAX ? r->len - off : GP_ORDERED_AAD_MAX;

            err = ordered_launch(o, m, GP_OP_AAD, r->in + off, n, NULL, NULL, 0);
        }
    } else if (op == GP_OP_TAG) {
        err = ordered_launch(o, m, GP_OP_TAG, r->aad, r->aad_len, NULL, (uint8_t *)(uintptr_t)(o->chunk->dev + ORD_CH_TAG), 0);
        if (err == cudaSuccess)
            err = ordered_state_back(o);
    } else {
        /* Long requests in slices (kstate.h): the block stays bounded, as the slots' arenas do. */
        const size_t slice = gp_kstate_slice_bytes(c->e);
        size_t off = 0;

        do {
            const size_t n = r->len - off < slice ? r->len - off : slice;

            err = ordered_launch(o, m, op, off == 0 ? r->aad : NULL, off == 0 ? r->aad_len : 0, r->in + off,
                                 r->out + off, n);
            off += n;
        } while (off < r->len && err == cudaSuccess);
    }
    if (err == cudaSuccess && op != GP_OP_TAG)
        err = cudaEventRecord(o->last, o->stream);
    gp_cuda_device_leave(saved);
    return err == cudaSuccess ? GP_REQ_OK : ordered_failed(o, "stream-ordered launch", err);
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
 * place; its span counters, AAD, powers, partials and refs are the pass's, in the lead block,
 * which the stream has finished with before the next pass or request rewrites it. Each message's
 * event is recorded after the last pass, a tag's state coming back before it as for a lone tag.
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
    cuda_ordered *lead = os[pass->s[0].req];
    const gp_kernel_shape *ks = shape_of(lead->g, lead->gpu);
    dim3 grid, block, sgrid = { 1, 1, 1 }, sblock = { GP_COPY_BLOCK, 1, 1 };
    unsigned int nr = pass->nrefs, flags = 0;
    uint32_t most = 0;
    uint8_t *base;
    gp_unit_ref *drefs;
    gp_work *dwork;
    void *sargs[1], *kargs[5];
    const void *kernel;
    size_t smem;
    cudaError_t err;

    if ((err = ordered_reserve(lead, pass->end)) != cudaSuccess)
        return err;
    base = lead->dev;
    args->base = gpu_addr(base);
    args->works_at = gpu_addr(base + pass->works);
    args->refs_at = gpu_addr(base + pass->refs);
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
        w->key_off = gpu_addr(o->dev + ORD_KEY_AT) - gpu_addr(base);
        w->state_off = gpu_addr(o->dev + ORD_STATE_AT) - gpu_addr(base);
        w->partials_off = sl->partials;
        w->spans_off = (uint32_t)sl->spans;
        w->in_off = (tag ? 0 : gpu_addr(r->in + sl->off)) - gpu_addr(base);
        w->out_off = (tag ? o->chunk->dev + ORD_CH_TAG : gpu_addr(r->out + sl->off)) - gpu_addr(base);
        if (sl->aad_len > 0) {
            w->job.aad_off = sl->aad;
            memcpy(args->extra + sl->extra_at, r->aad, sl->aad_len);
        }
        if (sl->pows) {
            w->pows_off = sl->pow_at;
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
    sargs[0] = args;
    drefs = (gp_unit_ref *)(base + pass->refs);
    dwork = (gp_work *)(base + pass->works);
    kargs[0] = &drefs;
    kargs[1] = &nr;
    kargs[2] = &dwork;
    kargs[3] = &base;
    kargs[4] = &flags;
    kernel = gp_kernel_geometry(nr, flags, ks, &grid, &block, &smem);
    if ((err = cudaLaunchKernel((const void *)gp_ordered_batch_kernel, sgrid, sblock, sargs, 0, lead->stream))
        == cudaSuccess)
        err = cudaLaunchKernel(kernel, grid, block, kargs, smem, lead->stream);
    OPENSSL_cleanse(args->extra, pass->extra);   /* the launch copied it (the powers are secret) */
    return err;
}

static int ordered_batch_here(void *arg)
{
    ordered_batch_call *c = arg;
    gp_request *reqs = c->reqs;
    const size_t n = c->n;
    cuda_ordered *os[GP_ORDERED_BATCH_MAX];
    gp_ordered_req q[GP_ORDERED_BATCH_MAX];
    gp_ordered_pass pass;
    gp_ordered_batch_args *args;
    cudaError_t err = cudaSuccess;
    int gpu = -1, saved;

    if (n < 2 || n > GP_ORDERED_BATCH_MAX)
        return GP_REQ_SYNC;
    /* Whatever one of them needs of the single path (a hand-over, a failure to report, a tag of
     * nothing queued): all go alone, nothing changed. */
    for (size_t i = 0; i < n; i++) {
        const gp_request *r = &reqs[i];
        const cuda_ordered *o = r->msg->ordered;
        const int g = r->kind == GP_REQ_CRYPT && r->devmem ? r->gpu : o != NULL ? o->gpu : -1;

        if ((r->kind != GP_REQ_CRYPT && r->kind != GP_REQ_TAG) || r->aad_len > GP_MSG_AAD_HOLD || g < 0
            || (o != NULL && (o->failed || o->gpu != g)) || (gpu >= 0 && g != gpu))
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
    /* zeroed: the launch copies all of it (the slots' part is rewritten each pass) */
    if ((args = OPENSSL_zalloc(sizeof(*args))) == NULL)
        return GP_REQ_SYNC;
    if (!gp_cuda_device_enter(gpu, &saved)) {
        OPENSSL_free(args);
        return GP_REQ_SYNC;
    }
    for (size_t i = 0; i < n; i++) {
        gp_msg *m = reqs[i].msg;

        if ((os[i] = m->ordered) == NULL && (os[i] = ordered_new(c->e, m, gpu, c->stream, &err)) == NULL) {
            /* no chunk or no room now (those made stay their messages'): each alone */
            (void)cudaGetLastError();
            gp_cuda_device_leave(saved);
            OPENSSL_free(args);
            return GP_REQ_SYNC;
        }
        os[i]->state_back = 0;
        q[i] = (gp_ordered_req){ .shadow = &os[i]->shadow, .aad_len = (uint32_t)reqs[i].aad_len,
                                 .op = reqs[i].kind == GP_REQ_TAG ? GP_OP_TAG : m->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT,
                                 .len = reqs[i].kind == GP_REQ_TAG ? 0 : reqs[i].len };
    }
    /* From the first pass planned the shadows have moved: every request is queued, or fails. */
    while (err == cudaSuccess && gp_ordered_pass_next(q, n, gp_kstate_slice_bytes(c->e), ORD_REQ_AT, &pass))
        err = ordered_pass_launch(os, reqs, &pass, args);
    for (size_t i = 0; i < n && err == cudaSuccess; i++)
        err = reqs[i].kind == GP_REQ_TAG ? ordered_state_back(os[i]) : cudaEventRecord(os[i]->last, os[i]->stream);
    gp_cuda_device_leave(saved);
    OPENSSL_clear_free(args, sizeof(*args));
    for (size_t i = 0; i < n; i++) {
        if (err != cudaSuccess)
            os[i]->failed = 1;
        reqs[i].status = err == cudaSuccess ? GP_REQ_OK : GP_REQ_FAILED;
    }
    if (err != cudaSuccess)
        gp_cuda_failed(c->e, "stream-ordered batch launch", err);
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
    if (!gp_cuda_device_enter(o->gpu, &saved))
        return GP_REQ_FAILED;
    /* Behind a tag the state is on its way already; else (a copy of the context mid-message) it is
     * fetched now, and the wait covers what the caller queued since too. */
    if (!o->state_back)
        err = ordered_state_back(o);
    if (err == cudaSuccess)
        err = cudaEventSynchronize(o->last);
    gp_cuda_device_leave(saved);
    if (err != cudaSuccess)
        return ordered_failed(o, "stream-ordered work", err);
    memcpy(&c->m->st, o->chunk->host + ORD_CH_STATE, sizeof(gp_msg_state));
    if (c->tag != NULL)
        memcpy(c->tag, o->chunk->host + ORD_CH_TAG, 16);
    return GP_REQ_OK;
}

int gp_cuda_ordered_wait(gp_engine *e, gp_msg *m, uint8_t tag[16])
{
    ordered_call c = { e, NULL, 0, tag, m, 0 };

    return gp_async_in_job() ? gp_call_off_job_stack(ordered_wait_here, &c) : ordered_wait_here(&c);
}

/* After the message's last work, on the stream's host-function thread (no CUDA call there): the
 * chunk cleansed and back in the pool. */
static void CUDART_CB ordered_chunk_back(void *arg)
{
    cuda_ordered *o = arg;

    OPENSSL_cleanse(o->chunk->host, ORD_CH_USED);
    gp_stage_put(&o->g->stage, o->chunk);
    OPENSSL_clear_free(o, sizeof(*o));
}

static int ordered_release_here(void *arg)
{
    gp_msg *m = arg;
    cuda_ordered *o = m->ordered;
    cudaError_t err = cudaErrorUnknown;
    int saved;

    m->ordered = NULL;
    if (gp_cuda_device_enter(o->gpu, &saved)) {
        /* The block cleared (state, key, powers, partials) and freed behind the message's work,
         * then the chunk back. An event may be destroyed before it completes. */
        if ((err = cudaMemsetAsync(o->dev, 0, o->dev_cap, o->stream)) == cudaSuccess
            && (err = cudaFreeAsync(o->dev, o->stream)) == cudaSuccess)
            err = cudaLaunchHostFunc(o->stream, ordered_chunk_back, o);
        (void)cudaEventDestroy(o->last);
        (void)cudaGetLastError();
        gp_cuda_device_leave(saved);
    }
    if (err != cudaSuccess && !o->failed) {
        /* The stream took none of it: nothing of the message's can still run there. */
        OPENSSL_cleanse(o->chunk->host, ORD_CH_USED);
        gp_stage_put(&o->g->stage, o->chunk);
        OPENSSL_clear_free(o, sizeof(*o));
    }
    /* (a failed GPU's stream may still hold the message's work: its chunk and state are left) */
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
