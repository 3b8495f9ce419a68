/* SPDX-License-Identifier: Apache-2.0 */
/* Routing from the first request under the auto backend: a first large message leaves the cpu lane for the GPU side, a stream moves mid-way; the host executor plays the GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/async.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "gptest.h"

/*
 * Run by meson with backend auto, the host executor as the GPU (GPUPROV_HYBRID_GPU=host), the
 * policy's numbers fixed by knobs (GPU side from 64 KiB, lone callers too), stats on, and the
 * warm-up told the CPUs are free (GPUPROV_TEST_CPUS_FREE). Each test loads gpuprov afresh, so its
 * engine starts before any warm-up.
 */

static uint64_t stat_of(const gptest_env *env, const char *name)
{
    uint64_t v = 0;
    OSSL_PARAM p[] = { OSSL_PARAM_uint64(name, &v), OSSL_PARAM_END };

    assert_true(OSSL_PROVIDER_get_params(env->gpuprov, p));
    return v;
}

static const char *executor_of(const gptest_env *env)
{
    const char *name = NULL;
    OSSL_PARAM p[] = { OSSL_PARAM_utf8_ptr("gpuprov-executor", &name, 0), OSSL_PARAM_END };

    assert_true(OSSL_PROVIDER_get_params(env->gpuprov, p));
    return name;
}

/* Wait (at most 10 s) for the warm-up to end: the engine then names its mode "hybrid". */
static void wait_for_hybrid(const gptest_env *env)
{
    for (int i = 0; i < 10000; i++) {
        if (strcmp(executor_of(env), "hybrid") == 0)
            return;
        usleep(1000);
    }
    fail_msg("the warm-up did not end within 10 s (executor %s)", executor_of(env));
}

/* One context per provider, fed the same updates. */
typedef struct pair {
    EVP_CIPHER_CTX *gp, *ref;
    EVP_CIPHER *cgp, *cref;
} pair;

static void pair_init(pair *p, const gptest_env *env, const char *name, const uint8_t *key, const uint8_t *iv,
                      int enc)
{
    p->cgp = gptest_fetch(env, name, 1);
    p->cref = gptest_fetch(env, name, 0);
    p->gp = EVP_CIPHER_CTX_new();
    p->ref = EVP_CIPHER_CTX_new();
    assert_true(EVP_CipherInit_ex2(p->gp, p->cgp, key, iv, enc, NULL));
    assert_true(EVP_CipherInit_ex2(p->ref, p->cref, key, iv, enc, NULL));
}

static void pair_free(pair *p)
{
    EVP_CIPHER_CTX_free(p->gp);
    EVP_CIPHER_CTX_free(p->ref);
    EVP_CIPHER_free(p->cgp);
    EVP_CIPHER_free(p->cref);
}

/* The same `len` bytes through both; their outputs must agree. */
static void pair_update(pair *p, size_t len)
{
    uint8_t *in = malloc(len), *a = malloc(len), *b = malloc(len);
    int la = 0, lb = 0;

    assert_non_null(in);
    gptest_rand_bytes(in, len);
    assert_true(EVP_CipherUpdate(p->gp, a, &la, in, (int)len));
    assert_true(EVP_CipherUpdate(p->ref, b, &lb, in, (int)len));
    assert_int_equal(la, lb);
    assert_int_equal(la, (int)len);
    assert_memory_equal(a, b, len);
    free(in);
    free(a);
    free(b);
}

/* Final and (encrypt) the tags of both. */
static void pair_finish(pair *p, int aead)
{
    uint8_t ta[16], tb[16], out[16];
    int la = -1, lb = -1;

    assert_true(EVP_CipherFinal_ex(p->gp, out, &la));
    assert_true(EVP_CipherFinal_ex(p->ref, out, &lb));
    assert_int_equal(la, lb);
    if (aead) {
        assert_true(EVP_CIPHER_CTX_ctrl(p->gp, EVP_CTRL_AEAD_GET_TAG, 16, ta));
        assert_true(EVP_CIPHER_CTX_ctrl(p->ref, EVP_CTRL_AEAD_GET_TAG, 16, tb));
        assert_memory_equal(ta, tb, 16);
    }
}

