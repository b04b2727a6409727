/*
 * duplex.c -- a model of a large 2-rank send/receive (or the peer block of
 * a 2-rank all-to-all), with no library code: two processes, pinned to
 * CPUs 0 and 1, each send N bytes of a private buffer to the other at the
 * same time, N times over, in one of three ways:
 *
 *   mode 0  single copy: each reads the peer's buffer with one
 *           process_vm_readv, then both meet at a flag barrier;
 *   mode 1  staged: each copies its buffer chunk by chunk (C bytes) into
 *           its ring of D chunks in shared memory and copies the peer's
 *           chunks out of the peer's ring as they appear, alternating
 *           (single-writer head / tail counters on lines of their own);
 *           NT=1 copies in with streaming stores, NT=2 copies out with
 *           them, NT=3 both;
 *   mode 2  single copy in pieces of C bytes;
 *   mode 3  mapped: each send buffer lives in a memfd that both processes
 *           map; each reads the peer's with one memcpy (what single copy
 *           could be for memory the library allocates and shares);
 *   mode 4  as mode 0, the send buffers on transparent huge pages;
 *   mode 5  as mode 0, the send buffers (ordinary pages, written) then
 *           collapsed into huge pages with MADV_COLLAPSE (its time printed);
 *   mode 6  as mode 5, the receive buffers collapsed too;
 *   mode 7  as mode 4, the receive buffers on huge pages too.
 *
 *   cc -O2 -march=native -o /tmp/duplex bench/anchors/duplex.c
 *   /tmp/duplex N MODE [C D NT]      (e.g. /tmp/duplex 16777216 1 131072 4 0)
 *
 * Prints five repetitions of the time per exchange and the rate of one
 * direction.  bench/RESULTS.md, thirty-second session: on the AMD EPYC VM
 * the two ways are within ~10 % of each other at 1-4 MiB (15-17 GB/s a
 * direction), and staged with a ring of 512 KiB is 1.4-2x the single copy
 * at 8-16 MiB (the kernel's copy of ordinary pages, _copy_to_iter, is half
 * of the single copy's time there, pinning the pages ~15 %); chunks of 16
 * KiB (a ring of 64 KiB) lose that.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Alignas(64) _Atomic uint64_t head; /* chunks this process staged */
    _Alignas(64) _Atomic uint64_t tail; /* the peer's chunks this process took */
    _Alignas(64) _Atomic uint64_t bar;  /* barrier epoch */
    _Alignas(64) uint64_t addr;         /* send buffer, for process_vm_readv */
    int pid;
} ctl_t;

static size_t N, C = 65536;
static int D = 4, IT, MODE, NT, memfd[2];
static char *shm;
static ctl_t *ctl[2];

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static char *ring_of(int who) { return shm + 2 * 4096 + (size_t)who * (size_t)D * C; }

static void barrier(int me, uint64_t *epoch)
{
    uint64_t e = ++*epoch;
    atomic_store(&ctl[me]->bar, e);
    while (atomic_load(&ctl[!me]->bar) < e) _mm_pause();
}

/* memcpy, or with streaming stores (then fenced). */
static void copy(int stream, char *d, const char *s, size_t n)
{
    if (!stream) {
        memcpy(d, s, n);
        return;
    }
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 256 <= n; i += 256)
        for (int k = 0; k < 4; k++)
            _mm512_stream_si512((void *)(d + i + 64 * k), _mm512_loadu_si512(s + i + 64 * k));
#endif
    memcpy(d + i, s + i, n - i);
    _mm_sfence();
}

static void exchange_cma(int me, char *rb, size_t piece)
{
    for (size_t off = 0; off < N; off += piece) {
        size_t len = N - off < piece ? N - off : piece;
        struct iovec l = {rb + off, len}, r = {(void *)(uintptr_t)(ctl[!me]->addr + off), len};
        if (process_vm_readv(ctl[!me]->pid, &l, 1, &r, 1, 0) != (ssize_t)len) {
            perror("process_vm_readv");
            exit(1);
        }
    }
}

