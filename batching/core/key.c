/* SPDX-License-Identifier: Apache-2.0 */
/* Keys: made, copied, freed; their kernel schedule, GHASH matrix and one-block AES made on first use. */
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "batching/core/core.h"
#include "kernels/msg_unit.h"


static atomic_uint_fast64_t next_key_id = 1;

gp_key *gp_key_new(gp_engine *e, uint32_t alg, const uint8_t *key, size_t keylen)
{
    gp_key *k;

    if (keylen > sizeof(k->raw))
        return NULL;
    k = OPENSSL_secure_zalloc(sizeof(*k));
    if (k == NULL)
        return NULL;
    k->engine = e;
    k->id = atomic_fetch_add(&next_key_id, 1);
    k->alg = alg;
    k->keylen = keylen;
    memcpy(k->raw, key, keylen);
    return k;
}

const gp_key_sched *gp_key_sched_get(gp_key *k)
{
    if (!k->sched_ready) {
        gp_key_schedule(&k->sched, k->alg, k->raw, k->keylen);
        k->sched_ready = 1;
    }
    return &k->sched;
}

const gp_ghash_mma *gp_key_ghmma_get(gp_key *k)
{
    if (k->ghmma == NULL) {
        /* 512 columns and 64 bit transposes, far more work than a message start: once per key, and
         * only for keys whose long requests reach the GPU in large batches (build option ghash_mma). */
        gp_ghash_mma *t = OPENSSL_secure_malloc(sizeof(*t));

        if (t == NULL)
            return NULL;
        gp_ghash_mma_make(t, gp_key_sched_get(k)->gcm_h);
        k->ghmma = t;
    }
    return k->ghmma;
}

gp_key *gp_key_dup(const gp_key *k)
{
    gp_key *d = OPENSSL_secure_malloc(sizeof(*d));

    if (d == NULL)
        return NULL;
    memcpy(d, k, sizeof(*d));
    d->id = atomic_fetch_add(&next_key_id, 1);
    d->ecb = NULL;   /* the copy makes its own on first use */
    d->ghmma = NULL;
    memset(d->table_slot, 0, sizeof(d->table_slot));   /* the original's slots stay the original's */
    return d;
}

/* Equal bytes, in time independent of where they differ (a key is secret), eight at a time: a
 * caller that passes the same key at every init (openssl speed 3.0.16+ and 3.5) compares it at
 * every message, where CRYPTO_memcmp's byte loop cost more than a GCM re-key it saves. */
static int key_bytes_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint64_t diff = 0;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;

        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        diff |= x ^ y;
    }
    for (; i < n; i++)
        diff |= (uint64_t)(a[i] ^ b[i]);
    return diff == 0;
}

int gp_key_matches(const gp_key *k, const uint8_t *key, size_t keylen)
{
    return k != NULL && k->keylen == keylen && key_bytes_equal(k->raw, key, keylen);
}

const uint8_t *gp_key_bytes(const gp_key *k)
{
    return k->raw;
}

void gp_key_free(gp_key *k)
{
    if (k == NULL)
        return;
    for (int i = 0; i < GP_EXEC_COUNT; i++)
        if (k->engine != NULL && k->engine->exec[i] != NULL && k->engine->exec[i]->key_forget != NULL)
            k->engine->exec[i]->key_forget(k->engine, k);   /* the device's copy of the schedule */
    EVP_CIPHER_CTX_free(k->ecb);                    /* cleanses its key schedule */
    OPENSSL_secure_clear_free(k->ghmma, sizeof(*k->ghmma));   /* linear in H: secret */
    OPENSSL_secure_clear_free(k, sizeof(*k));       /* round keys, H and the raw key are secret */
}


/* GCM's E_K(J0) at each message start of the host and cuda executors (batching/kstate.c): the
 * default provider's ECB under this key, made on first use and kept with the key. */
int gp_key_aes_block(gp_engine *e, gp_key *k, const uint8_t in[16], uint8_t out[16])
{
    static const char *const ecb_names[3] = { "AES-128-ECB", "AES-192-ECB", "AES-256-ECB" };
    const int i = k->keylen == 16 ? 0 : k->keylen == 24 ? 1 : k->keylen == 32 ? 2 : -1;
    uint8_t blk[16];
    int outl = 0, ok;

    if (i < 0)
        return 0;
    if (k->ecb == NULL) {
        EVP_CIPHER *c;
        EVP_CIPHER_CTX *ctx = NULL;

        /* A failure here only sends the caller to the kernel AES: leave no error behind. */
        ERR_set_mark();
        c = EVP_CIPHER_fetch(e->libctx, ecb_names[i], "provider=default");
        if (c == NULL || (ctx = EVP_CIPHER_CTX_new()) == NULL
            || !EVP_EncryptInit_ex2(ctx, c, k->raw, NULL, NULL) || !EVP_CIPHER_CTX_set_padding(ctx, 0)) {
            EVP_CIPHER_CTX_free(ctx);
            EVP_CIPHER_free(c);
            ERR_pop_to_mark();
            return 0;
        }
        EVP_CIPHER_free(c);   /* the context keeps its own reference */
        ERR_clear_last_mark();
        k->ecb = ctx;
    }
    ok = EVP_EncryptUpdate(k->ecb, blk, &outl, in, 16) && outl == 16;
    gp_cpu_clean_upper_state();
    if (ok)
        memcpy(out, blk, 16);
    OPENSSL_cleanse(blk, sizeof(blk));
    return ok;
}
