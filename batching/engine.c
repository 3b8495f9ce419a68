/* SPDX-License-Identifier: Apache-2.0 */
/* The engine: executor choice, keys, messages, request submission and the stats line. */
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/async.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "async_wait.h"
#include "engine_internal.h"
#include "kernels/msg_unit.h"

static const gp_executor *const executors[GP_EXEC_COUNT] = {
#ifdef GPUPROV_HAVE_CUDA
    [GP_EXEC_CUDA] = &gp_exec_cuda,
#else
    [GP_EXEC_CUDA] = NULL,            /* built without nvcc */
#endif
    [GP_EXEC_HOST] = &gp_exec_host,
    [GP_EXEC_CPU] = &gp_exec_cpu,
};

static atomic_uint fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Warm-up threads running in this process (backend=auto), and "the process is exiting". */
static atomic_int warmups_running, warmups_exit;

static void on_fork_child(void)
{
    atomic_fetch_add(&fork_generation, 1);
    atomic_store(&warmups_running, 0);   /* the parent's threads are not ours */
}

/* glibc unregisters the handler if the module is unloaded (it is tied to this DSO). */
static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

/* A thread's shard, from its pthread_t (the address of its descriptor: threads' are far apart).
 * Not a _Thread_local: dynamic TLS in a dlopen'ed module crashed LeakSanitizer's exit-time scan
 * (s_client under ASan, tests/tls). Two threads may share a shard; that only costs contention. */
unsigned gp_stat_shard_index(void)
{
    uint64_t t = (uint64_t)(uintptr_t)pthread_self();

    t ^= t >> 17;
    t *= UINT64_C(0x9e3779b97f4a7c15);
    return (unsigned)(t >> 58) % GP_STAT_SHARDS;
}

