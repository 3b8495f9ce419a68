/* SPDX-License-Identifier: Apache-2.0 */
/* Parallel units: one request's bulk split into fixed-size pieces whose MACs combine by powers. */
#ifndef GP_UNITS_H
#define GP_UNITS_H

#include "msg_unit.h"

/*
 * A data request of a message runs as:
 *   lead    the head, serially, up to the next 64-byte text boundary (also closes the AAD);
 *   body    whole 64-byte chunks in units of GP_UNIT_BYTES, all in parallel: keystream from a
 *           counter computed from the unit's offset, and a partial MAC from zero, shifted by the
 *           unit itself to its place in the message: times H^m (GHASH) or r^m (Poly1305), m the
 *           number of body blocks after it;
 *   finish  (whoever completes last) combines: X = X_lead * H^N ^ (xor of the partials) for GHASH,
 *           h = h_lead * r^N + (sum of the partials) for Poly1305, N the body's blocks; then runs
 *           the tail serially. No multiplication chain runs on one thread.
 * 64 bytes is a multiple of every block involved (AES 16, ChaCha20 64, GHASH/Poly1305 16), so at
 * the body start no keystream or MAC block is pending and units share nothing but read-only data.
 * Fixed-size units keep the threads of a warp doing the same work whatever the message lengths.
 */
#ifndef GP_UNIT_BYTES
# define GP_UNIT_BYTES 1024u        /* build option unit_bytes; the planner and the kernel must agree */
#endif
#define GP_UNIT_LEAD 0xffffffffu    /* gp_unit_ref.unit of a request's lead */
#define GP_PARTIAL_BYTES 32u        /* one unit's partial MAC */


/* Advance a counter block by n keystream blocks, as each algorithm counts (see gp_ctr_*). */
GP_KFN void gp_ctr_add(uint32_t alg, uint8_t c[16], uint64_t n)
{
    if (alg == GP_ALG_AES_CTR) {
        for (int i = 15; i >= 0 && n != 0; i--) {       /* 128-bit big-endian */
            uint64_t s = (uint64_t)c[i] + (n & 0xff);

            c[i] = (uint8_t)s;
            n = (n >> 8) + (s >> 8);
        }
    } else if (alg == GP_ALG_AES_GCM) {
        gp_store_be32(c + 12, gp_load_be32(c + 12) + (uint32_t)n);   /* inc32, wrapping */
    } else {
        uint64_t v = (uint64_t)gp_load_le32(c) | (uint64_t)gp_load_le32(c + 4) << 32;

        v += n;                                          /* LE32 counter carrying into word 1 */
        gp_store_le32(c, (uint32_t)v);
        gp_store_le32(c + 4, (uint32_t)(v >> 32));
    }
}

/* Plan a request on the state it will start from (the host does this before a batch). `aad_len`
 * bytes of AAD (AEAD only) go first; they change neither the counter nor the text position. */
GP_KFN void gp_job_plan(gp_job *j, const gp_msg_state *st, uint32_t op, uint64_t len, uint32_t aad_len)
{
    const uint64_t bs = gp_alg_is_aes(st->alg) ? 16 : 64;
    uint64_t p = st->text_len, head, body;

    gp_state_wipe(j, sizeof(*j));
    j->op = op;
    j->len = len;
    j->aad_len = aad_len;
    j->head_len = len;
    if (op != GP_OP_ENCRYPT && op != GP_OP_DECRYPT)
        return;
    head = (64 - p % 64) % 64;
    if (head > len)
        head = len;
    body = (len - head) / 64 * 64;
    if (body == 0)
        return;
    j->head_len = head;
    j->body_len = body;
    j->nunits = (uint32_t)((body + GP_UNIT_BYTES - 1) / GP_UNIT_BYTES);
    /* st->ctr is the counter of block ceil(p / bs) (a partly used block was already generated);
     * the body starts at block (p + head) / bs. */
    gp_bytes_copy(j->body_ctr, st->ctr, 16);
    gp_ctr_add(st->alg, j->body_ctr, (p + head) / bs - (p + bs - 1) / bs);
    for (int i = 0; i < 5; i++)
        j->poly_r[i] = st->poly.r[i];
}

/*
 * The tag as it would be if the message ended now (see gp_msg_state.spec_tag), computed on a copy:
 * the message may still go on. Called by whoever finishes a request last.
 */
