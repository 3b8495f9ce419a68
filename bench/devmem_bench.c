/* SPDX-License-Identifier: Apache-2.0 */
/* Device-mode benchmark: EVP on data already in GPU memory (gpuprov-memory = "device"), in GB/s. */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include "cuda_check.h"

/*
 * Three measurements, each checked first against the default provider on host copies of the same
 * bytes (a benchmark of wrong answers is worthless):
 *   1. large: one context encrypts a --buffer-mib device buffer as one message, in updates of each
 *      --updates size (MiB), IV-only re-init per message, Final and GET_TAG (AEAD); GB/s of data
 *      over --seconds (--in-place: the timed messages write over their input, after the check).
 *      bench/devmem.sh puts kernel_bench's raw-kernel figure beside each row.
 *   2. threads: --threads threads, each with its own context and device region, encrypt
 *      --msg-kib messages synchronously as a TLS record would be (IV re-init, 13 bytes of host AAD,
 *      one device-memory update, Final, GET_TAG); GB/s in total. --thread-streams: each thread's
      context is stream-ordered on a non-blocking stream of its own (GET_TAG waits for the message,
      so each call is still synchronous to the thread), beside the synchronous figure.
 *   3. stream (--stream U, MiB; 0: off): stream-ordered device mode (gpuprov-cuda-stream,
 *      docs/config.md): one context encrypts the --buffer-mib buffer as one message in updates of U
 *      MiB queued on one non-blocking CUDA stream, Final, then GET_TAG (AEAD; it waits for the
 *      message) or a cudaStreamSynchronize (CTR); GB/s over --seconds, printed beside the same cell
 *      run synchronously (issue 51's targets: AES-256-GCM >= 150, AES-128-CTR and
 *      ChaCha20-Poly1305 >= 250 GB/s at 256 MiB in 1 MiB updates on an H200).
 * Output: a table, and CSV lines (DEVMEM_LARGE, DEVMEM_THREADS, DEVMEM_STREAM) that
 * bench/devmem.sh reads.
 */

#ifndef GP_BUILD_MODULE_DIR
# define GP_BUILD_MODULE_DIR "build/provider"
#endif
#define AAD_LEN 13

static OSSL_LIB_CTX *libctx;
static double seconds = 2.0;
static int in_place;             /* --in-place: the large cell's timed updates write over their input */
static int thread_streams;       /* --thread-streams: each thread's messages ordered on its own stream */

static void die(const char *what)
{
    fprintf(stderr, "devmem_bench: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int is_aead(const char *cipher)
{
    return strstr(cipher, "GCM") != NULL || strstr(cipher, "Poly1305") != NULL;
}

/* A gpuprov context of `cipher` in device mode, key set (IV per message); ordered on `stream`
 * unless it is NULL (synchronous). */
static EVP_CIPHER_CTX *device_ctx_on(const char *cipher, const unsigned char *key, cudaStream_t stream)
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(libctx, cipher, "provider=gpuprov");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    uint64_t sv = (uint64_t)(uintptr_t)stream;
    OSSL_PARAM dev[3] = { OSSL_PARAM_END, OSSL_PARAM_END, OSSL_PARAM_END };

    dev[0] = OSSL_PARAM_construct_utf8_string("gpuprov-memory", "device", 0);
    dev[1] = OSSL_PARAM_construct_uint64("gpuprov-cuda-stream", &sv);
    if (c == NULL || ctx == NULL || EVP_EncryptInit_ex2(ctx, c, key, NULL, dev) != 1)
        die("cannot make a device-mode context");
    EVP_CIPHER_free(c);
    return ctx;
}

static EVP_CIPHER_CTX *device_ctx(const char *cipher, const unsigned char *key)
{
    return device_ctx_on(cipher, key, NULL);
}

/* One message: IV re-init, AAD (host, may be NULL), `len` bytes of device memory in updates of
 * `step`, Final, tag. */
static void message(EVP_CIPHER_CTX *ctx, const char *cipher, const unsigned char *iv, const unsigned char *aad,
                    const unsigned char *in, unsigned char *out, size_t len, size_t step, unsigned char tag[16])
{
    unsigned char fin[16];
    int outl;

    if (EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL) != 1)
        die("re-init failed");
    if (aad != NULL && EVP_EncryptUpdate(ctx, NULL, &outl, aad, AAD_LEN) != 1)
        die("AAD failed");
    for (size_t off = 0; off < len; off += step)
        if (EVP_EncryptUpdate(ctx, out + off, &outl, in + off, (int)(len - off < step ? len - off : step)) != 1)
            die("device-mode update failed");
    if (EVP_EncryptFinal_ex(ctx, fin, &outl) != 1)
        die("Final failed");
    if (is_aead(cipher) && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1)
        die("GET_TAG failed");
}

