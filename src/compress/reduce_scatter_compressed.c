/*
 * reduce_scatter_compressed.c -- the compressed reduce-scatter
 * (xc_reduce_scatter_compressed, docs/compression.md): the first hop of
 * the compressed all-reduce on its own, built on the public all-to-all.
 *
 * The input is N parts of `count` values, part j for rank j.  Each part is
 * cut into nb = ceil(count / XC_COMPRESS_BLOCK) blocks, pipelined in
 * chunks of xc__compress_chunk(nb) blocks: per chunk, rank r encodes those
 * blocks of every part (x/N for XC_AVG, plus the residual, which keeps
 * the error) into one segment per destination (segment.h), all-to-all,
 * then decodes the N segments it received -- the N contributions to its
 * own part -- and adds them in fp32 in rank order.  Each value is encoded
 * once, so its error is that of one encoding per contribution.
 */
#include "segment.h"

#include <stdlib.h>
#include <string.h>


xc_result_t xc_reduce_scatter_compressed(const void *sendbuf, void *recvbuf, size_t count,
                                         xc_dtype_t dtype, xc_op_t op, xc_compress_t fmt,
                                         xc_residual_t *residual, xc_comm_t *comm)
{
    const char *fn = "xc_reduce_scatter_compressed";
    XC_CHECK(xc__compress_check_args(fn, sendbuf, recvbuf, count, dtype, op, fmt, comm));
    int n = xc_comm_size(comm);
    size_t all = count * (size_t)n, es = xc__dtype_size(dtype);
    if (residual && xc__residual_count(residual) != all)
        return xc__err(XC_ERR_INVALID,
                       "%s: the residual was created for %zu values, not %zu (count x ranks)", fn,
                       xc__residual_count(residual), all);
    if (count && sendbuf == recvbuf)
        return xc__err(XC_ERR_INVALID, "%s: in place is not supported (sendbuf == recvbuf)", fn);
    if (fmt == XC_COMPRESS_NONE)
        return xc_reduce_scatter(sendbuf, recvbuf, count, dtype, op, comm);
    if (n == 1) {
        if (count) xc__move(recvbuf, sendbuf, count * es);
        return XC_OK;
    }
    size_t nb = (count + XC_COMPRESS_BLOCK - 1) / XC_COMPRESS_BLOCK;
    size_t cb = xc__compress_chunk(nb), nch = nb ? (nb + cb - 1) / cb : 1;
    if (nch > 1) XC_CHECK(xc__compress_agree(fn, count, fmt, dtype, op, comm));
    xc__cseg_t p = xc__cseg_make(fmt, XC__CSEG_REDUCE_SCATTER, dtype, op, count,
                                 nb < cb ? nb : cb);
    /* Two chunks' buffers alternate (out, in: n segments each); the
     * request of chunk c is waited before chunk c + 2 reuses them. */
    size_t half = 2 * (size_t)n * p.seg;
    float *x = malloc((all ? all : 1) * sizeof *x), *acc = malloc((count ? count : 1) * sizeof *acc);
    char *mem = calloc(2, half);
    if (!x || !acc || !mem) {
        free(x);
        free(acc);
        free(mem);
        return xc__err(XC_ERR_NOMEM, "%s: out of memory for %zu values", fn, all);
    }
    float *res = xc__residual_values(residual);
    float tmp[XC_COMPRESS_BLOCK];
    xc_request_t *req[2] = {NULL, NULL};
    xc_result_t rc = XC_OK;
    int mismatch_rank = -1;
    for (size_t step = 0; step < nch + 1; step++) {
        if (step < nch) { /* chunk `step`: widen (avg: / N), encode every part, send */
            char *out = mem + (step % 2) * half, *in = out + (size_t)n * p.seg;
            size_t b0 = step * cb, b1 = b0 + cb < nb ? b0 + cb : nb;
            size_t e0, e1;
            xc__cseg_elems(&p, b0, b1, &e0, &e1);
            for (int j = 0; j < n; j++) {
                float *xj = x + (size_t)j * count;
                xc__compress_widen(xj + e0, (const char *)sendbuf + ((size_t)j * count + e0) * es,
                                   e1 - e0, dtype);
                if (op == XC_AVG)
                    for (size_t i = e0; i < e1; i++) xj[i] /= (float)n;
                xc__cseg_encode(&p, xj, res ? res + (size_t)j * count : NULL, b0, b1,
                                out + (size_t)j * p.seg, tmp, 0);
            }
            xc_result_t r = xc_ialltoall(out, in, p.seg, XC_UINT8, comm, &req[step % 2]);
            if (r != XC_OK && rc == XC_OK) rc = r;
        }
        if (step >= 1) { /* chunk step-1: check, add the N contributions, deliver */
            size_t c = step - 1;
            char *in = mem + (c % 2) * half + (size_t)n * p.seg;
            xc_result_t r = req[c % 2] ? xc_request_wait(req[c % 2]) : XC_OK;
            xc_request_free(req[c % 2]);
            req[c % 2] = NULL;
            if (r != XC_OK && rc == XC_OK) rc = r;
            for (int j = 0; j < n && r == XC_OK; j++)
                if (!xc__cseg_check(&p, in + (size_t)j * p.seg, NULL) && mismatch_rank < 0)
                    mismatch_rank = j;
            if (r != XC_OK || mismatch_rank >= 0) continue;
            size_t b0 = c * cb, b1 = b0 + cb < nb ? b0 + cb : nb;
            size_t e0, e1;
            xc__cseg_elems(&p, b0, b1, &e0, &e1);
            if (e1 > e0) memset(acc + e0, 0, (e1 - e0) * sizeof *acc);
            for (int j = 0; j < n; j++) xc__cseg_decode(&p, in + (size_t)j * p.seg, b0, b1, acc, 1);
            xc__compress_narrow((char *)recvbuf + e0 * es, acc + e0, e1 - e0, dtype);
        }
    }
    rc = xc__compress_result(fn, rc, mismatch_rank, fmt, count, comm);
    free(mem);
    free(x);
    free(acc);
    return rc;
}
