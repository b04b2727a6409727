/*
 * test_model.c -- the cost model and the selector built on it:
 *  - given alpha, beta, gamma, the predictions equal hand-computed formulas
 *    and the selector picks their argmin: tiny messages -> the
 *    latency-optimal algorithm, huge ones -> the bandwidth-optimal one,
 *    non-power-of-two rank counts, shared-memory vs TCP link classes, the
 *    rendezvous line, the shm-native collectives against schedules;
 *  - over a grid, xc__model_choose is the argmin of xc__model_predict and
 *    never returns an algorithm the topology cannot run;
 *  - xc__algo_select (a communicator with a profile, no processes) follows
 *    the model through its choice table, and XCOLL_ALGO forcing, also
 *    spelt "allreduce:ring", overrides it;
 *  - the profile JSON round-trips, and malformed files give XC_ERR_INVALID
 *    naming the file and the problem;
 *  - end to end: two ranks (threads) created with XCOLL_PROFILE pointing to
 *    a malformed file both fail with XC_ERR_INVALID naming it, and with a
 *    good file both use it.
 * Standalone: exit 0 = pass, 1 = a check failed (each printed with both
 * values).
 */
#include "algo/algos.h"
#include "algo/shm_coll.h"
#include "core/comm.h"
#include "model/model.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "expect.h"

#define EXPECT_ALGO(got, want)                                                 \
    do {                                                                       \
        int g_ = (got), w_ = (want);                                           \
        if (g_ != w_)                                                          \
            FAIL("%s: got %s, want %s", #got, xc_algo_name(g_) ? xc_algo_name(g_) : "none", \
                 xc_algo_name(w_) ? xc_algo_name(w_) : "none");                \
    } while (0)

/* Relative closeness (times are positive). */
#define EXPECT_NEAR(got, want)                                                 \
    do {                                                                       \
        double g_ = (got), w_ = (want);                                        \
        if (!(fabs(g_ - w_) <= 1e-9 * fabs(w_) + 1e-18))                       \
            FAIL("%s = %.9g, want %s = %.9g", #got, g_, #want, w_);            \
    } while (0)

/* ------------------------------------------------------------ fixtures */

/* A link class whose transfer patterns all cost the same, without a
 * separate memory line. */
static xc__link_params_t lk(double a, double b, double ba, double bb, double from)
{
    xc__line_t l = {a, b, ba, bb, ba, bb, 0};
    return (xc__link_params_t){.big_from = from, .line = {l, l, l, l}};
}

/* Every link class (alpha a, beta b, no rendezvous line), memcpy c per
 * byte, gamma g per byte, everything cache-resident, sync s. */
static xc__profile_t flat_profile(double a, double b, double c, double g, double s)
{
    xc__profile_t p;
    memset(&p, 0, sizeof p);
    p.have = XC__HAVE_SHM | XC__HAVE_TCP_LOCAL | XC__HAVE_TCP_NET | XC__HAVE_HOST;
    for (int l = 0; l < XC__LINK_COUNT; l++)
        p.link[l] = lk(a, b, a, b, 1e18);
    p.sync_alpha = 0;
    p.sync_per_rank = s;
    p.copy_cache = p.copy_mem = c;
    p.cache_bytes = 1e15;
    for (int d = 0; d < XC_DTYPE_COUNT; d++)
        for (int k = 0; k < XC__GOP_COUNT; k++) p.gamma[d][k][0] = p.gamma[d][k][1] = g;
    snprintf(p.source, sizeof p.source, "test");
    return p;
}

/* N ranks on one node over TCP (no shared memory). */
static xc__model_topo_t tcp_topo(int n)
{
    xc__model_topo_t t = {.nranks = n, .nnodes = 1, .ppn = n, .blocked = 1, .shm = 0,
                          .chans = 0, .cma = 0, .slot_bytes = 256 << 10, .cma_min = 64 << 10,
                          .cores = 0};
    return t;
}

static xc__model_topo_t shm_topo(int n)
{
    xc__model_topo_t t = tcp_topo(n);
    t.shm = t.chans = t.cma = 1;
    return t;
}

static xc__model_call_t ar(size_t count)
{
    return (xc__model_call_t){XC_COLL_ALLREDUCE, count, XC_FLOAT32, XC_SUM, 0};
}

/*
 * The compressed all-reduce's price (cost_compress.c).  One chunk (512
 * blocks), N ranks over a flat TCP profile: the selector's
 * all-to-all and all-gather of one segment each, plus the codec passes
 * (encode E and E/N, decode 2E, copy in and out); its wire bytes shrink
 * with the format (int8 < fp16 < plain on a slow link); on a fast link
 * with slow codecs, plain wins; XC_COMPRESS_NONE is the selector's price.
 */
static void test_compressed(void)
{
    const int n = 4;
    xc__profile_t p = flat_profile(50e-6, 8e-9 /* 1 Gbit/s */, 1e-10, 1e-10, 0);
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
        p.codec[f][0] = 2e-10, p.codec[f][1] = 3e-10;
    xc__model_topo_t t = tcp_topo(n);
    size_t E = 512 * XC_COMPRESS_BLOCK; /* one chunk (xc__compress_chunk) */
    size_t maxnb = (512 + n - 1) / n;
    double seg8 = (double)((8 + maxnb * (4 + XC_COMPRESS_BLOCK) + 7) & ~(size_t)7);
    xc__model_call_t a2a = {XC_COLL_ALLTOALL, (size_t)seg8, XC_UINT8, XC_SUM, 0};
    xc__model_call_t ag = {XC_COLL_ALLGATHER, (size_t)seg8, XC_UINT8, XC_SUM, 0};
    double ta, tg;
    xc__model_choose(&p, &t, &a2a, &ta, NULL, NULL);
    xc__model_choose(&p, &t, &ag, &tg, NULL, NULL);
    double B = 4.0 * E;
    double comp = 2 * B * 1e-10 + B * 2e-10 * (1 + 1.0 / n) + B * 3e-10 * 2;
    EXPECT_NEAR(xc__model_compressed(&p, &t, E, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8),
                ta + tg + comp);
    xc__model_call_t plain = ar(E);
    double tp;
    xc__model_choose(&p, &t, &plain, &tp, NULL, NULL);
    EXPECT_NEAR(xc__model_compressed(&p, &t, E, XC_FLOAT32, XC_SUM, XC_COMPRESS_NONE), tp);
    size_t big = (size_t)16 << 20;
    double t8 = xc__model_compressed(&p, &t, big, XC_FLOAT32, XC_AVG, XC_COMPRESS_INT8);
    double t16 = xc__model_compressed(&p, &t, big, XC_FLOAT32, XC_AVG, XC_COMPRESS_FP16);
    double t0 = xc__model_compressed(&p, &t, big, XC_FLOAT32, XC_AVG, XC_COMPRESS_NONE);
    EXPECT_TRUE(t8 > 0 && t8 < t16 && t16 < t0);
    EXPECT_TRUE(t0 / t8 > 3 && t0 / t16 > 1.8); /* the targets, on paper */
    /* Many chunks pipeline: well under the sum of communication and
     * computation (which one chunk pays). */
    EXPECT_TRUE(xc__model_compressed(&p, &t, 2 * big, XC_FLOAT32, XC_AVG, XC_COMPRESS_INT8) <
                2.05 * t8);
    /* A fast link (shared memory speeds) and slow codecs: plain wins. */
    xc__profile_t fast = flat_profile(1e-6, 5e-11, 1e-10, 1e-10, 0);
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
        fast.codec[f][0] = fast.codec[f][1] = 1e-9;
    EXPECT_TRUE(xc__model_compressed(&fast, &t, big, XC_FLOAT32, XC_AVG, XC_COMPRESS_INT8) >
                xc__model_compressed(&fast, &t, big, XC_FLOAT32, XC_AVG, XC_COMPRESS_NONE));
    /* Oversubscription does not change it (every rank decides alike). */
    xc__model_topo_t crowded = t;
    crowded.cores = 1;
    EXPECT_NEAR(xc__model_compressed(&p, &crowded, big, XC_FLOAT32, XC_AVG, XC_COMPRESS_INT8), t8);
}

/* The double binary tree across nodes: its tree edges that cross a
 * node's boundary share that node's link (2 nodes x 2 ranks: 4 edges,
 * one segment each way per step), so over a slow network it moves about
 * twice the message per direction -- it must not be priced at the
 * intra-node rate of its xor-1 neighbours, and the hierarchical
 * all-reduce (half the message per node pair) must win. */
static void test_dbtree_nodes(void)
{
    EXPECT_TRUE(xc__dbtree_cross(4, 4) == 0);
    EXPECT_TRUE(xc__dbtree_cross(4, 2) == 4);
    EXPECT_TRUE(xc__dbtree_cross(2, 1) == 2);
    xc__profile_t p = flat_profile(1e-6, 1e-11, 1e-11, 1e-11, 0.2e-6);
    const double bn = 8e-9; /* ~ 1 Gbit/s */
    p.link[XC__LINK_TCP_NET] = lk(50e-6, bn, 50e-6, bn, 65536);
    xc__model_topo_t t;
    EXPECT_RC(xc__model_topo_make(4, 2, 2, NULL, &t), XC_OK);
    xc__model_call_t big = ar((size_t)16 << 20);
    double B = 64.0 * 1024 * 1024;
    double dbt = xc__model_predict(&p, &t, XC__ALGO_ALLREDUCE_DBTREE, &big);
    EXPECT_TRUE(dbt >= 2 * B * bn);
    EXPECT_TRUE(dbt <= 2.2 * B * bn);
    EXPECT_ALGO(xc__model_choose(&p, &t, &big, NULL, NULL, NULL), XC__ALGO_ALLREDUCE_HIER);
}

/* The measured single-copy thresholds go with the pair alone, as the
 * runtime takes them (xc__model_topo_measured); XCOLL_SHM_CMA_MAX_KB,
 * where set, over the measured ceiling. */
static void test_topo_measured(void)
{
    xc__profile_t p = flat_profile(1e-6, 1e-11, 1e-11, 1e-11, 0.2e-6);
    p.shm_cma_max = 2 << 20, p.shm_ag_cma_min = 1 << 20;
    p.shm_a2a_cma_min = 96 << 10, p.shm_bcast_cma_min = 512 << 10;
    xc__model_topo_t t;
    memset(&t, 0, sizeof t);
    t.nranks = 2;
    xc__model_topo_measured(&t, &p, -1);
    EXPECT_TRUE(t.cma_max == 2 << 20 && t.ag_cma_min == 1 << 20);
    EXPECT_TRUE(t.a2a_cma_min == 96 << 10 && t.bcast_cma_min == 512 << 10);
    xc__model_topo_measured(&t, &p, 0); /* XCOLL_SHM_CMA_MAX_KB=0: no ceiling */
    EXPECT_TRUE(t.cma_max == 0 && t.ag_cma_min == 1 << 20);
    xc__model_topo_measured(&t, NULL, -1);
    EXPECT_TRUE(t.cma_max == 0 && t.ag_cma_min == 0 && t.a2a_cma_min == 0 && t.bcast_cma_min == 0);
    t.crowded = 1; /* two ranks sharing a core: not the measured pair */
    xc__model_topo_measured(&t, &p, -1);
    EXPECT_TRUE(t.cma_max == 0 && t.ag_cma_min == 0 && t.a2a_cma_min == 0 && t.bcast_cma_min == 0);
    t.crowded = 0, t.nranks = 4;
    xc__model_topo_measured(&t, &p, 128);
    EXPECT_TRUE(t.cma_max == 128 << 10 && t.ag_cma_min == 0 && t.bcast_cma_min == 0);
}

/* ------------------------------------------------- hand-computed cases */

static void test_tcp_allreduce(void)
{
    const double a = 10e-6, b = 1e-9, c = 5e-11, g = 1e-10;
    xc__profile_t p = flat_profile(a, b, c, g, 1e-6);
    xc__model_topo_t t8 = tcp_topo(8);

    /* 8 bytes on 8 ranks: recursive doubling, 3 rounds of whole vectors. */
    xc__model_call_t tiny = ar(2);
    double B = 8, rd = 3 * (a + B * b + B * g);
    double tree = c * B + 3 * (2 * (a + B * b) + B * g);
    double ring = c * B + 7 * (2 * (a + 4 * b) + 4 * g); /* blocks of ceil(2/8) = 1 float */
    double rhd = 3 * (2 * (a + 4 * b) + 4 * g);          /* every part is 1 float */
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLREDUCE_RD, &tiny), rd);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLREDUCE_TREE, &tiny), tree);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLREDUCE_RING, &tiny), ring);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLREDUCE_RHD, &tiny), rhd);
    double pred;
    EXPECT_ALGO(xc__model_choose(&p, &t8, &tiny, &pred, NULL, NULL), XC__ALGO_ALLREDUCE_RD);
    EXPECT_NEAR(pred, rd);
    {
        /* A schedule's round on the link costs round_delta more than the
         * lines say (3 rounds of rd, 14 of the ring), never below 0. */
        xc__profile_t q = p;
        q.link[XC__LINK_TCP_LOCAL].round_delta = -a / 4;
        EXPECT_NEAR(xc__model_predict(&q, &t8, XC__ALGO_ALLREDUCE_RD, &tiny), rd - 3 * a / 4);
        EXPECT_NEAR(xc__model_predict(&q, &t8, XC__ALGO_ALLREDUCE_RING, &tiny), ring - 14 * a / 4);
        q.link[XC__LINK_TCP_LOCAL].round_delta = -2 * a;
        EXPECT_NEAR(xc__model_predict(&q, &t8, XC__ALGO_ALLREDUCE_RD, &tiny), rd - 3 * a);
        /* measured points price the small transfers through them: at
         * and between the points linear, below the first its time, beyond
         * the last the last segment's slope */
        xc__model_topo_t t2 = tcp_topo(2);
        xc__link_params_t *lp = &q.link[XC__LINK_TCP_LOCAL];
        lp->round_delta = 0;
        for (int x = 0; x < XC__XFER_COUNT; x++) {
            lp->npts[x] = 3;
            lp->pts[x][0][0] = 8, lp->pts[x][0][1] = 2 * a;
            lp->pts[x][1][0] = 1024, lp->pts[x][1][1] = 3 * a;
            lp->pts[x][2][0] = 4096, lp->pts[x][2][1] = 5 * a;
        }
        const double sz[] = {4, 8, 512, 1024, 4096, 8192};
        const double want[] = {2 * a, 2 * a, 2 * a + 504.0 / 1016 * a, 3 * a, 5 * a,
                               5 * a + 4096 * 2 * a / 3072};
        for (int i = 0; i < 6; i++) {
            xc__model_call_t c1 = ar((size_t)sz[i] / 4);
            EXPECT_NEAR(xc__model_predict(&q, &t2, XC__ALGO_ALLREDUCE_RD, &c1),
                        want[i] + sz[i] * g);
        }
        lp->round_delta = -a; /* with the round's term: never below the line's bytes */
        xc__model_call_t c2 = ar(2);
        EXPECT_NEAR(xc__model_predict(&q, &t2, XC__ALGO_ALLREDUCE_RD, &c2), a + 8 * g);
        lp->round_delta = -10 * a;
        EXPECT_NEAR(xc__model_predict(&q, &t2, XC__ALGO_ALLREDUCE_RD, &c2), 8 * b + 8 * g);
        for (int x = 0; x < XC__XFER_COUNT; x++) lp->npts[x] = 0;
        /* another class's term does not apply */
        q.link[XC__LINK_TCP_LOCAL].round_delta = 0;
        q.link[XC__LINK_SHM].round_delta = -a / 2;
        EXPECT_NEAR(xc__model_predict(&q, &t8, XC__ALGO_ALLREDUCE_RD, &tiny), rd);
    }

    /* 64 MiB on 8 ranks: Rabenseifner (ring bandwidth, log2 N latency, no
     * copy) beats the ring, which beats whole-vector algorithms. */
    xc__model_call_t huge = ar((size_t)16 << 20);
    B = 64.0 * 1024 * 1024;
    ring = c * B + 7 * (2 * (a + B / 8 * b) + B / 8 * g);
    rhd = 0;
    for (int d = 4; d >= 1; d /= 2) rhd += 2 * (a + B * d / 8 * b) + B * d / 8 * g;
    rd = 3 * (a + B * b + B * g);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLREDUCE_RING, &huge), ring);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLREDUCE_RHD, &huge), rhd);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLREDUCE_RD, &huge), rd);
    EXPECT_ALGO(xc__model_choose(&p, &t8, &huge, NULL, NULL, NULL), XC__ALGO_ALLREDUCE_RHD);
    /* A schedule's scratch comes from the communicator's pool (sched.c):
     * no per-call page faults to price, however large (the fault rate is
     * for the compressed all-reduce's own per-call buffers). */
    {
        xc__profile_t q = p;
        q.fault = 2e-10;
        EXPECT_NEAR(xc__model_predict(&q, &t8, XC__ALGO_ALLREDUCE_RD, &huge), rd);
        EXPECT_NEAR(xc__model_predict(&q, &t8, XC__ALGO_ALLREDUCE_RING, &huge), ring);
    }

    /* 6 ranks (not a power of two): the fold costs Rabenseifner two whole
     * vectors, so the ring wins huge messages; tiny ones still go to
     * recursive doubling (fold + 2 rounds = 4 alphas, against 6 for the
     * tree and rhd, 10 for the ring). */
    xc__model_topo_t t6 = tcp_topo(6);
    double fold = 2 * (a + B * b) + B * g;
    rhd = fold + (2 * (a + B / 2 * b) + B / 2 * g) + (2 * (a + B / 4 * b) + B / 4 * g);
    double blk6 = ceil((16.0 * 1024 * 1024) / 6) * 4;
    ring = c * B + 5 * (2 * (a + blk6 * b) + blk6 * g);
    EXPECT_NEAR(xc__model_predict(&p, &t6, XC__ALGO_ALLREDUCE_RHD, &huge), rhd);
    EXPECT_NEAR(xc__model_predict(&p, &t6, XC__ALGO_ALLREDUCE_RING, &huge), ring);
    EXPECT_ALGO(xc__model_choose(&p, &t6, &huge, NULL, NULL, NULL), XC__ALGO_ALLREDUCE_RING);
    B = 8;
    rd = 2 * (a + B * b) + B * g + 2 * (a + B * b + B * g);
    EXPECT_NEAR(xc__model_predict(&p, &t6, XC__ALGO_ALLREDUCE_RD, &tiny), rd);
    EXPECT_ALGO(xc__model_choose(&p, &t6, &tiny, NULL, NULL, NULL), XC__ALGO_ALLREDUCE_RD);

    /* Without shared memory the shm-native algorithms are invalid. */
    EXPECT_TRUE(xc__model_predict(&p, &t8, XC__ALGO_SHM_ALLREDUCE, &tiny) < 0);
    /* An algorithm of another collective is no answer. */
    EXPECT_TRUE(xc__model_predict(&p, &t8, XC__ALGO_BCAST_CHAIN, &tiny) < 0);
}

