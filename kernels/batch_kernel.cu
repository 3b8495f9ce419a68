/* SPDX-License-Identifier: Apache-2.0 */
/* The batch kernel: every message group of a batch arena through the per-message unit on the GPU. */
#include "msg_unit.h"

/*
 * One thread per message group, running the group's requests in order on the message state held in
 * the arena. Everything is addressed by offsets into the arena, so the host fills one pinned buffer
 * and the whole batch crosses PCIe in one copy each way. The host glue (batching/exec_cuda.c)
 * launches it by address with cudaLaunchKernel, so this file holds device code only.
 */
extern "C" __global__ void gp_batch_kernel(const gp_work_group *groups, const gp_work *work,
                                           unsigned int ngroups, uint8_t *arena)
{
    unsigned int g = blockIdx.x * blockDim.x + threadIdx.x;

    if (g >= ngroups)
        return;
    for (uint32_t i = groups[g].first; i < groups[g].first + groups[g].count; i++) {
        const gp_work *w = &work[i];

        gp_msg_run((gp_msg_state *)(arena + w->state_off), (const gp_key_sched *)(arena + w->key_off),
                   w->op, arena + w->in_off, arena + w->out_off, (size_t)w->len);
    }
}
