/*
 * allreduce_compressed.c -- the two-hop compressed all-reduce
 * (xc_allreduce_compressed, docs/compression.md), built on the public
 * all-to-all and all-gather.
 *
 * Layout.  The vector is cut into nb = ceil(count / XC_COMPRESS_BLOCK)
 * blocks, pipelined in chunks of xc__compress_chunk(nb) blocks; slice k of a
 * chunk (owned by rank k) is its blocks [k·nb/N, (k+1)·nb/N).  A slice
 * travels as one segment (segment.h), every segment padded to the largest
 * slice so that the collectives move equal blocks.  A rank that finds a
 * foreign header in the all-to-all still takes part in the all-gather,
 * flagging its segment, so that everyone learns of it.
 *
 * Steps on rank r: e = x/N (AVG) or x, plus the sender residual; encode e
 * into N segments (the residual keeps e − decode); all-to-all; decode the
 * N contributions to slice r and add them in fp32 in rank order; add the
 * reducer residual, encode the sum (the residual keeps the error); all-
 * gather; decode every slice into recvbuf.  Each element is summed by one
 * rank and encoded once after, so all ranks decode identical bytes.
 */
#include "segment.h"

#include <stdlib.h>
#include <string.h>

/* One chunk: blocks [b0, b0 + nb) of the vector, its buffers, requests. */
typedef struct chunk {
    xc__cseg_t p;
    size_t b0, nb;
    int n;
    char *out, *in, *mine, *gath; /* n·seg, n·seg, seg, n·seg */
    xc_request_t *ra, *rg;
    int bad; /* first rank whose header differed in the all-to-all, -1 */
} chunk_t;

/* First block (global index) of slice k of the chunk. */
static size_t slice_first(const chunk_t *k, int j)
{
    return k->b0 + (size_t)j * k->nb / (size_t)k->n;
}

static void chunk_init(chunk_t *k, xc_compress_t f, xc_dtype_t dtype, xc_op_t op, size_t count,
                       int n, size_t c)
{
    size_t nb_all = (count + XC_COMPRESS_BLOCK - 1) / XC_COMPRESS_BLOCK;
    size_t cb = xc__compress_chunk(nb_all);
    k->b0 = c * cb;
    k->nb = nb_all - k->b0 < cb ? nb_all - k->b0 : cb;
    k->n = n;
    k->p = xc__cseg_make(f, XC__CSEG_ALLREDUCE, dtype, op, count,
                         (k->nb + (size_t)n - 1) / (size_t)n);
    k->bad = -1;
}

