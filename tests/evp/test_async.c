/* SPDX-License-Identifier: Apache-2.0 */
/* Async jobs through EVP: many ASYNC_JOBs in one thread driven as openssl speed drives them (wait fds,
 * poll), and through wait-context callbacks, checked byte for byte against the default provider. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/async.h>
#include <openssl/err.h>
#include <openssl/provider.h>

#include "evp_common.h"

/*
 * Each job encrypts and decrypts NMSG messages of assorted sizes with one cipher through gpuprov,
 * one EVP call at a time, so it pauses on every update and final (host and cuda executors); the
 * driver resumes jobs whose wait fd is readable, as `openssl speed -async_jobs` does. Nothing in a
 * job asserts (a cmocka failure would longjmp off the job's stack): jobs record what went wrong and
 * the driver's caller asserts on that.
 */
#define MAX_JOBS 64
#define NMSG 6
#define BAD_TAG_MSG 2   /* in every job with bad_tag set, this message decrypts with a wrong tag */

static const size_t sizes[] = { 0, 1, 15, 16, 17, 63, 64, 65, 255, 1024, 1500, 4096, 16384 + 3 };

typedef struct job_arg {
    const evp_cipher_info *ci;
    EVP_CIPHER *gp;                /* fetched from gpuprov before the jobs start */
    int bad_tag;
    uint8_t key[32], iv[NMSG][16], aad[NMSG][24];
    size_t aadlen[NMSG], len[NMSG];
    uint8_t *pt[NMSG], *ct[NMSG], *dec[NMSG], *ref[NMSG];
    uint8_t tag[NMSG][16], ref_tag[NMSG][16];
    int failed;                    /* first failure inside the job, as a line number; 0 if none */
    int bad_tag_rejected;
    atomic_int ready;              /* callback mode: set by the wait-context callback */
} job_arg;

static gptest_env *g_env;
static int g_kernel_executor;   /* host or cuda: requests really pause their jobs */
static int g_hybrid;            /* hybrid: some messages on the GPU side (they pause), some on cpu */
static int g_cuda;              /* the cuda executor: jobs stage their data (batching/stage.h) */

static int is_aead(const evp_cipher_info *ci)
{
    return ci->kind == K_GCM || ci->kind == K_CCP;
}

static void ref_encrypt(const gptest_env *env, job_arg *a, int m)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int outl, idx = evp_cipher_index(a->ci->name);

    assert_non_null(c);
    assert_true(EVP_EncryptInit_ex2(c, evp_cipher(env, idx, 0), a->key, a->iv[m], NULL));
    if (a->aadlen[m] > 0)
        assert_true(EVP_EncryptUpdate(c, NULL, &outl, a->aad[m], (int)a->aadlen[m]));
    assert_true(EVP_EncryptUpdate(c, a->ref[m], &outl, a->pt[m], (int)a->len[m]));
    assert_true(EVP_EncryptFinal_ex(c, a->ref[m] + a->len[m], &outl));
    if (is_aead(a->ci))
        assert_true(evp_get_tag(c, a->ref_tag[m], 16));
    EVP_CIPHER_CTX_free(c);
}

