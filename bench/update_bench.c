/* SPDX-License-Identifier: Apache-2.0 */
/* Nanoseconds per EVP_EncryptUpdate of N bytes on one context: the loop of `openssl speed` 3.0.13. */
#include <alloca.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <openssl/evp.h>

/*
 * usage: update_bench [cipher] [property query] [bytes] [buffer offset] [heap pad] [seconds]
 *                     [stack shift]
 * e.g. update_bench ChaCha20-Poly1305 provider=gpuprov 16 (load gpuprov through
 * OPENSSL_CONF=config/gpuprov.cnf). Runs 2 s by default. The per-call cost of a small update is
 * where a provider's own layers show against the default's.
 *
 * The buffer offset (0..4095 bytes past a 4096-aligned buffer) and the heap pad (bytes allocated
 * before the context, which moves where the providers' contexts land) make the placement a
 * variable: a sweep over them shows how much of a difference between two builds is where their
 * data happened to lie (store-forwarding and 4K-aliasing stalls) rather than their code. The stack
 * shift (0..240, a multiple of 16) moves the stack the calls run on: the providers' assembly keeps
 * its scratch there, and a deeper call path (a provider calling another) moves it too.
 */

/* n updates of len bytes on ctx, in place; 0 if one fails. */
static __attribute__((noinline)) int update_loop(EVP_CIPHER_CTX *ctx, unsigned char *buf, int len, int n)
{
    int outl;

    for (int i = 0; i < n; i++)
        if (!EVP_EncryptUpdate(ctx, buf, &outl, buf, len))
            return 0;
    return 1;
}

/* update_loop, called with the stack pointer lowered by shift bytes. */
static __attribute__((noinline)) int shifted_update_loop(long shift, EVP_CIPHER_CTX *ctx, unsigned char *buf,
                                                         int len, int n)
{
    volatile unsigned char *below = alloca((size_t)shift + 1);

    below[0] = 0;                               /* keeps the allocation */
    return update_loop(ctx, buf, len, n);
}

int main(int argc, char **argv)
{
    const char *alg = argc > 1 ? argv[1] : "AES-256-GCM";
    const char *pq = argc > 2 && argv[2][0] != '\0' ? argv[2] : NULL;
    long len = argc > 3 ? strtol(argv[3], NULL, 10) : 16;
    long offset = argc > 4 ? strtol(argv[4], NULL, 10) : 0;
    long pad = argc > 5 ? strtol(argv[5], NULL, 10) : 0;
    double seconds = argc > 6 ? strtod(argv[6], NULL) : 2.0;
    long shift = argc > 7 ? strtol(argv[7], NULL, 10) : 0;
    static unsigned char key[32], iv[16], area[16384 + 2 * 4096];
    unsigned char *buf;
    void *heap_pad = pad > 0 && pad <= (1L << 20) ? malloc((size_t)pad) : NULL;
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, alg, pq);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    struct timespec a, b;
    long calls = 0;
    double s;

    if (len < 1 || len > 16384 || offset < 0 || offset > 4095 || pad < 0 || pad > (1L << 20)
        || !(seconds > 0 && seconds <= 60) || shift < 0 || shift > 240 || shift % 16 != 0) {
        fprintf(stderr, "update_bench: bytes 1..16384, offset 0..4095, pad 0..1048576, seconds (0, 60], "
                        "stack shift 0..240 in 16s\n");
        return 2;
    }
    buf = area + (4096 - (uintptr_t)area % 4096) + offset;
    if (c == NULL || ctx == NULL || !EVP_EncryptInit_ex(ctx, c, NULL, key, iv)) {
        fprintf(stderr, "update_bench: cannot set up %s (%s)\n", alg, pq != NULL ? pq : "no query");
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        if (!shifted_update_loop(shift, ctx, buf, (int)len, 100000)) {
            fprintf(stderr, "update_bench: update failed\n");
            return 1;
        }
        calls += 100000;
        clock_gettime(CLOCK_MONOTONIC, &b);
        s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    } while (s < seconds);
    printf("%s %s %ld B (offset %ld, pad %ld, stack %ld): %.1f ns per update\n", alg, pq != NULL ? pq : "-",
           len, offset, pad, shift, s * 1e9 / (double)calls);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    free(heap_pad);
    return 0;
}
