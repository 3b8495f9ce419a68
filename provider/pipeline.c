/* SPDX-License-Identifier: Apache-2.0 */
/* OpenSSL 3.5's cipher pipeline API: one key, up to 32 messages per call, each call one batch on the engine. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/params.h>

#include "aead.h"
#include "pipeline.h"

/*
 * A pipeline (OpenSSL 3.5, doc/designs/evp-cipher-pipeline.md; provider-cipher(7)): the init gives
 * one key and `numpipes` IVs of one length; each update gives every pipe its AAD (out == NULL) or
 * its data, each Final ends every pipe's message, and "pipeline-tag" carries the tags (an array of
 * numpipes pointers; got after an encryption's Final, set before a decryption's). Every pipe is a
 * message of the engine's (gp_msg) as a single-message context's is, so each is the same bytes as
 * that message through gpuprov or the default provider; one call's requests go to the engine
 * together (gp_msgs_submit), which routes the messages that start together as one and runs the GPU
 * side's requests as one batch (one launch), the CPU side's on the default provider's code.
 *
 * Every argument of a call is checked, for every pipe, before any pipe's request runs: a refused
 * call changes nothing. A pipe whose request failed on its executor refuses the rest of its
 * message; the others go on. A decryption's pipe whose tag does not match fails the Final (the
 * error's data names it: "pipe 3"), and its output in host memory is cleared; the other pipes'
 * verdicts stand. One error per kind of failure names every pipe that failed so ("pipe 3",
 * "pipes 0, 5, 17"): OpenSSL's error queue keeps only its last 16 entries.
 *
 * The pipeline's lane. Where the engine runs the messages on the cpu executor anyway (no GPU side
 * opened, or its measurement keeps the algorithm on the CPU: gp_engine_cpu_lane), each pipe's
 * message goes straight to a default-provider context of its own, as a single-message context's
 * lane does (cpu_lane.c): the IV (and the key where the context lacks it), each update and the tag
 * are one call each into the default's functions, the calls EVP makes for the default provider's
 * own messages one by one. The engine's path builds a request per pipe, starts each pipe's gp_msg
 * (asking the engine where it belongs, per pipe) and routes the call's requests together only to
 * run them one by one on the same functions. The lane is chosen once per init, for every message
 * of it (messages stay where they began), and never for device memory; each call's bytes are
 * noted as the engine's path notes them (gp_engine_note_large), so that backend auto still opens
 * the GPU where the process's demand says so, and the next init asks again.
 */

static int is_aead(const gp_cipher_ctx *ctx)
{
    return ctx->info->aead;
}

/* The IV lengths each mode takes: GCM 1..128 bytes (SP 800-38D §8.2; J0 through GHASH when not 12,
 * §7.1), ChaCha20-Poly1305 the 96-bit nonce (RFC 8439 §2.8), CTR and ChaCha20 their 16-byte
 * counter block. */
static int ivlen_ok(const gp_cipher_ctx *ctx, size_t ivlen)
{
    switch (ctx->info->alg) {
    case GP_ALG_AES_GCM:
        return ivlen >= 1 && ivlen <= GCM_MAX_IV_LEN;
    case GP_ALG_CHACHA20_POLY1305:
        return ivlen == CHACHAPOLY_IV_LEN;
    default:
        return ivlen == ctx->info->ivlen;
    }
}

/* A pipeline of n pipes for ctx: the one it has where it has n (its messages, and the default
 * provider's contexts they hold, kept: a pipeline per batch of messages is the expected use), else
 * a new one. NULL with an error raised. */
static gp_pipeline *pipeline_for(gp_cipher_ctx *ctx, size_t n)
{
    gp_pipeline *pl = ctx->pipe;

    if (pl != NULL && pl->numpipes == n)
        return pl;
    gp_cipher_pipe_end(ctx);
    pl = OPENSSL_zalloc(sizeof(*pl) + n * sizeof(pl->pipes[0]));
    if (pl == NULL) {
        GP_RAISE(GP_R_OUT_OF_MEMORY);
        return NULL;
    }
    pl->numpipes = n;
    ctx->pipe = pl;   /* gp_cipher_pipe_end frees the messages made so far */
    for (size_t i = 0; i < n; i++) {
        if ((pl->pipes[i].msg = gp_msg_new(ctx->provctx->engine)) == NULL) {
            GP_RAISE(GP_R_OUT_OF_MEMORY);
            gp_cipher_pipe_end(ctx);
            return NULL;
        }
    }
    return pl;
}

