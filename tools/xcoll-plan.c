/*
 * xcoll-plan.c -- the communication plan of a training job before it is
 * launched (docs/plan.md): per step and per primitive, calls, bytes per
 * rank (the seed's formulas), the group's links, the time the runtime
 * selector's cost model predicts with the algorithm it would pick, how much
 * compute hides, the pipeline bubble, and advice with predicted gains.
 *
 *   xcoll-plan --layers 32 --hidden 4096 --seq 2048 --vocab 32000 \
 *              --global-batch 512 --micro-batch 1 --dp 8 --tp 8 --pp 2 \
 *              --nodes 16 --rpn 8 --cluster h100-ib400
 *   xcoll-plan ... --profile prof.json      a calibrated profile (this machine)
 *   xcoll-plan ... --json                   the same as JSON
 *   xcoll-plan ... --svg step.svg           the step's timeline as a picture
 */
#include "../src/model/json.h"
#include "../src/model/plan.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cluster {
    const char *name, *desc;
    double intra_alpha, intra_bps, inter_alpha, inter_bps, host_bps, flops;
    int shm;
} cluster_t;

/* Presets: their figures, stated (alpha in seconds, bandwidth per
 * direction per rank in bytes/s, compute per rank in FLOP/s). */
static const cluster_t k_clusters[] = {
    {"h100-ib400", "8x H100 per node, NVLink 4 (450 GB/s per GPU per direction, 3 us), "
                   "one 400 Gb/s InfiniBand NIC per GPU (50 GB/s, 5 us), 400 TFLOP/s bf16 achieved",
     3e-6, 450e9, 5e-6, 50e9, 1e12, 400e12, 0},
    {"a100-ib200", "8x A100 per node, NVLink 3 (300 GB/s, 3 us), 200 Gb/s InfiniBand per GPU "
                   "(25 GB/s, 5 us), 150 TFLOP/s bf16 achieved",
     3e-6, 300e9, 5e-6, 25e9, 1e12, 150e12, 0},
    {"cpu-1g", "CPU nodes like this one: shared memory inside (10 GB/s, 0.5 us), 1 Gbit/s "
               "Ethernet across (0.119 GB/s, 50 us), 50 GFLOP/s per rank",
     0.5e-6, 10e9, 50e-6, 0.119e9, 10e9, 50e9, 1},
};

static void usage(void)
{
    fprintf(stderr,
            "usage: xcoll-plan [model] [training] [layout] [cluster] [output]\n"
            "  model:    --layers L --hidden H --seq S [--vocab V] [--ffn F (4 H)]\n"
            "            [--block transformer|mlp] [--params P (else L (4 H^2 + 2 H F) + V H;\n"
            "            an mlp block: L 2 H F + V H)]\n"
            "            [--heads A (TP must divide them)] [--experts E --topk K --moe-every N]\n"
            "            [--act-bytes 2|4] [--grad-bytes 2|4] [--param-bytes 2|4 (grad's)]\n"
            "  training: --micro-batch b and --global-batch B or --grad-accum K (B = b dp K)\n"
            "  layout:   --dp D --tp T --pp P [--vpp V] [--ep E] [--zero 0|1|2|3] [--seq-parallel]\n"
            "            [--bucket-mb MB]\n"
            "            [--compress none|fp16|bf16|int8|int4]   (ranks: TP fastest, then PP, then DP)\n"
            "            [--overlap on|off]  (on: DP/ZeRO traffic hides behind the passes)\n"
            "            [--cache cold|hot]  (cold, the default: a collective between compute\n"
            "            phases finds its buffers evicted; hot: as back-to-back benchmarks run)\n"
            "            [--buffers malloc|xcoll]  (the job's communication buffers: malloc'd,\n"
            "            the default, or from xc_mem_alloc on huge pages; prices cold calls)\n"
            "  cluster:  --nodes N --rpn R and one of --cluster NAME (h100-ib400, a100-ib200,\n"
            "            cpu-1g), --profile FILE (xcoll-perf --calibrate), or --intra A_US,GBPS\n"
            "            --inter A_US,GBPS [--flops TFLOPS per rank]\n"
            "  output:   [--json] [--svg FILE] [--no-advice]\n"
            "  or:       --config FILE.json with the same names as keys (\"global_batch\": 512),\n"
            "            optionally grouped in model/training/parallel/cluster/options/output;\n"
            "            flags after it override it\n");
    exit(2);
}

