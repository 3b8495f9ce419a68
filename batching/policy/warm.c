/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU's warm-up (backend=auto): a thread of its own opens the GPU and measures the policy. */
/* It starts once the process shows demand and opens when some CPU is free; the hybrid policy
 * (hybrid.c) measures in it, so no caller waits for either. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/async.h>

#include "batching/base/base.h"
#include "batching/policy/internal.h"

/*
 * Is every CPU this process may run on busy? Opening the GPU costs CPU time in its own thread and
 * in the driver, and a byte through the cuda executor costs the host more CPU than the default
 * provider's own crypto (bench/RESULTS.md, "CPU seconds per GB, one process"): with no core free
 * the GPU cannot add throughput, only take it (`speed -multi` with one child per core is that case).
 * Anything unreadable counts as not busy.
 *
 * Two readings, because either alone lets a busy machine look free:
 * - runnable_now: /proc/loadavg's fourth field, the threads runnable at this instant (the caller
 *   among them). An instant can fall between siblings: `speed -multi` forks its children one after
 *   another, and the first to show demand looks before the last runs.
 * - busy_over_window: /proc/stat's idle and iowait time of this process's CPUs since the previous
 *   look. Fewer than half a CPU idle over a look's interval is busy, whatever the instant says.
 */
#if GP_TEST_HOOKS
_Atomic int gp_test_cpus_saturated = -1;
#endif

/* The CPUs this process may run on (at least 1). */
static long allowed_cpus(cpu_set_t *set)
{
    if (sched_getaffinity(0, sizeof(*set), set) == 0 && CPU_COUNT(set) > 0)
        return CPU_COUNT(set);
    CPU_ZERO(set);
    for (long i = 0, n = gp_online_cpus(); i < n && i < CPU_SETSIZE; i++)
        CPU_SET((int)i, set);
    return CPU_COUNT(set) > 0 ? CPU_COUNT(set) : 1;
}

/* 1 if at least `cpus` threads are runnable at this instant. */
static int runnable_now(long cpus)
{
    unsigned run = 0, all = 0;
    double l1, l5, l15;
    FILE *f = fopen("/proc/loadavg", "r");
    int n;

    if (f == NULL)
        return 0;
    n = fscanf(f, "%lf %lf %lf %u/%u", &l1, &l5, &l15, &run, &all);
    fclose(f);
    return n == 5 && run >= (unsigned)cpus;
}

int gp_cpu_ticks_read(FILE *f, const cpu_set_t *set, uint64_t *idle, uint64_t *all)
{
    char line[512];
    int found = 0;

    *idle = *all = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long v[8] = { 0 };
        int cpu;

        if (strncmp(line, "cpu", 3) != 0)
            break;   /* the cpu lines come first */
        if (line[3] < '0' || line[3] > '9')
            continue;   /* "cpu " sums every CPU */
        if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]) < 6 || cpu < 0 || cpu >= CPU_SETSIZE
            || !CPU_ISSET(cpu, set))
            continue;
        *idle += v[3] + v[4];
        for (int i = 0; i < 8; i++)
            *all += v[i];
        found = 1;
    }
    return found;
}

static int cpu_ticks(const cpu_set_t *set, uint64_t *idle, uint64_t *all)
{
    FILE *f = fopen("/proc/stat", "r");
    int found;

    *idle = *all = 0;
    if (f == NULL)
        return 0;
    found = gp_cpu_ticks_read(f, set, idle, all);
    fclose(f);
    return found;
}

/* Busy over the interval since the previous call (which `w` remembers): fewer than half of one
 * CPU's ticks idle among `cpus` CPUs. The first call only remembers (not busy). */
static int busy_over_window(gp_warm *w, const cpu_set_t *set, long cpus)
{
    uint64_t idle, all;
    int busy = 0;

    if (!cpu_ticks(set, &idle, &all))
        return 0;
    /* iowait may run backwards (proc(5)): a window whose idle shrank says nothing. */
    if (w->ticks_all != 0 && all > w->ticks_all && idle >= w->ticks_idle)
        busy = 2 * (uint64_t)cpus * (idle - w->ticks_idle) < all - w->ticks_all;
    w->ticks_idle = idle;
    w->ticks_all = all;
    return busy;
}

static int cpus_saturated(gp_policy *p)
{
    cpu_set_t set;
    long cpus;

#if GP_TEST_HOOKS
    const int t = atomic_load(&gp_test_cpus_saturated);

    if (t >= 0)
        return t;
    if (p->knobs->test.cpus_free)
        return 0;
#endif
    cpus = allowed_cpus(&set);
    if (cpus <= 1)
        return 0;
    /* Both readings every time (the window's start moves at every look). */
    return busy_over_window(&p->warm, &set, cpus) | runnable_now(cpus);
}

