/* SPDX-License-Identifier: Apache-2.0 */
/* Provider entry point: init, teardown, algorithm query and provider params. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "batching/base/base.h"
#include "provctx.h"

#ifndef GPUPROV_VERSION
# define GPUPROV_VERSION "0.0.0"
#endif
#ifndef GPUPROV_BUILDINFO
# define GPUPROV_BUILDINFO "gpuprov " GPUPROV_VERSION
#endif

#define ALG(names, funcs, desc) { names, "provider=" GP_PROV_NAME, funcs, desc }
static const OSSL_ALGORITHM gp_ciphers[] = {
    /* Names and aliases as the default provider registers them (libssl fetches the id- names). */
    ALG("AES-256-GCM:id-aes256-GCM:2.16.840.1.101.3.4.1.46", gp_aes256gcm_functions, "gpuprov AES-256-GCM"),
    ALG("AES-192-GCM:id-aes192-GCM:2.16.840.1.101.3.4.1.26", gp_aes192gcm_functions, "gpuprov AES-192-GCM"),
    ALG("AES-128-GCM:id-aes128-GCM:2.16.840.1.101.3.4.1.6", gp_aes128gcm_functions, "gpuprov AES-128-GCM"),
    ALG("AES-256-CTR", gp_aes256ctr_functions, "gpuprov AES-256-CTR"),
    ALG("AES-192-CTR", gp_aes192ctr_functions, "gpuprov AES-192-CTR"),
    ALG("AES-128-CTR", gp_aes128ctr_functions, "gpuprov AES-128-CTR"),
    ALG("ChaCha20", gp_chacha20_functions, "gpuprov ChaCha20"),
    ALG("ChaCha20-Poly1305", gp_chacha20_poly1305_functions, "gpuprov ChaCha20-Poly1305"),
    { NULL, NULL, NULL, NULL }
};

static const OSSL_ALGORITHM *gp_query(void *provctx, int operation_id, int *no_cache)
{
    const OSSL_ALGORITHM *pt;

    *no_cache = 0;
    if (operation_id != OSSL_OP_CIPHER)
        return NULL;
    pt = gp_passthrough_ciphers(provctx, gp_ciphers);
    return pt != NULL ? pt : gp_ciphers;
}

static const OSSL_PARAM *gp_gettable_params(void *provctx)
{
    static const OSSL_PARAM params[] = {
        OSSL_PARAM_DEFN(OSSL_PROV_PARAM_NAME, OSSL_PARAM_UTF8_PTR, NULL, 0),
        OSSL_PARAM_DEFN(OSSL_PROV_PARAM_VERSION, OSSL_PARAM_UTF8_PTR, NULL, 0),
        OSSL_PARAM_DEFN(OSSL_PROV_PARAM_BUILDINFO, OSSL_PARAM_UTF8_PTR, NULL, 0),
        OSSL_PARAM_DEFN(OSSL_PROV_PARAM_STATUS, OSSL_PARAM_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_EXECUTOR, OSSL_PARAM_UTF8_PTR, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_OPS, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_BATCHES, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_ASYNC_OPS, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_SPEC_TAGS, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_STAGED, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_ROUTED_GPU, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_HOST_OPS, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_FALLBACKS, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_ERRORS, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_DEFN(GP_PROV_PARAM_STATS_CUDA_OPS, OSSL_PARAM_UNSIGNED_INTEGER, NULL, 0),
        OSSL_PARAM_END
    };

    (void)provctx;
    return params;
}

static int gp_get_params(void *provctx, OSSL_PARAM params[])
{
    gp_provctx *pc = provctx;
    OSSL_PARAM *p;
    gp_stats st;

    if ((p = OSSL_PARAM_locate(params, OSSL_PROV_PARAM_NAME)) != NULL
        && !OSSL_PARAM_set_utf8_ptr(p, "gpuprov: GPU AES-CTR, AES-GCM, ChaCha20-Poly1305"))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PROV_PARAM_VERSION)) != NULL
        && !OSSL_PARAM_set_utf8_ptr(p, GPUPROV_VERSION))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PROV_PARAM_BUILDINFO)) != NULL
        && !OSSL_PARAM_set_utf8_ptr(p, GPUPROV_BUILDINFO))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PROV_PARAM_STATUS)) != NULL
        && !OSSL_PARAM_set_int(p, 1))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_EXECUTOR)) != NULL
        && !OSSL_PARAM_set_utf8_ptr(p, gp_engine_backend_name(pc->engine)))
        return 0;
    gp_engine_stats(pc->engine, &st);
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_OPS)) != NULL && !OSSL_PARAM_set_uint64(p, st.ops))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_BATCHES)) != NULL
        && !OSSL_PARAM_set_uint64(p, st.batches))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_ASYNC_OPS)) != NULL
        && !OSSL_PARAM_set_uint64(p, st.async_ops))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_SPEC_TAGS)) != NULL
        && !OSSL_PARAM_set_uint64(p, st.spec_tags))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_STAGED)) != NULL && !OSSL_PARAM_set_uint64(p, st.staged))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_ROUTED_GPU)) != NULL
        && !OSSL_PARAM_set_uint64(p, st.routed_gpu))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_HOST_OPS)) != NULL
        && !OSSL_PARAM_set_uint64(p, st.host_ops))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_FALLBACKS)) != NULL
        && !OSSL_PARAM_set_uint64(p, st.fallbacks))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_ERRORS)) != NULL && !OSSL_PARAM_set_uint64(p, st.errors))
        return 0;
    if ((p = OSSL_PARAM_locate(params, GP_PROV_PARAM_STATS_CUDA_OPS)) != NULL
        && !OSSL_PARAM_set_uint64(p, st.cuda_ops))
        return 0;
    return 1;
}

