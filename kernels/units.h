/* SPDX-License-Identifier: Apache-2.0 */
/* Parallel units: one request's bulk split into fixed-size pieces whose MACs combine by powers. */
#ifndef GP_UNITS_H
#define GP_UNITS_H

#include "msg_unit.h"
#include "ghash_mma.h"
#include "probe.h"

/*
 * A data request of a message runs as:
 *   lead    the head, serially, up to the next 64-byte text boundary (also closes the AAD);
 *   body    whole 64-byte chunks in units of GP_UNIT_BYTES, all in parallel: keystream from a
 *           counter computed from the unit's offset, and the unit's MAC from zero, U_u, made by
 *           its lanes with one multiplication per 16-byte block (see "Lanes" below);
 *   finish  (whoever completes last, a whole lane group) combines the lead's MAC X_lead and the
 *           units' U_u as the serial MAC would have (GHASH: X = X*H ^ block; Poly1305:
 *           h = (h + block)*r), then runs the tail serially.
 * With n units, the last of c chunks, Q = P^(4L) (P = H or r, L = GP_UNIT_LANES):
 *     X = U_(n-1) + P^(4c) * T,   T = X_lead*Q^(n-1) + sum_(u<n-1) U_u*Q^(n-2-u)
 * ("+" is XOR for GHASH, addition mod 2^130 - 5 for Poly1305). T is a Horner sum over the
 * sequence X_lead, U_0, .., U_(n-2), which the finisher's L lanes split by stride: lane i takes
 * every L-th element counted from the end, steps by Q^L and shifts its sum by Q^i; the lanes' sums
 * add up to T. No chain of multiplications longer than ceil(n / L) + 1 runs on any thread.
 * A request of more than GP_SPANS_FROM units folds in two levels instead ("Spans" below), so that
 * no chain grows with the message beyond a few dozen multiplications.
 * 64 bytes is a multiple of every block involved (AES 16, ChaCha20 64, GHASH/Poly1305 16), so at
 * the body start no keystream or MAC block is pending and units share nothing but read-only data.
 * Fixed-size units keep the threads of a warp doing the same work whatever the message lengths.
 */
#define GP_UNIT_LEAD 0xffffffffu    /* gp_unit_ref.unit of a request's lead */
#define GP_PARTIAL_BYTES 32u        /* one unit's partial MAC: gp_lane_mac words, then zeros */


/* Advance a counter block by n keystream blocks, as each algorithm counts (see gp_ctr_*). */
GP_KFN void gp_ctr_add(uint32_t alg, uint8_t c[16], uint64_t n)
{
    if (alg == GP_ALG_AES_CTR) {
        for (int i = 15; i >= 0 && n != 0; i--) {       /* 128-bit big-endian */
            uint64_t s = (uint64_t)c[i] + (n & 0xff);

            c[i] = (uint8_t)s;
            n = (n >> 8) + (s >> 8);
        }
    } else if (alg == GP_ALG_AES_GCM) {
        gp_store_be32(c + 12, gp_load_be32(c + 12) + (uint32_t)n);   /* inc32, wrapping */
    } else {
        uint64_t v = (uint64_t)gp_load_le32(c) | (uint64_t)gp_load_le32(c + 4) << 32;

        v += n;                                          /* LE32 counter carrying into word 1 */
        gp_store_le32(c, (uint32_t)v);
        gp_store_le32(c + 4, (uint32_t)(v >> 32));
    }
}

/*
 * Spans. The fold's sequence E_0 = X_lead, E_k = U_(k-1) (k = 1..n-1; see the top of this file) of
 * a request of more than GP_SPANS_FROM units is cut, counted from its end, into spans of G elements
 * (gp_span_units): span s holds the elements whose distance d = n-1-k from the end lies in
 * [sG, sG+G). Its value V_s = sum E_k Q^(d - sG) is a fold of at most G elements (each lane a
 * Horner chain of G/L), and T = sum_s V_s R^s with R = Q^G is a fold of the spans by the same
 * scheme (chains of ceil(spans / L)). On the GPU the last element of a span to finish folds the
 * span (a counter per span), and the last span (or the last unit, which is not an element)
 * finishes the request; the host folds every span in turn. Each fold runs on one warp after the
 * units it waits for, a chain of dependent multiplications that nothing else hides, so G is short
 * (GP_SPAN_CHAIN steps a lane) and grows only where that would make more than L*L spans (a chain of
 * L in the spans' fold); the spans' fold makes the powers of R it needs in one squaring chain per
 * lane (gp_spans_fold_lane). Below GP_SPANS_FROM units one fold of chains of n/L is the shorter.
 * Measured: bench/RESULTS.md, "A long AEAD message's fold".
 */
#define GP_SPAN_CHAIN 4u
#define GP_SPANS_FROM (GP_UNIT_LANES * GP_UNIT_LANES / 2u)

/* G for a request of `nunits` body units: GP_SPAN_CHAIN * L elements, or more where that would
 * make more than L*L spans. */
GP_KFN uint32_t gp_span_units(uint32_t nunits)
{
    const uint32_t most = GP_UNIT_LANES * GP_UNIT_LANES * GP_UNIT_LANES;
    const uint32_t per_lane = (nunits + most - 1) / most;

    return GP_UNIT_LANES * (per_lane > GP_SPAN_CHAIN ? per_lane : GP_SPAN_CHAIN);
}

/* The spans of an AEAD request of `nunits` body units; 0: one fold. */
GP_KFN uint32_t gp_spans_of(uint32_t nunits)
{
    return nunits > GP_SPANS_FROM ? (nunits + gp_span_units(nunits) - 1) / gp_span_units(nunits) : 0;
}

/* The elements of span s (the last span, which holds E_0, may be short). */
GP_KFN uint32_t gp_span_size(const gp_job *j, uint32_t s)
{
    const uint32_t g = gp_span_units(j->nunits), left = j->nunits - s * g;

    return left < g ? left : g;
}

/* The span that counts a ref's completion: the lead is E_0, unit u is E_(u+1); the last unit is
 * no element (the finish adds it) and counts on the request's `done` alone. */
GP_KFN uint32_t gp_span_of_ref(const gp_job *j, uint32_t unit)
{
    const uint32_t k = unit == GP_UNIT_LEAD ? 0 : unit + 1;

    return (j->nunits - 1 - k) / gp_span_units(j->nunits);
}

/*
 * The GPU's count of a request's refs (kernels/batch_kernel.cu, batch_ref_count): with spans, every
 * ref but the last unit is an element, counted on its span's counter first, and the one counted
 * last in its span (the old count gp_span_size - 1) folds the span and counts it on `done`; the last
 * unit counts on `done` alone. Without spans every ref counts on `done`. The count that finds `done`
 * at gp_done_at_finish finishes the request; the planner may have counted an idle lead already
 * (gp_work_plan_lead).
 */
GP_KFN int gp_counts_on_span(const gp_job *j, uint32_t unit)
{
    return j->nspans != 0 && unit != j->nunits - 1;
}

GP_KFN uint32_t gp_done_at_finish(const gp_job *j)
{
    return j->nspans != 0 ? j->nspans : j->nunits;
}

/* Bytes of a request's partial MACs: a partial per unit, then a value per span. */
GP_KFN uint64_t gp_partials_bytes(const gp_job *j)
{
    return ((uint64_t)j->nunits + j->nspans) * GP_PARTIAL_BYTES;
}

/*
 * Shifted partials. A finisher lane's Horner chain over its elements (one multiplication by
 * S = Q^L an element, each waiting for the last) runs after the request's last unit, on one warp,
 * with nothing to hide it: up to 16 steps for a fold of L*L/2 units. For GCM each element
 * instead carries its own steps: the unit that makes E_k multiplies its partial by S^e, e = d / L
 * for its distance d from the end of the fold (the chain steps between them), from the key's
 * stride powers (at most one multiplication, gp_stride_pow); the finisher's lanes then only add
 * their elements and shift by Q^i, and E_0 (the lead's MAC, read from the state) is shifted where
 * it is added. The units run in parallel, so their shifts leave the batch's end. With spans, only
 * span 0's elements are shifted (d < G): refs go out in unit order, so span 0, which the last
 * units fill, is the one whose fold waits for the request's last unit; every other span folds
 * its chain of GP_SPAN_CHAIN steps while later units still run, where a shift in each of its
 * units would cost the batch's throughput. ChaCha20-Poly1305's r lives for one message, so a
 * table would cost the host more multiplications a message: its lanes keep the chain. So does a
 * fold whose steps pass the table (G / L >= GP_STRIDE_POWS^2: requests of more than 16 GiB).
 */
GP_KFN int gp_partials_shifted(uint32_t alg, const gp_job *j)
{
    return alg == GP_ALG_AES_GCM && j->nunits > GP_UNIT_LANES
           && (j->nspans == 0 || gp_span_units(j->nunits) / GP_UNIT_LANES < GP_STRIDE_POWS * GP_STRIDE_POWS);
}

/* Whether the element at distance d from the end of the request's sequence is shifted. */
GP_KFN int gp_element_shifted(uint32_t alg, const gp_job *j, uint32_t d)
{
    return gp_partials_shifted(alg, j) && (j->nspans == 0 || d < gp_span_units(j->nunits));
}

