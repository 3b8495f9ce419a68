/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_evp_diff's pipeline sequences: OpenSSL 3.5's EVP_CipherPipeline* calls on gpuprov against one default-provider context per pipe. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/params.h>

#include "fuzz_pipeline.h"
#include "pipe_api.h"
#include "provider/errors.h"   /* the reasons gpuprov's deliberate refusals carry */

/*
 * Input (after "PIPE"): alg numpipes steps...; alg byte % 8, numpipes byte % 32 + 1, step byte % 6:
 *   0 init:   a pipeline init, direction and IVs from the input (GCM: an IV length of 1..64 or 12),
 *             or the last encryption's IVs for its decryption (then its ciphertexts and tags replay)
 *   1 AAD:    an update with out == NULL, each pipe a length (0 allowed) of bytes from a seed
 *   2 data:   an update, each pipe a length, in place or not; decrypting a replay, its ciphertext
 *   3 Final:  decrypting, the tags set first (the replay's, one pipe's flipped, or seeded bytes);
 *             encrypting, the tags read after it (a length of 1..16)
 *   4 plain:  a single-message update on the pipeline context (refused)
 *   5 copy:   EVP_CIPHER_CTX_copy; the copy goes on, the original is freed
 * Each pipe's calls run on a default-provider context of its own (EVP_CipherInit_ex2, updates,
 * Final, AEAD_TAG): return values, outl, every output byte and tag must agree, and a decryption's
 * Final must fail exactly the pipes whose own context refuses the tag (the error's data names
 * them), clearing those pipes' output. Calls that gpuprov refuses on purpose (AAD after data, a
 * call after Final, AAD on a stream cipher, a single-message call) must be refused with gpuprov's
 * reason, and both sides start over with an init.
 */

#define PZ_MAX_LEN 2048      /* per pipe per update: 32 pipes run on the host executor too */
#define PZ_MAX_MSG 16384     /* per pipe, what a replay keeps */
#define PZ_MAX_STEPS 24

typedef struct pz {
    const fz_pipe_alg *ai;
    const EVP_CIPHER *gpc, *refc;
    const pipe_api *api;
    EVP_CIPHER_CTX *gp, *ref[PIPE_MAX];
    size_t n, ivlen;
    int enc, inited, finished, aad_after_data;
    int data_seen[PIPE_MAX];
    uint8_t key[32], iv[PIPE_MAX][64];
    /* the last encryption: its IVs, AAD, ciphertext and tags (for its decryption's replay) */
    int replay_ok, replaying;
    size_t rivlen;
    uint8_t riv[PIPE_MAX][64], rtag[PIPE_MAX][16];
    uint8_t *raad[PIPE_MAX], *rct[PIPE_MAX];
    size_t raad_len[PIPE_MAX], rct_len[PIPE_MAX], rct_pos[PIPE_MAX], raad_pos[PIPE_MAX];
    char trace[8192];
    size_t tlen;
    int verbose;
} pz;

static pipe_api api_loaded;
static int api_state;   /* 0 not looked, 1 present, -1 absent */

int fuzz_pipeline_available(void)
{
    if (api_state == 0)
        api_state = pipe_api_load(&api_loaded) ? 1 : -1;
    return api_state > 0;
}

typedef struct prd {
    const uint8_t *p;
    size_t n, pos;
} prd;

static uint8_t rd8(prd *r)
{
    return r->pos < r->n ? r->p[r->pos++] : 0;
}

/* A length: mostly 0..119, sometimes up to PZ_MAX_LEN. */
static size_t rd_plen(prd *r)
{
    uint8_t b = rd8(r);

    return b < 0xe0 ? b % 120 : (size_t)(rd8(r) | rd8(r) << 8) % (PZ_MAX_LEN + 1);
}

static void fill(uint8_t *p, size_t n, uint8_t seed, size_t salt)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + salt;

    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (uint8_t)(s >> 56);
    }
}

