/* SPDX-License-Identifier: Apache-2.0 */
/* The hybrid policy: each message to the GPU or the cpu executor, by thresholds measured per process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/async.h>
#include <openssl/crypto.h>

#include "batching/base/base.h"
#include "batching/policy/internal.h"

/*
 * Why a policy: the GPU path costs a round trip (docs/performance.md, "The costs that decide") and two memcpys per
 * message, and one core running the default provider's code finishes a small message sooner than
 * that round trip (bench/RESULTS.md, "Lone-call latency through EVP"). So gpuprov must keep small
 * messages and lone synchronous callers on the CPU and send the GPU only work it can win: large
 * messages, and many messages in flight at once (threads, async jobs). The rules, in order, for a
 * message whose first data request is `len` bytes:
 *   1. len < min_gpu_bytes                                  -> cpu (even batched, the GPU loses)
 *   2. a lone synchronous caller: len < lone_gpu_bytes      -> cpu (it would wait a round trip),
 *      else gpu: its messages come one after another, so they go where one alone runs faster
 *      (unless the gpu_share knob asks for a split: then rules 3 and 4 as for any caller).
 *      Messages that start together (a pipeline call) run as one batch on one side, the caller
 *      waiting for all of it, so nothing of theirs runs on the CPU and the GPU at once: the batch
 *      goes where it is expected to finish sooner, the GPU's time being the round trip and then
 *      its bytes at the rate of a batch of 16 KiB messages (batch_gbps: copies, transfers and
 *      kernel of many short messages, which go across with none of a large message's overlap)
 *      against its bytes at the CPU's rate. Where batch_gbps is not known (the knob
 *      lone_gpu_bytes is set, or numbers written before it was measured), or each message alone
 *      would go (each >= lone_gpu_bytes), the batch's bytes count as one message's.
 *   3m. the machine's other processes hold the GPU full (share.c: as many batches in flight there
 *      as it runs at once) -> cpu, for every caller, lone or in a job: the numbers above were
 *      measured with the GPU to this process alone, and beyond what it runs at once more work only
 *      waits (or, without CUDA MPS, time-slices the GPU between the processes' contexts)
 *   3. the GPU is saturated (a batch in flight and a full one waiting) -> cpu (spare CPU capacity)
 *   4. otherwise gpu, for a gpu_share fraction of such messages (the rest: cpu), so the CPU keeps
 *      its part when both are busy.
 * Rules 3 and 4 do not apply inside an async job: a message there that runs on the CPU never
 * pauses its job, so the thread that drives every other job (openssl speed's, a server's) computes
 * it while none of the others can submit or collect, for as long as the message lasts (a stream:
 * all of it); they all go to the GPU.
 * A message is routed once (at its first data request: held AAD waits for it) and stays where it
 * started, because the cpu executor keeps its own default-provider state; a stream cipher's message
 * on the cpu lane (CTR, ChaCha20: no MAC state) may leave it for the engine at an update boundary
 * (provider/stream_common.c), starting a new message at its counter.
 *
 * The thresholds come from what is known before measuring: an earlier process's measurement on
 * the same machine (calib_cache.c), else the machine's (gpuprov-calibrate --system), else the
 * numbers measured on hosts of this one's class (priors.c); else from a self-measurement the
 * first time an algorithm is routed in a process (a few hundred milliseconds on a GPU host); unless
 * the knobs min_gpu_bytes, lone_gpu_bytes and gpu_share set them.
 * Per-message GPU cost is modelled as a + b*len with 64 messages in flight (two batch sizes
 * measured), the CPU's as len / cpu_rate; a lone caller's message costs what one message alone
 * measured at a few lengths costs on each side (the round trip, then 1, 4 and 8 MiB on a GPU;
 * straight lines between the points, the last ones extended: the copy crew and the DMA overlap
 * better on longer messages, and the CPU slows once a message outgrows its caches). Large
 * messages take another path (the copy crew, pieces, batches overlapped in several slots), so
 * above the 16 KiB point the cost is a second line, through that point and large messages
 * measured the way they run: batches of them in flight at once from four threads, one for each
 * of the executor's slots.
 */

