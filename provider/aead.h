/* SPDX-License-Identifier: Apache-2.0 */
/* The AEAD mode's shared constants, and what aead_common.c asks of each construction's own file. */
#ifndef GP_AEAD_H
#define GP_AEAD_H

#include "cipher_ctx.h"

#define TLS_AAD_LEN 13            /* seq(8) || type || version(2) || length(2) */
#define TLS_GCM_FIXED_IV_LEN 4    /* RFC 5288 §3: salt */
#define TLS_GCM_EXPLICIT_IV_LEN 8 /* RFC 5288 §3: nonce_explicit, sent in the record */
#define AEAD_TAG_LEN 16
#define GCM_MAX_IV_LEN 128        /* the default provider's limit (1024 bits) */
#define CHACHAPOLY_IV_LEN 12
#define GCM_RANDOM_IV_MIN_LEN 12  /* SP 800-38D §8.2.2: an RBG-based IV has a random field of >= 96 bits */
/* tls_aad_len after a refused TLS1_AAD that leaves record mode on (set_tls_aad): the next record is
 * refused, as it would run on AAD the caller was told was not taken. */
#define TLS_AAD_REFUSED 1

/* AES-GCM: provider/aead_gcm.c. */
int gp_gcm_tls_record(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                      const unsigned char *in, size_t len);
int gp_gcm_tls_iv_fixed(gp_cipher_ctx *ctx, const OSSL_PARAM *p);
int gp_gcm_set_iv_inv(gp_cipher_ctx *ctx, const OSSL_PARAM *p);
int gp_gcm_get_iv_gen(gp_cipher_ctx *ctx, OSSL_PARAM *p);

/* ChaCha20-Poly1305: provider/aead_chachapoly.c. */
int gp_chachapoly_tls_record(gp_cipher_ctx *ctx, unsigned char *out, size_t *outl, size_t outsize,
                             const unsigned char *in, size_t len);
int gp_chachapoly_tls_iv_fixed(gp_cipher_ctx *ctx, const OSSL_PARAM *p);

#endif
