/*
 * plan.c -- the communication plan of one training step (plan.h,
 * docs/plan.md).  Volumes are the seed's formulas; times come from the
 * runtime selector's own cost model (xc__model_choose) under a topology
 * made for each group (its ranks, the nodes it spans).
 *
 * Placement: ranks are numbered TP fastest, then PP, then DP (Megatron's
 * order), node by node; a group's span is the number of distinct nodes
 * its ranks fall on.
 */
#include "plan.h"
#include "../algo/algos.h"
#include "../compress/codec.h"

#include <math.h>
#include <string.h>

/* Nodes spanned by the group of `size` ranks with stride `stride` that
 * starts at rank 0, rpn ranks per node. */
static int span(int size, int stride, int rpn)
{
    int n = 0, last = -1;
    for (int i = 0; i < size; i++) {
        int node = i * stride / rpn;
        if (node != last) n++, last = node;
    }
    return n;
}

static void topo(const xc__profile_t *p, const xc__plan_in_t *in, int g, int nodes,
                 xc__model_topo_t *t)
{
    memset(t, 0, sizeof *t);
    t->nranks = g;
    t->nnodes = nodes;
    t->ppn = (g + nodes - 1) / nodes;
    t->blocked = 1;
    t->shm = in->shm && nodes == 1 && g > 1;
    t->chans = t->shm;
    t->cma = t->shm;
    t->slot_bytes = 256 * 1024;
    t->cma_min = 64 * 1024;
    t->cores = 0; /* the cluster's, not this machine's: no crowding */
    t->crowded = 0;
    t->coop = 1;
    xc__model_topo_measured(t, p, -1); /* the pair's floors, as its runtime takes them */
}

/* How the plan marks a collective's call: hot (back to back), or cold on
 * the job's kind of buffers. */
static int cold_kind(const xc__plan_in_t *in)
{
    return in->hot ? 0 : in->xc_mem ? XC__COLD_XCMEM : XC__COLD_MALLOC;
}

/* The selector's price of one collective of `bytes` per rank (the count
 * argument of the public call) on a group; its algorithm in *algo. */
static double price(const xc__profile_t *p, const xc__plan_in_t *in, xc_coll_t coll, int g,
                    int nodes, double bytes, xc_dtype_t dt, int *algo)
{
    *algo = XC__ALGO_NONE;
    if (g <= 1) return 0;
    xc__model_topo_t t;
    topo(p, in, g, nodes, &t);
    size_t es = xc__dtype_size(dt);
    xc__model_call_t c = {coll, (size_t)(bytes / es), dt, XC_SUM, 0};
    /* the public calls' count: per block for these three */
    if (coll == XC_COLL_REDUCE_SCATTER || coll == XC_COLL_ALLGATHER || coll == XC_COLL_ALLTOALL)
        c.count /= (size_t)g;
    double v = -1;
    /* The runtime's choice (it prices calls as they come, hot); its time
     * with the buffers out of the cache unless the plan says hot. */
    *algo = xc__model_choose(p, &t, &c, &v, NULL, NULL);
    if (*algo != XC__ALGO_NONE && !in->hot) {
        c.cold = cold_kind(in);
        v = xc__model_predict(p, &t, *algo, &c);
    }
    return v > 0 ? v : 0;
}

static xc__plan_row_t *add(xc__plan_out_t *o, const char *what, xc_coll_t coll, int g, int sp,
                           double calls, double msg, double sent, int hidden_by)
{
    xc__plan_row_t *r = &o->row[o->nrows++];
    memset(r, 0, sizeof *r);
    r->what = what, r->coll = coll, r->group = g, r->span = sp;
    r->calls = calls, r->msg = msg, r->sent = sent, r->hidden_by = hidden_by;
    return r;
}

