/* SPDX-License-Identifier: Apache-2.0 */
/* Device mode (cipher param gpuprov-memory = "device") through EVP: vectors, differential, bad input. */
#include <dlfcn.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <openssl/async.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/provider.h>
#ifdef DEVMEM_TEST_CUDA
# include <cuda.h>
# include <cudaTypedefs.h>
# include <cuda_runtime_api.h>
#endif

#include "evp_common.h"
#include "evp_devmem.h"
#include "kat_file.h"

/*
 * Every data update's in and out are "device memory": cudaMalloc'd (the cuda build of this test,
 * suite gpu) or, in CI, the test module's stand-in allocations (GPUPROV_TEST_HOST_DEVMEM,
 * batching/exec_host.c), which only the host executor reads. AAD, keys, IVs and tags are host
 * memory, as in the mode's contract. Results are compared with the default provider's on host
 * copies of the same bytes. The buffers live on one GPU, data_gpu (GPTEST_DEVMEM_GPU, else the GPU
 * that knob device names, else 0): tests/gpu/multi.sh puts them on the host's last GPU.
 */

#define MEMORY_PARAM "gpuprov-memory"
#define GUARD 64          /* bytes either side of every device output, which must stay untouched */
#define GUARD_BYTE 0xA5
#ifdef DEVMEM_TEST_CUDA
# define SMALL_TOTAL ((size_t)2 << 20)   /* the driver's allocation granule */
#else
# define SMALL_TOTAL ((size_t)256)
#endif

static gptest_env *g_env;
static kat_vec *g_vecs;
static size_t g_nvecs;
static int data_gpu;      /* the GPU of the test's device buffers (group_setup) */

/* ---- device memory for the test: evp_devmem.h ---- */

/* A GPU other than data_gpu, and does gpuprov use it? The stand-in uses GPUs 0 and 1; the cuda
 * executor one GPU, or every GPU with knob device = all. */
static int other_gpu(void)
{
    return data_gpu == 0 ? 1 : 0;
}

static int other_gpu_open(void)
{
#ifdef DEVMEM_TEST_CUDA
    const char *d = getenv("GPUPROV_DEVICE");

    return d != NULL && strcmp(d, "all") == 0;
#else
    return 1;
#endif
}

/* A device output of `len` bytes at `off` past GUARD guard bytes; dev_out_check asserts the guards
 * held. */
typedef struct dev_buf {
    unsigned char *base, *p;
    size_t len, total;
} dev_buf;

static void dev_buf_new(dev_buf *b, size_t len, size_t off, int gpu)
{
    b->total = GUARD + off + len + GUARD;
    b->base = evp_dm_alloc(b->total, gpu);
    b->p = b->base + GUARD + off;
    b->len = len;
    evp_dm_fill(b->base, GUARD_BYTE, b->total);
}

/* The whole allocation back on the host; asserts nothing was written outside [p, p + len). */
static unsigned char *dev_buf_take(const dev_buf *b, const char *what)
{
    unsigned char *h = malloc(b->total);
    size_t lo = (size_t)(b->p - b->base);

    assert_non_null(h);
    evp_dm_get(h, b->base, b->total);
    for (size_t i = 0; i < b->total; i++)
        if ((i < lo || i >= lo + b->len) && h[i] != GUARD_BYTE)
            fail_msg("%s: byte %zd outside the output was written", what, (ptrdiff_t)i - (ptrdiff_t)lo);
    return h;
}

static void dev_buf_free(dev_buf *b)
{
    evp_dm_free(b->base);
}

/* ---- EVP shorthands ---- */

static int set_memory(EVP_CIPHER_CTX *ctx, const char *mode)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, (char *)mode, 0);
    return EVP_CIPHER_CTX_set_params(ctx, p);
}

static void assert_memory(EVP_CIPHER_CTX *ctx, const char *want)
{
    char got[16] = "";
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, got, sizeof(got));
    assert_int_equal(EVP_CIPHER_CTX_get_params(ctx, p), 1);
    assert_true(OSSL_PARAM_modified(p));
    assert_string_equal(got, want);
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

static int is_aead(int idx)
{
    return evp_ciphers[idx].kind == K_GCM || evp_ciphers[idx].kind == K_CCP;
}

/* Cut `left` bytes: whole, or a random piece that often lands on block edges. */
static size_t piece(size_t left, int whole)
{
    static const size_t edges[] = { 1, 15, 16, 17, 63, 64, 65, 2048, 2049, 4096 + 3 };
    size_t n;

    if (whole || left == 0)
        return left;
    n = gptest_rand_u64() % 2 ? edges[gptest_rand_range(0, 9)] : gptest_rand_range(1, left);
    return n < left ? n : left;
}

/* ---- the default provider's answer on host memory ---- */

static void reference(int idx, int enc, const unsigned char *key, const unsigned char *iv,
                      const unsigned char *aad, size_t aadlen, const unsigned char *in, size_t len,
                      unsigned char *out, unsigned char tag[16])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl = 0;

    assert_int_equal(EVP_CipherInit_ex2(ctx, evp_cipher(g_env, idx, 0), key, iv, enc, NULL), 1);
    if (aadlen > 0)
        assert_int_equal(EVP_CipherUpdate(ctx, NULL, &outl, aad, (int)aadlen), 1);
    if (len > 0)
        assert_int_equal(EVP_CipherUpdate(ctx, out, &outl, in, (int)len), 1);
    assert_int_equal(EVP_CipherFinal_ex(ctx, out + len, &outl), 1);
    if (is_aead(idx))
        assert_int_equal(evp_get_tag(ctx, tag, 16), 1);
    EVP_CIPHER_CTX_free(ctx);
}

/* ---- one message through device memory ---- */

typedef struct dev_run {
    int idx, enc;
    const unsigned char *key, *iv, *aad;
    size_t aadlen;
    const unsigned char *in;     /* host copy of the input */
    size_t len;
    size_t in_off, out_off;      /* offsets past the guard (0: the allocation's alignment) */
    int inplace, whole, dup_midway, reinit_iv;
    const unsigned char *tag_in; /* decrypt: expected tag, 16 bytes */
} dev_run;

