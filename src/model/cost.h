/*
 * cost.h -- the terms every cost function is built from (cost_*.c):
 * message time on a link class, a communication round under the topology,
 * memcpy, reduction.
 *
 * Assumptions (docs/cost-model.md): a round in which a rank sends m bytes
 * and receives m bytes costs what the calibration measured for such an
 * exchange on the pair's link class, a round in which it only sends or
 * only receives what it measured for one way of a ping-pong (ranks run in
 * parallel: ranks <= cores); a rank that sends k messages in one round pays
 * k of them; ranks are laid out node by node (`blocked`), and the node's
 * inter-node link is shared by its ranks that cross it in the same round.
 * Whether a pass over data runs at cache or memory speed depends on the
 * call's working set (its buffers, `ws`), not on the size of the pass: a
 * chunk copied out of a large user buffer comes from memory.
 */
#ifndef XC_MODEL_COST_H
#define XC_MODEL_COST_H

#include "../algo/algos.h"
#include "model.h"

#include <math.h>

/* One evaluation: profile, topology, call, and the call's working set. */
typedef struct xc__m {
    const xc__profile_t *p;
    const xc__model_topo_t *t;
    const xc__model_call_t *c;
    double es;   /* dtype size */
    double ws;   /* bytes of this rank's buffers the call touches */
} xc__m_t;

/* The working set of a call: its input and output buffers on one rank. */
static inline xc__m_t xc__m_make(const xc__profile_t *p, const xc__model_topo_t *t,
                                 const xc__model_call_t *c)
{
    xc__m_t m = {p, t, c, (double)xc__dtype_size(c->dtype), 0};
    double B = (double)c->count * m.es, n = t->nranks;
    switch (c->coll) {
    case XC_COLL_ALLREDUCE:
    case XC_COLL_REDUCE: m.ws = 2 * B; break;
    case XC_COLL_REDUCE_SCATTER:
    case XC_COLL_ALLGATHER: m.ws = (n + 1) * B; break;
    case XC_COLL_ALLTOALL: m.ws = 2 * n * B; break;
    case XC_COLL_BCAST: m.ws = B; break;
    default: m.ws = 0; break;
    }
    return m;
}

/* How much slower than at twice the cache a memory-bound pass over a
 * working set of `ws` bytes runs (memcpy's ladder, interpolated in log
 * size; 1 without a ladder). */
static inline double xc__m_tier(const xc__profile_t *p, double ws)
{
    int n = p->nladder;
    if (n < 1 || p->copy_mem <= 0 || ws <= p->ladder[0][0]) return 1;
    double v = p->ladder[n - 1][1];
    for (int i = 1; i < n; i++) {
        if (ws <= p->ladder[i][0]) {
            double x0 = log(p->ladder[i - 1][0]), x1 = log(p->ladder[i][0]);
            double f = x1 > x0 ? (log(ws) - x0) / (x1 - x0) : 1;
            v = p->ladder[i - 1][1] + f * (p->ladder[i][1] - p->ladder[i - 1][1]);
            break;
        }
    }
    double r = v / p->copy_mem;
    return r > 1 ? r : 1;
}

/* How far a working set of `ws` bytes is out of the cache: 0 up to half
 * cache_bytes, 1 from twice it, in between linear in log size (caches do
 * not fall off a cliff: the data that still fits keeps its speed). */
static inline double xc__m_mem(const xc__m_t *m, double ws)
{
    double c = m->p->cache_bytes;
    if (ws <= c / 2) return 0;
    if (ws >= 2 * c) return 1;
    return (log2(ws) - log2(c / 2)) / 2;
}

/* cached*(1-f) + mem*f for f = xc__m_mem(ws). */
static inline double xc__m_blend(const xc__m_t *m, double ws, double cached, double mem)
{
    double f = xc__m_mem(m, ws);
    return f <= 0 ? cached : f >= 1 ? mem : cached + f * (mem - cached);
}

/* Per byte beyond the cache, a link's transfer within a working set of
 * `ws` costs mem_beta * *k + *e: a link inside the node is memory traffic
 * and slows by the whole tier (*k = tier, *e = 0); across nodes only the
 * host's copies into and out of the socket (two per byte) slow down, the
 * wire does not (*k = 1) -- scaling the wire's 8 ns/B by the tier priced
 * a 32 MiB all-reduce on the 1 Gbit/s bed at twice its time.  The
 * calibration fits mem_beta through the same terms (measure.c), so that
 * the line reproduces the points it was fitted to. */
