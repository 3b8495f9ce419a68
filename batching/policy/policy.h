/* SPDX-License-Identifier: Apache-2.0 */
/* The policy (batching/policy/): where a message runs (hybrid.c) and the GPU's warm-up (warm.c).
 * It sits above the executors, the queue and the engine's objects (batching/core/) and below
 * batching/engine.c, which alone calls it. */
#ifndef GP_POLICY_H
#define GP_POLICY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "batching/engine.h"
#include "batching/executor.h"

/*
 * The hybrid policy's numbers for one algorithm (hybrid.c): measured once per process,
 * or taken from the knobs. Sizes are bytes of a message's first data request.
 */
typedef struct gp_hybrid_alg {
    _Atomic int ready;           /* calibrated (or set by knobs) in this process */
    double cpu_gbps, gpu_gbps;   /* one CPU thread; the GPU path, batched, at the sizes it takes */
    double gpu_rt_us;            /* a lone small request's round trip */
    size_t min_gpu_bytes;        /* smaller messages stay on the CPU */
    size_t lone_gpu_bytes;       /* smaller messages of a lone synchronous caller stay on the CPU */
    double gpu_share;            /* fraction of eligible messages sent to the GPU */
    atomic_uint_fast64_t share_n;   /* eligible messages so far: the share is taken by counting */
} gp_hybrid_alg;

/* One algorithm's numbers as the cache file keeps them (calib_cache.c). */
typedef struct gp_calib_numbers {
    int have;
    size_t keylen;               /* the key length they were measured with */
    long long at;                /* when they were measured (Unix seconds) */
    double cpu_gbps, gpu_gbps, gpu_rt_us;
    size_t min_gpu_bytes, lone_gpu_bytes;
    double gpu_share;
} gp_calib_numbers;

typedef struct gp_hybrid {
    pthread_mutex_t lock;        /* one calibration at a time; routing reads without it */
    _Atomic unsigned fork_gen;   /* the process the numbers were measured in */
    gp_hybrid_alg alg[5];        /* by enum gp_alg */
    /* The persisted numbers (calib_cache.c), under `lock`: read once per engine and GPU-side
     * executor, and what the next write keeps. */
    const gp_executor *cache_gpu;   /* the executor `cache` was read for (NULL: not read yet) */
    gp_calib_numbers cache[5];
    int from_cache[5];           /* alg's numbers in this process came from the cache */
} gp_hybrid;

void gp_hybrid_init(gp_hybrid *h);
void gp_hybrid_cleanup(gp_hybrid *h);
/* The executor for a message whose first data request is `len` bytes; `gpu` is the GPU-side
 * executor (cuda, or host when knob hybrid_gpu says so). */
const gp_executor *gp_hybrid_route(gp_engine *e, const gp_executor *gpu, const gp_msg *m, size_t len);
/* Would the policy's numbers for alg (known in this process; none are measured here) send a
 * message whose first data request is `len` bytes to the GPU side (rules 1 and 2)? */
int gp_hybrid_gpu_eligible(gp_engine *e, uint32_t alg, size_t len);
/* Before the GPU is open: should a message of alg whose first data request is `len` bytes wait
 * for it? By the persisted numbers where there are some (rules 1 and 2, `lone`: the caller would
 * be a lone synchronous one), else by the prior: large messages (>= GP_DEMAND_BYTES) from callers
 * that are not lone go to the GPU. */
int gp_hybrid_prior(gp_engine *e, const gp_executor *gpu, uint32_t alg, size_t len, int lone);
/* 1 when alg's numbers are known in this process and send no message of any size to the GPU. */
int gp_hybrid_cpu_only(gp_engine *e, uint32_t alg);
/* Messages of alg shorter than this always run on the CPU (rule 1; 0 until measured). Lock-free. */
size_t gp_hybrid_cpu_below(gp_engine *e, uint32_t alg);
/* One line per calibrated algorithm (stats line companion). */
void gp_hybrid_print(gp_engine *e);

/*
 * backend=auto where the cuda executor is built: once this process shows demand (gp_warm_demand),
 * the GPU opens and the hybrid policy measures in a thread of its own, once per process; until it
 * is done every message goes to the cpu executor, so no caller ever waits for it. gp_warm_start
 * returns 1 once the warm-up is over; `start`: start it now if it has not started.
 */
int gp_warm_start(gp_engine *e, int start);
/* Does this process show work the GPU could win? Asked at each new message until the warm-up
 * starts. */
int gp_warm_demand(gp_engine *e);
/* The engine is being freed: stop the warm-up and wait for it a while. 1: no warm-up thread is
 * left; 0: it is still inside the CUDA runtime and keeps the engine (the caller frees nothing). */
int gp_warm_finish(gp_engine *e);
/* The warm-up's line of the stats (knob stats). */
void gp_warm_print(gp_engine *e);
/* A large first request arrived before the warm-up is over (the warm-up has been started, its
 * first look at the CPUs made at once): wait for it to finish, at most GP_WARM_WAIT_MS, and not at
 * all while it waits for a free CPU, nor once a wait in this process ran out. 1 once it is over. */
int gp_warm_wait(gp_engine *e);
/* Would a caller here wait a round trip alone: not in an async job, and the only thread that has
 * started messages in this process (before the GPU is open the queue says nothing). */
int gp_warm_lone_caller(gp_engine *e);
/* The executor that plays the GPU in the warm-up: cuda, or host (knob hybrid_gpu) on machines
 * without one; NULL where neither is built. */
const gp_executor *gp_warm_gpu(gp_engine *e);
/* Tests: 0 or 1 fixes whether the auto backend's warm-up finds every CPU busy; -1 (the default)
 * reads /proc/loadavg. */
extern _Atomic int gp_test_cpus_saturated;

#endif
