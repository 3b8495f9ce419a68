/* SPDX-License-Identifier: Apache-2.0 */
/* MAC values (GHASH and Poly1305 elements in one word format), their arithmetic and the table of
 * powers of a MAC key that the parallel units use. */
#ifndef GP_MAC_POWS_H
#define GP_MAC_POWS_H

#include "batch_abi.h"
#include "ghash.h"
#include "poly1305.h"

/* a = a * b mod 2^130 - 5, 26-bit limbs, partially reduced like gp_poly1305_blocks' accumulator. */
GP_KFN void gp_p1305_mul(uint32_t a[5], const uint32_t b[5])
{
    const uint64_t s1 = (uint64_t)b[1] * 5, s2 = (uint64_t)b[2] * 5, s3 = (uint64_t)b[3] * 5,
                   s4 = (uint64_t)b[4] * 5;
    uint64_t d0, d1, d2, d3, d4;
    uint32_t c;

    d0 = (uint64_t)a[0] * b[0] + a[1] * s4 + a[2] * s3 + a[3] * s2 + a[4] * s1;
    d1 = (uint64_t)a[0] * b[1] + (uint64_t)a[1] * b[0] + a[2] * s4 + a[3] * s3 + a[4] * s2;
    d2 = (uint64_t)a[0] * b[2] + (uint64_t)a[1] * b[1] + (uint64_t)a[2] * b[0] + a[3] * s4 + a[4] * s3;
    d3 = (uint64_t)a[0] * b[3] + (uint64_t)a[1] * b[2] + (uint64_t)a[2] * b[1] + (uint64_t)a[3] * b[0] + a[4] * s4;
    d4 = (uint64_t)a[0] * b[4] + (uint64_t)a[1] * b[3] + (uint64_t)a[2] * b[2] + (uint64_t)a[3] * b[1] + (uint64_t)a[4] * b[0];
    c = (uint32_t)(d0 >> 26); a[0] = (uint32_t)d0 & GP_POLY_MASK26;
    d1 += c; c = (uint32_t)(d1 >> 26); a[1] = (uint32_t)d1 & GP_POLY_MASK26;
    d2 += c; c = (uint32_t)(d2 >> 26); a[2] = (uint32_t)d2 & GP_POLY_MASK26;
    d3 += c; c = (uint32_t)(d3 >> 26); a[3] = (uint32_t)d3 & GP_POLY_MASK26;
    d4 += c; c = (uint32_t)(d4 >> 26); a[4] = (uint32_t)d4 & GP_POLY_MASK26;
    a[0] += c * 5; c = a[0] >> 26; a[0] &= GP_POLY_MASK26;
    a[1] += c;
}

/* a = a + b with carries (limbs stay near 26 bits; the top carry wraps around times 5). */
GP_KFN void gp_p1305_add(uint32_t a[5], const uint32_t b[5])
{
    uint32_t c = 0;

    for (int i = 0; i < 5; i++) {
        a[i] += b[i] + c;
        c = a[i] >> 26;
        a[i] &= GP_POLY_MASK26;
    }
    a[0] += c * 5;
    c = a[0] >> 26;
    a[0] &= GP_POLY_MASK26;
    a[1] += c;
}

/* A MAC value: GHASH's X as words [x0 hi, x0 lo, x1 hi, x1 lo] (word 4 zero), or Poly1305's 5
 * limbs. The same words are what partials and the powers table hold. */
typedef struct gp_lane_mac {
    uint32_t w[5];
} gp_lane_mac;

GP_KFN void gp_lane_mac_get_x(uint64_t x[2], const gp_lane_mac *m)
{
    x[0] = (uint64_t)m->w[0] << 32 | m->w[1];
    x[1] = (uint64_t)m->w[2] << 32 | m->w[3];
}

