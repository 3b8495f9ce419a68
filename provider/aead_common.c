/* SPDX-License-Identifier: Apache-2.0 */
/* The AEAD mode (AES-GCM, ChaCha20-Poly1305): its state machine, IV and tag state, AAD, limits, params;
 * each construction's own part (TLS 1.2 records, its IV) in aead_gcm.c and aead_chachapoly.c. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "aead.h"
#include "pipeline.h"


static int is_gcm(const gp_cipher_ctx *ctx)
{
    return ctx->info->alg == GP_ALG_AES_GCM;
}

/* An encryption on the lane past its Final: the default provider's context answers what it knows
 * (GET_TAG after each TLS 1.3 record). */
static inline int lane_has_answers(const gp_cipher_ctx *ctx)
{
    return ctx->tag_ready == GP_TAG_LANE && ctx->enc && ctx->tls_aad_len == 0;
}

/*
 * Re-arm the lane's shortcuts (gp_cpu_lane: go, reinit_go, ask, reinit) from the context's fields,
 * at the end of every entry point but the shortcuts themselves. With the lane closed, a TLS record
 * pending or TLS 1.2 record mode set (the records take the general update; a context in record
 * mode whose lane is open has it in record mode too: gp_lane_tls_fixed), none of them may run.
 */
static inline void aead_rearm(gp_cipher_ctx *ctx)
{
    gp_cpu_lane *l = &ctx->lane;

    if (ctx->tls_aad_len != 0 || l->d == NULL || ctx->tls_fixed) {
        l->go = NULL;
        l->reinit_go[0] = l->reinit_go[1] = NULL;
        l->ask = NULL;
        l->reinit = 0;
        return;
    }
    l->go = ctx->iv_state == GP_IV_STARTED ? l->go_when_started : NULL;
    l->reinit = l->key_loaded && ctx->ivlen == CHACHAPOLY_IV_LEN && l->ivlen == CHACHAPOLY_IV_LEN
                && ctx->iv_state >= GP_IV_STARTED;
    l->reinit_go[0] = l->reinit && l->tail ? l->d->dinit : NULL;
    l->reinit_go[1] = l->reinit && l->tail ? l->d->einit : NULL;
    l->ask = lane_has_answers(ctx) ? l->d->get_ctx_params : NULL;
}

static int aead_init_body(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                          const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[], int enc);

static int aead_init(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                     const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[], int enc)
{
    int ok = aead_init_body(ctx, key, keylen, iv, ivlen, params, enc);

    aead_rearm(ctx);
    return ok;
}

static int aead_init_body(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                          const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[], int enc)
{
    /* A new key or direction without a new IV, under a message the caller has begun: going on
     * mixes two keys or directions in one tag (OpenSSL 3.0's GCM goes on from a zeroed state), and
     * starting again from the same IV repeats its keystream under the same key (SP 800-38D §8,
     * RFC 8439 §2.8: a nonce is used once). The message is dropped: updates and Final are refused
     * until a new IV comes (GP_IV_DROPPED). Likewise a ChaCha20-Poly1305 key init that ends a
     * pending TLS record: the record's TLS1_AAD merged its sequence number into the default
     * provider's nonce, which its next plain message keeps (cipher_chacha20_poly1305_hw.c
     * tls_init, initkey), the nonce of that record (RFC 7905 §2). */
    const int drop = iv == NULL
                     && (((key != NULL || enc != ctx->enc) && gp_cipher_message_touched(ctx))
                         || (key != NULL && !is_gcm(ctx) && ctx->tls_aad_len != 0
                             && (ctx->iv_state == GP_IV_BUFFERED || ctx->iv_state == GP_IV_STARTED)));

    gp_cipher_pipe_end(ctx);   /* a single-message init ends a pipeline */
    /* An init with a TLS record pending: the lane's context is left; the record runs on the
     * engine's message from the context's own fields. */
    if (ctx->tls_aad_len != 0 && ctx->lane.tls)
        gp_lane_leave_tls(ctx);
    /* A finished encryption turning to decryption without a new IV: its tag, still there for a
     * GET_TAG once it encrypts again, lives in the lane's context, which is a default-provider
     * context: that provider keeps the computed tag and a SET_TAG's bytes in one buffer, so a
     * decryption's SET_TAG would overwrite it and a later GET_TAG would return the wrong bytes.
     * It comes over (tag_out) and the lane closes (regression input:
     * tests/fuzz/regress/fr2-ccp-settag-dec-clobbers-computed-tag). */
    if (iv == NULL && ctx->enc && !enc && ctx->tag_ready == GP_TAG_LANE)
        gp_lane_close(ctx);
    ctx->enc = enc;
    if (iv != NULL) {
        /* GCM takes IVs of 1..128 bytes (J0 through GHASH when not 12, SP 800-38D §7.1);
         * ChaCha20-Poly1305 takes exactly 96 bits (RFC 8439 §2.8). */
        if (is_gcm(ctx) ? ivlen == 0 || ivlen > GCM_MAX_IV_LEN : ivlen != CHACHAPOLY_IV_LEN) {
            GP_RAISE(GP_R_INVALID_IV_LENGTH);
            return 0;
        }
        memcpy(ctx->iv, iv, ivlen);
        ctx->ivlen = ivlen;
        ctx->iv_state = GP_IV_BUFFERED;
    }
    /* A pending TLS record outlives a GCM init, which leaves the record's AAD alone, and ends at a
     * ChaCha20-Poly1305 one, whose key and nonce setup ends record mode (as the default provider:
     * ciphercommon_gcm.c gcm_init; cipher_chacha20_poly1305_hw.c initkey, initiv). */
    if ((iv != NULL || key != NULL) && !is_gcm(ctx))
        ctx->tls_aad_len = 0;
    if (key != NULL) {
        if (!gp_cipher_set_key(ctx, key, keylen))
            return 0;
        ctx->tls_enc_records = 0;
        /* nothing processed yet: the message starts from its IV under the new key */
        if (iv == NULL && ctx->iv_state == GP_IV_STARTED)
            ctx->iv_state = GP_IV_BUFFERED;
    }
    if (drop)
        ctx->iv_state = GP_IV_DROPPED;
    if (!gp_lane_init(ctx))
        return 0;
    return params == NULL || gp_aead_set_ctx_params(ctx, params);
}