/* Element E_el's value m, shifted by its steps where it is shifted. */
GP_KFN void gp_element_shift(const gp_key_sched *k, const gp_job *j, uint32_t el, gp_lane_mac *m)
{
    const uint32_t d = j->nunits - 1 - el;
    gp_lane_mac s;

    if (!gp_element_shifted(k->alg, j, d) || d < GP_UNIT_LANES)
        return;
    gp_stride_pow(k, d / GP_UNIT_LANES, &s);
    gp_mac_mul(GP_ALG_AES_GCM, m, &s);
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(&s, sizeof(s));
#endif
}

/* Unit u's partial m before it is stored: unit u is E_(u+1); the last unit is no element. */
GP_KFN void gp_partial_shift(const gp_key_sched *k, const gp_job *j, uint32_t u, gp_lane_mac *m)
{
    if (u + 1 < j->nunits)
        gp_element_shift(k, j, u + 1, m);
}

/* Plan a request on the state it will start from (the host does this before a batch). `aad_len`
 * bytes of AAD (AEAD only) go first; they change neither the counter nor the text position. */
GP_KFN void gp_job_plan(gp_job *j, const gp_msg_state *st, uint32_t op, uint64_t len, uint32_t aad_len)
{
    const uint64_t bs = gp_alg_is_aes(st->alg) ? 16 : 64;
    uint64_t p = st->text_len, head, body;

    gp_state_wipe(j, sizeof(*j));
    j->op = op;
    j->len = len;
    j->aad_len = aad_len;
    j->head_len = len;
    if (op != GP_OP_ENCRYPT && op != GP_OP_DECRYPT)
        return;
    head = (64 - p % 64) % 64;
    if (head > len)
        head = len;
    body = (len - head) / 64 * 64;
    if (body == 0)
        return;
    j->head_len = head;
    j->body_len = body;
    j->nunits = (uint32_t)((body + GP_UNIT_BYTES - 1) / GP_UNIT_BYTES);
    j->nspans = gp_alg_is_aead(st->alg) ? gp_spans_of(j->nunits) : 0;
    /* st->ctr is the counter of block ceil(p / bs) (a partly used block was already generated);
     * the body starts at block (p + head) / bs. */
    gp_bytes_copy(j->body_ctr, st->ctr, 16);
    gp_ctr_add(st->alg, j->body_ctr, (p + head) / bs - (p + bs - 1) / bs);
}

/*
 * The tag as it would be if the message ended now (see gp_msg_state.spec_tag), computed on a copy:
 * the message may still go on. Called by whoever finishes a request last.
 */
GP_KFN void gp_spec_tag(gp_msg_state *st, const gp_key_sched *k, uint32_t op)
{
    gp_msg_state t;

    st->spec_valid = 0;
    if (!gp_alg_is_aead(st->alg) || op == GP_OP_TAG)
        return;
    t = *st;
    gp_msg_run(&t, k, GP_OP_TAG, NULL, st->spec_tag, 0);
    st->spec_valid = 1;
    gp_state_wipe(&t, sizeof(t));
}

/* The lead: the carried AAD first; AAD and tag requests whole; for data, the head (it also pads
 * the AAD, RFC 8439 §2.8, SP 800-38D §7.1) and, when there is no body, everything (and then the
 * speculative tag, as the request's last unit). */
GP_KFN void gp_unit_lead(gp_msg_state *st, const gp_key_sched *k, const gp_job *j, const uint8_t *aad,
                         const uint8_t *in, uint8_t *out)
{
    if (j->aad_len > 0)
        gp_msg_run(st, k, GP_OP_AAD, aad, NULL, j->aad_len);
    gp_msg_run(st, k, j->op, in, out, (size_t)j->head_len);
    if (j->nunits == 0)
        gp_spec_tag(st, k, j->op);
}

/*
 * Whether E_0, the lead, is the only element of its span (a request with spans whose nunits is 1
 * mod G). Such a lead is never idle: a span is folded only by the ref counted last in it
 * (gp_counts_on_span), and with the lead left out and counted by the planner, no ref would fold
 * that span or count it on `done`, so the finish would never run: no tail written, the state sent
 * back as it came (docs/limitations.md, "A wrong tail on the GPU").
 */
GP_KFN int gp_lead_alone_in_span(const gp_job *j)
{
    return j->nspans != 0 && gp_span_size(j, gp_span_of_ref(j, GP_UNIT_LEAD)) == 1;
}

/*
 * Whether request j's lead, on state st, would only mark the text begun (in_text): a data request
 * with body units, no carried AAD, no head (the text starts or goes on at a 64-byte boundary, so no
 * keystream or MAC block is half used) and no AAD bytes waiting to be padded. Its planner then
 * makes that one change to the state itself and leaves the lead out (gp_lead_skip): the GPU saves
 * a ref per request, a warp that would claim it, load the state and store it back for nothing.
 * Not a lead alone in its span (gp_lead_alone_in_span): its ref is what folds that span.
 */
GP_KFN int gp_lead_idle(const gp_job *j, const gp_msg_state *st)
{
    return j->nunits > 0 && j->aad_len == 0 && j->head_len == 0 && st->mac_pend_len == 0
           && !gp_lead_alone_in_span(j);
}

/* What an idle lead (gp_lead_idle) would have done. */
GP_KFN void gp_lead_skip(gp_msg_state *st)
{
    st->in_text = 1;
}

/* A planner's side of gp_lead_idle for request w on st, the state copy it will run from: an idle
 * lead is done here and counted done (on its span's counter in span_done when the request has
 * spans), so the last unit still finishes the request. Returns whether the request still needs its
 * lead ref. */
GP_KFN int gp_work_plan_lead(gp_work *w, gp_msg_state *st, uint32_t *span_done)
{
    if (!gp_lead_idle(&w->job, st))
        return 1;
    gp_lead_skip(st);
    if (w->job.nspans != 0)
        span_done[gp_span_of_ref(&w->job, GP_UNIT_LEAD)] = 1;   /* E_0 is in its span already */
    else
        w->done = 1;
    return 0;
}

/*
 * 64 bytes between memory and a thread's own buffer, as 16 little-endian words. On the GPU that is
 * four 16-byte vector accesses when the address allows (the cuda planner places every body on a
 * 16-byte boundary), so the byte-level work happens in registers and lane-local memory rather than
 * as byte loads scattered over global memory. Every target here is little-endian.
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
# error "the kernels assume a little-endian target"
#endif

GP_KFN void gp_chunk_load(uint32_t w[16], const uint8_t *p)
{
#if defined(__CUDA_ARCH__)
    if (((uintptr_t)p & 15) == 0) {
        const uint4 *v = (const uint4 *)p;

        for (int i = 0; i < 4; i++) {
            uint4 t = v[i];

            w[4 * i] = t.x; w[4 * i + 1] = t.y; w[4 * i + 2] = t.z; w[4 * i + 3] = t.w;
        }
        return;
    }
#endif
    for (int i = 0; i < 16; i++)
        w[i] = gp_load_le32(p + 4 * i);
}

GP_KFN void gp_chunk_store(uint8_t *p, const uint32_t w[16])
{
#if defined(__CUDA_ARCH__)
    if (((uintptr_t)p & 15) == 0) {
        uint4 *v = (uint4 *)p;

        for (int i = 0; i < 4; i++)
            v[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        return;
    }
#endif
    for (int i = 0; i < 16; i++)
        gp_store_le32(p + 4 * i, w[i]);
}

/* Words q*4 .. q*4+3 of a 16-word block, with constant indices (on the GPU a variable index would
 * put the block in local memory). */
GP_KFN void gp_quarter_words(const uint32_t w[16], uint32_t q, uint32_t out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = q == 0 ? w[i] : q == 1 ? w[4 + i] : q == 2 ? w[8 + i] : w[12 + i];
}

/* The 16-byte block at p as 4 little-endian words, and back (16-byte aligned on the GPU: arena
 * bodies are, kernels/batch_abi.h). */
GP_KFN void gp_block_load(uint32_t w[4], const uint8_t *p)
{
#if defined(__CUDA_ARCH__)
    const uint4 t = *(const uint4 *)p;

    w[0] = t.x; w[1] = t.y; w[2] = t.z; w[3] = t.w;
#else
    for (int i = 0; i < 4; i++)
        w[i] = gp_load_le32(p + 4 * i);
#endif
}

GP_KFN void gp_block_store(uint8_t *p, const uint32_t w[4])
{
#if defined(__CUDA_ARCH__)
    *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
#else
    for (int i = 0; i < 4; i++)
        gp_store_le32(p + 4 * i, w[i]);
#endif
}


/* ---- MAC values and the powers table ---- */

#define GP_KERNEL_BLOCK 256u        /* threads per block of gp_batch_kernel with the narrow AES table
                                     * (a multiple of 32; the wide one's block is several of these,
                                     * kernels/launch.h) */
#define GP_COPY_BLOCK 256u          /* threads per block of gp_copy_kernel */
/* gp_copy_kernel's blocks at most (they stride over the entries). A copy block waits on PCIe most
 * of its life, and the batch kernel's wide-table block (the whole register file) cannot share an
 * SM with it: capped at 32 rather than 1024, other slots' batch kernels keep most SMs while a
 * copy waits. */