GP_KFN void gp_lane_mac_set_x(gp_lane_mac *m, const uint64_t x[2])
{
    m->w[0] = (uint32_t)(x[0] >> 32); m->w[1] = (uint32_t)x[0];
    m->w[2] = (uint32_t)(x[1] >> 32); m->w[3] = (uint32_t)x[1];
    m->w[4] = 0;
}

GP_KFN void gp_lane_mac_zero(gp_lane_mac *m)
{
    for (int i = 0; i < 5; i++)
        m->w[i] = 0;
}

/* m = 1 of the MAC's field: GHASH's is the leftmost bit (SP 800-38D §6.3), Poly1305's limb 0's
 * lowest. */
GP_KFN void gp_lane_mac_one(gp_lane_mac *m, uint32_t alg)
{
    gp_lane_mac_zero(m);
    m->w[0] = alg == GP_ALG_AES_GCM ? 0x80000000u : 1u;
}

/* a = a * b: GF(2^128) (SP 800-38D §6.3) or mod 2^130 - 5. a and b may be the same value. */
GP_KFN void gp_mac_mul(uint32_t alg, gp_lane_mac *a, const gp_lane_mac *b)
{
    if (alg == GP_ALG_AES_GCM) {
        uint64_t x[2], h[2];

        gp_lane_mac_get_x(x, a);
        gp_lane_mac_get_x(h, b);
        gp_ghash_mul(x, h);
        gp_lane_mac_set_x(a, x);
    } else {
        uint32_t t[5];

        for (int i = 0; i < 5; i++)
            t[i] = b->w[i];
        gp_p1305_mul(a->w, t);
    }
}

/* a = a + b: XOR for GHASH, addition mod 2^130 - 5 for Poly1305. */
GP_KFN void gp_mac_add(uint32_t alg, gp_lane_mac *a, const gp_lane_mac *b)
{
    if (alg == GP_ALG_AES_GCM) {
        for (int i = 0; i < 4; i++)
            a->w[i] ^= b->w[i];
    } else {
        gp_p1305_add(a->w, b->w);
    }
}

GP_KFN void gp_mac_pow_get(gp_lane_mac *m, const gp_mac_pows *t, uint32_t idx)
{
    for (int i = 0; i < 5; i++)
        m->w[i] = t->p[idx][i];
}

GP_KFN void gp_mac_pow_set(gp_mac_pows *t, uint32_t idx, const gp_lane_mac *m)
{
    for (int i = 0; i < 5; i++)
        t->p[idx][i] = m->w[i];
}

/* Which entries of a gp_mac_pows made on demand hold their power (kernels/units.h,
 * gp_mac_pows_cover); all zero: none. */
typedef struct gp_pows_have {
    uint32_t lanes;    /* lane entries L-lanes .. L-1 */
    uint32_t units;    /* Q^0 .. Q^(units-1) */
    uint32_t stride;   /* Q^L */
    uint32_t fin;      /* bit c-1: P^(4c) */
    uint32_t near;     /* P^2 and P^3 */
} gp_pows_have;

/* The table of gp_mac_pows for MAC key P (done on the host: once per key for GCM, once per
 * request for ChaCha20-Poly1305), 3L + 2 multiplications. */
