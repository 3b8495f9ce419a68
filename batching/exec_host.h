/* SPDX-License-Identifier: Apache-2.0 */
/* The host executor (exec_host.c): its worker pool, which the engine holds and stops. */
#ifndef GP_EXEC_HOST_H
#define GP_EXEC_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "batching/engine.h"

/* The host executor's worker pool (started on the first batch worth spreading). */
typedef struct gp_host_pool {
    pthread_mutex_t submit;      /* one batch in the pool at a time */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    pthread_t *threads;
    int nthreads, started, stopping;
    uint64_t generation;         /* bumped per posted batch */
    pid_t pid;                   /* process that started the threads (a fork leaves them behind) */
    gp_request *reqs;
    size_t *order;               /* request indexes grouped by message, submission order kept */
    size_t *group_start;         /* ngroups + 1 offsets into order */
    size_t ngroups;
    atomic_size_t next;          /* next group to claim */
    int active;                  /* workers inside the current batch */
} gp_host_pool;

/* Stop the pool's workers: gp_engine_free, whether or not the host executor was opened (the
 * messages that fall back to it from a failed executor run there without an opening). */
void gp_host_pool_stop(gp_host_pool *p);

#endif
