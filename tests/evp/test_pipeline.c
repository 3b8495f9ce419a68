/* SPDX-License-Identifier: Apache-2.0 */
/* OpenSSL 3.5's cipher pipeline API through gpuprov: vectors, differential against the default provider, bad input, forged tags. */
#include <dlfcn.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <openssl/async.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/params.h>

#ifdef PIPE_TEST_CUDA
# include <cuda_runtime_api.h>
#endif

#include "evp_common.h"
#include "evp_devmem.h"
#include "pipe_api.h"
#include "wp_json.h"

/*
 * Every pipe of a pipeline call must be the same bytes as the same message through the default
 * provider one at a time (ciphertext, plaintext, AAD's effect and tag), whatever the executor
 * (host, cpu, hybrid, cuda: meson runs this binary once per executor), the number of pipes, the
 * lengths (0, 1, 15, 16, 17, large), in place or not. The binary is built against whichever
 * headers the build uses (3.0 on CI's main line) and finds the pipeline calls at run time
 * (pipe_api.h): under a 3.0 libcrypto it checks that gpuprov, whose tables carry the pipeline
 * ids, still loads and serves, and skips the rest.
 *
 * GPUPROV_TEST_HOST_DEVMEM set (test pipeline-devmem-host): the data buffers are the test
 * module's stand-in device allocations and the context's gpuprov-memory is "device". The CUDA
 * build (PIPE_TEST_CUDA, test pipeline-devmem-cuda, suite gpu) with GPTEST_PIPE_DEVMEM=1 takes
 * cudaMallocManaged memory instead: device memory to gpuprov, which the test reads and writes from
 * the host after synchronizing.
 *
 * GPTEST_PIPE_STREAM=1 as well (tests pipeline-stream-host, pipeline-stream-cuda): stream-ordered
 * device mode, the context's gpuprov-cuda-stream a stream of the test's (the test module's fake
 * stream, or a non-blocking CUDA stream): a pipeline call's data requests and tags are queued
 * there as one batch (batching/executor.h, ordered_batch), and the test reads the outputs after
 * the stream has run them.
 */

#define MEMORY_PARAM "gpuprov-memory"
#define STREAM_PARAM "gpuprov-cuda-stream"

static gptest_env *g_env;
static pipe_api api;
static int devmem;   /* device mode: through the host stand-in, or CUDA managed memory */
static void *stream;  /* stream-ordered device mode: the context's stream (NULL: synchronous) */
static int stream_wanted;
static size_t skew_pipe1;   /* pipe 1's buffers start this many bytes into their allocations */
static size_t fixed_len;    /* nonzero: pipe i's message is fixed_len + 17 i bytes, AAD at most 40, one AAD update */
static size_t fixed_first;  /* with fixed_len: nonzero, two data updates, the first this long; 0, one */

static int is_aead(int idx)
{
    return evp_ciphers[idx].kind == K_GCM || evp_ciphers[idx].kind == K_CCP;
}

/* ---- buffers: host memory, or the stand-in's device memory ---- */


/* A data buffer of n bytes (at least 1): device memory in device mode, else host memory. */
static unsigned char *buf_new(size_t n, int device)
{
    unsigned char *p = NULL;

#ifdef PIPE_TEST_CUDA
    if (device && cudaMallocManaged((void **)&p, n + 1, cudaMemAttachGlobal) != cudaSuccess)
        fail_msg("cudaMallocManaged failed");
#else
    if (device)
        p = evp_dm_alloc(n + 1, 0);
#endif
    if (!device)
        p = malloc(n + 1);
    assert_non_null(p);
    return p;
}

static void buf_free(void *p, int device)
{
#ifdef PIPE_TEST_CUDA
    if (device) {
        cudaFree(p);
        return;
    }
#else
    if (device) {
        evp_dm_free(p);
        return;
    }
#endif
    free(p);
}

/* Before the host reads what the GPU (or the stand-in's stream) wrote. */
static void gpu_sync(void)
{
#ifdef PIPE_TEST_CUDA
    if (devmem && cudaDeviceSynchronize() != cudaSuccess)
        fail_msg("cudaDeviceSynchronize failed");
#endif
    if (stream != NULL)
        evp_stream_sync(stream);
}

static int set_stream(EVP_CIPHER_CTX *ctx, void *s)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    uint64_t v = (uint64_t)(uintptr_t)s;

    p[0] = OSSL_PARAM_construct_uint64(STREAM_PARAM, &v);
    return EVP_CIPHER_CTX_set_params(ctx, p);
}

static int set_memory(EVP_CIPHER_CTX *ctx, const char *mode)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, (char *)mode, 0);
    return EVP_CIPHER_CTX_set_params(ctx, p);
}

/* The call just made failed with an error whose text holds `part` (and `part2`, if not NULL); the
 * queue is then emptied. */
static void expect_error(int rc, const char *what, const char *part, const char *part2)
{
    unsigned long e;
    const char *data;
    int flags, found = 0;
    char text[512] = "", line[768], last[768] = "";

    if (rc > 0)
        fail_msg("%s: accepted", what);
    while ((e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) != 0) {
        ERR_error_string_n(e, text, sizeof(text));
        snprintf(line, sizeof(line), "%s:%s", text, (flags & ERR_TXT_STRING) && data != NULL ? data : "");
        found |= strstr(line, part) != NULL && (part2 == NULL || strstr(line, part2) != NULL);
        memcpy(last, line, sizeof(last));
    }
    if (!found)
        fail_msg("%s: no error saying \"%s\"%s%s (last: %s)", what, part, part2 ? " and " : "", part2 ? part2 : "", last);
}

/* ---- the reference: one message through the default provider ---- */

typedef struct msg {
    unsigned char *iv;
    unsigned char *aad, *in;     /* host copies */
    size_t aadlen, len;
    unsigned char *ref;          /* the default provider's output */
    unsigned char tag[16];
} msg;

static void reference(int idx, int enc, const unsigned char *key, size_t ivlen, const msg *m, unsigned char *out,
                      unsigned char tag[16])
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    const EVP_CIPHER *ciph = evp_cipher(g_env, idx, 0);
    int outl = 0;

    assert_non_null(c);
    assert_int_equal(EVP_CipherInit_ex2(c, ciph, NULL, NULL, enc, NULL), 1);
    if (is_aead(idx) && ivlen != evp_ciphers[idx].ivlen)
        assert_int_equal(evp_set_ivlen(c, ivlen), 1);
    assert_int_equal(EVP_CipherInit_ex2(c, NULL, key, m->iv, enc, NULL), 1);
    if (is_aead(idx) && !enc)
        assert_int_equal(evp_set_tag(c, tag, 16), 1);
    if (m->aadlen > 0)
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, m->aad, (int)m->aadlen), 1);
    if (m->len > 0) {
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, m->in, (int)m->len), 1);
        assert_int_equal((size_t)outl, m->len);
    }
    assert_int_equal(EVP_CipherFinal_ex(c, out + m->len, &outl), 1);
    if (is_aead(idx) && enc)
        assert_int_equal(evp_get_tag(c, tag, 16), 1);
    EVP_CIPHER_CTX_free(c);
}

/* ---- one pipeline run of n messages, in up to `cuts` updates ---- */

