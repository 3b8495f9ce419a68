/* SPDX-License-Identifier: Apache-2.0 */
/* Nanoseconds per EVP_EncryptUpdate of N bytes on one context: the loop of `openssl speed` 3.0.13. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <openssl/evp.h>

/*
 * usage: update_bench [cipher] [property query] [bytes]   e.g. update_bench ChaCha20-Poly1305
 * provider=gpuprov 16 (load gpuprov through OPENSSL_CONF=config/gpuprov.cnf). Runs 2 s. The
 * per-call cost of a small update is where a provider's own layers show against the default's.
 */
int main(int argc, char **argv)
{
    const char *alg = argc > 1 ? argv[1] : "AES-256-GCM";
    const char *pq = argc > 2 && argv[2][0] != '\0' ? argv[2] : NULL;
    long len = argc > 3 ? strtol(argv[3], NULL, 10) : 16;
    static unsigned char key[32], iv[16], buf[16384];
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, alg, pq);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    struct timespec a, b;
    long calls = 0;
    int outl;
    double s;

    if (len < 1 || len > (long)sizeof(buf)) {
        fprintf(stderr, "update_bench: bytes must be 1..%zu\n", sizeof(buf));
        return 2;
    }
    if (c == NULL || ctx == NULL || !EVP_EncryptInit_ex(ctx, c, NULL, key, iv)) {
        fprintf(stderr, "update_bench: cannot set up %s (%s)\n", alg, pq != NULL ? pq : "no query");
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        for (int i = 0; i < 100000; i++)
            if (!EVP_EncryptUpdate(ctx, buf, &outl, buf, (int)len)) {
                fprintf(stderr, "update_bench: update failed\n");
                return 1;
            }
        calls += 100000;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while (b.tv_sec - a.tv_sec < 2);
    s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%s %s %ld B: %.1f ns per update\n", alg, pq != NULL ? pq : "-", len, s * 1e9 / (double)calls);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    return 0;
}
