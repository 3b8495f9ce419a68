/* SPDX-License-Identifier: Apache-2.0 */
/* Bad-input EVP tests: misuse must fail cleanly, queue an error, never crash and lose nothing. */
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/err.h>

#include "evp_common.h"

static gptest_env *g_env;   /* the group's environment, for helpers */

static int group_setup(void **state)
{
    int rc = evp_group_setup(state);

    g_env = *state;
    return rc;
}

static int is_aead(int idx)
{
    return evp_ciphers[idx].kind == K_GCM || evp_ciphers[idx].kind == K_CCP;
}

/* How a refusal is checked. Plain refusals hold on the default provider too; STRICT_RC marks calls
 * default accepts, STRICT_ERR calls default fails without queueing an error (see STRICT_CHECK). */
enum { PLAIN = 0, STRICT_RC = 1, STRICT_ERR = 2, VERDICT = 4 };   /* VERDICT: a failure is the
                                                                   * answer, no error queued (both) */

static void refused(int rc, const char *what, int strict)
{
    int err = gptest_errors_pending();
    char msg[256];

    snprintf(msg, sizeof(msg), "%s is refused (rc %d)", what, rc);
    if (strict & VERDICT) {
        if (rc > 0)
            fail_msg("%s: accepted (rc %d)", what, rc);
        if (err)
            fail_msg("%s: an error on the queue (the default provider queues none)", what);
        return;
    }
    if (strict & STRICT_RC)
        STRICT_CHECK(rc <= 0, msg);
    else if (rc > 0)
        fail_msg("%s: accepted (rc %d)", what, rc);
    snprintf(msg, sizeof(msg), "%s leaves an error on the queue", what);
    if (strict & (STRICT_RC | STRICT_ERR))
        STRICT_CHECK(err, msg);
    else if (!err)
        fail_msg("%s: failed without an error on the queue", what);
}

static EVP_CIPHER_CTX *new_ctx(int idx, const unsigned char *key, const unsigned char *iv, int enc)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

    assert_non_null(c);
    assert_int_equal(EVP_CipherInit_ex2(c, evp_cipher(g_env, idx, 1), key, iv, enc, NULL), 1);
    return c;
}

/* Reference one-shot encryption on a fresh default context (12-byte IV for the AEADs). */
static void ref_encrypt(int idx, const unsigned char *key, const unsigned char *iv,
                        const unsigned char *aad, size_t aadlen, const unsigned char *pt, size_t len,
                        unsigned char *ct, unsigned char tag[16])
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int outl;

    assert_int_equal(EVP_CipherInit_ex2(c, evp_cipher(g_env, idx, 0), key, iv, 1, NULL), 1);
    if (is_aead(idx))
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, (int)aadlen), 1);
    assert_int_equal(EVP_CipherUpdate(c, ct, &outl, pt, (int)len), 1);
    assert_int_equal(EVP_CipherFinal_ex(c, ct + len, &outl), 1);
    if (is_aead(idx))
        assert_int_equal(evp_get_tag(c, tag, 16), 1);
    EVP_CIPHER_CTX_free(c);
}

/*
 * "Lose nothing": after a refused call the same context, re-initialised with key and IV (plus
 * IVLEN 12 for GCM, in case the bad call was an IVLEN), must process a proper message exactly as
 * the default provider does.
 */
static void proper_message(EVP_CIPHER_CTX *c, int idx, int enc)
{
    unsigned char key[32], iv[16], aad[21], pt[150], ct[150 + 16], out[150 + 16], tag[16], t[16];
    int outl, n = 0;

    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(pt, sizeof(pt));
    ref_encrypt(idx, key, iv, aad, sizeof(aad), pt, sizeof(pt), ct, tag);
    if (evp_ciphers[idx].kind == K_GCM) {
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, key, NULL, enc, NULL), 1);
        assert_int_equal(evp_set_ivlen(c, 12), 1);
    }
    assert_int_equal(EVP_CipherInit_ex2(c, NULL, key, iv, enc, NULL), 1);
    if (is_aead(idx) && !enc)
        assert_int_equal(evp_set_tag(c, tag, 16), 1);
    if (is_aead(idx))
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, (int)sizeof(aad)), 1);
    assert_int_equal(EVP_CipherUpdate(c, out, &outl, enc ? pt : ct, 100), 1);
    n += outl;
    assert_int_equal(EVP_CipherUpdate(c, out + n, &outl, (enc ? pt : ct) + n, 50), 1);
    n += outl;
    assert_int_equal(n, 150);
    assert_int_equal(EVP_CipherFinal_ex(c, out + n, &outl), 1);
    assert_int_equal(outl, 0);
    assert_memory_equal(out, enc ? ct : pt, sizeof(pt));
    if (is_aead(idx) && enc) {
        assert_int_equal(evp_get_tag(c, t, 16), 1);
        assert_memory_equal(t, tag, 16);
    }
    assert_false(gptest_errors_pending());
}

/* ---- no key ---------------------------------------------------------------------------------- */

static void test_no_key(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++)
        for (int enc = 0; enc < 2; enc++) {
            unsigned char iv[16] = { 1 }, in[32] = { 2 }, out[32];
            int outl = -7;
            char what[96];
            EVP_CIPHER_CTX *c = new_ctx(idx, NULL, iv, enc);

            /* No key, no output. Measured: default 3.0.19 refuses this for CTR, GCM and ChaCha20
             * but its ChaCha20-Poly1305 encrypts/decrypts with an all-zero key schedule. */
            snprintf(what, sizeof(what), "%s %s update without a key", evp_ciphers[idx].name,
                     enc ? "encrypt" : "decrypt");
            refused(EVP_CipherUpdate(c, out, &outl, in, sizeof(in)), what,
                    evp_ciphers[idx].kind == K_CCP ? STRICT_RC : PLAIN);
            proper_message(c, idx, enc);
            EVP_CIPHER_CTX_free(c);
        }
}

/* ---- wrong key length ------------------------------------------------------------------------- */

