/*
 * test_allreduce.c -- the specification of xc_allreduce.
 *
 * For every dtype x op (bitwise ops for integers only) x count, in place
 * (sendbuf == recvbuf) and out of place, every rank checks:
 *  - recvbuf[i] is the reduction over all ranks of their inputs at i
 *    (integers exact and wrapping, floats within the documented bound);
 *  - floating-point results are bit-identical on every rank (a rank-order
 *    dependent summation would break data-parallel replicas);
 *  - out of place, sendbuf is unchanged; nothing is written past recvbuf;
 *  - buffers one element off malloc's alignment work (odd counts use them),
 *    and buffers reused call after call with new contents give new results.
 * Invalid arguments (a bitwise op on floats, an unknown dtype or op, buffers
 * that partly overlap) fail locally with XC_ERR_INVALID and leave the
 * communicator usable.  xc_comm_stats counts exactly the completed calls.
 */
#include "harness.h"

#include <stdlib.h>

static void run_case(xc_dtype_t dt, xc_op_t op, size_t count, int inplace)
{
    h_case_t c = h_case("allreduce", dt, op, count, inplace, -1);
    h_announce(&c);
    size_t esz = xc_dtype_size(dt), bytes = count * esz;
    /* Odd counts use buffers one element past malloc's alignment (a bucket
     * view into a larger tensor), even counts aligned ones. */
    size_t shift = count % 2 ? esz : 0;
    char *send_base = h_alloc(bytes + shift), *send = send_base + shift;
    char *recv_base = inplace ? NULL : h_alloc(bytes + shift);
    char *recv = inplace ? send : recv_base + shift;
    h_fill(&c, send, count, H.rank, 0);

    H_CHECK(H.comm, xc_allreduce(send, recv, count, dt, op, H.comm));
    H.issued[XC_COLL_ALLREDUCE]++;

    h_check_reduced(&c, recv, count, 0, "recvbuf");
    h_check_guard(&c, recv, bytes, "recvbuf");
    if (!inplace) {
        h_check_copy(&c, send, count, H.rank, 0, "sendbuf (must not change)");
        h_check_guard(&c, send, bytes, "sendbuf");
    }
    /* Integer results are exact, so only floats can differ across ranks. */
    if (h_is_float(dt)) {
        h_check_identical(&c, H.comm, recv, bytes);
        H.issued[XC_COLL_ALLGATHER]++;
    }
    h_free(recv_base);
    h_free(send_base);
}

/* The same buffers reused with fresh contents every iteration, as a
 * training loop does: nothing may be cached from one call to the next. */
static void run_reuse(size_t count, int iters)
{
    float *send = h_alloc(count * 4), *recv = h_alloc(count * 4);
    for (int it = 0; it < iters; it++) {
        h_case_t c = h_case("allreduce (reused buffers)", XC_FLOAT32,
                            it % 2 ? XC_MAX : XC_SUM, count, 0, -1);
        h_fill(&c, send, count, H.rank, 0);
        H_CHECK(H.comm, xc_allreduce(send, recv, count, XC_FLOAT32, c.op,
                                     H.comm));
        H.issued[XC_COLL_ALLREDUCE]++;
        h_check_reduced(&c, recv, count, 0, "recvbuf");
    }
    h_free(send);
    h_free(recv);
}

static void run_rejects(void)
{
    float a[8] = {0}, b[8] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce(a, b, 4, XC_FLOAT32, XC_BAND, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce(a, b, 4, XC_FLOAT64, XC_BXOR, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce(a, b, 4, XC_DTYPE_COUNT, XC_SUM, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce(a, b, 4, XC_FLOAT32, XC_OP_COUNT, H.comm));
    /* recvbuf overlaps sendbuf without being equal to it. */
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce(a, a + 1, 4, XC_FLOAT32, XC_SUM, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce(a + 2, a, 4, XC_FLOAT32, XC_SUM, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce(a, b, 4, XC_FLOAT32, XC_SUM, NULL));
    H_EQ_INT("xc_comm_status after rejected calls", xc_comm_status(H.comm),
             XC_OK);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    run_rejects();
    for (h_cell_t c = {0}; h_next_cell(&c, 1);)
        for (int inplace = 0; inplace <= 1; inplace++)
            run_case(c.dt, c.op, c.count, inplace);
    run_reuse(1000, 10);
    run_reuse(100000, H.full ? 20 : 4);
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    return h_finish();
}
