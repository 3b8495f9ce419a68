/* SPDX-License-Identifier: Apache-2.0 */
/* AES-128/192/256-CTR dispatch tables (SP 800-38A §6.5); the mode logic is in stream_common.c. */
#include <openssl/evp.h>

#include "dispatch.h"

/* As the default provider reports them: CTR mode, 16-byte IV, block size 1, no flags. */
static const gp_cipher_info aes128ctr = { GP_ALG_AES_CTR, EVP_CIPH_CTR_MODE, 16, 16, 0, 0 };
static const gp_cipher_info aes192ctr = { GP_ALG_AES_CTR, EVP_CIPH_CTR_MODE, 24, 16, 0, 0 };
static const gp_cipher_info aes256ctr = { GP_ALG_AES_CTR, EVP_CIPH_CTR_MODE, 32, 16, 0, 0 };

GP_CIPHER_DISPATCH(aes128ctr, aes128ctr, stream, ctr);
GP_CIPHER_DISPATCH(aes192ctr, aes192ctr, stream, ctr);
GP_CIPHER_DISPATCH(aes256ctr, aes256ctr, stream, ctr);
