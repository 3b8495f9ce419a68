/* SPDX-License-Identifier: Apache-2.0 */
/* Test builds only: the CUDA calls of batching/cuda/, interposed so that any call site can fail. */
#ifndef GP_CUDA_FAULT_H
#define GP_CUDA_FAULT_H

#include "batching/settings.h"

/*
 * Every file of batching/cuda/ that makes CUDA calls includes this header last, after
 * <cuda_runtime_api.h>; in the test module (GP_TEST_HOOKS) each fallible runtime call it makes
 * becomes a macro that first asks gp_cuda_fault_hit whether this call, at this call site (the
 * file's name and the line), fails now (the test hooks GPUPROV_TEST_CUDA_FAULT_*,
 * batching/settings.c), and returns the error a real failure of that call returns instead of
 * calling it. A function-like macro is not expanded again inside its own replacement (C11
 * 6.10.3.4p2), so the replacement calls the runtime's own function. In every other build this
 * header defines nothing.
 *
 * Not interposed: frees and destroys (their results are ignored, and failing them would only leak),
 * cudaGetLastError and the error strings, and the calls of kernels/launch.h (made inside its own
 * inline functions, which come before this header).
 */
#if GP_TEST_HOOKS

#include <stddef.h>
#include <stdint.h>

/* One call site's counts since the process started (gp_test_cuda_fault_sites). */
typedef struct gp_cuda_fault_site {
    const char *file;         /* the file's name in batching/cuda/ (device.c) */
    int line;
    int call;                 /* gp_cuda_fault_call */
    const char *name;         /* the call's name */
    uint64_t calls;           /* times it was reached */
    uint64_t faults;          /* times it was made to fail */
} gp_cuda_fault_site;

/* Exported by the test module (provider/test-module/gpuprov-test.map), read by tests/soak: up to
 * `max` sites into out; returns how many sites have been reached so far. */
__attribute__((visibility("default")))
size_t gp_test_cuda_fault_sites(gp_cuda_fault_site *out, size_t max);

/* A new schedule from the GPUPROV_TEST_CUDA_FAULT_* variables (read again, so a process that
 * loads the provider anew gets the variables it set meanwhile); the site counts stay. */
void gp_cuda_fault_arm(void);
/* Does the schedule look at the current device (cuda_fault_device set)? */
int gp_cuda_fault_by_device(void);
/* Count the call `call` at `file` (a path: its last part names the site) and `line` (device: the
 * current one, -1 unknown); 1: it fails now. `file` must outlive the process's sites (a literal). */
int gp_cuda_fault_hit(const char *file, int line, int call, int device);

/* cuda_fault.c, compiled into every test build (with or without CUDA), needs only the above. */
#ifndef GP_CUDA_FAULT_TABLE_ONLY
#include <cuda_runtime_api.h>

/* Defined before the macros below, so these call the runtime itself. */
static inline int gp_cuda_fault_device(void)
{
    int d = -1;

    if (gp_cuda_fault_by_device() && cudaGetDevice(&d) != cudaSuccess)
        d = -1;
    return d;
}

/* A failed wait still lets the stream drain: a GPU that failed writes nothing afterwards, and an
 * injected fault must not let a kernel that does run write pinned memory the host has reused. */
static inline cudaError_t gp_cuda_fault_drained_stream(cudaStream_t s)
{
    (void)cudaStreamSynchronize(s);
    return cudaErrorLaunchFailure;
}

static inline cudaError_t gp_cuda_fault_drained_event(cudaEvent_t ev)
{
    (void)cudaEventSynchronize(ev);
    return cudaErrorLaunchFailure;
}

/* The runtime names them macros only for per-thread default streams, which gpuprov does not use. */
#if defined(cudaMemcpyAsync) || defined(cudaMemsetAsync) || defined(cudaLaunchKernel) \
    || defined(cudaLaunchKernelExC) || defined(cudaEventRecord) || defined(cudaStreamSynchronize) \
    || defined(cudaStreamWaitEvent) || defined(cudaMallocFromPoolAsync)
# error "batching/cuda_fault.h expects the legacy default stream's function names"
#endif

/* Does the call `call` made here (this file, this line) fail now? */
#define GP_CUDA_FAULT_HIT(call) gp_cuda_fault_hit(__FILE__, __LINE__, (call), gp_cuda_fault_device())
#define GP_CUDA_FAULT(call, err, ...) (GP_CUDA_FAULT_HIT(call) ? (err) : (__VA_ARGS__))

/* gp_cuda_open's first call: each opening of the executor starts the schedule anew. */
#define cudaGetDeviceCount(...) \
    (gp_cuda_fault_arm(), GP_CUDA_FAULT(GP_CF_GET_DEVICE_COUNT, cudaErrorNoDevice, cudaGetDeviceCount(__VA_ARGS__)))
