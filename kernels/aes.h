/* SPDX-License-Identifier: Apache-2.0 */
/* Constant-time bitsliced AES (FIPS-197) encryption of 4 blocks at once, and its key schedule. */
#ifndef GP_AES_H
#define GP_AES_H

#include "kdefs.h"

/*
 * Representation. Four 16-byte blocks (64 bytes) are held as 8 uint64_t "planes": plane j holds
 * bit j of each of the 64 bytes. Byte p (0..15, FIPS-197 §3.4 column-major: p = 4*col + row) of
 * block k (0..3) sits at bit 4*p + k of every plane. So column c occupies bits 16c..16c+15, row r
 * of that column bits 16c+4r..16c+4r+3, one bit per block. With this layout:
 *   - SubBytes is one Boolean circuit evaluated on whole planes (64 S-boxes in parallel);
 *   - ShiftRows is a rotation of each row's bits by whole columns (16-bit steps);
 *   - MixColumns needs "the next row in the same column" = a 4-bit rotation inside 16-bit lanes.
 * Nothing is ever indexed by secret data: no tables at all, so no cache or shared-memory bank timing.
 */

#define GP_AES_MAX_ROUNDS 14

typedef struct gp_aes_sched {
    uint32_t nr;                              /* rounds: 10, 12, 14 (FIPS-197 §5, Fig. 4) */
    uint32_t pad_;                            /* keeps rk 8-byte aligned with an explicit layout */
    uint32_t ek[4 * (GP_AES_MAX_ROUNDS + 1)]; /* round keys as plain words, little-endian (byte 4c
                                               * of round key r is the low byte of ek[4r + c]):
                                               * the device's T-table rounds */
    uint64_t rk[GP_AES_MAX_ROUNDS + 1][8];    /* the same, bitsliced, replicated for the 4 blocks:
                                               * the host's rounds (last: the device never reads
                                               * them, and a batch copies the key up to here) */
} gp_aes_sched;

/*
 * SubBytes on 64 bytes in parallel: the Boyar–Peralta S-box circuit ("A depth-16 circuit for the
 * AES S-box", 2011): a linear top layer, a shared non-linear GF(2^4)-tower inversion middle, and a
 * linear bottom layer that also folds in the affine map of FIPS-197 §5.1.1 (the NOTs are the 0x63
 * constant). The circuit numbers bits MSB first: U0 = bit 7, S0 = bit 7.
 */
