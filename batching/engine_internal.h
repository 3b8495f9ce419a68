/* SPDX-License-Identifier: Apache-2.0 */
/* Engine internals shared by the batching sources: the executor callback table, keys, messages, stats. */
#ifndef GP_ENGINE_INTERNAL_H
#define GP_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <openssl/core_dispatch.h>

#include "async_wait.h"
#include "engine.h"
#include "stage.h"
#include "kernels/ghash_mma.h"

typedef enum gp_exec_id { GP_EXEC_CUDA = 0, GP_EXEC_HOST, GP_EXEC_CPU, GP_EXEC_COUNT } gp_exec_id;

/*
 * One table of callbacks per executor: the batching layer calls nothing else. `open` runs once per
 * process, lazily (after a fork too), and says whether the executor can serve here.
 */
typedef struct gp_executor {
    const char *name;
    gp_exec_id id;
    int (*open)(gp_engine *e);
    void (*close)(gp_engine *e);
    int (*msg_start)(gp_engine *e, gp_msg *m);          /* m->key, iv, enc are set */
    /* Run a batch: sets every reqs[i].status and returns 1; or returns 0, having changed nothing
     * (no output, no message state), when the executor itself failed: the engine then re-runs
     * the batch elsewhere. */
    int (*run)(gp_engine *e, gp_request *reqs, size_t n);
    int (*msg_copy)(gp_msg *dst, const gp_msg *src);   /* NULL: plain data, copied by the engine */
    void (*msg_clear)(gp_msg *m);   /* free executor-owned state; NULL: none (the engine cleanses
                                     * the whole message when it frees it) */
    /* Where async jobs stage their data for this executor (stage.h); NULL, or a NULL result: they
     * do not. */
    gp_stage_pool *(*stage_pool)(gp_engine *e);
    /* Per-message work a data request's own thread does before it queues, so that the batch's
     * leader or dispatcher, one thread for the whole batch, does not; NULL: none. */
    void (*prepare)(gp_engine *e, gp_request *r);
    /* The key is being freed: drop what the executor keeps of it (cuda: its resident schedule);
     * NULL: nothing kept. May run on an async job's stack. */
    void (*key_forget)(gp_engine *e, gp_key *k);
} gp_executor;

extern const gp_executor gp_exec_host;
extern const gp_executor gp_exec_cpu;
#ifdef GPUPROV_HAVE_CUDA
extern const gp_executor gp_exec_cuda;
#endif


/* GPUs whose key tables a key may have a slot in (batching/key_table.h); further ones carry it in
 * every batch. */
#define GP_KEY_TABLE_GPUS 8

struct gp_key {
    gp_engine *engine;
    uint64_t id;                 /* unique per scheduled key: the cpu executor re-keys on change */
    uint32_t alg;
    size_t keylen;
    uint8_t raw[32];
    int sched_ready;             /* `sched` is made the first time a host/cuda message needs it */
    gp_key_sched sched;
    EVP_CIPHER_CTX *ecb;         /* GCM, host/cuda: the default provider's AES-ECB under this key,
                                  * for E_K(J0) at each message start (made on first use) */
    gp_ghash_mma *ghmma;         /* GCM, cuda: the tensor-core GHASH matrix (made on first use) */
    uint32_t table_slot[GP_KEY_TABLE_GPUS];   /* cuda: slot + 1 in each GPU's key table, 0: none
                                               * (changed under that table's lock) */
};

/* AAD a hybrid message holds until its first data request picks the executor (TLS: 5 or 13 B). */
#define GP_MSG_AAD_HOLD 64

struct gp_msg {
    gp_engine *engine;
    const gp_executor *exec;     /* owner of the message in progress; NULL before the first start
                                  * and, for a hybrid message, until it is routed */
    int routed;                  /* 0: started in hybrid mode, executor not chosen yet */
    size_t aad_hold_len;         /* AAD held (not yet absorbed) while the message is unrouted */
    uint8_t aad_hold[GP_MSG_AAD_HOLD];
    gp_key *key;                 /* borrowed from the provider context, which restarts the message
                                  * whenever it replaces the key */
    int enc;
    uint8_t iv[128];
    size_t ivlen;
    gp_msg_state st;             /* host/cuda: the kernel state */
    gp_pows_have pows_have;      /* host/cuda, ChaCha20-Poly1305: which of this message's powers of r
                                  * `pows` holds (made as its requests need them: gp_kstate_pows) */
    gp_mac_pows pows;
    EVP_CIPHER_CTX *cpu_ctx;     /* cpu, EVP path: a default-provider context */
    void *cpu_algctx;            /* cpu, direct path: the default provider's own context */
    const gp_cpu_direct *cpu_direct;   /* functions for cpu_algctx (in the engine, which outlives
                                        * its messages) */
    uint64_t cpu_key_id;         /* key loaded in cpu_ctx / cpu_algctx, 0 if none */
    size_t cpu_ivlen;            /* GCM IV length cpu_ctx / cpu_algctx is set to */
    /* knob stats: AAD and data calls the cpu executor ran straight from gp_msg_aad/gp_msg_crypt,
     * counted here by the message's one user and added to the engine's counters when the message
     * restarts or is freed (engine.c), so a 16-byte call pays no locked instruction. */
    uint64_t cpu_calls, cpu_bytes;
};