static const OSSL_ITEM *gp_get_reason_strings(void *provctx)
{
    (void)provctx;
    return gp_reason_strings();
}

static void gp_teardown(void *vprovctx)
{
    gp_provctx *pc = vprovctx;

    if (pc == NULL)
        return;
    if (pc->knobs.stats && gp_passthrough_served(pc))
        gp_log_line("gpuprov passthrough: no GPU can serve this process (backend auto): its ciphers"
                    " were the default provider's own functions, and the counts below stay 0\n");
    gp_engine_free(pc->engine);   /* prints the stats line when asked */
    gp_passthrough_free(pc);
    OSSL_LIB_CTX_free(pc->libctx);
    gp_errors_release(pc->handle);
    free(pc);
}

static const OSSL_DISPATCH gp_provider_functions[] = {
    { OSSL_FUNC_PROVIDER_TEARDOWN, (void (*)(void))gp_teardown },
    { OSSL_FUNC_PROVIDER_GETTABLE_PARAMS, (void (*)(void))gp_gettable_params },
    { OSSL_FUNC_PROVIDER_GET_PARAMS, (void (*)(void))gp_get_params },
    { OSSL_FUNC_PROVIDER_QUERY_OPERATION, (void (*)(void))gp_query },
    { OSSL_FUNC_PROVIDER_GET_REASON_STRINGS, (void (*)(void))gp_get_reason_strings },
    { 0, NULL }
};

__attribute__((visibility("default")))
int OSSL_provider_init(const OSSL_CORE_HANDLE *handle, const OSSL_DISPATCH *in,
                       const OSSL_DISPATCH **out, void **provctx)
{
    OSSL_FUNC_core_get_params_fn *core_get_params = NULL;
    gp_provctx *pc;

    for (const OSSL_DISPATCH *f = in; f->function_id != 0; f++) {
        if (f->function_id == OSSL_FUNC_CORE_GET_PARAMS)
            core_get_params = OSSL_FUNC_core_get_params(f);
    }
    if ((pc = calloc(1, sizeof(*pc))) == NULL)
        return 0;
    if (!gp_errors_init(handle, in)) {
        free(pc);
        return 0;
    }
    pc->handle = handle;
    gp_passthrough_init(pc);
    gp_knobs_load(&pc->knobs, handle, core_get_params);
    /* A child context sees the application's providers: the cpu executor fetches from default
     * there, and the IV generator draws from its DRBG. Never the NULL context. */
    pc->libctx = OSSL_LIB_CTX_new_child(handle, in);
    if (pc->libctx == NULL)
        goto err;
    /* The child's DRBG (TLS 1.2 GCM explicit nonces) fetches its AES-256-CTR in the child, where
     * gpuprov itself is visible again: served by gpuprov, it would hold a reference on gpuprov from
     * inside gpuprov, so the provider would never be torn down (no stats line, a leak at exit).
     * Prefer the default provider there, as config/gpuprov.cnf does for the application's DRBG. */
    if (!RAND_set_DRBG_type(pc->libctx, NULL, "?provider=default", NULL, NULL))
        goto err;
    pc->engine = gp_engine_new(&pc->knobs, pc->libctx);
    if (pc->engine == NULL)
        goto err;
    *out = gp_provider_functions;
    *provctx = pc;
    return 1;
err:
    gp_teardown(pc);
    return 0;
}
