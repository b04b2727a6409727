/*
 * bcast_chain.c -- pipelined chain broadcast: root -> root+1 -> ... ->
 * root+N-1, the message cut into k segments (xc__chain_seg, below).  Each
 * rank forwards segment i-1 in the same round as it receives segment i,
 * so after the pipeline fills every link is busy at once and the time
 * approaches n·β, independent of N; for large messages on a linear or
 * ring-like network.
 *
 * Rounds per rank: the root posts every segment in one round (the
 * connection sends them in order); a middle rank runs nseg+1 rounds, round
 * i = {receive segment i, send segment i-1}; the last rank posts every
 * receive in one round (frames from one peer match in order).  A zero-byte
 * exchange of the operation's description rides in the first round: the
 * root receives nothing else, so it would not otherwise notice a rank that
 * disagrees on the root or the count.  A zero count still passes one empty
 * segment down the chain.
 *
 * Cost (n = message bytes, S = segment bytes, k = ceil(n/S)):
 *   (N-2+k)·(α + Sβ)  ≈  (N-2+n/S)·α + (n + (N-2)·S)·β
 */
#include "algos.h"

#define XC__CHAIN_MIN_SEG ((size_t)16 << 10) /* bytes per segment, at least */

/* The cost above is least at k* = sqrt((N-2)·n·β/α) (xc__pipe_segments):
 * one segment on two ranks (nothing to pipeline: the root's message goes
 * to the only peer), more as the chain grows.  The fixed 64 KiB segments
 * this replaces made a 2-rank chain over loopback TCP 2-2.7x slower than
 * one message at 2-32 MiB (bench/RESULTS.md). */
size_t xc__chain_seg(size_t count, size_t es, int n)
{
    size_t bytes = count * es;
    size_t k = n > 2 ? xc__pipe_segments(bytes, (size_t)(n - 2), bytes / XC__CHAIN_MIN_SEG) : 1;
    size_t seg = (count + k - 1) / k;
    return seg ? seg : 1;
}

xc_result_t xc__build_bcast_chain(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank, root = a->root;
    if (n == 1) return XC_OK;
    size_t es = xc__dtype_size(a->dtype), count = a->count;
    char *buf = a->rbuf;
    size_t seg = xc__chain_seg(count, es, n); /* elements */
    size_t nseg = count ? (count + seg - 1) / seg : 1;
    int v = xc__rel(r, root, n);
    int prev = xc__abs(v - 1 + n, root, n), next = xc__abs(v + 1, root, n);
    int has_next = v + 1 < n;
#define SEG_PTR(i) (buf + (i) * seg * es)
#define SEG_BYTES(i) (((i) * seg + seg <= count ? seg : count - (i) * seg) * es)
    xc__sched_desc_check(s, r, n);
    if (v == 0 || !has_next) {
        for (size_t i = 0; i < nseg; i++) {
            if (v == 0)
                xc__sched_send(s, next, SEG_PTR(i), SEG_BYTES(i));
            else
                xc__sched_recv(s, prev, SEG_PTR(i), SEG_BYTES(i));
        }
        xc__sched_round(s);
    } else {
        for (size_t i = 0; i <= nseg; i++) {
            if (i < nseg) xc__sched_recv(s, prev, SEG_PTR(i), SEG_BYTES(i));
            if (i > 0) xc__sched_send(s, next, SEG_PTR(i - 1), SEG_BYTES(i - 1));
            xc__sched_round(s);
        }
    }
#undef SEG_PTR
#undef SEG_BYTES
    return XC_OK;
}
