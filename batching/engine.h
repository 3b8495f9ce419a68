/* SPDX-License-Identifier: Apache-2.0 */
/* The engine's face to the provider: keys, messages, requests, executors and stats. */
#ifndef GP_ENGINE_H
#define GP_ENGINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <openssl/core_dispatch.h>
#include <openssl/types.h>

#include "batching/request.h"
#include "batching/settings.h"
#include "kernels/batch_abi.h"

/*
 * The provider turns EVP calls into requests on messages; the engine runs them on an executor:
 *   cuda : kernels/ on the GPU
 *   host : the same kernel code on CPU threads (how CI proves the kernels; last-resort fallback)
 *   cpu  : OpenSSL's default provider through a child library context
 * A message is owned by the executor chosen when it starts (the cpu executor keeps its own
 * default-provider context, so a message that starts there finishes there; a CTR or ChaCha20
 * stream on the provider's cpu lane goes on as a new message at its counter: gp_engine_move_to_gpu).
 */


gp_engine *gp_engine_new(const gp_knobs *knobs, OSSL_LIB_CTX *libctx);
void gp_engine_free(gp_engine *e);            /* prints the stats line when knobs.stats */
/* The executor new messages go to (resolves the backend knob: opens executors on first use). */
const char *gp_engine_backend_name(gp_engine *e);
/*
 * Can a GPU ever serve this process's messages? 0 only where gpuprov chooses (backend auto, the
 * host executor not standing in for a GPU) and there is no GPU to choose: the cuda executor is not
 * built, CUDA_VISIBLE_DEVICES hides every device, or the NVIDIA driver shows none. A cheap look
 * (an environment variable, two paths), at no cost to a GPU: it never opens CUDA. Where in doubt, 1.
 */
int gp_engine_gpu_possible(const gp_engine *e);

/* Messages run on the engine (keys and the messages' life cycle: batching/request.h). */
int gp_msg_start(gp_msg *m, gp_key *k, const uint8_t *iv, size_t ivlen, int enc);
int gp_msg_aad(gp_msg *m, const uint8_t *aad, size_t len);
int gp_msg_crypt(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len);
int gp_msg_tag(gp_msg *m, uint8_t tag[16]);
/* Decrypt: compare the computed tag with tag[0..taglen) in constant time; enum gp_req_status. */
int gp_msg_verify(gp_msg *m, const uint8_t *tag, size_t taglen);

/*
 * Device mode: the data requests' buffers of a message are CUDA memory (device or managed), which
 * the GPU holding them reads and writes in place; AAD, keys, IVs and tags stay host memory. Set
 * between messages; it holds from the next gp_msg_start. gp_engine_device_memory says whether an
 * executor here can take it: the cuda executor with a usable GPU (never the cpu executor, which
 * cannot read device memory, and no CPU fallback exists for it), or in test builds the host
 * executor standing in with its registry of fake allocations (GPUPROV_TEST_HOST_DEVMEM).
 */
int gp_engine_device_memory(gp_engine *e);
void gp_msg_set_memory(gp_msg *m, int device);
/* A data request on device memory: every check, then the run; enum gp_mem_status. */
int gp_msg_crypt_device(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len);
/* gp_msg_crypt_device's checks alone (m started): GP_MEM_OK and *gpu, the GPU that holds in and
 * out, where a request of m may take them as device memory (gp_request.devmem, .gpu). A question,
 * not a failure: nothing is counted in the stats' errors. */
int gp_msg_check_device(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len, int *gpu);
/* Device mode: is p host memory, as AAD must be (the host reads it)? A device pointer given as AAD
 * is refused rather than read. */
int gp_msg_is_host_memory(gp_msg *m, const uint8_t *p, size_t len);

/*
 * Stream-ordered device mode (docs/config.md, "gpuprov-cuda-stream"): a device-mode message's
 * requests are ordered on the caller's stream (a cudaStream_t's value; 0: synchronous device mode).
 * Set between messages; it holds from the next gp_msg_start of a device-mode message. Where the
 * executor queues on streams (ordered_run, batching/executor.h), AAD, data and tags are queued and
 * their calls return at once: gp_msg_crypt_device says GP_MEM_OK once queued, gp_msg_tag 1 once
 * the tag is queued (gp_msg_tag_pending), and gp_msg_tag_wait waits for the message's own work and
 * gives the tag; gp_msg_verify waits for the message's own work. A failure of queued work shows at
 * the message's next call (GP_MEM_FAILED, 0, GP_REQ_FAILED). Elsewhere (the cuda executor today)
 * each request runs synchronously, its batch ordered after the stream's earlier work.
 * gp_engine_streams: does the executor that takes device memory here take streams?
 */
int gp_engine_streams(gp_engine *e);
void gp_msg_set_stream(gp_msg *m, uint64_t stream);
int gp_msg_tag_pending(const gp_msg *m);
int gp_msg_tag_wait(gp_msg *m, uint8_t tag[16]);   /* enum gp_req_status */
/* Messages whose stream-ordered state ends together (a pipeline's, at its re-init or its end):
 * released at once, as each one's next gp_msg_start or gp_msg_free would release it alone (the
 * executor may then clear what they share once: gp_executor.msgs_clear). */
