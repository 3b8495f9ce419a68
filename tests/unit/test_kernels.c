/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the crypto kernels (host build): known answers plus differential runs vs OpenSSL/libsodium. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <openssl/evp.h>
#include <sodium.h>

#include "gptest.h"
#include <openssl/bn.h>

#include "kernels/units.h"

/* ---------- helpers ---------- */

static uint8_t *xmalloc(size_t n)
{
    uint8_t *p = malloc(n + 1);

    assert_non_null(p);
    return p;
}

static uint8_t *unhex_or_die(const char *hex, size_t *len)
{
    uint8_t *p = gptest_unhex(hex, len);

    assert_non_null(p);
    return p;
}

static void assert_hex_equal(const uint8_t *got, const char *want_hex)
{
    size_t n;
    uint8_t *want = unhex_or_die(want_hex, &n);

    assert_memory_equal(got, want, n);
    free(want);
}

/* ---------- AES ---------- */

/* Reference S-box from its definition (FIPS-197 §5.1.1): multiplicative inverse in GF(2^8) mod
 * x^8+x^4+x^3+x+1 (0 maps to 0), then the affine map b ^ rotl(b,1..4) ^ 0x63. */
static uint8_t gf256_mul(uint8_t a, uint8_t b)
{
    uint8_t r = 0;

    for (int i = 0; i < 8; i++) {
        if (b & 1)
            r ^= a;
        a = (uint8_t)((a << 1) ^ ((a & 0x80) ? 0x1b : 0));
        b >>= 1;
    }
    return r;
}

static uint8_t ref_sbox(uint8_t x)
{
    uint8_t inv = 0, s;

    for (int c = 1; c < 256 && x != 0; c++) {
        if (gf256_mul(x, (uint8_t)c) == 1) {
            inv = (uint8_t)c;
            break;
        }
    }
    s = inv;
    for (int i = 1; i <= 4; i++)
        s ^= (uint8_t)((inv << i) | (inv >> (8 - i)));
    return (uint8_t)(s ^ 0x63);
}

static void test_sbox_exhaustive(void **state)
{
    (void)state;
    /* 64 bit lanes per plane: four evaluations of the circuit cover all 256 inputs. */
    for (int base = 0; base < 256; base += 64) {
        uint64_t q[8] = {0};

        for (int lane = 0; lane < 64; lane++)
            for (int j = 0; j < 8; j++)
                q[j] |= (uint64_t)(((base + lane) >> j) & 1) << lane;
        gp_aes_sbox_planes(q);
        for (int lane = 0; lane < 64; lane++) {
            unsigned got = 0;

            for (int j = 0; j < 8; j++)
                got |= (unsigned)((q[j] >> lane) & 1) << j;
            if (got != ref_sbox((uint8_t)(base + lane)))
                fail_msg("S(%02x) = %02x, want %02x", base + lane, got, ref_sbox((uint8_t)(base + lane)));
        }
    }
    /* Spot values printed in FIPS-197 Fig. 7. */
    assert_int_equal(ref_sbox(0x00), 0x63);
    assert_int_equal(ref_sbox(0x53), 0xed);
    assert_int_equal(ref_sbox(0xff), 0x16);
}

static void test_aes_fips197(void **state)
{
    /* FIPS-197 Appendix C.1-C.3: plaintext 00112233..ff, key 000102.. of 16/24/32 bytes. */
    static const char *const want[3] = {
        "69c4e0d86a7b0430d8cdb78070b4c55a",
        "dda97ca4864cdfe06eaf70a0ec0d7191",
        "8ea2b7ca516745bfeafc49904b496089",
    };
    (void)state;
    for (int v = 0; v < 3; v++) {
        uint32_t keylen = 16 + 8 * (uint32_t)v;
        uint8_t key[32], in[64], out[64];
        gp_aes_sched s;

        for (uint32_t i = 0; i < keylen; i++)
            key[i] = (uint8_t)i;
        for (int b = 0; b < 4; b++)
            for (int i = 0; i < 16; i++)
                in[16 * b + i] = (uint8_t)(0x11 * i);
        gp_aes_schedule(&s, key, keylen);
        assert_int_equal(s.nr, 10 + 2 * v);
        gp_aes_encrypt4(&s, in, out);
        for (int b = 0; b < 4; b++)   /* the same block in all four lanes */
            assert_hex_equal(out + 16 * b, want[v]);
    }
}

/* ref = AES-ECB of the 64 bytes at in, by OpenSSL. */
static void ref_aes_ecb64(const uint8_t *key, size_t keylen, const uint8_t in[64], uint8_t ref[64])
{
    const EVP_CIPHER *c = keylen == 16 ? EVP_aes_128_ecb() : keylen == 24 ? EVP_aes_192_ecb()
                                                                           : EVP_aes_256_ecb();
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl = 0;

    assert_non_null(ctx);
    assert_int_equal(EVP_EncryptInit_ex(ctx, c, NULL, key, NULL), 1);
    EVP_CIPHER_CTX_set_padding(ctx, 0);
    assert_int_equal(EVP_EncryptUpdate(ctx, ref, &outl, in, 64), 1);
    assert_int_equal(outl, 64);
    EVP_CIPHER_CTX_free(ctx);
}

static void test_aes_vs_openssl(void **state)
{
    (void)state;
    for (int iter = 0; iter < 300; iter++) {
        size_t keylen = 16 + 8 * (size_t)(iter % 3);
        uint8_t key[32], in[64], out[64], ref[64];
        gp_aes_sched s;

        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(in, sizeof(in));
        ref_aes_ecb64(key, keylen, in, ref);
        gp_aes_schedule(&s, key, (uint32_t)keylen);
        gp_aes_encrypt4(&s, in, out);
        assert_memory_equal(out, ref, 64);
    }
}

/* ---------- ChaCha20 / Poly1305 known answers (RFC 8439) ---------- */

static void test_chacha20_block_rfc(void **state)
{
    /* RFC 8439 §2.3.2: key 00..1f, nonce 000000090000004a00000000, block counter 1. */
    uint8_t key[32], ctr16[16] = {1, 0, 0, 0, 0, 0, 0, 0x09, 0, 0, 0, 0x4a, 0, 0, 0, 0};
    uint32_t kw[8];
    uint8_t out[64];

    (void)state;
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 8; i++)
        kw[i] = gp_load_le32(key + 4 * i);
    gp_chacha20_block(kw, ctr16, out);
    assert_hex_equal(out, "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
                          "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e");
}

static void test_poly1305_rfc(void **state)
{
    /* RFC 8439 §2.5.2 ("Cryptographic Forum Research Group", 2 blocks + 2 bytes), then Appendix A.3
     * #5-#8, which drive h into [2^130-5, 2^130) and other carry corners that random input never
     * reaches: they are what proves the final masked reduction. */
    static const char *const vec[][3] = {
        {"85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b",
         "43727970746f6772617068696320466f72756d2052657365617263682047726f7570",
         "a8061dc1305136c6c22b8baf0c0127a9"},
        {"0200000000000000000000000000000000000000000000000000000000000000",
         "ffffffffffffffffffffffffffffffff", "03000000000000000000000000000000"},
        {"02000000000000000000000000000000ffffffffffffffffffffffffffffffff",
         "02000000000000000000000000000000", "03000000000000000000000000000000"},
        {"0100000000000000000000000000000000000000000000000000000000000000",
         "fffffffffffffffffffffffffffffffff0ffffffffffffffffffffffffffffff11000000000000000000000000000000",
         "05000000000000000000000000000000"},
        {"0100000000000000000000000000000000000000000000000000000000000000",
         "fffffffffffffffffffffffffffffffffbfefefefefefefefefefefefefefefe01010101010101010101010101010101",
         "00000000000000000000000000000000"},
    };

    (void)state;
    for (size_t v = 0; v < sizeof(vec) / sizeof(vec[0]); v++) {
        size_t klen, mlen;
        uint8_t *key = unhex_or_die(vec[v][0], &klen);
        uint8_t *msg = unhex_or_die(vec[v][1], &mlen);
        gp_poly1305_state st;
        uint8_t tag[16];

        gp_poly1305_init(&st, key);
        gp_poly1305_blocks(&st, msg, mlen / 16);
        gp_poly1305_finish(&st, msg + 16 * (mlen / 16), mlen % 16, tag);
        assert_hex_equal(tag, vec[v][2]);
        free(key);
        free(msg);
    }
}

