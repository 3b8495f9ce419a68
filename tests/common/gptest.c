/* SPDX-License-Identifier: Apache-2.0 */
/* Shared test plumbing: a library context with gpuprov + default loaded, fetch helpers, hex, PRNG. */
#include "gptest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
#include <cmocka.h>
#include <openssl/err.h>

/*
 * The gpu suite on a machine without a GPU: every test of it exits 77 (meson's "skipped") before
 * it starts, so that a plain `meson test` is green there. Where the NVIDIA driver is present a
 * GPU test runs and must pass: a GPU that cannot be used there is a failure, not a skip.
 */
static void __attribute__((constructor)) skip_without_gpu(void)
{
    const char *needs = getenv("GPTEST_NEEDS_GPU");

    if (needs != NULL && strcmp(needs, "1") == 0 && access("/dev/nvidiactl", F_OK) != 0) {
        fprintf(stderr, "SKIP: no NVIDIA GPU on this machine (the gpu suite needs one)\n");
        exit(77);
    }
}

static int under_test_is_default(void)
{
    const char *u = getenv("GPTEST_UNDER_TEST");

    return u != NULL && strcmp(u, "default") == 0;
}

static void print_errors(void)
{
    ERR_print_errors_fp(stderr);
}

/* $GPTEST_REQUIRE_EXECUTOR: gpuprov must really serve with that executor (no silent fallback, e.g.
 * a cuda run on a machine where the GPU cannot be used). */
static int check_executor(const gptest_env *env)
{
    const char *want = getenv("GPTEST_REQUIRE_EXECUTOR");
    const char *got = NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_utf8_ptr("gpuprov-executor", (char **)&got, 0),
        OSSL_PARAM_END
    };

    if (want == NULL || *want == '\0' || env->gpuprov == NULL)
        return 1;
    if (!OSSL_PROVIDER_get_params(env->gpuprov, params) || got == NULL) {
        fprintf(stderr, "gptest: cannot read gpuprov's executor\n");
        return 0;
    }
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "gptest: gpuprov serves with the %s executor, this run requires %s\n", got, want);
        return 0;
    }
    return 1;
}

int gptest_env_setup(void **state)
{
    gptest_env *env = calloc(1, sizeof(*env));
    const char *dir = getenv("GPTEST_MODULE_DIR");

    if (env == NULL)
        return -1;
    env->libctx = OSSL_LIB_CTX_new();
    if (env->libctx == NULL)
        goto err;
    if (dir != NULL && !OSSL_PROVIDER_set_default_search_path(env->libctx, dir))
        goto err;
    env->deflt = OSSL_PROVIDER_load(env->libctx, "default");
    /* GPTEST_UNDER_TEST=default checks a test's own expectations against the default provider. */
    env->gpuprov = under_test_is_default() ? NULL : OSSL_PROVIDER_load(env->libctx, "gpuprov");
    if ((env->gpuprov == NULL && !under_test_is_default()) || env->deflt == NULL) {
        fprintf(stderr, "gptest: cannot load providers (GPTEST_MODULE_DIR=%s)\n", dir ? dir : "(unset)");
        print_errors();
        goto err;
    }
    if (!check_executor(env))
        goto err;
    gptest_rand_seed();
    *state = env;
    return 0;
err:
    gptest_env_teardown((void **)&env);
    return -1;
}

int gptest_env_teardown(void **state)
{
    gptest_env *env = *state;

    if (env == NULL)
        return 0;
    OSSL_PROVIDER_unload(env->gpuprov);
    OSSL_PROVIDER_unload(env->deflt);
    OSSL_LIB_CTX_free(env->libctx);
    free(env);
    *state = NULL;
    return 0;
}

EVP_CIPHER *gptest_fetch(const gptest_env *env, const char *name, int from_gpuprov)
{
    const char *want;
    EVP_CIPHER *c;

    if (under_test_is_default())
        from_gpuprov = 0;
    want = from_gpuprov ? "gpuprov" : "default";
    c = EVP_CIPHER_fetch(env->libctx, name, from_gpuprov ? "provider=gpuprov" : "provider=default");

    if (c == NULL) {
        print_errors();
        fail_msg("cannot fetch %s from %s", name, want);
    }
    assert_string_equal(OSSL_PROVIDER_get0_name(EVP_CIPHER_get0_provider(c)), want);
    return c;
}

const char *gptest_executor(void)
{
    const char *b = getenv("GPUPROV_BACKEND");

    return b != NULL ? b : "auto";
}

/* splitmix64 is a counter: an atomic add makes draws from many threads safe. */
static _Atomic uint64_t rng_state;

void gptest_rand_seed(void)
{
    static int seeded;
    const char *s = getenv("GPTEST_SEED");

    if (seeded)
        return;
    seeded = 1;
    atomic_store(&rng_state, s != NULL ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock() << 32);
    fprintf(stderr, "gptest: GPTEST_SEED=%llu executor=%s\n", (unsigned long long)atomic_load(&rng_state),
            gptest_executor());
}

uint64_t gptest_rand_u64(void)
{
    uint64_t z = atomic_fetch_add(&rng_state, 0x9e3779b97f4a7c15ULL) + 0x9e3779b97f4a7c15ULL;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

size_t gptest_rand_range(size_t lo, size_t hi_inclusive)
{
    return lo + (size_t)(gptest_rand_u64() % (uint64_t)(hi_inclusive - lo + 1));
}

void gptest_rand_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len > 0) {
        uint64_t r = gptest_rand_u64();
        size_t n = len < 8 ? len : 8;

        memcpy(p, &r, n);
        p += n;
        len -= n;
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

unsigned char *gptest_unhex(const char *hex, size_t *len)
{
    size_t n = strlen(hex);
    unsigned char *out;

    if (n % 2 != 0)
        return NULL;
    out = malloc(n / 2 + 1);   /* +1: never malloc(0) */
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);

        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    *len = n / 2;
    return out;
}

int gptest_errors_pending(void)
{
    int any = ERR_peek_error() != 0;

    if (any && getenv("GPTEST_VERBOSE") != NULL)
        ERR_print_errors_fp(stderr);
    ERR_clear_error();
    return any;
}
