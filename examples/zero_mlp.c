/*
 * zero_mlp.c -- data-parallel training of a deep MLP with ZeRO stages 1, 2
 * and 3 (xc_zero_*), one after the other with the same seed: the step time
 * and memory per rank of each, and the final parameters of all three
 * checked against the same training done by one process.
 *
 *   xcoll-run -n 2 ./zero_mlp                    stages 1, 2, 3
 *   xcoll-run -n 4 ./zero_mlp --stage 3 --prefetch 0
 *   XCOLL_TRACE=t.json ...                       the timeline: stage 3's
 *                                                gathers beside the compute
 *
 * The model: L layers a' = relu(a W_l + b_l) (no ReLU after the last),
 * loss 0.5 |Z - T|^2 averaged over the rows; each layer is one ZeRO tensor
 * (W_l and b_l, H x H + H values); SGD with momentum in the update
 * callback (its momentum is the sharded optimizer state).  Rank r trains
 * on rows [r B/N, (r+1) B/N) of every global batch of B rows; the averaged
 * gradient (XC_AVG over the ranks of the per-rank means) is the gradient
 * of the global batch.
 *
 * Stage 3 fetches layer l before its forward and again before its
 * backward (its W is needed for the input gradient) and releases it
 * after; with --prefetch K the next K layers of the pass are gathered
 * while layer l computes (at most 2 gathers in flight).  Each layer's
 * gradient is reduce-scattered as soon as backward has it (stages 2-3),
 * while the earlier layers compute.
 *
 * Bytes: per step it prints what the ZeRO calls sent (xc_comm_stats)
 * beside the seed's formula -- a reduce-scatter or all-gather of a tensor
 * of s N values sends (N-1) s values from each rank: stages 1-2 one of
 * each per tensor, stage 3 a gather in forward and in backward (but the
 * last tensor's, kept) and a reduce-scatter.  The ring algorithms are
 * forced (XCOLL_ALGO, unless set) so that measured and formula are the
 * same quantity; they must agree exactly.
 */
#include "common/example.h"

#include "train_mlp/gemm.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *example_name = "zero_mlp";


typedef struct opts {
    int stages, layers, hidden, batch, steps, prefetch;
    double bucket_mb;
    float lr, mu;
    uint64_t seed;
} opts_t;

static void batch(const opts_t *o, int s, int r0, int n, float *X, float *T)
{
    batch_rows(o->seed, s, o->batch, r0, n, o->hidden, X, T);
}

static void layer_init(const opts_t *o, int l, float *wb)
{
    int H = o->hidden;
    for (int i = 0; i < H * H; i++) wb[i] = val(o->seed, 1 + (uint64_t)l, (uint64_t)i, 1.2f / sqrtf((float)H));
    for (int k = 0; k < H; k++) wb[H * H + k] = val(o->seed, 100 + (uint64_t)l, (uint64_t)k, 0.05f);
}

/* Forward of one layer: out = act(in W + b); pre keeps in W + b. */
static void layer_fwd(int n, int H, const float *wb, const float *in, float *pre, float *out, int relu)
{
    if (gemm((size_t)n, (size_t)H, (size_t)H, in, (size_t)H, wb, (size_t)H, 0, pre, (size_t)H)) exit(1);
    for (int r = 0; r < n; r++)
        for (int k = 0; k < H; k++) {
            float v = pre[(size_t)r * H + k] + wb[H * H + k];
            pre[(size_t)r * H + k] = v;
            out[(size_t)r * H + k] = relu && v < 0 ? 0 : v;
        }
}

/* Backward of one layer: da = gradient of its output (overwritten with
 * the gradient of its input when din is set); g = [dW, db]. */
static void layer_bwd(int n, int H, const float *wb, const float *in, const float *pre, int relu,
                      float *da, float *g, float *din, float *tmp)
{
    if (relu)
        for (size_t i = 0; i < (size_t)n * H; i++) da[i] = pre[i] > 0 ? da[i] : 0;
    transpose((size_t)n, (size_t)H, in, tmp); /* H x n */
    if (gemm((size_t)H, (size_t)H, (size_t)n, tmp, (size_t)n, da, (size_t)H, 0, g, (size_t)H)) exit(1);
    for (int k = 0; k < H; k++) {
        float s = 0;
        for (int r = 0; r < n; r++) s += da[(size_t)r * H + k];
        g[H * H + k] = s;
    }
    if (din && gemm((size_t)n, (size_t)H, (size_t)H, da, (size_t)H, wb, (size_t)H, 1, din, (size_t)H)) exit(1);
}