/* Encrypt or decrypt r->in through device memory; the output comes back in out (host), the tag in
 * tag; returns the Final's result. */
static int dev_cipher(const dev_run *r, unsigned char *out, unsigned char tag[16])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    dev_buf in, outb;
    size_t done = 0;
    int outl = 0, ret;
    unsigned char *back;

    dev_buf_new(&in, r->len, r->inplace ? r->out_off : r->in_off, data_gpu);
    evp_dm_put(in.p, r->in, r->len);
    if (r->inplace)
        outb = in;
    else
        dev_buf_new(&outb, r->len, r->out_off, data_gpu);
    assert_int_equal(EVP_CipherInit_ex2(ctx, evp_cipher(g_env, r->idx, 1), r->key, NULL, r->enc, NULL), 1);
    if (r->reinit_iv) {
        /* A message in host mode first, then an IV-only re-init into device mode (key kept). */
        unsigned char junk[100] = { 0 }, junk_out[100];

        assert_int_equal(EVP_CipherInit_ex2(ctx, NULL, NULL, r->iv, r->enc, NULL), 1);
        assert_int_equal(EVP_CipherUpdate(ctx, junk_out, &outl, junk, (int)sizeof(junk)), 1);
        assert_int_equal(EVP_CipherInit_ex2(ctx, NULL, NULL, r->iv, r->enc, NULL), 1);
        assert_int_equal(set_memory(ctx, "device"), 1);
    } else {
        OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

        /* Device mode through the init's params, as a caller of EVP_CipherInit_ex2 may set it. */
        p[0] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, "device", 0);
        assert_int_equal(EVP_CipherInit_ex2(ctx, NULL, NULL, r->iv, r->enc, p), 1);
    }
    assert_memory(ctx, "device");
    if (r->aadlen > 0)   /* AAD is host memory */
        for (size_t a = 0, n; a < r->aadlen; a += n) {
            n = piece(r->aadlen - a, r->whole);
            assert_int_equal(EVP_CipherUpdate(ctx, NULL, &outl, r->aad + a, (int)n), 1);
        }
    if (!r->enc && is_aead(r->idx))
        assert_int_equal(evp_set_tag(ctx, r->tag_in, 16), 1);
    while (done < r->len) {
        size_t n = piece(r->len - done, r->whole);

        if (EVP_CipherUpdate(ctx, outb.p + done, &outl, in.p + done, (int)n) != 1) {
            gptest_errors_pending();
            fail_msg("device-mode update of %zu bytes at %zu failed", n, done);
        }
        assert_int_equal(outl, (int)n);
        done += n;
        if (r->dup_midway && done < r->len) {
            EVP_CIPHER_CTX *copy = EVP_CIPHER_CTX_new();

            assert_int_equal(EVP_CIPHER_CTX_copy(copy, ctx), 1);
            EVP_CIPHER_CTX_free(ctx);   /* the copy keeps the mode and the message */
            ctx = copy;
            assert_memory(ctx, "device");
        }
    }
    ret = EVP_CipherFinal_ex(ctx, NULL, &outl);
    if (ret == 1 && r->enc && is_aead(r->idx))
        assert_int_equal(evp_get_tag(ctx, tag, 16), 1);
    ERR_clear_error();
    back = dev_buf_take(&outb, "device output");
    memcpy(out, outb.p - outb.base + back, r->len);
    free(back);
    if (!r->inplace)
        dev_buf_free(&outb);
    dev_buf_free(&in);
    EVP_CIPHER_CTX_free(ctx);
    return ret;
}

/* ---- known answers through device memory ---- */

static void test_vectors(void **state)
{
    (void)state;
    if (g_nvecs == 0)
        skip();
    for (size_t v = 0; v < g_nvecs; v++) {
        const kat_vec *k = &g_vecs[v];
        int idx = evp_cipher_index(k->cipher);
        unsigned char *out = malloc(k->pt.len + k->ct.len + 1), tag[16];

        if (k->iv.len != evp_ciphers[idx].ivlen || (k->tag.present && k->tag.len != 16)) {
            free(out);
            continue;   /* other IV lengths and short tags: test_kat covers them on host memory */
        }
        for (int round = 0; round < 2; round++) {
            dev_run r = { .idx = idx, .key = k->key.p, .iv = k->iv.p, .aad = k->aad.p, .aadlen = k->aad.len,
                          .whole = round == 0, .inplace = round == 1, .out_off = round == 1 ? 3 : 0 };

            if (!k->expect_tag_mismatch) {
                r.enc = 1;
                r.in = k->pt.p;
                r.len = k->pt.len;
                assert_int_equal(dev_cipher(&r, out, tag), 1);
                if (memcmp(out, k->ct.p, k->ct.len) != 0)
                    fail_msg("%s (%s): device-mode ciphertext differs", k->name, k->where);
                if (k->tag.present && memcmp(tag, k->tag.p, 16) != 0)
                    fail_msg("%s (%s): device-mode tag differs", k->name, k->where);
            }
            r.enc = 0;
            r.in = k->ct.p;
            r.len = k->ct.len;
            r.tag_in = k->tag.p;
            if (dev_cipher(&r, out, tag) != !k->expect_tag_mismatch)
                fail_msg("%s (%s): device-mode decryption's verdict is wrong", k->name, k->where);
            if (!k->expect_tag_mismatch && memcmp(out, k->pt.p, k->pt.len) != 0)
                fail_msg("%s (%s): device-mode plaintext differs", k->name, k->where);
        }
        free(out);
    }
}

/* ---- differential against the default provider ---- */