#define GP_COPY_MAX_GRID 32u
#define GP_COPY_PIECE (16u << 10)   /* bytes of one entry at most: a block moves it in one pass */
GP_STATIC_ASSERT(GP_UNIT_BYTES % 64u == 0 && GP_UNIT_LANES >= 1 && GP_UNIT_LANES <= 32
                 && (GP_UNIT_LANES & (GP_UNIT_LANES - 1)) == 0,
                 "unit_bytes must be 64 times a power of two, at most 2048 (a lane per chunk)");

/* The MAC key of a message as a gp_lane_mac: GCM's H from the key, Poly1305's r from the state. */
GP_KFN void gp_mac_key(gp_lane_mac *p, const gp_key_sched *k, const gp_msg_state *st)
{
    if (k->alg == GP_ALG_AES_GCM) {
        gp_lane_mac_set_x(p, k->gcm_h);
    } else {
        for (int i = 0; i < 5; i++)
            p->w[i] = st->poly.r[i];
    }
}

/* The powers a request's units and finisher use: the key's (GCM; unused without a MAC), or made
 * now from the message's r (ChaCha20-Poly1305), into `buf`. */
GP_KFN const gp_mac_pows *gp_request_pows(const gp_key_sched *k, const gp_msg_state *st, gp_mac_pows *buf)
{
    gp_lane_mac p;

    if (k->alg != GP_ALG_CHACHA20_POLY1305)
        return &k->mac_pows;
    gp_mac_key(&p, k, st);
    gp_mac_pows_make(buf, k->alg, &p);
    gp_state_wipe(&p, sizeof(p));
    return buf;
}

/*
 * Lanes. A body unit runs as GP_UNIT_LANES lanes, one per 64-byte chunk: each lane makes its
 * chunk's keystream (4 AES blocks or 1 ChaCha20 block), XORs it in, and takes its chunk's 4 MAC
 * blocks B_0..B_3 by Horner with P (3 multiplications) and one more by the table's lane power:
 *     m_l = (B_0 P^3 + B_1 P^2 + B_2 P + B_3) * P^(4(L-1-l)+1)
 * so the unit's MAC from zero is the plain sum of its lanes' values, U = sum_l m_l: a reduction by
 * additions (shuffles on the GPU), no multiplications. A short (last) unit of c chunks is
 * right-aligned: its chunks sit in lanes L-c..L-1 and the absent leading lanes contribute 0.
 * On the GPU the lanes are threads (kernels/batch_kernel.cu); on the host gp_unit_body runs the
 * same lane function over an array, so the host executor proves the math the GPU runs. With build
 * option ghash_mma a GCM unit's Horner sums are instead one tensor-core product for the whole warp
 * (kernels/ghash_mma.h); the host keeps the multiplications, and tests/unit/test_kernels.c checks
 * the matrix and the warp's fragment layout against them.
 */

/* Chunks in unit u (1..GP_UNIT_LANES). */
GP_KFN uint32_t gp_unit_chunks(const gp_job *j, uint32_t u)
{
    uint64_t n = j->body_len - (uint64_t)u * GP_UNIT_BYTES;

    return (uint32_t)((n > GP_UNIT_BYTES ? GP_UNIT_BYTES : n) / 64);
}

/* The 16 bytes of a counter block as 4 little-endian words. On the GPU, 4-byte loads when the block
 * is so aligned (gp_job keeps body_ctr on a 16-byte boundary in the arena): 16 byte loads and their
 * assembly slowed AES-128-CTR. */
GP_KFN void gp_ctr_block_le(const uint8_t c[16], uint32_t w[4])
{
#if defined(__CUDA_ARCH__)
    if (((uintptr_t)c & 3) == 0) {
        for (int i = 0; i < 4; i++)
            w[i] = ((const uint32_t *)c)[i];
        return;
    }
#endif
    for (int i = 0; i < 4; i++)
        w[i] = gp_load_le32(c + 4 * i);
}

/*
 * Counter blocks body_ctr + n, + n + stride, ... (nblocks of them, 1 or 4; AES only for a stride
 * other than 1) as little-endian words, as each algorithm counts (see gp_ctr_add): out[4b..4b+3] is
 * block b, ready for the cipher's input.
 */
GP_KFN void gp_ctr_words_stride(uint32_t alg, const uint8_t body_ctr[16], uint64_t n, uint32_t stride,
                                uint32_t nblocks, uint32_t *out)
{
    uint32_t cw[4];

    gp_ctr_block_le(body_ctr, cw);
    if (gp_alg_is_aes(alg)) {
        const uint64_t hi = (uint64_t)gp_bswap32(cw[0]) << 32 | gp_bswap32(cw[1]);
        const uint64_t lo = (uint64_t)gp_bswap32(cw[2]) << 32 | gp_bswap32(cw[3]);

        for (uint32_t b = 0; b < nblocks; b++) {
            const uint64_t add = n + (uint64_t)b * stride;
            uint64_t l = lo + add, h = hi + (l < lo);     /* 128-bit big-endian */

            if (alg == GP_ALG_AES_GCM) {                   /* inc32: the low word only */
                h = hi;
                l = (lo & 0xffffffff00000000ull) | (uint32_t)(lo + add);
            }
            out[4 * b] = gp_bswap32((uint32_t)(h >> 32));
            out[4 * b + 1] = gp_bswap32((uint32_t)h);
            out[4 * b + 2] = gp_bswap32((uint32_t)(l >> 32));
            out[4 * b + 3] = gp_bswap32((uint32_t)l);
        }
    } else {
        uint64_t v = ((uint64_t)cw[0] | (uint64_t)cw[1] << 32) + n;

        out[0] = (uint32_t)v;           /* LE32 counter carrying into word 1 */
        out[1] = (uint32_t)(v >> 32);
        out[2] = cw[2];
        out[3] = cw[3];
    }
}

/* Consecutive counter blocks body_ctr + n .. + n + nblocks - 1. */
GP_KFN void gp_ctr_words(uint32_t alg, const uint8_t body_ctr[16], uint64_t n, uint32_t nblocks, uint32_t *out)
{
    gp_ctr_words_stride(alg, body_ctr, n, 1, nblocks, out);
}

/* One 16-byte MAC block (4 little-endian words as loaded) as a MAC value: GHASH's big-endian
 * halves, or Poly1305's limbs with the 2^128 bit of a full block (RFC 8439 §2.5). */
GP_KFN void gp_mac_block(uint32_t alg, const uint32_t w[4], gp_lane_mac *b)
{
    if (alg == GP_ALG_AES_GCM) {
        for (int i = 0; i < 4; i++)
            b->w[i] = gp_bswap32(w[i]);
        b->w[4] = 0;
    } else {
        b->w[0] = w[0] & GP_POLY_MASK26;
        b->w[1] = ((w[0] >> 26) | (w[1] << 6)) & GP_POLY_MASK26;
        b->w[2] = ((w[1] >> 20) | (w[2] << 12)) & GP_POLY_MASK26;
        b->w[3] = ((w[2] >> 14) | (w[3] << 18)) & GP_POLY_MASK26;
        b->w[4] = (w[3] >> 8) | (1u << 24);
    }
}

/*
 * One chunk's 4 MAC blocks (c, consumed) into lane l's value m (see "Lanes"). One block per pass,
 * the next block shifted down into c[0..3], and the passes not unrolled on the GPU: c stays
 * indexed by constants (in registers) and one copy of the multiplication is live at a time.
 */
GP_KFN void gp_lane_mac_chunk(uint32_t alg, const gp_mac_pows *pw, uint32_t lane, uint32_t c[16],
                              gp_lane_mac *m)
{
    gp_lane_mac p, b;

    gp_mac_block(alg, c, m);
    /* Passes 1-3 multiply by P and add the next block; pass 4 multiplies by the lane's power. One
     * copy of the multiplication serves all four: GCM's is ~600 instructions, and a second copy
     * in the hot loop cost instruction-cache misses on the GPU. */
    GP_NO_UNROLL
    for (int i = 1; i <= 4; i++) {
        gp_mac_pow_get(&p, pw, i < 4 ? GP_POW_LANE + GP_UNIT_LANES - 1 : GP_POW_LANE + lane);   /* P, lane power */
        gp_mac_mul(alg, m, &p);
        if (i < 4) {
            for (int k = 0; k < 12; k++)
                c[k] = c[k + 4];
            gp_mac_block(alg, c, &b);
            gp_mac_add(alg, m, &b);
        }
    }
}

/*
 * Lane `lane`'s chunk of a body unit: its keystream XORed in (out) and the ciphertext, which the
 * MAC covers (the input when decrypting, the output when encrypting), left in c.
 */
