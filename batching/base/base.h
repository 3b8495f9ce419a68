/* SPDX-License-Identifier: Apache-2.0 */
/* The bottom of batching/: the clock, the log line, the fork generation, the stats shard index,
 * calls off an async job's stack, the dispatcher-thread mark and the exit-time wait. Calls nothing
 * else in batching/. */
#ifndef GP_BASE_H
#define GP_BASE_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t gp_now_ns(void);
/* Sleep one millisecond (the polls for a GPU being opened or a warm-up finishing). */
void gp_sleep_1ms(void);

/* printf-style, one line to stderr in a single write (whole even when processes share the fd). */
void gp_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Bumped in every child right after fork (pthread_atfork): a cheap "are we still the process that
 * opened things?" test, where getpid() would be a system call on every message. The handler is
 * registered by gp_fork_watch, which every engine calls when it is made. */
unsigned gp_fork_generation(void);
void gp_fork_watch(void);

/* Stats counters are sharded by thread (batching/core/core.h, gp_stat_add): the calling thread's
 * shard index, in [0, GP_STAT_SHARDS). */
#define GP_STAT_SHARDS 64
unsigned gp_stat_shard_index(void);

/* fn(arg), on a thread of its own when called inside an ASYNC_JOB (32 KiB stack). */
int gp_call_off_job_stack(int (*fn)(void *), void *arg);

/* The queue's dispatcher threads mark themselves; the cuda executor asks whether the calling thread
 * is one (it runs the batches of async jobs). */
void gp_thread_mark_dispatcher(void);
int gp_thread_is_dispatcher(void);

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

#endif
