/* SPDX-License-Identifier: Apache-2.0 */
/* The host executor: the GPU's kernel code (kernels/msg_unit.h) run on CPU threads. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "batching/core/core.h"
#include "batching/exec_host.h"
#if GP_TEST_HOOKS
# include "batching/fake_stream.h"
#endif
#include "batching/kstate.h"
#include "kernels/units.h"

/* Below this many bytes a batch runs on the submitting thread: waking workers costs more. */
#define HOST_SPREAD_MIN_BYTES (64 * 1024)

/*
 * A data request as the GPU runs it (kernels/units.h): lead, body units, finish. Here the units
 * run one after another; the point is that CI proves the very code the GPU runs.
 */
static int host_crypt(gp_msg *m, const gp_key_sched *ks, gp_request *r)
{
    uint8_t small[16 * GP_PARTIAL_BYTES], *partials = small;
    size_t pbytes;
    gp_job j;

    gp_job_plan(&j, &m->st, m->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT, r->len, (uint32_t)r->aad_len);
    pbytes = (size_t)gp_partials_bytes(&j);
    if (pbytes > sizeof(small) && (partials = OPENSSL_malloc(pbytes)) == NULL)
        return 0;
    if (j.nunits > 0) {
        const gp_mac_pows *pw = gp_kstate_pows(m, ks, &j);
        const uint8_t *body_in = r->in + j.head_len;
        uint8_t *body_out = r->out + j.head_len;

        if (gp_lead_idle(&j, &m->st))   /* as the cuda executor plans it */
            gp_lead_skip(&m->st);
        else
            gp_unit_lead(&m->st, ks, &j, r->aad, r->in, r->out);
        for (uint32_t u = 0; u < j.nunits; u++)
            gp_unit_body(&j, ks, pw, u, body_in, body_out, partials + (size_t)u * GP_PARTIAL_BYTES);
        gp_unit_finish(&m->st, ks, &j, pw, partials, body_in + j.body_len, body_out + j.body_len);
    } else {
        gp_unit_lead(&m->st, ks, &j, r->aad, r->in, r->out);
    }
    OPENSSL_cleanse(partials, pbytes > sizeof(small) ? pbytes : sizeof(small));
    if (partials != small)
        OPENSSL_free(partials);
    OPENSSL_cleanse(&j, sizeof(j));
    return 1;
}

/* A data request in slices (kstate.h, GP_SLICE_BYTES), each from the state the one before left. */
static int host_crypt_sliced(gp_msg *m, const gp_key_sched *ks, const gp_request *r)
{
    const size_t slice = gp_kstate_slice_bytes(m->engine);
    gp_request part = *r;

    for (; part.len > slice; part.len -= slice) {
        gp_request head = part;

        head.len = slice;
        if (!host_crypt(m, ks, &head))
            return 0;
        part.in += slice;
        part.out += slice;
        part.aad = NULL;   /* carried AAD goes with the first slice */
        part.aad_len = 0;
    }
    return host_crypt(m, ks, &part);
}

/* An AAD or tag request: the lead alone, as on the GPU. */
static void host_lead_only(gp_msg *m, const gp_key_sched *ks, gp_request *r, uint32_t op, uint8_t *out)
{
    gp_job j;

    gp_job_plan(&j, &m->st, op, op == GP_OP_AAD ? r->len : 0, (uint32_t)r->aad_len);
    gp_unit_lead(&m->st, ks, &j, r->aad, r->in, out);
    OPENSSL_cleanse(&j, sizeof(j));
}

/* One request with the kernel code (the pool's workers and a batch run inline). */
static void host_run_one(gp_request *r)
{
    gp_msg *m = r->msg;
    const gp_key_sched *ks = &m->key->sched;   /* made by gp_kstate_msg_start */
    uint8_t tag[16];

    switch (r->kind) {
    case GP_REQ_AAD:
        host_lead_only(m, ks, r, GP_OP_AAD, NULL);
        break;
    case GP_REQ_CRYPT:
        if (!host_crypt_sliced(m, ks, r)) {
            r->status = GP_REQ_FAILED;
            return;
        }
        break;
    case GP_REQ_TAG:
        host_lead_only(m, ks, r, GP_OP_TAG, r->tag_out);
        break;
    case GP_REQ_VERIFY:
        host_lead_only(m, ks, r, GP_OP_TAG, tag);
        /* Constant time: the position of a mismatch must not show (SP 800-38D §7.2 step 8). */
        r->status = r->taglen >= 1 && r->taglen <= 16 && CRYPTO_memcmp(tag, r->tag_in, r->taglen) == 0
                    ? GP_REQ_OK : GP_REQ_BAD_TAG;
        OPENSSL_cleanse(tag, sizeof(tag));
        return;
    default:
        r->status = GP_REQ_FAILED;
        return;
    }
    r->status = GP_REQ_OK;
}

