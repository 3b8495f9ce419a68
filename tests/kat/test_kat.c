/* SPDX-License-Identifier: Apache-2.0 */
/* Known answers through gpuprov: every stanza whole, byte by byte and in random pieces, both ways. */
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
#include "kat_file.h"

/* Random chunkings tried per stanza and direction, on top of the whole and 1-byte runs. */
#define RANDOM_ROUNDS 6

static gptest_env *g_env;

enum chunking { CHUNK_WHOLE, CHUNK_BYTES, CHUNK_RANDOM };

static const char *const chunk_names[] = { "whole", "1-byte", "random" };

typedef struct run_opts {
    int enc;
    enum chunking aad_how, data_how;
    int tag_late;     /* decrypt: set the expected tag just before final, not right after init */
    int dup_midway;   /* continue on an EVP_CIPHER_CTX_copy taken mid-data; free the original */
    int reinit_iv;    /* process junk first, then re-init with the IV only (key kept, as TLS does) */
    int ctrl_ivlen;   /* set a non-default IV length with EVP_CTRL_AEAD_SET_IVLEN, not a param */
    size_t taglen;    /* encrypt: tag length to fetch; decrypt: length of tag_in */
    const unsigned char *tag_in;
    const unsigned char *aad;
    size_t aadlen;
    const unsigned char *in;
    size_t inlen;
} run_opts;

#define KFAIL(v, o, fmt, ...)                                                                     \
    do {                                                                                          \
        gptest_errors_pending();                                                                  \
        fail_msg("%s [%s, %s] %s aad=%s data=%s%s%s%s: " fmt, (v)->name, (v)->where,              \
                 (v)->cipher, (o)->enc ? "encrypt" : "decrypt", chunk_names[(o)->aad_how],        \
                 chunk_names[(o)->data_how], (o)->tag_late ? " tag-late" : "",                    \
                 (o)->dup_midway ? " dup" : "", (o)->reinit_iv ? " reinit" : "", __VA_ARGS__);    \
    } while (0)

static void hexdump(const char *label, const unsigned char *p, size_t n)
{
    fprintf(stderr, "  %-9s", label);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%02x", p[i]);
    fprintf(stderr, " (%zu bytes)\n", n);
}

static void expect_bytes(const kat_vec *v, const run_opts *o, const char *what,
                         const unsigned char *want, const unsigned char *got, size_t n)
{
    if (memcmp(want, got, n) == 0)
        return;
    hexdump("expected", want, n);
    hexdump("got", got, n);
    KFAIL(v, o, "%s differs", what);
}

static size_t next_piece(enum chunking how, size_t left)
{
    static const size_t edges[] = { 15, 16, 17, 31, 32, 33, 63, 64, 65 };
    size_t r, n;

    if (how == CHUNK_WHOLE)
        return left;
    if (how == CHUNK_BYTES)
        return left > 0 ? 1 : 0;
    r = gptest_rand_range(0, 9);
    if (r == 0)
        n = 0;                                          /* an empty update now and then */
    else if (r <= 4)
        n = gptest_rand_range(1, 17);
    else if (r <= 6)
        n = edges[gptest_rand_range(0, sizeof(edges) / sizeof(edges[0]) - 1)];
    else
        n = gptest_rand_range(1, left > 0 ? left : 1);
    return n < left ? n : left;
}

static int set_ivlen(EVP_CIPHER_CTX *ctx, size_t ivlen, int use_ctrl)
{
    OSSL_PARAM params[2];

    if (use_ctrl)
        return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, (int)ivlen, NULL) > 0;
    params[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen);
    params[1] = OSSL_PARAM_construct_end();
    return EVP_CIPHER_CTX_set_params(ctx, params);
}

static int set_tag(EVP_CIPHER_CTX *ctx, const unsigned char *tag, size_t len)
{
    unsigned char buf[16];
    OSSL_PARAM params[2];

    if (len > sizeof(buf))
        return 0;
    memcpy(buf, tag, len);
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, buf, len);
    params[1] = OSSL_PARAM_construct_end();
    return EVP_CIPHER_CTX_set_params(ctx, params);
}

static int get_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, size_t len)
{
    OSSL_PARAM params[2];

    params[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, len);
    params[1] = OSSL_PARAM_construct_end();
    return EVP_CIPHER_CTX_get_params(ctx, params);
}

static void feed_aad(EVP_CIPHER_CTX *ctx, const kat_vec *v, const run_opts *o)
{
    size_t done = 0;
    int outl;

    /* Whole: one call even for empty AAD (as evp_test does when "AAD =" is given). */
    if (o->aad_how == CHUNK_WHOLE) {
        if (o->aadlen == 0 && !v->aad.present)
            return;
        if (EVP_CipherUpdate(ctx, NULL, &outl, o->aad, (int)o->aadlen) != 1)
            KFAIL(v, o, "AAD update of %zu bytes failed", o->aadlen);
        return;
    }
    while (done < o->aadlen) {
        size_t n = next_piece(o->aad_how, o->aadlen - done);

        if (EVP_CipherUpdate(ctx, NULL, &outl, o->aad + done, (int)n) != 1)
            KFAIL(v, o, "AAD update of %zu bytes at offset %zu failed", n, done);
        done += n;
    }
}

