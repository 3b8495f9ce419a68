/* SPDX-License-Identifier: Apache-2.0 */
/* Test builds only: the CUDA fault schedule and the call-site table behind batching/cuda_fault.h. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define GP_CUDA_FAULT_TABLE_ONLY 1   /* the schedule needs no CUDA header */
#include "batching/cuda_fault.h"

/* More sites than the cuda executor has calls (about 50); a site beyond this is counted nowhere
 * but still matches the schedule. */
#define MAX_SITES 256

static const char *const call_names[GP_CF_COUNT] = {
    [GP_CF_NONE] = "none", [GP_CF_ANY] = "any", [GP_CF_GET_DEVICE_COUNT] = "cudaGetDeviceCount",
    [GP_CF_SET_DEVICE] = "cudaSetDevice", [GP_CF_GET_DEVICE] = "cudaGetDevice",
    [GP_CF_HOST_ALLOC] = "cudaHostAlloc", [GP_CF_HOST_GET_DEVICE_POINTER] = "cudaHostGetDevicePointer",
    [GP_CF_MALLOC] = "cudaMalloc", [GP_CF_STREAM_CREATE] = "cudaStreamCreateWithFlags",
    [GP_CF_EVENT_CREATE] = "cudaEventCreate", [GP_CF_MEMCPY_ASYNC] = "cudaMemcpyAsync",
    [GP_CF_MEMSET_ASYNC] = "cudaMemsetAsync", [GP_CF_LAUNCH_KERNEL] = "cudaLaunchKernel",
    [GP_CF_LAUNCH_KERNEL_EX] = "cudaLaunchKernelExC", [GP_CF_EVENT_RECORD] = "cudaEventRecord",
    [GP_CF_EVENT_QUERY] = "cudaEventQuery", [GP_CF_EVENT_SYNCHRONIZE] = "cudaEventSynchronize",
    [GP_CF_STREAM_SYNCHRONIZE] = "cudaStreamSynchronize", [GP_CF_EVENT_ELAPSED] = "cudaEventElapsedTime",
    [GP_CF_STREAM_WAIT_EVENT] = "cudaStreamWaitEvent", [GP_CF_HOST_REGISTER] = "cudaHostRegister",
    [GP_CF_POINTER_GET_ATTRIBUTES] = "cudaPointerGetAttributes", [GP_CF_MALLOC_ASYNC] = "cudaMallocFromPoolAsync",
};

/* Everything under one lock: the test module's CUDA calls are not what its tests time. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gp_test_hooks schedule = { .cuda_fault_call = GP_CF_NONE, .cuda_fault_device = -1 };
static uint64_t matched;              /* calls that matched the schedule since it was armed */
static uint64_t armed_ms;             /* when it was armed (CLOCK_MONOTONIC) */
static gp_cuda_fault_site sites[MAX_SITES];
static size_t nsites;

/* The schedule's knobs (batching/settings.c), read again from their variables at each arming. */
static const size_t fault_fields[] = {
    offsetof(gp_knobs, test.cuda_fault_call), offsetof(gp_knobs, test.cuda_fault_file),
    offsetof(gp_knobs, test.cuda_fault_line),
    offsetof(gp_knobs, test.cuda_fault_skip), offsetof(gp_knobs, test.cuda_fault_times),
    offsetof(gp_knobs, test.cuda_fault_device), offsetof(gp_knobs, test.cuda_fault_at_ms),
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void gp_cuda_fault_arm(void)
{
    gp_knobs k;

    gp_settings_defaults(&k);
    for (size_t i = 0; i < sizeof(fault_fields) / sizeof(fault_fields[0]); i++)
        (void)gp_settings_reread(&k, fault_fields[i]);
    pthread_mutex_lock(&lock);
    schedule = k.test;
    matched = 0;
    armed_ms = now_ms();
    pthread_mutex_unlock(&lock);
}

int gp_cuda_fault_by_device(void)
{
    int by;

    pthread_mutex_lock(&lock);
    by = schedule.cuda_fault_call != GP_CF_NONE && schedule.cuda_fault_device >= 0;
    pthread_mutex_unlock(&lock);
    return by;
}

static gp_cuda_fault_site *site_of(const char *file, int line, int call)
{
    for (size_t i = 0; i < nsites; i++)
        if (sites[i].line == line && sites[i].call == call && strcmp(sites[i].file, file) == 0)
            return &sites[i];
    if (nsites == MAX_SITES)
        return NULL;
    sites[nsites] = (gp_cuda_fault_site){ .file = file, .line = line, .call = call, .name = call_names[call] };
    return &sites[nsites++];
}

int gp_cuda_fault_hit(const char *file, int line, int call, int device)
{
    const gp_test_hooks *s = &schedule;
    const char *slash = strrchr(file, '/');
    const char *name = slash != NULL ? slash + 1 : file;   /* __FILE__ is a path; a site names its file */
    gp_cuda_fault_site *site;
    int fail = 0;

    pthread_mutex_lock(&lock);
    site = site_of(name, line, call);
    if (site != NULL)
        site->calls++;
    if (s->cuda_fault_call != GP_CF_NONE
        && (s->cuda_fault_call == GP_CF_ANY || s->cuda_fault_call == call)
        && (s->cuda_fault_file[0] == '\0' || strcmp(s->cuda_fault_file, name) == 0)
        && (s->cuda_fault_line == 0 || s->cuda_fault_line == line)
        && (s->cuda_fault_device < 0 || s->cuda_fault_device == device)
        && (s->cuda_fault_at_ms == 0 || now_ms() - armed_ms >= (uint64_t)s->cuda_fault_at_ms)) {
        uint64_t n = matched++;

        fail = n >= (uint64_t)s->cuda_fault_skip
               && (s->cuda_fault_times == 0 || n < (uint64_t)s->cuda_fault_skip + (uint64_t)s->cuda_fault_times);
    }
    if (fail && site != NULL)
        site->faults++;
    pthread_mutex_unlock(&lock);
    return fail;
}

size_t gp_test_cuda_fault_sites(gp_cuda_fault_site *out, size_t max)
{
    size_t n;

    pthread_mutex_lock(&lock);
    n = nsites;
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = sites[i];
    pthread_mutex_unlock(&lock);
    return n;
}
