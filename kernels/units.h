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

/* One body unit: bytes [u * GP_UNIT_BYTES, ...) of the body; in/out point at the body start. */
GP_KFN void gp_unit_body(const gp_job *j, const gp_key_sched *k, uint32_t u, const uint8_t *in,
                         uint8_t *out, uint8_t partial[GP_PARTIAL_BYTES])
{
    const uint32_t alg = k->alg;
    const int aead = gp_alg_is_aead(alg), dec = j->op == GP_OP_DECRYPT;
    uint64_t off = (uint64_t)u * GP_UNIT_BYTES, n = j->body_len - off;
    uint64_t x[2] = { 0, 0 };
    gp_poly1305_state poly;
    uint8_t ctr[16];
    uint32_t data[16], ks[16];

    if (n > GP_UNIT_BYTES)
        n = GP_UNIT_BYTES;
    gp_bytes_copy(ctr, j->body_ctr, 16);
    gp_ctr_add(alg, ctr, off / (gp_alg_is_aes(alg) ? 16 : 64));
    for (int i = 0; i < 5; i++) {
        poly.r[i] = j->poly_r[i];
        poly.h[i] = 0;
    }
    for (uint64_t c = off; c < off + n; c += 64) {
        /* The whole chunk is read before any of it is written: in may equal out. */
        gp_chunk_load(data, in + c);
        if (gp_alg_is_aes(alg)) {
            uint8_t ctrs[64];

            for (int b = 0; b < 4; b++) {
                gp_bytes_copy(ctrs + 16 * b, ctr, 16);
                gp_ctr_add(alg, ctr, 1);
            }
            gp_aes_encrypt4(&k->aes, ctrs, (uint8_t *)ks);
        } else {
            gp_chacha20_block(k->chacha_key, ctr, (uint8_t *)ks);
            gp_ctr_add(alg, ctr, 1);
        }
        /* The MAC is over the ciphertext: the input when decrypting, the output when encrypting. */
        if (aead && dec) {
            if (alg == GP_ALG_AES_GCM)
                gp_ghash_blocks(x, k->gcm_h, (const uint8_t *)data, 4);
            else
                gp_poly1305_blocks(&poly, (const uint8_t *)data, 4);
        }
        for (int b = 0; b < 16; b++)
            data[b] ^= ks[b];
        if (aead && !dec) {
            if (alg == GP_ALG_AES_GCM)
                gp_ghash_blocks(x, k->gcm_h, (const uint8_t *)data, 4);
            else
                gp_poly1305_blocks(&poly, (const uint8_t *)data, 4);
        }
        gp_chunk_store(out + c, data);
    }
    /* Shift the partial past the body blocks that follow this unit. */
    if (aead && off + n < j->body_len) {
        uint64_t after = (j->body_len - off - n) / 16;

        if (alg == GP_ALG_AES_GCM) {
            uint64_t hp[2];

            gp_ghash_pow_tab(hp, k, after);
            gp_ghash_mul(x, hp);
        } else {
            uint32_t rp[5];

            gp_p1305_pow(rp, j->poly_r, after);
            gp_p1305_mul(poly.h, rp);
            gp_state_wipe(rp, sizeof(rp));
        }
    }
    for (unsigned b = 0; b < GP_PARTIAL_BYTES; b++)
        partial[b] = 0;
    if (alg == GP_ALG_AES_GCM) {
        gp_store_be64(partial, x[0]);
        gp_store_be64(partial + 8, x[1]);
    } else if (alg == GP_ALG_CHACHA20_POLY1305) {
        for (int i = 0; i < 5; i++)
            gp_store_le32(partial + 4 * i, poly.h[i]);
    }
    gp_state_wipe(ks, sizeof(ks));
    gp_state_wipe(&poly, sizeof(poly));
}

/* A partial MAC word, written by another unit of this launch (see GP_LOAD_SHARED). */
GP_KFN uint64_t gp_partial_be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | GP_LOAD_SHARED(p + i);
    return v;
}

GP_KFN uint32_t gp_partial_le32(const uint8_t *p)
{
    return (uint32_t)GP_LOAD_SHARED(p) | (uint32_t)GP_LOAD_SHARED(p + 1) << 8
           | (uint32_t)GP_LOAD_SHARED(p + 2) << 16 | (uint32_t)GP_LOAD_SHARED(p + 3) << 24;
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
            st->ghash_x[0] ^= gp_partial_be64(partials + GP_PARTIAL_BYTES * u);
            st->ghash_x[1] ^= gp_partial_be64(partials + GP_PARTIAL_BYTES * u + 8);
        }
    } else if (alg == GP_ALG_CHACHA20_POLY1305) {
        uint32_t rn[5], p[5];

        gp_p1305_pow(rn, st->poly.r, nblocks);
        gp_p1305_mul(st->poly.h, rn);
        for (uint32_t u = 0; u < j->nunits; u++) {
            for (int i = 0; i < 5; i++)
                p[i] = gp_partial_le32(partials + GP_PARTIAL_BYTES * u + 4 * i);
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