/* Job i: cipher i mod 8, sizes from the table, keys and data random, references computed now. */
static void job_prepare(job_arg *a, int i, int bad_tag)
{
    int idx = i % EVP_NCIPHERS;

    memset(a, 0, sizeof(*a));
    a->ci = &evp_ciphers[idx];
    a->gp = evp_cipher(g_env, idx, 1);
    a->bad_tag = bad_tag && is_aead(a->ci);
    gptest_rand_bytes(a->key, sizeof(a->key));
    for (int m = 0; m < NMSG; m++) {
        a->len[m] = sizes[(size_t)(i * 5 + m * 3) % (sizeof(sizes) / sizeof(sizes[0]))];
        gptest_rand_bytes(a->iv[m], sizeof(a->iv[m]));
        if (a->ci->kind == K_CHACHA)
            memset(a->iv[m], 0, 4);   /* a small block counter, so no message wraps it */
        a->aadlen[m] = is_aead(a->ci) ? gptest_rand_range(0, sizeof(a->aad[m])) : 0;
        gptest_rand_bytes(a->aad[m], a->aadlen[m]);
        a->pt[m] = malloc(a->len[m] + 1);
        a->ct[m] = malloc(a->len[m] + 1);
        a->dec[m] = malloc(a->len[m] + 1);
        a->ref[m] = malloc(a->len[m] + 1);
        assert_true(a->pt[m] && a->ct[m] && a->dec[m] && a->ref[m]);
        gptest_rand_bytes(a->pt[m], a->len[m]);
        ref_encrypt(g_env, a, m);
    }
    atomic_init(&a->ready, 0);
}

static void job_release(job_arg *a)
{
    for (int m = 0; m < NMSG; m++) {
        free(a->pt[m]);
        free(a->ct[m]);
        free(a->dec[m]);
        free(a->ref[m]);
    }
}

/* A forked child stops its copy of a job at the first failure (test_jobs_paused_across_fork). */
static int g_stop_at_failure;

#define JOB_CHECK(cond)                       \
    do {                                      \
        if (!(cond) && a->failed == 0)        \
            a->failed = __LINE__;             \
        if (a->failed != 0 && g_stop_at_failure) \
            goto out;                         \
    } while (0)

/* Runs on the job's 32 KiB stack: EVP calls only, each a gpuprov request that pauses the job. */
static int job_main(void *argp)
{
    job_arg *a = *(job_arg **)argp;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int outl;

    JOB_CHECK(c != NULL);
    for (int m = 0; m < NMSG && c != NULL; m++) {
        size_t cut = a->len[m] / 3;
        uint8_t tag[16];
        int bad = a->bad_tag && m == BAD_TAG_MSG, ok;

        /* Encrypt: AAD, two updates, final, tag. */
        JOB_CHECK(EVP_EncryptInit_ex2(c, a->gp, a->key, a->iv[m], NULL));
        if (a->aadlen[m] > 0)
            JOB_CHECK(EVP_EncryptUpdate(c, NULL, &outl, a->aad[m], (int)a->aadlen[m]));
        JOB_CHECK(EVP_EncryptUpdate(c, a->ct[m], &outl, a->pt[m], (int)cut) && (size_t)outl == cut);
        JOB_CHECK(EVP_EncryptUpdate(c, a->ct[m] + cut, &outl, a->pt[m] + cut, (int)(a->len[m] - cut))
                  && (size_t)outl == a->len[m] - cut);
        JOB_CHECK(EVP_EncryptFinal_ex(c, a->ct[m] + a->len[m], &outl) && outl == 0);
        if (is_aead(a->ci))
            JOB_CHECK(evp_get_tag(c, a->tag[m], 16));

        /* Decrypt the reference ciphertext, verifying its tag (or a flipped one). */
        JOB_CHECK(EVP_DecryptInit_ex2(c, a->gp, a->key, a->iv[m], NULL));
        if (is_aead(a->ci)) {
            memcpy(tag, a->ref_tag[m], sizeof(tag));
            if (bad)
                tag[m % 16] ^= 0x20;
            JOB_CHECK(evp_set_tag(c, tag, 16));
        }
        if (a->aadlen[m] > 0)
            JOB_CHECK(EVP_DecryptUpdate(c, NULL, &outl, a->aad[m], (int)a->aadlen[m]));
        JOB_CHECK(EVP_DecryptUpdate(c, a->dec[m], &outl, a->ref[m], (int)a->len[m])
                  && (size_t)outl == a->len[m]);
        ok = EVP_DecryptFinal_ex(c, a->dec[m] + a->len[m], &outl);
        if (bad) {
            a->bad_tag_rejected = ok == 0;   /* the verdict alone, as the default provider's */
            ERR_clear_error();
        } else {
            JOB_CHECK(ok == 1);
        }
    }
out:
    EVP_CIPHER_CTX_free(c);
    return a->failed == 0;
}