static double num(const char *flag, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (*end || !(x >= 0)) {
        fprintf(stderr, "xcoll-plan: %s: not a number >= 0: '%s'\n", flag, v);
        exit(2);
    }
    return x;
}

static void pair(const char *flag, const char *v, double *a, double *bps)
{
    double us, gbps;
    if (sscanf(v, "%lf,%lf", &us, &gbps) != 2 || us < 0 || gbps <= 0) {
        fprintf(stderr, "xcoll-plan: %s: expected ALPHA_US,GBPS, got '%s'\n", flag, v);
        exit(2);
    }
    *a = us * 1e-6, *bps = gbps * 1e9;
}

static const char *algo_name(const xc__plan_row_t *r)
{
    if (r->coll == XC_COLL_SEND) return "p2p";
    if (strstr(r->what, "compressed")) return "compressed";
    const char *n = xc_algo_name(r->algo);
    return n ? n : "-";
}

/* The link class a row's traffic crosses: between nodes, or inside one
 * (shared memory on CPU clusters, NVLink for the GPU presets). */
static const char *link_name(const xc__plan_row_t *r)
{
    return r->link == XC__LINK_TCP_NET ? "inter" : "intra";
}

static void print_table(const xc__plan_in_t *in, const xc__plan_out_t *o)
{
    printf("%-34s %5s %5s %-5s %8s %12s %14s %-22s %10s %10s %s\n", "primitive", "group",
           "nodes", "link", "calls", "bytes/call", "sent/rank", "algorithm", "ms/call", "ms/step",
           "overlaps");
    for (int i = 0; i < o->nrows; i++) {
        const xc__plan_row_t *r = &o->row[i];
        printf("%-34s %5d %5d %-5s %8.0f %12.0f %14.0f %-22s %10.3f %10.2f %s\n", r->what,
               r->group, r->span, link_name(r), r->calls, r->msg, r->sent, algo_name(r),
               r->t_call * 1e3, r->t_step * 1e3,
               r->hidden_by == 2 ? "fwd+bwd" : r->hidden_by == 1 ? "backward" : "-");
    }
    printf("\nper step and rank: compute %.2f ms, communication %.2f ms, exposed %.2f ms; "
           "%d micro-batches, bubble %.1f %% (P-1)/(v m+P-1); step %.2f ms\n",
           o->compute_s * 1e3, o->comm_s * 1e3, o->exposed_s * 1e3, o->micro, 100 * o->bubble,
           o->step_s * 1e3);
    (void)in;
}

static void print_json(const xc__plan_in_t *in, const xc__plan_out_t *o)
{
    printf("{\n  \"layout\": {\"dp\": %d, \"tp\": %d, \"pp\": %d, \"vpp\": %d, \"ep\": %d, "
           "\"zero\": %d, \"seq_parallel\": %s, \"nodes\": %d, \"rpn\": %d},\n"
           "  \"overlap\": %s, \"cache\": \"%s\", \"buffers\": \"%s\",\n"
           "  \"primitives\": [\n", in->dp, in->tp, in->pp, in->vpp > 1 ? in->vpp : 1, in->ep,
           in->zero, in->seq_parallel ? "true" : "false", in->nodes, in->rpn,
           in->no_overlap ? "false" : "true", in->hot ? "hot" : "cold",
           in->xc_mem ? "xcoll" : "malloc");
    for (int i = 0; i < o->nrows; i++) {
        const xc__plan_row_t *r = &o->row[i];
        printf("    {\"what\": \"%s\", \"group\": %d, \"nodes\": %d, \"link\": \"%s\", "
               "\"calls\": %.0f, "
               "\"bytes_per_call\": %.0f, \"bytes_sent_per_rank\": %.0f, \"algorithm\": \"%s\", "
               "\"s_per_call\": %.9g, \"s_per_step\": %.9g, \"overlaps\": \"%s\"}%s\n",
               r->what, r->group, r->span, link_name(r), r->calls, r->msg, r->sent, algo_name(r),
               r->t_call,
               r->t_step, r->hidden_by == 2 ? "fwd+bwd" : r->hidden_by == 1 ? "backward" : "none",
               i + 1 < o->nrows ? "," : "");
    }
    printf("  ],\n  \"micro_batches\": %d, \"compute_s\": %.9g, \"communication_s\": %.9g, "
           "\"exposed_s\": %.9g, \"bubble\": %.6f, \"step_s\": %.9g\n}\n", o->micro, o->compute_s,
           o->comm_s, o->exposed_s, o->bubble, o->step_s);
}

