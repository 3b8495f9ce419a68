/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel benchmark: the batch kernel on device-resident data, GB/s against the copy ceiling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cuda_check.h"
#include "kernels/launch.h"

/*
 * usage: kernel_bench [total MiB] [message KiB] [iterations] [grid cap]   (defaults 256 16 20 0)
 *        kernel_bench mix LEN[xN],LEN[xN],... [iterations]   (one batch of mixed lengths, in bytes)
 * One arena holds `total / message` messages (or the mix's) of one cipher and key (one key
 * schedule, as the engine's per-key reuse intends); the plan, states and inputs are copied once,
 * then each timed launch (CUDA events around the kernel alone) encrypts every message from a
 * restored state. The ceiling is a device-to-device copy of the same bytes (read + write each
 * byte once): the floor for any kernel that reads the input and writes the output once.
 */

/* Launch flags every run adds (the lone rows run with and without GP_BATCH_NARROW). */
static unsigned int extra_flags;
/* run() launches gp_lone_kernel (a small batch's one launch: its image brought from pinned memory,
 * its results taken back there) instead of the batch kernel. */
static int lone_launch;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;

    return (x > y) - (x < y);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint8_t rand_byte(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)rng;
}

/* Where run() restores what its launches change: the refs' claim counter and the plans' done
 * counters (plan_off up to key_off), and the states. */
typedef struct restore_plan {
    uint8_t *dev, *backup;
    size_t plan_off, key_off, states_off, out_off;
} restore_plan;

/* Block, AES table layout and grid cap (gp_kernel_prepare), as the cuda executor launches. */
static gp_kernel_shape shape;

#if defined(GP_PHASE_PROBE)
/*
 * Phase probes (kernels/probe.h; bench/kernel_variant.sh with GPU_DEFS=-DGP_PHASE_PROBE): each
 * launch's stamps reduced over its warps, as offsets from its first block's start, and their
 * medians over the timed launches of the last launch_median_ms().
 */
void *gp_probe_slots_address(void);   /* kernels/batch_kernel.cu, probe builds */

static const char *const probe_names[GP_PROBE_N] = {
    "block starts", "AES table filled", "image copied in", "ref starts", "chunk loaded", "keystream made",
    "keystream stored", "lane MAC made", "partial stored", "unit counted", "lead ran", "units' barrier",
    "finisher's key in", "finisher fenced",
    "fold inputs in", "fold share made", "fold summed", "finish ran",
    "thread exits",
};
/* [it][k * GP_PROBE_N + i]: k = 0 earliest first pass (ns), 1 latest last pass (ns), 2 latest
 * cycles since a block's start; -1: probe i never passed */
static double probe_runs[64][3 * GP_PROBE_N];
static int probe_nruns;
static gp_probe_slot probe_got[GP_PROBE_N][GP_PROBE_WARPS];

static void probe_reset(void)
{
    CHECK(cudaMemset(gp_probe_slots_address(), 0, sizeof(probe_got)));
}