GP_KFN void gp_aes_sbox_planes(uint64_t q[8])
{
    uint64_t U0 = q[7], U1 = q[6], U2 = q[5], U3 = q[4];
    uint64_t U4 = q[3], U5 = q[2], U6 = q[1], U7 = q[0];
    uint64_t T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13, T14, T15, T16, T17, T18, T19;
    uint64_t T20, T21, T22, T23, T24, T25, T26, T27;
    uint64_t M1, M2, M3, M4, M5, M6, M7, M8, M9, M10, M11, M12, M13, M14, M15, M16, M17, M18, M19;
    uint64_t M20, M21, M22, M23, M24, M25, M26, M27, M28, M29, M30, M31, M32, M33, M34, M35, M36;
    uint64_t M37, M38, M39, M40, M41, M42, M43, M44, M45, M46, M47, M48, M49, M50, M51, M52, M53;
    uint64_t M54, M55, M56, M57, M58, M59, M60, M61, M62, M63;
    uint64_t L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15, L16, L17, L18;
    uint64_t L19, L20, L21, L22, L23, L24, L25, L26, L27, L28, L29;

    /* Top linear layer. */
    T1 = U0 ^ U3;
    T2 = U0 ^ U5;
    T3 = U0 ^ U6;
    T4 = U3 ^ U5;
    T5 = U4 ^ U6;
    T6 = T1 ^ T5;
    T7 = U1 ^ U2;
    T8 = U7 ^ T6;
    T9 = U7 ^ T7;
    T10 = T6 ^ T7;
    T11 = U1 ^ U5;
    T12 = U2 ^ U5;
    T13 = T3 ^ T4;
    T14 = T6 ^ T11;
    T15 = T5 ^ T11;
    T16 = T5 ^ T12;
    T17 = T9 ^ T16;
    T18 = U3 ^ U7;
    T19 = T7 ^ T18;
    T20 = T1 ^ T19;
    T21 = U6 ^ U7;
    T22 = T7 ^ T21;
    T23 = T2 ^ T22;
    T24 = T2 ^ T10;
    T25 = T20 ^ T17;
    T26 = T3 ^ T16;
    T27 = T1 ^ T12;

    /* Non-linear middle: inversion in GF(2^8) via GF(2^4) and GF(2^2) towers. */
    M1 = T13 & T6;
    M2 = T23 & T8;
    M3 = T14 ^ M1;
    M4 = T19 & U7;
    M5 = M4 ^ M1;
    M6 = T3 & T16;
    M7 = T22 & T9;
    M8 = T26 ^ M6;
    M9 = T20 & T17;
    M10 = M9 ^ M6;
    M11 = T1 & T15;
    M12 = T4 & T27;
    M13 = M12 ^ M11;
    M14 = T2 & T10;
    M15 = M14 ^ M11;
    M16 = M3 ^ M2;
    M17 = M5 ^ T24;
    M18 = M8 ^ M7;
    M19 = M10 ^ M15;
    M20 = M16 ^ M13;
    M21 = M17 ^ M15;
    M22 = M18 ^ M13;
    M23 = M19 ^ T25;
    M24 = M22 ^ M23;
    M25 = M22 & M20;
    M26 = M21 ^ M25;
    M27 = M20 ^ M21;
    M28 = M23 ^ M25;
    M29 = M28 & M27;
    M30 = M26 & M24;
    M31 = M20 & M23;
    M32 = M27 & M31;
    M33 = M27 ^ M25;
    M34 = M21 & M22;
    M35 = M24 & M34;
    M36 = M24 ^ M25;
    M37 = M21 ^ M29;
    M38 = M32 ^ M33;
    M39 = M23 ^ M30;
    M40 = M35 ^ M36;
    M41 = M38 ^ M40;
    M42 = M37 ^ M39;
    M43 = M37 ^ M38;
    M44 = M39 ^ M40;
    M45 = M42 ^ M41;
    M46 = M44 & T6;
    M47 = M40 & T8;
    M48 = M39 & U7;
    M49 = M43 & T16;
    M50 = M38 & T9;
    M51 = M37 & T17;
    M52 = M42 & T15;
    M53 = M45 & T27;
    M54 = M41 & T10;
    M55 = M44 & T13;
    M56 = M40 & T23;
    M57 = M39 & T19;
    M58 = M43 & T3;
    M59 = M38 & T22;
    M60 = M37 & T20;
    M61 = M42 & T1;
    M62 = M45 & T4;
    M63 = M41 & T2;

    /* Bottom linear layer, with the affine constant 0x63 as NOTs on S1, S2, S6, S7. */
    L0 = M61 ^ M62;
    L1 = M50 ^ M56;
    L2 = M46 ^ M48;
    L3 = M47 ^ M55;
    L4 = M54 ^ M58;
    L5 = M49 ^ M61;
    L6 = M62 ^ L5;
    L7 = M46 ^ L3;
    L8 = M51 ^ M59;
    L9 = M52 ^ M53;
    L10 = M53 ^ L4;
    L11 = M60 ^ L2;
    L12 = M48 ^ M51;
    L13 = M50 ^ L0;
    L14 = M52 ^ M61;
    L15 = M55 ^ L1;
    L16 = M56 ^ L0;
    L17 = M57 ^ L1;
    L18 = M58 ^ L8;
    L19 = M63 ^ L4;
    L20 = L0 ^ L1;
    L21 = L1 ^ L7;
    L22 = L3 ^ L12;
    L23 = L18 ^ L2;
    L24 = L15 ^ L9;
    L25 = L6 ^ L10;
    L26 = L7 ^ L9;
    L27 = L8 ^ L10;
    L28 = L11 ^ L14;
    L29 = L11 ^ L17;
    q[7] = L6 ^ L24;
    q[6] = ~(L16 ^ L26);
    q[5] = ~(L19 ^ L28);
    q[4] = L6 ^ L21;
    q[3] = L20 ^ L22;
    q[2] = L25 ^ L29;
    q[1] = ~(L13 ^ L27);
    q[0] = ~(L6 ^ L23);
}

/*
 * Byte <-> plane conversion, as transposes (fixed data-independent sequence of shifts and masks).
 * Lane i = 4p + k of the 64 lanes is byte p of block k. Word W_m holds lanes 8m..8m+7 as its bytes;
 * an 8x8 bit transpose inside each word (bit j of byte i <-> bit i of byte j) and an 8x8 byte
 * transpose across the 8 words (byte j of word m <-> byte m of word j) then leave plane j in word j.
 */
GP_KFN void gp_aes_bit_transpose8(uint64_t *x)
{
    uint64_t v = *x, t;

    t = (v ^ (v >> 7)) & 0x00AA00AA00AA00AAull;  v ^= t ^ (t << 7);
    t = (v ^ (v >> 14)) & 0x0000CCCC0000CCCCull; v ^= t ^ (t << 14);
    t = (v ^ (v >> 28)) & 0x00000000F0F0F0F0ull; v ^= t ^ (t << 28);
    *x = v;
}

