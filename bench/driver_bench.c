/* SPDX-License-Identifier: Apache-2.0 */
/* What T threads of synchronous device-mode messages can reach through this GPU's driver, with no gpuprov code. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "cuda_check.h"

/*
 * A synchronous device-mode message (docs/config.md) needs at least: a check of the caller's
 * pointer (one cuPointerGetAttributes), an order after the legacy default stream (an event recorded
 * there, which the batch's stream waits for), a launch, and a wait for its completion; the caller
 * sends its next message once it is back. This program times those CUDA calls alone, on T threads
 * of one process, each cell for --seconds:
 *   check    each thread checks a device pointer, in a loop;
 *   trip     each thread launches a kernel of K us on a stream of its own and polls its event;
 *   message  trip with the pointer check and the order after the legacy stream before each launch
 *            (a launch per message, no batching);
 *   batch    the ideal batcher: threads in groups of G; each checks its pointer and joins its
 *            group, and the group's last launches once for all (after the legacy stream, or not:
 *            column legacy), polls its event and releases the others, who spin meanwhile.
 * The kernel (driver_spin.cu) runs K us of the GPU's clock and touches nothing: it stands in for
 * the batch kernel on a small batch. Messages a second times --msg-kib gives the GB/s that
 * devmem_bench's cell of as many threads could reach at most with those calls (bench/RESULTS.md,
 * "What bounds 16 threads of synchronous device-mode messages"). Output: a table, and one CSV line
 * a cell: DRIVER,<cell>,<threads>,<group>,<kernel us>,<legacy>,<per second>.
 *
 * usage: driver_bench [--seconds S] [--threads T,..] [--kernel-us K,..] [--groups G,..] [--msg-kib N]
 */

#define MAX_LIST 16
#define MAX_THREADS 256

void gp_bench_spin_kernel(unsigned long long ns);

