/* SPDX-License-Identifier: Apache-2.0 */
/* Context life cycle, static params and key handling shared by every gpuprov cipher. */
#include <limits.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cipher_ctx.h"
#include "pipeline.h"   /* GP_MAX_PIPES */

void *gp_cipher_newctx(void *provctx, const gp_cipher_info *info)
{
    gp_provctx *pc = provctx;
    gp_cipher_ctx *ctx = OPENSSL_zalloc(sizeof(*ctx));

    if (ctx == NULL) {
        GP_RAISE(GP_R_OUT_OF_MEMORY);
        return NULL;
    }
    ctx->provctx = pc;
    ctx->info = info;
    ctx->ivlen = info->ivlen;
    ctx->pad = 1;
    ctx->last_text_bytes = UINT64_MAX;
    ctx->text_lane_max = gp_aead_text_max(info->alg) - GP_DEMAND_BYTES;
    ctx->aad_lane_max = gp_aead_aad_max(info->alg) - GP_DEMAND_BYTES;
    ctx->msg = gp_msg_new(pc->engine);
    if (ctx->msg == NULL) {
        GP_RAISE(GP_R_OUT_OF_MEMORY);
        OPENSSL_free(ctx);
        return NULL;
    }
    gp_engine_open_named_gpu(pc->engine);
    return ctx;
}

void gp_cipher_freectx(void *vctx)
{
    gp_cipher_ctx *ctx = vctx;

    if (ctx == NULL)
        return;
    gp_lane_close(ctx);
    gp_cipher_pipe_end(ctx);
    gp_msg_free(ctx->msg);
    gp_key_free(ctx->key);
    /* IVs, tags and the TLS AAD are not keys, but nothing of a message should outlive it. */
    OPENSSL_clear_free(ctx, sizeof(*ctx));
}

void gp_cipher_pipes_end_ordered(gp_pipeline *pl)
{
    gp_msg *ms[GP_MAX_PIPES];
    size_t n = 0;

    for (size_t i = 0; i < pl->numpipes; i++)
        if (pl->pipes[i].msg != NULL)
            ms[n++] = pl->pipes[i].msg;
    gp_msgs_end_ordered(ms, n);
}

void gp_cipher_pipe_end(gp_cipher_ctx *ctx)
{
    gp_pipeline *pl = ctx->pipe;

    if (pl == NULL)
        return;
    gp_cipher_pipes_end_ordered(pl);
    for (size_t i = 0; i < pl->numpipes; i++) {
        gp_msg_free(pl->pipes[i].msg);
        if (pl->pipes[i].lane_ctx != NULL)
            pl->lane_d->freectx(pl->pipes[i].lane_ctx);   /* the default cleanses its key schedule */
        OPENSSL_free(pl->pipes[i].spans);
    }
    /* IVs and tags: nothing of a message outlives it. */
    OPENSSL_clear_free(pl, sizeof(*pl) + pl->numpipes * sizeof(pl->pipes[0]));
    ctx->pipe = NULL;
}

void gp_raise_pipeline_context(void)
{
    GP_RAISE(GP_R_PIPE_CONTEXT);
}

/* The pipeline of src, for its copy d (whose key is d->key): every pipe's message mid-stream too. */
static int pipe_dup(gp_cipher_ctx *d, const gp_cipher_ctx *src)
{
    const gp_pipeline *s = src->pipe;
    const size_t size = sizeof(*s) + s->numpipes * sizeof(s->pipes[0]);
    gp_pipeline *pl = OPENSSL_malloc(size);

    d->pipe = NULL;
    if (pl == NULL)
        return 0;
    memcpy(pl, s, size);
    for (size_t i = 0; i < s->numpipes; i++) {
        pl->pipes[i].msg = NULL;
        pl->pipes[i].lane_ctx = NULL;
        pl->pipes[i].spans = NULL;
        pl->pipes[i].nspans = pl->pipes[i].cap = 0;
    }
    d->pipe = pl;   /* from here gp_cipher_pipe_end frees what was made */
    for (size_t i = 0; i < s->numpipes; i++) {
        const gp_pipe *sp = &s->pipes[i];
        gp_pipe *p = &pl->pipes[i];

        if ((p->msg = gp_msg_dup(sp->msg, d->key)) == NULL)
            return 0;
        /* The default's dupctx is a deep copy (key schedule, counter, GHASH/Poly1305 state); the
         * copy takes its key again at its next message, as the cpu executor's copy does. */
        if (sp->lane_ctx != NULL && (p->lane_ctx = s->lane_d->dupctx(sp->lane_ctx)) == NULL)
            return 0;
        p->lane_keyed = 0;
        if (sp->nspans > 0) {
            if ((p->spans = OPENSSL_memdup(sp->spans, sp->nspans * sizeof(sp->spans[0]))) == NULL)
                return 0;
            p->nspans = p->cap = sp->nspans;
        }
    }
    return 1;
}

