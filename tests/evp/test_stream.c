/* SPDX-License-Identifier: Apache-2.0 */
/* Stream-ordered device mode (gpuprov-cuda-stream) through EVP on the host stand-in; device-mode callers on many threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/provider.h>
#ifdef STREAM_TEST_CUDA
# include <cuda_runtime_api.h>
#endif

#include "evp_common.h"
#include "evp_devmem.h"

/*
 * The test module's host executor stands in for the GPU (GPUPROV_TEST_HOST_DEVMEM,
 * batching/exec_host.c): "device memory" is its fake allocations, and a "CUDA stream" is one of its
 * fake streams (batching/fake_stream.h), a FIFO one host thread runs in order, on which the test
 * queues its own work too, as an application queues kernels on its stream. Every result is compared
 * with the default provider's on the same bytes. The stand-in's memory is plain memory, so the test
 * reads it directly once the stream has run.
 *
 * Built with STREAM_TEST_CUDA (suite gpu) the same cases run on a real GPU: cudaMalloc'd buffers
 * on data_gpu (GPTEST_DEVMEM_GPU, else the GPU knob device names, else 0; tests/gpu/multi.sh puts
 * them on the host's last GPU), non-blocking CUDA streams of that GPU, and the caller's own work as
 * cudaMemcpyAsync on the stream. A CUDA stream cannot be held from the host without a kernel, so
 * there the cases that hold the stream check ordering and results only (the cuda executor runs
 * each request when it is made, ordered after the stream: docs/config.md).
 *
 * With argument "threads" the binary runs the synchronous device-mode threads case alone (issue 51
 * item 3), under GPUPROV_TEST_GATHER_OPS: the queue combines the threads' calls into batches; with
 * "failure", the failure of queued work alone (under GPUPROV_TEST_HOST_FAIL_AFTER).
 */

#define MEMORY_PARAM "gpuprov-memory"
#define STREAM_PARAM "gpuprov-cuda-stream"

static gptest_env *g_env;

/* ---- device memory and streams: the test module's stand-ins, or CUDA ---- */

static int data_gpu;

typedef struct caller_work {
    unsigned char *dst;
    const unsigned char *src;
    size_t len;
} caller_work;

/* Device memory and streams: evp_devmem.h. What is the caller's own here: its work on its stream,
 * and holding a stream (the stand-in's alone: a CUDA stream cannot be held from the host without a
 * kernel). */
#ifdef STREAM_TEST_CUDA
# define CAN_HOLD 0
static void stream_hold(void *s, int hold)
{
    (void)s;
    (void)hold;
}

/* The caller's own work on its stream: an asynchronous copy (host sides pinned: caller_host). */
static int stream_copy(void *s, caller_work *w)
{
    return cudaMemcpyAsync(w->dst, w->src, w->len, cudaMemcpyDefault, (cudaStream_t)s) == cudaSuccess;
}

static unsigned char *caller_host(size_t n)
{
    void *p = NULL;

    evp_cuda_check(cudaMallocHost(&p, n), "cudaMallocHost");
    return p;
}

static void caller_host_free(void *p)
{
    evp_cuda_check(cudaFreeHost(p), "cudaFreeHost");
}

static void stream_extras_find(void)
{
}
#else
# define CAN_HOLD 1
static void (*stream_hold)(void *s, int hold);
static int (*stream_enqueue)(void *s, void (*fn)(void *), void *arg);

static void stream_extras_find(void)
{
    *(void **)&stream_hold = evp_test_module_symbol("gpuprov_test_stream_hold");
    *(void **)&stream_enqueue = evp_test_module_symbol("gpuprov_test_stream_enqueue");
}

/* The caller's own work on its stream: a copy, as a kernel or cudaMemcpyAsync would make. */
static void caller_copy(void *arg)
{
    caller_work *w = arg;

    memcpy(w->dst, w->src, w->len);
}

static int stream_copy(void *s, caller_work *w)
{
    return stream_enqueue(s, caller_copy, w);
}

static unsigned char *caller_host(size_t n)
{
    return malloc(n);
}

static void caller_host_free(void *p)
{
    free(p);
}
#endif

/* The buffer's first n bytes are all `byte`. */
static int dm_all(const void *dev, int byte, size_t n)
{
    unsigned char *h = malloc(n);
    int ok = 1;

    assert_non_null(h);
    evp_dm_get(h, dev, n);
    for (size_t i = 0; i < n; i++)
        ok &= h[i] == (unsigned char)byte;
    free(h);
    return ok;
}

/* The buffer holds `want`. */
static void assert_dm_equal(const void *dev, const unsigned char *want, size_t n)
{
    unsigned char *h = malloc(n + 1);

    assert_non_null(h);
    evp_dm_get(h, dev, n);
    assert_memory_equal(h, want, n);
    free(h);
}

/* ---- EVP shorthands ---- */