xc_result_t xc_allreduce_compressed(const void *sendbuf, void *recvbuf, size_t count,
                                    xc_dtype_t dtype, xc_op_t op, xc_compress_t fmt,
                                    xc_residual_t *residual, xc_comm_t *comm)
{
    const char *fn = "xc_allreduce_compressed";
    XC_CHECK(xc__compress_check_args(fn, sendbuf, recvbuf, count, dtype, op, fmt, comm));
    if (residual && xc__residual_count(residual) != count)
        return xc__err(XC_ERR_INVALID, "%s: the residual was created for %zu values, not %zu", fn,
                       xc__residual_count(residual), count);
    if (fmt == XC_COMPRESS_NONE) return xc_allreduce(sendbuf, recvbuf, count, dtype, op, comm);
    int n = xc_comm_size(comm), me = xc_comm_rank(comm);
    if (n == 1) { /* nothing to send: the exact input (x/1 for XC_AVG) */
        if (count && recvbuf != sendbuf) xc__move(recvbuf, sendbuf, count * xc__dtype_size(dtype));
        return XC_OK;
    }
    size_t nb = (count + XC_COMPRESS_BLOCK - 1) / XC_COMPRESS_BLOCK;
    size_t cb = xc__compress_chunk(nb), nch = nb ? (nb + cb - 1) / cb : 1;
    if (nch > 1) XC_CHECK(xc__compress_agree(fn, count, fmt, dtype, op, comm));
    /* Every buffer up front: once the pipeline runs, only the
     * communicator can fail (and then every request fails at once). */
    chunk_t *ch = calloc(nch, sizeof *ch);
    float *x = malloc((count ? count : 1) * sizeof *x);
    size_t total = 0;
    for (size_t c = 0; ch && c < nch; c++) {
        chunk_init(&ch[c], fmt, dtype, op, count, n, c);
        total += (3 * (size_t)n + 1) * ch[c].p.seg;
    }
    char *mem = ch && x ? calloc(1, total) : NULL;
    if (!mem) {
        free(ch);
        free(x);
        return xc__err(XC_ERR_NOMEM, "%s: out of memory for %zu values", fn, count);
    }
    char *at = mem;
    for (size_t c = 0; c < nch; c++) {
        size_t seg = ch[c].p.seg;
        ch[c].out = at, at += (size_t)n * seg;
        ch[c].in = at, at += (size_t)n * seg;
        ch[c].gath = at, at += (size_t)n * seg;
        ch[c].mine = at, at += seg;
    }
    float *rv = xc__residual_values(residual);
    float *r1 = rv, *r2 = rv ? rv + count : NULL;
    float tmp[XC_COMPRESS_BLOCK];
    xc_result_t rc = XC_OK;
    int mismatch_rank = -1;
    for (size_t step = 0; step < nch + 2; step++) {
        if (step < nch) { /* chunk `step`: to fp32 (avg: / N), encode, send */
            chunk_t *k = &ch[step];
            size_t e0, e1;
            xc__cseg_elems(&k->p, k->b0, k->b0 + k->nb, &e0, &e1);
            xc__compress_widen(x + e0, (const char *)sendbuf + e0 * xc__dtype_size(dtype), e1 - e0,
                               dtype);
            if (op == XC_AVG)
                for (size_t i = e0; i < e1; i++) x[i] /= (float)n;
            for (int j = 0; j < n; j++)
                xc__cseg_encode(&k->p, x, r1, slice_first(k, j), slice_first(k, j + 1),
                                k->out + (size_t)j * k->p.seg, tmp, 0);
            xc_result_t r = xc_ialltoall(k->out, k->in, k->p.seg, XC_UINT8, comm, &k->ra);
            if (r != XC_OK && rc == XC_OK) rc = r;
        }
        if (step >= 1 && step - 1 < nch) { /* chunk step-1: reduce slice `me`, re-encode, gather */
            chunk_t *k = &ch[step - 1];
            xc_result_t r = k->ra ? xc_request_wait(k->ra) : XC_OK;
            if (r != XC_OK && rc == XC_OK) rc = r;
            size_t b0 = slice_first(k, me), b1 = slice_first(k, me + 1), e0, e1;
            for (int j = 0; j < n && r == XC_OK; j++)
                if (!xc__cseg_check(&k->p, k->in + (size_t)j * k->p.seg, NULL) && k->bad < 0)
                    k->bad = j;
            xc__cseg_elems(&k->p, b0, b1, &e0, &e1);
            if (e1 > e0) memset(x + e0, 0, (e1 - e0) * sizeof *x);
            if (r == XC_OK && k->bad < 0)
                for (int j = 0; j < n; j++)
                    xc__cseg_decode(&k->p, k->in + (size_t)j * k->p.seg, b0, b1, x, 1);
            xc__cseg_encode(&k->p, x, r2, b0, b1, k->mine, tmp,
                            k->bad >= 0 ? XC__CSEG_FLAG_MISMATCH : 0);
            r = xc_iallgather(k->mine, k->gath, k->p.seg, XC_UINT8, comm, &k->rg);
            if (r != XC_OK && rc == XC_OK) rc = r;
        }
        if (step >= 2) { /* chunk step-2: check, decode every slice, deliver */
            chunk_t *k = &ch[step - 2];
            xc_result_t r = k->rg ? xc_request_wait(k->rg) : XC_OK;
            if (r != XC_OK && rc == XC_OK) rc = r;
            for (int j = 0; j < n && r == XC_OK; j++) {
                uint32_t flags;
                int ok = xc__cseg_check(&k->p, k->gath + (size_t)j * k->p.seg, &flags);
                if ((!ok || (flags & XC__CSEG_FLAG_MISMATCH)) && mismatch_rank < 0)
                    mismatch_rank = k->bad >= 0 ? k->bad : j;
            }
            if (r != XC_OK || mismatch_rank >= 0) continue;
            for (int j = 0; j < n; j++)
                xc__cseg_decode(&k->p, k->gath + (size_t)j * k->p.seg, slice_first(k, j),
                                slice_first(k, j + 1), x, 0);
            size_t e0, e1;
            xc__cseg_elems(&k->p, k->b0, k->b0 + k->nb, &e0, &e1);
            xc__compress_narrow((char *)recvbuf + e0 * xc__dtype_size(dtype), x + e0, e1 - e0,
                                dtype);
        }
    }
    for (size_t c = 0; c < nch; c++) {
        xc_request_free(ch[c].ra);
        xc_request_free(ch[c].rg);
    }
    rc = xc__compress_result(fn, rc, mismatch_rank, fmt, count, comm);
    free(mem);
    free(ch);
    free(x);
    return rc;
}
