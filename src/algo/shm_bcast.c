/*
 * shm_bcast.c -- broadcast through shared memory: the root stages each
 * chunk, the others copy it out.  Only the root's chunks are read; the
 * driver's description check with the right neighbour still lets the root
 * see a rank that disagrees on the root.
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static int reads_root(const xc__shm_op_t *o, int j) { return j == o->a.root && o->me != o->a.root; }

static void stage(xc__shm_op_t *o, uint64_t k, char *slot)
{
    if (o->me != o->a.root) return;
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    memcpy(slot, (const char *)o->a.sbuf + off * o->es, n * o->es);
}

static void out(xc__shm_op_t *o, uint64_t k)
{
    if (o->me == o->a.root) return;
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    memcpy((char *)o->a.rbuf + off * o->es, xc__shm_src(o, o->a.root, xc__shm_g(o, k)),
           n * o->es);
}

static const xc__shm_coll_t vt = {nchunks, reads_root, stage, NULL, out};

xc_result_t xc__build_shm_bcast(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, xc_dtype_size(a->dtype), 1, &tiny);
    return xc__shm_op_init(comm, op, a, &vt, ce, tiny);
}
