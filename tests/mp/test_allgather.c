/*
 * test_allgather.c -- the specification of xc_allgather.
 *
 * recvbuf (size * sendcount elements) is the concatenation, in rank order,
 * of every rank's sendbuf; in place is spelled sendbuf == recvbuf +
 * rank * sendcount.  Data movement is bitwise: inputs are random bit
 * patterns (for floats too, NaN payloads included) and must arrive
 * unchanged.  For every dtype x count, in place and out of place: every
 * block is checked against the sender's regenerated input, sendbuf is
 * unchanged out of place, nothing is written past either buffer, and
 * xc_comm_stats counts exactly the calls.
 */
#include "harness.h"

#include <stdio.h>

static void run_case(xc_dtype_t dt, size_t count, int inplace)
{
    h_case_t c = h_case("allgather", dt, H_COPY, count, inplace, -1);
    h_announce(&c);
    size_t bytes = count * xc_dtype_size(dt);
    char *recv = h_alloc(bytes * (size_t)H.size);
    char *send = inplace ? recv + bytes * (size_t)H.rank : h_alloc(bytes);
    h_fill(&c, send, count, H.rank, 0);

    H_CHECK(H.comm, xc_allgather(send, recv, count, dt, H.comm));
    H.issued[XC_COLL_ALLGATHER]++;

    for (int r = 0; r < H.size; r++) {
        char what[64];
        snprintf(what, sizeof what, "recvbuf block %d", r);
        h_check_copy(&c, recv + bytes * (size_t)r, count, r, 0, what);
    }
    h_check_guard(&c, recv, bytes * (size_t)H.size, "recvbuf");
    if (!inplace) {
        h_check_copy(&c, send, count, H.rank, 0, "sendbuf (must not change)");
        h_check_guard(&c, send, bytes, "sendbuf");
        h_free(send);
    }
    h_free(recv);
}

static void run_rejects(void)
{
    int32_t a[64] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allgather(a, a + 8, 4, XC_DTYPE_COUNT, H.comm));
    /* sendbuf inside recvbuf but not at this rank's block. */
    if (H.size <= 16)
        H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                    xc_allgather(a + 1, a, 2, XC_INT32, H.comm));
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