typedef struct optim {
    float lr, mu;
} optim_t;

static int sgd_momentum(void *ctx, int tensor, float *p, const float *g, float *v, size_t n,
                        size_t offset)
{
    const optim_t *o = ctx;
    (void)tensor, (void)offset;
    for (size_t j = 0; j < n; j++) {
        v[j] = o->mu * v[j] + g[j];
        p[j] -= o->lr * v[j];
    }
    return 0;
}

typedef struct result {
    double bytes, formula; /* per step, of the ZeRO calls */
    double step_ms, loss;
    xc_zero_memory_t mem;
    float *final; /* all layers, gathered */
} result_t;

static void train(const opts_t *o, int stage, xc_comm_t *comm, result_t *res)
{
    int N = xc_comm_size(comm), me = xc_comm_rank(comm), H = o->hidden, L = o->layers;
    int n = o->batch / N;
    size_t per = (size_t)H * H + H;
    xc_zero_opts_t zo = XC_ZERO_OPTS_INIT;
    zo.stage = stage, zo.prefetch = o->prefetch, zo.inflight = 2, zo.state_per_value = 1;
    zo.bucket_mb = o->bucket_mb;
    xc_zero_t *z;
    CHECK(xc_zero_create(comm, &zo, &z));
    float *wb = malloc(sizeof(float) * per);
    for (int l = 0; l < L; l++) {
        layer_init(o, l, wb);
        CHECK(xc_zero_register(z, wb, per, NULL));
    }
    free(wb);
    CHECK(xc_zero_commit(z));
    float *X = malloc(sizeof(float) * (size_t)n * H), *T = malloc(sizeof(float) * (size_t)n * H);
    float *act = malloc(sizeof(float) * (size_t)(L + 1) * n * H), *pre = malloc(sizeof(float) * (size_t)L * n * H);
    float *da = malloc(sizeof(float) * (size_t)n * H), *din = malloc(sizeof(float) * (size_t)n * H);
    float *tmp = malloc(sizeof(float) * (size_t)n * H);
    double *step = malloc(sizeof(double) * (size_t)o->steps);
    optim_t opt = {o->lr, o->mu};
    for (int s = 0; s < o->steps; s++) {
        batch(o, s, me * n, n, X, T);
        CHECK(xc_barrier(comm));
        uint64_t b0 = bytes_sent(comm);
        double t0 = now_ms();
        memcpy(act, X, sizeof(float) * (size_t)n * H);
        CHECK(xc_zero_begin(z, XC_ZERO_FORWARD));
        for (int l = 0; l < L; l++) { /* compute spans only: waits for gathers are not compute */
            float *w;
            CHECK(xc_zero_fetch(z, l, &w));
            xc_trace_begin("forward");
            layer_fwd(n, H, w, act + (size_t)l * n * H, pre + (size_t)l * n * H,
                      act + (size_t)(l + 1) * n * H, l + 1 < L);
            xc_trace_end();
            CHECK(xc_zero_release(z, l));
        }
        double loss = 0;
        const float *Z = act + (size_t)L * n * H;
        for (size_t i = 0; i < (size_t)n * H; i++) {
            float d = Z[i] - T[i];
            loss += 0.5 * (double)d * d;
            da[i] = d / (float)n; /* the mean over this rank's rows; AVG over ranks */
        }
        CHECK(xc_zero_begin(z, XC_ZERO_BACKWARD));
        for (int l = L - 1; l >= 0; l--) {
            float *w;
            CHECK(xc_zero_fetch(z, l, &w));
            float *g = xc_zero_grad(z, l);
            if (!g) CHECK(XC_ERR_NOMEM);
            xc_trace_begin("backward");
            layer_bwd(n, H, w, act + (size_t)l * n * H, pre + (size_t)l * n * H, l + 1 < L, da, g,
                      l > 0 ? din : NULL, tmp);
            xc_trace_end();
            CHECK(xc_zero_grad_ready(z, l));
            CHECK(xc_zero_release(z, l));
            if (l > 0) memcpy(da, din, sizeof(float) * (size_t)n * H);
        }
        /* no compute span: the step is mostly communication (stage 1-2) */
        CHECK(xc_zero_step(z, sgd_momentum, &opt));
        step[s] = now_ms() - t0;
        res->bytes = (double)(bytes_sent(comm) - b0);
        CHECK(xc_allreduce(&loss, &loss, 1, XC_FLOAT64, XC_SUM, comm));
        res->loss = loss / o->batch;
        xc_trace_step(NULL); /* XC_ERR_UNSUPPORTED when not tracing: fine */
    }
    res->step_ms = median_of(step, o->steps);
    /* the formula: (N-1) s values per tensor collective, x 4 bytes */
    size_t sh = (per + (size_t)N - 1) / (size_t)N;
    res->formula = (double)(N - 1) * (double)sh * 4 * (stage < 3 ? 2.0 * L : 3.0 * L - 1);
    CHECK(xc_allreduce(&res->step_ms, &res->step_ms, 1, XC_FLOAT64, XC_MAX, comm));
    CHECK(xc_zero_memory(z, &res->mem));
    res->final = malloc(sizeof(float) * per * L);
    for (int l = 0; l < L; l++) CHECK(xc_zero_gather(z, l, res->final + (size_t)l * per));
    xc_zero_destroy(z);
    free(X), free(T), free(act), free(pre), free(da), free(din), free(tmp), free(step);
}

