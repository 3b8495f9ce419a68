/* SPDX-License-Identifier: Apache-2.0 */
/* AES-GCM's own part of the AEAD mode: TLS 1.2 records (RFC 5288), its IV's fixed and invocation
 * fields (SP 800-38D §8.2.1), its parameter lists. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "aead.h"
#include "pipeline.h"

/*
 * A GCM record gpuprov refuses where the default provider's got as far as its IV and crypto
 * (ciphercommon_gcm.c gcm_tls_cipher): its IV took the record's explicit nonce when decrypting
 * (setivinv), and its AEAD_TAGLEN reads 16 (ossl_gcm_one_shot). The context takes both, so that what
 * follows a record that failed on both agrees (an encryption's record succeeds there: the
 * difference is the refusal itself).
 */
static void gcm_record_refused_late(gp_cipher_ctx *ctx, const unsigned char *in)
{
    if (!ctx->enc)
        memcpy(ctx->iv + ctx->ivlen - TLS_GCM_EXPLICIT_IV_LEN, in, TLS_GCM_EXPLICIT_IV_LEN);
    ctx->taglen_full = 1;
}

/* One TLS 1.2 record, checked, in place (RFC 5288 §3). Out of line: inlined into the update, its
 * frame made every update save six registers. */
GP_NOINLINE int gp_gcm_tls_record(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                                  const unsigned char *in, size_t len)
{
    size_t payload;
    int ok = 0;

    /* The IV the record would build on was dropped (an IV length change, or a key or direction
     * change under a message: GP_IV_DROPPED): after an IV length change its bytes past the old
     * length are whatever an earlier IV left there. Refused, the IV stays dropped. */
    if (ctx->iv_state == GP_IV_DROPPED) {
        GP_RAISE(GP_R_NEW_IV_NEEDED);
        if (out == in && len >= TLS_GCM_EXPLICIT_IV_LEN + AEAD_TAG_LEN && ctx->key != NULL && ctx->iv_gen
            && ctx->ivlen >= TLS_GCM_EXPLICIT_IV_LEN)
            gcm_record_refused_late(ctx, in);
        if (ctx->lane.tls)
            gp_lane_leave_tls(ctx);   /* the lane's context holds the record's AAD */
        ctx->tls_aad_len = 0;
        return 0;
    }
    /* RFC 5288 §3: explicit nonce || ciphertext || tag, processed in place in one update. */
    if (out != in || len < TLS_GCM_EXPLICIT_IV_LEN + AEAD_TAG_LEN) {
        GP_RAISE(GP_R_INVALID_TLS_RECORD);
        goto done;
    }
    if (ctx->key == NULL || !ctx->iv_gen) {
        GP_RAISE(ctx->key == NULL ? GP_R_NO_KEY_SET : GP_R_NO_IV_SET);
        goto done;
    }
    /* The explicit nonce is the IV's last 8 bytes: an AEAD_IVLEN set shorter after TLS1_IV_FIXED
     * would put it before the IV (found by fuzz_evp_diff; OpenSSL 3.0's default writes there). */
    if (ctx->ivlen < TLS_GCM_EXPLICIT_IV_LEN) {
        GP_RAISE(GP_R_INVALID_IV_LENGTH);
        goto done;
    }
    /* SP 800-38D §8.3: bound the invocations of one key on the sending side. */
    if (ctx->enc && ++ctx->tls_enc_records == 0) {
        GP_RAISE(GP_R_TOO_MANY_RECORDS);
        goto done;
    }
    /* From here the default provider's record sets its tag length to 16, whatever the outcome
     * (ciphercommon_gcm_hw.c ossl_gcm_one_shot): AEAD_TAGLEN reads as its does. */
    ctx->taglen_full = 1;
    /* The TLS1_AAD for this record was refused: the record is too (the default would run it on
     * the AAD's bytes as given, its length field uncorrected). */
    if (ctx->tls_aad_len != TLS_AAD_LEN) {
        gcm_record_refused_late(ctx, in);
        GP_RAISE(GP_R_INVALID_TLS_AAD);
        goto done;
    }
    if (gp_lane_tls_ready(ctx)) {
        /* One call into the lane's context, which does what follows on its own copy of the IV;
         * this copy keeps in step (cpu_lane.c, "TLS 1.2"). */
        if (ctx->enc)
            for (size_t i = ctx->ivlen; i-- > ctx->ivlen - TLS_GCM_EXPLICIT_IV_LEN && ++ctx->iv[i] == 0;)
                ;
        else
            memcpy(ctx->iv + ctx->ivlen - TLS_GCM_EXPLICIT_IV_LEN, in, TLS_GCM_EXPLICIT_IV_LEN);
        gp_cipher_message_reset(ctx);
        ok = gp_lane_tls_record(ctx, out, outl, outsize, in, len);
        goto done;
    }
    if (ctx->lane.d != NULL)
        gp_lane_leave_tls(ctx);   /* the record runs on the engine's message, begun just below */
    if (ctx->enc) {
        /* The invocation field goes out as the explicit nonce, then counts up (§8.2.1). */
        memcpy(out, ctx->iv + ctx->ivlen - TLS_GCM_EXPLICIT_IV_LEN, TLS_GCM_EXPLICIT_IV_LEN);
        if (!gp_cipher_begin(ctx, ctx->iv, ctx->ivlen))
            goto done;
        for (size_t i = ctx->ivlen; i-- > ctx->ivlen - TLS_GCM_EXPLICIT_IV_LEN && ++ctx->iv[i] == 0;)
            ;
    } else {
        memcpy(ctx->iv + ctx->ivlen - TLS_GCM_EXPLICIT_IV_LEN, in, TLS_GCM_EXPLICIT_IV_LEN);
        if (!gp_cipher_begin(ctx, ctx->iv, ctx->ivlen))
            goto done;
    }
    payload = len - TLS_GCM_EXPLICIT_IV_LEN - AEAD_TAG_LEN;
    in += TLS_GCM_EXPLICIT_IV_LEN;
    out += TLS_GCM_EXPLICIT_IV_LEN;
    if (!gp_msg_aad(ctx->msg, ctx->tls_aad, TLS_AAD_LEN) || !gp_msg_crypt(ctx->msg, in, out, payload)) {
        GP_RAISE(GP_R_EXECUTOR_FAILURE);
        goto done;
    }
    if (ctx->enc) {
        if (!gp_msg_tag(ctx->msg, out + payload)) {
            GP_RAISE(GP_R_EXECUTOR_FAILURE);
            goto done;
        }
        *outl = len;
    } else {
        if (gp_msg_verify(ctx->msg, in + payload, AEAD_TAG_LEN) != GP_REQ_OK) {
            OPENSSL_cleanse(out, payload);   /* nothing of a forged record reaches the caller */
            GP_RAISE(GP_R_TAG_MISMATCH);
            goto done;
        }
        *outl = payload;
    }
    ok = 1;
done:
    if (!ok && ctx->lane.tls)
        gp_lane_leave_tls(ctx);   /* refused here: the default's context still holds the record's AAD */
    ctx->iv_state = GP_IV_FINISHED;
    ctx->tls_aad_len = 0;
    return ok;
}

