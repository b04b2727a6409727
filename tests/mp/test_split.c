/*
 * test_split.c -- the specification of xc_comm_split and of the topology
 * queries.
 *
 * A split groups the ranks of the parent by color and orders each group by
 * (key, parent rank); XC_COLOR_NONE takes part but gets NULL.  Each child is
 * checked three ways: its rank and size, the list of its members' world
 * ranks (allgathered on the child, so the child must work), and an
 * allreduce on it.  Cases:
 *   parity      color rank % 2, key rank;
 *   reversed    one color, key size - rank: child rank = size - 1 - rank;
 *   blocks      color rank / 3, equal keys: ordered by parent rank;
 *   none        rank 0 passes XC_COLOR_NONE, the others one color;
 *   nested      the parity child split again by its own rank parity;
 *   concurrent  two children used at once from two threads, one each;
 *   churn       repeated split + destroy;
 *   one bad     the last rank passes an invalid configuration, the others
 *               none: every rank fails the split (XC_ERR_INVALID, naming
 *               that rank on the others), no child, the parent still works
 *               (before 2026-12-06 that rank returned alone and the others
 *               waited in the split's all-gather); the same for an
 *               invalid color on the last rank.
 * Topology: on every communicator, node index and local rank/size must be
 * consistent across ranks (each node's local ranks are 0..local_size-1, the
 * node count is the number of distinct nodes), and a child's node grouping
 * must match the world's.  Parent statistics are not checked here (a split
 * runs collectives of its own on the parent); the children's are.
 */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Topology of one rank, as allgathered. */
typedef struct topo {
    int32_t world_rank, world_node, node, node_count, local_rank, local_size;
} topo_t;

static int g_world_node; /* this rank's node index in the world comm */

static void check_topology(xc_comm_t *comm, const char *what)
{
    int n = xc_comm_size(comm);
    topo_t me = {H.rank, g_world_node, xc_comm_node(comm),
                 xc_comm_node_count(comm), xc_comm_local_rank(comm),
                 xc_comm_local_size(comm)};
    topo_t *all = h_alloc(sizeof(topo_t) * (size_t)n);
    H_CHECK(comm, xc_allgather(&me, all, sizeof me / 4, XC_INT32, comm));
    char w[160];
    int distinct = 0;
    for (int r = 0; r < n; r++) {
        snprintf(w, sizeof w, "%s: rank %d node_count", what, r);
        H_EQ_INT(w, all[r].node_count, me.node_count);
        snprintf(w, sizeof w, "%s: rank %d node index in range", what, r);
        H_TRUE(w, all[r].node >= 0 && all[r].node < me.node_count);
        int members = 0, first = 1;
        unsigned long long seen = 0; /* local ranks seen on that node */
        for (int q = 0; q < n; q++) {
            if (all[q].node != all[r].node) continue;
            members++;
            if (q < r) first = 0;
            if (all[q].local_rank >= 0 && all[q].local_rank < 64)
                seen |= 1ull << all[q].local_rank;
            snprintf(w, sizeof w, "%s: ranks %d and %d share a node here iff "
                     "they share one in the world", what, r, q);
            H_TRUE(w, all[q].world_node == all[r].world_node);
        }
        distinct += first;
        snprintf(w, sizeof w, "%s: rank %d local_size", what, r);
        H_EQ_INT(w, all[r].local_size, members);
        snprintf(w, sizeof w, "%s: local ranks on the node of rank %d are "
                 "0..local_size-1", what, r);
        if (members < 64) H_EQ_U64(w, seen, (1ull << members) - 1);
    }
    snprintf(w, sizeof w, "%s: node_count vs distinct nodes", what);
    H_EQ_INT(w, me.node_count, distinct);
    h_free(all);
}

/* The child must hold exactly the world ranks `members[0..m)`, in order. */
static void check_members(xc_comm_t *child, const int *members, int m,
                          const char *what)
{
    char w[160];
    int want_rank = -1;
    for (int i = 0; i < m; i++)
        if (members[i] == H.rank) want_rank = i;
    snprintf(w, sizeof w, "%s: xc_comm_size", what);
    H_EQ_INT(w, xc_comm_size(child), m);
    snprintf(w, sizeof w, "%s: xc_comm_rank", what);
    H_EQ_INT(w, xc_comm_rank(child), want_rank);
    if (xc_comm_size(child) != m) return; /* the buffers below assume m */

    int32_t *got = h_alloc(sizeof(int32_t) * (size_t)m);
    int32_t mine = H.rank;
    H_CHECK(child, xc_allgather(&mine, got, 1, XC_INT32, child));
    for (int i = 0; i < m; i++) {
        snprintf(w, sizeof w, "%s: world rank of child rank %d", what, i);
        H_EQ_INT(w, got[i], members[i]);
    }
    int64_t sum = H.rank, want = 0;
    for (int i = 0; i < m; i++) want += members[i];
    H_CHECK(child, xc_allreduce(&sum, &sum, 1, XC_INT64, XC_SUM, child));
    snprintf(w, sizeof w, "%s: allreduce of world ranks", what);
    H_EQ_INT(w, sum, want);
    h_free(got);
    check_topology(child, what);
}