void gp_policy_init(gp_policy *p, gp_engine *e, const gp_knobs *knobs, const gp_policy_ops *ops)
{
    memset(p, 0, sizeof(*p));
    p->e = e;
    p->ops = ops;
    p->knobs = knobs;
    pthread_mutex_init(&p->hy.lock, NULL);
    p->hy.fork_gen = gp_fork_generation();
    pthread_mutex_init(&p->warm.lock, NULL);
    p->share.slot = -1;
}

void gp_policy_cleanup(gp_policy *p)
{
    gp_share_release(p);
    pthread_mutex_destroy(&p->hy.lock);
    pthread_mutex_destroy(&p->warm.lock);
}

/* Calibration messages: a public all-zero key and IV (nothing secret is measured). */
typedef struct calib {
    gp_key *key;
    gp_msg **msgs;
    gp_request *reqs;
    uint8_t *buf;
    size_t nmsgs;
} calib;

static void calib_free(gp_policy *p, calib *c)
{
    for (size_t i = 0; c->msgs != NULL && i < c->nmsgs; i++)
        if (c->msgs[i] != NULL)
            p->ops->msg_free(c->msgs[i]);
    free(c->msgs);
    free(c->reqs);
    free(c->buf);
    if (c->key != NULL)
        p->ops->key_free(c->key);
}

/* `nmsgs` messages of alg (a key of keylen bytes) started on x, with `bytes` of buffer each. */
static int calib_new(gp_policy *p, calib *c, const gp_executor *x, uint32_t alg, size_t keylen, size_t nmsgs,
                     size_t bytes)
{
    static const uint8_t zero[32];
    const size_t ivlen = alg == GP_ALG_AES_GCM || alg == GP_ALG_CHACHA20_POLY1305 ? 12 : 16;

    memset(c, 0, sizeof(*c));
    c->nmsgs = nmsgs;
    c->key = p->ops->key_new(p->e, alg, zero, keylen);
    c->msgs = calloc(nmsgs, sizeof(*c->msgs));
    c->reqs = calloc(nmsgs, sizeof(*c->reqs));
    c->buf = calloc(nmsgs, bytes);
    if (c->key == NULL || c->msgs == NULL || c->reqs == NULL || c->buf == NULL)
        return 0;
    for (size_t i = 0; i < nmsgs; i++)
        if ((c->msgs[i] = p->ops->msg_start_on(p->e, x, c->key, ivlen)) == NULL)
            return 0;
    return 1;
}

/* Best of `reps` runs of every message encrypting `len` bytes (in place) as one batch, in ns. */
static double calib_time(gp_policy *p, const gp_executor *x, calib *c, size_t len, int reps)
{
    double best = 0;

    for (int r = 0; r < reps; r++) {
        uint64_t t0;
        double t;

        for (size_t i = 0; i < c->nmsgs; i++)
            c->reqs[i] = (gp_request){ .msg = c->msgs[i], .kind = GP_REQ_CRYPT, .in = c->buf + i * len,
                                       .out = c->buf + i * len, .len = len, .status = GP_REQ_FAILED };
        t0 = gp_now_ns();
        if (!p->ops->run(p->e, x, c->reqs, c->nmsgs))
            return -1;
        t = (double)(gp_now_ns() - t0);
        for (size_t i = 0; i < c->nmsgs; i++)
            if (c->reqs[i].status != GP_REQ_OK)
                return -1;
        if (r == 0 || t < best)
            best = t;
    }
    return best;
}

/* Large messages as they run when several callers have them in flight: `threads` threads (this
 * one among them) each run `reps` batches of the set they are given at once. The best of two
 * trials (the first grows the GPU's staging memory) of the wall time, per message, in ns. */
typedef struct calib_lane {
    gp_policy *p;
    const gp_executor *x;
    calib *c;
    size_t len;
    int reps, ok;
} calib_lane;

static void *calib_lane_main(void *v)
{
    calib_lane *l = v;

    l->ok = calib_time(l->p, l->x, l->c, l->len, l->reps) > 0;
    return NULL;
}

#define GP_CALIB_LANES 4   /* the cuda executor's slots on one GPU by default (settings.c: streams) */

