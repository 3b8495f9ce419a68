/* SPDX-License-Identifier: Apache-2.0 */
/* AES encryption from one T-table held once per shared-memory bank (the device's AES), and the
 * word-level entry points the units call on host and device. */
#ifndef GP_AES_TT_H
#define GP_AES_TT_H

#include "kdefs.h"
#include "aes.h"

/*
 * The GPU path (Tezcan 2021, "GPU-based AES encryption with per-lane bank-private tables"): every
 * table entry is stored 32 times, lane l's copy in bank l, so whatever the (secret) indices a
 * warp's lookups never conflict and take the same time; no lane's access pattern shows in another
 * lane's timing. Nothing secret indexes global memory: the table is filled from a public constant
 * with public indices.
 *
 * Layout: a half is 64 KiB of 256-byte rows; row x holds, for lane l, one entry at word l and one
 * at word 32 + l. The first half holds T0[x] and T2[x] = T0[x] rotated left by 16. The byte offset
 * of lane l's entry is x << 8 | 4l (words 0-31) or x << 8 | (128 + 4l) (words 32-63): one byte
 * permute (PRMT) builds it from the state word and the lane's offset, and the shared-memory load
 * takes it as its address. A 128-byte row would need shift, mask, OR and scale per lookup (four
 * instructions instead of one).
 *
 * Two layouts, chosen per SM when the kernel is compiled (GP_AES_TT_DEVICE_WIDE below):
 *   narrow  (64 KiB)  the first half only. Rows 1 and 3 of a column share one rotation by 8 of
 *                     T0 ^ T2: per column 4 PRMT + 4 LDS + 1 SHF + 3 LOP3.
 *   wide   (128 KiB)  a second half with T1 = T0 rotated by 8 and T3 = T0 rotated by 24, read
 *                     at a constant offset the load instruction carries: per column 4 PRMT +
 *                     4 LDS + 2 LOP3, a quarter fewer ALU instructions in the rounds, which set
 *                     the pace (bench/RESULTS.md, "Device-resident kernels").
 *                     It needs a GPU whose block may hold 128 KiB (sm_80, sm_90); a block then
 *                     has 256 * gpu_min_blocks threads (1024) and the SM one block, as many
 *                     warps as gpu_min_blocks blocks of 256 would have.
 *
 * Words are little-endian (byte 4c of the block is the low byte of column word c), so the state
 * moves to and from memory without byte swaps. For input byte a = S-box output s in row 0 of a
 * column, MixColumns gives (2s, s, s, 3s) down the column: T0[x] = 2s | s<<8 | s<<16 | 3s<<24,
 * row r's contribution is T0 rotated left by 8r = Tr. ShiftRows (FIPS-197 §5.1.2): output column
 * c, row r comes from input column c + r. The last round (no MixColumns) takes S(x) from byte 0
 * of T2, byte 1 and 2 of T0, byte 3 of T2 (first half, both layouts).
 *
 * The host executor keeps the bitsliced AES (a T-table on a CPU is a cache-timing leak); these
 * functions still compile for the host so the unit tests prove both layouts and the rounds.
 */
#define GP_AES_TT_LANES 32u
#define GP_AES_TT_ROW_BYTES 256u
#define GP_AES_TT_T2 128u                                  /* byte offset of T2 (T3) in a row */
#define GP_AES_TT_BYTES (256u * GP_AES_TT_ROW_BYTES)       /* 64 KiB: the narrow layout */
#define GP_AES_TT_WIDE_BYTES (2u * GP_AES_TT_BYTES)        /* 128 KiB: the wide layout */

