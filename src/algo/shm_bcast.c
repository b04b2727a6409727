/*
 * shm_bcast.c -- broadcast through shared memory.
 *
 * Staged: the root stages each chunk, the others copy it out.  Only the
 * root's chunks are read; the driver's description check with the right
 * neighbour still lets the root see a rank that disagrees on the root.
 * Single copy (large messages -- on 2 ranks of an uncrowded node from
 * xc__shm_bcast_cma_min -- when ranks may read each other's memory):
 * the root publishes its buffer's address, every other rank reads it
 * directly with process_vm_readv, and the root returns once all have.
 *
 * Cooperative single copy: the root's core would idle while the others
 * read, so it copies too (the node not crowded, XCOLL_SHM_COOP).  Every
 * rank publishes its buffer, the root also `share`, the bytes of the
 * message's head (xc__shm_bcast_share: about 1/L, whole 4 KiB; 0 for
 * the plain single copy) it writes into each other rank with
 * process_vm_writev while each of them reads the rest from it.  Only the
 * root decides (the others take its published share), so ranks whose
 * settings differ still agree.  The root waits for every rank's address
 * and checks its description before it writes into its memory; every rank
 * then waits for every `out` (wait_out): a reader returns only once the
 * root has written its head, the root only once every reader is done with
 * its buffer.  On 2 ranks each core copies half: the broadcast is bounded
 * by two cores' copy bandwidth instead of one's.
 */
#include "shm_common.h"

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
    xc__copy((char *)o->a.rbuf + off * o->es, xc__shm_src(o, o->a.root, xc__shm_g(o, k)),
             n * o->es);
}

/* Single copy: the root publishes its buffer and its share, the others
 * their buffers. */
static void stage_addr(xc__shm_op_t *o, uint64_t k, char *slot)
{
    (void)k;
    int root = o->me == o->a.root;
    xc__shm_put_addr(o, slot, root ? o->a.sbuf : o->a.rbuf, o->a.count * o->es);
    if (root) {
        uint64_t share = o->share;
        memcpy(slot + 8, &share, sizeof share);
    }
}

static void out_direct(xc__shm_op_t *o, uint64_t k)
{
    size_t bytes = o->a.count * o->es;
    if (o->me == o->a.root) {
        for (int j = 0; j < o->L && o->share && !o->err; j++)
            if (j != o->me) xc__shm_cma_write(o, j, 0, 0, o->a.sbuf, o->share);
        return;
    }
    uint64_t share;
    memcpy(&share, xc__shm_src(o, o->a.root, xc__shm_g(o, k)) + 8, sizeof share);
    if (share > bytes) share = bytes; /* (a root that disagreed is caught before) */
    xc__shm_cma_read(o, o->a.root, 0, share, (char *)o->a.rbuf + share, bytes - share);
}

/* The root waits for every rank's address (and description) */
static int reads_direct(const xc__shm_op_t *o, int j) { return o->me == o->a.root || j == o->a.root; }

static const xc__shm_coll_t staged = {xc__shm_op_nchunks, reads_root, stage, NULL, out, 0};
static const xc__shm_coll_t direct = {xc__shm_one, reads_direct, stage_addr, NULL, out_direct, 1};

static int single_copy(const xc_comm_t *comm, size_t bytes)
{
    const xc__model_topo_t *t = xc__shm_measured(comm);
    return xc__shm_use_cma(comm, bytes) &&
           bytes >= xc__shm_bcast_cma_min(comm->size, comm->oversub,
                                          (size_t)comm->cfg.shm_cma_min_kb * 1024,
                                          t ? t->bcast_cma_min : 0);
}

/* The ring entry of flagged lines below, in one step (xc__shm_express). */
int xc__express_shm_bcast(xc_comm_t *comm, const xc__algo_t *algo, const xc__args_t *a,
                          const xc__desc_t *d, uint64_t seq)
{
    (void)algo;
    size_t bytes = a->count * xc__dtype_size(a->dtype);
    if (bytes > xc__shm_ll_max(comm->size) || single_copy(comm, bytes)) return 0;
    return xc__shm_express(comm, a, d, seq, comm->rank == a->root);
}

xc_result_t xc__build_shm_bcast(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc__dtype_size(a->dtype), bytes = a->count * es;
    if (single_copy(comm, bytes)) {
        int coop = xc__shm_coop(comm->cfg.shm_coop, comm->oversub);
        XC_CHECK(xc__shm_op_init(comm, op, a, &direct, a->count, XC__SHM_LINES_ADDRS));
        ((xc__shm_op_t *)op->privbuf)->share = xc__shm_bcast_share(a->count * es, comm->size, coop);
        return XC_OK;
    }
    /* In ring entries (the flagged lines' when it fits them): the root
     * may run NSLOT x RING chunks ahead, one operation's or several's. */
    int lines = xc__shm_lines_for(comm, bytes);
    size_t ce = xc__shm_rooted_ce(comm->shm->slot_bytes, a->count, es, comm->oversub);
    XC_CHECK(xc__shm_op_init(comm, op, a, &staged, ce, lines));
    ((xc__shm_op_t *)op->privbuf)->ring = 1;
    return XC_OK;
}