static void test_wrong_keylen(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        const evp_cipher_info *ci = &evp_ciphers[idx];
        unsigned char key[33] = { 3 }, iv[16] = { 4 };
        EVP_CIPHER_CTX *c = new_ctx(idx, key, iv, 1);
        const int bad[] = { (int)ci->keylen - 1, (int)ci->keylen + 1, 0, 64 };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char what[96];

            snprintf(what, sizeof(what), "%s key length %d", ci->name, bad[i]);
            refused(EVP_CIPHER_CTX_set_key_length(c, bad[i]), what, PLAIN);
            assert_int_equal(EVP_CIPHER_CTX_get_key_length(c), (int)ci->keylen);
        }
        /* Setting KEYLEN directly as a param: refusing it or ignoring it are both acceptable,
         * but the key length must not change. */
        {
            size_t kl = ci->keylen + 8;
            OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_KEYLEN, &kl),
                                OSSL_PARAM_construct_end() };
            size_t got = 0;
            OSSL_PARAM g[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_KEYLEN, &got),
                                OSSL_PARAM_construct_end() };

            (void)EVP_CIPHER_CTX_set_params(c, p);
            (void)gptest_errors_pending();
            assert_int_equal(EVP_CIPHER_CTX_get_params(c, g), 1);
            assert_int_equal(got, ci->keylen);
        }
        proper_message(c, idx, 1);
        EVP_CIPHER_CTX_free(c);

        /* Through the raw dispatch, where EVP cannot supply the length for us: both providers
         * refuse an init whose keylen differs from the algorithm's. */
        for (int gp = 0; gp < 2; gp++) {
            evp_raw raw;
            void *pc;

            evp_raw_get(g_env, gp, ci->name, &raw);
            pc = raw.newctx(raw.provctx);
            assert_non_null(pc);
            for (int e = 0; e < 2; e++) {
                char what[96];

                snprintf(what, sizeof(what), "%s raw %s init with keylen %zu (%s)", ci->name,
                         e ? "encrypt" : "decrypt", ci->keylen - 1, gp ? "gpuprov" : "default");
                refused((e ? raw.einit : raw.dinit)(pc, key, ci->keylen - 1, iv, ci->ivlen, NULL),
                        what, PLAIN);
                snprintf(what, sizeof(what), "%s raw init with keylen %zu (%s)", ci->name,
                         ci->keylen + 1, gp ? "gpuprov" : "default");
                refused((e ? raw.einit : raw.dinit)(pc, key, ci->keylen + 1, iv, ci->ivlen, NULL),
                        what, PLAIN);
            }
            /* and a right-length init still works on the same provider context */
            assert_int_equal(raw.einit(pc, key, ci->keylen, iv, ci->ivlen, NULL), 1);
            raw.freectx(pc);
        }
    }
}

/* ---- IV lengths ------------------------------------------------------------------------------- */

static int set_ivlen_param(EVP_CIPHER_CTX *c, size_t ivlen)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen),
                        OSSL_PARAM_construct_end() };

    return EVP_CIPHER_CTX_set_params(c, p);
}

static size_t get_ivlen_param(EVP_CIPHER_CTX *c)
{
    size_t v = 0;
    OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_IVLEN, &v),
                        OSSL_PARAM_construct_end() };

    assert_int_equal(EVP_CIPHER_CTX_get_params(c, p), 1);
    return v;
}

static void test_gcm_ivlen(void **state)
{
    (void)state;
    for (int idx = 3; idx < 6; idx++) {
        unsigned char key[32] = { 5 };
        EVP_CIPHER_CTX *c = new_ctx(idx, key, NULL, 1);
        /* SP 800-38D allows any IV length >= 1 bit; OpenSSL caps it at 128 bytes (GCM_IV_MAX_SIZE) */
        const size_t bad[] = { 0, 129, 4096, SIZE_MAX };

        assert_int_equal(set_ivlen_param(c, 20), 1);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char what[96];

            snprintf(what, sizeof(what), "%s IVLEN %zu", evp_ciphers[idx].name, bad[i]);
            refused(set_ivlen_param(c, bad[i]), what, PLAIN);
            assert_int_equal(get_ivlen_param(c), 20);   /* unchanged */
        }
        refused(evp_set_ivlen(c, 0), "GCM EVP_CTRL_AEAD_SET_IVLEN 0", PLAIN);
        refused(evp_set_ivlen(c, 129), "GCM EVP_CTRL_AEAD_SET_IVLEN 129", PLAIN);
        assert_int_equal(set_ivlen_param(c, 1), 1);
        assert_int_equal(set_ivlen_param(c, 128), 1);
        proper_message(c, idx, 1);
        EVP_CIPHER_CTX_free(c);
    }
}

/*
 * ChaCha20-Poly1305 nonces are 96 bits (RFC 8439 §2.8). Measured on OpenSSL 3.0.19's default
 * provider: AEAD_IVLEN 12 is accepted, every other value (0..11, 13..) is refused, the IVLEN getter
 * answers 12; gpuprov must match, and an IV init after IVLEN 12 uses the whole nonce.
 */
static void test_ccp_ivlen(void **state)
{
    int idx = evp_cipher_index("ChaCha20-Poly1305");
    unsigned char key[32], iv[12], pt[70], out[2][70 + 16], tag[2][16], ref[86], rtag[16];
    EVP_CIPHER_CTX *c;

    (void)state;
    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(pt, sizeof(pt));
    c = new_ctx(idx, key, NULL, 1);
    for (size_t ivlen = 0; ivlen <= 17; ivlen++) {
        char what[96];

        if (ivlen == 12)
            continue;
        snprintf(what, sizeof(what), "ChaCha20-Poly1305 IVLEN %zu", ivlen);
        refused(set_ivlen_param(c, ivlen), what, PLAIN);
        assert_int_equal(get_ivlen_param(c), 12);
    }
    refused(set_ivlen_param(c, SIZE_MAX), "ChaCha20-Poly1305 IVLEN SIZE_MAX", PLAIN);
    refused(evp_set_ivlen(c, 8), "ChaCha20-Poly1305 EVP_CTRL_AEAD_SET_IVLEN 8", PLAIN);
    refused(evp_set_ivlen(c, 13), "ChaCha20-Poly1305 EVP_CTRL_AEAD_SET_IVLEN 13", PLAIN);
    proper_message(c, idx, 1);
    EVP_CIPHER_CTX_free(c);

    ref_encrypt(idx, key, iv, NULL, 0, pt, sizeof(pt), ref, rtag);
    for (int s = 0; s < 2; s++) {
        int outl;

        c = EVP_CIPHER_CTX_new();
        assert_int_equal(EVP_CipherInit_ex2(c, evp_cipher(g_env, idx, s), key, NULL, 1, NULL), 1);
        assert_int_equal(set_ivlen_param(c, 12), 1);
        assert_int_equal(get_ivlen_param(c), 12);
        assert_int_equal(EVP_CIPHER_CTX_get_iv_length(c), 12);
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, iv, 1, NULL), 1);
        assert_int_equal(EVP_CipherUpdate(c, out[s], &outl, pt, sizeof(pt)), 1);
        assert_int_equal(EVP_CipherFinal_ex(c, out[s] + outl, &outl), 1);
        assert_int_equal(evp_get_tag(c, tag[s], 16), 1);
        EVP_CIPHER_CTX_free(c);
    }
    assert_memory_equal(out[0], out[1], sizeof(pt));
    assert_memory_equal(tag[0], tag[1], 16);
    assert_memory_equal(out[1], ref, sizeof(pt));
    assert_memory_equal(tag[1], rtag, 16);
}

/* ---- tags -------------------------------------------------------------------------------------- */

static void encrypt_msg(EVP_CIPHER_CTX *c, const unsigned char *iv, int final)
{
    unsigned char aad[7] = { 9 }, pt[40] = { 8 }, out[64];
    int outl;

    assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, iv, 1, NULL), 1);
    assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, sizeof(aad)), 1);
    assert_int_equal(EVP_CipherUpdate(c, out, &outl, pt, sizeof(pt)), 1);
    if (final)
        assert_int_equal(EVP_CipherFinal_ex(c, out + outl, &outl), 1);
}

