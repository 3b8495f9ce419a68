/* SPDX-License-Identifier: Apache-2.0 */
/* A stream-ordered batch's passes (batching/kstate.h, gp_ordered_pass_next): every invariant the cuda executor's launches rely on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "batching/kstate.h"
#include "gptest.h"
#include "kernels/units.h"

#define AREA_AT 8192u   /* where the area starts in the lead's block (any 128-byte boundary) */

typedef struct region {
    uint64_t at, len;
} region;

/* No two of the pass's regions overlap, and each lies in [AREA_AT, end). */
static void check_disjoint(region *r, size_t n, uint64_t end)
{
    for (size_t i = 0; i < n; i++) {
        assert_true(r[i].at >= AREA_AT && r[i].at + r[i].len <= end);
        for (size_t j = i + 1; j < n; j++)
            assert_true(r[i].len == 0 || r[j].len == 0 || r[i].at + r[i].len <= r[j].at || r[j].at + r[j].len <= r[i].at);
    }
}

/* n requests of one algorithm, random lengths, carried AAD and states; the slice random too. */
static void check_batch(uint32_t alg, size_t n, size_t slice)
{
    gp_msg_state shadow[GP_ORDERED_BATCH_MAX], replay[GP_ORDERED_BATCH_MAX];
    gp_ordered_req q[GP_ORDERED_BATCH_MAX];
    uint64_t next_off[GP_ORDERED_BATCH_MAX];
    int seen[GP_ORDERED_BATCH_MAX];
    const int aead = alg == GP_ALG_AES_GCM || alg == GP_ALG_CHACHA20_POLY1305;
    gp_ordered_pass p;
    size_t passes = 0;

    for (size_t i = 0; i < n; i++) {
        const int tag = aead && gptest_rand_range(0, 3) == 0;

        memset(&shadow[i], 0, sizeof(shadow[i]));
        shadow[i].alg = alg;
        shadow[i].text_len = gptest_rand_range(0, 3) == 0 ? gptest_rand_range(0, 200) : 0;
        shadow[i].in_text = shadow[i].text_len > 0;
        replay[i] = shadow[i];
        q[i] = (gp_ordered_req){ .shadow = &shadow[i], .op = tag ? GP_OP_TAG : GP_OP_ENCRYPT,
                                 .aad_len = aead && gptest_rand_range(0, 1) ? (uint32_t)gptest_rand_range(1, 64) : 0,
                                 .len = tag ? 0 : gptest_rand_range(0, 3) == 0 ? gptest_rand_range(0, 64)
                                                                               : gptest_rand_range(0, 5 * slice) };
        next_off[i] = 0;
        seen[i] = 0;
    }
    while (gp_ordered_pass_next(q, n, slice, AREA_AT, &p)) {
        region r[4 * GP_ORDERED_BATCH_MAX + 2];
        int in_pass[GP_ORDERED_BATCH_MAX] = { 0 };
        uint32_t refs = 0, extra = 0;
        size_t nr = 0;

        assert_true(++passes <= 64 * n + 64);
        assert_true(p.n >= 1 && p.n <= GP_ORDERED_BATCH_MAX && p.extra <= GP_ORDERED_BATCH_EXTRA);
        assert_int_equal(p.works, AREA_AT);
        r[nr++] = (region){ p.works, (uint64_t)p.n * sizeof(gp_work) };
        for (uint32_t k = 0; k < p.n; k++) {
            const gp_ordered_slot *s = &p.s[k];
            gp_job j;

            assert_true(s->req < n && !in_pass[s->req]);   /* a message once a pass */
            in_pass[s->req] = 1;
            assert_true(k == 0 || s->req > p.s[k - 1].req);   /* in the requests' order */
            /* Its slices in order, contiguous, the first with its AAD, none longer than a slice. */
            assert_true(s->off == next_off[s->req] && s->len <= slice);
            assert_int_equal(s->aad_len, seen[s->req] ? 0 : q[s->req].aad_len);
            next_off[s->req] += s->len;
            seen[s->req]++;
            /* Planned from the state the slices before it leave. */
            gp_job_plan(&j, &replay[s->req], q[s->req].op, s->len, s->aad_len);
            assert_memory_equal(&j, &s->job, sizeof(j));
            gp_kstate_shadow_advance(&replay[s->req], q[s->req].op, s->len, s->aad_len);
            assert_int_equal(s->pows, alg == GP_ALG_CHACHA20_POLY1305 && j.nunits > 0);
            /* Refs back to back; the parameter's extra packed in order. */
            assert_int_equal(s->ref_first, refs);
            refs += j.nunits + 1;
            assert_int_equal(s->extra_at, extra);
            extra += (uint32_t)((s->aad_len + 15) & ~15u) + (s->pows ? (uint32_t)sizeof(gp_mac_pows) : 0);
            assert_true(s->spans % 16 == 0 && s->aad % 16 == 0 && s->pow_at % 16 == 0 && s->partials % 128 == 0);
            r[nr++] = (region){ s->spans, (uint64_t)j.nspans * 4 };
            r[nr++] = (region){ s->aad, s->aad_len };
            r[nr++] = (region){ s->pow_at, s->pows ? sizeof(gp_mac_pows) : 0 };
            r[nr++] = (region){ s->partials, gp_partials_bytes(&j) };
        }
        assert_int_equal(p.nrefs, refs);
        assert_int_equal(p.extra, extra);
        assert_true(p.refs % 16 == 0);
        r[nr++] = (region){ p.refs, ((uint64_t)p.nrefs + 1) * sizeof(gp_unit_ref) };   /* and the claim counter */
        check_disjoint(r, nr, p.end);
    }
    /* Every request planned whole, its shadow where the replay left it; a tag or an empty request once. */
    for (size_t i = 0; i < n; i++) {
        assert_true(next_off[i] == q[i].len && seen[i] >= 1);
        if (q[i].len == 0)
            assert_int_equal(seen[i], 1);
        assert_true(gp_kstate_shadow_matches(&shadow[i], &replay[i]));
    }
    assert_int_equal(gp_ordered_pass_next(q, n, slice, AREA_AT, &p), 0);
}

static void test_passes(void **state)
{
    static const uint32_t algs[] = { GP_ALG_AES_CTR, GP_ALG_AES_GCM, GP_ALG_CHACHA20, GP_ALG_CHACHA20_POLY1305 };

    (void)state;
    for (int k = 0; k < 400; k++) {
        const size_t slice = gptest_rand_range(0, 1) ? 64 * gptest_rand_range(1, 512) : (size_t)16 << 20;

        check_batch(algs[k % 4], gptest_rand_range(1, GP_ORDERED_BATCH_MAX), slice > ((size_t)1 << 20) ? (size_t)1 << 18 : slice);
    }
    /* Every pipe of a ChaCha20-Poly1305 pipeline with body units: its powers do not fit one pass. */
    check_batch(GP_ALG_CHACHA20_POLY1305, GP_ORDERED_BATCH_MAX, (size_t)1 << 18);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_passes) };

    gptest_rand_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