GP_KTABLE uint32_t gp_aes_te0[256] = {
    0xa56363c6u, 0x847c7cf8u, 0x997777eeu, 0x8d7b7bf6u, 0x0df2f2ffu, 0xbd6b6bd6u,
    0xb16f6fdeu, 0x54c5c591u, 0x50303060u, 0x03010102u, 0xa96767ceu, 0x7d2b2b56u,
    0x19fefee7u, 0x62d7d7b5u, 0xe6abab4du, 0x9a7676ecu, 0x45caca8fu, 0x9d82821fu,
    0x40c9c989u, 0x877d7dfau, 0x15fafaefu, 0xeb5959b2u, 0xc947478eu, 0x0bf0f0fbu,
    0xecadad41u, 0x67d4d4b3u, 0xfda2a25fu, 0xeaafaf45u, 0xbf9c9c23u, 0xf7a4a453u,
    0x967272e4u, 0x5bc0c09bu, 0xc2b7b775u, 0x1cfdfde1u, 0xae93933du, 0x6a26264cu,
    0x5a36366cu, 0x413f3f7eu, 0x02f7f7f5u, 0x4fcccc83u, 0x5c343468u, 0xf4a5a551u,
    0x34e5e5d1u, 0x08f1f1f9u, 0x937171e2u, 0x73d8d8abu, 0x53313162u, 0x3f15152au,
    0x0c040408u, 0x52c7c795u, 0x65232346u, 0x5ec3c39du, 0x28181830u, 0xa1969637u,
    0x0f05050au, 0xb59a9a2fu, 0x0907070eu, 0x36121224u, 0x9b80801bu, 0x3de2e2dfu,
    0x26ebebcdu, 0x6927274eu, 0xcdb2b27fu, 0x9f7575eau, 0x1b090912u, 0x9e83831du,
    0x742c2c58u, 0x2e1a1a34u, 0x2d1b1b36u, 0xb26e6edcu, 0xee5a5ab4u, 0xfba0a05bu,
    0xf65252a4u, 0x4d3b3b76u, 0x61d6d6b7u, 0xceb3b37du, 0x7b292952u, 0x3ee3e3ddu,
    0x712f2f5eu, 0x97848413u, 0xf55353a6u, 0x68d1d1b9u, 0x00000000u, 0x2cededc1u,
    0x60202040u, 0x1ffcfce3u, 0xc8b1b179u, 0xed5b5bb6u, 0xbe6a6ad4u, 0x46cbcb8du,
    0xd9bebe67u, 0x4b393972u, 0xde4a4a94u, 0xd44c4c98u, 0xe85858b0u, 0x4acfcf85u,
    0x6bd0d0bbu, 0x2aefefc5u, 0xe5aaaa4fu, 0x16fbfbedu, 0xc5434386u, 0xd74d4d9au,
    0x55333366u, 0x94858511u, 0xcf45458au, 0x10f9f9e9u, 0x06020204u, 0x817f7ffeu,
    0xf05050a0u, 0x443c3c78u, 0xba9f9f25u, 0xe3a8a84bu, 0xf35151a2u, 0xfea3a35du,
    0xc0404080u, 0x8a8f8f05u, 0xad92923fu, 0xbc9d9d21u, 0x48383870u, 0x04f5f5f1u,
    0xdfbcbc63u, 0xc1b6b677u, 0x75dadaafu, 0x63212142u, 0x30101020u, 0x1affffe5u,
    0x0ef3f3fdu, 0x6dd2d2bfu, 0x4ccdcd81u, 0x140c0c18u, 0x35131326u, 0x2fececc3u,
    0xe15f5fbeu, 0xa2979735u, 0xcc444488u, 0x3917172eu, 0x57c4c493u, 0xf2a7a755u,
    0x827e7efcu, 0x473d3d7au, 0xac6464c8u, 0xe75d5dbau, 0x2b191932u, 0x957373e6u,
    0xa06060c0u, 0x98818119u, 0xd14f4f9eu, 0x7fdcdca3u, 0x66222244u, 0x7e2a2a54u,
    0xab90903bu, 0x8388880bu, 0xca46468cu, 0x29eeeec7u, 0xd3b8b86bu, 0x3c141428u,
    0x79dedea7u, 0xe25e5ebcu, 0x1d0b0b16u, 0x76dbdbadu, 0x3be0e0dbu, 0x56323264u,
    0x4e3a3a74u, 0x1e0a0a14u, 0xdb494992u, 0x0a06060cu, 0x6c242448u, 0xe45c5cb8u,
    0x5dc2c29fu, 0x6ed3d3bdu, 0xefacac43u, 0xa66262c4u, 0xa8919139u, 0xa4959531u,
    0x37e4e4d3u, 0x8b7979f2u, 0x32e7e7d5u, 0x43c8c88bu, 0x5937376eu, 0xb76d6ddau,
    0x8c8d8d01u, 0x64d5d5b1u, 0xd24e4e9cu, 0xe0a9a949u, 0xb46c6cd8u, 0xfa5656acu,
    0x07f4f4f3u, 0x25eaeacfu, 0xaf6565cau, 0x8e7a7af4u, 0xe9aeae47u, 0x18080810u,
    0xd5baba6fu, 0x887878f0u, 0x6f25254au, 0x722e2e5cu, 0x241c1c38u, 0xf1a6a657u,
    0xc7b4b473u, 0x51c6c697u, 0x23e8e8cbu, 0x7cdddda1u, 0x9c7474e8u, 0x211f1f3eu,
    0xdd4b4b96u, 0xdcbdbd61u, 0x868b8b0du, 0x858a8a0fu, 0x907070e0u, 0x423e3e7cu,
    0xc4b5b571u, 0xaa6666ccu, 0xd8484890u, 0x05030306u, 0x01f6f6f7u, 0x120e0e1cu,
    0xa36161c2u, 0x5f35356au, 0xf95757aeu, 0xd0b9b969u, 0x91868617u, 0x58c1c199u,
    0x271d1d3au, 0xb99e9e27u, 0x38e1e1d9u, 0x13f8f8ebu, 0xb398982bu, 0x33111122u,
    0xbb6969d2u, 0x70d9d9a9u, 0x898e8e07u, 0xa7949433u, 0xb69b9b2du, 0x221e1e3cu,
    0x92878715u, 0x20e9e9c9u, 0x49cece87u, 0xff5555aau, 0x78282850u, 0x7adfdfa5u,
    0x8f8c8c03u, 0xf8a1a159u, 0x80898909u, 0x170d0d1au, 0xdabfbf65u, 0x31e6e6d7u,
    0xc6424284u, 0xb86868d0u, 0xc3414182u, 0xb0999929u, 0x772d2d5au, 0x110f0f1eu,
    0xcbb0b07bu, 0xfc5454a8u, 0xd6bbbb6du, 0x3a16162cu,
};

