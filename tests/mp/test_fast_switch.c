/*
 * test_fast_switch.c -- large all-gathers and all-to-alls switch between
 * staging and single copy together (src/algo/shm_coll.c xc__shm_op_offer).
 *
 * A staged operation is offered single copy for when every rank's input
 * is on huge pages; the ranks switch at the start of an operation from
 * what each published in the one before it.  Checked here, with 1 MiB
 * blocks refilled at every iteration:
 *  - reused buffers (slices of larger written mappings, as tensors'
 *    views are): the results are right at every iteration, and (two
 *    ranks with a core each, where huge pages can be had) the last
 *    iterations read single copy -- xc_stats_t.single_copy_bytes grows by
 *    exactly the peers' blocks;
 *  - one rank alternating its reused buffer with a fresh mapping at every
 *    other iteration (its input fast, then not): still right everywhere,
 *    and at every iteration every rank took the same way -- all read
 *    single copy or none did;
 *  - a small all-gather before each large one: never a switch (the
 *    operation before is not like it), with XCOLL_SHM_CMA_MAX_KB below the
 *    block;
 *  - two non-blocking ones posted together into two outputs: right, agreed,
 *    and the last pair both single copy.
 * With more ranks than cores nothing is offered (staged there); the
 * results must still be right.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define BLOCK_INTS ((size_t)1 << 18) /* 1 MiB blocks */
#define ITERS 10

static uint64_t single_copy_bytes(void)
{
    xc_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    H_CHECK(H.comm, xc_comm_stats(H.comm, &s));
    return s.single_copy_bytes;
}

static int32_t val(int from, int to, int it, size_t i)
{
    return (int32_t)(h_mix64(((uint64_t)from << 48) ^ ((uint64_t)to << 40) ^
                             ((uint64_t)it << 32) ^ i) &
                     0x7fffffff);
}

