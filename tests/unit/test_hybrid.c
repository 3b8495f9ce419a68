/* SPDX-License-Identifier: Apache-2.0 */
/* Hybrid policy tests: which executor each message gets, held AAD, calibration; the host executor plays the GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/async.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include "gptest.h"
#include "batching/engine.h"
#include "batching/core/core.h"
#include "batching/exec_cpu.h"
#include "batching/exec_host.h"
#include "batching/kstate.h"
#include "batching/policy/internal.h"
#include "provider/cipher_ctx.h"

typedef struct {
    OSSL_LIB_CTX *lib;
    OSSL_PROVIDER *dflt;
    gp_engine *e;
    gp_key *key;            /* AES-256-GCM */
    uint8_t raw[32];
} fixture;

/* An engine in hybrid mode with the host executor as its GPU side; `calibrate` leaves the three
 * policy knobs unset so that the engine measures them. */
static void setup(fixture *f, int calibrate, size_t min_gpu, size_t lone_gpu, double share)
{
    gp_knobs k;

    gp_knobs_load(&k, NULL, NULL);
    k.backend = GP_BACKEND_HYBRID;
    k.hybrid_gpu_host = 1;
    k.stats = 1;
    k.min_gpu_bytes = calibrate ? GP_KNOB_CALIBRATE : min_gpu;
    k.lone_gpu_bytes = calibrate ? GP_KNOB_CALIBRATE : lone_gpu;
    k.gpu_share = calibrate ? -1.0 : share;
    snprintf(k.calib_cache, sizeof(k.calib_cache), "off");   /* each test measures for itself */
    f->lib = OSSL_LIB_CTX_new();
    f->dflt = OSSL_PROVIDER_load(f->lib, "default");
    assert_non_null(f->dflt);
    f->e = gp_engine_new(&k, f->lib);
    assert_non_null(f->e);
    assert_string_equal(gp_engine_backend_name(f->e), "hybrid");
    gptest_rand_bytes(f->raw, sizeof(f->raw));
    f->key = gp_key_new(f->e, GP_ALG_AES_GCM, f->raw, 32);
    assert_non_null(f->key);
}

static void teardown(fixture *f)
{
    gp_key_free(f->key);
    gp_engine_free(f->e);
    OSSL_PROVIDER_unload(f->dflt);
    OSSL_LIB_CTX_free(f->lib);
}

/* AES-256-GCM through the default provider: ciphertext into ref, tag into ref_tag. */
static void reference(fixture *f, const uint8_t iv[12], const uint8_t *aad, size_t aadlen,
                      const uint8_t *in, size_t len, uint8_t *ref, uint8_t ref_tag[16])
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(f->lib, "AES-256-GCM", "provider=default");
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int outl;

    assert_true(EVP_EncryptInit_ex2(ctx, c, f->raw, iv, NULL));
    if (aadlen > 0)
        assert_true(EVP_EncryptUpdate(ctx, NULL, &outl, aad, (int)aadlen));
    if (len > 0)
        assert_true(EVP_EncryptUpdate(ctx, ref, &outl, in, (int)len));
    assert_true(EVP_EncryptFinal_ex(ctx, ref + len, &outl));
    assert_true(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, ref_tag));
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
}

/* One message of `len` bytes with `aadlen` bytes of AAD: returns the executor it ran on, after
 * checking its ciphertext and tag against the default provider. */
static const gp_executor *one(fixture *f, size_t aadlen, size_t len)
{
    uint8_t iv[12], aad[100], tag[16], ref_tag[16];
    uint8_t *in = malloc(len + 1), *out = malloc(len + 1), *ref = malloc(len + 16);
    const gp_executor *x;
    gp_msg *m = gp_msg_new(f->e);

    assert_true(aadlen <= sizeof(aad));
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(in, len);
    reference(f, iv, aad, aadlen, in, len, ref, ref_tag);
    assert_true(gp_msg_start(m, f->key, iv, 12, 1));
    assert_int_equal(m->routed, 0);
    if (aadlen > 0) {
        assert_true(gp_msg_aad(m, aad, aadlen));
        /* Small AAD is held until the data decides the route; large AAD routes at once. */
        assert_int_equal(m->routed, aadlen > GP_MSG_AAD_HOLD);
    }
    if (len > 0) {
        assert_true(gp_msg_crypt(m, in, out, len));
        assert_memory_equal(out, ref, len);
    }
    assert_true(gp_msg_tag(m, tag));
    assert_memory_equal(tag, ref_tag, 16);
    assert_int_equal(m->routed, 1);
    x = m->exec;
    gp_msg_free(m);
    free(in);
    free(out);
    free(ref);
    return x;
}

/*
 * n messages of len bytes each, 13 bytes of AAD, submitted together as a pipeline call makes them
 * (gp_msgs_submit: one call for the AAD, one for the data, one for the tags). Every message's
 * ciphertext and tag are checked against the default provider; returns the executor they all ran
 * on (asserting they share one) and, in *batches, the batches the data call made.
 */
static const gp_executor *together(fixture *f, size_t n, size_t len, uint64_t *batches)
{
    gp_msg *m[32];
    gp_request r[32];
    uint8_t iv[32][12], aad[32][13], tag[32][16], ref_tag[16];
    uint8_t *in[32], *out[32], *ref = malloc(len + 16);
    const gp_executor *x;
    gp_stats before, after;

    assert_true(n <= 32 && ref != NULL);
    for (size_t i = 0; i < n; i++) {
        m[i] = gp_msg_new(f->e);
        in[i] = malloc(len + 1);
        out[i] = malloc(len + 1);
        gptest_rand_bytes(iv[i], 12);
        gptest_rand_bytes(aad[i], 13);
        gptest_rand_bytes(in[i], len);
        assert_true(gp_msg_start(m[i], f->key, iv[i], 12, 1));
    }
    for (size_t i = 0; i < n; i++)
        r[i] = (gp_request){ .msg = m[i], .kind = GP_REQ_AAD, .in = aad[i], .len = 13 };
    assert_true(gp_msgs_submit(f->e, r, n));
    gp_engine_stats(f->e, &before);
    for (size_t i = 0; i < n; i++)
        r[i] = (gp_request){ .msg = m[i], .kind = GP_REQ_CRYPT, .in = in[i], .out = out[i], .len = len };
    assert_true(gp_msgs_submit(f->e, r, n));
    gp_engine_stats(f->e, &after);
    *batches = after.batches - before.batches;
    for (size_t i = 0; i < n; i++)
        r[i] = (gp_request){ .msg = m[i], .kind = GP_REQ_TAG, .tag_out = tag[i] };
    assert_true(gp_msgs_submit(f->e, r, n));
    x = m[0]->exec;
    for (size_t i = 0; i < n; i++) {
        assert_ptr_equal(m[i]->exec, x);
        reference(f, iv[i], aad[i], 13, in[i], len, ref, ref_tag);
        assert_memory_equal(out[i], ref, len);
        assert_memory_equal(tag[i], ref_tag, 16);
        gp_msg_free(m[i]);
        free(in[i]);
        free(out[i]);
    }
    free(ref);
    return x;
}

/* Messages that start together route as one (rule 2 weighs the call's bytes: a lone caller waits
 * one round trip for all of them) and run as one batch on the GPU side. */
static void test_batch_routes_together(void **state)
{
    fixture f;
    uint64_t batches;

    (void)state;
    setup(&f, 0, 1024, 65536, 1.0);
    assert_ptr_equal(one(&f, 13, 16384), &gp_exec_cpu);                  /* alone: below lone_gpu_bytes */
    assert_ptr_equal(together(&f, 8, 16384, &batches), &gp_exec_host);   /* 128 KiB together */
    assert_int_equal(batches, 1);                                        /* one batch for all eight */
    assert_ptr_equal(together(&f, 32, 16384, &batches), &gp_exec_host);
    assert_int_equal(batches, 1);
    assert_ptr_equal(together(&f, 4, 4096, &batches), &gp_exec_cpu);     /* 16 KiB together */
    assert_ptr_equal(together(&f, 32, 512, &batches), &gp_exec_cpu);     /* each below min_gpu_bytes */
    teardown(&f);
}

/*
 * Rule 2 for a lone caller's batch (a pipeline call: one batch, on one side): the side where it is
 * expected to finish sooner. The numbers are of the kind the H200 priors hold for ChaCha20-Poly1305
 * on VAES + AVX-512 cores (priors.c): cpu 2.505 GB/s, a batch of 16 KiB messages 3.76 GB/s past a
 * round trip of 18.4 us, lone_gpu_bytes 116200. 32 x 16 KiB: GPU 18.4 + 139.4 us against CPU 209.3 us;
 * 8 x 16 KiB: GPU 18.4 + 34.9 us against CPU 52.3 us (the CPU, though 128 KiB is above
 * lone_gpu_bytes, which rule 2 used to weigh a batch's bytes by, as one message's).
 */
