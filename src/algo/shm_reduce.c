/*
 * shm_reduce.c -- reduction to a root through shared memory.
 *
 * Small: every other rank stages its input and the root reduces them all
 * with its own, read in place.  On 2 ranks of an uncrowded node and on a
 * crowded node this runs at every size, chunk after chunk of a ring entry
 * (xc__shm_reduce_root_reads, xc__shm_rooted_ce): the other ranks stage
 * chunk k+1 while the root reduces chunk k, and return as soon as their
 * last chunk is staged.
 * Chunked (more ranks on cores of their own): as the chunked all-reduce, every
 * rank reduces its share into the result slot, and only the root copies it
 * out.
 * Single copy (large, when ranks may read each other's memory): every rank
 * publishes its input's address and the root also its output's.  Rank r
 * reduces block r (xc__block) of every rank's input, pulled in pieces with
 * process_vm_readv: the root straight into its output, the others into
 * their scratch, each piece then pushed into the root's output with
 * process_vm_writev.  So the reduction work is spread over all ranks as in
 * the all-reduce, each block is reduced (and finalised) by exactly one
 * rank, and every byte of the result is written into the root's buffer
 * once.  Every rank then waits for every rank's `out` (wait_out): the root
 * so that it returns only once every writer is done with its output, and
 * everyone so that no input is given back while a peer still reads it.
 * In place on the root is safe: block r of the root's buffer is only read
 * and written by rank r, each piece read before it is written.
 */
#include "shm_common.h"

static int reads_small(const xc__shm_op_t *o, int j) { (void)j; return o->me == o->a.root; }

/* Only the root reads staged inputs: it stages nothing. */
static void stage_small(xc__shm_op_t *o, uint64_t k, char *slot)
{
    if (o->me != o->a.root) xc__shm_stage_input(o, k, slot);
}

static void out_small(xc__shm_op_t *o, uint64_t k)
{
    if (o->me == o->a.root) xc__shm_reduce_all(o, k, o->a.rbuf, o->a.sbuf);
}

static void out_large(xc__shm_op_t *o, uint64_t k)
{
    if (o->me == o->a.root) xc__shm_copy_result(o, k);
}

static void stage_addrs(xc__shm_op_t *o, uint64_t k, char *slot)
{
    (void)k;
    xc__shm_put_addr(o, slot, o->a.sbuf, o->a.count * o->es);
    /* Only the root's output is a buffer of the count (and read). */
    xc__shm_put_addr(o, slot + 8, o->a.rbuf, o->me == o->a.root ? o->a.count * o->es : 0);
}

/* Block `me` of the result: reduced into the root's output. */
static void out_direct(xc__shm_op_t *o, uint64_t k)
{
    (void)k;
    size_t bo, bc;
    xc__block(o->a.count, o->L, o->me, &bo, &bc);
    if (o->me == o->a.root) {
        xc__shm_cma_reduce(o, (char *)o->a.rbuf + bo * o->es, bo, bc);
        return;
    }
    size_t piece = XC__SHM_CMA_PIECE / o->es;
    for (size_t p = 0; p < bc && !o->err; p += piece) {
        size_t n = bc - p < piece ? bc - p : piece;
        const char *r = xc__shm_cma_reduce_piece(o, NULL, bo + p, n);
        if (r) xc__shm_cma_write(o, o->a.root, 1, (bo + p) * o->es, r, n * o->es);
    }
}

static const xc__shm_coll_t small = {xc__shm_op_nchunks, reads_small,
                                     stage_small, NULL, out_small, 0};
static const xc__shm_coll_t large = {xc__shm_op_nchunks, xc__shm_reads_all,
                                     xc__shm_stage_input, xc__shm_reduce_share, out_large, 0};
static const xc__shm_coll_t direct = {xc__shm_one, xc__shm_reads_all,
                                      stage_addrs, NULL, out_direct, 1};

/* The ring entry of flagged lines below, in one step (xc__shm_express). */
int xc__express_shm_reduce(xc_comm_t *comm, const xc__algo_t *algo, const xc__args_t *a,
                           const xc__desc_t *d, uint64_t seq)
{
    (void)algo;
    size_t bytes = a->count * xc__dtype_size(a->dtype);
    if (bytes > xc__shm_ll_max(comm->size) || bytes > xc__shm_one_shot_max(comm->size) ||
        xc__shm_use_cma_reduce(comm, bytes, XC__SHM_RED_ROOTED))
        return 0;
    return xc__shm_express(comm, a, d, seq, comm->rank != a->root);
}

xc_result_t xc__build_shm_reduce(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc__dtype_size(a->dtype), bytes = a->count * es;
    if (xc__shm_use_cma_reduce(comm, bytes, XC__SHM_RED_ROOTED)) {
        XC_CHECK(xc__shm_op_init(comm, op, a, &direct, a->count, XC__SHM_LINES_ADDRS));
        ((xc__shm_op_t *)op->privbuf)->tmp = comm->cma_tmp;
        return XC_OK;
    }
    int lines;
    size_t ce = xc__shm_ce(comm, a->count, es, 1, &lines);
    if (xc__shm_reduce_in_ring(comm, bytes)) {
        /* In ring entries (the flagged lines' if it fits them): the
         * non-roots may run NSLOT x RING chunks ahead, of one operation
         * (the root reads) or of several. */
        ce = xc__shm_rooted_ce(comm->shm->slot_bytes, a->count, es, comm->oversub);
        XC_CHECK(xc__shm_op_init(comm, op, a, &small, ce, lines));
        ((xc__shm_op_t *)op->privbuf)->ring = 1;
        return XC_OK;
    }
    /* Small: the whole input in one slot (XCOLL_SHM_SLOT_KB may be below
     * the one-shot size). */
    if (lines || (bytes <= xc__shm_one_shot_max(comm->size) && bytes <= comm->shm->slot_bytes))
        return xc__shm_op_init(comm, op, a, &small, lines ? ce : a->count ? a->count : 1, lines);
    return xc__shm_op_init(comm, op, a, &large, ce, 0);
}