unsigned gp_fork_generation(void)
{
    return atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

gp_engine *gp_engine_new(const gp_knobs *knobs, OSSL_LIB_CTX *libctx)
{
    /* Its alignment: the stats' shards and the queue's lock-free fields have cache lines of
     * their own. */
    gp_engine *e = aligned_alloc(_Alignof(gp_engine), sizeof(*e));

    if (e == NULL)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->knobs = *knobs;
    e->libctx = libctx;
    pthread_once(&atfork_once, register_atfork);
    e->fork_gen = gp_fork_generation();
    atomic_init(&e->max_inflight, 1);
    if (!gp_queue_init(&e->queue, &e->knobs)) {
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->open_lock, NULL);
    gp_hybrid_init(&e->hy);
    pthread_mutex_init(&e->pool.lock, NULL);
    pthread_mutex_init(&e->pool.submit, NULL);
    pthread_cond_init(&e->pool.wake, NULL);
    pthread_cond_init(&e->pool.done, NULL);
    return e;
}

/*
 * Executors open lazily, once per process. A child forked after its parent opened them (openssl
 * speed -multi forks after loading providers) decides again for itself; CUDA state does not survive
 * a fork, so a child of a parent that used the GPU never touches it.
 */
static void check_fork(gp_engine *e)
{
    unsigned now = gp_fork_generation();

    if (atomic_load(&e->fork_gen) == now)
        return;
    atomic_store(&e->fork_gen, now);
    atomic_store(&e->preferred, NULL);
    /* The host and cpu executors hold plain memory, which the child has; the GPU context is not. */
    if (e->opened[GP_EXEC_CUDA] != 0)
        e->opened[GP_EXEC_CUDA] = -1;
}

/* The polls below (a GPU being opened, a warm-up finishing) wait in 1 ms steps. */
static void sleep_1ms(void)
{
    struct timespec ms = { 0, 1000000 };

    nanosleep(&ms, NULL);
}

/*
 * One line to stderr in ONE write(2): glibc's fprintf to unbuffered stderr may split a long line
 * into several writes, and the workers of a server (nginx) share one error log, so their stats
 * lines interleaved mid-line. One write of under PIPE_BUF bytes lands whole in a pipe or an
 * O_APPEND file.
 */
void gp_log_line(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(buf)) {
        n = sizeof(buf) - 1;
        buf[n - 1] = '\n';
    }
    (void)!write(STDERR_FILENO, buf, (size_t)n);
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
    gp_queue_stop_dispatcher(e);   /* it may still be running a batch on the executors below */
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
        gp_hybrid_print(e);
        if (e->warm_started && atomic_load_explicit(&e->warm_done, memory_order_acquire)
            && e->warm_gen == gp_fork_generation() && e->warm_open_ns != 0)
            gp_log_line("gpuprov warm-up: open %.1f ms (thread cpu %.1f ms), measure %.1f ms (thread cpu"
                        " %.1f ms)\n", e->warm_open_ns / 1e6, e->warm_open_cpu_ns / 1e6,
                        e->warm_calib_ns / 1e6, e->warm_calib_cpu_ns / 1e6);
    }
    pthread_mutex_lock(&e->open_lock);
    if (e->warm_started && e->warm_gen == gp_fork_generation()) {
        pthread_mutex_unlock(&e->open_lock);
        /* The warm-up stops at its next step; a step inside the CUDA runtime cannot be cut short,
         * and at process exit the runtime's own teardown may never let it return. Wait a while,
         * then leave the engine to that thread (a leak at exit, not a hang). */
        atomic_store(&e->warm_stop, 1);
        for (int i = 0; i < 500 && !atomic_load(&e->warm_done); i++)
            sleep_1ms();
        if (!atomic_load(&e->warm_done)) {
            pthread_detach(e->warm_thread);
            return;
        }
        pthread_join(e->warm_thread, NULL);
    } else {
        pthread_mutex_unlock(&e->open_lock);
    }
    gp_host_pool_stop(&e->pool);
    pthread_mutex_lock(&e->open_lock);
    check_fork(e);
    pthread_mutex_unlock(&e->open_lock);
    for (int i = 0; i < GP_EXEC_COUNT; i++)
        if (executors[i] != NULL && e->opened[i] == 1)
            executors[i]->close(e);
    gp_queue_cleanup(&e->queue);
    gp_hybrid_cleanup(&e->hy);
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

/*
 * Heavy one-time work (creating a CUDA context, the hybrid calibration) may be first asked for
 * inside an ASYNC_JOB, whose stack is 32 KiB: run it on a thread of its own there and wait.
 */
typedef struct big_stack_call {
    int (*fn)(void *);
    void *arg;
    int ret;
} big_stack_call;

static void *big_stack_main(void *v)
{
    big_stack_call *c = v;

    c->ret = c->fn(c->arg);
    return NULL;
}

int gp_call_off_job_stack(int (*fn)(void *), void *arg)
{
    big_stack_call c = { fn, arg, 0 };
    pthread_t t;

    if (ASYNC_get_current_job() == NULL || pthread_create(&t, NULL, big_stack_main, &c) != 0)
        return fn(arg);
    pthread_join(t, NULL);
    return c.ret;
}

typedef struct open_call {
    gp_engine *e;
    const gp_executor *x;
} open_call;

static int open_main(void *v)
{
    open_call *o = v;

    return o->x->open(o->e);
}

/*
 * Open x once per process. The open itself (a CUDA context: 100+ ms) runs without open_lock held,
 * marked GP_OPENING: a fork meanwhile must not leave the child a lock held forever (the child then
 * sees GP_OPENING and, like any child of an opener, treats the GPU as unusable: check_fork).
 * Others asking meanwhile poll; a condition variable would not survive that fork either.
 */
#define GP_OPENING 2

