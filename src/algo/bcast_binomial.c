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
    xc__sched_desc_check(s, comm->rank, comm->size);
    xc__sched_bcast_tree(s, comm->rank, comm->size, a->root, a->rbuf,
                         a->count * xc__dtype_size(a->dtype));
    return XC_OK;
}
