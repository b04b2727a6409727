/*
 * train_mlp.c -- data-parallel training of a multi-layer perceptron on N
 * ranks, with and without overlapping the gradient all-reduce with the
 * backward pass (xcoll's bucketer), and the numbers that show the overlap.
 *
 *   xcoll-run -n 4 ./train_mlp                      none vs bucketed, summary
 *   xcoll-run -n 4 ./train_mlp --sweep              bucket sizes + the tuner
 *   xcoll-run -n 3 ./train_mlp --small --verify     N ranks vs one rank
 *   XCOLL_TRACE_SUMMARY=1 ... / XCOLL_TRACE=t.json  overlap from the trace
 *
 * Every rank builds the same model (fixed seed) and the same generated
 * dataset (train_mlp/data.h); each global batch of B rows is cut into N
 * slices of B/N rows, one per rank.  A rank's gradient is the mean over
 * its slice; all-reducing with XC_AVG gives the mean over the global batch
 * -- the same gradient one rank computes from all B rows, up to rounding.
 *
 * Modes.  none: backward, then one all-reduce of all gradients (a flat
 * buffer), then the optimizer -- communication fully exposed.  bucketed:
 * gradients live in the bucketer's memory (views); backward marks each one
 * ready as soon as it is computed; buckets all-reduce while backward goes
 * on; finish waits for the tail.  Its bucket size is --bucket-mb, else
 * XCOLL_BUCKET_MB, else the choice of xc_bucketer_tune after a short probe
 * run with 1 MiB buckets.  Runs are interleaved step by step.  Compute
 * spans ("forward", "backward", "optimizer") go to xcoll's trace;
 * xc_trace_step ends every step.
 *
 * Measured per step (median over the steps after warm-up, then the slowest
 * rank): step time; in none, the all-reduce's time (= communication); in
 * bucketed, the time spent in finish (= exposed communication).  Hidden =
 * 1 - exposed / communication.  The trace columns are the ranks' mean of the
 * median xc_trace_step figures.
 *
 * --verify (rank 0, after the runs): trains the same steps serially twice
 * and compares loss curves.  (1) "N shards": each of the N slices'
 * gradients computed by the same code, summed in rank order in fp32 and
 * divided by N -- exactly what XCOLL_DETERMINISTIC=1 defines the all-reduce
 * to be, so under that mode every run must match it bit for bit.  (2) "one
 * rank": the whole batch at once, as a 1-rank job would: equal in exact
 * arithmetic, but the fp32 sums over the batch are grouped differently
 * (per slice, then across slices), so the curves agree to a relative
 * --tol (default 1e-4) over the first --verify-steps (12): later, a ReLU
 * that lands on the other side of zero in one run starts a different
 * trajectory (docs/training.md says why and what is measured).
 */
#include <xcoll.h>

#include "common/stats.h"
#include "train_mlp/mlp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MODE_NONE, MODE_BUCKETED, MODE_FORWARD };

typedef struct opts {
    int steps, warmup, batch, hidden, layers, input, classes;
    int tokens, tok_layers, tok_width; /* --tokens T --token-layers K --token-width W */
    float lr, momentum;
    uint64_t seed;
    int run_none, run_bucketed, run_forward;
    double bucket_mb, first_mb; /* < 0: XCOLL_BUCKET_MB / XCOLL_FIRST_BUCKET_MB */
    int views, sweep, tune, verify;
    int split; /* -1: forward mode splits large gradients, the others not */
    int block; /* forward beside other runs: alternate in blocks of this many steps */
    int eval_every;       /* --eval-every K: held-out loss every K steps (rank 0; slows it) */
    double tol;
    int verify_steps;
    const char *ckpt_dir; /* --checkpoint DIR */
    int ckpt_every;       /* --checkpoint-every K (steps) */
    int resume;           /* --resume: from DIR's newest complete checkpoint */
    int crash_at;         /* --crash-at S: the last rank SIGKILLs itself at step S (first start) */
} opts_t;

typedef struct result {
    int mode;
    double bucket_mb; /* as configured (-1: the variable / default) */
    int nbuckets, layout, tail_from;
    double *loss;     /* per step, mean over the global batch */
    double eval_loss; /* the final model's, over the held-out rows */
    double train_eval; /* the final model's, over the first training rows */
    double *curve;    /* --eval-every K: train_eval after steps K, 2K, ... (rank 0) */
    double step_ms, wait_ms, fwd_ms, bwd_ms, opt_ms, issue_ms;
    int traced;
    double tr_comm_ms, tr_exposed_ms;
    int tuned;
    xc_bucket_tune_t tune;
} result_t;

static xc_comm_t *g_comm;
static int g_rank, g_size;

