/* SPDX-License-Identifier: Apache-2.0 */
/* Private to batching/policy/: what its files call of one another, one way (warm.c -> hybrid.c -> calib_cache.c, priors.c, share.c -> machine.c). */
#ifndef GP_POLICY_INTERNAL_H
#define GP_POLICY_INTERNAL_H

#include <sched.h>
#include <stdint.h>
#include <stdio.h>

#include "batching/base/base.h"
#include "batching/policy/policy.h"

/* The idle (idle + iowait) and all ticks of the CPUs in `set`, summed from the per-CPU lines of
 * /proc/stat's format read from f (warm.c); 0 if none of them is there. */
int gp_cpu_ticks_read(FILE *f, const cpu_set_t *set, uint64_t *idle, uint64_t *all);

/* Measure every algorithm now (the warm-up thread); `gpu` is the GPU-side executor. */
void gp_hybrid_warm(gp_policy *p, const gp_executor *gpu);

/* The persisted numbers (calib_cache.c): the user's own (knob calib_cache: what this user's
 * processes measured) and the machine's (knob calib_system: what gpuprov-calibrate --system
 * measured). The user's file for the numbers `gpu` would measure here, and its key; 0 when the
 * cache is off or the key cannot be known (no GPU reported by the driver). */
typedef enum gp_calib_where { GP_CALIB_USER, GP_CALIB_SYSTEM } gp_calib_where;
int gp_calib_cache_file(gp_policy *p, const gp_executor *gpu, char *path, size_t n, char *key, size_t keyn);
/* Read the valid entries into out[alg] (the rest zeroed); the number read, 0 when the file is
 * absent, unreadable, not this machine's, corrupt or stale as a whole, or (the machine's) writable
 * by anyone but root and this user. gp_calib_cache_read: the user's. */
int gp_calib_cache_read_from(gp_policy *p, const gp_executor *gpu, gp_calib_where where, gp_calib_numbers out[5]);
int gp_calib_cache_read(gp_policy *p, const gp_executor *gpu, gp_calib_numbers out[5]);
/* Replace the file with in[] (entries with `have`); 0 when it could not (never fatal). */
int gp_calib_cache_write(gp_policy *p, const gp_executor *gpu, const gp_calib_numbers in[5]);

/* The numbers measured on hosts of this one's class (priors.c): GPU model and cores' code class,
 * for `gpu` (the cuda executor; in test builds the host executor standing in for a GPU model a
 * test hook names). 4 with every algorithm's numbers in out[] and the class's name, else 0 (no
 * class covers this host, or knob priors is off). */
int gp_prior_numbers(gp_policy *p, const gp_executor *gpu, gp_calib_numbers out[5], const char **name);

/* The machine (machine.c), read without opening CUDA. The CPU's model and count; the code class
 * of its cores as the default provider uses them ("vaes-avx512", "avx2", "other"; OPENSSL_ia32cap
 * applied); each GPU the driver reports (model, UUID, bus) and CUDA_VISIBLE_DEVICES (0 if none);
 * the one model of them all (0 if none, or they differ; in test builds a hook may name it); the
 * driver's version ("unknown" if none). */
void gp_machine_cpu(char *out, size_t n);
const char *gp_machine_cpu_class(void);
int gp_machine_gpus(char *out, size_t n);
int gp_machine_gpu_model(gp_policy *p, char *out, size_t n);
void gp_machine_driver(char *out, size_t n);

/* A key naming the GPUs the cuda executor uses here, read without opening CUDA: the driver's GPU
 * UUIDs, CUDA_VISIBLE_DEVICES and knob device. How many GPUs the executor uses (1, or with device
 * = all those visible); 0 if the driver reports none. */
int gp_machine_gpu_key(gp_policy *p, char *out, size_t n);

/*
 * The machine-wide counts of the GPU side (share.c), for this user's processes. gp_share_full: do
 * the other processes hold the GPU full (as many batches in flight there as it runs at once, knob
 * streams, or that many batches' bytes)? gp_share_may_open: may this process open the GPU, that is
 * do fewer than knob machine_share other processes hold it open and is it not full? Yes marks this
 * process as holding it open (till gp_share_release). Both answer "no" / "yes" (not full, may
 * open) where the counts are off. gp_share_release: this process's slot, given back.
 */
typedef struct gp_share_counts {
    long long procs, open, batches, bytes;   /* the other processes', summed */
    long long done;                          /* ... and the batches they have run there, in all */
} gp_share_counts;
/* The other processes' counts now (slots of processes that are gone taken back first); 0 where
 * the counts are off. */
int gp_share_others_now(gp_policy *p, gp_share_counts *out);
int gp_share_full(gp_policy *p);
int gp_share_may_open(gp_policy *p);
void gp_share_release(gp_policy *p);
/* The opening that gp_share_may_open let this process try failed: its place is free again. */
void gp_share_not_open(gp_policy *p);
void gp_share_print(gp_policy *p);

/* Where a lone synchronous caller's message gets cheaper on the GPU than on the CPU: t_gpu[i] and
 * t_cpu[i] ns for one message of len[i] bytes alone on each side (n >= 2 points, len increasing),
 * straight lines between the points and the last ones extended (the GPU's no cheaper than b_floor
 * ns a byte). The smallest length past the last point where the CPU is not slower, where the
 * lines meet; "never" (GP_KNOB_CALIBRATE) if they do not. */
#define GP_LONE_POINTS 4
size_t gp_hybrid_lone_crossing(const size_t *len, const double *t_gpu, const double *t_cpu, int n, double b_floor);

/* Rule 2 for a lone synchronous caller's messages that start together and run as one batch (`each`
 * bytes each on average, `total` in all; one message: each == total): 1 where they go to the GPU
 * side, 0 the CPU. By expected time where h's batch_gbps is known (the round trip, then `total`
 * at batch_gbps, against `total` at cpu_gbps), else as one message of `total` bytes against
 * lone_gpu_bytes. */
int gp_hybrid_lone_batch_gpu(const gp_hybrid_alg *h, size_t each, size_t total);

/* The warm-up should stop at its next step (engine freed, or process exiting). Here, not in
 * warm.c, so that hybrid.c's measuring asks it without calling back into the warm-up. */
static inline int gp_warm_stopping(gp_policy *p)
{
    return atomic_load(&p->warm.stop) || gp_process_exiting();
}

#endif
