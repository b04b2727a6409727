/*
 * residual.c -- the error-feedback state of the compressed collectives
 * (xc_residual_*), and the formats' names.
 */
#include "segment.h"

#include <stdlib.h>
#include <string.h>

struct xc_residual {
    size_t count;
    float *v; /* [2 * count]: sender side, then reducer side (by element) */
};

xc_result_t xc_residual_create(size_t count, xc_residual_t **out)
{
    if (!out) return xc__err(XC_ERR_INVALID, "xc_residual_create: out is NULL");
    *out = NULL;
    xc_residual_t *r = calloc(1, sizeof *r);
    float *v = count ? calloc(2 * count, sizeof *v) : NULL;
    if (!r || (count && !v)) {
        free(r);
        free(v);
        return xc__err(XC_ERR_NOMEM, "xc_residual_create: out of memory for %zu values", count);
    }
    r->count = count;
    r->v = v;
    *out = r;
    return XC_OK;
}

void xc_residual_free(xc_residual_t *r)
{
    if (!r) return;
    free(r->v);
    free(r);
}

xc_result_t xc_residual_data(xc_residual_t *r, void **data, size_t *bytes)
{
    if (!r || !data || !bytes)
        return xc__err(XC_ERR_INVALID, "xc_residual_data: %s is NULL",
                       !r ? "residual" : !data ? "data" : "bytes");
    *data = r->v;
    *bytes = 2 * r->count * sizeof *r->v;
    return XC_OK;
}

static const char *const k_names[XC_COMPRESS_COUNT] = {"none", "fp16", "bf16", "int8", "int4"};

const char *xc_compress_name(xc_compress_t fmt)
{
    return (unsigned)fmt < XC_COMPRESS_COUNT ? k_names[fmt] : NULL;
}

xc_result_t xc_compress_parse(const char *s, xc_compress_t *fmt)
{
    if (!s || !fmt) return xc__err(XC_ERR_INVALID, "xc_compress_parse: NULL argument");
    for (int f = 0; f < XC_COMPRESS_COUNT; f++)
        if (!strcmp(s, k_names[f])) {
            *fmt = (xc_compress_t)f;
            return XC_OK;
        }
    return xc__err(XC_ERR_INVALID, "unknown compression '%s' (none, fp16, bf16, int8 or int4)", s);
}

float *xc__residual_values(xc_residual_t *r) { return r ? r->v : NULL; }

size_t xc__residual_count(const xc_residual_t *r) { return r ? r->count : 0; }
