/*
 * test_abort.c -- xc_comm_abort from another thread, and destroy with
 * pending operations.
 *
 * Usage: test_abort SCENARIO, one of
 *   recv     2 ranks.  Rank 0's main thread blocks in a recv that will never
 *            match; another thread calls xc_comm_abort after 300 ms.  The
 *            recv returns XC_ERR_ABORTED less than 1 s after the abort.
 *            Rank 1, blocked in a recv from rank 0, must return too (the
 *            header says XC_ERR_ABORTED; XC_ERR_PEER_LOST is accepted and
 *            logged) within 5 s although its deadline is 20 s.
 *   coll     3 ranks.  Rank 0 is in an allreduce the others never join
 *            (they wait in recvs from rank 0); rank 0 aborts from a thread.
 *   destroy  2 ranks.  Rank 0 (deadline 1500 ms) destroys its communicator
 *            with an unmatched irecv, an iallreduce rank 1 never joins and a
 *            completed but unfreed iallreduce pending.  Destroy returns
 *            (after at most the deadline), every request can still be waited
 *            -- the completed one with XC_OK, the others with an error --
 *            tested and freed.  Rank 1 (deadline 20 s) then finds its peer
 *            gone: a receive from XC_ANY_SOURCE it posted before (rank 0
 *            was its only possible sender) and its next barrier fail with
 *            XC_ERR_PEER_LOST promptly.
 *   anylate  2 ranks.  Rank 0 destroys its communicator; rank 1 (deadline
 *            20 s) then posts a receive from XC_ANY_SOURCE (nobody is left
 *            who could send): XC_ERR_PEER_LOST within 5 s, not the
 *            deadline.  Before it, two any-source receives that rank 1
 *            posts on tag 5 are matched by two messages to itself (never
 *            taken for orphans while rank 0 is there).
 *   reinit   2 ranks create, use and destroy a communicator six times in a
 *            row on one address.  In even rounds rank 0, which hosts the
 *            store, destroys 200 ms after rank 1, which is by then waiting
 *            in its next xc_comm_init on rank 0's store; in odd rounds rank
 *            1 destroys 200 ms late, so rank 0 is in its next init before
 *            anyone else uses the store it released.  Every creation
 *            succeeds (before 2026-12-06 rank 0's destroy stopped the store
 *            under rank 1: PEER_LOST there, and rank 0's next init timed
 *            out).
 *
 * Observed with the first engine (Nov 2026): the peers of an aborting rank
 * get XC_ERR_ABORTED ("rank 0 reported: rank 0 called xc_comm_abort")
 * about 1 ms after the abort; the driver logs what each peer saw.
 */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LONG_MS 20000

static const char *scenario;

typedef struct aborter {
    xc_comm_t *comm;
    int delay_ms;
    xc_result_t rc;
} aborter_t;

static void *abort_thread(void *p)
{
    aborter_t *a = p;
    usleep((useconds_t)a->delay_ms * 1000);
    atomic_store(&xt_shm->stamp_ns[0], xt_now_ns());
    a->rc = xc_comm_abort(a->comm);
    xt_log("xc_comm_abort returned %s", xc_err_name(a->rc));
    return NULL;
}

static double since_abort(void)
{
    long long s = atomic_load(&xt_shm->stamp_ns[0]);
    return s ? xt_now() - (double)s / 1e9 : -1.0;
}

