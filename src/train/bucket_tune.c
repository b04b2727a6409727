/*
 * bucket_tune.c -- the bucket-size tuner (xcoll.h, xc_bucketer_tune).
 *
 * Model.  The last complete steps (up to XC__BK_HIST, medians) give, per
 * gradient, the time it was marked ready (from the step's first mark);
 * backward ends when finish is called, B; the last step gives the arrival
 * order.  For a capacity c the buckets are what
 * xc__layout_build makes of that order (first bucket min(first_cap, c));
 * bucket k starts when its last gradient is ready and bucket k-1 is done
 * (the bucketer launches in order, the communicator runs collectives one at
 * a time) and needs W = alpha + bytes/bandwidth of standalone time, which
 * it gets at rate 1/slowdown before B (backward holds the cores) and at
 * rate 1 after.  The prediction is max(B, end of the last bucket).  Small
 * buckets start early but pay alpha each; large ones pay alpha rarely but
 * start late and leave a long tail after B -- the minimum is in between,
 * and where depends on alpha, the bandwidth, the slowdown and how evenly
 * backward produces its bytes.
 *
 * Calibration.  alpha and the bandwidth come from the caller or from timed
 * all-reduces (4 KiB and 4 MiB, median of 7 after 2 warm-ups, slowest
 * rank).  The slowdown is fitted (bisection in [1, 8], it is monotone) so
 * that the
 * model, run on the layout the steps actually used, reproduces the (median)
 * exposed time finish measured -- best learnt from steps with small buckets,
 * whose communication overlaps backward (with one big bucket at the end
 * the exposed time says nothing about the slowdown).  Near ties go to the
 * fewest buckets.  Rank 0 computes and broadcasts, so every rank
 * returns the same choice (and may create a bucketer with it).
 */
#include "bucketer.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

/* End of W of standalone work started at t0, at rate 1/s before B. */
static double finish_at(double t0, double w, double s, double B)
{
    if (t0 >= B) return t0 + w;
    double before = (B - t0) / s;
    return w <= before ? t0 + w * s : B + (w - before);
}

double xc__bk_comm_end(int n, const size_t *counts, const xc_dtype_t *dtypes, const int *order,
                       const uint64_t *ready_ns, const xc__bk_model_t *m, size_t first_cap,
                       size_t cap, int *nbuckets)
{
    xc__layout_t lay;
    if (xc__layout_build(n, counts, dtypes, order, first_cap, cap, m->layout_flags, &lay) != XC_OK)
        return -1;
    double end = 0, B = (double)m->backward_ns;
    for (int k = 0; k < lay.nbuckets; k++) {
        const xc__bucket_t *bk = &lay.buckets[k];
        double ready = 0;
        for (int j = bk->first; j < bk->first + bk->ngrads; j++)
            if ((double)ready_ns[lay.grads[j]] > ready) ready = (double)ready_ns[lay.grads[j]];
        double start = ready > end ? ready : end;
        double w = m->alpha_ns + (double)(bk->count * xc__dtype_size(bk->dtype)) * m->ns_per_byte;
        end = finish_at(start, w, m->slowdown, B);
    }
    if (nbuckets) *nbuckets = lay.nbuckets;
    xc__layout_free(&lay);
    return end;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

/* Median local time of an fp32 all-reduce of `bytes`, then the slowest
 * rank's (ns). */
static xc_result_t time_allreduce(xc_bucketer_t *b, float *buf, size_t bytes, double *ns)
{
    enum { WARM = 2, REPS = 7 };
    double t[REPS];
    for (int i = 0; i < WARM + REPS; i++) {
        uint64_t t0 = xc__now_ns();
        XC_CHECK(xc_allreduce(buf, buf, bytes / sizeof(float), XC_FLOAT32, XC_SUM, b->comm));
        if (i >= WARM) t[i - WARM] = (double)(xc__now_ns() - t0);
    }
    qsort(t, REPS, sizeof *t, cmp_double);
    *ns = t[REPS / 2];
    return xc_allreduce(ns, ns, 1, XC_FLOAT64, XC_MAX, b->comm);
}

static xc_result_t measure(xc_bucketer_t *b, double *alpha_ns, double *ns_per_byte)
{
    const size_t small = 4096, large = 4u << 20;
    float *buf = calloc(large / sizeof(float), sizeof(float));
    if (!buf) return xc__bk_fail(b, XC_ERR_NOMEM, "xc_bucketer_tune: out of memory");
    double t1 = 0, t2 = 0;
    xc_result_t rc = time_allreduce(b, buf, small, &t1);
    if (rc == XC_OK) rc = time_allreduce(b, buf, large, &t2);
    free(buf);
    if (rc != XC_OK)
        return xc__bk_fail(b, rc, "xc_bucketer_tune: timing all-reduces failed: %s",
                           xc_comm_last_error(b->comm));
    double slope = (t2 - t1) / (double)(large - small);
    if (!(slope > 0)) slope = t2 / (double)large;
    double alpha = t1 - (double)small * slope;
    *alpha_ns = alpha > 0 ? alpha : 0;
    *ns_per_byte = slope > 0 ? slope : 1e-3;
    return XC_OK;
}

enum { R_BEST, R_PRED, R_BWD, R_EXPOSED, R_SERIAL, R_NCAND, R_ALPHA, R_GBPS, R_SLOW, R_CAND,
       R_WORDS = R_CAND + 3 * XC_BUCKET_TUNE_MAX };

/* Medians over the recorded steps. */
typedef struct profile {
    uint64_t *ready; /* per gradient */
    uint64_t backward, exposed;
} profile_t;

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, c = *(const uint64_t *)y;
    return (a > c) - (a < c);
}

