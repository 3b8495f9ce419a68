/* SPDX-License-Identifier: Apache-2.0 */
/* The copy crew: large memcpys spread over helper threads, piece by piece, in order (copy_crew.h). */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
# include <emmintrin.h>
#endif

#include "batching/copy_crew.h"

/* Threads of a forked child's first start: the parent's threads are not in the child, and its lock
 * may have been held by one of them at the fork, so the child makes everything afresh. */
static pthread_mutex_t crew_start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t crew_atfork_once = PTHREAD_ONCE_INIT;

/* crew_start_lock is held across a fork, so the child never inherits it taken. */
static void start_lock_take(void)
{
    pthread_mutex_lock(&crew_start_lock);
}

static void start_lock_give(void)
{
    pthread_mutex_unlock(&crew_start_lock);
}

static void crew_atfork(void)
{
    pthread_atfork(start_lock_take, start_lock_give, start_lock_give);
}

static void crew_fresh(gp_copy_crew *cr)
{
    pthread_mutex_init(&cr->lock, NULL);
    pthread_cond_init(&cr->wake, NULL);
    pthread_cond_init(&cr->left, NULL);
    cr->head = cr->tail = NULL;
    atomic_store(&cr->started_threads, 0);
    cr->nthreads = 0;
    cr->stopping = 0;
    cr->ready = 0;
    cr->pid = 0;
}

void gp_copy_crew_init(gp_copy_crew *cr, int threads)
{
    pthread_once(&crew_atfork_once, crew_atfork);
    memset(cr, 0, sizeof(*cr));
    crew_fresh(cr);
    cr->want = threads < 0 ? 0 : threads > GP_COPY_CREW_MAX ? GP_COPY_CREW_MAX : threads;
}

void gp_copy_piece_range(const gp_copy_run *run, size_t k, size_t *off, size_t *len)
{
    *off = k * run->piece;
    *len = k + 1 < run->npieces ? run->piece : run->len - *off;
}

/*
 * Stores that bypass the caches (non-temporal, x86 SSE2; plain memcpy elsewhere), for pieces bound
 * for the GPU (GP_COPY_STREAMING): no core reads the pinned arena again, the DMA reads it from
 * DRAM. Ordinary stores first read each destination line into the cache and later write it back,
 * so a copy moves three bytes through DRAM for each byte copied; streaming stores move two, and the
 * crew's copies share DRAM with the DMA transfers beside them (bench/RESULTS.md, "A lone caller
 * from pageable memory"). Streaming stores are weakly ordered: the fence makes them visible before
 * the piece is marked done (a release store does not order them on x86).
 */
void gp_copy_streaming(uint8_t *dst, const uint8_t *src, size_t len)
{
#if defined(__SSE2__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;

    if (head > len)
        head = len;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    len -= head;
    for (; len >= 64; len -= 64, dst += 64, src += 64) {
        const __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
        const __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));

        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
    _mm_sfence();
#endif
    memcpy(dst, src, len);
}

/* Copy piece k (claimed by the caller), once its source is there. */
static void copy_piece(gp_copy_run *run, size_t k)
{
    size_t off, len;

    if (run->ready != NULL && !run->ready(run->ready_arg, k)) {
        atomic_store_explicit(&run->failed, 1, memory_order_relaxed);
    } else {
        gp_copy_piece_range(run, k, &off, &len);
        if (run->flags & GP_COPY_STREAMING)
            gp_copy_streaming(run->dst + off, run->src + off, len);
        else
            memcpy(run->dst + off, run->src + off, len);
    }
    atomic_store_explicit(&run->done[k], 1, memory_order_release);
}

/* Claim and copy pieces until none is left to claim. */
static void run_pieces(gp_copy_run *run)
{
    size_t k;

    while ((k = atomic_fetch_add_explicit(&run->next, 1, memory_order_relaxed)) < run->npieces)
        copy_piece(run, k);
}

/* Under the crew's lock. */
static void unlist(gp_copy_crew *cr, gp_copy_run *run)
{
    gp_copy_run **p = &cr->head, *prev = NULL;

    if (!run->listed)
        return;
    while (*p != NULL && *p != run) {
        prev = *p;
        p = &(*p)->next_run;
    }
    if (*p == run) {
        *p = run->next_run;
        if (cr->tail == run)
            cr->tail = prev;
    }
    run->next_run = NULL;
    run->listed = 0;
}

/* A clock of its own, not base's gp_now_ns: the crew also builds alone, into bench/hostcopy_bench and
 * tests/unit/test_copy_crew. */
static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Out of work (lock not held): watch `posted` for a while; 1 if a run was listed meanwhile. */
static int linger(gp_copy_crew *cr, unsigned seen)
{
    const uint64_t until = now_ns() + GP_COPY_LINGER_NS;

    do {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&cr->posted, memory_order_relaxed) != seen)
                return 1;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    } while (now_ns() < until);
    return 0;
}