static void test_batch_rule(void **state)
{
    gp_hybrid_alg h = { .cpu_gbps = 2.505, .gpu_gbps = 3.53, .gpu_rt_us = 18.4, .batch_gbps = 3.76,
                        .min_gpu_bytes = 5765, .lone_gpu_bytes = 116200, .gpu_share = 0.575 };
    fixture f;
    gp_hybrid_alg *hp;
    const uint32_t ccp = GP_ALG_CHACHA20_POLY1305;

    (void)state;
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 16384, 32 * 16384), 1);
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 16384, 8 * 16384), 0);
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 16384, 2 * 16384), 0);
    /* one message: lone_gpu_bytes decides, whatever the batch's rate */
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 131072, 131072), 1);
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 65536, 65536), 0);
    /* messages each of which would go alone: the batch goes too */
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 200000, 400000), 1);
    /* a faster batch (18 GB/s): 8 x 16 KiB GPU 18.4 + 7.3 us < 52.3; 2 x 16 KiB 18.4 + 1.8 > 13.1 */
    h.batch_gbps = 18.0;
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 16384, 8 * 16384), 1);
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 16384, 2 * 16384), 0);
    /* not known: the batch's bytes against lone_gpu_bytes, as one message's */
    h.batch_gbps = 0;
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 16384, 8 * 16384), 1);
    assert_int_equal(gp_hybrid_lone_batch_gpu(&h, 16384, 4 * 16384), 0);

    /* The same through the routing of a lone caller (host as the GPU side; numbers set in place). */
    setup(&f, 0, 1024, 65536, 1.0);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 16384, 16384), &gp_exec_cpu);
    hp = &f.e->policy.hy.alg[ccp];
    assert_true(atomic_load(&hp->ready));
    hp->cpu_gbps = 2.505;
    hp->gpu_rt_us = 18.4;
    hp->batch_gbps = 3.76;
    hp->min_gpu_bytes = 5765;
    hp->lone_gpu_bytes = 116200;
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 16384, 32 * 16384), &gp_exec_host);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 16384, 8 * 16384), &gp_exec_cpu);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 4096, 32 * 4096), &gp_exec_cpu);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 2048, 32 * 2048), &gp_exec_cpu);
    /* not lone (another submitter): rule 2 does not apply */
    atomic_store(&f.e->queue.active, 1);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 16384, 8 * 16384), &gp_exec_host);
    atomic_store(&f.e->queue.active, 0);
    /* the knob lone_gpu_bytes set: it decides for batches too (65536 here) */
    teardown(&f);
    setup(&f, 0, 1024, 65536, 1.0);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 16384, 8 * 16384), &gp_exec_host);
    assert_true(f.e->policy.hy.alg[ccp].batch_gbps == 0);
    teardown(&f);
}

/* Rules 1 and 2 with fixed knobs: small -> cpu, lone mid-size -> cpu, large -> the GPU side. */
static void test_size_rules(void **state)
{
    fixture f;

    (void)state;
    setup(&f, 0, 1024, 65536, 1.0);
    assert_ptr_equal(one(&f, 13, 100), &gp_exec_cpu);           /* below min_gpu_bytes */
    assert_ptr_equal(one(&f, 13, 4096), &gp_exec_cpu);          /* lone caller, below lone_gpu_bytes */
    assert_ptr_equal(one(&f, 13, 70000), &gp_exec_host);        /* lone but large */
    assert_ptr_equal(one(&f, 0, 0), &gp_exec_cpu);              /* tag only: no data */
    assert_ptr_equal(one(&f, 13, 0), &gp_exec_cpu);             /* AAD only */
    assert_ptr_equal(one(&f, 100, 0), &gp_exec_cpu);            /* AAD over the hold: routes by it */
    /* Another submitter in the queue: not lone any more (white box: the policy reads the counter). */
    atomic_store(&f.e->queue.active, 1);
    assert_ptr_equal(one(&f, 13, 4096), &gp_exec_host);
    /* Rule 3: a batch in flight and a full one pending: the GPU is saturated. */
    atomic_store(&f.e->queue.inflight, 1);
    atomic_store(&f.e->queue.pending_bytes, f.e->knobs.max_batch_bytes);
    assert_ptr_equal(one(&f, 13, 70000), &gp_exec_cpu);
    atomic_store(&f.e->queue.inflight, 0);
    atomic_store(&f.e->queue.pending_bytes, 0);
    atomic_store(&f.e->queue.active, 0);
    teardown(&f);
}

/* Run fn(&f) as one ASYNC_JOB to its end; its return value. */
static int run_in_job(fixture *f, int (*fn)(void *))
{
    ASYNC_JOB *job = NULL;
    ASYNC_WAIT_CTX *w = ASYNC_WAIT_CTX_new();
    int ret = 0, r;

    assert_true(ASYNC_init_thread(1, 1));
    do {
        r = ASYNC_start_job(&job, w, &ret, fn, &f, sizeof(f));
    } while (r == ASYNC_PAUSE);
    assert_int_equal(r, ASYNC_FINISH);
    ASYNC_WAIT_CTX_free(w);
    ASYNC_cleanup_thread();
    return ret;
}

/* Inside an async job a caller is never "lone": its thread goes on with other jobs. (Only the
 * decision runs on the job's small stack here; running the message is the async tests' part.) */
static int job_main(void *arg)
{
    fixture *f = *(fixture **)arg;
    gp_msg *m = gp_msg_new(f->e);
    static const uint8_t iv[12];
    int on_gpu;

    assert_true(gp_msg_start(m, f->key, iv, 12, 1));
    on_gpu = gp_hybrid_route(&f->e->policy, &gp_exec_host, m->key->alg, m->key->keylen, 4096) == &gp_exec_host;
    gp_msg_free(m);
    return on_gpu;
}

/* Rule 4 inside a job: every eligible message to the GPU, 20 in a row, whatever the share. */
static int job_share(void *arg)
{
    fixture *f = *(fixture **)arg;
    int on_gpu = 0;

    for (int i = 0; i < 20; i++)
        on_gpu += job_main(arg);
    (void)f;
    return on_gpu == 20;
}

/* Rule 3 inside a job: a saturated GPU still takes the message (the job pauses on it). */
static int job_saturated(void *arg)
{
    fixture *f = *(fixture **)arg;
    int on_gpu;

    atomic_store(&f->e->queue.inflight, 1);
    atomic_store(&f->e->queue.pending_bytes, f->e->knobs.max_batch_bytes);
    on_gpu = job_main(arg);
    atomic_store(&f->e->queue.inflight, 0);
    atomic_store(&f->e->queue.pending_bytes, 0);
    return on_gpu;
}

static void test_async_is_not_lone(void **state)
{
    fixture f;

    (void)state;
    setup(&f, 0, 1024, 65536, 1.0);
    assert_int_equal(run_in_job(&f, job_main), 1);
    assert_int_equal(run_in_job(&f, job_saturated), 1);
    /* The same decision outside the job: lone, so cpu. */
    {
        gp_msg *m = gp_msg_new(f.e);
        static const uint8_t iv[12];

        assert_true(gp_msg_start(m, f.key, iv, 12, 1));
        assert_ptr_equal(gp_hybrid_route(&f.e->policy, &gp_exec_host, m->key->alg, m->key->keylen, 4096), &gp_exec_cpu);
        gp_msg_free(m);
    }
    teardown(&f);
}

/* Rule 4: gpu_share splits eligible messages by count, deterministically. */
static void test_share(void **state)
{
    fixture f;
    int gpu = 0;
    gp_stats st;

    (void)state;
    setup(&f, 0, 256, 0, 0.25);
    for (int i = 0; i < 40; i++)
        gpu += one(&f, 13, 2048) == &gp_exec_host;
    assert_int_equal(gpu, 10);
    gp_engine_stats(f.e, &st);
    assert_int_equal(st.routed_gpu, 10);
    assert_int_equal(st.routed_cpu, 30);
    teardown(&f);
    /* More than half to the GPU: the first eligible message goes there (a process whose first
     * message is its only long one, as openssl speed's first async job, gets the GPU). */
    setup(&f, 0, 256, 0, 0.53);
    assert_ptr_equal(one(&f, 13, 2048), &gp_exec_host);
    gpu = 1;
    for (int i = 1; i < 100; i++)
        gpu += one(&f, 13, 2048) == &gp_exec_host;
    assert_int_equal(gpu, 53);   /* round(100 * 0.53) of the first 100 */
    teardown(&f);
    /* A measured share does not split a lone caller's messages (hybrid.c, rule 2): they run one
     * after another, so each goes where it alone runs faster. (With the host executor as the GPU
     * side the measured share is small.) */
    setup(&f, 0, 256, 0, -1.0);
    for (int i = 0; i < 10; i++)
        assert_ptr_equal(one(&f, 13, 2048), &gp_exec_host);
    assert_true(f.e->policy.hy.alg[GP_ALG_AES_GCM].gpu_share < 0.5);
    teardown(&f);
    /* Inside async jobs the share does not split: a CPU message would hold up the thread's other
     * jobs (hybrid.c, rule 4). */
    setup(&f, 0, 256, 0, 0.25);
    assert_int_equal(run_in_job(&f, job_share), 1);
    teardown(&f);
}

