/* SPDX-License-Identifier: Apache-2.0 */
/* Private to batching/policy/: what its files call of one another, one way (warm.c -> hybrid.c -> calib_cache.c). */
#ifndef GP_POLICY_INTERNAL_H
#define GP_POLICY_INTERNAL_H

#include "batching/base/base.h"
#include "batching/policy/policy.h"

/* Measure every algorithm now (the warm-up thread); `gpu` is the GPU-side executor. */
void gp_hybrid_warm(gp_policy *p, const gp_executor *gpu);

/* The persisted numbers (calib_cache.c). The file for the numbers `gpu` would measure here, and
 * its key; 0 when the cache is off or the key cannot be known (no GPU reported by the driver). */
int gp_calib_cache_file(gp_policy *p, const gp_executor *gpu, char *path, size_t n, char *key, size_t keyn);
/* Read the valid entries into out[alg] (the rest zeroed); the number read, 0 when the file is
 * absent, unreadable, not this machine's, corrupt or stale as a whole. */
int gp_calib_cache_read(gp_policy *p, const gp_executor *gpu, gp_calib_numbers out[5]);
/* Replace the file with in[] (entries with `have`); 0 when it could not (never fatal). */
int gp_calib_cache_write(gp_policy *p, const gp_executor *gpu, const gp_calib_numbers in[5]);

/* Where a lone synchronous caller's message gets cheaper on the GPU than on the CPU: t_gpu[i] and
 * t_cpu[i] ns for one message of len[i] bytes alone on each side (n >= 2 points, len increasing),
 * straight lines between the points and the last ones extended (the GPU's no cheaper than b_floor
 * ns a byte). The smallest length past the last point where the CPU is not slower, where the
 * lines meet; "never" (GP_KNOB_CALIBRATE) if they do not. */
#define GP_LONE_POINTS 4
size_t gp_hybrid_lone_crossing(const size_t *len, const double *t_gpu, const double *t_cpu, int n, double b_floor);

/* The warm-up should stop at its next step (engine freed, or process exiting). Here, not in
 * warm.c, so that hybrid.c's measuring asks it without calling back into the warm-up. */
static inline int gp_warm_stopping(gp_policy *p)
{
    return atomic_load(&p->warm.stop) || gp_process_exiting();
}

#endif
