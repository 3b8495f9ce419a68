/* SPDX-License-Identifier: Apache-2.0 */
/* The bottom of batching/: helpers every unit may call; it calls nothing else in batching/. */
/* The clock, the online CPUs, the log line, algorithm-name matching, the fork generation, the stats
 * shard index, calls off an async job's stack and the exit-time wait. */
#ifndef GP_BASE_H
#define GP_BASE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Executors counted by the stats (batching/executor.h: GP_EXEC_COUNT, checked there). */
#define GP_ST_EXECUTORS 3

/* Kept out of line (each use says why: a frame, registers or stack kept off a hot caller). */
#define GP_NOINLINE __attribute__((noinline))

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t gp_now_ns(void);
/* Sleep one millisecond (the polls for a GPU being opened or a warm-up finishing). */
void gp_sleep_1ms(void);
/* The CPUs online (sysconf(_SC_NPROCESSORS_ONLN)); at least 1, also where the system cannot say. */
long gp_online_cpus(void);

/* printf-style, one line to stderr in a single write (whole even when processes share the fd). */
void gp_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Are the n bytes at `name` one of the ':'-separated names in `names`? ASCII case-insensitive, as
 * OpenSSL matches algorithm names (and independent of the locale). */
int gp_names_include(const char *names, const char *name, size_t n);

/* Bumped in every child right after fork (pthread_atfork): a cheap "are we still the process that
 * opened things?" test, where getpid() would be a system call on every message. The handler is
 * registered by gp_fork_watch, which every engine calls when it is made. */
unsigned gp_fork_generation(void);
void gp_fork_watch(void);

/*
 * Stats counters (knob stats=1), sharded by thread: threads adding into one set of counters would
 * bounce its cache lines between cores at every request. A thread adds into its own shard (picked
 * from its pthread_t; threads may share one); reading sums the shards.
 */
enum gp_stat {
    GP_ST_OPS, GP_ST_BYTES,
    GP_ST_EXEC_OPS,                       /* + gp_exec_id (batching/executor.h) */
    GP_ST_BATCHES = GP_ST_EXEC_OPS + GP_ST_EXECUTORS, GP_ST_FALLBACKS, GP_ST_ERRORS, GP_ST_ASYNC_OPS,
    GP_ST_ROUTED_GPU, GP_ST_ROUTED_CPU, GP_ST_SPEC_TAGS, GP_ST_STAGED,
    GP_ST_NOTIFY_NS,                      /* waking async jobs, summed over batches (batching/queue.c) */
    /* Where an async job's round trip goes (batching/queue.c), summed over the batches holding jobs: */
    GP_ST_ASYNC_BATCHES,
    GP_ST_GATHER_NS,                      /* first request joined -> flushed */
    GP_ST_FLUSH_JOBS,                     /* jobs in the batch */
    GP_ST_FLUSH_RUNNING,                  /* jobs in batches already running when it flushed */
    GP_ST_FLUSH_OUT,                      /* jobs with the application when it flushed (queued,
                                           * not yet taken their result, in no batch) */
    GP_ST_FLUSH_SIZE, GP_ST_FLUSH_SHARE, GP_ST_FLUSH_TIMER,   /* which rule flushed it */
    GP_ST_RESUME_NS,                      /* a job's result ready -> the job running again, per job */
    GP_ST_COUNT
};

typedef struct gp_stat_shard {
    _Alignas(64) atomic_uint_fast64_t v[GP_ST_COUNT];
} gp_stat_shard;

#define GP_STAT_SHARDS 64
/* The calling thread's shard index, in [0, GP_STAT_SHARDS). */
unsigned gp_stat_shard_index(void);

/* Add n to counter s of a set of GP_STAT_SHARDS shards (the calling thread's shard). */
static inline void gp_stat_add_to(gp_stat_shard *shards, enum gp_stat s, uint64_t n)
{
    atomic_fetch_add_explicit(&shards[gp_stat_shard_index()].v[s], n, memory_order_relaxed);
}

/* fn(arg), on a thread of its own when called inside an ASYNC_JOB (32 KiB stack). */
int gp_call_off_job_stack(int (*fn)(void *), void *arg);

/*
 * Threads that may be inside the CUDA runtime while the process exits (the GPU's warm-up,
 * batching/policy/warm.c): the exit-time wait lets them leave the runtime before its own teardown.
 * gp_exit_guard_enter before such a thread starts, gp_exit_guard_leave when it ends (a forked child
 * starts with none); gp_exit_guard_runtime_loaded right after the runtime's first call (which
 * registers its teardown); gp_process_exiting: the wait has begun, such threads stop at their next
 * step.
 */
void gp_exit_guard_enter(void);
void gp_exit_guard_leave(void);
void gp_exit_guard_runtime_loaded(void);
int gp_process_exiting(void);

/*
 * Called after the default provider's code returns. OpenSSL 3.0's x86-64 ChaCha20-Poly1305 returns
 * with the upper halves of the YMM registers in use (XGETBV(1) bit 2 stays set after a 16-byte
 * update; AES-GCM's code clears them). Intel cores then make every legacy-SSE instruction that runs
 * next (the compiler's paddq for two counters, say) pay a state transition, and the provider's AVX
 * code the way back, which every short ChaCha20-Poly1305 update on the cpu lane would pay.
 * VZEROUPPER returns the state to clean, as Intel's optimization manual asks of code that leaves
 * AVX; it costs about a cycle. Right after a call every vector register is clobbered anyway, so
 * the clobber list costs nothing.
 */
extern int gp_cpu_has_avx;   /* batching/base/base.c, at load: the CPU and the OS enable AVX */
static inline void gp_cpu_clean_upper_state(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (gp_cpu_has_avx)
        __asm__ volatile("vzeroupper" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                         "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#endif
}

#endif
