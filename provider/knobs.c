/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs: the provider's openssl.cnf section, read through the core, handed to the settings registry. */
#include <openssl/params.h>

#include "provctx.h"

typedef struct config_section {
    const OSSL_CORE_HANDLE *handle;
    OSSL_FUNC_core_get_params_fn *get_params;
} config_section;

/* Keys of the provider's config section are readable by name through the core's get_params; the
 * value stays valid while the provider is loaded. */
static const char *config_value(void *arg, const char *key)
{
    const config_section *c = arg;
    char *v = NULL;
    OSSL_PARAM params[] = { OSSL_PARAM_utf8_ptr(key, &v, 0), OSSL_PARAM_END };

    if (!c->get_params(c->handle, params))
        return NULL;
    return v;
}

void gp_knobs_load(gp_knobs *k, const OSSL_CORE_HANDLE *handle, OSSL_FUNC_core_get_params_fn *get_params)
{
    config_section c = { handle, get_params };

    gp_settings_load(k, get_params != NULL ? config_value : NULL, &c);
}
