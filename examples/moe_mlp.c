/*
 * moe_mlp.c -- a mixture-of-experts layer with expert parallelism: a top-k
 * router sends every token to the ranks that hold its experts with
 * xc_alltoallv and brings the results back the same way; trained for a
 * few steps and checked against the same layer computed by one process.
 *
 *   xcoll-run -n 4 ./moe_mlp                 8 experts, 2 per rank, top-2
 *   xcoll-run -n 2 ./moe_mlp --experts 4 --topk 1
 *
 * The layer: each rank holds `tokens` tokens of width H (its part of the
 * batch) and E/N experts (expert e on rank e / (E/N)); a fixed router
 * (logits x R, R: H x E) picks each token's top-k experts and their
 * softmax weights g; expert e is an FFN f_e(x) = relu(x W1_e) W2_e; the
 * output is y = Σ_k g_k f_{e_k}(x); loss 0.5 |y - t|^2 over all tokens,
 * divided by their number; SGD on the experts' weights.
 *
 * Per step, four all-to-all-v exchanges (each preceded by one all-to-all
 * of the per-destination counts, a few bytes):
 *   forward  dispatch: (token, expert) pairs to the experts' ranks;
 *   forward  combine:  the experts' outputs back to the tokens' ranks;
 *   backward dispatch: dL/d(expert output) to the experts' ranks;
 *   backward combine:  dL/d(expert input) back to the tokens' ranks, summed
 *                      over each token's k experts into dL/dx (what the
 *                      layer below would need; the router is fixed).
 * The example prints its bytes sent per step beside the count of rows it
 * sent to other ranks x width x 4 (they must agree), and the time the
 * exchanges took per step (the median step, the slowest rank's; for
 * xcoll-plan's prediction, docs/plan.md).
 *
 * Every rank recomputes the whole layer for all tokens in one process and
 * compares the loss, dL/dx of its tokens and its experts' final weights
 * (relative 1e-4).  --no-twin skips that (timing runs with many tokens);
 * --sync puts a barrier before each timed exchange (so the time is the
 * transfer's, not the wait for a rank with more tokens to compute).
 */
#include "common/example.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *example_name = "moe_mlp";


typedef struct opts {
    int experts, topk, tokens, hidden, ffn, steps, twin;
    float lr;
    uint64_t seed;
} opts_t;

/* Experts [e0, e0 + ne): W1 [H x F], W2 [F x H] each, and gradients. */
typedef struct experts {
    int e0, ne, H, F;
    float *w1, *w2, *g1, *g2;
} experts_t;

static void experts_init(experts_t *x, const opts_t *o, int e0, int ne)
{
    int H = o->hidden, F = o->ffn;
    x->e0 = e0, x->ne = ne, x->H = H, x->F = F;
    size_t n = (size_t)ne * H * F;
    x->w1 = malloc(sizeof(float) * n), x->w2 = malloc(sizeof(float) * n);
    x->g1 = calloc(n, sizeof(float)), x->g2 = calloc(n, sizeof(float));
    for (int e = 0; e < ne; e++)
        for (size_t i = 0; i < (size_t)H * F; i++) {
            x->w1[(size_t)e * H * F + i] = val(o->seed, 10 + (uint64_t)(e0 + e), i, 1.0f / sqrtf((float)H));
            x->w2[(size_t)e * H * F + i] = val(o->seed, 500 + (uint64_t)(e0 + e), i, 1.0f / sqrtf((float)F));
        }
}

static void experts_free(experts_t *x) { free(x->w1), free(x->w2), free(x->g1), free(x->g2); }

/* Forward of one row through local expert e: out = relu(in W1) W2; h gets
 * the hidden pre-activation (F) for the backward. */