static void test_other_collectives(void)
{
    const double a = 20e-6, b = 2e-9, c = 1e-10, g = 3e-10;
    xc__profile_t p = flat_profile(a, b, c, g, 1e-6);
    xc__model_topo_t t8 = tcp_topo(8);

    /* Broadcast: binomial for 8 bytes (3 hops), scatter + all-gather for
     * 64 MiB (about 2 B beta instead of 3 B beta). */
    xc__model_call_t bc = {XC_COLL_BCAST, 8, XC_UINT8, XC_SUM, 0};
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_BCAST_BINOMIAL, &bc), 3 * (a + 8 * b));
    EXPECT_ALGO(xc__model_choose(&p, &t8, &bc, NULL, NULL, NULL), XC__ALGO_BCAST_BINOMIAL);
    bc.count = (size_t)64 << 20;
    double B = 64.0 * 1024 * 1024, sag = 0;
    for (int d = 1; d < 8; d *= 2) sag += a + B * d / 8 * b;
    sag += 7 * (a + B / 8 * b);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_BCAST_SCATTER_AG, &bc), sag);
    /* The chain: k = floor(sqrt((N-2) B / 64 KiB)) = 78 segments of
     * ceil(B/78) bytes (the last shorter), N-2+k rounds; the builder cuts
     * the same way.  On 2 ranks one segment: the whole message, once. */
    double k = 78, S = ceil(B / k), last = B - (k - 1) * S;
    EXPECT_TRUE(xc__chain_seg(bc.count, 1, 8) == (size_t)S);
    double chain = (8 - 2 + k - 1) * (a + S * b) + (a + last * b);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_BCAST_CHAIN, &bc), chain);
    EXPECT_TRUE(xc__chain_seg(bc.count, 1, 2) == bc.count);
    EXPECT_TRUE(xc__chain_seg(4096, 4, 8) == 4096); /* 16 KiB: one segment */
    EXPECT_TRUE(xc__chain_seg(0, 4, 8) == 1);
    xc__model_topo_t t2 = tcp_topo(2);
    EXPECT_NEAR(xc__model_predict(&p, &t2, XC__ALGO_BCAST_CHAIN, &bc), a + B * b);
    int want = sag < chain ? XC__ALGO_BCAST_SCATTER_AG : XC__ALGO_BCAST_CHAIN;
    EXPECT_ALGO(xc__model_choose(&p, &t8, &bc, NULL, NULL, NULL), want);

    /* All-gather of 4-byte blocks on 8 ranks: recursive doubling (3
     * rounds) over the ring (7). */
    xc__model_call_t ag = {XC_COLL_ALLGATHER, 1, XC_FLOAT32, XC_SUM, 0};
    double agrd = c * 4 + (a + 4 * b) + (a + 8 * b) + (a + 16 * b);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLGATHER_RD, &ag), agrd);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_ALLGATHER_RING, &ag), c * 4 + 7 * (a + 4 * b));
    EXPECT_ALGO(xc__model_choose(&p, &t8, &ag, NULL, NULL, NULL), XC__ALGO_ALLGATHER_RD);

    /* Reduce-scatter, 1 MiB blocks on 8 ranks: ring and pairwise cost the
     * same here (one link class), the registry order breaks the tie. */
    xc__model_call_t rs = {XC_COLL_REDUCE_SCATTER, 256 << 10, XC_FLOAT32, XC_SUM, 0};
    double bb = 1024.0 * 1024, rsr = 7 * (a + bb * b + bb * g);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_REDUCE_SCATTER_RING, &rs), rsr);
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_REDUCE_SCATTER_PAIRWISE, &rs), rsr);
    double rsh = c * bb;
    for (int d = 4; d >= 1; d /= 2) rsh += a + 8 * bb * d / 8 * b + 8 * bb * d / 8 * g;
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_REDUCE_SCATTER_RHALVING, &rs), rsh);
    int best = rsh < rsr ? XC__ALGO_REDUCE_SCATTER_RHALVING : XC__ALGO_REDUCE_SCATTER_RING;
    EXPECT_ALGO(xc__model_choose(&p, &t8, &rs, NULL, NULL, NULL), best);

    /* Barrier: ceil(log2 N) zero-byte rounds. */
    xc__model_call_t bar = {XC_COLL_BARRIER, 0, XC_UINT8, XC_SUM, 0};
    EXPECT_NEAR(xc__model_predict(&p, &t8, XC__ALGO_BARRIER_DISSEMINATION, &bar), 3 * a);
    EXPECT_ALGO(xc__model_choose(&p, &t8, &bar, NULL, NULL, NULL),
                XC__ALGO_BARRIER_DISSEMINATION);
}

