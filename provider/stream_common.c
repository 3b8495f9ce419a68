/* SPDX-License-Identifier: Apache-2.0 */
/* Stream modes (AES-CTR, ChaCha20): init, update and params over the engine's messages. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "cipher_ctx.h"

/* Bytes per counter step: the AES block, or the ChaCha20 block (RFC 8439 §2.3). */
static size_t block_bytes(const gp_cipher_ctx *ctx)
{
    return ctx->info->alg == GP_ALG_AES_CTR ? 16 : 64;
}

/*
 * Advance a counter block by n steps, as the default provider counts: AES-CTR treats all 16 bytes
 * as one big-endian integer (SP 800-38A Appendix B.1, OpenSSL's ctr128); OpenSSL's ChaCha20 IV is
 * a little-endian 32-bit counter that carries into the next word, i.e. a 64-bit LE counter.
 */
static void counter_add(const gp_cipher_ctx *ctx, uint8_t *ctr, uint64_t n)
{
    if (ctx->info->alg == GP_ALG_AES_CTR) {
        for (int i = 15; i >= 0 && n != 0; i--) {
            uint64_t s = (uint64_t)ctr[i] + (n & 0xff);

            ctr[i] = (uint8_t)s;
            n = (n >> 8) + (s >> 8);
        }
    } else {
        for (int i = 0; i < 8 && n != 0; i++) {
            uint64_t s = (uint64_t)ctr[i] + (n & 0xff);

            ctr[i] = (uint8_t)s;
            n = (n >> 8) + (s >> 8);
        }
    }
}

/* The counter of the next whole block of the message in progress. */
static void next_block_counter(const gp_cipher_ctx *ctx, uint8_t out[16])
{
    size_t blk = block_bytes(ctx);

    memcpy(out, ctx->iv, 16);
    counter_add(ctx, out, (ctx->text_bytes + blk - 1) / blk);
}

static int stream_init_body(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                       const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[], int enc)
{
    gp_cipher_pipe_end(ctx);   /* a single-message init ends a pipeline */
    ctx->enc = enc;
    if (iv != NULL) {
        if (ivlen != ctx->info->ivlen) {
            GP_RAISE(GP_R_INVALID_IV_LENGTH);
            return 0;
        }
        memcpy(ctx->iv, iv, ivlen);
        memcpy(ctx->oiv, iv, ivlen);
        ctx->ivlen = ivlen;
        ctx->iv_state = GP_IV_BUFFERED;
    } else if (ctx->iv_state == GP_IV_STARTED && ctx->info->alg == GP_ALG_AES_CTR) {
        /* A CTR re-init without an IV continues at the next whole block, dropping the partial
         * keystream, as the default provider does (it resets `num`, keeps the counter). */
        uint8_t next[16];

        next_block_counter(ctx, next);
        memcpy(ctx->iv, next, 16);
        ctx->iv_state = GP_IV_BUFFERED;
    } else if (ctx->iv_state == GP_IV_STARTED && ctx->text_bytes == 0) {
        ctx->iv_state = GP_IV_BUFFERED;   /* ChaCha20, nothing processed: it starts from its IV */
    } else if (ctx->iv_state == GP_IV_STARTED && key != NULL) {
        /* ChaCha20 with a new key under a running stream: the default provider drops the partial
         * block and starts again at the block it began in (cipher_chacha20_hw.c initkey keeps the
         * counter), which repeats keystream under an unchanged key; no place to go on is sound
         * for every caller, so the stream waits for a new IV (GP_IV_DROPPED). */
        ctx->iv_state = GP_IV_DROPPED;
    }
    /* ChaCha20 without a key or IV: the stream goes on byte for byte, as the default provider's
     * (its init leaves the block counter and the partial block alone). */
    if (key != NULL && !gp_cipher_set_key(ctx, key, keylen))
        return 0;
    if (!gp_lane_init(ctx))
        return 0;
    return params == NULL || gp_stream_set_ctx_params(ctx, params);
}

