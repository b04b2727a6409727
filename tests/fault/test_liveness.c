/*
 * test_liveness.c -- a silent peer (stopped, frozen) is found by the
 * heartbeat long before the operation deadline, and a live peer that is
 * merely slow to call in (a long compute phase, a thread stuck in I/O) is
 * never taken for a dead one.
 *
 * Usage: test_liveness SCENARIO, one of
 *   stop     4 ranks loop on all-reduces (small ones through shared memory,
 *            1 MiB ones through the schedules); rank 2 raise(SIGSTOP)s itself
 *            at iteration 10
 *   stop0    the same with rank 0, the host of the store, stopped
 *   p2p      ranks 1 and 3 wait in a receive from rank 2, rank 0 in one from
 *            rank 1 (alive), when rank 2 stops itself
 *   slow     rank 2 computes (sleeps) 3x the liveness timeout between
 *            collectives, and once blocks its only user thread in a read()
 *            of a pipe for as long: every collective succeeds
 *   config   XCOLL_LIVENESS_MS below 3 heartbeats: XC_ERR_INVALID naming it
 *   resume   2 ranks over sockets; rank 1 stops itself, rank 0 declares it
 *            lost (as in stop); then the driver continues rank 1 (SIGCONT):
 *            its next call but one fails naming rank 0's verdict (rank 0 sent it
 *            the error frame; before, only end-of-file: "closed the
 *            connection")
 *   beatfull 2 ranks over sockets; rank 1's first heartbeat meets a full
 *            socket buffer (this program interposes sendmsg: EAGAIN once)
 *            while rank 1 computes for 3x the liveness timeout and rank 0
 *            waits in an all-reduce: it succeeds (the queued beat is
 *            written at the next tick; before, an idle progress thread
 *            never wrote it and rank 0 declared rank 1 lost)
 *
 * Settings: XCOLL_HEARTBEAT_MS=250, XCOLL_LIVENESS_MS=1500, operation
 * deadline 60 s.  Survivors must return XC_ERR_PEER_LOST naming the stopped
 * rank within liveness + 2.5 s of the stop; the driver then SIGKILLs the
 * stopped rank (a stopped process still dies of SIGKILL).
 */
#include "harness.h"

#include "../../src/transport/frame.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NRANKS 4
#define STOP_AT 10
#define ELEMS (256 * 1024)
#define LIVENESS_MS 1500
#define HEARTBEAT_MS 250
#define DEADLINE_MS 60000
#define PROMPT_S (LIVENESS_MS / 1000.0 + 2.5)

static const char *scenario;
static int victim = 2;

/* While armed, the first heartbeat frame this process sends fails with
 * EAGAIN, as on a full socket buffer (the library's sendmsg resolves
 * here first). */
static _Atomic int beat_armed;
ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    static ssize_t (*real)(int, const struct msghdr *, int);
    if (!real) real = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    if (atomic_load(&beat_armed) && m->msg_iovlen >= 1 &&
        m->msg_iov[0].iov_len >= sizeof(xc__hdr_t) &&
        ((const xc__hdr_t *)m->msg_iov[0].iov_base)->kind == XC__F_BEAT &&
        atomic_exchange(&beat_armed, 0)) {
        xt_log("heartbeat: EAGAIN (a full socket buffer)");
        errno = EAGAIN;
        return -1;
    }
    return real(fd, m, flags);
}

static void stop_self(int it);
static int survivor_checks(xc_comm_t *comm, xc_result_t rc, const char *what, int size);

/* A communicator whose ranks are on "different nodes" (sockets only),
 * checked by one all-reduce; NULL on failure (logged). */
static xc_comm_t *tcp_comm(int rank)
{
    char id[32];
    snprintf(id, sizeof id, "liveness-node-%d", rank);
    setenv("XCOLL_NODE_ID", id, 1);
    xc_comm_t *comm = xt_comm_world(-1);
    int32_t x = rank, y = 0;
    xc_result_t rc = comm ? xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, comm) : XC_ERR_SYSTEM;
    if (comm && rc != XC_OK) {
        xt_fail(__FILE__, __LINE__, "first allreduce: %s", xc_err_name(rc));
        xc_comm_destroy(comm);
        return NULL;
    }
    return comm;
}

/* Rank 1 stops, is declared lost by rank 0, is continued and must learn
 * why from rank 0's error frame. */
static int resume_rank(int rank, int size)
{
    xc_comm_t *comm = tcp_comm(rank);
    if (!comm) return 1;
    int32_t x = rank, y = 0;
    if (rank != victim) {
        xc_result_t rc = xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, comm);
        return survivor_checks(comm, rc, "allreduce", size);
    }
    stop_self(1); /* the driver continues it once rank 0 is done */
    /* Rank 0's part of this all-reduce may have been sent before its
     * verdict: then the call completes here; the next one must fail. */
    xc_result_t rc = xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, comm);
    xt_log("continued; allreduce returned %s", xc_err_name(rc));
    if (rc == XC_OK) rc = xc_barrier(comm);
    const char *msg = xc_comm_last_error(comm);
    xt_log("then: %s: \"%s\"", xc_err_name(rc), msg);
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_INT(xt_has(msg, "heartbeat"), ==, 1); /* rank 0's cause, relayed */
    XT_CHECK_READABLE(msg);
    xc_comm_destroy(comm);
    return xt_result();
}

