/*
 * test_invalid.c -- invalid arguments (2 ranks).
 *
 * Every malformed call -- NULL communicator or buffer with count > 0, a
 * dtype/op out of range, a bitwise op on floats, root or peer out of range,
 * a negative tag, partly overlapping buffers that are not the allowed
 * in-place spelling, a NULL request pointer -- returns XC_ERR_INVALID, and
 * both xc_last_error() and xc_comm_last_error() name the offending argument.
 *
 * Invalid-argument checks happen before anything is sent: rank 0 makes all
 * the bad calls while rank 1 makes none, then both run a valid allreduce;
 * had any bad call reached the wire, that allreduce would mismatch or hang.
 * Then the roles swap.  An invalid-argument error must not poison the
 * communicator (xc_comm_status stays XC_OK).
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 8

/* Check one call: XC_ERR_INVALID, and the detail names `what` (any of the
 * '|'-separated alternatives) in both the thread's and the comm's error. */
static int n_checked;

static void expect_invalid(xc_result_t rc, const char *call, const char *what,
                           const xc_comm_t *comm)
{
    n_checked++;
    if (rc != XC_ERR_INVALID) {
        xt_fail(__FILE__, __LINE__, "%s: got %s, want XC_ERR_INVALID "
                "(last error \"%s\")", call, xc_err_name(rc), xc_last_error());
        return;
    }
    char alts[128];
    snprintf(alts, sizeof alts, "%s", what);
    const char *msgs[2] = {xc_last_error(),
                           comm ? xc_comm_last_error(comm) : NULL};
    const char *names[2] = {"xc_last_error()", "xc_comm_last_error()"};
    for (int m = 0; m < 2; m++) {
        if (!msgs[m]) continue;
        int found = 0;
        char tmp[128];
        memcpy(tmp, alts, sizeof tmp);
        for (char *s = strtok(tmp, "|"); s; s = strtok(NULL, "|"))
            found |= xt_has(msgs[m], s);
        if (!found)
            xt_fail(__FILE__, __LINE__, "%s: %s = \"%s\" does not name %s",
                    call, names[m], msgs[m], what);
    }
}

#define BAD(call, what, comm) expect_invalid((call), #call, what, comm)

