/*
 * test_env_mix.c -- settings that must agree across ranks, given differently.
 *
 * Usage: test_env_mix SCENARIO, one of
 *   shm      3 ranks on one node; rank 1 alone has XCOLL_SHM=0.  Creation
 *            succeeds on every rank and every rank uses TCP (no shared-
 *            memory bytes, TCP bytes for a 1 MiB all-reduce, which is
 *            right); rank 0 warns.  Before 2026-12-06 every rank's
 *            xc_comm_init failed with a MISMATCH naming no setting (rank 1
 *            skipped the shared-memory set-up's collectives).
 *   crowded  3 ranks; rank 2 alone has XCOLL_NODE_CROWDED=0.  The ranks
 *            fall back to what all compute alike; reduces and all-reduces
 *            of 8 B-4 MiB are right (a difference would put ranks on
 *            different paths of one collective).
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *scenario;

static int check_sums(xc_comm_t *comm, int rank, int size)
{
    const size_t max = (size_t)1 << 20; /* floats: 4 MiB */
    float *a = malloc(max * sizeof *a), *b = malloc(max * sizeof *b);
    if (!a || !b) return 1;
    for (size_t i = 0; i < max; i++) a[i] = (float)(rank + 1 + (int)(i % 7));
    for (size_t n = 2; n <= max; n *= 16) {
        for (int root = 0; root < size; root += 2) {
            memset(b, 0, n * sizeof *b);
            XT_CHECK_RC(xc_reduce(a, b, n, XC_FLOAT32, XC_SUM, root, comm), XC_OK);
            if (rank == root)
                for (size_t i = 0; i < n; i += n / 2 + 1)
                    XT_CHECK_DBL((double)b[i], ==,
                                 (double)(size * (size + 1) / 2 + size * (int)(i % 7)));
        }
        XT_CHECK_RC(xc_allreduce(a, b, n, XC_FLOAT32, XC_SUM, comm), XC_OK);
        for (size_t i = 0; i < n; i += n / 3 + 1)
            XT_CHECK_DBL((double)b[i], ==, (double)(size * (size + 1) / 2 + size * (int)(i % 7)));
    }
    free(a);
    free(b);
    return 0;
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (!strcmp(scenario, "shm") && rank == 1) setenv("XCOLL_SHM", "0", 1);
    if (!strcmp(scenario, "crowded") && rank == 2) setenv("XCOLL_NODE_CROWDED", "0", 1);
    xc_comm_t *comm = xt_comm_world(-1);
    if (!comm) return 1;
    if (check_sums(comm, rank, size)) return 1;
    if (!strcmp(scenario, "shm")) {
        xc_stats_t st = {.size = sizeof st};
        XT_CHECK_RC(xc_comm_stats(comm, &st), XC_OK);
        xt_log("bytes sent: shm %llu, tcp %llu",
               (unsigned long long)st.bytes_sent[XC_TRANSPORT_SHM],
               (unsigned long long)st.bytes_sent[XC_TRANSPORT_TCP]);
        XT_CHECK_INT((long long)st.bytes_sent[XC_TRANSPORT_SHM], ==, 0);
        XT_CHECK_INT((long long)(st.bytes_sent[XC_TRANSPORT_TCP] > 0), ==, 1);
    }
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    return xt_result();
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"shm", "crowded"};
    scenario = XT_SCENARIO(argc, argv, known);
    xt_init(argv[0], scenario);
    xt_job_t job;
    if (xt_job_start(&job, 3, rank_main, NULL, 20000, 60) != 0) return 1;
    return xt_job_finish(&job, 70);
}
