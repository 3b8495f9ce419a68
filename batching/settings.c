/* SPDX-License-Identifier: Apache-2.0 */
/* The settings registry: each knob's key, variable, class, syntax, default and range, and its parser. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "batching/copy_crew.h"
#include "settings.h"

/* Every field a row names is an int (enums included), a size_t or a double. */
_Static_assert(sizeof(gp_backend) == sizeof(int) && sizeof(gp_wait_mode) == sizeof(int),
               "enum knobs are stored as int");

#define FIELD(f) offsetof(gp_knobs, f), sizeof(((gp_knobs *)0)->f)

static const gp_setting_word backend_words[] = {
    { "auto", GP_BACKEND_AUTO }, { "cuda", GP_BACKEND_CUDA }, { "host", GP_BACKEND_HOST },
    { "cpu", GP_BACKEND_CPU }, { "hybrid", GP_BACKEND_HYBRID }, { NULL, 0 }
};
static const gp_setting_word wait_words[] = {
    { "adaptive", GP_WAIT_ADAPTIVE }, { "spin", GP_WAIT_SPIN }, { "block", GP_WAIT_BLOCK }, { NULL, 0 }
};
static const gp_setting_word stats_words[] = {
    { "0", 0 }, { "no", 0 }, { "false", 0 }, { "off", 0 },
    { "1", 1 }, { "yes", 1 }, { "true", 1 }, { "on", 1 }, { "steps", GP_STATS_STEPS }, { NULL, 0 }
};
static const gp_setting_word device_words[] = { { "all", GP_DEVICE_ALL }, { NULL, 0 } };
static const gp_setting_word hybrid_gpu_words[] = { { "cuda", 0 }, { "host", 1 }, { NULL, 0 } };
static const gp_setting_word calib_cache_words[] = { { "off", 0 }, { NULL, 0 } };
static const gp_setting_word bool_words[] = {
    { "0", 0 }, { "no", 0 }, { "false", 0 }, { "off", 0 },
    { "1", 1 }, { "yes", 1 }, { "true", 1 }, { "on", 1 }, { NULL, 0 }
};
#if GP_TEST_HOOKS
static const gp_setting_word cuda_call_words[] = {
    { "none", GP_CF_NONE }, { "any", GP_CF_ANY }, { "cudaGetDeviceCount", GP_CF_GET_DEVICE_COUNT },
    { "cudaSetDevice", GP_CF_SET_DEVICE }, { "cudaGetDevice", GP_CF_GET_DEVICE },
    { "cudaHostAlloc", GP_CF_HOST_ALLOC }, { "cudaHostGetDevicePointer", GP_CF_HOST_GET_DEVICE_POINTER },
    { "cudaMalloc", GP_CF_MALLOC }, { "cudaStreamCreateWithFlags", GP_CF_STREAM_CREATE },
    { "cudaEventCreate", GP_CF_EVENT_CREATE }, { "cudaMemcpyAsync", GP_CF_MEMCPY_ASYNC },
    { "cudaMemsetAsync", GP_CF_MEMSET_ASYNC }, { "cudaLaunchKernel", GP_CF_LAUNCH_KERNEL },
    { "cudaLaunchKernelExC", GP_CF_LAUNCH_KERNEL_EX }, { "cudaEventRecord", GP_CF_EVENT_RECORD },
    { "cudaEventQuery", GP_CF_EVENT_QUERY }, { "cudaEventSynchronize", GP_CF_EVENT_SYNCHRONIZE },
    { "cudaStreamSynchronize", GP_CF_STREAM_SYNCHRONIZE }, { "cudaEventElapsedTime", GP_CF_EVENT_ELAPSED },
    { "cudaStreamWaitEvent", GP_CF_STREAM_WAIT_EVENT }, { "cudaHostRegister", GP_CF_HOST_REGISTER },
    { "cudaPointerGetAttributes", GP_CF_POINTER_GET_ATTRIBUTES }, { "cudaMallocFromPoolAsync", GP_CF_MALLOC_ASYNC },
    { NULL, 0 }
};
_Static_assert(GP_CF_COUNT == 23, "every gp_cuda_fault_call has its word in cuda_call_words");
static const gp_setting_word any_device_words[] = { { "any", -1 }, { NULL, 0 } };
#endif

