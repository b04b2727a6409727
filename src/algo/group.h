/*
 * group.h -- rings over a subset of a communicator's ranks, as schedule
 * pieces: the building blocks of the ring all-reduce (the group is every
 * rank) and of the hierarchical algorithms (the ranks of one node; the
 * ranks with the same index on every node).
 *
 * A group lists its members through a base pointer and a stride into an
 * array of communicator ranks (or is the identity), so the node tables of
 * the communicator serve directly: node n's ranks are node_ranks +
 * node_start[n] (stride 1); with L ranks on every node, the ranks of local
 * index i are node_ranks + i (stride L).
 */
#ifndef XC_GROUP_H
#define XC_GROUP_H

#include "algos.h"

typedef struct xc__group {
    const int *base; /* NULL: member i is rank i */
    int stride;
    int n, me;       /* members; this rank's index */
} xc__group_t;

static inline int xc__grp_rank(const xc__group_t *g, int i)
{
    return g->base ? g->base[(size_t)i * (size_t)g->stride] : i;
}

/* Ring reduce-scatter of buf[0..count) (elements of `es` bytes) over the
 * group, cut in g->n blocks (xc__block): afterwards member me holds block
 * (me + 1) % n reduced over the group (not finalised).  `tmp` holds one
 * block (count / n + 1 elements).  n - 1 rounds. */
XC__HIDDEN void xc__sched_ring_rs(xc__sched_t *s, const xc__group_t *g, char *buf, char *tmp,
                                  size_t count, size_t es);
/* Ring all-gather of the same blocks, member me starting with block
 * (me + 1) % n (what xc__sched_ring_rs left it).  n - 1 rounds. */
XC__HIDDEN void xc__sched_ring_ag(xc__sched_t *s, const xc__group_t *g, char *buf, size_t count,
                                  size_t es);
/* The block xc__sched_ring_rs leaves on member me. */
static inline int xc__ring_owned(const xc__group_t *g) { return (g->me + 1) % g->n; }

/* Are all nodes of comm the same size?  (The hierarchical algorithms need
 * it; they fall back to their flat form otherwise.) */
XC__HIDDEN int xc__nodes_uniform(const xc_comm_t *comm);

#endif