static int is_aead(int idx)
{
    return evp_ciphers[idx].kind == K_GCM || evp_ciphers[idx].kind == K_CCP;
}

static int set_stream(EVP_CIPHER_CTX *ctx, void *stream)
{
    uint64_t v = (uint64_t)(uintptr_t)stream;
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_uint64(STREAM_PARAM, &v);
    return EVP_CIPHER_CTX_set_params(ctx, p);
}

static uint64_t get_stream(EVP_CIPHER_CTX *ctx)
{
    uint64_t v = 12345;
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_uint64(STREAM_PARAM, &v);
    assert_int_equal(EVP_CIPHER_CTX_get_params(ctx, p), 1);
    assert_true(OSSL_PARAM_modified(p));
    return v;
}

/* A gpuprov context of cipher idx in device mode, key set; ordered on `stream` unless NULL. Both
 * params in one call, the stream first: gpuprov takes the memory mode first wherever it is. */
static EVP_CIPHER_CTX *ordered_ctx(int idx, int enc, const unsigned char *key, void *stream)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    uint64_t v = (uint64_t)(uintptr_t)stream;
    OSSL_PARAM p[3] = { OSSL_PARAM_END, OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_uint64(STREAM_PARAM, &v);
    p[1] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, "device", 0);
    assert_non_null(ctx);
    assert_int_equal(EVP_CipherInit_ex2(ctx, evp_cipher(g_env, idx, 1), key, NULL, enc, p), 1);
    return ctx;
}

/* The call just made failed with an error whose text holds `part`; the queue is then emptied. */
static void expect_error(int rc, const char *what, const char *part)
{
    unsigned long e;
    char text[512] = "";
    int found = 0;

    if (rc > 0)
        fail_msg("%s: accepted", what);
    while ((e = ERR_get_error()) != 0) {
        ERR_error_string_n(e, text, sizeof(text));
        found |= strstr(text, part) != NULL;
    }
    if (!found)
        fail_msg("%s: no error saying \"%s\" (last: %s)", what, part, text);
}

/* The default provider's answer on host memory: AAD pieces and one update. */
static void reference(int idx, int enc, const unsigned char *key, const unsigned char *iv, const unsigned char *aad,
                      size_t aadlen, const unsigned char *in, size_t len, unsigned char *out, unsigned char tag[16])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl;

    assert_non_null(ctx);
    assert_int_equal(EVP_CipherInit_ex2(ctx, evp_cipher(g_env, idx, 0), key, iv, enc, NULL), 1);
    if (aadlen > 0)
        assert_int_equal(EVP_CipherUpdate(ctx, NULL, &outl, aad, (int)aadlen), 1);
    if (len > 0)
        assert_int_equal(EVP_CipherUpdate(ctx, out, &outl, in, (int)len), 1);
    if (is_aead(idx) && enc) {
        assert_int_equal(EVP_CipherFinal_ex(ctx, out + len, &outl), 1);
        assert_int_equal(evp_get_tag(ctx, tag, 16), 1);
    }
    EVP_CIPHER_CTX_free(ctx);
}

/* Cut `left` bytes: a random piece that often lands on block edges. */
static size_t piece(size_t left)
{
    static const size_t edges[] = { 1, 15, 16, 17, 63, 64, 65, 2048, 2049, 4096 + 3 };
    size_t n;

    if (left == 0)
        return 0;
    n = gptest_rand_u64() % 2 ? edges[gptest_rand_range(0, 9)] : gptest_rand_range(1, left);
    return n < left ? n : left;
}

/* ---- the parameter ---- */

static int lists(const OSSL_PARAM *list, const char *key, unsigned int type)
{
    const OSSL_PARAM *p = OSSL_PARAM_locate_const(list, key);

    return p != NULL && p->data_type == type;
}

/* A stream that is not one of data_gpu's: the stand-in's, a value no fake stream has; on CUDA, a
 * stream of another GPU (NULL with one GPU: a dangling handle is the caller's error, not checked). */
static void *other_stream_new(void)
{
#ifdef STREAM_TEST_CUDA
    int n = 0;
    cudaStream_t s = NULL;

    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
        return NULL;
    evp_cuda_check(cudaSetDevice(data_gpu == 0 ? 1 : 0), "cudaSetDevice");
    evp_cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    evp_cuda_check(cudaSetDevice(data_gpu), "cudaSetDevice");
    return (void *)s;
#else
    return (void *)(uintptr_t)0x5151;
#endif
}

