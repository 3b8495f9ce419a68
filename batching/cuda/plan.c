/* SPDX-License-Identifier: Apache-2.0 */
/* A wave's plan, layout and fill: its jobs and refs, the arena's regions, the pinned arena's bytes (no CUDA call). */
#include <stdint.h>
#include <string.h>

#include "batching/cuda/internal.h"
#include "batching/kstate.h"

/* Partials and states of different requests never share a 128-byte line, so no finisher can see
 * a line another request's units pulled into its SM's L1 earlier. */
#define ALIGN128(x) (((x) + 127) & ~(size_t)127)
#define STATE_STRIDE ALIGN128(sizeof(gp_msg_state))
#define NO_MMA SIZE_MAX            /* a request without a GHASH matrix (kernels/ghash_mma.h) */
#define MMA_DEDUP 32               /* how far back a request looks for its key's matrix */
#define POWS_STRIDE ALIGN16(sizeof(gp_mac_pows))
/* A batch whose descriptors and inputs, and whose results, are each at most this many bytes has
 * them moved by its copy kernels (no copy calls); a larger one by the copy engines, which move
 * large buffers faster. */
#define FOLD_MAX (1u << 20)
/* A wave of at least this many unit refs has them made on the GPU by its copy kernel in
 * (GP_COPY_REFS entries, a request's run of units each), not written by the host ref by ref and
 * sent across PCIe: the refs grow with the data (one per 2 KiB unit), the entries do not. */
#define GEN_REFS_MIN 2048u

/*
 * plan: each request's job (gp_job_plan) on its message's state as it is now (a wave holds at most
 * one request per message), the unit refs they make, where each key is (resident in the GPU's key
 * table, uploaded by this wave, or carried in its arena: the table stays locked only for the
 * lookups), and which requests take a GHASH matrix (one copy per key). Touches no CUDA state and
 * no arena.
 */
void gp_cuda_wave_plan(gp_wave *wv)
{
    gp_cuda *g = wv->g;
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;

    for (size_t i = 0; i < m; i++) {
        gp_request *r = &reqs[idx[i]];
        uint64_t len = r->kind == GP_REQ_AAD || r->kind == GP_REQ_CRYPT ? r->len : 0;

        gp_job_plan(&c->jobs[i], &r->msg->st, op_of(r), len, (uint32_t)r->aad_len);
        wv->nrefs += !gp_lead_idle(&c->jobs[i], &r->msg->st) + c->jobs[i].nunits;
        wv->nspans += c->jobs[i].nspans;
        if (gp_alg_is_aes(r->msg->st.alg))
            wv->flags |= GP_BATCH_AES;
        if (staged_on_gpu(r)) {
            wv->nstaged++;
            wv->staged_pieces += copy_pieces(r->len);
        } else if (devmem_copied(r, &c->jobs[i])) {
            wv->ndevcopy++;
            wv->staged_pieces += copy_pieces(r->len);
        }
        wv->nspows += pows_staged(r, &c->jobs[i]);
        wv->ndevmem += devmem_data(r);
    }
    /* Where each key is: resident, to be uploaded by this batch, or carried in its arena. */
    if (wv->kt != NULL) {
        int d = (int)(wv->kt - g->keys);

        wv->kbatch = gp_key_table_batch_begin(&wv->kt->table);
        for (size_t i = 0; i < m; i++) {
            gp_key *k = reqs[idx[i]].msg->key;

            c->where[i] = (uint8_t)gp_key_table_lookup(&wv->kt->table, &k->table_slot[d], k->id, wv->kbatch, &c->kslot[i]);
            if (c->where[i] == GP_KEY_UPLOAD)
                c->uploads[wv->nup++] = c->kslot[i];
        }
        wv->nwipes = gp_key_table_take_wipes(&wv->kt->table, wv->kbatch, c->wipes, WIPES_PER_BATCH);
        gp_key_table_batch_unlock(&wv->kt->table);
    } else {
        memset(c->where, GP_KEY_INLINE, m * sizeof(*c->where));
    }
    for (size_t i = 0; i < m; i++) {
        const gp_request *r = &reqs[idx[i]];

        c->mma[i] = NO_MMA;
#if GP_TEST_HOOKS
        const uint64_t mma_min_warps = g->mma_any_batch ? 0 : gp_kernel_warps_at_once(&c->shape);
#else
        const uint64_t mma_min_warps = gp_kernel_warps_at_once(&c->shape);
#endif

        if (gp_ghash_mma_wanted(r->msg->st.alg, c->jobs[i].nunits, wv->nrefs - m, mma_min_warps)
            && gp_key_ghmma_get(r->msg->key) != NULL) {
            /* One copy per key: the same key among the batch's last MMA_DEDUP requests with one. */
            for (size_t k = i, seen = 0; k-- > 0 && seen < MMA_DEDUP && c->mma[i] == NO_MMA;) {
                if (c->mma[k] == NO_MMA)
                    continue;
                seen++;
                if (reqs[idx[k]].msg->key == r->msg->key)
                    c->mma[i] = c->mma[k];
            }
            if (c->mma[i] == NO_MMA)
                c->mma[i] = wv->nmma++;
        }
    }
}