static void test_poly1305_vs_sodium(void **state)
{
    (void)state;
    for (int iter = 0; iter < 400; iter++) {
        size_t len = iter < 40 ? (size_t)iter : gptest_rand_range(0, 2000);
        uint8_t key[32], tag[16], ref[16];
        uint8_t *msg = xmalloc(len);
        gp_poly1305_state st;

        gptest_rand_bytes(key, sizeof(key));
        if (iter % 7 == 0)   /* all-ones key and message push the limbs to their bounds */
            memset(key, 0xff, sizeof(key));
        gptest_rand_bytes(msg, len);
        if (iter % 5 == 0)
            memset(msg, 0xff, len);
        crypto_onetimeauth_poly1305(ref, msg, len, key);
        gp_poly1305_init(&st, key);
        gp_poly1305_blocks(&st, msg, len / 16);
        gp_poly1305_finish(&st, msg + 16 * (len / 16), len % 16, tag);
        assert_memory_equal(tag, ref, 16);
        free(msg);
    }
}

/* ---------- the message unit vs OpenSSL and libsodium ---------- */

typedef struct alg_cfg {
    uint32_t alg;
    size_t keylen;
    const char *name;
} alg_cfg;

static const alg_cfg all_cfgs[] = {
    {GP_ALG_AES_CTR, 16, "AES-128-CTR"}, {GP_ALG_AES_CTR, 24, "AES-192-CTR"},
    {GP_ALG_AES_CTR, 32, "AES-256-CTR"}, {GP_ALG_AES_GCM, 16, "AES-128-GCM"},
    {GP_ALG_AES_GCM, 24, "AES-192-GCM"}, {GP_ALG_AES_GCM, 32, "AES-256-GCM"},
    {GP_ALG_CHACHA20, 32, "ChaCha20"},   {GP_ALG_CHACHA20_POLY1305, 32, "ChaCha20-Poly1305"},
};

static const EVP_CIPHER *evp_cipher_of(const alg_cfg *c)
{
    switch (c->alg) {
    case GP_ALG_AES_CTR:
        return c->keylen == 16 ? EVP_aes_128_ctr() : c->keylen == 24 ? EVP_aes_192_ctr() : EVP_aes_256_ctr();
    case GP_ALG_AES_GCM:
        return c->keylen == 16 ? EVP_aes_128_gcm() : c->keylen == 24 ? EVP_aes_192_gcm() : EVP_aes_256_gcm();
    case GP_ALG_CHACHA20:
        return EVP_chacha20();
    default:
        return EVP_chacha20_poly1305();
    }
}

static int is_aead(uint32_t alg)
{
    return alg == GP_ALG_AES_GCM || alg == GP_ALG_CHACHA20_POLY1305;
}

/* OpenSSL default provider, one shot: out = E(in), tag for AEADs. */
static void ref_encrypt(const alg_cfg *c, const uint8_t *key, const uint8_t *iv, size_t ivlen,
                        const uint8_t *aad, size_t aadlen, const uint8_t *in, size_t len,
                        uint8_t *out, uint8_t tag[16])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl = 0, finl = 0;

    assert_non_null(ctx);
    assert_int_equal(EVP_EncryptInit_ex(ctx, evp_cipher_of(c), NULL, NULL, NULL), 1);
    if (is_aead(c->alg))   /* before the IV: GCM IVs other than 12 bytes need IVLEN first */
        assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, (int)ivlen, NULL), 1);
    assert_int_equal(EVP_EncryptInit_ex(ctx, NULL, NULL, key, iv), 1);
    if (aadlen > 0)
        assert_int_equal(EVP_EncryptUpdate(ctx, NULL, &outl, aad, (int)aadlen), 1);
    outl = 0;
    if (len > 0)
        assert_int_equal(EVP_EncryptUpdate(ctx, out, &outl, in, (int)len), 1);
    assert_int_equal(EVP_EncryptFinal_ex(ctx, out + outl, &finl), 1);
    assert_int_equal((size_t)(outl + finl), len);
    if (is_aead(c->alg))
        assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag), 1);
    EVP_CIPHER_CTX_free(ctx);
}

/* Next update size: 0 = one piece, 1 = byte by byte, 2 = mixed (1-byte, small, block-ish, large). */
static size_t next_piece(size_t rem, int mode)
{
    size_t n;

    if (mode == 0 || rem == 0)
        return rem;
    if (mode == 1)
        return 1;
    switch (gptest_rand_range(0, 4)) {
    case 0: n = 1; break;
    case 1: n = gptest_rand_range(1, 17); break;
    case 2: n = 16 * gptest_rand_range(1, 8); break;
    case 3: n = gptest_rand_range(1, 200); break;
    default: n = gptest_rand_range(1, rem); break;
    }
    return n < rem ? n : rem;
}

/* Drive the message unit: AAD and data in random pieces, then the tag (AEADs). */
static void unit_crypt(const gp_key_sched *ks, const uint8_t *iv, size_t ivlen, const uint8_t *aad,
                       size_t aadlen, const uint8_t *in, uint8_t *out, size_t len, uint32_t op,
                       int mode, uint8_t tag[16])
{
    gp_msg_state st;
    size_t off = 0;

    gp_msg_begin(&st, ks, iv, ivlen);
    while (off < aadlen) {
        size_t n = next_piece(aadlen - off, mode);

        gp_msg_run(&st, ks, GP_OP_AAD, aad + off, NULL, n);
        off += n;
    }
    off = 0;
    while (off < len) {
        size_t n = next_piece(len - off, mode);

        gp_msg_run(&st, ks, op, in + off, out + off, n);
        off += n;
    }
    if (mode == 2 && gptest_rand_range(0, 3) == 0)   /* empty updates change nothing */
        gp_msg_run(&st, ks, op, in, out, 0);
    if (is_aead(ks->alg))
        gp_msg_run(&st, ks, GP_OP_TAG, NULL, tag, 0);
}

/* One differential case: our encrypt and decrypt, in place and out of place at odd offsets. */
static void check_case(const alg_cfg *c, const uint8_t *key, const uint8_t *iv, size_t ivlen,
                       const uint8_t *aad, size_t aadlen, const uint8_t *pt, size_t len)
{
    uint8_t *ref = xmalloc(len), *buf = xmalloc(len + 8), *src = xmalloc(len + 8);
    uint8_t ref_tag[16] = {0}, tag[16] = {0};
    gp_key_sched ks;
    int aead = is_aead(c->alg);
    int mode = len <= 1200 && gptest_rand_range(0, 2) == 0 ? 1 : (int)gptest_rand_range(0, 2);

    if (mode == 1 && len > 1200)
        mode = 2;
    ref_encrypt(c, key, iv, ivlen, aad, aadlen, pt, len, ref, ref_tag);

    /* libsodium as a second reference for the ChaCha20 family. */
    if (c->alg == GP_ALG_CHACHA20_POLY1305) {
        uint8_t stag[16];
        unsigned long long tl = 0;

        crypto_aead_chacha20poly1305_ietf_encrypt_detached(buf, stag, &tl, pt, len, aad, aadlen,
                                                           NULL, iv, key);
        assert_int_equal(tl, 16);
        assert_memory_equal(buf, ref, len);
        assert_memory_equal(stag, ref_tag, 16);
    } else if (c->alg == GP_ALG_CHACHA20) {
        uint32_t ic = gp_load_le32(iv);

        if ((uint64_t)ic + (len + 63) / 64 <= 0xffffffffull) {   /* libsodium does not carry */
            crypto_stream_chacha20_ietf_xor_ic(buf, pt, len, iv + 4, ic, key);
            assert_memory_equal(buf, ref, len);
        }
    }

    gp_key_schedule(&ks, c->alg, key, c->keylen);
    for (int inplace = 0; inplace < 2; inplace++) {
        size_t so = gptest_rand_range(0, 7), bo = gptest_rand_range(0, 7);
        uint8_t *o = buf + bo;
        const uint8_t *i = inplace ? o : src + so;

        /* encrypt */
        memcpy(inplace ? o : src + so, pt, len);
        memset(tag, 0, sizeof(tag));
        unit_crypt(&ks, iv, ivlen, aad, aadlen, i, o, len, GP_OP_ENCRYPT, mode, tag);
        if (len > 0 && memcmp(o, ref, len) != 0)
            fail_msg("%s encrypt len %zu aad %zu ivlen %zu mode %d inplace %d: output differs",
                     c->name, len, aadlen, ivlen, mode, inplace);
        if (aead && memcmp(tag, ref_tag, 16) != 0)
            fail_msg("%s encrypt len %zu aad %zu ivlen %zu mode %d inplace %d: tag differs",
                     c->name, len, aadlen, ivlen, mode, inplace);

        /* decrypt (the tag is the one a receiver recomputes over the ciphertext) */
        memcpy(inplace ? o : src + so, ref, len);
        memset(tag, 0, sizeof(tag));
        unit_crypt(&ks, iv, ivlen, aad, aadlen, i, o, len, GP_OP_DECRYPT, mode, tag);
        if (len > 0 && memcmp(o, pt, len) != 0)
            fail_msg("%s decrypt len %zu aad %zu ivlen %zu mode %d inplace %d: output differs",
                     c->name, len, aadlen, ivlen, mode, inplace);
        if (aead && memcmp(tag, ref_tag, 16) != 0)
            fail_msg("%s decrypt len %zu aad %zu ivlen %zu mode %d inplace %d: tag differs",
                     c->name, len, aadlen, ivlen, mode, inplace);
    }
    free(ref);
    free(buf);
    free(src);
}

