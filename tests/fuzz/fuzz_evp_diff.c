/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: input bytes decode into EVP cipher calls run on gpuprov and on the default provider side by side; any difference aborts. */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/provider.h>

#include "fuzz_pipeline.h"
#include "provider/errors.h"   /* enum gp_reason: the reason a deliberate refusal must carry */

/*
 * Input format (tests/fuzz/README.md; tests/fuzz/make_corpus.py writes it):
 *   input := alg ops...       alg: byte % 8 indexes `algs`
 *   op    := opcode args      opcode: byte % OP_COUNT
 * Every read past the end yields 0, so every input decodes. Byte strings (keys, IVs, data, tags)
 * are `value`s: a source byte, then (literal) the bytes themselves, (prng) a seed byte, (replay)
 * nothing: the key/IV/tag last used, or the previous message's output at a cursor, (fill) a byte.
 * Side 0 is the reference (default provider), side 1 is gpuprov; each op runs on both and every
 * return value, outl, output byte and tag is compared.
 */

enum kind { K_CTR, K_GCM, K_CCP /* ChaCha20-Poly1305 */, K_CHACHA };

typedef struct {
    const char *name;
    enum kind kind;
    size_t keylen, ivlen;
} alg_info;

static const alg_info algs[8] = {
    { "AES-128-CTR", K_CTR, 16, 16 },
    { "AES-192-CTR", K_CTR, 24, 16 },
    { "AES-256-CTR", K_CTR, 32, 16 },
    { "AES-128-GCM", K_GCM, 16, 12 },
    { "AES-192-GCM", K_GCM, 24, 12 },
    { "AES-256-GCM", K_GCM, 32, 12 },
    { "ChaCha20-Poly1305", K_CCP, 32, 12 },
    { "ChaCha20", K_CHACHA, 32, 16 },
};

enum op {
    OP_CIPHER_INIT,   /* EVP_CipherInit_ex2 with the fetched cipher: a fresh algorithm context */
    OP_REINIT,        /* EVP_CipherInit_ex2 without a cipher: key-only, IV-only, both or neither */
    OP_SET_IVLEN,     /* AEAD_IVLEN by ctrl or param */
    OP_AAD,           /* AAD in chunks (AEADs only) */
    OP_DATA,          /* data in chunks, in place or not, by EVP_CipherUpdate or EVP_Cipher */
    OP_FINAL,
    OP_GET_TAG,       /* any length 0..17 */
    OP_SET_TAG,       /* any length 0..17, the last tag read or other bytes, or length only */
    OP_COPY,          /* EVP_CIPHER_CTX_copy, maybe a diverging update on the original, then the copy goes on */
    OP_TLS_FIXED,     /* TLS1_IV_FIXED (GCM: 4 bytes, the whole IV by ctrl -1, or other lengths) */
    OP_TLS_RECORD,    /* TLS1_AAD, then one in-place update over the record */
    OP_GET_STATE,     /* IVLEN, TAGLEN, IV / UPDATED_IV / NUM where they exist */
    OP_DATA1,         /* one data update (the most common call, so a short opcode) */
    OP_PARAMS,        /* PADDING, TLS_VERSION, TLS_MAC_SIZE, KEYLEN: accepted or refused alike */
    OP_NEW_CTX,       /* a new EVP_CIPHER_CTX without a cipher */
    OP_COUNT
};

#define MAX_OPS 48
#define MAX_CHUNK 65536      /* the host executor runs tens of MB/s: keep an input well under 1 s */
#define MAX_TLS_PAYLOAD 16384 /* RFC 5246 §6.2.1 */
#define TAG_MAX 16
#define TLS_AAD_LEN 13        /* seq(8) || type || version(2) || length(2) */
#define GCM_EXPLICIT_IV 8     /* RFC 5288 §3 */

