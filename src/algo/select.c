/*
 * select.c -- the registry of algorithms and the choice among them.
 *
 * Today's rule (issue 4 replaces it with the calibrated cost model): the
 * tree all-reduce (log N rounds) for messages up to 16 KiB or fewer elements
 * than ranks, the ring (bandwidth-optimal) above.  XCOLL_ALGO forces an
 * algorithm per collective, e.g. XCOLL_ALGO=allreduce.ring; it must be the
 * same on every rank (a difference is detected as XC_ERR_MISMATCH).  The
 * rest of the portfolio (allreduce.rhd/.rd, reduce_scatter.rhalving/
 * .pairwise, allgather.rd/.bruck, bcast.scatter_ag/.chain,
 * reduce.rs_gather, alltoall.bruck; costs in docs/algorithms.md) runs only
 * when forced until the cost model chooses among them.
 */
#include "shm_coll.h"

#include <stdlib.h>
#include <string.h>

static const xc__algo_t g_algos[] = {
    {XC__ALGO_ALLREDUCE_RING, XC_COLL_ALLREDUCE, "allreduce.ring", xc__build_allreduce_ring, 0},
    {XC__ALGO_ALLREDUCE_TREE, XC_COLL_ALLREDUCE, "allreduce.tree", xc__build_allreduce_tree, 0},
    {XC__ALGO_REDUCE_SCATTER_RING, XC_COLL_REDUCE_SCATTER, "reduce_scatter.ring",
     xc__build_reduce_scatter_ring, 0},
    {XC__ALGO_ALLGATHER_RING, XC_COLL_ALLGATHER, "allgather.ring", xc__build_allgather_ring, 0},
    {XC__ALGO_REDUCE_BINOMIAL, XC_COLL_REDUCE, "reduce.binomial", xc__build_reduce_binomial, 0},
    {XC__ALGO_BCAST_BINOMIAL, XC_COLL_BCAST, "bcast.binomial", xc__build_bcast_binomial, 0},
    {XC__ALGO_ALLTOALL_PAIRWISE, XC_COLL_ALLTOALL, "alltoall.pairwise",
     xc__build_alltoall_pairwise, 0},
    {XC__ALGO_ALLTOALLV_PAIRWISE, XC_COLL_ALLTOALLV, "alltoallv.pairwise",
     xc__build_alltoallv_pairwise, 0},
    {XC__ALGO_BARRIER_DISSEMINATION, XC_COLL_BARRIER, "barrier.dissemination",
     xc__build_barrier_dissemination, 0},
    {XC__ALGO_SHM_ALLREDUCE, XC_COLL_ALLREDUCE, "allreduce.shm", xc__build_shm_allreduce, 1},
    {XC__ALGO_SHM_REDUCE_SCATTER, XC_COLL_REDUCE_SCATTER, "reduce_scatter.shm",
     xc__build_shm_reduce_scatter, 1},
    {XC__ALGO_SHM_ALLGATHER, XC_COLL_ALLGATHER, "allgather.shm", xc__build_shm_allgather, 1},
    {XC__ALGO_SHM_BCAST, XC_COLL_BCAST, "bcast.shm", xc__build_shm_bcast, 1},
    {XC__ALGO_SHM_REDUCE, XC_COLL_REDUCE, "reduce.shm", xc__build_shm_reduce, 1},
    {XC__ALGO_SHM_ALLTOALL, XC_COLL_ALLTOALL, "alltoall.shm", xc__build_shm_alltoall, 1},
    {XC__ALGO_SHM_BARRIER, XC_COLL_BARRIER, "barrier.shm", xc__build_shm_barrier, 1},
    {XC__ALGO_ALLREDUCE_RHD, XC_COLL_ALLREDUCE, "allreduce.rhd", xc__build_allreduce_rhd, 0},
    {XC__ALGO_ALLREDUCE_RD, XC_COLL_ALLREDUCE, "allreduce.rd", xc__build_allreduce_rd, 0},
    {XC__ALGO_REDUCE_SCATTER_RHALVING, XC_COLL_REDUCE_SCATTER, "reduce_scatter.rhalving",
     xc__build_reduce_scatter_rhalving, 0},
    {XC__ALGO_REDUCE_SCATTER_PAIRWISE, XC_COLL_REDUCE_SCATTER, "reduce_scatter.pairwise",
     xc__build_reduce_scatter_pairwise, 0},
    {XC__ALGO_ALLGATHER_RD, XC_COLL_ALLGATHER, "allgather.rd", xc__build_allgather_rd, 0},
    {XC__ALGO_ALLGATHER_BRUCK, XC_COLL_ALLGATHER, "allgather.bruck", xc__build_allgather_bruck,
     0},
    {XC__ALGO_BCAST_SCATTER_AG, XC_COLL_BCAST, "bcast.scatter_ag", xc__build_bcast_scatter_ag,
     0},
    {XC__ALGO_BCAST_CHAIN, XC_COLL_BCAST, "bcast.chain", xc__build_bcast_chain, 0},
    {XC__ALGO_REDUCE_RS_GATHER, XC_COLL_REDUCE, "reduce.rs_gather", xc__build_reduce_rs_gather,
     0},
    {XC__ALGO_ALLTOALL_BRUCK, XC_COLL_ALLTOALL, "alltoall.bruck", xc__build_alltoall_bruck, 0},
    {XC__ALGO_ALLREDUCE_HIER, XC_COLL_ALLREDUCE, "allreduce.hier", xc__build_allreduce_hier, 0},
    {XC__ALGO_ALLTOALL_HIER, XC_COLL_ALLTOALL, "alltoall.hier", xc__build_alltoall_hier, 0},
    {XC__ALGO_ALLREDUCE_DET, XC_COLL_ALLREDUCE, "allreduce.det", xc__build_allreduce_det, 0},
    {XC__ALGO_REDUCE_SCATTER_DET, XC_COLL_REDUCE_SCATTER, "reduce_scatter.det",
     xc__build_reduce_scatter_det, 0},
    {XC__ALGO_REDUCE_DET, XC_COLL_REDUCE, "reduce.det", xc__build_reduce_det, 0},
    {XC__ALGO_ALLREDUCE_DBTREE, XC_COLL_ALLREDUCE, "allreduce.dbtree", xc__build_allreduce_dbtree,
     0},
};
#define NALGOS (sizeof g_algos / sizeof g_algos[0])