static size_t pick_ivlen(uint32_t alg)
{
    if (alg == GP_ALG_AES_GCM)
        return gptest_rand_range(0, 1) ? 12 : gptest_rand_range(1, 128);
    return alg == GP_ALG_CHACHA20_POLY1305 ? 12 : 16;
}

/* aad_want: the AAD length, or -1 for a random one (AEADs only). */
static void random_case(const alg_cfg *c, size_t len, long aad_want)
{
    uint8_t key[32], iv[128];
    size_t ivlen = pick_ivlen(c->alg);
    size_t aadlen = 0;
    uint8_t *aad, *pt;

    if (is_aead(c->alg) && aad_want >= 0) {
        aadlen = (size_t)aad_want;
    } else if (is_aead(c->alg)) {
        switch (gptest_rand_range(0, 3)) {
        case 0: aadlen = 0; break;
        case 1: aadlen = gptest_rand_range(1, 32); break;
        default: aadlen = gptest_rand_range(0, 600); break;
        }
    }
    aad = xmalloc(aadlen);
    pt = xmalloc(len);
    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    if (c->alg == GP_ALG_CHACHA20)
        iv[3] &= 0x7f;   /* keep clear of the counter wrap here; the edge test covers it */
    gptest_rand_bytes(aad, aadlen);
    gptest_rand_bytes(pt, len);
    check_case(c, key, iv, ivlen, aad, aadlen, pt, len);
    free(aad);
    free(pt);
}

static void test_msg_unit_vs_references(void **state)
{
    static const size_t lens[] = {0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 257};

    (void)state;
    for (size_t ci = 0; ci < sizeof(all_cfgs) / sizeof(all_cfgs[0]); ci++) {
        const alg_cfg *c = &all_cfgs[ci];

        /* no AAD and no data at all; AAD only; then the listed lengths and random ones */
        random_case(c, 0, 0);
        random_case(c, 0, 17);
        for (int rep = 0; rep < 3; rep++)
            for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
                random_case(c, lens[li], -1);
        for (int rep = 0; rep < 40; rep++)
            random_case(c, gptest_rand_range(0, rep < 15 ? 2000 : 70000), -1);
    }
}

/* RFC 8439 §2.8.2 AEAD known answer through the message unit. */
static void test_aead_rfc(void **state)
{
    size_t kl, nl, al, pl, cl, tl;
    uint8_t *key = unhex_or_die("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f", &kl);
    uint8_t *nonce = unhex_or_die("070000004041424344454647", &nl);
    uint8_t *aad = unhex_or_die("50515253c0c1c2c3c4c5c6c7", &al);
    uint8_t *pt = unhex_or_die(
        "4c616469657320616e642047656e746c656d656e206f662074686520636c617373206f66202739393a20496620"
        "4920636f756c64206f6666657220796f75206f6e6c79206f6e652074697020666f7220746865206675747572"
        "652c2073756e73637265656e20776f756c642062652069742e", &pl);
    uint8_t *ct = unhex_or_die(
        "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69"
        "da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad67594"
        "5585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116", &cl);
    uint8_t *want_tag = unhex_or_die("1ae10b594f09e26a7e902ecbd0600691", &tl);
    uint8_t *out = xmalloc(pl), tag[16];
    gp_key_sched ks;

    (void)state;
    assert_int_equal(pl, cl);
    gp_key_schedule(&ks, GP_ALG_CHACHA20_POLY1305, key, kl);
    unit_crypt(&ks, nonce, nl, aad, al, pt, out, pl, GP_OP_ENCRYPT, 0, tag);
    assert_memory_equal(out, ct, cl);
    assert_memory_equal(tag, want_tag, 16);
    free(key); free(nonce); free(aad); free(pt); free(ct); free(want_tag); free(out);
}

/* ---------- counter edge cases vs OpenSSL ---------- */

static void edge_case(const alg_cfg *c, const uint8_t *key, const uint8_t *iv, size_t ivlen, size_t len)
{
    uint8_t *pt = xmalloc(len);

    gptest_rand_bytes(pt, len);
    check_case(c, key, iv, ivlen, NULL, 0, pt, len);
    free(pt);
}

static void test_ctr_wrap(void **state)
{
    uint8_t key[32], iv[16];

    (void)state;
    for (size_t ci = 0; ci < 3; ci++) {
        for (int rep = 0; rep < 4; rep++) {
            gptest_rand_bytes(key, sizeof(key));
            /* ff..ff: the whole 128-bit counter wraps to zero (OpenSSL ctr128 carries all 16 bytes) */
            memset(iv, 0xff, 16);
            iv[15] = (uint8_t)(0xff - rep);
            edge_case(&all_cfgs[ci], key, iv, 16, 64 * 3 + 7);
            /* 00..00 ff*8: the carry crosses the middle of the block */
            memset(iv, 0, 8);
            memset(iv + 8, 0xff, 8);
            iv[15] = (uint8_t)(0xff - rep);
            edge_case(&all_cfgs[ci], key, iv, 16, 64 * 3 + 7);
        }
    }
}

/* GF(2^128) helpers for building an IV with a chosen J0: one = x^0 = top bit of the first word. */
static void gf_inv(uint64_t out[2], const uint64_t a[2])
{
    /* a^(2^128-2) = prod_{i=1..127} a^(2^i) */
    uint64_t t[2] = {a[0], a[1]}, r[2] = {0x8000000000000000ull, 0};

    for (int i = 1; i < 128; i++) {
        uint64_t sq[2] = {t[0], t[1]};

        gp_ghash_mul(t, sq);
        gp_ghash_mul(r, t);
    }
    out[0] = r[0];
    out[1] = r[1];
}

static void test_gcm_inc32_wrap(void **state)
{
    (void)state;
    for (size_t ci = 3; ci < 6; ci++) {
        const alg_cfg *c = &all_cfgs[ci];
        uint8_t key[32], iv[16];
        uint64_t hinv[2], x[2], j0[2], chk[2], one[2] = {0x8000000000000000ull, 0};
        gp_key_sched ks;
        gp_msg_state st;

        gptest_rand_bytes(key, sizeof(key));
        gp_key_schedule(&ks, c->alg, key, c->keylen);
        gf_inv(hinv, ks.gcm_h);
        chk[0] = hinv[0]; chk[1] = hinv[1];
        gp_ghash_mul(chk, ks.gcm_h);
        assert_memory_equal(chk, one, sizeof(one));   /* the inverse really is one */

        /* Want J0 with low word fffffffe. For a 16-byte IV, J0 = ((IV*H) ^ L)*H with
         * L = [0]64 || [128]64 (SP 800-38D §7.1 step 2), so IV = ((J0*H^-1) ^ L)*H^-1. */
        j0[0] = gptest_rand_u64();
        j0[1] = (gptest_rand_u64() & 0xffffffff00000000ull) | 0xfffffffeull;
        x[0] = j0[0]; x[1] = j0[1];
        gp_ghash_mul(x, hinv);
        x[1] ^= 128;
        gp_ghash_mul(x, hinv);
        gp_store_be64(iv, x[0]);
        gp_store_be64(iv + 8, x[1]);

        gp_msg_begin(&st, &ks, iv, 16);
        /* ctr = inc32(J0): low word ffffffff, upper 96 bits of J0 untouched */
        assert_int_equal(gp_load_be64(st.ctr), j0[0]);
        assert_int_equal(gp_load_be64(st.ctr + 8), (j0[1] & 0xffffffff00000000ull) | 0xffffffffull);
        /* Blocks at ffffffff, 00000000, 00000001...: inc32 wraps without carrying. */
        edge_case(c, key, iv, 16, 16 * 6 + 5);
    }
}

static void test_chacha20_counter_carry(void **state)
{
    uint8_t key[32], iv[16];

    (void)state;
    for (int rep = 0; rep < 6; rep++) {
        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        /* LE32 counter ffffffff (or just below): the next block carries into the first nonce word */
        iv[0] = (uint8_t)(0xff - rep); iv[1] = 0xff; iv[2] = 0xff; iv[3] = 0xff;
        if (rep == 5)
            memset(iv + 4, 0xff, 4);   /* and that word wraps too */
        edge_case(&all_cfgs[6], key, iv, 16, 64 * 8 + 3);
    }
}