static void other_stream_free(void *s)
{
#ifdef STREAM_TEST_CUDA
    if (s != NULL)
        evp_cuda_check(cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy");
#else
    (void)s;
#endif
}

static void test_params(void **state)
{
    unsigned char key[32] = { 1 }, iv[16] = { 2 }, buf[64] = { 0 };
    void *s = evp_stream_new(data_gpu), *other = other_stream_new();
    (void)state;

    assert_non_null(s);
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        EVP_CIPHER *c = evp_cipher(g_env, idx, 1);
        EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
        unsigned char *dev = evp_dm_alloc(64, data_gpu);
        OSSL_PARAM bad[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
        int outl;

        assert_true(lists(EVP_CIPHER_settable_ctx_params(c), STREAM_PARAM, OSSL_PARAM_UNSIGNED_INTEGER));
        assert_true(lists(EVP_CIPHER_gettable_ctx_params(c), STREAM_PARAM, OSSL_PARAM_UNSIGNED_INTEGER));
        assert_int_equal(EVP_EncryptInit_ex2(ctx, c, key, iv, NULL), 1);
        assert_true(get_stream(ctx) == 0);
        /* Host memory has no stream. */
        expect_error(set_stream(ctx, s), "a stream without device mode", "needs device mode");
        /* Not an unsigned integer. */
        bad[0] = OSSL_PARAM_construct_utf8_string(STREAM_PARAM, "1", 0);
        expect_error(EVP_CIPHER_CTX_set_params(ctx, bad), "a string as the stream", "unsigned integer");
        EVP_CIPHER_CTX_free(ctx);

        /* Both in one call, the stream first; got back as set; 0 clears it. */
        ctx = ordered_ctx(idx, 1, key, s);
        assert_true(get_stream(ctx) == (uint64_t)(uintptr_t)s);
        assert_int_equal(set_stream(ctx, NULL), 1);
        assert_true(get_stream(ctx) == 0);
        assert_int_equal(set_stream(ctx, s), 1);
        /* Back to host memory: the stream goes with device mode. */
        {
            OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

            p[0] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, "host", 0);
            assert_int_equal(EVP_CIPHER_CTX_set_params(ctx, p), 1);
            assert_true(get_stream(ctx) == 0);
        }
        EVP_CIPHER_CTX_free(ctx);

        /* Not a stream of the GPU holding the data: refused at the update, nothing queued. */
        if (other != NULL) {
            ctx = ordered_ctx(idx, 1, key, other);
            assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
            expect_error(EVP_EncryptUpdate(ctx, dev, &outl, dev, 64), "an update on another GPU's stream",
                         "not a CUDA stream");
            EVP_CIPHER_CTX_free(ctx);
        }

        /* Not in the middle of a message. */
        ctx = ordered_ctx(idx, 1, key, s);
        assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
        assert_int_equal(EVP_EncryptUpdate(ctx, dev, &outl, dev, 17), 1);
        expect_error(set_stream(ctx, NULL), "a stream change mid-message", "middle of a message");
        assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);   /* a new message: allowed */
        assert_int_equal(set_stream(ctx, NULL), 1);
        EVP_CIPHER_CTX_free(ctx);
        evp_stream_sync(s);
        evp_dm_free(dev);
        (void)buf;
    }
    evp_stream_free(s);
    other_stream_free(other);
}

/* ---- byte-identity: many updates, partial blocks, AAD in pieces ---- */

/*
 * One message of cipher idx through the stream in random updates (AAD in random pieces, some
 * longer than what the engine holds), out of place or in place, then the same bytes through the
 * default provider. Encrypting: GET_TAG waits for the message; decrypting: its Final does, with
 * the right tag and with a wrong one (refused).
 */
