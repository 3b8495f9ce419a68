/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda executor (gp_exec_cuda): a batch on a slot, cut into waves, each run through its phases. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "batching/cuda/internal.h"
#include "batching/kstate.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

/* One wave: at most one request per message, so every request starts from the state its message
 * has now (cuda_run cuts a batch into waves). 1: every request has its status. */
static int run_wave(gp_engine *e, gp_cuda_slot *c, gp_request *reqs, const size_t *idx, size_t m)
{
    gp_wave wv;
    cudaError_t err;

    memset(&wv, 0, sizeof(wv));
    wv.e = e;
    wv.g = e->cuda;
    wv.c = c;
    wv.reqs = reqs;
    wv.idx = idx;
    wv.m = m;
    wv.kt = gp_cuda_keys_of(wv.g, c);
    wv.t0 = e->knobs.stats ? gp_now_ns() : 0;
#if GP_EXPERIMENT_SWITCHES
    wv.flags = wv.g->spread_off ? GP_BATCH_NARROW : 0;
#endif
    /* The slot's streams, events and arenas belong to its GPU: a launch into its stream, or an
     * event recorded there, fails while another GPU is current (cudaErrorInvalidResourceHandle),
     * and an event made then belongs to that other GPU. The thread that runs this wave may have
     * run its last one on another GPU (a dispatcher, a caller, device = all), so the slot's GPU
     * is current from the first phase on: what the phases make (piece events, grown arenas) and
     * issue is that GPU's. */
    if ((err = cudaSetDevice(c->device)) != cudaSuccess) {
        gp_cuda_failed(e, "cudaSetDevice", err);
        gp_cuda_wave_wipe(&wv);
        return 0;
    }
    gp_cuda_wave_plan(&wv);
    if (gp_cuda_wave_layout(&wv)) {
        gp_cuda_wave_fill(&wv);
        if (gp_cuda_wave_issue(&wv)) {
            /* A chunked wave's first pieces are back already: the crew takes them to the caller
             * while the last chunk runs, and so does this thread, which would only wait. */
            if (wv.nchunks > 1 && wv.pieces_back) {
                gp_cuda_pieces_start(&wv);
                for (size_t j = 0; j < wv.npsrc; j++)
                    gp_copy_help(&c->runs[j]);
            }
            if (gp_cuda_wave_wait(&wv))
                wv.ok = gp_cuda_wave_deliver(&wv);
        }
        if (wv.pieces_started)   /* the wave failed with the crew at its outputs */
            (void)gp_cuda_pieces_end(&wv, 0);
    }
    gp_cuda_wave_wipe(&wv);
    return wv.ok;
}

/* gp_executor.prepare, on the submitter's thread: a staged ChaCha20-Poly1305 request's powers of r
 * go straight into its chunk (stage.h), where the batch's copy kernel fetches them. */
static void cuda_prepare(gp_engine *e, gp_request *r)
{
    const gp_mac_pows *pw = gp_kstate_prepare_pows(r);

    (void)e;
    if (pw != NULL && staged_on_gpu(r)) {
        memcpy(r->stage->host + GP_STAGE_POWS_OFF, pw, sizeof(gp_mac_pows));
        r->stage_pows = 1;
    }
}

/* The i-th slot of [from, from + per * across) in the order slot_take tries them: slot 0 of each of
 * `across` GPUs, then slot 1 of each, ... */
static gp_cuda_slot *slot_nth(gp_cuda *g, int from, int per, int across, int i)
{
    return &g->slots[from + (i % across) * per + i / across];
}

/* A free slot, locked: the first free one in an order that alternates between the GPUs (slot 0 of
 * each GPU, then slot 1 of each, ...), else wait for one from a rotating start; gpu >= 0: one of
 * that GPU's (device mode: the GPU that holds the data runs it). Slots are laid out GPU by GPU,
 * nslots / ngpus each (gp_cuda_open). Batches at once thus spread over every GPU first, and a
 * caller alone always takes the same slot, whose arenas have grown to its requests (a rotation
 * would grow every slot's in turn). */
static gp_cuda_slot *slot_take(gp_cuda *g, int gpu)
{
    const int per = g->nslots / g->ngpus, from = gpu >= 0 ? (gpu - g->stage_device) * per : 0;
    const int count = gpu >= 0 ? per : g->nslots, across = gpu >= 0 ? 1 : g->ngpus;
    gp_cuda_slot *sl;

    for (int i = 0; i < count; i++) {
        sl = slot_nth(g, from, per, across, i);
        if (pthread_mutex_trylock(&sl->lock) == 0)
            return sl;
    }
    sl = slot_nth(g, from, per, across, (int)(atomic_fetch_add(&g->next, 1) % (unsigned)count));
    pthread_mutex_lock(&sl->lock);
    return sl;
}