GP_KFN void gp_lane_crypt(const gp_job *j, const gp_key_sched *k, uint64_t chunk, const uint8_t *in,
                          uint8_t *out, uint32_t c[16])
{
    const uint32_t alg = k->alg;
    const int dec = j->op == GP_OP_DECRYPT;
    uint32_t data[16];

    gp_chunk_load(data, in + 64 * chunk);
    if (gp_alg_is_aes(alg)) {
        gp_ctr_words(alg, j->body_ctr, 4 * chunk, 4, c);
        GP_PROBE_AFTER(GP_PROBE_LOADED, data[0] ^ data[15] ^ c[0] ^ c[15]);
        gp_aes_encrypt4_words(&k->aes, 1, c);   /* counter blocks, one apart */
    } else {
        uint32_t ctr[4];

        gp_ctr_words(alg, j->body_ctr, chunk, 1, ctr);
        GP_PROBE_AFTER(GP_PROBE_LOADED, data[0] ^ data[15] ^ ctr[0] ^ ctr[3]);
        gp_chacha20_block_words(k->chacha_key, ctr, c);
    }
    GP_PROBE_AFTER(GP_PROBE_KEYSTREAM, c[0] ^ c[15]);
    for (int b = 0; b < 16; b++) {
        uint32_t x = data[b] ^ c[b];

        c[b] = dec ? data[b] : x;
        data[b] = x;
    }
    gp_chunk_store(out + 64 * chunk, data);
#if !defined(__CUDA_ARCH__)
    /* On the GPU these live in registers; a volatile wipe would only push them to local memory. */
    gp_state_wipe(data, sizeof(data));
#endif
}

/*
 * AES-CTR (no MAC) lane `lane` of body unit u by blocks a warp step apart: the lane takes the
 * unit's 16-byte blocks lane, lane + L, lane + 2L and lane + 3L (L = GP_UNIT_LANES) rather than its
 * own 64-byte chunk, so each of the warp's 16-byte loads and stores covers 16L contiguous bytes.
 * The chunk layout's accesses, 16 bytes per lane 64 bytes apart, would touch four times the cache
 * lines per instruction, and the L1 data pipe that carries them also carries the table lookups,
 * which set the pace (ncu shows that pipe the busiest). The four counter blocks
 * still agree on bytes 0-13 unless a carry leaves the low 16 bits inside the unit
 * (gp_aes_ctr_shared checks; the cached rounds only need the agreement, not adjacency). A short
 * (last) unit's blocks are the first 4 * nch of the unit; lanes past them skip their loads and
 * stores. Each lane reads a block before writing it and lanes touch disjoint blocks, so in may
 * equal out.
 */
GP_KFN void gp_lane_ctr_strided(const gp_job *j, const gp_key_sched *k, uint32_t u, uint32_t lane,
                                const uint8_t *in, uint8_t *out)
{
    const uint32_t nblk = 4 * gp_unit_chunks(j, u);
    const uint64_t first = (uint64_t)u * 4 * GP_UNIT_LANES;   /* the unit's first block in the body */
    uint32_t c[16], data[16];

    /* The loads first, so that the rounds hide them. */
    for (uint32_t q = 0; q < 4; q++) {
        const uint32_t b = lane + q * GP_UNIT_LANES;

        for (int i = 0; i < 4; i++)
            data[4 * q + i] = 0;
        if (b < nblk)
            gp_block_load(data + 4 * q, in + (first + b) * 16);
    }
    gp_ctr_words_stride(k->alg, j->body_ctr, first + lane, GP_UNIT_LANES, 4, c);
    GP_PROBE_AFTER(GP_PROBE_LOADED, data[0] ^ data[15] ^ c[0] ^ c[15]);
    gp_aes_encrypt4_words(&k->aes, 1, c);
    GP_PROBE_AFTER(GP_PROBE_KEYSTREAM, c[0] ^ c[15]);
    for (uint32_t q = 0; q < 4; q++) {
        const uint32_t b = lane + q * GP_UNIT_LANES;

        for (int i = 0; i < 4; i++)
            data[4 * q + i] ^= c[4 * q + i];
        if (b < nblk)
            gp_block_store(out + (first + b) * 16, data + 4 * q);
    }
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(c, sizeof(c));
    gp_state_wipe(data, sizeof(data));
#endif
}

/*
 * Lane `lane` of body unit u: its chunk's keystream, XOR and MAC value m (zero for an absent
 * leading lane of a short unit). in/out point at the body start; in may equal out (each lane reads
 * its whole chunk before writing it, and lanes touch disjoint chunks). mx: a GCM request's
 * tensor-core matrix (kernels/ghash_mma.h), or NULL; with it, on the GPU, the warp's lanes (the
 * whole unit) take their Horner sums together by MMA, absent lanes with a zero chunk, and the
 * lane's power is the one multiplication left.
 */
GP_KFN void gp_unit_lane(const gp_job *j, const gp_key_sched *k, const gp_mac_pows *pw, const gp_ghash_mma *mx,
                         uint32_t u, uint32_t lane, const uint8_t *in, uint8_t *out, gp_lane_mac *m)
{
    const uint32_t alg = k->alg, nch = gp_unit_chunks(j, u);
    const int present = lane + nch >= GP_UNIT_LANES;
    const uint64_t chunk = (uint64_t)u * GP_UNIT_LANES + (lane + nch - GP_UNIT_LANES);   /* index in the body */
    uint32_t c[16];

    gp_lane_mac_zero(m);
    if (alg == GP_ALG_AES_CTR) {   /* uniform over the warp */
        gp_lane_ctr_strided(j, k, u, lane, in, out);
        return;
    }
#if GP_GHASH_MMA_DEVICE
    if (mx != NULL) {   /* uniform over the warp: one GCM unit */
        gp_lane_mac p;

        for (int b = 0; b < 16; b++)
            c[b] = 0;
        if (present)
            gp_lane_crypt(j, k, chunk, in, out, c);
        gp_ghash_mma_chunk(mx, lane, c, m);
        gp_mac_pow_get(&p, pw, GP_POW_LANE + lane);
        gp_mac_mul(alg, m, &p);   /* an absent lane's zero stays zero */
        return;
    }
#else
    (void)mx;
#endif
    if (!present)
        return;
    gp_lane_crypt(j, k, chunk, in, out, c);
    GP_PROBE(GP_PROBE_CRYPT);
    if (gp_alg_is_aead(alg))
        gp_lane_mac_chunk(alg, pw, lane, c, m);
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(c, sizeof(c));
#endif
}

/* A unit's MAC from zero as its partial: the value's words, then zeros. */
GP_KFN void gp_partial_store(uint8_t partial[GP_PARTIAL_BYTES], const gp_lane_mac *m)
{
#if defined(__CUDA_ARCH__)
    uint4 *v = (uint4 *)partial;   /* partials are 16-byte aligned */

    v[0] = make_uint4(m->w[0], m->w[1], m->w[2], m->w[3]);
    v[1] = make_uint4(m->w[4], 0, 0, 0);
#else
    for (int i = 0; i < 5; i++)
        gp_store_le32(partial + 4 * i, m->w[i]);
    for (unsigned b = 20; b < GP_PARTIAL_BYTES; b++)
        partial[b] = 0;
#endif
}

/*
 * A unit's partial MAC, written by another unit of this launch (see GP_LOAD_SHARED). On the GPU
 * two 16-byte L2 loads: byte-wise L2 loads issue one after another, each waiting out the L2
 * latency.
 */
GP_KFN void gp_partial_load(const uint8_t *p, gp_lane_mac *m)
{
#if defined(__CUDA_ARCH__)
    const uint4 a = __ldcg((const uint4 *)p), b = __ldcg((const uint4 *)p + 1);

    m->w[0] = a.x; m->w[1] = a.y; m->w[2] = a.z; m->w[3] = a.w;
    m->w[4] = b.x;
#else
    for (int i = 0; i < 5; i++)
        m->w[i] = gp_load_le32(p + 4 * i);
#endif
}

/* t ^= the GHASH partials at p, p + step, p + 2 step, p + 3 step (words 0-3; word 4 is zero):
 * four loads in flight at once, each XOR waiting for its own only. */
GP_KFN void gp_ghash_partials_xor4(gp_lane_mac *t, const uint8_t *p, size_t step)
{
#if defined(__CUDA_ARCH__)
    const uint4 a = __ldcg((const uint4 *)p), b = __ldcg((const uint4 *)(p + step)),
                c = __ldcg((const uint4 *)(p + 2 * step)), d = __ldcg((const uint4 *)(p + 3 * step));

    t->w[0] ^= a.x ^ b.x ^ c.x ^ d.x;
    t->w[1] ^= a.y ^ b.y ^ c.y ^ d.y;
    t->w[2] ^= a.z ^ b.z ^ c.z ^ d.z;
    t->w[3] ^= a.w ^ b.w ^ c.w ^ d.w;
#else
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++)
            t->w[i] ^= gp_load_le32(p + k * step + 4 * i);
#endif
}

/* The host's body unit: every lane in turn, their sum as the partial. */
GP_KFN void gp_unit_body(const gp_job *j, const gp_key_sched *k, const gp_mac_pows *pw, uint32_t u,
                         const uint8_t *in, uint8_t *out, uint8_t partial[GP_PARTIAL_BYTES])
{
    const uint32_t alg = k->alg;
    gp_lane_mac sum, v;

    gp_lane_mac_zero(&sum);
    for (uint32_t l = 0; l < GP_UNIT_LANES; l++) {
        gp_unit_lane(j, k, pw, NULL, u, l, in, out, &v);
        if (gp_alg_is_aead(alg))
            gp_mac_add(alg, &sum, &v);
    }
    gp_partial_shift(k, j, u, &sum);
    gp_partial_store(partial, &sum);
    gp_state_wipe(&sum, sizeof(sum));
    gp_state_wipe(&v, sizeof(v));
}

