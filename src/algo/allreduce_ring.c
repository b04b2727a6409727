/*
 * allreduce_ring.c -- ring all-reduce: a ring reduce-scatter followed by a
 * ring all-gather (group.c), in place in the receive buffer.
 *
 * The data is cut into N blocks; after the reduce-scatter rank r holds
 * block r + 1 fully reduced, finalises it (XC_AVG) and the all-gather
 * circulates the finished blocks.  Every rank ends with the same bits
 * because each block is reduced once, by one rank, and then only copied.
 * Cost: 2(N-1) rounds; each rank sends and receives 2(N-1)/N of the data:
 * 2(N-1)α + 2(N-1)/N·nβ + (N-1)/N·nγ.  fp16/bf16 round once per hop, so a
 * result may differ from the exactly rounded sum by up to N-1 roundings.
 */
#include "group.h"

xc_result_t xc__build_allreduce_ring(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    xc__group_t all = {NULL, 1, comm->size, comm->rank};
    size_t es = xc__dtype_size(a->dtype);
    char *buf = a->rbuf;
    xc__sched_copy(s, buf, a->sbuf, a->count * es);
    xc__sched_round(s);
    char *tmp = all.n > 1 ? xc__sched_scratch(s, (a->count / (size_t)all.n + 1) * es) : NULL;
    xc__sched_ring_rs(s, &all, buf, tmp, a->count, es);
    size_t oo, oc;
    xc__block(a->count, all.n, xc__ring_owned(&all), &oo, &oc);
    xc__sched_finalize(s, buf + oo * es, oc);
    xc__sched_round(s);
    xc__sched_ring_ag(s, &all, buf, a->count, es);
    return XC_OK;
}