int gp_engine_executor_usable(gp_engine *e, const gp_executor *x)
{
    int state;

    if (x == NULL)
        return 0;
    if (atomic_load_explicit(&e->usable_gen[x->id], memory_order_acquire) == gp_fork_generation() + 1)
        return 1;
    pthread_mutex_lock(&e->open_lock);
    check_fork(e);
    while (e->opened[x->id] == GP_OPENING) {
        pthread_mutex_unlock(&e->open_lock);
        sleep_1ms();
        pthread_mutex_lock(&e->open_lock);
        check_fork(e);
    }
    if (e->opened[x->id] == 0) {
        open_call o = { e, x };
        int ok;

        e->opened[x->id] = GP_OPENING;
        pthread_mutex_unlock(&e->open_lock);
        ok = gp_call_off_job_stack(open_main, &o);
        pthread_mutex_lock(&e->open_lock);
        e->opened[x->id] = ok ? 1 : -1;
    }
    state = e->opened[x->id];
    if (state == 1)
        atomic_store_explicit(&e->usable_gen[x->id], gp_fork_generation() + 1, memory_order_release);
    pthread_mutex_unlock(&e->open_lock);
    return state == 1;
}

/*
 * At exit, before the CUDA runtime's own teardown (registered before this, so run after it): let a
 * warm-up that is inside a CUDA call finish, for at most 15 s, so the runtime is never torn down
 * under a thread that is still in it.
 */
static void warmups_wait_at_exit(void)
{
    atomic_store(&warmups_exit, 1);
    /* Creating a context can take seconds when many processes do it at once (speed -multi 16). */
    for (int i = 0; i < 15000 && atomic_load(&warmups_running) > 0; i++)
        sleep_1ms();
}

/*
 * atexit handlers run last-registered first, and the CUDA runtime registers its teardown during its
 * first call. cuda_open makes that first call a cheap one (cudaGetDeviceCount) and calls this right
 * after it, before the slow context creation: registered now, the wait above runs before the
 * runtime's teardown, so a process that exits while a warm-up is inside cudaSetDevice waits for it
 * instead of tearing the driver down under it (glibc then aborted in libcuda: the -multi 16 crash
 * in bench/RESULTS.md).
 */
void gp_warm_runtime_loaded(void)
{
    if (atomic_load(&warmups_running) > 0)
        atexit(warmups_wait_at_exit);
}

static void register_warmups_atexit(void)
{
    atexit(warmups_wait_at_exit);   /* tied to this module by glibc (__dso_handle) */
}

int gp_warm_stopping(gp_engine *e)
{
    return atomic_load(&e->warm_stop) || atomic_load(&warmups_exit);
}

/*
 * Is every CPU this process may run on busy right now? /proc/loadavg's fourth field counts the
 * threads runnable at this instant (the caller among them). Opening the GPU costs ~0.4 s of CPU in
 * its own thread and more in the driver (sys time), and a byte through the cuda executor costs the
 * host more CPU than the default provider's own crypto (bench/RESULTS.md: ~0.8 against 0.1-0.3 CPU
 * seconds per GB): with no core free the GPU cannot add throughput, only take it. The 16 children
 * of `speed -multi 16 -async_jobs 8` each opened CUDA at once and ran at 0.79x of the default
 * provider, with 10 s of sys time on 16 cores. Anything unreadable counts as not busy.
 */
_Atomic int gp_test_cpus_saturated = -1;

static int cpus_saturated(void)
{
    const int t = atomic_load(&gp_test_cpus_saturated);
    unsigned run = 0, all = 0;
    double l1, l5, l15;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    FILE *f;
    int n;

    if (t >= 0)
        return t;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        cpus = CPU_COUNT(&set);
    if (cpus <= 1 || (f = fopen("/proc/loadavg", "r")) == NULL)
        return 0;
    n = fscanf(f, "%lf %lf %lf %u/%u", &l1, &l5, &l15, &run, &all);
    fclose(f);
    return n == 5 && run >= (unsigned)cpus;
}

/*
 * The warm-up looks at the CPUs this long after the demand that started it, and again as long as
 * every one is busy: `speed -multi` forks all its children at once, and the first to show demand
 * looked before its siblings ran. A warm-up waiting here opens nothing, and at exit or engine free
 * it stops within a millisecond.
 */
