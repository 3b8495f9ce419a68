/* SPDX-License-Identifier: Apache-2.0 */
/* The policy (batching/policy/): where a message runs (hybrid.c) and the GPU's warm-up (warm.c). */
/* It knows the engine only by engine.h and the gp_policy_ops the engine gives it at init (as the
 * queue knows it by gp_queue_owner); batching/engine.c alone calls it. */
#ifndef GP_POLICY_H
#define GP_POLICY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "batching/request.h"
#include "batching/settings.h"

/* An executor (batching/executor.h): the policy compares them and hands them back, never calls one. */
typedef struct gp_executor gp_executor;

/*
 * What the engine gives the policy at init: the executors it chooses among, and the functions the
 * calibration measures with and the warm-up opens with. The policy calls nothing else of the
 * engine's units; each function takes the engine the policy belongs to.
 */
typedef struct gp_policy_ops {
    /* The cpu executor (the CPU side of each choice) and the two that may play the GPU's part:
     * host (tests, knob hybrid_gpu) and cuda (NULL: not built). */
    const gp_executor *cpu, *host, *cuda;
    /* Can x serve in this process? Opens it the first time (gp_engine_executor_usable). */
    int (*usable)(gp_engine *e, const gp_executor *x);
    /* The calibration's keys and messages: gp_key_new and gp_key_free (engine.h); a message started
     * on x, encrypting under k with an all-zero IV of ivlen bytes (NULL: it could not start), and
     * its free (gp_msg_free). */
    gp_key *(*key_new)(gp_engine *e, uint32_t alg, const uint8_t *key, size_t keylen);
    void (*key_free)(gp_key *k);
    gp_msg *(*msg_start_on)(gp_engine *e, const gp_executor *x, gp_key *k, size_t ivlen);
    void (*msg_free)(gp_msg *m);
    /* Run a batch of those messages' requests on x (its gp_executor.run). */
    int (*run)(gp_engine *e, const gp_executor *x, gp_request *reqs, size_t n);
    /* The queue: is it idle (no synchronous submitter in it, no batch running)? Is the GPU side
     * saturated (a batch running and a full one gathering)? Read without its lock. */
    int (*queue_idle)(gp_engine *e);
    int (*queue_full)(gp_engine *e);
    /* Where messages go may have changed (the warm-up is over): contexts on the cpu lane ask again
     * (gp_engine_route_epoch). */
    void (*route_changed)(gp_engine *e);
    /* Keep the module mapped until the process exits (gp_async_pin_module): gp_warm_finish may
     * leave the warm-up thread running. */
    void (*pin_module)(void);
} gp_policy_ops;

/*
 * The hybrid policy's numbers for one algorithm (hybrid.c): measured once per process,
 * or taken from the knobs. Sizes are bytes of a message's first data request.
 */
typedef struct gp_hybrid_alg {
    _Atomic int ready;           /* calibrated (or set by knobs) in this process */
    double cpu_gbps, gpu_gbps;   /* one CPU thread; the GPU path, batched, at the sizes it takes */
    double gpu_rt_us;            /* a lone small request's round trip */
    double batch_gbps;           /* one batch of 16 KiB messages from one thread, its bytes past the
                                  * round trip (0: not known; hybrid.c, rule 2 for batches) */
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
    double batch_gbps;           /* 0: not known (a file written before it was measured) */
} gp_calib_numbers;

typedef struct gp_hybrid {
    pthread_mutex_t lock;        /* one calibration at a time; routing reads without it */
    _Atomic unsigned fork_gen;   /* the process the numbers were measured in */
    gp_hybrid_alg alg[5];        /* by enum gp_alg */
    /* The numbers known before measuring, under `lock`: read once per engine and GPU-side
     * executor. `cache`: the user's persisted numbers (calib_cache.c), what the next write keeps;
     * `known`: per algorithm the user's, else the machine's (gpuprov-calibrate --system), else
     * the prior of this host's class (priors.c), with where each came from. */
    const gp_executor *cache_gpu;   /* the executor they were read for (NULL: not read yet) */
    gp_calib_numbers cache[5];
    gp_calib_numbers known[5];
    int known_source[5];         /* enum gp_numbers_source */
    const char *prior_name;      /* the class whose priors `known` holds, if any */
    int source[5];               /* where alg's numbers in this process came from */
} gp_hybrid;

/* Where an algorithm's numbers came from (the `gpuprov hybrid:` stats line says). */
enum gp_numbers_source {
    GP_SRC_MEASURED = 0,         /* this process measured them */
    GP_SRC_USER_CACHE,           /* an earlier process of this user on this machine */
    GP_SRC_SYSTEM_CACHE,         /* gpuprov-calibrate --system on this machine */
    GP_SRC_PRIOR,                /* hosts of this one's class (GPU model, cores' code class) */
    GP_SRC_NONE                  /* none: the knobs alone, or nothing could be measured */
};

