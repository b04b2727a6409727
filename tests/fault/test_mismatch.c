/*
 * test_mismatch.c -- ranks that issue different operations get
 * XC_ERR_MISMATCH, not a hang, a crash or corrupted memory.
 *
 * Usage: test_mismatch SCENARIO, one of
 *   count  4 ranks allreduce; rank 2 passes count 1001 instead of 1000
 *   dtype  4 ranks allreduce; rank 3 passes int32 instead of fp32
 *   op     4 ranks allreduce; rank 1 passes max instead of sum
 *   root   4 ranks bcast; rank 3 passes root 1 instead of 0.  Ranks whose
 *          part of the bcast is over before anyone can see the difference
 *          may return XC_OK (with root 0's data); their next call must then
 *          fail with XC_ERR_MISMATCH within the same few seconds.
 *   bcast_cma  2 ranks bcast of 640 KiB (single copy -- on 2 ranks from
 *          the measured floor, xc__shm_bcast_cma_min, at most 512 KiB --,
 *          cooperative: XCOLL_SHM_COOP=1, the root writes into the
 *          reader); rank 1 passes a sixteenth of the count (40 KiB, below
 *          XCOLL_SHM_CMA_MIN_KB, so it stages instead): the root must not
 *          write into it, and nothing past rank 1's 40 KiB changes
 *   lines  2 ranks allreduce of a few elements (shared memory's flagged
 *          lines, shm.h): rank 1 passes count 23 (92 bytes, two lines)
 *          instead of 11 (44 bytes, one line) -- rank 0 finds a line
 *          that is not there, rank 1 a description that differs
 *   lines_dtype  2 ranks allreduce of 10 elements, rank 1 in int32: the
 *          same lines, a different description hash
 *   coll   4 ranks; rank 2 calls allgather while the others allreduce
 *   p2p    2 ranks; rank 1 receives 50 elements of a 100-element send
 *   a2a_inplace  2 ranks all-to-all, rank 1 in place (sendbuf == recvbuf),
 *          rank 0 not: on shared memory the two take different paths
 *          (before 2026-12-06 one rank returned XC_OK with stale data)
 *   child  as count, on a child of xc_comm_split: the parent is not
 *          poisoned and its next allreduce is right
 *
 * Expected on every rank (p2p: on the receiver; the sender's communicator
 * is poisoned too): XC_ERR_MISMATCH within a few seconds although the
 * deadline is 20 s, xc_comm_last_error() mentions both descriptions, and
 * every later call on the poisoned communicator fails fast with the same
 * code.  Ranks keep their communicator until all have checked (an
 * out-of-band barrier), so a peer's destroy cannot turn the error into
 * XC_ERR_PEER_LOST.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 1000
#define DEADLINE_MS 20000
#define PROMPT_S 5.0

typedef struct scenario {
    const char *name;
    int size;
    int (*run)(xc_comm_t *comm, int rank, int size); /* returns xc rc */
    const char *want_a, *want_a_alt; /* words the message must mention */
    const char *want_b, *want_b_alt;
} scenario_t;

static float fbuf[4 * (COUNT + 8)], gbuf[4 * (COUNT + 8)];

static void fill(int rank)
{
    for (size_t k = 0; k < sizeof fbuf / sizeof fbuf[0]; k++)
        fbuf[k] = (float)(rank + 1);
}

static int run_count(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    size_t n = rank == 2 ? COUNT + 1 : COUNT;
    return xc_allreduce(fbuf, gbuf, n, XC_FLOAT32, XC_SUM, comm);
}

static int run_lines(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    return xc_allreduce(fbuf, gbuf, rank == 1 ? 23 : 11, XC_FLOAT32, XC_SUM, comm);
}

static int run_lines_dtype(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    return xc_allreduce(fbuf, gbuf, 10, rank == 1 ? XC_INT32 : XC_FLOAT32, XC_SUM, comm);
}

static int run_dtype(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    return xc_allreduce(fbuf, gbuf, COUNT, rank == 3 ? XC_INT32 : XC_FLOAT32,
                        XC_SUM, comm);
}

static int run_op(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    return xc_allreduce(fbuf, gbuf, COUNT, XC_FLOAT32,
                        rank == 1 ? XC_MAX : XC_SUM, comm);
}

static int run_root(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    return xc_bcast(fbuf, COUNT, XC_FLOAT32, rank == 3 ? 1 : 0, comm);
}

#define BIGC 163840 /* 640 KiB of fp32 */
static float big[BIGC + 4096];

