/*
 * model.c -- prediction and choice over the algorithm registry, and the
 * topology a communicator (or a tool, without one) presents to the model.
 *
 * xc__model_choose walks select.c's registry in its fixed order and keeps
 * the strictly cheapest valid algorithm, so equal inputs give the same
 * answer on every rank.
 */
#include "../algo/algos.h"
#include "../algo/shm_coll.h"
#include "../core/comm.h"
#include "cost.h"

#include <stdlib.h>
#include <unistd.h>

static double cost_of(const xc__algo_t *a, const xc__profile_t *p, const xc__model_topo_t *t,
                      const xc__model_call_t *c)
{
    if (a->coll != c->coll || !a->cost) return -1;
    if (a->needs_shm && !t->shm) return -1;
    double v = a->cost(p, t, c);
    if (!a->needs_shm) v += p->sched_call; /* shm syncs already hold theirs */
    return v == v ? v : -1; /* NaN: not usable */
}

/* Oversubscription: ranks beyond the cores wait for a turn. */
static double crowding(const xc__model_topo_t *t)
{
    return t->cores > 0 && t->ppn > t->cores ? (double)t->ppn / t->cores : 1;
}

double xc__model_predict(const xc__profile_t *p, const xc__model_topo_t *t, int algo_id,
                         const xc__model_call_t *c)
{
    const xc__algo_t *a = xc__algo_by_id(algo_id);
    double v = a ? cost_of(a, p, t, c) : -1;
    if (v >= 0) v += xc__model_cold(p, t, c);
    return v < 0 ? v : v * crowding(t);
}

double xc__model_cold(const xc__profile_t *p, const xc__model_topo_t *t, const xc__model_call_t *c)
{
    if (!c->cold) return 0;
    double ws = xc__m_make(p, t, c).ws;
    if (c->cold == XC__COLD_XCMEM && p->cold_xcmem)
        return p->cold_huge_alpha + p->cold_huge_beta * ws;
    return p->cold_alpha + p->cold_beta * ws;
}

/* A crowded node (more ranks than cores): the shared-memory algorithm is
 * chosen whatever the prices say, at every size.  There a schedule's
 * every round waits for a partner that may not be running (a yield and a
 * wake-up each, several microseconds), while the shm collectives
 * synchronise once or twice a chunk; the quick profile cannot price that
 * -- its pair of ranks measures the link with the others asleep, and its
 * synchronisation time swings 30x between starts (0.66-38 us predicted
 * for one 8-byte broadcast) -- and in one start of two it put tiny
 * collectives on p2p schedules: bcast.chain 23-100 us and
 * reduce_scatter.rhalving 26-250 us against the shm paths' 0.4 and 13 us
 * (4 ranks on 2 cores, seventeenth session, bench/RESULTS.md).  The rule
 * stopped at 32 KiB a rank until the thirty-seventh session, when every
 * algorithm of every collective was timed at 32 KiB / 256 KiB / 2 MiB on
 * 4 and 8 ranks on 2 cores: shm led or tied everywhere but the 4-rank
 * all-to-all from 256 KiB (pairwise 51 against 60 us), and the prices
 * had chosen schedules 2-3x slower (8 ranks: all-reduce 256 KiB rhd 448
 * against shm 169 us, reduce-scatter 256 KiB rhalving 272 against 133,
 * all-gather 2 MiB rd 577 against 476; bench/RESULTS.md). */
static int crowded_node(const xc__model_topo_t *t)
{
    return t->crowded && t->nnodes == 1 && t->shm;
}

/* A broadcast or reduce whose payload fits the flagged lines of one node
 * (xc__shm_ll_max): the shm algorithm whatever the prices.  Its express
 * path lets back-to-back calls overlap (the root writes the next entry
 * while a reader takes the last), which the model -- pricing a call after
 * a pause -- does not see, and after a pause it is no slower: on the AMD
 * EPYC VM of the twenty-seventh session, 2 ranks, 8 B, bcast.shm 0.52 us
 * against bcast.chain 0.62 and bcast.binomial 0.58 after a barrier, 0.21
 * against 0.71 and 0.80 back to back (reduce.shm 0.74 / 0.23 against
 * reduce.binomial's 1.13 / 0.84).  The prices differed by 15 %, within a
 * quick profile's noise, and one start of two chose the schedules: 4-5x
 * slower in bench/compare. */
static int rooted_lines(const xc__model_topo_t *t, const xc__model_call_t *c)
{
    return (c->coll == XC_COLL_BCAST || c->coll == XC_COLL_REDUCE) && t->nnodes == 1 && t->shm &&
           c->count * xc__dtype_size(c->dtype) <= xc__shm_ll_max(t->nranks);
}

int xc__model_choose(const xc__profile_t *p, const xc__model_topo_t *t,
                     const xc__model_call_t *c, double *pred, int *second, double *second_pred)
{
    size_t n;
    const xc__algo_t *tab = xc__algo_table(&n);
    int best = XC__ALGO_NONE, next = XC__ALGO_NONE;
    double bt = -1, nt = -1;
    int shm_only = 0;
    if (crowded_node(t) || rooted_lines(t, c))
        for (size_t i = 0; i < n; i++)
            shm_only |= tab[i].needs_shm && !tab[i].explicit_only && cost_of(&tab[i], p, t, c) >= 0;
    for (size_t i = 0; i < n; i++) {
        if (tab[i].explicit_only) continue;
        double v = cost_of(&tab[i], p, t, c);
        if (v < 0) continue;
        if (shm_only && !tab[i].needs_shm) continue;
        if (best == XC__ALGO_NONE || v < bt) {
            next = best, nt = bt;
            best = tab[i].id, bt = v;
        } else if (next == XC__ALGO_NONE || v < nt) {
            next = tab[i].id, nt = v;
        }
    }
    if (pred) *pred = bt < 0 ? bt : bt * crowding(t);
    if (second) *second = next;
    if (second_pred) *second_pred = nt < 0 ? nt : nt * crowding(t);
    return best;
}