/* An init's params (EVP passes none; a caller of the provider's function may): what a pipeline
 * takes, the rest ignored as the single-message set_ctx_params ignore unknown names. */
static int set_init_params(gp_cipher_ctx *ctx, const OSSL_PARAM params[])
{
    int ok = 1;

    for (const OSSL_PARAM *p = params; ok && p != NULL && p->key != NULL; p++) {
        if (strcmp(p->key, GP_CIPHER_PARAM_MEMORY) == 0)
            ok = gp_cipher_set_memory(ctx, p);
        else if (strcmp(p->key, OSSL_CIPHER_PARAM_KEYLEN) == 0)
            ok = gp_cipher_set_keylen(ctx, params);
        else if (is_aead(ctx) && strcmp(p->key, OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG) == 0)
            ok = gp_pipe_set_tags(ctx, p);
    }
    return ok;
}

static int pipe_init(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen, size_t numpipes,
                     const unsigned char **iv, size_t ivlen, const OSSL_PARAM params[], int enc)
{
    gp_pipeline *pl;

    if (numpipes == 0 || numpipes > GP_MAX_PIPES) {
        GP_RAISE(GP_R_PIPE_COUNT);
        return 0;
    }
    if (iv == NULL) {
        GP_RAISE(GP_R_PIPE_NULL_ARRAY);
        return 0;
    }
    for (size_t i = 0; i < numpipes; i++) {
        if (iv[i] == NULL) {
            GP_RAISE_PIPE(GP_R_PIPE_NULL_BUFFER, i);
            return 0;
        }
    }
    if (!ivlen_ok(ctx, ivlen)) {
        GP_RAISE(GP_R_INVALID_IV_LENGTH);
        return 0;
    }
    if (key != NULL ? !gp_cipher_set_key(ctx, key, keylen) : ctx->key == NULL) {
        if (key == NULL)
            GP_RAISE(GP_R_NO_KEY_SET);
        return 0;
    }
    /* The context leaves single messages: its lane's context goes, no message is in progress and
     * no TLS record mode holds (the single-message calls are refused while ctx->pipe is set). */
    gp_lane_close(ctx);
    ctx->iv_state = GP_IV_UNSET;
    ctx->tag_ready = GP_TAG_NONE;
    ctx->tag_expected = 0;
    ctx->tls_aad_len = 0;
    ctx->tls_fixed = 0;
    ctx->iv_gen = 0;
    if ((pl = pipeline_for(ctx, numpipes)) == NULL)
        return 0;
    if (ctx->devmem)   /* every pipe starts a new message (pipe_start): their stream-ordered state at once */
        gp_cipher_pipes_end_ordered(pl);
    ctx->enc = enc;
    ctx->ivlen = ivlen;
    pl->ivlen = ivlen;
    pl->finished = 0;
    pl->taglen = 0;
    pl->lane_asked = 0;   /* where this init's messages run: asked at the first call (lane_for) */
    for (size_t i = 0; i < numpipes; i++) {
        gp_pipe *p = &pl->pipes[i];

        memcpy(p->iv, iv[i], ivlen);
        p->started = p->failed = p->tag_ok = 0;
        p->aad_bytes = p->text_bytes = 0;
        p->nspans = 0;
    }
    return set_init_params(ctx, params);
}

int gp_pipe_einit(void *vctx, const unsigned char *key, size_t keylen, size_t numpipes,
                  const unsigned char **iv, size_t ivlen, const OSSL_PARAM params[])
{
    return pipe_init(vctx, key, keylen, numpipes, iv, ivlen, params, 1);
}

int gp_pipe_dinit(void *vctx, const unsigned char *key, size_t keylen, size_t numpipes,
                  const unsigned char **iv, size_t ivlen, const OSSL_PARAM params[])
{
    return pipe_init(vctx, key, keylen, numpipes, iv, ivlen, params, 0);
}

/* What every pipeline call checks first: a pipeline, the same numpipes as its init, its messages
 * not finished. Its pipeline, or NULL with an error raised. */