static uint64_t median_u64(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Medians over the n most recent recorded steps (1 <= n <= hist_n). */
static void profile_of(const xc_bucketer_t *b, profile_t *p, int n)
{
    uint64_t v[XC__BK_HIST];
    int slot[XC__BK_HIST];
    for (int i = 0; i < n; i++) slot[i] = (b->hist_pos + XC__BK_HIST - 1 - i) % XC__BK_HIST;
    for (int g = 0; g < b->ngrads; g++) {
        for (int i = 0; i < n; i++) v[i] = b->hist_ready[(size_t)slot[i] * (size_t)b->ngrads + g];
        p->ready[g] = median_u64(v, n);
    }
    for (int i = 0; i < n; i++) v[i] = b->hist_backward[slot[i]];
    p->backward = median_u64(v, n);
    for (int i = 0; i < n; i++) v[i] = b->hist_exposed[slot[i]];
    p->exposed = median_u64(v, n);
}

/* The slowdown that makes the model's exposed time, on the steps' own
 * layout, match the measured one (1 if even no slowdown overestimates it). */
static double fit_slowdown(const xc_bucketer_t *b, const size_t *counts,
                           const xc_dtype_t *dtypes, const profile_t *p, xc__bk_model_t m)
{
    double want = (double)p->exposed, B = (double)p->backward;
    double lo = 1, hi = 8; /* beyond, the fit only chases noise */
    for (int it = 0; it < 40; it++) {
        m.slowdown = 0.5 * (lo + hi);
        double e = xc__bk_comm_end(b->ngrads, counts, dtypes, b->last_order, p->ready, &m,
                                   b->first_cap, b->cap, NULL);
        if (e < 0) return 1;
        if (e - B < want) lo = m.slowdown;
        else hi = m.slowdown;
    }
    return lo;
}

/* Rank 0's computation of every output into r[]. */
static xc_result_t compute(xc_bucketer_t *b, xc__bk_model_t m, double *r)
{
    static const double k_cand[] = {0.25, 0.5, 1, 2, 4, 8, 16, 25, 32, 64, 128, 256};
    int n = b->ngrads;
    size_t *counts = malloc((size_t)(n ? n : 1) * sizeof *counts);
    xc_dtype_t *dtypes = malloc((size_t)(n ? n : 1) * sizeof *dtypes);
    profile_t p = {.ready = malloc((size_t)(n ? n : 1) * sizeof *p.ready)};
    if (!counts || !dtypes || !p.ready) {
        free(counts);
        free(dtypes);
        free(p.ready);
        return xc__bk_fail(b, XC_ERR_NOMEM, "xc_bucketer_tune: out of memory");
    }
    profile_of(b, &p, b->hist_n);
    m.backward_ns = p.backward;
    double total = 0, B = (double)p.backward;
    for (int g = 0; g < n; g++) {
        counts[g] = b->grads[g].count;
        dtypes[g] = b->grads[g].dtype;
        total += (double)(counts[g] * xc__dtype_size(dtypes[g]));
    }
    if (m.slowdown < 0) m.slowdown = fit_slowdown(b, counts, dtypes, &p, m);
    if (m.slowdown < 1) m.slowdown = 1;
    int nc = 0;
    for (size_t i = 0; i < sizeof k_cand / sizeof *k_cand && nc < XC_BUCKET_TUNE_MAX; i++) {
        size_t cap = (size_t)(k_cand[i] * MIB);
        int nb = 0;
        double e = xc__bk_comm_end(n, counts, dtypes, b->last_order, p.ready, &m,
                                   XC__MIN(b->first_cap, cap), cap, &nb);
        if (e < 0) break;
        r[R_CAND + nc] = k_cand[i];
        r[R_CAND + XC_BUCKET_TUNE_MAX + nc] = (e > B ? e : B) / 1e6;
        r[R_CAND + 2 * XC_BUCKET_TUNE_MAX + nc] = nb;
        nc++;
        if (k_cand[i] * MIB >= total) break; /* larger ones change nothing */
    }
    free(counts);
    free(dtypes);
    free(p.ready);
    double best = 1e300;
    for (int i = 0; i < nc; i++)
        if (r[R_CAND + XC_BUCKET_TUNE_MAX + i] < best) best = r[R_CAND + XC_BUCKET_TUNE_MAX + i];
    /* Within 1 % of the best: the fewest buckets (the largest capacity) --
     * every bucket also costs wake-ups and scheduling that the standalone
     * alpha does not see, so among equals the model trusts fewer. */
    int pick = -1;
    for (int i = 0; i < nc; i++)
        if (r[R_CAND + XC_BUCKET_TUNE_MAX + i] <= best * 1.01) pick = i;
    r[R_BEST] = pick >= 0 ? r[R_CAND + pick] : (double)b->cap / MIB;
    r[R_PRED] = pick >= 0 ? r[R_CAND + XC_BUCKET_TUNE_MAX + pick] : 0;
    r[R_BWD] = B / 1e6;
    r[R_EXPOSED] = (double)p.exposed / 1e6;
    r[R_SERIAL] = (B + m.alpha_ns + total * m.ns_per_byte) / 1e6;
    r[R_NCAND] = nc;
    r[R_SLOW] = m.slowdown;
    return XC_OK;
}

xc_result_t xc_bucketer_tune(xc_bucketer_t *b, xc_bucket_tune_t *t)
{
    if (!b || !t || t->size < offsetof(xc_bucket_tune_t, cand_buckets) + sizeof t->cand_buckets)
        return xc__err(XC_ERR_INVALID, "xc_bucketer_tune: NULL argument or t->size too small "
                                       "(start from XC_BUCKET_TUNE_INIT)");
    /* Mid-step with buckets launched, this rank's next collective is
     * theirs: it cannot take part (the peers' tuning then fails against
     * that bucket's all-reduce).  Marked but nothing launched, it takes
     * part, so that every rank learns of the misuse. */
    if (!b->committed || b->next_launch)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_tune: call it between steps, after "
                                              "commit");
    int mid = b->t_first || b->narrived; /* (t_first: any mark) */
    /* Rank 0's inputs, whether it has a complete step to work from, and the
     * highest rank in the middle of a step (+1): one maximum. */
    double in[5] = {-DBL_MAX, -DBL_MAX, -DBL_MAX, 0, mid ? b->rank + 1 : 0};
    if (b->rank == 0) in[0] = t->alpha_us, in[1] = t->gbps, in[2] = t->slowdown, in[3] = b->hist_n > 0;
    xc_result_t rc = xc_allreduce(in, in, 5, XC_FLOAT64, XC_MAX, b->comm);
    if (rc != XC_OK)
        return xc__bk_fail(b, rc, "xc_bucketer_tune: %s", xc_comm_last_error(b->comm));
    if (in[4] > 0)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_tune: call it between steps: rank %d "
                                              "has marked gradients of a step it has not "
                                              "finished", (int)in[4] - 1);
    if (in[3] != 1)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_tune: no complete step to learn "
                                              "from yet (on rank 0)");
    xc__bk_model_t m = {.alpha_ns = in[0] * 1e3, .ns_per_byte = in[1] > 0 ? 1.0 / in[1] : 0,
                        .slowdown = in[2], .layout_flags = xc__bk_layout_flags(b)};
    if (in[0] < 0 || in[1] <= 0) {
        double a = 0, s = 0;
        XC_CHECK(measure(b, &a, &s));
        if (in[0] < 0) m.alpha_ns = a;
        if (in[1] <= 0) m.ns_per_byte = s;
    }
    double r[R_WORDS];
    memset(r, 0, sizeof r);
    r[R_ALPHA] = m.alpha_ns / 1e3;
    r[R_GBPS] = 1.0 / m.ns_per_byte;
    xc_result_t crc = XC_OK;
    if (b->rank == 0) crc = compute(b, m, r);
    if (crc != XC_OK) r[R_NCAND] = -1; /* tell the others */
    rc = xc_bcast(r, R_WORDS, XC_FLOAT64, 0, b->comm);
    if (rc != XC_OK)
        return xc__bk_fail(b, rc, "xc_bucketer_tune: %s", xc_comm_last_error(b->comm));
    if (r[R_NCAND] < 0)
        return crc != XC_OK ? crc
                            : xc__bk_fail(b, XC_ERR_NOMEM, "xc_bucketer_tune: rank 0 ran out of "
                                                           "memory");
    t->alpha_us = r[R_ALPHA];
    t->gbps = r[R_GBPS];
    t->slowdown = r[R_SLOW];
    t->best_mb = r[R_BEST];
    t->predicted_ms = r[R_PRED];
    t->backward_ms = r[R_BWD];
    t->exposed_ms = r[R_EXPOSED];
    t->serial_ms = r[R_SERIAL];
    t->ncand = (int)r[R_NCAND];
    for (int i = 0; i < t->ncand; i++) {
        t->cand_mb[i] = r[R_CAND + i];
        t->cand_ms[i] = r[R_CAND + XC_BUCKET_TUNE_MAX + i];
        t->cand_buckets[i] = (int)r[R_CAND + 2 * XC_BUCKET_TUNE_MAX + i];
    }
    return XC_OK;
}

