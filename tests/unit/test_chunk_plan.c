/* SPDX-License-Identifier: Apache-2.0 */
/* The chunks of a lone large request's kernel (batching/chunk_plan.h): every invariant the launches
 * rely on, over message offsets, lengths and piece sizes the cuda executor makes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "batching/chunk_plan.h"

/* A request's job as kernels/units.h gp_job_plan cuts it: the lead up to the message's next 64-byte
 * boundary, whole 64-byte blocks in units, the rest the tail. */
static void job_of(uint64_t text_len, uint64_t len, uint64_t *head, uint64_t *body, uint32_t *nunits)
{
    *head = (64 - text_len % 64) % 64;
    if (*head > len)
        *head = len;
    *body = (len - *head) / 64 * 64;
    *nunits = (uint32_t)((*body + GP_UNIT_BYTES - 1) / GP_UNIT_BYTES);
}

static void check_plan(uint64_t text_len, uint64_t len, uint64_t piece)
{
    gp_chunk ch[GP_CHUNKS_MAX + 1];
    uint64_t head, body;
    uint32_t nunits;
    const uint64_t npieces = (len + piece - 1) / piece;
    size_t n;

    job_of(text_len, len, &head, &body, &nunits);
    memset(ch, 0xa5, sizeof(ch));
    ch[GP_CHUNKS_MAX].unit_lo = 0xdead;   /* never written */
    n = gp_chunk_plan(len, head, body, nunits, piece, ch);
    assert_true(n >= 1 && n <= GP_CHUNKS_MAX);
    assert_int_equal(ch[GP_CHUNKS_MAX].unit_lo, 0xdead);
    /* Long enough, in enough pieces, with units to share: it is cut. */
    if (len >= 2 * GP_CHUNK_MIN_BYTES && npieces >= 2 && nunits >= GP_CHUNKS_MAX)
        assert_true(n >= 2);
    assert_int_equal(ch[0].unit_lo, 0);
    assert_int_equal(ch[n - 1].unit_hi, nunits);
    assert_int_equal(ch[n - 1].in_pieces, npieces);
    assert_int_equal(ch[n - 1].out_pieces, npieces);
    for (size_t j = 0; j < n; j++) {
        const gp_chunk *c = &ch[j];

        assert_true(c->unit_lo <= c->unit_hi);
        assert_true(c->in_pieces <= npieces && c->out_pieces <= c->in_pieces);
        if (j > 0) {
            assert_int_equal(c->unit_lo, ch[j - 1].unit_hi);
            assert_true(c->in_pieces >= ch[j - 1].in_pieces && c->out_pieces >= ch[j - 1].out_pieces);
        }
        if (j + 1 == n)
            continue;
        /* Not the last: the last unit (and so the finish and the tail) is the last launch's. */
        assert_true(c->unit_hi < nunits);
        /* What its units and the lead read is in: the head and every byte of units below hi. */
        assert_true(c->in_pieces * piece >= head + (uint64_t)c->unit_hi * GP_UNIT_BYTES);
        /* What it calls final was written by the lead or a unit below hi. */
        assert_true(c->out_pieces * piece <= head + (uint64_t)c->unit_hi * GP_UNIT_BYTES);
    }
    if (n > 1) {
        assert_true(ch[n - 1].unit_hi > ch[n - 1].unit_lo);
        /* The chunks keep up with the pieces: all but the last few pieces are final before the end. */
        assert_true(ch[n - 2].out_pieces + 2 * ((npieces + n - 1) / n) >= npieces);
    }
}

/* The pieces the cuda executor cuts a request into (batching/cuda/shape.h spread_piece). */
static uint64_t piece_for(uint64_t len)
{
    uint64_t p = ((len / 16) + 65535) & ~(uint64_t)65535;

    return p < (128u << 10) ? 128u << 10 : p > (1u << 20) ? 1u << 20 : p;
}

static void test_lengths(void **state)
{
    static const uint64_t lens[] = { 256u << 10, 1u << 20, (2u << 20) - 1, 2u << 20, 4u << 20, (4u << 20) + 1,
                                     (4u << 20) + 63, (4u << 20) + 64, 5u << 20, 8u << 20, 16u << 20,
                                     (16u << 20) - 64, (16u << 20) + 17, 33u << 20, 100u << 20 };

    (void)state;
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (uint64_t t = 0; t < 64; t += 7) {
            check_plan(t, lens[i], piece_for(lens[i]));
            check_plan(t, lens[i], 128u << 10);
            check_plan(t, lens[i], 64u << 10);
        }
}

/* Whole pieces and a last piece shorter than a block: there the last chunk may hold nothing but
 * the tail, and the last unit must still be its. */
static void test_short_last_piece(void **state)
{
    static const uint64_t pieces[] = { 128u << 10, 256u << 10, 512u << 10, 1u << 20 };

    (void)state;
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        for (uint64_t m = 4; m <= 33; m++)
            for (uint64_t t = 1; t < 64; t += 6)
                for (uint64_t text = 0; text < 64; text += 21)
                    check_plan(text, m * pieces[i] + t, pieces[i]);
}

static void test_random(void **state)
{
    uint64_t s = 0x9e3779b97f4a7c15u;

    (void)state;
    for (int i = 0; i < 20000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const uint64_t len = (256u << 10) + s % (40u << 20), text = (s >> 40) % 4096;
        const uint64_t piece = (i & 1) ? piece_for(len) : ((s >> 20) % 16 + 1) * 65536;

        check_plan(text, len, piece);
    }
}

/* The shape of a lone 16 MiB update: eight launches of 2 MiB, each completing its own pieces. */
static void test_sixteen_mib(void **state)
{
    gp_chunk ch[GP_CHUNKS_MAX] = { { 0, 0, 0, 0 } };
    size_t n = gp_chunk_plan(16u << 20, 0, 16u << 20, (16u << 20) / GP_UNIT_BYTES, 1u << 20, ch);

    (void)state;
    assert_int_equal(n, 8);
    for (size_t j = 0; j + 1 < n; j++) {
        assert_int_equal(ch[j].unit_hi, (j + 1) * ((2u << 20) / GP_UNIT_BYTES));
        assert_int_equal(ch[j].in_pieces, 2 * (j + 1));
        assert_int_equal(ch[j].out_pieces, 2 * (j + 1));
    }
    /* 1 MiB in two launches; too short to pay for a second one, or too few pieces: one launch. */
    assert_int_equal(gp_chunk_plan(1u << 20, 0, 1u << 20, (1u << 20) / GP_UNIT_BYTES, 128u << 10, ch), 2);
    assert_int_equal(gp_chunk_plan(768u << 10, 0, 768u << 10, (768u << 10) / GP_UNIT_BYTES, 128u << 10, ch), 1);
    assert_int_equal(gp_chunk_plan(16u << 20, 0, 16u << 20, (16u << 20) / GP_UNIT_BYTES, 16u << 20, ch), 1);
    assert_int_equal(ch[0].unit_hi, (16u << 20) / GP_UNIT_BYTES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_short_last_piece),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_sixteen_mib),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
