/* SPDX-License-Identifier: Apache-2.0 */
/* The process-wide queue: requests from any thread or async job gathered into batches. */
/* A batch flushes by size, time, or when nobody else could join, and is run by the synchronous
 * submitter that flushes it or by a dispatcher thread. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
# include <sys/prctl.h>
#endif

#include <openssl/crypto.h>

#include "batching/queue.h"
#include "batching/base/mutex.h"

/*
 * Flush policy, checked by every waiting submitter whose request is still pending:
 *   - the batch holds max_batch_ops requests or max_batch_bytes bytes;
 *   - the executor has a batch slot free (cuda: four per GPU; else one), and either flush_us have
 *     passed since its first request, or it holds its share of the submitters that could still
 *     add one (those not waiting in a running batch), that count divided by the free slots: with
 *     one slot every such submitter is in it and no one else could add anything, so waiting
 *     longer only adds latency (this is what makes a lone synchronous caller never wait on the
 *     timer); with N threads and four free slots the batches settle at N/4 and overlap. Waiting
 *     for all N would run one batch at a time and leave the other slots idle.
 * While the slots are busy the next batch gathers, so batch sizes follow the executor's service time.
 * The submitter that flushes becomes the batch's leader: it runs the batch with no lock held while
 * others keep queueing into the next one, then wakes the batch's waiters.
 *
 * Async jobs (OpenSSL ASYNC_JOB, e.g. openssl speed -async_jobs, libssl SSL_MODE_ASYNC) queue their
 * request and pause: a job never leads, since the executor's work must not run on its 32 KiB stack
 * and the application's thread should go on to start other jobs. Dispatcher threads (one per batch
 * the executor can overlap: the cuda executor's slots; started at the first async request, again
 * in a forked child) flush and run every batch holding async entries by the same policy, with
 * these changes, because jobs come back one at a time as the application resumes them:
 *   - "everyone is in" counts the jobs that could still submit: those waiting for a result and not
 *     in a running batch, split over the free slots as above (with N jobs and two free slots the
 *     batches settle at N/2 and one computes while the application resumes the jobs of the other);
 *   - the timer runs from the last request that joined (or the last completion, whichever is
 *     later) rather than from the first, so a stream of jobs being resumed keeps joining one batch,
 *     but no longer than ASYNC_GATHER_MAX flush_us periods after the previous batch completed.
 * Synchronous callers in a batch with async entries may lead it too (mixed batches are plain
 * batches); their waits use the same deadline.
 *
 * Device mode (requests on data already on the GPU, from synchronous callers): each call is one
 * round trip whose cost barely grows with the batch (the kernel's latency on a small message and
 * the issue dominate; bench/RESULTS.md, "What bounds the device-mode targets"), and its callers come
 * straight back with their next message. The rule above flushes whatever is pending as soon as a
 * slot is free, so the first caller back from a batch would run alone and the batches stay a few
 * messages each. So a batch of synchronous device-mode requests also waits for the callers of the
 * last such batches that are not back yet (sync_returning), no longer than flush_us: sixteen
 * threads of 16 KiB messages then settle into batches of sixteen. A lone caller is its own
 * returning caller and never waits.
 *
 * A job queues without the queue's lock: it pushes its entry onto the inbox, a lock-free stack, and
 * whoever next holds the lock (a dispatcher, or a synchronous submitter) moves the inbox into the
 * pending batch: with many threads of jobs, taking the lock per request cost the application's
 * threads much of their CPU. One dispatcher at a time is
 * the watcher, which looks at the inbox again before it leads a batch or blocks; while there is
 * one, a push costs one compare-and-swap; while there is none, the pushing job wakes a blocked
 * dispatcher (wake_dispatcher).
 */
#define ASYNC_GATHER_MAX 20

/*
 * Fork safety. A child has only the thread that called fork, but a copy of every lock and condition
 * variable as the parent's other threads left them: a mutex one of them held stays locked, and a
 * condition variable they waited on (the dispatcher, the host pool's workers, synchronous waiters)
 * still counts them, so signalling it in the child can block forever (glibc waits for the phantom
 * waiters). So every engine's queue is listed here; before fork its locks are taken (the queue is
 * then in a consistent state: no half-appended entry), after it the parent releases them and the
 * child makes fresh ones and forgets what the parent's other threads were doing (their batch in
 * flight, their waits). The host pool's locks go the same way: its submit lock first, as a leader
 * takes it without the queue lock and then wants the queue lock.
 */