static double calib_time_overlapped(gp_policy *p, const gp_executor *x, calib *sets, size_t len, int reps)
{
    double best = -1;

    for (int trial = 0; trial < 2; trial++) {
        calib_lane lanes[GP_CALIB_LANES];
        pthread_t th[GP_CALIB_LANES];
        int started[GP_CALIB_LANES] = { 0 }, ok = 1;
        uint64_t t0 = gp_now_ns();
        double t;

        for (int i = 0; i < GP_CALIB_LANES; i++)
            lanes[i] = (calib_lane){ p, x, &sets[i], len, reps, 0 };
        for (int i = 1; i < GP_CALIB_LANES; i++)
            started[i] = pthread_create(&th[i], NULL, calib_lane_main, &lanes[i]) == 0;
        calib_lane_main(&lanes[0]);
        for (int i = 1; i < GP_CALIB_LANES; i++)
            if (started[i])
                pthread_join(th[i], NULL);
            else
                calib_lane_main(&lanes[i]);   /* no thread: in turn (a slower figure, never a wrong one) */
        t = (double)(gp_now_ns() - t0);
        for (int i = 0; i < GP_CALIB_LANES; i++)
            ok &= lanes[i].ok;
        if (!ok)
            return -1;
        t /= (double)(GP_CALIB_LANES * reps) * (double)sets[0].nmsgs;
        if (best < 0 || t < best)
            best = t;
    }
    return best;
}

static size_t bytes_or_never(double v)
{
    return v < 0 || v > (double)(1u << 30) ? GP_KNOB_CALIBRATE : (size_t)v + 1;
}

/* The cost line a + b*len through (x0, t0) and (x1, t1), neither term below 0 (noise). */
static void cost_line(size_t x0, double t0, size_t x1, double t1, double *a, double *b)
{
    *b = (t1 - t0) / (double)(x1 - x0);
    if (*b < 0)
        *b = 0;
    *a = t0 - *b * (double)x0;
    if (*a < 0)
        *a = 0;
}

/* The smallest length from which a + b*len per message costs less than the CPU's cpu_nspb*len,
 * and not below `from`; GP_KNOB_CALIBRATE ("never") if none. */
static size_t crossing(double a, double b, double cpu_nspb, size_t from)
{
    size_t at;

    if (b >= cpu_nspb)
        return GP_KNOB_CALIBRATE;
    at = bytes_or_never(a / (cpu_nspb - b));
    return at != GP_KNOB_CALIBRATE && at < from ? from : at;
}

size_t gp_hybrid_lone_crossing(const size_t *len, const double *t_gpu, const double *t_cpu, int n, double b_floor)
{
    int last = -1;   /* the last point where the CPU is not slower */

    for (int i = 0; i < n; i++)
        if (t_gpu[i] >= t_cpu[i])
            last = i;
    if (last < 0)   /* the GPU is faster at every point, the round trip's too: every length */
        return 0;
    if (last == n - 1) {   /* beyond the last point, on both last lines (the GPU's no cheaper than b_floor a byte) */
        const double span = (double)(len[n - 1] - len[n - 2]);
        double b_gpu = (t_gpu[n - 1] - t_gpu[n - 2]) / span;
        const double b_cpu = (t_cpu[n - 1] - t_cpu[n - 2]) / span;

        if (b_gpu < b_floor)
            b_gpu = b_floor;
        if (b_gpu >= b_cpu)
            return GP_KNOB_CALIBRATE;
        return bytes_or_never((double)len[n - 1] + (t_gpu[n - 1] - t_cpu[n - 1]) / (b_cpu - b_gpu));
    }
    {   /* between point `last` (GPU no faster) and the next (GPU faster): where the lines meet */
        const double d0 = t_gpu[last] - t_cpu[last], d1 = t_gpu[last + 1] - t_cpu[last + 1];

        return bytes_or_never((double)len[last] + (double)(len[last + 1] - len[last]) * d0 / (d0 - d1));
    }
}

int gp_hybrid_lone_batch_gpu(const gp_hybrid_alg *h, size_t each, size_t total)
{
    double t_gpu, t_cpu;

    if (each >= total || each >= h->lone_gpu_bytes || !(h->batch_gbps > 0) || !(h->cpu_gbps > 0))
        return total >= h->lone_gpu_bytes;
    t_gpu = h->gpu_rt_us * 1000.0 + (double)total / h->batch_gbps;   /* ns: GB/s is bytes a ns */
    t_cpu = (double)total / h->cpu_gbps;
    return t_gpu < t_cpu;
}

