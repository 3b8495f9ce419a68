/* SPDX-License-Identifier: Apache-2.0 */
/* Passthrough: with no GPU to serve (backend auto), gpuprov's ciphers are the default provider's functions, byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "gptest.h"

/*
 * Run by meson under backend auto twice: with CUDA_VISIBLE_DEVICES=-1 (no GPU can ever serve:
 * provider/passthrough.c gives the default provider's functions under gpuprov's names;
 * GPTEST_EXPECT_PASSTHROUGH=1) and with the host executor standing in for a GPU (gpuprov's own
 * table, its lane counting each call; GPTEST_EXPECT_PASSTHROUGH=0). Either way every byte must
 * match the default provider's, and a fetch with provider=gpuprov must succeed.
 */

static const char *const ciphers[] = {
    "AES-128-GCM", "AES-192-GCM", "AES-256-GCM", "AES-128-CTR", "AES-192-CTR", "AES-256-CTR",
    "ChaCha20", "ChaCha20-Poly1305",
};

static int expect_passthrough(void)
{
    const char *v = getenv("GPTEST_EXPECT_PASSTHROUGH");

    return v != NULL && strcmp(v, "1") == 0;
}

static uint64_t ops_counted(const gptest_env *env)
{
    uint64_t v = 0;
    OSSL_PARAM p[] = { OSSL_PARAM_uint64("gpuprov-stats-ops", &v), OSSL_PARAM_END };

    assert_true(OSSL_PROVIDER_get_params(env->gpuprov, p));
    return v;
}

static int is_aead(const EVP_CIPHER *c)
{
    return (EVP_CIPHER_get_flags(c) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0;
}

/* One message through ctx in up to three updates (AAD first for an AEAD); the tag into tag. */
static void run_message(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *c, const uint8_t *key, const uint8_t *iv,
                        const uint8_t *aad, size_t aadlen, const uint8_t *in, size_t len, const size_t cut[2],
                        uint8_t *out, uint8_t tag[16], int enc)
{
    int outl, fin = 0;
    size_t done = 0;

    assert_int_equal(EVP_CipherInit_ex2(ctx, c, key, iv, enc, NULL), 1);
    if (is_aead(c)) {
        assert_int_equal(EVP_CipherUpdate(ctx, NULL, &outl, aad, (int)aadlen), 1);
        if (!enc)
            assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tag), 1);
    }
    for (int i = 0; i < 3; i++) {
        size_t end = i < 2 ? cut[i] : len;

        assert_int_equal(EVP_CipherUpdate(ctx, out + done, &outl, in + done, (int)(end - done)), 1);
        assert_int_equal((size_t)outl, end - done);
        done = end;
    }
    assert_int_equal(EVP_CipherFinal_ex(ctx, out + done, &fin), 1);
    assert_int_equal(fin, 0);
    if (is_aead(c) && enc)
        assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag), 1);
}

/* Every cipher: the same ciphertext and tag as the default provider's over random messages, its
 * own decryption, a wrong tag refused, and EVP_CIPHER_CTX_copy mid-message. */