static int run_bcast_cma(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) big[k] = rank ? 7.0f : 1.0f;
    int rc = xc_bcast(big, rank ? BIGC / 16 : BIGC, XC_FLOAT32, 0, comm);
    if (rank)
        for (size_t k = BIGC / 16; k < sizeof big / sizeof big[0]; k++)
            if (!XT_CHECK_DBL(big[k], ==, 7.0)) break;
    return rc;
}

static int run_coll(xc_comm_t *comm, int rank, int size)
{
    if (rank == 2)
        return xc_allgather(fbuf, gbuf, COUNT / (size_t)size, XC_FLOAT32,
                            comm);
    return xc_allreduce(fbuf, gbuf, COUNT, XC_FLOAT32, XC_SUM, comm);
}

/* All-to-all in place on rank 1 only (sendbuf == recvbuf). */
static int run_a2a_inplace(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    return xc_alltoall(fbuf, rank == 1 ? fbuf : gbuf, 500, XC_FLOAT32, comm);
}

static int run_p2p(xc_comm_t *comm, int rank, int size)
{
    (void)size;
    if (rank == 0) {
        /* The send may complete (its buffer is reusable) before the
         * receiver notices; the sender must then learn of the mismatch on
         * its next operation. */
        int rc = xc_send(fbuf, 100, XC_FLOAT32, 1, 7, comm);
        if (rc != XC_OK && rc != XC_ERR_MISMATCH) return rc;
        xt_log("send returned %s", xc_err_name(rc));
        /* Never matched by rank 1: must fail with the poison, not time out. */
        return xc_recv(gbuf, 1, XC_FLOAT32, 1, 8, comm);
    }
    return xc_recv(gbuf, 50, XC_FLOAT32, 0, 7, comm);
}

static const scenario_t scenarios[] = {
    {"count", 4, run_count, "1000", "4000", "1001", "4004"},
    /* NULL: the library's own name (xc_dtype_name, xc_op_name, ...). */
    {"dtype", 4, run_dtype, NULL, "float", NULL, "int32"},
    {"op", 4, run_op, NULL, "sum", NULL, "max"},
    {"root", 4, run_root, "root", "root", NULL, "broadcast"},
    {"bcast_cma", 2, run_bcast_cma, "163840", "655360", "10240", "40960"},
    {"coll", 4, run_coll, NULL, "all_gather", NULL, "all_reduce"},
    {"p2p", 2, run_p2p, "100", "400", "50", "200"},
    {"child", 4, run_count, "1000", "4000", "1001", "4004"},
    {"lines", 2, run_lines, "11 elements", "44 B", "23 elements", "92 B"},
    {"lines_dtype", 2, run_lines_dtype, NULL, "float", NULL, "int32"},
    {"a2a_inplace", 2, run_a2a_inplace, "in place", "in place", "alltoall", "alltoall"},
};

static const scenario_t *cur;

/* The library's names for what the scenario varies (both sides). */
static void names(const char **a, const char **b)
{
    if (strcmp(cur->name, "dtype") == 0 || strcmp(cur->name, "lines_dtype") == 0) {
        *a = xc_dtype_name(XC_FLOAT32);
        *b = xc_dtype_name(XC_INT32);
    } else if (strcmp(cur->name, "op") == 0) {
        *a = xc_op_name(XC_SUM);
        *b = xc_op_name(XC_MAX);
    } else if (strcmp(cur->name, "root") == 0) {
        *b = xc_coll_name(XC_COLL_BCAST);
    } else if (strcmp(cur->name, "coll") == 0) {
        *a = xc_coll_name(XC_COLL_ALLGATHER);
        *b = xc_coll_name(XC_COLL_ALLREDUCE);
    }
}

