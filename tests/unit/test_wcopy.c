/*
 * test_wcopy.c -- a slot's chunk written ordinarily or non-temporally
 * (src/transport/wcopy.c): both ways copy exactly the bytes asked at
 * every length and misalignment (no byte before or after touched); the
 * choice between them -- each way timed XC__WCOPY_TRIES times (the least
 * of them its cost), then the cheaper but for a
 * run of the other every XC__WCOPY_EXPLORE operations, per size class;
 * on a crowded node a sample the mean of a run's timed operations;
 * forced modes; small operations never timed; a timed operation's cost
 * recorded only after the settling operations of its way; a rooted
 * operation between two ranks: its writer alternating until its reader
 * publishes a preference, then following it, the reader timing each way
 * after its settling operations.
 */
#include "expect.h"
#include "transport/wcopy.h"
#include "guarded_copy.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* xc__wcopy as guarded_copy calls it (`nt`: its way). */
static void wcopy_fn(void *dst, const void *src, size_t n, int nt) { xc__wcopy(dst, src, n, nt); }

static void copies(void)
{
    static const size_t lens[] = {0,    1,    63,   64,   65,    127,         4095,
                                  4096, 4097, 8191, 8192, 65549, 300000 + 17};
    static const size_t dmis[] = {0, 1, 17, 63};
    static const size_t smis[] = {0, 5};
    for (int nt = 0; nt < 2; nt++)
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
            for (size_t j = 0; j < sizeof dmis / sizeof *dmis; j++)
                for (size_t k = 0; k < sizeof smis / sizeof *smis; k++)
                    guarded_copy(nt ? "non-temporal" : "ordinary", wcopy_fn, nt, lens[i], dmis[j],
                                 smis[k]);
}

static const size_t BIG = XC__WCOPY_OP_MIN; /* size class 0 */

/* What an operation takes between its start and its end, a few
 * microseconds: the time-stamp counter of this VM may read the same value
 * twice in a row, and an operation that took no ticks is not filed (it
 * failed 1 run in 30 with begin and end back to back). */
static void work(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 5000);
}

/* One operation of `bytes` through begin and end: its way. */
static int op(xc__wcopy_t *w, size_t bytes, uint32_t *t0)
{
    int nt = xc__wcopy_begin(w, bytes, 1, t0);
    work();
    xc__wcopy_end(w, bytes, bytes, nt, *t0);
    return nt;
}

