/* SPDX-License-Identifier: Apache-2.0 */
/* Private to batching/policy/: what hybrid.c and warm.c call of each other. */
#ifndef GP_POLICY_INTERNAL_H
#define GP_POLICY_INTERNAL_H

#include "batching/policy/policy.h"

/* Measure every algorithm now (the warm-up thread); `gpu` is the GPU-side executor. */
void gp_hybrid_warm(gp_engine *e, const gp_executor *gpu);

/* The warm-up should stop at its next step (engine freed, or process exiting). */
int gp_warm_stopping(gp_engine *e);

#endif
