/* SPDX-License-Identifier: Apache-2.0 */
/* The cipher context shared by every algorithm, and the helpers the per-mode files build on. */
#ifndef GP_CIPHER_CTX_H
#define GP_CIPHER_CTX_H

#include <limits.h>
#include <openssl/core_dispatch.h>
#include <openssl/params.h>

#include "batching/base/base.h"   /* gp_cpu_clean_upper_state */
#include "params.h"
#include "provctx.h"

/* GP_NOINLINE (batching/base/base.h) keeps the general path of an update out of line, so that the
 * lane's shortcut before it needs no stack frame and ends in a tail call (provider/stream_common.c). */
/* The lane's shortcuts are the expected path of a context on it: the compiler lays them out
 * straight and the general path after them. */
#define GP_LIKELY(x) __builtin_expect(!!(x), 1)
#define GP_UNLIKELY(x) __builtin_expect(!!(x), 0)

/*
 * The cpu lane (batching/engine.h): while `d` is set, the context's messages run on the default
 * provider's context `algctx`, each EVP call handed straight to the default's function after the
 * provider's own checks (provider/cpu_lane.c). It opens and closes only at a message boundary.
 */
typedef struct gp_cpu_lane {
    const gp_cpu_direct *d;     /* NULL: closed; messages go through the engine */
    void *algctx;
    const _Atomic unsigned *epoch_word;   /* gp_engine_route_epoch: routing changed when it moves */
    unsigned epoch;             /* its value when the lane was chosen */
    int key_loaded;             /* algctx holds the context's key */
    size_t ivlen;               /* GCM: the IV length algctx is set to */
    /* The shortcuts' armed fields, each one test for the conditions that only entry points change:
     * recomputed at the end of every entry point but the shortcuts themselves (gp_lane_rearm;
     * aead_common.c, aead_rearm, for the AEAD ones), which keep them in step for what they change.
     * Side by side, so that disarming them is two stores.
     * `go`: the default's update while the update shortcut may call it straight (the lane open, a
     * started message, no TLS record pending, AES (tail) and no counting). */
    OSSL_FUNC_cipher_update_fn *go;
    /* AEAD: the default's init per direction ([enc]) while an IV-only re-init may take the shortcut
     * as a tail call (`reinit` and tail). */
    OSSL_FUNC_cipher_encrypt_init_fn *reinit_go[2];
    /* AEAD: the default's get_ctx_params while the lane's context answers for the context (an
     * encryption past its Final: lane_has_answers), else NULL. */
    OSSL_FUNC_cipher_get_ctx_params_fn *ask;
    /* AEAD: an IV-only re-init may take the shortcut (the lane open with the key loaded, 96-bit IVs
     * on both sides, no TLS 1.2 record mode and no record pending, a message started before). */
    int reinit;
    OSSL_FUNC_cipher_update_fn *go_when_started;   /* `go` for a started message: the default's
                                                     * update where tail and not count, else NULL */
    int count;                  /* knob stats: count its updates and their bytes */
    int tag_synced;             /* algctx holds the expected tag (SET_TAG) the context holds */
    int tls;                    /* TLS 1.2 record mode on the lane: algctx took TLS1_IV_FIXED as
                                 * the context's whole IV, and each record is one call into it */
    int tail;                   /* AES: the default's code returns with the vector state clean, so
                                 * its functions may be the last act (a tail call); ChaCha20's
                                 * leaves the upper YMM halves in use (gp_cpu_clean_upper_state) */
    uint64_t calls, bytes;
} gp_cpu_lane;

/* Static description of one algorithm, as the default provider reports it. */
typedef struct gp_cipher_info {
    uint32_t alg;               /* enum gp_alg */
    unsigned int mode;          /* EVP_CIPH_CTR_MODE, EVP_CIPH_GCM_MODE, or 0 (ChaCha) */
    size_t keylen;
    size_t ivlen;               /* default IV length */
    int aead;
    int custom_iv;
} gp_cipher_info;

/*
 * Where the current IV stands. BUFFERED: an IV is set and the message starts at the next update;
 * STARTED: a message is in progress; FINISHED: an AEAD Final was done and the IV must not be reused;
 * DROPPED: the key, the direction or the GCM IV length changed under a message (or a buffered
 * GCM IV), so neither going on nor starting again from its IV is sound (the same key and IV would
 * give the same keystream): updates and Final are refused until a new IV is set.
 */
typedef enum gp_iv_state { GP_IV_UNSET, GP_IV_BUFFERED, GP_IV_STARTED, GP_IV_FINISHED, GP_IV_DROPPED } gp_iv_state;

