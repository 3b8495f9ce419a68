/* SPDX-License-Identifier: Apache-2.0 */
/* The soak: minutes of mixed traffic through gpuprov, checked against the default provider, under CUDA faults. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/async.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/provider.h>

/*
 * The run is cut into epochs. Each loads gpuprov (the test module, whose CUDA fault hooks it sets
 * through the GPUPROV_TEST_CUDA_FAULT_* variables before the load: batching/cuda_fault.h) into a
 * library context of its own, runs sync threads and threads of async jobs against it for
 * --epoch-seconds, stops them, reads gpuprov's counters and the fault table, and unloads it: a
 * failure that moved gpuprov to the CPU lasts until its engine is freed, so a new epoch is a new
 * engine that opens the GPU again. Epoch 0 has no fault and finds the call sites (a site: a file
 * of the cuda executor and a line); epoch k > 0 arms one fault: at the next site in turn, once,
 * after a random share of the calls the site made in an epoch; every --taken-every-th epoch instead takes the GPU away (every call fails
 * from a random point on).
 *
 * Every message runs on two contexts, gpuprov's and the default provider's (a library context
 * of its own), and the return codes, outputs and tags must agree. An output that still holds the
 * canary it was filled with, where the default wrote bytes, is lost; any other difference is
 * wrong. A call (or an async job) taking longer than --hang-seconds is hung: the run reports and
 * exits at once. RSS (/proc/self/status) and GPU memory (nvidia-smi, where there is one) are
 * sampled after each epoch.
 *
 * Device memory (gpuprov-memory = device): --devmem-threads threads stream messages whose input
 * and output are GPU buffers (cudaMalloc through the CUDA runtime found at run time; in CI the
 * test module's stand-in allocations, GPUPROV_TEST_HOST_DEVMEM). There no CPU can take a message
 * over, so in an epoch with a fault armed a call may fail with an error: such a message is counted
 * as refused, not wrong; any other difference is wrong, as for host memory.
 */

#define MAX_SITES 256
#define MAX_THREADS 64
#define MAX_JOBS 64
#define CANARY 0xA5

/* The table batching/cuda_fault.h exports from the test module (same layout). */
typedef struct fault_site {
    const char *file;       /* the file's name; the module stays mapped (RTLD_NOLOAD keeps a reference) */
    int line;
    int call;
    const char *name;
    uint64_t calls;
    uint64_t faults;
} fault_site;
typedef size_t fault_sites_fn(fault_site *out, size_t max);

typedef struct cipher_info {
    const char *name;
    int aead;
    int chacha;             /* ChaCha20: the IV's first word is the block counter */
} cipher_info;

static const cipher_info ciphers[] = {
    { "AES-128-CTR", 0, 0 }, { "AES-192-CTR", 0, 0 }, { "AES-256-CTR", 0, 0 },
    { "AES-128-GCM", 1, 0 }, { "AES-192-GCM", 1, 0 }, { "AES-256-GCM", 1, 0 },
    { "ChaCha20", 0, 1 }, { "ChaCha20-Poly1305", 1, 0 },
};
#define NCIPHERS (sizeof(ciphers) / sizeof(ciphers[0]))

typedef struct options {
    double seconds, epoch_seconds, hang_seconds;
    int threads, async_threads, jobs, taken_every, devmem_threads;
    size_t max_bytes;
    const char *module_dir, *csv, *markdown;
    int faults;             /* walk the fault sites (needs the test module's table) */
    /* The checker's own test: every Nth message's gpuprov output is spoilt (a flipped byte) or
     * dropped (the canary put back) before it is judged; the run must then fail. */
    unsigned spoil_every, drop_every;
} options;

static options opt = {
    .seconds = 60, .epoch_seconds = 3, .hang_seconds = 30, .threads = 4, .async_threads = 2, .jobs = 8,
    .taken_every = 6, .devmem_threads = 1, .max_bytes = 16u << 20, .faults = 1,
};

/* Totals over the run. */
typedef struct counts {
    _Atomic uint64_t ops, bytes, wrong, lost, records, decrypts, tampered, async_ops;
    _Atomic uint64_t devmem_ops, devmem_refused;   /* device-memory messages; failed under a fault */
} counts;
static counts total;

/* One busy mark per sync thread and per async job: the watchdog's view. */
typedef struct busy {
    _Atomic uint64_t since_ns;   /* 0: idle */
    const char *what;            /* the cipher of the message in progress */
    _Atomic size_t len;
} busy;
static busy busy_marks[MAX_THREADS * (MAX_JOBS + 1)];
static _Atomic int hung;
static _Atomic int epoch_faulted;   /* this epoch arms a CUDA fault */

/* This epoch's ciphers: [0] gpuprov, [1] the default provider (its own library context). */
static EVP_CIPHER *gp_ciph[NCIPHERS], *ref_ciph[NCIPHERS];
static _Atomic int stop;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: the traffic's shape and its keys (nothing here is secret). */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void rnd_bytes(uint64_t *s, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rnd(s);

        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* Sizes from 0 B to max_bytes: mostly small, as real traffic is, with every range reached. */
static size_t pick_len(uint64_t *s, size_t max)
{
    unsigned r = (unsigned)(rnd(s) % 100);
    size_t lo, hi;

    if (r < 10)
        lo = 0, hi = 64;
    else if (r < 55)
        lo = 65, hi = 16384;
    else if (r < 85)
        lo = 16385, hi = 1 << 20;
    else
        lo = (1 << 20) + 1, hi = max;
    if (hi > max)
        hi = max;
    if (lo > hi)
        lo = 0;
    return lo + (size_t)(rnd(s) % (hi - lo + 1));
}

/* One message on one context; the result for comparison. */
typedef struct side {
    int rc_init, rc_aad, rc_update, rc_final, rc_tag;
    int outl;                /* bytes written by the updates and Final */
    uint8_t tag[16];
} side;

typedef struct message {
    const cipher_info *ci;
    size_t ci_index;
    int enc;
    uint8_t key[32], iv[16];
    size_t aad_len, len;
    int npieces;
    size_t piece[4];
    int tamper;              /* decrypt: the expected tag is wrong */
    uint8_t aad[64];
    uint8_t tag_in[16];
} message;