static void diff_one(int idx, void *s, size_t len, size_t aadlen, int in_place)
{
    unsigned char key[32], iv[16], tag[16], rtag[16], *aad = malloc(aadlen + 1), *plain = malloc(len + 16);
    unsigned char *ref = malloc(len + 16), *got = malloc(len + 1), *din = evp_dm_alloc(len, data_gpu), *dout = in_place ? din : evp_dm_alloc(len, data_gpu);
    EVP_CIPHER_CTX *ctx;
    int outl;

    assert_true(aad != NULL && plain != NULL && ref != NULL && got != NULL);
    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, aadlen);
    gptest_rand_bytes(plain, len);
    if (!is_aead(idx))
        aadlen = 0;
    reference(idx, 1, key, iv, aad, aadlen, plain, len, ref, rtag);

    for (int enc = 1; enc >= 0; enc--) {
        evp_dm_put(din, enc ? plain : ref, len);
        ctx = ordered_ctx(idx, enc, key, s);
        assert_int_equal(EVP_CipherInit_ex2(ctx, NULL, NULL, iv, enc, NULL), 1);
        for (size_t off = 0, n; off < aadlen; off += n) {
            n = gptest_rand_u64() % 3 == 0 ? aadlen - off : piece(aadlen - off);
            assert_int_equal(EVP_CipherUpdate(ctx, NULL, &outl, aad + off, (int)n), 1);
        }
        for (size_t off = 0, n; off < len; off += n) {
            n = piece(len - off);
            assert_int_equal(EVP_CipherUpdate(ctx, dout + off, &outl, din + off, (int)n), 1);
        }
        if (is_aead(idx) && enc) {
            assert_int_equal(EVP_CipherFinal_ex(ctx, got, &outl), 1);
            assert_int_equal(evp_get_tag(ctx, tag, 16), 1);   /* waits for the message */
            assert_memory_equal(tag, rtag, 16);
        } else if (is_aead(idx)) {
            assert_int_equal(evp_set_tag(ctx, rtag, 16), 1);
            assert_int_equal(EVP_CipherFinal_ex(ctx, got, &outl), 1);   /* waits and verifies */
        } else {
            assert_int_equal(EVP_CipherFinal_ex(ctx, got, &outl), 1);
            evp_stream_sync(s);   /* no tag to wait for: the caller synchronises */
        }
        assert_dm_equal(dout, enc ? ref : plain, len);
        if (is_aead(idx) && !enc) {   /* a forged tag fails the Final */
            rtag[0] ^= 1;
            assert_int_equal(EVP_CipherInit_ex2(ctx, NULL, NULL, iv, 0, NULL), 1);
            if (aadlen > 0)
                assert_int_equal(EVP_CipherUpdate(ctx, NULL, &outl, aad, (int)aadlen), 1);
            evp_dm_put(din, ref, len);
            if (len > 0)
                assert_int_equal(EVP_CipherUpdate(ctx, dout, &outl, din, (int)len), 1);
            assert_int_equal(evp_set_tag(ctx, rtag, 16), 1);
            assert_int_equal(EVP_CipherFinal_ex(ctx, got, &outl), 0);
            ERR_clear_error();
            rtag[0] ^= 1;
        }
        EVP_CIPHER_CTX_free(ctx);
    }
    free(aad);
    free(plain);
    free(ref);
    free(got);
    if (!in_place)
        evp_dm_free(dout);
    evp_dm_free(din);
}

static void test_diff(void **state)
{
    void *s = evp_stream_new(data_gpu);
    const int rounds = getenv("GPTEST_QUICK") != NULL || getenv("GPTEST_DEVMEM_QUICK") != NULL ? 2 : 6;
    (void)state;

    assert_non_null(s);
    for (int idx = 0; idx < EVP_NCIPHERS; idx++)
        for (int round = 0; round < rounds; round++) {
            size_t len = round == 0 ? 0 : gptest_rand_range(1, round % 2 ? 300 : 70000);

            diff_one(idx, s, len, gptest_rand_range(0, round % 3 == 2 ? 200 : 40), round % 2);
        }
    evp_stream_free(s);
}

/* ---- ordering, returning at once, waiting ---- */

/*
 * The caller's earlier work on the stream (writing the input) runs before the update that reads it,
 * and its later work (reading the output) after: the update was queued between them. While the
 * stream is held nothing has run, yet every call returned. GET_TAG (and a decrypt Final) wait for
 * their own message; a CTR stream is the caller's to synchronise.
 */
#ifdef STREAM_TEST_CUDA
# define BIG_BYTES ((size_t)256 << 20)   /* earlier work long enough that the update would overtake it */
#else
# define BIG_BYTES ((size_t)64 << 10)
#endif

static void test_ordering(void **state)
{
    const size_t len = 5000;
    void *s = evp_stream_new(data_gpu);
    (void)state;

    assert_non_null(s);
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        unsigned char key[32] = { 7 }, iv[16] = { 8 }, aad[20] = { 9 }, tag[16], rtag[16];
        unsigned char *plain = caller_host(len), *ref = malloc(len + 16), *after = caller_host(len);
        unsigned char *din = evp_dm_alloc(len, data_gpu), *dout = evp_dm_alloc(len, data_gpu), *big = evp_dm_alloc(BIG_BYTES, data_gpu), zero[64] = { 0 };
        caller_work slow = { big, big + BIG_BYTES / 2, BIG_BYTES / 2 };
        caller_work before = { din, plain, len }, later = { after, dout, len };
        EVP_CIPHER_CTX *ctx = ordered_ctx(idx, 1, key, s);
        int outl;

        assert_true(plain != NULL && ref != NULL && after != NULL);
        gptest_rand_bytes(plain, len);
        memset(after, 0, len);
        evp_dm_fill(din, 0, len);
        evp_dm_fill(dout, 0, len);
        reference(idx, 1, key, iv, aad, is_aead(idx) ? sizeof(aad) : 0, plain, len, ref, rtag);

        stream_hold(s, 1);
        assert_int_equal(stream_copy(s, &slow), 1);     /* the caller's earlier work: long... */
        assert_int_equal(stream_copy(s, &before), 1);   /* ...then the input */
        assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
        if (is_aead(idx))
            assert_int_equal(EVP_EncryptUpdate(ctx, NULL, &outl, aad, sizeof(aad)), 1);
        assert_int_equal(EVP_EncryptUpdate(ctx, dout, &outl, din, 1000), 1);
        assert_int_equal(EVP_EncryptUpdate(ctx, dout + 1000, &outl, din + 1000, (int)len - 1000), 1);
        assert_int_equal(EVP_EncryptFinal_ex(ctx, zero, &outl), 1);
        assert_int_equal(stream_copy(s, &later), 1);    /* the caller's later work */
        if (CAN_HOLD) {   /* every call returned; nothing ran yet */
            assert_true(dm_all(dout, 0, sizeof(zero)));
            assert_true(dm_all(din, 0, sizeof(zero)));
        }
        stream_hold(s, 0);
        if (is_aead(idx)) {
            assert_int_equal(evp_get_tag(ctx, tag, 16), 1);   /* waits for the message's own work */
            assert_memory_equal(tag, rtag, 16);
            assert_dm_equal(dout, ref, len);                   /* so its output is there */
        }
        evp_stream_sync(s);
        assert_dm_equal(dout, ref, len);
        assert_memory_equal(after, ref, len);   /* the later work saw the output */
        EVP_CIPHER_CTX_free(ctx);
        caller_host_free(plain);
        free(ref);
        caller_host_free(after);
        evp_dm_free(din);
        evp_dm_free(dout);
        evp_dm_free(big);
    }
    evp_stream_free(s);
}