/* Measure one algorithm (with the key length of the message that asks). 0 if a run failed. */
static int calibrate(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t keylen, gp_hybrid_alg *h)
{
    const gp_executor *cpu_x = p->ops->cpu;
    /* The host executor standing in for the GPU (tests) is slow: measure it on less. */
    const int real_gpu = gpu != p->ops->host;
    const size_t nmsgs = real_gpu ? 64 : 8, big = real_gpu ? 16384 : 4096, small = 1024;
    const size_t lone_big = nmsgs * big;   /* one large message alone: 1 MiB on a GPU */
    const size_t nlarge = real_gpu ? 8 : 2, large = real_gpu ? (size_t)1 << 20 : 65536;
    /* A lone caller's message at the round trip's length and 1, 4 and 8 times lone_big, on both
     * sides (the CPU's rate falls too once a message outgrows the caches). */
    const size_t lone_len[GP_LONE_POINTS] = { 16, lone_big, 4 * lone_big, 8 * lone_big };
    double t_lone[GP_LONE_POINTS], t_lone_cpu[GP_LONE_POINTS];
    calib cpu = { 0 }, cpu_lone = { 0 }, g = { 0 }, lone = { 0 }, lg[GP_CALIB_LANES] = { { 0 } };
    double t_cpu, t_small, t_big, t_large, a, b, a_large, b_large, cpu_nspb;
    size_t min_small, min_large;
    int ok = 0, sets = calib_new(p, &cpu, cpu_x, alg, keylen, 1, 65536)
                       && calib_new(p, &g, gpu, alg, keylen, nmsgs, big)
                       && calib_new(p, &lone, gpu, alg, keylen, 1, lone_len[GP_LONE_POINTS - 1])
                       && calib_new(p, &cpu_lone, cpu_x, alg, keylen, 1, lone_len[GP_LONE_POINTS - 1]);

    for (int i = 0; i < GP_CALIB_LANES; i++)
        sets = sets && calib_new(p, &lg[i], gpu, alg, keylen, nlarge, large);
    if (sets) {
        t_cpu = calib_time(p, cpu_x, &cpu, 65536, 3);
        /* One message alone: the lone caller's round trip (the first run warms up), then longer. */
        t_lone[0] = calib_time(p, gpu, &lone, lone_len[0], 4);
        t_lone_cpu[0] = t_cpu * (double)lone_len[0] / 65536.0;
        for (int i = 1; i < GP_LONE_POINTS; i++) {
            t_lone[i] = calib_time(p, gpu, &lone, lone_len[i], 2);
            t_lone_cpu[i] = calib_time(p, cpu_x, &cpu_lone, lone_len[i], 2);
        }
        t_small = calib_time(p, gpu, &g, small, 2) / (double)nmsgs;
        t_big = calib_time(p, gpu, &g, big, 2) / (double)nmsgs;
        t_large = calib_time_overlapped(p, gpu, lg, large, 2);
        int lone_ok = 1;

        for (int i = 0; i < GP_LONE_POINTS; i++)
            lone_ok &= t_lone[i] > 0 && t_lone_cpu[i] > 0;
        if (t_cpu > 0 && lone_ok && t_small > 0 && t_big > 0 && t_large > 0) {
            cpu_nspb = t_cpu / 65536.0;
            cost_line(small, t_small, big, t_big, &a, &b);
            /* The second line: through the 16 KiB point and the large messages' point. */
            cost_line(big, t_big, large, t_large, &a_large, &b_large);
            h->cpu_gbps = 1.0 / cpu_nspb;                /* bytes per ns = GB/s */
            h->gpu_rt_us = t_lone[0] / 1000.0;
            /* Batched: a + b*len < cpu_nspb*len below the 16 KiB point, the second line above it.
             * Lone: the measured points' lines on both sides; past the last point a lone byte
             * costs the GPU no less than a byte of several batches in flight. */
            min_small = crossing(a, b, cpu_nspb, 0);
            min_large = crossing(a_large, b_large, cpu_nspb, big);
            h->min_gpu_bytes = min_small != GP_KNOB_CALIBRATE && min_small <= big ? min_small : min_large;
            h->lone_gpu_bytes = gp_hybrid_lone_crossing(lone_len, t_lone, t_lone_cpu, GP_LONE_POINTS, b_large);
            /* The GPU's rate at the sizes it takes; both busy: split in proportion to the rates. */
            h->gpu_gbps = h->min_gpu_bytes != GP_KNOB_CALIBRATE && h->min_gpu_bytes <= big
                              ? (double)big / t_big : (double)large / t_large;
            h->gpu_share = h->gpu_gbps / (h->gpu_gbps + h->cpu_gbps);
            /* A lone caller's batch of messages (rule 2): the batch of `big` ones past its round
             * trip (the lone message's); not known where noise puts the round trip above it. */
            {
                const double past = t_big * (double)nmsgs - t_lone[0];

                h->batch_gbps = past > 0 ? (double)(nmsgs * big) / past : 0;
            }
            ok = 1;
        }
    }
    calib_free(p, &cpu);
    calib_free(p, &cpu_lone);
    calib_free(p, &g);
    calib_free(p, &lone);
    for (int i = 0; i < GP_CALIB_LANES; i++)
        calib_free(p, &lg[i]);
    return ok;
}