static void run_side(EVP_CIPHER_CTX *ctx, EVP_CIPHER *c, const message *m, const uint8_t *in, uint8_t *out,
                     side *r, int reinit_only, const OSSL_PARAM *params)
{
    size_t off = 0;
    int l = 0;

    memset(r, 0, sizeof(*r));
    r->rc_init = reinit_only ? EVP_CipherInit_ex2(ctx, NULL, NULL, m->iv, m->enc, NULL)
                             : EVP_CipherInit_ex2(ctx, c, m->key, m->iv, m->enc, params);
    if (r->rc_init != 1)
        return;
    if (m->ci->aead && !m->enc)
        r->rc_tag = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, (void *)m->tag_in);
    r->rc_aad = 1;
    if (m->ci->aead && m->aad_len > 0) {
        size_t half = m->aad_len / 2;

        r->rc_aad = EVP_CipherUpdate(ctx, NULL, &l, m->aad, (int)half) == 1
                    && EVP_CipherUpdate(ctx, NULL, &l, m->aad + half, (int)(m->aad_len - half)) == 1;
    }
    r->rc_update = 1;
    for (int p = 0; p < m->npieces && r->rc_update == 1; p++) {
        r->rc_update = EVP_CipherUpdate(ctx, out + off, &l, in + off, (int)m->piece[p]);
        off += m->piece[p];
        r->outl += l;
    }
    r->rc_final = EVP_CipherFinal_ex(ctx, out + off, &l);
    r->outl += r->rc_final == 1 ? l : 0;
    if (m->ci->aead && m->enc && r->rc_final == 1)
        r->rc_tag = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, r->tag);
}

/* Buffers of one traffic source (a sync thread or an async job), as large as the largest message. */
typedef struct buffers {
    uint8_t *in, *ct, *out_gp, *out_ref;
    size_t cap;
} buffers;

/* Kept for the whole run, one per busy mark, and touched once: the RSS samples then see gpuprov's
 * memory, not the traffic's buffers filling in. */
static buffers source_bufs[MAX_THREADS * (MAX_JOBS + 1)];

static buffers *buffers_of(size_t mark)
{
    buffers *b = &source_bufs[mark];

    if (b->cap == 0) {
        b->cap = opt.max_bytes + 16;
        b->in = malloc(b->cap);
        b->ct = malloc(b->cap);
        b->out_gp = malloc(b->cap);
        b->out_ref = malloc(b->cap);
        if (!b->in || !b->ct || !b->out_gp || !b->out_ref) {
            fprintf(stderr, "soak: out of memory\n");
            exit(2);
        }
        memset(b->in, 0, b->cap);
        memset(b->ct, 0, b->cap);
        memset(b->out_gp, 0, b->cap);
        memset(b->out_ref, 0, b->cap);
    }
    return b;
}

static void buffers_free(buffers *b)
{
    free(b->in);
    free(b->ct);
    free(b->out_gp);
    free(b->out_ref);
}

/* Compare both sides; count the message. */
static void judge(const message *m, const side *g, const side *r, const uint8_t *out_gp, const uint8_t *out_ref,
                  const char *kind)
{
    int same = g->rc_init == r->rc_init && g->rc_aad == r->rc_aad && g->rc_update == r->rc_update
               && g->rc_final == r->rc_final && g->rc_tag == r->rc_tag && g->outl == r->outl;

    /* Outputs are compared where the default wrote them (a failed decryption's Final writes none,
     * but its updates did). */
    if (same && r->outl > 0 && memcmp(out_gp, out_ref, (size_t)r->outl) != 0)
        same = 0;
    if (same && m->ci->aead && m->enc && r->rc_tag == 1 && memcmp(g->tag, r->tag, 16) != 0)
        same = 0;
    atomic_fetch_add(&total.ops, 1);
    atomic_fetch_add(&total.bytes, m->len);
    if (same)
        return;
    {
        /* Lost: the default wrote bytes where gpuprov's output still holds every canary byte, or
         * gpuprov's tag call succeeded and its tag is still the zeros it started as. */
        static const uint8_t zero_tag[16];
        int canary = r->outl > 0;

        for (int i = 0; canary && i < r->outl; i++)
            canary = out_gp[i] == CANARY;
        if (m->ci->aead && m->enc && g->rc_tag == 1 && memcmp(g->tag, zero_tag, 16) == 0
            && memcmp(r->tag, zero_tag, 16) != 0)
            canary = 1;
        atomic_fetch_add(canary ? &total.lost : &total.wrong, 1);
        fprintf(stderr, "soak: %s %s %s len=%zu aad=%zu pieces=%d enc=%d tamper=%d: gpuprov rc %d/%d/%d/%d/%d outl %d, "
                "default rc %d/%d/%d/%d/%d outl %d\n", canary ? "LOST" : "WRONG", kind, m->ci->name, m->len,
                m->aad_len, m->npieces, m->enc, m->tamper, g->rc_init, g->rc_aad, g->rc_update, g->rc_final, g->rc_tag,
                g->outl, r->rc_init, r->rc_aad, r->rc_update, r->rc_final, r->rc_tag, r->outl);
    }
}

static void message_pick(uint64_t *s, message *m, size_t max_len, int record)
{
    memset(m, 0, sizeof(*m));
    static const size_t aeads[] = { 3, 4, 5, 7 };

    m->ci_index = record ? aeads[rnd(s) % 4] : (size_t)(rnd(s) % NCIPHERS);   /* records: AEAD only */
    m->ci = &ciphers[m->ci_index];
    rnd_bytes(s, m->key, sizeof(m->key));
    rnd_bytes(s, m->iv, sizeof(m->iv));
    if (m->ci->chacha)
        m->iv[2] = m->iv[3] = 0;   /* a block counter far from its 32-bit end */
    m->len = record ? (size_t)(rnd(s) % 16401) : pick_len(s, max_len);
    m->aad_len = m->ci->aead ? (record ? 13 : (size_t)(rnd(s) % 65)) : 0;
    rnd_bytes(s, m->aad, m->aad_len);
    if (record) {
        m->npieces = 1;
        m->piece[0] = m->len;
    } else {
        size_t left = m->len;

        m->npieces = 1 + (int)(rnd(s) % 4);
        for (int p = 0; p < m->npieces - 1; p++) {
            m->piece[p] = left > 0 ? (size_t)(rnd(s) % (left + 1)) : 0;
            left -= m->piece[p];
        }
        m->piece[m->npieces - 1] = left;
    }
    m->enc = (int)(rnd(s) % 3) != 0;   /* a third decrypts */
}

/* The message's input in b->in: random bytes to encrypt, or the default provider's ciphertext of
 * them (and its tag, a eighth of the time tampered with) to decrypt. */
