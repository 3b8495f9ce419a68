/* SPDX-License-Identifier: Apache-2.0 */
/* Engine tests: batches of interleaved requests through the host pool and the cpu executor, stats,
 * knobs and the per-IV limits, checked against OpenSSL's default provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include "gptest.h"
#include "batching/engine.h"
#include "batching/core/core.h"
#include "batching/exec_cpu.h"
#include "batching/exec_host.h"
#include "batching/kstate.h"
#include "kernels/msg_unit.h"
#include "provider/cipher_ctx.h"

#define NMSG 48

typedef struct {
    uint32_t alg;
    const char *name;
    size_t keylen, ivlen;
} alg_desc;

static const alg_desc algs[] = {
    { GP_ALG_AES_CTR, "AES-128-CTR", 16, 16 },
    { GP_ALG_AES_CTR, "AES-256-CTR", 32, 16 },
    { GP_ALG_AES_GCM, "AES-128-GCM", 16, 12 },
    { GP_ALG_AES_GCM, "AES-192-GCM", 24, 12 },
    { GP_ALG_AES_GCM, "AES-256-GCM", 32, 12 },
    { GP_ALG_CHACHA20, "ChaCha20", 32, 16 },
    { GP_ALG_CHACHA20_POLY1305, "ChaCha20-Poly1305", 32, 12 },
};

static int is_aead(uint32_t alg)
{
    return alg == GP_ALG_AES_GCM || alg == GP_ALG_CHACHA20_POLY1305;
}

/* The reference: one-shot through the default provider. */
static void reference(OSSL_LIB_CTX *lib, const alg_desc *a, const uint8_t *key, const uint8_t *iv,
                      const uint8_t *aad, size_t aadlen, const uint8_t *in, size_t len,
                      uint8_t *out, uint8_t tag[16])
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(lib, a->name, "provider=default");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl;

    assert_non_null(c);
    assert_true(EVP_EncryptInit_ex2(ctx, c, key, iv, NULL));
    if (is_aead(a->alg) && aadlen > 0)
        assert_true(EVP_EncryptUpdate(ctx, NULL, &outl, aad, (int)aadlen));
    if (len > 0)
        assert_true(EVP_EncryptUpdate(ctx, out, &outl, in, (int)len));
    assert_true(EVP_EncryptFinal_ex(ctx, out + len, &outl));
    if (is_aead(a->alg))
        assert_true(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag));
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
}

typedef struct {
    const alg_desc *a;
    uint8_t key[32], iv[16], aad[40], tag[16], ref_tag[16];
    size_t aadlen, len;
    uint8_t *in, *out, *ref;
    gp_key *k;
    gp_msg *m;
} msg_case;

/* Knobs all zero but the backend (as these tests have always run: every request flushes its batch),
 * with the test hooks and experiment switches at their defaults: a zeroed hook is not off
 * (cuda_fault_after = 0 fails the first batch). */
static gp_knobs knobs_zeroed(gp_backend backend)
{
    gp_knobs k, d;

    gp_settings_defaults(&d);
    memset(&k, 0, sizeof(k));
    k.backend = backend;
    k.test = d.test;
    k.exp = d.exp;
    return k;
}

/* Many messages, their requests interleaved in one batch: each message's requests must still run
 * in order, whichever worker takes them. */
static void run_batch(gp_backend backend, int host_threads)
{
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    gp_knobs knobs = knobs_zeroed(backend);
    gp_engine *e;
    msg_case mc[NMSG];
    gp_request reqs[NMSG * 4];
    size_t nreq = 0;
    gp_stats st;

    knobs.stats = 1;
    knobs.host_threads = host_threads;
    e = gp_engine_new(&knobs, lib);
    assert_non_null(e);
    gptest_rand_seed();
    for (int i = 0; i < NMSG; i++) {
        msg_case *c = &mc[i];

        c->a = &algs[gptest_rand_range(0, sizeof(algs) / sizeof(algs[0]) - 1)];
        c->len = i % 7 == 0 ? gptest_rand_range(0, 40) : gptest_rand_range(1000, 9000);
        c->aadlen = is_aead(c->a->alg) ? gptest_rand_range(0, sizeof(c->aad)) : 0;
        gptest_rand_bytes(c->key, sizeof(c->key));
        gptest_rand_bytes(c->iv, sizeof(c->iv));
        gptest_rand_bytes(c->aad, sizeof(c->aad));
        if (c->a->alg == GP_ALG_CHACHA20)
            c->iv[0] = c->iv[1] = c->iv[2] = c->iv[3] = 0;   /* keep libsodium-style counters small */
        c->in = malloc(c->len + 1);
        c->out = malloc(c->len + 1);
        c->ref = malloc(c->len + 16);
        gptest_rand_bytes(c->in, c->len);
        reference(lib, c->a, c->key, c->iv, c->aad, c->aadlen, c->in, c->len, c->ref, c->ref_tag);
        c->k = gp_key_new(e, c->a->alg, c->key, c->a->keylen);
        c->m = gp_msg_new(e);
        assert_non_null(c->k);
        assert_non_null(c->m);
        assert_true(gp_msg_start(c->m, c->k, c->iv, c->a->ivlen, 1));
    }
    /* Round-robin over messages: AAD, first half, second half, tag. */
    for (int step = 0; step < 4; step++) {
        for (int i = 0; i < NMSG; i++) {
            msg_case *c = &mc[i];
            gp_request r = { .msg = c->m };
            size_t half = c->len / 2;

            if (step == 0 && c->aadlen > 0) {
                r.kind = GP_REQ_AAD, r.in = c->aad, r.len = c->aadlen;
            } else if (step == 1) {
                r.kind = GP_REQ_CRYPT, r.in = c->in, r.out = c->out, r.len = half;
            } else if (step == 2) {
                r.kind = GP_REQ_CRYPT, r.in = c->in + half, r.out = c->out + half, r.len = c->len - half;
            } else if (step == 3 && is_aead(c->a->alg)) {
                r.kind = GP_REQ_TAG, r.tag_out = c->tag;
            } else {
                continue;
            }
            reqs[nreq++] = r;
        }
    }
    assert_true(gp_engine_submit(e, reqs, nreq));
    for (size_t i = 0; i < nreq; i++)
        assert_int_equal(reqs[i].status, GP_REQ_OK);
    for (int i = 0; i < NMSG; i++) {
        msg_case *c = &mc[i];

        assert_memory_equal(c->out, c->ref, c->len);
        if (is_aead(c->a->alg))
            assert_memory_equal(c->tag, c->ref_tag, 16);
    }
    gp_engine_stats(e, &st);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.ops, nreq);
    assert_int_equal(st.errors, 0);
    assert_int_equal(backend == GP_BACKEND_HOST ? st.host_ops
                     : backend == GP_BACKEND_CUDA ? st.cuda_ops : st.cpu_ops, nreq);
    assert_string_equal(gp_engine_backend_name(e), backend == GP_BACKEND_HOST ? "host"
                        : backend == GP_BACKEND_CUDA ? "cuda" : "cpu");

    for (int i = 0; i < NMSG; i++) {
        gp_msg_free(mc[i].m);
        gp_key_free(mc[i].k);
        free(mc[i].in);
        free(mc[i].out);
        free(mc[i].ref);
    }
    gp_engine_free(e);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

