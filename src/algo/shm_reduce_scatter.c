/*
 * shm_reduce_scatter.c -- reduce-scatter through shared memory.
 *
 * Staged: for each chunk every rank stages the chunk of the L-1 blocks of
 * its input that others reduce, then reduces chunk k of its own block from
 * every other rank's slot and its own input straight into its receive
 * buffer (each input read once, one store).  In place is safe: the own
 * block is read only by this rank, each element before it is written
 * (exact aliasing, which the kernels allow).
 * Single copy (large, when ranks may read each other's memory): each rank
 * publishes its input's address; rank r pulls block r of every peer's
 * input (process_vm_readv, in pieces into the scratch) and reduces it with
 * its own block straight into its receive buffer, then waits until every
 * peer has read its input.  The peers' blocks are copied once (by the
 * kernel, into cache-resident scratch) instead of every rank staging all L
 * blocks and reading them back.  In place
 * (recvbuf == sendbuf + r * recvcount) is safe: the peers read only blocks
 * j != r of our input, and each piece of block r is read by our own
 * reduction before the same piece is written (exact aliasing).
 */
#include "shm_common.h"

static void out(xc__shm_op_t *o, uint64_t k)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    if (!n) return;
    const void *srcs[XC__SHM_MAX_RANKS];
    for (int j = 0; j < o->L; j++) srcs[j] = xc__shm_block_src(o, j, k, off, n);
    char *dst = (char *)o->a.rbuf + off * o->es;
    xc__shm_reduce(o, dst, srcs, o->L, n);
    xc__reduce_finalize(dst, n, o->a.dtype, o->a.op, o->L);
}

/* Block `me` of every rank's input, reduced into the receive buffer. */
static void out_direct(xc__shm_op_t *o, uint64_t k)
{
    (void)k;
    xc__shm_cma_reduce(o, o->a.rbuf, (size_t)o->me * o->a.count, o->a.count);
}

static const xc__shm_coll_t staged = {xc__shm_op_nchunks, xc__shm_reads_all,
                                      xc__shm_stage_blocks, NULL, out, 0};
static const xc__shm_coll_t direct = {xc__shm_one, xc__shm_reads_all,
                                      xc__shm_stage_addr, NULL, out_direct, 1};

xc_result_t xc__build_shm_reduce_scatter(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc__dtype_size(a->dtype);
    if (xc__shm_use_cma_reduce(comm, a->count * es * (size_t)comm->size, XC__SHM_RED_SCATTER)) {
        XC_CHECK(xc__shm_op_init(comm, op, a, &direct, a->count, XC__SHM_LINES_ADDRS));
        ((xc__shm_op_t *)op->privbuf)->tmp = comm->cma_tmp;
        return XC_OK;
    }
    int lines;
    size_t ce = xc__shm_ce(comm, a->count, es, xc__shm_blocks(a, comm->size), &lines);
    return xc__shm_op_init(comm, op, a, &staged, ce, lines);
}
