/*
 * test_shrink.c -- xc_comm_shrink: the survivors of a failure agree, over
 * their own connections, on a new communicator and keep computing on it.
 *
 * Usage: test_shrink SCENARIO, one of
 *   kill2    4 ranks loop on allreduces; the driver SIGKILLs rank 2 mid-loop;
 *            the 3 survivors get XC_ERR_PEER_LOST, shrink to ranks 0,1,2
 *            (old 0,1,3) and run allreduce/allgather/bcast correctly
 *   kill0    the same with rank 0, the store's host, raising SIGKILL
 *   stop     rank 1 SIGSTOPs itself; the survivors find it by the liveness
 *            heartbeat (XCOLL_LIVENESS_MS=1500, XCOLL_HEARTBEAT_MS=250),
 *            shrink to 3 and continue; the driver kills it afterwards
 *   two      5 ranks, ranks 1 and 3 raise SIGKILL: shrink to 3
 *   none     4 ranks, no failure: shrink gives the same 4 ranks, which work
 *   during   4 healthy ranks shrink; rank 2 enters 50 ms after the others
 *            and the driver SIGKILLs it 0-4 ms after that (a trial per
 *            delay: in the agreement, the connection, the start): every
 *            survivor returns a working communicator of consistent
 *            membership or an error, never hangs (alarm); when all failed,
 *            a second shrink of the old communicator gives the 3 survivors
 *   twice    5 ranks: rank 4 dies, shrink to 4; then (new) rank 1 dies on
 *            the shrunk communicator, shrink again to 3
 *   invalid  NULL communicator or NULL out pointer: XC_ERR_INVALID, and the
 *            communicator is untouched
 *   late     3 healthy ranks: ranks 0 and 1 shrink (XCOLL_TIMEOUT_MS=2000;
 *            rank 1 300 ms later, and the driver stops it from 1.8 to 2.6 s
 *            into rank 0's shrink: rank 0 must wait for it past its own
 *            deadline -- before 2026-12-07 it declared rank 1 late too and
 *            settled alone, which CI caught once without the stop),
 *            settle without rank 2, compute and destroy the old
 *            communicator; then rank 2 calls xc_comm_shrink: XC_ERR_PEER_LOST
 *            ("declared this rank (2) failed"), no communicator -- not a
 *            communicator of one (before 2026-12-06 it got XC_OK, size 1:
 *            the goodbyes hid the peers' verdict); and again on a retry
 *            (which got XC_OK, size 1, until the forty-fourth session)
 *   revoke   4 healthy ranks: rank 0 blocks in a recv from rank 1 that is
 *            never sent, ranks 1 and 3 in an all-reduce ranks 0 and 2
 *            never join; rank 2 calls xc_comm_revoke from a second thread
 *            while its main thread waits in a recv from rank 3.  Every
 *            blocked call returns XC_ERR_REVOKED naming rank 2 within 2 s,
 *            the next call fails the same way at once, and shrink gives
 *            the same 4 ranks, which work
 *
 * Every scenario checks that the job leaves nothing in /dev/shm.
 */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ELEMS (64 * 1024) /* 256 KiB of fp32 */
#define KILL_AT 5
#define MAX_ITERS 100000
#define DEADLINE_MS 20000

static const char *scenario;
static int nranks = 4;
static int victims[XT_MAX_RANKS]; /* victims[r]: old rank r dies */

/* Out-of-band results per old rank: 1 + new size on success, -1 error. */
#define RES(r) xt_shm->flag[r]

static int is_victim(int r) { return victims[r]; }

/* Loop on allreduces until one fails; a victim dies at KILL_AT (raise) or
 * is killed by the driver.  Returns the failing code. */
