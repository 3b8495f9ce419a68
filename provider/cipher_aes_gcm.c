/* SPDX-License-Identifier: Apache-2.0 */
/* AES-128/192/256-GCM dispatch tables (SP 800-38D); the mode logic is in aead_common.c and aead_gcm.c. */
#include <openssl/evp.h>

#include "dispatch.h"

/* As the default provider reports them: GCM mode, 12-byte default IV, AEAD with a custom IV. */
static const gp_cipher_info aes128gcm = { GP_ALG_AES_GCM, EVP_CIPH_GCM_MODE, 16, 12, 1, 1 };
static const gp_cipher_info aes192gcm = { GP_ALG_AES_GCM, EVP_CIPH_GCM_MODE, 24, 12, 1, 1 };
static const gp_cipher_info aes256gcm = { GP_ALG_AES_GCM, EVP_CIPH_GCM_MODE, 32, 12, 1, 1 };

GP_CIPHER_DISPATCH(aes128gcm, aes128gcm, aead, gcm);
GP_CIPHER_DISPATCH(aes192gcm, aes192gcm, aead, gcm);
GP_CIPHER_DISPATCH(aes256gcm, aes256gcm, aead, gcm);