static const gp_setting registry[] = {
    /* user */
    { .key = "backend", .env = "GPUPROV_BACKEND", .cls = GP_SETTING_USER, .syntax = GP_SYNTAX_WORD,
      FIELD(backend), .dflt = GP_BACKEND_AUTO, .words = backend_words,
      .expected = "auto, hybrid, cuda, host or cpu",
      .meaning = "executor for new messages: auto (the hybrid policy where a usable GPU is found, else "
                 "cpu), hybrid, cuda, host or cpu" },
    { .key = "device", .env = "GPUPROV_DEVICE", .cls = GP_SETTING_USER, .syntax = GP_SYNTAX_NUMBER,
      FIELD(device), .dflt = 0, .min = 0, .max = 1023, .words = device_words,
      .expected = "a device index from 0, or all",
      .meaning = "CUDA device of the cuda executor; all: batches spread over every GPU" },
    { .key = "stats", .env = "GPUPROV_STATS", .cls = GP_SETTING_USER, .syntax = GP_SYNTAX_WORD,
      FIELD(stats), .dflt = 0, .words = stats_words, .expected = "0, 1 or steps",
      .meaning = "at unload, print the stats lines to stderr; steps: also time each GPU step of a batch" },
    /* tuning */
    { .key = "host_threads", .env = "GPUPROV_HOST_THREADS", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_NUMBER, FIELD(host_threads), .dflt = 0, .min = 0, .max = 1024,
      .expected = "a number from 0 to 1024",
      .meaning = "worker threads of the host executor (0: one per online CPU)" },
    { .key = "copy_threads", .env = "GPUPROV_COPY_THREADS", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_NUMBER, FIELD(copy_threads), .dflt = 0, .min = 0, .max = GP_COPY_CREW_MAX,
      .expected = "a number from 0 to 16",
      .meaning = "cuda: helper threads that copy a large request (256 KiB and up) between the caller's "
                 "memory and pinned memory (0: one per online CPU beyond the first, at most 8)" },
    { .key = "reg_cache", .env = "GPUPROV_REG_CACHE", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_NUMBER, FIELD(reg_cache_mib), .dflt = 0, .min = 0, .max = 1 << 20,
      .expected = "a number of MiB from 0 to 1048576",
      .meaning = "cuda: MiB of callers' reused buffers (256 KiB and up) kept registered (pinned) so the "
                 "GPU reads them directly, without the copy crew's copy in (batching/reg_cache.h); "
                 "0: off, and no memory hooks are installed" },
    /* The default is where more slots a GPU stop paying: fewer leave the GPU idle between
     * batches, more cost one thread and openssl speed throughput (bench/evp_bench, bench/compare). */
    { .key = "streams", .env = "GPUPROV_STREAMS", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_NUMBER,
      FIELD(streams), .dflt = 4, .min = 0, .max = 8, .floor = 1, .expected = "a number from 1 to 8",
      .meaning = "cuda: batches in flight per GPU, each with its own stream, arenas and dispatcher "
                 "(0 means 1)" },
    { .key = "max_batch_ops", .env = "GPUPROV_MAX_BATCH_OPS", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_NUMBER, FIELD(max_batch_ops), .dflt = 4096, .min = 0, .max = 1 << 20,
      .floor = 1, .expected = "a number from 1 to 1048576",
      .meaning = "a batch flushes at this many requests (0 means 1)" },
    { .key = "max_batch_bytes", .env = "GPUPROV_MAX_BATCH_BYTES", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_NUMBER, FIELD(max_batch_bytes), .dflt = 8 << 20, .min = 0, .max = 1 << 30,
      .expected = "a number from 0 to 1073741824",
      .meaning = "...or at this many bytes" },
    { .key = "flush_us", .env = "GPUPROV_FLUSH_US", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_NUMBER,
      FIELD(flush_us), .dflt = 50, .min = 0, .max = 1000000, .expected = "a number from 0 to 1000000",
      .meaning = "...or this many us after its first request (or when it holds its share of the callers)" },
    { .key = "wait", .env = "GPUPROV_WAIT", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_WORD,
      FIELD(wait), .dflt = GP_WAIT_ADAPTIVE, .words = wait_words, .expected = "spin, block or adaptive",
      .meaning = "how a caller waits for its batch and a dispatcher for the GPU: adaptive spins "
                 "spin_us, then blocks" },
    { .key = "spin_us", .env = "GPUPROV_SPIN_US", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_NUMBER,
      FIELD(spin_us), .dflt = 50, .min = 0, .max = 1000000, .expected = "a number from 0 to 1000000",
      .meaning = "wait adaptive: spin this long before blocking" },
    { .key = "min_gpu_bytes", .env = "GPUPROV_MIN_GPU_BYTES", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_BYTES, FIELD(min_gpu_bytes), .dflt = (long long)GP_KNOB_CALIBRATE, .min = 0, .max = 1ll << 40,
      .expected = "a byte count such as 4096, 16k or 1m",
      .meaning = "hybrid: messages whose first data request is shorter stay on the CPU (default: measured)" },
    { .key = "lone_gpu_bytes", .env = "GPUPROV_LONE_GPU_BYTES", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_BYTES, FIELD(lone_gpu_bytes), .dflt = (long long)GP_KNOB_CALIBRATE, .min = 0, .max = 1ll << 40,
      .expected = "a byte count such as 4096, 16k or 1m",
      .meaning = "hybrid: the same for a lone synchronous caller (default: measured)" },
    { .key = "gpu_share", .env = "GPUPROV_GPU_SHARE", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_FRACTION, FIELD(gpu_share), .dflt_fraction = -1.0,
      .expected = "a fraction from 0 to 1",
      .meaning = "hybrid: fraction of the eligible messages sent to the GPU (default: measured)" },
    { .key = "hybrid_gpu", .env = "GPUPROV_HYBRID_GPU", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_WORD,
      FIELD(hybrid_gpu_host), .dflt = 0, .words = hybrid_gpu_words, .expected = "cuda or host",
      .meaning = "hybrid: which executor plays the GPU's part (host: machines without a GPU exercise "
                 "the policy)" },
    { .key = "calib_cache", .env = "GPUPROV_CALIB_CACHE", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_DIR,
      FIELD(calib_cache), .words = calib_cache_words, .expected = "an absolute directory, or off",
      .meaning = "hybrid: directory of the persisted measurements (default: $XDG_CACHE_HOME/gpuprov, "
                 "else ~/.cache/gpuprov); off: measure in every process" },
    { .key = "calib_system", .env = "GPUPROV_CALIB_SYSTEM", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_DIR,
      FIELD(calib_system), .words = calib_cache_words, .expected = "an absolute directory, or off",
      .meaning = "hybrid: directory of the machine's measurements (gpuprov-calibrate --system), read where the "
                 "user's own have none (default: " GPUPROV_SYSTEM_CALIB_DIR "); off: none" },
    { .key = "priors", .env = "GPUPROV_PRIORS", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_WORD,
      FIELD(priors), .dflt = 1, .words = bool_words, .expected = "0 or 1",
      .meaning = "hybrid: on a host with no measurement yet, route by the numbers measured on hosts of its "
                 "GPU model and core class (0: measure first; meanwhile large messages of a lone caller stay "
                 "on the CPU)" },
    { .key = "machine_share", .env = "GPUPROV_MACHINE_SHARE", .cls = GP_SETTING_TUNING,
      .syntax = GP_SYNTAX_NUMBER, FIELD(machine_share), .dflt = 4, .min = 0, .max = GP_SHARE_SLOTS,
      .expected = "a number from 0 to 256",
      .meaning = "hybrid: this user's processes on one machine share what each GPU has in flight; at most N "
                 "of them open one GPU, and a message goes to a GPU only while its other processes hold fewer "
                 "batches in flight there than `streams` (0: each process decides alone)" },
    { .key = "calib_refresh", .env = "GPUPROV_CALIB_REFRESH", .cls = GP_SETTING_TUNING, .syntax = GP_SYNTAX_WORD,
      FIELD(calib_refresh), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "hybrid: measure in this process whatever is persisted or known, and persist the result "
                 "(what gpuprov-calibrate does)" },
#if GP_EXPERIMENT_SWITCHES
    /* experiment: kept on (docs/config.md, "For tests and experiments") */
    { .env = "GPUPROV_LONE_LAUNCH", .cls = GP_SETTING_EXPERIMENT, .syntax = GP_SYNTAX_WORD,
      FIELD(exp.lone_launch), .dflt = 1, .words = bool_words, .expected = "0 or 1",
      .meaning = "0: a small batch alone in flight takes the three launches too" },
    { .env = "GPUPROV_SMALL_REFS", .cls = GP_SETTING_EXPERIMENT, .syntax = GP_SYNTAX_NUMBER,
      FIELD(exp.small_refs), .dflt = -1, .min = 0, .max = 1 << 20, .expected = "a number from 0 up",
      .meaning = "at most N refs take the batch kernel's latency build (0: none; unset: a warp each "
                 "as the GPU holds)" },
    { .env = "GPUPROV_SPREAD", .cls = GP_SETTING_EXPERIMENT, .syntax = GP_SYNTAX_WORD,
      FIELD(exp.spread), .dflt = 1, .words = bool_words, .expected = "0 or 1",
      .meaning = "0: the latency kernels keep a warp per unit (no spread units)" },
#endif
#if GP_TEST_HOOKS
    { .env = "GPUPROV_TEST_CUDA_FAULT_AFTER", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.cuda_fault_after), .dflt = -1, .min = 0, .max = 1 << 30, .expected = "a number from 0 up",
      .meaning = "after N good batches the cuda executor's next launch fails (the fallback's test)" },
    { .env = "GPUPROV_TEST_CUDA_SILENT_AFTER", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.cuda_silent_after), .dflt = -1, .min = 0, .max = 1 << 30, .expected = "a number from 0 up",
      .meaning = "after N good batches with done words, the next batch's last kernel does not write them" },
    { .env = "GPUPROV_TEST_GHASH_MMA_ANY_BATCH", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.ghash_mma_any_batch), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "GCM's tensor-core GHASH in batches of any size (the gpu suite's small batches)" },
    { .env = "GPUPROV_TEST_NO_EARLY_LAUNCH", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.no_early_launch), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "every launch waits for the one before it to end" },
    { .env = "GPUPROV_TEST_STAGE_ONE_THREAD", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.stage_one_thread), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "a single thread's async jobs stage their own data too" },
    { .env = "GPUPROV_TEST_UNWATCH_DELAY_US", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.unwatch_delay_us), .dflt = 0, .min = 0, .max = 999999, .expected = "a number from 0 to 999999",
      .meaning = "the queue's watcher pauses this long in its window before it stops watching" },
    { .env = "GPUPROV_TEST_GATHER_OPS", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.gather_ops), .dflt = 0, .min = 0, .max = 1 << 20, .expected = "a number from 0 up",
      .meaning = "a pending batch flushes only by size or the flush_us timer until it holds N requests "
                 "(the share rule waits: suites see concurrent callers combine; 0: off)" },
    { .env = "GPUPROV_TEST_HOST_INFLIGHT", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.host_inflight), .dflt = 0, .min = 0, .max = 1024, .expected = "a number from 0 up",
      .meaning = "host batches run at once (at most the dispatcher count; below 2: one)" },
    { .env = "GPUPROV_TEST_HOST_STAGE", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.host_stage), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "async jobs stage their data for the host executor, in a small pool of plain memory" },
    { .env = "GPUPROV_TEST_SLICE_BYTES", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_BYTES,
      FIELD(test.slice_bytes), .dflt = 0, .min = 0, .max = 1ll << 30, .expected = "a byte count such as 4k",
      .meaning = "the host and cuda executors run a data request in slices of this many bytes (rounded "
                 "down to 64; 0: the default, 16 MiB)" },
    { .env = "GPUPROV_TEST_HOST_DEVMEM", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.host_devmem), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "the host executor stands in for the GPU in device mode (gpuprov-memory = device), "
                 "with fake allocations from gpuprov_test_devmem_alloc" },
    { .env = "GPUPROV_TEST_ORDERED_ALONE", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.ordered_alone), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "a pipeline call's stream-ordered requests queue each alone, not as one batch "
                 "(the fallback's test; the batch's A/B on a GPU)" },
    { .env = "GPUPROV_TEST_CPUS_FREE", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.cpus_free), .dflt = 0, .words = bool_words, .expected = "0 or 1",
      .meaning = "the auto backend's warm-up finds a free CPU at every look (the machine's load does not decide)" },
    { .env = "GPUPROV_TEST_GPU_MODEL", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_TEXT,
      FIELD(test.gpu_model), .expected = "a GPU model as the driver names it, such as NVIDIA H200",
      .meaning = "the priors see every GPU as this model, and the host executor standing in for the GPU "
                 "(hybrid_gpu = host) takes that model's priors" },
    { .env = "GPUPROV_TEST_SHARE_KEY", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_TEXT,
      FIELD(test.share_key), .expected = "a name such as test-1234",
      .meaning = "the host executor standing in for the GPU (hybrid_gpu = host) shares its machine-wide "
                 "counts (knob machine_share) under this fake GPU UUID; unset: it shares none" },
    { .env = "GPUPROV_TEST_HOST_FAIL_AFTER", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.host_fail_after), .dflt = -1, .min = 0, .max = 1 << 30, .expected = "a number from 0 up",
      .meaning = "after N good batches the host executor, standing in for the GPU, fails the next one as a "
                 "whole, once (the GPU failure path without a GPU)" },
    /* The CUDA fault interposition (batching/cuda_fault.h): read at each opening of the cuda executor. */
    { .env = "GPUPROV_TEST_CUDA_FAULT_CALL", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_WORD,
      FIELD(test.cuda_fault_call), .dflt = GP_CF_NONE, .words = cuda_call_words,
      .expected = "none, any or a CUDA call's name (cudaMalloc, cudaHostAlloc, cudaLaunchKernel, ...)",
      .meaning = "the CUDA call of the cuda executor that fails (any: every one it makes)" },
    { .env = "GPUPROV_TEST_CUDA_FAULT_FILE", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NAME,
      FIELD(test.cuda_fault_file), .expected = "a file's name, such as device.c",
      .meaning = "only the call sites in this file of batching/cuda/ fail (unset: every file)" },
    { .env = "GPUPROV_TEST_CUDA_FAULT_LINE", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.cuda_fault_line), .dflt = 0, .min = 0, .max = 1 << 20, .expected = "a line number from 0 up",
      .meaning = "only the call sites on this line fail, of the file CUDA_FAULT_FILE names (0: every line)" },
    { .env = "GPUPROV_TEST_CUDA_FAULT_SKIP", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.cuda_fault_skip), .dflt = 0, .min = 0, .max = 1 << 30, .expected = "a number from 0 up",
      .meaning = "this many matching calls succeed before the first fault" },
    { .env = "GPUPROV_TEST_CUDA_FAULT_TIMES", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.cuda_fault_times), .dflt = 1, .min = 0, .max = 1 << 30, .expected = "a number from 0 up",
      .meaning = "then this many fail (0: every one from then on: the GPU taken away)" },
    { .env = "GPUPROV_TEST_CUDA_FAULT_DEVICE", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.cuda_fault_device), .dflt = -1, .min = 0, .max = 1023, .words = any_device_words,
      .expected = "a device index from 0, or any",
      .meaning = "only calls made while this device is current fail (one GPU of several)" },
    { .env = "GPUPROV_TEST_CUDA_FAULT_AT_MS", .cls = GP_SETTING_TEST, .syntax = GP_SYNTAX_NUMBER,
      FIELD(test.cuda_fault_at_ms), .dflt = 0, .min = 0, .max = 1 << 30, .expected = "a number of ms from 0 up",
      .meaning = "only calls made this many ms after the cuda executor opened match (a fault mid-run)" },
