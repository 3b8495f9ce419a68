/* SPDX-License-Identifier: Apache-2.0 */
/* OpenSSL 3.5's EVP pipeline calls, found at run time: one binary built against 3.0's headers runs on either line. */
#ifndef GPTEST_PIPE_API_H
#define GPTEST_PIPE_API_H

#include <dlfcn.h>
#include <stddef.h>
#include <openssl/evp.h>

/* The calls as OpenSSL 3.5's include/openssl/evp.h declares them. */
typedef int (*pipe_init_fn)(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *cipher, const unsigned char *key,
                            size_t keylen, size_t numpipes, const unsigned char **iv, size_t ivlen);
typedef int (*pipe_update_fn)(EVP_CIPHER_CTX *ctx, unsigned char **out, size_t *outl, const size_t *outsize,
                              const unsigned char **in, const size_t *inl);
typedef int (*pipe_final_fn)(EVP_CIPHER_CTX *ctx, unsigned char **out, size_t *outl, const size_t *outsize);
typedef int (*pipe_can_fn)(const EVP_CIPHER *cipher, int enc);

typedef struct pipe_api {
    pipe_init_fn encrypt_init, decrypt_init;
    pipe_update_fn update;
    pipe_final_fn final;
    pipe_can_fn can_pipeline;
} pipe_api;

#define PIPE_MAX 32                           /* EVP_MAX_PIPES */
#define PIPE_TAG_PARAM "pipeline-tag"         /* OSSL_CIPHER_PARAM_PIPELINE_AEAD_TAG */
#define PIPE_SKIP_MESSAGE "skipped: needs OpenSSL 3.5's pipeline API"

/* Fills *api from the libcrypto this process runs with; 0 where it has no pipeline API (3.0). */
static inline int pipe_api_load(pipe_api *api)
{
    *(void **)&api->encrypt_init = dlsym(RTLD_DEFAULT, "EVP_CipherPipelineEncryptInit");
    *(void **)&api->decrypt_init = dlsym(RTLD_DEFAULT, "EVP_CipherPipelineDecryptInit");
    *(void **)&api->update = dlsym(RTLD_DEFAULT, "EVP_CipherPipelineUpdate");
    *(void **)&api->final = dlsym(RTLD_DEFAULT, "EVP_CipherPipelineFinal");
    *(void **)&api->can_pipeline = dlsym(RTLD_DEFAULT, "EVP_CIPHER_can_pipeline");
    return api->encrypt_init != NULL && api->decrypt_init != NULL && api->update != NULL && api->final != NULL
           && api->can_pipeline != NULL;
}

/* The "pipeline-tag" param: `tags` is the array of numpipes tag pointers, each of taglen bytes. */
static inline OSSL_PARAM pipe_tag_param(unsigned char ***tags, size_t taglen)
{
    return OSSL_PARAM_construct_octet_ptr(PIPE_TAG_PARAM, (void **)tags, taglen);
}

#endif
