/*
 * model_fidelity.c -- how well the cost model predicts, and how well it
 * chooses: reads xcoll-perf --csv records of runs that forced every
 * algorithm in turn (bench/model_fidelity.sh makes them) and the profile
 * those runs used, then prints
 *   - per grid point (collective, size) the measured and predicted time of
 *     every algorithm, the fastest measured and the model's choice;
 *   - the median |predicted - measured| / measured over all points, and
 *     per collective;
 *   - the regret table: how often the model's choice is within 10% of the
 *     fastest algorithm measured (and within 25%), per collective.
 *
 *   bench_model_fidelity --profile FILE [--nodes N] [--ppn K] CSV...
 *   bench_model_fidelity --list COLLECTIVE [--nranks N] [--nodes N] [--ppn K]
 *
 * The topology is N ranks (from the records) on --nodes nodes (default 1)
 * of --ppn ranks (default N / nodes), with shared memory as the
 * environment says (XCOLL_SHM=0: TCP only), like xcoll itself.  --list
 * prints the algorithms of a collective valid there (for the driver).
 */
#include "algo/algos.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXREC 20000
#define MAXALG 8

#define MAXROUNDS 16

typedef struct rec {
    char coll[32], type[16], op[16], algo[48];
    size_t size, count;
    double time_us; /* the median over the rounds */
    double round_us[MAXROUNDS];
    int nranks, nrounds;
} rec_t;

static rec_t g_rec[MAXREC];
static int g_nrec;

static const struct {
    const char *perf;   /* xcoll-perf's -C name */
    xc_coll_t coll;
} k_colls[] = {
    {"allreduce", XC_COLL_ALLREDUCE}, {"reducescatter", XC_COLL_REDUCE_SCATTER},
    {"allgather", XC_COLL_ALLGATHER}, {"broadcast", XC_COLL_BCAST},
    {"reduce", XC_COLL_REDUCE},       {"alltoall", XC_COLL_ALLTOALL},
};
#define NCOLLS (int)(sizeof k_colls / sizeof k_colls[0])

static int coll_of(const char *name)
{
    for (int i = 0; i < NCOLLS; i++)
        if (!strcmp(k_colls[i].perf, name)) return i;
    return -1;
}

static int algo_id(const char *name)
{
    for (int id = 1; id < XC__ALGO_COUNT; id++) {
        const char *a = xc_algo_name(id);
        if (a && !strcmp(a, name)) return id;
    }
    return -1;
}

/* xcoll-perf's type names (nccl-tests') -> dtype. */
static int dtype_of(const char *t)
{
    static const char *names[XC_DTYPE_COUNT] = {"int8",  "uint8",  "int16", "uint16",
                                                "int32", "uint32", "int64", "uint64",
                                                "half",  "bfloat16", "float", "double"};
    for (int d = 0; d < XC_DTYPE_COUNT; d++)
        if (!strcmp(names[d], t)) return d;
    return -1;
}

static int op_of(const char *o)
{
    for (int i = 0; i < XC_OP_COUNT; i++)
        if (!strcmp(xc_op_name((xc_op_t)i), o)) return i;
    return XC_SUM; /* "none" */
}

static double median(double *v, int n);

/* Records of one point from several rounds (separate invocations, see
 * model_fidelity.sh -R) become one, timed by the median of the rounds:
 * small sizes move by up to 1.6x from one invocation to the next. */
static void add_record(const rec_t *r)
{
    rec_t *m = NULL;
    for (int i = 0; i < g_nrec && !m; i++) {
        rec_t *q = &g_rec[i];
        if (q->size == r->size && q->nranks == r->nranks && !strcmp(q->coll, r->coll) &&
            !strcmp(q->algo, r->algo) && !strcmp(q->type, r->type) && !strcmp(q->op, r->op))
            m = q;
    }
    if (!m) {
        if (g_nrec == MAXREC) return;
        m = &g_rec[g_nrec++];
        *m = *r;
        m->nrounds = 0;
    }
    if (m->nrounds == MAXROUNDS) return;
    m->round_us[m->nrounds++] = r->time_us;
    double v[MAXROUNDS];
    memcpy(v, m->round_us, (size_t)m->nrounds * sizeof *v);
    m->time_us = median(v, m->nrounds);
}

