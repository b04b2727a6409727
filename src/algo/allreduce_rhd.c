/*
 * allreduce_rhd.c -- Rabenseifner's all-reduce: a reduce-scatter by
 * recursive halving followed by an all-gather by recursive doubling, for
 * large messages on many ranks (bandwidth like the ring, 2 log2 p rounds
 * instead of 2(N-1)).
 *
 * N ranks are folded onto p = 2^floor(log2 N) (xc__fold): of the first
 * 2(N-p) ranks each odd one sends its input to the even one below, which
 * reduces it (lower rank's data first) and takes part; the odd ones sit out
 * and receive the result at the end.  The vector is cut into p blocks
 * (xc__block); fold rank f owns block f.  Reduce-scatter: with mask = p/2,
 * p/4, ..., 1, rank f keeps the half of its current block window on f's
 * side of bit `mask`, sends the other half to fold rank f^mask and adds the
 * half it receives into its own; the first round reads the input directly,
 * later ones the receive buffer.  After log2 p rounds f holds block f fully
 * reduced and finalises it (XC_AVG).  All-gather: with mask = 1, 2, ...,
 * p/2 ranks f and f^mask swap the aligned groups of `mask` finished blocks
 * they hold.  Each block is reduced by one rank and only copied elsewhere,
 * so every rank ends with identical bits.
 *
 * Rounds: 2 log2 p, plus 2 when N is not a power of two.
 * Cost per rank (n = message bytes):
 *   2 log2 p·α + 2(p-1)/p·nβ + (p-1)/p·nγ
 *   [+ 2α + 2nβ + nγ for the fold when N != p]
 * Scratch: n bytes on the ranks that absorb a fold partner, about n/2
 * elsewhere.
 */
#include "algos.h"

xc_result_t xc__build_allreduce_rhd(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc__dtype_size(a->dtype), count = a->count, bytes = count * es;
    char *buf = a->rbuf;
    const char *cur = a->sbuf; /* holds this rank's partial sums of its window */
    if (n == 1) {
        xc__sched_single(s, buf, cur, count, es);
        return XC_OK;
    }
    int p = xc__pow2_floor(n), rem = n - p, f = xc__fold(r, n);
    if (f < 0) {
        xc__sched_send(s, r - 1, cur, bytes);
        xc__sched_round(s);
        xc__sched_recv(s, r - 1, buf, bytes);
        xc__sched_round(s);
        return XC_OK;
    }
    /* The largest receive: the fold's whole vector, or the lower half of
     * the blocks (blocks are non-increasing in size). */
    size_t tcount = r < 2 * rem ? count : xc__block_off(count, p, p / 2);
    char *tmp = xc__sched_scratch(s, tcount * es);
    if (r < 2 * rem) {
        xc__sched_recv(s, r + 1, tmp, bytes);
        xc__sched_reduce(s, buf, cur, tmp, count);
        xc__sched_round(s);
        cur = buf;
    }
    /* Reduce-scatter by recursive halving over the block window [lo, hi). */
    int lo = 0, hi = p;
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
        int peer = xc__unfold(f ^ mask, n), mid = lo + mask;
        int upper = (f & mask) != 0;
        int klo = upper ? mid : lo, khi = upper ? hi : mid;
        int slo = upper ? lo : mid, shi = upper ? mid : hi;
        size_t so = xc__block_off(count, p, slo), sn = xc__block_off(count, p, shi) - so;
        size_t ko = xc__block_off(count, p, klo), kn = xc__block_off(count, p, khi) - ko;
        xc__sched_send(s, peer, cur + so * es, sn * es);
        xc__sched_recv(s, peer, tmp, kn * es);
        if (upper)
            xc__sched_reduce(s, buf + ko * es, tmp, cur + ko * es, kn);
        else
            xc__sched_reduce(s, buf + ko * es, cur + ko * es, tmp, kn);
        xc__sched_round(s);
        cur = buf;
        lo = klo;
        hi = khi;
    }
    size_t fo = xc__block_off(count, p, f);
    xc__sched_finalize(s, buf + fo * es, xc__block_off(count, p, f + 1) - fo);
    xc__sched_round(s);
    /* All-gather by recursive doubling: swap aligned groups of `mask` blocks. */
    for (int mask = 1; mask < p; mask <<= 1) {
        int peer = xc__unfold(f ^ mask, n);
        int mine = f & ~(mask - 1), theirs = mine ^ mask;
        size_t mo = xc__block_off(count, p, mine);
        size_t mn = xc__block_off(count, p, mine + mask) - mo;
        size_t to = xc__block_off(count, p, theirs);
        size_t tn = xc__block_off(count, p, theirs + mask) - to;
        xc__sched_send(s, peer, buf + mo * es, mn * es);
        xc__sched_recv(s, peer, buf + to * es, tn * es);
        xc__sched_round(s);
    }
    if (r < 2 * rem) {
        xc__sched_send(s, r + 1, buf, bytes);
        xc__sched_round(s);
    }
    return XC_OK;
}
