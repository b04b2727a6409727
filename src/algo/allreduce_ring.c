/*
 * allreduce_ring.c -- ring all-reduce: a ring reduce-scatter followed by a
 * ring all-gather, in place in the receive buffer.
 *
 * The data is cut into N blocks.  In step s of the reduce-scatter, rank r
 * sends block (r-s) to rank r+1 and receives block (r-s-1) from rank r-1
 * into scratch, then adds it into its own copy.  After N-1 steps rank r holds
 * block (r+1) fully reduced (and averaged, for XC_AVG); N-1 all-gather steps
 * circulate the finished blocks.  Every rank ends with the same bits because
 * each block is reduced once, by one rank, and then only copied.
 * Cost: 2(N-1) rounds; each rank sends and receives 2(N-1)/N of the data.
 * fp16/bf16 round once per hop, so a result may differ from the exactly
 * rounded sum by up to N-1 roundings.
 */
#include "algos.h"

xc_result_t xc__build_allreduce_ring(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t es = xc_dtype_size(a->dtype);
    char *buf = a->rbuf;
    xc__sched_copy(s, buf, a->sbuf, a->count * es);
    xc__sched_round(s);
    if (n == 1) {
        xc__sched_finalize(s, buf, a->count);
        xc__sched_round(s);
        return XC_OK;
    }
    size_t maxblk = a->count / (size_t)n + 1;
    char *tmp = xc__sched_scratch(s, maxblk * es);
    int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int step = 0; step < n - 1; step++) {
        size_t so, sc, ro, rc;
        xc__block(a->count, n, xc__mod(r - step, n), &so, &sc);
        xc__block(a->count, n, xc__mod(r - step - 1, n), &ro, &rc);
        xc__sched_send(s, right, buf + so * es, sc * es);
        xc__sched_recv(s, left, tmp, rc * es);
        xc__sched_reduce(s, buf + ro * es, buf + ro * es, tmp, rc);
        xc__sched_round(s);
    }
    size_t oo, oc;
    xc__block(a->count, n, (r + 1) % n, &oo, &oc);
    xc__sched_finalize(s, buf + oo * es, oc);
    xc__sched_round(s);
    for (int step = 0; step < n - 1; step++) {
        size_t so, sc, ro, rc;
        xc__block(a->count, n, xc__mod(r + 1 - step, n), &so, &sc);
        xc__block(a->count, n, xc__mod(r - step, n), &ro, &rc);
        xc__sched_send(s, right, buf + so * es, sc * es);
        xc__sched_recv(s, left, buf + ro * es, rc * es);
        xc__sched_round(s);
    }
    return XC_OK;
}
