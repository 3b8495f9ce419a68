/* SPDX-License-Identifier: Apache-2.0 */
/* Constant-time GHASH (SP 800-38D §6.3-6.4) from plain integer multiplies: no carry-less instruction. */
#ifndef GP_GHASH_H
#define GP_GHASH_H

#include "kdefs.h"

/*
 * Field elements are two big-endian words [hi, lo] of the 16-byte block. SP 800-38D §6.3 makes the
 * leftmost bit of the block the coefficient of x^0, so as a 128-bit integer the element is the
 * bit-reversal of its polynomial ("reflected" representation): integer bit 127-i = coefficient i.
 */

/*
 * The 64-bit carry-less product of two 32-bit words, by ordinary multiplies. Each operand is split
 * into four parts that keep only every 4th bit ("holes"): a part is sum a_k 2^(4k + i), so the
 * integer product of two parts is sum_n c_n 2^(4n + i + j) with c_n (the number of terms of
 * degree 4n + i + j) at most 8: each c_n fills only its own 4 bits from 4n + i + j up, nothing
 * carries into another's, and the bit at 4n + i + j is c_n's low bit, the XOR of the terms. The four part-products whose i + j
 * fall in one residue class mod 4 are XORed, and each class keeps its own bit positions.
 * 32x32 -> 64 is one IMAD.WIDE.U32 on the GPU (and constant-time on x86-64 and sm_80+): 16 per
 * product, where the same product on 64-bit words takes 48 IMADs and three bit reversals.
 */
/* 32 x 32 -> 64. On the GPU as PTX mul.wide.u32: written in C, the compiler widened the masked
 * parts back to 64 bits and ptxas spent an add on each product's (zero) high cross terms. */
GP_KFN uint64_t gp_mul32w(uint32_t a, uint32_t b)
{
#if defined(__CUDA_ARCH__)
    uint64_t r;

    asm("mul.wide.u32 %0, %1, %2;" : "=l"(r) : "r"(a), "r"(b));
    return r;
#else
    return (uint64_t)a * b;
#endif
}

GP_KFN uint64_t gp_clmul32(uint32_t x, uint32_t y)
{
    const uint32_t m0 = 0x11111111u, m1 = m0 << 1, m2 = m0 << 2, m3 = m0 << 3;
    const uint32_t x0 = x & m0, x1 = x & m1, x2 = x & m2, x3 = x & m3;
    const uint32_t y0 = y & m0, y1 = y & m1, y2 = y & m2, y3 = y & m3;
    const uint64_t z0 = gp_mul32w(x0, y0) ^ gp_mul32w(x1, y3) ^ gp_mul32w(x2, y2) ^ gp_mul32w(x3, y1);
    const uint64_t z1 = gp_mul32w(x0, y1) ^ gp_mul32w(x1, y0) ^ gp_mul32w(x2, y3) ^ gp_mul32w(x3, y2);
    const uint64_t z2 = gp_mul32w(x0, y2) ^ gp_mul32w(x1, y1) ^ gp_mul32w(x2, y0) ^ gp_mul32w(x3, y3);
    const uint64_t z3 = gp_mul32w(x0, y3) ^ gp_mul32w(x1, y2) ^ gp_mul32w(x2, y1) ^ gp_mul32w(x3, y0);
    const uint64_t n0 = 0x1111111111111111ull;

    return (z0 & n0) | (z1 & (n0 << 1)) | (z2 & (n0 << 2)) | (z3 & (n0 << 3));
}

/* The 128-bit carry-less product of two 64-bit words (Karatsuba over 32-bit halves): *hi, *lo. */
GP_KFN void gp_clmul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
    const uint32_t a0 = (uint32_t)a, a1 = (uint32_t)(a >> 32), b0 = (uint32_t)b, b1 = (uint32_t)(b >> 32);
    const uint64_t p0 = gp_clmul32(a0, b0), p2 = gp_clmul32(a1, b1);
    const uint64_t p1 = gp_clmul32(a0 ^ a1, b0 ^ b1) ^ p0 ^ p2;   /* a0 b1 + a1 b0 */

    *lo = p0 ^ (p1 << 32);
    *hi = p2 ^ (p1 >> 32);
}

