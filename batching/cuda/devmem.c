/* SPDX-License-Identifier: Apache-2.0 */
/* Device mode: whether a caller's pointer is CUDA memory the cuda executor may use, and on which GPU; whether its stream is that GPU's. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "batching/async_wait.h"
#include "batching/cuda/internal.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

/*
 * gp_executor.mem_check: device mode's buffers (engine.h). cudaPointerGetAttributes says what memory
 * p is and on which GPU (an unknown pointer, freed or never allocated here, reads as unregistered
 * host memory); the driver gives the bounds of its allocation and the context that made it: one
 * other than the GPU's primary context (the runtime's, where the slots' streams run) is foreign,
 * its memory not mapped in ours (VMM allocations name none: cuMemMap'd memory is the process's).
 * Pinned host memory is refused too: the mode promises no PCIe traffic. Runs off an async job's
 * small stack (CUDA calls need more).
 */
typedef struct mem_query {
    gp_cuda *g;
    const void *p;
    size_t len;
    int gpu;
} mem_query;

/*
 * The common case in one driver call: cuPointerGetAttributes answers for any pointer, CUDA's or
 * not, without a context current and without an error for a pointer it does not know, with the
 * memory's type, whether it is managed, its GPU, its owning context, its memory pool and its
 * allocation's bounds. Each driver call takes locks that every thread's CUDA calls share, so
 * callers on many threads made each other's checks, and the batches' launches, wait
 * (bench/RESULTS.md, "Stream-ordered device mode and many threads"). -1 where it cannot say for
 * certain and the long way decides: the call failed, managed memory (the runtime's answer decides
 * it), or an allocation whose range may be wider than what is mapped (a VMM mapping, which names
 * no context; a stream-ordered pool's block, whose range is the pool's).
 */
static int mem_query_fast(mem_query *q)
{
    CUpointer_attribute at[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE };
    /* Each answer in a zeroed 8-byte word: whatever width the driver writes (bool, int, pointer),
     * the word reads it (little-endian). */
    uint64_t v[sizeof(at) / sizeof(at[0])];
    void *data[sizeof(at) / sizeof(at[0])];
    const uintptr_t p = (uintptr_t)q->p;
    int dev;

    memset(v, 0, sizeof(v));
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
        data[i] = &v[i];
    if (q->g->ptr_attrs == NULL
        || q->g->ptr_attrs((unsigned int)(sizeof(at) / sizeof(at[0])), at, data, (CUdeviceptr)p) != CUDA_SUCCESS)
        return -1;
    if (v[1] != 0)
        return -1;   /* managed */
    if (v[0] == 0 || v[0] == CU_MEMORYTYPE_HOST)
        return GP_MEM_NOT_DEVICE;   /* not CUDA's (freed, never allocated), or pinned host memory */
    if (v[0] != CU_MEMORYTYPE_DEVICE || v[3] == 0 || v[4] != 0)
        return -1;
    dev = (int)(int32_t)(uint32_t)v[2];
    q->gpu = dev;
    if (dev < q->g->stage_device || dev >= q->g->stage_device + q->g->ngpus)
        return GP_MEM_GPU_NOT_OPEN;
    if ((CUcontext)(uintptr_t)v[3] != q->g->primary[dev - q->g->stage_device])
        return GP_MEM_NOT_DEVICE;   /* another context's: the GPU would fault on it in ours */
    return p < v[5] || p - v[5] > v[6] || q->len > v[6] - (p - v[5]) ? GP_MEM_PAST_END : GP_MEM_OK;
}