/* ---------- the device's T-table AES (run here on a host copy of the bank-private table) ---------- */

static void test_aes_ttable(void **state)
{
    uint32_t *tab = malloc(GP_AES_TT_WIDE_BYTES);

    (void)state;
    assert_non_null(tab);
    /* T0 from its definition: (2s, s, s, 3s) down a column, s = S(x). */
    for (int x = 0; x < 256; x++) {
        uint8_t sb = ref_sbox((uint8_t)x);
        uint32_t want = (uint32_t)gf256_mul(sb, 2) | (uint32_t)sb << 8 | (uint32_t)sb << 16
                        | (uint32_t)gf256_mul(sb, 3) << 24;

        assert_int_equal(gp_aes_te0[x], want);
    }
    /* The addresses the rounds load from: row = byte k of the state word, and lane l's own bank
     * ((offset / 4) mod 32 = l) whatever the state, for both halves of the row (the wide layout's
     * second 64 KiB adds a multiple of 128 bytes, so it keeps the bank). */
    for (int iter = 0; iter < 4096; iter++) {
        uint32_t sw, l = (uint32_t)iter % GP_AES_TT_LANES, k = (uint32_t)(iter / 32) % 4;

        gptest_rand_bytes((uint8_t *)&sw, sizeof(sw));
        for (uint32_t half = 0; half < 2; half++) {
            uint32_t off = gp_prmt(sw, half * GP_AES_TT_T2 + 4 * l, 0x5504u | (k << 4));

            assert_int_equal(off, (sw >> (8 * k) & 0xff) << 8 | (half * GP_AES_TT_T2 + 4 * l));
            assert_int_equal((off / 4) % 32, l);
            assert_int_equal(((GP_AES_TT_BYTES + off) / 4) % 32, l);
        }
    }
    /* The byte permute against its PTX definition. */
    assert_int_equal(gp_prmt(0x44332211u, 0x000000a4u, 0x5504u | (2u << 4)), 0x000033a4u);
    assert_int_equal(gp_prmt(0x44332211u, 0x88776655u, 0x7610u), 0x88772211u);
    for (uint32_t wide = 0; wide < 2; wide++) {
        /* Filled as gp_aes_tt_fill lays it out: row x = 256 bytes, T0[x] for lane l at word l,
         * T2[x] = T0[x] rotated by 16 at word 32 + l; wide: T1 (by 8) and T3 (by 24) at the same
         * places 64 KiB on. The wide table starts from garbage, so a round reading the wrong
         * half fails below. */
        gptest_rand_bytes((uint8_t *)tab, GP_AES_TT_WIDE_BYTES);
        for (uint32_t x = 0; x < 256; x++)
            for (uint32_t l = 0; l < GP_AES_TT_LANES; l++)
                gp_aes_tt_row(tab + x * (GP_AES_TT_ROW_BYTES / 4), gp_aes_te0[x], l, wide);
        for (uint32_t x = 0; x < 256; x++)
            for (uint32_t l = 0; l < GP_AES_TT_LANES; l++) {
                const uint32_t *row = tab + x * (GP_AES_TT_ROW_BYTES / 4), t0 = gp_aes_te0[x];

                assert_int_equal(row[l], t0);
                assert_int_equal(row[GP_AES_TT_T2 / 4 + l], (t0 << 16) | (t0 >> 16));
                if (wide) {
                    assert_int_equal(row[GP_AES_TT_BYTES / 4 + l], (t0 << 8) | (t0 >> 24));
                    assert_int_equal(row[(GP_AES_TT_BYTES + GP_AES_TT_T2) / 4 + l], (t0 << 24) | (t0 >> 8));
                }
            }
        for (int iter = 0; iter < 96; iter++) {
            size_t keylen = 16 + 8 * (size_t)(iter % 3);
            uint32_t lane = (uint32_t)(iter % GP_AES_TT_LANES), w[16];
            uint8_t key[32], in[64], ref[64];
            gp_aes_sched s;

            gptest_rand_bytes(key, sizeof(key));
            gptest_rand_bytes(in, sizeof(in));
            ref_aes_ecb64(key, keylen, in, ref);
            gp_aes_schedule(&s, key, (uint32_t)keylen);
            for (int i = 0; i < 16; i++)
                w[i] = gp_load_le32(in + 4 * i);
            gp_aes_tt_encrypt4((const uint8_t *)tab, wide, lane, s.ek, s.nr, 0, w);
            for (int i = 0; i < 16; i++)
                assert_int_equal(w[i], gp_load_le32(ref + 4 * i));
            /* random blocks with the counter hint: they differ early, so the plain rounds */
            for (int i = 0; i < 16; i++)
                w[i] = gp_load_le32(in + 4 * i);
            assert_false(gp_aes_ctr_shared(w));
            gp_aes_tt_encrypt4((const uint8_t *)tab, wide, lane, s.ek, s.nr, 1, w);
            for (int i = 0; i < 16; i++)
                assert_int_equal(w[i], gp_load_le32(ref + 4 * i));
            /* and the word entry point the lanes use (bitsliced on the host) */
            for (int i = 0; i < 16; i++)
                w[i] = gp_load_le32(in + 4 * i);
            gp_aes_encrypt4_words(&s, 1, w);
            for (int i = 0; i < 16; i++)
                assert_int_equal(w[i], gp_load_le32(ref + 4 * i));
        }
        /* Counter-mode caching (gp_aes_tt_ctr_rounds12): four counter blocks one apart, as a GCM
         * body lane makes them, or GP_UNIT_LANES apart, as an AES-CTR lane does
         * (gp_lane_ctr_strided); 128-bit counters for CTR, 32-bit for GCM; the low bytes placed
         * so that the carries land inside byte 15, cross into byte 14 (cached either way), or
         * leave bytes 14-15 or wrap GCM's 32 bits (the plain rounds). */
        static const struct { uint32_t low; int shared, shared_strided; } lows[] = {
            { 0x00000002u, 1, 1 }, { 0x000000fcu, 1, 1 }, { 0x000000feu, 1, 1 }, { 0x0000ff7fu, 1, 1 },
            { 0x0000fffcu, 1, 0 }, { 0x0000fffdu, 0, 0 }, { 0x0000ffffu, 0, 0 }, { 0xfffffffeu, 0, 0 },
        };
        for (int iter = 0; iter < 192; iter++) {
            size_t keylen = 16 + 8 * (size_t)(iter % 3);
            uint32_t lane = (uint32_t)((iter * 7) % GP_AES_TT_LANES), w[16], low = lows[iter % 8].low;
            const int inc32 = (iter / 8) % 2, strided = (iter / 16) % 2;
            const uint32_t apart = strided ? GP_UNIT_LANES : 1u;
            uint8_t key[32], in[64], ref[64], ctr[16];
            gp_aes_sched s;

            gptest_rand_bytes(key, sizeof(key));
            gptest_rand_bytes(ctr, sizeof(ctr));
            gp_store_be32(ctr + 12, low);
            for (int b = 0; b < 4; b++) {
                memcpy(in + 16 * b, ctr, 16);
                for (uint32_t a = 0; a < apart; a++) {
                    if (inc32)
                        gp_ctr_inc32(ctr);
                    else
                        gp_ctr_inc128(ctr);
                }
            }
            ref_aes_ecb64(key, keylen, in, ref);
            gp_aes_schedule(&s, key, (uint32_t)keylen);
            for (int i = 0; i < 16; i++)
                w[i] = gp_load_le32(in + 4 * i);
            assert_int_equal(gp_aes_ctr_shared(w), strided ? lows[iter % 8].shared_strided : lows[iter % 8].shared);
            gp_aes_tt_encrypt4((const uint8_t *)tab, wide, lane, s.ek, s.nr, 1, w);
            for (int i = 0; i < 16; i++)
                assert_int_equal(w[i], gp_load_le32(ref + 4 * i));
        }
    }
    free(tab);
}

/* ---------- lane-cooperative units: the tree combine against a serial computation ---------- */

/* Poly1305 limbs (partially reduced) as a canonical value mod 2^130 - 5. */
static BIGNUM *p1305_bn(const uint32_t h[5])
{
    BIGNUM *v = BN_new(), *p = BN_new(), *t = BN_new();
    BN_CTX *ctx = BN_CTX_new();

    assert_true(v && p && t && ctx);
    BN_zero(v);
    for (int i = 4; i >= 0; i--) {
        assert_int_equal(BN_lshift(v, v, 26), 1);
        assert_int_equal(BN_set_word(t, h[i]), 1);
        assert_int_equal(BN_add(v, v, t), 1);
    }
    BN_one(p);
    assert_int_equal(BN_lshift(p, p, 130), 1);
    assert_int_equal(BN_sub_word(p, 5), 1);
    assert_int_equal(BN_nnmod(v, v, p, ctx), 1);
    BN_free(p);
    BN_free(t);
    BN_CTX_free(ctx);
    return v;
}