#if GP_TEST_HOOKS
/* The host_stage test hook's pool: plain memory. */
static void *test_stage_alloc(void *ctx, size_t bytes, uint64_t *dev)
{
    (void)ctx;
    *dev = 0;   /* plain memory: the cuda executor would copy it as it copies unstaged data */
    return OPENSSL_malloc(bytes);
}

static void test_stage_release(void *ctx, void *mem, size_t bytes)
{
    (void)ctx;
    OPENSSL_clear_free(mem, bytes);
}
#endif

#if GP_TEST_HOOKS
/*
 * Test hook (host_devmem): the host executor stands in for the GPU in device mode (engine.h), so
 * that CI runs the mode's checks, bookkeeping and errors without one. The suites allocate "device
 * memory" with gpuprov_test_devmem_alloc (exported by the test module alone,
 * provider/test-module/gpuprov-test.map): plain memory, recorded here with the GPU it stands for,
 * and forgotten by gpuprov_test_devmem_free, so that a pointer into a freed allocation, a host
 * pointer and a length past an allocation's end are told apart as the cuda executor tells them
 * (batching/cuda/devmem.c, gp_cuda_mem_check). GPUs 0 and 1 count as open, higher ones as GPUs
 * gpuprov does not use.
 */
#define TEST_DEVMEM_MAX 256
#define TEST_DEVMEM_OPEN_GPUS 2

typedef struct test_devmem {
    uint8_t *base;
    size_t size;
    int gpu;
} test_devmem;

static pthread_mutex_t test_devmem_lock = PTHREAD_MUTEX_INITIALIZER;
static test_devmem test_devmem_table[TEST_DEVMEM_MAX];

__attribute__((visibility("default"))) void *gpuprov_test_devmem_alloc(size_t size, int gpu);
__attribute__((visibility("default"))) void gpuprov_test_devmem_free(void *p);

void *gpuprov_test_devmem_alloc(size_t size, int gpu)
{
    /* cudaMalloc's alignment (256 bytes), so that the suites' offsets mean the same on both. */
    uint8_t *p = aligned_alloc(256, (size + 255) & ~(size_t)255);

    if (p == NULL)
        return NULL;
    pthread_mutex_lock(&test_devmem_lock);
    for (int i = 0; i < TEST_DEVMEM_MAX; i++) {
        if (test_devmem_table[i].base == NULL) {
            test_devmem_table[i] = (test_devmem){ p, size, gpu };
            pthread_mutex_unlock(&test_devmem_lock);
            return p;
        }
    }
    pthread_mutex_unlock(&test_devmem_lock);
    free(p);
    return NULL;
}

void gpuprov_test_devmem_free(void *p)
{
    pthread_mutex_lock(&test_devmem_lock);
    for (int i = 0; i < TEST_DEVMEM_MAX; i++) {
        if (p != NULL && test_devmem_table[i].base == p) {
            OPENSSL_cleanse(p, test_devmem_table[i].size);
            free(p);
            test_devmem_table[i].base = NULL;
        }
    }
    pthread_mutex_unlock(&test_devmem_lock);
}

/* gp_executor.mem_check of the stand-in: the allocation that holds p, as gp_cuda_mem_check asks
 * the driver; GP_MEM_NO_EXECUTOR without the hook (the engine asks with p NULL whether it stands
 * in). */