static PFN_cuPointerGetAttributes_v7000 ptr_attrs;
static uint8_t *device_buf;   /* a 16 KiB message per thread */
static double seconds = 0.4;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The attributes device mode's check asks for (batching/cuda/devmem.c, mem_query_fast). */
static void check_pointer(const void *p)
{
    CUpointer_attribute at[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE };
    uint64_t v[7] = { 0 };
    void *data[7];

    for (int i = 0; i < 7; i++)
        data[i] = &v[i];
    if (ptr_attrs(7, at, data, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS || v[0] != CU_MEMORYTYPE_DEVICE) {
        fprintf(stderr, "driver_bench: the pointer check failed\n");
        exit(1);
    }
}

static void launch_spin(cudaStream_t s, unsigned long long ns)
{
    void *args[] = { &ns };
    const dim3 grid = { 16, 1, 1 }, block = { 256, 1, 1 };

    CHECK(cudaLaunchKernel((const void *)gp_bench_spin_kernel, grid, block, args, 0, s));
}

static void wait_polling(cudaEvent_t ev)
{
    cudaError_t err;

    while ((err = cudaEventQuery(ev)) == cudaErrorNotReady)
        ;
    CHECK(err);
}

enum cell { CELL_CHECK, CELL_TRIP, CELL_MESSAGE, CELL_BATCH };
static const char *const cell_name[] = { "check", "trip", "message", "batch" };

/* A group of the ideal batcher: its members in, the releases so far, and the stop flag its last
 * member sets once the cell's time is up (every member is in the group then, so all see it). */
typedef struct group {
    pthread_mutex_t lock;
    int size, in, stop;
    _Atomic long released;
    cudaStream_t stream;
    cudaEvent_t callers, done;
} group;

typedef struct cell_run {
    enum cell cell;
    unsigned long long kernel_ns;
    int legacy, group_size;
    group *groups;
    _Atomic int go;
    double end;
} cell_run;

typedef struct worker {
    cell_run *run;
    int index;
    cudaStream_t stream;
    cudaEvent_t ev;
    long done;
    pthread_t thread;
} worker;

/* A member's message through the ideal batcher; 0 once its group has stopped. */
static int batch_message(cell_run *run, worker *w)
{
    group *g = &run->groups[w->index / run->group_size];
    long seen = atomic_load(&g->released);
    int stop;

    check_pointer(device_buf + (size_t)w->index * 16384);
    pthread_mutex_lock(&g->lock);
    if (++g->in < g->size) {
        pthread_mutex_unlock(&g->lock);
        while (atomic_load(&g->released) == seen)
            ;
        pthread_mutex_lock(&g->lock);
        stop = g->stop;
        pthread_mutex_unlock(&g->lock);
        return !stop;
    }
    g->in = 0;
    g->stop = now_s() >= run->end;
    stop = g->stop;
    pthread_mutex_unlock(&g->lock);
    if (run->legacy) {
        CHECK(cudaEventRecord(g->callers, cudaStreamLegacy));
        CHECK(cudaStreamWaitEvent(g->stream, g->callers, 0));
    }
    launch_spin(g->stream, run->kernel_ns);
    CHECK(cudaEventRecord(g->done, g->stream));
    wait_polling(g->done);
    atomic_fetch_add(&g->released, 1);
    return !stop;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cell_run *run = w->run;
    const void *mine = device_buf + (size_t)w->index * 16384;

    CHECK(cudaSetDevice(0));
    while (!atomic_load(&run->go))
        ;
    for (;;) {
        if (run->cell == CELL_BATCH) {
            if (!batch_message(run, w))
                break;
            w->done++;
            continue;
        }
        if (now_s() >= run->end)
            break;
        if (run->cell != CELL_TRIP)
            check_pointer(mine);
        if (run->cell != CELL_CHECK) {
            if (run->cell == CELL_MESSAGE) {
                CHECK(cudaEventRecord(w->ev, cudaStreamLegacy));
                CHECK(cudaStreamWaitEvent(w->stream, w->ev, 0));
            }
            launch_spin(w->stream, run->kernel_ns);
            CHECK(cudaEventRecord(w->ev, w->stream));
            wait_polling(w->ev);
        }
        w->done++;
    }
    return NULL;
}

/* One cell on `threads` threads: messages (or checks) a second, all threads together. */
static double run_cell(enum cell cell, int threads, unsigned long long kernel_ns, int group_size, int legacy)
{
    static worker w[MAX_THREADS];
    static group groups[MAX_THREADS];
    cell_run run = { .cell = cell, .kernel_ns = kernel_ns, .legacy = legacy, .group_size = group_size,
                     .groups = groups };
    const int ngroups = cell == CELL_BATCH ? threads / group_size : 0;
    long total = 0;
    double t0;

    for (int i = 0; i < ngroups; i++) {
        memset(&groups[i], 0, sizeof(groups[i]));
        pthread_mutex_init(&groups[i].lock, NULL);
        groups[i].size = group_size;
        CHECK(cudaStreamCreateWithFlags(&groups[i].stream, cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&groups[i].callers, cudaEventDisableTiming));
        CHECK(cudaEventCreateWithFlags(&groups[i].done, cudaEventDisableTiming));
    }
    for (int i = 0; i < threads; i++) {
        w[i] = (worker){ .run = &run, .index = i };
        CHECK(cudaStreamCreateWithFlags(&w[i].stream, cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&w[i].ev, cudaEventDisableTiming));
        if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "driver_bench: pthread_create failed\n");
            exit(1);
        }
    }
    t0 = now_s();
    run.end = t0 + seconds;
    atomic_store(&run.go, 1);
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        total += w[i].done;
        CHECK(cudaStreamDestroy(w[i].stream));
        CHECK(cudaEventDestroy(w[i].ev));
    }
    t0 = now_s() - t0;
    for (int i = 0; i < ngroups; i++) {
        CHECK(cudaStreamDestroy(groups[i].stream));
        CHECK(cudaEventDestroy(groups[i].callers));
        CHECK(cudaEventDestroy(groups[i].done));
        pthread_mutex_destroy(&groups[i].lock);
    }
    return (double)total / t0;
}

static int parse_list(const char *s, double *out)
{
    int n = 0;

    for (char *end; *s != '\0' && n < MAX_LIST; s = *end == ',' ? end + 1 : end) {
        out[n++] = strtod(s, &end);
        if (end == s)
            return 0;
    }
    return n;
}

