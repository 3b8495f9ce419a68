/* SPDX-License-Identifier: Apache-2.0 */
/* Another process holding nearly all of a GPU's memory (the gpu suite's exhaustion cases, tests/gpu/trust.sh). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

/*
 * usage: hog LEAVE_MIB DEVICE|all [WAIT_FILE] READY_FILE
 * Waits for WAIT_FILE to exist (when given and not "-"), then takes device memory in chunks,
 * halving the chunk when one does not fit, until less than LEAVE_MIB is free on each device it
 * holds; then creates READY_FILE and holds the memory until it is killed (at most ten minutes).
 */
static void hold(int dev, size_t leave)
{
    size_t free_b = 0, total = 0, chunk = (size_t)1 << 30, held = 0;
    void *p;

    if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        fprintf(stderr, "hog: device %d: %s\n", dev, cudaGetErrorString(cudaGetLastError()));
        exit(1);
    }
    while (free_b > leave && chunk >= ((size_t)1 << 20)) {
        size_t want = free_b - leave < chunk ? free_b - leave : chunk;

        if (want < ((size_t)1 << 20))
            break;
        if (cudaMalloc(&p, want) == cudaSuccess) {
            held += want;
        } else {
            (void)cudaGetLastError();
            chunk /= 2;
        }
        if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
            break;
    }
    printf("hog: device %d: holding %zu MiB, %zu MiB free of %zu\n", dev, held >> 20, free_b >> 20, total >> 20);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *wait_file, *ready_file;
    size_t leave;
    int n = 0;
    FILE *f;

    if (argc != 5) {
        fprintf(stderr, "usage: hog LEAVE_MIB DEVICE|all WAIT_FILE|- READY_FILE\n");
        return 2;
    }
    leave = (size_t)strtoull(argv[1], NULL, 10) << 20;
    wait_file = argv[3];
    ready_file = argv[4];
    if (strcmp(wait_file, "-") != 0) {
        struct stat st;

        for (int i = 0; stat(wait_file, &st) != 0; i++) {
            if (i == 6000) {
                fprintf(stderr, "hog: %s never came\n", wait_file);
                return 1;
            }
            usleep(10000);
        }
    }
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "hog: no GPU\n");
        return 1;
    }
    if (strcmp(argv[2], "all") == 0)
        for (int d = 0; d < n; d++)
            hold(d, leave);
    else
        hold(atoi(argv[2]), leave);
    if ((f = fopen(ready_file, "w")) == NULL)
        return 1;
    fclose(f);
    alarm(600);
    pause();
    return 0;
}