/* A deep copy: key schedule, counters, MAC state, partial block, tag, TLS state (EVP_CIPHER_CTX_copy). */
void *gp_cipher_dupctx(void *vctx)
{
    gp_cipher_ctx *src = vctx, *d;

    /* A tag queued on the stream is taken first: the copy has the message's state, not its queue. */
    if (!gp_cipher_take_tag(src))
        return NULL;
    if ((d = OPENSSL_malloc(sizeof(*d))) == NULL) {
        GP_RAISE(GP_R_OUT_OF_MEMORY);
        return NULL;
    }
    memcpy(d, src, sizeof(*d));
    d->key = NULL;
    d->msg = NULL;
    d->pipe = NULL;
    memset(&d->lane, 0, sizeof(d->lane));
    if (src->key != NULL && (d->key = gp_key_dup(src->key)) == NULL)
        goto err;
    if ((d->msg = gp_msg_dup(src->msg, d->key)) == NULL || !gp_lane_dup(d, src))
        goto err;
    if (src->pipe != NULL && !pipe_dup(d, src))
        goto err;
    gp_lane_rearm(d);
    return d;
err:
    GP_RAISE(GP_R_OUT_OF_MEMORY);
    gp_cipher_freectx(d);
    return NULL;
}

int gp_cipher_get_static_params(OSSL_PARAM params[], const gp_cipher_info *info)
{
    OSSL_PARAM *p;

    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_MODE)) != NULL
        && !OSSL_PARAM_set_uint(p, info->mode))
        goto err;
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_AEAD)) != NULL
        && !OSSL_PARAM_set_int(p, info->aead))
        goto err;
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_CUSTOM_IV)) != NULL
        && !OSSL_PARAM_set_int(p, info->custom_iv))
        goto err;
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_CTS)) != NULL
        && !OSSL_PARAM_set_int(p, 0))
        goto err;
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_TLS1_MULTIBLOCK)) != NULL
        && !OSSL_PARAM_set_int(p, 0))
        goto err;
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_HAS_RAND_KEY)) != NULL
        && !OSSL_PARAM_set_int(p, 0))
        goto err;
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_KEYLEN)) != NULL
        && !OSSL_PARAM_set_size_t(p, info->keylen))
        goto err;
    /* Stream and AEAD modes all have a block size of 1 for EVP (no padding, any length). */
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_BLOCK_SIZE)) != NULL
        && !OSSL_PARAM_set_size_t(p, 1))
        goto err;
    if ((p = OSSL_PARAM_locate(params, OSSL_CIPHER_PARAM_IVLEN)) != NULL
        && !OSSL_PARAM_set_size_t(p, info->ivlen))
        goto err;
    return 1;
err:
    GP_RAISE(GP_R_INVALID_PARAMETER);
    return 0;
}

const OSSL_PARAM *gp_cipher_gettable_params(void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_uint(OSSL_CIPHER_PARAM_MODE, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_KEYLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_IVLEN, NULL),
        OSSL_PARAM_size_t(OSSL_CIPHER_PARAM_BLOCK_SIZE, NULL),
        OSSL_PARAM_int(OSSL_CIPHER_PARAM_AEAD, NULL),
        OSSL_PARAM_int(OSSL_CIPHER_PARAM_CUSTOM_IV, NULL),
        OSSL_PARAM_int(OSSL_CIPHER_PARAM_CTS, NULL),
        OSSL_PARAM_int(OSSL_CIPHER_PARAM_TLS1_MULTIBLOCK, NULL),
        OSSL_PARAM_int(OSSL_CIPHER_PARAM_HAS_RAND_KEY, NULL),
        OSSL_PARAM_END
    };

    (void)provctx;
    return params;
}

int gp_cipher_set_key(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen)
{
    gp_key *k;

    if (keylen != ctx->info->keylen) {
        GP_RAISE(GP_R_INVALID_KEY_LENGTH);
        return 0;
    }
    if (gp_key_matches(ctx->key, key, keylen))
        return 1;   /* same key again: keep its schedules (and the cpu executor's context) */
    k = gp_key_new(ctx->provctx->engine, ctx->info->alg, key, keylen);
    if (k == NULL) {
        GP_RAISE(GP_R_OUT_OF_MEMORY);
        return 0;
    }
    gp_key_free(ctx->key);
    ctx->key = k;
    ctx->lane.key_loaded = 0;   /* the lane's context takes the new key at its next init */
    for (size_t i = 0; ctx->pipe != NULL && i < ctx->pipe->numpipes; i++)
        ctx->pipe->pipes[i].lane_keyed = 0;   /* and each pipe's, at its next message */
    return 1;
}