static void report(enum cell cell, int threads, int group_size, double kernel_us, int legacy, double per_s,
                   double msg_bytes)
{
    printf("%-8s %7d %5d %9.1f %6s %12.0f %8.2f\n", cell_name[cell], threads, group_size, kernel_us,
           cell == CELL_BATCH || cell == CELL_MESSAGE ? (legacy ? "yes" : "no") : "-", per_s,
           cell == CELL_CHECK ? 0.0 : per_s * msg_bytes / 1e9);
    printf("DRIVER,%s,%d,%d,%.1f,%d,%.0f\n", cell_name[cell], threads, group_size, kernel_us, legacy, per_s);
}

int main(int argc, char **argv)
{
    double threads[MAX_LIST] = { 1, 16 }, kernel_us[MAX_LIST] = { 0, 15, 20 }, groups[MAX_LIST] = { 16, 8, 4, 2 };
    int nthreads = 2, nkernel = 3, ngroups = 4, most = 1;
    double msg_bytes = 16384;
    enum cudaDriverEntryPointQueryResult found;

    for (int i = 1; i + 1 < argc; i += 2) {
        int ok = 1;

        if (strcmp(argv[i], "--seconds") == 0)
            ok = (seconds = strtod(argv[i + 1], NULL)) > 0;
        else if (strcmp(argv[i], "--threads") == 0)
            ok = (nthreads = parse_list(argv[i + 1], threads)) > 0;
        else if (strcmp(argv[i], "--kernel-us") == 0)
            ok = (nkernel = parse_list(argv[i + 1], kernel_us)) > 0;
        else if (strcmp(argv[i], "--groups") == 0)
            ok = (ngroups = parse_list(argv[i + 1], groups)) > 0;
        else if (strcmp(argv[i], "--msg-kib") == 0)
            ok = (msg_bytes = strtod(argv[i + 1], NULL) * 1024) > 0 && msg_bytes <= 16384;
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "usage: driver_bench [--seconds S] [--threads T,..] [--kernel-us K,..] [--groups G,..] "
                            "[--msg-kib N, at most 16]\n");
            return 2;
        }
    }
    for (int i = 0; i < nthreads; i++) {
        if (threads[i] < 1 || threads[i] > MAX_THREADS) {
            fprintf(stderr, "driver_bench: threads from 1 to %d\n", MAX_THREADS);
            return 2;
        }
        most = (int)threads[i] > most ? (int)threads[i] : most;
    }
    CHECK(cudaSetDevice(0));
    CHECK(cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", (void **)&ptr_attrs, 7000, cudaEnableDefault,
                                           &found));
    if (found != cudaDriverEntryPointSuccess || ptr_attrs == NULL) {
        fprintf(stderr, "driver_bench: the driver has no cuPointerGetAttributes\n");
        return 1;
    }
    CHECK(cudaMalloc((void **)&device_buf, (size_t)most * 16384));
    printf("%-8s %7s %5s %9s %6s %12s %8s\n", "cell", "threads", "group", "kernel us", "legacy", "per second", "GB/s");
    for (int t = 0; t < nthreads; t++)
        report(CELL_CHECK, (int)threads[t], 0, 0, 0, run_cell(CELL_CHECK, (int)threads[t], 0, 0, 0), msg_bytes);
    for (int k = 0; k < nkernel; k++) {
        const unsigned long long ns = (unsigned long long)(kernel_us[k] * 1e3);

        for (int t = 0; t < nthreads; t++) {
            report(CELL_TRIP, (int)threads[t], 0, kernel_us[k], 0, run_cell(CELL_TRIP, (int)threads[t], ns, 0, 0),
                   msg_bytes);
            report(CELL_MESSAGE, (int)threads[t], 0, kernel_us[k], 1,
                   run_cell(CELL_MESSAGE, (int)threads[t], ns, 0, 1), msg_bytes);
            for (int g = 0; g < ngroups; g++) {
                const int size = (int)groups[g];

                if (size < 2 || size > (int)threads[t] || (int)threads[t] % size != 0)
                    continue;
                for (int legacy = 1; legacy >= 0; legacy--)
                    report(CELL_BATCH, (int)threads[t], size, kernel_us[k], legacy,
                           run_cell(CELL_BATCH, (int)threads[t], ns, size, legacy), msg_bytes);
            }
        }
    }
    CHECK(cudaFree(device_buf));
    return 0;
}