static void test_link_classes(void)
{
    xc__profile_t p = flat_profile(1e-6, 1e-10, 1e-11, 1e-11, 0.2e-6);
    p.link[XC__LINK_TCP_NET] = lk(50e-6, 1e-9, 50e-6, 1e-9, 1e18);
    p.link[XC__LINK_TCP_LOCAL] = lk(15e-6, 3e-10, 15e-6, 3e-10, 1e18);
    xc__model_call_t tiny = ar(2);
    double g = 1e-11;

    /* Over TCP a one-way round can cost much less than an exchange (the
     * kernel copies one direction, not two): the tree's two one-way hops
     * then beat recursive doubling's one exchange for 8 bytes. */
    {
        xc__profile_t q = p;
        xc__line_t ow = {6e-6, 3e-10, 6e-6, 3e-10, 6e-6, 3e-10, 0};
        q.link[XC__LINK_TCP_LOCAL].line[XC__ONEWAY] = ow;
        q.link[XC__LINK_TCP_LOCAL].line[XC__ONEWAY_FRESH] = ow;
        xc__model_topo_t lo2 = tcp_topo(2);
        double tree = 1e-11 * 8 + 2 * (6e-6 + 8 * 3e-10) + 8 * g;
        EXPECT_NEAR(xc__model_predict(&q, &lo2, XC__ALGO_ALLREDUCE_TREE, &tiny), tree);
        EXPECT_NEAR(xc__model_predict(&q, &lo2, XC__ALGO_ALLREDUCE_RD, &tiny),
                    15e-6 + 8 * 3e-10 + 8 * g);
        EXPECT_ALGO(xc__model_choose(&q, &lo2, &tiny, NULL, NULL, NULL), XC__ALGO_ALLREDUCE_TREE);
        /* A broadcast tree's first round also exchanges the operation's
         * description with the neighbours: an exchange, then one-way hops
         * (4 ranks: the second hop forwards what arrived, one way). */
        xc__model_call_t bc = {XC_COLL_BCAST, 100, XC_UINT8, XC_SUM, 0};
        EXPECT_NEAR(xc__model_predict(&q, &lo2, XC__ALGO_BCAST_BINOMIAL, &bc), 15e-6 + 100 * 3e-10);
        xc__model_topo_t lo4 = tcp_topo(4);
        EXPECT_NEAR(xc__model_predict(&q, &lo4, XC__ALGO_BCAST_BINOMIAL, &bc),
                    15e-6 + 100 * 3e-10 + 6e-6 + 100 * 3e-10);
    }
    /* Data is priced as freshly written whether the call wrote it (the
     * all-gather ring sends the block it has just copied) or the caller did
     * (recursive doubling on 2 ranks sends the caller's input): a training
     * step hands over what it just computed (XC__CALLER_FRESH, cost.h).
     * The reused-buffer lines (a benchmark's unchanged send buffer, which
     * the peer may still cache) price none of the schedules (the shared-
     * memory collectives' single-copy reads keep the one-way one, whose
     * fit they were measured with: cost_shm.c). */
    {
        xc__profile_t q = p;
        xc__line_t slow = {1e-6, 1e-9, 1e-6, 1e-9, 1e-6, 1e-9, 0};
        xc__line_t absurd = {1, 1, 1, 1, 1, 1, 0};
        q.link[XC__LINK_SHM].line[XC__EXCHANGE_FRESH] = slow;
        q.link[XC__LINK_SHM].line[XC__EXCHANGE] = absurd;
        q.link[XC__LINK_SHM].line[XC__ONEWAY] = absurd;
        xc__model_topo_t t2 = shm_topo(2);
        xc__model_call_t ag = {XC_COLL_ALLGATHER, 4096, XC_UINT8, XC_SUM, 0};
        double c = 1e-11;
        EXPECT_NEAR(xc__model_predict(&q, &t2, XC__ALGO_ALLGATHER_RING, &ag),
                    c * 4096 + 1e-6 + 4096 * 1e-9);
        EXPECT_NEAR(xc__model_predict(&q, &t2, XC__ALGO_ALLGATHER_RD, &ag),
                    c * 4096 + 1e-6 + 4096 * 1e-9);
        xc__model_call_t ar = {XC_COLL_ALLREDUCE, 1024, XC_FLOAT32, XC_SUM, 0};
        EXPECT_TRUE(xc__model_predict(&q, &t2, XC__ALGO_ALLREDUCE_RD, &ar) < 1e-3);
    }
    /* Two ranks sharing memory: frames through shm channels. */
    xc__model_topo_t shm = shm_topo(2);
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLREDUCE_RD, &tiny), 1e-6 + 8e-10 + 8 * g);
    /* Same node without shared memory: loopback TCP. */
    xc__model_topo_t lo = tcp_topo(2);
    EXPECT_NEAR(xc__model_predict(&p, &lo, XC__ALGO_ALLREDUCE_RD, &tiny), 15e-6 + 8 * 3e-10 + 8 * g);
    /* Two nodes: TCP across. */
    xc__model_topo_t net;
    EXPECT_RC(xc__model_topo_make(2, 2, 1, NULL, &net), XC_OK);
    EXPECT_TRUE(!net.shm && net.nnodes == 2);
    EXPECT_NEAR(xc__model_predict(&p, &net, XC__ALGO_ALLREDUCE_RD, &tiny), 50e-6 + 8e-9 + 8 * g);

    /* Shared memory: the native one-shot all-reduce costs one sync (0.2
     * us), moving the peer's 8 bytes across (the shm exchange rate, 1e-10
     * per byte) and one reduction: cheaper than any schedule here. */
    double one_shot = 0.2e-6 + 8 * 1e-10 + 8 * g;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_SHM_ALLREDUCE, &tiny), one_shot);
    EXPECT_ALGO(xc__model_choose(&p, &shm, &tiny, NULL, NULL, NULL), XC__ALGO_SHM_ALLREDUCE);
    /* A schedule algorithm's call cost is added to schedules only. */
    {
        xc__profile_t q = p;
        q.sched_call = 0.5e-6;
        EXPECT_NEAR(xc__model_predict(&q, &shm, XC__ALGO_ALLREDUCE_RD, &tiny),
                    0.5e-6 + 1e-6 + 8e-10 + 8 * g);
        EXPECT_NEAR(xc__model_predict(&q, &shm, XC__ALGO_SHM_ALLREDUCE, &tiny), one_shot);
    }
    /* A slow synchronisation makes the schedule win instead. */
    p.sync_per_rank = 100e-6;
    EXPECT_ALGO(xc__model_choose(&p, &shm, &tiny, NULL, NULL, NULL), XC__ALGO_ALLREDUCE_RD);
    /* ... except on a crowded node, where the shm algorithm is chosen
     * whatever the prices, at every size (a schedule's rounds each wait
     * for a partner that may not be running); on several nodes, or
     * uncrowded, the prices. */
    {
        xc__model_topo_t cr = shm;
        cr.crowded = 1;
        EXPECT_ALGO(xc__model_choose(&p, &cr, &tiny, NULL, NULL, NULL), XC__ALGO_SHM_ALLREDUCE);
        xc__model_call_t at = {XC_COLL_ALLREDUCE, 8192, XC_FLOAT32, XC_SUM, 0};
        EXPECT_ALGO(xc__model_choose(&p, &cr, &at, NULL, NULL, NULL), XC__ALGO_SHM_ALLREDUCE);
        at.count = 8193;
        EXPECT_ALGO(xc__model_choose(&p, &cr, &at, NULL, NULL, NULL), XC__ALGO_SHM_ALLREDUCE);
        at.count = 1 << 22;
        EXPECT_ALGO(xc__model_choose(&p, &cr, &at, NULL, NULL, NULL), XC__ALGO_SHM_ALLREDUCE);
        EXPECT_TRUE(xc__model_choose(&p, &shm, &at, NULL, NULL, NULL) != XC__ALGO_SHM_ALLREDUCE);
        xc__model_call_t bc = {XC_COLL_BCAST, 8, XC_UINT8, XC_SUM, 0};
        EXPECT_ALGO(xc__model_choose(&p, &cr, &bc, NULL, NULL, NULL), XC__ALGO_SHM_BCAST);
    }
    /* A broadcast or reduce that fits the flagged lines goes to shared
     * memory uncrowded too, whatever the prices (its express path); one
     * byte beyond them, the prices (here the schedules, the sync slow). */
    {
        size_t ll = xc__shm_ll_max(shm.nranks);
        xc__model_call_t bc = {XC_COLL_BCAST, ll, XC_UINT8, XC_SUM, 0};
        EXPECT_ALGO(xc__model_choose(&p, &shm, &bc, NULL, NULL, NULL), XC__ALGO_SHM_BCAST);
        xc__model_call_t rd = {XC_COLL_REDUCE, 2, XC_FLOAT32, XC_SUM, 0};
        EXPECT_ALGO(xc__model_choose(&p, &shm, &rd, NULL, NULL, NULL), XC__ALGO_SHM_REDUCE);
        bc.count = ll + 1;
        EXPECT_TRUE(xc__model_choose(&p, &shm, &bc, NULL, NULL, NULL) != XC__ALGO_SHM_BCAST);
        /* not the all-reduce: its shm path has no overlap of calls */
        EXPECT_ALGO(xc__model_choose(&p, &shm, &tiny, NULL, NULL, NULL), XC__ALGO_ALLREDUCE_RD);
    }

    /* The rendezvous line from big_from on. */
    p.link[XC__LINK_SHM] = lk(1e-6, 1e-10, 3e-6, 5e-11, 65536);
    xc__model_call_t ag = {XC_COLL_ALLGATHER, 65535, XC_UINT8, XC_SUM, 0};
    double c = 1e-11;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                c * 65535 + 1e-6 + 65535 * 1e-10);
    ag.count = 65536;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                c * 65536 + 3e-6 + 65536 * 5e-11);
    /* Beyond the cache: the call's buffers (all-gather on 2 ranks: its
     * block in, 2 blocks out) no longer fit, so the copy runs at memory
     * speed and the message takes the memory line; up to half the cache
     * everything runs at cache speed, in between the two blend (half and
     * half at exactly the cache size). */
    p.cache_bytes = 3 << 20;
    p.copy_mem = 4e-11;
    for (int x = 0; x < XC__XFER_COUNT; x++) {
        p.link[XC__LINK_SHM].line[x].mem_alpha = 9e-6;
        p.link[XC__LINK_SHM].line[x].mem_beta = 2e-10;
    }
    ag.count = 512 << 10; /* working set 1.5 MiB */
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                c * 524288 + 3e-6 + 524288 * 5e-11);
    ag.count = 2 << 20; /* 6 MiB */
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                4e-11 * 2097152 + 9e-6 + 2097152 * 2e-10);
    ag.count = 1 << 20; /* 3 MiB */
    double bb = 1048576;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                bb * (c + 4e-11) / 2 + (3e-6 + bb * 5e-11 + 9e-6 + bb * 2e-10) / 2);
    /* A memcpy ladder slows memory-bound passes further at larger sizes:
     * at a 64 MiB working set and beyond, 3x the per-byte time at 8 MiB. */
    p.nladder = 2;
    p.ladder[0][0] = 8 << 20, p.ladder[0][1] = 4e-11;
    p.ladder[1][0] = 64 << 20, p.ladder[1][1] = 12e-11;
    ag.count = 32 << 20; /* working set 96 MiB */
    double b = (double)ag.count;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                12e-11 * b + 9e-6 + b * 2e-10 * 3);
    /* ... but never below the line's in-cache rate: a transfer bound by
     * the cross-core move of freshly written lines (in the cache or not)
     * has a memory slope that the tier scales from below that rate. */
    {
        xc__profile_t q = p;
        for (int x = 0; x < XC__XFER_COUNT; x++) q.link[XC__LINK_SHM].line[x].mem_beta = 1e-11;
        EXPECT_NEAR(xc__model_predict(&q, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                    12e-11 * b + 9e-6 + b * 5e-11);
        for (int x = 0; x < XC__XFER_COUNT; x++) q.link[XC__LINK_SHM].line[x].mem_beta = 2e-11;
        EXPECT_NEAR(xc__model_predict(&q, &shm, XC__ALGO_ALLGATHER_RING, &ag),
                    12e-11 * b + 9e-6 + b * 6e-11);
    }
    /* Across nodes the ladder slows only the host's two copies per byte
     * (into and out of the socket), not the wire: 1 Gbit/s stays 8 ns/B. */
    for (int x = 0; x < XC__XFER_COUNT; x++) {
        xc__line_t *l = &p.link[XC__LINK_TCP_NET].line[x];
        l->big_alpha = l->mem_alpha = 50e-6;
        l->big_beta = l->mem_beta = 8e-9;
    }
    p.link[XC__LINK_TCP_NET].big_from = 65536;
    EXPECT_NEAR(xc__model_predict(&p, &net, XC__ALGO_ALLGATHER_RING, &ag),
                12e-11 * b + 50e-6 + b * (8e-9 + 2 * 4e-11 * (3 - 1)));
    /* A pattern's own split overrides the link's: with every line's
     * bandwidth regime starting beyond the message, the per-message line
     * prices it; split 0 means the link's again. */
    for (int x = 0; x < XC__XFER_COUNT; x++) {
        xc__line_t *l = &p.link[XC__LINK_TCP_NET].line[x];
        l->alpha = 5e-6, l->beta = 1e-9, l->big_from = 1e12;
    }
    EXPECT_NEAR(xc__model_predict(&p, &net, XC__ALGO_ALLGATHER_RING, &ag),
                12e-11 * b + 5e-6 + b * 1e-9);
    for (int x = 0; x < XC__XFER_COUNT; x++) p.link[XC__LINK_TCP_NET].line[x].big_from = 0;
    EXPECT_NEAR(xc__model_predict(&p, &net, XC__ALGO_ALLGATHER_RING, &ag),
                12e-11 * b + 50e-6 + b * (8e-9 + 2 * 4e-11 * (3 - 1)));
    /* A cold call (xcoll-plan: one that follows compute, not another
     * call) adds the calibrated cold_alpha + cold_beta x its working set
     * (all-gather on 2 ranks: 3 blocks); others do not. */
    ag.count = 4096;
    xc__model_call_t cold = ag;
    cold.cold = 1;
    double hot = xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag);
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &cold), hot);
    p.cold_alpha = 40e-6, p.cold_beta = 3e-10;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &ag), hot);
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &cold),
                hot + 40e-6 + 3e-10 * 3 * 4096);
    /* Buffers from xc_mem_alloc: their own term once measured, the
     * ordinary one before (an older profile). */
    xc__model_call_t coldx = ag;
    coldx.cold = XC__COLD_XCMEM;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &coldx),
                hot + 40e-6 + 3e-10 * 3 * 4096);
    p.cold_huge_alpha = 10e-6, p.cold_huge_beta = 1e-10, p.cold_xcmem = 1;
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &coldx),
                hot + 10e-6 + 1e-10 * 3 * 4096);
    EXPECT_NEAR(xc__model_predict(&p, &shm, XC__ALGO_ALLGATHER_RING, &cold),
                hot + 40e-6 + 3e-10 * 3 * 4096);
    /* ... and the choice is the runtime's (it never marks calls cold) */
    EXPECT_ALGO(xc__model_choose(&p, &shm, &cold, NULL, NULL, NULL),
                xc__model_choose(&p, &shm, &ag, NULL, NULL, NULL));
}