GP_KFN uint32_t gp_rotl8(uint32_t v, unsigned n)
{
#if defined(__CUDA_ARCH__)
    return __funnelshift_l(v, v, n);
#else
    return (v << n) | (v >> ((32 - n) & 31));
#endif
}

/* PTX prmt / __byte_perm: byte i of the result is byte (sel >> 4i) & 7 of y:x (x = bytes 0-3). */
GP_KFN uint32_t gp_prmt(uint32_t x, uint32_t y, uint32_t sel)
{
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, sel);
#else
    const uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;

    for (int i = 0; i < 4; i++)
        r |= (uint32_t)(v >> (8 * ((sel >> (4 * i)) & 7)) & 0xff) << (8 * i);
    return r;
#endif
}

/* The table word at row = byte k of s, column offset `off` (4l for T0, 128 + 4l for T2; < 256, so
 * byte 1 of it is zero and fills bytes 2-3 of the offset): tb[(byte k of s) << 8 | off]. */
#define GP_TT(tb, s, k, off) \
    (*(const uint32_t *)((tb) + gp_prmt((s), (off), 0x5504u | ((uint32_t)(k) << 4))))

/* One full round on one block s (4 words) to t, round key rk; narrow layout (rows 1 and 3 by one
 * rotation of T0 ^ T2). */
GP_KFN void gp_aes_tt_round(const uint8_t *tb, uint32_t o0, uint32_t o2, const uint32_t *rk,
                            const uint32_t s[4], uint32_t t[4])
{
    for (int c = 0; c < 4; c++)
        t[c] = GP_TT(tb, s[c], 0, o0) ^ GP_TT(tb, s[(c + 2) % 4], 2, o2) ^ rk[c]
               ^ gp_rotl8(GP_TT(tb, s[(c + 1) % 4], 1, o0) ^ GP_TT(tb, s[(c + 3) % 4], 3, o2), 8);
}

/* The same round in the wide layout: T1 and T3 from the second half, no rotation. */
GP_KFN void gp_aes_tt_round_wide(const uint8_t *tb, uint32_t o0, uint32_t o2, const uint32_t *rk,
                                 const uint32_t s[4], uint32_t t[4])
{
    const uint8_t *tb13 = tb + GP_AES_TT_BYTES;

    for (int c = 0; c < 4; c++)
        t[c] = GP_TT(tb, s[c], 0, o0) ^ GP_TT(tb13, s[(c + 1) % 4], 1, o0)
               ^ GP_TT(tb, s[(c + 2) % 4], 2, o2) ^ GP_TT(tb13, s[(c + 3) % 4], 3, o2) ^ rk[c];
}

/* The last round (no MixColumns) on one block s to w: S-box bytes from T2 byte 0, T0 bytes 1 and
 * 2, T2 byte 3. */