static inline void xc__m_mem_terms(const xc__profile_t *p, int lc, double ws, double *k,
                                   double *e)
{
    double tier = xc__m_tier(p, ws);
    *k = lc == XC__LINK_TCP_NET ? 1 : tier;
    *e = lc == XC__LINK_TCP_NET ? 2 * p->copy_mem * (tier - 1) : 0;
}

/* A link line's cost per byte beyond the cache at working set `ws`: the
 * memory-bound rate above, but never below the line's in-cache rate -- a
 * transfer bound by something else (a fresh block moves line by line
 * from the writer's cache, ~70-80 ps/B here, in the cache or not) does
 * not get faster with more data. */
static inline double xc__m_mem_beta(const xc__profile_t *p, int lc, const xc__line_t *l,
                                    double ws)
{
    double k, e;
    xc__m_mem_terms(p, lc, ws, &k, &e);
    double b = l->mem_beta * k + e;
    return b > l->big_beta ? b : l->big_beta;
}

/* A line's intercept as a schedule's round pays it (the link's
 * round_delta added, never below 0). */
static inline double xc__m_alpha(double alpha, double delta)
{
    return alpha + delta > 0 ? alpha + delta : 0;
}

/* Pattern x's measured time at `bytes` below the bandwidth regime,
 * through its points (xc__link_params_t.pts; at least two). */
static inline double xc__m_pts(const xc__link_params_t *lp, int x, double bytes)
{
    const double(*p)[2] = lp->pts[x];
    int n = lp->npts[x], i = 1;
    if (bytes <= p[0][0]) return p[0][1];
    while (i < n - 1 && bytes > p[i][0]) i++;
    double dm = p[i][0] - p[i - 1][0], s = dm > 0 ? (p[i][1] - p[i - 1][1]) / dm : 0;
    if (bytes > p[i][0] && s < 0) s = 0; /* beyond the last point: never cheaper */
    return p[i - 1][1] + (bytes - p[i - 1][0]) * s;
}

/* A transfer of `bytes` of pattern `x` (XC__ONEWAY / XC__EXCHANGE) on link
 * class `lc` whose bandwidth `flows` flows share (each gets 1/flows). */
static inline double xc__m_link(const xc__m_t *m, int lc, int x, double bytes, double flows)
{
    const xc__link_params_t *lp = &m->p->link[lc];
    const xc__line_t *l = &lp->line[x];
    double ws = m->ws > 2 * bytes ? m->ws : 2 * bytes, d = lp->round_delta;
    if (bytes < xc__line_big_from(lp, x)) {
        if (lp->npts[x] < 2) return xc__m_alpha(l->alpha, d) + flows * bytes * l->beta;
        /* The flows share the bandwidth: as many times the bytes. */
        double t = xc__m_pts(lp, x, flows * bytes), floor = flows * bytes * l->beta;
        return t + d > floor ? t + d : floor;
    }
    /* Working sets beyond the ladder's first rung: xc__m_mem_terms. */
    return xc__m_blend(m, ws, xc__m_alpha(l->big_alpha, d) + flows * bytes * l->big_beta,
                       xc__m_alpha(l->mem_alpha, d) +
                           flows * bytes * xc__m_mem_beta(m->p, lc, l, ws));
}

/* A round where rank r transfers `bytes` to/from ranks r+d and r-d (mod
 * N) in pattern x. */
static inline double xc__m_shift(const xc__m_t *m, int x, int d, double bytes)
{
    const xc__model_topo_t *t = m->t;
    if (t->nnodes <= 1) return xc__m_link(m, xc__model_intra(t), x, bytes, 1);
    /* Block layout: ranks near a node's end cross for any d, and from d >=
     * ppn every rank does; without the layout, assume every rank does. */
    int flows = !t->blocked || d >= t->ppn ? t->ppn : d;
    return xc__m_link(m, XC__LINK_TCP_NET, x, bytes, flows);
}

/* A round where rank r transfers `bytes` to/from rank r xor d. */
static inline double xc__m_xor(const xc__m_t *m, int x, int d, double bytes)
{
    const xc__model_topo_t *t = m->t;
    if (t->nnodes <= 1) return xc__m_link(m, xc__model_intra(t), x, bytes, 1);
    int pow2 = (t->ppn & (t->ppn - 1)) == 0;
    if (t->blocked && pow2 && d < t->ppn) return xc__m_link(m, xc__model_intra(t), x, bytes, 1);
    return xc__m_link(m, XC__LINK_TCP_NET, x, bytes, t->ppn);
}