/* A copy of an unrouted message keeps its held AAD: both finish with the reference tag. */
static void test_dup_holds_aad(void **state)
{
    fixture f;
    uint8_t iv[12], aad[13], in[300], out1[300], out2[300], ref[316], tag[16], ref_tag[16];
    gp_msg *m, *d;
    gp_key *k2;

    (void)state;
    setup(&f, 0, 256, 0, 1.0);
    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(in, sizeof(in));
    reference(&f, iv, aad, sizeof(aad), in, sizeof(in), ref, ref_tag);
    m = gp_msg_new(f.e);
    assert_true(gp_msg_start(m, f.key, iv, 12, 1));
    assert_true(gp_msg_aad(m, aad, 5));
    assert_true(gp_msg_aad(m, aad + 5, 8));
    k2 = gp_key_dup(f.key);
    d = gp_msg_dup(m, k2);
    assert_non_null(d);
    assert_true(gp_msg_crypt(m, in, out1, sizeof(in)));        /* 300 >= 256: GPU side */
    assert_true(gp_msg_crypt(d, in, out2, 100));               /* the copy routes on its own */
    assert_true(gp_msg_crypt(d, in + 100, out2 + 100, 200));
    assert_ptr_equal(m->exec, &gp_exec_host);
    assert_ptr_equal(d->exec, &gp_exec_cpu);
    assert_memory_equal(out1, ref, sizeof(in));
    assert_memory_equal(out2, ref, sizeof(in));
    assert_true(gp_msg_tag(m, tag));
    assert_memory_equal(tag, ref_tag, 16);
    memset(tag, 0, sizeof(tag));
    assert_true(gp_msg_tag(d, tag));
    assert_memory_equal(tag, ref_tag, 16);
    gp_msg_free(d);
    gp_msg_free(m);
    gp_key_free(k2);
    teardown(&f);
}

/* Calibration: the host executor standing in for a GPU is slower than the default provider, so the
 * measured policy must keep everything on the CPU, and say so in numbers. */
static void test_calibration(void **state)
{
    fixture f;
    const gp_hybrid_alg *h;

    (void)state;
    setup(&f, 1, 0, 0, 0);
    assert_ptr_equal(one(&f, 13, 1 << 20), &gp_exec_cpu);
    h = &f.e->policy.hy.alg[GP_ALG_AES_GCM];
    assert_int_equal(atomic_load(&h->ready), 1);
    assert_true(h->cpu_gbps > 0);
    assert_true(h->gpu_gbps > 0);
    assert_true(h->gpu_rt_us > 0);
    assert_true(h->gpu_gbps < h->cpu_gbps);
    assert_true(h->min_gpu_bytes == GP_KNOB_CALIBRATE);      /* never */
    assert_true(h->gpu_share < 0.5);
    gp_hybrid_print(&f.e->policy);
    /* Measured "never": later messages start on the cpu executor at once (no held AAD). */
    {
        static const uint8_t iv[12];
        gp_msg *m = gp_msg_new(f.e);

        assert_true(gp_msg_start(m, f.key, iv, 12, 1));
        assert_int_equal(m->routed, 1);
        assert_ptr_equal(m->exec, &gp_exec_cpu);
        gp_msg_free(m);
    }
    teardown(&f);
}

/* A lone caller's crossing on synthetic measurements (ns for one message alone at 16 B, 1, 4 and
 * 8 MiB) against a CPU at 0.1 ns a byte (10 GB/s), then one that slows on long messages. */
static void test_lone_crossing(void **state)
{
    static const size_t len[GP_LONE_POINTS] = { 16, 1 << 20, 4 << 20, 8 << 20 };
    const double cpu = 0.1, mib = 1 << 20;
    double c[GP_LONE_POINTS];
    size_t at;

    (void)state;
    for (int i = 0; i < GP_LONE_POINTS; i++)
        c[i] = cpu * (double)len[i];
    /* The GPU slower everywhere, its last line steeper than the CPU: never. */
    {
        const double t[GP_LONE_POINTS] = { 10e3, 250e3, 1000e3, 2000e3 };

        assert_true(gp_hybrid_lone_crossing(len, t, c, GP_LONE_POINTS, 0.01) == GP_KNOB_CALIBRATE);
    }
    /* Slower at 1 and 4 MiB, faster at 8: where the 4-8 MiB line meets the CPU's. */
    {
        const double t[GP_LONE_POINTS] = { 10e3, 200e3, 450e3, 750e3 };
        const double want = 4 * mib + 4 * mib * (450e3 - 0.1 * 4 * mib) / ((450e3 - 0.1 * 4 * mib) - (750e3 - 0.1 * 8 * mib));

        at = gp_hybrid_lone_crossing(len, t, c, GP_LONE_POINTS, 0.01);
        assert_true(at > 4 * mib && at < 8 * mib);
        assert_true((double)at > want - 2 && (double)at < want + 2);
    }
    /* Faster from 1 MiB on: on the first line, through the round trip and 1 MiB. */
    {
        const double t[GP_LONE_POINTS] = { 10e3, 60e3, 200e3, 380e3 };
        const double b = (60e3 - 10e3) / (double)((1 << 20) - 16), a = 10e3 - 16 * b;

        at = gp_hybrid_lone_crossing(len, t, c, GP_LONE_POINTS, 0.01);
        assert_true((double)at > a / (cpu - b) - 2 && (double)at < a / (cpu - b) + 2);
        assert_true(at < (1 << 20));
    }
    /* Faster everywhere, the round trip too (no GPU does that; the rule still holds): every length. */
    {
        const double t[GP_LONE_POINTS] = { 1, 60e3, 200e3, 380e3 };

        assert_int_equal(gp_hybrid_lone_crossing(len, t, c, GP_LONE_POINTS, 0.01), 0);
    }
    /* Slower at every point, its last line shallower than the CPU's: past 8 MiB, where the last
     * lines meet; a floor steeper than the CPU: never. */
    {
        const double t[GP_LONE_POINTS] = { 10e3, 400e3, 1200e3, 1300e3 };
        const double b = 100e3 / (4 * mib), want = 8 * mib + (1300e3 - 0.1 * 8 * mib) / (0.1 - b);

        at = gp_hybrid_lone_crossing(len, t, c, GP_LONE_POINTS, 0.01);
        assert_true(at > 8 * mib);
        assert_true((double)at > want - 2 && (double)at < want + 2);
        assert_true(gp_hybrid_lone_crossing(len, t, c, GP_LONE_POINTS, 0.2) == GP_KNOB_CALIBRATE);
    }
    /* A CPU that slows past its caches (0.1 ns a byte to 1 MiB, 0.2 beyond) against a GPU at 0.15
     * beyond 1 MiB: slower at 1 MiB, faster at 4, so between them. Against 0.1 throughout, never. */
    {
        const double slow[GP_LONE_POINTS] = { 1.6, 0.1 * mib, 0.1 * mib + 0.2 * 3 * mib, 0.1 * mib + 0.2 * 7 * mib };
        const double t[GP_LONE_POINTS] = { 10e3, 0.1 * mib + 60e3, 0.1 * mib + 60e3 + 0.15 * 3 * mib,
                                           0.1 * mib + 60e3 + 0.15 * 7 * mib };

        at = gp_hybrid_lone_crossing(len, t, slow, GP_LONE_POINTS, 0.01);
        assert_true(at > 1 * mib && at < 4 * mib);
        assert_true(gp_hybrid_lone_crossing(len, t, c, GP_LONE_POINTS, 0.01) == GP_KNOB_CALIBRATE);
    }
}

/* The first routing decision inside an async job measures on a thread of its own (the job's stack
 * is 32 KiB; a CUDA context or the calibration runs must not land there). */
static int calib_job_main(void *arg)
{
    fixture *f = *(fixture **)arg;
    gp_msg *m = gp_msg_new(f->e);
    static const uint8_t iv[12];
    const gp_executor *x;

    assert_true(gp_msg_start(m, f->key, iv, 12, 1));
    x = gp_hybrid_route(&f->e->policy, &gp_exec_host, m->key->alg, m->key->keylen, 1 << 20);
    gp_msg_free(m);
    return x == &gp_exec_cpu && atomic_load(&f->e->policy.hy.alg[GP_ALG_AES_GCM].ready);
}

static void test_calibration_in_job(void **state)
{
    fixture f;

    (void)state;
    setup(&f, 1, 0, 0, 0);
    assert_int_equal(run_in_job(&f, calib_job_main), 1);
    assert_true(f.e->policy.hy.alg[GP_ALG_AES_GCM].cpu_gbps > 0);
    teardown(&f);
}