GP_KFN void gp_spec_tag(gp_msg_state *st, const gp_key_sched *k, uint32_t op)
{
    gp_msg_state t;

    st->spec_valid = 0;
    if (!gp_alg_is_aead(st->alg) || op == GP_OP_TAG)
        return;
    t = *st;
    gp_msg_run(&t, k, GP_OP_TAG, NULL, st->spec_tag, 0);
    st->spec_valid = 1;
    gp_state_wipe(&t, sizeof(t));
}

/* The lead: the carried AAD first; AAD and tag requests whole; for data, the head (it also pads
 * the AAD, RFC 8439 §2.8, SP 800-38D §7.1) and, when there is no body, everything (and then the
 * speculative tag, as the request's last unit). */
GP_KFN void gp_unit_lead(gp_msg_state *st, const gp_key_sched *k, const gp_job *j, const uint8_t *aad,
                         const uint8_t *in, uint8_t *out)
{
    if (j->aad_len > 0)
        gp_msg_run(st, k, GP_OP_AAD, aad, NULL, j->aad_len);
    gp_msg_run(st, k, j->op, in, out, (size_t)j->head_len);
    if (j->nunits == 0)
        gp_spec_tag(st, k, j->op);
}

/* H^n from the key's table of H^(2^i): popcount(n) multiplications. */
GP_KFN void gp_ghash_pow_tab(uint64_t out[2], const gp_key_sched *k, uint64_t n)
{
    out[0] = UINT64_C(1) << 63;   /* 1 */
    out[1] = 0;
    for (int i = 0; i < 32 && n != 0; i++, n >>= 1)
        if (n & 1)
            gp_ghash_mul(out, k->gcm_hpow[i]);
}

/* a = a * b mod 2^130 - 5, 26-bit limbs, partially reduced like gp_poly1305_blocks' accumulator. */
GP_KFN void gp_p1305_mul(uint32_t a[5], const uint32_t b[5])
{
    const uint64_t s1 = (uint64_t)b[1] * 5, s2 = (uint64_t)b[2] * 5, s3 = (uint64_t)b[3] * 5,
                   s4 = (uint64_t)b[4] * 5;
    uint64_t d0, d1, d2, d3, d4;
    uint32_t c;

    d0 = (uint64_t)a[0] * b[0] + a[1] * s4 + a[2] * s3 + a[3] * s2 + a[4] * s1;
    d1 = (uint64_t)a[0] * b[1] + (uint64_t)a[1] * b[0] + a[2] * s4 + a[3] * s3 + a[4] * s2;
    d2 = (uint64_t)a[0] * b[2] + (uint64_t)a[1] * b[1] + (uint64_t)a[2] * b[0] + a[3] * s4 + a[4] * s3;
    d3 = (uint64_t)a[0] * b[3] + (uint64_t)a[1] * b[2] + (uint64_t)a[2] * b[1] + (uint64_t)a[3] * b[0] + a[4] * s4;
    d4 = (uint64_t)a[0] * b[4] + (uint64_t)a[1] * b[3] + (uint64_t)a[2] * b[2] + (uint64_t)a[3] * b[1] + (uint64_t)a[4] * b[0];
    c = (uint32_t)(d0 >> 26); a[0] = (uint32_t)d0 & GP_POLY_MASK26;
    d1 += c; c = (uint32_t)(d1 >> 26); a[1] = (uint32_t)d1 & GP_POLY_MASK26;
    d2 += c; c = (uint32_t)(d2 >> 26); a[2] = (uint32_t)d2 & GP_POLY_MASK26;
    d3 += c; c = (uint32_t)(d3 >> 26); a[3] = (uint32_t)d3 & GP_POLY_MASK26;
    d4 += c; c = (uint32_t)(d4 >> 26); a[4] = (uint32_t)d4 & GP_POLY_MASK26;
    a[0] += c * 5; c = a[0] >> 26; a[0] &= GP_POLY_MASK26;
    a[1] += c;
}

/* a = a + b with carries (limbs stay near 26 bits; the top carry wraps around times 5). */
GP_KFN void gp_p1305_add(uint32_t a[5], const uint32_t b[5])
{
    uint32_t c = 0;

    for (int i = 0; i < 5; i++) {
        a[i] += b[i] + c;
        c = a[i] >> 26;
        a[i] &= GP_POLY_MASK26;
    }
    a[0] += c * 5;
    c = a[0] >> 26;
    a[0] &= GP_POLY_MASK26;
    a[1] += c;
}

