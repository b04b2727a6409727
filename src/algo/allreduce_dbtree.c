/*
 * allreduce_dbtree.c -- pipelined double binary tree all-reduce (the
 * schedule NCCL uses for latency-bound sizes at scale): two complementary
 * binary trees over the N ranks, tree t reducing half t of the vector to
 * its root and broadcasting it back down, both halves cut into S segments
 * that flow through the trees as a pipeline.
 *
 * Trees.  Tree 0 is the in-order binary tree on labels 1..N, label = rank
 * + 1: label l with lowest set bit 2^k has children l - 2^(k-1) (left) and
 * the first of l + 2^(k-1), l + 2^(k-2), ... that is <= N (right); its root
 * is P = 2^floor(log2 N).  Odd labels (even ranks) are its leaves, even
 * labels (odd ranks) its interior nodes.  Tree 1 is the same shape on
 * relabelled ranks: mirrored (label N - rank) for even N, shifted by one
 * (label (rank + 1) mod N + 1) for odd N; either way its interior nodes are
 * exactly the even ranks, except that for odd N rank N-1 is a leaf of both
 * trees.  So no rank is interior in both trees: every rank sends and
 * receives at most 2M bytes in all (M the message), where over one binary
 * tree the interior ranks would move 3M and the leaves M.  Both trees have
 * depth D = floor(log2 N).
 *
 * Pipelining, on a global step clock that every rank follows (a rank's
 * rounds are its non-empty steps).  With d a rank's depth in a tree, in step
 * j it receives segment j - (D-d-1) from its children and adds it to its
 * own; sends segment j - (D-d) (reduced at the end of step j-1) to its
 * parent; receives segment j - (D+d-1) of the result from its parent; sends
 * segment j - (D+d) of the result to its children.  Both ends of every
 * message post it in the same step, and within a step each rank posts in
 * the order (tree, up before down), so the per-peer FIFO matching pairs
 * every send with its receive, and step j of every rank needs only step j
 * of its neighbours: no deadlock even when sends complete only once
 * received (rendezvous).  A node forwards segment k up while receiving
 * segment k+1, and the root turns segment k around (finalising XC_AVG) in
 * the step after receiving it, so the up and down pipelines overlap: the
 * last leaf gets the last segment in step 2D + S - 2.
 *
 * Identical bits.  Every element belongs to one tree and is reduced along
 * its fixed shape, each node computing (left op own) op right, and
 * finalised once by that tree's root; every other rank only receives a
 * copy.  fp16/bf16 round once per reduction step, the same on all ranks.
 *
 * Buffers.  The reduction happens in recvbuf (a leaf sends straight from
 * sendbuf); a segment's result arrives in the same place only steps after
 * it went up.  In place works as is.  Scratch: one segment per child (at
 * most 2, as a rank is interior in one tree only), received in step j and
 * consumed at the end of step j.
 *
 * Segments.  With M the message bytes, a step in which all four flows are
 * busy moves 4 segments of M/2S bytes each way on a rank (3 in the tree
 * where it is interior, 1 in the other) and reduces 2; the steps filling
 * and draining the pipeline carry less, so per rank
 *
 *   T <= (2D + S - 1)·(α + (2M/S)·β + (M/S)·γ),  D = floor(log2 N),
 *
 * which tends to Sα + 2Mβ + Mγ for S ≫ D (the ring's bandwidth).  It is
 * smallest at S* = sqrt(2(2D-1)·M·β/α); we take α/β = 64 KiB
 * (XC__PIPE_ALPHA_BYTES), floor the root, and clamp S to 1..256 with
 * segments of at least 4 KiB (M/2S >= 4096).  S depends only on M and N,
 * so every rank cuts the same way.  Segments are whole elements
 * (xc__block of each half); a zero count still sends one empty segment
 * along every edge, so every rank receives frames and would see a rank
 * that disagrees on the call (XC_ERR_MISMATCH).
 */
#include "algos.h"

#define XC__DBT_MIN_SEG ((size_t)4 << 10)      /* bytes per segment, at least */
#define XC__DBT_MAX_SEGS 256                   /* bounds the schedule's size */