static int host_mem_check(gp_engine *e, const void *p, size_t len, int *gpu)
{
    const uint8_t *b = p;
    int st = GP_MEM_NOT_DEVICE;

    if (!e->knobs.test.host_devmem)
        return GP_MEM_NO_EXECUTOR;
    pthread_mutex_lock(&test_devmem_lock);
    for (int i = 0; i < TEST_DEVMEM_MAX && st == GP_MEM_NOT_DEVICE; i++) {
        const test_devmem *a = &test_devmem_table[i];

        if (a->base == NULL || b < a->base || b >= a->base + a->size)
            continue;
        *gpu = a->gpu;
        st = a->gpu >= TEST_DEVMEM_OPEN_GPUS ? GP_MEM_GPU_NOT_OPEN
             : len > a->size - (size_t)(b - a->base) ? GP_MEM_PAST_END : GP_MEM_OK;
    }
    pthread_mutex_unlock(&test_devmem_lock);
    return st;
}
#endif

static int host_open(gp_engine *e)
{
#if GP_TEST_HOOKS
    /* Test hook (host_inflight = N): let the queue run N host batches at once (they take turns in
     * the pool), so that machines without a GPU exercise what the cuda executor's slots make
     * happen: several leaders, several async dispatchers, split async batches. */
    const int n = e->knobs.test.host_inflight;

    if (n > 1)
        atomic_store(&e->max_inflight, n < GP_MAX_DISPATCHERS ? n : GP_MAX_DISPATCHERS);
    /* Test hook (host_stage): async jobs stage their data for the host executor too, in plain
     * memory (a small pool, so that it runs dry and jobs also go unstaged), so that CI runs the
     * queue's staging path (batching/stage.h) without a GPU. */
    if (e->knobs.test.host_stage && (e->host_stage = OPENSSL_zalloc(sizeof(*e->host_stage))) != NULL
        && !gp_stage_pool_init(e->host_stage, (size_t)GP_STAGE_SLAB_CHUNKS * GP_STAGE_CHUNK_BYTES, test_stage_alloc,
                               test_stage_release, NULL)) {
        OPENSSL_free(e->host_stage);
        e->host_stage = NULL;
    }
    /* Test hook (host_fail_after = N): armed here, when the host executor opens to stand in for
     * the GPU (host_fails_now). */
    if (e->knobs.test.host_fail_after >= 0)
        atomic_store(&e->test_host_fail, e->knobs.test.host_fail_after + 1);
#else
    (void)e;
#endif
    return 1;   /* plain C: always available */
}

static void host_close(gp_engine *e)
{
    if (e->host_stage != NULL) {
        gp_stage_pool_cleanup(e->host_stage);
        OPENSSL_free(e->host_stage);
        e->host_stage = NULL;
    }
}

static gp_stage_pool *host_stage_pool(gp_engine *e)
{
    return e->host_stage;
}

/* ---- the worker pool ---- */

/* Claim groups (all requests of one message, in order) until none is left. */
static void pool_drain(gp_host_pool *p)
{
    for (;;) {
        size_t g = atomic_fetch_add(&p->next, 1);

        if (g >= p->ngroups)
            return;
        for (size_t i = p->group_start[g]; i < p->group_start[g + 1]; i++)
            host_run_one(&p->reqs[p->order[i]]);
    }
}

static void *pool_worker(void *arg)
{
    gp_host_pool *p = arg;
    uint64_t seen = 0;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping)
            break;
        seen = p->generation;
        p->active++;
        pthread_mutex_unlock(&p->lock);
        pool_drain(p);
        pthread_mutex_lock(&p->lock);
        if (--p->active == 0)
            pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Start the workers once per process; after a fork the parent's threads are gone. */
static int pool_ensure(gp_engine *e)
{
    gp_host_pool *p = &e->pool;
    int want = e->knobs.host_threads;

    if (p->started && p->pid == getpid())
        return p->nthreads > 0;
    if (p->started) {               /* forked child: forget the parent's threads */
        free(p->threads);
        p->threads = NULL;
        p->nthreads = 0;
        p->active = 0;
    }
    p->started = 1;
    p->pid = getpid();
    if (want <= 0) {
        long n = gp_online_cpus();

        want = (int)(n < 64 ? n : 64);
    }
    want -= 1;                      /* the submitting thread works too */
    if (want <= 0)
        return 0;
    p->threads = calloc((size_t)want, sizeof(*p->threads));
    if (p->threads == NULL)
        return 0;
    for (int i = 0; i < want; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_worker, p) != 0)
            break;
        p->nthreads++;
    }
    return p->nthreads > 0;
}