/*
 * Spread units. A lone call's few units run alone on their SMs, where a warp's chain (four AES
 * blocks through every round, four MAC products in a row) is the time and three of the SM's four
 * schedulers idle. The latency kernels (kernels/batch_kernel.cu)
 * then spread a body unit over GP_SPREAD_THREADS = 4L threads, one per 16-byte block: thread s
 * takes quarter q = s % 4 of lane l = s / 4's chunk, its block's keystream (one AES block; the
 * chunk's ChaCha20 block, of which it keeps its 16 bytes), XOR and MAC block B_q shifted inside
 * the chunk:
 *     v_s = B_q P^(3-q)        (P^0 = 1, P, P^2, P^3 from the table)
 * The four quarters' sum is the chunk's Horner sum B_0 P^3 + B_1 P^2 + B_2 P + B_3, which the
 * lane power turns into m_l as in "Lanes": the unit's partial is the same value, by two
 * multiplications in a row instead of four.
 */
#define GP_SPREAD_THREADS (4u * GP_UNIT_LANES)

/*
 * Quarter q of lane `lane` of body unit u (see "Spread units"): its block's keystream XORed in
 * (out), its MAC value v (zero without a MAC or for an absent lane of a short unit) and the lane's
 * power (`shift`, which multiplies the chunk's sum; zero for an absent lane). in/out point at the body
 * start; each thread reads its whole block before writing it. Alone on its SM a thread waits out
 * every load it depends on, so both powers are loaded before the keystream, which hides them.
 */
GP_KFN void gp_unit_quarter(const gp_job *j, const gp_key_sched *k, const gp_mac_pows *pw, uint32_t u,
                            uint32_t lane, uint32_t q, const uint8_t *in, uint8_t *out, gp_lane_mac *v,
                            gp_lane_mac *shift)
{
    const uint32_t alg = k->alg, nch = gp_unit_chunks(j, u);
    const uint64_t chunk = (uint64_t)u * GP_UNIT_LANES + (lane + nch - GP_UNIT_LANES);
    const uint64_t at = 64 * chunk + 16 * q;
    uint32_t data[4], c[4];
    gp_lane_mac p;

    gp_lane_mac_zero(v);
    gp_lane_mac_zero(shift);
    if (lane + nch < GP_UNIT_LANES)
        return;
    if (gp_alg_is_aead(alg)) {
        gp_mac_pow_get(&p, pw, q >= 2 ? GP_POW_LANE + GP_UNIT_LANES - 1 : GP_POW_NEAR + 1 - q);   /* P^(3-q) (q = 3: unused) */
        gp_mac_pow_get(shift, pw, GP_POW_LANE + lane);
    }
    gp_block_load(data, in + at);
    if (gp_alg_is_aes(alg)) {
        gp_ctr_words(alg, j->body_ctr, 4 * chunk + q, 1, c);
        GP_PROBE_AFTER(GP_PROBE_LOADED, data[0] ^ data[3] ^ c[0] ^ c[3]);
        gp_aes_encrypt1_words(&k->aes, c);
    } else {
        uint32_t ctr[4], ks[16];

        gp_ctr_words(alg, j->body_ctr, chunk, 1, ctr);
        GP_PROBE_AFTER(GP_PROBE_LOADED, data[0] ^ data[3] ^ ctr[0] ^ ctr[3]);
        gp_chacha20_block_words(k->chacha_key, ctr, ks);
        gp_quarter_words(ks, q, c);
#if !defined(__CUDA_ARCH__)
        gp_state_wipe(ks, sizeof(ks));
#endif
    }
    GP_PROBE_AFTER(GP_PROBE_KEYSTREAM, c[0] ^ c[3]);
    for (int b = 0; b < 4; b++) {
        const uint32_t x = data[b] ^ c[b];

        c[b] = j->op == GP_OP_DECRYPT ? data[b] : x;   /* the ciphertext, which the MAC covers */
        data[b] = x;
    }
    gp_block_store(out + at, data);
    GP_PROBE(GP_PROBE_CRYPT);
    if (gp_alg_is_aead(alg)) {
        gp_mac_block(alg, c, v);
        if (q < 3)
            gp_mac_mul(alg, v, &p);
    }
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(data, sizeof(data));
    gp_state_wipe(c, sizeof(c));
    gp_state_wipe(&p, sizeof(p));
#endif
}

/* The host's spread body unit, as the latency kernels run it (tests/unit/test_kernels.c checks it
 * against gp_unit_body): every quarter of every lane, each chunk's sum shifted, their sum. */
GP_KFN void gp_unit_body_spread(const gp_job *j, const gp_key_sched *k, const gp_mac_pows *pw, uint32_t u,
                                const uint8_t *in, uint8_t *out, uint8_t partial[GP_PARTIAL_BYTES])
{
    const uint32_t alg = k->alg;
    gp_lane_mac sum, m, v, shift;

    gp_lane_mac_zero(&sum);
    for (uint32_t l = 0; l < GP_UNIT_LANES; l++) {
        gp_lane_mac_zero(&m);
        for (uint32_t q = 0; q < 4; q++) {
            gp_unit_quarter(j, k, pw, u, l, q, in, out, &v, &shift);
            if (gp_alg_is_aead(alg))
                gp_mac_add(alg, &m, &v);
        }
        if (gp_alg_is_aead(alg)) {
            gp_mac_mul(alg, &m, &shift);   /* an absent lane's zero stays zero */
            gp_mac_add(alg, &sum, &m);
        }
    }
    gp_partial_shift(k, j, u, &sum);
    gp_partial_store(partial, &sum);
    gp_state_wipe(&sum, sizeof(sum));
    gp_state_wipe(&m, sizeof(m));
    gp_state_wipe(&v, sizeof(v));
    gp_state_wipe(&shift, sizeof(shift));
}

/* ---- the finish ---- */

/* Words of a message state in the batch arena, which another unit of this launch may have written
 * (see GP_LOAD_SHARED); p is 4- (get32/put32) or 8-byte (get64) aligned. */
GP_KFN uint32_t gp_st_get32(const uint8_t *p)
{
#if defined(__CUDA_ARCH__)
    return __ldcg((const unsigned int *)p);
#else
    return gp_load_le32(p);
#endif
}

GP_KFN uint64_t gp_st_get64(const uint64_t *p)
{
#if defined(__CUDA_ARCH__)
    return __ldcg((const unsigned long long *)p);
#else
    return *p;
#endif
}

GP_KFN void gp_st_put32(uint8_t *p, uint32_t v)
{
#if defined(__CUDA_ARCH__)
    *(uint32_t *)p = v;
#else
    gp_store_le32(p, v);
#endif
}

/* The MAC the lead left in the state, as a MAC value (the lead may run in another block). */
GP_KFN void gp_state_mac(uint32_t alg, const gp_msg_state *st, gp_lane_mac *m)
{
    if (alg == GP_ALG_AES_GCM) {
        const uint64_t x[2] = { gp_st_get64(&st->ghash_x[0]), gp_st_get64(&st->ghash_x[1]) };

        gp_lane_mac_set_x(m, x);
    } else {
        for (int i = 0; i < 5; i++)
            m->w[i] = gp_st_get32((const uint8_t *)&st->poly.h[i]);
    }
}

/*
 * Whether the finisher's lanes also apply the shift P^(4c) past the last unit. When that unit is
 * whole (c = L), P^(4c) = Q, and lane i's Q^i * Q = Q^(i+1) is in the table (unit[i+1], or stride
 * for the last lane): the finish then only adds U_(n-1), one multiplication fewer on its serial
 * chain. Bodies of whole units (16 KiB TLS records, bulk updates) always take this.
 */
GP_KFN int gp_fold_shifts(const gp_job *j)
{
    return gp_unit_chunks(j, j->nunits - 1) == GP_UNIT_LANES;
}

/*
 * Whether the finisher's lanes also make GCM's tag product ("dual fold"). The tag needs
 * S = (X + Lens) H (SP 800-38D §7.1 step 5: the lengths block, then one more product by H), and
 * the state needs X itself (the message may go on). Made after the fold by the finish's one
 * thread while the rest of its warp waited, that product was one more serial multiplication per
 * message, on every message's path. Since S = sum_i E_i Q^(i+1) H + U_(n-1) H + Lens H, the
 * group's two halves of L/2 lanes make X and S side by side, each lane one multiplication:
 *   lane e < n        E_(n-1-e) Q^(e+1)        (as gp_fold_lane, each lane one element)
 *   lane L/2 - 1      U_(n-1)
 *   lane L/2 + e      E_(n-1-e) Q^(e+1) H      (the key's gcm_tag_pows)
 *   lane L - 2        Lens H
 *   lane L - 1        U_(n-1) H
 * so X is the first half's sum and S the second's. It takes a body of whole units (the shift
 * P^(4c) = Q folded in, gp_fold_shifts), at most L/2 - 2 of them (28 KiB at 2 KiB units: a TLS
 * record's 16 KiB is 8), no tail (the tag's lengths are then final) and GCM's per-key powers
 * (Poly1305's r changes with every message, and its tables are made per request).
 */
