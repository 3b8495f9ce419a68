/* SPDX-License-Identifier: Apache-2.0 */
/* The process-wide queue (queue.c): requests gathered into batches, run as its owner says. */
/* Each batch runs through the function the queue was given at init; it calls nothing above it. */
#ifndef GP_QUEUE_H
#define GP_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "batching/async_wait.h"
#include "batching/base/base.h"
#include "batching/request.h"
#include "batching/settings.h"
#include "batching/stage.h"

/*
 * What the queue's owner (the engine) gives it at init. The queue calls nothing above it: it runs
 * a batch, and asks for an executor's per-request work, through these.
 */
typedef struct gp_queue_owner {
    void *ctx;                   /* the first argument of each function below */
    /* Run a batch: set every request's status (the engine's gp_engine_submit). */
    int (*run)(void *ctx, gp_request *reqs, size_t n);
    /* The executor's per-request work on the submitter's own thread (gp_executor.prepare). */
    void (*prepare)(void *ctx, gp_request *r);
    /* Where an async job stages this data request's bytes; NULL: nowhere (gp_executor.stage_pool). */
    gp_stage_pool *(*stage_pool)(void *ctx, const gp_request *r);
    const gp_knobs *knobs;
    const _Atomic int *max_inflight;   /* batches the executor lets run at once */
    gp_stat_shard *stats;        /* knob stats' counters */
    /* Locks that fork takes around the queue's own (the host executor's pool: `fork_outer` is taken
     * without the queue's lock held and then wants it; `fork_inner` is taken under it), and their
     * re-creation in the child, after the queue's. */
    pthread_mutex_t *fork_outer, *fork_inner;
    void (*fork_child)(void *ctx);
} gp_queue_owner;

/* The process-wide queue (queue.c): entries live on their submitters' stacks (a synchronous caller's,
 * or a paused async job's) while they wait. */
typedef struct gp_queue_entry {
    gp_request *req;
    atomic_int done;             /* set by the batch's leader once req->status is final; after that
                                  * the leader touches neither the entry nor its request */
    const gp_async_notify *notify;   /* NULL: a synchronous caller waiting in gp_queue_submit; else
                                      * an async job, woken through this */
    uint64_t done_ns;            /* knob stats, async: when the leader woke the job */
    struct gp_queue_entry *next_in;   /* async: the next older entry in the queue's inbox */
} gp_queue_entry;

#define GP_MAX_DISPATCHERS 8

typedef struct gp_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;         /* a batch completed, or the pending batch may now flush */
    gp_queue_entry **pending;    /* the batch being gathered */
    size_t npending, cap;
    _Atomic size_t pending_bytes;
    uint64_t first_ns;           /* when its first request arrived (CLOCK_MONOTONIC) */
    uint64_t generation;         /* bumped when a leader takes the pending batch */
    /* Changed under `lock`; atomic so that the hybrid policy may read them without it. */
    _Atomic int active;          /* synchronous submitters inside gp_queue_submit */
    _Atomic int inflight;        /* batches being run by their leaders */
    /* Async jobs (their entries flush through the dispatcher threads; a job never leads). */
    size_t npending_async;       /* async entries in the pending batch */
    /* Synchronous device-mode callers (queue.c, "Device mode"): their entries in the pending batch,
     * and how many of those in the last such batches are still to come back, until when. */
    size_t npending_devmem;
    size_t sync_returning;
    uint64_t returning_until;
    size_t async_inflight;       /* async entries in batches being run */
    size_t sync_inflight;        /* synchronous entries in batches being run */
    uint64_t last_add_ns;        /* when a request last joined the pending batch */
    uint64_t last_done_ns;       /* when a batch last completed */
    _Atomic uint64_t events;     /* bumped per append (or drain) and per completed batch: the
                                  * dispatcher spins on it (and on the inbox) without the lock */
    pthread_cond_t dispatch_cond;   /* wakes a dispatcher: async entry added, batch done, stop */
    pthread_t dispatchers[GP_MAX_DISPATCHERS];   /* one per batch the executor overlaps */
    int ndispatchers;
    /*
     * What every async request touches without the lock, each on a cache line of its own, away
     * from what the dispatchers write under it (the pending batch, the clocks, `events`): sharing a
     * line with what the dispatchers write, every push and every count bounced that line between
     * the application's cores and the dispatcher's.
     *
     * Async jobs queue without the lock: they push their entry here (newest first), and whoever
     * holds the lock moves the inbox into the pending batch (queue.c, drain_inbox).
     */
    _Alignas(64) _Atomic(struct gp_queue_entry *) inbox;
    _Alignas(64) _Atomic size_t async_waiting;   /* async entries queued whose jobs have not yet
                                                  * taken the result: when all of them are pending,
                                                  * no job could add another (taken off without the
                                                  * lock) */
    /* Who looks at the inbox: the watcher (one dispatcher at a time, spinning or deciding, which
     * checks the inbox before it leads or blocks), or else a dispatcher blocked on dispatch_cond,
     * which a pushing job wakes (queue.c, wake_dispatcher). */
    _Alignas(64) _Atomic int watching;
    _Atomic int asleep;          /* dispatchers blocked on dispatch_cond */
    /* Read by every async request, written about once per process: */
    _Alignas(64) _Atomic unsigned dispatchers_live;   /* gp_fork_generation() + 1 while this process's run */
    /* Async jobs hand their own per-request work (prepare, staging) to their thread only once jobs
     * of two threads or more have queued (submit_async); stage_one_thread: test hook (set only
     * where GP_TEST_HOOKS). */
    _Atomic uintptr_t async_thread;   /* the last thread an async request came from */
    _Atomic int async_threads;        /* 1: more than one so far, in this process */
    int stage_one_thread;
    unsigned test_unwatch_delay_us;   /* test hook: the watcher's pause before it stops (queue.c) */
    size_t test_gather_ops;      /* test hook: the share rule waits for this many pending (queue.c) */
    int dispatcher_state;        /* 0 not started, 1 running, -1 could not start (this process) */
    int dispatcher_stop;
    unsigned dispatcher_fork_gen;   /* gp_fork_generation() of the process that started it */
    gp_queue_owner own;
    struct gp_queue *next;       /* every engine's queue, for the fork handlers (queue.c) */
} gp_queue;

/* `own` runs each batch the queue flushes and the executors' per-request work (copied). */
int gp_queue_init(gp_queue *q, const gp_queue_owner *own);
void gp_queue_cleanup(gp_queue *q);
/* Run r through the queue; returns r->status. Outside an ASYNC_JOB the caller waits as knobs.wait
 * says (and may lead the batch); inside one the job pauses until the dispatcher has run it. */
int gp_queue_submit(gp_queue *q, gp_request *r);
/* Stop the dispatcher threads, if this process started them (before the executors close). */
void gp_queue_stop_dispatcher(gp_queue *q);

#endif