static void test_tag_misuse(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        unsigned char key[32] = { 6 }, iv[12] = { 7 }, tag[17] = { 0 };
        EVP_CIPHER_CTX *c;
        char what[128];

        /* Tag lengths outside 1..16 (SP 800-38D §5.2.1.2; RFC 8439's tag is 16 bytes). */
        c = new_ctx(idx, key, iv, 0);
        snprintf(what, sizeof(what), "%s SET_TAG of 0 bytes", nm);
        refused(evp_set_tag(c, tag, 0), what, PLAIN);
        snprintf(what, sizeof(what), "%s SET_TAG of 17 bytes", nm);
        refused(evp_set_tag(c, tag, 17), what, PLAIN);
        /* GET_TAG on a decrypting context */
        snprintf(what, sizeof(what), "%s GET_TAG on decrypt", nm);
        refused(evp_get_tag(c, tag, 16), what, PLAIN);
        proper_message(c, idx, 0);
        snprintf(what, sizeof(what), "%s GET_TAG on decrypt after a verified Final", nm);
        refused(evp_get_tag(c, tag, 16), what, PLAIN);
        EVP_CIPHER_CTX_free(c);

        c = new_ctx(idx, key, iv, 1);
        /* SET_TAG with data on an encrypting context: the tag is computed, not supplied */
        snprintf(what, sizeof(what), "%s SET_TAG on encrypt", nm);
        refused(evp_set_tag(c, tag, 16), what, PLAIN);
        /* GET_TAG before Final on the first message of a context */
        encrypt_msg(c, iv, 0);
        snprintf(what, sizeof(what), "%s GET_TAG before Final (first message)", nm);
        refused(evp_get_tag(c, tag, 16), what, gcm ? PLAIN : STRICT_RC);
        /* ... and on a later message, where default GCM still holds the previous tag */
        encrypt_msg(c, iv, 1);
        assert_int_equal(evp_get_tag(c, tag, 16), 1);
        encrypt_msg(c, iv, 0);
        snprintf(what, sizeof(what), "%s GET_TAG before Final (second message)", nm);
        refused(evp_get_tag(c, tag, 16), what, STRICT_RC);
        /* GET_TAG with 0 and 17 bytes after a proper Final */
        encrypt_msg(c, iv, 1);
        snprintf(what, sizeof(what), "%s GET_TAG of 0 bytes", nm);
        refused(evp_get_tag(c, tag, 0), what, PLAIN);
        snprintf(what, sizeof(what), "%s GET_TAG of 17 bytes", nm);
        refused(evp_get_tag(c, tag, 17), what, PLAIN);
        proper_message(c, idx, 1);
        EVP_CIPHER_CTX_free(c);
    }
}

/* Decrypt Final without any tag, and with a wrong one: fails and releases nothing. */
static void test_final_tag_checks(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        unsigned char key[32], iv[12], aad[9], pt[45], ct[45 + 16], out[64], tag[16];
        int outl;
        char what[128];
        EVP_CIPHER_CTX *c;

        gptest_rand_bytes(key, sizeof(key));
        gptest_rand_bytes(iv, sizeof(iv));
        gptest_rand_bytes(aad, sizeof(aad));
        gptest_rand_bytes(pt, sizeof(pt));
        ref_encrypt(idx, key, iv, aad, sizeof(aad), pt, sizeof(pt), ct, tag);

        /* no tag at all on a fresh context. Measured: default GCM refuses without queueing an
         * error; default ChaCha20-Poly1305 ACCEPTS (its tag length starts at 0, so nothing is
         * compared) - a forgery for free, which gpuprov must not copy. */
        c = new_ctx(idx, key, iv, 0);
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, sizeof(aad)), 1);
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, ct, sizeof(pt)), 1);
        outl = -7;
        snprintf(what, sizeof(what), "%s decrypt Final with no tag set", nm);
        refused(EVP_CipherFinal_ex(c, out + 45, &outl), what, gcm ? STRICT_ERR : STRICT_RC);
        assert_true(outl == 0 || evp_under_default());

        /* the same message again after a verified one, without SET_TAG: the previous message's
         * tag must not be reused (every TLS 1.3 record sets its own) */
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, iv, 0, NULL), 1);
        assert_int_equal(evp_set_tag(c, tag, 16), 1);
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, sizeof(aad)), 1);
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, ct, sizeof(pt)), 1);
        assert_memory_equal(out, pt, sizeof(pt));
        assert_int_equal(EVP_CipherFinal_ex(c, out + 45, &outl), 1);
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, iv, 0, NULL), 1);
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, sizeof(aad)), 1);
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, ct, sizeof(pt)), 1);
        outl = -7;
        snprintf(what, sizeof(what), "%s decrypt Final with no tag set (after a verified message)", nm);
        refused(EVP_CipherFinal_ex(c, out + 45, &outl), what, STRICT_RC);
        assert_true(outl == 0 || evp_under_default());

        /* wrong tag: fails, no output, no error queued (as the default provider) */
        tag[5] ^= 0x20;
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, iv, 0, NULL), 1);
        assert_int_equal(evp_set_tag(c, tag, 16), 1);
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, sizeof(aad)), 1);
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, ct, sizeof(pt)), 1);
        outl = -7;
        snprintf(what, sizeof(what), "%s decrypt Final with a wrong tag", nm);
        refused(EVP_CipherFinal_ex(c, out + 45, &outl), what, VERDICT);
        assert_int_equal(outl, 0);
        proper_message(c, idx, 0);
        EVP_CIPHER_CTX_free(c);
    }
}

/* ---- order of operations ------------------------------------------------------------------------- */

static void test_update_after_final(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        unsigned char key[32] = { 1 }, iv[12] = { 2 }, buf[32] = { 3 }, out[32], tag[16], ct[48];

        ref_encrypt(idx, key, iv, buf, 5, buf, 20, ct, tag);
        for (int enc = 0; enc < 2; enc++)
            for (int good = 0; good < 2; good++) {
                EVP_CIPHER_CTX *c;
                int outl, strict;
                char what[128];

                if (enc && !good)
                    continue;   /* an encrypt Final cannot fail */
                c = new_ctx(idx, key, iv, enc);
                if (!enc) {
                    tag[0] ^= (unsigned char)!good;
                    assert_int_equal(evp_set_tag(c, tag, 16), 1);
                    tag[0] ^= (unsigned char)!good;
                }
                assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, buf, 5), 1);
                assert_int_equal(EVP_CipherUpdate(c, out, &outl, enc ? buf : ct, 20), 1);
                assert_int_equal(EVP_CipherFinal_ex(c, out + 20, &outl), good);
                (void)gptest_errors_pending();
                /* An AEAD message ends at Final: more input would extend a finished (key, nonce)
                 * stream under a tag already released or judged (SP 800-38D §8.2, RFC 8439 §4).
                 * Measured: default GCM refuses after a successful Final but carries on after a
                 * failed one; default ChaCha20-Poly1305 carries on in both cases. */
                strict = gcm && good ? PLAIN : STRICT_RC;
                snprintf(what, sizeof(what), "%s %s data update after a %s Final", nm,
                         enc ? "encrypt" : "decrypt", good ? "successful" : "failed");
                refused(EVP_CipherUpdate(c, out, &outl, buf, 16), what, strict);
                snprintf(what, sizeof(what), "%s %s AAD update after a %s Final", nm,
                         enc ? "encrypt" : "decrypt", good ? "successful" : "failed");
                refused(EVP_CipherUpdate(c, NULL, &outl, buf, 16), what, strict);
                proper_message(c, idx, enc);
                EVP_CIPHER_CTX_free(c);
            }
    }
}

