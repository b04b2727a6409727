/*
 * test_alltoall.c -- the specification of xc_alltoall.
 *
 * Block j of rank i's sendbuf (count elements) lands, bitwise, as block i of
 * rank j's recvbuf; in place is sendbuf == recvbuf.  Each element is
 * generated from (sender, its index in the sender's sendbuf), so a block
 * delivered to the wrong rank or the wrong slot is caught.  For every dtype
 * x count, in place and out of place: every block is checked, sendbuf is
 * unchanged out of place, nothing is written past either buffer, and
 * xc_comm_stats counts exactly the calls.
 */
#include "harness.h"

#include <stdio.h>

static void run_case(xc_dtype_t dt, size_t count, int inplace)
{
    h_case_t c = h_case("alltoall", dt, H_COPY, count, inplace, -1);
    h_announce(&c);
    size_t esz = xc_dtype_size(dt);
    size_t total = count * (size_t)H.size;
    char *send = h_alloc(total * esz);
    char *recv = inplace ? send : h_alloc(total * esz);
    h_fill(&c, send, total, H.rank, 0);

    H_CHECK(H.comm, xc_alltoall(send, recv, count, dt, H.comm));
    H.issued[XC_COLL_ALLTOALL]++;

    for (int i = 0; i < H.size; i++) {
        char what[64];
        snprintf(what, sizeof what, "recvbuf block %d", i);
        /* Rank i sent me its block number H.rank. */
        h_check_copy(&c, recv + (size_t)i * count * esz, count, i,
                     (size_t)H.rank * count, what);
    }
    h_check_guard(&c, recv, total * esz, "recvbuf");
    if (!inplace) {
        h_check_copy(&c, send, total, H.rank, 0, "sendbuf (must not change)");
        h_check_guard(&c, send, total * esz, "sendbuf");
        h_free(recv);
    }
    h_free(send);
}

static void run_rejects(void)
{
    int32_t a[64] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_alltoall(a, a + 32, 1, XC_DTYPE_COUNT, H.comm));
    /* recvbuf overlaps sendbuf without being equal to it. */
    if (H.size <= 16)
        H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                    xc_alltoall(a, a + 1, 2, XC_INT32, H.comm));
    H_EQ_INT("xc_comm_status after rejected calls", xc_comm_status(H.comm),
             XC_OK);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    run_rejects();
    for (h_cell_t c = {0}; h_next_cell(&c, 0);)
        for (int inplace = 0; inplace <= 1; inplace++)
            run_case(c.dt, c.count, inplace);
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    return h_finish();
}
