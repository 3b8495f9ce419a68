/* SPDX-License-Identifier: Apache-2.0 */
/* driver_bench's kernel: a launch that runs for a given time and touches no memory. */

/* Runs `ns` nanoseconds of the GPU's global timer (0: returns at once); a stand-in for a batch kernel
 * of that length, so that driver_bench times the CUDA calls around it and nothing of gpuprov's. */
extern "C" __global__ void gp_bench_spin_kernel(unsigned long long ns)
{
    unsigned long long t0, t;

    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (ns == 0)
        return;
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}
