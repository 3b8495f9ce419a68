/* SPDX-License-Identifier: Apache-2.0 */
/* A failed GPU batch, without a GPU: the host executor stands in for the GPU and fails one batch
 * (test hook host_fail_after); where each message goes on, checked against the default provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/provider.h>

#include "gptest.h"
#include "batching/engine.h"
#include "batching/core/core.h"
#include "batching/exec_cpu.h"
#include "batching/exec_host.h"

typedef struct {
    uint32_t alg;
    const char *name;
    size_t keylen, ivlen;
} alg_desc;

static const alg_desc ctr128 = { GP_ALG_AES_CTR, "AES-128-CTR", 16, 16 };
static const alg_desc ctr256 = { GP_ALG_AES_CTR, "AES-256-CTR", 32, 16 };
static const alg_desc chacha = { GP_ALG_CHACHA20, "ChaCha20", 32, 16 };
static const alg_desc gcm128 = { GP_ALG_AES_GCM, "AES-128-GCM", 16, 12 };
static const alg_desc gcm256 = { GP_ALG_AES_GCM, "AES-256-GCM", 32, 12 };
static const alg_desc chapoly = { GP_ALG_CHACHA20_POLY1305, "ChaCha20-Poly1305", 32, 12 };

static int is_aead(const alg_desc *a)
{
    return a->alg == GP_ALG_AES_GCM || a->alg == GP_ALG_CHACHA20_POLY1305;
}

typedef struct {
    OSSL_LIB_CTX *lib;
    OSSL_PROVIDER *prov;
    gp_engine *e;
} fixture;

/* An engine whose hybrid policy sends every message to its GPU side, the host executor, which
 * fails its batch after `fail_after` good ones (-1: never); `provider` is what the library context
 * holds ("default", or "null": no cpu executor). */
static void setup_with(fixture *f, int fail_after, const char *provider, int host_inflight, int devmem)
{
    gp_knobs k;

    gp_settings_defaults(&k);
    k.backend = GP_BACKEND_HYBRID;
    k.hybrid_gpu_host = 1;
    k.stats = 1;
    k.min_gpu_bytes = 0;
    k.lone_gpu_bytes = 0;
    k.gpu_share = 1.0;
    snprintf(k.calib_cache, sizeof(k.calib_cache), "off");
    k.test.host_fail_after = fail_after;
    k.test.host_inflight = host_inflight;
    k.test.host_devmem = devmem;
    f->lib = OSSL_LIB_CTX_new();
    f->prov = OSSL_PROVIDER_load(f->lib, provider);
    assert_non_null(f->prov);
    f->e = gp_engine_new(&k, f->lib);
    assert_non_null(f->e);
    assert_string_equal(gp_engine_backend_name(f->e), strcmp(provider, "default") == 0 ? "hybrid" : "host");
}

static void setup(fixture *f, int fail_after)
{
    setup_with(f, fail_after, "default", 0, 0);
}

static void teardown(fixture *f)
{
    gp_engine_free(f->e);
    OSSL_PROVIDER_unload(f->prov);
    OSSL_LIB_CTX_free(f->lib);
}

/* The whole message through the default provider (its own library context): out, and the tag. */
static void reference(const alg_desc *a, int enc, const uint8_t *key, const uint8_t *iv, const uint8_t *aad,
                      size_t aadlen, const uint8_t *in, size_t len, uint8_t *out, uint8_t tag[16])
{
    OSSL_LIB_CTX *lib = OSSL_LIB_CTX_new();
    EVP_CIPHER *c = EVP_CIPHER_fetch(lib, a->name, "provider=default");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl;

    assert_non_null(c);
    assert_true(EVP_CipherInit_ex2(ctx, c, key, iv, enc, NULL));
    if (aadlen > 0)
        assert_true(EVP_CipherUpdate(ctx, NULL, &outl, aad, (int)aadlen));
    if (len > 0)
        assert_true(EVP_CipherUpdate(ctx, out, &outl, in, (int)len));
    if (is_aead(a) && enc) {
        assert_true(EVP_CipherFinal_ex(ctx, out + len, &outl));
        assert_true(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag));
    }
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    OSSL_LIB_CTX_free(lib);
}

static gp_stats stats_of(gp_engine *e)
{
    gp_stats st;

    gp_engine_stats(e, &st);
    return st;
}