/* Where an encryption's tag is after its Final (tag_ready): none, the context's tag_out, the
 * lane's context, which answers GET_TAG until the lane closes and hands it to tag_out, or queued on
 * the caller's stream (stream-ordered device mode), which GET_TAG waits for (gp_cipher_take_tag). */
enum gp_tag_place { GP_TAG_NONE, GP_TAG_OWN, GP_TAG_LANE, GP_TAG_QUEUED };

/* A span of a pipe's output (a decryption's, in host memory): what its Final clears when the pipe's
 * tag does not match. */
typedef struct gp_pipe_span {
    unsigned char *p;
    size_t len;
} gp_pipe_span;

/* One pipe of a pipeline (OpenSSL 3.5's EVP_CipherPipeline*): a message of its own on the engine,
 * or on the pipeline's lane (provider/pipeline.c) its own default-provider context. */
typedef struct gp_pipe {
    gp_msg *msg;
    void *lane_ctx;             /* the lane: the default's context (made by the pipeline's lane_d) */
    int lane_keyed;             /* lane_ctx holds the context's key (gp_cipher_set_key clears it) */
    size_t lane_ivlen;          /* GCM: the IV length lane_ctx is set to */
    uint8_t iv[128];
    int started;                /* msg started from iv (the first update or Final starts it) */
    int failed;                 /* a request of it failed: the rest of its message is refused */
    uint64_t aad_bytes, text_bytes;
    uint8_t tag[16];            /* encrypt: the tag Final computed; decrypt: the expected tag */
    int tag_ok;                 /* encrypt: tag holds it; decrypt: the expected tag was set */
    gp_pipe_span *spans;        /* decrypt, host memory: its outputs so far */
    size_t nspans, cap;
} gp_pipe;

/* A context initialised for a pipeline: one key, `numpipes` messages (provider/pipeline.c). */
typedef struct gp_pipeline {
    size_t numpipes;
    size_t ivlen;
    int finished;               /* Final ran: a new pipeline init starts the next messages */
    size_t taglen;              /* decrypt: the length of the expected tags */
    const gp_cpu_direct *lane;  /* this pipeline's messages on the default's functions; NULL: the engine */
    int lane_asked;             /* `lane` chosen for the messages of the current init */
    const gp_cpu_direct *lane_d;   /* what made the pipes' lane_ctx (frees them) */
    gp_pipe pipes[];
} gp_pipeline;

typedef struct gp_cipher_ctx {
    gp_provctx *provctx;
    const gp_cipher_info *info;
    int enc;
    gp_key *key;                /* NULL until a key is set */
    gp_msg *msg;                /* the engine's message, while the lane is closed */
    gp_cpu_lane lane;
    gp_iv_state iv_state;
    int tag_ready;              /* encrypt: where the tag Final computed is (gp_tag_place); next to
                                 * iv_state, so that a message's start sets both with one store */
    int taglen_full;            /* GCM: AEAD_TAGLEN reads 16 (an encrypt Final or a TLS record ran
                                 * since the last SET_TAG, as the default provider reports it) */
    int begun;                  /* a 0-byte EVP_Cipher began the message (it counts no bytes) */
    uint8_t iv[128];            /* the IV the next/current message starts from */
    size_t ivlen;
    uint8_t oiv[16];            /* CTR/ChaCha20: the IV as given (OSSL_CIPHER_PARAM_IV) */
    uint64_t aad_bytes;         /* this message */
    uint64_t text_bytes;        /* this message; AEAD: not 0 once data began (only data adds to it,
                                 * a request of at least one byte), after which AAD is refused */
    uint64_t last_text_bytes;   /* of the previous message (UINT64_MAX: none yet) */
    /* AEAD: the counts up to which the lane's shortcut takes a request, the per-IV limits
     * (gp_aead_text_fits, gp_aead_aad_fits) less GP_DEMAND_BYTES: no request it takes can pass
     * them from there, nor wrap the count; beyond, the general path checks exactly. */
    uint64_t text_lane_max, aad_lane_max;
    unsigned int pad;           /* PADDING: stored and reported; stream modes do not pad */
    int tls_version_set;        /* CTR/ChaCha20: a TLS_VERSION above 0 was taken */
    int tls_mac_size_set;       /* CTR/ChaCha20: a TLS_MAC_SIZE above 0 was taken */
    /* AEAD */
    uint8_t tag[16];            /* decrypt: the expected tag (SET_TAG) */
    uint8_t tag_out[16];        /* encrypt: the tag Final computed, apart from the expected one: an
                                 * encryption between a SET_TAG and its decrypt Final must not
                                 * change what that Final checks against, or a decryption would be
                                 * verified against a tag it did not receive (the default provider
                                 * keeps both in one buffer and has that fault; gpuprov does not
                                 * copy it: tests/fuzz/regress/fr7-gcm-enc-final-clobbers-expected-tag) */
    size_t taglen;              /* length of the expected tag (decrypt) */
    int tag_expected;           /* decrypt: SET_TAG given for the next Final */
    /* TLS 1.2 record mode */
    uint8_t tls_aad[13];
    size_t tls_aad_len;         /* 0 unless TLS1_AAD was set for the next record */
    size_t tls_aad_pad;
    size_t tls_payload;         /* ChaCha20-Poly1305: payload length from the AAD */
    int iv_gen;                 /* GCM: TLS1_IV_FIXED set, invocation field per record */
    int tls_fixed;              /* TLS1_IV_FIXED set (GCM and ChaCha20-Poly1305) */
    uint64_t tls_enc_records;
    int devmem;                 /* GP_CIPHER_PARAM_MEMORY = "device": data updates' buffers are
                                 * CUDA memory; never on the lane (cpu_lane.c) */
    uint64_t stream;            /* GP_CIPHER_PARAM_CUDA_STREAM: device mode ordered on this stream
                                 * (0: synchronous); kept across inits */
    gp_pipeline *pipe;          /* initialised for a pipeline; NULL: single messages */
} gp_cipher_ctx;

