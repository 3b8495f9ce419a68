/* SPDX-License-Identifier: Apache-2.0 */
/* A GCM lane's Horner sum over its 4 MAC blocks as one GF(2) matrix product on the tensor cores. */
#ifndef GP_GHASH_MMA_H
#define GP_GHASH_MMA_H

#include "mac_pows.h"

/*
 * A body unit's GCM lane needs Z = B_0 H^3 + B_1 H^2 + B_2 H + B_3 over its chunk's 4 blocks
 * (kernels/units.h, "Lanes"): three GHASH products, most of a GCM unit's integer work. Z is linear
 * over GF(2) in the chunk's 512 bits, so Z = M x for one 128 x 512 bit matrix M per key (the rows
 * are Z's bits, the columns the images of single input bits). A GF(2) dot product is the parity of
 * popc(row AND column), which the tensor cores' single-bit MMA computes
 * (mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc, sm_80+: a 16 x 256 by 256 x 8
 * product of bits with 32-bit popcount sums). The warp's 32 lanes are the 32 rows of two m-tiles
 * (A: the chunks, data), M^T is the B operand (k: input bits, n: Z's bits), so one unit takes
 * 2 m-tiles x 16 n-tiles x 2 k-tiles = 64 MMAs and the matrix is read once per unit, 8 KiB, with
 * addresses that depend only on the lane: nothing indexed by secrets, and no branch on data.
 *
 * Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k256"; lane = 4g + t):
 *   A (16 x 256, row): a0 row g, a1 row g+8, k = 32t + bit; a2, a3 the same rows, k = 128 + 32t + bit
 *   B (256 x 8, col):  b0 column g, k = 32t + bit; b1 column g, k = 128 + 32t + bit
 *   D (16 x 8):        d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1)
 * A bit of A and a bit of B meet when they sit at the same bit of the same word position, so the
 * raw little-endian words of the data can go in as loaded and M absorbs the byte order.
 * Our choices:
 *   - k-tile kt, k = 128i + 32t + bit  <->  block 2kt + i of a chunk, its word t, that bit;
 *   - rows: m-tile mt's row g is the chunk of lane 4g + 2mt, row g + 8 that of lane 4g + 2mt + 1,
 *     so a quad (lanes 4g..4g+3) feeds and receives only its own four chunks: the words move by
 *     4 x 4 transposes inside quads (gp_quad_transpose), never across the warp;
 *   - columns: n-tile nt's column n is bit 2nt + (n & 1) of Z's gp_lane_mac word n >> 1, so the
 *     lane of quad position t collects word t of its quad's four Z in the D bits it holds.
 * The table holds M^T as B fragments: frag[nt][lane][j], j = 2kt + i, is b_i of k-tile kt of
 * n-tile nt for that lane, i.e. bit `bit` of frag[nt][4n + t][j] is Z's bit (word n >> 1, bit
 * 2nt + (n & 1)) of the product of (the block j whose only set bit is bit `bit` of word t) by
 * H^(3 - j). One 16-byte load per lane and n-tile.
 */
typedef struct gp_ghash_mma {
    uint32_t frag[16][32][4];
} gp_ghash_mma;

/* Bodies of at least 16 KiB (a TLS record's) carry the key's matrix into a batch (8 KiB, one copy
 * per key and batch): shorter ones keep the integer GHASH rather than add half their size again to
 * the copy in. */
#define GP_GHASH_MMA_MIN_UNITS (16384u / GP_UNIT_BYTES)

/*
 * Whether a request's units take the tensor-core path: built with it (build option ghash_mma,
 * -DGP_GHASH_MMA; bench/kernel_variant.sh takes it in GPU_DEFS), GCM, a unit a warp (unit_bytes
 * 2048), a body long enough, and a batch of at least `warps_at_once` units (what the GPU runs at
 * once): the MMA path trades a longer chain per lane for less work in all, so a batch too small
 * to fill the GPU (a lone message's latency is its longest chain) keeps the integer GHASH.
 */
GP_KFN int gp_ghash_mma_wanted(uint32_t alg, uint32_t nunits, uint64_t batch_units, uint64_t warps_at_once)
{
#if defined(GP_GHASH_MMA)
    return alg == GP_ALG_AES_GCM && GP_UNIT_LANES == 32 && nunits >= GP_GHASH_MMA_MIN_UNITS
           && batch_units >= warps_at_once;
#else
    (void)alg;
    (void)nunits;
    (void)batch_units;
    (void)warps_at_once;
    return 0;
#endif
}

