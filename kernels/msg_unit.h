/* SPDX-License-Identifier: Apache-2.0 */
/* One unit of a batch: key setup, message start and streaming updates for every algorithm. */
#ifndef GP_MSG_UNIT_H
#define GP_MSG_UNIT_H

#include "batch_abi.h"
#include "aes.h"
#include "aes_tt.h"
#include "ghash.h"
#include "chacha20.h"
#include "poly1305.h"
#include "mac_pows.h"

/*
 * Branches in this file depend only on public values (algorithm, lengths, op); the secret-dependent
 * work is in the constant-time primitives. Buffers are accessed a byte at a time, so `in`/`out` may
 * be unaligned and may be the same buffer.
 */

GP_KFN int gp_alg_is_aes(uint32_t alg)
{
    return alg == GP_ALG_AES_CTR || alg == GP_ALG_AES_GCM;
}

GP_KFN int gp_alg_is_aead(uint32_t alg)
{
    return alg == GP_ALG_AES_GCM || alg == GP_ALG_CHACHA20_POLY1305;
}

/* One AES block E_K(in) through the 4-block code (only block 0 is used). */
GP_KFN void gp_aes_encrypt1(const gp_aes_sched *s, const uint8_t in[16], uint8_t out[16])
{
    uint8_t buf[64], res[64];

    for (int i = 0; i < 64; i++)
        buf[i] = i < 16 ? in[i] : 0;
    gp_aes_encrypt4_bytes(s, buf, res);
    gp_bytes_copy(out, res, 16);
    gp_state_wipe(buf, sizeof(buf));
    gp_state_wipe(res, sizeof(res));
}

GP_KFN void gp_key_schedule(gp_key_sched *k, uint32_t alg, const uint8_t *key, size_t keylen)
{
    gp_state_wipe(k, sizeof(*k));
    k->alg = alg;
    k->keylen = (uint32_t)keylen;
    if (gp_alg_is_aes(alg)) {
        gp_aes_schedule(&k->aes, key, (uint32_t)keylen);
        if (alg == GP_ALG_AES_GCM) {
            /* Hash subkey H = CIPH_K(0^128) (SP 800-38D §7.1 step 1). */
            uint8_t zero[16], hb[16];
            gp_lane_mac h;

            for (int i = 0; i < 16; i++)
                zero[i] = 0;
            gp_aes_encrypt1(&k->aes, zero, hb);
            k->gcm_h[0] = gp_load_be64(hb);
            k->gcm_h[1] = gp_load_be64(hb + 8);
            gp_lane_mac_set_x(&h, k->gcm_h);
            gp_mac_pows_make(&k->mac_pows, alg, &h);   /* for the parallel units */
            gp_tag_pows_make(k->gcm_tag_pows, &k->mac_pows, &h);
            gp_stride_pows_make(k->gcm_stride_pows, &k->mac_pows);
            gp_state_wipe(&h, sizeof(h));
            gp_state_wipe(hb, sizeof(hb));
        }
    } else {
        for (int i = 0; i < 8; i++)
            k->chacha_key[i] = gp_load_le32(key + 4 * i);
    }
}

/* Counter steps, matching OpenSSL byte for byte. */
GP_KFN void gp_ctr_inc128(uint8_t c[16])
{
    /* SP 800-38A §B.1 standard incrementing over the whole block (OpenSSL ctr128): big-endian. */
    uint32_t carry = 1;

    for (int i = 15; i >= 0; i--) {
        carry += c[i];
        c[i] = (uint8_t)carry;
        carry >>= 8;
    }
}

GP_KFN void gp_ctr_inc32(uint8_t c[16])
{
    /* SP 800-38D §6.2 inc_32: low 32 bits only, big-endian, wrapping. */
    gp_store_be32(c + 12, gp_load_be32(c + 12) + 1);
}

GP_KFN void gp_ctr_chacha(uint8_t c[16])
{
    /* LE32 block counter; on wrap OpenSSL's chacha20 cipher carries into the next word. */
    uint32_t lo = gp_load_le32(c) + 1;

    gp_store_le32(c, lo);
    gp_store_le32(c + 4, gp_load_le32(c + 4) + (lo == 0));
}

/*
 * Keystream for `nblocks` cipher blocks starting at st->ctr, advancing the counter by as many:
 * AES: 1..4 blocks of 16 bytes in one gp_aes_encrypt4 call; ChaCha20: nblocks must be 1 (64 bytes).
 */
GP_KFN void gp_keystream(gp_msg_state *st, const gp_key_sched *k, uint8_t ks[64], uint32_t nblocks)
{
    if (gp_alg_is_aes(st->alg)) {
        uint8_t ctrs[64];

        for (uint32_t b = 0; b < 4; b++) {
            gp_bytes_copy(ctrs + 16 * b, st->ctr, 16);
            if (b < nblocks) {
                if (st->alg == GP_ALG_AES_CTR)
                    gp_ctr_inc128(st->ctr);
                else
                    gp_ctr_inc32(st->ctr);
            }
        }
        gp_aes_encrypt4_bytes(&k->aes, ctrs, ks);
    } else {
        gp_chacha20_block(k->chacha_key, st->ctr, ks);
        gp_ctr_chacha(st->ctr);
    }
}

