/* SPDX-License-Identifier: Apache-2.0 */
/* The batch kernel's launch contract for host code: its stub, shared memory and grid size. */
#ifndef GP_LAUNCH_H
#define GP_LAUNCH_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "units.h"

/* The kernel's host-side stub (kernels/batch_kernel.cu), launched by address. */
void gp_batch_kernel(gp_unit_ref *refs, unsigned int nrefs, gp_work *work, uint8_t *arena, unsigned int flags);

/*
 * Once per device, with that device current: allow the AES table's dynamic shared memory (64 KiB,
 * over the 48 KiB a launch gets without asking) and find how many blocks the whole GPU holds at
 * once, `max_grid`. The kernel strides over its refs, so a larger batch reuses resident blocks
 * (and their table) instead of launching more.
 */
static inline cudaError_t gp_kernel_prepare(unsigned int *max_grid)
{
    int dev, sms, per_sm;
    cudaError_t err;

    if ((err = cudaFuncSetAttribute((const void *)gp_batch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)GP_AES_TT_BYTES)) != cudaSuccess
        || (err = cudaGetDevice(&dev)) != cudaSuccess
        || (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess
        || (err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)gp_batch_kernel,
                                                                (int)GP_KERNEL_BLOCK, GP_AES_TT_BYTES))
               != cudaSuccess)
        return err;
    *max_grid = (unsigned int)(sms > 0 ? sms : 1) * (unsigned int)(per_sm > 0 ? per_sm : 1);
    return cudaSuccess;
}

/*
 * Blocks and dynamic shared memory of a launch over `nrefs` refs: a block per ref up to what the
 * GPU holds (at least one block, which only fills the table and returns when there are none). The
 * kernel deals the first refs out across blocks (batch_kernel.cu), so a small batch's units run on
 * as many SMs as there are units: packed 16 to a block, a lone 16 KiB message's units shared one
 * SM and its lane work took twice as long.
 */
static inline void gp_kernel_geometry(size_t nrefs, unsigned int flags, unsigned int max_grid, dim3 *grid,
                                      size_t *smem)
{
    grid->x = (unsigned int)(nrefs == 0 ? 1 : nrefs < max_grid ? nrefs : max_grid);
    grid->y = 1;
    grid->z = 1;
    *smem = (flags & GP_BATCH_AES) ? GP_AES_TT_BYTES : 0;
}

#endif
