/*
 * tp_mlp.c -- a Megatron-style MLP block split over a tensor-parallel
 * group, data parallel across groups, checked against the same training
 * done by one process.
 *
 *   xcoll-run -n 2 ./tp_mlp                  2-way tensor parallel
 *   xcoll-run -n 4 ./tp_mlp --tp 2           2 (TP) x 2 (DP)
 *   xcoll-run -n 4 --nodes 2 ./tp_mlp --tp 2  TP inside a node, DP across
 *   ... --layout across                      TP groups across the nodes
 *                                            (to see what the advice saves)
 *
 * The block: Z = relu(X W1) W2 + b2, loss = 0.5 |Z - T|^2 / B over the
 * global batch of B rows, plain SGD.  Tensor parallel over a group of tp
 * ranks (consecutive ranks: one node when the launcher places ranks node
 * by node, so the frequent all-reduces stay inside it): W1 is split by
 * columns (column-parallel), W2 by rows (row-parallel), so each rank
 * computes relu(X W1_t) W2_t, a partial sum of the output, and ONE
 * all-reduce over the group completes it (forward); backward needs ONE
 * all-reduce of the input gradient dX = dA W1^T (the "g" of Megatron: the
 * layer below needs the whole of it).  b2 is replicated in the group.  Data
 * parallel over dp = N / tp groups: group d takes rows [d B/dp, (d+1)
 * B/dp) of every batch; gradients (and the step's loss, fused into the same
 * buffer) are all-reduced over the dp ranks that hold the same shard.
 * Global-norm clipping (--clip) is xc_clip_grad_norm over the TP group: the
 * shards counted once each, b2 (replicated tp times) once -- one more
 * all-reduce of 3 numbers per step.
 *
 * --layout across builds the TP groups from ranks r, r + dp, ... instead
 * (each spanning the nodes) -- the layout the seed's topology advice warns
 * against; the median step time of each layout shows what it costs.
 *
 * Every rank also trains the whole model serially on the whole batch and
 * compares: the loss of every step and its final shards (relative 1e-4).
 * Per step it prints the bytes each communicator's all-reduces sent
 * (xc_comm_stats) beside the ring formula 2 (n-1)/n x M of the seed's cost
 * table; the example forces the ring all-reduce (XCOLL_ALGO, unless set) so
 * that the two are the same thing measured and predicted.
 *
 * The all-reduced buffers (the output Y, the input gradient dX, the
 * gradients) come from xc_mem_alloc, on huge pages (--buffers malloc:
 * calloc, to see the difference; xcoll-plan --buffers prices either).
 */
#include "common/example.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *example_name = "tp_mlp";


typedef struct opts {
    int tp, batch, hidden, ffn, steps;
    float lr;
    double clip;
    int across; /* --layout across: TP groups span the nodes */
    int sync;   /* --sync: a barrier before each timed all-reduce */
    int plain;  /* --buffers malloc: communication buffers from calloc */
    uint64_t seed;
} opts_t;

/* Deterministic values: parameter or data element i of stream s. */
/* One model replica (full when tp = 1 / the serial twin, else a shard):
 * W1 [H x f] (columns c0..c0+f of the full W1), W2 [f x H], b2 [H]. */
typedef struct model {
    int H, f, c0;
    float *w1, *w2, *b2;
    float *gw1, *gw2, *gb2;
    int plain; /* gw1 from calloc (else xc_mem_alloc) */
} model_t;

static void model_init(model_t *m, const opts_t *o, int c0, int f)
{
    int H = o->hidden, F = o->ffn;
    m->H = H, m->f = f, m->c0 = c0;
    m->w1 = malloc(sizeof(float) * (size_t)H * f);
    m->w2 = malloc(sizeof(float) * (size_t)f * H);
    m->b2 = malloc(sizeof(float) * (size_t)H);
    /* the gradients, all-reduced (+ the loss) */
    m->gw1 = comm_alloc(sizeof(float) * ((size_t)H * f + (size_t)f * H + H + 1), o->plain);
    m->plain = o->plain;
    m->gw2 = m->gw1 + (size_t)H * f;
    m->gb2 = m->gw2 + (size_t)f * H;
    float s1 = 1.0f / sqrtf((float)H), s2 = 1.0f / sqrtf((float)F);
    for (int i = 0; i < H; i++)
        for (int j = 0; j < f; j++) m->w1[(size_t)i * f + j] = val(o->seed, 1, (uint64_t)i * F + c0 + j, s1);
    for (int j = 0; j < f; j++)
        for (int k = 0; k < H; k++) m->w2[(size_t)j * H + k] = val(o->seed, 2, (uint64_t)(c0 + j) * H + k, s2);
    for (int k = 0; k < H; k++) m->b2[k] = val(o->seed, 3, (uint64_t)k, 0.1f);
}

