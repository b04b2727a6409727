/*
 * reduce_bench.c -- throughput of the reduction kernels (src/reduce) at
 * every SIMD level this CPU runs, next to memcpy of the same size.
 *
 * For each size (default: 64 KiB, which stays in L2, and 64 MiB, which
 * streams from memory), each level, and each kernel in the list below, it
 * times xc__reduce_n with k = 2 and k = 8 distinct inputs into a distinct
 * dst and prints two rates: "in" = bytes of one input per second (how fast
 * a buffer of that size is reduced), and "moved" = (k + 1) x that (k inputs
 * read, one output written), next to memcpy's "moved" (bytes read and
 * written) timed in trials alternating with the kernel's, and their ratio.
 * Each number is the fastest of many short trials (see best_pair), since
 * the machine may be shared.
 *
 * Usage: bench_reduce_bench [-s SIZE]   (SIZE in bytes, K/M/G suffixes)
 */
#include "reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { KMAX = 8 };

static const struct {
    const char *label;
    xc_dtype_t dtype;
    xc_op_t op;
} cases[] = {
    {"fp32 sum", XC_FLOAT32, XC_SUM}, {"bf16 sum", XC_BFLOAT16, XC_SUM},
    {"fp16 sum", XC_FLOAT16, XC_SUM}, {"int32 sum", XC_INT32, XC_SUM},
    {"int8 sum", XC_INT8, XC_SUM},    {"fp64 sum", XC_FLOAT64, XC_SUM},
    {"fp32 min", XC_FLOAT32, XC_MIN},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return -1;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: break;
    }
    if (shift) {
        v <<= shift;
        end++;
        if (*end == 'i') end++; /* KiB, MiB, GiB */
    }
    if (*end == 'B') end++;
    if (*end != '\0' || v < 64) return -1;
    *out = (size_t)v;
    return 0;
}

/* Ordinary values of each dtype (no NaN, no subnormals), so timing does
 * not depend on special-case paths. */
static void fill(void *buf, size_t bytes, xc_dtype_t dt, unsigned seed)
{
    size_t es = xc_dtype_size(dt), n = bytes / es;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float f = (float)(x >> 8) * 0x1p-24f + 0.5f; /* [0.5, 1.5) */
        switch (dt) {
        case XC_FLOAT32: ((float *)buf)[i] = f; break;
        case XC_FLOAT64: ((double *)buf)[i] = f; break;
        case XC_FLOAT16: ((uint16_t *)buf)[i] = xc__fp32_to_fp16(f); break;
        case XC_BFLOAT16: ((uint16_t *)buf)[i] = xc__fp32_to_bf16(f); break;
        default: memcpy((char *)buf + i * es, &x, es); break;
        }
    }
}

/* One timed operation: memcpy (k == 0) or xc__reduce_n. */
typedef struct job {
    void *dst;
    void *const *in;
    int k;
    size_t bytes, count;
    xc_dtype_t dtype;
    xc_op_t op;
} job_t;

static void run_job(const job_t *j)
{
    if (j->k == 0)
        memcpy(j->dst, j->in[0], j->bytes);
    else
        xc__reduce_n(j->dst, (const void *const *)j->in, j->k, j->count, j->dtype,
                     j->op);
}

/* Calls per trial: about 1 ms of them, or one call when that is longer. */
static long reps_for(const job_t *j)
{
    run_job(j); /* warm the caches and the TLB */
    double t0 = now_s();
    run_job(j);
    double one = now_s() - t0;
    if (one < 1e-8) one = 1e-8;
    return one >= 1e-3 ? 1 : (long)(1e-3 / one) + 1;
}

static double trial(const job_t *j, long reps)
{
    double s = now_s();
    for (long r = 0; r < reps; r++) run_job(j);
    return (now_s() - s) / (double)reps;
}

/*
 * Best seconds per call of `a` and of `b`, timed in alternating trials.
 * The machine may be shared, so trials are short and many (about 0.4 s in
 * all, 5 to 300 of each): the fastest trial is one no other process
 * interrupted, and a memcpy timed next to a kernel met the same memory
 * traffic from other processes.
 */