/* The shared-memory rules the runtime and the model share (shm_coll.h):
 * the cooperative broadcast's share and the reduce's single-copy
 * threshold, and the model pricing what the runtime runs. */
static void test_shm_rules(void)
{
    size_t mib = (size_t)1 << 20;
    EXPECT_TRUE(xc__shm_bcast_share(mib, 2, 1) == mib / 2);
    EXPECT_TRUE(xc__shm_bcast_share(mib, 2, 0) == 0);
    EXPECT_TRUE(xc__shm_bcast_share(mib, 1, 1) == 0);
    EXPECT_TRUE(xc__shm_bcast_share(8000, 2, 1) == 0);     /* under one 4 KiB unit */
    EXPECT_TRUE(xc__shm_bcast_share(10000, 2, 1) == 4096);
    for (size_t b = 1; b < 3 * mib; b = b * 3 + 1)
        for (int L = 2; L <= 9; L++) {
            size_t h = xc__shm_bcast_share(b, L, 1);
            EXPECT_TRUE(h % 4096 == 0 && h * (size_t)L <= b);
        }
    /* a reduce on 2 uncrowded ranks or on a crowded node never goes single
     * copy: the root reads */
    EXPECT_TRUE(xc__shm_reduce_root_reads(2, 0) && xc__shm_reduce_root_reads(2, 1) &&
                !xc__shm_reduce_root_reads(3, 0) && xc__shm_reduce_root_reads(3, 1) &&
                xc__shm_reduce_root_reads(8, 1) && !xc__shm_reduce_root_reads(1, 1));
    /* the take's probe is one chunk of a reduce whose root reads (an 8 KiB
     * piece on 2 uncrowded ranks, 32 KiB crowded), 32 KiB elsewhere */
    EXPECT_TRUE(xc__shm_take_probe(256 << 10, 2, 0) == 2048 &&
                xc__shm_take_probe(256 << 10, 2, 1) == 8192 &&
                xc__shm_take_probe(256 << 10, 3, 0) == 8192 &&
                xc__shm_take_probe(256 << 10, 8, 1) == 8192);
    for (int L = 2; L <= 8; L++)
        for (int cr = 0; cr < 2; cr++)
            for (size_t slot = 64 << 10; slot <= (1 << 20); slot *= 2) {
                size_t n = xc__shm_take_probe(slot, L, cr);
                EXPECT_TRUE(n * 4 <= XC__SHM_TAKE_BYTES);
                if (xc__shm_reduce_root_reads(L, cr))
                    EXPECT_TRUE(xc__shm_rooted_ce(slot, n, 4, cr) == n);
            }
    EXPECT_TRUE(xc__shm_cma_reduce_min(1, 2, 0, 65536) == SIZE_MAX);
    EXPECT_TRUE(xc__shm_cma_reduce_min(1, 2, 1, 65536) == SIZE_MAX);
    EXPECT_TRUE(xc__shm_cma_reduce_min(1, 4, 1, 65536) == SIZE_MAX);
    EXPECT_TRUE(xc__shm_cma_reduce_min(1, 3, 0, 65536) == XC__SHM_CMA_REDUCE_MIN);
    /* ... a reduce-scatter there from XCOLL_SHM_CMA_MIN_KB, past 2 ranks
     * from 1 MiB; on a crowded node every reduction stays staged */
    EXPECT_TRUE(xc__shm_cma_reduce_min(0, 2, 0, 65536) == 65536);
    EXPECT_TRUE(xc__shm_cma_reduce_min(0, 3, 0, 65536) == XC__SHM_CMA_REDUCE_MIN);
    EXPECT_TRUE(xc__shm_cma_reduce_min(2, 4, 0, 65536) == XC__SHM_CMA_REDUCE_MIN);
    for (int kind = 0; kind < 3; kind++)
        EXPECT_TRUE(xc__shm_cma_reduce_min(kind, 2, 1, 65536) == SIZE_MAX &&
                    xc__shm_cma_reduce_min(kind, 8, 1, 65536) == SIZE_MAX &&
                    xc__shm_cma_reduce_min(kind, 4, 1, 0) == 0);
    /* the all-to-all reads single copy from a quarter of the size on 2
     * uncrowded ranks only; crowded from blocks of 1 MiB / L */
    EXPECT_TRUE(xc__shm_alltoall_cma_min(2, 0, 65536) == 16384 &&
                xc__shm_alltoall_cma_min(2, 1, 65536) == 524288 &&
                xc__shm_alltoall_cma_min(3, 0, 65536) == 65536 &&
                xc__shm_alltoall_cma_min(2, 0, 0) == 0 &&
                xc__shm_alltoall_cma_min(4, 1, 65536) == 262144 &&
                xc__shm_alltoall_cma_min(8, 1, 65536) == 131072 &&
                xc__shm_alltoall_cma_min(32, 1, 65536) == 65536 &&
                xc__shm_alltoall_cma_min(4, 1, 0) == 0);
    /* Measured slot writes: symmetric operations and a pair's rooted ones,
     * not a rooted one among more. */
    EXPECT_TRUE(xc__shm_way_measured(XC_COLL_ALLREDUCE, 4) &&
                xc__shm_way_measured(XC_COLL_ALLTOALL, 8) &&
                xc__shm_way_measured(XC_COLL_ALLGATHER, 4) &&
                xc__shm_way_measured(XC_COLL_BCAST, 2) && xc__shm_way_measured(XC_COLL_REDUCE, 2) &&
                !xc__shm_way_measured(XC_COLL_REDUCE, 3) && !xc__shm_way_measured(XC_COLL_BCAST, 4));
    /* XCOLL_SHM_CMA_MIN_KB=0: single copy at every size */
    EXPECT_TRUE(xc__shm_cma_reduce_min(1, 2, 0, 0) == 0 && xc__shm_bcast_cma_min(2, 0, 0, 0) == 0);
    /* The broadcast's floor: the pair's measured one, else 256 KiB; none
     * past 2 uncrowded ranks, never single copy crowded. */
    EXPECT_TRUE(xc__shm_bcast_cma_min(2, 0, 65536, 0) == XC__SHM_BCAST_CMA_MIN_2 &&
                xc__shm_bcast_cma_min(2, 0, 65536, 90112) == 90112 &&
                xc__shm_bcast_cma_min(2, 0, 0, 90112) == 0 &&
                xc__shm_bcast_cma_min(4, 0, 65536, 90112) == 0 &&
                xc__shm_bcast_cma_min(4, 1, 65536, 90112) == SIZE_MAX);
    {
        /* The model prices what the floor picks: a 128 KiB 2-rank
         * broadcast single copy (as with XCOLL_SHM_CMA_MIN_KB=0) once the
         * measured floor is below it, staged before. */
        xc__profile_t q = flat_profile(1e-6, 1e-10, 5e-11, 8e-11, 0.5e-6);
        xc__model_topo_t t2 = shm_topo(2), t0 = shm_topo(2);
        xc__model_call_t b128 = {XC_COLL_BCAST, (128 << 10) / 4, XC_FLOAT32, XC_SUM, 0};
        t0.cma_min = 0;
        double cma_all = xc__model_predict(&q, &t0, XC__ALGO_SHM_BCAST, &b128);
        double staged = xc__model_predict(&q, &t2, XC__ALGO_SHM_BCAST, &b128);
        t2.bcast_cma_min = 96 << 10;
        double floored = xc__model_predict(&q, &t2, XC__ALGO_SHM_BCAST, &b128);
        EXPECT_NEAR(floored, cma_all);
        EXPECT_TRUE(fabs(staged - cma_all) > 1e-9);
    }

    xc__profile_t p = flat_profile(1e-6, 1e-10, 5e-11, 8e-11, 0.5e-6);
    xc__model_topo_t t = shm_topo(2);
    xc__model_call_t bc = {XC_COLL_BCAST, (4 * mib) / 4, XC_FLOAT32, XC_SUM, 0};
    double plain = xc__model_predict(&p, &t, XC__ALGO_SHM_BCAST, &bc);
    t.coop = 1;
    double coop = xc__model_predict(&p, &t, XC__ALGO_SHM_BCAST, &bc);
    /* each side copies half: about half the time, never more */
    EXPECT_TRUE(coop > 0 && coop < plain && coop > 0.45 * plain);
    /* a 512 KiB reduce: the root-reads pipeline on 2 uncrowded ranks and on
     * a crowded node (the root takes every other rank's chunks: on 4 ranks
     * more than on 2), the chunked reduce on 4 uncrowded ranks */
    xc__model_call_t rd = {XC_COLL_REDUCE, (mib / 2) / 4, XC_FLOAT32, XC_SUM, 0};
    t = shm_topo(2);
    double free_ = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &rd);
    t.crowded = 1;
    double crowded = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &rd);
    EXPECT_TRUE(free_ > 0 && crowded > 0);
    t = shm_topo(4);
    double four = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &rd);
    t.crowded = 1;
    double four_crowded = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &rd);
    EXPECT_TRUE(four > 0 && four_crowded > crowded && four_crowded != four);
    /* the pipeline is priced per slot-sized chunk: 4 MiB about 8x 512 KiB */
    t = shm_topo(2);
    xc__model_call_t rd8 = rd;
    rd8.count *= 8;
    double big = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &rd8);
    EXPECT_TRUE(big > 4 * free_ && big < 16 * free_);
    /* the all-reduce on 2 uncrowded ranks: one shot per chunk, priced per
     * chunk too (4 MiB about 8x 512 KiB), and never the single copy's
     * price (which does not scale with the chunks) */
    EXPECT_TRUE(xc__shm_allreduce_one_shot_all(2, 0) && !xc__shm_allreduce_one_shot_all(2, 1) &&
                !xc__shm_allreduce_one_shot_all(4, 0));
    xc__model_call_t ar1 = {XC_COLL_ALLREDUCE, (mib / 2) / 4, XC_FLOAT32, XC_SUM, 0};
    xc__model_call_t ar8 = ar1;
    ar8.count *= 8;
    double a1 = xc__model_predict(&p, &t, XC__ALGO_SHM_ALLREDUCE, &ar1);
    double a8 = xc__model_predict(&p, &t, XC__ALGO_SHM_ALLREDUCE, &ar8);
    EXPECT_TRUE(a1 > 0 && a8 > 4 * a1 && a8 < 16 * a1);
    /* All-gather's and all-to-all's single-copy ceiling (cma_max): a block
     * above it is priced staged -- as without single copy at all -- and one
     * at it single copy; the broadcast has none. */
    {
        xc__model_topo_t cap = shm_topo(2), none = shm_topo(2);
        cap.cma_max = 2 * mib;
        none.cma = 0;
        const xc_coll_t mv[] = {XC_COLL_ALLGATHER, XC_COLL_ALLTOALL};
        const int ids[] = {XC__ALGO_SHM_ALLGATHER, XC__ALGO_SHM_ALLTOALL};
        for (int i = 0; i < 2; i++) {
            /* bytes per block: the count of either */
            size_t over = 4 * mib, at = 2 * mib;
            xc__model_call_t large = {mv[i], over, XC_UINT8, XC_SUM, 0};
            xc__model_call_t fit = {mv[i], at, XC_UINT8, XC_SUM, 0};
            EXPECT_NEAR(xc__model_predict(&p, &cap, ids[i], &large),
                        xc__model_predict(&p, &none, ids[i], &large));
            EXPECT_NEAR(xc__model_predict(&p, &cap, ids[i], &fit),
                        xc__model_predict(&p, &t, ids[i], &fit));
            EXPECT_TRUE(xc__model_predict(&p, &t, ids[i], &fit) !=
                        xc__model_predict(&p, &none, ids[i], &fit));
        }
        /* The floors (ag_cma_min, a2a_cma_min): a block below one priced
         * staged, one at it single copy, the other collective unmoved;
         * all-gather's "never" prices every block staged. */
        xc__model_topo_t fl = shm_topo(2), afl = shm_topo(2), never = shm_topo(2);
        fl.ag_cma_min = afl.a2a_cma_min = 2 * mib;
        never.ag_cma_min = XC__SHM_AG_CMA_NEVER;
        xc__model_call_t ag1 = {XC_COLL_ALLGATHER, mib, XC_UINT8, XC_SUM, 0}, ag2 = ag1;
        xc__model_call_t a2a1 = {XC_COLL_ALLTOALL, mib, XC_UINT8, XC_SUM, 0}, a2a2 = a2a1;
        ag2.count = a2a2.count = 2 * mib;
        const int AG = XC__ALGO_SHM_ALLGATHER, A2A = XC__ALGO_SHM_ALLTOALL;
#define SAME_PRICE(t1, t2, id, c)                                                              \
    EXPECT_NEAR(xc__model_predict(&p, &t1, id, &c), xc__model_predict(&p, &t2, id, &c))
        SAME_PRICE(fl, none, AG, ag1);
        SAME_PRICE(fl, t, AG, ag2);
        SAME_PRICE(never, none, AG, ag2);
        SAME_PRICE(fl, t, A2A, a2a1);
        SAME_PRICE(afl, none, A2A, a2a1);
        SAME_PRICE(afl, t, A2A, a2a2);
        SAME_PRICE(afl, t, AG, ag1);
#undef SAME_PRICE
        EXPECT_TRUE(xc__model_predict(&p, &t, AG, &ag1) != xc__model_predict(&p, &none, AG, &ag1));
        EXPECT_TRUE(xc__model_predict(&p, &t, A2A, &a2a1) !=
                    xc__model_predict(&p, &none, A2A, &a2a1));
        xc__model_call_t bc4 = {XC_COLL_BCAST, 4 * mib, XC_UINT8, XC_SUM, 0};
        EXPECT_NEAR(xc__model_predict(&p, &cap, XC__ALGO_SHM_BCAST, &bc4),
                    xc__model_predict(&p, &t, XC__ALGO_SHM_BCAST, &bc4));
        EXPECT_TRUE(xc__model_predict(&p, &t, XC__ALGO_SHM_BCAST, &bc4) !=
                    xc__model_predict(&p, &none, XC__ALGO_SHM_BCAST, &bc4));
    }
    /* The single copy's measured correction (pair_direct, per byte of the
     * call): added to its formula on the pair, never below half of it;
     * what the pair's choice between the two compares. */
    {
        xc__profile_t q = p;
        xc__model_call_t m1 = {XC_COLL_ALLREDUCE, mib / 4, XC_FLOAT32, XC_SUM, 0};
        q.pair_direct = 0;
        double f = xc__model_shm_pair_single_copy(&q, &t, &m1);
        double os = xc__model_shm_pair_one_shot(&q, &t, &m1);
        EXPECT_TRUE(f > 0 && os > 0);
        q.pair_direct = 1e-12;
        EXPECT_NEAR(xc__model_shm_pair_single_copy(&q, &t, &m1), f + mib * 1e-12);
        /* ... and its constant part, once a call (affine: both fitted) */
        q.pair_direct0 = 3e-6;
        EXPECT_NEAR(xc__model_shm_pair_single_copy(&q, &t, &m1), f + 3e-6 + mib * 1e-12);
        q.pair_direct0 = 0;
        /* likewise one shot per chunk: pair_chunk per byte, pair_chunk0 a call */
        q.pair_chunk = 1e-12;
        q.pair_chunk0 = 2e-6;
        EXPECT_NEAR(xc__model_shm_pair_one_shot(&q, &t, &m1), os + 2e-6 + mib * 1e-12);
        q.pair_chunk0 = -1.0; /* far below: half the rest */
        EXPECT_NEAR(xc__model_shm_pair_one_shot(&q, &t, &m1), 0.5 * (os + mib * 1e-12));
        q.pair_chunk = q.pair_chunk0 = 0;
        q.pair_direct = -1.0; /* far below: half the formula */
        EXPECT_NEAR(xc__model_shm_pair_single_copy(&q, &t, &m1), 0.5 * f);
        /* priced above one shot per chunk: never chosen; far below: chosen
         * (1 MiB is past XC__SHM_PAIR_DIRECT_MIN and the topology's cma_min) */
        q.pair_direct = (os - f) / mib + 1e-12;
        EXPECT_TRUE(!xc__model_shm_pair_direct(&q, &t, &m1));
        EXPECT_TRUE(0.5 * f < os);
        q.pair_direct = (0.5 * (0.5 * f + os) - f) / mib; /* between half and one shot */
        EXPECT_TRUE(xc__model_shm_pair_direct(&q, &t, &m1));
        /* not on 4 ranks: the correction was measured on the pair */
        xc__model_topo_t t4 = shm_topo(4);
        q.pair_direct = 0;
        double f4 = xc__model_shm_pair_single_copy(&q, &t4, &m1);
        q.pair_direct = 1e-12;
        EXPECT_NEAR(xc__model_shm_pair_single_copy(&q, &t4, &m1), f4);
    }

    /* The root-reads reduce's take rates (2 ranks, 256 KiB slots: ring
     * entries of 64 KiB).  Uncrowded, a message within an entry goes in 8
     * KiB pieces (xc__shm_rooted_ce), beyond it in entries: the first
     * chunk at take_ps up to 32 KiB, take_big_ps at take_big_bytes (an
     * entry); every later chunk at take_pipe_ps.  Crowded, a message
     * within an entry is one chunk, its rate linear between the two.
     * Each price is linear in its rate where the take is the slower side
     * (a cheap reduction here). */
    p = flat_profile(1e-6, 1e-10, 5e-11, 1e-12, 0.5e-6);
    p.shm_take = 100e-12, p.shm_take_big = 50e-12, p.shm_take_big_bytes = 64 << 10;
    p.shm_take_pipe = 40e-12;
    const double dr = 10e-12;
    struct {
        int crowded;
        size_t bytes;
        double *rate, slope; /* d price / d rate */
    } k[] = {
        {0, 32 << 10, &p.shm_take, 8 << 10}, /* four pieces: the first */
        {0, 32 << 10, &p.shm_take_pipe, 24 << 10}, /* the other three */
        {0, 32 << 10, &p.shm_take_big, 0},
        {0, 64 << 10, &p.shm_take, 8 << 10},
        {0, 64 << 10, &p.shm_take_pipe, 56 << 10},
        {0, 64 << 10, &p.shm_take_big, 0},
        {0, 128 << 10, &p.shm_take_big, 64 << 10}, /* the first entry */
        {0, 128 << 10, &p.shm_take_pipe, 64 << 10}, /* the second */
        {0, 1 << 20, &p.shm_take_pipe, 15 * (64 << 10)},
        {0, (64 + 16) << 10, &p.shm_take_pipe, 16 << 10}, /* a short last chunk */
        {1, 32 << 10, &p.shm_take, 32 << 10},
        {1, 32 << 10, &p.shm_take_big, 0},
        {1, 48 << 10, &p.shm_take, 0.5 * (48 << 10)}, /* halfway: half of each */
        {1, 48 << 10, &p.shm_take_big, 0.5 * (48 << 10)},
        {1, 64 << 10, &p.shm_take_big, 64 << 10},
        {1, 64 << 10, &p.shm_take_pipe, 0},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        t = shm_topo(2);
        t.crowded = k[i].crowded;
        xc__model_call_t c = {XC_COLL_REDUCE, k[i].bytes / 4, XC_FLOAT32, XC_SUM, 0};
        double p0 = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &c);
        *k[i].rate += dr;
        double p1 = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &c);
        *k[i].rate -= dr;
        if (fabs((p1 - p0) - dr * k[i].slope) > 1e-12)
            FAIL("reduce.shm of %zu B%s: %.4g us more for %.0f ps/B more, want %.4g", k[i].bytes,
                 k[i].crowded ? " (crowded)" : "", (p1 - p0) * 1e6, dr * 1e12,
                 dr * k[i].slope * 1e6);
    }
    /* without the big chunk's rate: take_ps at every size of one chunk */
    p.shm_take_big = 0;
    t = shm_topo(2);
    t.crowded = 1;
    xc__model_call_t c64 = {XC_COLL_REDUCE, (64 << 10) / 4, XC_FLOAT32, XC_SUM, 0};
    double q0 = xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &c64);
    p.shm_take += dr;
    EXPECT_TRUE(fabs(xc__model_predict(&p, &t, XC__ALGO_SHM_REDUCE, &c64) - q0 -
                     dr * (64 << 10)) < 1e-12);
}