/* The general init, out of line so that the shortcut's entry point needs no frame (a tail call
 * with the caller's own arguments, one per direction). */
static GP_NOINLINE int aead_einit_general(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                                          const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[])
{
    return aead_init(ctx, key, keylen, iv, ivlen, params, 1);
}

static GP_NOINLINE int aead_dinit_general(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                                          const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[])
{
    return aead_init(ctx, key, keylen, iv, ivlen, params, 0);
}

/*
 * The lane's shortcut for a TLS 1.3-style record's re-init: a new 96-bit IV and nothing else, on a
 * context whose lane stands for it (lane.reinit: the key loaded, both IV lengths 96 bits, no TLS 1.2
 * record mode, no record pending) and whose routing is unchanged. The checks and bookkeeping of
 * aead_init; the default provider's init is then the last act (a tail call where reinit_go is
 * armed, AES).
 */
static inline int aead_lane_reinit_fits(const gp_cipher_ctx *ctx, const unsigned char *key,
                                        const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[])
{
    return key == NULL && params == NULL && iv != NULL && ivlen == CHACHAPOLY_IV_LEN && gp_lane_current(ctx);
}

/* What aead_init does for such a re-init: a new message from `iv` on the lane's context, after
 * one that started (reinit is armed only then, and the shortcuts move iv_state only between
 * STARTED and FINISHED). The shortcuts stay armed as it leaves them: reinit holds still, the
 * started message arms `go`, and the tag is gone, so `ask` is not. */
static inline void lane_reinit_begin(gp_cipher_ctx *ctx, const unsigned char *iv, int enc)
{
    ctx->enc = enc;
    memcpy(ctx->iv, iv, CHACHAPOLY_IV_LEN);
    gp_cipher_message_next(ctx);
    ctx->lane.go = ctx->lane.go_when_started;
    ctx->lane.ask = NULL;
    /* An init may reset the default's expected tag. Only a decryption reads tag_synced, and every
     * init that begins one clears it. */
    if (!enc)
        ctx->lane.tag_synced = 0;
}

/* The re-init shortcut of a lane that is not tail (ChaCha20-Poly1305: gp_cpu_clean_upper_state). */
static GP_NOINLINE int lane_reinit_clean(gp_cipher_ctx *ctx, const unsigned char *iv, int enc)
{
    int ok;

    lane_reinit_begin(ctx, iv, enc);
    ok = (enc ? ctx->lane.d->einit : ctx->lane.d->dinit)(ctx->lane.algctx, NULL, 0, iv, CHACHAPOLY_IV_LEN, NULL);
    gp_cpu_clean_upper_state();
    return ok;
}

/* An init: the re-init shortcut where it fits, else the general aead_init (out of line, so that
 * the shortcut needs no frame). */
static inline int aead_init_entry(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                                  const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[], int enc)
{
    OSSL_FUNC_cipher_encrypt_init_fn *init = ctx->lane.reinit_go[enc];

    if (GP_LIKELY(init != NULL) && aead_lane_reinit_fits(ctx, key, iv, ivlen, params)) {
        lane_reinit_begin(ctx, iv, enc);
        /* The caller's own arguments (no key, no params, a 96-bit IV; the default reads keylen
         * only with a key), so that they stay in their registers. */
        return init(ctx->lane.algctx, key, keylen, iv, ivlen, params);
    }
    if (ctx->lane.reinit && aead_lane_reinit_fits(ctx, key, iv, ivlen, params))
        return lane_reinit_clean(ctx, iv, enc);
    return enc ? aead_einit_general(ctx, key, keylen, iv, ivlen, params)
               : aead_dinit_general(ctx, key, keylen, iv, ivlen, params);
}

int gp_aead_einit(void *vctx, const unsigned char *key, size_t keylen, const unsigned char *iv,
                  size_t ivlen, const OSSL_PARAM params[])
{
    return aead_init_entry(vctx, key, keylen, iv, ivlen, params, 1);
}

int gp_aead_dinit(void *vctx, const unsigned char *key, size_t keylen, const unsigned char *iv,
                  size_t ivlen, const OSSL_PARAM params[])
{
    return aead_init_entry(vctx, key, keylen, iv, ivlen, params, 0);
}

