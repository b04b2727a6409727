/*
 * shm_alltoall.c -- all-to-all through shared memory: for each chunk every
 * rank stages the chunk of each of its L outgoing blocks; rank j then
 * copies block j out of every rank's slot.  In place is safe: a rank
 * overwrites a chunk of its buffer only after staging it.
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static int reads_all(const xc__shm_op_t *o, int j) { (void)o, (void)j; return 1; }


static void out(xc__shm_op_t *o, uint64_t k)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    char *rb = o->a.rbuf;
    for (int j = 0; j < o->L; j++)
        memcpy(rb + ((size_t)j * o->a.count + off) * o->es,
               xc__shm_src(o, j, xc__shm_g(o, k)) + (size_t)o->me * n * o->es, n * o->es);
}

static const xc__shm_coll_t vt = {nchunks, reads_all, xc__shm_stage_blocks, NULL, out};

xc_result_t xc__build_shm_alltoall(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, xc_dtype_size(a->dtype), (size_t)comm->size, &tiny);
    return xc__shm_op_init(comm, op, a, &vt, ce, tiny);
}
