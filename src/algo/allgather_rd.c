/*
 * allgather_rd.c -- recursive-doubling all-gather: in the round of distance
 * mask = 1, 2, ..., N/2 ranks r and r^mask swap the aligned group of `mask`
 * blocks each has gathered so far, straight into place in recvbuf (no
 * rotation, no scratch).  The first round sends the input itself.
 *
 * This needs N to be a power of two.  For any other N the builder builds
 * Bruck's all-gather instead (allgather_bruck.c: the same ceil(log2 N)
 * rounds and bytes, plus a local rotation); the operation still reports
 * itself as allgather.rd, on every rank alike.
 *
 * Rounds: log2 N.
 * Cost per rank (n = N·sendcount·size bytes, the gathered result):
 *   log2 N·α + (N-1)/N·nβ
 */
#include "algos.h"

xc_result_t xc__build_allgather_rd(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    int n = comm->size, r = comm->rank;
    if (n != xc__pow2_floor(n)) return xc__build_allgather_bruck(comm, op, a);
    xc__sched_t *s = &op->sched;
    size_t bb = a->count * xc__dtype_size(a->dtype);
    char *out = a->rbuf;
    char *mine_blk = out + (size_t)r * bb;
    if (n == 1) {
        xc__sched_copy(s, mine_blk, a->sbuf, bb);
        xc__sched_round(s);
        return XC_OK;
    }
    for (int mask = 1; mask < n; mask <<= 1) {
        int peer = r ^ mask, mine = r & ~(mask - 1), theirs = mine ^ mask;
        const char *src = mask == 1 ? a->sbuf : out + (size_t)mine * bb;
        xc__sched_send(s, peer, src, (size_t)mask * bb);
        xc__sched_recv(s, peer, out + (size_t)theirs * bb, (size_t)mask * bb);
        if (mask == 1) xc__sched_copy(s, mine_blk, a->sbuf, bb);
        xc__sched_round(s);
    }
    return XC_OK;
}