static void model_free(model_t *m)
{
    free(m->w1);
    free(m->w2);
    free(m->b2);
    comm_free(m->gw1, m->plain);
}

static void batch(const opts_t *o, int s, int r0, int n, float *X, float *T)
{
    batch_rows(o->seed, s, o->batch, r0, n, o->hidden, X, T);
}

/* Forward up to the partial output: A = X W1 (n x f), Y += relu(A) W2. */
static void forward_partial(const model_t *m, int n, const float *X, float *A, float *Y)
{
    int H = m->H, f = m->f;
    memset(Y, 0, sizeof(float) * (size_t)n * H);
    for (int r = 0; r < n; r++) {
        float *a = A + (size_t)r * f;
        for (int j = 0; j < f; j++) a[j] = 0;
        for (int i = 0; i < H; i++) {
            float x = X[(size_t)r * H + i];
            const float *w = m->w1 + (size_t)i * f;
            for (int j = 0; j < f; j++) a[j] += x * w[j];
        }
        for (int j = 0; j < f; j++) {
            float h = a[j] > 0 ? a[j] : 0;
            const float *w = m->w2 + (size_t)j * H;
            for (int k = 0; k < H; k++) Y[(size_t)r * H + k] += h * w[k];
        }
    }
}

/* Given the full output Y (n x H): loss part and dZ = (Y + b2 - T) / B. */
static double loss_grad(const model_t *m, int n, int B, const float *Y, const float *T, float *dZ)
{
    int H = m->H;
    double L = 0;
    for (int r = 0; r < n; r++)
        for (int k = 0; k < H; k++) {
            float d = Y[(size_t)r * H + k] + m->b2[k] - T[(size_t)r * H + k];
            L += 0.5 * (double)d * d;
            dZ[(size_t)r * H + k] = d / (float)B;
        }
    return L / B;
}

/* Backward of the shard: gradients into m->g*, the input gradient's
 * partial sum into dX (n x H; summed over the group = the whole dX). */
static void backward(model_t *m, int n, const float *X, const float *A, const float *dZ, float *dX)
{
    int H = m->H, f = m->f;
    memset(m->gw1, 0, sizeof(float) * ((size_t)H * f * 2 + H));
    memset(dX, 0, sizeof(float) * (size_t)n * H);
    float *dA = malloc(sizeof(float) * (size_t)f);
    for (int r = 0; r < n; r++) {
        const float *dz = dZ + (size_t)r * H, *a = A + (size_t)r * f, *x = X + (size_t)r * H;
        for (int k = 0; k < H; k++) m->gb2[k] += dz[k];
        for (int j = 0; j < f; j++) {
            float h = a[j] > 0 ? a[j] : 0, s = 0;
            const float *w = m->w2 + (size_t)j * H;
            float *g = m->gw2 + (size_t)j * H;
            for (int k = 0; k < H; k++) {
                g[k] += h * dz[k];
                s += w[k] * dz[k];
            }
            dA[j] = a[j] > 0 ? s : 0;
        }
        for (int i = 0; i < H; i++) {
            float *g = m->gw1 + (size_t)i * f, d = 0;
            const float *w = m->w1 + (size_t)i * f;
            for (int j = 0; j < f; j++) {
                g[j] += x[i] * dA[j];
                d += w[j] * dA[j];
            }
            dX[(size_t)r * H + i] = d;
        }
    }
    free(dA);
}

static void sgd(model_t *m, float lr)
{
    for (size_t i = 0; i < (size_t)m->H * m->f; i++) m->w1[i] -= lr * m->gw1[i];
    for (size_t i = 0; i < (size_t)m->f * m->H; i++) m->w2[i] -= lr * m->gw2[i];
    for (int k = 0; k < m->H; k++) m->b2[k] -= lr * m->gb2[k];
}