typedef struct releaser {
    void *s;
    unsigned ms;
} releaser;

static void *release_later(void *arg)
{
    releaser *r = arg;
    struct timespec d = { 0, (long)r->ms * 1000000L };

    nanosleep(&d, NULL);
    stream_hold(r->s, 0);
    return NULL;
}

/* A decrypt Final waits for its message while the stream is still held, and answers once released. */
static void test_final_waits(void **state)
{
    const int idx = evp_cipher_index("AES-256-GCM");
    const size_t len = 3000;
    unsigned char key[32] = { 3 }, iv[16] = { 4 }, rtag[16], *plain = malloc(len), *ref = malloc(len + 16), fin[16];
    unsigned char *din = evp_dm_alloc(len, data_gpu), *dout = evp_dm_alloc(len, data_gpu);
    void *s = evp_stream_new(data_gpu);
    releaser rel = { s, 50 };
    pthread_t th;
    EVP_CIPHER_CTX *ctx;
    int outl;
    (void)state;

    assert_true(s != NULL && plain != NULL && ref != NULL);
    gptest_rand_bytes(plain, len);
    reference(idx, 1, key, iv, NULL, 0, plain, len, ref, rtag);
    evp_dm_put(din, ref, len);
    ctx = ordered_ctx(idx, 0, key, s);
    stream_hold(s, 1);
    assert_int_equal(EVP_DecryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
    assert_int_equal(EVP_DecryptUpdate(ctx, dout, &outl, din, (int)len), 1);
    assert_int_equal(evp_set_tag(ctx, rtag, 16), 1);
    assert_int_equal(pthread_create(&th, NULL, release_later, &rel), 0);
    assert_int_equal(EVP_DecryptFinal_ex(ctx, fin, &outl), 1);   /* blocks until released, then verifies */
    assert_dm_equal(dout, plain, len);
    pthread_join(th, NULL);
    EVP_CIPHER_CTX_free(ctx);
    evp_stream_free(s);
    evp_dm_free(din);
    evp_dm_free(dout);
    free(plain);
    free(ref);
}

/*
 * The context may move on while its queued work waits: a new key and IV, a copy, a free. The work
 * queued before runs with the key and state it was queued with (gpuprov keeps its own copies until
 * the stream has run it).
 */
static void test_lifetimes(void **state)
{
    const int idx = evp_cipher_index("ChaCha20-Poly1305");
    const size_t len = 4099;
    unsigned char key[32] = { 5 }, key2[32] = { 6 }, iv[16] = { 7 }, rtag[16], tag[16], tag2[16];
    unsigned char *plain = malloc(len), *ref = malloc(len + 16), *ref2 = malloc(len + 16), fin[16];
    unsigned char *din = evp_dm_alloc(len, data_gpu), *d1 = evp_dm_alloc(len, data_gpu), *d2 = evp_dm_alloc(len, data_gpu), *d3 = evp_dm_alloc(len, data_gpu);
    void *s = evp_stream_new(data_gpu);
    EVP_CIPHER_CTX *ctx, *cp;
    int outl;
    (void)state;

    assert_true(s != NULL && plain != NULL && ref != NULL && ref2 != NULL);
    gptest_rand_bytes(plain, len);
    evp_dm_put(din, plain, len);
    reference(idx, 1, key, iv, NULL, 0, plain, len, ref, rtag);
    reference(idx, 1, key2, iv, NULL, 0, plain, len, ref2, tag2);

    stream_hold(s, 1);
    ctx = ordered_ctx(idx, 1, key, s);
    assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
    assert_int_equal(EVP_EncryptUpdate(ctx, d1, &outl, din, 1000), 1);
    /* A copy mid-message waits for what was queued and goes on from there, on its own. */
    stream_hold(s, 0);
    cp = EVP_CIPHER_CTX_new();
    assert_int_equal(EVP_CIPHER_CTX_copy(cp, ctx), 1);
    stream_hold(s, 1);
    assert_int_equal(EVP_EncryptUpdate(cp, d3 + 1000, &outl, din + 1000, (int)len - 1000), 1);
    assert_int_equal(EVP_EncryptFinal_ex(cp, fin, &outl), 1);
    /* The original goes on too, then re-keys before its work ran: the old key serves the old work. */
    assert_int_equal(EVP_EncryptUpdate(ctx, d1 + 1000, &outl, din + 1000, (int)len - 1000), 1);
    assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, key2, iv, NULL), 1);
    assert_int_equal(EVP_EncryptUpdate(ctx, d2, &outl, din, (int)len), 1);
    assert_int_equal(EVP_EncryptFinal_ex(ctx, fin, &outl), 1);
    stream_hold(s, 0);
    assert_int_equal(evp_get_tag(ctx, tag, 16), 1);
    assert_memory_equal(tag, tag2, 16);
    assert_int_equal(evp_get_tag(cp, tag, 16), 1);
    assert_memory_equal(tag, rtag, 16);
    evp_stream_sync(s);
    assert_dm_equal(d1, ref, len);
    assert_dm_equal(d2, ref2, len);
    assert_dm_equal(d3 + 1000, ref + 1000, len - 1000);
    /* Freed with work still queued: the work runs, then gpuprov lets go of its copies. */
    stream_hold(s, 1);
    assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, key, iv, NULL), 1);
    evp_dm_fill(d1, 0, len);
    assert_int_equal(EVP_EncryptUpdate(ctx, d1, &outl, din, (int)len), 1);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_CTX_free(cp);
    stream_hold(s, 0);
    evp_stream_sync(s);
    assert_dm_equal(d1, ref, len);
    evp_stream_free(s);
    evp_dm_free(din);
    evp_dm_free(d1);
    evp_dm_free(d2);
    evp_dm_free(d3);
    free(plain);
    free(ref);
    free(ref2);
}