static pthread_mutex_t queues_lock = PTHREAD_MUTEX_INITIALIZER;
static gp_queue *queues;               /* linked through gp_queue.next */
static pthread_once_t queue_atfork_once = PTHREAD_ONCE_INIT;

static void init_conds(gp_queue *q)
{
    pthread_condattr_t attr;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &attr);
    pthread_cond_init(&q->dispatch_cond, &attr);
    pthread_condattr_destroy(&attr);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&queues_lock);
    for (gp_queue *q = queues; q != NULL; q = q->next) {
        pthread_mutex_lock(q->own.fork_outer);
        pthread_mutex_lock(&q->lock);
        pthread_mutex_lock(q->own.fork_inner);
    }
}

static void fork_parent(void)
{
    for (gp_queue *q = queues; q != NULL; q = q->next) {
        pthread_mutex_unlock(q->own.fork_inner);
        pthread_mutex_unlock(&q->lock);
        pthread_mutex_unlock(q->own.fork_outer);
    }
    pthread_mutex_unlock(&queues_lock);
}

static void fork_child(void)
{
    for (gp_queue *q = queues; q != NULL; q = q->next) {
        gp_mutex_init(&q->lock);
        init_conds(q);
        q->own.fork_child(q->own.ctx);
        /* The parent's leaders and synchronous waiters are not here; the dispatcher restarts at the
         * next async request (dispatcher_fork_gen), the pool at the next spread batch (its pid). */
        q->inflight = 0;
        q->async_inflight = 0;
        q->sync_inflight = 0;
        q->active = 0;
        q->async_thread = 0;   /* the child has one thread */
        q->async_threads = 0;
        /*
         * The parent's queued requests, pending or pushed: the synchronous callers and most jobs
         * that made them are the parent's other threads, and a staged request's bytes are in
         * pinned memory, which the CUDA driver may keep out of a child. The parent runs them all;
         * run here too they would be run twice, from memory that may not be there. The forking
         * thread's own paused jobs, if the child resumes them, fail (submit_async). Their count
         * starts again from zero, as no job of this process has queued yet.
         */
        q->npending = 0;
        q->npending_async = 0;
        q->npending_devmem = 0;
        q->sync_returning = 0;
        q->pending_bytes = 0;
        q->generation++;
        atomic_store_explicit(&q->async_waiting, 0, memory_order_relaxed);
        q->inbox = NULL;
        q->watching = 0;
        q->asleep = 0;
    }
    pthread_mutex_init(&queues_lock, NULL);
}

static void register_queue_atfork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int gp_queue_init(gp_queue *q, const gp_queue_owner *own)
{
    const gp_knobs *k = own->knobs;

    memset(q, 0, sizeof(*q));
    q->own = *own;
    if (gp_mutex_init(&q->lock) != 0)
        return 0;
#if GP_TEST_HOOKS
    /* Test hook (stage_one_thread): jobs of a single thread do their own per-request work too, so
     * the suites' one-thread async drivers run that path. */
    q->stage_one_thread = k->test.stage_one_thread;
    /* Test hook (unwatch_delay_us): the watcher pauses, lock held, between deciding to block and
     * ceasing to watch, so that jobs push into that window (dispatcher_wait). */
    q->test_unwatch_delay_us = (unsigned)k->test.unwatch_delay_us;
    /* Test hook (gather_ops): the share rule waits for that many pending requests, so that a
     * suite's concurrent callers combine into batches whatever the scheduler does (should_flush). */
    q->test_gather_ops = (size_t)k->test.gather_ops;
#else
    (void)k;
#endif
    init_conds(q);
    pthread_once(&queue_atfork_once, register_queue_atfork);
    pthread_mutex_lock(&queues_lock);
    q->next = queues;
    queues = q;
    pthread_mutex_unlock(&queues_lock);
    return 1;
}