GP_KFN void gp_aes_byte_transpose8(uint64_t w[8])
{
    /* Recursive block transpose: swap the off-diagonal 1x1, then 2x2, then 4x4 blocks of bytes. */
    const uint64_t mask[3] = {0x00FF00FF00FF00FFull, 0x0000FFFF0000FFFFull, 0x00000000FFFFFFFFull};

    for (int lv = 0; lv < 3; lv++) {
        int s = 1 << lv;

        for (int m = 0; m < 8; m++) {
            if (m & s)
                continue;
            uint64_t t = ((w[m] >> (8 * s)) ^ w[m + s]) & mask[lv];
            w[m + s] ^= t;
            w[m] ^= t << (8 * s);
        }
    }
}

GP_KFN void gp_aes_pack(uint64_t q[8], const uint8_t in[64])
{
    for (int m = 0; m < 8; m++) {
        uint64_t w = 0;

        /* byte i of W_m is lane 8m+i: block k = i % 4, position p = 2m + i / 4 */
        for (int i = 0; i < 8; i++)
            w |= (uint64_t)in[16 * (i % 4) + 2 * m + i / 4] << (8 * i);
        gp_aes_bit_transpose8(&w);
        q[m] = w;
    }
    gp_aes_byte_transpose8(q);
}

GP_KFN void gp_aes_unpack(uint8_t out[64], const uint64_t q[8])
{
    uint64_t w[8];

    for (int j = 0; j < 8; j++)
        w[j] = q[j];
    gp_aes_byte_transpose8(w);
    for (int m = 0; m < 8; m++) {
        gp_aes_bit_transpose8(&w[m]);
        for (int i = 0; i < 8; i++)
            out[16 * (i % 4) + 2 * m + i / 4] = (uint8_t)(w[m] >> (8 * i));
    }
    gp_state_wipe(w, sizeof(w));
}

/* ShiftRows (FIPS-197 §5.1.2): s'[r][c] = s[r][(c + r) mod 4], i.e. row r moves r columns down. */
GP_KFN uint64_t gp_aes_shiftrows1(uint64_t x)
{
    const uint64_t r0 = 0x000F000F000F000Full;
    uint64_t x1 = x & (r0 << 4), x2 = x & (r0 << 8), x3 = x & (r0 << 12);

    return (x & r0) | (x1 >> 16 | x1 << 48) | (x2 >> 32 | x2 << 32) | (x3 >> 48 | x3 << 16);
}

/* Row r of each column takes row r+1 (mod 4): a 4-bit rotation inside each 16-bit column lane. */
GP_KFN uint64_t gp_aes_rot_row1(uint64_t x)
{
    return ((x >> 4) & 0x0FFF0FFF0FFF0FFFull) | ((x << 12) & 0xF000F000F000F000ull);
}

GP_KFN uint64_t gp_aes_rot_row2(uint64_t x)
{
    return ((x >> 8) & 0x00FF00FF00FF00FFull) | ((x << 8) & 0xFF00FF00FF00FF00ull);
}

/*
 * MixColumns (FIPS-197 §5.1.3): b_r = 2a_r ^ 3a_{r+1} ^ a_{r+2} ^ a_{r+3}
 *                                   = 2(a_r ^ a_{r+1}) ^ a_{r+1} ^ (a_{r+2} ^ a_{r+3}).
 * With t = a ^ rot1(a): b = xtime(t) ^ rot1(a) ^ rot2(t). xtime (§4.2.1) on planes: bit j moves to
 * bit j+1 and the old bit 7 is folded back in as 0x1b, i.e. into planes 0, 1, 3 and 4.
 */
GP_KFN void gp_aes_mixcolumns(uint64_t q[8])
{
    uint64_t a1[8], t[8];

    for (int j = 0; j < 8; j++) {
        a1[j] = gp_aes_rot_row1(q[j]);
        t[j] = q[j] ^ a1[j];
    }
    q[0] = t[7] ^ a1[0] ^ gp_aes_rot_row2(t[0]);
    q[1] = t[0] ^ t[7] ^ a1[1] ^ gp_aes_rot_row2(t[1]);
    q[2] = t[1] ^ a1[2] ^ gp_aes_rot_row2(t[2]);
    q[3] = t[2] ^ t[7] ^ a1[3] ^ gp_aes_rot_row2(t[3]);
    q[4] = t[3] ^ t[7] ^ a1[4] ^ gp_aes_rot_row2(t[4]);
    q[5] = t[4] ^ a1[5] ^ gp_aes_rot_row2(t[5]);
    q[6] = t[5] ^ a1[6] ^ gp_aes_rot_row2(t[6]);
    q[7] = t[6] ^ a1[7] ^ gp_aes_rot_row2(t[7]);
}

