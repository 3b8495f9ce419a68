/* SPDX-License-Identifier: Apache-2.0 */
/* Messages (made, copied, freed) and the order of a batch's requests by message. */
#include <string.h>

#include <openssl/crypto.h>

#include "batching/core/core.h"

gp_msg *gp_msg_new(gp_engine *e)
{
    gp_msg *m = OPENSSL_secure_zalloc(sizeof(*m));

    if (m != NULL)
        m->engine = e;
    return m;
}

gp_msg *gp_msg_dup(const gp_msg *m, gp_key *key_of_copy)
{
    gp_msg *d = gp_msg_new(m->engine);

    if (d == NULL)
        return NULL;
    d->exec = m->exec;
    d->routed = m->routed;
    d->aad_hold_len = m->aad_hold_len;
    memcpy(d->aad_hold, m->aad_hold, m->aad_hold_len);
    d->key = key_of_copy;
    d->enc = m->enc;
    d->devmem = m->devmem;
    d->ivlen = m->ivlen;
    memcpy(d->iv, m->iv, sizeof(d->iv));
    d->stream = m->stream;
    d->stream_now = m->stream_now;
    /* Stream-ordered: the state is the executor's until the stream has run the message's work. */
    if (m->ordered != NULL && m->exec->ordered_wait != NULL
        && m->exec->ordered_wait(m->engine, (gp_msg *)m, NULL) != GP_REQ_OK) {
        gp_msg_free(d);
        return NULL;
    }
    memcpy(&d->st, &m->st, sizeof(d->st));
    if (m->exec != NULL && m->exec->msg_copy != NULL && !m->exec->msg_copy(d, m)) {
        gp_msg_free(d);
        return NULL;
    }
    return d;
}

void gp_msg_free(gp_msg *m)
{
    if (m == NULL)
        return;
    gp_msg_fold_cpu_calls(m);
    for (int i = 0; i < GP_EXEC_COUNT; i++)
        if (m->engine != NULL && m->engine->exec[i] != NULL && m->engine->exec[i]->msg_clear != NULL)
            m->engine->exec[i]->msg_clear(m);
    OPENSSL_secure_clear_free(m, sizeof(*m));   /* keystream, GHASH/Poly1305 state */
}

/* Add the message's cpu_call counts to the engine's stats. */
void gp_msg_fold_cpu_calls(gp_msg *m)
{
    gp_stat_add_cpu_calls(m->engine, m->cpu_calls, m->cpu_bytes);
    m->cpu_calls = m->cpu_bytes = 0;
}

int gp_cmp_request_by_msg(const void *a, const void *b, void *reqs_v)
{
    const gp_request *reqs = reqs_v;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    uintptr_t mi = (uintptr_t)reqs[i].msg, mj = (uintptr_t)reqs[j].msg;

    if (mi != mj)
        return mi < mj ? -1 : 1;
    return i < j ? -1 : i > j;   /* keep submission order within a message */
}
