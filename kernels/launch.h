/* SPDX-License-Identifier: Apache-2.0 */
/* The batch kernel's launch contract for host code: its stub, shared memory and grid size. */
#ifndef GP_LAUNCH_H
#define GP_LAUNCH_H

#include <stddef.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "units.h"

/* The kernel's host-side stubs (kernels/batch_kernel.cu), launched by address: the batch kernel,
 * and its latency build for batches the GPU holds whole, a warp per ref. */
void gp_batch_kernel(gp_unit_ref *refs, unsigned int nrefs, gp_work *work, uint8_t *arena, unsigned int flags);
void gp_batch_kernel_small(gp_unit_ref *refs, unsigned int nrefs, gp_work *work, uint8_t *arena, unsigned int flags);
/* A copy list (kernels/batch_abi.h gp_copy), its first GP_COPY_INLINE entries also in `head`: blocks
 * of GP_COPY_BLOCK, one per entry up to GP_COPY_MAX_GRID; with done != 0, block b then writes
 * `ticket` into the mapped word done[b] (a batch's end, batching/cuda/deliver.c wait_for_gpu). */
void gp_copy_kernel(const gp_copy_head head, const gp_copy *list, unsigned int n, uint64_t done, uint64_t ticket);
/* A small batch in one launch of one cluster of up to GP_LONE_MAX_BLOCKS blocks of GP_LATENCY_BLOCK. */
void gp_lone_kernel(const gp_lone_args a);
/* A stream-ordered request's descriptors into its message's device block (blocks of GP_COPY_BLOCK). */
void gp_ordered_kernel(const gp_ordered_args a);
/* A stream-ordered batch pass's descriptors into its lead message's block (grid y: the works). */
void gp_ordered_batch_kernel(const gp_ordered_batch_args a);

/* How this kernel runs on one device (gp_kernel_prepare): the block, the AES table's layout and
 * the grid cap. */
typedef struct gp_kernel_shape {
    /* A launch with AES work: */
    unsigned int block;          /* threads per block */
    unsigned int aes_smem;       /* dynamic shared memory: the table layout (kernels/aes_tt.h),
                                  * GP_AES_TT_BYTES or GP_AES_TT_WIDE_BYTES */
    unsigned int max_grid;       /* blocks the whole GPU holds at once */
    /* A launch without (no table): blocks of GP_KERNEL_BLOCK, as many as the GPU holds. */
    unsigned int max_grid_plain;
    /* The batch kernel and the copy kernel out may launch while the kernel before them in the
     * stream still runs (programmatic dependent launch): the GPU is sm_90 or later and both
     * kernels' code was compiled for it, so it holds their griddepcontrol.wait (batch_kernel.cu). */
    int early_launch;
    /* Blocks of a gp_lone_kernel cluster the GPU can hold (0: sm_89 or older, or code built for
     * it: no lone launches). */
    unsigned int lone_blocks;
    /* gp_batch_kernel_small: the blocks of GP_LATENCY_BLOCK threads the GPU holds at once (the
     * table's shared memory in each when it has AES work), and so the most refs a batch may
     * have to take it, a warp each (0: none). */
    unsigned int small_grid, small_refs;
} gp_kernel_shape;

/* A gp_lone_kernel launch of one cluster of `blocks` blocks of GP_LATENCY_BLOCK threads with the AES
 * table (attr: its storage). */
static inline void gp_lone_config(const gp_kernel_shape *ks, unsigned int blocks, cudaStream_t stream,
                                  cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr)
{
    memset(cfg, 0, sizeof(*cfg));
    memset(attr, 0, sizeof(*attr));
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = blocks;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg->gridDim.x = blocks;
    cfg->gridDim.y = cfg->gridDim.z = 1;
    cfg->blockDim.x = GP_LATENCY_BLOCK;
    cfg->blockDim.y = cfg->blockDim.z = 1;
    cfg->dynamicSmemBytes = ks->aes_smem;
    cfg->stream = stream;
    cfg->attrs = attr;
    cfg->numAttrs = 1;
}

/*
 * Whether gp_lone_kernel runs here: its code built for sm_90 or later (it holds the cluster
 * barriers) on such a GPU, and a cluster of GP_LONE_MAX_BLOCKS of its blocks fits. Not running
 * it is no failure: batches then take the three launches.
 */
static inline cudaError_t gp_lone_prepare(gp_kernel_shape *ks, int major)
{
    struct cudaFuncAttributes fl;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    int clusters = 0;
    cudaError_t err;

    ks->lone_blocks = 0;
    if ((err = cudaFuncGetAttributes(&fl, (const void *)gp_lone_kernel)) != cudaSuccess)
        return err;
    if (major < 9 || fl.ptxVersion < 90)
        return cudaSuccess;
    if ((err = cudaFuncSetAttribute((const void *)gp_lone_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)ks->aes_smem)) != cudaSuccess)
        return err;
    gp_lone_config(ks, GP_LONE_MAX_BLOCKS, 0, &cfg, &attr);
    if (cudaOccupancyMaxActiveClusters(&clusters, (const void *)gp_lone_kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return cudaSuccess;
    }
    ks->lone_blocks = clusters > 0 ? GP_LONE_MAX_BLOCKS : 0;
    return cudaSuccess;
}

