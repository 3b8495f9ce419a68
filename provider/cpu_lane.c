/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu lane: a context's messages on the default provider's own context, each call handed on. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/err.h>

#include "cipher_ctx.h"

/*
 * Where a context's messages run on the CPU, loading gpuprov must cost what not loading it costs:
 * the lane keeps one default-provider context per gpuprov context and gives it every init, update,
 * final and parameter of the message, so a TLS record is the same calls into the default provider
 * that EVP makes without gpuprov (one per record in TLS 1.2 record mode). The provider's own checks
 * (docs/limitations.md, "Stricter than the default provider") run before each call, on the
 * context's own fields: the lane takes no lock and touches no memory another thread writes.
 *
 * The lane is chosen when a message starts (gp_engine_cpu_lane): a new context, a new IV, or a
 * new key. A context on the lane asks again only when the engine's routing changed since it chose
 * (the GPU warm-up finished, an executor failed), so an IV-only re-init of a TLS 1.3 connection
 * costs nothing of the engine's.
 *
 * TLS 1.2 record mode (RFC 5288 for GCM, RFC 7905 for ChaCha20-Poly1305) stays on a lane that is
 * open when TLS1_IV_FIXED comes: the lane's context takes the context's IV whole (for an encrypting
 * GCM context, the fixed field with the invocation field gpuprov drew), then each TLS1_AAD as the
 * caller gave it, and each record is one call into the default's update, after gpuprov's own checks
 * of the record. The context keeps its own copy of the IV in step (the invocation field counts up
 * per sent record, a received record's explicit nonce replaces it), so that the engine's message can
 * take over from the context's own fields whenever the lane closes. It closes at anything off the
 * path a TLS connection takes, where the two could part: a record or TLS1_AAD gpuprov refuses, an
 * init with a record pending, a record the default refuses, a new IV length, a routing change. A
 * lane not open at TLS1_IV_FIXED is not opened for record mode: the engine's message runs it.
 */

static int is_gcm(const gp_cipher_ctx *ctx)
{
    return ctx->info->alg == GP_ALG_AES_GCM;
}

/* Count the lane's calls into the stats (when they are kept) and free its context. */
void gp_lane_close(gp_cipher_ctx *ctx)
{
    gp_cpu_lane *l = &ctx->lane;

    if (l->d == NULL)
        return;
    /* An encryption's tag lives in the lane's context: GET_TAG may still come after it closes. Only
     * an encrypting context can be asked (the default refuses GET_TAG when decrypting), and the
     * question is gpuprov's own: whatever it answers stays off the caller's error queue, where the
     * error of the call that closed the lane must be the last one. */
    if (ctx->tag_ready == GP_TAG_LANE) {
        OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

        p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, ctx->tag_out, sizeof(ctx->tag_out));
        ERR_set_mark();
        ctx->tag_ready = ctx->enc && l->d->get_ctx_params(l->algctx, p) ? GP_TAG_OWN : GP_TAG_NONE;
        ERR_pop_to_mark();
    }
    gp_engine_count_lane(ctx->provctx->engine, l->calls, l->bytes);
    l->d->freectx(l->algctx);   /* the default provider cleanses its key schedule */
    memset(l, 0, sizeof(*l));
}

/* Ask the engine where a message starting now belongs; open or close the lane to match. Returns 1
 * when the lane is open afterwards. */
static int lane_choose(gp_cipher_ctx *ctx)
{
    gp_engine *e = ctx->provctx->engine;
    const _Atomic unsigned *word = gp_engine_route_epoch(e);
    unsigned epoch = atomic_load_explicit(word, memory_order_relaxed);
    const gp_cpu_direct *d;
    void *algctx;

    /* A context in TLS 1.2 record mode (or with a record pending) keeps its records on the
     * engine's message unless its lane was open when record mode began ("TLS 1.2" above); one in
     * device mode has its data where the default provider's code cannot read it. */
    if (ctx->tls_fixed || ctx->tls_aad_len != 0 || ctx->devmem) {
        gp_lane_close(ctx);
        return 0;
    }
    d = gp_engine_cpu_lane(e, ctx->info->alg, ctx->info->keylen, ctx->last_text_bytes);
    if (d == ctx->lane.d && d != NULL) {
        ctx->lane.epoch = epoch;
        return 1;
    }
    gp_lane_close(ctx);
    if (d == NULL || (algctx = d->newctx(d->provctx)) == NULL)
        return 0;   /* the engine serves it (on the cpu executor too, if that is where it goes) */
    ctx->lane.d = d;
    ctx->lane.algctx = algctx;
    ctx->lane.epoch_word = word;
    ctx->lane.epoch = epoch;
    ctx->lane.ivlen = d->ivlen;
    ctx->lane.count = ctx->provctx->knobs.stats != 0;
    ctx->lane.tail = ctx->info->alg == GP_ALG_AES_CTR || ctx->info->alg == GP_ALG_AES_GCM;
    ctx->lane.go_when_started = ctx->lane.tail && !ctx->lane.count ? d->update : NULL;
    /* What was set before the lane opened, its context needs too: a GCM IV length other than the
     * default (an expected tag goes over at Final: gp_lane_sync_tag). */
    if (is_gcm(ctx) && ctx->ivlen != d->ivlen) {
        OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
        size_t ivlen = ctx->ivlen;

        p[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen);
        if (!d->set_ctx_params(algctx, p)) {
            gp_lane_close(ctx);
            return 0;
        }
        ctx->lane.ivlen = ivlen;
    }
    /* ... and a ChaCha20-Poly1305 tag length, which its AEAD_TAGLEN reads (answered there after an
     * encryption's Final: lane_has_answers) */
    if (ctx->info->aead && !is_gcm(ctx) && ctx->taglen != 0) {
        OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

        p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, NULL, ctx->taglen);
        if (!d->set_ctx_params(algctx, p)) {
            gp_lane_close(ctx);
            return 0;
        }
    }
    return 1;
}

