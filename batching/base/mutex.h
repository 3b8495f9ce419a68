/* SPDX-License-Identifier: Apache-2.0 */
/* Mutexes for the short critical sections that every thread's requests take (queue, staging pool). */
#ifndef GP_MUTEX_H
#define GP_MUTEX_H

#include <pthread.h>

/*
 * glibc's default mutex sleeps in the kernel (futex) the moment it finds the lock taken, and its
 * unlock then has to wake the sleeper with a second system call. The queue's and the staging pool's
 * locks are held for tens of nanoseconds but taken by every request of every thread: with many
 * threads of async jobs, futex waits and wakes under pthread_mutex_lock/unlock took much of the
 * process's CPU time. The adaptive kind spins a
 * bounded while first, which is what a lock held this briefly wants.
 */
static inline int gp_mutex_init(pthread_mutex_t *m)
{
#if defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
    pthread_mutexattr_t attr;
    int rc;

    if (pthread_mutexattr_init(&attr) != 0)
        return pthread_mutex_init(m, NULL);
    (void)pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    rc = pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
    return rc;
#else
    return pthread_mutex_init(m, NULL);
#endif
}

#endif
