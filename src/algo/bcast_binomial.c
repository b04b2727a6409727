/*
 * bcast_binomial.c -- broadcast along a binomial tree rooted at the root:
 * a rank receives once from its parent, then sends to its children, largest
 * subtree first.  ceil(log2 N) rounds.  A zero-byte ring exchange of the
 * operation's description (posted with the first round) lets the root, which
 * receives nothing else, notice a rank that disagrees on the root or count.
 */
#include "algos.h"

xc_result_t xc__build_bcast_binomial(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank, root = a->root;
    size_t bytes = a->count * xc_dtype_size(a->dtype);
    char *buf = a->rbuf;
    int vr = xc__rel(r, root, n);
    xc__sched_desc_check(s, r, n);
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
    return XC_OK;
}