typedef struct run_opts {
    int in_place;
    int cuts;           /* data updates (each pipe's message cut at random) */
    int aad_cuts;       /* AAD updates */
    size_t first;       /* nonzero: the first data update is this many bytes a pipe (at most its message) */
} run_opts;

/*
 * Encrypt or decrypt the n messages through gpuprov's pipeline: outputs into out[i] (host copies).
 * tags: encrypt, filled from "pipeline-tag"; decrypt, the expected tags. Returns the Final's result.
 */
static int pipe_run(int idx, int enc, const unsigned char *key, size_t ivlen, msg *m, size_t n, const run_opts *o,
                    unsigned char **out_host, unsigned char tags[][16])
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    const EVP_CIPHER *ciph = evp_cipher(g_env, idx, 1);
    const unsigned char *ivs[PIPE_MAX], *inp[PIPE_MAX];
    unsigned char *outp[PIPE_MAX], *inbuf[PIPE_MAX], *outbuf[PIPE_MAX], *tagp[PIPE_MAX];
    unsigned char *inalloc[PIPE_MAX], *outalloc[PIPE_MAX];
    size_t outl[PIPE_MAX], outsize[PIPE_MAX], inl[PIPE_MAX], done[PIPE_MAX], adone[PIPE_MAX];
    OSSL_PARAM prm[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    int fin;

    assert_non_null(c);
    for (size_t i = 0; i < n; i++) {
        ivs[i] = m[i].iv;
        const size_t sk = i == 1 ? skew_pipe1 : 0;

        inalloc[i] = buf_new(m[i].len + sk, devmem);
        inbuf[i] = inalloc[i] + sk;
        memcpy(inbuf[i], m[i].in, m[i].len);   /* the stand-in's memory is host memory underneath */
        outalloc[i] = o->in_place ? inalloc[i] : buf_new(m[i].len + sk, devmem);
        outbuf[i] = outalloc[i] + sk;
        tagp[i] = tags[i];
        done[i] = adone[i] = 0;
    }
    assert_int_equal((enc ? api.encrypt_init : api.decrypt_init)(c, ciph, key, evp_ciphers[idx].keylen, n, ivs, ivlen), 1);
    if (devmem)
        assert_int_equal(set_memory(c, "device"), 1);
    if (stream != NULL)
        assert_int_equal(set_stream(c, stream), 1);
    if (is_aead(idx) && !enc) {
        unsigned char **tp = tagp;

        prm[0] = pipe_tag_param(&tp, 16);
        assert_int_equal(EVP_CIPHER_CTX_set_params(c, prm), 1);
    }
    /* AAD in aad_cuts updates (the last takes what is left). */
    for (int k = 0; is_aead(idx) && k < o->aad_cuts; k++) {
        for (size_t i = 0; i < n; i++) {
            size_t left = m[i].aadlen - adone[i];

            inl[i] = k == o->aad_cuts - 1 ? left : gptest_rand_range(0, left);
            inp[i] = m[i].aad + adone[i];
            adone[i] += inl[i];
        }
        assert_int_equal(api.update(c, NULL, outl, NULL, inp, inl), 1);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(outl[i], inl[i]);
    }
    for (int k = 0; k < o->cuts; k++) {
        for (size_t i = 0; i < n; i++) {
            size_t left = m[i].len - done[i];

            inl[i] = k == o->cuts - 1 ? left : k == 0 && o->first != 0 ? (o->first < left ? o->first : left)
                                                                      : gptest_rand_range(0, left);
            inp[i] = inbuf[i] + done[i];
            outp[i] = outbuf[i] + done[i];
            outsize[i] = left;
        }
        assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(outl[i], inl[i]);
            done[i] += inl[i];
        }
    }
    for (size_t i = 0; i < n; i++) {
        outp[i] = outbuf[i] + done[i];
        outsize[i] = 0;
    }
    fin = api.final(c, outp, outl, outsize);
    for (size_t i = 0; fin && i < n; i++)
        assert_int_equal(outl[i], 0);
    if (fin && is_aead(idx) && enc) {
        unsigned char **tp = tagp;

        prm[0] = pipe_tag_param(&tp, 16);
        assert_int_equal(EVP_CIPHER_CTX_get_params(c, prm), 1);
    }
    gpu_sync();
    for (size_t i = 0; i < n; i++) {
        memcpy(out_host[i], outbuf[i], m[i].len);
        if (!o->in_place)
            buf_free(outalloc[i], devmem);
        buf_free(inalloc[i], devmem);
    }
    EVP_CIPHER_CTX_free(c);
    return fin;
}

/* n random messages for cipher idx: IVs of ivlen, AAD and lengths as `size` picks them. */
static void msgs_new(int idx, msg *m, size_t n, size_t ivlen, size_t max_len)
{
    static const size_t edges[] = { 0, 1, 15, 16, 17, 63, 64, 65, 4095, 16384 };

    for (size_t i = 0; i < n; i++) {
        size_t r = gptest_rand_range(0, 9);

        m[i].len = r < 6 ? edges[gptest_rand_range(0, 9)] : r < 9 ? gptest_rand_range(0, 4096)
                                                                   : gptest_rand_range(0, max_len);
        m[i].aadlen = !is_aead(idx) ? 0 : gptest_rand_range(0, 3) == 0 ? 0 : gptest_rand_range(0, 3) == 0
                                                                           ? gptest_rand_range(65, 600)
                                                                           : gptest_rand_range(1, 40);
        if (fixed_len != 0) {
            m[i].len = fixed_len + 17 * i;
            m[i].aadlen = m[i].aadlen > 40 ? 40 : m[i].aadlen;
        }
        m[i].iv = malloc(ivlen);
        m[i].aad = malloc(m[i].aadlen + 1);
        m[i].in = malloc(m[i].len + 1);
        m[i].ref = malloc(m[i].len + 1);
        assert_true(m[i].iv && m[i].aad && m[i].in && m[i].ref);
        gptest_rand_bytes(m[i].iv, ivlen);
        if (evp_ciphers[idx].kind == K_CHACHA)
            memset(m[i].iv, 0, 4);   /* a block counter far from its wrap (OpenSSL's counters differ there) */
        gptest_rand_bytes(m[i].aad, m[i].aadlen);
        gptest_rand_bytes(m[i].in, m[i].len);
    }
}

static void msgs_free(msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].iv);
        free(m[i].aad);
        free(m[i].in);
        free(m[i].ref);
    }
}

static size_t random_ivlen(int idx)
{
    static const size_t gcm[] = { 12, 12, 12, 1, 8, 16, 60 };

    return evp_ciphers[idx].kind == K_GCM ? gcm[gptest_rand_range(0, 6)] : evp_ciphers[idx].ivlen;
}

/* One round trip: encrypt through the pipeline and the default provider alike, then decrypt the
 * default's ciphertext through the pipeline; every pipe byte for byte. */
