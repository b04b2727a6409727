/*
 * segment.c -- segments of the compressed collectives (segment.h).
 */
#include "segment.h"

#include "../reduce/reduce.h"

#include <math.h>
#include <string.h>

#define HDR_MAGIC 0x5843u /* "XC" in the header's top 16 bits */

xc__cseg_t xc__cseg_make(xc_compress_t f, int kind, xc_dtype_t dtype, xc_op_t op, size_t count,
                         size_t maxnb)
{
    /* A reduce-scatter's segments are 8 bytes longer than an all-reduce's:
     * a rank in one against a rank in the other then differ in the first
     * all-to-all's size, which the engine reports on both (equal sizes
     * left the all-reduce waiting in its all-gather for the other's next
     * collective). */
    xc__cseg_t p = {f, kind, dtype, op, count, maxnb, xc__codec_block_bytes(f),
                    xc__compress_seg_bytes(f, maxnb) + (kind == XC__CSEG_REDUCE_SCATTER ? 8 : 0)};
    return p;
}

void xc__cseg_elems(const xc__cseg_t *p, size_t b0, size_t b1, size_t *e0, size_t *e1)
{
    *e0 = b0 * XC_COMPRESS_BLOCK;
    *e1 = b1 * XC_COMPRESS_BLOCK < p->count ? b1 * XC_COMPRESS_BLOCK : p->count;
    if (*e0 > *e1) *e0 = *e1;
}

/* Elements of block b (the last one may be short). */
static size_t block_len(const xc__cseg_t *p, size_t b)
{
    size_t first = b * XC_COMPRESS_BLOCK;
    return p->count - first < XC_COMPRESS_BLOCK ? p->count - first : XC_COMPRESS_BLOCK;
}

/* magic:16 kind:4 format:4 dtype:4 op:3 flag:1 */
static uint32_t header(const xc__cseg_t *p, uint32_t flags)
{
    return HDR_MAGIC << 16 | (uint32_t)p->kind << 12 | (uint32_t)p->f << 8 |
           ((uint32_t)p->dtype & 0xfu) << 4 | ((uint32_t)p->op & 0x7u) << 1 |
           (flags & XC__CSEG_FLAG_MISMATCH);
}

static size_t codes_at(const xc__cseg_t *p)
{
    return 8 + (xc__codec_scaled(p->f) ? p->maxnb * sizeof(float) : 0);
}

void xc__cseg_encode(const xc__cseg_t *p, const float *src, float *res, size_t b0, size_t b1,
                     char *seg, float *tmp, uint32_t flags)
{
    uint32_t h[2] = {header(p, flags), (uint32_t)p->count};
    memcpy(seg, h, sizeof h);
    float *sc = (float *)(seg + 8);
    char *codes = seg + codes_at(p);
    for (size_t b = b0; b < b1; b++) {
        size_t len = block_len(p, b), at = b * XC_COMPRESS_BLOCK;
        const float *in = src + at;
        if (res) {
            /* (a finite input whose carried error would overflow it -- a
             * value at FLT_MAX -- is sent as it is: no infinity is made) */
            for (size_t i = 0; i < len; i++) {
                float t = in[i] + res[at + i];
                tmp[i] = isinf(t) && isfinite(in[i]) ? in[i] : t;
            }
            in = tmp;
        }
        /* Scales exist in INT8/INT4 segments only (elsewhere sc is the codes). */
        xc__codec_encode(p->f, in, len, codes + (b - b0) * p->bb,
                         xc__codec_scaled(p->f) ? &sc[b - b0] : NULL, res ? res + at : NULL);
    }
}

void xc__cseg_decode(const xc__cseg_t *p, const char *seg, size_t b0, size_t b1, float *dst,
                     int add)
{
    const float *sc = (const float *)(seg + 8);
    const char *codes = seg + codes_at(p);
    for (size_t b = b0; b < b1; b++)
        xc__codec_decode(p->f, codes + (b - b0) * p->bb,
                         xc__codec_scaled(p->f) ? sc[b - b0] : 1.0f, block_len(p, b),
                         dst + b * XC_COMPRESS_BLOCK, add);
}