/* After the jobs: every byte and tag as the default provider has it. */
static void check_results(job_arg *args, int n)
{
    for (int i = 0; i < n; i++) {
        job_arg *a = &args[i];

        if (a->failed != 0)
            fail_msg("job %d (%s): failed at test_async.c:%d", i, a->ci->name, a->failed);
        for (int m = 0; m < NMSG; m++) {
            assert_memory_equal(a->ct[m], a->ref[m], a->len[m]);
            if (is_aead(a->ci))
                assert_memory_equal(a->tag[m], a->ref_tag[m], 16);
            if (!(a->bad_tag && m == BAD_TAG_MSG))
                assert_memory_equal(a->dec[m], a->pt[m], a->len[m]);
        }
        if (a->bad_tag)
            assert_true(a->bad_tag_rejected);
    }
}

typedef struct drive_result {
    int errors;        /* driver-level failures (printed) */
    long pauses;       /* ASYNC_PAUSE returns */
    int max_fds;       /* the most fds one wait context held */
} drive_result;

/* Start or resume job i; returns 1 while it is still in progress. */
static int step(ASYNC_JOB **job, ASYNC_WAIT_CTX *w, job_arg *a, drive_result *r)
{
    int ret = 0;

    switch (ASYNC_start_job(job, w, &ret, job_main, &a, sizeof(a))) {
    case ASYNC_PAUSE:
        r->pauses++;
        return 1;
    case ASYNC_FINISH:
        if (ret != 1 && a->failed == 0)
            a->failed = -1;
        *job = NULL;
        return 0;
    default:
        fprintf(stderr, "test_async: ASYNC_start_job failed\n");
        r->errors++;
        *job = NULL;
        return 0;
    }
}

/*
 * fd mode, the way openssl speed 3.0 runs -async_jobs: start every job, then poll on the one fd of
 * each paused job's wait context and resume those that are readable. Returns driver errors.
 * The three steps are separate so that a test may fork between starting and polling.
 */
typedef struct job_set {
    ASYNC_JOB *jobs[MAX_JOBS];
    ASYNC_WAIT_CTX *w[MAX_JOBS];
    OSSL_ASYNC_FD first_fd[MAX_JOBS];
    int inprogress;
} job_set;

static void jobs_start(job_set *s, job_arg *args, int n, drive_result *r)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < n; i++) {
        s->w[i] = ASYNC_WAIT_CTX_new();
        s->first_fd[i] = -1;
        if (s->w[i] == NULL) {
            r->errors++;
            return;
        }
    }
    for (int i = 0; i < n; i++)
        s->inprogress += step(&s->jobs[i], s->w[i], &args[i], r);
}

static void jobs_poll(job_set *s, job_arg *args, int n, drive_result *r)
{
    while (s->inprogress > 0 && r->errors == 0) {
        struct pollfd pfd[MAX_JOBS];
        int who[MAX_JOBS], np = 0, rc;

        for (int i = 0; i < n; i++) {
            size_t num = 0;
            OSSL_ASYNC_FD fd;

            if (s->jobs[i] == NULL)
                continue;
            if (!ASYNC_WAIT_CTX_get_all_fds(s->w[i], NULL, &num) || num != 1) {
                fprintf(stderr, "test_async: job %d paused with %zu wait fds (want 1)\n", i, num);
                r->errors++;
                break;
            }
            ASYNC_WAIT_CTX_get_all_fds(s->w[i], &fd, &num);
            if (s->first_fd[i] < 0)
                s->first_fd[i] = fd;
            if (fd != s->first_fd[i]) {
                fprintf(stderr, "test_async: job %d: wait fd changed from %d to %d\n", i, s->first_fd[i], fd);
                r->errors++;
            }
            r->max_fds = r->max_fds > (int)num ? r->max_fds : (int)num;
            pfd[np] = (struct pollfd){ .fd = fd, .events = POLLIN };
            who[np++] = i;
        }
        if (r->errors != 0)
            break;
        rc = poll(pfd, (nfds_t)np, 30000);
        if (rc <= 0) {
            fprintf(stderr, "test_async: poll %s with %d jobs paused\n", rc == 0 ? "timed out" : "failed",
                    s->inprogress);
            r->errors++;
            break;
        }
        for (int k = 0; k < np; k++)
            if (pfd[k].revents & POLLIN)
                s->inprogress -= !step(&s->jobs[who[k]], s->w[who[k]], &args[who[k]], r);
    }
}

