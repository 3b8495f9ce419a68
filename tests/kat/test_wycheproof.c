/* SPDX-License-Identifier: Apache-2.0 */
/* Wycheproof AES-GCM and ChaCha20-Poly1305 vectors through gpuprov, judged against the default provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "gptest.h"
#include "wp_json.h"

/* Totals over both files, for main's "zero vectors ran" check. */
static size_t total_ran;

typedef struct wp_vec {
    long tcid;
    const char *result, *comment;
    char flags[256];
    unsigned char *key, *iv, *aad, *msg, *ct, *tag;
    size_t keylen, ivlen, aadlen, msglen, ctlen, taglen;
} wp_vec;

/* What one provider did with one vector. */
typedef struct wp_outcome {
    int enc_params_ok, dec_params_ok;   /* IV length, key and IV accepted */
    int enc_ok;                         /* encryption ran through final and gave the tag */
    int dec_ok;                         /* decryption's final accepted the tag */
    unsigned char *enc;                 /* ct || tag */
    unsigned char *dec;
} wp_outcome;

typedef struct wp_counts {
    size_t ran, passed, failed;
    size_t valid_ok, unsupported;                  /* valid: matched / IV size refused by both */
    size_t invalid_params, invalid_final;          /* invalid: refused at init / at final */
    size_t invalid_size_accepted;                  /* invalid size flags OpenSSL still accepts */
} wp_counts;

static void outcome_free(wp_outcome *o)
{
    free(o->enc);
    free(o->dec);
}

/* Cipher init with a non-default IV length set in between; 0 when the parameters are refused. */
static int wp_start(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *c, const wp_vec *v, int enc)
{
    if (EVP_CipherInit_ex2(ctx, c, NULL, NULL, enc, NULL) != 1)
        return 0;
    if (v->ivlen != (size_t)EVP_CIPHER_CTX_get_iv_length(ctx)) {
        size_t ivlen = v->ivlen;
        OSSL_PARAM params[2];

        params[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen);
        params[1] = OSSL_PARAM_construct_end();
        if (!EVP_CIPHER_CTX_set_params(ctx, params))
            return 0;
    }
    return EVP_CipherInit_ex2(ctx, NULL, v->key, v->iv, enc, NULL) == 1;
}

static void wp_run(const EVP_CIPHER *c, const wp_vec *v, size_t taglen, wp_outcome *r)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    unsigned char tagbuf[16];
    OSSL_PARAM params[2];
    int outl, fin;

    memset(r, 0, sizeof(*r));
    r->enc = calloc(1, v->msglen + taglen + 1);
    r->dec = calloc(1, v->ctlen + 1);
    assert_non_null(ctx);
    assert_non_null(r->enc);
    assert_non_null(r->dec);

    r->enc_params_ok = wp_start(ctx, c, v, 1);
    if (r->enc_params_ok
        && EVP_CipherUpdate(ctx, NULL, &outl, v->aad, (int)v->aadlen) == 1
        && EVP_CipherUpdate(ctx, r->enc, &outl, v->msg, (int)v->msglen) == 1
        && (size_t)outl == v->msglen
        && EVP_CipherFinal_ex(ctx, r->enc + v->msglen, &outl) == 1 && outl == 0) {
        params[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG,
                                                      r->enc + v->msglen, taglen);
        params[1] = OSSL_PARAM_construct_end();
        r->enc_ok = EVP_CIPHER_CTX_get_params(ctx, params);
    }
    gptest_errors_pending();

    EVP_CIPHER_CTX_reset(ctx);
    r->dec_params_ok = wp_start(ctx, c, v, 0);
    if (r->dec_params_ok && v->taglen <= sizeof(tagbuf)) {
        memcpy(tagbuf, v->tag, v->taglen);
        params[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tagbuf,
                                                      v->taglen);
        params[1] = OSSL_PARAM_construct_end();
        fin = 0;
        if (EVP_CIPHER_CTX_set_params(ctx, params)
            && EVP_CipherUpdate(ctx, NULL, &outl, v->aad, (int)v->aadlen) == 1
            && EVP_CipherUpdate(ctx, r->dec, &outl, v->ct, (int)v->ctlen) == 1
            && (size_t)outl == v->ctlen)
            fin = EVP_CipherFinal_ex(ctx, r->dec + v->ctlen, &outl) == 1 && outl == 0;
        r->dec_ok = fin;
    }
    gptest_errors_pending();
    EVP_CIPHER_CTX_free(ctx);
}