int gp_lane_sync_tag(gp_cipher_ctx *ctx)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, ctx->tag, ctx->taglen);
    if (!ctx->lane.d->set_ctx_params(ctx->lane.algctx, p)) {
        GP_RAISE(GP_R_INVALID_TAG_LENGTH);
        return 0;
    }
    ctx->lane.tag_synced = 1;
    return 1;
}

/* One init on the lane's context: the key where it does not hold it yet, and `iv` if given, as
 * EVP would pass them (the IV length first for GCM IVs other than the default). */
int gp_lane_start(gp_cipher_ctx *ctx, const uint8_t *iv, size_t ivlen)
{
    gp_cpu_lane *l = &ctx->lane;
    const uint8_t *key = l->key_loaded ? NULL : gp_key_bytes(ctx->key);
    int ok;

    if (iv != NULL && is_gcm(ctx) && l->ivlen != ivlen) {
        OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

        p[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen);
        if (!l->d->set_ctx_params(l->algctx, p))
            goto err;
        l->ivlen = ivlen;
    }
    l->tag_synced = 0;   /* an init may reset the default's expected tag */
    ok = (ctx->enc ? l->d->einit : l->d->dinit)(l->algctx, key, key != NULL ? ctx->info->keylen : 0,
                                                 iv, iv != NULL ? ivlen : 0, NULL);
    gp_cpu_clean_upper_state();
    if (!ok)
        goto err;
    l->key_loaded = 1;
    return 1;
err:
    l->key_loaded = 0;
    GP_RAISE(GP_R_EXECUTOR_FAILURE);
    return 0;
}

int gp_lane_init(gp_cipher_ctx *ctx)
{
    gp_cpu_lane *l = &ctx->lane;

    if (ctx->key == NULL)
        return 1;   /* nothing can run before a key; the lane keeps what it has */
    /* A message in progress stays where it runs; a new one (a buffered IV) may move. */
    if (ctx->iv_state != GP_IV_STARTED
        && (l->d == NULL || !gp_lane_current(ctx))
        && !lane_choose(ctx))
        return 1;
    if (l->d == NULL)
        return 1;
    if (ctx->iv_state != GP_IV_BUFFERED)
        return gp_lane_start(ctx, NULL, 0);   /* the key, or only the direction */
    if (!gp_lane_start(ctx, ctx->iv, ctx->ivlen))   /* the buffered IV's message begins on the lane */
        return 0;
    gp_cipher_message_reset(ctx);
    return 1;
}

void gp_lane_leave_tls(gp_cipher_ctx *ctx)
{
    gp_lane_close(ctx);
    /* A message the lane's context had begun (an init since TLS1_IV_FIXED starts one there) begins
     * again from the context's IV on the engine's message, as each record does. */
    if (ctx->iv_state == GP_IV_STARTED)
        ctx->iv_state = GP_IV_BUFFERED;
}

void gp_lane_tls_fixed(gp_cipher_ctx *ctx)
{
    gp_cpu_lane *l = &ctx->lane;
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    int ok;

    if (l->d == NULL)
        return;
    /* The whole IV: EVP_CTRL_GCM_SET_IV_FIXED's length -1, which the default takes as "all of it". */
    p[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, ctx->iv,
                                             is_gcm(ctx) ? (size_t)-1 : ctx->ivlen);
    /* A TLS1_AAD taken before this went to the context alone (the lane was not in record mode):
     * its record could not run on the lane's context. */
    ok = ctx->tls_aad_len == 0 && gp_lane_current(ctx) && l->key_loaded
         && (!is_gcm(ctx) || l->ivlen == ctx->ivlen) && l->d->set_ctx_params(l->algctx, p);
    if (!ok) {
        gp_lane_leave_tls(ctx);
        return;
    }
    l->tls = 1;
}