static gp_pipeline *pipeline_open(gp_cipher_ctx *ctx, size_t numpipes)
{
    gp_pipeline *pl = ctx->pipe;

    if (pl == NULL) {
        GP_RAISE(GP_R_PIPE_NOT_INITIALISED);
        return NULL;
    }
    if (numpipes != pl->numpipes) {
        GP_RAISE(GP_R_PIPE_COUNT_CHANGED);
        return NULL;
    }
    if (pl->finished) {
        GP_RAISE(GP_R_MESSAGE_FINISHED);
        return NULL;
    }
    return pl;
}

/* Start pipe i's message from its IV, in the context's memory mode; 0 with an error raised. */
static int pipe_start(gp_cipher_ctx *ctx, gp_pipe *p, size_t i)
{
    if (p->started)
        return 1;
    gp_msg_set_memory(p->msg, ctx->devmem);
    gp_msg_set_stream(p->msg, ctx->devmem ? ctx->stream : 0);   /* stream-ordered pipes queue there too */
    if (!gp_msg_start(p->msg, ctx->key, p->iv, ctx->pipe->ivlen, ctx->enc)) {
        GP_RAISE_PIPE(ctx->devmem ? GP_R_NO_DEVICE_MEMORY_EXECUTOR : GP_R_EXECUTOR_FAILURE, i);
        return 0;
    }
    p->started = 1;
    return 1;
}

/* The lane for the messages of this init (asked at the first call that starts one), or NULL. */
static const gp_cpu_direct *lane_for(gp_cipher_ctx *ctx, gp_pipeline *pl)
{
    const gp_cpu_direct *d;

    if (pl->lane_asked)
        return pl->lane;
    /* Pipes take their route by their batch (gp_hybrid_route_batch), not by a context's last
     * message: no last length keeps them on the lane (UINT64_MAX). */
    d = ctx->devmem ? NULL : gp_engine_cpu_lane(ctx->provctx->engine, ctx->info->alg, ctx->info->keylen, UINT64_MAX);
    if (d != NULL && pl->lane_d != NULL && pl->lane_d != d) {
        for (size_t i = 0; i < pl->numpipes; i++) {   /* another cipher's functions: not expected */
            if (pl->pipes[i].lane_ctx != NULL)
                pl->lane_d->freectx(pl->pipes[i].lane_ctx);
            pl->pipes[i].lane_ctx = NULL;
        }
    }
    if (d != NULL)
        pl->lane_d = d;
    pl->lane = d;
    pl->lane_asked = 1;
    return d;
}

/* Start pipe p's message on its lane context (made at its first message) from its IV: the IV
 * length first where GCM's differs, the key only where the context lacks it. 0 on failure. */