static void round_trip(int idx, size_t n, size_t max_len)
{
    unsigned char key[32], (*tags)[16] = calloc(n, 16), *outs[PIPE_MAX];
    const size_t ivlen = random_ivlen(idx);
    run_opts o = { .in_place = (int)gptest_rand_range(0, 1), .cuts = (int)gptest_rand_range(1, 3),
                   .aad_cuts = (int)gptest_rand_range(1, 2) };
    msg m[PIPE_MAX];

    assert_non_null(tags);
    gptest_rand_bytes(key, sizeof(key));
    msgs_new(idx, m, n, ivlen, max_len);
    if (fixed_len != 0) {
        o.cuts = fixed_first != 0 ? 2 : 1;
        o.aad_cuts = 1;
        o.first = fixed_first;
    }
    for (size_t i = 0; i < n; i++) {
        outs[i] = malloc(m[i].len + 1);
        assert_non_null(outs[i]);
        reference(idx, 1, key, ivlen, &m[i], m[i].ref, m[i].tag);
    }
    assert_int_equal(pipe_run(idx, 1, key, ivlen, m, n, &o, outs, tags), 1);
    for (size_t i = 0; i < n; i++) {
        if (memcmp(outs[i], m[i].ref, m[i].len) != 0)
            fail_msg("%s encrypt: pipe %zu of %zu (%zu bytes, aad %zu, iv %zu, %s) differs from the default provider",
                     evp_ciphers[idx].name, i, n, m[i].len, m[i].aadlen, ivlen, o.in_place ? "in place" : "apart");
        if (is_aead(idx) && memcmp(tags[i], m[i].tag, 16) != 0)
            fail_msg("%s encrypt: pipe %zu of %zu: tag differs from the default provider's", evp_ciphers[idx].name, i, n);
    }
    /* Decrypt the ciphertext (in the message's place) with its tags. */
    for (size_t i = 0; i < n; i++) {
        unsigned char *t = m[i].in;

        m[i].in = m[i].ref;
        m[i].ref = t;
        memcpy(tags[i], m[i].tag, 16);
    }
    o.in_place = (int)gptest_rand_range(0, 1);
    if (fixed_len == 0)
        o.cuts = (int)gptest_rand_range(1, 3);
    assert_int_equal(pipe_run(idx, 0, key, ivlen, m, n, &o, outs, tags), 1);
    for (size_t i = 0; i < n; i++)
        if (memcmp(outs[i], m[i].ref, m[i].len) != 0)
            fail_msg("%s decrypt: pipe %zu of %zu (%zu bytes) differs from the plaintext", evp_ciphers[idx].name, i, n,
                     m[i].len);
    for (size_t i = 0; i < n; i++)
        free(outs[i]);
    msgs_free(m, n);
    free(tags);
}

/* ---- the tests ---- */

/* Every gpuprov cipher, explicitly fetched, pipelines both ways; the default provider's do not. */
static void test_can_pipeline(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        assert_int_equal(api.can_pipeline(evp_cipher(g_env, idx, 1), 1), 1);
        assert_int_equal(api.can_pipeline(evp_cipher(g_env, idx, 1), 0), 1);
        assert_int_equal(api.can_pipeline(evp_cipher(g_env, idx, 0), 1), 0);
    }
}

/* Random numpipes (1..32), lengths, AAD, IV lengths, cuts, in place or not, every cipher. */
static void test_diff(void **state)
{
    const char *it = getenv("GPTEST_PIPE_ITERS");
    int iters = it != NULL ? atoi(it) : getenv("GPTEST_PIPE_QUICK") != NULL ? 2 : 24;

    (void)state;
    for (int k = 0; k < iters; k++)
        for (int idx = 0; idx < EVP_NCIPHERS; idx++)
            round_trip(idx, gptest_rand_range(1, PIPE_MAX), k % 8 == 7 ? 300 * 1024 : 20000);
    /* The edges: one pipe, and every pipe. */
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        round_trip(idx, 1, 70000);
        round_trip(idx, PIPE_MAX, 2000);
    }
}

/* Pipe 1's buffers one byte into their allocations, so that its body is off the 16-byte boundary
 * the GPU's units need in place: stream-ordered, the executor declines the call's batch
 * (batching/executor.h, ordered_batch), every pipe is queued alone and pipe 1 runs synchronously;
 * every pipe still the default provider's bytes. */
static void test_skewed_pipe(void **state)
{
    (void)state;
    skew_pipe1 = 1;
    for (int k = 0; k < 3; k++)
        for (int idx = 0; idx < EVP_NCIPHERS; idx++)
            round_trip(idx, gptest_rand_range(2, 6), 20000);
    skew_pipe1 = 0;
}

/* AES-256-GCM, every pipe 2 MiB and more, with AAD the message holds: stream-ordered, a call's pass of
 * 32 such pipes needs more than the 1 MiB a block starts at (their partial MACs and refs). In one
 * update the group is made at its passes' size; after a first update of 4 KiB a pipe it is grown
 * at the second (the cuda executor; with that growth's cudaMallocFromPoolAsync refused, the batch
 * is declined and each pipe runs alone: .device-ordpipe-review.sh). */
static void test_large_pipes(void **state)
{
    static const size_t firsts[] = { 0, 4096 };
    const int idx = evp_cipher_index("AES-256-GCM");

    (void)state;
    if (getenv("GPTEST_PIPE_QUICK") != NULL)
        skip();   /* 128 MiB a run: not under a sanitizer's quick run */
    fixed_len = (size_t)2 << 20;
    for (size_t a = 0; a < sizeof(firsts) / sizeof(firsts[0]); a++) {
        fixed_first = firsts[a];
        round_trip(idx, PIPE_MAX, 0);
    }
    fixed_len = fixed_first = 0;
}

/*
 * One context re-initialised call after call (new IVs, the key given again), as a program that
 * encrypts batch after batch does: each re-init ends every pipe's message at once
 * (gp_msgs_end_ordered: the cuda executor clears and frees a group's block once), with the calls
 * before still queued where stream-ordered (every other call's tags not read before the next
 * init; the host stand-in's queued batch once read the freed message there); the last call
 * changes numpipes (a new pipeline: the old one's messages freed with their work queued). Every
 * pipe of every call is the default provider's message, tags included where read.
 */
#define REINIT_CALLS 5

static void reinit_call(EVP_CIPHER_CTX *c, int idx, int k, const unsigned char *key, msg *m, size_t n,
                        unsigned char **in, unsigned char **out)
{
    const EVP_CIPHER *ciph = evp_cipher(g_env, idx, 1);
    const size_t ivlen = evp_ciphers[idx].ivlen;
    const unsigned char *ivs[PIPE_MAX], *inp[PIPE_MAX];
    unsigned char *outp[PIPE_MAX], tags[PIPE_MAX][16], *tagp[PIPE_MAX], **tp = tagp;
    size_t outl[PIPE_MAX], outsize[PIPE_MAX], inl[PIPE_MAX];
    OSSL_PARAM prm[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    msgs_new(idx, m, n, ivlen, 20000);
    for (size_t i = 0; i < n; i++) {
        reference(idx, 1, key, ivlen, &m[i], m[i].ref, m[i].tag);
        in[i] = buf_new(m[i].len, devmem);
        out[i] = buf_new(m[i].len, devmem);
        memcpy(in[i], m[i].in, m[i].len);   /* the stand-in's memory is host memory underneath */
        ivs[i] = m[i].iv;
        tagp[i] = tags[i];
    }
    /* The cipher at the first init only: given again, 3.5's EVP resets the context (and with it
     * device mode and the stream, which the context otherwise keeps over re-inits). */
    assert_int_equal(api.encrypt_init(c, k == 0 ? ciph : NULL, key, evp_ciphers[idx].keylen, n, ivs, ivlen), 1);
    if (k == 0 && devmem)
        assert_int_equal(set_memory(c, "device"), 1);
    if (k == 0 && stream != NULL)
        assert_int_equal(set_stream(c, stream), 1);
    if (is_aead(idx)) {
        for (size_t i = 0; i < n; i++) {
            inp[i] = m[i].aad;
            inl[i] = m[i].aadlen;
        }
        assert_int_equal(api.update(c, NULL, outl, NULL, inp, inl), 1);
    }
    for (size_t i = 0; i < n; i++) {
        inp[i] = in[i];
        inl[i] = outsize[i] = m[i].len;
        outp[i] = out[i];
    }
    assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);
    for (size_t i = 0; i < n; i++) {
        outp[i] = out[i] + m[i].len;
        outsize[i] = 0;
    }
    assert_int_equal(api.final(c, outp, outl, outsize), 1);
    if (!is_aead(idx) || k % 2 == 1)
        return;   /* its tags not read: the next init ends its messages with their work queued */
    prm[0] = pipe_tag_param(&tp, 16);
    assert_int_equal(EVP_CIPHER_CTX_get_params(c, prm), 1);
    for (size_t i = 0; i < n; i++)
        if (memcmp(tags[i], m[i].tag, 16) != 0)
            fail_msg("%s re-init call %d: pipe %zu of %zu: tag differs from the default provider's",
                     evp_ciphers[idx].name, k, i, n);
}