static const struct { const char *name; int aead; size_t keylen, ivlen; } aeads[] = {
    { "AES-256-GCM", 1, 32, 12 }, { "AES-128-GCM", 1, 16, 12 }, { "ChaCha20-Poly1305", 1, 32, 12 },
};

/* An AEAD message whose first data request is large goes to the GPU side at once (the prior, here
 * from the knobs): the warm-up is started and waited for, the message leaves the lane before
 * absorbing anything, and its bytes and tag are the default provider's. Decryption too, with the
 * tag set before the data, and a wrong tag refused. */
static void test_first_large_aead(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(aeads) / sizeof(aeads[0]); c++) {
        void *st = NULL;
        gptest_env *env;
        uint8_t key[32], iv[12], tag[16];
        size_t len = (1u << 20) + 3;
        uint8_t *in = malloc(len), *ct = malloc(len), *pt = malloc(len);
        pair p;
        int outl;

        assert_int_equal(gptest_env_setup(&st), 0);
        env = st;
        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 0);
        pair_init(&p, env, aeads[c].name, key, iv, 1);
        pair_update(&p, len);
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 1);
        assert_true(stat_of(env, "gpuprov-stats-host-ops") >= 1);
        pair_update(&p, 100);   /* the rest of the message stays where it runs */
        pair_finish(&p, 1);
        pair_free(&p);

        /* decrypt: encrypt with the default provider, decrypt with gpuprov (tag set first) */
        {
            EVP_CIPHER *cref = gptest_fetch(env, aeads[c].name, 0), *cgp = gptest_fetch(env, aeads[c].name, 1);
            EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();

            gptest_rand_bytes(in, len);
            assert_true(EVP_EncryptInit_ex2(x, cref, key, iv, NULL));
            assert_true(EVP_EncryptUpdate(x, ct, &outl, in, (int)len));
            assert_true(EVP_EncryptFinal_ex(x, tag, &outl));
            assert_true(EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, 16, tag));
            for (int wrong = 0; wrong < 2; wrong++) {
                uint64_t before = stat_of(env, "gpuprov-stats-routed-gpu");

                assert_true(EVP_DecryptInit_ex2(x, cgp, key, iv, NULL));
                tag[0] ^= (uint8_t)wrong;
                assert_true(EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, 16, tag));
                tag[0] ^= (uint8_t)wrong;
                assert_true(EVP_DecryptUpdate(x, pt, &outl, ct, (int)len));
                assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), before + 1);
                assert_int_equal(EVP_DecryptFinal_ex(x, pt + len, &outl), !wrong);
                if (!wrong)
                    assert_memory_equal(pt, in, len);
            }
            EVP_CIPHER_CTX_free(x);
            EVP_CIPHER_free(cref);
            EVP_CIPHER_free(cgp);
        }
        free(in);
        free(ct);
        free(pt);
        gptest_env_teardown(&st);
    }
}

/* An AEAD message that absorbed data on the lane stays there (its MAC state is the default
 * provider's), even when a large update comes after the warm-up: still the default's bytes. */
static void test_aead_started_stays(void **state)
{
    void *st = NULL;
    gptest_env *env;
    uint8_t key[32], iv[12];
    pair p;

    (void)state;
    assert_int_equal(gptest_env_setup(&st), 0);
    env = st;
    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    pair_init(&p, env, "AES-256-GCM", key, iv, 1);
    pair_update(&p, 1000);
    pair_update(&p, 300 << 10);     /* large, not first: starts the warm-up, waits for nothing */
    wait_for_hybrid(env);
    pair_update(&p, 1 << 20);
    assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 0);
    pair_finish(&p, 1);
    pair_free(&p);
    gptest_env_teardown(&st);
}

static const struct { const char *name; size_t keylen; } streams[] = {
    { "AES-128-CTR", 16 }, { "AES-256-CTR", 32 }, { "ChaCha20", 32 },
};

