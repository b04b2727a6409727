/*
 * alltoall_pairwise.c -- all-to-all and all-to-all-v by direct exchange:
 * every block goes straight to its destination.  All N-1 sends and receives
 * are posted in one round (the receive of block i goes straight into its
 * final place), so the transport moves them concurrently; the rank's own
 * block is copied locally.  Sends are ordered r+1, r+2, ... so that not
 * every rank starts on the same peer.  In place (all-to-all only) copies
 * the input to scratch first.
 */
#include "algos.h"

#include <stdlib.h>

static void exchange(xc__sched_t *s, int r, int n, const char *in, char *out, size_t es,
                     const size_t *sc, const size_t *sd, const size_t *rc, const size_t *rd)
{
    xc__sched_copy(s, out + rd[r] * es, in + sd[r] * es, sc[r] * es);
    xc__sched_round(s);
    for (int k = 1; k < n; k++) {
        int to = (r + k) % n, from = xc__mod(r - k, n);
        xc__sched_send(s, to, in + sd[to] * es, sc[to] * es);
        xc__sched_recv(s, from, out + rd[from] * es, rc[from] * es);
    }
    xc__sched_round(s);
}

xc_result_t xc__build_alltoall_pairwise(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size;
    size_t es = xc__dtype_size(a->dtype), bb = a->count * es;
    const char *in = a->sbuf;
    size_t *cd = malloc(2 * (size_t)n * sizeof *cd);
    if (!cd) return xc__err(XC_ERR_NOMEM, "out of memory");
    char *scratch = NULL;
    if (a->sbuf == a->rbuf && bb) {
        scratch = xc__sched_scratch(s, (size_t)n * bb);
        xc__sched_copy(s, scratch, a->sbuf, (size_t)n * bb);
        xc__sched_round(s);
        in = scratch;
    }
    for (int i = 0; i < n; i++) cd[i] = a->count, cd[n + i] = (size_t)i * a->count;
    exchange(s, comm->rank, n, in, a->rbuf, es, cd, cd + n, cd, cd + n);
    free(cd);
    return XC_OK;
}

xc_result_t xc__build_alltoallv_pairwise(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    exchange(&op->sched, comm->rank, comm->size, a->sbuf, a->rbuf, xc__dtype_size(a->dtype),
             a->scounts, a->sdispls, a->rcounts, a->rdispls);
    return XC_OK;
}