/* recv and coll: rank 0 aborts itself from a thread while blocked. */
static int abort_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(LONG_MS);
    if (!comm) return 1;
    XT_REQUIRE_OK(xc_barrier(comm));
    int32_t buf[256];
    for (int k = 0; k < 256; k++) buf[k] = k;
    xc_result_t rc;

    if (rank == 0) {
        aborter_t a = {comm, 300, XC_OK};
        pthread_t th;
        if (pthread_create(&th, NULL, abort_thread, &a) != 0) return 1;
        if (strcmp(scenario, "recv") == 0)
            rc = xc_recv(buf, 256, XC_INT32, 1, 12345, comm);
        else
            rc = xc_allreduce(buf, buf, 256, XC_INT32, XC_SUM, comm);
        double since = since_abort();
        pthread_join(th, NULL);
        xt_log("blocked call returned %s %.3fs after the abort: \"%s\"",
               xc_err_name(rc), since, xc_comm_last_error(comm));
        XT_CHECK_RC(a.rc, XC_OK);
        XT_CHECK_RC(rc, XC_ERR_ABORTED);
        XT_CHECK_READABLE(xc_comm_last_error(comm));
        XT_CHECK_DBL(since, >=, 0.0);
        XT_CHECK_DBL(since, <, 1.0);
        XT_CHECK_RC(xc_comm_status(comm), XC_ERR_ABORTED);
        double t = xt_now();
        XT_CHECK_RC(xc_barrier(comm), XC_ERR_ABORTED);
        XT_CHECK_RC(xc_send(buf, 1, XC_INT32, 1, 0, comm), XC_ERR_ABORTED);
        /* Aborting again is harmless. */
        XT_CHECK_RC(xc_comm_abort(comm), XC_OK);
        XT_CHECK_DBL(xt_now() - t, <, 0.5);
    } else {
        /* Never matched: rank 0 sends nothing. */
        rc = xc_recv(buf, 256, XC_INT32, 0, 777, comm);
        double since = since_abort();
        xt_log("peer's recv returned %s %.3fs after rank 0 aborted: \"%s\"",
               xc_err_name(rc), since, xc_comm_last_error(comm));
        if (rc != XC_ERR_ABORTED && rc != XC_ERR_PEER_LOST)
            xt_fail(__FILE__, __LINE__, "peer of an aborted rank got %s, "
                    "want XC_ERR_ABORTED (or XC_ERR_PEER_LOST)",
                    xc_err_name(rc));
        XT_CHECK_DBL(since, >=, 0.0);
        XT_CHECK_DBL(since, <, 5.0);
        XT_CHECK_RC(xc_comm_status(comm), rc);
        atomic_store(&xt_shm->flag[rank], rc == XC_ERR_ABORTED ? 1 : 2);
    }
    xt_sync(0, size, 30);
    double t = xt_now();
    xc_result_t drc = xc_comm_destroy(comm);
    xt_log("destroy returned %s", xc_err_name(drc));
    XT_CHECK_DBL(xt_now() - t, <, 3.0);
    return xt_result();
}

static int destroy_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(rank == 0 ? 1500 : LONG_MS);
    if (!comm) return 1;
    int32_t a[16], b[16], c[16], d[16];
    for (int k = 0; k < 16; k++) a[k] = rank + k;
    /* A completed request, left unfreed across the destroy. */
    xc_request_t *done_req = NULL;
    XT_REQUIRE_OK(xc_iallreduce(a, b, 16, XC_INT32, XC_SUM, comm, &done_req));
    XT_CHECK_RC(xc_request_wait(done_req), XC_OK);
    for (int k = 0; k < 16; k++)
        if (!XT_CHECK_INT(b[k], ==, 1 + 2 * k)) break;

    if (rank == 0) {
        xc_request_t *rreq = NULL, *creq = NULL;
        XT_REQUIRE_OK(xc_irecv(c, 16, XC_INT32, 1, 4242, comm, &rreq));
        XT_REQUIRE_OK(xc_iallreduce(a, d, 16, XC_INT32, XC_SUM, comm, &creq));
        double t = xt_now();
        xc_result_t rc = xc_comm_destroy(comm);
        double dt = xt_now() - t;
        xt_log("destroy with 2 pending requests returned %s after %.3fs",
               xc_err_name(rc), dt);
        XT_CHECK_DBL(dt, <, 4.0);
        xc_request_t *pend[2] = {rreq, creq};
        for (int k = 0; k < 2; k++) {
            xc_result_t w = xc_request_wait(pend[k]);
            xt_log("pending request %d after destroy: wait = %s", k,
                   xc_err_name(w));
            if (w != XC_ERR_ABORTED && w != XC_ERR_TIMEOUT)
                xt_fail(__FILE__, __LINE__, "pending request %d: got %s, "
                        "want XC_ERR_ABORTED (or XC_ERR_TIMEOUT)", k,
                        xc_err_name(w));
            int done = 0;
            XT_CHECK_RC(xc_request_test(pend[k], &done), w);
            XT_CHECK_INT(done, ==, 1);
            XT_CHECK_RC(xc_request_wait(pend[k]), w);
            xc_request_free(pend[k]);
        }
        XT_CHECK_RC(xc_request_wait(done_req), XC_OK);
        xc_request_free(done_req);
        xt_sync(0, size, 30);
    } else {
        xc_request_free(done_req);
        xc_request_t *any = NULL;
        XT_REQUIRE_OK(xc_irecv(c, 16, XC_INT32, XC_ANY_SOURCE, 99, comm, &any));
        xt_sync(0, size, 30); /* rank 0 has destroyed its comm */
        double t = xt_now();
        xc_result_t rc = xc_request_wait(any);
        double dt = xt_now() - t;
        xt_log("any-source receive after the peer's destroy: %s after %.3fs: \"%s\"",
               xc_err_name(rc), dt, xc_comm_last_error(comm));
        XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
        XT_CHECK_DBL(dt, <, 5.0);
        XT_CHECK_INT(xc_request_source(any), ==, -1);
        xc_request_free(any);
        t = xt_now();
        rc = xc_barrier(comm);
        dt = xt_now() - t;
        xt_log("barrier after the peer's destroy: %s after %.3fs: \"%s\"",
               xc_err_name(rc), dt, xc_comm_last_error(comm));
        XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
        XT_CHECK_DBL(dt, <, 5.0);
        XT_CHECK_RANK(xc_comm_last_error(comm), 0);
        XT_CHECK_READABLE(xc_comm_last_error(comm));
        xc_comm_destroy(comm);
    }
    return xt_result();
}