static void diff_one(int idx, size_t len, int round)
{
    unsigned char key[32], iv[16], aad[40], tag[16], ref_tag[16] = { 0 }, dec_tag[16];
    unsigned char *pt = malloc(len + 1), *ct = malloc(len + 1), *ref = malloc(len + 1), *back = malloc(len + 1);
    static const size_t offs[] = { 0, 16, 1, 37 };
    size_t aadlen = is_aead(idx) ? gptest_rand_range(0, sizeof(aad)) : 0;
    dev_run r = { .idx = idx, .key = key, .iv = iv, .aad = aad, .aadlen = aadlen, .in = pt, .len = len,
                  .in_off = offs[round % 4], .out_off = offs[(round / 4) % 4], .inplace = round % 3 == 0,
                  .whole = round % 5 == 0, .dup_midway = round % 7 == 3, .reinit_iv = round % 6 == 1 };

    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(pt, len);
    reference(idx, 1, key, iv, aad, aadlen, pt, len, ref, ref_tag);
    r.enc = 1;
    assert_int_equal(dev_cipher(&r, ct, tag), 1);
    if (memcmp(ct, ref, len) != 0 || (is_aead(idx) && memcmp(tag, ref_tag, 16) != 0))
        fail_msg("%s, %zu bytes, round %d: device mode differs from the default provider", evp_ciphers[idx].name,
                 len, round);
    r.enc = 0;
    r.in = ct;
    r.tag_in = ref_tag;
    assert_int_equal(dev_cipher(&r, back, dec_tag), 1);
    if (memcmp(back, pt, len) != 0)
        fail_msg("%s, %zu bytes, round %d: device-mode decryption differs", evp_ciphers[idx].name, len, round);
    if (is_aead(idx)) {
        /* A wrong tag fails the Final, as on host memory. */
        unsigned char bad[16];

        memcpy(bad, ref_tag, 16);
        bad[len % 16] ^= 1;
        r.tag_in = bad;
        assert_int_equal(dev_cipher(&r, back, dec_tag), 0);
    }
    free(pt);
    free(ct);
    free(ref);
    free(back);
}

/* GPTEST_DEVMEM_QUICK (tests/gpu/run.sh's compute-sanitizer runs): the fixed lengths only, and a
 * smaller large update. */
static int quick(void)
{
    return getenv("GPTEST_DEVMEM_QUICK") != NULL;
}

static void test_diff(void **state)
{
    static const size_t lens[] = { 1, 15, 16, 17, 63, 64, 65, 255, 2048, 2049, 4096 + 65, 65536 + 17 };

    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++)
        for (int round = 0; round < (quick() ? 12 : 24); round++)
            diff_one(idx, round < 12 ? lens[round] : gptest_rand_range(1, 300000), round);
}

/* One large update over a whole allocation, as the mode's users give it (bench/devmem_bench takes
 * 1-256 MiB ones). */
static void test_large(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++)
        diff_one(idx, quick() ? (size_t)256 << 10 : (size_t)4 << 20, 5);
}

/* ---- params ---- */

static int lists_memory(const OSSL_PARAM *list)
{
    return OSSL_PARAM_locate_const(list, MEMORY_PARAM) != NULL;
}

static void test_params(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        EVP_CIPHER *c = evp_cipher(g_env, idx, 1);
        EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
        OSSL_PARAM bad[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
        int num = 1;

        assert_true(lists_memory(EVP_CIPHER_settable_ctx_params(c)));
        assert_true(lists_memory(EVP_CIPHER_gettable_ctx_params(c)));
        assert_int_equal(EVP_CipherInit_ex2(ctx, c, NULL, NULL, 1, NULL), 1);
        assert_memory(ctx, "host");
        assert_int_equal(set_memory(ctx, "device"), 1);
        assert_memory(ctx, "device");
        expect_error(set_memory(ctx, "gpu"), "an unknown value", "must be \"host\" or \"device\"");
        bad[0] = OSSL_PARAM_construct_utf8_string(MEMORY_PARAM, "devicex", 7);   /* the word and more */
        expect_error(EVP_CIPHER_CTX_set_params(ctx, bad), "the word with a byte more", "must be \"host\" or \"device\"");
        bad[0] = OSSL_PARAM_construct_int(MEMORY_PARAM, &num);
        expect_error(EVP_CIPHER_CTX_set_params(ctx, bad), "an integer value", "must be \"host\" or \"device\"");
        assert_memory(ctx, "device");
        assert_int_equal(set_memory(ctx, "host"), 1);
        assert_memory(ctx, "host");
        EVP_CIPHER_CTX_free(ctx);
    }
}

/* ---- bad input ---- */

/* A context of cipher idx in device mode with key and IV set. */
static EVP_CIPHER_CTX *device_ctx(int idx, int enc)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    unsigned char key[32] = { 1 }, iv[16] = { 2 };

    assert_int_equal(EVP_CipherInit_ex2(ctx, evp_cipher(g_env, idx, 1), key, iv, enc, NULL), 1);
    assert_int_equal(set_memory(ctx, "device"), 1);
    return ctx;
}

