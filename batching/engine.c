/* SPDX-License-Identifier: Apache-2.0 */
/* The engine, the top of batching/: the public API of engine.h but keys and messages (core/'s). */
/* Executor choice, routing through the policy, submission and the stats line. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "batching/async_wait.h"
#include "batching/core/core.h"
#include "batching/engine.h"
#include "batching/exec_cpu.h"
#include "batching/exec_host.h"
#include "batching/kstate.h"
#include "batching/policy/policy.h"
#include "batching/queue.h"
#include "batching/reg_cache.h"

static const gp_executor *const executors[GP_EXEC_COUNT] = {
#ifdef GPUPROV_HAVE_CUDA
    [GP_EXEC_CUDA] = &gp_exec_cuda,
#else
    [GP_EXEC_CUDA] = NULL,            /* built without nvcc */
#endif
    [GP_EXEC_HOST] = &gp_exec_host,
    [GP_EXEC_CPU] = &gp_exec_cpu,
};

static int executor_usable(gp_engine *e, const gp_executor *x);

/* When an executor's failure is said (report_fault). */
typedef enum fault_when { FAULT_IN_BATCH, FAULT_OPENING, FAULT_MEASURING } fault_when;

/* Where the unfinished messages of a failed batch went (move_off_failed): messages to the cpu and
 * host executors, and device-mode requests left failed. */
typedef struct fault_tally {
    size_t to_cpu, to_host, devmem_failed;
} fault_tally;

static void report_fault(gp_engine *e, const gp_executor *x, fault_when when, const fault_tally *t);

/* ---- what the queue is given (gp_queue_owner): it never calls up ---- */

/* Each batch the queue flushes. */
static int queue_run(void *ctx, gp_request *reqs, size_t n)
{
    return gp_engine_submit(ctx, reqs, n);
}

/* The executor's per-message work on the submitter's own thread (gp_executor.prepare). */
static void queue_prepare(void *ctx, gp_request *r)
{
    const gp_executor *x = r->msg != NULL ? r->msg->exec : NULL;

    if (x != NULL && x->prepare != NULL)
        x->prepare(ctx, r);
}

/* Where an async job stages r's data for its message's executor (gp_executor.stage_pool). */
static gp_stage_pool *queue_stage_pool(void *ctx, const gp_request *r)
{
    const gp_executor *x = r->msg != NULL ? r->msg->exec : NULL;

    /* Device memory is never staged: the host must not read or write it. */
    return x == NULL || r->devmem || x->stage_pool == NULL ? NULL : x->stage_pool(ctx);
}

