/*
 * limits.c -- the machine's own limits, measured by bench/compare in the
 * same run as the collectives, so that every figure can be read as a
 * fraction of what this machine's memory system can do at that moment:
 *
 *   memcpy   single thread, 64 KiB (cache) and 64 MiB (memory / LLC)
 *   memcpy   two threads, each on its own 64 MiB buffers, aggregate
 *   add_f32  c[i] = a[i] + b[i], single thread, 64 KiB and 64 MiB per array
 *   memcpy_sweep  memcpy, single thread, at every size of the benchmark's
 *            sweep (-b/-e/-f, as xcoll-perf): the per-size limit of
 *            summary.md
 *   xcopy_sweep   a cross-core copy at every size of the sweep: a thread on
 *            CPU 0 writes a buffer, a thread on CPU 1 copies it into its
 *            own (timed: from seeing the writer's flag to the copy's end).
 *            What any transfer of a just-written message between two cores
 *            costs when one core does the copy: the floor of a 2-rank
 *            send/recv or plain single-copy broadcast, and of the pull
 *            half of every other 2-rank collective.
 *   line_us  a cross-core flag: two threads on CPUs 0 and 1 hand a counter
 *            back and forth, each writing its own 128-byte-aligned line and
 *            spinning on the other's; one way, microseconds.  The floor of
 *            any shared-memory signal -- and on a VM it moves when the
 *            hypervisor places the two vCPUs elsewhere (siblings of one
 *            core against cores apart), which is why every record shows it
 *            at the start and at the end.
 *   futex_us a futex wake across cores: a thread asleep in FUTEX_WAIT on
 *            CPU 1 woken by CPU 0; from the wake call to the sleeper
 *            running, microseconds.  What a sleeping waiter pays.
 *
 * Units (the latencies above aside, whose best and median columns are
 * microseconds): GB/s = 1e9 bytes per second of ONE buffer's bytes: bytes copied
 * for memcpy, bytes of c written for the add (STREAM would count twice
 * resp. three times that, adding the reads).  This is the unit of busbw:
 * a collective that moves its bytes once through memory at memcpy speed
 * would show busbw = the memcpy figure.
 *
 * Each test repeats its operation for about -t seconds (at least 5 times),
 * timing each repetition; it prints the best and the median rate as CSV:
 *   test,bytes,threads,best_gbs,median_gbs
 * A repetition of a small single-thread test makes `inner` back-to-back
 * calls (about 256 KiB in all), so the clock's own cost does not count.
 * Pointers go through an empty asm with a memory clobber so the compiler
 * cannot drop copies whose result nobody reads.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 100000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void clobber(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

static void add_f32(float *restrict c, const float *restrict a,
                    const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}

static void *alloc_filled(size_t bytes, int v)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p)
        memset(p, v, bytes); /* fault every page in before timing */
    return p;
}