int xc__cseg_check(const xc__cseg_t *p, const char *seg, uint32_t *flags)
{
    uint32_t h[2];
    memcpy(h, seg, sizeof h);
    if (flags) *flags = h[0] & XC__CSEG_FLAG_MISMATCH;
    return (h[0] & ~XC__CSEG_FLAG_MISMATCH) == header(p, 0) && h[1] == (uint32_t)p->count;
}

xc_result_t xc__compress_check_args(const char *fn, const void *sendbuf, const void *recvbuf,
                                    size_t count, xc_dtype_t dtype, xc_op_t op, xc_compress_t fmt,
                                    const xc_comm_t *comm)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "%s: comm is NULL", fn);
    if (count && (!sendbuf || !recvbuf))
        return xc__err(XC_ERR_INVALID, "%s: %s is NULL", fn, !sendbuf ? "sendbuf" : "recvbuf");
    if (dtype != XC_FLOAT32 && dtype != XC_FLOAT16 && dtype != XC_BFLOAT16)
        return xc__err(XC_ERR_INVALID, "%s: dtype %s (compression takes fp32, fp16 or bf16)", fn,
                       xc_dtype_name(dtype) ? xc_dtype_name(dtype) : "?");
    if (op != XC_SUM && op != XC_AVG)
        return xc__err(XC_ERR_INVALID, "%s: op %s (compression takes sum or avg)", fn,
                       xc_op_name(op) ? xc_op_name(op) : "?");
    if ((unsigned)fmt >= XC_COMPRESS_COUNT)
        return xc__err(XC_ERR_INVALID, "%s: unknown format %d", fn, (int)fmt);
    return XC_OK;
}

xc_result_t xc__compress_agree(const char *fn, size_t count, xc_compress_t fmt, xc_dtype_t dtype,
                               xc_op_t op, xc_comm_t *comm)
{
    int64_t v[8] = {(int64_t)count, -(int64_t)count, fmt, -(int64_t)fmt, dtype, -(int64_t)dtype,
                    op, -(int64_t)op};
    int64_t w[8];
    XC_CHECK(xc_allreduce(v, w, 8, XC_INT64, XC_MAX, comm));
    static const char *const what[4] = {"count", "format", "dtype", "op"};
    for (int i = 0; i < 8; i += 2)
        if (w[i] != -w[i + 1])
            return xc__err(XC_ERR_MISMATCH,
                           "%s: ranks disagree on the %s (this rank: %lld, others between %lld "
                           "and %lld)", fn, what[i / 2],
                           (long long)v[i], (long long)-w[i + 1], (long long)w[i]);
    return XC_OK;
}

xc_result_t xc__compress_result(const char *fn, xc_result_t rc, int mismatch_rank,
                                xc_compress_t fmt, size_t count, xc_comm_t *comm)
{
    if (rc == XC_OK && mismatch_rank >= 0)
        return xc__err(XC_ERR_MISMATCH,
                       "%s: ranks disagree on the collective, format, dtype, op or count (this "
                       "rank: %s, %zu values; rank %d differs)", fn, xc_compress_name(fmt), count,
                       mismatch_rank);
    if (rc != XC_OK) return xc__err(rc, "%s: %s", fn, xc_comm_last_error(comm));
    return XC_OK;
}

void xc__compress_widen(float *dst, const void *src, size_t n, xc_dtype_t dtype)
{
    if (!n) return;
    if (dtype == XC_FLOAT32) memcpy(dst, src, n * sizeof *dst);
    else if (dtype == XC_FLOAT16) xc__fp16_to_fp32_n(dst, src, n);
    else xc__bf16_to_fp32_n(dst, src, n);
}

void xc__compress_narrow(void *dst, const float *src, size_t n, xc_dtype_t dtype)
{
    if (!n) return;
    if (dtype == XC_FLOAT32) memcpy(dst, src, n * sizeof *src);
    else if (dtype == XC_FLOAT16) xc__fp32_to_fp16_n(dst, src, n);
    else xc__fp32_to_bf16_n(dst, src, n);
}