int gp_cipher_begin(gp_cipher_ctx *ctx, const uint8_t *iv, size_t ivlen)
{
    if (ctx->lane.d != NULL) {
        if (!gp_lane_start(ctx, iv, ivlen))
            return 0;
    } else if (!gp_msg_start(ctx->msg, ctx->key, iv, ivlen, ctx->enc)) {
        GP_RAISE(ctx->devmem ? GP_R_NO_DEVICE_MEMORY_EXECUTOR : GP_R_EXECUTOR_FAILURE);
        return 0;
    }
    gp_cipher_message_reset(ctx);
    return 1;
}

int gp_cipher_set_keylen(gp_cipher_ctx *ctx, const OSSL_PARAM params[])
{
    const OSSL_PARAM *p = OSSL_PARAM_locate_const(params, OSSL_CIPHER_PARAM_KEYLEN);
    size_t keylen;

    if (p == NULL)
        return 1;
    if (!OSSL_PARAM_get_size_t(p, &keylen)) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    if (keylen != ctx->info->keylen) {
        GP_RAISE(GP_R_INVALID_KEY_LENGTH);
        return 0;
    }
    return 1;
}

/*
 * Device mode (docs/config.md, "Per-context parameter"). EVP hands a provider's update its in and
 * out pointers without reading them (crypto/evp/evp_enc.c, EVP_EncryptUpdate and EVP_DecryptUpdate
 * for provider ciphers), so they may be CUDA memory; the engine then runs the message where that
 * memory is and no host code touches it. The mode changes only between messages: a message's
 * state (counter, MAC, partial block) lives with the executor it started on.
 */

/* Is the UTF-8 param `word`? Its data_size counts the string's bytes, with or without a NUL
 * (OSSL_PARAM_construct_utf8_string counts them without). */
static int param_is_word(const OSSL_PARAM *p, const char *word)
{
    const size_t n = strlen(word);

    return p->data_type == OSSL_PARAM_UTF8_STRING && p->data != NULL && p->data_size >= n && p->data_size <= n + 1
           && memcmp(p->data, word, n) == 0 && (p->data_size == n || ((const char *)p->data)[n] == '\0');
}

int gp_cipher_set_memory(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    int device;

    if (param_is_word(p, "host")) {
        device = 0;
    } else if (param_is_word(p, "device")) {
        device = 1;
    } else {
        GP_RAISE(GP_R_INVALID_MEMORY_MODE);
        return 0;
    }
    if (device == ctx->devmem)
        return 1;
    if (ctx->iv_state == GP_IV_STARTED && (ctx->aad_bytes != 0 || ctx->text_bytes != 0)) {
        GP_RAISE(GP_R_MEMORY_MODE_MID_MESSAGE);
        return 0;
    }
    for (size_t i = 0; ctx->pipe != NULL && !ctx->pipe->finished && i < ctx->pipe->numpipes; i++) {
        if (ctx->pipe->pipes[i].aad_bytes != 0 || ctx->pipe->pipes[i].text_bytes != 0) {
            GP_RAISE_PIPE(GP_R_MEMORY_MODE_MID_MESSAGE, i);
            return 0;
        }
    }
    if (device) {
        if (ctx->tls_fixed || ctx->tls_aad_len != 0) {
            GP_RAISE(GP_R_DEVICE_MEMORY_TLS);
            return 0;
        }
        if (!gp_engine_device_memory(ctx->provctx->engine)) {
            GP_RAISE(GP_R_NO_DEVICE_MEMORY_EXECUTOR);
            return 0;
        }
        gp_lane_close(ctx);   /* the default provider's code cannot read device memory */
    }
    ctx->devmem = device;
    gp_msg_set_memory(ctx->msg, device);
    if (!device && ctx->stream != 0) {   /* host memory has no stream (docs/config.md) */
        ctx->stream = 0;
        gp_msg_set_stream(ctx->msg, 0);
    }
    /* A pipeline's messages start (again) in the new mode at their first update (pipeline.c),
     * where they now belong (device memory is never on the pipeline's lane). */
    for (size_t i = 0; ctx->pipe != NULL && i < ctx->pipe->numpipes; i++)
        ctx->pipe->pipes[i].started = 0;
    if (ctx->pipe != NULL)
        ctx->pipe->lane_asked = 0;
    /* A message begun but with nothing processed restarts from its IV where it now belongs. */
    if (ctx->iv_state == GP_IV_STARTED)
        ctx->iv_state = GP_IV_BUFFERED;
    return 1;
}

