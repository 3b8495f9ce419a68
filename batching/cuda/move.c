/* SPDX-License-Identifier: Apache-2.0 */
/* A wave's data across: DMA copies in and out, and outputs back in pieces for the copy crew to take to the callers. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <openssl/crypto.h>

#include "batching/cuda/internal.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

/* Pieces of a back_in_pieces request's output. */
static size_t out_pieces(const gp_request *r)
{
    const size_t p = spread_piece(r->len);

    return (r->len + p - 1) / p;
}

/* Until every copy crew run of the wave is done and no crew thread touches the arena. */
void gp_cuda_runs_finish(gp_wave *wv)
{
    for (size_t k = 0; k < wv->nruns; k++)
        gp_copy_finish(&wv->g->crew, &wv->c->runs[k]);
    wv->nruns = 0;
}

/* The registrations the wave's direct inputs held: after its wipe, when no DMA of the wave reads
 * them any more (after a failure, once the streams have drained). */
void gp_cuda_direct_release(gp_wave *wv)
{
    for (size_t d = 0; d < wv->ndirect; d++) {
        gp_reg_cache_put(&wv->direct[d].use);
        gp_reg_cache_put(&wv->direct[d].out_use);
    }
    wv->ndirect = 0;
}

/*
 * A DMA wave's inputs, [0, out_off) of the arena (from work_off where the refs are made on the
 * GPU), to the GPU: the crew's runs piece by piece as each piece is copied, the direct inputs in
 * one call each from the caller's registered memory (both in arena order, as fill laid them), the
 * rest around them from the pinned arena in one call each. Every run is finished on return,
 * whatever happened.
 */
cudaError_t gp_cuda_issue_copy_in(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err = cudaSuccess;
    size_t pos = wv->gen_refs ? wv->work_off : 0;   /* refs made on the GPU are not sent */
    size_t k = 0, d = 0;

    while ((k < wv->nruns || d < wv->ndirect) && err == cudaSuccess) {
        const size_t run_at = k < wv->nruns ? (size_t)(c->runs[k].dst - c->host) : SIZE_MAX;
        const size_t direct_at = d < wv->ndirect ? wv->direct[d].off : SIZE_MAX;
        const size_t start = run_at < direct_at ? run_at : direct_at;

        if (start > pos)
            err = cudaMemcpyAsync(c->dev + pos, c->host + pos, start - pos, cudaMemcpyHostToDevice, c->stream);
        if (err != cudaSuccess)
            break;
        if (direct_at < run_at) {
            const gp_request *r = &wv->reqs[wv->idx[wv->direct[d].req]];

            err = cudaMemcpyAsync(c->dev + start, r->in, wv->direct[d].len, cudaMemcpyHostToDevice, c->stream);
            pos = start + wv->direct[d++].len;
            continue;
        }
        gp_copy_run *run = &c->runs[k++];

        for (size_t p = 0; p < run->npieces && err == cudaSuccess; p++) {
            size_t off, len;

            gp_copy_wait_piece(run, p);
            gp_copy_piece_range(run, p, &off, &len);
            err = cudaMemcpyAsync(c->dev + start + off, run->dst + off, len, cudaMemcpyHostToDevice, c->stream);
        }
        pos = start + run->len;
    }
    if (err == cudaSuccess && wv->out_off > pos)
        err = cudaMemcpyAsync(c->dev + pos, c->host + pos, wv->out_off - pos, cudaMemcpyHostToDevice, c->stream);
    gp_cuda_runs_finish(wv);
    return err;
}

/*
 * Device mode: the caller's buffers were written by its own CUDA work, which EVP does not tell us
 * about. The slot's stream is non-blocking, so nothing orders it after that work; a cudaMemcpy from
 * pageable memory returns before its DMA lands ("API synchronization behavior", CUDA Runtime API).
 * The batch waits for the legacy default stream of its device, which itself follows every blocking
 * stream's earlier work; work on the caller's non-blocking streams is the caller's to finish first
 * (README, "Data already on the GPU"), unless it names its stream (stream-ordered device mode,
 * engine.h gp_msg_set_stream): the batch then also waits for each stream its requests name, through
 * the same event recorded there (a wait takes the event's last record when it is issued, CUDA
 * Runtime API, cudaStreamWaitEvent). devmem.c checked that each is a stream of this GPU.
 */
