/*
 * shm_alltoall.c -- all-to-all through shared memory.
 *
 * Staged: for each chunk every rank stages the chunk of each of its L-1
 * outgoing blocks for others; rank j then copies block j out of every
 * other rank's slot and its own block straight from its input (in place:
 * it is already there).  Staging the own block too cost a copy in and a
 * copy out of 1/L of the data for nothing (2 ranks, 1-16 MiB: 4-46 %,
 * mostly 10-30 %, faster in two series, level in a third;
 * bench/RESULTS.md, thirty-second session).  In place is safe: a rank overwrites a chunk of its buffer
 * only after staging it.
 * Single copy (large blocks, not in place, when ranks may read each
 * other's memory): each rank publishes its send buffer's address and reads
 * block `me` of every other rank's buffer straight into place.
 */
#include "shm_common.h"

static void out(xc__shm_op_t *o, uint64_t k)
{
    if (o->a.count == 0) return; /* empty operations may pass NULL buffers */
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    char *rb = o->a.rbuf;
    for (int j = 0; j < o->L; j++) {
        char *to = rb + ((size_t)j * o->a.count + off) * o->es;
        const char *from = xc__shm_block_src(o, j, k, off, n);
        if (to != from) xc__copy(to, from, n * o->es); /* in place the own block is there */
    }
}

static void out_direct(xc__shm_op_t *o, uint64_t k)
{
    (void)k;
    size_t b = o->a.count * o->es;
    char *rb = o->a.rbuf;
    for (int i = 1; i < o->L; i++) {
        int j = (o->me + i) % o->L;
        xc__shm_cma_read(o, j, 0, (size_t)o->me * b, rb + (size_t)j * b, b);
    }
    xc__copy(rb + (size_t)o->me * b, (const char *)o->a.sbuf + (size_t)o->me * b, b);
}

static const xc__shm_coll_t staged = {xc__shm_op_nchunks, xc__shm_reads_all,
                                      xc__shm_stage_blocks, NULL, out, 0};
static const xc__shm_coll_t direct = {xc__shm_one, xc__shm_reads_all,
                                      xc__shm_stage_addr, NULL, out_direct, 1};

xc_result_t xc__build_shm_alltoall(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc__dtype_size(a->dtype);
    const xc__model_topo_t *t = xc__shm_measured(comm);
    size_t cma_min = xc__shm_cma_floor(
        xc__shm_alltoall_cma_min(comm->size, comm->oversub, (size_t)comm->cfg.shm_cma_min_kb * 1024),
        t ? t->a2a_cma_min : 0);
    if (a->sbuf != a->rbuf && xc__shm_move_cma_from(comm, t, a->count * es, cma_min))
        return xc__shm_op_init(comm, op, a, &direct, a->count, XC__SHM_LINES_ADDRS);
    int lines;
    size_t ce = xc__shm_ce(comm, a->count, es, xc__shm_blocks(a, comm->size), &lines);
    xc_result_t rc = xc__shm_op_init(comm, op, a, &staged, ce, lines);
    /* Large blocks staged by the measured ceiling or floor: single copy
     * when every rank's input is on huge pages (2 ranks, 4 / 8 MiB blocks,
     * medians us staged / single copy: 446-475 / 284-318, 1262-1376 /
     * 867-945; bench/RESULTS.md, thirty-fourth session). */
    if (rc == XC_OK && a->sbuf != a->rbuf)
        xc__shm_op_offer(comm, op, &direct, a->sbuf, (size_t)comm->size * a->count * es,
                         a->count * es);
    return rc;
}