/* Whole 16-byte blocks into the MAC: GHASH (GCM) or Poly1305 (ChaCha20-Poly1305). */
GP_KFN void gp_mac_blocks(gp_msg_state *st, const gp_key_sched *k, const uint8_t *p, size_t nblocks)
{
    if (st->alg == GP_ALG_AES_GCM)
        gp_ghash_blocks(st->ghash_x, k->gcm_h, p, nblocks);
    else
        gp_poly1305_blocks(&st->poly, p, nblocks);
}

/* Any number of bytes into the MAC; a trailing partial block waits in mac_pend. */
GP_KFN void gp_mac_absorb(gp_msg_state *st, const gp_key_sched *k, const uint8_t *p, size_t n)
{
    size_t nb;

    if (st->mac_pend_len > 0) {
        while (n > 0 && st->mac_pend_len < 16) {
            st->mac_pend[st->mac_pend_len++] = *p++;
            n--;
        }
        if (st->mac_pend_len < 16)
            return;
        gp_mac_blocks(st, k, st->mac_pend, 1);
        st->mac_pend_len = 0;
    }
    nb = n / 16;
    if (nb > 0) {
        gp_mac_blocks(st, k, p, nb);
        p += 16 * nb;
        n -= 16 * nb;
    }
    while (n > 0) {
        st->mac_pend[st->mac_pend_len++] = *p++;
        n--;
    }
}

/* Zero-pad a pending partial MAC block to 16 bytes and absorb it (GCM §7.1 steps 4-5 pad AAD and
 * ciphertext to block boundaries; RFC 8439 §2.8 pads them with zeros the same way). */
GP_KFN void gp_mac_pad(gp_msg_state *st, const gp_key_sched *k)
{
    if (st->mac_pend_len == 0)
        return;
    for (uint32_t i = st->mac_pend_len; i < 16; i++)
        st->mac_pend[i] = 0;
    gp_mac_blocks(st, k, st->mac_pend, 1);
    st->mac_pend_len = 0;
}

/*
 * A message's starting state, except that for GCM `gcm_ekj0` holds J0 itself: the caller encrypts
 * it in place before the state is used (gp_msg_begin with the kernel AES; the engine with the
 * default provider's AES-NI, batching/kstate.c gp_kstate_msg_start: on the host the constant-time bitsliced AES
 * takes ~10k instructions a block, on the caller's thread for every GCM record).
 */
GP_KFN void gp_msg_begin_j0(gp_msg_state *st, const gp_key_sched *k, const uint8_t *iv, size_t ivlen)
{
    gp_state_wipe(st, sizeof(*st));
    st->alg = k->alg;
    switch (k->alg) {
    case GP_ALG_AES_CTR:
    case GP_ALG_CHACHA20:
        gp_bytes_copy(st->ctr, iv, 16);
        break;
    case GP_ALG_AES_GCM: {
        uint8_t j0[16];

        if (ivlen == 12) {
            /* SP 800-38D §7.1 step 2: J0 = IV || 0^31 || 1. */
            gp_bytes_copy(j0, iv, 12);
            j0[12] = 0; j0[13] = 0; j0[14] = 0; j0[15] = 1;
        } else {
            /* J0 = GHASH_H(IV || 0^(s+64) || [len(IV)]_64). */
            uint64_t x[2] = {0, 0};
            uint8_t blk[16];
            size_t full = ivlen / 16, rest = ivlen % 16;

            gp_ghash_blocks(x, k->gcm_h, iv, full);
            if (rest > 0) {
                for (size_t i = 0; i < 16; i++)
                    blk[i] = i < rest ? iv[16 * full + i] : 0;
                gp_ghash_blocks(x, k->gcm_h, blk, 1);
            }
            gp_store_be64(blk, 0);
            gp_store_be64(blk + 8, (uint64_t)ivlen * 8);
            gp_ghash_blocks(x, k->gcm_h, blk, 1);
            gp_store_be64(j0, x[0]);
            gp_store_be64(j0 + 8, x[1]);
        }
        /* E_K(J0) masks the tag (step 6), made by the caller; data starts at inc32(J0) (step 3). */
        gp_bytes_copy(st->gcm_ekj0, j0, 16);
        gp_bytes_copy(st->ctr, j0, 16);
        gp_ctr_inc32(st->ctr);
        gp_state_wipe(j0, sizeof(j0));
        break;
    }
    case GP_ALG_CHACHA20_POLY1305: {
        /* RFC 8439 §2.6: the one-time key is block(counter 0, nonce)[0..31]; data starts at 1. */
        uint8_t blk[64];

        st->ctr[0] = 0; st->ctr[1] = 0; st->ctr[2] = 0; st->ctr[3] = 0;
        gp_bytes_copy(st->ctr + 4, iv, 12);
        gp_chacha20_block(k->chacha_key, st->ctr, blk);
        gp_poly1305_init(&st->poly, blk);
        st->ctr[0] = 1;
        gp_state_wipe(blk, sizeof(blk));
        break;
    }
    default:
        break;
    }
}

