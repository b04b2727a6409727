/*
 * pp_mlp.c -- pipeline-parallel training of a deep MLP over P stages with
 * micro-batches, in the GPipe and the 1F1B schedules, checked against the
 * same training done by one process.
 *
 *   xcoll-run -n 2 ./pp_mlp                       2 stages, both schedules
 *   xcoll-run -n 4 ./pp_mlp --micro 8 --schedule 1f1b
 *
 * The model: L layers y = a W + b, ReLU between them, loss 0.5 |Z - T|^2 / B
 * over the batch of B rows, plain SGD.  Stage s of P (rank s) holds layers
 * [s L/P, (s+1) L/P).  A batch is cut into m micro-batches; forward sends
 * each micro-batch's activations to the next stage, backward its input
 * gradient to the previous one, point to point with tags (2j: activation
 * of micro-batch j, 2j + 1: its gradient) -- xc_isend, so that a stage never
 * waits for a receiver to post, and blocking xc_recv where the data is
 * needed; where a forward is followed by a backward (1F1B's steady state)
 * the activation's send and the gradient's receive are one group
 * (xc_group_start/end, as Megatron's send_forward_recv_backward), and
 * likewise a backward's send with the next forward's receive.
 *
 *   GPipe: all m forwards, then all m backwards (most activations alive).
 *   1F1B:  P - s - 1 forwards to fill the pipe, then one forward and one
 *          backward alternately, then the remaining backwards (at most
 *          P - s micro-batches alive on stage s).
 *
 * Both leave a bubble: stage s idles while the pipe fills and drains.  In
 * the ideal (every forward and backward of a micro-batch the same on every
 * stage) the idle fraction is (P - 1) / (m + P - 1) for both; the example
 * measures each stage's busy (computing) time against the step time and
 * prints the measured bubble beside that formula, and the bytes each stage
 * sent (xc_comm_stats) beside the activations and gradients it had to send.
 *
 * Every rank also trains the whole model in one process on the whole batch
 * and compares the loss of every step and its own layers' final weights
 * (relative 1e-4: the micro-batch sums group the rows differently).
 */
#include "common/example.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *example_name = "pp_mlp";


enum { GPIPE = 1, ONE_F_ONE_B = 2 };

typedef struct opts {
    int layers, hidden, batch, micro, steps, schedules;
    float lr;
    uint64_t seed;
} opts_t;

/* Layers [l0, l0 + nl) of the model, their gradients, and per micro-batch
 * the inputs and pre-activations of each (rows x H). */
typedef struct stage {
    int l0, nl, L, H;
    float *w, *b, *gw, *gb;
    float **in, **pre; /* [micro * nl] */
} stage_t;

static void stage_init(stage_t *st, const opts_t *o, int l0, int nl, int micro, int rows)
{
    int H = o->hidden;
    st->l0 = l0, st->nl = nl, st->L = o->layers, st->H = H;
    st->w = malloc(sizeof(float) * (size_t)nl * H * H);
    st->b = malloc(sizeof(float) * (size_t)nl * H);
    st->gw = calloc((size_t)nl * H * H, sizeof(float));
    st->gb = calloc((size_t)nl * H, sizeof(float));
    st->in = calloc((size_t)micro * nl, sizeof *st->in);
    st->pre = calloc((size_t)micro * nl, sizeof *st->pre);
    for (size_t i = 0; i < (size_t)micro * nl; i++) {
        st->in[i] = malloc(sizeof(float) * (size_t)rows * H);
        st->pre[i] = malloc(sizeof(float) * (size_t)rows * H);
    }
    float s = 1.3f / sqrtf((float)H);
    for (int l = 0; l < nl; l++) {
        for (int i = 0; i < H * H; i++) st->w[(size_t)l * H * H + i] = val(o->seed, 1 + (uint64_t)(l0 + l), (uint64_t)i, s);
        for (int k = 0; k < H; k++) st->b[(size_t)l * H + k] = val(o->seed, 100 + (uint64_t)(l0 + l), (uint64_t)k, 0.05f);
    }
}

static void stage_free(stage_t *st, int micro)
{
    for (size_t i = 0; i < (size_t)micro * st->nl; i++) free(st->in[i]), free(st->pre[i]);
    free(st->in), free(st->pre), free(st->w), free(st->b), free(st->gw), free(st->gb);
}