static int cuda_run_on(gp_engine *e, gp_request *reqs, size_t n, int gpu);

/*
 * A batch whose device-mode requests are on several GPUs: each GPU's share (the host-memory
 * requests with the first's) runs as a batch of its own in a slot of that GPU, on a copy of its
 * requests whose statuses come back. A message's requests share a GPU here: in device mode each
 * comes from an EVP call that waits for it, so a batch holds one request of each such message.
 */
static int cuda_run_split(gp_engine *e, gp_request *reqs, size_t n)
{
    gp_request *part = OPENSSL_malloc(n * sizeof(*part));
    size_t *from = OPENSSL_malloc(n * sizeof(*from));
    int ok = part != NULL && from != NULL, first = -1;

    for (size_t i = 0; i < n && first < 0; i++)
        if (reqs[i].devmem)
            first = reqs[i].gpu;
    for (size_t lead = 0; lead < n && ok; lead++) {
        size_t m = 0, k;
        const int gpu = reqs[lead].gpu;

        if (!reqs[lead].devmem)
            continue;
        for (k = 0; k < lead && !(reqs[k].devmem && reqs[k].gpu == gpu); k++)
            ;
        if (k < lead)
            continue;   /* this GPU's share ran already */
        for (size_t i = 0; i < n; i++)
            if (reqs[i].devmem ? reqs[i].gpu == gpu : gpu == first) {
                part[m] = reqs[i];
                from[m++] = i;
            }
        ok = cuda_run_on(e, part, m, gpu);
        for (size_t i = 0; i < m; i++)   /* the status, and what is left of a long one (run_leading_slices) */
            reqs[from[i]] = part[i];
    }
    OPENSSL_free(part);
    OPENSSL_free(from);
    return ok;
}

/*
 * A request longer than a slice (kstate.h): every slice but the last, each a wave of its own on this slot
 * from the state the one before left (the message's counter and MAC state carry from slice to slice
 * as they do from update to update; the AAD it carries goes with the first). `r` is left as its
 * last slice. On a failure `r` is what is left to do, from the state its message is in now, so
 * the engine's re-run on the CPU goes on where the GPU stopped, and nothing is done twice (an
 * in-place request's input is already gone where its output was written).
 */
static int run_leading_slices(gp_engine *e, gp_cuda_slot *c, gp_request *r, size_t slice)
{
    static const size_t first = 0;

    while (r->len > slice) {
        gp_request head = *r;

        head.len = slice;
        head.status = GP_REQ_FAILED;
        if (!run_wave(e, c, &head, &first, 1))
            return 0;
        r->in += slice;
        r->out += slice;
        r->len -= slice;
        r->aad = NULL;
        r->aad_len = 0;
    }
    return 1;
}

/* Is r sliced here? Device-mode data is not: it takes no arena room, and one launch covers it. */
static int is_long(const gp_request *r, size_t slice)
{
    return r->kind == GP_REQ_CRYPT && !staged_on_gpu(r) && !r->devmem && r->len > slice;
}

/* One wave of a batch, its long requests' leading slices first (the caller's view of each request
 * is restored once the wave has run: the engine counts its bytes). */
static int run_wave_sliced(gp_engine *e, gp_cuda_slot *c, gp_request *reqs, const size_t *idx, size_t m)
{
    struct whole { size_t at; gp_request r; } *whole = NULL;
    const size_t slice = gp_kstate_slice_bytes(e);
    size_t nlong = 0, k = 0;
    int ok = 1;

    for (size_t i = 0; i < m; i++)
        nlong += is_long(&reqs[idx[i]], slice);
    if (nlong == 0 || (whole = OPENSSL_malloc(nlong * sizeof(*whole))) == NULL)
        return run_wave(e, c, reqs, idx, m);   /* no memory: the long ones in one wave, arenas grown */
    for (size_t i = 0; i < m && ok; i++) {
        gp_request *r = &reqs[idx[i]];

        if (is_long(r, slice)) {
            whole[k].at = idx[i];
            whole[k++].r = *r;
            ok = run_leading_slices(e, c, r, slice);
        }
    }
    if (ok && (ok = run_wave(e, c, reqs, idx, m)))
        for (size_t j = 0; j < k; j++) {
            gp_request *r = &reqs[whole[j].at];
            const int status = r->status;

            *r = whole[j].r;
            r->status = status;
        }
    OPENSSL_free(whole);
    return ok;
}

