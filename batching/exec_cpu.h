/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu executor (exec_cpu.c): what the engine's cpu lane calls of it besides its table. */
/* Direct calls, not the table's (batching/executor.h): a 16-byte update pays no indirect call. */
#ifndef GP_EXEC_CPU_H
#define GP_EXEC_CPU_H

#include "batching/core/core.h"

/* cpu executor: runs one request on the message's default-provider context, the AAD it carries
 * (r->aad) first (it cannot fail as an executor, so the engine's fallback path has nothing to do
 * for it); returns r->status. */
int gp_cpu_run_one(gp_request *r);
/* One call of the default provider's update on its context: AAD (out NULL) or data, whose output
 * size is the input length (ciphers of block size 1); the vector state cleaned after it. */
static inline int gp_cpu_direct_update(OSSL_FUNC_cipher_update_fn *update, void *algctx,
                                       const uint8_t *in, uint8_t *out, size_t len)
{
    size_t outl = 0;
    int ok = update(algctx, out, &outl, len, in, len) && (out == NULL || outl == len);

    gp_cpu_clean_upper_state();
    return ok;
}

/* gp_cpu_update for a message without the provider's own context (through EVP). */
int gp_cpu_update_evp(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len);
/* AAD (out NULL) or data of m, on the cpu executor at once; 1 on success. Inline: a 16-byte update
 * then costs one indirect call more than the default provider's own. */
static inline int gp_cpu_update(gp_msg *m, const uint8_t *in, uint8_t *out, size_t len)
{
    if (m->cpu_algctx == NULL)
        return gp_cpu_update_evp(m, in, out, len);
    return gp_cpu_direct_update(m->cpu_direct->update, m->cpu_algctx, in, out, len);
}

/* cpu executor: the default provider's functions for (alg, keylen), or NULL where they could not be
 * read (that cipher then runs through EVP_CIPHER_CTX, off the lane). The executor must be open. */
const gp_cpu_direct *gp_cpu_direct_for(gp_engine *e, uint32_t alg, size_t keylen);

#endif
