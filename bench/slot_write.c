/*
 * slot_write.c -- what writing a staging slot costs on this machine's
 * placement of two cores, with ordinary and with non-temporal stores
 * (src/transport/wcopy.c, the two ways xc__wcopy has).
 *
 *   build/bench_slot_write [rounds]
 *
 * A writer thread on CPU 1 copies a message into a ring of 64 KiB
 * entries in shared memory, publishing each; a reader thread on CPU 0
 * adds every entry into an output of its own and frees it.  Per round,
 * both ways, the median time of:
 *   one      -- one 64 KiB entry written into the lines the reader has
 *               just read, then read (no overlap: the write's own cost);
 *   ring     -- a 256 KiB and a 1 MiB message through a ring of 4 entries,
 *               the writer up to 4 entries ahead (a staged pipeline);
 *   turned   -- the 1 MiB message through 32 entries (2 MiB), the writer
 *               still at most 4 ahead: what XCOLL_SHM_SLOT_ROT=4 does for
 *               ring operations (docs/shm.md "Turning the ring entries") --
 *               an entry is written again once the reader's cache has let
 *               it go.
 * The ordinary way's times tell the placements apart (docs/shm.md,
 * "Writing a slot"); rounds see another placement only if the hypervisor
 * moves the vCPUs in between: run the program several times.
 */
#include "transport/wcopy.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define ENTRY ((size_t)64 << 10)
#define REPS 201

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static _Alignas(64) _Atomic long head; /* entries published (-1: stop) */
static _Alignas(64) _Atomic long tail; /* entries taken */
static char *ring;
static int nring;
static float *out;

static void *reader(void *arg)
{
    (void)arg;
    pin(0);
    for (long i = 0;; i++) {
        long h;
        while ((h = atomic_load_explicit(&head, memory_order_acquire)) <= i)
            if (h < 0) return NULL;
        const float *e = (const float *)(ring + (size_t)(i % nring) * ENTRY);
        for (size_t j = 0; j < ENTRY / 4; j++) out[j] += e[j];
        atomic_store_explicit(&tail, i + 1, memory_order_release);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median microseconds of a message of `bytes` through `entries` entries,
 * the writer at most `ahead` of the reader. */
static double run(const char *src, size_t bytes, int entries, int ahead, int nt)
{
    static long k;
    double t[REPS];
    nring = entries;
    for (int r = 0; r < REPS; r++) {
        double t0 = now_us();
        for (size_t off = 0; off < bytes; off += ENTRY) {
            while (k - atomic_load_explicit(&tail, memory_order_acquire) >= ahead)
                ;
            xc__wcopy(ring + (size_t)(k % entries) * ENTRY, src + off, ENTRY, nt);
            k++;
            atomic_store_explicit(&head, k, memory_order_release);
        }
        while (atomic_load_explicit(&tail, memory_order_acquire) < k)
            ;
        t[r] = now_us() - t0;
    }
    qsort(t, REPS, sizeof *t, cmp);
    return t[REPS / 2];
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    pin(1);
    ring = mmap(NULL, 32 * ENTRY, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *src = malloc(((size_t)1 << 20) + 64);
    out = calloc(ENTRY / 4, sizeof *out);
    if (ring == MAP_FAILED || !src || !out) return 1;
    memset(ring, 0, 32 * ENTRY);
    for (size_t i = 0; i < ((size_t)1 << 20) + 64; i++) src[i] = (char)i;
    pthread_t th;
    if (pthread_create(&th, NULL, reader, NULL)) return 1;
    printf("# slot writes, us (median of %d): ordinary / non-temporal stores\n", REPS);
    printf("%5s %16s %16s %16s %16s\n", "round", "one 64 KiB", "ring 256 KiB", "ring 1 MiB",
           "turned 1 MiB");
    for (int r = 0; r < rounds; r++) {
        double v[4][2];
        for (int nt = 0; nt < 2; nt++) {
            v[0][nt] = run(src + 16, ENTRY, 1, 1, nt);
            v[1][nt] = run(src + 16, (size_t)256 << 10, 4, 4, nt);
            v[2][nt] = run(src + 16, (size_t)1 << 20, 4, 4, nt);
            v[3][nt] = run(src + 16, (size_t)1 << 20, 32, 4, nt);
        }
        printf("%5d %7.1f / %6.1f %7.1f / %6.1f %7.1f / %6.1f %7.1f / %6.1f\n", r, v[0][0],
               v[0][1], v[1][0], v[1][1], v[2][0], v[2][1], v[3][0], v[3][1]);
    }
    atomic_store(&head, -1);
    pthread_join(th, NULL);
    return 0;
}