/* A rank's place in one tree. */
typedef struct dbt_role {
    int depth;
    int parent;      /* rank; -1 at the root */
    int child[2];    /* ranks, left and right; -1 if absent (right only with left) */
    char *tmp[2];    /* one segment of scratch per child */
    size_t off, cnt; /* the half of the vector this tree reduces (elements) */
} dbt_role_t;

/* ---- the in-order tree on labels 1..n (0 = none) ---- */

static int dbt_parent(int l, int n)
{
    if (l == xc__pow2_floor(n)) return 0;
    /* Climb the infinite in-order tree; skip ancestors beyond n (their
     * subtree's nodes <= n hang from the first ancestor that exists). */
    for (;;) {
        int lb = l & -l;
        int p = (l & (lb << 1)) ? l - lb : l + lb;
        if (p <= n) return p;
        l = p;
    }
}

static void dbt_children(int l, int n, int ch[2])
{
    int lb = l & -l;
    ch[0] = ch[1] = 0;
    if (lb == 1) return; /* odd labels are leaves */
    ch[0] = l - lb / 2;
    for (int j = lb / 2; j > 0; j /= 2)
        if (l + j <= n) {
            ch[1] = l + j;
            break;
        }
}

static int dbt_depth(int l, int n)
{
    int d = 0;
    while ((l = dbt_parent(l, n)) != 0) d++;
    return d;
}

/* Tree 0: label = rank + 1.  Tree 1: mirrored (even n) or shifted by one
 * (odd n), so that its interior nodes are tree 0's leaves. */
static int dbt_label(int tree, int r, int n)
{
    if (tree == 0) return r + 1;
    return n % 2 == 0 ? n - r : (r + 1) % n + 1;
}

static int dbt_rank(int tree, int l, int n)
{
    if (l == 0) return -1;
    if (tree == 0) return l - 1;
    return n % 2 == 0 ? n - l : (l + n - 2) % n;
}

static void dbt_role(int tree, int r, int n, dbt_role_t *ro)
{
    int l = dbt_label(tree, r, n), ch[2];
    dbt_children(l, n, ch);
    ro->depth = dbt_depth(l, n);
    ro->parent = dbt_rank(tree, dbt_parent(l, n), n);
    ro->child[0] = dbt_rank(tree, ch[0], n);
    ro->child[1] = dbt_rank(tree, ch[1], n);
    ro->tmp[0] = ro->tmp[1] = NULL;
}

/* Segments for a message of `bytes` on trees of depth `depth` >= 1 (see
 * the header): floor(sqrt(2(2D-1)·M/(α/β))), clamped. */
int xc__dbtree_segments(size_t bytes, int depth)
{
    size_t most = bytes / 2 / XC__DBT_MIN_SEG;
    if (most > XC__DBT_MAX_SEGS) most = XC__DBT_MAX_SEGS;
    return (int)xc__pipe_segments(bytes, 2 * (2 * (size_t)depth - 1), most);
}

/* Edges of both trees with one end on a node and the other off it, the
 * most over the nodes of a block layout (rank r on node r / ppn): each
 * carries one segment each way per busy step over that node's link. */
int xc__dbtree_cross(int n, int ppn)
{
    if (ppn < 1 || ppn >= n) return 0;
    int most = 0;
    for (int node = 0; node * ppn < n; node++) {
        int c = 0;
        for (int tree = 0; tree < 2; tree++)
            for (int r = node * ppn; r < n && r < (node + 1) * ppn; r++) {
                int p = dbt_rank(tree, dbt_parent(dbt_label(tree, r, n), n), n);
                if (p >= 0 && p / ppn != node) c++; /* the edge up */
                int ch[2];
                dbt_children(dbt_label(tree, r, n), n, ch);
                for (int i = 0; i < 2; i++) { /* the edges down */
                    int q = dbt_rank(tree, ch[i], n);
                    if (q >= 0 && q / ppn != node) c++;
                }
            }
        if (c > most) most = c;
    }
    return most;
}

/* base + off, leaving a NULL base (zero count) without arithmetic. */
static char *at(void *base, size_t off) { return off ? (char *)base + off : base; }
static const char *cat(const void *base, size_t off)
{
    return off ? (const char *)base + off : base;
}