GP_KFN int gp_fold_dual(uint32_t alg, const gp_job *j)
{
    return alg == GP_ALG_AES_GCM && GP_UNIT_LANES >= 8u && j->nunits <= GP_TAG_POWS
           && j->len == j->head_len + j->body_len && gp_fold_shifts(j);
}

/* The lengths block [len(A)]64 || [len(C)]64 in bits (SP 800-38D §7.1) as a MAC value, with the
 * text length this request ends at (the lead may have moved both: read from L2 on the GPU). */
GP_KFN void gp_gcm_lens(const gp_msg_state *st, const gp_job *j, gp_lane_mac *m)
{
    const uint64_t x[2] = { gp_st_get64(&st->aad_len) * 8, (gp_st_get64(&st->text_len) + j->body_len) * 8 };

    gp_lane_mac_set_x(m, x);
}

/*
 * A finisher lane's share of a fold of at most L units is one element times one power
 * (gp_fold_lane). The plan names the element and takes the power, which come from the job and
 * the key alone; the element is what the units and the lead wrote. gp_lone_kernel plans before
 * the barrier that makes the units' writes visible and loads only the element after it.
 */
enum {
    GP_FOLD_NONE,      /* the lane adds nothing (zero) */
    GP_FOLD_LEAD,      /* E_0: the MAC the lead left in the state */
    GP_FOLD_PARTIAL,   /* a unit's partial (its index in gp_fold_plan.el) */
    GP_FOLD_LENS,      /* GCM's lengths block (a dual fold's tag half) */
    GP_FOLD_HORNER     /* more than L units: no plan, gp_fold_lane's Horner loop */
};

typedef struct gp_fold_plan {
    uint32_t kind, el;   /* GP_FOLD_*; the partial's index */
    int mul;             /* whether the element is multiplied by pow (else added as it is) */
    gp_lane_mac pow;
} gp_fold_plan;

/* Plan to take element E_elem (E_0: the lead's MAC, E_k: unit k-1's partial) times f->pow. */
GP_KFN void gp_fold_plan_element(gp_fold_plan *f, uint32_t elem)
{
    f->kind = elem == 0 ? GP_FOLD_LEAD : GP_FOLD_PARTIAL;
    f->el = elem - (f->kind == GP_FOLD_PARTIAL);
    f->mul = 1;
}

/* Finisher lane i's plan (the lanes of gp_fold_dual's layout when it applies; otherwise lane i takes
 * E_(n-1-i) times Q^i, or Q^(i+1) when gp_fold_shifts). */
GP_KFN void gp_fold_lane_plan(const gp_key_sched *k, const gp_job *j, const gp_mac_pows *pw, uint32_t i,
                              gp_fold_plan *f)
{
    const uint32_t n = j->nunits, half = GP_UNIT_LANES / 2;

    f->kind = GP_FOLD_NONE;
    f->el = 0;
    f->mul = 0;
    gp_lane_mac_zero(&f->pow);
    if (gp_fold_dual(k->alg, j)) {
        const uint32_t e = i % half;
        const int tag = i >= half;

        if (e < n) {
            gp_fold_plan_element(f, n - 1 - e);
            if (tag) {
                for (int w = 0; w < 4; w++)
                    f->pow.w[w] = k->gcm_tag_pows[e][w];
            } else {
                gp_mac_pow_get(&f->pow, pw, GP_POW_UNIT + e + 1);   /* e + 1 <= L/2 - 2 */
            }
        } else if (e == half - 1 || (tag && e == half - 2)) {
            f->kind = e == half - 1 ? GP_FOLD_PARTIAL : GP_FOLD_LENS;
            f->el = n - 1;
            f->mul = tag;
            if (tag)
                gp_lane_mac_set_x(&f->pow, k->gcm_h);
        }
        return;
    }
    if (n > GP_UNIT_LANES) {
        f->kind = GP_FOLD_HORNER;
        return;
    }
    if (i >= n)
        return;
    gp_fold_plan_element(f, n - 1 - i);
    gp_mac_pow_get(&f->pow, pw, !gp_fold_shifts(j) ? GP_POW_UNIT + i
                                : i + 1 < GP_UNIT_LANES ? GP_POW_UNIT + i + 1 : GP_POW_STRIDE);
}

/* A planned lane's share: its element (read from L2 on the GPU: other blocks wrote it), times its
 * power. */
GP_KFN void gp_fold_lane_planned(uint32_t alg, const gp_fold_plan *f, const gp_msg_state *st, const gp_job *j,
                                 const uint8_t *partials, gp_lane_mac *t)
{
    switch (f->kind) {
    case GP_FOLD_LEAD:
        gp_state_mac(alg, st, t);
        break;
    case GP_FOLD_PARTIAL:
        gp_partial_load(partials + (size_t)f->el * GP_PARTIAL_BYTES, t);
        break;
    case GP_FOLD_LENS:
        gp_gcm_lens(st, j, t);
        break;
    default:
        gp_lane_mac_zero(t);
        return;
    }
    GP_PROBE_AFTER(GP_PROBE_FOLDIN, t->w[0] ^ f->pow.w[0]);
    if (f->mul)
        gp_mac_mul(alg, t, &f->pow);
}

/* The message's MAC after the body, from the finisher lanes' sum T: X = T * P^(4c) + U_(n-1)
 * (the lanes applied P^(4c) already when gp_fold_shifts). */
GP_KFN void gp_finish_mac(uint32_t alg, const gp_job *j, const gp_mac_pows *pw, const uint8_t *partials,
                          const gp_lane_mac *t, gp_lane_mac *x)
{
    gp_lane_mac f, last;

    *x = *t;
    if (!gp_fold_shifts(j)) {
        gp_mac_pow_get(&f, pw, GP_POW_FIN + gp_unit_chunks(j, j->nunits - 1) - 1);
        gp_mac_mul(alg, x, &f);
    }
    gp_partial_load(partials + (size_t)(j->nunits - 1) * GP_PARTIAL_BYTES, &last);
    gp_mac_add(alg, x, &last);
}

/* r = b^e for e >= 1, by squaring from the top bit (a and b of gp_mac_mul may be one value). */
GP_KFN void gp_mac_pow_n(uint32_t alg, gp_lane_mac *r, const gp_lane_mac *b, uint32_t e)
{
    int top = 31;

    while (!(e >> top & 1u))
        top--;
    *r = *b;
    for (int bit = top - 1; bit >= 0; bit--) {
        gp_mac_mul(alg, r, r);
        if (e >> bit & 1u)
            gp_mac_mul(alg, r, b);
    }
}

/* Element E_el of the fold's sequence: the lead's MAC or a unit's partial (read from L2). */
GP_KFN void gp_fold_element(uint32_t alg, const gp_msg_state *st, const uint8_t *partials, uint32_t el,
                            gp_lane_mac *e)
{
    if (el == 0)
        gp_state_mac(alg, st, e);
    else
        gp_partial_load(partials + (size_t)(el - 1) * GP_PARTIAL_BYTES, e);
}

/*
 * A lane's elements at distances dlo, dlo + L, .., dhi from the end of the request's sequence (in
 * one span, or the request's fold without spans), combined as the fold needs them: shifted
 * partials ("Shifted partials" above) are added as they are, E_0 shifted here, four loads in
 * flight at a time (each add waits for its own load only); otherwise Horner with S = Q^L from the
 * farthest.
 */
GP_KFN void gp_lane_elements(const gp_key_sched *k, const gp_job *j, const gp_mac_pows *pw, const gp_msg_state *st,
                             const uint8_t *partials, uint32_t dlo, uint32_t dhi, gp_lane_mac *t)
{
    const uint32_t alg = k->alg, n = j->nunits, L = GP_UNIT_LANES, count = (dhi - dlo) / L + 1;
    uint32_t c = 0;
    gp_lane_mac e, f;

    gp_lane_mac_zero(t);
    if (gp_element_shifted(alg, j, dhi)) {   /* dlo..dhi lie in one span */
        if (dhi == n - 1) {   /* E_0 */
            gp_state_mac(alg, st, t);
            gp_element_shift(k, j, 0, t);
            c = 1;
        }
        /* element E_(n-1-d) is unit n-2-d's partial */
        GP_NO_UNROLL
        for (; c + 4 <= count; c += 4) {
            const uint8_t *p = partials + (size_t)(n - 2 - (dhi - c * L)) * GP_PARTIAL_BYTES;

            gp_ghash_partials_xor4(t, p, (size_t)L * GP_PARTIAL_BYTES);
        }
        GP_NO_UNROLL
        for (; c < count; c++) {
            gp_partial_load(partials + (size_t)(n - 2 - (dhi - c * L)) * GP_PARTIAL_BYTES, &e);
            gp_mac_add(alg, t, &e);
        }
    } else {
        gp_mac_pow_get(&f, pw, GP_POW_STRIDE);
        GP_NO_UNROLL
        for (; c < count; c++) {
            gp_fold_element(alg, st, partials, n - 1 - (dhi - c * L), &e);
            if (c != 0)
                gp_mac_mul(alg, t, &f);
            gp_mac_add(alg, t, &e);
        }
    }
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(&e, sizeof(e));
    gp_state_wipe(&f, sizeof(f));
#endif
}