/* Make sure a message is in progress before AAD, data or Final. */
static int ensure_started(gp_cipher_ctx *ctx)
{
    if (ctx->key == NULL) {
        GP_RAISE(GP_R_NO_KEY_SET);
        return 0;
    }
    switch (ctx->iv_state) {
    case GP_IV_STARTED:
        return 1;
    case GP_IV_FINISHED:
        /* SP 800-38D §8: an IV is used once. */
        GP_RAISE(GP_R_MESSAGE_FINISHED);
        return 0;
    case GP_IV_DROPPED:
        GP_RAISE(GP_R_NEW_IV_NEEDED);
        return 0;
    case GP_IV_UNSET:
        /* As the default provider: a GCM encryption without an IV gets a random one, of at least
         * 96 bits (SP 800-38D §8.2.2; a shorter random IV repeats: found by fuzz_evp_diff). */
        if (!is_gcm(ctx) || !ctx->enc || ctx->ivlen < GCM_RANDOM_IV_MIN_LEN) {
            GP_RAISE(GP_R_NO_IV_SET);
            return 0;
        }
        if (RAND_bytes_ex(ctx->provctx->libctx, ctx->iv, ctx->ivlen, 0) <= 0) {
            GP_RAISE(GP_R_RANDOM_FAILURE);
            return 0;
        }
        break;
    case GP_IV_BUFFERED:
        break;
    }
    return gp_cipher_begin(ctx, ctx->iv, ctx->ivlen);
}

static GP_NOINLINE int aead_update(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                                   const unsigned char *in, size_t inl);

/*
 * The lane's shortcut takes AAD or data of a started message with no TLS record pending, inl <
 * GP_DEMAND_BYTES, when every check of aead_update holds (AAD before data, the per-IV limits, the
 * output size). The counts are kept before the call so that it is the last act. A request of 0
 * bytes changes nothing here and returns 1 with *outl = 0 there, as in aead_update.
 */
static inline int aead_lane_takes(gp_cipher_ctx *ctx, const unsigned char *out, size_t outsize,
                                  const unsigned char *in, size_t inl)
{
    /* inl < GP_DEMAND_BYTES: a count at most its lane maximum stays within its limit. */
    if (inl >= GP_DEMAND_BYTES || in == NULL)
        return 0;
    if (out == NULL) {
        if (ctx->text_bytes != 0 || ctx->aad_bytes > ctx->aad_lane_max)   /* AAD after data */
            return 0;
        ctx->aad_bytes += inl;
        return 1;
    }
    if (outsize < inl || ctx->text_bytes > ctx->text_lane_max)
        return 0;
    ctx->text_bytes += inl;
    return 1;
}

/* AAD and data of a message on the lane go straight to the default provider (a tail call where
 * `go` is armed); the rest takes aead_update. */
int gp_aead_update(void *vctx, unsigned char *out, size_t *outl, size_t outsize,
                   const unsigned char *in, size_t inl)
{
    gp_cipher_ctx *ctx = vctx;
    OSSL_FUNC_cipher_update_fn *go = ctx->lane.go;

    if (GP_LIKELY(go != NULL)) {
        if (GP_LIKELY(aead_lane_takes(ctx, out, outsize, in, inl)))
            return go(ctx->lane.algctx, out, outl, outsize, in, inl);
    } else if (ctx->lane.d != NULL && ctx->iv_state == GP_IV_STARTED && ctx->tls_aad_len == 0
               && aead_lane_takes(ctx, out, outsize, in, inl)) {
        return gp_lane_tail(ctx, out, outl, outsize, in, inl);
    }
    return aead_update(ctx, out, outl, outsize, in, inl);
}

static int aead_update_body(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                            const unsigned char *in, size_t inl);

static GP_NOINLINE int aead_update(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                                   const unsigned char *in, size_t inl)
{
    /* With a TLS record pending every shortcut is disarmed (aead_rearm ran when it was announced,
     * and none arms one then). The record leaves them so: a disarmed shortcut stands for less than
     * holds, never more, and the next entry point that re-arms them judges afresh. */
    const int record = ctx->tls_aad_len != 0;
    int ok = aead_update_body(ctx, out, outl, outsize, in, inl);

    if (!record)
        aead_rearm(ctx);
    return ok;
}

static int aead_update_body(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                            const unsigned char *in, size_t inl)
{
    *outl = 0;
    if (ctx->pipe != NULL) {
        gp_raise_pipeline_context();
        return 0;
    }
    if (inl == 0)
        return 1;
    if (!gp_cipher_check_update(outsize, inl, out))
        return 0;
    if (ctx->tls_aad_len != 0)   /* a TLS 1.2 record: the lane's shortcut never takes one */
        return is_gcm(ctx) ? gp_gcm_tls_record(ctx, out, outl, outsize, in, inl)
                           : gp_chachapoly_tls_record(ctx, out, outl, outsize, in, inl);
    if (in == NULL) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    /* Started implies a key (gp_cipher_begin ran with it); the rest is ensure_started's. */
    if (ctx->iv_state != GP_IV_STARTED && !ensure_started(ctx))
        return 0;
    if (out == NULL) {
        /* AAD: all of it precedes the data (SP 800-38D §7.1, RFC 8439 §2.8). */
        if (ctx->text_bytes != 0) {
            GP_RAISE(GP_R_AAD_AFTER_DATA);
            return 0;
        }
        if (!gp_aead_aad_fits(ctx->info->alg, ctx->aad_bytes, inl)) {
            GP_RAISE(GP_R_MESSAGE_TOO_LONG);
            return 0;
        }
        if (ctx->lane.d != NULL) {
            ctx->aad_bytes += inl;
            return gp_lane_update(ctx, out, outl, outsize, in, inl);
        }
        if (ctx->devmem && !gp_msg_is_host_memory(ctx->msg, in, inl)) {
            GP_RAISE(GP_R_DEVICE_MEMORY_AAD);
            return 0;
        }
        if (!gp_msg_aad(ctx->msg, in, inl)) {
            GP_RAISE(GP_R_EXECUTOR_FAILURE);
            return 0;
        }
        ctx->aad_bytes += inl;
        *outl = inl;   /* as the default provider reports AAD updates */
        return 1;
    }
    if (!gp_aead_text_fits(ctx->info->alg, ctx->text_bytes, inl)) {
        GP_RAISE(GP_R_MESSAGE_TOO_LONG);
        return 0;
    }
    /* A message on the lane that has absorbed nothing yet may start afresh on the engine, where
     * the policy sends it to the GPU; later its MAC state lives in the default provider's context
     * and it stays (batching/engine.h, gp_engine_move_to_gpu). */
    if (ctx->lane.d != NULL && inl >= GP_DEMAND_BYTES && ctx->text_bytes == 0 && ctx->aad_bytes == 0
        && gp_engine_move_to_gpu(ctx->provctx->engine, ctx->info->alg, inl, 1)) {
        const uint64_t last = ctx->last_text_bytes;

        gp_lane_close(ctx);
        if (!gp_cipher_begin(ctx, ctx->iv, ctx->ivlen))
            return 0;
        ctx->last_text_bytes = last;
    }
    if (ctx->lane.d != NULL) {
        ctx->text_bytes += inl;
        return gp_lane_update(ctx, out, outl, outsize, in, inl);
    }
    if (!gp_cipher_crypt(ctx, in, out, inl))
        return 0;
    ctx->text_bytes += inl;
    *outl = inl;
    return 1;
}