/* One process: the whole batch, plain SGD with momentum. */
static float *serial(const opts_t *o, double *last_loss)
{
    int H = o->hidden, L = o->layers, B = o->batch;
    size_t per = (size_t)H * H + H;
    float *w = malloc(sizeof(float) * per * L), *v = calloc(per * L, sizeof(float));
    float *g = malloc(sizeof(float) * per);
    for (int l = 0; l < L; l++) layer_init(o, l, w + (size_t)l * per);
    float *X = malloc(sizeof(float) * (size_t)B * H), *T = malloc(sizeof(float) * (size_t)B * H);
    float *act = malloc(sizeof(float) * (size_t)(L + 1) * B * H), *pre = malloc(sizeof(float) * (size_t)L * B * H);
    float *da = malloc(sizeof(float) * (size_t)B * H), *din = malloc(sizeof(float) * (size_t)B * H);
    float *tmp = malloc(sizeof(float) * (size_t)B * H);
    for (int s = 0; s < o->steps; s++) {
        batch(o, s, 0, B, X, T);
        memcpy(act, X, sizeof(float) * (size_t)B * H);
        for (int l = 0; l < L; l++)
            layer_fwd(B, H, w + (size_t)l * per, act + (size_t)l * B * H, pre + (size_t)l * B * H,
                      act + (size_t)(l + 1) * B * H, l + 1 < L);
        double loss = 0;
        const float *Z = act + (size_t)L * B * H;
        for (size_t i = 0; i < (size_t)B * H; i++) {
            float d = Z[i] - T[i];
            loss += 0.5 * (double)d * d;
            da[i] = d / (float)B;
        }
        *last_loss = loss / B;
        for (int l = L - 1; l >= 0; l--) {
            layer_bwd(B, H, w + (size_t)l * per, act + (size_t)l * B * H, pre + (size_t)l * B * H,
                      l + 1 < L, da, g, l > 0 ? din : NULL, tmp);
            float *wl = w + (size_t)l * per, *vl = v + (size_t)l * per;
            for (size_t j = 0; j < per; j++) {
                vl[j] = o->mu * vl[j] + g[j];
                wl[j] -= o->lr * vl[j];
            }
            if (l > 0) memcpy(da, din, sizeof(float) * (size_t)B * H);
        }
    }
    free(v), free(g), free(X), free(T), free(act), free(pre), free(da), free(din), free(tmp);
    return w;
}