/* In a forked child: the host pool's locks and conditions, fresh (the parent's threads are gone). */
static void queue_fork_child(void *ctx)
{
    gp_host_pool *p = &((gp_engine *)ctx)->pool;

    pthread_mutex_init(&p->submit, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
}

/* ---- what the policy is given (gp_policy_ops): it never calls the engine's units itself ---- */

/* A calibration message: started on x, encrypting under k with an all-zero IV. */
static gp_msg *policy_msg_start_on(gp_engine *e, const gp_executor *x, gp_key *k, size_t ivlen)
{
    gp_msg *m = gp_msg_new(e);

    if (m == NULL)
        return NULL;
    m->key = k;
    m->enc = 1;
    m->ivlen = ivlen;
    m->exec = x;
    m->routed = 1;
    if (!x->msg_start(e, m)) {
        gp_msg_free(m);
        return NULL;
    }
    return m;
}

/* The policy's own messages, measuring x: if x fails under them there is nothing to move, but the
 * failure is said and x takes no new messages. */
static int policy_run(gp_engine *e, const gp_executor *x, gp_request *reqs, size_t n)
{
    if (x->run(e, reqs, n))
        return 1;
    gp_engine_executor_failed(e, x);
    report_fault(e, x, FAULT_MEASURING, NULL);
    return 0;
}

/* The queue's counters are atomic so that these may read them without its lock. */
static int policy_queue_idle(gp_engine *e)
{
    return atomic_load_explicit(&e->queue.active, memory_order_relaxed) == 0
           && atomic_load_explicit(&e->queue.inflight, memory_order_relaxed) == 0;
}

static int policy_queue_full(gp_engine *e)
{
    return atomic_load_explicit(&e->queue.inflight, memory_order_relaxed) > 0
           && atomic_load_explicit(&e->queue.pending_bytes, memory_order_relaxed) >= e->knobs.max_batch_bytes;
}

static void policy_route_changed(gp_engine *e)
{
    atomic_fetch_add_explicit(&e->route_epoch, 1, memory_order_release);
}

static const gp_policy_ops policy_ops = {
    .cpu = &gp_exec_cpu,
    .host = &gp_exec_host,
#ifdef GPUPROV_HAVE_CUDA
    .cuda = &gp_exec_cuda,
#endif
    .usable = executor_usable,
    .key_new = gp_key_new,
    .key_free = gp_key_free,
    .msg_start_on = policy_msg_start_on,
    .msg_free = gp_msg_free,
    .run = policy_run,
    .queue_idle = policy_queue_idle,
    .queue_full = policy_queue_full,
    .route_changed = policy_route_changed,
    .pin_module = gp_async_pin_module,
};

gp_engine *gp_engine_new(const gp_knobs *knobs, OSSL_LIB_CTX *libctx)
{
    /* Its alignment: the stats' shards and the queue's lock-free fields have cache lines of
     * their own. */
    gp_engine *e = aligned_alloc(_Alignof(gp_engine), sizeof(*e));

    if (e == NULL)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->knobs = *knobs;
    for (int i = 0; i < GP_EXEC_COUNT; i++)
        e->exec[i] = executors[i];
    e->libctx = libctx;
    gp_fork_watch();
    e->fork_gen = gp_fork_generation();
    atomic_init(&e->max_inflight, 1);
    gp_queue_owner own = {
        .ctx = e, .run = queue_run, .prepare = queue_prepare, .stage_pool = queue_stage_pool,
        .knobs = &e->knobs, .max_inflight = &e->max_inflight, .stats = e->stats,
        /* A leader takes the pool's submit lock without the queue's and then wants the queue's;
         * the pool's own lock is taken under it. */
        .fork_outer = &e->pool.submit, .fork_inner = &e->pool.lock, .fork_child = queue_fork_child,
    };
    if (!gp_queue_init(&e->queue, &own)) {
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->open_lock, NULL);
    gp_policy_init(&e->policy, e, &e->knobs, &policy_ops);
    pthread_mutex_init(&e->pool.lock, NULL);
    pthread_mutex_init(&e->pool.submit, NULL);
    pthread_cond_init(&e->pool.wake, NULL);
    pthread_cond_init(&e->pool.done, NULL);
    /* The registration cache tracks only memory allocated after its hooks are in: in now, before
     * the program makes the buffers it will reuse, wherever the cuda executor may open. */
    if (e->knobs.reg_cache_mib > 0 && executors[GP_EXEC_CUDA] != NULL && gp_engine_gpu_possible(e))
        (void)gp_reg_cache_hooks();
    return e;
}


/* Every counter summed over the shards. */
static void stats_sum(gp_engine *e, uint64_t sum[GP_ST_COUNT])
{
    for (int j = 0; j < GP_ST_COUNT; j++)
        sum[j] = 0;
    for (int i = 0; i < GP_STAT_SHARDS; i++)
        for (int j = 0; j < GP_ST_COUNT; j++)
            sum[j] += atomic_load_explicit(&e->stats[i].v[j], memory_order_relaxed);
}

/* Knob stats: where async jobs spent their round trip (queue.c count_flush), per batch holding jobs. */
static void print_async_stats(gp_engine *e)
{
    uint64_t sum[GP_ST_COUNT];
    double nb, jobs;

    stats_sum(e, sum);
    nb = (double)sum[GP_ST_ASYNC_BATCHES];
    jobs = (double)sum[GP_ST_ASYNC_OPS];

    if (nb == 0)
        return;
    gp_log_line("gpuprov async: batches=%.0f per batch: jobs=%.1f gathered_us=%.1f at its flush: jobs_running=%.1f "
                "jobs_with_app=%.1f flushed_by_size/share/timer=%llu/%llu/%llu resume_us_per_job=%.1f\n", nb,
                (double)sum[GP_ST_FLUSH_JOBS] / nb, (double)sum[GP_ST_GATHER_NS] / nb / 1e3,
                (double)sum[GP_ST_FLUSH_RUNNING] / nb, (double)sum[GP_ST_FLUSH_OUT] / nb,
                (unsigned long long)sum[GP_ST_FLUSH_SIZE], (unsigned long long)sum[GP_ST_FLUSH_SHARE],
                (unsigned long long)sum[GP_ST_FLUSH_TIMER],
                jobs > 0 ? (double)sum[GP_ST_RESUME_NS] / jobs / 1e3 : 0.0);
}

void gp_engine_free(gp_engine *e)
{
    gp_stats s;

    if (e == NULL)
        return;
    gp_queue_stop_dispatcher(&e->queue);   /* it may still be running a batch on the executors below */
    if (e->knobs.stats) {
        gp_engine_stats(e, &s);
        gp_log_line("gpuprov stats: ops=%llu bytes=%llu cuda_ops=%llu host_ops=%llu cpu_ops=%llu"
                " batches=%llu mean_batch=%.2f async_ops=%llu fallbacks=%llu errors=%llu routed_gpu=%llu"
                " routed_cpu=%llu spec_tags=%llu staged=%llu notify_us_per_async=%.2f\n",
                (unsigned long long)s.ops, (unsigned long long)s.bytes,
                (unsigned long long)s.cuda_ops, (unsigned long long)s.host_ops,
                (unsigned long long)s.cpu_ops, (unsigned long long)s.batches,
                s.batches ? (double)s.ops / (double)s.batches : 0.0,
                (unsigned long long)s.async_ops,
                (unsigned long long)s.fallbacks, (unsigned long long)s.errors,
                (unsigned long long)s.routed_gpu, (unsigned long long)s.routed_cpu,
                (unsigned long long)s.spec_tags, (unsigned long long)s.staged,
                s.async_ops ? (double)s.notify_ns / 1e3 / (double)s.async_ops : 0.0);
        print_async_stats(e);
        gp_hybrid_print(&e->policy);
        gp_warm_print(&e->policy);
    }
    if (!gp_warm_finish(&e->policy))
        return;   /* the warm-up thread keeps the engine */
    gp_host_pool_stop(&e->pool);
    pthread_mutex_lock(&e->open_lock);
    gp_engine_check_fork(e);
    pthread_mutex_unlock(&e->open_lock);
    for (int i = 0; i < GP_EXEC_COUNT; i++)
        if (executors[i] != NULL && (e->opened[i] == 1 || e->opened[i] == GP_EXEC_FAILED))
            executors[i]->close(e);   /* a failed one too: what it opened is still held */
    gp_queue_cleanup(&e->queue);
    gp_policy_cleanup(&e->policy);
    pthread_mutex_destroy(&e->open_lock);
    pthread_mutex_destroy(&e->pool.lock);
    pthread_mutex_destroy(&e->pool.submit);
    pthread_cond_destroy(&e->pool.wake);
    pthread_cond_destroy(&e->pool.done);
    free(e);
}

void gp_engine_stats(gp_engine *e, gp_stats *out)
{
    uint64_t sum[GP_ST_COUNT];

    stats_sum(e, sum);
    out->ops = sum[GP_ST_OPS];
    out->bytes = sum[GP_ST_BYTES];
    out->cuda_ops = sum[GP_ST_EXEC_OPS + GP_EXEC_CUDA];
    out->host_ops = sum[GP_ST_EXEC_OPS + GP_EXEC_HOST];
    out->cpu_ops = sum[GP_ST_EXEC_OPS + GP_EXEC_CPU];
    out->batches = sum[GP_ST_BATCHES];
    out->fallbacks = sum[GP_ST_FALLBACKS];
    out->errors = sum[GP_ST_ERRORS];
    out->routed_gpu = sum[GP_ST_ROUTED_GPU];
    out->routed_cpu = sum[GP_ST_ROUTED_CPU];
    out->spec_tags = sum[GP_ST_SPEC_TAGS];
    out->staged = sum[GP_ST_STAGED];
    out->notify_ns = sum[GP_ST_NOTIFY_NS];
    out->async_ops = sum[GP_ST_ASYNC_OPS];
}

static void count_error(gp_engine *e)
{
    if (e->knobs.stats)
        gp_stat_add(e, GP_ST_ERRORS, 1);
}




/* Whether x can serve here (opening it the first time). An opening that failed and said why gets
 * the failure's one line here, from whichever thread asked first (report_fault). */
static int executor_usable(gp_engine *e, const gp_executor *x)
{
    gp_exec_fault f;

    if (gp_engine_executor_usable(e, x))
        return 1;
    if (x != NULL && atomic_load(&e->fault_said) == 0) {
        gp_engine_fault_get(e, &f);
        if (f.x == x && f.at_open)
            report_fault(e, x, FAULT_OPENING, NULL);
    }
    return 0;
}

/*
 * Resolve the backend knob once, at the first message (lazily, so a forked child decides itself),
 * and again whenever the executor playing the GPU fails (gp_engine_executor_failed clears it).
 * auto and hybrid: the hybrid policy between the GPU (cuda, or host as a stand-in for tests) and
 * the cpu executor where a GPU works; auto is plain cpu where none does. Once the GPU side has
 * failed, new messages go to the cpu executor.
 */
static const gp_executor *preferred_executor(gp_engine *e, int new_msg, uint32_t alg)
{
    const gp_executor *got, *gpu_side;
    gp_backend b = e->knobs.backend;
    int hybrid;

    got = atomic_load_explicit(&e->preferred, memory_order_acquire);
    if (got != NULL && atomic_load_explicit(&e->fork_gen, memory_order_relaxed) == gp_fork_generation())
        return got;
    for (;;) {
        gpu_side = NULL;   /* the executor whose failure changes the answer */
        hybrid = 0;
        switch (b) {
        case GP_BACKEND_HOST:
            got = &gp_exec_host;
            if (gp_engine_executor_has_failed(e, got))
                got = &gp_exec_cpu;   /* the test hook host_fail_after made it fail (exec_host.c) */
            else
                gpu_side = got;
            break;
        case GP_BACKEND_AUTO:
            /* A new message of alg where the process shows demand starts the warm-up, unless the
             * numbers known already keep alg on the CPU for every caller and size. */
            if (gp_warm_gpu(&e->policy) != NULL
                && !gp_warm_start(&e->policy, new_msg && gp_warm_demand(&e->policy)
                                                  && gp_warm_worth_opening(&e->policy, alg, GP_LEN_UNKNOWN, 0)))
                /* Not remembered: asked again until the warm-up is over. */
                return executor_usable(e, &gp_exec_cpu) ? &gp_exec_cpu : &gp_exec_host;
            /* fall through */
        case GP_BACKEND_CUDA:
        case GP_BACKEND_HYBRID:
            got = b != GP_BACKEND_CUDA && e->knobs.hybrid_gpu_host ? &gp_exec_host : executors[GP_EXEC_CUDA];
            if (executor_usable(e, got)) {
                gpu_side = got;
                hybrid = b != GP_BACKEND_CUDA && executor_usable(e, &gp_exec_cpu);
                break;
            }
            /* A GPU that failed said so itself, and where work goes now (report_fault). */
            if (b != GP_BACKEND_AUTO && (got == NULL || !gp_engine_executor_has_failed(e, got)))
                fprintf(stderr, "gpuprov: backend=%s requested but no usable GPU%s; using the cpu "
                        "executor\n", b == GP_BACKEND_CUDA ? "cuda" : "hybrid",
                        executors[GP_EXEC_CUDA] == NULL ? " (built without nvcc)" : "");
            got = &gp_exec_cpu;
            break;
        case GP_BACKEND_CPU:
        default:
            got = &gp_exec_cpu;
            break;
        }
        if (!executor_usable(e, got)) {
            fprintf(stderr, "gpuprov: the %s executor is unusable here (no default provider reachable); "
                    "using the host executor\n", got->name);
            got = &gp_exec_host;
            gpu_side = NULL;
        }
        /* Threads racing here compute the same answer; `hybrid` is stored before `preferred`. */
        atomic_store(&e->hybrid, hybrid);
        atomic_store(&e->preferred, got);
        /* The GPU side's failure marks it failed before it clears `preferred` (batching/core/open.c):
         * if it failed since this thread looked, this thread sees it now and places again. */
        if (gpu_side == NULL || !gp_engine_executor_has_failed(e, gpu_side))
            return got;
        atomic_compare_exchange_strong(&e->preferred, &got, NULL);
    }
}

const gp_cpu_direct *gp_engine_cpu_lane(gp_engine *e, uint32_t alg, size_t keylen, uint64_t last_bytes)
{
    const gp_executor *x = preferred_executor(e, 1, alg);

    if (atomic_load_explicit(&e->hybrid, memory_order_relaxed)) {
        /* Rule 1 of the hybrid policy holds for every caller: a context whose last message was
         * shorter than the GPU's threshold keeps its next one on the CPU too (TLS records). */
        if (!gp_hybrid_cpu_only(&e->policy, alg) && !(last_bytes < gp_hybrid_cpu_below(&e->policy, alg)))
            return NULL;
    } else if (x != &gp_exec_cpu) {
        return NULL;
    }
    return gp_cpu_direct_for(e, alg, keylen);
}

void gp_engine_open_named_gpu(gp_engine *e)
{
    if (e->knobs.backend == GP_BACKEND_CUDA || e->knobs.backend == GP_BACKEND_HYBRID)
        (void)preferred_executor(e, 0, 0);
}

const _Atomic unsigned *gp_engine_route_epoch(gp_engine *e)
{
    return &e->route_epoch;
}

void gp_engine_note_large(gp_engine *e, uint32_t alg, size_t len)
{
    gp_policy *p = &e->policy;

    /* Later messages this large may go to the GPU, unless the numbers known already keep them on
     * the CPU (a lone caller's stream, by a cached measurement: the GPU is not opened for it). */
    if (len >= GP_DEMAND_BYTES && e->knobs.backend == GP_BACKEND_AUTO && gp_warm_gpu(p) != NULL
        && !gp_warm_start(p, 0) && gp_warm_worth_opening(p, alg, len, gp_warm_lone_caller(p)))
        (void)gp_warm_start(p, 1);
}

int gp_engine_move_to_gpu(gp_engine *e, uint32_t alg, size_t len, int first)
{
    if (len < GP_DEMAND_BYTES)
        return 0;
    if (!atomic_load_explicit(&e->hybrid, memory_order_relaxed)) {
        const gp_executor *gpu = gp_warm_gpu(&e->policy);

        if (e->knobs.backend != GP_BACKEND_AUTO || gpu == NULL)
            return 0;
        if (!gp_warm_start(&e->policy, 0)) {
            /* The GPU is not open yet. A message's first data may wait for it where the numbers
             * (persisted, or the prior) send it there: an AEAD message cannot move later. A stream
             * in progress goes on where it runs and moves once the warm-up is over. */
            if (!first || !gp_hybrid_prior(&e->policy, gpu, alg, len, gp_warm_lone_caller(&e->policy))) {
                gp_engine_note_large(e, alg, len);
                return 0;
            }
            gp_warm_urge(&e->policy);
            (void)gp_warm_start(&e->policy, 1);
            if (!gp_warm_wait(&e->policy))
                return 0;
        }
        (void)preferred_executor(e, 1, alg);   /* the warm-up is over: the policy's mode, resolved */
        if (!atomic_load_explicit(&e->hybrid, memory_order_relaxed))
            return 0;
    }
    return gp_hybrid_gpu_eligible(&e->policy, alg, len);
}

int gp_msg_on_cpu(const gp_msg *m)
{
    return m->routed && m->exec == &gp_exec_cpu;
}

void gp_engine_count_lane(gp_engine *e, uint64_t calls, uint64_t bytes)
{
    gp_stat_add_cpu_calls(e, calls, bytes);
}

const char *gp_engine_backend_name(gp_engine *e)
{
    const char *name = preferred_executor(e, 0, 0)->name;

    return atomic_load_explicit(&e->hybrid, memory_order_relaxed) ? "hybrid" : name;
}


/* Does the NVIDIA driver show a GPU to this process? Its control node, or a GPU under /proc. */
static int nvidia_gpu_present(void)
{
    DIR *d;
    struct dirent *ent;
    int found = 0;

    if (gp_settings_cuda_hides_all())
        return 0;
    if (access("/dev/nvidiactl", F_OK) == 0)
        return 1;
    if ((d = opendir("/proc/driver/nvidia/gpus")) == NULL)
        return 0;
    while (!found && (ent = readdir(d)) != NULL)
        found = ent->d_name[0] != '.';
    closedir(d);
    return found;
}

int gp_engine_gpu_possible(const gp_engine *e)
{
    if (e->knobs.backend != GP_BACKEND_AUTO || e->knobs.hybrid_gpu_host)
        return 1;
    return executors[GP_EXEC_CUDA] != NULL && nvidia_gpu_present();
}

/*
 * The executor that takes device memory here, or NULL: the cuda executor with a usable GPU, whatever
 * the hybrid policy would do (device memory has no CPU side); in test builds, where the host
 * executor's mem_check says it stands in (test hook host_devmem: a registry of fake allocations,
 * exec_host.c), the host executor instead, so that CI runs the mode without a GPU. backend=cpu and
 * backend=host (without the hook) have none.
 */
static const gp_executor *devmem_executor(gp_engine *e)
{
    int gpu = -1;

    /* Production builds' host executor has no mem_check: the hook is not compiled there. */
    if (gp_exec_host.mem_check != NULL && gp_exec_host.mem_check(e, NULL, 0, &gpu) != GP_MEM_NO_EXECUTOR)
        return executor_usable(e, &gp_exec_host) ? &gp_exec_host : NULL;
    if (executors[GP_EXEC_CUDA] == NULL || e->knobs.backend == GP_BACKEND_CPU || e->knobs.backend == GP_BACKEND_HOST)
        return NULL;
    return executor_usable(e, executors[GP_EXEC_CUDA]) ? executors[GP_EXEC_CUDA] : NULL;
}

int gp_engine_device_memory(gp_engine *e)
{
    return devmem_executor(e) != NULL;
}

void gp_msg_set_memory(gp_msg *m, int device)
{
    m->devmem = device != 0;
}

int gp_engine_streams(gp_engine *e)
{
    const gp_executor *x = devmem_executor(e);

    return x != NULL && x->stream_check != NULL;
}

void gp_msg_set_stream(gp_msg *m, uint64_t stream)
{
    m->stream = stream;
}

/* The stream-ordered state of the message that ends (a new start): released by its executor once
 * the stream has run what it queued (gp_executor.msg_clear); the engine forgets it now. */
static void end_ordered(gp_msg *m)
{
    if (m->ordered != NULL && m->exec != NULL && m->exec->msg_clear != NULL)
        m->exec->msg_clear(m);
    m->ordered = NULL;
    m->ordered_tag = 0;
}

void gp_msgs_end_ordered(gp_msg *const *ms, size_t n)
{
    /* An executor's msgs_clear takes all of its messages at once (their m->ordered NULL after). */
    for (size_t i = 0; i < n; i++)
        if (ms[i]->ordered != NULL && ms[i]->exec != NULL && ms[i]->exec->msgs_clear != NULL)
            ms[i]->exec->msgs_clear(ms, n);
    for (size_t i = 0; i < n; i++)
        end_ordered(ms[i]);
}

int gp_msg_start(gp_msg *m, gp_key *k, const uint8_t *iv, size_t ivlen, int enc)
{
    /* Device mode: straight to the executor that reads device memory; no routing, no lane. */
    const gp_executor *x = m->devmem ? devmem_executor(m->engine) : preferred_executor(m->engine, 1, k->alg);

    if (ivlen > sizeof(m->iv) || x == NULL)
        return 0;
    end_ordered(m);
    gp_msg_fold_cpu_calls(m);
    m->key = k;
    m->enc = enc;
    m->ivlen = ivlen;
    memcpy(m->iv, iv, ivlen);
    m->aad_hold_len = 0;
    if (!m->devmem && atomic_load_explicit(&m->engine->hybrid, memory_order_relaxed)) {
        if (!gp_hybrid_cpu_only(&m->engine->policy, k->alg)) {
            /* Routed at its first data request, when the size is known (batching/policy/hybrid.c). */
            m->exec = NULL;
            m->routed = 0;
            return 1;
        }
        /* The measurement says the GPU never wins for this algorithm: no need to hold AAD and
         * route later, which every record (TLS) would pay for. */
        x = &gp_exec_cpu;
        if (m->engine->knobs.stats)
            gp_stat_add(m->engine, GP_ST_ROUTED_CPU, 1);
    }
    m->routed = 1;
    m->exec = x;
    m->stream_now = m->devmem ? m->stream : 0;
    if (!x->msg_start(m->engine, m)) {
        count_error(m->engine);
        m->exec = NULL;
        return 0;
    }
    return 1;
}

static void run_on(gp_engine *e, const gp_executor *x, gp_request *reqs, size_t n);
static int submit_routed(gp_msg *m, gp_request *r);

/* The size a request routes its message by: its bytes for data and AAD, 0 for a tag. */
static size_t route_len(const gp_request *r)
{
    return r->kind == GP_REQ_CRYPT || r->kind == GP_REQ_AAD ? r->len : 0;
}

/*
 * Hybrid: pick the executor of an unrouted message whose first data request is `len` bytes, start
 * the message there and absorb the AAD it held. 0 on failure (the message stays unusable).
 */
/* Where messages of key k that start together go: `each` bytes each on average, `total` in all
 * (gp_hybrid_route_batch). */
static const gp_executor *route_pick(gp_engine *e, const gp_key *k, size_t each, size_t total)
{
    const gp_executor *x = preferred_executor(e, 1, k->alg);

    if (atomic_load_explicit(&e->hybrid, memory_order_relaxed))
        x = gp_hybrid_route_batch(&e->policy, x, k->alg, k->keylen, each, total);
    return x;
}

static int route_on(gp_msg *m, const gp_executor *x);

static int route_now(gp_msg *m, size_t len)
{
    return route_on(m, route_pick(m->engine, m->key, len, len));
}

/* Start the unrouted message m on x, the route chosen for it, and absorb the AAD it held. */
static int route_on(gp_msg *m, const gp_executor *x)
{
    gp_engine *e = m->engine;

    m->exec = x;
    m->routed = 1;
    if (!x->msg_start(e, m)) {
        m->exec = NULL;
        return 0;
    }
    if (e->knobs.stats)
        gp_stat_add(e, x == &gp_exec_cpu ? GP_ST_ROUTED_CPU : GP_ST_ROUTED_GPU, 1);
    /* The GPU side carries held AAD with the next request (submit_one); the cpu executor takes
     * it now, as its own call. */
    if (x == &gp_exec_cpu && m->aad_hold_len > 0) {
        gp_request a = { .kind = GP_REQ_AAD, .in = m->aad_hold, .len = m->aad_hold_len };

        m->aad_hold_len = 0;
        if (submit_routed(m, &a) != GP_REQ_OK)
            return 0;
    }
    return 1;
}

/*
 * One request, the provider's every call. The cpu executor gains nothing from batching: it runs
 * the request at once, without the queue's loops. The host and cuda executors go through the
 * process-wide queue, which gathers concurrent callers into one batch.
 */
static int submit_routed(gp_msg *m, gp_request *r)
{
    gp_engine *e = m->engine;

    r->msg = m;
    r->status = GP_REQ_FAILED;
    if (m->exec == NULL) {
        count_error(e);
        return GP_REQ_FAILED;
    }
    if (m->exec != &gp_exec_cpu)
        return gp_queue_submit(&e->queue, r);
    if (!e->knobs.stats)
        return gp_cpu_run_one(r);   /* nothing to count, nothing to fall back from */
    gp_stat_add(e, GP_ST_BATCHES, 1);
    run_on(e, m->exec, r, 1);
    return r->status;
}

/* A tag or verdict the message's last GPU-side request already computed (gp_msg_state.spec_tag). */
static int answer_from_spec_tag(gp_msg *m, gp_request *r)
{
    gp_engine *e = m->engine;

    if (r->kind == GP_REQ_TAG) {
        memcpy(r->tag_out, m->st.spec_tag, 16);
        r->status = GP_REQ_OK;
    } else {
        /* Constant time (SP 800-38D §7.2 step 8). */
        r->status = r->taglen >= 1 && r->taglen <= 16
                    && CRYPTO_memcmp(m->st.spec_tag, r->tag_in, r->taglen) == 0 ? GP_REQ_OK : GP_REQ_BAD_TAG;
    }
    if (e->knobs.stats) {
        gp_stat_add(e, GP_ST_OPS, 1);
        gp_stat_add(e, GP_ST_EXEC_OPS + m->exec->id, 1);
        gp_stat_add(e, GP_ST_SPEC_TAGS, 1);
    }
    return r->status;
}

/*
 * Requests on the GPU side (cuda, host) cost a round trip each, so an AEAD message is folded into
 * as few as possible: small AAD is held and carried with the next request (AAD + data in one), and
 * a final call right after a data request takes the tag that request already made. A TLS record
 * is then one round trip. The cpu executor gets every call as it comes.
 */
/* Keep a small AAD request in the message (it goes with the next request); 0 if it does not fit. A
 * speculative tag made before it no longer holds. */
static int hold_aad(gp_msg *m, gp_request *r)
{
    if (r->kind != GP_REQ_AAD || r->len > sizeof(m->aad_hold) - m->aad_hold_len)
        return 0;
    if (r->len > 0)
        memcpy(m->aad_hold + m->aad_hold_len, r->in, r->len);
    m->aad_hold_len += r->len;
    m->st.spec_valid = 0;
    r->status = GP_REQ_OK;
    return 1;
}

/* r as the executor queues it: with the AAD the message holds; a verdict as a tag request whose
 * tag the executor keeps for ordered_wait. */
static void ordered_request(gp_msg *m, const gp_request *r, gp_request *q)
{
    *q = *r;
    if (m->aad_hold_len > 0) {
        q->aad = m->aad_hold;
        q->aad_len = m->aad_hold_len;
    }
    q->msg = m;
    q->stream = m->stream_now;
    if (r->kind == GP_REQ_VERIFY || r->kind == GP_REQ_TAG) {
        q->kind = GP_REQ_TAG;
        q->tag_out = NULL;
    }
}

/* r's end once its executor took it (ordered_run, ordered_batch) with status st: the held AAD went
 * with it; a queued tag is pending; a verdict waits for the message's work and compares. */
static int ordered_taken(gp_msg *m, gp_request *r, int st)
{
    gp_engine *e = m->engine;
    const gp_executor *x = m->exec;
    uint8_t tag[16];

    m->aad_hold_len = 0;
    if (st == GP_REQ_OK && (r->kind == GP_REQ_TAG || r->kind == GP_REQ_VERIFY))
        m->ordered_tag = 1;
    if (st == GP_REQ_OK && r->kind == GP_REQ_VERIFY) {
        st = x->ordered_wait(e, m, tag);
        m->ordered_tag = 0;
        if (st == GP_REQ_OK)
            st = r->taglen >= 1 && r->taglen <= 16 && CRYPTO_memcmp(tag, r->tag_in, r->taglen) == 0
                 ? GP_REQ_OK : GP_REQ_BAD_TAG;
        OPENSSL_cleanse(tag, sizeof(tag));
    }
    if (st == GP_REQ_FAILED)
        count_error(e);
    else if (e->knobs.stats) {
        gp_stat_add(e, GP_ST_OPS, 1);
        gp_stat_add(e, GP_ST_BYTES, r->len);
        gp_stat_add(e, GP_ST_EXEC_OPS + x->id, 1);
    }
    return r->status = st;
}

/*
 * Stream-ordered device mode (gp_msg_set_stream), on an executor that queues on the caller's
 * stream: AAD, data and tags are queued there with the AAD the message holds (the executor copies
 * it) and the call returns; a verdict waits for the message's own queued work (its tag, computed in
 * stream order) and compares here, in constant time (SP 800-38D §7.2 step 8).
 */
static int submit_ordered(gp_msg *m, gp_request *r)
{
    gp_request q;
    int st;

    ordered_request(m, r, &q);
    st = m->exec->ordered_run(m->engine, &q, m->stream_now);
    if (st == GP_REQ_SYNC)
        return st;   /* the caller runs it synchronously, with the AAD still held */
    return ordered_taken(m, r, st);
}

/*
 * A pipeline call's stream-ordered requests (gp_msgs_submit): the data requests or tags of the
 * messages on the first such request's stream and executor go to it as one batch (ordered_batch:
 * one launch pair a pass, not a pair per message); taken[i] marks those it took, their statuses
 * set. The rest, and all of them where it declines, go alone (submit_ready, submit_ordered).
 * Out of line: its 4 KiB of requests are on the stack only while it runs, not under the rest of
 * gp_msgs_submit's calls (inside an async job, whose stack is 32 KiB).
 */
static GP_NOINLINE void submit_ordered_together(gp_engine *e, gp_request *reqs, size_t n, unsigned char *taken)
{
    gp_request q[GP_ORDERED_BATCH_MAX];
    size_t at[GP_ORDERED_BATCH_MAX], k = 0;
    const gp_executor *x = NULL;
    uint64_t stream = 0;

    for (size_t i = 0; i < n && k < GP_ORDERED_BATCH_MAX; i++) {
        gp_msg *m = reqs[i].msg;
        const int kind = reqs[i].kind;

        if (!m->routed || m->exec == NULL || m->exec->ordered_batch == NULL || m->stream_now == 0
            || !((kind == GP_REQ_CRYPT && reqs[i].devmem) || kind == GP_REQ_TAG || kind == GP_REQ_VERIFY))
            continue;
        if (x == NULL) {
            x = m->exec;
            stream = m->stream_now;
        } else if (m->exec != x || m->stream_now != stream) {
            continue;
        }
        ordered_request(m, &reqs[i], &q[k]);
        at[k++] = i;
    }
    if (k < 2 || x->ordered_batch(e, q, k, stream) == GP_REQ_SYNC)
        return;
    for (size_t j = 0; j < k; j++) {
        taken[at[j]] = 1;
        (void)ordered_taken(reqs[at[j]].msg, &reqs[at[j]], q[j].status);
    }
}

int gp_msg_tag_pending(const gp_msg *m)
{
    return m->ordered_tag;
}

int gp_msg_tag_wait(gp_msg *m, uint8_t tag[16])
{
    int st;

    if (!m->ordered_tag || m->exec == NULL || m->exec->ordered_wait == NULL)
        return GP_REQ_FAILED;
    st = m->exec->ordered_wait(m->engine, m, tag);
    m->ordered_tag = 0;
    if (st != GP_REQ_OK)
        count_error(m->engine);
    return st;
}

/*
 * What a request of m needs before its executor: a route (held AAD waits for it), held AAD to carry,
 * or an answer from the speculative tag. Returns 1 when r goes on to m's executor (submit_routed),
 * 0 when it was answered here (r->status set).
 */
static int submit_ready(gp_msg *m, gp_request *r)
{
    if (!m->routed) {
        /* AAD comes before the data that decides the route (TLS: a 5 or 13-byte header): hold it. */
        if (hold_aad(m, r))
            return 0;
        if (!route_now(m, route_len(r))) {
            count_error(m->engine);
            r->status = GP_REQ_FAILED;
            return 0;
        }
    }
    if (m->exec == NULL || m->exec == &gp_exec_cpu) {
        gp_engine_note_large(m->engine, m->key->alg, r->len);
        return 1;
    }
    if (hold_aad(m, r))
        return 0;
    /* Stream-ordered: queued on the caller's stream (r->status set), unless handed back. */
    if (m->stream_now != 0 && m->exec->ordered_run != NULL && submit_ordered(m, r) != GP_REQ_SYNC)
        return 0;
    if ((r->kind == GP_REQ_TAG || r->kind == GP_REQ_VERIFY) && m->aad_hold_len == 0 && m->st.spec_valid) {
        (void)answer_from_spec_tag(m, r);
        return 0;
    }
    if (m->aad_hold_len > 0) {
        r->aad = m->aad_hold;
        r->aad_len = m->aad_hold_len;
    }
    return 1;
}

static int submit_one(gp_msg *m, gp_request *r)
{
    int status;

    if (!submit_ready(m, r))
        return r->status;
    status = submit_routed(m, r);
    m->aad_hold_len = 0;   /* carried with r (submit_ready), or none */
    return status;
}

/*
 * Unrouted messages whose requests start them together (gp_msgs_submit) take one route, chosen for
 * the batch they make: the GPU side takes them in one batch, or the CPU runs them all. AAD that the
 * messages hold until their data comes does not route them (hold_aad). A lone such message routes
 * as submit_one would.
 */
static void route_together(gp_engine *e, gp_request *reqs, size_t n)
{
    size_t total = 0, count = 0;
    const gp_executor *x;
    gp_msg *first = NULL;

    for (size_t i = 0; i < n; i++) {
        gp_msg *m = reqs[i].msg;

        if (m->routed || (reqs[i].kind == GP_REQ_AAD && reqs[i].len <= sizeof(m->aad_hold) - m->aad_hold_len))
            continue;
        total += route_len(&reqs[i]);
        count++;
        if (first == NULL)
            first = m;
    }
    if (count < 2)
        return;
    x = route_pick(e, first->key, total / count, total);
    for (size_t i = 0; i < n; i++) {
        gp_msg *m = reqs[i].msg;

        if (m->routed || (reqs[i].kind == GP_REQ_AAD && reqs[i].len <= sizeof(m->aad_hold) - m->aad_hold_len))
            continue;
        if (!route_on(m, x))
            count_error(e);   /* m->exec stays NULL: its request fails in submit_routed */
    }
}

int gp_msgs_submit(gp_engine *e, gp_request *reqs, size_t n)
{
    gp_request stack[32], *batch = stack;
    size_t from_stack[32], *from = from_stack, k = 0;
    unsigned char taken[GP_ORDERED_BATCH_MAX] = { 0 };   /* queued together on a stream */
    int all_ok = 1;

    if (n > 32) {
        batch = malloc(n * sizeof(*batch));
        from = malloc(n * sizeof(*from));
        if (batch == NULL || from == NULL) {
            /* No memory for the batch: each request alone, as its own call would run it. */
            free(batch != stack ? batch : NULL);
            free(from != from_stack ? from : NULL);
            for (size_t i = 0; i < n; i++)
                all_ok &= submit_one(reqs[i].msg, &reqs[i]) == GP_REQ_OK;
            return all_ok;
        }
    }
    route_together(e, reqs, n);
    if (n <= GP_ORDERED_BATCH_MAX && !e->knobs.test.ordered_alone)
        submit_ordered_together(e, reqs, n, taken);
    for (size_t i = 0, total = 0; i < n; i++) {
        /* A pipeline call's data is the process's demand for the GPU as one message's would be
         * (gp_engine_note_large): backend auto opens and measures it for the calls that follow. */
        total += reqs[i].kind == GP_REQ_CRYPT ? reqs[i].len : 0;
        if (i == n - 1 && n > 1)
            gp_engine_note_large(e, reqs[i].msg->key->alg, total);
    }
    for (size_t i = 0; i < n; i++) {
        gp_msg *m = reqs[i].msg;

        if ((n <= GP_ORDERED_BATCH_MAX && taken[i]) || !submit_ready(m, &reqs[i]))
            continue;
        if (m->exec == NULL || m->exec == &gp_exec_cpu || gp_async_in_job()) {
            /* The cpu executor runs each at once (the default provider's code: nothing to gather);
             * an async job queues each request, as a job must never run a batch on its stack. */
            (void)submit_routed(m, &reqs[i]);
            m->aad_hold_len = 0;
            continue;
        }
        reqs[i].status = GP_REQ_FAILED;
        batch[k] = reqs[i];
        from[k++] = i;
    }
    /* The GPU side's requests: one batch, one run of the executor (one launch on the GPU). */
    if (k > 0) {
        (void)gp_engine_submit(e, batch, k);
        for (size_t j = 0; j < k; j++) {
            reqs[from[j]].status = batch[j].status;
            reqs[from[j]].msg->aad_hold_len = 0;   /* carried with its request */
        }
    }
    for (size_t i = 0; i < n; i++)
        all_ok &= reqs[i].status == GP_REQ_OK;
    if (batch != stack) {
        free(batch);
        free(from);
    }
    return all_ok;
}

/*
 * AAD and data of a message on the cpu executor: straight to it, without a gp_request (building
 * one and the queue's bookkeeping doubled the cost of a 16-byte call). Larger calls take
 * submit_one, which may start the GPU's warm-up for them.
 */
static int cpu_call(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len)
{
    if (!gp_cpu_update(m, in, out, len)) {
        count_error(m->engine);
        return 0;
    }
    m->cpu_calls++;
    m->cpu_bytes += len;
    return 1;
}


int gp_msg_aad(gp_msg *m, const uint8_t *aad, size_t len)
{
    gp_request r;

    if (m->exec == &gp_exec_cpu && len < GP_DEMAND_BYTES)
        return cpu_call(m, aad, NULL, len);
    r = (gp_request){ .kind = GP_REQ_AAD, .in = aad, .len = len };
    return submit_one(m, &r) == GP_REQ_OK;
}

int gp_msg_crypt(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len)
{
    gp_request r;

    if (m->exec == &gp_exec_cpu && len < GP_DEMAND_BYTES)
        return cpu_call(m, in, out, len);
    r = (gp_request){ .kind = GP_REQ_CRYPT, .in = in, .out = out, .len = len };
    return submit_one(m, &r) == GP_REQ_OK;
}

int gp_msg_check_device(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len, int *gpu)
{
    const gp_executor *x = m->exec;
    int gpu_in = -1, gpu_out = -1, st;

    if (x == NULL || x->mem_check == NULL || !m->devmem)
        return GP_MEM_NO_EXECUTOR;
    /* In place: one check. */
    if ((st = x->mem_check(m->engine, in, len, &gpu_in)) != GP_MEM_OK
        || (out != in && (st = x->mem_check(m->engine, out, len, &gpu_out)) != GP_MEM_OK))
        return st;
    if (out != in && gpu_in != gpu_out)
        return GP_MEM_SPLIT;
    /* Stream-ordered: the stream must be one of the GPU that holds the data (devmem.c). */
    if (m->stream_now != 0
        && (x->stream_check == NULL || (st = x->stream_check(m->engine, m->stream_now, gpu_in)) != GP_MEM_OK))
        return x->stream_check == NULL ? GP_MEM_NO_EXECUTOR : st;
    *gpu = gpu_in;
    return GP_MEM_OK;
}

int gp_msg_crypt_device(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len)
{
    int gpu = -1, st = gp_msg_check_device(m, in, out, len, &gpu);
    gp_request r;

    if (st != GP_MEM_OK) {
        count_error(m->engine);
        return st;
    }
    r = (gp_request){ .kind = GP_REQ_CRYPT, .in = in, .out = out, .len = len, .devmem = 1, .gpu = gpu,
                      .stream = m->stream_now };
    return submit_one(m, &r) == GP_REQ_OK ? GP_MEM_OK : GP_MEM_FAILED;
}

int gp_msg_is_host_memory(gp_msg *m, const uint8_t *p, size_t len)
{
    const gp_executor *x = m->exec;
    int gpu = -1;

    return x == NULL || x->mem_check == NULL || x->mem_check(m->engine, p, len, &gpu) == GP_MEM_NOT_DEVICE;
}

int gp_msg_tag(gp_msg *m, uint8_t tag[16])
{
    gp_request r = { .kind = GP_REQ_TAG, .tag_out = tag };

    return submit_one(m, &r) == GP_REQ_OK;
}

int gp_msg_verify(gp_msg *m, const uint8_t *tag, size_t taglen)
{
    gp_request r = { .kind = GP_REQ_VERIFY, .tag_in = tag, .taglen = taglen };

    return submit_one(m, &r);
}

/* ---- submission ---- */

/* Counters cost locked instructions on every request: they run only when the stats line is asked
 * for (knob stats = 1), the one place they are read. */
static void account(gp_engine *e, const gp_executor *x, const gp_request *reqs, size_t n)
{
    uint64_t bytes = 0, failed = 0;

    if (!e->knobs.stats)
        return;
    for (size_t i = 0; i < n; i++) {
        bytes += reqs[i].len;
        failed += reqs[i].status == GP_REQ_FAILED;
    }
    gp_stat_add(e, GP_ST_OPS, n);
    gp_stat_add(e, GP_ST_BYTES, bytes);
    gp_stat_add(e, GP_ST_EXEC_OPS + x->id, n);
    if (failed != 0)
        gp_stat_add(e, GP_ST_ERRORS, failed);
}

/* ---- an executor that failed as a whole: where its messages go on ---- */

/*
 * When the executor playing the GPU (cuda, or in tests the host executor standing in for it) fails
 * under its messages, each goes where it loses least. The cpu executor (the default provider)
 * imports no kernel state, but it takes on whatever needs none, at its full speed:
 *   - a CTR or ChaCha20 stream, at the keystream block it is in (gp_kstate_stream_point);
 *   - an AEAD message that has absorbed nothing (gp_kstate_begun), from its key and IV.
 * An AEAD message already begun holds a GHASH or Poly1305 accumulator that only the kernel-code
 * executors can carry on: it finishes on the host executor, which shares the state format. A
 * device-mode message stays where it is: no host code may read its data, so its requests fail. With
 * no usable cpu executor everything that can move goes to the host executor.
 */

/* A stream onto the cpu executor at its place in the keystream: the default provider's context
 * starts at the block in progress and runs the bytes of it already used, so that its next byte is
 * the one the kernel state would have made. */
static int stream_onto_cpu(gp_engine *e, gp_msg *m)
{
    uint8_t zeros[64] = { 0 }, spent[64];
    size_t used;
    int ok;

    gp_kstate_stream_point(&m->st, m->iv, &used);
    m->ivlen = 16;
    ok = gp_exec_cpu.msg_start(e, m) && (used == 0 || gp_cpu_update(m, zeros, spent, used));
    OPENSSL_cleanse(spent, sizeof(spent));   /* keystream */
    return ok;
}

/* Can m go on on the cpu executor, and does it there now? 0: it stays where it was. */
static int move_to_cpu(gp_engine *e, gp_msg *m)
{
    const uint32_t alg = m->key->alg;
    const int stream = alg == GP_ALG_AES_CTR || alg == GP_ALG_CHACHA20;

    if (m->devmem || !(stream || !gp_kstate_begun(&m->st)) || !executor_usable(e, &gp_exec_cpu))
        return 0;
    if (!(stream ? stream_onto_cpu(e, m) : gp_exec_cpu.msg_start(e, m)))
        return 0;
    m->exec = &gp_exec_cpu;
    m->routed = 1;
    return 1;
}

/* Message m of a batch that failed on its executor: where it goes on (the tally says). Its state is
 * what its requests that finished before the failure left. */
static void move_off_failed(gp_engine *e, gp_msg *m, fault_tally *t)
{
    if (m->devmem)
        return;
    if (move_to_cpu(e, m)) {
        t->to_cpu++;
        return;
    }
    m->exec = &gp_exec_host;
    t->to_host++;
}

/* Is request i the first unfinished one of its message in the batch? Quadratic in the batch's
 * length: it runs only for a batch that a failure hit. */
static int first_unfinished(const gp_request *reqs, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (reqs[j].msg == reqs[i].msg && reqs[j].status == GP_REQ_FAILED)
            return 0;
    return reqs[i].status == GP_REQ_FAILED;
}

/* The unfinished requests of a failed batch that go on on the host executor, as one batch of their
 * own (its pool spreads their messages over its threads, each message's requests in order); 0 when
 * it cannot be made (no memory: the caller runs each alone). */
static int rerun_on_host_together(gp_engine *e, gp_request *reqs, size_t n, size_t nhost)
{
    gp_request *part = malloc(nhost * sizeof(*part));
    size_t *from = malloc(nhost * sizeof(*from)), k = 0;

    if (part == NULL || from == NULL) {
        free(part);
        free(from);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (reqs[i].status == GP_REQ_FAILED && reqs[i].msg->exec == &gp_exec_host) {
            part[k] = reqs[i];
            from[k++] = i;
        }
    gp_exec_host.run(e, part, k);
    for (size_t j = 0; j < k; j++)
        reqs[from[j]] = part[j];
    account(e, &gp_exec_host, part, k);
    free(part);
    free(from);
    return 1;
}

/* Run the unfinished requests of a failed batch on their messages' executors now (move_off_failed
 * placed them): the cpu executor's one by one in submission order, the host executor's together;
 * device-mode ones stay failed. Returns how many ran again. */
static size_t rerun_unfinished(gp_engine *e, gp_request *reqs, size_t n)
{
    size_t redo = 0, nhost = 0;

    for (size_t i = 0; i < n; i++) {
        gp_request *r = &reqs[i];

        if (r->status != GP_REQ_FAILED || r->msg->devmem)
            continue;
        redo++;
        if (r->msg->exec == &gp_exec_host) {
            nhost++;
            continue;
        }
        r->msg->exec->run(e, r, 1);
        account(e, r->msg->exec, r, 1);
    }
    if (nhost > 1 && rerun_on_host_together(e, reqs, n, nhost))
        return redo;
    for (size_t i = 0; i < n && nhost > 0; i++)
        if (reqs[i].status == GP_REQ_FAILED && !reqs[i].msg->devmem && reqs[i].msg->exec == &gp_exec_host) {
            gp_exec_host.run(e, &reqs[i], 1);
            account(e, &gp_exec_host, &reqs[i], 1);
        }
    return redo;
}

/*
 * Run a batch on x. If x fails as a whole (a CUDA error), the requests it did not complete are
 * untouched (status still GP_REQ_FAILED, message state as its finished requests left it): each of
 * their messages goes on where it loses least (move_off_failed) and those requests run there, so
 * nothing is lost and no answer is wrong. x takes no new messages in this process.
 */
static void run_on(gp_engine *e, const gp_executor *x, gp_request *reqs, size_t n)
{
    fault_tally t = { 0 };
    /* In flight on the GPU for every process of this user (policy/share.c), till it returns. */
    const size_t shared = gp_share_begin(&e->policy, x, reqs, n);
    const int ok = x->run(e, reqs, n);

    gp_share_end(&e->policy, shared);
    if (ok) {
        account(e, x, reqs, n);
        return;
    }
    gp_engine_executor_failed(e, x);
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].status != GP_REQ_FAILED || reqs[i].msg->devmem) {
            t.devmem_failed += reqs[i].status == GP_REQ_FAILED;
            account(e, x, &reqs[i], 1);      /* finished on x before it failed, or fails with it */
        } else if (first_unfinished(reqs, i)) {
            move_off_failed(e, reqs[i].msg, &t);
        }
    }
    report_fault(e, x, FAULT_IN_BATCH, &t);
    if (e->knobs.stats)
        gp_stat_add(e, GP_ST_FALLBACKS, rerun_unfinished(e, reqs, n));
    else
        (void)rerun_unfinished(e, reqs, n);
}

