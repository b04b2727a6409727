/*
 * algos.h -- the algorithm registry: one file per (collective, algorithm),
 * each a builder that turns the call's arguments into a schedule (sched.h).
 * select.c chooses among the algorithms of a collective; every rank must
 * choose the same one for the same call (the choice depends only on
 * arguments every rank agrees on, and travels in each frame's header, so a
 * disagreement is XC_ERR_MISMATCH, not a hang).
 */
#ifndef XC_ALGOS_H
#define XC_ALGOS_H

#include "../core/comm.h"
#include "../model/model.h"

typedef struct xc__args {
    xc_coll_t coll;
    const void *sbuf;
    void *rbuf;
    size_t count;          /* per collective, as in the public API */
    xc_dtype_t dtype;
    xc_op_t op;
    int root;
    const size_t *scounts, *sdispls, *rcounts, *rdispls; /* alltoallv */
} xc__args_t;

/* Algorithm ids: stable, reported in statistics and frame headers. */
enum xc__algo_id {
    XC__ALGO_NONE = 0,
    XC__ALGO_ALLREDUCE_RING,
    XC__ALGO_ALLREDUCE_TREE,
    XC__ALGO_REDUCE_SCATTER_RING,
    XC__ALGO_ALLGATHER_RING,
    XC__ALGO_REDUCE_BINOMIAL,
    XC__ALGO_BCAST_BINOMIAL,
    XC__ALGO_ALLTOALL_PAIRWISE,
    XC__ALGO_ALLTOALLV_PAIRWISE,
    XC__ALGO_BARRIER_DISSEMINATION,
    XC__ALGO_P2P,
    XC__ALGO_SHM_ALLREDUCE,
    XC__ALGO_SHM_REDUCE_SCATTER,
    XC__ALGO_SHM_ALLGATHER,
    XC__ALGO_SHM_BCAST,
    XC__ALGO_SHM_REDUCE,
    XC__ALGO_SHM_ALLTOALL,
    XC__ALGO_SHM_BARRIER,
    XC__ALGO_ALLREDUCE_RHD,
    XC__ALGO_ALLREDUCE_RD,
    XC__ALGO_REDUCE_SCATTER_RHALVING,
    XC__ALGO_REDUCE_SCATTER_PAIRWISE,
    XC__ALGO_ALLGATHER_RD,
    XC__ALGO_ALLGATHER_BRUCK,
    XC__ALGO_BCAST_SCATTER_AG,
    XC__ALGO_BCAST_CHAIN,
    XC__ALGO_REDUCE_RS_GATHER,
    XC__ALGO_ALLTOALL_BRUCK,
    XC__ALGO_ALLREDUCE_HIER,
    XC__ALGO_ALLTOALL_HIER,
    XC__ALGO_ALLREDUCE_DET,
    XC__ALGO_REDUCE_SCATTER_DET,
    XC__ALGO_REDUCE_DET,
    XC__ALGO_ALLREDUCE_DBTREE,
    XC__ALGO_COUNT
};
_Static_assert(XC__ALGO_COUNT <= XC_STATS_MAX_ALGOS, "algorithm ids must fit xc_stats_t");


typedef xc_result_t (*xc__build_fn)(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a);

/* An express path (blocking calls only): run the operation in one step
 * without building it into the engine's queue, with the communicator's
 * lock held, idle and healthy, as collective `seq` described by *d.
 * XC__EXPRESS_DONE: it ran.  XC__EXPRESS_NO: not started (build and run
 * it).  XC__EXPRESS_BEGUN: started and left for the built operation of
 * this seq to finish (shared memory: comm->shm_begun). */
struct xc__algo;
enum { XC__EXPRESS_NO = 0, XC__EXPRESS_DONE = 1, XC__EXPRESS_BEGUN = 2 };
typedef int (*xc__express_fn)(xc_comm_t *comm, const struct xc__algo *algo, const xc__args_t *a,
                              const xc__desc_t *d, uint64_t seq);

