/* SPDX-License-Identifier: Apache-2.0 */
/* The batch kernel: every unit of a batch arena (leads, body units, finishes) on the GPU. */
#include "units.h"

/*
 * One thread per unit. A request's lead and body units run concurrently (the body's counters and
 * MAC partials do not depend on the lead); the last of them to finish, counted with an atomic on
 * the request's `done`, folds the partials and runs the tail. The fences order the units' writes
 * (state, partials) before the count; the finisher loads what other blocks wrote from L2
 * (GP_LOAD_SHARED), never from a possibly stale L1 line, and works on a local copy of the state. The host glue (batching/exec_cuda.c) launches it by
 * address with cudaLaunchKernel, so this file holds device code only.
 */
extern "C" __global__ void gp_batch_kernel(const gp_unit_ref *refs, unsigned int nrefs, gp_work *work,
                                           uint8_t *arena)
{
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    gp_work *w;
    const gp_key_sched *k;
    gp_msg_state *st;
    const uint8_t *in;
    uint8_t *out;

    if (t >= nrefs)
        return;
    w = &work[refs[t].work];
    k = (const gp_key_sched *)(arena + w->key_off);
    st = (gp_msg_state *)(arena + w->state_off);
    in = arena + w->in_off;
    out = arena + w->out_off;
    if (refs[t].unit == GP_UNIT_LEAD)
        gp_unit_lead(st, k, &w->job, arena + w->job.aad_off, in, out);
    else
        gp_unit_body(&w->job, k, refs[t].unit, in + w->job.head_len, out + w->job.head_len,
                     arena + w->partials_off + (size_t)refs[t].unit * GP_PARTIAL_BYTES);
    if (w->job.nunits == 0)
        return;
    __threadfence();
    if (atomicAdd(&w->done, 1u) == w->job.nunits) {
        gp_msg_state local;
        uint8_t *lp = (uint8_t *)&local;
        const uint8_t *sp = (const uint8_t *)st;

        __threadfence();
        for (size_t i = 0; i < sizeof(local); i++)
            lp[i] = GP_LOAD_SHARED(sp + i);
        gp_unit_finish(&local, k, &w->job, arena + w->partials_off,
                       in + w->job.head_len + w->job.body_len, out + w->job.head_len + w->job.body_len);
        *st = local;
        gp_state_wipe(&local, sizeof(local));
    }
}