void gp_queue_cleanup(gp_queue *q)
{
    pthread_mutex_lock(&queues_lock);
    for (gp_queue **pp = &queues; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    }
    pthread_mutex_unlock(&queues_lock);
    free(q->pending);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
    pthread_cond_destroy(&q->dispatch_cond);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* When the pending batch flushes by time (lock held, npending > 0). */
static uint64_t flush_deadline(const gp_queue *q)
{
    uint64_t period = (uint64_t)q->own.knobs->flush_us * 1000u, idle, cap;

    if (q->npending_async == 0)
        return q->first_ns + period;
    idle = max_u64(q->last_add_ns, q->last_done_ns) + period;
    cap = max_u64(q->first_ns, q->last_done_ns) + ASYNC_GATHER_MAX * period;
    return idle < cap ? idle : cap;
}

/* Why the pending batch should flush now (lock held): 0 not yet, else which rule. */
enum { FLUSH_NO, FLUSH_SIZE, FLUSH_SHARE, FLUSH_TIMER };

static int should_flush(const gp_queue *q, uint64_t t)
{
    if (q->npending >= (size_t)q->own.knobs->max_batch_ops || q->pending_bytes >= q->own.knobs->max_batch_bytes)
        return FLUSH_SIZE;
    /* While the executor is busy with as many batches as it can overlap (cuda: four per GPU, the
     * next copying in while one computes), flushing only puts a batch in line: keep gathering
     * until one completes (its leader then wakes everyone to re-check). */
    if (q->inflight >= atomic_load_explicit(q->own.max_inflight, memory_order_relaxed))
        return FLUSH_NO;
    /* Synchronous device-mode callers of the last such batches still coming back (see the top of
     * this file). */
    if (q->npending_devmem > 0 && q->npending_devmem == q->npending && q->sync_returning > 0
        && t < q->returning_until)
        return t >= flush_deadline(q) ? FLUSH_TIMER : FLUSH_NO;
    /* Everyone is in: this batch's share of the synchronous submitters, and of the jobs, that could
     * still submit (see the top of this file). */
#if GP_TEST_HOOKS
    if (q->test_gather_ops > 0 && q->npending < q->test_gather_ops)
        return t >= flush_deadline(q) ? FLUSH_TIMER : FLUSH_NO;
#endif
    {
        size_t free_slots = (size_t)(atomic_load_explicit(q->own.max_inflight, memory_order_relaxed) - q->inflight);
        size_t nsync = q->npending - q->npending_async;
        size_t could_sync = (size_t)q->active - q->sync_inflight;
        size_t could = atomic_load_explicit(&q->async_waiting, memory_order_relaxed) - q->async_inflight;

        if ((nsync == 0 || nsync * free_slots >= could_sync)
            && (q->npending_async == 0 || q->npending_async * free_slots >= could))
            return FLUSH_SHARE;
    }
    return t >= flush_deadline(q) ? FLUSH_TIMER : FLUSH_NO;
}

/* Knob stats: the state of the async jobs as a batch holding some flushes (lock held). */
static void count_flush(const gp_queue *q, int why)
{
    size_t waiting = atomic_load_explicit(&q->async_waiting, memory_order_relaxed);

    if (!q->own.knobs->stats || q->npending_async == 0)
        return;
    gp_stat_add_to(q->own.stats, GP_ST_ASYNC_BATCHES, 1);
    gp_stat_add_to(q->own.stats, GP_ST_GATHER_NS, gp_now_ns() - q->first_ns);
    gp_stat_add_to(q->own.stats, GP_ST_FLUSH_JOBS, q->npending_async);
    gp_stat_add_to(q->own.stats, GP_ST_FLUSH_RUNNING, q->async_inflight);
    gp_stat_add_to(q->own.stats, GP_ST_FLUSH_OUT, waiting - q->async_inflight - q->npending_async);
    gp_stat_add_to(q->own.stats, why == FLUSH_SIZE ? GP_ST_FLUSH_SIZE : why == FLUSH_SHARE ? GP_ST_FLUSH_SHARE : GP_ST_FLUSH_TIMER, 1);
}

/* Take the pending batch and run it (called with the lock held; returns with it held). Never on an
 * async job's stack: the copy below and the executor's work need a thread's stack. */
static void lead(gp_queue *q)
{
    gp_queue_entry **mine = q->pending;
    gp_request stack[64], *batch = stack;
    size_t n = q->npending, nasync = q->npending_async, ndevmem = q->npending_devmem;

    /* The next batch starts empty in a fresh array; this one belongs to the leader now. */
    q->pending = NULL;
    q->npending = q->cap = 0;
    q->pending_bytes = 0;
    q->npending_async = 0;
    q->npending_devmem = 0;
    q->generation++;
    q->inflight++;
    q->async_inflight += nasync;
    q->sync_inflight += n - nasync;
    pthread_mutex_unlock(&q->lock);

    if (n > sizeof(stack) / sizeof(stack[0]) && (batch = malloc(n * sizeof(*batch))) == NULL) {
        /* No memory for the copy: run them one by one, which needs none. */
        for (size_t i = 0; i < n; i++)
            q->own.run(q->own.ctx, mine[i]->req, 1);
    } else {
        for (size_t i = 0; i < n; i++)
            batch[i] = *mine[i]->req;
        q->own.run(q->own.ctx, batch, n);
        for (size_t i = 0; i < n; i++)
            mine[i]->req->status = batch[i].status;
        if (batch != stack)
            free(batch);
    }

    /* Async entries first: once a synchronous entry is marked done its submitter may return and
     * its entry vanish, so which entry is which must be settled before anything is published. */
    for (size_t i = 0, k = 0; i < n && k < nasync; i++) {
        if (mine[i]->notify != NULL) {
            gp_queue_entry *t = mine[k];

            mine[k++] = mine[i];
            mine[i] = t;
        }
    }
    pthread_mutex_lock(&q->lock);
    q->inflight--;
    q->async_inflight -= nasync;
    q->sync_inflight -= n - nasync;
    q->last_done_ns = gp_now_ns();
    if (ndevmem > 0) {   /* its device-mode callers come back with their next messages */
        if (q->last_done_ns >= q->returning_until)
            q->sync_returning = 0;
        q->sync_returning += ndevmem;
        q->returning_until = q->last_done_ns + (uint64_t)q->own.knobs->flush_us * 1000u;
    }
    atomic_fetch_add_explicit(&q->events, 1, memory_order_relaxed);
    for (size_t i = nasync; i < n; i++)
        atomic_store_explicit(&mine[i]->done, 1, memory_order_release);
    pthread_cond_broadcast(&q->cond);
    pthread_cond_signal(&q->dispatch_cond);
    if (nasync > 0) {
        /* Wake the jobs without the lock: a write per fd, or the application's callbacks, which may
         * call back into OpenSSL. */
        uint64_t t0 = q->own.knobs->stats ? gp_now_ns() : 0;

        pthread_mutex_unlock(&q->lock);
        for (size_t i = 0; i < nasync; i++) {
            if (q->own.knobs->stats)
                mine[i]->done_ns = gp_now_ns();
            gp_async_complete(mine[i]->notify, &mine[i]->done);
        }
        if (q->own.knobs->stats)
            gp_stat_add_to(q->own.stats, GP_ST_NOTIFY_NS, gp_now_ns() - t0);
        pthread_mutex_lock(&q->lock);
    }
    free(mine);
}

static void wait_a_while(gp_queue *q, gp_queue_entry *me, int pending, uint64_t spin_until)
{
    gp_wait_mode mode = q->own.knobs->wait;

    if (mode == GP_WAIT_SPIN || (mode == GP_WAIT_ADAPTIVE && gp_now_ns() < spin_until)) {
        /* Spin without the lock until done or the next decision point. */
        uint64_t until = pending ? flush_deadline(q) : UINT64_MAX;

        pthread_mutex_unlock(&q->lock);
        for (unsigned i = 0; !atomic_load_explicit(&me->done, memory_order_acquire); i++) {
            if ((i & 63) == 63) {
                uint64_t t = gp_now_ns();

                if (t >= until || (mode == GP_WAIT_ADAPTIVE && t >= spin_until))
                    break;
                sched_yield();
            }
        }
        pthread_mutex_lock(&q->lock);
        return;
    }
    if (pending && q->inflight < atomic_load_explicit(q->own.max_inflight, memory_order_relaxed)) {
        uint64_t deadline = flush_deadline(q);
        struct timespec ts = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };

        pthread_cond_timedwait(&q->cond, &q->lock, &ts);
    } else {
        pthread_cond_wait(&q->cond, &q->lock);
    }
}

