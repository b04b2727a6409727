/*
 * shm_bcast.c -- broadcast through shared memory.
 *
 * Staged: the root stages each chunk, the others copy it out.  Single copy
 * (large messages, when ranks may read each other's memory): the root
 * publishes its buffer's address, every other rank reads it directly with
 * process_vm_readv, and the root returns once all have.  Only the root's
 * chunks are read; the driver's description check with the right
 * neighbour still lets the root see a rank that disagrees on the root.
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static uint64_t one(const xc__shm_op_t *o) { (void)o; return 1; }
static int reads_root(const xc__shm_op_t *o, int j) { return j == o->a.root && o->me != o->a.root; }

static void stage(xc__shm_op_t *o, uint64_t k, char *slot)
{
    if (o->me == o->a.root) xc__shm_stage_input(o, k, slot);
}

static void out(xc__shm_op_t *o, uint64_t k)
{
    if (o->a.count == 0) return; /* empty operations may pass NULL buffers */
    if (o->me == o->a.root) return;
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    memcpy((char *)o->a.rbuf + off * o->es, xc__shm_src(o, o->a.root, xc__shm_g(o, k)),
           n * o->es);
}

static void stage_addr(xc__shm_op_t *o, uint64_t k, char *slot)
{
    (void)k;
    if (o->me == o->a.root) xc__shm_put_addr(slot, o->a.sbuf);
}

static void out_direct(xc__shm_op_t *o, uint64_t k)
{
    (void)k;
    if (o->me != o->a.root) xc__shm_cma_read(o, o->a.root, 0, 0, o->a.rbuf, o->a.count * o->es);
}

static const xc__shm_coll_t staged = {nchunks, reads_root, stage, NULL, out, 0};
static const xc__shm_coll_t direct = {one, reads_root, stage_addr, NULL, out_direct, 1};

xc_result_t xc__build_shm_bcast(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc_dtype_size(a->dtype);
    if (xc__shm_use_cma(comm, a->count * es))
        return xc__shm_op_init(comm, op, a, &direct, a->count, 1);
    if (a->count * es <= comm->shm->slot_bytes / XC__SHM_RING) {
        /* One ring entry: the root may run 2 * RING operations ahead. */
        XC_CHECK(xc__shm_op_init(comm, op, a, &staged, a->count ? a->count : 1, 0));
        ((xc__shm_op_t *)op->privbuf)->ring = 1;
        return XC_OK;
    }
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, es, 1, &tiny);
    return xc__shm_op_init(comm, op, a, &staged, ce, tiny);
}