static void read_csv(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "model_fidelity: cannot open %s\n", path);
        exit(2);
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "collective,", 11) || line[0] == '#') continue;
        rec_t r;
        memset(&r, 0, sizeof r);
        int wrong, inplace;
        double algbw, busbw, spread;
        /* collective,size,count,type,op,algo,time_us,algbw,busbw,wrong,spread,nranks,inplace
         * (then iters, not needed here) */
        if (sscanf(line, "%31[^,],%zu,%zu,%15[^,],%15[^,],%47[^,],%lf,%lf,%lf,%d,%lf,%d,%d",
                   r.coll, &r.size, &r.count, r.type, r.op, r.algo, &r.time_us, &algbw, &busbw,
                   &wrong, &spread, &r.nranks, &inplace) != 13)
            continue;
        add_record(&r);
    }
    fclose(f);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int g_nodes = 1, g_ppn = 0;

/* The topology of nranks with the profile's measured thresholds (p; NULL:
 * none), as the runtime takes them. */
static int topo_for(int nranks, const xc__profile_t *p, xc__model_topo_t *t)
{
    int ppn = g_ppn ? g_ppn : (nranks + g_nodes - 1) / g_nodes;
    if (xc__model_topo_make(nranks, g_nodes, ppn, p, t) != XC_OK) {
        fprintf(stderr, "model_fidelity: %s\n", xc_last_error());
        return -1;
    }
    return 0;
}

static int list(const char *coll, int nranks)
{
    int c = coll_of(coll);
    xc__model_topo_t t;
    if (c < 0 || topo_for(nranks, NULL, &t)) return 2;
    size_t n;
    const xc__algo_t *tab = xc__algo_table(&n);
    for (size_t i = 0; i < n; i++)
        if (tab[i].name && tab[i].coll == k_colls[c].coll && (!tab[i].needs_shm || t.shm))
            printf("%s\n", tab[i].name);
    return 0;
}

typedef struct stat {
    double *err;
    int nerr, points, within10, within25;
} stat_t;