static void expert_fwd(const experts_t *x, int e, const float *in, float *h, float *out)
{
    int H = x->H, F = x->F;
    const float *W1 = x->w1 + (size_t)e * H * F, *W2 = x->w2 + (size_t)e * H * F;
    for (int j = 0; j < F; j++) h[j] = 0;
    for (int i = 0; i < H; i++)
        for (int j = 0; j < F; j++) h[j] += in[i] * W1[(size_t)i * F + j];
    for (int k = 0; k < H; k++) out[k] = 0;
    for (int j = 0; j < F; j++) {
        float a = h[j] > 0 ? h[j] : 0;
        for (int k = 0; k < H; k++) out[k] += a * W2[(size_t)j * H + k];
    }
}

/* Backward of one row: dout = dL/d(expert output); gradients accumulate;
 * din (H) gets dL/d(expert input). */
static void expert_bwd(experts_t *x, int e, const float *in, const float *h, const float *dout,
                       float *din)
{
    int H = x->H, F = x->F;
    const float *W1 = x->w1 + (size_t)e * H * F, *W2 = x->w2 + (size_t)e * H * F;
    float *G1 = x->g1 + (size_t)e * H * F, *G2 = x->g2 + (size_t)e * H * F;
    for (int i = 0; i < H; i++) din[i] = 0;
    for (int j = 0; j < F; j++) {
        float a = h[j] > 0 ? h[j] : 0, da = 0;
        for (int k = 0; k < H; k++) {
            G2[(size_t)j * H + k] += a * dout[k];
            da += W2[(size_t)j * H + k] * dout[k];
        }
        if (h[j] > 0)
            for (int i = 0; i < H; i++) {
                G1[(size_t)i * F + j] += in[i] * da;
                din[i] += W1[(size_t)i * F + j] * da;
            }
    }
}

static void sgd(experts_t *x, float lr)
{
    size_t n = (size_t)x->ne * x->H * x->F;
    for (size_t i = 0; i < n; i++) {
        x->w1[i] -= lr * x->g1[i], x->w2[i] -= lr * x->g2[i];
        x->g1[i] = x->g2[i] = 0;
    }
}

/* Token i (global index) of step s: input and target. */
static void token(const opts_t *o, int s, long i, float *x, float *t)
{
    for (int k = 0; k < o->hidden; k++) {
        uint64_t j = ((uint64_t)s * 1000003u + (uint64_t)i) * (uint64_t)o->hidden + (uint64_t)k;
        x[k] = val(o->seed, 1, j, 1.0f);
        t[k] = val(o->seed, 2, j, 0.5f);
    }
}

/* The router: top-k experts of x and their softmax weights (over the k). */
static void route(const opts_t *o, const float *x, int *ex, float *g)
{
    int E = o->experts;
    float logit[256];
    for (int e = 0; e < E; e++) {
        float l = 0;
        for (int k = 0; k < o->hidden; k++) l += x[k] * val(o->seed, 3, (uint64_t)k * E + e, 1.0f);
        logit[e] = l;
    }
    for (int j = 0; j < o->topk; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= ex[q] == e;
            if (!taken && (best < 0 || logit[e] > logit[best])) best = e;
        }
        ex[j] = best;
    }
    double z = 0, m = logit[ex[0]];
    for (int j = 0; j < o->topk; j++) z += exp((double)logit[ex[j]] - m);
    for (int j = 0; j < o->topk; j++) g[j] = (float)(exp((double)logit[ex[j]] - m) / z);
}

static uint64_t g_rows_bytes; /* sent by the data exchanges (not the counts) */
static double g_xchg_ms;      /* time in this step's exchanges (counts and data) */
static int g_sync;            /* --sync: a barrier before each timed exchange */

/* Exchange rows of width w: send[j] rows (packed by destination) to rank
 * j; returns rbuf holding the received rows (packed by source), and their
 * counts.  rbuf is the caller's, allocated once for the most rows a rank
 * can receive and touched before the first step -- as a framework keeps
 * its buffers: a fresh buffer per exchange would time the page faults of
 * the copies into it as communication (on this kind of VM ~4 ms on top of
 * a ~9 ms exchange of 2 MiB, 1 MiB of it over a 1 Gbit/s link). */
