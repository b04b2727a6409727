/*
 * zero.c -- ZeRO stages 1, 2 and 3 over a data-parallel communicator
 * (xcoll.h "ZeRO", docs/zero.md): per-tensor shards, reduce-scattered
 * gradients, sharded optimizer state, and for stage 3 sharded parameters
 * gathered on demand with a bounded prefetch.
 *
 * Every collective is issued in an order that depends only on the calls
 * the ranks make, never on timing: a prefetched gather counts as in
 * flight from its issue until the fetch that consumes it (not until it
 * completes), so every rank decides to prefetch at the same points.
 */
#include "../core/common.h"

#include <stdlib.h>
#include <string.h>

typedef struct tensor {
    size_t count, s;    /* values; shard size ceil(count / N) */
    size_t lo, n;       /* this rank's shard */
    float *full;        /* stages 1-2: always (padded to s N); stage 3: while gathered */
    float *shard;       /* stage 3: this rank's parameters (s values, padded) */
    float *grad;        /* the full gradient being written (padded to s N) */
    float *gshard;      /* this rank's shard of the averaged gradient (s) */
    float *state;       /* optimizer state (s x state_per_value) */
    xc_request_t *rs;   /* stages 2-3: its reduce-scatter */
    xc_request_t *ag;   /* stage 3: its gather, until a fetch waits for it */
    int held;           /* stage 3: fetched and not released */
    int ready;          /* gradient marked this step */
} tensor_t;

struct xc_zero {
    xc_comm_t *comm;
    xc_zero_opts_t o;
    int n, me, committed, pass;
    tensor_t *t;
    int nt, cap;
    int inflight;       /* gathers issued and not yet consumed by a fetch */
    float *tmp;         /* stages 1-2: a shard's copy for the all-gather */
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
        o.state_per_value > 16)
        return xc__err(XC_ERR_INVALID, "xc_zero_create: stage %d (1-3), prefetch %d (>= 0), "
                                       "inflight %d (>= 1), state_per_value %d (0-16)",
                       o.stage, o.prefetch, o.inflight, o.state_per_value);
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
    t->s = (count + (size_t)z->n - 1) / (size_t)z->n;
    t->lo = (size_t)z->me * t->s;
    if (t->lo > count) t->lo = count;
    t->n = count - t->lo < t->s ? count - t->lo : t->s;
    size_t padded = t->s * (size_t)z->n;
    if (z->o.stage < 3) {
        t->full = alloc_f(z, &z->mem.params, padded);
        if (t->full && count) memcpy(t->full, init, count * sizeof *init);
    } else {
        t->shard = alloc_f(z, &z->mem.params, t->s);
        if (t->shard && t->n) memcpy(t->shard, init + t->lo, t->n * sizeof *init);
    }
    t->gshard = alloc_f(z, &z->mem.grads, t->s);
    t->state = alloc_f(z, &z->mem.state, t->s * (size_t)z->o.state_per_value);
    if (!(z->o.stage < 3 ? t->full : t->shard) || !t->gshard || !t->state) {
        free_f(z, &z->mem.params, z->o.stage < 3 ? &t->full : &t->shard,
               z->o.stage < 3 ? padded : t->s);
        free_f(z, &z->mem.grads, &t->gshard, t->s);
        free_f(z, &z->mem.state, &t->state, t->s * (size_t)z->o.state_per_value);
        return xc__err(XC_ERR_NOMEM, "xc_zero_register: out of memory for %zu values", count);
    }
    if (index) *index = z->nt;
    z->nt++;
    return XC_OK;
}

