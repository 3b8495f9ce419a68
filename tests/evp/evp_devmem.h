/* SPDX-License-Identifier: Apache-2.0 */
/* Device memory and CUDA streams for the EVP tests: CUDA's (the library built with EVP_DEVMEM_CUDA) or the test module's stand-ins. */
#ifndef EVP_DEVMEM_H
#define EVP_DEVMEM_H

#include <stddef.h>

/*
 * The tests of device mode run twice: in CI on the host executor's stand-ins (GPUPROV_TEST_HOST_DEVMEM:
 * the test module's fake allocations, batching/exec_host.c, and its fake streams,
 * batching/fake_stream.h; both plain host memory and host threads underneath), and on a GPU host
 * through CUDA (the same test built with its *_TEST_CUDA macro, linked with evp_devmem_cuda). These
 * functions are the one place either side is written; each fails the running test on an error.
 */

/* The stand-in's exports, found in the test module gpuprov was loaded from (nothing on CUDA). Call
 * once gpuprov is loaded, before any other function here. */
void evp_dm_find(void);
/* The GPU a test puts its buffers on: GPTEST_DEVMEM_GPU, else the GPU that knob device names
 * (GPUPROV_DEVICE, not "all"), else 0 (tests/gpu/multi.sh sets the host's last GPU). */
int evp_dm_data_gpu(void);
/* The GPUs there are to hold buffers: CUDA's device count; the stand-in's 2 (exec_host.c opens
 * GPUs 0 and 1). */
int evp_dm_gpus(void);
/* n bytes (at least 1) of device memory on `gpu`. */
unsigned char *evp_dm_alloc(size_t n, int gpu);
void evp_dm_free(void *p);
/* Host to device, device to host, and a fill of device memory. */
void evp_dm_put(void *dst, const void *src, size_t n);
void evp_dm_get(void *dst, const void *src, size_t n);
void evp_dm_fill(void *dst, int byte, size_t n);

/* A stream of `gpu` that nothing of gpuprov's waits for by itself: a non-blocking CUDA stream, or
 * a fake stream (whose GPU is any: the stand-in's streams serve both). */
void *evp_stream_new(int gpu);
/* Until everything queued on s has run. */
void evp_stream_sync(void *s);
/* What is queued on s runs to its end (a fake stream's hold is lifted), then s is freed (NULL:
 * nothing). */
void evp_stream_free(void *s);

/* CUDA builds: fail the running test unless err (a cudaError_t) is cudaSuccess. */
void evp_cuda_check(int err, const char *what);

#endif
