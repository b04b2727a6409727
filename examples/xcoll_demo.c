/*
 * xcoll_demo.c -- the README's main job: every collective once, verified,
 * with a short table of what ran and how long it took.
 *
 *   xcoll-run -n 4 ./xcoll_demo [count]
 *
 * Each rank fills its inputs from its rank number, runs the collective,
 * and checks the result against the value every rank can compute alone.
 * Rank 0 prints the table; any wrong element makes the program exit 1.
 */
#include <xcoll.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static xc_comm_t *comm;
static int rank, size, failures;

#define CHECK(call)                                                            \
    do {                                                                       \
        xc_result_t rc_ = (call);                                              \
        if (rc_ != XC_OK) {                                                    \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, #call,       \
                    xc_err_name(rc_), xc_comm_last_error(comm));               \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Report one row: agree on the slowest rank's time and on correctness. */
static void row(const char *name, size_t bytes, double us, int ok)
{
    double t[2] = {us, ok ? 0.0 : 1.0};
    CHECK(xc_allreduce(t, t, 2, XC_FLOAT64, XC_MAX, comm));
    if (t[1] != 0.0) failures++;
    if (rank == 0)
        printf("  %-16s %12zu %12.1f   %s\n", name, bytes, t[0], t[1] == 0.0 ? "ok" : "WRONG");
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1 << 18;
    CHECK(xc_comm_init_env(&comm, NULL));
    rank = xc_comm_rank(comm);
    size = xc_comm_size(comm);
    if (rank == 0)
        printf("xcoll %s demo: %d ranks on %d node(s), %zu fp32 elements per buffer\n\n"
               "  %-16s %12s %12s   %s\n",
               xc_version_string(), size, xc_comm_node_count(comm), n, "collective",
               "bytes/rank", "time (us)", "check");

    size_t N = n * (size_t)size;
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    if (!a || !b) return 1;
    double t;
    int ok;

    /* allreduce: sum over ranks of (rank + 1) * (i % 7) */
    for (size_t i = 0; i < n; i++) a[i] = (float)((rank + 1) * (int)(i % 7));
    t = now_us();
    CHECK(xc_allreduce(a, b, n, XC_FLOAT32, XC_SUM, comm));
    t = now_us() - t;
    ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= b[i] == (float)(size * (size + 1) / 2 * (int)(i % 7));
    row("allreduce", n * 4, t, ok);

    /* reduce_scatter: rank r gets block r of the sum */
    for (size_t i = 0; i < N; i++) a[i] = (float)(rank + (int)(i % 5));
    t = now_us();
    CHECK(xc_reduce_scatter(a, b, n, XC_FLOAT32, XC_SUM, comm));
    t = now_us() - t;
    ok = 1;
    for (size_t i = 0; i < n; i++) {
        size_t gi = (size_t)rank * n + i;
        ok &= b[i] == (float)(size * (size - 1) / 2 + size * (int)(gi % 5));
    }
    row("reduce_scatter", N * 4, t, ok);

    /* allgather: block r holds r */
    for (size_t i = 0; i < n; i++) a[i] = (float)rank;
    t = now_us();
    CHECK(xc_allgather(a, b, n, XC_FLOAT32, comm));
    t = now_us() - t;
    ok = 1;
    for (size_t i = 0; i < N; i++) ok &= b[i] == (float)(i / n);
    row("allgather", n * 4, t, ok);

    /* reduce to the last rank: max of ranks */
    int root = size - 1;
    for (size_t i = 0; i < n; i++) a[i] = (float)(rank * 2);
    t = now_us();
    CHECK(xc_reduce(a, b, n, XC_FLOAT32, XC_MAX, root, comm));
    t = now_us() - t;
    ok = 1;
    if (rank == root)
        for (size_t i = 0; i < n; i++) ok &= b[i] == (float)((size - 1) * 2);
    row("reduce", n * 4, t, ok);

    /* bcast from rank 0 */
    for (size_t i = 0; i < n; i++) a[i] = rank == 0 ? (float)(i % 11) : -1.0f;
    t = now_us();
    CHECK(xc_bcast(a, n, XC_FLOAT32, 0, comm));
    t = now_us() - t;
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= a[i] == (float)(i % 11);
    row("bcast", n * 4, t, ok);

    /* alltoall: block j of rank r holds r*1000 + j */
    for (size_t i = 0; i < N; i++) a[i] = (float)(rank * 1000 + (int)(i / n));
    t = now_us();
    CHECK(xc_alltoall(a, b, n, XC_FLOAT32, comm));
    t = now_us() - t;
    ok = 1;
    for (size_t i = 0; i < N; i++) ok &= b[i] == (float)((int)(i / n) * 1000 + rank);
    row("alltoall", N * 4, t, ok);

    /* send/recv around the ring, as a group */
    for (size_t i = 0; i < n; i++) a[i] = (float)rank;
    t = now_us();
    CHECK(xc_group_start());
    CHECK(xc_send(a, n, XC_FLOAT32, (rank + 1) % size, 7, comm));
    CHECK(xc_recv(b, n, XC_FLOAT32, (rank + size - 1) % size, 7, comm));
    CHECK(xc_group_end());
    t = now_us() - t;
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= b[i] == (float)((rank + size - 1) % size);
    row("sendrecv (ring)", n * 4, t, ok);

    t = now_us();
    CHECK(xc_barrier(comm));
    t = now_us() - t;
    row("barrier", 0, t, 1);

    if (rank == 0) printf("\n%s\n", failures ? "FAILED" : "all collectives verified");
    free(a);
    free(b);
    xc_comm_destroy(comm);
    return failures ? 1 : 0;
}
