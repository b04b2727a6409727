/*
 * select.c -- the registry of algorithms and the choice among them.
 *
 * Every algorithm is registered with its builder and its cost function
 * (src/model/cost_*.c).  Per call, the selector runs the algorithm the cost
 * model predicts fastest for (collective, bytes, dtype x op, ranks, node
 * layout) under the communicator's profile (model.h), which every rank
 * holds identically, so every rank chooses the same one; the choice also
 * travels in each frame's header, so a divergence is XC_ERR_MISMATCH.
 *
 * Hot path: below SEL_EXACT_FROM bytes the choice is a table lookup per
 * (collective, dtype, reduction class, quarter-octave of bytes), filled on
 * first use from the model at the bucket's middle size -- an 8-byte
 * all-reduce pays one load.  Larger calls ask the model exactly (a few
 * hundred nanoseconds against at least tens of microseconds of transfer).
 * XCOLL_DEBUG=INFO logs each choice once per (collective, size bucket).
 *
 * XCOLL_DETERMINISTIC=1 restricts floating-point sums, products and
 * averages to the rank-ordered algorithms (docs/deterministic.md).
 * XCOLL_ALGO forces an algorithm per collective, e.g.
 * XCOLL_ALGO=allreduce.ring,bcast.chain (also spelt allreduce:ring); it must
 * be the same on every rank.  While a communicator is being created (no
 * profile yet) the bootstrap rule below picks, and a forced shared-memory
 * algorithm waits until the segment exists (calls on a communicator
 * without one fail with XC_ERR_INVALID, as they always did).
 */
