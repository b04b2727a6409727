/*
 * cost_more.c -- predicted times of the hierarchical algorithms
 * (allreduce_hier.c, alltoall_hier.c), the rank-ordered exchange of
 * deterministic mode (det.c) and the double binary tree
 * (allreduce_dbtree.c), round by round as their builders lay them out, on
 * the critical path.  B = count x dtype size.  The hierarchical algorithms
 * are not candidates on a single node (they would be the flat ring and the
 * direct exchange there) nor with nodes of different sizes (they fall back
 * to those); they can still be forced.
 */
#include "cost.h"

/* K nodes of L ranks each, or 0 if the hierarchical form does not apply. */
static int two_level(const xc__model_topo_t *t, int *L, int *K)
{
    if (t->nnodes < 2 || t->ppn < 1 || t->nnodes * t->ppn != t->nranks) return 0;
    *L = t->ppn;
    *K = t->nnodes;
    return 1;
}

/* Node ring reduce-scatter + all-gather of B (L-1 rounds each, one block of
 * B/L exchanged with a node neighbour); across nodes the ring all-reduce
 * of the own block B/L among K ranks, all L local ranks on the network at
 * once (they share the node's link). */
XC__COST(allreduce_hier)
{
    XC__COST_SETUP();
    int L, K;
    if (!two_level(t_, &L, &K)) return -1;
    double B = xc__m_bytes(m), nb = B / L, xb = nb / K;
    int intra = xc__model_intra(t_);
    return xc__m_copy(m, B) + xc__m_fin(m, xb) +
           (L - 1) * (2 * xc__m_link(m, intra, XC__XF, nb, 1) + xc__m_reduce(m, nb, 2)) +
           (K - 1) * (2 * xc__m_link(m, XC__LINK_TCP_NET, XC__XF, xb, L) + xc__m_reduce(m, xb, 2));
}

/* Pack (N blocks), L-1 node exchanges of K blocks, regroup (N blocks), K-1
 * network exchanges of L blocks (the node's L ranks share its link),
 * unpack (N blocks). */
XC__COST(alltoall_hier)
{
    XC__COST_SETUP();
    int L, K;
    if (!two_level(t_, &L, &K)) return -1;
    double b = xc__m_bytes(m);
    int intra = xc__model_intra(t_);
    return 3 * xc__m_copy(m, n * b) +
           (L - 1) * xc__m_link(m, intra, XC__X, K * b, 1) +
           (K - 1) * xc__m_link(m, XC__LINK_TCP_NET, XC__X, L * b, L);
}

/* Round 1 of the rank-ordered exchange: N-1 blocks of `blk` to and from
 * every other rank, then one N-way reduction of the own block. */
static double det_gather(const xc__m_t *m, int n, double blk)
{
    double T = xc__m_reduce(m, blk, n) + xc__m_fin(m, blk);
    for (int s = 1; s < n; s++) T += xc__m_shift(m, XC__X, s, blk);
    return T;
}

/* Round 1, then every finished block to every rank. */
XC__COST(allreduce_det)
{
    XC__COST_SETUP();
    double blk = xc__m_blk(m, n), T = det_gather(m, n, blk);
    for (int s = 1; s < n; s++) T += xc__m_shift(m, XC__XF, s, blk);
    return T;
}

XC__COST(reduce_scatter_det)
{
    XC__COST_SETUP();
    return det_gather(m, n, xc__m_bytes(m));
}

/* Round 1, then the root receives the N-1 finished blocks. */
XC__COST(reduce_det)
{
    XC__COST_SETUP();
    double blk = xc__m_blk(m, n);
    return det_gather(m, n, blk) + (n - 1) * xc__m_shift(m, XC__1F, 1, blk);
}

/* 2D + S - 1 steps (D = floor(log2 N), S segments per half); a busy step
 * moves up to 4 segments of B/2S each way (3 in the tree where the rank is
 * interior, 1 in the other) and reduces 2. */
XC__COST(allreduce_dbtree)
{
    XC__COST_SETUP();
    double B = xc__m_bytes(m);
    if (n == 1) return xc__m_copy(m, B) + xc__m_fin(m, B);
    int D = 0;
    while ((2 << D) <= n) D++;
    int S = xc__dbtree_segments((size_t)B, D > 0 ? D : 1);
    double seg = B / (2.0 * S);
    /* A step moves and reduces a few segments, not the whole buffer: its
     * transfers run at the speed of that working set (up to four segments
     * out and four in; two of each with two ranks), cache-resident once the
     * segments are small -- the pipeline's blocking is what makes it 2x
     * faster than the rings over loopback TCP at 2-32 MiB.  The buffers'
     * one pass from memory is the copy below. */
    const xc__m_t *whole = m;
    xc__m_t ms = *m;
    double step_ws = (n == 2 ? 4 : 8) * seg;
    ms.ws = step_ws < m->ws ? step_ws : m->ws;
    m = &ms;
    /* A step's messages per rank and direction: an interior node's two
     * children and parent plus its leaf's parent in the other tree (four
     * segments); with two ranks each is the root of one tree (one child)
     * and the leaf of the other: two segments, one exchange. */
    double step = (n == 2 ? 1 : 2) * xc__m_xor(m, XC__XF, 1, 2 * seg);
    /* Across nodes: the edges crossing a node's boundary share its link,
     * one segment each way per edge and step (any layout but blocks:
     * take the blocked count as the estimate). */
    if (t_->nnodes > 1) {
        int cross = xc__dbtree_cross(n, t_->ppn);
        double net = cross > 0 ? xc__m_link(m, XC__LINK_TCP_NET, XC__XF, seg, cross) : 0;
        double local = 2 * xc__m_link(m, xc__model_intra(t_), XC__XF, 2 * seg, 1);
        step = net > local ? net : local;
    }
    step += xc__m_reduce(m, seg, 3);
    return xc__m_copy(whole, B) + xc__m_fin(whole, B / 2) + (2 * D + S - 1) * step;
}
