/*
 * test_idle.c -- a rank waiting for a late peer costs (almost) no CPU.
 *
 * The waiting policy (docs/shm.md, "Waiting"): spin briefly, yield, then
 * sleep on the rank's bell, and the spin and yield budgets start over
 * whenever the waiting rank itself publishes (its operation moved).  A
 * wait that moves nothing must still end up asleep: here the last rank
 * arrives LATE_MS late at each collective, and every other rank's process
 * (caller and progress thread) must have used at most a fifth of the wall
 * time of its wait -- spinning or yielding throughout would use all of it.
 * The call's own work (the same call timed with nobody late) is not the
 * wait's and is subtracted.
 * Small and large (chunked, single-copy where the node allows) operations,
 * with the late rank as the root and as a reader; every result is checked.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LATE_MS 600

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef enum { BCAST, ALLREDUCE, REDUCE, BARRIER } kind_t;
static const char *const kind_name[] = {"broadcast", "all-reduce", "reduce", "barrier"};

/* One call of `kind` on the filled buffers, the last rank `late_ms` late:
 * its wall time on this rank (returned) and CPU time (*cpu). */
static double timed_call(kind_t kind, size_t count, int root, const float *in, float *out,
                         int late_ms, double *cpu)
{
    H_CHECK(H.comm, xc_barrier(H.comm));
    if (H.rank == H.size - 1 && late_ms) usleep((useconds_t)late_ms * 1000);
    double w0 = h_now(), c0 = cpu_now();
    switch (kind) {
    case BCAST:
        if (H.rank == root) memcpy(out, in, count * sizeof *in);
        H_CHECK(H.comm, xc_bcast(out, count, XC_FLOAT32, root, H.comm));
        break;
    case ALLREDUCE:
        H_CHECK(H.comm, xc_allreduce(in, out, count, XC_FLOAT32, XC_SUM, H.comm));
        break;
    case REDUCE:
        H_CHECK(H.comm, xc_reduce(in, out, count, XC_FLOAT32, XC_SUM, root, H.comm));
        break;
    case BARRIER:
        H_CHECK(H.comm, xc_barrier(H.comm));
        break;
    }
    *cpu = cpu_now() - c0;
    return h_now() - w0;
}

/* One collective of `count` floats where the last rank arrives late;
 * `root` for the rooted ones.  Checks the result and, on the others, the
 * CPU used while waiting: the call's own work (the same call with nobody
 * late, timed just before: a 16 MiB all-reduce over TCP under a sanitizer
 * costs a hundred ms of CPU by itself) is not the wait's. */
static void late_call(kind_t kind, size_t count, int root)
{
    int late = H.size - 1;
    float *in = h_alloc((count ? count : 1) * sizeof *in);
    float *out = h_alloc((count ? count : 1) * sizeof *out);
    for (size_t i = 0; i < count; i++) in[i] = (float)(H.rank + 1) + (float)(i % 7);
    double cpu, work_cpu;
    timed_call(kind, count, root, in, out, 0, &work_cpu);
    for (size_t i = 0; i < count; i++) out[i] = -1.0f;
    double wall = timed_call(kind, count, root, in, out, LATE_MS, &cpu);
    /* The result (sums of small integers: exact in fp32). */
    size_t bad = 0;
    float ranks = (float)H.size * (float)(H.size + 1) / 2;
    for (size_t i = 0; i < count && kind != BARRIER; i++) {
        float want;
        if (kind == BCAST) want = (float)(root + 1) + (float)(i % 7);
        else if (kind == REDUCE && H.rank != root) want = -1.0f;
        else want = ranks + (float)H.size * (float)(i % 7);
        bad += out[i] != want;
    }
    char what[160];
    snprintf(what, sizeof what, "%s of %zu floats (root %d, rank %d late): wrong elements",
             kind_name[kind], count, root, late);
    H_EQ_U64(what, bad, 0);
    /* A rank that need not wait for the late one (a small broadcast's root,
     * a small reduce's non-roots: they stage and return) has no wait to
     * judge; one that must (every rank the late one feeds) has. */
    int must_wait = H.rank != late && (kind != BCAST || root == late) &&
                    (kind != REDUCE || H.rank == root);
    if (must_wait) {
        snprintf(what, sizeof what,
                 "%s of %zu floats (root %d) waited %.0f ms for a rank %d ms late and used "
                 "%.0f ms of CPU, %.0f ms beyond the same call with nobody late (at most a fifth)",
                 kind_name[kind], count, root, wall * 1e3, LATE_MS, cpu * 1e3,
                 (cpu - work_cpu) * 1e3);
        H_TRUE(what, wall > 0.5 * LATE_MS * 1e-3 && cpu - work_cpu <= 0.2 * wall);
    }
    h_free(in);
    h_free(out);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    if (H.size < 2) {
        printf("[%d] test_idle: nothing to wait for on 1 rank\n", H.rank);
        return h_finish();
    }
    int late = H.size - 1;
    size_t big = (size_t)4 << 20; /* 16 MiB of floats: many chunks */
    late_call(BCAST, 2, 0);
    late_call(BCAST, 2, late);
    late_call(BCAST, big, 0);
    late_call(BCAST, big, late);
    late_call(ALLREDUCE, 2, -1);
    late_call(ALLREDUCE, big, -1);
    late_call(REDUCE, 2, late);
    late_call(REDUCE, big, 0);
    late_call(BARRIER, 0, -1);
    return h_finish();
}
