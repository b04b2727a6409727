/*
 * test_nomem.c -- a collective that cannot get its memory on one rank.
 *
 * Usage: test_nomem SCENARIO, one of
 *   coll  3 ranks over sockets.  Rank 1's large aligned allocations fail
 *         (this program interposes posix_memalign) while it calls a 4 MiB
 *         all-reduce, whose schedule needs scratch.  Rank 1 gets
 *         XC_ERR_NOMEM at once; ranks 0 and 2, already in the all-reduce
 *         (deadline 20 s), get XC_ERR_NOMEM too within 5 s, with a message
 *         naming rank 1 -- not a timeout after the deadline, and not a
 *         later call of rank 1's paired with their current one.  The
 *         communicator stays failed (the next barrier: XC_ERR_NOMEM on
 *         every rank) and is destroyed promptly.
 *   nb    the same with xc_iallreduce (the failure is returned by the call
 *         or by the wait).
 *
 * Before the change that added it (2026-12-06), rank 1 returned NOMEM
 * alone: its peers waited for it until their deadline.
 */
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LONG_MS 20000
#define COUNT ((size_t)1 << 20) /* floats: 4 MiB */

static const char *scenario;

/* posix_memalign of FAIL_FROM bytes or more fails while armed (this
 * process only; the library's schedule scratch comes from it). */
#define FAIL_FROM ((size_t)64 << 10)
static _Atomic int armed;
extern void *__libc_memalign(size_t align, size_t n);

int posix_memalign(void **p, size_t align, size_t n)
{
    if (atomic_load(&armed) && n >= FAIL_FROM) return ENOMEM;
    void *q = __libc_memalign(align, n);
    if (!q) return ENOMEM;
    *p = q;
    return 0;
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    xc_comm_t *comm = xt_comm_world(LONG_MS);
    if (!comm) return 1;
    float *buf = malloc(COUNT * sizeof *buf);
    if (!buf) return 1;
    for (size_t i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1);
    /* One that works first (and warms what a first call sets up). */
    XT_REQUIRE_OK(xc_allreduce(buf, buf, 1024, XC_FLOAT32, XC_SUM, comm));
    XT_CHECK_DBL((double)buf[7], ==, (double)(size * (size + 1) / 2));
    xt_sync(0, size, 30);
    if (rank == 1) atomic_store(&armed, 1);
    double t = xt_now();
    xc_result_t rc;
    if (strcmp(scenario, "nb") == 0) {
        xc_request_t *req = NULL;
        rc = xc_iallreduce(buf, buf, COUNT, XC_FLOAT32, XC_SUM, comm, &req);
        if (rc == XC_OK) {
            rc = xc_request_wait(req);
            xc_request_free(req);
        } else {
            XT_CHECK_INT(req == NULL, ==, 1);
        }
    } else {
        rc = xc_allreduce(buf, buf, COUNT, XC_FLOAT32, XC_SUM, comm);
    }
    double dt = xt_now() - t;
    atomic_store(&armed, 0);
    const char *msg = xc_comm_last_error(comm);
    xt_log("4 MiB all-reduce with rank 1 out of memory: %s after %.3fs: \"%s\"",
           xc_err_name(rc), dt, msg);
    XT_CHECK_RC(rc, XC_ERR_NOMEM);
    XT_CHECK_DBL(dt, <, 5.0);
    XT_CHECK_RANK(msg, 1);
    XT_CHECK_READABLE(msg);
    XT_CHECK_RC(xc_comm_status(comm), XC_ERR_NOMEM);
    t = xt_now();
    XT_CHECK_RC(xc_barrier(comm), XC_ERR_NOMEM);
    XT_CHECK_DBL(xt_now() - t, <, 0.5);
    xt_sync(1, size, 30);
    t = xt_now();
    xc_comm_destroy(comm);
    XT_CHECK_DBL(xt_now() - t, <, 3.0);
    free(buf);
    return xt_result();
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"coll", "nb"};
    scenario = XT_SCENARIO(argc, argv, known);
    xt_init(argv[0], scenario);
    setenv("XCOLL_SHM", "0", 1); /* sockets: the schedule's scratch is needed */
    xt_job_t job;
    if (xt_job_start(&job, 3, rank_main, NULL, -1, 40) != 0) return 1;
    return xt_job_finish(&job, 45);
}