const char *xc_algo_name(int algo)
{
    if (algo == XC__ALGO_P2P) return "p2p";
    for (size_t i = 0; i < NALGOS; i++)
        if (g_algos[i].id == algo) return g_algos[i].name;
    return NULL;
}

static const xc__algo_t *by_id(int id)
{
    for (size_t i = 0; i < NALGOS; i++)
        if (g_algos[i].id == id) return &g_algos[i];
    return NULL;
}

xc_result_t xc__algo_parse_env(xc_comm_t *comm)
{
    memset(comm->forced_algo, 0, sizeof comm->forced_algo);
    const char *env = getenv("XCOLL_ALGO");
    if (!env || !*env) return XC_OK;
    const char *p = env;
    while (*p) {
        size_t n = strcspn(p, ",");
        size_t i;
        for (i = 0; i < NALGOS; i++)
            if (strlen(g_algos[i].name) == n && !strncmp(g_algos[i].name, p, n)) break;
        if (i == NALGOS)
            return xc__err(XC_ERR_INVALID, "XCOLL_ALGO=\"%s\": unknown algorithm \"%.*s\"", env,
                           (int)n, p);
        comm->forced_algo[g_algos[i].coll] = g_algos[i].id;
        p += n;
        if (*p == ',') p++;
    }
    return XC_OK;
}

/* Does the result of this call depend on the order of reduction?  (Floating
 * point sum, product, average: yes; integers wrap, min/max are exact.) */
static int order_sensitive(const xc__args_t *a)
{
    if (a->coll != XC_COLL_ALLREDUCE && a->coll != XC_COLL_REDUCE_SCATTER &&
        a->coll != XC_COLL_REDUCE)
        return 0;
    int fp = a->dtype == XC_FLOAT16 || a->dtype == XC_BFLOAT16 || a->dtype == XC_FLOAT32 ||
             a->dtype == XC_FLOAT64;
    return fp && (a->op == XC_SUM || a->op == XC_PROD || a->op == XC_AVG);
}

/* Algorithms that reduce every element in rank order (det.c). */
static int rank_ordered(int id)
{
    return id == XC__ALGO_SHM_ALLREDUCE || id == XC__ALGO_SHM_REDUCE_SCATTER ||
           id == XC__ALGO_SHM_REDUCE || id == XC__ALGO_ALLREDUCE_DET ||
           id == XC__ALGO_REDUCE_SCATTER_DET || id == XC__ALGO_REDUCE_DET;
}

/* XCOLL_DETERMINISTIC=1: the shared-memory collectives on one node, the
 * rank-ordered exchange elsewhere -- both compute the same bits. */
