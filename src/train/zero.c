/*
 * zero.c -- ZeRO stages 1, 2 and 3 over a data-parallel communicator
 * (xcoll.h "ZeRO", docs/zero.md): buckets of consecutive tensors (one per
 * tensor by default) sharded 1/N, reduce-scattered gradients, sharded
 * optimizer state, and for stage 3 sharded parameters gathered on demand
 * with a bounded prefetch.
 *
 * Every collective is issued in an order that depends only on the calls
 * the ranks make, never on timing: a prefetched gather counts as in
 * flight from its issue until the fetch that consumes it (not until it
 * completes), so every rank decides to prefetch at the same points.
 */
#include "../core/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct tensor {
    size_t count;
    float *init;         /* its initial values, until commit */
    int bucket;
    size_t off;          /* its first value's place in the bucket */
    size_t sub_lo, sub_n;/* this rank's values of it: [sub_lo, sub_lo + sub_n) */
    int ready;           /* gradient marked this step */
    int held;            /* stage 3: fetched and not released */
} tensor_t;

typedef struct bucket {
    int t0, nt;          /* tensors [t0, t0 + nt) */
    size_t count, s;     /* values; shard size ceil(count / N) */
    size_t lo, n;        /* this rank's shard of the bucket */
    float *full;         /* stages 1-2: always (padded to s N); stage 3: while gathered */
    float *shard;        /* stage 3: this rank's parameters (s values) */
    float *grad;         /* the full gradient being written (s N) */
    float *gshard;       /* this rank's shard of the averaged gradient (s) */
    float *state;        /* optimizer state (s x state_per_value) */
    xc_request_t *rs;    /* stages 2-3: its reduce-scatter */
    xc_request_t *ag;    /* stage 3: its gather, until a fetch waits for it */
    int nready, nheld;
    int reduced;         /* this step's gradient is in gshard */
} bucket_t;

struct xc_zero {
    xc_comm_t *comm;
    xc_zero_opts_t o;
    int n, me, committed, pass;
    tensor_t *t;
    int nt, cap;
    bucket_t *b;
    int nb;
    int inflight;        /* gathers issued and not yet consumed by a fetch */
    int next_rs;         /* stages 2-3: the bucket whose reduce-scatter is next
                          * (they go in reverse bucket order, see issue_ready) */
    float *tmp;          /* stages 1-2: a shard's copy for the all-gather */
    xc_grad_t *clip_g;   /* the shards of the gradient as the clip sees them (nb) */
    size_t tmp_cap;
    xc_zero_memory_t mem;
};

static void account(xc_zero_t *z, size_t *field, long delta)
{
    *field = (size_t)((long)*field + delta);
    xc_zero_memory_t *m = &z->mem;
    if (m->params > m->peak_params) m->peak_params = m->params;
    if (m->grads > m->peak_grads) m->peak_grads = m->grads;
    size_t tot = m->params + m->grads + m->state;
    if (tot > m->peak_total) m->peak_total = tot;
}

static float *alloc_f(xc_zero_t *z, size_t *field, size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (p) account(z, field, (long)(n * sizeof *p));
    return p;
}

static void free_f(xc_zero_t *z, size_t *field, float **p, size_t n)
{
    if (!*p) return;
    free(*p);
    *p = NULL;
    account(z, field, -(long)(n * sizeof(float)));
}

static size_t padded(const xc_zero_t *z, const bucket_t *b) { return b->s * (size_t)z->n; }