GP_KFN void gp_p1305_pow(uint32_t out[5], const uint32_t r[5], uint64_t n)
{
    uint32_t base[5], sq[5];

    for (int i = 0; i < 5; i++) {
        base[i] = r[i];
        out[i] = i == 0;
    }
    for (; n != 0; n >>= 1) {
        if (n & 1)
            gp_p1305_mul(out, base);
        for (int i = 0; i < 5; i++)
            sq[i] = base[i];
        gp_p1305_mul(base, sq);
    }
}

/*
 * 64 bytes between memory and a thread's own buffer, as 16 little-endian words. On the GPU that is
 * four 16-byte vector accesses when the address allows (the cuda planner places every body on a
 * 16-byte boundary), so the byte-level work happens in registers and lane-local memory rather than
 * as byte loads scattered over global memory. Every target here is little-endian.
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
# error "the kernels assume a little-endian target"
#endif

GP_KFN void gp_chunk_load(uint32_t w[16], const uint8_t *p)
{
#if defined(__CUDA_ARCH__)
    if (((uintptr_t)p & 15) == 0) {
        const uint4 *v = (const uint4 *)p;

        for (int i = 0; i < 4; i++) {
            uint4 t = v[i];

            w[4 * i] = t.x; w[4 * i + 1] = t.y; w[4 * i + 2] = t.z; w[4 * i + 3] = t.w;
        }
        return;
    }
#endif
    for (int i = 0; i < 16; i++)
        w[i] = gp_load_le32(p + 4 * i);
}

GP_KFN void gp_chunk_store(uint8_t *p, const uint32_t w[16])
{
#if defined(__CUDA_ARCH__)
    if (((uintptr_t)p & 15) == 0) {
        uint4 *v = (uint4 *)p;

        for (int i = 0; i < 4; i++)
            v[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        return;
    }
#endif
    for (int i = 0; i < 16; i++)
        gp_store_le32(p + 4 * i, w[i]);
}

/*
 * Lanes. A body unit runs as GP_UNIT_LANES lanes, one per 64-byte chunk: each lane makes its
 * chunk's keystream (4 AES blocks or 1 ChaCha20 block), XORs it in and runs its chunk's 4 MAC
 * blocks from zero (m_l = GHASH or Poly1305 of the chunk alone). The unit's MAC from zero is then
 * sum_l m_l * P^(4 (L-1-l)) (P = H or r, L lanes), which a tree computes in log2(L) steps:
 *     for s = 1, 2, 4, ...: m_l = m_l * P^(4s) + m_(l+s)
 * after which lane 0 holds it. A short (last) unit of c chunks is right-aligned: its chunks sit in
 * lanes L-c..L-1 and the absent leading lanes contribute 0, so the powers stay fixed. Lane 0 then
 * shifts the sum past the body blocks after the unit (as before) and writes the partial.
 * On the GPU the lanes are threads and m_(l+s) comes from __shfl_down_sync (kernels/
 * batch_kernel.cu); on the host gp_unit_body runs the same lane function and the same step over
 * an array, so the host executor proves the math the GPU runs.
 */
#define GP_UNIT_LANES (GP_UNIT_BYTES / 64u)
#define GP_KERNEL_BLOCK 256u        /* threads per block of gp_batch_kernel (a multiple of 32) */
GP_STATIC_ASSERT(GP_UNIT_BYTES % 64u == 0 && GP_UNIT_LANES >= 1 && GP_UNIT_LANES <= 32
                 && (GP_UNIT_LANES & (GP_UNIT_LANES - 1)) == 0,
                 "unit_bytes must be 64 times a power of two, at most 2048 (a lane per chunk)");

/* A lane's MAC value: GHASH's X as words [x0 hi, x0 lo, x1 hi, x1 lo], or Poly1305's 5 limbs. */
typedef struct gp_lane_mac {
    uint32_t w[5];
} gp_lane_mac;

GP_KFN void gp_lane_mac_get_x(uint64_t x[2], const gp_lane_mac *m)
{
    x[0] = (uint64_t)m->w[0] << 32 | m->w[1];
    x[1] = (uint64_t)m->w[2] << 32 | m->w[3];
}

