/* SPDX-License-Identifier: Apache-2.0 */
/* gpuprov loaded by OPENSSL_CONF=config/gpuprov.cnf into the default library context, as users load it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/provider.h>
#include <openssl/rand.h>

#include "gptest.h"

/* Every name gpuprov must answer to in the default library context: the eight primary names, the
 * GCM aliases libssl fetches, and the GCM OIDs (NIST CSOR: aes 2.16.840.1.101.3.4.1; 6/26/46 = GCM). */
static const char *const cipher_names[] = {
    "AES-128-CTR", "AES-192-CTR", "AES-256-CTR",
    "AES-128-GCM", "AES-192-GCM", "AES-256-GCM",
    "ChaCha20", "ChaCha20-Poly1305",
    "id-aes128-GCM", "id-aes192-GCM", "id-aes256-GCM",
    "2.16.840.1.101.3.4.1.6", "2.16.840.1.101.3.4.1.26", "2.16.840.1.101.3.4.1.46",
};
#define N_NAMES (sizeof(cipher_names) / sizeof(cipher_names[0]))
#define N_PRIMARY 8

/* GPTEST_UNDER_TEST=default validates this test without the module: "gpuprov" then means the
 * default provider (the config's gpuprov section fails to load, silently, as OpenSSL does). */
static const char *gp_name = "gpuprov";
static const char *gp_propq = "provider=gpuprov";

static const char *provider_of(const EVP_CIPHER *c)
{
    return OSSL_PROVIDER_get0_name(EVP_CIPHER_get0_provider(c));
}

static EVP_CIPHER *fetch_or_fail(const char *name, const char *propq)
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, name, propq);

    if (c == NULL) {
        ERR_print_errors_fp(stderr);
        fail_msg("EVP_CIPHER_fetch(NULL, \"%s\", %s%s%s) failed", name, propq ? "\"" : "",
                 propq ? propq : "NULL", propq ? "\"" : "");
    }
    return c;
}

static int group_setup(void **state)
{
    const char *conf = getenv("OPENSSL_CONF"), *mods = getenv("OPENSSL_MODULES");
    char path[4096];
    struct stat st;

    if (getenv("GPTEST_UNDER_TEST") != NULL && strcmp(getenv("GPTEST_UNDER_TEST"), "default") == 0) {
        gp_name = "default";
        gp_propq = "provider=default";
        fprintf(stderr, "test_load: GPTEST_UNDER_TEST=default: checking against the default provider\n");
    }
    if (conf == NULL || conf[0] == '\0') {
        fprintf(stderr, "test_load: OPENSSL_CONF is not set (meson sets it to config/gpuprov.cnf)\n");
        return -1;
    }
    snprintf(path, sizeof(path), "%s/gpuprov.so", mods != NULL ? mods : "(OPENSSL_MODULES unset)");
    if (stat(path, &st) != 0)
        fprintf(stderr, "test_load: %s does not exist: is the provider built?\n", path);
    if (OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, NULL) != 1) {
        fprintf(stderr, "test_load: OPENSSL_init_crypto(LOAD_CONFIG) failed with %s\n", conf);
        ERR_print_errors_fp(stderr);
        return -1;
    }
    if (!OSSL_PROVIDER_available(NULL, gp_name)) {
        fprintf(stderr, "test_load: provider gpuprov is not available after loading %s "
                "(OPENSSL_MODULES=%s): the module was not found or failed to initialise\n",
                conf, mods != NULL ? mods : "(unset)");
        ERR_print_errors_fp(stderr);
        return -1;
    }
    fprintf(stderr, "test_load: OPENSSL_CONF=%s OPENSSL_MODULES=%s executor=%s\n", conf,
            mods != NULL ? mods : "(unset)", gptest_executor());
    gptest_rand_seed();
    return 0;
}

static void test_providers_available(void **state)
{
    assert_true(OSSL_PROVIDER_available(NULL, gp_name));
    /* The config activates default too; without it nothing but gpuprov's ciphers would exist. */
    assert_true(OSSL_PROVIDER_available(NULL, "default"));
}

/* No property query: the config's default_properties = ?provider=gpuprov picks gpuprov. */
static void test_preferred_without_propq(void **state)
{
    for (size_t i = 0; i < N_NAMES; i++) {
        EVP_CIPHER *c = fetch_or_fail(cipher_names[i], NULL);

        if (strcmp(provider_of(c), gp_name) != 0)
            fail_msg("EVP_CIPHER_fetch(NULL, \"%s\", NULL) came from \"%s\", not %s",
                     cipher_names[i], provider_of(c), gp_name);
        EVP_CIPHER_free(c);
    }
}