xc_result_t xc__model_topo_make(int nranks, int nnodes, int ppn, const xc__profile_t *p,
                                xc__model_topo_t *t)
{
    if (nranks < 1 || nnodes < 1 || ppn < 1 || nnodes > nranks || (long)nnodes * ppn < nranks)
        return xc__err(XC_ERR_INVALID,
                       "cost model: %d ranks cannot sit on %d nodes of at most %d ranks",
                       nranks, nnodes, ppn);
    xc__config_t cfg;
    XC_CHECK(xc__config_resolve(NULL, &cfg));
    t->nranks = nranks;
    t->nnodes = nnodes;
    t->ppn = ppn;
    t->blocked = 1;
    t->shm = nnodes == 1 && nranks > 1 && nranks <= XC__SHM_MAX_RANKS && cfg.shm;
    t->chans = t->shm && cfg.shm_chan_kb > 0 && nranks <= 64;
    t->cma = t->shm;
    t->slot_bytes = (size_t)cfg.shm_slot_kb * 1024;
    t->cma_min = (size_t)cfg.shm_cma_min_kb * 1024;
    t->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    t->crowded = cfg.node_crowded >= 0 ? cfg.node_crowded : t->cores > 0 && ppn > t->cores;
    t->coop = xc__shm_coop(cfg.shm_coop, t->crowded);
    xc__model_topo_measured(t, p, cfg.shm_cma_max_kb);
    return XC_OK;
}

void xc__model_topo_measured(xc__model_topo_t *t, const xc__profile_t *p, int cma_max_kb)
{
    /* Measured on the pair only (a later communicator may inherit the
     * profile). */
    int pair = p && xc__shm_pair(t->nranks, t->crowded);
    t->cma_max = cma_max_kb >= 0 ? (size_t)cma_max_kb * 1024 : pair ? (size_t)p->shm_cma_max : 0;
    t->ag_cma_min = pair ? (size_t)p->shm_ag_cma_min : 0;
    t->a2a_cma_min = pair ? (size_t)p->shm_a2a_cma_min : 0;
    t->bcast_cma_min = pair ? (size_t)p->shm_bcast_cma_min : 0;
}

void xc__model_topo_of(const xc_comm_t *comm, xc__model_topo_t *t)
{
    int *per = calloc((size_t)comm->nnodes, sizeof *per);
    t->nranks = comm->size;
    t->nnodes = comm->nnodes;
    t->ppn = 1;
    t->blocked = 1;
    for (int r = 0; r < comm->size; r++) {
        if (per && comm->node_of[r] < comm->nnodes) {
            int k = ++per[comm->node_of[r]];
            if (k > t->ppn) t->ppn = k;
        }
        /* Node indices number nodes by first appearance, so a block layout
         * never steps back. */
        if (r > 0 && comm->node_of[r] < comm->node_of[r - 1]) t->blocked = 0;
    }
    if (!per) t->ppn = comm->local_size; /* out of memory: this node's count */
    free(per);
    t->shm = comm->shm != NULL;
    /* The same on every rank (a rank alone on its node has no channel of
     * its own): shared memory agreed, channels configured, node not too
     * large (shm_setup.c's rule). */
    t->chans = comm->shm_ok && comm->cfg.shm_chan_kb >= 4 && t->ppn <= 64;
    t->cma = comm->cma;
    t->slot_bytes = comm->shm ? comm->shm->slot_bytes : (size_t)comm->cfg.shm_slot_kb * 1024;
    t->cma_min = (size_t)comm->cfg.shm_cma_min_kb * 1024;
    /* The CPUs this node's ranks may run on (the union of their affinity
     * masks, as the waiting policy uses); the machine's if unknown. */
    t->cores = comm->node_cpus > 0 ? comm->node_cpus : (int)sysconf(_SC_NPROCESSORS_ONLN);
    /* The runtime's own flags (shm_bcast.c, shm_common.h): agreed. */
    t->crowded = comm->oversub;
    t->coop = xc__shm_coop(comm->cfg.shm_coop, comm->oversub);
    /* Every rank holds the same profile. */
    xc__model_topo_measured(t, comm->profile, comm->cfg.shm_cma_max_kb);
}

uint32_t xc__model_needs(const xc_comm_t *comm)
{
    uint32_t need = XC__HAVE_HOST;
    if (comm->size < 2) return need;
    xc__model_topo_t t;
    xc__model_topo_of(comm, &t);
    /* On several nodes, same-node pairs use the channels (their class is
     * priced from memcpy: measure.c) or else loopback TCP. */
    if (comm->shm || (t.chans && t.ppn > 1)) need |= XC__HAVE_SHM;
    if (comm->nnodes > 1) need |= XC__HAVE_TCP_NET;
    if (!t.chans && t.ppn > 1) need |= XC__HAVE_TCP_LOCAL;
    return need;
}