/* A zeroed block of n bytes on its own 128-byte lines, or NULL. */
static void *zalloc_lines(size_t n)
{
    void *p = aligned_alloc(128, (n + 127) / 128 * 128);
    if (p)
        memset(p, 0, n);
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double *g_times; /* per-repetition seconds, MAX_REPS of them */

static void report(const char *test, size_t bytes, int threads, double moved,
                   int reps)
{
    qsort(g_times, (size_t)reps, sizeof *g_times, cmp_double);
    printf("%s,%zu,%d,%.2f,%.2f\n", test, bytes, threads,
           moved / g_times[0] / 1e9, moved / g_times[reps / 2] / 1e9);
    fflush(stdout);
}

/* Repeat fn(arg) for about `secs`, at least 5 and at most MAX_REPS times. */
static int repeat(void (*fn)(void *), void *arg, double secs)
{
    int reps = 0;
    double end = now_s() + secs;
    fn(arg); /* warm caches and TLB */
    while (reps < MAX_REPS && (reps < 5 || now_s() < end)) {
        double t0 = now_s();
        fn(arg);
        g_times[reps++] = now_s() - t0;
    }
    return reps;
}

/* Repetitions for about `secs` when one takes about `one` seconds: at
 * least 5, at most what g_times holds beside a warm-up. */
static int reps_for(double secs, double one)
{
    double r = secs / (one > 1e-9 ? one : 1e-9);
    return r < 5 ? 5 : r > MAX_REPS - 1 ? MAX_REPS - 1 : (int)r;
}

typedef struct job {
    void *dst, *src, *src2;
    size_t bytes;
    size_t inner; /* calls per timed repetition */
} job_t;

static void do_memcpy(void *p)
{
    job_t *j = p;
    for (size_t k = 0; k < j->inner; k++) {
        memcpy(j->dst, j->src, j->bytes);
        clobber(j->dst);
    }
}

static void do_add(void *p)
{
    job_t *j = p;
    for (size_t k = 0; k < j->inner; k++) {
        add_f32(j->dst, j->src, j->src2, j->bytes / sizeof(float));
        clobber(j->dst);
    }
}

/* Two threads, each copying its own buffers; a barrier before and after
 * each repetition, timed by thread 0, so the rate is the aggregate. */
typedef struct pair {
    job_t job[2];
    pthread_barrier_t bar;
    int reps;
} pair_t;

static void *copier(void *p)
{
    pair_t *pr = p;
    job_t *j = &pr->job[1];
    for (int r = 0; r < pr->reps + 1; r++) {
        pthread_barrier_wait(&pr->bar);
        do_memcpy(j);
        pthread_barrier_wait(&pr->bar);
    }
    return NULL;
}

static int two_thread_memcpy(size_t bytes, double secs)
{
    pair_t pr;
    pthread_t th;
    for (int k = 0; k < 2; k++) {
        pr.job[k].dst = alloc_filled(bytes, 0);
        pr.job[k].src = alloc_filled(bytes, 1);
        pr.job[k].bytes = bytes;
        pr.job[k].inner = 1;
        if (!pr.job[k].dst || !pr.job[k].src)
            return -1;
    }
    /* size the repetition count from a single-thread estimate */
    double t0 = now_s();
    do_memcpy(&pr.job[0]);
    pr.reps = reps_for(secs, now_s() - t0);
    pthread_barrier_init(&pr.bar, NULL, 2);
    if (pthread_create(&th, NULL, copier, &pr) != 0)
        return -1;
    for (int r = 0; r < pr.reps + 1; r++) { /* repetition 0 warms up */
        pthread_barrier_wait(&pr.bar);
        double s = now_s();
        do_memcpy(&pr.job[0]);
        pthread_barrier_wait(&pr.bar);
        if (r > 0)
            g_times[r - 1] = now_s() - s;
    }
    pthread_join(th, NULL);
    pthread_barrier_destroy(&pr.bar);
    report("memcpy", bytes, 2, 2.0 * (double)bytes, pr.reps);
    for (int k = 0; k < 2; k++) {
        free(pr.job[k].dst);
        free(pr.job[k].src);
    }
    return 0;
}

static int one_thread(const char *test, void (*fn)(void *), size_t bytes,
                      double secs)
{
    size_t inner = bytes < (256u << 10) ? (256u << 10) / bytes : 1;
    job_t j = {alloc_filled(bytes, 0), alloc_filled(bytes, 0),
               alloc_filled(bytes, 0), bytes, inner};
    if (!j.dst || !j.src || !j.src2)
        return -1;
    report(test, bytes, 1, (double)bytes * (double)inner,
           repeat(fn, &j, secs));
    free(j.dst);
    free(j.src);
    free(j.src2);
    return 0;
}

/* ---- cross-core latencies (line_us, futex_us) ---- */

#define LAT_ROUNDS 2000 /* round trips per timed repetition of line_us */

typedef struct lat {
    _Alignas(128) uint64_t ping; /* written by thread 0 */
    _Alignas(128) uint64_t pong; /* written by thread 1 */
    _Alignas(128) uint32_t word; /* futex word */
    uint32_t stop;
    _Alignas(128) double woke; /* thread 1: when it ran after a wake */
    int reps, mode;            /* mode 0: lines, 1: futex */
    pthread_barrier_t bar;
} lat_t;

static int pin(int cpu)
{
    cpu_set_t c;
    CPU_ZERO(&c);
    CPU_SET(cpu, &c);
    return pthread_setaffinity_np(pthread_self(), sizeof c, &c);
}

/* Back to every CPU for the tests that follow. */
static void unpin(void)
{
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; c++)
        CPU_SET(c, &all);
    pthread_setaffinity_np(pthread_self(), sizeof all, &all);
}

