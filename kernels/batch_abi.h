/* SPDX-License-Identifier: Apache-2.0 */
/* The state format shared by the host and cuda executors: key schedules and per-message progress. */
#ifndef GP_BATCH_ABI_H
#define GP_BATCH_ABI_H

#include "kdefs.h"
#include "aes.h"
#include "poly1305.h"

/*
 * Plain C structs, identical on host and device, so a message can move between the host and cuda
 * executors mid-stream (a failed GPU batch's begun AEAD messages go on on the host from the same
 * state).
 * Kernels trust their input: lengths, phases and limits are checked by the caller (provider/ and
 * batching/) before a request reaches them.
 */

enum gp_alg {
    GP_ALG_AES_CTR = 1,           /* SP 800-38A §6.5, 128-bit big-endian counter (OpenSSL ctr128) */
    GP_ALG_AES_GCM = 2,           /* SP 800-38D */
    GP_ALG_CHACHA20 = 3,          /* RFC 8439 §2.4 with OpenSSL's 16-byte IV: LE32 counter || nonce */
    GP_ALG_CHACHA20_POLY1305 = 4  /* RFC 8439 §2.8 */
};

enum gp_op {
    GP_OP_AAD = 1,      /* absorb `len` bytes of `in` into the MAC; `out` unused */
    GP_OP_ENCRYPT = 2,  /* out = in ^ keystream, MAC over out (AEAD) */
    GP_OP_DECRYPT = 3,  /* MAC over in (AEAD), out = in ^ keystream */
    GP_OP_TAG = 4       /* AEAD only: write the 16-byte tag to `out`; `in`, `len` unused */
};

/*
 * Powers of a MAC key P (GCM's H, ChaCha20-Poly1305's r) that let the body units and the finisher
 * run with one multiplication per 16-byte block and no serial chain across units
 * (kernels/units.h): with L = GP_UNIT_LANES lanes a unit, Q = P^(4L) (one unit's worth of blocks),
 *   lane[l]  = P^(4(L-1-l)+1)  the power a lane's chunk is shifted by inside its unit
 *   fin[c-1] = P^(4c)          c = 1..L: the shift past a last unit of c chunks
 *   unit[i]  = Q^i             i = 0..L-1: a finisher lane's stride offset
 *   stride   = Q^L             a finisher lane's Horner step over every L-th unit
 *   near[i]  = P^(i+2)         i = 0, 1: a spread unit's block shifts inside its chunk
 *                              (kernels/units.h, gp_unit_quarter)
 * Each entry in gp_lane_mac words (GHASH: the element's big-endian halves as 32-bit words, word 4
 * zero; Poly1305: 26-bit limbs). GCM's are made with the key; Poly1305's r is per message, so the
 * planner makes them per request (gp_mac_pows_make).
 */
#ifndef GP_UNIT_BYTES
# define GP_UNIT_BYTES 2048u        /* build option unit_bytes; the planner and the kernel must agree */
#endif
#define GP_UNIT_LANES (GP_UNIT_BYTES / 64u)
#define GP_POW_LANE 0u
#define GP_POW_FIN GP_UNIT_LANES
#define GP_POW_UNIT (2u * GP_UNIT_LANES)
#define GP_POW_STRIDE (3u * GP_UNIT_LANES)
#define GP_POW_NEAR (3u * GP_UNIT_LANES + 1u)
#define GP_POW_COUNT (3u * GP_UNIT_LANES + 3u)

typedef struct gp_mac_pows {
    uint32_t p[GP_POW_COUNT][5];
    uint32_t pad_[4u - GP_POW_COUNT * 5u % 4u];   /* whole 16-byte lines */
} gp_mac_pows;

/* GCM's tag powers Q^(i+1) H, i = 0..GP_TAG_POWS-1, as GHASH words (gp_lane_mac words 0-3): a
 * finisher whose lanes also make the tag's product (kernels/units.h, gp_fold_dual) reads them. */
#define GP_TAG_POWS (GP_UNIT_LANES >= 8u ? GP_UNIT_LANES / 2u - 2u : 1u)

/* GCM's stride powers S^e, S = Q^L (the fold's step over every L-th unit), for e < GP_STRIDE_POWS^2
 * as S^(e mod 16) S^(16 (e div 16)): [0][e] = S^e and [1][j] = S^(16j), e, j = 0..15, as GHASH
 * words. A unit shifts its partial by its place in the fold with them, and the spans' fold reads
 * R^i and R^L from them (kernels/units.h, "Shifted partials"). */
#define GP_STRIDE_POWS 16u

/*
 * Made once per key, read-only afterwards. The device reads only the part before aes.rk (the
 * bitsliced round keys serve the host alone), so a batch copies GP_KEY_SCHED_DEVICE_BYTES.
 */
