/* SPDX-License-Identifier: Apache-2.0 */
/* Async jobs' waits: the pause loop on the job's side and the wake-up on the completer's side. */
/* One eventfd per ASYNC_WAIT_CTX, or the application's wait-context callback. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "batching/async_wait.h"
#include "batching/base/base.h"

/*
 * The job's stack is 32 KiB and it runs on the application's thread: nothing here allocates more
 * than a few words on it, and no lock is held across ASYNC_pause_job. The wait context belongs to
 * the job's thread; the completer (the queue's dispatcher, or a synchronous caller that led the
 * batch) never touches it: it only writes the fd number or calls the callback the job copied out
 * before queueing.
 */

/* The key of gpuprov's fd in every wait context: this object's address is unique to the module
 * (and shared by all its provider instances, which is fine: a job waits for one request at a
 * time). */
static const char wait_fd_key = 'g';

int gp_async_in_job(void)
{
    return ASYNC_get_current_job() != NULL;
}

static void wait_fd_cleanup(ASYNC_WAIT_CTX *ctx, const void *key, OSSL_ASYNC_FD fd, void *custom)
{
    (void)ctx;
    (void)key;
    (void)custom;
    close(fd);
}

int gp_async_prepare(gp_async_notify *n)
{
    ASYNC_JOB *job = ASYNC_get_current_job();
    ASYNC_WAIT_CTX *w = job != NULL ? ASYNC_get_wait_ctx(job) : NULL;
    OSSL_ASYNC_FD fd;
    void *custom;

    n->fd = -1;
    n->cb = NULL;
    n->cb_arg = NULL;
    if (w == NULL)
        return 1;
    /* Callback mode, as libssl's SSL_set_async_callback sets it up: no fd; the status says the job
     * paused for a reason that will complete (ASYNC_WAIT_CTX_set_status(3)). */
    if (ASYNC_WAIT_CTX_get_callback(w, &n->cb, &n->cb_arg) && n->cb != NULL) {
        ASYNC_WAIT_CTX_set_status(w, ASYNC_STATUS_OK);
        return 1;
    }
    n->cb = NULL;
    n->cb_arg = NULL;
    if (ASYNC_WAIT_CTX_get_fd(w, &wait_fd_key, &fd, &custom)) {
        n->fd = fd;
        return 1;
    }
    /* First request of this wait context: one eventfd for its lifetime (openssl speed selects on
     * exactly one fd per job). Non-blocking, so that draining an fd with nothing in it is harmless;
     * close-on-exec, so that it does not leak into programs the application starts. */
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (!ASYNC_WAIT_CTX_set_wait_fd(w, &wait_fd_key, fd, NULL, wait_fd_cleanup)) {
        close(fd);
        return 0;
    }
    n->fd = fd;
    return 1;
}

int gp_async_wait(const gp_async_notify *n, atomic_int *done, unsigned fork_gen)
{
    while (!atomic_load_explicit(done, memory_order_acquire)) {
        /*
         * Resumed without our completion: the application resumes jobs on its own (SSL_read again,
         * a poll loop over every job), or pausing is blocked (ASYNC_block_pause) and returned at
         * once. Pause again; the fd is not drained here because in fd mode the completer writes it
         * just before publishing done, and a drained fd would never wake the job again.
         */
        if (gp_fork_generation() != fork_gen)
            return 0;
        if (!ASYNC_pause_job())
            sched_yield();   /* cannot switch: the dispatcher still completes the request */
        else if (!atomic_load_explicit(done, memory_order_acquire))
            sched_yield();
    }
    /* A copy of the job in a forked child, its result set before the fork: the fd is shared with
     * the parent's copy, whose wake-up a drain here would take. */
    if (gp_fork_generation() != fork_gen)
        return 0;
    /* Callback mode: the job may not finish while the application's callback for it still runs
     * (gp_async_complete): what the callback touches the application may free once the job is
     * done. The result is published just before the call, so this wait is the callback's length. */
    while (n->cb != NULL && atomic_load_explicit(done, memory_order_acquire) != GP_ASYNC_CALLBACK_RETURNED) {
        if (gp_fork_generation() != fork_gen)
            return 0;
        sched_yield();
    }
    if (n->fd >= 0) {
        uint64_t v;

        /* Reset the eventfd's counter, so the next pause of this wait context waits again. */
        while (read(n->fd, &v, sizeof(v)) < 0 && errno == EINTR)
            ;
    }
    return 1;
}

void gp_async_complete(const gp_async_notify *np, atomic_int *done)
{
    gp_async_notify n = *np;   /* np lives on the job's stack, which may unwind once done is set */
    uint64_t one = 1;

    if (n.cb != NULL) {
        /* A callback is an edge: once it has run, the application may resume the job and expects
         * to find the result, so publish first. The job then waits for the second store before it
         * finishes (gp_async_wait), so nothing the callback touches goes away under it. */
        atomic_store_explicit(done, 1, memory_order_release);
        n.cb(n.cb_arg);
        atomic_store_explicit(done, GP_ASYNC_CALLBACK_RETURNED, memory_order_release);
        return;
    }
    if (n.fd >= 0) {
        /* A readable fd is a level: write first, while the job (hence its wait context and fd)
         * certainly still exists; a job resumed between the write and the store pauses again
         * without draining, and the fd keeps it runnable. */
        while (write(n.fd, &one, sizeof(one)) < 0 && errno == EINTR)
            ;
    }
    atomic_store_explicit(done, 1, memory_order_release);
}

static void pin_once(void)
{
    Dl_info info;

    if (dladdr(&wait_fd_key, &info) && info.dli_fname != NULL)
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

void gp_async_pin_module(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, pin_once);
}