void gp_host_pool_stop(gp_host_pool *p)
{
    if (p->started && p->pid == getpid() && p->nthreads > 0) {
        pthread_mutex_lock(&p->lock);
        p->stopping = 1;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < p->nthreads; i++)
            pthread_join(p->threads[i], NULL);
    }
    free(p->threads);
    p->threads = NULL;
    p->nthreads = 0;
}

/* Spread a batch over the pool; 0 if it cannot (the caller then runs it inline). */
static int pool_run(gp_engine *e, gp_request *reqs, size_t n)
{
    gp_host_pool *p = &e->pool;
    size_t *order = NULL, *starts = NULL, ngroups = 0;
    int ok = 0;

    pthread_mutex_lock(&p->submit);
    if (!pool_ensure(e))
        goto out;
    order = malloc(n * sizeof(*order));
    starts = malloc((n + 1) * sizeof(*starts));
    if (order == NULL || starts == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof(*order), gp_cmp_request_by_msg, reqs);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || reqs[order[i]].msg != reqs[order[i - 1]].msg)
            starts[ngroups++] = i;
    starts[ngroups] = n;

    pthread_mutex_lock(&p->lock);
    while (p->active > 0)           /* a late worker of the last batch must leave first */
        pthread_cond_wait(&p->done, &p->lock);
    p->reqs = reqs;
    p->order = order;
    p->group_start = starts;
    p->ngroups = ngroups;
    atomic_store(&p->next, 0);
    p->generation++;
    p->active++;                    /* the submitting thread */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    pool_drain(p);

    pthread_mutex_lock(&p->lock);
    if (--p->active == 0)
        pthread_cond_broadcast(&p->done);
    while (p->active > 0)
        pthread_cond_wait(&p->done, &p->lock);
    p->ngroups = 0;
    pthread_mutex_unlock(&p->lock);
    ok = 1;
out:
    pthread_mutex_unlock(&p->submit);
    free(order);
    free(starts);
    return ok;
}

#if GP_TEST_HOOKS
/*
 * Test hook (host_fail_after = N): after N good batches the next one fails as a whole, once, as
 * the GPU the host executor stands in for fails: nothing of it runs, the engine is told why, and
 * its messages go on elsewhere (batching/engine.c, run_on). Later batches, the engine's re-run of
 * that one among them, run.
 */
static int host_fails_now(gp_engine *e)
{
    int left = atomic_load(&e->test_host_fail);

    while (left > 0 && !atomic_compare_exchange_weak(&e->test_host_fail, &left, left - 1))
        ;
    if (left != 1)
        return 0;
    gp_engine_executor_fault(e, &gp_exec_host, -1, "test hook host_fail_after");
    return 1;
}
#endif

static int host_run(gp_engine *e, gp_request *reqs, size_t n)
{
    size_t bytes = 0;

#if GP_TEST_HOOKS
    if (host_fails_now(e))
        return 0;
#endif
    if (e->host_stage != NULL)
        gp_stage_grow(e->host_stage);
    for (size_t i = 0; i < n; i++)
        bytes += reqs[i].len;
    if (n > 1 && bytes >= HOST_SPREAD_MIN_BYTES && pool_run(e, reqs, n))
        return 1;
    for (size_t i = 0; i < n; i++)
        host_run_one(&reqs[i]);
    return 1;
}

#if GP_TEST_HOOKS
/*
 * Test hook (host_devmem): stream-ordered device mode (batching/executor.h, ordered_run), with the
 * test module's fake streams (batching/fake_stream.h) for CUDA streams, so that CI runs the mode's
 * contract without a GPU: a request is queued on the stream and the call returns; the stream's
 * thread runs it after the caller's earlier items there. A message's queued requests run on an
 * instance of their own (host_ordered): copies of the message as it started and of its key, so
 * that the provider may re-key, restart or free its context while they wait; the last of them to
 * run frees it once the engine has let go (msg_clear).
 */