static int lane_start(gp_cipher_ctx *ctx, const gp_cpu_direct *d, gp_pipe *p)
{
    const size_t ivlen = ctx->pipe->ivlen;
    int ok;

    if (p->started)
        return 1;
    if (p->lane_ctx == NULL) {
        if ((p->lane_ctx = d->newctx(d->provctx)) == NULL)
            return 0;
        p->lane_keyed = 0;
        p->lane_ivlen = d->ivlen;
    }
    if (ctx->info->alg == GP_ALG_AES_GCM && p->lane_ivlen != ivlen) {
        OSSL_PARAM q[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
        size_t len = ivlen;

        q[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &len);
        p->lane_ivlen = 0;   /* unknown until it took it */
        if (!d->set_ctx_params(p->lane_ctx, q))
            return 0;
        p->lane_ivlen = ivlen;
    }
    ok = (ctx->enc ? d->einit : d->dinit)(p->lane_ctx, p->lane_keyed ? NULL : gp_key_bytes(ctx->key),
                                          p->lane_keyed ? 0 : ctx->info->keylen, p->iv, ivlen, NULL);
    gp_cpu_clean_upper_state();
    p->lane_keyed = ok;
    p->started = ok;
    return ok;
}

/* Pipe p's tag (encrypt: into p->tag) or verdict (decrypt: against p->tag's taglen bytes) on its
 * lane context: a GP_REQ_ status, as the cpu executor answers a tag request (exec_cpu.c). */
static int lane_tag(const gp_cipher_ctx *ctx, const gp_cpu_direct *d, gp_pipe *p)
{
    OSSL_PARAM q[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    unsigned char none[16];
    size_t outl = 0;
    int ok;

    if (ctx->enc) {
        q[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, p->tag, sizeof(p->tag));
        ok = d->final(p->lane_ctx, none, &outl, 0) && d->get_ctx_params(p->lane_ctx, q);
        gp_cpu_clean_upper_state();
        return ok ? GP_REQ_OK : GP_REQ_FAILED;
    }
    q[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, p->tag, ctx->pipe->taglen);
    if (!d->set_ctx_params(p->lane_ctx, q))
        return GP_REQ_FAILED;
    /* The default compares with CRYPTO_memcmp (constant time); what it queues on a mismatch is
     * dropped: the Final names the pipes itself. */
    ERR_set_mark();
    ok = d->final(p->lane_ctx, none, &outl, 0);
    ERR_pop_to_mark();
    gp_cpu_clean_upper_state();
    return ok ? GP_REQ_OK : GP_REQ_BAD_TAG;
}

/* The checks of one pipe's AAD or data that need no executor (update's first pass). */
static int pipe_args_ok(const gp_cipher_ctx *ctx, const gp_pipe *p, size_t i, unsigned char *const *out,
                        const size_t *outsize, const unsigned char *const *in, const size_t *inl)
{
    const int aad = out == NULL;

    if (p->failed) {
        GP_RAISE_PIPE(GP_R_PIPE_FAILED, i);
        return 0;
    }
    if (inl[i] == 0)
        return 1;
    if (in[i] == NULL || (!aad && out[i] == NULL)) {
        GP_RAISE_PIPE(GP_R_PIPE_NULL_BUFFER, i);
        return 0;
    }
    /* As a single update's (gp_cipher_check_update): EVP's int lengths bound one call there. */
    if (inl[i] > INT_MAX) {
        GP_RAISE_PIPE(GP_R_LENGTH_TOO_LARGE, i);
        return 0;
    }
    if (!aad && outsize[i] < inl[i]) {
        GP_RAISE_PIPE(GP_R_OUTPUT_BUFFER_TOO_SMALL, i);
        return 0;
    }
    if (!is_aead(ctx))
        return 1;
    if (aad) {
        /* All of the AAD precedes the data (SP 800-38D §7.1, RFC 8439 §2.8). */
        if (p->text_bytes != 0) {
            GP_RAISE_PIPE(GP_R_AAD_AFTER_DATA, i);
            return 0;
        }
        if (!gp_aead_aad_fits(ctx->info->alg, p->aad_bytes, inl[i])) {
            GP_RAISE_PIPE(GP_R_MESSAGE_TOO_LONG, i);
            return 0;
        }
    } else if (!gp_aead_text_fits(ctx->info->alg, p->text_bytes, inl[i])) {
        GP_RAISE_PIPE(GP_R_MESSAGE_TOO_LONG, i);
        return 0;
    }
    return 1;
}

/*
 * Device mode's buffer checks for a whole call at once, where they can be: when every pipe's input
 * lies in one allocation and every output in one (a model's tensors in a caching allocator's
 * segment, a benchmark's buffer), a check of each hull (the lowest pipe's start to the highest
 * pipe's end) answers for every pipe, since each pipe's bytes lie inside a range of one allocation
 * that is device memory on that GPU. A check costs a few driver calls (batching/cuda/devmem.c): two
 * instead of one or two per pipe. Returns 1 with every data request's devmem and gpu set; 0 where
 * a hull is not one allocation (or anything else): then each pipe is checked on its own.
 */
static int device_hulls_ok(gp_msg *m, gp_request *req, size_t n)
{
    uintptr_t in_lo = UINTPTR_MAX, in_hi = 0, out_lo = UINTPTR_MAX, out_hi = 0;
    size_t ndata = 0;
    int gpu_in = -1, gpu_out = -1;

    for (size_t j = 0; j < n; j++) {
        const uintptr_t in = (uintptr_t)req[j].in, out = (uintptr_t)req[j].out;

        if (req[j].kind != GP_REQ_CRYPT)
            continue;
        if (in + req[j].len < in || out + req[j].len < out)
            return 0;
        ndata++;
        in_lo = in < in_lo ? in : in_lo;
        in_hi = in + req[j].len > in_hi ? in + req[j].len : in_hi;
        out_lo = out < out_lo ? out : out_lo;
        out_hi = out + req[j].len > out_hi ? out + req[j].len : out_hi;
    }
    if (ndata < 2
        || gp_msg_check_device(m, (const uint8_t *)in_lo, (uint8_t *)in_lo, in_hi - in_lo, &gpu_in) != GP_MEM_OK
        || gp_msg_check_device(m, (const uint8_t *)out_lo, (uint8_t *)out_lo, out_hi - out_lo, &gpu_out) != GP_MEM_OK
        || gpu_in != gpu_out)
        return 0;
    for (size_t j = 0; j < n; j++) {
        if (req[j].kind == GP_REQ_CRYPT) {
            req[j].devmem = 1;
            req[j].gpu = gpu_in;
        }
    }
    return 1;
}

/*
 * Device mode: every pipe's data must be CUDA memory the executor takes (gp_msg_check_device), and
 * AAD host memory, as for a single message. A call whose pipes give host and device buffers side
 * by side is refused as mixed, naming the first pipe whose buffer is of the other kind. The GPU of
 * each request goes into req[i].
 */
static int device_args_ok(gp_cipher_ctx *ctx, gp_request *req, const size_t *pipe_of, size_t n)
{
    gp_pipeline *pl = ctx->pipe;
    int st, host = 0, device = 0;
    const int hulls = device_hulls_ok(pl->pipes[pipe_of[0]].msg, req, n);

    for (size_t j = 0; j < n; j++) {
        gp_pipe *p = &pl->pipes[pipe_of[j]];
        gp_request *r = &req[j];

        if (r->kind == GP_REQ_CRYPT && hulls)
            continue;
        if (r->kind == GP_REQ_AAD) {
            if (!gp_msg_is_host_memory(p->msg, r->in, r->len)) {
                GP_RAISE_PIPE(GP_R_DEVICE_MEMORY_AAD, pipe_of[j]);
                return 0;
            }
            continue;
        }
        st = gp_msg_check_device(p->msg, r->in, r->out, r->len, &r->gpu);
        if (st == GP_MEM_NOT_DEVICE) {
            if (device) {   /* a host buffer after device ones */
                GP_RAISE_PIPE(GP_R_PIPE_MIXED_MEMORY, pipe_of[j]);
                return 0;
            }
            host = 1;
            continue;
        }
        if (st != GP_MEM_OK) {
            GP_RAISE_PIPE(gp_cipher_mem_reason(ctx, st), pipe_of[j]);
            return 0;
        }
        if (host) {         /* a device buffer after host ones */
            GP_RAISE_PIPE(GP_R_PIPE_MIXED_MEMORY, pipe_of[j]);
            return 0;
        }
        device = 1;
        r->devmem = 1;
    }
    if (host) {
        /* Every pipe's buffers are host memory: the context's mode says device. */
        for (size_t j = 0; j < n; j++)
            if (req[j].kind == GP_REQ_CRYPT) {
                GP_RAISE_PIPE(GP_R_NOT_DEVICE_MEMORY, pipe_of[j]);
                break;
            }
        return 0;
    }
    return 1;
}

/* A decryption in host memory keeps where each pipe's output went: a pipe whose tag fails has it
 * cleared at Final. Room for one more span of pipe p; 0 with an error raised. */
static int span_room(gp_pipe *p)
{
    gp_pipe_span *s;
    size_t cap;

    if (p->nspans < p->cap)
        return 1;
    cap = p->cap != 0 ? p->cap * 2 : 4;
    if ((s = OPENSSL_realloc(p->spans, cap * sizeof(*s))) == NULL) {
        GP_RAISE(GP_R_OUT_OF_MEMORY);
        return 0;
    }
    p->spans = s;
    p->cap = cap;
    return 1;
}

/* Pipe p took `len` bytes of AAD or text in an update (either path): its counts, and a decryption's
 * span of output (`spans`) to clear if its tag does not match. */
static void pipe_took(gp_pipe *p, int aad, int spans, unsigned char *out, size_t len)
{
    if (aad) {
        p->aad_bytes += len;
        return;
    }
    p->text_bytes += len;
    if (spans)
        p->spans[p->nspans++] = (gp_pipe_span){ out, len };
}

/* gp_pipe_update's calls on the lane, its arguments checked: every pipe started, then each one's
 * AAD or data as one call into the default's update. */
static int lane_update(gp_cipher_ctx *ctx, gp_pipeline *pl, unsigned char **out, size_t *outl,
                       const unsigned char **in, const size_t *inl, int spans)
{
    const gp_cpu_direct *d = pl->lane;
    size_t failed[GP_MAX_PIPES], nfailed = 0, calls = 0, bytes = 0;
    const int aad = out == NULL;

    for (size_t i = 0; i < pl->numpipes; i++) {
        if (inl[i] > 0 && !lane_start(ctx, d, &pl->pipes[i])) {
            GP_RAISE_PIPE(GP_R_EXECUTOR_FAILURE, i);
            return 0;
        }
    }
    for (size_t i = 0; i < pl->numpipes; i++) {
        gp_pipe *p = &pl->pipes[i];
        size_t n = 0;
        int ok;

        if (inl[i] == 0)
            continue;
        /* Output size the input length, as EVP passes it for ciphers of block size 1. */
        ok = d->update(p->lane_ctx, aad ? NULL : out[i], &n, inl[i], in[i], inl[i]) && (aad || n == inl[i]);
        gp_cpu_clean_upper_state();
        calls++;
        bytes += inl[i];
        if (!ok) {
            p->failed = 1;
            failed[nfailed++] = i;
            continue;
        }
        outl[i] = inl[i];
        pipe_took(p, aad, spans, aad ? NULL : out[i], inl[i]);
    }
    gp_engine_note_large(ctx->provctx->engine, ctx->info->alg, bytes);   /* the demand, as gp_msgs_submit notes it */
    gp_engine_count_lane(ctx->provctx->engine, calls, bytes);
    GP_RAISE_PIPES(GP_R_EXECUTOR_FAILURE, failed, nfailed);
    return nfailed == 0;
}

int gp_pipe_update(void *vctx, size_t numpipes, unsigned char **out, size_t *outl, const size_t *outsize,
                   const unsigned char **in, const size_t *inl)
{
    gp_cipher_ctx *ctx = vctx;
    gp_pipeline *pl = pipeline_open(ctx, numpipes);
    gp_request req[GP_MAX_PIPES];
    size_t pipe_of[GP_MAX_PIPES], failed[GP_MAX_PIPES], n = 0, nfailed = 0;
    const int aad = out == NULL, spans = !ctx->enc && !ctx->devmem && is_aead(ctx);

    if (pl == NULL)
        return 0;
    if (outl == NULL || in == NULL || inl == NULL || (!aad && outsize == NULL)) {
        GP_RAISE(GP_R_PIPE_NULL_ARRAY);
        return 0;
    }
    if (aad && !is_aead(ctx)) {
        GP_RAISE(GP_R_PIPE_NO_AAD);
        return 0;
    }
    /* Every pipe's arguments before any pipe's request. */
    for (size_t i = 0; i < numpipes; i++) {
        outl[i] = 0;
        if (!pipe_args_ok(ctx, &pl->pipes[i], i, out, outsize, in, inl))
            return 0;
        if (inl[i] > 0 && !aad && spans && !span_room(&pl->pipes[i]))
            return 0;
    }
    if (lane_for(ctx, pl) != NULL)
        return lane_update(ctx, pl, out, outl, in, inl, spans);
    /* One clearing of the requests (a compound literal per request cleared each with a `rep stos`
     * of its own, a visible share of a 16 KiB message's cost on the CPU). */
    memset(req, 0, numpipes * sizeof(req[0]));
    for (size_t i = 0; i < numpipes; i++) {
        if (inl[i] == 0)
            continue;
        if (!pipe_start(ctx, &pl->pipes[i], i))
            return 0;
        req[n].msg = pl->pipes[i].msg;
        req[n].kind = aad ? GP_REQ_AAD : GP_REQ_CRYPT;
        req[n].in = in[i];
        req[n].out = aad ? NULL : out[i];
        req[n].len = inl[i];
        pipe_of[n++] = i;
    }
    if (n == 0)
        return 1;
    if (ctx->devmem && !device_args_ok(ctx, req, pipe_of, n))
        return 0;
    (void)gp_msgs_submit(ctx->provctx->engine, req, n);
    for (size_t j = 0; j < n; j++) {
        const size_t i = pipe_of[j];
        gp_pipe *p = &pl->pipes[i];

        if (req[j].status != GP_REQ_OK) {
            p->failed = 1;
            failed[nfailed++] = i;
            continue;
        }
        outl[i] = inl[i];   /* AAD reports its length too, as the default provider reports AAD updates */
        pipe_took(p, aad, spans, aad ? NULL : out[i], inl[i]);
    }
    GP_RAISE_PIPES(ctx->devmem ? GP_R_DEVICE_MEMORY_GPU_FAILURE : GP_R_EXECUTOR_FAILURE, failed, nfailed);
    return nfailed == 0;
}

/* A decryption's pipe whose tag did not match: what it output is cleared (host memory; device
 * memory is the caller's to drop: docs/limitations.md). */
static void clear_output(gp_pipe *p)
{
    for (size_t k = 0; k < p->nspans; k++)
        OPENSSL_cleanse(p->spans[k].p, p->spans[k].len);
    p->nspans = 0;
}

/* A Final's verdicts: the pipes whose tag did not match and those whose request failed. */
typedef struct pipe_verdicts {
    size_t bad[GP_MAX_PIPES], failed[GP_MAX_PIPES], nbad, nfailed;
} pipe_verdicts;

/* Pipe p (index i) ended with status st (GP_REQ_*): a mismatched tag clears its output. */
static void verdict_add(pipe_verdicts *v, const gp_cipher_ctx *ctx, gp_pipe *p, size_t i, int st)
{
    p->tag_ok = st == GP_REQ_OK && ctx->enc;
    if (st == GP_REQ_BAD_TAG) {
        clear_output(p);
        v->bad[v->nbad++] = i;
    } else if (st != GP_REQ_OK) {
        v->failed[v->nfailed++] = i;
    }
}

/* gp_pipe_final of an AEAD on the lane, its arguments checked: every pipe started (an empty
 * message's tag is still due), then each one's tag or verdict. */
static int lane_final(gp_cipher_ctx *ctx, gp_pipeline *pl)
{
    const gp_cpu_direct *d = pl->lane;
    pipe_verdicts v = { .nbad = 0, .nfailed = 0 };

    for (size_t i = 0; i < pl->numpipes; i++) {
        if (!lane_start(ctx, d, &pl->pipes[i])) {
            GP_RAISE_PIPE(GP_R_EXECUTOR_FAILURE, i);
            return 0;
        }
    }
    pl->finished = 1;
    for (size_t i = 0; i < pl->numpipes; i++)
        verdict_add(&v, ctx, &pl->pipes[i], i, lane_tag(ctx, d, &pl->pipes[i]));
    gp_engine_count_lane(ctx->provctx->engine, pl->numpipes, 0);
    GP_RAISE_PIPES(GP_R_TAG_MISMATCH, v.bad, v.nbad);
    GP_RAISE_PIPES(GP_R_EXECUTOR_FAILURE, v.failed, v.nfailed);
    return v.nbad == 0 && v.nfailed == 0;
}

int gp_pipe_final(void *vctx, size_t numpipes, unsigned char **out, size_t *outl, const size_t *outsize)
{
    gp_cipher_ctx *ctx = vctx;
    gp_pipeline *pl = pipeline_open(ctx, numpipes);
    gp_request req[GP_MAX_PIPES];
    pipe_verdicts v = { .nbad = 0, .nfailed = 0 };
    size_t n = 0;

    (void)out;   /* stream and AEAD modes output everything in update: Final writes no byte */
    (void)outsize;
    if (pl == NULL)
        return 0;
    if (outl == NULL) {
        GP_RAISE(GP_R_PIPE_NULL_ARRAY);
        return 0;
    }
    for (size_t i = 0; i < numpipes; i++) {
        outl[i] = 0;
        if (pl->pipes[i].failed) {
            GP_RAISE_PIPE(GP_R_PIPE_FAILED, i);
            return 0;
        }
        if (is_aead(ctx) && !ctx->enc && !pl->pipes[i].tag_ok) {
            GP_RAISE_PIPE(GP_R_TAG_NOT_SET, i);   /* set "pipeline-tag" before a decrypt Final */
            return 0;
        }
    }
    if (!is_aead(ctx)) {
        pl->finished = 1;
        return 1;
    }
    if (lane_for(ctx, pl) != NULL)
        return lane_final(ctx, pl);
    memset(req, 0, numpipes * sizeof(req[0]));   /* once (gp_pipe_update) */
    for (size_t i = 0; i < numpipes; i++) {
        gp_pipe *p = &pl->pipes[i];

        if (!pipe_start(ctx, p, i))   /* an empty message: its tag is still due */
            return 0;
        req[n].msg = p->msg;
        if (ctx->enc) {
            req[n].kind = GP_REQ_TAG;
            req[n].tag_out = p->tag;
        } else {
            req[n].kind = GP_REQ_VERIFY;
            req[n].tag_in = p->tag;
            req[n].taglen = pl->taglen;
        }
        n++;
    }
    (void)gp_msgs_submit(ctx->provctx->engine, req, n);
    pl->finished = 1;
    for (size_t i = 0; i < numpipes; i++)
        verdict_add(&v, ctx, &pl->pipes[i], i, req[i].status);
    /* One error per kind of failure, naming every pipe of that kind. */
    GP_RAISE_PIPES(GP_R_TAG_MISMATCH, v.bad, v.nbad);
    GP_RAISE_PIPES(ctx->devmem ? GP_R_DEVICE_MEMORY_GPU_FAILURE : GP_R_EXECUTOR_FAILURE, v.failed, v.nfailed);
    return v.nbad == 0 && v.nfailed == 0;
}

/* The "pipeline-tag" param: numpipes tag pointers (an OCTET_PTR whose data points at the array) of
 * data_size bytes each. The array, or NULL with an error raised. */
static unsigned char **tag_array(const gp_cipher_ctx *ctx, const OSSL_PARAM *p, size_t *taglen)
{
    unsigned char **tags = NULL;

    if (ctx->pipe == NULL) {
        GP_RAISE(GP_R_PIPE_NOT_INITIALISED);
        return NULL;
    }
    if (p->data_type != OSSL_PARAM_OCTET_PTR || p->data == NULL
        || !OSSL_PARAM_get_octet_ptr(p, (const void **)&tags, taglen) || tags == NULL) {
        GP_RAISE(GP_R_PIPE_NULL_ARRAY);
        return NULL;
    }
    if (*taglen == 0 || *taglen > AEAD_TAG_LEN) {
        GP_RAISE(GP_R_INVALID_TAG_LENGTH);
        return NULL;
    }
    for (size_t i = 0; i < ctx->pipe->numpipes; i++) {
        if (tags[i] == NULL) {
            GP_RAISE_PIPE(GP_R_PIPE_NULL_BUFFER, i);
            return NULL;
        }
    }
    return tags;
}

int gp_pipe_get_tags(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    size_t taglen = 0;
    unsigned char **tags = tag_array(ctx, p, &taglen);

    if (tags == NULL)
        return 0;
    /* Only an encryption whose Final made its tags has them (SP 800-38D §7.1). */
    for (size_t i = 0; i < ctx->pipe->numpipes; i++) {
        if (!ctx->enc || !ctx->pipe->finished || !ctx->pipe->pipes[i].tag_ok) {
            GP_RAISE_PIPE(GP_R_TAG_NOT_AVAILABLE, i);
            return 0;
        }
    }
    for (size_t i = 0; i < ctx->pipe->numpipes; i++) {
        gp_pipe *pp = &ctx->pipe->pipes[i];

        /* Stream-ordered: the tag is computed in stream order; wait for this pipe's own work. */
        if (gp_msg_tag_pending(pp->msg) && gp_msg_tag_wait(pp->msg, pp->tag) != GP_REQ_OK) {
            GP_RAISE_PIPE(GP_R_DEVICE_MEMORY_GPU_FAILURE, i);
            return 0;
        }
        memcpy(tags[i], pp->tag, taglen);
    }
    return 1;
}

int gp_pipe_set_tags(gp_cipher_ctx *ctx, const OSSL_PARAM *p)
{
    size_t taglen = 0;
    unsigned char **tags = tag_array(ctx, p, &taglen);

    if (tags == NULL)
        return 0;
    if (ctx->enc) {
        GP_RAISE(GP_R_TAG_NOT_NEEDED);
        return 0;
    }
    if (ctx->pipe->finished) {
        GP_RAISE(GP_R_MESSAGE_FINISHED);
        return 0;
    }
    for (size_t i = 0; i < ctx->pipe->numpipes; i++) {
        memcpy(ctx->pipe->pipes[i].tag, tags[i], taglen);
        ctx->pipe->pipes[i].tag_ok = 1;
    }
    ctx->pipe->taglen = taglen;
    return 1;
}