/* More ranks than cores: predictions scale by ranks/cores, choices do not
 * move. */
static void test_crowding(void)
{
    xc__profile_t p = flat_profile(3e-6, 2e-10, 5e-11, 8e-11, 0.5e-6);
    for (size_t count = 1; count <= ((size_t)1 << 24); count *= 16) {
        xc__model_call_t call = ar(count);
        xc__model_topo_t a = shm_topo(8), b = a;
        b.cores = 2;
        double pa, pb;
        EXPECT_ALGO(xc__model_choose(&p, &b, &call, &pb, NULL, NULL),
                    xc__model_choose(&p, &a, &call, &pa, NULL, NULL));
        EXPECT_NEAR(pb, 4 * pa);
        EXPECT_NEAR(xc__model_predict(&p, &b, XC__ALGO_ALLREDUCE_RING, &call),
                    4 * xc__model_predict(&p, &a, XC__ALGO_ALLREDUCE_RING, &call));
    }
}

/* --------------------------------------------------- argmin property */

static void test_argmin_grid(void)
{
    xc__profile_t p = flat_profile(3e-6, 2e-10, 5e-11, 8e-11, 0.5e-6);
    p.link[XC__LINK_SHM] = lk(0.8e-6, 1.5e-10, 4e-6, 9e-11, 65536);
    p.link[XC__LINK_TCP_NET] = lk(40e-6, 1e-9, 60e-6, 8e-10, 65536);
    static const xc_coll_t colls[] = {XC_COLL_ALLREDUCE, XC_COLL_REDUCE_SCATTER,
                                      XC_COLL_ALLGATHER, XC_COLL_REDUCE,
                                      XC_COLL_BCAST,     XC_COLL_ALLTOALL, XC_COLL_BARRIER};
    int checked = 0;
    for (int topo = 0; topo < 3; topo++) {
        for (int n = 2; n <= 9; n++) {
            xc__model_topo_t t = topo == 0 ? shm_topo(n) : tcp_topo(n);
            if (topo == 2 && xc__model_topo_make(n, 2, (n + 1) / 2, NULL, &t) != XC_OK) continue;
            for (size_t ci = 0; ci < sizeof colls / sizeof *colls; ci++) {
                for (size_t count = 1; count <= ((size_t)1 << 26); count *= 8) {
                    xc__model_call_t call = {colls[ci], count, XC_BFLOAT16, XC_MAX, 0};
                    double pred;
                    int id = xc__model_choose(&p, &t, &call, &pred, NULL, NULL);
                    int best = XC__ALGO_NONE;
                    double bt = 0;
                    size_t ntab;
                    const xc__algo_t *tab = xc__algo_table(&ntab);
                    for (int a = 1; a < XC__ALGO_COUNT; a++) {
                        if (tab[a].explicit_only) continue; /* deterministic mode's */
                        double v = xc__model_predict(&p, &t, a, &call);
                        if (v >= 0 && (best == XC__ALGO_NONE || v < bt)) best = a, bt = v;
                    }
                    /* a broadcast or reduce in the flagged lines: shm
                     * whatever the prices (model.c, rooted_lines) */
                    if (t.shm && count * 2 <= xc__shm_ll_max(n) &&
                        (colls[ci] == XC_COLL_BCAST || colls[ci] == XC_COLL_REDUCE)) {
                        int shm_id = colls[ci] == XC_COLL_BCAST ? XC__ALGO_SHM_BCAST
                                                                : XC__ALGO_SHM_REDUCE;
                        EXPECT_ALGO(id, shm_id);
                        EXPECT_NEAR(pred, xc__model_predict(&p, &t, shm_id, &call));
                        checked++;
                        continue;
                    }
                    if (id != best || pred != bt)
                        FAIL("%s n=%d topo=%d count=%zu: chose %s (%g), argmin %s (%g)",
                             xc_coll_name(colls[ci]), n, topo, count, xc_algo_name(id), pred,
                             xc_algo_name(best), bt);
                    if (id > 0 && tab[id].needs_shm && !t.shm)
                        FAIL("chose %s without shared memory", xc_algo_name(id));
                    if (id <= 0) FAIL("no algorithm for %s", xc_coll_name(colls[ci]));
                    checked++;
                }
            }
        }
    }
    EXPECT_TRUE(checked > 1000);
}

