/*
 * allreduce_compressed.c -- the two-hop compressed all-reduce
 * (xc_allreduce_compressed, docs/compression.md), built on the public
 * all-to-all and all-gather, and the error-feedback state.
 *
 * Layout.  The vector is cut into nb = ceil(count / XC_COMPRESS_BLOCK)
 * blocks; slice k (owned by rank k) is blocks [k·nb/N, (k+1)·nb/N).  A
 * slice travels as one segment: an 8-byte header (format, flags, the low
 * 32 bits of count), the blocks' scales (INT8 only) and their codes, every
 * segment padded to the largest slice so that the collectives move equal
 * blocks.  The header makes ranks that disagree on the format or count
 * fail with XC_ERR_MISMATCH on every rank: a rank that finds a foreign
 * header in the all-to-all still takes part in the all-gather, flagging
 * its segment, so that everyone learns of it.
 *
 * Steps on rank r: e = x/N (AVG) or x, plus the sender residual; encode e
 * into N segments (the residual keeps e − decode); all-to-all; decode the
 * N contributions to slice r and add them in fp32 in rank order; add the
 * reducer residual, encode the sum (the residual keeps the error); all-
 * gather; decode every slice into recvbuf.  Each element is summed by one
 * rank and encoded once after, so all ranks decode identical bytes.
 */
#include "codec.h"

#include "../reduce/reduce.h"

#include <stdlib.h>
#include <string.h>

#define HDR_MAGIC 0x5843u /* "XC" in the header's top 16 bits */
#define FLAG_MISMATCH 1u

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

static const char *const k_names[XC_COMPRESS_COUNT] = {"none", "fp16", "bf16", "int8"};

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
    return xc__err(XC_ERR_INVALID, "unknown compression '%s' (none, fp16, bf16 or int8)", s);
}

/* Geometry of one chunk of a call: blocks [b0, b0 + nb) of the vector. */
typedef struct plan {
    xc_compress_t f;
    size_t count, b0, nb, maxnb, es, seg; /* seg: bytes of one padded segment */
    int n;
} plan_t;

/* First block (global index) of slice k of the chunk. */
static size_t slice_first(const plan_t *p, int k)
{
    return p->b0 + (size_t)k * p->nb / (size_t)p->n;
}

#define CHUNK_BLOCKS XC__COMPRESS_CHUNK_BLOCKS

static plan_t chunk_plan(xc_compress_t f, size_t count, int n, size_t c)
{
    size_t nb_all = (count + XC_COMPRESS_BLOCK - 1) / XC_COMPRESS_BLOCK;
    plan_t p = {f, count, c * CHUNK_BLOCKS, 0, 0, xc__codec_esize(f), 0, n};
    p.nb = nb_all - p.b0 < CHUNK_BLOCKS ? nb_all - p.b0 : CHUNK_BLOCKS;
    p.maxnb = (p.nb + (size_t)n - 1) / (size_t)n;
    p.seg = xc__compress_seg_bytes(f, p.maxnb);
    return p;
}

/* Elements of block b (the last one may be short). */
static size_t block_len(const plan_t *p, size_t b)
{
    size_t first = b * XC_COMPRESS_BLOCK;
    return p->count - first < XC_COMPRESS_BLOCK ? p->count - first : XC_COMPRESS_BLOCK;
}

static uint32_t header(const plan_t *p, uint32_t flags)
{
    return HDR_MAGIC << 16 | (uint32_t)p->f << 8 | flags;
}

static float *seg_scales(const plan_t *p, char *seg) { (void)p; return (float *)(seg + 8); }
static char *seg_codes(const plan_t *p, char *seg)
{
    return seg + 8 + (p->f == XC_COMPRESS_INT8 ? p->maxnb * sizeof(float) : 0);
}

/* Encode blocks [b0, b1) of `src` (global element order) into segment
 * `seg`; with `res` (global order) add it first and keep the new error. */
static void encode_slice(const plan_t *p, const float *src, float *res, size_t b0, size_t b1,
                         char *seg, float *tmp)
{
    uint32_t h[2] = {header(p, 0), (uint32_t)p->count};
    memcpy(seg, h, sizeof h);
    float *sc = seg_scales(p, seg);
    char *codes = seg_codes(p, seg);
    for (size_t b = b0; b < b1; b++) {
        size_t len = block_len(p, b), at = b * XC_COMPRESS_BLOCK;
        const float *in = src + at;
        if (res) {
            for (size_t i = 0; i < len; i++) tmp[i] = in[i] + res[at + i];
            in = tmp;
        }
        /* Scales exist in INT8 segments only (elsewhere sc is the codes). */
        xc__codec_encode(p->f, in, len, codes + (b - b0) * XC_COMPRESS_BLOCK * p->es,
                         p->f == XC_COMPRESS_INT8 ? &sc[b - b0] : NULL, res ? res + at : NULL);
    }
}