static float *exchange(xc_comm_t *c, const float *sbuf, const size_t *scnt, size_t *rcnt, int w,
                       float *rbuf, size_t rcap, size_t *rtotal)
{
    int n = xc_comm_size(c);
    if (g_sync) CHECK(xc_barrier(c)); /* time the transfer, not the wait for a slower rank */
    double t0 = now_ms();
    CHECK(xc_alltoall(scnt, rcnt, 1, XC_UINT64, c));
    size_t *sc = malloc(sizeof(size_t) * n * 4), *sd = sc + n, *rc = sd + n, *rd = rc + n;
    size_t so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = scnt[j] * w, sd[j] = so, so += sc[j];
        rc[j] = rcnt[j] * w, rd[j] = ro, ro += rc[j];
    }
    if (ro > rcap) { /* the capacities in main are wrong */
        fprintf(stderr, "moe_mlp: %zu values to receive, room for %zu\n", ro, rcap);
        exit(1);
    }
    uint64_t b0 = bytes_sent(c);
    CHECK(xc_alltoallv(sbuf, sc, sd, rbuf, rc, rd, XC_FLOAT32, c));
    g_rows_bytes += bytes_sent(c) - b0;
    g_xchg_ms += now_ms() - t0;
    free(sc);
    *rtotal = ro / (size_t)w;
    return rbuf;
}

