/*
 * reduce_scatter_rhalving.c -- reduce-scatter by recursive halving: log2 p
 * rounds instead of the ring's N-1, with the same bandwidth when N is a
 * power of two; for small and medium blocks.
 *
 * N ranks are folded onto p = 2^floor(log2 N) (xc__fold): of the first
 * 2(N-p) ranks each odd one sends its whole input to the even one below,
 * which adds it (lower rank's data first) into its accumulator; the odd one
 * sits out.  Fold rank f then stands for one block of the result (f >= N-p:
 * block f+N-p) or two adjacent ones (f < N-p: blocks 2f and 2f+1), so the p
 * "virtual blocks" tile the input contiguously.  With mask = p/2, ..., 1
 * rank f keeps the half of its window of virtual blocks on f's side of bit
 * `mask`, sends the other half to fold rank f^mask and adds the half it
 * receives into its accumulator (reading the input itself in the first
 * round).  At the end f holds its virtual block fully reduced: it copies
 * its own block to recvbuf and, after a fold, sends block r+1 to rank r+1.
 * Each block is reduced by one rank and XC_AVG finalised once, by its
 * owner.
 *
 * Rounds: log2 p, plus 2 when N is not a power of two.
 * Cost per rank (n = N·recvcount·size bytes, the whole input):
 *   log2 p·α + (p-1)/p·nβ + (p-1)/p·nγ
 *   [+ 2α + (1+1/N)·nβ + nγ for the fold when N != p]
 * Scratch: n + about n/2 bytes.
 */
#include "algos.h"

/* First block of virtual block j (j == p gives N). */
static int vstart(int j, int rem) { return j < rem ? 2 * j : j + rem; }

xc_result_t xc__build_reduce_scatter_rhalving(xc_comm_t *comm, xc__op_t *op,
                                              const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc__dtype_size(a->dtype), rc = a->count, bb = rc * es;
    size_t total = (size_t)n * bb;
    const char *in = a->sbuf;
    char *out = a->rbuf;
    if (n == 1) {
        xc__sched_single(s, out, in, rc, es);
        return XC_OK;
    }
    int p = xc__pow2_floor(n), rem = n - p, f = xc__fold(r, n);
    if (f < 0) { /* odd rank of the fold: hand the input over, get block r back */
        xc__sched_send(s, r - 1, in, total);
        xc__sched_round(s);
        xc__sched_recv(s, r - 1, out, bb);
        xc__sched_finalize(s, out, rc);
        xc__sched_round(s);
        return XC_OK;
    }
    /* The largest receive is a kept half of the first round. */
    int half = vstart(p / 2, rem);
    size_t tblocks = (size_t)(half > n - half ? half : n - half);
    char *acc = xc__sched_scratch(s, total + tblocks * bb);
    char *tmp = acc ? acc + total : NULL;
    const char *cur = in;
    if (r < 2 * rem) {
        xc__sched_recv(s, r + 1, acc, total);
        xc__sched_reduce(s, acc, in, acc, (size_t)n * rc);
        xc__sched_round(s);
        cur = acc;
    }
    int lo = 0, hi = p;
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
        int peer = xc__unfold(f ^ mask, n), mid = lo + mask;
        int upper = (f & mask) != 0;
        int klo = upper ? mid : lo, khi = upper ? hi : mid;
        int slo = upper ? lo : mid, shi = upper ? mid : hi;
        size_t so = (size_t)vstart(slo, rem) * bb;
        size_t sn = (size_t)(vstart(shi, rem) - vstart(slo, rem)) * bb;
        size_t ko = (size_t)vstart(klo, rem) * bb;
        size_t kc = (size_t)(vstart(khi, rem) - vstart(klo, rem)) * rc;
        xc__sched_send(s, peer, cur + so, sn);
        xc__sched_recv(s, peer, tmp, kc * es);
        if (upper)
            xc__sched_reduce(s, acc + ko, tmp, cur + ko, kc);
        else
            xc__sched_reduce(s, acc + ko, cur + ko, tmp, kc);
        xc__sched_round(s);
        cur = acc;
        lo = klo;
        hi = khi;
    }
    /* Window = virtual block f = block r (and r+1 after a fold).  The send
     * reads acc, the local steps write only recvbuf. */
    if (r < 2 * rem) xc__sched_send(s, r + 1, acc + (size_t)(r + 1) * bb, bb);
    xc__sched_copy(s, out, acc + (size_t)r * bb, bb);
    xc__sched_finalize(s, out, rc);
    xc__sched_round(s);
    return XC_OK;
}