/*
 * A CTR or ChaCha20 stream: `first` bytes run on the GPU side, then the GPU fails under the next
 * update, which the cpu executor re-runs from where the stream stands (mid-block wherever `first`
 * is not a whole number of blocks), then one more update there. Byte for byte the default
 * provider's stream. `wrap`: the counter block of the block in progress is all ones in its low
 * bytes, so the step back from the kernel's next counter borrows across words.
 */
static void stream_case(const alg_desc *a, size_t first, int wrap)
{
    const size_t second = 1003, third = 777, len = first + second + third;
    const size_t bs = a->alg == GP_ALG_AES_CTR ? 16 : 64;
    uint8_t key[32], iv[16], *in = malloc(len), *out = malloc(len), *ref = malloc(len + 16), tag[16];
    fixture f;
    gp_key *k;
    gp_msg *m;
    gp_stats st;

    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(in, len);
    if (wrap && a->alg == GP_ALG_AES_CTR) {
        /* The block `first` ends in: IV + first / 16 = ...ff ff ff ff (the next one carries). */
        uint64_t lo = UINT64_MAX - first / bs;

        for (int i = 0; i < 8; i++)
            iv[15 - i] = (uint8_t)(lo >> (8 * i));
    } else if (wrap) {
        /* ChaCha20: LE32 counter 2^32 - 1 - first / 64: the next block carries into word 1. */
        uint32_t c = UINT32_MAX - (uint32_t)(first / bs);

        for (int i = 0; i < 4; i++)
            iv[i] = (uint8_t)(c >> (8 * i));
    }
    reference(a, 1, key, iv, NULL, 0, in, len, ref, tag);
    setup(&f, first > 0 ? 1 : 0);
    k = gp_key_new(f.e, a->alg, key, a->keylen);
    m = gp_msg_new(f.e);
    assert_true(gp_msg_start(m, k, iv, a->ivlen, 1));
    if (first > 0) {
        assert_true(gp_msg_crypt(m, in, out, first));
        assert_ptr_equal(m->exec, &gp_exec_host);
    }
    assert_true(gp_msg_crypt(m, in + first, out + first, second));   /* the GPU side fails here */
    assert_ptr_equal(m->exec, &gp_exec_cpu);
    assert_true(gp_msg_crypt(m, in + first + second, out + first + second, third));
    assert_memory_equal(out, ref, len);
    gp_msg_free(m);
    gp_key_free(k);
    st = stats_of(f.e);
    assert_int_equal(st.fallbacks, 1);
    assert_int_equal(st.host_ops, first > 0 ? 1 : 0);
    assert_int_equal(st.cpu_ops, 2);   /* the re-run, and the update after it */
    assert_int_equal(st.errors, 0);
    assert_int_equal(atomic_load(&f.e->fault_said), 1);
    teardown(&f);
    free(in);
    free(out);
    free(ref);
}

static const size_t stream_firsts[] = { 0, 1, 5, 15, 16, 17, 31, 63, 64, 65, 127, 2048 + 13, 70000 + 7 };

static void test_stream_moves_mid_block(void **state)
{
    const alg_desc *as[] = { &ctr128, &ctr256, &chacha };

    (void)state;
    for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++)
        for (size_t j = 0; j < sizeof(stream_firsts) / sizeof(stream_firsts[0]); j++)
            for (int wrap = 0; wrap < 2; wrap++)
                stream_case(as[i], stream_firsts[j], wrap);
}

/* What an AEAD message does before the GPU side fails under it. */
typedef enum {
    HELD_AAD_DATA,     /* 13 bytes of AAD, held and carried with its first data: that request fails */
    OWN_AAD,           /* 100 bytes of AAD (a request of its own): that request fails */
    TAG_ONLY,          /* no AAD, no data: the tag request fails */
    AAD_THEN_DATA,     /* 100 bytes of AAD run on the GPU side, the first data fails */
    DATA_THEN_DATA,    /* held AAD and 1000 bytes of data run, the next data fails */
} aead_story;

/* One AEAD message under `story`, encrypting or decrypting (then verifying the right tag, or a
 * wrong one); checks the output and the tag against the default provider and returns the
 * executor the message finished on. */
