/*
 * barrier_dissemination.c -- the dissemination barrier (Hensgen, Finkel,
 * Manber): in round k every rank sends an empty frame to rank r+2^k and
 * waits for one from rank r-2^k.  ceil(log2 N) rounds for any N; after the
 * last round every rank has (transitively) heard from every other.
 */
#include "algos.h"

xc_result_t xc__build_barrier_dissemination(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    (void)a;
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    for (int d = 1; d < n; d <<= 1) {
        xc__sched_send(s, (r + d) % n, NULL, 0);
        xc__sched_recv(s, xc__mod(r - d, n), NULL, 0);
        xc__sched_round(s);
    }
    return XC_OK;
}