static void jobs_end(job_set *s, int n, drive_result *r)
{
    for (int i = 0; i < n; i++) {
        if (s->jobs[i] != NULL)
            r->errors++;   /* never leave a paused job behind: its stack holds a queued request */
        ASYNC_WAIT_CTX_free(s->w[i]);
        /* The wait context's cleanup closed gpuprov's eventfd. */
        if (s->first_fd[i] >= 0 && fcntl(s->first_fd[i], F_GETFD) != -1) {
            fprintf(stderr, "test_async: fd %d still open after ASYNC_WAIT_CTX_free\n", s->first_fd[i]);
            r->errors++;
        }
    }
}

static drive_result drive_fds(job_arg *args, int n)
{
    job_set s;
    drive_result r = { 0, 0, 0 };

    jobs_start(&s, args, n, &r);
    if (r.errors == 0)
        jobs_poll(&s, args, n, &r);
    jobs_end(&s, n, &r);
    return r;
}

/* Callback mode: the callback (called from gpuprov's completing thread) marks the job ready and
 * wakes the driver through its own eventfd; no wait fd may be registered. */
static int cb_efd = -1;

static int on_ready(void *arg)
{
    job_arg *a = arg;
    uint64_t one = 1;

    atomic_store(&a->ready, 1);
    return write(cb_efd, &one, sizeof(one)) == (ssize_t)sizeof(one);
}

static drive_result drive_callbacks(job_arg *args, int n)
{
    ASYNC_JOB *jobs[MAX_JOBS] = { 0 };
    ASYNC_WAIT_CTX *w[MAX_JOBS];
    drive_result r = { 0, 0, 0 };
    int inprogress = 0;

    cb_efd = eventfd(0, EFD_CLOEXEC);
    if (cb_efd < 0) {
        r.errors++;
        return r;
    }
    for (int i = 0; i < n; i++) {
        w[i] = ASYNC_WAIT_CTX_new();
        if (w[i] == NULL || !ASYNC_WAIT_CTX_set_callback(w[i], on_ready, &args[i])) {
            r.errors++;
            return r;
        }
    }
    for (int i = 0; i < n; i++)
        inprogress += step(&jobs[i], w[i], &args[i], &r);
    while (inprogress > 0 && r.errors == 0) {
        struct pollfd pfd = { .fd = cb_efd, .events = POLLIN };
        uint64_t v;

        if (poll(&pfd, 1, 30000) != 1 || read(cb_efd, &v, sizeof(v)) != (ssize_t)sizeof(v)) {
            fprintf(stderr, "test_async: no callback within 30 s, %d jobs paused\n", inprogress);
            r.errors++;
            break;
        }
        for (int i = 0; i < n; i++) {
            size_t num = 0;

            if (jobs[i] == NULL || !atomic_exchange(&args[i].ready, 0))
                continue;
            if (!ASYNC_WAIT_CTX_get_all_fds(w[i], NULL, &num) || num != 0
                || ASYNC_WAIT_CTX_get_status(w[i]) != ASYNC_STATUS_OK) {
                fprintf(stderr, "test_async: callback mode: job %d has %zu fds, status %d\n", i, num,
                        ASYNC_WAIT_CTX_get_status(w[i]));
                r.errors++;
            }
            inprogress -= !step(&jobs[i], w[i], &args[i], &r);
        }
    }
    for (int i = 0; i < n; i++) {
        if (jobs[i] != NULL)
            r.errors++;
        ASYNC_WAIT_CTX_free(w[i]);
    }
    close(cb_efd);
    cb_efd = -1;
    return r;
}