/* ------------------------------------------------------------ forward tail */

/* Bucket k (bytes[k]) complete at ready[k], issued in `seq` order, each
 * launched when complete and its predecessor launched, one at a time at
 * ns_per_byte: when each ends (done[k]); returns the last end. */
static double run_seq(int nb, const int *seq, const double *bytes, const uint64_t *ready,
                      double ns_per_byte, double *done)
{
    double link = 0, launch = 0;
    for (int p = 0; p < nb; p++) {
        int k = seq[p];
        if ((double)ready[k] > launch) launch = (double)ready[k];
        double start = launch > link ? launch : link;
        link = start + bytes[k] * ns_per_byte;
        done[k] = link;
    }
    return link;
}

/* qsort has no context argument: the need array of the step being sorted
 * (rank 0's finish only, one thread). */
static const uint64_t *g_sort_need;

static int by_need_then_index(const void *x, const void *y)
{
    int a = *(const int *)x, c = *(const int *)y;
    if (g_sort_need[a] != g_sort_need[c]) return g_sort_need[a] < g_sort_need[c] ? -1 : 1;
    return (a > c) - (a < c);
}

int xc__bk_tail_choose(int nb, const double *bytes, int m, const uint64_t *ready,
                       const uint64_t *need, const uint64_t *bwd, double ns_per_byte,
                       double *exposed)
{
    size_t n = (size_t)(nb > 0 ? nb : 1);
    int *seq = malloc(n * sizeof *seq);
    int *by_need = malloc((size_t)(m > 0 ? m : 1) * n * sizeof *by_need);
    double *done = malloc(n * sizeof *done);
    if (!seq || !by_need || !done) {
        free(seq);
        free(by_need);
        free(done);
        return -1;
    }
    /* Per step, the buckets in the order the forward needs them. */
    g_sort_need = NULL;
    for (int i = 0; i < m; i++) {
        int *o = by_need + (size_t)i * n;
        for (int k = 0; k < nb; k++) o[k] = k;
        g_sort_need = need + (size_t)i * n;
        qsort(o, (size_t)nb, sizeof *o, by_need_then_index);
    }
    int best = nb, lowest = nb > XC__TAIL_CANDIDATES ? nb - XC__TAIL_CANDIDATES : 0;
    double best_e = 0;
    for (int t = nb; t >= lowest; t--) {
        for (int p = 0; p < nb; p++) seq[p] = p < t ? p : nb - 1 - (p - t);
        double e = 0;
        for (int i = 0; i < m; i++) {
            const uint64_t *rd = ready + (size_t)i * n, *nd = need + (size_t)i * n;
            const int *o = by_need + (size_t)i * n;
            run_seq(nb, seq, bytes, rd, ns_per_byte, done);
            /* the forward: compute between its waits, each wait until the
             * bucket it needs is done */
            double B = (double)bwd[i], clock = B, last = 0;
            for (int j = 0; j < nb; j++) {
                int k = o[j];
                clock += (double)nd[k] - last;
                last = (double)nd[k];
                if (done[k] > clock) clock = done[k];
            }
            e += clock - (B + last);
        }
        if (t == nb || e < best_e) best = t, best_e = e;
    }
    if (exposed) *exposed = best_e;
    free(seq);
    free(by_need);
    free(done);
    return best;
}

