/*
 * reduce_scatter_ring.c -- ring reduce-scatter: rank r ends with block r of
 * the reduction.  In step s rank r sends its partial sum of block (r-s-1) to
 * rank r+1 and receives the partial sum of block (r-s-2) from rank r-1,
 * adding its own input block to it.  Step 0 sends the input block directly;
 * the last step adds into the receive buffer.  N-1 rounds; each rank sends
 * and receives (N-1)/N of the input.
 */
#include "algos.h"

xc_result_t xc__build_reduce_scatter_ring(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
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
    char *sc = xc__sched_scratch(s, 2 * bb);
    char *acc = sc, *tmp = sc ? sc + bb : NULL;
    int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int step = 0; step < n - 1; step++) {
        int sb = xc__mod(r - step - 1, n), rb = xc__mod(r - step - 2, n);
        xc__sched_send(s, right, step == 0 ? in + (size_t)sb * bb : acc, bb);
        xc__sched_recv(s, left, tmp, bb);
        /* Runs after this round's send completed, so acc may be rewritten. */
        char *dst = step == n - 2 ? out : acc;
        xc__sched_reduce(s, dst, tmp, in + (size_t)rb * bb, rc);
        xc__sched_round(s);
    }
    xc__sched_finalize(s, out, rc);
    xc__sched_round(s);
    return XC_OK;
}