/* The default provider on host copies of in and out: the same ciphertext and tag. */
static void verify(const char *cipher, const unsigned char *key, const unsigned char *iv, const unsigned char *aad,
                   const unsigned char *in_dev, const unsigned char *out_dev, size_t len, const unsigned char tag[16])
{
    unsigned char *in = malloc(len), *out = malloc(len), *ref = malloc(len), rtag[16], fin[16];
    EVP_CIPHER *c = EVP_CIPHER_fetch(libctx, cipher, "provider=default");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl;

    if (in == NULL || out == NULL || ref == NULL || c == NULL || ctx == NULL)
        die("out of memory");
    CHECK(cudaMemcpy(in, in_dev, len, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(out, out_dev, len, cudaMemcpyDeviceToHost));
    if (EVP_EncryptInit_ex2(ctx, c, key, iv, NULL) != 1
        || (aad != NULL && EVP_EncryptUpdate(ctx, NULL, &outl, aad, AAD_LEN) != 1)
        || EVP_EncryptUpdate(ctx, ref, &outl, in, (int)len) != 1 || EVP_EncryptFinal_ex(ctx, fin, &outl) != 1
        || (is_aead(cipher) && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, rtag) != 1))
        die("the default provider failed");
    if (memcmp(out, ref, len) != 0 || (is_aead(cipher) && memcmp(tag, rtag, 16) != 0)) {
        fprintf(stderr, "devmem_bench: %s: device mode's output differs from the default provider's\n", cipher);
        exit(1);
    }
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    free(in);
    free(out);
    free(ref);
}

static void fill_random(unsigned char *dev, size_t len)
{
    unsigned char *h = malloc(len);
    uint64_t x = 0x9e3779b97f4a7c15u;

    if (h == NULL)
        die("out of memory");
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[i] = (unsigned char)x;
    }
    CHECK(cudaMemcpy(dev, h, len, cudaMemcpyHostToDevice));
    free(h);
}

static void bench_large(const char *gpu, const char *cipher, size_t buf_mib, size_t upd_mib)
{
    const size_t len = buf_mib << 20, step = upd_mib << 20;
    unsigned char key[32] = { 1, 2, 3 }, iv[16] = { 4 }, tag[16];
    unsigned char *in, *out;
    EVP_CIPHER_CTX *ctx = device_ctx(cipher, key);
    double t0, t;
    long n = 0;

    CHECK(cudaMalloc((void **)&in, len));
    CHECK(cudaMalloc((void **)&out, len));
    fill_random(in, len);
    message(ctx, cipher, iv, NULL, in, out, len, step, tag);
    verify(cipher, key, iv, NULL, in, out, len, tag);
    t0 = now_s();
    do {
        iv[1]++;
        message(ctx, cipher, iv, NULL, in, in_place ? in : out, len, step, tag);
        n++;
    } while ((t = now_s() - t0) < seconds);
    printf("%-18s %8zu MiB buffer %6zu MiB updates%s %10.1f GB/s\n", cipher, buf_mib, upd_mib,
           in_place ? " in place" : "", (double)n * (double)len / t / 1e9);
    printf("DEVMEM_LARGE,%s,%s,%zu,%zu,%.2f\n", gpu, cipher, buf_mib, upd_mib, (double)n * (double)len / t / 1e9);
    EVP_CIPHER_CTX_free(ctx);
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
}

/*
 * Stream-ordered: the buffer as one message in updates of `upd_mib` queued on one stream; each
 * message ends with GET_TAG (AEAD), which waits for it, or a stream synchronise (CTR), so every
 * timed message has finished when the clock is read. Beside it, the same cell synchronously.
 */
static double time_messages(EVP_CIPHER_CTX *ctx, const char *cipher, cudaStream_t stream, unsigned char *in,
                            unsigned char *out, size_t len, size_t step, unsigned char iv[16])
{
    unsigned char tag[16];
    double t0 = now_s(), t;
    long n = 0;

    do {
        iv[1]++;
        message(ctx, cipher, iv, NULL, in, out, len, step, tag);
        if (stream != NULL && !is_aead(cipher))
            CHECK(cudaStreamSynchronize(stream));
        n++;
    } while ((t = now_s() - t0) < seconds);
    return (double)n * (double)len / t / 1e9;
}