/* Lane i's share of span s's value V_s ("Spans" above): the span's elements at distances
 * sG + i + mL (gp_lane_elements), times Q^i. Zero when the span is shorter. */
GP_KFN void gp_span_fold_lane(const gp_key_sched *k, const gp_job *j, const gp_mac_pows *pw, const gp_msg_state *st,
                              const uint8_t *partials, uint32_t s, uint32_t i, gp_lane_mac *t)
{
    const uint32_t g = gp_span_units(j->nunits), lo = s * g + i, hi = s * g + gp_span_size(j, s);
    gp_lane_mac q;

    gp_lane_mac_zero(t);
    if (lo >= hi)
        return;
    gp_lane_elements(k, j, pw, st, partials, lo, lo + (hi - 1 - lo) / GP_UNIT_LANES * GP_UNIT_LANES, t);
    if (i != 0) {
        gp_mac_pow_get(&q, pw, GP_POW_UNIT + i);
        gp_mac_mul(k->alg, t, &q);
    }
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(&q, sizeof(q));
#endif
}

/* Finisher lane i's share of T from the span values (after the units' partials): spans s = i + mL
 * by Horner with R^L, times R^i, times Q when the lanes apply the last unit's shift (P^(4c) = Q,
 * gp_fold_shifts). R = Q^G = S^(G/L). GCM reads R^i and R^L from the key's stride powers where
 * they reach (G < GP_STRIDE_POWS^2: spans of up to 7 L units); otherwise they come from one
 * chain: R^(2^b) squared up to R^L, each multiplied into R^i where bit b of i is set (1 where not,
 * so that every lane of the warp runs the same steps); L is a power of two. */
GP_KFN void gp_spans_fold_lane(const gp_key_sched *k, const gp_job *j, const gp_mac_pows *pw, const uint8_t *partials,
                               uint32_t i, gp_lane_mac *t)
{
    const uint32_t alg = k->alg, g = gp_span_units(j->nunits);
    const uint8_t *spans = partials + (size_t)j->nunits * GP_PARTIAL_BYTES;
    gp_lane_mac e, rl, ri, one;

    gp_lane_mac_zero(t);
    if (i >= j->nspans)
        return;
    if (alg == GP_ALG_AES_GCM && g < GP_STRIDE_POWS * GP_STRIDE_POWS) {
        gp_stride_pow(k, g, &rl);                          /* R^L = S^G */
        gp_stride_pow(k, i * (g / GP_UNIT_LANES), &ri);    /* R^i */
    } else {
        gp_lane_mac_one(&one, alg);
        gp_mac_pow_get(&e, pw, GP_POW_STRIDE);
        gp_mac_pow_n(alg, &rl, &e, g / GP_UNIT_LANES);   /* R */
        ri = one;
        GP_NO_UNROLL
        for (uint32_t b = 1; b < GP_UNIT_LANES; b <<= 1) {
            gp_mac_mul(alg, &ri, i & b ? &rl : &one);
            gp_mac_mul(alg, &rl, &rl);
        }
    }
    /* rl = R^L, ri = R^i */
    GP_NO_UNROLL
    for (uint32_t sp = i + (j->nspans - 1 - i) / GP_UNIT_LANES * GP_UNIT_LANES;; sp -= GP_UNIT_LANES) {
        gp_partial_load(spans + (size_t)sp * GP_PARTIAL_BYTES, &e);
        gp_mac_mul(alg, t, &rl);   /* zero at first */
        gp_mac_add(alg, t, &e);
        if (sp == i)
            break;
    }
    gp_mac_mul(alg, t, &ri);
    if (gp_fold_shifts(j)) {
        gp_mac_pow_get(&e, pw, GP_POW_UNIT + 1);
        gp_mac_mul(alg, t, &e);
    }
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(&e, sizeof(e));
    gp_state_wipe(&rl, sizeof(rl));
    gp_state_wipe(&ri, sizeof(ri));
#endif
}

/*
 * Finisher lane i's share of T (see the top of this file): over the sequence E_0 = X_lead,
 * E_k = U_(k-1) (k = 1..n-1), the elements with (n-1-k) = i mod L, by Horner with Q^L (or added,
 * where they are shifted: gp_lane_elements), times Q^i (times Q^(i+1) when gp_fold_shifts). A
 * message of up to L units (64 KiB) costs each lane one multiplication (gp_fold_lane_plan). st:
 * the state the lead left. A dual fold (gp_fold_dual) lays its lanes out as described there.
 */
GP_KFN void gp_fold_lane(const gp_key_sched *k, const gp_job *j, const gp_mac_pows *pw, const gp_msg_state *st,
                         const uint8_t *partials, uint32_t i, gp_lane_mac *t)
{
    const uint32_t alg = k->alg, n = j->nunits;
    gp_fold_plan f;
    gp_lane_mac s;

    if (j->nspans != 0) {   /* the spans' values are made (gp_unit_span; on the GPU batch_ref_count) */
        gp_spans_fold_lane(k, j, pw, partials, i, t);
        return;
    }
    gp_fold_lane_plan(k, j, pw, i, &f);
    if (f.kind != GP_FOLD_HORNER) {
        gp_fold_lane_planned(alg, &f, st, j, partials, t);
#if !defined(__CUDA_ARCH__)
        gp_state_wipe(&f, sizeof(f));   /* a power of H */
#endif
        return;
    }
    gp_lane_mac_zero(t);
    if (i >= n)
        return;
    gp_lane_elements(k, j, pw, st, partials, i, n - 1 - (n - 1 - i) % GP_UNIT_LANES, t);   /* n > L */
    gp_mac_pow_get(&s, pw, !gp_fold_shifts(j) ? GP_POW_UNIT + i
                           : i + 1 < GP_UNIT_LANES ? GP_POW_UNIT + i + 1 : GP_POW_STRIDE);
    GP_PROBE_AFTER(GP_PROBE_FOLDIN, t->w[0] ^ s.w[0]);
    gp_mac_mul(alg, t, &s);
}

/*
 * A table of powers made on demand, for a key that lives for one message (ChaCha20-Poly1305's r:
 * the whole table is 99 multiplications on the submitting thread's CPU per message, where a 16 KiB
 * body reads 43 of its entries). gp_pows_have says which entries hold their power; all
 * zero: none. gp_mac_pows_cover adds what job j reads (gp_unit_lane, gp_unit_quarter,
 * gp_fold_lane, gp_finish_mac):
 *   - lane powers down to the lowest lane a unit uses (a lone short unit of c chunks: L-c..L-1),
 *     and P^2, P^3 (a spread unit's quarters);
 *   - Q^i for the fold's lanes, one more when they apply the last unit's shift (gp_fold_shifts);
 *   - Q^L when there are L units or more, P^(4c) when the last unit of c chunks is short.
 * Entries never made stay as they were (the caller clears the table with a new key).
 */

/* What job j reads, as a gp_pows_have (zero for a request without body units). */
GP_KFN gp_pows_have gp_pows_need(const gp_job *j)
{
    const uint32_t L = GP_UNIT_LANES, n = j->nunits;
    gp_pows_have need = { 0, 0, 0, 0, 0 };
    uint32_t c, shifted;

    if (n == 0)
        return need;
    c = gp_unit_chunks(j, n - 1);
    shifted = (uint32_t)gp_fold_shifts(j);
    need.lanes = n > 1 ? L : c;
    need.units = n + shifted < L ? n + shifted : L;
    need.stride = n > L || (n == L && shifted);
    need.fin = shifted ? 0 : 1u << (c - 1);
    need.near = 1;
    return need;
}

GP_KFN int gp_pows_covers(const gp_pows_have *have, const gp_pows_have *need)
{
    return have->lanes >= need->lanes && have->units >= need->units && have->stride >= need->stride
           && (need->fin & ~have->fin) == 0 && have->near >= need->near;
}

