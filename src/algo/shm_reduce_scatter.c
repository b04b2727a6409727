/*
 * shm_reduce_scatter.c -- reduce-scatter through shared memory: for each
 * chunk every rank stages the chunk of all L blocks of its input, then
 * reduces chunk k of its own block from every rank's slot straight into its
 * receive buffer (each input read once, one store).  In place is safe: a
 * chunk of the rank's own block is staged before it is overwritten.
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static int reads_all(const xc__shm_op_t *o, int j) { (void)o, (void)j; return 1; }


static void out(xc__shm_op_t *o, uint64_t k)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    if (!n) return;
    const void *srcs[XC__SHM_MAX_RANKS];
    for (int j = 0; j < o->L; j++)
        srcs[j] = xc__shm_src(o, j, xc__shm_g(o, k)) + (size_t)o->me * n * o->es;
    char *dst = (char *)o->a.rbuf + off * o->es;
    xc__shm_reduce(o, dst, srcs, o->L, n);
    xc__reduce_finalize(dst, n, o->a.dtype, o->a.op, o->L);
}

static const xc__shm_coll_t vt = {nchunks, reads_all, xc__shm_stage_blocks, NULL, out, 0};

xc_result_t xc__build_shm_reduce_scatter(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, xc_dtype_size(a->dtype), (size_t)comm->size, &tiny);
    return xc__shm_op_init(comm, op, a, &vt, ce, tiny);
}