static void test_aad_after_data(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        unsigned char key[32] = { 1 }, iv[12] = { 2 }, buf[32] = { 3 }, out[32];
        int outl;
        char what[128];

        for (int enc = 0; enc < 2; enc++) {
            EVP_CIPHER_CTX *c = new_ctx(idx, key, iv, enc);

            assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, buf, 5), 1);
            assert_int_equal(EVP_CipherUpdate(c, out, &outl, buf, 20), 1);
            /* GCM authenticates len(A) || len(C) after both (SP 800-38D §7.1 step 5); AAD after
             * ciphertext has no defined meaning. Default ChaCha20-Poly1305 accepts it silently. */
            snprintf(what, sizeof(what), "%s %s AAD after data", nm, enc ? "encrypt" : "decrypt");
            refused(EVP_CipherUpdate(c, NULL, &outl, buf, 5), what, gcm ? PLAIN : STRICT_RC);
            proper_message(c, idx, enc);
            EVP_CIPHER_CTX_free(c);
        }
    }
}

/* ---- TLS records that are too short ---------------------------------------------------------------- */

static int set_octets(EVP_CIPHER_CTX *c, const char *key, const unsigned char *v, size_t n)
{
    OSSL_PARAM p[2] = { OSSL_PARAM_construct_octet_string(key, (void *)v, n),
                        OSSL_PARAM_construct_end() };

    return EVP_CIPHER_CTX_set_params(c, p);
}

static void tls_aad(unsigned char aad[13], size_t len)
{
    memset(aad, 0, 8);
    aad[7] = 1;       /* sequence number 1 */
    aad[8] = 23;      /* application_data */
    aad[9] = 3;
    aad[10] = 3;      /* TLS 1.2 */
    aad[11] = (unsigned char)(len >> 8);
    aad[12] = (unsigned char)len;
}

static void test_truncated_tls(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        /* GCM records carry explicit_nonce(8) || ... || tag(16) (RFC 5288 §3); ChaCha20-Poly1305
         * records carry ... || tag(16) (RFC 7905 §2). */
        size_t minrec = gcm ? 24 : 16;
        unsigned char key[32] = { 1 }, fixed[12] = { 2 }, aad[13], rec[64] = { 0 };
        EVP_CIPHER_CTX *c = new_ctx(idx, key, NULL, 0);
        int outl;
        char what[128];

        assert_int_equal(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, gcm ? 4 : 12), 1);
        /* the record length announced in the AAD is already too short */
        tls_aad(aad, minrec - 1);
        snprintf(what, sizeof(what), "%s TLS1_AAD announcing a %zu-byte record", nm, minrec - 1);
        refused(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD, aad, 13), what, PLAIN);
        /* a 12-byte "AAD" is not a TLS 1.2 AAD (RFC 5246 §6.2.3.3: 13 bytes) */
        tls_aad(aad, minrec);
        snprintf(what, sizeof(what), "%s TLS1_AAD of 12 bytes", nm);
        refused(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD, aad, 12), what, PLAIN);
        /* the AAD is fine but the record handed to update is shorter than nonce + tag */
        tls_aad(aad, minrec);
        assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_TLS1_AAD, 13, aad), 16);
        snprintf(what, sizeof(what), "%s TLS record of %zu bytes", nm, minrec - 1);
        /* measured: default ChaCha20-Poly1305 refuses without queueing an error */
        refused(EVP_CipherUpdate(c, rec, &outl, rec, (int)minrec - 1), what, gcm ? PLAIN : STRICT_ERR);
        EVP_CIPHER_CTX_free(c);
    }
}

#define INVALID_TLS_RECORD "invalid tls record"

static void refused_because(int rc, const char *what, const char *why);

/* One TLS 1.2 record call, by EVP_CipherUpdate or EVP_Cipher; 1 on success. */
static int tls_record_call(EVP_CIPHER_CTX *c, unsigned char *rec, size_t len, int via_cipher)
{
    int outl;

    if (via_cipher)
        return EVP_Cipher(c, rec, rec, (unsigned int)len) >= 0;
    return EVP_CipherUpdate(c, rec, &outl, rec, (int)len);
}

/*
 * Every record shorter than what it must hold (GCM: explicit nonce and tag, RFC 5288 §3;
 * ChaCha20-Poly1305: the tag, RFC 7905 §2), in both directions, by EVP_CipherUpdate and by
 * EVP_Cipher, is refused with a reason. The 0-byte EVP_Cipher record is where OpenSSL releases
 * differ (3.0.13 and 3.0.22 refuse it, 3.0.19 and 3.5.7 return at once): gpuprov refuses it
 * (STRICT_RC) and, as every release, leaves a ChaCha20-Poly1305 record pending, so the whole
 * record that follows is served and matches the default provider's.
 */
static void test_short_tls_records(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        size_t minrec = gcm ? 24 : 16, announced_enc = gcm ? 8 : 0;
        unsigned char key[32] = { 1 }, fixed[12] = { 2 }, aad[13], rec[64] = { 0 }, sent[2][64];
        char what[160];

        for (int enc = 1; enc >= 0; enc--) {
            for (int gp = 1; gp >= 0; gp--) {
                EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

                assert_non_null(c);
                assert_int_equal(EVP_CipherInit_ex2(c, evp_cipher(g_env, idx, gp), key, NULL, enc, NULL), 1);
                assert_int_equal(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, gcm ? 4 : 12), 1);
                tls_aad(aad, enc ? announced_enc : minrec);
                for (size_t len = 0; len < minrec; len++)
                    for (int via_cipher = 0; via_cipher < 2; via_cipher++) {
                        if (len == 0 && !via_cipher)
                            continue;   /* a 0-byte update is no call, on every release */
                        assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_TLS1_AAD, 13, aad), 16);
                        snprintf(what, sizeof(what), "%s %s TLS record of %zu bytes by %s (%s)", nm,
                                 enc ? "sent" : "received", len, via_cipher ? "EVP_Cipher" : "EVP_CipherUpdate",
                                 gp ? "gpuprov" : "default");
                        if (gp)
                            refused_because(tls_record_call(c, rec, len, via_cipher), what, INVALID_TLS_RECORD);
                        else
                            (void)tls_record_call(c, rec, len, via_cipher), (void)gptest_errors_pending();
                    }
                /* The 0-byte cipher call left a ChaCha20-Poly1305 record pending; GCM's ended it. */
                if (gcm)
                    assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_TLS1_AAD, 13, aad), 16);
                else if (gp)
                    refused_because(tls_record_call(c, rec, 0, 1), "a 0-byte record again", INVALID_TLS_RECORD);
                if (enc) {
                    memset(rec, 0, sizeof(rec));
                    snprintf(what, sizeof(what), "%s whole record after the short ones (%s)", nm, gp ? "gpuprov" : "default");
                    if (!tls_record_call(c, rec, minrec, 0))
                        fail_msg("%s refused", what);
                    memcpy(sent[gp], rec, minrec);
                } else {
                    /* The default's sent record (the invocation field differs per context for
                     * GCM, so each side decrypts the record its own kind sent). */
                    memcpy(rec, sent[gp], minrec);
                    if (!tls_record_call(c, rec, minrec, 0))
                        fail_msg("%s %s: a whole record after the short ones is refused", nm, gp ? "gpuprov" : "default");
                }
                EVP_CIPHER_CTX_free(c);
            }
            if (enc && !gcm)
                assert_memory_equal(sent[0], sent[1], minrec);   /* RFC 7905: deterministic */
        }
    }
}