static xc_result_t select_deterministic(const xc_comm_t *comm, const xc__args_t *a,
                                        const xc__algo_t **out)
{
    const xc__algo_t *forced = comm->forced_algo[a->coll] ? by_id(comm->forced_algo[a->coll]) : NULL;
    if (forced && !rank_ordered(forced->id))
        return xc__err(XC_ERR_INVALID,
                       "XCOLL_ALGO forces %s, which does not reduce in rank order, but "
                       "XCOLL_DETERMINISTIC=1 (use the %s.shm or %s.det algorithm)",
                       forced->name, xc_coll_name(a->coll), xc_coll_name(a->coll));
    if (forced && forced->needs_shm && !comm->shm)
        return xc__err(XC_ERR_INVALID, "XCOLL_ALGO forces %s, but this communicator has no "
                                       "shared memory", forced->name);
    if (forced) {
        *out = forced;
        return XC_OK;
    }
    int id = a->coll == XC_COLL_ALLREDUCE        ? (comm->shm ? XC__ALGO_SHM_ALLREDUCE : XC__ALGO_ALLREDUCE_DET)
             : a->coll == XC_COLL_REDUCE_SCATTER ? (comm->shm ? XC__ALGO_SHM_REDUCE_SCATTER : XC__ALGO_REDUCE_SCATTER_DET)
                                                 : (comm->shm ? XC__ALGO_SHM_REDUCE : XC__ALGO_REDUCE_DET);
    *out = by_id(id);
    return XC_OK;
}

xc_result_t xc__algo_select(const xc_comm_t *comm, const xc__args_t *a, const xc__algo_t **out)
{
    if (comm->cfg.deterministic && order_sensitive(a)) return select_deterministic(comm, a, out);
    *out = comm->forced_algo[a->coll] ? by_id(comm->forced_algo[a->coll]) : NULL;
    if (*out) {
        if ((*out)->needs_shm && !comm->shm)
            return xc__err(XC_ERR_INVALID,
                           "XCOLL_ALGO forces %s, but this communicator has no shared memory "
                           "(ranks on several nodes, XCOLL_SHM=0, or a single rank)",
                           (*out)->name);
        return XC_OK;
    }
    int id = XC__ALGO_NONE;
    if (comm->shm) {
        /* All ranks on one node: shared-memory-native collectives. */
        switch (a->coll) {
        case XC_COLL_ALLREDUCE: id = XC__ALGO_SHM_ALLREDUCE; break;
        case XC_COLL_REDUCE_SCATTER: id = XC__ALGO_SHM_REDUCE_SCATTER; break;
        case XC_COLL_ALLGATHER: id = XC__ALGO_SHM_ALLGATHER; break;
        case XC_COLL_BCAST: id = XC__ALGO_SHM_BCAST; break;
        case XC_COLL_REDUCE: id = XC__ALGO_SHM_REDUCE; break;
        case XC_COLL_ALLTOALL: id = XC__ALGO_SHM_ALLTOALL; break;
        case XC_COLL_BARRIER: id = XC__ALGO_SHM_BARRIER; break;
        default: break;
        }
        if (id != XC__ALGO_NONE) {
            *out = by_id(id);
            return XC_OK;
        }
    }
    switch (a->coll) {
    case XC_COLL_ALLREDUCE: {
        size_t bytes = a->count * xc_dtype_size(a->dtype);
        id = bytes <= 16384 || a->count < (size_t)comm->size ? XC__ALGO_ALLREDUCE_TREE
                                                             : XC__ALGO_ALLREDUCE_RING;
        break;
    }
    case XC_COLL_REDUCE_SCATTER: id = XC__ALGO_REDUCE_SCATTER_RING; break;
    case XC_COLL_ALLGATHER: id = XC__ALGO_ALLGATHER_RING; break;
    case XC_COLL_REDUCE: id = XC__ALGO_REDUCE_BINOMIAL; break;
    case XC_COLL_BCAST: id = XC__ALGO_BCAST_BINOMIAL; break;
    case XC_COLL_ALLTOALL: id = XC__ALGO_ALLTOALL_PAIRWISE; break;
    case XC_COLL_ALLTOALLV: id = XC__ALGO_ALLTOALLV_PAIRWISE; break;
    case XC_COLL_BARRIER: id = XC__ALGO_BARRIER_DISSEMINATION; break;
    default: break;
    }
    *out = by_id(id);
    if (!*out) return xc__err(XC_ERR_INTERNAL, "no algorithm for %s", xc_coll_name(a->coll));
    return XC_OK;
}