/*
 * direct: which requests' inputs cross by DMA straight from the caller's memory, where the
 * registration cache holds it registered (batching/reg_cache.h): no copy of it into the pinned
 * arena, by the crew or anyone. Only requests of FOLD_MAX bytes and up, whose wave moves its data
 * by DMA whatever else it holds (a folded wave's copy kernel reads its inputs from the pinned
 * arena). Of those, an output apart from its input (no byte shared) that is registered too comes
 * back by DMA into the caller's memory (direct_out): if the GPU fails on the way, the output is
 * half written but the input is intact, and the CPU's re-run writes the output whole. An output in
 * place comes back into the pinned arena and goes to the caller only once the whole wave has
 * succeeded (shape.h, back_after_wave: until then the input must stay). Each keeps its
 * registrations until the wave's wipe (the DMA reads and writes them until the wave's end). A
 * cache lookup may register the range (its second sighting), a CUDA call of device.c's.
 */
static void wave_direct(gp_wave *wv)
{
    wv->ndirect = 0;
    for (size_t i = 0; i < wv->m; i++) {
        gp_request *r = &wv->reqs[wv->idx[i]];

        r->direct_in = r->direct_out = 0;
        if (wv->ndirect < GP_DIRECT_MAX && spreads(r) && r->len >= FOLD_MAX
            && gp_reg_cache_get(r->in, r->len, &wv->direct[wv->ndirect].use)) {
            r->direct_in = 1;
            wv->direct[wv->ndirect].out_use.entry = NULL;
            r->direct_out = (r->out + r->len <= r->in || r->in + r->len <= r->out)
                            && gp_reg_cache_get(r->out, r->len, &wv->direct[wv->ndirect].out_use);
            wv->direct[wv->ndirect++].req = i;
        }
    }
}

/*
 * layout: the arena's regions, in the order the copy kernels and the wipe rely on (everything up to
 * the outputs goes in; states and partials come back; keys to the end are cleared), whether the
 * wave folds its copies into the copy kernels, and room in the pinned arena for both copy lists,
 * sized for the most entries they can take. 0: no arena (nothing has been written).
 */
