/* SPDX-License-Identifier: Apache-2.0 */
/* The batch kernel: every unit of a batch arena (leads, body units, finishes) on the GPU. */
#include "units.h"

#if __CUDA_ARCH__ >= 900
# include <cooperative_groups.h>
#endif

#if defined(GP_PHASE_PROBE)   /* kernels/probe.h: kernel_bench's phase stamps (definitions) */
extern "C" {
__device__ gp_probe_slot gp_probe_slots[GP_PROBE_N][GP_PROBE_WARPS];
__device__ long long gp_probe_block_start[GP_PROBE_BLOCKS];
}

/* The slots' device address for kernel_bench (a variable's host symbol is private to this file);
 * the one host function here, in probe builds only. */
extern "C" void *gp_probe_slots_address(void)
{
    void *p = NULL;

    return cudaGetSymbolAddress(&p, gp_probe_slots) == cudaSuccess ? p : NULL;
}
#endif

/* The register budget (GP_KERNEL_MIN_BLOCKS, kernels/kdefs.h) as launch bounds: with the wide AES
 * table one block of GP_KERNEL_BLOCK * GP_KERNEL_MIN_BLOCKS threads per SM, with the narrow one
 * GP_KERNEL_MIN_BLOCKS blocks of GP_KERNEL_BLOCK (the same registers a thread either way).
 * kernels/launch.h reads the block size back to learn the layout. */
#if GP_AES_TT_DEVICE_WIDE
# define GP_KERNEL_BOUNDS __launch_bounds__(GP_KERNEL_BLOCK * GP_KERNEL_MIN_BLOCKS, 1)
#else
# define GP_KERNEL_BOUNDS __launch_bounds__(GP_KERNEL_BLOCK, GP_KERNEL_MIN_BLOCKS)
#endif

/*
 * GP_UNIT_LANES threads (a lane group) per gp_unit_ref. A lead runs on its group's lane 0; a body
 * unit runs a lane per 64-byte chunk and sums the lanes' MAC values with shuffles inside its lane
 * group (kernels/units.h). Lane groups are aligned inside a warp and two groups of one warp may
 * belong to different algorithms, so every shuffle names only its own group's lanes (mask and
 * width) and no full-warp operation appears in algorithm-specific code.
 * A request's lead and body units run concurrently (the body's counters and MAC values do not
 * depend on the lead); the last of them to finish, counted with an atomic on the request's `done`,
 * finishes the request as a whole group: its lanes fold the partials by stride (gp_fold_lane), the
 * shuffles sum their shares, lane 0 runs the serial end. The fences order the units' writes
 * (state, partials) before the count; the finisher loads what other blocks wrote from L2
 * (GP_LOAD_SHARED, __ldcg), never from a possibly stale L1 line, and works on a local copy of the
 * state. A block fills its bank-private AES table (kernels/aes_tt.h, dynamic shared memory) when
 * the batch holds AES work. The host glue (batching/cuda/launch.c, with the geometry of
 * kernels/launch.h) launches it by address with cudaLaunchKernel, in blocks of
 * gp_kernel_shape.block threads, so this file holds device code only.
 */
/* The serial parts (lead, finish) and the fold are out of line: their byte-wise state work needs
 * more registers than the lanes, and inlined it would set the register count of the whole kernel. */
static __device__ __noinline__ void batch_lead(gp_msg_state *st, const gp_key_sched *k, const gp_job *j,
                                               const uint8_t *aad, const uint8_t *in, uint8_t *out)
{
    gp_unit_lead(st, k, j, aad, in, out);
}

static __device__ __noinline__ void batch_fold(const gp_msg_state *st, const gp_key_sched *k, const gp_job *j,
                                               const gp_mac_pows *pw, const uint8_t *partials, uint32_t lane,
                                               gp_lane_mac *t)
{
    gp_fold_lane(k, j, pw, st, partials, lane, t);   /* the state from L2: the lead may run in another block */
}

static __device__ __noinline__ void batch_finish(gp_msg_state *st, const gp_key_sched *k, const gp_job *j,
                                                 const gp_mac_pows *pw, const uint8_t *partials,
                                                 const gp_lane_mac *t, const uint8_t *in, uint8_t *out)
{
    /* The state from L2 in 8-byte loads, all issued before the first is used (states are
     * 128-byte aligned): byte-wise loads, each dependent on the last, would wait one L2 latency apiece
 * in series on the request's finishing path. */
    enum { NW = sizeof(gp_msg_state) / 8 };
    gp_msg_state local;
    uint2 tmp[NW];

    static_assert(sizeof(gp_msg_state) % 8 == 0, "the state copies in 8-byte words");
#pragma unroll
    for (int i = 0; i < NW; i++)
        tmp[i] = __ldcg((const uint2 *)st + i);
#pragma unroll
    for (int i = 0; i < NW; i++)
        ((uint2 *)&local)[i] = tmp[i];
    gp_unit_finish_serial(&local, k, j, pw, partials, t, in + j->head_len + j->body_len,
                          out + j->head_len + j->body_len);
    *st = local;
    gp_state_wipe(&local, sizeof(local));
}