/* One message through f->e, checked against the default provider. */
static void auto_message(fixture *f)
{
    uint8_t iv[12], aad[13], in[2048], out[2048], ref[2048 + 16], tag[16], ref_tag[16];
    gp_msg *m = gp_msg_new(f->e);

    gptest_rand_bytes(iv, sizeof(iv));
    gptest_rand_bytes(aad, sizeof(aad));
    gptest_rand_bytes(in, sizeof(in));
    reference(f, iv, aad, sizeof(aad), in, sizeof(in), ref, ref_tag);
    assert_true(gp_msg_start(m, f->key, iv, 12, 1));
    assert_true(gp_msg_aad(m, aad, sizeof(aad)));
    assert_true(gp_msg_crypt(m, in, out, sizeof(in)));
    assert_true(gp_msg_tag(m, tag));
    assert_memory_equal(out, ref, sizeof(in));
    assert_memory_equal(tag, ref_tag, 16);
    gp_msg_free(m);
}

static int auto_job_main(void *arg)
{
    fixture *f = *(fixture **)arg;

    auto_message(f);
    return 1;
}

static void *auto_thread_main(void *arg)
{
    auto_message(arg);
    return NULL;
}

/* Has the auto backend's warm-up (GPU open, calibration) started in this engine? */
static int warm_started(fixture *f)
{
    int started;

    pthread_mutex_lock(&f->e->policy.warm.lock);
    started = f->e->policy.warm.started;
    pthread_mutex_unlock(&f->e->policy.warm.lock);
    return started;
}

#ifdef GPUPROV_HAVE_CUDA
# define CUDA_BUILT 1
#else
# define CUDA_BUILT 0
#endif

/* Wait (at most 5 s) for the engine's warm-up to end; 1 if it did. */
static int warm_finished(fixture *f)
{
    for (int i = 0; i < 5000; i++) {
        if (atomic_load(&f->e->policy.warm.done))
            return 1;
        usleep(1000);
    }
    return 0;
}

/* backend=auto: a single-threaded synchronous caller never opens the GPU (every message it sends
 * goes to the cpu executor); a message inside an async job, or from a second thread, starts the
 * warm-up where the cuda executor is built, which opens the GPU once some CPU is free. Messages
 * started while the GPU opens in the background run on the cpu executor (nothing fails, nothing
 * waits), and after it the engine serves as the warm-up decided. */
static void test_auto_warmup(void **state)
{
    fixture f;
    gp_knobs k;
    gp_stats st;
    pthread_t t;

    (void)state;
    atomic_store(&gp_test_cpus_saturated, 0);   /* this machine's load must not decide the test */
    gp_knobs_load(&k, NULL, NULL);
    k.backend = GP_BACKEND_AUTO;
    k.hybrid_gpu_host = 0;
    k.stats = 1;
    snprintf(k.calib_cache, sizeof(k.calib_cache), "off");
    f.lib = OSSL_LIB_CTX_new();
    f.dflt = OSSL_PROVIDER_load(f.lib, "default");
    f.e = gp_engine_new(&k, f.lib);
    gptest_rand_bytes(f.raw, sizeof(f.raw));
    f.key = gp_key_new(f.e, GP_ALG_AES_GCM, f.raw, 32);
    for (int i = 0; i < 100; i++)
        auto_message(&f);
    assert_int_equal(warm_started(&f), 0);
    gp_engine_stats(f.e, &st);
    assert_int_equal(st.cpu_ops, 100 * 3);   /* AAD, data, tag: counted once the messages are freed */
    assert_int_equal(st.bytes, 100 * (13 + 2048));
    /* Every CPU busy: the warm-up starts but opens nothing; messages keep to the cpu executor. */
    atomic_store(&gp_test_cpus_saturated, 1);
    assert_int_equal(run_in_job(&f, auto_job_main), 1);
    assert_int_equal(warm_started(&f), CUDA_BUILT);
    usleep(500 * 1000);                          /* two looks at the CPUs */
    assert_int_equal(atomic_load(&f.e->policy.warm.done), 0);
    pthread_mutex_lock(&f.e->open_lock);
    assert_int_equal(f.e->opened[GP_EXEC_CUDA], 0);
    pthread_mutex_unlock(&f.e->open_lock);
    assert_int_equal(run_in_job(&f, auto_job_main), 1);
    gp_engine_stats(f.e, &st);
    assert_int_equal(st.cpu_ops, 102 * 3);
    assert_int_equal(st.errors, 0);
    /* A CPU free again: the warm-up goes on (and ends, GPU or not). */
    atomic_store(&gp_test_cpus_saturated, 0);
    if (CUDA_BUILT)
        assert_int_equal(warm_finished(&f), 1);
    teardown(&f);

    /* A second thread is the other sign of work to batch. */
    f.lib = OSSL_LIB_CTX_new();
    f.dflt = OSSL_PROVIDER_load(f.lib, "default");
    f.e = gp_engine_new(&k, f.lib);
    f.key = gp_key_new(f.e, GP_ALG_AES_GCM, f.raw, 32);
    auto_message(&f);
    assert_int_equal(pthread_create(&t, NULL, auto_thread_main, &f), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(warm_started(&f), CUDA_BUILT);
    for (int i = 0; i < 300; i++)
        auto_message(&f);
    gp_engine_stats(f.e, &st);
    assert_int_equal(st.errors, 0);
    teardown(&f);
    atomic_store(&gp_test_cpus_saturated, -1);
}


/* A first large request waits for the warm-up only while it opens: with every CPU busy the warm-up
 * waits for a free one, and the request goes on at once on the CPU; once a CPU is free the
 * warm-up ends and the same request would leave the lane. (backend auto, the host as the GPU,
 * the policy's numbers from knobs.) */
static void test_warm_wait(void **state)
{
    fixture f;
    gp_knobs k;
    uint64_t t0;

    (void)state;
    gp_knobs_load(&k, NULL, NULL);
    k.backend = GP_BACKEND_AUTO;
    k.hybrid_gpu_host = 1;
    k.min_gpu_bytes = k.lone_gpu_bytes = 4096;
    k.gpu_share = 1.0;
    snprintf(k.calib_cache, sizeof(k.calib_cache), "off");
    f.lib = OSSL_LIB_CTX_new();
    f.dflt = OSSL_PROVIDER_load(f.lib, "default");
    f.e = gp_engine_new(&k, f.lib);
    f.key = gp_key_new(f.e, GP_ALG_AES_GCM, f.raw, 32);
    atomic_store(&gp_test_cpus_saturated, 1);
    t0 = gp_now_ns();
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, 1 << 20, 1), 0);
    assert_true(gp_now_ns() - t0 < 1000000000ull);          /* no 3-s wait */
    assert_int_equal(warm_started(&f), 1);
    assert_int_equal(atomic_load(&f.e->policy.warm.opening), -1);
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, 1 << 20, 0), 0);   /* a stream: no wait */
    atomic_store(&gp_test_cpus_saturated, 0);
    assert_int_equal(warm_finished(&f), 1);
    assert_string_equal(gp_engine_backend_name(f.e), "hybrid");
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, 1 << 20, 1), 1);
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, 1 << 20, 0), 1);
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, (1 << 18) - 1, 1), 0);   /* not large */
    teardown(&f);
    atomic_store(&gp_test_cpus_saturated, -1);
}

/* The warm-up's window over /proc/stat (warm.c): idle + iowait and all ticks of the CPUs the
 * process may run on, from the per-CPU lines only (the summary line and the lines after them do not
 * count). */
static void test_cpu_ticks_read(void **state)
{
    static const char stat[] =
        "cpu  2 0 100 1000 10 0 0 0 0 0\n"   /* the summary: its first number is no CPU */
        "cpu0 10 1 2 300 4 5 6 7 0 0\n"
        "cpu1 20 0 0 100 0 0 0 0 0 0\n"
        "cpu2 1 1 1 50 50 1 1 1\n"
        "intr 123 4 5\n"
        "cpu3 1 1 1 1 1 1 1 1\n";
    FILE *f = tmpfile();
    cpu_set_t set;
    uint64_t idle, all;

    (void)state;
    assert_non_null(f);
    fputs(stat, f);
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    CPU_SET(2, &set);
    CPU_SET(3, &set);   /* after "intr": not read */
    rewind(f);
    assert_int_equal(gp_cpu_ticks_read(f, &set, &idle, &all), 1);
    assert_int_equal(idle, (300 + 4) + (50 + 50));
    assert_int_equal(all, (10 + 1 + 2 + 300 + 4 + 5 + 6 + 7) + (1 + 1 + 1 + 50 + 50 + 1 + 1 + 1));
    CPU_ZERO(&set);
    CPU_SET(5, &set);
    rewind(f);
    assert_int_equal(gp_cpu_ticks_read(f, &set, &idle, &all), 0);
    assert_int_equal(all, 0);
    fclose(f);
}

/* ---- the persisted measurements (batching/policy/calib_cache.c) ---- */

