/* SPDX-License-Identifier: Apache-2.0 */
/* Device memory and CUDA streams for the EVP tests, built twice: on CUDA (EVP_DEVMEM_CUDA) and on the test module's stand-ins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#ifdef EVP_DEVMEM_CUDA
# include <cuda_runtime_api.h>
#endif

#include "evp_common.h"
#include "evp_devmem.h"

int evp_dm_data_gpu(void)
{
    const char *g = getenv("GPTEST_DEVMEM_GPU"), *d = getenv("GPUPROV_DEVICE");

    if (g != NULL && *g != '\0')
        return atoi(g);
    return d != NULL && *d >= '0' && *d <= '9' ? atoi(d) : 0;
}

#ifdef EVP_DEVMEM_CUDA
void evp_cuda_check(int err, const char *what)
{
    if (err != cudaSuccess)
        fail_msg("%s: %s", what, cudaGetErrorString((cudaError_t)err));
}

void evp_dm_find(void)
{
}

int evp_dm_gpus(void)
{
    int n = 0;

    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

unsigned char *evp_dm_alloc(size_t n, int gpu)
{
    void *p = NULL;

    evp_cuda_check(cudaSetDevice(gpu), "cudaSetDevice");
    evp_cuda_check(cudaMalloc(&p, n > 0 ? n : 1), "cudaMalloc");
    return p;
}

void evp_dm_free(void *p)
{
    evp_cuda_check(cudaFree(p), "cudaFree");
}

void evp_dm_put(void *dst, const void *src, size_t n)
{
    evp_cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "cudaMemcpy to the GPU");
}

void evp_dm_get(void *dst, const void *src, size_t n)
{
    evp_cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "cudaMemcpy from the GPU");
}

void evp_dm_fill(void *dst, int byte, size_t n)
{
    evp_cuda_check(cudaMemset(dst, byte, n), "cudaMemset");
}

void *evp_stream_new(int gpu)
{
    cudaStream_t s = NULL;

    evp_cuda_check(cudaSetDevice(gpu), "cudaSetDevice");
    evp_cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return (void *)s;
}

void evp_stream_sync(void *s)
{
    evp_cuda_check(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
}

void evp_stream_free(void *s)
{
    if (s == NULL)
        return;
    evp_stream_sync(s);
    evp_cuda_check(cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy");
}
#else
static evp_standin standin;           /* the stand-in's allocator */
static void *(*fake_stream_new)(void);
static void (*fake_stream_sync)(void *s);
static void (*fake_stream_free)(void *s);

void evp_cuda_check(int err, const char *what)
{
    if (err != 0)
        fail_msg("%s: error %d", what, err);
}

void evp_dm_find(void)
{
    evp_standin_find(&standin);
    *(void **)&fake_stream_new = evp_test_module_symbol("gpuprov_test_stream_new");
    *(void **)&fake_stream_sync = evp_test_module_symbol("gpuprov_test_stream_sync");
    *(void **)&fake_stream_free = evp_test_module_symbol("gpuprov_test_stream_free");
}

int evp_dm_gpus(void)
{
    return 2;
}

unsigned char *evp_dm_alloc(size_t n, int gpu)
{
    unsigned char *p = standin.alloc(n > 0 ? n : 1, gpu);

    assert_non_null(p);
    return p;
}

void evp_dm_free(void *p)
{
    standin.free(p);
}

/* The stand-in's "device memory" is plain memory. */
void evp_dm_put(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

void evp_dm_get(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

void evp_dm_fill(void *dst, int byte, size_t n)
{
    memset(dst, byte, n);
}

void *evp_stream_new(int gpu)
{
    void *s;

    (void)gpu;
    s = fake_stream_new();
    assert_non_null(s);
    return s;
}

void evp_stream_sync(void *s)
{
    fake_stream_sync(s);
}

void evp_stream_free(void *s)
{
    fake_stream_free(s);   /* lifts a hold, runs what is queued to its end (as cudaStreamDestroy) */
}
#endif
