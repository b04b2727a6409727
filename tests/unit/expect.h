/*
 * expect.h -- the checks of the small unit tests: a failure is counted in
 * `failures` and printed with where and why (thread-safe).  The test's
 * main returns `failures ? 1 : 0`.
 *
 * EXPECT(cond, fmt, ...) always goes on.  FAIL and the EXPECT_* below go on
 * too, unless the test defines EXPECT_RETURN before including this file:
 * then they return 1 from the (int) test function, so one broken step does
 * not cascade into the next ones.
 */
#ifndef XCOLL_TEST_EXPECT_H
#define XCOLL_TEST_EXPECT_H

#include "xcoll.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static int failures;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

#define EXPECT_NOTE_(...)                                                      \
    do {                                                                       \
        pthread_mutex_lock(&fail_mu);                                          \
        failures++;                                                            \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                   \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        pthread_mutex_unlock(&fail_mu);                                        \
    } while (0)

#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) EXPECT_NOTE_(__VA_ARGS__);                                \
    } while (0)

#ifdef EXPECT_RETURN
#define EXPECT_THEN_ return 1
#else
#define EXPECT_THEN_ (void)0
#endif

#define FAIL(...)                                                              \
    do {                                                                       \
        EXPECT_NOTE_(__VA_ARGS__);                                             \
        EXPECT_THEN_;                                                          \
    } while (0)

#define EXPECT_TRUE(c)                                                         \
    do {                                                                       \
        if (!(c)) FAIL("expected %s", #c);                                     \
    } while (0)

#define EXPECT_EQ(a, b)                                                        \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) FAIL("%s == %s: %lld != %lld", #a, #b, a_, b_);          \
    } while (0)

#define EXPECT_RC(call, want)                                                  \
    do {                                                                       \
        xc_result_t rc_ = (xc_result_t)(call), w_ = (xc_result_t)(want);       \
        if (rc_ != w_)                                                         \
            FAIL("%s returned %d (%s), want %s; detail: %s", #call, (int)rc_,  \
                 xc_err_name(rc_), xc_err_name(w_), xc_last_error());          \
    } while (0)

#define EXPECT_OK(call) EXPECT_RC(call, XC_OK)

#define EXPECT_CONTAINS(hay, needle)                                           \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!strstr(h_, n_)) FAIL("\"%s\" does not contain \"%s\"", h_, n_);   \
    } while (0)

#define EXPECT_STREQ(a, b)                                                     \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (strcmp(a_, b_) != 0) FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, a_, b_); \
    } while (0)

#endif
