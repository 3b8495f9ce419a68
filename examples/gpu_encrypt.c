/* SPDX-License-Identifier: Apache-2.0 */
/* Example: encrypt 1 GiB already in GPU memory with AES-256-GCM through EVP (gpuprov device mode). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

/*
 * usage: gpu_encrypt [MiB]   (default 1024; OPENSSL_MODULES names the directory holding gpuprov.so)
 * Encrypts a GPU buffer with AES-256-GCM through gpuprov in device mode, decrypts it and checks the
 * round trip, then does what a program without gpuprov does (copy to the host, the default
 * provider, copy back) and checks that both give the same ciphertext and tag. Prints GB/s of each.
 */

#define UPDATE_BYTES ((size_t)256 << 20)   /* EVP lengths are ints: updates of at most 2 GiB - 1 */

#define CUDA(call)                                                                                  \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "gpu_encrypt: %s: %s\n", #call, cudaGetErrorString(e_));               \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/*
 * The gpuprov way: `in` and `out` are device pointers; the key, IV and tag are host memory. All
 * it takes is the "gpuprov-memory" parameter; the rest is the EVP code any program has.
 */
static int gcm_on_gpu(int enc, const unsigned char *key, const unsigned char *iv, const unsigned char *in,
                      unsigned char *out, size_t len, unsigned char tag[16])
{
    EVP_CIPHER *aes = EVP_CIPHER_fetch(NULL, "AES-256-GCM", "provider=gpuprov");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    OSSL_PARAM device[] = { OSSL_PARAM_END, OSSL_PARAM_END };
    unsigned char last[16];
    int n, ok;

    device[0] = OSSL_PARAM_construct_utf8_string("gpuprov-memory", "device", 0);
    ok = aes != NULL && ctx != NULL && EVP_CipherInit_ex2(ctx, aes, key, iv, enc, device);

    if (ok && !enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tag);
    for (size_t off = 0; ok && off < len; off += UPDATE_BYTES)
        ok = EVP_CipherUpdate(ctx, out + off, &n, in + off, (int)(len - off < UPDATE_BYTES ? len - off : UPDATE_BYTES));
    ok = ok && EVP_CipherFinal_ex(ctx, last, &n);   /* decrypt: the tag check */
    if (ok && enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(aes);
    return ok;
}

/* Without gpuprov: the bytes go to the host, the default provider encrypts them, and back. */
static int gcm_via_host(const unsigned char *key, const unsigned char *iv, const unsigned char *in_dev,
                        unsigned char *out_dev, size_t len, unsigned char *host, unsigned char tag[16])
{
    EVP_CIPHER *aes = EVP_CIPHER_fetch(NULL, "AES-256-GCM", "provider=default");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n, ok = aes != NULL && ctx != NULL && EVP_EncryptInit_ex2(ctx, aes, key, iv, NULL);

    CUDA(cudaMemcpy(host, in_dev, len, cudaMemcpyDeviceToHost));
    for (size_t off = 0; ok && off < len; off += UPDATE_BYTES)
        ok = EVP_EncryptUpdate(ctx, host + off, &n, host + off, (int)(len - off < UPDATE_BYTES ? len - off : UPDATE_BYTES));
    ok = ok && EVP_EncryptFinal_ex(ctx, host, &n) && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag);
    CUDA(cudaMemcpy(out_dev, host, len, cudaMemcpyHostToDevice));
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(aes);
    return ok;
}

int main(int argc, char **argv)
{
    size_t len = (argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 20;
    unsigned char key[32], iv[12], tag[16], tag_host[16];
    unsigned char *data, *ct, *back, *host = malloc(len), *check = malloc(len);
    double t, t_enc, t_dec, t_host;

    if (len == 0 || host == NULL || check == NULL)
        return 1;
    if (OSSL_PROVIDER_load(NULL, "gpuprov") == NULL || OSSL_PROVIDER_load(NULL, "default") == NULL) {
        fprintf(stderr, "gpu_encrypt: cannot load gpuprov (set OPENSSL_MODULES to the directory holding gpuprov.so)\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (unsigned char)(i * 7 + 1);
    memset(iv, 0x5a, sizeof(iv));
    CUDA(cudaMalloc((void **)&data, len));
    CUDA(cudaMalloc((void **)&ct, len));
    CUDA(cudaMalloc((void **)&back, len));
    for (size_t i = 0; i < len; i++)
        host[i] = (unsigned char)(i * 131 + (i >> 12));
    CUDA(cudaMemcpy(data, host, len, cudaMemcpyHostToDevice));

    /* A first small call opens the GPU (contexts, streams): not part of the figure. */
    if (!gcm_on_gpu(1, key, iv, data, ct, 4096, tag)) {
        fprintf(stderr, "gpu_encrypt: device mode failed\n");
        return 1;
    }
    t = now();
    if (!gcm_on_gpu(1, key, iv, data, ct, len, tag))
        return fprintf(stderr, "gpu_encrypt: encryption failed\n"), 1;
    t_enc = now() - t;
    t = now();
    if (!gcm_on_gpu(0, key, iv, ct, back, len, tag))
        return fprintf(stderr, "gpu_encrypt: decryption failed (tag)\n"), 1;
    t_dec = now() - t;
    CUDA(cudaMemcpy(check, back, len, cudaMemcpyDeviceToHost));
    if (memcmp(check, host, len) != 0)
        return fprintf(stderr, "gpu_encrypt: the round trip changed the data\n"), 1;
    /* Without gpuprov, into `back`: the same ciphertext and tag. */
    t = now();
    if (!gcm_via_host(key, iv, data, back, len, host, tag_host))
        return fprintf(stderr, "gpu_encrypt: the default provider failed\n"), 1;
    t_host = now() - t;
    CUDA(cudaMemcpy(check, back, len, cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(host, ct, len, cudaMemcpyDeviceToHost));
    if (memcmp(check, host, len) != 0 || memcmp(tag, tag_host, 16) != 0)
        return fprintf(stderr, "gpu_encrypt: gpuprov and the default provider disagree\n"), 1;
    printf("AES-256-GCM on %zu MiB of GPU memory, checked: round trip and the default provider's bytes\n", len >> 20);
    printf("  gpuprov device mode: encrypt %.1f GB/s, decrypt %.1f GB/s\n", len / t_enc / 1e9, len / t_dec / 1e9);
    printf("  without gpuprov (copy to host, default provider on one core, copy back): %.1f GB/s\n", len / t_host / 1e9);
    printf("  encrypt speed-up: %.1fx\n", t_host / t_enc);
    cudaFree(data);
    cudaFree(ct);
    cudaFree(back);
    free(host);
    free(check);
    return 0;
}