static void bench_stream(const char *gpu, const char *cipher, size_t buf_mib, size_t upd_mib)
{
    const size_t len = buf_mib << 20, step = upd_mib << 20;
    unsigned char key[32] = { 1, 2, 3 }, iv[16] = { 4 }, tag[16];
    unsigned char *in, *out;
    cudaStream_t stream;
    EVP_CIPHER_CTX *ctx, *sync_ctx = device_ctx(cipher, key);
    double gbs, sync_gbs;

    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ctx = device_ctx_on(cipher, key, stream);
    CHECK(cudaMalloc((void **)&in, len));
    CHECK(cudaMalloc((void **)&out, len));
    fill_random(in, len);
    CHECK(cudaMemset(out, 0, len));
    message(ctx, cipher, iv, NULL, in, out, len, step, tag);
    CHECK(cudaStreamSynchronize(stream));
    verify(cipher, key, iv, NULL, in, out, len, tag);
    sync_gbs = time_messages(sync_ctx, cipher, NULL, in, out, len, step, iv);
    gbs = time_messages(ctx, cipher, stream, in, out, len, step, iv);
    printf("%-18s %8zu MiB buffer %6zu MiB updates on one stream %10.1f GB/s (synchronous %.1f GB/s)\n", cipher,
           buf_mib, upd_mib, gbs, sync_gbs);
    printf("DEVMEM_STREAM,%s,%s,%zu,%zu,%.2f,%.2f\n", gpu, cipher, buf_mib, upd_mib, gbs, sync_gbs);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_CTX_free(sync_ctx);
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaStreamDestroy(stream));
}

typedef struct worker {
    pthread_t th;
    const char *cipher;
    unsigned char *in, *out;     /* this thread's device region */
    size_t len;
    _Atomic int *go, *stop;
    cudaStream_t stream;         /* NULL: synchronous device mode */
    long ops;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    unsigned char key[32] = { 7 }, iv[16] = { 8 }, aad[AAD_LEN] = { 9 }, tag[16];
    EVP_CIPHER_CTX *ctx = device_ctx_on(w->cipher, key, w->stream);

    iv[2] = (unsigned char)(uintptr_t)w;   /* any IV: the output is not kept */
    message(ctx, w->cipher, iv, aad, w->in, w->out, w->len, w->len, tag);   /* warm */
    while (!atomic_load(w->go))
        ;
    while (!atomic_load(w->stop)) {
        iv[1]++;
        message(ctx, w->cipher, iv, aad, w->in, w->out, w->len, w->len, tag);
        w->ops++;
    }
    EVP_CIPHER_CTX_free(ctx);
    return NULL;
}