/*
 * The warm-up looks at the CPUs this long after the demand that started it, and again as long as
 * every one is busy: `speed -multi` forks all its children at once, and the first to show demand
 * looked before its siblings ran. A warm-up waiting here opens nothing, and at exit or engine free
 * it stops within a millisecond.
 */
#define GP_WARM_LOOK_MS 200
/* A caller waiting for the warm-up (a first large message) has the CPUs looked at sooner: every
 * millisecond for this long, busy if any look says so (the siblings forked after it have started by
 * then; the caller waits this long at most, once per process). */
#define GP_WARM_SETTLE_MS 10

/* Is there room to open the GPU now: some CPU free to drive it, and room on the GPU beside this
 * user's other processes (share.c: fewer than knob machine_share hold it open, and they do not hold
 * it full)? A process whose siblings fill the GPU keeps its work on its cores and opens nothing. */
static int room_to_open(gp_policy *p)
{
    return !cpus_saturated(p) && gp_share_may_open(p);
}

/* The urgent look (a caller waits): GP_WARM_SETTLE_MS looks a millisecond apart, then the room. */
static int room_to_open_soon(gp_policy *p)
{
    for (int i = 0; i < GP_WARM_SETTLE_MS; i++) {
        if (gp_warm_stopping(p) || cpus_saturated(p))
            return 0;
        gp_sleep_1ms();
    }
    return room_to_open(p);
}

/* 1 once some CPU is free and the GPU has room (room_to_open); 0 if the warm-up is to stop first. A caller waiting for the warm-up
 * (warm_urgent) has the CPUs looked at within GP_WARM_SETTLE_MS: its first look needs no siblings to start. */
static int wait_for_free_cpu(gp_policy *p)
{
    int urgent_looked = 0;

    (void)cpus_saturated(p);   /* the first window starts with the demand */
    for (;;) {
        for (int i = 0; i < GP_WARM_LOOK_MS; i++) {
            if (gp_warm_stopping(p))
                return 0;
            if (!urgent_looked && atomic_load(&p->warm.urgent)) {
                urgent_looked = 1;
                if (room_to_open_soon(p))
                    return 1;
                atomic_store(&p->warm.opening, -1);
            }
            gp_sleep_1ms();
        }
        if (room_to_open(p))
            return 1;
        atomic_store(&p->warm.opening, -1);
    }
}

const gp_executor *gp_warm_gpu(gp_policy *p)
{
    return p->knobs->hybrid_gpu_host ? p->ops->host : p->ops->cuda;
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
    gp_policy *p = v;
    gp_warm *w = &p->warm;
    const gp_executor *gpu = gp_warm_gpu(p);

    /* gp_warm_finish may have to leave this thread running: keep our code mapped. */
    p->ops->pin_module();
    /* At normal priority: at SCHED_IDLE, on busy cores, the opening never finished, and processes
     * that exited waited out the exit bound (batching/base/base.c) and then crashed in the CUDA
     * runtime's teardown. */
    uint64_t t0, c0, t1, c1;

    if (!wait_for_free_cpu(p)) {
        atomic_store_explicit(&w->done, 1, memory_order_release);
        gp_exit_guard_leave();
        return NULL;
    }
    atomic_store(&w->opening, 1);
    t0 = gp_now_ns();
    c0 = thread_cpu_ns();
    if (!gp_warm_stopping(p) && p->ops->usable(p->e, gpu)) {
        t1 = gp_now_ns();
        c1 = thread_cpu_ns();
        w->open_ns = t1 - t0;
        w->open_cpu_ns = c1 - c0;
        if (!gp_warm_stopping(p) && p->ops->usable(p->e, p->ops->cpu))
            gp_hybrid_warm(p, gpu);
        w->calib_ns = gp_now_ns() - t1;
        w->calib_cpu_ns = thread_cpu_ns() - c1;
    } else {
        gp_share_not_open(p);   /* another process may open in its place */
    }
    atomic_store_explicit(&w->done, 1, memory_order_release);
    p->ops->route_changed(p->e);
    gp_exit_guard_leave();
    return NULL;
}

/*
 * Does this process show work the GPU could win (hybrid.c's rules)? A message started inside an
 * async job, or by a second thread (the engine then asks gp_warm_worth_opening for its algorithm). A single-threaded synchronous process (an nginx worker,
 * `openssl speed` without -async_jobs, each child of `speed -multi`) would route every message of
 * up to lone_gpu_bytes to the cpu executor anyway, so it never opens CUDA: creating a context and
 * calibrating beside the work would only take CPU from it. Large messages are the third sign
 * (batching/engine.c, submit_one and gp_engine_note_large).
 */