static void test_bad_pointers(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        EVP_CIPHER_CTX *ctx = device_ctx(idx, 1);
        unsigned char host_in[256] = { 0 }, host_out[256 + 2 * GUARD];
        unsigned char *freed = evp_dm_alloc(256, data_gpu);
        dev_buf in, out, small;
        int outl = 0;

        /* `small` with its guards is a whole allocation granule (cudaMalloc rounds small ones up:
         * the driver reports the rounded size); in and out are larger. */
        dev_buf_new(&small, SMALL_TOTAL - 2 * GUARD, 0, data_gpu);
        dev_buf_new(&in, SMALL_TOTAL, 0, data_gpu);
        dev_buf_new(&out, SMALL_TOTAL, 0, data_gpu);
        memset(host_out, GUARD_BYTE, sizeof(host_out));
        expect_error(EVP_EncryptUpdate(ctx, out.p, &outl, host_in, 256), "a host input", "not CUDA device");
        expect_error(EVP_EncryptUpdate(ctx, host_out + GUARD, &outl, in.p, 256), "a host output", "not CUDA device");
        for (size_t i = 0; i < sizeof(host_out); i++)
            assert_int_equal(host_out[i], GUARD_BYTE);
        evp_dm_free(freed);
        expect_error(EVP_EncryptUpdate(ctx, out.p, &outl, freed, 256), "a freed input", "not CUDA device");
        expect_error(EVP_EncryptUpdate(ctx, freed, &outl, in.p, 256), "a freed output", "not CUDA device");
        /* The allocation holds SMALL_TOTAL bytes from small.base: one byte more is past it. */
        expect_error(EVP_EncryptUpdate(ctx, out.p, &outl, small.p, (int)(small.len + GUARD + 1)),
                     "an input past its end", "past the end");
        expect_error(EVP_EncryptUpdate(ctx, small.p, &outl, in.p, (int)(small.len + GUARD + 1)),
                     "an output past its end", "past the end");
        free(dev_buf_take(&small, "an output past its allocation's end"));
        if (evp_dm_gpus() >= 2) {
            dev_buf other;

            dev_buf_new(&other, 256, 0, other_gpu());
            expect_error(EVP_EncryptUpdate(ctx, other.p, &outl, in.p, 256), "in and out on two GPUs",
                         other_gpu_open() ? "different GPUs" : "does not use");
            free(dev_buf_take(&other, "an output on another GPU than the input"));
            dev_buf_free(&other);
        }
#ifndef DEVMEM_TEST_CUDA
        {
            dev_buf closed;   /* the stand-in's GPU 2 is one gpuprov does not use */

            dev_buf_new(&closed, 256, 0, 2);
            expect_error(EVP_EncryptUpdate(ctx, closed.p, &outl, closed.p, 256), "a GPU not in use", "does not use");
            dev_buf_free(&closed);
        }
#endif
        free(dev_buf_take(&out, "an output after refused updates"));
        /* After every refusal the message is where it was: the first real update starts it. */
        {
            unsigned char pt[256] = { 0 }, ref[256], tag[16], dtag[16], got[256], key[32] = { 1 }, iv[16] = { 2 };

            evp_dm_put(in.p, pt, sizeof(pt));
            assert_int_equal(EVP_EncryptUpdate(ctx, out.p, &outl, in.p, 256), 1);
            assert_int_equal(EVP_EncryptFinal_ex(ctx, NULL, &outl), 1);
            reference(idx, 1, key, iv, NULL, 0, pt, sizeof(pt), ref, tag);
            evp_dm_get(got, out.p, sizeof(got));
            assert_memory_equal(got, ref, sizeof(got));
            if (is_aead(idx)) {
                assert_int_equal(evp_get_tag(ctx, dtag, 16), 1);
                assert_memory_equal(dtag, tag, 16);
            }
        }
        dev_buf_free(&in);
        dev_buf_free(&out);
        dev_buf_free(&small);
        EVP_CIPHER_CTX_free(ctx);
    }
}

/* The mode changes between messages only; a refused change leaves the message as it was. */
static void test_mid_message(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        EVP_CIPHER_CTX *ctx = device_ctx(idx, 1);
        unsigned char pt[300], ref[300], got[300], tag[16], dtag[16], key[32] = { 1 }, iv[16] = { 2 }, aad[5] = { 7 };
        dev_buf in, out;
        int outl = 0;

        gptest_rand_bytes(pt, sizeof(pt));
        dev_buf_new(&in, sizeof(pt), 0, data_gpu);
        dev_buf_new(&out, sizeof(pt), 0, data_gpu);
        evp_dm_put(in.p, pt, sizeof(pt));
        if (is_aead(idx)) {
            /* AAD is host memory: a device pointer is refused, not read. */
            expect_error(EVP_EncryptUpdate(ctx, NULL, &outl, in.p, 5), "AAD in device memory", "AAD must be host memory");
            assert_int_equal(EVP_EncryptUpdate(ctx, NULL, &outl, aad, sizeof(aad)), 1);
            expect_error(set_memory(ctx, "host"), "a change after AAD", "middle of a message");
        }
        assert_int_equal(EVP_EncryptUpdate(ctx, out.p, &outl, in.p, 100), 1);
        expect_error(set_memory(ctx, "host"), "a change after data", "middle of a message");
        assert_memory(ctx, "device");
        assert_int_equal(EVP_EncryptUpdate(ctx, out.p + 100, &outl, in.p + 100, 200), 1);
        assert_int_equal(EVP_EncryptFinal_ex(ctx, NULL, &outl), 1);
        reference(idx, 1, key, iv, aad, is_aead(idx) ? sizeof(aad) : 0, pt, sizeof(pt), ref, tag);
        evp_dm_get(got, out.p, sizeof(got));
        assert_memory_equal(got, ref, sizeof(got));
        if (is_aead(idx)) {
            assert_int_equal(evp_get_tag(ctx, dtag, 16), 1);
            assert_memory_equal(dtag, tag, 16);
        }
        /* Between messages: back to host memory, and the next message runs there. */
        assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
        assert_int_equal(set_memory(ctx, "host"), 1);
        if (is_aead(idx))
            assert_int_equal(EVP_EncryptUpdate(ctx, NULL, &outl, aad, sizeof(aad)), 1);
        assert_int_equal(EVP_EncryptUpdate(ctx, got, &outl, pt, (int)sizeof(pt)), 1);
        assert_memory_equal(got, ref, sizeof(got));
        dev_buf_free(&in);
        dev_buf_free(&out);
        EVP_CIPHER_CTX_free(ctx);
    }
}

/*
 * Re-inits keep the mode: two messages on one context with an IV-only re-init between them, and
 * (AES-CTR) a re-init without an IV mid-stream, which continues at the next whole block; each
 * as the default provider does the same calls on host copies.
 */