static void test_reinit(void **state)
{
    static const char *const names[] = { "AES-256-GCM", "ChaCha20-Poly1305", "AES-128-CTR" };

    (void)state;
    for (size_t a = 0; a < sizeof(names) / sizeof(names[0]); a++) {
        const int idx = evp_cipher_index(names[a]);
        EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
        unsigned char key[32], *in[REINIT_CALLS][PIPE_MAX], *out[REINIT_CALLS][PIPE_MAX];
        msg m[REINIT_CALLS][PIPE_MAX];
        size_t np[REINIT_CALLS];

        assert_non_null(c);
        gptest_rand_bytes(key, sizeof(key));
        for (int k = 0; k < REINIT_CALLS; k++) {
            np[k] = k < REINIT_CALLS - 1 ? 8 : 5;
            reinit_call(c, idx, k, key, m[k], np[k], in[k], out[k]);
        }
        gpu_sync();
        for (int k = 0; k < REINIT_CALLS; k++) {
            for (size_t i = 0; i < np[k]; i++) {
                if (memcmp(out[k][i], m[k][i].ref, m[k][i].len) != 0)
                    fail_msg("%s re-init call %d: pipe %zu of %zu (%zu bytes) differs from the default provider",
                             names[a], k, i, np[k], m[k][i].len);
                buf_free(in[k][i], devmem);
                buf_free(out[k][i], devmem);
            }
            msgs_free(m[k], np[k]);
        }
        EVP_CIPHER_CTX_free(c);
    }
}

/* A forged tag in one pipe fails the Final, names the pipe, clears that pipe's output (host
 * memory); every other pipe's plaintext stands. */
static void test_forged_tag(void **state)
{
    static const int algs[] = { 5, 6, 3 };   /* AES-256-GCM, ChaCha20-Poly1305, AES-128-GCM */

    (void)state;
    for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++) {
        const int idx = algs[a];
        const size_t n = 8, bad = 3;
        unsigned char key[32], tags[8][16], *outs[8], zero[4096] = { 0 };
        run_opts o = { .in_place = (int)a % 2, .cuts = 2, .aad_cuts = 1 };
        msg m[8];

        gptest_rand_bytes(key, sizeof(key));
        msgs_new(idx, m, n, 12, 4000);
        for (size_t i = 0; i < n; i++) {
            m[i].len = 1000 + i;
            m[i].in = realloc(m[i].in, m[i].len);
            m[i].ref = realloc(m[i].ref, m[i].len);
            gptest_rand_bytes(m[i].in, m[i].len);
            outs[i] = malloc(m[i].len);
            reference(idx, 1, key, 12, &m[i], m[i].ref, m[i].tag);
            memcpy(tags[i], m[i].tag, 16);
            /* decrypt the ciphertext */
            unsigned char *t = m[i].in;
            m[i].in = m[i].ref;
            m[i].ref = t;
        }
        tags[bad][5] ^= 0x40;
        expect_error(pipe_run(idx, 0, key, 12, m, n, &o, outs, tags), "forged tag", "pipe 3", "tag verification failed");
        for (size_t i = 0; i < n; i++) {
            if (i == bad && !devmem)
                assert_memory_equal(outs[i], zero, m[i].len);
            else if (i != bad)
                assert_memory_equal(outs[i], m[i].ref, m[i].len);
            free(outs[i]);
        }
        msgs_free(m, n);
    }
}

/* A pipeline context for bad-input cases: cipher idx, n pipes, initialised (enc). */
static EVP_CIPHER_CTX *bad_ctx(int idx, size_t n, int enc, unsigned char ivs[][16], const unsigned char **ivp)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    unsigned char key[32] = { 7 };

    for (size_t i = 0; i < n; i++)
        ivp[i] = ivs[i];
    assert_int_equal((enc ? api.encrypt_init : api.decrypt_init)(c, evp_cipher(g_env, idx, 1), key,
                                                                 evp_ciphers[idx].keylen, n, ivp,
                                                                 evp_ciphers[idx].ivlen), 1);
    if (devmem)
        assert_int_equal(set_memory(c, "device"), 1);
    return c;
}

/* Pipe i of n holds, in got[i], the default provider's encryption under cipher idx, `key` and the
 * 12-byte IV ivs[i] of 64 bytes of value i (the bad-input tests' plaintext); device memory synced. */
static void assert_pipes_default(int idx, const unsigned char *key, unsigned char ivs[][16],
                                 unsigned char *const *got, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned char want[64], plain[64], tag[16];
        msg m = { .iv = ivs[i], .in = plain, .len = 64 };

        memset(plain, i, 64);
        reference(idx, 1, key, 12, &m, want, tag);
        assert_memory_equal(got[i], want, 64);
    }
}

