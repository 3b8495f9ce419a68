/* SPDX-License-Identifier: Apache-2.0 */
/* OSSL_PARAM helpers for the forms EVP asks in at every init and message. */
#ifndef GP_PARAMS_H
#define GP_PARAMS_H

#include <string.h>

#include <openssl/params.h>

/* Set a size_t param, raising INVALID_PARAMETER when it does not fit. Inline for the form EVP
 * builds (a size_t), which it asks for at every init. */
int gp_param_set_size_slow(OSSL_PARAM *p, size_t v);
/* Is `p` a size_t as EVP builds it? Then gp_param_put_size answers it. */
static inline int gp_param_is_size_t(const OSSL_PARAM *p)
{
    return p->data_type == OSSL_PARAM_UNSIGNED_INTEGER && p->data_size == sizeof(size_t) && p->data != NULL;
}

static inline int gp_param_put_size(OSSL_PARAM *p, size_t v)
{
    *(size_t *)p->data = v;
    p->return_size = sizeof(size_t);
    return 1;
}

static inline int gp_param_set_size(OSSL_PARAM *p, size_t v)
{
    return gp_param_is_size_t(p) ? gp_param_put_size(p, v) : gp_param_set_size_slow(p, v);
}

/* Is `key` OSSL_CIPHER_PARAM_IVLEN ("ivlen")? Byte by byte, stopping at the first difference. */
static inline int gp_param_is_ivlen(const char *key)
{
    return key[0] == 'i' && key[1] == 'v' && key[2] == 'l' && key[3] == 'e' && key[4] == 'n' && key[5] == '\0';
}

/* Is `key` the param `name` (a literal)? Its first byte before any strcmp: a chain of these costs a
 * byte compare per name a key is not (EVP sends PADDING, which no chain knows, at every init). */
static inline int gp_param_key_is(const char *key, const char *name)
{
    return key[0] == name[0] && strcmp(key, name) == 0;
}

#endif