#define GP_WARM_LOOK_MS 200

/* 1 once some CPU is free; 0 if the warm-up is to stop first. */
static int wait_for_free_cpu(gp_engine *e)
{
    for (;;) {
        for (int i = 0; i < GP_WARM_LOOK_MS; i++) {
            if (gp_warm_stopping(e))
                return 0;
            sleep_1ms();
        }
        if (!cpus_saturated())
            return 1;
    }
}

/* This thread's CPU time (the warm-up's share of the process's CPU seconds per GB). */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *warmup_main(void *v)
{
    gp_engine *e = v;
    const gp_executor *gpu = executors[GP_EXEC_CUDA];

    /* gp_engine_free may have to leave this thread running (see there): keep our code mapped. */
    gp_async_pin_module();
    /* At normal priority. SCHED_IDLE (141bf6e, reverted) left the 16 children of `speed -multi 16
     * -async_jobs 8` waiting out the 15 s exit bound and then crashing (SIGABRT/SIGSEGV) in the CUDA
     * runtime's teardown on the H200 host: the openings no longer finished (bench/RESULTS.md). */
    uint64_t t0, c0, t1, c1;

    if (!wait_for_free_cpu(e)) {
        atomic_store_explicit(&e->warm_done, 1, memory_order_release);
        atomic_fetch_sub(&warmups_running, 1);
        return NULL;
    }
    t0 = gp_now_ns();
    c0 = thread_cpu_ns();
    if (!gp_warm_stopping(e) && gp_engine_executor_usable(e, gpu)) {
        t1 = gp_now_ns();
        c1 = thread_cpu_ns();
        e->warm_open_ns = t1 - t0;
        e->warm_open_cpu_ns = c1 - c0;
        if (!gp_warm_stopping(e) && gp_engine_executor_usable(e, &gp_exec_cpu))
            gp_hybrid_warm(e, gpu);
        e->warm_calib_ns = gp_now_ns() - t1;
        e->warm_calib_cpu_ns = thread_cpu_ns() - c1;
    }
    atomic_store_explicit(&e->warm_done, 1, memory_order_release);
    atomic_fetch_add_explicit(&e->route_epoch, 1, memory_order_release);
    atomic_fetch_sub(&warmups_running, 1);
    return NULL;
}

/*
 * Does this process show work the GPU could win (hybrid.c's rules)? A message started inside an
 * async job, or by a second thread. A single-threaded synchronous process (an nginx worker,
 * `openssl speed` without -async_jobs, each child of `speed -multi`) would route every message of
 * up to lone_gpu_bytes to the cpu executor anyway, so it never opens CUDA: the 16 children of
 * `speed -multi 16`, each creating a context and calibrating beside its benchmark, ran at half the
 * default provider's speed (bench/RESULTS.md). Large messages are the third sign (submit_one).
 */
static int gpu_demand(gp_engine *e)
{
    uintptr_t self = (uintptr_t)pthread_self(), seen;
    unsigned gen = gp_fork_generation();

    if (ASYNC_get_current_job() != NULL)
        return 1;
    if (atomic_load_explicit(&e->caller_gen, memory_order_relaxed) != gen + 1) {
        /* The first message of this process (a forked child finds its parent's value). */
        atomic_store_explicit(&e->first_caller, self, memory_order_relaxed);
        atomic_store_explicit(&e->caller_gen, gen + 1, memory_order_relaxed);
        return 0;
    }
    seen = atomic_load_explicit(&e->first_caller, memory_order_relaxed);
    return seen != self;
}


/*
 * backend=auto where the cuda executor is built: once this process shows demand, the GPU opens
 * (when some CPU is free to drive it, warmup_main) and the hybrid policy measures in a thread of its
 * own, once per process; until it is done every message goes to the cpu executor, so no caller ever waits
 * for it. Returns 1 once the warm-up is over; `start`: start it now if it has not started.
 */
