/*
 * expect.h -- the EXPECT check of the small unit tests: count a failure
 * and print where and why, then go on (so one run shows every failure).
 * Thread-safe.  The test returns `failures ? 1 : 0`.
 */
#ifndef XCOLL_TEST_EXPECT_H
#define XCOLL_TEST_EXPECT_H

#include <pthread.h>
#include <stdio.h>

static int failures;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            pthread_mutex_lock(&fail_mu);                                      \
            failures++;                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);               \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            pthread_mutex_unlock(&fail_mu);                                    \
        }                                                                      \
    } while (0)

#endif
