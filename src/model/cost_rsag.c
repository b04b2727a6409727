/*
 * cost_rsag.c -- predicted times of the schedule reduce-scatter and
 * all-gather algorithms, round by round as their builders lay them out.
 * b = count x dtype size is one rank's block (recvcount of reduce-scatter,
 * sendcount of all-gather); the whole vector is N*b.
 */
#include "cost.h"

/* N-1 rounds of (exchange a block with the ring neighbours, reduce it). */
XC__COST(reduce_scatter_ring)
{
    XC__COST_SETUP();
    double b = xc__m_bytes(m), T = xc__m_fin(m, b);
    if (n == 1) return T + xc__m_copy(m, b);
    /* The first round sends the caller's block, later ones partial sums. */
    return T + xc__m_shift(m, XC__X, 1, b) +
           (n - 2) * xc__m_shift(m, XC__XF, 1, b) + (n - 1) * xc__m_reduce(m, b, 2);
}

/* Like the ring, but round s talks to the ranks at distance s. */
XC__COST(reduce_scatter_pairwise)
{
    XC__COST_SETUP();
    double b = xc__m_bytes(m), T = xc__m_fin(m, b);
    if (n == 1) return T + xc__m_copy(m, b);
    for (int s = 1; s < n; s++) T += xc__m_shift(m, XC__X, s, b) + xc__m_reduce(m, b, 2);
    return T;
}

/* Fold (the whole input of the odd ranks, reduced); log2 p halving rounds,
 * the round of distance d moving d/p of the input; copy out the own block;
 * the folded rank gets its block back. */
XC__COST(reduce_scatter_rhalving)
{
    XC__COST_SETUP();
    int pw = xc__pow2_floor(n);
    double b = xc__m_bytes(m), whole = n * b;
    double T = xc__m_fin(m, b) + xc__m_copy(m, b);
    if (n == 1) return T;
    if (pw != n)
        T += xc__m_shift(m, XC__1, 1, whole) + xc__m_reduce(m, whole, 2) +
             xc__m_shift(m, XC__1, 1, b);
    for (int d = pw / 2; d >= 1; d >>= 1) {
        double part = whole * d / pw;
        int x = d == pw / 2 && pw == n ? XC__X : XC__XF;
        T += xc__m_xor(m, x, d, part) + xc__m_reduce(m, part, 2);
    }
    return T;
}

/* Copy the own block; N-1 rounds passing one block along the ring (the
 * input, then blocks just received). */
XC__COST(allgather_ring)
{
    XC__COST_SETUP();
    double b = xc__m_bytes(m), T = xc__m_copy(m, b);
    if (n == 1) return T;
    return T + xc__m_shift(m, XC__X, 1, b) + (n - 2) * xc__m_shift(m, XC__XF, 1, b);
}

/* Bruck: ceil(log2 N) rounds, distance d sending min(d, N-d) blocks; the
 * own block copied in and, on every rank but 0, the result rotated (N
 * blocks copied). */
XC__COST(allgather_bruck)
{
    XC__COST_SETUP();
    double b = xc__m_bytes(m), T = xc__m_copy(m, b);
    if (n == 1) return T;
    for (int d = 1; d < n; d <<= 1)
        T += xc__m_shift(m, d == 1 ? XC__X : XC__XF, d, (d < n - d ? d : n - d) * b);
    return T + xc__m_copy(m, n * b);
}

/* Power-of-two N: log2 N rounds, distance d swapping d blocks; otherwise
 * the builder runs Bruck. */
XC__COST(allgather_rd)
{
    XC__COST_SETUP();
    if (n != xc__pow2_floor(n)) return xc__cost_allgather_bruck(p_, t_, c_);
    double b = xc__m_bytes(m), T = xc__m_copy(m, b);
    for (int d = 1; d < n; d <<= 1) T += xc__m_xor(m, d == 1 ? XC__X : XC__XF, d, d * b);
    return T;
}
