/* SPDX-License-Identifier: Apache-2.0 */
/* Nanoseconds per TLS-style AEAD record on one context, the call sequence libssl makes per record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>

/*
 * usage: record_bench CIPHER QUERY BYTES MODE DIR COUNT|-SECONDS
 *   MODE tls13: per record an IV-only re-init, SET_TAG (decrypt), the 5-byte header as AAD, the
 *               payload in place, Final, GET_TAG (encrypt) (libssl's tls13_enc);
 *   MODE tls12: TLS1_IV_FIXED once (GCM; ChaCha20-Poly1305 takes the whole IV), per record
 *               TLS1_AAD and one in-place EVP_Cipher over explicit nonce | payload | tag (tls1_enc);
 *   MODE seq:   the loop of `openssl speed -aead` 3.0: IV-only re-init, AAD, payload, Final;
 *   MODE stream: one in-place update per "record" on a context set up once (`openssl speed`'s
 *               streaming loop; any cipher).
 *   DIR enc or dec (decrypt records made once by an encrypting context, copied in per record).
 *   COUNT records, or with a negative number that many seconds.
 * e.g. record_bench AES-128-GCM provider=gpuprov 16 tls13 enc 100000 (load gpuprov through
 * OPENSSL_CONF=config/gpuprov.cnf). bench/record_cost.sh runs it under callgrind.
 */

#define TAG_LEN 16
#define MAX_PAYLOAD 16384
#define TLS12_EXPLICIT 8

typedef struct record_setup {
    EVP_CIPHER *cipher;
    int gcm;
    const char *mode;
    int enc;
    long bytes;
    unsigned char key[32], iv[12], hdr[5], aad12[13];
    unsigned char record[TLS12_EXPLICIT + MAX_PAYLOAD + TAG_LEN];   /* decrypt: what arrives */
    size_t record_len;
    unsigned char tag[TAG_LEN];
} record_setup;

static int set_tls12_keys(EVP_CIPHER_CTX *ctx, const record_setup *s, int enc)
{
    /* GCM: the 4-byte salt (RFC 5288 §3); ChaCha20-Poly1305: the whole 12-byte IV (RFC 7905 §2). */
    if (!EVP_CipherInit_ex(ctx, s->cipher, NULL, s->key, NULL, enc))
        return 0;
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IV_FIXED, s->gcm ? 4 : 12, (void *)s->iv) > 0;
}

static int tls12_aad(EVP_CIPHER_CTX *ctx, const record_setup *s, int enc)
{
    unsigned char aad[13];
    /* The record's length as libssl passes it: GCM's counts the explicit nonce both ways (RFC 5288
     * §3), a received record's its tag too; the provider takes them off (RFC 5246 §6.2.3.3). */
    size_t len = (size_t)s->bytes + (enc ? 0 : TAG_LEN) + (s->gcm ? TLS12_EXPLICIT : 0);

    memcpy(aad, s->aad12, 11);
    aad[11] = (unsigned char)(len >> 8);
    aad[12] = (unsigned char)len;
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_TLS1_AAD, 13, aad) == TAG_LEN;
}

/* One record on ctx, buf holding the payload (encrypt) or nothing yet (decrypt). */
static int one_record(EVP_CIPHER_CTX *ctx, const record_setup *s, unsigned char *buf)
{
    int outl = 0, fl = 0;

    if (strcmp(s->mode, "stream") == 0)
        return EVP_CipherUpdate(ctx, buf, &outl, buf, (int)s->bytes);
    if (strcmp(s->mode, "tls12") == 0) {
        size_t explicit = s->gcm ? TLS12_EXPLICIT : 0;
        size_t len = explicit + (size_t)s->bytes + TAG_LEN;

        if (!s->enc)
            memcpy(buf, s->record, s->record_len);
        if (!tls12_aad(ctx, s, s->enc))
            return 0;
        return EVP_Cipher(ctx, buf, buf, (unsigned int)len) > 0;
    }
    if (!s->enc)
        memcpy(buf, s->record, (size_t)s->bytes);
    if (!EVP_CipherInit_ex(ctx, NULL, NULL, NULL, s->iv, -1))
        return 0;
    if (!s->enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG_LEN, (void *)s->tag) <= 0)
        return 0;
    if (!EVP_CipherUpdate(ctx, NULL, &outl, s->hdr, sizeof(s->hdr))
        || !EVP_CipherUpdate(ctx, buf, &outl, buf, (int)s->bytes)
        || !EVP_CipherFinal_ex(ctx, buf + outl, &fl))
        return 0;
    if (s->enc && strcmp(s->mode, "tls13") == 0) {
        unsigned char tag[TAG_LEN];

        return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG_LEN, tag) > 0;
    }
    return 1;
}

