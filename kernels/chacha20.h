/* SPDX-License-Identifier: Apache-2.0 */
/* The ChaCha20 block function (RFC 8439 §2.3): add-rotate-xor only, constant time by construction. */
#ifndef GP_CHACHA20_H
#define GP_CHACHA20_H

#include "kdefs.h"

GP_KFN uint32_t gp_rotl32(uint32_t v, unsigned n)
{
    return (v << n) | (v >> (32 - n));
}

/* RFC 8439 §2.1: the quarter round on four state words. */
#define GP_CHACHA_QR(a, b, c, d)                       \
    do {                                               \
        a += b; d ^= a; d = gp_rotl32(d, 16);          \
        c += d; b ^= c; b = gp_rotl32(b, 12);          \
        a += b; d ^= a; d = gp_rotl32(d, 8);           \
        c += d; b ^= c; b = gp_rotl32(b, 7);           \
    } while (0)

/*
 * One 64-byte keystream block as 16 little-endian words. ctr: words 12..15 of the state, the LE32
 * block counter followed by the 12-byte nonce (RFC 8439 §2.3; OpenSSL's 16-byte ChaCha20 IV has
 * the same layout).
 */
GP_KFN void gp_chacha20_block_words(const uint32_t key[8], const uint32_t ctr[4], uint32_t out[16])
{
    uint32_t x[16];

    /* "expand 32-byte k" (§2.3) */
    x[0] = 0x61707865u; x[1] = 0x3320646eu; x[2] = 0x79622d32u; x[3] = 0x6b206574u;
    for (int i = 0; i < 8; i++)
        x[4 + i] = key[i];
    for (int i = 0; i < 4; i++)
        x[12 + i] = ctr[i];
    /* 20 rounds = 10 double rounds: a column round then a diagonal round (§2.3). */
    for (int i = 0; i < 10; i++) {
        GP_CHACHA_QR(x[0], x[4], x[8], x[12]);
        GP_CHACHA_QR(x[1], x[5], x[9], x[13]);
        GP_CHACHA_QR(x[2], x[6], x[10], x[14]);
        GP_CHACHA_QR(x[3], x[7], x[11], x[15]);
        GP_CHACHA_QR(x[0], x[5], x[10], x[15]);
        GP_CHACHA_QR(x[1], x[6], x[11], x[12]);
        GP_CHACHA_QR(x[2], x[7], x[8], x[13]);
        GP_CHACHA_QR(x[3], x[4], x[9], x[14]);
    }
    /* Feed-forward of the input state. */
    out[0] = x[0] + 0x61707865u; out[1] = x[1] + 0x3320646eu;
    out[2] = x[2] + 0x79622d32u; out[3] = x[3] + 0x6b206574u;
    for (int i = 0; i < 8; i++)
        out[4 + i] = x[4 + i] + key[i];
    for (int i = 0; i < 4; i++)
        out[12 + i] = x[12 + i] + ctr[i];
}

/* The same block as bytes; ctr16 as the bytes of state words 12..15. */
GP_KFN void gp_chacha20_block(const uint32_t key[8], const uint8_t ctr16[16], uint8_t out[64])
{
    uint32_t c[4], x[16];

    for (int i = 0; i < 4; i++)
        c[i] = gp_load_le32(ctr16 + 4 * i);
    gp_chacha20_block_words(key, c, x);
    for (int i = 0; i < 16; i++)
        gp_store_le32(out + 4 * i, x[i]);
    gp_state_wipe(x, sizeof(x));
}

#endif