/* A fresh directory for one test's cache files. */
static void cache_tmpdir(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/gpuprov-calib-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void cache_rmdir(const char *dir)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* An engine as setup() makes it (hybrid, host as the GPU, measured), the user's cache in `dir`,
 * the machine's in `system_dir` ("off": none), the GPU's model for the priors `gpu_model` ("": none,
 * so no priors), and knob calib_refresh. */
static void setup_known(fixture *f, const char *dir, const char *system_dir, const char *gpu_model, int refresh)
{
    gp_knobs k;

    gp_knobs_load(&k, NULL, NULL);
    k.backend = GP_BACKEND_HYBRID;
    k.hybrid_gpu_host = 1;
    k.stats = 1;
    k.calib_refresh = refresh;
    snprintf(k.calib_cache, sizeof(k.calib_cache), "%s", dir);
    snprintf(k.calib_system, sizeof(k.calib_system), "%s", system_dir);
    snprintf(k.test.gpu_model, sizeof(k.test.gpu_model), "%s", gpu_model);
    f->lib = OSSL_LIB_CTX_new();
    f->dflt = OSSL_PROVIDER_load(f->lib, "default");
    f->e = gp_engine_new(&k, f->lib);
    assert_non_null(f->e);
    assert_string_equal(gp_engine_backend_name(f->e), "hybrid");
    gptest_rand_bytes(f->raw, sizeof(f->raw));
    f->key = gp_key_new(f->e, GP_ALG_AES_GCM, f->raw, 32);
}

static void setup_cached(fixture *f, const char *dir)
{
    setup_known(f, dir, "off", "", 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");

    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
}

/* The whole file, malloc'd. */
static char *read_text(const char *path)
{
    FILE *fp = fopen(path, "r");
    char *buf = calloc(1, 16384);
    size_t n;

    assert_non_null(fp);
    n = fread(buf, 1, 16383, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

/* A measurement is written; the next engine routes by it without measuring, and says so. */
static void test_cache_written_and_read(void **state)
{
    fixture f;
    char dir[64], path[1024], key[2048], *text;
    gp_calib_numbers got[5];
    gp_hybrid_alg first;

    (void)state;
    cache_tmpdir(dir, sizeof(dir));
    setup_cached(&f, dir);
    assert_ptr_equal(one(&f, 13, 1 << 16), &gp_exec_cpu);   /* measures: the host never wins */
    first = f.e->policy.hy.alg[GP_ALG_AES_GCM];
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_MEASURED);
    assert_true(gp_calib_cache_file(&f.e->policy, &gp_exec_host, path, sizeof(path), key, sizeof(key)));
    assert_true(strncmp(path, dir, strlen(dir)) == 0);
    /* the key names this build (its ELF build id) and the executor standing in for the GPU */
    assert_null(strstr(key, "build none"));
    assert_non_null(strstr(key, "the host executor"));
    text = read_text(path);
    assert_non_null(strstr(text, key));
    assert_non_null(strstr(text, "alg 2 keylen 32 "));
    free(text);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 1);
    assert_true(got[GP_ALG_AES_GCM].have && got[GP_ALG_AES_GCM].cpu_gbps == first.cpu_gbps
                && got[GP_ALG_AES_GCM].gpu_gbps == first.gpu_gbps && got[GP_ALG_AES_GCM].gpu_rt_us == first.gpu_rt_us
                && got[GP_ALG_AES_GCM].gpu_share == first.gpu_share && got[GP_ALG_AES_GCM].batch_gbps == first.batch_gbps
                && got[GP_ALG_AES_GCM].min_gpu_bytes == first.min_gpu_bytes
                && got[GP_ALG_AES_GCM].lone_gpu_bytes == first.lone_gpu_bytes);
    teardown(&f);

    setup_cached(&f, dir);
    assert_ptr_equal(one(&f, 13, 1 << 16), &gp_exec_cpu);
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_USER_CACHE);
    assert_true(f.e->policy.hy.alg[GP_ALG_AES_GCM].cpu_gbps == first.cpu_gbps);
    assert_true(f.e->policy.hy.alg[GP_ALG_AES_GCM].min_gpu_bytes == first.min_gpu_bytes);
    gp_hybrid_print(&f.e->policy);
    /* Numbers that send large messages to the GPU side, written as a measurement would be: a
     * new engine's first large message goes there at once. */
    {
        gp_calib_numbers c[5] = { 0 };

        c[GP_ALG_AES_GCM] = (gp_calib_numbers){ .have = 1, .keylen = 32, .at = (long long)time(NULL),
                                                .cpu_gbps = 4, .gpu_gbps = 20, .gpu_rt_us = 30,
                                                .min_gpu_bytes = 4096, .lone_gpu_bytes = 65536, .gpu_share = 1 };
        assert_true(gp_calib_cache_write(&f.e->policy, &gp_exec_host, c));
    }
    teardown(&f);
    setup_cached(&f, dir);
    assert_ptr_equal(one(&f, 13, 70000), &gp_exec_host);
    assert_ptr_equal(one(&f, 13, 1000), &gp_exec_cpu);
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_USER_CACHE);
    teardown(&f);
    cache_rmdir(dir);
}

/* A valid file for the host executor's key, its GCM line made of `line` (NULL: a good one). */
static void write_cache(fixture *f, const char *path, const char *key, const char *line, const char *tail)
{
    static char text[20000];
    int n;

    if (line == NULL)
        n = snprintf(text, sizeof(text), "gpuprov-calibration 1\nkey %s\nalg 2 keylen 32 at %lld cpu_gbps 4 "
                     "gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1\n%s", key,
                     (long long)time(NULL), tail != NULL ? tail : "end\n");
    else
        n = snprintf(text, sizeof(text), "gpuprov-calibration 1\nkey %s\n%s\n%s", key, line,
                     tail != NULL ? tail : "end\n");
    assert_true(n > 0 && (size_t)n < sizeof(text));
    (void)f;
    write_text(path, text);
}

/* Whatever the file holds, the engine reads only numbers a measurement could have made, and
 * ignores a file that is not whole, not this machine's, or stale: it measures instead. */
static void test_cache_rejects(void **state)
{
    fixture f;
    char dir[64], path[1024], key[2048], line[512];
    gp_calib_numbers got[5];
    const long long now = (long long)time(NULL);
    const char *bad_lines[] = {
        "alg 2 keylen 32 at %lld cpu_gbps nan gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps inf rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps -4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 0 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes -1 lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 2000000000000 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1.5",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1 extra",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1 batch_gbps -1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1 batch_gbps 3 x",
        "alg 9 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 31 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4k lone_gpu_bytes 65536 gpu_share 1",
        "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536",
        "garbage",
    };

    (void)state;
    cache_tmpdir(dir, sizeof(dir));
    setup_cached(&f, dir);
    assert_true(gp_calib_cache_file(&f.e->policy, &gp_exec_host, path, sizeof(path), key, sizeof(key)));
    /* the good file, to be sure the bad ones fail for their own reason */
    write_cache(&f, path, key, NULL, NULL);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 1);
    for (size_t i = 0; i < sizeof(bad_lines) / sizeof(bad_lines[0]); i++) {
        snprintf(line, sizeof(line), bad_lines[i], now);
        write_cache(&f, path, key, line, NULL);
        if (gp_calib_cache_read(&f.e->policy, &gp_exec_host, got) != 0)
            fail_msg("accepted: %s", line);
    }
    /* stale (8 days), from the future, twice the same algorithm */
    snprintf(line, sizeof(line), "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 "
             "lone_gpu_bytes 65536 gpu_share 1", now - 8 * 24 * 3600);
    write_cache(&f, path, key, line, NULL);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    snprintf(line, sizeof(line), "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 "
             "lone_gpu_bytes 65536 gpu_share 1", now + 3600);
    write_cache(&f, path, key, line, NULL);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    snprintf(line, sizeof(line), "alg 2 keylen 32 at %lld cpu_gbps 4 gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 "
             "lone_gpu_bytes 65536 gpu_share 1", now);
    {
        char tail[600];

        snprintf(tail, sizeof(tail), "%s\nend\n", line);
        write_cache(&f, path, key, line, tail);
        assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    }
    /* cut off (no "end"; a last line without its newline), something after "end", another key */
    write_cache(&f, path, key, NULL, "");
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    write_cache(&f, path, key, NULL, "end");
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    write_cache(&f, path, key, NULL, "end\nalg 1\n");
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    write_cache(&f, path, "gpuprov 0.0.0 build other", NULL, NULL);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    /* a NUL inside, a file too large, a directory, a symbolic link to a good file */
    {
        FILE *fp = fopen(path, "w");
        static char big[9000];

        assert_non_null(fp);
        fprintf(fp, "gpuprov-calibration 1\nkey %s\n", key);
        fputc('\0', fp);
        fputs("end\n", fp);
        fclose(fp);
        assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
        memset(big, 'a', sizeof(big) - 1);
        write_cache(&f, path, key, big, NULL);
        assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
        unlink(path);
        assert_int_equal(mkdir(path, 0700), 0);
        assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
        rmdir(path);
        {
            char real[1100];

            snprintf(real, sizeof(real), "%s.real", path);
            write_cache(&f, real, key, NULL, NULL);
            assert_int_equal(symlink(real, path), 0);
            assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
            unlink(path);
            unlink(real);
        }
    }
    /* Bytes flipped at random in a good file: either the file is refused or each number it gave
     * is within what a measurement can make. */
    for (int round = 0; round < 3000; round++) {
        char text[4096];
        size_t len;
        long long before, after;
        int n;

        n = snprintf(text, sizeof(text), "gpuprov-calibration 1\nkey %s\nalg 2 keylen 32 at %lld cpu_gbps 4.5 "
                 "gpu_gbps 20 rt_us 30 min_gpu_bytes 4096 lone_gpu_bytes 65536 gpu_share 0.75\nalg 4 keylen 32 at "
                 "%lld cpu_gbps 3 gpu_gbps 16 rt_us 25 min_gpu_bytes never lone_gpu_bytes never gpu_share 0\nend\n",
                 key, now, now);
        assert_true(n > 0 && (size_t)n < sizeof(text));
        len = strlen(text);
        for (size_t flips = 1 + gptest_rand_range(0, 3); flips > 0; flips--)
            text[gptest_rand_range(strlen(key) + 30, len - 1)] = (char)gptest_rand_range(1, 255);
        write_text(path, text);
        before = (long long)time(NULL);
        n = gp_calib_cache_read(&f.e->policy, &gp_exec_host, got);
        after = (long long)time(NULL);
        assert_true(n >= 0 && n <= 2);
        for (int a = 0; a < 5; a++) {
            if (!got[a].have)
                continue;
            assert_true(a >= 1 && a <= 4);
            assert_true(got[a].cpu_gbps > 0 && got[a].cpu_gbps <= 1e4 && got[a].gpu_gbps > 0 && got[a].gpu_gbps <= 1e4);
            assert_true(got[a].gpu_rt_us > 0 && got[a].gpu_rt_us <= 1e7);
            assert_true(got[a].gpu_share >= 0 && got[a].gpu_share <= 1);
            assert_true(got[a].min_gpu_bytes == GP_KNOB_CALIBRATE || got[a].min_gpu_bytes <= (1ull << 40));
            assert_true(got[a].lone_gpu_bytes == GP_KNOB_CALIBRATE || got[a].lone_gpu_bytes <= (1ull << 40));
            assert_true(got[a].keylen == 16 || got[a].keylen == 24 || got[a].keylen == 32);
            assert_true(got[a].at <= after && got[a].at >= before - 7 * 24 * 3600);
        }
    }
    /* A refused file: the engine measures, routes, and replaces it with a good one. */
    write_cache(&f, path, key, "garbage", NULL);
    assert_ptr_equal(one(&f, 13, 1 << 16), &gp_exec_cpu);
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_MEASURED);
    assert_true(f.e->policy.hy.alg[GP_ALG_AES_GCM].cpu_gbps > 0);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 1);
    teardown(&f);
    cache_rmdir(dir);
}