static void bad_calls(xc_comm_t *comm, int rank, int size)
{
    float f[4 * N], g[4 * N];
    int32_t i[4 * N];
    size_t counts[4] = {N, N, N, N}, displs[4] = {0, N, 2 * N, 3 * N};
    xc_request_t *req = NULL;
    memset(f, 0, sizeof f);
    memset(g, 0, sizeof g);
    memset(i, 0, sizeof i);

    /* No communicator: only the thread's detail can name it. */
    BAD(xc_allreduce(f, g, N, XC_FLOAT32, XC_SUM, NULL), "comm", NULL);
    BAD(xc_barrier(NULL), "comm", NULL);
    BAD(xc_send(f, N, XC_FLOAT32, 0, 0, NULL), "comm", NULL);
    BAD(xc_iallreduce(f, g, N, XC_FLOAT32, XC_SUM, NULL, &req), "comm", NULL);

    /* NULL buffers with count > 0. */
    BAD(xc_allreduce(NULL, g, N, XC_FLOAT32, XC_SUM, comm), "sendbuf", comm);
    BAD(xc_allreduce(f, NULL, N, XC_FLOAT32, XC_SUM, comm), "recvbuf", comm);
    BAD(xc_allgather(NULL, g, 1, XC_FLOAT32, comm), "sendbuf", comm);
    BAD(xc_allgather(f, NULL, 1, XC_FLOAT32, comm), "recvbuf", comm);
    BAD(xc_reduce_scatter(NULL, g, 1, XC_FLOAT32, XC_SUM, comm), "sendbuf",
        comm);
    BAD(xc_bcast(NULL, N, XC_FLOAT32, 0, comm), "buf", comm);
    BAD(xc_alltoall(f, NULL, 1, XC_FLOAT32, comm), "recvbuf", comm);
    BAD(xc_send(NULL, N, XC_FLOAT32, 1 - rank, 0, comm), "buf", comm);
    BAD(xc_recv(NULL, N, XC_FLOAT32, 1 - rank, 0, comm), "buf", comm);
    BAD(xc_alltoallv(f, NULL, displs, g, counts, displs, XC_FLOAT32, comm),
        "sendcounts|counts", comm);
    BAD(xc_alltoallv(f, counts, displs, g, counts, NULL, XC_FLOAT32, comm),
        "rdispls|displs", comm);
    {
        /* this rank's own block: 4 elements sent to itself, 1 expected */
        size_t sc[4] = {N, N, N, N}, rc[4] = {N, N, N, N};
        sc[rank] = 4;
        rc[rank] = 1;
        BAD(xc_alltoallv(f, sc, displs, g, rc, displs, XC_FLOAT32, comm),
            "sendcounts|recvcounts", comm);
    }

    /* dtype / op out of range; bitwise ops on floating types. */
    BAD(xc_allreduce(f, g, N, XC_DTYPE_COUNT, XC_SUM, comm), "dtype", comm);
    BAD(xc_allreduce(f, g, N, (xc_dtype_t)-1, XC_SUM, comm), "dtype", comm);
    BAD(xc_bcast(f, N, (xc_dtype_t)99, 0, comm), "dtype", comm);
    BAD(xc_send(f, N, XC_DTYPE_COUNT, 1 - rank, 0, comm), "dtype", comm);
    BAD(xc_allreduce(i, i, N, XC_INT32, XC_OP_COUNT, comm), "op", comm);
    BAD(xc_allreduce(i, i, N, XC_INT32, (xc_op_t)-3, comm), "op", comm);
    BAD(xc_reduce_scatter(f, g, 1, XC_INT32, (xc_op_t)77, comm), "op", comm);
    BAD(xc_allreduce(f, g, N, XC_FLOAT32, XC_BAND, comm), "band|bitwise", comm);
    BAD(xc_allreduce(f, g, N / 2, XC_FLOAT64, XC_BOR, comm), "bor|bitwise",
        comm);
    BAD(xc_allreduce(f, g, N, XC_FLOAT16, XC_BXOR, comm), "bxor|bitwise",
        comm);
    BAD(xc_reduce(f, g, N, XC_BFLOAT16, XC_BAND, 0, comm), "band|bitwise",
        comm);

    /* root out of range. */
    BAD(xc_bcast(f, N, XC_FLOAT32, size, comm), "root", comm);
    BAD(xc_bcast(f, N, XC_FLOAT32, -1, comm), "root", comm);
    BAD(xc_reduce(f, g, N, XC_FLOAT32, XC_SUM, size + 5, comm), "root", comm);
    BAD(xc_ireduce(f, g, N, XC_FLOAT32, XC_SUM, -2, comm, &req), "root", comm);

    /* peer out of range, negative tag. */
    BAD(xc_send(f, N, XC_FLOAT32, size, 0, comm), "peer", comm);
    BAD(xc_recv(f, N, XC_FLOAT32, -2, 0, comm), "peer", comm);
    BAD(xc_send(f, N, XC_FLOAT32, XC_ANY_SOURCE, 0, comm), "peer", comm);
    BAD(xc_isend(f, N, XC_FLOAT32, size + 100, 0, comm, &req), "peer", comm);
    BAD(xc_irecv(f, N, XC_FLOAT32, -7, 0, comm, &req), "peer", comm);
    BAD(xc_send(f, N, XC_FLOAT32, 1 - rank, -1, comm), "tag", comm);
    BAD(xc_irecv(f, N, XC_FLOAT32, 1 - rank, -5, comm, &req), "tag", comm);

    /* Partly overlapping buffers that are not the in-place spelling. */
    BAD(xc_allreduce(f, f + 1, N, XC_FLOAT32, XC_SUM, comm),
        "overlap|recvbuf|sendbuf", comm);
    BAD(xc_allreduce(f + 3, f, N, XC_FLOAT32, XC_SUM, comm),
        "overlap|recvbuf|sendbuf", comm);
    /* allgather in place is sendbuf == recvbuf + rank*count: +1 is not it. */
    BAD(xc_allgather(g + rank * 2 + 1, g, 2, XC_FLOAT32, comm),
        "overlap|recvbuf|sendbuf", comm);
    /* reduce_scatter in place is recvbuf == sendbuf + rank*count. */
    BAD(xc_reduce_scatter(g, g + rank * 2 + 1, 2, XC_FLOAT32, XC_SUM, comm),
        "overlap|recvbuf|sendbuf", comm);
    BAD(xc_alltoall(g, g + 1, 2, XC_FLOAT32, comm), "overlap|recvbuf|sendbuf",
        comm);
    /* alltoallv has no in-place form at all. */
    BAD(xc_alltoallv(g, counts, displs, g, counts, displs, XC_FLOAT32, comm),
        "place|overlap|recvbuf|sendbuf", comm);

    /* NULL request pointer. */
    BAD(xc_iallreduce(f, g, N, XC_FLOAT32, XC_SUM, comm, NULL), "req", comm);
    BAD(xc_ibarrier(comm, NULL), "req", comm);
    BAD(xc_isend(f, N, XC_FLOAT32, 1 - rank, 0, comm, NULL), "req", comm);
    BAD(xc_ibcast(f, N, XC_FLOAT32, 0, comm, NULL), "req", comm);

    /* Split with nowhere to put the child: checked before its collectives. */
    BAD(xc_comm_split(comm, 0, 0, NULL, NULL), "child", comm);

    /* Creation with impossible rank/size: rejected before connecting. */
    xc_comm_t *c2 = NULL;
    BAD(xc_comm_init(&c2, 2, 2, "127.0.0.1:1", NULL), "rank", NULL);
    BAD(xc_comm_init(&c2, 0, 0, "127.0.0.1:1", NULL), "size|rank", NULL);
    BAD(xc_comm_init(&c2, -1, 2, "127.0.0.1:1", NULL), "rank", NULL);
    BAD(xc_comm_init(NULL, 1, 2, "127.0.0.1:1", NULL), "comm", NULL);
    BAD(xc_comm_init(&c2, 1, 2, NULL, NULL), "addr", NULL);

    XT_CHECK_RC(xc_comm_status(comm), XC_OK);
    xt_log("%d invalid calls checked", n_checked);
}