/*
 * Buffers whose message position is not on a 16-byte boundary (an offset into an allocation that
 * does not follow the message): gpuprov runs such an update synchronously, after the message's
 * queued work (docs/config.md), and queues the next one again. Byte for byte the default provider's.
 */
static void test_unaligned(void **state)
{
    const size_t len = 9000;
    void *s = evp_stream_new(data_gpu);
    (void)state;

    assert_non_null(s);
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        unsigned char key[32] = { 21 }, iv[16] = { 22 }, aad[7] = { 23 }, tag[16], rtag[16], fin[16];
        unsigned char *plain = malloc(len), *ref = malloc(len + 16), *din = evp_dm_alloc(len + 64, data_gpu), *dout = evp_dm_alloc(len + 64, data_gpu);
        const size_t cuts[] = { 5, 1000, 3, 4096, 1 };
        EVP_CIPHER_CTX *ctx = ordered_ctx(idx, 1, key, s);
        size_t off = 0;
        int outl;

        assert_true(plain != NULL && ref != NULL);
        gptest_rand_bytes(plain, len);
        evp_dm_put(din + 3, plain, len);   /* 3 bytes in: every other update is off its boundary */
        reference(idx, 1, key, iv, aad, is_aead(idx) ? sizeof(aad) : 0, plain, len, ref, rtag);
        assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
        if (is_aead(idx))
            assert_int_equal(EVP_EncryptUpdate(ctx, NULL, &outl, aad, sizeof(aad)), 1);
        for (int k = 0; off < len; k++) {
            size_t n = cuts[k % 5] < len - off ? cuts[k % 5] : len - off;

            /* out follows the message from its allocation's start; in is 3 bytes off it */
            assert_int_equal(EVP_EncryptUpdate(ctx, dout + off, &outl, din + 3 + off, (int)n), 1);
            off += n;
        }
        assert_int_equal(EVP_EncryptFinal_ex(ctx, fin, &outl), 1);
        if (is_aead(idx)) {
            assert_int_equal(evp_get_tag(ctx, tag, 16), 1);
            assert_memory_equal(tag, rtag, 16);
        }
        evp_stream_sync(s);
        assert_dm_equal(dout, ref, len);
        EVP_CIPHER_CTX_free(ctx);
        free(plain);
        free(ref);
        evp_dm_free(din);
        evp_dm_free(dout);
    }
    evp_stream_free(s);
}