/*
 * Once per device `dev`, with it current (function attributes are set on the current device). The
 * kernel's code for this GPU reads one AES table
 * layout, fixed when it was compiled (kernels/aes_tt.h, GP_AES_TT_DEVICE_WIDE), and says which by
 * its launch bounds: blocks of more than GP_KERNEL_BLOCK threads for the wide table (128 KiB, one
 * block per SM), GP_KERNEL_BLOCK for the narrow one (64 KiB). A GPU that cannot give a block the
 * wide table while its code wants it (PTX compiled for another SM; build with -Dgpu_sm=<its SM>)
 * is refused with cudaErrorNotSupported, and the caller serves without it. Shared memory over the
 * 48 KiB a launch gets without asking is allowed here, and the grid cap is what the GPU holds at
 * once: the kernel strides over its refs, so a larger batch reuses resident blocks (and their
 * table) instead of launching more.
 */
static inline cudaError_t gp_kernel_prepare(gp_kernel_shape *ks, int dev)
{
    struct cudaFuncAttributes fa, fc;
    int sms, per_sm, optin, major;
    cudaError_t err;

    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess
        || (err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess
        || (err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess
        || (err = cudaFuncGetAttributes(&fa, (const void *)gp_batch_kernel)) != cudaSuccess
        || (err = cudaFuncGetAttributes(&fc, (const void *)gp_copy_kernel)) != cudaSuccess)
        return err;
    /* ptxVersion: the virtual architecture the code was compiled for (its __CUDA_ARCH__). */
    ks->early_launch = major >= 9 && fa.ptxVersion >= 90 && fc.ptxVersion >= 90;
    if (fa.maxThreadsPerBlock > (int)GP_KERNEL_BLOCK) {
        if ((size_t)optin < GP_AES_TT_WIDE_BYTES + fa.sharedSizeBytes)
            return cudaErrorNotSupported;
        ks->block = (unsigned int)fa.maxThreadsPerBlock & ~31u;
        ks->aes_smem = GP_AES_TT_WIDE_BYTES;
    } else {
        ks->block = GP_KERNEL_BLOCK;
        ks->aes_smem = GP_AES_TT_BYTES;
    }
    if ((err = cudaFuncSetAttribute((const void *)gp_batch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)ks->aes_smem)) != cudaSuccess
        || (err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)gp_batch_kernel,
                                                                (int)ks->block, ks->aes_smem)) != cudaSuccess)
        return err;
    ks->max_grid = (unsigned int)(sms > 0 ? sms : 1) * (unsigned int)(per_sm > 0 ? per_sm : 1);
    if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)gp_batch_kernel,
                                                             (int)GP_KERNEL_BLOCK, 0)) != cudaSuccess)
        return err;
    ks->max_grid_plain = (unsigned int)(sms > 0 ? sms : 1) * (unsigned int)(per_sm > 0 ? per_sm : 1);
    /* The latency build: as many blocks as hold the table at once (one per SM with the wide one). */
    ks->small_grid = ks->small_refs = 0;
    if ((err = cudaFuncSetAttribute((const void *)gp_batch_kernel_small, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)ks->aes_smem)) != cudaSuccess
        || (err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)gp_batch_kernel_small,
                                                                (int)GP_LATENCY_BLOCK, ks->aes_smem)) != cudaSuccess)
        return err;
    if (per_sm > 0) {
        ks->small_grid = (unsigned int)(sms > 0 ? sms : 1) * (unsigned int)per_sm;
        ks->small_refs = ks->small_grid * (GP_LATENCY_BLOCK / GP_UNIT_LANES);
    }
    return gp_lone_prepare(ks, major);
}

/* Warps the GPU runs at once in a launch with AES work (every GCM batch): a batch with fewer
 * units than this leaves warps idle, and its time is its longest chain. */
static inline uint64_t gp_kernel_warps_at_once(const gp_kernel_shape *ks)
{
    return (uint64_t)ks->max_grid * ks->block / 32u;
}

/*
 * Which kernel, and its blocks, threads and dynamic shared memory, for a launch over `nrefs` refs.
 * A batch the GPU holds whole in blocks of GP_LATENCY_BLOCK (at most small_refs refs) takes
 * gp_batch_kernel_small: each ref has a warp of its own either way, so what counts is how fast
 * one warp gets through its chain, and there it has the register budget of one block an SM
 * (batch_kernel.cu) rather than the batch kernel's. Larger batches take gp_batch_kernel: the AES
 * shape with AES work, blocks of GP_KERNEL_BLOCK without (the wide shape's one large block an SM
 * exists to hold the AES table; work without AES is better served by the several independent
 * blocks an SM of GP_KERNEL_BLOCK holds). A block per ref up to what the GPU holds (at least
 * one block, which only fills the table and returns when there are none). The kernel deals the
 * first refs out across blocks (batch_kernel.cu), so a small batch's units run on as many SMs as
 * there are units: packed into one block, a lone message's units would share one SM's issue slots
 * and its lane work would run in series there.
 */
static inline const void *gp_kernel_geometry(size_t nrefs, unsigned int flags, const gp_kernel_shape *ks,
                                             dim3 *grid, dim3 *block, size_t *smem)
{
    const int aes = (flags & GP_BATCH_AES) != 0, small = nrefs <= ks->small_refs;
    const unsigned int cap = small ? ks->small_grid : aes ? ks->max_grid : ks->max_grid_plain;

    grid->x = (unsigned int)(nrefs == 0 ? 1 : nrefs < cap ? nrefs : cap);
    grid->y = 1;
    grid->z = 1;
    block->x = small ? GP_LATENCY_BLOCK : aes ? ks->block : GP_KERNEL_BLOCK;
    block->y = 1;
    block->z = 1;
    *smem = aes ? ks->aes_smem : 0;
    return small ? (const void *)gp_batch_kernel_small : (const void *)gp_batch_kernel;
}

#endif