/* A valid in-place allreduce after the bad calls: both ranks agree. */
static void good_allreduce(xc_comm_t *comm, int rank, int size, int round)
{
    int32_t v[N];
    for (int k = 0; k < N; k++) v[k] = (rank + 1) * 100 + k + round;
    XT_CHECK_RC(xc_allreduce(v, v, N, XC_INT32, XC_SUM, comm), XC_OK);
    for (int k = 0; k < N; k++) {
        int32_t want = 0;
        for (int r = 0; r < size; r++) want += (r + 1) * 100 + k + round;
        if (!XT_CHECK_INT(v[k], ==, want)) break;
    }
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    XT_CHECK_RC(xc_comm_destroy(NULL), XC_OK);
    XT_CHECK_RC(xc_comm_abort(NULL), XC_OK);
    xc_request_free(NULL); /* a no-op */
    xc_comm_t *comm = xt_comm_world(10000);
    if (!comm) return 1;

    if (rank == 0) bad_calls(comm, rank, size);
    good_allreduce(comm, rank, size, 0);
    if (rank == 1) bad_calls(comm, rank, size);
    good_allreduce(comm, rank, size, 1);

    /* Zero elements with NULL buffers is a valid (empty) collective. */
    XT_CHECK_RC(xc_allreduce(NULL, NULL, 0, XC_FLOAT32, XC_SUM, comm), XC_OK);

    /* Point-to-point still works too. */
    int32_t x = 1000 + rank, y = -1;
    XT_CHECK_RC(xc_group_start(), XC_OK);
    XT_CHECK_RC(xc_send(&x, 1, XC_INT32, 1 - rank, 3, comm), XC_OK);
    XT_CHECK_RC(xc_recv(&y, 1, XC_INT32, 1 - rank, 3, comm), XC_OK);
    XT_CHECK_RC(xc_group_end(), XC_OK);
    XT_CHECK_INT(y, ==, 1000 + (1 - rank));

    XT_CHECK_RC(xc_comm_status(comm), XC_OK);
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    return xt_result();
}

int main(int argc, char **argv)
{
    (void)argc;
    xt_init(argv[0], NULL);
    xt_job_t job;
    if (xt_job_start(&job, 2, rank_main, NULL, -1, 30) != 0) return 1;
    return xt_job_finish(&job, 40);
}