typedef struct host_ordered {
    gp_key *key;
    gp_msg *msg;
    gp_engine *e;
    pthread_mutex_t lock;
    pthread_cond_t ran;          /* an item of this instance ran */
    uint64_t queued, done;       /* items queued, items run */
    _Atomic int failed;          /* a queued request failed: those after it do not run, waits say so */
    int released;                /* the engine let go: the last item frees the instance */
    uint8_t tag[16];             /* the last queued tag */
    gp_msg_state shadow;         /* the state as the requests queued so far will leave it, made at
                                  * queue time as the cuda executor would plan from (kstate.h) */
} host_ordered;

typedef struct host_ordered_item {
    host_ordered *o;
    gp_request r;
    gp_msg_state expect;         /* the shadow when it was queued: the state it must find */
    size_t copied;               /* bytes of `bytes`: copies of r's host memory (AAD) */
    uint8_t bytes[];
} host_ordered_item;

static void host_ordered_free(host_ordered *o)
{
    gp_msg_free(o->msg);
    gp_key_free(o->key);
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->ran);
    OPENSSL_clear_free(o, sizeof(*o));
}

/* One of o's queued items has run (on the stream's thread): the waits see it, and the last item
 * after the engine let go frees the instance. */
static void host_ordered_item_done(host_ordered *o)
{
    int last;

    pthread_mutex_lock(&o->lock);
    o->done++;
    last = o->released && o->done == o->queued;
    pthread_cond_broadcast(&o->ran);
    pthread_mutex_unlock(&o->lock);
    if (last)
        host_ordered_free(o);
}

/* One queued request, on the stream's thread. The test hook host_fail_after fails it as the GPU
 * would fail a kernel: the request and those after it of the message do not run. */
static void host_ordered_item_run(void *arg)
{
    host_ordered_item *it = arg;
    host_ordered *o = it->o;

    if (!o->failed) {
        if (host_fails_now(o->e))
            it->r.status = GP_REQ_FAILED;
        else if (!gp_kstate_shadow_matches(&o->msg->st, &it->expect))
            /* A plan made at queue time would not be the plan of the state the request finds: the
             * shadow (kstate.h) is wrong, and the suites fail on this request. */
            it->r.status = GP_REQ_FAILED;
        else
            host_run_one(&it->r);
        if (it->r.status != GP_REQ_OK)
            o->failed = 1;
    }
    OPENSSL_clear_free(it, sizeof(*it) + it->copied);
    host_ordered_item_done(o);
}

/* The kernels' op of request r (a tag request's, a verdict's too). */
static uint32_t op_of_kind(const gp_request *r)
{
    switch (r->kind) {
    case GP_REQ_AAD:
        return GP_OP_AAD;
    case GP_REQ_CRYPT:
        return r->msg->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT;
    default:
        return GP_OP_TAG;
    }
}

static int host_stream_check(gp_engine *e, uint64_t stream, int gpu)
{
    (void)gpu;
    if (!e->knobs.test.host_devmem)
        return GP_MEM_NO_EXECUTOR;
    return gp_fake_stream_find(stream) != NULL ? GP_MEM_OK : GP_MEM_BAD_STREAM;
}

/* The message's instance, made at its first queued request from the state it started with. */
static host_ordered *host_ordered_of(gp_engine *e, gp_msg *m)
{
    host_ordered *o = m->ordered;

    if (o != NULL)
        return o;
    if ((o = OPENSSL_zalloc(sizeof(*o))) == NULL)
        return NULL;
    o->e = e;
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->ran, NULL);
    if ((o->key = gp_key_dup(m->key)) == NULL || (o->msg = gp_msg_dup(m, o->key)) == NULL) {
        host_ordered_free(o);
        return NULL;
    }
    o->shadow = m->st;
    m->ordered = o;
    return o;
}

static int host_ordered_wait(gp_engine *e, gp_msg *m, uint8_t tag[16]);
static void host_msg_clear(gp_msg *m);

/*
 * The cuda executor's body units read and write device-mode data in place only where the body
 * starts on a 16-byte boundary in both buffers (batching/cuda/shape.h, devmem_in_place); a
 * stream-ordered request with body units whose buffers do not is run synchronously (GP_REQ_SYNC),
 * as there (batching/cuda/ordered.c), so that the suites run that hand-over too: the message's
 * queued work first, then its state back to the message.
 */