static const gp_executor *aead_case(const alg_desc *a, aead_story story, int enc, int bad_tag)
{
    const size_t aadlen = story == HELD_AAD_DATA || story == DATA_THEN_DATA ? 13 : story == TAG_ONLY ? 0 : 100;
    const size_t len = story == TAG_ONLY ? 0 : 3000, cut = story == DATA_THEN_DATA ? 1000 : 0;
    uint8_t key[32], iv[12], aad[100], in[3000], out[3000], ref[3016], tag[16], ref_tag[16];
    const gp_executor *where;
    fixture f;
    gp_key *k;
    gp_msg *m;
    gp_stats st;

    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(in, sizeof(in));
    if (enc) {
        reference(a, 1, key, iv, aad, aadlen, in, len, ref, ref_tag);
    } else {
        /* Decrypt a ciphertext the default provider made, with its tag. */
        uint8_t pt[3000];

        memcpy(pt, in, sizeof(pt));
        reference(a, 1, key, iv, aad, aadlen, pt, len, in, ref_tag);
        memcpy(ref, pt, len);
        if (bad_tag)
            ref_tag[3] ^= 0x20;
    }
    setup(&f, story == AAD_THEN_DATA || story == DATA_THEN_DATA ? 1 : 0);
    k = gp_key_new(f.e, a->alg, key, a->keylen);
    m = gp_msg_new(f.e);
    assert_true(gp_msg_start(m, k, iv, a->ivlen, enc));
    if (aadlen > 0)
        assert_true(gp_msg_aad(m, aad, aadlen));
    if (cut > 0)
        assert_true(gp_msg_crypt(m, in, out, cut));
    if (len > 0) {
        assert_true(gp_msg_crypt(m, in + cut, out + cut, 2000 - cut));
        assert_true(gp_msg_crypt(m, in + 2000, out + 2000, len - 2000));
        assert_memory_equal(out, ref, len);
    }
    if (enc) {
        assert_true(gp_msg_tag(m, tag));
        assert_memory_equal(tag, ref_tag, 16);
    } else {
        assert_int_equal(gp_msg_verify(m, ref_tag, 16), bad_tag ? GP_REQ_BAD_TAG : GP_REQ_OK);
    }
    where = m->exec;
    gp_msg_free(m);
    gp_key_free(k);
    st = stats_of(f.e);
    assert_int_equal(st.fallbacks, 1);
    assert_int_equal(st.errors, 0);
    assert_int_equal(atomic_load(&f.e->fault_said), 1);
    teardown(&f);
    return where;
}

/* Nothing of the message ran on the GPU side (its first request failed: AAD counts as begun only
 * once the GPU side absorbed it): it starts again on the cpu executor from its key and IV. */
static void test_aead_not_begun_restarts_on_cpu(void **state)
{
    const alg_desc *as[] = { &gcm128, &gcm256, &chapoly };

    (void)state;
    for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++) {
        assert_ptr_equal(aead_case(as[i], HELD_AAD_DATA, 1, 0), &gp_exec_cpu);
        assert_ptr_equal(aead_case(as[i], OWN_AAD, 1, 0), &gp_exec_cpu);
        assert_ptr_equal(aead_case(as[i], TAG_ONLY, 1, 0), &gp_exec_cpu);
        assert_ptr_equal(aead_case(as[i], HELD_AAD_DATA, 0, 0), &gp_exec_cpu);
        assert_ptr_equal(aead_case(as[i], HELD_AAD_DATA, 0, 1), &gp_exec_cpu);
        assert_ptr_equal(aead_case(as[i], TAG_ONLY, 0, 0), &gp_exec_cpu);
    }
}

/* The GPU side had begun the message (AAD absorbed, or data): its GHASH or Poly1305 state goes on
 * on the host executor. */
static void test_aead_begun_finishes_on_host(void **state)
{
    const alg_desc *as[] = { &gcm128, &gcm256, &chapoly };

    (void)state;
    for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++) {
        assert_ptr_equal(aead_case(as[i], AAD_THEN_DATA, 1, 0), &gp_exec_host);
        assert_ptr_equal(aead_case(as[i], DATA_THEN_DATA, 1, 0), &gp_exec_host);
        assert_ptr_equal(aead_case(as[i], DATA_THEN_DATA, 0, 0), &gp_exec_host);
        assert_ptr_equal(aead_case(as[i], AAD_THEN_DATA, 0, 1), &gp_exec_host);
    }
}