static long futex(uint32_t *w, int op, uint32_t v)
{
    return syscall(SYS_futex, w, op, v, NULL, NULL, 0);
}

static void *lat_peer(void *p)
{
    lat_t *l = p;
    pin(1);
    pthread_barrier_wait(&l->bar);
    if (l->mode == 0) {
        uint64_t total = (uint64_t)(l->reps + 1) * LAT_ROUNDS;
        for (uint64_t i = 1; i <= total; i++) {
            while (__atomic_load_n(&l->ping, __ATOMIC_ACQUIRE) != i)
                __builtin_ia32_pause();
            __atomic_store_n(&l->pong, i, __ATOMIC_RELEASE);
        }
        return NULL;
    }
    for (int r = 0; r < l->reps + 1; r++) {
        /* Asleep until thread 0 bumps the word and wakes us. */
        while (__atomic_load_n(&l->word, __ATOMIC_ACQUIRE) == (uint32_t)(2 * r))
            futex(&l->word, FUTEX_WAIT_PRIVATE, (uint32_t)(2 * r));
        l->woke = now_s(); /* published by the store below */
        __atomic_store_n(&l->word, (uint32_t)(2 * r + 2), __ATOMIC_RELEASE);
    }
    return NULL;
}

/* line_us (mode 0) or futex_us (1): skipped (0) where the process may not
 * run on CPUs 0 and 1. */
static int latency(int mode, double secs)
{
    lat_t *l = zalloc_lines(sizeof *l);
    if (!l)
        return -1;
    l->mode = mode;
    /* about `secs` (a round trip well under a microsecond; a wake tens) */
    l->reps = reps_for(secs, mode == 0 ? LAT_ROUNDS * 0.5e-6 : 200e-6);
    if (pin(0) != 0) {
        free(l);
        return 0;
    }
    pthread_barrier_init(&l->bar, NULL, 2);
    pthread_t th;
    if (pthread_create(&th, NULL, lat_peer, l) != 0) {
        free(l);
        return -1;
    }
    pthread_barrier_wait(&l->bar);
    uint64_t i = 0;
    for (int r = 0; r < l->reps + 1; r++) { /* repetition 0 warms up */
        double t0 = now_s(), t;
        if (mode == 0) {
            for (int k = 0; k < LAT_ROUNDS; k++) {
                __atomic_store_n(&l->ping, ++i, __ATOMIC_RELEASE);
                while (__atomic_load_n(&l->pong, __ATOMIC_ACQUIRE) != i)
                    __builtin_ia32_pause();
            }
            t = (now_s() - t0) / (2.0 * LAT_ROUNDS);
        } else {
            /* Let the peer fall asleep, then wake it. */
            struct timespec nap = {0, 100000};
            nanosleep(&nap, NULL);
            t0 = now_s();
            __atomic_store_n(&l->word, (uint32_t)(2 * r + 1), __ATOMIC_RELEASE);
            futex(&l->word, FUTEX_WAKE_PRIVATE, 1);
            while (__atomic_load_n(&l->word, __ATOMIC_ACQUIRE) != (uint32_t)(2 * r + 2))
                __builtin_ia32_pause();
            t = l->woke - t0;
        }
        if (r > 0)
            g_times[r - 1] = t;
    }
    pthread_join(th, NULL);
    pthread_barrier_destroy(&l->bar);
    qsort(g_times, (size_t)l->reps, sizeof *g_times, cmp_double);
    printf("%s,8,2,%.3f,%.3f\n", mode ? "futex_us" : "line_us", g_times[0] * 1e6,
           g_times[l->reps / 2] * 1e6);
    fflush(stdout);
    free(l);
    unpin();
    return 0;
}

/* ---- cross-core copy (xcopy_sweep) ---- */

typedef struct xcopy {
    _Alignas(128) uint64_t flag; /* written by the writer (CPU 0) */
    _Alignas(128) uint64_t ack;  /* written by the reader (CPU 1) */
    char *shared, *src, *dst;
    size_t bytes;
    int reps;
} xcopy_t;

