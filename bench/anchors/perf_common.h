/*
 * perf_common.h -- what the anchor benchmarks (mpi_perf.c, gloo_perf.cc)
 * share with each other and with xcoll-perf: the command line, the size and
 * bus-bandwidth conventions of nccl-tests, the data pattern and its expected
 * results, the statistics and the CSV row.  Header-only (static functions)
 * and valid C11 and C++11, so that the MPI program and the Gloo program
 * include the very same definitions.
 *
 * Conventions (those of nccl-tests and tools/xcoll-perf.c):
 *  - `size` is the larger of a rank's send and receive buffers in bytes:
 *    the whole buffer for allreduce, broadcast, reduce and sendrecv; the
 *    total (all ranks') buffer for allgather, reducescatter and alltoall.
 *    `count` is the count argument of the call (per rank for those three).
 *    A requested size is rounded down to a whole count; sizes that round to
 *    a count of 0, or to the size of the previous row, are skipped.
 *  - algbw = size / time; busbw = algbw * factor, with factor 2(n-1)/n for
 *    allreduce, (n-1)/n for allgather, reducescatter and alltoall, and 1
 *    for broadcast, reduce and sendrecv.
 *  - Timing: warm-up calls, one barrier, then `iters` calls back to back,
 *    each timed on its own on every rank; after the loop the times are
 *    reduced with MAX over ranks.  The row reports the median of those
 *    maxima and the spread (p90 - p10) / median, percentiles interpolated
 *    linearly.  One more call after the timed ones, on fresh inputs, is
 *    checked element by element; wrong counts are summed over ranks.
 *
 * Invariants: pattern values are small integers, so every fp32 sum over up
 * to 2^20 ranks is exact and results are compared with ==.
 */
#ifndef XCOLL_BENCH_PERF_COMMON_H
#define XCOLL_BENCH_PERF_COMMON_H

/* mmap's MAP_ANONYMOUS and madvise under -std=c11 (include this first). */
#if !defined(_DEFAULT_SOURCE) && !defined(__cplusplus)
#define _DEFAULT_SOURCE
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>

enum perf_coll {
    PERF_ALLREDUCE = 0,
    PERF_REDUCESCATTER,
    PERF_ALLGATHER,
    PERF_BROADCAST,
    PERF_REDUCE,
    PERF_ALLTOALL,
    PERF_SENDRECV,
    PERF_NCOLL
};

static const char *const perf_coll_names[PERF_NCOLL] = {
    "allreduce", "reducescatter", "allgather", "broadcast",
    "reduce",    "alltoall",      "sendrecv"};

#define PERF_CSV_HEADER                                                        \
    "collective,size,count,type,op,algo,time_us,algbw_gbs,busbw_gbs,wrong,"    \
    "spread_pct,nranks,inplace,iters,mean_us"

typedef struct perf_opts {
    int coll;         /* enum perf_coll */
    size_t min_bytes; /* -b */
    size_t max_bytes; /* -e */
    size_t factor;    /* -f: multiply the size by this each step */
    int iters;        /* -n: timed iterations per size */
    int warmup;       /* -w: untimed iterations per size */
    int check;        /* -c 0|1: verify the result once per size */
    int huge;         /* --huge: buffers on transparent huge pages */
    int fresh;        /* --fresh: inputs rewritten before each call */
    size_t offset;    /* --offset B: the receive buffer B bytes past a page */
} perf_opts_t;

/* --huge: buffers made the way xc_mem_alloc makes them (src/core/mem.c;
 * written again here, the anchors do not link xcoll): from 1 MiB up an
 * anonymous mapping started on a 2 MiB boundary, whole 2 MiB pages,
 * MADV_HUGEPAGE.  So that xcoll-perf --buffers xcoll is compared with the
 * anchors on the same kind of memory. */