GP_KFN void gp_aes_tt_round_last(const uint8_t *tb, uint32_t o0, uint32_t o2, const uint32_t *rk,
                                 const uint32_t s[4], uint32_t w[4])
{
    for (int c = 0; c < 4; c++) {
        const uint32_t lo = gp_prmt(GP_TT(tb, s[c], 0, o2), GP_TT(tb, s[(c + 1) % 4], 1, o0), 0x3250u);
        const uint32_t hi = gp_prmt(GP_TT(tb, s[(c + 2) % 4], 2, o0), GP_TT(tb, s[(c + 3) % 4], 3, o2), 0x7210u);

        w[c] = gp_prmt(lo, hi, 0x7610u) ^ rk[c];
    }
}

/* Round key r as 4 words: on the GPU one 16-byte load instead of four (the shared-memory lookups
 * fill the load/store pipe; kernels/batch_abi.h keeps a schedule's round keys 16-byte aligned). */
GP_KFN void gp_aes_tt_rk(const uint32_t *ek, uint32_t r, uint32_t rk[4])
{
#if defined(__CUDA_ARCH__)
    const uint4 v = *(const uint4 *)(ek + 4 * r);

    rk[0] = v.x; rk[1] = v.y; rk[2] = v.z; rk[3] = v.w;
#else
    for (int c = 0; c < 4; c++)
        rk[c] = ek[4 * r + c];
#endif
}

/*
 * Counter-mode caching (Bernstein and Schwabe, "New AES software speed records", INDOCRYPT 2008,
 * section 3, there across calls; here across a lane's four blocks). A body lane's four counter
 * blocks (SP 800-38A §6.5, SP 800-38D §6.5) are one counter plus 0..3, so as long as no carry
 * leaves the low 16 bits inside the chunk they agree on bytes 0-13, and only bytes 14 and 15 (rows
 * 2 and 3 of column 3) differ. After round 1 only columns 0 and 1 depend on the block (byte 15
 * reaches column 0 by T3, byte 14 column 1 by T2); in round 2 each output column takes one byte
 * from each input column, so two of its four lookups depend on the block and two are shared. The
 * two rounds take 22 + 40 lookups for the four blocks instead of 128: about a tenth fewer
 * lookups a lane (the lookups fill the load/store pipe). The counter is
 * public, so the per-lane choice leaks nothing; a lane whose chunk carries past byte 14 (one in
 * 16384 chunks, or a 32-bit GCM counter wrapping) takes the plain rounds.
 */
GP_KFN int gp_aes_ctr_shared(const uint32_t w[16])
{
    uint32_t d = 0;

    for (int b = 1; b < 4; b++)   /* every block against block 0: right for any input */
        d |= (w[4 * b] ^ w[0]) | (w[4 * b + 1] ^ w[1]) | (w[4 * b + 2] ^ w[2]) | ((w[4 * b + 3] ^ w[3]) & 0xffffu);
    return d == 0;
}

/* T1 and T3 entries (row = byte k of s) in either layout: the wide one's second half, or T0 and T2
 * rotated by 8 (gp_aes_tt_round). */
GP_KFN uint32_t gp_aes_tt_t13(const uint8_t *tb, uint32_t wide, uint32_t s, uint32_t k, uint32_t off)
{
    return wide ? GP_TT(tb + GP_AES_TT_BYTES, s, k, off) : gp_rotl8(GP_TT(tb, s, k, off), 8);
}

/* Rounds 1 and 2 of four counter blocks that agree on bytes 0-13 (gp_aes_ctr_shared), in place on
 * w (after round key 0). Column c of a round is T0[s_c.0] ^ T1[s_c+1.1] ^ T2[s_c+2.2] ^ T3[s_c+3.3]
 * ^ rk_c (gp_aes_tt_round_wide). */