cudaError_t gp_cuda_issue_after_callers(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err;

    if (wv->ndevmem == 0)
        return cudaSuccess;
    if ((err = cudaEventRecord(c->callers, cudaStreamLegacy)) != cudaSuccess
        || (err = cudaStreamWaitEvent(c->stream, c->callers, 0)) != cudaSuccess)
        return err;
    for (size_t i = 0; i < wv->m; i++) {
        const gp_request *r = &wv->reqs[wv->idx[i]];
        size_t k = 0;

        if (!devmem_data(r) || r->stream == 0)
            continue;
        while (k < i && !(devmem_data(&wv->reqs[wv->idx[k]]) && wv->reqs[wv->idx[k]].stream == r->stream))
            k++;
        if (k < i)
            continue;   /* this stream's work is waited for already */
        if ((err = cudaEventRecord(c->callers, (cudaStream_t)(uintptr_t)r->stream)) != cudaSuccess
            || (err = cudaStreamWaitEvent(c->stream, c->callers, 0)) != cudaSuccess)
            return err;
    }
    return cudaSuccess;
}

/*
 * A DMA wave's results, [states_off, part_off) of the arena, back to the pinned arena: the states
 * and every output but those that come back in pieces (back_in_pieces, when the slot has an event
 * for each piece), a chunked wave's back_after_wave output (back on the back stream already,
 * launch.c issue_chunks) and those that go straight to the caller's registered memory
 * (direct_out), in one call for each stretch between them, and each direct_out output in one call.
 * The `copied` event follows this.
 */
cudaError_t gp_cuda_issue_copy_out(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err = cudaSuccess;
    size_t pos = wv->states_off, npieces = 0;

    for (size_t i = 0; i < wv->m; i++)
        if (back_in_pieces(&wv->reqs[wv->idx[i]], wv->m))
            npieces += out_pieces(&wv->reqs[wv->idx[i]]);
    wv->pieces_back = npieces > 0 && gp_cuda_piece_events(c, npieces);
    for (size_t i = 0; i < wv->m && err == cudaSuccess; i++) {
        const gp_request *r = &wv->reqs[wv->idx[i]];
        const size_t start = wv->work[i].out_off;

        if (!r->direct_out && !(wv->pieces_back && back_in_pieces(r, wv->m))
            && !(wv->nchunks > 1 && back_after_wave(r)))
            continue;
        if (start > pos)
            err = cudaMemcpyAsync(c->host + pos, c->dev + pos, start - pos, cudaMemcpyDeviceToHost, c->stream);
        if (err == cudaSuccess && r->direct_out)
            err = cudaMemcpyAsync(r->out, c->dev + start, r->len, cudaMemcpyDeviceToHost, c->stream);
        pos = start + r->len;
    }
    if (err == cudaSuccess && wv->part_off > pos)
        err = cudaMemcpyAsync(c->host + pos, c->dev + pos, wv->part_off - pos, cudaMemcpyDeviceToHost, c->stream);
    return err;
}

/* The outputs back_in_pieces, after `copied`: each piece, then its event (c->piece_ev in request
 * order), which the copy crew waits for before taking the piece to the caller. A chunked wave's
 * are back on the back stream already (launch.c, issue_chunks). */
cudaError_t gp_cuda_issue_pieces_back(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    cudaError_t err = cudaSuccess;
    size_t ev = 0;

    if (wv->nchunks > 1)
        return cudaSuccess;

    for (size_t i = 0; i < wv->m && err == cudaSuccess; i++) {
        const gp_request *r = &wv->reqs[wv->idx[i]];
        const size_t start = wv->work[i].out_off, piece = spread_piece(r->len);

        if (!back_in_pieces(r, wv->m))
            continue;
        for (size_t off = 0; off < r->len && err == cudaSuccess; off += piece) {
            const size_t len = piece_len(r->len, off, piece);

            if ((err = cudaMemcpyAsync(c->host + start + off, c->dev + start + off, len, cudaMemcpyDeviceToHost,
                                       c->stream)) == cudaSuccess)
                err = cudaEventRecord(c->piece_ev[ev++], c->stream);
        }
    }
    return err;
}

/* A piece of an output that comes back in pieces: there once its event says so (the copy crew asks,
 * from whichever thread copies the piece). */
typedef struct piece_source {
    gp_cuda_slot *c;
    size_t ev0;                  /* the request's first piece event */
    size_t req;                  /* the request's index in the wave */
    const gp_wave *chunked;      /* a chunked wave's: an event per chunk (launch.c, issue_chunks) */
    _Atomic int err;             /* a cudaError_t from a wait that failed, for the log (any thread) */
} piece_source;