static int host_ordered_give_back(gp_engine *e, gp_msg *m)
{
    if (host_ordered_wait(e, m, NULL) != GP_REQ_OK)
        return GP_REQ_FAILED;
    host_msg_clear(m);
    return GP_REQ_SYNC;
}

static int host_ordered_run(gp_engine *e, gp_request *r, uint64_t stream)
{
    gp_fake_stream *s = gp_fake_stream_find(stream);
    host_ordered *o = s != NULL ? host_ordered_of(e, r->msg) : NULL;
    const size_t aad = r->aad_len, in = r->kind == GP_REQ_AAD ? r->len : 0;
    host_ordered_item *it;

    if (o == NULL || o->failed)
        return GP_REQ_FAILED;
    if (r->kind == GP_REQ_CRYPT && r->len > 0) {
        gp_job j;

        gp_job_plan(&j, &o->shadow, op_of_kind(r), r->len, (uint32_t)aad);
        if (j.nunits > 0
            && ((((uintptr_t)r->in + j.head_len) & 15) != 0 || (((uintptr_t)r->out + j.head_len) & 15) != 0))
            return host_ordered_give_back(e, r->msg);
    }
    if ((it = OPENSSL_malloc(sizeof(*it) + aad + in)) == NULL)
        return GP_REQ_FAILED;
    it->o = o;
    it->r = *r;
    it->r.msg = o->msg;
    it->r.status = GP_REQ_FAILED;
    it->copied = aad + in;
    /* Host memory the caller may reuse once the call returns: copied now. */
    if (aad > 0) {
        memcpy(it->bytes, r->aad, aad);
        it->r.aad = it->bytes;
    }
    if (in > 0) {
        memcpy(it->bytes + aad, r->in, in);
        it->r.in = it->bytes + aad;
    }
    if (r->kind == GP_REQ_TAG)
        it->r.tag_out = o->tag;
    it->expect = o->shadow;
    gp_kstate_shadow_advance(&o->shadow, op_of_kind(r), r->kind == GP_REQ_AAD || r->kind == GP_REQ_CRYPT ? r->len : 0,
                             (uint32_t)aad);
    pthread_mutex_lock(&o->lock);
    o->queued++;
    pthread_mutex_unlock(&o->lock);
    if (!gp_fake_stream_enqueue(s, host_ordered_item_run, it)) {
        pthread_mutex_lock(&o->lock);
        o->queued--;
        pthread_mutex_unlock(&o->lock);
        OPENSSL_clear_free(it, sizeof(*it) + it->copied);
        return GP_REQ_FAILED;
    }
    return GP_REQ_OK;
}

/*
 * ordered_batch (batching/executor.h): the requests planned in passes at queue time with the
 * planner the cuda executor launches from (kstate.h, gp_ordered_pass_next), each slice from its
 * message's shadow, and queued as one item; the stream's thread runs the slices in the passes'
 * order, each after checking that the plan made at queue time is the plan of the state it finds,
 * and a test hook host_fail_after failure fails a whole pass, as a failed launch pair would.
 */
typedef struct host_batch_slot {
    host_ordered *o;
    gp_request r;                /* the slice (a tag: the whole request) */
    uint32_t pass;
    gp_job job;                  /* planned at queue time */
    gp_msg_state expect;         /* the shadow it was planned from */
} host_batch_slot;

typedef struct host_batch_item {
    size_t nmsgs, nslots;
    host_ordered *os[GP_ORDERED_BATCH_MAX];
    uint8_t aad[GP_ORDERED_BATCH_MAX][GP_MSG_AAD_HOLD];   /* copies of the carried AAD */
    host_batch_slot *slots;
} host_batch_item;

static void host_batch_item_free(host_batch_item *it)
{
    OPENSSL_clear_free(it->slots, it->nslots * sizeof(*it->slots));
    OPENSSL_clear_free(it, sizeof(*it));
}

