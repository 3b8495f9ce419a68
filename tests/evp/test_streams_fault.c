/* SPDX-License-Identifier: Apache-2.0 */
/* openssl speed's streams under a GPU failure: async jobs each stream one long message on a context
 * of their own while the GPU side fails under one batch; every byte and tag the default provider's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <cmocka.h>

#include <openssl/async.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "evp_common.h"

/*
 * Run with the hybrid policy and the host executor as its GPU side, which fails one batch after
 * GPUPROV_TEST_HOST_FAIL_AFTER good ones (tests/evp/meson.build). As `openssl speed -async_jobs`
 * does (apps/speed.c, EVP_Update_loop), each job streams updates into one message on one context:
 * the streams (CTR, ChaCha20) go on on the cpu executor at their counter, mid-block (the updates'
 * lengths are odd), and the AEAD messages the GPU side had begun finish on the host executor.
 */
#define JOBS_PER_CIPHER 8
#define UPDATES 12
#define MAX_UPDATE 5000

static const char *const names[] = { "AES-128-CTR", "ChaCha20", "AES-256-GCM", "ChaCha20-Poly1305" };

typedef struct {
    const gptest_env *env;
    int idx;                     /* in evp_ciphers */
    unsigned char key[32], iv[16], tag[16], ref_tag[16];
    size_t len[UPDATES], total;
    unsigned char *in, *out, *ref;
    int ok;
} stream_job;

static int is_aead(const stream_job *s)
{
    return evp_ciphers[s->idx].kind == K_GCM || evp_ciphers[s->idx].kind == K_CCP;
}

/* The whole stream at once through the default provider. */
static void reference(stream_job *s)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl;

    assert_true(EVP_EncryptInit_ex2(ctx, evp_cipher(s->env, s->idx, 0), s->key, s->iv, NULL));
    assert_true(EVP_EncryptUpdate(ctx, s->ref, &outl, s->in, (int)s->total));
    assert_true(EVP_EncryptFinal_ex(ctx, s->ref + s->total, &outl));
    if (is_aead(s))
        assert_true(evp_get_tag(ctx, s->ref_tag, 16));
    EVP_CIPHER_CTX_free(ctx);
}

/* A job: the stream through gpuprov, update by update (each pauses the job while its batch runs). */
static int job_main(void *v)
{
    stream_job *s = *(stream_job **)v;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    size_t at = 0;
    int outl, ok = ctx != NULL && EVP_EncryptInit_ex2(ctx, evp_cipher(s->env, s->idx, 1), s->key, s->iv, NULL);

    for (int u = 0; u < UPDATES && ok; u++) {
        ok = EVP_EncryptUpdate(ctx, s->out + at, &outl, s->in + at, (int)s->len[u]) && (size_t)outl == s->len[u];
        at += s->len[u];
    }
    ok = ok && EVP_EncryptFinal_ex(ctx, s->out + at, &outl);
    if (ok && is_aead(s))
        ok = evp_get_tag(ctx, s->tag, 16);
    EVP_CIPHER_CTX_free(ctx);
    s->ok = ok;
    return ok;
}

typedef struct {
    uint64_t fallbacks, host_ops, errors;
    const char *executor;
} prov_stats;

static prov_stats stats_now(const gptest_env *env)
{
    prov_stats st = { 0, 0, 0, NULL };
    OSSL_PARAM p[] = {
        OSSL_PARAM_uint64("gpuprov-stats-fallbacks", &st.fallbacks),
        OSSL_PARAM_uint64("gpuprov-stats-host-ops", &st.host_ops),
        OSSL_PARAM_uint64("gpuprov-stats-errors", &st.errors),
        OSSL_PARAM_utf8_ptr("gpuprov-executor", (char **)&st.executor, 0),
        OSSL_PARAM_END
    };

    assert_true(OSSL_PROVIDER_get_params(env->gpuprov, p));
    return st;
}

static void test_streams_under_failure(void **state)
{
    enum { N = JOBS_PER_CIPHER * 4 };
    const gptest_env *env = *state;
    stream_job *jobs = calloc(N, sizeof(*jobs));
    ASYNC_JOB *job[N] = { 0 };
    ASYNC_WAIT_CTX *w[N];
    int done[N] = { 0 }, left = N;
    prov_stats before, after;

    assert_non_null(jobs);
    if (evp_under_default())
        skip();
    gptest_rand_seed();
    for (int i = 0; i < N; i++) {
        stream_job *s = &jobs[i];

        s->env = env;
        s->idx = evp_cipher_index(names[i % 4]);
        gptest_rand_bytes(s->key, sizeof(s->key));
        gptest_rand_bytes(s->iv, sizeof(s->iv));
        for (int u = 0; u < UPDATES; u++) {
            /* Odd lengths from 1 KiB: every stream stands mid-block between updates. */
            s->len[u] = gptest_rand_range(1024, MAX_UPDATE) | 1;
            s->total += s->len[u];
        }
        s->in = malloc(s->total);
        s->out = malloc(s->total + 16);
        s->ref = malloc(s->total + 16);
        assert_true(s->in != NULL && s->out != NULL && s->ref != NULL);
        gptest_rand_bytes(s->in, s->total);
        reference(s);
        assert_non_null(w[i] = ASYNC_WAIT_CTX_new());
    }
    before = stats_now(env);
    assert_string_equal(before.executor, "hybrid");
    /* Round robin over the jobs, as speed's loop resumes them; a job resumed early pauses again. */
    while (left > 0) {
        for (int i = 0; i < N; i++) {
            stream_job *s = &jobs[i];
            int ret = 0;

            if (done[i])
                continue;
            switch (ASYNC_start_job(&job[i], w[i], &ret, job_main, &s, sizeof(s))) {
            case ASYNC_FINISH:
                done[i] = 1;
                left--;
                break;
            case ASYNC_PAUSE:
                break;
            default:
                fail_msg("ASYNC_start_job failed");
            }
        }
        sched_yield();
    }
    after = stats_now(env);
    for (int i = 0; i < N; i++) {
        stream_job *s = &jobs[i];

        assert_true(s->ok);
        assert_memory_equal(s->out, s->ref, s->total);
        if (is_aead(s))
            assert_memory_equal(s->tag, s->ref_tag, 16);
        free(s->in);
        free(s->out);
        free(s->ref);
        ASYNC_WAIT_CTX_free(w[i]);
    }
    fprintf(stderr, "test_streams_fault: fallbacks %llu, host ops %llu, executor now %s\n",
            (unsigned long long)(after.fallbacks - before.fallbacks),
            (unsigned long long)(after.host_ops - before.host_ops), after.executor);
    assert_true(after.fallbacks > before.fallbacks);
    assert_int_equal(after.errors, before.errors);
    assert_string_equal(after.executor, "cpu");
    free(jobs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streams_under_failure),
    };

    if (!ASYNC_is_capable())
        return 77;
    return cmocka_run_group_tests(tests, evp_group_setup, evp_group_teardown);
}