/* Synchronous and stream-ordered messages on one context, one after the other. */
static void test_mixed(void **state)
{
    const int idx = evp_cipher_index("AES-128-GCM");
    const size_t len = 777;
    unsigned char key[32] = { 11 }, iv[16] = { 12 }, rtag[16], tag[16], fin[16], *plain = malloc(len);
    unsigned char *ref = malloc(len + 16), *din = evp_dm_alloc(len, data_gpu), *dout = evp_dm_alloc(len, data_gpu);
    void *s = evp_stream_new(data_gpu);
    EVP_CIPHER_CTX *ctx = ordered_ctx(idx, 1, key, NULL);
    int outl;
    (void)state;

    assert_true(s != NULL && plain != NULL && ref != NULL);
    gptest_rand_bytes(plain, len);
    evp_dm_put(din, plain, len);
    reference(idx, 1, key, iv, NULL, 0, plain, len, ref, rtag);
    for (int round = 0; round < 4; round++) {
        assert_int_equal(set_stream(ctx, round % 2 ? s : NULL), 1);
        evp_dm_fill(dout, 0, len);
        assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
        assert_int_equal(EVP_EncryptUpdate(ctx, dout, &outl, din, (int)len), 1);
        assert_int_equal(EVP_EncryptFinal_ex(ctx, fin, &outl), 1);
        assert_int_equal(evp_get_tag(ctx, tag, 16), 1);
        assert_memory_equal(tag, rtag, 16);
        assert_dm_equal(dout, ref, len);
    }
    EVP_CIPHER_CTX_free(ctx);
    evp_stream_free(s);
    evp_dm_free(din);
    evp_dm_free(dout);
    free(plain);
    free(ref);
}

/*
 * A failure of queued work (GPUPROV_TEST_HOST_FAIL_AFTER=2: the third request the stand-in runs
 * fails, as a kernel would on the GPU) shows at the message's next call, with the device-mode
 * failure's reason; the work queued after it does not run, and device mode is then refused, as
 * after a GPU failure.
 */
static void test_async_failure(void **state)
{
#ifdef STREAM_TEST_CUDA
    (void)state;
    skip();   /* the stand-in's hook; a GPU's failures: devmem-cuda-fault */
#else
    const int idx = evp_cipher_index("AES-256-GCM");
    unsigned char key[32] = { 1 }, iv[16] = { 2 }, tag[16], fin[16], *din = evp_dm_alloc(4096, data_gpu), *dout = evp_dm_alloc(4096, data_gpu);
    void *s = evp_stream_new(data_gpu);
    EVP_CIPHER_CTX *ctx;
    int outl;
    (void)state;

    assert_non_null(s);
    memset(din, 1, 4096);
    memset(dout, 0, 4096);
    ctx = ordered_ctx(idx, 1, key, s);
    assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
    stream_hold(s, 1);   /* all four queued before any runs */
    for (int i = 0; i < 4; i++)   /* the third fails when it runs, the fourth does not run */
        assert_int_equal(EVP_EncryptUpdate(ctx, dout + 1024 * i, &outl, din + 1024 * i, 1024), 1);
    stream_hold(s, 0);
    evp_stream_sync(s);
    assert_memory_not_equal(dout + 1024, din, 16);   /* the second ran */
    for (int i = 3 * 1024; i < 4096; i++)
        assert_int_equal(dout[i], 0);                 /* the fourth did not */
    expect_error(EVP_EncryptUpdate(ctx, dout, &outl, din, 16), "an update after a failure",
                 "device memory has no CPU fallback");
    expect_error(EVP_EncryptFinal_ex(ctx, fin, &outl), "a Final after a failure",
                 "device memory has no CPU fallback");
    (void)tag;
    assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);   /* the message starts at its data */
    expect_error(EVP_EncryptUpdate(ctx, dout, &outl, din, 16), "a new device-mode message after a failure",
                 "device memory needs a usable GPU");
    EVP_CIPHER_CTX_free(ctx);
    evp_stream_free(s);
    evp_dm_free(din);
    evp_dm_free(dout);
#endif
}

/* ---- synchronous device mode on many threads (GPUPROV_TEST_GATHER_OPS) ---- */

#define NTHREADS 16
#define THREAD_MSGS 8
#define THREAD_LEN (16 * 1024)

typedef struct worker {
    pthread_t th;
    int idx;
    const EVP_CIPHER *cipher;    /* fetched before the threads start (evp_cipher's cache is not
                                  * thread-safe: two threads fetching at once leaked one) */
    unsigned char *din, *dout, *plain, *ref;
    unsigned char key[32], iv[16], aad[13], tag[THREAD_MSGS][16], rtag[16];
    int ok;
} worker;

