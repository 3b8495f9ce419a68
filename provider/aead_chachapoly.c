/* SPDX-License-Identifier: Apache-2.0 */
/* ChaCha20-Poly1305's own part of the AEAD mode: TLS 1.2 records and their nonce (RFC 7905), its
 * parameter lists. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>

#include "aead.h"
#include "pipeline.h"

/* One TLS 1.2 record, checked (RFC 7905 §2). Out of line, as gp_gcm_tls_record. */
GP_NOINLINE int gp_chachapoly_tls_record(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                                         const unsigned char *in, size_t len)
{
    uint8_t nonce[CHACHAPOLY_IV_LEN];
    size_t payload = ctx->tls_payload;
    int ok = 0;

    /* RFC 7905 §2: payload || tag in one update. A call of another shape is refused before it
     * touches anything: the record stays pending (as the default provider's length check). */
    if (out == NULL || in == NULL || len != payload + AEAD_TAG_LEN) {
        GP_RAISE(GP_R_INVALID_TLS_RECORD);
        return 0;
    }
    if (ctx->key == NULL) {
        GP_RAISE(GP_R_NO_KEY_SET);
        goto done;
    }
    /* A refused TLS1_AAD came after the one this record was announced by (set_tls_aad). */
    if (ctx->tls_aad_len != TLS_AAD_LEN) {
        GP_RAISE(GP_R_INVALID_TLS_AAD);
        goto done;
    }
    if (gp_lane_tls_ready(ctx)) {   /* one call: the lane's context made this nonce at TLS1_AAD */
        gp_cipher_message_reset(ctx);
        ok = gp_lane_tls_record(ctx, out, outl, outsize, in, len);
        goto done;
    }
    if (ctx->lane.d != NULL)
        gp_lane_leave_tls(ctx);   /* the record runs on the engine's message, begun just below */
    /* RFC 7905 §2: the 64-bit sequence number, left-padded, is XORed into the fixed 96-bit IV. */
    memcpy(nonce, ctx->iv, sizeof(nonce));
    for (int i = 0; i < 8; i++)
        nonce[4 + i] ^= ctx->tls_aad[i];
    if (!gp_cipher_begin(ctx, nonce, sizeof(nonce)))
        goto done;
    if (!gp_msg_aad(ctx->msg, ctx->tls_aad, TLS_AAD_LEN) || !gp_msg_crypt(ctx->msg, in, out, payload)) {
        GP_RAISE(GP_R_EXECUTOR_FAILURE);
        goto done;
    }
    if (ctx->enc) {
        if (!gp_msg_tag(ctx->msg, out + payload)) {
            GP_RAISE(GP_R_EXECUTOR_FAILURE);
            goto done;
        }
        *outl = payload + AEAD_TAG_LEN;
    } else {
        if (gp_msg_verify(ctx->msg, in + payload, AEAD_TAG_LEN) != GP_REQ_OK) {
            OPENSSL_cleanse(out, payload);
            GP_RAISE(GP_R_TAG_MISMATCH);
            goto done;
        }
        *outl = payload;
    }
    ok = 1;
done:
    if (!ok && ctx->lane.tls)
        gp_lane_leave_tls(ctx);
    OPENSSL_cleanse(nonce, sizeof(nonce));
    ctx->iv_state = GP_IV_FINISHED;
    ctx->tls_aad_len = 0;
    return ok;
}

/* TLS1_IV_FIXED: the whole 96-bit nonce is fixed per connection (RFC 7905 §2). The caller checked
 * the param's type and the memory mode. */
int gp_chachapoly_tls_iv_fixed(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    size_t len = p->data_size;

    if (len != CHACHAPOLY_IV_LEN) {
        GP_RAISE(GP_R_INVALID_IV_LENGTH);
        return 0;
    }
    /* The default provider swaps the nonce under a running message, its block counter and MAC
     * going on, and under a pending record, which then runs on the fixed nonce without its
     * sequence number (the nonce of that connection's record 0): both refused, nothing taken. */
    if (ctx->tls_aad_len != 0) {
        GP_RAISE(GP_R_TLS_MODE);
        return 0;
    }
    if (gp_cipher_message_touched(ctx) || ctx->iv_state == GP_IV_DROPPED) {
        GP_RAISE(GP_R_MESSAGE_IN_PROGRESS);
        return 0;
    }
    ctx->tls_fixed = 1;
    memcpy(ctx->iv, p->data, len);
    ctx->ivlen = len;
    ctx->iv_state = GP_IV_BUFFERED;
    gp_lane_tls_fixed(ctx);
    return 1;
}

const OSSL_PARAM *gp_chachapoly_gettable_ctx_params(void *cctx, void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_KEYLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_IVLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_AEAD_TAGLEN, NULL),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, NULL, 0),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_AEAD_TLS1_AAD_PAD, NULL),
        OSSL_PARAM_utf8_string(GP_CIPHER_PARAM_MEMORY, NULL, 0),
        OSSL_PARAM_uint64(GP_CIPHER_PARAM_CUDA_STREAM, NULL),
        OSSL_PARAM_octet_ptr(OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG, NULL, 0),
        OSSL_PARAM_END
    };

    (void)cctx;
    (void)provctx;
    return params;
}

const OSSL_PARAM *gp_chachapoly_settable_ctx_params(void *cctx, void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_KEYLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, NULL),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_AAD, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, NULL, 0),
        OSSL_PARAM_utf8_string(GP_CIPHER_PARAM_MEMORY, NULL, 0),
        OSSL_PARAM_uint64(GP_CIPHER_PARAM_CUDA_STREAM, NULL),
        OSSL_PARAM_octet_ptr(OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG, NULL, 0),
        OSSL_PARAM_END
    };

    (void)cctx;
    (void)provctx;
    return params;
}