typedef struct calib_call {
    gp_policy *p;
    const gp_executor *gpu;
    uint32_t alg;
    size_t keylen;
    gp_hybrid_alg *h;
} calib_call;

static int calibrate_main(void *v)
{
    calib_call *c = v;

    return calibrate(c->p, c->gpu, c->alg, c->keylen, c->h);
}

/* The cache files' reads and write keep paths, the key and the file's text on the stack (~16 KiB
 * with stdio's): inside an async job they run on a thread of their own (gp_call_off_job_stack). */
typedef struct cache_call {
    gp_policy *p;
    const gp_executor *gpu;
    gp_calib_numbers *numbers;
} cache_call;

static int cache_read_main(void *v)
{
    cache_call *c = v;

    return gp_calib_cache_read(c->p, c->gpu, c->numbers);
}

static int system_read_main(void *v)
{
    cache_call *c = v;

    return gp_calib_cache_read_from(c->p, c->gpu, GP_CALIB_SYSTEM, c->numbers);
}

static int cache_write_main(void *v)
{
    cache_call *c = v;

    return gp_calib_cache_write(c->p, c->gpu, c->p->hy.cache);
}

/* Read what is known before measuring for `gpu`, once (under hy->lock): per algorithm the
 * user's cache, else the machine's, else this host's class's priors. */
static void cache_load(gp_policy *p, const gp_executor *gpu)
{
    gp_hybrid *hy = &p->hy;
    gp_calib_numbers sys[5], prior[5];
    cache_call c = { p, gpu, hy->cache }, cs = { p, gpu, sys };

    if (hy->cache_gpu == gpu)
        return;
    hy->cache_gpu = gpu;
    if (!gp_call_off_job_stack(cache_read_main, &c))
        memset(hy->cache, 0, sizeof(hy->cache));
    if (!gp_call_off_job_stack(system_read_main, &cs))
        memset(sys, 0, sizeof(sys));
    if (!gp_prior_numbers(p, gpu, prior, &hy->prior_name))
        memset(prior, 0, sizeof(prior));
    for (int a = 0; a < 5; a++) {
        hy->known_source[a] = hy->cache[a].have ? GP_SRC_USER_CACHE
                              : sys[a].have     ? GP_SRC_SYSTEM_CACHE
                              : prior[a].have   ? GP_SRC_PRIOR : GP_SRC_NONE;
        hy->known[a] = hy->cache[a].have ? hy->cache[a] : sys[a].have ? sys[a] : prior[a];
    }
}

/* alg's numbers known before measuring into h, where there are some; their source, else
 * GP_SRC_NONE (under hy->lock). */
static int from_known(gp_policy *p, const gp_executor *gpu, uint32_t alg, gp_hybrid_alg *h)
{
    const gp_calib_numbers *c;

    cache_load(p, gpu);
    c = &p->hy.known[alg];
    if (!c->have)
        return GP_SRC_NONE;
    h->cpu_gbps = c->cpu_gbps;
    h->gpu_gbps = c->gpu_gbps;
    h->gpu_rt_us = c->gpu_rt_us;
    h->min_gpu_bytes = c->min_gpu_bytes;
    h->lone_gpu_bytes = c->lone_gpu_bytes;
    h->gpu_share = c->gpu_share;
    h->batch_gbps = c->batch_gbps;
    return p->hy.known_source[alg];
}