/* Whether this machine can put a written page on a huge page now. */
static int can_collapse(void)
{
    size_t huge = (size_t)2 << 20;
    char *m = mmap(NULL, 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    char *p = (char *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
    memset(p, 1, huge);
    int ok = madvise(p, huge, MADV_COLLAPSE) == 0;
    munmap(m, 2 * huge);
    return ok;
}

/* Whether a rank may read another's memory: Yama's ptrace scope 0 or 1. */
static int may_read_peers(void)
{
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;
    if (f) {
        if (fscanf(f, "%d", &scope) != 1) scope = 0;
        fclose(f);
    }
    return scope <= 1;
}

/* A buffer of `bytes` inside a larger mapping that is all written, as a
 * slice of a bigger tensor is (so that the huge pages it shares with the
 * rest can be collapsed: core/promote.c), starting 4 KiB + 16 past a 2 MiB
 * boundary.  *base, *span: what to unmap. */
static int32_t *slice(size_t bytes, void **base, size_t *span)
{
    size_t huge = (size_t)2 << 20;
    *span = bytes + 3 * huge;
    char *m = mmap(NULL, *span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) h_fail(__FILE__, __LINE__, "mmap of %zu bytes failed", *span);
    memset(m, 0x5a, *span);
    *base = m;
    return (int32_t *)(((uintptr_t)m + huge - 1) / huge * huge + 4096 + 16);
}

/* The kinds of series. */
enum { PLAIN, FLIP, BETWEEN, PAIRS };

/* ITERS all-gathers (alltoall = 0) or all-to-alls of 1 MiB blocks, by
 * `kind`: PLAIN one per iteration; FLIP, the last rank sends from a fresh
 * mapping at odd iterations; BETWEEN, a small all-gather before each (the
 * operation before a large one is never like it: no switch); PAIRS, two
 * non-blocking ones posted together into two outputs.  way[it]: how many
 * of the iteration's large operations this rank read single copy (-1: a
 * count of bytes that is no whole number of them). */
static void series(int alltoall, int kind, int *way)
{
    int flip = kind == FLIP;
    int L = H.size;
    size_t in_ints = alltoall ? (size_t)L * BLOCK_INTS : BLOCK_INTS;
    size_t out_ints = (size_t)L * BLOCK_INTS;
    void *keep_base;
    size_t keep_span;
    int32_t *keep = slice(in_ints * sizeof(int32_t), &keep_base, &keep_span);
    int32_t *out = h_alloc(out_ints * sizeof(int32_t));
    int32_t *out2 = h_alloc(out_ints * sizeof(int32_t));
    int32_t small[64];
    for (int it = 0; it < ITERS; it++) {
        int fresh = flip && H.rank == L - 1 && (it & 1);
        int32_t *in = keep;
        void *map = NULL;
        if (fresh) {
            map = mmap(NULL, in_ints * sizeof(int32_t), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (map == MAP_FAILED) h_fail(__FILE__, __LINE__, "mmap of a fresh input failed");
            in = map;
        }
        for (int to = 0; to < (alltoall ? L : 1); to++)
            for (size_t i = 0; i < BLOCK_INTS; i++)
                in[(size_t)to * BLOCK_INTS + i] = val(H.rank, alltoall ? to : 0, it, i);
        int32_t one = H.rank;
        if (kind == BETWEEN)
            H_CHECK(H.comm, xc_allgather(&one, small, 1, XC_INT32, H.comm));
        uint64_t before = single_copy_bytes();
        if (kind == PAIRS) {
            xc_request_t *rq[2];
            for (int q = 0; q < 2; q++) {
                int32_t *o = q ? out2 : out;
                if (alltoall)
                    H_CHECK(H.comm, xc_ialltoall(in, o, BLOCK_INTS, XC_INT32, H.comm, &rq[q]));
                else
                    H_CHECK(H.comm, xc_iallgather(in, o, BLOCK_INTS, XC_INT32, H.comm, &rq[q]));
            }
            H_CHECK(H.comm, xc_request_waitall(rq, 2));
            for (int q = 0; q < 2; q++) xc_request_free(rq[q]);
        } else if (alltoall) {
            H_CHECK(H.comm, xc_alltoall(in, out, BLOCK_INTS, XC_INT32, H.comm));
        } else {
            H_CHECK(H.comm, xc_allgather(in, out, BLOCK_INTS, XC_INT32, H.comm));
        }
        uint64_t moved = single_copy_bytes() - before;
        uint64_t peers = (uint64_t)(L - 1) * BLOCK_INTS * sizeof(int32_t);
        way[it] = moved % peers ? -1 : (int)(moved / peers);
        size_t bad = 0, first = 0;
        for (int q = 0; q < (kind == PAIRS ? 2 : 1); q++)
            for (int from = 0; from < L; from++)
                for (size_t i = 0; i < BLOCK_INTS; i++)
                    if ((q ? out2 : out)[(size_t)from * BLOCK_INTS + i] !=
                            val(from, alltoall ? H.rank : 0, it, i) &&
                        !bad++)
                        first = (size_t)from * BLOCK_INTS + i;
        if (kind == BETWEEN)
            for (int r = 0; r < L; r++)
                if (small[r] != r) bad++;
        if (bad)
            h_fail(__FILE__, __LINE__, "%s iteration %d (series %d): %zu wrong elements, the "
                   "first at %zu", alltoall ? "all-to-all" : "all-gather", it, kind, bad, first);
        if (way[it] < 0)
            h_fail(__FILE__, __LINE__, "%s iteration %d: %llu bytes single copy, want a multiple "
                   "of %llu", alltoall ? "all-to-all" : "all-gather", it,
                   (unsigned long long)moved, (unsigned long long)peers);
        if (map) munmap(map, in_ints * sizeof(int32_t));
    }
    munmap(keep_base, keep_span);
    h_free(out);
    h_free(out2);
}

/* Every rank took the same way at every iteration. */
static void agreed(const char *what, const int *way)
{
    int *all = h_alloc((size_t)H.size * ITERS * sizeof(int));
    H_CHECK(H.comm, xc_allgather(way, all, ITERS, XC_INT32, H.comm));
    for (int it = 0; it < ITERS; it++)
        for (int r = 1; r < H.size; r++)
            if (all[(size_t)r * ITERS + it] != all[it])
                h_fail(__FILE__, __LINE__,
                       "%s iteration %d: rank 0 %s, rank %d %s -- the ranks disagree", what, it,
                       all[it] ? "read single copy" : "staged", r,
                       all[(size_t)r * ITERS + it] ? "read single copy" : "staged");
    h_free(all);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    /* The machine's CPUs (the launcher may bind each rank to one). */
    int cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int expect = H.size == 2 && cpus >= 2 && can_collapse() && may_read_peers() &&
                 !getenv("XCOLL_SHM_PROMOTE") && !getenv("XCOLL_HUGEPAGES") &&
                 !getenv("XCOLL_SHM_CMA_MIN_KB") && !getenv("XCOLL_TEST_BUFFERS");
    if (H.rank == 0 && !expect)
        printf("test_fast_switch: note: %d ranks on %d CPUs%s: the switch is not required here, "
               "only right results and agreement\n",
               H.size, cpus, H.size == 2 && cpus >= 2 ? ", no huge pages or no reading peers" : "");
    int way[ITERS];
    /* Blocks above the ceiling: staged until the inputs are promoted. */
    const char *ceil = getenv("XCOLL_SHM_CMA_MAX_KB");
    int above = ceil && atoi(ceil) > 0 && (size_t)atoi(ceil) * 1024 < BLOCK_INTS * 4;
    for (int a2a = 0; a2a < 2; a2a++) {
        const char *what = a2a ? "all-to-all" : "all-gather";
        series(a2a, PLAIN, way);
        agreed(what, way);
        if (H.verbose && H.rank == 0)
            for (int it = 0; it < ITERS; it++)
                printf("test_fast_switch: %s iteration %d: %s\n", what, it,
                       way[it] ? "single copy" : "staged");
        if (expect && above && way[0] != 0)
            h_fail(__FILE__, __LINE__, "%s above XCOLL_SHM_CMA_MAX_KB=%s read single copy at "
                   "its first iteration (nothing promoted yet)", what, ceil);
        if (expect)
            for (int it = ITERS - 3; it < ITERS; it++)
                if (way[it] != 1)
                    h_fail(__FILE__, __LINE__,
                           "%s of reused inputs on huge pages, iteration %d: staged (want "
                           "single copy from the first iterations after promotion)",
                           what, it);
        series(a2a, FLIP, way);
        agreed(what, way);
        series(a2a, BETWEEN, way);
        agreed(what, way);
        if (expect && above)
            for (int it = 0; it < ITERS; it++)
                if (way[it] != 0)
                    h_fail(__FILE__, __LINE__, "%s iteration %d after a small all-gather read "
                           "single copy (the operation before it was not like it)", what, it);
        series(a2a, PAIRS, way);
        agreed(what, way);
        if (expect && above && way[ITERS - 1] != 2)
            h_fail(__FILE__, __LINE__, "%s posted in pairs: %d of the last pair single copy, "
                   "want 2", what, way[ITERS - 1]);
    }
    return h_finish();
}
