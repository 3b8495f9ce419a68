/* SPDX-License-Identifier: Apache-2.0 */
/* GB/s of one thread encrypting N-byte AEAD messages one after another, in the call patterns of the openssl speed releases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

/*
 * usage: message_bench CIPHER BYTES SECONDS PATTERN
 *   PATTERN stream   one message, an update of BYTES after another (speed 3.0.13, and 3.x's CTR
 *                    and ChaCha20-Poly1305)
 *           iv       a message per op: init with the IV only, update, final, get tag (speed
 *                    3.0.13 -aead without its AAD)
 *           key-iv   a message per op as speed 3.0.16+/3.5 runs AES-GCM: SET_IVLEN ctrl, init with
 *                    key and IV, update, final
 *           ivlen-iv the same without the key; key-only-iv: with the key, without SET_IVLEN
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
    int stream = strcmp(pattern, "stream") == 0;
    static unsigned char key[32], iv[12] = { 1 };
    unsigned char tag[16], *buf;
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, alg, NULL);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    long n = 0;
    int outl;
    double t0, t;

    if (bytes < 1 || bytes > (1L << 30) || !(seconds > 0) || (!stream && !set_ivlen && !with_key && strcmp(pattern, "iv") != 0)) {
        fprintf(stderr, "usage: message_bench CIPHER BYTES SECONDS stream|iv|key-iv|ivlen-iv|key-only-iv\n");
        return 2;
    }
    buf = aligned_alloc(4096, ((size_t)bytes + 4095) / 4096 * 4096);
    if (buf == NULL || c == NULL || ctx == NULL || !EVP_EncryptInit_ex(ctx, c, NULL, key, iv)) {
        fprintf(stderr, "message_bench: cannot set up %s\n", alg);
        return 1;
    }
    memset(buf, 0, (size_t)bytes);
    t0 = now();
    do {
        if (!stream) {
            if ((set_ivlen && !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, sizeof(iv), NULL))
                || !EVP_EncryptInit_ex(ctx, NULL, NULL, with_key ? key : NULL, iv))
                return 1;
        }
        if (!EVP_EncryptUpdate(ctx, buf, &outl, buf, (int)bytes))
            return 1;
        if (!stream && (!EVP_EncryptFinal_ex(ctx, buf, &outl)
                        || !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag)))
            return 1;
        n++;
        t = now() - t0;
    } while (t < seconds);
    printf("%s %s %s %ld B: %.2f GB/s (%ld ops, %.1f us each)\n", OpenSSL_version(OPENSSL_VERSION), alg, pattern,
           bytes, (double)n * (double)bytes / t / 1e9, n, t * 1e6 / (double)n);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    free(buf);
    return 0;
}