/* TLS1_IV_FIXED: the fixed field, the invocation field drawn when encrypting (RFC 5288 §3, SP
 * 800-38D §8.2.1). The caller checked the param's type and the memory mode. */
int gp_gcm_tls_iv_fixed(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    size_t len = p->data_size;

    /* RFC 5288 §3: a fixed field of at least 4 bytes and an invocation field of at least 8. */
    if (len != (size_t)-1 && (len < TLS_GCM_FIXED_IV_LEN || ctx->ivlen < len + TLS_GCM_EXPLICIT_IV_LEN))
        goto bad;
    ctx->tls_fixed = 1;
    if (len == (size_t)-1) {
        /* EVP_CTRL_GCM_SET_IV_FIXED with length -1: the whole IV is given. */
        memcpy(ctx->iv, p->data, ctx->ivlen);
    } else {
        memcpy(ctx->iv, p->data, len);
        if (ctx->enc && RAND_bytes_ex(ctx->provctx->libctx, ctx->iv + len, ctx->ivlen - len, 0) <= 0) {
            if (ctx->lane.tls)
                gp_lane_leave_tls(ctx);   /* the IV changed here and not there */
            GP_RAISE(GP_R_RANDOM_FAILURE);
            return 0;
        }
    }
    ctx->iv_gen = 1;
    ctx->iv_state = GP_IV_BUFFERED;
    gp_lane_tls_fixed(ctx);
    return 1;
bad:
    GP_RAISE(GP_R_INVALID_IV_LENGTH);
    return 0;
}