#endif
};

const gp_setting *gp_settings_table(size_t *n)
{
    *n = sizeof(registry) / sizeof(registry[0]);
    return registry;
}

const gp_setting *gp_settings_find(const char *name)
{
    for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++)
        if (strcmp(registry[i].env, name) == 0 || (registry[i].key != NULL && strcmp(registry[i].key, name) == 0))
            return &registry[i];
    return NULL;
}

static void store(gp_knobs *k, const gp_setting *s, long long v, double d)
{
    void *field = (char *)k + s->offset;

    if (gp_setting_is_text(s))
        return;   /* text: parse_dir, parse_name or parse_text stores it; the default is the zeroed (empty) field */
    if (s->syntax == GP_SYNTAX_FRACTION)
        *(double *)field = d;
    else if (s->size == sizeof(size_t) && s->size != sizeof(int))
        *(size_t *)field = (size_t)v;   /* GP_KNOB_CALIBRATE round-trips through long long */
    else
        *(int *)field = (int)v;
}

static int parse_word(const gp_setting *s, const char *v, long long *out)
{
    for (const gp_setting_word *w = s->words; w != NULL && w->word != NULL; w++) {
        if (strcasecmp(v, w->word) == 0) {
            *out = w->value;
            return 1;
        }
    }
    return 0;
}