static void message_input(uint64_t *s, message *m, buffers *b)
{
    rnd_bytes(s, b->in, m->len);
    if (!m->enc) {
        message e = *m;
        side t;
        EVP_CIPHER_CTX *ce = EVP_CIPHER_CTX_new();

        e.enc = 1;
        run_side(ce, ref_ciph[m->ci_index], &e, b->in, b->ct, &t, 0, NULL);
        EVP_CIPHER_CTX_free(ce);
        memcpy(m->tag_in, t.tag, 16);
        m->tamper = m->ci->aead && (int)(rnd(s) % 8) == 0;
        if (m->tamper)
            m->tag_in[rnd(s) % 16] ^= (uint8_t)(1u << (rnd(s) % 8));
        memcpy(b->in, b->ct, m->len);
        atomic_fetch_add(&total.decrypts, 1);
        atomic_fetch_add(&total.tampered, (uint64_t)m->tamper);
    }
}

/*
 * One unit of traffic: a streamed message (encrypt, or decrypt of the default's ciphertext with
 * its tag, sometimes tampered), or 1-8 TLS-like records on one pair of contexts (an IV-only
 * re-init per record, as libssl does).
 */
static void traffic_once(uint64_t *s, buffers *b, busy *mark)
{
    EVP_CIPHER_CTX *cg = EVP_CIPHER_CTX_new(), *cr = EVP_CIPHER_CTX_new();
    int records = (int)(rnd(s) % 4) == 0 ? 1 + (int)(rnd(s) % 8) : 0;
    message m, first;

    memset(&m, 0, sizeof(m));

    if (cg == NULL || cr == NULL) {
        fprintf(stderr, "soak: out of memory\n");
        exit(2);
    }
    for (int rec = 0; rec < (records > 0 ? records : 1); rec++) {
        side g, r;

        first = m;
        message_pick(s, &m, b->cap - 16, records > 0);
        if (rec > 0) {   /* the next record: same cipher and key, a new IV, length and direction */
            m.ci_index = first.ci_index;
            m.ci = first.ci;
            memcpy(m.key, first.key, sizeof(m.key));
        }
        message_input(s, &m, b);
        memset(b->out_gp, CANARY, m.len + 16);
        memset(b->out_ref, 0, m.len + 16);
        mark->what = m.ci->name;
        atomic_store(&mark->len, m.len);
        atomic_store(&mark->since_ns, now_ns());
        run_side(cg, gp_ciph[m.ci_index], &m, b->in, b->out_gp, &g, rec > 0, NULL);
        atomic_store(&mark->since_ns, 0);
        run_side(cr, ref_ciph[m.ci_index], &m, b->in, b->out_ref, &r, rec > 0, NULL);
        if (opt.spoil_every > 0 && rnd(s) % opt.spoil_every == 0 && g.outl > 0)
            b->out_gp[rnd(s) % (uint64_t)g.outl] ^= 0x01;
        if (opt.drop_every > 0 && rnd(s) % opt.drop_every == 0 && g.outl > 0)
            memset(b->out_gp, CANARY, (size_t)g.outl);
        judge(&m, &g, &r, b->out_gp, b->out_ref, records > 0 ? "record" : "stream");
        if (records > 0)
            atomic_fetch_add(&total.records, 1);
        ERR_clear_error();
    }
    EVP_CIPHER_CTX_free(cg);
    EVP_CIPHER_CTX_free(cr);
}

/* ---- traffic sources ---- */

typedef struct source {
    pthread_t thread;
    int index;
    uint64_t seed;
} source;

static void *sync_main(void *v)
{
    source *src = v;
    size_t mark = (size_t)src->index * (MAX_JOBS + 1);
    buffers *b = buffers_of(mark);
    uint64_t s = src->seed;

    while (!atomic_load(&stop) && !atomic_load(&hung))
        traffic_once(&s, b, &busy_marks[mark]);
    return NULL;
}

/* An async job: one unit of traffic (its buffers are the job slot's, not on its 32 KiB stack). */
typedef struct job_slot {
    ASYNC_JOB *job;
    ASYNC_WAIT_CTX *wctx;
    buffers *b;
    uint64_t seed;
    busy *mark;
    int running;
} job_slot;

static int job_main(void *arg)
{
    job_slot *js = *(job_slot **)arg;

    traffic_once(&js->seed, js->b, js->mark);
    return 1;
}

/* Wait up to `ms` for any paused job's wait fd, then let every paused job try again (a job that
 * resumes before its result is ready pauses again: batching/async_wait.c). */
static void jobs_wait(job_slot *slots, int n, int ms)
{
    struct pollfd pfd[MAX_JOBS * 2];
    nfds_t np = 0;

    for (int i = 0; i < n; i++) {
        OSSL_ASYNC_FD fds[2];
        size_t nfd = 0;

        if (!slots[i].running || !ASYNC_WAIT_CTX_get_all_fds(slots[i].wctx, NULL, &nfd) || nfd == 0 || nfd > 2
            || !ASYNC_WAIT_CTX_get_all_fds(slots[i].wctx, fds, &nfd))
            continue;
        for (size_t k = 0; k < nfd; k++)
            pfd[np++] = (struct pollfd){ .fd = fds[k], .events = POLLIN };
    }
    (void)poll(pfd, np, ms);
}

static void *async_main(void *v)
{
    source *src = v;
    job_slot slots[MAX_JOBS];
    int running = 0;

    memset(slots, 0, sizeof(slots));
    if (!ASYNC_init_thread((size_t)opt.jobs, (size_t)opt.jobs)) {
        fprintf(stderr, "soak: ASYNC_init_thread failed\n");
        exit(2);
    }
    for (int i = 0; i < opt.jobs; i++) {
        slots[i].seed = src->seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        slots[i].mark = &busy_marks[(size_t)src->index * (MAX_JOBS + 1) + 1 + (size_t)i];
        slots[i].b = buffers_of((size_t)src->index * (MAX_JOBS + 1) + 1 + (size_t)i);
        if ((slots[i].wctx = ASYNC_WAIT_CTX_new()) == NULL) {
            fprintf(stderr, "soak: out of memory\n");
            exit(2);
        }
    }
    for (;;) {
        int more = !atomic_load(&stop) && !atomic_load(&hung);

        for (int i = 0; i < opt.jobs; i++) {
            job_slot *js = &slots[i];
            job_slot *arg = js;
            int ret = 0;

            if (!js->running && !more)
                continue;
            switch (ASYNC_start_job(&js->job, js->wctx, &ret, job_main, &arg, sizeof(arg))) {
            case ASYNC_PAUSE:
                if (!js->running)
                    running++;
                js->running = 1;
                break;
            case ASYNC_FINISH:
                if (js->running)
                    running--;
                js->running = 0;
                js->job = NULL;
                atomic_fetch_add(&total.async_ops, 1);
                break;
            default:
                fprintf(stderr, "soak: ASYNC_start_job failed\n");
                exit(2);
            }
        }
        if (!more && running == 0)
            break;
        if (running > 0)
            jobs_wait(slots, opt.jobs, 2);
    }
    for (int i = 0; i < opt.jobs; i++) {
        ASYNC_WAIT_CTX_free(slots[i].wctx);
    }
    ASYNC_cleanup_thread();
    return NULL;
}

