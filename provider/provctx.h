/* SPDX-License-Identifier: Apache-2.0 */
/* What every file of provider/ shares: the provider context, its names, passthrough, knobs, the dispatch tables. */
#ifndef GP_PROVCTX_H
#define GP_PROVCTX_H

#include <pthread.h>

#include <openssl/core.h>
#include <openssl/core_dispatch.h>
#include <openssl/crypto.h>

#include "batching/engine.h"
#include "errors.h"

#define GP_PROV_NAME "gpuprov"
/* Provider param (OSSL_PROVIDER_get_params): the executor new messages go to, e.g. "cuda". */
#define GP_PROV_PARAM_EXECUTOR "gpuprov-executor"
/* Provider params: the stats counters so far (uint64; they count only with knob stats = 1). */
#define GP_PROV_PARAM_STATS_OPS "gpuprov-stats-ops"
#define GP_PROV_PARAM_STATS_BATCHES "gpuprov-stats-batches"
#define GP_PROV_PARAM_STATS_ASYNC_OPS "gpuprov-stats-async-ops"
#define GP_PROV_PARAM_STATS_SPEC_TAGS "gpuprov-stats-spec-tags"
#define GP_PROV_PARAM_STATS_STAGED "gpuprov-stats-staged"
#define GP_PROV_PARAM_STATS_FALLBACKS "gpuprov-stats-fallbacks"
#define GP_PROV_PARAM_STATS_ERRORS "gpuprov-stats-errors"
#define GP_PROV_PARAM_STATS_CUDA_OPS "gpuprov-stats-cuda-ops"
#define GP_PROV_PARAM_STATS_ROUTED_GPU "gpuprov-stats-routed-gpu"
#define GP_PROV_PARAM_STATS_HOST_OPS "gpuprov-stats-host-ops"

/* Cipher context param (UTF-8 string): where the data updates' in and out buffers are, "host"
 * (the default) or "device" (CUDA device or managed memory; docs/config.md, "Per-context parameter"). */
#define GP_CIPHER_PARAM_MEMORY "gpuprov-memory"
/* Cipher context param (unsigned integer, 8 bytes): device mode's requests ordered on this CUDA
 * stream (a cudaStream_t's value), queued there without waiting; 0 (the default): synchronous
 * (docs/config.md, "gpuprov-cuda-stream"). */
#define GP_CIPHER_PARAM_CUDA_STREAM "gpuprov-cuda-stream"

/* Passthrough (provider/passthrough.c): the default provider's cipher functions under gpuprov's
 * names, for a process no GPU can ever serve. */
#define GP_PT_ALGS 8                 /* gpuprov's ciphers (prov.c, gp_ciphers) */
#define GP_PT_MAX_FUNCS 32           /* a default-provider cipher has about 15 */
typedef struct gp_passthrough {
    pthread_mutex_t lock;
    int state;                       /* 0: not decided, 1: served, -1: gpuprov's own table serves */
    OSSL_PROVIDER *deflt;            /* the default provider, loaded in the child context */
    void *dprovctx;                  /* its provider context */
    OSSL_FUNC_cipher_newctx_fn *newctx[GP_PT_ALGS];
    OSSL_FUNC_cipher_gettable_params_fn *gettable_params[GP_PT_ALGS];
    OSSL_FUNC_cipher_gettable_ctx_params_fn *gettable_ctx_params[GP_PT_ALGS];
    OSSL_FUNC_cipher_settable_ctx_params_fn *settable_ctx_params[GP_PT_ALGS];
    OSSL_DISPATCH dispatch[GP_PT_ALGS][GP_PT_MAX_FUNCS];
    OSSL_ALGORITHM algs[GP_PT_ALGS + 1];
} gp_passthrough;

typedef struct gp_provctx {
    const OSSL_CORE_HANDLE *handle;
    OSSL_LIB_CTX *libctx;        /* child of the loading application's context */
    gp_engine *engine;
    gp_knobs knobs;
    gp_passthrough pt;
} gp_provctx;

/* The passthrough table for `own` (gpuprov's cipher table), or NULL where gpuprov's own serves: a
 * GPU may serve this process, or the default provider's functions cannot be had. */
const OSSL_ALGORITHM *gp_passthrough_ciphers(gp_provctx *pc, const OSSL_ALGORITHM *own);
/* Was the passthrough table given out? */
int gp_passthrough_served(gp_provctx *pc);
void gp_passthrough_init(gp_provctx *pc);
void gp_passthrough_free(gp_provctx *pc);

/* Dispatch tables, one per algorithm and key size (provider/cipher_*.c). */
extern const OSSL_DISPATCH gp_aes128ctr_functions[], gp_aes192ctr_functions[], gp_aes256ctr_functions[];
extern const OSSL_DISPATCH gp_aes128gcm_functions[], gp_aes192gcm_functions[], gp_aes256gcm_functions[];
extern const OSSL_DISPATCH gp_chacha20_functions[], gp_chacha20_poly1305_functions[];

/* Knobs: the provider's config section through the core, handed to the settings registry
 * (batching/settings.h), whose GPUPROV_* variables win. */
void gp_knobs_load(gp_knobs *k, const OSSL_CORE_HANDLE *handle, OSSL_FUNC_core_get_params_fn *get_params);

#endif
