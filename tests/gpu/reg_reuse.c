/* SPDX-License-Identifier: Apache-2.0 */
/* The registration cache on a GPU: reused buffers read directly, and memory freed, unmapped or given back and reused at the same address never read through a stale registration. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

/*
 * usage: reg_reuse   (OPENSSL_MODULES: the test module; GPUPROV_BACKEND=cuda; tests/gpu/reg_reuse.sh)
 *
 * Each case encrypts buffers of LEN bytes (a DMA wave's size: batching/cuda/plan.c, wave_direct)
 * with gpuprov and the default provider and compares output and tag. The buffers are allocated
 * after gpuprov loaded, so the registration cache tracks them (batching/reg_cache.h), and each is
 * used at least twice, so it is registered and later calls read it directly. Then its memory
 * changes under the same address (free and malloc again, munmap and mmap again at that address,
 * madvise MADV_DONTNEED, realloc) and is filled with new bytes: a registration that survived the
 * change would have the GPU read the old pages (or, for an output, write them), and the output
 * would differ. In place and out of place (input and output both registered: both cross by DMA). Exits 77 without a GPU (the cuda executor did no op), 1 on any difference.
 */
#define LEN ((size_t)4 << 20)

static const char *const names[] = { "AES-256-GCM", "AES-128-CTR", "ChaCha20-Poly1305", "ChaCha20" };
static EVP_CIPHER *gp_c[4], *ref_c[4];
static int wrong, checked;

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
}

static int encrypt_one(EVP_CIPHER *c, int aead, const uint8_t *in, uint8_t *out, size_t len, uint8_t tag[16])
{
    static const uint8_t key[32] = { 1, 2, 3 }, iv[16] = { 9, 8, 7 };
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int l = 0, ok = ctx != NULL && EVP_EncryptInit_ex2(ctx, c, key, iv, NULL) == 1
                    && EVP_EncryptUpdate(ctx, out, &l, in, (int)len) == 1 && (size_t)l == len
                    && EVP_EncryptFinal_ex(ctx, out + l, &l) == 1;

    if (ok && aead)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}

/* buf's bytes, encrypted by gpuprov in place (out NULL) or into out, against the default's. */
static void check(const char *what, uint8_t *buf, uint8_t *out, uint64_t seed)
{
    uint8_t *ref = malloc(LEN), *ref_ct = malloc(LEN);

    for (int k = 0; k < 4; k++) {
        uint8_t tag[16] = { 0 }, ref_tag[16] = { 0 };
        const int aead = k == 0 || k == 2;
        int ok;

        fill(buf, LEN, seed + (uint64_t)k);
        memcpy(ref, buf, LEN);
        ok = encrypt_one(gp_c[k], aead, buf, out != NULL ? out : buf, LEN, tag)
             && encrypt_one(ref_c[k], aead, ref, ref_ct, LEN, ref_tag);
        checked++;
        if (!ok || memcmp(out != NULL ? out : buf, ref_ct, LEN) != 0 || memcmp(tag, ref_tag, 16) != 0
            || (out != NULL && memcmp(buf, ref, LEN) != 0)) {
            wrong++;
            fprintf(stderr, "reg_reuse: WRONG %s %s (ok %d)\n", what, names[k], ok);
            ERR_print_errors_fp(stderr);
        }
    }
    free(ref);
    free(ref_ct);
}

static uint8_t *map_at(void *hint)
{
    uint8_t *p = mmap(hint, LEN, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (hint != NULL ? MAP_FIXED_NOREPLACE : 0), -1, 0);

    if (p == MAP_FAILED) {
        perror("reg_reuse: mmap");
        exit(2);
    }
    return p;
}

int main(void)
{
    OSSL_LIB_CTX *ctx = OSSL_LIB_CTX_new(), *ref = OSSL_LIB_CTX_new();
    uint64_t cuda_ops = 0;
    OSSL_PROVIDER *gp;
    uint8_t *a, *b, *out;
    uintptr_t was;

    if (ctx == NULL || ref == NULL || (gp = OSSL_PROVIDER_load(ctx, "gpuprov")) == NULL
        || OSSL_PROVIDER_load(ref, "default") == NULL) {
        ERR_print_errors_fp(stderr);
        return 2;
    }
    for (int k = 0; k < 4; k++)
        if ((gp_c[k] = EVP_CIPHER_fetch(ctx, names[k], "provider=gpuprov")) == NULL
            || (ref_c[k] = EVP_CIPHER_fetch(ref, names[k], "provider=default")) == NULL)
            return 2;

    /* Reused, in place and out of place: registered at the second call, read directly after. */
    a = malloc(LEN);
    out = malloc(LEN);
    for (int r = 0; r < 3; r++) {
        check("reused in place", a, NULL, 100 + (uint64_t)r);
        check("reused out of place", a, out, 200 + (uint64_t)r);
    }
    /* The output buffer freed and made again: the GPU's DMA must write the new one's pages. */
    free(out);
    out = malloc(LEN);
    check("new output buffer", a, out, 250);
    check("new output buffer, again", a, out, 251);
    check("new output buffer, third", a, out, 252);
    /* free, then malloc again (glibc maps a block this large of its own, and unmaps it at free:
     * the new block is most often at the same address). */
    was = (uintptr_t)a;
    free(a);
    b = malloc(LEN);
    printf("reg_reuse: malloc after free %s address\n", (uintptr_t)b == was ? "at the same" : "at another");
    check("malloc after free", b, NULL, 300);
    check("malloc after free, again", b, NULL, 301);
    b = realloc(b, LEN + 4096);
    check("after realloc", b, NULL, 400);
    check("after realloc, again", b, NULL, 401);
    free(b);

    /* munmap, then mmap again at the same address. */
    a = map_at(NULL);
    check("mapping", a, NULL, 500);
    check("mapping, again", a, NULL, 501);
    munmap(a, LEN);
    b = map_at(a);
    check("remapped at the same address", b, NULL, 502);
    check("remapped, again", b, NULL, 503);
    /* MADV_DONTNEED: the next touch maps new pages. */
    madvise(b, LEN, MADV_DONTNEED);
    check("after MADV_DONTNEED", b, NULL, 504);
    check("after MADV_DONTNEED, again", b, NULL, 505);
    /* mmap MAP_FIXED over it. */
    if (mmap(b, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != b)
        return 2;
    check("after MAP_FIXED", b, NULL, 506);
    munmap(b, LEN);
    free(out);

    {
        OSSL_PARAM params[] = { OSSL_PARAM_construct_uint64("gpuprov-stats-cuda-ops", &cuda_ops), OSSL_PARAM_END };

        (void)OSSL_PROVIDER_get_params(gp, params);
    }
    printf("reg_reuse: checked=%d wrong=%d cuda_ops=%llu\n", checked, wrong, (unsigned long long)cuda_ops);
    for (int k = 0; k < 4; k++) {
        EVP_CIPHER_free(gp_c[k]);
        EVP_CIPHER_free(ref_c[k]);
    }
    /* Unloaded before its context goes: OSSL_LIB_CTX_free leaves a provider that OSSL_PROVIDER_load
     * returned loaded (the load's reference is the caller's), so gpuprov would never be torn down
     * and never print the stats lines (reg_reuse.sh --want-hits reads the reg_cache one). */
    OSSL_PROVIDER_unload(gp);
    OSSL_LIB_CTX_free(ctx);
    OSSL_LIB_CTX_free(ref);
    if (wrong > 0)
        return 1;
    return cuda_ops == 0 ? 77 : 0;
}