GP_KFN void gp_aes_tt_ctr_rounds12(const uint8_t *tb, uint32_t wide, uint32_t o0, uint32_t o2, const uint32_t *ek,
                                   uint32_t w[16])
{
    uint32_t rk[4], a0, a1, a2, a3;

    /* Round 1: columns 2 and 3 are shared; 0 and 1 lack only their byte-15 and byte-14 terms. */
    gp_aes_tt_rk(ek, 1, rk);
    a0 = GP_TT(tb, w[0], 0, o0) ^ gp_aes_tt_t13(tb, wide, w[1], 1, o0) ^ GP_TT(tb, w[2], 2, o2) ^ rk[0];
    a1 = GP_TT(tb, w[1], 0, o0) ^ gp_aes_tt_t13(tb, wide, w[2], 1, o0) ^ gp_aes_tt_t13(tb, wide, w[0], 3, o2) ^ rk[1];
    a2 = GP_TT(tb, w[2], 0, o0) ^ gp_aes_tt_t13(tb, wide, w[3], 1, o0) ^ GP_TT(tb, w[0], 2, o2)
         ^ gp_aes_tt_t13(tb, wide, w[1], 3, o2) ^ rk[2];
    a3 = GP_TT(tb, w[3], 0, o0) ^ gp_aes_tt_t13(tb, wide, w[0], 1, o0) ^ GP_TT(tb, w[1], 2, o2)
         ^ gp_aes_tt_t13(tb, wide, w[2], 3, o2) ^ rk[3];
    for (int b = 0; b < 4; b++) {
        const uint32_t s3 = w[4 * b + 3];

        w[4 * b] = a0 ^ gp_aes_tt_t13(tb, wide, s3, 3, o2);
        w[4 * b + 1] = a1 ^ GP_TT(tb, s3, 2, o2);
        w[4 * b + 2] = a2;
        w[4 * b + 3] = a3;
    }
    /* Round 2: each column's terms from input columns 2 and 3 are shared. */
    gp_aes_tt_rk(ek, 2, rk);
    a0 = GP_TT(tb, w[2], 2, o2) ^ gp_aes_tt_t13(tb, wide, w[3], 3, o2) ^ rk[0];
    a1 = gp_aes_tt_t13(tb, wide, w[2], 1, o0) ^ GP_TT(tb, w[3], 2, o2) ^ rk[1];
    a2 = GP_TT(tb, w[2], 0, o0) ^ gp_aes_tt_t13(tb, wide, w[3], 1, o0) ^ rk[2];
    a3 = GP_TT(tb, w[3], 0, o0) ^ gp_aes_tt_t13(tb, wide, w[2], 3, o2) ^ rk[3];
    for (int b = 0; b < 4; b++) {
        const uint32_t u0 = w[4 * b], u1 = w[4 * b + 1];

        w[4 * b] = a0 ^ GP_TT(tb, u0, 0, o0) ^ gp_aes_tt_t13(tb, wide, u1, 1, o0);
        w[4 * b + 1] = a1 ^ GP_TT(tb, u1, 0, o0) ^ gp_aes_tt_t13(tb, wide, u0, 3, o2);
        w[4 * b + 2] = a2 ^ GP_TT(tb, u0, 2, o2) ^ gp_aes_tt_t13(tb, wide, u1, 3, o2);
        w[4 * b + 3] = a3 ^ gp_aes_tt_t13(tb, wide, u0, 1, o0) ^ GP_TT(tb, u1, 2, o2);
    }
}

/*
 * 4 blocks in place (w[4b..4b+3] = block b, little-endian words); ek: little-endian round keys;
 * tb: the table (bytes), `wide` its layout; lane: whose copy (0..31); ctr: the blocks are counter
 * blocks one apart, in order (rounds 1 and 2 then share lookups, gp_aes_ctr_shared, where they
 * may). The four blocks go through
 * each round together, so their independent lookups overlap. The round loop stays rolled, one
 * round a pass: unrolled, 14 rounds of 64 lookups are more straight code than the instruction
 * cache holds, and warps stall on instruction fetch. One round a pass costs 16 register moves but
 * keeps the smallest code beside GCM's GHASH, which shares that cache: AES-GCM needs the room more
 * than AES-CTR gains from two rounds a pass. Each round's key is loaded in the round that uses it,
 * not a round ahead: the loads hit L1, and other warps cover their latency.
 */
