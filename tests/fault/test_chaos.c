/*
 * test_chaos.c -- random failures at random points of random collectives.
 *
 * Usage: test_chaos TRIALS [SEED]
 *
 * Each trial starts a job of 4..8 ranks (more ranks than cores is part of
 * the test) that runs an endless sequence of collectives drawn from the
 * trial's seed -- all-reduce, broadcast, reduce, all-gather, reduce-scatter,
 * all-to-all, barrier, and a point-to-point ring exchange, of random sizes
 * (0 .. 1 MiB), through whichever algorithm the model picks -- checking
 * every all-reduce's result.  After a random number of operations of a
 * random rank (rank 0, the store's host, included) the driver SIGKILLs or
 * SIGSTOPs that rank, a random 0..3 ms later.  Every survivor must fail
 * with XC_ERR_PEER_LOST naming the victim, within 2 s of the kill, or of
 * the liveness timeout after the stop; nothing hangs (every rank has an
 * alarm, the driver a deadline), nothing crashes (every survivor exits 0),
 * and no shared-memory segment of the job is left in /dev/shm.
 *
 * XCOLL_HEARTBEAT_MS=200, XCOLL_LIVENESS_MS=1000, operation deadline 60 s
 * (so a stop can only be found by the heartbeat).  The CI runs a few
 * trials; `tests/fault/chaos.sh` (or this program with 200) the full run.
 */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LIVENESS_MS 1000
#define HEARTBEAT_MS 200
#define DEADLINE_MS 60000
#define MAX_ELEMS (256 * 1024)
#define GRACE_S 2.0

typedef struct trial {
    unsigned seed;
    int size, victim, stop, after;
} trial_t;

/* The same pseudo-random stream on every rank (and the driver). */
static unsigned next(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

static size_t pick_count(unsigned *s)
{
    switch (next(s) % 4) {
    case 0: return 0;
    case 1: return 1 + next(s) % 64;
    case 2: return 1 + next(s) % 4096;
    default: return 1 + next(s) % MAX_ELEMS;
    }
}

/* One operation of the sequence; XC_OK or the failure. */
static xc_result_t one_op(xc_comm_t *comm, unsigned *s, float *a, float *b, int rank, int size)
{
    int kind = (int)(next(s) % 8);
    size_t n = pick_count(s);
    int root = (int)(next(s) % (unsigned)size);
    size_t per = n / (size_t)size;
    switch (kind) {
    case 0: {
        for (size_t k = 0; k < n; k++) a[k] = (float)(rank + 1);
        xc_result_t rc = xc_allreduce(a, b, n, XC_FLOAT32, XC_SUM, comm);
        float want = (float)(size * (size + 1) / 2);
        if (rc == XC_OK && n && (b[0] != want || b[n - 1] != want))
            xt_fail(__FILE__, __LINE__, "allreduce of %zu: %g/%g, want %g", n, b[0], b[n - 1],
                    want);
        return rc;
    }
    case 1: return xc_bcast(a, n, XC_FLOAT32, root, comm);
    case 2: return xc_reduce(a, b, n, XC_FLOAT32, XC_MAX, root, comm);
    case 3: return xc_allgather(a, b, per, XC_FLOAT32, comm);
    case 4: return xc_reduce_scatter(a, b, per, XC_FLOAT32, XC_SUM, comm);
    case 5: return xc_alltoall(a, b, per, XC_FLOAT32, comm);
    case 6: return xc_barrier(comm);
    default: {
        int to = (rank + 1) % size, from = (rank + size - 1) % size;
        xc_request_t *rq = NULL;
        xc_result_t rc = xc_irecv(b, n, XC_FLOAT32, from, 3, comm, &rq);
        if (rc != XC_OK) return rc;
        rc = xc_send(a, n, XC_FLOAT32, to, 3, comm);
        xc_result_t rc2 = xc_request_wait(rq);
        xc_request_free(rq);
        return rc != XC_OK ? rc : rc2;
    }
    }
}

static int rank_main(int rank, int size, void *arg)
{
    const trial_t *t = arg;
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) {
        atomic_store(&xt_shm->flag[rank], 1);
        return 1;
    }
    float *a = calloc(MAX_ELEMS, sizeof *a), *b = calloc(MAX_ELEMS, sizeof *b);
    if (!a || !b) return 1;
    unsigned s = t->seed;
    xc_result_t rc = XC_OK;
    long it;
    for (it = 0; it < 1000000 && rc == XC_OK && !xt_failures; it++) {
        rc = one_op(comm, &s, a, b, rank, size);
        atomic_store(&xt_shm->progress[rank], it + 1);
    }
    free(a);
    free(b);
    if (rank == t->victim) {
        xt_fail(__FILE__, __LINE__, "the victim ended its loop: %s", xc_err_name(rc));
        return 1;
    }
    long long hit = atomic_load(&xt_shm->stamp_ns[t->victim]);
    double since = hit ? xt_now() - (double)hit / 1e9 : -1.0;
    double bound = (t->stop ? LIVENESS_MS / 1000.0 : 0) + GRACE_S;
    const char *msg = xc_comm_last_error(comm);
    if (rc != XC_ERR_PEER_LOST || !hit || since >= bound || !xt_mentions_rank(msg, t->victim))
        xt_log("op %ld: %s %.3f s after the %s (bound %.1f s): \"%s\"", it, xc_err_name(rc),
               since, t->stop ? "stop" : "kill", bound, msg);
    atomic_store(&xt_shm->stamp_ns[rank], (long long)(since * 1e6)); /* us, for the driver */
    XT_CHECK_RC(rc, XC_ERR_PEER_LOST);
    XT_CHECK_INT(hit, !=, 0);
    XT_CHECK_DBL(since, <, bound);
    XT_CHECK_RANK(msg, t->victim);
    xt_sync(0, size - 1, 30);
    atomic_store(&xt_shm->flag[rank], 2);
    xc_comm_destroy(comm);
    return xt_result();
}

