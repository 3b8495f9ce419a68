/* SPDX-License-Identifier: Apache-2.0 */
/* The host executor's worker pool as the engine's struct holds it (by value; exec_host.c runs it). */
#ifndef GP_HOST_POOL_H
#define GP_HOST_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "batching/request.h"

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

#endif
