/*
 * latency.c -- the small-message latency regression benchmark: blocking
 * all-reduce of 8 B and 1 KiB (fp32 sum), timed per call on every rank.
 *
 *   xcoll-run -n 2 build/bench_latency [iterations]
 *
 * Prints, per size, the mean over the loop and the median / p10 / p90 of
 * the per-call times of rank 0 (microseconds).  Later changes (tracing,
 * flight recorder, heartbeats, compression hooks) must rerun it and not
 * make it slower: record the table in bench/RESULTS.md.
 */
#include <xcoll.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    xc_comm_t *c;
    xc_result_t rc = xc_comm_init_env(&c, NULL);
    if (rc != XC_OK) {
        fprintf(stderr, "init: %s: %s\n", xc_err_name(rc), xc_last_error());
        return 1;
    }
    static const size_t counts[] = {2, 256}; /* 8 B and 1 KiB of fp32 */
    float *x = calloc(256, sizeof *x), *y = calloc(256, sizeof *y);
    double *t = malloc((size_t)iters * sizeof *t);
    if (!x || !y || !t) return 1;
    if (xc_comm_rank(c) == 0)
        printf("# xcoll %s, %d ranks, %d iterations, fp32 sum all-reduce, times in us\n"
               "%8s %10s %10s %10s %10s %10s\n",
               xc_version_string(), xc_comm_size(c), iters, "bytes", "mean", "median", "p10",
               "p90", "algo");
    for (size_t s = 0; s < sizeof counts / sizeof *counts; s++) {
        size_t n = counts[s];
        for (int i = 0; i < iters / 10 + 100; i++) /* warm-up */
            if ((rc = xc_allreduce(x, y, n, XC_FLOAT32, XC_SUM, c)) != XC_OK) goto fail;
        xc_stats_t st = {.size = sizeof st};
        xc_comm_stats(c, &st);
        xc_barrier(c);
        double t0 = now_us();
        for (int i = 0; i < iters; i++) {
            double a = now_us();
            if ((rc = xc_allreduce(x, y, n, XC_FLOAT32, XC_SUM, c)) != XC_OK) goto fail;
            t[i] = now_us() - a;
        }
        double mean = (now_us() - t0) / iters;
        xc_stats_t st2 = {.size = sizeof st2};
        xc_comm_stats(c, &st2);
        const char *algo = "?";
        for (int a = 0; a < XC_STATS_MAX_ALGOS; a++)
            if (st2.algo_ops[a] - st.algo_ops[a] >= (uint64_t)iters) algo = xc_algo_name(a);
        qsort(t, (size_t)iters, sizeof *t, cmp);
        if (xc_comm_rank(c) == 0)
            printf("%8zu %10.3f %10.3f %10.3f %10.3f %10s\n", n * sizeof(float), mean,
                   t[iters / 2], t[iters / 10], t[iters * 9 / 10], algo ? algo : "?");
    }
    free(x);
    free(y);
    free(t);
    xc_comm_destroy(c);
    return 0;
fail:
    fprintf(stderr, "allreduce: %s: %s\n", xc_err_name(rc), xc_comm_last_error(c));
    return 1;
}