static double g_worst[2]; /* slowest detection, kill / stop (s) */

static int run_trial(int k, trial_t *t)
{
    int failures_before = atomic_load(&xt_failures);
    xt_job_t job;
    if (xt_job_start(&job, t->size, rank_main, t, DEADLINE_MS, 60) != 0) return 1;
    job.may_die[t->victim] = 1;
    /* Wait for the victim's `after`-th operation (or a failure), then a
     * random 0..3 ms, so the signal lands anywhere in an operation. */
    double end = xt_now() + 30;
    while (atomic_load(&xt_shm->progress[t->victim]) < t->after && xt_now() < end &&
           !atomic_load(&xt_shm->broken) && !atomic_load(&xt_shm->flag[t->victim]))
        usleep(200);
    usleep((useconds_t)(rand() % 3000));
    atomic_store(&xt_shm->stamp_ns[t->victim], xt_now_ns());
    kill(job.pid[t->victim], t->stop ? SIGSTOP : SIGKILL);
    long long at = atomic_load(&xt_shm->progress[t->victim]);
    /* A stopped victim is killed once the survivors are done. */
    xt_wait_survivors(&job, t->victim, 30);
    if (t->stop) kill(job.pid[t->victim], SIGKILL);
    xt_job_wait(&job, 40);
    for (int r = 0; r < t->size; r++) {
        if (r == t->victim) xt_expect_signal(&job, r, SIGKILL);
        else xt_expect_exit(&job, r, 0);
    }
    XT_CHECK_INT(xt_shm_leftovers(&job), ==, 0);
    double worst = 0;
    for (int r = 0; r < t->size; r++)
        if (r != t->victim && atomic_load(&xt_shm->stamp_ns[r]) / 1e6 > worst)
            worst = atomic_load(&xt_shm->stamp_ns[r]) / 1e6;
    if (worst > g_worst[t->stop]) g_worst[t->stop] = worst;
    int bad = atomic_load(&xt_failures) != failures_before;
    xt_log("trial %d: %d ranks, %s rank %d after %lld ops (seed %u), last survivor told "
           "after %.3f s: %s", k, t->size, t->stop ? "SIGSTOP" : "SIGKILL", t->victim, at,
           t->seed, worst, bad ? "FAILED" : "ok");
    return bad;
}

int main(int argc, char **argv)
{
    int trials = argc > 1 ? atoi(argv[1]) : 0;
    unsigned seed = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : (unsigned)time(NULL);
    if (trials < 1) {
        fprintf(stderr, "usage: %s TRIALS [SEED]\n", argv[0]);
        return 2;
    }
    xt_init(argv[0], "chaos");
    char v[32];
    snprintf(v, sizeof v, "%d", HEARTBEAT_MS);
    setenv("XCOLL_HEARTBEAT_MS", v, 1);
    snprintf(v, sizeof v, "%d", LIVENESS_MS);
    setenv("XCOLL_LIVENESS_MS", v, 1);
    xt_log("%d trials, seed %u", trials, seed);
    srand(seed);
    int failed = 0, kills = 0, stops = 0;
    double t0 = xt_now();
    for (int k = 0; k < trials; k++) {
        trial_t t;
        t.seed = (unsigned)rand();
        t.size = 4 + rand() % 5;
        t.victim = rand() % t.size;
        t.stop = rand() % 2;
        t.after = 1 + rand() % 40;
        kills += !t.stop;
        stops += t.stop;
        failed += run_trial(k, &t);
    }
    xt_log("%d trials (%d SIGKILL, %d SIGSTOP) in %.0f s: %d failed; slowest survivor: "
           "%.3f s after a kill, %.3f s after a stop (liveness %d ms)", trials, kills, stops,
           xt_now() - t0, failed, g_worst[0], g_worst[1], LIVENESS_MS);
    return failed ? 1 : xt_result();
}
