/*
 * test_peer_death.c -- a rank that dies turns into XC_ERR_PEER_LOST on
 * every survivor, promptly, never a hang.
 *
 * Usage: test_peer_death SCENARIO, one of
 *   raise    4 ranks loop on 1 MiB allreduces; rank 2 raise(SIGKILL)s itself
 *            after 10 iterations
 *   sigkill  the same, but the driver SIGKILLs rank 2 at an arbitrary point
 *            of its 10th+ allreduce
 *   exit     rank 2 calls exit(0) mid-loop without destroying its comm
 *   raise0   as raise, but the victim is rank 0, the host of the store
 *   leave    4 ranks loop on 4 KiB broadcasts from rank 0 (shared memory:
 *            the root reads nobody, it waits only to reuse its slots); rank
 *            2 destroys its communicator after 10 of them and exits 0 --
 *            the root must find it gone while waiting for it to read
 *   p2p      no collective: ranks 1 and 3 wait in a recv from rank 2, rank 0
 *            in a recv from rank 1 (alive; only the poison can end it) when
 *            the driver SIGKILLs rank 2
 *   init     rank 2 never joins xc_comm_init: the others get XC_ERR_TIMEOUT
 *            after XCOLL_TIMEOUT_MS=2000, naming rank 2
 *   nostore  rank 0 (the store host) never starts: the others get
 *            XC_ERR_TIMEOUT after 2000 ms, naming the store address
 *
 * With XCOLL_TIMEOUT_MS=20000 the survivors must return XC_ERR_PEER_LOST
 * less than 5 s after the death (time stamped by the victim or the driver
 * in shared memory), name the victim in xc_comm_last_error(), fail fast
 * afterwards.  Survivors keep their communicator until all three have
 * checked, so that only the victim's death can be the cause they report.
 */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int victim = 2; /* the rank that dies (raise0: 0) */
#define ELEMS (256 * 1024) /* 1 MiB of fp32 */
#define KILL_AT 10
#define MAX_ITERS 100000
#define DEADLINE_MS 20000
#define PROMPT_S 5.0

static const char *scenario;
static float *sendb, *recvb;

/* The victim's behaviour at iteration `it` (before issuing it). */
static void maybe_die(int it)
{
    if (it != KILL_AT) return;
    if (strcmp(scenario, "raise") == 0 || strcmp(scenario, "raise0") == 0) {
        xt_log("raising SIGKILL at iteration %d", it);
        atomic_store(&xt_shm->stamp_ns[victim], xt_now_ns());
        raise(SIGKILL);
    } else if (strcmp(scenario, "exit") == 0) {
        xt_log("calling exit(0) at iteration %d without destroy", it);
        atomic_store(&xt_shm->stamp_ns[victim], xt_now_ns());
        exit(0);
    }
}