xc_result_t xc__plan(const xc__profile_t *p, const xc__plan_in_t *in, xc__plan_out_t *o)
{
    memset(o, 0, sizeof *o);
    int dp = in->dp, tp = in->tp, pp = in->pp, ranks = dp * tp * pp;
    if (dp < 1 || tp < 1 || pp < 1 || in->nodes < 1 || in->rpn < 1 ||
        ranks != in->nodes * in->rpn)
        return xc__err(XC_ERR_INVALID, "plan: dp %d x tp %d x pp %d = %d ranks, but the cluster "
                                       "has %d nodes x %d ranks", dp, tp, pp, ranks, in->nodes,
                       in->rpn);
    if (in->micro_batch < 1 || in->grad_accum < 0 ||
        (in->global_batch == 0 && in->grad_accum == 0))
        return xc__err(XC_ERR_INVALID, "plan: give the global batch or the gradient accumulation "
                                       "(micro-batch %d)", in->micro_batch);
    int global = in->global_batch ? in->global_batch : in->micro_batch * dp * in->grad_accum;
    if (global % (in->micro_batch * dp))
        return xc__err(XC_ERR_INVALID, "plan: the global batch %d is not a multiple of micro-batch "
                                       "%d x dp %d", global, in->micro_batch, dp);
    if (in->grad_accum && global != in->micro_batch * dp * in->grad_accum)
        return xc__err(XC_ERR_INVALID, "plan: global batch %d != micro-batch %d x dp %d x "
                                       "gradient accumulation %d", global, in->micro_batch, dp,
                       in->grad_accum);
    if (in->heads < 0 || (in->heads > 0 && (in->heads % tp || in->hidden % in->heads)))
        return xc__err(XC_ERR_INVALID, "plan: %d heads: tp %d must divide them, and they the "
                                       "hidden size %d", in->heads, tp, in->hidden);
    if (in->param_bytes != 0 && in->param_bytes != 2 && in->param_bytes != 4)
        return xc__err(XC_ERR_INVALID, "plan: parameter bytes %d (2 or 4)", in->param_bytes);
    int v = in->vpp > 1 ? in->vpp : 1;
    if (in->layers < 1 || in->hidden < 1 || in->seq < 1 || in->ffn < 0 || in->layers % (pp * v) ||
        (v > 1 && pp < 2))
        return xc__err(XC_ERR_INVALID, "plan: %d layers (a multiple of pp %d x virtual stages %d, "
                                       "which need pp > 1), hidden %d, seq %d",
                       in->layers, pp, v, in->hidden, in->seq);
    if (in->zero < 0 || in->zero > 3 || (in->ep > 1 && dp % in->ep) ||
        (in->experts && (in->topk < 1 || in->moe_every < 1)))
        return xc__err(XC_ERR_INVALID, "plan: zero %d (0-3), ep %d (divides dp %d), experts %d "
                                       "top-%d every %d", in->zero, in->ep, dp, in->experts,
                       in->topk, in->moe_every);
    double h = in->hidden, s = in->seq, b = in->micro_batch;
    double ffn = in->ffn > 0 ? in->ffn : 4 * h;
    /* a transformer layer: attention 4 h^2 + MLP 2 h ffn; an MLP block: 2 h ffn */
    double per_layer = (in->mlp_only ? 0 : 4 * h * h) + 2 * h * ffn;
    double P = in->params > 0 ? in->params : in->layers * per_layer + (double)in->vocab * h;
    int m = global / (in->micro_batch * dp);
    o->micro = m;
    double psi = P / (tp * pp) * in->grad_bytes; /* the gradients one DP group reduces */
    /* the parameters ZeRO gathers (their own dtype) */
    double psi_p = P / (tp * pp) * (in->param_bytes ? in->param_bytes : in->grad_bytes);
    double act = b * s * h * in->act_bytes;      /* one micro-batch's activations */
    int lps = in->layers / pp;
    int sp_tp = span(tp, 1, in->rpn), sp_pp = span(pp, tp, in->rpn), sp_dp = span(dp, tp * pp, in->rpn);
    xc_dtype_t gdt = in->grad_bytes == 2 ? XC_BFLOAT16 : XC_FLOAT32;
    xc_dtype_t adt = in->act_bytes == 2 ? XC_BFLOAT16 : XC_FLOAT32;
    xc_dtype_t pdt = (in->param_bytes ? in->param_bytes : in->grad_bytes) == 2 ? XC_BFLOAT16
                                                                              : XC_FLOAT32;

    /* Data parallel: the gradients. */
    if (dp > 1) {
        if (in->zero == 0) {
            double bucket = in->bucket_mb > 0 ? in->bucket_mb * 1048576 : psi;
            double calls = ceil(psi / bucket), msg = psi / calls;
            xc__plan_row_t *r = add(o, "dp gradient all-reduce", XC_COLL_ALLREDUCE, dp, sp_dp, calls,
                                    msg, 2.0 * (dp - 1) / dp * psi, 1);
            if (in->compress != XC_COMPRESS_NONE) {
                xc__model_topo_t t;
                topo(p, in, dp, sp_dp, &t);
                r->what = "dp gradient all-reduce, compressed";
                /* bytes per value on the wire: codes and the per-block scale */
                double w = (double)xc__codec_block_bytes(in->compress) / XC_COMPRESS_BLOCK +
                           (xc__codec_scaled(in->compress) ? 4.0 / XC_COMPRESS_BLOCK : 0);
                r->sent *= w / in->grad_bytes;
                size_t count = (size_t)(msg / in->grad_bytes);
                xc__model_call_t c = {XC_COLL_ALLREDUCE, count, gdt, XC_AVG, cold_kind(in)};
                r->t_call = xc__model_compressed(p, &t, count, gdt, XC_AVG, in->compress) +
                            xc__model_cold(p, &t, &c);
                r->algo = XC__ALGO_NONE;
            } else {
                r->t_call = price(p, in, XC_COLL_ALLREDUCE, dp, sp_dp, msg, gdt, &r->algo);
            }
        } else {
            /* ZeRO: per step a reduce-scatter of the gradients and an
             * all-gather of the parameters (stages 1-2), two all-gathers
             * (forward, backward) with stage 3. */
            xc__plan_row_t *r = add(o, "zero gradient reduce-scatter", XC_COLL_REDUCE_SCATTER, dp,
                                    sp_dp, 1, psi, (double)(dp - 1) / dp * psi, in->zero >= 2 ? 1 : 0);
            r->t_call = price(p, in, XC_COLL_REDUCE_SCATTER, dp, sp_dp, psi, gdt, &r->algo);
            r = add(o, in->zero == 3 ? "zero-3 parameter all-gathers" : "zero parameter all-gather",
                    XC_COLL_ALLGATHER, dp, sp_dp, in->zero == 3 ? 2 : 1, psi_p,
                    (in->zero == 3 ? 2.0 : 1.0) * (dp - 1) / dp * psi_p, in->zero == 3 ? 2 : 0);
            r->t_call = price(p, in, XC_COLL_ALLGATHER, dp, sp_dp, psi_p, pdt, &r->algo);
        }
    }
    /* Tensor parallel: Megatron's all-reduce of b s h after attention and
     * after the MLP in each pass (4 per layer per micro-batch; an MLP
     * block alone, 2).  Sequence parallel: each becomes an all-gather and a
     * reduce-scatter of the same b s h, the same bytes in two calls. */
    if (tp > 1) {
        double n = (in->mlp_only ? 2.0 : 4.0) * lps * m, ring = (double)(tp - 1) / tp * act;
        if (in->seq_parallel) {
            xc__plan_row_t *r = add(o, "tp sequence all-gather", XC_COLL_ALLGATHER, tp, sp_tp, n,
                                    act, n * ring, 0);
            r->t_call = price(p, in, XC_COLL_ALLGATHER, tp, sp_tp, act, adt, &r->algo);
            r = add(o, "tp sequence reduce-scatter", XC_COLL_REDUCE_SCATTER, tp, sp_tp, n, act,
                    n * ring, 0);
            r->t_call = price(p, in, XC_COLL_REDUCE_SCATTER, tp, sp_tp, act, adt, &r->algo);
        } else {
            xc__plan_row_t *r = add(o, "tp activation all-reduce", XC_COLL_ALLREDUCE, tp, sp_tp, n,
                                    act, n * 2 * ring, 0);
            r->t_call = price(p, in, XC_COLL_ALLREDUCE, tp, sp_tp, act, adt, &r->algo);
        }
    }
    /* Pipeline: b s h per micro-batch across each stage boundary, forward
     * and backward (a middle stage sends both ways); with v virtual stages
     * a micro-batch passes each rank v times. */
    if (pp > 1) {
        int lc = sp_pp > 1 ? XC__LINK_TCP_NET : (in->shm ? XC__LINK_SHM : XC__LINK_TCP_LOCAL);
        const xc__line_t *l = &p->link[lc].line[XC__ONEWAY];
        int big = act >= xc__line_big_from(&p->link[lc], XC__ONEWAY);
        xc__plan_row_t *r = add(o, "pp send/recv", XC_COLL_SEND, 2, sp_pp > 1 ? 2 : 1, 2.0 * m * v,
                                act, 2.0 * m * v * act, 0);
        r->algo = XC__ALGO_NONE;
        r->t_call = big ? l->big_alpha + act * l->big_beta : l->alpha + act * l->beta;
    }
    /* Experts: per MoE layer per micro-batch, dispatch and combine forward
     * and backward: 4 all-to-alls of b s k h over the EP group. */
    if (in->experts > 0 && in->ep > 1) {
        int ep = in->ep, moe_layers = lps / in->moe_every;
        double tok = b * s * in->topk * h * in->act_bytes;
        int sp_ep = span(ep, tp * pp, in->rpn);
        xc__plan_row_t *r = add(o, "moe token all-to-all", XC_COLL_ALLTOALL, ep, sp_ep,
                                4.0 * moe_layers * m, tok, 4.0 * moe_layers * m * (ep - 1) / ep * tok, 0);
        r->t_call = price(p, in, XC_COLL_ALLTOALL, ep, sp_ep, tok, adt, &r->algo);
    }
    /* Compute: 6 P tokens FLOPs per step over all ranks (forward 2, backward 4). */
    double tokens = (double)global * s;
    o->compute_s = in->flops > 0 ? 6.0 * P * tokens / ranks / in->flops : 0;
    double fwd = o->compute_s / 3, bwd = 2 * o->compute_s / 3;
    /* by[0]: on the critical path (in the pipeline); by[1]: overlaps
     * backward; by[2]: overlaps both passes (ZeRO-3's gathers) */
    double by[3] = {0, 0, 0};
    for (int i = 0; i < o->nrows; i++) {
        xc__plan_row_t *r = &o->row[i];
        if (in->no_overlap) r->hidden_by = 0;
        r->link = r->span > 1 ? XC__LINK_TCP_NET : in->shm ? XC__LINK_SHM : XC__LINK_TCP_LOCAL;
        r->t_step = r->calls * r->t_call;
        o->comm_s += r->t_step;
        by[r->hidden_by] += r->t_step;
    }
    /* Overlappable traffic hides behind the pass it runs beside; the
     * excess is exposed. */
    double crit = by[0], hid = by[1] + by[2], room = bwd + (by[2] > 0 ? fwd : 0);
    double exposed = hid > room ? hid - room : 0;
    /* the interleaved schedule's bubble: (p-1)/(v m) of the ideal step */
    o->bubble = pp > 1 ? (double)(pp - 1) / ((double)v * m + pp - 1) : 0;
    double pipe = (o->compute_s + crit) / (1 - o->bubble);
    o->exposed_s = exposed + crit; /* the bubble is idle time, not communication */
    o->step_s = pipe + exposed;
    return XC_OK;
}