/* Segment k of tree ro's half: byte offset into the vector and length. */
static void dbt_seg(const dbt_role_t *ro, int nseg, int k, size_t es, size_t *boff,
                    size_t *ecnt)
{
    size_t o;
    xc__block(ro->cnt, nseg, k, &o, ecnt);
    *boff = (ro->off + o) * es;
}

/* The steps of one tree in global step j (see the header). */
static void dbt_step(xc__sched_t *s, const dbt_role_t *ro, int j, int D, int nseg,
                     const xc__args_t *a, size_t es)
{
    int d = ro->depth, inner = ro->child[0] >= 0;
    int ku = j - (D - d - 1), ks = j - (D - d), kd = j - (D + d - 1), kf = j - (D + d);
    size_t bo, c;
    if (inner && ku >= 0 && ku < nseg) { /* children's partial sums of ku */
        dbt_seg(ro, nseg, ku, es, &bo, &c);
        for (int i = 0; i < 2; i++)
            if (ro->child[i] >= 0) xc__sched_recv(s, ro->child[i], ro->tmp[i], c * es);
    }
    if (ro->parent >= 0 && ks >= 0 && ks < nseg) { /* our partial sum of ks, up */
        dbt_seg(ro, nseg, ks, es, &bo, &c);
        const char *src = inner ? cat(a->rbuf, bo) : cat(a->sbuf, bo);
        xc__sched_send(s, ro->parent, src, c * es);
    }
    if (ro->parent >= 0 && kd >= 0 && kd < nseg) { /* the result of kd, down */
        dbt_seg(ro, nseg, kd, es, &bo, &c);
        xc__sched_recv(s, ro->parent, at(a->rbuf, bo), c * es);
    }
    if (inner && kf >= 0 && kf < nseg) { /* ... and on to the children */
        dbt_seg(ro, nseg, kf, es, &bo, &c);
        for (int i = 0; i < 2; i++)
            if (ro->child[i] >= 0) xc__sched_send(s, ro->child[i], cat(a->rbuf, bo), c * es);
    }
    /* Local steps, after this step's messages: (left op own) op right. */
    if (inner && ku >= 0 && ku < nseg) {
        dbt_seg(ro, nseg, ku, es, &bo, &c);
        char *acc = at(a->rbuf, bo);
        xc__sched_reduce(s, acc, ro->tmp[0], cat(a->sbuf, bo), c);
        if (ro->child[1] >= 0) xc__sched_reduce(s, acc, acc, ro->tmp[1], c);
        if (ro->parent < 0) xc__sched_finalize(s, acc, c);
    }
}

xc_result_t xc__build_allreduce_dbtree(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc__dtype_size(a->dtype), count = a->count;
    if (n == 1) {
        xc__sched_copy(s, a->rbuf, a->sbuf, count * es);
        xc__sched_finalize(s, a->rbuf, count);
        xc__sched_round(s);
        return XC_OK;
    }
    int D = 0;
    for (int p = xc__pow2_floor(n); p > 1; p /= 2) D++;
    int nseg = xc__dbtree_segments(count * es, D);

    dbt_role_t ro[2];
    int slots = 0;
    for (int t = 0; t < 2; t++) {
        dbt_role(t, r, n, &ro[t]);
        xc__block(count, 2, t, &ro[t].off, &ro[t].cnt);
        slots += (ro[t].child[0] >= 0) + (ro[t].child[1] >= 0);
    }
    if (slots > 0) {
        /* Half 0 is the larger, its first segment the largest. */
        size_t segmax = (ro[0].cnt + (size_t)nseg - 1) / (size_t)nseg;
        size_t slot = (segmax * es + 63) & ~(size_t)63;
        char *tmp = xc__sched_scratch(s, (size_t)slots * slot);
        if (!tmp) return XC_OK; /* reported as out of memory at submission */
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 2; i++)
                if (ro[t].child[i] >= 0) ro[t].tmp[i] = at(tmp, (size_t)--slots * slot);
    }
    for (int j = 0; j < 2 * D + nseg - 1; j++) {
        for (int t = 0; t < 2; t++) dbt_step(s, &ro[t], j, D, nseg, a, es);
        xc__sched_round(s);
    }
    return XC_OK;
}
