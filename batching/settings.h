/* SPDX-License-Identifier: Apache-2.0 */
/* The settings registry: every knob declared once (settings.c), parsed in one place into gp_knobs. */
#ifndef GP_SETTINGS_H
#define GP_SETTINGS_H

#include <stddef.h>

/*
 * Build flavours. GP_TEST_HOOKS (the test module, provider/test-module/): the GPUPROV_TEST_*
 * hooks exist; without it neither their variables nor the code that reads them is compiled.
 * GP_EXPERIMENTS (build option experiments): the A/B switches of settled experiments exist. A
 * test build has those switches too, so that its tests can run both sides of them. gp_knobs has
 * the same layout in every flavour (the provider and most of the engine are compiled once); a
 * field of a class that a flavour lacks is never set or read there.
 */
#ifndef GP_TEST_HOOKS
# define GP_TEST_HOOKS 0
#endif
#ifndef GP_EXPERIMENTS
# define GP_EXPERIMENTS 0
#endif
#define GP_EXPERIMENT_SWITCHES (GP_EXPERIMENTS || GP_TEST_HOOKS)

typedef enum gp_backend {
    GP_BACKEND_AUTO = 0,   /* hybrid where a usable GPU is found, else cpu; no GPU at all:
                            * passthrough (gp_engine_gpu_possible, provider/passthrough.c) */
    GP_BACKEND_CUDA,       /* every message on the GPU (measurement, tests) */
    GP_BACKEND_HOST,
    GP_BACKEND_CPU,
    GP_BACKEND_HYBRID      /* each message to the GPU or the cpu executor by policy (batching/policy/hybrid.c) */
} gp_backend;

#define GP_KNOB_CALIBRATE ((size_t)-1)
#define GP_DEVICE_ALL (-1)          /* knob device=all: batches spread over every GPU */

#define GP_STATS_STEPS 2            /* knob stats=steps */
#define GP_SHARE_SLOTS 256          /* processes of a user a GPU's shared counts hold (knob machine_share) */

typedef enum gp_wait_mode { GP_WAIT_ADAPTIVE = 0, GP_WAIT_SPIN, GP_WAIT_BLOCK } gp_wait_mode;

/* The CUDA calls of the cuda executor (batching/cuda/) that the fault interposition
 * (batching/cuda_fault.h) can fail, by name; the value of the test hook cuda_fault_call. */
typedef enum gp_cuda_fault_call {
    GP_CF_NONE = 0,               /* no fault */
    GP_CF_ANY,                    /* every call below */
    GP_CF_GET_DEVICE_COUNT,
    GP_CF_SET_DEVICE,
    GP_CF_GET_DEVICE,
    GP_CF_HOST_ALLOC,
    GP_CF_HOST_GET_DEVICE_POINTER,
    GP_CF_MALLOC,
    GP_CF_STREAM_CREATE,
    GP_CF_EVENT_CREATE,
    GP_CF_MEMCPY_ASYNC,
    GP_CF_MEMSET_ASYNC,
    GP_CF_LAUNCH_KERNEL,
    GP_CF_LAUNCH_KERNEL_EX,
    GP_CF_EVENT_RECORD,
    GP_CF_EVENT_QUERY,
    GP_CF_EVENT_SYNCHRONIZE,
    GP_CF_STREAM_SYNCHRONIZE,
    GP_CF_EVENT_ELAPSED,
    GP_CF_STREAM_WAIT_EVENT,
    GP_CF_HOST_REGISTER,
    GP_CF_POINTER_GET_ATTRIBUTES,
    GP_CF_MALLOC_ASYNC,
    GP_CF_COUNT
} gp_cuda_fault_call;

/* Class test (GP_TEST_HOOKS builds only): ways for the suites to reach paths that machines without
 * a GPU, or runs without a fault, would not take. */
