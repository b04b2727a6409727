/*
 * shm_allreduce.c -- all-reduce through the node's shared memory.
 *
 * Small (one shot): every rank stages its whole input (inline in its
 * control line up to 24 bytes) and every rank reduces all inputs itself, in
 * rank order -- one synchronisation, identical bits everywhere.  On 2 ranks
 * of an uncrowded node one shot per slot-sized chunk at every size
 * (xc__shm_allreduce_one_shot_all).
 * Chunked: chunks of a staging slot; each rank reduces its 1/L share of the
 * chunk from every rank's slot into the shared result slot (reading each
 * input once, one store), then every rank copies the whole result chunk
 * out.  Per rank and byte: copy-in (1 read + 1 write), reduce (1 read +
 * 1/L write), copy-out (1 read + 1 write).
 * Single copy (large, when ranks may read each other's memory): each rank
 * publishes its input and output addresses; rank r pulls block r of every
 * peer's input (process_vm_readv), reduces it with its own straight into
 * block r of its output, and once all blocks are done pulls the other
 * blocks from their owners' outputs.  Per rank and byte about 2 reads and
 * 1.5 writes instead of 3 and 2.5, and three synchronisations in all.
 */
#include "shm_common.h"

static void out_one_shot(xc__shm_op_t *o, uint64_t k) { xc__shm_reduce_all(o, k, o->a.rbuf, NULL); }

static void stage_addrs(xc__shm_op_t *o, uint64_t k, char *slot)
{
    (void)k;
    xc__shm_put_addr(o, slot, o->a.sbuf, o->a.count * o->es);
    xc__shm_put_addr(o, slot + 8, o->a.rbuf, o->a.count * o->es);
}

/* Block `me` of the result, into the own output. */
static void mid_direct(xc__shm_op_t *o, uint64_t k)
{
    (void)k;
    size_t bo, bc;
    xc__block(o->a.count, o->L, o->me, &bo, &bc);
    xc__shm_cma_reduce(o, (char *)o->a.rbuf + bo * o->es, bo, bc);
}

/* Every other block, from its owner's output. */
static void out_direct(xc__shm_op_t *o, uint64_t k)
{
    (void)k;
    for (int i = 1; i < o->L; i++) {
        int j = (o->me + i) % o->L;
        size_t bo, bc;
        xc__block(o->a.count, o->L, j, &bo, &bc);
        xc__shm_cma_read(o, j, 1, bo * o->es, (char *)o->a.rbuf + bo * o->es, bc * o->es);
    }
}

static const xc__shm_coll_t one_shot = {xc__shm_op_nchunks, xc__shm_reads_all,
                                        xc__shm_stage_input, NULL, out_one_shot, 0};
static const xc__shm_coll_t chunked = {xc__shm_op_nchunks, xc__shm_reads_all,
                                       xc__shm_stage_input, xc__shm_reduce_share,
                                       xc__shm_copy_result, 0};
static const xc__shm_coll_t direct = {xc__shm_one, xc__shm_reads_all,
                                      stage_addrs, mid_direct, out_direct, 1};

/* On 2 uncrowded ranks: single copy where the communicator's profile
 * prices it below one shot per chunk (xc__model_shm_pair_direct). */
static int pair_direct(const xc_comm_t *comm, const xc__args_t *a)
{
    const xc__model_topo_t *t = xc__algo_topo(comm);
    if (comm->shm_one_shot) return comm->shm_one_shot == 2;
    if (!t) return 0;
    xc__model_call_t call = {XC_COLL_ALLREDUCE, a->count, a->dtype, a->op, 0};
    return xc__model_shm_pair_direct(comm->profile, t, &call);
}

/* Does the staged all-reduce of `bytes` take the chunked form (a reduction
 * phase between staging and copy-out)?  Not on 2 uncrowded ranks, nor
 * where the whole input fits the flagged lines or a one-shot slot. */
static int chunked_form(const xc_comm_t *comm, size_t bytes)
{
    return !xc__shm_allreduce_one_shot_all(comm->size, comm->oversub) &&
           bytes > xc__shm_ll_max(comm->size) &&
           (bytes > xc__shm_one_shot_max(comm->size) || bytes > comm->shm->slot_bytes);
}

/* The express path (shm_coll.c) runs one-shot builds only: a call whose
 * build would be chunked (more than 4 KiB on more than 4 ranks, 16 KiB on
 * 3-4) is refused before it is built, not after. */
int xc__express_shm_allreduce(xc_comm_t *comm, const xc__algo_t *algo, const xc__args_t *a,
                              const xc__desc_t *d, uint64_t seq)
{
    if (chunked_form(comm, a->count * xc__dtype_size(a->dtype))) return XC__EXPRESS_NO;
    return xc__shm_express_all(comm, algo, a, d, seq);
}

xc_result_t xc__build_shm_allreduce(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc__dtype_size(a->dtype), bytes = a->count * es;
    int all = xc__shm_allreduce_one_shot_all(comm->size, comm->oversub);
    if (xc__shm_use_cma_reduce(comm, bytes, XC__SHM_RED_ALL) ||
        (all && comm->cma && pair_direct(comm, a))) {
        XC_CHECK(xc__shm_op_init(comm, op, a, &direct, a->count, XC__SHM_LINES_ADDRS));
        ((xc__shm_op_t *)op->privbuf)->tmp = comm->cma_tmp;
        return XC_OK;
    }
    int lines;
    size_t ce = xc__shm_ce(comm, a->count, es, 1, &lines);
    if (chunked_form(comm, bytes)) return xc__shm_op_init(comm, op, a, &chunked, ce, 0);
    /* One shot of the whole input where it fits the lines or a slot, else
     * (2 uncrowded ranks) one shot per slot-sized chunk. */
    if (lines || (bytes <= xc__shm_one_shot_max(comm->size) && bytes <= comm->shm->slot_bytes))
        return xc__shm_op_init(comm, op, a, &one_shot, lines ? ce : a->count ? a->count : 1, lines);
    return xc__shm_op_init(comm, op, a, &one_shot, ce, 0);
}