typedef struct xc__algo {
    int id;
    xc_coll_t coll;
    const char *name;      /* "allreduce.ring" */
    xc__build_fn build;
    int needs_shm;         /* runs only on a communicator with shared memory */
    xc__cost_fn cost;      /* predicted time (src/model/cost_*.c) */
    int explicit_only;     /* never chosen by the model: forced, or by
                            * deterministic mode (its cost is still there
                            * for xc__model_predict) */
    xc__express_fn express; /* or NULL */
} xc__algo_t;

/* A blocking collective's express path (algo->express, engine.c) on an
 * idle, healthy communicator: 1 when it ran (*rc its result), 0 when it
 * did not (build and run the operation, which resumes it if it began). */
XC__HIDDEN int xc__op_express(xc_comm_t *comm, const xc__args_t *a, const xc__algo_t *algo,
                              xc_result_t *rc);

/* The registry (select.c): every algorithm, in a fixed order; *n entries.
 * The cost model walks it to choose (xc__model_choose). */
XC__HIDDEN const xc__algo_t *xc__algo_table(size_t *n);
/* The registry's entry of algorithm `id` (NULL if none). */
XC__HIDDEN const xc__algo_t *xc__algo_by_id(int id);

/* Cost functions, one per registered algorithm (src/model/cost_*.c). */
#define XC__COST_DECL(name)                                                    \
    XC__HIDDEN double xc__cost_##name(const xc__profile_t *, const xc__model_topo_t *, \
                                      const xc__model_call_t *)
XC__COST_DECL(allreduce_ring);
XC__COST_DECL(allreduce_tree);
XC__COST_DECL(allreduce_rhd);
XC__COST_DECL(allreduce_rd);
XC__COST_DECL(reduce_scatter_ring);
XC__COST_DECL(reduce_scatter_rhalving);
XC__COST_DECL(reduce_scatter_pairwise);
XC__COST_DECL(allgather_ring);
XC__COST_DECL(allgather_rd);
XC__COST_DECL(allgather_bruck);
XC__COST_DECL(bcast_binomial);
XC__COST_DECL(bcast_scatter_ag);
XC__COST_DECL(bcast_chain);
XC__COST_DECL(reduce_binomial);
XC__COST_DECL(reduce_rs_gather);
XC__COST_DECL(alltoall_pairwise);
XC__COST_DECL(alltoallv_pairwise);
XC__COST_DECL(alltoall_bruck);
XC__COST_DECL(barrier_dissemination);
XC__COST_DECL(shm_allreduce);
XC__COST_DECL(shm_reduce_scatter);
XC__COST_DECL(shm_allgather);
XC__COST_DECL(shm_bcast);
XC__COST_DECL(shm_reduce);
XC__COST_DECL(shm_alltoall);
XC__COST_DECL(shm_barrier);
XC__COST_DECL(allreduce_hier);
XC__COST_DECL(alltoall_hier);
XC__COST_DECL(allreduce_det);
XC__COST_DECL(reduce_scatter_det);
XC__COST_DECL(reduce_det);
XC__COST_DECL(allreduce_dbtree);

/* Segments of allreduce.dbtree for a message of `bytes` on trees of depth
 * `depth` (allreduce_dbtree.c); its cost function uses it too. */
XC__HIDDEN int xc__dbtree_segments(size_t bytes, int depth);
/* The most tree edges crossing one node's boundary (both trees), ranks
 * laid out node by node, ppn per node (0 on one node). */
XC__HIDDEN int xc__dbtree_cross(int n, int ppn);

/* Elements per segment of bcast.chain for `count` elements of `es` bytes
 * on N ranks (bcast_chain.c); its cost function uses it too. */
XC__HIDDEN size_t xc__chain_seg(size_t count, size_t es, int n);

/* Parse XCOLL_ALGO into comm->forced_algo (XC_ERR_INVALID names an
 * unknown algorithm).  Called once at creation. */
XC__HIDDEN xc_result_t xc__algo_parse_env(xc_comm_t *comm);

/* The selector's per-communicator state (choice table, topology): its size,
 * and its set-up in `mem` (zeroed, 8-byte aligned, allocated by
 * xc__model_init in the same block as the profile, so comm->profile is
 * freed with one free()). */