/* Forward of micro-batch j (rows) through the stage's layers: x in (the
 * previous stage's output, after its ReLU), out = this stage's output
 * (after the ReLU unless it ends the model).  Each layer's input and
 * pre-activation are kept for the backward. */
static void fwd(stage_t *st, int j, int rows, const float *x, float *out)
{
    int H = st->H;
    size_t n = (size_t)rows * H;
    memcpy(st->in[(size_t)j * st->nl], x, sizeof(float) * n);
    for (int l = 0; l < st->nl; l++) {
        const float *in = st->in[(size_t)j * st->nl + l];
        float *y = st->pre[(size_t)j * st->nl + l];
        const float *W = st->w + (size_t)l * H * H, *bb = st->b + (size_t)l * H;
        for (int r = 0; r < rows; r++) {
            float *yr = y + (size_t)r * H;
            for (int k = 0; k < H; k++) yr[k] = bb[k];
            for (int i = 0; i < H; i++) {
                float v = in[(size_t)r * H + i];
                const float *wr = W + (size_t)i * H;
                for (int k = 0; k < H; k++) yr[k] += v * wr[k];
            }
        }
        int relu = st->l0 + l + 1 < st->L;
        float *next = l + 1 < st->nl ? st->in[(size_t)j * st->nl + l + 1] : out;
        for (size_t i = 0; i < n; i++) next[i] = relu && y[i] < 0 ? 0 : y[i];
    }
}

/* Backward of micro-batch j: dout is the gradient of the stage's output
 * (after its ReLU); gradients accumulate; din gets the input gradient. */
static void bwd(stage_t *st, int j, int rows, const float *dout, float *din)
{
    int H = st->H;
    float *dy = malloc(sizeof(float) * (size_t)rows * H), *da = malloc(sizeof(float) * (size_t)rows * H);
    memcpy(da, dout, sizeof(float) * (size_t)rows * H);
    for (int l = st->nl - 1; l >= 0; l--) {
        const float *in = st->in[(size_t)j * st->nl + l], *y = st->pre[(size_t)j * st->nl + l];
        int relu = st->l0 + l + 1 < st->L;
        for (size_t i = 0; i < (size_t)rows * H; i++) dy[i] = relu && y[i] <= 0 ? 0 : da[i];
        const float *W = st->w + (size_t)l * H * H;
        float *gW = st->gw + (size_t)l * H * H, *gb = st->gb + (size_t)l * H;
        for (int r = 0; r < rows; r++) {
            const float *dr = dy + (size_t)r * H, *ir = in + (size_t)r * H;
            for (int k = 0; k < H; k++) gb[k] += dr[k];
            for (int i = 0; i < H; i++) {
                float *g = gW + (size_t)i * H, v = ir[i], s = 0;
                const float *wr = W + (size_t)i * H;
                for (int k = 0; k < H; k++) {
                    g[k] += v * dr[k];
                    s += wr[k] * dr[k];
                }
                da[(size_t)r * H + i] = s;
            }
        }
    }
    if (din) memcpy(din, da, sizeof(float) * (size_t)rows * H);
    free(dy);
    free(da);
}

static void sgd(stage_t *st, float lr)
{
    size_t nw = (size_t)st->nl * st->H * st->H, nb = (size_t)st->nl * st->H;
    for (size_t i = 0; i < nw; i++) st->w[i] -= lr * st->gw[i], st->gw[i] = 0;
    for (size_t i = 0; i < nb; i++) st->b[i] -= lr * st->gb[i], st->gb[i] = 0;
}

static void batch(const opts_t *o, int s, int r0, int n, float *X, float *T)
{
    batch_rows(o->seed, s, o->batch, r0, n, o->hidden, X, T);
}

/* Loss of rows of the last stage's output; dZ = (Z - T) / B. */
static double loss_grad(int rows, int H, int B, const float *Z, const float *T, float *dZ)
{
    double L = 0;
    for (size_t i = 0; i < (size_t)rows * H; i++) {
        float d = Z[i] - T[i];
        L += 0.5 * (double)d * d;
        dZ[i] = d / (float)B;
    }
    return L / B;
}