xc_result_t xc_zero_create(xc_comm_t *comm, const xc_zero_opts_t *opts, xc_zero_t **out)
{
    if (!out) return xc__err(XC_ERR_INVALID, "xc_zero_create: out is NULL");
    *out = NULL;
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_zero_create: comm is NULL");
    xc_zero_opts_t o = XC_ZERO_OPTS_INIT;
    if (opts) {
        if (opts->size < sizeof(size_t) || opts->size > sizeof o)
            return xc__err(XC_ERR_INVALID, "xc_zero_create: opts->size %zu (start from "
                                           "XC_ZERO_OPTS_INIT)", opts->size);
        memcpy(&o, opts, opts->size);
        o.size = sizeof o;
    }
    if (o.stage < 1 || o.stage > 3 || o.prefetch < 0 || o.inflight < 1 || o.state_per_value < 0 ||
        o.state_per_value > 16 || !(o.bucket_mb >= 0 && o.bucket_mb <= 1e6))
        return xc__err(XC_ERR_INVALID, "xc_zero_create: stage %d (1-3), prefetch %d (>= 0), "
                                       "inflight %d (>= 1), state_per_value %d (0-16), bucket "
                                       "%g MiB (0-1e6)",
                       o.stage, o.prefetch, o.inflight, o.state_per_value, o.bucket_mb);
    xc_zero_t *z = calloc(1, sizeof *z);
    if (!z) return xc__err(XC_ERR_NOMEM, "xc_zero_create: out of memory");
    z->comm = comm;
    z->o = o;
    z->n = xc_comm_size(comm);
    z->me = xc_comm_rank(comm);
    *out = z;
    return XC_OK;
}

xc_result_t xc_zero_register(xc_zero_t *z, const float *init, size_t count, int *index)
{
    if (!z || (count && !init))
        return xc__err(XC_ERR_INVALID, "xc_zero_register: %s is NULL", !z ? "z" : "init");
    if (z->committed) return xc__err(XC_ERR_INVALID, "xc_zero_register: after commit");
    if (z->nt == z->cap) {
        int cap = z->cap ? 2 * z->cap : 16;
        tensor_t *t = realloc(z->t, (size_t)cap * sizeof *t);
        if (!t) return xc__err(XC_ERR_NOMEM, "xc_zero_register: out of memory");
        z->t = t;
        z->cap = cap;
    }
    tensor_t *t = &z->t[z->nt];
    memset(t, 0, sizeof *t);
    t->count = count;
    t->init = malloc((count ? count : 1) * sizeof *init);
    if (!t->init) return xc__err(XC_ERR_NOMEM, "xc_zero_register: out of memory for %zu values", count);
    if (count) memcpy(t->init, init, count * sizeof *init);
    if (index) *index = z->nt;
    z->nt++;
    return XC_OK;
}

/* Undo build(): nothing held, the initial values kept (a commit that
 * failed can be retried). */
static void unbuild(xc_zero_t *z)
{
    for (int k = 0; k < z->nb; k++) {
        bucket_t *b = &z->b[k];
        size_t s = b->s;
        free_f(z, &z->mem.params, &b->full, padded(z, b));
        free_f(z, &z->mem.params, &b->shard, s);
        free_f(z, &z->mem.grads, &b->gshard, s);
        free_f(z, &z->mem.state, &b->state, s * (size_t)z->o.state_per_value);
    }
    free(z->b);
    z->b = NULL;
    z->nb = 0;
    free(z->tmp);
    z->tmp = NULL;
    z->tmp_cap = 0;
    free(z->clip_g);
    z->clip_g = NULL;
    z->mem = (xc_zero_memory_t){0};
}

/* Cut the tensors into buckets, shard them, allocate every buffer, and
 * copy the initial values in (kept until every rank has built: on failure
 * unbuild() leaves the registrations as they were). */