/* A cache that cannot be written (a directory under a regular file), or is off: measuring and
 * routing go on as without it. */
static void test_cache_unwritable(void **state)
{
    fixture f;
    gp_calib_numbers got[5];
    char dir[64], blocked[128];

    (void)state;
    cache_tmpdir(dir, sizeof(dir));
    snprintf(blocked, sizeof(blocked), "%s/file", dir);
    write_text(blocked, "not a directory\n");
    snprintf(blocked, sizeof(blocked), "%s/file/gpuprov", dir);
    setup_cached(&f, blocked);
    assert_ptr_equal(one(&f, 13, 1 << 16), &gp_exec_cpu);
    assert_true(f.e->policy.hy.alg[GP_ALG_AES_GCM].cpu_gbps > 0);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    teardown(&f);
    setup_cached(&f, "off");
    {
        char path[1024], key[2048];

        assert_int_equal(gp_calib_cache_file(&f.e->policy, &gp_exec_host, path, sizeof(path), key, sizeof(key)), 0);
    }
    teardown(&f);
    /* Unset: $XDG_CACHE_HOME/gpuprov, else $HOME/.cache/gpuprov; neither set (or relative): none. */
    {
        char path[1024], key[2048], want[256];
        const char *home = getenv("HOME"), *xdg = getenv("XDG_CACHE_HOME");
        char *saved_home = home ? strdup(home) : NULL, *saved_xdg = xdg ? strdup(xdg) : NULL;

        setup_cached(&f, "");
        setenv("XDG_CACHE_HOME", dir, 1);
        assert_true(gp_calib_cache_file(&f.e->policy, &gp_exec_host, path, sizeof(path), key, sizeof(key)));
        snprintf(want, sizeof(want), "%s/gpuprov/calib-", dir);
        assert_true(strncmp(path, want, strlen(want)) == 0);
        unsetenv("XDG_CACHE_HOME");
        setenv("HOME", dir, 1);
        assert_true(gp_calib_cache_file(&f.e->policy, &gp_exec_host, path, sizeof(path), key, sizeof(key)));
        snprintf(want, sizeof(want), "%s/.cache/gpuprov/calib-", dir);
        assert_true(strncmp(path, want, strlen(want)) == 0);
        setenv("HOME", "relative", 1);
        assert_int_equal(gp_calib_cache_file(&f.e->policy, &gp_exec_host, path, sizeof(path), key, sizeof(key)), 0);
        if (saved_home != NULL)
            setenv("HOME", saved_home, 1);
        else
            unsetenv("HOME");
        if (saved_xdg != NULL)
            setenv("XDG_CACHE_HOME", saved_xdg, 1);
        free(saved_home);
        free(saved_xdg);
    }
    assert_ptr_equal(one(&f, 13, 1 << 16), &gp_exec_cpu);
    teardown(&f);
    cache_rmdir(dir);
}

/* The cache is read on the first question, which may come inside an async job: the file's text
 * and key do not fit its 32 KiB stack beside stdio's, so the read runs off it. */
static int prior_job_main(void *arg)
{
    fixture *f = *(fixture **)arg;

    return gp_hybrid_prior(&f->e->policy, &gp_exec_host, GP_ALG_AES_GCM, 8192, 0) == 1
           && f->e->policy.hy.cache[GP_ALG_AES_GCM].have;
}

/* Before the GPU is open: the prior sends large messages of callers that are not lone to the
 * GPU side; the persisted numbers, where there are some, decide instead. */
static void test_prior(void **state)
{
    fixture f;
    char dir[64];

    (void)state;
    cache_tmpdir(dir, sizeof(dir));
    setup_cached(&f, dir);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, GP_DEMAND_BYTES, 0), 1);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, GP_DEMAND_BYTES - 1, 0), 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 16u << 20, 1), 0);
    teardown(&f);
    {
        gp_calib_numbers c[5] = { 0 };

        setup_cached(&f, dir);
        c[GP_ALG_AES_GCM] = (gp_calib_numbers){ .have = 1, .keylen = 32, .at = (long long)time(NULL),
                                                .cpu_gbps = 4, .gpu_gbps = 20, .gpu_rt_us = 30,
                                                .min_gpu_bytes = 4096, .lone_gpu_bytes = 1 << 20, .gpu_share = 0.8 };
        c[GP_ALG_CHACHA20_POLY1305] = (gp_calib_numbers){ .have = 1, .keylen = 32, .at = (long long)time(NULL),
                                                          .cpu_gbps = 4, .gpu_gbps = 2, .gpu_rt_us = 30,
                                                          .min_gpu_bytes = GP_KNOB_CALIBRATE,
                                                          .lone_gpu_bytes = GP_KNOB_CALIBRATE, .gpu_share = 0.3 };
        assert_true(gp_calib_cache_write(&f.e->policy, &gp_exec_host, c));
        teardown(&f);
    }
    setup_cached(&f, dir);
    assert_int_equal(run_in_job(&f, prior_job_main), 1);
    teardown(&f);
    setup_cached(&f, dir);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 8192, 0), 1);       /* >= min */
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 1000, 0), 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 512 << 10, 1), 0); /* lone */
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 2 << 20, 1), 1);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_CHACHA20_POLY1305, 16 << 20, 0), 0);  /* never */
    /* no numbers for AES-CTR: the prior */
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_CTR, 1 << 20, 0), 1);
    teardown(&f);
    cache_rmdir(dir);
}


/* ---- what is known before measuring: the priors (policy/priors.c), the machine's calibration ---- */

/* A host of a class the priors cover (a test hook names the GPU's model; the host executor stands
 * in for it): its first large message goes where the class's numbers send it, before any
 * measurement, and a process routes by them without measuring. */