/* Rank 1 computes (alive, beating) while its first beat is held back. */
static int beatfull_rank(int rank, int size)
{
    xc_comm_t *comm = tcp_comm(rank);
    if (!comm) return 1;
    int32_t x = rank, y = 0;
    if (rank == 1) {
        atomic_store(&beat_armed, 1);
        xt_log("computing for %d ms", 3 * LIVENESS_MS);
        usleep(3 * LIVENESS_MS * 1000);
        XT_CHECK_INT(atomic_load(&beat_armed), ==, 0); /* a beat was held back */
    }
    double t = xt_now();
    xc_result_t rc = xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, comm);
    xt_log("allreduce after the silence: %s after %.2f s \"%s\"", xc_err_name(rc), xt_now() - t,
           rc ? xc_comm_last_error(comm) : "");
    XT_CHECK_RC(rc, XC_OK);
    XT_CHECK_INT(y, ==, size * (size - 1) / 2);
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    return xt_result();
}

/* The stopped rank: stamp, stop; the driver kills it later. */
static void stop_self(int it)
{
    xt_log("raising SIGSTOP at iteration %d", it);
    atomic_store(&xt_shm->stamp_ns[victim], xt_now_ns());
    raise(SIGSTOP);
    xt_log("continued (the driver kills a stopped rank, except in resume)");
}

/* A survivor's checks once its call failed; then it waits for the other
 * survivors (so that only the stop can be what they report). */
static int survivor_checks(xc_comm_t *comm, xc_result_t rc, const char *what, int size)
{
    long long stopped = atomic_load(&xt_shm->stamp_ns[victim]);
    double since = stopped ? xt_now() - (double)stopped / 1e9 : -1.0;
    const char *msg = xc_comm_last_error(comm);
    xt_log("%s returned %s %.3fs after the stop: \"%s\"", what, xc_err_name(rc), since, msg);
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_INT(stopped, !=, 0);
    /* Not before the window: the victim's last frame may precede its
     * stamp by a heartbeat (250 ms) and, under TSan on a loaded machine,
     * a late one (0.62 s seen once). */
    XT_CHECK_DBL(since, >=, LIVENESS_MS / 1000.0 - 0.8);
    XT_CHECK_DBL(since, <, PROMPT_S);
    XT_CHECK_RANK(msg, victim);
    XT_CHECK_READABLE(msg);
    XT_CHECK_RC(xc_comm_status(comm), XC_ERR_PEER_LOST);
    xt_sync(0, size - 1, 30);
    atomic_store(&xt_shm->flag[xc_comm_rank(comm)], 2); /* done: driver may kill */
    xc_comm_destroy(comm);
    return xt_result();
}

static int loop_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) {
        atomic_store(&xt_shm->flag[rank], 1);
        return 1;
    }
    float *s = malloc(ELEMS * sizeof *s), *r = malloc(ELEMS * sizeof *r);
    if (!s || !r) return 1;
    for (int k = 0; k < ELEMS; k++) s[k] = (float)(rank + 1);
    const float want = (float)(size * (size + 1) / 2);
    xc_result_t rc = XC_OK;
    int it;
    for (it = 0; it < 100000; it++) {
        if (rank == victim && it == STOP_AT) stop_self(it);
        size_t n = it % 2 ? ELEMS : 64;
        rc = xc_allreduce(s, r, n, XC_FLOAT32, XC_SUM, comm);
        if (rc != XC_OK) break;
        if (r[0] != want || r[n - 1] != want) {
            xt_fail(__FILE__, __LINE__, "iteration %d: got %g/%g, want %g", it, r[0], r[n - 1],
                    want);
            break;
        }
        atomic_store(&xt_shm->progress[rank], it + 1);
    }
    free(s);
    free(r);
    if (rank == victim) return 1;
    XT_CHECK_INT(it, >=, STOP_AT - 1);
    return survivor_checks(comm, rc, "allreduce", size);
}

static int p2p_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) {
        atomic_store(&xt_shm->flag[rank], 1);
        return 1;
    }
    XT_REQUIRE_OK(xc_barrier(comm));
    if (rank == victim) {
        usleep(100000); /* let the others post their receives */
        stop_self(0);
        return 1;
    }
    int32_t buf[256];
    int from = rank == 0 ? 1 : victim;
    xc_request_t *req = NULL;
    XT_REQUIRE_OK(xc_irecv(buf, 256, XC_INT32, from, 9, comm, &req));
    xc_result_t rc = xc_request_wait(req);
    xc_request_free(req);
    return survivor_checks(comm, rc, "recv", size);
}

