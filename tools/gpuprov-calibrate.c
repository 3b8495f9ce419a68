/* SPDX-License-Identifier: Apache-2.0 */
/* gpuprov-calibrate: measures this host's hybrid-policy numbers once and keeps them for the user, or (--system) for every user of the machine. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <openssl/rand.h>

#include "batching/settings.h"

/*
 * What it does: loads gpuprov with the knobs that make it measure (calib_refresh: whatever is
 * persisted or known is measured anew; backend hybrid: the GPU opens at the first message, and each
 * algorithm is measured when its first message is routed), encrypts one message of each of the
 * four algorithms, and prints the file the measurement was written to. Run it on an otherwise idle
 * host: a busy GPU or busy cores are measured as they are.
 *
 * usage: gpuprov-calibrate [--system | --dir DIR]
 *   (none)      the user's cache (knob calib_cache: $XDG_CACHE_HOME/gpuprov, else ~/.cache/gpuprov)
 *   --system    the machine's (knob calib_system; GPUPROV_SYSTEM_CALIB_DIR), read by every user whose
 *               own cache has nothing: run as root, after installing or upgrading gpuprov, OpenSSL or
 *               the NVIDIA driver
 *   --dir DIR   DIR
 * gpuprov is loaded by name, from OPENSSL_MODULES or libcrypto's modules directory. Exit status 0
 * when every algorithm was measured and written, 2 when there is no GPU to measure, 1 otherwise.
 */

#ifndef GPUPROV_SYSTEM_CALIB_DIR
# error "built by meson.build, which names the machine's calibration directory"
#endif

#define MSG_BYTES (1u << 20)

static const char *const ciphers[] = { "AES-128-CTR", "AES-256-GCM", "ChaCha20", "ChaCha20-Poly1305" };

/* One message of `cipher` through gpuprov: its first data request is what the policy routes, and
 * routing an algorithm the first time measures it. */
static int encrypt_one(OSSL_LIB_CTX *lib, const char *cipher, unsigned char *buf)
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(lib, cipher, "provider=gpuprov");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    unsigned char key[32], iv[16];
    int outl, ok;

    ok = c != NULL && ctx != NULL && RAND_bytes(key, sizeof(key)) == 1 && RAND_bytes(iv, sizeof(iv)) == 1
         && EVP_EncryptInit_ex2(ctx, c, key, iv, NULL)
         && EVP_EncryptUpdate(ctx, buf, &outl, buf, MSG_BYTES)
         && EVP_EncryptFinal_ex(ctx, buf + outl, &outl);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    if (!ok) {
        fprintf(stderr, "gpuprov-calibrate: %s through gpuprov failed\n", cipher);
        ERR_print_errors_fp(stderr);
    }
    return ok;
}

/* The newest calib-*.txt in dir written at or after `since`, into path; 0 if none. */
static int newest_file(const char *dir, time_t since, char *path, size_t n)
{
    DIR *dp = opendir(dir);
    struct dirent *d;
    time_t best = 0;

    if (dp == NULL)
        return 0;
    while ((d = readdir(dp)) != NULL) {
        char p[4096];
        struct stat st;
        const size_t len = strlen(d->d_name);

        if (strncmp(d->d_name, "calib-", 6) != 0 || len < 4 || strcmp(d->d_name + len - 4, ".txt") != 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, d->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime >= since && st.st_mtime >= best) {
            best = st.st_mtime;
            snprintf(path, n, "%s", p);
        }
    }
    closedir(dp);
    return best != 0;
}

/* The user's cache directory as gpuprov finds it: the knob calib_cache (batching/settings.h), read
 * through the settings registry as the module reads it. */
static int user_dir(char *out, size_t n)
{
    gp_knobs k;

    gp_settings_load(&k, NULL, NULL);
    if (strcmp(k.calib_cache, "off") == 0)
        return 0;
    if (k.calib_cache[0] == '/')
        return snprintf(out, n, "%s", k.calib_cache) < (int)n;
    return gp_settings_user_cache_dir(out, n);
}

