/*
 * calibrate.c -- xc_profile_calibrate: the thorough measurement behind
 * `xcoll-perf --calibrate`, written as a profile file (profile_io.c).
 *
 * It lives in the library, not in the tool, so that the creation-time
 * quick measurement and the calibration are one piece of code (measure.c)
 * with two plans: xcoll-perf links only the public API, and the reduction
 * kernels and the internal topology are not part of it.
 *
 * Every link class the communicator's ranks can reach is measured, using
 * sub-communicators for the classes the communicator itself does not use:
 * the ranks of rank 0's node with shared memory (the "shm" class and the
 * synchronisation cost, also on 2 ranks to separate its per-rank part) and
 * without it (loopback TCP, "tcp_local").  Rank 0 writes the file; every
 * rank returns rank 0's result.
 */
#include "../algo/algos.h"

#include <stdio.h>
#include <string.h>

/* A child of the first `n` ranks of rank 0's node (key = rank, so rank 0
 * stays rank 0), with shared memory or not; NULL on ranks outside it. */
static xc_result_t node_child(xc_comm_t *comm, int n, int shm, xc_comm_t **child)
{
    int in = comm->node_of[comm->rank] == comm->node_of[0] && comm->local_rank < n;
    /* The child inherits the parent's resolved settings; XCOLL_SHM is one
     * of them, so flip it for the split only (nothing else runs on comm). */
    int saved = comm->cfg.shm;
    comm->cfg.shm = shm && saved;
    xc_result_t rc = xc_comm_split(comm, in ? 0 : XC_COLOR_NONE, comm->rank, child, NULL);
    comm->cfg.shm = saved;
    return rc;
}

static xc_result_t run(xc_comm_t *comm, xc__profile_t *p)
{
    uint32_t need = xc__model_needs(comm);
    /* What this communicator measures itself: its links (shm only with
     * channels) and the host. */
    XC_CHECK(xc__measure(comm, need, 1, p));
    int node0 = 0;
    for (int r = 0; r < comm->size; r++) node0 += comm->node_of[r] == comm->node_of[0];
    /* Shared memory on rank 0's node, if this communicator has none. */
    if (node0 >= 2 && !(need & XC__HAVE_SHM)) {
        xc_comm_t *c = NULL;
        XC_CHECK(node_child(comm, node0, 1, &c));
        xc_result_t rc = XC_OK;
        if (c && c->shm && c->chans) {
            xc__profile_t q = *p;
            rc = xc__measure(c, XC__HAVE_SHM, 1, &q);
            if (rc == XC_OK && comm->rank == 0) {
                p->link[XC__LINK_SHM] = q.link[XC__LINK_SHM];
                p->sync_alpha = q.sync_alpha, p->sync_per_rank = q.sync_per_rank;
                p->have |= XC__HAVE_SHM;
            }
        }
        xc_comm_destroy(c);
        XC_CHECK(rc);
    }
    /* Loopback TCP between two ranks of rank 0's node, if not measured. */
    if (node0 >= 2 && !(need & XC__HAVE_TCP_LOCAL)) {
        xc_comm_t *c = NULL;
        XC_CHECK(node_child(comm, 2, 0, &c));
        xc_result_t rc = XC_OK;
        if (c) {
            xc__profile_t q = *p;
            rc = xc__measure(c, XC__HAVE_TCP_LOCAL, 1, &q);
            if (rc == XC_OK && comm->rank == 0) {
                p->link[XC__LINK_TCP_LOCAL] = q.link[XC__LINK_TCP_LOCAL];
                p->have |= XC__HAVE_TCP_LOCAL;
            }
        }
        xc_comm_destroy(c);
        XC_CHECK(rc);
    }
    /* The synchronisation on 2 ranks as well: sync(L) = alpha + (L-1) x
     * per_rank through both points. */
    if (node0 > 2 && comm->shm_ok) { /* agreed (XCOLL_SHM is each rank's own) */
        xc_comm_t *c = NULL;
        XC_CHECK(node_child(comm, 2, 1, &c));
        xc_result_t rc = XC_OK;
        if (c && c->shm && c->chans) {
            xc__profile_t q = *p;
            rc = xc__measure(c, XC__HAVE_SHM, 1, &q);
            if (rc == XC_OK && comm->rank == 0 && (p->have & XC__HAVE_SHM)) {
                double sL = p->sync_alpha + (node0 - 1) * p->sync_per_rank;
                double s2 = q.sync_per_rank; /* measured on 2 ranks: alpha 0 */
                double per = (sL - s2) / (node0 - 2);
                p->sync_per_rank = per > 0 ? per : 0;
                p->sync_alpha = s2 - p->sync_per_rank > 0 ? s2 - p->sync_per_rank : 0;
            }
        }
        xc_comm_destroy(c);
        XC_CHECK(rc);
    }
    return XC_OK;
}

xc_result_t xc_profile_calibrate(xc_comm_t *comm, const char *path)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_profile_calibrate: comm is NULL");
    /* Rank 0's path decides for everyone, before anyone starts measuring. */
    int32_t ok = comm->rank != 0 || (path && *path);
    xc_result_t rc = xc_bcast(&ok, 1, XC_INT32, 0, comm);
    if (rc != XC_OK) return xc__comm_fail(comm, rc);
    if (!ok)
        return xc__comm_fail(comm, xc__err(XC_ERR_INVALID, "xc_profile_calibrate: %s",
                                           comm->rank ? "rank 0's path is NULL or empty"
                                                      : "path is NULL or empty"));
    xc__profile_t p;
    memset(&p, 0, sizeof p);
    snprintf(p.source, sizeof p.source, "xc_profile_calibrate, %d ranks, %d nodes", comm->size,
             comm->nnodes);
    rc = run(comm, &p);
    if (rc != XC_OK) return xc__comm_fail(comm, rc);
    /* Rank 0 writes; everyone returns its result. */
    int32_t res[2] = {XC_OK, 0};
    if (comm->rank == 0) res[0] = xc__profile_write(&p, path);
    rc = xc_bcast(res, 2, XC_INT32, 0, comm);
    if (rc != XC_OK) return xc__comm_fail(comm, rc);
    if (res[0] != XC_OK && comm->rank != 0)
        return xc__comm_fail(comm, xc__err((xc_result_t)res[0],
                                           "rank 0 could not write the profile"));
    return xc__comm_fail(comm, (xc_result_t)res[0]);
}
