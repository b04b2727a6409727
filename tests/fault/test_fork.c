/*
 * test_fork.c -- a forked child (a data-loader worker) and the parent's
 * communicator.
 *
 * 3 ranks on one node (shared memory), and, with the scenario "tcp", on
 * three "nodes" (sockets only).  Every rank forks a child after a few
 * collectives.  The child -- which inherits a copy of the communicator,
 * the parent's sockets and, were it not for MADV_DONTFORK, its segments --
 * calls a collective, a send and revoke (XC_ERR_INVALID, naming the fork)
 * and abort (nothing: the parents' communicator goes on), then
 * xc_comm_destroy (XC_OK) -- or, on rank 1, exits without it -- and exits
 * 0: no crash, no hang (the parent's mutex may be held at the fork), no
 * goodbye on the parent's sockets, no write to its segments.  Meanwhile and
 * after, the parents' collectives (small and 1 MiB all-reduces, a barrier)
 * give the right results; after their destroy nothing is left in
 * /dev/shm.
 *
 * Before the change that added it (2026-12-06), the child's destroy died
 * of SIGSEGV writing its "gone" flag into a segment it had not inherited,
 * and over sockets its goodbye made the parents fail with
 * XC_ERR_PEER_LOST.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (256 * 1024) /* floats: 1 MiB */

static const char *scenario;

static int allreduces(xc_comm_t *comm, int rank, int size, int rounds, float *a, float *b)
{
    for (int i = 0; i < rounds; i++) {
        size_t n = i % 2 ? BIG : 7;
        for (size_t k = 0; k < n; k++) a[k] = (float)(rank + 1 + i);
        xc_result_t rc = xc_allreduce(a, b, n, XC_FLOAT32, XC_SUM, comm);
        if (rc != XC_OK) {
            xt_fail(__FILE__, __LINE__, "allreduce %d: %s \"%s\"", i, xc_err_name(rc),
                    xc_comm_last_error(comm));
            return 1;
        }
        float want = (float)(size * (size + 1) / 2 + size * i);
        if (b[0] != want || b[n - 1] != want) {
            xt_fail(__FILE__, __LINE__, "allreduce %d: got %g / %g, want %g", i, b[0],
                    b[n - 1], want);
            return 1;
        }
    }
    return 0;
}

/* The forked child: every call but destroy refused; destroy harmless. */
static int child(xc_comm_t *comm, int rank)
{
    xt_set_tag("rank %d's child", rank);
    float x = 1, y = 0;
    xc_result_t rc = xc_allreduce(&x, &y, 1, XC_FLOAT32, XC_SUM, comm);
    XT_CHECK_RC(rc, XC_ERR_INVALID);
    XT_CHECK_INT(xt_has(xc_last_error(), "forked"), ==, 1);
    XT_CHECK_RC(xc_barrier(comm), XC_ERR_INVALID);
    XT_CHECK_RC(xc_send(&x, 1, XC_FLOAT32, (rank + 1) % 3, 5, comm), XC_ERR_INVALID);
    XT_CHECK_RC(xc_comm_revoke(comm), XC_ERR_INVALID);
    XT_CHECK_RC(xc_comm_abort(comm), XC_OK); /* does nothing here: the parents go on */
    xt_log("calls refused: \"%s\"", xc_last_error());
    if (rank == 1) _exit(xt_result()); /* ends without destroy */
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    xt_log("destroyed its copy");
    return xt_result();
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (!strcmp(scenario, "tcp")) {
        char id[32];
        snprintf(id, sizeof id, "fork-node-%d", rank);
        setenv("XCOLL_NODE_ID", id, 1);
    }
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    float *a = malloc(BIG * sizeof *a), *b = malloc(BIG * sizeof *b);
    if (!a || !b) return 1;
    if (allreduces(comm, rank, size, 4, a, b)) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) _exit(child(comm, rank));
    /* The parent goes on while its child runs. */
    if (allreduces(comm, rank, size, 6, a, b)) return 1;
    int st = 0;
    XT_CHECK_INT(waitpid(pid, &st, 0), ==, pid);
    XT_CHECK_INT(WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st), ==, 0);
    XT_REQUIRE_OK(xc_barrier(comm));
    if (allreduces(comm, rank, size, 6, a, b)) return 1;
    XT_REQUIRE_OK(xc_comm_destroy(comm));
    free(a);
    free(b);
    return xt_result();
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"shm", "tcp"};
    scenario = XT_SCENARIO(argc, argv, known);
    xt_init(argv[0], scenario);
    xt_job_t job;
    if (xt_job_start(&job, 3, rank_main, NULL, 20000, 50) != 0) return 1;
    xt_job_wait(&job, 55);
    xt_expect_all_ok(&job);
    XT_CHECK_INT(xt_shm_leftovers(&job), ==, 0);
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