int gp_warm_demand(gp_policy *p)
{
    gp_warm *w = &p->warm;
    uintptr_t self = (uintptr_t)pthread_self(), seen;
    unsigned gen = gp_fork_generation();

    if (ASYNC_get_current_job() != NULL)
        return 1;
    if (atomic_load_explicit(&w->caller_gen, memory_order_relaxed) != gen + 1) {
        /* The first message of this process (a forked child finds its parent's value). */
        atomic_store_explicit(&w->first_caller, self, memory_order_relaxed);
        atomic_store_explicit(&w->caller_gen, gen + 1, memory_order_relaxed);
        return 0;
    }
    seen = atomic_load_explicit(&w->first_caller, memory_order_relaxed);
    if (seen == self)
        return 0;
    atomic_store_explicit(&w->other_caller_gen, gen + 1, memory_order_relaxed);
    return 1;
}

/*
 * Opening the GPU costs a process 290-370 ms of thread CPU in the driver (cuInit and the primary
 * context, bench/RESULTS.md "The default configuration at 1 and 16 MiB") and holds a context on
 * the GPU for the process's life. Where the numbers the policy will route by are already known
 * (an earlier process's measurement on this machine, or the knobs), a process whose work they keep
 * on the CPU gains nothing from it: its messages would run on the cpu executor after the opening
 * as before it. Without numbers the opening is how they are measured, once per machine.
 */
int gp_warm_worth_opening(gp_policy *p, uint32_t alg, size_t len, int lone)
{
    gp_warm *w = &p->warm;
    const gp_executor *gpu = gp_warm_gpu(p);
    const unsigned gen1 = gp_fork_generation() + 1;
    size_t had;

    if (gpu == NULL || alg == 0 || alg >= 5)
        return 1;
    if (atomic_load_explicit(&w->cpu_only_gen[alg], memory_order_relaxed) != gen1) {
        if (!gp_hybrid_known(p, gpu, alg))
            return 1;
        if (!gp_hybrid_prior(p, gpu, alg, GP_LEN_UNKNOWN, 0))   /* no size, no caller goes */
            atomic_store_explicit(&w->cpu_only_gen[alg], gen1, memory_order_relaxed);
        else if (len == GP_LEN_UNKNOWN || gp_hybrid_prior(p, gpu, alg, len, lone))
            return 1;
    }
    /* Kept on the CPU: remembered for the stats line (the largest; racing writers may mix two
     * messages' fields, which only the line reads). */
    if (atomic_exchange_explicit(&w->kept_gen, gen1, memory_order_relaxed) != gen1)
        atomic_store_explicit(&w->kept_len, 0, memory_order_relaxed);
    had = atomic_load_explicit(&w->kept_len, memory_order_relaxed);
    if (had == 0 || (had != GP_LEN_UNKNOWN && len > had)) {
        atomic_store_explicit(&w->kept_alg, alg, memory_order_relaxed);
        atomic_store_explicit(&w->kept_len, len, memory_order_relaxed);
        atomic_store_explicit(&w->kept_lone, lone, memory_order_relaxed);
    }
    return 0;
}

/*
 * backend=auto where the cuda executor is built: once this process shows demand, the GPU opens
 * (when some CPU is free to drive it, warmup_main) and the hybrid policy measures in a thread of its
 * own, once per process; until it is done every message goes to the cpu executor, so no caller ever waits
 * for it. Returns 1 once the warm-up is over; `start`: start it now if it has not started.
 */
int gp_warm_start(gp_policy *p, int start)
{
    gp_warm *w = &p->warm;
    unsigned gen = gp_fork_generation();
    int done;

    if (atomic_load_explicit(&w->done, memory_order_acquire) && w->gen == gen)
        return 1;
    /* Started in this process and not done: no lock (every message start asks until then). */
    if (!start || atomic_load_explicit(&w->started_gen, memory_order_acquire) == gen + 1)
        return 0;
    pthread_mutex_lock(&w->lock);
    if (!w->started || w->gen != gen) {
        w->started = 1;
        w->gen = gen;
        atomic_store(&w->done, 0);
        atomic_store(&w->opening, 0);
        w->ticks_idle = w->ticks_all = 0;   /* a forked child's window is its own */
        atomic_store_explicit(&w->started_gen, gen + 1, memory_order_release);
        gp_exit_guard_enter();
        if (pthread_create(&w->thread, NULL, warmup_main, p) != 0) {
            gp_exit_guard_leave();
            w->started = 0;
            atomic_store(&w->done, 1);   /* no thread: open on the caller, as before */
        }
    }
    done = atomic_load(&w->done);
    pthread_mutex_unlock(&w->lock);
    return done;
}

