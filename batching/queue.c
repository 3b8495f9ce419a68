/* SPDX-License-Identifier: Apache-2.0 */
/* The process-wide queue: requests from any thread gather into one batch, flushed by size, time, or
 * when nobody else could join, and run by the submitter that flushes it. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

/*
 * Flush policy, checked by every waiting submitter whose request is still pending:
 *   - the batch holds max_batch_ops requests or max_batch_bytes bytes;
 *   - no batch is running, and either flush_us have passed since its first request, or every
 *     active submitter is waiting in it: no one else could add anything, so waiting longer only
 *     adds latency (this is what makes a lone synchronous caller never wait on the timer).
 * While a batch runs the next one gathers, so batch sizes follow the executor's service time.
 * The submitter that flushes becomes the batch's leader: it runs the batch with no lock held while
 * others keep queueing into the next one, then wakes the batch's waiters.
 */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int gp_queue_init(gp_queue *q)
{
    pthread_condattr_t attr;

    memset(q, 0, sizeof(*q));
    if (pthread_mutex_init(&q->lock, NULL) != 0)
        return 0;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &attr);
    pthread_condattr_destroy(&attr);
    return 1;
}

void gp_queue_cleanup(gp_queue *q)
{
    free(q->pending);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
}

static int should_flush(const gp_engine *e, const gp_queue *q, uint64_t t)
{
    if (q->npending >= (size_t)e->knobs.max_batch_ops || q->pending_bytes >= e->knobs.max_batch_bytes)
        return 1;
    /* While the executor is busy with as many batches as it can overlap (cuda: two per GPU, the
     * next copying in while one computes), flushing only puts a batch in line: keep gathering
     * until one completes (its leader then wakes everyone to re-check). */
    if (q->inflight >= atomic_load_explicit(&e->max_inflight, memory_order_relaxed))
        return 0;
    return t - q->first_ns >= (uint64_t)e->knobs.flush_us * 1000u || q->npending == (size_t)q->active;
}

/* Take the pending batch and run it (called with the lock held; returns with it held). */
static void lead(gp_engine *e, gp_queue *q)
{
    gp_queue_entry **mine = q->pending;
    gp_request stack[64], *batch = stack;
    size_t n = q->npending;

    /* The next batch starts empty in a fresh array; this one belongs to the leader now. */
    q->pending = NULL;
    q->npending = q->cap = 0;
    q->pending_bytes = 0;
    q->generation++;
    q->inflight++;
    pthread_mutex_unlock(&q->lock);

    if (n > sizeof(stack) / sizeof(stack[0]) && (batch = malloc(n * sizeof(*batch))) == NULL) {
        /* No memory for the copy: run them one by one, which needs none. */
        for (size_t i = 0; i < n; i++)
            gp_engine_submit(e, mine[i]->req, 1);
    } else {
        for (size_t i = 0; i < n; i++)
            batch[i] = *mine[i]->req;
        gp_engine_submit(e, batch, n);
        for (size_t i = 0; i < n; i++)
            mine[i]->req->status = batch[i].status;
        if (batch != stack)
            free(batch);
    }

    pthread_mutex_lock(&q->lock);
    q->inflight--;
    for (size_t i = 0; i < n; i++)
        atomic_store_explicit(&mine[i]->done, 1, memory_order_release);
    pthread_cond_broadcast(&q->cond);
    free(mine);
}

static void wait_a_while(gp_engine *e, gp_queue *q, gp_queue_entry *me, int pending, uint64_t spin_until)
{
    gp_wait_mode mode = e->knobs.wait;

    if (mode == GP_WAIT_SPIN || (mode == GP_WAIT_ADAPTIVE && now_ns() < spin_until)) {
        /* Spin without the lock until done or the next decision point. */
        uint64_t until = pending ? q->first_ns + (uint64_t)e->knobs.flush_us * 1000u : UINT64_MAX;

        pthread_mutex_unlock(&q->lock);
        for (unsigned i = 0; !atomic_load_explicit(&me->done, memory_order_acquire); i++) {
            if ((i & 63) == 63) {
                uint64_t t = now_ns();

                if (t >= until || (mode == GP_WAIT_ADAPTIVE && t >= spin_until))
                    break;
                sched_yield();
            }
        }
        pthread_mutex_lock(&q->lock);
        return;
    }
    if (pending && q->inflight < atomic_load_explicit(&e->max_inflight, memory_order_relaxed)) {
        uint64_t deadline = q->first_ns + (uint64_t)e->knobs.flush_us * 1000u;
        struct timespec ts = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };

        pthread_cond_timedwait(&q->cond, &q->lock, &ts);
    } else {
        pthread_cond_wait(&q->cond, &q->lock);
    }
}

int gp_queue_submit(gp_engine *e, gp_request *r)
{
    gp_queue *q = &e->queue;
    gp_queue_entry me = { .req = r };
    uint64_t gen, spin_until = now_ns() + (uint64_t)e->knobs.spin_us * 1000u;

    atomic_init(&me.done, 0);
    pthread_mutex_lock(&q->lock);
    if (q->npending == q->cap) {
        size_t cap = q->cap != 0 ? q->cap * 2 : 64;
        gp_queue_entry **p = realloc(q->pending, cap * sizeof(*p));

        if (p == NULL) {
            pthread_mutex_unlock(&q->lock);
            return gp_engine_submit(e, r, 1), r->status;   /* run alone rather than fail */
        }
        q->pending = p;
        q->cap = cap;
    }
    if (q->npending == 0)
        q->first_ns = now_ns();
    q->pending[q->npending++] = &me;
    q->pending_bytes += r->len;
    q->active++;
    gen = q->generation;

    while (!atomic_load_explicit(&me.done, memory_order_acquire)) {
        int pending = q->generation == gen;   /* still in the batch being gathered */

        if (pending && should_flush(e, q, now_ns())) {
            lead(e, q);
            continue;
        }
        wait_a_while(e, q, &me, pending, spin_until);
    }
    q->active--;
    /* Whoever waits in the pending batch may now be the last one active: let them re-check. */
    if (q->npending > 0)
        pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return r->status;
}