typedef struct run {
    double step_ms;  /* median step */
    double busy;     /* median fraction of the step spent computing */
    double work_ms;  /* median time per step spent computing */
    double bytes;    /* sent per step */
    double err_loss, err_w; /* against one process */
    double *loss;    /* per step (the last stage's, broadcast) */
} run_t;

/* One training run of o->steps steps under `sched` (GPIPE / ONE_F_ONE_B). */
static void train(const opts_t *o, int sched, xc_comm_t *comm, run_t *out)
{
    int P = xc_comm_size(comm), s = xc_comm_rank(comm), m = o->micro, H = o->hidden;
    int nl = o->layers / P, mb = o->batch / m;
    stage_t st;
    stage_init(&st, o, s * nl, nl, m, mb);
    float *X = malloc(sizeof(float) * (size_t)o->batch * H), *T = malloc(sizeof(float) * (size_t)o->batch * H);
    float *act = malloc(sizeof(float) * (size_t)m * mb * H);  /* activations to send, per micro */
    float *grd = malloc(sizeof(float) * (size_t)m * mb * H);  /* input gradients to send */
    float *rin = malloc(sizeof(float) * (size_t)mb * H), *rg = malloc(sizeof(float) * (size_t)mb * H);
    float *z = malloc(sizeof(float) * (size_t)mb * H);
    xc_request_t **req = calloc((size_t)2 * m, sizeof *req);
    int *order = calloc((size_t)2 * m, sizeof *order);
    double *step = calloc((size_t)o->steps, sizeof *step), *busy = calloc((size_t)o->steps, sizeof *busy);
    out->loss = calloc((size_t)o->steps, sizeof *out->loss);
    uint64_t b0 = bytes_sent(comm);
    for (int t = 0; t < o->steps; t++) {
        batch(o, t, 0, o->batch, X, T);
        CHECK(xc_barrier(comm));
        double t0 = now_ms(), work = 0, loss = 0;
        /* the order of operations of this stage */
        int warm = sched == GPIPE ? m : (P - s - 1 < m ? P - s - 1 : m);
        /* The stage's order of operations: +j forward, -(j+1) backward. */
        for (int op = 0, nf = 0, nbk = 0; op < 2 * m; op++) {
            int is_fwd;
            if (op < warm) is_fwd = 1;
            else if (sched == GPIPE) is_fwd = 0;
            else is_fwd = nf < m && (op - warm) % 2 == 0;
            if (nf == m) is_fwd = 0;
            if (nbk == m) is_fwd = 1;
            order[op] = is_fwd ? nf++ : -(1 + (sched == GPIPE ? m - 1 - nbk++ : nbk++));
        }
        int have_in = -1, have_grad = -1; /* received ahead by a grouped exchange */
        for (int op = 0; op < 2 * m; op++) {
            int next = op + 1 < 2 * m ? order[op + 1] : 2 * m;
            if (order[op] >= 0) {
                int j = order[op];
                const float *x = X + (size_t)j * mb * H;
                if (s > 0) {
                    if (have_in != j) CHECK(xc_recv(rin, (size_t)mb * H, XC_FLOAT32, s - 1, 2 * j, comm));
                    x = rin;
                }
                double c0 = now_ms();
                float *y = act + (size_t)j * mb * H;
                fwd(&st, j, mb, x, y);
                if (s == P - 1) loss += loss_grad(mb, H, o->batch, y, T + (size_t)j * mb * H, z), memcpy(y, z, sizeof(float) * (size_t)mb * H);
                work += now_ms() - c0;
                if (s < P - 1 && next < 0) {
                    /* 1F1B steady state: send this activation and receive
                     * the next backward's gradient as one group */
                    int jb = -next - 1;
                    CHECK(xc_group_start());
                    CHECK(xc_send(y, (size_t)mb * H, XC_FLOAT32, s + 1, 2 * j, comm));
                    CHECK(xc_recv(rg, (size_t)mb * H, XC_FLOAT32, s + 1, 2 * jb + 1, comm));
                    CHECK(xc_group_end());
                    have_grad = jb;
                } else if (s < P - 1) {
                    CHECK(xc_isend(y, (size_t)mb * H, XC_FLOAT32, s + 1, 2 * j, comm, &req[j]));
                }
            } else {
                int j = -order[op] - 1;
                const float *dy = act + (size_t)j * mb * H; /* last stage: dZ stored there */
                if (s < P - 1) {
                    if (have_grad != j)
                        CHECK(xc_recv(rg, (size_t)mb * H, XC_FLOAT32, s + 1, 2 * j + 1, comm));
                    dy = rg;
                }
                double c0 = now_ms();
                float *dx = grd + (size_t)j * mb * H;
                bwd(&st, j, mb, dy, s > 0 ? dx : NULL);
                work += now_ms() - c0;
                if (s > 0 && next >= 0 && next < m) {
                    /* send this gradient and receive the next forward's
                     * activation as one group */
                    CHECK(xc_group_start());
                    CHECK(xc_send(dx, (size_t)mb * H, XC_FLOAT32, s - 1, 2 * j + 1, comm));
                    CHECK(xc_recv(rin, (size_t)mb * H, XC_FLOAT32, s - 1, 2 * next, comm));
                    CHECK(xc_group_end());
                    have_in = next;
                } else if (s > 0) {
                    CHECK(xc_isend(dx, (size_t)mb * H, XC_FLOAT32, s - 1, 2 * j + 1, comm, &req[m + j]));
                }
            }
        }
        for (int i = 0; i < 2 * m; i++)
            if (req[i]) {
                CHECK(xc_request_wait(req[i]));
                xc_request_free(req[i]);
                req[i] = NULL;
            }
        double c0 = now_ms();
        sgd(&st, o->lr);
        work += now_ms() - c0;
        step[t] = now_ms() - t0;
        busy[t] = work;
        out->loss[t] = loss; /* the last stage's; broadcast below */
    }
    out->bytes = (double)(bytes_sent(comm) - b0) / o->steps;
    CHECK(xc_bcast(out->loss, (size_t)o->steps, XC_FLOAT64, P - 1, comm));
    /* busy fraction per step, the median step */
    double *frac = calloc((size_t)o->steps, sizeof *frac);
    for (int t = 0; t < o->steps; t++) frac[t] = busy[t] / step[t];
    out->step_ms = median_of(step, o->steps);
    out->busy = median_of(frac, o->steps);
    out->work_ms = median_of(busy, o->steps);
    free(frac), free(step), free(busy), free(req), free(order), free(X), free(T), free(act), free(grd);
    free(rin), free(rg), free(z);
    /* one process: the whole model, the whole batch, the same steps */
    stage_t ser;
    stage_init(&ser, o, 0, o->layers, 1, o->batch);
    double worst = 0, worst_loss = 0;
    size_t nb = (size_t)o->batch * H;
    float *sX = malloc(sizeof(float) * nb), *sT = malloc(sizeof(float) * nb);
    float *sZ = malloc(sizeof(float) * nb), *sd = malloc(sizeof(float) * nb);
    for (int t = 0; t < o->steps; t++) {
        batch(o, t, 0, o->batch, sX, sT);
        fwd(&ser, 0, o->batch, sX, sZ);
        double L = loss_grad(o->batch, H, o->batch, sZ, sT, sd);
        bwd(&ser, 0, o->batch, sd, NULL);
        sgd(&ser, o->lr);
        double e = fabs(L - out->loss[t]) / fabs(L);
        worst_loss = e > worst_loss ? e : worst_loss;
    }
    for (size_t i = 0; i < (size_t)nl * H * H; i++) {
        double a = st.w[i], b = ser.w[(size_t)s * nl * H * H + i];
        double e = fabs(a - b) / (fabs(b) + 1e-3);
        worst = e > worst ? e : worst;
    }
    out->err_loss = worst_loss;
    out->err_w = worst;
    free(sX), free(sT), free(sZ), free(sd);
    stage_free(&ser, 1);
    stage_free(&st, m);
}