static __device__ __noinline__ void batch_finish_fast(gp_msg_state *st, const gp_key_sched *k, const gp_job *j,
                                                      const gp_mac_pows *pw, const uint8_t *partials,
                                                      const gp_lane_mac *t, const gp_lane_mac *tag_s)
{
    gp_unit_finish_fast(st, k, j, pw, partials, t, tag_s);
}

/* m = sum of the lane group's first `lanes` values (a power of two), in lane 0 (and the sum of
 * every other run of `lanes` in that run's first lane; the other lanes end with partial sums).
 * from > 1: the values of every from-th lane only (each already the sum of its run of `from`). */
static __device__ void group_sum(uint32_t alg, unsigned int mask, gp_lane_mac *m, unsigned int from,
                                 unsigned int lanes)
{
#pragma unroll 1
    for (unsigned int s = from; s < lanes; s <<= 1) {
        gp_lane_mac partner;

        for (int i = 0; i < 5; i++)
            partner.w[i] = __shfl_down_sync(mask, m->w[i], s, GP_UNIT_LANES);
        gp_mac_add(alg, m, &partner);
    }
}

/* A ref's arena pointers (unsigned arithmetic: key_off wraps modulo 2^64 when the key is in the
 * resident table, in_off and out_off when a device-mode request's data is the caller's own device
 * memory, batching/cuda/plan.c). */
struct batch_ptrs {
    gp_work *w;
    const gp_key_sched *k;
    const gp_mac_pows *pw;
    gp_msg_state *st;
    const uint8_t *in;
    uint8_t *partials;            /* the units' partials, then the spans' values */
    uint8_t *out;
    unsigned int *span_done;      /* with spans: a counter per span */
};

static __device__ __forceinline__ batch_ptrs batch_ref_ptrs(const gp_unit_ref *ref, gp_work *work, uint8_t *arena)
{
    batch_ptrs p;

    p.w = &work[ref->work];
    p.k = (const gp_key_sched *)((uintptr_t)arena + p.w->key_off);
    p.pw = p.w->pows_off != 0 ? (const gp_mac_pows *)(arena + p.w->pows_off) : &p.k->mac_pows;
    p.st = (gp_msg_state *)((uintptr_t)arena + p.w->state_off);
    p.in = (const uint8_t *)((uintptr_t)arena + p.w->in_off);
    p.partials = arena + p.w->partials_off;
    p.out = (uint8_t *)((uintptr_t)arena + p.w->out_off);
    p.span_done = (unsigned int *)(arena + p.w->spans_off);
    return p;
}

/* A request's finish on its lane group from its finisher lanes' shares (tsum; AEAD): the
 * shuffles sum them, lane 0 runs the serial end. */
static __device__ __forceinline__ void batch_ref_end(const batch_ptrs &p, unsigned int lane, unsigned int mask,
                                                     gp_lane_mac tsum)
{
    gp_work *w = p.w;
    const uint32_t alg = p.k->alg;
    const int dual = gp_fold_dual(alg, &w->job);   /* uniform over the group */
    gp_lane_mac ssum;

    if (gp_alg_is_aead(alg)) {
        /* A dual fold's halves apart: X in lane 0, S in lane L/2, then in lane 0 */
        group_sum(alg, mask, &tsum, 1, dual ? GP_UNIT_LANES / 2 : GP_UNIT_LANES);
        if (dual)
            for (int i = 0; i < 5; i++)
                ssum.w[i] = __shfl_down_sync(mask, tsum.w[i], GP_UNIT_LANES / 2, GP_UNIT_LANES);
        GP_PROBE(GP_PROBE_FOLDSUM);
    }
    if (lane == 0) {
        if (w->job.len == w->job.head_len + w->job.body_len)   /* no tail: words only */
            batch_finish_fast(p.st, p.k, &w->job, p.pw, p.partials, &tsum, dual ? &ssum : NULL);
        else
            batch_finish(p.st, p.k, &w->job, p.pw, p.partials, &tsum, p.in, p.out);
        GP_PROBE(GP_PROBE_FINISH);
    }
}

/* The request's finish on its lane group, once every unit's writes are visible to it: the lanes
 * fold the partials, then batch_ref_end. */
static __device__ __forceinline__ void batch_ref_finish(const batch_ptrs &p, unsigned int lane, unsigned int mask)
{
    gp_lane_mac tsum;

    gp_lane_mac_zero(&tsum);
    if (gp_alg_is_aead(p.k->alg)) {
        batch_fold(p.st, p.k, &p.w->job, p.pw, p.partials, lane, &tsum);
        GP_PROBE(GP_PROBE_FOLD);
    }
    batch_ref_end(p, lane, mask, tsum);
}

/* Span s's value from its lanes' shares, once every element of the span is visible (kernels/units.h,
 * "Spans"): stored after the units' partials by lane 0, which then counts it on `done`. */
static __device__ __noinline__ void batch_span_fold(const batch_ptrs &p, unsigned int s, unsigned int lane,
                                                    unsigned int mask)
{
    const uint32_t alg = p.k->alg;
    gp_lane_mac v;

    gp_span_fold_lane(p.k, &p.w->job, p.pw, p.st, p.partials, s, lane, &v);
    group_sum(alg, mask, &v, 1, GP_UNIT_LANES);
    if (lane == 0)
        gp_partial_store(p.partials + ((size_t)p.w->job.nunits + s) * GP_PARTIAL_BYTES, &v);
}