static xc_result_t loop_until_failure(xc_comm_t *comm, int me_old, int die_how)
{
    int rank = xc_comm_rank(comm), size = xc_comm_size(comm);
    float *a = malloc(ELEMS * sizeof *a), *b = malloc(ELEMS * sizeof *b);
    xc_result_t rc = XC_OK;
    for (int k = 0; k < ELEMS; k++) a[k] = (float)(rank + 1);
    for (int it = 0; it < MAX_ITERS; it++) {
        if (is_victim(me_old) && it == KILL_AT && die_how) {
            atomic_store(&xt_shm->stamp_ns[me_old], xt_now_ns());
            xt_log("raising %s at iteration %d", die_how == SIGSTOP ? "SIGSTOP" : "SIGKILL", it);
            raise(die_how);
        }
        rc = xc_allreduce(a, b, ELEMS, XC_FLOAT32, XC_SUM, comm);
        if (rc != XC_OK) break;
        float want = (float)(size * (size + 1) / 2);
        if (b[0] != want || b[ELEMS - 1] != want) {
            xt_fail(__FILE__, __LINE__, "iteration %d: %g, want %g", it, b[0], want);
            break;
        }
        atomic_store(&xt_shm->progress[me_old], it + 1);
    }
    /* A victim whose loop another victim's death ended dies now. */
    if (is_victim(me_old) && die_how == SIGKILL) raise(SIGKILL);
    free(a);
    free(b);
    return rc;
}

/* Collectives on the shrunk communicator, with checked results. */
static int check_collectives(xc_comm_t *nc)
{
    int r = xc_comm_rank(nc), n = xc_comm_size(nc);
    enum { N = 70000 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    int32_t *g = malloc((size_t)n * 4 * sizeof *g);
    int32_t mine[4] = {r, r * 10, r * 100, -r}, bc[16];
    int ok = 1;
    for (int k = 0; k < N; k++) a[k] = (float)(r + 1) * (float)(k % 7);
    XT_CHECK_RC(xc_allreduce(a, b, N, XC_FLOAT32, XC_SUM, nc), XC_OK);
    for (int k = 0; k < N && ok; k++)
        ok = XT_CHECK_DBL(b[k], ==, (double)(n * (n + 1) / 2) * (k % 7));
    XT_CHECK_RC(xc_allgather(mine, g, 4, XC_INT32, nc), XC_OK);
    for (int q = 0; q < n && ok; q++)
        ok = XT_CHECK_INT(g[4 * q], ==, q) && XT_CHECK_INT(g[4 * q + 2], ==, q * 100);
    for (int k = 0; k < 16; k++) bc[k] = r == n - 1 ? 1000 + k : -1;
    XT_CHECK_RC(xc_bcast(bc, 16, XC_INT32, n - 1, nc), XC_OK);
    for (int k = 0; k < 16 && ok; k++) ok = XT_CHECK_INT(bc[k], ==, 1000 + k);
    XT_CHECK_RC(xc_barrier(nc), XC_OK);
    free(a);
    free(b);
    free(g);
    return ok;
}

/* Shrink `old` expecting the members to be the old ranks not in dead[]. */
static xc_comm_t *shrink_expect(xc_comm_t *old, const int *dead)
{
    int orank = xc_comm_rank(old), osize = xc_comm_size(old), want_rank = 0, want_size = 0;
    for (int q = 0; q < osize; q++)
        if (!dead[q]) {
            if (q < orank) want_rank++;
            want_size++;
        }
    xc_comm_t *nc = NULL;
    double t = xt_now();
    xc_result_t rc = xc_comm_shrink(old, &nc);
    xt_log("shrink returned %s after %.3f s (%s)", xc_err_name(rc), xt_now() - t,
           rc == XC_OK ? "ok" : xc_last_error());
    XT_CHECK_RC(rc, XC_OK);
    if (rc != XC_OK) return NULL;
    XT_CHECK_INT(xc_comm_size(nc), ==, want_size);
    XT_CHECK_INT(xc_comm_rank(nc), ==, want_rank);
    /* The old communicator stays poisoned. */
    XT_CHECK_INT(xc_comm_status(old) != XC_OK, ==, 1);
    return nc;
}

/* Shrink `comm` expecting the survivors of dead[], check the new
 * communicator's collectives (and the old one's status, unless
 * old_status is XC_OK), report out of band, destroy both. */
static int shrink_check_end(xc_comm_t *comm, int rank, const int *dead, xc_result_t old_status)
{
    xc_comm_t *nc = shrink_expect(comm, dead);
    int ok = nc && check_collectives(nc);
    if (old_status != XC_OK) XT_CHECK_RC(xc_comm_status(comm), old_status);
    RES(rank) = ok ? 1 + xc_comm_size(nc) : -1;
    xc_comm_destroy(nc);
    xc_comm_destroy(comm);
    return xt_result();
}

/* kill2, kill0, stop, two: die (or survive), shrink, compute. */
static int failure_rank(int rank, int size)
{
    (void)size;
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    int how = strcmp(scenario, "kill2") == 0 ? 0 : strcmp(scenario, "stop") == 0 ? SIGSTOP : SIGKILL;
    xc_result_t rc = loop_until_failure(comm, rank, how);
    if (is_victim(rank)) {
        xt_fail(__FILE__, __LINE__, "victim survived (%s)", xc_err_name(rc));
        return 1;
    }
    xt_log("loop ended with %s: %s", xc_err_name(rc), xc_comm_last_error(comm));
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    return shrink_check_end(comm, rank, victims, XC_OK);
}

/* none: shrink a healthy communicator. */
static int none_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    (void)rank;
    (void)size;
    XT_REQUIRE_OK(xc_barrier(comm));
    int32_t x = 1, y = 0;
    XT_REQUIRE_OK(xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, comm));
    return shrink_check_end(comm, rank, victims, XC_ERR_ABORTED);
}

