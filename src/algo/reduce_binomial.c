/*
 * reduce_binomial.c -- reduction to a root along a binomial tree rooted
 * there.  ceil(log2 N) rounds; a rank receives from each of its children in
 * turn and adds into its accumulator (the root's receive buffer, or scratch
 * elsewhere), then sends the accumulator to its parent.  The root finalises
 * XC_AVG.  A zero-byte ring exchange of the operation's description lets
 * every rank, leaves and root included, notice a disagreement on the root.
 */
#include "algos.h"

xc_result_t xc__build_reduce_binomial(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank, root = a->root;
    size_t es = xc__dtype_size(a->dtype), bytes = a->count * es;
    int vr = xc__rel(r, root, n);
    /* Leaves (odd relative ranks) send their input as is. */
    int leaf = (vr & 1) || n == 1;
    char *acc, *tmp = NULL;
    if (r == root) {
        acc = a->rbuf;
        if (n > 1) tmp = xc__sched_scratch(s, bytes);
    } else if (leaf) {
        acc = (char *)a->sbuf;
    } else {
        char *sc = xc__sched_scratch(s, 2 * bytes);
        acc = sc;
        tmp = sc ? sc + bytes : NULL;
    }
    if (acc != a->sbuf) {
        xc__sched_copy(s, acc, a->sbuf, bytes);
        xc__sched_round(s);
    }
    xc__sched_desc_check(s, r, n);
    xc__sched_reduce_tree(s, r, n, root, acc, tmp, a->count, es);
    if (r == root) {
        xc__sched_finalize(s, acc, a->count);
        xc__sched_round(s);
    }
    return XC_OK;
}
