/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel state shared by the host and cuda executors (kstate.c), in one format for both. */
/* So a message starts the same way on both and moves between them mid-stream. */
#ifndef GP_KSTATE_H
#define GP_KSTATE_H

#include "batching/request.h"

/* The executors' msg_start: J0, E_K(J0) and a fresh set of MAC powers. */
int gp_kstate_msg_start(gp_engine *e, gp_msg *m);
/* The MAC powers job j of message m reads: its key's (GCM), or the message's own powers of r
 * (ChaCha20-Poly1305), each made the first time a request of the message needs it. */
const gp_mac_pows *gp_kstate_pows(gp_msg *m, const gp_key_sched *ks, const gp_job *j);
/* The same for request r planned on its message's state now (the state it will run from); NULL
 * unless it is a ChaCha20-Poly1305 data request that may have body units. */
const gp_mac_pows *gp_kstate_prepare_pows(gp_request *r);
/* The executors' prepare: a ChaCha20-Poly1305 request's powers of r, when it has body units, on
 * the submitter's thread rather than on the batch's one leader (a 16 KiB body reads 41 of the
 * table's 97 entries). */
void gp_kstate_prepare(gp_engine *e, gp_request *r);

/*
 * After the executor a message ran on failed: what of the kernel state the cpu executor (OpenSSL's
 * default provider, which imports no state) can take on.
 *
 * gp_kstate_begun: has the message absorbed or produced anything (AAD, data, a pending MAC block)?
 * An AEAD message that has not can start again from its key and IV anywhere; one that has carries
 * a GHASH or Poly1305 accumulator only the kernel-code executors hold.
 *
 * gp_kstate_stream_point (AES-CTR, ChaCha20): the counter block of the keystream block in progress
 * and how many of its bytes the stream has used (0..15, ChaCha20 0..63), as OpenSSL counts
 * (SP 800-38A §B.1: the whole block big-endian; ChaCha20's IV is LE32 counter || nonce, the counter
 * carrying into the next word). A default-provider context started with that block as its IV, once
 * it has run `used` bytes, makes the next byte the kernel state would have made.
 */
int gp_kstate_begun(const gp_msg_state *st);
void gp_kstate_stream_point(const gp_msg_state *st, uint8_t block[16], size_t *used);

/*
 * Stream-ordered device mode (engine.h, gp_msg_set_stream) plans a queued request before the ones
 * queued before it have run, from a shadow of the message's state: what running `op` on `len`
 * bytes, with `aad_len` bytes of carried AAD first, does to the fields a plan reads (gp_job_plan:
 * text_len, ctr; gp_lead_idle: mac_pend_len; and aad_len, in_text), as the kernels change them,
 * without running it (no key, no data: the shadow holds no MAC or keystream).
 * gp_kstate_shadow_matches: do a state and a shadow agree on those fields?
 */
void gp_kstate_shadow_advance(gp_msg_state *sh, uint32_t op, uint64_t len, uint32_t aad_len);
int gp_kstate_shadow_matches(const gp_msg_state *st, const gp_msg_state *sh);

/*
 * Stream-ordered batches (batching/executor.h, ordered_batch): the requests of several messages on
 * one stream, at most one each (an OpenSSL 3.5 pipeline call), queued together and run in passes,
 * each one launch pair (kernels/batch_abi.h, gp_ordered_batch_args). A pass takes the next slice
 * of every request not yet planned whole, in the requests' order, while the pass's parameter holds
 * their carried AAD and powers of r (GP_ORDERED_BATCH_EXTRA); a request's first slice carries its
 * AAD; a tag, or a request of no bytes, is one slice of none. Each slice is planned from its
 * message's shadow (above), which then moves past it, so a message's slices are planned in order,
 * each from the state the ones before leave, and a message is in a pass at most once. Both
 * kernel-code executors plan with it: the cuda executor lays each pass out in its lead message's
 * block from `at`; the host stand-in checks each slice's plan against the state it finds.
 */
typedef struct gp_ordered_req {
    gp_msg_state *shadow;         /* the message's shadow: moved on as its slices are planned */
    uint32_t op;                  /* enum gp_op */
    uint32_t aad_len;             /* carried AAD (at most GP_MSG_AAD_HOLD), with the first slice */
    uint64_t len;                 /* data bytes; 0 for a tag */
    uint64_t planned;             /* bytes planned so far */
    int begun;                    /* a slice of it has been planned */
} gp_ordered_req;

typedef struct gp_ordered_slot {
    uint32_t req;                 /* the request's index */
    uint32_t aad_len;             /* carried AAD (the first slice's), 0 after */
    uint64_t off, len;            /* the slice of the request's data */
    gp_job job;                   /* planned from the shadow the slice starts from */
    int pows;                     /* ChaCha20-Poly1305 with body units: the message's powers of r ride along */
    uint32_t ref_first;           /* its refs, units then the lead, from this index */
    uint32_t extra_at;            /* its AAD (padded to 16 bytes), then its powers, in the parameter */
    uint64_t spans, aad, pow_at, partials;   /* its regions in the pass's area, from `at` */
} gp_ordered_slot;

typedef struct gp_ordered_pass {
    uint32_t n;                   /* slots, in the requests' order */
    uint32_t nrefs;               /* refs of every slot; the claim counter follows them */
    uint32_t extra;               /* bytes of the parameter's extra used */
    uint64_t works, refs, end;    /* the gp_work table, the refs, the area's end (all from `at`) */
    gp_ordered_slot s[GP_ORDERED_BATCH_MAX];
} gp_ordered_pass;

/* The next pass of reqs[0..n) (n <= GP_ORDERED_BATCH_MAX) in slices of `slice` bytes, its area
 * from `at`; 0 when every request is planned whole. */
int gp_ordered_pass_next(gp_ordered_req *reqs, size_t n, size_t slice, uint64_t at, gp_ordered_pass *p);

/*
 * A data request longer than a slice runs as consecutive requests of a slice each, every one from
 * the state the one before left (counters and GHASH or Poly1305 state carry from slice to slice as
 * they do from update to update): what one pass takes (the cuda executor's arenas, the host
 * executor's partial MACs) stays bounded whatever the update's length (EVP allows 2 GiB in one
 * call). A multiple of 64, so every slice but the last ends on a block of every cipher.
 */
#define GP_SLICE_BYTES ((size_t)16 << 20)
/* The slice length in this engine (a test build's slice_bytes hook may shorten it). */
size_t gp_kstate_slice_bytes(const gp_engine *e);

#endif