#define PERF_HUGE_PAGE ((size_t)2 << 20)
static size_t perf_huge_len(size_t bytes)
{
    return (bytes + PERF_HUGE_PAGE - 1) / PERF_HUGE_PAGE * PERF_HUGE_PAGE;
}
/* Otherwise page-aligned, as xcoll-perf's (posix_memalign): with
 * malloc's 16-byte alignment a buffer's place in a cache line changed
 * with the heap, and where a library copies into it from its own aligned
 * memory 1-31 bytes off the source's place, glibc's `rep movsb` (2 KiB-512
 * KiB) ran ~20x slower on the AMD EPYC VM (src/core/copy.h).  `off`: the
 * buffer starts that many bytes past the boundary (--offset). */
static void *perf_alloc(size_t bytes, int huge, size_t off)
{
    bytes += off;
    if (!huge || bytes < PERF_HUGE_PAGE / 2) {
        void *p = NULL;
        if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0)
            return NULL;
        return (char *)p + off;
    }
    size_t len = perf_huge_len(bytes), span = len + PERF_HUGE_PAGE;
    char *map = (char *)mmap(NULL, span, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == (char *)MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)map + PERF_HUGE_PAGE - 1) &
                       ~(uintptr_t)(PERF_HUGE_PAGE - 1));
    if (p > map)
        munmap(map, (size_t)(p - map));
    if (map + span > p + len)
        munmap(p + len, (size_t)(map + span - (p + len)));
    madvise(p, len, MADV_HUGEPAGE);
    return p + off;
}
static void perf_free(void *p, size_t bytes, int huge, size_t off)
{
    if (!p)
        return;
    p = (char *)p - off;
    bytes += off;
    if (!huge || bytes < PERF_HUGE_PAGE / 2)
        free(p);
    else
        munmap(p, perf_huge_len(bytes));
}

/* "64K", "8M", "1G", "4096" -> bytes; 0 on a malformed value. */
static size_t perf_parse_size(const char *s)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    return *end ? 0 : (size_t)v;
}

static int perf_coll_from_name(const char *name)
{
    for (int c = 0; c < PERF_NCOLL; c++)
        if (strcmp(name, perf_coll_names[c]) == 0)
            return c;
    /* the spellings xcoll uses, for convenience */
    if (strcmp(name, "reduce_scatter") == 0)
        return PERF_REDUCESCATTER;
    if (strcmp(name, "bcast") == 0)
        return PERF_BROADCAST;
    return -1;
}

static void perf_usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s -C COLL [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] "
            "[-w WARMUP] [-c 0|1] [--huge] [--fresh] [--offset B] [--csv]\n"
            "  COLL: allreduce reducescatter allgather broadcast reduce "
            "alltoall sendrecv\n"
            "  sizes in bytes, K/M/G suffixes allowed; fp32 sum; CSV on "
            "stdout of rank 0; --huge: buffers on huge pages; --fresh: "
            "every cache line of the input rewritten before each call; "
            "--offset B: the receive buffer B bytes past a page boundary "
            "(0-4095, default 0)\n",
            prog);
}

/* Parse argv; on error print usage and return -1. */
static int perf_parse_args(int argc, char **argv, perf_opts_t *o)
{
    o->coll = -1;
    o->min_bytes = 8;
    o->max_bytes = 64u << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->huge = 0;
    o->fresh = 0;
    o->offset = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--csv") == 0)
            continue; /* CSV is the only output format */
        if (strcmp(a, "--huge") == 0) {
            o->huge = 1;
            continue;
        }
        if (strcmp(a, "--fresh") == 0) {
            o->fresh = 1;
            continue;
        }
        if (strcmp(a, "--offset") == 0 && v) {
            char *end = NULL;
            unsigned long b = strtoul(v, &end, 10);
            if (end == v || *end || b > 4095) {
                perf_usage(argv[0]);
                return -1;
            }
            o->offset = (size_t)b;
            i++;
            continue;
        }
        if (a[0] != '-' || a[1] == '\0' || a[2] != '\0' || !v) {
            perf_usage(argv[0]);
            return -1;
        }
        i++;
        switch (a[1]) {
        case 'C': o->coll = perf_coll_from_name(v); break;
        case 'b': o->min_bytes = perf_parse_size(v); break;
        case 'e': o->max_bytes = perf_parse_size(v); break;
        case 'f': o->factor = (size_t)strtoul(v, NULL, 10); break;
        case 'n': o->iters = atoi(v); break;
        case 'w': o->warmup = atoi(v); break;
        case 'c': o->check = atoi(v); break;
        default: perf_usage(argv[0]); return -1;
        }
    }
    if (o->coll < 0 || o->min_bytes == 0 || o->max_bytes < o->min_bytes ||
        o->factor < 2 || o->iters < 1 || o->warmup < 0) {
        perf_usage(argv[0]);
        return -1;
    }
    return 0;
}

