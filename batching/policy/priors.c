/* SPDX-License-Identifier: Apache-2.0 */
/* The hybrid policy's numbers as measured on the machine classes the project has run, for a host that has measured none yet. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "batching/policy/internal.h"

/*
 * Why: on a fresh host the first message is routed before any measurement exists, and a message
 * cannot move once it runs on the CPU (the default provider keeps its MAC state). Where the GPU
 * and the CPU's code class are ones the project has measured, their numbers route that message as
 * a measured host would. Each number is the median of that field over the calibrations in
 * bench/data/calib-h200.txt (bench/RESULTS.md, "The first run on a fresh host"); gpuprov-calibrate
 * measures the host itself, and its numbers (or a process's own measurement) replace these.
 *
 * What a class covers: the driver's Model string of every GPU in the host (all alike) and the
 * code class of the cores (gp_machine_cpu_class: what the default provider's fastest AES-GCM and
 * ChaCha20 paths need). The H100 (SXM) is the H200's GH100 die on the same PCIe 5 link: its
 * forced-GPU figures are the H200's within a few percent (bench/RESULTS.md), so the H200's numbers
 * stand for it. Only the default shape of the GPU path (four slots a GPU) is covered.
 *
 * batch_gbps (a lone caller's batch of 16 KiB messages past its round trip) came later: the VAES
 * class's is the median of the three calibrations that recorded it (bench/data/calib-h200.txt,
 * third session). The AVX2 class's, where every one of its calibrations took gpu_gbps from that
 * batch (min_gpu_bytes at or below 16 KiB: hybrid.c's calibrate), is the median over them of 1 MiB
 * over the time of a 1 MiB batch (1 MiB / gpu_gbps) less the round trip (rt_us), else 0 (not
 * known: rule 2 weighs a batch as one message until the host is measured).
 */

typedef struct prior_alg {
    double cpu_gbps, gpu_gbps, rt_us;
    size_t min_gpu_bytes, lone_gpu_bytes;
    double share;
    double batch_gbps;
} prior_alg;

typedef struct prior_class {
    const char *name;             /* for the stats line */
    const char *models[3];        /* the driver's Model strings it covers (NULL-ended) */
    const char *cpu_class;        /* gp_machine_cpu_class */
    prior_alg alg[5];             /* by enum gp_alg */
} prior_class;

static const prior_class classes[] = {
    { "H100/H200, VAES + AVX-512 cores", { "NVIDIA H200", "NVIDIA H100 80GB HBM3", NULL }, "vaes-avx512",
      { [GP_ALG_AES_CTR] = { 6.3, 18.03, 21.1, 34790, 1325000, 0.75, 4.22 },
        [GP_ALG_AES_GCM] = { 9.81, 17.88, 29.25, 72410, 2309000, 0.64, 3.21 },
        [GP_ALG_CHACHA20] = { 4.08, 18.16, 16.5, 16930, 209700, 0.79, 4.07 },
        [GP_ALG_CHACHA20_POLY1305] = { 2.505, 3.53, 18.4, 5765, 116200, 0.575, 3.51 } } },
    { "H100/H200, AVX2 cores", { "NVIDIA H200", "NVIDIA H100 80GB HBM3", NULL }, "avx2",
      { [GP_ALG_AES_CTR] = { 6.56, 18.68, 19.8, 33560, 1321000, 0.74, 0 },
        [GP_ALG_AES_GCM] = { 3.19, 3.64, 28.1, 8984, 454500, 0.56, 0 },
        [GP_ALG_CHACHA20] = { 2.39, 3.75, 15.4, 2273, 61650, 0.62, 3.967 },
        [GP_ALG_CHACHA20_POLY1305] = { 1.59, 3.99, 17.5, 1885, 38370, 0.71, 4.259 } } },
};

int gp_prior_numbers(gp_policy *p, const gp_executor *gpu, gp_calib_numbers out[5], const char **name)
{
    char model[200];
    const char *cpu = gp_machine_cpu_class();
    const gp_knobs *k = p->knobs;
    const long long now = (long long)time(NULL);

    memset(out, 0, 5 * sizeof(out[0]));
    *name = NULL;
    if (!k->priors || (k->streams != 0 && k->streams != 4))
        return 0;
    /* The numbers are the cuda executor's; the host executor takes them only in test builds,
     * standing in for a GPU whose model a test hook names. */
#if GP_TEST_HOOKS
    if (gpu != p->ops->cuda && !(gpu == p->ops->host && k->test.gpu_model[0] != '\0'))
        return 0;
#else
    if (gpu != p->ops->cuda)
        return 0;
#endif
    if (!gp_machine_gpu_model(p, model, sizeof(model)))
        return 0;
    for (size_t c = 0; c < sizeof(classes) / sizeof(classes[0]); c++) {
        const prior_class *pc = &classes[c];
        int covered = 0;

        for (size_t m = 0; m < 3 && pc->models[m] != NULL; m++)
            covered |= strcmp(pc->models[m], model) == 0;
        if (!covered || strcmp(pc->cpu_class, cpu) != 0)
            continue;
        for (int a = 1; a < 5; a++) {
            const prior_alg *pa = &pc->alg[a];

            out[a] = (gp_calib_numbers){ .have = 1, .keylen = a == GP_ALG_AES_CTR ? 16 : 32, .at = now,
                                         .cpu_gbps = pa->cpu_gbps, .gpu_gbps = pa->gpu_gbps, .gpu_rt_us = pa->rt_us,
                                         .min_gpu_bytes = pa->min_gpu_bytes, .lone_gpu_bytes = pa->lone_gpu_bytes,
                                         .gpu_share = pa->share, .batch_gbps = pa->batch_gbps };
        }
        *name = pc->name;
        return 4;
    }
    return 0;
}