/* Add an entry that joined at `now` to the pending batch (lock held); 0 if the array cannot
 * grow. The caller bumps `events`. */
static int add_pending(gp_queue *q, gp_queue_entry *me, uint64_t now)
{
    if (q->npending == q->cap) {
        size_t cap = q->cap != 0 ? q->cap * 2 : 64;
        gp_queue_entry **p = realloc(q->pending, cap * sizeof(*p));

        if (p == NULL)
            return 0;
        q->pending = p;
        q->cap = cap;
    }
    q->last_add_ns = now;
    if (q->npending == 0)
        q->first_ns = now;
    q->pending[q->npending++] = me;
    q->pending_bytes += me->req->len;
    return 1;
}

/* Append a synchronous caller's entry to the pending batch (lock held); 0 if the array cannot grow. */
static int append(gp_queue *q, gp_queue_entry *me)
{
    const uint64_t now = gp_now_ns();

    if (!add_pending(q, me, now))
        return 0;
    if (me->req->devmem && me->req->kind == GP_REQ_CRYPT) {
        q->npending_devmem++;
        if (now >= q->returning_until)
            q->sync_returning = 0;
        else if (q->sync_returning > 0)
            q->sync_returning--;   /* one of them is back */
    }
    atomic_fetch_add_explicit(&q->events, 1, memory_order_relaxed);
    return 1;
}