static int loop_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) {
        atomic_store(&xt_shm->flag[rank], 1);
        return 1;
    }
    sendb = malloc(ELEMS * sizeof(float));
    recvb = malloc(ELEMS * sizeof(float));
    if (!sendb || !recvb) return 1;
    for (int k = 0; k < ELEMS; k++) sendb[k] = (float)(rank + 1);
    const float want = (float)(size * (size + 1) / 2);

    const int leave = strcmp(scenario, "leave") == 0;
    const size_t bcast_n = 1024; /* leave: 4 KiB */
    int rc = XC_OK, it;
    for (it = 0; it < MAX_ITERS; it++) {
        if (rank == victim) maybe_die(it);
        if (leave && rank == victim && it == KILL_AT) {
            xt_log("destroying the communicator at iteration %d", it);
            atomic_store(&xt_shm->stamp_ns[victim], xt_now_ns());
            xc_comm_destroy(comm);
            free(sendb);
            free(recvb);
            return xt_result();
        }
        if (leave) {
            float *b = rank == 0 ? sendb : recvb;
            rc = xc_bcast(b, bcast_n, XC_FLOAT32, 0, comm);
            if (rc != XC_OK) break;
            if (b[0] != 1.0f || b[bcast_n - 1] != 1.0f) {
                xt_fail(__FILE__, __LINE__, "iteration %d: broadcast got %g/%g, want 1", it,
                        b[0], b[bcast_n - 1]);
                break;
            }
            atomic_store(&xt_shm->progress[rank], it + 1);
            continue;
        }
        rc = xc_allreduce(sendb, recvb, ELEMS, XC_FLOAT32, XC_SUM, comm);
        if (rc != XC_OK) break;
        if (recvb[0] != want || recvb[ELEMS - 1] != want) {
            xt_fail(__FILE__, __LINE__, "iteration %d: got %g/%g, want %g",
                    it, recvb[0], recvb[ELEMS - 1], want);
            break;
        }
        atomic_store(&xt_shm->progress[rank], it + 1);
    }
    if (rank == victim) {
        /* Only reached when the driver failed to kill us. */
        atomic_store(&xt_shm->flag[victim], 1);
        xt_fail(__FILE__, __LINE__, "victim survived %d iterations (%s)", it,
                xc_err_name(rc));
        return 1;
    }
    double now = xt_now();
    long long died = atomic_load(&xt_shm->stamp_ns[victim]);
    double since = died ? now - (double)died / 1e9 : -1.0;
    const char *msg = xc_comm_last_error(comm);
    xt_log("iteration %d returned %s %.3fs after the death: \"%s\"", it,
           xc_err_name(rc), since, msg);
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_INT(it, >=, KILL_AT - 1);
    XT_CHECK_INT(died, !=, 0);
    XT_CHECK_DBL(since, <, PROMPT_S);
    XT_CHECK_RANK(msg, victim);
    XT_CHECK_READABLE(msg);
    XT_CHECK_RC(xc_comm_status(comm), XC_ERR_PEER_LOST);

    double t = xt_now();
    XT_CHECK_RC(xc_allreduce(sendb, recvb, 16, XC_FLOAT32, XC_SUM, comm),
                XC_ERR_PEER_LOST);
    /* Point-to-point with a live peer also fails: the comm is poisoned. */
    int live = 0;
    while (live == rank || live == victim) live++;
    XT_CHECK_RC(xc_send(sendb, 4, XC_FLOAT32, live, 5, comm),
                XC_ERR_PEER_LOST);
    XT_CHECK_DBL(xt_now() - t, <, 0.5);

    xt_sync(0, size - 1, 30);
    t = xt_now();
    xc_comm_destroy(comm);
    XT_CHECK_DBL(xt_now() - t, <, PROMPT_S);
    free(sendb);
    free(recvb);
    return xt_result();
}

/* p2p: survivors post a receive, tell the driver, and wait on it. */
static int p2p_rank(int rank, int size)
{
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) {
        atomic_store(&xt_shm->flag[rank], 1);
        return 1;
    }
    XT_REQUIRE_OK(xc_barrier(comm));
    if (rank == victim) {
        atomic_store(&xt_shm->progress[rank], 1);
        sleep(30); /* until killed */
        atomic_store(&xt_shm->flag[rank], 1);
        xt_fail(__FILE__, __LINE__, "victim was not killed");
        return 1;
    }
    int32_t buf[1024];
    int from = rank == 0 ? 1 : victim;
    xc_request_t *req = NULL;
    XT_REQUIRE_OK(xc_irecv(buf, 1024, XC_INT32, from, 77, comm, &req));
    atomic_store(&xt_shm->progress[rank], 1);
    xc_result_t rc = xc_request_wait(req);
    long long died = atomic_load(&xt_shm->stamp_ns[victim]);
    double since = died ? xt_now() - (double)died / 1e9 : -1.0;
    const char *msg = xc_comm_last_error(comm);
    xt_log("recv from rank %d returned %s %.3fs after the death: \"%s\"",
           from, xc_err_name(rc), since, msg);
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_INT(died, !=, 0);
    XT_CHECK_DBL(since, <, PROMPT_S);
    XT_CHECK_RANK(msg, victim);
    XT_CHECK_READABLE(msg);
    xc_request_free(req);
    XT_CHECK_RC(xc_comm_status(comm), XC_ERR_PEER_LOST);
    xt_sync(0, size - 1, 30);
    xc_comm_destroy(comm);
    return xt_result();
}

/* init: rank 2 never calls xc_comm_init.  Rank 0 hosts the store and is
 * given 3 s instead of 2 s, so that the store outlives ranks 1 and 3's
 * deadline and each of them observes its own timeout. */