/* Live but slow: sleeping, then blocked in read(), each 3x the liveness
 * timeout, with the others waiting in the collective meanwhile. */
static int slow_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    int32_t x = rank, y = 0;
    const int32_t want = size * (size - 1) / 2;
    for (int round = 0; round < 3; round++) {
        if (rank == victim && round == 1) {
            xt_log("computing for %d ms", 3 * LIVENESS_MS);
            usleep(3 * LIVENESS_MS * 1000);
        }
        if (rank == victim && round == 2) {
            int fd[2];
            if (pipe(fd) != 0) return 1;
            pid_t w = fork();
            if (w == 0) { /* the writer: wakes the reader late */
                usleep(3 * LIVENESS_MS * 1000);
                char c = 1;
                _exit(write(fd[1], &c, 1) == 1 ? 0 : 1);
            }
            xt_log("blocked in read() for %d ms", 3 * LIVENESS_MS);
            char c;
            if (read(fd[0], &c, 1) != 1) return 1;
            close(fd[0]);
            close(fd[1]);
        }
        double t = xt_now();
        XT_REQUIRE_OK(xc_allreduce(&x, &y, 1, XC_INT32, XC_SUM, comm));
        XT_CHECK_INT(y, ==, want);
        xt_log("round %d: allreduce done after %.2f s", round, xt_now() - t);
    }
    /* A 1 MiB one too, after the silence (sockets still good). */
    static float a[ELEMS], b[ELEMS];
    for (int k = 0; k < ELEMS; k++) a[k] = 1.0f;
    XT_REQUIRE_OK(xc_allreduce(a, b, ELEMS, XC_FLOAT32, XC_SUM, comm));
    XT_CHECK_DBL(b[ELEMS - 1], ==, (double)size);
    XT_REQUIRE_OK(xc_comm_destroy(comm));
    return xt_result();
}

static int config_rank(int rank, int size)
{
    (void)rank;
    (void)size;
    setenv("XCOLL_HEARTBEAT_MS", "1000", 1);
    setenv("XCOLL_LIVENESS_MS", "2000", 1);
    xc_comm_t *comm = NULL;
    xc_result_t rc = xc_comm_init_env(&comm, NULL);
    xt_log("init returned %s: \"%s\"", xc_err_name(rc), xc_last_error());
    XT_CHECK_RC(rc, XC_ERR_INVALID);
    XT_CHECK_INT(xt_has(xc_last_error(), "XCOLL_LIVENESS_MS"), ==, 1);
    if (rc == XC_OK) xc_comm_destroy(comm);
    return xt_result();
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (strcmp(scenario, "p2p") == 0) return p2p_rank(rank, size);
    if (strcmp(scenario, "slow") == 0) return slow_rank(rank, size);
    if (strcmp(scenario, "config") == 0) return config_rank(rank, size);
    if (strcmp(scenario, "beatfull") == 0) return beatfull_rank(rank, size);
    if (strcmp(scenario, "resume") == 0) return resume_rank(rank, size);
    return loop_rank(rank, size);
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"stop",   "stop0",    "p2p",   "slow",
                                        "config", "beatfull", "resume"};
    scenario = XT_SCENARIO(argc, argv, known);
    xt_init(argv[0], scenario);
    if (strcmp(scenario, "stop0") == 0) victim = 0;
    if (strcmp(scenario, "resume") == 0) victim = 1;
    char v[32];
    snprintf(v, sizeof v, "%d", HEARTBEAT_MS);
    setenv("XCOLL_HEARTBEAT_MS", v, 1);
    snprintf(v, sizeof v, "%d", LIVENESS_MS);
    setenv("XCOLL_LIVENESS_MS", v, 1);
    int size = !strcmp(scenario, "config")                                 ? 1
               : !strcmp(scenario, "beatfull") || !strcmp(scenario, "resume") ? 2
                                                                               : NRANKS;
    int resume = !strcmp(scenario, "resume");
    xt_job_t job;
    if (xt_job_start(&job, size, rank_main, NULL, DEADLINE_MS, 50) != 0) return 1;
    int stops = !strcmp(scenario, "stop") || !strcmp(scenario, "stop0") ||
                !strcmp(scenario, "p2p");
    if (stops) {
        job.may_die[victim] = 1;
        /* Kill the stopped rank once every survivor is done with its checks
         * (or has failed), at the latest after 40 s. */
        xt_wait_survivors(&job, victim, 40);
        kill(job.pid[victim], SIGKILL);
    }
    if (resume) {
        xt_wait_survivors(&job, victim, 40);
        kill(job.pid[victim], SIGCONT);
    }
    xt_job_wait(&job, 45);
    for (int r = 0; r < size; r++) {
        if (stops && r == victim) xt_expect_signal(&job, r, SIGKILL);
        else xt_expect_exit(&job, r, 0);
    }
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