/* Split with color(r)/key(r) given as arrays over world ranks and check the
 * result against the ordering rule.  Returns the child (NULL for NONE). */
static xc_comm_t *split_and_check(const int *color, const int *key,
                                  const char *what)
{
    int n = H.size, *members = malloc(sizeof(int) * (size_t)n), m = 0;
    if (!members) abort();
    xc_comm_t *child = NULL;
    H_CHECK(H.comm, xc_comm_split(H.comm, color[H.rank], key[H.rank], &child,
                                  NULL));
    if (color[H.rank] == XC_COLOR_NONE) {
        char w[160];
        snprintf(w, sizeof w, "%s: child of XC_COLOR_NONE is NULL", what);
        H_TRUE(w, child == NULL);
        free(members);
        return child;
    }
    for (int r = 0; r < n; r++) /* members, then sort by (key, rank) */
        if (color[r] == color[H.rank]) members[m++] = r;
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && (key[members[j - 1]] > key[members[j]] ||
                                  (key[members[j - 1]] == key[members[j]] &&
                                   members[j - 1] > members[j]));
             j--) {
            int t = members[j];
            members[j] = members[j - 1];
            members[j - 1] = t;
        }
    if (child) check_members(child, members, m, what);
    else h_fail(__FILE__, __LINE__, "%s: NULL child for color %d", what,
                color[H.rank]);
    free(members);
    return child;
}

/* ------------------------------------------------------- concurrency */

typedef struct worker {
    xc_comm_t *comm;
    int id, iters;
    uint64_t issued[XC_COLL_COUNT], base[XC_COLL_COUNT];
} worker_t;

/* Runs allreduces and allgathers on its own child, checking each result.
 * Case seeds come from (id, iteration), never from the shared counter of
 * h_case, so the two threads do not race and all ranks agree. */
static void *worker_main(void *arg)
{
    worker_t *wk = arg;
    int n = xc_comm_size(wk->comm), me = xc_comm_rank(wk->comm);
    static const size_t counts[] = {1, 7, 1000, 65537};
    for (int it = 0; it < wk->iters; it++) {
        size_t count = counts[it % 4];
        xc_dtype_t dt = wk->id ? XC_INT64 : XC_FLOAT32;
        h_case_t c = {wk->id ? "thread B allreduce" : "thread A allreduce",
                      dt, XC_SUM, count, 1, -1, n,
                      h_mix64(H.seed ^ ((uint64_t)wk->id << 32) ^ (uint64_t)it)};
        size_t bytes = count * xc_dtype_size(dt);
        char *buf = h_alloc(bytes);
        h_fill(&c, buf, count, me, 0);
        H_CHECK(wk->comm, xc_allreduce(buf, buf, count, dt, XC_SUM, wk->comm));
        wk->issued[XC_COLL_ALLREDUCE]++;
        h_check_reduced(&c, buf, count, 0, "child allreduce");
        h_free(buf);

        h_case_t g = c;
        g.coll = "thread allgather", g.op = H_COPY, g.inplace = 0;
        char *mine = h_alloc(bytes), *all = h_alloc(bytes * (size_t)n);
        h_fill(&g, mine, count, me, 0);
        H_CHECK(wk->comm, xc_allgather(mine, all, count, dt, wk->comm));
        wk->issued[XC_COLL_ALLGATHER]++;
        for (int r = 0; r < n; r++)
            h_check_copy(&g, all + (size_t)r * bytes, count, r, 0,
                         "child allgather block");
        h_free(mine);
        h_free(all);
    }
    return NULL;
}