typedef struct gp_test_hooks {
    int cuda_fault_after;     /* after N good batches the next one's launch fails; -1: never */
    int cuda_silent_after;    /* after N good batches with done words, the next one's last kernel
                               * is not told where they are; -1: never */
    int ghash_mma_any_batch;  /* GCM's tensor-core GHASH in batches of any size */
    int no_early_launch;      /* every launch waits for the one before it to end */
    int stage_one_thread;     /* a single thread's async jobs stage their data too */
    int unwatch_delay_us;     /* the queue's watcher pauses between deciding to block and ceasing
                               * to watch */
    int gather_ops;           /* the queue's share rule waits for N pending requests (0: off) */
    int host_inflight;        /* host batches the queue runs at once (below 2: one) */
    int host_stage;           /* the host executor gives async jobs a small staging pool */
    size_t slice_bytes;       /* the host and cuda executors run a data request in slices of this
                               * many bytes (batching/kstate.h); 0: GP_SLICE_BYTES */
    int host_devmem;          /* the host executor stands in for the GPU in device mode, with a
                               * registry of fake allocations (batching/exec_host.c) */
    int ordered_alone;        /* a pipeline call's stream-ordered requests queue each alone, not as
                               * one batch (batching/engine.c, submit_ordered_together) */
    int cpus_free;            /* the auto backend's warm-up finds a free CPU at every look */
    char gpu_model[64];       /* the priors see every GPU as this model; "": the driver's */
    char share_key[64];       /* the host executor standing in for the GPU shares its counts
                               * under this fake GPU UUID (policy/share.c); "": none */
    int host_fail_after;      /* after N good batches the host executor fails the next one as a
                               * whole, once, as a GPU fails (it stands in for one); -1: never */
    /* The CUDA fault interposition (batching/cuda_fault.h), read again at each opening of the
     * cuda executor: of the calls that match (call, file, line, device), the first `skip` pass,
     * the next `times` fail (0: every one from then on, as when the GPU is taken away); with at_ms,
     * calls match only from then on (a fault mid-run, whatever the calls' rate). A call site is a
     * file and a line. */
    int cuda_fault_call;      /* gp_cuda_fault_call; GP_CF_NONE: no fault */
    char cuda_fault_file[32]; /* only the call sites in this file of batching/cuda/ (its name:
                               * device.c); "": every file */
    int cuda_fault_line;      /* only the call sites on this line; 0: every line */
    int cuda_fault_skip;
    int cuda_fault_times;
    int cuda_fault_device;    /* only calls made while this device is current; -1: any */
    int cuda_fault_at_ms;     /* only calls made this many ms after the arming (the opening) on
                               * match; 0: from the arming */
} gp_test_hooks;

/* Class experiment (GP_EXPERIMENT_SWITCHES builds only): the cuda executor's A/B switches of
 * settled experiments; the defaults are what every other build does. */
typedef struct gp_experiments {
    int lone_launch;          /* 0: a small batch alone in flight takes the three launches too */
    int small_refs;           /* at most N refs take the latency build of the batch kernel (0:
                               * none); -1: as many as the GPU holds a warp each */
    int spread;               /* 0: the latency kernels keep a warp per unit (GP_BATCH_NARROW) */
} gp_experiments;

/* The parsed settings. Start from gp_settings_defaults or gp_settings_load: a zeroed gp_knobs is
 * not the defaults. */
typedef struct gp_knobs {
    gp_backend backend;
    int stats;             /* print one stats line to stderr when the provider unloads; GP_STATS_STEPS:
                            * the cuda executor also times each step of a batch on the GPU */
    int host_threads;      /* worker threads of the host executor (0: one per online CPU) */
    int copy_threads;      /* cuda: threads that copy large requests to and from pinned memory (0: auto) */
    int reg_cache_mib;     /* cuda: MiB of callers' buffers kept registered (reg_cache.h); 0: off */
    int device;            /* CUDA device index for the cuda executor, or GP_DEVICE_ALL */
    int streams;           /* cuda: batches in flight per GPU, each with its own stream, pinned and
                            * device arenas and async dispatcher thread */
    /* Batching (host and cuda executors): a batch flushes at max_batch_ops requests or
     * max_batch_bytes bytes, flush_us after its first request, or when every active submitter
     * is waiting in it. */
    int max_batch_ops;
    size_t max_batch_bytes;
    int flush_us;
    gp_wait_mode wait;     /* how a submitter waits for its batch */
    int spin_us;           /* adaptive: spin this long, then block */
    /* Hybrid policy (batching/policy/hybrid.c). GP_KNOB_CALIBRATE / a negative share: measured at first
     * use in each process. */
    size_t min_gpu_bytes;  /* messages whose first data request is shorter stay on the CPU */
    size_t lone_gpu_bytes; /* the same for a lone synchronous caller (it waits a whole round trip) */
    double gpu_share;      /* fraction of eligible messages sent to the GPU, 0..1 */
    int hybrid_gpu_host;   /* the host executor plays the GPU's part in the hybrid policy, so
                            * machines without a GPU exercise it */
    /* Where the hybrid policy's measurements persist between processes (batching/policy/
     * calib_cache.c): an absolute directory, "off", or "" for $XDG_CACHE_HOME/gpuprov (else
     * $HOME/.cache/gpuprov). */
    char calib_cache[256];
    /* The machine's measurements (gpuprov-calibrate --system): an absolute directory, "off", or ""
     * for GPUPROV_SYSTEM_CALIB_DIR. Read where the user's cache has none. */
    char calib_system[256];
    int priors;            /* route an unmeasured host by its class's numbers (policy/priors.c) */
    int calib_refresh;     /* measure whatever is persisted or known, and persist the result */
    int machine_share;     /* processes of this user that may open one GPU at once, sharing what is
                            * in flight there (policy/share.c); 0: each process decides alone */
    gp_test_hooks test;
    gp_experiments exp;
} gp_knobs;

