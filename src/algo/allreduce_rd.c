/*
 * allreduce_rd.c -- recursive-doubling all-reduce, for tiny messages where
 * the per-message latency dominates: every rank exchanges the whole vector
 * with log2 p partners and so finishes in log2 p rounds, against 2(N-1)
 * for the ring and 2 log2 N for the tree.
 *
 * N ranks are folded onto p = 2^floor(log2 N) (xc__fold): of the first
 * 2(N-p) ranks, each odd one sends its input to the even one below, which
 * reduces it and takes part; the odd ones sit out and get the result at the
 * end.  In the round of distance `mask` fold ranks f and f^mask swap their
 * partial results and both compute lower-rank-operand op higher-rank-operand,
 * so the two hold the same bits afterwards, and by induction all p do after
 * the last round; each then applies the same XC_AVG finalisation to the same
 * bits, and the ranks that sat out receive a copy.  Every rank ends with
 * identical bits.  fp16/bf16 round once per round (log2 p + 1 times).
 *
 * Rounds: log2 p, plus 2 when N is not a power of two.
 * Cost per rank (n = message bytes):
 *   log2 p · (α + nβ + nγ)   [+ 2α + 2nβ + nγ for the fold when N != p]
 * Scratch: n bytes.
 */
#include "algos.h"

xc_result_t xc__build_allreduce_rd(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc__dtype_size(a->dtype), count = a->count, bytes = count * es;
    char *buf = a->rbuf;
    const char *cur = a->sbuf; /* this rank's partial result so far */
    if (n == 1) {
        xc__sched_single(s, buf, cur, count, es);
        return XC_OK;
    }
    int p = xc__pow2_floor(n), rem = n - p, f = xc__fold(r, n);
    if (f < 0) { /* odd rank of the fold: hand the input over, wait for the result */
        xc__sched_send(s, r - 1, cur, bytes);
        xc__sched_round(s);
        xc__sched_recv(s, r - 1, buf, bytes);
        xc__sched_round(s);
        return XC_OK;
    }
    char *tmp = xc__sched_scratch(s, bytes);
    if (r < 2 * rem) { /* even rank of the fold: absorb rank r+1 (lower rank first) */
        xc__sched_recv(s, r + 1, tmp, bytes);
        xc__sched_reduce(s, buf, cur, tmp, count);
        xc__sched_round(s);
        cur = buf;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int peer = xc__unfold(f ^ mask, n);
        xc__sched_send(s, peer, cur, bytes);
        xc__sched_recv(s, peer, tmp, bytes);
        /* Runs after the send completed, so buf may be overwritten; the
         * operand order is the same on both partners. */
        if (f & mask)
            xc__sched_reduce(s, buf, tmp, cur, count);
        else
            xc__sched_reduce(s, buf, cur, tmp, count);
        xc__sched_round(s);
        cur = buf;
    }
    xc__sched_finalize(s, buf, count);
    xc__sched_round(s);
    if (r < 2 * rem) {
        xc__sched_send(s, r + 1, buf, bytes);
        xc__sched_round(s);
    }
    return XC_OK;
}