static int parse_number(const gp_setting *s, const char *v, long long *out)
{
    char *end;
    long long n = strtoll(v, &end, 10);

    if (*v == '\0' || *end != '\0' || n < s->min || n > s->max)
        return 0;
    *out = n < s->floor ? s->floor : n;
    return 1;
}

static int parse_bytes(const gp_setting *s, const char *v, long long *out)
{
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    unsigned shift = 0;

    if (end == v)
        return 0;   /* no digits ("k" alone) */
    if (*end == 'k' || *end == 'K')
        shift = 10, end++;
    else if (*end == 'm' || *end == 'M')
        shift = 20, end++;
    if (*v == '\0' || *v == '-' || *end != '\0' || n > ((unsigned long long)s->max >> shift))
        return 0;
    *out = (long long)(n << shift);
    return 1;
}

static int parse_fraction(const char *v, double *out)
{
    char *end;
    double d = strtod(v, &end);

    if (*v == '\0' || *end != '\0' || !(d >= 0.0 && d <= 1.0))
        return 0;
    *out = d;
    return 1;
}

/* An absolute path that fits the field with its NUL, or one of the words, stored as given. */
static int parse_dir(gp_knobs *k, const gp_setting *s, const char *v)
{
    long long unused;

    if (!(v[0] == '/' || parse_word(s, v, &unused)) || strlen(v) >= s->size)
        return 0;
    memcpy((char *)k + s->offset, v, strlen(v) + 1);
    return 1;
}