typedef struct stats3 {
    uint64_t ops, batches, async_ops, spec_tags, staged;
} stats3;

static stats3 provider_stats(void)
{
    stats3 s = { 0, 0, 0, 0, 0 };
    OSSL_PARAM p[] = {
        OSSL_PARAM_uint64("gpuprov-stats-ops", &s.ops),
        OSSL_PARAM_uint64("gpuprov-stats-batches", &s.batches),
        OSSL_PARAM_uint64("gpuprov-stats-async-ops", &s.async_ops),
        OSSL_PARAM_uint64("gpuprov-stats-spec-tags", &s.spec_tags),
        OSSL_PARAM_uint64("gpuprov-stats-staged", &s.staged),
        OSSL_PARAM_END
    };

    if (g_env->gpuprov != NULL)
        assert_true(OSSL_PROVIDER_get_params(g_env->gpuprov, p));
    return s;
}

/* The batching claims: on the kernel executors every request paused its job, and batches held
 * many of them; on the cpu executor requests run inline and nothing pauses. */
static void check_batching(stats3 before, const drive_result *r, const char *mode)
{
    stats3 after = provider_stats();
    uint64_t ops = after.ops - before.ops, batches = after.batches - before.batches;
    uint64_t async_ops = after.async_ops - before.async_ops;
    uint64_t spec_tags = after.spec_tags - before.spec_tags, staged = after.staged - before.staged;

    if (evp_under_default())
        return;
    fprintf(stderr, "test_async: %s: %llu ops in %llu batches (mean %.2f), %llu async, %llu staged, %ld pauses\n",
            mode, (unsigned long long)ops, (unsigned long long)batches,
            batches ? (double)ops / (double)batches : 0.0, (unsigned long long)async_ops,
            (unsigned long long)staged, r->pauses);
    /* Jobs stage their data (batching/stage.h) on the cuda executor, and on the host executor where
     * the test hook gives it a pool (tests/meson.build), even from this one thread where the other
     * hook says so; messages of 2 KiB and up exist in every job (sizes[]). */
    if (getenv("GPUPROV_TEST_CUDA_FAULT_AFTER") != NULL)
        return;   /* the GPU failed on purpose: the cpu executor serves what follows, inline */
    if (g_kernel_executor && (getenv("GPUPROV_TEST_HOST_STAGE") != NULL || g_cuda)
        && getenv("GPUPROV_TEST_STAGE_ONE_THREAD") != NULL)
        assert_true(staged > 0);
    else if (!g_kernel_executor && !g_hybrid)
        assert_int_equal(staged, 0);
    assert_true(ops > 0);
    if (g_hybrid) {
        /* Mixed: the GPU side's requests pause, the cpu executor's run inline. */
        assert_true(async_ops + spec_tags <= ops);
        assert_true(async_ops > 0);
        assert_true(r->pauses > 0);
    } else if (g_kernel_executor) {
        /* Every request went through the queue from its job, except the tags that the data
         * request before them had already computed (no request at all). */
        assert_int_equal(async_ops + spec_tags, ops);
        assert_true(r->pauses > 0);
        assert_true(async_ops >= 2 * batches);   /* mean batch of 2 or more */
    } else {
        assert_int_equal(async_ops, 0);
        assert_int_equal(r->pauses, 0);
    }
}