void gp_warm_urge(gp_policy *p)
{
    atomic_store(&p->warm.urgent, 1);
}

/*
 * How long a large first request may wait for the warm-up: several times what opening a CUDA
 * context and measuring take on the GPU hosts (docs/performance.md, "How to measure"; the stats'
 * `gpuprov warm-up:` line). A warm-up that has not ended by then has met something slower (a
 * busy driver), and the message runs on the CPU instead.
 */
#define GP_WARM_WAIT_MS 3000

int gp_warm_wait(gp_policy *p)
{
    gp_warm *w = &p->warm;
    unsigned gen = gp_fork_generation();

    /* One wait that ran out is enough: later messages do not wait for the same slow warm-up. */
    if (atomic_load_explicit(&w->wait_expired_gen, memory_order_relaxed) == gen + 1)
        return atomic_load_explicit(&w->done, memory_order_acquire) && w->gen == gen;
    for (int i = 0; i < GP_WARM_WAIT_MS; i++) {
        if (atomic_load_explicit(&w->done, memory_order_acquire) && w->gen == gen)
            return 1;
        /* Every CPU was busy at its last look, or the GPU had no room (room_to_open): the GPU
         * cannot add throughput to this process now, and the warm-up may wait indefinitely. */
        if (gp_warm_stopping(p) || atomic_load(&w->opening) < 0)
            return 0;
        gp_sleep_1ms();
    }
    atomic_store_explicit(&w->wait_expired_gen, gen + 1, memory_order_relaxed);
    return 0;
}

int gp_warm_lone_caller(gp_policy *p)
{
    if (ASYNC_get_current_job() != NULL)
        return 0;
    return atomic_load_explicit(&p->warm.other_caller_gen, memory_order_relaxed) != gp_fork_generation() + 1;
}

int gp_warm_finish(gp_policy *p)
{
    gp_warm *w = &p->warm;

    pthread_mutex_lock(&w->lock);
    if (w->started && w->gen == gp_fork_generation()) {
        pthread_mutex_unlock(&w->lock);
        /* The warm-up stops at its next step; a step inside the CUDA runtime cannot be cut short,
         * and at process exit the runtime's own teardown may never let it return. Wait a while,
         * then leave the engine to that thread (a leak at exit, not a hang). */
        atomic_store(&w->stop, 1);
        for (int i = 0; i < 500 && !atomic_load(&w->done); i++)
            gp_sleep_1ms();
        if (!atomic_load(&w->done)) {
            pthread_detach(w->thread);
            return 0;
        }
        pthread_join(w->thread, NULL);
    } else {
        pthread_mutex_unlock(&w->lock);
    }
    return 1;
}

void gp_warm_print(gp_policy *p)
{
    static const char *const alg_names[5] = { "?", "aes-ctr", "aes-gcm", "chacha20", "chacha20-poly1305" };
    gp_warm *w = &p->warm;
    const unsigned gen = gp_fork_generation();
    const uint32_t alg = atomic_load_explicit(&w->kept_alg, memory_order_relaxed);
    const size_t len = atomic_load_explicit(&w->kept_len, memory_order_relaxed);
    char size[48];

    if (atomic_load_explicit(&w->started_gen, memory_order_acquire) == gen + 1) {
        if (atomic_load_explicit(&w->done, memory_order_acquire) && w->gen == gen && w->open_ns != 0)
            gp_log_line("gpuprov warm-up: open %.1f ms (thread cpu %.1f ms), measure %.1f ms (thread cpu"
                        " %.1f ms)\n", w->open_ns / 1e6, w->open_cpu_ns / 1e6,
                        w->calib_ns / 1e6, w->calib_cpu_ns / 1e6);
        return;
    }
    if (atomic_load_explicit(&w->kept_gen, memory_order_relaxed) != gen + 1)
        return;
    if (len == GP_LEN_UNKNOWN)
        snprintf(size, sizeof(size), "of any size");
    else
        snprintf(size, sizeof(size), "of %zu B", len);
    gp_log_line("gpuprov warm-up: gpu not opened: the calibration keeps every message shown on the cpu"
                " (the largest: %s %s, %s caller)\n", alg_names[alg < 5 ? alg : 0], size,
                atomic_load_explicit(&w->kept_lone, memory_order_relaxed) ? "a lone" : "not a lone");
}