/* late: rank 2 comes to the shrink after the others have left without it. */
static int late_rank(int rank, int size)
{
    (void)size;
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    XT_REQUIRE_OK(xc_barrier(comm));
    if (rank != 2) {
        int dead[XT_MAX_RANKS] = {0};
        dead[2] = 1;
        /* Rank 1 comes 300 ms after rank 0: its deadline is later */
        if (rank == 1) usleep(300 * 1000);
        else atomic_store(&xt_shm->stamp_ns[0], xt_now_ns());
        return shrink_check_end(comm, rank, dead, XC_ERR_ABORTED);
    }
    double end = xt_now() + 30;
    while ((!atomic_load(&RES(0)) || !atomic_load(&RES(1))) && xt_now() < end) usleep(5000);
    usleep(300 * 1000); /* their old communicators are destroyed by now */
    xc_comm_t *nc = NULL;
    xc_result_t rc = xc_comm_shrink(comm, &nc);
    xt_log("late shrink: %s, %s: \"%s\"", xc_err_name(rc), nc ? "a communicator" : "none",
           xc_comm_last_error(comm));
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_INT(nc == NULL, ==, 1);
    XT_CHECK_HAS(xc_comm_last_error(comm), "declared this rank (2) failed");
    /* a retry (allowed after PEER_LOST) must not make a communicator of
     * this rank alone: the verdict stands */
    rc = xc_comm_shrink(comm, &nc);
    xt_log("late shrink again: %s: \"%s\"", xc_err_name(rc), xc_comm_last_error(comm));
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_INT(nc == NULL, ==, 1);
    XT_CHECK_HAS(xc_comm_last_error(comm), "earlier shrink");
    RES(2) = -1;
    xc_comm_destroy(nc);
    xc_comm_destroy(comm);
    return xt_result();
}

/* revoke: blocked calls of every kind woken by another rank's revoke. */
typedef struct revoker {
    xc_comm_t *comm;
    xc_result_t rc;
} revoker_t;

static void *revoke_thread(void *p)
{
    revoker_t *v = p;
    usleep(300 * 1000);
    atomic_store(&xt_shm->stamp_ns[0], xt_now_ns());
    v->rc = xc_comm_revoke(v->comm);
    return NULL;
}

