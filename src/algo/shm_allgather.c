/*
 * shm_allgather.c -- all-gather through shared memory.
 *
 * Staged: each rank stages chunk k of its block; every rank copies every
 * staged chunk into place (its own straight from its send buffer).
 * Single copy (blocks >= XCOLL_SHM_CMA_MIN_KB, when the ranks may read each
 * other's memory): each rank publishes its send buffer's address and reads
 * every other block straight from its owner with process_vm_readv -- one
 * copy instead of three -- then waits until its own buffer has been read.
 */
#include "shm_common.h"

static void out(xc__shm_op_t *o, uint64_t k)
{
    if (o->a.count == 0) return; /* empty operations may pass NULL buffers */
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    char *rb = o->a.rbuf;
    for (int j = 0; j < o->L; j++) {
        char *dst = rb + ((size_t)j * o->a.count + off) * o->es;
        const char *src = j == o->me ? (const char *)o->a.sbuf + off * o->es
                                     : xc__shm_src(o, j, xc__shm_g(o, k));
        if (dst != src) xc__copy(dst, src, n * o->es);
    }
}

static void out_direct(xc__shm_op_t *o, uint64_t k)
{
    (void)k;
    size_t b = o->a.count * o->es;
    char *rb = o->a.rbuf;
    /* Start with the next rank so that not everyone reads rank 0 first. */
    for (int i = 1; i < o->L; i++) {
        int j = (o->me + i) % o->L;
        xc__shm_cma_read(o, j, 0, 0, rb + (size_t)j * b, b);
    }
    if (rb + (size_t)o->me * b != (const char *)o->a.sbuf)
        xc__copy(rb + (size_t)o->me * b, o->a.sbuf, b);
}

static const xc__shm_coll_t staged = {xc__shm_op_nchunks, xc__shm_reads_all,
                                      xc__shm_stage_input, NULL, out, 0};
static const xc__shm_coll_t direct = {xc__shm_one, xc__shm_reads_all,
                                      xc__shm_stage_addr, NULL, out_direct, 1};

xc_result_t xc__build_shm_allgather(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc__dtype_size(a->dtype);
    const xc__model_topo_t *t = xc__shm_measured(comm);
    size_t min = xc__shm_allgather_cma_min(comm->oversub, (size_t)comm->cfg.shm_cma_min_kb * 1024,
                                           t ? t->ag_cma_min : 0);
    if (xc__shm_move_cma_from(comm, t, a->count * es, min))
        return xc__shm_op_init(comm, op, a, &direct, a->count, XC__SHM_LINES_ADDRS);
    int lines;
    size_t ce = xc__shm_ce(comm, a->count, es, 1, &lines);
    xc_result_t rc = xc__shm_op_init(comm, op, a, &staged, ce, lines);
    /* Blocks staged by the measured floor or ceiling: single copy when
     * every rank's input is on huge pages (2 ranks, medians us staged /
     * single copy, 1 / 2 / 4 / 8 MiB blocks: 84-91 / 63-69, 169-180 /
     * 112-130, 364-385 / 262-317, 998-1101 / 886-964; bench/RESULTS.md,
     * thirty-fourth session).  Not on a crowded node (staged there). */
    if (rc == XC_OK) xc__shm_op_offer(comm, op, &direct, a->sbuf, a->count * es, a->count * es);
    return rc;
}