/* "1 message restarts" / "2 messages restart": n, then `one` or `many`. */
static void say_count(char *buf, size_t size, size_t *len, size_t n, const char *one, const char *many)
{
    int k;

    if (n == 0 || *len >= size)
        return;
    k = snprintf(buf + *len, size - *len, "%s%zu %s", *len > 0 ? ", " : "", n, n == 1 ? one : many);
    if (k > 0)
        *len += (size_t)k;
}

/*
 * The one line a failure gets in a process: which GPU (or executor) failed, at which call or step
 * with which error, what became of the work it held and where new messages go. Said by whoever
 * meets the failure first: the batch it failed under (run_on), its opening (executor_usable) or the
 * hybrid policy's measurement of it (policy_run).
 */
static void report_fault(gp_engine *e, const gp_executor *x, fault_when when, const fault_tally *t)
{
    gp_exec_fault f;
    char who[64], moved[320] = "";
    size_t len = 0;
    const int cpu = executor_usable(e, &gp_exec_cpu);

    if (atomic_exchange(&e->fault_said, 1))
        return;
    gp_engine_fault_get(e, &f);
    if (f.x == NULL) {   /* it failed without saying why (no memory for its own bookkeeping) */
        f.x = x;
        f.gpu = -1;
        snprintf(f.what, sizeof(f.what), "no cause given");
    }
    if (f.x->id != GP_EXEC_CUDA)
        snprintf(who, sizeof(who), "the %s executor", f.x->name);
    else if (f.gpu >= 0)
        snprintf(who, sizeof(who), "GPU %d", f.gpu);
    else
        snprintf(who, sizeof(who), "the GPU");
    if (when == FAULT_IN_BATCH) {
        say_count(moved, sizeof(moved), &len, t->to_cpu, "message restarts on the cpu executor",
                  "messages restart on the cpu executor");
        say_count(moved, sizeof(moved), &len, t->to_host,
                  cpu ? "begun AEAD message finishes on the host executor"
                      : "message finishes on the host executor",
                  cpu ? "begun AEAD messages finish on the host executor"
                      : "messages finish on the host executor");
        say_count(moved, sizeof(moved), &len, t->devmem_failed, "device-memory request fails",
                  "device-memory requests fail");
    }
    gp_log_line("gpuprov: %s failed%s (%s)%s%s; new messages go to the %s executor\n", who,
                when == FAULT_OPENING ? " while opening" : when == FAULT_MEASURING ? " while measured" : "",
                f.what, len > 0 ? ": " : "", moved, cpu ? "cpu" : "host");
}