static EVP_CIPHER_CTX *begin(const EVP_CIPHER *c, const kat_vec *v, const run_opts *o)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

    assert_non_null(ctx);
    if (EVP_CipherInit_ex2(ctx, c, NULL, NULL, o->enc, NULL) != 1)
        KFAIL(v, o, "%s", "init with the cipher failed");
    /* OpenSSL wants a non-default IV length set after the cipher is chosen, before the IV. */
    if (v->iv.len != (size_t)EVP_CIPHER_CTX_get_iv_length(ctx)) {
        if (!set_ivlen(ctx, v->iv.len, o->ctrl_ivlen))
            KFAIL(v, o, "setting the IV length to %zu failed", v->iv.len);
        if ((size_t)EVP_CIPHER_CTX_get_iv_length(ctx) != v->iv.len)
            KFAIL(v, o, "IV length reads back as %d, not %zu", EVP_CIPHER_CTX_get_iv_length(ctx),
                  v->iv.len);
    }
    if (EVP_CipherInit_ex2(ctx, NULL, v->key.p, v->iv.p, o->enc, NULL) != 1)
        KFAIL(v, o, "%s", "init with key and IV failed");
    if (o->reinit_iv) {
        unsigned char junk[80], junk_out[80];
        size_t n = gptest_rand_range(0, sizeof(junk));
        int outl, aead = (EVP_CIPHER_get_flags(c) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0;

        gptest_rand_bytes(junk, sizeof(junk));
        if (aead && EVP_CipherUpdate(ctx, NULL, &outl, junk, 7) != 1)
            KFAIL(v, o, "%s", "junk AAD update failed");
        if (EVP_CipherUpdate(ctx, junk_out, &outl, junk, (int)n) != 1)
            KFAIL(v, o, "%s", "junk update failed");
        if (EVP_CipherInit_ex2(ctx, NULL, NULL, v->iv.p, o->enc, NULL) != 1)
            KFAIL(v, o, "%s", "IV-only re-init failed");
    }
    return ctx;
}

static EVP_CIPHER_CTX *dup_and_free(EVP_CIPHER_CTX *ctx, const kat_vec *v, const run_opts *o,
                                     size_t offset)
{
    EVP_CIPHER_CTX *copy = EVP_CIPHER_CTX_new();

    assert_non_null(copy);
    if (EVP_CIPHER_CTX_copy(copy, ctx) != 1)
        KFAIL(v, o, "EVP_CIPHER_CTX_copy at offset %zu failed", offset);
    EVP_CIPHER_CTX_free(ctx);   /* the copy must share nothing with the original */
    return copy;
}

/* One pass over the data; returns EVP_CipherFinal_ex's result. out gets inlen bytes, tag_out
 * (encrypt, AEAD) o->taglen bytes. Everything before final must succeed. */
