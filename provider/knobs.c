/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs: read from the provider's openssl.cnf section, each overridden by GPUPROV_<KEY>. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/params.h>

#include "prov.h"

/* The value for `key`: the environment wins over the config section; NULL when neither sets it. */
static const char *knob_value(const char *key, const char *from_cnf, char *envname, size_t envsz)
{
    const char *v;
    size_t i;

    snprintf(envname, envsz, "GPUPROV_%s", key);
    for (i = 0; envname[i] != '\0'; i++)
        envname[i] = (char)toupper((unsigned char)envname[i]);
    v = getenv(envname);
    return v != NULL && *v != '\0' ? v : from_cnf;
}

static void bad_knob(const char *key, const char *val, const char *expected)
{
    fprintf(stderr, "gpuprov: ignoring %s = '%s' (expected %s)\n", key, val, expected);
}

/* 0 or 1 (or yes/no, true/false, on/off), or steps: 1, and the cuda executor also times each step
 * of a batch on the GPU with events, which makes the steps run one at a time (README, the
 * `gpuprov cuda:` lines). */
static int parse_stats(const char *v)
{
    if (v == NULL)
        return 0;
    if (strcasecmp(v, "steps") == 0)
        return GP_STATS_STEPS;
    if (strcmp(v, "1") == 0 || strcasecmp(v, "yes") == 0 || strcasecmp(v, "true") == 0
        || strcasecmp(v, "on") == 0)
        return 1;
    if (strcmp(v, "0") != 0 && strcasecmp(v, "no") != 0 && strcasecmp(v, "false") != 0
        && strcasecmp(v, "off") != 0)
        bad_knob("stats", v, "0, 1 or steps");
    return 0;
}

static int parse_count(const char *key, const char *v, int dflt, int max)
{
    char *end;
    long n;

    if (v == NULL)
        return dflt;
    n = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || n < 0 || n > max) {
        bad_knob(key, v, "a number from 0 up");
        return dflt;
    }
    return (int)n;
}

/* A byte count with an optional k/m suffix (KiB, MiB); `dflt` when unset or malformed. */
static size_t parse_bytes(const char *key, const char *v, size_t dflt)
{
    char *end;
    unsigned long long n;

    if (v == NULL)
        return dflt;
    n = strtoull(v, &end, 10);
    if (*end == 'k' || *end == 'K')
        n <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        n <<= 20, end++;
    if (*v == '\0' || *v == '-' || *end != '\0' || n > (1ull << 40)) {
        bad_knob(key, v, "a byte count such as 4096, 16k or 1m");
        return dflt;
    }
    return (size_t)n;
}

/* A fraction 0..1; `dflt` when unset or malformed. */
static double parse_fraction(const char *key, const char *v, double dflt)
{
    char *end;
    double d;

    if (v == NULL)
        return dflt;
    d = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !(d >= 0.0 && d <= 1.0)) {
        bad_knob(key, v, "a fraction from 0 to 1");
        return dflt;
    }
    return d;
}

static gp_backend parse_backend(const char *v)
{
    static const char *const names[] = { "auto", "cuda", "host", "cpu", "hybrid" };

    if (v == NULL)
        return GP_BACKEND_AUTO;
    for (int i = 0; i < 5; i++)
        if (strcasecmp(v, names[i]) == 0)
            return (gp_backend)i;
    bad_knob("backend", v, "auto, hybrid, cuda, host or cpu");
    return GP_BACKEND_AUTO;
}

static gp_wait_mode parse_wait(const char *v)
{
    static const char *const names[] = { "adaptive", "spin", "block" };

    if (v == NULL)
        return GP_WAIT_ADAPTIVE;
    for (int i = 0; i < 3; i++)
        if (strcasecmp(v, names[i]) == 0)
            return (gp_wait_mode)i;
    bad_knob("wait", v, "spin, block or adaptive");
    return GP_WAIT_ADAPTIVE;
}