/* CTR's counter state as EVP reports it: gpuprov's must be the default provider's. */
static void same_ctr_state(pair *p)
{
    uint8_t a[16], b[16];
    unsigned int na = 99, nb = 98;
    OSSL_PARAM pa[] = { OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_UPDATED_IV, a, 16),
                        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_NUM, &na), OSSL_PARAM_END };
    OSSL_PARAM pb[] = { OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_UPDATED_IV, b, 16),
                        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_NUM, &nb), OSSL_PARAM_END };

    assert_true(EVP_CIPHER_CTX_get_params(p->gp, pa));
    assert_true(EVP_CIPHER_CTX_get_params(p->ref, pb));
    assert_memory_equal(a, b, 16);
    assert_int_equal(na, nb);
}

/* A stream started on the lane before the GPU was ready moves to the GPU side at a large update
 * once it is: the lane finishes the partial block it stood in (1007 + 300 KiB bytes: 15 bytes into
 * an AES block, 47 into a ChaCha20 block), the engine goes on from the next counter. Every byte
 * before, across and after the move is the default provider's, and so is CTR's counter state. */
static void test_stream_moves(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(streams) / sizeof(streams[0]); c++) {
        void *st = NULL;
        gptest_env *env;
        uint8_t key[32], iv[16];
        pair p;
        const int ctr = strstr(streams[c].name, "CTR") != NULL;

        assert_int_equal(gptest_env_setup(&st), 0);
        env = st;
        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        if (ctr)
            memset(iv + 8, 0xff, 7);   /* the counter carries across 64-bit words during the test */
        else
            iv[0] = iv[1] = iv[2] = 0, iv[3] = 0;   /* a ChaCha20 block counter from 0 */
        pair_init(&p, env, streams[c].name, key, iv, 1);
        pair_update(&p, 1000);
        pair_update(&p, 7);
        pair_update(&p, 300 << 10);   /* large, but the GPU is not open: on the lane, warm-up started */
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 0);
        wait_for_hybrid(env);
        if (ctr)
            same_ctr_state(&p);
        pair_update(&p, (300 << 10) + 5);   /* moves here */
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 1);
        if (ctr)
            same_ctr_state(&p);
        pair_update(&p, 13);
        pair_update(&p, (64 << 10) + 3);
        pair_update(&p, 1 << 20);
        if (ctr)
            same_ctr_state(&p);
        pair_finish(&p, 0);
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 1);
        assert_true(stat_of(env, "gpuprov-stats-host-ops") >= 4);
        pair_free(&p);
        gptest_env_teardown(&st);
    }
}

/* After the warm-up a new context's first message goes through the engine and is routed at its
 * first update: a small one puts the stream on the engine's cpu executor, and a later large update
 * moves it to the GPU side the same way (the cpu executor finishes the partial block). */
static void test_stream_moves_from_cpu_executor(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(streams) / sizeof(streams[0]); c++) {
        void *st = NULL;
        gptest_env *env;
        uint8_t key[32], iv[16];
        pair p, warm;

        assert_int_equal(gptest_env_setup(&st), 0);
        env = st;
        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        iv[0] = iv[1] = iv[2] = iv[3] = 0;
        /* a first context's large update starts the warm-up (and, first, waits for it) */
        pair_init(&warm, env, streams[c].name, key, iv, 1);
        pair_update(&warm, 300 << 10);
        pair_free(&warm);
        wait_for_hybrid(env);
        pair_init(&p, env, streams[c].name, key, iv, 1);
        pair_update(&p, 100);                /* routed to the cpu executor (below min_gpu_bytes) */
        pair_update(&p, 1001);
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 1);
        pair_update(&p, (300 << 10) + 7);   /* moves */
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 2);
        pair_update(&p, 5);
        pair_update(&p, 1 << 20);
        if (strstr(streams[c].name, "CTR") != NULL)
            same_ctr_state(&p);
        pair_finish(&p, 0);
        pair_free(&p);
        gptest_env_teardown(&st);
    }
}