int main(int argc, char **argv)
{
    int forced = !getenv("XCOLL_ALGO");
    if (forced) setenv("XCOLL_ALGO", "reduce_scatter.ring,allgather.ring", 1);
    xc_comm_t *comm;
    CHECK(xc_comm_init_env(&comm, NULL));
    int N = xc_comm_size(comm), me = xc_comm_rank(comm);
    opts_t o = {.stages = 7, .layers = 6, .hidden = 128, .batch = 64, .steps = 6, .prefetch = 2,
                .lr = 0.02f, .mu = 0.9f, .seed = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--stage") && v) o.stages = 1 << (atoi(v) - 1), i++;
        else if (!strcmp(a, "--layers") && v) o.layers = atoi(v), i++;
        else if (!strcmp(a, "--hidden") && v) o.hidden = atoi(v), i++;
        else if (!strcmp(a, "--batch") && v) o.batch = atoi(v), i++;
        else if (!strcmp(a, "--steps") && v) o.steps = atoi(v), i++;
        else if (!strcmp(a, "--prefetch") && v) o.prefetch = atoi(v), i++;
        else if (!strcmp(a, "--bucket-mb") && v) o.bucket_mb = atof(v), i++;
        else if (!strcmp(a, "--lr") && v) o.lr = (float)atof(v), i++;
        else {
            fprintf(stderr, "usage: xcoll-run -n N zero_mlp [--stage 1|2|3 (all)] [--layers L (6)] "
                            "[--hidden H (128)] [--batch B (64)] [--steps S (6)] [--prefetch K (2)] "
                            "[--bucket-mb MB (0: a bucket per layer)]\n");
            return 2;
        }
    }
    if (o.batch % N || o.layers < 1 || o.steps < 1 || !(o.stages & 7) || o.stages > 7) {
        fprintf(stderr, "zero_mlp: the batch %d must divide by the %d ranks\n", o.batch, N);
        return 2;
    }
    size_t per = (size_t)o.hidden * o.hidden + o.hidden, all = per * o.layers;
    if (me == 0)
        printf("zero_mlp: %d ranks, %d layers of %d (%zu parameters, %.1f MiB), batch %d, %d "
               "steps, prefetch %d\n", N, o.layers, o.hidden, all, all * 4.0 / 1048576, o.batch,
               o.steps, o.prefetch);
    double sloss = 0;
    float *ref = serial(&o, &sloss);
    int ok = 1;
    if (me == 0)
        printf("%-6s %9s %10s %22s %22s %14s %10s %12s %12s %s\n", "stage", "step ms", "loss",
               "params peak (x full)", "grads peak (x full)", "state (x full)", "vs 1 proc",
               "bytes/step", "formula", "");
    for (int st = 1; st <= 3; st++) {
        if (!(o.stages & (1 << (st - 1)))) continue;
        result_t r;
        train(&o, st, comm, &r);
        double worst = 0;
        for (size_t i = 0; i < all; i++) {
            double e = fabs((double)r.final[i] - ref[i]) / (fabs((double)ref[i]) + 1e-3);
            worst = e > worst ? e : worst;
        }
        CHECK(xc_allreduce(&worst, &worst, 1, XC_FLOAT64, XC_MAX, comm));
        double bmax = r.bytes;
        CHECK(xc_allreduce(&bmax, &bmax, 1, XC_FLOAT64, XC_MAX, comm));
        int bytes_ok = !forced || o.bucket_mb > 0 || bmax == r.formula; /* formula: a bucket per layer */
        int pass = worst <= 1e-4 && fabs(r.loss - sloss) <= 1e-4 * fabs(sloss) && bytes_ok;
        ok &= pass;
        double full = (double)all * 4;
        if (me == 0)
            printf("%-6d %9.2f %10.6f %12zu B (%5.2f) %12zu B (%5.2f) %6zu B (%4.2f) %10.1e %12.0f "
                   "%12.0f %s\n", st, r.step_ms, r.loss, r.mem.peak_params,
                   r.mem.peak_params / full, r.mem.peak_grads, r.mem.peak_grads / full,
                   r.mem.state, r.mem.state / full, worst, bmax, r.formula,
                   pass ? "PASS" : "FAIL");
        free(r.final);
    }
    if (me == 0)
        printf("memory per rank (x full: of one unsharded copy); one process: loss %.6f\n", sloss);
    free(ref);
    CHECK(xc_comm_destroy(comm));
    return ok ? 0 : 1;
}