/* The step as bars: compute (forward, backward), the critical-path
 * communication, the overlapped traffic beside backward, the bubble. */
static int write_svg(const char *path, const xc__plan_out_t *o)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    double W = 900, scale = o->step_s > 0 ? (W - 180) / o->step_s : 0;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, 60 + 30 * (o->nrows + 2));
    fprintf(f, "<text x=\"10\" y=\"20\">one step: %.2f ms (compute %.2f, exposed communication "
               "%.2f, bubble %.1f %%)</text>\n", o->step_s * 1e3, o->compute_s * 1e3,
            o->exposed_s * 1e3, 100 * o->bubble);
    int y = 40;
    double fwd = o->compute_s / 3, bwd = 2 * o->compute_s / 3;
    fprintf(f, "<text x=\"10\" y=\"%d\">compute</text>\n", y + 15);
    fprintf(f, "<rect x=\"170\" y=\"%d\" width=\"%.1f\" height=\"20\" fill=\"#4a90d9\"/>\n", y,
            fwd * scale);
    fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"20\" fill=\"#2c5f9e\"/>\n",
            170 + fwd * scale, y, bwd * scale);
    y += 30;
    for (int i = 0; i < o->nrows; i++, y += 30) {
        const xc__plan_row_t *r = &o->row[i];
        double x0 = r->hidden_by == 1 ? fwd : r->hidden_by == 2 ? 0 : o->compute_s;
        fprintf(f, "<text x=\"10\" y=\"%d\">%s</text>\n", y + 15, r->what);
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"20\" fill=\"%s\"/>\n",
                170 + x0 * scale, y, r->t_step * scale, r->hidden_by ? "#7bc47f" : "#d9534f");
    }
    if (o->bubble > 0) {
        double idle = o->step_s * o->bubble;
        fprintf(f, "<text x=\"10\" y=\"%d\">pipeline bubble</text>\n", y + 15);
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"20\" fill=\"#bbbbbb\"/>\n",
                170 + (o->step_s - idle) * scale, y, idle * scale);
    }
    fprintf(f, "</svg>\n");
    return fclose(f);
}