/*
 * ChaCha20-Poly1305's EVP_Cipher(ctx, out, NULL, 0) is the explicit Final, as GCM's: a decryption's
 * tag is checked there (OpenSSL 3.0.22; 3.0.19 and 3.5.7 return at once and accept any tag:
 * gpuprov takes the checking answer, docs/limitations.md), an encryption's tag is the default
 * provider's EVP_CipherFinal tag.
 */
static void test_ccp_cipher_final(void **state)
{
    int idx = evp_cipher_index("ChaCha20-Poly1305");
    unsigned char key[32] = { 7 }, iv[12] = { 8 }, aad[5] = { 9 }, pt[20] = { 10 }, ct[20], out[20], tag[16], got[16];
    int outl;

    (void)state;
    ref_encrypt(idx, key, iv, aad, sizeof(aad), pt, sizeof(pt), ct, tag);
    for (int bad = 0; bad < 2; bad++) {
        EVP_CIPHER_CTX *c = new_ctx(idx, key, iv, 0);
        unsigned char t[16];
        char what[128];

        memcpy(t, tag, 16);
        t[3] ^= (unsigned char)bad;
        assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, sizeof(aad)), 1);
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, ct, sizeof(ct)), 1);
        assert_int_equal(evp_set_tag(c, t, 16), 1);
        snprintf(what, sizeof(what), "ChaCha20-Poly1305 EVP_Cipher(ctx, out, NULL, 0) Final with a %s tag",
                 bad ? "wrong" : "right");
        if (bad) {
            STRICT_CHECK(EVP_Cipher(c, out, NULL, 0) < 0, what);   /* the verdict: no error queued */
            (void)gptest_errors_pending();
        } else {
            assert_int_equal(EVP_Cipher(c, out, NULL, 0), 0);
            assert_memory_equal(out, pt, sizeof(pt));
        }
        EVP_CIPHER_CTX_free(c);
    }
    EVP_CIPHER_CTX *c = new_ctx(idx, key, iv, 1);

    assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, aad, sizeof(aad)), 1);
    assert_int_equal(EVP_CipherUpdate(c, out, &outl, pt, sizeof(pt)), 1);
    assert_int_equal(EVP_Cipher(c, out, NULL, 0), 0);
    assert_memory_equal(out, ct, sizeof(ct));
    if (!evp_under_default()) {   /* 3.0.19 and 3.5.7's default computed no tag there */
        assert_int_equal(evp_get_tag(c, got, 16), 1);
        assert_memory_equal(got, tag, 16);
    }
    (void)gptest_errors_pending();
    EVP_CIPHER_CTX_free(c);
}

/* ---- lengths past int and past the mode's limits ----------------------------------------------------- */

/* Runs fn in a child process with a time limit and describes how it ended (for measuring what the
 * default provider does with inputs that may crash it). */
static void measure_in_child(void (*fn)(int), int arg, const char *what)
{
    pid_t pid = fork();
    int st = 0;

    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        fn(arg);
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st))
        fprintf(stderr, "[stricter] %s: the default provider dies with signal %d\n", what,
                WTERMSIG(st));
    else
        fprintf(stderr, "[stricter] %s: on the default provider the child exits %d "
                "(0 = refused cleanly, 3 = accepted)\n", what, WEXITSTATUS(st));
}

static void negative_inl_once(int idx)
{
    unsigned char key[32] = { 1 }, iv[16] = { 2 }, in[64] = { 3 }, out[64];
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int outl = -7, rc;

    if (EVP_CipherInit_ex2(c, evp_cipher(g_env, idx, 1), key, iv, 1, NULL) != 1)
        _exit(4);
    rc = EVP_EncryptUpdate(c, out, &outl, in, -1);
    _exit(rc > 0 ? 3 : 0);
}

static void test_negative_inl(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        const char *nm = evp_ciphers[idx].name;
        unsigned char key[32] = { 1 }, iv[16] = { 2 }, in[64], out[64], canary[64];
        char what[128];

        if (evp_under_default()) {
            /* gpuprov-only: EVP 3.0 hands (size_t)-1 to the provider as inl and as outsize */
            snprintf(what, sizeof(what), "%s EVP_EncryptUpdate with inl = -1", nm);
            measure_in_child(negative_inl_once, idx, what);
            continue;
        }
        for (int aad = 0; aad < (is_aead(idx) ? 2 : 1); aad++) {
            EVP_CIPHER_CTX *c = new_ctx(idx, key, iv, 1);
            int outl = -7;

            gptest_rand_bytes(in, sizeof(in));
            memcpy(out, in, sizeof(out));
            memcpy(canary, in, sizeof(canary));
            snprintf(what, sizeof(what), "%s EVP_EncryptUpdate(%s) with inl = -1", nm,
                     aad ? "AAD" : "data");
            refused(EVP_EncryptUpdate(c, aad ? NULL : out, &outl, in, -1), what, PLAIN);
            assert_true(outl == 0 || outl == -7);
            assert_memory_equal(out, canary, sizeof(out));
            assert_memory_equal(in, canary, sizeof(in));
            proper_message(c, idx, 1);
            EVP_CIPHER_CTX_free(c);
        }
    }
}

/*
 * Raw update calls with a size the provider must refuse before looking at any byte: the real
 * buffers are 64 bytes. gpuprov refuses inl > INT_MAX outright and tracks per-IV totals
 * (GCM: 2^36 - 32 bytes of plaintext per IV, SP 800-38D §5.2.1.1; ChaCha20-Poly1305: 2^38 - 64,
 * RFC 8439 §2.8). The default provider would start processing, so these run on gpuprov only;
 * under GPTEST_UNDER_TEST=default the dispatch walk itself is checked with a normal-size call.
 */
static void raw_huge(const char *name, size_t inl)
{
    int idx = evp_cipher_index(name);
    const evp_cipher_info *ci = &evp_ciphers[idx];
    unsigned char key[32], iv[16], in[64], out[64], cin[64], cout[64], ref[64 + 16], tag[16];
    evp_raw raw;
    void *pc;
    size_t outl = 77;
    char what[128];

    gptest_rand_bytes(key, sizeof(key));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(in, sizeof(in));
    gptest_rand_bytes(out, sizeof(out));
    memcpy(cin, in, sizeof(in));
    memcpy(cout, out, sizeof(out));
    evp_raw_get(g_env, 1, name, &raw);
    pc = raw.newctx(raw.provctx);
    assert_non_null(pc);
    assert_int_equal(raw.einit(pc, key, ci->keylen, iv, ci->ivlen, NULL), 1);
    if (!evp_under_default()) {
        snprintf(what, sizeof(what), "%s raw update with inl = outsize = %zu", name, inl);
        refused(raw.update(pc, out, &outl, inl, in, inl), what, PLAIN);
        assert_memory_equal(in, cin, sizeof(in));
        assert_memory_equal(out, cout, sizeof(out));
        if (is_aead(idx)) {
            snprintf(what, sizeof(what), "%s raw AAD update with inl = %zu", name, inl);
            refused(raw.update(pc, NULL, &outl, 0, in, inl), what, PLAIN);
            assert_memory_equal(in, cin, sizeof(in));
        }
    }
    /* the context still works: a normal 64-byte update matches default's one-shot */
    ref_encrypt(idx, key, iv, NULL, 0, in, sizeof(in), ref, tag);
    outl = 77;
    assert_int_equal(raw.update(pc, out, &outl, sizeof(out), in, sizeof(in)), 1);
    assert_int_equal(outl, sizeof(in));
    assert_memory_equal(out, ref, sizeof(in));
    raw.freectx(pc);
}