static GP_NOINLINE int lane_set_copy(const gp_cpu_lane *l, const OSSL_PARAM *p)
{
    OSSL_PARAM one[2] = { *p, OSSL_PARAM_END };

    return l->d->set_ctx_params(l->algctx, one);
}

/* The lane's context takes TLS1_AAD alone: from the caller's list where it is its last param (the
 * one libssl sets each record), else from a copy. */
static int lane_set_one(const gp_cpu_lane *l, const OSSL_PARAM *p)
{
    if (p[1].key == NULL)
        return l->d->set_ctx_params(l->algctx, p);
    return lane_set_copy(l, p);
}

void gp_lane_tls_aad(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    gp_cpu_lane *l = &ctx->lane;

    if (l->d != NULL && !(gp_lane_tls_ready(ctx) && lane_set_one(l, p)))
        gp_lane_leave_tls(ctx);
}

int gp_lane_tls_record(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                       const unsigned char *in, size_t len)
{
    int ok;

    if (ctx->lane.count) {
        ctx->lane.calls++;
        ctx->lane.bytes += len;
    }
    ok = ctx->lane.d->update(ctx->lane.algctx, out, outl, outsize, in, len);
    gp_cpu_clean_upper_state();
    /* A refused record (a wrong tag among them) may leave the default's context in record mode
     * where the context's is not (ChaCha20-Poly1305 keeps its payload length): the engine goes on.
     * The default wiped the payload; the error is gpuprov's (docs/limitations.md). */
    if (!ok) {
        gp_lane_leave_tls(ctx);
        GP_RAISE(ctx->enc ? GP_R_EXECUTOR_FAILURE : GP_R_TAG_MISMATCH);
    }
    return ok;
}

/* Keys the lane takes apart (gp_lane_tls_fixed, gp_lane_tls_aad), never as the caller gave them. */
static int tls_key(const char *k)
{
    return strcmp(k, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED) == 0 || strcmp(k, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD) == 0;
}

/* The lane's set_ctx_params with params' TLS keys left out (a list longer than 15 is refused). */
static GP_NOINLINE int set_params_but_tls(const gp_cpu_lane *l, const OSSL_PARAM params[])
{
    OSSL_PARAM rest[16];
    size_t n = 0;

    for (const OSSL_PARAM *p = params; p->key != NULL; p++) {
        if (tls_key(p->key))
            continue;
        if (n + 1 >= sizeof(rest) / sizeof(rest[0]))
            return 0;
        rest[n++] = *p;
    }
    rest[n] = (OSSL_PARAM)OSSL_PARAM_END;
    return n == 0 || l->d->set_ctx_params(l->algctx, rest);
}

int gp_lane_set_params(gp_cipher_ctx *ctx, const OSSL_PARAM params[], size_t ntls)
{
    gp_cpu_lane *l = &ctx->lane;

    if (!(ntls > 0 ? set_params_but_tls(l, params) : l->d->set_ctx_params(l->algctx, params))) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    if (is_gcm(ctx) && l->ivlen != ctx->ivlen) {
        l->ivlen = ctx->ivlen;   /* the provider's own IVLEN check ran first and agreed */
        if (l->tls)
            gp_lane_leave_tls(ctx);   /* record mode's whole IV no longer fits */
    }
    return 1;
}

int gp_lane_dup(gp_cipher_ctx *dst, const gp_cipher_ctx *src)
{
    memset(&dst->lane, 0, sizeof(dst->lane));
    if (src->lane.d == NULL)
        return 1;
    /* The default provider's dupctx is a deep copy: key schedule, counter, GHASH/Poly1305 state. */
    if ((dst->lane.algctx = src->lane.d->dupctx(src->lane.algctx)) == NULL)
        return 0;
    dst->lane.d = src->lane.d;
    dst->lane.epoch_word = src->lane.epoch_word;
    dst->lane.epoch = src->lane.epoch;
    dst->lane.key_loaded = src->lane.key_loaded;
    dst->lane.ivlen = src->lane.ivlen;
    dst->lane.count = src->lane.count;
    dst->lane.tag_synced = src->lane.tag_synced;
    dst->lane.tls = src->lane.tls;
    dst->lane.tail = src->lane.tail;
    dst->lane.go_when_started = src->lane.go_when_started;
    return 1;
}

int gp_lane_update(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                   const unsigned char *in, size_t inl)
{
    int ok;

    gp_engine_note_large(ctx->provctx->engine, ctx->info->alg, inl);
    if (ctx->lane.count) {
        ctx->lane.calls++;
        ctx->lane.bytes += inl;
    }
    ok = ctx->lane.d->update(ctx->lane.algctx, out, outl, outsize, in, inl);
    gp_cpu_clean_upper_state();
    if (!ok)
        GP_RAISE(GP_R_EXECUTOR_FAILURE);
    return ok;
}
