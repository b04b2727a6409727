/*
 * cost_allreduce.c -- predicted times of the schedule all-reduce algorithms
 * (allreduce_*.c), round by round as their builders lay them out, on the
 * critical path (the busiest rank).  B = count x dtype size.
 * docs/cost-model.md gives the same formulas in closed form.
 */
#include "cost.h"

/* N == 1: the copy into recvbuf (and the avg pass). */
static double single(const xc__m_t *m, double B) { return xc__m_copy(m, B) + xc__m_fin(m, B); }

/* Fold of a non-power-of-two N onto p ranks: the odd ranks of the first
 * 2(N-p) hand their vector over (one message, one reduction) and get the
 * result back at the end (one message). */
static double fold(const xc__m_t *m, double B)
{
    if (m->t->nranks == xc__pow2_floor(m->t->nranks)) return 0;
    return 2 * xc__m_shift(m, XC__1, 1, B) + xc__m_reduce(m, B, 2);
}

/* copy; N-1 rounds of (exchange a block, reduce it); finalise; N-1 rounds
 * of (exchange a block) -- every block sent was written in the call. */
XC__COST(allreduce_ring)
{
    XC__COST_SETUP();
    double B = xc__m_bytes(m), blk = xc__m_blk(m, n);
    if (n == 1) return single(m, B);
    return xc__m_copy(m, B) + xc__m_fin(m, blk) +
           (n - 1) * (2 * xc__m_shift(m, XC__XF, 1, blk) + xc__m_reduce(m, blk, 2));
}

/* copy; binomial reduce to rank 0 (ceil(log2 N) receive + reduce rounds);
 * binomial broadcast (ceil(log2 N) hops on the longest path); all of it
 * data written in the call (the copy, partial sums, the result). */
XC__COST(allreduce_tree)
{
    XC__COST_SETUP();
    double B = xc__m_bytes(m);
    if (n == 1) return single(m, B);
    double T = xc__m_copy(m, B) + xc__m_fin(m, B);
    for (int d = 1; d < n; d <<= 1) T += 2 * xc__m_xor(m, XC__1F, d, B) + xc__m_reduce(m, B, 2);
    return T;
}

/* Fold; log2 p rounds exchanging and reducing the whole vector (the first
 * sends the caller's input unless folded, later ones partial sums);
 * finalise. */
XC__COST(allreduce_rd)
{
    XC__COST_SETUP();
    int pw = xc__pow2_floor(n);
    double B = xc__m_bytes(m);
    if (n == 1) return single(m, B);
    double T = fold(m, B) + xc__m_fin(m, B);
    for (int d = 1; d < pw; d <<= 1)
        T += xc__m_xor(m, d == 1 && pw == n ? XC__X : XC__XF, d, B) + xc__m_reduce(m, B, 2);
    return T;
}

/* Fold; reduce-scatter by recursive halving (the round of distance d moves
 * and reduces d/p of the vector); finalise a block; all-gather by
 * recursive doubling (the same amounts back). */
XC__COST(allreduce_rhd)
{
    XC__COST_SETUP();
    int pw = xc__pow2_floor(n);
    double B = xc__m_bytes(m);
    if (n == 1) return single(m, B);
    double T = fold(m, B) + xc__m_fin(m, xc__m_blk(m, pw));
    for (int d = pw / 2; d >= 1; d >>= 1) {
        double part = (double)((c_->count * (size_t)d + (size_t)pw - 1) / (size_t)pw) * m->es;
        /* Halving: the first round sends the caller's input (unless
         * folded); the rest, and all of the doubling, partial sums. */
        int first = d == pw / 2 && pw == n;
        T += xc__m_xor(m, first ? XC__X : XC__XF, d, part) + xc__m_xor(m, XC__XF, d, part) +
             xc__m_reduce(m, part, 2);
    }
    return T;
}