static void test_host_batch_pool(void **state)
{
    (void)state;
    run_batch(GP_BACKEND_HOST, 4);
}

static void test_host_batch_inline(void **state)
{
    (void)state;
    run_batch(GP_BACKEND_HOST, 1);
}

/* A failed GPU batch mid-stream (the test hook cuda_fault_after or, with `silent`,
 * cuda_silent_after picks how it fails; `lone_off` whether the executor's lone cluster launch or
 * its three launches run it): the failed batch and the rest of its messages complete on the host
 * from the same state, byte-identical; new messages go to the cpu executor. */
static void cuda_failure_falls_back(int silent, int lone_off)
{
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    gp_knobs knobs = knobs_zeroed(GP_BACKEND_CUDA);
    gp_engine *e;
    const alg_desc *a = &algs[4];   /* AES-256-GCM */
    uint8_t key[32], iv[16], aad[40], in[3000], out[3000], ref[3016], tag[16], ref_tag[16];
    gp_key *k;
    gp_msg *m;
    gp_stats st;

    /* The AAD (carried with the data) and the first part run on the GPU as one batch, the second
     * batch fails. */
    knobs.stats = 1;
    if (silent)
        knobs.test.cuda_silent_after = 1;
    else
        knobs.test.cuda_fault_after = 1;
    knobs.exp.lone_launch = !lone_off;
    e = gp_engine_new(&knobs, lib);
    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(in, sizeof(in));
    reference(lib, a, key, iv, aad, sizeof(aad), in, sizeof(in), ref, ref_tag);
    k = gp_key_new(e, a->alg, key, a->keylen);
    m = gp_msg_new(e);
    assert_true(gp_msg_start(m, k, iv, 12, 1));
    assert_string_equal(gp_engine_backend_name(e), "cuda");
    assert_true(gp_msg_aad(m, aad, sizeof(aad)));
    assert_true(gp_msg_crypt(m, in, out, 1000));
    assert_true(gp_msg_crypt(m, in + 1000, out + 1000, sizeof(in) - 1000));   /* fails on the GPU */
    assert_true(gp_msg_tag(m, tag));
    assert_memory_equal(out, ref, sizeof(in));
    assert_memory_equal(tag, ref_tag, 16);
    assert_string_equal(gp_engine_backend_name(e), "cpu");
    gp_engine_stats(e, &st);
    assert_int_equal(st.cuda_ops, 1);
    assert_int_equal(st.fallbacks, 1);
    /* The failed part re-run on the host, and the tag that run left (no request of its own). */
    assert_int_equal(st.host_ops, 2);
    assert_int_equal(st.spec_tags, 1);
    gp_msg_free(m);
    gp_key_free(k);
    gp_engine_free(e);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

/* A CUDA error at launch. */
static void test_cuda_fault_falls_back(void **state)
{
    (void)state;
    cuda_failure_falls_back(0, 0);
    cuda_failure_falls_back(0, 1);
}

/* A batch whose last kernel ends without writing its done words (batching/cuda/deliver.c
 * wait_for_gpu): the event completes, the words stay unset, and the batch must count as failed
 * rather than deliver what the pinned arena holds. */
static void test_cuda_silent_kernel_falls_back(void **state)
{
    (void)state;
    cuda_failure_falls_back(1, 0);
    cuda_failure_falls_back(1, 1);
}

/* Knobs as an unconfigured provider has them (environment aside), for one backend. */
static gp_knobs knobs_for(gp_backend backend)
{
    gp_knobs k;

    gp_knobs_load(&k, NULL, NULL);
    k.backend = backend;
    k.stats = 1;
    return k;
}

/* The backend the per-executor tests run on: $GPTEST_ENGINE_BACKEND (meson registers one run each). */
static gp_backend env_backend(void)
{
    const char *b = getenv("GPTEST_ENGINE_BACKEND");

    if (b != NULL && strcmp(b, "cuda") == 0)
        return GP_BACKEND_CUDA;
    if (b != NULL && strcmp(b, "cpu") == 0)
        return GP_BACKEND_CPU;
    return GP_BACKEND_HOST;
}

/* Encrypt `len` bytes as one message on the engine and compare with the default provider. */
static void one_message(gp_engine *e, OSSL_LIB_CTX *lib, const alg_desc *a, size_t len)
{
    uint8_t key[32], iv[16], aad[13], tag[16], ref_tag[16];
    uint8_t *in = malloc(len + 1), *out = malloc(len + 1), *ref = malloc(len + 16);
    gp_key *k;
    gp_msg *m;

    assert_non_null(in);
    assert_non_null(out);
    assert_non_null(ref);
    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(in, len);
    if (a->alg == GP_ALG_CHACHA20)
        iv[0] = iv[1] = iv[2] = iv[3] = 0;
    reference(lib, a, key, iv, aad, sizeof(aad), in, len, ref, ref_tag);
    k = gp_key_new(e, a->alg, key, a->keylen);
    m = gp_msg_new(e);
    assert_true(gp_msg_start(m, k, iv, a->ivlen, 1));
    if (is_aead(a->alg))
        assert_true(gp_msg_aad(m, aad, sizeof(aad)));
    assert_true(gp_msg_crypt(m, in, out, len));
    assert_memory_equal(out, ref, len);
    if (is_aead(a->alg)) {
        assert_true(gp_msg_tag(m, tag));
        assert_memory_equal(tag, ref_tag, 16);
    }
    gp_msg_free(m);
    gp_key_free(k);
    free(in);
    free(out);
    free(ref);
}

typedef struct {
    gp_engine *e;
    OSSL_LIB_CTX *lib;
    int seed;
} thread_arg;

static void *thread_main(void *v)
{
    thread_arg *t = v;

    /* Each thread: a different cipher and a spread of lengths, sharing the engine. */
    for (int i = 0; i < 6; i++)
        one_message(t->e, t->lib, &algs[(size_t)(t->seed + i) % (sizeof(algs) / sizeof(algs[0]))],
                    (size_t)(t->seed * 37 + i * 1031) % 5000);
    return NULL;
}

/* 64 threads at once on one engine. (cmocka asserts from threads abort the process on failure,
 * which still fails the test.) */
static void test_threads64(void **state)
{
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    gp_knobs knobs = knobs_for(env_backend());
    gp_engine *e = gp_engine_new(&knobs, lib);
    pthread_t th[64];
    thread_arg args[64];
    gp_stats st;

    (void)state;
    for (int i = 0; i < 64; i++) {
        args[i] = (thread_arg){ e, lib, i };
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < 64; i++)
        pthread_join(th[i], NULL);
    gp_engine_stats(e, &st);
    assert_int_equal(st.errors, 0);
    assert_int_equal(st.fallbacks, 0);
    assert_true(st.ops >= 64 * 6);
    gp_engine_free(e);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

/* Thousands of tiny messages (0..64 bytes, every cipher) in one batch. */
static void test_many_tiny(void **state)
{
    enum { N = 3000 };
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    gp_knobs knobs = knobs_zeroed(env_backend());
    gp_engine *e;
    static msg_case mc[N];
    static gp_request reqs[N];
    gp_stats st;

    (void)state;
    knobs.stats = 1;
    e = gp_engine_new(&knobs, lib);
    for (int i = 0; i < N; i++) {
        msg_case *c = &mc[i];

        c->a = &algs[(size_t)i % (sizeof(algs) / sizeof(algs[0]))];
        c->len = (size_t)i % 65;
        gptest_rand_bytes(c->key, sizeof(c->key));
        gptest_rand_bytes(c->iv, sizeof(c->iv));
        if (c->a->alg == GP_ALG_CHACHA20)
            c->iv[0] = c->iv[1] = c->iv[2] = c->iv[3] = 0;
        c->in = malloc(c->len + 1);
        c->out = malloc(c->len + 1);
        c->ref = malloc(c->len + 16);
        gptest_rand_bytes(c->in, c->len);
        reference(lib, c->a, c->key, c->iv, NULL, 0, c->in, c->len, c->ref, c->ref_tag);
        c->k = gp_key_new(e, c->a->alg, c->key, c->a->keylen);
        c->m = gp_msg_new(e);
        assert_true(gp_msg_start(c->m, c->k, c->iv, c->a->ivlen, 1));
        reqs[i] = (gp_request){ .msg = c->m, .kind = GP_REQ_CRYPT, .in = c->in, .out = c->out,
                                .len = c->len };
    }
    assert_true(gp_engine_submit(e, reqs, N));
    for (int i = 0; i < N; i++)
        assert_memory_equal(mc[i].out, mc[i].ref, mc[i].len);
    gp_engine_stats(e, &st);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.fallbacks, 0);
    for (int i = 0; i < N; i++) {
        gp_msg_free(mc[i].m);
        gp_key_free(mc[i].k);
        free(mc[i].in);
        free(mc[i].out);
        free(mc[i].ref);
    }
    gp_engine_free(e);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

/* Lengths around the unit and chunk boundaries, one message each: 64-byte alignment, 1 and 2 KiB
 * units. */
static void test_unit_boundaries(void **state)
{
    static const size_t lens[] = { 63, 64, 65, 127, 128, 129, 1023, 1024, 1025, 1087, 1088, 1089,
                                   2047, 2048, 2049, 4096 + 63, 65536, 65536 + 1 };
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    gp_knobs knobs = knobs_zeroed(env_backend());
    gp_engine *e;

    (void)state;
    knobs.stats = 1;
    e = gp_engine_new(&knobs, lib);
    for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++)
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
            one_message(e, lib, &algs[a], lens[i]);
    gp_engine_free(e);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

typedef struct {
    gp_engine *e;
    OSSL_LIB_CTX *lib;
    pthread_barrier_t *start;
    int index;
} queue_arg;

static void *queue_thread(void *v)
{
    queue_arg *t = v;

    pthread_barrier_wait(t->start);
    one_message(t->e, t->lib, &algs[(size_t)t->index % (sizeof(algs) / sizeof(algs[0]))], 4096);
    return NULL;
}

/* Concurrent callers share batches: over a few rounds of 32 threads released together, some batch
 * must hold more than one request; every answer stays exact. */
static void test_queue_gathers_threads(void **state)
{
    enum { T = 32 };
    gp_knobs knobs = knobs_for(env_backend());
    OSSL_LIB_CTX *lib;
    OSSL_PROVIDER *dflt;
    int shared = 0;

    (void)state;
    if (knobs.backend == GP_BACKEND_CPU)
        skip();   /* the cpu executor runs each call at once, by design */
    lib = OSSL_LIB_CTX_new();
    dflt = OSSL_PROVIDER_load(lib, "default");
    for (int round = 0; round < 20 && !shared; round++) {
        gp_engine *e = gp_engine_new(&knobs, lib);
        pthread_barrier_t start;
        pthread_t th[T];
        queue_arg args[T];
        gp_stats st;

        pthread_barrier_init(&start, NULL, T);
        for (int i = 0; i < T; i++) {
            args[i] = (queue_arg){ e, lib, &start, i };
            assert_int_equal(pthread_create(&th[i], NULL, queue_thread, &args[i]), 0);
        }
        for (int i = 0; i < T; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&start);
        gp_engine_stats(e, &st);
        assert_int_equal(st.errors, 0);
        shared = st.batches < st.ops;
        gp_engine_free(e);
    }
    assert_true(shared);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

static void test_env_batch(void **state)
{
    (void)state;
    run_batch(env_backend(), 0);
}

/* Verify: a wrong tag is reported as such, a right one passes, truncated tags compare a prefix. */
static void test_verify_statuses(void **state)
{
    static const gp_backend backends[] = { GP_BACKEND_HOST, GP_BACKEND_CPU };
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");

    (void)state;
    for (size_t b = 0; b < 2; b++) {
        gp_knobs knobs = knobs_zeroed(backends[b]);
        gp_engine *e = gp_engine_new(&knobs, lib);
        uint8_t key[32] = { 1 }, iv[12] = { 2 }, pt[100], ct[100], back[100], tag[16];
        gp_key *k = gp_key_new(e, GP_ALG_AES_GCM, key, 32);
        gp_msg *m = gp_msg_new(e);

        memset(pt, 0x5a, sizeof(pt));
        assert_true(gp_msg_start(m, k, iv, 12, 1));
        assert_true(gp_msg_crypt(m, pt, ct, sizeof(pt)));
        assert_true(gp_msg_tag(m, tag));
        for (size_t taglen = 16; taglen >= 4; taglen -= 4) {
            assert_true(gp_msg_start(m, k, iv, 12, 0));
            assert_true(gp_msg_crypt(m, ct, back, sizeof(ct)));
            assert_int_equal(gp_msg_verify(m, tag, taglen), GP_REQ_OK);
            assert_memory_equal(back, pt, sizeof(pt));
        }
        tag[0] ^= 1;
        assert_true(gp_msg_start(m, k, iv, 12, 0));
        assert_true(gp_msg_crypt(m, ct, back, sizeof(ct)));
        assert_int_equal(gp_msg_verify(m, tag, 16), GP_REQ_BAD_TAG);
        gp_msg_free(m);
        gp_key_free(k);
        gp_engine_free(e);
    }
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

/* One message's worth of work on engine e: encrypt (AAD and text in two pieces each), a mid-stream
 * copy that finishes the message too, then decrypt with the right tag and with a wrong one. The key
 * k is used as given (callers pass the same key again to exercise the IV-only re-init). */
static void run_direct_case(gp_engine *e, const alg_desc *a, gp_key *k, const uint8_t *iv,
                            size_t ivlen, const uint8_t *aad, size_t aadlen, const uint8_t *in,
                            size_t len, uint8_t *out, uint8_t tag[16])
{
    gp_msg *m = gp_msg_new(e), *d;
    gp_key *kd = gp_key_dup(k);
    uint8_t *out2 = malloc(len + 1), *back = malloc(len + 1), tag2[16], bad[16];
    size_t half = len / 2;

    assert_non_null(m);
    assert_true(gp_msg_start(m, k, iv, ivlen, 1));
    if (is_aead(a->alg) && aadlen > 0) {
        assert_true(gp_msg_aad(m, aad, aadlen / 2));
        assert_true(gp_msg_aad(m, aad + aadlen / 2, aadlen - aadlen / 2));
    }
    assert_true(gp_msg_crypt(m, in, out, half));
    /* The copy is deep: both finish the message and must agree. */
    d = gp_msg_dup(m, kd);
    assert_non_null(d);
    assert_true(gp_msg_crypt(m, in + half, out + half, len - half));
    memcpy(out2, out, half);
    assert_true(gp_msg_crypt(d, in + half, out2 + half, len - half));
    assert_memory_equal(out, out2, len);
    if (is_aead(a->alg)) {
        assert_true(gp_msg_tag(m, tag));
        assert_true(gp_msg_tag(d, tag2));
        assert_memory_equal(tag, tag2, 16);

        assert_true(gp_msg_start(m, k, iv, ivlen, 0));
        if (aadlen > 0)
            assert_true(gp_msg_aad(m, aad, aadlen));
        assert_true(gp_msg_crypt(m, out, back, len));
        assert_int_equal(gp_msg_verify(m, tag, 16), GP_REQ_OK);
        assert_memory_equal(back, in, len);
        memcpy(bad, tag, 16);
        bad[15] ^= 0x80;
        assert_true(gp_msg_start(m, k, iv, ivlen, 0));
        if (aadlen > 0)
            assert_true(gp_msg_aad(m, aad, aadlen));
        assert_true(gp_msg_crypt(m, out, back, len));
        assert_int_equal(gp_msg_verify(m, bad, 16), GP_REQ_BAD_TAG);
        /* The mismatch is the caller's to report: nothing of the provider's stays queued. */
        assert_int_equal(ERR_peek_error(), 0);
    } else {
        assert_true(gp_msg_start(m, k, iv, ivlen, 0));
        assert_true(gp_msg_crypt(m, out, back, len));
        assert_memory_equal(back, in, len);
    }
    gp_msg_free(d);
    gp_msg_free(m);
    gp_key_free(kd);
    free(out2);
    free(back);
}

/* The cpu executor calls the default provider's cipher functions directly when it can find them,
 * else it goes through EVP. Both paths must give the same bytes (and the reference's), for fresh
 * keys, repeated keys (IV-only re-init), GCM IV lengths other than 12, copies and bad tags. */
static void test_cpu_direct_matches_evp(void **state)
{
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    gp_knobs knobs = knobs_zeroed(GP_BACKEND_CPU);
    gp_engine *direct = gp_engine_new(&knobs, lib), *evp = gp_engine_new(&knobs, lib);
    static const size_t lens[] = { 0, 1, 15, 16, 17, 64, 100, 1000 };
    static const size_t gcm_ivlens[] = { 12, 1, 16, 60 };

    (void)state;
    assert_true(gp_engine_executor_usable(direct, &gp_exec_cpu));
    assert_true(gp_engine_executor_usable(evp, &gp_exec_cpu));
    for (int i = 0; i < 8; i++)
        assert_non_null(direct->cpu_direct[i].newctx);   /* the fast path is really in use */
    /* What a failed lookup leaves: every slot on the EVP path. */
    memset(evp->cpu_direct, 0, sizeof(evp->cpu_direct));
    gptest_rand_seed();
    for (size_t ai = 0; ai < sizeof(algs) / sizeof(algs[0]); ai++) {
        const alg_desc *a = &algs[ai];
        uint8_t key[32], aad[40], iv[64];
        gp_key *kd, *ke;

        gptest_rand_bytes(key, sizeof(key));
        kd = gp_key_new(direct, a->alg, key, a->keylen);
        ke = gp_key_new(evp, a->alg, key, a->keylen);
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            for (size_t vi = 0; vi < (a->alg == GP_ALG_AES_GCM ? 4u : 1u); vi++) {
                size_t len = lens[li], ivlen = a->alg == GP_ALG_AES_GCM ? gcm_ivlens[vi] : a->ivlen;
                size_t aadlen = gptest_rand_range(0, sizeof(aad));
                uint8_t *in = malloc(len + 1), *od = malloc(len + 1), *oe = malloc(len + 1);
                uint8_t td[16], te[16], ref_tag[16], *ref = malloc(len + 16);

                gptest_rand_bytes(iv, sizeof(iv));
                gptest_rand_bytes(aad, sizeof(aad));
                gptest_rand_bytes(in, len);
                if (a->alg == GP_ALG_CHACHA20)
                    memset(iv, 0, 4);
                run_direct_case(direct, a, kd, iv, ivlen, aad, aadlen, in, len, od, td);
                run_direct_case(evp, a, ke, iv, ivlen, aad, aadlen, in, len, oe, te);
                assert_memory_equal(od, oe, len);
                if (is_aead(a->alg))
                    assert_memory_equal(td, te, 16);
                if (ivlen == a->ivlen) {
                    reference(lib, a, key, iv, aad, aadlen, in, len, ref, ref_tag);
                    assert_memory_equal(od, ref, len);
                    if (is_aead(a->alg))
                        assert_memory_equal(td, ref_tag, 16);
                }
                free(in);
                free(od);
                free(oe);
                free(ref);
            }
        }
        gp_key_free(kd);
        gp_key_free(ke);
    }
    gp_engine_free(direct);
    gp_engine_free(evp);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

/* A process whose library context has no default provider still serves, on the host executor. */
static void test_cpu_unusable_falls_back_to_host(void **state)
{
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    /* Only the null provider: the default one is no longer loaded implicitly, so the cpu executor
     * cannot fetch anything. */
    OSSL_PROVIDER *null = OSSL_PROVIDER_load(lib, "null");
    gp_knobs knobs = knobs_zeroed(GP_BACKEND_CPU);
    gp_engine *e = gp_engine_new(&knobs, lib);
    uint8_t key[16] = { 0 }, iv[16] = { 0 }, in[32] = { 0 }, out[32];
    gp_key *k = gp_key_new(e, GP_ALG_AES_CTR, key, 16);
    gp_msg *m = gp_msg_new(e);

    (void)state;
    assert_true(gp_msg_start(m, k, iv, 16, 1));
    assert_true(gp_msg_crypt(m, in, out, sizeof(in)));
    assert_string_equal(gp_engine_backend_name(e), "host");
    /* FIPS-197 C.1 style check: AES-128(0^128) under the zero key = 66e94bd4ef8a2c3b884cfa59ca342b2e */
    {
        static const uint8_t expect[16] = { 0x66, 0xe9, 0x4b, 0xd4, 0xef, 0x8a, 0x2c, 0x3b,
                                            0x88, 0x4c, 0xfa, 0x59, 0xca, 0x34, 0x2b, 0x2e };
        assert_memory_equal(out, expect, 16);
    }
    gp_msg_free(m);
    gp_key_free(k);
    /* GCM without the default provider: E_K(J0) comes from the kernel AES instead of AES-NI.
     * McGrew-Viega test case 2 (zero key, zero 96-bit IV, one zero block). */
    {
        static const uint8_t ct[16] = { 0x03, 0x88, 0xda, 0xce, 0x60, 0xb6, 0xa3, 0x92,
                                        0xf3, 0x28, 0xc2, 0xb9, 0x71, 0xb2, 0xfe, 0x78 };
        static const uint8_t tag[16] = { 0xab, 0x6e, 0x47, 0xd4, 0x2c, 0xec, 0x13, 0xbd,
                                         0xf5, 0x3a, 0x67, 0xb2, 0x12, 0x57, 0xbd, 0xdf };
        uint8_t t[16];

        k = gp_key_new(e, GP_ALG_AES_GCM, key, 16);
        m = gp_msg_new(e);
        assert_true(gp_msg_start(m, k, iv, 12, 1));
        assert_true(gp_msg_crypt(m, in, out, 16));
        assert_true(gp_msg_tag(m, t));
        assert_memory_equal(out, ct, 16);
        assert_memory_equal(t, tag, 16);
        assert_null(k->ecb);   /* no AES-ECB to fetch here */
        gp_msg_free(m);
        gp_key_free(k);
    }
    gp_engine_free(e);
    OSSL_PROVIDER_unload(null);
    OSSL_LIB_CTX_free(lib);
}

/* gp_key_matches (a per-op init with the same key keeps the schedules): equal for the same bytes
 * only, a difference in any byte of every key size found, a length other than the key's refused. */
static void test_key_matches(void **state)
{
    gp_knobs knobs = knobs_zeroed(GP_BACKEND_HOST);
    gp_engine *e = gp_engine_new(&knobs, NULL);
    static const size_t lens[] = { 16, 24, 32 };

    (void)state;
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        uint8_t key[32], other[33];
        gp_key *k;

        for (size_t i = 0; i < sizeof(key); i++)
            key[i] = (uint8_t)(0x5a + 7 * i);
        k = gp_key_new(e, lens[li] == 32 ? GP_ALG_CHACHA20_POLY1305 : GP_ALG_AES_GCM, key, lens[li]);
        assert_non_null(k);
        memcpy(other + 1, key, sizeof(key));   /* unaligned, as a caller's key may be */
        assert_true(gp_key_matches(k, other + 1, lens[li]));
        assert_false(gp_key_matches(k, other + 1, lens[li] - 8));
        for (size_t i = 0; i < lens[li]; i++)
            for (unsigned bit = 0; bit < 8; bit++) {
                other[1 + i] ^= (uint8_t)(1u << bit);
                assert_false(gp_key_matches(k, other + 1, lens[li]));
                other[1 + i] ^= (uint8_t)(1u << bit);
            }
        assert_false(gp_key_matches(NULL, key, lens[li]));
        gp_key_free(k);
    }
    gp_engine_free(e);
}

/* GCM's E_K(J0) at message start: the default provider's AES (the path taken) and the kernel AES
 * (the fallback, and what the GPU would compute) agree for every key size. */
static void test_ekj0_aesni_matches_kernel(void **state)
{
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    gp_knobs knobs = knobs_zeroed(GP_BACKEND_HOST);
    gp_engine *e = gp_engine_new(&knobs, lib);

    (void)state;
    gptest_rand_seed();
    for (size_t keylen = 16; keylen <= 32; keylen += 8) {
        for (int i = 0; i < 20; i++) {
            uint8_t key[32], in[16], a[16], b[16];
            gp_key *k;

            gptest_rand_bytes(key, sizeof(key));
            gptest_rand_bytes(in, sizeof(in));
            k = gp_key_new(e, GP_ALG_AES_GCM, key, keylen);
            assert_true(gp_key_aes_block(e, k, in, a));
            assert_non_null(k->ecb);
            gp_aes_encrypt1(&gp_key_sched_get(k)->aes, in, b);
            assert_memory_equal(a, b, 16);
            assert_true(gp_key_aes_block(e, k, a, a));   /* in place, with the context reused */
            gp_aes_encrypt1(&gp_key_sched_get(k)->aes, b, b);
            assert_memory_equal(a, b, 16);
            gp_key_free(k);
        }
    }
    gp_engine_free(e);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

/* SP 800-38D §5.2.1.1 and RFC 8439 §2.8 limits, at their exact boundaries. */
static void test_limits(void **state)
{
    const uint64_t gcm_max = (UINT64_C(1) << 36) - 32, cp_max = ((UINT64_C(1) << 32) - 1) * 64;

    (void)state;
    assert_true(gp_aead_text_fits(GP_ALG_AES_GCM, 0, gcm_max));
    assert_false(gp_aead_text_fits(GP_ALG_AES_GCM, 0, gcm_max + 1));
    assert_true(gp_aead_text_fits(GP_ALG_AES_GCM, gcm_max - 16, 16));
    assert_false(gp_aead_text_fits(GP_ALG_AES_GCM, gcm_max - 16, 17));
    assert_false(gp_aead_text_fits(GP_ALG_AES_GCM, gcm_max + 5, 0));
    assert_false(gp_aead_text_fits(GP_ALG_AES_GCM, 1, UINT64_MAX));   /* no wrap-around */
    assert_true(gp_aead_text_fits(GP_ALG_CHACHA20_POLY1305, cp_max - 64, 64));
    assert_false(gp_aead_text_fits(GP_ALG_CHACHA20_POLY1305, cp_max - 64, 65));
    assert_true(gp_aead_aad_fits(GP_ALG_AES_GCM, (UINT64_C(1) << 61) - 2, 1));
    assert_false(gp_aead_aad_fits(GP_ALG_AES_GCM, (UINT64_C(1) << 61) - 2, 2));
    assert_true(gp_aead_aad_fits(GP_ALG_CHACHA20_POLY1305, UINT64_MAX - 1, 1));
    assert_false(gp_aead_aad_fits(GP_ALG_CHACHA20_POLY1305, UINT64_MAX - 1, 2));
}

/*
 * fork() while another thread's request waits in the pending batch (batching/queue.c fork_child):
 * the child must not run it. Its bytes are in memory the child does not have (MADV_DONTFORK, as
 * the CUDA driver may treat the pinned chunks async jobs stage into), so running it there would
 * fault. The child's own request runs alone, and the parent's batch still completes. The long
 * request holds the host executor's one batch slot, so the short one stays pending; a round
 * counts only if the long one was still running well after the fork.
 */
typedef struct {
    gp_engine *e;
    const alg_desc *a;
    uint8_t key[32], iv[16];
    const uint8_t *in;
    uint8_t *out;
    size_t len;
    atomic_int done;
    uint64_t end_ns;
    int ok;
} fork_side;

static void *fork_side_main(void *v)
{
    fork_side *s = v;
    gp_key *k = gp_key_new(s->e, s->a->alg, s->key, s->a->keylen);
    gp_msg *m = gp_msg_new(s->e);

    s->ok = k != NULL && m != NULL && gp_msg_start(m, k, s->iv, s->a->ivlen, 1)
            && gp_msg_crypt(m, s->in, s->out, s->len);
    gp_msg_free(m);
    gp_key_free(k);
    s->end_ns = gp_now_ns();
    atomic_store(&s->done, 1);
    return NULL;
}

static void fork_side_init(fork_side *s, gp_engine *e, const alg_desc *a, const uint8_t *in, uint8_t *out,
                           size_t len)
{
    memset(s, 0, sizeof(*s));
    s->e = e;
    s->a = a;
    s->in = in;
    s->out = out;
    s->len = len;
    gptest_rand_bytes(s->key, sizeof(s->key));
    gptest_rand_bytes(s->iv, sizeof(s->iv));
    atomic_init(&s->done, 0);
}

/* In the child: no cmocka (its asserts would unwind into the parent's copy of the runner). */
static int child_message_ok(gp_engine *e, OSSL_LIB_CTX *lib)
{
    const alg_desc *a = &algs[0];   /* AES-128-CTR */
    uint8_t key[16] = { 1 }, iv[16] = { 2 }, in[4096], out[4096], ref[4096];
    EVP_CIPHER *c = EVP_CIPHER_fetch(lib, a->name, "provider=default");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    gp_key *k = gp_key_new(e, a->alg, key, a->keylen);
    gp_msg *m = gp_msg_new(e);
    int outl = 0, ok;

    memset(in, 0x5a, sizeof(in));
    ok = c != NULL && ctx != NULL && EVP_EncryptInit_ex2(ctx, c, key, iv, NULL)
         && EVP_EncryptUpdate(ctx, ref, &outl, in, (int)sizeof(in)) && outl == (int)sizeof(in)
         && k != NULL && m != NULL && gp_msg_start(m, k, iv, a->ivlen, 1) && gp_msg_crypt(m, in, out, sizeof(in))
         && memcmp(out, ref, sizeof(in)) == 0;
    gp_msg_free(m);
    gp_key_free(k);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    return ok;
}

static void test_fork_drops_parent_queue(void **state)
{
    enum { SMALL = 4096 };
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *dflt = OSSL_PROVIDER_load(lib, "default");
    const long page = sysconf(_SC_PAGESIZE);
    const size_t map_len = ((2 * SMALL + (size_t)page - 1) / (size_t)page) * (size_t)page;
    int conclusive = 0;

    (void)state;
    for (int round = 0; round < 4 && !conclusive; round++) {
        const size_t big = (size_t)32 << (20 + round);   /* 32 MiB, doubling while inconclusive */
        gp_knobs knobs = knobs_for(GP_BACKEND_HOST);
        gp_engine *e = gp_engine_new(&knobs, lib);
        uint8_t *big_in = malloc(big), *big_out = malloc(big), *big_ref = malloc(big + 16), tag[16];
        uint8_t *small = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint8_t small_ref[SMALL + 16];
        fork_side longer, shorter;
        pthread_t tl, ts;
        uint64_t fork_ns;
        int status = 0;
        pid_t pid;

        assert_non_null(e);
        assert_non_null(big_in);
        assert_non_null(big_out);
        assert_non_null(big_ref);
        assert_true(small != MAP_FAILED);
        assert_int_equal(madvise(small, map_len, MADV_DONTFORK), 0);
        memset(big_in, 0x3c, big);
        gptest_rand_bytes(small, SMALL);
        fork_side_init(&longer, e, &algs[4], big_in, big_out, big);   /* AES-256-GCM */
        fork_side_init(&shorter, e, &algs[0], small, small + SMALL, SMALL);
        assert_int_equal(pthread_create(&tl, NULL, fork_side_main, &longer), 0);
        while (atomic_load(&e->queue.inflight) == 0 && !atomic_load(&longer.done))
            sched_yield();
        assert_int_equal(pthread_create(&ts, NULL, fork_side_main, &shorter), 0);
        while (atomic_load(&e->queue.pending_bytes) == 0 && !atomic_load(&shorter.done))
            sched_yield();
        fork_ns = gp_now_ns();
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int bad;

            alarm(120);   /* a hang in the child ends it, and the test, instead of the whole run */
            signal(SIGSEGV, SIG_DFL);   /* die of the fault: cmocka's handler would resume its runner */
            signal(SIGBUS, SIG_DFL);
            bad = e->queue.npending != 0 || atomic_load(&e->queue.pending_bytes) != 0;
            if (!bad && !child_message_ok(e, lib))
                bad = 2;
            _exit(bad);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_int_equal(pthread_join(ts, NULL), 0);
        assert_int_equal(pthread_join(tl, NULL), 0);
        assert_true(WIFEXITED(status));   /* a signal here: the child touched the parent's request */
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_true(shorter.ok);
        assert_true(longer.ok);
        reference(lib, shorter.a, shorter.key, shorter.iv, NULL, 0, small, SMALL, small_ref, tag);
        assert_memory_equal(small + SMALL, small_ref, SMALL);
        reference(lib, longer.a, longer.key, longer.iv, NULL, 0, big_in, big, big_ref, tag);
        assert_memory_equal(big_out, big_ref, big);
        /* The short request was pending at the fork if the long batch still ran well after it. */
        conclusive = longer.end_ns > fork_ns + 20000000u;
        fprintf(stderr, "test_engine: fork round %d: %zu MiB batch ran %.1f ms past the fork%s\n", round,
                big >> 20, (double)(int64_t)(longer.end_ns - fork_ns) / 1e6, conclusive ? "" : " (again)");
        gp_engine_free(e);
        munmap(small, map_len);
        free(big_in);
        free(big_out);
        free(big_ref);
    }
    assert_true(conclusive);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
}

/* Knobs: environment values are parsed, bad ones fall back to the defaults. */
static void test_knobs_from_env(void **state)
{
    gp_knobs k;

    (void)state;
    setenv("GPUPROV_BACKEND", "host", 1);
    setenv("GPUPROV_STATS", "1", 1);
    setenv("GPUPROV_HOST_THREADS", "3", 1);
    gp_knobs_load(&k, NULL, NULL);
    assert_int_equal(k.backend, GP_BACKEND_HOST);
    assert_int_equal(k.stats, 1);
    assert_int_equal(k.host_threads, 3);
    setenv("GPUPROV_BACKEND", "CPU", 1);
    setenv("GPUPROV_STATS", "no", 1);
    gp_knobs_load(&k, NULL, NULL);
    assert_int_equal(k.backend, GP_BACKEND_CPU);
    assert_int_equal(k.stats, 0);
    setenv("GPUPROV_STATS", "Steps", 1);
    gp_knobs_load(&k, NULL, NULL);
    assert_int_equal(k.stats, GP_STATS_STEPS);
    setenv("GPUPROV_BACKEND", "gpu-please", 1);
    setenv("GPUPROV_STATS", "maybe", 1);
    setenv("GPUPROV_HOST_THREADS", "-2", 1);
    gp_knobs_load(&k, NULL, NULL);
    assert_int_equal(k.backend, GP_BACKEND_AUTO);
    assert_int_equal(k.stats, 0);
    assert_int_equal(k.host_threads, 0);
    unsetenv("GPUPROV_BACKEND");
    unsetenv("GPUPROV_STATS");
    unsetenv("GPUPROV_HOST_THREADS");

    /* The hybrid knobs: unset means "measure"; sizes take k/m; a share is a fraction. */
    gp_knobs_load(&k, NULL, NULL);
    assert_true(k.min_gpu_bytes == GP_KNOB_CALIBRATE);
    assert_true(k.lone_gpu_bytes == GP_KNOB_CALIBRATE);
    assert_true(k.gpu_share < 0);
    assert_int_equal(k.hybrid_gpu_host, 0);
    assert_int_equal(k.device, 0);
    setenv("GPUPROV_BACKEND", "Hybrid", 1);
    setenv("GPUPROV_MIN_GPU_BYTES", "16k", 1);
    setenv("GPUPROV_LONE_GPU_BYTES", "2M", 1);
    setenv("GPUPROV_GPU_SHARE", "0.25", 1);
    setenv("GPUPROV_HYBRID_GPU", "host", 1);
    setenv("GPUPROV_DEVICE", "all", 1);
    gp_knobs_load(&k, NULL, NULL);
    assert_int_equal(k.backend, GP_BACKEND_HYBRID);
    assert_int_equal(k.min_gpu_bytes, 16384);
    assert_int_equal(k.lone_gpu_bytes, 2 << 20);
    assert_true(k.gpu_share == 0.25);
    assert_int_equal(k.hybrid_gpu_host, 1);
    assert_int_equal(k.device, GP_DEVICE_ALL);
    setenv("GPUPROV_MIN_GPU_BYTES", "-5", 1);
    setenv("GPUPROV_LONE_GPU_BYTES", "12q", 1);
    setenv("GPUPROV_GPU_SHARE", "1.5", 1);
    setenv("GPUPROV_HYBRID_GPU", "fpga", 1);
    gp_knobs_load(&k, NULL, NULL);
    assert_true(k.min_gpu_bytes == GP_KNOB_CALIBRATE);
    assert_true(k.lone_gpu_bytes == GP_KNOB_CALIBRATE);
    assert_true(k.gpu_share < 0);
    assert_int_equal(k.hybrid_gpu_host, 0);
    unsetenv("GPUPROV_BACKEND");
    unsetenv("GPUPROV_MIN_GPU_BYTES");
    unsetenv("GPUPROV_LONE_GPU_BYTES");
    unsetenv("GPUPROV_GPU_SHARE");
    unsetenv("GPUPROV_HYBRID_GPU");
    unsetenv("GPUPROV_DEVICE");
}

int main(void)
{
    /* Run once per executor (GPTEST_ENGINE_BACKEND=host|cpu|cuda); cuda runs are the gpu suite. */
    const struct CMUnitTest per_executor[] = {
        cmocka_unit_test(test_env_batch),
        cmocka_unit_test(test_many_tiny),
        cmocka_unit_test(test_unit_boundaries),
        cmocka_unit_test(test_threads64),
        cmocka_unit_test(test_queue_gathers_threads),
    };
    const struct CMUnitTest cuda_only[] = {
        cmocka_unit_test(test_cuda_fault_falls_back),
        cmocka_unit_test(test_cuda_silent_kernel_falls_back),
    };
    const struct CMUnitTest common[] = {
        cmocka_unit_test(test_host_batch_pool),
        cmocka_unit_test(test_host_batch_inline),
        cmocka_unit_test(test_verify_statuses),
        cmocka_unit_test(test_cpu_direct_matches_evp),
        cmocka_unit_test(test_cpu_unusable_falls_back_to_host),
        cmocka_unit_test(test_key_matches),
        cmocka_unit_test(test_ekj0_aesni_matches_kernel),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_knobs_from_env),
        cmocka_unit_test(test_fork_drops_parent_queue),
    };
    int failed = cmocka_run_group_tests(per_executor, NULL, NULL);

    if (env_backend() == GP_BACKEND_CUDA)
        failed += cmocka_run_group_tests(cuda_only, NULL, NULL);
    else if (env_backend() == GP_BACKEND_HOST)
        failed += cmocka_run_group_tests(common, NULL, NULL);
    return failed;
}