GP_KFN void gp_aes_tt_encrypt4(const uint8_t *tb, uint32_t wide, uint32_t lane, const uint32_t *ek, uint32_t nr,
                               uint32_t ctr, uint32_t w[16])
{
    const uint32_t o0 = 4 * lane, o2 = GP_AES_TT_T2 + 4 * lane;
    const int cached = ctr && gp_aes_ctr_shared(w);
    uint32_t t[16], rk[4], r = 1;

    gp_aes_tt_rk(ek, 0, rk);
    for (int i = 0; i < 16; i++)
        w[i] ^= rk[i % 4];
    if (cached) {
        gp_aes_tt_ctr_rounds12(tb, wide, o0, o2, ek, w);
        r = 3;
    }
    GP_NO_UNROLL
    for (; r < nr; r++) {
        gp_aes_tt_rk(ek, r, rk);
        for (int b = 0; b < 4; b++) {
            if (wide)   /* a constant on the GPU (GP_AES_TT_DEVICE_WIDE): one loop body */
                gp_aes_tt_round_wide(tb, o0, o2, rk, w + 4 * b, t + 4 * b);
            else
                gp_aes_tt_round(tb, o0, o2, rk, w + 4 * b, t + 4 * b);
        }
        for (int i = 0; i < 16; i++)
            w[i] = t[i];
    }
    for (int i = 0; i < 16; i++)
        t[i] = w[i];
    gp_aes_tt_rk(ek, nr, rk);
    for (int b = 0; b < 4; b++)
        gp_aes_tt_round_last(tb, o0, o2, rk, t + 4 * b, w + 4 * b);
}

/* Lane `lane`'s words of a row, from the row's T0 entry (the fill's and the host tests' layout):
 * T0 and T2 in the first half, and with `wide` T1 and T3 in the second. */
GP_KFN void gp_aes_tt_row(uint32_t *row, uint32_t te0, uint32_t lane, uint32_t wide)
{
    row[lane] = te0;
    row[GP_AES_TT_T2 / 4 + lane] = gp_rotl8(te0, 16);
    if (wide) {
        row[GP_AES_TT_BYTES / 4 + lane] = gp_rotl8(te0, 8);
        row[(GP_AES_TT_BYTES + GP_AES_TT_T2) / 4 + lane] = gp_rotl8(te0, 24);
    }
}

#if defined(__CUDACC__)
/*
 * The layout a GPU's code reads, fixed when it is compiled (kernels/launch.h reads it back from the
 * kernel's launch bounds), not switched at launch: a switch needs both round loops in the code,
 * either inline, where the larger lane code crowds GCM's GHASH out of the instruction cache, or
 * the second out of line, where every cipher pays the call's register spills. Wide
 * except on SMs none of whose GPUs holds 128 KiB in a block (sm_86, sm_89, sm_120 and its
 * consumer kin), with gpu_min_blocks 1 (one block of 256 threads per SM is too few warps) and
 * above 4 (a block holds at most 1024 threads).
 * GP_AES_TT_NARROW_ONLY forces the narrow layout (bench/kernel_variant.sh, to compare the two on
 * one GPU).
 */
#if defined(__CUDA_ARCH__) && !defined(GP_AES_TT_NARROW_ONLY) && GP_KERNEL_MIN_BLOCKS >= 2 \
    && GP_KERNEL_MIN_BLOCKS <= 4 && __CUDA_ARCH__ != 860 && __CUDA_ARCH__ != 890 && __CUDA_ARCH__ < 1200
# define GP_AES_TT_DEVICE_WIDE 1u
#else
# define GP_AES_TT_DEVICE_WIDE 0u
#endif

/* The block's bank-private table, in dynamic shared memory (GP_AES_TT_WIDE_BYTES or
 * GP_AES_TT_BYTES at launch), filled by gp_aes_tt_fill at kernel start. */
extern __shared__ uint32_t gp_aes_tt_smem[];

/*
 * Every thread of the block calls this, then __syncthreads(). Warp v fills rows v, v + nwarps, ...:
 * its lanes fetch 32 of those rows' T0 entries in one coalesced load (public indices), and a
 * shuffle hands each row's entry to every lane, which writes its words (32 consecutive banks per
 * store). Read one row at a time from constant memory, the fill was a chain of dependent loads on
 * the path of every lone launch with AES work.
 */
static __device__ void gp_aes_tt_fill(void)
{
    const uint32_t lane = threadIdx.x & 31, nwarps = blockDim.x / 32;

    for (uint32_t base = threadIdx.x / 32; base < 256; base += 32 * nwarps) {
        const uint32_t mine = base + nwarps * lane;
        const uint32_t v = mine < 256 ? __ldg(&gp_aes_te0[mine]) : 0;

        for (uint32_t i = 0; i < 32 && base + nwarps * i < 256; i++)
            gp_aes_tt_row(gp_aes_tt_smem + (base + nwarps * i) * (GP_AES_TT_ROW_BYTES / 4),
                          __shfl_sync(0xffffffffu, v, (int)i), lane, GP_AES_TT_DEVICE_WIDE);
    }
}
#endif