static void pz_trace(pz *z, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void pz_trace(pz *z, const char *fmt, ...)
{
    va_list ap;
    int k;

    if (z->tlen >= sizeof(z->trace) - 1)
        return;
    va_start(ap, fmt);
    k = vsnprintf(z->trace + z->tlen, sizeof(z->trace) - z->tlen, fmt, ap);
    va_end(ap);
    if (k > 0)
        z->tlen += (size_t)k < sizeof(z->trace) - z->tlen ? (size_t)k : sizeof(z->trace) - 1 - z->tlen;
}

static void pz_differ(pz *z, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void pz_differ(pz *z, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "fuzz_pipeline: %s, %zu pipes: DIFFERENCE: ", z->ai->name, z->n);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n---- the calls:\n%s", z->trace);
    ERR_print_errors_fp(stderr);
    abort();
}

/* The pipes an error's data names ("pipe 3", "pipes 0, 5, 17"), marked in named[]. */
static void pipes_named(const char *data, int named[PIPE_MAX])
{
    char *end;

    if (strncmp(data, "pipes ", 6) == 0)
        data += 6;
    else if (strncmp(data, "pipe ", 5) == 0)
        data += 5;
    else
        return;
    for (;;) {
        long k = strtol(data, &end, 10);

        if (end == data)
            return;
        if (k >= 0 && k < PIPE_MAX)
            named[k] = 1;
        data = end;
        while (*data == ',' || *data == ' ')
            data++;
    }
}

/* The reason of gpuprov's last error. */
static int last_reason(void)
{
    unsigned long e, last = 0;

    while ((e = ERR_get_error()) != 0)
        last = e;
    return ERR_GET_REASON(last);
}

/* A call gpuprov must refuse with `reason`; both sides then start over at the next init. */
static void expect_refusal(pz *z, int rc, int reason, const char *what)
{
    int got;

    if (rc > 0)
        pz_differ(z, "%s: accepted, gpuprov must refuse it", what);
    got = last_reason();
    if (got != reason)
        pz_differ(z, "%s: refused with reason %d, not %d", what, got, reason);
    z->inited = 0;
    pz_trace(z, "  -> refused (%d), as gpuprov must\n", reason);
}

static void free_refs(pz *z)
{
    for (size_t i = 0; i < PIPE_MAX; i++) {
        EVP_CIPHER_CTX_free(z->ref[i]);
        z->ref[i] = NULL;
    }
}

static void step_init(pz *z, prd *r)
{
    const unsigned char *ivp[PIPE_MAX];
    const uint8_t b = rd8(r), seed = rd8(r);
    int ok;

    z->replaying = z->ai->aead && z->replay_ok && (b & 1);
    z->enc = z->replaying ? 0 : (b >> 1) & 1;
    if (z->replaying) {
        z->ivlen = z->rivlen;
        memcpy(z->iv, z->riv, sizeof(z->iv));
        memset(z->rct_pos, 0, sizeof(z->rct_pos));
        memset(z->raad_pos, 0, sizeof(z->raad_pos));
    } else {
        z->ivlen = z->ai->gcm && (b & 4) ? (size_t)(b >> 3) % 64 + 1 : z->ai->ivlen;
        fill(&z->iv[0][0], sizeof(z->iv), seed, 1);
        if (z->ai->chacha20)
            for (size_t i = 0; i < z->n; i++)
                memset(z->iv[i], 0, 4);   /* ChaCha20: a block counter far from its wrap */
    }
    for (size_t i = 0; i < z->n; i++)
        ivp[i] = z->iv[i];
    pz_trace(z, "init %s ivlen %zu%s\n", z->enc ? "encrypt" : "decrypt", z->ivlen, z->replaying ? " (replay)" : "");
    EVP_CIPHER_CTX_reset(z->gp);
    ok = (z->enc ? z->api->encrypt_init : z->api->decrypt_init)(z->gp, z->gpc, z->key, z->ai->keylen, z->n, ivp,
                                                                   z->ivlen);
    if (ok != 1)
        pz_differ(z, "pipeline init refused");
    for (size_t i = 0; i < z->n; i++) {
        OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
        size_t ivlen = z->ivlen;

        EVP_CIPHER_CTX_reset(z->ref[i]);
        p[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen);
        if (EVP_CipherInit_ex2(z->ref[i], z->refc, NULL, NULL, z->enc, NULL) != 1
            || (z->ai->gcm && ivlen != 12 && EVP_CIPHER_CTX_set_params(z->ref[i], p) != 1)
            || EVP_CipherInit_ex2(z->ref[i], NULL, z->key, z->iv[i], z->enc, NULL) != 1)
            pz_differ(z, "the default provider refused pipe %zu's init", i);
        z->data_seen[i] = 0;
    }
    if (z->enc) {
        z->replay_ok = 0;
        z->rivlen = z->ivlen;
        memcpy(z->riv, z->iv, sizeof(z->riv));
        memset(z->raad_len, 0, sizeof(z->raad_len));
        memset(z->rct_len, 0, sizeof(z->rct_len));
    }
    z->inited = 1;
    z->finished = 0;
    ERR_clear_error();
}

static void step_update(pz *z, prd *r, int aad)
{
    unsigned char *outp[PIPE_MAX], *bufs[PIPE_MAX];
    const unsigned char *inp[PIPE_MAX];
    size_t outl[PIPE_MAX], outsize[PIPE_MAX], inl[PIPE_MAX];
    const uint8_t mode = rd8(r), seed = rd8(r);
    const int in_place = mode & 1;
    int after_data = 0, rc;

    pz_trace(z, "%s:", aad ? "aad" : "data");
    for (size_t i = 0; i < z->n; i++) {
        uint8_t **rec = aad ? z->raad : z->rct;
        size_t *pos = aad ? z->raad_pos : z->rct_pos, *have = aad ? z->raad_len : z->rct_len;

        inl[i] = rd_plen(r);
        if (z->replaying && rec[i] != NULL) {
            inl[i] = (mode & 2) ? have[i] - pos[i] : inl[i] < have[i] - pos[i] ? inl[i] : have[i] - pos[i];
        }
        bufs[i] = malloc(inl[i] + 1);
        if (bufs[i] == NULL)
            abort();
        if (z->replaying && rec[i] != NULL) {
            memcpy(bufs[i], rec[i] + pos[i], inl[i]);
            pos[i] += inl[i];
        } else {
            fill(bufs[i], inl[i], seed, i);
        }
        inp[i] = bufs[i];
        outp[i] = in_place ? bufs[i] : malloc(inl[i] + 1);
        if (outp[i] == NULL)
            abort();
        outsize[i] = inl[i];
        after_data |= aad && inl[i] > 0 && z->data_seen[i];
        pz_trace(z, " %zu", inl[i]);
    }
    pz_trace(z, "%s\n", in_place ? " in place" : "");
    /* The default's answers first: an in-place update overwrites the input. */
    if (!z->inited) {
        pz_trace(z, "  (skipped: both sides start over at the next init)\n");
        goto out;
    }
    if (z->finished || (aad && (!z->ai->aead || after_data))) {
        rc = z->api->update(z->gp, aad ? NULL : outp, outl, outsize, inp, inl);
        expect_refusal(z, rc, z->finished ? GP_R_MESSAGE_FINISHED : !z->ai->aead ? GP_R_PIPE_NO_AAD : GP_R_AAD_AFTER_DATA,
                       "an update");
        goto out;
    }
    {
        uint8_t *want[PIPE_MAX];

        for (size_t i = 0; i < z->n; i++) {
            int outi = 0;

            want[i] = malloc(inl[i] + 1);
            if (want[i] == NULL)
                abort();
            if (inl[i] > 0 && (EVP_CipherUpdate(z->ref[i], aad ? NULL : want[i], &outi, inp[i], (int)inl[i]) != 1
                               || (size_t)outi != inl[i]))
                pz_differ(z, "the default provider refused pipe %zu's update", i);
        }
        rc = z->api->update(z->gp, aad ? NULL : outp, outl, outsize, inp, inl);
        if (rc != 1)
            pz_differ(z, "gpuprov refused an update the default took");
        for (size_t i = 0; i < z->n; i++) {
            if (outl[i] != inl[i])
                pz_differ(z, "pipe %zu: outl %zu, not %zu", i, outl[i], inl[i]);
            if (!aad && memcmp(outp[i], want[i], inl[i]) != 0)
                pz_differ(z, "pipe %zu: output differs", i);
            if (!aad && inl[i] > 0)
                z->data_seen[i] = 1;
            /* an encryption keeps what its decryption replays */
            if (z->enc && z->ai->aead) {
                uint8_t **rec = aad ? z->raad : z->rct;
                size_t *have = aad ? z->raad_len : z->rct_len;
                const uint8_t *src = aad ? inp[i] : outp[i];

                if (have[i] + inl[i] <= PZ_MAX_MSG) {
                    uint8_t *g = realloc(rec[i], have[i] + inl[i] + 1);

                    if (g == NULL)
                        abort();
                    rec[i] = g;
                    memcpy(g + have[i], aad ? src : want[i], inl[i]);
                    have[i] += inl[i];
                }
            }
            free(want[i]);
        }
    }
out:
    for (size_t i = 0; i < z->n; i++) {
        if (!in_place)
            free(outp[i]);
        free(bufs[i]);
    }
}

static void step_final(pz *z, prd *r)
{
    unsigned char *outp[PIPE_MAX], none[1], tags[PIPE_MAX][16], *tagp[PIPE_MAX], **tp = tagp;
    size_t outl[PIPE_MAX], outsize[PIPE_MAX];
    OSSL_PARAM prm[2] = { OSSL_PARAM_END, OSSL_PARAM_END };
    const uint8_t b = rd8(r), seed = rd8(r), flip = rd8(r) % PIPE_MAX;
    const size_t taglen = (size_t)(b >> 2) % 16 + 1;
    int want_ok[PIPE_MAX], all = 1, rc;

    for (size_t i = 0; i < z->n; i++) {
        outp[i] = none;
        outsize[i] = 0;
        tagp[i] = tags[i];
    }
    pz_trace(z, "final taglen %zu%s\n", taglen, z->ai->aead && !z->enc ? (b & 1) ? " replayed tags" : " seeded tags" : "");
    if (!z->inited)
        return;
    if (z->finished) {
        expect_refusal(z, z->api->final(z->gp, outp, outl, outsize), GP_R_MESSAGE_FINISHED, "a Final");
        return;
    }
    if (z->ai->aead && !z->enc) {
        for (size_t i = 0; i < z->n; i++) {
            if ((b & 1) && z->replaying)
                memcpy(tags[i], z->rtag[i], 16);
            else
                fill(tags[i], 16, seed, i);
        }
        if (flip < z->n)
            tags[flip][taglen - 1] ^= 1;
        prm[0] = pipe_tag_param(&tp, taglen);
        if (EVP_CIPHER_CTX_set_params(z->gp, prm) != 1)
            pz_differ(z, "gpuprov refused the pipeline tags");
        for (size_t i = 0; i < z->n; i++) {
            OSSL_PARAM q[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

            q[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tags[i], taglen);
            if (EVP_CIPHER_CTX_set_params(z->ref[i], q) != 1)
                pz_differ(z, "the default refused pipe %zu's tag", i);
        }
    }
    for (size_t i = 0; i < z->n; i++) {
        int outi = 0;

        want_ok[i] = EVP_CipherFinal_ex(z->ref[i], none, &outi) == 1;
        all &= want_ok[i];
    }
    ERR_clear_error();
    rc = z->api->final(z->gp, outp, outl, outsize);
    z->finished = 1;
    if (rc != all)
        pz_differ(z, "Final: gpuprov %d, the default's pipes %s", rc, all ? "all succeeded" : "not all");
    if (!rc) {
        /* Each failed pipe is named ("pipe i") with the tag reason. */
        unsigned long e;
        const char *data;
        int flags, named[PIPE_MAX] = { 0 };

        while ((e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) != 0)
            if (ERR_GET_REASON(e) == GP_R_TAG_MISMATCH && data != NULL)
                pipes_named(data, named);
        for (size_t i = 0; i < z->n; i++)
            if (named[i] == want_ok[i])
                pz_differ(z, "Final: pipe %zu %s named as failed", i, named[i] ? "wrongly" : "not");
    }
    if (z->ai->aead && z->enc) {
        prm[0] = pipe_tag_param(&tp, taglen);
        if (EVP_CIPHER_CTX_get_params(z->gp, prm) != 1)
            pz_differ(z, "gpuprov gave no tags after Final");
        for (size_t i = 0; i < z->n; i++) {
            unsigned char t[16];
            OSSL_PARAM q[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

            q[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, t, 16);
            if (EVP_CIPHER_CTX_get_params(z->ref[i], q) != 1)
                pz_differ(z, "the default gave no tag for pipe %zu", i);
            if (memcmp(t, tags[i], taglen) != 0)
                pz_differ(z, "pipe %zu: tag differs", i);
            memcpy(z->rtag[i], t, 16);
        }
        z->replay_ok = 1;
    }
    ERR_clear_error();
}

static void step_plain(pz *z)
{
    unsigned char b[16] = { 0 };
    int outi;

    pz_trace(z, "single-message update\n");
    if (!z->inited)
        return;
    expect_refusal(z, EVP_CipherUpdate(z->gp, b, &outi, b, sizeof(b)), GP_R_PIPE_CONTEXT, "a single-message update");
}

static void step_copy(pz *z)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

    pz_trace(z, "copy\n");
    if (c == NULL || !z->inited)
        goto out;
    if (EVP_CIPHER_CTX_copy(c, z->gp) != 1)
        pz_differ(z, "EVP_CIPHER_CTX_copy of a pipeline failed");
    EVP_CIPHER_CTX_free(z->gp);
    z->gp = c;
    c = NULL;
out:
    EVP_CIPHER_CTX_free(c);
}

void fuzz_pipeline_one(const uint8_t *data, size_t size, const fz_pipe_alg algs[8], EVP_CIPHER *const ciphers[8][2],
                       int verbose)
{
    prd r = { data, size, 0 };
    pz *z = calloc(1, sizeof(*z));
    int alg;

    if (z == NULL || !fuzz_pipeline_available())
        abort();
    alg = rd8(&r) % 8;
    z->ai = &algs[alg];
    z->refc = ciphers[alg][0];
    z->gpc = ciphers[alg][1];
    z->api = &api_loaded;
    z->n = rd8(&r) % PIPE_MAX + 1;
    z->verbose = verbose;
    fill(z->key, sizeof(z->key), rd8(&r), 99);
    if ((z->gp = EVP_CIPHER_CTX_new()) == NULL)
        abort();
    for (size_t i = 0; i < PIPE_MAX; i++)
        if ((z->ref[i] = EVP_CIPHER_CTX_new()) == NULL)
            abort();
    pz_trace(z, "%s, %zu pipes\n", z->ai->name, z->n);
    step_init(z, &r);
    for (int s = 0; s < PZ_MAX_STEPS && r.pos < r.n; s++) {
        switch (rd8(&r) % 6) {
        case 0: step_init(z, &r); break;
        case 1: step_update(z, &r, 1); break;
        case 2: step_update(z, &r, 0); break;
        case 3: step_final(z, &r); break;
        case 4: step_plain(z); break;
        default: step_copy(z); break;
        }
    }
    if (verbose)
        fprintf(stderr, "---- pipeline:\n%s", z->trace);
    EVP_CIPHER_CTX_free(z->gp);
    free_refs(z);
    for (size_t i = 0; i < PIPE_MAX; i++) {
        free(z->raad[i]);
        free(z->rct[i]);
    }
    free(z);
    ERR_clear_error();
}
