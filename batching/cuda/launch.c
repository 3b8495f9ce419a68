/* SPDX-License-Identifier: Apache-2.0 */
/* A wave's issue: its CUDA calls in stream order, as a lone launch, three launches, or chunks on three streams. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "batching/cuda/internal.h"
#include "batching/cuda_fault.h"   /* test builds: any CUDA call can be made to fail */

/*
 * Launch a kernel in the slot's stream; `early`: allowed to start before the kernel in front of it
 * ends (programmatic dependent launch, kernels/batch_kernel.cu: it waits in griddepcontrol.wait
 * before it reads what that kernel writes). Only where the shape says the code holds that wait.
 */
static cudaError_t launch(gp_cuda_slot *c, const void *fn, dim3 grid, dim3 block, void **args, size_t smem, int early)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg;

    if (!early || !c->shape.early_launch)
        return cudaLaunchKernel(fn, grid, block, args, smem, c->stream);
    memset(&attr, 0, sizeof(attr));
    memset(&cfg, 0, sizeof(cfg));
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelExC(&cfg, fn, args);
}

/*
 * A small batch runs as one launch (kernels/batch_kernel.cu gp_lone_kernel) when it is the only
 * batch in flight and needs nothing but its arena image moved: no staged data or powers, no key
 * uploads or slot clears, no GHASH matrix, descriptors and results small enough for the copy
 * kernels, and refs few enough that the cluster's blocks take them in one pass with at most
 * LONE_REFS_PER_BLOCK each. Its cluster is as many blocks as it has refs, up to
 * GP_LONE_MAX_BLOCKS. Beside other batches a cluster waits for SMs of one GPC to be free
 * together, where separate blocks start on any, so it is only for a batch alone in flight.
 * lone_cluster: the blocks of that cluster; 0: the batch takes the three launches.
 */
#define LONE_REFS_PER_BLOCK 3u

static unsigned int lone_cluster(gp_engine *e, const gp_cuda *g, const gp_cuda_slot *c, size_t nrefs, int fold,
                                 size_t nstaged, size_t nspows, size_t nup, size_t nwipes, size_t nmma)
{
    const unsigned int most = c->shape.lone_blocks;

#if GP_EXPERIMENT_SWITCHES
    if (g->lone_off)
        return 0;
#else
    (void)g;
#endif
    if (most == 0 || !fold || nstaged + nspows + nup + nwipes + nmma != 0
        || nrefs > (size_t)most * LONE_REFS_PER_BLOCK
        || atomic_load_explicit(&e->queue.inflight, memory_order_relaxed) > 1)
        return 0;
    return nrefs == 0 ? 1u : nrefs < most ? (unsigned int)nrefs : most;
}

static cudaError_t launch_lone(gp_cuda_slot *c, const gp_lone_args *a, unsigned int blocks)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg;
    void *args[] = { (void *)a };

    gp_lone_config(&c->shape, blocks, c->stream, &cfg, &attr);
    return cudaLaunchKernelExC(&cfg, (const void *)gp_lone_kernel, args);
}

/* Knob stats: mark the end of step k - 1 (k = 0: the start) in the slot's stream. */
static cudaError_t step_mark(gp_cuda_slot *c, int k)
{
    return c->step[k] != NULL ? cudaEventRecord(c->step[k], c->stream) : cudaSuccess;
}

/* Launch the batch kernel over refs [first, first + n) of the wave, the claim counter after them
 * (`broken`: with an empty grid, the fault_after test hook's failing launch). */
static cudaError_t launch_refs(gp_wave *wv, size_t first, size_t n, int broken)
{
    gp_cuda_slot *c = wv->c;
    gp_unit_ref *drefs = (gp_unit_ref *)(c->dev + wv->refs_off) + first;
    gp_work *dwork = (gp_work *)(c->dev + wv->work_off);
    unsigned int nr = (unsigned int)n;
    uint8_t *darena = c->dev;
    void *args[] = { &drefs, &nr, &dwork, &darena, &wv->flags };
    dim3 grid, block;
    size_t smem;
    const void *kernel = gp_kernel_geometry(n, wv->flags, &c->shape, &grid, &block, &smem);

    if (broken)
        grid.x = 0;
    return launch(c, kernel, grid, block, args, smem, 0);
}

