/*
 * allreduce_tree.c -- latency-optimised all-reduce for small messages: a
 * binomial-tree reduction to rank 0 followed by a binomial-tree broadcast,
 * both in the receive buffer.  2*ceil(log2 N) rounds; each rank sends the
 * whole message at most ceil(log2 N) times, so it is used for small data
 * only.  Rank 0 finalises (XC_AVG) before broadcasting, so every rank ends
 * with rank 0's bits.
 */
#include "algos.h"

xc_result_t xc__build_allreduce_tree(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc__dtype_size(a->dtype);
    char *buf = a->rbuf;
    xc__sched_copy(s, buf, a->sbuf, a->count * es);
    xc__sched_round(s);
    char *tmp = n > 1 ? xc__sched_scratch(s, a->count * es) : NULL;
    if (n > 1) xc__sched_reduce_tree(s, r, n, 0, buf, tmp, a->count, es);
    if (r == 0) {
        xc__sched_finalize(s, buf, a->count);
        xc__sched_round(s);
    }
    if (n > 1) xc__sched_bcast_tree(s, r, n, 0, buf, a->count * es);
    return XC_OK;
}