xc_result_t xc_zero_commit(xc_zero_t *z)
{
    if (!z) return xc__err(XC_ERR_INVALID, "xc_zero_commit: z is NULL");
    /* Every rank must hold the same tensors: agree on their number and
     * total size (one small all-reduce). */
    int64_t v[4] = {z->nt, -(int64_t)z->nt, 0, 0};
    for (int i = 0; i < z->nt; i++) v[2] += (int64_t)z->t[i].count;
    v[3] = -v[2];
    XC_CHECK(xc_allreduce(v, v, 4, XC_INT64, XC_MAX, z->comm));
    if (v[0] != -v[1] || v[2] != -v[3])
        return xc__err(XC_ERR_MISMATCH, "xc_zero_commit: ranks registered different tensors "
                                        "(%d here; counts %lld..%lld, values %lld..%lld)",
                       z->nt, (long long)-v[1], (long long)v[0], (long long)-v[3],
                       (long long)v[2]);
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

/* Stage 3: start gathering tensor i. */
static xc_result_t gather_start(xc_zero_t *z, tensor_t *t)
{
    t->full = alloc_f(z, &z->mem.params, t->s * (size_t)z->n);
    if (!t->full) return xc__err(XC_ERR_NOMEM, "xc_zero_fetch: out of memory");
    XC_CHECK(xc_iallgather(t->shard, t->full, t->s, XC_FLOAT32, z->comm, &t->ag));
    z->mem.gathers++;
    z->inflight++;
    if ((uint64_t)z->inflight > z->mem.max_inflight) z->mem.max_inflight = (uint64_t)z->inflight;
    return XC_OK;
}

/* Stage 3: wait for tensor i's gather (consumes its in-flight slot). */
static xc_result_t gather_wait(xc_zero_t *z, tensor_t *t)
{
    if (!t->ag) return XC_OK;
    xc_result_t rc = xc_request_wait(t->ag);
    xc_request_free(t->ag);
    t->ag = NULL;
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
    if (z->o.stage < 3) {
        *values = t->full;
        return XC_OK;
    }
    if (!t->full) XC_CHECK(gather_start(z, t));
    XC_CHECK(gather_wait(z, t));
    t->held = 1;
    /* Prefetch the next tensors of the pass, within the in-flight limit. */
    int dir = z->pass == XC_ZERO_FORWARD ? 1 : -1;
    for (int k = 1; k <= z->o.prefetch && z->inflight < z->o.inflight; k++) {
        int j = i + dir * k;
        if (j < 0 || j >= z->nt) break;
        if (!z->t[j].full) XC_CHECK(gather_start(z, &z->t[j]));
    }
    *values = t->full;
    return XC_OK;
}

xc_result_t xc_zero_release(xc_zero_t *z, int i)
{
    XC_CHECK(usable(z, i, "xc_zero_release"));
    tensor_t *t = &z->t[i];
    if (z->o.stage < 3) return XC_OK;
    if (!t->held) return xc__err(XC_ERR_INVALID, "xc_zero_release: tensor %d is not fetched", i);
    t->held = 0;
    /* The last tensor of the forward pass is the first of the backward:
     * it stays gathered (as FSDP keeps its root unsharded) -- one gather
     * fewer per step.  xc_zero_step drops it if the backward never came. */
    if (z->pass == XC_ZERO_FORWARD && i == z->nt - 1) return XC_OK;
    free_f(z, &z->mem.params, &t->full, t->s * (size_t)z->n);
    return XC_OK;
}

/* Stages 2-3: drop the full gradients whose reduce-scatter has completed
 * (testing issues nothing, so the ranks' collectives stay in step). */
static void grad_done(xc_zero_t *z, tensor_t *t);
static void reap(xc_zero_t *z)
{
    for (int i = 0; i < z->nt; i++) {
        tensor_t *t = &z->t[i];
        int done = 0;
        if (!t->rs || xc_request_test(t->rs, &done) != XC_OK || !done) continue;
        if (xc_request_wait(t->rs) != XC_OK) continue; /* the step reports it */
        xc_request_free(t->rs);
        t->rs = NULL;
        grad_done(z, t);
        t->ready = 2; /* reduced */
    }
}

float *xc_zero_grad(xc_zero_t *z, int i)
{
    if (usable(z, i, "xc_zero_grad") != XC_OK) return NULL;
    tensor_t *t = &z->t[i];
    if (!t->grad) t->grad = alloc_f(z, &z->mem.grads, t->s * (size_t)z->n);
    if (!t->grad) xc__err(XC_ERR_NOMEM, "xc_zero_grad: out of memory");
    return t->grad;
}

xc_result_t xc_zero_grad_ready(xc_zero_t *z, int i)
{
    XC_CHECK(usable(z, i, "xc_zero_grad_ready"));
    tensor_t *t = &z->t[i];
    if (t->ready) return xc__err(XC_ERR_INVALID, "xc_zero_grad_ready: tensor %d twice in a step", i);
    if (!t->grad && !xc_zero_grad(z, i)) return XC_ERR_NOMEM;
    t->ready = 1;
    if (z->o.stage == 1) return XC_OK; /* reduced at the step */
    XC_CHECK(xc_ireduce_scatter(t->grad, t->gshard, t->s, XC_FLOAT32, XC_AVG, z->comm, &t->rs));
    reap(z);
    return XC_OK;
}

/* After a reduce-scatter: the full gradient is dropped (stages 2-3) or
 * zeroed for the next step (stage 1). */
static void grad_done(xc_zero_t *z, tensor_t *t)
{
    if (z->o.stage > 1) free_f(z, &z->mem.grads, &t->grad, t->s * (size_t)z->n);
    else if (t->grad) memset(t->grad, 0, t->s * (size_t)z->n * sizeof *t->grad);
}

xc_result_t xc_zero_step(xc_zero_t *z, xc_zero_update_fn update, void *ctx)
{
    if (!z) return xc__err(XC_ERR_INVALID, "xc_zero_step: z is NULL");
    if (!z->committed) return xc__err(XC_ERR_INVALID, "xc_zero_step: before xc_zero_commit");
    if (!update) return xc__err(XC_ERR_INVALID, "xc_zero_step: update is NULL");
    for (int i = 0; i < z->nt; i++)
        if (z->t[i].held)
            return xc__err(XC_ERR_INVALID, "xc_zero_step: tensor %d is still fetched (release it "
                                           "first: the step changes its values)", i);
    /* Stages 2-3: the reduce-scatters issued at grad_ready complete
     * (waiting issues nothing).  Then, in tensor order, a blocking one for
     * every other tensor: all of them in stage 1, the never-marked ones
     * (a zero gradient) in stages 2-3 -- the same calls on every rank. */
    xc_result_t rc = XC_OK;
    for (int i = 0; i < z->nt; i++) {
        tensor_t *t = &z->t[i];
        if (!t->rs) continue;
        xc_result_t r = xc_request_wait(t->rs);
        xc_request_free(t->rs);
        t->rs = NULL;
        if (r != XC_OK && rc == XC_OK) rc = r;
        grad_done(z, t);
        t->ready = 2; /* reduced */
    }
    XC_CHECK(rc);
    for (int i = 0; i < z->nt; i++) {
        tensor_t *t = &z->t[i];
        if (t->ready != 2) {
            if (!t->grad && !xc_zero_grad(z, i)) return XC_ERR_NOMEM; /* never written: 0 */
            XC_CHECK(xc_reduce_scatter(t->grad, t->gshard, t->s, XC_FLOAT32, XC_AVG, z->comm));
            grad_done(z, t);
        }
        t->ready = 0;
    }
    /* Stage 3: gathered copies not held by the caller (kept or prefetched
     * and never fetched) would be stale after the update: dropped. */
    for (int i = 0; z->o.stage == 3 && i < z->nt; i++) {
        tensor_t *t = &z->t[i];
        if (t->held || !t->full) continue;
        XC_CHECK(gather_wait(z, t));
        free_f(z, &z->mem.params, &t->full, t->s * (size_t)z->n);
    }
    for (int i = 0; i < z->nt; i++) {
        tensor_t *t = &z->t[i];
        float *p = z->o.stage < 3 ? t->full + t->lo : t->shard;
        if (t->n && update(ctx, i, p, t->gshard, t->state, t->n, t->lo))
            return xc__err(XC_ERR_INVALID, "xc_zero_step: the update failed on tensor %d", i);
        if (z->o.stage < 3) { /* everyone's updated shards into the full values */
            if (z->tmp_cap < t->s) {
                float *m = realloc(z->tmp, t->s * sizeof *m);
                if (!m) return xc__err(XC_ERR_NOMEM, "xc_zero_step: out of memory");
                z->tmp = m;
                z->tmp_cap = t->s;
            }
            memcpy(z->tmp, t->full + (size_t)z->me * t->s, t->s * sizeof *z->tmp);
            XC_CHECK(xc_allgather(z->tmp, t->full, t->s, XC_FLOAT32, z->comm));
        }
    }
    return XC_OK;
}

xc_result_t xc_zero_shard(const xc_zero_t *z, int i, size_t *offset, size_t *n)
{
    if (!z || i < 0 || i >= z->nt || !offset || !n)
        return xc__err(XC_ERR_INVALID, "xc_zero_shard: bad argument");
    *offset = z->t[i].lo;
    *n = z->t[i].n;
    return XC_OK;
}

xc_result_t xc_zero_gather(xc_zero_t *z, int i, float *out)
{
    XC_CHECK(usable(z, i, "xc_zero_gather"));
    tensor_t *t = &z->t[i];
    if (!out && t->count) return xc__err(XC_ERR_INVALID, "xc_zero_gather: out is NULL");
    if (z->o.stage < 3 || t->full) {
        if (z->o.stage == 3) XC_CHECK(gather_wait(z, t));
        if (t->count) memcpy(out, t->full, t->count * sizeof *out);
        return XC_OK;
    }
    float *buf = malloc(t->s * (size_t)z->n * sizeof *buf + 1);
    if (!buf) return xc__err(XC_ERR_NOMEM, "xc_zero_gather: out of memory");
    xc_result_t rc = xc_allgather(t->shard, buf, t->s, XC_FLOAT32, z->comm);
    if (rc == XC_OK && t->count) memcpy(out, buf, t->count * sizeof *out);
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
    for (int i = 0; i < z->nt; i++) {
        tensor_t *t = &z->t[i];
        if (t->ag) xc_request_wait(t->ag), xc_request_free(t->ag);
        if (t->rs) xc_request_wait(t->rs), xc_request_free(t->rs);
        free(t->full);
        free(t->shard);
        free(t->grad);
        free(t->gshard);
        free(t->state);
    }
    free(z->t);
    free(z->tmp);
    free(z);
}
