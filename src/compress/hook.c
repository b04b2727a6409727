/*
 * hook.c -- the bucketer's compression hook (xc_compress_hook_create,
 * docs/compression.md): a bucket of a float dtype past the warm-up steps is
 * all-reduced with xc_allreduce_compressed in place, with the bucket's
 * residual; everything else (warm-up, other dtypes, other ops) takes the
 * plain non-blocking all-reduce.  The compressed call is blocking: it runs
 * on the bucketer's launch thread, overlapping the caller's backward.
 * Under XC_COMPRESS_WHEN_FASTER a bucket is compressed only where the cost
 * model predicts it pays; the decision is made once per bucket size and
 * layout and is the same on every rank (the prediction is).
 */
#include "../core/common.h"

#include <stdlib.h>
#include <string.h>

typedef struct slot {
    xc_residual_t *res;
    size_t count;
    int layout;
    int decided;  /* for (count, layout) below: compress (1) or not (0) */
    size_t d_count;
    int d_layout, compress;
} slot_t;

struct xc_compress_hook {
    xc_compress_t fmt;
    xc_compress_when_t when;
    int warmup, feedback;
    slot_t *slots;
    int nslots;
};

static int compressible(const xc_bucket_t *bk)
{
    return (bk->dtype == XC_FLOAT32 || bk->dtype == XC_FLOAT16 || bk->dtype == XC_BFLOAT16) &&
           (bk->op == XC_SUM || bk->op == XC_AVG);
}

/* The slot of bucket k (grown on demand). */
static xc_result_t slot_of(xc_compress_hook_t *h, const xc_bucket_t *bk, slot_t **out)
{
    if (bk->index >= h->nslots) {
        int n = bk->index + 1;
        slot_t *s = realloc(h->slots, (size_t)n * sizeof *s);
        if (!s) return xc__err(XC_ERR_NOMEM, "compression hook: out of memory");
        memset(s + h->nslots, 0, (size_t)(n - h->nslots) * sizeof *s);
        h->slots = s;
        h->nslots = n;
    }
    *out = &h->slots[bk->index];
    return XC_OK;
}

/* Does bucket bk pay for compression on comm (XC_COMPRESS_WHEN_FASTER)? */
static int pays(xc_compress_hook_t *h, xc_comm_t *comm, const xc_bucket_t *bk, slot_t *s)
{
    if (h->when == XC_COMPRESS_WHEN_ALWAYS) return 1;
    if (s->decided && s->d_count == bk->count && s->d_layout == bk->layout) return s->compress;
    double tc, tp;
    int yes = 1; /* no model (yet): as asked */
    if (xc_compress_predict(comm, bk->count, bk->dtype, bk->op, h->fmt, &tc) == XC_OK &&
        xc_compress_predict(comm, bk->count, bk->dtype, bk->op, XC_COMPRESS_NONE, &tp) == XC_OK) {
        yes = tc < tp;
        XC_INFO("compression hook: bucket %d (%zu values): %s predicted %.3f ms, plain %.3f ms: %s",
                bk->index, bk->count, xc_compress_name(h->fmt), tc * 1e3, tp * 1e3,
                yes ? "compressed" : "plain");
    }
    s->decided = 1, s->d_count = bk->count, s->d_layout = bk->layout, s->compress = yes;
    return yes;
}

/* The residual of bucket k, (re)created for its current layout and size. */
static xc_result_t residual_of(slot_t *s, const xc_bucket_t *bk, xc_residual_t **out)
{
    if (!s->res || s->count != bk->count || s->layout != bk->layout) {
        xc_residual_free(s->res);
        s->res = NULL;
        XC_CHECK(xc_residual_create(bk->count, &s->res));
        s->count = bk->count;
        s->layout = bk->layout;
    }
    *out = s->res;
    return XC_OK;
}

