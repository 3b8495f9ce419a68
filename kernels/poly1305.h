/* SPDX-License-Identifier: Apache-2.0 */
/* Poly1305 (RFC 8439 §2.5) with five 26-bit limbs in 32-bit words and 64-bit products. */
#ifndef GP_POLY1305_H
#define GP_POLY1305_H

#include "kdefs.h"

/*
 * 26-bit limbs (the "donna-32" layout): a 130-bit value is h[0] + h[1]*2^26 + ... + h[4]*2^104.
 * Products of a limb (< 2^27 after partial carries) by a clamped r limb times 5 stay far below
 * 2^64 when five are summed, so one carry pass per block suffices. Only 32x32->64 multiplies,
 * which are constant time on x86-64 and on sm_80+.
 */
typedef struct gp_poly1305_state {
    uint32_t r[5];    /* clamped r (§2.5: "r &= 0x0ffffffc0ffffffc0ffffffc0fffffff"), limbs */
    uint32_t h[5];    /* accumulator, limbs */
    uint32_t pad[4];  /* s, the second key half, added at the end (§2.5 "a += s") */
} gp_poly1305_state;

#define GP_POLY_MASK26 0x3ffffffu

GP_KFN void gp_poly1305_init(gp_poly1305_state *st, const uint8_t key[32])
{
    /* Read r's little-endian 128 bits at 26-bit offsets (bytes 0,3,6,9,12 then shift 0,2,4,6,8);
     * the masks both cut to 26 bits and apply the clamp. */
    st->r[0] = gp_load_le32(key + 0) & 0x3ffffffu;
    st->r[1] = (gp_load_le32(key + 3) >> 2) & 0x3ffff03u;
    st->r[2] = (gp_load_le32(key + 6) >> 4) & 0x3ffc0ffu;
    st->r[3] = (gp_load_le32(key + 9) >> 6) & 0x3f03fffu;
    st->r[4] = (gp_load_le32(key + 12) >> 8) & 0x00fffffu;
    for (int i = 0; i < 5; i++)
        st->h[i] = 0;
    for (int i = 0; i < 4; i++)
        st->pad[i] = gp_load_le32(key + 16 + 4 * i);
}

/* h = (h + block + hibit*2^128) * r mod 2^130-5 for each 16-byte block (§2.5). */
GP_KFN void gp_poly1305_blocks_hibit(gp_poly1305_state *st, const uint8_t *p, size_t nblocks,
                                     uint32_t hibit)
{
    const uint32_t r0 = st->r[0], r1 = st->r[1], r2 = st->r[2], r3 = st->r[3], r4 = st->r[4];
    /* 2^130 = 5 mod p, so limb products that land at 2^130 and above come back times 5. */
    const uint32_t s1 = r1 * 5, s2 = r2 * 5, s3 = r3 * 5, s4 = r4 * 5;
    uint32_t h0 = st->h[0], h1 = st->h[1], h2 = st->h[2], h3 = st->h[3], h4 = st->h[4];

    for (size_t i = 0; i < nblocks; i++, p += 16) {
        uint64_t d0, d1, d2, d3, d4;
        uint32_t c;

        h0 += gp_load_le32(p + 0) & GP_POLY_MASK26;
        h1 += (gp_load_le32(p + 3) >> 2) & GP_POLY_MASK26;
        h2 += (gp_load_le32(p + 6) >> 4) & GP_POLY_MASK26;
        h3 += (gp_load_le32(p + 9) >> 6) & GP_POLY_MASK26;
        h4 += (gp_load_le32(p + 12) >> 8) | hibit;

        d0 = (uint64_t)h0 * r0 + (uint64_t)h1 * s4 + (uint64_t)h2 * s3 + (uint64_t)h3 * s2 + (uint64_t)h4 * s1;
        d1 = (uint64_t)h0 * r1 + (uint64_t)h1 * r0 + (uint64_t)h2 * s4 + (uint64_t)h3 * s3 + (uint64_t)h4 * s2;
        d2 = (uint64_t)h0 * r2 + (uint64_t)h1 * r1 + (uint64_t)h2 * r0 + (uint64_t)h3 * s4 + (uint64_t)h4 * s3;
        d3 = (uint64_t)h0 * r3 + (uint64_t)h1 * r2 + (uint64_t)h2 * r1 + (uint64_t)h3 * r0 + (uint64_t)h4 * s4;
        d4 = (uint64_t)h0 * r4 + (uint64_t)h1 * r3 + (uint64_t)h2 * r2 + (uint64_t)h3 * r1 + (uint64_t)h4 * r0;

        /* Partial carry: limbs back to ~26 bits; the top carry wraps around times 5. */
        c = (uint32_t)(d0 >> 26); h0 = (uint32_t)d0 & GP_POLY_MASK26;
        d1 += c; c = (uint32_t)(d1 >> 26); h1 = (uint32_t)d1 & GP_POLY_MASK26;
        d2 += c; c = (uint32_t)(d2 >> 26); h2 = (uint32_t)d2 & GP_POLY_MASK26;
        d3 += c; c = (uint32_t)(d3 >> 26); h3 = (uint32_t)d3 & GP_POLY_MASK26;
        d4 += c; c = (uint32_t)(d4 >> 26); h4 = (uint32_t)d4 & GP_POLY_MASK26;
        h0 += c * 5; c = h0 >> 26; h0 &= GP_POLY_MASK26;
        h1 += c;
    }
    st->h[0] = h0; st->h[1] = h1; st->h[2] = h2; st->h[3] = h3; st->h[4] = h4;
}