/* ---- input reader ---------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n, pos;
} reader;

static uint8_t rd(reader *r)
{
    return r->pos < r->n ? r->p[r->pos++] : 0;
}

static int rd_left(const reader *r)
{
    return r->pos < r->n;
}

/* A length: mostly 0..239, else up to 4 KiB, rarely up to 64 KiB. */
static size_t rd_len(reader *r)
{
    uint8_t b = rd(r);

    if (b < 0xf0)
        return b;
    if (b < 0xfe)
        return (size_t)(rd(r) | rd(r) << 8) % 4097;
    return (size_t)(rd(r) | rd(r) << 8) % (MAX_CHUNK + 1);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ---- state ------------------------------------------------------------------------------------- */

/* Where the current AEAD message stands, as the caller's calls define it. */
enum msg_state { MSG_NONE, MSG_BUFFERED, MSG_STARTED, MSG_FINISHED };

typedef struct {
    int alg;
    const alg_info *ai;
    EVP_CIPHER_CTX *c[2];
    /* the model of the calls made, to recognise gpuprov's deliberate refusals */
    int has_cipher, enc, key_set, stream_iv, data_seen, tag_set, tag_ready, tls_pending;
    int nondet;              /* GCM drew a random IV on each side: outputs differ by design */
    int tag_nondet;          /* the last tag computed came from such a message */
    int tag_finding;         /* the open finding the last tag was computed under, or -1 */
    int tls_refused;         /* the pending TLS record's TLS1_AAD was refused (GCM: any refused
                              * TLS1_AAD; ChaCha20-Poly1305: one after a record was announced):
                              * gpuprov refuses that record, the default runs it on the AAD as given */
    size_t tls_reclen;       /* ChaCha20-Poly1305: the length of the announced record (payload and
                              * tag); an update of another length fails and the record stays */
    int ref_aad_padded;      /* a 0-byte EVP_Cipher closed the default's partial AAD block: the
                              * finding (R5 GCM, R9 ChaCha20-Poly1305) + 1 */
    int ref_tls_aad_clobbered; /* GCM: a refused SET_TAG overwrote the default's pending TLS1_AAD (R6) */
    int ref_expected_clobbered; /* AEAD: since the decrypt's SET_TAG, the default wrote over the
                                 * expected tag: an encrypt Final's tag (R7), a TLS1_AAD (R8);
                                 * finding + 1 */
    size_t iv_diff_from, iv_diff_to; /* GCM: IV bytes [from, to) differ between the sides (each drew
                                      * its own random IV) until something writes over them */
    uint64_t aad_bytes;      /* AAD since the IV was set */
    /* The message dropped on gpuprov (GP_IV_DROPPED): its updates and Final are refused until a
     * new IV, where the default goes on */
    int stale_iv;            /* GCM: AEAD_IVLEN changed after the IV was set */
    int ref_tag_clobbered;   /* GCM: the default's tag buffer was overwritten (R2, R3): finding + 1 */
    int rekeyed_midmsg;      /* AEAD: a key-only re-init while a message was going */
    int chacha_rekeyed;      /* ChaCha20: a key-only re-init after data */
    int dir_flipped;         /* AEAD: a re-init changed the direction mid-message */
    int touched;             /* AAD, data or Final called since the IV was set (the default's GCM has
                              * then set up its IV, even when the call failed) */
    int tls_version_set, tls_mac_set;   /* CTR: TLS_VERSION, TLS_MAC_SIZE above 0 taken */
    uint64_t text;           /* data bytes since the IV was set */
    int partial_seen;        /* ChaCha20: the message stopped inside a block at some update */
    enum msg_state msg;
    size_t ivlen;
    /* values for replay */
    uint8_t key[32], iv[128], tag[TAG_MAX];
    size_t taglen;
    uint8_t *prev_out, *cur_out;   /* reference side's output of the previous / current message */
    size_t prev_len, cur_len, replay_pos;
    /* what ran, printed with a difference */
    char *trace;
    size_t trace_len, trace_cap;
    int resyncs;
} fz;

static OSSL_LIB_CTX *libctx;
static EVP_CIPHER *ciphers[8][2];
static fz_pipe_alg pipe_algs[8];   /* the cipher table as the pipeline sequences see it (fuzz_pipeline.h) */
static int verbose;
/* What the default provider under test does where supported OpenSSL releases differ (probed once,
 * probe_reference): ChaCha20-Poly1305's EVP_Cipher(ctx, out, NULL, 0) is a Final that checks the
 * tag (3.0.22; earlier releases returned at once), and a 0-byte EVP_Cipher(ctx, out, in, 0)
 * between AAD pieces pads the partial AAD block (3.0.22: openssl/openssl#32752). */
static int ref_ccp_cipher_final, ref_ccp_empty_cipher_pads_aad;
/* OpenSSL 3.5's EVP keeps a KEYLEN or IVLEN param the provider took (or ignored) and hands it to
 * the next init, which then fails on the default where the length is not the cipher's; 3.0's
 * does not. After a failed init the default's context is as its init left it (a CTR context's
 * block position reset before the IV length was refused), not as before. */
static int ref_evp_keeps_lengths;

static const char *const side_name[2] = { "default", "gpuprov" };

static void trace(fz *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void trace(fz *f, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(f->trace + f->trace_len, f->trace_cap - f->trace_len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (f->trace_len + (size_t)n < f->trace_cap)
            break;
        f->trace_cap = (f->trace_cap + (size_t)n) * 2;
        f->trace = realloc(f->trace, f->trace_cap);
        if (f->trace == NULL)
            abort();
    }
    f->trace_len += (size_t)n;
}

static void trace_hex(fz *f, const uint8_t *p, size_t n)
{
    size_t show = n < 24 ? n : 24;

    for (size_t i = 0; i < show; i++)
        trace(f, "%02x", p[i]);
    if (show < n)
        trace(f, "..(%zu)", n);
}

static void differ(fz *f, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static int state_finding(const fz *f);
static void resync(fz *f, const char *why);

/* A difference: print the decoded sequence and what differed, then abort (libFuzzer keeps the input). */
static void differ(fz *f, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "\n==== fuzz_evp_diff: gpuprov differs from the default provider ====\n");
    fprintf(stderr, "cipher %s, executor %s; the sequence (each line: call, then default | gpuprov):\n",
            f->ai->name, getenv("GPUPROV_BACKEND") ? getenv("GPUPROV_BACKEND") : "(auto)");
    fwrite(f->trace, 1, f->trace_len, stderr);
    fprintf(stderr, "DIFFERENCE: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    ERR_print_errors_fp(stderr);
    abort();
}

/* The reason of gpuprov's last queued error (0 if none), then the queue cleared. */
static int gp_reason(void)
{
    unsigned long e = ERR_peek_last_error();

    ERR_clear_error();
    return e == 0 ? 0 : ERR_GET_REASON(e);
}

/* EVP_Cipher does not check that the context has a cipher (OpenSSL 3.0 dereferences it): only then. */
static int has_cipher(const fz *f)
{
    return EVP_CIPHER_CTX_get0_cipher(f->c[0]) != NULL && EVP_CIPHER_CTX_get0_cipher(f->c[1]) != NULL;
}

static int is_aead(const fz *f)
{
    return f->ai->kind == K_GCM || f->ai->kind == K_CCP;
}

/* A byte string into dst (n bytes). `replay` is what source 2 copies (NULL: the previous output). */
static void rd_value(fz *f, reader *r, uint8_t *dst, size_t n, const uint8_t *replay, size_t replay_n)
{
    uint8_t src = rd(r);
    uint64_t s;

    switch (src & 3) {
    case 0:
        for (size_t i = 0; i < n; i++)
            dst[i] = rd(r);
        break;
    case 1:
        s = (uint64_t)rd(r) << 8 | (src >> 2);
        for (size_t i = 0; i < n; i += 8) {
            uint64_t v = splitmix(&s);

            memcpy(dst + i, &v, n - i < 8 ? n - i : 8);
        }
        break;
    case 2:
        if (replay != NULL) {
            memset(dst, 0, n);
            memcpy(dst, replay, n < replay_n ? n : replay_n);
        } else {
            /* the previous message's output from the cursor: a decrypt of what was encrypted */
            for (size_t i = 0; i < n; i++)
                dst[i] = f->replay_pos < f->prev_len ? f->prev_out[f->replay_pos++] : 0;
        }
        break;
    default:
        memset(dst, rd(r), n);
        break;
    }
}

static void record_output(fz *f, const uint8_t *p, size_t n)
{
    if (n == 0)
        return;
    f->cur_out = realloc(f->cur_out, f->cur_len + n);
    if (f->cur_out == NULL)
        abort();
    memcpy(f->cur_out + f->cur_len, p, n);
    f->cur_len += n;
}

/* Each side's IV now differs in its first n bytes (random draws). */
static void iv_drawn(fz *f, size_t n)
{
    f->iv_diff_from = 0;
    f->iv_diff_to = n;
}

/* The first n bytes of the IV were written alike on both sides. */
static void iv_written(fz *f, size_t n)
{
    if (f->iv_diff_from < n)
        f->iv_diff_from = n;
    if (f->iv_diff_from >= f->iv_diff_to)
        f->iv_diff_from = f->iv_diff_to = 0;
}

/* A new message starts (an IV was set): its predecessor's output becomes the replay source. */
static void new_message(fz *f)
{
    if (f->cur_len > 0) {
        free(f->prev_out);
        f->prev_out = f->cur_out;
        f->prev_len = f->cur_len;
        f->cur_out = NULL;
        f->cur_len = 0;
    }
    f->replay_pos = 0;
    f->msg = MSG_BUFFERED;
    f->data_seen = 0;
    f->tag_ready = 0;
    f->tls_pending = 0;
    f->nondet = 0;
    f->stale_iv = f->rekeyed_midmsg = f->chacha_rekeyed = f->dir_flipped = 0;
    f->tls_refused = 0;
    f->ref_aad_padded = 0;
    f->aad_bytes = 0;
    f->touched = 0;
    f->text = 0;
    f->partial_seen = 0;
    f->stream_iv = 1;
}

/* ---- comparing ---------------------------------------------------------------------------------- */

/* Return values of both sides: equal, or gpuprov refusing a call on purpose (then 1: resync). */
typedef struct {
    int rc[2];
    int reason;   /* gpuprov's, when it failed */
    size_t len;   /* the update's length, where the call has one */
    int no_data;  /* SET_TAG: a length without bytes (data NULL) */
} duo_rc;

static int ok_rc(int rc)
{
    return rc > 0;
}

static void resync(fz *f, const char *why);

/*
 * gpuprov refused where the default provider went on. Known deliberate cases (docs/limitations.md,
 * "Stricter than the default provider"; tests/evp/test_badinput.c STRICT_RC) are recognised from the calls made, and the
 * refusal must carry the matching reason; then both sides restart (the message ends) and 1 is
 * returned. Anything else is a difference.
 */
static int msg_dropped(const fz *f)
{
    return f->stale_iv || f->rekeyed_midmsg || f->chacha_rekeyed || f->dir_flipped;
}

static const char *stricter_case(const fz *f, enum op op, const duo_rc *d)
{
    int reason = d->reason;
    int data_op = op == OP_DATA || op == OP_DATA1;
    int msg_op = op == OP_AAD || data_op || op == OP_FINAL || op == OP_TLS_RECORD;

    /* aead_common.c, stream_common.c: GP_IV_DROPPED */
    if (msg_op && msg_dropped(f) && reason == GP_R_NEW_IV_NEEDED)
        return "an update or Final after the key, IV length or direction changed mid-message";
    /* OpenSSL 3.0.19's default refuses these too; earlier 3.0 releases may not check the key */
    if (data_op && d->len == 0 && !f->key_set && reason == GP_R_NO_KEY_SET)
        return "a 0-byte update without a key";
    if (is_aead(f) && msg_op && f->tls_pending && f->tls_refused && reason == GP_R_INVALID_TLS_AAD)
        return "a TLS record after its TLS1_AAD was refused";
    if (is_aead(f)) {
        if (op == OP_AAD && f->msg == MSG_STARTED && f->data_seen && reason == GP_R_AAD_AFTER_DATA)
            return "AAD after data";
        if (msg_op && f->msg == MSG_FINISHED && reason == GP_R_MESSAGE_FINISHED)
            return "an update or Final after an AEAD Final (IV reuse)";
        if (op == OP_GET_TAG && f->enc && !f->tag_ready && reason == GP_R_TAG_NOT_AVAILABLE)
            return "GET_TAG before Final";
        if (f->ai->kind == K_CCP && !f->key_set && reason == GP_R_NO_KEY_SET
            && (op == OP_AAD || data_op || op == OP_FINAL || op == OP_TLS_RECORD))
            return "ChaCha20-Poly1305 without a key (test_badinput test_no_key)";
        /* docs/limitations.md names CTR/ChaCha20; ChaCha20-Poly1305 refuses for the same reason (the default
         * runs from an all-zero nonce), aead_common.c ensure_started */
        if (f->ai->kind == K_CCP && f->msg == MSG_NONE && reason == GP_R_NO_IV_SET
            && (op == OP_AAD || data_op || op == OP_FINAL || op == OP_TLS_RECORD))
            return "ChaCha20-Poly1305 update or Final with no IV set";
        if (op == OP_FINAL && !f->enc && !f->tag_set && reason == GP_R_TAG_NOT_SET)
            return "decrypt Final without SET_TAG for this message (test_badinput test_final_tag_checks)";
        /* OpenSSL 3.0's setivfixed checks ivlen - (int)len < 8 in size_t: a fixed field longer
         * than the IV wraps around and passes (decrypt; encrypt then fails drawing the rest). */
        if (op == OP_TLS_FIXED && f->ai->kind == K_GCM && d->len != (size_t)-1 && d->len >= 4
            && d->len > f->ivlen && reason == GP_R_INVALID_IV_LENGTH)
            return "TLS1_IV_FIXED longer than the IV (the default's length check wraps)";
        if (op == OP_TLS_FIXED && f->ai->kind == K_CCP && f->tls_pending && reason == GP_R_TLS_MODE)
            return "ChaCha20-Poly1305 TLS1_IV_FIXED with a TLS record pending";
        if (op == OP_TLS_FIXED && f->ai->kind == K_CCP && (f->msg == MSG_STARTED || msg_dropped(f))
            && reason == GP_R_MESSAGE_IN_PROGRESS)
            return "ChaCha20-Poly1305 TLS1_IV_FIXED mid-message";
        if (op == OP_AAD && f->ai->kind == K_CCP && f->tls_pending && reason == GP_R_INVALID_TLS_RECORD)
            return "ChaCha20-Poly1305 AAD update with a TLS record pending";
    } else if (data_op && !f->stream_iv && reason == GP_R_NO_IV_SET) {
        return "CTR/ChaCha20 update with no IV set";
    }
    return NULL;
}

/*
 * Differences this target found that are faults of OpenSSL 3.0's default provider (tests/fuzz/README.md,
 * "Open findings"; gpuprov does not copy them): each is reported, its input kept under
 * tests/fuzz/regress/, and recognised here, narrowly, so that a campaign can go on past it;
 * GPUPROV_FUZZ_STRICT=1 aborts on them as on any other difference. A difference of gpuprov's own is
 * fixed (or made a deliberate refusal, stricter_case), not named here.
 */
enum { R_GCM_SET_TAG_CLOBBERS, R_GCM_TLS_CIPHER_OUTL, R_GCM_EMPTY_CIPHER_PADS_AAD, R_GCM_TLS_AAD_CLOBBERS,
       R_GCM_SET_TAG_CLOBBERS_TLS_AAD, R_AEAD_FINAL_CLOBBERS_EXPECTED_TAG,
       R_GCM_TLS_AAD_CLOBBERS_EXPECTED_TAG, R_CCP_EMPTY_CIPHER_PADS_AAD, F_COUNT };
static const char *const finding_name[F_COUNT] = {
    [R_GCM_SET_TAG_CLOBBERS] = "R2 (default provider): GCM and ChaCha20-Poly1305: a SET_TAG's bytes (refused when encrypting with GCM, taken when decrypting) overwrite the default's computed tag: a later GET_TAG returns them",
    [R_GCM_TLS_AAD_CLOBBERS] = "R3 (default provider): GCM: TLS1_AAD overwrites the buffer the default keeps its computed tag in",
    [R_GCM_TLS_CIPHER_OUTL] = "R4 (default provider): GCM TLS record decrypted through EVP_Cipher: the default returns the record's length, not the payload's",
    [R_GCM_EMPTY_CIPHER_PADS_AAD] = "R5 (default provider): GCM: a 0-byte EVP_Cipher between AAD pieces zero-pads the partial AAD block (CRYPTO_gcm128_encrypt with len 0 runs GCM_MUL): a wrong tag",
    [R_GCM_SET_TAG_CLOBBERS_TLS_AAD] = "R6 (default provider): GCM: a SET_TAG (refused when encrypting, taken when decrypting) overwrites the pending TLS1_AAD (the same buffer): the record's tag covers other AAD bytes",
    [R_AEAD_FINAL_CLOBBERS_EXPECTED_TAG] = "R7 (default provider): GCM and ChaCha20-Poly1305: an encrypt Final writes its tag over the expected tag a SET_TAG left for a later decryption (one buffer): that decrypt Final verifies against the computed tag",
    [R_GCM_TLS_AAD_CLOBBERS_EXPECTED_TAG] = "R8 (default provider): GCM: TLS1_AAD writes over the expected tag a decrypt's SET_TAG left (one buffer, as in R3): a later decrypt Final verifies against the AAD's bytes",
    [R_CCP_EMPTY_CIPHER_PADS_AAD] = "R9 (default provider, OpenSSL 3.0.22; openssl/openssl#32752): ChaCha20-Poly1305: a 0-byte EVP_Cipher between AAD pieces zero-pads the partial AAD block: a wrong tag",
};
static unsigned long finding_hits[F_COUNT];
static int strict_findings;

/* While the calls made hold the contexts in one of these states, any difference is that finding. */
static int state_finding(const fz *f)
{
    if (f->ref_aad_padded)
        return f->ref_aad_padded - 1;
    if (f->ref_tls_aad_clobbered)
        return R_GCM_SET_TAG_CLOBBERS_TLS_AAD;
    return -1;
}

static int open_finding(const fz *f, enum op op, const duo_rc *d)
{
    (void)d;
    if (state_finding(f) >= 0)
        return state_finding(f);
    if (is_aead(f) && op == OP_FINAL && !f->enc && f->ref_expected_clobbered)
        return f->ref_expected_clobbered - 1;
    return -1;
}

static void print_findings(void)
{
    for (int i = 0; i < F_COUNT; i++)
        if (finding_hits[i] > 0)
            fprintf(stderr, "fuzz_evp_diff: open finding hit %lu times: %s\n", finding_hits[i], finding_name[i]);
}

/* 1: both agree (carry on comparing); 0: gpuprov refused on purpose, or an open finding, and both
 * sides were restarted. */
static int check_rc(fz *f, enum op op, const duo_rc *d, const char *what)
{
    const char *why;
    int fi;

    if (ok_rc(d->rc[0]) == ok_rc(d->rc[1])) {
        if (d->rc[0] != d->rc[1])
            differ(f, "%s: return value %d (default) vs %d (gpuprov)", what, d->rc[0], d->rc[1]);
        return 1;
    }
    if (ok_rc(d->rc[0]) && (why = stricter_case(f, op, d)) != NULL) {
        trace(f, "   stricter on purpose: %s (gpuprov reason %d); both sides restart\n", why, d->reason);
        resync(f, why);
        return 0;
    }
    if ((fi = open_finding(f, op, d)) >= 0 && !strict_findings) {
        trace(f, "   open finding %s; both sides restart\n", finding_name[fi]);
        finding_hits[fi]++;
        resync(f, finding_name[fi]);
        return 0;
    }
    differ(f, "%s: default %s (rc %d), gpuprov %s (rc %d, reason %d)", what,
           ok_rc(d->rc[0]) ? "succeeds" : "fails", d->rc[0], ok_rc(d->rc[1]) ? "succeeds" : "fails",
           d->rc[1], d->reason);
}

/* 1: the output lengths agree; 0: they differ in an open finding's state and both sides restarted. */
static int check_outl(fz *f, const char *what, int a, int b)
{
    int fi;

    if (a == b)
        return 1;
    if ((fi = state_finding(f)) >= 0 && !strict_findings) {
        trace(f, "   %s: outl differs: open finding %s; both sides restart\n", what, finding_name[fi]);
        finding_hits[fi]++;
        resync(f, finding_name[fi]);
        return 0;
    }
    differ(f, "%s: outl %d (default) vs %d (gpuprov)", what, a, b);
}

/* 1: the bytes agree; 0: they differ in an open finding's state and both sides restarted. */
static int compare_bytes(fz *f, const char *what, const uint8_t *a, const uint8_t *b, size_t n)
{
    int fi;

    if (n == 0 || memcmp(a, b, n) == 0)
        return 1;
    if ((fi = state_finding(f)) >= 0 && !strict_findings) {
        trace(f, "   %s differs: open finding %s; both sides restart\n", what, finding_name[fi]);
        finding_hits[fi]++;
        resync(f, finding_name[fi]);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            trace(f, "   default: ");
            trace_hex(f, a + i, n - i);
            trace(f, "\n   gpuprov: ");
            trace_hex(f, b + i, n - i);
            trace(f, "\n");
            differ(f, "%s: %zu bytes differ from byte %zu on", what, n, i);
        }
    return 1;
}

/* ---- contexts ------------------------------------------------------------------------------------ */

static void model_fresh(fz *f, int enc, int key)
{
    f->has_cipher = 1;
    f->enc = enc;
    f->key_set = key;
    f->ivlen = f->ai->ivlen;
    f->msg = MSG_NONE;
    f->stream_iv = 0;
    f->data_seen = f->tag_set = f->tag_ready = f->tls_pending = f->nondet = f->stale_iv = f->tag_nondet = 0;
    f->tls_refused = f->ref_tag_clobbered = f->rekeyed_midmsg = f->chacha_rekeyed = 0;
    f->dir_flipped = f->tls_version_set = f->tls_mac_set = f->touched = 0;
    f->tls_reclen = 0;
    f->ref_aad_padded = f->ref_tls_aad_clobbered = 0;
    f->iv_diff_from = f->iv_diff_to = 0;
    f->ref_expected_clobbered = 0;
    f->aad_bytes = 0;
    f->text = 0;
    f->partial_seen = 0;
    f->tag_finding = -1;
}

/* Both sides restart from a fresh context with the model's key (if any) and no IV: the message a
 * deliberate refusal broke off is over on both. */
static void resync(fz *f, const char *why)
{
    (void)why;
    for (int s = 0; s < 2; s++) {
        EVP_CIPHER_CTX_free(f->c[s]);
        f->c[s] = EVP_CIPHER_CTX_new();
        if (f->c[s] == NULL
            || EVP_CipherInit_ex2(f->c[s], ciphers[f->alg][s], f->key_set ? f->key : NULL, NULL, f->enc,
                                  NULL) != 1)
            differ(f, "resync: a fresh %s context does not initialise on %s", f->ai->name, side_name[s]);
    }
    ERR_clear_error();
    f->resyncs++;
    model_fresh(f, f->enc, f->key_set);
}

/* ---- operations -------------------------------------------------------------------------------- */

static int rd_enc(reader *r)
{
    uint8_t b = rd(r) % 4;

    return b == 3 ? -1 : (b & 1);   /* -1: EVP keeps the direction */
}

static void op_cipher_init(fz *f, reader *r)
{
    uint8_t fl = rd(r);
    int enc = fl & 1, with_key = (fl >> 1) & 1, with_iv = (fl >> 2) & 1;
    uint8_t key[32] = { 0 }, iv[128] = { 0 };
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    if (with_key)
        rd_value(f, r, key, f->ai->keylen, f->key, sizeof(f->key));
    if (with_iv)
        rd_value(f, r, iv, f->ai->ivlen, f->iv, sizeof(f->iv));
    trace(f, "EVP_CipherInit_ex2(ctx, %s, key=", f->ai->name);
    if (with_key)
        trace_hex(f, key, f->ai->keylen);
    else
        trace(f, "NULL");
    trace(f, ", iv=");
    if (with_iv)
        trace_hex(f, iv, f->ai->ivlen);
    else
        trace(f, "NULL");
    trace(f, ", enc=%d)", enc);
    for (int s = 0; s < 2; s++) {
        d.rc[s] = EVP_CipherInit_ex2(f->c[s], ciphers[f->alg][s], with_key ? key : NULL,
                                     with_iv ? iv : NULL, enc, NULL);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    if (!check_rc(f, OP_CIPHER_INIT, &d, "cipher init") || !ok_rc(d.rc[0]))
        return;
    model_fresh(f, enc, with_key);
    if (with_key)
        memcpy(f->key, key, f->ai->keylen);
    if (with_iv) {
        memcpy(f->iv, iv, f->ai->ivlen);
        new_message(f);
    }
}

static void op_reinit(fz *f, reader *r)
{
    uint8_t fl = rd(r);
    int enc = rd_enc(r), with_key = fl & 1, with_iv = (fl >> 1) & 1;
    uint8_t key[32] = { 0 }, iv[128] = { 0 };
    int ivl[2], iv_tls, iv_tls_refused;
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    for (int s = 0; s < 2; s++)   /* OpenSSL 3.0 dereferences a missing cipher here */
        ivl[s] = has_cipher(f) ? EVP_CIPHER_CTX_get_iv_length(f->c[s]) : 0;
    ERR_clear_error();
    if (ivl[0] != ivl[1])
        differ(f, "EVP_CIPHER_CTX_get_iv_length: %d (default) vs %d (gpuprov)", ivl[0], ivl[1]);
    if (ivl[0] < 0 || ivl[0] > 128)
        ivl[0] = 0;
    if (with_key)
        rd_value(f, r, key, f->ai->keylen, f->key, sizeof(f->key));
    if (with_iv)
        rd_value(f, r, iv, (size_t)ivl[0], f->iv, sizeof(f->iv));
    trace(f, "EVP_CipherInit_ex2(ctx, NULL, key=");
    if (with_key)
        trace_hex(f, key, f->ai->keylen);
    else
        trace(f, "NULL");
    trace(f, ", iv=");
    if (with_iv)
        trace_hex(f, iv, (size_t)ivl[0]);
    else
        trace(f, "NULL");
    trace(f, ", enc=%d)", enc);
    for (int s = 0; s < 2; s++) {
        d.rc[s] = EVP_CipherInit_ex2(f->c[s], NULL, with_key ? key : NULL, with_iv ? iv : NULL, enc, NULL);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    if (!check_rc(f, OP_REINIT, &d, "re-init"))
        return;
    if (!ok_rc(d.rc[0])) {
        if (ref_evp_keeps_lengths) {   /* each side as its failed init left it */
            trace(f, "   both refused a re-init with a length this EVP kept; both sides restart\n");
            resync(f, "re-init refused on both");
        }
        return;
    }
    /* A GCM record pending outlives an IV init (the default's init leaves its AAD); a
     * ChaCha20-Poly1305 key or IV init ends record mode on both */
    iv_tls = f->ai->kind == K_GCM && with_iv && f->tls_pending;
    iv_tls_refused = iv_tls && f->tls_refused;
    /* ... but the default's nonce keeps the record's sequence number after a key init: gpuprov
     * drops the message (aead_common.c aead_init_body) */
    if (f->ai->kind == K_CCP && with_key && !with_iv && f->tls_pending
        && (f->msg == MSG_BUFFERED || f->msg == MSG_STARTED))
        f->rekeyed_midmsg = 1;
    if (f->ai->kind == K_CCP && (with_key || with_iv))
        f->tls_pending = f->tls_refused = 0;
    /* gpuprov drops the message (GP_IV_DROPPED) where the default goes on */
    if (is_aead(f) && !with_iv && enc != -1 && enc != f->enc && f->msg == MSG_STARTED)
        f->dir_flipped = 1;
    if (f->ai->kind == K_CHACHA && with_key && !with_iv && f->stream_iv && f->text > 0)
        f->chacha_rekeyed = 1;
    if (enc != -1)
        f->enc = enc;
    if (with_key) {
        memcpy(f->key, key, f->ai->keylen);
        f->key_set = 1;
    }
    if (with_iv) {
        memcpy(f->iv, iv, (size_t)ivl[0]);
        iv_written(f, (size_t)ivl[0]);
        new_message(f);
        f->tls_pending = iv_tls;
        f->tls_refused = iv_tls_refused;
    } else if (with_key && is_aead(f) && (f->msg == MSG_STARTED || (f->msg == MSG_BUFFERED && f->touched))) {
        f->rekeyed_midmsg = 1;
    }
}

static void op_set_ivlen(fz *f, reader *r)
{
    uint8_t how = rd(r), v = rd(r);
    size_t ivlen;
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    /* GCM: 1..128 mostly, 0 and 129 as edges; the others: around their only length, 12 */
    if (f->ai->kind == K_GCM)
        ivlen = v < 200 ? (size_t)(v % 130) : 12;
    else
        ivlen = v < 128 ? (size_t)(v % 20) : 12;
    trace(f, "set AEAD_IVLEN %zu by %s", ivlen, how & 1 ? "EVP_CTRL_AEAD_SET_IVLEN" : "param");
    for (int s = 0; s < 2; s++) {
        if (how & 1) {
            d.rc[s] = EVP_CIPHER_CTX_ctrl(f->c[s], EVP_CTRL_AEAD_SET_IVLEN, (int)ivlen, NULL);
        } else {
            OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_IVLEN, &ivlen),
                                OSSL_PARAM_construct_end() };

            d.rc[s] = EVP_CIPHER_CTX_set_params(f->c[s], p);
        }
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    if (!check_rc(f, OP_SET_IVLEN, &d, "set AEAD_IVLEN") || !ok_rc(d.rc[0]))
        return;
    if (f->ai->kind == K_GCM && ivlen != f->ivlen) {
        /* gpuprov drops the IV set (GP_IV_DROPPED): updates, Final and IV reads are refused */
        f->stale_iv = f->stale_iv || f->msg != MSG_NONE;
        f->ivlen = ivlen;
    }
}

/* Does this call start a GCM encryption without an IV (each side draws a random one)? */
static void note_random_iv(fz *f)
{
    if (f->ai->kind == K_GCM && f->enc && f->msg == MSG_NONE && f->key_set && f->ivlen >= 12) {
        f->nondet = 1;
        iv_drawn(f, f->ivlen);
    }
}

/*
 * A 0-byte ChaCha20-Poly1305 TLS record through EVP_Cipher is shorter than its tag: gpuprov refuses
 * it and leaves the record pending, as OpenSSL 3.0.13 and 3.0.22 do; 3.0.19 and 3.5.7 return at
 * once, which leaves the record pending too. Both sides stand where they stood, so this default's
 * success counts as that refusal.
 */
static void ccp_empty_record(fz *f, duo_rc *d, int outl[2], size_t len, int via_cipher)
{
    if (f->ai->kind != K_CCP || !f->tls_pending || len != 0 || !via_cipher)
        return;
    if (ok_rc(d->rc[0]) && outl[0] == 0 && !ok_rc(d->rc[1]) && d->reason == GP_R_INVALID_TLS_RECORD) {
        trace(f, "   a record shorter than its tag: a no-op on this default, refused by gpuprov (as by OpenSSL "
                 "3.0.22); the record stays pending on both\n");
        d->rc[0] = d->rc[1];
        outl[0] = outl[1];
    }
}

/* An update with a TLS1_AAD pending was that record, on both sides, whatever it held; but a
 * ChaCha20-Poly1305 update that is not the announced record's length fails and leaves it pending
 * (cipher_chacha20_poly1305_hw.c checks the length first; aead_common.c chachapoly_tls_record). */
static void tls_consumed(fz *f, int ok, size_t len)
{
    if (!f->tls_pending)
        return;
    if (!ok && f->ai->kind == K_CCP && len != f->tls_reclen)
        return;
    f->tls_pending = f->tls_refused = 0;
    f->ref_tls_aad_clobbered = 0;
    f->msg = MSG_FINISHED;
    f->tag_ready = 0;
}

static void after_started(fz *f)
{
    if (f->msg == MSG_NONE || f->msg == MSG_BUFFERED) {
        f->msg = MSG_STARTED;
        f->tag_ready = 0;
    }
}

static int op_aad_chunk(fz *f, reader *r)
{
    size_t len = rd(r) < 0xc0 ? rd(r) % 64 : rd_len(r);
    uint8_t *buf = malloc(len + 1);
    int outl[2] = { -7, -7 };
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    if (buf == NULL)
        abort();
    rd_value(f, r, buf, len, NULL, 0);
    trace(f, "EVP_CipherUpdate(ctx, NULL, &outl, aad, %zu)", len);
    d.len = len;
    f->touched |= f->key_set;
    for (int s = 0; s < 2; s++) {
        d.rc[s] = EVP_CipherUpdate(f->c[s], NULL, &outl[s], buf, (int)len);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    free(buf);
    trace(f, " -> %d outl %d | %d outl %d\n", d.rc[0], outl[0], d.rc[1], outl[1]);
    if (!check_rc(f, OP_AAD, &d, "AAD update"))
        return 0;
    if (len > 0 && f->ai->kind == K_GCM)
        tls_consumed(f, ok_rc(d.rc[0]), len);
    if (!ok_rc(d.rc[0]))
        return 1;
    if (!check_outl(f, "AAD update", outl[0], outl[1]))
        return 0;
    if (len > 0) {
        note_random_iv(f);
        after_started(f);
        f->aad_bytes += len;
    }
    return 1;
}

static void op_aad(fz *f, reader *r)
{
    int chunks = 1 + rd(r) % 4;

    if (!is_aead(f)) {
        /* an AAD call (out = NULL) on the default provider's CTR/ChaCha20 writes through NULL */
        trace(f, "(AAD skipped: not an AEAD)\n");
        return;
    }
    for (int i = 0; i < chunks; i++)
        if (!op_aad_chunk(f, r))
            return;
}

/*
 * A GCM record (an in-place update with a TLS1_AAD pending) on an IV shorter than its 8-byte
 * explicit nonce: OpenSSL 3.0.19's default reads or writes before its IV here (memory it owns, so
 * ASan is silent). gpuprov alone, which must refuse; then both sides restart.
 */
static void short_iv_record(fz *f, const uint8_t *src, size_t reclen, int via_cipher)
{
    uint8_t *buf = malloc(reclen + 1);
    int rc, outl = 0;

    if (buf == NULL)
        abort();
    memcpy(buf, src, reclen);
    if (via_cipher) {
        rc = EVP_Cipher(f->c[1], buf, buf, (unsigned int)reclen);
        rc = rc < 0 ? 0 : rc + 1;
    } else {
        rc = EVP_CipherUpdate(f->c[1], buf, &outl, buf, (int)reclen);
    }
    const int reason = gp_reason();
    trace(f, "%s(ctx, rec, rec, %zu) one TLS record with a %zu-byte IV -> (default not called) | %d\n",
          via_cipher ? "EVP_Cipher" : "EVP_CipherUpdate", reclen, f->ivlen, rc);
    free(buf);
    if (ok_rc(rc)) {
        differ(f, "TLS record with a %zu-byte IV: gpuprov must refuse it (rc %d, reason %d)", f->ivlen, rc, reason);
    }
    resync(f, "TLS record with an IV shorter than its explicit nonce");
}

/*
 * One data update on both sides, each with its own buffers (misaligned by `off`, sized exactly,
 * so ASan sees any overrun), in place or not, by EVP_CipherUpdate or EVP_Cipher.
 */
static int data_update(fz *f, reader *r, enum op op)
{
    size_t len = rd_len(r);
    uint8_t fl = rd(r);
    int inplace = fl & 1, via_cipher = (fl & 6) == 6 && has_cipher(f);
    size_t off = (fl >> 3) % 16;
    uint8_t *src = malloc(len + 1), *ib[2], *ob[2];
    int outl[2] = { -7, -7 };
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    if (src == NULL)
        abort();
    rd_value(f, r, src, len, NULL, 0);
    if (f->ai->kind == K_GCM && f->tls_pending && f->ivlen < GCM_EXPLICIT_IV && inplace
        && len >= GCM_EXPLICIT_IV + TAG_MAX) {
        /* In place, with a TLS1_AAD pending and room for a nonce and a tag, an update is a record */
        short_iv_record(f, src, len, via_cipher);
        free(src);
        return 0;
    }
    trace(f, "%s(ctx, out, &outl, in, %zu)%s", via_cipher ? "EVP_Cipher" : "EVP_CipherUpdate", len,
          inplace ? " in place" : "");
    d.len = len;
    f->touched |= f->key_set && (len > 0 || via_cipher);   /* GCM's EVP_Cipher sets its IV up even for 0 bytes */
    for (int s = 0; s < 2; s++) {
        ib[s] = malloc(len + off + 1);
        ob[s] = inplace ? ib[s] : malloc(len + 1);
        if (ib[s] == NULL || ob[s] == NULL)
            abort();
        memcpy(ib[s] + off, src, len);
        if (inplace)
            ob[s] = ib[s] + off;
        memset(ob[s], 0xa5, len);
        if (inplace)
            memcpy(ob[s], src, len);
    }
    for (int s = 0; s < 2; s++) {
        if (via_cipher) {
            /* EVP_Cipher's answer: the bytes written, or -1 */
            d.rc[s] = EVP_Cipher(f->c[s], ob[s], ib[s] + off, (unsigned int)len);
            outl[s] = d.rc[s];
            d.rc[s] = d.rc[s] < 0 ? 0 : d.rc[s] + 1;   /* compared as outl below; 0 bytes is success */
        } else {
            d.rc[s] = EVP_CipherUpdate(f->c[s], ob[s], &outl[s], ib[s] + off, (int)len);
        }
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d outl %d | %d outl %d\n", d.rc[0], outl[0], d.rc[1], outl[1]);
    ccp_empty_record(f, &d, outl, len, via_cipher);
    if (check_rc(f, op, &d, "data update") && ok_rc(d.rc[0])) {
        if (!check_outl(f, "data update", outl[0], outl[1])) {
            d.rc[0] = 0;
            goto out;
        }
        if (len == 0 && via_cipher && f->ai->kind == K_GCM && f->msg == MSG_STARTED && !f->data_seen
            && f->aad_bytes % 16 != 0)
            f->ref_aad_padded = R_GCM_EMPTY_CIPHER_PADS_AAD + 1;   /* the default ends its AAD block there, SP 800-38D does not */
        if (len == 0 && via_cipher && f->ai->kind == K_CCP && ref_ccp_empty_cipher_pads_aad && !f->tls_pending
            && f->msg == MSG_STARTED && !f->data_seen && f->aad_bytes % 16 != 0)
            f->ref_aad_padded = R_CCP_EMPTY_CIPHER_PADS_AAD + 1;   /* RFC 8439 §2.8 pads the AAD once, after all of it */
        if (len == 0 && via_cipher && f->ai->kind == K_GCM) {
            /* GCM's cipher call starts the message even for 0 bytes (a random IV if none) */
            note_random_iv(f);
            after_started(f);
        }
        /* ChaCha20-Poly1305's, with a key and an IV, makes the message's Poly1305 key: begun */
        if (len == 0 && via_cipher && f->ai->kind == K_CCP && f->key_set && !f->tls_pending
            && (f->msg == MSG_BUFFERED || f->msg == MSG_STARTED))
            after_started(f);
        if (len > 0) {
            note_random_iv(f);
            if (!f->nondet && !compare_bytes(f, "data update output", ob[0], ob[1],
                                             outl[0] > 0 && (size_t)outl[0] <= len ? (size_t)outl[0] : 0)) {
                d.rc[0] = 0;
                goto out;
            }
            record_output(f, ob[0], outl[0] > 0 && (size_t)outl[0] <= len ? (size_t)outl[0] : 0);
            after_started(f);
            f->data_seen = 1;
            f->text += (size_t)outl[0];
            f->partial_seen |= f->text % 64 != 0;
            tls_consumed(f, 1, len);
        }
        d.rc[0] = 1;
    } else {
        /* GCM's 0-byte EVP_Cipher with a record pending is that record (it fails) */
        if (d.rc[0] == d.rc[1] && (len > 0 || (via_cipher && f->ai->kind == K_GCM)))
            tls_consumed(f, 0, len);
        d.rc[0] = d.rc[0] == d.rc[1];   /* 0: a resync happened */
    }
out:
    for (int s = 0; s < 2; s++) {
        free(ib[s]);
        if (!inplace)
            free(ob[s]);
    }
    free(src);
    return d.rc[0];
}

static void op_data(fz *f, reader *r, enum op op)
{
    int chunks = op == OP_DATA1 ? 1 : 1 + rd(r) % 4;

    for (int i = 0; i < chunks; i++)
        if (!data_update(f, r, op))
            return;
}

static void op_final(fz *f, reader *r)
{
    uint8_t out[2][32];
    int outl[2] = { -7, -7 };
    int via_cipher = (rd(r) & 3) == 3 && has_cipher(f);
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    trace(f, "%s", via_cipher ? "EVP_Cipher(ctx, out, NULL, 0)" : "EVP_CipherFinal_ex(ctx, out, &outl)");
    f->touched |= f->key_set;
    for (int s = 0; s < 2; s++) {
        memset(out[s], 0x5a, sizeof(out[s]));
        if (via_cipher) {
            d.rc[s] = EVP_Cipher(f->c[s], out[s], NULL, 0);
            outl[s] = d.rc[s];
            d.rc[s] = d.rc[s] < 0 ? 0 : d.rc[s] + 1;
        } else {
            d.rc[s] = EVP_CipherFinal_ex(f->c[s], out[s], &outl[s]);
        }
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d outl %d | %d outl %d\n", d.rc[0], outl[0], d.rc[1], outl[1]);
    if (via_cipher && f->ai->kind == K_CCP && !ref_ccp_cipher_final) {
        /* This default returns at once (OpenSSL before 3.0.22): it accepts any tag there. gpuprov
         * takes it as the Final, as 3.0.22 does (docs/limitations.md): the message is over on
         * gpuprov alone, so both restart. */
        trace(f, "   ChaCha20-Poly1305 EVP_Cipher Final: a Final on gpuprov, nothing on this default; both restart\n");
        resync(f, "ChaCha20-Poly1305 EVP_Cipher(ctx, out, NULL, 0)");
        return;
    }
    if (!check_rc(f, OP_FINAL, &d, "Final"))
        return;
    /* A Final in TLS record mode fails on both before it looks at the message: the expected tag
     * stays as it was (a later decrypt Final, after an init that leaves the mode, still verifies
     * against it, as the default's does). GCM takes it as a record that is not one, which ends
     * the record and its IV; ChaCha20-Poly1305's record stays pending. */
    if (!ok_rc(d.rc[0]) && !ok_rc(d.rc[1]) && d.reason == GP_R_TLS_MODE) {
        if (f->ai->kind == K_GCM && f->tls_pending) {
            f->tls_pending = f->tls_refused = 0;
            f->ref_tls_aad_clobbered = 0;
            f->msg = MSG_FINISHED;
            f->tag_ready = 0;
        }
        return;
    }
    /* Both refuse a Final of a message gpuprov dropped (the default's 3.0.19 GCM refuses one after
     * an IV length change too): neither looked at the message or used the expected tag. */
    if (!ok_rc(d.rc[0]) && !ok_rc(d.rc[1]) && d.reason == GP_R_NEW_IV_NEEDED && msg_dropped(f))
        return;
    if (is_aead(f) && !ok_rc(d.rc[0]) && !ok_rc(d.rc[1]) && d.reason == GP_R_TAG_NOT_SET && !f->enc && !f->tag_set) {
        /* Both refuse, but gpuprov's message stays open (no tag was set: test_badinput
         * test_final_tag_checks) where the default's failed verification reset its MAC. */
        trace(f, "   decrypt Final without SET_TAG: refused by both, the message ends on both\n");
        resync(f, "decrypt Final without SET_TAG");
        return;
    }
    if (ok_rc(d.rc[0]) && !check_outl(f, "Final", outl[0], outl[1]))
        return;
    if (ok_rc(d.rc[0]) && !compare_bytes(f, "Final's output buffer", out[0], out[1], sizeof(out[0])))
        return;
    if (!is_aead(f))
        return;
    /* The message is over whatever the verdict (a failed decrypt Final too: aead_common.c). */
    if (ok_rc(d.rc[0]) || (f->key_set && f->msg != MSG_NONE && f->msg != MSG_FINISHED && !f->enc && f->tag_set)) {
        if (ok_rc(d.rc[0])) {
            note_random_iv(f);
            f->ref_tag_clobbered = 0;
            f->tag_nondet = f->nondet;
            f->tag_finding = state_finding(f);   /* a tag that may differ, by that finding */
        }
        f->msg = MSG_FINISHED;
        f->tag_ready = f->enc && ok_rc(d.rc[0]);
        if (!f->enc)
            f->tag_set = f->ref_expected_clobbered = 0;   /* a decrypt Final uses the expected tag up */
        else if (f->tag_set && ok_rc(d.rc[0]))
            f->ref_expected_clobbered = R_AEAD_FINAL_CLOBBERS_EXPECTED_TAG + 1;   /* gpuprov keeps it; the default's holds this tag now */
    }
}

static void op_get_tag(fz *f, reader *r)
{
    size_t len = rd(r) % 18;
    uint8_t tag[2][TAG_MAX + 2];
    OSSL_PARAM p[2][2];
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    trace(f, "get AEAD_TAG (%zu bytes)", len);
    for (int s = 0; s < 2; s++) {
        memset(tag[s], 0x3c, sizeof(tag[s]));
        p[s][0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag[s], len);
        p[s][1] = OSSL_PARAM_construct_end();
        d.rc[s] = EVP_CIPHER_CTX_get_params(f->c[s], p[s]);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d", d.rc[0], d.rc[1]);
    if (ok_rc(d.rc[0]) && ok_rc(d.rc[1])) {
        trace(f, " tag ");
        trace_hex(f, tag[0], len);
    }
    trace(f, "\n");
    if (!check_rc(f, OP_GET_TAG, &d, "get AEAD_TAG") || !ok_rc(d.rc[0]))
        return;
    if (f->ref_tag_clobbered && !strict_findings) {
        trace(f, "   tag not compared: %s\n", finding_name[f->ref_tag_clobbered - 1]);
        finding_hits[f->ref_tag_clobbered - 1]++;
    } else if (f->tag_finding >= 0 && !strict_findings && memcmp(tag[0], tag[1], sizeof(tag[0])) != 0) {
        trace(f, "   tag differs: open finding %s\n", finding_name[f->tag_finding]);
        finding_hits[f->tag_finding]++;
    } else if (!f->nondet && !f->tag_nondet && !compare_bytes(f, "tag", tag[0], tag[1], sizeof(tag[0]))) {
        return;
    }
    if (is_aead(f) && len > 0 && len <= TAG_MAX) {
        memcpy(f->tag, tag[0], len);
        f->taglen = len;
    }
}

static void op_set_tag(fz *f, reader *r)
{
    uint8_t fl = rd(r);
    size_t len = fl % 18;
    int len_only = fl >= 0xf0;   /* data NULL: only the length (as EVP_CTRL_AEAD_SET_TAG with NULL) */
    uint8_t tag[TAG_MAX + 2] = { 0 };
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    rd_value(f, r, tag, len, f->tag, f->taglen);
    d.no_data = len_only;
    trace(f, "set AEAD_TAG (%zu bytes) ", len);
    if (len_only)
        trace(f, "NULL");
    else
        trace_hex(f, tag, len);
    for (int s = 0; s < 2; s++) {
        OSSL_PARAM p[2] = { OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG,
                                                              len_only ? NULL : tag, len),
                            OSSL_PARAM_construct_end() };

        d.rc[s] = EVP_CIPHER_CTX_set_params(f->c[s], p);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    /* OpenSSL 3.0's GCM copies the bytes into the buffer holding its computed tag before it
     * refuses a tag on an encrypting context, and both AEADs keep a decryption's expected tag
     * there: the next GET_TAG (after a turn back to encrypting) returns them. */
    if (is_aead(f) && !len_only && len > 0 && ((f->ai->kind == K_GCM && f->enc && !ok_rc(d.rc[0])) || (!f->enc && ok_rc(d.rc[0]))))
        f->ref_tag_clobbered = R_GCM_SET_TAG_CLOBBERS + 1;
    /* That buffer also holds a pending TLS1_AAD: the next record's tag covers the tag's bytes
     * (OSSL_PARAM_get_octet_string copies up to the buffer's 16 bytes, before an encrypting
     * context's refusal, and for a decrypting one's expected tag). */
    if (f->ai->kind == K_GCM && !len_only && len > 0 && len <= TAG_MAX && f->tls_pending)
        f->ref_tls_aad_clobbered = 1;
    if (!check_rc(f, OP_SET_TAG, &d, "set AEAD_TAG") || !ok_rc(d.rc[0]))
        return;
    if (is_aead(f) && !len_only) {
        f->tag_set = 1;
        f->ref_expected_clobbered = 0;
    }
}

static void op_copy(fz *f, reader *r)
{
    uint8_t fl = rd(r);
    EVP_CIPHER_CTX *cp[2];
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    trace(f, "EVP_CIPHER_CTX_copy(copy, ctx)");
    for (int s = 0; s < 2; s++) {
        cp[s] = EVP_CIPHER_CTX_new();
        if (cp[s] == NULL)
            abort();
        d.rc[s] = EVP_CIPHER_CTX_copy(cp[s], f->c[s]);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    if (!check_rc(f, OP_COPY, &d, "EVP_CIPHER_CTX_copy") || !ok_rc(d.rc[0])) {
        for (int s = 0; s < 2; s++)
            EVP_CIPHER_CTX_free(cp[s]);
        return;
    }
    /* The original diverges first (one more update), then goes away: the copy owns its state. */
    if (fl & 1) {
        /* the model follows the copy: the original's update does not move it */
        enum msg_state msg = f->msg;
        int data_seen = f->data_seen, tag_ready = f->tag_ready, touched = f->touched, nondet = f->nondet;
        int tls_pending = f->tls_pending, tls_refused = f->tls_refused, partial_seen = f->partial_seen;
        int clobbered = f->ref_tls_aad_clobbered, padded = f->ref_aad_padded;
        uint64_t text = f->text;
        size_t cur_len = f->cur_len;

        trace(f, "  on the original: ");
        if (!data_update(f, r, OP_DATA1)) {
            for (int s = 0; s < 2; s++)
                EVP_CIPHER_CTX_free(cp[s]);
            return;   /* restarted: the copy belongs to the broken-off message */
        }
        f->msg = msg;
        f->data_seen = data_seen;
        f->tag_ready = tag_ready;
        f->touched = touched;
        f->nondet = nondet;
        f->text = text;
        f->cur_len = cur_len;
        f->tls_pending = tls_pending;   /* a record the original ran (or failed) is still pending on the copy */
        f->tls_refused = tls_refused;
        f->partial_seen = partial_seen;
        f->ref_tls_aad_clobbered = clobbered;
        f->ref_aad_padded = padded;
    }
    trace(f, "  free the original; the copy goes on\n");
    for (int s = 0; s < 2; s++) {
        EVP_CIPHER_CTX_free(f->c[s]);
        f->c[s] = cp[s];
    }
}

static void op_tls_fixed(fz *f, reader *r)
{
    uint8_t how = rd(r);
    uint8_t fixed[128] = { 0 };
    size_t len;
    int whole = 0, keep_random, pending, refused;
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    if (!is_aead(f)) {
        trace(f, "(TLS1_IV_FIXED skipped: not an AEAD)\n");
        return;
    }
    if (f->ai->kind == K_GCM) {
        switch (how % 4) {
        case 0: case 1:
            len = 4;   /* RFC 5288 §3 salt */
            break;
        case 2:
            whole = 1;   /* EVP_CTRL_GCM_SET_IV_FIXED with -1: the whole IV */
            len = f->ivlen;
            break;
        default:
            len = rd(r) % 20;
            break;
        }
    } else {
        len = how % 4 == 3 ? rd(r) % 20 : 12;
    }
    rd_value(f, r, fixed, len, f->iv, sizeof(f->iv));
    d.len = whole ? (size_t)-1 : len;
    trace(f, "TLS1_IV_FIXED %s(%zu bytes) ", whole ? "ctrl -1 " : "", len);
    trace_hex(f, fixed, len);
    if (f->ai->kind == K_GCM && !whole && len > f->ivlen && f->enc) {
        /* OpenSSL 3.0.19's default then asks RAND for ivlen - len bytes, wrapped: it overruns its
         * IV buffer (heap-buffer-overflow under ASan). gpuprov alone, which must refuse. */
        d.rc[1] = EVP_CIPHER_CTX_ctrl(f->c[1], EVP_CTRL_AEAD_SET_IV_FIXED, (int)len, fixed);
        ERR_clear_error();
        trace(f, " -> (default not called) | %d\n", d.rc[1]);
        if (ok_rc(d.rc[1]))
            differ(f, "TLS1_IV_FIXED: gpuprov accepts a %zu-byte fixed field for a %zu-byte IV", len, f->ivlen);
        return;
    }
    for (int s = 0; s < 2; s++) {
        if (whole)
            d.rc[s] = EVP_CIPHER_CTX_ctrl(f->c[s], EVP_CTRL_GCM_SET_IV_FIXED, -1, fixed);
        else
            d.rc[s] = EVP_CIPHER_CTX_ctrl(f->c[s], EVP_CTRL_AEAD_SET_IV_FIXED, (int)len, fixed);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    if (!check_rc(f, OP_TLS_FIXED, &d, "TLS1_IV_FIXED") || !ok_rc(d.rc[0]))
        return;
    keep_random = f->nondet && f->ai->kind == K_GCM && !whole && !f->enc;
    /* and random bytes either drew earlier that this IV, longer since, still holds past len */
    iv_written(f, whole ? f->ivlen : len);
    keep_random |= f->ai->kind == K_GCM && !f->enc && f->iv_diff_from < f->iv_diff_to
                   && f->iv_diff_from < f->ivlen;
    pending = f->tls_pending;   /* a pending GCM TLS1_AAD stays on both sides */
    refused = f->tls_refused;
    new_message(f);
    f->tls_pending = pending;
    f->tls_refused = refused;
    /* decrypt keeps the IV's invocation field: still each side's own random one */
    f->nondet = keep_random;
    if (f->ai->kind == K_GCM && f->enc && !whole) {
        /* Each side drew its own invocation field (RFC 5288 §3): give both the default's whole IV. */
        uint8_t iv[128];
        OSSL_PARAM p[2] = { OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_IV, iv, f->ivlen),
                            OSSL_PARAM_construct_end() };

        if (EVP_CIPHER_CTX_get_params(f->c[0], p) != 1)
            differ(f, "TLS1_IV_FIXED: the default provider's IV cannot be read back");
        for (int s = 0; s < 2; s++)
            d.rc[s] = EVP_CIPHER_CTX_ctrl(f->c[s], EVP_CTRL_GCM_SET_IV_FIXED, -1, iv);
        d.reason = gp_reason();
        trace(f, "  both sides take the default's IV ");
        trace_hex(f, iv, f->ivlen);
        trace(f, " (ctrl -1) -> %d | %d\n", d.rc[0], d.rc[1]);
        if (!check_rc(f, OP_TLS_FIXED, &d, "TLS1_IV_FIXED -1"))
            return;
        iv_written(f, f->ivlen);
    }
}

static void op_tls_record(fz *f, reader *r)
{
    uint8_t fl = rd(r), aad[TLS_AAD_LEN];
    int gcm = f->ai->kind == K_GCM, via_cipher = (fl & 1) && has_cipher(f), not_in_place = (fl & 0x1e) == 0x1e;
    size_t payload = rd_len(r) % (MAX_TLS_PAYLOAD + 1);
    size_t reclen = payload + TAG_MAX + (gcm ? GCM_EXPLICIT_IV : 0), announced;
    uint8_t *src, *buf[2], *out[2];
    int outl[2] = { -7, -7 };
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    if (!is_aead(f)) {
        trace(f, "(TLS record skipped: not an AEAD)\n");
        return;
    }
    /* RFC 5246 §6.2.3.3: seq || type || version || length; the length as libssl 3.0 sets it: the
     * record less its tag when sending, the whole record when receiving. Sometimes any length. */
    memset(aad, 0, sizeof(aad));
    aad[7] = rd(r);
    aad[8] = 23;
    aad[9] = 3;
    aad[10] = 3;
    announced = f->enc ? reclen - TAG_MAX : reclen;
    if ((fl & 0xe0) == 0xe0)
        announced = (size_t)(rd(r) | rd(r) << 8);
    aad[11] = (uint8_t)(announced >> 8);
    aad[12] = (uint8_t)announced;
    if ((fl & 0x1e) == 0x1c)
        reclen = rd(r);   /* a record of any length, short ones included */
    src = malloc(reclen + 1);
    if (src == NULL)
        abort();
    rd_value(f, r, src, reclen, NULL, 0);
    trace(f, "TLS1_AAD ");
    trace_hex(f, aad, TLS_AAD_LEN);
    if (gcm) {
        f->ref_tag_clobbered = R_GCM_TLS_AAD_CLOBBERS + 1;   /* before its checks: any outcome */
        if (f->tag_set && !f->enc)
            f->ref_expected_clobbered = R_GCM_TLS_AAD_CLOBBERS_EXPECTED_TAG + 1;
    }
    for (int s = 0; s < 2; s++) {
        d.rc[s] = EVP_CIPHER_CTX_ctrl(f->c[s], EVP_CTRL_AEAD_TLS1_AAD, TLS_AAD_LEN, aad);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    if (!check_rc(f, OP_TLS_RECORD, &d, "TLS1_AAD")) {
        free(src);
        return;
    }
    if (ok_rc(d.rc[0])) {
        f->tls_pending = 1;
        f->tls_refused = 0;
        f->ref_tls_aad_clobbered = 0;
        f->tls_reclen = f->enc ? announced + TAG_MAX : announced;
    } else if (gcm || f->tls_pending) {
        /* The default keeps a TLS AAD (GCM: this one, ChaCha20-Poly1305: an announced record with
         * this AAD's bytes); gpuprov refuses that record (aead_common.c set_tls_aad) */
        f->tls_pending = f->tls_refused = 1;
    }
    d.len = reclen;
    if (gcm && f->tls_pending && f->ivlen < GCM_EXPLICIT_IV && reclen > 0) {
        short_iv_record(f, src, reclen, 0);
        free(src);
        return;
    }
    trace(f, "%s(ctx, rec, %s, %zu) one TLS record", via_cipher ? "EVP_Cipher" : "EVP_CipherUpdate",
          not_in_place ? "other" : "rec", reclen);
    for (int s = 0; s < 2; s++) {
        buf[s] = malloc(reclen + 1);
        out[s] = not_in_place ? malloc(reclen + 1) : buf[s];
        if (buf[s] == NULL || out[s] == NULL)
            abort();
        memcpy(buf[s], src, reclen);
        if (not_in_place)
            memset(out[s], 0, reclen);
        if (via_cipher) {
            d.rc[s] = EVP_Cipher(f->c[s], out[s], buf[s], (unsigned int)reclen);
            outl[s] = d.rc[s];
            d.rc[s] = d.rc[s] < 0 ? 0 : d.rc[s] + 1;
        } else {
            d.rc[s] = EVP_CipherUpdate(f->c[s], out[s], &outl[s], buf[s], (int)reclen);
        }
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d outl %d | %d outl %d\n", d.rc[0], outl[0], d.rc[1], outl[1]);
    ccp_empty_record(f, &d, outl, reclen, via_cipher);
    /* ossl_gcm_cipher sets *outl = inl after the record function set the payload length */
    if (via_cipher && gcm && !f->enc && f->tls_pending && ok_rc(d.rc[0]) && ok_rc(d.rc[1]) && outl[0] == (int)reclen
        && reclen >= GCM_EXPLICIT_IV + TAG_MAX && outl[1] == (int)(reclen - GCM_EXPLICIT_IV - TAG_MAX) && !strict_findings) {
        trace(f, "   %s\n", finding_name[R_GCM_TLS_CIPHER_OUTL]);
        finding_hits[R_GCM_TLS_CIPHER_OUTL]++;
        d.rc[0] = d.rc[1];
        outl[0] = outl[1];
    }
    if (check_rc(f, OP_TLS_RECORD, &d, "TLS record update")) {
        if (ok_rc(d.rc[0])) {
            if (!check_outl(f, "TLS record", outl[0], outl[1]))
                goto out;
            /* In place: a sent record is nonce || ciphertext || tag, a received one's payload sits
             * after the nonce (GCM); compare the whole buffer either way. */
            if (!f->nondet && !compare_bytes(f, "TLS record", out[0], out[1], reclen))
                goto out;
            record_output(f, out[0], reclen);
            if (!f->tls_pending && reclen > 0) {
                /* no record pending (a refused ChaCha20-Poly1305 TLS1_AAD announced none): a
                 * plain update of the message */
                after_started(f);
                f->data_seen = 1;
                f->text += reclen;
            }
            /* ... and a 0-byte EVP_Cipher there, with a key and an IV, makes the message's
             * Poly1305 key, as in data_update: begun */
            if (!f->tls_pending && reclen == 0 && via_cipher && !gcm && f->key_set
                && (f->msg == MSG_BUFFERED || f->msg == MSG_STARTED))
                after_started(f);
        }
        /* a 0-byte record is no call at all on either side, but for GCM's EVP_Cipher */
        if (reclen > 0 || (via_cipher && gcm))
            tls_consumed(f, ok_rc(d.rc[0]), reclen);
    }
out:
    for (int s = 0; s < 2; s++) {
        if (not_in_place)
            free(out[s]);
        free(buf[s]);
    }
    free(src);
}

static void op_get_state(fz *f)
{
    size_t ivlen[2] = { 0, 0 }, taglen[2] = { 0, 0 };
    unsigned int num[2] = { 0, 0 };
    uint8_t iv[2][128], uiv[2][128];
    int rc[2], reason;

    /* each param alone: one refused param must not hide the others */
    trace(f, "get IVLEN, AEAD_TAGLEN, IV, UPDATED_IV, NUM\n");
    for (int s = 0; s < 2; s++) {
        OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_IVLEN, &ivlen[s]), OSSL_PARAM_construct_end() };

        rc[s] = EVP_CIPHER_CTX_get_params(f->c[s], p);
    }
    ERR_clear_error();
    if (rc[0] != rc[1] || ivlen[0] != ivlen[1])
        differ(f, "get IVLEN: rc %d, %zu (default) vs rc %d, %zu (gpuprov)", rc[0], ivlen[0], rc[1], ivlen[1]);
    if (is_aead(f)) {
        for (int s = 0; s < 2; s++) {
            OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_AEAD_TAGLEN, &taglen[s]),
                                OSSL_PARAM_construct_end() };

            rc[s] = EVP_CIPHER_CTX_get_params(f->c[s], p);
        }
        ERR_clear_error();
        if (rc[0] != rc[1] || taglen[0] != taglen[1])
            differ(f, "get AEAD_TAGLEN: rc %d, %zu (default) vs rc %d, %zu (gpuprov)", rc[0], taglen[0], rc[1],
                   taglen[1]);
    }
    if (f->ai->kind == K_CTR || f->ai->kind == K_GCM) {
        const char *names[2] = { OSSL_CIPHER_PARAM_IV, OSSL_CIPHER_PARAM_UPDATED_IV };

        for (int k = 0; k < 2; k++) {
            size_t got[2] = { 0, 0 };

            for (int s = 0; s < 2; s++) {
                uint8_t *b = k == 0 ? iv[s] : uiv[s];
                OSSL_PARAM p[2] = { OSSL_PARAM_construct_octet_string(names[k], b, 128),
                                    OSSL_PARAM_construct_end() };

                memset(b, 0, 128);
                rc[s] = EVP_CIPHER_CTX_get_params(f->c[s], p);
                got[s] = p[0].return_size;
            }
            reason = gp_reason();
            if (ok_rc(rc[0]) && !ok_rc(rc[1]) && msg_dropped(f) && reason == GP_R_NEW_IV_NEEDED) {
                trace(f, "   get %s: refused on purpose (a dropped IV)\n", names[k]);
                continue;
            }
            if (rc[0] != rc[1] && state_finding(f) >= 0 && !strict_findings) {
                trace(f, "   get %s: open finding %s\n", names[k], finding_name[state_finding(f)]);
                finding_hits[state_finding(f)]++;
                continue;
            }
            if (rc[0] != rc[1])
                differ(f, "get %s: rc %d (default) vs %d (gpuprov)", names[k], rc[0], rc[1]);
            if (ok_rc(rc[0]) && !f->nondet) {
                if (got[0] != got[1])
                    differ(f, "get %s: %zu bytes (default) vs %zu (gpuprov)", names[k], got[0], got[1]);
                if (!compare_bytes(f, names[k], k == 0 ? iv[0] : uiv[0], k == 0 ? iv[1] : uiv[1],
                                   got[0] < 128 ? got[0] : 128))
                    return;
            }
        }
    }
    if (f->ai->kind == K_CTR) {
        for (int s = 0; s < 2; s++) {
            OSSL_PARAM p[2] = { OSSL_PARAM_construct_uint(OSSL_CIPHER_PARAM_NUM, &num[s]), OSSL_PARAM_construct_end() };

            rc[s] = EVP_CIPHER_CTX_get_params(f->c[s], p);
        }
        ERR_clear_error();
        if (rc[0] != rc[1] || num[0] != num[1])
            differ(f, "get NUM: rc %d, %u (default) vs rc %d, %u (gpuprov)", rc[0], num[0], rc[1], num[1]);
    }
}

static void op_params(fz *f, reader *r)
{
    uint8_t which = rd(r) % 4, v = rd(r);
    unsigned int u = v;
    size_t sz = v % 2 ? f->ai->keylen : (size_t)v;
    OSSL_PARAM p[2];
    duo_rc d = { { 0, 0 }, 0, 0, 0 };

    switch (which) {
    case 0:
        u = v & 1;
        p[0] = OSSL_PARAM_construct_uint(OSSL_CIPHER_PARAM_PADDING, &u);
        break;
    case 1:
        u = 0x0300 | (v & 4);
        p[0] = OSSL_PARAM_construct_uint(OSSL_CIPHER_PARAM_TLS_VERSION, &u);
        break;
    case 2:
        p[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_TLS_MAC_SIZE, &sz);
        break;
    default:
        p[0] = OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_KEYLEN, &sz);
        break;
    }
    p[1] = OSSL_PARAM_construct_end();
    trace(f, "set %s", p[0].key);
    for (int s = 0; s < 2; s++) {
        d.rc[s] = EVP_CIPHER_CTX_set_params(f->c[s], p);
        if (s == 1)
            d.reason = gp_reason();
    }
    ERR_clear_error();
    trace(f, " -> %d | %d\n", d.rc[0], d.rc[1]);
    /* KEYLEN of another length: the default's CTR ignores it, gpuprov refuses; either is allowed as
     * long as the key length stays (tests/evp/test_badinput.c test_wrong_keylen). No state changes. */
    if (which == 3 && sz != f->ai->keylen && ok_rc(d.rc[0]) && !ok_rc(d.rc[1])
        && d.reason == GP_R_INVALID_KEY_LENGTH) {
        trace(f, "   allowed: KEYLEN %zu refused by gpuprov, ignored by default\n", sz);
        if (ref_evp_keeps_lengths) {
            trace(f, "   this EVP hands the ignored KEYLEN to the default's next init; both sides restart\n");
            resync(f, "KEYLEN kept by EVP for the next init");
        }
        return;
    }
    /* CTR with TLS_VERSION and TLS_MAC_SIZE both above 0: the default's decryption strips a MAC
     * it never checks, gpuprov refuses the param completing the pair (stream_common.c set_tls_mac) */
    if (f->ai->kind == K_CTR && ok_rc(d.rc[0]) && !ok_rc(d.rc[1]) && d.reason == GP_R_TLS_MAC_NOT_SUPPORTED
        && ((which == 1 && f->tls_mac_set) || (which == 2 && sz > 0 && f->tls_version_set))) {
        trace(f, "   stricter on purpose: CTR TLS MAC-then-encrypt records (gpuprov reason %d); both sides restart\n",
              d.reason);
        resync(f, "CTR TLS_VERSION with TLS_MAC_SIZE");
        return;
    }
    if (check_rc(f, OP_PARAMS, &d, p[0].key) && ok_rc(d.rc[0]) && f->ai->kind == K_CTR) {
        if (which == 1)
            f->tls_version_set = 1;   /* 0x0300 and up */
        if (which == 2)
            f->tls_mac_set = sz > 0;
    }
}

static void op_new_ctx(fz *f)
{
    trace(f, "EVP_CIPHER_CTX_free; EVP_CIPHER_CTX_new (no cipher)\n");
    for (int s = 0; s < 2; s++) {
        EVP_CIPHER_CTX_free(f->c[s]);
        f->c[s] = EVP_CIPHER_CTX_new();
        if (f->c[s] == NULL)
            abort();
    }
    model_fresh(f, f->enc, 0);
    f->has_cipher = 0;
}

/* ---- libFuzzer entry points ----------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ChaCha20-Poly1305's tag after AAD "ab", with a 0-byte EVP_Cipher between "a" and "b" if split. */
static int ccp_probe_tag(EVP_CIPHER_CTX *c, const EVP_CIPHER *ccp, int split, uint8_t tag[16])
{
    static const uint8_t key[32], iv[12];
    uint8_t out[16];
    int outl;

    return EVP_CipherInit_ex2(c, ccp, key, iv, 1, NULL) == 1
           && EVP_CipherUpdate(c, NULL, &outl, (const uint8_t *)"a", 1) == 1
           && (!split || EVP_Cipher(c, out, (const uint8_t *)"", 0) >= 0)
           && EVP_CipherUpdate(c, NULL, &outl, (const uint8_t *)"b", 1) == 1
           && EVP_CipherFinal_ex(c, out, &outl) == 1
           && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
}

/* Learns what the default provider under test does where supported releases differ (see
 * ref_ccp_cipher_final). 0 if the probe itself failed. */
static int probe_reference(void)
{
    static const uint8_t key[32], iv[16], wrong_tag[16];   /* iv: CTR reads 16 bytes, ChaCha20-Poly1305 12 */
    const EVP_CIPHER *ccp = NULL;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    uint8_t out[16], t1[16], t2[16];
    int ok;

    for (int i = 0; i < 8; i++)
        if (algs[i].kind == K_CCP)
            ccp = ciphers[i][0];
    ok = c != NULL && ccp != NULL && EVP_CipherInit_ex2(c, ccp, key, iv, 0, NULL) == 1
         && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, (void *)wrong_tag) == 1;
    if (ok)
        ref_ccp_cipher_final = EVP_Cipher(c, out, NULL, 0) < 0;   /* the empty message's tag is not 0 */
    ok = ok && ccp_probe_tag(c, ccp, 0, t1) && ccp_probe_tag(c, ccp, 1, t2);
    if (ok)
        ref_ccp_empty_cipher_pads_aad = memcmp(t1, t2, 16) != 0;
    if (ok) {
        const EVP_CIPHER *ctr = NULL;
        size_t wrong = 32;
        OSSL_PARAM p[2] = { OSSL_PARAM_construct_size_t(OSSL_CIPHER_PARAM_KEYLEN, &wrong), OSSL_PARAM_END };

        for (int i = 0; i < 8; i++)
            if (algs[i].kind == K_CTR && algs[i].keylen == 16)
                ctr = ciphers[i][0];
        ok = ctr != NULL && EVP_CipherInit_ex2(c, ctr, key, iv, 1, NULL) == 1 && EVP_CIPHER_CTX_set_params(c, p) == 1;
        if (ok)
            ref_evp_keeps_lengths = EVP_CipherInit_ex2(c, NULL, key, NULL, 1, NULL) != 1;
    }
    EVP_CIPHER_CTX_free(c);
    ERR_clear_error();
    if (!ok)
        fprintf(stderr, "fuzz_evp_diff: probing the default provider's ChaCha20-Poly1305 failed\n");
    return ok;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("GPUPROV_FUZZ_MODULE_DIR");
    const char *want = getenv("GPUPROV_BACKEND"), *got = NULL;
    OSSL_PROVIDER *gp, *def;
    OSSL_PARAM params[] = { OSSL_PARAM_utf8_ptr("gpuprov-executor", (char **)&got, 0), OSSL_PARAM_END };

    (void)argc;
    (void)argv;
    verbose = getenv("GPUPROV_FUZZ_TRACE") != NULL;
    strict_findings = getenv("GPUPROV_FUZZ_STRICT") != NULL && strcmp(getenv("GPUPROV_FUZZ_STRICT"), "0") != 0;
    atexit(print_findings);
#ifdef FUZZ_MODULE_DIR
    if (dir == NULL)
        dir = FUZZ_MODULE_DIR;
#endif
    libctx = OSSL_LIB_CTX_new();
    if (libctx == NULL || (dir != NULL && !OSSL_PROVIDER_set_default_search_path(libctx, dir)))
        goto err;
    def = OSSL_PROVIDER_load(libctx, "default");
    gp = OSSL_PROVIDER_load(libctx, "gpuprov");
    if (def == NULL || gp == NULL) {
        fprintf(stderr, "fuzz_evp_diff: cannot load gpuprov and default (module dir %s)\n", dir ? dir : "(default)");
        goto err;
    }
    /* The executor asked for must be the one serving: no silent fallback (as GPTEST_REQUIRE_EXECUTOR). */
    if (!OSSL_PROVIDER_get_params(gp, params) || got == NULL) {
        fprintf(stderr, "fuzz_evp_diff: cannot read gpuprov's executor\n");
        goto err;
    }
    if (want != NULL && *want != '\0' && strcmp(want, "auto") != 0 && strcmp(want, got) != 0) {
        fprintf(stderr, "fuzz_evp_diff: gpuprov serves with the %s executor, GPUPROV_BACKEND asks for %s\n", got, want);
        goto err;
    }
    for (int i = 0; i < 8; i++)
        for (int s = 0; s < 2; s++) {
            ciphers[i][s] = EVP_CIPHER_fetch(libctx, algs[i].name, s ? "provider=gpuprov" : "provider=default");
            if (ciphers[i][s] == NULL
                || strcmp(OSSL_PROVIDER_get0_name(EVP_CIPHER_get0_provider(ciphers[i][s])), side_name[s]) != 0) {
                fprintf(stderr, "fuzz_evp_diff: cannot fetch %s from %s\n", algs[i].name, side_name[s]);
                goto err;
            }
        }
    for (int i = 0; i < 8; i++)
        pipe_algs[i] = (fz_pipe_alg){ algs[i].name, algs[i].kind == K_GCM || algs[i].kind == K_CCP, algs[i].kind == K_GCM,
                                      algs[i].kind == K_CHACHA, algs[i].keylen, algs[i].ivlen };
    if (!probe_reference())
        goto err;
    fprintf(stderr, "fuzz_evp_diff: gpuprov (%s executor) against the default provider, %s; its ChaCha20-Poly1305 "
            "EVP_Cipher(ctx, out, NULL, 0) %s, a 0-byte EVP_Cipher between AAD pieces %s; its EVP %s\n", got,
            OpenSSL_version(OPENSSL_VERSION), ref_ccp_cipher_final ? "checks the tag" : "returns at once",
            ref_ccp_empty_cipher_pads_aad ? "pads the AAD" : "does nothing",
            ref_evp_keeps_lengths ? "keeps a KEYLEN param for the next init" : "keeps no length param");
    fprintf(stderr, "fuzz_evp_diff: pipeline sequences (inputs that start with \"" FUZZ_PIPE_MAGIC "\") %s\n",
            fuzz_pipeline_available() ? "on" : "off: this libcrypto has no pipeline API");
    return 0;
err:
    ERR_print_errors_fp(stderr);
    exit(2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = { data, size, 0 };
    fz f;
    int ops = 0;

    /* Pipeline sequences (fuzz_pipeline.c), where the libcrypto has OpenSSL 3.5's pipeline API;
     * elsewhere such an input decodes as nothing. */
    if (size >= FUZZ_PIPE_MAGIC_LEN && memcmp(data, FUZZ_PIPE_MAGIC, FUZZ_PIPE_MAGIC_LEN) == 0) {
        if (fuzz_pipeline_available())
            fuzz_pipeline_one(data + FUZZ_PIPE_MAGIC_LEN, size - FUZZ_PIPE_MAGIC_LEN, pipe_algs, ciphers, verbose);
        return 0;
    }
    memset(&f, 0, sizeof(f));
    f.alg = rd(&r) % 8;
    f.ai = &algs[f.alg];
    f.trace_cap = 4096;
    f.trace = malloc(f.trace_cap);
    if (f.trace == NULL)
        abort();
    f.trace[0] = '\0';
    for (int s = 0; s < 2; s++)
        if ((f.c[s] = EVP_CIPHER_CTX_new()) == NULL)
            abort();
    model_fresh(&f, 1, 0);
    f.has_cipher = 0;
    while (rd_left(&r) && ops++ < MAX_OPS) {
        enum op op = (enum op)(rd(&r) % OP_COUNT);

        switch (op) {
        case OP_CIPHER_INIT: op_cipher_init(&f, &r); break;
        case OP_REINIT: op_reinit(&f, &r); break;
        case OP_SET_IVLEN: op_set_ivlen(&f, &r); break;
        case OP_AAD: op_aad(&f, &r); break;
        case OP_DATA: case OP_DATA1: op_data(&f, &r, op); break;
        case OP_FINAL: op_final(&f, &r); break;
        case OP_GET_TAG: op_get_tag(&f, &r); break;
        case OP_SET_TAG: op_set_tag(&f, &r); break;
        case OP_COPY: op_copy(&f, &r); break;
        case OP_TLS_FIXED: op_tls_fixed(&f, &r); break;
        case OP_TLS_RECORD: op_tls_record(&f, &r); break;
        case OP_GET_STATE: op_get_state(&f); break;
        case OP_PARAMS: op_params(&f, &r); break;
        case OP_NEW_CTX: op_new_ctx(&f); break;
        case OP_COUNT: break;
        }
    }
    if (verbose) {
        fprintf(stderr, "---- %s, %d ops, %d restarts\n", f.ai->name, ops, f.resyncs);
        fwrite(f.trace, 1, f.trace_len, stderr);
    }
    for (int s = 0; s < 2; s++)
        EVP_CIPHER_CTX_free(f.c[s]);
    free(f.prev_out);
    free(f.cur_out);
    free(f.trace);
    ERR_clear_error();
    return 0;
}
