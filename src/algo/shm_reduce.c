/*
 * shm_reduce.c -- reduction to a root through shared memory.  Small: every
 * rank stages its input and the root reduces them all.  Large: as the
 * chunked all-reduce, every rank reduces its share into the result slot,
 * and only the root copies it out.
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static int reads_small(const xc__shm_op_t *o, int j) { (void)j; return o->me == o->a.root; }
static int reads_all(const xc__shm_op_t *o, int j) { (void)o, (void)j; return 1; }

static void stage(xc__shm_op_t *o, uint64_t k, char *slot)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    memcpy(slot, (const char *)o->a.sbuf + off * o->es, n * o->es);
}

static void out_small(xc__shm_op_t *o, uint64_t k)
{
    if (o->me != o->a.root) return;
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    if (!n) return;
    const void *srcs[XC__SHM_MAX_RANKS];
    for (int j = 0; j < o->L; j++) srcs[j] = xc__shm_src(o, j, xc__shm_g(o, k));
    char *dst = (char *)o->a.rbuf + off * o->es;
    xc__shm_reduce(o, dst, srcs, o->L, n);
    xc__reduce_finalize(dst, n, o->a.dtype, o->a.op, o->L);
}

static void mid(xc__shm_op_t *o, uint64_t k)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    size_t so, sc;
    xc__block(n, o->L, o->me, &so, &sc);
    if (!sc) return;
    uint64_t g = xc__shm_g(o, k);
    const void *srcs[XC__SHM_MAX_RANKS];
    for (int j = 0; j < o->L; j++) srcs[j] = xc__shm_slot(o->shm, j, g) + so * o->es;
    char *dst = xc__shm_result(o->shm, g) + so * o->es;
    xc__shm_reduce(o, dst, srcs, o->L, sc);
    xc__reduce_finalize(dst, sc, o->a.dtype, o->a.op, o->L);
}

static void out_large(xc__shm_op_t *o, uint64_t k)
{
    if (o->me != o->a.root) return;
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    memcpy((char *)o->a.rbuf + off * o->es, xc__shm_result(o->shm, xc__shm_g(o, k)), n * o->es);
}

static const xc__shm_coll_t small = {nchunks, reads_small, stage, NULL, out_small};
static const xc__shm_coll_t large = {nchunks, reads_all, stage, mid, out_large};

xc_result_t xc__build_shm_reduce(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    size_t es = xc_dtype_size(a->dtype);
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, es, 1, &tiny);
    if (tiny || a->count * es <= xc__shm_one_shot_max(comm->size))
        return xc__shm_op_init(comm, op, a, &small, tiny ? ce : a->count ? a->count : 1, tiny);
    return xc__shm_op_init(comm, op, a, &large, ce, 0);
}
