/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the EVP-level tests: the cipher table, cached fetches, AEAD param shorthands. */
#ifndef EVP_COMMON_H
#define EVP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>
#include <openssl/core_dispatch.h>

#include "gptest.h"

typedef enum { K_CTR, K_GCM, K_CCP /* ChaCha20-Poly1305 */, K_CHACHA } evp_kind;

typedef struct {
    const char *name;   /* the default provider's first name */
    evp_kind kind;
    size_t keylen;
    size_t ivlen;       /* default IV length */
} evp_cipher_info;

#define EVP_NCIPHERS 8
extern const evp_cipher_info evp_ciphers[EVP_NCIPHERS];

/* Index of `name` in evp_ciphers (asserts it exists). */
int evp_cipher_index(const char *name);

/* 1 when GPTEST_UNDER_TEST=default: the "gpuprov" side is the default provider too. */
int evp_under_default(void);

/* The fetched cipher for evp_ciphers[idx], from gpuprov (gp=1) or default (gp=0); cached per group. */
EVP_CIPHER *evp_cipher(const gptest_env *env, int idx, int gp);

/* cmocka group setup/teardown: gptest_env plus the fetch cache. */
int evp_group_setup(void **state);
int evp_group_teardown(void **state);

/* A check on which gpuprov is deliberately stricter than OpenSSL 3.0's default provider: asserted
 * when gpuprov is under test; with GPTEST_UNDER_TEST=default the measured outcome is only printed,
 * marked "[stricter]", so the log documents what default really does. */
#define STRICT_CHECK(cond, what)                                  \
    do {                                                          \
        int strict_ok_ = (cond) ? 1 : 0;                          \
        if (evp_under_default())                                  \
            evp_strict_note((what), strict_ok_);                  \
        else if (!strict_ok_)                                     \
            fail_msg("stricter-than-default check failed: %s", (what)); \
    } while (0)
void evp_strict_note(const char *what, int holds_on_default);

/* AEAD shorthands through OSSL_PARAMs (the path libssl 3.0 and EVP_CIPHER_CTX_ctrl take). */
int evp_set_ivlen(EVP_CIPHER_CTX *ctx, size_t ivlen);
int evp_get_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, size_t taglen);
int evp_set_tag(EVP_CIPHER_CTX *ctx, const unsigned char *tag, size_t taglen);

/* A buffer whose usable pointer sits `off` bytes past a 64-byte aligned allocation. */
typedef struct {
    unsigned char *base;
    unsigned char *p;
} evp_buf;
void evp_buf_alloc(evp_buf *b, size_t len, size_t off);
void evp_buf_free(evp_buf *b);

/* Raw provider dispatch for one algorithm (bypasses EVP's own argument checks). */
typedef struct {
    OSSL_FUNC_cipher_newctx_fn *newctx;
    OSSL_FUNC_cipher_freectx_fn *freectx;
    OSSL_FUNC_cipher_encrypt_init_fn *einit;
    OSSL_FUNC_cipher_decrypt_init_fn *dinit;
    OSSL_FUNC_cipher_update_fn *update;
    OSSL_FUNC_cipher_final_fn *final;
    void *provctx;
} evp_raw;
/* Finds the implementation of `name` in `prov` (gpuprov, or default under GPTEST_UNDER_TEST=default
 * when gp=1); asserts every function above is present. */
void evp_raw_get(const gptest_env *env, int gp, const char *name, evp_raw *raw);

/* The test module's stand-in device allocator (GPUPROV_TEST_HOST_DEVMEM, batching/exec_host.c),
 * found in the gpuprov.so loaded from $GPTEST_MODULE_DIR; fails the test if it is not there. */
typedef struct {
    void *(*alloc)(size_t size, int gpu);
    void (*free)(void *p);
} evp_standin;
void evp_standin_find(evp_standin *s);
/* An export of the loaded test module (GPTEST_MODULE_DIR/gpuprov.so); fails the test if absent. */
void *evp_test_module_symbol(const char *name);

#endif
