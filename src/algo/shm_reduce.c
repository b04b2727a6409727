/*
 * shm_reduce.c -- reduction to a root through shared memory.  Small: every
 * rank stages its input and the root reduces them all.  Large: as the
 * chunked all-reduce, every rank reduces its share into the result slot,
 * and only the root copies it out.
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static int reads_small(const xc__shm_op_t *o, int j) { (void)j; return o->me == o->a.root; }
static int reads_all(const xc__shm_op_t *o, int j) { (void)o, (void)j; return 1; }

static void out_small(xc__shm_op_t *o, uint64_t k)
{
    if (o->me == o->a.root) xc__shm_reduce_all(o, k, o->a.rbuf);
}

static void out_large(xc__shm_op_t *o, uint64_t k)
{
    if (o->me == o->a.root) xc__shm_copy_result(o, k);
}

static const xc__shm_coll_t small = {nchunks, reads_small, xc__shm_stage_input, NULL, out_small, 0};
static const xc__shm_coll_t large = {nchunks, reads_all, xc__shm_stage_input,
                                     xc__shm_reduce_share, out_large, 0};

xc_result_t xc__build_shm_reduce(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc_dtype_size(a->dtype);
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, es, 1, &tiny);
    if (tiny || a->count * es <= xc__shm_one_shot_max(comm->size))
        return xc__shm_op_init(comm, op, a, &small, tiny ? ce : a->count ? a->count : 1, tiny);
    return xc__shm_op_init(comm, op, a, &large, ce, 0);
}