/* A message's starting state, E_K(J0) included (SP 800-38D §7.1). */
GP_KFN void gp_msg_begin(gp_msg_state *st, const gp_key_sched *k, const uint8_t *iv, size_t ivlen)
{
    gp_msg_begin_j0(st, k, iv, ivlen);
    if (k->alg == GP_ALG_AES_GCM)
        gp_aes_encrypt1(&k->aes, st->gcm_ekj0, st->gcm_ekj0);
}

/* out = in ^ keystream over len bytes, continuing a partial block where the last call stopped. */
GP_KFN void gp_msg_xor(gp_msg_state *st, const gp_key_sched *k, const uint8_t *in, uint8_t *out,
                       size_t len)
{
    const uint32_t bs = gp_alg_is_aes(st->alg) ? 16 : 64;
    const uint32_t per_call = gp_alg_is_aes(st->alg) ? 4 : 1;   /* cipher blocks per 64 bytes */
    uint8_t ks[64];
    size_t i = 0;

    /* 1. The rest of a keystream block an earlier call left unfinished. */
    while (st->ks_used != 0 && i < len) {
        out[i] = in[i] ^ st->ks[st->ks_used];
        i++;
        if (++st->ks_used == bs)
            st->ks_used = 0;
    }
    /* 2. Bulk: 64 bytes at a time (4 AES blocks per bitsliced call, or one ChaCha20 block). */
    while (len - i >= 64) {
        gp_keystream(st, k, ks, per_call);
        for (int j = 0; j < 64; j++)
            out[i + j] = in[i + j] ^ ks[j];
        i += 64;
    }
    /* 3. Tail: generate what is needed; a partly used last block is kept for the next call. */
    if (i < len) {
        size_t rem = len - i;
        uint32_t nb = gp_alg_is_aes(st->alg) ? (uint32_t)((rem + 15) / 16) : 1;

        gp_keystream(st, k, ks, nb);
        for (size_t j = 0; j < rem; j++)
            out[i + j] = in[i + j] ^ ks[j];
        if (rem % bs != 0) {
            gp_bytes_copy(st->ks, ks + (rem / bs) * bs, bs);
            st->ks_used = (uint32_t)(rem % bs);
        }
    }
    gp_state_wipe(ks, sizeof(ks));
}

GP_KFN void gp_msg_run(gp_msg_state *st, const gp_key_sched *k, uint32_t op, const uint8_t *in,
                       uint8_t *out, size_t len)
{
    const int aead = gp_alg_is_aead(st->alg);

    switch (op) {
    case GP_OP_AAD:
        gp_mac_absorb(st, k, in, len);
        st->aad_len += len;
        break;
    case GP_OP_ENCRYPT:
    case GP_OP_DECRYPT:
        if (aead && !st->in_text)
            gp_mac_pad(st, k);          /* AAD ends: pad it to a block boundary */
        st->in_text = 1;
        /* The MAC is over the ciphertext: before decrypting (in may be out), after encrypting. */
        if (aead && op == GP_OP_DECRYPT)
            gp_mac_absorb(st, k, in, len);
        gp_msg_xor(st, k, in, out, len);
        if (aead && op == GP_OP_ENCRYPT)
            gp_mac_absorb(st, k, out, len);
        st->text_len += len;
        break;
    case GP_OP_TAG: {
        uint8_t lens[16];

        gp_mac_pad(st, k);
        if (st->alg == GP_ALG_AES_GCM) {
            /* SP 800-38D §7.1 steps 5-6: S = GHASH(... || [len(A)]64 || [len(C)]64),
             * T = MSB_t(GCTR(J0, S)) = S ^ E_K(J0) for a full 16-byte tag. */
            gp_store_be64(lens, st->aad_len * 8);
            gp_store_be64(lens + 8, st->text_len * 8);
            gp_ghash_blocks(st->ghash_x, k->gcm_h, lens, 1);
            gp_store_be64(out, st->ghash_x[0]);
            gp_store_be64(out + 8, st->ghash_x[1]);
            for (int i = 0; i < 16; i++)
                out[i] ^= st->gcm_ekj0[i];
        } else if (st->alg == GP_ALG_CHACHA20_POLY1305) {
            /* RFC 8439 §2.8: ... || le64(aad length) || le64(ciphertext length), then the tag. */
            gp_store_le64(lens, st->aad_len);
            gp_store_le64(lens + 8, st->text_len);
            gp_poly1305_blocks(&st->poly, lens, 1);
            gp_poly1305_finish(&st->poly, lens, 0, out);
        }
        break;
    }
    default:
        break;
    }
}

#endif