/* A message of its own on the engine, with its reference. */
typedef struct {
    const alg_desc *a;
    uint8_t key[32], iv[16], aad[13], tag[16], ref_tag[16];
    uint8_t in[4000], out[4000], ref[4016];
    size_t done;
    gp_key *k;
    gp_msg *m;
} live_msg;

static void live_start(fixture *f, live_msg *l, const alg_desc *a)
{
    l->a = a;
    l->done = 0;
    gptest_rand_bytes(l->key, sizeof(l->key));
    gptest_rand_bytes(l->iv, sizeof(l->iv));
    gptest_rand_bytes(l->aad, sizeof(l->aad));
    gptest_rand_bytes(l->in, sizeof(l->in));
    reference(a, 1, l->key, l->iv, l->aad, is_aead(a) ? sizeof(l->aad) : 0, l->in, sizeof(l->in), l->ref, l->ref_tag);
    l->k = gp_key_new(f->e, a->alg, l->key, a->keylen);
    l->m = gp_msg_new(f->e);
    assert_true(gp_msg_start(l->m, l->k, l->iv, a->ivlen, 1));
    if (is_aead(a))
        assert_true(gp_msg_aad(l->m, l->aad, sizeof(l->aad)));
}

static void live_crypt(live_msg *l, size_t n)
{
    assert_true(gp_msg_crypt(l->m, l->in + l->done, l->out + l->done, n));
    l->done += n;
}

static void live_finish(live_msg *l)
{
    live_crypt(l, sizeof(l->in) - l->done);
    assert_memory_equal(l->out, l->ref, sizeof(l->in));
    if (is_aead(l->a)) {
        assert_true(gp_msg_tag(l->m, l->tag));
        assert_memory_equal(l->tag, l->ref_tag, 16);
    }
    gp_msg_free(l->m);
    gp_key_free(l->k);
}

/*
 * After the failure: new messages go to the cpu executor at once (the hybrid policy no longer
 * sends any to the failed GPU side, and the cpu lane takes new contexts); a stream that was on the
 * GPU side but not in the failed batch leaves it at its next update, at its counter; a begun AEAD
 * message not in the failed batch stays on the GPU side (with several GPUs a healthy one serves it;
 * here the stand-in runs again).
 */
static void test_after_failure(void **state)
{
    live_msg a, b, c, d;
    fixture f;
    gp_stats before, after;

    (void)state;
    setup(&f, 2);
    live_start(&f, &a, &ctr128);
    live_start(&f, &b, &gcm256);
    live_start(&f, &c, &chacha);
    live_crypt(&a, 1001);                      /* batch 1: the GPU side */
    live_crypt(&b, 1001);                      /* batch 2 */
    assert_ptr_equal(a.m->exec, &gp_exec_host);
    assert_ptr_equal(b.m->exec, &gp_exec_host);
    assert_null(gp_engine_cpu_lane(f.e, GP_ALG_AES_GCM, 32, UINT64_MAX));   /* new contexts: the engine */
    live_crypt(&c, 1001);                      /* batch 3 fails: c goes on on the cpu executor */
    assert_ptr_equal(c.m->exec, &gp_exec_cpu);
    assert_string_equal(gp_engine_backend_name(f.e), "cpu");
    assert_non_null(gp_engine_cpu_lane(f.e, GP_ALG_AES_GCM, 32, UINT64_MAX));
    assert_false(gp_engine_move_to_gpu(f.e, GP_ALG_AES_CTR, 1 << 20, 0));
    live_crypt(&a, 1001);                      /* left the failed executor before running */
    assert_ptr_equal(a.m->exec, &gp_exec_cpu);
    live_crypt(&b, 1001);
    assert_ptr_equal(b.m->exec, &gp_exec_host);
    before = stats_of(f.e);
    live_start(&f, &d, &gcm256);               /* a new message: routed to the cpu executor at its start */
    assert_int_equal(d.m->routed, 1);
    assert_ptr_equal(d.m->exec, &gp_exec_cpu);
    live_crypt(&d, 1001);
    live_finish(&d);
    after = stats_of(f.e);
    assert_int_equal(after.host_ops, before.host_ops);
    assert_true(after.cpu_ops > before.cpu_ops);
    live_finish(&a);
    live_finish(&b);
    live_finish(&c);
    after = stats_of(f.e);
    assert_int_equal(after.fallbacks, 1);
    assert_int_equal(after.errors, 0);
    teardown(&f);
}