static void best_pair(const job_t *a, const job_t *b, double *ta, double *tb)
{
    long ra = reps_for(a), rb = reps_for(b);
    double first = trial(a, ra) * (double)ra + trial(b, rb) * (double)rb;
    long trials = (long)(0.4 / (first > 1e-6 ? first : 1e-6));
    trials = trials < 5 ? 5 : trials > 300 ? 300 : trials;
    *ta = *tb = 1e30;
    for (long t = 0; t < trials; t++) {
        double x = trial(a, ra), y = trial(b, rb);
        if (x < *ta) *ta = x;
        if (y < *tb) *tb = y;
    }
}

static void run_size(size_t bytes, void *const *in, void *dst)
{
    char sz[32];
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        snprintf(sz, sizeof sz, "%zu MiB", bytes >> 20);
    else if (bytes % 1024 == 0)
        snprintf(sz, sizeof sz, "%zu KiB", bytes >> 10);
    else
        snprintf(sz, sizeof sz, "%zu B", bytes);
    job_t mc = {.dst = dst, .in = in, .k = 0, .bytes = bytes};
    for (int level = 0; level < XC__SIMD_COUNT; level++) {
        if (xc__reduce_set_level(level) != level) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            xc_dtype_t dt = cases[c].dtype;
            size_t count = bytes / xc_dtype_size(dt);
            for (int j = 0; j < KMAX; j++) fill(in[j], bytes, dt, (unsigned)j + 1);
            static const int ks[] = {2, 8};
            for (int q = 0; q < 2; q++) {
                int k = ks[q];
                job_t job = {.dst = dst, .in = in, .k = k, .bytes = bytes,
                             .count = count, .dtype = dt, .op = cases[c].op};
                double t, tm;
                best_pair(&job, &mc, &t, &tm);
                double gin = (double)bytes / t / 1e9, moved = gin * (k + 1);
                double mc_moved = 2 * (double)bytes / tm / 1e9;
                printf("| %-7s | %-10s | %-9s | %2d | %7.1f | %10.1f | %13.1f | %6.2f |\n",
                       sz, xc__reduce_level_name(level), cases[c].label, k, gin, moved,
                       mc_moved, moved / mc_moved);
                fflush(stdout);
            }
        }
    }
    xc__reduce_set_level(XC__SIMD_DEFAULT);
}

int main(int argc, char **argv)
{
    size_t sizes[2] = {64u << 10, 64u << 20};
    int nsizes = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-s") == 0 && i + 1 < argc &&
            parse_size(argv[i + 1], &sizes[0]) == 0) {
            nsizes = 1;
            i++;
        } else {
            fprintf(stderr, "usage: %s [-s SIZE]  (bytes per input, >= 64; "
                            "K/M/G suffixes; default 64K and 64M)\n", argv[0]);
            return 2;
        }
    }
    size_t maxb = 0;
    for (int i = 0; i < nsizes; i++) {
        sizes[i] &= ~(size_t)63; /* a whole number of every element size */
        if (sizes[i] > maxb) maxb = sizes[i];
    }
    void *in[KMAX], *dst;
    for (int j = 0; j < KMAX; j++) {
        in[j] = aligned_alloc(64, maxb);
        if (!in[j]) {
            fprintf(stderr, "reduce_bench: cannot allocate %d x %zu bytes\n", KMAX + 1, maxb);
            return 1;
        }
        memset(in[j], 0, maxb);
    }
    dst = aligned_alloc(64, maxb);
    if (!dst) {
        fprintf(stderr, "reduce_bench: cannot allocate %zu bytes\n", maxb);
        return 1;
    }
    memset(dst, 0, maxb);

    printf("reduce_bench: default SIMD level %s; GB/s = 1e9 B/s; in = bytes of "
           "one input per second; moved = (k + 1) x in; memcpy moved = 2 x bytes "
           "copied per second, timed alternately with the kernel; ratio = "
           "moved / memcpy moved; best trials\n\n",
           xc__reduce_level_name(xc__reduce_level()));
    printf("| size    | level      | kernel    | k  | in GB/s | moved GB/s | memcpy moved | ratio  |\n");
    printf("|---------|------------|-----------|----|---------|------------|--------------|--------|\n");
    for (int i = 0; i < nsizes; i++) run_size(sizes[i], in, dst);
    for (int j = 0; j < KMAX; j++) free(in[j]);
    free(dst);
    return 0;
}
