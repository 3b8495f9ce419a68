/* SPDX-License-Identifier: Apache-2.0 */
/* The dispatch table of one algorithm and key size, the only content of the per-algorithm files. */
#ifndef GP_DISPATCH_H
#define GP_DISPATCH_H

#include "cipher_ctx.h"
#include "pipeline.h"

/*
 * One dispatch table per algorithm and key size: the per-algorithm files hold only this.
 * FAMILY is stream or aead; the gettable/settable lists are per algorithm. Every cipher takes
 * OpenSSL 3.5's pipeline calls (provider/pipeline.c), which a 3.0 libcrypto ignores.
 */
#define GP_CIPHER_DISPATCH(sym, info, family, tables)                                           \
    static OSSL_FUNC_cipher_newctx_fn sym##_newctx;                                            \
    static OSSL_FUNC_cipher_get_params_fn sym##_get_params;                                    \
    static void *sym##_newctx(void *provctx) { return gp_cipher_newctx(provctx, &(info)); }    \
    static int sym##_get_params(OSSL_PARAM params[])                                            \
    { return gp_cipher_get_static_params(params, &(info)); }                                    \
    const OSSL_DISPATCH gp_##sym##_functions[] = {                                              \
        { OSSL_FUNC_CIPHER_NEWCTX, (void (*)(void))sym##_newctx },                             \
        { OSSL_FUNC_CIPHER_FREECTX, (void (*)(void))gp_cipher_freectx },                       \
        { OSSL_FUNC_CIPHER_DUPCTX, (void (*)(void))gp_cipher_dupctx },                         \
        { OSSL_FUNC_CIPHER_ENCRYPT_INIT, (void (*)(void))gp_##family##_einit },                \
        { OSSL_FUNC_CIPHER_DECRYPT_INIT, (void (*)(void))gp_##family##_dinit },                \
        { OSSL_FUNC_CIPHER_UPDATE, (void (*)(void))gp_##family##_update },                     \
        { OSSL_FUNC_CIPHER_FINAL, (void (*)(void))gp_##family##_final },                       \
        { OSSL_FUNC_CIPHER_CIPHER, (void (*)(void))gp_##family##_cipher },                     \
        { OSSL_FUNC_CIPHER_PIPELINE_ENCRYPT_INIT, (void (*)(void))gp_pipe_einit },             \
        { OSSL_FUNC_CIPHER_PIPELINE_DECRYPT_INIT, (void (*)(void))gp_pipe_dinit },             \
        { OSSL_FUNC_CIPHER_PIPELINE_UPDATE, (void (*)(void))gp_pipe_update },                  \
        { OSSL_FUNC_CIPHER_PIPELINE_FINAL, (void (*)(void))gp_pipe_final },                    \
        { OSSL_FUNC_CIPHER_GET_PARAMS, (void (*)(void))sym##_get_params },                     \
        { OSSL_FUNC_CIPHER_GETTABLE_PARAMS, (void (*)(void))gp_cipher_gettable_params },       \
        { OSSL_FUNC_CIPHER_GET_CTX_PARAMS, (void (*)(void))gp_##family##_get_ctx_params },     \
        { OSSL_FUNC_CIPHER_SET_CTX_PARAMS, (void (*)(void))gp_##family##_set_ctx_params },     \
        { OSSL_FUNC_CIPHER_GETTABLE_CTX_PARAMS, (void (*)(void))gp_##tables##_gettable_ctx_params }, \
        { OSSL_FUNC_CIPHER_SETTABLE_CTX_PARAMS, (void (*)(void))gp_##tables##_settable_ctx_params }, \
        { 0, NULL }                                                                             \
    }

#endif