/* a'[c] bit r = a[r] bit c: a 32 x 32 bit transpose by block swaps (Hacker's Delight §7-3). */
GP_KFN void gp_transpose32(uint32_t a[32])
{
    uint32_t m = 0x0000ffffu;

    for (uint32_t j = 16; j != 0; j >>= 1, m ^= m << j) {
        for (uint32_t k = 0; k < 32; k = (k + j + 1) & ~j) {
            const uint32_t t = ((a[k] >> j) ^ a[k + j]) & m;

            a[k] ^= t << j;
            a[k + j] ^= t;
        }
    }
}

/*
 * The matrix for hash key H (big-endian words [hi, lo]); made on the host, once per key. Block j's
 * columns are x^i H^(3-j), i = 0..127, each the previous times x (SP 800-38D §6.3: a right shift
 * by one bit and R folded in when x^127's coefficient falls off). The input bit that carries x^i
 * is bit 7 - i % 8 of byte i / 8 of the block: bit 8(k % 4) + 7 - i % 8 of little-endian word
 * k / 4, k = i / 8. The 32 columns of one input word, as rows, transpose into the table's words for
 * that word. No branch or index depends on H.
 */
GP_KFN void gp_ghash_mma_make(gp_ghash_mma *t, const uint64_t h[2])
{
    uint64_t p[2] = { 1ull << 63, 0 };   /* H^0: GHASH's 1 is the leftmost bit */
    uint32_t col[4][4][32];              /* [input word][Z word][input bit] */

    for (int j = 3; j >= 0; j--) {       /* p = H^(3-j) */
        uint64_t v[2] = { p[0], p[1] };

        for (uint32_t i = 0; i < 128; i++) {
            const uint32_t k = i / 8, w = k / 4, bit = 8 * (k % 4) + 7 - i % 8;
            const uint64_t fold = 0 - (v[1] & 1);   /* x^127's coefficient, as a mask */
            gp_lane_mac x;

            gp_lane_mac_set_x(&x, v);
            for (uint32_t zw = 0; zw < 4; zw++)
                col[w][zw][bit] = x.w[zw];
            v[1] = (v[1] >> 1) | (v[0] << 63);
            v[0] = (v[0] >> 1) ^ (fold & 0xe100000000000000ull);
        }
        for (uint32_t w = 0; w < 4; w++) {
            for (uint32_t zw = 0; zw < 4; zw++) {
                gp_transpose32(col[w][zw]);   /* [zb]: bit `bit` of Z bit zb's input word */
                for (uint32_t zb = 0; zb < 32; zb++)
                    t->frag[zb >> 1][4 * (2 * zw + (zb & 1)) + w][j] = col[w][zw][zb];
            }
        }
        gp_ghash_mul(p, h);
        gp_state_wipe(v, sizeof(v));
    }
    gp_state_wipe(p, sizeof(p));
    gp_state_wipe(col, sizeof(col));
}

/* Z of a chunk of 16 little-endian words by the matrix, one lane at a time: what the tensor-core
 * path computes, read from the table by the same layout (the host's check of the table). */
GP_KFN void gp_ghash_mma_apply(const gp_ghash_mma *t, const uint32_t c[16], gp_lane_mac *z)
{
    gp_lane_mac_zero(z);
    for (uint32_t zw = 0; zw < 4; zw++) {
        for (uint32_t zb = 0; zb < 32; zb++) {
            const uint32_t nt = zb >> 1, n = 2 * zw + (zb & 1);
            uint32_t par = 0;

            for (uint32_t j = 0; j < 4; j++)
                for (uint32_t w = 0; w < 4; w++)
                    par ^= t->frag[nt][4 * n + w][j] & c[4 * j + w];
            par ^= par >> 16;
            par ^= par >> 8;
            par ^= par >> 4;
            par ^= par >> 2;
            par ^= par >> 1;
            z->w[zw] |= (par & 1u) << zb;
        }
    }
}

#if defined(GP_GHASH_MMA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && GP_UNIT_LANES == 32
# define GP_GHASH_MMA_DEVICE 1

