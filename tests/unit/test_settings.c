/* SPDX-License-Identifier: Apache-2.0 */
/* The settings registry (batching/settings.h): every knob's syntaxes, bad values, env over config,
 * and the test and experiment knobs present only in the builds that have them. */
#include <ctype.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "batching/settings.h"

#define BAD LLONG_MIN   /* a case whose value must be rejected, the default kept */

typedef struct {
    const char *name;    /* variable */
    const char *text;
    long long want;      /* BAD: rejected */
    double want_fraction;
} knob_case;

#define MIB (1ll << 20)
/* 300 characters: longer than any dir knob's field (50: than any name knob's) */
#define DIR_TOO_LONG_50 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DIR_TOO_LONG DIR_TOO_LONG_50 DIR_TOO_LONG_50 DIR_TOO_LONG_50 DIR_TOO_LONG_50 DIR_TOO_LONG_50 DIR_TOO_LONG_50

/* Every knob's documented syntaxes, and values each must reject. */
static const knob_case cases[] = {
    { "GPUPROV_BACKEND", "auto", GP_BACKEND_AUTO, 0 }, { "GPUPROV_BACKEND", "cuda", GP_BACKEND_CUDA, 0 },
    { "GPUPROV_BACKEND", "host", GP_BACKEND_HOST, 0 }, { "GPUPROV_BACKEND", "CPU", GP_BACKEND_CPU, 0 },
    { "GPUPROV_BACKEND", "Hybrid", GP_BACKEND_HYBRID, 0 }, { "GPUPROV_BACKEND", "gpu-please", BAD, 0 },
    { "GPUPROV_BACKEND", "1", BAD, 0 },
    { "GPUPROV_DEVICE", "0", 0, 0 }, { "GPUPROV_DEVICE", "3", 3, 0 }, { "GPUPROV_DEVICE", "1023", 1023, 0 },
    { "GPUPROV_DEVICE", "all", GP_DEVICE_ALL, 0 }, { "GPUPROV_DEVICE", "ALL", GP_DEVICE_ALL, 0 },
    { "GPUPROV_DEVICE", "-1", BAD, 0 }, { "GPUPROV_DEVICE", "1024", BAD, 0 }, { "GPUPROV_DEVICE", "1x", BAD, 0 },
    { "GPUPROV_STATS", "0", 0, 0 }, { "GPUPROV_STATS", "no", 0, 0 }, { "GPUPROV_STATS", "false", 0, 0 },
    { "GPUPROV_STATS", "OFF", 0, 0 }, { "GPUPROV_STATS", "1", 1, 0 }, { "GPUPROV_STATS", "yes", 1, 0 },
    { "GPUPROV_STATS", "True", 1, 0 }, { "GPUPROV_STATS", "on", 1, 0 },
    { "GPUPROV_STATS", "steps", GP_STATS_STEPS, 0 }, { "GPUPROV_STATS", "Steps", GP_STATS_STEPS, 0 },
    { "GPUPROV_STATS", "maybe", BAD, 0 }, { "GPUPROV_STATS", "2", BAD, 0 },
    { "GPUPROV_HOST_THREADS", "0", 0, 0 }, { "GPUPROV_HOST_THREADS", "3", 3, 0 },
    { "GPUPROV_HOST_THREADS", "1024", 1024, 0 }, { "GPUPROV_HOST_THREADS", "-2", BAD, 0 },
    { "GPUPROV_HOST_THREADS", "1025", BAD, 0 }, { "GPUPROV_HOST_THREADS", "3.5", BAD, 0 },
    { "GPUPROV_COPY_THREADS", "0", 0, 0 }, { "GPUPROV_COPY_THREADS", "16", 16, 0 },
    { "GPUPROV_COPY_THREADS", "17", BAD, 0 }, { "GPUPROV_COPY_THREADS", "-1", BAD, 0 },
    { "GPUPROV_REG_CACHE", "0", 0, 0 }, { "GPUPROV_REG_CACHE", "1048576", 1048576, 0 },
    { "GPUPROV_REG_CACHE", "1048577", BAD, 0 }, { "GPUPROV_REG_CACHE", "-1", BAD, 0 },
    { "GPUPROV_STREAMS", "0", 1, 0 }, { "GPUPROV_STREAMS", "1", 1, 0 }, { "GPUPROV_STREAMS", "8", 8, 0 },
    { "GPUPROV_STREAMS", "9", BAD, 0 }, { "GPUPROV_STREAMS", "-1", BAD, 0 },
    { "GPUPROV_MAX_BATCH_OPS", "0", 1, 0 }, { "GPUPROV_MAX_BATCH_OPS", "64", 64, 0 },
    { "GPUPROV_MAX_BATCH_OPS", "1048576", 1 << 20, 0 }, { "GPUPROV_MAX_BATCH_OPS", "1048577", BAD, 0 },
    { "GPUPROV_MAX_BATCH_OPS", "4k", BAD, 0 },
    { "GPUPROV_MAX_BATCH_BYTES", "0", 0, 0 }, { "GPUPROV_MAX_BATCH_BYTES", "1073741824", 1 << 30, 0 },
    { "GPUPROV_MAX_BATCH_BYTES", "1073741825", BAD, 0 }, { "GPUPROV_MAX_BATCH_BYTES", "16k", BAD, 0 },
    { "GPUPROV_FLUSH_US", "0", 0, 0 }, { "GPUPROV_FLUSH_US", "1000000", 1000000, 0 },
    { "GPUPROV_FLUSH_US", "1000001", BAD, 0 }, { "GPUPROV_FLUSH_US", "", BAD, 0 },
    { "GPUPROV_WAIT", "adaptive", GP_WAIT_ADAPTIVE, 0 }, { "GPUPROV_WAIT", "spin", GP_WAIT_SPIN, 0 },
    { "GPUPROV_WAIT", "BLOCK", GP_WAIT_BLOCK, 0 }, { "GPUPROV_WAIT", "poll", BAD, 0 },
    { "GPUPROV_SPIN_US", "0", 0, 0 }, { "GPUPROV_SPIN_US", "200", 200, 0 }, { "GPUPROV_SPIN_US", "-5", BAD, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "4096", 4096, 0 }, { "GPUPROV_MIN_GPU_BYTES", "16k", 16384, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "16K", 16384, 0 }, { "GPUPROV_MIN_GPU_BYTES", "1m", MIB, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "2M", 2 * MIB, 0 }, { "GPUPROV_MIN_GPU_BYTES", "0", 0, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "1099511627776", 1ll << 40, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "1048576m", 1ll << 40, 0 }, { "GPUPROV_MIN_GPU_BYTES", "1048577m", BAD, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "1099511627777", BAD, 0 }, { "GPUPROV_MIN_GPU_BYTES", "-5", BAD, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "12q", BAD, 0 }, { "GPUPROV_MIN_GPU_BYTES", "k", BAD, 0 },
    { "GPUPROV_MIN_GPU_BYTES", "16kb", BAD, 0 }, { "GPUPROV_MIN_GPU_BYTES", "measured", BAD, 0 },
    { "GPUPROV_LONE_GPU_BYTES", "0", 0, 0 }, { "GPUPROV_LONE_GPU_BYTES", "2M", 2 * MIB, 0 },
    { "GPUPROV_LONE_GPU_BYTES", "12q", BAD, 0 },
    { "GPUPROV_GPU_SHARE", "0", 0, 0.0 }, { "GPUPROV_GPU_SHARE", "1", 0, 1.0 },
    { "GPUPROV_GPU_SHARE", "0.25", 0, 0.25 }, { "GPUPROV_GPU_SHARE", "1.5", BAD, 0 },
    { "GPUPROV_GPU_SHARE", "-0.1", BAD, 0 }, { "GPUPROV_GPU_SHARE", "nan", BAD, 0 },
    { "GPUPROV_GPU_SHARE", "half", BAD, 0 },
    { "GPUPROV_HYBRID_GPU", "cuda", 0, 0 }, { "GPUPROV_HYBRID_GPU", "host", 1, 0 },
    { "GPUPROV_HYBRID_GPU", "fpga", BAD, 0 },
    /* dir knobs: an accepted value is stored as written (want 0) */
    { "GPUPROV_CALIB_CACHE", "/tmp/gpuprov-cache", 0, 0 }, { "GPUPROV_CALIB_CACHE", "off", 0, 0 },
    { "GPUPROV_CALIB_CACHE", "relative/dir", BAD, 0 }, { "GPUPROV_CALIB_CACHE", "~/cache", BAD, 0 },
    { "GPUPROV_CALIB_CACHE", "/" DIR_TOO_LONG, BAD, 0 },
    { "GPUPROV_CALIB_SYSTEM", "/var/cache/gpuprov", 0, 0 }, { "GPUPROV_CALIB_SYSTEM", "off", 0, 0 },
    { "GPUPROV_CALIB_SYSTEM", "var/cache", BAD, 0 },
    { "GPUPROV_PRIORS", "0", 0, 0 }, { "GPUPROV_PRIORS", "on", 1, 0 }, { "GPUPROV_PRIORS", "h200", BAD, 0 },
    { "GPUPROV_CALIB_REFRESH", "1", 1, 0 }, { "GPUPROV_CALIB_REFRESH", "no", 0, 0 },
    { "GPUPROV_CALIB_REFRESH", "now", BAD, 0 },
    { "GPUPROV_MACHINE_SHARE", "0", 0, 0 }, { "GPUPROV_MACHINE_SHARE", "16", 16, 0 },
    { "GPUPROV_MACHINE_SHARE", "256", 256, 0 }, { "GPUPROV_MACHINE_SHARE", "257", BAD, 0 },
    { "GPUPROV_MACHINE_SHARE", "on", BAD, 0 },
#if GP_EXPERIMENT_SWITCHES
    { "GPUPROV_LONE_LAUNCH", "0", 0, 0 }, { "GPUPROV_LONE_LAUNCH", "1", 1, 0 },
    { "GPUPROV_LONE_LAUNCH", "2", BAD, 0 },
    { "GPUPROV_SMALL_REFS", "0", 0, 0 }, { "GPUPROV_SMALL_REFS", "132", 132, 0 },
    { "GPUPROV_SMALL_REFS", "-1", BAD, 0 }, { "GPUPROV_SMALL_REFS", "x", BAD, 0 },
    { "GPUPROV_SPREAD", "0", 0, 0 }, { "GPUPROV_SPREAD", "on", 1, 0 }, { "GPUPROV_SPREAD", "narrow", BAD, 0 },
#endif
#if GP_TEST_HOOKS
    { "GPUPROV_TEST_CUDA_FAULT_AFTER", "0", 0, 0 }, { "GPUPROV_TEST_CUDA_FAULT_AFTER", "5", 5, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_AFTER", "-1", BAD, 0 }, { "GPUPROV_TEST_CUDA_FAULT_AFTER", "5x", BAD, 0 },
    { "GPUPROV_TEST_CUDA_SILENT_AFTER", "1", 1, 0 }, { "GPUPROV_TEST_CUDA_SILENT_AFTER", "x", BAD, 0 },
    { "GPUPROV_TEST_GHASH_MMA_ANY_BATCH", "1", 1, 0 }, { "GPUPROV_TEST_GHASH_MMA_ANY_BATCH", "0", 0, 0 },
    { "GPUPROV_TEST_GHASH_MMA_ANY_BATCH", "any", BAD, 0 },
    { "GPUPROV_TEST_NO_EARLY_LAUNCH", "1", 1, 0 }, { "GPUPROV_TEST_NO_EARLY_LAUNCH", "2", BAD, 0 },
    { "GPUPROV_TEST_STAGE_ONE_THREAD", "1", 1, 0 }, { "GPUPROV_TEST_STAGE_ONE_THREAD", "yes", 1, 0 },
    { "GPUPROV_TEST_STAGE_ONE_THREAD", "one", BAD, 0 },
    { "GPUPROV_TEST_UNWATCH_DELAY_US", "300", 300, 0 }, { "GPUPROV_TEST_UNWATCH_DELAY_US", "999999", 999999, 0 },
    { "GPUPROV_TEST_UNWATCH_DELAY_US", "1000000", BAD, 0 },
    { "GPUPROV_TEST_GATHER_OPS", "16", 16, 0 }, { "GPUPROV_TEST_GATHER_OPS", "many", BAD, 0 },
    { "GPUPROV_TEST_HOST_INFLIGHT", "2", 2, 0 }, { "GPUPROV_TEST_HOST_INFLIGHT", "4", 4, 0 },
    { "GPUPROV_TEST_HOST_INFLIGHT", "two", BAD, 0 },
    { "GPUPROV_TEST_HOST_STAGE", "1", 1, 0 }, { "GPUPROV_TEST_HOST_STAGE", "staged", BAD, 0 },
    { "GPUPROV_TEST_SLICE_BYTES", "4k", 4096, 0 }, { "GPUPROV_TEST_SLICE_BYTES", "0", 0, 0 },
    { "GPUPROV_TEST_SLICE_BYTES", "slice", BAD, 0 },
    { "GPUPROV_TEST_HOST_DEVMEM", "1", 1, 0 }, { "GPUPROV_TEST_HOST_DEVMEM", "device", BAD, 0 },
    { "GPUPROV_TEST_ORDERED_ALONE", "1", 1, 0 }, { "GPUPROV_TEST_ORDERED_ALONE", "alone", BAD, 0 },
    { "GPUPROV_TEST_CPUS_FREE", "1", 1, 0 }, { "GPUPROV_TEST_CPUS_FREE", "free", BAD, 0 },
    { "GPUPROV_TEST_HOST_FAIL_AFTER", "0", 0, 0 }, { "GPUPROV_TEST_HOST_FAIL_AFTER", "7", 7, 0 },
    { "GPUPROV_TEST_HOST_FAIL_AFTER", "-1", BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_CALL", "none", GP_CF_NONE, 0 }, { "GPUPROV_TEST_CUDA_FAULT_CALL", "any", GP_CF_ANY, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_CALL", "cudaMalloc", GP_CF_MALLOC, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_CALL", "cudahostalloc", GP_CF_HOST_ALLOC, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_CALL", "cudaEventElapsedTime", GP_CF_EVENT_ELAPSED, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_CALL", "cudaFree", BAD, 0 }, { "GPUPROV_TEST_CUDA_FAULT_CALL", "3", BAD, 0 },
    /* text and name knobs: an accepted value is stored as written (want 0) */
    { "GPUPROV_TEST_GPU_MODEL", "NVIDIA H200", 0, 0 }, { "GPUPROV_TEST_GPU_MODEL", "NVIDIA H100 80GB HBM3", 0, 0 },
    { "GPUPROV_TEST_GPU_MODEL", "tab\there", BAD, 0 }, { "GPUPROV_TEST_GPU_MODEL", DIR_TOO_LONG, BAD, 0 },
    { "GPUPROV_TEST_SHARE_KEY", "test-1234", 0, 0 }, { "GPUPROV_TEST_SHARE_KEY", DIR_TOO_LONG, BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_FILE", "device.c", 0, 0 }, { "GPUPROV_TEST_CUDA_FAULT_FILE", "plan.c", 0, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_FILE", "cuda/device.c", BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_FILE", "device.c:517", BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_FILE", DIR_TOO_LONG_50, BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_LINE", "0", 0, 0 }, { "GPUPROV_TEST_CUDA_FAULT_LINE", "517", 517, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_LINE", "-1", BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_SKIP", "0", 0, 0 }, { "GPUPROV_TEST_CUDA_FAULT_SKIP", "1000", 1000, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_SKIP", "many", BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_TIMES", "0", 0, 0 }, { "GPUPROV_TEST_CUDA_FAULT_TIMES", "3", 3, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_TIMES", "-2", BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_DEVICE", "any", -1, 0 }, { "GPUPROV_TEST_CUDA_FAULT_DEVICE", "1", 1, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_DEVICE", "all", BAD, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_AT_MS", "0", 0, 0 }, { "GPUPROV_TEST_CUDA_FAULT_AT_MS", "1000", 1000, 0 },
    { "GPUPROV_TEST_CUDA_FAULT_AT_MS", "1s", BAD, 0 },
#endif
};

static long long field_int(const gp_knobs *k, const gp_setting *s)
{
    const void *f = (const char *)k + s->offset;

    if (s->size == sizeof(size_t) && s->size != sizeof(int))
        return (long long)*(const size_t *)f;
    return *(const int *)f;
}

static double field_fraction(const gp_knobs *k, const gp_setting *s)
{
    return *(const double *)((const char *)k + s->offset);
}

/* Is k's field for s its default? */
static int at_default(const gp_knobs *k, const gp_setting *s)
{
    if (gp_setting_is_text(s))
        return *((const char *)k + s->offset) == '\0';
    if (s->syntax == GP_SYNTAX_FRACTION)
        return field_fraction(k, s) == s->dflt_fraction;
    if (s->size == sizeof(size_t) && s->size != sizeof(int))
        return *(const size_t *)((const char *)k + s->offset) == (size_t)s->dflt;
    return field_int(k, s) == s->dflt;
}

static void unset_all(void)
{
    size_t n;
    const gp_setting *t = gp_settings_table(&n);

    for (size_t i = 0; i < n; i++)
        unsetenv(t[i].env);
}

/* stderr into a file while f runs; returns what was written (static buffer). */
static const char *captured_stderr(void (*f)(void *), void *arg)
{
    static char buf[4096];
    FILE *tmp = tmpfile();
    int saved = dup(2);
    size_t got;

    assert_non_null(tmp);
    fflush(stderr);
    assert_true(dup2(fileno(tmp), 2) >= 0);
    f(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    got = fread(buf, 1, sizeof(buf) - 1, tmp);
    buf[got] = '\0';
    fclose(tmp);
    return buf;
}

static void load_env_only(void *k)
{
    gp_settings_load(k, NULL, NULL);
}

/* The table itself: names, classes and defaults are consistent. */
static void test_table(void **state)
{
    size_t n;
    const gp_setting *t = gp_settings_table(&n);
    gp_knobs k;

    (void)state;
    assert_true(n >= 14);
    gp_settings_defaults(&k);
    for (size_t i = 0; i < n; i++) {
        const gp_setting *s = &t[i];

        assert_non_null(s->env);
        assert_int_equal(strncmp(s->env, "GPUPROV_", 8), 0);
        /* user and tuning knobs come from the config section too, under the variable's key */
        assert_int_equal(s->key != NULL, s->cls == GP_SETTING_USER || s->cls == GP_SETTING_TUNING);
        if (s->key != NULL) {
            char want[64];
            size_t j;

            snprintf(want, sizeof(want), "GPUPROV_%s", s->key);
            for (j = 0; want[j] != '\0'; j++)
                want[j] = (char)toupper((unsigned char)want[j]);
            assert_string_equal(s->env, want);
            assert_ptr_equal(gp_settings_find(s->key), s);
        }
        /* the test hooks, and only they, are GPUPROV_TEST_* */
        assert_int_equal(strncmp(s->env, "GPUPROV_TEST_", 13) == 0, s->cls == GP_SETTING_TEST);
        assert_ptr_equal(gp_settings_find(s->env), s);
        assert_non_null(s->expected);
        assert_non_null(s->meaning);
        assert_true(s->offset + s->size <= sizeof(gp_knobs));
        assert_true(at_default(&k, s));
        if (s->syntax == GP_SYNTAX_WORD)
            assert_non_null(s->words);
        if (gp_setting_is_text(s))
            assert_true(s->size > 1);
        /* every knob has cases: its syntaxes accepted, and one bad value at least */
        {
            int good = 0, bad = 0;

            for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
                if (strcmp(cases[c].name, s->env) == 0)
                    cases[c].want == BAD ? bad++ : good++;
            if (good == 0 || bad == 0)
                fail_msg("%s: no cases (good %d, bad %d)", s->env, good, bad);
        }
    }
    /* the documented defaults */
    assert_int_equal(k.backend, GP_BACKEND_AUTO);
    assert_int_equal(k.stats, 0);
    assert_int_equal(k.device, 0);
    assert_int_equal(k.streams, 4);
    assert_int_equal(k.machine_share, 4);
    assert_int_equal(k.max_batch_ops, 4096);
    assert_true(k.max_batch_bytes == 8u << 20);
    assert_int_equal(k.flush_us, 50);
    assert_int_equal(k.wait, GP_WAIT_ADAPTIVE);
    assert_int_equal(k.spin_us, 50);
    assert_true(k.min_gpu_bytes == GP_KNOB_CALIBRATE);
    assert_true(k.lone_gpu_bytes == GP_KNOB_CALIBRATE);
    assert_true(k.gpu_share < 0);
    assert_int_equal(k.hybrid_gpu_host, 0);
    assert_string_equal(k.calib_cache, "");
#if GP_EXPERIMENT_SWITCHES
    assert_int_equal(k.exp.lone_launch, 1);
    assert_int_equal(k.exp.small_refs, -1);
    assert_int_equal(k.exp.spread, 1);
#endif
#if GP_TEST_HOOKS
    assert_int_equal(k.test.cuda_fault_after, -1);
    assert_int_equal(k.test.cuda_silent_after, -1);
    assert_int_equal(k.test.host_inflight, 0);
    assert_int_equal(k.test.host_stage, 0);
    assert_int_equal(k.test.host_devmem, 0);
    assert_int_equal(k.test.ordered_alone, 0);
    assert_int_equal(k.test.cuda_fault_call, GP_CF_NONE);
    assert_string_equal(k.test.cuda_fault_file, "");
    assert_int_equal(k.test.cuda_fault_line, 0);
    assert_int_equal(k.test.cuda_fault_skip, 0);
    assert_int_equal(k.test.cuda_fault_times, 1);
    assert_int_equal(k.test.cuda_fault_device, -1);
    assert_int_equal(k.test.cuda_fault_at_ms, 0);
    assert_int_equal(k.test.host_fail_after, -1);
#endif
}

/* Every case through the environment: accepted values land in the field, bad ones leave the
 * default and say so on stderr, naming the knob and what it expects. */
static void test_each_knob_syntax(void **state)
{
    (void)state;
    unset_all();
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const knob_case *kc = &cases[c];
        const gp_setting *s = gp_settings_find(kc->name);
        gp_knobs k;
        const char *err;

        assert_non_null(s);
        setenv(kc->name, kc->text, 1);
        err = captured_stderr(load_env_only, &k);
        unsetenv(kc->name);
        if (kc->want == BAD && *kc->text != '\0') {
            char line[512];

            snprintf(line, sizeof(line), "gpuprov: ignoring %s = '%s' (expected %s)\n",
                     s->key != NULL ? s->key : s->env, kc->text, s->expected);
            if (!at_default(&k, s) || strcmp(err, line) != 0)
                fail_msg("%s=%s: not rejected as it should be (stderr: %s)", kc->name, kc->text, err);
        } else if (kc->want == BAD) {
            /* an empty variable is unset: the default, silently */
            assert_true(at_default(&k, s));
            assert_string_equal(err, "");
        } else {
            if (*err != '\0')
                fail_msg("%s=%s: rejected (%s)", kc->name, kc->text, err);
            if (s->syntax == GP_SYNTAX_FRACTION)
                assert_true(field_fraction(&k, s) == kc->want_fraction);
            else if (gp_setting_is_text(s))
                assert_string_equal((const char *)&k + s->offset, kc->text);
            else if (field_int(&k, s) != kc->want)
                fail_msg("%s=%s: got %lld, want %lld", kc->name, kc->text, field_int(&k, s), kc->want);
        }
    }
}

typedef struct {
    const char *const *pairs;   /* key, value, ..., NULL */
    char asked[32][32];
    int nasked;
} fake_config;

static const char *fake_config_value(void *arg, const char *key)
{
    fake_config *c = arg;

    if (c->nasked < 32)
        snprintf(c->asked[c->nasked++], sizeof(c->asked[0]), "%s", key);
    for (size_t i = 0; c->pairs[i] != NULL; i += 2)
        if (strcmp(c->pairs[i], key) == 0)
            return c->pairs[i + 1];
    return NULL;
}

typedef struct {
    gp_knobs *k;
    fake_config *c;
} config_load;

static void load_with_config(void *arg)
{
    config_load *l = arg;

    gp_settings_load(l->k, fake_config_value, l->c);
}

/* The config section's values, and the variables over them (a bad variable does not fall back to
 * the config's value: it is reported and the default used, as for any bad value). */
static void test_env_over_config(void **state)
{
    static const char *const pairs[] = {
        "backend", "cpu", "min_gpu_bytes", "16k", "gpu_share", "0.5", "streams", "2", "wait", "spin",
        /* keys that are no user or tuning knob are never read from the config */
        "test_host_inflight", "4", "host_inflight", "4", "lone_launch", "0", NULL
    };
    fake_config c = { .pairs = pairs };
    gp_knobs k, d;

    (void)state;
    unset_all();
    gp_settings_defaults(&d);
    gp_settings_load(&k, fake_config_value, &c);
    assert_int_equal(k.backend, GP_BACKEND_CPU);
    assert_int_equal(k.min_gpu_bytes, 16384);
    assert_true(k.gpu_share == 0.5);
    assert_int_equal(k.streams, 2);
    assert_int_equal(k.wait, GP_WAIT_SPIN);
    assert_true(memcmp(&k.test, &d.test, sizeof(k.test)) == 0);
    assert_true(memcmp(&k.exp, &d.exp, sizeof(k.exp)) == 0);
    for (int i = 0; i < c.nasked; i++) {
        const gp_setting *s = gp_settings_find(c.asked[i]);

        assert_non_null(s);
        assert_true(s->cls == GP_SETTING_USER || s->cls == GP_SETTING_TUNING);
    }

    setenv("GPUPROV_BACKEND", "host", 1);
    setenv("GPUPROV_MIN_GPU_BYTES", "", 1);   /* empty: the config's value */
    setenv("GPUPROV_STREAMS", "many", 1);     /* bad: the default, not the config's value */
    {
        config_load l = { &k, &c };

        assert_string_equal(captured_stderr(load_with_config, &l),
                            "gpuprov: ignoring streams = 'many' (expected a number from 1 to 8)\n");
    }
    assert_int_equal(k.backend, GP_BACKEND_HOST);
    assert_int_equal(k.min_gpu_bytes, 16384);
    assert_int_equal(k.streams, 4);
    assert_true(k.gpu_share == 0.5);
    unset_all();
}

/* A build without the flags has no such knobs: their variables change nothing, the registry does
 * not know them, and (tests/unit/module_hooks.sh) the module holds none of their names. */
static void test_flavour(void **state)
{
    static const char *const test_vars[] = {
        "GPUPROV_TEST_CUDA_FAULT_AFTER", "GPUPROV_TEST_CUDA_SILENT_AFTER", "GPUPROV_TEST_GHASH_MMA_ANY_BATCH",
        "GPUPROV_TEST_NO_EARLY_LAUNCH", "GPUPROV_TEST_STAGE_ONE_THREAD", "GPUPROV_TEST_UNWATCH_DELAY_US",
        "GPUPROV_TEST_GATHER_OPS", "GPUPROV_TEST_HOST_INFLIGHT", "GPUPROV_TEST_HOST_STAGE", "GPUPROV_TEST_SLICE_BYTES",
        "GPUPROV_TEST_HOST_DEVMEM", "GPUPROV_TEST_ORDERED_ALONE", "GPUPROV_TEST_CPUS_FREE", "GPUPROV_TEST_HOST_FAIL_AFTER",
        "GPUPROV_TEST_GPU_MODEL",
        "GPUPROV_TEST_SHARE_KEY", "GPUPROV_TEST_CUDA_FAULT_FILE", "GPUPROV_TEST_CUDA_FAULT_LINE", "GPUPROV_TEST_CUDA_FAULT_SKIP",
        "GPUPROV_TEST_CUDA_FAULT_TIMES", "GPUPROV_TEST_CUDA_FAULT_DEVICE", "GPUPROV_TEST_CUDA_FAULT_AT_MS"
    };
    static const char *const exp_vars[] = { "GPUPROV_LONE_LAUNCH", "GPUPROV_SMALL_REFS", "GPUPROV_SPREAD" };
    gp_knobs plain, set;

    (void)state;
    unset_all();
    gp_settings_load(&plain, NULL, NULL);
    for (size_t i = 0; i < sizeof(test_vars) / sizeof(test_vars[0]); i++) {
        assert_int_equal(gp_settings_find(test_vars[i]) != NULL, GP_TEST_HOOKS);
        setenv(test_vars[i], "3", 1);
    }
    for (size_t i = 0; i < sizeof(exp_vars) / sizeof(exp_vars[0]); i++) {
        assert_int_equal(gp_settings_find(exp_vars[i]) != NULL, GP_EXPERIMENT_SWITCHES);
        setenv(exp_vars[i], "0", 1);
    }
    (void)captured_stderr(load_env_only, &set);   /* the bool hooks reject "3": not this test's point */
    assert_int_equal(memcmp(&set.test, &plain.test, sizeof(set.test)) == 0, !GP_TEST_HOOKS);
    assert_int_equal(memcmp(&set.exp, &plain.exp, sizeof(set.exp)) == 0, !GP_EXPERIMENT_SWITCHES);
#if GP_TEST_HOOKS
    assert_int_equal(set.test.host_inflight, 3);
    assert_int_equal(set.test.cuda_fault_after, 3);
#endif
#if GP_EXPERIMENT_SWITCHES
    assert_int_equal(set.exp.lone_launch, 0);
    assert_int_equal(set.exp.spread, 0);
    assert_int_equal(set.exp.small_refs, 0);
#endif
    unset_all();
    for (size_t i = 0; i < sizeof(test_vars) / sizeof(test_vars[0]); i++)
        unsetenv(test_vars[i]);
    for (size_t i = 0; i < sizeof(exp_vars) / sizeof(exp_vars[0]); i++)
        unsetenv(exp_vars[i]);
}

static const char *const class_names[] = { "user", "tuning", "test", "experiment" };

/* `test_settings --table`: this build's knobs as a Markdown table (for docs/config.md). */
static void print_table(void)
{
    size_t n;
    const gp_setting *t = gp_settings_table(&n);

    printf("| variable | config key | class | default | values | meaning |\n|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        const gp_setting *s = &t[i];
        char dflt[64];

        if (s->syntax == GP_SYNTAX_FRACTION)
            snprintf(dflt, sizeof(dflt), s->dflt_fraction < 0 ? "measured" : "%g", s->dflt_fraction);
        else if (gp_setting_is_text(s))
            snprintf(dflt, sizeof(dflt), "unset");
        else if (s->syntax == GP_SYNTAX_BYTES && s->dflt == -1)
            snprintf(dflt, sizeof(dflt), "measured");
        else if (s->syntax == GP_SYNTAX_NUMBER && s->dflt < s->min && s->words == NULL)
            snprintf(dflt, sizeof(dflt), "unset");
        else {
            snprintf(dflt, sizeof(dflt), "%lld", s->dflt);
            for (const gp_setting_word *w = s->words; w != NULL && w->word != NULL; w++)
                if (w->value == s->dflt) {
                    snprintf(dflt, sizeof(dflt), "%s", w->word);
                    break;
                }
        }
        printf("| `%s` | %s%s%s | %s | %s | %s | %s |\n", s->env, s->key ? "`" : "", s->key ? s->key : "-",
               s->key ? "`" : "", class_names[s->cls], dflt, s->expected, s->meaning);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_each_knob_syntax),
        cmocka_unit_test(test_env_over_config),
        cmocka_unit_test(test_flavour),
    };

    if (argc > 1 && strcmp(argv[1], "--table") == 0) {
        print_table();
        return 0;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