/* Patterns of a round: XC__1 / XC__X move the caller's data (its input),
 * XC__1F / XC__XF data the call itself wrote (a copy, a partial result).
 * With XC__CALLER_FRESH a schedule's transfer of the caller's data is
 * priced as freshly written too: a training step calls a collective on
 * the gradient or activation it just computed (and an in-place call's
 * buffer was rewritten by the previous call), so its lines sit modified
 * in the writer's cache -- not in the peer's, from the last call, as when
 * a benchmark reuses one unchanged send buffer (xcoll-perf --fresh,
 * docs/xcoll-perf.md).  The shared-memory collectives' reads of the
 * caller's buffer keep the reused-buffer line (cost_shm.c, cma()). */
#ifndef XC__CALLER_FRESH
#define XC__CALLER_FRESH 1
#endif
#define XC__1 (XC__CALLER_FRESH ? XC__ONEWAY_FRESH : XC__ONEWAY)
#define XC__X (XC__CALLER_FRESH ? XC__EXCHANGE_FRESH : XC__EXCHANGE)
#define XC__1F XC__ONEWAY_FRESH
#define XC__XF XC__EXCHANGE_FRESH

/* memcpy of `bytes` within a working set of `ws`. */
static inline double xc__m_copy_ws(const xc__m_t *m, double bytes, double ws)
{
    if (ws < 2 * bytes) ws = 2 * bytes;
    return bytes * xc__m_blend(m, ws, m->p->copy_cache, m->p->copy_mem * xc__m_tier(m->p, ws));
}

/* memcpy of `bytes` of the call's buffers. */
static inline double xc__m_copy(const xc__m_t *m, double bytes)
{
    return xc__m_copy_ws(m, bytes, m->ws);
}

/* Reduce k inputs of `bytes` each into one (k-1 two-input passes' worth)
 * within a working set of `ws`, of whose k+1 streams (inputs and output)
 * `mem` come from memory when the working set is out of the cache (k+1:
 * all of them, as gamma's memory figure was measured; fewer when some
 * inputs were just pulled into a cache-resident scratch). */
static inline double xc__m_reduce_mix(const xc__m_t *m, double bytes, int k, double ws, int mem)
{
    if (k < 2 || bytes <= 0) return 0;
    if (ws < (k + 1) * bytes) ws = (k + 1) * bytes;
    const double *g = m->p->gamma[m->c->dtype][xc__gop(m->c->op)];
    double slow = g[1] * xc__m_tier(m->p, ws);
    if (mem < k + 1 && slow > g[0]) slow = g[0] + (slow - g[0]) * mem / (k + 1);
    return (k - 1) * bytes * xc__m_blend(m, ws, g[0], slow);
}

static inline double xc__m_reduce_ws(const xc__m_t *m, double bytes, int k, double ws)
{
    return xc__m_reduce_mix(m, bytes, k, ws, k + 1);
}

static inline double xc__m_reduce(const xc__m_t *m, double bytes, int k)
{
    return xc__m_reduce_ws(m, bytes, k, m->ws);
}

/* The XC_AVG division pass over `bytes` (a sum-like pass). */
static inline double xc__m_fin(const xc__m_t *m, double bytes)
{
    if (m->c->op != XC_AVG || bytes <= 0) return 0;
    double ws = m->ws > 2 * bytes ? m->ws : 2 * bytes;
    const double *g = m->p->gamma[m->c->dtype][XC__GOP_SUM];
    return bytes * xc__m_blend(m, ws, g[0], g[1] * xc__m_tier(m->p, ws));
}

/* Bytes of the whole call vector (count x dtype size). */
static inline double xc__m_bytes(const xc__m_t *m) { return (double)m->c->count * m->es; }

/* Bytes of the largest of n blocks of `count` elements. */
static inline double xc__m_blk(const xc__m_t *m, int n)
{
    return (double)((m->c->count + (size_t)n - 1) / (size_t)n) * m->es;
}

#define XC__COST(name)                                                         \
    double xc__cost_##name(const xc__profile_t *p_, const xc__model_topo_t *t_, \
                           const xc__model_call_t *c_)

#define XC__COST_SETUP()                                                       \
    xc__m_t m_ = xc__m_make(p_, t_, c_);                                       \
    const xc__m_t *m = &m_;                                                    \
    const int n = t_->nranks;                                                  \
    (void)n

#endif