int gp_cuda_wave_layout(gp_wave *wv)
{
    gp_engine *e = wv->e;
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;
    size_t off;

    wave_direct(wv);   /* first: a request whose input crosses directly never comes back in pieces */
    wv->nchunks = 1;
    /* A lone request in chunks: one whose output comes back in pieces, or one whose output waits in
     * the pinned arena for the whole wave (its pieces cross behind the launches all the same). */
    if (m == 1 && (back_in_pieces(&reqs[idx[0]], 1) || back_after_wave(&reqs[idx[0]]))) {
        const gp_job *j = &c->jobs[0];

        wv->nchunks = gp_chunk_plan(j->len, j->head_len, j->body_len, j->nunits, spread_piece(j->len), wv->chunk);
        if (wv->nchunks > 1 && !gp_cuda_piece_events(c, CHUNK_EVENTS(wv->nchunks)))
            wv->nchunks = 1;
    }
    /* + a claim counter per launch */
    wv->work_off = ALIGN16(wv->refs_off + (wv->nrefs + wv->nchunks) * sizeof(gp_unit_ref));
    wv->spans_off = ALIGN16(wv->work_off + m * sizeof(gp_work));   /* copied in with the descriptors */
    wv->in_off = ALIGN16(wv->spans_off + wv->nspans * sizeof(uint32_t));
    off = wv->in_off;
    for (size_t i = 0; i < m; i++)
        off += ALIGN16(c->jobs[i].aad_len)
               + (staged_on_gpu(&reqs[idx[i]]) || devmem_data(&reqs[idx[i]]) ? 0 : data_bytes(&c->jobs[i]));
    wv->keys_off = ALIGN128(off);
    off = wv->keys_off;
    for (size_t i = 0; i < m; i++)
        off += (c->where[i] != GP_KEY_RESIDENT ? KEY_STRIDE : 0)
               + (carries_pows(&reqs[idx[i]], &c->jobs[i]) && !pows_staged(&reqs[idx[i]], &c->jobs[i])
                  ? POWS_STRIDE : 0);
    wv->mma_off = ALIGN128(off);
    wv->states_off = wv->mma_off + wv->nmma * sizeof(gp_ghash_mma);
    wv->out_off = wv->states_off + m * STATE_STRIDE;
    off = wv->out_off;
    for (size_t i = 0; i < m; i++)
        off += staged_on_gpu(&reqs[idx[i]]) || devmem_data(&reqs[idx[i]]) ? 0
               : reqs[idx[i]].kind == GP_REQ_CRYPT ? data_bytes(&c->jobs[i])
               : reqs[idx[i]].kind == GP_REQ_AAD ? 0 : 16;
    wv->part_off = ALIGN128(off);
    off = wv->part_off;
    for (size_t i = 0; i < m; i++)
        off += ALIGN128((size_t)gp_partials_bytes(&c->jobs[i]));
    wv->spows_off = ALIGN128(off);   /* staged powers: device only, like staged data */
    off = wv->spows_off + wv->nspows * POWS_STRIDE;
    wv->stage_off = ALIGN128(off);
    off = wv->stage_off;
    for (size_t i = 0; i < m; i++)
        if (staged_on_gpu(&reqs[idx[i]]) || devmem_copied(&reqs[idx[i]], &c->jobs[i]))
            off += data_bytes(&c->jobs[i]);
    wv->total = off;
    /* The copy lists, sized for the most entries they can take. */
    wv->fold = wv->out_off <= FOLD_MAX && wv->part_off - wv->states_off <= FOLD_MAX;
    if (wv->fold)
        wv->nchunks = 1;   /* the copy kernels move a folded wave whole (never one of chunk size) */
    wv->gen_refs = wv->nrefs >= GEN_REFS_MIN;
    wv->nin_cap = (wv->fold ? copy_pieces(wv->out_off) : 0) + wv->staged_pieces + wv->nspows * copy_pieces(sizeof(gp_mac_pows))
              + wv->nup + wv->nwipes
              /* a request's units in entries of GP_COPY_REFS_MAX, its lead, and the claim
               * counters (each chunk's units may start a short entry of their own) */
              + (wv->gen_refs ? (wv->nrefs + GP_COPY_REFS_MAX - 1) / GP_COPY_REFS_MAX + 2 * m + 2 * wv->nchunks : 0);
    wv->lists_off = ALIGN16(wv->total);
    wv->nout_cap = wv->staged_pieces + copy_pieces(wv->states_off - wv->keys_off) + copy_pieces(wv->part_off - wv->states_off)
               + copy_pieces(wv->stage_off - wv->part_off);
    {
        const size_t need = wv->lists_off + (wv->nin_cap + wv->nout_cap) * sizeof(gp_copy);
        const uint64_t g0 = e->knobs.stats && need > c->cap ? gp_now_ns() : 0;

        if (!gp_cuda_arena_reserve(e, c, need))
            return 0;
        if (g0 != 0)
            wv->t_grow = gp_now_ns() - g0;
    }
    wv->in_list = (gp_copy *)(c->host + wv->lists_off);
    wv->out_list = wv->in_list + wv->nin_cap;

    wv->refs = (gp_unit_ref *)(c->host + wv->refs_off);
    wv->work = (gp_work *)(c->host + wv->work_off);
    return 1;
}

/* The refs *ref.. of request i: n of them, units first, first + 1, ...; written into the pinned
 * arena, or (gen_refs) as GP_COPY_REFS entries of the copy kernel in, which makes them on the GPU. */
static void put_refs(gp_wave *wv, size_t *ref, size_t i, uint32_t first, uint32_t n)
{
    for (uint32_t k = 0; k < n;) {
        const uint32_t len = wv->gen_refs ? (n - k < GP_COPY_REFS_MAX ? n - k : GP_COPY_REFS_MAX) : 1;
        const uint64_t src = (uint64_t)i << 32 | (uint32_t)(first + k);

        if (wv->gen_refs) {
            gp_copy *p = &wv->in_list[wv->nin++];

            *p = (gp_copy){ .src = src, .dst = gpu_addr(wv->c->dev + wv->refs_off + *ref * sizeof(gp_unit_ref)),
                            .len = len, .flags = GP_COPY_REFS };
        } else {
            wv->refs[*ref] = gp_copy_ref(src, 0);
        }
        *ref += len;
        k += len;
    }
}

