/* SPDX-License-Identifier: Apache-2.0 */
/* The engine's face to the provider: keys, messages, requests, executors and stats. */
#ifndef GP_ENGINE_H
#define GP_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/core_dispatch.h>
#include <openssl/types.h>

#include "batching/settings.h"
#include "kernels/batch_abi.h"

/*
 * The provider turns EVP calls into requests on messages; the engine runs them on an executor:
 *   cuda : kernels/ on the GPU (issue 3)
 *   host : the same kernel code on CPU threads (how CI proves the kernels; last-resort fallback)
 *   cpu  : OpenSSL's default provider through a child library context
 * A message is owned by the executor chosen when it starts (the cpu executor keeps its own
 * default-provider context, so a message that starts there finishes there).
 */

typedef struct gp_engine gp_engine;
typedef struct gp_key gp_key;
typedef struct gp_msg gp_msg;

/* What a request asks of its message (one EVP update or final becomes one request). */
typedef enum gp_req_kind {
    GP_REQ_AAD = 1,      /* absorb in[0..len) as associated data */
    GP_REQ_CRYPT,        /* out[0..len) = cipher(in[0..len)) in the message's direction */
    GP_REQ_TAG,          /* encrypt: write the 16-byte tag to tag_out */
    GP_REQ_VERIFY        /* decrypt: compare the tag with tag_in[0..taglen) in constant time */
} gp_req_kind;

typedef struct gp_request {
    gp_msg *msg;
    gp_req_kind kind;
    const uint8_t *in;
    uint8_t *out;
    size_t len;
    const uint8_t *tag_in;   /* GP_REQ_VERIFY */
    size_t taglen;
    uint8_t *tag_out;        /* GP_REQ_TAG, 16 bytes */
    /* AEAD: AAD to absorb before the request's own work (the engine carries held AAD this way, so
     * AAD + data or AAD + tag is one batch entry: one round trip on the GPU). */
    const uint8_t *aad;
    size_t aad_len;
    /* Set by the queue for an async job's data request: `in` and `out` are then this chunk, which
     * the cuda executor's GPU reads and writes directly (batching/stage.h). */
    struct gp_stage_chunk *stage;
    /* Set by the cuda executor's prepare: the request's MAC powers are in `stage` (stage.h). */
    int stage_pows;
    int status;              /* set by the executor: enum gp_req_status */
} gp_request;

enum gp_req_status {
    GP_REQ_BAD_TAG = -1,     /* GP_REQ_VERIFY: the tag does not match */
    GP_REQ_FAILED = 0,       /* the executor could not run it */
    GP_REQ_OK = 1
};

gp_engine *gp_engine_new(const gp_knobs *knobs, OSSL_LIB_CTX *libctx);
void gp_engine_free(gp_engine *e);            /* prints the stats line when knobs.stats */
/* The executor new messages go to (resolves the backend knob: opens executors on first use). */
const char *gp_engine_backend_name(gp_engine *e);

/* Keys: scheduled once, immutable afterwards; raw bytes kept for the cpu executor. */
gp_key *gp_key_new(gp_engine *e, uint32_t alg, const uint8_t *key, size_t keylen);
gp_key *gp_key_dup(const gp_key *k);
/* Does `k` hold exactly this key? (constant time in the key bytes) Re-inits with the same key, as
 * `openssl speed` and many applications do per message, keep their schedules. */
int gp_key_matches(const gp_key *k, const uint8_t *key, size_t keylen);
void gp_key_free(gp_key *k);                  /* cleanses */

/* Messages: one per EVP context; restarted for each new IV. */
gp_msg *gp_msg_new(gp_engine *e);
gp_msg *gp_msg_dup(const gp_msg *m, gp_key *key_of_copy);   /* deep copy, mid-stream too */
void gp_msg_free(gp_msg *m);                  /* cleanses */
int gp_msg_start(gp_msg *m, gp_key *k, const uint8_t *iv, size_t ivlen, int enc);
int gp_msg_aad(gp_msg *m, const uint8_t *aad, size_t len);
int gp_msg_crypt(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len);
int gp_msg_tag(gp_msg *m, uint8_t tag[16]);
/* Decrypt: compare the computed tag with tag[0..taglen) in constant time; enum gp_req_status. */
int gp_msg_verify(gp_msg *m, const uint8_t *tag, size_t taglen);

/* Run several requests as one batch (what the provider's single calls do with n = 1). Requests of
 * one message run in submission order. Returns 1 when every request succeeded; each request's
 * status says which did not. */