static void choice(void)
{
    uint32_t t0;
    /* Small operations: ordinary, never timed, whatever the mode. */
    for (int mode = -1; mode <= 1; mode++) {
        xc__wcopy_t w = {.mode = mode};
        int nt = xc__wcopy_begin(&w, BIG - 1, 1, &t0);
        EXPECT(nt == 0 && t0 == 0, "mode %d, %zu B: way %d, t0 %u", mode, BIG - 1, nt, t0);
    }
#if defined(__x86_64__)
    /* Forced modes take their way and time nothing. */
    for (int mode = 0; mode <= 1; mode++) {
        xc__wcopy_t w = {.mode = mode};
        for (int i = 0; i < 200; i++) {
            int nt = op(&w, BIG, &t0);
            EXPECT(nt == mode && t0 == 0, "forced %d: op %d way %d t0 %u", mode, i, nt, t0);
        }
        EXPECT(w.own[0].cost[0] == 0 && w.own[0].cost[1] == 0, "forced %d: a cost recorded",
               mode);
    }
    /* Measured: the ordinary way until it is timed (after the settling
     * operations), then the non-temporal one until it is, then the
     * cheaper. */
    xc__wcopy_t w = {.mode = -1};
    for (int i = 0; i < XC__WCOPY_SETTLE; i++) {
        EXPECT(op(&w, BIG, &t0) == 0 && t0 == 0, "settling op %d: ordinary, untimed", i);
    }
    for (int i = 0; i < XC__WCOPY_TRIES; i++)
        EXPECT(op(&w, BIG, &t0) == 0 && t0 != 0, "timed op %d: ordinary", i);
    EXPECT(w.own[0].cost[0] > 0 && w.own[0].timed[0] == XC__WCOPY_TRIES,
           "the ordinary way's cost recorded");
    for (int i = 0; i < XC__WCOPY_SETTLE; i++)
        EXPECT(op(&w, BIG, &t0) == 1 && t0 == 0, "non-temporal settling op %d", i);
    for (int i = 0; i < XC__WCOPY_TRIES; i++)
        EXPECT(op(&w, BIG, &t0) == 1 && t0 != 0, "timed non-temporal op %d", i);
    EXPECT(w.own[0].cost[1] > 0 && w.own[0].timed[1] == XC__WCOPY_TRIES,
           "the non-temporal way's cost recorded");
    /* A way's first tries keep the least: a slow first one does not stick. */
    {
        xc__wcopy_t f = {.mode = -1};
        uint32_t slow = (uint32_t)__rdtsc() - 4000000u, now = 0;
        xc__wcopy_end(&f, BIG, BIG, 0, slow);
        double first = f.own[0].cost[0];
        xc__wcopy_end(&f, BIG, BIG, 0, (now = (uint32_t)__rdtsc()) ? now : 1);
        EXPECT(f.own[0].cost[0] < first / 10, "the first tries' least: %g after %g",
               f.own[0].cost[0], first);
    }
    /* Another size class has its own costs: still untried there. */
    EXPECT(xc__wcopy_pick(&w, 2 * BIG) == 0, "class 1 starts ordinary");
    EXPECT(w.own[1].cost[0] == 0 && w.own[1].cost[1] == 0, "class 1 untouched");
    /* The cheaper way, but for XC__WCOPY_RUN of every XC__WCOPY_EXPLORE. */
    for (int best = 0; best < 2; best++) {
        xc__wcopy_t v = {.mode = -1};
        for (int i = 0; i < 3 * XC__WCOPY_EXPLORE; i++) {
            v.own[0].cost[best] = 100, v.own[0].cost[!best] = 1000; /* what end() learnt is reset */
            v.own[0].timed[0] = v.own[0].timed[1] = XC__WCOPY_TRIES;
            int nt = xc__wcopy_begin(&v, BIG, 1, &t0);
            int explore = (v.own[0].ops - 1) % XC__WCOPY_EXPLORE < XC__WCOPY_RUN;
            EXPECT(nt == (explore ? !best : best), "best %d, op %d: way %d", best, i, nt);
        }
        EXPECT(v.nt_ops == (uint64_t)(best ? 3 * (XC__WCOPY_EXPLORE - XC__WCOPY_RUN)
                                           : 3 * XC__WCOPY_RUN),
               "best %d: %llu non-temporal operations", best, (unsigned long long)v.nt_ops);
    }
    /* A crowded node's lead: non-temporal stores only where they measured
     * XC__WCOPY_CROWDED_LEAD times cheaper (outside the exploring runs). */
    for (int c1 = 60; c1 <= 100; c1 += 10) {
        xc__wcopy_t v = {.mode = -1, .crowded = 1};
        v.own[0].cost[0] = 100, v.own[0].cost[1] = c1;
        v.own[0].timed[0] = v.own[0].timed[1] = XC__WCOPY_TRIES;
        v.own[0].ops = XC__WCOPY_RUN; /* past the run of the other way */
        int want = c1 * XC__WCOPY_CROWDED_LEAD < 100, uncrowded = c1 < 100;
        EXPECT(xc__wcopy_pick(&v, BIG) == want, "crowded, costs 100 / %d: way %d", c1, !want);
        v.crowded = 0;
        EXPECT(xc__wcopy_pick(&v, BIG) == uncrowded, "uncrowded, costs 100 / %d", c1);
    }
    /* A crowded node's sample: the mean of XC__WCOPY_CROWDED_MEAN
     * operations in a row of one way, fast and slow in turn (ticks: an
     * operation's t0 that long ago), not the fast half. */
    {
        xc__wcopy_t v = {.mode = -1, .crowded = 1};
        /* far apart, so that a preempted test moves nothing */
        const uint32_t fast = 100000000u, slow = 300000000u;
        for (int i = 0; i < XC__WCOPY_CROWDED_MEAN; i++) {
            EXPECT(v.own[0].timed[0] == 0 && v.own[0].cost[0] == 0,
                   "crowded: a sample after %d of %d operations", i, XC__WCOPY_CROWDED_MEAN);
            uint32_t d = i % 2 ? slow : fast, t = (uint32_t)__rdtsc() - d;
            xc__wcopy_end(&v, BIG, BIG, 0, t ? t : 1);
        }
        double mean = (fast + slow) / 2.0 * 1024.0 / BIG, got = v.own[0].cost[0];
        EXPECT(v.own[0].timed[0] == 1 && got >= mean && got < 1.25 * mean,
               "crowded: the sample %g, the operations' mean %g", got, mean);
        /* uncrowded: every operation a sample, the first tries' least */
        xc__wcopy_t u = {.mode = -1};
        for (int i = 0; i < 2; i++) {
            uint32_t t = (uint32_t)__rdtsc() - (i % 2 ? slow : fast);
            xc__wcopy_end(&u, BIG, BIG, 0, t ? t : 1);
        }
        EXPECT(u.own[0].timed[0] == 2 && u.own[0].cost[0] < mean, "uncrowded: cost %g",
               u.own[0].cost[0]);
        /* a sample's operations are of one run of its way: a change of way
         * starts the new way's sum afresh */
        xc__wcopy_t r = {.mode = -1, .crowded = 1};
        r.own[0].timed[1] = XC__WCOPY_TRIES; /* non-temporal timed: ordinary next */
        r.own[0].way = 1, r.own[0].nacc[0] = 2, r.own[0].acc[0] = 5;
        EXPECT(xc__wcopy_begin(&r, BIG, 1, &t0) == 0 && r.own[0].nacc[0] == 0 &&
                   r.own[0].acc[0] == 0,
               "a change of way kept %d operations of the last run", r.own[0].nacc[0]);
    }
    /* A rooted operation is not measured: ordinary, untimed, uncounted,
     * unless the mode is forced. */
    xc__wcopy_t r = {.mode = -1};
    r.own[0].cost[0] = 1000, r.own[0].cost[1] = 10;
    EXPECT(xc__wcopy_begin(&r, BIG, 0, &t0) == 0 && t0 == 0 && r.own[0].ops == 0,
           "a rooted operation measured");
    r.mode = 1;
    EXPECT(xc__wcopy_begin(&r, BIG, 0, &t0) == 1 && t0 == 0, "forced: a rooted operation's way");
    /* A rooted operation between two ranks: the writer alternates runs
     * while its reader has no preference (ordinary after
     * XC__WCOPY_ALTERNATE), then follows it but for a run of the other
     * every XC__WCOPY_EXPLORE. */
    xc__wcopy_t wr = {.mode = -1};
    for (int i = 0; i < XC__WCOPY_ALTERNATE + 10; i++) {
        int want = i < XC__WCOPY_ALTERNATE ? i / XC__WCOPY_RUN % 2 : 0;
        int nt = xc__wcopy_rooted_way(&wr, BIG, XC__WCOPY_PREF_NONE);
        EXPECT(nt == want, "rooted writer, no preference, op %d: way %d", i, nt);
    }
    for (int pref = 1; pref <= 2; pref++) {
        xc__wcopy_t v = {.mode = -1};
        for (int i = 0; i < 2 * XC__WCOPY_EXPLORE; i++) {
            int nt = xc__wcopy_rooted_way(&v, BIG, pref);
            int explore = i % XC__WCOPY_EXPLORE < XC__WCOPY_RUN;
            EXPECT(nt == (explore ? pref == 1 : pref == 2), "preference %d, op %d: way %d", pref,
                   i, nt);
        }
        v.mode = 0;
        EXPECT(xc__wcopy_rooted_way(&v, BIG, pref) == 0, "forced ordinary: the preference taken");
    }
    EXPECT(xc__wcopy_rooted_way(&wr, BIG - 1, 2) == 0,
           "a small rooted operation written non-temporally");
    /* Its reader: nothing published until both ways were timed, each after
     * XC__WCOPY_SETTLE operations of it; then the cheaper. */
    xc__wcopy_t rd = {.mode = -1};
    int pref = -1;
    for (int way = 0; way < 2; way++)
        for (int i = 0; i < XC__WCOPY_RUN; i++) {
            xc__wcopy_read_begin(&rd, BIG, &t0);
            EXPECT(t0 != 0, "a reader's operation not timed");
            work();
            pref = xc__wcopy_read_end(&rd, BIG, way, t0);
            int timed = rd.rooted[0].cost[way] > 0;
            EXPECT(timed == (i >= XC__WCOPY_SETTLE), "reader, way %d op %d: timed %d", way, i,
                   timed);
            if (way == 0) EXPECT(pref == XC__WCOPY_PREF_NONE, "a preference before both ways");
        }
    EXPECT(pref == (rd.rooted[0].cost[1] < rd.rooted[0].cost[0] ? 2 : 1),
           "the reader's preference %d", pref);
    rd.rooted[0].cost[0] = 10, rd.rooted[0].cost[1] = 1e9;
    EXPECT(xc__wcopy_read_end(&rd, BIG, 0, 0) == 1, "untimed end: the cheaper way's preference");
    xc__wcopy_t rf = {.mode = 1};
    xc__wcopy_read_begin(&rf, BIG, &t0);
    EXPECT(t0 == 0, "a forced reader timed its operation");
    xc__wcopy_read_begin(&rd, BIG - 1, &t0);
    EXPECT(t0 == 0, "a small operation's reader timed it");
    /* A cost follows its samples down quickly and up slowly, a sample
     * capped at twice the cost. */
    xc__wcopy_t c = {.mode = -1};
    c.own[0].cost[0] = 1000, c.own[0].timed[0] = XC__WCOPY_TRIES;
    xc__wcopy_end(&c, BIG, BIG, 0, 1); /* t0 = 1: some time ago */
    EXPECT(c.own[0].cost[0] > 1000 && c.own[0].cost[0] <= 1250, "a slow sample moves the cost %g",
           c.own[0].cost[0]);
    /* An operation that staged less than the minimum teaches nothing. */
    double before = c.own[0].cost[1];
    xc__wcopy_end(&c, BIG, BIG - 1, 1, 1);
    EXPECT(c.own[0].cost[1] == before, "a rank that staged little recorded a cost");
#endif
}

int main(void)
{
    copies();
    choice();
    if (failures) fprintf(stderr, "test_wcopy: %d failures\n", failures);
    else printf("test_wcopy: ok\n");
    return failures ? 1 : 0;
}