/* ---- device memory ---- */

/* How the soak gets GPU buffers: the CUDA runtime (libcudart, opened at run time so the soak builds
 * without CUDA), or the test module's stand-in (plain memory that the host executor reads). */
typedef struct devmem_api {
    const char *how;
    void *(*alloc)(size_t n);
    void (*release)(void *p);
    int (*put)(void *dst, const void *src, size_t n);   /* host to device; 1: done */
    int (*get)(void *dst, const void *src, size_t n);   /* device to host */
} devmem_api;

static devmem_api devmem;   /* .alloc NULL: no device-memory traffic */
static int (*cuda_malloc)(void **p, size_t n);
static int (*cuda_free)(void *p);
static int (*cuda_memcpy)(void *dst, const void *src, size_t n, int kind);   /* cudaMemcpyKind: 1 HtoD, 2 DtoH */
static void *(*standin_alloc)(size_t n, int gpu);
static void (*standin_free)(void *p);

static void *cuda_alloc_fn(size_t n)
{
    void *p = NULL;

    return cuda_malloc(&p, n) == 0 ? p : NULL;
}
static void cuda_release_fn(void *p) { (void)cuda_free(p); }
static int cuda_put_fn(void *d, const void *h, size_t n) { return cuda_memcpy(d, h, n, 1) == 0; }
static int cuda_get_fn(void *h, const void *d, size_t n) { return cuda_memcpy(h, d, n, 2) == 0; }
static void *standin_alloc_fn(size_t n) { return standin_alloc(n, 0); }
static void standin_release_fn(void *p) { standin_free(p); }
static int standin_copy_fn(void *dst, const void *src, size_t n) { memcpy(dst, src, n); return 1; }

/* Once, with gpuprov loaded: the stand-in where GPUPROV_TEST_HOST_DEVMEM asks for it, else the CUDA
 * runtime where it opens and sees a GPU; else none (said once). */
static void devmem_choose(void)
{
    const char *standin = getenv("GPUPROV_TEST_HOST_DEVMEM");
    static const char *const runtimes[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                            "/usr/local/cuda/lib64/libcudart.so" };
    int (*count)(int *) = NULL;
    int n = 0;

    if (opt.devmem_threads == 0)
        return;
    if (standin != NULL && strcmp(standin, "1") == 0) {
        devmem = (devmem_api){ "the test module's stand-in", standin_alloc_fn, standin_release_fn, standin_copy_fn,
                               standin_copy_fn };
        return;
    }
    for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]) && count == NULL; i++) {
        void *h = dlopen(runtimes[i], RTLD_NOW);

        if (h == NULL)
            continue;
        *(void **)&count = dlsym(h, "cudaGetDeviceCount");
        *(void **)&cuda_malloc = dlsym(h, "cudaMalloc");
        *(void **)&cuda_free = dlsym(h, "cudaFree");
        *(void **)&cuda_memcpy = dlsym(h, "cudaMemcpy");
        if (count == NULL || cuda_malloc == NULL || cuda_free == NULL || cuda_memcpy == NULL)
            count = NULL;
    }
    if (count != NULL && count(&n) == 0 && n > 0) {
        devmem = (devmem_api){ "CUDA (cudaMalloc)", cuda_alloc_fn, cuda_release_fn, cuda_put_fn, cuda_get_fn };
        return;
    }
    opt.devmem_threads = 0;
    printf("soak: no device-memory traffic (no CUDA runtime with a GPU; GPUPROV_TEST_HOST_DEVMEM=1 takes the "
           "test module's stand-in)\n");
}

/* Each epoch, once gpuprov is loaded: the stand-in's functions in this load of the module. */
static void devmem_bind(void)
{
    char path[4096];
    void *h;

    if (devmem.alloc != standin_alloc_fn)
        return;
    snprintf(path, sizeof(path), "%s/gpuprov.so", opt.module_dir);
    if ((h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) == NULL
        || (*(void **)&standin_alloc = dlsym(h, "gpuprov_test_devmem_alloc")) == NULL
        || (*(void **)&standin_free = dlsym(h, "gpuprov_test_devmem_free")) == NULL) {
        fprintf(stderr, "soak: %s exports no gpuprov_test_devmem_alloc (not the test module)\n", path);
        exit(2);
    }
    dlclose(h);   /* the provider keeps it loaded */
}

/* Which of gpuprov's calls failed where the default's succeeded (device mode: a refusal). */
static int gp_failed_more(const side *g, const side *r)
{
    return (g->rc_init != 1 && r->rc_init == 1) || (g->rc_aad != 1 && r->rc_aad == 1)
           || (g->rc_update != 1 && r->rc_update == 1) || (g->rc_final != 1 && r->rc_final == 1)
           || (g->rc_tag != 1 && r->rc_tag == 1);
}

/* One streamed message through device buffers din and dout (dout == din: in place), judged
 * against the default provider on the host copy of the same bytes. */