static void test_bad_input(void **state)
{
    unsigned char ivs[PIPE_MAX][16] = { { 0 } }, key[32] = { 7 }, *outp[4], *buf[4], *tagp[4], tags[4][16];
    const unsigned char *ivp[PIPE_MAX], *inp[4];
    size_t outl[4], outsize[4], inl[4];
    OSSL_PARAM prm[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    unsigned char **tp = tagp;
    EVP_CIPHER_CTX *c;
    int outi;

    (void)state;
    for (int i = 0; i < PIPE_MAX; i++)
        ivp[i] = ivs[i];
    for (int i = 0; i < 4; i++) {
        buf[i] = buf_new(64, devmem);
        memset(buf[i], i, 64);
        outp[i] = buf[i];
        inp[i] = buf[i];
        outsize[i] = inl[i] = 64;
        tagp[i] = tags[i];
    }
    c = EVP_CIPHER_CTX_new();
    /* numpipes 0 and above EVP_MAX_PIPES */
    expect_error(api.encrypt_init(c, evp_cipher(g_env, 5, 1), key, 32, 0, ivp, 12), "numpipes 0", "numpipes must be", NULL);
    EVP_CIPHER_CTX_reset(c);
    assert_int_equal(api.encrypt_init(c, evp_cipher(g_env, 5, 1), key, 32, PIPE_MAX + 1, ivp, 12), 0);
    ERR_clear_error();
    /* NULL IV array and entries; IV lengths */
    EVP_CIPHER_CTX_reset(c);
    expect_error(api.encrypt_init(c, evp_cipher(g_env, 5, 1), key, 32, 4, NULL, 12), "NULL iv array", "is NULL", NULL);
    ivp[2] = NULL;
    EVP_CIPHER_CTX_reset(c);
    expect_error(api.encrypt_init(c, evp_cipher(g_env, 5, 1), key, 32, 4, ivp, 12), "NULL iv", "pipe 2", "NULL");
    ivp[2] = ivs[2];
    EVP_CIPHER_CTX_reset(c);
    expect_error(api.encrypt_init(c, evp_cipher(g_env, 6, 1), key, 32, 4, ivp, 16), "ccp iv 16", "invalid iv length", NULL);
    EVP_CIPHER_CTX_reset(c);
    expect_error(api.encrypt_init(c, evp_cipher(g_env, 0, 1), key, 16, 4, ivp, 12), "ctr iv 12", "invalid iv length", NULL);
    EVP_CIPHER_CTX_reset(c);
    expect_error(api.encrypt_init(c, evp_cipher(g_env, 5, 1), key, 32, 4, ivp, 0), "gcm iv 0", "invalid iv length", NULL);
    /* a pipeline call on a context initialised for single messages */
    EVP_CIPHER_CTX_reset(c);
    assert_int_equal(EVP_EncryptInit_ex2(c, evp_cipher(g_env, 5, 1), key, ivs[0], NULL), 1);
    expect_error(api.update(c, outp, outl, outsize, inp, inl), "pipeline update on a plain context",
                 "not initialised for one", NULL);
    EVP_CIPHER_CTX_free(c);

    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        /* a single-message call on a pipeline context */
        c = bad_ctx(idx, 4, 1, ivs, ivp);
        expect_error(EVP_EncryptUpdate(c, buf[0], &outi, buf[0], 16), "plain update on a pipeline", "initialised for a pipeline", NULL);
        expect_error(EVP_EncryptFinal_ex(c, buf[0], &outi), "plain final on a pipeline", "initialised for a pipeline", NULL);
        /* NULL arrays and entries, short outputs: refused, and nothing changed */
        expect_error(api.update(c, outp, outl, outsize, NULL, inl), "NULL in array", "array argument is NULL", NULL);
        expect_error(api.update(c, outp, outl, NULL, inp, inl), "NULL outsize array", "array argument is NULL", NULL);
        inp[1] = NULL;
        expect_error(api.update(c, outp, outl, outsize, inp, inl), "NULL in[1]", "pipe 1", "buffer is NULL");
        inp[1] = buf[1];
        outp[3] = NULL;
        expect_error(api.update(c, outp, outl, outsize, inp, inl), "NULL out[3]", "pipe 3", "buffer is NULL");
        outp[3] = buf[3];
        outsize[2] = 63;
        expect_error(api.update(c, outp, outl, outsize, inp, inl), "outsize[2] short", "pipe 2", "output buffer too small");
        outsize[2] = 64;
        if (!is_aead(idx))
            expect_error(api.update(c, NULL, outl, NULL, inp, inl), "AAD on a stream cipher", "only AEAD ciphers", NULL);
        EVP_CIPHER_CTX_free(c);
        if (!is_aead(idx))
            continue;
        /* AAD after data; tags' states */
        c = bad_ctx(idx, 4, 1, ivs, ivp);
        prm[0] = pipe_tag_param(&tp, 16);
        expect_error(EVP_CIPHER_CTX_get_params(c, prm), "tags before Final", "tag not available", NULL);
        expect_error(EVP_CIPHER_CTX_set_params(c, prm), "tags set encrypting", "tag cannot be set", NULL);
        inl[0] = 0;
        assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);   /* pipes 1..3 begin their data */
        inl[0] = 64;
        expect_error(api.update(c, NULL, outl, NULL, inp, inl), "AAD after data", "pipe 1", "aad after data");
        for (int i = 0; i < 4; i++)
            outsize[i] = 0;
        assert_int_equal(api.final(c, outp, outl, outsize), 1);
        expect_error(api.final(c, outp, outl, outsize), "Final twice", "already finished", NULL);
        prm[0] = pipe_tag_param(&tp, 0);
        expect_error(EVP_CIPHER_CTX_get_params(c, prm), "tag length 0", "invalid tag length", NULL);
        prm[0] = pipe_tag_param(&tp, 16);
        assert_int_equal(EVP_CIPHER_CTX_get_params(c, prm), 1);
        for (int i = 0; i < 4; i++)
            outsize[i] = 64;
        EVP_CIPHER_CTX_free(c);
        /* a decryption's Final without its tags */
        c = bad_ctx(idx, 4, 0, ivs, ivp);
        expect_error(api.final(c, outp, outl, outsize), "decrypt Final without tags", "pipe 0", "without an expected tag");
        EVP_CIPHER_CTX_free(c);
    }
    /* After refused calls, the same pipeline's good call gives the default provider's bytes. */
    for (int i = 0; i < 4; i++)
        memset(buf[i], i, 64);
    c = bad_ctx(6, 4, 1, ivs, ivp);
    outsize[1] = 1;
    expect_error(api.update(c, outp, outl, outsize, inp, inl), "outsize[1] short", "pipe 1", "output buffer too small");
    outsize[1] = 64;
    assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);
    gpu_sync();
    assert_pipes_default(6, key, ivs, buf, 4);
    EVP_CIPHER_CTX_free(c);
    for (int i = 0; i < 4; i++)
        buf_free(buf[i], devmem);
}

/* Device mode: host and device buffers in one call are refused, naming the pipe of the other kind;
 * AAD must be host memory. */
static void test_mixed_memory(void **state)
{
    unsigned char ivs[PIPE_MAX][16] = { { 0 } }, *outp[4], *dev[4], host[64];
    const unsigned char *ivp[PIPE_MAX], *inp[4];
    size_t outl[4], outsize[4], inl[4];
    EVP_CIPHER_CTX *c;

    (void)state;
    if (!devmem)
        skip();
    for (int i = 0; i < 4; i++) {
        dev[i] = buf_new(64, 1);
        outp[i] = dev[i];
        inp[i] = dev[i];
        outsize[i] = inl[i] = 64;
    }
    c = bad_ctx(5, 4, 1, ivs, ivp);
    outp[2] = host;
    inp[2] = host;
    expect_error(api.update(c, outp, outl, outsize, inp, inl), "host buffer in pipe 2", "pipe 2", "mixed");
    for (int i = 0; i < 4; i++) {
        outp[i] = host;
        inp[i] = host;
    }
    expect_error(api.update(c, outp, outl, outsize, inp, inl), "host buffers in device mode", "pipe 0",
                 "not CUDA device");
    inp[1] = dev[1];
    expect_error(api.update(c, NULL, outl, NULL, inp, inl), "device AAD", "pipe 1", "AAD must be host");
    EVP_CIPHER_CTX_free(c);
    for (int i = 0; i < 4; i++)
        buf_free(dev[i], 1);
}

