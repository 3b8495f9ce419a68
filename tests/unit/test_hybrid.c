/* SPDX-License-Identifier: Apache-2.0 */
/* Hybrid policy tests: which executor each message gets, held AAD, calibration; the host executor plays the GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    on_gpu = gp_hybrid_route(f->e, &gp_exec_host, m, 4096) == &gp_exec_host;
    gp_msg_free(m);
    return on_gpu;
}

static void test_async_is_not_lone(void **state)
{
    fixture f;

    (void)state;
    setup(&f, 0, 1024, 65536, 1.0);
    assert_int_equal(run_in_job(&f, job_main), 1);
    /* The same decision outside the job: lone, so cpu. */
    {
        gp_msg *m = gp_msg_new(f.e);
        static const uint8_t iv[12];

        assert_true(gp_msg_start(m, f.key, iv, 12, 1));
        assert_ptr_equal(gp_hybrid_route(f.e, &gp_exec_host, m, 4096), &gp_exec_cpu);
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
    h = &f.e->hy.alg[GP_ALG_AES_GCM];
    assert_int_equal(atomic_load(&h->ready), 1);
    assert_true(h->cpu_gbps > 0);
    assert_true(h->gpu_gbps > 0);
    assert_true(h->gpu_rt_us > 0);
    assert_true(h->gpu_gbps < h->cpu_gbps);
    assert_true(h->min_gpu_bytes == GP_KNOB_CALIBRATE);      /* never */
    assert_true(h->gpu_share < 0.5);
    gp_hybrid_print(f.e);
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

/* The first routing decision inside an async job measures on a thread of its own (the job's stack
 * is 32 KiB; a CUDA context or the calibration runs must not land there). */
static int calib_job_main(void *arg)
{
    fixture *f = *(fixture **)arg;
    gp_msg *m = gp_msg_new(f->e);
    static const uint8_t iv[12];
    const gp_executor *x;

    assert_true(gp_msg_start(m, f->key, iv, 12, 1));
    x = gp_hybrid_route(f->e, &gp_exec_host, m, 1 << 20);
    gp_msg_free(m);
    return x == &gp_exec_cpu && atomic_load(&f->e->hy.alg[GP_ALG_AES_GCM].ready);
}

static void test_calibration_in_job(void **state)
{
    fixture f;

    (void)state;
    setup(&f, 1, 0, 0, 0);
    assert_int_equal(run_in_job(&f, calib_job_main), 1);
    assert_true(f.e->hy.alg[GP_ALG_AES_GCM].cpu_gbps > 0);
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

    pthread_mutex_lock(&f->e->open_lock);
    started = f->e->warm_started;
    pthread_mutex_unlock(&f->e->open_lock);
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
        if (atomic_load(&f->e->warm_done))
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
    assert_int_equal(atomic_load(&f.e->warm_done), 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_rules),
        cmocka_unit_test(test_async_is_not_lone),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_dup_holds_aad),
        cmocka_unit_test(test_calibration),
        cmocka_unit_test(test_calibration_in_job),
        cmocka_unit_test(test_auto_warmup),
    };

    gptest_rand_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
