/* SPDX-License-Identifier: Apache-2.0 */
/* OpenSSL 3.5's pipeline API through gpuprov: many messages per EVP call against one message per call, in GB/s. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#ifdef GP_BENCH_CUDA
# include <cuda_runtime_api.h>
# include "cuda_check.h"
#endif

#include "pipe_api.h"   /* tests/common: the pipeline calls, found at run time */

/*
 * Three measurements, each checked first against the default provider (a benchmark of wrong
 * answers is worthless), each the median of --repeats interleaved repeats of --seconds a side:
 *   host:   host memory, one thread: pipeline calls of 32 messages of 16 KiB (EVP_CipherPipeline-
 *           EncryptInit with 32 IVs, one update, Final, the 32 tags) against the default provider
 *           encrypting the same messages one after another on one context (IV re-init, update,
 *           Final, GET_TAG each); ChaCha20-Poly1305 and AES-256-GCM; both GB/s and the ratio.
 *   device: (a CUDA build) data in GPU memory, gpuprov-memory = "device", AES-256-GCM: 1,024
 *           messages of 16 KiB in pipeline calls of 32, and a ResNet-50-shaped set (its state_dict's
 *           320 tensors, 98 MiB in float32: many small, a few large) in pipeline calls of 32, each
 *           call synchronous, and stream-ordered (gpuprov-cuda-stream: a context per call, every
 *           call queued on one stream before any tag is read); beside the same messages one EVP
 *           message per call in device mode.
 * Output: a table, and CSV lines (PIPE_HOST, PIPE_DEVICE) for scripts.
 *
 * Running it. It needs a 3.5 libcrypto at run time (the pipeline API); built against 3.0's headers
 * it finds the calls with dlsym and runs on either. On the GPU host, with OpenSSL 3.5 in $P (the CI
 * build's build-openssl35/prefix, or Debian 13's libssl3t64 unpacked):
 *     meson setup build -Dcuda=enabled -Dgpu_sm=90 && ninja -C build
 *     LD_LIBRARY_PATH=$P/lib build/bench/pipeline_bench --module-dir build/provider
 * GPUPROV_STATS=1 adds gpuprov's stats lines at exit (mean_batch: the requests per batch; a pipeline
 * call of 32 on the GPU side is one batch of 32). Options: --part host|device|all, --seconds,
 * --repeats; --calls N --side gpuprov|default runs N untimed calls of one host side (32 messages
 * each), for instruction counts (bench/pipeline_cost.sh); --call-times P prints, instead of the
 * device cells, each call's time (synchronous, and stream-ordered queueing) over P passes.
 * Targets (issue 51, H200 host): ChaCha20-Poly1305 host pipeline >= 2.5x the default, AES-256-GCM
 * >= 0.97x; device 1,024 x 16 KiB >= 30 GB/s synchronous, >= 100 stream-ordered; ResNet-50 set
 * >= 100 GB/s.
 */

#ifndef GP_BUILD_MODULE_DIR
# define GP_BUILD_MODULE_DIR "build/provider"
#endif
#define NPIPES 32
#define MSG 16384

static OSSL_LIB_CTX *libctx;
static pipe_api api;
static double seconds = 0.5;
static int repeats = 5;
static size_t host_msg = MSG;   /* --msg-bytes: the host cells' message length */
static char host_ciphers[128] = "ChaCha20-Poly1305,AES-256-GCM";   /* --ciphers: the host cells' */
static long fixed_calls;        /* --calls N: N calls of one side, untimed (instruction counts) */
static const char *fixed_side = "gpuprov";   /* --side gpuprov|default: which side --calls runs */
static int call_times;          /* --call-times P: the device sets call by call over P passes, no cells */