static void test_reinit(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        unsigned char key[32], iv[16], iv2[16], pt[700], got[700], ref[700], tag[16], rtag[16];
        EVP_CIPHER_CTX *dctx = device_ctx(idx, 1), *rctx = EVP_CIPHER_CTX_new();
        const int stream = !is_aead(idx);
        /* The re-init without an IV for AES-CTR only: ChaCha20's differs from the default
         * provider's on host memory too (OpenSSL 3.0.19 keeps the partial block's keystream; gpuprov
         * moves to the next block), a matter of the host path, not of device mode. */
        const int noiv_reinit = evp_ciphers[idx].kind == K_CTR;
        dev_buf in, out;
        int outl = 0;

        gptest_rand_bytes(pt, sizeof(pt));
        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        gptest_rand_bytes(iv2, sizeof(iv2));
        dev_buf_new(&in, sizeof(pt), 0, data_gpu);
        dev_buf_new(&out, sizeof(pt), 0, data_gpu);
        evp_dm_put(in.p, pt, sizeof(pt));
        assert_int_equal(EVP_EncryptInit_ex2(dctx, NULL, key, iv, NULL), 1);
        assert_int_equal(EVP_EncryptInit_ex2(rctx, evp_cipher(g_env, idx, 0), key, iv, NULL), 1);
        for (int msg = 0; msg < 2; msg++) {
            if (msg == 1) {   /* IV-only re-init: the key and the mode stay */
                assert_int_equal(EVP_EncryptInit_ex2(dctx, NULL, NULL, iv2, NULL), 1);
                assert_int_equal(EVP_EncryptInit_ex2(rctx, NULL, NULL, iv2, NULL), 1);
                assert_memory(dctx, "device");
            }
            assert_int_equal(EVP_EncryptUpdate(dctx, out.p, &outl, in.p, 300), 1);
            assert_int_equal(EVP_EncryptUpdate(rctx, ref, &outl, pt, 300), 1);
            if (noiv_reinit) {   /* a re-init without an IV: on at the next whole block */
                assert_int_equal(EVP_EncryptInit_ex2(dctx, NULL, NULL, NULL, NULL), 1);
                assert_int_equal(EVP_EncryptInit_ex2(rctx, NULL, NULL, NULL, NULL), 1);
            }
            assert_int_equal(EVP_EncryptUpdate(dctx, out.p + 300, &outl, in.p + 300, 400), 1);
            assert_int_equal(EVP_EncryptUpdate(rctx, ref + 300, &outl, pt + 300, 400), 1);
            assert_int_equal(EVP_EncryptFinal_ex(dctx, got, &outl), 1);
            assert_int_equal(EVP_EncryptFinal_ex(rctx, ref, &outl), 1);
            evp_dm_get(got, out.p, sizeof(got));
            if (memcmp(got, ref, sizeof(got)) != 0)
                fail_msg("%s, message %d: device mode differs from the default provider", evp_ciphers[idx].name, msg);
            if (!stream) {
                assert_int_equal(evp_get_tag(dctx, tag, 16), 1);
                assert_int_equal(evp_get_tag(rctx, rtag, 16), 1);
                assert_memory_equal(tag, rtag, 16);
            }
        }
        dev_buf_free(&in);
        dev_buf_free(&out);
        EVP_CIPHER_CTX_free(dctx);
        EVP_CIPHER_CTX_free(rctx);
    }
}

/*
 * Inside async jobs (ASYNC_JOB): device-mode updates pause their jobs like any other, and are never
 * staged (batching/stage.h: an async job's data is copied by the host into pinned memory, which
 * device memory must never be). The run sets the staging hooks and stats (tests/evp/meson.build): a
 * control round on host memory must stage, the device-mode round must not.
 */
#define ASYNC_JOBS 8
#define ASYNC_LEN 16384

typedef struct async_arg {
    int idx;
    const unsigned char *in;     /* device memory, or host memory for the control round */
    unsigned char *out;
    int device, ok;
} async_arg;

static int async_main(void *varg)
{
    async_arg *a = *(async_arg **)varg;
    unsigned char key[32] = { 3 }, iv[16] = { 4 }, fin[16];
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl;

    a->ok = EVP_EncryptInit_ex2(ctx, evp_cipher(g_env, a->idx, 1), key, iv, NULL) == 1
            && (!a->device || set_memory(ctx, "device") == 1)
            && EVP_EncryptUpdate(ctx, a->out, &outl, a->in, ASYNC_LEN) == 1 && EVP_EncryptFinal_ex(ctx, fin, &outl) == 1;
    EVP_CIPHER_CTX_free(ctx);
    return 1;
}

static uint64_t stats_staged(void)
{
    uint64_t v = 0;
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_uint64("gpuprov-stats-staged", &v);
    assert_int_equal(OSSL_PROVIDER_get_params(g_env->gpuprov, p), 1);
    return v;
}

/* Run ASYNC_JOBS jobs to the end, resuming each when its wait fd is readable. */
static void async_round(async_arg *args)
{
    ASYNC_JOB *jobs[ASYNC_JOBS] = { 0 };
    ASYNC_WAIT_CTX *w[ASYNC_JOBS];
    int left = 0, ret;

    for (int i = 0; i < ASYNC_JOBS; i++) {
        async_arg *a = &args[i];

        assert_non_null(w[i] = ASYNC_WAIT_CTX_new());
        left += ASYNC_start_job(&jobs[i], w[i], &ret, async_main, &a, sizeof(a)) == ASYNC_PAUSE;
    }
    while (left > 0) {
        for (int i = 0; i < ASYNC_JOBS; i++) {
            OSSL_ASYNC_FD fd;
            size_t num = 0;
            struct pollfd pfd;
            async_arg *a = &args[i];

            if (jobs[i] == NULL || !ASYNC_WAIT_CTX_get_all_fds(w[i], NULL, &num) || num != 1)
                continue;
            ASYNC_WAIT_CTX_get_all_fds(w[i], &fd, &num);
            pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
            if (poll(&pfd, 1, 30000) != 1)
                fail_msg("async job %d: no wake-up in 30 s", i);
            if (ASYNC_start_job(&jobs[i], w[i], &ret, async_main, &a, sizeof(a)) == ASYNC_FINISH) {
                jobs[i] = NULL;
                left--;
            }
        }
    }
    for (int i = 0; i < ASYNC_JOBS; i++)
        ASYNC_WAIT_CTX_free(w[i]);
}