static void bench_threads(const char *gpu, const char *cipher, int nthreads, size_t msg_kib, int streams)
{
    const size_t len = msg_kib << 10;
    worker *w = calloc((size_t)nthreads, sizeof(*w));
    unsigned char *in, *out, key[32] = { 7 }, iv[16] = { 8 }, aad[AAD_LEN] = { 9 }, tag[16];
    _Atomic int go = 0, stop = 0;
    cudaStream_t check_stream = NULL;   /* the check runs the way the cell does */
    EVP_CIPHER_CTX *ctx;
    double t0, t;
    long ops = 0;

    if (w == NULL)
        die("out of memory");
    if (streams)
        CHECK(cudaStreamCreateWithFlags(&check_stream, cudaStreamNonBlocking));
    ctx = device_ctx_on(cipher, key, check_stream);
    CHECK(cudaMalloc((void **)&in, len * (size_t)nthreads));
    CHECK(cudaMalloc((void **)&out, len * (size_t)nthreads));
    fill_random(in, len * (size_t)nthreads);
    message(ctx, cipher, iv, aad, in, out, len, len, tag);
    if (check_stream != NULL)
        CHECK(cudaStreamSynchronize(check_stream));
    verify(cipher, key, iv, aad, in, out, len, tag);
    EVP_CIPHER_CTX_free(ctx);
    if (check_stream != NULL)
        CHECK(cudaStreamDestroy(check_stream));
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker){ .cipher = cipher, .in = in + (size_t)i * len, .out = out + (size_t)i * len, .len = len,
                         .go = &go, .stop = &stop };
        if (streams)
            CHECK(cudaStreamCreateWithFlags(&w[i].stream, cudaStreamNonBlocking));
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0)
            die("pthread_create failed");
    }
    t0 = now_s();
    atomic_store(&go, 1);
    while ((t = now_s() - t0) < seconds) {
        struct timespec ms = { 0, 10 * 1000 * 1000 };

        nanosleep(&ms, NULL);
    }
    atomic_store(&stop, 1);
    t = now_s() - t0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].th, NULL);
        ops += w[i].ops;
        if (w[i].stream != NULL)
            CHECK(cudaStreamDestroy(w[i].stream));
    }
    printf("%-18s %3d threads x %zu KiB messages, %s: %10.1f GB/s (%.0f messages/s)\n", cipher, nthreads,
           msg_kib, streams ? "each thread on its stream" : "synchronous", (double)ops * (double)len / t / 1e9,
           (double)ops / t);
    printf("%s,%s,%s,%d,%zu,%.2f\n", streams ? "DEVMEM_THREAD_STREAMS" : "DEVMEM_THREADS", gpu, cipher, nthreads,
           msg_kib, (double)ops * (double)len / t / 1e9);
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    free(w);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "module-dir", required_argument, NULL, 'm' }, { "buffer-mib", required_argument, NULL, 'b' },
        { "updates", required_argument, NULL, 'u' },    { "ciphers", required_argument, NULL, 'c' },
        { "seconds", required_argument, NULL, 's' },    { "threads", required_argument, NULL, 't' },
        { "msg-kib", required_argument, NULL, 'k' },    { "in-place", no_argument, NULL, 'i' },
        { "stream", required_argument, NULL, 'S' },      { "thread-streams", no_argument, NULL, 'T' },
        { NULL, 0, NULL, 0 },
    };
    const char *dir = getenv("OPENSSL_MODULES") != NULL ? getenv("OPENSSL_MODULES") : GP_BUILD_MODULE_DIR;
    char updates[256] = "1,4,16,64,256", ciphers[256] = "AES-256-GCM,AES-128-CTR,ChaCha20-Poly1305";
    size_t buf_mib = 256, msg_kib = 16, stream_mib = 0;
    int nthreads = 16, o;
    struct cudaDeviceProp prop;
    OSSL_PROVIDER *dflt, *gpuprov;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': dir = optarg; break;
        case 'b': buf_mib = strtoul(optarg, NULL, 10); break;
        case 'u': snprintf(updates, sizeof(updates), "%s", optarg); break;
        case 'c': snprintf(ciphers, sizeof(ciphers), "%s", optarg); break;
        case 's': seconds = atof(optarg); break;
        case 't': nthreads = atoi(optarg); break;
        case 'k': msg_kib = strtoul(optarg, NULL, 10); break;
        case 'i': in_place = 1; break;
        case 'S': stream_mib = strtoul(optarg, NULL, 10); break;
        case 'T': thread_streams = 1; break;
        default:
            fprintf(stderr, "usage: devmem_bench [--module-dir DIR] [--buffer-mib 256] [--updates 1,4,16,64,256] "
                            "[--ciphers A,B] [--seconds 2] [--threads 16 (0: none)] [--msg-kib 16] [--in-place] "
                            "[--stream 1 (MiB updates on one stream; 0: none)] [--thread-streams]\n");
            return 2;
        }
    }
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if ((libctx = OSSL_LIB_CTX_new()) == NULL || !OSSL_PROVIDER_set_default_search_path(libctx, dir)
        || (dflt = OSSL_PROVIDER_load(libctx, "default")) == NULL
        || (gpuprov = OSSL_PROVIDER_load(libctx, "gpuprov")) == NULL)
        die("cannot load gpuprov and default");
    printf("devmem_bench: %s, gpuprov from %s, %.1f s a cell, every cell checked against the default provider\n",
           prop.name, dir, seconds);
    for (char *cs = ciphers, *c; (c = strtok_r(cs, ",", &cs)) != NULL;) {
        char list[256];

        if (stream_mib > 0)
            bench_stream(prop.name, c, buf_mib, stream_mib);
        snprintf(list, sizeof(list), "%s", updates);
        for (char *us = list, *u; (u = strtok_r(us, ",", &us)) != NULL;)
            bench_large(prop.name, c, buf_mib, strtoul(u, NULL, 10));
    }
    if (nthreads > 0)
        bench_threads(prop.name, "AES-256-GCM", nthreads, msg_kib, 0);
    if (nthreads > 0 && thread_streams)
        bench_threads(prop.name, "AES-256-GCM", nthreads, msg_kib, 1);
    /* gpuprov's stats lines (GPUPROV_STATS) print when it unloads. */
    OSSL_PROVIDER_unload(gpuprov);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(libctx);
    return 0;
}