GP_KFN void gp_mac_pows_cover(gp_mac_pows *t, gp_pows_have *have, uint32_t alg, const gp_lane_mac *p, const gp_job *j)
{
    const uint32_t L = GP_UNIT_LANES;
    const gp_pows_have need = gp_pows_need(j);
    gp_lane_mac p2 = *p, p4, x;

    if (gp_pows_covers(have, &need))
        return;
    gp_mac_mul(alg, &p2, &p2);
    p4 = p2;
    gp_mac_mul(alg, &p4, &p4);                                   /* P^4 */
    if (need.near > have->near) {                                /* P^2, P^3 */
        gp_mac_pow_set(t, GP_POW_NEAR, &p2);
        x = p2;
        gp_mac_mul(alg, &x, p);
        gp_mac_pow_set(t, GP_POW_NEAR + 1, &x);
        have->near = 1;
    }
    if (need.lanes > have->lanes) {                              /* lane l: P^(4(L-1-l)+1) */
        if (have->lanes == 0) {
            gp_mac_pow_set(t, GP_POW_LANE + L - 1, p);
            have->lanes = 1;
        }
        gp_mac_pow_get(&x, t, GP_POW_LANE + L - have->lanes);
        for (uint32_t l = L - have->lanes; l-- > L - need.lanes;) {
            gp_mac_mul(alg, &x, &p4);
            gp_mac_pow_set(t, GP_POW_LANE + l, &x);
        }
        have->lanes = need.lanes;
    }
    if (need.units > have->units || need.stride > have->stride) {
        gp_lane_mac q = p4;

        for (uint32_t k = 1; k < L; k <<= 1)                     /* Q = (P^4)^L (L: a power of two) */
            gp_mac_mul(alg, &q, &q);
        for (uint32_t i = have->units; i < need.units; i++) {     /* Q^i */
            if (i == 0) {
                gp_lane_mac_one(&x, alg);
            } else {
                gp_mac_pow_get(&x, t, GP_POW_UNIT + i - 1);
                gp_mac_mul(alg, &x, &q);
            }
            gp_mac_pow_set(t, GP_POW_UNIT + i, &x);
        }
        have->units = have->units > need.units ? have->units : need.units;
        if (need.stride > have->stride) {                        /* Q^L: need.units is L here */
            gp_mac_pow_get(&x, t, GP_POW_UNIT + L - 1);
            gp_mac_mul(alg, &x, &q);
            gp_mac_pow_set(t, GP_POW_STRIDE, &x);
            have->stride = 1;
        }
        gp_state_wipe(&q, sizeof(q));
    }
    if (need.fin & ~have->fin) {                                 /* the short last unit's c chunks */
        const uint32_t c = gp_unit_chunks(j, j->nunits - 1);

        gp_mac_pow_get(&x, t, GP_POW_LANE + L - c);              /* P^(4(c-1)+1): need.lanes >= c */
        gp_mac_mul(alg, &x, &p2);
        gp_mac_mul(alg, &x, p);                                  /* P^(4c) */
        gp_mac_pow_set(t, GP_POW_FIN + c - 1, &x);
        have->fin |= need.fin;
    }
    gp_state_wipe(&p2, sizeof(p2));
    gp_state_wipe(&p4, sizeof(p4));
    gp_state_wipe(&x, sizeof(x));
}

/*
 * The serial end of a request with body units: the MAC X = U_(n-1) + P^(4c) T from the lanes'
 * T (AEAD), counters and text position past the body, the tail, the speculative tag. `st` is the
 * state the lead left (the GPU finisher passes a copy it loaded from L2).
 */
GP_KFN void gp_unit_finish_serial(gp_msg_state *st, const gp_key_sched *k, const gp_job *j,
                                  const gp_mac_pows *pw, const uint8_t *partials, const gp_lane_mac *t,
                                  const uint8_t *tail_in, uint8_t *tail_out)
{
    const uint32_t alg = st->alg;

    if (gp_alg_is_aead(alg)) {
        gp_lane_mac x;

        gp_finish_mac(alg, j, pw, partials, t, &x);
        if (alg == GP_ALG_AES_GCM) {
            gp_lane_mac_get_x(st->ghash_x, &x);
        } else {
            for (int i = 0; i < 5; i++)
                st->poly.h[i] = x.w[i];
        }
        gp_state_wipe(&x, sizeof(x));
    }
    gp_bytes_copy(st->ctr, j->body_ctr, 16);
    gp_ctr_add(alg, st->ctr, j->body_len / (gp_alg_is_aes(alg) ? 16 : 64));
    st->text_len += j->body_len;
    gp_msg_run(st, k, j->op, tail_in, tail_out, (size_t)(j->len - j->head_len - j->body_len));
    gp_spec_tag(st, k, j->op);
}

/*
 * The serial end of a request that stops on a 64-byte text boundary (no tail: TLS records and bulk
 * updates of whole blocks): no keystream or MAC block is pending there, so only the fields that
 * change are written, word by word, straight into the state: MAC, counter, text position and the
 * speculative tag (SP 800-38D §7.1 steps 5-6; RFC 8439 §2.8). On the GPU the byte-wise general
 * path costs a chain of local-memory accesses on one thread, tens of microseconds per request.
 */
GP_KFN void gp_unit_finish_fast(gp_msg_state *st, const gp_key_sched *k, const gp_job *j,
                                const gp_mac_pows *pw, const uint8_t *partials, const gp_lane_mac *t,
                                const gp_lane_mac *tag_s)
{
    const uint32_t alg = k->alg;
    const uint64_t text_len = gp_st_get64(&st->text_len) + j->body_len;
    uint32_t c[4];

    gp_ctr_words(alg, j->body_ctr, j->body_len / (gp_alg_is_aes(alg) ? 16 : 64), 1, c);
    for (int i = 0; i < 4; i++)
        gp_st_put32(st->ctr + 4 * i, c[i]);
    st->text_len = text_len;
    st->spec_valid = 0;
    if (gp_alg_is_aead(alg)) {
        const uint64_t aad_bytes = gp_st_get64(&st->aad_len);
        gp_lane_mac x;
        uint32_t tag[4];

        if (tag_s != NULL)
            x = *t;   /* a dual fold: X whole from its first half, S from its second */
        else
            gp_finish_mac(alg, j, pw, partials, t, &x);
        if (alg == GP_ALG_AES_GCM) {
            uint64_t sx[2];

            /* S = (X ^ [len(A)]64 || [len(C)]64) * H; T = S ^ E_K(J0), as big-endian bytes. */
            gp_lane_mac_get_x(st->ghash_x, &x);
            if (tag_s != NULL) {
                gp_lane_mac_get_x(sx, tag_s);
            } else {
                sx[0] = st->ghash_x[0] ^ aad_bytes * 8;
                sx[1] = st->ghash_x[1] ^ text_len * 8;
                gp_ghash_mul(sx, k->gcm_h);
            }
            tag[0] = gp_bswap32((uint32_t)(sx[0] >> 32)) ^ gp_st_get32(st->gcm_ekj0);
            tag[1] = gp_bswap32((uint32_t)sx[0]) ^ gp_st_get32(st->gcm_ekj0 + 4);
            tag[2] = gp_bswap32((uint32_t)(sx[1] >> 32)) ^ gp_st_get32(st->gcm_ekj0 + 8);
            tag[3] = gp_bswap32((uint32_t)sx[1]) ^ gp_st_get32(st->gcm_ekj0 + 12);
        } else {
            /* Poly1305 over le64(len(A)) || le64(len(C)) as a full block, then the tag. */
            uint32_t h[5], r[5], pad[4];
            const uint32_t lens[4] = { (uint32_t)aad_bytes, (uint32_t)(aad_bytes >> 32),
                                       (uint32_t)text_len, (uint32_t)(text_len >> 32) };

            for (int i = 0; i < 5; i++) {
                st->poly.h[i] = h[i] = x.w[i];
                r[i] = gp_st_get32((const uint8_t *)&st->poly.r[i]);
            }
            for (int i = 0; i < 4; i++)
                pad[i] = gp_st_get32((const uint8_t *)&st->poly.pad[i]);
            gp_poly1305_words(h, r, lens, 1);
            gp_poly1305_tag_words(h, pad, tag);
        }
        for (int i = 0; i < 4; i++)
            gp_st_put32(st->spec_tag + 4 * i, tag[i]);
        st->spec_valid = 1;
    }
}

/* Span s's value V_s from the lanes' shares, stored after the units' partials (gp_partials_bytes). */
GP_KFN void gp_unit_span(const gp_key_sched *k, const gp_job *j, const gp_mac_pows *pw, const gp_msg_state *st,
                         uint8_t *partials, uint32_t s)
{
    gp_lane_mac v, ti;

    gp_lane_mac_zero(&v);
    for (uint32_t i = 0; i < GP_UNIT_LANES; i++) {
        gp_span_fold_lane(k, j, pw, st, partials, s, i, &ti);
        gp_mac_add(st->alg, &v, &ti);
    }
    gp_partial_store(partials + ((size_t)j->nunits + s) * GP_PARTIAL_BYTES, &v);
    gp_state_wipe(&v, sizeof(v));
    gp_state_wipe(&ti, sizeof(ti));
}

/* The host's finish: the spans' values first where the request has spans, the L finisher lanes in
 * turn, their sum (a dual fold's halves apart), then the serial end. partials: gp_partials_bytes. */
GP_KFN void gp_unit_finish(gp_msg_state *st, const gp_key_sched *k, const gp_job *j, const gp_mac_pows *pw,
                           uint8_t *partials, const uint8_t *tail_in, uint8_t *tail_out)
{
    const int dual = gp_fold_dual(st->alg, j);
    gp_lane_mac t, s, ti;

    gp_lane_mac_zero(&t);
    gp_lane_mac_zero(&s);
    for (uint32_t sp = 0; sp < j->nspans; sp++)
        gp_unit_span(k, j, pw, st, partials, sp);
    if (gp_alg_is_aead(st->alg)) {
        for (uint32_t i = 0; i < GP_UNIT_LANES; i++) {
            gp_fold_lane(k, j, pw, st, partials, i, &ti);
            gp_mac_add(st->alg, dual && i >= GP_UNIT_LANES / 2 ? &s : &t, &ti);
        }
    }
    if (j->len == j->head_len + j->body_len)
        gp_unit_finish_fast(st, k, j, pw, partials, &t, dual ? &s : NULL);
    else
        gp_unit_finish_serial(st, k, j, pw, partials, &t, tail_in, tail_out);
    gp_state_wipe(&t, sizeof(t));
    gp_state_wipe(&s, sizeof(s));
    gp_state_wipe(&ti, sizeof(ti));
}

#endif
