/* SPDX-License-Identifier: Apache-2.0 */
/* Shared test plumbing: a library context with gpuprov + default loaded, fetch helpers, hex, PRNG. */
#ifndef GPTEST_H
#define GPTEST_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

typedef struct gptest_env {
    OSSL_LIB_CTX *libctx;     /* private library context of the test */
    OSSL_PROVIDER *gpuprov;   /* loaded from $GPTEST_MODULE_DIR */
    OSSL_PROVIDER *deflt;     /* the reference */
} gptest_env;

/* cmocka group setup/teardown: *state becomes a gptest_env*. Fails the group if gpuprov won't load. */
int gptest_env_setup(void **state);
int gptest_env_teardown(void **state);

/* Fetch `name` from gpuprov (which=1) or from the default provider (which=0); asserts success and
 * that the implementation really comes from the asked-for provider. */
EVP_CIPHER *gptest_fetch(const gptest_env *env, const char *name, int from_gpuprov);

/* The executor this run of the test binary exercises ($GPUPROV_BACKEND), for messages. */
const char *gptest_executor(void);

/* Deterministic PRNG (splitmix64). Seed from $GPTEST_SEED or the clock; printed once so a failure
 * can be replayed with GPTEST_SEED=<seed>. */
void gptest_rand_seed(void);
uint64_t gptest_rand_u64(void);
size_t gptest_rand_range(size_t lo, size_t hi_inclusive);
void gptest_rand_bytes(void *buf, size_t len);

/* Hex: returns malloc'd bytes (caller frees), *len set; NULL on a malformed string. "" -> len 0. */
unsigned char *gptest_unhex(const char *hex, size_t *len);

/* Drain OpenSSL's error queue; returns 1 if it held at least one error. Prints them when verbose. */
int gptest_errors_pending(void);

#endif