static void devmem_traffic_once(uint64_t *s, buffers *b, uint8_t *din, uint8_t *dout, size_t cap, busy *mark)
{
    static char memory[] = "device";
    const OSSL_PARAM params[] = { OSSL_PARAM_utf8_string("gpuprov-memory", memory, 6), OSSL_PARAM_END };
    EVP_CIPHER_CTX *cg = EVP_CIPHER_CTX_new(), *cr = EVP_CIPHER_CTX_new();
    uint8_t *out = (int)(rnd(s) % 3) == 0 ? din : dout;
    message m;
    side g, r;

    if (cg == NULL || cr == NULL) {
        fprintf(stderr, "soak: out of memory\n");
        exit(2);
    }
    message_pick(s, &m, cap - 16, 0);
    message_input(s, &m, b);
    memset(b->out_gp, CANARY, m.len + 16);
    if (!devmem.put(din, b->in, m.len + 16) || (out != din && !devmem.put(dout, b->out_gp, m.len + 16))) {
        fprintf(stderr, "soak: copying to the GPU failed\n");
        exit(2);
    }
    mark->what = m.ci->name;
    atomic_store(&mark->len, m.len);
    atomic_store(&mark->since_ns, now_ns());
    run_side(cg, gp_ciph[m.ci_index], &m, din, out, &g, 0, params);
    atomic_store(&mark->since_ns, 0);
    if (g.rc_init == 1) {   /* the mode took: a message in host mode would prove nothing here */
        char got[16] = "";
        OSSL_PARAM q[] = { OSSL_PARAM_utf8_string("gpuprov-memory", got, sizeof(got)), OSSL_PARAM_END };

        if (EVP_CIPHER_CTX_get_params(cg, q) != 1 || strcmp(got, "device") != 0) {
            fprintf(stderr, "soak: gpuprov-memory reads \"%s\" after an init that set \"device\"\n", got);
            exit(2);
        }
    }
    if (!devmem.get(b->out_gp, out, m.len + 16)) {
        fprintf(stderr, "soak: copying from the GPU failed\n");
        exit(2);
    }
    run_side(cr, ref_ciph[m.ci_index], &m, b->in, b->out_ref, &r, 0, NULL);
    atomic_fetch_add(&total.devmem_ops, 1);
    if (atomic_load(&epoch_faulted) && gp_failed_more(&g, &r) && ERR_peek_error() != 0) {
        atomic_fetch_add(&total.devmem_refused, 1);   /* a GPU fault: no CPU can take device memory */
        atomic_fetch_add(&total.ops, 1);
    } else {
        judge(&m, &g, &r, b->out_gp, b->out_ref, out == din ? "device in-place" : "device");
    }
    ERR_clear_error();
    EVP_CIPHER_CTX_free(cg);
    EVP_CIPHER_CTX_free(cr);
}

static void *devmem_main(void *v)
{
    source *src = v;
    size_t mark = (size_t)src->index * (MAX_JOBS + 1);
    buffers *b = buffers_of(mark);
    const size_t cap = b->cap < ((size_t)4 << 20) + 16 ? b->cap : ((size_t)4 << 20) + 16;
    uint8_t *din = devmem.alloc(cap), *dout = devmem.alloc(cap);
    uint64_t s = src->seed;

    if (din == NULL || dout == NULL) {
        fprintf(stderr, "soak: no GPU memory for the device-memory traffic\n");
        exit(2);
    }
    while (!atomic_load(&stop) && !atomic_load(&hung))
        devmem_traffic_once(&s, b, din, dout, cap, &busy_marks[mark]);
    devmem.release(din);
    devmem.release(dout);
    return NULL;
}

/* ---- the watchdog ---- */

static void *watchdog_main(void *v)
{
    (void)v;
    while (!atomic_load(&hung)) {
        uint64_t t = now_ns();

        for (size_t i = 0; i < sizeof(busy_marks) / sizeof(busy_marks[0]); i++) {
            uint64_t since = atomic_load(&busy_marks[i].since_ns);

            if (since != 0 && t > since && (double)(t - since) / 1e9 > opt.hang_seconds) {
                fprintf(stderr, "soak: HUNG: %s of %zu bytes has run %.1f s (thread %zu, job %zu)\n",
                        busy_marks[i].what, atomic_load(&busy_marks[i].len), (double)(t - since) / 1e9,
                        i / (MAX_JOBS + 1), i % (MAX_JOBS + 1));
                atomic_store(&hung, 1);
            }
        }
        usleep(200000);
    }
    return NULL;
}

/* ---- samples ---- */

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* This process's GPU memory (MiB) by nvidia-smi's per-process list, and the GPUs' used memory in
 * all; -1 where it cannot tell (no nvidia-smi; a container whose process ids nvidia-smi does not see). */
static void gpu_mib(long *proc, long *used)
{
    char line[256];
    FILE *p;

    *proc = *used = -1;
    if ((p = popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null", "r"))
        != NULL) {
        while (fgets(line, sizeof(line), p) != NULL) {
            long pid, mib;

            if (sscanf(line, "%ld, %ld", &pid, &mib) == 2 && pid == (long)getpid())
                *proc = (*proc < 0 ? 0 : *proc) + mib;
        }
        pclose(p);
    }
    if ((p = popen("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null", "r")) != NULL) {
        while (fgets(line, sizeof(line), p) != NULL) {
            long mib;

            if (sscanf(line, "%ld", &mib) == 1)
                *used = (*used < 0 ? 0 : *used) + mib;
        }
        pclose(p);
    }
}

/* ---- epochs ---- */

typedef struct provider_counts {
    uint64_t ops, cuda_ops, batches, fallbacks;
    char executor[32];
} provider_counts;

static void provider_read(OSSL_PROVIDER *p, provider_counts *c)
{
    char *ex = NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_uint64("gpuprov-stats-ops", &c->ops),
        OSSL_PARAM_construct_uint64("gpuprov-stats-cuda-ops", &c->cuda_ops),
        OSSL_PARAM_construct_uint64("gpuprov-stats-batches", &c->batches),
        OSSL_PARAM_construct_uint64("gpuprov-stats-fallbacks", &c->fallbacks),
        OSSL_PARAM_construct_utf8_ptr("gpuprov-executor", &ex, 0),
        OSSL_PARAM_END
    };

    memset(c, 0, sizeof(*c));
    if (!OSSL_PROVIDER_get_params(p, params))
        fprintf(stderr, "soak: gpuprov's counters cannot be read\n");
    snprintf(c->executor, sizeof(c->executor), "%s", ex != NULL ? ex : "?");
}

typedef struct site_state {
    fault_site now, at_start;    /* the table after the last epoch, and after epoch 0 */
    uint64_t per_epoch;          /* calls in the epoch that found it */
    uint64_t armed, fired;       /* epochs that armed it, and in how many it failed */
} site_state;

static site_state sites[MAX_SITES];
static size_t nsites;
static uint64_t any_per_epoch;   /* every site's calls in epoch 0 */

/* A call site: a call at a file's line. */
static int same_site(const fault_site *a, const fault_site *b)
{
    return a->line == b->line && a->call == b->call && strcmp(a->file, b->file) == 0;
}

static void sites_update(fault_sites_fn *fn, size_t epoch)
{
    fault_site t[MAX_SITES];
    size_t n = fn != NULL ? fn(t, MAX_SITES) : 0;

    if (n > MAX_SITES)
        n = MAX_SITES;
    for (size_t i = 0; i < n; i++) {
        size_t k;

        for (k = 0; k < nsites && !same_site(&sites[k].now, &t[i]); k++)
            ;
        if (k == nsites) {
            nsites++;
            sites[k].per_epoch = t[i].calls;   /* found now: its calls so far stand for an epoch's */
        } else if (epoch == 0) {
            sites[k].per_epoch = t[i].calls;
        }
        sites[k].now = t[i];
    }
    if (epoch == 0) {
        any_per_epoch = 0;
        for (size_t k = 0; k < nsites; k++)
            any_per_epoch += sites[k].now.calls;
    }
}