static void parse(int argc, char **argv, opts_t *o, int P)
{
    *o = (opts_t){.layers = 8, .hidden = 64, .batch = 64, .micro = 4, .steps = 4,
                  .schedules = GPIPE | ONE_F_ONE_B, .lr = 0.02f, .seed = 11};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--layers") && v) o->layers = atoi(v), i++;
        else if (!strcmp(a, "--hidden") && v) o->hidden = atoi(v), i++;
        else if (!strcmp(a, "--batch") && v) o->batch = atoi(v), i++;
        else if (!strcmp(a, "--micro") && v) o->micro = atoi(v), i++;
        else if (!strcmp(a, "--steps") && v) o->steps = atoi(v), i++;
        else if (!strcmp(a, "--lr") && v) o->lr = (float)atof(v), i++;
        else if (!strcmp(a, "--seed") && v) o->seed = strtoull(v, NULL, 0), i++;
        else if (!strcmp(a, "--schedule") && v) {
            o->schedules = !strcmp(v, "gpipe") ? GPIPE : !strcmp(v, "1f1b") ? ONE_F_ONE_B
                         : !strcmp(v, "both") ? GPIPE | ONE_F_ONE_B : 0;
            i++;
            if (!o->schedules) goto usage;
        } else {
            goto usage;
        }
    }
    if (o->layers % P || o->micro < 1 || o->batch % o->micro || o->steps < 1 || o->hidden < 1) {
        fprintf(stderr, "pp_mlp: --layers %d must divide by the %d stages, --batch %d by "
                        "--micro %d\n", o->layers, P, o->batch, o->micro);
        exit(2);
    }
    return;
