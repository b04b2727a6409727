/*
 * test_express_all.c -- small blocking all-reduces, reduce-scatters,
 * all-gathers, all-to-alls and barriers on shared memory run on the
 * express path (src/algo/shm_coll.c xc__shm_express_all): whole when
 * every peer is there, begun there and finished by the engine when one
 * comes later.
 *
 * 1. In step: each collective back to back at sizes in the flagged lines
 *    and in a slot (8 B to 40 KiB), in place and not, every result checked
 *    against its serial reference.  Every call has a last rank to arrive,
 *    which finds the others there: the express path ran at least a
 *    quarter of all calls whole (xc_stats_t.express_ops, summed over
 *    ranks) -- unless the shared-memory algorithms are not in use.
 * 2. Late peers: before every third call one rank in turn sleeps 300 us,
 *    so the others begin that call and the engine finishes it: results
 *    right, and at least half of those late calls resumed on some rank
 *    (express_resumed, summed).
 * 3. Mixed: a blocking call that a late peer makes begin and resume, at
 *    once followed by a non-blocking call (never express) with a blocking
 *    one while it is pending, a rooted express call (broadcast) and a
 *    blocking call in place, each with values of its own: results right,
 *    so what a call began never leaks into another one.
 * A disagreement that begins on the express path (a count that differs)
 * is in test_mismatch's matrix.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const size_t counts[] = {2, 75, 512, 4000}; /* int32 per block */
#define NCOUNTS (sizeof counts / sizeof counts[0])
#define MAXC 4000

static int32_t *sbuf, *rbuf;

static void stats(uint64_t *ops, uint64_t *resumed)
{
    xc_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    H_CHECK(H.comm, xc_comm_stats(H.comm, &s));
    *ops = s.express_ops;
    *resumed = s.express_resumed;
}

static uint64_t sum_ranks(uint64_t v)
{
    uint64_t out;
    H_CHECK(H.comm, xc_allreduce(&v, &out, 1, XC_UINT64, XC_SUM, H.comm));
    return out;
}

static int32_t val(int rank, size_t i, int it) { return (int32_t)(rank * 100003 + (int)i * 7 + it); }

static void expect(const char *what, size_t n, int it, size_t i, int32_t got, int32_t want)
{
    h_checked();
    if (got != want)
        h_fail(__FILE__, __LINE__, "%s of %zu x int32, call %d: [%zu] = %d, expected %d", what, n,
               it, i, got, want);
}

/* Call `it` of collective `c` (0 all-reduce, 1 reduce-scatter, 2
 * all-gather, 3 all-to-all, 4 barrier) with n elements a block, in place
 * when `inpl`, checked. */
static void one(int c, size_t n, int inpl, int it)
{
    int L = H.size, r = H.rank;
    switch (c) {
    case 0: {
        for (size_t i = 0; i < n; i++) sbuf[i] = val(r, i, it);
        int32_t *out = inpl ? sbuf : rbuf;
        H_CHECK(H.comm, xc_allreduce(sbuf, out, n, XC_INT32, XC_SUM, H.comm));
        for (size_t i = 0; i < n; i++) {
            int32_t want = 0;
            for (int j = 0; j < L; j++) want += val(j, i, it);
            expect("all-reduce", n, it, i, out[i], want);
        }
        break;
    }
    case 1: {
        for (size_t i = 0; i < n * (size_t)L; i++) sbuf[i] = val(r, i, it);
        int32_t *out = inpl ? sbuf + (size_t)r * n : rbuf;
        H_CHECK(H.comm, xc_reduce_scatter(sbuf, out, n, XC_INT32, XC_SUM, H.comm));
        for (size_t i = 0; i < n; i++) {
            int32_t want = 0;
            for (int j = 0; j < L; j++) want += val(j, (size_t)r * n + i, it);
            expect("reduce-scatter", n, it, i, out[i], want);
        }
        break;
    }
    case 2: {
        int32_t *in = inpl ? rbuf + (size_t)r * n : sbuf;
        for (size_t i = 0; i < n; i++) in[i] = val(r, i, it);
        H_CHECK(H.comm, xc_allgather(in, rbuf, n, XC_INT32, H.comm));
        for (int j = 0; j < L; j++)
            for (size_t i = 0; i < n; i++)
                expect("all-gather", n, it, (size_t)j * n + i, rbuf[(size_t)j * n + i],
                       val(j, i, it));
        break;
    }
    case 3: {
        /* Block b of rank r goes to rank b. */
        for (int b = 0; b < L; b++)
            for (size_t i = 0; i < n; i++) sbuf[(size_t)b * n + i] = val(r, (size_t)b * n + i, it);
        int32_t *out = inpl ? sbuf : rbuf;
        H_CHECK(H.comm, xc_alltoall(sbuf, out, n, XC_INT32, H.comm));
        for (int j = 0; j < L; j++)
            for (size_t i = 0; i < n; i++)
                expect("all-to-all", n, it, (size_t)j * n + i, out[(size_t)j * n + i],
                       val(j, (size_t)r * n + i, it));
        break;
    }
    default:
        H_CHECK(H.comm, xc_barrier(H.comm));
        h_checked();
        break;
    }
}

