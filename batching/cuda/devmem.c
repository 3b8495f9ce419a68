/* SPDX-License-Identifier: Apache-2.0 */
/* Device mode: whether a caller's pointer is CUDA memory the cuda executor may use, and on which GPU; whether its stream is that GPU's. */
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

static int mem_query_run(void *arg)
{
    mem_query *q = arg;
    struct cudaPointerAttributes a;
    CUdeviceptr base = 0, at = (CUdeviceptr)(uintptr_t)q->p;
    CUcontext owner = NULL;
    size_t size = 0;
    int saved, st;

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
    int st;

    if (g == NULL || g->mem_range == NULL || g->ptr_attr == NULL || g->ctx_current == NULL
        || g->open_gen != gp_fork_generation())
        return GP_MEM_NO_EXECUTOR;
    st = gp_async_in_job() ? gp_call_off_job_stack(mem_query_run, &q) : mem_query_run(&q);
    *gpu = q.gpu;
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