int gp_cipher_get_memory(const gp_cipher_ctx *ctx, OSSL_PARAM *p)
{
    if (!OSSL_PARAM_set_utf8_string(p, ctx->devmem ? "device" : "host")) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    return 1;
}

/*
 * Stream-ordered device mode (docs/config.md, "gpuprov-cuda-stream"): the caller's stream, which
 * the engine queues the context's device-mode work on from its next message. Like the memory mode
 * it changes only between messages, and it needs device mode (taken first wherever the caller put
 * it in the same call).
 */
int gp_cipher_set_stream(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    uint64_t stream;

    if (p->data_type != OSSL_PARAM_UNSIGNED_INTEGER || !OSSL_PARAM_get_uint64(p, &stream)) {
        GP_RAISE(GP_R_INVALID_STREAM);
        return 0;
    }
    if (stream == ctx->stream)
        return 1;
    if (ctx->iv_state == GP_IV_STARTED && (ctx->aad_bytes != 0 || ctx->text_bytes != 0)) {
        GP_RAISE(GP_R_STREAM_MID_MESSAGE);
        return 0;
    }
    if (stream != 0 && !ctx->devmem) {
        GP_RAISE(GP_R_STREAM_WITHOUT_DEVICE_MODE);
        return 0;
    }
    if (stream != 0 && !gp_engine_streams(ctx->provctx->engine)) {
        GP_RAISE(GP_R_NO_STREAM_EXECUTOR);
        return 0;
    }
    ctx->stream = stream;
    gp_msg_set_stream(ctx->msg, stream);
    if (ctx->iv_state == GP_IV_STARTED)   /* restarts from its IV in the new mode */
        ctx->iv_state = GP_IV_BUFFERED;
    return 1;
}

int gp_cipher_get_stream(const gp_cipher_ctx *ctx, OSSL_PARAM *p)
{
    if (!OSSL_PARAM_set_uint64(p, ctx->stream)) {
        GP_RAISE(GP_R_INVALID_PARAMETER);
        return 0;
    }
    return 1;
}

int gp_cipher_take_tag(gp_cipher_ctx *ctx)
{
    if (ctx->tag_ready != GP_TAG_QUEUED)
        return 1;
    ctx->tag_ready = GP_TAG_NONE;
    if (gp_msg_tag_wait(ctx->msg, ctx->tag_out) != GP_REQ_OK) {
        GP_RAISE(GP_R_DEVICE_MEMORY_GPU_FAILURE);
        return 0;
    }
    ctx->tag_ready = GP_TAG_OWN;
    return 1;
}

int gp_cipher_mem_reason(const gp_cipher_ctx *ctx, int st)
{
    switch (st) {
    case GP_MEM_OK:
        return 0;
    case GP_MEM_NOT_DEVICE:
        return GP_R_NOT_DEVICE_MEMORY;
    case GP_MEM_PAST_END:
        return GP_R_PAST_ALLOCATION_END;
    case GP_MEM_GPU_NOT_OPEN:
        return GP_R_GPU_NOT_OPEN;
    case GP_MEM_SPLIT:
        return GP_R_BUFFERS_ON_TWO_GPUS;
    case GP_MEM_NO_EXECUTOR:
        return ctx->stream != 0 ? GP_R_NO_STREAM_EXECUTOR : GP_R_NO_DEVICE_MEMORY_EXECUTOR;
    case GP_MEM_BAD_STREAM:
        return GP_R_BAD_STREAM;
    default:
        return GP_R_DEVICE_MEMORY_GPU_FAILURE;
    }
}

/* A data update in device mode: `in` and `out` are CUDA memory. */
static int crypt_device(gp_cipher_ctx *ctx, const unsigned char *in, unsigned char *out, size_t inl)
{
    const int reason = gp_cipher_mem_reason(ctx, gp_msg_crypt_device(ctx->msg, in, out, inl));

    if (reason == 0)
        return 1;
    GP_RAISE(reason);
    return 0;
}

int gp_cipher_crypt(gp_cipher_ctx *ctx, const unsigned char *in, unsigned char *out, size_t inl)
{
    if (ctx->devmem)
        return crypt_device(ctx, in, out, inl);
    if (!gp_msg_crypt(ctx->msg, in, out, inl)) {
        GP_RAISE(GP_R_EXECUTOR_FAILURE);
        return 0;
    }
    return 1;
}