/* Final on the lane: the default provider makes the tag (encrypt) or checks the one set with
 * SET_TAG, in constant time (decrypt); the tag stays in its context for GET_TAG. */
static int lane_final(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize)
{
    int ok = ctx->lane.d->final(ctx->lane.algctx, out, outl, outsize);

    gp_cpu_clean_upper_state();
    ctx->iv_state = GP_IV_FINISHED;
    if (ctx->enc) {
        ctx->tag_ready = ok ? GP_TAG_LANE : GP_TAG_NONE;
        ctx->taglen_full |= ok;
    } else {
        ctx->tag_expected = 0;
        ctx->lane.tag_synced = 0;
    }
    /* A wrong tag is the verdict, returned as 0 without an error queued, as the default provider
     * returns it (libssl raises its own for a record). */
    if (!ok && ctx->enc)
        GP_RAISE(GP_R_EXECUTOR_FAILURE);
    return ok;
}

static GP_NOINLINE int aead_final(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize);

/* An encryption's Final on the lane, before the default's: the message is over, its tag is in the
 * lane's context, which answers GET_TAG from now on (the shortcuts as aead_rearm leaves them). */
static inline void lane_final_encrypted(gp_cipher_ctx *ctx)
{
    ctx->iv_state = GP_IV_FINISHED;
    ctx->tag_ready = GP_TAG_LANE;
    ctx->taglen_full = 1;   /* beside iv_state and tag_ready: one or two stores for the three */
    ctx->lane.go = NULL;
    ctx->lane.ask = ctx->lane.d->get_ctx_params;
}

int gp_aead_final(void *vctx, unsigned char *out, size_t *outl, size_t outsize)
{
    gp_cipher_ctx *ctx = vctx;

    /* The lane's shortcut for encryption: the default provider's final is the last act. Its tag is
     * then there for GET_TAG (its final cannot fail on a started message with a key), which the
     * default's context answers (`ask`). `go` armed stands for the lane open, a started message, no
     * record pending and a tail call. */
    if (GP_LIKELY(ctx->lane.go != NULL) && ctx->enc) {
        lane_final_encrypted(ctx);
        return ctx->lane.d->final(ctx->lane.algctx, out, outl, outsize);
    }
    if (ctx->lane.d != NULL && ctx->enc && ctx->iv_state == GP_IV_STARTED && ctx->tls_aad_len == 0) {
        int ok;

        lane_final_encrypted(ctx);
        if (ctx->lane.tail)
            return ctx->lane.d->final(ctx->lane.algctx, out, outl, outsize);
        ok = ctx->lane.d->final(ctx->lane.algctx, out, outl, outsize);
        gp_cpu_clean_upper_state();
        return ok;
    }
    /* And for decryption with its tag set: the default provider's verdict is the result. */
    if (ctx->lane.d != NULL && !ctx->enc && ctx->tag_expected && ctx->lane.tag_synced
        && ctx->iv_state == GP_IV_STARTED && ctx->tls_aad_len == 0) {
        ctx->iv_state = GP_IV_FINISHED;
        ctx->tag_expected = 0;
        ctx->lane.tag_synced = 0;
        ctx->lane.go = NULL;
        if (ctx->lane.tail)
            return ctx->lane.d->final(ctx->lane.algctx, out, outl, outsize);
        return lane_final(ctx, out, outl, outsize);
    }
    return aead_final(ctx, out, outl, outsize);
}

static int aead_final_body(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize);

static GP_NOINLINE int aead_final(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize)
{
    int ok = aead_final_body(ctx, out, outl, outsize);

    aead_rearm(ctx);
    return ok;
}