/* Decode segment `seg` holding blocks [b0, b1) into dst (global order). */
static void decode_slice(const plan_t *p, char *seg, size_t b0, size_t b1, float *dst, int add)
{
    float *sc = seg_scales(p, seg);
    char *codes = seg_codes(p, seg);
    for (size_t b = b0; b < b1; b++)
        xc__codec_decode(p->f, codes + (b - b0) * XC_COMPRESS_BLOCK * p->es,
                         p->f == XC_COMPRESS_INT8 ? sc[b - b0] : 1.0f, block_len(p, b),
                         dst + b * XC_COMPRESS_BLOCK, add);
}

static int header_ok(const plan_t *p, const char *seg)
{
    uint32_t h[2];
    memcpy(h, seg, sizeof h);
    return (h[0] & ~0xffu) == (header(p, 0) & ~0xffu) && h[1] == (uint32_t)p->count;
}

static xc_result_t check_args(const void *sendbuf, void *recvbuf, size_t count, xc_dtype_t dtype,
                              xc_op_t op, xc_compress_t fmt, const xc_residual_t *res,
                              const xc_comm_t *comm)
{
    const char *fn = "xc_allreduce_compressed";
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
    if (res && res->count != count)
        return xc__err(XC_ERR_INVALID, "%s: the residual was created for %zu values, not %zu", fn,
                       res->count, count);
    return XC_OK;
}

/* Element range of blocks [b0, b1). */
static void elems(const plan_t *p, size_t b0, size_t b1, size_t *e0, size_t *e1)
{
    *e0 = b0 * XC_COMPRESS_BLOCK;
    *e1 = b1 * XC_COMPRESS_BLOCK < p->count ? b1 * XC_COMPRESS_BLOCK : p->count;
}

/* One chunk's buffers and requests. */
typedef struct chunk {
    plan_t p;
    char *out, *in, *mine, *gath; /* n·seg, n·seg, seg, n·seg */
    xc_request_t *ra, *rg;
    int bad; /* first rank whose header differed in the all-to-all, -1 */
} chunk_t;

/* Ranks agree on count, format and dtype before a pipeline of several
 * chunks: a rank with another count would issue another number of
 * collectives, and the surplus could only end at the deadline. */
static xc_result_t agree(size_t count, xc_compress_t fmt, xc_dtype_t dtype, xc_comm_t *comm)
{
    int64_t v[6] = {(int64_t)count, -(int64_t)count, fmt, -(int64_t)fmt, dtype, -(int64_t)dtype};
    int64_t w[6];
    XC_CHECK(xc_allreduce(v, w, 6, XC_INT64, XC_MAX, comm));
    for (int i = 0; i < 6; i += 2)
        if (w[i] != -w[i + 1])
            return xc__err(XC_ERR_MISMATCH,
                           "xc_allreduce_compressed: ranks disagree on the %s (this rank: %lld, "
                           "others between %lld and %lld)", i == 0 ? "count" : i == 2 ? "format" : "dtype",
                           (long long)v[i], (long long)-w[i + 1], (long long)w[i]);
    return XC_OK;
}