usage:
    fprintf(stderr, "usage: xcoll-run -n P pp_mlp [--layers L (8)] [--hidden H (64)] "
                    "[--batch B (64)] [--micro M (4)] [--steps S (4)] [--lr X] [--seed S] "
                    "[--schedule gpipe|1f1b|both]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    xc_comm_t *comm;
    CHECK(xc_comm_init_env(&comm, NULL));
    int P = xc_comm_size(comm), s = xc_comm_rank(comm);
    opts_t o;
    parse(argc, argv, &o, P);
    int m = o.micro, mb = o.batch / m;
    if (s == 0)
        printf("pp_mlp: %d stages x %d layers of %d, batch %d in %d micro-batches of %d, %d "
               "steps\n", P, o.layers / P, o.hidden, o.batch, m, mb, o.steps);
    double formula = (double)(P - 1) / (m + P - 1);
    double want = (double)m * mb * o.hidden * 4 * ((s < P - 1) + (s > 0));
    int ok = 1;
    if (s == 0)
        printf("%-6s %9s %10s %9s %9s %12s %11s %11s\n", "sched", "step ms", "compute ms",
               "bubble", "formula", "bytes/step", "loss err", "weight err");
    for (int k = GPIPE; k <= ONE_F_ONE_B; k <<= 1) {
        if (!(o.schedules & k)) continue;
        run_t r;
        train(&o, k, comm, &r);
        int bytes_ok = r.bytes == want;
        double v[4] = {r.step_ms, r.err_loss, r.err_w, bytes_ok ? 0 : 1}, bmax = r.bytes;
        double busy[2] = {r.busy, r.work_ms};
        CHECK(xc_allreduce(v, v, 4, XC_FLOAT64, XC_MAX, comm));
        CHECK(xc_allreduce(busy, busy, 2, XC_FLOAT64, XC_SUM, comm));
        CHECK(xc_allreduce(&bmax, &bmax, 1, XC_FLOAT64, XC_MAX, comm));
        int pass = v[1] <= 1e-4 && v[2] <= 1e-4 && v[3] == 0;
        ok &= pass;
        if (s == 0)
            printf("%-6s %9.2f %10.2f %8.1f%% %8.1f%% %12.0f %11.1e %11.1e %s\n",
                   k == GPIPE ? "gpipe" : "1f1b", v[0], busy[1] / P, 100 * (1 - busy[0] / P),
                   100 * formula, bmax, v[1], v[2],
                   pass ? "PASS" : "FAIL");
        free(r.loss);
    }
    if (s == 0)
        printf("compute: the stages' mean computing time per step; "
               "bubble: 1 - the stages' mean busy fraction of the step; formula (P-1)/(m+P-1). "
               "bytes/step: the busiest stage, = %d micro-batches x %d x %d x 4 B per direction "
               "it sends (checked on every stage)\n", m, mb, o.hidden);
    CHECK(xc_comm_destroy(comm));
    return ok ? 0 : 1;
}