static void test_async_jobs(void **state)
{
    unsigned char pt[ASYNC_LEN], ref[ASYNC_LEN], got[ASYNC_LEN], tag[16], key[32] = { 3 }, iv[16] = { 4 };
    unsigned char *host_out = malloc((size_t)ASYNC_JOBS * ASYNC_LEN);
    int idx = evp_cipher_index("ChaCha20-Poly1305");
    async_arg args[ASYNC_JOBS];
    dev_buf in, out;
    uint64_t before;

    (void)state;
    if (getenv("GPUPROV_STATS") == NULL || getenv("GPUPROV_TEST_STAGE_ONE_THREAD") == NULL)
        skip();   /* the counter and the staging of one thread's jobs are off */
    gptest_rand_bytes(pt, sizeof(pt));
    reference(idx, 1, key, iv, NULL, 0, pt, sizeof(pt), ref, tag);
    dev_buf_new(&in, ASYNC_LEN, 0, data_gpu);
    dev_buf_new(&out, (size_t)ASYNC_JOBS * ASYNC_LEN, 0, data_gpu);
    evp_dm_put(in.p, pt, sizeof(pt));
    for (int round = 0; round < 2; round++) {   /* 0: the control, host memory; 1: device memory */
        for (int i = 0; i < ASYNC_JOBS; i++)
            args[i] = (async_arg){ .idx = idx, .in = round ? in.p : pt,
                                   .out = round ? out.p + (size_t)i * ASYNC_LEN : host_out + (size_t)i * ASYNC_LEN,
                                   .device = round };
        before = stats_staged();
        async_round(args);
        for (int i = 0; i < ASYNC_JOBS; i++) {
            assert_true(args[i].ok);
            if (round)
                evp_dm_get(got, out.p + (size_t)i * ASYNC_LEN, ASYNC_LEN);
            else
                memcpy(got, host_out + (size_t)i * ASYNC_LEN, ASYNC_LEN);
            assert_memory_equal(got, ref, ASYNC_LEN);
        }
        if (round == 0 && stats_staged() == before)
            fail_msg("the control round staged nothing: this run cannot tell whether device mode stages");
        if (round == 1 && stats_staged() != before)
            fail_msg("device-mode updates were staged: the host copied device memory");
    }
    free(dev_buf_take(&out, "the async jobs' outputs"));
    dev_buf_free(&in);
    dev_buf_free(&out);
    free(host_out);
}

/* TLS 1.2 record mode reads and writes the record's buffer on the host: not in device mode. */
static void test_tls_refused(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        unsigned char hdr[13] = { 0, 0, 0, 0, 0, 0, 0, 1, 23, 3, 3, 0, 40 }, fixed[12] = { 3 };
        size_t fixed_len = evp_ciphers[idx].kind == K_GCM ? 4 : 12;
        OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
        EVP_CIPHER_CTX *ctx;

        if (!is_aead(idx))
            continue;
        ctx = device_ctx(idx, 1);
        p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_AAD, hdr, sizeof(hdr));
        expect_error(EVP_CIPHER_CTX_set_params(ctx, p), "TLS1_AAD in device mode", "tls record mode");
        p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, fixed_len);
        expect_error(EVP_CIPHER_CTX_set_params(ctx, p), "TLS1_IV_FIXED in device mode", "tls record mode");
        EVP_CIPHER_CTX_free(ctx);
        /* Record mode first, then device mode: refused too. */
        ctx = EVP_CIPHER_CTX_new();
        {
            unsigned char key[32] = { 1 };

            assert_int_equal(EVP_CipherInit_ex2(ctx, evp_cipher(g_env, idx, 1), key, NULL, 1, NULL), 1);
        }
        assert_int_equal(EVP_CIPHER_CTX_set_params(ctx, p), 1);
        expect_error(set_memory(ctx, "device"), "device mode in TLS record mode", "tls record mode");
        EVP_CIPHER_CTX_free(ctx);
    }
}

/* "device" where no executor takes device memory: a second library context whose gpuprov runs
 * with backend=cpu and without the stand-in (knobs are read when the provider loads). */
static void test_no_gpu(void **state)
{
    OSSL_LIB_CTX *lc = OSSL_LIB_CTX_new();
    const char *dir = getenv("GPTEST_MODULE_DIR");
    char *saved_backend = getenv("GPUPROV_BACKEND") ? strdup(getenv("GPUPROV_BACKEND")) : NULL;
    char *saved_standin = getenv("GPUPROV_TEST_HOST_DEVMEM") ? strdup(getenv("GPUPROV_TEST_HOST_DEVMEM")) : NULL;
    OSSL_PROVIDER *gp, *df;
    EVP_CIPHER *c;
    EVP_CIPHER_CTX *ctx;
    unsigned char key[32] = { 0 };

    (void)state;
    setenv("GPUPROV_BACKEND", "cpu", 1);
    unsetenv("GPUPROV_TEST_HOST_DEVMEM");
    assert_non_null(lc);
    if (dir != NULL)
        assert_int_equal(OSSL_PROVIDER_set_default_search_path(lc, dir), 1);
    df = OSSL_PROVIDER_load(lc, "default");
    gp = OSSL_PROVIDER_load(lc, "gpuprov");
    assert_non_null(gp);
    c = EVP_CIPHER_fetch(lc, "AES-256-GCM", "provider=gpuprov");
    assert_non_null(c);
    ctx = EVP_CIPHER_CTX_new();
    assert_int_equal(EVP_EncryptInit_ex2(ctx, c, key, key, NULL), 1);
    expect_error(set_memory(ctx, "device"), "device mode with backend=cpu", "needs a usable GPU");
    assert_memory(ctx, "host");
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    OSSL_PROVIDER_unload(gp);
    OSSL_PROVIDER_unload(df);
    OSSL_LIB_CTX_free(lc);
    if (saved_backend != NULL)
        setenv("GPUPROV_BACKEND", saved_backend, 1);
    else
        unsetenv("GPUPROV_BACKEND");
    if (saved_standin != NULL)
        setenv("GPUPROV_TEST_HOST_DEVMEM", saved_standin, 1);
    free(saved_backend);
    free(saved_standin);
}

