/* SPDX-License-Identifier: Apache-2.0 */
/* OpenSSL 3.5's cipher pipeline API: what 3.0's headers lack, and the provider's pipeline functions. */
#ifndef GP_PIPELINE_H
#define GP_PIPELINE_H

#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "cipher_ctx.h"

/*
 * The one place that defines what OpenSSL 3.0's headers lack (OpenSSL 3.5's
 * include/openssl/core_dispatch.h, core_names.h and evp.h), each guarded so that 3.5's own
 * definitions win. A 3.0 libcrypto ignores dispatch ids it does not know (crypto/evp/evp_enc.c,
 * evp_cipher_from_algorithm), so the module built against either loads and serves either.
 */
#ifndef OSSL_FUNC_CIPHER_PIPELINE_ENCRYPT_INIT
#define OSSL_FUNC_CIPHER_PIPELINE_ENCRYPT_INIT 15
#define OSSL_FUNC_CIPHER_PIPELINE_DECRYPT_INIT 16
#define OSSL_FUNC_CIPHER_PIPELINE_UPDATE 17
#define OSSL_FUNC_CIPHER_PIPELINE_FINAL 18
OSSL_CORE_MAKE_FUNC(int, cipher_pipeline_encrypt_init,
                    (void *cctx, const unsigned char *key, size_t keylen, size_t numpipes,
                     const unsigned char **iv, size_t ivlen, const OSSL_PARAM params[]))
OSSL_CORE_MAKE_FUNC(int, cipher_pipeline_decrypt_init,
                    (void *cctx, const unsigned char *key, size_t keylen, size_t numpipes,
                     const unsigned char **iv, size_t ivlen, const OSSL_PARAM params[]))
OSSL_CORE_MAKE_FUNC(int, cipher_pipeline_update,
                    (void *cctx, size_t numpipes, unsigned char **out, size_t *outl,
                     const size_t *outsize, const unsigned char **in, const size_t *inl))
OSSL_CORE_MAKE_FUNC(int, cipher_pipeline_final,
                    (void *cctx, size_t numpipes, unsigned char **out, size_t *outl,
                     const size_t *outsize))
#endif
#ifndef EVP_MAX_PIPES
#define EVP_MAX_PIPES 32
#endif
#ifndef OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG
#define OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG "pipeline-tag"
#endif

/* The most pipes one call takes: EVP's own limit (EVP_CipherPipelineEncryptInit refuses more). */
#define GP_MAX_PIPES 32
_Static_assert(GP_MAX_PIPES == EVP_MAX_PIPES, "gpuprov takes what EVP passes");

/* provider/pipeline.c: every cipher's pipeline functions (docs/config.md, "The pipeline API"). */
OSSL_FUNC_cipher_pipeline_encrypt_init_fn gp_pipe_einit;
OSSL_FUNC_cipher_pipeline_decrypt_init_fn gp_pipe_dinit;
OSSL_FUNC_cipher_pipeline_update_fn gp_pipe_update;
OSSL_FUNC_cipher_pipeline_final_fn gp_pipe_final;
/* OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG of an AEAD context: get (an encryption's tags, after its
 * Final) and set (a decryption's expected tags, before its Final); 0 with an error raised. */
int gp_pipe_get_tags(gp_cipher_ctx *ctx, const OSSL_PARAM *p);
int gp_pipe_set_tags(gp_cipher_ctx *ctx, const OSSL_PARAM *p);

#endif
