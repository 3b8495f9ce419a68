/* SPDX-License-Identifier: Apache-2.0 */
/* Passthrough: where no GPU can ever serve, gpuprov's ciphers are the default provider's own functions. */
#include <string.h>

#include <openssl/err.h>
#include <openssl/provider.h>

#include "batching/base/base.h"
#include "provctx.h"

/*
 * On a host without a GPU, under backend auto (gp_engine_gpu_possible), every message would run on
 * the CPU for the life of the process, so gpuprov's own layer (its checks, the lane's frames) could
 * only cost. The cipher table it gives the core is then the default provider's implementation of
 * each name, function for function: EVP calls the default's code with the default's context, and
 * loading gpuprov costs nothing per call. The table keeps gpuprov's names and property, so a fetch
 * with provider=gpuprov still succeeds. Only the functions that receive the provider context are
 * gpuprov's (NEWCTX and the gettable and settable lists): the core passes gpuprov's, and they hand
 * on the default provider's. The default provider is loaded into gpuprov's child library context
 * for this, and unloaded at teardown.
 */

/* Our context -> the default provider's, for the functions that take one; one set per algorithm. */
#define PT_WRAPPERS(i)                                                                              \
    static void *pt_newctx_##i(void *provctx)                                                       \
    {                                                                                               \
        const gp_passthrough *pt = &((gp_provctx *)provctx)->pt;                                    \
        return pt->newctx[i](pt->dprovctx);                                                         \
    }                                                                                               \
    static const OSSL_PARAM *pt_gettable_params_##i(void *provctx)                                  \
    {                                                                                               \
        const gp_passthrough *pt = &((gp_provctx *)provctx)->pt;                                    \
        return pt->gettable_params[i](pt->dprovctx);                                                \
    }                                                                                               \
    static const OSSL_PARAM *pt_gettable_ctx_params_##i(void *cctx, void *provctx)                  \
    {                                                                                               \
        const gp_passthrough *pt = &((gp_provctx *)provctx)->pt;                                    \
        return pt->gettable_ctx_params[i](cctx, pt->dprovctx);                                      \
    }                                                                                               \
    static const OSSL_PARAM *pt_settable_ctx_params_##i(void *cctx, void *provctx)                  \
    {                                                                                               \
        const gp_passthrough *pt = &((gp_provctx *)provctx)->pt;                                    \
        return pt->settable_ctx_params[i](cctx, pt->dprovctx);                                      \
    }
PT_WRAPPERS(0) PT_WRAPPERS(1) PT_WRAPPERS(2) PT_WRAPPERS(3)
PT_WRAPPERS(4) PT_WRAPPERS(5) PT_WRAPPERS(6) PT_WRAPPERS(7)

#define PT_ROW(i) { (void (*)(void))pt_newctx_##i, (void (*)(void))pt_gettable_params_##i,         \
                    (void (*)(void))pt_gettable_ctx_params_##i, (void (*)(void))pt_settable_ctx_params_##i }
static void (*const wrappers[GP_PT_ALGS][4])(void) = {
    PT_ROW(0), PT_ROW(1), PT_ROW(2), PT_ROW(3), PT_ROW(4), PT_ROW(5), PT_ROW(6), PT_ROW(7),
};

/* The default's implementation of own's first name, or NULL if it has none or several. */
static const OSSL_DISPATCH *default_impl(const OSSL_ALGORITHM *dalgs, const char *own_names)
{
    const char *colon = strchr(own_names, ':');
    size_t n = colon != NULL ? (size_t)(colon - own_names) : strlen(own_names);
    const OSSL_DISPATCH *found = NULL;

    for (const OSSL_ALGORITHM *a = dalgs; a->algorithm_names != NULL; a++) {
        if (!gp_names_include(a->algorithm_names, own_names, n))
            continue;
        if (found != NULL)
            return NULL;
        found = a->implementation;
    }
    return found;
}

/* Row i of pt: the default's functions, the four that take a provider context wrapped. 0 if the
 * default's table lacks NEWCTX or has more functions than the row holds. */
