/* SPDX-License-Identifier: Apache-2.0 */
/* What a request needs of a wave: its op, where its data lives, how it travels in pieces (static inline). */
#ifndef GP_CUDA_SHAPE_H
#define GP_CUDA_SHAPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "batching/core/core.h"
#include "batching/stage.h"
#include "kernels/units.h"

#define ALIGN16(x) (((x) + 15) & ~(size_t)15)
/*
 * Large requests (docs/architecture.md, "Large requests"). A request's data from SPREAD_MIN bytes
 * up is copied into and out of the pinned arena by the copy crew (copy_crew.h) in pieces, and a
 * wave that moves its inputs by DMA hands each piece to the GPU as soon as it is copied, so the
 * host's copies run on several cores at once and overlap the transfer. A request longer than a
 * slice (kstate.h, GP_SLICE_BYTES) runs as consecutive waves of a slice each on one slot (run.c,
 * run_leading_slices), which bounds a slot's arenas. A request alone in its wave has its kernel
 * launched in chunks (chunk_plan.h; launch.c, issue_chunks), so that it runs under the copies.
 */
#define SPREAD_MIN (256u << 10)
#define SPREAD_PIECE_MIN (128u << 10)
#define SPREAD_PIECE_MAX (1u << 20)
_Static_assert(sizeof(gp_mac_pows) <= GP_STAGE_POWS_BYTES, "a staging chunk holds a request's powers of r");

/* Clear secrets in memory we keep using (a store the compiler may not drop). */
static inline void gp_wipe(void *p, size_t n)
{
    explicit_bzero(p, n);
}

/* The kernels' op for a request (kernels/batch_abi.h GP_OP_*). */
static inline uint32_t op_of(const gp_request *r)
{
    switch (r->kind) {
    case GP_REQ_AAD:
        return GP_OP_AAD;
    case GP_REQ_CRYPT:
        return r->msg->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT;
    default:
        return GP_OP_TAG;   /* TAG and VERIFY both compute the tag; VERIFY compares on the host */
    }
}

/* Bytes placed before a request's data so that its body starts on a 16-byte boundary (the units
 * then move it with 16-byte vector accesses). */
static inline size_t body_pad(const gp_job *j)
{
    return (16 - (size_t)(j->head_len % 16)) % 16;
}

/* Arena bytes a request's data takes (input, output or staged), its pad included. */
static inline size_t data_bytes(const gp_job *j)
{
    return ALIGN16(body_pad(j) + j->len);
}

/* Is r's data in a chunk the GPU reads and writes itself (stage.h)? */
static inline int staged_on_gpu(const gp_request *r)
{
    return r->kind == GP_REQ_CRYPT && r->stage != NULL && r->stage->dev != 0 && r->len > 0;
}

/* Whether request r's units take powers of r made for its message (ChaCha20-Poly1305), which the
 * batch carries beside the key (gp_work.pows_off)... */
static inline int carries_pows(const gp_request *r, const gp_job *j)
{
    return j->nunits > 0 && r->msg->st.alg == GP_ALG_CHACHA20_POLY1305;
}

/* ...or fetches from its staging chunk, where its job's thread wrote them (run.c, cuda_prepare). */
static inline int pows_staged(const gp_request *r, const gp_job *j)
{
    return carries_pows(r, j) && r->stage_pows && staged_on_gpu(r);
}

/*
 * Device mode (engine.h): r's data is CUDA memory on the slot's GPU. The batch kernel reads and
 * writes it where it is (gp_work offsets are addresses minus the arena's, kernels/batch_abi.h) when
 * its body starts on a 16-byte boundary in both buffers, as in the arena (body_pad: the units'
 * vector accesses, kernels/units.h); a caller whose buffers keep the message's offsets, from an
 * allocation's start, always has that. Otherwise the copy kernels move it through the device-only
 * staged region, as a staged request's data. Neither takes room in the pinned arena or a byte
 * across PCIe, and no host code touches it.
 */
static inline int devmem_data(const gp_request *r)
{
    return r->devmem && r->kind == GP_REQ_CRYPT && r->len > 0;
}

static inline int devmem_in_place(const gp_request *r, const gp_job *j)
{
    return devmem_data(r) && (((uintptr_t)r->in + j->head_len) & 15) == 0
           && (((uintptr_t)r->out + j->head_len) & 15) == 0;
}

static inline int devmem_copied(const gp_request *r, const gp_job *j)
{
    return devmem_data(r) && !devmem_in_place(r, j);
}