static void *crew_main(void *arg)
{
    gp_copy_crew *cr = arg;
    const int lingers = atomic_fetch_add(&cr->started_threads, 1) < GP_COPY_LINGERERS;
    int quiet = 0;                 /* the last run it helped asked for no lingering */

    pthread_mutex_lock(&cr->lock);
    for (;;) {
        gp_copy_run *run;

        if (lingers && !quiet && !cr->stopping && cr->head == NULL) {
            const unsigned seen = atomic_load_explicit(&cr->posted, memory_order_relaxed);

            pthread_mutex_unlock(&cr->lock);
            (void)linger(cr, seen);
            pthread_mutex_lock(&cr->lock);
        }
        while (!cr->stopping && cr->head == NULL)
            pthread_cond_wait(&cr->wake, &cr->lock);
        if (cr->stopping)
            break;
        run = cr->head;
        run->helpers++;
        quiet = (run->flags & GP_COPY_NO_LINGER) != 0;   /* read while the run cannot go */
        pthread_mutex_unlock(&cr->lock);
        run_pieces(run);
        pthread_mutex_lock(&cr->lock);
        unlist(cr, run);   /* every piece is claimed now */
        if (--run->helpers == 0)
            pthread_cond_broadcast(&cr->left);
    }
    pthread_mutex_unlock(&cr->lock);
    return NULL;
}

/* Start the helper threads once per process (signals blocked: they belong to the application's
 * threads). Under crew_start_lock. */
static void crew_start(gp_copy_crew *cr)
{
    sigset_t all, old;

    if (cr->ready && cr->pid == getpid())
        return;
    if (cr->ready)                     /* a forked child */
        crew_fresh(cr);
    cr->ready = 1;
    cr->pid = getpid();
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < cr->want; i++) {
        if (pthread_create(&cr->threads[i], NULL, crew_main, cr) != 0)
            break;
        cr->nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int gp_copy_start(gp_copy_crew *cr, gp_copy_run *run, uint8_t *dst, const uint8_t *src, size_t len, size_t piece,
                  unsigned flags)
{
    return gp_copy_start_when(cr, run, dst, src, len, piece, flags, NULL, NULL);
}

int gp_copy_start_when(gp_copy_crew *cr, gp_copy_run *run, uint8_t *dst, const uint8_t *src, size_t len,
                       size_t piece, unsigned flags, int (*ready)(void *arg, size_t k), void *arg)
{
    memset(run, 0, sizeof(*run));
    run->flags = flags;
    run->ready = ready;
    run->ready_arg = arg;
    run->dst = dst;
    run->src = src;
    run->len = len;
    run->piece = piece > 0 && piece < len ? piece : len > 0 ? len : 1;
    run->npieces = len == 0 ? 0 : (len + run->piece - 1) / run->piece;
    run->done = run->small_done;
    if (run->npieces > sizeof(run->small_done) && (run->done = calloc(run->npieces, sizeof(*run->done))) == NULL)
        return 0;
    run->started = 1;
    if (cr->want == 0 || run->npieces < 2)
        return 1;                      /* the caller copies alone */
    pthread_mutex_lock(&crew_start_lock);
    crew_start(cr);
    pthread_mutex_unlock(&crew_start_lock);
    if (cr->nthreads == 0)
        return 1;
    pthread_mutex_lock(&cr->lock);
    run->listed = 1;
    if (cr->tail != NULL)
        cr->tail->next_run = run;
    else
        cr->head = run;
    cr->tail = run;
    atomic_fetch_add_explicit(&cr->posted, 1, memory_order_relaxed);
    pthread_cond_broadcast(&cr->wake);
    pthread_mutex_unlock(&cr->lock);
    return 1;
}

void gp_copy_wait_piece(gp_copy_run *run, size_t k)
{
    while (!atomic_load_explicit(&run->done[k], memory_order_acquire)) {
        size_t j = atomic_fetch_add_explicit(&run->next, 1, memory_order_relaxed);

        if (j < run->npieces) {
            copy_piece(run, j);
        } else {
            sched_yield();             /* a crew thread is copying piece k */
        }
    }
}

void gp_copy_help(gp_copy_run *run)
{
    if (run->started)
        run_pieces(run);
}

int gp_copy_finish(gp_copy_crew *cr, gp_copy_run *run)
{
    if (!run->started)
        return 1;
    run_pieces(run);
    if (cr->nthreads > 0) {            /* crew threads may be inside the run */
        pthread_mutex_lock(&cr->lock);
        unlist(cr, run);
        while (run->helpers > 0)       /* a helper leaves only after its pieces are copied */
            pthread_cond_wait(&cr->left, &cr->lock);
        pthread_mutex_unlock(&cr->lock);
    }
    if (run->done != run->small_done)
        free(run->done);
    run->done = NULL;
    run->started = 0;
    return !atomic_load_explicit(&run->failed, memory_order_relaxed);
}

void gp_copy_crew_stop(gp_copy_crew *cr)
{
    if (cr->ready && cr->pid == getpid() && cr->nthreads > 0) {
        pthread_mutex_lock(&cr->lock);
        cr->stopping = 1;
        pthread_cond_broadcast(&cr->wake);
        pthread_mutex_unlock(&cr->lock);
        for (int i = 0; i < cr->nthreads; i++)
            pthread_join(cr->threads[i], NULL);
    }
    cr->nthreads = 0;
    cr->ready = 0;
    pthread_cond_destroy(&cr->wake);
    pthread_cond_destroy(&cr->left);
    pthread_mutex_destroy(&cr->lock);
}