/* ------------------------------------------------------------ selector */

static xc_comm_t *fake_comm(int size, const xc__profile_t *prof)
{
    xc__config_t cfg;
    if (xc__config_resolve(NULL, &cfg) != XC_OK) return NULL;
    xc_comm_t *c = NULL;
    if (xc__comm_alloc(0, size, &cfg, &c) != XC_OK) return NULL;
    if (xc__algo_parse_env(c) != XC_OK) {
        xc__comm_free(c);
        return NULL;
    }
    xc__profile_t *p = calloc(1, sizeof *p + xc__algo_sel_bytes());
    *p = *prof;
    c->profile = p;
    if (xc__algo_sel_init(c, p + 1) != XC_OK) {
        xc__comm_free(c);
        return NULL;
    }
    return c;
}

static void test_selector(void)
{
    xc__profile_t p = flat_profile(10e-6, 1e-9, 5e-11, 1e-10, 1e-6);
    unsetenv("XCOLL_ALGO");
    xc_comm_t *c = fake_comm(8, &p);
    if (!c) {
        FAIL("fake communicator: %s", xc_last_error());
        return;
    }
    xc__model_topo_t t = tcp_topo(8);
    /* Sizes far from any crossover: the table's choice is the model's. */
    static const size_t counts[] = {2, 3, 5, 16, (size_t)1 << 20, (size_t)16 << 20, 0};
    for (int i = 0; counts[i]; i++) {
        for (int rep = 0; rep < 2; rep++) { /* the second time from the table */
            xc__args_t a = {.coll = XC_COLL_ALLREDUCE, .count = counts[i], .dtype = XC_FLOAT32,
                            .op = XC_SUM, .root = -1};
            const xc__algo_t *al = NULL;
            EXPECT_RC(xc__algo_select(c, &a, &al), XC_OK);
            xc__model_call_t call = ar(counts[i]);
            int want = xc__model_choose(&p, &t, &call, NULL, NULL, NULL);
            if (al) EXPECT_ALGO(al->id, want);
        }
    }
    /* Every collective gets an algorithm of its own. */
    for (int k = 0; k < XC_COLL_COUNT; k++) {
        if (k == XC_COLL_SEND || k == XC_COLL_RECV) continue;
        xc__args_t a = {.coll = (xc_coll_t)k, .count = 100, .dtype = XC_INT32, .op = XC_SUM,
                        .root = 0};
        const xc__algo_t *al = NULL;
        EXPECT_RC(xc__algo_select(c, &a, &al), XC_OK);
        EXPECT_TRUE(al && al->coll == (xc_coll_t)k && !al->needs_shm);
    }
    xc__comm_free(c);

    /* XCOLL_ALGO overrides the model, in both spellings. */
    setenv("XCOLL_ALGO", "allreduce:ring,bcast.chain", 1);
    c = fake_comm(8, &p);
    EXPECT_TRUE(c != NULL);
    if (c) {
        xc__args_t a = {.coll = XC_COLL_ALLREDUCE, .count = 2, .dtype = XC_FLOAT32,
                        .op = XC_SUM, .root = -1};
        const xc__algo_t *al = NULL;
        EXPECT_RC(xc__algo_select(c, &a, &al), XC_OK);
        if (al) EXPECT_ALGO(al->id, XC__ALGO_ALLREDUCE_RING);
        a.coll = XC_COLL_BCAST;
        EXPECT_RC(xc__algo_select(c, &a, &al), XC_OK);
        if (al) EXPECT_ALGO(al->id, XC__ALGO_BCAST_CHAIN);
        xc__comm_free(c);
    }
    /* A forced shared-memory algorithm on a communicator without it fails
     * the call, as before the cost model. */
    setenv("XCOLL_ALGO", "allreduce.shm", 1);
    c = fake_comm(8, &p);
    EXPECT_TRUE(c != NULL);
    if (c) {
        xc__args_t a = {.coll = XC_COLL_ALLREDUCE, .count = 2, .dtype = XC_FLOAT32,
                        .op = XC_SUM, .root = -1};
        const xc__algo_t *al = NULL;
        EXPECT_RC(xc__algo_select(c, &a, &al), XC_ERR_INVALID);
        EXPECT_CONTAINS(xc_last_error(), "no shared memory");
        xc__comm_free(c);
    }
    setenv("XCOLL_ALGO", "allreduce:nonesuch", 1);
    xc__config_t cfg;
    xc_comm_t *bad = NULL;
    EXPECT_RC(xc__config_resolve(NULL, &cfg), XC_OK);
    EXPECT_RC(xc__comm_alloc(0, 2, &cfg, &bad), XC_OK);
    if (bad) {
        EXPECT_RC(xc__algo_parse_env(bad), XC_ERR_INVALID);
        EXPECT_CONTAINS(xc_last_error(), "allreduce:nonesuch");
        xc__comm_free(bad);
    }
    unsetenv("XCOLL_ALGO");
}