/* Buffer layout of one collective at one size on n ranks, in elements. */
typedef struct perf_layout {
    size_t block;  /* the call's count: one rank's slice, or the buffer */
    size_t sendc;  /* elements of the send buffer */
    size_t recvc;  /* elements of the receive buffer */
    size_t bytes;  /* the reported size; 0 = skip this size */
    double busfac; /* busbw / algbw */
} perf_layout_t;

static perf_layout_t perf_layout_of(int coll, size_t req_bytes, int n)
{
    perf_layout_t l;
    size_t elems = req_bytes / sizeof(float);
    size_t per = elems / (size_t)n;
    switch (coll) {
    case PERF_REDUCESCATTER:
        l.block = per; l.sendc = per * n; l.recvc = per;
        l.busfac = (double)(n - 1) / n;
        break;
    case PERF_ALLGATHER:
        l.block = per; l.sendc = per; l.recvc = per * n;
        l.busfac = (double)(n - 1) / n;
        break;
    case PERF_ALLTOALL:
        l.block = per; l.sendc = per * n; l.recvc = per * n;
        l.busfac = (double)(n - 1) / n;
        break;
    case PERF_ALLREDUCE:
        l.block = elems; l.sendc = elems; l.recvc = elems;
        l.busfac = 2.0 * (n - 1) / n;
        break;
    default: /* broadcast, reduce, sendrecv */
        l.block = elems; l.sendc = elems; l.recvc = elems;
        l.busfac = 1.0;
        break;
    }
    l.bytes = (l.sendc > l.recvc ? l.sendc : l.recvc) * sizeof(float);
    return l;
}

/* The value rank r contributes at index i: small integers, so sums are
 * exact in fp32. */
static float perf_val(int r, size_t i)
{
    return (float)(((size_t)r * 7u + i) % 13u);
}

static float perf_sum(int n, size_t i)
{
    float s = 0.0f;
    for (int r = 0; r < n; r++)
        s += perf_val(r, i);
    return s;
}

/* Fill the send buffer of rank r and poison the receive buffer. */
static void perf_fill(int coll, const perf_layout_t *l, int r, float *send,
                      float *recv)
{
    for (size_t i = 0; i < l->sendc; i++)
        send[i] = perf_val(r, i);
    for (size_t i = 0; i < l->recvc; i++)
        recv[i] = -1.0f;
    if (coll == PERF_BROADCAST && r != 0)
        for (size_t i = 0; i < l->sendc; i++)
            send[i] = -1.0f; /* broadcast works in `send` on every rank */
}

/* --fresh (xcoll-perf --fresh): before each call, dirty every cache line
 * of rank r's input in its own cache, values unchanged, as a training step
 * leaves what it just computed -- not a send buffer the peers still hold
 * from the last call.  Broadcast's input is the root's buffer only; the
 * callers meet in a barrier after it (untimed), so that no rank's clock
 * runs while it waits for another's writing. */
