/* SPDX-License-Identifier: Apache-2.0 */
/* EVP benchmark: threads x message size x cipher, gpuprov against the default provider. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <openssl/async.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/provider.h>

/*
 * What one cell measures (one provider, cipher, message size and thread count):
 *   - every thread has its own EVP_CIPHER_CTX and key; one operation is what a TLS record costs
 *     the cipher: an IV-only re-init with a fresh IV, 13 bytes of AAD (AEAD only), one update of
 *     `size` bytes into a separate buffer, Final, and GET_TAG (AEAD only);
 *   - the threads warm up, meet at a barrier, run for --seconds, and count operations;
 *   - GB/s = plaintext bytes / wall seconds (10^9 bytes); CPU s per GB = user+sys time of the
 *     whole process over the timed run (so the provider's own helper threads count) per 10^9 bytes;
 *   - with --jobs N > 0 every thread keeps N operations in flight as ASYNC_JOBs, each with its own
 *     context (what `openssl speed -async_jobs` does on one thread): a job that waits for the GPU
 *     pauses, and the thread waits for its jobs (--wait: their wait fds through poll, or through
 *     an epoll set; or the wait contexts' callback, which queues the job for its thread) and
 *     resumes those that are ready;
 *   - with one thread and no jobs, a separate latency run afterwards times single operations one
 *     at a time (a lone synchronous call, nothing else in flight) and reports their median and p99;
 *   - with --stream an operation is one update of `size` bytes on a message that goes on (one IV,
 *     started at set-up, as openssl speed's loop does): where gpuprov routes a long stream, and what
 *     one large update costs a single caller.
 * Before any timing the cell's cipher encrypts a fixed message and must give the same ciphertext
 * and tag as the default provider: a benchmark that measures wrong answers is worthless.
 */

#define AAD_LEN 13
#define TAG_LEN 16
#define MAX_IV 16
#define WARMUP_OPS 16
#define LAT_MAX_SAMPLES 200000
#define MAX_LIST 32
#define MAX_THREADS 1024
#define MAX_SIZE (64 << 20)
#define MAX_JOBS 1024

#ifndef GP_BUILD_MODULE_DIR
#define GP_BUILD_MODULE_DIR "build/provider"
#endif

/* ---- options ---- */

/* How a thread of async jobs learns that a paused job can go on (--wait). */
enum { WAIT_POLL, WAIT_EPOLL, WAIT_CALLBACK };
static const char *const wait_names[] = { "poll", "epoll", "callback" };

typedef struct {
    int threads[MAX_LIST], nthreads;
    int sizes[MAX_LIST], nsizes;
    int jobs[MAX_LIST], njobs;   /* async jobs per thread; 0: synchronous calls */
    char *ciphers[MAX_LIST];
    int nciphers;
    char *providers[MAX_LIST];   /* "default", "gpuprov" or "gpuprov:<executor>" */
    int nproviders;
    double seconds, lat_seconds;
    int wait;                    /* --wait: WAIT_POLL, WAIT_EPOLL or WAIT_CALLBACK */
    int stream_mode;             /* --stream: an operation is one update of a long message */
    const char *csv, *module_dir;
} options;

/* ---- one provider under test: its library context, kept for all of its cells ---- */

typedef struct {
    const char *spec;            /* as given on the command line */
    int is_gpuprov;
    char want_exec[16];          /* "gpuprov:<executor>": the executor it must serve with */
    char executor[32];           /* what gpuprov reports, "-" for the default provider */
    OSSL_LIB_CTX *libctx;
    OSSL_PROVIDER *prov, *deflt;
    const char *propq;
} provider_run;

/* ---- one cell's result ---- */

typedef struct {
    int prov_idx, cipher_idx, size, threads, jobs;
    int ok;                      /* 0: failed (check or run); its figures are not reported */
    double wall_s, cpu_s;
    uint64_t ops, pauses;         /* pauses: async jobs that waited (gpuprov's batches) */
    double gbps, cpu_s_per_gb;
    double lat_med_us, lat_p99_us;
    size_t lat_samples;
} result;

/* ---- the threads of a cell ---- */

typedef struct {
    const EVP_CIPHER *cipher;
    int aead, size, ivlen, jobs, wait;
    int stream_mode;             /* --stream */
    pthread_barrier_t start;
    atomic_int stop;
    atomic_int failed;
} cell_shared;

/* One operation stream: a context and its buffers (a thread's own, or one of its async jobs'). */
typedef struct stream {
    cell_shared *sh;
    int index;                   /* seeds its key, data and IVs: thread, or thread * MAX_JOBS + job */
    EVP_CIPHER_CTX *ctx;
    uint8_t *in, *out;
    uint8_t key[32], iv[MAX_IV], aad[AAD_LEN], tag[TAG_LEN];
    uint64_t n;                  /* messages started, for the IV */
    uint64_t msg_bytes;          /* --stream: bytes of the message in progress */
    /* async mode */
    ASYNC_JOB *job;              /* paused job, or NULL */
    ASYNC_WAIT_CTX *wctx;
    int ret;                     /* the finished job's result */
    struct worker *w;            /* --wait callback: the thread the callback queues the job for */
    struct stream *next_ready;   /* in that thread's ready list */
    atomic_int queued;           /* in that list now */
} stream;

typedef struct worker {
    cell_shared *sh;
    int index;
    pthread_t tid;
    stream *st;                  /* 1 stream, or sh->jobs */
    int nst;
    uint64_t ops, pauses;
    /* --wait callback: jobs whose wait context's callback ran (a lock-free stack pushed by whoever
     * completes them), and an eventfd written only while the thread sleeps on it */
    _Atomic(stream *) ready_list;
    atomic_int asleep;
    int wake_fd;
} worker;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6
           + (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static void print_ssl_errors(void)
{
    ERR_print_errors_fp(stderr);
}

/* One message: IV-only re-init, AAD (AEAD), one update of `len` bytes, Final, tag (AEAD). */
static int encrypt_one(EVP_CIPHER_CTX *ctx, int aead, const uint8_t *iv, const uint8_t *aad,
                       const uint8_t *in, uint8_t *out, int len, uint8_t *tag)
{
    int outl = 0, finl = 0;

    if (!EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL))
        return 0;
    if (aead && !EVP_EncryptUpdate(ctx, NULL, &outl, aad, AAD_LEN))
        return 0;
    if (!EVP_EncryptUpdate(ctx, out, &outl, in, len))
        return 0;
    if (!EVP_EncryptFinal_ex(ctx, out + outl, &finl) || outl + finl != len)
        return 0;
    if (aead && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG_LEN, tag) <= 0)
        return 0;
    return 1;
}