/* The same over full blocks held as little-endian 32-bit words (4 per block); h and r as limbs. */
GP_KFN void gp_poly1305_words(uint32_t h[5], const uint32_t r[5], const uint32_t *w, size_t nblocks)
{
    const uint32_t r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3], r4 = r[4];
    const uint32_t s1 = r1 * 5, s2 = r2 * 5, s3 = r3 * 5, s4 = r4 * 5;
    uint32_t h0 = h[0], h1 = h[1], h2 = h[2], h3 = h[3], h4 = h[4];

    for (size_t i = 0; i < nblocks; i++, w += 4) {
        uint64_t d0, d1, d2, d3, d4;
        uint32_t c;

        /* The 128-bit little-endian block at 26-bit offsets, plus 2^128 (§2.5's appended 0x01). */
        h0 += w[0] & GP_POLY_MASK26;
        h1 += ((w[0] >> 26) | (w[1] << 6)) & GP_POLY_MASK26;
        h2 += ((w[1] >> 20) | (w[2] << 12)) & GP_POLY_MASK26;
        h3 += ((w[2] >> 14) | (w[3] << 18)) & GP_POLY_MASK26;
        h4 += (w[3] >> 8) | (1u << 24);

        d0 = (uint64_t)h0 * r0 + (uint64_t)h1 * s4 + (uint64_t)h2 * s3 + (uint64_t)h3 * s2 + (uint64_t)h4 * s1;
        d1 = (uint64_t)h0 * r1 + (uint64_t)h1 * r0 + (uint64_t)h2 * s4 + (uint64_t)h3 * s3 + (uint64_t)h4 * s2;
        d2 = (uint64_t)h0 * r2 + (uint64_t)h1 * r1 + (uint64_t)h2 * r0 + (uint64_t)h3 * s4 + (uint64_t)h4 * s3;
        d3 = (uint64_t)h0 * r3 + (uint64_t)h1 * r2 + (uint64_t)h2 * r1 + (uint64_t)h3 * r0 + (uint64_t)h4 * s4;
        d4 = (uint64_t)h0 * r4 + (uint64_t)h1 * r3 + (uint64_t)h2 * r2 + (uint64_t)h3 * r1 + (uint64_t)h4 * r0;

        c = (uint32_t)(d0 >> 26); h0 = (uint32_t)d0 & GP_POLY_MASK26;
        d1 += c; c = (uint32_t)(d1 >> 26); h1 = (uint32_t)d1 & GP_POLY_MASK26;
        d2 += c; c = (uint32_t)(d2 >> 26); h2 = (uint32_t)d2 & GP_POLY_MASK26;
        d3 += c; c = (uint32_t)(d3 >> 26); h3 = (uint32_t)d3 & GP_POLY_MASK26;
        d4 += c; c = (uint32_t)(d4 >> 26); h4 = (uint32_t)d4 & GP_POLY_MASK26;
        h0 += c * 5; c = h0 >> 26; h0 &= GP_POLY_MASK26;
        h1 += c;
    }
    h[0] = h0; h[1] = h1; h[2] = h2; h[3] = h3; h[4] = h4;
}