/*
 * Many messages, several requests each, in two batches; the second fails on the GPU side. Every
 * request still completes exactly once, wherever its message went on: nothing lost, nothing wrong.
 */
static void test_batch_nothing_lost(void **state)
{
    enum { NMSG = 40 };
    static const alg_desc *const as[] = { &ctr128, &ctr256, &chacha, &gcm128, &gcm256, &chapoly };
    struct one {
        const alg_desc *a;
        uint8_t key[32], iv[16], aad[40], tag[16], ref_tag[16];
        size_t aadlen, len;
        uint8_t in[6000], out[6000], ref[6016];
        gp_key *k;
        gp_msg *m;
    } *c = calloc(NMSG, sizeof(*c));
    gp_request reqs[NMSG * 3];
    size_t nreq = 0, nfirst;
    fixture f;
    gp_stats st;

    (void)state;
    assert_non_null(c);
    setup(&f, 1);
    gptest_rand_seed();
    for (int i = 0; i < NMSG; i++) {
        c[i].a = as[i % 6];
        c[i].len = i % 5 == 0 ? gptest_rand_range(0, 40) : gptest_rand_range(100, sizeof(c[i].in));
        c[i].aadlen = is_aead(c[i].a) && i % 3 != 0 ? gptest_rand_range(1, sizeof(c[i].aad)) : 0;
        gptest_rand_bytes(c[i].key, sizeof(c[i].key));
        gptest_rand_bytes(c[i].iv, sizeof(c[i].iv));
        gptest_rand_bytes(c[i].aad, sizeof(c[i].aad));
        gptest_rand_bytes(c[i].in, c[i].len);
        reference(c[i].a, 1, c[i].key, c[i].iv, c[i].aad, c[i].aadlen, c[i].in, c[i].len, c[i].ref, c[i].ref_tag);
        c[i].k = gp_key_new(f.e, c[i].a->alg, c[i].key, c[i].a->keylen);
        c[i].m = gp_msg_new(f.e);
        assert_true(gp_msg_start(c[i].m, c[i].k, c[i].iv, c[i].a->ivlen, 1));
    }
    /* Batch 1: the AAD of every other message, and the first third of every third one's data. */
    for (int i = 0; i < NMSG; i++) {
        if (c[i].aadlen > 0 && i % 2 == 0)
            reqs[nreq++] = (gp_request){ .msg = c[i].m, .kind = GP_REQ_AAD, .in = c[i].aad, .len = c[i].aadlen };
        if (i % 3 == 1 && !(c[i].aadlen > 0 && i % 2 != 0))
            reqs[nreq++] = (gp_request){ .msg = c[i].m, .kind = GP_REQ_CRYPT, .in = c[i].in, .out = c[i].out,
                                         .len = c[i].len / 3 };
    }
    nfirst = nreq;
    assert_true(gp_engine_submit(f.e, reqs, nreq));
    /* Batch 2 (fails on the GPU side): the rest of each message, in up to three requests. */
    nreq = 0;
    for (int i = 0; i < NMSG; i++) {
        const int first_ran = i % 3 == 1 && !(c[i].aadlen > 0 && i % 2 != 0);
        const size_t from = first_ran ? c[i].len / 3 : 0, mid = from + (c[i].len - from) / 2;

        if (c[i].aadlen > 0 && i % 2 != 0)
            reqs[nreq++] = (gp_request){ .msg = c[i].m, .kind = GP_REQ_AAD, .in = c[i].aad, .len = c[i].aadlen };
        reqs[nreq++] = (gp_request){ .msg = c[i].m, .kind = GP_REQ_CRYPT, .in = c[i].in + from,
                                     .out = c[i].out + from, .len = mid - from };
        reqs[nreq++] = (gp_request){ .msg = c[i].m, .kind = GP_REQ_CRYPT, .in = c[i].in + mid,
                                     .out = c[i].out + mid, .len = c[i].len - mid };
        if (is_aead(c[i].a))
            reqs[nreq++] = (gp_request){ .msg = c[i].m, .kind = GP_REQ_TAG, .tag_out = c[i].tag };
        assert_true(nreq <= sizeof(reqs) / sizeof(reqs[0]));
    }
    assert_true(gp_engine_submit(f.e, reqs, nreq));
    for (size_t i = 0; i < nreq; i++)
        assert_int_equal(reqs[i].status, GP_REQ_OK);
    for (int i = 0; i < NMSG; i++) {
        const int begun = (c[i].aadlen > 0 && i % 2 == 0) || (i % 3 == 1 && !(c[i].aadlen > 0 && i % 2 != 0));

        assert_memory_equal(c[i].out, c[i].ref, c[i].len);
        if (is_aead(c[i].a)) {
            assert_memory_equal(c[i].tag, c[i].ref_tag, 16);
            assert_ptr_equal(c[i].m->exec, begun ? &gp_exec_host : &gp_exec_cpu);
        } else {
            assert_ptr_equal(c[i].m->exec, &gp_exec_cpu);
        }
        gp_msg_free(c[i].m);
        gp_key_free(c[i].k);
    }
    st = stats_of(f.e);
    assert_int_equal(st.fallbacks, nreq);
    assert_int_equal(st.ops, nfirst + nreq);
    assert_int_equal(st.errors, 0);
    teardown(&f);
    free(c);
}