static int revoke_rank(int rank, int size)
{
    (void)size;
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    XT_REQUIRE_OK(xc_barrier(comm));
    float buf[1000] = {0};
    pthread_t thr;
    revoker_t v = {comm, XC_ERR_INTERNAL};
    if (rank == 2) pthread_create(&thr, NULL, revoke_thread, &v);
    xc_result_t rc;
    if (rank == 0) rc = xc_recv(buf, 10, XC_FLOAT32, 1, 0, comm);
    else if (rank == 2) rc = xc_recv(buf, 10, XC_FLOAT32, 3, 0, comm);
    else rc = xc_allreduce(buf, buf, 1000, XC_FLOAT32, XC_SUM, comm);
    long long t0 = atomic_load(&xt_shm->stamp_ns[0]);
    double after = t0 ? xt_now() - (double)t0 / 1e9 : -1;
    xt_log("blocked call returned %s %.3f s after the revoke: %s", xc_err_name(rc), after,
           xc_comm_last_error(comm));
    if (rank == 2) {
        pthread_join(thr, NULL);
        XT_CHECK_RC(v.rc, XC_OK);
    }
    XT_CHECK_RC(rc, XC_ERR_REVOKED);
    XT_CHECK_INT(after >= 0 && after < 2.0, ==, 1);
    XT_CHECK_INT(strstr(xc_comm_last_error(comm), "rank 2 revoked") != NULL, ==, 1);
    XT_CHECK_RC(xc_barrier(comm), XC_ERR_REVOKED); /* and every later call */
    XT_CHECK_RC(xc_comm_status(comm), XC_ERR_REVOKED);
    XT_CHECK_RC(xc_comm_revoke(NULL), XC_ERR_INVALID);
    return shrink_check_end(comm, rank, victims, XC_ERR_REVOKED);
}

/* twice: old rank 4 dies; then old rank 1 (new rank 1) on the shrunk one. */
static int twice_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    int dead1[XT_MAX_RANKS] = {0}, dead2[XT_MAX_RANKS] = {0};
    dead1[size - 1] = 1;
    dead2[1] = 1;
    memset(victims, 0, sizeof victims);
    victims[size - 1] = 1;
    xc_result_t rc = loop_until_failure(comm, rank, SIGKILL);
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    xc_comm_t *c1 = shrink_expect(comm, dead1);
    if (!c1) return 1;
    XT_CHECK_INT(check_collectives(c1), ==, 1);
    memset(victims, 0, sizeof victims);
    victims[1] = 1; /* its rank in c1 is 1 too */
    rc = loop_until_failure(c1, rank, SIGKILL);
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    xc_comm_t *c2 = shrink_expect(c1, dead2);
    int ok = c2 && check_collectives(c2);
    RES(rank) = ok ? 1 + xc_comm_size(c2) : -1;
    xc_comm_destroy(c2);
    xc_comm_destroy(c1);
    xc_comm_destroy(comm);
    return xt_result();
}

/* during: enter shrink healthy; the driver kills rank 2 meanwhile.  A
 * survivor must return in bounded time with either a communicator that
 * works, or an error. */