/* A lead or body unit done on its lane group: counted, and the last of its request's units
 * finishes the request as a group (kernels/units.h, gp_counts_on_span). With spans, an element is
 * counted on its span's counter first, and the last of a span folds the span and counts that on
 * `done` (as does the last unit, which is no element). Not `counted` (gp_lone_kernel, whose
 * requests have no spans): the launch finishes its requests after a cluster barrier instead
 * (batch_lone_finishes). */
static __device__ __forceinline__ void batch_ref_count(const batch_ptrs &p, unsigned int lane, unsigned int mask,
                                                       bool counted, uint32_t unit)
{
    gp_work *w = p.w;
    unsigned int done = 0;

    if (!counted)
        return;
    if (gp_counts_on_span(&w->job, unit)) {   /* uniform over the group */
        const uint32_t s = gp_span_of_ref(&w->job, unit);

        if (lane == 0) {
            __threadfence();
            done = atomicAdd(&p.span_done[s], 1u);
        }
        done = __shfl_sync(mask, done, 0, GP_UNIT_LANES);
        if (done != gp_span_size(&w->job, s) - 1)
            return;
        __threadfence();
        batch_span_fold(p, s, lane, mask);
    }
    if (lane == 0) {
        __threadfence();
        done = atomicAdd(&w->done, 1u);
    }
    done = __shfl_sync(mask, done, 0, GP_UNIT_LANES);
    GP_PROBE(GP_PROBE_COUNTED);
    if (done != gp_done_at_finish(&w->job))
        return;
    /* The last of the request's units: finish it as a group. */
    __threadfence();
    GP_PROBE(GP_PROBE_FENCED);
    batch_ref_finish(p, lane, mask);
}

/* One ref (a lead or a body unit) on its lane group; `return` ends only this ref. */
static __device__ __forceinline__ void batch_ref(const gp_unit_ref *ref, unsigned int lane, unsigned int mask,
                                                 gp_work *work, uint8_t *arena, bool counted)
{
    const batch_ptrs p = batch_ref_ptrs(ref, work, arena);
    gp_work *w = p.w;
    const uint32_t alg = p.k->alg;

    GP_PROBE(GP_PROBE_REF);
    if (ref->unit == GP_UNIT_LEAD) {
        if (lane == 0)
            batch_lead(p.st, p.k, &w->job, arena + w->job.aad_off, p.in, p.out);
        GP_PROBE(GP_PROBE_LEAD);
        if (w->job.nunits == 0)
            return;   /* the lead alone finished the request */
    } else {
        const uint32_t u = ref->unit;
        const gp_ghash_mma *mx = w->ghmma_off != 0 ? (const gp_ghash_mma *)(arena + w->ghmma_off) : NULL;
        gp_lane_mac m;

        gp_unit_lane(&w->job, p.k, p.pw, mx, u, lane, p.in + w->job.head_len, p.out + w->job.head_len, &m);
        GP_PROBE(GP_PROBE_LANE);
        if (gp_alg_is_aead(alg)) {   /* the whole group takes this branch */
            group_sum(alg, mask, &m, 1, GP_UNIT_LANES);
            if (lane == 0) {
                if (gp_partials_shifted(alg, &w->job))   /* kernels/units.h, "Shifted partials" */
                    gp_partial_shift(p.k, &w->job, u, &m);
                gp_partial_store(arena + w->partials_off + (size_t)u * GP_PARTIAL_BYTES, &m);
            }
            GP_PROBE(GP_PROBE_PARTIAL);
        }
    }
    batch_ref_count(p, lane, mask, counted, ref->unit);
}

/*
 * The spread pass of the latency kernels (kernels/units.h, "Spread units"): when a launch's
 * blocks hold every ref with GP_SPREAD_THREADS threads each (4 warps, one per SM scheduler), a
 * body unit runs a thread per 16-byte block. Each warp sums its 8 chunks (each chunk's 4 quarters,
 * then its lane power), the first warp adds the other three's sums from shared memory behind a
 * barrier of the 4 warps, and from there on that warp is the unit's lane group as in batch_ref
 * (partial, count, finish). A lead runs on the first warp alone. `xchg` is double-buffered by the
 * group's count of units (`parity`): a warp writes a buffer again only after the barrier of the
 * unit between, which the first warp reaches after reading it (and clearing it: a unit's sums,
 * like its partial in the arena, would tell GHASH's H to whoever read them). Units of 2 KiB only
 * (a warp of 8 chunks).
 */
#define GP_SPREAD_OK (GP_UNIT_LANES == 32u && GP_LATENCY_BLOCK % GP_SPREAD_THREADS == 0)