static int run_cipher(const EVP_CIPHER *c, const kat_vec *v, const run_opts *o,
                      unsigned char *out, unsigned char *tag_out)
{
    int aead = (EVP_CIPHER_get_flags(c) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0;
    size_t done = 0, dup_at = o->dup_midway ? gptest_rand_range(0, o->inlen) : SIZE_MAX;
    int duped = 0, outl, ret;
    EVP_CIPHER_CTX *ctx = begin(c, v, o);

    if (aead && !o->enc && !o->tag_late && !set_tag(ctx, o->tag_in, o->taglen))
        KFAIL(v, o, "setting a %zu-byte tag failed", o->taglen);
    if (aead)
        feed_aad(ctx, v, o);
    do {
        size_t n = next_piece(o->data_how, o->inlen - done);

        if (!duped && done >= dup_at) {
            ctx = dup_and_free(ctx, v, o, done);
            duped = 1;
        }
        if (o->data_how != CHUNK_WHOLE && n == 0 && done == o->inlen)
            break;
        if (EVP_CipherUpdate(ctx, out + done, &outl, o->in + done, (int)n) != 1)
            KFAIL(v, o, "update of %zu bytes at offset %zu failed", n, done);
        /* Stream modes: every update returns exactly its input (OpenSSL's default does). */
        if ((size_t)outl != n)
            KFAIL(v, o, "update of %zu bytes at offset %zu returned %d bytes", n, done, outl);
        done += n;
    } while (done < o->inlen);
    if (!duped && dup_at != SIZE_MAX)   /* dup_at == inlen: copy after the data, before final */
        ctx = dup_and_free(ctx, v, o, done);
    if (aead && !o->enc && o->tag_late && !set_tag(ctx, o->tag_in, o->taglen))
        KFAIL(v, o, "setting a %zu-byte tag before final failed", o->taglen);
    outl = -1;
    ret = EVP_CipherFinal_ex(ctx, out + done, &outl);
    if (ret == 1 && outl != 0)
        KFAIL(v, o, "final returned %d bytes, want 0", outl);
    if (ret == 1 && aead && o->enc && !get_tag(ctx, tag_out, o->taglen))
        KFAIL(v, o, "getting a %zu-byte tag failed", o->taglen);
    if (ret != 1)
        gptest_errors_pending();
    EVP_CIPHER_CTX_free(ctx);
    return ret;
}

static void pick_opts(run_opts *o, int round)
{
    o->aad_how = round == 0 ? CHUNK_WHOLE : round == 1 ? CHUNK_BYTES
               : (enum chunking)gptest_rand_range(0, 2);
    o->data_how = round == 0 ? CHUNK_WHOLE : round == 1 ? CHUNK_BYTES : CHUNK_RANDOM;
    o->tag_late = round % 2;
    o->dup_midway = round >= 2 && gptest_rand_range(0, 1) == 1;
    o->reinit_iv = round >= 2 && gptest_rand_range(0, 2) == 0;
    o->ctrl_ivlen = round % 3 == 1;
}

/* Decrypt with one of tag, AAD or ciphertext altered in one bit: final must fail. */
static void expect_reject(const EVP_CIPHER *c, const kat_vec *v, const char *what,
                          const unsigned char *tag, size_t taglen, const unsigned char *aad,
                          const unsigned char *ct, unsigned char *scratch)
{
    for (int round = 0; round < 3; round++) {
        run_opts o = { 0 };

        pick_opts(&o, round);
        o.enc = 0;
        o.tag_in = tag;
        o.taglen = taglen;
        o.aad = aad;
        o.aadlen = v->aad.len;
        o.in = ct;
        o.inlen = v->ct.len;
        if (run_cipher(c, v, &o, scratch, NULL) != 0)
            KFAIL(v, &o, "decryption with %s succeeded", what);
    }
}

static void flip_one_bit(unsigned char *p, size_t len)
{
    p[gptest_rand_range(0, len - 1)] ^= (unsigned char)(1u << gptest_rand_range(0, 7));
}

static void test_aead_negatives(const EVP_CIPHER *c, const kat_vec *v, unsigned char *scratch)
{
    unsigned char tag[16];
    unsigned char *aad = malloc(v->aad.len + 1), *ct = malloc(v->ct.len + 1);

    assert_non_null(aad);
    assert_non_null(ct);
    memcpy(tag, v->tag.p, v->tag.len);
    flip_one_bit(tag, v->tag.len);
    expect_reject(c, v, "a flipped tag bit", tag, v->tag.len, v->aad.p, v->ct.p, scratch);
    if (v->aad.len > 0) {
        memcpy(aad, v->aad.p, v->aad.len);
        flip_one_bit(aad, v->aad.len);
        expect_reject(c, v, "a flipped AAD bit", v->tag.p, v->tag.len, aad, v->ct.p, scratch);
    }
    if (v->ct.len > 0) {
        memcpy(ct, v->ct.p, v->ct.len);
        flip_one_bit(ct, v->ct.len);
        expect_reject(c, v, "a flipped ciphertext bit", v->tag.p, v->tag.len, v->aad.p, ct,
                      scratch);
    }
    free(aad);
    free(ct);
}

/* A shorter tag is the prefix of the full one; decryption accepts that prefix and rejects it
 * altered. GCM allows any length 1..16 (SP 800-38D §5.2.1.2 lists 12..16, 8 and 4 for some uses). */
static void test_short_tags(const EVP_CIPHER *c, const kat_vec *v, unsigned char *scratch)
{
    static const size_t lens[] = { 15, 12, 8, 4 };

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        unsigned char tag[16];
        run_opts o = { 0 };

        pick_opts(&o, (int)i);
        o.enc = 1;
        o.taglen = lens[i];
        o.aad = v->aad.p;
        o.aadlen = v->aad.len;
        o.in = v->pt.p;
        o.inlen = v->pt.len;
        if (run_cipher(c, v, &o, scratch, tag) != 1)
            KFAIL(v, &o, "final failed with a %zu-byte tag", lens[i]);
        expect_bytes(v, &o, "ciphertext", v->ct.p, scratch, v->ct.len);
        expect_bytes(v, &o, "short tag (prefix of the full tag)", v->tag.p, tag, lens[i]);

        o.enc = 0;
        o.tag_in = v->tag.p;
        o.in = v->ct.p;
        if (run_cipher(c, v, &o, scratch, NULL) != 1)
            KFAIL(v, &o, "decryption with the %zu-byte tag prefix failed", lens[i]);
        expect_bytes(v, &o, "plaintext", v->pt.p, scratch, v->pt.len);

        memcpy(tag, v->tag.p, lens[i]);
        flip_one_bit(tag, lens[i]);
        o.tag_in = tag;
        if (run_cipher(c, v, &o, scratch, NULL) != 0)
            KFAIL(v, &o, "decryption with a flipped %zu-byte tag succeeded", lens[i]);
    }
}

