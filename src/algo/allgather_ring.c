/*
 * allgather_ring.c -- ring all-gather: each rank places its block, then in
 * step s sends block (r-s) to rank r+1 and receives block (r-s-1) from rank
 * r-1 straight into the receive buffer.  N-1 rounds; each rank sends and
 * receives (N-1)/N of the result.
 *
 * The first step sends the input itself, and the own block is placed in
 * that step too.  Sent from its copy in the receive buffer -- lines just
 * written in this core's cache -- the block was read at about half the
 * speed by the peer's single copy: 2 ranks (AMD EPYC VM, medians us),
 * all-gather of 512 KiB / 1 MiB / 4 MiB, 51-52 / 79 / 227-232 sent from
 * the copy against 18-26 / 34-51 / 123-208 from the input (as
 * allgather.rd; bench/RESULTS.md, forty-eighth session).
 */
#include "algos.h"

xc_result_t xc__build_allgather_ring(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t bb = a->count * xc__dtype_size(a->dtype);
    char *out = a->rbuf;
    int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int step = 0; step < n - 1; step++) {
        const char *src = step == 0 ? a->sbuf : out + (size_t)xc__mod(r - step, n) * bb;
        xc__sched_send(s, right, src, bb);
        xc__sched_recv(s, left, out + (size_t)xc__mod(r - step - 1, n) * bb, bb);
        if (step == 0) xc__sched_copy(s, out + (size_t)r * bb, a->sbuf, bb);
        xc__sched_round(s);
    }
    if (n == 1) {
        xc__sched_copy(s, out, a->sbuf, bb);
        xc__sched_round(s);
    }
    return XC_OK;
}