/*
 * fill: the pinned arena as the kernels read it: each request's work descriptor, carried AAD and
 * input, key schedule and powers unless resident or staged, GHASH matrix, state; the unit refs
 * (units first, the lead last) and the claim counter; the copy lists. Staged requests' data stays
 * in their chunks (only copy entries name it). No CUDA call.
 */
void gp_cuda_wave_fill(gp_wave *wv)
{
    gp_cuda_slot *c = wv->c;
    gp_request *reqs = wv->reqs;
    const size_t *idx = wv->idx;
    const size_t m = wv->m;

    size_t in_pos = wv->in_off, part_pos = wv->part_off, out_pos = wv->out_off, stage_pos = wv->stage_off, ref = 0, mma_put = 0;
    size_t key_pos = wv->keys_off, spows_pos = wv->spows_off, span_pos = wv->spans_off;

    for (size_t i = 0; i < m; i++) {
        const gp_request *r = &reqs[idx[i]];
        gp_work *w = &wv->work[i];
        size_t pad = body_pad(&c->jobs[i]);

        memset(w, 0, sizeof(*w));
        w->job = c->jobs[i];
        if (w->job.aad_len > 0) {   /* carried AAD, then the request's own input */
            w->job.aad_off = in_pos;
            memcpy(c->host + in_pos, r->aad, w->job.aad_len);
            in_pos += ALIGN16(w->job.aad_len);
        }
        w->state_off = wv->states_off + i * STATE_STRIDE;
        w->partials_off = part_pos;
        if (staged_on_gpu(r)) {   /* in place, in the device-only region */
            w->in_off = w->out_off = stage_pos + pad;
            copy_add(wv->in_list, &wv->nin, r->stage->dev, gpu_addr(c->dev + w->in_off), w->job.len, 0);
            /* The chunk's output half: its input half must survive a batch that fails. */
            copy_add(wv->out_list, &wv->nout, gpu_addr(c->dev + w->in_off), r->stage->dev + GP_STAGE_MAX_BYTES,
                     w->job.len, wv->fold ? GP_COPY_WIPE_SRC : 0);
            stage_pos += data_bytes(&w->job);
        } else if (devmem_copied(r, &w->job)) {   /* device memory, through the staged region */
            w->in_off = w->out_off = stage_pos + pad;
            copy_add(wv->in_list, &wv->nin, gpu_addr(r->in), gpu_addr(c->dev + w->in_off), w->job.len, 0);
            copy_add(wv->out_list, &wv->nout, gpu_addr(c->dev + w->in_off), gpu_addr(r->out), w->job.len,
                     wv->fold ? GP_COPY_WIPE_SRC : 0);
            stage_pos += data_bytes(&w->job);
        } else if (devmem_data(r)) {   /* device memory, in place */
            w->in_off = gpu_addr(r->in) - gpu_addr(c->dev);
            w->out_off = gpu_addr(r->out) - gpu_addr(c->dev);
        } else {
            w->in_off = in_pos + pad;
            w->out_off = r->kind == GP_REQ_CRYPT ? out_pos + pad : out_pos;
            if (r->direct_in) {   /* the DMA reads it from the caller (wave_direct) */
                for (size_t d = 0; d < wv->ndirect; d++)
                    if (wv->direct[d].req == i) {
                        wv->direct[d].off = w->in_off;
                        wv->direct[d].len = w->job.len;
                    }
            } else if (spreads(r) && gp_copy_start(&wv->g->crew, &c->runs[wv->nruns], c->host + w->in_off, r->in,
                                            w->job.len, spread_piece(w->job.len), GP_COPY_STREAMING))
                wv->nruns++;   /* the crew copies it while the wave fills; issue waits for it */
            else if (w->job.len > 0)
                memcpy(c->host + w->in_off, r->in, w->job.len);
            in_pos += data_bytes(&w->job);
            out_pos += r->kind == GP_REQ_CRYPT ? data_bytes(&w->job) : r->kind == GP_REQ_AAD ? 0 : 16;
        }
        /* The key as the device reads it (not the host's bitsliced round keys): in its table
         * slot, or here; a Poly1305 request's units take its message's powers of r. */
        if (c->where[i] != GP_KEY_RESIDENT) {
            memcpy(c->host + key_pos, gp_key_sched_get(r->msg->key), GP_KEY_SCHED_DEVICE_BYTES);
            w->key_off = key_pos;
            /* From the pinned arena: the device arena's copy is made by the same launch. */
            if (c->where[i] == GP_KEY_UPLOAD)
                copy_add(wv->in_list, &wv->nin, gpu_addr(c->host + key_pos), gp_key_table_addr(&wv->kt->table, c->kslot[i]),
                         GP_KEY_SCHED_DEVICE_BYTES, 0);
            key_pos += KEY_STRIDE;
        }
        if (c->where[i] != GP_KEY_INLINE)   /* resident, or uploaded before the kernel */
            w->key_off = gp_key_table_addr(&wv->kt->table, c->kslot[i]) - gpu_addr(c->dev);
        if (pows_staged(r, &w->job)) {
            copy_add(wv->in_list, &wv->nin, r->stage->dev + GP_STAGE_POWS_OFF, gpu_addr(c->dev + spows_pos),
                     sizeof(gp_mac_pows), 0);
            w->pows_off = spows_pos;
            spows_pos += POWS_STRIDE;
        } else if (carries_pows(r, &w->job)) {
            memcpy(c->host + key_pos, gp_kstate_pows(r->msg, gp_key_sched_get(r->msg->key), &c->jobs[i]),
                   sizeof(gp_mac_pows));
            w->pows_off = key_pos;
            key_pos += POWS_STRIDE;
        }
        if (c->mma[i] != NO_MMA) {
            w->ghmma_off = wv->mma_off + c->mma[i] * sizeof(gp_ghash_mma);
            if (c->mma[i] == mma_put) {   /* the key's first request in the batch */
                memcpy(c->host + w->ghmma_off, gp_key_ghmma_get(r->msg->key), sizeof(gp_ghash_mma));
                mma_put++;
            }
        }
        memcpy(c->host + w->state_off, &r->msg->st, sizeof(gp_msg_state));
        if (w->job.nspans != 0) {
            w->spans_off = (uint32_t)span_pos;   /* the descriptors' region: well under 4 GiB */
            memset(c->host + span_pos, 0, w->job.nspans * sizeof(uint32_t));
            span_pos += w->job.nspans * sizeof(uint32_t);
        }
        const int lead = gp_work_plan_lead(w, (gp_msg_state *)(c->host + w->state_off),
                                           (uint32_t *)(c->host + w->spans_off));
        part_pos += ALIGN128((size_t)gp_partials_bytes(&w->job));
        /* Units first, the lead last: a lane group's warp holds two groups, and a lead (one
         * lane of serial work) beside a unit in the same warp waited out the unit's whole
         * lane work before running; the lone request's finish then waited for the lead. A
         * chunked wave (m == 1) has each chunk's units, then its claim counter, zero
         * (kernels/batch_abi.h), and the lead in the first chunk, whose output piece it writes. */
        if (wv->nchunks == 1) {
            put_refs(wv, &ref, i, 0, w->job.nunits);
            if (lead)
                put_refs(wv, &ref, i, GP_UNIT_LEAD, 1);
        } else {
            for (size_t k = 0; k < wv->nchunks; k++) {
                wv->chunk_ref[k] = ref;
                put_refs(wv, &ref, i, wv->chunk[k].unit_lo, wv->chunk[k].unit_hi - wv->chunk[k].unit_lo);
                if (lead && k == 0)
                    put_refs(wv, &ref, i, GP_UNIT_LEAD, 1);
                wv->chunk_nref[k] = ref - wv->chunk_ref[k];
                put_refs(wv, &ref, 0, 0, 1);
            }
        }
    }
    if (wv->nchunks == 1)
        put_refs(wv, &ref, 0, 0, 1);   /* the claim counter, zero (kernels/batch_abi.h) */
    for (size_t i = 0; i < wv->nwipes; i++)   /* freed keys' slots, cleared */
        copy_add(wv->in_list, &wv->nin, 0, gp_key_table_addr(&wv->kt->table, c->wipes[i]), KEY_STRIDE, 0);
    if (wv->fold) {
        /* Descriptors and inputs in (but refs made on the GPU); results back, and what is left of
         * the batch cleared. */
        const size_t from = wv->gen_refs ? wv->work_off : 0;

        copy_add(wv->in_list, &wv->nin, gpu_addr(c->host + from), gpu_addr(c->dev + from), wv->out_off - from, 0);
        copy_add(wv->out_list, &wv->nout, 0, gpu_addr(c->dev + wv->keys_off), wv->states_off - wv->keys_off, 0);
        copy_add(wv->out_list, &wv->nout, gpu_addr(c->dev + wv->states_off), gpu_addr(c->host + wv->states_off),
                 wv->part_off - wv->states_off, GP_COPY_WIPE_SRC);
        copy_add(wv->out_list, &wv->nout, 0, gpu_addr(c->dev + wv->part_off), wv->stage_off - wv->part_off, 0);
    }
}