/* Advice: re-plan with one change; print it when it gains. */
static void advise(const xc__profile_t *p, const xc__plan_in_t *in, const xc__plan_out_t *o)
{
    int any = 0;
    xc__plan_in_t alt;
    xc__plan_out_t ao;
#define TRY(cond, change, fmt, ...)                                                        \
    do {                                                                                   \
        alt = *in;                                                                         \
        if (!(cond)) break;                                                                \
        change;                                                                            \
        if (xc__plan(p, &alt, &ao) != XC_OK || ao.step_s >= o->step_s * 0.99) break;       \
        printf("- " fmt ": step %.2f -> %.2f ms (%.2fx)\n", __VA_ARGS__, o->step_s * 1e3,   \
               ao.step_s * 1e3, o->step_s / ao.step_s);                                     \
        any = 1;                                                                           \
    } while (0)
    printf("\nadvice:\n");
    /* TP spanning nodes: TP inside a node, the rest into the pipeline */
    TRY(in->tp > in->rpn && in->tp % in->rpn == 0 && in->layers % (in->pp * (in->tp / in->rpn)) == 0,
        (alt.pp = in->pp * (in->tp / in->rpn), alt.tp = in->rpn),
        "keep tensor parallelism inside a node (tp %d -> %d, pp %d -> %d)", in->tp, alt.tp, in->pp,
        alt.pp);
    /* the bubble: more, smaller micro-batches */
    TRY(o->bubble > 0.1 && in->micro_batch > 1, alt.micro_batch = in->micro_batch / 2,
        "halve the micro-batch (%d -> %d: %d micro-batches, bubble %.0f %% -> %.0f %%)",
        in->micro_batch, alt.micro_batch, 2 * o->micro, 100 * o->bubble,
        100.0 * (in->pp - 1) / (2.0 * o->micro * (in->vpp > 1 ? in->vpp : 1) + in->pp - 1));
    /* the bubble: interleaved virtual stages (Megatron's schedule) */
    TRY(o->bubble > 0.1 && in->layers % (in->pp * 2 * (in->vpp > 1 ? in->vpp : 1)) == 0,
        alt.vpp = 2 * (in->vpp > 1 ? in->vpp : 1),
        "interleave %d virtual stages per rank (the bubble / %d, %d times the pipeline sends)",
        alt.vpp, alt.vpp / (in->vpp > 1 ? in->vpp : 1), alt.vpp / (in->vpp > 1 ? in->vpp : 1));
    /* communication on the critical path that could hide */
    TRY(in->no_overlap && (in->dp > 1), alt.no_overlap = 0,
        "overlap the gradient traffic with backward (bucketing; --overlap on)%s", "");
    /* exposed data-parallel traffic: compression or ZeRO-2's overlap */
    TRY(in->zero == 0 && in->dp > 1 && in->compress == XC_COMPRESS_NONE,
        alt.compress = XC_COMPRESS_INT8, "compress the gradient all-reduce to INT8%s", "");
    TRY(in->zero == 1, alt.zero = 2, "ZeRO stage 2 instead of 1 (its reduce-scatter overlaps "
                                     "backward)%s", "");
    TRY(in->zero == 0 && in->dp > 1 && in->bucket_mb > 0 && in->bucket_mb < 25,
        alt.bucket_mb = in->bucket_mb * 4, "larger gradient buckets (%g -> %g MiB)", in->bucket_mb,
        alt.bucket_mb);
    /* cold calls on huge pages (a profile that measured both kinds) */
    TRY(!in->hot && !in->xc_mem && p->cold_xcmem,
        alt.xc_mem = 1, "allocate the communication buffers with xc_mem_alloc (huge pages: "
                        "--buffers xcoll)%s", "");
    if (!any) printf("- nothing predicted to gain 1 %% or more\n");
#undef TRY
}

/* Everything the flags and the config file set. */
typedef struct opts {
    xc__plan_in_t in;
    const char *profile, *cname, *svg;
    double ia, ib, xa, xb, tflops;
    int json, advice;
} opts_t;

static int is(const char *name, const char *want)
{
    return !strcmp(name, want);
}

/* Set option `name` (a flag without its dashes, e.g. "global-batch") to
 * `v` (NULL for the switches).  The flags and the config file's keys both
 * come here.  Returns 0, or -1 for an unknown name or a missing value. */
