/*
 * binomial.c -- the binomial-tree building blocks shared by reduce,
 * broadcast and the small all-reduce.  Ranks are taken relative to the
 * root (vr = rank - root mod N); rank vr's parent is vr with its lowest set
 * bit cleared, its children vr + 2^k for 2^k below that bit.
 */
#include "algos.h"

void xc__sched_reduce_tree(xc__sched_t *s, int r, int n, int root, char *acc, char *tmp,
                           size_t count, size_t es)
{
    int vr = xc__rel(r, root, n);
    for (int mask = 1; mask < n; mask <<= 1) {
        if (vr & mask) { /* send the partial sum up and stop */
            xc__sched_send(s, xc__abs(vr - mask, root, n), acc, count * es);
            xc__sched_round(s);
            return;
        }
        if (vr + mask < n) { /* add the child's subtree */
            xc__sched_recv(s, xc__abs(vr + mask, root, n), tmp, count * es);
            xc__sched_reduce(s, acc, acc, tmp, count);
            xc__sched_round(s);
        }
    }
    xc__sched_round(s); /* closes a first round holding only a description check */
}

void xc__sched_bcast_tree(xc__sched_t *s, int r, int n, int root, char *buf, size_t bytes)
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
    /* Largest subtree first: it has the longest way to go. */
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n) xc__sched_send(s, xc__abs(vr + mask, root, n), buf, bytes);
    xc__sched_round(s);
}