static void check_mentions(const char *msg, const char *a, const char *alt)
{
    if (!xt_has(msg, a) && !xt_has(msg, alt))
        xt_fail(__FILE__, __LINE__, "xc_comm_last_error does not mention "
                "\"%s\" (or \"%s\"): \"%s\"", a, alt, msg);
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    xc_comm_t *world = xt_comm_world(-1), *comm = world;
    if (!world) return 1;
    if (strcmp(cur->name, "child") == 0)
        XT_REQUIRE_OK(xc_comm_split(world, 7, rank, &comm, NULL));
    fill(rank);
    /* A correct operation first, so connections are up and the mismatch
     * is caught on an established communicator.  The out-of-band barrier
     * makes sure every rank has finished it: a poison that arrives while a
     * rank is still completing it would (rightly) fail it too. */
    XT_REQUIRE_OK(xc_barrier(comm));
    xt_sync(1, size, 30);

    double t = xt_now();
    int rc = cur->run(comm, rank, size);
    double dt = xt_now() - t;
    const char *msg = xc_comm_last_error(comm);
    xt_log("got %s after %.3fs: \"%s\"", xc_err_name(rc), dt, msg);
    if (rc == XC_OK && strcmp(cur->name, "root") == 0 && rank != 3) {
        /* A bcast rank whose part (receiving root 0's data, forwarding it)
         * is over before any rank sees the other root cannot know yet.
         * Its data must be root 0's, and the news must reach it: its next
         * call fails with XC_ERR_MISMATCH, promptly. */
        for (int k = 0; k < COUNT; k++)
            if (!XT_CHECK_DBL(fbuf[k], ==, 1.0)) break;
        t = xt_now();
        rc = xc_barrier(comm);
        dt = xt_now() - t;
        msg = xc_comm_last_error(comm);
        xt_log("bcast was complete here; the next barrier got %s after "
               "%.3fs: \"%s\"", xc_err_name(rc), dt, msg);
    }
    XT_CHECK_RC(rc, XC_ERR_MISMATCH);
    XT_CHECK_DBL(dt, <, PROMPT_S);
    /* p2p: only the receiver saw both descriptions first-hand. */
    int saw_both = strcmp(cur->name, "p2p") != 0 || rank == 1;
    if (rc == XC_ERR_MISMATCH && saw_both) {
        const char *a = cur->want_a, *b = cur->want_b;
        names(&a, &b);
        check_mentions(msg, a, cur->want_a_alt);
        check_mentions(msg, b, cur->want_b_alt);
        XT_CHECK_READABLE(msg);
    }
    XT_CHECK_RC(xc_comm_status(comm), XC_ERR_MISMATCH);

    /* Poisoned: later calls fail fast with the same code. */
    t = xt_now();
    XT_CHECK_RC(xc_allreduce(fbuf, gbuf, COUNT, XC_FLOAT32, XC_SUM, comm),
                XC_ERR_MISMATCH);
    xc_request_t *req = NULL;
    rc = xc_ibarrier(comm, &req);
    if (rc == XC_OK) {
        rc = xc_request_wait(req);
        xc_request_free(req);
    }
    XT_CHECK_RC(rc, XC_ERR_MISMATCH);
    XT_CHECK_RC(xc_send(fbuf, 1, XC_FLOAT32, (rank + 1) % size, 1, comm),
                XC_ERR_MISMATCH);
    XT_CHECK_DBL(xt_now() - t, <, 0.5);

    xt_sync(0, size, 30);
    if (comm != world) {
        /* The parent is untouched by its child's poison. */
        XT_CHECK_RC(xc_comm_status(world), XC_OK);
        int32_t v[64];
        for (int k = 0; k < 64; k++) v[k] = rank + k;
        XT_CHECK_RC(xc_allreduce(v, v, 64, XC_INT32, XC_SUM, world), XC_OK);
        for (int k = 0; k < 64; k++)
            if (!XT_CHECK_INT(v[k], ==, size * (size - 1) / 2 + size * k))
                break;
        t = xt_now();
        xc_comm_destroy(comm);
        XT_CHECK_DBL(xt_now() - t, <, PROMPT_S);
        XT_CHECK_RC(xc_barrier(world), XC_OK);
    }
    t = xt_now();
    xc_comm_destroy(world);
    XT_CHECK_DBL(xt_now() - t, <, PROMPT_S);
    return xt_result();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s count|dtype|op|root|bcast_cma|coll|p2p|child|lines|lines_dtype|"
                "a2a_inplace\n",
                argv[0]);
        return 2;
    }
    for (size_t k = 0; k < sizeof scenarios / sizeof scenarios[0]; k++)
        if (strcmp(argv[1], scenarios[k].name) == 0) cur = &scenarios[k];
    if (!cur) {
        fprintf(stderr, "unknown scenario %s\n", argv[1]);
        return 2;
    }
    if (strcmp(cur->name, "bcast_cma") == 0) setenv("XCOLL_SHM_COOP", "1", 1);
    xt_init(argv[0], cur->name);
    xt_job_t job;
    if (xt_job_start(&job, cur->size, rank_main, NULL, DEADLINE_MS, 45) != 0)
        return 1;
    return xt_job_finish(&job, 50);
}
