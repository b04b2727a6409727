/*
 * cost_rooted.c -- predicted times of the schedule broadcast and reduce
 * algorithms.  B = count x dtype size, the whole message.  Every one of
 * them opens with a zero-byte exchange of the operation's description with
 * the ring neighbours (xc__sched_desc_check) inside its first round, so
 * that round is an exchange for every rank, not a one-way hop.
 */
#include "cost.h"

/* The longest path of a binomial tree has ceil(log2 N) hops; a sender
 * serves its largest subtree first, so each hop costs one message. */
XC__COST(bcast_binomial)
{
    XC__COST_SETUP();
    /* The root's own data on the first hop (with the description check),
     * forwarded copies after. */
    double B = xc__m_bytes(m), T = 0;
    for (int d = 1; d < n; d <<= 1) T += xc__m_xor(m, d == 1 ? XC__X : XC__1F, d, B);
    return T;
}

/* Binomial scatter (the root sends B/2, B/4, ... in turn; the last block
 * arrives after about ceil(log2 N) messages carrying B(N-1)/N in all),
 * then a ring all-gather of N-1 blocks. */
XC__COST(bcast_scatter_ag)
{
    XC__COST_SETUP();
    if (n == 1) return 0;
    double B = xc__m_bytes(m), blk = xc__m_blk(m, n), T = 0;
    for (int d = 1; d < n; d <<= 1) T += xc__m_xor(m, d == 1 ? XC__X : XC__1F, d, B * d / n);
    return T + (n - 1) * xc__m_shift(m, XC__XF, 1, blk);
}

/* Pipelined chain of k = ceil(B/S) segments: N-2+k rounds of one segment
 * (N = 2: the root's k segments back to back). */
XC__COST(bcast_chain)
{
    XC__COST_SETUP();
    if (n == 1) return 0;
    double B = xc__m_bytes(m);
    double seg = (double)xc__chain_seg(c_->count, (size_t)m->es, n) * m->es;
    double k = B > 0 ? ceil(B / seg) : 1, last = B - (k - 1) * seg;
    if (k == 1) seg = last;
    /* Middle ranks receive one segment while they forward the previous;
     * the first round carries the description check. */
    int x = n > 2 ? XC__XF : XC__1;
    return (n - 2 + k - 1) * xc__m_shift(m, x, 1, seg) + xc__m_shift(m, x, 1, last) +
           xc__m_shift(m, XC__X, 1, 0) - xc__m_shift(m, XC__1, 1, 0);
}

/* Binomial reduce: inner ranks copy their input; ceil(log2 N) rounds of
 * (receive B, reduce B) at the root; finalise. */
XC__COST(reduce_binomial)
{
    XC__COST_SETUP();
    double B = xc__m_bytes(m), T = xc__m_copy(m, B) + xc__m_fin(m, B);
    for (int d = 1; d < n; d <<= 1)
        T += xc__m_xor(m, d == 1 ? XC__X : XC__1F, d, B) + xc__m_reduce(m, B, 2);
    return T;
}

/* Ring reduce-scatter (N-1 rounds of a block), then a binomial gather of
 * the blocks to the root (about ceil(log2 N) messages carrying B(N-1)/N). */
XC__COST(reduce_rs_gather)
{
    XC__COST_SETUP();
    double B = xc__m_bytes(m), blk = xc__m_blk(m, n);
    if (n == 1) return xc__m_copy(m, B) + xc__m_fin(m, B);
    double T = xc__m_fin(m, blk) + xc__m_shift(m, XC__X, 1, blk) +
               (n - 2) * xc__m_shift(m, XC__XF, 1, blk) + (n - 1) * xc__m_reduce(m, blk, 2);
    for (int d = 1; d < n; d <<= 1) T += xc__m_xor(m, XC__1F, d, B * d / n);
    return T;
}