static int set_opt(opts_t *o, const char *name, const char *v)
{
    xc__plan_in_t *in = &o->in;
    if (is(name, "json")) return o->json = 1, 0;
    if (is(name, "no-advice")) return o->advice = 0, 0;
    if (is(name, "seq-parallel")) return in->seq_parallel = 1, 0;
    if (!v) return -1;
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", name);
    /* the numbers of the plan's input: int fields, or double (d) */
#define F(n, field, d) {n, offsetof(xc__plan_in_t, field), d}
    static const struct {
        const char *name;
        size_t off;
        int dbl;
    } k_num[] = {F("layers", layers, 0), F("hidden", hidden, 0), F("ffn", ffn, 0), F("seq", seq, 0),
                 F("vocab", vocab, 0), F("params", params, 1), F("experts", experts, 0),
                 F("topk", topk, 0), F("moe-every", moe_every, 0), F("act-bytes", act_bytes, 0),
                 F("grad-bytes", grad_bytes, 0), F("global-batch", global_batch, 0),
                 F("param-bytes", param_bytes, 0), F("heads", heads, 0),
                 F("grad-accum", grad_accum, 0),
                 F("micro-batch", micro_batch, 0), F("dp", dp, 0), F("tp", tp, 0), F("pp", pp, 0),
                 F("vpp", vpp, 0), F("ep", ep, 0), F("zero", zero, 0), F("bucket-mb", bucket_mb, 1),
                 F("nodes", nodes, 0), F("rpn", rpn, 0)};
#undef F
    for (size_t k = 0; k < sizeof k_num / sizeof *k_num; k++)
        if (is(name, k_num[k].name)) {
            char *at = (char *)in + k_num[k].off;
            double x = num(flag, v);
            if (k_num[k].dbl) *(double *)(void *)at = x;
            else *(int *)(void *)at = (int)x;
            return 0;
        }
    if (is(name, "block")) {
        if (!is(v, "transformer") && !is(v, "mlp")) return -1;
        in->mlp_only = is(v, "mlp");
    } else if (is(name, "cluster")) o->cname = v;
    else if (is(name, "profile")) o->profile = v;
    else if (is(name, "intra")) pair(flag, v, &o->ia, &o->ib);
    else if (is(name, "inter")) pair(flag, v, &o->xa, &o->xb);
    else if (is(name, "flops")) o->tflops = num(flag, v);
    else if (is(name, "svg")) o->svg = v;
    else if (is(name, "overlap")) {
        if (!is(v, "on") && !is(v, "off")) return -1;
        in->no_overlap = is(v, "off");
    } else if (is(name, "cache")) {
        if (!is(v, "hot") && !is(v, "cold")) return -1;
        in->hot = is(v, "hot");
    } else if (is(name, "buffers")) {
        if (!is(v, "malloc") && !is(v, "xcoll")) return -1;
        in->xc_mem = is(v, "xcoll");
    }
    else if (is(name, "compress")) {
        if (xc_compress_parse(v, &in->compress) != XC_OK) return -1;
    } else return -1;
    return 0;
}

/* The config file: the flags' names as keys (a '_' may stand for '-'),
 * grouped or not in "model", "training", "parallel", "cluster", "options"
 * and "output"; numbers, strings, and true for the switches.  Later flags
 * on the command line override it.  Returns the parsed file. */
static xc__json_t *load_config(opts_t *o, const char *path)
{
    char err[160];
    size_t len = 0;
    char *text = xc__read_file(path, 1u << 24, &len, err, sizeof err);
    if (!text) {
        int open_failed = !strncmp(err, "cannot open", 11);
        fprintf(stderr, "xcoll-plan: --config %s: %s%s%s\n", path, open_failed ? "cannot open it (" : "",
                open_failed ? err + 13 : err, open_failed ? ")" : "");
        exit(2);
    }
    xc__json_t *root = xc__json_parse(text, len, err, sizeof err);
    free(text);
    if (!root || root->type != XC__J_OBJ) {
        fprintf(stderr, "xcoll-plan: %s: %s\n", path, root ? "not a JSON object" : err);
        exit(2);
    }
    static const char *groups[] = {"model", "training", "parallel", "cluster", "options", "output"};
    const xc__json_t *stack[2] = {root->child, NULL};
    int depth = 0;
    while (depth >= 0) {
        const xc__json_t *j = stack[depth];
        if (!j) {
            depth--;
            continue;
        }
        stack[depth] = j->next;
        int group = 0;
        for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) group |= is(j->key, groups[g]);
        if (j->type == XC__J_OBJ && group && depth == 0) {
            stack[++depth] = j->child;
            continue;
        }
        char name[64], val[64];
        snprintf(name, sizeof name, "%s", j->key);
        for (char *c = name; *c; c++) *c = *c == '_' ? '-' : *c;
        const char *v = NULL;
        if (j->type == XC__J_NUM) snprintf(val, sizeof val, "%.17g", j->num), v = val;
        else if (j->type == XC__J_STR) v = j->str;
        int ok = j->type == XC__J_BOOL && j->num ? set_opt(o, name, NULL) == 0
               : j->type == XC__J_BOOL          ? 1 /* false: the default */
               : v && set_opt(o, name, v) == 0;
        if (!ok) {
            fprintf(stderr, "xcoll-plan: %s: line %d, column %d: unknown key or bad value "
                            "\"%s\" (the keys are the flags' names; see --help)\n",
                    path, j->line, j->col, j->key);
            exit(2);
        }
    }
    return root; /* the options' strings point into it: freed at the end */
}