/*
 * A body of 1..3 units whose last unit has every length 0..GP_UNIT_LANES chunks (0: the body ends
 * on a unit boundary), every op: each unit's output must be the serial keystream XOR, and its
 * partial the serial MAC of its own ciphertext from zero (the finisher places it in the message).
 */
static void lanes_case(uint32_t alg, size_t keylen, uint32_t op, uint32_t full_units, uint32_t last_chunks)
{
    uint8_t key[32], iv[16];
    gp_key_sched ks;
    gp_msg_state st, ref;
    gp_mac_pows pbuf;
    const gp_mac_pows *pw;
    gp_job j;
    size_t len = ((size_t)full_units * GP_UNIT_LANES + last_chunks) * 64;
    uint8_t *in = xmalloc(len + 64), *out = xmalloc(len + 64), *want = xmalloc(len + 64);
    uint8_t *part = xmalloc((size_t)(full_units + 1) * GP_PARTIAL_BYTES);

    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(in, len);
    gp_key_schedule(&ks, alg, key, keylen);
    gp_msg_begin(&st, &ks, iv, gp_alg_is_aes(alg) && alg == GP_ALG_AES_GCM ? 12 : 16);
    if (alg == GP_ALG_CHACHA20_POLY1305)
        gp_msg_begin(&st, &ks, iv, 12);
    st.in_text = 1;   /* text at offset 0: the whole request is body */
    ref = st;
    gp_msg_xor(&ref, &ks, in, want, len);
    gp_job_plan(&j, &st, op, len, 0);
    assert_int_equal(j.head_len, 0);
    assert_int_equal(j.body_len, len);
    assert_int_equal(j.nunits, full_units + (last_chunks != 0));
    pw = gp_request_pows(&ks, &st, &pbuf);
    for (uint32_t u = 0; u < j.nunits; u++)
        gp_unit_body(&j, &ks, pw, u, in, out, part + (size_t)u * GP_PARTIAL_BYTES);
    assert_memory_equal(out, want, len);
    if (gp_alg_is_aead(alg)) {
        const uint8_t *ct = op == GP_OP_DECRYPT ? in : out;

        for (uint32_t u = 0; u < j.nunits; u++) {
            size_t off = (size_t)u * GP_UNIT_BYTES, n = len - off < GP_UNIT_BYTES ? len - off : GP_UNIT_BYTES;
            gp_lane_mac got;

            gp_partial_load(part + (size_t)u * GP_PARTIAL_BYTES, &got);
            if (alg == GP_ALG_AES_GCM) {
                uint64_t x[2] = {0, 0}, y[2];

                gp_ghash_blocks(x, ks.gcm_h, ct + off, n / 16);
                gp_lane_mac_get_x(y, &got);
                assert_true(x[0] == y[0] && x[1] == y[1]);
            } else {
                gp_poly1305_state ps = st.poly;
                BIGNUM *a, *b;

                for (int i = 0; i < 5; i++)
                    ps.h[i] = 0;
                gp_poly1305_blocks(&ps, ct + off, n / 16);
                a = p1305_bn(got.w);
                b = p1305_bn(ps.h);
                assert_int_equal(BN_cmp(a, b), 0);
                BN_free(a);
                BN_free(b);
            }
        }
    }
    free(in);
    free(out);
    free(want);
    free(part);
}

/* GCM's stride powers (gp_key_sched.gcm_stride_pows, kernels/units.h "Shifted partials"): S^e for
 * every e < 256 through gp_stride_pow, against S = Q^L multiplied up one step at a time. */
static void test_stride_pows(void **state)
{
    uint8_t key[32];
    gp_key_sched ks;
    gp_lane_mac s, want, got;

    (void)state;
    for (int round = 0; round < 4; round++) {
        gptest_rand_bytes(key, sizeof(key));
        gp_key_schedule(&ks, GP_ALG_AES_GCM, key, 32);
        gp_mac_pow_get(&s, &ks.mac_pows, GP_POW_STRIDE);
        gp_lane_mac_zero(&want);
        want.w[0] = 0x80000000u;   /* GHASH's 1 */
        for (uint32_t e = 0; e < GP_STRIDE_POWS * GP_STRIDE_POWS; e++) {
            gp_stride_pow(&ks, e, &got);
            if (memcmp(got.w, want.w, sizeof(got.w)) != 0)
                fail_msg("S^%u differs", e);
            gp_mac_mul(GP_ALG_AES_GCM, &want, &s);
        }
    }
}

/* The powers table against plain repeated multiplication: entry e must be P^n(e). */
static void test_mac_pows(void **state)
{
    static const uint32_t algs[] = { GP_ALG_AES_GCM, GP_ALG_CHACHA20_POLY1305 };
    (void)state;
    for (size_t a = 0; a < 2; a++) {
        const uint32_t alg = algs[a], L = GP_UNIT_LANES;
        uint8_t key[32], iv[16];
        gp_key_sched ks;
        gp_msg_state st;
        gp_mac_pows pbuf;
        const gp_mac_pows *pw;
        gp_lane_mac p, acc;
        uint64_t n = 0;

        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        gp_key_schedule(&ks, alg, key, 32);
        gp_msg_begin(&st, &ks, iv, 12);
        pw = gp_request_pows(&ks, &st, &pbuf);
        gp_mac_key(&p, &ks, &st);
        gp_lane_mac_zero(&acc);
        acc.w[0] = alg == GP_ALG_AES_GCM ? 0x80000000u : 1u;
        /* Walk n = 0, 1, 2, ... up to Q^L = P^(4L*L), checking each entry at its exponent. */
        for (uint64_t e = 0; e <= 4ull * L * L; e++) {
            for (uint32_t i = 0; i < GP_POW_COUNT; i++) {
                uint64_t want = i < GP_POW_FIN ? 4ull * (L - 1 - i) + 1
                                : i < GP_POW_UNIT ? 4ull * (i - GP_POW_FIN + 1)
                                : i < GP_POW_STRIDE ? 4ull * L * (i - GP_POW_UNIT)
                                : i == GP_POW_STRIDE ? 4ull * L * L : i - GP_POW_NEAR + 2;
                gp_lane_mac got;

                if (want != e)
                    continue;
                gp_mac_pow_get(&got, pw, i);
                if (alg == GP_ALG_AES_GCM) {
                    assert_memory_equal(got.w, acc.w, sizeof(got.w));
                } else {
                    BIGNUM *x = p1305_bn(got.w), *y = p1305_bn(acc.w);

                    assert_int_equal(BN_cmp(x, y), 0);
                    BN_free(x);
                    BN_free(y);
                }
                n++;
            }
            gp_mac_mul(alg, &acc, &p);
        }
        assert_int_equal(n, GP_POW_COUNT);
        if (alg == GP_ALG_AES_GCM) {
            /* The tag powers: Q^(i+1) H = H^(4L(i+1) + 1). */
            for (uint32_t i = 0; i < GP_TAG_POWS; i++) {
                gp_lane_mac want = p;

                for (uint64_t e = 1; e < 4ull * L * (i + 1) + 1; e++)
                    gp_mac_mul(alg, &want, &p);
                assert_memory_equal(ks.gcm_tag_pows[i], want.w, 16);
            }
        }
    }
}

static void test_unit_lanes(void **state)
{
    static const struct { uint32_t alg; size_t keylen; } algs[] = {
        { GP_ALG_AES_CTR, 16 }, { GP_ALG_AES_GCM, 32 }, { GP_ALG_AES_GCM, 16 },
        { GP_ALG_CHACHA20, 32 }, { GP_ALG_CHACHA20_POLY1305, 32 },
    };
    (void)state;
    for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++)
        for (uint32_t c = 0; c <= GP_UNIT_LANES; c++)
            for (uint32_t op = GP_OP_ENCRYPT; op <= GP_OP_DECRYPT; op++) {
                lanes_case(algs[a].alg, algs[a].keylen, op, c == 0 ? 1 : 0, c);
                lanes_case(algs[a].alg, algs[a].keylen, op, 1 + (uint32_t)gptest_rand_range(0, 2), c);
            }
}

