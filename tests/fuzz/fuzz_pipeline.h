/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_evp_diff's pipeline sequences (fuzz_pipeline.c): inputs that start with "PIPE". */
#ifndef FUZZ_PIPELINE_H
#define FUZZ_PIPELINE_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>

#define FUZZ_PIPE_MAGIC "PIPE"
#define FUZZ_PIPE_MAGIC_LEN 4

/* What the pipeline sequences need of fuzz_evp_diff's cipher table. */
typedef struct fz_pipe_alg {
    const char *name;
    int aead, gcm, chacha20;
    size_t keylen, ivlen;
} fz_pipe_alg;

/* 1 where the libcrypto has OpenSSL 3.5's pipeline API (found at run time). */
int fuzz_pipeline_available(void);
/* Decode data (after the magic) into pipeline calls on gpuprov, each pipe compared with the same
 * calls on its own default-provider context; aborts with the decoded sequence on a difference.
 * ciphers[i][0] is the default provider's, [1] gpuprov's. */
void fuzz_pipeline_one(const uint8_t *data, size_t size, const fz_pipe_alg algs[8], EVP_CIPHER *const ciphers[8][2],
                       int verbose);

#endif