/* The host executor's worker pool (started on the first batch worth spreading). */
typedef struct gp_host_pool {
    pthread_mutex_t submit;      /* one batch in the pool at a time */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    pthread_t *threads;
    int nthreads, started, stopping;
    uint64_t generation;         /* bumped per posted batch */
    pid_t pid;                   /* process that started the threads (a fork leaves them behind) */
    gp_request *reqs;
    size_t *order;               /* request indexes grouped by message, submission order kept */
    size_t *group_start;         /* ngroups + 1 offsets into order */
    size_t ngroups;
    atomic_size_t next;          /* next group to claim */
    int active;                  /* workers inside the current batch */
} gp_host_pool;

/* The process-wide queue (queue.c): entries live on their submitters' stacks (a synchronous caller's,
 * or a paused async job's) while they wait. */
typedef struct gp_queue_entry {
    gp_request *req;
    atomic_int done;             /* set by the batch's leader once req->status is final; after that
                                  * the leader touches neither the entry nor its request */
    const gp_async_notify *notify;   /* NULL: a synchronous caller waiting in gp_queue_submit; else
                                      * an async job, woken through this */
    uint64_t done_ns;            /* knob stats, async: when the leader woke the job */
    struct gp_queue_entry *next_in;   /* async: the next older entry in the queue's inbox */
} gp_queue_entry;

#define GP_MAX_DISPATCHERS 8

typedef struct gp_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;         /* a batch completed, or the pending batch may now flush */
    gp_queue_entry **pending;    /* the batch being gathered */
    size_t npending, cap;
    _Atomic size_t pending_bytes;
    uint64_t first_ns;           /* when its first request arrived (CLOCK_MONOTONIC) */
    uint64_t generation;         /* bumped when a leader takes the pending batch */
    /* Changed under `lock`; atomic so that the hybrid policy may read them without it. */
    _Atomic int active;          /* synchronous submitters inside gp_queue_submit */
    _Atomic int inflight;        /* batches being run by their leaders */
    /* Async jobs (their entries flush through the dispatcher threads; a job never leads). */
    size_t npending_async;       /* async entries in the pending batch */
    size_t async_inflight;       /* async entries in batches being run */
    size_t sync_inflight;        /* synchronous entries in batches being run */
    uint64_t last_add_ns;        /* when a request last joined the pending batch */
    uint64_t last_done_ns;       /* when a batch last completed */
    _Atomic uint64_t events;     /* bumped per append (or drain) and per completed batch: the
                                  * dispatcher spins on it (and on the inbox) without the lock */
    pthread_cond_t dispatch_cond;   /* wakes a dispatcher: async entry added, batch done, stop */
    pthread_t dispatchers[GP_MAX_DISPATCHERS];   /* one per batch the executor overlaps */
    int ndispatchers;
    /*
     * What every async request touches without the lock, each on a cache line of its own, away
     * from what the dispatchers write under it (the pending batch, the clocks, `events`): on the
     * H200 host, 16 threads of jobs spent ~0.5 us a round trip in submit_async's own code with
     * the inbox beside `events` and the waiting count beside the append clock (perf,
     * bench/RESULTS.md, twenty-second session).
     *
     * Async jobs queue without the lock: they push their entry here (newest first), and whoever
     * holds the lock moves the inbox into the pending batch (queue.c, drain_inbox).
     */
    _Alignas(64) _Atomic(struct gp_queue_entry *) inbox;
    _Alignas(64) _Atomic size_t async_waiting;   /* async entries queued whose jobs have not yet
                                                  * taken the result: when all of them are pending,
                                                  * no job could add another (taken off without the
                                                  * lock) */
    /* Who looks at the inbox: the watcher (one dispatcher at a time, spinning or deciding, which
     * checks the inbox before it leads or blocks), or else a dispatcher blocked on dispatch_cond,
     * which a pushing job wakes (queue.c, wake_dispatcher). */
    _Alignas(64) _Atomic int watching;
    _Atomic int asleep;          /* dispatchers blocked on dispatch_cond */
    /* Read by every async request, written about once per process: */
    _Alignas(64) _Atomic unsigned dispatchers_live;   /* gp_fork_generation() + 1 while this process's run */
    /* Async jobs hand their own per-request work (prepare, staging) to their thread only once jobs
     * of two threads or more have queued (submit_async); stage_one_thread: test hook (set only
     * where GP_TEST_HOOKS). */
    _Atomic uintptr_t async_thread;   /* the last thread an async request came from */
    _Atomic int async_threads;        /* 1: more than one so far, in this process */
    int stage_one_thread;
    unsigned test_unwatch_delay_us;   /* test hook: the watcher's pause before it stops (queue.c) */
    int dispatcher_state;        /* 0 not started, 1 running, -1 could not start (this process) */
    int dispatcher_stop;
    unsigned dispatcher_fork_gen;   /* gp_fork_generation() of the process that started it */
    struct gp_queue *next;       /* every engine's queue, for the fork handlers (queue.c) */
} gp_queue;

