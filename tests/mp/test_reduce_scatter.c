/*
 * test_reduce_scatter.c -- the specification of xc_reduce_scatter.
 *
 * sendbuf holds size * recvcount elements; rank r receives in recvbuf the
 * reduction over all ranks of slice r (elements r*recvcount ...).  In place
 * is spelled recvbuf == sendbuf + rank * recvcount; the other slices of
 * sendbuf are then scratch and not checked.  For every dtype x op x count,
 * in place and out of place, every rank checks its slice against the serial
 * reference, that out of place sendbuf is unchanged, and that nothing is
 * written past either buffer.  xc_comm_stats counts exactly the calls.
 */
#include "harness.h"

static void run_case(xc_dtype_t dt, xc_op_t op, size_t recvcount,
                     int inplace)
{
    h_case_t c = h_case("reduce_scatter", dt, op, recvcount, inplace, -1);
    h_announce(&c);
    size_t esz = xc_dtype_size(dt);
    size_t total = recvcount * (size_t)H.size;
    size_t mine = recvcount * (size_t)H.rank; /* index of my slice */
    char *send = h_alloc(total * esz);
    char *recv = inplace ? send + mine * esz : h_alloc(recvcount * esz);
    h_fill(&c, send, total, H.rank, 0);

    H_CHECK(H.comm,
            xc_reduce_scatter(send, recv, recvcount, dt, op, H.comm));
    H.issued[XC_COLL_REDUCE_SCATTER]++;

    h_check_reduced(&c, recv, recvcount, mine, "recvbuf");
    h_check_guard(&c, send, total * esz, "sendbuf");
    if (!inplace) {
        h_check_guard(&c, recv, recvcount * esz, "recvbuf");
        h_check_copy(&c, send, total, H.rank, 0, "sendbuf (must not change)");
        h_free(recv);
    }
    h_free(send);
}

static void run_rejects(void)
{
    float a[64] = {0}, b[64] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_reduce_scatter(a, b, 1, XC_FLOAT32, XC_BOR, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_reduce_scatter(a, b, 1, XC_DTYPE_COUNT, XC_SUM, H.comm));
    /* recvbuf inside sendbuf but not at this rank's slice: partial overlap
     * (a + 1 is never rank*recvcount for recvcount 2). */
    if (H.size <= 16)
        H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                    xc_reduce_scatter(a, a + 1, 2, XC_FLOAT32, XC_SUM, H.comm));
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
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    return h_finish();
}