static void test_raw_huge(void **state)
{
    (void)state;
    raw_huge("AES-256-GCM", (size_t)1 << 36);
    raw_huge("AES-128-GCM", ((size_t)1 << 36) - 15);
    raw_huge("ChaCha20-Poly1305", (size_t)1 << 38);
    raw_huge("AES-128-CTR", (size_t)INT_MAX + 1);
    raw_huge("AES-256-CTR", SIZE_MAX);
    raw_huge("ChaCha20", (size_t)INT_MAX + 1);
    raw_huge("AES-192-GCM", (size_t)INT_MAX + 1);
}

/* outsize < inl: the provider must not write past what the caller said it has (both providers). */
static void test_raw_outsize(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++)
        for (int gp = 0; gp < 2; gp++) {
            const evp_cipher_info *ci = &evp_ciphers[idx];
            unsigned char key[32] = { 1 }, iv[16] = { 2 }, in[64] = { 3 }, out[64], cout[64];
            evp_raw raw;
            void *pc;
            size_t outl = 77;
            char what[128];

            memset(out, 0xa5, sizeof(out));
            memcpy(cout, out, sizeof(out));
            evp_raw_get(g_env, gp, ci->name, &raw);
            pc = raw.newctx(raw.provctx);
            assert_int_equal(raw.einit(pc, key, ci->keylen, iv, ci->ivlen, NULL), 1);
            snprintf(what, sizeof(what), "%s raw update with outsize 40 < inl 64 (%s)", ci->name,
                     gp ? "gpuprov" : "default");
            refused(raw.update(pc, out, &outl, 40, in, 64), what, PLAIN);
            assert_memory_equal(out + 40, cout + 40, 24);
            raw.freectx(pc);
        }
}

/* ---- a message changed under it, TLS record mode ----------------------------------------------------- */

/* The reason string of the last queued error ("" if none); the queue stays as it is. */
static const char *last_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    return r != NULL ? r : "";
}

/* A refusal on purpose (STRICT_RC), whose reason string under gpuprov says why. */
static void refused_because(int rc, const char *what, const char *why)
{
    if (!evp_under_default() && rc <= 0 && strstr(last_reason(), why) == NULL)
        fail_msg("%s: refused with reason \"%s\", expected \"%s\"", what, last_reason(), why);
    refused(rc, what, STRICT_RC);
}

#define NEW_IV_NEEDED "set a new iv"

/*
 * A new key or direction without a new IV under a begun AEAD message, or a GCM IV length change
 * after the IV: going on mixes keys or directions under one tag, starting again from the IV repeats
 * keystream under the same key. gpuprov refuses the message's updates and Final until a new IV
 * (measured on 3.0.19's default: it goes on, GCM from a zeroed state after a key init, but refuses
 * updates after an IV length change). The same key is used again on purpose: the worst case.
 */
static void test_midmessage_changes(void **state)
{
    static const char *const changes[3] = { "a key re-init", "a direction flip", "an IV length change" };

    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        unsigned char key[32] = { 4 }, iv[12] = { 5 }, buf[48] = { 6 }, out[48], tag[16];
        int outl;
        char what[128];
        EVP_CIPHER_CTX *c;

        for (int change = 0; change < 3; change++) {
            if (change == 2 && !gcm)
                continue;   /* ChaCha20-Poly1305 has one nonce length */
            c = new_ctx(idx, key, iv, 1);
            assert_int_equal(EVP_CipherUpdate(c, NULL, &outl, buf, 7), 1);
            assert_int_equal(EVP_CipherUpdate(c, out, &outl, buf, 40), 1);
            if (change == 0)
                assert_int_equal(EVP_CipherInit_ex2(c, NULL, key, NULL, 1, NULL), 1);
            else if (change == 1)
                assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, NULL, 0, NULL), 1);
            else
                assert_int_equal(evp_set_ivlen(c, 16), 1);
            snprintf(what, sizeof(what), "%s update after %s mid-message", nm, changes[change]);
            refused_because(EVP_CipherUpdate(c, out, &outl, buf, 16), what, NEW_IV_NEEDED);
            snprintf(what, sizeof(what), "%s AAD after %s mid-message", nm, changes[change]);
            refused_because(EVP_CipherUpdate(c, NULL, &outl, buf, 16), what, NEW_IV_NEEDED);
            if (change != 1) {
                snprintf(what, sizeof(what), "%s Final after %s mid-message", nm, changes[change]);
                refused_because(EVP_CipherFinal_ex(c, out, &outl), what, NEW_IV_NEEDED);
            }
            if (change == 2) {
                snprintf(what, sizeof(what), "%s IV read after an IV length change", nm);
                refused_because(EVP_CIPHER_CTX_get_updated_iv(c, out, 16), what, NEW_IV_NEEDED);
            }
            proper_message(c, idx, change == 1 ? 0 : 1);
            EVP_CIPHER_CTX_free(c);
        }
        /* a key init before any data keeps the IV: the message starts under the new key */
        c = new_ctx(idx, NULL, iv, 1);
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, key, NULL, 1, NULL), 1);
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, buf, 40), 1);
        assert_int_equal(EVP_CipherFinal_ex(c, out + 40, &outl), 1);
        assert_int_equal(evp_get_tag(c, tag, 16), 1);
        EVP_CIPHER_CTX_free(c);
        {
            unsigned char ref[48], rtag[16];

            ref_encrypt(idx, key, iv, buf, 0, buf, 40, ref, rtag);
            assert_memory_equal(out, ref, 40);
            assert_memory_equal(tag, rtag, 16);
        }
    }
}

/* ChaCha20: a new key under a running stream is refused until a new IV (the default starts again
 * at the block it was in, repeating keystream under an unchanged key); a re-init without key and IV
 * goes on byte for byte, as the default's. */
static void test_chacha20_reinit(void **state)
{
    const int idx = 7;
    unsigned char key[32] = { 8 }, iv[16] = { 9 }, pt[116] = { 10 }, ref[116], out[116];
    int outl;
    EVP_CIPHER_CTX *c;

    (void)state;
    ref_encrypt(idx, key, iv, NULL, 0, pt, sizeof(pt), ref, NULL);
    c = new_ctx(idx, key, iv, 1);
    assert_int_equal(EVP_CipherUpdate(c, out, &outl, pt, 75), 1);
    assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, NULL, -1, NULL), 1);
    assert_int_equal(EVP_CipherUpdate(c, out + 75, &outl, pt + 75, 41), 1);
    assert_memory_equal(out, ref, sizeof(ref));
    assert_int_equal(EVP_CipherInit_ex2(c, NULL, key, NULL, -1, NULL), 1);
    refused_because(EVP_CipherUpdate(c, out, &outl, pt, 16), "ChaCha20 update after a key re-init mid-stream",
                    NEW_IV_NEEDED);
    proper_message(c, idx, 1);
    EVP_CIPHER_CTX_free(c);
}