static void perf_touch(int coll, const perf_layout_t *l, int r, float *send)
{
    if (coll == PERF_BROADCAST && r != 0)
        return;
    volatile char *p = (volatile char *)send;
    size_t n = l->sendc * sizeof(float);
    for (size_t i = 0; i < n; i += 64)
        p[i] = p[i];
}

/* Number of wrong elements in rank r's result (root 0 for reduce and
 * broadcast; broadcast's result is in `send`). */
static size_t perf_check(int coll, const perf_layout_t *l, int r, int n,
                         const float *send, const float *recv)
{
    size_t bad = 0, c = l->block;
    switch (coll) {
    case PERF_ALLREDUCE:
        for (size_t i = 0; i < c; i++)
            bad += recv[i] != perf_sum(n, i);
        break;
    case PERF_REDUCE:
        if (r == 0)
            for (size_t i = 0; i < c; i++)
                bad += recv[i] != perf_sum(n, i);
        break;
    case PERF_REDUCESCATTER:
        for (size_t j = 0; j < c; j++)
            bad += recv[j] != perf_sum(n, (size_t)r * c + j);
        break;
    case PERF_ALLGATHER:
        for (int k = 0; k < n; k++)
            for (size_t j = 0; j < c; j++)
                bad += recv[(size_t)k * c + j] != perf_val(k, j);
        break;
    case PERF_BROADCAST:
        for (size_t i = 0; i < c; i++)
            bad += send[i] != perf_val(0, i);
        break;
    case PERF_ALLTOALL:
        for (int k = 0; k < n; k++)
            for (size_t j = 0; j < c; j++)
                bad += recv[(size_t)k * c + j] !=
                       perf_val(k, (size_t)r * c + j);
        break;
    case PERF_SENDRECV:
        for (size_t i = 0; i < c; i++)
            bad += recv[i] != perf_val((r + n - 1) % n, i);
        break;
    default:
        break;
    }
    return bad;
}

static int perf_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile q in [0, 1] of sorted t[0..n), interpolated linearly. */
static double perf_quantile_sorted(const double *t, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    if (i >= n - 1)
        return t[n - 1];
    return t[i] + (pos - i) * (t[i + 1] - t[i]);
}

/* A rank's mean of its own per-iteration times (seconds), before they are
 * reduced: with the max over ranks, the row's mean_us (a throughput; see
 * xcoll-perf). */
static double perf_mean(const double *t, int iters)
{
    double s = 0;
    for (int i = 0; i < iters; i++)
        s += t[i];
    return iters ? s / iters : 0.0;
}

/* Print one CSV row from the per-iteration times (seconds, already the max
 * over ranks) and `mean` (seconds, the slowest rank's perf_mean); sorts
 * `t`.  wrong < 0: not checked. */
static void perf_print_row(int coll, const perf_layout_t *l, const char *algo,
                           double *t, int iters, long long wrong, int nranks,
                           int inplace, double mean)
{
    qsort(t, (size_t)iters, sizeof *t, perf_cmp_double);
    double med = perf_quantile_sorted(t, iters, 0.5);
    double p10 = perf_quantile_sorted(t, iters, 0.1);
    double p90 = perf_quantile_sorted(t, iters, 0.9);
    double algbw = med > 0 ? (double)l->bytes / med / 1e9 : 0.0;
    int reducing = coll == PERF_ALLREDUCE || coll == PERF_REDUCE ||
                   coll == PERF_REDUCESCATTER;
    printf("%s,%zu,%zu,float,%s,%s,%.3f,%.6f,%.6f,%lld,%.2f,%d,%d,%d,%.3f\n",
           perf_coll_names[coll], l->bytes, l->block,
           reducing ? "sum" : "none", algo, med * 1e6, algbw,
           algbw * l->busfac, wrong, med > 0 ? (p90 - p10) / med * 100.0 : 0.0,
           nranks, inplace, iters, mean * 1e6);
    fflush(stdout);
}

#endif /* XCOLL_BENCH_PERF_COMMON_H */