static void test_same_bytes(void **state)
{
    const gptest_env *env = *state;
    uint64_t ops_before = ops_counted(env);

    for (size_t a = 0; a < sizeof(ciphers) / sizeof(ciphers[0]); a++) {
        EVP_CIPHER *cg = gptest_fetch(env, ciphers[a], 1), *cd = gptest_fetch(env, ciphers[a], 0);
        EVP_CIPHER_CTX *g = EVP_CIPHER_CTX_new(), *d = EVP_CIPHER_CTX_new();

        assert_non_null(g);
        assert_non_null(d);
        assert_string_equal(OSSL_PROVIDER_get0_name(EVP_CIPHER_get0_provider(cg)), "gpuprov");
        assert_non_null(EVP_CIPHER_gettable_ctx_params(cg));
        assert_non_null(EVP_CIPHER_settable_ctx_params(cg));
        for (int round = 0; round < 20; round++) {
            size_t len = gptest_rand_range(0, 3000), aadlen = gptest_rand_range(0, 40);
            size_t cut[2] = { gptest_rand_range(0, len), 0 };
            uint8_t key[32], iv[16], aad[40], tg[16], td[16];
            uint8_t *in = malloc(len + 1), *og = malloc(len + 1), *od = malloc(len + 1), *back = malloc(len + 1);

            assert_true(in && og && od && back);
            cut[1] = gptest_rand_range(cut[0], len);
            gptest_rand_bytes(key, sizeof(key));
            gptest_rand_bytes(iv, sizeof(iv));
            gptest_rand_bytes(aad, sizeof(aad));
            gptest_rand_bytes(in, len);
            run_message(g, cg, key, iv, aad, aadlen, in, len, cut, og, tg, 1);
            run_message(d, cd, key, iv, aad, aadlen, in, len, cut, od, td, 1);
            assert_memory_equal(og, od, len);
            if (is_aead(cg)) {
                assert_memory_equal(tg, td, 16);
                run_message(g, cg, key, iv, aad, aadlen, og, len, cut, back, tg, 0);
                assert_memory_equal(back, in, len);
                /* a flipped tag bit: Final fails, as the default's does */
                tg[round % 16] ^= 1;
                assert_int_equal(EVP_CipherInit_ex2(g, cg, key, iv, 0, NULL), 1);
                {
                    int outl;

                    assert_int_equal(EVP_CipherUpdate(g, NULL, &outl, aad, (int)aadlen), 1);
                    assert_int_equal(EVP_CIPHER_CTX_ctrl(g, EVP_CTRL_AEAD_SET_TAG, 16, tg), 1);
                    assert_int_equal(EVP_CipherUpdate(g, back, &outl, og, (int)len), 1);
                    assert_int_equal(EVP_CipherFinal_ex(g, back, &outl), 0);
                }
            }
            /* A copy taken mid-message goes on as the original would have. */
            {
                EVP_CIPHER_CTX *cp = EVP_CIPHER_CTX_new();
                int outl;

                assert_int_equal(EVP_CipherInit_ex2(g, cg, key, iv, 1, NULL), 1);
                if (is_aead(cg))
                    assert_int_equal(EVP_CipherUpdate(g, NULL, &outl, aad, (int)aadlen), 1);
                assert_int_equal(EVP_CipherUpdate(g, og, &outl, in, (int)cut[0]), 1);
                assert_int_equal(EVP_CIPHER_CTX_copy(cp, g), 1);
                assert_int_equal(EVP_CipherUpdate(cp, og + cut[0], &outl, in + cut[0], (int)(len - cut[0])), 1);
                assert_int_equal(EVP_CipherFinal_ex(cp, og + len, &outl), 1);
                assert_memory_equal(og, od, len);
                if (is_aead(cg)) {
                    assert_int_equal(EVP_CIPHER_CTX_ctrl(cp, EVP_CTRL_AEAD_GET_TAG, 16, tg), 1);
                    assert_memory_equal(tg, td, 16);
                }
                EVP_CIPHER_CTX_free(cp);
            }
            free(in);
            free(og);
            free(od);
            free(back);
        }
        EVP_CIPHER_CTX_free(g);
        EVP_CIPHER_CTX_free(d);
        EVP_CIPHER_free(cg);
        EVP_CIPHER_free(cd);
    }
    /* Passthrough: gpuprov's own code never ran, so it counted nothing; its own table: the lane
     * counted every call. */
    if (expect_passthrough())
        assert_int_equal(ops_counted(env), ops_before);
    else
        assert_true(ops_counted(env) > ops_before);
}

/* A TLS 1.2 GCM record through EVP_Cipher, as libssl sends one, equal to the default's. */
static void test_tls12_record(void **state)
{
    const gptest_env *env = *state;
    EVP_CIPHER *cg = gptest_fetch(env, "AES-256-GCM", 1), *cd = gptest_fetch(env, "AES-256-GCM", 0);
    static const uint8_t key[32] = { 1, 2, 3 }, fixed[12] = { 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2 };
    uint8_t rec[2][8 + 100 + 16];

    for (int s = 0; s < 2; s++) {
        EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
        uint8_t aad[13] = { 0, 0, 0, 0, 0, 0, 0, 1, 23, 3, 3, 0, 8 + 100 };

        assert_int_equal(EVP_CipherInit_ex(ctx, s ? cg : cd, NULL, key, NULL, 1), 1);
        /* the whole IV (ctrl -1): both sides send the same explicit nonce */
        assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IV_FIXED, -1, (void *)fixed), 1);
        assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_TLS1_AAD, 13, aad), 16);
        memset(rec[s], 0x5a, sizeof(rec[s]));
        assert_int_equal(EVP_Cipher(ctx, rec[s], rec[s], sizeof(rec[s])), (int)sizeof(rec[s]));
        EVP_CIPHER_CTX_free(ctx);
    }
    assert_memory_equal(rec[0], rec[1], sizeof(rec[0]));
    EVP_CIPHER_free(cg);
    EVP_CIPHER_free(cd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bytes),
        cmocka_unit_test(test_tls12_record),
    };

    return cmocka_run_group_tests(tests, gptest_env_setup, gptest_env_teardown);
}