static xc_result_t build(xc_zero_t *z)
{
    size_t cap = (size_t)(z->o.bucket_mb * 1048576.0 / sizeof(float));
    z->b = calloc((size_t)(z->nt ? z->nt : 1), sizeof *z->b);
    if (!z->b) return xc__err(XC_ERR_NOMEM, "xc_zero_commit: out of memory");
    for (int i = 0; i < z->nt; i++) {
        bucket_t *b = &z->b[z->nb ? z->nb - 1 : 0];
        if (!z->nb || b->count + z->t[i].count > cap) { /* a new bucket */
            b = &z->b[z->nb++];
            b->t0 = i;
        }
        z->t[i].bucket = (int)(b - z->b);
        z->t[i].off = b->count;
        b->count += z->t[i].count;
        b->nt++;
    }
    for (int k = 0; k < z->nb; k++) {
        bucket_t *b = &z->b[k];
        b->s = (b->count + (size_t)z->n - 1) / (size_t)z->n;
        b->lo = (size_t)z->me * b->s < b->count ? (size_t)z->me * b->s : b->count;
        b->n = b->count - b->lo < b->s ? b->count - b->lo : b->s;
        if (z->o.stage < 3) b->full = alloc_f(z, &z->mem.params, padded(z, b));
        else b->shard = alloc_f(z, &z->mem.params, b->s);
        b->gshard = alloc_f(z, &z->mem.grads, b->s);
        b->state = alloc_f(z, &z->mem.state, b->s * (size_t)z->o.state_per_value);
        if (!(z->o.stage < 3 ? b->full : b->shard) || !b->gshard || !b->state)
            return xc__err(XC_ERR_NOMEM, "xc_zero_commit: out of memory for %zu values", b->count);
        if (z->o.stage < 3 && z->tmp_cap < b->s) z->tmp_cap = b->s; /* the gathers' source */
    }
    if (z->tmp_cap && !(z->tmp = malloc(z->tmp_cap * sizeof *z->tmp)))
        return xc__err(XC_ERR_NOMEM, "xc_zero_commit: out of memory");
    if (!(z->clip_g = calloc((size_t)z->nb + 1, sizeof *z->clip_g)))
        return xc__err(XC_ERR_NOMEM, "xc_zero_commit: out of memory");
    for (int k = 0; k < z->nb; k++) {
        bucket_t *b = &z->b[k];
        for (int i = b->t0; i < b->t0 + b->nt; i++) {
            tensor_t *t = &z->t[i];
            size_t a = t->off > b->lo ? t->off : b->lo;
            size_t e = t->off + t->count < b->lo + b->n ? t->off + t->count : b->lo + b->n;
            /* an empty range sits where this rank's part would start */
            t->sub_lo = a < e ? a - t->off
                              : b->lo <= t->off ? 0
                                                : (b->lo - t->off < t->count ? b->lo - t->off : t->count);
            t->sub_n = a < e ? e - a : 0;
            if (b->full && t->count) memcpy(b->full + t->off, t->init, t->count * sizeof(float));
            if (b->shard && t->sub_n)
                memcpy(b->shard + (a - b->lo), t->init + t->sub_lo, t->sub_n * sizeof(float));
        }
    }
    return XC_OK;
}

xc_result_t xc_zero_commit(xc_zero_t *z)
{
    if (!z) return xc__err(XC_ERR_INVALID, "xc_zero_commit: z is NULL");
    if (z->committed) return xc__err(XC_ERR_INVALID, "xc_zero_commit: twice");
    /* Every rank must hold the same tensors, in the same order, and the
     * same options: agree on their number, total size, and a hash of the
     * sizes in order and of the options (one small all-reduce of each
     * value and its negation: min and max). */
    uint64_t h = 0x9e3779b97f4a7c15ull;
    const xc_zero_opts_t *o = &z->o;
    uint64_t opt[5] = {(uint64_t)o->stage, (uint64_t)o->prefetch, (uint64_t)o->inflight,
                       (uint64_t)o->state_per_value, 0};
    memcpy(&opt[4], &o->bucket_mb, sizeof o->bucket_mb);
    int64_t v[8] = {z->nt, -(int64_t)z->nt, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < z->nt; i++) {
        v[2] += (int64_t)z->t[i].count;
        h = (h ^ (uint64_t)z->t[i].count) * 0x100000001b3ull;
    }
    uint64_t ho = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 5; i++) ho = (ho ^ opt[i]) * 0x100000001b3ull;
    v[3] = -v[2];
    v[4] = (int64_t)(h >> 1), v[5] = -v[4]; /* (>> 1: negation cannot overflow) */
    v[6] = (int64_t)(ho >> 1), v[7] = -v[6];
    XC_CHECK(xc_allreduce(v, v, 8, XC_INT64, XC_MAX, z->comm));
    if (v[0] != -v[1] || v[2] != -v[3] || v[4] != -v[5])
        return xc__err(XC_ERR_MISMATCH, "xc_zero_commit: ranks registered different tensors "
                                        "(%d here; counts %lld..%lld, values %lld..%lld%s)",
                       z->nt, (long long)-v[1], (long long)v[0], (long long)-v[3],
                       (long long)v[2],
                       v[0] == -v[1] && v[2] == -v[3] ? "; the sizes differ in order" : "");
    if (v[6] != -v[7])
        return xc__err(XC_ERR_MISMATCH, "xc_zero_commit: ranks have different options (stage "
                                        "%d, prefetch %d, inflight %d, state_per_value %d, "
                                        "bucket_mb %g here)",
                       o->stage, o->prefetch, o->inflight, o->state_per_value, o->bucket_mb);
    /* Every rank commits or none does: one that ran out of memory would
     * otherwise leave the others stepping alone (each can retry). */
    xc_result_t rc = xc__agree_outcome(z->comm, build(z), "xc_zero_commit");
    if (rc != XC_OK) {
        unbuild(z);
        return rc;
    }
    for (int i = 0; i < z->nt; i++) {
        free(z->t[i].init);
        z->t[i].init = NULL;
    }
    z->next_rs = z->nb - 1;
    z->committed = 1;
    return XC_OK;
}