/* A fresh IV per message: 2 bytes of thread index and 6 bytes of message counter, zeros around.
 * A 16-byte IV carries them in bytes 4..11: for CTR the low 4 bytes are the block counter, so no
 * two messages' counter blocks overlap; for ChaCha20 the first 4 bytes are its block counter. */
static void next_iv(uint8_t *iv, int ivlen, int thread, uint64_t counter)
{
    uint8_t *p = iv + (ivlen >= 16 ? 4 : 0);

    memset(iv, 0, (size_t)ivlen);
    p[0] = (uint8_t)(thread >> 8);
    p[1] = (uint8_t)thread;
    for (int i = 0; i < 6; i++)
        p[2 + i] = (uint8_t)(counter >> (8 * (5 - i)));
}

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1u;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static void *xalloc(size_t n)
{
    /* 64-byte aligned, as real record buffers usually are. */
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);

    if (p == NULL) {
        fprintf(stderr, "evp_bench: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* A stream's setup: its own context, key and buffers (streams never share a key). */
static int stream_setup(stream *s, cell_shared *sh, int index)
{
    s->sh = sh;
    s->index = index;
    s->in = xalloc((size_t)sh->size);
    s->out = xalloc((size_t)sh->size + TAG_LEN);
    fill_pattern(s->in, (size_t)sh->size, 0x1000u + (uint32_t)index);
    fill_pattern(s->key, sizeof(s->key), 0x2000u + (uint32_t)index);
    fill_pattern(s->aad, sizeof(s->aad), 0x3000u + (uint32_t)index);
    next_iv(s->iv, sh->ivlen, index, 0);
    s->n = 1;
    s->ctx = EVP_CIPHER_CTX_new();
    return s->ctx != NULL && EVP_EncryptInit_ex2(s->ctx, sh->cipher, s->key, s->iv, NULL);
}

static void stream_free(stream *s)
{
    EVP_CIPHER_CTX_free(s->ctx);
    ASYNC_WAIT_CTX_free(s->wctx);
    free(s->in);
    free(s->out);
}

/*
 * --wait callback: gpuprov publishes a result and then calls the callback (an application resumed
 * first finds its result), so a job can finish, and its cell end, while the dispatcher that woke
 * it has still to make the call. What the callback touches (the worker with its eventfd, and the
 * stream structs) is therefore kept until the providers are unloaded, which joins their
 * dispatchers. Buffers, contexts and wait contexts go at the cell's end as usual.
 */
typedef struct retired {
    struct retired *next;
    worker *ws;
    int n;
} retired;

static retired *retired_cells;

static void retire_workers(worker *ws, int n)
{
    retired *r = malloc(sizeof(*r));

    if (r == NULL) {   /* leak them rather than free what a late callback may touch */
        fprintf(stderr, "evp_bench: out of memory keeping a cell's workers\n");
        return;
    }
    r->next = retired_cells;
    r->ws = ws;
    r->n = n;
    retired_cells = r;
}

/* After every provider is unloaded: no callback can come any more. */
static void free_retired_workers(void)
{
    while (retired_cells != NULL) {
        retired *r = retired_cells;

        retired_cells = r->next;
        for (int i = 0; i < r->n; i++) {
            if (r->ws[i].wake_fd >= 0)
                close(r->ws[i].wake_fd);
            free(r->ws[i].st);
        }
        free(r->ws);
        free(r);
    }
}

/* --stream: a message restarts with a fresh IV before it passes 2^35 bytes, below every per-IV
 * limit (SP 800-38D §5.2.1.1: 2^36 - 32 bytes for GCM; RFC 8439 §2.8: 256 GiB for
 * ChaCha20-Poly1305; a 32-bit ChaCha20 block counter). */
#define STREAM_MSG_MAX (UINT64_C(1) << 35)

/* The stream's next operation: a message (a fresh IV under its key), or with --stream the next
 * update of its message. */
static int stream_op(stream *s)
{
    cell_shared *sh = s->sh;

    if (sh->stream_mode) {
        int outl = 0;

        if (s->msg_bytes + (uint64_t)sh->size > STREAM_MSG_MAX) {
            next_iv(s->iv, sh->ivlen, s->index, s->n++);
            if (!EVP_EncryptInit_ex2(s->ctx, NULL, NULL, s->iv, NULL))
                return 0;
            s->msg_bytes = 0;
        }
        s->msg_bytes += (uint64_t)sh->size;
        return EVP_EncryptUpdate(s->ctx, s->out, &outl, s->in, sh->size) && outl == sh->size;
    }
    next_iv(s->iv, sh->ivlen, s->index, s->n++);
    return encrypt_one(s->ctx, sh->aead, s->iv, s->aad, s->in, s->out, sh->size, s->tag);
}

static int stream_job(void *arg)
{
    return stream_op(*(stream **)arg);
}

static void stream_failed(worker *w, const char *what)
{
    fprintf(stderr, "evp_bench: thread %d: %s after %llu messages\n", w->index, what,
            (unsigned long long)w->ops);
    print_ssl_errors();
    atomic_store(&w->sh->failed, 1);
    atomic_store(&w->sh->stop, 1);
}

#define MAX_JOB_FDS 4   /* wait fds a paused job may have (gpuprov registers one) */

/* After a job paused: bring the epoll set up to date with the fds its wait context added or deleted
 * (ASYNC_WAIT_CTX_get_changed_fds, as event-driven servers do). Returns whether the job has an fd
 * to wait on. */
static int track_fds(worker *w, int ep, stream *s, int j)
{
    OSSL_ASYNC_FD add[MAX_JOB_FDS], del[MAX_JOB_FDS];
    size_t nadd = 0, ndel = 0, nall = 0;

    if (!ASYNC_WAIT_CTX_get_changed_fds(s->wctx, NULL, &nadd, NULL, &ndel) || nadd > MAX_JOB_FDS
        || ndel > MAX_JOB_FDS || !ASYNC_WAIT_CTX_get_changed_fds(s->wctx, add, &nadd, del, &ndel))
        return 0;
    for (size_t k = 0; k < ndel; k++)
        (void)epoll_ctl(ep, EPOLL_CTL_DEL, del[k], NULL);   /* closed already: gone from the set */
    for (size_t k = 0; k < nadd; k++) {
        struct epoll_event e = { .events = EPOLLIN, .data.u32 = (uint32_t)j };

        if (epoll_ctl(ep, EPOLL_CTL_ADD, add[k], &e) != 0 && errno != EEXIST)
            stream_failed(w, "epoll_ctl failed");
    }
    return ASYNC_WAIT_CTX_get_all_fds(s->wctx, NULL, &nall) && nall > 0;
}

/* --wait-fds poll: every paused job's wait fds, gathered afresh each round (openssl speed's way).
 * A job with none is marked ready and the round is busy. Returns the number of fds in pfd. */
static int gather_fds(worker *w, struct pollfd *pfd, int *owner, char *ready, int *busy)
{
    int np = 0;

    for (int j = 0; j < w->nst; j++) {
        stream *s = &w->st[j];
        OSSL_ASYNC_FD fds[MAX_JOB_FDS];
        size_t nfd = 0;

        if (s->job == NULL || ready[j])
            continue;
        if (!ASYNC_WAIT_CTX_get_all_fds(s->wctx, NULL, &nfd) || nfd == 0 || nfd > MAX_JOB_FDS
            || !ASYNC_WAIT_CTX_get_all_fds(s->wctx, fds, &nfd)) {
            ready[j] = 1;   /* nothing to wait on: resume it in the next round */
            *busy = 1;
            continue;
        }
        for (size_t k = 0; k < nfd; k++) {
            pfd[np].fd = fds[k];
            pfd[np].events = POLLIN;
            pfd[np].revents = 0;
            owner[np++] = j;
        }
    }
    return np;
}

/*
 * --wait callback: the wait context's callback (ASYNC_WAIT_CTX_set_callback(3), OpenSSL 3.0; what
 * libssl's SSL_set_async_callback installs) runs on the thread that completed the job's work, here
 * gpuprov's dispatcher. It pushes the job onto its thread's ready list and writes the thread's
 * eventfd only if the thread sleeps on it, and clears the flag as it does: one write per sleep
 * rather than one per job. The thread says it sleeps, then looks at the list; the callback pushes,
 * then looks at the flag; both sequentially consistent, so either the thread sees the job or the
 * callback sees it asleep.
 *
 * A callback may come before its job has paused (the work completed first; the job then never
 * pauses for it) and so find the job running another request, or already in the list: a job is
 * queued at most once (`queued`), and a job resumed by a callback that was not for its current
 * pause just pauses again, which the protocol allows.
 */
static int job_ready_cb(void *arg)
{
    stream *s = arg;
    worker *w = s->w;
    stream *head = atomic_load_explicit(&w->ready_list, memory_order_relaxed);
    uint64_t one = 1;

    if (atomic_exchange_explicit(&s->queued, 1, memory_order_acq_rel))
        return 1;
    do
        s->next_ready = head;
    while (!atomic_compare_exchange_weak_explicit(&w->ready_list, &head, s, memory_order_seq_cst,
                                                  memory_order_relaxed));
    /* Whoever finds the thread asleep wakes it, and only that one: the rest of a batch's
     * callbacks for this thread cost a push each. */
    if (atomic_load_explicit(&w->asleep, memory_order_seq_cst) && atomic_exchange_explicit(&w->asleep, 0, memory_order_seq_cst))
        while (write(w->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
            ;
    return 1;
}

/* --wait callback: mark the queued jobs ready; if there are none, sleep until the callback wakes
 * the thread. A second with no callback at all marks every paused job ready: a lost callback
 * would show as a slow cell, not a hung one. */
static void take_ready(worker *w, char *ready, int may_sleep)
{
    stream *list = atomic_exchange_explicit(&w->ready_list, NULL, memory_order_acquire), *next;

    if (list == NULL && may_sleep) {
        struct pollfd p = { .fd = w->wake_fd, .events = POLLIN };
        uint64_t v;
        int n = 1;

        atomic_store_explicit(&w->asleep, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&w->ready_list, memory_order_seq_cst) == NULL
            && (n = poll(&p, 1, 1000)) > 0 && read(w->wake_fd, &v, sizeof(v)) < 0)
            v = 0;   /* nothing to drain: the thread looks at its list either way */
        atomic_store_explicit(&w->asleep, 0, memory_order_relaxed);
        list = atomic_exchange_explicit(&w->ready_list, NULL, memory_order_acquire);
        if (n == 0 && list == NULL)
            for (int j = 0; j < w->nst; j++)
                ready[j] = w->st[j].job != NULL;
    }
    for (; list != NULL; list = next) {
        next = list->next_ready;   /* before the job may be queued again */
        atomic_store_explicit(&list->queued, 0, memory_order_release);
        ready[list - w->st] = 1;
    }
}

/*
 * The async loop: every idle stream starts its next message as a job; a job that pauses (gpuprov
 * waits for a batch) is resumed once it is ready: one of its wait fds is readable, or its wait
 * context's callback ran (--wait callback), or at once when it has neither. After the stop no
 * message starts, and the paused ones are run to their end. How the thread waits is --wait: poll
 * costs a thread O(jobs) per wake-up, and gpuprov's dispatcher wakes a batch's jobs one write
 * apart; epoll (level-triggered, over the fds the wait contexts added) costs O(ready jobs); with
 * callbacks the dispatcher pushes a job onto a list, and the thread pays a wake-up only when it
 * had nothing left to run.
 */
static void run_async(worker *w)
{
    cell_shared *sh = w->sh;
    struct pollfd *pfd = calloc((size_t)w->nst * MAX_JOB_FDS, sizeof(*pfd));
    int *owner = calloc((size_t)w->nst * MAX_JOB_FDS, sizeof(*owner));
    struct epoll_event *ev = calloc((size_t)w->nst, sizeof(*ev));
    char *ready = calloc((size_t)w->nst, 1);
    int ep = sh->wait == WAIT_EPOLL ? epoll_create1(EPOLL_CLOEXEC) : -1;

    if (pfd == NULL || owner == NULL || ev == NULL || ready == NULL || (sh->wait == WAIT_EPOLL && ep < 0)) {
        stream_failed(w, "out of memory, or epoll_create1 failed");
        goto out;
    }
    for (;;) {
        const int stopping = atomic_load_explicit(&sh->stop, memory_order_relaxed);
        int busy = 0, paused = 0, n;

        for (int j = 0; j < w->nst; j++) {
            stream *s = &w->st[j];
            stream *arg = s;
            int more = s->job == NULL ? !stopping : ready[j];

            ready[j] = 0;
            /* Resume or start, and start the stream's next message as soon as one finishes (as an
             * application would), until one pauses. */
            while (more) {
                more = 0;
                /* A new job's pause says afresh whether a callback will come. */
                if (sh->wait == WAIT_CALLBACK && s->job == NULL)
                    (void)ASYNC_WAIT_CTX_set_status(s->wctx, ASYNC_STATUS_UNSUPPORTED);
                switch (ASYNC_start_job(&s->job, s->wctx, &s->ret, stream_job, &arg, sizeof(arg))) {
                case ASYNC_FINISH:
                    if (s->ret)
                        w->ops++;
                    else if (!atomic_load(&sh->failed))
                        stream_failed(w, "encryption failed");
                    more = !atomic_load_explicit(&sh->stop, memory_order_relaxed);
                    break;
                case ASYNC_PAUSE:
                    w->pauses++;
                    /* With --wait callback, only a pause whose status says the callback will run
                     * (ASYNC_STATUS_OK, set by whoever paused) waits for it; any other is retried. */
                    if ((ep >= 0 && !track_fds(w, ep, s, j))
                        || (sh->wait == WAIT_CALLBACK && ASYNC_WAIT_CTX_get_status(s->wctx) != ASYNC_STATUS_OK)) {
                        ready[j] = 1;   /* nothing to wait on: resume it in the next round */
                        busy = 1;
                    }
                    break;
                default:   /* ASYNC_ERR, ASYNC_NO_JOBS: the pool was made for every stream */
                    s->job = NULL;
                    stream_failed(w, "ASYNC_start_job failed");
                    break;
                }
            }
            paused += s->job != NULL;
        }
        if (paused == 0 && stopping)
            break;
        if (paused == 0)
            continue;
        if (sh->wait == WAIT_CALLBACK) {
            take_ready(w, ready, !busy);
        } else if (ep >= 0) {
            n = epoll_wait(ep, ev, w->nst, busy ? 0 : 1000);
            for (int k = 0; k < n; k++)
                if (w->st[ev[k].data.u32].job != NULL)
                    ready[ev[k].data.u32] = 1;
        } else {
            int np = gather_fds(w, pfd, owner, ready, &busy);

            if (np > 0 && poll(pfd, (nfds_t)np, busy ? 0 : 1000) > 0)
                for (int k = 0; k < np; k++)
                    if (pfd[k].revents != 0)
                        ready[owner[k]] = 1;
        }
    }
out:
    if (ep >= 0)
        close(ep);
    free(pfd);
    free(owner);
    free(ev);
    free(ready);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cell_shared *sh = w->sh;
    int ok, async_ready = 0;

    w->nst = sh->jobs > 0 ? sh->jobs : 1;
    w->st = calloc((size_t)w->nst, sizeof(*w->st));
    atomic_init(&w->ready_list, NULL);
    atomic_init(&w->asleep, 0);
    w->wake_fd = sh->jobs > 0 && sh->wait == WAIT_CALLBACK ? eventfd(0, EFD_CLOEXEC) : -1;
    ok = w->st != NULL && (w->wake_fd >= 0 || sh->jobs == 0 || sh->wait != WAIT_CALLBACK);
    if (ok && sh->jobs > 0)
        ok = async_ready = ASYNC_init_thread((size_t)sh->jobs, (size_t)sh->jobs);
    for (int j = 0; ok && j < w->nst; j++) {
        stream *s = &w->st[j];

        ok = stream_setup(s, sh, sh->jobs > 0 ? w->index * MAX_JOBS + j : w->index)
             && (sh->jobs == 0 || (s->wctx = ASYNC_WAIT_CTX_new()) != NULL);
        s->w = w;
        if (ok && sh->jobs > 0 && sh->wait == WAIT_CALLBACK)
            ok = ASYNC_WAIT_CTX_set_callback(s->wctx, job_ready_cb, s);
        /* warm-up, synchronously: the first stream as long as a synchronous thread, one each after */
        for (int i = 0; ok && i < (j == 0 ? WARMUP_OPS : 1); i++)
            ok = stream_op(s);
    }
    if (!ok) {
        fprintf(stderr, "evp_bench: thread %d: setup or warm-up failed\n", w->index);
        print_ssl_errors();
        atomic_store(&sh->failed, 1);
    }
    pthread_barrier_wait(&sh->start);   /* always reached, or the others would wait forever */
    if (ok && sh->jobs > 0) {
        run_async(w);
    } else {
        while (ok && !atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
            if (!stream_op(&w->st[0])) {
                stream_failed(w, "encryption failed");
                break;
            }
            w->ops++;
        }
    }
    if (async_ready)
        ASYNC_cleanup_thread();
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

static uint64_t ns_between(const struct timespec *a, const struct timespec *b)
{
    return (uint64_t)(b->tv_sec - a->tv_sec) * 1000000000u + (uint64_t)b->tv_nsec
           - (uint64_t)a->tv_nsec;
}

/* Latency of lone synchronous messages, one at a time on the calling thread: median and p99. */
static int measure_latency(cell_shared *sh, double seconds, result *r)
{
    stream w;
    uint64_t *samples = calloc(LAT_MAX_SAMPLES, sizeof(*samples));
    size_t n = 0;
    int ok;
    double deadline;

    memset(&w, 0, sizeof(w));
    ok = samples != NULL && stream_setup(&w, sh, 0);
    for (int i = 0; ok && i < WARMUP_OPS; i++)
        ok = stream_op(&w);
    deadline = now_s() + seconds;
    while (ok && n < LAT_MAX_SAMPLES) {
        struct timespec t0, t1;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        ok = stream_op(&w);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        samples[n++] = ns_between(&t0, &t1);
        if ((double)t1.tv_sec + (double)t1.tv_nsec * 1e-9 >= deadline)
            break;
    }
    if (!ok) {
        fprintf(stderr, "evp_bench: latency run failed\n");
        print_ssl_errors();
    } else if (n > 0) {
        size_t p99 = (n * 99 + 99) / 100;   /* ceil(0.99 n), the nearest-rank p99 */

        qsort(samples, n, sizeof(*samples), cmp_u64);
        r->lat_med_us = (n % 2 ? (double)samples[n / 2]
                               : 0.5 * (double)(samples[n / 2 - 1] + samples[n / 2])) * 1e-3;
        r->lat_p99_us = (double)samples[p99 - 1] * 1e-3;
        r->lat_samples = n;
    }
    stream_free(&w);
    free(samples);
    return ok;
}

/* The cell's cipher against the default provider's on a fixed message: ciphertext and tag. */
static int check_against_default(const provider_run *p, const char *name, const EVP_CIPHER *c,
                                 int aead, int size)
{
    EVP_CIPHER *ref = EVP_CIPHER_fetch(p->libctx, name, "provider=default");
    EVP_CIPHER_CTX *a = EVP_CIPHER_CTX_new(), *b = EVP_CIPHER_CTX_new();
    uint8_t key[32], iv[MAX_IV], aad[AAD_LEN], tag_a[TAG_LEN] = { 0 }, tag_b[TAG_LEN] = { 0 };
    uint8_t *msg = xalloc((size_t)size), *out_a = xalloc((size_t)size), *out_b = xalloc((size_t)size);
    int ok = 0;

    fill_pattern(key, sizeof(key), 7);
    fill_pattern(iv, sizeof(iv), 8);
    fill_pattern(aad, sizeof(aad), 9);
    fill_pattern(msg, (size_t)size, 10);
    if (ref == NULL || a == NULL || b == NULL) {
        fprintf(stderr, "evp_bench: check: cannot fetch %s from the default provider\n", name);
    } else if (!EVP_EncryptInit_ex2(a, c, key, NULL, NULL)
               || !encrypt_one(a, aead, iv, aad, msg, out_a, size, tag_a)) {
        fprintf(stderr, "evp_bench: check: %s through %s failed\n", name, p->spec);
    } else if (!EVP_EncryptInit_ex2(b, ref, key, NULL, NULL)
               || !encrypt_one(b, aead, iv, aad, msg, out_b, size, tag_b)) {
        fprintf(stderr, "evp_bench: check: %s through the default provider failed\n", name);
    } else if (memcmp(out_a, out_b, (size_t)size) != 0 || memcmp(tag_a, tag_b, TAG_LEN) != 0) {
        fprintf(stderr, "evp_bench: check: %s, %d bytes: %s's %s differs from the default "
                "provider's\n", name, size, p->spec,
                memcmp(out_a, out_b, (size_t)size) != 0 ? "ciphertext" : "tag");
    } else {
        ok = 1;
    }
    if (!ok)
        print_ssl_errors();
    EVP_CIPHER_CTX_free(a);
    EVP_CIPHER_CTX_free(b);
    EVP_CIPHER_free(ref);
    free(msg);
    free(out_a);
    free(out_b);
    return ok;
}

/* One cell: check, then the timed run, then (one thread) the latency run. */
static void run_cell(const provider_run *p, const char *name, int size, int nthreads, int jobs,
                     const options *o, result *r)
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(p->libctx, name, p->propq);
    cell_shared sh;
    worker *ws;
    double t0, t1, c0, c1;
    int started = 0;

    r->ok = 0;
    if (c == NULL) {
        fprintf(stderr, "evp_bench: %s: cannot fetch %s with \"%s\"\n", p->spec, name, p->propq);
        print_ssl_errors();
        return;
    }
    if (p->is_gpuprov) {
        const char *pn = OSSL_PROVIDER_get0_name(EVP_CIPHER_get0_provider(c));

        if (pn == NULL || strcmp(pn, "gpuprov") != 0) {
            fprintf(stderr, "evp_bench: %s is served by %s, not gpuprov\n", name, pn ? pn : "?");
            EVP_CIPHER_free(c);
            return;
        }
    }
    memset(&sh, 0, sizeof(sh));
    sh.cipher = c;
    sh.size = size;
    sh.jobs = jobs;
    sh.wait = o->wait;
    sh.stream_mode = o->stream_mode;
    sh.aead = (EVP_CIPHER_get_flags(c) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0;
    sh.ivlen = EVP_CIPHER_get_iv_length(c);
    /* Stream and AEAD modes only: a padded block mode's Final would write past `size`. */
    if (EVP_CIPHER_get_block_size(c) != 1) {
        fprintf(stderr, "evp_bench: %s: block size %d; only stream-like ciphers (CTR, GCM, "
                "ChaCha20) are supported\n", name, EVP_CIPHER_get_block_size(c));
        EVP_CIPHER_free(c);
        return;
    }
    if (sh.ivlen <= 0 || sh.ivlen > MAX_IV || EVP_CIPHER_get_key_length(c) > 32) {
        fprintf(stderr, "evp_bench: %s: unsupported IV or key length\n", name);
        EVP_CIPHER_free(c);
        return;
    }
    if (!check_against_default(p, name, c, sh.aead, size)) {
        EVP_CIPHER_free(c);
        return;
    }

    ws = calloc((size_t)nthreads, sizeof(*ws));
    if (ws == NULL || pthread_barrier_init(&sh.start, NULL, (unsigned)nthreads + 1) != 0) {
        fprintf(stderr, "evp_bench: cannot set up %d threads\n", nthreads);
        exit(2);
    }
    for (int i = 0; i < nthreads; i++) {
        ws[i].sh = &sh;
        ws[i].index = i;
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "evp_bench: pthread_create: %s\n", strerror(errno));
            exit(2);   /* the barrier would never open */
        }
        started++;
    }
    pthread_barrier_wait(&sh.start);
    t0 = now_s();
    c0 = cpu_s();
    {
        struct timespec d;

        d.tv_sec = (time_t)o->seconds;
        d.tv_nsec = (long)((o->seconds - (double)d.tv_sec) * 1e9);
        while (nanosleep(&d, &d) != 0 && errno == EINTR)
            ;
    }
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < started; i++)
        pthread_join(ws[i].tid, NULL);
    t1 = now_s();
    c1 = cpu_s();

    r->wall_s = t1 - t0;
    r->cpu_s = c1 - c0;
    r->ops = 0;
    r->pauses = 0;
    for (int i = 0; i < nthreads; i++) {
        r->ops += ws[i].ops;
        r->pauses += ws[i].pauses;
        for (int j = 0; ws[i].st != NULL && j < ws[i].nst; j++)
            stream_free(&ws[i].st[j]);
        if (sh.wait != WAIT_CALLBACK || jobs == 0) {
            if (ws[i].wake_fd >= 0)
                close(ws[i].wake_fd);
            free(ws[i].st);
        }
    }
    if (sh.wait == WAIT_CALLBACK && jobs > 0)
        retire_workers(ws, nthreads);
    else
        free(ws);
    pthread_barrier_destroy(&sh.start);
    if (!atomic_load(&sh.failed) && r->ops > 0) {
        double gb = (double)r->ops * (double)size * 1e-9;

        r->gbps = gb / r->wall_s;
        r->cpu_s_per_gb = r->cpu_s / gb;
        r->ok = nthreads != 1 || jobs != 0 || measure_latency(&sh, o->lat_seconds, r);
    }
    EVP_CIPHER_free(c);
}

/* ---- providers ---- */

static int provider_open(provider_run *p, const char *spec, const char *module_dir)
{
    memset(p, 0, sizeof(*p));
    p->spec = spec;
    strcpy(p->executor, "-");
    if (strcmp(spec, "default") == 0) {
        p->propq = "provider=default";
    } else if (strcmp(spec, "gpuprov") == 0 || strncmp(spec, "gpuprov:", 8) == 0) {
        p->is_gpuprov = 1;
        p->propq = "provider=gpuprov";
        if (spec[7] == ':') {
            if (strlen(spec + 8) == 0 || strlen(spec + 8) >= sizeof(p->want_exec)) {
                fprintf(stderr, "evp_bench: bad provider '%s'\n", spec);
                return 0;
            }
            strcpy(p->want_exec, spec + 8);
        }
    } else {
        fprintf(stderr, "evp_bench: unknown provider '%s' (default, gpuprov, gpuprov:<executor>)\n",
                spec);
        return 0;
    }

    p->libctx = OSSL_LIB_CTX_new();
    if (p->libctx == NULL)
        goto err;
    if (p->is_gpuprov) {
        if (!OSSL_PROVIDER_set_default_search_path(p->libctx, module_dir))
            goto err;
        const char *env = getenv("GPUPROV_BACKEND");
        char *saved = env != NULL ? strdup(env) : NULL;

        /* gpuprov reads its knobs when it is loaded: "gpuprov:<executor>" sets the executor for
         * this instance only, and the environment is put back afterwards. */
        if (p->want_exec[0] != '\0')
            setenv("GPUPROV_BACKEND", p->want_exec, 1);
        p->prov = OSSL_PROVIDER_load(p->libctx, "gpuprov");
        if (p->want_exec[0] != '\0') {
            if (saved != NULL)
                setenv("GPUPROV_BACKEND", saved, 1);
            else
                unsetenv("GPUPROV_BACKEND");
        }
        free(saved);
        if (p->prov == NULL) {
            fprintf(stderr, "evp_bench: cannot load gpuprov from %s\n", module_dir);
            goto err;
        }
    }
    p->deflt = OSSL_PROVIDER_load(p->libctx, "default");
    if (p->deflt == NULL) {
        fprintf(stderr, "evp_bench: cannot load the default provider\n");
        goto err;
    }
    if (p->is_gpuprov) {
        const char *got = NULL;
        OSSL_PARAM params[] = {
            OSSL_PARAM_utf8_ptr("gpuprov-executor", (char **)&got, 0),
            OSSL_PARAM_END
        };

        if (!OSSL_PROVIDER_get_params(p->prov, params) || got == NULL) {
            fprintf(stderr, "evp_bench: cannot read gpuprov's executor\n");
            goto err;
        }
        snprintf(p->executor, sizeof(p->executor), "%s", got);
        if (p->want_exec[0] != '\0' && strcmp(p->want_exec, "auto") != 0
            && strcmp(p->want_exec, p->executor) != 0) {
            fprintf(stderr, "evp_bench: %s: gpuprov serves with the %s executor, not %s\n", spec,
                    p->executor, p->want_exec);
            goto err;
        }
    }
    return 1;
err:
    print_ssl_errors();
    return 0;
}

/* Called only at the end: every provider stays loaded until then, because unloading the last
 * gpuprov instance unmaps the module, and mapping a module that carries a (static) CUDA runtime
 * a second time into one process is asking for trouble. Idle instances cost nothing: their host
 * workers sleep on a condition variable. */
static void provider_close(provider_run *p)
{
    if (p->prov != NULL)
        OSSL_PROVIDER_unload(p->prov);
    if (p->deflt != NULL)
        OSSL_PROVIDER_unload(p->deflt);
    OSSL_LIB_CTX_free(p->libctx);
    memset(p, 0, sizeof(*p));
}

/* ---- the machine ---- */

static void trim(char *s)
{
    size_t n = strlen(s);

    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        s[--n] = '\0';
}

static void cpu_model(char *buf, size_t n)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];

    snprintf(buf, n, "unknown");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');

        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            colon++;
            while (*colon == ' ' || *colon == '\t')
                colon++;
            snprintf(buf, n, "%s", colon);
            trim(buf);
            break;
        }
    }
    fclose(f);
}

