/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu executor: OpenSSL's default provider (AES-NI/VAES, AVX ChaCha) in a child library context. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include "batching/exec_cpu.h"

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

/* Read the functions of the provider's implementation named `name` into d; 0 (d left empty) if the
 * provider has no such entry, more than one (then which one EVP fetched is not known), or one that
 * lacks a function the executor calls. */
static int read_dispatch(gp_cpu_direct *d, const OSSL_ALGORITHM *algs, const char *name)
{
    const OSSL_ALGORITHM *found = NULL;
    gp_cpu_direct t = { 0 };

    for (const OSSL_ALGORITHM *a = algs; a != NULL && a->algorithm_names != NULL; a++) {
        if (!gp_names_include(a->algorithm_names, name, strlen(name)))
            continue;
        if (found != NULL)
            return 0;
        found = a;
    }
    if (found == NULL)
        return 0;
    for (const OSSL_DISPATCH *f = found->implementation; f->function_id != 0; f++) {
        switch (f->function_id) {
        case OSSL_FUNC_CIPHER_NEWCTX:
            t.newctx = OSSL_FUNC_cipher_newctx(f);
            break;
        case OSSL_FUNC_CIPHER_FREECTX:
            t.freectx = OSSL_FUNC_cipher_freectx(f);
            break;
        case OSSL_FUNC_CIPHER_DUPCTX:
            t.dupctx = OSSL_FUNC_cipher_dupctx(f);
            break;
        case OSSL_FUNC_CIPHER_ENCRYPT_INIT:
            t.einit = OSSL_FUNC_cipher_encrypt_init(f);
            break;
        case OSSL_FUNC_CIPHER_DECRYPT_INIT:
            t.dinit = OSSL_FUNC_cipher_decrypt_init(f);
            break;
        case OSSL_FUNC_CIPHER_UPDATE:
            t.update = OSSL_FUNC_cipher_update(f);
            break;
        case OSSL_FUNC_CIPHER_FINAL:
            t.final = OSSL_FUNC_cipher_final(f);
            break;
        case OSSL_FUNC_CIPHER_GET_CTX_PARAMS:
            t.get_ctx_params = OSSL_FUNC_cipher_get_ctx_params(f);
            break;
        case OSSL_FUNC_CIPHER_SET_CTX_PARAMS:
            t.set_ctx_params = OSSL_FUNC_cipher_set_ctx_params(f);
            break;
        default:
            break;
        }
    }
    if (t.newctx == NULL || t.freectx == NULL || t.dupctx == NULL || t.einit == NULL
        || t.dinit == NULL || t.update == NULL || t.final == NULL || t.get_ctx_params == NULL
        || t.set_ctx_params == NULL)
        return 0;
    *d = t;
    return 1;
}

/* Fill e->cpu_direct from the providers the EVP_CIPHERs came from. Best effort: a slot whose
 * lookup fails keeps newctx == NULL and is served through EVP. */
static void lookup_direct(gp_engine *e)
{
    for (int i = 0; i < 8; i++) {
        const EVP_CIPHER *c = e->cpu_ciphers[i];
        const OSSL_PROVIDER *prov = EVP_CIPHER_get0_provider(c);
        const OSSL_ALGORITHM *algs;
        int no_cache = 0;

        memset(&e->cpu_direct[i], 0, sizeof(e->cpu_direct[i]));
        if (prov == NULL)
            continue;
        algs = OSSL_PROVIDER_query_operation(prov, OSSL_OP_CIPHER, &no_cache);
        if (algs == NULL)
            continue;
        if (read_dispatch(&e->cpu_direct[i], algs, slot_names[i])) {
            e->cpu_direct[i].provctx = OSSL_PROVIDER_get0_provider_ctx(prov);
            e->cpu_direct[i].ivlen = (size_t)EVP_CIPHER_get_iv_length(c);
        }
        /* Only function pointers were kept: the table itself can go back. */
        OSSL_PROVIDER_unquery_operation(prov, OSSL_OP_CIPHER, algs);
    }
}

const gp_cpu_direct *gp_cpu_direct_for(gp_engine *e, uint32_t alg, size_t keylen)
{
    int slot = cipher_slot(alg, keylen);

    return slot >= 0 && e->cpu_direct[slot].newctx != NULL ? &e->cpu_direct[slot] : NULL;
}