static void run_jobs(int n, int callbacks, int bad_tags)
{
    job_arg *args = calloc((size_t)n, sizeof(*args));
    stats3 before;
    drive_result r;

    assert_non_null(args);
    for (int i = 0; i < n; i++)
        job_prepare(&args[i], i, bad_tags && i % 3 == 0);
    before = provider_stats();
    r = callbacks ? drive_callbacks(args, n) : drive_fds(args, n);
    assert_int_equal(r.errors, 0);
    check_results(args, n);
    check_batching(before, &r, callbacks ? "callbacks" : "wait fds");
    for (int i = 0; i < n; i++)
        job_release(&args[i]);
    free(args);
}

/* 48 jobs, every cipher, sizes 0..16 KiB, each job pausing per EVP call, driven through wait fds. */
static void test_jobs_wait_fds(void **state)
{
    (void)state;
    run_jobs(48, 0, 0);
}

/* The same with the application's wait-context callback instead of fds. */
static void test_jobs_callbacks(void **state)
{
    (void)state;
    run_jobs(48, 1, 0);
}

/* A third of the AEAD jobs get a wrong tag on one message: that final fails, the
 * job goes on with its next messages, and every other result stays exact. */
static void test_jobs_bad_tag(void **state)
{
    (void)state;
    run_jobs(32, 0, 1);
}

/* Synchronous callers on other threads while jobs run: mixed batches. */
typedef struct {
    atomic_int stop;
    atomic_int mismatches;
    atomic_long ops;
} sync_ctl;

static void *sync_thread(void *arg)
{
    sync_ctl *ctl = arg;
    EVP_CIPHER *gp = evp_cipher(g_env, 5, 1), *ref = evp_cipher(g_env, 5, 0);   /* AES-256-GCM */
    uint8_t key[32], iv[12], pt[700], a[700 + 16], b[700 + 16], ta[16], tb[16];
    int outl;

    while (!atomic_load(&ctl->stop)) {
        EVP_CIPHER *which[2] = { gp, ref };
        uint8_t *out[2] = { a, b }, *tag[2] = { ta, tb };

        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        gptest_rand_bytes(pt, sizeof(pt));
        for (int s = 0; s < 2; s++) {
            EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

            if (c == NULL || !EVP_EncryptInit_ex2(c, which[s], key, iv, NULL)
                || !EVP_EncryptUpdate(c, out[s], &outl, pt, (int)sizeof(pt))
                || !EVP_EncryptFinal_ex(c, out[s] + sizeof(pt), &outl) || !evp_get_tag(c, tag[s], 16))
                atomic_fetch_add(&ctl->mismatches, 1);
            EVP_CIPHER_CTX_free(c);
        }
        if (memcmp(a, b, sizeof(pt)) != 0 || memcmp(ta, tb, 16) != 0)
            atomic_fetch_add(&ctl->mismatches, 1);
        atomic_fetch_add(&ctl->ops, 1);
    }
    return NULL;
}

static void test_jobs_with_sync_threads(void **state)
{
    sync_ctl ctl;
    pthread_t th[2];

    (void)state;
    atomic_init(&ctl.stop, 0);
    atomic_init(&ctl.mismatches, 0);
    atomic_init(&ctl.ops, 0);
    evp_cipher(g_env, 5, 1);   /* fill the fetch cache before the threads read it */
    evp_cipher(g_env, 5, 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, sync_thread, &ctl), 0);
    /* The jobs take a few milliseconds on the cpu executor, less than a loaded 2-core machine may
     * leave the threads unscheduled: let them get going first, then keep running rounds until they
     * have finished messages while the jobs ran (bounded). */
    for (int i = 0; i < 10000 && atomic_load(&ctl.ops) == 0; i++)
        usleep(1000);
    long ops_before = atomic_load(&ctl.ops);
    for (int round = 0; round < 3 || (atomic_load(&ctl.ops) == ops_before && round < 1000); round++) {
        job_arg *args = calloc(32, sizeof(*args));
        drive_result r;

        assert_non_null(args);
        for (int i = 0; i < 32; i++)
            job_prepare(&args[i], i + round, 0);
        r = drive_fds(args, 32);
        assert_int_equal(r.errors, 0);
        check_results(args, 32);
        for (int i = 0; i < 32; i++)
            job_release(&args[i]);
        free(args);
    }
    atomic_store(&ctl.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr, "test_async: %ld synchronous messages beside the jobs (%ld while they ran)\n",
            atomic_load(&ctl.ops), atomic_load(&ctl.ops) - ops_before);
    assert_int_equal(atomic_load(&ctl.mismatches), 0);
    assert_true(atomic_load(&ctl.ops) > ops_before);
}

