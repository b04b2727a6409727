/*
 * clip.c -- global-norm gradient clipping with one synchronisation
 * (xc_clip_grad_norm, docs/training.md): local squared norms in fp64, the
 * overflow flag and the caller's step scalars fused into one small
 * all-reduce, then the scaling, locally.
 */
#include "../core/common.h"
#include "../reduce/reduce.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Σ x² of n values of a float dtype, in fp64 (four partial sums). */
static double sumsq(const void *data, size_t n, xc_dtype_t dt)
{
    double s[4] = {0, 0, 0, 0};
    float buf[256];
    size_t i = 0;
    switch (dt) {
    case XC_FLOAT32: {
        const float *x = data;
        for (; i + 4 <= n; i += 4)
            for (int k = 0; k < 4; k++) s[k] += (double)x[i + k] * x[i + k];
        for (; i < n; i++) s[0] += (double)x[i] * x[i];
        break;
    }
    case XC_FLOAT64: {
        const double *x = data;
        for (; i + 4 <= n; i += 4)
            for (int k = 0; k < 4; k++) s[k] += x[i + k] * x[i + k];
        for (; i < n; i++) s[0] += x[i] * x[i];
        break;
    }
    default: { /* fp16 / bf16: widened 256 at a time */
        const uint16_t *x = data;
        for (; i < n; i += 256) {
            size_t m = n - i < 256 ? n - i : 256;
            if (dt == XC_FLOAT16) xc__fp16_to_fp32_n(buf, x + i, m);
            else xc__bf16_to_fp32_n(buf, x + i, m);
            for (size_t k = 0; k < m; k++) s[k & 3] += (double)buf[k] * buf[k];
        }
        break;
    }
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Is any of the n values infinite or NaN?  (Only asked when the sum of
 * squares is not finite: fp64 squares of huge finite values overflow.) */
static int any_nonfinite(const void *data, size_t n, xc_dtype_t dt)
{
    float buf[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        for (size_t k = 0; k < m; k++) {
            double v;
            if (dt == XC_FLOAT32) v = ((const float *)data)[i + k];
            else if (dt == XC_FLOAT64) v = ((const double *)data)[i + k];
            else {
                if (k == 0) {
                    if (dt == XC_FLOAT16) xc__fp16_to_fp32_n(buf, (const uint16_t *)data + i, m);
                    else xc__bf16_to_fp32_n(buf, (const uint16_t *)data + i, m);
                }
                v = buf[k];
            }
            if (!isfinite(v)) return 1;
        }
    }
    return 0;
}

static void scale(void *data, size_t n, xc_dtype_t dt, double f)
{
    float buf[256];
    switch (dt) {
    case XC_FLOAT32:
        for (size_t i = 0; i < n; i++) ((float *)data)[i] = (float)(((float *)data)[i] * f);
        break;
    case XC_FLOAT64:
        for (size_t i = 0; i < n; i++) ((double *)data)[i] *= f;
        break;
    default:
        for (size_t i = 0; i < n; i += 256) {
            size_t m = n - i < 256 ? n - i : 256;
            uint16_t *x = (uint16_t *)data + i;
            if (dt == XC_FLOAT16) xc__fp16_to_fp32_n(buf, x, m);
            else xc__bf16_to_fp32_n(buf, x, m);
            for (size_t k = 0; k < m; k++) buf[k] = (float)(buf[k] * f);
            if (dt == XC_FLOAT16) xc__fp32_to_fp16_n(x, buf, m);
            else xc__fp32_to_bf16_n(x, buf, m);
        }
        break;
    }
}

xc_result_t xc_clip_grad_norm(xc_comm_t *comm, const xc_grad_t *grads, int ngrads,
                              double max_norm, double *scalars, int nscalars, double *norm,
                              int *nonfinite)
{
    const char *fn = "xc_clip_grad_norm";
    if (!comm) return xc__err(XC_ERR_INVALID, "%s: comm is NULL", fn);
    if (ngrads < 0 || (ngrads && !grads) || nscalars < 0 || (nscalars && !scalars))
        return xc__err(XC_ERR_INVALID, "%s: %d gradients at %p, %d scalars at %p", fn, ngrads,
                       (const void *)grads, nscalars, (void *)scalars);
    if (!(max_norm >= 0) || isinf(max_norm))
        return xc__err(XC_ERR_INVALID, "%s: max_norm %g (>= 0, finite; 0: only measure)", fn,
                       max_norm);
    for (int i = 0; i < ngrads; i++) {
        const xc_grad_t *g = &grads[i];
        xc_dtype_t dt = g->dtype;
        if (dt != XC_FLOAT32 && dt != XC_FLOAT64 && dt != XC_FLOAT16 && dt != XC_BFLOAT16)
            return xc__err(XC_ERR_INVALID, "%s: gradient %d has dtype %s (fp32, fp64, fp16 or "
                                           "bf16)", fn, i,
                           xc_dtype_name(dt) ? xc_dtype_name(dt) : "?");
        if (g->replicas < 1)
            return xc__err(XC_ERR_INVALID, "%s: gradient %d has %d replicas (>= 1)", fn, i,
                           g->replicas);
        if (g->count && !g->data)
            return xc__err(XC_ERR_INVALID, "%s: gradient %d has %zu values at NULL", fn, i,
                           g->count);
    }
    /* [0] Σ squares / replicas, [1] non-finite ranks, [2..] the scalars */
    double small[32], *v = nscalars + 2 <= 32 ? small : malloc((size_t)(nscalars + 2) * sizeof *v);
    if (!v) return xc__err(XC_ERR_NOMEM, "%s: out of memory for %d scalars", fn, nscalars);
    double sq = 0;
    int bad = 0;
    for (int i = 0; i < ngrads; i++) {
        const xc_grad_t *g = &grads[i];
        double s = sumsq(g->data, g->count, g->dtype);
        if (!isfinite(s) && any_nonfinite(g->data, g->count, g->dtype)) bad = 1;
        sq += s / g->replicas;
    }
    v[0] = bad ? 0 : sq;
    v[1] = bad;
    if (nscalars) memcpy(v + 2, scalars, (size_t)nscalars * sizeof *v);
    xc_result_t rc = xc_allreduce(v, v, (size_t)nscalars + 2, XC_FLOAT64, XC_SUM, comm);
    if (rc == XC_OK) {
        int any_bad = v[1] > 0;
        double total = any_bad ? NAN : sqrt(v[0]);
        if (norm) *norm = total;
        if (nonfinite) *nonfinite = any_bad;
        if (nscalars) memcpy(scalars, v + 2, (size_t)nscalars * sizeof *v);
        if (!any_bad && max_norm > 0 && total > max_norm) {
            double f = max_norm / (total + 1e-6);
            for (int i = 0; i < ngrads; i++) scale(grads[i].data, grads[i].count, grads[i].dtype, f);
        }
    }
    if (v != small) free(v);
    return rc;
}
