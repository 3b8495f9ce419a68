/* SPDX-License-Identifier: Apache-2.0 */
/* Executors open lazily, once per process (after a fork too), and are marked failed as a whole. */
#include <pthread.h>
#include <stdio.h>

#include "batching/core/core.h"

/*
 * Executors open lazily, once per process. A child forked after its parent opened them (openssl
 * speed -multi forks after loading providers) decides again for itself; CUDA state does not survive
 * a fork, so a child of a parent that used the GPU never touches it.
 */
void gp_engine_check_fork(gp_engine *e)
{
    unsigned now = gp_fork_generation();

    if (atomic_load(&e->fork_gen) == now)
        return;
    atomic_store(&e->fork_gen, now);
    atomic_store(&e->preferred, NULL);
    /* The host and cpu executors hold plain memory, which the child has; the GPU context is not. */
    if (e->opened[GP_EXEC_CUDA] != 0)
        e->opened[GP_EXEC_CUDA] = -1;
}

typedef struct open_call {
    gp_engine *e;
    const gp_executor *x;
} open_call;

static int open_main(void *v)
{
    open_call *o = v;

    return o->x->open(o->e);
}

/*
 * Open x once per process. The open itself (a CUDA context: 100+ ms) runs without open_lock held,
 * marked GP_OPENING: a fork meanwhile must not leave the child a lock held forever (the child then
 * sees GP_OPENING and, like any child of an opener, treats the GPU as unusable: gp_engine_check_fork).
 * Others asking meanwhile poll; a condition variable would not survive that fork either.
 */
#define GP_OPENING 2

int gp_engine_executor_usable(gp_engine *e, const gp_executor *x)
{
    int state;

    if (x == NULL)
        return 0;
    if (atomic_load_explicit(&e->usable_gen[x->id], memory_order_acquire) == gp_fork_generation() + 1)
        return 1;
    pthread_mutex_lock(&e->open_lock);
    gp_engine_check_fork(e);
    while (e->opened[x->id] == GP_OPENING) {
        pthread_mutex_unlock(&e->open_lock);
        gp_sleep_1ms();
        pthread_mutex_lock(&e->open_lock);
        gp_engine_check_fork(e);
    }
    if (e->opened[x->id] == 0) {
        open_call o = { e, x };
        int ok;

        e->opened[x->id] = GP_OPENING;
        pthread_mutex_unlock(&e->open_lock);
        ok = gp_call_off_job_stack(open_main, &o);
        pthread_mutex_lock(&e->open_lock);
        e->opened[x->id] = ok ? 1 : -1;
    }
    state = e->opened[x->id];
    if (state == 1)
        atomic_store_explicit(&e->usable_gen[x->id], gp_fork_generation() + 1, memory_order_release);
    pthread_mutex_unlock(&e->open_lock);
    return state == 1;
}

/* Under open_lock. */
static void mark_failed(gp_engine *e, const gp_executor *x)
{
    /* Unusable, but still holding what it opened (arenas, streams, threads): other threads may be
     * inside its run right now, so it is closed only with the engine (gp_engine_free). */
    if (e->opened[x->id] == 1)
        e->opened[x->id] = GP_EXEC_FAILED;
    atomic_store(&e->usable_gen[x->id], 0);
    /* Before `preferred` is cleared: a thread that resolves where new messages go and then finds x
     * failed resolves again (batching/engine.c, preferred_executor). */
    atomic_store(&e->failed_gen[x->id], gp_fork_generation() + 1);
    atomic_fetch_add_explicit(&e->route_epoch, 1, memory_order_release);
    if (atomic_load(&e->preferred) == x) {
        /* New messages, and streams that would move to the GPU side, are placed afresh. */
        atomic_store(&e->hybrid, 0);
        atomic_store(&e->preferred, NULL);
    }
}

void gp_engine_executor_failed(gp_engine *e, const gp_executor *x)
{
    pthread_mutex_lock(&e->open_lock);
    mark_failed(e, x);
    pthread_mutex_unlock(&e->open_lock);
}

void gp_engine_executor_fault(gp_engine *e, const gp_executor *x, int gpu, const char *what)
{
    pthread_mutex_lock(&e->open_lock);
    if (e->fault.x == NULL) {
        e->fault.x = x;
        e->fault.gpu = gpu;
        e->fault.at_open = e->opened[x->id] == GP_OPENING;
        snprintf(e->fault.what, sizeof(e->fault.what), "%s", what);
    }
    mark_failed(e, x);
    pthread_mutex_unlock(&e->open_lock);
}

int gp_engine_executor_has_failed(gp_engine *e, const gp_executor *x)
{
    return atomic_load(&e->failed_gen[x->id]) == gp_fork_generation() + 1;
}

void gp_engine_fault_get(gp_engine *e, gp_exec_fault *f)
{
    pthread_mutex_lock(&e->open_lock);
    *f = e->fault;
    pthread_mutex_unlock(&e->open_lock);
}
