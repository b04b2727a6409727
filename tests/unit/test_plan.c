/*
 * test_plan.c -- the step planner (src/model/plan.c, xcoll-plan) against
 * the formulas it must reproduce exactly:
 *   - data parallel: all-reduce 2 (N-1)/N Psi per rank; ZeRO 1-2: a
 *     reduce-scatter and an all-gather, (N-1)/N Psi each (2 Psi like DP);
 *     ZeRO-3: 3 Psi;
 *   - tensor parallel (Megatron): 4 all-reduces of b s h per layer per
 *     micro-batch, 2 (t-1)/t of each sent;
 *   - pipeline: b s h per micro-batch across a stage boundary, forward and
 *     backward; bubble (p-1)/(m+p-1);
 *   - MoE: 4 all-to-alls of b s k h per MoE layer per micro-batch;
 * and: every time is the runtime selector's price for the group's
 * topology (one model) -- with the buffers in the cache (--cache hot) or
 * evicted (the default), the runtime's algorithm either way; groups span
 * the right number of nodes; keeping
 * TP inside a node and compressing a slow DP all-reduce are predicted to
 * gain; bad layouts are XC_ERR_INVALID.
 */
#include "../../src/algo/algos.h"
#include "../../src/algo/shm_coll.h"
#include "../../src/model/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "expect.h"

