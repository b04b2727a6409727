/*
 * reduce_rs_gather.c -- reduction to a root for large messages: a ring
 * reduce-scatter, then a binomial gather of the reduced blocks to the root
 * (Rabenseifner's reduce, with the ring so that any N works without a
 * fold).  Each rank reduces 1/N of the data instead of the binomial tree's
 * whole message on log2 N ranks in turn.
 *
 * Ranks are taken relative to the root (v = rank - root mod N) and the
 * data is cut into N blocks (xc__block), block v ending on relative rank v
 * (relative ring neighbours are the absolute ones).  Reduce-scatter: in
 * step t = 0..N-2, v sends its partial sum of block v-t-1 (step 0: its own
 * input block) to v+1 and receives the partial sum of block v-t-2 from
 * v-1, adding its input block to it; the accumulator is recvbuf on the
 * root, scratch elsewhere.  v then finalises block v (XC_AVG).  Gather: v
 * receives from each binomial child c = v + 2^k (all in one round) the
 * blocks of c's subtree, then sends the blocks of its own subtree
 * [v, v + lowbit(v)) to its parent.  A zero-byte exchange of the
 * operation's description rides in the first round.  In place on the root
 * works: each input block is read in the round that overwrites it, or sent
 * in step 0 and never overwritten by the reduce-scatter.
 *
 * Rounds: (N-1) + 1 + (up to) 2, the gather's levels overlapping.
 * Cost (n = message bytes):
 *   reduce-scatter (N-1)·α + (N-1)/N·nβ + (N-1)/N·nγ,
 *   gather ceil(log2 N)·α + (N-1)/N·nβ at the root.
 * Scratch: n + n/N bytes off the root, n/N on it.
 */
#include "algos.h"

xc_result_t xc__build_reduce_rs_gather(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank, root = a->root;
    size_t es = xc__dtype_size(a->dtype), count = a->count;
    const char *in = a->sbuf;
    if (n == 1) {
        xc__sched_copy(s, a->rbuf, in, count * es);
        xc__sched_finalize(s, a->rbuf, count);
        xc__sched_round(s);
        return XC_OK;
    }
    int v = xc__rel(r, root, n);
    size_t maxblk = xc__block_off(count, n, 1) * es; /* block 0 is the largest */
    char *acc, *tmp;
    if (r == root) {
        acc = a->rbuf;
        tmp = xc__sched_scratch(s, maxblk);
    } else {
        acc = xc__sched_scratch(s, count * es + maxblk);
        tmp = acc ? acc + count * es : NULL;
    }
#define OFF(j) (xc__block_off(count, n, (j)) * es)
#define CNT(i, j) (xc__block_off(count, n, (j)) - xc__block_off(count, n, (i)))
    xc__sched_desc_check(s, r, n);
    int right = (r + 1) % n, left = xc__mod(r - 1, n);
    for (int t = 0; t < n - 1; t++) {
        int sb = xc__mod(v - t - 1, n), rb = xc__mod(v - t - 2, n);
        xc__sched_send(s, right, (t == 0 ? in : acc) + OFF(sb), CNT(sb, sb + 1) * es);
        xc__sched_recv(s, left, tmp, CNT(rb, rb + 1) * es);
        /* The partial sum of the ranks before, then this rank's input. */
        xc__sched_reduce(s, acc + OFF(rb), tmp, in + OFF(rb), CNT(rb, rb + 1));
        if (t == n - 2) xc__sched_finalize(s, acc + OFF(v), CNT(v, v + 1));
        xc__sched_round(s);
    }
    /* Binomial gather: children's subtrees, then this subtree to the parent. */
    int mask;
    for (mask = 1; mask < n && !(v & mask); mask <<= 1) {
        int c = v + mask;
        if (c >= n) continue;
        int end = c + mask < n ? c + mask : n;
        xc__sched_recv(s, xc__abs(c, root, n), acc + OFF(c), CNT(c, end) * es);
    }
    xc__sched_round(s);
    if (v != 0) {
        int end = v + mask < n ? v + mask : n;
        xc__sched_send(s, xc__abs(v - mask, root, n), acc + OFF(v), CNT(v, end) * es);
        xc__sched_round(s);
    }
#undef OFF
#undef CNT
    return XC_OK;
}