/* The event after output piece k of a chunked wave: its chunk's, the first whose launch completes
 * it. */
static size_t chunk_event(const gp_wave *wv, size_t k)
{
    size_t j = 0;

    while (j + 1 < wv->nchunks && wv->chunk[j].out_pieces <= k)
        j++;
    return j;
}

/* Crew threads take pieces of every slot, on any GPU: each wait makes the slot's GPU current
 * first, so no crew thread works in another GPU's context (without one, the runtime would open
 * device 0's, a GPU the executor may not use). */
static int piece_landed(void *arg, size_t k)
{
    piece_source *ps = arg;
    const size_t ev = ps->chunked != NULL ? chunk_event(ps->chunked, k) : ps->ev0 + k;
    cudaError_t err = cudaSetDevice(ps->c->device);

    if (err == cudaSuccess)
        err = cudaEventSynchronize(ps->c->piece_ev[ev]);

    if (err != cudaSuccess)
        atomic_store_explicit(&ps->err, (int)err, memory_order_relaxed);
    return err == cudaSuccess;
}

/* The copy crew's runs that take the outputs back_in_pieces to their callers, each piece once its
 * event says it has landed; only after a wave's issue, when every event is recorded. A run that
 * cannot start (no memory) leaves its request to fail in gp_cuda_pieces_end. */
void gp_cuda_pieces_start(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    size_t ev = 0;

    wv->pieces_started = 1;
    wv->npsrc = 0;
    if ((wv->psrc = OPENSSL_malloc(wv->m * sizeof(*wv->psrc))) == NULL)
        return;
    for (size_t i = 0; i < wv->m; i++) {
        gp_request *r = &wv->reqs[wv->idx[i]];
        piece_source *ps = &wv->psrc[wv->npsrc];

        if (!back_in_pieces(r, wv->m))
            continue;
        ps->c = c;
        ps->ev0 = ev;
        ps->req = i;
        ps->chunked = wv->nchunks > 1 ? wv : NULL;
        atomic_init(&ps->err, cudaSuccess);
        if (gp_copy_start_when(&wv->g->crew, &c->runs[wv->npsrc], r->out, c->host + wv->work[i].out_off, r->len,
                               spread_piece(r->len), 0, piece_landed, ps))
            wv->npsrc++;
        ev += out_pieces(r);
    }
}

/*
 * Once every piece is with its caller: the states and statuses of the requests whose outputs come
 * back in pieces, where the wave got that far (`waited`: its results are in the pinned arena). 0 if
 * a piece did not come or the wave failed: those requests stay failed, their message states
 * untouched and, in place, their inputs put back, so the engine re-runs them on the host from both.
 */
int gp_cuda_pieces_end(gp_wave *wv, int waited)
{
    gp_cuda_slot *c = wv->c;
    size_t j = 0;
    int ok = waited && wv->psrc != NULL;

    for (size_t i = 0; i < wv->m; i++) {
        gp_request *r = &wv->reqs[wv->idx[i]];

        if (!back_in_pieces(r, wv->m))
            continue;
        if (j < wv->npsrc && wv->psrc[j].req == i) {
            if (gp_copy_finish(&wv->g->crew, &c->runs[j++]) && ok) {
                memcpy(&r->msg->st, c->host + wv->work[i].state_off, sizeof(gp_msg_state));
                r->status = GP_REQ_OK;
                continue;
            }
        }
        ok = 0;
    }
    /* In place, some pieces may have overwritten the input by now; the arena still holds it (the
     * copy in wrote it there, and nothing of the wave writes the inputs' region). */
    for (size_t i = 0; i < wv->m && !ok; i++) {
        gp_request *r = &wv->reqs[wv->idx[i]];

        if (back_in_pieces(r, wv->m) && r->status != GP_REQ_OK && r->out == r->in)
            memcpy(r->out, c->host + wv->work[i].in_off, r->len);
    }
    /* A piece whose wait failed is the GPU's failure like any other: said once (gp_cuda_failed). */
    for (j = 0; j < wv->npsrc; j++) {
        const int err = atomic_load_explicit(&wv->psrc[j].err, memory_order_relaxed);

        if (err != cudaSuccess) {
            gp_cuda_failed(wv->e, "copy from the GPU", (cudaError_t)err);
            break;
        }
    }
    OPENSSL_free(wv->psrc);
    wv->psrc = NULL;
    wv->npsrc = 0;
    wv->pieces_started = 0;
    return ok;
}
