/*
 * cost_compress.c -- the predicted time of xc_allreduce_compressed
 * (docs/compression.md; docs/cost-model.md, "Compressed all-reduce").
 *
 * What it sends: per pipeline chunk of xc__compress_chunk(nb) blocks,
 * an all-to-all and an all-gather of one padded segment per rank (header,
 * INT8 scales, codes) -- priced as the selector's choice for those
 * collectives of that many bytes would be.  What it computes, per chunk of
 * E fp32 values on every rank: the input copied (or widened) to fp32, the
 * XC_AVG division, the encode of all E with the residual, the decode-add
 * of the N contributions to its own slice (E values in all), the encode of
 * the reduced slice (E/N), the decode of every slice (E) and the copy (or
 * narrowing) out -- priced with the profile's codec and memcpy costs,
 * at memory speed once the call's working set leaves the cache.
 *
 * The chunks pipeline: while one chunk's collectives are on the wire the
 * next is encoded and the previous decoded, so the call takes about
 * max(all communication, all computation) plus one chunk of the smaller
 * (filling and draining the pipeline); with one chunk, their sum.
 */
#include "../compress/codec.h"
#include "cost.h"

/* The unscaled time of the selector's choice for a call (< 0: none). */
/* The compressed all-reduce's buffers of `bytes`, allocated and freed in
 * every call (a schedule's scratch, by contrast, comes from its
 * communicator's pool): from glibc's largest mmap threshold on (4 MiB x
 * sizeof(long) = 32 MiB on 64-bit; smaller blocks are recycled from the
 * heap once freed), every call gets a fresh mapping and pays its page
 * faults and zeroing. */
static double per_call_memory(const xc__m_t *m, double bytes)
{
    const double fresh_from = 4.0 * 1024 * 1024 * sizeof(long);
    return bytes >= fresh_from ? bytes * m->p->fault : 0;
}

static double best(const xc__profile_t *p, const xc__model_topo_t *t, xc_coll_t coll,
                   size_t count, xc_dtype_t dt, xc_op_t op)
{
    xc__model_call_t c = {coll, count, dt, op, 0};
    double v = -1;
    if (xc__model_choose(p, t, &c, &v, NULL, NULL) == XC__ALGO_NONE) return -1;
    return v;
}

/* Seconds per fp32 byte of codec pass w (0 encode, 1 decode) of format f
 * within a working set of ws bytes. */
static double codec(const xc__m_t *m, xc_compress_t f, int w, double ws)
{
    double c = m->p->codec[f][w], mem = 1.5 * m->p->copy_mem * xc__m_tier(m->p, ws);
    return xc__m_blend(m, ws, c, c > mem ? c : mem);
}

/* Computation of one chunk of E values (see the top). */
static double chunk_compute(const xc__m_t *m, xc_compress_t f, double E, int n, double ws)
{
    double B = 4 * E; /* bytes of fp32 */
    double t = 0;
    xc_dtype_t dt = m->c->dtype;
    /* in and out: a copy for fp32, a widening / narrowing otherwise */
    if (dt == XC_FLOAT32) t += 2 * xc__m_copy_ws(m, B, ws);
    else t += B * (codec(m, XC_COMPRESS_FP16, 0, ws) + codec(m, XC_COMPRESS_FP16, 1, ws));
    if (m->c->op == XC_AVG) t += xc__m_fin(m, B);
    t += B * codec(m, f, 0, ws) * (1 + 1.0 / n); /* all E, then the own slice */
    t += B * codec(m, f, 1, ws) * 2;             /* N contributions, then every slice */
    return t;
}

double xc__model_compressed(const xc__profile_t *p, const xc__model_topo_t *t0, size_t count,
                            xc_dtype_t dt, xc_op_t op, xc_compress_t f)
{
    /* Unscaled: ranks that count cores differently must decide alike. */
    xc__model_topo_t t = *t0;
    t.cores = 0;
    int n = t.nranks;
    if (f == XC_COMPRESS_NONE) return best(p, &t, XC_COLL_ALLREDUCE, count, dt, op);
    xc__model_call_t call = {XC_COLL_ALLREDUCE, count, dt, op, 0};
    xc__m_t m = xc__m_make(p, &t, &call);
    if (n == 1) return dt == XC_FLOAT32 ? xc__m_copy(&m, m.ws / 2) : 0;
    size_t nb = (count + XC_COMPRESS_BLOCK - 1) / XC_COMPRESS_BLOCK;
    size_t CB = xc__compress_chunk(nb), nch = nb ? (nb + CB - 1) / CB : 1;
    /* Working set: input, output, the fp32 vector, 3N + 1 segments a chunk. */
    size_t seg_full = xc__compress_seg_bytes(f, (CB + (size_t)n - 1) / (size_t)n);
    double ws = m.ws + 4.0 * (double)count + (double)nch * (3.0 * n + 1) * (double)seg_full;
    double comm = 0, comp = 0, first_comm = 0, first_comp = 0;
    for (size_t c = 0; c < nch; c++) {
        size_t cb = nb - c * CB;
        if (cb > CB) cb = CB;
        size_t seg = xc__compress_seg_bytes(f, (cb + (size_t)n - 1) / (size_t)n);
        double e = (double)cb * XC_COMPRESS_BLOCK;
        if (c + 1 == nch) e = (double)count - (double)c * CB * XC_COMPRESS_BLOCK;
        double a2a = best(p, &t, XC_COLL_ALLTOALL, seg, XC_UINT8, XC_SUM);
        double ag = best(p, &t, XC_COLL_ALLGATHER, seg, XC_UINT8, XC_SUM);
        if (a2a < 0 || ag < 0) return -1;
        double cc = a2a + ag, cp = chunk_compute(&m, f, e > 0 ? e : 0, n, ws);
        if (c == 0) first_comm = cc, first_comp = cp;
        comm += cc;
        comp += cp;
    }
    double T = (comm > comp ? comm : comp) + (first_comm < first_comp ? first_comm : first_comp);
    if (nch > 1) { /* ranks agree on count, format and dtype first */
        double a = best(p, &t, XC_COLL_ALLREDUCE, 6, XC_INT64, XC_MAX);
        if (a < 0) return -1;
        T += a;
    }
    return T + per_call_memory(&m, (double)nch * (3.0 * n + 1) * (double)seg_full + 4.0 * (double)count);
}