static int aead_final_body(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize)
{
    int r;
    (void)out;
    (void)outsize;
    *outl = 0;
    if (ctx->pipe != NULL) {
        gp_raise_pipeline_context();
        return 0;
    }
    if (ctx->tls_aad_len != 0) {
        GP_RAISE(GP_R_TLS_MODE);
        /* GCM takes a Final for a record that is not one: the record and its IV are over, as the
         * default provider ends them (ciphercommon_gcm.c gcm_tls_cipher); ChaCha20-Poly1305's
         * record stays pending (its length check refuses the call first). */
        if (is_gcm(ctx)) {
            if (ctx->lane.tls)
                gp_lane_leave_tls(ctx);
            ctx->tls_aad_len = 0;
            if (ctx->iv_state != GP_IV_DROPPED)
                ctx->iv_state = GP_IV_FINISHED;
        }
        return 0;
    }
    if (!ctx->enc && ctx->key != NULL && ctx->iv_state != GP_IV_FINISHED && !ctx->tag_expected) {
        GP_RAISE(GP_R_TAG_NOT_SET);   /* the tag must be set before a decrypt Final */
        return 0;
    }
    if (!ensure_started(ctx))
        return 0;
    if (ctx->lane.d != NULL) {
        if (!ctx->enc && !ctx->lane.tag_synced && !gp_lane_sync_tag(ctx))
            return 0;
        return lane_final(ctx, out, outl, outsize);
    }
    if (ctx->enc) {
        if (!gp_msg_tag(ctx->msg, ctx->tag_out)) {
            GP_RAISE(ctx->devmem ? GP_R_DEVICE_MEMORY_GPU_FAILURE : GP_R_EXECUTOR_FAILURE);
            return 0;
        }
        ctx->tag_ready = gp_msg_tag_pending(ctx->msg) ? GP_TAG_QUEUED : GP_TAG_OWN;
        ctx->taglen_full = 1;
        ctx->iv_state = GP_IV_FINISHED;
        return 1;
    }
    r = gp_msg_verify(ctx->msg, ctx->tag, ctx->taglen);
    ctx->tag_expected = 0;
    ctx->iv_state = GP_IV_FINISHED;
    if (r != GP_REQ_OK) {
        if (r != GP_REQ_BAD_TAG)   /* a wrong tag is the verdict alone (lane_final) */
            GP_RAISE(ctx->devmem ? GP_R_DEVICE_MEMORY_GPU_FAILURE : GP_R_EXECUTOR_FAILURE);
        return 0;
    }
    return 1;
}

int gp_aead_cipher(void *vctx, unsigned char *out, size_t *outl, size_t outsize,
                   const unsigned char *in, size_t inl)
{
    gp_cipher_ctx *ctx = vctx;

    /* EVP_Cipher(ctx, out, NULL, 0) is an AEAD's explicit Final: a decryption's tag is checked
     * there, for ChaCha20-Poly1305 as for GCM (releases before OpenSSL 3.0.22 returned at once for
     * ChaCha20-Poly1305 and so accepted any tag: docs/limitations.md). */
    if (in == NULL)
        return gp_aead_final(vctx, out, outl, outsize);
    /* ChaCha20-Poly1305's cipher call for 0 bytes: in TLS record mode it is a record shorter than
     * its tag (RFC 7905 §2: payload || tag), refused with the record left pending; otherwise it
     * processes nothing, as its update (closing the AAD there would let two AADs share one
     * Poly1305 input, RFC 8439 §2.8 pads the AAD once, after all of it), but with a key it begins
     * the message: the default provider makes the message's one-time Poly1305 key there (RFC 8439
     * §2.6), so a nonce set afterwards (TLS1_IV_FIXED) no longer applies to this message and is
     * refused until a new one starts. With no IV, after a Final, or with the IV dropped, the
     * default begins one on an all-zero or a used nonce: refused as an update would be (found by
     * fuzz_evp_diff, regressions d15 and d16). */
    if (inl == 0 && !is_gcm(ctx)) {
        int ok;

        *outl = 0;
        if (ctx->tls_aad_len != 0)
            return gp_chachapoly_tls_record(ctx, out, outl, outsize, in, 0);
        if (ctx->key == NULL)
            return 1;
        ok = ensure_started(ctx);
        ctx->begun |= ok;
        aead_rearm(ctx);
        return ok;
    }
    /* GCM's cipher call for 0 bytes does what one for more does before it touches data (its update
     * returns before any of it: ciphercommon_gcm.c gcm_cipher_internal): a pending TLS record is
     * that record, which fails; otherwise the message starts, an encryption with no IV on a random
     * one, and every check of a start applies (key, IV state). */
    if (inl == 0 && is_gcm(ctx)) {
        int ok;

        *outl = 0;
        if (ctx->tls_aad_len != 0) {
            ok = gp_gcm_tls_record(ctx, out, outl, outsize, in, 0);
        } else {
            ok = ctx->iv_state == GP_IV_STARTED || ensure_started(ctx);
            ctx->begun |= ok;
        }
        aead_rearm(ctx);
        return ok;
    }
    return gp_aead_update(vctx, out, outl, outsize, in, inl);
}

/* ---- params ---- */

static int set_tag(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    if (p->data_type != OSSL_PARAM_OCTET_STRING || p->data_size == 0 || p->data_size > AEAD_TAG_LEN) {
        GP_RAISE(GP_R_INVALID_TAG_LENGTH);
        return 0;
    }
    /* A length alone sets ChaCha20-Poly1305's tag length; GCM takes only a decryption's expected
     * tag, bytes and all (as the default provider: its lane refused the length alone already). */
    if (p->data == NULL && is_gcm(ctx)) {
        GP_RAISE(GP_R_INVALID_TAG_LENGTH);
        return 0;
    }
    if (p->data != NULL) {
        if (ctx->enc) {
            GP_RAISE(GP_R_TAG_NOT_NEEDED);
            return 0;
        }
        memcpy(ctx->tag, p->data, p->data_size);
        ctx->tag_expected = 1;
    }
    ctx->taglen = p->data_size;
    ctx->taglen_full = 0;
    return 1;
}