static int during_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    XT_REQUIRE_OK(xc_barrier(comm));
    if (rank == 2) {
        /* The others wait in the agreement; the driver kills this rank a
         * chosen time after it enters it (or, if it is done by then, in
         * the new communicator). */
        usleep(50000);
        atomic_store(&xt_shm->stamp_ns[2], xt_now_ns());
        xc_comm_t *nc = NULL;
        xc_result_t rc = xc_comm_shrink(comm, &nc);
        xt_log("victim's shrink returned %s", xc_err_name(rc));
        sleep(5); /* until killed */
        return 1;
    }
    xc_comm_t *nc = NULL;
    double t = xt_now();
    xc_result_t rc = xc_comm_shrink(comm, &nc);
    double dt = xt_now() - t;
    xt_log("shrink returned %s after %.3f s: %s", xc_err_name(rc), dt,
           rc == XC_OK ? "" : xc_last_error());
    XT_CHECK_DBL(dt, <, 15.0);
    if (rc == XC_OK) {
        int n = xc_comm_size(nc);
        int32_t x = 1, y = 0;
        xc_result_t r2 = xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, nc);
        xt_log("new size %d; allreduce %s (%d)", n, xc_err_name(r2), y);
        if (n == size - 1) { /* without the victim: must work */
            XT_CHECK_RC(r2, XC_OK);
            XT_CHECK_INT(y, ==, n);
            if (r2 == XC_OK) XT_CHECK_INT(check_collectives(nc), ==, 1);
        } else {
            XT_CHECK_INT(n, ==, size); /* the victim was a member, died after */
            if (r2 == XC_OK) XT_CHECK_INT(y, ==, n);
            else XT_CHECK_RC(r2, XC_ERR_PEER_LOST);
        }
        RES(rank) = 1 + n;
    } else {
        XT_CHECK_INT(nc == NULL, ==, 1);
        XT_CHECK_READABLE(xc_last_error());
        RES(rank) = -1;
    }
    /* If every survivor failed, all of them try again on the old
     * communicator (the victim is dead by now): that must succeed. */
    xt_sync(2, size - 1, 30);
    int all_failed = 1;
    for (int r = 0; r < size; r++)
        if (r != 2) all_failed &= atomic_load(&RES(r)) == -1;
    if (all_failed) {
        int dead[XT_MAX_RANKS] = {0};
        dead[2] = 1;
        xc_comm_t *again = shrink_expect(comm, dead);
        XT_CHECK_INT(again && check_collectives(again), ==, 1);
        xc_comm_destroy(again);
    }
    xc_comm_destroy(nc);
    xc_comm_destroy(comm);
    return xt_result();
}

/* invalid: NULL arguments change nothing. */
static int invalid_rank(int rank, int size)
{
    (void)size;
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    xc_comm_t *nc = (xc_comm_t *)&rank;
    XT_CHECK_RC(xc_comm_shrink(NULL, &nc), XC_ERR_INVALID);
    XT_CHECK_INT(nc == NULL, ==, 1);
    XT_CHECK_HAS(xc_last_error(), "comm is NULL");
    XT_CHECK_RC(xc_comm_shrink(comm, NULL), XC_ERR_INVALID);
    XT_CHECK_HAS(xc_last_error(), "newcomm is NULL");
    XT_CHECK_RC(xc_comm_status(comm), XC_OK);
    int32_t x = 1, y = 0;
    XT_CHECK_RC(xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, comm), XC_OK);
    XT_CHECK_INT(y, ==, 2);
    RES(rank) = 1;
    xc_comm_destroy(comm);
    return xt_result();
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (!strcmp(scenario, "none")) return none_rank(rank, size);
    if (!strcmp(scenario, "twice")) return twice_rank(rank, size);
    if (!strcmp(scenario, "during")) return during_rank(rank, size);
    if (!strcmp(scenario, "invalid")) return invalid_rank(rank, size);
    if (!strcmp(scenario, "revoke")) return revoke_rank(rank, size);
    if (!strcmp(scenario, "late")) return late_rank(rank, size);
    return failure_rank(rank, size);
}

/* Wait until `n` ranks have set RES (or `s` seconds pass). */
static void wait_results(int n, double s)
{
    double end = xt_now() + s;
    for (;;) {
        int k = 0;
        for (int r = 0; r < nranks; r++) k += atomic_load(&RES(r)) != 0;
        if (k >= n || xt_now() > end) return;
        usleep(5000);
    }
}