/* openssl speed -multi forks after loading providers: a child whose parent already ran jobs (and
 * so has a dispatcher thread) starts its own and runs jobs too. */
static void test_jobs_after_fork(void **state)
{
    job_arg *args = calloc(16, sizeof(*args));
    int status = 0;
    pid_t pid;

    (void)state;
    assert_non_null(args);
    for (int i = 0; i < 16; i++)
        job_prepare(&args[i], i, 1);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        drive_result r;
        int bad = 0;

        alarm(120);   /* a hang in the child ends it, and the test, instead of the whole run */
        r = drive_fds(args, 16);
        for (int i = 0; i < 16; i++) {
            bad += args[i].failed != 0 || (args[i].bad_tag && !args[i].bad_tag_rejected);
            for (int m = 0; m < NMSG; m++)
                bad += memcmp(args[i].ct[m], args[i].ref[m], args[i].len[m]) != 0;
        }
        fprintf(stderr, "test_async: child: %d driver errors, %d bad jobs, %ld pauses\n", r.errors, bad,
                r.pauses);
        /* A CUDA context does not survive fork: the child of a parent that used the GPU serves on
         * the cpu executor (engine.c), so only the host executor's jobs pause there. */
        _exit(r.errors == 0 && bad == 0
              && (r.pauses > 0 || !g_kernel_executor || strcmp(gptest_executor(), "cuda") == 0) ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    for (int i = 0; i < 16; i++)
        job_release(&args[i]);
    free(args);
}

/*
 * fork() while this thread's jobs are paused with their requests queued (batching/queue.c
 * fork_child): the parent runs those requests and its jobs finish exactly; the child dropped its
 * copy of the queue, so a copy of a job that the child resumes fails that request at once rather
 * than wait forever. (The child stops each job at its failure: its wait fds are the parent's too,
 * and a request of its own would drain the parent's wake-ups.)
 */
static void test_jobs_paused_across_fork(void **state)
{
    enum { N = 16 };
    job_arg *args = calloc(N, sizeof(*args));
    drive_result r = { 0, 0, 0 };
    job_set s;
    int status = 0, paused;
    pid_t pid;

    (void)state;
    assert_non_null(args);
    for (int i = 0; i < N; i++)
        job_prepare(&args[i], 200 + i, 0);
    jobs_start(&s, args, N, &r);
    assert_int_equal(r.errors, 0);
    paused = s.inprogress;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = 0, was_paused[N];

        alarm(120);   /* a job waiting forever ends the child, and fails the test */
        g_stop_at_failure = 1;
        for (int i = 0; i < N; i++) {
            was_paused[i] = s.jobs[i] != NULL;
            while (s.jobs[i] != NULL && step(&s.jobs[i], s.w[i], &args[i], &r))
                sched_yield();
            bad += s.jobs[i] != NULL;
        }
        jobs_end(&s, N, &r);
        /* Every job paused at the fork was in a request the child does not run. */
        for (int i = 0; i < N; i++)
            bad += was_paused[i] && args[i].failed == 0;
        fprintf(stderr, "test_async: child: %d jobs paused at the fork, %d driver errors, %d not failed\n", paused,
                r.errors, bad);
        _exit(r.errors == 0 && bad == 0 ? 0 : 1);
    }
    jobs_poll(&s, args, N, &r);
    jobs_end(&s, N, &r);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(r.errors, 0);
    check_results(args, N);
    /* On the host executor every request pauses its job; the cuda executor's may have fallen to
     * the cpu one (the fault-injection run), which does not pause. */
    if (g_kernel_executor && strcmp(gptest_executor(), "host") == 0)
        assert_int_equal(paused, N);
    for (int i = 0; i < N; i++)
        job_release(&args[i]);
    free(args);
}