int gp_engine_submit(gp_engine *e, gp_request *reqs, size_t n);

/*
 * Called after the default provider's code returns. OpenSSL 3.0's x86-64 ChaCha20-Poly1305 returns
 * with the upper halves of the YMM registers in use (XGETBV(1) bit 2 stays set after a 16-byte
 * update; AES-GCM's code clears them). Intel cores then make every legacy-SSE instruction that runs
 * next (the compiler's paddq for two counters, say) pay a state transition, and the provider's AVX
 * code the way back: a 16-byte ChaCha20-Poly1305 update took 2.2x the default provider's own on the
 * H200 host. VZEROUPPER returns the state to clean, as Intel's optimization manual asks of code
 * that leaves AVX; it costs about a cycle. Right after a call every vector register is clobbered
 * anyway, so the clobber list costs nothing.
 */
extern int gp_cpu_has_avx;   /* exec_cpu.c, at load: the CPU and the OS enable AVX */
static inline void gp_cpu_clean_upper_state(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (gp_cpu_has_avx)
        __asm__ volatile("vzeroupper" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                         "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#endif
}

/*
 * The cpu executor's fast lane. A message on the cpu executor's direct path can take its data
 * updates straight to the default provider's update function from the provider's own update:
 * EVP -> gpuprov -> default is then one extra indirect call and a few checks, where the way
 * through gp_msg_crypt cost 94 instructions on a 16-byte AES-CTR update (the default's own: 290).
 * gp_msg_cpu_fast_begin fills f when m runs there (returns 1), else clears it (0); f is valid
 * until m restarts, is freed or copied, and gp_msg_cpu_fast_end must come before any of those.
 */
typedef struct gp_cpu_fast {
    OSSL_FUNC_cipher_update_fn *update;   /* NULL: take gp_msg_crypt */
    void *algctx;                         /* the default provider's context of the message */
    size_t max_len;                       /* longer updates take gp_msg_crypt (they may start the
                                           * GPU's warm-up) */
    int tail;                             /* AES: the default's code returns with the vector state
                                           * clean, so the provider may end in a tail call to
                                           * `update` (ChaCha20's leaves the upper YMM halves in
                                           * use: gp_cpu_fast_update clears them after the call) */
    uint64_t calls, bytes;                /* updates made through f, for the stats */
} gp_cpu_fast;

int gp_msg_cpu_fast_begin(gp_msg *m, gp_cpu_fast *f);
/* Hand f's counts to m (the stats line) and clear f. */
void gp_msg_cpu_fast_end(gp_msg *m, gp_cpu_fast *f);
/* An update through f failed: count it as gp_msg_crypt would. */
void gp_msg_cpu_fast_failed(gp_msg *m);

/* One call of the default provider's update on its context: AAD (out NULL) or data, whose output
 * size is the input length (ciphers of block size 1); the vector state cleaned after it. */
static inline int gp_cpu_direct_update(OSSL_FUNC_cipher_update_fn *update, void *algctx,
                                       const uint8_t *in, uint8_t *out, size_t len)
{
    size_t outl = 0;
    int ok = update(algctx, out, &outl, len, in, len) && (out == NULL || outl == len);

    gp_cpu_clean_upper_state();
    return ok;
}

/* out[0..len) = the message's cipher of in[0..len), len in 1..f->max_len; 1 on success. */
static inline int gp_cpu_fast_update(gp_cpu_fast *f, const uint8_t *in, uint8_t *out, size_t len)
{
    f->calls++;
    f->bytes += len;
    return gp_cpu_direct_update(f->update, f->algctx, in, out, len);
}

/* A copy of the counters (kept only when knobs.stats is on), for tests and the stats line.
 * async_ops: requests made inside an ASYNC_JOB that paused the job while their batch ran. */
typedef struct gp_stats {
    uint64_t ops, bytes, cuda_ops, host_ops, cpu_ops, batches, fallbacks, errors, async_ops;
    uint64_t routed_gpu, routed_cpu;   /* hybrid: messages sent each way */
    uint64_t spec_tags;      /* tags/verdicts answered from the last request's speculative tag */
    uint64_t staged;         /* async data requests whose job staged its bytes (batching/stage.h) */
    uint64_t notify_ns;      /* spent waking async jobs (a write to each one's wait fd, or its callback) */
} gp_stats;
void gp_engine_stats(gp_engine *e, gp_stats *out);

#endif
