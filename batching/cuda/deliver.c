/* SPDX-License-Identifier: Apache-2.0 */
/* A wave's end: the wait for the GPU, the results delivered to the callers, the wipe after success or failure. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <openssl/crypto.h>

#include "batching/cuda/internal.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

/*
 * A batch's last kernel can say that its results are back: each of its blocks sets its done word
 * to the batch's ticket once its share is in the pinned arena (kernels/batch_kernel.cu: the copy
 * kernel out, and gp_lone_kernel's step 4). Reading those words is a load from a cache line the GPU
 * writes; an event query is a driver call, and the event says so only once the kernel has retired
 * and the stream moved on, so a lone call learns of its results sooner from the words. A look at a
 * batch with `blocks` done words reads them, and the event only
 * every GP_QUERY_US (a launch that fails never writes them); a batch without (blocks 0: its results
 * come back by DMA) asks the event each time.
 */
#define GP_QUERY_US 20

static int words_done(const gp_cuda_slot *c, const gp_batch_end *b)
{
    for (unsigned int i = 0; i < b->blocks; i++)
        if (__atomic_load_n(&c->done[i], __ATOMIC_ACQUIRE) != b->ticket)
            return 0;
    return 1;
}

static cudaError_t batch_look(gp_cuda_slot *c, gp_batch_end *b, uint64_t now)
{
    if (b->blocks == 0)
        return cudaEventQuery(c->copied);
    if (words_done(c, b))
        return cudaSuccess;
    if (now < b->query_at)
        return cudaErrorNotReady;
    b->query_at = now + GP_QUERY_US * 1000u;
    return cudaEventQuery(c->copied);
}

/* The event has completed (or failed): a batch with done words must have set them all. */
static cudaError_t batch_ended(gp_cuda_slot *c, const gp_batch_end *b, cudaError_t err)
{
    if (err == cudaSuccess && !words_done(c, b))
        err = cudaErrorLaunchFailure;   /* its kernel ended without saying its results are back */
    return err;
}

/*
 * Wait for a batch's results as the wait knob says. Left to the runtime (cudaDeviceScheduleAuto),
 * the dispatcher spins for the whole batch. spin: poll (the batch's done words where it has them,
 * else the event; see batch_look above); block: sleep in the driver until the GPU signals (the
 * event is made with cudaEventBlockingSync), then check the words; adaptive: poll up to twice what
 * the slot's recent batches took (from `start`, its first CUDA call) and spin_us more, then sleep
 * in the driver. Whoever waits here, a dispatcher (an async jobs' batch) or a synchronous caller
 * leading its own batch, has nothing else to do until the results are in; it polls rather than
 * sleeping through the batch because a sleeper's wake-up comes late (later among busy threads),
 * which a caller pays on every call and the slot's next batch waits for.
 */
static cudaError_t wait_for_gpu(gp_engine *e, gp_cuda_slot *c, uint64_t start, gp_batch_end *b)
{
    uint64_t spin = (uint64_t)e->knobs.spin_us * 1000u, until, expect = c->expect_ns, t;
    cudaError_t err;

    b->query_at = gp_now_ns() + GP_QUERY_US * 1000u;
    if (e->knobs.wait == GP_WAIT_BLOCK)
        return batch_ended(c, b, cudaEventSynchronize(c->copied));
    until = gp_now_ns() + spin;
    if (e->knobs.wait == GP_WAIT_ADAPTIVE && start + 2 * expect + spin > until)
        until = start + 2 * expect + spin;
    while ((err = batch_look(c, b, t = gp_now_ns())) == cudaErrorNotReady) {
        if (e->knobs.wait == GP_WAIT_ADAPTIVE && t >= until) {
            err = cudaEventSynchronize(c->copied);
            break;
        }
    }
    err = batch_ended(c, b, err);
    /* What the next batch in this slot expects: a running mean of what this one took as seen here
     * (a batch that blocked reads long, and the mean forgets it in a few batches). */
    if (err == cudaSuccess) {
        uint64_t took = gp_now_ns() - start;

        c->expect_ns = expect == 0 ? took : (7 * expect + took) / 8;
    }
    return err;
}

/*
 * wait: until the results are in the pinned arena (wait_for_gpu: done words or the event, as the
 * wait knob says); with stats=steps, the step events' times. 0: the GPU failed.
 */
int gp_cuda_wave_wait(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    cudaError_t err;

    if ((err = wait_for_gpu(e, c, wv->t1, &wv->end)) != cudaSuccess) {
        gp_cuda_failed(e, "synchronisation", err);
        return 0;
    }
    if (e->knobs.stats) {
        wv->t2 = gp_now_ns();
        /* Done words come before the stream's last step events: let those complete. */
        if (c->step[0] != NULL && (err = cudaEventSynchronize(c->copied)) != cudaSuccess) {
            gp_cuda_failed(e, "synchronisation", err);
            return 0;
        }
        for (int k = 0; k < GP_GPU_STEPS && c->step[k] != NULL; k++) {
            float ms = 0;

            if (cudaEventElapsedTime(&ms, c->step[k], c->step[k + 1]) == cudaSuccess)
                atomic_fetch_add_explicit(&g->st_ns_step[k], (uint64_t)(ms * 1e6f), memory_order_relaxed);
        }
    }
    return 1;
}