static int mem_query_run(void *arg)
{
    mem_query *q = arg;
    struct cudaPointerAttributes a;
    CUdeviceptr base = 0, at = (CUdeviceptr)(uintptr_t)q->p;
    CUcontext owner = NULL;
    size_t size = 0;
    int saved, st;

    if ((st = mem_query_fast(q)) >= 0)
        return st;
    memset(&a, 0, sizeof(a));
    if (cudaPointerGetAttributes(&a, q->p) != cudaSuccess) {
        (void)cudaGetLastError();
        return GP_MEM_NOT_DEVICE;
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return GP_MEM_NOT_DEVICE;
    q->gpu = a.device;
    if (a.device < q->g->stage_device || a.device >= q->g->stage_device + q->g->ngpus)
        return GP_MEM_GPU_NOT_OPEN;
    if (!gp_cuda_device_enter(a.device, &saved) || q->g->mem_range(&base, &size, at) != CUDA_SUCCESS)
        st = GP_MEM_NOT_DEVICE;
    else if (q->g->ptr_attr(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, at) == CUDA_SUCCESS && owner != NULL
             && owner != q->g->primary[a.device - q->g->stage_device])
        st = GP_MEM_NOT_DEVICE;   /* another context's: the GPU would fault on it in ours */
    else
        st = at - base > size || q->len > size - (size_t)(at - base) ? GP_MEM_PAST_END : GP_MEM_OK;
    (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
    return st;
}

int gp_cuda_mem_check(gp_engine *e, const void *p, size_t len, int *gpu)
{
    gp_cuda *g = e->cuda;
    mem_query q = { g, p, len, -1 };
    uint64_t t0;
    int st;

    if (g == NULL || g->mem_range == NULL || g->ptr_attr == NULL || g->ctx_current == NULL
        || g->open_gen != gp_fork_generation())
        return GP_MEM_NO_EXECUTOR;
    t0 = e->knobs.stats ? gp_now_ns() : 0;
    st = gp_async_in_job() ? gp_call_off_job_stack(mem_query_run, &q) : mem_query_run(&q);
    *gpu = q.gpu;
    if (t0 != 0) {
        atomic_fetch_add_explicit(&g->st_checks, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_check, gp_now_ns() - t0, memory_order_relaxed);
    }
    return st;
}

/*
 * gp_executor.stream_check: stream-ordered device mode (engine.h, gp_msg_set_stream). A batch is
 * ordered after the caller's stream by an event recorded there (move.c,
 * gp_cuda_issue_after_callers), which must be a stream of the slot's GPU: an event of one device
 * recorded into another's stream fails (cudaErrorInvalidResourceHandle) and would count as the
 * GPU failing. The driver says which context the stream belongs to; it must be the primary
 * context of the GPU that holds the data (cudaStreamLegacy and cudaStreamPerThread name the
 * current one, entered here). A value that is no stream at all is the caller's error, as any
 * dangling handle given to CUDA is.
 */
typedef struct stream_query {
    gp_cuda *g;
    uint64_t stream;
    int gpu;
} stream_query;

static int stream_query_run(void *arg)
{
    stream_query *q = arg;
    CUcontext owner = NULL;
    int saved, st;

    if (q->gpu < q->g->stage_device || q->gpu >= q->g->stage_device + q->g->ngpus)
        return GP_MEM_GPU_NOT_OPEN;
    if (!gp_cuda_device_enter(q->gpu, &saved))
        return GP_MEM_BAD_STREAM;
    st = q->g->stream_ctx((CUstream)(uintptr_t)q->stream, &owner) == CUDA_SUCCESS
         && owner == q->g->primary[q->gpu - q->g->stage_device] ? GP_MEM_OK : GP_MEM_BAD_STREAM;
    (void)cudaGetLastError();
    gp_cuda_device_leave(saved);
    return st;
}

int gp_cuda_stream_check(gp_engine *e, uint64_t stream, int gpu)
{
    gp_cuda *g = e->cuda;
    stream_query q = { g, stream, gpu };

    if (g == NULL || g->stream_ctx == NULL || g->mem_range == NULL || g->open_gen != gp_fork_generation())
        return GP_MEM_NO_EXECUTOR;
    return gp_async_in_job() ? gp_call_off_job_stack(stream_query_run, &q) : stream_query_run(&q);
}