static int stream_init(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen,
                       const unsigned char *iv, size_t ivlen, const OSSL_PARAM params[], int enc)
{
    int ok = stream_init_body(ctx, key, keylen, iv, ivlen, params, enc);

    gp_lane_rearm(ctx);
    return ok;
}

int gp_stream_einit(void *vctx, const unsigned char *key, size_t keylen, const unsigned char *iv,
                    size_t ivlen, const OSSL_PARAM params[])
{
    return stream_init(vctx, key, keylen, iv, ivlen, params, 1);
}

int gp_stream_dinit(void *vctx, const unsigned char *key, size_t keylen, const unsigned char *iv,
                    size_t ivlen, const OSSL_PARAM params[])
{
    return stream_init(vctx, key, keylen, iv, ivlen, params, 0);
}

static GP_NOINLINE int stream_update(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                                     const unsigned char *in, size_t inl);

/* Does the lane take this data request as it is: 1 <= inl < GP_DEMAND_BYTES, both buffers, room
 * for the output (stream_update's checks)? Then it is counted here. */
static inline int stream_lane_takes(gp_cipher_ctx *ctx, const unsigned char *out, size_t outsize,
                                    const unsigned char *in, size_t inl)
{
    if (inl - 1 >= GP_DEMAND_BYTES - 1 || outsize < inl || in == NULL || out == NULL)
        return 0;
    ctx->text_bytes += inl;
    return 1;
}

/* Data of a message on the lane goes straight to the default provider's update (a tail call where
 * `go` is armed: a started message) when every check of stream_update holds; the rest takes
 * stream_update. */
int gp_stream_update(void *vctx, unsigned char *out, size_t *outl, size_t outsize,
                     const unsigned char *in, size_t inl)
{
    gp_cipher_ctx *ctx = vctx;
    OSSL_FUNC_cipher_update_fn *go = ctx->lane.go;

    if (GP_LIKELY(go != NULL)) {
        if (GP_LIKELY(stream_lane_takes(ctx, out, outsize, in, inl)))
            return go(ctx->lane.algctx, out, outl, outsize, in, inl);
    } else if (ctx->lane.d != NULL && ctx->iv_state == GP_IV_STARTED
               && stream_lane_takes(ctx, out, outsize, in, inl)) {
        return gp_lane_tail(ctx, out, outl, outsize, in, inl);
    }
    return stream_update(ctx, out, outl, outsize, in, inl);
}

static int stream_update_body(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                              const unsigned char *in, size_t inl);

static GP_NOINLINE int stream_update(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                                     const unsigned char *in, size_t inl)
{
    int ok = stream_update_body(ctx, out, outl, outsize, in, inl);

    gp_lane_rearm(ctx);
    return ok;
}

/*
 * The stream leaves the CPU (the lane, or the engine's cpu executor) for a new engine message at
 * this update (the policy would send it to the GPU). A stream cipher's keystream depends only on
 * the key and the block counter (SP 800-38A §6.5: the i-th counter block is the IV plus i, as
 * 128-bit big-endian; RFC 8439 §2.4: the block counter, as OpenSSL counts it in
 * next_block_counter), so a new message started at the counter of the next whole block continues
 * the stream byte for byte. Where it runs now first finishes the partial block it is in: the rest
 * of that block's keystream lives only in the default provider's context.
 */
