/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel state shared by the host and cuda executors: a message's start, its MAC powers, stream-ordered shadows and passes. */
/* The start is J0 and E_K(J0); the powers are the ones its requests read. Neither executor calls
 * into the other; both call this. */
#include <string.h>

#include <openssl/crypto.h>

#include "batching/core/core.h"
#include "batching/kstate.h"
#include "kernels/units.h"

/*
 * The message callbacks of both kernel-code executors (host and cuda): they share the state format,
 * so a message starts the same way for both (J0, E_K(J0), the Poly1305 key through the unit code)
 * and moves between them mid-stream. The state is plain data inside the message: the engine
 * copies it with the message and cleanses it when the message is freed, so there is no msg_copy
 * or msg_clear.
 */
int gp_kstate_msg_start(gp_engine *e, gp_msg *m)
{
    const gp_key_sched *ks = gp_key_sched_get(m->key);

    gp_msg_begin_j0(&m->st, ks, m->iv, m->ivlen);
    /* GCM's E_K(J0), on the caller's thread: AES-NI through the default provider (hundreds of
     * instructions), else the kernel code's bitsliced AES (thousands). Made by the GPU's lead
     * instead, it cost AES-256-GCM throughput (bench/kernel_bench). */
    if (ks->alg == GP_ALG_AES_GCM && !gp_key_aes_block(e, m->key, m->st.gcm_ekj0, m->st.gcm_ekj0))
        gp_aes_encrypt1(&ks->aes, m->st.gcm_ekj0, m->st.gcm_ekj0);
    /* A new one-time key: the powers of the last one go. */
    if (m->pows_have.lanes != 0)
        OPENSSL_cleanse(&m->pows, sizeof(m->pows));
    memset(&m->pows_have, 0, sizeof(m->pows_have));
    return 1;
}

/* The MAC powers job j of message m reads: GCM's made with the key; ChaCha20-Poly1305's from the
 * message's r, each made the first time one of its requests needs it (kernels/units.h). */
const gp_mac_pows *gp_kstate_pows(gp_msg *m, const gp_key_sched *ks, const gp_job *j)
{
    gp_pows_have need;
    gp_lane_mac p;

    if (ks->alg != GP_ALG_CHACHA20_POLY1305)
        return &ks->mac_pows;
    need = gp_pows_need(j);
    if (!gp_pows_covers(&m->pows_have, &need)) {
        gp_mac_key(&p, ks, &m->st);
        gp_mac_pows_cover(&m->pows, &m->pows_have, ks->alg, &p, j);
        OPENSSL_cleanse(&p, sizeof(p));
    }
    return &m->pows;
}

const gp_mac_pows *gp_kstate_prepare_pows(gp_request *r)
{
    const gp_key_sched *ks;
    const gp_mac_pows *pw;
    gp_job j;

    if (r->kind != GP_REQ_CRYPT || r->len < 64 || r->msg->key->alg != GP_ALG_CHACHA20_POLY1305)
        return NULL;
    ks = gp_key_sched_get(r->msg->key);
    gp_job_plan(&j, &r->msg->st, r->msg->enc ? GP_OP_ENCRYPT : GP_OP_DECRYPT, r->len, (uint32_t)r->aad_len);
    pw = gp_kstate_pows(r->msg, ks, &j);
    OPENSSL_cleanse(&j, sizeof(j));
    return pw;
}

void gp_kstate_prepare(gp_engine *e, gp_request *r)
{
    (void)e;
    (void)gp_kstate_prepare_pows(r);
}

int gp_kstate_begun(const gp_msg_state *st)
{
    return st->aad_len != 0 || st->text_len != 0 || st->mac_pend_len != 0 || st->in_text != 0;
}

/* One counter step back, as the kernels count forward (kernels/msg_unit.h, gp_ctr_inc128 and
 * gp_ctr_chacha). */
static void counter_back_one(uint32_t alg, uint8_t c[16])
{
    if (alg == GP_ALG_AES_CTR) {
        for (int i = 15; i >= 0 && c[i]-- == 0; i--)
            ;
    } else {
        for (int i = 0; i < 8 && c[i]-- == 0; i++)
            ;
    }
}

/*
 * st->ctr is the counter of the next block to generate: a block partly used was generated whole and
 * its keystream kept in st->ks, st->ks_used bytes of it consumed (kernels/msg_unit.h gp_msg_xor; a
 * request's units leave the text on a 64-byte boundary, where none is partly used). So the block in
 * progress is the one before st->ctr when ks_used is not 0, else st->ctr itself with none used.
 */
void gp_kstate_stream_point(const gp_msg_state *st, uint8_t block[16], size_t *used)
{
    memcpy(block, st->ctr, 16);
    *used = st->ks_used;
    if (st->ks_used != 0)
        counter_back_one(st->alg, block);
}

size_t gp_kstate_slice_bytes(const gp_engine *e)
{
#if GP_TEST_HOOKS
    const size_t t = e->knobs.test.slice_bytes & ~(size_t)63;

    if (t != 0)
        return t;
#else
    (void)e;
#endif
    return GP_SLICE_BYTES;
}