static void test_priors(void **state)
{
    fixture f;
    char dir[64];
    const char *saved = getenv("OPENSSL_ia32cap");
    char *saved_cap = saved != NULL ? strdup(saved) : NULL;

    (void)state;
    unsetenv("OPENSSL_ia32cap");
    cache_tmpdir(dir, sizeof(dir));
    /* no class (no model): a lone caller's large message waits for a measurement on the CPU */
    setup_known(&f, dir, "off", "", 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_CHACHA20_POLY1305, 16u << 20, 1), 0);
    teardown(&f);
    /* a model no class covers: the same */
    setup_known(&f, dir, "off", "NVIDIA A100-SXM4-80GB", 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_CHACHA20_POLY1305, 16u << 20, 1), 0);
    teardown(&f);
    if (strcmp(gp_machine_cpu_class(), "other") == 0) {
        cache_rmdir(dir);
        free(saved_cap);
        skip();   /* cores without AVX2: no class covers them */
    }
    /* H200 (and the H100 it stands for): a lone caller's 16 MiB message goes to the GPU at once,
     * for each algorithm; a 4 KiB one stays on the CPU */
    for (int m = 0; m < 2; m++) {
        setup_known(&f, dir, "off", m == 0 ? "NVIDIA H200" : "NVIDIA H100 80GB HBM3", 0);
        for (uint32_t alg = GP_ALG_AES_CTR; alg <= GP_ALG_CHACHA20_POLY1305; alg++) {
            assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, alg, 16u << 20, 1), 1);
            assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, alg, 4096, 1), 0);
        }
        assert_non_null(f.e->policy.hy.prior_name);
        teardown(&f);
    }
    /* A process routes by them without measuring (the host executor never wins a measurement),
     * and says where they came from; nothing is written to the user's cache. */
    setup_known(&f, dir, "off", "NVIDIA H200", 0);
    assert_ptr_equal(one(&f, 13, 16u << 20), &gp_exec_host);
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_PRIOR);
    gp_hybrid_print(&f.e->policy);
    {
        gp_calib_numbers got[5];

        assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 0);
    }
    teardown(&f);
    /* The cores' class follows OPENSSL_ia32cap, as the default provider's code does: without
     * AVX-512, VAES and VPCLMULQDQ, AES-GCM's CPU side is slower and the GPU takes smaller messages. */
    setup_known(&f, dir, "off", "NVIDIA H200", 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 1u << 20, 1), 0);
    teardown(&f);
    setenv("OPENSSL_ia32cap", ":~0x600DC230000", 1);
    assert_string_equal(gp_machine_cpu_class(), "avx2");
    setup_known(&f, dir, "off", "NVIDIA H200", 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 1u << 20, 1), 1);
    teardown(&f);
    setenv("OPENSSL_ia32cap", ":~0x600DC230020", 1);   /* no AVX2 either */
    assert_string_equal(gp_machine_cpu_class(), "other");
    setup_known(&f, dir, "off", "NVIDIA H200", 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_CHACHA20_POLY1305, 16u << 20, 1), 0);
    teardown(&f);
    unsetenv("OPENSSL_ia32cap");
    /* knob priors = 0: none */
    {
        gp_knobs k;

        setup_known(&f, dir, "off", "NVIDIA H200", 0);
        k = *f.e->policy.knobs;
        k.priors = 0;
        f.e->policy.knobs = &k;
        assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_CHACHA20_POLY1305, 16u << 20, 1), 0);
        f.e->policy.knobs = &f.e->knobs;
        teardown(&f);
    }
    if (saved_cap != NULL)
        setenv("OPENSSL_ia32cap", saved_cap, 1);
    free(saved_cap);
    cache_rmdir(dir);
}

/* A fresh H200-class host routes a lone caller's pipeline calls of ChaCha20-Poly1305 by the
 * priors' batch rate: 32 x 16 KiB to the GPU, 2 x 16 KiB to the CPU (on either class of cores). */
static void test_batch_rule_priors(void **state)
{
    fixture f;
    char dir[64];
    const uint32_t ccp = GP_ALG_CHACHA20_POLY1305;

    (void)state;
    if (strcmp(gp_machine_cpu_class(), "other") == 0)
        skip();   /* cores without AVX2: no class covers them */
    cache_tmpdir(dir, sizeof(dir));
    setup_known(&f, dir, "off", "NVIDIA H200", 0);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 16384, 32 * 16384), &gp_exec_host);
    assert_int_equal(f.e->policy.hy.source[ccp], GP_SRC_PRIOR);
    assert_true(f.e->policy.hy.alg[ccp].batch_gbps > 0);
    assert_ptr_equal(gp_hybrid_route_batch(&f.e->policy, &gp_exec_host, ccp, 32, 16384, 2 * 16384), &gp_exec_cpu);
    gp_hybrid_print(&f.e->policy);
    teardown(&f);
    cache_rmdir(dir);
}

/* The machine's calibration (gpuprov-calibrate --system): written readable by all, read where the
 * user's cache has nothing, refused when others could have written it; the user's own wins; and
 * knob calib_refresh measures whatever is known and rewrites it. */
static void test_system_calibration(void **state)
{
    fixture f;
    char user[64], sys[64], path[1024], key[2048];
    gp_calib_numbers c[5] = { 0 }, got[5];
    struct stat st;

    (void)state;
    cache_tmpdir(user, sizeof(user));
    cache_tmpdir(sys, sizeof(sys));
    assert_int_equal(chmod(sys, 0755), 0);
    /* gpuprov-calibrate --system points the user's cache at the machine's directory */
    setup_known(&f, sys, sys, "", 0);
    c[GP_ALG_AES_GCM] = (gp_calib_numbers){ .have = 1, .keylen = 32, .at = (long long)time(NULL) - 30 * 24 * 3600,
                                            .cpu_gbps = 4, .gpu_gbps = 20, .gpu_rt_us = 30,
                                            .min_gpu_bytes = 4096, .lone_gpu_bytes = 65536, .gpu_share = 1 };
    assert_true(gp_calib_cache_write(&f.e->policy, &gp_exec_host, c));
    assert_true(gp_calib_cache_file(&f.e->policy, &gp_exec_host, path, sizeof(path), key, sizeof(key)));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    teardown(&f);
    /* read as the machine's (older than the user cache's age limit: an administrator's is kept) */
    setup_known(&f, user, sys, "", 0);
    assert_int_equal(gp_calib_cache_read_from(&f.e->policy, &gp_exec_host, GP_CALIB_SYSTEM, got), 1);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 70000, 1), 1);
    assert_ptr_equal(one(&f, 13, 70000), &gp_exec_host);
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_SYSTEM_CACHE);
    gp_hybrid_print(&f.e->policy);
    teardown(&f);
    /* writable by its group: refused (the same for its directory) */
    assert_int_equal(chmod(path, 0664), 0);
    setup_known(&f, user, sys, "", 0);
    assert_int_equal(gp_calib_cache_read_from(&f.e->policy, &gp_exec_host, GP_CALIB_SYSTEM, got), 0);
    teardown(&f);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(chmod(sys, 0777), 0);
    setup_known(&f, user, sys, "", 0);
    assert_int_equal(gp_calib_cache_read_from(&f.e->policy, &gp_exec_host, GP_CALIB_SYSTEM, got), 0);
    teardown(&f);
    assert_int_equal(chmod(sys, 0755), 0);
    /* the user's own numbers win over the machine's */
    setup_known(&f, user, sys, "", 0);
    c[GP_ALG_AES_GCM].at = (long long)time(NULL);
    c[GP_ALG_AES_GCM].min_gpu_bytes = c[GP_ALG_AES_GCM].lone_gpu_bytes = GP_KNOB_CALIBRATE;
    c[GP_ALG_AES_GCM].gpu_share = 0;
    assert_true(gp_calib_cache_write(&f.e->policy, &gp_exec_host, c));
    teardown(&f);
    setup_known(&f, user, sys, "", 0);
    assert_int_equal(gp_hybrid_prior(&f.e->policy, &gp_exec_host, GP_ALG_AES_GCM, 70000, 1), 0);
    assert_ptr_equal(one(&f, 13, 70000), &gp_exec_cpu);
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_USER_CACHE);
    teardown(&f);
    /* calib_refresh: measured anew (the host executor never wins), and the user's file rewritten */
    setup_known(&f, user, sys, "NVIDIA H200", 1);
    assert_ptr_equal(one(&f, 13, 1 << 16), &gp_exec_cpu);
    assert_int_equal(f.e->policy.hy.source[GP_ALG_AES_GCM], GP_SRC_MEASURED);
    assert_int_equal(gp_calib_cache_read(&f.e->policy, &gp_exec_host, got), 1);
    assert_true(got[GP_ALG_AES_GCM].cpu_gbps == f.e->policy.hy.alg[GP_ALG_AES_GCM].cpu_gbps);
    teardown(&f);
    cache_rmdir(user);
    cache_rmdir(sys);
}

/* ---- the GPU opened only for work the known numbers could send there (batching/policy/warm.c) ---- */