/*
 * x = x * H in GF(2^128) mod x^128 + x^7 + x^2 + x + 1 (SP 800-38D §6.3, Algorithm 1's result).
 *
 * 1. 128x128 carry-less product of the two integers by Karatsuba over 64-bit halves.
 * 2. Because both integers are bit-reversed polynomials, the 255-bit integer product is the
 *    bit-reversed 255-coefficient polynomial product; shifting it left by 1 aligns it to 256 bits:
 *    the top 128 bits are then coefficients 0..127 and the low 128 bits 128..255, both reflected.
 * 3. Reduction: each coefficient 128+k folds into k, k+1, k+2, k+7. In integer terms a bit at
 *    position p (< 128) is XORed into p+128, p+127, p+126 and p+121; done for the low word first,
 *    because its spill lands in the second word, which is then folded the same way.
 */
GP_KFN void gp_ghash_mul(uint64_t x[2], const uint64_t h[2])
{
    /* The three Karatsuba products (a0 b0, a1 b1, a2 b2) in a rolled loop whose operands and
     * results move down a queue each pass: one copy of the 64-bit product instead of three
     * keeps GCM's hot code small enough for the GPU's instruction cache. */
    uint64_t a0 = x[1], a1 = x[0], a2 = x[0] ^ x[1], b0 = h[1], b1 = h[0], b2 = h[0] ^ h[1];
    uint64_t z0l = 0, z0h = 0, z1l = 0, z1h = 0, z2l = 0, z2h = 0;
    uint64_t w0, w1, w2, w3;

    GP_NO_UNROLL
    for (int i = 0; i < 3; i++) {
        uint64_t l, hh;

        gp_clmul64(a0, b0, &hh, &l);
        z0l = z1l; z0h = z1h; z1l = z2l; z1h = z2h; z2l = l; z2h = hh;
        a0 = a1; a1 = a2; b0 = b1; b1 = b2;
    }
    /* Karatsuba middle term: a0b1 + a1b0 = (a0+a1)(b0+b1) + a0b0 + a1b1. */
    z2l ^= z0l ^ z1l;
    z2h ^= z0h ^ z1h;
    w0 = z0l;
    w1 = z0h ^ z2l;
    w2 = z1l ^ z2h;
    w3 = z1h;

    /* Align the 255-bit reflected product to 256 bits. */
    w3 = (w3 << 1) | (w2 >> 63);
    w2 = (w2 << 1) | (w1 >> 63);
    w1 = (w1 << 1) | (w0 >> 63);
    w0 <<= 1;

    /* Fold coefficients 128..255 (words w1, w0) into 0..127 (words w3, w2). */
    w2 ^= w0 ^ (w0 >> 1) ^ (w0 >> 2) ^ (w0 >> 7);
    w1 ^= (w0 << 63) ^ (w0 << 62) ^ (w0 << 57);
    w3 ^= w1 ^ (w1 >> 1) ^ (w1 >> 2) ^ (w1 >> 7);
    w2 ^= (w1 << 63) ^ (w1 << 62) ^ (w1 << 57);

    x[0] = w3;
    x[1] = w2;
}

/* GHASH_H over whole 16-byte blocks (SP 800-38D §6.4): X = (X ^ block) * H for each block. */
GP_KFN void gp_ghash_blocks(uint64_t x[2], const uint64_t h[2], const uint8_t *p, size_t nblocks)
{
    for (size_t i = 0; i < nblocks; i++, p += 16) {
        x[0] ^= gp_load_be64(p);
        x[1] ^= gp_load_be64(p + 8);
        gp_ghash_mul(x, h);
    }
}

/* The same over blocks held as little-endian 32-bit words (4 per block, as loaded from memory). */
GP_KFN void gp_ghash_words(uint64_t x[2], const uint64_t h[2], const uint32_t *w, size_t nblocks)
{
    for (size_t i = 0; i < nblocks; i++, w += 4) {
        x[0] ^= (uint64_t)gp_bswap32(w[0]) << 32 | gp_bswap32(w[1]);
        x[1] ^= (uint64_t)gp_bswap32(w[2]) << 32 | gp_bswap32(w[3]);
        gp_ghash_mul(x, h);
    }
}

#endif
