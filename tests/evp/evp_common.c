/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the EVP-level tests: the cipher table, cached fetches, AEAD param shorthands. */
#include "evp_common.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/provider.h>

const evp_cipher_info evp_ciphers[EVP_NCIPHERS] = {
    { "AES-128-CTR", K_CTR, 16, 16 },
    { "AES-192-CTR", K_CTR, 24, 16 },
    { "AES-256-CTR", K_CTR, 32, 16 },
    { "AES-128-GCM", K_GCM, 16, 12 },
    { "AES-192-GCM", K_GCM, 24, 12 },
    { "AES-256-GCM", K_GCM, 32, 12 },
    { "ChaCha20-Poly1305", K_CCP, 32, 12 },
    /* OpenSSL's ChaCha20 IV is the 32-bit little-endian block counter followed by the 96-bit nonce. */
    { "ChaCha20", K_CHACHA, 32, 16 },
};

static EVP_CIPHER *cache[EVP_NCIPHERS][2];

int evp_cipher_index(const char *name)
{
    for (int i = 0; i < EVP_NCIPHERS; i++)
        if (strcmp(evp_ciphers[i].name, name) == 0)
            return i;
    fail_msg("unknown cipher %s", name);
    return -1;
}

int evp_under_default(void)
{
    const char *u = getenv("GPTEST_UNDER_TEST");

    return u != NULL && strcmp(u, "default") == 0;
}

EVP_CIPHER *evp_cipher(const gptest_env *env, int idx, int gp)
{
    assert_true(idx >= 0 && idx < EVP_NCIPHERS);
    gp = gp ? 1 : 0;
    if (cache[idx][gp] == NULL)
        cache[idx][gp] = gptest_fetch(env, evp_ciphers[idx].name, gp);
    return cache[idx][gp];
}

int evp_group_setup(void **state)
{
    return gptest_env_setup(state);
}

int evp_group_teardown(void **state)
{
    for (int i = 0; i < EVP_NCIPHERS; i++)
        for (int j = 0; j < 2; j++) {
            EVP_CIPHER_free(cache[i][j]);
            cache[i][j] = NULL;
        }
    return gptest_env_teardown(state);
}

void evp_strict_note(const char *what, int holds_on_default)
{
    fprintf(stderr, "[stricter] %s: on the default provider this %s\n", what,
            holds_on_default ? "also holds" : "does NOT hold (gpuprov is stricter here)");
}

int evp_set_ivlen(EVP_CIPHER_CTX *ctx, size_t ivlen)
{
    /* EVP_CIPHER_CTX_ctrl also drops EVP's cached IV length, so the next init passes ivlen bytes. */
    if (ivlen > INT32_MAX)
        return 0;
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, (int)ivlen, NULL);
}

int evp_get_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, size_t taglen)
{
    OSSL_PARAM p[2];

    p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, taglen);
    p[1] = OSSL_PARAM_construct_end();
    return EVP_CIPHER_CTX_get_params(ctx, p);
}

int evp_set_tag(EVP_CIPHER_CTX *ctx, const unsigned char *tag, size_t taglen)
{
    OSSL_PARAM p[2];

    p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, (void *)tag, taglen);
    p[1] = OSSL_PARAM_construct_end();
    return EVP_CIPHER_CTX_set_params(ctx, p);
}

void evp_buf_alloc(evp_buf *b, size_t len, size_t off)
{
    b->base = aligned_alloc(64, (len + off + 64 + 63) / 64 * 64);
    assert_non_null(b->base);
    b->p = b->base + off;
}

void evp_buf_free(evp_buf *b)
{
    free(b->base);
    b->base = b->p = NULL;
}

/* 1 if `name` is one of the colon-separated names in `names` (names are case-insensitive). */
static int names_contain(const char *names, const char *name)
{
    size_t n = strlen(name);

    for (const char *s = names; s != NULL && *s != '\0';) {
        const char *e = strchr(s, ':');
        size_t l = e != NULL ? (size_t)(e - s) : strlen(s);

        if (l == n && strncasecmp(s, name, n) == 0)
            return 1;
        s = e != NULL ? e + 1 : NULL;
    }
    return 0;
}

void evp_raw_get(const gptest_env *env, int gp, const char *name, evp_raw *raw)
{
    OSSL_PROVIDER *prov = (gp && !evp_under_default()) ? env->gpuprov : env->deflt;
    int nocache = 0;
    const OSSL_ALGORITHM *algs = OSSL_PROVIDER_query_operation(prov, OSSL_OP_CIPHER, &nocache);
    const OSSL_DISPATCH *d = NULL;

    memset(raw, 0, sizeof(*raw));
    assert_non_null(algs);
    for (const OSSL_ALGORITHM *a = algs; a->algorithm_names != NULL; a++)
        if (names_contain(a->algorithm_names, name)) {
            d = a->implementation;
            break;
        }
    if (d == NULL)
        fail_msg("%s not offered by %s", name, OSSL_PROVIDER_get0_name(prov));
    for (; d->function_id != 0; d++) {
        switch (d->function_id) {
        case OSSL_FUNC_CIPHER_NEWCTX:
            raw->newctx = OSSL_FUNC_cipher_newctx(d);
            break;
        case OSSL_FUNC_CIPHER_FREECTX:
            raw->freectx = OSSL_FUNC_cipher_freectx(d);
            break;
        case OSSL_FUNC_CIPHER_ENCRYPT_INIT:
            raw->einit = OSSL_FUNC_cipher_encrypt_init(d);
            break;
        case OSSL_FUNC_CIPHER_DECRYPT_INIT:
            raw->dinit = OSSL_FUNC_cipher_decrypt_init(d);
            break;
        case OSSL_FUNC_CIPHER_UPDATE:
            raw->update = OSSL_FUNC_cipher_update(d);
            break;
        case OSSL_FUNC_CIPHER_FINAL:
            raw->final = OSSL_FUNC_cipher_final(d);
            break;
        default:
            break;
        }
    }
    OSSL_PROVIDER_unquery_operation(prov, OSSL_OP_CIPHER, algs);
    raw->provctx = OSSL_PROVIDER_get0_provider_ctx(prov);
    assert_non_null(raw->newctx);
    assert_non_null(raw->freectx);
    assert_non_null(raw->einit);
    assert_non_null(raw->dinit);
    assert_non_null(raw->update);
    assert_non_null(raw->final);
}

void *evp_test_module_symbol(const char *name)
{
    const char *dir = getenv("GPTEST_MODULE_DIR");
    char path[4096];
    void *h, *sym;

    snprintf(path, sizeof(path), "%s/gpuprov.so", dir != NULL ? dir : ".");
    if ((h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) == NULL)
        fail_msg("the test module is not loaded from %s: %s", path, dlerror());
    if ((sym = dlsym(h, name)) == NULL)
        fail_msg("%s exports no %s: not the test module", path, name);
    dlclose(h);   /* the provider keeps it loaded */
    return sym;
}

void evp_standin_find(evp_standin *s)
{
    *(void **)&s->alloc = evp_test_module_symbol("gpuprov_test_devmem_alloc");
    *(void **)&s->free = evp_test_module_symbol("gpuprov_test_devmem_free");
}