typedef struct name_check {
    const EVP_CIPHER *gp;
    int missing;
} name_check;

static void check_name(const char *name, void *arg)
{
    name_check *nc = arg;

    if (!EVP_CIPHER_is_a(nc->gp, name)) {
        fprintf(stderr, "test_load: the default provider's name \"%s\" is no name of gpuprov's %s\n",
                name, EVP_CIPHER_get0_name(nc->gp));
        nc->missing++;
    }
}

/* What EVP reads once from the implementation must equal the default provider's. */
static void test_static_params_match_default(void **state)
{
    for (size_t i = 0; i < N_NAMES; i++) {
        const char *name = cipher_names[i];
        EVP_CIPHER *gp = fetch_or_fail(name, gp_propq);
        EVP_CIPHER *df = fetch_or_fail(name, "provider=default");
        unsigned long mask = EVP_CIPH_FLAG_AEAD_CIPHER | EVP_CIPH_CUSTOM_IV;
        name_check nc;

        assert_string_equal(provider_of(gp), gp_name);
        assert_string_equal(provider_of(df), "default");
        if (EVP_CIPHER_get_mode(gp) != EVP_CIPHER_get_mode(df)
            || EVP_CIPHER_get_key_length(gp) != EVP_CIPHER_get_key_length(df)
            || EVP_CIPHER_get_iv_length(gp) != EVP_CIPHER_get_iv_length(df)
            || EVP_CIPHER_get_block_size(gp) != EVP_CIPHER_get_block_size(df)
            || EVP_CIPHER_get_nid(gp) != EVP_CIPHER_get_nid(df))
            fail_msg("%s: gpuprov mode/key/iv/block/nid %d/%d/%d/%d/%d, default %d/%d/%d/%d/%d",
                     name, EVP_CIPHER_get_mode(gp), EVP_CIPHER_get_key_length(gp),
                     EVP_CIPHER_get_iv_length(gp), EVP_CIPHER_get_block_size(gp),
                     EVP_CIPHER_get_nid(gp), EVP_CIPHER_get_mode(df),
                     EVP_CIPHER_get_key_length(df), EVP_CIPHER_get_iv_length(df),
                     EVP_CIPHER_get_block_size(df), EVP_CIPHER_get_nid(df));
        if ((EVP_CIPHER_get_flags(gp) & mask) != (EVP_CIPHER_get_flags(df) & mask))
            fail_msg("%s: AEAD/CUSTOM_IV flags: gpuprov %#lx, default %#lx", name,
                     EVP_CIPHER_get_flags(gp) & mask, EVP_CIPHER_get_flags(df) & mask);
        /* All flags (CTS, TLS1_1_MULTIBLOCK, RAND_KEY, mode bits): a difference changes EVP's path. */
        if (EVP_CIPHER_get_flags(gp) != EVP_CIPHER_get_flags(df))
            fail_msg("%s: flags: gpuprov %#lx, default %#lx", name, EVP_CIPHER_get_flags(gp),
                     EVP_CIPHER_get_flags(df));
        nc.gp = gp;
        nc.missing = 0;
        if (!EVP_CIPHER_names_do_all(df, check_name, &nc) || nc.missing > 0)
            fail_msg("%s: gpuprov lacks one of the default provider's names (see above)", name);
        EVP_CIPHER_free(gp);
        EVP_CIPHER_free(df);
    }
}

/* AEAD tag handling for the round trip. */
static void crypt_with(const char *name, const char *propq, int enc, const unsigned char *key,
                       const unsigned char *iv, const unsigned char *aad, size_t aadlen,
                       const unsigned char *in, size_t len, unsigned char *out, unsigned char *tag)
{
    EVP_CIPHER *c = fetch_or_fail(name, propq);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int aead = (EVP_CIPHER_get_flags(c) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0, outl, fin;

    assert_non_null(ctx);
    assert_int_equal(EVP_CipherInit_ex2(ctx, c, key, iv, enc, NULL), 1);
    if (aead && !enc)
        assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tag), 1);
    if (aead)
        assert_int_equal(EVP_CipherUpdate(ctx, NULL, &outl, aad, (int)aadlen), 1);
    assert_int_equal(EVP_CipherUpdate(ctx, out, &outl, in, (int)len), 1);
    assert_int_equal((size_t)outl, len);
    fin = EVP_CipherFinal_ex(ctx, out + len, &outl);
    if (fin != 1) {
        ERR_print_errors_fp(stderr);
        fail_msg("%s: %s final failed (%s)", name, enc ? "encrypt" : "decrypt", propq);
    }
    if (aead && enc)
        assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag), 1);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
}