static int has_flag(const wp_vec *v, const char *flag)
{
    const char *p = v->flags;
    size_t n = strlen(flag);

    while ((p = strstr(p, flag)) != NULL) {
        if ((p == v->flags || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return 1;
        p += n;
    }
    return 0;
}

static int vec_load(const wj_value *t, wp_vec *v)
{
    const char *key = wj_get_str(t, "key"), *iv = wj_get_str(t, "iv"),
               *aad = wj_get_str(t, "aad"), *msg = wj_get_str(t, "msg"),
               *ct = wj_get_str(t, "ct"), *tag = wj_get_str(t, "tag");
    const wj_value *flags = wj_get(t, "flags");

    memset(v, 0, sizeof(*v));
    v->tcid = wj_get_int(t, "tcId");
    v->result = wj_get_str(t, "result");
    v->comment = wj_get_str(t, "comment");
    if (key == NULL || iv == NULL || aad == NULL || msg == NULL || ct == NULL || tag == NULL
        || v->result == NULL)
        return -1;
    for (size_t i = 0; flags != NULL && flags->type == WJ_ARR && i < flags->n; i++) {
        if (flags->items[i].type != WJ_STR)
            continue;
        if (v->flags[0] != '\0')
            strncat(v->flags, ",", sizeof(v->flags) - strlen(v->flags) - 1);
        strncat(v->flags, flags->items[i].str, sizeof(v->flags) - strlen(v->flags) - 1);
    }
    v->key = gptest_unhex(key, &v->keylen);
    v->iv = gptest_unhex(iv, &v->ivlen);
    v->aad = gptest_unhex(aad, &v->aadlen);
    v->msg = gptest_unhex(msg, &v->msglen);
    v->ct = gptest_unhex(ct, &v->ctlen);
    v->tag = gptest_unhex(tag, &v->taglen);
    if (v->key == NULL || v->iv == NULL || v->aad == NULL || v->msg == NULL || v->ct == NULL
        || v->tag == NULL)
        return -1;
    return 0;
}

static void vec_free(wp_vec *v)
{
    free(v->key);
    free(v->iv);
    free(v->aad);
    free(v->msg);
    free(v->ct);
    free(v->tag);
}

#define VFAIL(...)                                                                     \
    do {                                                                               \
        fprintf(stderr, "FAIL %s tcId %ld (%s; %s; iv %zu bytes): ", file, v->tcid,    \
                v->result, v->flags, v->ivlen);                                        \
        fprintf(stderr, __VA_ARGS__);                                                  \
        fprintf(stderr, "\n");                                                         \
        return 0;                                                                      \
    } while (0)

/* Returns 1 when gpuprov handled the vector as required and exactly as the default provider. */
static int judge(const char *file, const wp_vec *v, size_t taglen, const wp_outcome *gp,
                 const wp_outcome *df, wp_counts *cnt)
{
    int valid = strcmp(v->result, "valid") == 0, invalid = strcmp(v->result, "invalid") == 0;

    /* Same decisions, same bytes as the default provider. */
    if (gp->enc_params_ok != df->enc_params_ok || gp->dec_params_ok != df->dec_params_ok)
        VFAIL("parameters %s by gpuprov but %s by default",
              gp->enc_params_ok ? "accepted" : "refused",
              df->enc_params_ok ? "accepted" : "refused");
    if (gp->enc_ok != df->enc_ok)
        VFAIL("encryption %s on gpuprov, %s on default", gp->enc_ok ? "ok" : "failed",
              df->enc_ok ? "ok" : "failed");
    if (gp->enc_ok && memcmp(gp->enc, df->enc, v->msglen + taglen) != 0)
        VFAIL("gpuprov's ct||tag differs from default's");
    if (gp->dec_ok != df->dec_ok)
        VFAIL("decryption %s on gpuprov, %s on default", gp->dec_ok ? "accepted" : "rejected",
              df->dec_ok ? "accepted" : "rejected");
    if (gp->dec_ok && memcmp(gp->dec, df->dec, v->ctlen) != 0)
        VFAIL("gpuprov's plaintext differs from default's");

    if (valid) {
        if (!df->enc_params_ok && !df->dec_params_ok) {
            cnt->unsupported++;   /* e.g. a GCM IV over 128 bytes: refused cleanly by both */
            fprintf(stderr, "unsupported %s tcId %ld (%s; %s): %zu-byte IV refused by both "
                    "providers\n", file, v->tcid, v->result, v->flags, v->ivlen);
            return 1;
        }
        if (!gp->enc_ok || v->ctlen != v->msglen || v->taglen != taglen
            || memcmp(gp->enc, v->ct, v->ctlen) != 0 || memcmp(gp->enc + v->msglen, v->tag, taglen) != 0)
            VFAIL("valid vector: encryption did not give ct||tag");
        if (!gp->dec_ok || memcmp(gp->dec, v->msg, v->msglen) != 0)
            VFAIL("valid vector: decryption did not give msg");
        cnt->valid_ok++;
        return 1;
    }
    if (invalid) {
        if (gp->dec_ok)
            VFAIL("invalid vector accepted by decryption");
        if (!gp->dec_params_ok) {
            cnt->invalid_params++;
            if (getenv("GPTEST_VERBOSE") != NULL)
                fprintf(stderr, "refused %s tcId %ld (%s): %zu-byte IV refused at init\n", file,
                        v->tcid, v->flags, v->ivlen);
        } else {
            cnt->invalid_final++;
            /* An IV/nonce size Wycheproof calls invalid but OpenSSL takes (reported, see main). */
            if (has_flag(v, "ZeroLengthIv") || has_flag(v, "InvalidNonceSize")) {
                cnt->invalid_size_accepted++;
                fprintf(stderr, "note %s tcId %ld (%s): %zu-byte IV accepted by the default provider "
                        "too; rejected at final (tag mismatch)\n", file, v->tcid, v->flags, v->ivlen);
            }
        }
        return 1;
    }
    VFAIL("result '%s' is neither valid nor invalid", v->result);
}

static void run_file(const char *fname)
{
    gptest_env *env = NULL;
    const char *dir = getenv("GPTEST_WYCHEPROOF_DIR");
    char path[4096], err[256];
    wj_value *root;
    const wj_value *groups;
    const char *alg;
    wp_counts cnt;

    memset(&cnt, 0, sizeof(cnt));
    snprintf(path, sizeof(path), "%s/%s", dir, fname);
    root = wj_parse_file(path, err, sizeof(err));
    if (root == NULL)
        fail_msg("%s: %s", path, err);
    alg = wj_get_str(root, "algorithm");
    groups = wj_get(root, "testGroups");
    if (alg == NULL || groups == NULL || groups->type != WJ_ARR)
        fail_msg("%s: no algorithm / testGroups", path);
    if (gptest_env_setup((void **)&env) != 0)
        fail_msg("%s", "cannot set up the providers");

    for (size_t g = 0; g < groups->n; g++) {
        const wj_value *grp = &groups->items[g], *tests = wj_get(grp, "tests");
        long keybits = wj_get_int(grp, "keySize"), tagbits = wj_get_int(grp, "tagSize");
        char name[64];
        EVP_CIPHER *gpc, *dfc;

        if (tests == NULL || tests->type != WJ_ARR || keybits <= 0 || tagbits <= 0
            || tagbits % 8 != 0 || tagbits > 128)
            fail_msg("%s: malformed test group %zu", path, g);
        if (strcmp(alg, "AES-GCM") == 0)
            snprintf(name, sizeof(name), "AES-%ld-GCM", keybits);
        else if (strcmp(alg, "CHACHA20-POLY1305") == 0 && keybits == 256)
            snprintf(name, sizeof(name), "ChaCha20-Poly1305");
        else
            fail_msg("%s: unexpected algorithm %s with %ld-bit keys", path, alg, keybits);
        gpc = gptest_fetch(env, name, 1);
        dfc = gptest_fetch(env, name, 0);

        for (size_t t = 0; t < tests->n; t++) {
            wp_vec v;
            wp_outcome gp, df;

            if (vec_load(&tests->items[t], &v) != 0)
                fail_msg("%s: malformed test %zu of group %zu", path, t, g);
            wp_run(gpc, &v, (size_t)tagbits / 8, &gp);
            wp_run(dfc, &v, (size_t)tagbits / 8, &df);
            cnt.ran++;
            if (judge(fname, &v, (size_t)tagbits / 8, &gp, &df, &cnt))
                cnt.passed++;
            else
                cnt.failed++;
            outcome_free(&gp);
            outcome_free(&df);
            vec_free(&v);
        }
        EVP_CIPHER_free(gpc);
        EVP_CIPHER_free(dfc);
    }
    fprintf(stderr,
            "%s (%s, executor %s): %zu vectors ran, %zu passed, %zu failed; valid: %zu matched, "
            "%zu refused as unsupported by both providers; invalid: %zu refused at init/IV length, "
            "%zu rejected at final (%zu of them with an IV size flagged invalid)\n",
            fname, alg, gptest_executor(), cnt.ran, cnt.passed, cnt.failed, cnt.valid_ok,
            cnt.unsupported, cnt.invalid_params, cnt.invalid_final, cnt.invalid_size_accepted);
    total_ran += cnt.ran;
    gptest_env_teardown((void **)&env);
    wj_free(root);
    if (cnt.ran == 0)
        fail_msg("%s: no vectors ran", fname);
    if (cnt.failed > 0)
        fail_msg("%s: %zu of %zu vectors failed (see FAIL lines)", fname, cnt.failed, cnt.ran);
}

static void test_aes_gcm(void **state)
{
    run_file("aes_gcm_test.json");
}

static void test_chacha20_poly1305(void **state)
{
    run_file("chacha20_poly1305_test.json");
}

int main(void)
{
    const char *dir = getenv("GPTEST_WYCHEPROOF_DIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aes_gcm),
        cmocka_unit_test(test_chacha20_poly1305),
    };
    int rc;

    if (dir == NULL || dir[0] == '\0') {
        printf("GPTEST_WYCHEPROOF_DIR is not set: configure with -Dwycheproof_dir=DIR (the "
               "directory holding aes_gcm_test.json and chacha20_poly1305_test.json); skipping\n");
        return 77;
    }
    rc = cmocka_run_group_tests_name("wycheproof", tests, NULL, NULL);
    if (rc == 0 && total_ran == 0) {
        fprintf(stderr, "no Wycheproof vectors ran\n");
        return 1;
    }
    return rc;
}
