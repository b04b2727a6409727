/*
 * test_bucket_predict.c -- the tuner's model (src/train/bucket_tune.c,
 * xc__bk_comm_end) against schedules worked out by hand: four 1 MiB
 * gradients ready at 0, 10, 20, 30 ms, backward ending at 40 ms, all-reduce
 * cost alpha + bytes * ns_per_byte, buckets all-reduced one after another
 * (the step's prediction is max(40 ms, the end computed here)).
 *  - fast link (1 ms + 1 ns/B): every capacity ends before backward;
 *  - slow link (1 ms + 10 ns/B): 1 MiB buckets queue behind each other
 *    (ends 11.49, 22.97, 34.46, 45.94 ms); one big bucket after a 1 MiB
 *    first one starts at 30 ms and ends at 30 + 1 + 3 x 10.49 = 62.46 ms;
 *  - huge alpha (50 ms): fewer buckets win;
 *  - slowdown s while backward runs: 10 ms of work from 0 with backward
 *    ending at 20 ms takes 20 ms at s = 2, and ends at 25 ms at s = 4.
 * Standalone: exit 0 on success, 1 on failure, printing both values.
 */
#include "train/bucketer.h"

#include <math.h>
#include <stdio.h>

static int g_failures;

static void check_ms(const char *what, double got_ns, double want_ms)
{
    if (fabs(got_ns / 1e6 - want_ms) > 1e-6) {
        g_failures++;
        fprintf(stderr, "FAIL %s: predicted %.6f ms, expected %.6f ms\n", what, got_ns / 1e6,
                want_ms);
    }
}