void gp_knobs_load(gp_knobs *k, const OSSL_CORE_HANDLE *handle, OSSL_FUNC_core_get_params_fn *get_params)
{
    /* Keys of the provider's config section are readable by name through the core. */
    char *backend = NULL, *stats = NULL, *host_threads = NULL, *device = NULL, *streams = NULL;
    char *max_ops = NULL, *max_bytes = NULL, *flush_us = NULL, *wait = NULL, *spin_us = NULL;
    char *min_gpu = NULL, *lone_gpu = NULL, *share = NULL, *hybrid_gpu = NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_utf8_ptr("min_gpu_bytes", &min_gpu, 0),
        OSSL_PARAM_utf8_ptr("lone_gpu_bytes", &lone_gpu, 0),
        OSSL_PARAM_utf8_ptr("gpu_share", &share, 0),
        OSSL_PARAM_utf8_ptr("hybrid_gpu", &hybrid_gpu, 0),
        OSSL_PARAM_utf8_ptr("max_batch_ops", &max_ops, 0),
        OSSL_PARAM_utf8_ptr("max_batch_bytes", &max_bytes, 0),
        OSSL_PARAM_utf8_ptr("flush_us", &flush_us, 0),
        OSSL_PARAM_utf8_ptr("wait", &wait, 0),
        OSSL_PARAM_utf8_ptr("spin_us", &spin_us, 0),
        OSSL_PARAM_utf8_ptr("backend", &backend, 0),
        OSSL_PARAM_utf8_ptr("stats", &stats, 0),
        OSSL_PARAM_utf8_ptr("host_threads", &host_threads, 0),
        OSSL_PARAM_utf8_ptr("device", &device, 0),
        OSSL_PARAM_utf8_ptr("streams", &streams, 0),
        OSSL_PARAM_END
    };
    char env[64];

    if (get_params != NULL)
        get_params(handle, params);
    k->backend = parse_backend(knob_value("backend", backend, env, sizeof(env)));
    k->stats = parse_stats(knob_value("stats", stats, env, sizeof(env)));
    k->host_threads = parse_count("host_threads",
                                  knob_value("host_threads", host_threads, env, sizeof(env)), 0, 1024);
    {
        const char *v = knob_value("device", device, env, sizeof(env));

        k->device = v != NULL && strcasecmp(v, "all") == 0 ? GP_DEVICE_ALL : parse_count("device", v, 0, 1023);
    }
    /* Three slots a GPU: on the H200 host a third took evp_bench 16 threads x 32 jobs x 16 KiB from
     * 8.7-9.1 to 11.2-11.6 GB/s (AES-256-GCM) and speed -async_jobs 64 from 3.3 to 3.7-4.1
     * (bench/RESULTS.md, tenth session); a fourth made 4 threads x 32 jobs collapse to 2.3-3.3. */
    k->streams = parse_count("streams", knob_value("streams", streams, env, sizeof(env)), 4, 8);
    if (k->streams == 0)
        k->streams = 1;
    k->max_batch_ops = parse_count("max_batch_ops", knob_value("max_batch_ops", max_ops, env, sizeof(env)),
                                   4096, 1 << 20);
    if (k->max_batch_ops == 0)
        k->max_batch_ops = 1;
    k->max_batch_bytes = (size_t)parse_count("max_batch_bytes",
                                             knob_value("max_batch_bytes", max_bytes, env, sizeof(env)),
                                             8 << 20, 1 << 30);
    k->flush_us = parse_count("flush_us", knob_value("flush_us", flush_us, env, sizeof(env)), 50, 1000000);
    k->wait = parse_wait(knob_value("wait", wait, env, sizeof(env)));
    k->spin_us = parse_count("spin_us", knob_value("spin_us", spin_us, env, sizeof(env)), 50, 1000000);
    /* Unset: calibrated at first use (batching/hybrid.c). */
    k->min_gpu_bytes = parse_bytes("min_gpu_bytes", knob_value("min_gpu_bytes", min_gpu, env, sizeof(env)),
                                   GP_KNOB_CALIBRATE);
    k->lone_gpu_bytes = parse_bytes("lone_gpu_bytes", knob_value("lone_gpu_bytes", lone_gpu, env, sizeof(env)),
                                    GP_KNOB_CALIBRATE);
    k->gpu_share = parse_fraction("gpu_share", knob_value("gpu_share", share, env, sizeof(env)), -1.0);
    {
        const char *v = knob_value("hybrid_gpu", hybrid_gpu, env, sizeof(env));

        k->hybrid_gpu_host = v != NULL && strcasecmp(v, "host") == 0;
        if (v != NULL && !k->hybrid_gpu_host && strcasecmp(v, "cuda") != 0)
            bad_knob("hybrid_gpu", v, "cuda or host");
    }
}
