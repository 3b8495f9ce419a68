/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu executor: OpenSSL's default provider (AES-NI/VAES, AVX ChaCha) in a child library context. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include "engine_internal.h"

/* Index of a (algorithm, key length) pair in gp_engine.cpu_ciphers. */
static int cipher_slot(uint32_t alg, size_t keylen)
{
    int k = keylen == 16 ? 0 : keylen == 24 ? 1 : keylen == 32 ? 2 : -1;

    switch (alg) {
    case GP_ALG_AES_CTR:
        return k;
    case GP_ALG_AES_GCM:
        return k < 0 ? -1 : 3 + k;
    case GP_ALG_CHACHA20:
        return keylen == 32 ? 6 : -1;
    case GP_ALG_CHACHA20_POLY1305:
        return keylen == 32 ? 7 : -1;
    default:
        return -1;
    }
}

static const char *const slot_names[8] = {
    "AES-128-CTR", "AES-192-CTR", "AES-256-CTR",
    "AES-128-GCM", "AES-192-GCM", "AES-256-GCM",
    "ChaCha20", "ChaCha20-Poly1305",
};

static int fetch_all(gp_engine *e)
{
    for (int i = 0; i < 8; i++) {
        /* Never the NULL context: the application (or evp_test) may use its own. */
        e->cpu_ciphers[i] = EVP_CIPHER_fetch(e->libctx, slot_names[i], "provider=default");
        if (e->cpu_ciphers[i] == NULL)
            return 0;
    }
    return 1;
}

static void free_all(gp_engine *e)
{
    for (int i = 0; i < 8; i++) {
        EVP_CIPHER_free(e->cpu_ciphers[i]);
        e->cpu_ciphers[i] = NULL;
    }
}

static int cpu_open(gp_engine *e)
{
    int ok;

    if (e->libctx == NULL)
        return 0;
    ERR_set_mark();
    ok = fetch_all(e);
    ERR_pop_to_mark();   /* a missing default provider is a decision, not an error for the caller */
    if (!ok)
        free_all(e);
    return ok;
}

static void cpu_close(gp_engine *e)
{
    free_all(e);
}

static int cpu_msg_start(gp_engine *e, gp_msg *m)
{
    int slot = cipher_slot(m->key->alg, m->key->keylen);
    const EVP_CIPHER *c;
    OSSL_PARAM ivlen[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    size_t want_ivlen = m->ivlen;

    if (slot < 0)
        return 0;
    c = e->cpu_ciphers[slot];
    if (m->cpu_ctx == NULL && (m->cpu_ctx = EVP_CIPHER_CTX_new()) == NULL)
        return 0;
    if (EVP_CIPHER_CTX_get0_cipher(m->cpu_ctx) != c) {
        if (!EVP_CipherInit_ex2(m->cpu_ctx, c, NULL, NULL, m->enc, NULL))
            goto err;
        m->cpu_key_id = 0;
        m->cpu_ivlen = EVP_CIPHER_get_iv_length(c);
    }
    if (m->key->alg == GP_ALG_AES_GCM && m->cpu_ivlen != want_ivlen)
        ivlen[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &want_ivlen);
    /* The IV length goes first (GCM IVs other than 12 bytes); the key only when it changed, so a
     * TLS 1.3-style IV-only re-init stays cheap. */
    if ((ivlen[0].key != NULL && !EVP_CIPHER_CTX_set_params(m->cpu_ctx, ivlen))
        || !EVP_CipherInit_ex2(m->cpu_ctx, NULL, m->cpu_key_id == m->key->id ? NULL : m->key->raw,
                               m->iv, m->enc, NULL))
        goto err;
    m->cpu_key_id = m->key->id;
    m->cpu_ivlen = want_ivlen;
    return 1;
err:
    m->cpu_key_id = 0;
    m->cpu_ivlen = 0;   /* unknown: set it again next time */
    return 0;
}

static int cpu_run_one(gp_request *r)
{
    EVP_CIPHER_CTX *ctx = r->msg->cpu_ctx;
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    unsigned char none[16];
    int outl = 0;

    switch (r->kind) {
    case GP_REQ_AAD:
        return EVP_CipherUpdate(ctx, NULL, &outl, r->in, (int)r->len) ? GP_REQ_OK : GP_REQ_FAILED;
    case GP_REQ_CRYPT:
        return EVP_CipherUpdate(ctx, r->out, &outl, r->in, (int)r->len) && (size_t)outl == r->len
               ? GP_REQ_OK : GP_REQ_FAILED;
    case GP_REQ_TAG:
        p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, r->tag_out, 16);
        return EVP_CipherFinal_ex(ctx, none, &outl) && EVP_CIPHER_CTX_get_params(ctx, p)
               ? GP_REQ_OK : GP_REQ_FAILED;
    case GP_REQ_VERIFY:
        p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, (void *)r->tag_in,
                                                 r->taglen);
        if (!EVP_CIPHER_CTX_set_params(ctx, p))
            return GP_REQ_FAILED;
        /* The default provider compares with CRYPTO_memcmp (constant time). */
        ERR_set_mark();
        if (EVP_CipherFinal_ex(ctx, none, &outl)) {
            ERR_pop_to_mark();
            return GP_REQ_OK;
        }
        ERR_pop_to_mark();   /* the provider reports the mismatch itself */
        return GP_REQ_BAD_TAG;
    default:
        return GP_REQ_FAILED;
    }
}

static int cpu_run(gp_engine *e, gp_request *reqs, size_t n)
{
    (void)e;
    for (size_t i = 0; i < n; i++)
        reqs[i].status = cpu_run_one(&reqs[i]);
    return 1;
}

static int cpu_msg_copy(gp_msg *dst, const gp_msg *src)
{
    if (src->cpu_ctx == NULL)
        return 1;
    if ((dst->cpu_ctx = EVP_CIPHER_CTX_new()) == NULL)
        return 0;
    if (!EVP_CIPHER_CTX_copy(dst->cpu_ctx, src->cpu_ctx))
        return 0;
    /* The copy holds the source's key, but the provider gives the copy its own key object. */
    dst->cpu_key_id = dst->key != NULL ? dst->key->id : 0;
    dst->cpu_ivlen = src->cpu_ivlen;
    return 1;
}

static void cpu_msg_clear(gp_msg *m)
{
    EVP_CIPHER_CTX_free(m->cpu_ctx);   /* the default provider cleanses its key schedule */
    m->cpu_ctx = NULL;
    m->cpu_key_id = 0;
    m->cpu_ivlen = 0;
}

const gp_executor gp_exec_cpu = {
    .name = "cpu",
    .id = GP_EXEC_CPU,
    .open = cpu_open,
    .close = cpu_close,
    .msg_start = cpu_msg_start,
    .run = cpu_run,
    .msg_copy = cpu_msg_copy,
    .msg_clear = cpu_msg_clear,
};
