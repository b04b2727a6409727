/*
 * allgather_ring.c -- ring all-gather: each rank places its block, then in
 * step s sends block (r-s) to rank r+1 and receives block (r-s-1) from rank
 * r-1 straight into the receive buffer.  N-1 rounds; each rank sends and
 * receives (N-1)/N of the result.
 */
#include "algos.h"

xc_result_t xc__build_allgather_ring(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t bb = a->count * xc__dtype_size(a->dtype);
    char *out = a->rbuf;
    xc__sched_copy(s, out + (size_t)r * bb, a->sbuf, bb);
    xc__sched_round(s);
    int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int step = 0; step < n - 1; step++) {
        xc__sched_send(s, right, out + (size_t)xc__mod(r - step, n) * bb, bb);
        xc__sched_recv(s, left, out + (size_t)xc__mod(r - step - 1, n) * bb, bb);
        xc__sched_round(s);
    }
    return XC_OK;
}