static int anylate_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(rank == 0 ? 1500 : LONG_MS);
    if (!comm) return 1;
    XT_REQUIRE_OK(xc_barrier(comm));
    if (rank == 0) {
        xt_sync(0, size, 30); /* rank 1's messages to itself are done */
        XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
        xt_sync(1, size, 30);
        return xt_result();
    }
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, ra[4], rb[4];
    xc_request_t *q[2];
    XT_REQUIRE_OK(xc_irecv(ra, 4, XC_INT32, XC_ANY_SOURCE, 5, comm, &q[0]));
    XT_REQUIRE_OK(xc_irecv(rb, 4, XC_INT32, XC_ANY_SOURCE, 5, comm, &q[1]));
    XT_CHECK_RC(xc_send(a, 4, XC_INT32, rank, 5, comm), XC_OK);
    XT_CHECK_RC(xc_send(b, 4, XC_INT32, rank, 5, comm), XC_OK);
    XT_CHECK_RC(xc_request_waitall(q, 2), XC_OK);
    XT_CHECK_INT(xc_request_source(q[0]), ==, rank);
    XT_CHECK_INT(ra[3], ==, 4);
    XT_CHECK_INT(rb[0], ==, 5);
    xc_request_free(q[0]);
    xc_request_free(q[1]);
    xt_sync(0, size, 30);
    xt_sync(1, size, 30); /* rank 0 has destroyed its comm */
    usleep(300 * 1000);   /* its goodbye is most likely read by now */
    double t = xt_now();
    xc_request_t *any = NULL;
    xc_result_t rc = xc_irecv(ra, 4, XC_INT32, XC_ANY_SOURCE, 6, comm, &any);
    if (rc == XC_OK) rc = xc_request_wait(any);
    double dt = xt_now() - t;
    xt_log("any-source receive posted after the peer's destroy: %s after %.3fs: \"%s\"",
           xc_err_name(rc), dt, xc_comm_last_error(comm));
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_DBL(dt, <, 5.0);
    XT_CHECK_READABLE(xc_comm_last_error(comm));
    xc_request_free(any);
    xc_comm_destroy(comm);
    return xt_result();
}

static int reinit_rank(int rank, int size)
{
    (void)size;
    for (int i = 0; i < 6; i++) {
        xc_comm_t *comm = xt_comm_world(8000);
        if (!comm) return 1;
        int32_t v = rank + i, sum = 0;
        XT_CHECK_RC(xc_allreduce(&v, &sum, 1, XC_INT32, XC_SUM, comm), XC_OK);
        XT_CHECK_INT(sum, ==, 1 + 2 * i);
        if (rank == i % 2) usleep(200 * 1000); /* the other is in its next init */
        XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    }
    return xt_result();
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (strcmp(scenario, "reinit") == 0) return reinit_rank(rank, size);
    if (strcmp(scenario, "destroy") == 0) return destroy_rank(rank, size);
    if (strcmp(scenario, "anylate") == 0) return anylate_rank(rank, size);
    return abort_rank(rank, size);
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"recv", "coll", "destroy", "anylate", "reinit"};
    scenario = XT_SCENARIO(argc, argv, known);
    xt_init(argv[0], scenario);
    int size = strcmp(scenario, "coll") == 0 ? 3 : 2;
    xt_job_t job;
    if (xt_job_start(&job, size, rank_main, NULL, -1, 40) != 0) return 1;
    xt_job_wait(&job, 45);
    xt_expect_all_ok(&job);
    for (int r = 1; r < size && strcmp(scenario, "destroy") != 0 &&
                    strcmp(scenario, "anylate") != 0 && strcmp(scenario, "reinit") != 0;
         r++)
        xt_log("rank %d observed %s after rank 0's abort", r,
               atomic_load(&xt_shm->flag[r]) == 1 ? "XC_ERR_ABORTED"
               : atomic_load(&xt_shm->flag[r]) == 2 ? "XC_ERR_PEER_LOST"
                                                     : "(nothing)");
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