/*
 * The GPU's count of a request's refs (kernels/batch_kernel.cu batch_ref_count, by the rules of
 * gp_counts_on_span and gp_done_at_finish) from the counters its planner leaves (gp_work_plan_lead),
 * the refs counted in order, in reverse and shuffled: every span folded once, before the one count
 * that finishes the request. Returns whether the lead ran as a ref.
 */
static int count_refs_case(uint32_t alg, uint64_t text_len, uint64_t len, int order)
{
    gp_msg_state st;
    gp_work w;
    uint32_t *span_done, *folded, *refs, n = 0, finished = 0, lead;

    memset(&st, 0, sizeof(st));
    memset(&w, 0, sizeof(w));
    st.alg = alg;
    st.text_len = text_len;
    st.in_text = text_len != 0;
    gp_job_plan(&w.job, &st, GP_OP_ENCRYPT, len, 0);
    assert_true(w.job.nunits > 0);
    span_done = calloc(w.job.nspans + 1, sizeof(*span_done));
    folded = calloc(w.job.nspans + 1, sizeof(*folded));
    refs = calloc(w.job.nunits + 1, sizeof(*refs));
    assert_true(span_done != NULL && folded != NULL && refs != NULL);
    lead = (uint32_t)gp_work_plan_lead(&w, &st, span_done);
    if (lead)
        refs[n++] = GP_UNIT_LEAD;
    for (uint32_t u = 0; u < w.job.nunits; u++)
        refs[n++] = u;
    for (uint32_t i = 0; i < n && order != 0; i++) {   /* 1: reversed; 2: shuffled */
        const uint32_t k = order == 1 ? n - 1 - i : i + (uint32_t)gptest_rand_range(0, n - 1 - i), t = refs[i];

        if (order == 1 && k <= i)
            break;
        refs[i] = refs[k];
        refs[k] = t;
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t unit = refs[i];

        if (gp_counts_on_span(&w.job, unit)) {
            const uint32_t sp = gp_span_of_ref(&w.job, unit);

            if (span_done[sp]++ != gp_span_size(&w.job, sp) - 1)
                continue;
            folded[sp]++;
        }
        if (w.done++ == gp_done_at_finish(&w.job)) {
            for (uint32_t sp = 0; sp < w.job.nspans; sp++)
                assert_int_equal(folded[sp], 1);
            finished++;
        }
    }
    if (finished != 1)
        fail_msg("alg %u, text at %llu, %llu bytes (%u units, %u spans, lead %s): finished %u times", alg,
                 (unsigned long long)text_len, (unsigned long long)len, w.job.nunits, w.job.nspans,
                 lead ? "ran" : "idle", finished);
    free(span_done);
    free(folded);
    free(refs);
    return (int)lead;
}

/* Every request reaches its finish once: units of every count about the span boundaries (a lead
 * alone in its span, gp_lead_alone_in_span, among them: the planner kept it as a ref), from a
 * 64-byte boundary (an idle lead) or not, ending there or not. */
static void test_refs_counted(void **state)
{
    static const uint32_t algs[] = { GP_ALG_AES_GCM, GP_ALG_CHACHA20_POLY1305, GP_ALG_CHACHA20 };
    /* About the first request with spans, spans of G = 4L (1 mod G: a lead alone), and spans that
     * grow past 4L (more than 4 L^3 units: 163841 is 1 mod G = 5L). */
    static const uint32_t units[] = { 1, 31, GP_SPANS_FROM - 1, GP_SPANS_FROM, GP_SPANS_FROM + 1, GP_SPANS_FROM + 2,
                                      1023, 1024, 1025, 1026, 2047, 2048, 2049, 3072, 3073, 7169, 131072, 131073,
                                      163841 };
    int alone = 0;

    (void)state;
    for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++)
        for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++)
            for (int order = 0; order < 3; order++) {
                /* a body of units[u] units whose last is short, then a tail */
                const uint64_t body = (uint64_t)(units[u] - 1) * GP_UNIT_BYTES + 1728;

                for (uint64_t at = 0; at <= 128; at += 64) {
                    const int lead = count_refs_case(algs[a], at, body + 22, order);

                    alone += lead && at % 64 == 0 && gp_alg_is_aead(algs[a]) && units[u] > GP_SPANS_FROM
                             && units[u] % gp_span_units(units[u]) == 1;
                    (void)count_refs_case(algs[a], at, body, order);
                }
                (void)count_refs_case(algs[a], 5, 59 + body + 22, order);   /* a head: the lead runs */
            }
    assert_true(alone > 0);
}

/*
 * The fold in spans (kernels/units.h, "Spans") and the Horner fold of more than L units, against
 * one Horner sum over the same elements, T = sum_k E_k Q^(n-1-k) with Q from the table, for n
 * past L, about the first request with spans and where G grows past 4L (more units than a
 * host-run request of real data could have here in time): random partials, a random lead MAC,
 * both MACs. GCM's partials are shifted as their units would shift them (gp_partial_shift,
 * "Shifted partials") after the reference is made from them as they were.
 */
static void test_span_fold(void **state)
{
    static const uint32_t algs[] = { GP_ALG_AES_GCM, GP_ALG_CHACHA20_POLY1305 };
    static const uint32_t counts[] = { GP_UNIT_LANES + 1, 300, GP_SPANS_FROM, GP_SPANS_FROM + 1, GP_SPANS_FROM + 77,
                                       4099, 163841, 200000 };

    (void)state;
    for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            const uint32_t alg = algs[a], n = counts[c];
            uint8_t key[32], iv[12];
            gp_key_sched ks;
            gp_msg_state st;
            gp_mac_pows pbuf;
            const gp_mac_pows *pw;
            gp_job j;
            gp_lane_mac q, want, got, ti, e;
            uint8_t *partials;

            gptest_rand_bytes(key, sizeof(key));
            gptest_rand_bytes(iv, sizeof(iv));
            gp_key_schedule(&ks, alg, key, 32);
            gp_msg_begin(&st, &ks, iv, 12);
            if (alg == GP_ALG_AES_GCM)
                gptest_rand_bytes(st.ghash_x, sizeof(st.ghash_x));   /* E_0: the lead's MAC */
            memset(&j, 0, sizeof(j));
            j.op = GP_OP_ENCRYPT;
            j.nunits = n;
            j.len = j.body_len = (uint64_t)n * GP_UNIT_BYTES;
            j.nspans = gp_spans_of(n);
            assert_true((j.nspans > 0) == (n > GP_SPANS_FROM) && j.nspans <= GP_UNIT_LANES * GP_UNIT_LANES);
            assert_int_equal(gp_partials_shifted(alg, &j), alg == GP_ALG_AES_GCM);
            assert_int_equal(gp_span_units(n) % GP_UNIT_LANES, 0);
            pw = gp_request_pows(&ks, &st, &pbuf);
            partials = xmalloc(gp_partials_bytes(&j));
            for (uint32_t k = 0; k < n; k++) {   /* partials of 4 words and a zero (GHASH) or 26-bit limbs */
                gptest_rand_bytes(partials + (size_t)k * GP_PARTIAL_BYTES, GP_PARTIAL_BYTES);
                for (int w = 0; w < 5; w++) {
                    uint32_t v = gp_load_le32(partials + (size_t)k * GP_PARTIAL_BYTES + 4 * w);

                    v = alg == GP_ALG_AES_GCM ? (w < 4 ? v : 0) : v & 0x3ffffffu;
                    gp_store_le32(partials + (size_t)k * GP_PARTIAL_BYTES + 4 * w, v);
                }
            }
            gp_mac_pow_get(&q, pw, GP_POW_UNIT + 1);   /* Q */
            gp_lane_mac_zero(&want);
            for (uint32_t k = 0; k < n; k++) {   /* E_0 = the lead's MAC, E_k = U_(k-1) */
                gp_fold_element(alg, &st, partials, k, &e);
                if (k != 0)
                    gp_mac_mul(alg, &want, &q);
                gp_mac_add(alg, &want, &e);
            }
            if (gp_fold_shifts(&j))   /* the lanes apply the last unit's shift Q too */
                gp_mac_mul(alg, &want, &q);
            for (uint32_t u = 0; u < n; u++) {   /* as the units store them */
                gp_partial_load(partials + (size_t)u * GP_PARTIAL_BYTES, &e);
                gp_partial_shift(&ks, &j, u, &e);
                gp_partial_store(partials + (size_t)u * GP_PARTIAL_BYTES, &e);
            }
            for (uint32_t s = 0; s < j.nspans; s++)
                gp_unit_span(&ks, &j, pw, &st, partials, s);
            gp_lane_mac_zero(&got);
            for (uint32_t i = 0; i < GP_UNIT_LANES; i++) {
                gp_fold_lane(&ks, &j, pw, &st, partials, i, &ti);
                gp_mac_add(alg, &got, &ti);
            }
            if (alg == GP_ALG_AES_GCM) {
                assert_memory_equal(got.w, want.w, sizeof(got.w));
            } else {
                BIGNUM *x = p1305_bn(got.w), *y = p1305_bn(want.w);

                if (BN_cmp(x, y) != 0)
                    fail_msg("ChaCha20-Poly1305, %u units, %u spans: the fold differs", n, j.nspans);
                BN_free(x);
                BN_free(y);
            }
            free(partials);
        }
}