/* Global-norm clip of the serial twin (what xc_clip_grad_norm computes
 * over the shards). */
static void clip_serial(model_t *m, double max)
{
    size_t n = (size_t)m->H * m->f * 2 + m->H;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)m->gw1[i] * m->gw1[i];
    double norm = sqrt(s);
    if (max > 0 && norm > max)
        for (size_t i = 0; i < n; i++) m->gw1[i] = (float)(m->gw1[i] * (max / (norm + 1e-6)));
}

/* Bytes a rank sends in the ring all-reduce of `count` floats over n
 * ranks: 2 (n-1) blocks of the split (the formula 2 (n-1)/n M when n
 * divides count). */
static double ring_bytes(size_t count, int n, size_t es)
{
    return n > 1 ? 2.0 * (n - 1) * ((double)count / n) * (double)es : 0;
}

static void parse(int argc, char **argv, opts_t *o, int world)
{
    *o = (opts_t){.tp = world, .batch = 32, .hidden = 64, .ffn = 256, .steps = 5, .lr = 0.05f,
                  .clip = 0, .seed = 7};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tp") && v) o->tp = atoi(v), i++;
        else if (!strcmp(a, "--batch") && v) o->batch = atoi(v), i++;
        else if (!strcmp(a, "--hidden") && v) o->hidden = atoi(v), i++;
        else if (!strcmp(a, "--ffn") && v) o->ffn = atoi(v), i++;
        else if (!strcmp(a, "--steps") && v) o->steps = atoi(v), i++;
        else if (!strcmp(a, "--lr") && v) o->lr = (float)atof(v), i++;
        else if (!strcmp(a, "--clip") && v) o->clip = atof(v), i++;
        else if (!strcmp(a, "--sync")) o->sync = 1;
        else if (!strcmp(a, "--buffers") && v && (!strcmp(v, "malloc") || !strcmp(v, "xcoll")))
            o->plain = !strcmp(v, "malloc"), i++;
        else if (!strcmp(a, "--seed") && v) o->seed = strtoull(v, NULL, 0), i++;
        else if (!strcmp(a, "--layout") && v && (!strcmp(v, "inside") || !strcmp(v, "across")))
            o->across = !strcmp(v, "across"), i++;
        else {
            fprintf(stderr, "usage: xcoll-run -n N tp_mlp [--tp T (N)] [--batch B (32)] "
                            "[--hidden H (64)] [--ffn F (256)] [--steps S (5)] [--lr X (0.05)] "
                            "[--clip MAXNORM (0: off)] [--seed S] [--layout inside|across] [--sync] "
                            "[--buffers xcoll|malloc (xcoll)]\n");
            exit(2);
        }
    }
    int dp = o->tp > 0 && world % o->tp == 0 ? world / o->tp : 0;
    if (!dp || o->ffn % o->tp || o->batch % dp || o->hidden < 1 || o->steps < 1) {
        fprintf(stderr, "tp_mlp: --tp %d must divide the %d ranks and --ffn %d; the batch %d "
                        "must divide by %d data-parallel groups\n",
                o->tp, world, o->ffn, o->batch, dp);
        exit(2);
    }
}

/* The clock before a timed all-reduce; with --sync after a barrier on its
 * group, so that the time is the transfer's and not the wait for a slower
 * rank (for comparing with xcoll-plan). */
static double sync_now(const opts_t *o, xc_comm_t *c)
{
    if (o->sync) CHECK(xc_barrier(c));
    return now_ms();
}