void xc__plan_profile(xc__profile_t *p, double intra_alpha, double intra_bps, double inter_alpha,
                      double inter_bps, double host_bps)
{
    memset(p, 0, sizeof *p);
    p->have = XC__HAVE_SHM | XC__HAVE_TCP_LOCAL | XC__HAVE_TCP_NET | XC__HAVE_HOST;
    for (int l = 0; l < XC__LINK_COUNT; l++) {
        double a = l == XC__LINK_TCP_NET ? inter_alpha : intra_alpha;
        double beta = 1.0 / (l == XC__LINK_TCP_NET ? inter_bps : intra_bps);
        xc__line_t line = {a, beta, a, beta, a, beta, 0};
        p->link[l].big_from = 1e18;
        for (int x = 0; x < XC__XFER_COUNT; x++) p->link[l].line[x] = line;
    }
    p->sync_alpha = intra_alpha;
    p->sync_per_rank = 0;
    p->copy_cache = p->copy_mem = 1.0 / host_bps;
    p->cache_bytes = 1e15;
    for (int d = 0; d < XC_DTYPE_COUNT; d++)
        for (int k = 0; k < XC__GOP_COUNT; k++) p->gamma[d][k][0] = p->gamma[d][k][1] = 1.0 / host_bps;
    for (int f = 0; f < XC_COMPRESS_COUNT; f++) p->codec[f][0] = p->codec[f][1] = 1.0 / host_bps;
}