int gp_queue_init(gp_queue *q, const gp_knobs *k);
void gp_queue_cleanup(gp_queue *q);
/* Run r through the queue; returns r->status. Outside an ASYNC_JOB the caller waits as knobs.wait
 * says (and may lead the batch); inside one the job pauses until the dispatcher has run it. */
int gp_queue_submit(gp_engine *e, gp_request *r);
/* Stop the dispatcher thread, if this process started one (before the executors close). */
void gp_queue_stop_dispatcher(gp_engine *e);

/*
 * The hybrid policy's numbers for one algorithm (batching/hybrid.c): measured once per process,
 * or taken from the knobs. Sizes are bytes of a message's first data request.
 */
typedef struct gp_hybrid_alg {
    _Atomic int ready;           /* calibrated (or set by knobs) in this process */
    double cpu_gbps, gpu_gbps;   /* one CPU thread; the GPU path with a batch of 64 in flight */
    double gpu_rt_us;            /* a lone small request's round trip */
    size_t min_gpu_bytes;        /* smaller messages stay on the CPU */
    size_t lone_gpu_bytes;       /* smaller messages of a lone synchronous caller stay on the CPU */
    double gpu_share;            /* fraction of eligible messages sent to the GPU */
    atomic_uint_fast64_t share_n;   /* eligible messages so far: the share is taken by counting */
} gp_hybrid_alg;

typedef struct gp_hybrid {
    pthread_mutex_t lock;        /* one calibration at a time; routing reads without it */
    _Atomic unsigned fork_gen;   /* the process the numbers were measured in */
    gp_hybrid_alg alg[5];        /* by enum gp_alg */
} gp_hybrid;

/*
 * Stats counters (knob stats=1), sharded by thread: 16 threads adding into one set of counters
 * bounced its cache lines between cores and cut 16-byte throughput several-fold. A thread adds into
 * its own shard (picked from its pthread_t; threads may share one); reading sums the shards.
 */
enum gp_stat {
    GP_ST_OPS, GP_ST_BYTES,
    GP_ST_EXEC_OPS,                       /* + gp_exec_id */
    GP_ST_BATCHES = GP_ST_EXEC_OPS + GP_EXEC_COUNT, GP_ST_FALLBACKS, GP_ST_ERRORS, GP_ST_ASYNC_OPS,
    GP_ST_ROUTED_GPU, GP_ST_ROUTED_CPU, GP_ST_SPEC_TAGS, GP_ST_STAGED,
    GP_ST_NOTIFY_NS,                      /* waking async jobs, summed over batches (queue.c) */
    /* Where an async job's round trip goes (queue.c), summed over the batches holding jobs: */
    GP_ST_ASYNC_BATCHES,
    GP_ST_GATHER_NS,                      /* first request joined -> flushed */
    GP_ST_FLUSH_JOBS,                     /* jobs in the batch */
    GP_ST_FLUSH_RUNNING,                  /* jobs in batches already running when it flushed */
    GP_ST_FLUSH_OUT,                      /* jobs with the application when it flushed (queued,
                                           * not yet taken their result, in no batch) */
    GP_ST_FLUSH_SIZE, GP_ST_FLUSH_SHARE, GP_ST_FLUSH_TIMER,   /* which rule flushed it */
    GP_ST_RESUME_NS,                      /* a job's result ready -> the job running again, per job */
    GP_ST_COUNT
};
#define GP_STAT_SHARDS 64