static int fill_row(gp_passthrough *pt, int i, const OSSL_DISPATCH *impl)
{
    size_t n = 0;

    for (const OSSL_DISPATCH *f = impl; f->function_id != 0; f++) {
        void (*fn)(void) = f->function;

        if (n + 1 >= GP_PT_MAX_FUNCS)
            return 0;
        switch (f->function_id) {
        case OSSL_FUNC_CIPHER_NEWCTX:
            pt->newctx[i] = OSSL_FUNC_cipher_newctx(f);
            fn = wrappers[i][0];
            break;
        case OSSL_FUNC_CIPHER_GETTABLE_PARAMS:
            pt->gettable_params[i] = OSSL_FUNC_cipher_gettable_params(f);
            fn = wrappers[i][1];
            break;
        case OSSL_FUNC_CIPHER_GETTABLE_CTX_PARAMS:
            pt->gettable_ctx_params[i] = OSSL_FUNC_cipher_gettable_ctx_params(f);
            fn = wrappers[i][2];
            break;
        case OSSL_FUNC_CIPHER_SETTABLE_CTX_PARAMS:
            pt->settable_ctx_params[i] = OSSL_FUNC_cipher_settable_ctx_params(f);
            fn = wrappers[i][3];
            break;
        default:
            break;
        }
        pt->dispatch[i][n++] = (OSSL_DISPATCH){ f->function_id, fn };
    }
    pt->dispatch[i][n] = (OSSL_DISPATCH){ 0, NULL };
    return pt->newctx[i] != NULL;
}

/* The table, from the default provider loaded into pc's child context; 0 where it cannot be had
 * (gpuprov's own table then serves). Under pt->lock. */
static int build(gp_provctx *pc, const OSSL_ALGORITHM *own)
{
    gp_passthrough *pt = &pc->pt;
    const OSSL_ALGORITHM *dalgs;
    int no_cache = 0, ok = 1, i = 0;

    ERR_set_mark();
    pt->deflt = OSSL_PROVIDER_load(pc->libctx, "default");
    dalgs = pt->deflt != NULL ? OSSL_PROVIDER_query_operation(pt->deflt, OSSL_OP_CIPHER, &no_cache) : NULL;
    ERR_pop_to_mark();   /* no default provider: a decision to serve gpuprov's own, not an error */
    if (dalgs == NULL)
        goto fail;
    pt->dprovctx = OSSL_PROVIDER_get0_provider_ctx(pt->deflt);
    for (; own[i].algorithm_names != NULL && ok; i++) {
        const OSSL_DISPATCH *impl = i < GP_PT_ALGS ? default_impl(dalgs, own[i].algorithm_names) : NULL;

        ok = impl != NULL && fill_row(pt, i, impl);
        pt->algs[i] = (OSSL_ALGORITHM){ own[i].algorithm_names, own[i].property_definition, pt->dispatch[i],
                                        own[i].algorithm_description };
    }
    pt->algs[i] = (OSSL_ALGORITHM){ NULL, NULL, NULL, NULL };
    /* The default's table is static (its dispatch arrays outlive the query): only the list goes back. */
    OSSL_PROVIDER_unquery_operation(pt->deflt, OSSL_OP_CIPHER, dalgs);
    if (ok)
        return 1;
fail:
    if (pt->deflt != NULL)
        OSSL_PROVIDER_unload(pt->deflt);
    pt->deflt = NULL;
    pt->dprovctx = NULL;
    return 0;
}

const OSSL_ALGORITHM *gp_passthrough_ciphers(gp_provctx *pc, const OSSL_ALGORITHM *own)
{
    gp_passthrough *pt = &pc->pt;
    const OSSL_ALGORITHM *algs;

    /* Decided once: the core asks again for each algorithm it has not cached yet. */
    pthread_mutex_lock(&pt->lock);
    if (pt->state == 0)
        pt->state = !gp_engine_gpu_possible(pc->engine) && build(pc, own) ? 1 : -1;
    algs = pt->state == 1 ? pt->algs : NULL;
    pthread_mutex_unlock(&pt->lock);
    return algs;
}

int gp_passthrough_served(gp_provctx *pc)
{
    int served;

    pthread_mutex_lock(&pc->pt.lock);
    served = pc->pt.state == 1;
    pthread_mutex_unlock(&pc->pt.lock);
    return served;
}

void gp_passthrough_init(gp_provctx *pc)
{
    memset(&pc->pt, 0, sizeof(pc->pt));
    pthread_mutex_init(&pc->pt.lock, NULL);
}

void gp_passthrough_free(gp_provctx *pc)
{
    if (pc->pt.deflt != NULL)
        OSSL_PROVIDER_unload(pc->pt.deflt);
    pthread_mutex_destroy(&pc->pt.lock);
    memset(&pc->pt, 0, sizeof(pc->pt));
}
