/* SPDX-License-Identifier: Apache-2.0 */
/* What every unit of batching/ passes: keys, messages and requests, device-memory answers, the cpu lane's functions. */
#ifndef GP_REQUEST_H
#define GP_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/core_dispatch.h>

#include "kernels/batch_abi.h"   /* enum gp_alg */

/* The engine's objects, opaque here (batching/core/core.h lays them out). */
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
    /* Device mode (gp_msg_set_memory): a data request's `in` and `out` are CUDA memory on GPU
     * `gpu` (as the executor's mem_check found them), never read or written by host code. */
    int devmem;
    int gpu;
    /* Stream-ordered device mode (gp_msg_set_stream): the caller's stream (a cudaStream_t's value),
     * whose earlier work the request must follow; 0: none (synchronous device mode orders after the
     * legacy default stream only). */
    uint64_t stream;
    /* Set by the cuda executor's layout for each wave: `in` lies in a range the registration cache
     * holds (batching/reg_cache.h), and the GPU reads it there by DMA, not from the pinned arena;
     * direct_out: `out` too, apart from `in`, and the GPU's DMA writes it there. */
    int direct_in, direct_out;
    int status;              /* set by the executor: enum gp_req_status */
} gp_request;

enum gp_req_status {
    GP_REQ_BAD_TAG = -1,     /* GP_REQ_VERIFY: the tag does not match */
    GP_REQ_FAILED = 0,       /* the executor could not run it */
    GP_REQ_OK = 1,
    GP_REQ_SYNC = 2          /* gp_executor.ordered_run: not queued; the message is back in the
                              * engine's hands (its state in m->st): run it synchronously */
};

/* Device mode's answers (gp_msg_crypt_device, an executor's mem_check: batching/engine.h). */
typedef enum gp_mem_status {
    GP_MEM_OK = 0,
    GP_MEM_NOT_DEVICE,       /* not CUDA device or managed memory: host, freed or foreign */
    GP_MEM_PAST_END,         /* [p, p + len) runs past the end of p's allocation */
    GP_MEM_GPU_NOT_OPEN,     /* on a GPU the cuda executor does not use (knob device) */
    GP_MEM_SPLIT,            /* in and out on different GPUs */
    GP_MEM_NO_EXECUTOR,      /* no executor here takes device memory (no usable GPU, backend=cpu) */
    GP_MEM_FAILED,           /* the GPU failed running it; device memory has no CPU fallback */
    GP_MEM_BAD_STREAM        /* stream-ordered mode: the stream is not one of the GPU holding the data */
} gp_mem_status;

/*
 * The cpu lane. Where a context's messages run on the CPU, the provider hands each of its calls
 * straight to the default provider's own function for the cipher, on a default-provider context
 * of its own: EVP -> gpuprov -> default, one frame and a few checks more than EVP -> default. The
 * engine only says whether a message starting now belongs there (gp_engine_cpu_lane) and gives the
 * functions; it never sees the lane's calls. These are read from the default provider's dispatch
 * table when the cpu executor opens and stay valid while the engine lives.
 */
typedef struct gp_cpu_direct {
    void *provctx;
    OSSL_FUNC_cipher_newctx_fn *newctx;
    OSSL_FUNC_cipher_freectx_fn *freectx;
    OSSL_FUNC_cipher_dupctx_fn *dupctx;
    OSSL_FUNC_cipher_encrypt_init_fn *einit;
    OSSL_FUNC_cipher_decrypt_init_fn *dinit;
    OSSL_FUNC_cipher_update_fn *update;
    OSSL_FUNC_cipher_final_fn *final;
    OSSL_FUNC_cipher_get_ctx_params_fn *get_ctx_params;
    OSSL_FUNC_cipher_set_ctx_params_fn *set_ctx_params;
    size_t ivlen;                /* the cipher's default IV length (a new context starts there) */
} gp_cpu_direct;

/* Updates from this size up leave the lane's shortcut: they may start the GPU's warm-up (a message
 * this large may go to the GPU even from a lone synchronous caller, batching/policy/hybrid.c, rule 2). */
#define GP_DEMAND_BYTES (256u * 1024u)

/* Keys: scheduled once, immutable afterwards; raw bytes kept for the cpu executor. */
gp_key *gp_key_new(gp_engine *e, uint32_t alg, const uint8_t *key, size_t keylen);
gp_key *gp_key_dup(const gp_key *k);
/* Does `k` hold exactly this key? (constant time in the key bytes) Re-inits with the same key, as
 * `openssl speed` and many applications do per message, keep their schedules. */
int gp_key_matches(const gp_key *k, const uint8_t *key, size_t keylen);
void gp_key_free(gp_key *k);                  /* cleanses */
/* The key's bytes, as given (the cpu lane hands them to the default provider). */
const uint8_t *gp_key_bytes(const gp_key *k);

/* Messages: one per EVP context; restarted for each new IV. */
gp_msg *gp_msg_new(gp_engine *e);
gp_msg *gp_msg_dup(const gp_msg *m, gp_key *key_of_copy);   /* deep copy, mid-stream too */
void gp_msg_free(gp_msg *m);                  /* cleanses */

#endif