/* The first GPU's name (and how many there are), or "none". */
static void gpu_model(char *buf, size_t n)
{
    FILE *f = popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r");
    char line[256];
    int count = 0;

    snprintf(buf, n, "none");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        trim(line);
        if (line[0] == '\0')
            continue;
        if (count++ == 0)
            snprintf(buf, n, "%s", line);
    }
    if (pclose(f) != 0 && count == 0)
        snprintf(buf, n, "none");
    if (count > 1) {
        size_t l = strlen(buf);

        snprintf(buf + l, n - l, " (x%d)", count);
    }
}

/* ---- command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: evp_bench [options]\n"
        "  --threads LIST     thread counts (default 1,4,16)\n"
        "  --sizes LIST       message sizes in bytes, k/m suffixes allowed (default 16,1024,16384)\n"
        "  --ciphers LIST     EVP cipher names (default aes-256-gcm,aes-128-ctr,chacha20-poly1305)\n"
        "  --jobs LIST        async jobs per thread, each with its own context and key (default 0:\n"
        "                     synchronous calls); a paused job waits on its wait fd, as in\n"
        "                     openssl speed -async_jobs\n"
        "  --wait MODE        how a thread waits for its paused jobs: poll (default: every paused\n"
        "                     job's wait fds each round, as openssl speed does), epoll (an\n"
        "                     epoll set the fds join as wait contexts add them, as an\n"
        "                     event-driven server does) or callback (the wait contexts'\n"
        "                     callback queues the job for its thread, as with libssl's\n"
        "                     SSL_set_async_callback); --wait-fds is the same option\n"
        "  --seconds S        timed run per cell (default 2)\n"
        "  --lat-seconds S    latency run per one-thread cell (default: a quarter of --seconds)\n"
        "  --providers LIST   default, gpuprov, gpuprov:<executor> (default default,gpuprov);\n"
        "                     gpuprov:cuda|host|cpu|auto loads gpuprov with GPUPROV_BACKEND set so,\n"
        "                     and fails unless it serves with that executor; plain gpuprov takes\n"
        "                     the executor from the environment\n"
        "  --csv FILE         also write the results as CSV\n"
        "  --module-dir DIR   where gpuprov.so is (default $OPENSSL_MODULES, else %s)\n"
        "  --stream           an operation is one update of SIZE bytes on a message that goes on\n"
        "                     (one IV per context, as openssl speed streams), instead of a whole\n"
        "                     message; with --threads 1 --jobs 0 the latency run times single\n"
        "                     large updates of one caller (e.g. --sizes 1m,16m)\n"
        "  --help\n"
        "Per operation: IV-only re-init with a new IV, 13 bytes of AAD (AEAD), one update of\n"
        "SIZE bytes, Final, GET_TAG (AEAD). GB/s = 10^9 plaintext bytes per second over all\n"
        "threads; CPU s/GB = user+sys seconds of the whole process per 10^9 bytes; ratio = GB/s\n"
        "over the default provider's in the same cipher/size/threads/jobs cell; latency (one\n"
        "thread, no jobs) = median and p99 of lone synchronous operations timed one at a time.\n",
        GP_BUILD_MODULE_DIR);
}

static char *split_next(char **s)
{
    char *tok;

    while (**s == ',')
        (*s)++;
    if (**s == '\0')
        return NULL;
    tok = *s;
    *s += strcspn(*s, ",");
    if (**s == ',')
        *(*s)++ = '\0';
    return tok;
}

static int parse_int_list(const char *what, char *arg, int *out, int *n, long min, long max,
                          int suffixes)
{
    char *tok;

    *n = 0;
    while ((tok = split_next(&arg)) != NULL) {
        char *end;
        long v = strtol(tok, &end, 10);

        if (suffixes && (*end == 'k' || *end == 'K'))
            v *= 1024, end++;
        else if (suffixes && (*end == 'm' || *end == 'M'))
            v *= 1024 * 1024, end++;
        if (end == tok || *end != '\0' || v < min || v > max) {
            fprintf(stderr, "evp_bench: bad %s '%s' (%ld..%ld)\n", what, tok, min, max);
            return 0;
        }
        if (*n == MAX_LIST) {
            fprintf(stderr, "evp_bench: at most %d %s\n", MAX_LIST, what);
            return 0;
        }
        out[(*n)++] = (int)v;
    }
    return *n > 0;
}

static int parse_str_list(const char *what, char *arg, char **out, int *n)
{
    char *tok;

    *n = 0;
    while ((tok = split_next(&arg)) != NULL) {
        if (*n == MAX_LIST) {
            fprintf(stderr, "evp_bench: at most %d %s\n", MAX_LIST, what);
            return 0;
        }
        out[(*n)++] = tok;
    }
    return *n > 0;
}

static int parse_seconds(const char *arg, double *out)
{
    char *end;
    double v = strtod(arg, &end);

    if (end == arg || *end != '\0' || !(v > 0.0) || v > 3600.0) {
        fprintf(stderr, "evp_bench: bad seconds '%s'\n", arg);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_options(int argc, char **argv, options *o)
{
    static char d_threads[] = "1,4,16", d_sizes[] = "16,1024,16384", d_jobs[] = "0",
                d_ciphers[] = "aes-256-gcm,aes-128-ctr,chacha20-poly1305",
                d_providers[] = "default,gpuprov";
    static const struct option longopts[] = {
        { "threads", required_argument, NULL, 't' },
        { "sizes", required_argument, NULL, 's' },
        { "jobs", required_argument, NULL, 'j' },
        { "ciphers", required_argument, NULL, 'c' },
        { "seconds", required_argument, NULL, 'S' },
        { "lat-seconds", required_argument, NULL, 'L' },
        { "wait", required_argument, NULL, 'w' },
        { "wait-fds", required_argument, NULL, 'w' },   /* its earlier name */
        { "providers", required_argument, NULL, 'p' },
        { "csv", required_argument, NULL, 'o' },
        { "module-dir", required_argument, NULL, 'm' },
        { "stream", no_argument, NULL, 'u' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    char *threads = d_threads, *sizes = d_sizes, *jobs = d_jobs, *ciphers = d_ciphers, *providers = d_providers;
    int opt;

    memset(o, 0, sizeof(*o));
    o->seconds = 2.0;
    o->lat_seconds = -1.0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 't': threads = optarg; break;
        case 's': sizes = optarg; break;
        case 'j': jobs = optarg; break;
        case 'c': ciphers = optarg; break;
        case 'p': providers = optarg; break;
        case 'o': o->csv = optarg; break;
        case 'm': o->module_dir = optarg; break;
        case 'u': o->stream_mode = 1; break;
        case 'w':
            for (o->wait = 0; o->wait < 3 && strcmp(optarg, wait_names[o->wait]) != 0; o->wait++)
                ;
            if (o->wait == 3) {
                fprintf(stderr, "evp_bench: --wait poll, epoll or callback\n");
                return 0;
            }
            break;
        case 'S':
            if (!parse_seconds(optarg, &o->seconds))
                return 0;
            break;
        case 'L':
            if (!parse_seconds(optarg, &o->lat_seconds))
                return 0;
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 0;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "evp_bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 0;
    }
    if (o->lat_seconds < 0)
        o->lat_seconds = o->seconds / 4;
    if (o->module_dir == NULL) {
        const char *env = getenv("OPENSSL_MODULES");

        o->module_dir = env != NULL && *env != '\0' ? env : GP_BUILD_MODULE_DIR;
    }
    return parse_int_list("thread counts", threads, o->threads, &o->nthreads, 1, MAX_THREADS, 0)
           && parse_int_list("sizes", sizes, o->sizes, &o->nsizes, 1, MAX_SIZE, 1)
           && parse_int_list("job counts", jobs, o->jobs, &o->njobs, 0, MAX_JOBS, 0)
           && parse_str_list("ciphers", ciphers, o->ciphers, &o->nciphers)
           && parse_str_list("providers", providers, o->providers, &o->nproviders);
}