void *gp_cipher_newctx(void *provctx, const gp_cipher_info *info);
void gp_cipher_freectx(void *vctx);
void *gp_cipher_dupctx(void *vctx);

int gp_cipher_get_static_params(OSSL_PARAM params[], const gp_cipher_info *info);
const OSSL_PARAM *gp_cipher_gettable_params(void *provctx);

/* Replace the key; 0 with an error raised when the length is wrong or memory runs out. */
int gp_cipher_set_key(gp_cipher_ctx *ctx, const unsigned char *key, size_t keylen);
/* Start a message from `iv`; resets the per-message counters. */
int gp_cipher_begin(gp_cipher_ctx *ctx, const uint8_t *iv, size_t ivlen);
/* Checks every update makes before touching data. Inline: they run on every update, and every
 * call of gpuprov's own is a share of what loading it adds to the default provider's cost. */
static inline int gp_cipher_check_update(size_t outsize, size_t inl, const unsigned char *out)
{
    /* EVP's lengths are ints: anything larger is a caller bug (EVP passes a negative inl as a huge
     * size_t), refused before a byte is touched. */
    if (inl > INT_MAX || (out != NULL && outsize < inl)) {
        gp_raise_update_refused(outsize, inl);   /* out of line: no good update raises */
        return 0;
    }
    return 1;
}

/* The lane (provider/cpu_lane.c). */
/* At every init, after the context's key, IV and direction are set: bring the lane's context in
 * step, choosing the lane (or the engine) when a message starts; 0 with an error raised. */
int gp_lane_init(gp_cipher_ctx *ctx);
/* One init on the lane's context: its key where it does not hold it yet, and `iv` if not NULL
 * (a message starts from it). */
int gp_lane_start(gp_cipher_ctx *ctx, const uint8_t *iv, size_t ivlen);
/* TLS 1.2 record mode on the lane (cpu_lane.c, "TLS 1.2"). Leave it: the lane closes, and a
 * message begun on it begins again on the engine's message from the context's IV. */
void gp_lane_leave_tls(gp_cipher_ctx *ctx);
/* After the context took TLS1_IV_FIXED: the lane's context takes the context's IV whole (or the
 * lane closes). */
void gp_lane_tls_fixed(gp_cipher_ctx *ctx);
/* After the context took TLS1_AAD `p` (its bytes as the caller gave them): the lane's context takes
 * them too where it is in record mode; otherwise, or if it refuses, the lane closes. */
void gp_lane_tls_aad(gp_cipher_ctx *ctx, const OSSL_PARAM *p);
/* Can the pending record run on the lane (record mode, routing unchanged)? */
static inline int gp_lane_tls_ready(const gp_cipher_ctx *ctx);
/* The record, checked by the caller, as one call into the lane's context; its result. */
int gp_lane_tls_record(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                       const unsigned char *in, size_t len);
/* Give the lane's context the expected tag the context holds (set before the lane opened, or
 * before a re-init the lane's context forgot it at); 0 with an error raised. */