static void test_stanza(void **state)
{
    const kat_vec *v = *state;
    EVP_CIPHER *c = gptest_fetch(g_env, v->cipher, 1);
    int aead = (EVP_CIPHER_get_flags(c) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0;
    unsigned char *out = malloc(v->pt.len + 1);
    unsigned char tag[16];

    assert_non_null(out);
    if ((size_t)EVP_CIPHER_get_key_length(c) != v->key.len)
        fail_msg("%s [%s]: key is %zu bytes, %s wants %d", v->name, v->where, v->key.len,
                 v->cipher, EVP_CIPHER_get_key_length(c));
    if (aead && (!v->tag.present || v->tag.len == 0 || v->tag.len > 16))
        fail_msg("%s [%s]: an AEAD stanza needs a Tag of 1..16 bytes", v->name, v->where);
    if (!aead && (v->tag.present || v->aad.len > 0))
        fail_msg("%s [%s]: Tag/AAD given for a cipher without AEAD", v->name, v->where);

    for (int round = 0; round < 2 + RANDOM_ROUNDS; round++) {
        run_opts o = { 0 };

        pick_opts(&o, round);
        o.aad = v->aad.p;
        o.aadlen = v->aad.len;
        o.taglen = v->tag.len;
        if (!v->expect_tag_mismatch) {
            o.enc = 1;
            o.in = v->pt.p;
            o.inlen = v->pt.len;
            if (run_cipher(c, v, &o, out, tag) != 1)
                KFAIL(v, &o, "%s", "encrypt final failed");
            expect_bytes(v, &o, "ciphertext", v->ct.p, out, v->ct.len);
            if (aead)
                expect_bytes(v, &o, "tag", v->tag.p, tag, v->tag.len);
        }
        pick_opts(&o, round);
        o.enc = 0;
        o.tag_in = v->tag.p;
        o.in = v->ct.p;
        o.inlen = v->ct.len;
        if (v->expect_tag_mismatch) {
            if (run_cipher(c, v, &o, out, NULL) != 0)
                KFAIL(v, &o, "%s", "decryption with a wrong tag succeeded");
            continue;
        }
        if (run_cipher(c, v, &o, out, NULL) != 1)
            KFAIL(v, &o, "%s", "decrypt final failed");
        expect_bytes(v, &o, "plaintext", v->pt.p, out, v->pt.len);
    }
    if (aead && !v->expect_tag_mismatch) {
        test_aead_negatives(c, v, out);
        if (v->tag.len == 16)
            test_short_tags(c, v, out);
    }
    free(out);
    EVP_CIPHER_free(c);
}

/* The environment lives in g_env, not in the group state: cmocka hands a non-NULL group state to
 * every test in place of its initial_state, and each test needs its stanza. */
static int group_setup(void **state)
{
    void *env = NULL;
    int rc = gptest_env_setup(&env);

    g_env = env;
    return rc;
}

static int group_teardown(void **state)
{
    void *env = g_env;

    g_env = NULL;
    return gptest_env_teardown(&env);
}

int main(int argc, char **argv)
{
    kat_vec *vecs = NULL;
    size_t n = 0;
    struct CMUnitTest *tests;
    char **names;
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: %s KAT-FILE...\n", argv[0]);
        return 1;
    }
    for (int i = 1; i < argc; i++)
        if (kat_file_read(argv[i], &vecs, &n) != 0)
            return 1;
    if (n == 0) {
        fprintf(stderr, "no stanzas in the KAT files\n");
        return 1;
    }
    tests = calloc(n, sizeof(*tests));
    names = calloc(n, sizeof(*names));
    if (tests == NULL || names == NULL)
        return 1;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(vecs[i].name) + strlen(vecs[i].cipher) + 4;

        names[i] = malloc(len);
        if (names[i] == NULL)
            return 1;
        snprintf(names[i], len, "%s (%s)", vecs[i].name, vecs[i].cipher);
        tests[i].name = names[i];
        tests[i].test_func = test_stanza;
        tests[i].initial_state = &vecs[i];
    }
    fprintf(stderr, "kat: %zu stanzas, executor %s\n", n, gptest_executor());
    rc = _cmocka_run_group_tests("kat", tests, n, group_setup, group_teardown);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(tests);
    kat_vecs_free(vecs, n);
    return rc;
}
