/* SPDX-License-Identifier: Apache-2.0 */
/* The bottom of batching/: the helpers every unit may call (base.h). */
/* Clock, online CPUs, log line, name matching, fork generation, stats shard index, off-stack calls,
 * the exit-time wait and the CPU's AVX flag. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/async.h>

#include "batching/base/base.h"

uint64_t gp_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gp_sleep_1ms(void)
{
    struct timespec ms = { 0, 1000000 };

    nanosleep(&ms, NULL);
}

long gp_online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    return n > 1 ? n : 1;
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

static atomic_uint fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Threads inside the exit guard in this process, and "the process is exiting". */
static atomic_int guarded_running, guarded_exit;

static void on_fork_child(void)
{
    atomic_fetch_add(&fork_generation, 1);
    atomic_store(&guarded_running, 0);   /* the parent's threads are not ours */
}

/* glibc unregisters the handler if the module is unloaded (it is tied to this DSO). */
static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

void gp_fork_watch(void)
{
    pthread_once(&atfork_once, register_atfork);
}

unsigned gp_fork_generation(void)
{
    return atomic_load_explicit(&fork_generation, memory_order_relaxed);
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

/*
 * At exit, before the CUDA runtime's own teardown (registered before this, so run after it): let a
 * guarded thread that is inside a CUDA call finish, for at most 15 s, so the runtime is never torn
 * down under a thread that is still in it.
 */
static void guarded_wait_at_exit(void)
{
    atomic_store(&guarded_exit, 1);
    /* Creating a context can take seconds when many processes do it at once (speed -multi 16). */
    for (int i = 0; i < 15000 && atomic_load(&guarded_running) > 0; i++)
        gp_sleep_1ms();
}

static void register_guard_atexit(void)
{
    atexit(guarded_wait_at_exit);   /* tied to this module by glibc (__dso_handle) */
}

void gp_exit_guard_enter(void)
{
    static pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

    pthread_once(&atexit_once, register_guard_atexit);
    atomic_fetch_add(&guarded_running, 1);
}

void gp_exit_guard_leave(void)
{
    atomic_fetch_sub(&guarded_running, 1);
}

/*
 * atexit handlers run last-registered first, and the CUDA runtime registers its teardown during its
 * first call. The cuda executor makes that first call a cheap one (cudaGetDeviceCount) and calls
 * this right after it, before the slow context creation: registered now, the wait above runs before
 * the runtime's teardown, so a process that exits while a warm-up is inside cudaSetDevice waits for
 * it instead of tearing the driver down under it (glibc then aborted in libcuda).
 */
void gp_exit_guard_runtime_loaded(void)
{
    if (atomic_load(&guarded_running) > 0)
        atexit(guarded_wait_at_exit);
}

int gp_process_exiting(void)
{
    return atomic_load(&guarded_exit);
}

int gp_cpu_has_avx;

/* Once, when the module is loaded, before any thread can read it. */
static void __attribute__((constructor)) detect_avx(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    gp_cpu_has_avx = __builtin_cpu_supports("avx");   /* libgcc checks XCR0 (OS support) too */
#endif
}

int gp_names_include(const char *names, const char *name, size_t n)
{
    for (const char *p = names; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ':');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);

        if (len == n) {
            size_t i = 0;

            for (; i < n; i++) {
                unsigned char a = (unsigned char)p[i], b = (unsigned char)name[i];

                if ((a >= 'A' && a <= 'Z' ? a + 32 : a) != (b >= 'A' && b <= 'Z' ? b + 32 : b))
                    break;
            }
            if (i == n)
                return 1;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return 0;
}