typedef struct gp_key_sched {
    uint32_t alg;                 /* enum gp_alg */
    uint32_t keylen;              /* bytes: 16, 24, 32 */
    uint32_t chacha_key[8];       /* ChaCha20 key words, little-endian (RFC 8439 §2.3) */
    uint64_t gcm_h[2];            /* GCM hash key H = E_K(0^128) as two big-endian words [hi, lo] */
    gp_mac_pows mac_pows;         /* GCM: powers of H; ChaCha20-Poly1305: a batch's copy of the key
                                   * carries the request's powers of r here (batching/cuda/plan.c) */
    uint32_t gcm_tag_pows[GP_TAG_POWS][4];   /* GCM: Q^(i+1) H (above) */
    uint32_t gcm_stride_pows[2][GP_STRIDE_POWS][4];   /* GCM: S^e, S^(16j) (above) */
    gp_aes_sched aes;             /* AES algorithms: nr and plain round keys first, then bitsliced */
} gp_key_sched;

#define GP_KEY_SCHED_DEVICE_BYTES (offsetof(gp_key_sched, aes) + offsetof(gp_aes_sched, rk))

/* One message's progress. Updates of any size continue exactly where the last stopped. */
typedef struct gp_msg_state {
    uint32_t alg;                 /* enum gp_alg */
    uint32_t ks_used;             /* bytes of `ks` consumed; 0 = no partial block buffered */
    uint8_t ctr[16];              /* counter block of the next keystream block to generate */
    uint8_t ks[64];               /* keystream of the partial block in progress (16 B AES, 64 B ChaCha) */
    uint64_t aad_len;             /* AAD bytes absorbed */
    uint64_t text_len;            /* plaintext/ciphertext bytes processed */
    uint32_t in_text;             /* 1 once the first data byte arrived (AAD is padded then) */
    uint32_t mac_pend_len;        /* bytes waiting in mac_pend for a full 16-byte MAC block */
    uint8_t mac_pend[16];         /* GHASH or Poly1305 input not yet a full block */
    uint64_t ghash_x[2];          /* GCM accumulator X, big-endian words [hi, lo] */
    uint8_t gcm_ekj0[16];         /* GCM E_K(J0), XORed into the tag (SP 800-38D §7.1 step 6) */
    gp_poly1305_state poly;       /* ChaCha20-Poly1305 accumulator and one-time key */
    /* AEAD: the tag as it would be if the message ended after the last AAD or data request, made
     * by that request's last unit (gp_spec_tag), so that a final call right after it (a TLS record,
     * any one-shot message) costs no second round trip. Valid until the next request. */
    uint8_t spec_tag[16];
    uint32_t spec_valid;
    uint32_t reserved;
} gp_msg_state;

/*
 * A data request's plan (kernels/units.h): a serial lead, `nunits` parallel body units of
 * GP_UNIT_BYTES, a tail. Made on the host from the state the request starts from.
 */
typedef struct gp_job {
    uint64_t len;                 /* bytes of the request */
    uint64_t head_len;            /* run by the lead */
    uint64_t body_len;            /* multiple of 64, split into units; the rest is the tail */
    uint32_t op;                  /* enum gp_op */
    uint32_t nunits;              /* ceil(body_len / GP_UNIT_BYTES) */
    uint8_t body_ctr[16];         /* counter block of the body's first keystream block */
    uint32_t aad_len;             /* AEAD: AAD absorbed by the lead first (carried with the request,
                                   * so AAD + data, or AAD + tag, is one round trip) */
    uint32_t nspans;              /* AEAD of more than GP_SPANS_FROM units: spans of the fold
                                   * (kernels/units.h); 0: one fold */
    uint64_t aad_off;             /* cuda: where that AAD is in the arena */
} gp_job;

/*
 * A batch as the GPU sees it: one arena (descriptor tables, inputs, key schedules, message states,
 * outputs, partial MACs) addressed by offsets, so it crosses PCIe in one copy launch each way. A lane
 * group per gp_unit_ref; each request (gp_work) has a lead and `job.nunits` body units, and the
 * last of them to finish (counted in `done`) folds the partials.
 */
