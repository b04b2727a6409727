/*
 * wcopy.c -- slot chunks written with ordinary or non-temporal stores,
 * whichever recent operations of the same size class found faster
 * (wcopy.h).
 *
 * An operation is timed from its start to its end on this rank with the
 * time-stamp counter (two reads against the tens of microseconds of an
 * operation of 64 KiB or more).  In a loop, a writer's next operation
 * waits for its slots until the readers took the previous one, so its
 * time follows theirs.  A sample is one operation's time, or on a
 * crowded node the mean of XC__WCOPY_CROWDED_MEAN in a row of one way
 * (its turns of the core make single ones bimodal).  A way's cost is the
 * least of its first XC__WCOPY_TRIES samples, then follows its samples
 * quickly down and slowly up (a sample is capped at twice the cost: a preempted
 * operation must not swing the choice).  A run of XC__WCOPY_RUN
 * operations in every XC__WCOPY_EXPLORE takes the other way, so a change
 * of placement is seen within a few hundred operations of a class.  A
 * broadcast or reduce between two ranks is timed on its reader instead
 * (xc__wcopy_rooted_way, xc__wcopy_read_end).
 */
#include "wcopy.h"
#include "../core/copy.h"

#if defined(__x86_64__)
#include <x86intrin.h>

static uint64_t ticks(void) { return __rdtsc(); }
#define XC__WCOPY_NT 1
#else
static uint64_t ticks(void) { return 0; }
#define XC__WCOPY_NT 0
#endif

int xc__wcopy_class(size_t bytes)
{
    int c = 0;
    for (size_t b = XC__WCOPY_OP_MIN * 2; b <= bytes && c < XC__WCOPY_CLASSES - 1; b *= 2) c++;
    return c;
}

/* The way of the n-th operation of a class whose best way is `best`: a
 * run of the other every XC__WCOPY_EXPLORE. */
static int explore(uint32_t n, int best)
{
    return n % XC__WCOPY_EXPLORE < XC__WCOPY_RUN ? !best : best;
}

/* An operation of way `nt` in series `s`: 1 when it is past the settling
 * operations of its way, to be timed.  A change of way starts the new
 * way's sum afresh: a sample's operations are of one run. */
static int settled(xc__wcopy_series_t *s, int nt)
{
    if (s->way != nt) s->way = (int8_t)nt, s->run = 0, s->nacc[nt] = 0, s->acc[nt] = 0;
    return ++s->run > XC__WCOPY_SETTLE;
}

/* Whether non-temporal stores are the cheaper way by `cost` (both timed):
 * by the lead asked of them. */
static int nt_cheaper(const xc__wcopy_t *w, const double cost[2])
{
    return cost[1] * (w->crowded ? XC__WCOPY_CROWDED_LEAD : 1.0) < cost[0];
}

int xc__wcopy_pick(const xc__wcopy_t *w, size_t bytes)
{
    if (!XC__WCOPY_NT || bytes < XC__WCOPY_OP_MIN) return 0;
    if (w->mode >= 0) return w->mode;
    const xc__wcopy_series_t *s = &w->own[xc__wcopy_class(bytes)];
    /* Each way until it is timed XC__WCOPY_TRIES times, then the cheaper,
     * but for a run of the other every XC__WCOPY_EXPLORE operations. */
    if (s->timed[0] < XC__WCOPY_TRIES) return 0;
    if (s->timed[1] < XC__WCOPY_TRIES) return 1;
    return explore(s->ops, nt_cheaper(w, s->cost));
}

int xc__wcopy_begin(xc__wcopy_t *w, size_t bytes, int symmetric, uint32_t *t0)
{
    *t0 = 0;
    if (!symmetric && w->mode < 0) return 0;
    int nt = xc__wcopy_pick(w, bytes);
    if (bytes < XC__WCOPY_OP_MIN || !XC__WCOPY_NT) return nt;
    xc__wcopy_series_t *s = &w->own[xc__wcopy_class(bytes)];
    s->ops++;
    w->nt_ops += (uint64_t)nt;
    if (settled(s, nt) && w->mode < 0) *t0 = (uint32_t)ticks() | 1;
    return nt;
}

int xc__wcopy_rooted_way(xc__wcopy_t *w, size_t bytes, int pref)
{
    if (!XC__WCOPY_NT || bytes < XC__WCOPY_OP_MIN) return 0;
    if (w->mode >= 0) return w->mode;
    uint32_t n = w->rooted[xc__wcopy_class(bytes)].ops++;
    int nt;
    if (pref == XC__WCOPY_PREF_NONE)
        nt = n < XC__WCOPY_ALTERNATE ? (int)(n / XC__WCOPY_RUN % 2) : 0;
    else nt = explore(n, pref == 2);
    w->nt_ops += (uint64_t)nt;
    return nt;
}

void xc__wcopy_read_begin(const xc__wcopy_t *w, size_t bytes, uint32_t *t0)
{
    *t0 = XC__WCOPY_NT && w->mode < 0 && bytes >= XC__WCOPY_OP_MIN ? (uint32_t)ticks() | 1 : 0;
}

/* A cost following a sample of `c` ticks per KiB: quickly down, slowly
 * up, the sample capped at twice the cost. */
static void follow(double *cost, double c)
{
    if (*cost <= 0) *cost = c;
    else if (c < *cost) *cost = (*cost + 3 * c) / 4;
    else *cost = (3 * *cost + (c < 2 * *cost ? c : 2 * *cost)) / 4;
}

int xc__wcopy_read_end(xc__wcopy_t *w, size_t bytes, int way, uint32_t t0)
{
    xc__wcopy_series_t *s = &w->rooted[xc__wcopy_class(bytes)];
    if (t0) {
        uint32_t dt = (uint32_t)ticks() - t0;
        way = way != 0;
        if (settled(s, way) && dt) follow(&s->cost[way], (double)dt * 1024.0 / (double)bytes);
    }
    if (s->cost[0] <= 0 || s->cost[1] <= 0) return XC__WCOPY_PREF_NONE;
    return nt_cheaper(w, s->cost) ? 2 : 1;
}

void xc__wcopy_end(xc__wcopy_t *w, size_t bytes, size_t staged, int nt, uint32_t t0)
{
    if (!t0 || staged < XC__WCOPY_OP_MIN) return;
    uint32_t dt = (uint32_t)ticks() - t0;
    if (!dt) return;
    xc__wcopy_series_t *s = &w->own[xc__wcopy_class(bytes)];
    double c = (double)dt * 1024.0 / (double)bytes;
    if (w->crowded) {
        s->acc[nt] += c;
        if (++s->nacc[nt] < XC__WCOPY_CROWDED_MEAN) return;
        c = s->acc[nt] / XC__WCOPY_CROWDED_MEAN;
        s->acc[nt] = 0, s->nacc[nt] = 0;
    }
    /* The first tries: the least of them (a cold start reads high). */
    if (s->timed[nt] < XC__WCOPY_TRIES)
        s->cost[nt] = s->timed[nt]++ && s->cost[nt] < c ? s->cost[nt] : c;
    else follow(&s->cost[nt], c);
}

void xc__wcopy(void *dst, const void *src, size_t bytes, int nt)
{
    if (nt && bytes >= XC__WCOPY_PIECE_MIN) xc__copy_nt(dst, src, bytes);
    else xc__copy(dst, src, bytes);
}
