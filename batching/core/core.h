/* SPDX-License-Identifier: Apache-2.0 */
/* The engine's objects (batching/core/): the engine, key and message structs and the stats counters. */
/* What the layers above share of them: keys (key.c), messages (msg.c), executor opening (open.c).
 * Calls only batching/base/; the executor tables are reached through gp_engine.exec. */
#ifndef GP_CORE_H
#define GP_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <openssl/core_dispatch.h>

#include "batching/base/base.h"
#include "batching/request.h"
#include "batching/settings.h"
#include "batching/host_pool.h"
#include "batching/executor.h"
#include "batching/policy/policy.h"
#include "batching/queue.h"
#include "batching/stage.h"
#include "kernels/ghash_mma.h"

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

/* What an executor said when it failed as a whole (gp_engine_executor_fault): the process's first
 * such failure, kept for the engine's one log line about it. Written and read under open_lock. */
typedef struct gp_exec_fault {
    const gp_executor *x;        /* NULL: none yet */
    int gpu;                     /* the GPU's device index; -1: none, or not known */
    int at_open;                 /* it failed while opening: nothing of it ever ran */
    char what[192];              /* the call or step that failed and its error, in the executor's words */
} gp_exec_fault;

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
    int devmem;                  /* device mode (engine.h gp_msg_set_memory), from the next start */
    uint64_t stream;             /* stream-ordered device mode (gp_msg_set_stream), from the next start */
    uint64_t stream_now;         /* the message in progress: its stream (0: synchronous) */
    void *ordered;               /* its executor's state of the mode (NULL: none yet); released by the
                                  * executor's msg_clear */
    int ordered_tag;             /* a tag is queued: ordered_wait gives it (gp_msg_tag_wait) */
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
     * restarts or is freed (msg.c, engine.c), so a 16-byte call pays no locked instruction. */
    uint64_t cpu_calls, cpu_bytes;
};


struct gp_engine {
    gp_knobs knobs;
    /* The executor tables by gp_exec_id (NULL: not built), set by gp_engine_new: the objects below
     * the executors reach them only through here. */
    const gp_executor *exec[GP_EXEC_COUNT];
    OSSL_LIB_CTX *libctx;        /* child of the application's context; cpu executor fetches here */
    pthread_mutex_t open_lock;
    _Atomic unsigned fork_gen;   /* gp_fork_generation() when the executors were opened */
    int opened[GP_EXEC_COUNT];   /* 0 not tried, 1 usable, -1 unusable, GP_EXEC_FAILED (open.c) */
    /* gp_fork_generation() + 1 while opened[] says usable in this process: read without the lock
     * by every message start (gp_engine_executor_usable). */
    _Atomic unsigned usable_gen[GP_EXEC_COUNT];
    /* gp_fork_generation() + 1 once the executor failed as a whole in this process: read without
     * the lock where a message is placed (gp_engine_executor_has_failed). */
    _Atomic unsigned failed_gen[GP_EXEC_COUNT];
    gp_exec_fault fault;         /* under open_lock */
    _Atomic int fault_said;      /* the engine's log line about `fault` is out (once a process) */
    _Atomic unsigned route_epoch;     /* gp_engine_route_epoch */
    _Atomic(const gp_executor *) preferred;   /* where new messages go; resolved at first use; in
                                               * hybrid mode the GPU-side executor */
    _Atomic int hybrid;          /* preferred is shared with the cpu executor by the hybrid policy */
    /* The hybrid policy's numbers and the GPU's warm-up (batching/policy/), given the engine's
     * functions it uses at gp_engine_new. */
    gp_policy policy;
    EVP_CIPHER *cpu_ciphers[8];  /* cpu executor: fetched once from provider=default */
    gp_cpu_direct cpu_direct[8]; /* cpu executor: the same ciphers' functions, called directly */
    gp_host_pool pool;
    gp_queue queue;
    void *cuda;                  /* the cuda executor's device state (batching/cuda/internal.h) */
    gp_stage_pool *host_stage;   /* test hook: the host executor's staging pool (exec_host.c) */
    /* Test hook host_fail_after = N: N + 1 while the host executor has N good batches left before
     * it fails one as a whole; 0: it fails none (exec_host.c). */
    _Atomic int test_host_fail;
    _Atomic int max_inflight;    /* batches the queue lets run at once (cuda: its slots; else 1) */
    gp_stat_shard stats[GP_STAT_SHARDS];   /* knob stats: counters, summed when read */
};

static inline void gp_stat_add(gp_engine *e, enum gp_stat s, uint64_t n)
{
    gp_stat_add_to(e->stats, s, n);
}

/* A cpu lane's or a message's cpu calls, added to the stats (knob stats). */
static inline void gp_stat_add_cpu_calls(gp_engine *e, uint64_t calls, uint64_t bytes)
{
    if (calls == 0 || !e->knobs.stats)
        return;
    gp_stat_add(e, GP_ST_OPS, calls);
    gp_stat_add(e, GP_ST_BATCHES, calls);
    gp_stat_add(e, GP_ST_EXEC_OPS + GP_EXEC_CPU, calls);
    gp_stat_add(e, GP_ST_BYTES, bytes);
}

/* ---- keys (key.c) ---- */

/* The kernel key schedule, made on first use: the cpu executor never needs it. A key belongs to
 * one provider context (EVP contexts are not shared between threads), so no lock is needed. */
const gp_key_sched *gp_key_sched_get(gp_key *k);
/* The key's GHASH matrix for the cuda executor (kernels/ghash_mma.h); NULL when out of memory. */
const gp_ghash_mma *gp_key_ghmma_get(gp_key *k);
/* E_K(in) for one block with the default provider's AES (AES-NI where the CPU has it) under key k,
 * fetched from e's library context; 1 on success, else 0 and out untouched. */
int gp_key_aes_block(gp_engine *e, gp_key *k, const uint8_t in[16], uint8_t out[16]);

/* ---- messages and requests (msg.c) ---- */

/* qsort_r comparator over request indexes (context: the gp_request array): groups each message's
 * requests together, in submission order. */
int gp_cmp_request_by_msg(const void *a, const void *b, void *reqs);
/* Add the message's direct cpu calls to the engine's stats (msg.c; at restart and free). */
void gp_msg_fold_cpu_calls(gp_msg *m);

/* ---- executors, opened once per process (open.c) ---- */

/* Whether x can serve in this process: opens it the first time (off an async job's stack). */
int gp_engine_executor_usable(gp_engine *e, const gp_executor *x);
/* An executor failed as a whole: no new message goes to it in this process. */
void gp_engine_executor_failed(gp_engine *e, const gp_executor *x);
/* The same, said by the executor where it finds the failure: gpu (its device index, -1: none or not
 * known) and `what` (the call or step and its error) are kept if it is the process's first, for the
 * engine's log line. Callable while opening x (the fault then counts as the opening's). */
void gp_engine_executor_fault(gp_engine *e, const gp_executor *x, int gpu, const char *what);
/* Has x failed as a whole in this process? Lock-free. */
int gp_engine_executor_has_failed(gp_engine *e, const gp_executor *x);
/* A copy of the first failure kept (f->x NULL: none). */
void gp_engine_fault_get(gp_engine *e, gp_exec_fault *f);
/* opened[]: an executor that opened and then failed as a whole (unusable; closed with the engine). */
#define GP_EXEC_FAILED (-2)
/* A forked child decides again for itself; the caller holds e->open_lock. */
void gp_engine_check_fork(gp_engine *e);

#endif