GP_KFN void gp_lane_mac_set_x(gp_lane_mac *m, const uint64_t x[2])
{
    m->w[0] = (uint32_t)(x[0] >> 32); m->w[1] = (uint32_t)x[0];
    m->w[2] = (uint32_t)(x[1] >> 32); m->w[3] = (uint32_t)x[1];
    m->w[4] = 0;
}

/* Chunks in unit u (1..GP_UNIT_LANES). */
GP_KFN uint32_t gp_unit_chunks(const gp_job *j, uint32_t u)
{
    uint64_t n = j->body_len - (uint64_t)u * GP_UNIT_BYTES;

    return (uint32_t)((n > GP_UNIT_BYTES ? GP_UNIT_BYTES : n) / 64);
}

/*
 * Counter blocks body_ctr + n .. + n + nblocks - 1 (nblocks 1 or 4) as little-endian words, as each
 * algorithm counts (see gp_ctr_add): out[4b..4b+3] is block b, ready for the cipher's input.
 */
GP_KFN void gp_ctr_words(uint32_t alg, const uint8_t body_ctr[16], uint64_t n, uint32_t nblocks,
                         uint32_t *out)
{
    if (gp_alg_is_aes(alg)) {
        const uint64_t hi = (uint64_t)gp_load_be32(body_ctr) << 32 | gp_load_be32(body_ctr + 4);
        const uint64_t lo = (uint64_t)gp_load_be32(body_ctr + 8) << 32 | gp_load_be32(body_ctr + 12);

        for (uint32_t b = 0; b < nblocks; b++) {
            uint64_t l = lo + n + b, h = hi + (l < lo);   /* 128-bit big-endian */

            if (alg == GP_ALG_AES_GCM) {                   /* inc32: the low word only */
                h = hi;
                l = (lo & 0xffffffff00000000ull) | (uint32_t)(lo + n + b);
            }
            out[4 * b] = gp_bswap32((uint32_t)(h >> 32));
            out[4 * b + 1] = gp_bswap32((uint32_t)h);
            out[4 * b + 2] = gp_bswap32((uint32_t)(l >> 32));
            out[4 * b + 3] = gp_bswap32((uint32_t)l);
        }
    } else {
        uint64_t v = ((uint64_t)gp_load_le32(body_ctr) | (uint64_t)gp_load_le32(body_ctr + 4) << 32) + n;

        out[0] = (uint32_t)v;           /* LE32 counter carrying into word 1 */
        out[1] = (uint32_t)(v >> 32);
        out[2] = gp_load_le32(body_ctr + 8);
        out[3] = gp_load_le32(body_ctr + 12);
    }
}

/*
 * One chunk's 4 MAC blocks into the lane's value (from zero); c is consumed. One block per pass,
 * the next block shifted down into c[0..3], and the passes not unrolled on the GPU: c stays
 * indexed by constants (in registers) and one copy of the multiplication is live at a time.
 */
GP_KFN void gp_lane_mac_chunk(uint32_t alg, const gp_key_sched *k, const gp_job *j, uint32_t c[16],
                              gp_lane_mac *m)
{
    uint64_t x[2];

    gp_lane_mac_get_x(x, m);
    GP_NO_UNROLL
    for (int b = 0; b < 4; b++) {
        if (alg == GP_ALG_AES_GCM)
            gp_ghash_words(x, k->gcm_h, c, 1);
        else
            gp_poly1305_words(m->w, j->poly_r, c, 1);
        for (int i = 0; i < 12; i++)
            c[i] = c[i + 4];
    }
    if (alg == GP_ALG_AES_GCM)
        gp_lane_mac_set_x(m, x);
}

/*
 * Lane `lane` of body unit u: its chunk's keystream, XOR and MAC value m (zero for an absent
 * leading lane of a short unit). in/out point at the body start; in may equal out (each lane reads
 * its whole chunk before writing it, and lanes touch disjoint chunks).
 */