#define CHECK(call)                                                                     \
    do {                                                                                \
        xc_result_t rc_ = (call);                                                       \
        if (rc_ != XC_OK) {                                                             \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call,              \
                    xc_err_name(rc_), xc_comm_last_error(g_comm));                      \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static void die(const char *msg)
{
    fprintf(stderr, "rank %d: %s\n", g_rank, msg);
    exit(1);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Per token for the token layers (the first tok_layers layers). */
static void widths_of(const opts_t *o, int *w)
{
    w[0] = o->input / o->tokens;
    for (int l = 1; l <= o->layers; l++) w[l] = l <= o->tok_layers ? o->tok_width : o->hidden;
    w[o->layers + 1] = o->classes;
}

/* A flat gradient buffer: parameter p at off[p] (16-float aligned). */
static float *flat_grads(const mlp_t *m, size_t *off, size_t *total)
{
    size_t t = 0;
    for (int p = 0; p < mlp_nparams(m); p++) {
        off[p] = t;
        t += (m->count[p] + 15) / 16 * 16;
    }
    *total = t;
    float *f = aligned_alloc(64, (t ? t : 16) * sizeof(float));
    if (f) memset(f, 0, (t ? t : 16) * sizeof(float));
    return f;
}


static int on_ready_none(void *ctx, int p)
{
    (void)ctx;
    (void)p;
    return 0;
}

static double g_issue_ms; /* time inside xc_bucketer_mark_ready this step */

/* Mark gradient p of bucketer b ready -- whole, or elements [first, first
 * + count) (whole pieces of it, see set_blocks) -- timing the call; 1 on
 * failure (reported). */
static int mark_bucketed(xc_bucketer_t *b, int p, int whole, size_t first, size_t count)
{
    double t0 = now_ms();
    xc_result_t rc = whole ? xc_bucketer_mark_ready(b, p)
                           : xc_bucketer_mark_ready_range(b, p, first, count);
    g_issue_ms += now_ms() - t0;
    if (rc == XC_OK) return 0;
    char what[64] = "all elements";
    if (!whole) snprintf(what, sizeof what, "elements [%zu, %zu)", first, first + count);
    fprintf(stderr, "rank %d: marking gradient %d ready (%s): %s: %s\n", g_rank, p, what,
            xc_err_name(rc), xc_bucketer_last_error(b));
    return 1;
}

/* ------------------------------------------------------------ one run */

/* One training run (a model, its gradients, maybe a bucketer) advanced one
 * step at a time, so that several runs can be interleaved step by step:
 * on a shared machine, load that comes and goes then hits every mode alike. */
typedef struct runner {
    result_t *res;
    int mode, views, bl, tune, measured;
    int unmeasured;   /* this step is not measured (forward mode: the first
                       * of a block, which waits for nothing)             */
    mlp_t m;
    float *flat;
    size_t off[2 * MLP_MAX_LAYERS], total;
    xc_bucketer_t *b;
    int pending;      /* forward mode: the last step's update is still to apply */
    unsigned char applied[MLP_MAX_LAYERS]; /* ... to these layers it is */
    const opts_t *o;  /* forward mode: lr and momentum for the layer hook */
    double fw_wait_ms, fw_opt_ms; /* forward mode, this step: waits, updates */
    double *per; /* per measured step: step, wait, fwd, bwd, opt, issue,
                  * trace comm, trace exposed */
    /* A split weight gradient p: where its pieces end (elements, npiece[p]
     * of them), and where the part not yet marked begins (set_blocks). */
    size_t *piece_end[2 * MLP_MAX_LAYERS], part_from[2 * MLP_MAX_LAYERS];
    int npiece[2 * MLP_MAX_LAYERS];
} runner_t;

static int on_ready_bucketed(void *ctx, int p)
{
    return mark_bucketed(((runner_t *)ctx)->b, p, 1, 0, 0);
}

/* Backward finished rows of weight gradient p, elements [first, first +
 * count) (a block: inside one piece, set_blocks): mark the piece once its
 * last block is done. */
static int on_part_bucketed(void *ctx, int p, size_t first, size_t count)
{
    runner_t *r = ctx;
    for (int i = 0; i < r->npiece[p]; i++)
        if (r->piece_end[p][i] == first + count) {
            size_t from = r->part_from[p];
            r->part_from[p] = first + count;
            return mark_bucketed(r->b, p, 0, from, first + count - from);
        }
    return 0;
}

static size_t gcd_size(size_t a, size_t b)
{
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Before a backward: a split weight gradient is computed in blocks of rows
 * that tile its pieces (the greatest common divisor of the pieces' sizes,
 * when that is a whole number of rows; the pieces differ in size with
 * forward_tail, and may change when the layout is rebuilt) and each piece
 * is marked as soon as its last block is done; otherwise the gradient is
 * marked whole. */
static void set_blocks(runner_t *r)
{
    for (int p = 0; p < mlp_nparams(&r->m); p += 2) {
        int k;
        size_t off, blk = 0;
        xc_bucket_t bk;
        r->m.block[p] = 0;
        r->npiece[p] = 0;
        r->part_from[p] = 0;
        CHECK(xc_bucketer_locate(r->b, p, &k, &off));
        CHECK(xc_bucketer_bucket(r->b, k, &bk));
        if (bk.ngrads != 1 || bk.count >= r->m.count[p]) continue; /* not split */
        for (size_t at = 0; at < r->m.count[p]; k++) { /* its pieces: k, k + 1, ... */
            CHECK(xc_bucketer_bucket(r->b, k, &bk));
            at = bk.first_elem + bk.count;
            blk = gcd_size(blk, bk.count);
            size_t *e = realloc(r->piece_end[p], (size_t)(r->npiece[p] + 1) * sizeof *e);
            if (!e) die("out of memory");
            r->piece_end[p] = e;
            e[r->npiece[p]++] = at;
        }
        if (blk % (size_t)r->m.out[p / 2] == 0) r->m.block[p] = blk;
        else r->npiece[p] = 0;
    }
}

enum { NQ = 8 };

/* Held-out rows after the training rows (the same teacher). */
#define EVAL_ROWS(o) ((o)->batch * 8)

static void run_init(runner_t *r, const opts_t *o, int mode, double bucket_mb, int tune,
                     result_t *res)
{
    memset(r, 0, sizeof *r);
    memset(res, 0, sizeof *res);
    r->res = res;
    r->mode = res->mode = mode;
    res->bucket_mb = bucket_mb;
    r->tune = tune;
    res->loss = calloc((size_t)o->steps, sizeof *res->loss);
    if (o->eval_every > 0) res->curve = calloc((size_t)(o->steps / o->eval_every + 1), sizeof *res->curve);
    r->per = calloc((size_t)o->steps * NQ, sizeof *r->per);
    int widths[MLP_MAX_LAYERS + 1];
    r->bl = o->batch / g_size;
    widths_of(o, widths);
    if (!res->loss || !r->per ||
        mlp_init(&r->m, o->layers + 1, widths, o->tokens, o->tok_layers, r->bl, o->seed))
        die("out of memory");
    r->o = o;
    int bucketed = mode == MODE_BUCKETED || mode == MODE_FORWARD;
    r->views = bucketed && o->views;
    if (!r->views) {
        if (!(r->flat = flat_grads(&r->m, r->off, &r->total))) die("out of memory");
        for (int p = 0; p < mlp_nparams(&r->m); p++) r->m.grad[p] = r->flat + r->off[p];
    }
    if (bucketed) {
        xc_bucketer_opts_t bo = XC_BUCKETER_OPTS_INIT;
        bo.bucket_mb = bucket_mb;
        bo.first_bucket_mb = o->first_mb;
        bo.views = r->views;
        bo.forward_tail = mode == MODE_FORWARD; /* the tail goes first layer first */
        /* forward: a large gradient in pieces, so that what is left of it
         * when backward ends can go after the first layers' buckets */
        bo.split = o->split >= 0 ? o->split : mode == MODE_FORWARD;
        CHECK(xc_bucketer_create(g_comm, &bo, &r->b));
        for (int p = 0; p < mlp_nparams(&r->m); p++) {
            char name[48];
            snprintf(name, sizeof name, "fc%d.%s", p / 2, p % 2 ? "bias" : "weight");
            CHECK(xc_bucketer_register(r->b, r->views ? NULL : r->m.grad[p], r->m.count[p],
                                       XC_FLOAT32, name, NULL));
        }
        CHECK(xc_bucketer_commit(r->b)); /* (set_blocks: before each backward) */
    }
    res->traced = xc_trace_enabled();
}

/* The model's mean loss over rows [from, from + ev) of the dataset, in
 * batches of the model's capacity: one number per run, without the
 * batch-to-batch noise of the training loss -- what runs that differ only
 * in how gradients travel (e.g. XCOLL_COMPRESS) are compared on.  From
 * d->n: the held-out rows (never trained on); from 0: a fixed sample of
 * the training rows (how far the optimisation got: this small model on
 * few rows overfits, so the two part ways). */
static double eval_loss(runner_t *r, const dataset_t *d, int from, int ev)
{
    double total = 0;
    for (int row = from; row < from + ev; row += r->bl) {
        int B = from + ev - row < r->bl ? from + ev - row : r->bl;
        if (mlp_forward(&r->m, d, row, B)) die("out of memory");
        total += mlp_loss(&r->m, d, row, B, 1.0f) * B;
    }
    return total / ev;
}

/* Forward mode: layer l's parameters get the last step's update just
 * before layer l's forward needs them -- its bucket waited for first, so
 * the buckets of later layers stay on the wire during this forward. */
static void apply_layer(runner_t *r, int l, int in_forward)
{
    if (!r->pending || r->applied[l]) return;
    r->applied[l] = 1;
    double t0 = now_ms();
    if (in_forward) xc_trace_end(); /* the wait is not compute */
    CHECK(xc_bucketer_wait(r->b, 2 * l));
    CHECK(xc_bucketer_wait(r->b, 2 * l + 1));
    double t1 = now_ms();
    xc_trace_begin("optimizer");
    mlp_sgd_param(&r->m, 2 * l, r->o->lr, r->o->momentum);
    mlp_sgd_param(&r->m, 2 * l + 1, r->o->lr, r->o->momentum);
    xc_trace_end();
    if (in_forward) xc_trace_begin("forward");
    r->fw_wait_ms += t1 - t0;
    r->fw_opt_ms += now_ms() - t1;
}

static void finish_layer(void *ctx, int l) { apply_layer(ctx, l, 1); }

/* Forward mode: end the pending step now -- every layer's update applied,
 * then finish (which may rebuild the buckets and move the views). */
static void settle(runner_t *r)
{
    if (!r->pending) return;
    for (int l = 0; l < r->m.nlayers; l++) apply_layer(r, l, 0);
    r->pending = 0;
    CHECK(xc_bucketer_finish(r->b));
    if (r->views)
        for (int p = 0; p < mlp_nparams(&r->m); p++) r->m.grad[p] = xc_bucketer_grad(r->b, p);
}

static void run_step(runner_t *r, const opts_t *o, const dataset_t *d, int s)
{
    mlp_t *m = &r->m;
    int fw = r->mode == MODE_FORWARD;
    int row0 = (int)(((long)s * o->batch) % d->n) + g_rank * r->bl;
    if (r->res->traced) CHECK(xc_trace_step(NULL)); /* this run's step starts here */
    if (r->views && !fw) /* fetched every step: the first finish may move them */
        for (int p = 0; p < mlp_nparams(m); p++) m->grad[p] = xc_bucketer_grad(r->b, p);
    r->fw_wait_ms = r->fw_opt_ms = 0;
    double t0 = now_ms();
    xc_trace_begin("forward");
    if (mlp_forward_with(m, d, row0, r->bl, fw ? finish_layer : NULL, r)) die("out of memory");
    r->res->loss[s] = mlp_loss(m, d, row0, r->bl, 1.0f / (float)r->bl);
    xc_trace_end();
    double t1 = now_ms();
    double settle_ms = 0;
    if (fw) { /* every update is applied: end the last step (cheap now) */
        int applied = r->pending;
        r->pending = 0;
        if (applied) {
            double ts = now_ms();
            CHECK(xc_bucketer_finish(r->b));
            settle_ms = now_ms() - ts;
        }
        if (r->views) /* after finish: it may have moved them */
            for (int p = 0; p < mlp_nparams(m); p++) m->grad[p] = xc_bucketer_grad(r->b, p);
    }
    double t1b = now_ms();
    g_issue_ms = 0;
    xc_trace_begin("backward");
    if (r->b) set_blocks(r); /* (the layout may have been rebuilt) */
    int brc = r->b ? mlp_backward_parts(m, r->bl, on_ready_bucketed, on_part_bucketed, r)
                   : mlp_backward(m, r->bl, on_ready_none, NULL);
    xc_trace_end();
    if (brc) die("backward failed");
    double t2 = now_ms();
    if (fw) {
        r->pending = 1; /* applied layer by layer in the next forward */
        memset(r->applied, 0, sizeof r->applied);
    } else {
        if (r->b) CHECK(xc_bucketer_finish(r->b));
        else CHECK(xc_allreduce(r->flat, r->flat, r->total, XC_FLOAT32, XC_AVG, g_comm));
    }
    double t3 = now_ms();
    if (r->views && !fw)
        for (int p = 0; p < mlp_nparams(m); p++) m->grad[p] = xc_bucketer_grad(r->b, p);
    if (!fw) {
        xc_trace_begin("optimizer");
        mlp_sgd(m, o->lr, o->momentum);
        xc_trace_end();
    }
    double t4 = now_ms();
    xc_step_summary_t st = {0};
    if (r->res->traced) CHECK(xc_trace_step(&st));
    if (o->eval_every > 0 && (s + 1) % o->eval_every == 0) {
        settle(r); /* the model as trained so far (every rank: finish is collective) */
        if (g_rank == 0) r->res->curve[(s + 1) / o->eval_every - 1] = eval_loss(r, d, 0, EVAL_ROWS(o));
    }
    if (s < o->warmup || r->unmeasured) return;
    /* forward mode: waits and updates happen inside the forward; report
     * them as communication (exposed) and optimizer time */
    double wait = fw ? r->fw_wait_ms + settle_ms : t3 - t2;
    double fwd = fw ? t1 - t0 - r->fw_wait_ms - r->fw_opt_ms : t1 - t0;
    double opt = fw ? r->fw_opt_ms : t4 - t3;
    double v[NQ] = {t4 - t0, wait, fwd, t2 - t1b, opt, g_issue_ms, st.comm_ms, st.exposed_ms};
    for (int i = 0; i < NQ; i++) r->per[i * o->steps + r->measured] = v[i];
    r->measured++;
}

/* The runs rn[0 .. n) interleaved step by step, and the forward run f
 * beside them in blocks of o->block steps: n runs' steps of a block, then
 * f's, f settled at the end of each block (its buckets must not be in
 * flight while the others issue collectives).  So machine load that comes
 * and goes lands on every run alike, not on the forward run alone; the
 * first step of each of f's blocks (nothing to wait for) is not measured.
 * Without checkpoints only. */
static void run_end(runner_t *r, const opts_t *o, const dataset_t *d);
static void train_blocks(const opts_t *o, const dataset_t *d, runner_t *rn, int n, runner_t *f)
{
    CHECK(xc_barrier(g_comm));
    for (int b0 = 0; b0 < o->steps; b0 += o->block) {
        int b1 = b0 + o->block < o->steps ? b0 + o->block : o->steps;
        for (int s = b0; s < b1; s++)
            for (int i = 0; i < n; i++) run_step(&rn[i], o, d, s);
        for (int s = b0; s < b1; s++) {
            f->unmeasured = s == b0 && b0 > 0;
            run_step(f, o, d, s);
        }
        f->unmeasured = 0;
        settle(f);
    }
    for (int i = 0; i < n; i++) run_end(&rn[i], o, d);
    run_end(f, o, d);
}

/* Collective: the same runs ended in the same order on every rank. */
static void run_end(runner_t *r, const opts_t *o, const dataset_t *d)
{
    result_t *res = r->res;
    double q[NQ];
    /* The median step of each quantity: robust to the odd preempted step
     * on a shared machine. */
    for (int i = 0; i < NQ; i++) q[i] = median_of(r->per + i * o->steps, r->measured);
    free(r->per);
    for (int p = 0; p < 2 * MLP_MAX_LAYERS; p++) free(r->piece_end[p]);
    if (r->b) {
        if (r->tune) {
            res->tune = (xc_bucket_tune_t)XC_BUCKET_TUNE_INIT;
            CHECK(xc_bucketer_tune(r->b, &res->tune));
            res->tuned = 1;
        }
        xc_bucketer_info_t in = {.size = sizeof in};
        CHECK(xc_bucketer_info(r->b, &in));
        res->nbuckets = in.nbuckets;
        res->layout = in.layout;
        res->tail_from = in.tail_from;
        CHECK(xc_bucketer_destroy(r->b));
    } else {
        res->nbuckets = 1;
    }
    /* The global loss: the mean of the ranks' slice means (one all-reduce at
     * the end, so the steps carry no extra synchronisation). */
    CHECK(xc_allreduce(res->loss, res->loss, (size_t)o->steps, XC_FLOAT64, XC_AVG, g_comm));
    CHECK(xc_allreduce(q, q, 6, XC_FLOAT64, XC_MAX, g_comm));         /* slowest rank */
    CHECK(xc_allreduce(q + 6, q + 6, 2, XC_FLOAT64, XC_AVG, g_comm)); /* mean of ranks */
    res->step_ms = q[0];
    res->wait_ms = q[1];
    res->fwd_ms = q[2];
    res->bwd_ms = q[3];
    res->opt_ms = q[4];
    res->issue_ms = q[5];
    res->tr_comm_ms = q[6];
    res->tr_exposed_ms = q[7];
    res->eval_loss = eval_loss(r, d, d->n, EVAL_ROWS(o));
    res->train_eval = eval_loss(r, d, 0, EVAL_ROWS(o));
    free(r->flat);
    mlp_free(&r->m);
}

/* ------------------------------------------------------------ checkpoints */

/* The training state of runs [0, n) as checkpoint parts: per run and
 * parameter its values and momentum, and this rank's loss history (ranks
 * differ in it: each keeps the mean over its slice of the batch).  The
 * caller frees *parts and the names. */
static int ckpt_parts(runner_t *r, int n, const opts_t *o, xc_ckpt_part_t **parts)
{
    int np = 0;
    for (int i = 0; i < n; i++) np += 2 * mlp_nparams(&r[i].m) + 1;
    xc_ckpt_part_t *p = calloc((size_t)np, sizeof *p);
    if (!p) die("out of memory");
    int k = 0;
    for (int i = 0; i < n; i++) {
        mlp_t *m = &r[i].m;
        for (int q = 0; q < mlp_nparams(m); q++) {
            char name[48];
            snprintf(name, sizeof name, "run%d.param%d", i, q);
            p[k++] = (xc_ckpt_part_t){strdup(name), m->param[q], m->count[q] * sizeof(float)};
            snprintf(name, sizeof name, "run%d.momentum%d", i, q);
            p[k++] = (xc_ckpt_part_t){strdup(name), m->mom[q], m->count[q] * sizeof(float)};
        }
        char name[48];
        snprintf(name, sizeof name, "run%d.loss", i);
        p[k++] = (xc_ckpt_part_t){strdup(name), r[i].res->loss, (size_t)o->steps * sizeof(double)};
    }
    *parts = p;
    return np;
}

static void ckpt_parts_free(xc_ckpt_part_t *p, int np)
{
    for (int i = 0; i < np; i++) free((void *)p[i].name);
    free(p);
}

/* CRC-like fingerprint of every run's parameters (rank 0 prints it: two
 * jobs ended with bit-identical parameters iff it matches). */
static uint64_t params_hash(runner_t *r, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < mlp_nparams(&r[i].m); q++) {
            const unsigned char *b = (const unsigned char *)r[i].m.param[q];
            for (size_t j = 0; j < r[i].m.count[q] * sizeof(float); j++)
                h = (h ^ b[j]) * 1099511628211ull;
        }
    return h;
}

/* Train runs [0, n) side by side: step s of every run, then step s + 1;
 * with --checkpoint, resume from and save checkpoints (asynchronously:
 * the write overlaps the next steps). */
static void train_interleaved(const opts_t *o, const dataset_t *d, runner_t *r, int n)
{
    CHECK(xc_barrier(g_comm));
    int start = 0, np = 0;
    xc_ckpt_part_t *parts = NULL;
    xc_ckpt_pending_t *pending = NULL;
    if (o->ckpt_dir) np = ckpt_parts(r, n, o, &parts);
    if (o->ckpt_dir && o->resume) {
        uint64_t step;
        xc_result_t rc = xc_ckpt_load(g_comm, o->ckpt_dir, XC_CKPT_LATEST, parts, np, &step);
        if (rc == XC_OK) {
            start = (int)step;
            if (g_rank == 0) printf("train_mlp: resumed from %s at step %d\n", o->ckpt_dir, start);
        } else if (rc == XC_ERR_NOT_FOUND) {
            if (g_rank == 0) printf("train_mlp: no checkpoint in %s yet: from step 0\n", o->ckpt_dir);
        } else {
            CHECK(rc);
        }
    }
    const char *restarts = getenv("XCOLL_RESTART_COUNT");
    int first_start = !restarts || !strcmp(restarts, "0");
    for (int s = start; s < o->steps; s++) {
        if (s == o->crash_at && first_start && g_rank == g_size - 1) {
            fprintf(stderr, "train_mlp: rank %d crashes at step %d (--crash-at)\n", g_rank, s);
            fflush(stderr);
            raise(SIGKILL);
        }
        for (int i = 0; i < n; i++) run_step(&r[i], o, d, s);
        /* A save overlaps one step, then commits (so a crash loses at most
         * ckpt_every + 1 steps). */
        if (pending) CHECK(xc_ckpt_wait(pending));
        pending = NULL;
        if (o->ckpt_dir && o->ckpt_every > 0 && (s + 1) % o->ckpt_every == 0 && s + 1 < o->steps) {
            for (int i = 0; i < n; i++) settle(&r[i]); /* the state saved is the step's end */
            CHECK(xc_ckpt_save_async(g_comm, o->ckpt_dir, (uint64_t)(s + 1), parts, np, &pending));
        }
    }
    if (pending) CHECK(xc_ckpt_wait(pending));
    for (int i = 0; i < n; i++) settle(&r[i]);
    if (o->ckpt_dir) {
        CHECK(xc_ckpt_save(g_comm, o->ckpt_dir, (uint64_t)o->steps, parts, np));
        ckpt_parts_free(parts, np);
    }
    if (g_rank == 0 && o->ckpt_dir)
        printf("train_mlp: final parameters fingerprint %016llx\n",
               (unsigned long long)params_hash(r, n));
    for (int i = 0; i < n; i++) run_end(&r[i], o, d);
}

/* ------------------------------------------------------------ references */

/* Serial training over `shards` slices of each global batch: each slice's
 * mean gradient, summed in slice order (fp32), divided by `shards` -- the
 * XCOLL_DETERMINISTIC=1 definition of XC_AVG over `shards` ranks.  With one
 * shard: one rank training on the whole batch.  Losses into loss[]. */
static void reference(const opts_t *o, const dataset_t *d, int shards, double *loss)
{
    int widths[MLP_MAX_LAYERS + 1], bs = o->batch / shards;
    widths_of(o, widths);
    mlp_t m;
    if (mlp_init(&m, o->layers + 1, widths, o->tokens, o->tok_layers, bs, o->seed))
        die("out of memory");
    size_t off[2 * MLP_MAX_LAYERS], total;
    float *acc = flat_grads(&m, off, &total), *part = flat_grads(&m, off, &total);
    if (!acc || !part) die("out of memory");
    for (int s = 0; s < o->steps; s++) {
        double lsum = 0;
        for (int r = 0; r < shards; r++) {
            float *dst = r ? part : acc;
            for (int p = 0; p < mlp_nparams(&m); p++) m.grad[p] = dst + off[p];
            int row0 = (int)(((long)s * o->batch) % d->n) + r * bs;
            if (mlp_forward(&m, d, row0, bs)) die("out of memory");
            double l = mlp_loss(&m, d, row0, bs, 1.0f / (float)bs);
            lsum = r ? lsum + l : l;
            if (mlp_backward(&m, bs, on_ready_none, NULL)) die("out of memory");
            if (r)
                for (size_t i = 0; i < total; i++) acc[i] = acc[i] + part[i];
        }
        if (shards > 1)
            for (size_t i = 0; i < total; i++) acc[i] = acc[i] / (float)shards;
        loss[s] = shards > 1 ? lsum / shards : lsum;
        for (int p = 0; p < mlp_nparams(&m); p++) m.grad[p] = acc + off[p];
        mlp_sgd(&m, o->lr, o->momentum);
    }
    free(acc);
    free(part);
    mlp_free(&m);
}

static double max_rel_diff(const double *a, const double *b, int n)
{
    double mx = 0;
    for (int i = 0; i < n; i++) {
        double d = a[i] - b[i], s = b[i] < 0 ? -b[i] : b[i];
        d = d < 0 ? -d : d;
        if (s > 0) d /= s;
        if (d > mx) mx = d;
    }
    return mx;
}

static int identical(const double *a, const double *b, int n)
{
    return memcmp(a, b, sizeof(double) * (size_t)n) == 0;
}

static const char *label(const result_t *r, char *buf, size_t cap)
{
    const char *name = r->mode == MODE_FORWARD ? "forward" : "bucketed";
    if (r->mode == MODE_NONE) snprintf(buf, cap, "none");
    else if (r->bucket_mb < 0) snprintf(buf, cap, "%s", name);
    else snprintf(buf, cap, "%s %g", name, r->bucket_mb);
    return buf;
}

/* Rank 0: compare every run with both references; returns failures. */
static int verify(const opts_t *o, const dataset_t *d, result_t *runs, int nruns)
{
    int fails = 0;
    const char *det = getenv("XCOLL_DETERMINISTIC");
    int exact = det && !strcmp(det, "1");
    double *shard = calloc((size_t)o->steps, sizeof *shard), *one = calloc((size_t)o->steps, sizeof *one);
    if (!shard || !one) die("out of memory");
    reference(o, d, g_size, shard);
    reference(o, d, 1, one);
    printf("verify: %d steps, loss %.6f -> %.6f on one rank (whole batch)\n", o->steps, one[0],
           one[o->steps - 1]);
    for (int i = 0; i < nruns; i++) {
        const result_t *r = &runs[i];
        char what[64];
        label(r, what, sizeof what);
        /* Tolerances hold over the first k steps; later a ReLU that changes
         * side in one run and not the other starts a different trajectory
         * (docs/training.md) -- shown, not judged. */
        int k = o->verify_steps < o->steps ? o->verify_steps : o->steps;
        double ds = max_rel_diff(r->loss, shard, k), d1 = max_rel_diff(r->loss, one, k);
        double d1all = max_rel_diff(r->loss, one, o->steps);
        int same = identical(r->loss, shard, o->steps);
        int ok1 = d1 <= o->tol, oks = exact ? same : ds <= o->tol;
        printf("verify: %-24s vs %d shards serially: %s%s; vs one rank: max rel. diff %.2e over "
               "%d steps (tolerance %.0e) %s",
               what, g_size, same ? "bit-identical" : "differs",
               exact ? (same ? " ok" : " FAIL: XCOLL_DETERMINISTIC=1 requires bit-identical")
                     : (oks ? " ok" : " FAIL"),
               d1, k, o->tol, ok1 ? "ok" : "FAIL");
        if (k < o->steps) printf(" (%.2e over all %d)", d1all, o->steps);
        printf("\n");
        fails += !ok1 + !oks;
    }
    free(shard);
    free(one);
    return fails;
}

/* ------------------------------------------------------------ report */


static void print_row(const opts_t *o, const result_t *r, const result_t *base)
{
    char lb[32], tr[48] = "      -        -";
    double hidden = base && base->wait_ms > 0 ? 100.0 * (1.0 - r->wait_ms / base->wait_ms) : 0;
    if (r->traced)
        snprintf(tr, sizeof tr, "%7.2f  %7.2f", r->tr_comm_ms,
                 r->tr_comm_ms > 0 ? 100.0 * (1 - r->tr_exposed_ms / r->tr_comm_ms) : 100.0);
    printf("  %-16s %7d %8.2f %7.2f %7.2f %7.2f %9.2f %7.1f%% %s %9.4f %9.4f\n",
           label(r, lb, sizeof lb), r->nbuckets, r->step_ms, r->fwd_ms, r->bwd_ms, r->issue_ms,
           r->wait_ms, r->mode == MODE_NONE ? 0.0 : hidden, tr, r->loss[0], r->loss[o->steps - 1]);
}

static void print_header(void)
{
    printf("  %-16s %7s %8s %7s %7s %7s %9s %8s %7s %8s %9s %9s\n", "mode (MiB)", "buckets",
           "step ms", "fwd ms", "bwd ms", "(issue)", "comm ms*", "hidden", "trace:",
           "overlap%", "loss[0]", "loss[end]");
}

static void usage(void)
{
    fprintf(stderr,
            "usage: xcoll-run -n N train_mlp [options]\n"
            "  --overlap none|bucketed|forward|both|all  (both = none + bucketed; all adds\n"
            "            forward: the update applied layer by layer in the next forward, each\n"
            "            layer's bucket waited for just before it is needed)\n"
            "  --bucket-mb MB (default: XCOLL_BUCKET_MB if set, else the tuner's choice)\n"
            "  --first-bucket-mb MB (XCOLL_FIRST_BUCKET_MB, 1)   --views 0|1 (1)\n"
            "  --split 0|1 (forward: 1, else 0): gradients larger than a bucket in\n"
            "            bucket-sized pieces (opts.split)\n"
            "  --block K (5): the forward run beside others alternates with them in\n"
            "            blocks of K steps (0: after them; with --checkpoint: after them;\n"
            "            below 5 a block's end can fall into the steps the tail learns from)\n"
            "  --sweep   none + bucket sizes 0.25..25 MiB + the tuner's choice\n"
            "  --tune    with --bucket-mb: also report the tuner's choice\n"
            "  --verify  compare the loss curve with serial training (rank 0)\n"
            "  --steps N (30) --warmup N (3) --batch B (96, global) --hidden H (512)\n"
            "  --layers L (8 hidden) --input D (256) --classes C (10) --lr X (0.02)\n"
            "  --momentum X (0.9) --seed S (1) --small (CI-sized model)\n"
            "  --tokens T --token-layers K --token-width W (1, 0, 128): the first K hidden\n"
            "            layers (width W) shared by the T tokens of a row (input/T wide each),\n"
            "            as a 1x1 convolution: T times the compute per parameter\n"
            "  --tol X (1e-4) --verify-steps K (12): N ranks vs one rank, relative loss\n"
            "            difference over the first K steps\n"
            "  --eval-every K: the loss on a fixed sample of training rows every K steps\n"
            "            (rank 0; slows its steps)\n"
            "  --checkpoint DIR --checkpoint-every K: save the state every K steps\n"
            "            (asynchronously) and at the end; --resume: start from DIR's newest\n"
            "            complete checkpoint; --crash-at S: the last rank kills itself at\n"
            "            step S on the first start (for xcoll-run --max-restarts tests)\n");
    exit(2);
}

static void parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.steps = 30, .warmup = 3, .batch = 96, .hidden = 512, .layers = 8,
                  .input = 256, .classes = 10, .tokens = 1, .tok_width = 128, .lr = 0.02f, .momentum = 0.9f, .seed = 1,
                  .run_none = 1, .run_bucketed = 1, .bucket_mb = -1, .first_mb = -1, .views = 1,
                  .split = -1, .block = 5,
                  .tol = 1e-4, .verify_steps = 12, .crash_at = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && (i++, 1))
        if (OPT("--overlap")) {
            int all = !strcmp(v, "all");
            o->run_none = !strcmp(v, "none") || !strcmp(v, "both") || all;
            o->run_bucketed = !strcmp(v, "bucketed") || !strcmp(v, "both") || all;
            o->run_forward = !strcmp(v, "forward") || all;
            if (!o->run_none && !o->run_bucketed && !o->run_forward) usage();
        } else if (OPT("--bucket-mb")) o->bucket_mb = atof(v);
        else if (OPT("--first-bucket-mb")) o->first_mb = atof(v);
        else if (OPT("--split")) o->split = atoi(v);
        else if (OPT("--block")) o->block = atoi(v);
        else if (OPT("--views")) o->views = atoi(v);
        else if (OPT("--steps")) o->steps = atoi(v);
        else if (OPT("--eval-every")) o->eval_every = atoi(v);
        else if (OPT("--warmup")) o->warmup = atoi(v);
        else if (OPT("--batch")) o->batch = atoi(v);
        else if (OPT("--hidden")) o->hidden = atoi(v);
        else if (OPT("--layers")) o->layers = atoi(v);
        else if (OPT("--input")) o->input = atoi(v);
        else if (OPT("--tokens")) o->tokens = atoi(v);
        else if (OPT("--token-layers")) o->tok_layers = atoi(v);
        else if (OPT("--token-width")) o->tok_width = atoi(v);
        else if (OPT("--classes")) o->classes = atoi(v);
        else if (OPT("--lr")) o->lr = (float)atof(v);
        else if (OPT("--momentum")) o->momentum = (float)atof(v);
        else if (OPT("--seed")) o->seed = strtoull(v, NULL, 0);
        else if (OPT("--tol")) o->tol = atof(v);
        else if (OPT("--verify-steps")) o->verify_steps = atoi(v);
        else if (!strcmp(a, "--sweep")) o->sweep = 1;
        else if (OPT("--checkpoint")) o->ckpt_dir = v;
        else if (OPT("--checkpoint-every")) o->ckpt_every = atoi(v);
        else if (OPT("--crash-at")) o->crash_at = atoi(v);
        else if (!strcmp(a, "--resume")) o->resume = 1;
        else if (!strcmp(a, "--tune")) o->tune = 1;
        else if (!strcmp(a, "--verify")) o->verify = 1;
        else if (!strcmp(a, "--small")) {
            o->hidden = 128;
            o->layers = 3;
            o->input = 64;
            o->batch = 24;
            o->steps = 12;
            o->warmup = 2;
            o->lr = 0.2f; /* a 4-layer model learns visibly in 12 steps */
        } else usage();
#undef OPT
    }
    if (o->steps < 1 || o->warmup < 0 || o->block < 0 || o->batch < 1 || o->hidden < 1 ||
        o->input < 1 || o->classes < 2 || o->layers < 0 || o->layers + 1 > MLP_MAX_LAYERS ||
        o->tokens < 1 || o->tok_layers < 0 || o->tok_width < 1)
        usage();
    if (o->tokens == 1) o->tok_layers = 0;
    if (o->input % o->tokens || o->tok_layers > o->layers) {
        fprintf(stderr, "train_mlp: --tokens %d must divide --input %d, and --token-layers %d "
                        "be at most --layers %d\n", o->tokens, o->input, o->tok_layers, o->layers);
        exit(2);
    }
    if (o->warmup >= o->steps) o->warmup = o->steps - 1;
    if (o->ckpt_dir && o->run_forward && (o->run_none || o->run_bucketed || o->sweep)) {
        fprintf(stderr, "train_mlp: --checkpoint with forward among other runs: checkpoint "
                        "one group of runs (e.g. --overlap forward alone)\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    parse(argc, argv, &o);
    CHECK(xc_comm_init_env(&g_comm, NULL));
    g_rank = xc_comm_rank(g_comm);
    g_size = xc_comm_size(g_comm);
    if (o.batch % g_size) {
        if (g_rank == 0)
            fprintf(stderr, "train_mlp: the global batch (%d) must be a multiple of the number of "
                            "ranks (%d)\n", o.batch, g_size);
        xc_comm_destroy(g_comm);
        return 2;
    }
    dataset_t d;
    int nrows = o.batch * 64;
    if (dataset_make(&d, nrows + EVAL_ROWS(&o), o.input, o.classes, o.seed)) die("out of memory");
    d.n = nrows; /* training rows; the held-out ones follow */

    int widths[MLP_MAX_LAYERS + 1];
    widths_of(&o, widths);
    size_t params = 0;
    for (int l = 0; l <= o.layers; l++)
        params += (size_t)widths[l] * (l == o.tok_layers ? o.tokens : 1) * widths[l + 1] +
                  widths[l + 1];
    if (g_rank == 0) {
        printf("train_mlp: %d rank%s on %d node%s; MLP ", g_size, g_size > 1 ? "s" : "",
               xc_comm_node_count(g_comm), xc_comm_node_count(g_comm) > 1 ? "s" : "");
        if (o.tokens > 1) printf("%d tokens x (", o.tokens); /* the shared part per token */
        for (int l = 0; l <= o.layers + 1; l++)
            printf("%s%d%s", !l ? "" : o.tokens > 1 && l == o.tok_layers + 1 ? " " : "-",
                   widths[l], o.tokens > 1 && l == o.tok_layers ? ") ->" : "");
        printf(" (%.2f M parameters, %.1f MiB of fp32 gradients); global batch %d (%d per rank); "
               "%d steps (%d warm-up)\n",
               params / 1e6, params * 4.0 / (1 << 20), o.batch, o.batch / g_size, o.steps,
               o.warmup);
        fflush(stdout);
    }

    /* The runs: none, bucketed at the configured size, and in a sweep every
     * size plus the tuner's choice -- interleaved step by step.  In a sweep
     * the tuner first learns from a short bucketed run with 1 MiB buckets. */
    static const double k_sweep[] = {0.25, 0.5, 1, 2, 4, 8, 16, 25};
    int nsweep = (int)(sizeof k_sweep / sizeof *k_sweep);
    result_t runs[32], probe;
    runner_t rn[32];
    int nruns = 0, tuned_at = -1;
    double tuned_mb = -1;
    /* Without a size (--bucket-mb, XCOLL_BUCKET_MB), the tuner picks it. */
    int auto_size = (o.run_bucketed || o.run_forward) && o.bucket_mb < 0 &&
                    !getenv("XCOLL_BUCKET_MB");
    if (o.sweep || auto_size) {
        opts_t p = o;
        p.steps = o.warmup + 8; /* the tuner keeps the last 8 steps */
        p.ckpt_dir = NULL; /* the probe is not the training */
        p.crash_at = -1;
        runner_t r;
        run_init(&r, &p, MODE_BUCKETED, 1.0, 1, &probe); /* small buckets: see the overlap */
        train_interleaved(&p, &d, &r, 1);
        free(probe.loss);
        free(probe.curve);
        tuned_mb = probe.tune.best_mb;
    }
    if (o.run_none || o.sweep) run_init(&rn[nruns], &o, MODE_NONE, -1, 0, &runs[nruns]), nruns++;
    if (o.run_bucketed || o.sweep) {
        tuned_at = nruns;
        run_init(&rn[nruns], &o, MODE_BUCKETED, auto_size && !o.sweep ? tuned_mb : o.bucket_mb,
                 o.tune && !o.sweep && !auto_size, &runs[nruns]);
        nruns++;
    }

    if (o.sweep) {
        int have_tuned = 0;
        for (int i = 0; i < nsweep; i++) {
            run_init(&rn[nruns], &o, MODE_BUCKETED, k_sweep[i], 0, &runs[nruns]);
            nruns++;
            have_tuned |= k_sweep[i] == tuned_mb;
        }
        if (tuned_mb > 0 && !have_tuned)
            run_init(&rn[nruns], &o, MODE_BUCKETED, tuned_mb, 0, &runs[nruns]), nruns++;
    }
    /* The forward run last, and trained after the others: its buckets stay
     * in flight into its next step, where an interleaved run would issue
     * collectives of its own on the same communicator (xcoll.h, bucketer
     * "Threads": that must not race with the launch thread). */
    int fw_at = -1;
    if (o.run_forward) { /* the bucketed run's size */
        fw_at = nruns;
        run_init(&rn[nruns], &o, MODE_FORWARD, auto_size ? tuned_mb : o.bucket_mb, 0,
                 &runs[nruns]);
        nruns++;
    }
    if (fw_at > 0 && o.block > 0 && !o.ckpt_dir) {
        train_blocks(&o, &d, rn, fw_at, &rn[fw_at]);
    } else {
        if (fw_at > 0) train_interleaved(&o, &d, rn, fw_at);
        train_interleaved(&o, &d, rn + (fw_at > 0 ? fw_at : 0), fw_at > 0 ? 1 : nruns);
    }
    if ((o.sweep || auto_size) && tuned_at >= 0) { /* report the tuner next to the runs */
        runs[tuned_at].tune = probe.tune;
        runs[tuned_at].tuned = 1;
    }

    int fails = 0;
    if (g_rank == 0) {
        const result_t *none = o.run_none || o.sweep ? &runs[0] : NULL;
        printf("\n");
        print_header();
        for (int i = 0; i < nruns; i++) print_row(&o, &runs[i], none);
        printf("  (* comm ms: none = the all-reduce after backward; bucketed = waiting in "
               "xc_bucketer_finish, the exposed part;\n     forward = waiting in "
               "xc_bucketer_wait during the next forward and in finish.\n     hidden = 1 - exposed / none's "
               "all-reduce.  (issue): part of backward spent inside xc_bucketer_mark_ready.\n"
               "     Trace columns need XCOLL_TRACE_SUMMARY=1 or XCOLL_TRACE=file.  Medians "
               "over steps, slowest rank.)\n");
        const result_t *bk = tuned_at >= 0 ? &runs[tuned_at] : NULL;
        if (bk && auto_size && !o.sweep)
            printf("  bucket size %g MiB, chosen by the tuner (below); set one with --bucket-mb "
                   "or XCOLL_BUCKET_MB\n", bk->bucket_mb);
        if (bk && bk->layout)
            printf("  buckets rebuilt after step 1 from the order gradients arrived in (rank 0's)\n");
        if (fw_at >= 0) {
            const result_t *f = &runs[fw_at];
            if (f->tail_from < f->nbuckets)
                printf("  forward: buckets 0..%d go out as they fill; the tail (%d bucket%s, the "
                       "least waiting predicted) last-filled first\n", f->tail_from - 1,
                       f->nbuckets - f->tail_from, f->nbuckets - f->tail_from > 1 ? "s" : "");
            else
                printf("  forward: every bucket goes out as it fills (no tail predicted to "
                       "help)\n");
        }
        /* identical curves across runs? */
        int same = 1;
        double worst = 0;
        for (int i = 1; i < nruns; i++) {
            same &= identical(runs[i].loss, runs[0].loss, o.steps);
            double dd = max_rel_diff(runs[i].loss, runs[0].loss, o.steps);
            worst = dd > worst ? dd : worst;
        }
        if (bk && bk->tuned) {
            const xc_bucket_tune_t *t = &bk->tune;
            printf("\ntuner: all-reduce alpha %.1f us, %.2f GB/s, %.1fx slower during backward "
                   "(fitted to the probe: backward %.2f ms, exposed %.2f ms);\n"
                   "  predicted first gradient -> end of communication (buckets):\n ",
                   t->alpha_us, t->gbps, t->slowdown, t->backward_ms, t->exposed_ms);
            for (int i = 0; i < t->ncand; i++)
                printf(" %g MiB: %.2f ms (%d)%s", t->cand_mb[i], t->cand_ms[i], t->cand_buckets[i],
                       i + 1 < t->ncand ? ";" : "\n");
            printf("  -> picks %g MiB (predicted %.2f ms; one all-reduce after backward: %.2f ms)\n",
                   t->best_mb, t->predicted_ms, t->serial_ms);
            if (o.sweep) {
                const result_t *best = NULL, *at = NULL;
                for (int i = 0; i < nruns; i++) {
                    if (runs[i].mode != MODE_BUCKETED || runs[i].bucket_mb < 0) continue;
                    if (!best || runs[i].step_ms < best->step_ms) best = &runs[i];
                    if (runs[i].bucket_mb == t->best_mb) at = &runs[i];
                }
                if (best && at)
                    printf("  measured: best %.2f ms at %g MiB; the tuner's %g MiB: %.2f ms "
                           "(%+.1f%% of the best)\n",
                           best->step_ms, best->bucket_mb, at->bucket_mb, at->step_ms,
                           100.0 * (at->step_ms / best->step_ms - 1));
            }
        }
        /* One step's batch loss is noisy; compare runs (e.g. with and
         * without XCOLL_COMPRESS) on the mean of the last tenth. */
        int tail = o.steps / 10 > 0 ? o.steps / 10 : 1;
        double mean_tail = 0;
        for (int s = o.steps - tail; s < o.steps; s++) mean_tail += runs[0].loss[s];
        mean_tail /= tail;
        printf("\nsummary: loss %.4f -> %.4f over %d steps (mean of the last %d: %.4f); "
               "final model: %.4f on %d training rows, %.4f held out; ",
               runs[0].loss[0], runs[0].loss[o.steps - 1], o.steps, tail, mean_tail,
               runs[0].train_eval, EVAL_ROWS(&o), runs[0].eval_loss);
        if (nruns > 1)
            printf("runs %s", same ? "bit-identical" : "agree");
        if (nruns > 1 && !same) printf(" (max rel. diff %.1e)", worst);
        printf("\n");
        for (int i = 0; o.eval_every > 0 && i < nruns; i++) {
            char lb[32];
            printf("loss on %d training rows every %d steps, %s:", EVAL_ROWS(&o), o.eval_every,
                   label(&runs[i], lb, sizeof lb));
            for (int k = 0; k < o.steps / o.eval_every; k++) printf(" %.4f", runs[i].curve[k]);
            printf("\n");
        }
        const result_t *fwr = fw_at >= 0 ? &runs[fw_at] : NULL;
        for (int k = 0; none && k < 2; k++) {
            const result_t *x = k ? fwr : bk;
            if (!x || (k == 0 && x->mode != MODE_BUCKETED)) continue;
            printf("summary: step time %.2f ms without overlap, %.2f ms %s (%.2fx); "
                   "communication %.2f ms per step, %.0f%% hidden (exposed %.2f ms)",
                   none->step_ms, x->step_ms, k ? "forward" : "bucketed",
                   x->step_ms / none->step_ms, none->wait_ms,
                   100.0 * (1 - x->wait_ms / none->wait_ms), x->wait_ms);
            if (x->traced && x->tr_comm_ms > 0)
                printf("; trace: overlap %.0f%% of %.2f ms", 100.0 * (1 - x->tr_exposed_ms / x->tr_comm_ms),
                       x->tr_comm_ms);
            printf("\n");
        }
        fflush(stdout);
        if (o.verify) fails = verify(&o, &d, runs, nruns);
    }
    CHECK(xc_bcast(&fails, 1, XC_INT32, 0, g_comm));
    for (int i = 0; i < nruns; i++) free(runs[i].loss), free(runs[i].curve);
    dataset_free(&d);
    CHECK(xc_comm_destroy(g_comm));
    if (fails && g_rank == 0) printf("train_mlp: verification FAILED (%d)\n", fails);
    return fails ? 1 : 0;
}