/* A file's name, not a path: letters, digits, '.', '_' and '-', fitting the field with its NUL. */
static int parse_name(gp_knobs *k, const gp_setting *s, const char *v)
{
    static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    const size_t n = strlen(v);

    if (n == 0 || n >= s->size || strspn(v, allowed) != n)
        return 0;
    memcpy((char *)k + s->offset, v, n + 1);
    return 1;
}

/* Printable ASCII, spaces too, fitting the field with its NUL. */
static int parse_text(gp_knobs *k, const gp_setting *s, const char *v)
{
    const size_t n = strlen(v);

    if (n == 0 || n >= s->size)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
            return 0;
    memcpy((char *)k + s->offset, v, n + 1);
    return 1;
}

int gp_settings_parse(gp_knobs *k, const gp_setting *s, const char *v)
{
    long long n = 0;
    double d = 0.0;
    int ok;

    switch (s->syntax) {
    case GP_SYNTAX_DIR:
        return parse_dir(k, s, v);
    case GP_SYNTAX_NAME:
        return parse_name(k, s, v);
    case GP_SYNTAX_TEXT:
        return parse_text(k, s, v);
    case GP_SYNTAX_NUMBER:
        ok = parse_word(s, v, &n) || parse_number(s, v, &n);
        break;
    case GP_SYNTAX_BYTES:
        ok = parse_bytes(s, v, &n);
        break;
    case GP_SYNTAX_FRACTION:
        ok = parse_fraction(v, &d);
        break;
    default:
        ok = parse_word(s, v, &n);
        break;
    }
    if (ok)
        store(k, s, n, d);
    return ok;
}