GP_KFN void gp_unit_lane(const gp_job *j, const gp_key_sched *k, uint32_t u, uint32_t lane,
                         const uint8_t *in, uint8_t *out, gp_lane_mac *m)
{
    const uint32_t alg = k->alg, nch = gp_unit_chunks(j, u);
    const int aead = gp_alg_is_aead(alg), dec = j->op == GP_OP_DECRYPT;
    uint32_t data[16], ks[16];
    uint64_t chunk;

    for (int i = 0; i < 5; i++)
        m->w[i] = 0;
    if (lane + nch < GP_UNIT_LANES)
        return;
    chunk = (uint64_t)u * GP_UNIT_LANES + (lane + nch - GP_UNIT_LANES);   /* index in the body */
    gp_chunk_load(data, in + 64 * chunk);
    if (gp_alg_is_aes(alg)) {
        gp_ctr_words(alg, j->body_ctr, 4 * chunk, 4, ks);
        gp_aes_encrypt4_words(&k->aes, ks);
    } else {
        uint32_t c[4];

        gp_ctr_words(alg, j->body_ctr, chunk, 1, c);
        gp_chacha20_block_words(k->chacha_key, c, ks);
    }
    /* ks becomes the ciphertext, which the MAC covers: the input when decrypting, the output
     * when encrypting. */
    for (int b = 0; b < 16; b++) {
        uint32_t x = data[b] ^ ks[b];

        ks[b] = dec ? data[b] : x;
        data[b] = x;
    }
    gp_chunk_store(out + 64 * chunk, data);
    if (aead)
        gp_lane_mac_chunk(alg, k, j, ks, m);
#if !defined(__CUDA_ARCH__)
    /* On the GPU these live in registers; a volatile wipe would only push them to local memory. */
    gp_state_wipe(ks, sizeof(ks));
    gp_state_wipe(data, sizeof(data));
#endif
}

/* P^(4 * 2^level) for tree level `level` (0, 1, ...): H^(4s) from the key's table, r^(4s) by
 * squaring (pw holds the previous level's power for Poly1305). */
GP_KFN void gp_lane_pow(uint32_t alg, const gp_key_sched *k, const gp_job *j, uint32_t level,
                        gp_lane_mac *pw)
{
    if (alg == GP_ALG_AES_GCM) {
        gp_lane_mac_set_x(pw, k->gcm_hpow[2 + level]);
    } else {
        uint32_t t[5];

        if (level == 0) {
            for (int i = 0; i < 5; i++)
                pw->w[i] = j->poly_r[i];
            for (int i = 0; i < 5; i++)
                t[i] = pw->w[i];
            gp_p1305_mul(pw->w, t);                    /* r^2 */
        }
        for (int i = 0; i < 5; i++)
            t[i] = pw->w[i];
        gp_p1305_mul(pw->w, t);                        /* r^4, then r^8, ... */
    }
}

/* One tree step: acc = acc * pw + partner (XOR for GHASH, mod 2^130 - 5 for Poly1305). */
GP_KFN void gp_lane_combine(uint32_t alg, gp_lane_mac *acc, const gp_lane_mac *partner,
                            const gp_lane_mac *pw)
{
    if (alg == GP_ALG_AES_GCM) {
        uint64_t x[2], h[2];

        gp_lane_mac_get_x(x, acc);
        gp_lane_mac_get_x(h, pw);
        gp_ghash_mul(x, h);
        x[0] ^= (uint64_t)partner->w[0] << 32 | partner->w[1];
        x[1] ^= (uint64_t)partner->w[2] << 32 | partner->w[3];
        gp_lane_mac_set_x(acc, x);
    } else {
        gp_p1305_mul(acc->w, pw->w);
        gp_p1305_add(acc->w, partner->w);
    }
}

/* Lane 0's last step: shift the unit's MAC past the body blocks after it, write the partial. */
GP_KFN void gp_unit_partial_store(const gp_job *j, const gp_key_sched *k, uint32_t u,
                                  gp_lane_mac *m, uint8_t partial[GP_PARTIAL_BYTES])
{
    const uint32_t alg = k->alg;
    uint64_t end = (uint64_t)u * GP_UNIT_BYTES + 64u * gp_unit_chunks(j, u);

    for (unsigned b = 0; b < GP_PARTIAL_BYTES; b++)
        partial[b] = 0;
    if (alg == GP_ALG_AES_GCM) {
        uint64_t x[2], hp[2];

        gp_lane_mac_get_x(x, m);
        if (end < j->body_len) {
            gp_ghash_pow_tab(hp, k, (j->body_len - end) / 16);
            gp_ghash_mul(x, hp);
        }
        gp_store_be64(partial, x[0]);
        gp_store_be64(partial + 8, x[1]);
    } else if (alg == GP_ALG_CHACHA20_POLY1305) {
        if (end < j->body_len) {
            uint32_t rp[5];

            gp_p1305_pow(rp, j->poly_r, (j->body_len - end) / 16);
            gp_p1305_mul(m->w, rp);
        }
        for (int i = 0; i < 5; i++)
            gp_store_le32(partial + 4 * i, m->w[i]);
    }
}