XC__HIDDEN size_t xc__algo_sel_bytes(void);
XC__HIDDEN xc_result_t xc__algo_sel_init(xc_comm_t *comm, void *mem);
/* The topology the selector prices calls under (NULL while the
 * communicator has no profile yet). */
XC__HIDDEN const xc__model_topo_t *xc__algo_topo(const xc_comm_t *comm);

/* The algorithm to run for this call (honours XCOLL_ALGO). */
XC__HIDDEN xc_result_t xc__algo_select(const xc_comm_t *comm, const xc__args_t *a,
                                       const xc__algo_t **out);

XC__HIDDEN xc_result_t xc__build_allreduce_ring(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allreduce_tree(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_reduce_scatter_ring(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allgather_ring(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_reduce_binomial(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_bcast_binomial(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_alltoall_pairwise(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_alltoallv_pairwise(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_barrier_dissemination(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allreduce_rhd(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allreduce_rd(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_reduce_scatter_rhalving(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_reduce_scatter_pairwise(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allgather_rd(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allgather_bruck(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_bcast_scatter_ag(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_bcast_chain(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_reduce_rs_gather(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_alltoall_bruck(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allreduce_hier(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_alltoall_hier(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allreduce_det(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_reduce_scatter_det(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_reduce_det(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_allreduce_dbtree(xc_comm_t *, xc__op_t *, const xc__args_t *);

/* Binomial trees (binomial.c).  reduce_tree: accumulate `count` elements
 * into `acc` (receiving children's partial sums into `tmp`) and send them
 * to the parent; the root ends with the total.  bcast_tree: receive `buf`
 * from the parent, forward it to the children. */
XC__HIDDEN void xc__sched_reduce_tree(xc__sched_t *s, int r, int n, int root, char *acc,
                                      char *tmp, size_t count, size_t es);
XC__HIDDEN void xc__sched_bcast_tree(xc__sched_t *s, int r, int n, int root, char *buf,
                                     size_t bytes);

/* Block i of `count` elements split as evenly as possible into n blocks
 * (the first count % n blocks one element larger). */
static inline void xc__block(size_t count, int n, int i, size_t *off, size_t *cnt)
{
    size_t q = count / (size_t)n, r = count % (size_t)n, ui = (size_t)i;
    *cnt = q + (ui < r);
    *off = ui * q + (ui < r ? ui : r);
}

static inline int xc__mod(int a, int n) { return ((a % n) + n) % n; }

/* Element offset of block i of xc__block's split (i == n gives count), so
 * blocks [i, j) span [xc__block_off(i), xc__block_off(j)). */
static inline size_t xc__block_off(size_t count, int n, int i)
{
    size_t q = count / (size_t)n, r = count % (size_t)n, ui = (size_t)i;
    return ui * q + (ui < r ? ui : r);
}

/* Largest power of two <= n (n >= 1). */
static inline int xc__pow2_floor(int n)
{
    int p = 1;
    while (p <= n / 2) p <<= 1;
    return p;
}

/* The usual fold of N ranks onto p = xc__pow2_floor(N) for the recursive
 * doubling/halving algorithms: of the first 2*(N-p) ranks, each odd rank
 * hands its data to the even rank below it and sits out (fold rank -1);
 * the even ones take fold rank r/2, the ranks from 2*(N-p) on r-(N-p).
 * xc__unfold maps a fold rank back to its rank. */
static inline int xc__fold(int r, int n)
{
    int rem = n - xc__pow2_floor(n);
    if (r < 2 * rem) return r % 2 ? -1 : r / 2;
    return r - rem;
}
static inline int xc__unfold(int fr, int n)
{
    int rem = n - xc__pow2_floor(n);
    return fr < rem ? 2 * fr : fr + rem;
}

/* Binomial tree helpers on ranks relative to a root. */
static inline int xc__rel(int rank, int root, int n) { return xc__mod(rank - root, n); }
static inline int xc__abs(int vrank, int root, int n) { return (vrank + root) % n; }

#endif