static void concurrent_children(int iters)
{
    int n = H.size;
    xc_comm_t *a = NULL, *b = NULL;
    H_CHECK(H.comm, xc_comm_split(H.comm, H.rank % 2, H.rank, &a, NULL));
    H_CHECK(H.comm, xc_comm_split(H.comm, 0, n - H.rank, &b, NULL));
    if (!a || !b) {
        h_fail(__FILE__, __LINE__, "concurrent: split returned NULL child");
        return;
    }
    worker_t w[2] = {{.comm = a, .id = 0, .iters = iters},
                     {.comm = b, .id = 1, .iters = iters}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        h_stats_ops(w[i].comm, w[i].base);
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
            printf("[rank %d] FATAL: pthread_create failed\n", H.rank);
            exit(1);
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    h_check_stats(a, w[0].base, w[0].issued, "thread A child");
    h_check_stats(b, w[1].base, w[1].issued, "thread B child");
    H_CHECK(a, xc_comm_destroy(a));
    H_CHECK(b, xc_comm_destroy(b));
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    h_init(argc, argv);
    int n = H.size;
    int *color = calloc((size_t)n, sizeof(int));
    int *key = calloc((size_t)n, sizeof(int));
    if (!color || !key) abort();
    g_world_node = xc_comm_node(H.comm);
    check_topology(H.comm, "world");

    for (int r = 0; r < n; r++) color[r] = r % 2, key[r] = r;
    xc_comm_t *parity = split_and_check(color, key, "parity split");

    for (int r = 0; r < n; r++) color[r] = 0, key[r] = n - r;
    xc_comm_t *rev = split_and_check(color, key, "reversed-key split");

    for (int r = 0; r < n; r++) color[r] = r / 3, key[r] = 0;
    xc_comm_t *blocks = split_and_check(color, key, "blocks-of-3 split");

    for (int r = 0; r < n; r++) color[r] = r == 0 ? XC_COLOR_NONE : 5, key[r] = r;
    xc_comm_t *none = split_and_check(color, key, "split with COLOR_NONE");

    /* Nested: the parity child split by its own rank's parity holds the
     * world ranks congruent to this rank modulo 4. */
    if (parity) {
        xc_comm_t *nested = NULL;
        int cr = xc_comm_rank(parity);
        H_CHECK(parity, xc_comm_split(parity, cr % 2, cr, &nested, NULL));
        int *members = malloc(sizeof(int) * (size_t)n), m = 0;
        if (!members) abort();
        for (int r = H.rank % 4; r < n; r += 4) members[m++] = r;
        if (nested) check_members(nested, members, m, "nested split");
        else h_fail(__FILE__, __LINE__, "nested split: NULL child");
        free(members);
        H_CHECK(nested, xc_comm_destroy(nested));
    }
    H_CHECK(parity, xc_comm_destroy(parity));
    H_CHECK(rev, xc_comm_destroy(rev));
    H_CHECK(blocks, xc_comm_destroy(blocks));
    H_CHECK(none, xc_comm_destroy(none)); /* NULL on rank 0: a no-op */

    concurrent_children(H.full ? 200 : 24);

    int churn = H.full ? 30 : 4;
    for (int i = 0; i < churn; i++) {
        for (int r = 0; r < n; r++) color[r] = (r + i) % 3, key[r] = -r;
        xc_comm_t *c = split_and_check(color, key, "churn split");
        H_CHECK(c, xc_comm_destroy(c));
    }

    /* One rank's invalid configuration fails the split on every rank. */
    if (n > 1) {
        xc_config_t bad = XC_CONFIG_INIT;
        bad.size = 1; /* not sizeof(xc_config_t) */
        xc_comm_t *c = NULL;
        int last = H.rank == n - 1;
        H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                    xc_comm_split(H.comm, 0, 0, &c, last ? &bad : NULL));
        H_TRUE("no child from a failed split", c == NULL);
        const char *msg = xc_comm_last_error(H.comm);
        char want[64];
        snprintf(want, sizeof want, "rank %d could not take part", n - 1);
        H_TRUE("the failed split's message names the rank",
               last ? strstr(msg, "config") != NULL : strstr(msg, want) != NULL);
        H_CHECK(H.comm, xc_comm_status(H.comm));
        /* and one rank's invalid color likewise (it returned alone until
         * the forty-fourth session) */
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_comm_split(H.comm, last ? -5 : 0, 0, &c, NULL));
        H_TRUE("no child from a failed split", c == NULL);
        msg = xc_comm_last_error(H.comm);
        H_TRUE("the bad color's message names it or its rank",
               last ? strstr(msg, "color") != NULL : strstr(msg, want) != NULL);
        H_CHECK(H.comm, xc_comm_status(H.comm));
    }

    /* The parent still works after all of that. */
    int64_t v = H.rank;
    H_CHECK(H.comm, xc_allreduce(&v, &v, 1, XC_INT64, XC_MAX, H.comm));
    H_EQ_INT("world allreduce after the splits", v, n - 1);
    free(color);
    free(key);
    return h_finish();
}