static void host_batch_item_run(void *arg)
{
    host_batch_item *it = arg;
    int pass_failed = 0;

    for (size_t k = 0; k < it->nslots; k++) {
        host_batch_slot *sl = &it->slots[k];
        host_ordered *o = sl->o;
        gp_job j;

        if (k == 0 || sl->pass != it->slots[k - 1].pass)
            pass_failed = host_fails_now(o->e);
        if (o->failed)
            continue;
        /* The instance's copy of the message: the provider may have freed its own since (a
         * pipeline's re-init with another numpipes ends it with this work queued). */
        sl->r.msg = o->msg;
        gp_job_plan(&j, &o->msg->st, op_of_kind(&sl->r), sl->r.kind == GP_REQ_TAG ? 0 : sl->r.len,
                    (uint32_t)sl->r.aad_len);
        sl->r.status = GP_REQ_FAILED;
        if (!pass_failed && gp_kstate_shadow_matches(&o->msg->st, &sl->expect) && memcmp(&j, &sl->job, sizeof(j)) == 0)
            host_run_one(&sl->r);
        /* else: the plan made at queue time is not the plan of the state the slice finds (or the
         * pass failed): the suites fail on it */
        if (sl->r.status != GP_REQ_OK)
            o->failed = 1;
        OPENSSL_cleanse(&j, sizeof(j));
    }
    for (size_t i = 0; i < it->nmsgs; i++)
        host_ordered_item_done(it->os[i]);
    host_batch_item_free(it);
}

static int host_ordered_batch(gp_engine *e, gp_request *reqs, size_t n, uint64_t stream)
{
    gp_fake_stream *s = gp_fake_stream_find(stream);
    gp_ordered_req q[GP_ORDERED_BATCH_MAX];
    gp_msg_state before[GP_ORDERED_BATCH_MAX];
    gp_ordered_pass pass;
    host_batch_item *it;
    size_t cap = 0;
    uint32_t npass = 0;

    if (s == NULL || n < 2 || n > GP_ORDERED_BATCH_MAX)
        return GP_REQ_SYNC;
    /* Whatever one of them needs of the single path (a hand-over, a failure to report): all go
     * alone, nothing changed. */
    for (size_t i = 0; i < n; i++) {
        const gp_request *r = &reqs[i];
        const host_ordered *o = r->msg->ordered;
        gp_job j;

        if ((r->kind != GP_REQ_CRYPT && r->kind != GP_REQ_TAG) || r->aad_len > GP_MSG_AAD_HOLD
            || (o != NULL && o->failed))
            return GP_REQ_SYNC;
        if (r->kind == GP_REQ_CRYPT && r->len > 0) {
            gp_job_plan(&j, o != NULL ? &o->shadow : &r->msg->st, op_of_kind(r), r->len, (uint32_t)r->aad_len);
            if (j.nunits > 0
                && ((((uintptr_t)r->in + j.head_len) & 15) != 0 || (((uintptr_t)r->out + j.head_len) & 15) != 0))
                return GP_REQ_SYNC;
        }
    }
    if ((it = OPENSSL_zalloc(sizeof(*it))) == NULL)
        return GP_REQ_SYNC;
    for (size_t i = 0; i < n; i++) {
        host_ordered *o = host_ordered_of(e, reqs[i].msg);

        if (o == NULL) {
            OPENSSL_cleanse(before, sizeof(before));
            host_batch_item_free(it);
            return GP_REQ_SYNC;   /* those made stay the messages' (the single path would make them) */
        }
        it->os[i] = o;
        before[i] = o->shadow;
        q[i] = (gp_ordered_req){ .shadow = &o->shadow, .op = op_of_kind(&reqs[i]),
                                 .aad_len = (uint32_t)reqs[i].aad_len,
                                 .len = reqs[i].kind == GP_REQ_CRYPT ? reqs[i].len : 0 };
        if (reqs[i].aad_len > 0)
            memcpy(it->aad[i], reqs[i].aad, reqs[i].aad_len);
    }
    it->nmsgs = n;
    /* The shadows move as the passes are planned: from here every request is queued. */
    while (gp_ordered_pass_next(q, n, gp_kstate_slice_bytes(e), 0, &pass)) {
        for (uint32_t k = 0; k < pass.n; k++) {
            const gp_ordered_slot *sl = &pass.s[k];
            const gp_request *r = &reqs[sl->req];
            host_batch_slot *hs;

            if (it->nslots == cap) {
                host_batch_slot *grown = OPENSSL_zalloc((cap = cap ? cap * 2 : 64) * sizeof(*grown));

                if (grown == NULL)
                    goto oom;
                if (it->nslots > 0)
                    memcpy(grown, it->slots, it->nslots * sizeof(*grown));
                OPENSSL_clear_free(it->slots, it->nslots * sizeof(*grown));
                it->slots = grown;
            }
            hs = &it->slots[it->nslots++];
            hs->o = it->os[sl->req];
            hs->pass = npass;
            hs->job = sl->job;
            hs->expect = before[sl->req];
            gp_kstate_shadow_advance(&before[sl->req], q[sl->req].op, sl->len, sl->aad_len);
            hs->r = *r;
            hs->r.aad = sl->aad_len > 0 ? it->aad[sl->req] : NULL;
            hs->r.aad_len = sl->aad_len;
            if (r->kind == GP_REQ_TAG) {
                hs->r.tag_out = hs->o->tag;
            } else {
                hs->r.in = r->in + sl->off;
                hs->r.out = r->out + sl->off;
                hs->r.len = sl->len;
            }
        }
        npass++;
    }
    OPENSSL_cleanse(before, sizeof(before));   /* states: one-time MAC keys, keystream */
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&it->os[i]->lock);
        it->os[i]->queued++;
        pthread_mutex_unlock(&it->os[i]->lock);
    }
    if (gp_fake_stream_enqueue(s, host_batch_item_run, it)) {
        for (size_t i = 0; i < n; i++)
            reqs[i].status = GP_REQ_OK;
        return GP_REQ_OK;
    }
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&it->os[i]->lock);
        it->os[i]->queued--;
        pthread_mutex_unlock(&it->os[i]->lock);
    }