/* Keep h's fresh measurement for the next process (under hy->lock; never fatal). */
static void to_cache(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t keylen, const gp_hybrid_alg *h)
{
    gp_hybrid *hy = &p->hy;

    cache_load(p, gpu);
    hy->cache[alg] = (gp_calib_numbers){
        .have = 1, .keylen = keylen, .at = (long long)time(NULL), .cpu_gbps = h->cpu_gbps,
        .gpu_gbps = h->gpu_gbps, .gpu_rt_us = h->gpu_rt_us, .min_gpu_bytes = h->min_gpu_bytes,
        .lone_gpu_bytes = h->lone_gpu_bytes, .gpu_share = h->gpu_share, .batch_gbps = h->batch_gbps,
    };
    {
        cache_call cc = { p, gpu, NULL };

        (void)gp_call_off_job_stack(cache_write_main, &cc);
    }
}

/* The numbers for `key_alg` (measured with a key of keylen bytes), measuring them if needed; NULL
 * while another thread measures. */
static gp_hybrid_alg *numbers(gp_policy *p, const gp_executor *gpu, uint32_t key_alg, size_t keylen)
{
    gp_hybrid *hy = &p->hy;
    const uint32_t alg = key_alg < 5 ? key_alg : 0;
    gp_hybrid_alg *h = &hy->alg[alg];
    const gp_knobs *k = p->knobs;
    unsigned gen = gp_fork_generation();

    if (atomic_load_explicit(&h->ready, memory_order_acquire)
        && atomic_load_explicit(&hy->fork_gen, memory_order_relaxed) == gen)
        return h;
    if (pthread_mutex_trylock(&hy->lock) != 0)
        return NULL;
    if (hy->fork_gen != gen) {   /* a forked child measures for itself */
        for (int i = 0; i < 5; i++)
            atomic_store(&hy->alg[i].ready, 0);
        hy->fork_gen = gen;
    }
    if (!h->ready) {
        int all_set = k->min_gpu_bytes != GP_KNOB_CALIBRATE && k->lone_gpu_bytes != GP_KNOB_CALIBRATE
                      && k->gpu_share >= 0;
        calib_call cc = { p, gpu, key_alg, keylen, h };

        h->cpu_gbps = h->gpu_gbps = h->gpu_rt_us = h->batch_gbps = 0;
        hy->source[alg] = GP_SRC_NONE;
        if (all_set) {
            /* the knobs below decide */
        } else if (!k->calib_refresh && (hy->source[alg] = from_known(p, gpu, alg, h)) != GP_SRC_NONE) {
            /* known before measuring: the user's cache, the machine's, or the priors */
        } else if (gp_call_off_job_stack(calibrate_main, &cc)) {
            hy->source[alg] = GP_SRC_MEASURED;
            to_cache(p, gpu, alg, keylen, h);
        } else {
            /* Could not measure: keep everything on the CPU unless the knobs say otherwise. */
            h->min_gpu_bytes = h->lone_gpu_bytes = GP_KNOB_CALIBRATE;
            h->gpu_share = 0;
        }
        if (k->min_gpu_bytes != GP_KNOB_CALIBRATE)
            h->min_gpu_bytes = k->min_gpu_bytes;
        if (k->lone_gpu_bytes != GP_KNOB_CALIBRATE) {
            h->lone_gpu_bytes = k->lone_gpu_bytes;
            h->batch_gbps = 0;   /* the knob decides for batches too (rule 2) */
        }
        if (k->gpu_share >= 0)
            h->gpu_share = k->gpu_share;
        atomic_store_explicit(&h->ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&hy->lock);
    return h;
}

/* Rules 1 and 2 for a message of `len` bytes with numbers h. */
static int rules_send_to_gpu(const gp_hybrid_alg *h, size_t len, int lone)
{
    return h->min_gpu_bytes != GP_KNOB_CALIBRATE && len >= h->min_gpu_bytes && h->gpu_share > 0.0
           && !(lone && len < h->lone_gpu_bytes);
}

/* A caller that would wait a whole round trip alone (rule 2). */
static int lone_now(gp_policy *p)
{
    return ASYNC_get_current_job() == NULL && p->ops->queue_idle(p->e);
}

int gp_hybrid_gpu_eligible(gp_policy *p, uint32_t alg, size_t len)
{
    const gp_hybrid_alg *h = &p->hy.alg[alg < 5 ? alg : 0];

    if (!atomic_load_explicit(&h->ready, memory_order_acquire)
        || atomic_load_explicit(&p->hy.fork_gen, memory_order_relaxed) != gp_fork_generation())
        return 0;
    /* Rule 3m too: a message the machine's full GPU would route to the cpu stays where it runs. */
    return rules_send_to_gpu(h, len, lone_now(p)) && !gp_share_full(p);
}

int gp_hybrid_prior(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t len, int lone)
{
    gp_hybrid *hy = &p->hy;
    const gp_knobs *k = p->knobs;
    gp_hybrid_alg cached = { 0 };
    int have, knobs_set = k->min_gpu_bytes != GP_KNOB_CALIBRATE;

    if (gpu == NULL || alg >= 5)
        return 0;
    pthread_mutex_lock(&hy->lock);
    have = !k->calib_refresh && from_known(p, gpu, alg, &cached) != GP_SRC_NONE;
    pthread_mutex_unlock(&hy->lock);
    if (k->min_gpu_bytes != GP_KNOB_CALIBRATE)
        cached.min_gpu_bytes = k->min_gpu_bytes;
    if (k->lone_gpu_bytes != GP_KNOB_CALIBRATE)
        cached.lone_gpu_bytes = k->lone_gpu_bytes;
    if (k->gpu_share >= 0)
        cached.gpu_share = k->gpu_share;
    if (have || knobs_set)
        return rules_send_to_gpu(&cached, len, lone);
    /*
     * No numbers for this machine yet, nor for its class. Large messages from callers with work in
     * flight beside them (async jobs, other threads) are where the GPU wins for every algorithm
     * (bench/RESULTS.md, "Large messages through openssl speed"); a lone synchronous caller waits
     * for the whole round trip, which the measurement must show to be worth it before it is paid.
     */
    return !lone && len >= GP_DEMAND_BYTES;
}

int gp_hybrid_known(gp_policy *p, const gp_executor *gpu, uint32_t alg)
{
    gp_hybrid_alg known = { 0 };
    int have;

    if (gpu == NULL || alg >= 5)
        return 0;
    pthread_mutex_lock(&p->hy.lock);
    have = !p->knobs->calib_refresh && from_known(p, gpu, alg, &known) != GP_SRC_NONE;
    pthread_mutex_unlock(&p->hy.lock);
    return have || p->knobs->min_gpu_bytes != GP_KNOB_CALIBRATE;
}

int gp_hybrid_cpu_only(gp_policy *p, uint32_t alg)
{
    const gp_hybrid_alg *h = &p->hy.alg[alg < 5 ? alg : 0];

    return atomic_load_explicit(&h->ready, memory_order_acquire)
           && atomic_load_explicit(&p->hy.fork_gen, memory_order_relaxed) == gp_fork_generation()
           && (h->min_gpu_bytes == GP_KNOB_CALIBRATE || h->gpu_share <= 0.0);
}

size_t gp_hybrid_cpu_below(gp_policy *p, uint32_t alg)
{
    const gp_hybrid_alg *h = &p->hy.alg[alg < 5 ? alg : 0];

    if (!atomic_load_explicit(&h->ready, memory_order_acquire)
        || atomic_load_explicit(&p->hy.fork_gen, memory_order_relaxed) != gp_fork_generation())
        return 0;
    return h->min_gpu_bytes;
}

const gp_executor *gp_hybrid_route(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t keylen, size_t len)
{
    return gp_hybrid_route_batch(p, gpu, alg, keylen, len, len);
}

/* Rule 1 weighs each message (`each`: what the batched measurement models per message), rule 2
 * the batch as a whole (`total`): a lone caller waits for all of it, on one side
 * (gp_hybrid_lone_batch_gpu). */
const gp_executor *gp_hybrid_route_batch(gp_policy *p, const gp_executor *gpu, uint32_t alg, size_t keylen,
                                         size_t each, size_t total)
{
    gp_hybrid_alg *h = numbers(p, gpu, alg, keylen);
    const gp_executor *cpu = p->ops->cpu;
    int in_job, lone;

    if (h == NULL || each < h->min_gpu_bytes)                                    /* rule 1 */
        return cpu;
    in_job = ASYNC_get_current_job() != NULL;
    lone = !in_job && p->ops->queue_idle(p->e);
    if (lone && !gp_hybrid_lone_batch_gpu(h, each, total))                       /* rule 2 */
        return cpu;
    if (gp_share_full(p))                                                         /* rule 3m */
        return cpu;
    if (in_job || (lone && p->knobs->gpu_share < 0))                              /* rules 3, 4: not in a job, */
        return gpu;                                                               /* nor for a lone caller */
    if (p->ops->queue_full(p->e))                                                 /* rule 3 */
        return cpu;
    if (h->gpu_share < 1.0) {                                                     /* rule 4 */
        /* Message n goes to the GPU when round((n+1)*share) steps past round(n*share): the split
         * starts on the side that takes more than half, which matters where few messages come. */
        uint64_t n = atomic_fetch_add_explicit(&h->share_n, 1, memory_order_relaxed);

        if ((uint64_t)((double)(n + 1) * h->gpu_share + 0.5) == (uint64_t)((double)n * h->gpu_share + 0.5))
            return cpu;
    }
    return gpu;
}

void gp_hybrid_warm(gp_policy *p, const gp_executor *gpu)
{
    static const struct { uint32_t alg; size_t keylen; } algs[] = {
        { GP_ALG_AES_CTR, 16 }, { GP_ALG_AES_GCM, 32 }, { GP_ALG_CHACHA20, 32 },
        { GP_ALG_CHACHA20_POLY1305, 32 },
    };

    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]) && !gp_warm_stopping(p); i++)
        (void)numbers(p, gpu, algs[i].alg, algs[i].keylen);
}

