/* SPDX-License-Identifier: Apache-2.0 */
/* Phase probes (build define GP_PHASE_PROBE, kernel_bench only): when a launch's phases start and end. */
#ifndef GP_PROBE_H
#define GP_PROBE_H

/*
 * A lone launch's time is a chain of phases on a few warps (table fill, keystream, MAC products,
 * the fold, the finish); events around the launch give only its sum. With GP_PHASE_PROBE (defined
 * for both the kernel and bench/kernel_bench.c by bench/kernel_variant.sh, never in the provider's
 * build) lane 0 of every warp that passes probe point i stamps its own slot, without atomics (a
 * first version folded every thread's stamps into shared counters with atomics: their contention
 * tripled a lone AES launch):
 *   - %globaltimer (ns, one clock for the whole GPU) of its first and of its last pass;
 *   - clock64 cycles since its block's start (GP_PROBE_BLOCK_START, one SM's clock) at its last.
 * kernel_bench clears the slots before a launch and reduces them after it. Otherwise every
 * GP_PROBE is nothing, so the provider's kernels carry no trace of it.
 */
enum {
    GP_PROBE_ENTRY,       /* a block starts */
    GP_PROBE_TABLE,       /* its AES table is filled (AES batches) */
    GP_PROBE_COPYIN,      /* gp_lone_kernel: its block's share of the image is stored (waits for it) */
    GP_PROBE_REF,         /* a lane group starts a ref */
    GP_PROBE_LOADED,      /* a lane's chunk and counter are in registers (waits for them) */
    GP_PROBE_KEYSTREAM,   /* its keystream is made (waits for it) */
    GP_PROBE_CRYPT,       /* a lane's keystream is XORed in and stored */
    GP_PROBE_LANE,        /* a lane's MAC value is made */
    GP_PROBE_PARTIAL,     /* the unit's partial is summed and stored */
    GP_PROBE_COUNTED,     /* the unit is counted done (the atomic's value is back) */
    GP_PROBE_LEAD,        /* a lead ran */
    GP_PROBE_BARRIER,     /* gp_lone_kernel: the cluster barrier after the units passed */
    GP_PROBE_FINREF,      /* gp_lone_kernel: a finisher has its ref's key schedule (waits for it) */
    GP_PROBE_FENCED,      /* the finisher's fence passed */
    GP_PROBE_FOLDIN,      /* a finisher lane's element and power are in registers (waits for them) */
    GP_PROBE_FOLD,        /* a finisher lane's share of T */
    GP_PROBE_FOLDSUM,     /* the shares summed */
    GP_PROBE_FINISH,      /* the serial end (MAC, lengths block, tag) */
    GP_PROBE_EXIT,        /* a thread leaves the kernel */
    GP_PROBE_N
};
#define GP_PROBE_WARPS 4096u   /* warps with slots (blockIdx.x * warps per block + warp), the rest none */
#define GP_PROBE_BLOCKS 1024u

/* Slot [i][warp]: first ns, last ns, last cycles since the block's start; zero: never passed. */
typedef struct gp_probe_slot {
    unsigned long long first_ns, last_ns, last_cycles;
} gp_probe_slot;

#if defined(GP_PHASE_PROBE) && defined(__CUDA_ARCH__)
extern "C" __device__ gp_probe_slot gp_probe_slots[GP_PROBE_N][GP_PROBE_WARPS];
extern "C" __device__ long long gp_probe_block_start[GP_PROBE_BLOCKS];

/* Probe point i, its stamps taken once `after` is computed (its value is an input of the timer
 * read: a load's probe then waits for the load, where a plain stamp would not). */
static __device__ __forceinline__ void gp_probe_after(int i, unsigned int after)
{
    const unsigned int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32u;
    unsigned long long ns;

    if ((threadIdx.x & 31u) != 0 || warp >= GP_PROBE_WARPS || blockIdx.x >= GP_PROBE_BLOCKS)
        return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns) : "r"(after));
    gp_probe_slot *s = &gp_probe_slots[i][warp];
    if (s->first_ns == 0)
        s->first_ns = ns;
    s->last_ns = ns;
    s->last_cycles = (unsigned long long)(clock64() - gp_probe_block_start[blockIdx.x]);
}
# define GP_PROBE(i) gp_probe_after(i, 0u)
# define GP_PROBE_AFTER(i, v) gp_probe_after(i, (unsigned int)(v))
/* At a block's start, by all its threads: thread 0 sets the base of the block's cycle stamps. */
# define GP_PROBE_BLOCK_START()                                                                 \
    do {                                                                                        \
        if (threadIdx.x == 0 && blockIdx.x < GP_PROBE_BLOCKS)                                   \
            gp_probe_block_start[blockIdx.x] = clock64();                                       \
        __syncthreads();                                                                        \
    } while (0)
#else
# define GP_PROBE(i) ((void)0)
# define GP_PROBE_AFTER(i, v) ((void)0)
# define GP_PROBE_BLOCK_START() ((void)0)
#endif

#endif