/*
 * 4 AES blocks in place on little-endian words: the T-table rounds on the device, the bitsliced
 * circuit on the host.
 */
GP_KFN void gp_aes_encrypt4_words(const gp_aes_sched *s, uint32_t ctr, uint32_t w[16])
{
#if defined(__CUDA_ARCH__)
    gp_aes_tt_encrypt4((const uint8_t *)gp_aes_tt_smem, GP_AES_TT_DEVICE_WIDE, threadIdx.x & 31, s->ek, s->nr, ctr, w);
#else
    uint8_t b[64];

    (void)ctr;   /* the bitsliced circuit gains nothing from it */

    for (int i = 0; i < 16; i++)
        gp_store_le32(b + 4 * i, w[i]);
    gp_aes_encrypt4(s, b, b);
    for (int i = 0; i < 16; i++)
        w[i] = gp_load_le32(b + 4 * i);
    gp_state_wipe(b, sizeof(b));
#endif
}

#if defined(__CUDA_ARCH__)
/*
 * One block with every round key loaded first (a spread unit's thread, kernels/units.h). Alone on
 * its SM a thread waits out each round's key load, where other warps would cover it, so the keys
 * are issued together before the first round and the rounds unrolled (registers are what the
 * latency kernels have).
 */
static __device__ __forceinline__ void gp_aes_tt_encrypt1_keys(const uint8_t *tb, uint32_t lane, const uint32_t *ek,
                                                               uint32_t nr, uint32_t w[4])
{
    const uint32_t o0 = 4 * lane, o2 = GP_AES_TT_T2 + 4 * lane;
    uint32_t rk[GP_AES_MAX_ROUNDS + 1][4], t[4];

#pragma unroll
    for (int r = 0; r <= GP_AES_MAX_ROUNDS; r++)
        gp_aes_tt_rk(ek, (uint32_t)r, rk[r]);
    for (int i = 0; i < 4; i++)
        w[i] ^= rk[0][i];
#pragma unroll
    for (int r = 1; r < GP_AES_MAX_ROUNDS; r++) {
        if ((uint32_t)r < nr) {   /* uniform: nr is 10, 12 or 14 */
            if (GP_AES_TT_DEVICE_WIDE)
                gp_aes_tt_round_wide(tb, o0, o2, rk[r], w, t);
            else
                gp_aes_tt_round(tb, o0, o2, rk[r], w, t);
            for (int i = 0; i < 4; i++)
                w[i] = t[i];
        }
    }
    for (int i = 0; i < 4; i++) {   /* round key nr, by constant indices */
        t[i] = w[i];
        rk[0][i] = nr == 10 ? rk[10][i] : nr == 12 ? rk[12][i] : rk[14][i];
    }
    gp_aes_tt_round_last(tb, o0, o2, rk[0], t, w);
}
#endif

/* One AES block in place on little-endian words (a spread unit's thread, kernels/units.h): the
 * T-table rounds on the device; on the host the bitsliced circuit's 4 blocks, 3 of them unused. */
GP_KFN void gp_aes_encrypt1_words(const gp_aes_sched *s, uint32_t w[4])
{
#if defined(__CUDA_ARCH__)
    gp_aes_tt_encrypt1_keys((const uint8_t *)gp_aes_tt_smem, threadIdx.x & 31, s->ek, s->nr, w);
#else
    uint32_t x[16] = { 0 };

    for (int i = 0; i < 4; i++)
        x[i] = w[i];
    gp_aes_encrypt4_words(s, 0, x);
    for (int i = 0; i < 4; i++)
        w[i] = x[i];
    gp_state_wipe(x, sizeof(x));
#endif
}

/* The same on bytes (in may equal out), for the lead and the tail. */
GP_KFN void gp_aes_encrypt4_bytes(const gp_aes_sched *s, const uint8_t in[64], uint8_t out[64])
{
#if defined(__CUDA_ARCH__)
    uint32_t w[16];

    for (int i = 0; i < 16; i++)
        w[i] = gp_load_le32(in + 4 * i);
    gp_aes_encrypt4_words(s, 0, w);
    for (int i = 0; i < 16; i++)
        gp_store_le32(out + 4 * i, w[i]);
#else
    gp_aes_encrypt4(s, in, out);
#endif
}

#endif