/*
 * A chunked wave (m == 1; chunk_plan.h) from its descriptors to its last launch. On the slot's
 * stream: the arena's inputs but the request's data, the copy kernel in (the refs, key uploads),
 * then each chunk's launch over its own refs, once its input pieces are in. On `ahead`, after the
 * slot's earlier work (the last wave's device cleanse): each chunk's new input pieces in one call,
 * as soon as the crew has copied them (a direct_in input straight from the caller's registered
 * memory, all there already), so that they cross while the launches before run. On
 * `back`, once a launch has run: the output pieces it completes in one call, then the chunk's
 * event, which the crew waits for before taking them to the caller (a back_after_wave output:
 * the wave's `copied` waits for the last one instead, gp_cuda_wave_issue); the last launch completes
 * every piece left, which come back beside the states (no launch after it writes them). A call
 * per chunk, not per piece: each CUDA call costs the issuing thread microseconds, which a lone
 * caller waits through (bench/RESULTS.md, "Chunked launches"). Launches follow one another in
 * stream order, so the units of every chunk are counted before the last launch's, where the
 * request is finished (chunk_plan.h). Events in c->piece_ev (CHUNK_EVENTS): per chunk its output
 * back, then per chunk its launch run, then per chunk its input arrived, then the wave's start.
 * The crew's run is finished on return, whatever happened.
 */
static cudaError_t issue_chunks(gp_wave *wv, void **in_args, dim3 in_grid, unsigned int nc_in, int broken)
{
    gp_cuda_slot *c = wv->c;
    const gp_request *r = &wv->reqs[wv->idx[0]];
    gp_copy_run *run = wv->nruns > 0 ? &c->runs[0] : NULL;   /* NULL: fill copied the data itself, or
                                                              * it crosses from the caller's memory */
    const size_t start = wv->work[0].in_off, out = wv->work[0].out_off, piece = spread_piece(r->len);
    const uint8_t *src = r->direct_in ? r->in : c->host + start;   /* the request's input pieces */
    const size_t pos = wv->gen_refs ? wv->work_off : 0;
    cudaEvent_t *ran = c->piece_ev + wv->nchunks, *arrived = ran + wv->nchunks, began = arrived[wv->nchunks];
    const dim3 copy_block = { GP_COPY_BLOCK, 1, 1 };
    cudaError_t err;
    size_t sent = 0, back = 0;

    if ((err = cudaEventRecord(began, c->stream)) == cudaSuccess)
        err = cudaStreamWaitEvent(c->ahead, began, 0);
    if (err == cudaSuccess && start > pos)
        err = cudaMemcpyAsync(c->dev + pos, c->host + pos, start - pos, cudaMemcpyHostToDevice, c->stream);
    if (err == cudaSuccess && wv->out_off > start + r->len)
        err = cudaMemcpyAsync(c->dev + start + r->len, c->host + start + r->len, wv->out_off - start - r->len,
                              cudaMemcpyHostToDevice, c->stream);
    if (err == cudaSuccess && nc_in > 0)
        err = launch(c, (const void *)gp_copy_kernel, in_grid, copy_block, in_args, 0, 0);
    if (err == cudaSuccess)
        err = step_mark(c, 2);
    for (size_t k = 0; k < wv->nchunks && err == cudaSuccess; k++) {
        const gp_chunk *ch = &wv->chunk[k];

        if (ch->in_pieces > sent) {
            const size_t off = sent * piece, end = pieces_end_byte(r->len, ch->in_pieces, piece);

            for (; run != NULL && sent < ch->in_pieces; sent++)
                gp_copy_wait_piece(run, sent);
            sent = ch->in_pieces;
            err = cudaMemcpyAsync(c->dev + start + off, src + off, end - off, cudaMemcpyHostToDevice, c->ahead);
        }
        if (err == cudaSuccess && (err = cudaEventRecord(arrived[k], c->ahead)) == cudaSuccess
            && (err = cudaStreamWaitEvent(c->stream, arrived[k], 0)) == cudaSuccess)
            err = launch_refs(wv, wv->chunk_ref[k], wv->chunk_nref[k], broken && k + 1 == wv->nchunks);
        if (err != cudaSuccess || ch->out_pieces == back)
            continue;
        if ((err = cudaEventRecord(ran[k], c->stream)) == cudaSuccess
            && (err = cudaStreamWaitEvent(c->back, ran[k], 0)) == cudaSuccess) {
            const size_t off = back * piece, end = pieces_end_byte(r->len, ch->out_pieces, piece);

            if ((err = cudaMemcpyAsync(c->host + out + off, c->dev + out + off, end - off, cudaMemcpyDeviceToHost,
                                       c->back)) == cudaSuccess
                && (err = cudaEventRecord(c->piece_ev[k], c->back)) == cudaSuccess)
                wv->early_ev = k + 1;
            back = ch->out_pieces;
        }
    }
    gp_cuda_runs_finish(wv);
    return err;
}

