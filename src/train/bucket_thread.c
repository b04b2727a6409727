/*
 * bucket_thread.c -- the bucketer's launch thread.
 *
 * Why: issuing a non-blocking collective takes the communicator's engine
 * lock, which the progress thread holds while it advances the collective
 * before it (a whole shared-memory chunk pipeline can run in one turn).  A
 * backward pass that issued its buckets itself would sit in that lock --
 * measured: 15-18 ms of a 30 ms backward (docs/training.md) -- and the
 * communication would stop overlapping anything.  So xc_bucketer_mark_ready
 * only publishes "buckets [0, upto) may go" and returns; this thread issues
 * them, in order, and is the one that waits for the lock.
 *
 * Protocol (all under `mu`): the caller raises `posted` (never lowers it
 * within a step); the thread launches bucket `launched` while launched <
 * posted, releasing the mutex around the launch itself, and broadcasts
 * `cv` after each; finish waits for launched == posted (xc_bucketer_wait
 * for launched past its bucket); between steps the
 * caller resets both to 0 while the thread is idle (launched == posted).
 * The thread touches the layout and bucket state only for buckets in
 * [launched, posted), which the caller no longer changes in that step.
 */
#include "bucketer.h"

#include <pthread.h>
#include <stdlib.h>

struct xc__bk_thread {
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int posted, launched, stop;
};

static void *main_loop(void *arg)
{
    xc_bucketer_t *b = arg;
    xc__bk_thread_t *t = b->thread;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && t->launched == t->posted) pthread_cond_wait(&t->cv, &t->mu);
        if (t->launched == t->posted) break; /* stop, and nothing left */
        int k = b->seq[t->launched];
        pthread_mutex_unlock(&t->mu);
        xc__bk_launch(b, k);
        pthread_mutex_lock(&t->mu);
        t->launched++;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

xc_result_t xc__bk_thread_start(xc_bucketer_t *b)
{
    xc__bk_thread_t *t = calloc(1, sizeof *t);
    if (!t) return xc__bk_fail(b, XC_ERR_NOMEM, "bucketer: out of memory for the launch thread");
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    b->thread = t;
    int e = pthread_create(&t->thr, NULL, main_loop, b);
    if (e) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(t);
        b->thread = NULL;
        return xc__bk_fail(b, XC_ERR_SYSTEM, "bucketer: pthread_create of the launch thread "
                                             "failed (error %d)", e);
    }
    return XC_OK;
}

void xc__bk_thread_post(xc_bucketer_t *b, int upto)
{
    xc__bk_thread_t *t = b->thread;
    pthread_mutex_lock(&t->mu);
    if (upto > t->posted) {
        t->posted = upto;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
}

void xc__bk_thread_drain(xc_bucketer_t *b, int upto)
{
    xc__bk_thread_t *t = b->thread;
    pthread_mutex_lock(&t->mu);
    while (t->launched < upto && t->launched < t->posted) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void xc__bk_thread_reset(xc_bucketer_t *b)
{
    xc__bk_thread_t *t = b->thread;
    pthread_mutex_lock(&t->mu);
    t->posted = t->launched = 0;
    pthread_mutex_unlock(&t->mu);
}

void xc__bk_thread_stop(xc_bucketer_t *b)
{
    xc__bk_thread_t *t = b->thread;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1; /* buckets already posted are still launched (peers expect them) */
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thr, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    b->thread = NULL;
}