/* One thread's messages as a TLS record would be, in device mode, synchronously: IV, AAD, one
 * update, Final, tag. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    int outl;

    p[0] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, "device", 0);
    w->ok = ctx != NULL && EVP_EncryptInit_ex2(ctx, w->cipher, w->key, NULL, p) == 1;
    for (int m = 0; m < THREAD_MSGS && w->ok; m++) {
        unsigned char fin[16];

        w->ok = EVP_EncryptInit_ex2(ctx, NULL, NULL, w->iv, NULL) == 1
                && EVP_EncryptUpdate(ctx, NULL, &outl, w->aad, sizeof(w->aad)) == 1
                && EVP_EncryptUpdate(ctx, w->dout, &outl, w->din, THREAD_LEN) == 1
                && EVP_EncryptFinal_ex(ctx, fin, &outl) == 1 && evp_get_tag(ctx, w->tag[m], 16) == 1;
    }
    EVP_CIPHER_CTX_free(ctx);
    return NULL;
}

static uint64_t stat_of(const char *name)
{
    uint64_t v = 0;
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_uint64(name, &v);
    assert_int_equal(OSSL_PROVIDER_get_params(g_env->gpuprov, p), 1);
    return v;
}

/*
 * Sixteen threads, each its own context and buffers, 16 KiB device-mode messages: every output and
 * tag is the default provider's, and the queue combined their calls (with the gather hook, a batch
 * waits for as many requests as there are threads, or the flush_us timer: no timing decides
 * whether batching happens, only how often).
 */
static void test_threads(void **state)
{
    static worker w[NTHREADS];
    const int idx = evp_cipher_index("AES-256-GCM");
    uint64_t ops0 = stat_of("gpuprov-stats-ops"), batches0 = stat_of("gpuprov-stats-batches"), ops, batches;
    (void)state;

    for (int i = 0; i < NTHREADS; i++) {
        w[i].idx = idx;
        w[i].cipher = evp_cipher(g_env, idx, 1);
        gptest_rand_bytes(w[i].key, sizeof(w[i].key));
        gptest_rand_bytes(w[i].iv, sizeof(w[i].iv));
        gptest_rand_bytes(w[i].aad, sizeof(w[i].aad));
        w[i].plain = malloc(THREAD_LEN);
        w[i].ref = malloc(THREAD_LEN + 16);
        assert_true(w[i].plain != NULL && w[i].ref != NULL);
        gptest_rand_bytes(w[i].plain, THREAD_LEN);
        w[i].din = evp_dm_alloc(THREAD_LEN, data_gpu);
        w[i].dout = evp_dm_alloc(THREAD_LEN, data_gpu);
        evp_dm_put(w[i].din, w[i].plain, THREAD_LEN);
        reference(idx, 1, w[i].key, w[i].iv, w[i].aad, sizeof(w[i].aad), w[i].plain, THREAD_LEN, w[i].ref, w[i].rtag);
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(w[i].th, NULL);
    ops = stat_of("gpuprov-stats-ops") - ops0;
    batches = stat_of("gpuprov-stats-batches") - batches0;
    for (int i = 0; i < NTHREADS; i++) {
        assert_true(w[i].ok);
        assert_dm_equal(w[i].dout, w[i].ref, THREAD_LEN);
        for (int m = 0; m < THREAD_MSGS; m++)
            assert_memory_equal(w[i].tag[m], w[i].rtag, 16);
        evp_dm_free(w[i].din);
        evp_dm_free(w[i].dout);
        free(w[i].plain);
        free(w[i].ref);
    }
    print_message("%d threads x %d device-mode messages: %llu requests in %llu batches\n", NTHREADS, THREAD_MSGS,
                  (unsigned long long)ops, (unsigned long long)batches);
    assert_true(ops >= (uint64_t)NTHREADS * THREAD_MSGS);
    assert_true(batches < ops);
}

static int group_setup(void **state)
{
    int rc = evp_group_setup(state);

    g_env = *state;
    data_gpu = evp_dm_data_gpu();
    if (rc == 0) {
        evp_dm_find();
        stream_extras_find();
    }
    return rc;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_ordering),
        cmocka_unit_test(test_final_waits),
        cmocka_unit_test(test_lifetimes),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_unaligned),
    };
    const struct CMUnitTest thread_tests[] = { cmocka_unit_test(test_threads) };
    const struct CMUnitTest failure_tests[] = { cmocka_unit_test(test_async_failure) };

    if (evp_under_default()) {
        fprintf(stderr, "stream: device mode is gpuprov's own; nothing to check on the default provider\n");
        return 77;
    }
    if (argc > 1 && strcmp(argv[1], "threads") == 0)
        return cmocka_run_group_tests(thread_tests, group_setup, evp_group_teardown);
    if (argc > 1 && strcmp(argv[1], "failure") == 0)
        return cmocka_run_group_tests(failure_tests, group_setup, evp_group_teardown);
    return cmocka_run_group_tests(tests, group_setup, evp_group_teardown);
}