/* Full 16-byte message blocks: the appended 0x01 byte of §2.5 is bit 128 (hibit = 2^128). */
GP_KFN void gp_poly1305_blocks(gp_poly1305_state *st, const uint8_t *p, size_t nblocks)
{
    gp_poly1305_blocks_hibit(st, p, nblocks, 1u << 24);
}

/*
 * Absorb a final partial block (lastlen 0..15; 0 = none): §2.5 appends 0x01 then, as the block is
 * short, the 0x01 lands inside the 16 bytes and the implicit 2^128 bit is not added. Then reduce h
 * fully mod 2^130-5 without branches, add s mod 2^128 and write the tag. Wipes the state.
 */
GP_KFN void gp_poly1305_tag_words(const uint32_t h[5], const uint32_t pad[4], uint32_t tag[4]);

GP_KFN void gp_poly1305_finish(gp_poly1305_state *st, const uint8_t *last, size_t lastlen,
                               uint8_t tag[16])
{
    uint32_t tag32[4];

    if (lastlen > 0) {
        uint8_t blk[16];

        for (size_t i = 0; i < 16; i++)
            blk[i] = i < lastlen ? last[i] : (i == lastlen ? 1 : 0);
        gp_poly1305_blocks_hibit(st, blk, 1, 0);
        gp_state_wipe(blk, sizeof(blk));
    }
    gp_poly1305_tag_words(st->h, st->pad, tag32);
    for (int i = 0; i < 4; i++)
        gp_store_le32(tag + 4 * i, tag32[i]);
    gp_state_wipe(tag32, sizeof(tag32));
    gp_state_wipe(st, sizeof(*st));
}

/* The tag from an accumulator (partially reduced limbs) and s: reduce h fully mod 2^130-5 without
 * branches, add s mod 2^128 (§2.5), as 4 little-endian words. */
GP_KFN void gp_poly1305_tag_words(const uint32_t h[5], const uint32_t pad[4], uint32_t tag[4])
{
    uint32_t h0, h1, h2, h3, h4, g0, g1, g2, g3, g4, c, mask;
    uint64_t f;

    h0 = h[0]; h1 = h[1]; h2 = h[2]; h3 = h[3]; h4 = h[4];

    /* Complete carry propagation: h < 2^130 + small. */
    c = h1 >> 26; h1 &= GP_POLY_MASK26;
    h2 += c; c = h2 >> 26; h2 &= GP_POLY_MASK26;
    h3 += c; c = h3 >> 26; h3 &= GP_POLY_MASK26;
    h4 += c; c = h4 >> 26; h4 &= GP_POLY_MASK26;
    h0 += c * 5; c = h0 >> 26; h0 &= GP_POLY_MASK26;
    h1 += c;

    /* g = h + 5 - 2^130; if it did not go negative, h >= p and the result is g. */
    g0 = h0 + 5; c = g0 >> 26; g0 &= GP_POLY_MASK26;
    g1 = h1 + c; c = g1 >> 26; g1 &= GP_POLY_MASK26;
    g2 = h2 + c; c = g2 >> 26; g2 &= GP_POLY_MASK26;
    g3 = h3 + c; c = g3 >> 26; g3 &= GP_POLY_MASK26;
    g4 = h4 + c - (1u << 26);

    /* mask = all ones when g4 is non-negative (top bit clear): select g, else h. */
    mask = (g4 >> 31) - 1u;
    g0 &= mask; g1 &= mask; g2 &= mask; g3 &= mask; g4 &= mask;
    mask = ~mask;
    h0 = (h0 & mask) | g0;
    h1 = (h1 & mask) | g1;
    h2 = (h2 & mask) | g2;
    h3 = (h3 & mask) | g3;
    h4 = (h4 & mask) | g4;

    /* Repack 5x26 -> 4x32 bits (h mod 2^128), then add s with carries (§2.5 "a += s"). */
    h0 = h0 | (h1 << 26);
    h1 = (h1 >> 6) | (h2 << 20);
    h2 = (h2 >> 12) | (h3 << 14);
    h3 = (h3 >> 18) | (h4 << 8);
    f = (uint64_t)h0 + pad[0];             tag[0] = (uint32_t)f;
    f = (uint64_t)h1 + pad[1] + (f >> 32); tag[1] = (uint32_t)f;
    f = (uint64_t)h2 + pad[2] + (f >> 32); tag[2] = (uint32_t)f;
    f = (uint64_t)h3 + pad[3] + (f >> 32); tag[3] = (uint32_t)f;
}

#endif