static int warmed_up(gp_engine *e, int start)
{
    unsigned gen = gp_fork_generation();
    int done;

    if (atomic_load_explicit(&e->warm_done, memory_order_acquire) && e->warm_gen == gen)
        return 1;
    /* Started in this process and not done: no lock (every message start asks until then). */
    if (!start || atomic_load_explicit(&e->warm_started_gen, memory_order_acquire) == gen + 1)
        return 0;
    pthread_mutex_lock(&e->open_lock);
    check_fork(e);
    if (!e->warm_started || e->warm_gen != gen) {
        static pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

        pthread_once(&atexit_once, register_warmups_atexit);
        e->warm_started = 1;
        e->warm_gen = gen;
        atomic_store(&e->warm_done, 0);
        atomic_store_explicit(&e->warm_started_gen, gen + 1, memory_order_release);
        atomic_fetch_add(&warmups_running, 1);
        if (pthread_create(&e->warm_thread, NULL, warmup_main, e) != 0) {
            atomic_fetch_sub(&warmups_running, 1);
            e->warm_started = 0;
            atomic_store(&e->warm_done, 1);   /* no thread: open on the caller, as before */
        }
    }
    done = atomic_load(&e->warm_done);
    pthread_mutex_unlock(&e->open_lock);
    return done;
}

void gp_engine_executor_failed(gp_engine *e, const gp_executor *x)
{
    pthread_mutex_lock(&e->open_lock);
    e->opened[x->id] = -1;
    atomic_store_explicit(&e->usable_gen[x->id], 0, memory_order_release);
    atomic_fetch_add_explicit(&e->route_epoch, 1, memory_order_release);
    if (atomic_load(&e->preferred) == x)
        atomic_store(&e->preferred, NULL);
    pthread_mutex_unlock(&e->open_lock);
}

/*
 * Resolve the backend knob once, at the first message (lazily, so a forked child decides itself).
 * auto and hybrid: the hybrid policy between the GPU (cuda, or host as a stand-in for tests) and the
 * cpu executor where a GPU works; auto is plain cpu where none does.
 */
static const gp_executor *preferred_executor(gp_engine *e, int new_msg)
{
    const gp_executor *want, *got;
    gp_backend b = e->knobs.backend;
    int hybrid = 0;

    got = atomic_load_explicit(&e->preferred, memory_order_acquire);
    if (got != NULL && atomic_load_explicit(&e->fork_gen, memory_order_relaxed) == gp_fork_generation())
        return got;
    switch (b) {
    case GP_BACKEND_HOST:
        want = &gp_exec_host;
        break;
    case GP_BACKEND_AUTO:
        if (executors[GP_EXEC_CUDA] != NULL && !e->knobs.hybrid_gpu_host
            && !warmed_up(e, new_msg && gpu_demand(e)))
            /* Not remembered: asked again until the warm-up is over. */
            return gp_engine_executor_usable(e, &gp_exec_cpu) ? &gp_exec_cpu : &gp_exec_host;
        /* fall through */
    case GP_BACKEND_CUDA:
    case GP_BACKEND_HYBRID:
        want = b != GP_BACKEND_CUDA && e->knobs.hybrid_gpu_host ? &gp_exec_host : executors[GP_EXEC_CUDA];
        if (gp_engine_executor_usable(e, want)) {
            hybrid = b != GP_BACKEND_CUDA && gp_engine_executor_usable(e, &gp_exec_cpu);
            break;
        }
        if (b != GP_BACKEND_AUTO)
            fprintf(stderr, "gpuprov: backend=%s requested but no usable GPU%s; using the cpu "
                    "executor\n", b == GP_BACKEND_CUDA ? "cuda" : "hybrid",
                    executors[GP_EXEC_CUDA] == NULL ? " (built without nvcc)" : "");
        want = &gp_exec_cpu;
        break;
    case GP_BACKEND_CPU:
    default:
        want = &gp_exec_cpu;
        break;
    }
    got = want;
    if (!gp_engine_executor_usable(e, got)) {
        fprintf(stderr, "gpuprov: the %s executor is unusable here (no default provider reachable); "
                "using the host executor\n", got->name);
        got = &gp_exec_host;
    }
    /* Threads racing here compute the same answer; `hybrid` is visible before `preferred`. */
    atomic_store_explicit(&e->hybrid, hybrid, memory_order_relaxed);
    atomic_store_explicit(&e->preferred, got, memory_order_release);
    return got;
}