/* ---- output ---- */

/* A provider's cells: cipher-major, then size, threads, jobs (the table's order). */
static size_t cell_count(const options *o)
{
    return (size_t)o->nciphers * (size_t)o->nsizes * (size_t)o->nthreads * (size_t)o->njobs;
}

static void cell_indices(const options *o, size_t cell, int *ci, int *si, int *ti, int *ji)
{
    *ji = (int)(cell % (size_t)o->njobs);
    cell /= (size_t)o->njobs;
    *ti = (int)(cell % (size_t)o->nthreads);
    cell /= (size_t)o->nthreads;
    *si = (int)(cell % (size_t)o->nsizes);
    *ci = (int)(cell / (size_t)o->nsizes);
}

/* The default provider's result for the same cipher, size, threads and jobs, if measured. */
static const result *baseline(const result *rs, size_t n, const provider_run *provs, const result *r)
{
    for (size_t i = 0; i < n; i++)
        if (rs[i].ok && !provs[rs[i].prov_idx].is_gpuprov && rs[i].cipher_idx == r->cipher_idx
            && rs[i].size == r->size && rs[i].threads == r->threads && rs[i].jobs == r->jobs)
            return &rs[i];
    return NULL;
}

static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void print_table(const result *rs, size_t n, const provider_run *provs, const options *o)
{
    printf("\n%-8s %-8s %-18s %7s %7s %5s %10s %7s %9s %10s %10s\n", "provider", "executor", "cipher",
           "size", "threads", "jobs", "GB/s", "ratio", "CPU s/GB", "lat med us", "lat p99 us");
    for (size_t cell = 0; cell < cell_count(o); cell++) {
        int ci, si, ti, ji;

        cell_indices(o, cell, &ci, &si, &ti, &ji);
        for (size_t i = 0; i < n; i++) {
            const result *r = &rs[i], *b;
            const provider_run *p = &provs[r->prov_idx];

            if (r->cipher_idx != ci || r->size != o->sizes[si] || r->threads != o->threads[ti]
                || r->jobs != o->jobs[ji])
                continue;
            printf("%-8s %-8s %-18s %7d %7d %5d ", p->is_gpuprov ? "gpuprov" : "default",
                   p->executor, o->ciphers[ci], r->size, r->threads, r->jobs);
            if (!r->ok) {
                printf("%10s\n", "FAILED");
                continue;
            }
            b = baseline(rs, n, provs, r);
            printf("%10.4f ", r->gbps);
            if (b != NULL && b->gbps > 0)
                printf("%6.2fx ", r->gbps / b->gbps);
            else
                printf("%7s ", "-");
            printf("%9.2f ", r->cpu_s_per_gb);
            if (r->lat_samples > 0)
                printf("%10.2f %10.2f\n", r->lat_med_us, r->lat_p99_us);
            else
                printf("%10s %10s\n", "-", "-");
        }
    }
}

