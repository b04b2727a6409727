/*
 * cost_alltoall.c -- predicted times of the schedule all-to-all algorithms
 * and the dissemination barrier.  b = count x dtype size, one block; every
 * rank sends N-1 blocks.
 */
#include "cost.h"

/* Copy the own block; one round with N-1 sends and N-1 receives, paid one
 * after the other by the rank (the one at distance s crosses like a shift
 * by s). */
XC__COST(alltoall_pairwise)
{
    XC__COST_SETUP();
    double b = xc__m_bytes(m), T = xc__m_copy(m, b);
    for (int s = 1; s < n; s++) T += xc__m_shift(m, XC__X, s, b);
    return T;
}

/* The per-rank counts differ: the model sees only the call's count (0 from
 * the public API), so this is its latency part.  The only algorithm of
 * its collective, so nothing depends on it. */
XC__COST(alltoallv_pairwise)
{
    XC__COST_SETUP();
    double b = xc__m_bytes(m), T = 0;
    for (int s = 1; s < n; s++) T += xc__m_shift(m, XC__X, s, b);
    return T;
}

/* Bruck: rotate (N blocks copied) and pack; ceil(log2 N) rounds, the one of
 * distance d sending the blocks whose index has bit d (about N/2), each
 * unpacked and the next round's packed (2 copies per block); the final
 * inverse rotation (N blocks). */
XC__COST(alltoall_bruck)
{
    XC__COST_SETUP();
    double b = xc__m_bytes(m);
    if (n == 1) return xc__m_copy(m, b);
    double T = 2 * xc__m_copy(m, n * b);
    for (int d = 1; d < n; d <<= 1) {
        int k = 0;
        for (int i = d; i < n; i++) k += (i & d) != 0;
        T += xc__m_shift(m, XC__XF, d, k * b) + 2 * xc__m_copy(m, k * b);
    }
    return T;
}

/* ceil(log2 N) rounds of zero-byte messages at distance 1, 2, 4, ... */
XC__COST(barrier_dissemination)
{
    XC__COST_SETUP();
    double T = 0;
    for (int d = 1; d < n; d <<= 1) T += xc__m_shift(m, XC__X, d, 0);
    return T;
}