typedef struct gp_work {
    /* gp_key_sched: its address minus the arena's, modulo 2^64, so that it may lie in the arena or
     * in the cuda executor's table of resident keys (batching/cuda/device.c) */
    uint64_t key_off;
    uint64_t state_off;           /* gp_msg_state; as key_off, modulo 2^64: a stream-ordered batch's
                                   * work reads its message's state in that message's own block
                                   * (batching/cuda/ordered.c) */
    uint64_t in_off;              /* request input (AAD or data); as key_off, modulo 2^64: a
                                   * device-mode request's data is the caller's device memory */
    uint64_t out_off;             /* request output, or the 16-byte tag for GP_OP_TAG (as in_off) */
    uint64_t partials_off;        /* job.nunits partial MACs of GP_PARTIAL_BYTES */
    uint64_t ghmma_off;           /* GCM with GP_GHASH_MMA_MIN_UNITS units or more: the key's tensor-core
                                   * GHASH matrix (kernels/ghash_mma.h); 0: none, integer GHASH */
    uint64_t pows_off;            /* the request's MAC powers (gp_mac_pows) in the arena; 0: the key's
                                   * own (GCM; ChaCha20-Poly1305's depend on the message's r) */
    uint32_t done;                /* units finished (with spans: spans folded and the last unit);
                                   * zero at launch unless the planner counted an idle lead */
    uint32_t spans_off;           /* with spans: job.nspans counters of the elements finished in
                                   * each span, in the arena (zero at launch, or the idle lead's) */
    gp_job job;
} gp_work;

/* gp_batch_kernel's flags. */
#define GP_BATCH_AES 1u               /* the batch holds AES work: fill the shared-memory T-table */
#define GP_BATCH_NARROW 2u            /* the latency kernels keep a warp per unit, no spread pass
                                       * (kernels/batch_kernel.cu; $GPUPROV_SPREAD=0, for A/B runs) */

/* A batch's refs: `nrefs` of them, then one more whose `work` counts the refs lane groups have
 * claimed past the first pass (zero at launch; the kernel hands out work by atomics on it). */
typedef struct gp_unit_ref {
    uint32_t work;                /* index into the gp_work table */
    uint32_t unit;                /* body unit index, or GP_UNIT_LEAD */
} gp_unit_ref;

/*
 * gp_copy_kernel's work list (kernels/batch_kernel.cu): host and device memory as the GPU addresses
 * it (mapped pinned host memory has the host's address). Before the batch kernel it brings the
 * arena's descriptors and inputs, staged requests' data (batching/stage.h: an async job's data
 * waits in a chunk of mapped pinned memory) and keys for the resident table; after it, results and
 * staged outputs go back and what the device held of the batch is cleared, so that a batch is
 * three launches and no copy calls (batching/cuda/launch.c).
 */
#define GP_COPY_WIPE_SRC 1u           /* after copying, zero the source (device memory) */
#define GP_COPY_REFS 2u               /* no copy: write `len` unit refs at dst, the k-th being
                                       * gp_copy_ref(src, k) (a large wave's refs, made on the GPU
                                       * rather than written and sent over PCIe:
                                       * batching/cuda/plan.c) */

typedef struct gp_copy {
    uint64_t src;                 /* 0: write zeros */
    uint64_t dst;
    uint64_t len;
    uint32_t flags;               /* GP_COPY_* */
    uint32_t reserved;
} gp_copy;

/* A GP_COPY_REFS entry's refs: work index in src's high half, the first unit in its low half. */
#define GP_COPY_REFS_MAX 2048u        /* refs of one entry at most: 16 KiB, as GP_COPY_PIECE */
GP_KFN gp_unit_ref gp_copy_ref(uint64_t src, uint64_t k)
{
    gp_unit_ref r;

    r.work = (uint32_t)(src >> 32);
    r.unit = (uint32_t)src + (uint32_t)k;
    return r;
}

/* The first entries of a copy list travel in the launch itself (a kernel parameter), so that a
 * small batch's copy kernel does not first fetch its list across PCIe: one round trip less. */
#define GP_COPY_INLINE 8u

typedef struct gp_copy_head {
    gp_copy e[GP_COPY_INLINE];
} gp_copy_head;

/*
 * gp_lone_kernel's parameters (kernels/batch_kernel.cu): a small batch's arena, laid out as for
 * gp_batch_kernel, run by one launch of one thread block cluster. Addresses as the GPU sees them.
 */
#define GP_LONE_MAX_BLOCKS 8u         /* a portable cluster: resident together on one GPC */
#define GP_LATENCY_BLOCK 256u         /* threads per block of the latency kernels, gp_lone_kernel and
                                       * gp_batch_kernel_small: registers for latency
                                       * (kernels/batch_kernel.cu) */

typedef struct gp_lone_args {
    uint64_t dev;                 /* the device arena */
    uint64_t host;                /* the pinned arena (mapped): the image before, the results after */
    uint64_t work_off;            /* gp_work table (refs at offset 0) */
    uint64_t in_len;              /* [0, in_len): descriptors, inputs, keys and states, brought in */
    uint64_t res_off, res_len;    /* states and outputs, taken back */
    uint64_t wipe_off, wipe_len;  /* keys, states, outputs and partials, cleared on the device (it
                                   * holds the results region); all five 16-byte multiples */
    uint64_t done;                /* GP_LONE_MAX_BLOCKS words in mapped pinned memory: block b sets
                                   * word b to `ticket` once its results are back (0: none) */
    uint64_t ticket;
    uint32_t nrefs;
    uint32_t flags;               /* GP_BATCH_* */
} gp_lone_args;