const gp_cpu_direct *gp_engine_cpu_lane(gp_engine *e, uint32_t alg, size_t keylen, uint64_t last_bytes)
{
    const gp_executor *x = preferred_executor(e, 1);

    if (atomic_load_explicit(&e->hybrid, memory_order_relaxed)) {
        /* Rule 1 of the hybrid policy holds for every caller: a context whose last message was
         * shorter than the GPU's threshold keeps its next one on the CPU too (TLS records). */
        if (!gp_hybrid_cpu_only(e, alg) && !(last_bytes < gp_hybrid_cpu_below(e, alg)))
            return NULL;
    } else if (x != &gp_exec_cpu) {
        return NULL;
    }
    return gp_cpu_direct_for(e, alg, keylen);
}

const _Atomic unsigned *gp_engine_route_epoch(gp_engine *e)
{
    return &e->route_epoch;
}

void gp_engine_note_large(gp_engine *e, size_t len)
{
    if (len >= GP_DEMAND_BYTES && e->knobs.backend == GP_BACKEND_AUTO && executors[GP_EXEC_CUDA] != NULL
        && !e->knobs.hybrid_gpu_host)
        (void)warmed_up(e, 1);   /* later messages this large may go to the GPU */
}

void gp_engine_count_lane(gp_engine *e, uint64_t calls, uint64_t bytes)
{
    if (calls == 0 || !e->knobs.stats)
        return;
    gp_stat_add(e, GP_ST_OPS, calls);
    gp_stat_add(e, GP_ST_BATCHES, calls);
    gp_stat_add(e, GP_ST_EXEC_OPS + GP_EXEC_CPU, calls);
    gp_stat_add(e, GP_ST_BYTES, bytes);
}

const char *gp_engine_backend_name(gp_engine *e)
{
    const char *name = preferred_executor(e, 0)->name;

    return atomic_load_explicit(&e->hybrid, memory_order_relaxed) ? "hybrid" : name;
}

/* ---- keys ---- */

static atomic_uint_fast64_t next_key_id = 1;

gp_key *gp_key_new(gp_engine *e, uint32_t alg, const uint8_t *key, size_t keylen)
{
    gp_key *k;

    if (keylen > sizeof(k->raw))
        return NULL;
    k = OPENSSL_secure_zalloc(sizeof(*k));
    if (k == NULL)
        return NULL;
    k->engine = e;
    k->id = atomic_fetch_add(&next_key_id, 1);
    k->alg = alg;
    k->keylen = keylen;
    memcpy(k->raw, key, keylen);
    return k;
}

const gp_key_sched *gp_key_sched_get(gp_key *k)
{
    if (!k->sched_ready) {
        gp_key_schedule(&k->sched, k->alg, k->raw, k->keylen);
        k->sched_ready = 1;
    }
    return &k->sched;
}

const gp_ghash_mma *gp_key_ghmma_get(gp_key *k)
{
    if (k->ghmma == NULL) {
        /* 512 columns and 64 bit transposes, ~10 us on a 2-core VM: once per key, and only for
         * keys whose long requests reach the GPU in large batches (build option ghash_mma). */
        gp_ghash_mma *t = OPENSSL_secure_malloc(sizeof(*t));

        if (t == NULL)
            return NULL;
        gp_ghash_mma_make(t, gp_key_sched_get(k)->gcm_h);
        k->ghmma = t;
    }
    return k->ghmma;
}