static void die(const char *what)
{
    fprintf(stderr, "pipeline_bench: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15u + 1;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

/* The cipher of the cells that run: its key and IV lengths, and whether it makes tags (AES-256-GCM
 * and ChaCha20-Poly1305 by default; --ciphers may name AES-128-CTR or ChaCha20 for the host cells). */
static int key_len = 32, iv_len = 12, aead = 1;

/* An IV (iv_len bytes, 12 or 16) unique to message k; a 16-byte counter block starts at 0. */
static void iv_for(unsigned char iv[16], uint64_t k)
{
    memset(iv, 0, 16);
    memcpy(iv + 4, &k, sizeof(k));
}

static EVP_CIPHER *fetch(const char *name, const char *prov)
{
    EVP_CIPHER *c = EVP_CIPHER_fetch(libctx, name, prov);

    if (c == NULL)
        die("cannot fetch a cipher");
    return c;
}

/*
 * One pipeline call of n messages queued: in[i] -> out[i], len[i] bytes each, IVs of messages
 * first..; `once` (or NULL): parameters set after the context's first init (device mode and a
 * stream: the context keeps them over re-inits). With a stream the call returns once its work is
 * queued on it; pipe_tags then waits for this call's messages only.
 */
static void pipe_queue(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *c, const unsigned char *key, size_t n,
                       unsigned char *const *in, unsigned char *const *out, const size_t *len, uint64_t first,
                       const OSSL_PARAM *once)
{
    unsigned char ivs[NPIPES][16];
    const unsigned char *ivp[NPIPES];
    size_t outl[NPIPES], outsize[NPIPES];

    for (size_t i = 0; i < n; i++) {
        iv_for(ivs[i], first + i);
        ivp[i] = ivs[i];
        outsize[i] = len[i];
    }
    /* The cipher only at the context's first init: given again, OpenSSL 3.5's EVP resets the
     * context (EVP_CIPHER_CTX_reset) after taking numpipes, and frees gpuprov's pipeline with it. */
    if (api.encrypt_init(ctx, EVP_CIPHER_CTX_get0_cipher(ctx) == NULL ? c : NULL, key, (size_t)key_len, n, ivp, (size_t)iv_len) != 1)
        die("pipeline init failed");
    if (once != NULL && EVP_CIPHER_CTX_set_params(ctx, once) != 1)
        die("device mode (or its stream) refused");
    if (api.update(ctx, (unsigned char **)out, outl, outsize, (const unsigned char **)in, len) != 1)
        die("pipeline update failed");
    for (size_t i = 0; i < n; i++)
        outsize[i] = 0;
    if (api.final(ctx, (unsigned char **)out, outl, outsize) != 1)
        die("pipeline Final failed");
}

/* The n tags of the context's last pipeline call (AEAD ciphers). */
static void pipe_tags(EVP_CIPHER_CTX *ctx, size_t n, unsigned char tags[][16])
{
    unsigned char *tagp[NPIPES], **tp = tagp;
    OSSL_PARAM p[2] = { OSSL_PARAM_END, OSSL_PARAM_END };

    if (!aead)
        return;
    for (size_t i = 0; i < n; i++)
        tagp[i] = tags[i];
    p[0] = pipe_tag_param(&tp, 16);
    if (EVP_CIPHER_CTX_get_params(ctx, p) != 1)
        die("pipeline tags failed");
}

static void pipe_call(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *c, const unsigned char *key, size_t n,
                      unsigned char *const *in, unsigned char *const *out, const size_t *len, uint64_t first,
                      unsigned char tags[][16], const OSSL_PARAM *once)
{
    pipe_queue(ctx, c, key, n, in, out, len, first, once);
    pipe_tags(ctx, n, tags);
}

/* One message on a context whose key is set: IV re-init, update, Final, tag. */
static void one_msg(EVP_CIPHER_CTX *ctx, const unsigned char *in, unsigned char *out, size_t len, uint64_t k,
                    unsigned char tag[16])
{
    unsigned char iv[16], fin[16];
    int outl;

    iv_for(iv, k);
    if (EVP_EncryptInit_ex2(ctx, NULL, NULL, iv, NULL) != 1
        || (len > 0 && EVP_EncryptUpdate(ctx, out, &outl, in, (int)len) != 1)
        || EVP_EncryptFinal_ex(ctx, fin, &outl) != 1
        || (aead && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1))
        die("a message failed");
}

/* ---- host memory, one thread ---- */

static void bench_host(const char *cipher)
{
    EVP_CIPHER *gp = fetch(cipher, "provider=gpuprov"), *df = fetch(cipher, "provider=default");
    EVP_CIPHER_CTX *pc = EVP_CIPHER_CTX_new(), *dc = EVP_CIPHER_CTX_new();
    unsigned char key[32], *in[NPIPES], *out[NPIPES], *ref = malloc(host_msg), tags[NPIPES][16], rtag[16];
    size_t len[NPIPES];
    double gps[64], dfs[64], t0;
    uint64_t k = 0;

    if (pc == NULL || dc == NULL || ref == NULL || repeats > 64)
        die("out of memory");
    if (!api.can_pipeline(gp, 1))
        die("gpuprov's cipher does not pipeline (passthrough: backend auto on a host without a GPU)");
    key_len = EVP_CIPHER_get_key_length(gp);
    iv_len = EVP_CIPHER_get_iv_length(gp);
    aead = (EVP_CIPHER_get_flags(gp) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0;
    if (key_len > 32 || (iv_len != 12 && iv_len != 16))
        die("a cipher of another key or IV length");
    memset(tags, 0, sizeof(tags));
    memset(rtag, 0, sizeof(rtag));
    fill(key, sizeof(key), 1);
    for (int i = 0; i < NPIPES; i++) {
        in[i] = malloc(host_msg);
        out[i] = malloc(host_msg);
        if (in[i] == NULL || out[i] == NULL)
            die("out of memory");
        fill(in[i], host_msg, 10 + (uint64_t)i);
        len[i] = host_msg;
    }
    if (EVP_EncryptInit_ex2(dc, df, key, NULL, NULL) != 1)
        die("default init failed");
    /* The check: every pipe is the default's message. */
    pipe_call(pc, gp, key, NPIPES, in, out, len, 0, tags, NULL);
    for (int i = 0; i < NPIPES; i++) {
        one_msg(dc, in[i], ref, host_msg, (uint64_t)i, rtag);
        if (memcmp(ref, out[i], host_msg) != 0 || memcmp(rtag, tags[i], 16) != 0)
            die("a pipe differs from the default provider");
    }
    if (fixed_calls > 0) {
        /* Instruction counts (bench/pipeline_cost.sh): N calls of one side, no clock, no warm-up. */
        for (long c = 0; c < fixed_calls; c++) {
            if (strcmp(fixed_side, "default") == 0)
                for (int i = 0; i < NPIPES; i++)
                    one_msg(dc, in[i], out[i], host_msg, k++, tags[i]);
            else
                pipe_call(pc, gp, key, NPIPES, in, out, len, k += NPIPES, tags, NULL);
        }
        printf("PIPE_CALLS,%s,%s,%ld\n", cipher, fixed_side, fixed_calls);
        goto done;
    }
    /* Warm: under backend auto the GPU opens and is measured meanwhile (the calls' demand). */
    for (t0 = now_s(); now_s() - t0 < 1.0;)
        pipe_call(pc, gp, key, NPIPES, in, out, len, k += NPIPES, tags, NULL);
    for (int r = 0; r < repeats; r++) {
        size_t calls = 0;

        for (t0 = now_s(); now_s() - t0 < seconds; calls++)
            pipe_call(pc, gp, key, NPIPES, in, out, len, k += NPIPES, tags, NULL);
        gps[r] = (double)calls * NPIPES * host_msg / (now_s() - t0) / 1e9;
        calls = 0;
        for (t0 = now_s(); now_s() - t0 < seconds; calls++)
            for (int i = 0; i < NPIPES; i++)
                one_msg(dc, in[i], out[i], host_msg, k++, tags[i]);
        dfs[r] = (double)calls * NPIPES * host_msg / (now_s() - t0) / 1e9;
    }
    {
        double g = median(gps, repeats), d = median(dfs, repeats);

        printf("%-18s host, 1 thread, %d x %zu KiB: gpuprov pipeline %7.2f GB/s   default one by one %7.2f GB/s   "
               "ratio %.2fx\n", cipher, NPIPES, host_msg / 1024, g, d, g / d);
        printf("PIPE_HOST,%s,%d,%zu,%.3f,%.3f,%.3f\n", cipher, NPIPES, host_msg, g, d, g / d);
    }
done:
    for (int i = 0; i < NPIPES; i++) {
        free(in[i]);
        free(out[i]);
    }
    free(ref);
    EVP_CIPHER_CTX_free(pc);
    EVP_CIPHER_CTX_free(dc);
    EVP_CIPHER_free(gp);
    EVP_CIPHER_free(df);
    key_len = 32, iv_len = 12, aead = 1;   /* the device cells' AES-256-GCM */
}

/* ---- device memory (a CUDA build) ---- */

#ifdef GP_BENCH_CUDA
/* ResNet-50's state_dict (torchvision), float32, in its order: each conv's weight, each batch
 * norm's weight, bias, running_mean, running_var (C floats each) and num_batches_tracked (one
 * int64), the four stages' bottlenecks ([3, 4, 6, 3], expansion 4, a projection in each stage's
 * first block), the classifier. 320 tensors, 25.6 M parameters: 98 MiB. */
static size_t resnet50_sizes(size_t *out)
{
    static const int width[4] = { 64, 128, 256, 512 }, blocks[4] = { 3, 4, 6, 3 };
    size_t n = 0, in = 64;

#define CONV(o, i, k) (out[n++] = (size_t)(o) * (i) * (k) * (k) * 4)
#define BN(c) (out[n++] = (size_t)(c) * 4, out[n++] = (size_t)(c) * 4, out[n++] = (size_t)(c) * 4, \
               out[n++] = (size_t)(c) * 4, out[n++] = 8)
    CONV(64, 3, 7);
    BN(64);
    for (int s = 0; s < 4; s++) {
        for (int b = 0; b < blocks[s]; b++) {
            const size_t w = (size_t)width[s];

            CONV(w, in, 1);
            BN(w);
            CONV(w, w, 3);
            BN(w);
            CONV(4 * w, w, 1);
            BN(4 * w);
            if (b == 0) {
                CONV(4 * w, in, 1);
                BN(4 * w);
            }
            in = 4 * w;
        }
    }
    out[n++] = (size_t)1000 * 2048 * 4;
    out[n++] = (size_t)1000 * 4;
#undef CONV
#undef BN
    return n;
}

/* The set's messages in one device allocation each way (each at a 256-byte boundary, as CUDA's
 * allocator places tensors). */
typedef struct dev_set {
    size_t n, total;
    size_t *len;
    unsigned char **in, **out;
    unsigned char *in_base, *out_base;
} dev_set;

static void set_make(dev_set *s, const size_t *len, size_t n)
{
    size_t off = 0;
    unsigned char *h;

    s->n = n;
    s->len = malloc(n * sizeof(*s->len));
    s->in = malloc(n * sizeof(*s->in));
    s->out = malloc(n * sizeof(*s->out));
    if (s->len == NULL || s->in == NULL || s->out == NULL)
        die("out of memory");
    for (size_t i = 0; i < n; i++)
        off += (len[i] + 255) & ~(size_t)255;
    s->total = off;
    CHECK(cudaMalloc((void **)&s->in_base, off));
    CHECK(cudaMalloc((void **)&s->out_base, off));
    if ((h = malloc(off)) == NULL)
        die("out of memory");
    fill(h, off, 77);
    CHECK(cudaMemcpy(s->in_base, h, off, cudaMemcpyHostToDevice));
    free(h);
    off = 0;
    for (size_t i = 0; i < n; i++) {
        s->len[i] = len[i];
        s->in[i] = s->in_base + off;
        s->out[i] = s->out_base + off;
        off += (len[i] + 255) & ~(size_t)255;
    }
}

static void set_free(dev_set *s)
{
    CHECK(cudaFree(s->in_base));
    CHECK(cudaFree(s->out_base));
    free(s->len);
    free(s->in);
    free(s->out);
}

static size_t set_bytes(const dev_set *s)
{
    size_t b = 0;

    for (size_t i = 0; i < s->n; i++)
        b += s->len[i];
    return b;
}

/* The calls of a set: NPIPES messages each, the last one short. */
static size_t set_calls(const dev_set *s)
{
    return (s->n + NPIPES - 1) / NPIPES;
}

/* The messages of the call that starts at message i. */
static size_t call_msgs(const dev_set *s, size_t i)
{
    return s->n - i < NPIPES ? s->n - i : NPIPES;
}

/* The whole set in synchronous pipeline calls of NPIPES on one context; tags[] gets every message's
 * tag. `*once`: the context's parameters, set at its first call (then NULL). */
static void set_pipelined(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *c, const unsigned char *key, const dev_set *s,
                          uint64_t first, unsigned char (*tags)[16], const OSSL_PARAM **once)
{
    for (size_t i = 0; i < s->n; i += NPIPES) {
        size_t m = call_msgs(s, i);

        pipe_call(ctx, c, key, m, s->in + i, s->out + i, s->len + i, first + i, tags + i, *once);
        *once = NULL;
    }
}

/* The whole set stream-ordered: call k on context ctx[k] (its device mode and stream set at its
 * first call: fresh[k]), every call queued before any tag is read (a tag waits for its own call),
 * as a program that encrypts many tensors on its stream does (python/gpuprov_tensors.py). */
static void set_ordered(EVP_CIPHER_CTX **ctx, const EVP_CIPHER *c, const unsigned char *key, const dev_set *s,
                        uint64_t first, unsigned char (*tags)[16], const OSSL_PARAM *once, int *fresh)
{
    size_t k = 0;

    for (size_t i = 0; i < s->n; i += NPIPES, k++) {
        pipe_queue(ctx[k], c, key, call_msgs(s, i), s->in + i, s->out + i, s->len + i, first + i,
                   fresh[k] ? once : NULL);
        fresh[k] = 0;
    }
    k = 0;
    for (size_t i = 0; i < s->n; i += NPIPES, k++)
        pipe_tags(ctx[k], call_msgs(s, i), tags + i);
}

static void set_per_call(EVP_CIPHER_CTX *ctx, const dev_set *s, uint64_t first, unsigned char (*tags)[16])
{
    for (size_t i = 0; i < s->n; i++)
        one_msg(ctx, s->in[i], s->out[i], s->len[i], first + i, tags[i]);
}

/* The check: every message of the set against the default provider on host copies. */
static void set_check(const dev_set *s, const unsigned char *key, uint64_t first, unsigned char (*tags)[16])
{
    EVP_CIPHER *df = fetch("AES-256-GCM", "provider=default");
    EVP_CIPHER_CTX *dc = EVP_CIPHER_CTX_new();
    unsigned char *in = malloc(s->total), *out = malloc(s->total), *ref = malloc(s->total), rtag[16];

    if (dc == NULL || in == NULL || out == NULL || ref == NULL || EVP_EncryptInit_ex2(dc, df, key, NULL, NULL) != 1)
        die("out of memory");
    CHECK(cudaMemcpy(in, s->in_base, s->total, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(out, s->out_base, s->total, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < s->n; i++) {
        size_t off = (size_t)(s->in[i] - s->in_base);

        one_msg(dc, in + off, ref + off, s->len[i], first + i, rtag);
        if (memcmp(ref + off, out + off, s->len[i]) != 0 || memcmp(rtag, tags[i], 16) != 0)
            die("device mode: a message differs from the default provider");
    }
    free(in);
    free(out);
    free(ref);
    EVP_CIPHER_CTX_free(dc);
    EVP_CIPHER_free(df);
}

/*
 * --call-times: where a pass's time goes, call by call: each synchronous pipeline call's wall time,
 * each stream-ordered call's time to queue, and each stream-ordered call alone (queued, then its
 * tags read: the GPU's time for it too); medians over `passes` passes, with the call's
 * messages, bytes and largest message (a batch's kernel runs at least as long as its largest
 * message alone: bench/kernel_bench).
 */
static void set_call_times(EVP_CIPHER_CTX *pc, EVP_CIPHER_CTX **oc, const EVP_CIPHER *c, const unsigned char *key,
                           const dev_set *s, uint64_t *k, unsigned char (*tags)[16], int passes, cudaStream_t stream)
{
    const size_t calls = set_calls(s);
    double *sync_us = malloc(calls * passes * sizeof(double)), *queue_us = malloc(calls * passes * sizeof(double));
    double *alone_us = malloc(calls * passes * sizeof(double)), *tags_us = malloc(passes * sizeof(double)), col[64];

    if (sync_us == NULL || queue_us == NULL || alone_us == NULL || tags_us == NULL)
        die("out of memory");
    for (int p = 0; p < passes; p++) {
        size_t j = 0;
        double t;

        for (size_t i = 0; i < s->n; i += NPIPES, j++) {
            size_t m = call_msgs(s, i);

            t = now_s();
            pipe_call(pc, c, key, m, s->in + i, s->out + i, s->len + i, (*k += NPIPES), tags + i, NULL);
            sync_us[j * passes + p] = (now_s() - t) * 1e6;
        }
        j = 0;
        for (size_t i = 0; i < s->n; i += NPIPES, j++) {
            t = now_s();
            pipe_queue(oc[j], c, key, call_msgs(s, i), s->in + i, s->out + i, s->len + i,
                       (*k += NPIPES), NULL);
            queue_us[j * passes + p] = (now_s() - t) * 1e6;
        }
        t = now_s();
        j = 0;
        for (size_t i = 0; i < s->n; i += NPIPES, j++)
            pipe_tags(oc[j], call_msgs(s, i), tags + i);
        tags_us[p] = (now_s() - t) * 1e6;
        /* Each stream-ordered call alone: queued, its Final's tags read (which wait for it). */
        j = 0;
        for (size_t i = 0; i < s->n; i += NPIPES, j++) {
            t = now_s();
            pipe_call(oc[j], c, key, call_msgs(s, i), s->in + i, s->out + i, s->len + i,
                      (*k += NPIPES), tags + i, NULL);
            alone_us[j * passes + p] = (now_s() - t) * 1e6;
        }
        CHECK(cudaStreamSynchronize(stream));
    }
    printf("call | msgs | MiB | largest MiB | synchronous call us | stream-ordered queue us | stream-ordered alone us\n");
    for (size_t j = 0; j < calls; j++) {
        size_t m = call_msgs(s, j * NPIPES), big = 0, bytes = 0;
        double a, b, d;

        for (size_t i = j * NPIPES; i < j * NPIPES + m; i++) {
            bytes += s->len[i];
            big = s->len[i] > big ? s->len[i] : big;
        }
        memcpy(col, sync_us + j * passes, passes * sizeof(double));
        a = median(col, passes);
        memcpy(col, queue_us + j * passes, passes * sizeof(double));
        b = median(col, passes);
        memcpy(col, alone_us + j * passes, passes * sizeof(double));
        d = median(col, passes);
        printf("%4zu | %4zu | %6.2f | %6.2f | %8.1f | %8.1f | %8.1f\n", j, m, bytes / 1048576.0, big / 1048576.0, a, b, d);
        printf("PIPE_CALL_US,%zu,%zu,%zu,%zu,%.1f,%.1f,%.1f\n", j, m, bytes, big, a, b, d);
    }
    printf("stream-ordered: reading every call's tags after the queueing %.1f us (median)\n", median(tags_us, passes));
    free(sync_us);
    free(queue_us);
    free(alone_us);
    free(tags_us);
}

static void bench_device_set(const char *name, const size_t *len, size_t n)
{
    EVP_CIPHER *gp = fetch("AES-256-GCM", "provider=gpuprov");
    EVP_CIPHER_CTX *pc = EVP_CIPHER_CTX_new(), *sc = EVP_CIPHER_CTX_new(), *oc[64];
    OSSL_PARAM dev[3] = { OSSL_PARAM_END, OSSL_PARAM_END, OSSL_PARAM_END }, ord[3];
    const OSSL_PARAM *once = dev;
    unsigned char key[32], (*tags)[16] = malloc(n * 16);
    double pgs[64], ogs[64], sgs[64], t0, bytes;
    int fresh[64];
    uint64_t k = 0, sv;
    cudaStream_t stream;
    size_t calls;
    dev_set s;

    if (pc == NULL || sc == NULL || tags == NULL || repeats > 64)
        die("out of memory");
    fill(key, sizeof(key), 2);
    set_make(&s, len, n);
    bytes = (double)set_bytes(&s);
    if ((calls = set_calls(&s)) > 64)
        die("a set of more than 64 calls");
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    sv = (uint64_t)(uintptr_t)stream;
    dev[0] = OSSL_PARAM_construct_utf8_string("gpuprov-memory", "device", 0);
    ord[0] = dev[0];
    ord[1] = OSSL_PARAM_construct_uint64("gpuprov-cuda-stream", &sv);
    ord[2] = OSSL_PARAM_construct_end();
    for (size_t j = 0; j < calls; j++) {
        if ((oc[j] = EVP_CIPHER_CTX_new()) == NULL)
            die("out of memory");
        fresh[j] = 1;
    }
    if (EVP_EncryptInit_ex2(sc, gp, key, NULL, dev) != 1)
        die("device-mode context refused");
    set_pipelined(pc, gp, key, &s, 0, tags, &once);
    set_check(&s, key, 0, tags);
    CHECK(cudaMemset(s.out_base, 0, s.total));
    set_ordered(oc, gp, key, &s, 0, tags, ord, fresh);
    CHECK(cudaStreamSynchronize(stream));
    set_check(&s, key, 0, tags);
    set_per_call(sc, &s, 0, tags);
    set_check(&s, key, 0, tags);
    if (call_times > 0) {
        set_call_times(pc, oc, gp, key, &s, &k, tags, call_times, stream);
        goto done;
    }
    for (int r = 0; r < repeats; r++) {
        size_t passes = 0;

        for (t0 = now_s(); now_s() - t0 < seconds; passes++)
            set_pipelined(pc, gp, key, &s, k += n, tags, &once);
        pgs[r] = (double)passes * bytes / (now_s() - t0) / 1e9;
        passes = 0;
        for (t0 = now_s(); now_s() - t0 < seconds; passes++)
            set_ordered(oc, gp, key, &s, k += n, tags, ord, fresh);
        ogs[r] = (double)passes * bytes / (now_s() - t0) / 1e9;
        passes = 0;
        for (t0 = now_s(); now_s() - t0 < seconds; passes++)
            set_per_call(sc, &s, k += n, tags);
        sgs[r] = (double)passes * bytes / (now_s() - t0) / 1e9;
    }
    {
        double p = median(pgs, repeats), o = median(ogs, repeats), q = median(sgs, repeats);

        printf("AES-256-GCM device, %-28s (%zu msgs, %.1f MiB): pipeline of %d %7.2f GB/s   on a stream %7.2f GB/s   "
               "one per call %7.2f GB/s   ratio %.1fx\n", name, n, bytes / 1048576.0, NPIPES, p, o, q, p / q);
        printf("PIPE_DEVICE,%s,%zu,%.0f,%.3f,%.3f,%.3f,%.3f\n", name, n, bytes, p, q, p / q, o);
    }
done:
    CHECK(cudaStreamSynchronize(stream));
    for (size_t j = 0; j < calls; j++)
        EVP_CIPHER_CTX_free(oc[j]);
    CHECK(cudaStreamDestroy(stream));
    set_free(&s);
    free(tags);
    EVP_CIPHER_CTX_free(pc);
    EVP_CIPHER_CTX_free(sc);
    EVP_CIPHER_free(gp);
}

static void bench_device(void)
{
    size_t len[1024];
    size_t n;

    for (int i = 0; i < 1024; i++)
        len[i] = MSG;
    bench_device_set("1024 x 16 KiB", len, 1024);
    n = resnet50_sizes(len);
    if (n != 320)
        die("the ResNet-50 set is not 320 tensors");
    bench_device_set("ResNet-50 state_dict", len, n);
}
#endif

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "module-dir", required_argument, NULL, 'm' }, { "seconds", required_argument, NULL, 's' },
        { "repeats", required_argument, NULL, 'r' },    { "part", required_argument, NULL, 'p' },
        { "msg-bytes", required_argument, NULL, 'b' },  { "ciphers", required_argument, NULL, 'c' },
        { "calls", required_argument, NULL, 'n' },      { "side", required_argument, NULL, 'd' },
        { "call-times", required_argument, NULL, 't' },
        { NULL, 0, NULL, 0 },
    };
    const char *dir = getenv("OPENSSL_MODULES") != NULL ? getenv("OPENSSL_MODULES") : GP_BUILD_MODULE_DIR;
    const char *part = "all";
    OSSL_PROVIDER *dflt, *gpuprov;
    int o;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'm': dir = optarg; break;
        case 's': seconds = atof(optarg); break;
        case 'r': repeats = atoi(optarg); break;
        case 'p': part = optarg; break;
        case 'b': host_msg = strtoul(optarg, NULL, 10); break;
        case 'c': snprintf(host_ciphers, sizeof(host_ciphers), "%s", optarg); break;
        case 'n': fixed_calls = atol(optarg); break;
        case 'd': fixed_side = optarg; break;
        case 't': call_times = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: pipeline_bench [--module-dir DIR] [--seconds 0.5] [--repeats 5] "
                            "[--part host|device|all] [--msg-bytes 16384] [--ciphers A,B (host)]\n"
                            "                      [--calls N --side gpuprov|default (host: N untimed calls)]\n"
                            "                      [--call-times P (device: each call's time over P passes)]\n");
            return 2;
        }
    }
    if (repeats < 1 || repeats > 64)
        repeats = 5;
    if (call_times < 0 || call_times > 64)
        call_times = 0;
    if (host_msg == 0 || host_msg > ((size_t)1 << 30))
        host_msg = MSG;
    if (!pipe_api_load(&api)) {
        fprintf(stderr, "pipeline_bench: %s (this libcrypto: %s); run it with a 3.5 libcrypto "
                        "(LD_LIBRARY_PATH=.../lib)\n", PIPE_SKIP_MESSAGE, OpenSSL_version(OPENSSL_VERSION));
        return 77;
    }
    if ((libctx = OSSL_LIB_CTX_new()) == NULL || !OSSL_PROVIDER_set_default_search_path(libctx, dir)
        || (dflt = OSSL_PROVIDER_load(libctx, "default")) == NULL
        || (gpuprov = OSSL_PROVIDER_load(libctx, "gpuprov")) == NULL)
        die("cannot load gpuprov and default");
    printf("pipeline_bench: %s, gpuprov from %s, medians of %d interleaved repeats of %.2f s a side, every cell "
           "checked against the default provider\n", OpenSSL_version(OPENSSL_VERSION), dir, repeats, seconds);
    if (strcmp(part, "device") != 0) {
        for (char *cs = host_ciphers, *c; (c = strtok_r(cs, ",", &cs)) != NULL;)
            bench_host(c);
    }
#ifdef GP_BENCH_CUDA
    if (strcmp(part, "host") != 0)
        bench_device();
#else
    if (strcmp(part, "host") != 0)
        printf("pipeline_bench: device memory needs a CUDA build (-Dcuda=enabled)\n");
#endif
    OSSL_PROVIDER_unload(gpuprov);
    OSSL_PROVIDER_unload(dflt);
    OSSL_LIB_CTX_free(libctx);
    return 0;
}