static void exchange_staged(int me, const char *sb, char *rb, uint64_t *w, uint64_t *r)
{
    uint64_t nch = (N + C - 1) / C, w0 = *w, r0 = *r;
    char *mine = ring_of(me), *peer = ring_of(!me);
    while (*w < w0 + nch || *r < r0 + nch) {
        int moved = 0;
        if (*w < w0 + nch &&
            *w - atomic_load_explicit(&ctl[!me]->tail, memory_order_acquire) < (uint64_t)D) {
            size_t off = (*w - w0) * C, len = N - off < C ? N - off : C;
            copy(NT & 1, mine + (*w % (uint64_t)D) * C, sb + off, len);
            atomic_store_explicit(&ctl[me]->head, *w + 1, memory_order_release);
            ++*w, moved = 1;
        }
        if (*r < r0 + nch && atomic_load_explicit(&ctl[!me]->head, memory_order_acquire) > *r) {
            size_t off = (*r - r0) * C, len = N - off < C ? N - off : C;
            copy(NT & 2, rb + off, peer + (*r % (uint64_t)D) * C, len);
            atomic_store_explicit(&ctl[me]->tail, *r + 1, memory_order_release);
            ++*r, moved = 1;
        }
        if (!moved) _mm_pause();
    }
}

static void run(int me)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me, &set);
    sched_setaffinity(0, sizeof set, &set);
    char *sb = aligned_alloc(4096, N), *rb = aligned_alloc(4096, N), *peer_sb = NULL;
    if (MODE == 3) {
        sb = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_SHARED, memfd[me], 0);
        peer_sb = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd[!me], 0);
        if (sb == MAP_FAILED || peer_sb == MAP_FAILED) exit(1);
    } else if (MODE == 4 || MODE == 7) {
        size_t big = (N + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
        sb = aligned_alloc(2u << 20, big);
        madvise(sb, big, MADV_HUGEPAGE);
        if (MODE == 7) {
            rb = aligned_alloc(2u << 20, big);
            madvise(rb, big, MADV_HUGEPAGE);
        }
    }
    memset(sb, me + 1, N);
    for (int b = 0; b < (MODE == 6 ? 2 : MODE == 5 ? 1 : 0); b++) {
        char *buf = b ? rb : sb;
        uintptr_t lo = ((uintptr_t)buf + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
        uintptr_t hi = ((uintptr_t)buf + N) & ~(uintptr_t)((2u << 20) - 1);
        double t0 = now_us();
        int rc = hi > lo ? madvise((void *)lo, hi - lo, 25 /* MADV_COLLAPSE */) : -1;
        if (me == 0)
            printf("rank %d: MADV_COLLAPSE of %zu bytes: %d (%s), %.1f us\n", me,
                   (size_t)(hi > lo ? hi - lo : 0), rc, rc ? strerror(errno) : "ok", now_us() - t0);
    }
    memset(rb, 0, N);
    ctl[me]->addr = (uint64_t)(uintptr_t)sb;
    ctl[me]->pid = getpid();
    uint64_t epoch = 0, w = 0, r = 0;
    barrier(me, &epoch);
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_us();
        for (int it = 0; it < IT; it++) {
            if (MODE == 1) {
                exchange_staged(me, sb, rb, &w, &r);
            } else if (MODE == 3) {
                memcpy(rb, peer_sb, N);
                barrier(me, &epoch);
            } else {
                exchange_cma(me, rb, MODE == 2 ? C : N);
                barrier(me, &epoch);
            }
        }
        double t = (now_us() - t0) / IT;
        if (me == 0)
            printf("mode %d N %zu C %zu D %d NT %d: %.2f us, %.2f GB/s a direction\n", MODE, N, C,
                   D, NT, t, (double)N / t / 1e3);
        barrier(me, &epoch);
    }
    if (rb[0] != (char)(!me + 1) || rb[N - 1] != (char)(!me + 1)) printf("wrong data\n");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s N MODE [C D NT]\n", argv[0]);
        return 2;
    }
    N = (size_t)atol(argv[1]);
    MODE = atoi(argv[2]);
    if (argc > 3) C = (size_t)atol(argv[3]);
    if (argc > 4) D = atoi(argv[4]);
    if (argc > 5) NT = atoi(argv[5]);
    if (!N || !C || D < 1) return 2;
    IT = (int)(400000000 / N + 5);
    size_t bytes = 2 * 4096 + 2 * (size_t)D * C;
    shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED) return 1;
    memset(shm, 0, bytes);
    ctl[0] = (ctl_t *)shm;
    ctl[1] = (ctl_t *)(shm + 4096);
    for (int i = 0; i < 2; i++) {
        memfd[i] = memfd_create("duplex", 0);
        if (memfd[i] < 0 || ftruncate(memfd[i], (off_t)N)) return 1;
    }
    pid_t p = fork();
    if (p == 0) {
        run(1);
        _exit(0);
    }
    run(0);
    waitpid(p, NULL, 0);
    return 0;
}