/*
 * Move the jobs' inbox into the pending batch, oldest first (lock held), as having joined now: one
 * clock read and one bump of `events` for the lot. An entry the array cannot take (out of memory)
 * fails like any refused submission: it is completed with GP_REQ_FAILED, with the lock dropped
 * meanwhile (the completion may call the application's callback).
 */
static void drain_inbox(gp_queue *q)
{
    gp_queue_entry *list = atomic_exchange_explicit(&q->inbox, NULL, memory_order_acquire), *fifo = NULL, *next;
    uint64_t now;

    if (list == NULL)
        return;
    for (; list != NULL; list = next) {   /* newest first -> oldest first */
        next = list->next_in;
        list->next_in = fifo;
        fifo = list;
    }
    now = gp_now_ns();
    atomic_fetch_add_explicit(&q->events, 1, memory_order_relaxed);
    for (; fifo != NULL; fifo = next) {
        next = fifo->next_in;
        if (add_pending(q, fifo, now)) {
            q->npending_async++;
            continue;
        }
        fifo->req->status = GP_REQ_FAILED;
        pthread_mutex_unlock(&q->lock);
        gp_async_complete(fifo->notify, &fifo->done);
        pthread_mutex_lock(&q->lock);
    }
}

/* Push an async entry onto the inbox (no lock). */
static void push_inbox(gp_queue *q, gp_queue_entry *me)
{
    gp_queue_entry *head = atomic_load_explicit(&q->inbox, memory_order_relaxed);

    do
        me->next_in = head;
    while (!atomic_compare_exchange_weak_explicit(&q->inbox, &head, me, memory_order_seq_cst,
                                                  memory_order_relaxed));
}

/*
 * After a push: make sure some dispatcher will look at the inbox. The watcher will (it checks the
 * inbox after it stops watching: dispatcher_unwatch), and so will one running a batch (it checks
 * when it comes back); only when there is no watcher and some dispatcher is blocked does the job
 * take the lock to signal it. Both sides are sequentially consistent, so either the job sees the
 * watcher or a blocked dispatcher, or that dispatcher sees the pushed entry (a store-load pairing,
 * as in Dekker's algorithm).
 */
static void wake_dispatcher(gp_queue *q)
{
    if (atomic_load_explicit(&q->watching, memory_order_seq_cst)
        || atomic_load_explicit(&q->asleep, memory_order_seq_cst) == 0)
        return;
    pthread_mutex_lock(&q->lock);
    pthread_cond_signal(&q->dispatch_cond);
    pthread_mutex_unlock(&q->lock);
}

/* ---- the dispatcher: runs batches that hold async entries ---- */

/* The watcher stops watching (lock held): from here on pushes wake a blocked dispatcher, and what
 * was pushed before joins the pending batch now. */
static void dispatcher_unwatch(gp_queue *q, int *watcher)
{
    if (!*watcher)
        return;
    *watcher = 0;
    atomic_store_explicit(&q->watching, 0, memory_order_seq_cst);
    drain_inbox(q);
}

/*
 * Wait for the next event (lock held, released meanwhile) until `deadline`. Jobs come back within
 * microseconds of each other while the application resumes them, and a sleeping thread can take
 * far longer than that to wake (tens to hundreds of µs on a VM), so unless wait = block the
 * dispatcher first spins spin_us after the latest event, without the lock, watching the counter
 * and the inbox. Returns early, without blocking, when the inbox is not empty.
 */