static __device__ __forceinline__ void batch_ref_spread(const gp_unit_ref *ref, unsigned int t, gp_work *work,
                                                        uint8_t *arena, gp_lane_mac (*xchg)[4], unsigned int bar,
                                                        unsigned int *parity, bool counted)
{
    const unsigned int warp = t / 32u, x = t % 32u, lane = 8u * warp + x / 4u, full = 0xffffffffu;

    if (ref->unit == GP_UNIT_LEAD) {   /* uniform over the group */
        if (warp == 0)
            batch_ref(ref, x, full, work, arena, counted);
        return;
    }
    const batch_ptrs p = batch_ref_ptrs(ref, work, arena);
    gp_work *w = p.w;
    const uint32_t alg = p.k->alg, u = ref->unit;
    gp_lane_mac m, shift;

    GP_PROBE(GP_PROBE_REF);
    gp_unit_quarter(&w->job, p.k, p.pw, u, lane, x % 4u, p.in + w->job.head_len, p.out + w->job.head_len, &m,
                    &shift);
    GP_PROBE(GP_PROBE_LANE);
    if (gp_alg_is_aead(alg)) {
        group_sum(alg, full, &m, 1, 4);   /* the chunk's quarters, in its first thread */
        if (x % 4u == 0)
            gp_mac_mul(alg, &m, &shift);   /* an absent lane's zero stays zero */
        group_sum(alg, full, &m, 4, 32);  /* the warp's chunks */
        if (x == 0 && warp != 0)
            xchg[*parity][warp] = m;
    }
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(GP_SPREAD_THREADS) : "memory");
    if (warp != 0) {
        *parity ^= 1u;
        return;
    }
    if (gp_alg_is_aead(alg)) {
        if (x == 0) {
            for (int i = 1; i < 4; i++) {
                gp_mac_add(alg, &m, &xchg[*parity][i]);
                gp_lane_mac_zero(&xchg[*parity][i]);   /* MAC sums are key material: none outlives the block */
            }
            if (gp_partials_shifted(alg, &w->job))   /* kernels/units.h, "Shifted partials" */
                gp_partial_shift(p.k, &w->job, u, &m);
            gp_partial_store(arena + w->partials_off + (size_t)u * GP_PARTIAL_BYTES, &m);
        }
        GP_PROBE(GP_PROBE_PARTIAL);
    }
    *parity ^= 1u;
    batch_ref_count(p, x, full, counted, u);
}

/* Whether a launch of `nrefs` refs takes the spread pass: every ref a group of its own. */
static __device__ __forceinline__ int batch_spreads(unsigned int nrefs, unsigned int flags)
{
    return GP_SPREAD_OK && !(flags & GP_BATCH_NARROW) && blockDim.x % GP_SPREAD_THREADS == 0
           && nrefs <= gridDim.x * (blockDim.x / GP_SPREAD_THREADS);
}

/* The spread pass over a launch's refs: group g of block b takes ref g * gridDim + b, and more by
 * that stride if there are (gp_lone_kernel's up to 3 refs a block). */
static __device__ __forceinline__ void batch_run_spread(gp_unit_ref *refs, unsigned int nrefs, gp_work *work,
                                                        uint8_t *arena, bool counted)
{
    __shared__ gp_lane_mac xchg[GP_LATENCY_BLOCK / GP_SPREAD_THREADS][2][4];
    const unsigned int g = threadIdx.x / GP_SPREAD_THREADS, groups = gridDim.x * (blockDim.x / GP_SPREAD_THREADS);
    unsigned int parity = 0;

    GP_NO_UNROLL
    for (unsigned int r = g * gridDim.x + blockIdx.x; r < nrefs; r += groups)
        batch_ref_spread(&refs[r], threadIdx.x % GP_SPREAD_THREADS, work, arena, xchg[g], 1u + g, &parity, counted);
}

/*
 * The grid may be smaller than the refs (kernels/launch.h caps it at what the GPU holds at once),
 * so a block fills its AES table once for many refs. Lane group g of block b takes ref
 * g * gridDim + b first (dealt across blocks, so a small batch spreads over the SMs), then claims
 * the next free ref from the counter after the refs (kernels/batch_abi.h): refs cost very
 * different times (a finisher folds a whole message), and claiming keeps every group busy to the
 * end where a fixed stride left groups idle behind the slowest. The claim is made before the
 * current ref runs, so its L2 round trip hides behind the work. A lane group's lanes take the same
 * refs, so the group-wide shuffles stay converged.
 */
/*
 * Programmatic dependent launch (sm_90+; PTX ISA griddepcontrol): the host launches the batch
 * kernel and the copy kernel out with cudaLaunchAttributeProgrammaticStreamSerialization
 * (batching/cuda/launch.c), so each may start once every block of the kernel before it has started
 * (launch_dependents) instead of after that kernel has ended. Its blocks then set up what does
 * not depend on that kernel (the batch kernel's AES table) and wait (griddepcontrol.wait: the
 * kernel before has completed and its writes are visible) before they read anything it wrote.
 * The launch gap and the table fill leave a lone call's chain. Launched plainly, both are no-ops.
 */