static void free_all(gp_engine *e)
{
    for (int i = 0; i < 8; i++) {
        EVP_CIPHER_free(e->cpu_ciphers[i]);
        e->cpu_ciphers[i] = NULL;
        memset(&e->cpu_direct[i], 0, sizeof(e->cpu_direct[i]));
    }
}

static int cpu_open(gp_engine *e)
{
    int ok;

    if (e->libctx == NULL)
        return 0;
    ERR_set_mark();
    ok = fetch_all(e);
    if (ok)
        lookup_direct(e);
    ERR_pop_to_mark();   /* a missing default provider is a decision, not an error for the caller */
    if (!ok)
        free_all(e);
    return ok;
}

static void cpu_close(gp_engine *e)
{
    free_all(e);
}

static void cpu_msg_clear(gp_msg *m);

/* The functions off the AAD/text path are GP_NOINLINE: the per-request loop (cpu_run) then needs no
 * stack frame for OSSL_PARAM arrays and saves fewer registers. */

/* GCM: tell the context a new IV length before the IV (rare: TLS and most callers keep 12). Apart
 * from direct_start so that the common start does not build an OSSL_PARAM array. */
static GP_NOINLINE int direct_set_ivlen(const gp_cpu_direct *d, void *ac, size_t ivlen)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen);
    return d->set_ctx_params(ac, p);
}

/* A fresh provider context for m (dropping whatever m held before). */
static GP_NOINLINE int direct_newctx(const gp_cpu_direct *d, gp_msg *m)
{
    cpu_msg_clear(m);
    if ((m->cpu_algctx = d->newctx(d->provctx)) == NULL)
        return 0;
    m->cpu_direct = d;
    m->cpu_ivlen = d->ivlen;
    return 1;
}

/* The direct path of cpu_msg_start: the same steps as the EVP path below, on the provider's own
 * context. As EVP_CipherInit_ex2 would: the IV length first, then init with the key only when it
 * changed (a TLS 1.3-style IV-only re-init stays cheap); EVP passes the context's IV length, which
 * is m->ivlen once set. */
static int direct_start(const gp_cpu_direct *d, gp_msg *m)
{
    int key_same;

    if ((m->cpu_algctx == NULL || m->cpu_direct != d) && !direct_newctx(d, m))
        return 0;
    key_same = m->cpu_key_id == m->key->id;
    if ((m->key->alg == GP_ALG_AES_GCM && m->cpu_ivlen != m->ivlen
         && !direct_set_ivlen(d, m->cpu_algctx, m->ivlen))
        || !(m->enc ? d->einit : d->dinit)(m->cpu_algctx, key_same ? NULL : m->key->raw,
                                           key_same ? 0 : m->key->keylen, m->iv, m->ivlen, NULL)) {
        m->cpu_key_id = 0;
        m->cpu_ivlen = 0;   /* unknown: set it again next time */
        return 0;
    }
    m->cpu_key_id = m->key->id;
    m->cpu_ivlen = m->ivlen;
    return 1;
}

static int cpu_msg_start(gp_engine *e, gp_msg *m)
{
    int slot = cipher_slot(m->key->alg, m->key->keylen);
    const EVP_CIPHER *c;
    OSSL_PARAM ivlen[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    size_t want_ivlen = m->ivlen;

    if (slot < 0)
        return 0;
    if (e->cpu_direct[slot].newctx != NULL)
        return direct_start(&e->cpu_direct[slot], m);
    c = e->cpu_ciphers[slot];
    if (m->cpu_ctx == NULL) {
        cpu_msg_clear(m);   /* drops a direct-path context, if any */
        if ((m->cpu_ctx = EVP_CIPHER_CTX_new()) == NULL)
            return 0;
    }
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

/* GP_REQ_TAG and GP_REQ_VERIFY on the provider's own context. Kept apart from the data path so
 * that AAD and text requests do not pay for building an OSSL_PARAM array. Sizes as EVP passes
 * them for ciphers of block size 1: final's output size is 0. */
static GP_NOINLINE int direct_tag(const gp_cpu_direct *d, void *ac, gp_request *r)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    unsigned char none[16];
    size_t outl = 0;

    p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, r->tag_out, 16);
    return d->final(ac, none, &outl, 0) && d->get_ctx_params(ac, p) ? GP_REQ_OK : GP_REQ_FAILED;
}