/* An auto engine with the host executor as its GPU side and its persisted numbers in `dir`. */
static void setup_auto_cached(fixture *f, const char *dir)
{
    gp_knobs k;

    gp_knobs_load(&k, NULL, NULL);
    k.backend = GP_BACKEND_AUTO;
    k.hybrid_gpu_host = 1;
    k.stats = 1;
    snprintf(k.calib_cache, sizeof(k.calib_cache), "%s", dir);
    f->lib = OSSL_LIB_CTX_new();
    f->dflt = OSSL_PROVIDER_load(f->lib, "default");
    f->e = gp_engine_new(&k, f->lib);
    assert_non_null(f->e);
    gptest_rand_bytes(f->raw, sizeof(f->raw));
    f->key = gp_key_new(f->e, GP_ALG_AES_GCM, f->raw, 32);
    assert_non_null(f->key);
}

/* The numbers an earlier process measured, as calib_cache.c keeps them: AES-256-GCM goes to the
 * GPU from 4 KiB when callers are not lone and never for a lone one (lone_gpu_bytes `lone`),
 * ChaCha20-Poly1305 never. */
static void write_numbers(const char *dir, size_t lone)
{
    fixture f;
    gp_calib_numbers c[5] = { 0 };

    setup_auto_cached(&f, dir);
    c[GP_ALG_AES_GCM] = (gp_calib_numbers){ .have = 1, .keylen = 32, .at = (long long)time(NULL), .cpu_gbps = 9,
                                            .gpu_gbps = 20, .gpu_rt_us = 30, .min_gpu_bytes = 4096,
                                            .lone_gpu_bytes = lone, .gpu_share = 0.6 };
    c[GP_ALG_CHACHA20_POLY1305] = (gp_calib_numbers){ .have = 1, .keylen = 32, .at = (long long)time(NULL),
                                                      .cpu_gbps = 3, .gpu_gbps = 2, .gpu_rt_us = 30,
                                                      .min_gpu_bytes = GP_KNOB_CALIBRATE,
                                                      .lone_gpu_bytes = GP_KNOB_CALIBRATE, .gpu_share = 0.4 };
    assert_true(gp_calib_cache_write(&f.e->policy, &gp_exec_host, c));
    teardown(&f);
}

/* One message of `len` bytes under key k, encrypted through f->e and checked against the default
 * provider where k is f->key. */
static void message_of(fixture *f, gp_key *k, size_t len)
{
    uint8_t iv[12] = { 1 }, tag[16], ref_tag[16];
    uint8_t *in = calloc(1, len), *out = malloc(len), *ref = malloc(len);
    gp_msg *m = gp_msg_new(f->e);

    assert_non_null(m);
    assert_true(gp_msg_start(m, k, iv, 12, 1));
    assert_true(gp_msg_crypt(m, in, out, len));
    assert_true(gp_msg_tag(m, tag));
    if (k == f->key) {
        reference(f, iv, NULL, 0, in, len, ref, ref_tag);
        assert_memory_equal(out, ref, len);
        assert_memory_equal(tag, ref_tag, 16);
    }
    gp_msg_free(m);
    free(in);
    free(out);
    free(ref);
}

static gp_key *chacha_key;

static int chacha_job_main(void *arg)
{
    message_of(*(fixture **)arg, chacha_key, 2048);
    return 1;
}

static int gcm_job_main(void *arg)
{
    fixture *f = *(fixture **)arg;

    message_of(f, f->key, 2048);
    return 1;
}

static int host_opened(fixture *f)
{
    int o;

    pthread_mutex_lock(&f->e->open_lock);
    o = f->e->opened[GP_EXEC_HOST];
    pthread_mutex_unlock(&f->e->open_lock);
    return o;
}

/* The stats line gp_warm_print writes (stderr caught in a file), malloc'd. */
static char *warm_line(fixture *f)
{
    char path[] = "/tmp/gpuprov-warmline-XXXXXX", *text;
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);

    assert_true(fd >= 0 && saved >= 0);
    fflush(stderr);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    gp_warm_print(&f->e->policy);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    close(fd);
    text = read_text(path);
    unlink(path);
    return text;
}

/*
 * backend auto, numbers cached: a process whose messages the numbers keep on the CPU never opens
 * the GPU side (here the host executor standing in for it): a lone thread's 1 MiB AES-256-GCM
 * messages (the cache's lone_gpu_bytes: never), ChaCha20-Poly1305 even inside async jobs (the GPU
 * never wins it). The stats line says why. Work the numbers would send there opens it: an
 * AES-256-GCM message in an async job, or a lone 1 MiB one where the lone threshold is 512 KiB.
 * Without numbers a large message opens it as before, so that the warm-up measures them.
 */
static void test_gpu_opened_only_for_gpu_work(void **state)
{
    fixture f;
    char dir[64], *line;
    unsigned gen1 = gp_fork_generation() + 1;

    (void)state;
    atomic_store(&gp_test_cpus_saturated, 0);
    cache_tmpdir(dir, sizeof(dir));
    write_numbers(dir, GP_KNOB_CALIBRATE);
    setup_auto_cached(&f, dir);
    for (int i = 0; i < 3; i++)
        message_of(&f, f.key, 1 << 20);   /* the cpu executor: each a large request, lone */
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, 1 << 20, 1), 0);   /* a first request */
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, 1 << 20, 0), 0);   /* a stream */
    gp_engine_note_large(f.e, GP_ALG_AES_GCM, 4 << 20);                            /* a lane update */
    assert_int_equal(warm_started(&f), 0);
    assert_int_equal(host_opened(&f), 0);
    assert_int_equal(atomic_load(&f.e->policy.warm.kept_gen), gen1);
    assert_int_equal(atomic_load(&f.e->policy.warm.kept_alg), GP_ALG_AES_GCM);
    assert_int_equal(atomic_load(&f.e->policy.warm.kept_len), 4 << 20);
    assert_int_equal(atomic_load(&f.e->policy.warm.kept_lone), 1);
    line = warm_line(&f);
    assert_non_null(strstr(line, "gpuprov warm-up: gpu not opened: the calibration keeps every message shown on "
                                 "the cpu (the largest: aes-gcm of 4194304 B, a lone caller)"));
    free(line);
    /* ChaCha20-Poly1305 in async jobs: demand, but never the GPU's. */
    chacha_key = gp_key_new(f.e, GP_ALG_CHACHA20_POLY1305, f.raw, 32);
    assert_non_null(chacha_key);
    for (int i = 0; i < 3; i++)
        assert_int_equal(run_in_job(&f, chacha_job_main), 1);
    assert_int_equal(warm_started(&f), 0);
    assert_int_equal(host_opened(&f), 0);
    line = warm_line(&f);
    assert_non_null(strstr(line, "gpu not opened: the calibration keeps every message shown on the cpu (the largest:"
                                 " chacha20-poly1305 of any size, not a lone caller)"));
    free(line);
    /* AES-256-GCM in an async job: the numbers send such messages to the GPU from 4 KiB. */
    assert_int_equal(run_in_job(&f, gcm_job_main), 1);
    assert_int_equal(warm_started(&f), 1);
    assert_int_equal(warm_finished(&f), 1);
    assert_int_equal(host_opened(&f), 1);
    assert_string_equal(gp_engine_backend_name(f.e), "hybrid");
    line = warm_line(&f);
    assert_non_null(strstr(line, "gpuprov warm-up: open "));
    free(line);
    gp_key_free(chacha_key);
    teardown(&f);

    /* A lone 1 MiB message where lone callers go to the GPU from 512 KiB. */
    write_numbers(dir, 512 << 10);
    setup_auto_cached(&f, dir);
    assert_int_equal(gp_engine_move_to_gpu(f.e, GP_ALG_AES_GCM, 1 << 20, 1), 1);
    assert_int_equal(warm_started(&f), 1);
    assert_int_equal(host_opened(&f), 1);
    teardown(&f);
    cache_rmdir(dir);

    /* No numbers (the cache off): a large message starts the warm-up, which measures them. */
    setup_auto_cached(&f, "off");
    message_of(&f, f.key, 1 << 20);
    assert_int_equal(warm_started(&f), 1);
    assert_int_equal(atomic_load(&f.e->policy.warm.kept_gen), 0);
    teardown(&f);
    atomic_store(&gp_test_cpus_saturated, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_rules),
        cmocka_unit_test(test_batch_routes_together),
        cmocka_unit_test(test_batch_rule),
        cmocka_unit_test(test_batch_rule_priors),
        cmocka_unit_test(test_async_is_not_lone),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_dup_holds_aad),
        cmocka_unit_test(test_calibration),
        cmocka_unit_test(test_lone_crossing),
        cmocka_unit_test(test_calibration_in_job),
        cmocka_unit_test(test_auto_warmup),
        cmocka_unit_test(test_warm_wait),
        cmocka_unit_test(test_cpu_ticks_read),
        cmocka_unit_test(test_cache_written_and_read),
        cmocka_unit_test(test_cache_rejects),
        cmocka_unit_test(test_cache_unwritable),
        cmocka_unit_test(test_prior),
        cmocka_unit_test(test_priors),
        cmocka_unit_test(test_system_calibration),
        cmocka_unit_test(test_gpu_opened_only_for_gpu_work),
    };

    gptest_rand_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