static void set_env_num(const char *k, long v)
{
    char b[32];

    snprintf(b, sizeof(b), "%ld", v);
    setenv(k, b, 1);
}

int main(int argc, char **argv)
{
    OSSL_LIB_CTX *ref_ctx;
    OSSL_PROVIDER *ref_prov;
    pthread_t watchdog;
    source src[MAX_THREADS];
    fault_sites_fn *sites_fn = NULL;
    uint64_t seed = 0x5EED5EEDull, t_start, fallbacks = 0, cuda_ops = 0, gp_ops = 0, batches = 0;
    uint64_t taken = 0, taken_fired = 0;
    long rss_warm = -1, rss_end = -1, rss_max_late = -1, gpu_warm = -1, gpu_end = -1, gpu_max_late = -1;
    int gpu_from_proc = 0;
    size_t epoch;
    FILE *csv = NULL;
    char path[4096];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (v == NULL && strcmp(a, "--no-faults") != 0) {
            fprintf(stderr, "usage: soak [--seconds S] [--epoch-seconds S] [--threads N] [--async-threads N] "
                    "[--jobs N] [--devmem-threads N] [--max-bytes N] [--hang-seconds S] [--taken-every N] [--seed N] "
                    "[--module-dir DIR] "
                    "[--csv FILE] [--markdown FILE] [--no-faults] [--spoil-every N] [--drop-every N]\n");
            return 2;
        }
        if (strcmp(a, "--no-faults") == 0) {
            opt.faults = 0;
            continue;
        }
        i++;
        if (strcmp(a, "--seconds") == 0) opt.seconds = atof(v);
        else if (strcmp(a, "--epoch-seconds") == 0) opt.epoch_seconds = atof(v);
        else if (strcmp(a, "--threads") == 0) opt.threads = atoi(v);
        else if (strcmp(a, "--async-threads") == 0) opt.async_threads = atoi(v);
        else if (strcmp(a, "--jobs") == 0) opt.jobs = atoi(v);
        else if (strcmp(a, "--devmem-threads") == 0) opt.devmem_threads = atoi(v);
        else if (strcmp(a, "--max-bytes") == 0) opt.max_bytes = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--hang-seconds") == 0) opt.hang_seconds = atof(v);
        else if (strcmp(a, "--taken-every") == 0) opt.taken_every = atoi(v);
        else if (strcmp(a, "--seed") == 0) seed = strtoull(v, NULL, 0);
        else if (strcmp(a, "--module-dir") == 0) opt.module_dir = v;
        else if (strcmp(a, "--spoil-every") == 0) opt.spoil_every = (unsigned)atoi(v);
        else if (strcmp(a, "--drop-every") == 0) opt.drop_every = (unsigned)atoi(v);
        else if (strcmp(a, "--csv") == 0) opt.csv = v;
        else if (strcmp(a, "--markdown") == 0) opt.markdown = v;
        else {
            fprintf(stderr, "soak: unknown option %s\n", a);
            return 2;
        }
    }
    if (opt.module_dir == NULL)
        opt.module_dir = getenv("OPENSSL_MODULES");
    if (opt.module_dir == NULL || opt.threads + opt.async_threads < 1 || opt.devmem_threads < 0
        || opt.threads + opt.async_threads + opt.devmem_threads > MAX_THREADS
        || opt.jobs < 1 || opt.jobs > MAX_JOBS || opt.max_bytes > (size_t)1 << 30 || opt.epoch_seconds <= 0) {
        fprintf(stderr, "soak: needs --module-dir (or OPENSSL_MODULES), 1-%d threads, 1-%d jobs, at most 1 GiB "
                "messages\n", MAX_THREADS, MAX_JOBS);
        return 2;
    }
    if (opt.csv != NULL && (csv = fopen(opt.csv, "w")) == NULL) {
        fprintf(stderr, "soak: cannot write %s: %s\n", opt.csv, strerror(errno));
        return 2;
    }
    if (csv != NULL)
        fprintf(csv, "epoch,t_s,fault,fault_file,fault_line,fault_skip,fault_times,fault_fired,ops,wrong,lost,gp_ops,cuda_ops,"
                "batches,fallbacks,executor_after,rss_mib,gpu_proc_mib,gpu_used_mib\n");
    /* The reference: the default provider in a library context of its own. */
    if ((ref_ctx = OSSL_LIB_CTX_new()) == NULL || (ref_prov = OSSL_PROVIDER_load(ref_ctx, "default")) == NULL) {
        fprintf(stderr, "soak: no default provider\n");
        return 2;
    }
    for (size_t c = 0; c < NCIPHERS; c++)
        if ((ref_ciph[c] = EVP_CIPHER_fetch(ref_ctx, ciphers[c].name, "provider=default")) == NULL) {
            fprintf(stderr, "soak: the default provider lacks %s\n", ciphers[c].name);
            return 2;
        }
    setenv("GPUPROV_STATS", "1", 1);   /* gpuprov's counters count only then */
    pthread_create(&watchdog, NULL, watchdog_main, NULL);
    t_start = now_ns();
    for (epoch = 0; !atomic_load(&hung) && (epoch == 0 || (double)(now_ns() - t_start) / 1e9 < opt.seconds); epoch++) {
        OSSL_LIB_CTX *ctx = OSSL_LIB_CTX_new();
        OSSL_PROVIDER *gp, *dflt;
        provider_counts pc;
        const char *fault = "none", *file = "";
        long line = 0, skip = 0, times = 1, rss, gproc, gused;
        site_state *armed = NULL;
        uint64_t ops0 = atomic_load(&total.ops), wrong0 = atomic_load(&total.wrong), lost0 = atomic_load(&total.lost);
        uint64_t fired = 0, faults_before = 0;

        /* This epoch's fault, set before gpuprov loads (its CUDA fault hooks read them when the
         * cuda executor opens). */
        if (opt.faults && epoch > 0 && sites_fn != NULL && nsites > 0) {
            if (opt.taken_every > 0 && epoch % (size_t)opt.taken_every == 0) {
                fault = "any";
                times = 0;
                skip = any_per_epoch > 1 ? (long)(rnd(&seed) % (any_per_epoch * 4 / 5 + 1)) : 0;
                taken++;
            } else {
                static size_t next;

                armed = &sites[next++ % nsites];
                fault = armed->now.name;
                file = armed->now.file;
                line = armed->now.line;
                skip = armed->per_epoch > 1 ? (long)(rnd(&seed) % (armed->per_epoch * 4 / 5 + 1)) : 0;
                armed->armed++;
            }
        }
        setenv("GPUPROV_TEST_CUDA_FAULT_CALL", fault, 1);
        atomic_store(&epoch_faulted, strcmp(fault, "none") != 0);
        setenv("GPUPROV_TEST_CUDA_FAULT_FILE", file, 1);   /* empty: unset, every file */
        set_env_num("GPUPROV_TEST_CUDA_FAULT_LINE", line);
        set_env_num("GPUPROV_TEST_CUDA_FAULT_SKIP", skip);
        set_env_num("GPUPROV_TEST_CUDA_FAULT_TIMES", times);
        for (size_t k = 0; k < nsites; k++)
            faults_before += sites[k].now.faults;
        if (ctx == NULL || !OSSL_PROVIDER_set_default_search_path(ctx, opt.module_dir)
            || (gp = OSSL_PROVIDER_load(ctx, "gpuprov")) == NULL || (dflt = OSSL_PROVIDER_load(ctx, "default")) == NULL) {
            fprintf(stderr, "soak: cannot load gpuprov from %s\n", opt.module_dir);
            ERR_print_errors_fp(stderr);
            return 2;
        }
        if (epoch == 0)
            devmem_choose();
        devmem_bind();
        if (sites_fn == NULL) {
            void *h;

            snprintf(path, sizeof(path), "%s/gpuprov.so", opt.module_dir);
            if ((h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) != NULL)
                sites_fn = (fault_sites_fn *)dlsym(h, "gp_test_cuda_fault_sites");
            if (sites_fn == NULL && opt.faults)
                fprintf(stderr, "soak: %s has no CUDA fault table (not the test module): no faults\n", path);
        }
        for (size_t c = 0; c < NCIPHERS; c++)
            if ((gp_ciph[c] = EVP_CIPHER_fetch(ctx, ciphers[c].name, "provider=gpuprov")) == NULL) {
                fprintf(stderr, "soak: gpuprov lacks %s\n", ciphers[c].name);
                return 2;
            }
        atomic_store(&stop, 0);
        for (int i = 0; i < opt.threads + opt.async_threads + opt.devmem_threads; i++) {
            src[i].index = i;
            src[i].seed = rnd(&seed) | 1;
            pthread_create(&src[i].thread, NULL, i < opt.threads ? sync_main
                                                 : i < opt.threads + opt.async_threads ? async_main : devmem_main,
                           &src[i]);
        }
        for (uint64_t t0 = now_ns(); !atomic_load(&hung) && (double)(now_ns() - t0) / 1e9 < opt.epoch_seconds;)
            usleep(20000);
        atomic_store(&stop, 1);
        if (atomic_load(&hung))
            break;   /* a hung call cannot be joined: report now */
        for (int i = 0; i < opt.threads + opt.async_threads + opt.devmem_threads; i++)
            pthread_join(src[i].thread, NULL);
        provider_read(gp, &pc);
        for (size_t c = 0; c < NCIPHERS; c++)
            EVP_CIPHER_free(gp_ciph[c]);
        OSSL_PROVIDER_unload(gp);
        OSSL_PROVIDER_unload(dflt);
        OSSL_LIB_CTX_free(ctx);
        sites_update(sites_fn, epoch);
        for (size_t k = 0; k < nsites; k++)
            fired += sites[k].now.faults;
        fired -= faults_before;
        if (armed != NULL && fired > 0)
            armed->fired++;
        if (times == 0 && fired > 0)
            taken_fired++;
        gp_ops += pc.ops;
        cuda_ops += pc.cuda_ops;
        batches += pc.batches;
        fallbacks += pc.fallbacks;
        rss = rss_kib();
        gpu_mib(&gproc, &gused);
        /* Warm-up: the first fifth of the run (at least two epochs); the end: the last epoch. */
        if (epoch >= 2 && (double)(now_ns() - t_start) / 1e9 >= opt.seconds / 5 && rss_warm < 0) {
            rss_warm = rss;
            gpu_from_proc = gproc >= 0;
            gpu_warm = gpu_from_proc ? gproc : gused;
        }
        if (rss_warm >= 0 && rss > rss_max_late)
            rss_max_late = rss;
        rss_end = rss;
        gpu_end = gpu_from_proc ? gproc : gused;
        if (rss_warm >= 0 && gpu_end > gpu_max_late)
            gpu_max_late = gpu_end;
        if (csv != NULL) {
            fprintf(csv, "%zu,%.1f,%s,%s,%ld,%ld,%ld,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                    ",%" PRIu64 ",%" PRIu64 ",%s,%.1f,%ld,%ld\n", epoch, (double)(now_ns() - t_start) / 1e9, fault, file,
                    line, skip, times, fired, atomic_load(&total.ops) - ops0, atomic_load(&total.wrong) - wrong0,
                    atomic_load(&total.lost) - lost0, pc.ops, pc.cuda_ops, pc.batches, pc.fallbacks, pc.executor,
                    rss / 1024.0, gproc, gused);
            fflush(csv);
        }
    }
    {
        double secs = (double)(now_ns() - t_start) / 1e9;
        long rss_growth = rss_warm >= 0 ? rss_max_late - rss_warm : -1;
        long gpu_growth = gpu_warm >= 0 && gpu_max_late >= 0 ? gpu_max_late - gpu_warm : -1;
        /* Flat: at no epoch after the warm-up more than 64 MiB more RSS than at its end (each epoch's
         * threads and gpuprov's own allocations land in glibc's per-thread arenas, which hold some
         * freed memory), and at most 4 MiB more GPU memory (every epoch frees what gpuprov took). */
#if defined(__SANITIZE_ADDRESS__)
        /* AddressSanitizer keeps freed memory in quarantine (256 MiB by default): RSS says nothing. */
        const int rss_judged = 0;
#else
        const int rss_judged = 1;
#endif
        int rss_flat = !rss_judged || (rss_warm >= 0 && rss_growth <= 64 * 1024);
        int gpu_flat = gpu_warm < 0 || gpu_growth <= 4;
        size_t sites_armed = 0, sites_fired = 0;
        FILE *md = opt.markdown != NULL ? fopen(opt.markdown, "w") : NULL;
        uint64_t wrong = atomic_load(&total.wrong), lost = atomic_load(&total.lost);
        int pass = wrong == 0 && lost == 0 && !atomic_load(&hung) && rss_flat && gpu_flat
                   && atomic_load(&total.ops) > 0 && (opt.devmem_threads == 0 || atomic_load(&total.devmem_ops) > 0);

        for (size_t k = 0; k < nsites; k++) {
            sites_armed += sites[k].armed > 0;
            sites_fired += sites[k].fired > 0;
        }
        printf("soak: %.0f s, %zu epochs, ops=%" PRIu64 " bytes=%" PRIu64 " records=%" PRIu64 " decrypts=%" PRIu64
               " tampered=%" PRIu64 " async_ops=%" PRIu64 "\n", secs, epoch, atomic_load(&total.ops),
               atomic_load(&total.bytes), atomic_load(&total.records), atomic_load(&total.decrypts),
               atomic_load(&total.tampered), atomic_load(&total.async_ops));
        printf("soak: wrong=%" PRIu64 " lost=%" PRIu64 " hung=%d\n", wrong, lost, atomic_load(&hung));
        if (opt.devmem_threads > 0)
            printf("soak: device memory (%s): %d threads, ops=%" PRIu64 " refused under a fault=%" PRIu64 "\n",
                   devmem.how, opt.devmem_threads, atomic_load(&total.devmem_ops), atomic_load(&total.devmem_refused));
        printf("soak: gpuprov ops=%" PRIu64 " cuda_ops=%" PRIu64 " batches=%" PRIu64 " fallbacks=%" PRIu64 "\n",
               gp_ops, cuda_ops, batches, fallbacks);
        printf("soak: call sites reached=%zu armed=%zu failed=%zu; GPU taken away in %" PRIu64 " epochs (reached in %"
               PRIu64 ")\n", nsites, sites_armed, sites_fired, taken, taken_fired);
        for (size_t k = 0; k < nsites; k++)
            printf("soak: site %s:%d %s calls=%" PRIu64 " armed=%" PRIu64 " failed_in=%" PRIu64 "\n",
                   sites[k].now.file, sites[k].now.line, sites[k].now.name, sites[k].now.calls, sites[k].armed, sites[k].fired);
        printf("soak: rss_mib warm=%.1f end=%.1f most_after_warm=%.1f (%s); "
               "gpu_mib(%s) warm=%ld end=%ld most_after_warm=%ld (%s)\n",
               rss_warm / 1024.0, rss_end / 1024.0, rss_max_late / 1024.0,
               !rss_judged ? "not judged under AddressSanitizer" : rss_flat ? "flat" : "GROWS",
               gpu_from_proc ? "process" : "all GPUs", gpu_warm, gpu_end, gpu_max_late,
               gpu_warm < 0 ? "not measured" : gpu_flat ? "flat" : "GROWS");
        if (opt.spoil_every > 0 || opt.drop_every > 0) {
            /* The checker's own test: it passes when the checks found what was spoilt or dropped. */
            pass = atomic_load(&total.ops) > 0 && !atomic_load(&hung) && (opt.spoil_every == 0 || wrong > 0)
                   && (opt.drop_every == 0 || lost > 0);
            printf("soak: checker self-test (spoilt outputs found as wrong, dropped ones as lost): %s\n",
                   pass ? "PASS" : "FAIL");
        } else {
            printf("soak: %s\n", pass ? "PASS" : "FAIL");
        }
        if (md != NULL) {
            fprintf(md, "| measure | value |\n|---|---|\n");
            fprintf(md, "| duration | %.0f s, %zu epochs of %.0f s (gpuprov loaded anew each) |\n", secs, epoch,
                    opt.epoch_seconds);
            fprintf(md, "| traffic | %d sync threads, %d threads x %d async jobs; 8 ciphers; 0 B-%zu MiB; %" PRIu64
                    " TLS-like records |\n", opt.threads, opt.async_threads, opt.jobs, opt.max_bytes >> 20,
                    atomic_load(&total.records));
            if (opt.devmem_threads > 0)
                fprintf(md, "| device memory (`gpuprov-memory = device`, %s) | %d threads; %" PRIu64 " messages of "
                        "up to 4 MiB, %" PRIu64 " refused under a fault (no CPU can take them) |\n", devmem.how,
                        opt.devmem_threads, atomic_load(&total.devmem_ops), atomic_load(&total.devmem_refused));
            fprintf(md, "| messages checked against the default provider | %" PRIu64 " (%.1f GB; %" PRIu64
                    " decryptions, %" PRIu64 " with a wrong tag) |\n", atomic_load(&total.ops),
                    (double)atomic_load(&total.bytes) / 1e9, atomic_load(&total.decrypts), atomic_load(&total.tampered));
            fprintf(md, "| wrong / lost / hung | %" PRIu64 " / %" PRIu64 " / %d |\n", wrong, lost, atomic_load(&hung));
            fprintf(md, "| gpuprov's requests (of them on the GPU) | %" PRIu64 " (%" PRIu64 ") in %" PRIu64
                    " batches; %" PRIu64 " re-run after a fault |\n", gp_ops, cuda_ops, batches, fallbacks);
            fprintf(md, "| CUDA call sites reached / made to fail | %zu / %zu; GPU taken away in %" PRIu64
                    " epochs |\n", nsites, sites_fired, taken_fired);
            fprintf(md, "| RSS after warm-up / most later / end | %.0f / %.0f / %.0f MiB (%s) |\n", rss_warm / 1024.0,
                    rss_max_late / 1024.0, rss_end / 1024.0, rss_flat ? "flat" : "grows");
            fprintf(md, "| GPU memory (%s) after warm-up / most later / end | %ld / %ld / %ld MiB (%s) |\n",
                    gpu_from_proc ? "this process" : "all GPUs", gpu_warm, gpu_max_late, gpu_end,
                    gpu_warm < 0 ? "not measured" : gpu_flat ? "flat" : "grows");
            fprintf(md, "| verdict | %s |\n", pass ? "pass" : "FAIL");
            fclose(md);
        }
        if (csv != NULL)
            fclose(csv);
        fflush(stdout);
        if (atomic_load(&hung))
            _exit(3);   /* a hung thread cannot be joined */
        atomic_store(&hung, 1);   /* stops the watchdog */
        pthread_join(watchdog, NULL);
        for (size_t c = 0; c < NCIPHERS; c++)
            EVP_CIPHER_free(ref_ciph[c]);
        OSSL_PROVIDER_unload(ref_prov);
        OSSL_LIB_CTX_free(ref_ctx);
        for (size_t i = 0; i < sizeof(source_bufs) / sizeof(source_bufs[0]); i++)
            buffers_free(&source_bufs[i]);
        return pass ? 0 : 1;
    }
}
