/*
 * shm_allreduce.c -- all-reduce through the node's shared memory.
 *
 * Small (one shot): every rank stages its whole input (inline in its
 * control line up to 24 bytes) and every rank reduces all inputs itself, in
 * rank order -- one synchronisation, identical bits everywhere.
 * Large: chunks of a staging slot; each rank reduces its 1/L share of the
 * chunk from every rank's slot into the shared result slot (reading each
 * input once, one store), then every rank copies the whole result chunk
 * out.  Per rank and byte: copy-in (1 read + 1 write), reduce (1 read +
 * 1/L write), copy-out (1 read + 1 write).
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static int reads_all(const xc__shm_op_t *o, int j) { (void)o, (void)j; return 1; }
static void out_one_shot(xc__shm_op_t *o, uint64_t k) { xc__shm_reduce_all(o, k, o->a.rbuf); }

static const xc__shm_coll_t one_shot = {nchunks, reads_all, xc__shm_stage_input, NULL,
                                        out_one_shot, 0};
static const xc__shm_coll_t chunked = {nchunks, reads_all, xc__shm_stage_input,
                                       xc__shm_reduce_share, xc__shm_copy_result, 0};

xc_result_t xc__build_shm_allreduce(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc_dtype_size(a->dtype), bytes = a->count * es;
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, es, 1, &tiny);
    if (tiny || bytes <= xc__shm_one_shot_max(comm->size))
        return xc__shm_op_init(comm, op, a, &one_shot, tiny ? ce : a->count ? a->count : 1, tiny);
    return xc__shm_op_init(comm, op, a, &chunked, ce, 0);
}
