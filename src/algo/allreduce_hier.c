/*
 * allreduce_hier.c -- two-level all-reduce for communicators spanning
 * several nodes with L ranks each: the heavy traffic stays inside the node.
 *
 *   1. ring reduce-scatter among the L ranks of the node (shared-memory
 *      channels): local rank i ends with block b_i = (i + 1) % L of the data
 *      reduced over its node;
 *   2. ring all-reduce of block b_i among the K ranks with local index i,
 *      one per node (TCP): the L local ranks cross the network in parallel,
 *      each with 1/L of the data;
 *   3. ring all-gather of the blocks among the node's ranks.
 *
 * Each element is reduced along one fixed path (its node's ring, then its
 * block's ring across nodes) and then only copied, so every rank gets the
 * same bits; XC_AVG divides once, by N, in step 2.
 * Cost with M bytes, intra-node α_s β_s, inter-node α_n β_n:
 *   2(L-1)α_s + 2(L-1)/L·M β_s + 2(K-1)α_n + 2(K-1)/K·(M/L) β_n
 *   + ((L-1)/L + (K-1)/(KL))·M γ.
 * Per node, 2(K-1)/K·M bytes leave through the network against the flat
 * ring's 2(N-1)/N·M over the node's one outgoing ring edge: with 2 nodes
 * of 2 ranks the network carries 1/1.5 of the flat ring's bytes.
 * Nodes of different sizes: the flat ring (every rank agrees, the layout
 * is the communicator's).
 */
#include "group.h"

xc_result_t xc__build_allreduce_hier(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    if (!xc__nodes_uniform(comm)) return xc__build_allreduce_ring(comm, op, a);
    xc__sched_t *s = &op->sched;
    int L = comm->local_size, K = comm->nnodes;
    xc__group_t node = {comm->node_ranks + comm->node_start[comm->node], 1, L, comm->local_rank};
    xc__group_t cross = {comm->node_ranks + comm->local_rank, L, K, comm->node};
    size_t es = xc__dtype_size(a->dtype);
    char *buf = a->rbuf;
    xc__sched_copy(s, buf, a->sbuf, a->count * es);
    xc__sched_round(s);
    size_t bo, bc; /* this rank's node block */
    xc__block(a->count, L, xc__ring_owned(&node), &bo, &bc);
    size_t tmp_elems = a->count / (size_t)L + 1;
    char *tmp = xc__sched_scratch(s, tmp_elems * es);
    xc__sched_ring_rs(s, &node, buf, tmp, a->count, es);
    char *blk = buf + bo * es;
    xc__sched_ring_rs(s, &cross, blk, tmp, bc, es);
    size_t oo, oc;
    xc__block(bc, K, xc__ring_owned(&cross), &oo, &oc);
    xc__sched_finalize(s, blk + oo * es, oc);
    xc__sched_round(s);
    xc__sched_ring_ag(s, &cross, blk, bc, es);
    xc__sched_ring_ag(s, &node, buf, a->count, es);
    return XC_OK;
}