/* A count summed over ranks must reach `floor`. */
static void at_least(uint64_t got, uint64_t floor, const char *what, int of, const char *unit)
{
    h_checked();
    if (got < floor)
        h_fail(__FILE__, __LINE__, "%llu %s (summed over ranks) in %d %s, expected >= %llu",
               (unsigned long long)got, what, of, unit, (unsigned long long)floor);
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    int reps = H.full ? 200 : 40;
    sbuf = h_alloc(sizeof(int32_t) * MAXC * (size_t)H.size);
    rbuf = h_alloc(sizeof(int32_t) * MAXC * (size_t)H.size);
    int shm = xc_comm_node_count(H.comm) == 1;
    const char *e = getenv("XCOLL_SHM");
    if (e && !strcmp(e, "0")) shm = 0;

    /* 1. In step. */
    uint64_t o0, r0, o1, r1, o2, r2;
    stats(&o0, &r0);
    int calls = 0, it = 0;
    for (int c = 0; c < 5; c++)
        for (size_t k = 0; k < NCOUNTS; k++)
            for (int inpl = 0; inpl < 2; inpl++)
                for (int i = 0; i < reps; i++, calls++) one(c, counts[k], inpl, it++);
    stats(&o1, &r1);
    uint64_t whole = sum_ranks(o1 - o0);
    if (shm) at_least(whole, (uint64_t)calls / 4, "calls in step ran whole on the express path",
                      calls, "calls");

    /* 2. Late peers. */
    int late = 0;
    stats(&o1, &r1);
    for (int c = 0; c < 5; c++)
        for (size_t k = 0; k < NCOUNTS; k++)
            for (int i = 0; i < 12; i++, it++) {
                if (i % 3 == 0) {
                    if (H.rank == (it / 3) % H.size) nap_us(300);
                    late++;
                }
                one(c, counts[k], i & 1, it);
            }
    stats(&o2, &r2);
    uint64_t resumed = sum_ranks(r2 - r1);
    if (shm) at_least(resumed, (uint64_t)late / 2, "calls resumed", late, "late starts");

    /* 3. Mixed: a blocking call (begun and resumed when a peer is late),
     * then at once a non-blocking one with a blocking call while it is
     * pending (neither express), a rooted express call, and a blocking one
     * in place -- each with values of its own. */
    int32_t *nin = h_alloc(sizeof(int32_t) * 64), *nout = h_alloc(sizeof(int32_t) * 64);
    for (int i = 0; i < reps; i++) {
        if (i % 4 == 0 && H.rank == (i / 4) % H.size) nap_us(200);
        one(i % 5, counts[i % 3], 0, it++);
        int nb = it++;
        for (int j = 0; j < 64; j++) nin[j] = val(H.rank, (size_t)j, nb);
        xc_request_t *req;
        H_CHECK(H.comm, xc_iallreduce(nin, nout, 64, XC_INT32, XC_MAX, H.comm, &req));
        one(i % 4, counts[i % 2], 0, it++);
        H_CHECK(H.comm, xc_request_wait(req));
        xc_request_free(req);
        for (int j = 0; j < 64; j++)
            expect("non-blocking all-reduce", 64, nb, (size_t)j, nout[j],
                   val(H.size - 1, (size_t)j, nb));
        int64_t v = H.rank == i % H.size ? it : -1;
        H_CHECK(H.comm, xc_bcast(&v, 1, XC_INT64, i % H.size, H.comm));
        expect("broadcast", 1, it, 0, (int32_t)v, it);
        it++;
        one((i + 1) % 5, counts[(i + 1) % 3], 1, it++);
    }
    if (H.rank == 0)
        printf("express: %llu of %d calls in step whole, %llu resumed after %d late starts "
               "(summed over ranks)%s\n",
               (unsigned long long)whole, calls, (unsigned long long)resumed, late,
               shm ? "" : " (no shared memory: correctness only)");
    h_free(nin);
    h_free(nout);
    h_free(sbuf);
    h_free(rbuf);
    return h_finish();
}