/* A whole request through lead, units and finish from random starting offsets, against the serial
 * gp_msg_run: output, state and the tag after it. */
static void test_units_vs_serial(void **state)
{
    static const struct { uint32_t alg; size_t keylen, ivlen; } algs[] = {
        { GP_ALG_AES_CTR, 24, 16 }, { GP_ALG_AES_GCM, 32, 12 }, { GP_ALG_CHACHA20, 32, 16 },
        { GP_ALG_CHACHA20_POLY1305, 32, 12 },
    };
    int shifted[4] = { 0 }, shifted_horner = 0, idle_leads = 0, dual = 0, gcm_not_dual = 0, spread_units = 0;
    int spanned[4] = { 0 }, spanned_shifts = 0;

    (void)state;
    for (int iter = 0; iter < 160; iter++) {
        /* The 7th of every 10 starts its text on a 64-byte boundary after whole AAD blocks, so its
         * lead has nothing to do (gp_lead_idle) when the request has body units. */
        const int aligned = iter % 10 == 6;
        size_t a = (size_t)iter % 4, pre = aligned ? 64 * gptest_rand_range(0, 3) : gptest_rand_range(0, 200);
        size_t aad = aligned ? 16 * gptest_rand_range(0, 2) : gptest_rand_range(0, 40);
        /* Short, a few units, and (every 10th) more units than a finisher has lanes, so that
         * its lanes take several partials each; the 5th and 6th of every 10 a body of whole units
         * (the finisher's lanes apply the last unit's shift: gp_fold_shifts), in every other 20
         * up to GP_TAG_POWS of them (GCM's dual fold, gp_fold_dual), else more, up to 3L. */
        const int few = iter / 20 % 2 == 0;
        /* The 41st, 43rd, 121st and 123rd (GCM, ChaCha20-Poly1305): more than GP_SPANS_FROM units,
         * the fold in spans (kernels/units.h), a body of whole units first, then one with a short
         * last unit. */
        const int spans = iter % 80 == 41 || iter % 80 == 43;
        size_t len = spans ? (iter < 80 ? (64 - pre % 64) % 64 : gptest_rand_range(1, 2047))
                             + (size_t)gptest_rand_range(GP_SPANS_FROM + 1, GP_SPANS_FROM + 3 * gp_span_units(GP_SPANS_FROM) + 40)
                                   * GP_UNIT_BYTES
                   : iter % 10 == 9 ? gptest_rand_range(GP_UNIT_LANES, 3 * GP_UNIT_LANES) * GP_UNIT_BYTES
                                      + gptest_rand_range(0, 300)
                     : iter % 10 == 4 || iter % 10 == 5
                         ? (64 - pre % 64) % 64 + (few ? gptest_rand_range(1, GP_TAG_POWS)
                                                       : gptest_rand_range(GP_TAG_POWS + 1, 3 * GP_UNIT_LANES))
                                                      * GP_UNIT_BYTES
                     : gptest_rand_range(0, 4) == 0 ? gptest_rand_range(0, 200)
                     : gptest_rand_range(0, 3 * GP_UNIT_BYTES + 300);
        /* Every 3rd request ends on a 64-byte text boundary: the finisher's word-only path. */
        const size_t to_boundary = iter % 3 == 1 ? (64 - (pre + len) % 64) % 64 : 0;
        uint32_t op = gptest_rand_range(0, 1) ? GP_OP_ENCRYPT : GP_OP_DECRYPT;
        uint8_t key[32], iv[16], t1[16], t2[16];
        uint8_t *buf, *o1, *o2, *part;

        len += to_boundary;
        buf = xmalloc(pre + len + aad + 1);
        o1 = xmalloc(pre + len + 1);
        o2 = xmalloc(pre + len + 1);
        part = xmalloc(((len / GP_UNIT_BYTES) + 2 + gp_spans_of((uint32_t)(len / GP_UNIT_BYTES) + 2))
                       * GP_PARTIAL_BYTES);
        gp_key_sched ks;
        gp_msg_state s1, s2;
        gp_mac_pows pbuf;
        const gp_mac_pows *pw;
        gp_job j;
        const int aead = gp_alg_is_aead(algs[a].alg);

        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        gptest_rand_bytes(buf, pre + len + aad);
        gp_key_schedule(&ks, algs[a].alg, key, algs[a].keylen);
        gp_msg_begin(&s1, &ks, iv, algs[a].ivlen);
        if (aead)
            gp_msg_run(&s1, &ks, GP_OP_AAD, buf + pre + len, NULL, aad);
        gp_msg_run(&s1, &ks, op, buf, o1, pre);
        s2 = s1;
        gp_msg_run(&s1, &ks, op, buf + pre, o1 + pre, len);
        gp_job_plan(&j, &s2, op, len, 0);
        pw = gp_request_pows(&ks, &s2, &pbuf);
        if (algs[a].alg == GP_ALG_CHACHA20_POLY1305) {
            /* The engine's table, made on demand: first for a shorter request of the message,
             * then extended for this one; an entry the units read without its being made holds
             * garbage and breaks the MAC. Every entry made equals the full table's. */
            gp_mac_pows full = pbuf;
            gp_pows_have have = { 0, 0, 0, 0, 0 };
            gp_lane_mac p;
            gp_job shorter;

            memset(&pbuf, 0xa5, sizeof(pbuf));
            gp_mac_key(&p, &ks, &s2);
            gp_job_plan(&shorter, &s2, op, gptest_rand_range(0, len), 0);
            gp_mac_pows_cover(&pbuf, &have, algs[a].alg, &p, &shorter);
            gp_mac_pows_cover(&pbuf, &have, algs[a].alg, &p, &j);
            for (uint32_t l = GP_UNIT_LANES - have.lanes; l < GP_UNIT_LANES; l++)
                assert_memory_equal(pbuf.p[GP_POW_LANE + l], full.p[GP_POW_LANE + l], 20);
            for (uint32_t i = 0; i < have.units; i++)
                assert_memory_equal(pbuf.p[GP_POW_UNIT + i], full.p[GP_POW_UNIT + i], 20);
            for (uint32_t c = 1; c <= GP_UNIT_LANES; c++)
                if (have.fin & (1u << (c - 1)))
                    assert_memory_equal(pbuf.p[GP_POW_FIN + c - 1], full.p[GP_POW_FIN + c - 1], 20);
            if (have.stride)
                assert_memory_equal(pbuf.p[GP_POW_STRIDE], full.p[GP_POW_STRIDE], 20);
            if (have.near)
                assert_memory_equal(pbuf.p[GP_POW_NEAR], full.p[GP_POW_NEAR], 2 * 20);
            pw = &pbuf;
        }
        if (j.nunits > 0 && gp_fold_shifts(&j)) {
            shifted[a]++;
            shifted_horner += aead && j.nunits > GP_UNIT_LANES;
            dual += gp_fold_dual(algs[a].alg, &j);
            gcm_not_dual += algs[a].alg == GP_ALG_AES_GCM && !gp_fold_dual(algs[a].alg, &j);
        }
        if (j.nspans != 0) {
            spanned[a]++;
            spanned_shifts += gp_fold_shifts(&j);
        }
        if (gp_lead_idle(&j, &s2)) {
            /* Skipping it (as the planners do) leaves the state the lead would have left. */
            gp_msg_state s3 = s2;

            gp_lead_skip(&s3);
            gp_unit_lead(&s2, &ks, &j, NULL, buf + pre, o2 + pre);
            assert_memory_equal(&s2, &s3, sizeof(s2));
            idle_leads++;
        } else {
            gp_unit_lead(&s2, &ks, &j, NULL, buf + pre, o2 + pre);
        }
        /* Every other request's units spread as the latency kernels run them, a thread a block. */
        for (uint32_t u = 0; u < j.nunits; u++)
            (iter % 2 ? gp_unit_body_spread : gp_unit_body)(&j, &ks, pw, u, buf + pre + j.head_len,
                                                            o2 + pre + j.head_len,
                                                            part + (size_t)u * GP_PARTIAL_BYTES);
        spread_units += iter % 2 ? j.nunits : 0;
        if (j.nunits > 0)
            gp_unit_finish(&s2, &ks, &j, pw, part, buf + pre + j.head_len + j.body_len,
                           o2 + pre + j.head_len + j.body_len);
        assert_memory_equal(o1 + pre, o2 + pre, len);
        if (aead) {
            /* The request's speculative tag is the tag a final call right now produces. */
            assert_int_equal(s2.spec_valid, 1);
            gp_msg_run(&s1, &ks, GP_OP_TAG, NULL, t1, 0);
            assert_memory_equal(s2.spec_tag, t1, 16);
            gp_msg_run(&s2, &ks, GP_OP_TAG, NULL, t2, 0);
            assert_memory_equal(t1, t2, 16);
        } else {
            assert_memory_equal(s1.ctr, s2.ctr, 16);
            assert_int_equal(s1.ks_used, s2.ks_used);
        }
        free(buf);
        free(o1);
        free(o2);
        free(part);
    }
    /* Every algorithm met a body of whole units, and an AEAD one with more units than lanes. */
    for (int a = 0; a < 4; a++)
        assert_true(shifted[a] >= 4);
    assert_true(shifted_horner >= 1);
    assert_true(idle_leads >= 8);
    /* GCM's dual fold (the tag's product on the finisher's lanes) and its single fold both met. */
    assert_true(dual >= 3);
    assert_true(gcm_not_dual >= 3);
    assert_true(spread_units >= 100);
    /* Both AEADs folded in spans, with and without the last unit's shift on the lanes. */
    assert_true(spanned[1] >= 2 && spanned[3] >= 2);
    assert_true(spanned_shifts >= 1 && spanned_shifts <= 3);
}