static void *xcopy_reader(void *p)
{
    xcopy_t *x = p;
    pin(1);
    for (int r = 1; r <= x->reps + 1; r++) { /* repetition 1 warms up */
        while (__atomic_load_n(&x->flag, __ATOMIC_ACQUIRE) != (uint64_t)r)
            __builtin_ia32_pause();
        double t0 = now_s();
        memcpy(x->dst, x->shared, x->bytes);
        clobber(x->dst);
        if (r > 1)
            g_times[r - 2] = now_s() - t0;
        __atomic_store_n(&x->ack, (uint64_t)r, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* One size: skipped (0) where the process may not run on CPUs 0 and 1. */
static int xcopy(size_t bytes, double secs)
{
    xcopy_t *x = zalloc_lines(sizeof *x);
    if (!x)
        return -1;
    x->bytes = bytes;
    x->shared = alloc_filled(bytes, 0);
    x->src = alloc_filled(bytes, 1);
    x->dst = alloc_filled(bytes, 2);
    int rc = -1;
    if (!x->shared || !x->src || !x->dst)
        goto out;
    /* about `secs`: a write and a copy per repetition, at ~10 GB/s or
     * ~1 us for the hand-over, whichever is longer */
    x->reps = reps_for(secs, 2.0 * (double)bytes / 10e9 + 1e-6);
    rc = 0;
    if (pin(0) != 0)
        goto out;
    pthread_t th;
    rc = -1;
    if (pthread_create(&th, NULL, xcopy_reader, x) != 0)
        goto out;
    for (int r = 1; r <= x->reps + 1; r++) {
        while (__atomic_load_n(&x->ack, __ATOMIC_ACQUIRE) != (uint64_t)(r - 1))
            __builtin_ia32_pause();
        memcpy(x->shared, x->src, bytes);
        clobber(x->shared);
        __atomic_store_n(&x->flag, (uint64_t)r, __ATOMIC_RELEASE);
    }
    pthread_join(th, NULL);
    report("xcopy_sweep", bytes, 2, (double)bytes, x->reps);
    rc = 0;
out:
    unpin();
    free(x->shared);
    free(x->src);
    free(x->dst);
    free(x);
    return rc;
}

/* "64K", "8M", "4096" -> bytes; 0 on a malformed value. */
static size_t parse_size(const char *s)
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
    return *end ? 0 : (size_t)v;
}

int main(int argc, char **argv)
{
    double secs = 0.3;
    size_t lo = 0, hi = 0, factor = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-t") == 0)
            secs = atof(argv[i + 1]);
        else if (strcmp(argv[i], "-b") == 0)
            lo = parse_size(argv[i + 1]);
        else if (strcmp(argv[i], "-e") == 0)
            hi = parse_size(argv[i + 1]);
        else if (strcmp(argv[i], "-f") == 0)
            factor = (size_t)strtoul(argv[i + 1], NULL, 10);
        else
            argc = -1;
    }
    if (argc < 0 || argc % 2 == 0 || secs <= 0 || factor < 2 ||
        (lo == 0) != (hi == 0) || hi < lo) {
        fprintf(stderr, "usage: %s [-t SECONDS_PER_TEST] [-b MIN -e MAX "
                        "[-f FACTOR]]\n", argv[0]);
        return 2;
    }
    g_times = malloc(MAX_REPS * sizeof *g_times);
    if (!g_times)
        return 1;
    const size_t small = 64u << 10, big = 64u << 20;
    printf("test,bytes,threads,best_gbs,median_gbs\n");
    int rc = one_thread("memcpy", do_memcpy, small, secs) ||
             one_thread("memcpy", do_memcpy, big, secs) ||
             two_thread_memcpy(big, secs) ||
             one_thread("add_f32", do_add, small, secs) ||
             one_thread("add_f32", do_add, big, secs) ||
             latency(0, secs) || latency(1, secs);
    for (size_t s = lo; rc == 0 && lo && s <= hi; s *= factor)
        rc = one_thread("memcpy_sweep", do_memcpy, s, secs / 3);
    for (size_t s = lo; rc == 0 && lo && s <= hi; s *= factor)
        rc = xcopy(s, secs / 3);
    free(g_times);
    if (rc)
        fprintf(stderr, "limits: out of memory or no threads\n");
    return rc ? 1 : 0;
}