static void probe_take(int it)
{
    unsigned long long base = ~0ULL;

    CHECK(cudaMemcpy(probe_got, gp_probe_slots_address(), sizeof(probe_got), cudaMemcpyDeviceToHost));
    if (it < 0 || it >= 64)
        return;
    for (unsigned int w = 0; w < GP_PROBE_WARPS; w++)
        if (probe_got[GP_PROBE_ENTRY][w].first_ns != 0 && probe_got[GP_PROBE_ENTRY][w].first_ns < base)
            base = probe_got[GP_PROBE_ENTRY][w].first_ns;
    for (int i = 0; i < GP_PROBE_N; i++) {
        unsigned long long first = ~0ULL, last = 0, cyc = 0;

        for (unsigned int w = 0; w < GP_PROBE_WARPS; w++) {
            const gp_probe_slot *sl = &probe_got[i][w];

            if (sl->first_ns == 0)
                continue;
            first = sl->first_ns < first ? sl->first_ns : first;
            last = sl->last_ns > last ? sl->last_ns : last;
            cyc = sl->last_cycles > cyc ? sl->last_cycles : cyc;
        }
        probe_runs[it][i] = first != ~0ULL ? (double)(first - base) : -1;
        probe_runs[it][GP_PROBE_N + i] = first != ~0ULL ? (double)(last - base) : -1;
        probe_runs[it][2 * GP_PROBE_N + i] = first != ~0ULL ? (double)cyc : -1;
    }
    probe_nruns = it + 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The medians of the last launches' stamps, a line per probe point that was passed. */
static void probe_print(double clock_khz)
{
    double v[64];

    printf("  phase probes, median of %d launches: first / last pass (ns from the first block's start), "
           "last pass (cycles from its block's start, as ns at %.0f MHz)\n", probe_nruns, clock_khz / 1e3);
    for (int i = 0; i < GP_PROBE_N; i++) {
        double med[3];

        for (int k = 0; k < 3; k++) {
            for (int it = 0; it < probe_nruns; it++)
                v[it] = probe_runs[it][k * GP_PROBE_N + i];
            qsort(v, (size_t)probe_nruns, sizeof(double), cmp_double);
            med[k] = v[probe_nruns / 2];
        }
        if (med[0] >= 0)
            printf("  %-18s %9.0f %9.0f %9.0f\n", probe_names[i], med[0], med[1], med[2] / clock_khz * 1e6);
    }
}
#endif

/*
 * gp_lone_kernel as the cuda executor launches a small batch alone (batching/cuda/launch.c): the
 * arena's image [0, in_len) in mapped pinned memory, brought in by the launch itself, states and
 * outputs taken back there, the device arena cleared. The pinned states are restored from `image`
 * before each launch (the last launch's results overwrite them).
 */
typedef struct lone_image {
    const gp_lone_args *la;
    unsigned int blocks;
    uint8_t *pin;
    const uint8_t *image;
} lone_image;

/*
 * Median time (ms) of the batch kernel over `nrefs` refs (which build, grid and shared memory as
 * the cuda executor launches it, kernels/launch.h gp_kernel_geometry), or of the lone launch `lone`
 * when given, CUDA events around the launch alone, after two warm-up launches; `rp`, when given,
 * restores fresh plans and states before each.
 */
static float launch_median_ms(void **args, size_t nrefs, unsigned int flags, int iters, const restore_plan *rp,
                              const lone_image *lone)
{
    cudaEvent_t t0, t1;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    float *ms = calloc((size_t)iters, sizeof(float)), med;
    dim3 block, blocks;
    size_t smem;
    const void *kernel = gp_kernel_geometry(nrefs, flags, &shape, &blocks, &block, &smem);
    void *lone_args[] = { lone != NULL ? (void *)lone->la : NULL };

    if (ms == NULL) {
        fprintf(stderr, "kernel_bench: out of memory\n");
        exit(1);
    }
    if (lone != NULL)
        gp_lone_config(&shape, lone->blocks, 0, &cfg, &attr);
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    for (int it = -2; it < iters; it++) {
        if (lone != NULL)
            memcpy(lone->pin + lone->la->res_off, lone->image + lone->la->res_off,
                   lone->la->in_len - lone->la->res_off);
        if (rp != NULL) {
            CHECK(cudaMemcpy(rp->dev + rp->plan_off, rp->backup + rp->plan_off, rp->key_off - rp->plan_off,
                             cudaMemcpyDeviceToDevice));
            CHECK(cudaMemcpy(rp->dev + rp->states_off, rp->backup + rp->states_off,
                             rp->out_off - rp->states_off, cudaMemcpyDeviceToDevice));
        }
#if defined(GP_PHASE_PROBE)
        probe_reset();
#endif
        CHECK(cudaEventRecord(t0, 0));
        if (lone != NULL)
            CHECK(cudaLaunchKernelExC(&cfg, (const void *)gp_lone_kernel, lone_args));
        else
            CHECK(cudaLaunchKernel(kernel, blocks, block, args, smem, 0));
        CHECK(cudaEventRecord(t1, 0));
        CHECK(cudaEventSynchronize(t1));
        CHECK(cudaGetLastError());
        if (it >= 0)
            CHECK(cudaEventElapsedTime(&ms[it], t0, t1));
#if defined(GP_PHASE_PROBE)
        probe_take(it);
#endif
    }
    qsort(ms, (size_t)iters, sizeof(float), cmp_float);
    med = ms[iters / 2];
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    free(ms);
    return med;
}

/*
 * The last launch's output of the first, a middle and the last message, and its tag for an AEAD,
 * against the host executor's run of the same message (the bitsliced AES and the serial MAC):
 * a timing of a kernel that computes the wrong bytes is no figure. Exits on a mismatch.
 */
static void check_outputs(uint32_t alg, const gp_key_sched *ks, size_t ivlen, const uint8_t *host,
                          const uint8_t *dev, const gp_work *work, size_t nmsg, const size_t *lens)
{
    const size_t pick[3] = { 0, nmsg / 2, nmsg - 1 };
    size_t most = 0;
    uint8_t *want, *got, iv[16] = { 0 }, tag[16];
    gp_msg_state st, dst;

    for (int p = 0; p < 3; p++)
        most = lens[pick[p]] > most ? lens[pick[p]] : most;
    want = malloc(most + 1);
    got = malloc(most + 1);
    if (want == NULL || got == NULL) {
        fprintf(stderr, "kernel_bench: out of memory\n");
        exit(1);
    }
    for (int p = 0; p < 3; p++) {
        const size_t i = pick[p], msg = lens[i];

        if (p > 0 && i == pick[p - 1])
            continue;   /* fewer than three messages */
        iv[0] = (uint8_t)i;   /* as run() made message i's IV */
        iv[1] = (uint8_t)(i >> 8);
        iv[2] = (uint8_t)(i >> 16);
        gp_msg_begin(&st, ks, iv, ivlen);
        gp_msg_run(&st, ks, GP_OP_ENCRYPT, host + work[i].in_off, want, msg);
        CHECK(cudaMemcpy(got, dev + work[i].out_off, msg, cudaMemcpyDefault));   /* device or pinned */
        CHECK(cudaMemcpy(&dst, dev + work[i].state_off, sizeof(dst), cudaMemcpyDefault));
        if (memcmp(want, got, msg) != 0) {
            fprintf(stderr, "kernel_bench: alg %u message %zu: the GPU's output differs from the host's\n", alg, i);
            exit(1);
        }
        if (gp_alg_is_aead(alg)) {
            gp_msg_run(&st, ks, GP_OP_TAG, NULL, tag, 0);
            if (!dst.spec_valid || memcmp(tag, dst.spec_tag, sizeof(tag)) != 0) {
                fprintf(stderr, "kernel_bench: alg %u message %zu: the GPU's tag differs from the host's\n", alg, i);
                exit(1);
            }
        }
    }
    free(want);
    free(got);
}

static float run(uint32_t alg, size_t keylen, size_t ivlen, size_t nmsg, const size_t *lens, int iters,
                 size_t *units_out)
{
    gp_key_sched ks;
    uint8_t key[32], iv[16];
    size_t nrefs = 0, refs_off = 0, work_off, spans_off, key_off, key_stride, mma_off, in_off, part_off, states_off, out_off;
    size_t total, nspans = 0, in_bytes = 0, part_bytes = 0, units = 0;
    uint8_t *host, *dev, *backup;
    gp_unit_ref *refs;
    gp_work *work;
    gp_job job;
    gp_msg_state st;
    int use_mma = 0;
    float med;

    for (int i = 0; i < 32; i++)
        key[i] = rand_byte();
    gp_key_schedule(&ks, alg, key, keylen);
    memset(iv, 0, sizeof(iv));
    /* The batch's refs, span counters, inputs and partials, as batching/cuda/plan.c plans them. */
    for (size_t i = 0; i < nmsg; i++) {
        gp_msg_begin(&st, &ks, iv, ivlen);
        gp_job_plan(&job, &st, GP_OP_ENCRYPT, lens[i], 0);
        nrefs += !gp_lead_idle(&job, &st) + job.nunits;
        units += job.nunits;
        nspans += job.nspans;
        use_mma |= gp_ghash_mma_wanted(alg, job.nunits, UINT64_MAX, 0);   /* any that might take one */
        in_bytes += (lens[i] + 127) & ~(size_t)127;
        part_bytes += ((size_t)gp_partials_bytes(&job) + 127) & ~(size_t)127;
    }
    /* One key schedule per message: ChaCha20-Poly1305's carries its message's powers of r, as
     * the engine's batches do (batching/cuda/plan.c); the others are copies of one. */
    key_stride = (GP_KEY_SCHED_DEVICE_BYTES + 127) & ~(size_t)127;
    work_off = (refs_off + (nrefs + 1) * sizeof(gp_unit_ref) + 127) & ~(size_t)127;   /* + claim counter */
    spans_off = work_off + nmsg * sizeof(gp_work);   /* span counters, restored with the plan */
    key_off = spans_off + nspans * sizeof(uint32_t);
    key_off = (key_off + 127) & ~(size_t)127;
    mma_off = key_off + nmsg * key_stride;
    in_off = mma_off + (use_mma ? sizeof(gp_ghash_mma) : 0);
    part_off = in_off + in_bytes;
    states_off = part_off + part_bytes;
    out_off = states_off + nmsg * ((sizeof(gp_msg_state) + 127) & ~(size_t)127);
    total = out_off + in_bytes;
    host = malloc(total);
    if (host == NULL) {
        fprintf(stderr, "kernel_bench: out of memory\n");
        exit(1);
    }
    refs = (gp_unit_ref *)(host + refs_off);
    work = (gp_work *)(host + work_off);
    if (use_mma)
        gp_ghash_mma_make((gp_ghash_mma *)(host + mma_off), ks.gcm_h);
    for (size_t i = 0, r = 0, in_at = 0, part_at = 0, span_at = 0; i < nmsg; i++) {
        iv[0] = (uint8_t)i;
        iv[1] = (uint8_t)(i >> 8);
        iv[2] = (uint8_t)(i >> 16);
        gp_msg_begin(&st, &ks, iv, ivlen);
        gp_job_plan(&job, &st, GP_OP_ENCRYPT, lens[i], 0);
        memset(&work[i], 0, sizeof(work[i]));
        work[i].job = job;
        work[i].key_off = key_off + i * key_stride;
        memcpy(host + work[i].key_off, &ks, GP_KEY_SCHED_DEVICE_BYTES);
        if (job.nunits > 0 && alg == GP_ALG_CHACHA20_POLY1305)
            (void)gp_request_pows(&ks, &st, &((gp_key_sched *)(host + work[i].key_off))->mac_pows);
        work[i].state_off = states_off + i * ((sizeof(gp_msg_state) + 127) & ~(size_t)127);
        work[i].in_off = in_off + in_at;
        work[i].out_off = out_off + in_at;
        work[i].partials_off = part_off + part_at;
        /* GCM's tensor-core matrix where the cuda executor would give one (kernels/ghash_mma.h):
         * one key, one copy. */
        work[i].ghmma_off = use_mma && gp_ghash_mma_wanted(alg, job.nunits, units, gp_kernel_warps_at_once(&shape))
                            ? mma_off : 0;
        work[i].spans_off = (uint32_t)(spans_off + span_at * sizeof(uint32_t));
        memset(host + work[i].spans_off, 0, job.nspans * sizeof(uint32_t));
        in_at += (lens[i] + 127) & ~(size_t)127;
        part_at += ((size_t)gp_partials_bytes(&job) + 127) & ~(size_t)127;
        span_at += job.nspans;
        const int lead = gp_work_plan_lead(&work[i], &st, (uint32_t *)(host + work[i].spans_off));   /* as cuda/plan.c */

        memcpy(host + work[i].state_off, &st, sizeof(st));
        for (uint32_t u = 0; u < job.nunits; u++) {   /* units first, the lead last, as cuda/plan.c */
            refs[r].work = (uint32_t)i;
            refs[r++].unit = u;
        }
        if (lead) {
            refs[r].work = (uint32_t)i;
            refs[r++].unit = GP_UNIT_LEAD;
        }
    }
    refs[nrefs].work = 0;   /* the claim counter (kernels/batch_abi.h) */
    refs[nrefs].unit = 0;
    for (size_t i = 0; i < in_bytes; i++)
        host[in_off + i] = rand_byte();

    CHECK(cudaMalloc((void **)&dev, total));
    CHECK(cudaMalloc((void **)&backup, total));
    CHECK(cudaMemcpy(dev, host, total, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(backup, dev, total, cudaMemcpyDeviceToDevice));
    {
        gp_unit_ref *drefs = (gp_unit_ref *)(dev + refs_off);
        gp_work *dwork = (gp_work *)(dev + work_off);
        unsigned int nr = (unsigned int)nrefs;
        unsigned int flags = (alg == GP_ALG_AES_CTR || alg == GP_ALG_AES_GCM ? GP_BATCH_AES : 0) | extra_flags;
        void *args[] = { &drefs, &nr, &dwork, &dev, &flags };
        restore_plan rp = { dev, backup, refs_off, key_off, states_off, out_off };

        if (!lone_launch) {
            med = launch_median_ms(args, nrefs, flags, iters, &rp, NULL);
        } else {
            /* As batching/cuda/plan.c lays a lone batch out: in [0, out_off); results = states and
             * outputs; cleared on the device from the first key on. */
            uint8_t *pin;
            void *pin_dev, *done_dev;
            uint64_t *done;   /* the blocks' last writes, as the executor has them (events time it here) */
            const unsigned int blocks = nrefs < GP_LONE_MAX_BLOCKS ? (unsigned int)nrefs : GP_LONE_MAX_BLOCKS;

            CHECK(cudaHostAlloc((void **)&pin, total, cudaHostAllocMapped));
            CHECK(cudaHostGetDevicePointer(&pin_dev, pin, 0));
            CHECK(cudaHostAlloc((void **)&done, GP_LONE_MAX_BLOCKS * sizeof(*done), cudaHostAllocMapped));
            CHECK(cudaHostGetDevicePointer(&done_dev, done, 0));
            memset(done, 0, GP_LONE_MAX_BLOCKS * sizeof(*done));
            memcpy(pin, host, total);
            const gp_lone_args la = { (uint64_t)(uintptr_t)dev, (uint64_t)(uintptr_t)pin_dev, work_off, out_off,
                                      states_off, total - states_off, key_off, total - key_off,
                                      (uint64_t)(uintptr_t)done_dev, 1, nr, flags };

            const lone_image ll = { &la, blocks, pin, host };

            med = launch_median_ms(args, nrefs, flags, iters, NULL, &ll);
            check_outputs(alg, &ks, ivlen, host, pin, work, nmsg, lens);
            for (unsigned int b = 0; b < blocks; b++)
                if (((volatile uint64_t *)done)[b] != 1) {
                    fprintf(stderr, "FAIL: block %u of the lone launch did not set its done word\n", b);
                    exit(1);
                }
            CHECK(cudaFreeHost(done));
            CHECK(cudaFreeHost(pin));
        }
    }
    if (!lone_launch)
        check_outputs(alg, &ks, ivlen, host, dev, work, nmsg, lens);
    *units_out = nrefs * GP_UNIT_LANES;   /* threads launched */
    cudaFree(dev);
    cudaFree(backup);
    free(host);
    return med;
}

/* Median device-to-device copy time of `bytes` (ms). */
static float copy_ms(size_t bytes, int iters)
{
    uint8_t *a, *b;
    cudaEvent_t t0, t1;
    float *ms = calloc((size_t)iters, sizeof(float)), med;

    CHECK(cudaMalloc((void **)&a, bytes));
    CHECK(cudaMalloc((void **)&b, bytes));
    CHECK(cudaMemset(a, 1, bytes));
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    for (int it = -2; it < iters; it++) {
        CHECK(cudaEventRecord(t0, 0));
        CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(t1, 0));
        CHECK(cudaEventSynchronize(t1));
        if (it >= 0)
            CHECK(cudaEventElapsedTime(&ms[it], t0, t1));
    }
    qsort(ms, (size_t)iters, sizeof(float), cmp_float);
    med = ms[iters / 2];
    cudaFree(a);
    cudaFree(b);
    free(ms);
    return med;
}

/* The batch kernel's arguments for a launch with no units: one block that only returns, or fills
 * the AES table first when `flags` says so. */
typedef struct empty_launch {
    gp_unit_ref *drefs;
    unsigned int nr;
    gp_work *dwork;
    uint8_t *dev;
    unsigned int flags;
    void *args[5];
} empty_launch;

static void empty_launch_init(empty_launch *l, unsigned int flags)
{
    memset(l, 0, sizeof(*l));
    l->flags = flags;
    l->args[0] = &l->drefs;
    l->args[1] = &l->nr;
    l->args[2] = &l->dwork;
    l->args[3] = &l->dev;
    l->args[4] = &l->flags;
}

/* The empty launch's GPU time: the floor under every lone launch, events around it as in run(). */
static float empty_launch_ms(unsigned int flags, int iters)
{
    empty_launch l;

    empty_launch_init(&l, flags);
    return launch_median_ms(l.args, 0, flags, iters, NULL, NULL);
}

/*
 * The round trip a synchronous caller pays for one launch, by the host's clock: the empty launch
 * (no units) issued and waited for with cudaStreamSynchronize, median of `iters` after two warm-up
 * rounds. No device work is shorter, so no synchronous call into the GPU returns sooner.
 */
static double round_trip_us(unsigned int flags, int iters)
{
    empty_launch l;
    dim3 block, blocks;
    size_t smem;
    const void *kernel = gp_kernel_geometry(0, flags, &shape, &blocks, &block, &smem);
    float *us = calloc((size_t)iters, sizeof(float)), med;

    if (us == NULL) {
        fprintf(stderr, "kernel_bench: out of memory\n");
        exit(1);
    }
    empty_launch_init(&l, flags);
    for (int it = -2; it < iters; it++) {
        struct timespec a, b;

        clock_gettime(CLOCK_MONOTONIC, &a);
        CHECK(cudaLaunchKernel(kernel, blocks, block, l.args, smem, 0));
        CHECK(cudaStreamSynchronize(0));
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (it >= 0)
            us[it] = (float)((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3);
    }
    qsort(us, (size_t)iters, sizeof(float), cmp_float);
    med = us[iters / 2];
    free(us);
    return med;
}

/* The last run's phase probes, cycles at the peak SM clock (probe builds; otherwise nothing). */
static void print_probes(void)
{
#if defined(GP_PHASE_PROBE)
    int khz = 0;

    CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    probe_print((double)khz);
#endif
}

/* A mix "LEN[xN],LEN[xN],...": message lengths in bytes, each N times (1 without xN), in batch
 * order. The number of messages, 0 if the list is malformed; *lens and *total are set. */
static size_t parse_mix(const char *spec, size_t **lens, size_t *total)
{
    size_t n = 0, cap = 0;
    const char *p = spec;

    *lens = NULL;
    *total = 0;
    while (*p != '\0') {
        char *end;
        unsigned long len = strtoul(p, &end, 10), times = 1;

        if (end == p)
            return 0;
        if (*end == 'x') {
            p = end + 1;
            times = strtoul(p, &end, 10);
            if (end == p || times == 0)
                return 0;
        }
        if (*end != ',' && *end != '\0')
            return 0;
        for (unsigned long k = 0; k < times; k++) {
            if (n == cap) {
                size_t *grown = realloc(*lens, (cap = cap != 0 ? 2 * cap : 64) * sizeof(**lens));

                if (grown == NULL)
                    return 0;   /* *lens stays the caller's to free */
                *lens = grown;
            }
            (*lens)[n++] = len;
            *total += len;
        }
        p = *end == ',' ? end + 1 : end;
    }
    return *total > 0 ? n : 0;
}

int main(int argc, char **argv)
{
    static const struct { const char *name; uint32_t alg; size_t keylen, ivlen; } ciphers[] = {
        { "AES-128-CTR", GP_ALG_AES_CTR, 16, 16 },
        { "AES-256-GCM", GP_ALG_AES_GCM, 32, 12 },
        { "ChaCha20-Poly1305", GP_ALG_CHACHA20_POLY1305, 32, 12 },
    };
    /* kernel_bench mix LENS [iterations]: one batch of the messages LENS lists (parse_mix), each
     * cipher, no lone rows: a batch of mixed sizes, as a pipeline call of tensors makes. */
    const int mix = argc > 2 && strcmp(argv[1], "mix") == 0;
    size_t *lens = NULL, total = 0, nmsg = 0, msg = 0, total_mib = 0;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    /* grid cap: 0 = what the GPU holds at once, as the cuda executor launches; N = at most N blocks
     * (a large N gives every lane group one ref of its own, for comparison) */
    unsigned long cap = !mix && argc > 4 ? strtoul(argv[4], NULL, 10) : 0;
    struct cudaDeviceProp prop;
    float cms;

    if (mix) {
        nmsg = parse_mix(argv[2], &lens, &total);
        total_mib = total >> 20;
    } else {
        total_mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
        msg = (argc > 2 ? strtoul(argv[2], NULL, 10) : 16) * 1024;
        total = total_mib << 20;
        nmsg = msg != 0 ? total / msg : 0;
        if (nmsg > 0 && (lens = malloc(nmsg * sizeof(*lens))) != NULL)
            for (size_t i = 0; i < nmsg; i++)
                lens[i] = msg;
    }
    if (nmsg == 0 || lens == NULL || iters <= 0) {
        fprintf(stderr, "usage: kernel_bench [total MiB] [message KiB] [iterations] [grid cap]\n"
                        "       kernel_bench mix LEN[xN],LEN[xN],... [iterations]   (lengths in bytes)\n");
        free(lens);
        return 2;
    }
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CHECK(gp_kernel_prepare(&shape, 0));
    if (cap > 0)
        shape.max_grid = shape.max_grid_plain = cap > 0x7fffffffUL ? 0x7fffffffu : (unsigned int)cap;
    cms = copy_ms(total, iters);
    if (mix)
        printf("kernel_bench: %s (grid capped at %u blocks of %u threads, %s AES table), %zu messages of %zu bytes "
               "in all (%s), median of %d launches\n", prop.name, shape.max_grid, shape.block,
               shape.aes_smem == GP_AES_TT_WIDE_BYTES ? "wide 128 KiB" : "narrow 64 KiB", nmsg, total, argv[2], iters);
    else
        printf("kernel_bench: %s (grid capped at %u blocks of %u threads, %s AES table), %zu MiB as %zu messages of "
               "%zu KiB, median of %d launches\n", prop.name, shape.max_grid, shape.block,
               shape.aes_smem == GP_AES_TT_WIDE_BYTES ? "wide 128 KiB" : "narrow 64 KiB", total_mib, nmsg, msg / 1024,
               iters);
#if defined(GP_GHASH_MMA)
    printf("GCM GHASH: tensor cores for bodies of %u units and up in launches of %llu units and up\n",
           GP_GHASH_MMA_MIN_UNITS, (unsigned long long)gp_kernel_warps_at_once(&shape));
#else
    printf("GCM GHASH: integer multiplies (build option ghash_mma off)\n");
#endif
    printf("copy ceiling: device-to-device %.1f MiB in %.3f ms = %.1f GB/s of data (read + write)\n",
           (double)total / 1048576.0, cms, (double)total / cms / 1e6);
    printf("%-18s %10s %10s %12s %10s\n", "cipher", "threads", "ms", "GB/s", "of ceiling");
    for (size_t c = 0; c < sizeof(ciphers) / sizeof(ciphers[0]); c++) {
        size_t units;
        float ms = run(ciphers[c].alg, ciphers[c].keylen, ciphers[c].ivlen, nmsg, lens, iters, &units);

        printf("%-18s %10zu %10.3f %12.1f %9.1f%%\n", ciphers[c].name, units, ms,
               (double)total / ms / 1e6, 100.0 * cms / ms);
        printf("CSV,%s,%s,%zu,%zu,%.4f,%.2f,%.2f\n", prop.name, ciphers[c].name, total_mib, msg,
               ms, (double)total / ms / 1e6, (double)total / cms / 1e6);
        if (mix)
            print_probes();
    }
    if (mix) {
        free(lens);
        return 0;
    }
    /* One message alone in a launch: the kernel's share of a lone synchronous EVP call (events
     * around the launch, so launch overhead included; no copies), its units spread over 4 warps
     * each as the latency kernels run them (kernels/batch_kernel.cu), then a warp a unit. */
    for (int narrow = 0; narrow < 2 && nmsg > 1; narrow++)   /* one message: the run above */
        for (size_t c = 0; c < sizeof(ciphers) / sizeof(ciphers[0]); c++) {
            size_t units;
            float ms;

            extra_flags = narrow ? GP_BATCH_NARROW : 0;
            ms = run(ciphers[c].alg, ciphers[c].keylen, ciphers[c].ivlen, 1, lens, iters, &units);
            extra_flags = 0;
            printf("lone %zu KiB message: %-18s %8.1f us (%s)\n", msg / 1024, ciphers[c].name, ms * 1000.0,
                   narrow ? "a warp a unit" : "units spread");
            print_probes();
        }
    /* The same message as a lone synchronous call's one launch (gp_lone_kernel): copies across
     * PCIe in and out included, as the cuda executor runs a small batch alone in flight. */
    if (shape.lone_blocks > 0 && nmsg > 1)
        for (size_t c = 0; c < sizeof(ciphers) / sizeof(ciphers[0]); c++) {
            size_t units;
            float ms;

            /* The executor's lone launches hold a few refs; an AEAD body of more than GP_SPANS_FROM
             * units folds in spans, which only the batch kernel's counting makes. */
            if (gp_alg_is_aead(ciphers[c].alg) && gp_spans_of((uint32_t)(msg / GP_UNIT_BYTES)) != 0) {
                printf("lone %zu KiB message: %-18s (no lone launch: its MAC folds in spans)\n", msg / 1024,
                       ciphers[c].name);
                continue;
            }
            lone_launch = 1;
            ms = run(ciphers[c].alg, ciphers[c].keylen, ciphers[c].ivlen, 1, lens, iters, &units);
            lone_launch = 0;
            printf("lone %zu KiB message: %-18s %8.1f us (one cluster launch, pinned image in and out)\n",
                   msg / 1024, ciphers[c].name, ms * 1000.0);
            print_probes();
        }
    printf("empty launch (no units): %.1f us; with the AES table fill: %.1f us\n",
           empty_launch_ms(0, iters) * 1000.0, empty_launch_ms(GP_BATCH_AES, iters) * 1000.0);
    printf("round trip of the empty launch (host clock, launch + cudaStreamSynchronize): %.1f us\n",
           round_trip_us(0, iters < 200 ? 200 : iters));
    free(lens);
    return 0;
}