#include "shm_coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A(id_, coll_, name_, fn_, shm_)                                        \
    [XC__ALGO_##id_] = {XC__ALGO_##id_, XC_COLL_##coll_, name_, xc__build_##fn_, shm_,    \
                        xc__cost_##fn_}

/* The rank-ordered exchange: deterministic mode's, not the model's pick. */
#define DET(id_, coll_, name_, fn_)                                            \
    [XC__ALGO_##id_] = {XC__ALGO_##id_, XC_COLL_##coll_, name_, xc__build_##fn_, 0,       \
                        xc__cost_##fn_, 1}

/* A shared-memory algorithm with an express path for small blocking
 * calls: its own (AX), or the symmetric collectives' (AXA, shm_coll.c
 * xc__shm_express_all). */
#define AXF(id_, coll_, name_, fn_, express_)                                  \
    [XC__ALGO_##id_] = {XC__ALGO_##id_, XC_COLL_##coll_, name_, xc__build_##fn_, 1,       \
                        xc__cost_##fn_, 0, express_}
#define AX(id_, coll_, name_, fn_) AXF(id_, coll_, name_, fn_, xc__express_##fn_)
#define AXA(id_, coll_, name_, fn_) AXF(id_, coll_, name_, fn_, xc__shm_express_all)

/* Indexed by id (entries without a name are unused ids). */
static const xc__algo_t g_algos[XC__ALGO_COUNT] = {
    A(ALLREDUCE_RING, ALLREDUCE, "allreduce.ring", allreduce_ring, 0),
    A(ALLREDUCE_TREE, ALLREDUCE, "allreduce.tree", allreduce_tree, 0),
    A(REDUCE_SCATTER_RING, REDUCE_SCATTER, "reduce_scatter.ring", reduce_scatter_ring, 0),
    A(ALLGATHER_RING, ALLGATHER, "allgather.ring", allgather_ring, 0),
    A(REDUCE_BINOMIAL, REDUCE, "reduce.binomial", reduce_binomial, 0),
    A(BCAST_BINOMIAL, BCAST, "bcast.binomial", bcast_binomial, 0),
    A(ALLTOALL_PAIRWISE, ALLTOALL, "alltoall.pairwise", alltoall_pairwise, 0),
    A(ALLTOALLV_PAIRWISE, ALLTOALLV, "alltoallv.pairwise", alltoallv_pairwise, 0),
    A(BARRIER_DISSEMINATION, BARRIER, "barrier.dissemination", barrier_dissemination, 0),
    AX(SHM_ALLREDUCE, ALLREDUCE, "allreduce.shm", shm_allreduce),
    AXA(SHM_REDUCE_SCATTER, REDUCE_SCATTER, "reduce_scatter.shm", shm_reduce_scatter),
    AXA(SHM_ALLGATHER, ALLGATHER, "allgather.shm", shm_allgather),
    AX(SHM_BCAST, BCAST, "bcast.shm", shm_bcast),
    AX(SHM_REDUCE, REDUCE, "reduce.shm", shm_reduce),
    AXA(SHM_ALLTOALL, ALLTOALL, "alltoall.shm", shm_alltoall),
    AXA(SHM_BARRIER, BARRIER, "barrier.shm", shm_barrier),
    A(ALLREDUCE_RHD, ALLREDUCE, "allreduce.rhd", allreduce_rhd, 0),
    A(ALLREDUCE_RD, ALLREDUCE, "allreduce.rd", allreduce_rd, 0),
    A(REDUCE_SCATTER_RHALVING, REDUCE_SCATTER, "reduce_scatter.rhalving",
      reduce_scatter_rhalving, 0),
    A(REDUCE_SCATTER_PAIRWISE, REDUCE_SCATTER, "reduce_scatter.pairwise",
      reduce_scatter_pairwise, 0),
    A(ALLGATHER_RD, ALLGATHER, "allgather.rd", allgather_rd, 0),
    A(ALLGATHER_BRUCK, ALLGATHER, "allgather.bruck", allgather_bruck, 0),
    A(BCAST_SCATTER_AG, BCAST, "bcast.scatter_ag", bcast_scatter_ag, 0),
    A(BCAST_CHAIN, BCAST, "bcast.chain", bcast_chain, 0),
    A(REDUCE_RS_GATHER, REDUCE, "reduce.rs_gather", reduce_rs_gather, 0),
    A(ALLTOALL_BRUCK, ALLTOALL, "alltoall.bruck", alltoall_bruck, 0),
    A(ALLREDUCE_HIER, ALLREDUCE, "allreduce.hier", allreduce_hier, 0),
    A(ALLTOALL_HIER, ALLTOALL, "alltoall.hier", alltoall_hier, 0),
    DET(ALLREDUCE_DET, ALLREDUCE, "allreduce.det", allreduce_det),
    DET(REDUCE_SCATTER_DET, REDUCE_SCATTER, "reduce_scatter.det", reduce_scatter_det),
    DET(REDUCE_DET, REDUCE, "reduce.det", reduce_det),
    A(ALLREDUCE_DBTREE, ALLREDUCE, "allreduce.dbtree", allreduce_dbtree, 0),
};
#undef A
#undef DET

/* Sizes below this use the choice table; 4 buckets per octave. */
#define SEL_EXACT_LOG2 18
#define SEL_EXACT_FROM ((size_t)1 << SEL_EXACT_LOG2)
#define SEL_BUCKETS (1 + 4 * SEL_EXACT_LOG2)

struct xc__sel_state {
    xc__model_topo_t topo;
    /* Algorithm id + 0 (0 = not yet chosen), relaxed atomics: racing
     * fillers store the same value. */
    uint8_t choice[XC_COLL_COUNT][XC_DTYPE_COUNT][XC__GOP_COUNT][SEL_BUCKETS];
    /* Larger sizes: octaves already logged (atomic fetch-or). */
    uint64_t logged[XC_COLL_COUNT];
};

const xc__model_topo_t *xc__algo_topo(const xc_comm_t *comm)
{
    return comm->profile && comm->profile->sel ? &comm->profile->sel->topo : NULL;
}

const xc__algo_t *xc__algo_table(size_t *n)
{
    *n = XC__ALGO_COUNT;
    return g_algos;
}

const char *xc_algo_name(int algo)
{
    if (algo == XC__ALGO_P2P) return "p2p";
    return algo > 0 && algo < XC__ALGO_COUNT ? g_algos[algo].name : NULL;
}

const xc__algo_t *xc__algo_by_id(int id)
{
    return id > 0 && id < XC__ALGO_COUNT && g_algos[id].name ? &g_algos[id] : NULL;
}

xc_result_t xc__algo_parse_env(xc_comm_t *comm)
{
    memset(comm->forced_algo, 0, sizeof comm->forced_algo);
    const char *env = getenv("XCOLL_ALGO");
    if (!env || !*env) return XC_OK;
    const char *p = env;
    while (*p) {
        size_t n = strcspn(p, ",");
        char want[80];
        snprintf(want, sizeof want, "%.*s", (int)n, p);
        char *colon = strchr(want, ':'); /* "allreduce:ring" = "allreduce.ring" */
        if (colon) *colon = '.';
        const xc__algo_t *a = NULL;
        for (int i = 1; i < XC__ALGO_COUNT && !a; i++)
            if (g_algos[i].name && n < sizeof want && !strcmp(g_algos[i].name, want))
                a = &g_algos[i];
        if (!a)
            return xc__err(XC_ERR_INVALID, "XCOLL_ALGO=\"%s\": unknown algorithm \"%.*s\"", env,
                           (int)n, p);
        comm->forced_algo[a->coll] = a->id;
        p += n;
        if (*p == ',') p++;
    }
    return XC_OK;
}

size_t xc__algo_sel_bytes(void) { return sizeof(struct xc__sel_state); }

static xc_result_t no_shm(const xc__algo_t *a)
{
    return xc__err(XC_ERR_INVALID,
                   "XCOLL_ALGO forces %s, but this communicator has no shared memory "
                   "(ranks on several nodes, XCOLL_SHM=0, or a single rank)",
                   a->name);
}

xc_result_t xc__algo_sel_init(xc_comm_t *comm, void *mem)
{
    struct xc__sel_state *st = mem;
    xc__model_topo_of(comm, &st->topo);
    comm->profile->sel = st;
    return XC_OK;
}

/* While the communicator is created (no profile yet): shared memory when
 * attached, else a latency-friendly tree for small all-reduces and the
 * first-registered algorithm otherwise. */
static xc_result_t bootstrap(const xc_comm_t *comm, const xc__args_t *a, const xc__algo_t **out)
{
    int id = XC__ALGO_NONE;
    if (comm->shm) {
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
    }
    if (id == XC__ALGO_NONE) {
        switch (a->coll) {
        case XC_COLL_ALLREDUCE: {
            size_t bytes = a->count * xc__dtype_size(a->dtype);
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
    }
    *out = xc__algo_by_id(id);
    if (!*out) return xc__err(XC_ERR_INTERNAL, "no algorithm for %s", xc_coll_name(a->coll));
    return XC_OK;
}

static xc_result_t forced(const xc_comm_t *comm, const xc__args_t *a, const xc__algo_t **out)
{
    *out = xc__algo_by_id(comm->forced_algo[a->coll]);
    if ((*out)->needs_shm && !comm->shm) {
        if (!comm->profile) return bootstrap(comm, a, out); /* still being created */
        return no_shm(*out);
    }
    return XC_OK;
}

static int reduces(xc_coll_t c)
{
    return c == XC_COLL_ALLREDUCE || c == XC_COLL_REDUCE_SCATTER || c == XC_COLL_REDUCE;
}

/* Quarter-octave bucket of bytes < SEL_EXACT_FROM: 0 for 0, then 4 per
 * power of two (sizes 1..3 each alone). */
static inline unsigned bucket(size_t bytes)
{
    if (!bytes) return 0;
    unsigned o = 63u - (unsigned)__builtin_clzll((unsigned long long)bytes);
    unsigned q = o >= 2 ? (unsigned)(bytes >> (o - 2)) & 3u : o == 1 ? (unsigned)(bytes & 1) * 2 : 0;
    return 1 + 4 * o + q;
}

/* [lo, hi) of bucket b (b > 0). */
static void bucket_range(unsigned b, size_t *lo, size_t *hi)
{
    unsigned o = (b - 1) / 4, q = (b - 1) % 4;
    if (o < 2) {
        *lo = o == 0 ? 1 : 2 + q / 2;
        *hi = *lo + 1;
        return;
    }
    *lo = (size_t)(4 + q) << (o - 2);
    *hi = *lo + ((size_t)1 << (o - 2));
}

/* XCOLL_DEBUG=trace: every candidate's price beside a choice. */
static void log_prices(const xc_comm_t *comm, const xc__model_call_t *call)
{
    char buf[768];
    size_t n, len = 0;
    const xc__algo_t *tab = xc__algo_table(&n);
    buf[0] = 0;
    for (size_t i = 0; i < n && len < sizeof buf - 64; i++) {
        if (tab[i].coll != call->coll || tab[i].explicit_only) continue;
        double v = xc__model_predict(comm->profile, &comm->profile->sel->topo, tab[i].id, call);
        if (v < 0) continue;
        len += (size_t)snprintf(buf + len, sizeof buf - len, " %s %.2f", tab[i].name, v * 1e6);
    }
    XC_TRACE("  prices at %zu elements (us):%s", call->count, buf);
}

static void log_choice(const xc_comm_t *comm, const xc__args_t *a, size_t lo, size_t hi,
                       int id, double t, int next, double nt)
{
    char range[64], what[64] = "";
    if (hi > lo + 1) snprintf(range, sizeof range, "%zu..%zu B", lo, hi - 1);
    else snprintf(range, sizeof range, "%zu B", lo);
    if (reduces(a->coll))
        snprintf(what, sizeof what, " %s %s", xc_dtype_name(a->dtype), xc_op_name(a->op));
    const xc__model_topo_t *tp = &comm->profile->sel->topo;
    if (next)
        XC_INFO("select %s %s%s (%d ranks, %d nodes): %s, predicted %.2f us (next: %s %.2f us)",
                xc_coll_name(a->coll), range, what, tp->nranks, tp->nnodes, g_algos[id].name,
                t * 1e6, g_algos[next].name, nt * 1e6);
    else
        XC_INFO("select %s %s%s (%d ranks, %d nodes): %s, predicted %.2f us",
                xc_coll_name(a->coll), range, what, tp->nranks, tp->nnodes, g_algos[id].name,
                t * 1e6);
}

/* Ask the model (first call of a bucket, or a large call). */
static xc_result_t choose(const xc_comm_t *comm, const xc__args_t *a, size_t bytes,
                          const xc__algo_t **out)
{
    struct xc__sel_state *st = comm->profile->sel;
    int red = reduces(a->coll);
    xc__model_call_t call = {a->coll, a->count, red ? a->dtype : XC_UINT8, red ? a->op : XC_SUM, 0};
    size_t es = xc__dtype_size(call.dtype), lo = bytes, hi = bytes + 1;
    uint8_t *slot = NULL;
    if (bytes < SEL_EXACT_FROM) {
        unsigned b = bucket(bytes);
        slot = &st->choice[a->coll][red ? a->dtype : 0][red ? xc__gop(a->op) : 0][b];
        if (b) {
            bucket_range(b, &lo, &hi);
            size_t mid = lo + (hi - lo) / 2;
            call.count = mid / es ? mid / es : 1;
        }
    } else {
        call.count = bytes / es;
    }
    double t, nt;
    int next;
    int id = xc__model_choose(comm->profile, &st->topo, &call, &t, &next, &nt);
    if (id == XC__ALGO_NONE) return bootstrap(comm, a, out);
    *out = &g_algos[id];
    if (slot) {
        __atomic_store_n(slot, (uint8_t)id, __ATOMIC_RELAXED);
        if (xc__log_level() >= XC__LOG_INFO) log_choice(comm, a, lo, hi, id, t, next, nt);
        if (xc__log_level() >= XC__LOG_TRACE) log_prices(comm, &call);
    } else if (xc__log_level() >= XC__LOG_INFO) {
        unsigned o = 63u - (unsigned)__builtin_clzll((unsigned long long)bytes);
        uint64_t bit = 1ull << o;
        if (!(__atomic_fetch_or(&st->logged[a->coll], bit, __ATOMIC_RELAXED) & bit)) {
            log_choice(comm, a, (size_t)1 << o, (size_t)2 << o, id, t, next, nt);
            if (xc__log_level() >= XC__LOG_TRACE) log_prices(comm, &call);
        }
    }
    return XC_OK;
}

/* Does the result of this call depend on the order of reduction?  (Floating
 * point sum, product, average: yes; integers wrap, min/max are exact.) */
static int order_sensitive(const xc__args_t *a)
{
    if (!reduces(a->coll)) return 0;
    int fp = a->dtype == XC_FLOAT16 || a->dtype == XC_BFLOAT16 || a->dtype == XC_FLOAT32 ||
             a->dtype == XC_FLOAT64;
    return fp && (a->op == XC_SUM || a->op == XC_PROD || a->op == XC_AVG);
}

/* Algorithms that reduce every element in rank order (det.c and the
 * shared-memory collectives). */
static int rank_ordered(int id)
{
    return id == XC__ALGO_SHM_ALLREDUCE || id == XC__ALGO_SHM_REDUCE_SCATTER ||
           id == XC__ALGO_SHM_REDUCE || id == XC__ALGO_ALLREDUCE_DET ||
           id == XC__ALGO_REDUCE_SCATTER_DET || id == XC__ALGO_REDUCE_DET;
}

/* XCOLL_DETERMINISTIC=1 (docs/deterministic.md): the shared-memory
 * collectives on one node, the rank-ordered exchange elsewhere -- both
 * compute the same bits -- and nothing else, even when forced. */
static xc_result_t select_deterministic(const xc_comm_t *comm, const xc__args_t *a,
                                        const xc__algo_t **out)
{
    const xc__algo_t *f = xc__algo_by_id(comm->forced_algo[a->coll]);
    if (f && !rank_ordered(f->id))
        return xc__err(XC_ERR_INVALID,
                       "XCOLL_ALGO forces %s, which does not reduce in rank order, but "
                       "XCOLL_DETERMINISTIC=1 (use the %s.shm or %s.det algorithm)",
                       f->name, xc_coll_name(a->coll), xc_coll_name(a->coll));
    if (f) return forced(comm, a, out);
    int shm = comm->shm != NULL;
    int id = a->coll == XC_COLL_ALLREDUCE        ? (shm ? XC__ALGO_SHM_ALLREDUCE : XC__ALGO_ALLREDUCE_DET)
             : a->coll == XC_COLL_REDUCE_SCATTER ? (shm ? XC__ALGO_SHM_REDUCE_SCATTER : XC__ALGO_REDUCE_SCATTER_DET)
                                                 : (shm ? XC__ALGO_SHM_REDUCE : XC__ALGO_REDUCE_DET);
    *out = xc__algo_by_id(id);
    return XC_OK;
}

xc_result_t xc__algo_select(const xc_comm_t *comm, const xc__args_t *a, const xc__algo_t **out)
{
    if (XC__UNLIKELY(comm->cfg.deterministic) && order_sensitive(a))
        return select_deterministic(comm, a, out);
    if (XC__UNLIKELY(comm->forced_algo[a->coll])) return forced(comm, a, out);
    const xc__profile_t *p = comm->profile;
    if (XC__UNLIKELY(!p)) return bootstrap(comm, a, out);
    size_t bytes = a->count * xc__dtype_size(a->dtype);
    if (XC__LIKELY(bytes < SEL_EXACT_FROM)) {
        int red = reduces(a->coll);
        const uint8_t *slot = &p->sel->choice[a->coll][red ? a->dtype : 0]
                                            [red ? xc__gop(a->op) : 0][bucket(bytes)];
        int id = __atomic_load_n(slot, __ATOMIC_RELAXED);
        if (XC__LIKELY(id)) {
            *out = &g_algos[id];
            return XC_OK;
        }
    }
    return choose(comm, a, bytes, out);
}
