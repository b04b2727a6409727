/*
 * reduce_scatter_pairwise.c -- reduce-scatter by pairwise exchange: in step
 * s = 1..N-1 rank r sends its input block r+s straight to its owner, rank
 * r+s, and receives rank (r-s)'s contribution to block r, which it adds
 * into recvbuf.  Every block travels once, directly, so no partial sums are
 * forwarded: N-1 rounds like the ring, but a rank's partners change every
 * step (no pipeline dependency on a neighbour), which suits a switched
 * network with many links.
 *
 * Reduction order on rank r is fixed: ((x_r op x_{r-1}) op x_{r-2}) ...;
 * each block's result exists on one rank only, and XC_AVG is finalised once
 * there.  The first step reads the input block directly, so in place
 * (recvbuf == sendbuf + r·recvcount) needs no copy.
 *
 * Rounds: N-1.
 * Cost per rank (n = N·recvcount·size bytes, the whole input):
 *   (N-1)·α + (N-1)/N·nβ + (N-1)/N·nγ
 * Scratch: one block.
 */
#include "algos.h"

xc_result_t xc__build_reduce_scatter_pairwise(xc_comm_t *comm, xc__op_t *op,
                                              const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc__dtype_size(a->dtype), rc = a->count, bb = rc * es;
    const char *in = a->sbuf;
    char *out = a->rbuf;
    if (n == 1) {
        xc__sched_single(s, out, in, rc, es);
        return XC_OK;
    }
    char *tmp = xc__sched_scratch(s, bb);
    for (int step = 1; step < n; step++) {
        int to = (r + step) % n, from = xc__mod(r - step, n);
        xc__sched_send(s, to, in + (size_t)to * bb, bb);
        xc__sched_recv(s, from, tmp, bb);
        xc__sched_reduce(s, out, step == 1 ? in + (size_t)r * bb : out, tmp, rc);
        if (step == n - 1) xc__sched_finalize(s, out, rc);
        xc__sched_round(s);
    }
    return XC_OK;
}