/* Stream-ordered: a stream the buffers' GPU does not own (the stand-in: a handle no fake stream
 * has) is refused at the update with the single-message path's reason, naming the pipe; nothing is
 * queued, and the same context on the right stream then gives the default provider's bytes. */
static void test_bad_stream(void **state)
{
    unsigned char key[32] = { 7 }, ivs[PIPE_MAX][16] = { { 0 } }, *outp[4], *dev[4];   /* bad_ctx's key */
    const unsigned char *ivp[PIPE_MAX], *inp[4];
    size_t outl[4], outsize[4], inl[4];
    const int idx = 5;
    EVP_CIPHER_CTX *c;

    (void)state;
#ifdef PIPE_TEST_CUDA
    skip();   /* a stream of another GPU: tests/evp/test_stream.c covers it on two GPUs */
#endif
    if (stream == NULL)
        skip();
    for (int i = 0; i < 4; i++) {
        dev[i] = buf_new(64, 1);
        memset(dev[i], i, 64);
        outp[i] = dev[i];
        inp[i] = dev[i];
        outsize[i] = inl[i] = 64;
    }
    c = bad_ctx(idx, 4, 1, ivs, ivp);
    assert_int_equal(set_stream(c, (void *)(uintptr_t)0x5151), 1);
    expect_error(api.update(c, outp, outl, outsize, inp, inl), "a stream of no GPU of the buffers", "pipe 0",
                 "not a CUDA stream");
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 64; b++)
            assert_int_equal(dev[i][b], i);   /* nothing written */
    assert_int_equal(api.encrypt_init(c, NULL, NULL, 0, 4, ivp, 12), 1);
    assert_int_equal(set_stream(c, stream), 1);
    assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);
    evp_stream_sync(stream);
    assert_pipes_default(idx, key, ivs, dev, 4);
    EVP_CIPHER_CTX_free(c);
    for (int i = 0; i < 4; i++)
        buf_free(dev[i], 1);
}

/* Device mode with every pipe's buffers carved from one allocation each way, as a caching
 * allocator lays tensors out (checked once for the call: provider/pipeline.c device_hulls_ok), then
 * with one pipe's output in an allocation of its own (each pipe checked), byte for byte the
 * default provider's. */
static void test_device_shared_allocation(void **state)
{
    const int idx = 5;
    const size_t n = 12, len = 3000, stride = 3072;
    unsigned char key[32], ivs[12][12], tags[12][16], *tagp[12], **tp = tagp, *in_all, *out_all, *lone;
    unsigned char *outp[12], want[3000], wtag[16];
    const unsigned char *ivp[12], *inp[12];
    size_t outl[12], outsize[12], inl[12];
    OSSL_PARAM prm[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    (void)state;
    if (!devmem)
        skip();
    in_all = buf_new(n * stride, 1);
    out_all = buf_new(n * stride, 1);
    lone = buf_new(len, 1);
    gptest_rand_bytes(key, sizeof(key));
    for (int round = 0; round < 2; round++) {
        EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

        for (size_t i = 0; i < n; i++) {
            gptest_rand_bytes(ivs[i], 12);
            ivp[i] = ivs[i];
            gptest_rand_bytes(in_all + i * stride, len);
            inp[i] = in_all + i * stride;
            outp[i] = round == 1 && i == 7 ? lone : out_all + i * stride;
            inl[i] = outsize[i] = len;
            tagp[i] = tags[i];
        }
        assert_int_equal(api.encrypt_init(c, evp_cipher(g_env, idx, 1), key, 32, n, ivp, 12), 1);
        assert_int_equal(set_memory(c, "device"), 1);
        assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);
        assert_int_equal(api.final(c, outp, outl, outsize), 1);
        prm[0] = pipe_tag_param(&tp, 16);
        assert_int_equal(EVP_CIPHER_CTX_get_params(c, prm), 1);
        gpu_sync();
        for (size_t i = 0; i < n; i++) {
            msg m = { .iv = ivs[i], .in = (unsigned char *)inp[i], .len = len };

            reference(idx, 1, key, 12, &m, want, wtag);
            assert_memory_equal(outp[i], want, len);
            assert_memory_equal(tags[i], wtag, 16);
        }
        EVP_CIPHER_CTX_free(c);
    }
    buf_free(in_all, 1);
    buf_free(out_all, 1);
    buf_free(lone, 1);
}

/* Inside an ASYNC_JOB each request queues as a single call's does (batching/engine.h,
 * gp_msgs_submit) and the job pauses for it: the bytes are still every pipe's own. */
typedef struct job_arg {
    int idx;
    size_t n;
} job_arg;

static int job_main(void *arg)
{
    const job_arg *a = *(job_arg *const *)arg;

    round_trip(a->idx, a->n, 5000);
    return 1;
}

static void test_in_async_job(void **state)
{
    static const job_arg args[] = { { 5, 8 }, { 6, 5 }, { 2, 3 } };

    (void)state;
    for (size_t k = 0; k < sizeof(args) / sizeof(args[0]); k++) {
        const job_arg *a = &args[k];
        ASYNC_WAIT_CTX *w = ASYNC_WAIT_CTX_new();
        ASYNC_JOB *job = NULL;
        int ret = 0, rc;

        assert_non_null(w);
        while ((rc = ASYNC_start_job(&job, w, &ret, job_main, &a, sizeof(a))) == ASYNC_PAUSE) {
            OSSL_ASYNC_FD fd;
            size_t num = 0;

            /* Wait for the job's wake-up where it registered a wait fd; else try again. */
            if (ASYNC_WAIT_CTX_get_all_fds(w, NULL, &num) && num == 1) {
                struct pollfd pfd;

                ASYNC_WAIT_CTX_get_all_fds(w, &fd, &num);
                pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
                if (poll(&pfd, 1, 30000) != 1)
                    fail_msg("async job: no wake-up in 30 s");
            }
        }
        assert_int_equal(rc, ASYNC_FINISH);
        assert_int_equal(ret, 1);
        ASYNC_WAIT_CTX_free(w);
    }
}

/* ---- Wycheproof through pipes ---- */

static size_t wp_ran;

/* Each vector in a pipe of its own among random messages under the same key: the vector's pipe
 * must give what the file says (valid: its ciphertext and tag; invalid: a failed tag check of that
 * pipe alone, or its IV refused as the default provider refuses it) and the others their own
 * messages' bytes. */