int main(int argc, char **argv)
{
    const char *prof_path = NULL, *list_coll = NULL;
    int nranks_opt = 2, first_csv = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profile") && i + 1 < argc) prof_path = argv[++i];
        else if (!strcmp(argv[i], "--nodes") && i + 1 < argc) g_nodes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ppn") && i + 1 < argc) g_ppn = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nranks") && i + 1 < argc) nranks_opt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--list") && i + 1 < argc) list_coll = argv[++i];
        else {
            first_csv = i;
            break;
        }
    }
    if (list_coll) return list(list_coll, nranks_opt);
    if (!prof_path || first_csv >= argc) {
        fprintf(stderr, "usage: bench_model_fidelity --profile FILE [--nodes N] [--ppn K] "
                        "CSV...\n       bench_model_fidelity --list COLLECTIVE [--nranks N]\n");
        return 2;
    }
    xc__profile_t prof;
    if (xc__profile_read(prof_path, &prof) != XC_OK) {
        fprintf(stderr, "model_fidelity: %s\n", xc_last_error());
        return 2;
    }
    for (int i = first_csv; i < argc; i++) read_csv(argv[i]);

    stat_t all = {0}, per[NCOLLS];
    memset(per, 0, sizeof per);
    all.err = calloc(MAXREC, sizeof(double));
    for (int c = 0; c < NCOLLS; c++) per[c].err = calloc(MAXREC, sizeof(double));
    char *done = calloc(MAXREC, 1);
    printf("%-13s %9s  %-26s %11s %11s %7s\n", "collective", "size", "algorithm", "measured_us",
           "predict_us", "err%");
    for (int i = 0; i < g_nrec; i++) {
        if (done[i]) continue;
        rec_t *r0 = &g_rec[i];
        int c = coll_of(r0->coll);
        int dt = dtype_of(r0->type);
        xc__model_topo_t t;
        if (c < 0 || dt < 0 || topo_for(r0->nranks, &prof, &t)) {
            done[i] = 1;
            continue;
        }
        xc__model_call_t call = {k_colls[c].coll, r0->count, (xc_dtype_t)dt,
                                 (xc_op_t)op_of(r0->op), 0};
        /* Every record of this grid point: one per algorithm. */
        int ids[MAXALG], nalg = 0;
        double meas[MAXALG], pred[MAXALG];
        for (int j = i; j < g_nrec; j++) {
            rec_t *r = &g_rec[j];
            if (done[j] || strcmp(r->coll, r0->coll) || r->size != r0->size ||
                r->count != r0->count || strcmp(r->type, r0->type) || strcmp(r->op, r0->op) ||
                r->nranks != r0->nranks)
                continue;
            done[j] = 1;
            int id = algo_id(r->algo); /* "a+b": not one algorithm, skipped */
            if (id < 0 || nalg == MAXALG) continue;
            int k;
            for (k = 0; k < nalg && ids[k] != id; k++) {}
            if (k < nalg) { /* the same algorithm twice: keep the faster */
                if (r->time_us < meas[k]) meas[k] = r->time_us;
                continue;
            }
            ids[nalg] = id;
            meas[nalg] = r->time_us;
            pred[nalg] = xc__model_predict(&prof, &t, id, &call) * 1e6;
            nalg++;
        }
        if (!nalg) continue;
        int fastest = 0;
        for (int k = 0; k < nalg; k++) {
            if (meas[k] < meas[fastest]) fastest = k;
            if (pred[k] < 0) continue;
            double e = fabs(pred[k] - meas[k]) / meas[k];
            all.err[all.nerr++] = e;
            per[c].err[per[c].nerr++] = e;
            printf("%-13s %9zu  %-26s %11.2f %11.2f %7.1f\n", r0->coll, r0->size,
                   xc_algo_name(ids[k]), meas[k], pred[k], 100 * (pred[k] - meas[k]) / meas[k]);
        }
        double cp;
        int chosen = xc__model_choose(&prof, &t, &call, &cp, NULL, NULL), ck = -1;
        for (int k = 0; k < nalg; k++)
            if (ids[k] == chosen) ck = k;
        if (ck < 0 || nalg < 2) continue; /* the choice was not measured */
        double regret = meas[ck] / meas[fastest] - 1;
        all.points++, per[c].points++;
        all.within10 += regret <= 0.10, per[c].within10 += regret <= 0.10;
        all.within25 += regret <= 0.25, per[c].within25 += regret <= 0.25;
        printf("%-13s %9zu  chosen %-19s fastest %-19s regret %.0f%%%s\n", r0->coll, r0->size,
               xc_algo_name(chosen), xc_algo_name(ids[fastest]), 100 * regret,
               regret > 0.10 ? "  <--" : "");
    }
    printf("\n# fidelity: median |predicted - measured| / measured\n");
    printf("%-14s %8s %8s\n", "collective", "points", "median%");
    for (int c = 0; c < NCOLLS; c++)
        if (per[c].nerr)
            printf("%-14s %8d %8.1f\n", k_colls[c].perf, per[c].nerr,
                   100 * median(per[c].err, per[c].nerr));
    printf("%-14s %8d %8.1f\n", "all", all.nerr, 100 * median(all.err, all.nerr));
    printf("\n# regret: the model's choice against the fastest measured algorithm\n");
    printf("%-14s %8s %12s %12s\n", "collective", "points", "within10%", "within25%");
    for (int c = 0; c < NCOLLS; c++)
        if (per[c].points)
            printf("%-14s %8d %11.0f%% %11.0f%%\n", k_colls[c].perf, per[c].points,
                   100.0 * per[c].within10 / per[c].points, 100.0 * per[c].within25 / per[c].points);
    if (all.points)
        printf("%-14s %8d %11.0f%% %11.0f%%\n", "all", all.points,
               100.0 * all.within10 / all.points, 100.0 * all.within25 / all.points);
    return 0;
}