static int set_ivlen(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    size_t sz;

    if (!OSSL_PARAM_get_size_t(p, &sz)) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    /* GCM: 1..128 bytes; ChaCha20-Poly1305: the 96-bit nonce only (RFC 8439 §2.8), as default. */
    if (is_gcm(ctx) ? sz == 0 || sz > GCM_MAX_IV_LEN : sz != CHACHAPOLY_IV_LEN) {
        GP_RAISE(GP_R_INVALID_IV_LENGTH);
        return 0;
    }
    if (sz != ctx->ivlen) {
        ctx->ivlen = sz;
        /* An IV set (or a message begun) at the old length does not hold at the new one: OpenSSL
         * 3.0's default goes on with the old bytes and whatever lies past them, later releases
         * refuse (ciphercommon_gcm.c: "If the iv was already set or autogenerated, it is
         * invalid"); here the message waits for a new IV (a finished one was refusing anyway). */
        if (ctx->iv_state != GP_IV_UNSET) {
            ctx->iv_state = GP_IV_DROPPED;
            /* a finished encryption's lane context would answer the IV read itself (lane_has_answers):
             * its tag comes over and the lane closes, the dropped IV is the context's to refuse */
            if (ctx->tag_ready == GP_TAG_LANE)
                gp_lane_close(ctx);
        }
    }
    return 1;
}

/* TLS1_AAD: keep the record header, with the length corrected to the payload (RFC 5246 §6.2.3.3). */
static int set_tls_aad(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    size_t len;
    uint8_t *aad = ctx->tls_aad;

    if (p->data_type != OSSL_PARAM_OCTET_STRING || p->data_size != TLS_AAD_LEN || p->data == NULL)
        goto bad;
    /* A record's explicit nonce and tag sit in its buffer, which the host reads and writes. */
    if (ctx->devmem) {
        GP_RAISE(GP_R_DEVICE_MEMORY_TLS);
        return 0;
    }
    memcpy(aad, p->data, TLS_AAD_LEN);
    len = (size_t)aad[TLS_AAD_LEN - 2] << 8 | aad[TLS_AAD_LEN - 1];
    if (is_gcm(ctx)) {
        if (len < TLS_GCM_EXPLICIT_IV_LEN)
            goto bad;
        len -= TLS_GCM_EXPLICIT_IV_LEN;
    }
    if (!ctx->enc) {
        if (len < AEAD_TAG_LEN)
            goto bad;
        len -= AEAD_TAG_LEN;
    }
    aad[TLS_AAD_LEN - 2] = (uint8_t)(len >> 8);
    aad[TLS_AAD_LEN - 1] = (uint8_t)len;
    ctx->tls_payload = len;
    ctx->tls_aad_len = TLS_AAD_LEN;
    ctx->tls_aad_pad = AEAD_TAG_LEN;   /* the tag the record carries beyond the payload */
    gp_lane_tls_aad(ctx, p);
    return 1;
bad:
    /* The lane's context holds an earlier record's AAD when one was pending (it never sees this
     * one): that record is not the lane's to run any more. */
    if (ctx->lane.tls && ctx->tls_aad_len == TLS_AAD_LEN)
        gp_lane_leave_tls(ctx);
    /* A 13-byte TLS1_AAD whose length field does not fit leaves record mode on in the default
     * provider, on the AAD as given (GCM: ciphercommon_gcm.c gcm_tls_init keeps it before its
     * checks; ChaCha20-Poly1305: a record already announced stays pending). Here the next record
     * is refused instead (TLS_AAD_REFUSED): it would be sent under AAD the caller was told was not
     * taken. */
    if (p->data_type == OSSL_PARAM_OCTET_STRING && p->data_size == TLS_AAD_LEN && p->data != NULL
        && (is_gcm(ctx) || ctx->tls_aad_len != 0))
        ctx->tls_aad_len = TLS_AAD_REFUSED;
    else
        ctx->tls_aad_len = 0;
    GP_RAISE(GP_R_INVALID_TLS_AAD);
    return 0;
}

static int set_tls_iv_fixed(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    if (p->data_type != OSSL_PARAM_OCTET_STRING || p->data == NULL) {
        GP_RAISE(GP_R_INVALID_IV_LENGTH);
        return 0;
    }
    if (ctx->devmem) {
        GP_RAISE(GP_R_DEVICE_MEMORY_TLS);
        return 0;
    }
    /* Records restart the message from the fixed IV, on the lane's context too where one is open
     * (cpu_lane.c, "TLS 1.2"). */
    return is_gcm(ctx) ? gp_gcm_tls_iv_fixed(ctx, p) : gp_chachapoly_tls_iv_fixed(ctx, p);
}

/* One parameter from the lane's context: what it holds of the message (its tag, its IV). */
static int lane_get_one(gp_cipher_ctx *ctx, OSSL_PARAM *p)
{
    OSSL_PARAM one[2] = { *p, OSSL_PARAM_END };

    if (!ctx->lane.d->get_ctx_params(ctx->lane.algctx, one)) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    p->return_size = one[0].return_size;
    return 1;
}