/*
 * The kernels: AAD goes into the MAC a block at a time, a partial block waiting (kernels/msg_unit.h
 * gp_mac_absorb); the first data request pads the AAD (gp_mac_pad) and marks the text begun, even
 * with no byte; text goes into the MAC the same way (AEAD only) and moves the counter to the block
 * after the last one begun (kernels/units.h gp_job_plan: st->ctr is the counter of block
 * ceil(text_len / bs)); a tag pads what is pending and ends the message.
 */
void gp_kstate_shadow_advance(gp_msg_state *sh, uint32_t op, uint64_t len, uint32_t aad_len)
{
    const int aead = gp_alg_is_aead(sh->alg);
    const uint64_t bs = gp_alg_is_aes(sh->alg) ? 16 : 64, p = sh->text_len;
    const uint64_t aad = aad_len + (op == GP_OP_AAD ? len : 0);

    sh->aad_len += aad;
    sh->mac_pend_len = (uint32_t)((sh->mac_pend_len + aad) % 16);
    if (op == GP_OP_TAG) {
        sh->mac_pend_len = 0;
        return;
    }
    if (op != GP_OP_ENCRYPT && op != GP_OP_DECRYPT)
        return;
    if (aead && !sh->in_text)
        sh->mac_pend_len = 0;
    sh->in_text = 1;
    if (aead)
        sh->mac_pend_len = (uint32_t)((sh->mac_pend_len + len) % 16);
    gp_ctr_add(sh->alg, sh->ctr, (p + len + bs - 1) / bs - (p + bs - 1) / bs);
    sh->text_len = p + len;
    sh->ks_used = (uint32_t)(sh->text_len % bs);
}

int gp_kstate_shadow_matches(const gp_msg_state *st, const gp_msg_state *sh)
{
    return st->alg == sh->alg && st->text_len == sh->text_len && st->aad_len == sh->aad_len
           && st->mac_pend_len == sh->mac_pend_len && st->in_text == sh->in_text
           && memcmp(st->ctr, sh->ctr, 16) == 0 && st->ks_used == sh->ks_used;
}

#define PLAN_ALIGN16(x) (((x) + 15) & ~(uint64_t)15)
#define PLAN_ALIGN128(x) (((x) + 127) & ~(uint64_t)127)

/* What slot s carries in the launch's parameter: its AAD, padded, then its powers. */
static uint32_t slot_extra(const gp_ordered_slot *s)
{
    return (uint32_t)PLAN_ALIGN16(s->aad_len) + (s->pows ? (uint32_t)sizeof(gp_mac_pows) : 0u);
}

int gp_ordered_pass_next(gp_ordered_req *reqs, size_t n, size_t slice, uint64_t at, gp_ordered_pass *p)
{
    uint64_t cur;

    p->n = 0;
    p->nrefs = 0;
    p->extra = 0;
    for (size_t i = 0; i < n && p->n < GP_ORDERED_BATCH_MAX; i++) {
        gp_ordered_req *q = &reqs[i];
        gp_ordered_slot *s = &p->s[p->n];

        if (q->begun && q->planned >= q->len)
            continue;   /* planned whole */
        s->req = (uint32_t)i;
        s->off = q->planned;
        s->len = q->len - q->planned < slice ? q->len - q->planned : slice;
        s->aad_len = q->begun ? 0 : q->aad_len;
        gp_job_plan(&s->job, q->shadow, q->op, s->len, s->aad_len);
        s->pows = q->shadow->alg == GP_ALG_CHACHA20_POLY1305 && s->job.nunits > 0;
        if (p->extra + slot_extra(s) > GP_ORDERED_BATCH_EXTRA)
            continue;   /* the next pass takes it (every slot alone fits: 64 + 2 KiB) */
        s->extra_at = p->extra;
        p->extra += slot_extra(s);
        s->ref_first = p->nrefs;
        p->nrefs += s->job.nunits + 1;   /* the lead always runs: its state is not the host's to skip */
        gp_kstate_shadow_advance(q->shadow, q->op, s->len, s->aad_len);
        q->planned += s->len;
        q->begun = 1;
        p->n++;
    }
    if (p->n == 0)
        return 0;
    /* The area: works, then each slot's span counters, AAD, powers and partials, then the refs. */
    p->works = at;
    cur = at + (uint64_t)p->n * sizeof(gp_work);
    for (uint32_t k = 0; k < p->n; k++) {
        gp_ordered_slot *s = &p->s[k];

        s->spans = PLAN_ALIGN16(cur);
        s->aad = PLAN_ALIGN16(s->spans + (uint64_t)s->job.nspans * sizeof(uint32_t));
        s->pow_at = PLAN_ALIGN16(s->aad + s->aad_len);
        s->partials = PLAN_ALIGN128(s->pow_at + (s->pows ? sizeof(gp_mac_pows) : 0));
        cur = s->partials + gp_partials_bytes(&s->job);
    }
    p->refs = PLAN_ALIGN16(cur);
    p->end = p->refs + ((uint64_t)p->nrefs + 1) * sizeof(gp_unit_ref);
    return 1;
}