/* 0 bytes without a key fail, as on 3.0.19's default (CTR, ChaCha20; GCM by EVP_Cipher). */
static void test_empty_update_no_key(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        unsigned char buf[16] = { 0 };
        int outl;
        char what[96];
        EVP_CIPHER_CTX *c;

        if (evp_ciphers[idx].kind == K_CCP)
            continue;   /* both return at once for 0 bytes */
        c = new_ctx(idx, NULL, NULL, 1);
        snprintf(what, sizeof(what), "%s 0-byte %s without a key", evp_ciphers[idx].name,
                 evp_ciphers[idx].kind == K_GCM ? "EVP_Cipher" : "update");
        if (evp_ciphers[idx].kind == K_GCM)
            refused(EVP_Cipher(c, buf, buf, 0) < 0 ? 0 : 1, what, STRICT_RC);
        else
            refused(EVP_CipherUpdate(c, buf, &outl, buf, 0), what, STRICT_RC);
        proper_message(c, idx, 1);
        EVP_CIPHER_CTX_free(c);
    }
}

/* CTR with TLS_VERSION and TLS_MAC_SIZE: the default's decryption strips a MAC it never checks;
 * gpuprov refuses the param that completes the pair. ChaCha20 ignores both on either. */
static void test_ctr_tls_mac(void **state)
{
    (void)state;
    for (int idx = 0; idx < EVP_NCIPHERS; idx++) {
        unsigned char key[32] = { 1 }, iv[16] = { 2 };
        unsigned int version = 0x0303;
        size_t mac = 20;
        OSSL_PARAM pv[2] = { OSSL_PARAM_construct_uint(OSSL_CIPHER_PARAM_TLS_VERSION, &version),
                             OSSL_PARAM_construct_end() };
        OSSL_PARAM pm[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_TLS_MAC_SIZE, &mac),
                             OSSL_PARAM_construct_end() };
        char what[96];
        EVP_CIPHER_CTX *c;

        if (evp_ciphers[idx].kind != K_CTR && evp_ciphers[idx].kind != K_CHACHA)
            continue;
        c = new_ctx(idx, key, iv, 0);
        assert_int_equal(EVP_CIPHER_CTX_set_params(c, pv), 1);
        snprintf(what, sizeof(what), "%s TLS_MAC_SIZE after TLS_VERSION", evp_ciphers[idx].name);
        if (evp_ciphers[idx].kind == K_CTR)
            refused_because(EVP_CIPHER_CTX_set_params(c, pm), what, "mac-then-encrypt");
        else
            assert_int_equal(EVP_CIPHER_CTX_set_params(c, pm), 1);
        if (!evp_under_default() || evp_ciphers[idx].kind != K_CTR)   /* the default's strips now */
            proper_message(c, idx, 0);
        EVP_CIPHER_CTX_free(c);
    }
}

/* AEAD_TAGLEN as the default provider reads it (measured on 3.0.19). */
static size_t taglen_of(EVP_CIPHER_CTX *c)
{
    size_t t = 99;
    OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_TAGLEN, &t), OSSL_PARAM_construct_end() };

    assert_int_equal(EVP_CIPHER_CTX_get_params(c, p), 1);
    return t;
}

static void test_aead_taglen(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        int gcm = evp_ciphers[idx].kind == K_GCM;
        unsigned char key[32] = { 1 }, iv[12] = { 2 }, tag[16] = { 0 }, out[16];
        int outl;
        EVP_CIPHER_CTX *c = new_ctx(idx, key, iv, 0);

        assert_int_equal(taglen_of(c), gcm ? 16 : 0);   /* ChaCha20-Poly1305: 0 until SET_TAG */
        assert_int_equal(evp_set_tag(c, tag, 4), 1);
        assert_int_equal(taglen_of(c), 4);
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, iv, 1, NULL), 1);
        assert_int_equal(EVP_CipherFinal_ex(c, out, &outl), 1);
        assert_int_equal(taglen_of(c), gcm ? 16 : 4);   /* GCM: an encrypt Final's tag is 16 bytes */
        /* that encryption did not touch the expected tag the decryption set: its Final still checks
         * against it (the default provider's one buffer now holds the computed tag: R7) */
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, iv, 0, NULL), 1);
        outl = EVP_CipherFinal_ex(c, out, &outl);
        if (!evp_under_default())
            assert_int_equal(outl, 0);
        (void)gptest_errors_pending();
        EVP_CIPHER_CTX_free(c);
        /* and a decryption's SET_TAG leaves an encryption's tag alone: once the context encrypts
         * again, GET_TAG answers that encryption's tag (the default's one buffer: R2) */
        {
            unsigned char t1[16], t2[16], bogus[16] = { 0x5a };

            c = new_ctx(idx, key, iv, 1);
            assert_int_equal(EVP_CipherUpdate(c, out, &outl, tag, 10), 1);
            assert_int_equal(EVP_CipherFinal_ex(c, out, &outl), 1);
            assert_int_equal(evp_get_tag(c, t1, 16), 1);
            assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, NULL, 0, NULL), 1);
            assert_int_equal(evp_set_tag(c, bogus, 16), 1);
            assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, NULL, 1, NULL), 1);
            assert_int_equal(evp_get_tag(c, t2, 16), 1);
            if (!evp_under_default())
                assert_memory_equal(t1, t2, 16);
            EVP_CIPHER_CTX_free(c);
        }
    }
}

/*
 * TLS 1.2 record mode off its path. Matched: a ChaCha20-Poly1305 record of the wrong length fails
 * and the record stays pending; a GCM Final with a record pending fails and ends the record and its
 * IV; a GCM IV init keeps a pending record. Refused: the record after a refused TLS1_AAD (GCM), a
 * ChaCha20-Poly1305 TLS1_IV_FIXED with a record pending or mid-message, and a ChaCha20-Poly1305
 * key init that ends a pending record leaves no nonce to go on with.
 */
