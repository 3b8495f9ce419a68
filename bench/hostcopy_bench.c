/* SPDX-License-Identifier: Apache-2.0 */
/* What a large update from pageable memory can cost on this host: copies, direct DMA, registration. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "batching/copy_crew.h"
#include "cuda_check.h"

/*
 * An EVP update hands gpuprov pageable memory; the GPU's DMA engines read and write only pinned
 * memory. The three ways across, each timed here for one buffer of SIZE bytes (the median of
 * --reps runs), so that the executor's choice and the bounds in bench/RESULTS.md ("What bounds a
 * lone caller") rest on this host's own figures:
 *   1. copy: memcpy between the caller's buffer and a pinned buffer, by T threads at once (each a
 *      contiguous share), in both directions; GB/s of the buffer and CPU seconds per GB (T x wall);
 *      and the same with the copy crew's streaming stores (gp_copy_streaming);
 *   2. direct: cudaMemcpy straight from and to pageable memory (the driver stages it itself);
 *   3. register: cudaHostRegister of the caller's (touched) buffer and cudaHostUnregister after,
 *      in ms per MiB, then the DMA rate from and to the registered buffer, one way and both ways
 *      at once (two streams).
 * The pinned arena's own DMA rate (cudaHostAlloc) is the reference. Output: a table, and one CSV
 * line per figure: HOSTCOPY,<what>,<bytes>,<threads>,<value>,<unit>.
 */

#define MAX_THREADS 64
#define MAX_REPS 64

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(const char *what, size_t bytes, int threads, double value, const char *unit)
{
    printf("HOSTCOPY,%s,%zu,%d,%.3f,%s\n", what, bytes, threads, value, unit);
}

/* ---- 1. copies by T threads, each its contiguous share, started together ---- */

typedef struct copier {
    pthread_t tid;
    pthread_barrier_t *start, *stop;
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
    int rounds;
    int streaming;               /* gp_copy_streaming instead of memcpy */
} copier;

static void *copier_main(void *arg)
{
    copier *c = arg;

    for (int r = 0; r < c->rounds; r++) {
        pthread_barrier_wait(c->start);
        if (c->streaming)
            gp_copy_streaming(c->dst, c->src, c->len);
        else
            memcpy(c->dst, c->src, c->len);
        pthread_barrier_wait(c->stop);
    }
    return NULL;
}

/* Median seconds of `reps` copies of `bytes` from src to dst by `threads` threads (the calling
 * thread times them; it copies nothing itself). */
static double copy_time(uint8_t *dst, const uint8_t *src, size_t bytes, int threads, int reps, int streaming)
{
    pthread_barrier_t start, stop;
    copier c[MAX_THREADS];
    double t[MAX_REPS];
    const size_t share = (bytes / (size_t)threads + 63) & ~(size_t)63;

    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&stop, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        const size_t off = share * (size_t)i < bytes ? share * (size_t)i : bytes;
        const size_t end = off + share < bytes ? off + share : bytes;

        c[i] = (copier){ .start = &start, .stop = &stop, .dst = dst + off, .src = src + off, .len = end - off,
                         .rounds = reps + 1, .streaming = streaming };
        pthread_create(&c[i].tid, NULL, copier_main, &c[i]);
    }
    for (int r = 0; r <= reps; r++) {   /* round 0 warms up */
        const double t0 = now_s();

        pthread_barrier_wait(&start);
        pthread_barrier_wait(&stop);
        if (r > 0)
            t[r - 1] = now_s() - t0;
    }
    for (int i = 0; i < threads; i++)
        pthread_join(c[i].tid, NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&stop);
    return median(t, reps);
}

/* ---- 2, 3: DMA ---- */

static double dma_time(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s, int reps)
{
    double t[MAX_REPS];

    CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CHECK(cudaStreamSynchronize(s));
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();

        CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        CHECK(cudaStreamSynchronize(s));
        t[r] = now_s() - t0;
    }
    return median(t, reps);
}

/* Both directions at once on two streams: seconds until both are done. */
static double dma_both_time(void *dev_in, const void *host_in, void *host_out, const void *dev_out, size_t bytes,
                            cudaStream_t a, cudaStream_t b, int reps)
{
    double t[MAX_REPS];

    for (int r = 0; r <= reps; r++) {
        const double t0 = now_s();

        CHECK(cudaMemcpyAsync(dev_in, host_in, bytes, cudaMemcpyHostToDevice, a));
        CHECK(cudaMemcpyAsync(host_out, dev_out, bytes, cudaMemcpyDeviceToHost, b));
        CHECK(cudaStreamSynchronize(a));
        CHECK(cudaStreamSynchronize(b));
        if (r > 0)
            t[r - 1] = now_s() - t0;
    }
    return median(t, reps);
}

static double register_time(void *p, size_t bytes, int reps)
{
    double t[MAX_REPS];

    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();

        CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
        CHECK(cudaHostUnregister(p));
        t[r] = now_s() - t0;
    }
    return median(t, reps);
}

static size_t parse_size(const char *s)
{
    char *end;
    size_t v = strtoull(s, &end, 10);

    if (*end == 'k' || *end == 'K')
        v <<= 10;
    else if (*end == 'm' || *end == 'M')
        v <<= 20;
    return v;
}