/*
 * A GPU failure in the middle (GPUPROV_TEST_CUDA_FAULT_AFTER, the cuda build's fault run): the
 * failing call fails cleanly with the mode's reason (no CPU fallback exists for device memory),
 * its output is untouched, and the provider keeps serving host memory with the default's results.
 */
static void test_gpu_failure(void **state)
{
    unsigned char key[32] = { 5 }, iv[16] = { 6 }, pt[4096], ref[4096], got[4096], tag[16];
    int idx = evp_cipher_index("AES-256-GCM"), failed = 0, outl = 0;
    EVP_CIPHER_CTX *ctx;
    dev_buf in, out;

    (void)state;
    if (getenv("GPUPROV_TEST_CUDA_FAULT_AFTER") == NULL)
        skip();
    gptest_rand_bytes(pt, sizeof(pt));
    dev_buf_new(&in, sizeof(pt), 0, data_gpu);
    evp_dm_put(in.p, pt, sizeof(pt));
    for (int i = 0; i < 64 && !failed; i++) {
        ctx = device_ctx(idx, 1);
        dev_buf_new(&out, sizeof(pt), 0, data_gpu);
        if (EVP_EncryptUpdate(ctx, out.p, &outl, in.p, (int)sizeof(pt)) != 1) {
            expect_error(0, "a device-mode update when the GPU fails", "no CPU fallback");
            free(dev_buf_take(&out, "the failed update's output"));
            failed = 1;
        }
        dev_buf_free(&out);
        EVP_CIPHER_CTX_free(ctx);
    }
    assert_true(failed);
    /* Host memory still served (on the cpu executor now), byte for byte as the default. */
    ctx = EVP_CIPHER_CTX_new();
    assert_int_equal(EVP_EncryptInit_ex2(ctx, evp_cipher(g_env, idx, 1), key, iv, NULL), 1);
    assert_int_equal(EVP_EncryptUpdate(ctx, got, &outl, pt, (int)sizeof(pt)), 1);
    assert_int_equal(EVP_EncryptFinal_ex(ctx, got, &outl), 1);
    reference(idx, 1, key, iv, NULL, 0, pt, sizeof(pt), ref, tag);
    assert_memory_equal(got, ref, sizeof(got));
    /* A new device-mode message says why it cannot run. */
    assert_int_equal(EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL), 1);
    if (set_memory(ctx, "device") == 1)
        expect_error(EVP_EncryptUpdate(ctx, got, &outl, in.p, 16), "device mode after the GPU failed",
                     "needs a usable GPU");
    else
        expect_error(0, "device mode after the GPU failed", "needs a usable GPU");
    EVP_CIPHER_CTX_free(ctx);
    dev_buf_free(&in);
}

#ifdef DEVMEM_TEST_CUDA
/* Managed memory is device memory too; pinned host memory is not (the mode moves no bytes across
 * PCIe). */
static void test_cuda_kinds(void **state)
{
    unsigned char key[32] = { 9 }, iv[16] = { 8 }, pt[5000], ref[5000], tag[16];
    int idx = evp_cipher_index("ChaCha20-Poly1305"), outl = 0;
    unsigned char *managed = NULL, *pinned = NULL;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

    (void)state;
    gptest_rand_bytes(pt, sizeof(pt));
    evp_cuda_check(cudaSetDevice(data_gpu), "cudaSetDevice");   /* managed memory is the current GPU's */
    evp_cuda_check(cudaMallocManaged((void **)&managed, sizeof(pt), cudaMemAttachGlobal), "cudaMallocManaged");
    evp_cuda_check(cudaMallocHost((void **)&pinned, sizeof(pt)), "cudaMallocHost");
    memcpy(managed, pt, sizeof(pt));
    assert_int_equal(EVP_EncryptInit_ex2(ctx, evp_cipher(g_env, idx, 1), key, iv, NULL), 1);
    assert_int_equal(set_memory(ctx, "device"), 1);
    expect_error(EVP_EncryptUpdate(ctx, pinned, &outl, managed, (int)sizeof(pt)), "pinned host memory",
                 "not CUDA device");
    assert_int_equal(EVP_EncryptUpdate(ctx, managed, &outl, managed, (int)sizeof(pt)), 1);
    assert_int_equal(EVP_EncryptFinal_ex(ctx, NULL, &outl), 1);
    reference(idx, 1, key, iv, NULL, 0, pt, sizeof(pt), ref, tag);
    assert_memory_equal(managed, ref, sizeof(pt));
    cudaFree(managed);
    cudaFreeHost(pinned);
    EVP_CIPHER_CTX_free(ctx);
}

/* Ordering: the input written by the caller's asynchronous copy on the default stream, queued
 * behind a few milliseconds of other default-stream work, is what gets encrypted (gpuprov's streams
 * are non-blocking: it must wait for the default stream itself; README, "Data already on the GPU"). */