/* GCM's IV and UPDATED_IV are the same: the IV of the current message (counted up in TLS mode). */
static int get_iv(gp_cipher_ctx *ctx, OSSL_PARAM *p)
{
    if (ctx->iv_state == GP_IV_UNSET) {
        GP_RAISE(GP_R_NO_IV_SET);
        return 0;
    }
    /* A dropped IV is not the IV of anything (after an IV length change its bytes past the old
     * length are whatever an earlier IV left there) */
    if (ctx->iv_state == GP_IV_DROPPED) {
        GP_RAISE(GP_R_NEW_IV_NEEDED);
        return 0;
    }
    if (p->data_size < ctx->ivlen) {
        GP_RAISE(GP_R_INVALID_IV_LENGTH);
        return 0;
    }
    /* The context's own copy is the IV, on the lane too: every IV passes through it. */
    if (!OSSL_PARAM_set_octet_string(p, ctx->iv, ctx->ivlen)
        && !OSSL_PARAM_set_octet_ptr(p, ctx->iv, ctx->ivlen)) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    return 1;
}

static int get_tag(gp_cipher_ctx *ctx, OSSL_PARAM *p)
{
    size_t sz = p->data_size;

    if (sz == 0 || sz > AEAD_TAG_LEN) {
        GP_RAISE(GP_R_INVALID_TAG_LENGTH);
        return 0;
    }
    /* Only an encryption that reached Final has a tag to give (SP 800-38D §7.1). */
    if (!ctx->enc || !ctx->tag_ready) {
        GP_RAISE(GP_R_TAG_NOT_AVAILABLE);
        return 0;
    }
    if (ctx->tag_ready == GP_TAG_LANE)
        return lane_get_one(ctx, p);
    if (!gp_cipher_take_tag(ctx))
        return 0;
    if (!OSSL_PARAM_set_octet_string(p, ctx->tag_out, sz)) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    return 1;
}

/* AEAD_TAGLEN as the default provider reads it: GCM the length of the last SET_TAG, 16 before one
 * or after an encrypt Final or a TLS record (ciphercommon_gcm_hw.c); ChaCha20-Poly1305 the length of
 * the last SET_TAG, 0 before one (cipher_chacha20_poly1305.c). */
static size_t taglen_param(const gp_cipher_ctx *ctx)
{
    if (!is_gcm(ctx))
        return ctx->taglen;
    return ctx->taglen_full || ctx->taglen == 0 ? AEAD_TAG_LEN : ctx->taglen;
}

/* Is `key` OSSL_CIPHER_PARAM_AEAD_TLS1_AAD_PAD ("tlsaadpad")? Byte by byte, as gp_param_is_ivlen. */
static inline int gp_param_is_tls_aad_pad(const char *k)
{
    return k[0] == 't' && k[1] == 'l' && k[2] == 's' && k[3] == 'a' && k[4] == 'a' && k[5] == 'd' && k[6] == 'p'
           && k[7] == 'a' && k[8] == 'd' && k[9] == '\0';
}

/* Does the caller ask for GP_CIPHER_PARAM_MEMORY (which the lane's context does not know)? A first
 * letter decides for every OpenSSL name. */
static int asks_memory(const OSSL_PARAM params[])
{
    for (const OSSL_PARAM *p = params; p != NULL && p->key != NULL; p++)
        if (p->key[0] == 'g' && (strcmp(p->key, GP_CIPHER_PARAM_MEMORY) == 0
                                 || strcmp(p->key, GP_CIPHER_PARAM_CUDA_STREAM) == 0))
            return 1;
    return 0;
}

/*
 * One pass over the caller's params, most frequent names first: EVP reads IVLEN at every init and
 * the tag at every message, and a locate per known name (a strcmp each) was a visible part of a
 * small message's cost.
 */
static GP_NOINLINE int aead_get_ctx_params(gp_cipher_ctx *ctx, OSSL_PARAM params[]);

int gp_aead_get_ctx_params(void *vctx, OSSL_PARAM params[])
{
    gp_cipher_ctx *ctx = vctx;

    /* One param: EVP asks for the IV length at every init (EVP_CIPHER_CTX_get_iv_length), and for
     * the tag after each message. Answered here, a comparison or two each and no frame, by the
     * first letter: 'i' may be the IV length, 'g' is the only one that may be gpuprov's own name
     * (asks_memory), and any other goes to the lane's context where it answers. A size in another
     * form than EVP's takes the general path, with the caller's arguments where they are. */
    if (GP_LIKELY(params != NULL && params[0].key != NULL && params[1].key == NULL)) {
        const char *k = params[0].key;

        if (k[0] == 'i') {
            if (gp_param_is_ivlen(k) && gp_param_is_size_t(params))
                return gp_param_put_size(params, ctx->ivlen);
        } else if (k[0] != 'g' && GP_LIKELY(ctx->lane.ask != NULL)) {   /* lane_has_answers */
            return ctx->lane.ask(ctx->lane.algctx, params);
        } else if (ctx->tls_aad_len != 0 && gp_param_is_tls_aad_pad(k) && gp_param_is_size_t(params)) {
            /* EVP's TLS1_AAD ctrl asks for the padding right after it: the tag a record carries. */
            return gp_param_put_size(params, ctx->tls_aad_pad);
        }
    }
    return aead_get_ctx_params(ctx, params);
}

static int aead_get_ctx_params_body(gp_cipher_ctx *ctx, OSSL_PARAM params[]);

