/* SPDX-License-Identifier: Apache-2.0 */
/* A lone large request's kernel in chunks: the units each launch runs, the pieces it reads and completes. */
#ifndef GP_CHUNK_PLAN_H
#define GP_CHUNK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/batch_abi.h"

/*
 * A request alone in its wave whose data crosses in pieces (batching/cuda/shape.h, "Large requests")
 * has its batch kernel launched once per chunk, each launch behind the input pieces it reads and
 * ahead of the output pieces it completes, so that the kernel runs while the rest of the input is
 * still being copied in and the first outputs travel back while later chunks compute. The message's
 * counters need no carrying (each unit's counter follows from its index, kernels/units.h) and its
 * MAC state carries on the GPU: every unit leaves a partial MAC and is counted in device memory, and
 * the last unit to be counted, which only the last launch can hold, folds them all and finishes the
 * request, as in one launch. A chunk is a whole number of pieces and at least GP_CHUNK_MIN_BYTES:
 * a launch pays a fixed cost (its blocks fill the AES table, the last unit's chain) that a smaller
 * chunk would not cover with its copies.
 */
#define GP_CHUNK_MIN_BYTES ((uint64_t)512 << 10)
#define GP_CHUNKS_MAX 8u

typedef struct gp_chunk {
    uint32_t unit_lo, unit_hi;   /* the body units [lo, hi) this launch runs; the lead runs in chunk 0 */
    size_t in_pieces;            /* input pieces [0, in_pieces) are on the GPU before the launch */
    size_t out_pieces;           /* output pieces [0, out_pieces) are final once it has run */
} gp_chunk;

/*
 * The chunks of a request of `len` bytes whose first `head_len` bytes are the lead's, then
 * `nunits` units of GP_UNIT_BYTES over `body_len` bytes (kernels/units.h gp_job_plan), the rest
 * the finisher's tail; its bytes cross in pieces of `piece` bytes (the last may be short). Writes
 * at most GP_CHUNKS_MAX chunks; returns how many (1: one launch runs it all). Invariants, each
 * relied on by the launches (tests/unit/test_chunk_plan.c checks them): the units of the chunks are
 * [0, nunits) in order with none twice; a launch's units read only bytes of its input pieces; an
 * output piece counted final after chunk j holds only bytes of the lead and of units up to j's;
 * the last chunk holds the last unit, so the finish, which reads and writes the tail, runs in the
 * last launch, after every piece is in; counts never go down from chunk to chunk.
 */
static inline size_t gp_chunk_plan(uint64_t len, uint64_t head_len, uint64_t body_len, uint32_t nunits,
                                   uint64_t piece, gp_chunk *chunk)
{
    const uint64_t npieces = piece == 0 ? 0 : (len + piece - 1) / piece;
    uint64_t n = len / GP_CHUNK_MIN_BYTES, per;
    uint32_t lo = 0;

    if (n > GP_CHUNKS_MAX)
        n = GP_CHUNKS_MAX;
    if (n > npieces)
        n = npieces;
    if (n < 2 || nunits < n || head_len + body_len > len) {
        chunk[0] = (gp_chunk){ 0, nunits, (size_t)npieces, (size_t)npieces };
        return 1;
    }
    per = (npieces + n - 1) / n;   /* pieces per chunk */
    n = (npieces + per - 1) / per;
    for (uint64_t j = 0; j < n; j++) {
        gp_chunk *c = &chunk[j];

        c->unit_lo = lo;
        if (j + 1 == n) {
            c->unit_hi = nunits;
            c->in_pieces = c->out_pieces = (size_t)npieces;
        } else {
            const uint64_t end = (j + 1) * per * piece;   /* the chunk's last byte + 1 */
            /* Units that start before the chunk's end, but never the last one. */
            uint64_t hi = end <= head_len ? 0 : (end - head_len + GP_UNIT_BYTES - 1) / GP_UNIT_BYTES;

            if (hi > nunits - 1)
                hi = nunits - 1;
            if (hi < lo)
                hi = lo;
            c->unit_hi = (uint32_t)hi;
            /* Unit hi - 1 ends at head_len + hi * GP_UNIT_BYTES (short of the body's end: not the last). */
            c->in_pieces = (size_t)((head_len + hi * GP_UNIT_BYTES + piece - 1) / piece);
            c->out_pieces = (size_t)((head_len + hi * GP_UNIT_BYTES) / piece);
        }
        lo = c->unit_hi;
    }
    return (size_t)n;
}

#endif