int main(int argc, char **argv)
{
    if (!getenv("XCOLL_ALGO")) setenv("XCOLL_ALGO", "allreduce.ring", 1);
    xc_comm_t *world;
    CHECK(xc_comm_init_env(&world, NULL));
    int rank = xc_comm_rank(world), size = xc_comm_size(world);
    opts_t o;
    parse(argc, argv, &o, size);
    int tp = o.tp, dp = size / tp;
    /* TP groups: consecutive ranks (one node under node-by-node placement),
     * or (across) every dp-th rank; DP groups: the ranks holding the same
     * shard. */
    int t = o.across ? rank / dp : rank % tp, d = o.across ? rank % dp : rank / tp;
    xc_comm_t *tpc, *dpc;
    CHECK(xc_comm_split(world, d, t, &tpc, NULL));
    CHECK(xc_comm_split(world, t, d, &dpc, NULL));
    int H = o.hidden, f = o.ffn / tp, B = o.batch, n = B / dp;
    model_t m, ser;
    model_init(&m, &o, t * f, f);
    model_init(&ser, &o, 0, o.ffn);
    if (rank == 0)
        printf("tp_mlp: %d ranks = %d (tensor parallel, groups %s the nodes) x %d (data "
               "parallel) on %d node%s; MLP %d-%d-%d, batch %d, %d steps%s%s\n", size, tp,
               o.across ? "across" : "inside", dp, xc_comm_node_count(world),
               xc_comm_node_count(world) > 1 ? "s" : "", H, o.ffn, H, B, o.steps,
               o.clip > 0 ? ", global-norm clip" : "",
               o.plain ? "; buffers from calloc" : "; buffers from xc_mem_alloc");
    float *X = malloc(sizeof(float) * (size_t)B * H), *T = malloc(sizeof(float) * (size_t)B * H);
    float *A = malloc(sizeof(float) * (size_t)B * o.ffn);
    float *Y = comm_alloc(sizeof(float) * (size_t)B * H, o.plain); /* all-reduced */
    float *dZ = malloc(sizeof(float) * (size_t)B * H);
    float *dX = comm_alloc(sizeof(float) * (size_t)B * H, o.plain); /* all-reduced */
    float *sX = malloc(sizeof(float) * (size_t)B * H), *sdX = malloc(sizeof(float) * (size_t)B * H);
    double worst_loss = 0, worst_dx = 0;
    size_t ngrad = (size_t)H * f * 2 + H;
    uint64_t tp_b0 = bytes_sent(tpc), dp_b0 = bytes_sent(dpc);
    double tp_formula = 0, dp_formula = 0;
    double *step_ms = calloc((size_t)o.steps, sizeof *step_ms);
    /* time in the all-reduces, per step */
    double *tp_step = calloc((size_t)o.steps, sizeof *tp_step), *dp_step = calloc((size_t)o.steps, sizeof *dp_step);
    if (!step_ms || !tp_step || !dp_step) {
        fprintf(stderr, "tp_mlp: out of memory\n");
        return 1;
    }
    for (int s = 0; s < o.steps; s++) {
        double t0 = now_ms();
        /* the shard of this data-parallel group */
        batch(&o, s, d * n, n, X, T);
        forward_partial(&m, n, X, A, Y);
        double c0 = sync_now(&o, tpc);
        CHECK(xc_allreduce(Y, Y, (size_t)n * H, XC_FLOAT32, XC_SUM, tpc)); /* forward */
        tp_step[s] += now_ms() - c0;
        double loss = loss_grad(&m, n, B, Y, T, dZ);
        backward(&m, n, X, A, dZ, dX);
        c0 = sync_now(&o, tpc);
        CHECK(xc_allreduce(dX, dX, (size_t)n * H, XC_FLOAT32, XC_SUM, tpc)); /* backward */
        tp_step[s] += now_ms() - c0;
        tp_formula += 2 * ring_bytes((size_t)n * H, tp, 4);
        /* data parallel: the gradients and the loss in one all-reduce */
        m.gw1[ngrad] = (float)loss;
        c0 = sync_now(&o, dpc);
        CHECK(xc_allreduce(m.gw1, m.gw1, ngrad + 1, XC_FLOAT32, XC_SUM, dpc));
        dp_step[s] += now_ms() - c0;
        dp_formula += ring_bytes(ngrad + 1, dp, 4);
        loss = m.gw1[ngrad];
        if (o.clip > 0) {
            xc_grad_t g[3] = {{m.gw1, (size_t)H * f, XC_FLOAT32, 1},
                              {m.gw2, (size_t)f * H, XC_FLOAT32, 1},
                              {m.gb2, (size_t)H, XC_FLOAT32, tp}};
            CHECK(xc_clip_grad_norm(tpc, g, 3, o.clip, NULL, 0, NULL, NULL));
            tp_formula += ring_bytes(2, tp, 8);
        }
        sgd(&m, o.lr);
        step_ms[s] = now_ms() - t0;
        /* the serial twin: the whole batch, the whole model */
        batch(&o, s, 0, B, sX, T);
        float *sA = malloc(sizeof(float) * (size_t)B * o.ffn);
        forward_partial(&ser, B, sX, sA, Y);
        double sloss = loss_grad(&ser, B, B, Y, T, dZ);
        backward(&ser, B, sX, sA, dZ, sdX);
        free(sA);
        if (o.clip > 0) clip_serial(&ser, o.clip);
        sgd(&ser, o.lr);
        double e = fabs(loss - sloss) / fabs(sloss);
        worst_loss = e > worst_loss ? e : worst_loss;
        for (int r = 0; r < n; r++)
            for (int k = 0; k < H; k++) {
                double a = dX[(size_t)r * H + k], b = sdX[(size_t)(d * n + r) * H + k];
                double ex = fabs(a - b) / (fabs(b) + 1e-3);
                worst_dx = ex > worst_dx ? ex : worst_dx;
            }
        if (rank == 0) printf("step %d: loss %.6f (serial %.6f)\n", s + 1, loss, sloss);
    }
    /* final shards against the serial model's slices */
    double worst_w = 0;
    for (int i = 0; i < H; i++)
        for (int j = 0; j < f; j++) {
            double a = m.w1[(size_t)i * f + j], b = ser.w1[(size_t)i * o.ffn + t * f + j];
            double e = fabs(a - b) / (fabs(b) + 1e-3);
            worst_w = e > worst_w ? e : worst_w;
        }
    for (int j = 0; j < f; j++)
        for (int k = 0; k < H; k++) {
            double a = m.w2[(size_t)j * H + k], b = ser.w2[(size_t)(t * f + j) * H + k];
            double e = fabs(a - b) / (fabs(b) + 1e-3);
            worst_w = e > worst_w ? e : worst_w;
        }
    double tp_meas = (double)(bytes_sent(tpc) - tp_b0) / o.steps, dp_meas = (double)(bytes_sent(dpc) - dp_b0) / o.steps;
    double w[3] = {worst_loss, worst_dx, worst_w};
    CHECK(xc_allreduce(w, w, 3, XC_FLOAT64, XC_MAX, world));
    double v[5] = {tp_meas, dp_meas, median_of(step_ms, o.steps), median_of(tp_step, o.steps),
                   median_of(dp_step, o.steps)};
    CHECK(xc_allreduce(v, v, 5, XC_FLOAT64, XC_MAX, world));
    free(step_ms);
    free(tp_step);
    free(dp_step);
    const double tol = 1e-4;
    int ok = w[0] <= tol && w[1] <= tol && w[2] <= tol;
    if (rank == 0) {
        printf("communication per step and rank (bytes sent; ring formula 2(n-1)/n x M):\n"
               "  tensor parallel all-reduce (fwd + bwd%s): %.0f measured, %.0f formula\n"
               "  data parallel all-reduce (gradients + loss): %.0f measured, %.0f formula\n",
               o.clip > 0 ? " + clip" : "", v[0], tp_formula / o.steps, v[1], dp_formula / o.steps);
        printf("step time (median, slowest rank): %.3f ms; in the all-reduces per step "
               "(median, slowest rank): tensor parallel %.3f ms, data parallel %.3f ms\n", v[2], v[3], v[4]);
        printf("against one process: loss rel. diff %.1e, input gradient %.1e, final weights "
               "%.1e (tolerance %.0e): %s\n", w[0], w[1], w[2], tol, ok ? "PASS" : "FAIL");
    }
    /* The formula splits M evenly; the ring's blocks differ by one
     * element when n does not divide the count (a few bytes). */
    int forced = !strcmp(getenv("XCOLL_ALGO"), "allreduce.ring");
    int vol_ok = !forced || (fabs(v[0] - tp_formula / o.steps) <= 0.01 * tp_formula / o.steps + 64 &&
                             fabs(v[1] - dp_formula / o.steps) <= 0.01 * dp_formula / o.steps + 64);
    if (!vol_ok && rank == 0) printf("tp_mlp: measured bytes differ from the ring formula: FAIL\n");
    model_free(&m);
    model_free(&ser);
    free(X), free(T), free(A), free(dZ), free(sX), free(sdX);
    comm_free(Y, o.plain), comm_free(dX, o.plain);
    CHECK(xc_comm_destroy(tpc));
    CHECK(xc_comm_destroy(dpc));
    CHECK(xc_comm_destroy(world));
    return ok && vol_ok ? 0 : 1;
}