/* The warm-up (warm.c): its thread, the callers it has seen, and its knob-stats times. */
typedef struct gp_warm {
    pthread_mutex_t lock;        /* starting and finishing it */
    int started;                 /* under `lock` */
    _Atomic unsigned started_gen;   /* fork generation + 1 of the process it started in */
    _Atomic uintptr_t first_caller;   /* pthread_self() of the first thread to start a message */
    _Atomic unsigned caller_gen;      /* ... in this process: its fork generation + 1 (0: none yet) */
    _Atomic unsigned other_caller_gen;   /* a second thread started a message in this process:
                                          * its fork generation + 1 */
    _Atomic unsigned gen;        /* the process it was started in */
    pthread_t thread;
    _Atomic int done;
    _Atomic int stop;            /* gp_warm_finish: stop at the next step */
    _Atomic int urgent;          /* a caller waits for the warm-up: look at the CPUs at once */
    _Atomic unsigned wait_expired_gen;   /* a caller's wait for the warm-up ran out in this process
                                          * (fork generation + 1): none waits again */
    _Atomic int opening;         /* 1: the warm-up found a free CPU and opens or measures (a caller
                                  * may wait for it); -1: every CPU was busy, or the GPU had no room
                                  * beside this user's other processes, at its last look (no caller
                                  * waits for it); 0: it has not looked yet */
    /* Knob stats: the warm-up's steps, wall and thread CPU nanoseconds: opening the GPU (context,
     * streams, pinned arenas), then measuring the hybrid policy. Written by the warm-up thread
     * before `done`. */
    uint64_t open_ns, open_cpu_ns, calib_ns, calib_cpu_ns;
    /* The warm-up thread's previous look at /proc/stat (warm.c, busy_over_window): its CPUs' idle
     * and all ticks; 0: none yet in this process. */
    uint64_t ticks_idle, ticks_all;
    /* gp_warm_worth_opening: by alg, the fork generation + 1 of the process where the numbers
     * known before the GPU opens send none of alg's messages to the GPU, whatever the caller. */
    _Atomic unsigned cpu_only_gen[5];
    /* What this process showed that those numbers kept on the CPU (the stats line says why the
     * GPU was not opened): its fork generation + 1 (0: nothing), and the largest such message
     * (GP_LEN_UNKNOWN: a message start, of any size), of which algorithm, from a lone caller. */
    _Atomic unsigned kept_gen;
    _Atomic uint32_t kept_alg;
    _Atomic size_t kept_len;
    _Atomic int kept_lone;
} gp_warm;

/* This process's part in the machine-wide counts of its GPU (share.c): a shared-memory segment per
 * GPU and user, mapped once per process (a forked child keeps the mapping and takes a slot of its
 * own). */
typedef struct gp_share {
    _Atomic unsigned gen;        /* fork generation + 1 of the process holding `slot`; 0: none (a
                                  * thread mapping or taking the slot sets the top bit meanwhile) */
    _Atomic int state;           /* 0: not looked at yet; 1: mapped; -1: off (knob, no key, refused) */
    struct gp_share_seg *seg;    /* the mapping (NULL: none) */
    int slot;                    /* this process's slot in seg; -1: every slot was taken */
    int gpus;                    /* the GPUs the segment counts for (device = all: several) */
    _Atomic uint64_t swept_ns;   /* when this process last looked for slots of dead processes */
    _Atomic uint64_t full_to_cpu;   /* messages the others' full GPU sent to the cpu (stats) */
    _Atomic uint64_t open_refused;  /* the warm-up's looks that found no room to open the GPU */
    char name[64];               /* the segment's shm_open name */
} gp_share;

/* The policy's state, held in the engine's struct (batching/core/core.h). */
typedef struct gp_policy {
    gp_engine *e;                /* handed to each of ops' functions */
    const gp_policy_ops *ops;
    const gp_knobs *knobs;       /* the engine's */
    gp_hybrid hy;
    gp_warm warm;
    gp_share share;
} gp_policy;

/* `ops` and `knobs` must outlive the policy. */
void gp_policy_init(gp_policy *p, gp_engine *e, const gp_knobs *knobs, const gp_policy_ops *ops);
void gp_policy_cleanup(gp_policy *p);

/* The executor for a message of alg with a key of keylen bytes whose first data request is `len`
 * bytes; `gpu` is the GPU-side executor (cuda, or host when knob hybrid_gpu says so). */
const gp_executor *gp_hybrid_route(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t keylen, size_t len);
/* The executor for messages of alg that start together and run as one batch (a pipeline call):
 * `each` bytes each on average in their first data requests, `total` in all. One answer for all of
 * them; gp_hybrid_route is this with each = total = len. */
const gp_executor *gp_hybrid_route_batch(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t keylen,
                                         size_t each, size_t total);