/* A chunk's Horner sum Z = B_0 H^3 + B_1 H^2 + B_2 H + B_3 the integer way (gp_lane_mac_chunk's
 * first three passes). */
static void ghash_horner(const uint64_t h[2], const uint32_t c[16], gp_lane_mac *z)
{
    gp_lane_mac hm, b;

    gp_lane_mac_set_x(&hm, h);
    gp_mac_block(GP_ALG_AES_GCM, c, z);
    for (int j = 1; j < 4; j++) {
        gp_mac_mul(GP_ALG_AES_GCM, z, &hm);
        gp_mac_block(GP_ALG_AES_GCM, c + 4 * j, &b);
        gp_mac_add(GP_ALG_AES_GCM, z, &b);
    }
}

/* The tensor-core GHASH table (kernels/ghash_mma.h) read back by its documented layout gives the
 * integer Horner sum, for random keys and chunks and for single-bit chunks. */
static void test_ghash_mma_table(void **state)
{
    gp_ghash_mma *t = malloc(sizeof(*t));

    (void)state;
    assert_non_null(t);
    for (int key = 0; key < 4; key++) {
        uint64_t h[2] = { gptest_rand_u64(), gptest_rand_u64() };

        if (key == 0) {   /* H = 1: Z is the plain sum */
            h[0] = 1ull << 63;
            h[1] = 0;
        }
        gp_ghash_mma_make(t, h);
        for (int i = 0; i < 600; i++) {
            uint32_t c[16];
            gp_lane_mac want, got;

            if (i < 512) {
                memset(c, 0, sizeof(c));
                c[i / 32] = 1u << (i % 32);
            } else {
                gptest_rand_bytes(c, sizeof(c));
            }
            ghash_horner(h, c, &want);
            gp_ghash_mma_apply(t, c, &got);
            assert_memory_equal(want.w, got.w, sizeof(want.w));
        }
    }
    free(t);
}

/*
 * The warp's data path of gp_ghash_mma_chunk, emulated lane by lane from the PTX ISA's fragment
 * layouts of mma.m16n8k256 (b1, and.popc): quad transposes in, 2 m-tiles x 16 n-tiles x 2 k-tiles,
 * parities packed, quad transpose out. Every lane must end with its own chunk's Z.
 */
static void test_ghash_mma_fragments(void **state)
{
    gp_ghash_mma *t = malloc(sizeof(*t));
    uint64_t h[2] = { gptest_rand_u64(), gptest_rand_u64() };
    uint32_t c[32][16], a[32][16], pk[32][4];

    (void)state;
    assert_non_null(t);
    gp_ghash_mma_make(t, h);
    gptest_rand_bytes(c, sizeof(c));
    memset(c[3], 0, sizeof(c[3]));   /* a lane without a chunk */
    /* In: lane 4g + t holds a[4b + q] = word t of block b of lane 4g + q's chunk. */
    for (int l = 0; l < 32; l++)
        for (int b = 0; b < 4; b++)
            for (int q = 0; q < 4; q++)
                a[l][4 * b + q] = c[(l & ~3) + q][4 * b + (l & 3)];
    memset(pk, 0, sizeof(pk));
    for (int nt = 0; nt < 16; nt++) {
        for (int mt = 0; mt < 2; mt++) {
            /* A (16 x 256) and B (256 x 8) as bits, from the lanes' registers. */
            static uint8_t A[16][256], B[256][8];
            int d[32][4];   /* each lane's d0..d3 */

            memset(d, 0, sizeof(d));
            for (int kt = 0; kt < 2; kt++) {
                for (int l = 0; l < 32; l++) {
                    const int g = l >> 2, tq = l & 3;
                    const uint32_t a0 = a[l][8 * kt + 2 * mt], a1 = a[l][8 * kt + 2 * mt + 1];
                    const uint32_t a2 = a[l][8 * kt + 4 + 2 * mt], a3 = a[l][8 * kt + 4 + 2 * mt + 1];
                    const uint32_t b0 = t->frag[nt][l][2 * kt], b1 = t->frag[nt][l][2 * kt + 1];

                    for (int bit = 0; bit < 32; bit++) {
                        A[g][32 * tq + bit] = (a0 >> bit) & 1;
                        A[g + 8][32 * tq + bit] = (a1 >> bit) & 1;
                        A[g][128 + 32 * tq + bit] = (a2 >> bit) & 1;
                        A[g + 8][128 + 32 * tq + bit] = (a3 >> bit) & 1;
                        B[32 * tq + bit][g] = (b0 >> bit) & 1;
                        B[128 + 32 * tq + bit][g] = (b1 >> bit) & 1;
                    }
                }
                for (int l = 0; l < 32; l++) {
                    const int g = l >> 2, tq = l & 3;
                    const int row[4] = { g, g, g + 8, g + 8 }, col[4] = { 2 * tq, 2 * tq + 1, 2 * tq, 2 * tq + 1 };

                    for (int i = 0; i < 4; i++)
                        for (int k = 0; k < 256; k++)
                            d[l][i] += A[row[i]][k] & B[k][col[i]];
                }
            }
            for (int l = 0; l < 32; l++) {
                pk[l][2 * mt] |= (((uint32_t)d[l][0] & 1u) | ((uint32_t)d[l][1] & 1u) << 1) << (2 * nt);
                pk[l][2 * mt + 1] |= (((uint32_t)d[l][2] & 1u) | ((uint32_t)d[l][3] & 1u) << 1) << (2 * nt);
            }
        }
    }
    /* Out: lane 4g + q's Z word w is what lane 4g + w packed for quad position q. */
    for (int l = 0; l < 32; l++) {
        gp_lane_mac want, got;

        for (int w = 0; w < 4; w++)
            got.w[w] = pk[(l & ~3) + w][l & 3];
        got.w[4] = 0;
        ghash_horner(h, c[l], &want);
        assert_memory_equal(want.w, got.w, sizeof(want.w));
    }
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sbox_exhaustive),
        cmocka_unit_test(test_aes_fips197),
        cmocka_unit_test(test_aes_vs_openssl),
        cmocka_unit_test(test_chacha20_block_rfc),
        cmocka_unit_test(test_poly1305_rfc),
        cmocka_unit_test(test_poly1305_vs_sodium),
        cmocka_unit_test(test_aead_rfc),
        cmocka_unit_test(test_msg_unit_vs_references),
        cmocka_unit_test(test_ctr_wrap),
        cmocka_unit_test(test_gcm_inc32_wrap),
        cmocka_unit_test(test_chacha20_counter_carry),
        cmocka_unit_test(test_aes_ttable),
        cmocka_unit_test(test_mac_pows),
        cmocka_unit_test(test_stride_pows),
        cmocka_unit_test(test_unit_lanes),
        cmocka_unit_test(test_units_vs_serial),
        cmocka_unit_test(test_refs_counted),
        cmocka_unit_test(test_span_fold),
        cmocka_unit_test(test_ghash_mma_table),
        cmocka_unit_test(test_ghash_mma_fragments),
    };

    if (sodium_init() < 0)
        return 1;
    gptest_rand_seed();
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
