/*
 * hook.c -- the bucketer's compression hook (xc_compress_hook_create,
 * docs/compression.md): a bucket of a float dtype past the warm-up steps is
 * all-reduced with xc_allreduce_compressed in place, with the bucket's
 * residual; everything else (warm-up, other dtypes, other ops) takes the
 * plain non-blocking all-reduce.  The compressed call is blocking: it runs
 * on the bucketer's launch thread, overlapping the caller's backward.
 */
#include "../core/common.h"

#include <stdlib.h>
#include <string.h>

typedef struct slot {
    xc_residual_t *res;
    size_t count;
    int layout;
} slot_t;

struct xc_compress_hook {
    xc_compress_t fmt;
    int warmup, feedback;
    slot_t *slots;
    int nslots;
};

static int compressible(const xc_bucket_t *bk)
{
    return (bk->dtype == XC_FLOAT32 || bk->dtype == XC_FLOAT16 || bk->dtype == XC_BFLOAT16) &&
           (bk->op == XC_SUM || bk->op == XC_AVG);
}

/* The residual of bucket k, (re)created for its current layout and size. */
static xc_result_t residual_of(xc_compress_hook_t *h, const xc_bucket_t *bk, xc_residual_t **out)
{
    if (bk->index >= h->nslots) {
        int n = bk->index + 1;
        slot_t *s = realloc(h->slots, (size_t)n * sizeof *s);
        if (!s) return xc__err(XC_ERR_NOMEM, "compression hook: out of memory");
        memset(s + h->nslots, 0, (size_t)(n - h->nslots) * sizeof *s);
        h->slots = s;
        h->nslots = n;
    }
    slot_t *s = &h->slots[bk->index];
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
    xc_residual_t *res = NULL;
    if (h->feedback) XC_CHECK(residual_of(h, bk, &res));
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