static xc_result_t usable(xc_zero_t *z, int i, const char *fn)
{
    if (!z) return xc__err(XC_ERR_INVALID, "%s: z is NULL", fn);
    if (!z->committed) return xc__err(XC_ERR_INVALID, "%s: before xc_zero_commit", fn);
    if (i < 0 || i >= z->nt)
        return xc__err(XC_ERR_INVALID, "%s: tensor %d of %d", fn, i, z->nt);
    return XC_OK;
}

/* Stage 3: start gathering bucket b. */
static xc_result_t gather_start(xc_zero_t *z, bucket_t *b)
{
    b->full = alloc_f(z, &z->mem.params, padded(z, b));
    if (!b->full) return xc__err(XC_ERR_NOMEM, "xc_zero_fetch: out of memory");
    XC_CHECK(xc_iallgather(b->shard, b->full, b->s, XC_FLOAT32, z->comm, &b->ag));
    z->mem.gathers++;
    z->inflight++;
    if ((uint64_t)z->inflight > z->mem.max_inflight) z->mem.max_inflight = (uint64_t)z->inflight;
    return XC_OK;
}

/* Stage 3: wait for bucket b's gather (consumes its in-flight slot). */
static xc_result_t gather_wait(xc_zero_t *z, bucket_t *b)
{
    if (!b->ag) return XC_OK;
    xc_result_t rc = xc_request_wait(b->ag);
    xc_request_free(b->ag);
    b->ag = NULL;
    z->inflight--;
    return rc;
}

xc_result_t xc_zero_begin(xc_zero_t *z, xc_zero_pass_t pass)
{
    if (!z) return xc__err(XC_ERR_INVALID, "xc_zero_begin: z is NULL");
    if (!z->committed) return xc__err(XC_ERR_INVALID, "xc_zero_begin: before xc_zero_commit");
    if (pass != XC_ZERO_FORWARD && pass != XC_ZERO_BACKWARD)
        return xc__err(XC_ERR_INVALID, "xc_zero_begin: pass %d", (int)pass);
    z->pass = pass;
    return XC_OK;
}

xc_result_t xc_zero_fetch(xc_zero_t *z, int i, float **values)
{
    XC_CHECK(usable(z, i, "xc_zero_fetch"));
    if (!values) return xc__err(XC_ERR_INVALID, "xc_zero_fetch: values is NULL");
    tensor_t *t = &z->t[i];
    bucket_t *b = &z->b[t->bucket];
    if (z->o.stage < 3) {
        *values = b->full + t->off;
        return XC_OK;
    }
    if (!b->full) XC_CHECK(gather_start(z, b));
    XC_CHECK(gather_wait(z, b));
    if (!t->held) t->held = 1, b->nheld++;
    /* Prefetch the next buckets of the pass, within the in-flight limit. */
    int dir = z->pass == XC_ZERO_FORWARD ? 1 : -1;
    for (int k = 1; k <= z->o.prefetch && z->inflight < z->o.inflight; k++) {
        int j = t->bucket + dir * k;
        if (j < 0 || j >= z->nb) break;
        if (!z->b[j].full) XC_CHECK(gather_start(z, &z->b[j]));
    }
    *values = b->full + t->off;
    return XC_OK;
}