GP_KFN void gp_mac_pows_make(gp_mac_pows *t, uint32_t alg, const gp_lane_mac *p)
{
    const uint32_t L = GP_UNIT_LANES;
    gp_lane_mac p4 = *p, q, one;

    gp_state_wipe(t, sizeof(*t));
    gp_lane_mac_one(&one, alg);
    gp_mac_mul(alg, &p4, &p4);                               /* P^2 */
    gp_mac_pow_set(t, GP_POW_NEAR, &p4);
    q = p4;
    gp_mac_mul(alg, &q, p);
    gp_mac_pow_set(t, GP_POW_NEAR + 1, &q);                  /* P^3 */
    gp_mac_mul(alg, &p4, &p4);                               /* P^4 */
    q = *p;
    gp_mac_pow_set(t, GP_POW_LANE + L - 1, &q);              /* lane L-1: P^1 */
    for (uint32_t l = L - 1; l-- > 0;) {
        gp_mac_mul(alg, &q, &p4);
        gp_mac_pow_set(t, GP_POW_LANE + l, &q);              /* P^(4(L-1-l)+1) */
    }
    q = p4;
    gp_mac_pow_set(t, GP_POW_FIN, &q);                       /* c = 1: P^4 */
    for (uint32_t c = 2; c <= L; c++) {
        gp_mac_mul(alg, &q, &p4);
        gp_mac_pow_set(t, GP_POW_FIN + c - 1, &q);           /* P^(4c) */
    }
    /* q = P^(4L) = Q */
    p4 = one;
    for (uint32_t i = 0; i < L; i++) {
        gp_mac_pow_set(t, GP_POW_UNIT + i, &p4);             /* Q^i */
        gp_mac_mul(alg, &p4, &q);
    }
    gp_mac_pow_set(t, GP_POW_STRIDE, &p4);                   /* Q^L */
    gp_state_wipe(&p4, sizeof(p4));
    gp_state_wipe(&q, sizeof(q));
}

/* GCM's stride powers (gp_key_sched.gcm_stride_pows): S^e and S^(16j) from S = Q^L, the key's
 * table t's stride entry; 2 GP_STRIDE_POWS - 1 multiplications, once per key. */
GP_KFN void gp_stride_pows_make(uint32_t sp[2][GP_STRIDE_POWS][4], const gp_mac_pows *t)
{
    gp_lane_mac s, x;

    gp_mac_pow_get(&s, t, GP_POW_STRIDE);
    for (int half = 0; half < 2; half++) {
        gp_lane_mac_one(&x, GP_ALG_AES_GCM);   /* S^0 */
        for (uint32_t e = 0; e < GP_STRIDE_POWS; e++) {
            for (int w = 0; w < 4; w++)
                sp[half][e][w] = x.w[w];
            if (e + 1 < GP_STRIDE_POWS || half == 0)
                gp_mac_mul(GP_ALG_AES_GCM, &x, &s);
        }
        s = x;   /* after the first half: S^16, the second half's step */
    }
    gp_state_wipe(&s, sizeof(s));
    gp_state_wipe(&x, sizeof(x));
}

/* S^e for e < GP_STRIDE_POWS^2 from a GCM key's stride powers: at most one multiplication. */
GP_KFN void gp_stride_pow(const gp_key_sched *k, uint32_t e, gp_lane_mac *x)
{
    const uint32_t lo = e % GP_STRIDE_POWS, hi = e / GP_STRIDE_POWS;
    gp_lane_mac h;

    gp_lane_mac_zero(x);
    gp_lane_mac_zero(&h);
    for (int w = 0; w < 4; w++) {
        x->w[w] = k->gcm_stride_pows[0][lo][w];
        h.w[w] = k->gcm_stride_pows[1][hi][w];
    }
    if (lo == 0)
        *x = h;
    else if (hi != 0)
        gp_mac_mul(GP_ALG_AES_GCM, x, &h);
#if !defined(__CUDA_ARCH__)
    gp_state_wipe(&h, sizeof(h));
#endif
}

/* GCM's tag powers (gp_key_sched.gcm_tag_pows): Q^(i+1) H from the key's table t. */
GP_KFN void gp_tag_pows_make(uint32_t tp[GP_TAG_POWS][4], const gp_mac_pows *t, const gp_lane_mac *h)
{
    gp_lane_mac x;

    for (uint32_t i = 0; i < GP_TAG_POWS; i++) {
        gp_mac_pow_get(&x, t, i + 1 < GP_UNIT_LANES ? GP_POW_UNIT + i + 1 : GP_POW_STRIDE);
        gp_mac_mul(GP_ALG_AES_GCM, &x, h);
        for (int w = 0; w < 4; w++)
            tp[i][w] = x.w[w];
    }
    gp_state_wipe(&x, sizeof(x));
}

#endif