/* Encrypt on one provider, decrypt on the other, both ways; also the two ciphertexts agree. */
static void test_round_trip_with_default(void **state)
{
    static const size_t lens[] = { 0, 1, 16, 63, 1000, 16384 + 5 };

    for (size_t i = 0; i < N_PRIMARY; i++) {
        for (size_t l = 0; l < 2 * sizeof(lens) / sizeof(lens[0]); l++) {
            size_t len = lens[l % (sizeof(lens) / sizeof(lens[0]))];
            int edge_iv = l >= sizeof(lens) / sizeof(lens[0]);
            unsigned char key[32], iv[16], aad[29], tag_gp[16] = { 0 }, tag_df[16] = { 0 };
            unsigned char *pt = malloc(len + 16), *ct_gp = malloc(len + 16),
                          *ct_df = malloc(len + 16), *back = malloc(len + 16);

            assert_true(pt != NULL && ct_gp != NULL && ct_df != NULL && back != NULL);
            gptest_rand_bytes(key, sizeof(key));
            gptest_rand_bytes(iv, sizeof(iv));
            /* All-ones IV: the CTR counter wraps at once (2^128), ChaCha20's 32-bit block counter
             * overflows on its second block (OpenSSL carries into the next state word). */
            if (edge_iv)
                memset(iv, 0xff, sizeof(iv));
            gptest_rand_bytes(aad, sizeof(aad));
            gptest_rand_bytes(pt, len);
            crypt_with(cipher_names[i], gp_propq, 1, key, iv, aad, sizeof(aad), pt, len,
                       ct_gp, tag_gp);
            crypt_with(cipher_names[i], "provider=default", 1, key, iv, aad, sizeof(aad), pt, len,
                       ct_df, tag_df);
            if (memcmp(ct_gp, ct_df, len) != 0 || memcmp(tag_gp, tag_df, sizeof(tag_gp)) != 0)
                fail_msg("%s, %zu bytes%s: gpuprov's output differs from default's",
                         cipher_names[i], len, edge_iv ? ", all-ones IV" : "");
            crypt_with(cipher_names[i], "provider=default", 0, key, iv, aad, sizeof(aad), ct_gp,
                       len, back, tag_gp);
            assert_memory_equal(back, pt, len);
            crypt_with(cipher_names[i], gp_propq, 0, key, iv, aad, sizeof(aad), ct_df,
                       len, back, tag_df);
            assert_memory_equal(back, pt, len);
            free(pt);
            free(ct_gp);
            free(ct_df);
            free(back);
        }
    }
}

/* The config pins the DRBG to the default provider ([random_sect] properties = provider=default). */
static void test_rand_bytes_on_default(void **state)
{
    unsigned char a[64], b[64];
    EVP_RAND_CTX *drbgs[] = { RAND_get0_primary(NULL), RAND_get0_public(NULL),
                              RAND_get0_private(NULL) };

    if (RAND_bytes(a, sizeof(a)) != 1 || RAND_bytes(b, sizeof(b)) != 1) {
        ERR_print_errors_fp(stderr);
        fail_msg("%s", "RAND_bytes failed");
    }
    assert_memory_not_equal(a, b, sizeof(a));
    assert_int_equal(RAND_priv_bytes(a, sizeof(a)), 1);
    for (size_t i = 0; i < sizeof(drbgs) / sizeof(drbgs[0]); i++) {
        const EVP_RAND *r;

        assert_non_null(drbgs[i]);
        r = EVP_RAND_CTX_get0_rand(drbgs[i]);
        assert_string_equal(OSSL_PROVIDER_get0_name(EVP_RAND_get0_provider(r)), "default");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_providers_available),
        cmocka_unit_test(test_preferred_without_propq),
        cmocka_unit_test(test_static_params_match_default),
        cmocka_unit_test(test_round_trip_with_default),
        cmocka_unit_test(test_rand_bytes_on_default),
    };

    return cmocka_run_group_tests_name("load", tests, group_setup, NULL);
}
