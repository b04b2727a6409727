/*
 * group.c -- ring reduce-scatter and all-gather over a group (group.h).
 *
 * Ring reduce-scatter: in step t member r sends block (r - t) to member
 * r + 1 and receives block (r - t - 1) from member r - 1 into scratch, then
 * adds it into its own copy; after n - 1 steps member r holds block r + 1
 * reduced over the group.  Each block is reduced by one member in a fixed
 * order, so every member that later receives it gets the same bits.
 * Ring all-gather: n - 1 steps of passing the finished blocks on.
 * Cost per member: (n - 1) rounds and (n - 1)/n of the data sent and
 * received each (plus (n - 1)/n reduced, for the reduce-scatter).
 */
#include "group.h"

void xc__sched_ring_rs(xc__sched_t *s, const xc__group_t *g, char *buf, char *tmp, size_t count,
                       size_t es)
{
    int n = g->n, r = g->me;
    if (n < 2) return;
    int right = xc__grp_rank(g, (r + 1) % n), left = xc__grp_rank(g, (r + n - 1) % n);
    for (int step = 0; step < n - 1; step++) {
        size_t so, sc, ro, rc;
        xc__block(count, n, xc__mod(r - step, n), &so, &sc);
        xc__block(count, n, xc__mod(r - step - 1, n), &ro, &rc);
        xc__sched_send(s, right, buf + so * es, sc * es);
        xc__sched_recv(s, left, tmp, rc * es);
        xc__sched_reduce(s, buf + ro * es, buf + ro * es, tmp, rc);
        xc__sched_round(s);
    }
}

void xc__sched_ring_ag(xc__sched_t *s, const xc__group_t *g, char *buf, size_t count, size_t es)
{
    int n = g->n, r = g->me;
    if (n < 2) return;
    int right = xc__grp_rank(g, (r + 1) % n), left = xc__grp_rank(g, (r + n - 1) % n);
    for (int step = 0; step < n - 1; step++) {
        size_t so, sc, ro, rc;
        xc__block(count, n, xc__mod(r + 1 - step, n), &so, &sc);
        xc__block(count, n, xc__mod(r - step, n), &ro, &rc);
        xc__sched_send(s, right, buf + so * es, sc * es);
        xc__sched_recv(s, left, buf + ro * es, rc * es);
        xc__sched_round(s);
    }
}

int xc__nodes_uniform(const xc_comm_t *comm)
{
    for (int n = 1; n < comm->nnodes; n++)
        if (comm->node_start[n + 1] - comm->node_start[n] != comm->node_start[1]) return 0;
    return 1;
}