int main(void)
{
    enum { N = 4 };
    const size_t MiB = 1 << 20;
    size_t counts[N] = {MiB / 4, MiB / 4, MiB / 4, MiB / 4};
    xc_dtype_t dt[N] = {XC_FLOAT32, XC_FLOAT32, XC_FLOAT32, XC_FLOAT32};
    int order[N] = {3, 2, 1, 0};
    uint64_t ready[N] = {30000000, 20000000, 10000000, 0}; /* gradient 3 first */
    const double m = (double)MiB;
    int nb = 0;
#define END(first, cap, alpha, nspb, s, nbp) \
    xc__bk_comm_end(N, counts, dt, order, ready, \
                    &(xc__bk_model_t){(alpha), (nspb), (s), 40000000, 0}, (first), (cap), (nbp))
#define STEP(first, cap, alpha, nspb, nbp) \
    (END(first, cap, alpha, nspb, 1, nbp) > 40e6 ? END(first, cap, alpha, nspb, 1, nbp) : 40e6)

    check_ms("fast, 1 MiB buckets",
             STEP(MiB, MiB, 1e6, 1.0, &nb), 40.0);
    if (nb != 4) g_failures++, fprintf(stderr, "FAIL: %d buckets, expected 4\n", nb);
    check_ms("fast, one bucket after the first",
             STEP(MiB, 4 * MiB, 1e6, 1.0, &nb), 40.0);
    if (nb != 2) g_failures++, fprintf(stderr, "FAIL: %d buckets, expected 2\n", nb);

    double c = 1.0 + 10.0 * m / 1e6; /* ms per 1 MiB bucket on the slow link */
    check_ms("slow, 1 MiB buckets queue",
             STEP(MiB, MiB, 1e6, 10.0, NULL), 4 * c);
    check_ms("slow, one big bucket",
             STEP(MiB, 4 * MiB, 1e6, 10.0, NULL),
             30.0 + 1.0 + 3 * 10.0 * m / 1e6);
    check_ms("slow, 2 MiB buckets",
             STEP(MiB, 2 * MiB, 1e6, 10.0, NULL),
             /* [3] 0..c; [2 1] ready 20: 20..20+1+2x10.49; [0] ready 30, after that */
             20.0 + 1.0 + 2 * 10.0 * m / 1e6 + c);

    /* Huge alpha: 4 buckets pay it 4 times, 2 buckets twice. */
    double four = STEP(MiB, MiB, 50e6, 1.0, NULL);
    double two = STEP(MiB, 4 * MiB, 50e6, 1.0, NULL);
    if (!(two < four)) {
        g_failures++;
        fprintf(stderr, "FAIL: with alpha 50 ms, 2 buckets (%.3f ms) should beat 4 (%.3f ms)\n",
                two / 1e6, four / 1e6);
    }
    /* Slowdown: gradient 3 alone (first bucket) ready at 0; 10 ms of work
     * (alpha 10 ms, no bytes). */
    int one[1] = {0};
    size_t c1[1] = {0};
    uint64_t r1[1] = {0};
    xc__bk_model_t s2 = {10e6, 0, 2, 20000000, 0}, s4 = {10e6, 0, 4, 20000000, 0},
                   late = {10e6, 0, 4, 20000000, 0};
    check_ms("slowdown 2", xc__bk_comm_end(1, c1, dt, one, r1, &s2, MiB, MiB, NULL), 20.0);
    check_ms("slowdown 4", xc__bk_comm_end(1, c1, dt, one, r1, &s4, MiB, MiB, NULL), 25.0);
    uint64_t r2[1] = {30000000}; /* ready after backward: full speed */
    check_ms("after backward", xc__bk_comm_end(1, c1, dt, one, r2, &late, MiB, MiB, NULL), 40.0);
    /* Split: one 2 MiB gradient ready at 0 with 1 MiB buckets is two
     * all-reduces (alpha twice), without split one. */
    size_t c2[1] = {MiB / 2};
    xc__bk_model_t whole = {1e6, 1.0, 1, 0, 0}, cut = {1e6, 1.0, 1, 0, 1};
    int nb2 = 0;
    check_ms("one 2 MiB gradient", xc__bk_comm_end(1, c2, dt, one, r1, &whole, MiB, MiB, &nb2),
             1.0 + 2 * m / 1e6);
    if (nb2 != 1) g_failures++, fprintf(stderr, "FAIL: %d buckets, expected 1\n", nb2);
    check_ms("split in two", xc__bk_comm_end(1, c2, dt, one, r1, &cut, MiB, MiB, &nb2),
             2.0 + 2 * m / 1e6);
    if (nb2 != 2) g_failures++, fprintf(stderr, "FAIL: %d buckets, expected 2\n", nb2);
    /* The forward tail (xc__bk_tail_choose), worked out by hand: a 25-unit
     * gradient in five pieces (complete at 0, needed 10 into the next
     * forward) and two small buckets complete at 18 and 20 (= end of
     * backward), needed at 5 and 0; one unit per ns.  In order: the pieces
     * run 0-25, the small ones 25-29, the forward waits until 29 for the
     * first and ends at 39: 9 exposed.  Tail from 4: pieces 0-20, the small
     * ones 20-24, the last piece 24-29, the forward 22, 27, 32: 2 exposed
     * (from 3: 4; from 5: 7; from 0: every bucket waits for the last to
     * be complete). */
    {
        double by[7] = {5, 5, 5, 5, 5, 2, 2};
        uint64_t rd[7] = {0, 0, 0, 0, 0, 18, 20}, nd[7] = {10, 10, 10, 10, 10, 5, 0};
        uint64_t bw[1] = {20};
        double e = -1;
        int t = xc__bk_tail_choose(7, by, 1, rd, nd, bw, 1.0, &e);
        if (t != 4 || e != 2.0)
            g_failures++,
                fprintf(stderr, "FAIL: tail from %d (exposed %g), expected 4 (2)\n", t, e);
        /* A fast link: all done by the end of backward but the last small
         * bucket's own 0.2: no tail. */
        t = xc__bk_tail_choose(7, by, 1, rd, nd, bw, 0.1, &e);
        if (t != 7 || fabs(e - 0.2) > 1e-9)
            g_failures++, fprintf(stderr, "FAIL: tail from %d (exposed %g), expected 7 (0.2)\n",
                                  t, e);
        /* Two steps, the second with backward ending at 40 (everything in
         * order is done by then; a tail from 4 would hold the last piece
         * until the small buckets at 38/40: 2 exposed there too, as in
         * order): the sum over the steps decides, 4 against 11. */
        uint64_t rd2[14] = {0, 0, 0, 0, 0, 18, 20, 0, 0, 0, 0, 0, 38, 40};
        uint64_t nd2[14] = {10, 10, 10, 10, 10, 5, 0, 10, 10, 10, 10, 10, 5, 0};
        uint64_t bw2[2] = {20, 40};
        t = xc__bk_tail_choose(7, by, 2, rd2, nd2, bw2, 1.0, &e);
        if (t != 4 || e != 4.0)
            g_failures++, fprintf(stderr, "FAIL: two steps: tail from %d (exposed %g), expected "
                                          "4 (4)\n", t, e);
    }
    if (g_failures) {
        fprintf(stderr, "test_bucket_predict: %d failure(s)\n", g_failures);
        return 1;
    }
    printf("test_bucket_predict: ok\n");
    return 0;
}
