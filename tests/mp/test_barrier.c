/*
 * test_barrier.c -- the specification of xc_barrier and xc_ibarrier.
 *
 * A barrier returns on a rank only after every rank has entered it.  The
 * ranks of this test share one node, hence one CLOCK_MONOTONIC, so that is
 * checked directly: in round k rank k % size sleeps before entering; every
 * rank records when it entered and when it left, the entry times are
 * allgathered after the round, and each rank's exit must not precede any
 * rank's entry.  The same is checked for xc_ibarrier completed by polling
 * xc_request_test (done must not be reported early).  A burst of barriers
 * measures latency (printed, not asserted) and xc_comm_stats must count
 * every barrier.  With ranks on several nodes the clock checks are skipped
 * (said so on stdout) and only completion and counting are checked.
 */
#include "harness.h"

#include <stdio.h>
#include <time.h>

#define SLEEP_MS 5

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait for req by polling xc_request_test, counting the polls. */
static long poll_until_done(xc_request_t *req)
{
    long polls = 0;
    int done = 0;
    while (!done) {
        H_CHECK(H.comm, xc_request_test(req, &done));
        polls++;
    }
    return polls;
}

/* One round: the sleeper enters late; returns [entry, exit] times. */
static void round_trip(int round, int nonblocking, double *t_in, double *t_out)
{
    if (H.rank == round % H.size) sleep_ms(SLEEP_MS);
    *t_in = h_now();
    if (nonblocking) {
        xc_request_t *req = NULL;
        H_CHECK(H.comm, xc_ibarrier(H.comm, &req));
        poll_until_done(req);
        H_CHECK(H.comm, xc_request_wait(req)); /* again: same result */
        xc_request_free(req);
    } else {
        H_CHECK(H.comm, xc_barrier(H.comm));
    }
    *t_out = h_now();
    H.issued[XC_COLL_BARRIER]++;
}

static void check_ordering(int rounds, int nonblocking, int same_node)
{
    double *t_in_all = h_alloc(sizeof(double) * (size_t)H.size);
    for (int k = 0; k < rounds; k++) {
        double t_in, t_out;
        round_trip(k, nonblocking, &t_in, &t_out);
        H_CHECK(H.comm,
                xc_allgather(&t_in, t_in_all, 1, XC_FLOAT64, H.comm));
        H.issued[XC_COLL_ALLGATHER]++;
        if (!same_node) continue;
        for (int r = 0; r < H.size; r++)
            if (t_out < t_in_all[r])
                h_fail(__FILE__, __LINE__,
                       "%s round %d: rank %d left at %.6f s, before rank %d "
                       "entered at %.6f s (%.3f ms early)",
                       nonblocking ? "ibarrier" : "barrier", k, H.rank, t_out,
                       r, t_in_all[r], (t_in_all[r] - t_out) * 1e3);
    }
    h_free(t_in_all);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_barrier(NULL));

    int same_node = xc_comm_node_count(H.comm) == 1;
    if (!same_node && H.rank == 0)
        printf("ranks span %d nodes: skipping the clock-ordering checks\n",
               xc_comm_node_count(H.comm));
    int rounds = H.size * (H.full ? 4 : 1);
    check_ordering(rounds, 0, same_node);
    check_ordering(rounds, 1, same_node);

    /* Latency burst: many barriers back to back. */
    int burst = H.full ? 2000 : 200;
    double t0 = h_now();
    for (int i = 0; i < burst; i++) H_CHECK(H.comm, xc_barrier(H.comm));
    double us = (h_now() - t0) * 1e6 / burst;
    H.issued[XC_COLL_BARRIER] += (uint64_t)burst;
    if (H.rank == 0)
        printf("barrier latency on %d ranks: %.1f us (mean of %d)\n", H.size,
               us, burst);

    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    return h_finish();
}