int gp_lane_sync_tag(gp_cipher_ctx *ctx);
/* Hand the caller's params to the lane's context, but for its `ntls` TLS1_AAD and TLS1_IV_FIXED
 * (given their own way); 0 with an error raised. */
int gp_lane_set_params(gp_cipher_ctx *ctx, const OSSL_PARAM params[], size_t ntls);
int gp_lane_dup(gp_cipher_ctx *dst, const gp_cipher_ctx *src);
/* Free the lane's context and count its calls; the lane is closed afterwards. */
void gp_lane_close(gp_cipher_ctx *ctx);
/* A lane update that leaves the shortcut: checked by the caller, counted here, then one call. */
int gp_lane_update(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                   const unsigned char *in, size_t inl);

static inline void gp_lane_rearm(gp_cipher_ctx *ctx)
{
    ctx->lane.go = ctx->iv_state == GP_IV_STARTED && ctx->tls_aad_len == 0 ? ctx->lane.go_when_started : NULL;
}

/* Has the engine's routing stayed as it was when the lane was chosen? */
static inline int gp_lane_current(const gp_cipher_ctx *ctx)
{
    return atomic_load_explicit(ctx->lane.epoch_word, memory_order_relaxed) == ctx->lane.epoch;
}

static inline int gp_lane_tls_ready(const gp_cipher_ctx *ctx)
{
    return ctx->lane.d != NULL && ctx->lane.tls && gp_lane_current(ctx);
}

/* The per-message fields of a message that starts now. */
static inline void gp_cipher_message_clear(gp_cipher_ctx *ctx)
{
    ctx->iv_state = GP_IV_STARTED;
    ctx->tag_ready = 0;
    ctx->aad_bytes = 0;
    ctx->text_bytes = 0;
    ctx->begun = 0;
}

/* A message starts: the per-message fields reset (the last one's length kept for the lane's
 * choice, gp_engine_cpu_lane). */
static inline void gp_cipher_message_reset(gp_cipher_ctx *ctx)
{
    if (ctx->iv_state >= GP_IV_STARTED)
        ctx->last_text_bytes = ctx->text_bytes;
    gp_cipher_message_clear(ctx);
}

/* gp_cipher_message_reset where the caller knows a message started before (iv_state STARTED or
 * later). */
static inline void gp_cipher_message_next(gp_cipher_ctx *ctx)
{
    ctx->last_text_bytes = ctx->text_bytes;
    gp_cipher_message_clear(ctx);
}

/* Has the caller's AAD, data or cipher call begun the message in progress? (On the lane an init
 * begins the lane's message with nothing processed: that one may still start over.) */
static inline int gp_cipher_message_touched(const gp_cipher_ctx *ctx)
{
    return ctx->iv_state == GP_IV_STARTED
           && (ctx->aad_bytes != 0 || ctx->text_bytes != 0 || ctx->begun);
}

/* The shortcut's tail: counted before the call, so the call is the function's last act (a tail
 * call with the caller's own arguments; the default's update sets *outl and raises its own
 * errors). */
static inline int gp_lane_tail(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                               const unsigned char *in, size_t inl)
{
    int ok;

    if (ctx->lane.count) {
        ctx->lane.calls++;
        ctx->lane.bytes += inl;
    }
    if (ctx->lane.tail)
        return ctx->lane.d->update(ctx->lane.algctx, out, outl, outsize, in, inl);
    ok = ctx->lane.d->update(ctx->lane.algctx, out, outl, outsize, in, inl);
    gp_cpu_clean_upper_state();
    return ok;
}

/* A pipeline's messages and state: dropped at a single-message init and at freectx (the context
 * returns to single messages); kept by dupctx (cipher_common.c). */
void gp_cipher_pipe_end(gp_cipher_ctx *ctx);
/* The pipes' stream-ordered state released at once (their messages end together: the pipeline's
 * re-init, or its end), so that what they share is cleared once (gp_msgs_end_ordered). */
void gp_cipher_pipes_end_ordered(gp_pipeline *pl);
/* The single-message calls (update, Final, cipher) on a context initialised for a pipeline: refused
 * with an error (out of line: no good call raises). */
void gp_raise_pipeline_context(void);

/* The reason code (errors.h) that a device-mode buffer check's answer (GP_MEM_*, engine.h) raises,
 * for a single message and a pipe alike (cipher_common.c); 0 for GP_MEM_OK. */
int gp_cipher_mem_reason(const gp_cipher_ctx *ctx, int st);

