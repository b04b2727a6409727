/*
 * allgather_bruck.c -- Bruck's all-gather: ceil(log2 N) rounds for any N,
 * for small blocks where the ring's N-1 rounds cost more than the bytes.
 *
 * Rank r works in a buffer W of N blocks in which W[i] is the block of rank
 * (r+i) mod N; it starts with W[0] = its own block.  In the round of
 * distance d = 1, 2, 4, ... it sends W[0, c) to rank r-d and receives
 * W[d, d+c) from rank r+d, with c = min(d, N-d): the receiver's W[d+i] is
 * the block of rank r+d+i, which is the sender's W[i].  After the last
 * round W holds all N blocks rotated by r; a local rotation (two copies)
 * puts them in place.  Rank 0's rotation is the identity, so it works in
 * recvbuf directly.  The first round sends the input itself.
 *
 * Rounds: ceil(log2 N) (+ the local rotation).
 * Cost per rank (n = N·sendcount·size bytes, the gathered result):
 *   ceil(log2 N)·α + (N-1)/N·nβ, plus a local copy of n bytes
 * Scratch: n bytes (none on rank 0).
 */
#include "algos.h"

xc_result_t xc__build_allgather_bruck(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t bb = a->count * xc__dtype_size(a->dtype);
    char *out = a->rbuf;
    if (n == 1) {
        xc__sched_copy(s, out, a->sbuf, bb);
        xc__sched_round(s);
        return XC_OK;
    }
    char *w = r == 0 ? out : xc__sched_scratch(s, (size_t)n * bb);
    for (int d = 1; d < n; d <<= 1) {
        size_t c = (size_t)(d < n - d ? d : n - d);
        xc__sched_send(s, xc__mod(r - d, n), d == 1 ? a->sbuf : w, c * bb);
        xc__sched_recv(s, (r + d) % n, w + (size_t)d * bb, c * bb);
        if (d == 1) xc__sched_copy(s, w, a->sbuf, bb);
        xc__sched_round(s);
    }
    /* out[(r+i) mod N] = W[i]. */
    if (w != out) {
        size_t head = (size_t)(n - r) * bb;
        xc__sched_copy(s, out + (size_t)r * bb, w, head);
        xc__sched_copy(s, out, w + head, (size_t)r * bb);
        xc__sched_round(s);
    }
    return XC_OK;
}
