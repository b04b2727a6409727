/*
 * det.c -- deterministic reductions (XCOLL_DETERMINISTIC=1): every element
 * of the result is
 *
 *     ((x_0 op x_1) op x_2) ... op x_{N-1}
 *
 * over the ranks' inputs in rank order, accumulated as xc__reduce_many does
 * (the dtype's compute precision, fp32 for fp16/bf16 with one rounding per
 * 64 inputs), then finalised (XC_AVG).  That is exactly what the shared-
 * memory collectives compute on one node, so with deterministic mode on, a
 * result does not depend on the algorithm, the chunking, the message size,
 * the placement of ranks on nodes or how tensors were fused.
 *
 * The algorithms here give the same on any transport: the data is cut into
 * N blocks (xc__block); every rank sends block j to rank j, which reduces
 * the N contributions in rank order with one k-way pass; the finished
 * blocks then go where the collective needs them (everybody: all-reduce;
 * nobody: reduce-scatter; the root: reduce).  Cost per rank, M bytes:
 * 2 rounds of N-1 concurrent messages, 2(N-1)/N·M sent and received
 * (all-reduce), (N-1)/N·M reduced -- the bandwidth of the ring with the
 * latency of a direct exchange.
 */
#include "algos.h"

/* Round 1: block j of `in` (cut by `cut`) goes to rank j; this rank's block
 * `me` is reduced from all contributions into `dst`.  `tmp` holds N-1
 * blocks of `bmax` elements plus N source pointers. */
typedef void (*cut_fn)(size_t count, int n, int j, size_t *off, size_t *cnt);

static void cut_even(size_t count, int n, int j, size_t *off, size_t *cnt)
{
    xc__block(count, n, j, off, cnt);
}

/* Reduce-scatter layout: block j is count elements at j*count. */
static void cut_rs(size_t count, int n, int j, size_t *off, size_t *cnt)
{
    (void)n;
    *off = (size_t)j * count;
    *cnt = count;
}

/* Returns where this rank's reduced block went: `dst`, or (dst NULL) an
 * area of the schedule's scratch after the received blocks. */
static char *gather_reduce(xc__sched_t *s, int n, int me, const char *in, char *dst,
                           size_t count, size_t es, cut_fn cut, size_t bmax)
{
    size_t pbytes = ((size_t)n * sizeof(void *) + 63) & ~(size_t)63;
    size_t nblk = (size_t)(n - 1) + (dst ? 0 : 1);
    char *tmp = xc__sched_scratch(s, pbytes + nblk * bmax * es);
    if (!tmp) return NULL; /* reported as out of memory at submission */
    const void **srcs = (const void **)(void *)tmp;
    char *blocks = tmp + pbytes;
    if (!dst) dst = blocks + (size_t)(n - 1) * bmax * es;
    size_t mo, mc;
    cut(count, n, me, &mo, &mc);
    for (int k = 1; k < n; k++) {
        int to = (me + k) % n, from = xc__mod(me - k, n);
        size_t o, c;
        cut(count, n, to, &o, &c);
        xc__sched_send(s, to, in + o * es, c * es);
        char *slot = blocks + (size_t)(from < me ? from : from - 1) * bmax * es;
        xc__sched_recv(s, from, slot, mc * es);
    }
    for (int j = 0; j < n; j++)
        srcs[j] = j == me ? in + mo * es : blocks + (size_t)(j < me ? j : j - 1) * bmax * es;
    xc__sched_reduce_n(s, dst, srcs, n, mc);
    xc__sched_finalize(s, dst, mc);
    xc__sched_round(s);
    return dst;
}

xc_result_t xc__build_allreduce_det(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, me = comm->rank;
    size_t es = xc__dtype_size(a->dtype), mo, mc;
    char *out = a->rbuf;
    xc__block(a->count, n, me, &mo, &mc);
    gather_reduce(s, n, me, a->sbuf, out + mo * es, a->count, es, cut_even,
                  a->count / (size_t)n + 1);
    /* Round 2: every finished block to everybody. */
    for (int k = 1; k < n; k++) {
        int to = (me + k) % n, from = xc__mod(me - k, n);
        size_t o, c;
        xc__block(a->count, n, from, &o, &c);
        xc__sched_send(s, to, out + mo * es, mc * es);
        xc__sched_recv(s, from, out + o * es, c * es);
    }
    xc__sched_round(s);
    return XC_OK;
}

xc_result_t xc__build_reduce_scatter_det(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc__dtype_size(a->dtype);
    gather_reduce(&op->sched, comm->size, comm->rank, a->sbuf, a->rbuf, a->count, es, cut_rs,
                  a->count);
    return XC_OK;
}

/* Every rank takes part in round 1 (so a rank that disagrees about the root
 * or the count is noticed by a block's owner), then the owners send their
 * finished blocks to the root. */
xc_result_t xc__build_reduce_det(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, me = comm->rank, root = a->root;
    size_t es = xc__dtype_size(a->dtype), mo, mc;
    xc__block(a->count, n, me, &mo, &mc);
    char *out = me == root ? (char *)a->rbuf + mo * es : NULL;
    char *mine = gather_reduce(s, n, me, a->sbuf, out, a->count, es, cut_even,
                               a->count / (size_t)n + 1);
    if (!mine) return XC_OK;
    if (me != root) {
        xc__sched_send(s, root, mine, mc * es);
    } else {
        for (int k = 1; k < n; k++) {
            int from = xc__mod(me - k, n);
            size_t o, c;
            xc__block(a->count, n, from, &o, &c);
            xc__sched_recv(s, from, (char *)a->rbuf + o * es, c * es);
        }
    }
    xc__sched_round(s);
    return XC_OK;
}