static int group_setup(void **state)
{
    int rc = evp_group_setup(state);
    const char *ex = gptest_executor();

    g_env = *state;
    g_kernel_executor = !evp_under_default() && (strcmp(ex, "host") == 0 || strcmp(ex, "cuda") == 0);
    g_hybrid = !evp_under_default() && strcmp(ex, "hybrid") == 0;
    g_cuda = !evp_under_default() && strcmp(ex, "cuda") == 0;
    return rc;
}

/*
 * Async requests from one thread leave their per-request work (staging) to the dispatcher; once a
 * second thread queues too, jobs stage their own bytes (batching/queue.c async_own_work). Runs
 * last: no test before it queues async requests from a second thread. Checked where jobs can
 * stage and the one-thread test hook is off (the async-host-stage-gate run); elsewhere the same
 * jobs only have to give exact results.
 */
typedef struct {
    job_arg *args;
    int n;
    drive_result r;
} drive_thread_arg;

static void *drive_thread(void *p)
{
    drive_thread_arg *a = p;

    a->r = drive_fds(a->args, a->n);
    ASYNC_cleanup_thread();
    return NULL;
}

static void test_jobs_second_thread_stages(void **state)
{
    const int gate = g_kernel_executor && getenv("GPUPROV_TEST_STAGE_ONE_THREAD") == NULL
                     && (g_cuda || getenv("GPUPROV_TEST_HOST_STAGE") != NULL);
    job_arg *args = calloc(2 * 16, sizeof(*args));
    drive_thread_arg other;
    drive_result mine;
    pthread_t th;
    stats3 s0, s1, s2;

    (void)state;
    assert_non_null(args);
    for (int i = 0; i < 2 * 16; i++)
        job_prepare(&args[i], 100 + i, 0);
    s0 = provider_stats();
    mine = drive_fds(args, 16);
    s1 = provider_stats();
    other = (drive_thread_arg){ .args = args + 16, .n = 16 };
    assert_int_equal(pthread_create(&th, NULL, drive_thread, &other), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    s2 = provider_stats();
    assert_int_equal(mine.errors, 0);
    assert_int_equal(other.r.errors, 0);
    check_results(args, 2 * 16);
    fprintf(stderr, "test_async: staged from one thread %llu, after a second %llu\n",
            (unsigned long long)(s1.staged - s0.staged), (unsigned long long)(s2.staged - s1.staged));
    if (gate) {
        assert_int_equal(s1.staged - s0.staged, 0);
        assert_true(s2.staged - s1.staged > 0);
    }
    for (int i = 0; i < 2 * 16; i++)
        job_release(&args[i]);
    free(args);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobs_wait_fds),
        cmocka_unit_test(test_jobs_callbacks),
        cmocka_unit_test(test_jobs_bad_tag),
        cmocka_unit_test(test_jobs_with_sync_threads),
        cmocka_unit_test(test_jobs_after_fork),
        cmocka_unit_test(test_jobs_paused_across_fork),
        cmocka_unit_test(test_jobs_second_thread_stages),   /* last: see its comment */
    };
    int failed;

    /* The provider's stats counters (read through its params) count only with stats on. */
    setenv("GPUPROV_STATS", "1", 1);
    failed = cmocka_run_group_tests(tests, group_setup, evp_group_teardown);
    ASYNC_cleanup_thread();
    return failed;
}