#define NEAR(got, want)                                                        \
    do {                                                                       \
        double g_ = (got), w_ = (want);                                        \
        if (!(fabs(g_ - w_) <= 1e-9 * fabs(w_) + 1e-12))                       \
            FAIL("%s = %.12g, want %s = %.12g", #got, g_, #want, w_);          \
    } while (0)

static xc__plan_in_t base(void)
{
    xc__plan_in_t in = {.params = 0, .layers = 8, .hidden = 1024, .seq = 512, .vocab = 1000,
                        .experts = 0, .topk = 1, .moe_every = 1, .act_bytes = 2, .grad_bytes = 2,
                        .micro_batch = 2, .global_batch = 64, .dp = 4, .tp = 2, .pp = 2, .ep = 1,
                        .zero = 0, .nodes = 4, .rpn = 4, .flops = 100e12, .bucket_mb = 0,
                        .compress = XC_COMPRESS_NONE, .shm = 0};
    return in;
}

static const xc__plan_row_t *row(const xc__plan_out_t *o, const char *prefix)
{
    for (int i = 0; i < o->nrows; i++)
        if (!strncmp(o->row[i].what, prefix, strlen(prefix))) return &o->row[i];
    FAIL("no row \"%s\"", prefix);
    return NULL;
}

/* The selector's own price of a call on a group (what the planner must use). */
static double selector(const xc__profile_t *p, xc_coll_t coll, int g, int nodes, size_t count,
                       xc_dtype_t dt)
{
    xc__model_topo_t t;
    memset(&t, 0, sizeof t);
    t.nranks = g, t.nnodes = nodes, t.ppn = (g + nodes - 1) / nodes, t.blocked = 1;
    t.slot_bytes = 256 * 1024, t.cma_min = 64 * 1024;
    xc__model_call_t c = {coll, count, dt, XC_SUM, 0};
    double v = -1;
    xc__model_choose(p, &t, &c, &v, NULL, NULL);
    return v;
}

static void test_volumes(const xc__profile_t *p)
{
    xc__plan_in_t in = base();
    xc__plan_out_t o;
    if (xc__plan(p, &in, &o) != XC_OK) {
        FAIL("plan: %s", xc_last_error());
        return;
    }
    double h = in.hidden, s = in.seq, b = in.micro_batch;
    double P = in.layers * 12.0 * h * h + in.vocab * h, psi = P / (in.tp * in.pp) * 2;
    int m = in.global_batch / (in.micro_batch * in.dp);
    if (o.micro != m) FAIL("micro-batches %d, want %d", o.micro, m);
    const xc__plan_row_t *r = row(&o, "dp gradient all-reduce");
    if (r) {
        NEAR(r->sent, 2.0 * (in.dp - 1) / in.dp * psi);
        NEAR(r->calls, 1);
        NEAR(r->msg, psi);
        NEAR(r->t_call, selector(p, XC_COLL_ALLREDUCE, in.dp, 4, (size_t)(psi / 2), XC_BFLOAT16));
        if (r->span != 4) FAIL("dp group spans %d nodes, want 4 (stride 4 over 4-rank nodes)", r->span);
    }
    r = row(&o, "tp activation all-reduce");
    if (r) {
        double act = b * s * h * 2;
        NEAR(r->calls, 4.0 * in.layers / in.pp * m);
        NEAR(r->msg, act);
        NEAR(r->sent, r->calls * 2.0 * (in.tp - 1) / in.tp * act);
        if (r->span != 1) FAIL("tp group spans %d nodes, want 1", r->span);
        NEAR(r->t_call, selector(p, XC_COLL_ALLREDUCE, in.tp, 1, (size_t)(act / 2), XC_BFLOAT16));
    }
    r = row(&o, "pp send/recv");
    if (r) {
        NEAR(r->calls, 2.0 * m);
        NEAR(r->msg, b * s * h * 2);
        NEAR(r->sent, 2.0 * m * b * s * h * 2);
    }
    NEAR(o.bubble, (double)(in.pp - 1) / (m + in.pp - 1));
    NEAR(o.compute_s, 6.0 * P * in.global_batch * s / (in.dp * in.tp * in.pp) / in.flops);
    /* batch bucketed: 25 MiB buckets, the same bytes in more calls */
    in.bucket_mb = 25;
    xc__plan(p, &in, &o);
    r = row(&o, "dp gradient all-reduce");
    if (r) {
        NEAR(r->calls, ceil(psi / (25.0 * 1048576)));
        NEAR(r->sent, 2.0 * (in.dp - 1) / in.dp * psi);
    }
    /* ZeRO */
    for (int z = 1; z <= 3; z++) {
        in = base();
        in.zero = z;
        xc__plan(p, &in, &o);
        const xc__plan_row_t *rs = row(&o, "zero gradient reduce-scatter"), *ag = row(&o, "zero");
        const xc__plan_row_t *g = NULL;
        for (int i = 0; i < o.nrows; i++)
            if (o.row[i].coll == XC_COLL_ALLGATHER) g = &o.row[i];
        if (!rs || !ag || !g) continue;
        double unit = (double)(in.dp - 1) / in.dp * psi;
        NEAR(rs->sent, unit);
        NEAR(g->sent, (z == 3 ? 2 : 1) * unit);
        NEAR(rs->sent + g->sent, (z == 3 ? 3 : 2) * unit); /* 2 Psi like DP; 3 Psi */
        NEAR(rs->t_call, selector(p, XC_COLL_REDUCE_SCATTER, in.dp, 4, (size_t)(psi / 2 / in.dp), XC_BFLOAT16));
    }
    /* MoE: 4 all-to-alls of b s k h per MoE layer per micro-batch */
    in = base();
    in.experts = 8, in.topk = 2, in.moe_every = 2, in.ep = 4;
    xc__plan(p, &in, &o);
    r = row(&o, "moe token all-to-all");
    if (r) {
        double tok = b * s * 2 * h * 2;
        NEAR(r->calls, 4.0 * (in.layers / in.pp / 2) * m);
        NEAR(r->msg, tok);
        NEAR(r->sent, r->calls * 3.0 / 4 * tok);
    }
}

/* Sequence parallelism, interleaved stages, MLP blocks. */
static void test_layouts(const xc__profile_t *p)
{
    xc__plan_in_t in = base();
    xc__plan_out_t plain, sp;
    xc__plan(p, &in, &plain);
    in.seq_parallel = 1;
    if (xc__plan(p, &in, &sp) != XC_OK) FAIL("seq parallel: %s", xc_last_error());
    const xc__plan_row_t *ar = row(&plain, "tp activation all-reduce");
    const xc__plan_row_t *ag = row(&sp, "tp sequence all-gather"), *rs = row(&sp, "tp sequence reduce-scatter");
    if (ar && ag && rs) {
        /* the same bytes: an all-gather and a reduce-scatter per all-reduce */
        NEAR(ag->calls, ar->calls);
        NEAR(rs->calls, ar->calls);
        NEAR(ag->sent + rs->sent, ar->sent);
        NEAR(ag->t_call, selector(p, XC_COLL_ALLGATHER, in.tp, 1, (size_t)(ag->msg / 2 / in.tp), XC_BFLOAT16));
        NEAR(rs->t_call, selector(p, XC_COLL_REDUCE_SCATTER, in.tp, 1, (size_t)(rs->msg / 2 / in.tp), XC_BFLOAT16));
    }
    /* virtual stages: v times the pipeline sends, the bubble (p-1)/(v m+p-1) */
    in = base();
    in.pp = 4, in.dp = 2, in.layers = 16, in.global_batch = 16;
    xc__plan_out_t v1, v2;
    xc__plan(p, &in, &v1);
    in.vpp = 2;
    if (xc__plan(p, &in, &v2) != XC_OK) FAIL("vpp 2: %s", xc_last_error());
    int m = in.global_batch / (in.micro_batch * in.dp);
    NEAR(v2.bubble, 3.0 / (2.0 * m + 3));
    NEAR(v1.bubble, 3.0 / (m + 3.0));
    if (row(&v1, "pp") && row(&v2, "pp")) NEAR(row(&v2, "pp")->calls, 2 * row(&v1, "pp")->calls);
    in.vpp = 3; /* 16 layers over 4 stages x 3 */
    if (xc__plan(p, &in, &v2) != XC_ERR_INVALID) FAIL("layers not a multiple of pp x vpp accepted");
    /* MLP blocks: one TP all-reduce per pass, 2 h ffn parameters */
    in = base();
    in.mlp_only = 1, in.ffn = 3000, in.vocab = 0;
    xc__plan_out_t mo;
    xc__plan(p, &in, &mo);
    const xc__plan_row_t *r = row(&mo, "tp activation all-reduce");
    if (r) NEAR(r->calls, 2.0 * in.layers / in.pp * mo.micro);
    NEAR(mo.compute_s, 6.0 * in.layers * 2.0 * in.hidden * in.ffn * in.global_batch * in.seq /
                           (in.dp * in.tp * in.pp) / in.flops);
}

static void test_advice_and_errors(const xc__profile_t *p)
{
    /* TP over two nodes against TP inside a node with the pipeline doubled */
    xc__plan_in_t in = base();
    in.tp = 8, in.pp = 1, in.dp = 2, in.layers = 8;
    xc__plan_out_t across, inside;
    if (xc__plan(p, &in, &across) != XC_OK) FAIL("%s", xc_last_error());
    if (row(&across, "tp")->span != 2) FAIL("tp 8 on 4-rank nodes spans %d", row(&across, "tp")->span);
    in.tp = 4, in.pp = 2;
    if (xc__plan(p, &in, &inside) != XC_OK) FAIL("%s", xc_last_error());
    if (!(inside.step_s < across.step_s))
        FAIL("TP inside a node (%.3f s) not predicted faster than across (%.3f s)", inside.step_s,
             across.step_s);
    /* compression of a network-bound DP all-reduce */
    in = base();
    in.tp = 1, in.pp = 1, in.dp = 16, in.flops = 1e15, in.grad_bytes = 4;
    in.nodes = 16, in.rpn = 1; /* one rank per node: the wire is the bottleneck */
    xc__plan_out_t plain, int8;
    xc__plan(p, &in, &plain);
    in.compress = XC_COMPRESS_INT8;
    xc__plan(p, &in, &int8);
    const xc__plan_row_t *a = row(&plain, "dp"), *c = row(&int8, "dp");
    if (a && c) {
        NEAR(c->sent, a->sent * (1 + 4.0 / 256) / 4);
        if (!(c->t_step < a->t_step)) FAIL("int8 DP not predicted faster on a slow link");
    }
    /* bad layouts */
    in = base();
    in.dp = 3;
    if (xc__plan(p, &in, &plain) != XC_ERR_INVALID) FAIL("dp x tp x pp != ranks accepted");
    in = base();
    in.global_batch = 63;
    if (xc__plan(p, &in, &plain) != XC_ERR_INVALID) FAIL("batch not a multiple accepted");
    in = base();
    in.layers = 7;
    if (xc__plan(p, &in, &plain) != XC_ERR_INVALID) FAIL("layers not a multiple of pp accepted");
    in = base();
    in.heads = 12; /* tp 2 divides 12, 12 divides 1024? no */
    if (xc__plan(p, &in, &plain) != XC_ERR_INVALID) FAIL("heads not dividing hidden accepted");
    in.heads = 16, in.tp = 4, in.dp = 2;
    if (xc__plan(p, &in, &plain) != XC_OK) FAIL("16 heads, tp 4: %s", xc_last_error());
    in.heads = 2;
    if (xc__plan(p, &in, &plain) != XC_ERR_INVALID) FAIL("tp 4 not dividing 2 heads accepted");
    in = base();
    in.grad_accum = 3; /* global 64 = 2 x 4 x 8, not 3 */
    if (xc__plan(p, &in, &plain) != XC_ERR_INVALID) FAIL("inconsistent accumulation accepted");
    in.param_bytes = 3, in.grad_accum = 0;
    if (xc__plan(p, &in, &plain) != XC_ERR_INVALID) FAIL("3-byte parameters accepted");
}

/* Gradient accumulation stands for the global batch (B = b dp K: the
 * same plan); parameters in their own dtype set ZeRO's gathers; every
 * row names the link class it crosses. */
static void test_inputs(const xc__profile_t *p)
{
    xc__plan_in_t in = base();
    xc__plan_out_t a, b;
    if (xc__plan(p, &in, &a) != XC_OK) FAIL("%s", xc_last_error());
    in.global_batch = 0, in.grad_accum = 64 / (in.micro_batch * in.dp);
    if (xc__plan(p, &in, &b) != XC_OK) FAIL("grad accum: %s", xc_last_error());
    NEAR(b.step_s, a.step_s);
    NEAR(b.comm_s, a.comm_s);
    if (b.micro != a.micro) FAIL("grad accum: %d micro-batches, want %d", b.micro, a.micro);
    in = base();
    in.zero = 1, in.grad_bytes = 2, in.param_bytes = 4;
    if (xc__plan(p, &in, &a) != XC_OK) FAIL("param bytes: %s", xc_last_error());
    const xc__plan_row_t *rs = row(&a, "zero gradient"), *ag = row(&a, "zero parameter");
    if (rs && ag) {
        NEAR(ag->msg, 2 * rs->msg);
        NEAR(ag->sent, 2 * rs->sent);
    }
    for (int i = 0; i < a.nrows; i++) {
        int want = a.row[i].span > 1 ? XC__LINK_TCP_NET : XC__LINK_TCP_LOCAL; /* no shm here */
        if (a.row[i].link != want) FAIL("row %s: link %d, want %d", a.row[i].what, a.row[i].link, want);
    }
}

/* Cold calls: by default the plan prices each collective as one that
 * follows compute (the profile's measured cold-call term added to the
 * runtime's price), --cache hot as back-to-back calls; the algorithm is
 * the runtime's choice either way. */
static void test_cache(const xc__profile_t *p0)
{
    xc__profile_t p = *p0;
    p.cold_alpha = 50e-6, p.cold_beta = 2e-10;
    xc__plan_in_t in = base();
    in.dp = 1, in.pp = 1, in.tp = 2, in.nodes = 1, in.rpn = 2, in.global_batch = 2;
    xc__plan_out_t cold, hot;
    if (xc__plan(&p, &in, &cold) != XC_OK) FAIL("cold: %s", xc_last_error());
    in.hot = 1;
    if (xc__plan(&p, &in, &hot) != XC_OK) FAIL("hot: %s", xc_last_error());
    const xc__plan_row_t *c = row(&cold, "tp activation all-reduce");
    const xc__plan_row_t *h = row(&hot, "tp activation all-reduce");
    if (!c || !h) return;
    size_t count = (size_t)(h->msg / 2);
    NEAR(h->t_call, selector(&p, XC_COLL_ALLREDUCE, 2, 1, count, XC_BFLOAT16));
    if (c->algo != h->algo) FAIL("cold and hot plans pick different algorithms");
    /* an all-reduce's working set: its input and its output */
    NEAR(c->t_call, h->t_call + 50e-6 + 2e-10 * 2 * h->msg);
    NEAR(cold.comm_s - hot.comm_s, c->calls * (c->t_call - h->t_call));
    /* --buffers xcoll: the profile's term for xc_mem_alloc's buffers */
    p.cold_huge_alpha = 20e-6, p.cold_huge_beta = 0.5e-10, p.cold_xcmem = 1;
    in.hot = 0, in.xc_mem = 1;
    xc__plan_out_t cx;
    if (xc__plan(&p, &in, &cx) != XC_OK) FAIL("xc_mem: %s", xc_last_error());
    const xc__plan_row_t *x = row(&cx, "tp activation all-reduce");
    if (x) NEAR(x->t_call, h->t_call + 20e-6 + 0.5e-10 * 2 * h->msg);
    p.cold_huge_alpha = 0, p.cold_huge_beta = 0, p.cold_xcmem = 0;
    in.xc_mem = 0;
    /* the compressed DP all-reduce pays the same term, so that advice
     * compares like with like */
    in = base();
    in.tp = 1, in.pp = 1, in.dp = 16, in.nodes = 4, in.rpn = 4, in.compress = XC_COMPRESS_INT8;
    if (xc__plan(&p, &in, &cold) != XC_OK) FAIL("int8 cold: %s", xc_last_error());
    in.hot = 1;
    if (xc__plan(&p, &in, &hot) != XC_OK) FAIL("int8 hot: %s", xc_last_error());
    c = row(&cold, "dp gradient all-reduce, compressed");
    h = row(&hot, "dp gradient all-reduce, compressed");
    if (c && h) NEAR(c->t_call, h->t_call + 50e-6 + 2e-10 * 2 * h->msg);
}

/* A pair on one node prices with the profile's measured single-copy
 * floors, as its runtime does (xc__model_topo_measured): ZeRO-3's
 * all-gathers of ~100 MB blocks single copy, or staged where the profile
 * measured staging ahead at every size (XC__SHM_AG_CMA_NEVER). */
static double selector_pair_shm(const xc__profile_t *p, xc_coll_t coll, size_t count,
                                xc_dtype_t dt)
{
    xc__model_topo_t t;
    memset(&t, 0, sizeof t);
    t.nranks = 2, t.nnodes = 1, t.ppn = 2, t.blocked = 1;
    t.shm = t.chans = t.cma = 1, t.coop = 1;
    t.slot_bytes = 256 * 1024, t.cma_min = 64 * 1024;
    xc__model_topo_measured(&t, p, -1);
    xc__model_call_t c = {coll, count, dt, XC_SUM, 0};
    double v = -1;
    xc__model_choose(p, &t, &c, &v, NULL, NULL);
    return v;
}

static void test_pair_floors(void)
{
    /* copies in memory and staged reads far faster than the channels and
     * single copy: staged, the pair's all-gather beats the ring */
    xc__profile_t p;
    xc__plan_profile(&p, 3e-6, 0.5e9, 10e-6, 1.25e9, 1000e9);
    p.shm_take = 1 / 1000e9;
    xc__plan_in_t in = base();
    in.dp = 2, in.tp = 1, in.pp = 1, in.nodes = 1, in.rpn = 2, in.global_batch = 4;
    in.zero = 3, in.shm = 1, in.hot = 1;
    in.layers = 1, in.hidden = 256, in.seq = 64; /* ~1.3 MB of parameters */
    double t_call[2];
    for (int never = 0; never < 2; never++) {
        p.shm_ag_cma_min = never ? (double)XC__SHM_AG_CMA_NEVER : 0;
        xc__plan_out_t o;
        if (xc__plan(&p, &in, &o) != XC_OK) {
            FAIL("pair plan: %s", xc_last_error());
            return;
        }
        const xc__plan_row_t *g = NULL;
        for (int i = 0; i < o.nrows; i++)
            if (o.row[i].coll == XC_COLL_ALLGATHER) g = &o.row[i];
        if (!g) {
            FAIL("pair plan: no all-gather row");
            return;
        }
        t_call[never] = g->t_call;
        NEAR(g->t_call, selector_pair_shm(&p, XC_COLL_ALLGATHER, (size_t)(g->msg / 2 / 2),
                                          XC_BFLOAT16));
    }
    if (!(t_call[0] != t_call[1]))
        FAIL("the pair's all-gather priced %g s with and without its measured floor: the floor "
             "is not taken",
             t_call[0]);
}

/* Overlap off: every row on the critical path, nothing hidden; the step
 * is compute plus all communication, stretched by the bubble. */
static void test_overlap(const xc__profile_t *p)
{
    xc__plan_in_t in = base();
    xc__plan_out_t on, off;
    if (xc__plan(p, &in, &on) != XC_OK) FAIL("overlap on: %s", xc_last_error());
    in.no_overlap = 1;
    if (xc__plan(p, &in, &off) != XC_OK) FAIL("overlap off: %s", xc_last_error());
    NEAR(off.comm_s, on.comm_s);
    NEAR(off.exposed_s, off.comm_s);
    NEAR(off.step_s, (off.compute_s + off.comm_s) / (1 - off.bubble));
    for (int i = 0; i < off.nrows; i++)
        if (off.row[i].hidden_by) FAIL("overlap off: row %s still hidden", off.row[i].what);
    const xc__plan_row_t *dp = row(&on, "dp gradient all-reduce");
    if (dp && !dp->hidden_by) FAIL("overlap on: the DP all-reduce should overlap backward");
    if (!(off.step_s > on.step_s)) FAIL("overlap off (%g s) should not be faster than on (%g s)",
                                        off.step_s, on.step_s);
}

int main(void)
{
    xc__profile_t p;
    /* intra 3 us, 100 GB/s; inter 10 us, 1.25 GB/s (10 Gbit/s) */
    xc__plan_profile(&p, 3e-6, 100e9, 10e-6, 1.25e9, 20e9);
    test_volumes(&p);
    test_layouts(&p);
    test_advice_and_errors(&p);
    test_cache(&p);
    test_overlap(&p);
    test_inputs(&p);
    test_pair_floors();
    if (failures) {
        fprintf(stderr, "test_plan: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_plan: ok\n");
    return 0;
}