typedef struct gp_stat_shard {
    _Alignas(64) atomic_uint_fast64_t v[GP_ST_COUNT];
} gp_stat_shard;

/* The calling thread's shard index (assigned on first use). */
unsigned gp_stat_shard_index(void);

struct gp_engine {
    gp_knobs knobs;
    OSSL_LIB_CTX *libctx;        /* child of the application's context; cpu executor fetches here */
    pthread_mutex_t open_lock;
    _Atomic unsigned fork_gen;   /* gp_fork_generation() when the executors were opened */
    int opened[GP_EXEC_COUNT];   /* 0 not tried, 1 usable, -1 unusable */
    /* gp_fork_generation() + 1 while opened[] says usable in this process: read without the lock
     * by every message start (gp_engine_executor_usable). */
    _Atomic unsigned usable_gen[GP_EXEC_COUNT];
    _Atomic unsigned route_epoch;     /* gp_engine_route_epoch */
    _Atomic(const gp_executor *) preferred;   /* where new messages go; resolved at first use; in
                                               * hybrid mode the GPU-side executor */
    _Atomic int hybrid;          /* preferred is shared with the cpu executor by the hybrid policy */
    /* backend=auto: the GPU opens and the policy measures in the background (engine.c). */
    int warm_started;            /* under open_lock */
    _Atomic unsigned warm_started_gen;   /* fork generation + 1 of the process it started in */
    _Atomic uintptr_t first_caller;   /* pthread_self() of the first thread to start a message */
    _Atomic unsigned caller_gen;      /* ... in this process: its fork generation + 1 (0: none yet) */
    _Atomic unsigned warm_gen;   /* the process it was started in */
    pthread_t warm_thread;
    _Atomic int warm_done;
    _Atomic int warm_stop;       /* gp_engine_free: stop at the next step */
    /* Knob stats: the warm-up's steps, wall and thread CPU nanoseconds: opening the GPU (context,
     * streams, pinned arenas), then measuring the hybrid policy. Written by the warm-up thread
     * before warm_done. */
    uint64_t warm_open_ns, warm_open_cpu_ns, warm_calib_ns, warm_calib_cpu_ns;
    gp_hybrid hy;
    EVP_CIPHER *cpu_ciphers[8];  /* cpu executor: fetched once from provider=default */
    gp_cpu_direct cpu_direct[8]; /* cpu executor: the same ciphers' functions, called directly */
    gp_host_pool pool;
    gp_queue queue;
    void *cuda;                  /* the cuda executor's device state (exec_cuda.c) */
    gp_stage_pool *host_stage;   /* test hook: the host executor's staging pool (exec_host.c) */
    _Atomic int max_inflight;    /* batches the queue lets run at once (cuda: its slots; else 1) */
    gp_stat_shard stats[GP_STAT_SHARDS];   /* knob stats: counters, summed when read */
};

/* Bumped in every child right after fork (pthread_atfork): a cheap "are we still the process that
 * opened things?" test, where getpid() would be a system call on every message. */
unsigned gp_fork_generation(void);

int gp_engine_executor_usable(gp_engine *e, const gp_executor *x);
static inline void gp_stat_add(gp_engine *e, enum gp_stat s, uint64_t n)
{
    atomic_fetch_add_explicit(&e->stats[gp_stat_shard_index()].v[s], n, memory_order_relaxed);
}

/* CLOCK_MONOTONIC in nanoseconds (queue.c). */
uint64_t gp_now_ns(void);
/* Whether the calling thread is one of the queue's dispatchers (queue.c), which run the batches of
 * async jobs. */
int gp_queue_on_dispatcher(void);

/* printf-style, one line to stderr in a single write (whole even when processes share the fd). */
void gp_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* fn(arg), on a thread of its own when called inside an ASYNC_JOB (32 KiB stack). */
int gp_call_off_job_stack(int (*fn)(void *), void *arg);
/* An executor failed as a whole: no new message goes to it in this process. */
void gp_engine_executor_failed(gp_engine *e, const gp_executor *x);

/* The kernel key schedule, made on first use: the cpu executor never needs it. A key belongs to
 * one provider context (EVP contexts are not shared between threads), so no lock is needed. */
const gp_key_sched *gp_key_sched_get(gp_key *k);
/* The key's GHASH matrix for the cuda executor (kernels/ghash_mma.h); NULL when out of memory. */
const gp_ghash_mma *gp_key_ghmma_get(gp_key *k);

/* qsort_r comparator over request indexes (context: the gp_request array): groups each message's
 * requests together, in submission order. */
int gp_cmp_request_by_msg(const void *a, const void *b, void *reqs);

