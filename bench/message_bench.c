/* SPDX-License-Identifier: Apache-2.0 */
/* GB/s of one thread encrypting N-byte AEAD messages one after another, in the call patterns of the openssl speed releases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

/*
 * usage: message_bench CIPHER BYTES SECONDS PATTERN [OPS]
 *   PATTERN stream   one message, an update of BYTES after another (speed 3.0.13, and 3.x's CTR
 *                    and ChaCha20-Poly1305)
 *           iv       a message per op: init with the IV only, update, final, get tag (speed
 *                    3.0.13 -aead without its AAD)
 *           key-iv   a message per op as speed 3.0.16+/3.5 runs AES-GCM: SET_IVLEN ctrl, init with
 *                    key and IV, update, final
 *           ivlen-iv the same without the key; key-only-iv: with the key, without SET_IVLEN
 *           speed35  what OpenSSL 3.5's `speed -evp CIPHER` does, set-up included (apps/speed.c:
 *                    init without key, PADDING 0, which EVP then sends again at every init): for
 *                    GCM its EVP_Update_loop_aead_enc (SET_IVLEN, key and IV, update, Final; no
 *                    GET_TAG), for any other mode, ChaCha20-Poly1305's 0 among them, EVP_Update_loop
 *                    (one message streamed)
 *           speed35-aead  the same with `-aead`: the 13-byte AAD update before the data
 *           aead35   EVP_Update_loop_aead_enc with -aead for any cipher, as speed 3.5 would run a
 *                    non-GCM AEAD mode: SET_IVLEN, SET_TAG 16 (not for GCM), key and IV, AAD, update,
 *                    Final
 *   OPS     run exactly this many operations (a fixed count, for callgrind) instead of SECONDS
 * Load gpuprov through OPENSSL_CONF (config/gpuprov.cnf). The same binary runs under any 3.x
 * libcrypto (LD_LIBRARY_PATH), which separates the call pattern from the library's release.
 */

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *alg = argc > 1 ? argv[1] : "AES-256-GCM";
    long bytes = argc > 2 ? strtol(argv[2], NULL, 10) : 16 << 20;
    double seconds = argc > 3 ? strtod(argv[3], NULL) : 2.0;
    const char *pattern = argc > 4 ? argv[4] : "stream";
    int set_ivlen = strcmp(pattern, "key-iv") == 0 || strcmp(pattern, "ivlen-iv") == 0;
    int with_key = strcmp(pattern, "key-iv") == 0 || strcmp(pattern, "key-only-iv") == 0;
    int speed35 = strncmp(pattern, "speed35", 7) == 0, aead35 = strcmp(pattern, "aead35") == 0;
    int stream = strcmp(pattern, "stream") == 0;
    int with_aad = aead35 || strcmp(pattern, "speed35-aead") == 0;
    int set_tag = 0, get_tag = !speed35 && !aead35;
    long ops = argc > 5 ? strtol(argv[5], NULL, 10) : 0;
    static unsigned char key[32], iv[16] = { 1 }, aad[13] = { 0xcc };
    unsigned char tag[16], *buf;
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, alg, NULL);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    long n = 0;
    int outl;
    double t0, t;

    if (speed35 || aead35) {
        int gcm = c != NULL && EVP_CIPHER_get_mode(c) == EVP_CIPH_GCM_MODE;

        stream = speed35 && !gcm;
        set_ivlen = with_key = !stream;
        set_tag = aead35 && !gcm;
        with_aad = with_aad && !stream;
    }
    if (bytes < 1 || bytes > (1L << 30) || !(seconds > 0) || ops < 0
        || (with_aad && c != NULL && !(EVP_CIPHER_get_flags(c) & EVP_CIPH_FLAG_AEAD_CIPHER))   /* as speed's -aead */
        || (!stream && !set_ivlen && !with_key && strcmp(pattern, "iv") != 0)) {
        fprintf(stderr, "usage: message_bench CIPHER BYTES SECONDS "
                "stream|iv|key-iv|ivlen-iv|key-only-iv|speed35|speed35-aead|aead35 [OPS]\n");
        return 2;
    }
    buf = aligned_alloc(4096, ((size_t)bytes + 4095) / 4096 * 4096);
    if (buf == NULL || c == NULL || ctx == NULL
        || ((speed35 || aead35)
            ? !EVP_CipherInit_ex(ctx, c, NULL, NULL, NULL, 1) || !EVP_CIPHER_CTX_set_padding(ctx, 0)
              || (stream && !EVP_CipherInit_ex(ctx, NULL, NULL, key, iv, -1))
            : !EVP_EncryptInit_ex(ctx, c, NULL, key, iv))) {
        fprintf(stderr, "message_bench: cannot set up %s\n", alg);
        return 1;
    }
    memset(buf, 0, (size_t)bytes);
    t0 = now();
    do {
        if (!stream) {
            if ((set_ivlen && !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, 12, NULL))
                || (set_tag && !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, NULL))
                || !EVP_CipherInit_ex(ctx, NULL, NULL, with_key ? key : NULL, iv, -1)
                || (with_aad && !EVP_EncryptUpdate(ctx, NULL, &outl, aad, sizeof(aad))))
                return 1;
        }
        if (!EVP_EncryptUpdate(ctx, buf, &outl, buf, (int)bytes))
            return 1;
        if (!stream && (!EVP_EncryptFinal_ex(ctx, buf, &outl)
                        || (get_tag && !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag))))
            return 1;
        n++;
        t = ops > 0 ? 0.0 : now() - t0;
    } while (ops > 0 ? n < ops : t < seconds);
    t = now() - t0;
    printf("%s %s %s %ld B: %.2f GB/s (%ld ops, %.1f us each)\n", OpenSSL_version(OPENSSL_VERSION), alg, pattern,
           bytes, (double)n * (double)bytes / t / 1e9, n, t * 1e6 / (double)n);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    free(buf);
    return 0;
}