static int stream_move_to_gpu(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                              const unsigned char *in, size_t inl)
{
    const size_t blk = block_bytes(ctx), head = (blk - ctx->text_bytes % blk) % blk;
    const uint64_t last = ctx->last_text_bytes;
    uint8_t next[16];

    if (head > 0) {
        size_t headl = 0;

        if (ctx->lane.d != NULL) {
            if (!gp_lane_update(ctx, out, &headl, outsize, in, head))
                return 0;
        } else if (!gp_msg_crypt(ctx->msg, in, out, head)) {
            GP_RAISE(GP_R_EXECUTOR_FAILURE);
            return 0;
        }
        ctx->text_bytes += head;
    }
    next_block_counter(ctx, next);
    gp_lane_close(ctx);
    memcpy(ctx->iv, next, 16);
    if (!gp_cipher_begin(ctx, next, 16))
        return 0;
    /* The same stream goes on: the lane's next choice still sees the message before it. */
    ctx->last_text_bytes = last;
    if (!gp_msg_crypt(ctx->msg, in + head, out + head, inl - head)) {
        GP_RAISE(GP_R_EXECUTOR_FAILURE);
        return 0;
    }
    ctx->text_bytes += inl - head;
    *outl = inl;
    return 1;
}

static int stream_update_body(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                              const unsigned char *in, size_t inl)
{
    *outl = 0;
    if (ctx->pipe != NULL) {
        gp_raise_pipeline_context();
        return 0;
    }
    if (!gp_cipher_check_update(outsize, inl, out))
        return 0;
    /* Before the length: 0 bytes without a key fail too, as the default provider's (ciphercommon.c
     * ossl_cipher_generic_stream_update, ossl_cipher_generic_cipher). */
    if (ctx->key == NULL) {
        GP_RAISE(GP_R_NO_KEY_SET);
        return 0;
    }
    if (inl == 0)
        return 1;
    if (ctx->iv_state == GP_IV_UNSET) {
        /* The default provider would run from an all-zero counter; refusing is safer. */
        GP_RAISE(GP_R_NO_IV_SET);
        return 0;
    }
    if (ctx->iv_state == GP_IV_DROPPED) {
        GP_RAISE(GP_R_NEW_IV_NEEDED);
        return 0;
    }
    if (in == NULL || out == NULL) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    if (ctx->iv_state != GP_IV_STARTED && !gp_cipher_begin(ctx, ctx->iv, ctx->ivlen))
        return 0;
    if (inl >= GP_DEMAND_BYTES && (ctx->lane.d != NULL || gp_msg_on_cpu(ctx->msg))
        && gp_engine_move_to_gpu(ctx->provctx->engine, ctx->info->alg, inl, ctx->text_bytes == 0))
        return stream_move_to_gpu(ctx, out, outl, outsize, in, inl);
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

int gp_stream_final(void *vctx, unsigned char *out, size_t *outl, size_t outsize)
{
    gp_cipher_ctx *ctx = vctx;

    (void)out;
    (void)outsize;
    *outl = 0;
    if (ctx->pipe != NULL) {
        gp_raise_pipeline_context();
        return 0;
    }
    if (ctx->key == NULL) {
        GP_RAISE(GP_R_NO_KEY_SET);
        return 0;
    }
    return 1;   /* stream modes produce everything in update */
}

int gp_stream_cipher(void *vctx, unsigned char *out, size_t *outl, size_t outsize,
                     const unsigned char *in, size_t inl)
{
    if (in == NULL)
        return gp_stream_final(vctx, out, outl, outsize);
    return gp_stream_update(vctx, out, outl, outsize, in, inl);
}

/* CTR's UPDATED_IV: the counter of the next whole block (the default provider's ctx->iv). */
static int get_updated_iv(gp_cipher_ctx *ctx, OSSL_PARAM *p)
{
    uint8_t next[16];

    if (ctx->iv_state == GP_IV_STARTED)
        next_block_counter(ctx, next);
    else
        memcpy(next, ctx->iv, 16);
    return OSSL_PARAM_set_octet_string(p, next, 16);
}

/* One pass over the caller's params (EVP reads IVLEN at every init); see gp_aead_get_ctx_params. */
int gp_stream_get_ctx_params(void *vctx, OSSL_PARAM params[])
{
    gp_cipher_ctx *ctx = vctx;
    const int ctr = ctx->info->alg == GP_ALG_AES_CTR;
    int ok = 1;

    for (OSSL_PARAM *p = params; p != NULL && p->key != NULL && ok; p++) {
        const char *k = p->key;

        if (strcmp(k, OSSL_CIPHER_PARAM_IVLEN) == 0)
            ok = OSSL_PARAM_set_size_t(p, ctx->info->ivlen);
        else if (strcmp(k, OSSL_CIPHER_PARAM_KEYLEN) == 0)
            ok = OSSL_PARAM_set_size_t(p, ctx->info->keylen);
        else if (strcmp(k, GP_CIPHER_PARAM_MEMORY) == 0)
            ok = gp_cipher_get_memory(ctx, p);
        else if (strcmp(k, GP_CIPHER_PARAM_CUDA_STREAM) == 0)
            ok = gp_cipher_get_stream(ctx, p);
        else if (!ctr)
            continue;   /* ChaCha20 reports only the lengths, as the default provider does */
        else if (strcmp(k, OSSL_CIPHER_PARAM_NUM) == 0)
            ok = OSSL_PARAM_set_uint(p, ctx->iv_state == GP_IV_STARTED ? (unsigned int)(ctx->text_bytes % 16) : 0);
        else if (strcmp(k, OSSL_CIPHER_PARAM_UPDATED_IV) == 0)
            ok = get_updated_iv(ctx, p);
        else if (strcmp(k, OSSL_CIPHER_PARAM_IV) == 0)
            ok = OSSL_PARAM_set_octet_ptr(p, ctx->oiv, ctx->info->ivlen)
                 || OSSL_PARAM_set_octet_string(p, ctx->oiv, ctx->info->ivlen);
        else if (strcmp(k, OSSL_CIPHER_PARAM_PADDING) == 0)
            ok = OSSL_PARAM_set_uint(p, ctx->pad);
        else if (strcmp(k, OSSL_CIPHER_PARAM_TLS_MAC) == 0)
            ok = OSSL_PARAM_set_octet_ptr(p, NULL, 0);
        if (!ok)
            GP_RAISE(GP_R_INVALID_PARAMETER);
    }
    return ok;
}

/*
 * CTR's TLS_VERSION and TLS_MAC_SIZE: with both above 0 the default provider's decryption takes the
 * last TLS_MAC_SIZE bytes of each update off as a MAC it never checks (ciphercommon.c
 * ossl_cipher_generic_stream_update; the MAC-then-encrypt records of TLS 1.0-1.2 stream ciphers,
 * which no TLS suite uses with CTR). gpuprov has no such record mode: the param completing the pair
 * is refused, nothing taken. Either alone, or 0, is taken and has no effect, as there.
 */
static int set_tls_mac(gp_cipher_ctx *ctx, const OSSL_PARAM params[])
{
    const OSSL_PARAM *pv = OSSL_PARAM_locate_const(params, OSSL_CIPHER_PARAM_TLS_VERSION);
    const OSSL_PARAM *pm = OSSL_PARAM_locate_const(params, OSSL_CIPHER_PARAM_TLS_MAC_SIZE);
    unsigned int version = 0;
    size_t mac = 0;
    int version_set = ctx->tls_version_set, mac_set = ctx->tls_mac_size_set;

    if ((pv != NULL && !OSSL_PARAM_get_uint(pv, &version)) || (pm != NULL && !OSSL_PARAM_get_size_t(pm, &mac))) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    if (pv != NULL)
        version_set = version > 0;
    if (pm != NULL)
        mac_set = mac > 0;
    if (version_set && mac_set) {
        GP_RAISE(GP_R_TLS_MAC_NOT_SUPPORTED);
        return 0;
    }
    ctx->tls_version_set = version_set;
    ctx->tls_mac_size_set = mac_set;
    return 1;
}

int gp_stream_set_ctx_params(void *vctx, const OSSL_PARAM params[])
{
    gp_cipher_ctx *ctx = vctx;
    const OSSL_PARAM *p;

    if (params == NULL)
        return 1;
    if (!gp_cipher_set_keylen(ctx, params))
        return 0;
    if ((p = OSSL_PARAM_locate_const(params, GP_CIPHER_PARAM_MEMORY)) != NULL && !gp_cipher_set_memory(ctx, p))
        return 0;
    if ((p = OSSL_PARAM_locate_const(params, GP_CIPHER_PARAM_CUDA_STREAM)) != NULL && !gp_cipher_set_stream(ctx, p))
        return 0;
    if (ctx->info->alg != GP_ALG_AES_CTR) {
        size_t ivlen;

        if ((p = OSSL_PARAM_locate_const(params, OSSL_CIPHER_PARAM_IVLEN)) != NULL) {
            if (!OSSL_PARAM_get_size_t(p, &ivlen) || ivlen != ctx->info->ivlen) {
                GP_RAISE(GP_R_INVALID_IV_LENGTH);
                return 0;
            }
        }
        return 1;
    }
    if ((p = OSSL_PARAM_locate_const(params, OSSL_CIPHER_PARAM_PADDING)) != NULL
        && !OSSL_PARAM_get_uint(p, &ctx->pad)) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    if (!set_tls_mac(ctx, params))
        return 0;
    if ((p = OSSL_PARAM_locate_const(params, OSSL_CIPHER_PARAM_NUM)) != NULL) {
        unsigned int num, cur = ctx->iv_state == GP_IV_STARTED ? (unsigned int)(ctx->text_bytes % 16) : 0;

        /* Moving the keystream position by hand is not supported; re-stating it is harmless. */
        if (!OSSL_PARAM_get_uint(p, &num) || num != cur) {
            GP_RAISE(GP_R_INVALID_PARAMETER);
            return 0;
        }
    }
    /* Unknown keys: accepted, no effect here. */
    return 1;
}

const OSSL_PARAM *gp_ctr_gettable_ctx_params(void *cctx, void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_KEYLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_IVLEN, NULL),
        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_PADDING, NULL),
        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_NUM, NULL),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_IV, NULL, 0),
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_UPDATED_IV, NULL, 0),
        OSSL_PARAM_octet_ptr(OSSL_CIPHER_PARAM_TLS_MAC, NULL, 0),
        OSSL_PARAM_utf8_string(GP_CIPHER_PARAM_MEMORY, NULL, 0),
        OSSL_PARAM_uint64(GP_CIPHER_PARAM_CUDA_STREAM, NULL),
        OSSL_PARAM_END
    };

    (void)cctx;
    (void)provctx;
    return params;
}

const OSSL_PARAM *gp_ctr_settable_ctx_params(void *cctx, void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_KEYLEN, NULL),
        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_PADDING, NULL),
        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_NUM, NULL),
        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_TLS_VERSION, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_TLS_MAC_SIZE, NULL),
        OSSL_PARAM_utf8_string(GP_CIPHER_PARAM_MEMORY, NULL, 0),
        OSSL_PARAM_uint64(GP_CIPHER_PARAM_CUDA_STREAM, NULL),
        OSSL_PARAM_END
    };

    (void)cctx;
    (void)provctx;
    return params;
}

const OSSL_PARAM *gp_chacha20_gettable_ctx_params(void *cctx, void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_KEYLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_IVLEN, NULL),
        OSSL_PARAM_utf8_string(GP_CIPHER_PARAM_MEMORY, NULL, 0),
        OSSL_PARAM_uint64(GP_CIPHER_PARAM_CUDA_STREAM, NULL),
        OSSL_PARAM_END
    };

    (void)cctx;
    (void)provctx;
    return params;
}

const OSSL_PARAM *gp_chacha20_settable_ctx_params(void *cctx, void *provctx)
{
    return gp_chacha20_gettable_ctx_params(cctx, provctx);
}