xc_result_t xc_zero_release(xc_zero_t *z, int i)
{
    XC_CHECK(usable(z, i, "xc_zero_release"));
    tensor_t *t = &z->t[i];
    bucket_t *b = &z->b[t->bucket];
    if (z->o.stage < 3) return XC_OK;
    if (!t->held) return xc__err(XC_ERR_INVALID, "xc_zero_release: tensor %d is not fetched", i);
    t->held = 0;
    b->nheld--;
    /* The bucket stays gathered until the pass leaves it (its last tensor
     * in the pass's order); the last bucket of the forward also for the
     * backward, which starts with it (as FSDP keeps its root unsharded).
     * xc_zero_step drops what the passes did not. */
    int fwd = z->pass == XC_ZERO_FORWARD;
    int leaves = fwd ? i == b->t0 + b->nt - 1 : i == b->t0;
    if (b->nheld > 0 || !leaves || (fwd && t->bucket == z->nb - 1)) return XC_OK;
    free_f(z, &z->mem.params, &b->full, padded(z, b));
    return XC_OK;
}

/* Stages 2-3: drop the full gradient after the reduce-scatter; stage 1:
 * zero it for the next step. */
static void grad_done(xc_zero_t *z, bucket_t *b)
{
    if (z->o.stage > 1) free_f(z, &z->mem.grads, &b->grad, padded(z, b));
    else if (b->grad) memset(b->grad, 0, padded(z, b) * sizeof *b->grad);
    b->reduced = 1;
}

/* Stages 2-3: finish the reduce-scatters that have completed (testing
 * issues nothing, so the ranks' collectives stay in step). */
static void reap(xc_zero_t *z)
{
    for (int k = 0; k < z->nb; k++) {
        bucket_t *b = &z->b[k];
        int done = 0;
        if (!b->rs || xc_request_test(b->rs, &done) != XC_OK || !done) continue;
        if (xc_request_wait(b->rs) != XC_OK) continue; /* the step reports it */
        xc_request_free(b->rs);
        b->rs = NULL;
        grad_done(z, b);
    }
}

float *xc_zero_grad(xc_zero_t *z, int i)
{
    if (usable(z, i, "xc_zero_grad") != XC_OK) return NULL;
    bucket_t *b = &z->b[z->t[i].bucket];
    if (!b->grad) b->grad = alloc_f(z, &z->mem.grads, padded(z, b));
    if (!b->grad) {
        xc__err(XC_ERR_NOMEM, "xc_zero_grad: out of memory");
        return NULL;
    }
    return b->grad + z->t[i].off;
}

/* Stages 2-3: issue the reduce-scatters of the wholly marked buckets in
 * reverse bucket order (the backward's), each only once every later one
 * is issued: the same sequence of collectives on every rank whatever order
 * the gradients are marked in and whichever a rank leaves unmarked (those
 * buckets, and the ones before them, go at the step, in the same order). */
static xc_result_t issue_ready(xc_zero_t *z)
{
    for (; z->next_rs >= 0 && z->b[z->next_rs].nready == z->b[z->next_rs].nt; z->next_rs--) {
        bucket_t *b = &z->b[z->next_rs];
        XC_CHECK(xc_ireduce_scatter(b->grad, b->gshard, b->s, XC_FLOAT32, XC_AVG, z->comm,
                                    &b->rs));
    }
    return XC_OK;
}

xc_result_t xc_zero_grad_ready(xc_zero_t *z, int i)
{
    XC_CHECK(usable(z, i, "xc_zero_grad_ready"));
    tensor_t *t = &z->t[i];
    bucket_t *b = &z->b[t->bucket];
    if (t->ready) return xc__err(XC_ERR_INVALID, "xc_zero_grad_ready: tensor %d twice in a step", i);
    if (!b->grad && !xc_zero_grad(z, i)) return XC_ERR_NOMEM;
    t->ready = 1;
    if (++b->nready < b->nt || z->o.stage == 1) return XC_OK; /* stage 1: at the step */
    XC_CHECK(issue_ready(z));
    reap(z);
    return XC_OK;
}

typedef struct clip {
    double max_norm;
    double *norm;
    int *nonfinite;
} clip_t;

static xc_result_t reduce_and_update(xc_zero_t *z, xc_zero_update_fn update, void *ctx,
                                     const clip_t *clip);

