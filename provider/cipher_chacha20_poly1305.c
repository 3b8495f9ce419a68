/* SPDX-License-Identifier: Apache-2.0 */
/* ChaCha20-Poly1305 dispatch table (RFC 8439 §2.8); the mode logic is in aead_common.c. */
#include "dispatch.h"

/* As the default provider reports it: mode 0, 32-byte key, 12-byte nonce, AEAD, custom IV. */
static const gp_cipher_info chacha20_poly1305 = { GP_ALG_CHACHA20_POLY1305, 0, 32, 12, 1, 1 };

GP_CIPHER_DISPATCH(chacha20_poly1305, chacha20_poly1305, aead, chachapoly);