/* GP_CIPHER_PARAM_MEMORY, set and got by every cipher (cipher_common.c); 0 with an error raised. */
int gp_cipher_set_memory(gp_cipher_ctx *ctx, const OSSL_PARAM *p);
int gp_cipher_get_memory(const gp_cipher_ctx *ctx, OSSL_PARAM *p);
/* GP_CIPHER_PARAM_CUDA_STREAM (set after GP_CIPHER_PARAM_MEMORY, wherever the caller put it), set
 * and got by every cipher (cipher_common.c); 0 with an error raised. */
int gp_cipher_set_stream(gp_cipher_ctx *ctx, const OSSL_PARAM *p);
int gp_cipher_get_stream(const gp_cipher_ctx *ctx, OSSL_PARAM *p);
/* An encryption's tag queued on the stream (GP_TAG_QUEUED): waited for, into tag_out; 0 with an
 * error raised when the queued work failed. */
int gp_cipher_take_tag(gp_cipher_ctx *ctx);
/* A data update on the engine's message, in host memory or (device mode) CUDA memory; 0 with an
 * error raised. */
int gp_cipher_crypt(gp_cipher_ctx *ctx, const unsigned char *in, unsigned char *out, size_t inl);
/* KEYLEN is settable to each algorithm's own value only. */
int gp_cipher_set_keylen(gp_cipher_ctx *ctx, const OSSL_PARAM params[]);

/* Stream modes (AES-CTR, ChaCha20): provider/stream_common.c */
OSSL_FUNC_cipher_encrypt_init_fn gp_stream_einit;
OSSL_FUNC_cipher_decrypt_init_fn gp_stream_dinit;
OSSL_FUNC_cipher_update_fn gp_stream_update;
OSSL_FUNC_cipher_final_fn gp_stream_final;
OSSL_FUNC_cipher_cipher_fn gp_stream_cipher;
OSSL_FUNC_cipher_get_ctx_params_fn gp_stream_get_ctx_params;
OSSL_FUNC_cipher_set_ctx_params_fn gp_stream_set_ctx_params;
OSSL_FUNC_cipher_gettable_ctx_params_fn gp_ctr_gettable_ctx_params, gp_chacha20_gettable_ctx_params;
OSSL_FUNC_cipher_settable_ctx_params_fn gp_ctr_settable_ctx_params, gp_chacha20_settable_ctx_params;

/* AEAD modes (AES-GCM, ChaCha20-Poly1305): provider/aead_common.c */
/* Per-IV limits. SP 800-38D §5.2.1.1: at most 2^39 - 256 bits of plaintext per IV and AAD below
 * 2^64 bits. RFC 8439 §2.8: the 32-bit block counter starts at 1, so at most (2^32 - 1) 64-byte
 * blocks per nonce, and a 64-bit AAD byte count. */
static inline uint64_t gp_aead_text_max(uint32_t alg)
{
    return alg == GP_ALG_AES_GCM ? (UINT64_C(1) << 36) - 32 : ((UINT64_C(1) << 32) - 1) * 64;
}

static inline uint64_t gp_aead_aad_max(uint32_t alg)
{
    return alg == GP_ALG_AES_GCM ? (UINT64_C(1) << 61) - 1 : UINT64_MAX;
}

/* May `add` more bytes follow `done`? */
static inline int gp_aead_text_fits(uint32_t alg, uint64_t done, uint64_t add)
{
    uint64_t max = gp_aead_text_max(alg);

    return done <= max && add <= max - done;
}

static inline int gp_aead_aad_fits(uint32_t alg, uint64_t done, uint64_t add)
{
    uint64_t max = gp_aead_aad_max(alg);

    return done <= max && add <= max - done;
}

OSSL_FUNC_cipher_encrypt_init_fn gp_aead_einit;
OSSL_FUNC_cipher_decrypt_init_fn gp_aead_dinit;
OSSL_FUNC_cipher_update_fn gp_aead_update;
OSSL_FUNC_cipher_final_fn gp_aead_final;
OSSL_FUNC_cipher_cipher_fn gp_aead_cipher;
OSSL_FUNC_cipher_get_ctx_params_fn gp_aead_get_ctx_params;
OSSL_FUNC_cipher_set_ctx_params_fn gp_aead_set_ctx_params;
OSSL_FUNC_cipher_gettable_ctx_params_fn gp_gcm_gettable_ctx_params, gp_chachapoly_gettable_ctx_params;
OSSL_FUNC_cipher_settable_ctx_params_fn gp_gcm_settable_ctx_params, gp_chachapoly_settable_ctx_params;

#endif