/* Message callbacks shared by the host and cuda executors (exec_host.c). */
int gp_kstate_msg_start(gp_engine *e, gp_msg *m);
/* The MAC powers job j of message m reads: its key's (GCM), or the message's own powers of r
 * (ChaCha20-Poly1305), each made the first time a request of the message needs it. */
const gp_mac_pows *gp_kstate_pows(gp_msg *m, const gp_key_sched *ks, const gp_job *j);
/* The same for request r planned on its message's state now (the state it will run from); NULL
 * unless it is a ChaCha20-Poly1305 data request that may have body units. */
const gp_mac_pows *gp_kstate_prepare_pows(gp_request *r);
/* The executors' prepare: a ChaCha20-Poly1305 request's powers of r, when it has body units, on
 * the submitter's thread (the whole table took 2.4 us a message on the H200 host, most of a
 * 16-thread batch's planning, bench/RESULTS.md; a 16 KiB body reads 41 of its 97 entries). */
void gp_kstate_prepare(gp_engine *e, gp_request *r);

/* Hybrid policy (hybrid.c): the executor for a message whose first data request is `len` bytes;
 * `gpu` is the GPU-side executor (cuda, or host when knob hybrid_gpu says so). */
const gp_executor *gp_hybrid_route(gp_engine *e, const gp_executor *gpu, const gp_msg *m, size_t len);
void gp_hybrid_init(gp_hybrid *h);
/* 1 when alg's numbers are known in this process and send no message of any size to the GPU. */
int gp_hybrid_cpu_only(gp_engine *e, uint32_t alg);
/* Messages of alg shorter than this always run on the CPU (rule 1; 0 until measured). Lock-free. */
size_t gp_hybrid_cpu_below(gp_engine *e, uint32_t alg);
/* Measure every algorithm now (the auto backend's warm-up thread). */
void gp_hybrid_warm(gp_engine *e, const gp_executor *gpu);
/* The warm-up should stop at its next step (engine freed, or process exiting). */
int gp_warm_stopping(gp_engine *e);
/* Tests: 0 or 1 fixes whether the auto backend's warm-up finds every CPU busy; -1 (the default)
 * reads /proc/loadavg. */
extern _Atomic int gp_test_cpus_saturated;
/* The CUDA runtime has just loaded (its first call returned): order the exit-time wait for
 * warm-ups before the runtime's own teardown (engine.c). */
void gp_warm_runtime_loaded(void);
void gp_hybrid_cleanup(gp_hybrid *h);
/* One line per calibrated algorithm (stats line companion). */
void gp_hybrid_print(gp_engine *e);

/* cpu executor: runs one request on the message's default-provider context (it cannot fail as an
 * executor, so the engine's fallback path has nothing to do for it); returns r->status. */
int gp_cpu_run_one(gp_request *r);
/* One call of the default provider's update on its context: AAD (out NULL) or data, whose output
 * size is the input length (ciphers of block size 1); the vector state cleaned after it. */
static inline int gp_cpu_direct_update(OSSL_FUNC_cipher_update_fn *update, void *algctx,
                                       const uint8_t *in, uint8_t *out, size_t len)
{
    size_t outl = 0;
    int ok = update(algctx, out, &outl, len, in, len) && (out == NULL || outl == len);

    gp_cpu_clean_upper_state();
    return ok;
}

/* gp_cpu_update for a message without the provider's own context (through EVP). */
int gp_cpu_update_evp(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len);
/* AAD (out NULL) or data of m, on the cpu executor at once; 1 on success. Inline: a 16-byte update
 * then costs one indirect call more than the default provider's own. */
static inline int gp_cpu_update(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len)
{
    if (m->cpu_algctx == NULL)
        return gp_cpu_update_evp(m, in, out, len);
    return gp_cpu_direct_update(m->cpu_direct->update, m->cpu_algctx, in, out, len);
}

/* cpu executor: the default provider's functions for (alg, keylen), or NULL where they could not be
 * read (that cipher then runs through EVP_CIPHER_CTX, off the lane). The executor must be open. */
const gp_cpu_direct *gp_cpu_direct_for(gp_engine *e, uint32_t alg, size_t keylen);

/* E_K(in) for one block with the default provider's AES (AES-NI where the CPU has it) under key k;
 * 1 on success, else 0 and out untouched (exec_cpu.c). */
int gp_cpu_aes_block(gp_engine *e, gp_key *k, const uint8_t in[16], uint8_t out[16]);

/* host executor: runs one request with the kernel code (used by the pool and for fallbacks). */
void gp_host_run_one(gp_request *r);
void gp_host_pool_stop(gp_host_pool *p);

#endif