/* Plan, print and draw what the options describe; the exit status. */
static int run(const opts_t *o)
{
    xc__plan_in_t in = o->in; /* the cluster below sets its flops and shm */
    if ((in.act_bytes != 2 && in.act_bytes != 4) || (in.grad_bytes != 2 && in.grad_bytes != 4))
        usage();
    xc__profile_t prof;
    const cluster_t *cl = NULL;
    if (o->cname) {
        for (size_t k = 0; k < sizeof k_clusters / sizeof *k_clusters; k++)
            if (!strcmp(o->cname, k_clusters[k].name)) cl = &k_clusters[k];
        if (!cl) {
            fprintf(stderr, "xcoll-plan: unknown --cluster '%s' (h100-ib400, a100-ib200, cpu-1g)\n", o->cname);
            return 2;
        }
        xc__plan_profile(&prof, cl->intra_alpha, cl->intra_bps, cl->inter_alpha, cl->inter_bps,
                         cl->host_bps);
        in.flops = cl->flops;
        in.shm = cl->shm;
    } else if (o->profile) {
        if (xc__profile_read(o->profile, &prof) != XC_OK) {
            fprintf(stderr, "xcoll-plan: %s\n", xc_last_error());
            return 1;
        }
        in.shm = 1;
    } else if (o->ia >= 0 && o->xa >= 0) {
        xc__plan_profile(&prof, o->ia, o->ib, o->xa, o->xb, 10e9);
    } else {
        fprintf(stderr, "xcoll-plan: give the cluster: --cluster, --profile or --intra and --inter\n");
        return 2;
    }
    if (o->tflops >= 0) in.flops = o->tflops * 1e12;
    xc__plan_out_t out;
    if (xc__plan(&prof, &in, &out) != XC_OK) {
        fprintf(stderr, "xcoll-plan: %s\n", xc_last_error());
        return 2;
    }
    if (o->json) {
        print_json(&in, &out);
    } else {
        if (cl) printf("cluster %s: %s\n", cl->name, cl->desc);
        printf("layout: dp %d x tp %d%s x pp %d", in.dp, in.tp,
               in.seq_parallel ? " (sequence parallel)" : "", in.pp);
        if (in.vpp > 1) printf(" (%d virtual stages)", in.vpp);
        printf(" (ep %d, zero %d) on %d nodes x %d ranks; overlap %s; calls priced %s\n\n",
               in.ep, in.zero, in.nodes, in.rpn, in.no_overlap ? "off" : "on",
               in.hot ? "back to back (--cache hot)"
                      : in.xc_mem ? "after compute, buffers from xc_mem_alloc (--cache cold "
                                    "--buffers xcoll)"
                                  : "after compute (--cache cold)");
        print_table(&in, &out);
        if (o->advice) advise(&prof, &in, &out);
    }
    if (o->svg && write_svg(o->svg, &out) != 0) {
        fprintf(stderr, "xcoll-plan: cannot write %s\n", o->svg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.in = {.params = 0, .layers = 0, .hidden = 0, .seq = 0, .vocab = 0,
                       .experts = 0, .topk = 1, .moe_every = 1, .act_bytes = 2, .grad_bytes = 2,
                       .micro_batch = 1, .global_batch = 0, .dp = 1, .tp = 1, .pp = 1, .ep = 1,
                       .zero = 0, .nodes = 1, .rpn = 1, .flops = 0, .bucket_mb = 25,
                       .compress = XC_COMPRESS_NONE, .shm = 0},
                .ia = -1, .xa = -1, .tflops = -1, .advice = 1};
    xc__json_t *config = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(a, "--", 2)) usage();
        if (is(a, "--config") && v) {
            if (config) {
                fprintf(stderr, "xcoll-plan: give one --config\n");
                return 2;
            }
            config = load_config(&o, v), i++;
        } else if (set_opt(&o, a + 2, NULL) == 0) {
        } else if (v && set_opt(&o, a + 2, v) == 0) {
            i++;
        } else {
            usage();
        }
    }
    int rc = run(&o);
    xc__json_free(config);
    return rc;
}