static void dispatcher_wait(gp_queue *q, uint64_t deadline, int *watcher)
{
    uint64_t seen = atomic_load_explicit(&q->events, memory_order_relaxed);
    uint64_t spin_until = max_u64(q->last_add_ns, q->last_done_ns) + (uint64_t)q->own.knobs->spin_us * 1000u;
    uint64_t t = gp_now_ns();

    /* One dispatcher spins at a time, as the watcher; the others block (an event wakes one). */
    if (q->own.knobs->wait != GP_WAIT_BLOCK && atomic_load_explicit(&q->async_waiting, memory_order_relaxed) > 0
        && t < spin_until
        && (*watcher || atomic_exchange_explicit(&q->watching, 1, memory_order_seq_cst) == 0)) {
        *watcher = 1;
        if (spin_until > deadline)
            spin_until = deadline;
        pthread_mutex_unlock(&q->lock);
        for (unsigned i = 1; atomic_load_explicit(&q->events, memory_order_relaxed) == seen
                             && atomic_load_explicit(&q->inbox, memory_order_relaxed) == NULL; i++) {
            if ((i & 63) == 0) {
                if (gp_now_ns() >= spin_until)
                    break;
                sched_yield();
            }
        }
        pthread_mutex_lock(&q->lock);
        return;
    }
    /* A watcher that stops here may drain entries pushed since the caller looked (they saw it
     * watching, so they woke nobody): the deadline was computed without them (UINT64_MAX when
     * nothing was pending), so go back and decide again rather than sleep on them. Sleeping on
     * them can leave async jobs hung (the async-host-unwatch-race test exercises this window). */
#if GP_TEST_HOOKS
    if (*watcher && q->test_unwatch_delay_us > 0) {
        struct timespec d = { 0, (long)q->test_unwatch_delay_us * 1000L };

        nanosleep(&d, NULL);
    }
#endif
    dispatcher_unwatch(q, watcher);
    if (atomic_load_explicit(&q->events, memory_order_relaxed) != seen || q->dispatcher_stop)
        return;   /* (a drain that failed an entry dropped the lock: a stop may have come) */
    atomic_fetch_add_explicit(&q->asleep, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&q->inbox, memory_order_seq_cst) != NULL) {
        atomic_fetch_sub_explicit(&q->asleep, 1, memory_order_relaxed);
        return;
    }
    if (deadline == UINT64_MAX) {
        pthread_cond_wait(&q->dispatch_cond, &q->lock);
    } else {
        struct timespec ts = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };

        pthread_cond_timedwait(&q->dispatch_cond, &q->lock, &ts);
    }
    atomic_fetch_sub_explicit(&q->asleep, 1, memory_order_relaxed);
}