/* Pieces of at most GP_COPY_PIECE that `len` bytes take in a copy list. */
static inline size_t copy_pieces(uint64_t len)
{
    return (size_t)((len + GP_COPY_PIECE - 1) / GP_COPY_PIECE);
}

/* Append src -> dst (src 0: zeros) to a copy list as copy_pieces(len) entries. */
static inline void copy_add(gp_copy *list, size_t *n, uint64_t src, uint64_t dst, uint64_t len, uint32_t flags)
{
    for (uint64_t o = 0; o < len; o += GP_COPY_PIECE) {
        gp_copy *p = &list[(*n)++];

        p->src = src != 0 ? src + o : 0;
        p->dst = dst + o;
        p->len = len - o < GP_COPY_PIECE ? len - o : GP_COPY_PIECE;
        p->flags = flags;
        p->reserved = 0;
    }
}

/* Does request r's data go through the copy crew? (Never device-mode data: the host must not
 * touch it, and it takes no arena room.) */
static inline int spreads(const gp_request *r)
{
    return r->kind == GP_REQ_CRYPT && !staged_on_gpu(r) && !r->devmem && r->len >= SPREAD_MIN;
}

/* The crew's piece for `len` bytes: about a sixteenth, 64 KiB-aligned, within the bounds. */
static inline size_t spread_piece(size_t len)
{
    size_t p = ((len / 16) + 65535) & ~(size_t)65535;

    return p < SPREAD_PIECE_MIN ? SPREAD_PIECE_MIN : p > SPREAD_PIECE_MAX ? SPREAD_PIECE_MAX : p;
}

/*
 * Does request r, of a wave of m requests, have its output come back piece by piece, the copy
 * crew taking each piece to the caller as it lands (a DMA wave only)? The caller's output changes
 * before the wave is known to have succeeded; the request can still be re-run on the CPU
 * (engine.c, after a GPU failure) from its message's state, which moves only once every piece is
 * in, because its input is intact:
 * untouched where the output does not overlap it, or, in place, put back from the pinned arena's
 * copy (gp_cuda_pieces_end) before the request is handed back as failed. In place only where the
 * request is the wave's only one: there its pieces overlap the copy out with the transfers, while
 * in a wave of many (async jobs) the pieces' copies and waits cost more than they overlap
 * (RESULTS, "A lone caller from pageable memory"), and such an output is copied once the whole
 * wave is back, as one that overlaps its input partly always is. Never a request whose input
 * crossed from the caller's registered memory (direct_in): in place, no copy of its input is left
 * to put back; out of place, its output crosses to the caller by DMA where that is registered too
 * (direct_out), else is copied once the wave is back, as one in place (back_after_wave).
 */
static inline int back_in_pieces(const gp_request *r, size_t m)
{
    return spreads(r) && !r->direct_in
           && ((r->out == r->in && m == 1) || r->out + r->len <= r->in || r->in + r->len <= r->out);
}

/*
 * Does request r's output come back into the pinned arena and go to its caller only once the whole
 * wave is known good (its wait succeeded: the `copied` event, which follows the kernel and every
 * copy back, completed without error)? Every request whose input crossed from the caller's
 * registered memory (direct_in) and whose output does not cross back by DMA (direct_out). The rule:
 * the caller's buffer is not written before the wave can no longer fail. The reason: in place, that
 * buffer is the request's only copy of its input (none was made in the pinned arena), and a GPU
 * failure hands the request to the CPU, which re-runs it from that input; an output piece taken to
 * the caller while later pieces were still crossing (back_in_pieces) would leave the input half
 * overwritten if one of those failed, with nothing to put back. After the wait nothing on the GPU
 * side is left to fail (the kernel ran and every DMA landed) and a host copy cannot fail, so the
 * copy crew then takes the output out in pieces on several threads at once (deliver.c). A lone
 * one's input and output still cross chunk by chunk, overlapped with its launches (launch.c,
 * issue_chunks): only into and out of device and pinned memory, which the caller never sees.
 */
static inline int back_after_wave(const gp_request *r)
{
    return r->direct_in && !r->direct_out;
}

/* Bytes of the piece at `off` of a request's `len` bytes cut in pieces of `piece`: the last is short. */
static inline size_t piece_len(size_t len, size_t off, size_t piece)
{
    return len - off < piece ? len - off : piece;
}

/* The end of pieces [0, n) of a request's `len` bytes cut in pieces of `piece`. */
static inline size_t pieces_end_byte(size_t len, size_t n, size_t piece)
{
    return n * piece < len ? n * piece : len;
}

/* A host or device pointer as the kernels' descriptors hold it. */
static inline uint64_t gpu_addr(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

#endif