static xc_result_t hook_start(void *ctx, xc_comm_t *comm, const xc_bucket_t *bk,
                              xc_request_t **req)
{
    xc_compress_hook_t *h = ctx;
    *req = NULL;
    if (h->fmt == XC_COMPRESS_NONE || !compressible(bk) || bk->step <= (uint64_t)h->warmup)
        return xc_iallreduce(bk->data, bk->data, bk->count, bk->dtype, bk->op, comm, req);
    slot_t *s = NULL;
    XC_CHECK(slot_of(h, bk, &s));
    if (!pays(h, comm, bk, s))
        return xc_iallreduce(bk->data, bk->data, bk->count, bk->dtype, bk->op, comm, req);
    xc_residual_t *res = NULL;
    if (h->feedback) XC_CHECK(residual_of(s, bk, &res));
    return xc_allreduce_compressed(bk->data, bk->data, bk->count, bk->dtype, bk->op, h->fmt, res,
                                   comm);
}

xc_result_t xc_compress_hook_create(xc_compress_t fmt, int warmup, int feedback,
                                    xc_compress_hook_t **out, xc_bucket_hook_t *hook)
{
    if (!out || !hook)
        return xc__err(XC_ERR_INVALID, "xc_compress_hook_create: %s is NULL", !out ? "out" : "hook");
    *out = NULL;
    if ((unsigned)fmt >= XC_COMPRESS_COUNT || warmup < 0)
        return xc__err(XC_ERR_INVALID, "xc_compress_hook_create: format %d, warm-up %d steps",
                       (int)fmt, warmup);
    xc_compress_hook_t *h = calloc(1, sizeof *h);
    if (!h) return xc__err(XC_ERR_NOMEM, "xc_compress_hook_create: out of memory");
    h->fmt = fmt;
    h->warmup = warmup;
    h->feedback = feedback != 0;
    memset(hook, 0, sizeof *hook);
    hook->size = sizeof *hook;
    hook->ctx = h;
    hook->start = hook_start;
    *out = h;
    return XC_OK;
}

xc_result_t xc_compress_hook_set_when(xc_compress_hook_t *h, xc_compress_when_t when)
{
    if (!h || (when != XC_COMPRESS_WHEN_FASTER && when != XC_COMPRESS_WHEN_ALWAYS))
        return xc__err(XC_ERR_INVALID, "xc_compress_hook_set_when: %s",
                       !h ? "hook is NULL" : "unknown policy");
    h->when = when;
    for (int k = 0; k < h->nslots; k++) h->slots[k].decided = 0;
    return XC_OK;
}

void xc_compress_hook_free(xc_compress_hook_t *h)
{
    if (!h) return;
    for (int k = 0; k < h->nslots; k++) xc_residual_free(h->slots[k].res);
    free(h->slots);
    free(h);
}

xc_result_t xc_compress_hook_residual(xc_compress_hook_t *h, int bucket, void **data,
                                      size_t *bytes)
{
    if (!h || !data || !bytes || bucket < 0)
        return xc__err(XC_ERR_INVALID, "xc_compress_hook_residual: bad argument");
    *data = NULL;
    *bytes = 0;
    if (bucket >= h->nslots || !h->slots[bucket].res) return XC_OK;
    return xc_residual_data(h->slots[bucket].res, data, bytes);
}

xc_result_t xc_compress_hook_residual_of(xc_compress_hook_t *h, const xc_bucket_t *bk,
                                         void **data, size_t *bytes)
{
    if (!h || !bk || !data || !bytes || bk->index < 0)
        return xc__err(XC_ERR_INVALID, "xc_compress_hook_residual_of: bad argument");
    *data = NULL;
    *bytes = 0;
    if (h->fmt == XC_COMPRESS_NONE || !h->feedback || !compressible(bk))
        return XC_OK; /* this bucket never has one */
    slot_t *s = NULL;
    xc_residual_t *res = NULL;
    XC_CHECK(slot_of(h, bk, &s));
    XC_CHECK(residual_of(s, bk, &res));
    return xc_residual_data(res, data, bytes);
}