/* A stream whose first update is large goes to the GPU side from its first byte, as an AEAD
 * message does. */
static void test_first_large_stream(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(streams) / sizeof(streams[0]); c++) {
        void *st = NULL;
        gptest_env *env;
        uint8_t key[32], iv[16];
        pair p;

        assert_int_equal(gptest_env_setup(&st), 0);
        env = st;
        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        iv[0] = iv[1] = iv[2] = iv[3] = 0;
        pair_init(&p, env, streams[c].name, key, iv, 1);
        pair_update(&p, (1 << 20) + 1);
        assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 1);
        pair_update(&p, 31);
        pair_finish(&p, 0);
        pair_free(&p);
        gptest_env_teardown(&st);
    }
}

/* The first large message from inside an async job (as in `openssl speed -async_jobs`): the job
 * waits for the warm-up where it stands, its message then runs on the GPU side and pauses the job
 * as any batch does; the result is the default provider's. */
typedef struct job_arg {
    EVP_CIPHER_CTX *ctx;
    const uint8_t *in;
    uint8_t *out;
    int len;
    uint8_t tag[16];
} job_arg;

static int job_encrypt(void *v)
{
    job_arg *a = *(job_arg **)v;
    int outl = 0, finl = 0;

    return EVP_EncryptUpdate(a->ctx, a->out, &outl, a->in, a->len) && outl == a->len
           && EVP_EncryptFinal_ex(a->ctx, a->out + outl, &finl) && finl == 0
           && EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_GET_TAG, 16, a->tag) > 0;
}

static void test_first_large_in_job(void **state)
{
    void *st = NULL;
    gptest_env *env;
    uint8_t key[32], iv[12], ref_tag[16];
    const int len = 1 << 20;
    uint8_t *in = malloc(len), *out = malloc(len), *ref = malloc(len);
    EVP_CIPHER *cgp, *cref;
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    ASYNC_JOB *job = NULL;
    ASYNC_WAIT_CTX *w = ASYNC_WAIT_CTX_new();
    job_arg a, *ap = &a;
    int ret = 0, r, outl;

    (void)state;
    assert_int_equal(gptest_env_setup(&st), 0);
    env = st;
    cgp = gptest_fetch(env, "ChaCha20-Poly1305", 1);
    cref = gptest_fetch(env, "ChaCha20-Poly1305", 0);
    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(in, (size_t)len);
    assert_true(EVP_EncryptInit_ex2(x, cref, key, iv, NULL));
    assert_true(EVP_EncryptUpdate(x, ref, &outl, in, len));
    assert_true(EVP_EncryptFinal_ex(x, ref + len, &outl));
    assert_true(EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, 16, ref_tag));
    assert_true(EVP_EncryptInit_ex2(x, cgp, key, iv, NULL));   /* outside the job, as speed does */
    a = (job_arg){ .ctx = x, .in = in, .out = out, .len = len };
    assert_true(ASYNC_init_thread(1, 1));
    do
        r = ASYNC_start_job(&job, w, &ret, job_encrypt, &ap, sizeof(ap));
    while (r == ASYNC_PAUSE);
    assert_int_equal(r, ASYNC_FINISH);
    assert_int_equal(ret, 1);
    assert_memory_equal(out, ref, (size_t)len);
    assert_memory_equal(a.tag, ref_tag, 16);
    assert_int_equal(stat_of(env, "gpuprov-stats-routed-gpu"), 1);
    ASYNC_WAIT_CTX_free(w);
    ASYNC_cleanup_thread();
    EVP_CIPHER_CTX_free(x);
    EVP_CIPHER_free(cgp);
    EVP_CIPHER_free(cref);
    free(in);
    free(out);
    free(ref);
    gptest_env_teardown(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_large_aead),
        cmocka_unit_test(test_aead_started_stays),
        cmocka_unit_test(test_stream_moves),
        cmocka_unit_test(test_first_large_stream),
        cmocka_unit_test(test_stream_moves_from_cpu_executor),
        cmocka_unit_test(test_first_large_in_job),
    };

    gptest_rand_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