#define cudaSetDevice(...) GP_CUDA_FAULT(GP_CF_SET_DEVICE, cudaErrorDevicesUnavailable, cudaSetDevice(__VA_ARGS__))
#define cudaGetDevice(...) GP_CUDA_FAULT(GP_CF_GET_DEVICE, cudaErrorDevicesUnavailable, cudaGetDevice(__VA_ARGS__))
#define cudaHostAlloc(...) GP_CUDA_FAULT(GP_CF_HOST_ALLOC, cudaErrorMemoryAllocation, cudaHostAlloc(__VA_ARGS__))
#define cudaHostGetDevicePointer(...) \
    GP_CUDA_FAULT(GP_CF_HOST_GET_DEVICE_POINTER, cudaErrorInvalidValue, cudaHostGetDevicePointer(__VA_ARGS__))
#define cudaMalloc(...) GP_CUDA_FAULT(GP_CF_MALLOC, cudaErrorMemoryAllocation, cudaMalloc(__VA_ARGS__))
#define cudaMallocFromPoolAsync(...) \
    GP_CUDA_FAULT(GP_CF_MALLOC_ASYNC, cudaErrorMemoryAllocation, cudaMallocFromPoolAsync(__VA_ARGS__))
#define cudaStreamCreateWithFlags(...) \
    GP_CUDA_FAULT(GP_CF_STREAM_CREATE, cudaErrorMemoryAllocation, cudaStreamCreateWithFlags(__VA_ARGS__))
#define cudaEventCreateWithFlags(...) \
    GP_CUDA_FAULT(GP_CF_EVENT_CREATE, cudaErrorMemoryAllocation, cudaEventCreateWithFlags(__VA_ARGS__))
#define cudaEventCreate(...) GP_CUDA_FAULT(GP_CF_EVENT_CREATE, cudaErrorMemoryAllocation, cudaEventCreate(__VA_ARGS__))
#define cudaMemcpyAsync(...) GP_CUDA_FAULT(GP_CF_MEMCPY_ASYNC, cudaErrorLaunchFailure, cudaMemcpyAsync(__VA_ARGS__))
#define cudaMemsetAsync(...) GP_CUDA_FAULT(GP_CF_MEMSET_ASYNC, cudaErrorLaunchFailure, cudaMemsetAsync(__VA_ARGS__))
#define cudaLaunchKernel(...) GP_CUDA_FAULT(GP_CF_LAUNCH_KERNEL, cudaErrorLaunchFailure, cudaLaunchKernel(__VA_ARGS__))
#define cudaLaunchKernelExC(...) \
    GP_CUDA_FAULT(GP_CF_LAUNCH_KERNEL_EX, cudaErrorLaunchFailure, cudaLaunchKernelExC(__VA_ARGS__))
#define cudaEventRecord(...) GP_CUDA_FAULT(GP_CF_EVENT_RECORD, cudaErrorLaunchFailure, cudaEventRecord(__VA_ARGS__))
#define cudaEventQuery(ev) \
    (GP_CUDA_FAULT_HIT(GP_CF_EVENT_QUERY) ? gp_cuda_fault_drained_event(ev) : cudaEventQuery(ev))
#define cudaEventSynchronize(ev) \
    (GP_CUDA_FAULT_HIT(GP_CF_EVENT_SYNCHRONIZE) ? gp_cuda_fault_drained_event(ev) : cudaEventSynchronize(ev))
#define cudaStreamSynchronize(s) \
    (GP_CUDA_FAULT_HIT(GP_CF_STREAM_SYNCHRONIZE) ? gp_cuda_fault_drained_stream(s) : cudaStreamSynchronize(s))
#define cudaEventElapsedTime(...) \
    GP_CUDA_FAULT(GP_CF_EVENT_ELAPSED, cudaErrorLaunchFailure, cudaEventElapsedTime(__VA_ARGS__))
/* For the large-message pipeline and device memory (cudaHostRegister: the registration cache's, device.c). */
#define cudaStreamWaitEvent(...) \
    GP_CUDA_FAULT(GP_CF_STREAM_WAIT_EVENT, cudaErrorLaunchFailure, cudaStreamWaitEvent(__VA_ARGS__))
#define cudaHostRegister(...) GP_CUDA_FAULT(GP_CF_HOST_REGISTER, cudaErrorMemoryAllocation, cudaHostRegister(__VA_ARGS__))
#define cudaPointerGetAttributes(...) \
    GP_CUDA_FAULT(GP_CF_POINTER_GET_ATTRIBUTES, cudaErrorInvalidValue, cudaPointerGetAttributes(__VA_ARGS__))

#endif /* GP_CUDA_FAULT_TABLE_ONLY */
#endif /* GP_TEST_HOOKS */
#endif