/* xc_zero_step, and with `clip` xc_zero_step_clip. */
static xc_result_t zero_step(xc_zero_t *z, xc_zero_update_fn update, void *ctx, const clip_t *clip)
{
    if (!z) return xc__err(XC_ERR_INVALID, "xc_zero_step: z is NULL");
    if (!z->committed) return xc__err(XC_ERR_INVALID, "xc_zero_step: before xc_zero_commit");
    if (!update) return xc__err(XC_ERR_INVALID, "xc_zero_step: update is NULL");
    for (int i = 0; i < z->nt; i++)
        if (z->t[i].held)
            return xc__err(XC_ERR_INVALID, "xc_zero_step: tensor %d is still fetched (release it "
                                           "first: the step changes its values)", i);
    xc_result_t rc = reduce_and_update(z, update, ctx, clip);
    /* The next step starts afresh whatever happened in this one. */
    for (int k = 0; k < z->nb; k++) {
        z->b[k].reduced = 0;
        z->b[k].nready = 0;
    }
    for (int i = 0; i < z->nt; i++) z->t[i].ready = 0;
    z->next_rs = z->nb - 1;
    return rc;
}

/* The step's collectives and the update (zero_step resets the state). */
static xc_result_t reduce_and_update(xc_zero_t *z, xc_zero_update_fn update, void *ctx,
                                     const clip_t *clip)
{
    /* Stages 2-3: the reduce-scatters issued at grad_ready complete
     * (waiting issues nothing).  Then, continuing in reverse bucket order,
     * a blocking one for every other bucket: all of them in stage 1, the
     * rest in stages 2-3 (unmarked gradients zeroed first) -- the same
     * calls on every rank. */
    xc_result_t rc = XC_OK;
    for (int k = 0; k < z->nb; k++) {
        bucket_t *b = &z->b[k];
        if (!b->rs) continue;
        xc_result_t r = xc_request_wait(b->rs);
        xc_request_free(b->rs);
        b->rs = NULL;
        if (r != XC_OK && rc == XC_OK) rc = r;
        grad_done(z, b);
    }
    XC_CHECK(rc);
    for (int k = z->nb - 1; k >= 0; k--) {
        bucket_t *b = &z->b[k];
        if (!b->reduced) {
            if (!b->grad && !xc_zero_grad(z, b->t0)) return XC_ERR_NOMEM; /* never written: 0 */
            for (int i = b->t0; i < b->t0 + b->nt; i++) /* never marked: 0 */
                if (!z->t[i].ready && z->t[i].count)
                    memset(b->grad + z->t[i].off, 0, z->t[i].count * sizeof *b->grad);
            XC_CHECK(xc_reduce_scatter(b->grad, b->gshard, b->s, XC_FLOAT32, XC_AVG, z->comm));
            grad_done(z, b);
        }
    }
    /* Stage 3: gathered copies nobody holds (kept or prefetched and never
     * fetched) would be stale after the update: dropped. */
    for (int k = 0; z->o.stage == 3 && k < z->nb; k++) {
        bucket_t *b = &z->b[k];
        if (!b->full) continue;
        XC_CHECK(gather_wait(z, b));
        free_f(z, &z->mem.params, &b->full, padded(z, b));
    }
    /* Clipping: the global norm over every rank's gradient shards (each
     * held by one rank only), one all-reduce; a non-finite value anywhere
     * skips every rank's update (the gathers below still run). */
    int skip = 0;
    if (clip) {
        for (int k = 0; k < z->nb; k++)
            z->clip_g[k] = (xc_grad_t){z->b[k].gshard, z->b[k].n, XC_FLOAT32, 1};
        int nf = 0;
        XC_CHECK(xc_clip_grad_norm(z->comm, z->clip_g, z->nb, clip->max_norm, NULL, 0,
                                   clip->norm, &nf));
        if (clip->nonfinite) *clip->nonfinite = nf;
        skip = nf;
    }
    int failed = -1;
    for (int i = 0; i < z->nt && !skip; i++) {
        tensor_t *t = &z->t[i];
        bucket_t *b = &z->b[t->bucket];
        if (!t->sub_n) continue;
        size_t v0 = t->off + t->sub_lo - b->lo; /* in the shard */
        float *p = z->o.stage < 3 ? b->full + b->lo + v0 : b->shard + v0;
        if (update(ctx, i, p, b->gshard + v0, b->state + v0 * (size_t)z->o.state_per_value,
                   t->sub_n, t->sub_lo)) {
            failed = i;
            break; /* the later shards keep their values */
        }
    }
    /* The gathers run even after a failed update, so that the ranks'
     * collectives stay in step and their parameters equal (the shards
     * from the failed one on keep their values); the failure is this
     * rank's to report (its caller's code failed: it aborts the
     * communicator if it cannot go on). */
    for (int k = 0; z->o.stage < 3 && k < z->nb; k++) { /* the updated shards to everyone */
        bucket_t *b = &z->b[k];
        memcpy(z->tmp, b->full + (size_t)z->me * b->s, b->s * sizeof *z->tmp);
        XC_CHECK(xc_allgather(z->tmp, b->full, b->s, XC_FLOAT32, z->comm));
    }
    if (failed >= 0)
        return xc__err(XC_ERR_INVALID, "xc_zero_step: the update failed on tensor %d; the "
                       "shards from it on were not updated (the other ranks' were)", failed);
    return XC_OK;
}