static const char *const alg_names[5] = { "?", "aes-ctr", "aes-gcm", "chacha20", "chacha20-poly1305" };

static void print_size(char *buf, size_t n, size_t v)
{
    if (v == GP_KNOB_CALIBRATE)
        snprintf(buf, n, "never");
    else
        snprintf(buf, n, "%zu B", v);
}

void gp_hybrid_print(gp_policy *p)
{
    for (int i = 1; i < 5; i++) {
        const gp_hybrid_alg *h = &p->hy.alg[i];
        char mn[32], lone[32];

        if (!h->ready)
            continue;
        print_size(mn, sizeof(mn), h->min_gpu_bytes);
        print_size(lone, sizeof(lone), h->lone_gpu_bytes);
        if (h->cpu_gbps > 0) {
            char from[160], batch[48];

            switch (p->hy.source[i]) {
            case GP_SRC_USER_CACHE: snprintf(from, sizeof(from), "from the cache:"); break;
            case GP_SRC_SYSTEM_CACHE: snprintf(from, sizeof(from), "from the machine's calibration:"); break;
            case GP_SRC_PRIOR: snprintf(from, sizeof(from), "from the priors of %s:", p->hy.prior_name); break;
            default: snprintf(from, sizeof(from), "measured"); break;
            }
            if (h->batch_gbps > 0)
                snprintf(batch, sizeof(batch), "%.2f GB/s", h->batch_gbps);
            else
                snprintf(batch, sizeof(batch), "not known");
            /* gpu: the rate gpu_share weighs, at the sizes the GPU takes (a batch of 16 KiB
             * messages where min_gpu_bytes is below that, else large messages several batches in
             * flight); one batch: a lone caller's batch of 16 KiB messages past its round trip. */
            gp_log_line("gpuprov hybrid: %s %s cpu %.2f GB/s, gpu %.2f GB/s at the sizes it takes, one batch"
                        " of 16 KiB messages %s past a round trip of %.1f us -> min_gpu_bytes %s, lone_gpu_bytes %s,"
                        " gpu_share %.2f\n", alg_names[i], from, h->cpu_gbps, h->gpu_gbps, batch, h->gpu_rt_us, mn,
                        lone, h->gpu_share);
        } else {
            gp_log_line("gpuprov hybrid: %s from knobs: min_gpu_bytes %s, lone_gpu_bytes %s,"
                        " gpu_share %.2f\n", alg_names[i], mn, lone, h->gpu_share);
        }
    }
    gp_share_print(p);
}