/* Without a usable cpu executor (no default provider) everything goes on on the host executor,
 * streams included, and says so. */
static void test_no_cpu_executor(void **state)
{
    static const uint8_t key[16] = { 0 }, iv[16] = { 0 }, zero[100] = { 0 };
    /* AES-128(0^128) under the zero key, then the next counter block's: FIPS-197 C.1 style. */
    static const uint8_t block0[16] = { 0x66, 0xe9, 0x4b, 0xd4, 0xef, 0x8a, 0x2c, 0x3b,
                                        0x88, 0x4c, 0xfa, 0x59, 0xca, 0x34, 0x2b, 0x2e };
    uint8_t out[100], out2[100];
    fixture f;
    gp_key *k;
    gp_msg *m;

    (void)state;
    setup_with(&f, 1, "null", 0, 0);
    k = gp_key_new(f.e, GP_ALG_AES_CTR, key, 16);
    m = gp_msg_new(f.e);
    assert_true(gp_msg_start(m, k, iv, 16, 1));
    assert_true(gp_msg_crypt(m, zero, out, 5));
    assert_true(gp_msg_crypt(m, zero, out + 5, 95));    /* fails, re-run on the host executor */
    assert_ptr_equal(m->exec, &gp_exec_host);
    assert_memory_equal(out, block0, 16);
    /* The same stream in one piece, on a fresh message. */
    assert_true(gp_msg_start(m, k, iv, 16, 1));
    assert_true(gp_msg_crypt(m, zero, out2, 100));
    assert_memory_equal(out, out2, 100);
    gp_msg_free(m);
    gp_key_free(k);
    teardown(&f);
}

/* Device mode (here the host executor's stand-in with fake device memory): nothing can move, so
 * the request under the failure fails cleanly and its message stays where it is. */
void *gpuprov_test_devmem_alloc(size_t size, int gpu);
void gpuprov_test_devmem_free(void *p);

static void test_devmem_request_fails(void **state)
{
    uint8_t key[32] = { 1 }, iv[16] = { 2 };
    uint8_t *buf;
    fixture f;
    gp_key *k;
    gp_msg *m;
    gp_stats st;

    (void)state;
    setup_with(&f, 1, "default", 0, 1);
    assert_true(gp_engine_device_memory(f.e));
    buf = gpuprov_test_devmem_alloc(4096, 0);
    assert_non_null(buf);
    k = gp_key_new(f.e, GP_ALG_AES_CTR, key, 16);
    m = gp_msg_new(f.e);
    gp_msg_set_memory(m, 1);
    assert_true(gp_msg_start(m, k, iv, 16, 1));
    assert_int_equal(gp_msg_crypt_device(m, buf, buf, 1000), GP_MEM_OK);
    assert_int_equal(gp_msg_crypt_device(m, buf + 1000, buf + 1000, 1000), GP_MEM_FAILED);
    assert_ptr_equal(m->exec, &gp_exec_host);
    st = stats_of(f.e);
    assert_int_equal(st.fallbacks, 0);
    assert_int_equal(st.errors, 1);
    gp_msg_free(m);
    gp_key_free(k);
    gpuprov_test_devmem_free(buf);
    teardown(&f);
}

/* The failure's one log line: which executor, why, what became of its batch, where new messages
 * go (stderr captured in a file). */
