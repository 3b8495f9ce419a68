/* SPDX-License-Identifier: Apache-2.0 */
/* The trust cases' driver: threaded traffic through gpuprov in three phases, checked against the default provider. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/provider.h>

/*
 * usage: trust [--want-gpu-first] [--settle-ms N] [--ready FILE --go FILE] [--threads N] [--messages N]
 *              [--large BYTES]
 *
 * Phase 1: small messages (16 KiB) from every thread; with --want-gpu-first, repeated until
 * gpuprov's counters show requests on the GPU (at most 60 s), so that what follows happens to a
 * GPU that was serving. Then, with --ready/--go: create READY and wait for GO (another process
 * takes the GPU's memory meanwhile: tests/gpu/trust.sh). Phase 2: large messages (--large, 8 MiB),
 * which make the cuda executor grow its pools. Phase 3: small messages again: gpuprov must still
 * serve. --settle-ms: a pause after phase 1, so that gpuprov's background opening of the GPU
 * (backend=auto) has happened, or failed, before the later phases. Every message of every cipher
 * is encrypted by gpuprov and by the default provider, and gpuprov decrypts the default's
 * ciphertext and verifies its tag; any difference, or a call that fails on gpuprov alone, fails
 * the run. Prints gpuprov's counters; the script checks the log lines.
 */

typedef struct cipher_info {
    const char *name;
    int aead;
} cipher_info;

static const cipher_info ciphers[] = {
    { "AES-128-CTR", 0 }, { "AES-256-CTR", 0 }, { "AES-128-GCM", 1 }, { "AES-256-GCM", 1 },
    { "ChaCha20", 0 }, { "ChaCha20-Poly1305", 1 },
};
#define NCIPHERS (sizeof(ciphers) / sizeof(ciphers[0]))

static EVP_CIPHER *gp_c[NCIPHERS], *ref_c[NCIPHERS];
static _Atomic uint64_t checked, wrong;
static size_t phase_len;
static int messages = 24;

/* One message on one cipher; 1: the output and tag. */
static int crypt_one(EVP_CIPHER *c, const cipher_info *ci, int enc, const uint8_t *key, const uint8_t *iv,
                     const uint8_t *in, uint8_t *out, size_t len, uint8_t tag[16])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    static const uint8_t aad[13] = { 23, 3, 3, 0, 1 };
    int l = 0, ok;

    ok = ctx != NULL && EVP_CipherInit_ex2(ctx, c, key, iv, enc, NULL) == 1;
    if (ok && ci->aead && !enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tag) == 1;
    if (ok && ci->aead)
        ok = EVP_CipherUpdate(ctx, NULL, &l, aad, sizeof(aad)) == 1;
    ok = ok && EVP_CipherUpdate(ctx, out, &l, in, (int)len) == 1 && (size_t)l == len
         && EVP_CipherFinal_ex(ctx, out + l, &l) == 1;
    if (ok && ci->aead && enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}

static void *traffic(void *v)
{
    uint64_t seed = (uint64_t)(uintptr_t)v * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *in = malloc(phase_len + 1), *ct_gp = malloc(phase_len + 1), *ct_ref = malloc(phase_len + 1);
    uint8_t *pt = malloc(phase_len + 1);

    if (in == NULL || ct_gp == NULL || ct_ref == NULL || pt == NULL) {
        fprintf(stderr, "trust: out of memory\n");
        exit(2);
    }
    for (int i = 0; i < messages; i++) {
        size_t k = (size_t)i % NCIPHERS, len = phase_len - (size_t)(i % 3) * 7;
        uint8_t key[32], iv[16], tag_gp[16] = { 0 }, tag_ref[16] = { 0 };
        int ok_gp, ok_ref, ok_dec;

        for (size_t j = 0; j < sizeof(key); j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            key[j] = (uint8_t)(seed >> 33);
        }
        for (size_t j = 0; j < sizeof(iv); j++)
            iv[j] = (uint8_t)(seed >> (8 * (j % 8)));
        iv[2] = iv[3] = 0;   /* ChaCha20's block counter, far from its end */
        for (size_t j = 0; j < len; j++)
            in[j] = (uint8_t)(j * 131 + (size_t)i);
        ok_gp = crypt_one(gp_c[k], &ciphers[k], 1, key, iv, in, ct_gp, len, tag_gp);
        ok_ref = crypt_one(ref_c[k], &ciphers[k], 1, key, iv, in, ct_ref, len, tag_ref);
        /* gpuprov decrypts the default's ciphertext and verifies its tag. */
        ok_dec = ok_ref && crypt_one(gp_c[k], &ciphers[k], 0, key, iv, ct_ref, pt, len, tag_ref);
        atomic_fetch_add(&checked, 1);
        if (!ok_gp || !ok_ref || !ok_dec || memcmp(ct_gp, ct_ref, len) != 0
            || (ciphers[k].aead && memcmp(tag_gp, tag_ref, 16) != 0) || memcmp(pt, in, len) != 0) {
            atomic_fetch_add(&wrong, 1);
            fprintf(stderr, "trust: WRONG %s len=%zu: gpuprov enc %d dec %d, default %d\n", ciphers[k].name, len, ok_gp,
                    ok_dec, ok_ref);
            ERR_print_errors_fp(stderr);
        }
    }
    free(in);
    free(ct_gp);
    free(ct_ref);
    free(pt);
    return NULL;
}