xc_result_t xc_allreduce_compressed(const void *sendbuf, void *recvbuf, size_t count,
                                    xc_dtype_t dtype, xc_op_t op, xc_compress_t fmt,
                                    xc_residual_t *residual, xc_comm_t *comm)
{
    XC_CHECK(check_args(sendbuf, recvbuf, count, dtype, op, fmt, residual, comm));
    if (fmt == XC_COMPRESS_NONE) return xc_allreduce(sendbuf, recvbuf, count, dtype, op, comm);
    int n = xc_comm_size(comm), me = xc_comm_rank(comm);
    if (n == 1) { /* nothing to send: the exact input (x/1 for XC_AVG) */
        if (count && recvbuf != sendbuf) memmove(recvbuf, sendbuf, count * xc_dtype_size(dtype));
        return XC_OK;
    }
    size_t nb = (count + XC_COMPRESS_BLOCK - 1) / XC_COMPRESS_BLOCK;
    size_t nch = nb ? (nb + CHUNK_BLOCKS - 1) / CHUNK_BLOCKS : 1;
    if (nch > 1) XC_CHECK(agree(count, fmt, dtype, comm));
    /* Every buffer up front: once the pipeline runs, only the
     * communicator can fail (and then every request fails at once). */
    chunk_t *ch = calloc(nch, sizeof *ch);
    float *x = malloc((count ? count : 1) * sizeof *x);
    size_t total = 0;
    for (size_t c = 0; ch && c < nch; c++) {
        ch[c].p = chunk_plan(fmt, count, n, c);
        ch[c].bad = -1;
        total += (3 * (size_t)n + 1) * ch[c].p.seg;
    }
    char *mem = ch && x ? calloc(1, total) : NULL;
    if (!mem) {
        free(ch);
        free(x);
        return xc__err(XC_ERR_NOMEM, "xc_allreduce_compressed: out of memory for %zu values", count);
    }
    char *at = mem;
    for (size_t c = 0; c < nch; c++) {
        size_t seg = ch[c].p.seg;
        ch[c].out = at, at += (size_t)n * seg;
        ch[c].in = at, at += (size_t)n * seg;
        ch[c].gath = at, at += (size_t)n * seg;
        ch[c].mine = at, at += seg;
    }
    float *r1 = residual ? residual->v : NULL, *r2 = residual ? residual->v + count : NULL;
    float tmp[XC_COMPRESS_BLOCK];
    xc_result_t rc = XC_OK;
    int mismatch_rank = -1;
    for (size_t step = 0; step < nch + 2; step++) {
        if (step < nch) { /* chunk `step`: to fp32 (avg: / N), encode, send */
            chunk_t *k = &ch[step];
            size_t e0, e1;
            elems(&k->p, k->p.b0, k->p.b0 + k->p.nb, &e0, &e1);
            if (dtype == XC_FLOAT32) memcpy(x + e0, (const float *)sendbuf + e0, (e1 - e0) * sizeof *x);
            else if (dtype == XC_FLOAT16) xc__fp16_to_fp32_n(x + e0, (const uint16_t *)sendbuf + e0, e1 - e0);
            else xc__bf16_to_fp32_n(x + e0, (const uint16_t *)sendbuf + e0, e1 - e0);
            if (op == XC_AVG)
                for (size_t i = e0; i < e1; i++) x[i] /= (float)n;
            for (int j = 0; j < n; j++)
                encode_slice(&k->p, x, r1, slice_first(&k->p, j), slice_first(&k->p, j + 1),
                             k->out + (size_t)j * k->p.seg, tmp);
            xc_result_t r = xc_ialltoall(k->out, k->in, k->p.seg, XC_UINT8, comm, &k->ra);
            if (r != XC_OK && rc == XC_OK) rc = r;
        }
        if (step >= 1 && step - 1 < nch) { /* chunk step-1: reduce slice `me`, re-encode, gather */
            chunk_t *k = &ch[step - 1];
            xc_result_t r = k->ra ? xc_request_wait(k->ra) : XC_OK;
            if (r != XC_OK && rc == XC_OK) rc = r;
            size_t b0 = slice_first(&k->p, me), b1 = slice_first(&k->p, me + 1), e0, e1;
            for (int j = 0; j < n && r == XC_OK; j++)
                if (!header_ok(&k->p, k->in + (size_t)j * k->p.seg) && k->bad < 0) k->bad = j;
            elems(&k->p, b0, b1, &e0, &e1);
            if (b1 > b0) memset(x + e0, 0, (e1 - e0) * sizeof *x);
            if (r == XC_OK && k->bad < 0)
                for (int j = 0; j < n; j++) decode_slice(&k->p, k->in + (size_t)j * k->p.seg, b0, b1, x, 1);
            encode_slice(&k->p, x, r2, b0, b1, k->mine, tmp);
            if (k->bad >= 0) {
                uint32_t h0 = header(&k->p, FLAG_MISMATCH);
                memcpy(k->mine, &h0, sizeof h0);
            }
            r = xc_iallgather(k->mine, k->gath, k->p.seg, XC_UINT8, comm, &k->rg);
            if (r != XC_OK && rc == XC_OK) rc = r;
        }
        if (step >= 2) { /* chunk step-2: check, decode every slice, deliver */
            chunk_t *k = &ch[step - 2];
            xc_result_t r = k->rg ? xc_request_wait(k->rg) : XC_OK;
            if (r != XC_OK && rc == XC_OK) rc = r;
            for (int j = 0; j < n && r == XC_OK; j++) {
                const char *seg = k->gath + (size_t)j * k->p.seg;
                uint32_t h0;
                memcpy(&h0, seg, sizeof h0);
                if ((!header_ok(&k->p, seg) || (h0 & FLAG_MISMATCH)) && mismatch_rank < 0)
                    mismatch_rank = k->bad >= 0 ? k->bad : j;
            }
            if (r != XC_OK || mismatch_rank >= 0) continue;
            for (int j = 0; j < n; j++)
                decode_slice(&k->p, k->gath + (size_t)j * k->p.seg, slice_first(&k->p, j),
                             slice_first(&k->p, j + 1), x, 0);
            size_t e0, e1;
            elems(&k->p, k->p.b0, k->p.b0 + k->p.nb, &e0, &e1);
            if (dtype == XC_FLOAT32) memcpy((float *)recvbuf + e0, x + e0, (e1 - e0) * sizeof *x);
            else if (dtype == XC_FLOAT16) xc__fp32_to_fp16_n((uint16_t *)recvbuf + e0, x + e0, e1 - e0);
            else xc__fp32_to_bf16_n((uint16_t *)recvbuf + e0, x + e0, e1 - e0);
        }
    }
    for (size_t c = 0; c < nch; c++) {
        xc_request_free(ch[c].ra);
        xc_request_free(ch[c].rg);
    }
    if (rc == XC_OK && mismatch_rank >= 0)
        rc = xc__err(XC_ERR_MISMATCH,
                     "xc_allreduce_compressed: ranks disagree on the format or count (this rank: "
                     "%s, %zu values; rank %d differs)", xc_compress_name(fmt), count, mismatch_rank);
    else if (rc != XC_OK)
        rc = xc__err(rc, "xc_allreduce_compressed: %s", xc_comm_last_error(comm));
    free(mem);
    free(ch);
    free(x);
    return rc;
}