/* GET_IV_GEN may start a message: the shortcut is re-judged after it. */
static GP_NOINLINE int aead_get_ctx_params(gp_cipher_ctx *ctx, OSSL_PARAM params[])
{
    int ok;

    if (lane_has_answers(ctx) && !asks_memory(params))
        return ctx->lane.d->get_ctx_params(ctx->lane.algctx, params);
    ok = aead_get_ctx_params_body(ctx, params);

    aead_rearm(ctx);
    return ok;
}

static int aead_get_ctx_params_body(gp_cipher_ctx *ctx, OSSL_PARAM params[])
{
    int ok = 1;

    /* The TLS padding, asked after each TLS1_AAD: the lane's context need not answer it. */
    if (ctx->tls_aad_len != 0 && params[0].key != NULL && params[1].key == NULL
        && strcmp(params[0].key, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD_PAD) == 0)
        return gp_param_set_size(params, ctx->tls_aad_pad);
    for (OSSL_PARAM *p = params; p != NULL && p->key != NULL && ok; p++) {
        const char *k = p->key;

        if (strcmp(k, OSSL_CIPHER_PARAM_IVLEN) == 0)
            ok = gp_param_set_size(p, ctx->ivlen);
        else if (strcmp(k, OSSL_CIPHER_PARAM_AEAD_TAG) == 0)
            ok = get_tag(ctx, p);
        else if (strcmp(k, OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG) == 0)
            ok = gp_pipe_get_tags(ctx, p);
        else if (strcmp(k, OSSL_CIPHER_PARAM_KEYLEN) == 0)
            ok = gp_param_set_size(p, ctx->info->keylen);
        else if (strcmp(k, OSSL_CIPHER_PARAM_AEAD_TAGLEN) == 0)
            ok = gp_param_set_size(p, taglen_param(ctx));
        else if (strcmp(k, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD_PAD) == 0)
            ok = gp_param_set_size(p, ctx->tls_aad_pad);
        else if (strcmp(k, GP_CIPHER_PARAM_MEMORY) == 0)
            ok = gp_cipher_get_memory(ctx, p);
        else if (strcmp(k, GP_CIPHER_PARAM_CUDA_STREAM) == 0)
            ok = gp_cipher_get_stream(ctx, p);
        else if (!is_gcm(ctx))
            continue;   /* ChaCha20-Poly1305 has no IV params (as the default provider) */
        else if (strcmp(k, OSSL_CIPHER_PARAM_IV) == 0 || strcmp(k, OSSL_CIPHER_PARAM_UPDATED_IV) == 0)
            ok = get_iv(ctx, p);
        else if (strcmp(k, OSSL_CIPHER_PARAM_AEAD_TLS1_GET_IV_GEN) == 0)
            ok = gp_gcm_get_iv_gen(ctx, p);
    }
    return ok;
}

/*
 * One pass over the caller's params, in their order (EVP's ctrls and libssl set one at a time; a
 * locate per known name was a visible part of a TLS record's cost). On the lane every param then
 * goes on to the default provider's context as well, which keeps the message's own copy of them.
 */
int gp_aead_set_ctx_params(void *vctx, const OSSL_PARAM params[])
{
    gp_cipher_ctx *ctx = vctx;
    size_t all = 0, tls = 0;   /* TLS1_AAD and TLS1_IV_FIXED reach the lane their own way */
    const OSSL_PARAM *stream = NULL;
    int ok = 1, tags_only = 1, tag = 0;

    if (params == NULL)
        return 1;
    for (const OSSL_PARAM *p = params; ok && p->key != NULL; p++, all++) {
        const char *k = p->key;

        if (gp_param_key_is(k, OSSL_CIPHER_PARAM_AEAD_TAG)) {
            ok = set_tag(ctx, p);
            tag = 1;
            continue;
        }
        if (gp_param_key_is(k, OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG)) {
            ok = gp_pipe_set_tags(ctx, p);
            continue;
        }
        tags_only = 0;
        if (gp_param_key_is(k, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD))
            ok = set_tls_aad(ctx, p), tls++;
        else if (gp_param_key_is(k, OSSL_CIPHER_PARAM_AEAD_IVLEN))
            ok = set_ivlen(ctx, p);
        else if (gp_param_key_is(k, OSSL_CIPHER_PARAM_KEYLEN))
            ok = gp_cipher_set_keylen(ctx, params);
        else if (gp_param_key_is(k, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED))
            ok = set_tls_iv_fixed(ctx, p), tls++;
        else if (is_gcm(ctx) && gp_param_key_is(k, OSSL_CIPHER_PARAM_AEAD_TLS1_SET_IV_INV))
            ok = gp_gcm_set_iv_inv(ctx, p);
        else if (gp_param_key_is(k, GP_CIPHER_PARAM_MEMORY))
            ok = gp_cipher_set_memory(ctx, p);
        else if (gp_param_key_is(k, GP_CIPHER_PARAM_CUDA_STREAM))
            stream = p;   /* after the loop: the memory mode first, wherever the caller put it */
        /* PADDING, TLS_VERSION, TLS_MAC_SIZE and unknown keys: accepted with no effect. */
    }
    if (ok && stream != NULL)
        ok = gp_cipher_set_stream(ctx, stream);
    if (ok && ctx->lane.d != NULL && tls != all) {
        ok = gp_lane_set_params(ctx, params, tls);
        if (ok && tag)   /* the loop has seen it: no second search of the list (every SET_TAG) */
            ctx->lane.tag_synced = ctx->tag_expected;
    }
    /* A tag (SET_TAG before each decryption) changes nothing the shortcuts stand for. */
    if (!tags_only)
        aead_rearm(ctx);
    return ok;
}
