/*
 * allreduce_tree.c -- latency-optimised all-reduce for small messages: a
 * binomial-tree reduction to rank 0 followed by a binomial-tree broadcast,
 * both in the receive buffer.  2*ceil(log2 N) rounds; each rank sends the
 * whole message at most ceil(log2 N) times, so it is used for small data
 * only.  Rank 0 finalises (XC_AVG) before broadcasting, so every rank ends
 * with rank 0's bits.
 */
#include "algos.h"

/* Binomial reduction of `buf` (count elements) to relative rank 0 (= root),
 * receiving into `tmp`. */
static void reduce_tree(xc__sched_t *s, int r, int n, int root, char *buf, char *tmp,
                        size_t count, size_t es)
{
    int vr = xc__rel(r, root, n);
    for (int mask = 1; mask < n; mask <<= 1) {
        if (vr & mask) {
            xc__sched_send(s, xc__abs(vr - mask, root, n), buf, count * es);
            xc__sched_round(s);
            break;
        }
        if (vr + mask < n) {
            xc__sched_recv(s, xc__abs(vr + mask, root, n), tmp, count * es);
            xc__sched_reduce(s, buf, buf, tmp, count);
            xc__sched_round(s);
        }
    }
}

/* Binomial broadcast of `buf` from root. */
static void bcast_tree(xc__sched_t *s, int r, int n, int root, char *buf, size_t bytes)
{
    int vr = xc__rel(r, root, n);
    int mask = 1;
    while (mask < n) {
        if (vr & mask) {
            xc__sched_recv(s, xc__abs(vr - mask, root, n), buf, bytes);
            xc__sched_round(s);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n) xc__sched_send(s, xc__abs(vr + mask, root, n), buf, bytes);
    xc__sched_round(s);
}

xc_result_t xc__build_allreduce_tree(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc_dtype_size(a->dtype);
    char *buf = a->rbuf;
    xc__sched_copy(s, buf, a->sbuf, a->count * es);
    xc__sched_round(s);
    char *tmp = n > 1 ? xc__sched_scratch(s, a->count * es) : NULL;
    if (n > 1) reduce_tree(s, r, n, 0, buf, tmp, a->count, es);
    if (r == 0) {
        xc__sched_finalize(s, buf, a->count);
        xc__sched_round(s);
    }
    if (n > 1) bcast_tree(s, r, n, 0, buf, a->count * es);
    return XC_OK;
}