static __device__ __forceinline__ void grid_release_dependents(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void grid_wait_prerequisites(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void
batch_run(gp_unit_ref *refs, unsigned int nrefs, gp_work *work, uint8_t *arena, unsigned int flags, bool latency)
{
    const unsigned int lane = threadIdx.x % GP_UNIT_LANES;
    const unsigned int groups = gridDim.x * (blockDim.x / GP_UNIT_LANES);
    /* This lane group's lanes of the warp. */
    const unsigned int mask = (unsigned int)((((uint64_t)1 << GP_UNIT_LANES) - 1)
                                             << (threadIdx.x & 31u & ~(GP_UNIT_LANES - 1)));
    unsigned int r = threadIdx.x / GP_UNIT_LANES * gridDim.x + blockIdx.x;

    GP_PROBE_BLOCK_START();
    GP_PROBE(GP_PROBE_ENTRY);
    grid_release_dependents();   /* the copy kernel out may launch and wait */
    if (flags & GP_BATCH_AES) {   /* uniform over the launch */
        gp_aes_tt_fill();
        __syncthreads();
        GP_PROBE(GP_PROBE_TABLE);
    }
    grid_wait_prerequisites();   /* the copy kernel in has brought the batch across */
    if (latency && batch_spreads(nrefs, flags)) {
        batch_run_spread(refs, nrefs, work, arena, true);
        GP_PROBE(GP_PROBE_EXIT);
        return;
    }
    GP_NO_UNROLL
    while (r < nrefs) {
        unsigned int next = 0;

        if (lane == 0)
            next = groups + atomicAdd(&refs[nrefs].work, 1u);
        batch_ref(&refs[r], lane, mask, work, arena, true);
        r = __shfl_sync(mask, next, 0, GP_UNIT_LANES);
    }
    GP_PROBE(GP_PROBE_EXIT);
}

extern "C" __global__ void GP_KERNEL_BOUNDS
gp_batch_kernel(gp_unit_ref *refs, unsigned int nrefs, gp_work *work, uint8_t *arena, unsigned int flags)
{
    batch_run(refs, nrefs, work, arena, flags, false);
}

/*
 * The same for a batch the GPU runs all at once a warp per ref (kernels/launch.h,
 * gp_kernel_geometry): blocks of GP_LATENCY_BLOCK threads, one per SM. Such a batch's time is the
 * latency of its refs' chains, not the issue rate of many warps, and with the register budget of
 * a GP_LATENCY_BLOCK-thread block alone on its SM (__launch_bounds__(GP_LATENCY_BLOCK, 1) below;
 * the batch kernel's GP_KERNEL_BOUNDS budgets for 256 x gpu_min_blocks threads an SM,
 * kernels/kdefs.h) a warp keeps its table lookups and products in flight (gp_lone_kernel below).
 * $GPUPROV_SMALL_REFS=N caps the batches that take it (0: none), for A/B runs.
 */
extern "C" __global__ void __launch_bounds__(GP_LATENCY_BLOCK, 1)
gp_batch_kernel_small(gp_unit_ref *refs, unsigned int nrefs, gp_work *work, uint8_t *arena, unsigned int flags)
{
    batch_run(refs, nrefs, work, arena, flags, true);
}

/*
 * A copy list (kernels/batch_abi.h gp_copy) of pieces of at most GP_COPY_PIECE bytes: a block per
 * piece, striding over the list; its first GP_COPY_INLINE entries come with the launch (`head`),
 * the rest from wherever the host left them (mapped host memory too). Each warp moves 512 contiguous bytes per step, so reads of host memory cross PCIe as whole
 * 128-byte lines, and a thread has four loads in flight before its first store: one PCIe round
 * trip moves a whole piece, where one load at a time took four (a lone message's latency). Pieces
 * whose two ends are not both 16-byte aligned (a streaming request whose body starts mid-block) go
 * byte by byte. GP_COPY_WIPE_SRC zeroes the source once every thread of the block has read it.
 */
static __device__ __forceinline__ void copy_piece(const gp_copy &c)
{
    const uint8_t *src = (const uint8_t *)(uintptr_t)c.src;
    uint8_t *dst = (uint8_t *)(uintptr_t)c.dst;
    const unsigned int bd = blockDim.x;
    uint64_t done = 0;

    if (((c.src | c.dst) & 15u) == 0) {
        const uint64_t nv = c.len / 16;
        const uint4 *s = (const uint4 *)src;
        uint4 *d = (uint4 *)dst;
        uint64_t v = threadIdx.x;

        if (c.src == 0) {
            for (; v < nv; v += bd)
                d[v] = make_uint4(0, 0, 0, 0);
        } else {
            for (; v + 3 * bd < nv; v += 4 * bd) {
                const uint4 a = s[v], b = s[v + bd], e = s[v + 2 * bd], f = s[v + 3 * bd];

                d[v] = a;
                d[v + bd] = b;
                d[v + 2 * bd] = e;
                d[v + 3 * bd] = f;
            }
            for (; v < nv; v += bd)
                d[v] = s[v];
        }
        done = nv * 16;
    }
    for (uint64_t b = done + threadIdx.x; b < c.len; b += bd)
        dst[b] = c.src != 0 ? src[b] : 0;
}

/*
 * A block's last step when the host waits on done words (batching/cuda/deliver.c wait_for_gpu;
 * done 0: it does not): behind a block barrier, one thread fences at system scope and writes
 * `ticket` into the block's word. The barrier puts the block's stores before that fence in
 * causality order (PTX ISA, memory consistency model), so a host that reads every block's ticket
 * with acquire ordering reads what the blocks wrote.
 */
static __device__ __forceinline__ void block_says_done(uint64_t done, uint64_t ticket)
{
    if (done == 0)
        return;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        ((volatile uint64_t *)(uintptr_t)done)[blockIdx.x] = ticket;
    }
}

/* The copy list; then, for a batch's copy out (done != 0), each block says it is done. */
extern "C" __global__ void __launch_bounds__(GP_COPY_BLOCK)
gp_copy_kernel(const gp_copy_head head, const gp_copy *list, unsigned int n, uint64_t done, uint64_t ticket)
{
    __shared__ gp_copy cur;

    grid_wait_prerequisites();   /* out: the batch kernel has finished */
    grid_release_dependents();   /* in: the batch kernel may launch and fill its table */
    for (unsigned int i = blockIdx.x; i < n; i += gridDim.x) {
        if (threadIdx.x == 0)   /* from parameter space, or one read that may cross PCIe */
            cur = i < GP_COPY_INLINE ? head.e[i] : list[i];
        __syncthreads();
        const gp_copy c = cur;

        if (c.flags & GP_COPY_REFS) {
            gp_unit_ref *refs = (gp_unit_ref *)(uintptr_t)c.dst;

            for (uint64_t k = threadIdx.x; k < c.len; k += blockDim.x)
                refs[k] = gp_copy_ref(c.src, k);
            __syncthreads();   /* before `cur` is overwritten */
            continue;
        }
        copy_piece(c);
        if (c.flags & GP_COPY_WIPE_SRC) {
            __syncthreads();   /* every thread's reads of the source are done */
            const gp_copy z = { 0, c.src, c.len, 0, 0 };

            copy_piece(z);
        }
        __syncthreads();   /* before `cur` is overwritten */
    }
    block_says_done(done, ticket);
}

/*
 * A small batch in one launch (batching/cuda/launch.c, lone_cluster): a lone synchronous call's
 * three launches (copy in, batch kernel, copy out) left two kernel handovers and the copy kernels'
 * own starts on its path. Here one thread block cluster (sm_90) runs them as phases of one kernel
 * with the cluster's hardware barrier between them: its blocks are resident together (one GPC),
 * so the barrier cannot wait on a block that never starts, and its release/acquire makes one
 * phase's global writes visible to the next. A block per SM (each holds the wide AES table), so
 * a message's units still spread over SMs rather than share one SM's issue slots (kernels/launch.h),
 * but of GP_LATENCY_BLOCK threads, not the batch kernel's block: here a unit's warp runs alone on
 * its SM and its time is the latency of its chains. Under the batch kernel's register budget
 * (sized for 256 x gpu_min_blocks threads an SM, kernels/kdefs.h) a lane keeps only a few of a
 * round's 64 table lookups in flight; with the budget of one GP_LATENCY_BLOCK-thread block an SM
 * (launch bounds below) it keeps more, and a lone call's chains are shorter.
 *   1. Each block loads its slice of the image [0, in_len) from the pinned arena, fills its AES
 *      table while those loads cross PCIe, then stores the slice into the device arena.
 *   2. The refs, dealt over the blocks as gp_batch_kernel's first pass deals them (the grid covers
 *      them: no claiming), not counted; a cluster barrier; then each request's finish on the
 *      group that ran its last unit. The barrier's release/acquire stands in for the count's
 *      atomic and the finisher's fences, which sat on a lone call's chain.
 *   3. Each block takes its slice of the results back to the pinned arena and clears it, and its
 *      slices of the rest of the wipe region (keys, partials): no block reads another's.
 *   4. Each block says it is done (block_says_done): the host polls those words rather than an
 *      event recorded behind the launch, which says so only once the kernel has retired. A word a
 *      block, not one behind a cluster barrier, which would wait for the slowest block.
 */
#if __CUDA_ARCH__ >= 900
/*
 * Phase 2's finishes: each request with body units on the group that ran its last unit (the refs
 * dealt as in phase 2; a spread group's first warp). What a finish reads falls in two parts: the
 * refs, descriptors, key schedule and each finisher lane's power (gp_fold_lane_plan), which the
 * host wrote, and the partials and the lead's state, which the units wrote. The group plans its
 * first finish before the barrier, while the last units still run, so that behind the barrier
 * only the elements are loaded (one L2 round trip); after it the chain of dependent loads (ref,
 * descriptor, key, power) would sit on a lone launch's path behind the barrier. Further finishes of the group (a batch of several requests)
 * go unplanned.
 */
typedef struct lone_finish {
    batch_ptrs p;
    gp_fold_plan f;
    int planned;
} lone_finish;

/* The group's refs in phase 2's order; `visit(p)` for each that finishes its request, until it
 * returns false. */
template <typename Visit>
static __device__ __forceinline__ void lone_finishing_refs(const gp_unit_ref *refs, unsigned int nrefs, gp_work *work,
                                                           uint8_t *arena, unsigned int per, Visit visit)
{
    const unsigned int groups = gridDim.x * (blockDim.x / per);

    GP_NO_UNROLL
    for (unsigned int r = threadIdx.x / per * gridDim.x + blockIdx.x; r < nrefs; r += groups) {
        const uint32_t u = refs[r].unit;

        if (u != GP_UNIT_LEAD && u + 1 == work[refs[r].work].job.nunits   /* uniform over the group */
            && !visit(batch_ref_ptrs(&refs[r], work, arena)))
            return;
    }
}

static __device__ __forceinline__ void batch_lone_plan(const gp_unit_ref *refs, unsigned int nrefs, gp_work *work,
                                                       uint8_t *arena, unsigned int per, lone_finish *lf)
{
    const unsigned int lane = threadIdx.x % GP_UNIT_LANES;

    lf->planned = 0;
    if (threadIdx.x % per >= GP_UNIT_LANES)
        return;
    lone_finishing_refs(refs, nrefs, work, arena, per, [&](const batch_ptrs &p) {
        lf->p = p;
        lf->planned = 1;
        if (gp_alg_is_aead(p.k->alg)) {
            gp_fold_lane_plan(p.k, &p.w->job, p.pw, lane, &lf->f);
        } else {
            lf->f.kind = GP_FOLD_NONE;
            lf->f.mul = 0;
            gp_lane_mac_zero(&lf->f.pow);
        }
        return false;
    });
}

static __device__ __forceinline__ void batch_lone_finishes(const gp_unit_ref *refs, unsigned int nrefs,
                                                           gp_work *work, uint8_t *arena, unsigned int per,
                                                           const lone_finish *lf)
{
    const unsigned int lane = threadIdx.x % GP_UNIT_LANES;
    const unsigned int mask = (unsigned int)((((uint64_t)1 << GP_UNIT_LANES) - 1)
                                             << (threadIdx.x & 31u & ~(GP_UNIT_LANES - 1)));
    int skip = 0;   /* the planned finish, when it ran */

    if (threadIdx.x % per >= GP_UNIT_LANES)
        return;
    if (lf->planned && lf->f.kind != GP_FOLD_HORNER) {
        const batch_ptrs &p = lf->p;
        gp_lane_mac t;

        GP_PROBE_AFTER(GP_PROBE_FINREF, lf->f.pow.w[0]);
        if (gp_alg_is_aead(p.k->alg)) {
            gp_fold_lane_planned(p.k->alg, &lf->f, p.st, &p.w->job, p.partials, &t);
            GP_PROBE(GP_PROBE_FOLD);
        } else {
            gp_lane_mac_zero(&t);
        }
        batch_ref_end(p, lane, mask, t);
        skip = 1;
    }
    lone_finishing_refs(refs, nrefs, work, arena, per, [&](const batch_ptrs &p) {
        if (!skip)
            batch_ref_finish(p, lane, mask);
        skip = 0;
        return true;
    });
}

/* This block's share [*from, *from + return) of len bytes, in 16-byte multiples. */
static __device__ __forceinline__ uint64_t lone_share(uint64_t len, uint64_t *from)
{
    const uint64_t per = (len + 16u * gridDim.x - 1) / (16u * gridDim.x) * 16u;

    *from = per * blockIdx.x;
    return *from < len ? (len - *from < per ? len - *from : per) : 0;
}

/* dst = src over this block's share of len bytes (src 0: zeros), then (wipe) src cleared. */
static __device__ __forceinline__ void lone_move(uint64_t dst, uint64_t src, uint64_t len, int wipe)
{
    uint64_t from;
    const uint64_t n = lone_share(len, &from);

    if (n == 0)
        return;
    {
        const gp_copy c = { src != 0 ? src + from : 0, dst + from, n, 0, 0 };

        copy_piece(c);
    }
    if (wipe) {
        const gp_copy z = { 0, src + from, n, 0, 0 };

        __syncthreads();   /* every thread's reads of the share are done */
        copy_piece(z);
    }
}
#endif

extern "C" __global__ void __launch_bounds__(GP_LATENCY_BLOCK, 1)
gp_lone_kernel(const gp_lone_args a)
{
#if __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    uint8_t *arena = (uint8_t *)(uintptr_t)a.dev;
    const unsigned int lane = threadIdx.x % GP_UNIT_LANES;
    const unsigned int mask = (unsigned int)((((uint64_t)1 << GP_UNIT_LANES) - 1)
                                             << (threadIdx.x & 31u & ~(GP_UNIT_LANES - 1)));
    const unsigned int groups = gridDim.x * (blockDim.x / GP_UNIT_LANES);
    uint64_t from;
    const uint64_t n = lone_share(a.in_len, &from), nv = n / 16;   /* in_len: 16-byte multiple */
    const uint4 *src = (const uint4 *)(uintptr_t)(a.host + from);
    uint4 *dst = (uint4 *)(arena + from), first = make_uint4(0, 0, 0, 0);
    gp_unit_ref *refs = (gp_unit_ref *)arena;
    gp_work *work = (gp_work *)(arena + a.work_off);
    const unsigned int per = batch_spreads(a.nrefs, a.flags) ? GP_SPREAD_THREADS : GP_UNIT_LANES;
    const int spread = per != GP_UNIT_LANES;
    lone_finish fin;

    GP_PROBE_BLOCK_START();
    GP_PROBE(GP_PROBE_ENTRY);
    if (threadIdx.x < nv)
        first = src[threadIdx.x];   /* in flight across PCIe during the fill */
    if (a.flags & GP_BATCH_AES) {
        gp_aes_tt_fill();
        GP_PROBE(GP_PROBE_TABLE);
    }
    if (threadIdx.x < nv)
        dst[threadIdx.x] = first;
    for (uint64_t v = threadIdx.x + blockDim.x; v < nv; v += blockDim.x)
        dst[v] = src[v];
    GP_PROBE_AFTER(GP_PROBE_COPYIN, first.x);
    cluster.sync();
    if (spread)
        batch_run_spread(refs, a.nrefs, work, arena, false);
    else
        for (unsigned int r = threadIdx.x / GP_UNIT_LANES * gridDim.x + blockIdx.x; r < a.nrefs; r += groups)
            batch_ref(refs + r, lane, mask, work, arena, false);
    batch_lone_plan(refs, a.nrefs, work, arena, per, &fin);
    cluster.sync();
    GP_PROBE(GP_PROBE_BARRIER);
    batch_lone_finishes(refs, a.nrefs, work, arena, per, &fin);
    cluster.sync();
    lone_move(a.host + a.res_off, a.dev + a.res_off, a.res_len, 1);
    lone_move(a.dev + a.wipe_off, 0, a.res_off - a.wipe_off, 0);
    lone_move(a.dev + a.res_off + a.res_len, 0, a.wipe_off + a.wipe_len - a.res_off - a.res_len, 0);
    block_says_done(a.done, a.ticket);
#else
    (void)a;   /* never launched: kernels/launch.h gp_lone_prepare leaves lone launches off */
#endif
}

/*
 * Stream-ordered device mode (batching/cuda/ordered.c): one request's descriptors, from the launch's
 * parameter into its message's device block, so that the batch kernel launched after it on the
 * caller's stream finds them there: the work descriptor, the refs (units first, then the lead, then
 * the claim counter, as batching/cuda/plan.c orders them), zeroed span counters, the carried AAD
 * and, for ChaCha20-Poly1305, the message's powers of r. The kernels that follow on the stream see
 * these writes (a kernel's writes are visible to the launches after it in its stream).
 */
extern "C" __global__ void __launch_bounds__(GP_COPY_BLOCK) gp_ordered_kernel(const gp_ordered_args a)
{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    const uint32_t n = a.work.job.nunits;
    gp_unit_ref *refs = (gp_unit_ref *)(uintptr_t)a.refs_at;

    for (uint32_t i = t; i < n + 2; i += stride) {
        gp_unit_ref r;

        r.work = 0;
        r.unit = i < n ? i : i == n ? GP_UNIT_LEAD : 0u;
        refs[i] = r;
    }
    for (uint32_t i = t; i < a.work.job.nspans; i += stride)
        ((unsigned int *)(uintptr_t)a.spans_at)[i] = 0u;
    for (uint32_t i = t; i < a.aad_len; i += stride)
        ((uint8_t *)(uintptr_t)a.aad_at)[i] = a.aad[i];
    if (a.pows_at != 0)
        for (uint32_t i = t; i < (uint32_t)(sizeof(gp_mac_pows) / 4); i += stride)
            ((uint32_t *)(uintptr_t)a.pows_at)[i] = ((const uint32_t *)&a.pows)[i];
    if (t == 0)
        *(gp_work *)(uintptr_t)a.work_at = a.work;
}

/*
 * A stream-ordered batch pass (batching/cuda/ordered.c): every work's descriptors, as
 * gp_ordered_kernel writes one request's, from the launch's parameter into the lead message's
 * block. Blocks (x, y) serve work y: its refs (units first, then the lead, work index y), its zeroed
 * span counters, its carried AAD and powers; block (0, 0) also the claim counter.
 */
extern "C" __global__ void __launch_bounds__(GP_COPY_BLOCK) gp_ordered_batch_kernel(const gp_ordered_batch_args a)
{
    const unsigned int w = blockIdx.y, t = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    const gp_work *wk = &a.work[w];
    const uint32_t n = wk->job.nunits;
    uint8_t *base = (uint8_t *)(uintptr_t)a.base;
    gp_unit_ref *refs = (gp_unit_ref *)(uintptr_t)a.refs_at + a.ref_first[w];
    const uint8_t *extra = a.extra + a.extra_at[w];

    if (w >= a.nworks)
        return;
    for (uint32_t i = t; i < n + 1; i += stride) {
        gp_unit_ref r;

        r.work = w;
        r.unit = i < n ? i : GP_UNIT_LEAD;
        refs[i] = r;
    }
    for (uint32_t i = t; i < wk->job.nspans; i += stride)
        ((unsigned int *)(base + wk->spans_off))[i] = 0u;
    for (uint32_t i = t; i < wk->job.aad_len; i += stride)
        base[wk->job.aad_off + i] = extra[i];
    if (wk->pows_off != 0) {
        const uint32_t *pw = (const uint32_t *)(extra + ((wk->job.aad_len + 15u) & ~15u));

        for (uint32_t i = t; i < (uint32_t)(sizeof(gp_mac_pows) / 4); i += stride)
            ((uint32_t *)(base + wk->pows_off))[i] = pw[i];
    }
    if (t == 0) {
        ((gp_work *)(uintptr_t)a.works_at)[w] = *wk;
        if (w == 0) {
            gp_unit_ref c;

            c.work = 0;
            c.unit = 0;
            ((gp_unit_ref *)(uintptr_t)a.refs_at)[a.nrefs] = c;
        }
    }
}