static int run_job(unsigned delay_us, int timeout_ms)
{
    xt_job_t job;
    if (xt_job_start(&job, nranks, rank_main, NULL, timeout_ms, 60) != 0) return 1;
    for (int r = 0; r < nranks; r++) job.may_die[r] = victims[r];
    if (!strcmp(scenario, "kill2")) {
        /* Mid-loop: after KILL_AT iterations and a little more. */
        double end = xt_now() + 30;
        while (atomic_load(&xt_shm->progress[2]) < KILL_AT && xt_now() < end) usleep(500);
        usleep(1500);
        kill(job.pid[2], SIGKILL);
        xt_log("killed rank 2 after %lld iterations", (long long)atomic_load(&xt_shm->progress[2]));
    } else if (!strcmp(scenario, "during")) {
        double end = xt_now() + 30;
        while (!atomic_load(&xt_shm->stamp_ns[2]) && xt_now() < end) usleep(100);
        usleep(delay_us);
        kill(job.pid[2], SIGKILL);
        xt_log("killed rank 2 %u us after it entered the shrink", delay_us);
    } else if (!strcmp(scenario, "late")) {
        /* Rank 1 stopped from 1.8 s to 2.6 s into rank 0's shrink: rank 0
         * passes its 2 s deadline (rank 2 is marked, round 2 starts)
         * while rank 1, which took part in round 1, cannot answer; rank 1
         * resumes past its own deadline (2.3 s) and both settle on {2}. */
        double end = xt_now() + 30;
        while (!atomic_load(&xt_shm->stamp_ns[0]) && xt_now() < end) usleep(1000);
        double t0 = (double)atomic_load(&xt_shm->stamp_ns[0]) / 1e9;
        while (xt_now() < t0 + 1.8) usleep(1000);
        kill(job.pid[1], SIGSTOP);
        while (xt_now() < t0 + 2.6) usleep(1000);
        kill(job.pid[1], SIGCONT);
        xt_log("rank 1 stopped from %.3f s to %.3f s into rank 0's shrink", 1.8,
               xt_now() - t0);
    } else if (!strcmp(scenario, "stop")) {
        wait_results(nranks - 1, 40); /* survivors done: then the stopped one goes */
        kill(job.pid[1], SIGKILL);
    }
    xt_job_wait(&job, 60);
    for (int r = 0; r < nranks; r++) {
        if (victims[r]) xt_expect_signal(&job, r, SIGKILL);
        else xt_expect_exit(&job, r, 0);
    }
    if (!strcmp(scenario, "during")) {
        /* Survivors that succeeded agree on the size. */
        int size = 0;
        for (int r = 0; r < nranks; r++) {
            int v = atomic_load(&RES(r));
            if (r == 2 || v <= 0) continue;
            if (!size) size = v;
            XT_CHECK_INT(v, ==, size);
        }
        xt_log("trial: results %d %d %d", atomic_load(&RES(0)), atomic_load(&RES(1)),
               atomic_load(&RES(3)));
    }
    XT_CHECK_INT(xt_shm_leftovers(&job), ==, 0);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"kill2", "kill0", "stop", "two", "none",
                                        "during", "twice", "invalid", "revoke", "late"};
    scenario = XT_SCENARIO(argc, argv, known);
    xt_init(argv[0], scenario);
    if (!strcmp(scenario, "kill2") || !strcmp(scenario, "during")) victims[2] = 1;
    if (!strcmp(scenario, "kill0")) victims[0] = 1;
    if (!strcmp(scenario, "stop")) {
        victims[1] = 1;
        setenv("XCOLL_LIVENESS_MS", "1500", 1);
        setenv("XCOLL_HEARTBEAT_MS", "250", 1);
    }
    if (!strcmp(scenario, "two")) nranks = 5, victims[1] = victims[3] = 1;
    if (!strcmp(scenario, "twice")) nranks = 5, victims[4] = victims[1] = 1;
    if (!strcmp(scenario, "invalid")) nranks = 2;
    if (!strcmp(scenario, "late")) nranks = 3;
    if (!strcmp(scenario, "during")) {
        /* The kill lands in the agreement, the connection of the new
         * communicator, its start or its first collective. */
        static const unsigned delays[] = {0, 300, 1000, 2000, 4000};
        for (size_t k = 0; k < sizeof delays / sizeof delays[0]; k++) run_job(delays[k], 10000);
    } else {
        run_job(0, !strcmp(scenario, "late") ? 2000 : DEADLINE_MS);
    }
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
