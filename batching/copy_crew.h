/* SPDX-License-Identifier: Apache-2.0 */
/* The copy crew: large memcpys between callers' memory and pinned memory, spread over helper threads. */
#ifndef GP_COPY_CREW_H
#define GP_COPY_CREW_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * One core copies pageable memory at a fraction of what the memory system and the PCIe link carry
 * (docs/performance.md, "The costs that decide"), so a large request's copies into and out of the pinned
 * arena are cut into pieces that the crew's threads and the calling thread copy at once. Pieces are
 * claimed in order, so a caller that hands piece k to the GPU as soon as it is done
 * (gp_copy_wait_piece) overlaps the copies with the transfer. Pieces bound for the GPU are copied
 * with stores that bypass the caches (GP_COPY_STREAMING). A caller always copies too, so a run
 * finishes even when every crew thread is busy with other callers' runs, or where there is none.
 * The first GP_COPY_LINGERERS helpers, out of work, watch for the next run for GP_COPY_LINGER_NS
 * before they sleep: a lone caller's copy out follows its copy in by one GPU round trip, and a
 * helper woken from sleep arrives after the caller has copied most of it alone. Only a few linger:
 * each lingering helper burns its core for that time after every run.
 */
#define GP_COPY_LINGER_NS 100000u
#define GP_COPY_LINGERERS 2
#define GP_COPY_CREW_MAX 16

typedef struct gp_copy_run {
    uint8_t *dst;
    const uint8_t *src;
    size_t len, piece, npieces;
    atomic_size_t next;          /* the next piece to claim */
    atomic_uchar *done;          /* per piece: copied */
    atomic_uchar small_done[8];  /* `done` for runs of up to 8 pieces: no allocation */
    int helpers;                 /* crew threads inside this run (under the crew's lock) */
    int listed;                  /* on the crew's list (under the crew's lock) */
    int started;
    unsigned flags;              /* GP_COPY_STREAMING */
    /* Optional: asked before piece k is copied, by whichever thread copies it; 0: the piece's
     * source never came (the run fails; the piece is not copied). */
    int (*ready)(void *arg, size_t k);
    void *ready_arg;
    atomic_int failed;
    struct gp_copy_run *next_run;
} gp_copy_run;

typedef struct gp_copy_crew {
    pthread_mutex_t lock;
    pthread_cond_t wake;         /* a run was listed, or the crew stops */
    pthread_cond_t left;         /* a helper left a run */
    gp_copy_run *head, *tail;    /* runs with pieces left to claim */
    atomic_uint posted;          /* bumped at each listing: what an idle helper spins on */
    atomic_int started_threads;  /* helpers count themselves in as they start (their rank) */
    pthread_t threads[GP_COPY_CREW_MAX];
    int nthreads, want, stopping, ready;
    pid_t pid;                   /* the process that started the threads (a fork leaves them behind) */
} gp_copy_crew;

/* `threads`: helper threads to start at first use (0: none; the callers copy alone). */
void gp_copy_crew_init(gp_copy_crew *cr, int threads);
void gp_copy_crew_stop(gp_copy_crew *cr);

/* memcpy with stores that bypass the caches, for a destination no core reads again soon
 * (bench/hostcopy_bench measures it beside memcpy). */
void gp_copy_streaming(uint8_t *dst, const uint8_t *src, size_t len);

/* A run's flags. GP_COPY_STREAMING: its pieces are copied with gp_copy_streaming, for a destination
 * only the GPU reads next (the pinned arena); a caller's own buffer is copied into with memcpy, since
 * the caller may well read it next (in place: its next input), from the cache. */
#define GP_COPY_STREAMING 1u
/* GP_COPY_NO_LINGER: the helpers that took part in the run go to sleep when it is done, without
 * watching for the next run (GP_COPY_LINGER_NS): for a run whose caller's next run is a whole GPU
 * round trip away and which is meant to spare the CPU (a registered caller's output, copied out
 * once its wave is back: batching/cuda/deliver.c), where lingering would burn that time on
 * GP_COPY_LINGERERS cores after every run. */
#define GP_COPY_NO_LINGER 2u

/* Start copying src[0..len) to dst in pieces of about `piece` bytes. 0: no memory for the run's
 * bookkeeping (nothing was copied; the caller copies itself). */
int gp_copy_start(gp_copy_crew *cr, gp_copy_run *run, uint8_t *dst, const uint8_t *src, size_t len, size_t piece,
                  unsigned flags);
/* The same for a source that fills piece by piece: ready(arg, k) is asked before piece k. */
int gp_copy_start_when(gp_copy_crew *cr, gp_copy_run *run, uint8_t *dst, const uint8_t *src, size_t len,
                       size_t piece, unsigned flags, int (*ready)(void *arg, size_t k), void *arg);
/* Piece k's bytes: [*off, *off + *len) of the run. */
void gp_copy_piece_range(const gp_copy_run *run, size_t k, size_t *off, size_t *len);
/* Until piece k is copied; the caller copies unclaimed pieces meanwhile. */
void gp_copy_wait_piece(gp_copy_run *run, size_t k);
/* Copy unclaimed pieces until none is left to claim (others may still be copying theirs). */
void gp_copy_help(gp_copy_run *run);
/* Until every piece is copied and no crew thread touches the run any more; then the run's memory
 * may go. 1: every piece was copied (a run's `ready` said yes to each). A run that was not started,
 * or finished already, answers 1. */
int gp_copy_finish(gp_copy_crew *cr, gp_copy_run *run);

#endif