void gp_msgs_end_ordered(gp_msg *const *ms, size_t n);

/* Run several requests as one batch (what the provider's single calls do with n = 1). Requests of
 * one message run in submission order. Returns 1 when every request succeeded; each request's
 * status says which did not. */
int gp_engine_submit(gp_engine *e, gp_request *reqs, size_t n);
/*
 * Requests of several messages at once, at most one per message, each as gp_msg_aad, gp_msg_crypt,
 * gp_msg_tag or gp_msg_verify would run it alone (`kind`, `in`, `out`, `len`, the tag fields and,
 * device mode, `devmem` and `gpu` set by the caller; `msg` each one's message): OpenSSL 3.5's pipeline
 * calls. Messages not yet routed take one route together, for the batch they make (rule 2 of the
 * hybrid policy weighs its whole length: one round trip serves it). Those on the cpu executor run
 * there one by one (the default provider's code); the GPU side's run as one batch, one run of the
 * executor (gp_engine_submit: one launch on the GPU), except inside an async job, where each is
 * queued. Stream-ordered messages' data requests and tags are queued on their stream as one batch
 * where the executor takes them so (gp_executor.ordered_batch), else each alone. Returns 1 when
 * every request succeeded; each status says which did not.
 */
int gp_msgs_submit(gp_engine *e, gp_request *reqs, size_t n);



/*
 * Does a message of `alg` with a key of `keylen` bytes that starts now belong on the cpu lane?
 * Returns the default provider's functions for it, or NULL (the message goes through the engine:
 * gp_msg_start). `last_bytes` is the data length of the context's previous message (UINT64_MAX if
 * none): with the hybrid policy active, a context whose messages are shorter than the GPU's
 * threshold stays on the CPU. Lock-free once the executors are open; may start the GPU's warm-up
 * when the process shows demand for it.
 */
const gp_cpu_direct *gp_engine_cpu_lane(gp_engine *e, uint32_t alg, size_t keylen, uint64_t last_bytes);
/* A cipher context is being made: where the backend knob names the GPU side (cuda, hybrid) it
 * opens now, once per process, so that no message waits for the opening (docs/config.md,
 * "backend"). auto opens only on demand (batching/policy/warm.c), cpu and host never. */
void gp_engine_open_named_gpu(gp_engine *e);
/* A word that changes whenever where messages go may have changed (the warm-up finished, an
 * executor failed): a context on the lane asks gp_engine_cpu_lane again at its next message. Read
 * it relaxed; it lives as long as the engine. */
const _Atomic unsigned *gp_engine_route_epoch(gp_engine *e);
/* A lane update of `len` bytes of alg: from GP_DEMAND_BYTES the process shows demand for the GPU,
 * where the numbers known before it opens would send such a message there (or none are known). */
void gp_engine_note_large(gp_engine *e, uint32_t alg, size_t len);
/*
 * A data request of `len` bytes (>= GP_DEMAND_BYTES) of a message that runs on the CPU (the cpu
 * lane, or the engine's cpu executor: gp_msg_on_cpu): should the message go on as a new engine
 * message, which the hybrid policy would route to the GPU side (rules 1 and 2 of
 * batching/policy/hybrid.c)? `first`: the message has absorbed nothing yet (no data, no AAD), so
 * it may start afresh; before the GPU is open such a request waits for it (bounded,
 * batching/policy/warm.c) where the persisted numbers or the prior send it there. Otherwise (a
 * stream in progress) the answer is only yes once the GPU is open and measured.
 */
int gp_engine_move_to_gpu(gp_engine *e, uint32_t alg, size_t len, int first);
/* Does the message run on the engine's cpu executor (routed there, or started there)? */
int gp_msg_on_cpu(const gp_msg *m);
/* A lane's counts (its updates and their bytes), added to the stats when it closes: the lane's own
 * counters belong to its context, so no update touches a shared line. */
void gp_engine_count_lane(gp_engine *e, uint64_t calls, uint64_t bytes);

/* A copy of the counters (kept only when knobs.stats is on), for tests and the stats line.
 * async_ops: requests made inside an ASYNC_JOB that paused the job while their batch ran. */
typedef struct gp_stats {
    uint64_t ops, bytes, cuda_ops, host_ops, cpu_ops, batches, fallbacks, errors, async_ops;
    uint64_t routed_gpu, routed_cpu;   /* hybrid: messages sent each way */
    uint64_t spec_tags;      /* tags/verdicts answered from the last request's speculative tag */
    uint64_t staged;         /* async data requests whose job staged its bytes (batching/stage.h) */
    uint64_t notify_ns;      /* spent waking async jobs (a write to each one's wait fd, or its callback) */
} gp_stats;
void gp_engine_stats(gp_engine *e, gp_stats *out);

#endif
