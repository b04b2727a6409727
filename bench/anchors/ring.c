/*
 * ring.c -- a model of a small broadcast's ring between two cores, with no
 * library code: a writer thread puts one message per cache line into a
 * ring of D entries (S bytes apart) and a reader thread takes them in
 * order.  The writer may stage message g once the reader has published
 * it is done with g - W (the reader publishes every 4 messages, as
 * xcoll's OUT_EVERY).  Around each message the writer makes K and the
 * reader KC other stores (a call's own bookkeeping), the writer
 * optionally one locked instruction (a mutex), and the reader optionally
 * asks for the next PF entries (prefetch).
 *
 *   cc -O2 -o /tmp/ring bench/anchors/ring.c -lpthread
 *   /tmp/ring K KC LOCK D S PF W      (e.g. /tmp/ring 60 60 1 8 1024 0 8)
 *
 * Threads pinned to CPUs 0 and 1.  Prints the microseconds per message.
 * bench/RESULTS.md, thirty-first session: depth and the locked
 * instruction decide it (depth 8: 0.21 us whatever else; depth 32: 0.12
 * without the lock, 0.13-0.14 with it).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int D = 8, S = 1024, K = 60, KC = 60, LOCK = 0, PF = 0, W = 8;
static const long N = 2000000;
static char *ring;
static volatile uint64_t out __attribute__((aligned(128)));
static volatile uint64_t lockword __attribute__((aligned(128)));

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* k stores to a private array (a call's bookkeeping). */
static void busy_stores(volatile uint64_t *scratch, int k)
{
    for (int i = 0; i < k; i++) scratch[i & 63] = (uint64_t)i;
}

static volatile uint64_t *entry(uint64_t g) { return (volatile uint64_t *)(ring + (g % (uint64_t)D) * (size_t)S); }

static void *reader(void *arg)
{
    (void)arg;
    pin(1);
    volatile uint64_t scratch[64];
    uint64_t sum = 0;
    for (uint64_t g = 1; g <= (uint64_t)N; g++) {
        volatile uint64_t *l = entry(g);
        while (l[7] != g) __builtin_ia32_pause();
        sum += l[1];
        for (int q = 1; q <= PF; q++) __builtin_prefetch((const void *)entry(g + (uint64_t)q));
        busy_stores(scratch, KC);
        if (g % 4 == 0) out = g;
    }
    return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
    int *opt[] = {&K, &KC, &LOCK, &D, &S, &PF, &W};
    for (int i = 1; i < argc && i <= 7; i++) *opt[i - 1] = atoi(argv[i]);
    if (D < 1 || S < 64 || W < 1 || W > D) {
        fprintf(stderr, "usage: ring K KC LOCK D S PF W  (S >= 64, 1 <= W <= D)\n");
        return 2;
    }
    ring = aligned_alloc(4096, (size_t)D * (size_t)S + 4096);
    for (size_t i = 0; i < (size_t)D * (size_t)S / 8; i++) ((uint64_t *)ring)[i] = 0;
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    pin(0);
    volatile uint64_t scratch[64];
    double t0 = now();
    for (uint64_t g = 1; g <= (uint64_t)N; g++) {
        while (g > out + (uint64_t)W) __builtin_ia32_pause(); /* entry g % D free */
        volatile uint64_t *l = entry(g);
        l[1] = g;
        __atomic_store_n((uint64_t *)&l[7], g, __ATOMIC_RELEASE);
        busy_stores(scratch, K);
        if (LOCK) __atomic_exchange_n(&lockword, g, __ATOMIC_SEQ_CST);
    }
    pthread_join(t, NULL);
    printf("K=%d KC=%d lock=%d D=%d S=%d pf=%d W=%d: %.3f us/message\n", K, KC, LOCK, D, S, PF, W,
           (now() - t0) / (double)N * 1e6);
    return 0;
}