/* Would the policy's numbers for alg (known in this process; none are measured here) send a
 * message whose first data request is `len` bytes to the GPU side (rules 1, 2 and 3m)? */
int gp_hybrid_gpu_eligible(gp_policy *p, uint32_t alg, size_t len);
/* Before the GPU is open: should a message of alg whose first data request is `len` bytes wait
 * for it? By the persisted numbers where there are some (rules 1 and 2, `lone`: the caller would
 * be a lone synchronous one), else by the prior: large messages (>= GP_DEMAND_BYTES) from callers
 * that are not lone go to the GPU. */
int gp_hybrid_prior(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t len, int lone);
/* Does the policy have numbers for alg before measuring in this process: the user's or the
 * machine's persisted ones for `gpu` (calib_cache.c), this host's class's priors (priors.c), or
 * the knobs (min_gpu_bytes set)? Where it has none (or knob calib_refresh asks to measure again),
 * gp_hybrid_prior's answer is the rule of thumb, not numbers. */
int gp_hybrid_known(gp_policy *p, const gp_executor *gpu, uint32_t alg);
/* 1 when alg's numbers are known in this process and send no message of any size to the GPU. */
int gp_hybrid_cpu_only(gp_policy *p, uint32_t alg);
/* Messages of alg shorter than this always run on the CPU (rule 1; 0 until measured). Lock-free. */
size_t gp_hybrid_cpu_below(gp_policy *p, uint32_t alg);
/* One line per calibrated algorithm (stats line companion). */
void gp_hybrid_print(gp_policy *p);

/*
 * The machine-wide counts (share.c): a batch of reqs[0..n) about to run on x. Where x is the GPU
 * side the policy routes to and knob machine_share is on, its bytes and the batch count as in
 * flight on that GPU for every process of this user until gp_share_end; returns what to hand
 * gp_share_end (0: nothing was counted).
 */
size_t gp_share_begin(gp_policy *p, const gp_executor *x, const gp_request *reqs, size_t n);
void gp_share_end(gp_policy *p, size_t counted);

/*
 * backend=auto where the cuda executor is built: once this process shows demand (gp_warm_demand),
 * the GPU opens and the hybrid policy measures in a thread of its own, once per process; until it
 * is done every message goes to the cpu executor, so no caller ever waits for it. gp_warm_start
 * returns 1 once the warm-up is over; `start`: start it now if it has not started.
 */
int gp_warm_start(gp_policy *p, int start);
/* Does this process show work the GPU could win? Asked at each new message until the warm-up
 * starts. */
int gp_warm_demand(gp_policy *p);
/* The length of work shown before its size is known (a message's start). */
#define GP_LEN_UNKNOWN SIZE_MAX
/*
 * Is opening the GPU worth it for what this process shows: a message of alg whose data request
 * is `len` bytes (GP_LEN_UNKNOWN: any size), from a lone synchronous caller or not? 0 where the
 * numbers known before the GPU opens (the persisted measurement or the knobs, gp_hybrid_prior)
 * keep such a message on the CPU: then the warm-up must not start for it, no CUDA context is
 * made, and the stats line says why (gp_warm_print). 1 where they would send it to the GPU, and
 * where there are no numbers for alg yet (the warm-up measures them) or alg is not known (0).
 */
int gp_warm_worth_opening(gp_policy *p, uint32_t alg, size_t len, int lone);
/* A caller is about to wait for the warm-up (gp_warm_wait): its look at the CPUs comes at once. */
void gp_warm_urge(gp_policy *p);
/* The engine is being freed: stop the warm-up and wait for it a while. 1: no warm-up thread is
 * left; 0: it is still inside the CUDA runtime and keeps the engine (the caller frees nothing). */
int gp_warm_finish(gp_policy *p);
/* The warm-up's line of the stats (knob stats). */
void gp_warm_print(gp_policy *p);
/* A large first request arrived before the warm-up is over (the warm-up has been started, its
 * first look at the CPUs made at once): wait for it to finish, at most GP_WARM_WAIT_MS, and not at
 * all while it waits for a free CPU, nor once a wait in this process ran out. 1 once it is over. */
int gp_warm_wait(gp_policy *p);
/* Would a caller here wait a round trip alone: not in an async job, and the only thread that has
 * started messages in this process (before the GPU is open the queue says nothing). */
int gp_warm_lone_caller(gp_policy *p);
/* The executor that plays the GPU in the warm-up: cuda, or host (knob hybrid_gpu) on machines
 * without one; NULL where neither is built. */
const gp_executor *gp_warm_gpu(gp_policy *p);
#if GP_TEST_HOOKS
/* Tests: 0 or 1 fixes whether the auto backend's warm-up finds every CPU busy; -1 (the default)
 * reads /proc/loadavg. */
extern _Atomic int gp_test_cpus_saturated;
#endif

#endif