gp_key *gp_key_dup(const gp_key *k)
{
    gp_key *d = OPENSSL_secure_malloc(sizeof(*d));

    if (d == NULL)
        return NULL;
    memcpy(d, k, sizeof(*d));
    d->id = atomic_fetch_add(&next_key_id, 1);
    d->ecb = NULL;   /* the copy makes its own on first use */
    d->ghmma = NULL;
    memset(d->table_slot, 0, sizeof(d->table_slot));   /* the original's slots stay the original's */
    return d;
}

int gp_key_matches(const gp_key *k, const uint8_t *key, size_t keylen)
{
    return k != NULL && k->keylen == keylen && CRYPTO_memcmp(k->raw, key, keylen) == 0;
}

const uint8_t *gp_key_bytes(const gp_key *k)
{
    return k->raw;
}

void gp_key_free(gp_key *k)
{
    if (k == NULL)
        return;
    for (int i = 0; i < GP_EXEC_COUNT; i++)
        if (executors[i] != NULL && executors[i]->key_forget != NULL && k->engine != NULL)
            executors[i]->key_forget(k->engine, k);   /* the device's copy of the schedule */
    EVP_CIPHER_CTX_free(k->ecb);                    /* cleanses its key schedule */
    OPENSSL_secure_clear_free(k->ghmma, sizeof(*k->ghmma));   /* linear in H: secret */
    OPENSSL_secure_clear_free(k, sizeof(*k));       /* round keys, H and the raw key are secret */
}

/* ---- messages ---- */

gp_msg *gp_msg_new(gp_engine *e)
{
    gp_msg *m = OPENSSL_secure_zalloc(sizeof(*m));

    if (m != NULL)
        m->engine = e;
    return m;
}

gp_msg *gp_msg_dup(const gp_msg *m, gp_key *key_of_copy)
{
    gp_msg *d = gp_msg_new(m->engine);

    if (d == NULL)
        return NULL;
    d->exec = m->exec;
    d->routed = m->routed;
    d->aad_hold_len = m->aad_hold_len;
    memcpy(d->aad_hold, m->aad_hold, m->aad_hold_len);
    d->key = key_of_copy;
    d->enc = m->enc;
    d->ivlen = m->ivlen;
    memcpy(d->iv, m->iv, sizeof(d->iv));
    memcpy(&d->st, &m->st, sizeof(d->st));
    if (m->exec != NULL && m->exec->msg_copy != NULL && !m->exec->msg_copy(d, m)) {
        gp_msg_free(d);
        return NULL;
    }
    return d;
}

static void fold_cpu_calls(gp_msg *m);

void gp_msg_free(gp_msg *m)
{
    if (m == NULL)
        return;
    fold_cpu_calls(m);
    for (int i = 0; i < GP_EXEC_COUNT; i++)
        if (executors[i] != NULL && executors[i]->msg_clear != NULL)
            executors[i]->msg_clear(m);
    OPENSSL_secure_clear_free(m, sizeof(*m));   /* keystream, GHASH/Poly1305 state */
}

