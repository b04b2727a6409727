/*
 * test_bcast.c -- the specification of xc_bcast, for every root.
 *
 * The root's buf is copied, bitwise, into buf of every rank (always in
 * place).  Inputs are random bit patterns of the dtype's width.  For every
 * dtype x count x root: every rank's buf equals the root's regenerated input
 * (the root's own buf is unchanged), nothing is written past buf, and
 * xc_comm_stats counts exactly the calls.  An out-of-range root is rejected
 * with XC_ERR_INVALID.
 *
 * Interleaved: a root's description check with a late right neighbour is
 * deferred to a later shared-memory operation; 31 alltoallv (which do not
 * run in shared memory) between two such broadcasts must not make the
 * check compare against a description entry already overwritten.
 *
 * Stream: 3000 back-to-back broadcasts, roots rotating, 4 B to 800 B (the
 * flagged lines' express path up to 664 B, and ring entries in the slots
 * past it), each checked; then the root runs a ring's depth (8) of
 * broadcasts ahead and sends rank 1 a message that rank 1 receives before
 * it takes them: the root needs rank 1 done with the ones before, whose
 * `out` rank 1 may have deferred -- it must publish it while it waits for
 * the message (docs/shm.md "Deferred out"), or both wait for ever.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static void run_case(xc_dtype_t dt, size_t count, int root)
{
    h_case_t c = h_case("bcast", dt, H_COPY, count, -1, root);
    h_announce(&c);
    size_t bytes = count * xc_dtype_size(dt);
    char *buf = h_alloc(bytes); /* poisoned on the non-roots */
    if (H.rank == root) h_fill(&c, buf, count, root, 0);

    H_CHECK(H.comm, xc_bcast(buf, count, dt, root, H.comm));
    H.issued[XC_COLL_BCAST]++;

    h_check_copy(&c, buf, count, root, 0,
                 H.rank == root ? "root buf (must not change)" : "buf");
    h_check_guard(&c, buf, bytes, "buf");
    h_free(buf);
}

static void run_rejects(void)
{
    int32_t a[4] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_bcast(a, 4, XC_INT32, H.size, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bcast(a, 4, XC_INT32, -1, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_bcast(a, 4, XC_DTYPE_COUNT, 0, H.comm));
    H_EQ_INT("xc_comm_status after rejected calls", xc_comm_status(H.comm),
             XC_OK);
}

static void run_interleaved(void)
{
    enum { BETWEEN = 31 }; /* the next broadcast's seq lands on the same ring entry */
    size_t n = (size_t)H.size, cnt[256], dsp[256];
    int32_t sb[256], rb[256];
    for (size_t j = 0; j < n; j++) cnt[j] = 1, dsp[j] = j, sb[j] = H.rank;
    for (int round = 0; round < 2; round++) {
        if (H.rank == 1) { /* late: rank 0, the root, defers its check */
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        int32_t v[3] = {0, 0, 0};
        if (H.rank == 0) v[0] = 11 + round, v[1] = 22, v[2] = 33;
        H_CHECK(H.comm, xc_bcast(v, 3, XC_INT32, 0, H.comm));
        H.issued[XC_COLL_BCAST]++;
        H_EQ_INT("interleaved bcast v[0]", v[0], 11 + round);
        H_EQ_INT("interleaved bcast v[2]", v[2], 33);
        for (int i = 0; i < BETWEEN; i++) {
            H_CHECK(H.comm, xc_alltoallv(sb, cnt, dsp, rb, cnt, dsp, XC_INT32, H.comm));
            H.issued[XC_COLL_ALLTOALLV]++;
            for (size_t j = 0; j < n; j++) H_EQ_INT("interleaved alltoallv", rb[j], (int)j);
        }
    }
}

static void run_stream(void)
{
    int32_t v[201];
    for (int it = 0; it < 3000; it++) {
        int root = it % H.size;
        size_t n = 1 + (size_t)(it * 7) % 200;
        for (size_t i = 0; i <= n; i++) v[i] = H.rank == root ? it * 1000 + (int)i : -1;
        H_CHECK(H.comm, xc_bcast(v, n, XC_INT32, root, H.comm));
        H.issued[XC_COLL_BCAST]++;
        for (size_t i = 0; i < n; i++) H_EQ_INT("stream bcast", v[i], it * 1000 + (int)i);
        H_EQ_INT("stream bcast: past the count", v[n], H.rank == root ? it * 1000 + (int)n : -1);
    }
    /* Only the shared-memory broadcast promises a ring's depth of run-ahead
     * (over TCP a root may wait for its readers, as MPI allows): does a
     * 4-byte broadcast run as bcast.shm here?  (The algorithm choice is the
     * same on every rank.) */
    int shm_id = -1;
    for (int id = 0; id < XC_STATS_MAX_ALGOS; id++)
        if (xc_algo_name(id) && !strcmp(xc_algo_name(id), "bcast.shm")) shm_id = id;
    xc_stats_t s0, s1;
    memset(&s0, 0, sizeof s0);
    memset(&s1, 0, sizeof s1);
    s0.size = s1.size = sizeof s0;
    int32_t probe = 1;
    H_CHECK(H.comm, xc_comm_stats(H.comm, &s0));
    H_CHECK(H.comm, xc_bcast(&probe, 1, XC_INT32, 0, H.comm));
    H.issued[XC_COLL_BCAST]++;
    H_CHECK(H.comm, xc_comm_stats(H.comm, &s1));
    if (shm_id < 0 || s1.algo_ops[shm_id] == s0.algo_ops[shm_id]) return;
    /* ... through a ring entry, not single copy (whose root waits for every
     * reader: XCOLL_SHM_CMA_MIN_KB=0 makes 4 bytes single copy). */
    const char *cma = getenv("XCOLL_SHM_CMA_MIN_KB");
    if (cma && atoi(cma) == 0) return;
    enum { DEPTH = 8, TAG = 77 };
    int32_t tok = 5;
    if (H.rank == 1) {
        H_CHECK(H.comm, xc_recv(&tok, 1, XC_INT32, 0, TAG, H.comm));
        H_EQ_INT("token behind the broadcasts", tok, 6);
    }
    for (int k = 0; k < DEPTH; k++) {
        int32_t w = H.rank == 0 ? 100 + k : 0;
        H_CHECK(H.comm, xc_bcast(&w, 1, XC_INT32, 0, H.comm));
        H.issued[XC_COLL_BCAST]++;
        H_EQ_INT("ahead bcast", w, 100 + k);
    }
    if (H.rank == 0) {
        tok = 6;
        H_CHECK(H.comm, xc_send(&tok, 1, XC_INT32, 1, TAG, H.comm));
    }
    if (H.rank <= 1) H.issued[H.rank == 0 ? XC_COLL_SEND : XC_COLL_RECV]++;
}

int main(int argc, char **argv)
{
    /* XCOLL_TEST_COOP_MIXED=1: odd ranks ask for the cooperative
     * broadcast, even ones not -- the root's setting decides, the readers
     * follow the share it publishes (shm_bcast.c). */
    if (getenv("XCOLL_TEST_COOP_MIXED")) {
        const char *r = getenv("XCOLL_RANK");
        setenv("XCOLL_SHM_COOP", r && atoi(r) % 2 ? "1" : "0", 1);
    }
    h_init(argc, argv);
    run_rejects();
    if (H.size <= 256) run_interleaved();
    if (H.size >= 2) run_stream();
    for (h_cell_t c = {0}; h_next_cell(&c, 0);)
        for (int root = 0; root < H.size; root++)
            run_case(c.dt, c.count, root);
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    return h_finish();
}
