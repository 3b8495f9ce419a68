/* SPDX-License-Identifier: Apache-2.0 */
/* Async jobs: how a request made inside an OpenSSL ASYNC_JOB waits (pause) and is woken (fd or callback). */
#ifndef GP_ASYNC_WAIT_H
#define GP_ASYNC_WAIT_H

#include <stdatomic.h>
#include <openssl/async.h>

/*
 * How the job that made a request is told that its batch completed. Filled by the job before it
 * queues the request (gp_async_prepare, on the job's own thread: the ASYNC_WAIT_CTX is only ever
 * touched there); the batch's leader copies it and wakes the job with gp_async_complete.
 *   cb != NULL : the application set a wait-context callback (OpenSSL >= 3.0): call it
 *   fd >= 0    : the wait context's gpuprov eventfd: write 1 to it
 *   neither    : the job has no wait context; the application resumes it when it likes
 */
typedef struct gp_async_notify {
    int fd;
    ASYNC_callback_fn cb;
    void *cb_arg;
} gp_async_notify;

/* Is the calling thread running inside an ASYNC_JOB? */
int gp_async_in_job(void);

/* Fill n for the current job: find the wait context's callback, or its gpuprov eventfd, creating
 * and registering that fd on first use. Returns 0 (n unusable) if the fd cannot be made. */
int gp_async_prepare(gp_async_notify *n);

/* The job's side: pause until *done is set (in callback mode, until it is
 * GP_ASYNC_CALLBACK_RETURNED), then drain the fd, and return 1. Spurious resumes pause again. Returns 0, with the fd left alone, once the process is not the one that queued the
 * request (gp_fork_generation() differs from fork_gen): a child of fork() resuming its copy of the
 * job, whose request only the parent runs (batching/queue.c, fork_child). */
int gp_async_wait(const gp_async_notify *n, atomic_int *done, unsigned fork_gen);

/* *done once a callback-mode completer's call of the application's callback has returned; until
 * then (*done == 1: the result is published) the job does not finish. */
#define GP_ASYNC_CALLBACK_RETURNED 2

/* The completer's side, for a request whose status is final: wake its job and publish *done.
 * Nothing is read from n or written to done after this returns; the job may have gone already.
 * Contract with the application: in callback mode, the job does not finish (its
 * ASYNC_start_job does not return ASYNC_FINISH) before the callback gpuprov called for it has
 * returned. */
void gp_async_complete(const gp_async_notify *n, atomic_int *done);

/* Keep this module mapped until the process exits: wait contexts hold our fd cleanup function and
 * may be freed after the provider is unloaded. Call from a normal thread (it uses the loader). */
void gp_async_pin_module(void);

#endif