static void wp_vector(int idx, const wj_value *t, size_t taglen)
{
    size_t keylen, ivlen, aadlen, msglen, ctlen, tlen;
    unsigned char *key = gptest_unhex(wj_get_str(t, "key"), &keylen), *iv = gptest_unhex(wj_get_str(t, "iv"), &ivlen),
                  *aad = gptest_unhex(wj_get_str(t, "aad"), &aadlen), *pt = gptest_unhex(wj_get_str(t, "msg"), &msglen),
                  *ct = gptest_unhex(wj_get_str(t, "ct"), &ctlen), *tag = gptest_unhex(wj_get_str(t, "tag"), &tlen);
    const int valid = strcmp(wj_get_str(t, "result"), "invalid") != 0;
    const size_t n = 3, at = gptest_rand_range(0, 2);
    const unsigned char *ivp[3], *inp[3];
    unsigned char *outp[3], *outb[3], *tagp[3], tags[3][16], **tp = tagp, other_iv[2][512], other[2][48];
    size_t outl[3], outsize[3], inl[3];
    OSSL_PARAM prm[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int ok;

    assert_true(key && iv && aad && pt && ct && tag);
    if (keylen != evp_ciphers[idx].keylen || tlen != taglen) {
        /* another key size's group, or a truncated tag file entry: not this cipher's */
        goto out;
    }
    wp_ran++;
    for (size_t i = 0, k = 0; i < n; i++) {
        if (i == at) {
            ivp[i] = iv;
            continue;
        }
        gptest_rand_bytes(other_iv[k], sizeof(other_iv[k]));
        gptest_rand_bytes(other[k], sizeof(other[k]));
        ivp[i] = other_iv[k++];
    }
    /* Decrypt the vector: its verdict in its own pipe. */
    ok = api.decrypt_init(c, evp_cipher(g_env, idx, 1), key, keylen, n, ivp, ivlen);
    if (!ok) {
        /* Only an IV length both providers refuse (GCM's 0). */
        EVP_CIPHER_CTX *d = EVP_CIPHER_CTX_new();
        int dok = EVP_CipherInit_ex2(d, evp_cipher(g_env, idx, 0), NULL, NULL, 0, NULL) == 1 && ivlen != 0
                  && (ivlen == 12 || evp_set_ivlen(d, ivlen) == 1);

        ERR_clear_error();
        EVP_CIPHER_CTX_free(d);
        if (dok)
            fail_msg("%s tcId %ld: pipeline init refused (iv %zu bytes), which the default provider takes", evp_ciphers[idx].name, wj_get_int(t, "tcId"),
                     ivlen);
        goto out;
    }
    for (size_t i = 0, k = 0; i < n; i++) {
        const int mine = i == at;

        inp[i] = mine ? ct : other[k];
        inl[i] = mine ? ctlen : sizeof(other[0]);
        outb[i] = malloc(inl[i] + 1);
        outp[i] = outb[i];
        outsize[i] = inl[i];
        tagp[i] = tags[i];
        if (mine)
            memcpy(tags[i], tag, taglen);
        else
            memset(tags[i], 0, 16), k++;   /* the others' tags are wrong: they fail too */
    }
    prm[0] = pipe_tag_param(&tp, taglen);
    assert_int_equal(EVP_CIPHER_CTX_set_params(c, prm), 1);
    inp[at] = aad;
    inl[at] = aadlen;
    {
        const unsigned char *ain[3];
        size_t al[3];

        for (size_t i = 0; i < n; i++) {
            ain[i] = i == at ? aad : other[0];
            al[i] = i == at ? aadlen : 5;
        }
        assert_int_equal(api.update(c, NULL, outl, NULL, ain, al), 1);
    }
    inp[at] = ct;
    inl[at] = ctlen;
    assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);
    ok = api.final(c, outp, outl, outsize);
    {
        /* The others' forged (zero) tags fail; the vector's pipe must fail iff it is invalid. */
        unsigned long e;
        const char *data;
        int flags, mine_failed = 0;
        char want[16];

        /* The failed pipes in one error: "pipes 0, 2" (the others' zero tags fail too). */
        snprintf(want, sizeof(want), "%zu", at);
        while ((e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) != 0) {
            const char *d = data != NULL && strncmp(data, "pipe", 4) == 0 ? strchr(data, ' ') : NULL;

            while (d != NULL && *d != '\0') {
                d += strspn(d, " ,");
                mine_failed |= strncmp(d, want, strlen(want)) == 0 && (d[strlen(want)] == ',' || d[strlen(want)] == '\0');
                d += strcspn(d, ",");
            }
        }
        assert_int_equal(ok, 0);
        if (valid == mine_failed)
            fail_msg("%s tcId %ld (%s): the vector's pipe %s", evp_ciphers[idx].name, wj_get_int(t, "tcId"),
                     wj_get_str(t, "result"), mine_failed ? "failed its tag check" : "passed its tag check");
        if (valid && memcmp(outb[at], pt, msglen) != 0)
            fail_msg("%s tcId %ld: decrypted plaintext differs", evp_ciphers[idx].name, wj_get_int(t, "tcId"));
    }
    /* Encrypt a valid vector: its ciphertext and tag. */
    if (valid) {
        EVP_CIPHER_CTX_reset(c);
        assert_int_equal(api.encrypt_init(c, evp_cipher(g_env, idx, 1), key, keylen, n, ivp, ivlen), 1);
        for (size_t i = 0; i < n; i++) {
            inp[i] = i == at ? aad : other[0];
            inl[i] = i == at ? aadlen : 5;
        }
        assert_int_equal(api.update(c, NULL, outl, NULL, inp, inl), 1);
        for (size_t i = 0; i < n; i++) {
            inp[i] = i == at ? pt : other[1];
            inl[i] = i == at ? msglen : sizeof(other[1]);
        }
        assert_int_equal(api.update(c, outp, outl, outsize, inp, inl), 1);
        assert_int_equal(api.final(c, outp, outl, outsize), 1);
        prm[0] = pipe_tag_param(&tp, taglen);
        assert_int_equal(EVP_CIPHER_CTX_get_params(c, prm), 1);
        if (memcmp(outb[at], ct, ctlen) != 0 || memcmp(tags[at], tag, taglen) != 0)
            fail_msg("%s tcId %ld: encryption differs from the vector", evp_ciphers[idx].name, wj_get_int(t, "tcId"));
    }
    for (size_t i = 0; i < n; i++)
        free(outb[i]);
out:
    EVP_CIPHER_CTX_free(c);
    free(key);
    free(iv);
    free(aad);
    free(pt);
    free(ct);
    free(tag);
}

static void wp_file(const char *name, int idx_base)
{
    const char *dir = getenv("GPTEST_WYCHEPROOF_DIR");
    char path[4096], err[256];
    const wj_value *groups;
    wj_value *root;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((root = wj_parse_file(path, err, sizeof(err))) == NULL)
        fail_msg("%s: %s", path, err);
    groups = wj_get(root, "testGroups");
    assert_non_null(groups);
    for (size_t g = 0; g < groups->n; g++) {
        const wj_value *grp = &groups->items[g], *tests = wj_get(grp, "tests");
        long keybits = wj_get_int(grp, "keySize"), tagbits = wj_get_int(grp, "tagSize");
        int idx = idx_base;

        if (idx_base == 5)   /* GCM: by key size */
            idx = keybits == 128 ? 3 : keybits == 192 ? 4 : 5;
        if (tagbits <= 0 || tagbits % 8 != 0 || tagbits > 128 || tests == NULL)
            continue;
        for (size_t k = 0; k < tests->n; k++)
            wp_vector(idx, &tests->items[k], (size_t)tagbits / 8);
    }
    wj_free(root);
}

static void test_wycheproof(void **state)
{
    const char *dir = getenv("GPTEST_WYCHEPROOF_DIR");

    (void)state;
    /* GPTEST_PIPE_QUICK (the memcheck run, tests/gpu/run.sh): the vectors are the long part. */
    if (dir == NULL || dir[0] == '\0' || getenv("GPTEST_PIPE_QUICK") != NULL)
        skip();
    wp_file("aes_gcm_test.json", 5);
    wp_file("chacha20_poly1305_test.json", 6);
    assert_true(wp_ran > 300);
    printf("wycheproof through pipes: %zu vectors\n", wp_ran);
}