/* ------------------------------------------------------------ files */

static char g_dir[64];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        FAIL("cannot write %s", path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

static void test_roundtrip(void)
{
    xc__profile_t p;
    memset(&p, 0, sizeof p);
    p.have = XC__HAVE_SHM | XC__HAVE_TCP_NET | XC__HAVE_HOST;
    p.link[XC__LINK_SHM] = (xc__link_params_t){
        .big_from = 65536, .line = {{1.25e-6, 100.5e-12, 3.5e-6, 60.25e-12, 7.75e-6, 90.125e-12, 0},
                {1.5e-6, 110.5e-12, 4.5e-6, 70.25e-12, 8.75e-6, 95.125e-12, 0},
                {1.75e-6, 120.5e-12, 5.5e-6, 80.25e-12, 9.75e-6, 99.125e-12, 0},
                {2.5e-6, 130.5e-12, 6.5e-6, 90.25e-12, 10.75e-6, 199.125e-12, 0}},
        .round_delta = -0.125e-6,
        .npts = {3, 0, 2, 0},
        .pts = {{{8, 0.5e-6}, {1024, 0.75e-6}, {4096, 1.25e-6}}, {{0}}, {{8, 0.25e-6}, {64, 0.5e-6}}}};
    /* TCP: a split per pattern (the link's is the default of lines without). */
    p.link[XC__LINK_TCP_NET] = (xc__link_params_t){
        .big_from = 65536, .line = {{40.125e-6, 800e-12, 55e-6, 750.5e-12, 60e-6, 900.5e-12, 1448},
                {45.125e-6, 850e-12, 65e-6, 780.5e-12, 70e-6, 990.5e-12, 11585},
                {46.125e-6, 860e-12, 66e-6, 790.5e-12, 71e-6, 991.5e-12, 0},
                {47.125e-6, 870e-12, 67e-6, 791.5e-12, 72e-6, 992.5e-12, 2896}}};
    p.sync_alpha = 0.125e-6;
    p.sync_per_rank = 0.375e-6;
    p.sched_call = 0.3125e-6;
    p.shm_stage = 0.1875e-6;
    p.shm_take = 135.5e-12, p.shm_take_big = 87.25e-12, p.shm_take_big_bytes = 262144;
    p.shm_take_pipe = 21.125e-12;
    p.pair_chunk = 36.25e-12, p.pair_chunk0 = 0.625e-6;
    p.pair_direct = -50.875e-12, p.pair_direct0 = 23.5e-6;
    p.shm_bcast_cma_min = 90112;
    p.cold_alpha = 52.5e-6, p.cold_beta = 237.5e-12;
    p.cold_huge_alpha = 12.5e-6, p.cold_huge_beta = 81.5e-12, p.cold_xcmem = 1;
    p.copy_cache = 6.5e-12;
    p.copy_mem = 75.25e-12;
    p.cache_bytes = 2097152;
    p.fault = 250.5e-12;
    p.nladder = 2;
    p.ladder[0][0] = 4194304, p.ladder[0][1] = 75.25e-12;
    p.ladder[1][0] = 67108864, p.ladder[1][1] = 180.5e-12;
    for (int d = 0; d < XC_DTYPE_COUNT; d++)
        for (int k = 0; k < XC__GOP_COUNT; k++) {
            p.gamma[d][k][0] = (10 + d + 0.5 * k) * 1e-12;
            p.gamma[d][k][1] = (100 + 2 * d + 0.25 * k) * 1e-12;
        }
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
        p.codec[f][0] = (20 + f) * 1e-12, p.codec[f][1] = (30.5 + f) * 1e-12;
    snprintf(p.source, sizeof p.source, "round \"trip\"");
    char path[128];
    snprintf(path, sizeof path, "%s/good.json", g_dir);
    EXPECT_RC(xc__profile_write(&p, path), XC_OK);
    xc__profile_t q;
    EXPECT_RC(xc__profile_read(path, &q), XC_OK);
    EXPECT_TRUE(q.have == p.have);
    for (int l = 0; l < XC__LINK_COUNT; l++) {
        if (!(p.have & (1u << l))) continue;
        EXPECT_NEAR(q.link[l].big_from, p.link[l].big_from);
        EXPECT_NEAR(q.link[l].round_delta, p.link[l].round_delta);
        for (int x = 0; x < XC__XFER_COUNT; x++) {
            EXPECT_TRUE(q.link[l].npts[x] == p.link[l].npts[x]);
            for (int i = 0; i < p.link[l].npts[x] && i < q.link[l].npts[x]; i++) {
                EXPECT_NEAR(q.link[l].pts[x][i][0], p.link[l].pts[x][i][0]);
                EXPECT_NEAR(q.link[l].pts[x][i][1], p.link[l].pts[x][i][1]);
            }
            const xc__line_t *a = &q.link[l].line[x], *b = &p.link[l].line[x];
            EXPECT_NEAR(a->alpha, b->alpha);
            EXPECT_NEAR(a->beta, b->beta);
            EXPECT_NEAR(a->big_alpha, b->big_alpha);
            EXPECT_NEAR(a->big_beta, b->big_beta);
            EXPECT_NEAR(a->mem_alpha, b->mem_alpha);
            EXPECT_NEAR(a->mem_beta, b->mem_beta);
            EXPECT_NEAR(a->big_from, b->big_from);
            EXPECT_NEAR(xc__line_big_from(&q.link[l], x), xc__line_big_from(&p.link[l], x));
        }
    }
    EXPECT_NEAR(xc__line_big_from(&q.link[XC__LINK_TCP_NET], XC__ONEWAY_FRESH), 65536);
    EXPECT_NEAR(xc__line_big_from(&q.link[XC__LINK_TCP_NET], XC__ONEWAY), 1448);
    EXPECT_NEAR(q.sync_alpha, p.sync_alpha);
    EXPECT_NEAR(q.sync_per_rank, p.sync_per_rank);
    EXPECT_NEAR(q.sched_call, p.sched_call);
    EXPECT_NEAR(q.shm_stage, p.shm_stage);
    EXPECT_NEAR(q.shm_take, p.shm_take);
    EXPECT_NEAR(q.shm_take_big, p.shm_take_big);
    EXPECT_NEAR(q.shm_take_big_bytes, p.shm_take_big_bytes);
    EXPECT_NEAR(q.shm_take_pipe, p.shm_take_pipe);
    EXPECT_NEAR(q.pair_chunk, p.pair_chunk);
    EXPECT_NEAR(q.pair_chunk0, p.pair_chunk0);
    EXPECT_NEAR(q.pair_direct, p.pair_direct);
    EXPECT_NEAR(q.pair_direct0, p.pair_direct0);
    EXPECT_NEAR(q.shm_bcast_cma_min, p.shm_bcast_cma_min);
    EXPECT_NEAR(q.cold_alpha, p.cold_alpha);
    EXPECT_NEAR(q.cold_beta, p.cold_beta);
    EXPECT_NEAR(q.cold_huge_alpha, p.cold_huge_alpha);
    EXPECT_NEAR(q.cold_huge_beta, p.cold_huge_beta);
    EXPECT_TRUE(q.cold_xcmem == 1);
    {
        /* a measured zero (huge pages took the whole extra away) is kept */
        xc__profile_t z = p, zq;
        z.cold_huge_alpha = z.cold_huge_beta = 0;
        char zpath[160];
        snprintf(zpath, sizeof zpath, "%s/zero-cold.json", g_dir);
        EXPECT_RC(xc__profile_write(&z, zpath), XC_OK);
        EXPECT_RC(xc__profile_read(zpath, &zq), XC_OK);
        EXPECT_TRUE(zq.cold_xcmem == 1 && zq.cold_huge_alpha == 0 && zq.cold_huge_beta == 0);
    }
    EXPECT_NEAR(q.copy_cache, p.copy_cache);
    EXPECT_NEAR(q.copy_mem, p.copy_mem);
    EXPECT_NEAR(q.cache_bytes, p.cache_bytes);
    EXPECT_NEAR(q.fault, p.fault);
    EXPECT_TRUE(q.nladder == p.nladder);
    for (int i = 0; i < p.nladder && i < q.nladder; i++) {
        EXPECT_NEAR(q.ladder[i][0], p.ladder[i][0]);
        EXPECT_NEAR(q.ladder[i][1], p.ladder[i][1]);
    }
    for (int d = 0; d < XC_DTYPE_COUNT; d++)
        for (int k = 0; k < XC__GOP_COUNT; k++) {
            EXPECT_NEAR(q.gamma[d][k][0], p.gamma[d][k][0]);
            EXPECT_NEAR(q.gamma[d][k][1], p.gamma[d][k][1]);
        }
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++) {
        EXPECT_NEAR(q.codec[f][0], p.codec[f][0]);
        EXPECT_NEAR(q.codec[f][1], p.codec[f][1]);
    }
    /* Same numbers, same choices. */
    xc__model_topo_t t = shm_topo(4);
    for (size_t n = 1; n < ((size_t)1 << 24); n *= 4) {
        xc__model_call_t call = ar(n);
        EXPECT_ALGO(xc__model_choose(&q, &t, &call, NULL, NULL, NULL),
                    xc__model_choose(&p, &t, &call, NULL, NULL, NULL));
    }
}