/*
 * One wave of a batch, cut where its large requests (those the copy crew copies) would carry more
 * than a slice's worth of data together: async jobs with multi-MiB updates pile up while the slots
 * are busy, and a wave of all of them would grow the slot's pinned arena to their sum, with a GPU
 * no busier (each such request fills it). The parts run in order, as waves do.
 */
static int run_wave_bounded(gp_engine *e, gp_cuda_slot *c, gp_request *reqs, const size_t *idx, size_t m)
{
    const size_t slice = gp_kstate_slice_bytes(e);
    int ok = 1;

    for (size_t from = 0, to; from < m && ok; from = to) {
        size_t large = 0;

        for (to = from; to < m; to++) {
            const gp_request *r = &reqs[idx[to]];
            const size_t big = spreads(r) ? (r->len < slice ? r->len : slice) : 0;

            if (to > from && large + big > slice)
                break;
            large += big;
        }
        ok = run_wave_sliced(e, c, reqs, idx + from, to - from);
    }
    return ok;
}

/*
 * A batch runs in waves: wave w holds the w-th request of each message (requests of one message
 * run in order, each from the state the previous left). Real batches have one request per message
 * (an EVP call waits for its own), so one wave, one launch. On failure the finished waves stay
 * finished (status OK) and the rest is untouched for the engine to re-run on the CPU.
 */
static int cuda_run(gp_engine *e, gp_request *reqs, size_t n)
{
    int gpu = -1;

    for (size_t i = 0; i < n; i++) {
        if (!reqs[i].devmem)
            continue;
        if (gpu >= 0 && reqs[i].gpu != gpu)
            return cuda_run_split(e, reqs, n);
        gpu = reqs[i].gpu;
    }
    return cuda_run_on(e, reqs, n, gpu);
}

static int cuda_run_on(gp_engine *e, gp_request *reqs, size_t n, int gpu)
{
    gp_cuda *g = e->cuda;
    gp_cuda_slot *c;
    size_t nwaves = 0;
    int ok = 1;

    if (g->stage_ready)
        gp_stage_grow(&g->stage);   /* here, on a thread's stack: jobs only ask (stage.h) */
    c = slot_take(g, gpu);

    if (!gp_cuda_scratch_reserve(c, n)) {
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        c->order[i] = i;
    qsort_r(c->order, n, sizeof(*c->order), gp_cmp_request_by_msg, reqs);
    for (size_t i = 0; i < n; i++) {
        size_t at = c->order[i];

        c->rank[at] = i > 0 && reqs[c->order[i - 1]].msg == reqs[at].msg ? c->rank[c->order[i - 1]] + 1 : 0;
        if (c->rank[at] + 1 > nwaves)
            nwaves = c->rank[at] + 1;
    }
    for (size_t w = 0; w < nwaves && ok; w++) {
        size_t m = 0;

        for (size_t i = 0; i < n; i++)
            if (c->rank[i] == w)
                c->wave[m++] = i;
        ok = run_wave_bounded(e, c, reqs, c->wave, m);
    }
    pthread_mutex_unlock(&c->lock);
    return ok;
}

const gp_executor gp_exec_cuda = {
    .name = "cuda",
    .id = GP_EXEC_CUDA,
    .open = gp_cuda_open,
    .close = gp_cuda_close,
    .msg_start = gp_kstate_msg_start,   /* same state format as the host executor */
    .run = cuda_run,
    .msg_copy = NULL,
    .msg_clear = gp_cuda_ordered_release,   /* a stream-ordered message's block and chunk */
    .msgs_clear = gp_cuda_ordered_release_all,   /* a group's block once */
    .stage_pool = gp_cuda_stage_pool,
    .prepare = cuda_prepare,
    .key_forget = gp_cuda_key_forget,
    .mem_check = gp_cuda_mem_check,
    /* Stream-ordered device mode: requests queued on the caller's stream (ordered.c); those it
     * hands back run synchronously, their batch ordered after that stream (move.c,
     * gp_cuda_issue_after_callers). */
    .stream_check = gp_cuda_stream_check,
    .ordered_run = gp_cuda_ordered_run,
    .ordered_batch = gp_cuda_ordered_batch,
    .ordered_wait = gp_cuda_ordered_wait,
};