/* The host's body unit: every lane in turn, the same tree over an array, lane 0's partial. */
GP_KFN void gp_unit_body(const gp_job *j, const gp_key_sched *k, uint32_t u, const uint8_t *in,
                         uint8_t *out, uint8_t partial[GP_PARTIAL_BYTES])
{
    const uint32_t alg = k->alg;
    gp_lane_mac v[GP_UNIT_LANES], pw;

    for (uint32_t l = 0; l < GP_UNIT_LANES; l++)
        gp_unit_lane(j, k, u, l, in, out, &v[l]);
    if (gp_alg_is_aead(alg)) {
        /* Ascending l reads v[l + s] before that lane's own step at this level, as a shuffle does. */
        for (uint32_t s = 1, level = 0; s < GP_UNIT_LANES; s <<= 1, level++) {
            gp_lane_pow(alg, k, j, level, &pw);
            for (uint32_t l = 0; l + s < GP_UNIT_LANES; l += 2 * s)
                gp_lane_combine(alg, &v[l], &v[l + s], &pw);
        }
    }
    gp_unit_partial_store(j, k, u, &v[0], partial);
    gp_state_wipe(v, sizeof(v));
    gp_state_wipe(&pw, sizeof(pw));
}

/*
 * A unit's partial MAC as 8 little-endian words, written by another unit of this launch (see
 * GP_LOAD_SHARED). On the GPU two 16-byte L2 loads (partials are 16-byte aligned): byte-wise L2
 * loads issue one after another, each waiting out the L2 latency.
 */
GP_KFN void gp_partial_load(const uint8_t *p, uint32_t w[8])
{
#if defined(__CUDA_ARCH__)
    const uint4 a = __ldcg((const uint4 *)p), b = __ldcg((const uint4 *)p + 1);

    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
#else
    for (int i = 0; i < 8; i++)
        w[i] = gp_load_le32(p + 4 * i);
#endif
}

/* Fold the body's partials into the state (Horner over units), advance past the body, then run
 * the tail serially. `st` is the state the lead left (the GPU finisher passes a copy it loaded
 * from L2). */
GP_KFN void gp_unit_finish(gp_msg_state *st, const gp_key_sched *k, const gp_job *j,
                           const uint8_t *partials, const uint8_t *tail_in, uint8_t *tail_out)
{
    const uint32_t alg = st->alg;
    const uint64_t nblocks = j->body_len / 16;   /* MAC blocks in the body */

    if (alg == GP_ALG_AES_GCM) {
        uint64_t hn[2];

        gp_ghash_pow_tab(hn, k, nblocks);
        gp_ghash_mul(st->ghash_x, hn);
        for (uint32_t u = 0; u < j->nunits; u++) {
            uint32_t w[8];

            gp_partial_load(partials + GP_PARTIAL_BYTES * u, w);   /* big-endian words [hi, lo] */
            st->ghash_x[0] ^= (uint64_t)gp_bswap32(w[0]) << 32 | gp_bswap32(w[1]);
            st->ghash_x[1] ^= (uint64_t)gp_bswap32(w[2]) << 32 | gp_bswap32(w[3]);
        }
    } else if (alg == GP_ALG_CHACHA20_POLY1305) {
        uint32_t rn[5], p[8];

        gp_p1305_pow(rn, st->poly.r, nblocks);
        gp_p1305_mul(st->poly.h, rn);
        for (uint32_t u = 0; u < j->nunits; u++) {
            gp_partial_load(partials + GP_PARTIAL_BYTES * u, p);   /* 5 limbs, then zeros */
            gp_p1305_add(st->poly.h, p);
        }
        gp_state_wipe(rn, sizeof(rn));
    }
    gp_bytes_copy(st->ctr, j->body_ctr, 16);
    gp_ctr_add(alg, st->ctr, j->body_len / (gp_alg_is_aes(alg) ? 16 : 64));
    st->text_len += j->body_len;
    gp_msg_run(st, k, j->op, tail_in, tail_out, (size_t)(j->len - j->head_len - j->body_len));
    gp_spec_tag(st, k, j->op);
}

#endif