int xc__bk_tail_from(const xc_bucketer_t *b)
{
    const xc__layout_t *lay = &b->lay;
    int m = b->tl_n, nb = lay->nbuckets;
    if (m < 1 || nb < 1) return nb;
    uint64_t v[XC__TAIL_STEPS];
    for (int i = 0; i < m; i++) v[i] = b->tl_bwd[i];
    double B = (double)median_u64(v, m);
    for (int i = 0; i < m; i++) v[i] = b->tl_exposed[i];
    double E = (double)median_u64(v, m);
    /* Communication that kept up with backward leaves nothing to reorder. */
    if (!(E >= 0.02 * B && E >= 50e3)) {
        XC__LOG(XC__LOG_INFO, "bucketer: no forward tail: %.2f ms exposed after %.2f ms of "
                              "backward (median of %d steps)", E / 1e6, B / 1e6, m);
        return nb;
    }
    double *bytes = malloc((size_t)nb * sizeof *bytes), *done = malloc((size_t)nb * sizeof *done);
    uint64_t *ready = malloc((size_t)nb * sizeof *ready);
    int *seq = malloc((size_t)nb * sizeof *seq);
    int t = nb;
    if (bytes && done && ready && seq) {
        double total = 0;
        for (int k = 0; k < nb; k++) {
            bytes[k] = (double)(lay->buckets[k].count * xc__dtype_size(lay->buckets[k].dtype));
            total += bytes[k];
            seq[k] = k;
            for (int i = 0; i < m; i++) v[i] = b->tl_ready[(size_t)i * (size_t)nb + (size_t)k];
            ready[k] = median_u64(v, m);
        }
        if (total > 0) {
            /* The effective time per byte that makes the layout's order end
             * where the steps' communication ended (monotone in it). */
            double lo = 0, hi = (B + E) / total;
            for (int i = 0; i < 50; i++) {
                double mid = 0.5 * (lo + hi);
                if (run_seq(nb, seq, bytes, ready, mid, done) < B + E) lo = mid;
                else hi = mid;
            }
            double nspb = 0.5 * (lo + hi), e_t = 0;
            t = xc__bk_tail_choose(nb, bytes, m, b->tl_ready, b->tl_need, b->tl_bwd, nspb, &e_t);
            if (t < 0) t = nb;
            XC__LOG(XC__LOG_INFO, "bucketer: forward tail from bucket %d of %d: %.2f ms waited "
                                  "per step predicted (%d steps; backward %.2f ms, exposed %.2f "
                                  "ms, link %.3f GB/s fitted)",
                    t, nb, e_t / m / 1e6, m, B / 1e6, E / 1e6, nspb > 0 ? 1.0 / nspb : 0.0);
        }
    }
    free(bytes);
    free(done);
    free(ready);
    free(seq);
    return t;
}