static void test_tls_mode_edges(void **state)
{
    (void)state;
    for (int idx = 3; idx < 7; idx++) {
        const char *nm = evp_ciphers[idx].name;
        int gcm = evp_ciphers[idx].kind == K_GCM;
        unsigned char key[32] = { 1 }, fixed[12] = { 2 }, aad[13], rec[2][64], out[48];
        int outl, rc[2];
        char what[128];
        EVP_CIPHER_CTX *c;

        /* the same sequence on both providers: a bad record, then the good one */
        for (int gp = 0; gp < 2; gp++) {
            c = EVP_CIPHER_CTX_new();
            assert_int_equal(EVP_CipherInit_ex2(c, evp_cipher(g_env, idx, gp), key, NULL, 1, NULL), 1);
            assert_int_equal(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, gcm ? 4 : 12), 1);
            if (gcm)   /* the same invocation field on both */
                assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IV_FIXED, -1, fixed), 1);
            tls_aad(aad, 10);
            assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_TLS1_AAD, 13, aad), 16);
            memset(rec[gp], 7, sizeof(rec[gp]));
            rc[gp] = EVP_CipherUpdate(c, rec[gp], &outl, rec[gp], 5);
            (void)gptest_errors_pending();
            if (!gcm)   /* still pending: the record of the announced length runs */
                assert_int_equal(EVP_CipherUpdate(c, rec[gp], &outl, rec[gp], 26), 1);
            EVP_CIPHER_CTX_free(c);
        }
        assert_int_equal(rc[0], rc[1]);
        if (!gcm)
            assert_memory_equal(rec[0], rec[1], 26);

        /* GCM: a Final with a record pending fails on both and ends the record and the IV */
        if (gcm) {
            c = new_ctx(idx, key, fixed, 0);
            tls_aad(aad, 40);
            assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_TLS1_AAD, 13, aad), 16);
            refused(EVP_CipherFinal_ex(c, out, &outl), "GCM Final with a TLS record pending",
                    evp_under_default() ? STRICT_ERR : PLAIN);
            refused(EVP_CipherUpdate(c, out, &outl, out, 40), "GCM update after a refused record's Final",
                    STRICT_ERR);
            proper_message(c, idx, 0);
            EVP_CIPHER_CTX_free(c);

            /* a refused TLS1_AAD: the next record is refused (the default runs it on that AAD) */
            c = new_ctx(idx, key, NULL, 1);
            assert_int_equal(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, 4), 1);
            tls_aad(aad, 3);
            refused(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD, aad, 13), "GCM TLS1_AAD of a 3-byte record",
                    PLAIN);
            memset(rec[0], 0, sizeof(rec[0]));
            snprintf(what, sizeof(what), "%s record after a refused TLS1_AAD", nm);
            refused_because(EVP_CipherUpdate(c, rec[0], &outl, rec[0], 34), what, "invalid tls aad");
            EVP_CIPHER_CTX_free(c);
            continue;
        }
        /* ChaCha20-Poly1305: TLS1_IV_FIXED with a record pending, or mid-message */
        c = new_ctx(idx, key, fixed, 1);
        tls_aad(aad, 10);
        assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_TLS1_AAD, 13, aad), 16);
        refused_because(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, 12),
                        "ChaCha20-Poly1305 TLS1_IV_FIXED with a TLS record pending", "tls record mode");
        /* a key init ends the record; the nonce it leaves is the record's: a new IV is needed */
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, key, NULL, 1, NULL), 1);
        refused_because(EVP_CipherUpdate(c, out, &outl, out, 16),
                        "ChaCha20-Poly1305 update after a key init ended a pending record", NEW_IV_NEEDED);
        proper_message(c, idx, 1);
        assert_int_equal(EVP_CipherInit_ex2(c, NULL, NULL, fixed, 1, NULL), 1);
        assert_int_equal(EVP_CipherUpdate(c, out, &outl, out, 16), 1);
        refused_because(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, 12),
                        "ChaCha20-Poly1305 TLS1_IV_FIXED mid-message", "finish it or set a new iv");
        /* refused, nothing taken: the message goes on and ends */
        assert_int_equal(EVP_CipherFinal_ex(c, out, &outl), 1);
        proper_message(c, idx, 1);
        EVP_CIPHER_CTX_free(c);
        /* a refused TLS1_AAD with no record announced leaves a message in progress as it was, on
         * both providers (on the cpu lane in record mode too) */
        for (int gp = 0; gp < 2; gp++) {
            memset(rec[gp], 3, sizeof(rec[gp]));
            c = EVP_CIPHER_CTX_new();
            assert_int_equal(EVP_CipherInit_ex2(c, evp_cipher(g_env, idx, gp), key, NULL, 0, NULL), 1);
            assert_int_equal(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, 12), 1);
            assert_int_equal(EVP_CipherUpdate(c, rec[gp], &outl, rec[gp], 40), 1);
            tls_aad(aad, 3);
            refused(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_AAD, aad, 13), "ChaCha20-Poly1305 decrypt TLS1_AAD of 3 bytes",
                    gp ? PLAIN : STRICT_ERR);
            assert_int_equal(EVP_CipherUpdate(c, rec[gp] + 40, &outl, rec[gp] + 40, 24), 1);
            EVP_CIPHER_CTX_free(c);
        }
        assert_memory_equal(rec[0], rec[1], 64);
    }
}

/* ChaCha20-Poly1305's 0-byte EVP_Cipher with a key begins a message on the default provider (it
 * makes the message's Poly1305 key from the nonce it holds): with no IV (an all-zero nonce) or after
 * a Final (the used nonce) gpuprov refuses it as it refuses an update there; with an IV it begins
 * the message, and a TLS1_IV_FIXED after it is refused (tests/fuzz/regress d15, d16). */
static void test_ccp_empty_cipher(void **state)
{
    const int idx = evp_cipher_index("ChaCha20-Poly1305");
    unsigned char key[32] = { 4 }, iv[12] = { 5 }, fixed[12] = { 6 }, buf[16] = { 0 };
    int outl;
    EVP_CIPHER_CTX *c;

    (void)state;
    c = new_ctx(idx, key, NULL, 1);
    refused_because(EVP_Cipher(c, buf, buf, 0) < 0 ? 0 : 1, "ChaCha20-Poly1305 0-byte EVP_Cipher with no IV",
                    "no iv set");
    proper_message(c, idx, 1);
    EVP_CIPHER_CTX_free(c);
    c = new_ctx(idx, key, iv, 1);
    assert_int_equal(EVP_CipherUpdate(c, buf, &outl, buf, 16), 1);
    assert_int_equal(EVP_CipherFinal_ex(c, buf, &outl), 1);
    refused_because(EVP_Cipher(c, buf, buf, 0) < 0 ? 0 : 1, "ChaCha20-Poly1305 0-byte EVP_Cipher after a Final",
                    "message already finished");
    proper_message(c, idx, 1);
    EVP_CIPHER_CTX_free(c);
    c = new_ctx(idx, key, iv, 1);
    assert_true(EVP_Cipher(c, buf, buf, 0) >= 0);
    refused_because(set_octets(c, OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, fixed, 12),
                    "ChaCha20-Poly1305 TLS1_IV_FIXED after a 0-byte EVP_Cipher with a key and an IV",
                    "finish it or set a new iv");
    proper_message(c, idx, 1);
    EVP_CIPHER_CTX_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_key),
        cmocka_unit_test(test_wrong_keylen),
        cmocka_unit_test(test_gcm_ivlen),
        cmocka_unit_test(test_ccp_ivlen),
        cmocka_unit_test(test_tag_misuse),
        cmocka_unit_test(test_final_tag_checks),
        cmocka_unit_test(test_update_after_final),
        cmocka_unit_test(test_aad_after_data),
        cmocka_unit_test(test_truncated_tls),
        cmocka_unit_test(test_short_tls_records),
        cmocka_unit_test(test_ccp_cipher_final),
        cmocka_unit_test(test_midmessage_changes),
        cmocka_unit_test(test_chacha20_reinit),
        cmocka_unit_test(test_empty_update_no_key),
        cmocka_unit_test(test_ctr_tls_mac),
        cmocka_unit_test(test_aead_taglen),
        cmocka_unit_test(test_tls_mode_edges),
        cmocka_unit_test(test_ccp_empty_cipher),
        cmocka_unit_test(test_negative_inl),
        cmocka_unit_test(test_raw_huge),
        cmocka_unit_test(test_raw_outsize),
    };

    return cmocka_run_group_tests_name("evp-badinput", tests, group_setup, evp_group_teardown);
}