/* Under a libcrypto without the pipeline API (3.0): gpuprov, whose tables hold the pipeline ids,
 * loads and serves; each cipher gives the default provider's bytes. */
static void test_served_without_pipeline_api(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        unsigned char key[32] = { 1 }, iv[16] = { 2 }, in[100], out[100], want[100], tag[16];
        msg m = { .iv = iv, .in = in, .len = sizeof(in) };
        EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
        int outl;

        gptest_rand_bytes(in, sizeof(in));
        reference(idx, 1, key, evp_ciphers[idx].ivlen, &m, want, tag);
        assert_int_equal(EVP_EncryptInit_ex2(c, evp_cipher(g_env, idx, 1), key, iv, NULL), 1);
        assert_int_equal(EVP_EncryptUpdate(c, out, &outl, in, sizeof(in)), 1);
        assert_memory_equal(out, want, sizeof(in));
        EVP_CIPHER_CTX_free(c);
    }
}

/*
 * Stream-ordered, a pass failing in the middle of a call of several passes (run with slices of
 * 4 KiB and a failure armed: the stand-in's GPUPROV_TEST_HOST_FAIL_AFTER, which fails a whole
 * pass when the stream runs it, or on a GPU a launch of batching/cuda/ordered.c made to fail,
 * GPUPROV_TEST_CUDA_FAULT_*, at queue time): the call that queued it, its Final or its tags fail
 * with the device-mode failure's reason, nothing crashes or hangs, and a new call on the same
 * context is refused cleanly (device mode needs a usable GPU after a GPU failure).
 */
#define FAIL_PIPES 8
#define FAIL_LEN (20 * 1024)

static void test_pass_failure(void **state)
{
    const int idx = evp_cipher_index("AES-256-GCM");
    const EVP_CIPHER *ciph = evp_cipher(g_env, idx, 1);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    unsigned char key[32], ivb[FAIL_PIPES][12], tags[FAIL_PIPES][16], *tagp[FAIL_PIPES], **tp = tagp;
    unsigned char *in[FAIL_PIPES], *out[FAIL_PIPES], *outp[FAIL_PIPES];
    const unsigned char *ivs[FAIL_PIPES], *inp[FAIL_PIPES];
    size_t outl[FAIL_PIPES], outsize[FAIL_PIPES], inl[FAIL_PIPES];
    OSSL_PARAM prm[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    int ok;

    (void)state;
    assert_non_null(c);
    assert_non_null(stream);
    gptest_rand_bytes(key, sizeof(key));
    for (size_t i = 0; i < FAIL_PIPES; i++) {
        gptest_rand_bytes(ivb[i], sizeof(ivb[i]));
        ivs[i] = ivb[i];
        in[i] = buf_new(FAIL_LEN, 1);
        out[i] = buf_new(FAIL_LEN, 1);
        memset(in[i], (int)i, FAIL_LEN);
        inp[i] = in[i];
        outp[i] = out[i];
        inl[i] = outsize[i] = FAIL_LEN;
        tagp[i] = tags[i];
    }
    assert_int_equal(api.encrypt_init(c, ciph, key, 32, FAIL_PIPES, ivs, 12), 1);
    assert_int_equal(set_memory(c, "device"), 1);
    assert_int_equal(set_stream(c, stream), 1);
    /* Five passes (20 KiB pipes in 4 KiB slices), and the tags' pass: the failure is among them. */
    ok = api.update(c, outp, outl, outsize, inp, inl);
    if (ok) {
        for (size_t i = 0; i < FAIL_PIPES; i++) {
            outp[i] = out[i] + FAIL_LEN;
            outsize[i] = 0;
        }
        ok = api.final(c, outp, outl, outsize);
    }
    if (ok) {
        prm[0] = pipe_tag_param(&tp, 16);
        ok = EVP_CIPHER_CTX_get_params(c, prm);
    }
    expect_error(ok, "a stream-ordered call whose pass failed", "device memory has no CPU fallback", NULL);
    gpu_sync();
    /* The same context, a new call: device mode is refused now. */
    for (size_t i = 0; i < FAIL_PIPES; i++) {
        outp[i] = out[i];
        outsize[i] = FAIL_LEN;
    }
    assert_int_equal(api.encrypt_init(c, NULL, key, 32, FAIL_PIPES, ivs, 12), 1);
    expect_error(api.update(c, outp, outl, outsize, inp, inl), "a call after the failure",
                 "device memory needs a usable GPU", NULL);
    EVP_CIPHER_CTX_free(c);
    for (size_t i = 0; i < FAIL_PIPES; i++) {
        buf_free(in[i], 1);
        buf_free(out[i], 1);
    }
}

static int group_setup(void **state)
{
    int rc = evp_group_setup(state);

    g_env = *state;
    if (rc == 0 && devmem)
        evp_dm_find();
    if (rc == 0 && stream_wanted && api.update != NULL)   /* no pipeline calls (a 3.0 libcrypto): no stream */
        stream = evp_stream_new(0);   /* GPU 0: the managed buffers' */
    return rc;
}

/* The stream goes before the module does: a fake stream's thread runs the module's code. */
static int group_teardown(void **state)
{
    evp_stream_free(stream);
    stream = NULL;
    return evp_group_teardown(state);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_can_pipeline),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_reinit),
        cmocka_unit_test(test_forged_tag),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_mixed_memory),
        cmocka_unit_test(test_device_shared_allocation),
        cmocka_unit_test(test_in_async_job),
        cmocka_unit_test(test_wycheproof),
    };
    /* Stream-ordered: the round trips and forged tags (the other cases are synchronous device
     * mode's). */
    const struct CMUnitTest stream_tests[] = {
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_reinit),
        cmocka_unit_test(test_skewed_pipe),
        cmocka_unit_test(test_large_pipes),
        cmocka_unit_test(test_forged_tag),
        cmocka_unit_test(test_bad_stream),
    };
    const struct CMUnitTest old_tests[] = { cmocka_unit_test(test_served_without_pipeline_api) };
    const struct CMUnitTest failure_tests[] = { cmocka_unit_test(test_pass_failure) };
    const char *st = getenv("GPTEST_PIPE_STREAM");
#ifdef PIPE_TEST_CUDA
    const char *hd = getenv("GPTEST_PIPE_DEVMEM");
#else
    const char *hd = getenv("GPUPROV_TEST_HOST_DEVMEM");
#endif

    if (evp_under_default()) {
        fprintf(stderr, "pipeline: the default provider has no pipeline ciphers; nothing to check\n");
        return 77;
    }
    devmem = hd != NULL && hd[0] == '1';
    if (!pipe_api_load(&api)) {
        int rc = cmocka_run_group_tests(old_tests, group_setup, group_teardown);

        if (rc != 0)
            return rc;
        printf("%s (%s); gpuprov loaded and served this libcrypto\n", PIPE_SKIP_MESSAGE, OpenSSL_version(OPENSSL_VERSION));
        return 77;
    }
    if (devmem && st != NULL && st[0] == '1') {
        stream_wanted = 1;
        if (argc > 1 && strcmp(argv[1], "failure") == 0)   /* a failure armed by the environment */
            return cmocka_run_group_tests(failure_tests, group_setup, group_teardown);
        return cmocka_run_group_tests(stream_tests, group_setup, group_teardown);
    }
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