/* SubWord (FIPS-197 §5.2) through the same bitsliced circuit, so key expansion has no tables. */
GP_KFN uint32_t gp_aes_subword(uint32_t w)
{
    uint64_t q[8];
    uint32_t r = 0;

    for (int j = 0; j < 8; j++) {
        q[j] = 0;
        for (int i = 0; i < 4; i++)
            q[j] |= (uint64_t)((w >> (8 * i + j)) & 1) << i;
    }
    gp_aes_sbox_planes(q);
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < 4; i++)
            r |= (uint32_t)((q[j] >> i) & 1) << (8 * i + j);
    return r;
}

/*
 * KeyExpansion (FIPS-197 §5.2). Words are big-endian (byte 0 of the key is the top byte of w[0]).
 * Loop bounds depend only on the key length, which is public. Round key r is then bitsliced: key
 * byte p goes to bit 4p+k for all four blocks k at once (mask of 0xF per set bit).
 */
GP_KFN void gp_aes_schedule(gp_aes_sched *s, const uint8_t *key, uint32_t keylen)
{
    uint32_t w[4 * (GP_AES_MAX_ROUNDS + 1)];
    uint32_t nk = keylen / 4, nr = nk + 6, nw = 4 * (nr + 1);
    uint32_t rcon = 1;

    s->nr = nr;
    s->pad_ = 0;
    for (uint32_t i = 0; i < nk; i++)
        w[i] = (uint32_t)key[4 * i] << 24 | (uint32_t)key[4 * i + 1] << 16 |
               (uint32_t)key[4 * i + 2] << 8 | (uint32_t)key[4 * i + 3];
    for (uint32_t i = nk; i < nw; i++) {
        uint32_t t = w[i - 1];

        if (i % nk == 0) {
            t = gp_aes_subword(t << 8 | t >> 24) ^ (rcon << 24);
            /* Rcon doubles in GF(2^8) (§5.2); it is public, the branch-free form is just tidy. */
            rcon = (rcon << 1) ^ (0x11b & (0u - (rcon >> 7)));
        } else if (nk > 6 && i % nk == 4) {
            t = gp_aes_subword(t);
        }
        w[i] = w[i - nk] ^ t;
    }
    for (uint32_t r = 0; r <= nr; r++) {
        for (int j = 0; j < 8; j++) {
            uint64_t plane = 0;

            for (int p = 0; p < 16; p++) {
                uint32_t byte = w[4 * r + p / 4] >> (24 - 8 * (p % 4));
                uint64_t bit = (uint64_t)((byte >> j) & 1);

                plane |= (0u - bit) & (0xFull << (4 * p));
            }
            s->rk[r][j] = plane;
        }
    }
    for (uint32_t j = nr + 1; j <= GP_AES_MAX_ROUNDS; j++)
        for (int i = 0; i < 8; i++)
            s->rk[j][i] = 0;
    for (uint32_t i = 0; i < 4 * (GP_AES_MAX_ROUNDS + 1); i++)
        s->ek[i] = i < nw ? gp_bswap32(w[i]) : 0;
    gp_state_wipe(w, sizeof(w));
}

/* Cipher (FIPS-197 §5.1) on 4 independent blocks: in[16k..16k+15] -> out[16k..16k+15]. */
GP_KFN void gp_aes_encrypt4(const gp_aes_sched *s, const uint8_t in[64], uint8_t out[64])
{
    uint64_t q[8];
    uint32_t nr = s->nr;

    gp_aes_pack(q, in);
    for (int j = 0; j < 8; j++)
        q[j] ^= s->rk[0][j];
    for (uint32_t r = 1; r < nr; r++) {
        gp_aes_sbox_planes(q);
        for (int j = 0; j < 8; j++)
            q[j] = gp_aes_shiftrows1(q[j]);
        gp_aes_mixcolumns(q);
        for (int j = 0; j < 8; j++)
            q[j] ^= s->rk[r][j];
    }
    gp_aes_sbox_planes(q);
    for (int j = 0; j < 8; j++)
        q[j] = gp_aes_shiftrows1(q[j]) ^ s->rk[nr][j];
    gp_aes_unpack(out, q);
    gp_state_wipe(q, sizeof(q));
}

#endif