static void test_cuda_ordering(void **state)
{
    enum { N = 65536 };
    const size_t busy_bytes = (size_t)256 << 20;
    unsigned char key[16] = { 3 }, iv[16] = { 4 }, *pt = NULL, ref[N], got[N], tag[16];
    unsigned char *busy = evp_dm_alloc(busy_bytes, data_gpu), *in = evp_dm_alloc(N, data_gpu),
                  *out = evp_dm_alloc(N, data_gpu);
    int idx = evp_cipher_index("AES-128-CTR"), outl = 0;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

    (void)state;
    evp_cuda_check(cudaMallocHost((void **)&pt, N), "cudaMallocHost");   /* pinned: the copy is truly async */
    gptest_rand_bytes(pt, N);
    reference(idx, 1, key, iv, NULL, 0, pt, N, ref, tag);
    for (int round = 0; round < 4; round++) {
        evp_dm_fill(in, 0, N);
        for (int k = 0; k < 16; k++)
            evp_cuda_check(cudaMemsetAsync(busy, k, busy_bytes, 0), "cudaMemsetAsync");
        evp_cuda_check(cudaMemcpyAsync(in, pt, N, cudaMemcpyHostToDevice, 0), "cudaMemcpyAsync");
        assert_int_equal(EVP_EncryptInit_ex2(ctx, evp_cipher(g_env, idx, 1), key, iv, NULL), 1);
        assert_int_equal(set_memory(ctx, "device"), 1);
        assert_int_equal(EVP_EncryptUpdate(ctx, out, &outl, in, N), 1);
        assert_int_equal(outl, N);
        evp_dm_get(got, out, N);
        assert_memory_equal(got, ref, N);
    }
    cudaFreeHost(pt);
    evp_dm_free(busy);
    evp_dm_free(in);
    evp_dm_free(out);
    EVP_CIPHER_CTX_free(ctx);
}

/* A driver function in the form it had in CUDA `version` (the test links no libcuda): the
 * pointer's type must be that version's (cuCtxCreate at 12.0 is cuCtxCreate_v3, with affinity
 * parameters; PFN_cuCtxCreate_v3020 is the 3.2 form). */
static void *driver_call(const char *name, int version)
{
    enum cudaDriverEntryPointQueryResult found;
    void *fn = NULL;

    if (cudaGetDriverEntryPointByVersion(name, &fn, (unsigned int)version, cudaEnableDefault, &found) != cudaSuccess
        || found != cudaDriverEntryPointSuccess)
        fail_msg("no driver entry point %s", name);
    return fn;
}

/* Memory of another CUDA context (the driver API's own, not the runtime's primary one that gpuprov
 * runs in): not mapped in gpuprov's, so refused rather than faulted on. */
static void test_cuda_foreign_context(void **state)
{
    PFN_cuDeviceGet_v2000 device_get = (PFN_cuDeviceGet_v2000)driver_call("cuDeviceGet", 2000);
    PFN_cuCtxCreate_v3020 ctx_create = (PFN_cuCtxCreate_v3020)driver_call("cuCtxCreate", 3020);
    PFN_cuCtxDestroy_v4000 ctx_destroy = (PFN_cuCtxDestroy_v4000)driver_call("cuCtxDestroy", 4000);
    PFN_cuCtxPushCurrent_v4000 ctx_push = (PFN_cuCtxPushCurrent_v4000)driver_call("cuCtxPushCurrent", 4000);
    PFN_cuCtxPopCurrent_v4000 ctx_pop = (PFN_cuCtxPopCurrent_v4000)driver_call("cuCtxPopCurrent", 4000);
    PFN_cuMemAlloc_v3020 mem_alloc = (PFN_cuMemAlloc_v3020)driver_call("cuMemAlloc", 3020);
    PFN_cuMemFree_v3020 mem_free = (PFN_cuMemFree_v3020)driver_call("cuMemFree", 3020);
    EVP_CIPHER_CTX *ctx = device_ctx(evp_cipher_index("AES-256-GCM"), 1);
    CUcontext other = NULL, popped = NULL;
    CUdeviceptr p = 0;
    CUdevice dev = 0;
    int outl = 0;

    (void)state;
    evp_cuda_check(cudaSetDevice(data_gpu), "cudaSetDevice");
    assert_int_equal(device_get(&dev, data_gpu), CUDA_SUCCESS);
    assert_int_equal(ctx_create(&other, 0, dev), CUDA_SUCCESS);   /* current on this thread now */
    assert_int_equal(mem_alloc(&p, 4096), CUDA_SUCCESS);
    assert_int_equal(ctx_pop(&popped), CUDA_SUCCESS);
    expect_error(EVP_EncryptUpdate(ctx, (unsigned char *)(uintptr_t)p, &outl, (unsigned char *)(uintptr_t)p, 4096),
                 "another context's memory", "not CUDA device");
    assert_int_equal(ctx_push(other), CUDA_SUCCESS);
    assert_int_equal(mem_free(p), CUDA_SUCCESS);
    assert_int_equal(ctx_pop(&popped), CUDA_SUCCESS);
    assert_int_equal(ctx_destroy(other), CUDA_SUCCESS);
    EVP_CIPHER_CTX_free(ctx);
}
#endif

static int group_setup(void **state)
{
    int rc = evp_group_setup(state);

    g_env = *state;
    data_gpu = evp_dm_data_gpu();
    if (rc == 0 && !evp_under_default())
        evp_dm_find();
    return rc;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_bad_pointers),
        cmocka_unit_test(test_mid_message),
        cmocka_unit_test(test_reinit),
        cmocka_unit_test(test_async_jobs),
        cmocka_unit_test(test_tls_refused),
        cmocka_unit_test(test_no_gpu),
        cmocka_unit_test(test_gpu_failure),
#ifdef DEVMEM_TEST_CUDA
        cmocka_unit_test(test_cuda_kinds),
        cmocka_unit_test(test_cuda_ordering),
        cmocka_unit_test(test_cuda_foreign_context),
#endif
    };
    int rc;

    /* The fault run: the hook fails the N-th batch of the process, so this test runs alone. */
    const struct CMUnitTest fault_tests[] = { cmocka_unit_test(test_gpu_failure) };

    if (getenv("GPUPROV_TEST_CUDA_FAULT_AFTER") != NULL)
        return cmocka_run_group_tests(fault_tests, group_setup, evp_group_teardown);
    if (evp_under_default()) {
        fprintf(stderr, "devmem: device mode is gpuprov's own; nothing to check on the default provider\n");
        return 77;
    }
    for (int i = 1; i < argc; i++)
        if (kat_file_read(argv[i], &g_vecs, &g_nvecs) != 0)
            return 1;
    rc = cmocka_run_group_tests(tests, group_setup, evp_group_teardown);
    kat_vecs_free(g_vecs, g_nvecs);
    return rc;
}