/*
 * gp_ordered_kernel's parameter (kernels/batch_kernel.cu): one stream-ordered request's
 * descriptors, written into its message's device block before the batch kernel runs it
 * (batching/cuda/ordered.c). A kernel parameter is copied when the launch is made, so the host
 * keeps no buffer alive for it until the stream gets there. Addresses as the GPU sees them.
 */
#define GP_ORDERED_AAD_MAX 512u       /* AAD bytes a request carries; longer AAD goes in pieces */

typedef struct gp_ordered_args {
    gp_work work;                 /* the request, as the batch kernel reads it (done 0: no idle lead) */
    uint64_t work_at;             /* where `work` goes */
    uint64_t refs_at;             /* its refs: units 0..nunits-1, the lead, the claim counter (zero) */
    uint64_t spans_at;            /* job.nspans counters, zero */
    uint64_t aad_at;              /* `aad_len` bytes of `aad` */
    uint64_t pows_at;             /* `pows` (0: none: GCM's are the key's) */
    uint32_t aad_len;
    uint32_t reserved;
    gp_mac_pows pows;             /* ChaCha20-Poly1305: the message's powers of r */
    uint8_t aad[GP_ORDERED_AAD_MAX];
} gp_ordered_args;

/*
 * gp_ordered_batch_kernel's parameter (kernels/batch_kernel.cu): one pass of a stream-ordered batch,
 * the requests of up to GP_ORDERED_BATCH_MAX messages queued together on one stream (an OpenSSL
 * 3.5 pipeline call: batching/kstate.h plans it, batching/cuda/ordered.c launches it). Their
 * descriptors go into the lead message's block (`base`): work i at works_at + i, its refs from
 * ref_first[i] (units, then the lead), the claim counter after the last; work i's carried AAD,
 * then its powers of r (pows_off != 0), at extra + extra_at[i]. A kernel parameter of more than
 * 4 KiB (CUDA 12.1 and later, sm_70 and later), copied when the launch is made, as
 * gp_ordered_args is.
 */
#define GP_ORDERED_BATCH_MAX 32u      /* messages of one pass: OpenSSL's EVP_MAX_PIPES */
#define GP_ORDERED_BATCH_EXTRA 16384u /* carried AAD and powers of one pass (a pass with more is two) */

typedef struct gp_ordered_batch_args {
    uint64_t base;                /* the lead message's block: the works' offsets are from it */
    uint64_t works_at;
    uint64_t refs_at;
    uint32_t nworks;
    uint32_t nrefs;               /* every work's refs; the claim counter is refs[nrefs] */
    uint32_t ref_first[GP_ORDERED_BATCH_MAX];
    uint32_t extra_at[GP_ORDERED_BATCH_MAX];
    gp_work work[GP_ORDERED_BATCH_MAX];   /* done 0: every lead runs */
    uint8_t extra[GP_ORDERED_BATCH_EXTRA];
} gp_ordered_batch_args;

#if defined(__cplusplus)
# define GP_STATIC_ASSERT static_assert
#else
# define GP_STATIC_ASSERT _Static_assert
#endif
GP_STATIC_ASSERT(sizeof(gp_job) == 64, "gp_job layout is shared by host and device");
GP_STATIC_ASSERT(sizeof(gp_work) == 128, "gp_work layout is shared by host and device");
GP_STATIC_ASSERT(sizeof(gp_unit_ref) == 8, "gp_unit_ref layout is shared by host and device");
GP_STATIC_ASSERT(sizeof(gp_copy) == 32, "gp_copy layout is shared by host and device");
GP_STATIC_ASSERT(sizeof(gp_copy_head) == 32 * GP_COPY_INLINE, "gp_copy_head is a kernel parameter");
GP_STATIC_ASSERT(sizeof(gp_lone_args) == 88, "gp_lone_args is a kernel parameter");
GP_STATIC_ASSERT(sizeof(gp_ordered_args) <= 4096, "gp_ordered_args fits a kernel's parameter space");
GP_STATIC_ASSERT(sizeof(gp_ordered_batch_args) <= 32764, "gp_ordered_batch_args fits a kernel's parameter space (CUDA 12.1+)");
/* The device loads a round key in one 16-byte access (kernels/aes_tt.h); schedules sit on 16-byte
 * boundaries in a batch arena (batching/cuda/internal.h KEY_STRIDE). */
GP_STATIC_ASSERT((offsetof(gp_key_sched, aes) + offsetof(gp_aes_sched, ek)) % 16 == 0,
                 "AES round keys 16-byte aligned in a key schedule");

#endif