int main(int argc, char **argv)
{
    xc_comm_t *comm;
    CHECK(xc_comm_init_env(&comm, NULL));
    int N = xc_comm_size(comm), me = xc_comm_rank(comm);
    opts_t o = {.experts = 2 * N, .topk = 2, .tokens = 48, .hidden = 32, .ffn = 64, .steps = 3,
                .twin = 1, .lr = 0.1f, .seed = 5};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--experts") && v) o.experts = atoi(v), i++;
        else if (!strcmp(a, "--topk") && v) o.topk = atoi(v), i++;
        else if (!strcmp(a, "--tokens") && v) o.tokens = atoi(v), i++;
        else if (!strcmp(a, "--hidden") && v) o.hidden = atoi(v), i++;
        else if (!strcmp(a, "--ffn") && v) o.ffn = atoi(v), i++;
        else if (!strcmp(a, "--steps") && v) o.steps = atoi(v), i++;
        else if (!strcmp(a, "--no-twin")) o.twin = 0;
        else if (!strcmp(a, "--sync")) g_sync = 1;
        else {
            fprintf(stderr, "usage: xcoll-run -n N moe_mlp [--experts E (2N)] [--topk K (2)] "
                            "[--tokens T per rank (48)] [--hidden H (32)] [--ffn F (64)] "
                            "[--steps S (3)] [--no-twin] [--sync]\n");
            return 2;
        }
    }
    if (o.experts % N || o.experts > 256 || o.topk < 1 || o.topk > o.experts || o.tokens < 0 ||
        o.hidden < 1 || o.hidden > 512 || o.ffn < 1 || o.steps < 1) {
        fprintf(stderr, "moe_mlp: --experts %d must be a multiple of the %d ranks (<= 256), "
                        "1 <= --topk %d <= experts, 1 <= --hidden %d <= 512\n", o.experts, N,
                o.topk, o.hidden);
        return 2;
    }
    int H = o.hidden, F = o.ffn, K = o.topk, epr = o.experts / N, T = o.tokens;
    long total = (long)T * N;
    experts_t mine, all;
    experts_init(&mine, &o, me * epr, epr);
    experts_init(&all, &o, 0, o.experts);
    if (me == 0)
        printf("moe_mlp: %d ranks, %d experts (%d per rank), top-%d, %d tokens per rank of %d, "
               "FFN %d, %d steps\n", N, o.experts, epr, K, T, H, F, o.steps);
    float *x = malloc(sizeof(float) * (size_t)T * H), *t = malloc(sizeof(float) * (size_t)T * H);
    int *ex = malloc(sizeof(int) * (size_t)T * K);
    float *g = malloc(sizeof(float) * (size_t)T * K);
    size_t *scnt = calloc((size_t)N * 2, sizeof(size_t)), *rcnt = scnt + N;
    double worst_loss = 0, worst_dx = 0;
    uint64_t rows_off = 0; /* values sent to other ranks */
    float *dx = malloc(sizeof(float) * ((size_t)T * H + 1)), *sdx = malloc(sizeof(float) * ((size_t)T * H + 1));
    double *xchg = calloc((size_t)o.steps, sizeof *xchg); /* exchange time per step */
    /* The four exchanges' receive buffers.  Dispatches (forward: rows of
     * H + 1, backward: of H) bring each rank's tokens routed here: a token
     * picks K distinct experts, at most min(K, epr) of them on one rank;
     * combines bring back exactly the T x K rows this rank sent. */
    size_t most = (size_t)N * T * (size_t)(K < epr ? K : epr), own = (size_t)T * K;
    size_t cap[4] = {most * (size_t)(H + 1), own * (size_t)H, most * (size_t)H, own * (size_t)H};
    float *xb[4];
    for (int i = 0; i < 4; i++) {
        if (!cap[i]) cap[i] = 1;
        if ((xb[i] = malloc(sizeof(float) * cap[i])) != NULL) memset(xb[i], 0, sizeof(float) * cap[i]);
    }
    if (!xchg || !xb[0] || !xb[1] || !xb[2] || !xb[3]) {
        fprintf(stderr, "moe_mlp: out of memory\n");
        return 1;
    }
    for (int s = 0; s < o.steps; s++) {
        g_xchg_ms = 0;
        for (int i = 0; i < T; i++) {
            token(&o, s, (long)me * T + i, x + (size_t)i * H, t + (size_t)i * H);
            route(&o, x + (size_t)i * H, ex + (size_t)i * K, g + (size_t)i * K);
        }
        /* dispatch: (token, slot) pairs grouped by the expert's rank; each
         * row carries the expert index in its first float after the data */
        int w = H + 1;
        memset(scnt, 0, sizeof(size_t) * N);
        for (int i = 0; i < T * K; i++) scnt[ex[i] / epr]++;
        size_t *off = calloc((size_t)N + 1, sizeof(size_t));
        for (int j = 0; j < N; j++) off[j + 1] = off[j] + scnt[j];
        float *sbuf = malloc(sizeof(float) * (off[N] ? off[N] : 1) * w);
        int *slot_of = malloc(sizeof(int) * (size_t)(T * K > 0 ? T * K : 1)); /* row -> (token, k) */
        size_t *fill = calloc((size_t)N, sizeof(size_t));
        for (int i = 0; i < T * K; i++) {
            int j = ex[i] / epr;
            size_t r = off[j] + fill[j]++;
            memcpy(sbuf + r * w, x + (size_t)(i / K) * H, sizeof(float) * H);
            sbuf[r * w + H] = (float)ex[i];
            slot_of[r] = i;
        }
        for (int j = 0; j < N; j++) rows_off += j != me ? scnt[j] * (uint64_t)w : 0;
        size_t nr;
        float *rbuf = exchange(comm, sbuf, scnt, rcnt, w, xb[0], cap[0], &nr);
        /* the experts: forward every received row */
        float *h = malloc(sizeof(float) * (nr ? nr : 1) * F), *y = malloc(sizeof(float) * (nr ? nr : 1) * H);
        for (size_t r = 0; r < nr; r++)
            expert_fwd(&mine, (int)rbuf[r * w + H] - mine.e0, rbuf + r * w, h + r * F, y + r * H);
        /* combine: outputs back in the received order */
        size_t nb;
        size_t *back = calloc((size_t)N * 2, sizeof(size_t));
        memcpy(back, rcnt, sizeof(size_t) * N);
        float *ybuf = exchange(comm, y, back, back + N, H, xb[1], cap[1], &nb);
        for (int j = 0; j < N; j++) rows_off += j != me ? rcnt[j] * (uint64_t)H : 0;
        /* tokens: y = Σ g f(x); loss; dL/df = g (y - t) / total */
        float *out = calloc((size_t)T * H, sizeof(float));
        for (size_t r = 0; r < nb; r++) {
            int i = slot_of[r];
            for (int k = 0; k < H; k++) out[(size_t)(i / K) * H + k] += g[i] * ybuf[r * H + k];
        }
        double loss = 0;
        for (size_t q = 0; q < (size_t)T * H; q++) loss += 0.5 * (double)(out[q] - t[q]) * (out[q] - t[q]);
        float *dbuf = malloc(sizeof(float) * (nb ? nb : 1) * H);
        for (size_t r = 0; r < nb; r++) {
            int i = slot_of[r];
            for (int k = 0; k < H; k++)
                dbuf[r * H + k] = g[i] * (out[(size_t)(i / K) * H + k] - t[(size_t)(i / K) * H + k]) / (float)total;
        }
        /* backward dispatch: the gradients to the experts, in the order
         * the rows were dispatched */
        size_t nd;
        float *dy = exchange(comm, dbuf, scnt, rcnt, H, xb[2], cap[2], &nd);
        for (int j = 0; j < N; j++) rows_off += j != me ? scnt[j] * (uint64_t)H : 0;
        float *din = malloc(sizeof(float) * (nd ? nd : 1) * H);
        for (size_t r = 0; r < nd; r++)
            expert_bwd(&mine, (int)rbuf[r * w + H] - mine.e0, rbuf + r * w, h + r * F, dy + r * H,
                       din + r * H);
        sgd(&mine, o.lr);
        /* backward combine: dL/d(expert input) back to the tokens' ranks,
         * in dispatch order; summed over each token's k experts */
        size_t nx;
        float *dxb = exchange(comm, din, back, back + N, H, xb[3], cap[3], &nx);
        for (int j = 0; j < N; j++) rows_off += j != me ? rcnt[j] * (uint64_t)H : 0;
        memset(dx, 0, sizeof(float) * (size_t)T * H);
        for (size_t r = 0; r < nx; r++) {
            int i = slot_of[r];
            for (int k = 0; k < H; k++) dx[(size_t)(i / K) * H + k] += dxb[r * H + k];
        }
        free(din);
        xchg[s] = g_xchg_ms;
        CHECK(xc_allreduce(&loss, &loss, 1, XC_FLOAT64, XC_SUM, comm));
        loss /= total ? (double)total : 1;
        if (!o.twin) {
            free(off), free(sbuf), free(slot_of), free(fill), free(h), free(y), free(back);
            free(out), free(dbuf);
            continue;
        }
        /* one process: every token through every chosen expert */
        double sloss = 0;
        float *xs = malloc(sizeof(float) * H), *ts = malloc(sizeof(float) * H), *hs = malloc(sizeof(float) * F);
        float *fs = malloc(sizeof(float) * H * K), *hk = malloc(sizeof(float) * F * K), *ys = malloc(sizeof(float) * H);
        int exs[256];
        float gs[256];
        for (long i = 0; i < total; i++) {
            token(&o, s, i, xs, ts);
            route(&o, xs, exs, gs);
            for (int k = 0; k < H; k++) ys[k] = 0;
            for (int q = 0; q < K; q++) {
                expert_fwd(&all, exs[q], xs, hk + (size_t)q * F, fs + (size_t)q * H);
                for (int k = 0; k < H; k++) ys[k] += gs[q] * fs[(size_t)q * H + k];
            }
            for (int k = 0; k < H; k++) sloss += 0.5 * (double)(ys[k] - ts[k]) * (ys[k] - ts[k]);
            int mine_tok = i >= (long)me * T && i < (long)(me + 1) * T;
            float *sd = sdx + (size_t)(i - (long)me * T) * H;
            if (mine_tok)
                for (int k = 0; k < H; k++) sd[k] = 0;
            for (int q = 0; q < K; q++) {
                float d[512], di[512];
                for (int k = 0; k < H; k++) d[k] = gs[q] * (ys[k] - ts[k]) / (float)total;
                expert_bwd(&all, exs[q], xs, hk + (size_t)q * F, d, di);
                if (mine_tok)
                    for (int k = 0; k < H; k++) sd[k] += di[k];
            }
        }
        sgd(&all, o.lr);
        sloss /= total ? (double)total : 1;
        double e = sloss > 0 ? fabs(loss - sloss) / sloss : fabs(loss - sloss);
        worst_loss = e > worst_loss ? e : worst_loss;
        for (size_t q = 0; q < (size_t)T * H; q++) {
            double de = fabs((double)dx[q] - sdx[q]) / (fabs((double)sdx[q]) + 1e-3);
            worst_dx = de > worst_dx ? de : worst_dx;
        }
        if (me == 0) printf("step %d: loss %.6f (one process %.6f)\n", s + 1, loss, sloss);
        free(xs), free(ts), free(hs), free(fs), free(hk), free(ys);
        free(off), free(sbuf), free(slot_of), free(fill), free(h), free(y), free(back);
        free(out), free(dbuf);
    }
    double worst_w = 0;
    size_t n = (size_t)epr * H * F;
    for (size_t i = 0; o.twin && i < n; i++) {
        double a = mine.w1[i], b = all.w1[(size_t)me * n + i], c = mine.w2[i], d = all.w2[(size_t)me * n + i];
        double e1 = fabs(a - b) / (fabs(b) + 1e-3), e2 = fabs(c - d) / (fabs(d) + 1e-3);
        worst_w = e1 > worst_w ? e1 : worst_w;
        worst_w = e2 > worst_w ? e2 : worst_w;
    }
    /* the four data exchanges: exactly the values sent to other ranks;
     * the exchanges' time per step (median) on the slowest rank */
    double w[5] = {worst_loss, worst_w, worst_dx, g_rows_bytes == rows_off * sizeof(float) ? 0 : 1,
                   median_of(xchg, o.steps)};
    free(xchg);
    for (int i = 0; i < 4; i++) free(xb[i]);
    CHECK(xc_allreduce(w, w, 5, XC_FLOAT64, XC_MAX, comm));
    int ok = w[0] <= 1e-4 && w[1] <= 1e-4 && w[2] <= 1e-4 && w[3] == 0;
    if (me == 0) {
        printf("all-to-all-v bytes per step, rank 0: %.0f sent; rows routed to other ranks x "
               "width x 4: %.0f (%s on every rank)\n",
               (double)g_rows_bytes / o.steps, (double)rows_off * 4 / o.steps,
               w[3] == 0 ? "equal" : "DIFFERENT");
        printf("exchanges (4 per step, counts and rows): %.3f ms per step (median, slowest rank)\n", w[4]);
        if (o.twin)
            printf("against one process: loss %.1e, dL/dx %.1e, expert weights %.1e (tolerance "
                   "1e-4): %s\n", w[0], w[2], w[1], ok ? "PASS" : "FAIL");
        else
            printf("against one process: not checked (--no-twin)\n");
    }
    experts_free(&mine);
    experts_free(&all);
    free(x), free(t), free(ex), free(g), free(scnt), free(dx), free(sdx);
    CHECK(xc_comm_destroy(comm));
    return ok ? 0 : 1;
}