static void usage(void)
{
    fprintf(stderr, "usage: gpuprov-calibrate [--system | --dir DIR]\n"
                    "  measures gpuprov's hybrid policy on this host and keeps the numbers for the user\n"
                    "  (--system: for every user of the machine, in %s)\n", GPUPROV_SYSTEM_CALIB_DIR);
}

int main(int argc, char **argv)
{
    char dir[2048] = "", path[4096], line[512];
    const char *executor = NULL;
    OSSL_LIB_CTX *lib;
    OSSL_PROVIDER *gp, *dflt;
    OSSL_PARAM q[2];
    unsigned char *buf;
    time_t start = time(NULL);
    int ok = 1, algs = 0;
    FILE *f;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--system") == 0 && dir[0] == '\0')
            snprintf(dir, sizeof(dir), "%s", GPUPROV_SYSTEM_CALIB_DIR);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc && argv[i + 1][0] == '/' && dir[0] == '\0')
            snprintf(dir, sizeof(dir), "%s", argv[++i]);
        else {
            usage();
            return 1;
        }
    }
    if (dir[0] != '\0')
        setenv("GPUPROV_CALIB_CACHE", dir, 1);
    else if (!user_dir(dir, sizeof(dir))) {
        fprintf(stderr, "gpuprov-calibrate: no cache directory (HOME unset, or GPUPROV_CALIB_CACHE=off): use --dir\n");
        return 1;
    }
    /* The knobs of a measurement; the rest (device, streams, ...) as the user's configuration
     * sets them, since they are part of what is measured. */
    setenv("GPUPROV_CALIB_REFRESH", "1", 1);
    setenv("GPUPROV_BACKEND", "hybrid", 1);
    setenv("GPUPROV_STATS", "1", 1);
    lib = OSSL_LIB_CTX_new();
    buf = calloc(1, MSG_BYTES + 32);
    if (lib == NULL || buf == NULL)
        return 1;
    dflt = OSSL_PROVIDER_load(lib, "default");
    if ((gp = OSSL_PROVIDER_load(lib, "gpuprov")) == NULL) {
        fprintf(stderr, "gpuprov-calibrate: cannot load gpuprov (install it, or set OPENSSL_MODULES)\n");
        ERR_print_errors_fp(stderr);
        return 1;
    }
    for (size_t i = 0; i < sizeof(ciphers) / sizeof(ciphers[0]) && ok; i++)
        ok = encrypt_one(lib, ciphers[i], buf);
    q[0] = OSSL_PARAM_construct_utf8_ptr("gpuprov-executor", (char **)&executor, 0);
    q[1] = OSSL_PARAM_construct_end();
    if (ok && (!OSSL_PROVIDER_get_params(gp, q) || executor == NULL || strcmp(executor, "hybrid") != 0)) {
        fprintf(stderr, "gpuprov-calibrate: gpuprov runs on the %s executor here: no GPU to measure\n",
                executor != NULL ? executor : "unknown");
        ok = 2;
    }
    OSSL_PROVIDER_unload(gp);   /* prints the measured numbers (stats) */
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(lib);
    free(buf);
    if (ok != 1)
        return ok == 2 ? 2 : 1;
    if (!newest_file(dir, start, path, sizeof(path)) || (f = fopen(path, "r")) == NULL) {
        fprintf(stderr, "gpuprov-calibrate: nothing was written to %s (%s)\n", dir,
                errno != 0 ? strerror(errno) : "no file");
        return 1;
    }
    while (fgets(line, sizeof(line), f) != NULL)
        algs += strncmp(line, "alg ", 4) == 0;
    fclose(f);
    printf("gpuprov-calibrate: %d algorithms measured, written to %s\n", algs, path);
    return algs == 4 ? 0 : 1;
}
