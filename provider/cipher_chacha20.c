/* SPDX-License-Identifier: Apache-2.0 */
/* ChaCha20 dispatch table (RFC 8439 §2.4, OpenSSL's 16-byte IV); mode logic in stream_common.c. */
#include "dispatch.h"

/* As the default provider reports it: mode 0, 32-byte key, 16-byte IV (counter || nonce). */
static const gp_cipher_info chacha20 = { GP_ALG_CHACHA20, 0, 32, 16, 0, 1 };

GP_CIPHER_DISPATCH(chacha20, chacha20, stream, chacha20);