/* The n-tile loop fully unrolled: rolled, each iteration waits on its fragment load and then on two
 * chained MMAs; unrolled, the later tiles' loads issue while the earlier tiles' MMAs run, and a
 * partial unroll (by 2, 4 or 8) leaves part of that wait. GP_GHASH_MMA_UNROLL stays a knob for A/B
 * runs (bench/kernel_variant.sh, GPU_DEFS). */
# ifndef GP_GHASH_MMA_UNROLL
#  define GP_GHASH_MMA_UNROLL 16
# endif
# define GP_MMA_STR(x) #x
# define GP_MMA_PRAGMA(x) _Pragma(GP_MMA_STR(x))

/* v[j] becomes lane j's v[t] (t: this lane's place in its quad): butterflies over the two bits
 * of t, each swapping the two words whose index differs from t in that bit with the partner's. */
static __device__ __forceinline__ void gp_quad_transpose(uint32_t v[4], uint32_t t)
{
    const bool o1 = (t & 1u) != 0, o2 = (t & 2u) != 0;
    uint32_t s0 = o1 ? v[0] : v[1], s1 = o1 ? v[2] : v[3], r0, r1;

    r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
    r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
    v[0] = o1 ? r0 : v[0];
    v[1] = o1 ? v[1] : r0;
    v[2] = o1 ? r1 : v[2];
    v[3] = o1 ? v[3] : r1;
    s0 = o2 ? v[0] : v[2];
    s1 = o2 ? v[1] : v[3];
    r0 = __shfl_xor_sync(0xffffffffu, s0, 2);
    r1 = __shfl_xor_sync(0xffffffffu, s1, 2);
    v[0] = o2 ? r0 : v[0];
    v[1] = o2 ? r1 : v[1];
    v[2] = o2 ? v[2] : r0;
    v[3] = o2 ? v[3] : r1;
}

static __device__ __forceinline__ void gp_mma_b1(uint32_t d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/*
 * Z (kernels/units.h) of this lane's chunk c (16 little-endian words, the ciphertext; zeros for a
 * lane without a chunk) for every lane of the warp at once: all 32 lanes must call it together.
 */
static __device__ __forceinline__ void gp_ghash_mma_chunk(const gp_ghash_mma *mx, uint32_t lane,
                                                          const uint32_t c[16], gp_lane_mac *z)
{
    const uint32_t t = lane & 3u;
    const uint4 *fr = (const uint4 *)&mx->frag[0][lane][0];
    uint32_t a[16], pk[4] = { 0, 0, 0, 0 };

    /* a[4b + q]: word t of block b of quad lane q's chunk. */
#pragma unroll
    for (int b = 0; b < 4; b++) {
        uint32_t v[4] = { c[4 * b], c[4 * b + 1], c[4 * b + 2], c[4 * b + 3] };

        gp_quad_transpose(v, t);
        for (int q = 0; q < 4; q++)
            a[4 * b + q] = v[q];
    }
    GP_MMA_PRAGMA(unroll GP_GHASH_MMA_UNROLL)
    for (uint32_t nt = 0; nt < 16; nt++) {
        const uint4 bf = __ldg(fr + 32 * nt);   /* written before the launch, read-only in it */
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            uint32_t d[4] = { 0, 0, 0, 0 };

            gp_mma_b1(d, a[2 * mt], a[2 * mt + 1], a[4 + 2 * mt], a[4 + 2 * mt + 1], bf.x, bf.y);
            gp_mma_b1(d, a[8 + 2 * mt], a[8 + 2 * mt + 1], a[12 + 2 * mt], a[12 + 2 * mt + 1], bf.z, bf.w);
            /* The parities: Z bits 2nt and 2nt + 1 of word t of the chunks of lanes 2mt, 2mt + 1. */
            pk[2 * mt] |= ((d[0] & 1u) | (d[1] & 1u) << 1) << (2 * nt);
            pk[2 * mt + 1] |= ((d[2] & 1u) | (d[3] & 1u) << 1) << (2 * nt);
        }
    }
    gp_quad_transpose(pk, t);   /* pk[w]: word w of this lane's own Z */
    for (int w = 0; w < 4; w++)
        z->w[w] = pk[w];
    z->w[4] = 0;
}
#else
# define GP_GHASH_MMA_DEVICE 0
#endif

#endif