/* A good file with one substitution, which must fail naming `what`. */
static void bad_case(const char *good, const char *from, const char *to, const char *what)
{
    char path[128], text[16384];
    snprintf(path, sizeof path, "%s/bad.json", g_dir);
    const char *at = strstr(good, from);
    if (!at) {
        FAIL("fixture lacks \"%s\"", from);
        return;
    }
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, to, at + strlen(from));
    write_file(path, text);
    xc__profile_t p;
    xc_result_t rc = xc__profile_read(path, &p);
    if (rc != XC_ERR_INVALID) {
        FAIL("%s -> %s: got %s, want XC_ERR_INVALID", from, to, xc_err_name(rc));
        return;
    }
    EXPECT_CONTAINS(xc_last_error(), path);
    EXPECT_CONTAINS(xc_last_error(), what);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = calloc(1, 16384);
    if (buf && fread(buf, 1, 16383, f) == 0) buf[0] = 0;
    fclose(f);
    return buf;
}

static void test_malformed(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/good.json", g_dir);
    char *good = slurp(path);
    if (!good) {
        FAIL("no good.json");
        return;
    }
    /* Syntax: the missing comma is noticed at the next member. */
    bad_case(good, "\"version\": 1,", "\"version\": 1", "line 4, column 3: expected ','");
    bad_case(good, "\"alpha_us\": 1.2500", "\"alpha_us\": -1.25", "links.shm.oneway.alpha_us");
    bad_case(good, "\"alpha_us\": 1.2500", "\"alpha_us\": \"fast\"", "expected a number");
    bad_case(good, "\"beta_ps\": 100.500, ", "", "links.shm.oneway.beta_ps: missing");
    bad_case(good, "xcoll-profile", "something-else", "format");
    bad_case(good, "\"version\": 1", "\"version\": 2", "version");
    bad_case(good, "\"shm_sync\"", "\"shm_sink\"", "shm_sync: missing");
    bad_case(good, "\"fp16\": {", "\"half\": {", "gamma_ps.fp16: missing");
    bad_case(good, "\"prod\": [10.500, 100.250]", "\"prod\": [10.5]", "[cache, mem]");
    bad_case(good, "\"host\"", "\"hots\"", "host: missing");
    bad_case(good, "[67108864, 180.500]", "[1024, 180.500]", "ladder");
    bad_case(good, "[4096, 1.2500]", "[512, 1.2500]",
             "links.shm.oneway.points: expected an array of [bytes, us] pairs");
    bad_case(good, "[4096, 1.2500]", "[4096, -1]", "links.shm.oneway.points");
    bad_case(good, "\"round_us\": -0.1250", "\"round_us\": \"x\"", "links.shm.round_us");
    bad_case(good, "}\n", "}}\n", "after the end");
    bad_case(good, "{", "[", "line 2, column 11");
    bad_case(good, "\"int8\": [23.000, 33.500]", "\"int8\": [23.000]",
             "codec_ps.int8: expected [encode, decode]");
    bad_case(good, "\"codec_ps\": {", "\"codec_ps\": 3, \"x\": {", "codec_ps: expected an object");
    /* An older profile without codec_ps: twice fp32 sum's gamma. */
    char *cut = strstr(good, ",\n    \"codec_ps\"");
    if (!cut) FAIL("no codec_ps in good.json");
    else {
        strcpy(cut, "\n  }\n}\n");
        snprintf(path, sizeof path, "%s/old.json", g_dir);
        write_file(path, good);
        xc__profile_t o;
        EXPECT_RC(xc__profile_read(path, &o), XC_OK);
        for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
            EXPECT_NEAR(o.codec[f][1], 2 * o.gamma[XC_FLOAT32][XC__GOP_SUM][0]);
    }
    free(good);
    /* Not there at all. */
    snprintf(path, sizeof path, "%s/absent.json", g_dir);
    xc__profile_t p;
    EXPECT_RC(xc__profile_read(path, &p), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), path);
    EXPECT_CONTAINS(xc_last_error(), "cannot open");
    /* Valid JSON, but not an object. */
    snprintf(path, sizeof path, "%s/array.json", g_dir);
    write_file(path, "[1, 2]\n");
    EXPECT_RC(xc__profile_read(path, &p), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "top level: expected an object");
    /* Empty. */
    snprintf(path, sizeof path, "%s/empty.json", g_dir);
    write_file(path, "");
    EXPECT_RC(xc__profile_read(path, &p), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "end of file");
}

/* -------------------------------------------------------- end to end */

typedef struct rank_arg {
    int rank;
    xc_result_t rc;
    char msg[XC__ERRMSG_LEN];
    char source[64];
    char store[96];
} rank_arg_t;

static void *rank_main(void *arg)
{
    rank_arg_t *r = arg;
    char addr[128];
    snprintf(addr, sizeof addr, "file:%s", r->store);
    xc_config_t cfg = XC_CONFIG_INIT;
    cfg.timeout_ms = 20000;
    xc_comm_t *c = NULL;
    r->rc = xc_comm_init(&c, r->rank, 2, addr, &cfg);
    snprintf(r->msg, sizeof r->msg, "%s", xc_last_error());
    if (c) {
        snprintf(r->source, sizeof r->source, "%s", c->profile ? c->profile->source : "");
        int x = r->rank + 1;
        if (xc_allreduce(&x, &x, 1, XC_INT32, XC_SUM, c) != XC_OK || x != 3) r->rc = XC_ERR_INTERNAL;
        xc_comm_destroy(c);
    }
    return NULL;
}

static void two_ranks(const char *tag, rank_arg_t r[2])
{
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].rank = i;
        snprintf(r[i].store, sizeof r[i].store, "%s/store-%s", g_dir, tag);
        pthread_create(&th[i], NULL, rank_main, &r[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}

/* xc__lead_end: where staging stops leading single copy by 10 %. */
static void test_lead_end(void)
{
    const double m[3] = {32768, 65536, 262144};
    /* Staged 1 us + 0.1 ns/B, single copy 4 us + 0.05 ns/B: 1.1 x staged
     * equals single copy where 1.1 + 0.11e-9 m = 4 + 0.05e-9 m, m = 48333
     * B -> 49152 (whole pages). */
    double st[3], cm[3];
    for (int i = 0; i < 3; i++) st[i] = 1e-6 + 0.1e-9 * m[i], cm[i] = 4e-6 + 0.05e-9 * m[i];
    double v = xc__lead_end(m, st, cm, 3, 8192, 1e9);
    if (v != 49152) FAIL("crossing between 32 and 64 KiB: got %.0f, expected 49152", v);
    /* Staging never leads: the configured size. */
    if (!(xc__lead_end(m, cm, st, 3, 8192, 1e9) == 8192)) FAIL("no lead: the configured size");
    /* Staging leads at every size: `beyond`. */
    double slow[3] = {1, 1, 1}, fast[3] = {0.1, 0.1, 0.1};
    if (!(xc__lead_end(m, fast, slow, 3, 8192, 524288) == 524288)) FAIL("lead throughout: beyond");
    /* A lead within 10 % is no lead. */
    double near[3] = {1.05, 1.05, 1.05};
    if (!(xc__lead_end(m, near, slow, 3, 0, 1e9) == 0)) FAIL("a 5 %% lead: none");
    /* Unmeasured (0) staged times end the lead at the size before them. */
    double gap[3] = {0.1, 0, 0.1};
    v = xc__lead_end(m, gap, slow, 3, 0, 1e9);
    if (v != 65536) FAIL("an unmeasured size: got %.0f, expected 65536", v);
    /* One size. */
    if (!(xc__lead_end(m, fast, slow, 1, 0, 65536) == 65536)) FAIL("one size, leading: beyond");
    if (!(xc__lead_end(m, slow, fast, 1, 0, 65536) == 0)) FAIL("one size, not leading: from");
}

static void test_env_profile(void)
{
    char path[128];
    rank_arg_t r[2];
    snprintf(path, sizeof path, "%s/broken.json", g_dir);
    write_file(path, "{\"format\": \"xcoll-profile\", \"version\": 1,\n \"links\": {\"shm\": 7}}");
    setenv("XCOLL_PROFILE", path, 1);
    two_ranks("bad", r);
    for (int i = 0; i < 2; i++) {
        if (r[i].rc != XC_ERR_INVALID)
            FAIL("rank %d with a broken XCOLL_PROFILE: %s (%s)", i, xc_err_name(r[i].rc), r[i].msg);
        EXPECT_CONTAINS(r[i].msg, path);
        EXPECT_CONTAINS(r[i].msg, "links.shm: expected an object");
    }
    snprintf(path, sizeof path, "%s/good.json", g_dir);
    setenv("XCOLL_PROFILE", path, 1);
    two_ranks("good", r);
    for (int i = 0; i < 2; i++) {
        if (r[i].rc != XC_OK) FAIL("rank %d with a good XCOLL_PROFILE: %s (%s)", i,
                                   xc_err_name(r[i].rc), r[i].msg);
        EXPECT_CONTAINS(r[i].source, "good.json");
    }
    unsetenv("XCOLL_PROFILE");
}

/* The point-to-point single-copy threshold from a measurement: as
 * measured (at least 8 KiB) where the node is not crowded, held between
 * 32 and 64 KiB where it is; XCOLL_SHM_P2P_CMA_MIN_KB over both. */
static void test_p2p_threshold(void)
{
    xc_comm_t *c = calloc(1, sizeof *c);
    if (!c) FAIL("out of memory");
    c->cfg.shm_p2p_cma_min_kb = -1;
    const struct {
        int oversub;
        double measured;
        size_t want;
    } k[] = {
        {0, 0, 8 << 10},          {0, 4096, 8 << 10},        {0, 20480, 20480},
        {0, 1 << 20, 1 << 20},    {0, 1e12, 8 << 10},        {1, 0, 64 << 10},
        {1, 8192, 32 << 10},      {1, 40960, 40960},         {1, 1 << 20, 64 << 10},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        c->oversub = k[i].oversub;
        xc__comm_set_p2p_cma_min(c, k[i].measured);
        if (c->p2p_cma_min != k[i].want)
            FAIL("p2p threshold%s from %.0f B: %zu, want %zu", k[i].oversub ? " (crowded)" : "",
                 k[i].measured, c->p2p_cma_min, k[i].want);
    }
    c->cfg.shm_p2p_cma_min_kb = 16;
    for (int o = 0; o < 2; o++) {
        c->oversub = o;
        xc__comm_set_p2p_cma_min(c, 40960);
        EXPECT_TRUE(c->p2p_cma_min == 16 << 10);
    }
    free(c);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/xcoll-test-model.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    unsetenv("XCOLL_PROFILE");
    test_tcp_allreduce();
    test_other_collectives();
    test_link_classes();
    test_dbtree_nodes();
    test_topo_measured();
    test_compressed();
    test_crowding();
    test_shm_rules();
    test_argmin_grid();
    test_selector();
    test_roundtrip();
    test_malformed();
    test_env_profile();
    test_lead_end();
    test_p2p_threshold();
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    if (failures) {
        fprintf(stderr, "test_model: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_model: ok\n");
    return 0;
}