/*
 * deliver: outputs, tags, verdicts and the advanced message states, only after a wait that
 * succeeded (a failed wave changes no message, so the engine can re-run it on the host). Tags are
 * compared in constant time.
 */
int gp_cuda_wave_deliver(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;
    int ok = 1;

    if (wv->pieces_back) {   /* first: the crew takes them as they land */
        if (!wv->pieces_started)
            gp_cuda_pieces_start(wv);
        ok = gp_cuda_pieces_end(wv, 1);
    }
    for (size_t i = 0; i < m; i++) {
        gp_request *r = &reqs[idx[i]];
        const gp_work *w = &wv->work[i];
        const uint8_t *res = c->host + w->out_off;

        if (wv->pieces_back && back_in_pieces(r, wv->m))
            continue;              /* delivered above */
        memcpy(&r->msg->st, c->host + w->state_off, sizeof(gp_msg_state));
        r->status = GP_REQ_OK;
        if (staged_on_gpu(r) || devmem_data(r) || r->direct_out) {
            /* already in the chunk's output half (r->out), for its job to copy out; or in the
             * caller's device memory, or its registered host memory (the copy out's DMA) */
        } else if (r->kind == GP_REQ_CRYPT) {
            /* A back_after_wave output goes to the caller only now, the wave known good (shape.h),
             * by the crew and this thread at once; its helpers sleep when done rather than spin
             * for the next run (GP_COPY_NO_LINGER): its path is the one that spares the CPU, and
             * its next run is a whole GPU round trip away. */
            const unsigned flags = back_after_wave(r) ? GP_COPY_NO_LINGER : 0;

            if (!spreads(r)
                || !gp_copy_start(&wv->g->crew, &c->runs[wv->nruns], r->out, res, r->len, spread_piece(r->len), flags))
                memcpy(r->out, res, r->len);
            else
                wv->nruns++;
        } else if (r->kind == GP_REQ_TAG) {
            memcpy(r->tag_out, res, 16);
        } else if (r->kind == GP_REQ_VERIFY) {
            /* Constant time (SP 800-38D §7.2 step 8). */
            r->status = r->taglen >= 1 && r->taglen <= 16 && CRYPTO_memcmp(res, r->tag_in, r->taglen) == 0
                        ? GP_REQ_OK : GP_REQ_BAD_TAG;
        }
    }
    gp_cuda_runs_finish(wv);   /* the large outputs, copied by the crew and this thread at once */
    return ok;
}

/*
 * wipe: always, after success or failure. A wave that failed once its CUDA calls began lets the
 * stream drain before the pinned arena is cleared under it. Plans, keys, states and tags leave the
 * pinned arena, the job plans the slot; the key table's batch ends (its uploads count only on
 * success); the stats.
 */
void gp_cuda_wave_wipe(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;

    gp_cuda_runs_finish(wv);   /* a wave that failed before issue may still have the crew at its inputs */
    if (!wv->ok && wv->t1 != 0) {
        /* A batch that failed once its CUDA calls began: let what was queued finish before the
         * pinned arena is cleared under it, then clear the device's copy (best effort: after a
         * sticky error neither can run). */
        (void)cudaStreamSynchronize(c->stream);
        (void)cudaStreamSynchronize(c->ahead);
        (void)cudaStreamSynchronize(c->back);
        (void)cudaMemsetAsync(c->dev, 0, wv->total, c->stream);
        (void)cudaGetLastError();
    }
    gp_cuda_direct_release(wv);   /* no DMA of the wave reads the callers' memory any more */
    if (wv->total != 0 && wv->total <= c->cap) {
        /* Plans (counters), keys, states and tags must not linger in pinned memory; data buffers
         * are the callers' own bytes and are cleansed when the arena is freed. */
        for (size_t i = 0; i < m; i++)
            if (reqs[idx[i]].kind == GP_REQ_TAG || reqs[idx[i]].kind == GP_REQ_VERIFY)
                gp_wipe(c->host + ((gp_work *)(c->host + wv->work_off))[i].out_off, 16);
        gp_wipe(c->host + wv->work_off, wv->in_off - wv->work_off);
        gp_wipe(c->host + wv->keys_off, wv->out_off - wv->keys_off);
    }
    gp_wipe(c->jobs, m * sizeof(*c->jobs));
    if (wv->kbatch != 0)
        gp_key_table_batch_end(&wv->kt->table, wv->kbatch, wv->ok, c->uploads, wv->nup, c->wipes, wv->nwipes);
    if (e->knobs.stats && wv->ok) {
        uint64_t t3 = gp_now_ns();

        atomic_fetch_add_explicit(&g->st_batches, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_reqs, m, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_staged, wv->nstaged, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_in, wv->t1 - wv->t0 - wv->t_grow, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_gpu, wv->t2 - wv->t1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_issue, wv->t_issued - wv->t1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_order, wv->t_ordered - wv->t1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->st_ns_out, t3 - wv->t2, memory_order_relaxed);
        {
            uint_fast64_t unset = 0;

            atomic_compare_exchange_strong(&g->st_first_ns, &unset, wv->t0);
            atomic_store_explicit(&g->st_last_ns, t3, memory_order_relaxed);
        }
    }
}