/*
 * Messages whose executor failed under another batch leave it before their request runs where they
 * can go on at full speed: the cpu executor (a stream at its counter, an AEAD message not begun from
 * its start). A begun AEAD message stays on the GPU side until a batch of it fails there (then
 * run_on moves it to the host executor): with several GPUs a healthy one may still serve it.
 */
static void leave_failed_executors(gp_engine *e, gp_request *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        gp_msg *m = reqs[i].msg;

        if (m->exec != &gp_exec_cpu && gp_engine_executor_has_failed(e, m->exec))
            (void)move_to_cpu(e, m);
    }
}

int gp_engine_submit(gp_engine *e, gp_request *reqs, size_t n)
{
    int all_ok = 1;
    size_t i;

    if (n == 0)
        return 1;
    if (e->knobs.stats)
        gp_stat_add(e, GP_ST_BATCHES, 1);
    for (i = 0; i < n; i++) {
        reqs[i].status = GP_REQ_FAILED;
        if (reqs[i].msg != NULL && !reqs[i].msg->routed
            && !route_now(reqs[i].msg, route_len(&reqs[i])))
            all_ok = 0;
        if (reqs[i].msg == NULL || reqs[i].msg->exec == NULL)
            all_ok = 0;
    }
    if (!all_ok) {
        count_error(e);
        return 0;
    }
    leave_failed_executors(e, reqs, n);
    /* The common case: one executor serves the whole batch. */
    for (i = 1; i < n && reqs[i].msg->exec == reqs[0].msg->exec; i++)
        ;
    if (i == n) {
        run_on(e, reqs[0].msg->exec, reqs, n);
    } else {
        /*
         * Mixed (messages that left a failed executor, a test's batch): each request alone on its
         * message's executor, in submission order, so each runs once and after the requests of its
         * message before it, wherever a failure under an earlier one moved its message.
         */
        for (i = 0; i < n; i++)
            run_on(e, reqs[i].msg->exec, &reqs[i], 1);
    }
    for (i = 0; i < n; i++)
        all_ok &= reqs[i].status == GP_REQ_OK;
    return all_ok;
}