/*
 * issue: every CUDA call of the wave, on the slot's stream, in stream order: the copy in (a call,
 * or the first copy kernel), the batch kernel (or the one lone launch; a chunked wave's copy in
 * and launches interleaved on three streams, issue_chunks), the copy out, the event, and an
 * unfolded wave's device clear. Every call checked: a failure (0) leaves the callers' buffers and
 * message states untouched, and the wipe phase lets the streams drain.
 */
int gp_cuda_wave_issue(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    cudaError_t err;

    gp_unit_ref *drefs = (gp_unit_ref *)(c->dev + wv->refs_off);
    gp_work *dwork = (gp_work *)(c->dev + wv->work_off);
    unsigned int nr = (unsigned int)wv->nrefs;
    uint8_t *darena = c->dev;
    void *args[] = { &drefs, &nr, &dwork, &darena, &wv->flags };
    const gp_copy *lin = wv->in_list, *lout = wv->out_list;   /* read by the GPU where they are: mapped */
    unsigned int nc_in = (unsigned int)wv->nin, nc_out = (unsigned int)wv->nout;
    gp_copy_head hin, hout;
    uint64_t no_done = 0, out_done = 0, out_ticket = 0, words = 0;
    void *in_args[] = { &hin, &lin, &nc_in, &no_done, &no_done };
    void *out_args[] = { &hout, &lout, &nc_out, &out_done, &out_ticket };
    dim3 block, grid, copy_block = { GP_COPY_BLOCK, 1, 1 };
    dim3 in_grid = { nc_in < GP_COPY_MAX_GRID ? nc_in : GP_COPY_MAX_GRID, 1, 1 };
    dim3 out_grid = { nc_out < GP_COPY_MAX_GRID ? nc_out : GP_COPY_MAX_GRID, 1, 1 };
    size_t smem;

    memset(&hin, 0, sizeof(hin));
    memset(&hout, 0, sizeof(hout));
    memcpy(hin.e, wv->in_list, (wv->nin < GP_COPY_INLINE ? wv->nin : GP_COPY_INLINE) * sizeof(gp_copy));
    memcpy(hout.e, wv->out_list, (wv->nout < GP_COPY_INLINE ? wv->nout : GP_COPY_INLINE) * sizeof(gp_copy));
    const unsigned int lone = lone_cluster(e, g, c, wv->nrefs, wv->fold, wv->nstaged + wv->ndevcopy, wv->nspows, wv->nup, wv->nwipes, wv->nmma);
    unsigned int lone_grid = lone;

    const void *kernel = gp_kernel_geometry(wv->nrefs, wv->flags, &c->shape, &grid, &block, &smem);
#if GP_TEST_HOOKS
    if (atomic_load(&g->fault_after) >= 0 && atomic_fetch_sub(&g->fault_after, 1) == 0)
        grid.x = lone_grid = 0;   /* test hook: cudaErrorInvalidConfiguration at launch */
#endif
    /* Which kernel says the results are back (deliver.c, wait_for_gpu): the lone launch, or the
     * copy kernel out of a folded batch (an unfolded batch's states come back by DMA after that
     * kernel). A dispatcher polls throughout (wait_for_gpu), so the words spare it a driver call a
     * look, which the other slots' launches would wait behind. */
    wv->end.blocks = lone > 0 ? lone_grid : wv->fold && nc_out > 0 ? out_grid.x : 0;
    if (wv->end.blocks > 0) {
        wv->end.ticket = ++c->ticket;
        words = gpu_addr((uint8_t *)c->done);
#if GP_TEST_HOOKS
        if (atomic_load(&g->silent_after) >= 0 && atomic_fetch_sub(&g->silent_after, 1) == 0)
            words = 0;   /* test hook: the kernel is not told */
#endif
    }
    if (lone == 0 && wv->end.blocks > 0) {
        out_done = words;
        out_ticket = wv->end.ticket;
    }
    wv->t1 = gp_now_ns();   /* the batch's first CUDA call: what wait_for_gpu times from */
    if (wv->fold)   /* the copy kernel reads the pinned arena: every input must be there */
        gp_cuda_runs_finish(wv);
    if ((err = gp_cuda_issue_after_callers(wv)) != cudaSuccess) {
        gp_cuda_failed(e, "ordering after the caller's device work", err);
        return 0;
    }
    if (e->knobs.stats)
        wv->t_ordered = gp_now_ns();
    if ((err = step_mark(c, 0)) != cudaSuccess
        || (!wv->fold && wv->nchunks == 1 && (err = gp_cuda_issue_copy_in(wv)) != cudaSuccess)
        || (err = step_mark(c, 1)) != cudaSuccess) {
        gp_cuda_failed(e, "copy to the GPU", err);
        return 0;
    }
    /* In a small batch, the batch kernel right behind the copy kernel in and the copy kernel
     * out right behind the batch kernel launch early (launch): the launch gaps are a lone
     * call's latency. Not in a large one: its early blocks would sit on SMs, waiting, that the
     * other slots' kernels could use. Behind a DMA copy a launch waits as usual, and with the
     * stats' step events between them each step runs alone to be timed. */
    const int early = grid.x * 4 <= (wv->flags & GP_BATCH_AES ? c->shape.max_grid : c->shape.max_grid_plain)
                      && c->step[0] == NULL;

    if (wv->nchunks > 1) {
        /* The copy in and the kernel interleaved, chunk by chunk (the stats see the descriptors
         * as the DMA in, the data's pieces and the launches as the kernel step). */
        /* A back_after_wave output: the wave's `copied` (recorded on the slot's stream, below)
         * follows its last piece back too, so that the wait's success covers every byte of it. */
        const int after_wave = back_after_wave(&wv->reqs[wv->idx[0]]);

        if ((err = issue_chunks(wv, in_args, in_grid, nc_in, grid.x == 0)) != cudaSuccess
            || (after_wave && wv->early_ev > 0
                && (err = cudaStreamWaitEvent(c->stream, c->piece_ev[wv->early_ev - 1], 0)) != cudaSuccess)
            || (err = step_mark(c, 3)) != cudaSuccess
            || (nc_out > 0 && (err = launch(c, (const void *)gp_copy_kernel, out_grid, copy_block, out_args, 0, 0))
                                  != cudaSuccess)
            || (err = step_mark(c, 4)) != cudaSuccess) {
            gp_cuda_failed(e, "chunked launch", err);
            return 0;
        }
    } else if (lone > 0) {
        /* One launch: copy in, refs and copy out as the phases of one cluster (the stats see
         * it all as the kernel step). */
        const gp_lone_args la = { gpu_addr(c->dev), gpu_addr(c->host), wv->work_off, wv->out_off, wv->states_off,
                                  wv->part_off - wv->states_off, wv->keys_off, wv->stage_off - wv->keys_off,
                                  words, wv->end.ticket, nr, wv->flags };

        if ((err = step_mark(c, 2)) != cudaSuccess || (err = launch_lone(c, &la, lone_grid)) != cudaSuccess
            || (err = step_mark(c, 3)) != cudaSuccess || (err = step_mark(c, 4)) != cudaSuccess) {
            gp_cuda_failed(e, "kernel launch", err);
            return 0;
        }
        if (e->knobs.stats)
            atomic_fetch_add_explicit(&g->st_lone, 1, memory_order_relaxed);
    } else if ((nc_in > 0 && (err = launch(c, (const void *)gp_copy_kernel, in_grid, copy_block, in_args, 0, 0))
                          != cudaSuccess)
        || (err = step_mark(c, 2)) != cudaSuccess
        || (err = launch(c, kernel, grid, block, args, smem, early && nc_in > 0))
               != cudaSuccess
        || (err = step_mark(c, 3)) != cudaSuccess
        || (nc_out > 0 && (err = launch(c, (const void *)gp_copy_kernel, out_grid, copy_block, out_args, 0,
                                        early)) != cudaSuccess)
        || (err = step_mark(c, 4)) != cudaSuccess) {
        gp_cuda_failed(e, "kernel launch", err);
        return 0;
    }
    if ((!wv->fold && (err = gp_cuda_issue_copy_out(wv)) != cudaSuccess)
        || (err = step_mark(c, 5)) != cudaSuccess
        || (err = cudaEventRecord(c->copied, c->stream)) != cudaSuccess
        || (wv->pieces_back && (err = gp_cuda_issue_pieces_back(wv)) != cudaSuccess)) {
        gp_cuda_failed(e, "copy from the GPU", err);
        return 0;
    }
    /* Keys, states and partial MACs do not stay on the device after the batch (a folded batch's
     * second copy kernel cleared them already); nor do the outputs, once the back stream has taken
     * its pieces (the last one's event follows all of them there). */
    if ((wv->early_ev > 0 && (err = cudaStreamWaitEvent(c->stream, c->piece_ev[wv->early_ev - 1], 0))
                                     != cudaSuccess)
        || (!wv->fold && (err = cudaMemsetAsync(c->dev + wv->keys_off, 0, wv->total - wv->keys_off, c->stream))
                             != cudaSuccess)) {
        gp_cuda_failed(e, "device cleanse", err);
        return 0;
    }
    if (e->knobs.stats)
        wv->t_issued = gp_now_ns();
    return 1;
}
