/*
 * model_init.c -- a new communicator's profile, the same on every rank.
 *
 * Rank 0 decides where the profile comes from -- the file XCOLL_PROFILE
 * names, else the profile this process already uses (the parent's, for a
 * child of xc_comm_split: the process keeps the last agreed profile), else
 * nothing -- and which parts this communicator needs but the profile lacks
 * (a link class not yet measured).  It broadcasts that decision; all ranks
 * measure the missing parts together (measure.c, a few milliseconds), and
 * rank 0's profile is broadcast, so every rank chooses algorithms from the
 * same numbers.  A profile file that rank 0 cannot read fails creation on
 * every rank with XC_ERR_INVALID naming the file and the problem.
 *
 * Until this returns the communicator has no profile and the selector uses
 * its bootstrap rule (select.c): the broadcasts here are such calls.
 */
#include "../algo/algos.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The process's profile: the last one agreed by a communicator. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static xc__profile_t g_proc;
static int g_have_proc;

typedef struct decision {
    int32_t status;     /* XC_OK, or rank 0's failure to read the file */
    uint32_t missing;   /* XC__HAVE_* parts to measure together */
    char msg[XC__ERRMSG_LEN];
} decision_t;

static void have_str(uint32_t have, char *buf, size_t cap)
{
    static const char *names[] = {"shm", "tcp_local", "tcp_net", "host"};
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < 4; i++)
        if (have & (1u << i))
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "," : "", names[i]);
    if (!n) snprintf(buf, cap, "nothing");
}

xc_result_t xc__model_init(xc_comm_t *comm)
{
    /* The profile and, behind it, the selector's state: one block. */
    xc__profile_t *p = calloc(1, sizeof *p + xc__algo_sel_bytes());
    decision_t *d = calloc(1, sizeof *d);
    xc_result_t rc = XC_OK;
    uint64_t t0 = xc__now_ns();
    if (!p || !d) {
        rc = xc__err(XC_ERR_NOMEM, "out of memory creating the cost model");
        goto out;
    }
    if (comm->rank == 0) {
        const char *path = getenv("XCOLL_PROFILE");
        if (path && *path) {
            rc = xc__profile_read(path, p);
            if (rc != XC_OK) {
                d->status = rc;
                snprintf(d->msg, sizeof d->msg, "XCOLL_PROFILE: %s", xc__tls_error());
            }
        } else {
            pthread_mutex_lock(&g_mu);
            if (g_have_proc) *p = g_proc;
            pthread_mutex_unlock(&g_mu);
        }
        d->missing = xc__model_needs(comm) & ~p->have;
    }
    /* Every rank learns rank 0's decision, even a failure, so none hangs. */
    XC_CHECK_GOTO(xc_bcast(d, sizeof *d, XC_UINT8, 0, comm), rc, out);
    if (d->status != XC_OK) {
        rc = xc__err((xc_result_t)d->status, "%s%s", comm->rank ? "rank 0: " : "", d->msg);
        goto out;
    }
    if (d->missing) {
        XC_CHECK_GOTO(xc__measure(comm, d->missing, 0, p), rc, out);
        if (comm->rank == 0 && !(getenv("XCOLL_PROFILE") && *getenv("XCOLL_PROFILE")))
            snprintf(p->source, sizeof p->source, "a measurement at creation");
    }
    XC_CHECK_GOTO(xc_bcast(p, XC__PROFILE_DATA_BYTES, XC_UINT8, 0, comm), rc, out);
    p->sel = NULL;
    pthread_mutex_lock(&g_mu);
    g_proc = *p;
    g_have_proc = 1;
    pthread_mutex_unlock(&g_mu);
    comm->profile = p;
    rc = xc__algo_sel_init(comm, p + 1);
    if (rc != XC_OK) {
        comm->profile = NULL;
        goto out;
    }
    p = NULL;
    /* The point-to-point threshold from the profile's shared-memory link
     * (where the ring stops leading, measure.c lead_end), so that what the
     * model prices is what the channels do; every rank holds the same
     * profile, so the ranks agree. */
    if (comm->profile->have & XC__HAVE_SHM)
        xc__comm_set_p2p_cma_min(comm, comm->profile->link[XC__LINK_SHM].big_from);
    if (xc__log_level() >= XC__LOG_INFO) {
        char h[64], m[64];
        have_str(comm->profile->have, h, sizeof h);
        have_str(d->missing, m, sizeof m);
        XC_INFO("cost model: profile from %s (%s); measured now: %s; %.2f ms",
                comm->profile->source, h, m, (double)(xc__now_ns() - t0) * 1e-6);
    }
out:
    xc__profile_free(p);
    free(d);
    return rc;
}