static void *dispatcher_main(void *arg)
{
    gp_queue *q = arg;
    int watcher = 0;

#if defined(PR_SET_NAME)
    /* Named for top -H, perf and debuggers: the application's own threads keep their names. */
    (void)prctl(PR_SET_NAME, "gp-dispatch", 0, 0, 0);
#endif

    /* Wait contexts keep a pointer to our fd cleanup function: stay mapped (done here, on a
     * thread's stack, rather than on the job's). */
    gp_async_pin_module();
#if defined(PR_SET_TIMERSLACK)
    /* Our own thread: its timed sleeps (a pending batch's flush deadline) end on time rather than
     * up to the default 50 µs late. */
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
    pthread_mutex_lock(&q->lock);
    for (;;) {
        uint64_t deadline = UINT64_MAX;

        drain_inbox(q);
        if (q->dispatcher_stop && q->npending_async == 0)
            break;
        if (q->npending_async > 0) {
            int why = q->dispatcher_stop ? FLUSH_SIZE : should_flush(q, gp_now_ns());

            if (why != FLUSH_NO) {
                /* Busy for a whole batch: another dispatcher watches meanwhile. */
                dispatcher_unwatch(q, &watcher);
                count_flush(q, why);
                lead(q);
                continue;
            }
            if (q->inflight < atomic_load_explicit(q->own.max_inflight, memory_order_relaxed))
                deadline = flush_deadline(q);
        }
        dispatcher_wait(q, deadline, &watcher);
    }
    dispatcher_unwatch(q, &watcher);
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* Start the dispatchers once per process (lock held): one per batch the executor overlaps (its
 * slots, opened before any request reaches the queue). Not two per slot (one leading the next
 * batch while another wakes its jobs): that measured slower. A forked child has none of its parent's threads: it starts its own. */
static int dispatcher_ensure(gp_queue *q)
{
    unsigned gen = gp_fork_generation();
    int want = atomic_load(q->own.max_inflight);
    sigset_t all, old;

    if (q->dispatcher_state != 0 && q->dispatcher_fork_gen == gen)
        return q->dispatcher_state == 1;
    q->dispatcher_fork_gen = gen;
    q->dispatcher_stop = 0;
    atomic_store(&q->watching, 0);
    atomic_store(&q->asleep, 0);
    if (want < 1)
        want = 1;
    if (want > GP_MAX_DISPATCHERS)
        want = GP_MAX_DISPATCHERS;
    /* No application signal handler should run on them. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (q->ndispatchers = 0; q->ndispatchers < want; q->ndispatchers++)
        if (pthread_create(&q->dispatchers[q->ndispatchers], NULL, dispatcher_main, q) != 0)
            break;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    q->dispatcher_state = q->ndispatchers > 0 ? 1 : -1;
    if (q->dispatcher_state == 1)
        atomic_store_explicit(&q->dispatchers_live, gen + 1, memory_order_release);
    return q->dispatcher_state == 1;
}

void gp_queue_stop_dispatcher(gp_queue *q)
{
    int join;

    pthread_mutex_lock(&q->lock);
    join = q->dispatcher_state == 1 && q->dispatcher_fork_gen == gp_fork_generation();
    q->dispatcher_stop = 1;
    atomic_store(&q->dispatchers_live, 0);
    pthread_cond_broadcast(&q->dispatch_cond);
    pthread_mutex_unlock(&q->lock);
    if (join)
        for (int i = 0; i < q->ndispatchers; i++)
            pthread_join(q->dispatchers[i], NULL);
    q->ndispatchers = 0;
    q->dispatcher_state = 0;
}

/*
 * Staging (stage.h): copy a data request's input into a chunk of the executor's pool and point the
 * request at it, on the job's own thread; after the result, copy the output to the caller's buffer.
 * A request whose executor changes meanwhile (a GPU failure re-runs it on the cpu or host
 * executor) still reads and writes the chunk, so the result comes back the same way.
 */
typedef struct stage_ctx {
    gp_stage_pool *pool;
    gp_stage_chunk *chunk;
    const uint8_t *in;
    uint8_t *out;
} stage_ctx;

static void stage_in(gp_queue *q, gp_request *r, stage_ctx *s)
{
    s->chunk = NULL;
    if (r->kind != GP_REQ_CRYPT || !gp_stage_fits(r->len) || (s->pool = q->own.stage_pool(q->own.ctx, r)) == NULL
        || (s->chunk = gp_stage_get(s->pool)) == NULL)
        return;
    s->in = r->in;
    s->out = r->out;
    memcpy(s->chunk->host, r->in, r->len);
    r->in = s->chunk->host;
    r->out = s->chunk->host + GP_STAGE_MAX_BYTES;
    r->stage = s->chunk;
    if (q->own.knobs->stats)
        gp_stat_add_to(q->own.stats, GP_ST_STAGED, 1);
}

static void stage_out(gp_request *r, stage_ctx *s)
{
    if (s->chunk == NULL)
        return;
    if (r->status == GP_REQ_OK)
        memcpy(s->out, s->chunk->host + GP_STAGE_MAX_BYTES, r->len);
    if (r->stage_pows)   /* powers of the message's one-time key */
        OPENSSL_cleanse(s->chunk->host + GP_STAGE_POWS_OFF, GP_STAGE_POWS_BYTES);
    r->in = s->in;
    r->out = s->out;
    r->stage = NULL;
    r->stage_pows = 0;
    gp_stage_put(s->pool, s->chunk);
}

/*
 * Whether an async job should do its request's own work (prepare, staging) on its thread. The
 * work moves off the dispatcher, which serves every job, onto the application's threads: a gain
 * when there are several of them, a loss when one thread runs all the jobs and the dispatcher would
 * otherwise work beside it (bench/evp_bench with async jobs on one thread and on several). Once
 * two threads have
 * queued jobs, the process keeps doing it (thread counts do not change much in a server).
 */
static int async_own_work(gp_queue *q)
{
    uintptr_t self = (uintptr_t)pthread_self(), prev;

    if (atomic_load_explicit(&q->async_threads, memory_order_relaxed))
        return 1;
#if GP_TEST_HOOKS
    if (q->stage_one_thread)
        return 1;
#endif
    prev = atomic_exchange_explicit(&q->async_thread, self, memory_order_relaxed);
    if (prev == 0 || prev == self)
        return 0;
    atomic_store_explicit(&q->async_threads, 1, memory_order_relaxed);
    return 1;
}

/* The executor's per-message work on the submitter's own thread (gp_executor.prepare). */
static void prepare(gp_queue *q, gp_request *r)
{
    q->own.prepare(q->own.ctx, r);
}

/*
 * Inside an ASYNC_JOB: queue the request with a notifier and pause the job until the dispatcher
 * (or a synchronous leader) has run its batch. Runs on the job's 32 KiB stack: a few words of
 * locals, no lock across the pause. The entry and the request stay on that stack, which persists
 * while the job is paused; the leader is done with both once it sets done.
 */
static int submit_async(gp_queue *q, gp_request *r)
{
    gp_async_notify n;
    gp_queue_entry me = { .req = r, .notify = &n, .done_ns = 0 };
    stage_ctx st;
    unsigned fork_gen;

    atomic_init(&me.done, 0);
    if (!gp_async_prepare(&n))
        return GP_REQ_FAILED;
    st.chunk = NULL;
    if (async_own_work(q)) {
        stage_in(q, r, &st);
        prepare(q, r);   /* after staging: the cuda executor's may write into the chunk */
    }
    if (atomic_load_explicit(&q->dispatchers_live, memory_order_acquire) != gp_fork_generation() + 1) {
        int ok;

        pthread_mutex_lock(&q->lock);
        ok = dispatcher_ensure(q);
        pthread_mutex_unlock(&q->lock);
        if (!ok) {
            stage_out(r, &st);
            return GP_REQ_FAILED;
        }
    }
    /* Counted before the push: once a dispatcher has the entry, the share rule counts it in. */
    fork_gen = gp_fork_generation();
    atomic_fetch_add_explicit(&q->async_waiting, 1, memory_order_relaxed);
    push_inbox(q, &me);
    wake_dispatcher(q);
    if (q->own.knobs->stats)
        gp_stat_add_to(q->own.stats, GP_ST_ASYNC_OPS, 1);

    if (!gp_async_wait(&n, &me.done, fork_gen)) {
        /* This is a forked child's copy of the job: the child dropped the request with the rest of
         * the parent's queue (fork_child) and its count; a staged request's chunk may be pinned
         * memory the child does not have, so it is neither read nor returned. */
        if (st.chunk != NULL) {
            r->in = st.in;
            r->out = st.out;
            r->stage = NULL;
            r->stage_pows = 0;
        }
        return GP_REQ_FAILED;
    }
    if (q->own.knobs->stats && me.done_ns != 0)
        gp_stat_add_to(q->own.stats, GP_ST_RESUME_NS, gp_now_ns() - me.done_ns);

    /* No lock, no signal: a job that took its result usually queues its next request at once, and
     * that append wakes the dispatcher; one that does not is covered by the timer. The count stays
     * at least async_inflight (read under the lock), as this job's batch left that count first. */
    atomic_fetch_sub_explicit(&q->async_waiting, 1, memory_order_relaxed);
    stage_out(r, &st);
    return r->status;
}

int gp_queue_submit(gp_queue *q, gp_request *r)
{
    gp_queue_entry me = { .req = r, .notify = NULL };
    uint64_t gen, spin_until;

    if (gp_async_in_job())
        return submit_async(q, r);
    prepare(q, r);
    spin_until = gp_now_ns() + (uint64_t)q->own.knobs->spin_us * 1000u;
    atomic_init(&me.done, 0);
    pthread_mutex_lock(&q->lock);
    if (!append(q, &me)) {
        pthread_mutex_unlock(&q->lock);
        return q->own.run(q->own.ctx, r, 1), r->status;   /* run alone rather than fail */
    }
    q->active++;
    gen = q->generation;

    while (!atomic_load_explicit(&me.done, memory_order_acquire)) {
        int pending, why;

        drain_inbox(q);   /* jobs queued meanwhile join the batch this caller may lead */
        pending = q->generation == gen;   /* still in the batch being gathered */
        why = pending ? should_flush(q, gp_now_ns()) : FLUSH_NO;

        if (why != FLUSH_NO) {
            count_flush(q, why);
            lead(q);
            continue;
        }
        wait_a_while(q, &me, pending, spin_until);
    }
    q->active--;
    /* Whoever waits in the pending batch may now be the last one active: let them re-check. */
    if (q->npending > 0) {
        pthread_cond_broadcast(&q->cond);
        if (q->npending_async > 0)
            pthread_cond_signal(&q->dispatch_cond);
    }
    pthread_mutex_unlock(&q->lock);
    return r->status;
}