int gp_msg_start(gp_msg *m, gp_key *k, const uint8_t *iv, size_t ivlen, int enc)
{
    const gp_executor *x = preferred_executor(m->engine, 1);

    if (ivlen > sizeof(m->iv))
        return 0;
    fold_cpu_calls(m);
    m->key = k;
    m->enc = enc;
    m->ivlen = ivlen;
    memcpy(m->iv, iv, ivlen);
    m->aad_hold_len = 0;
    if (atomic_load_explicit(&m->engine->hybrid, memory_order_relaxed)) {
        if (!gp_hybrid_cpu_only(m->engine, k->alg)) {
            /* Routed at its first data request, when the size is known (hybrid.c). */
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
static int route_now(gp_msg *m, size_t len)
{
    gp_engine *e = m->engine;
    const gp_executor *x = preferred_executor(e, 1);

    if (atomic_load_explicit(&e->hybrid, memory_order_relaxed))
        x = gp_hybrid_route(e, x, m, len);
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
        return gp_queue_submit(e, r);
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

static int submit_one(gp_msg *m, gp_request *r)
{
    int status;

    if (!m->routed) {
        /* AAD comes before the data that decides the route (TLS: a 5 or 13-byte header): hold it. */
        if (hold_aad(m, r))
            return r->status;
        if (!route_now(m, route_len(r))) {
            count_error(m->engine);
            return r->status = GP_REQ_FAILED;
        }
    }
    if (m->exec == NULL || m->exec == &gp_exec_cpu) {
        if (r->len >= GP_DEMAND_BYTES && m->engine->knobs.backend == GP_BACKEND_AUTO
            && executors[GP_EXEC_CUDA] != NULL && !m->engine->knobs.hybrid_gpu_host)
            (void)warmed_up(m->engine, 1);   /* later messages this large may go to the GPU */
        return submit_routed(m, r);
    }
    if (hold_aad(m, r))
        return r->status;
    if ((r->kind == GP_REQ_TAG || r->kind == GP_REQ_VERIFY) && m->aad_hold_len == 0 && m->st.spec_valid)
        return answer_from_spec_tag(m, r);
    if (m->aad_hold_len > 0) {
        r->aad = m->aad_hold;
        r->aad_len = m->aad_hold_len;
    }
    status = submit_routed(m, r);
    m->aad_hold_len = 0;
    return status;
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

/* Add the message's cpu_call counts to the engine's stats. */
static void fold_cpu_calls(gp_msg *m)
{
    gp_engine_count_lane(m->engine, m->cpu_calls, m->cpu_bytes);
    m->cpu_calls = m->cpu_bytes = 0;
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

int gp_cmp_request_by_msg(const void *a, const void *b, void *reqs_v)
{
    const gp_request *reqs = reqs_v;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    uintptr_t mi = (uintptr_t)reqs[i].msg, mj = (uintptr_t)reqs[j].msg;

    if (mi != mj)
        return mi < mj ? -1 : 1;
    return i < j ? -1 : i > j;   /* keep submission order within a message */
}

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

/*
 * Run a batch on x. If x fails as a whole (a CUDA error), the requests it did not complete are
 * untouched (status still GP_REQ_FAILED, message state as before): their messages move to the host
 * executor, which shares the kernel state format, and those requests run there. Nothing is lost and
 * no answer is wrong; x takes no new messages in this process.
 */
static void run_on(gp_engine *e, const gp_executor *x, gp_request *reqs, size_t n)
{
    size_t redo = 0;

    if (x->run(e, reqs, n)) {
        account(e, x, reqs, n);
        return;
    }
    gp_engine_executor_failed(e, x);
    for (size_t i = 0; i < n; i++)
        reqs[i].msg->exec = &gp_exec_host;
    /* In submission order, which keeps each message's requests in order. */
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].status != GP_REQ_FAILED) {
            account(e, x, &reqs[i], 1);      /* finished on x before it failed */
            continue;
        }
        gp_exec_host.run(e, &reqs[i], 1);
        account(e, &gp_exec_host, &reqs[i], 1);
        redo++;
    }
    if (e->knobs.stats)
        gp_stat_add(e, GP_ST_FALLBACKS, redo);
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
    /* The common case: one executor serves the whole batch. */
    for (i = 1; i < n && reqs[i].msg->exec == reqs[0].msg->exec; i++)
        ;
    if (i == n) {
        run_on(e, reqs[0].msg->exec, reqs, n);
    } else {
        /* Mixed: run each executor's share in submission order, as its own sub-batch. */
        for (int x = 0; x < GP_EXEC_COUNT; x++)
            for (i = 0; i < n; i++)
                if (reqs[i].msg->exec == executors[x])
                    run_on(e, executors[x], &reqs[i], 1);
    }
    for (i = 0; i < n; i++)
        all_ok &= reqs[i].status == GP_REQ_OK;
    return all_ok;
}