static int init_rank(int rank, int size)
{
    (void)size;
    if (rank == victim) {
        xt_log("not joining");
        return 0;
    }
    int timeout = rank == 0 ? 3000 : 2000;
    xc_config_t cfg = XC_CONFIG_INIT;
    cfg.timeout_ms = timeout;
    xc_comm_t *comm = NULL;
    double t = xt_now();
    xc_result_t rc = xc_comm_init_env(&comm, &cfg);
    double dt = xt_now() - t;
    xt_log("xc_comm_init_env returned %s after %.3fs: \"%s\"",
           xc_err_name(rc), dt, xc_last_error());
    XT_CHECK_RC(rc, XC_ERR_TIMEOUT);
    XT_CHECK_DBL(dt, >=, timeout / 1000.0 - 0.5);
    XT_CHECK_DBL(dt, <, timeout / 1000.0 + 3.0);
    XT_CHECK_RANK(xc_last_error(), victim);
    XT_CHECK_READABLE(xc_last_error());
    if (rc == XC_OK) xc_comm_destroy(comm);
    return xt_result();
}

/* nostore: rank 0 never starts, so nobody hosts the store. */
static int nostore_rank(int rank, int size)
{
    (void)size;
    if (rank == 0) return 0;
    xc_config_t cfg = XC_CONFIG_INIT;
    cfg.timeout_ms = 2000;
    xc_comm_t *comm = NULL;
    double t = xt_now();
    xc_result_t rc = xc_comm_init_env(&comm, &cfg);
    double dt = xt_now() - t;
    xt_log("xc_comm_init_env returned %s after %.3fs: \"%s\"",
           xc_err_name(rc), dt, xc_last_error());
    XT_CHECK_RC(rc, XC_ERR_TIMEOUT);
    XT_CHECK_DBL(dt, >=, 1.5);
    XT_CHECK_DBL(dt, <, 5.0);
    XT_CHECK_HAS(xc_last_error(), getenv("XCOLL_ADDR"));
    XT_CHECK_READABLE(xc_last_error());
    if (rc == XC_OK) xc_comm_destroy(comm);
    return xt_result();
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (strcmp(scenario, "init") == 0) return init_rank(rank, size);
    if (strcmp(scenario, "p2p") == 0) return p2p_rank(rank, size);
    if (strcmp(scenario, "nostore") == 0) return nostore_rank(rank, size);
    return loop_rank(rank, size);
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"raise", "sigkill", "exit", "init",
                                        "nostore", "raise0", "p2p", "leave"};
    scenario = XT_SCENARIO(argc, argv, known);
    xt_init(argv[0], scenario);
    if (strcmp(scenario, "raise0") == 0) victim = 0;
    xt_job_t job;
    if (xt_job_start(&job, 4, rank_main, NULL, DEADLINE_MS, 40) != 0)
        return 1;
    job.may_die[victim] = 1;

    if (strcmp(scenario, "sigkill") == 0) {
        /* Kill the victim while it is inside an allreduce: wait until it has
         * completed KILL_AT iterations, then a little (1 MiB allreduces take
         * milliseconds), so the kill lands mid-operation. */
        double end = xt_now() + 20;
        while (atomic_load(&xt_shm->progress[victim]) < KILL_AT &&
               !atomic_load(&xt_shm->flag[victim]) && xt_now() < end)
            usleep(500);
        usleep(1500);
        atomic_store(&xt_shm->stamp_ns[victim], xt_now_ns());
        kill(job.pid[victim], SIGKILL);
        xt_log("killed rank %d after %lld iterations", victim,
               (long long)atomic_load(&xt_shm->progress[victim]));
    } else if (strcmp(scenario, "p2p") == 0) {
        /* Kill the victim once every rank has posted its receive. */
        double end = xt_now() + 20;
        int ready = 0;
        while (ready < 4 && xt_now() < end) {
            ready = 0;
            for (int r = 0; r < 4; r++) {
                if (atomic_load(&xt_shm->flag[r])) end = 0; /* one failed */
                ready += atomic_load(&xt_shm->progress[r]) > 0;
            }
            usleep(500);
        }
        usleep(50000);
        atomic_store(&xt_shm->stamp_ns[victim], xt_now_ns());
        kill(job.pid[victim], SIGKILL);
        xt_log("killed rank %d with %d ranks waiting", victim, ready);
    }
    xt_job_wait(&job, 45);

    for (int r = 0; r < 4; r++) {
        if (r == victim && (strncmp(scenario, "raise", 5) == 0 ||
                            strcmp(scenario, "sigkill") == 0 ||
                            strcmp(scenario, "p2p") == 0))
            xt_expect_signal(&job, r, SIGKILL);
        else
            xt_expect_exit(&job, r, 0);
    }
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
