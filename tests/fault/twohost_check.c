/*
 * twohost_check.c -- one rank of the two-"host" job run by netns.sh.
 *
 * Usage (environment from the script: XCOLL_RANK, XCOLL_SIZE, XCOLL_ADDR):
 *   twohost_check NODES LOCAL_SIZE
 * Checks that the communicator sees NODES nodes with LOCAL_SIZE ranks each
 * (network namespaces count as hosts), that the node indices and local
 * ranks gathered from every rank are consistent (ranks of one node share an
 * index, local ranks are 0..LOCAL_SIZE-1 in rank order), and that allreduce,
 * allgather, alltoall and a bcast give exact results across the hosts.
 * Prints "node_count=N local_size=L" for the script.  Exit 0 = pass.
 *
 *   twohost_check NODES LOCAL_SIZE partition
 * After those checks, loops on 1 MiB all-reduces, printing "looping" once
 * 20 have completed; the script then takes the link between the hosts
 * down.  Every rank must fail (XC_ERR_PEER_LOST or XC_ERR_TIMEOUT, a
 * readable message) within the liveness timeout + 5 s of its last
 * completed all-reduce -- an error, never a hang.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 65536 /* elements: large enough for several TCP segments */

int main(int argc, char **argv)
{
    int partition = argc == 4 && strcmp(argv[3], "partition") == 0;
    if (argc != 3 && !partition) {
        fprintf(stderr, "usage: %s NODES LOCAL_SIZE [partition]\n", argv[0]);
        return 2;
    }
    int want_nodes = atoi(argv[1]), want_local = atoi(argv[2]);
    xt_init(argv[0], NULL);
    const char *rs = getenv("XCOLL_RANK");
    xt_set_tag("rank %s", rs ? rs : "?");
    alarm(60);

    xc_comm_t *comm = xt_comm_world(20000);
    if (!comm) return 1;
    int rank = xc_comm_rank(comm), size = xc_comm_size(comm);
    int nodes = xc_comm_node_count(comm), lsize = xc_comm_local_size(comm);
    printf("rank=%d node=%d node_count=%d local_rank=%d local_size=%d\n",
           rank, xc_comm_node(comm), nodes, xc_comm_local_rank(comm), lsize);
    XT_CHECK_INT(nodes, ==, want_nodes);
    XT_CHECK_INT(lsize, ==, want_local);

    /* Topology as seen by everyone: [node, local_rank] per rank. */
    int32_t me[2] = {xc_comm_node(comm), xc_comm_local_rank(comm)};
    int32_t *all = calloc((size_t)size * 2, sizeof *all);
    if (!all) return 1;
    XT_CHECK_RC(xc_allgather(me, all, 2, XC_INT32, comm), XC_OK);
    for (int r = 0; r < size; r++) {
        /* The script places ranks in blocks of LOCAL_SIZE per namespace. */
        int node_of = want_local > 0 ? r / want_local : 0;
        int same = all[2 * r] == all[2 * (node_of * want_local)];
        XT_CHECK_INT(same, ==, 1);
        XT_CHECK_INT(all[2 * r + 1], ==, r % want_local);
        XT_CHECK_INT(all[2 * r], >=, 0);
        XT_CHECK_INT(all[2 * r], <, want_nodes);
        if (r >= want_local) /* a different node from rank 0's */
            XT_CHECK_INT(all[2 * r] != all[0], ==, 1);
    }

    /* allreduce (fp32 sum, exact small integers) */
    float *f = malloc(N * sizeof *f);
    int64_t *a2a_in = malloc((size_t)size * 1024 * sizeof *a2a_in);
    int64_t *a2a_out = malloc((size_t)size * 1024 * sizeof *a2a_out);
    int32_t *g = malloc((size_t)size * N * sizeof *g);
    int32_t *gi = malloc(N * sizeof *gi);
    if (!f || !a2a_in || !a2a_out || !g || !gi) return 1;
    for (int k = 0; k < N; k++) f[k] = (float)(rank + 1 + (k % 8));
    XT_CHECK_RC(xc_allreduce(f, f, N, XC_FLOAT32, XC_SUM, comm), XC_OK);
    for (int k = 0; k < N; k += 31)
        if (!XT_CHECK_DBL(f[k], ==, size * (size + 1) / 2 + size * (k % 8)))
            break;

    /* allgather */
    for (int k = 0; k < N; k++) gi[k] = rank * 100000 + k;
    XT_CHECK_RC(xc_allgather(gi, g, N, XC_INT32, comm), XC_OK);
    for (int r = 0; r < size; r++)
        for (int k = 0; k < N; k += 257)
            if (!XT_CHECK_INT(g[(size_t)r * N + k], ==, r * 100000 + k))
                break;

    /* alltoall: block j from rank i holds i*1000 + j */
    for (int j = 0; j < size; j++)
        for (int k = 0; k < 1024; k++)
            a2a_in[j * 1024 + k] = (int64_t)rank * 1000 + j + k * 1000000ll;
    XT_CHECK_RC(xc_alltoall(a2a_in, a2a_out, 1024, XC_INT64, comm), XC_OK);
    for (int i = 0; i < size; i++)
        for (int k = 0; k < 1024; k += 101)
            if (!XT_CHECK_INT(a2a_out[i * 1024 + k], ==,
                              (int64_t)i * 1000 + rank + k * 1000000ll))
                break;

    /* bcast from the last rank (on the other host from rank 0) */
    int32_t v[16];
    for (int k = 0; k < 16; k++) v[k] = rank == size - 1 ? 4242 + k : -1;
    XT_CHECK_RC(xc_bcast(v, 16, XC_INT32, size - 1, comm), XC_OK);
    for (int k = 0; k < 16; k++)
        if (!XT_CHECK_INT(v[k], ==, 4242 + k)) break;

    printf("node_count=%d local_size=%d\n", nodes, lsize);
    fflush(stdout);
    if (partition) {
        /* 1 MiB per all-reduce: until the link goes down. */
        static float big[256 * 1024];
        for (int k = 0; k < 256 * 1024; k++) big[k] = 1.0f;
        xc_result_t rc = XC_OK;
        double last = xt_now();
        const char *lv = getenv("XCOLL_LIVENESS_MS");
        double bound = (lv ? atof(lv) / 1000.0 : 60.0) + 5.0;
        for (int it = 0; it < 1000000 && rc == XC_OK; it++) {
            rc = xc_allreduce(big, big, 256 * 1024, XC_FLOAT32, XC_MAX, comm);
            if (rc != XC_OK) break;
            last = xt_now();
            if (it == 19) {
                printf("looping\n");
                fflush(stdout);
            }
        }
        double after = xt_now() - last;
        const char *msg = xc_comm_last_error(comm);
        printf("partition: %s %.2f s after the last all-reduce: %s\n", xc_err_name(rc), after, msg);
        fflush(stdout);
        XT_CHECK_INT(rc == XC_ERR_PEER_LOST || rc == XC_ERR_TIMEOUT, ==, 1);
        XT_CHECK_DBL(after, <, bound);
        XT_CHECK_READABLE(msg);
        xc_comm_destroy(comm);
        free(f);
        free(a2a_in);
        free(a2a_out);
        free(g);
        free(gi);
        free(all);
        xt_log("%s", xt_failures ? "FAILED" : "passed");
        return xt_result();
    }
    XT_CHECK_RC(xc_barrier(comm), XC_OK);
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    free(f);
    free(a2a_in);
    free(a2a_out);
    free(g);
    free(gi);
    free(all);
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