static void phase(int threads, size_t len)
{
    pthread_t t[64];

    phase_len = len;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, traffic, (void *)(uintptr_t)(i + 1 + len));
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
}

typedef struct counts {
    uint64_t ops, cuda_ops, fallbacks, errors;
    char executor[32];
} counts;

static void counts_read(OSSL_PROVIDER *p, counts *c)
{
    char *ex = NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_uint64("gpuprov-stats-ops", &c->ops),
        OSSL_PARAM_construct_uint64("gpuprov-stats-cuda-ops", &c->cuda_ops),
        OSSL_PARAM_construct_uint64("gpuprov-stats-fallbacks", &c->fallbacks),
        OSSL_PARAM_construct_uint64("gpuprov-stats-errors", &c->errors),
        OSSL_PARAM_construct_utf8_ptr("gpuprov-executor", &ex, 0),
        OSSL_PARAM_END
    };

    memset(c, 0, sizeof(*c));
    (void)OSSL_PROVIDER_get_params(p, params);
    snprintf(c->executor, sizeof(c->executor), "%s", ex != NULL ? ex : "?");
}

static void say(const char *when, OSSL_PROVIDER *p)
{
    counts c;

    counts_read(p, &c);
    printf("trust: %s: checked=%" PRIu64 " wrong=%" PRIu64 " | gpuprov executor=%s ops=%" PRIu64 " cuda_ops=%" PRIu64
           " fallbacks=%" PRIu64 " errors=%" PRIu64 "\n", when, atomic_load(&checked), atomic_load(&wrong), c.executor,
           c.ops, c.cuda_ops, c.fallbacks, c.errors);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *ready = NULL, *go = NULL;
    int want_gpu = 0, threads = 4, settle_ms = 0;
    size_t large = 8u << 20;
    OSSL_LIB_CTX *ctx = OSSL_LIB_CTX_new(), *ref = OSSL_LIB_CTX_new();
    OSSL_PROVIDER *gp;
    counts c;
    uint64_t before;
    FILE *f;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--want-gpu-first") == 0)
            want_gpu = 1;
        else if (strcmp(argv[i], "--settle-ms") == 0 && i + 1 < argc)
            settle_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ready") == 0 && i + 1 < argc)
            ready = argv[++i];
        else if (strcmp(argv[i], "--go") == 0 && i + 1 < argc)
            go = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--messages") == 0 && i + 1 < argc)
            messages = atoi(argv[++i]);
        else if (strcmp(argv[i], "--large") == 0 && i + 1 < argc)
            large = (size_t)strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: trust [--want-gpu-first] [--settle-ms N] [--ready FILE --go FILE] "
                    "[--threads N] [--messages N] [--large BYTES]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || messages < 1)
        return 2;
    setenv("GPUPROV_STATS", "1", 1);   /* the counters count only then */
    if (ctx == NULL || ref == NULL || (gp = OSSL_PROVIDER_load(ctx, "gpuprov")) == NULL
        || OSSL_PROVIDER_load(ctx, "default") == NULL || OSSL_PROVIDER_load(ref, "default") == NULL) {
        fprintf(stderr, "trust: cannot load gpuprov (OPENSSL_MODULES) and default\n");
        ERR_print_errors_fp(stderr);
        return 2;
    }
    for (size_t k = 0; k < NCIPHERS; k++)
        if ((gp_c[k] = EVP_CIPHER_fetch(ctx, ciphers[k].name, "provider=gpuprov")) == NULL
            || (ref_c[k] = EVP_CIPHER_fetch(ref, ciphers[k].name, "provider=default")) == NULL)
            return 2;

    for (time_t t0 = time(NULL);;) {
        phase(threads, 16384);
        counts_read(gp, &c);
        if (!want_gpu || c.cuda_ops > 0)
            break;
        if (time(NULL) - t0 > 60) {
            say("phase 1: the GPU never served", gp);
            return 1;
        }
    }
    say("phase 1 (16 KiB)", gp);
    if (settle_ms > 0)
        usleep((useconds_t)settle_ms * 1000u);
    if (ready != NULL && go != NULL) {
        struct stat st;

        if ((f = fopen(ready, "w")) == NULL)
            return 2;
        fclose(f);
        for (int i = 0; stat(go, &st) != 0; i++) {
            if (i == 12000) {
                fprintf(stderr, "trust: %s never came\n", go);
                return 2;
            }
            usleep(10000);
        }
    }
    phase(threads, large);
    say("phase 2 (large)", gp);
    counts_read(gp, &c);
    before = c.ops;
    phase(threads, 16384);
    say("phase 3 (16 KiB)", gp);
    counts_read(gp, &c);
    if (c.ops <= before) {
        printf("trust: FAIL: gpuprov served nothing in phase 3\n");
        return 1;
    }
    for (size_t k = 0; k < NCIPHERS; k++) {
        EVP_CIPHER_free(gp_c[k]);
        EVP_CIPHER_free(ref_c[k]);
    }
    OSSL_LIB_CTX_free(ctx);
    OSSL_LIB_CTX_free(ref);
    printf("trust: %s\n", atomic_load(&wrong) == 0 ? "PASS" : "FAIL");
    return atomic_load(&wrong) == 0 ? 0 : 1;
}