static GP_NOINLINE int direct_verify(const gp_cpu_direct *d, void *ac, gp_request *r)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    unsigned char none[16];
    size_t outl = 0;

    p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, (void *)r->tag_in,
                                             r->taglen);
    if (!d->set_ctx_params(ac, p))
        return GP_REQ_FAILED;
    /* The default provider compares with CRYPTO_memcmp (constant time). Whatever it may queue on
     * a mismatch is dropped: the caller reports the mismatch itself. */
    ERR_set_mark();
    if (d->final(ac, none, &outl, 0)) {
        ERR_pop_to_mark();
        return GP_REQ_OK;
    }
    ERR_pop_to_mark();
    return GP_REQ_BAD_TAG;
}

/* One request on the provider's own context: AAD and text are one call into the provider, with
 * update's output size the input length (what EVP passes for ciphers of block size 1). */
static int direct_run_one(gp_request *r)
{
    const gp_cpu_direct *d = r->msg->cpu_direct;
    void *ac = r->msg->cpu_algctx;

    switch (r->kind) {
    case GP_REQ_CRYPT:
        return gp_cpu_update(r->msg, r->in, r->out, r->len) ? GP_REQ_OK : GP_REQ_FAILED;
    case GP_REQ_AAD:
        return gp_cpu_update(r->msg, r->in, NULL, r->len) ? GP_REQ_OK : GP_REQ_FAILED;
    case GP_REQ_TAG:
        return direct_tag(d, ac, r);
    case GP_REQ_VERIFY:
        return direct_verify(d, ac, r);
    default:
        return GP_REQ_FAILED;
    }
}

/* One request through EVP (the slots whose provider functions were not found). */
static GP_NOINLINE int evp_run_one(gp_request *r)
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

int gp_cpu_update_evp(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len)
{
    gp_request r = { .msg = m, .kind = out == NULL ? GP_REQ_AAD : GP_REQ_CRYPT,
                     .in = in, .out = out, .len = len };
    int ok = evp_run_one(&r) == GP_REQ_OK;

    gp_cpu_clean_upper_state();
    return ok;
}

/* The AAD a request carries (gp_request.aad: held for the GPU side before its message came here
 * after a GPU failure), as a call of its own before the request's. */
static GP_NOINLINE int run_carried_aad(gp_request *r)
{
    gp_request a = { .msg = r->msg, .kind = GP_REQ_AAD, .in = r->aad, .len = r->aad_len };

    return (r->msg->cpu_algctx != NULL ? direct_run_one(&a) : evp_run_one(&a)) == GP_REQ_OK;
}

int gp_cpu_run_one(gp_request *r)
{
    if (r->aad_len > 0 && !run_carried_aad(r))
        r->status = GP_REQ_FAILED;
    else
        r->status = r->msg->cpu_algctx != NULL ? direct_run_one(r) : evp_run_one(r);
    gp_cpu_clean_upper_state();
    return r->status;
}

static int cpu_run(gp_engine *e, gp_request *reqs, size_t n)
{
    (void)e;
    for (size_t i = 0; i < n; i++)
        gp_cpu_run_one(&reqs[i]);
    return 1;
}

static int cpu_msg_copy(gp_msg *dst, const gp_msg *src)
{
    if (src->cpu_algctx != NULL) {
        /* The provider's dupctx is a deep copy (key schedule, counter, GHASH/Poly1305 state). */
        if ((dst->cpu_algctx = src->cpu_direct->dupctx(src->cpu_algctx)) == NULL)
            return 0;
        dst->cpu_direct = src->cpu_direct;
    } else if (src->cpu_ctx != NULL) {
        if ((dst->cpu_ctx = EVP_CIPHER_CTX_new()) == NULL)
            return 0;
        if (!EVP_CIPHER_CTX_copy(dst->cpu_ctx, src->cpu_ctx))
            return 0;
    } else {
        return 1;
    }
    /* The copied context holds whatever key the source's context last took, which need not be the
     * key the copy is given: a key-only or key+IV re-init changes the key before the message
     * restarts (fuzz_evp_diff found a copy taken in between encrypting under the old key). So the
     * copy re-keys its context at its next start. */
    dst->cpu_key_id = 0;
    dst->cpu_ivlen = src->cpu_ivlen;
    return 1;
}

static void cpu_msg_clear(gp_msg *m)
{
    /* The default provider cleanses its key schedule in both. */
    if (m->cpu_algctx != NULL)
        m->cpu_direct->freectx(m->cpu_algctx);
    m->cpu_algctx = NULL;
    m->cpu_direct = NULL;
    EVP_CIPHER_CTX_free(m->cpu_ctx);
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