void gp_settings_defaults(gp_knobs *k)
{
    memset(k, 0, sizeof(*k));
    for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++)
        store(k, &registry[i], registry[i].dflt, registry[i].dflt_fraction);
}

/* s's variable, NULL when it is unset or empty (an empty variable is unset). */
static const char *env_value(const gp_setting *s)
{
    const char *v = getenv(s->env);

    return v != NULL && *v != '\0' ? v : NULL;
}

void gp_settings_load(gp_knobs *k, gp_settings_config_fn *config, void *arg)
{
    gp_settings_defaults(k);
    for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++) {
        const gp_setting *s = &registry[i];
        const char *v = env_value(s);

        if (v == NULL && s->key != NULL && config != NULL)
            v = config(arg, s->key);
        if (v != NULL && !gp_settings_parse(k, s, v))
            fprintf(stderr, "gpuprov: ignoring %s = '%s' (expected %s)\n",
                    s->key != NULL ? s->key : s->env, v, s->expected);
    }
}

int gp_settings_reread(gp_knobs *k, size_t offset)
{
    for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++) {
        const char *v;

        if (registry[i].offset != offset)
            continue;
        v = env_value(&registry[i]);
        return v != NULL && gp_settings_parse(k, &registry[i], v);
    }
    return 0;
}

/* ---- the environment gpuprov reads besides its knobs' variables ---- */

const char *gp_settings_cuda_visible(void)
{
    return getenv("CUDA_VISIBLE_DEVICES");
}

int gp_settings_cuda_hides_all(void)
{
    const char *vis = gp_settings_cuda_visible();

    /* The CUDA runtime's rule: an empty list, or one starting with an invalid index, hides all. */
    return vis != NULL && (vis[0] == '\0' || vis[0] == '-');
}

int gp_settings_user_cache_dir(char *out, size_t n)
{
    const char *base;
    int len;

    /* secure_getenv: a set-user-ID program takes no directory from its caller's environment. */
    if ((base = secure_getenv("XDG_CACHE_HOME")) != NULL && base[0] == '/')
        len = snprintf(out, n, "%s/gpuprov", base);
    else if ((base = secure_getenv("HOME")) != NULL && base[0] == '/')
        len = snprintf(out, n, "%s/.cache/gpuprov", base);
    else
        return 0;
    return len > 0 && (size_t)len < n;
}