xc_result_t xc_zero_step(xc_zero_t *z, xc_zero_update_fn update, void *ctx)
{
    return zero_step(z, update, ctx, NULL);
}

xc_result_t xc_zero_step_clip(xc_zero_t *z, double max_norm, double *norm, int *nonfinite,
                              xc_zero_update_fn update, void *ctx)
{
    if (!(max_norm >= 0) || isinf(max_norm))
        return xc__err(XC_ERR_INVALID, "xc_zero_step_clip: max_norm %g (must be finite, >= 0)",
                       max_norm);
    clip_t c = {max_norm, norm, nonfinite};
    return zero_step(z, update, ctx, &c);
}

xc_result_t xc_zero_shard(const xc_zero_t *z, int i, size_t *offset, size_t *n)
{
    if (!z || !z->committed || i < 0 || i >= z->nt || !offset || !n)
        return xc__err(XC_ERR_INVALID, "xc_zero_shard: bad argument (or before commit)");
    *offset = z->t[i].sub_lo;
    *n = z->t[i].sub_n;
    return XC_OK;
}

xc_result_t xc_zero_gather(xc_zero_t *z, int i, float *out)
{
    XC_CHECK(usable(z, i, "xc_zero_gather"));
    tensor_t *t = &z->t[i];
    bucket_t *b = &z->b[t->bucket];
    if (!out && t->count) return xc__err(XC_ERR_INVALID, "xc_zero_gather: out is NULL");
    if (z->o.stage < 3 || b->full) {
        if (z->o.stage == 3) XC_CHECK(gather_wait(z, b));
        if (t->count) memcpy(out, b->full + t->off, t->count * sizeof *out);
        return XC_OK;
    }
    float *buf = malloc(padded(z, b) * sizeof *buf + 1);
    if (!buf) return xc__err(XC_ERR_NOMEM, "xc_zero_gather: out of memory");
    xc_result_t rc = xc_allgather(b->shard, buf, b->s, XC_FLOAT32, z->comm);
    if (rc == XC_OK && t->count) memcpy(out, buf + t->off, t->count * sizeof *out);
    free(buf);
    return rc;
}

xc_result_t xc_zero_memory(const xc_zero_t *z, xc_zero_memory_t *m)
{
    if (!z || !m) return xc__err(XC_ERR_INVALID, "xc_zero_memory: NULL argument");
    *m = z->mem;
    return XC_OK;
}

void xc_zero_destroy(xc_zero_t *z)
{
    if (!z) return;
    for (int k = 0; k < z->nb; k++) {
        bucket_t *b = &z->b[k];
        if (b->ag) xc_request_wait(b->ag), xc_request_free(b->ag);
        if (b->rs) xc_request_wait(b->rs), xc_request_free(b->rs);
        free(b->full);
        free(b->shard);
        free(b->grad);
        free(b->gshard);
        free(b->state);
    }
    for (int i = 0; i < z->nt; i++) free(z->t[i].init);
    free(z->b);
    free(z->t);
    free(z->tmp);
    free(z->clip_g);
    free(z);
}