/* Who may set a knob, and why it exists. user and tuning knobs come from the provider's config
 * section or their variable; test and experiment knobs from their variable only, and only in the
 * builds that have them. */
typedef enum gp_setting_class {
    GP_SETTING_USER = 0,   /* what a deployment chooses */
    GP_SETTING_TUNING,     /* performance trade-offs with measured defaults */
    GP_SETTING_TEST,       /* test hooks (GP_TEST_HOOKS) */
    GP_SETTING_EXPERIMENT  /* A/B switches of settled experiments (GP_EXPERIMENT_SWITCHES) */
} gp_setting_class;

/* How a knob's text is read. */
typedef enum gp_setting_syntax {
    GP_SYNTAX_NUMBER = 0,  /* a decimal integer in [min, max], or one of the words */
    GP_SYNTAX_BYTES,       /* a byte count with an optional k or m suffix (KiB, MiB), at most max */
    GP_SYNTAX_FRACTION,    /* a decimal fraction from 0 to 1 */
    GP_SYNTAX_WORD,        /* one of the words, case-insensitive */
    GP_SYNTAX_DIR,         /* an absolute directory path shorter than the field, or one of the words
                            * (stored as given) */
    GP_SYNTAX_NAME,        /* a file's name (letters, digits, '.', '_' and '-') shorter than the
                            * field (stored as given) */
    GP_SYNTAX_TEXT         /* printable ASCII text, spaces too, shorter than the field (stored as given) */
} gp_setting_syntax;

/* Is the knob's field text (a char array, its default the empty string)? */
#define gp_setting_is_text(s) \
    ((s)->syntax == GP_SYNTAX_DIR || (s)->syntax == GP_SYNTAX_NAME || (s)->syntax == GP_SYNTAX_TEXT)

typedef struct gp_setting_word {
    const char *word;
    long long value;
} gp_setting_word;

typedef struct gp_setting {
    const char *key;            /* the config section's key; NULL: set by the variable only */
    const char *env;            /* the environment variable, which wins over the config */
    gp_setting_class cls;
    gp_setting_syntax syntax;
    size_t offset, size;        /* the gp_knobs field: an int, a size_t, (fraction) a double or
                                 * (dir, name) a char array */
    long long dflt;             /* the default (a fraction's: dflt_fraction) */
    double dflt_fraction;
    long long min, max;         /* numbers, byte counts */
    long long floor;            /* a parsed number below it becomes it (0 = no floor) */
    const gp_setting_word *words;   /* NULL-ended; NUMBER: alternatives to a number */
    const char *expected;       /* what the error line says a value must be */
    const char *meaning;        /* one line for the knob table (docs) */
} gp_setting;

/* The registry of this build, in declaration order; *n: its length. */
const gp_setting *gp_settings_table(size_t *n);
/* The registry's entry for a variable or config key, NULL when this build has none. */
const gp_setting *gp_settings_find(const char *name);

/* Where the config section's values come from: the value of `key`, or NULL when it is unset. */
typedef const char *gp_settings_config_fn(void *arg, const char *key);

/* Store s's value from text v into k; 0 (the field untouched) when v cannot be parsed. Silent. */
int gp_settings_parse(gp_knobs *k, const gp_setting *s, const char *v);

/* Every knob of this build to its default. */
void gp_settings_defaults(gp_knobs *k);
/*
 * Every knob of this build from its variable when that is set and not empty, else (user and
 * tuning knobs) from config(arg, key) when config is not NULL and returns a value, else its
 * default. A value that cannot be parsed is reported on stderr and the default is used.
 */
void gp_settings_load(gp_knobs *k, gp_settings_config_fn *config, void *arg);
/* The knob whose gp_knobs field is at `offset` (offsetof), from its variable again: a hook read
 * anew at each use (batching/cuda_fault.c). 1 when the variable is set and parses; else 0, the
 * field untouched. Silent: gp_settings_load reported a bad value once already. */
int gp_settings_reread(gp_knobs *k, size_t offset);

/* The environment gpuprov reads besides its knobs' variables, each read here only. */
/* CUDA_VISIBLE_DEVICES, the CUDA runtime's choice of GPUs: its value, NULL when unset. */
const char *gp_settings_cuda_visible(void);
/* Does CUDA_VISIBLE_DEVICES hide every GPU from this process (as the CUDA runtime reads it)? */
int gp_settings_cuda_hides_all(void);
/* gpuprov's per-user cache directory: $XDG_CACHE_HOME/gpuprov, else $HOME/.cache/gpuprov (absolute
 * values only, read with secure_getenv); 0 when neither is usable or it does not fit out[n]. */
int gp_settings_user_cache_dir(char *out, size_t n);

#endif