int main(int argc, char **argv)
{
    const char *sizes = argc > 1 ? argv[1] : "256k,1m,4m,16m,64m";
    const char *tlist = argc > 2 ? argv[2] : "1,2,4,8,16";
    const int reps = argc > 3 ? atoi(argv[3]) : 9;
    char *sz = strdup(sizes), *save = NULL;
    cudaStream_t a, b;

    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: hostcopy_bench [SIZES] [THREADS] [REPS <= %d]\n", MAX_REPS);
        return 2;
    }
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    printf("| bytes | what | threads | GB/s | CPU s/GB or ms/MiB |\n|---|---|---|---|---|\n");
    for (char *s = strtok_r(sz, ",", &save); s != NULL; s = strtok_r(NULL, ",", &save)) {
        const size_t n = parse_size(s);
        uint8_t *page_in = malloc(n), *page_out = malloc(n), *pin_in, *pin_out, *dev_in, *dev_out;
        char *tl = strdup(tlist), *tsave = NULL;
        const double gb = (double)n / 1e9, mib = (double)n / (1 << 20);

        if (page_in == NULL || page_out == NULL || tl == NULL) {
            fprintf(stderr, "hostcopy_bench: out of memory\n");
            return 1;
        }
        memset(page_in, 0x5a, n);   /* touched: a caller's buffer is */
        memset(page_out, 0xa5, n);
        CHECK(cudaHostAlloc((void **)&pin_in, n, cudaHostAllocDefault));
        CHECK(cudaHostAlloc((void **)&pin_out, n, cudaHostAllocDefault));
        CHECK(cudaMalloc((void **)&dev_in, n));
        CHECK(cudaMalloc((void **)&dev_out, n));
        memset(pin_in, 0, n);
        memset(pin_out, 0, n);
        for (char *ts = strtok_r(tl, ",", &tsave); ts != NULL; ts = strtok_r(NULL, ",", &tsave)) {
            const int t = atoi(ts);

            if (t < 1 || t > MAX_THREADS)
                continue;
            for (int st = 0; st <= 1; st++) {
                const double in = copy_time(pin_in, page_in, n, t, reps, st);
                const double out = copy_time(page_out, pin_out, n, t, reps, st);
                const char *how = st ? ", streaming stores" : "";

                printf("| %zu | copy in (pageable to pinned%s) | %d | %.2f | %.3f |\n", n, how, t, gb / in, t * in / gb);
                printf("| %zu | copy out (pinned to pageable%s) | %d | %.2f | %.3f |\n", n, how, t, gb / out, t * out / gb);
                report(st ? "copy_in_streaming_gbps" : "copy_in_gbps", n, t, gb / in, "GB/s");
                report(st ? "copy_out_streaming_gbps" : "copy_out_gbps", n, t, gb / out, "GB/s");
            }
        }
        free(tl);
        {
            const double h2d = dma_time(dev_in, page_in, n, cudaMemcpyHostToDevice, a, reps);
            const double d2h = dma_time(page_out, dev_out, n, cudaMemcpyDeviceToHost, a, reps);

            printf("| %zu | direct cudaMemcpy from pageable | 1 | %.2f | |\n", n, gb / h2d);
            printf("| %zu | direct cudaMemcpy to pageable | 1 | %.2f | |\n", n, gb / d2h);
            report("direct_h2d_gbps", n, 1, gb / h2d, "GB/s");
            report("direct_d2h_gbps", n, 1, gb / d2h, "GB/s");
        }
        {
            const double reg = register_time(page_in, n, reps);

            printf("| %zu | cudaHostRegister + Unregister | 1 | %.2f | %.3f ms/MiB |\n", n, gb / reg, reg * 1e3 / mib);
            report("register_ms_per_mib", n, 1, reg * 1e3 / mib, "ms/MiB");
            CHECK(cudaHostRegister(page_in, n, cudaHostRegisterDefault));
            CHECK(cudaHostRegister(page_out, n, cudaHostRegisterDefault));
            const double h2d = dma_time(dev_in, page_in, n, cudaMemcpyHostToDevice, a, reps);
            const double d2h = dma_time(page_out, dev_out, n, cudaMemcpyDeviceToHost, a, reps);
            const double both = dma_both_time(dev_in, page_in, page_out, dev_out, n, a, b, reps);

            printf("| %zu | DMA from registered | 1 | %.2f | |\n| %zu | DMA to registered | 1 | %.2f | |\n"
                   "| %zu | DMA both ways at once, registered (each way) | 1 | %.2f | |\n", n, gb / h2d, n, gb / d2h,
                   n, gb / both);
            report("registered_h2d_gbps", n, 1, gb / h2d, "GB/s");
            report("registered_d2h_gbps", n, 1, gb / d2h, "GB/s");
            report("registered_both_gbps", n, 1, gb / both, "GB/s");
            CHECK(cudaHostUnregister(page_in));
            CHECK(cudaHostUnregister(page_out));
        }
        {
            const double h2d = dma_time(dev_in, pin_in, n, cudaMemcpyHostToDevice, a, reps);
            const double d2h = dma_time(pin_out, dev_out, n, cudaMemcpyDeviceToHost, a, reps);

            printf("| %zu | DMA from pinned (cudaHostAlloc) | 1 | %.2f | |\n| %zu | DMA to pinned | 1 | %.2f | |\n",
                   n, gb / h2d, n, gb / d2h);
            report("pinned_h2d_gbps", n, 1, gb / h2d, "GB/s");
            report("pinned_d2h_gbps", n, 1, gb / d2h, "GB/s");
        }
        CHECK(cudaFree(dev_in));
        CHECK(cudaFree(dev_out));
        CHECK(cudaFreeHost(pin_in));
        CHECK(cudaFreeHost(pin_out));
        free(page_in);
        free(page_out);
        fflush(stdout);
    }
    free(sz);
    return 0;
}
