/*
 * exchange.c -- the machine's floor for a small symmetric exchange between
 * two cores, the pattern of a 2-rank all-reduce: each thread writes N
 * bytes and a flag, waits for the other's flag, and sums the other's N
 * bytes into its own.  Modes (how the lines move):
 *   0  plain: the writer's memcpy, the reader's summing loop;
 *   1  the writer takes its lines back for writing after each round
 *      (prefetchw), as xcoll's slot_own_next does;
 *   2  the reader asks for all the other's lines before it sums
 *      (prefetch), as xcoll's xc__shm_prefetch does;
 *   3  the writer's stores non-temporal (to memory, not the cache).
 *
 *   cc -O2 -mavx2 -o /tmp/exchange bench/anchors/exchange.c -lpthread
 *   /tmp/exchange BYTES MODE     (threads pinned to CPUs 0 and 1)
 *
 * Prints the microseconds of one round (both directions).
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXB 8192
static size_t nbytes;
static int mode;
static const int iters = 200000;

struct side {
    _Alignas(128) volatile uint64_t flag;
    _Alignas(128) char data[MAXB];
};
static struct side sides[2];
static _Alignas(64) char own[2][MAXB];

static void *run(void *arg)
{
    int me = (int)(intptr_t)arg, peer = 1 - me;
    cpu_set_t c;
    CPU_ZERO(&c);
    CPU_SET(me, &c);
    pthread_setaffinity_np(pthread_self(), sizeof c, &c);
    char *mine = sides[me].data;
    const char *theirs = sides[peer].data;
    for (uint64_t i = 1; i <= (uint64_t)iters; i++) {
        if (mode == 3) {
            for (size_t k = 0; k < nbytes; k += 32)
                _mm256_stream_si256((__m256i *)(mine + k),
                                    _mm256_load_si256((const __m256i *)(own[me] + k)));
            _mm_sfence();
        } else {
            memcpy(mine, own[me], nbytes);
        }
        __atomic_store_n(&sides[me].flag, i, __ATOMIC_RELEASE);
        while (__atomic_load_n(&sides[peer].flag, __ATOMIC_ACQUIRE) < i) _mm_pause();
        if (mode == 2)
            for (size_t k = 0; k < nbytes; k += 64) _mm_prefetch(theirs + k, _MM_HINT_T0);
        const float *p = (const float *)theirs;
        float *d = (float *)own[me];
        for (size_t k = 0; k < nbytes / 4; k++) d[k] += p[k];
        if (mode == 1)
            for (size_t k = 0; k < nbytes; k += 64) __asm__ volatile("prefetchw %0" : : "m"(mine[k]));
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: exchange BYTES MODE (0 plain, 1 prefetchw, 2 prefetch, 3 nt)\n");
        return 2;
    }
    nbytes = (size_t)atol(argv[1]);
    mode = atoi(argv[2]);
    if (nbytes > MAXB || nbytes % 32) {
        fprintf(stderr, "exchange: BYTES a multiple of 32 up to %d\n", MAXB);
        return 2;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, run, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3;
    printf("bytes %zu mode %d: %.3f us a round\n", nbytes, mode, us / iters);
    return 0;
}