/* Decrypt: the record an encrypting context makes from the same key, IV and header. */
static int make_record(record_setup *s)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl = 0, fl = 0, ok = 0;

    memset(s->record, 0x5a, sizeof(s->record));
    if (ctx == NULL)
        return 0;
    if (strcmp(s->mode, "stream") == 0) {
        EVP_CIPHER_CTX_free(ctx);
        return 1;
    }
    if (strcmp(s->mode, "tls12") == 0) {
        size_t explicit = s->gcm ? TLS12_EXPLICIT : 0;

        s->record_len = explicit + (size_t)s->bytes + TAG_LEN;
        ok = set_tls12_keys(ctx, s, 1) && tls12_aad(ctx, s, 1)
             && EVP_Cipher(ctx, s->record, s->record, (unsigned int)s->record_len) > 0;
    } else {
        s->record_len = (size_t)s->bytes;
        ok = EVP_EncryptInit_ex(ctx, s->cipher, NULL, s->key, s->iv)
             && EVP_EncryptUpdate(ctx, NULL, &outl, s->hdr, sizeof(s->hdr))
             && EVP_EncryptUpdate(ctx, s->record, &outl, s->record, (int)s->bytes)
             && EVP_EncryptFinal_ex(ctx, s->record + outl, &fl)
             && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG_LEN, s->tag) > 0;
    }
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}

int main(int argc, char **argv)
{
    static record_setup s;
    static unsigned char buf[TLS12_EXPLICIT + MAX_PAYLOAD + TAG_LEN];
    EVP_CIPHER_CTX *ctx;
    const char *pq;
    long n, done = 0;
    struct timespec a, b;
    double secs;

    if (argc != 7) {
        fprintf(stderr, "usage: record_bench CIPHER QUERY BYTES tls13|tls12|seq|stream enc|dec COUNT|-SECONDS\n");
        return 2;
    }
    pq = argv[2][0] != '\0' ? argv[2] : NULL;
    s.bytes = strtol(argv[3], NULL, 10);
    s.mode = argv[4];
    s.enc = strcmp(argv[5], "enc") == 0;
    n = strtol(argv[6], NULL, 10);
    s.cipher = EVP_CIPHER_fetch(NULL, argv[1], pq);
    if (s.cipher == NULL || s.bytes < 0 || s.bytes > MAX_PAYLOAD || n == 0
        || (strcmp(s.mode, "tls13") != 0 && strcmp(s.mode, "tls12") != 0 && strcmp(s.mode, "seq") != 0
            && strcmp(s.mode, "stream") != 0)) {
        fprintf(stderr, "record_bench: bad arguments or no cipher %s (%s)\n", argv[1], pq ? pq : "-");
        return 2;
    }
    s.gcm = EVP_CIPHER_get_mode(s.cipher) == EVP_CIPH_GCM_MODE;
    for (int i = 0; i < 32; i++)
        s.key[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < 12; i++)
        s.iv[i] = (unsigned char)(0xa0 + i);
    memcpy(s.hdr, "\x17\x03\x03\x00\x20", 5);
    memcpy(s.aad12, "\0\0\0\0\0\0\0\1\x17\x03\x03", 11);
    if (!make_record(&s) || (ctx = EVP_CIPHER_CTX_new()) == NULL) {
        fprintf(stderr, "record_bench: cannot make the records\n");
        ERR_print_errors_fp(stderr);
        return 1;
    }
    if (strcmp(s.mode, "tls12") == 0 ? !set_tls12_keys(ctx, &s, s.enc)
                                     : !EVP_CipherInit_ex(ctx, s.cipher, NULL, s.key, s.iv, s.enc)) {
        fprintf(stderr, "record_bench: cannot set up the context\n");
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (;;) {
        for (int i = 0; i < 1000 && (n < 0 || done < n); i++, done++)
            if (!one_record(ctx, &s, buf)) {
                fprintf(stderr, "record_bench: record %ld failed\n", done);
                ERR_print_errors_fp(stderr);
                return 1;
            }
        clock_gettime(CLOCK_MONOTONIC, &b);
        secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        if (n > 0 ? done >= n : secs >= (double)-n)
            break;
    }
    printf("%s %s %ld B %s %s: %ld records, %.1f ns per record\n", argv[1], pq != NULL ? pq : "-",
           s.bytes, s.mode, argv[5], done, secs * 1e9 / (double)done);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(s.cipher);
    return 0;
}