oom:
    OPENSSL_cleanse(before, sizeof(before));
    /* The shadows have moved past requests that will not run: each message fails, as after a
     * failed launch. */
    for (size_t i = 0; i < n; i++) {
        it->os[i]->failed = 1;
        reqs[i].status = GP_REQ_FAILED;
    }
    host_batch_item_free(it);
    return GP_REQ_OK;
}

static int host_ordered_wait(gp_engine *e, gp_msg *m, uint8_t tag[16])
{
    host_ordered *o = m->ordered;
    int st;

    (void)e;
    if (o == NULL)
        return GP_REQ_OK;   /* nothing queued: the state is the message's own */
    pthread_mutex_lock(&o->lock);
    while (o->done < o->queued)
        pthread_cond_wait(&o->ran, &o->lock);
    st = o->failed ? GP_REQ_FAILED : GP_REQ_OK;
    memcpy(&m->st, &o->msg->st, sizeof(m->st));
    if (tag != NULL)
        memcpy(tag, o->tag, 16);
    pthread_mutex_unlock(&o->lock);
    return st;
}

/* gp_executor.msg_clear: the engine lets go of the message's instance; freed now, or by the last
 * of its items to run. */
static void host_msg_clear(gp_msg *m)
{
    host_ordered *o = m->ordered;
    int now;

    if (o == NULL || m->exec != &gp_exec_host)
        return;
    m->ordered = NULL;
    pthread_mutex_lock(&o->lock);
    o->released = 1;
    now = o->done == o->queued;
    pthread_mutex_unlock(&o->lock);
    if (now)
        host_ordered_free(o);
}

/* gp_executor.msgs_clear: each of ms[0..n) that is this executor's, let go as host_msg_clear does
 * (the stand-in's messages share nothing to clear once; CI runs the engine's call through it). */
static void host_msgs_clear(gp_msg *const *ms, size_t n)
{
    for (size_t i = 0; i < n; i++)
        host_msg_clear(ms[i]);
}
#endif

const gp_executor gp_exec_host = {
    .name = "host",
    .id = GP_EXEC_HOST,
    .open = host_open,
    .close = host_close,
    .msg_start = gp_kstate_msg_start,
    .run = host_run,
    .stage_pool = host_stage_pool,
    .prepare = gp_kstate_prepare,
    .msg_copy = NULL,
#if GP_TEST_HOOKS
    .msg_clear = host_msg_clear,
    .msgs_clear = host_msgs_clear,
    .mem_check = host_mem_check,
    .stream_check = host_stream_check,
    .ordered_run = host_ordered_run,
    .ordered_wait = host_ordered_wait,
    .ordered_batch = host_ordered_batch,
#else
    .msg_clear = NULL,
#endif
};
