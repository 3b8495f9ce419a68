/* SPDX-License-Identifier: Apache-2.0 */
/* The executor interface: one table of callbacks per executor (cuda, host, cpu), and nothing else. */
#ifndef GP_EXECUTOR_H
#define GP_EXECUTOR_H

#include <stddef.h>

#include "batching/base/base.h"
#include "batching/request.h"
#include "batching/stage.h"

typedef enum gp_exec_id { GP_EXEC_CUDA = 0, GP_EXEC_HOST, GP_EXEC_CPU, GP_EXEC_COUNT } gp_exec_id;
/* The stats count each executor's requests (batching/base/base.h, GP_ST_EXEC_OPS). */
_Static_assert(GP_EXEC_COUNT == GP_ST_EXECUTORS, "one stats counter per executor");

/*
 * One table of callbacks per executor: the units below the engine and the engine's batches reach an
 * executor only through it. The engine alone also calls two executors' own functions (exec_cpu.h,
 * exec_host.h), downward calls that a table entry would only slow or obscure: the cpu lane runs a
 * request, an update and the lane's lookup on the cpu executor directly (a 16-byte call pays no
 * indirect call), and gp_engine_free stops the host executor's pool. `open` runs once per process,
 * lazily (after a fork too), and says whether the executor can serve here.
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
    /* msg_clear of messages that end together (engine.h, gp_msgs_end_ordered): those of ms[0..n)
     * whose m->exec is this executor, at once; NULL: msg_clear each. */
    void (*msgs_clear)(gp_msg *const *ms, size_t n);
    /* Where async jobs stage their data for this executor (stage.h); NULL, or a NULL result: they
     * do not. */
    gp_stage_pool *(*stage_pool)(gp_engine *e);
    /* Per-message work a data request's own thread does before it queues, so that the batch's
     * leader or dispatcher, one thread for the whole batch, does not; NULL: none. */
    void (*prepare)(gp_engine *e, gp_request *r);
    /* The key is being freed: drop what the executor keeps of it (cuda: its resident schedule);
     * NULL: nothing kept. May run on an async job's stack. */
    void (*key_forget)(gp_engine *e, gp_key *k);
    /* Device mode (engine.h): may this executor take [p, p + len) as device memory? enum
     * gp_mem_status; *gpu: the GPU that holds it. GP_MEM_NO_EXECUTOR (p NULL included): it takes
     * none in this engine now; NULL: it never takes any. */
    int (*mem_check)(gp_engine *e, const void *p, size_t len, int *gpu);
    /*
     * Stream-ordered device mode (engine.h, gp_msg_set_stream). stream_check: may requests on data
     * of GPU `gpu` be ordered on `stream` (a cudaStream_t's value)? enum gp_mem_status; NULL: the
     * executor takes no streams. ordered_run: queue r (data, AAD or tag; a tag's answer is kept for
     * ordered_wait) on the stream after its earlier work and return at once, having copied what of
     * r lives in host memory (AAD); enum gp_req_status (GP_REQ_FAILED: not queued, or an earlier
     * queued request of the message failed; GP_REQ_SYNC: the executor cannot queue this one (its
     * buffers' alignment, no room), and has waited for the message's queued work and handed its
     * state back to m->st: the engine runs it synchronously, and the next one is queued again). NULL: such requests run synchronously through the
     * queue, their batch ordered after the stream's earlier work (r->stream). ordered_wait: until
     * the message's queued requests have run (its own, not the stream's later work); the last
     * queued tag to `tag` (may be NULL) and the message's state to m->st; enum gp_req_status. The
     * executor's per-message state of the mode (m->ordered) is released by msg_clear, deferred
     * until the stream has run what it holds.
     *
     * ordered_batch: requests of n messages (2..GP_ORDERED_BATCH_MAX, at most one each, already
     * queued on `stream` or starting there), each a data request (device memory) or a tag
     * (GP_REQ_TAG), carrying at most GP_MSG_AAD_HOLD bytes of AAD: queued as one batch, in passes
     * of one launch pair each (batching/kstate.h, gp_ordered_pass_next), and the call returns at
     * once. GP_REQ_SYNC: none queued and nothing changed (one of them cannot be queued now, or its
     * message failed before): the engine queues each alone (ordered_run). Otherwise every
     * reqs[i].status is set (GP_REQ_OK: queued; GP_REQ_FAILED: not queued, the launch failed) and
     * the call returns GP_REQ_OK. NULL: each alone.
     */
    int (*stream_check)(gp_engine *e, uint64_t stream, int gpu);
    int (*ordered_run)(gp_engine *e, gp_request *r, uint64_t stream);
    int (*ordered_batch)(gp_engine *e, gp_request *reqs, size_t n, uint64_t stream);
    int (*ordered_wait)(gp_engine *e, gp_msg *m, uint8_t tag[16]);
} gp_executor;

extern const gp_executor gp_exec_host;
extern const gp_executor gp_exec_cpu;
#ifdef GPUPROV_HAVE_CUDA
extern const gp_executor gp_exec_cuda;
#endif

#endif