static int write_csv(const char *path, const result *rs, size_t n, const provider_run *provs,
                     const options *o, const char *cpu, const char *gpu, const char *date)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        fprintf(stderr, "evp_bench: cannot write %s: %s\n", path, strerror(errno));
        return 0;
    }
    fprintf(f, "date,provider,executor,cipher,size,threads,jobs,ok,seconds,ops,gb_per_s,ratio_vs_default,"
               "cpu_s,cpu_s_per_gb,lat_median_us,lat_p99_us,lat_samples,openssl,cpu,gpu\n");
    for (size_t i = 0; i < n; i++) {
        const result *r = &rs[i], *b = baseline(rs, n, provs, r);
        const provider_run *p = &provs[r->prov_idx];

        fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%d,%.3f,%llu,%.6f,", date, p->is_gpuprov ? "gpuprov" : "default",
                p->executor, o->ciphers[r->cipher_idx], r->size, r->threads, r->jobs, r->ok, r->wall_s,
                (unsigned long long)r->ops, r->ok ? r->gbps : 0.0);
        if (r->ok && b != NULL && b->gbps > 0)
            fprintf(f, "%.4f", r->gbps / b->gbps);
        fprintf(f, ",%.3f,", r->cpu_s);
        if (r->ok)
            fprintf(f, "%.4f", r->cpu_s_per_gb);
        fputc(',', f);
        if (r->lat_samples > 0)
            fprintf(f, "%.3f,%.3f,%zu", r->lat_med_us, r->lat_p99_us, r->lat_samples);
        else
            fputs(",,0", f);
        fputc(',', f);
        csv_field(f, OpenSSL_version(OPENSSL_VERSION));
        fputc(',', f);
        csv_field(f, cpu);
        fputc(',', f);
        csv_field(f, gpu);
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "evp_bench: writing %s: %s\n", path, strerror(errno));
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    options o;
    provider_run provs[MAX_LIST];
    result *rs;
    size_t nres = 0, cap;
    char cpu[256], gpu[256], date[32];
    time_t t = time(NULL);
    int failures = 0, nprovs = 0;

    if (!parse_options(argc, argv, &o))
        return 2;
    cpu_model(cpu, sizeof(cpu));
    gpu_model(gpu, sizeof(gpu));
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    printf("evp_bench: %s | CPU: %s (%ld online) | GPU: %s | %s\n",
           OpenSSL_version(OPENSSL_VERSION), cpu, sysconf(_SC_NPROCESSORS_ONLN), gpu, date);
    printf("evp_bench: %.2f s per cell, latency runs %.2f s, gpuprov from %s; an operation is %s\n",
           o.seconds, o.lat_seconds, o.module_dir,
           o.stream_mode ? "one update of a long message (--stream)" : "one whole message");
    fflush(stdout);

    cap = (size_t)o.nproviders * cell_count(&o);
    rs = calloc(cap, sizeof(*rs));
    if (rs == NULL)
        return 2;
    for (int pi = 0; pi < o.nproviders; pi++) {
        provider_run *p = &provs[nprovs];

        if (!provider_open(p, o.providers[pi], o.module_dir)) {
            fprintf(stderr, "evp_bench: provider %s: FAILED to set up; its cells are skipped\n",
                    o.providers[pi]);
            provider_close(p);
            failures++;
            continue;
        }
        nprovs++;
        if (p->is_gpuprov)
            fprintf(stderr, "evp_bench: %s: gpuprov serves with the %s executor\n", p->spec,
                    p->executor);
        for (size_t cell = 0; cell < cell_count(&o); cell++) {
            result *r = &rs[nres++];
            int ci, si, ti, ji;

            cell_indices(&o, cell, &ci, &si, &ti, &ji);
            r->prov_idx = nprovs - 1;
            r->cipher_idx = ci;
            r->size = o.sizes[si];
            r->threads = o.threads[ti];
            r->jobs = o.jobs[ji];
            run_cell(p, o.ciphers[ci], r->size, r->threads, r->jobs, &o, r);
            if (!r->ok) {
                failures++;
                fprintf(stderr, "evp_bench: %s %s %d B x%d, %d jobs: FAILED\n", p->spec,
                        o.ciphers[ci], r->size, r->threads, r->jobs);
            } else {
                fprintf(stderr, "evp_bench: %-14s %-18s %6d B x%-3d %4d jobs %9.4f GB/s",
                        p->spec, o.ciphers[ci], r->size, r->threads, r->jobs, r->gbps);
                if (r->jobs > 0)
                    fprintf(stderr, " (%.2f pauses per message)", (double)r->pauses / (double)r->ops);
                fputc('\n', stderr);
            }
        }
    }

    print_table(rs, nres, provs, &o);
    if (o.csv != NULL) {
        if (write_csv(o.csv, rs, nres, provs, &o, cpu, gpu, date))
            printf("\nevp_bench: CSV written to %s\n", o.csv);
        else
            failures++;
    }
    fflush(stdout);
    for (int i = nprovs - 1; i >= 0; i--)
        provider_close(&provs[i]);
    free_retired_workers();
    free(rs);
    if (failures > 0)
        fprintf(stderr, "evp_bench: %d failure(s)\n", failures);
    return failures > 0 ? 1 : 0;
}
