/* SPDX-License-Identifier: Apache-2.0 */
/* Test builds: a stand-in for a CUDA stream, a FIFO of work that one host thread runs in order. */
#include <pthread.h>
#include <stdlib.h>

#include "batching/fake_stream.h"

#define FAKE_STREAMS_MAX 64

typedef struct fake_item {
    gp_fake_work *fn;
    void *arg;
    struct fake_item *next;
} fake_item;

struct gp_fake_stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;         /* an item queued, one run, hold changed, stop */
    fake_item *head, *tail;
    int running;                 /* the thread is running an item taken off the list */
    int hold, stop;
    pthread_t thread;
};

/* The live streams, so that a handle gpuprov is given can be checked as cuStreamGetCtx checks one. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static gp_fake_stream *registry[FAKE_STREAMS_MAX];

static void *stream_main(void *arg)
{
    gp_fake_stream *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        fake_item *it;

        while (!s->stop && (s->hold || s->head == NULL))
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->head == NULL)
            break;   /* stopping, everything run */
        it = s->head;
        s->head = it->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->running = 1;
        pthread_mutex_unlock(&s->lock);
        it->fn(it->arg);
        free(it);
        pthread_mutex_lock(&s->lock);
        s->running = 0;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

gp_fake_stream *gp_fake_stream_find(uint64_t handle)
{
    gp_fake_stream *found = NULL;

    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < FAKE_STREAMS_MAX && found == NULL; i++)
        if (registry[i] != NULL && (uint64_t)(uintptr_t)registry[i] == handle)
            found = registry[i];
    pthread_mutex_unlock(&registry_lock);
    return found;
}

int gp_fake_stream_enqueue(gp_fake_stream *s, gp_fake_work *fn, void *arg)
{
    fake_item *it = malloc(sizeof(*it));

    if (it == NULL)
        return 0;
    it->fn = fn;
    it->arg = arg;
    it->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail != NULL)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return 1;
}

void *gpuprov_test_stream_new(void)
{
    gp_fake_stream *s = calloc(1, sizeof(*s));
    int slot = -1;

    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < FAKE_STREAMS_MAX && slot < 0; i++)
        if (registry[i] == NULL)
            slot = i;
    if (slot >= 0 && pthread_create(&s->thread, NULL, stream_main, s) == 0) {
        registry[slot] = s;
        pthread_mutex_unlock(&registry_lock);
        return s;
    }
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
    return NULL;
}

void gpuprov_test_stream_sync(void *vs)
{
    gp_fake_stream *s = vs;

    pthread_mutex_lock(&s->lock);
    while (s->head != NULL || s->running)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

void gpuprov_test_stream_hold(void *vs, int hold)
{
    gp_fake_stream *s = vs;

    pthread_mutex_lock(&s->lock);
    s->hold = hold != 0;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int gpuprov_test_stream_enqueue(void *vs, void (*fn)(void *), void *arg)
{
    return gp_fake_stream_enqueue(vs, fn, arg);
}

/* As cudaStreamDestroy: the work queued before runs to its end first (a hold is lifted). */
void gpuprov_test_stream_free(void *vs)
{
    gp_fake_stream *s = vs;

    if (s == NULL)
        return;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < FAKE_STREAMS_MAX; i++)
        if (registry[i] == s)
            registry[i] = NULL;
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}