/* TLS1_SET_IV_INV (GCM): the peer's invocation field, for decryption (SP 800-38D §8.2.1). */
int gp_gcm_set_iv_inv(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    if (p->data_type != OSSL_PARAM_OCTET_STRING || p->data == NULL || p->data_size == 0
        || p->data_size > ctx->ivlen || !ctx->iv_gen || ctx->key == NULL || ctx->enc) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    if (ctx->iv_state == GP_IV_DROPPED) {
        GP_RAISE(GP_R_NEW_IV_NEEDED);
        return 0;
    }
    memcpy(ctx->iv + ctx->ivlen - p->data_size, p->data, p->data_size);
    return gp_cipher_begin(ctx, ctx->iv, ctx->ivlen);
}

/* TLS1_GET_IV_GEN (GCM): hand out the invocation field for this record and count up. */
int gp_gcm_get_iv_gen(gp_cipher_ctx *ctx, OSSL_PARAM *p)
{
    size_t olen = p->data_size;

    if (p->data_type != OSSL_PARAM_OCTET_STRING || p->data == NULL || !ctx->iv_gen
        || ctx->key == NULL) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    if (ctx->iv_state == GP_IV_DROPPED) {
        GP_RAISE(GP_R_NEW_IV_NEEDED);
        return 0;
    }
    if (!gp_cipher_begin(ctx, ctx->iv, ctx->ivlen))
        return 0;
    if (olen == 0 || olen > ctx->ivlen)
        olen = ctx->ivlen;
    memcpy(p->data, ctx->iv + ctx->ivlen - olen, olen);
    p->return_size = olen;
    for (size_t i = ctx->ivlen; i-- > ctx->ivlen - TLS_GCM_EXPLICIT_IV_LEN && ++ctx->iv[i] == 0;)
        ;
    return 1;
}

const OSSL_PARAM *gp_gcm_gettable_ctx_params(void *cctx, void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_KEYLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_IVLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_AEAD_TAGLEN, NULL),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_IV, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_UPDATED_IV, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, NULL, 0),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_AEAD_TLS1_AAD_PAD, NULL),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_GET_IV_GEN, NULL, 0),
        OSSL_PARAM_utf8_string(GP_CIPHER_PARAM_MEMORY, NULL, 0),
        OSSL_PARAM_uint64(GP_CIPHER_PARAM_CUDA_STREAM, NULL),
        OSSL_PARAM_octet_ptr(OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG, NULL, 0),
        OSSL_PARAM_END
    };

    (void)cctx;
    (void)provctx;
    return params;
}

const OSSL_PARAM *gp_gcm_settable_ctx_params(void *cctx, void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, NULL),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_AAD, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_SET_IV_INV, NULL, 0),
        OSSL_PARAM_utf8_string(GP_CIPHER_PARAM_MEMORY, NULL, 0),
        OSSL_PARAM_uint64(GP_CIPHER_PARAM_CUDA_STREAM, NULL),
        OSSL_PARAM_octet_ptr(OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG, NULL, 0),
        OSSL_PARAM_END
    };

    (void)cctx;
    (void)provctx;
    return params;
}