static void test_log_line(void **state)
{
    char path[] = "/tmp/gpuprov-test-fault-XXXXXX", text[1024] = "";
    int fd = mkstemp(path), saved = dup(2);
    FILE *fp;
    live_msg a, b;
    fixture f;

    (void)state;
    assert_true(fd >= 0 && saved >= 0);
    setup(&f, 1);
    live_start(&f, &a, &gcm256);
    live_start(&f, &b, &ctr256);
    live_crypt(&a, 100);                       /* batch 1 */
    assert_int_equal(dup2(fd, 2), 2);
    {
        gp_request r[2] = {
            { .msg = a.m, .kind = GP_REQ_CRYPT, .in = a.in + 100, .out = a.out + 100, .len = 100 },
            { .msg = b.m, .kind = GP_REQ_CRYPT, .in = b.in, .out = b.out, .len = 100 },
        };

        assert_true(gp_engine_submit(f.e, r, 2));   /* batch 2 fails: a to the host, b to the cpu */
        a.done += 100;
        b.done += 100;
    }
    live_crypt(&a, 100);
    dup2(saved, 2);
    close(saved);
    fp = fdopen(fd, "r");
    rewind(fp);
    assert_true(fread(text, 1, sizeof(text) - 1, fp) > 0);
    fclose(fp);
    unlink(path);
    printf("log: %s", text);
    assert_string_equal(text, "gpuprov: the host executor failed (test hook host_fail_after): 1 message restarts on the "
                        "cpu executor, 1 begun AEAD message finishes on the host executor; new messages go to the "
                        "cpu executor\n");
    live_finish(&a);
    live_finish(&b);
    teardown(&f);
}

/* Threads streaming messages of every kind through one engine (the host executor running two batches
 * at once, as a GPU's slots do) while the GPU side fails under one of their batches: every byte and
 * tag still the default provider's. */
typedef struct {
    fixture *f;
    int seed;
} thread_arg;

static void *stream_thread(void *v)
{
    static const alg_desc *const as[] = { &ctr128, &chacha, &gcm256, &chapoly, &ctr256, &gcm128 };
    thread_arg *t = v;

    for (int i = 0; i < 8; i++) {
        live_msg *l = malloc(sizeof(*l));
        size_t step = 37 + (size_t)(t->seed * 131 + i * 17) % 900;

        assert_non_null(l);
        live_start(t->f, l, as[(size_t)(t->seed + i) % 6]);
        while (sizeof(l->in) - l->done > step)
            live_crypt(l, step);
        live_finish(l);
        free(l);
    }
    return NULL;
}

static void test_threads_under_failure(void **state)
{
    enum { NT = 8 };
    pthread_t th[NT];
    thread_arg args[NT];
    fixture f;
    gp_stats st;

    (void)state;
    setup_with(&f, 400, "default", 2, 0);
    /* The policy's numbers made first, so that no thread's message finds them being made (and goes
     * to the cpu executor for it): one message of each algorithm, one update each. */
    {
        static const alg_desc *const one_each[] = { &ctr128, &chacha, &gcm256, &chapoly };
        live_msg *l = malloc(sizeof(*l));

        assert_non_null(l);
        for (size_t i = 0; i < 4; i++) {
            live_start(&f, l, one_each[i]);
            live_finish(l);
        }
        free(l);
    }
    for (int i = 0; i < NT; i++) {
        args[i] = (thread_arg){ &f, i };
        assert_int_equal(pthread_create(&th[i], NULL, stream_thread, &args[i]), 0);
    }
    for (int i = 0; i < NT; i++)
        pthread_join(th[i], NULL);
    st = stats_of(f.e);
    assert_true(st.fallbacks >= 1);
    assert_true(st.host_ops >= 400);
    assert_int_equal(st.errors, 0);
    assert_string_equal(gp_engine_backend_name(f.e), "cpu");
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_moves_mid_block),
        cmocka_unit_test(test_aead_not_begun_restarts_on_cpu),
        cmocka_unit_test(test_aead_begun_finishes_on_host),
        cmocka_unit_test(test_after_failure),
        cmocka_unit_test(test_batch_nothing_lost),
        cmocka_unit_test(test_no_cpu_executor),
        cmocka_unit_test(test_devmem_request_fails),
        cmocka_unit_test(test_log_line),
        cmocka_unit_test(test_threads_under_failure),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
