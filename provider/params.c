/* SPDX-License-Identifier: Apache-2.0 */
/* OSSL_PARAM helpers: the general forms the inline ones of params.h hand on. */
#include "errors.h"
#include "params.h"

int gp_param_set_size_slow(OSSL_PARAM *p, size_t v)
{
    if (OSSL_PARAM_set_size_t(p, v))
        return 1;
    GP_RAISE(GP_R_INVALID_PARAMETER);
    return 0;
}

