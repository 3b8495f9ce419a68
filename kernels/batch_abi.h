/* SPDX-License-Identifier: Apache-2.0 */
/* The state format shared by the host and cuda executors: key schedules and per-message progress. */
#ifndef GP_BATCH_ABI_H
#define GP_BATCH_ABI_H

#include "kdefs.h"
#include "aes.h"
#include "poly1305.h"

/*
 * Plain C structs, identical on host and device, so a message can move between the host and cuda
 * executors mid-stream (a failed GPU batch is re-run on the host from the same state).
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

/* Made once per key, read-only afterwards. */
typedef struct gp_key_sched {
    uint32_t alg;                 /* enum gp_alg */
    uint32_t keylen;              /* bytes: 16, 24, 32 */
    gp_aes_sched aes;             /* AES algorithms */
    uint64_t gcm_h[2];            /* GCM hash key H = E_K(0^128) as two big-endian words [hi, lo] */
    uint32_t chacha_key[8];       /* ChaCha20 key words, little-endian (RFC 8439 §2.3) */
} gp_key_sched;

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
} gp_msg_state;

/*
 * A batch as the GPU sees it: one arena (descriptor tables, key schedules, message states, input
 * and output bytes) copied in and out as a whole; every field is an offset into it. Requests of one
 * message form a group that one thread runs in order (the per-message unit); groups are
 * independent.
 */
typedef struct gp_work {
    uint64_t key_off;             /* gp_key_sched */
    uint64_t state_off;           /* gp_msg_state, shared by the requests of one group */
    uint64_t in_off;              /* GP_OP_AAD / ENCRYPT / DECRYPT input */
    uint64_t out_off;             /* ENCRYPT / DECRYPT output, or the 16-byte tag for GP_OP_TAG */
    uint64_t len;
    uint32_t op;                  /* enum gp_op */
    uint32_t reserved;
} gp_work;

typedef struct gp_work_group {
    uint32_t first;               /* index of the group's first gp_work */
    uint32_t count;
} gp_work_group;

#if defined(__cplusplus)
static_assert(sizeof(gp_work) == 48, "gp_work layout is shared by host and device");
static_assert(sizeof(gp_work_group) == 8, "gp_work_group layout is shared by host and device");
#else
_Static_assert(sizeof(gp_work) == 48, "gp_work layout is shared by host and device");
_Static_assert(sizeof(gp_work_group) == 8, "gp_work_group layout is shared by host and device");
#endif

#endif
