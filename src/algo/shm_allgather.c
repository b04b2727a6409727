/*
 * shm_allgather.c -- all-gather through shared memory: each rank stages
 * chunk k of its block; every rank copies every staged chunk into place
 * (its own straight from its send buffer).
 */
#include "shm_common.h"

static uint64_t nchunks(const xc__shm_op_t *o) { return xc__shm_nchunks(o->a.count, o->ce); }
static int reads_all(const xc__shm_op_t *o, int j) { (void)o, (void)j; return 1; }


static void out(xc__shm_op_t *o, uint64_t k)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    char *rb = o->a.rbuf;
    for (int j = 0; j < o->L; j++) {
        char *dst = rb + ((size_t)j * o->a.count + off) * o->es;
        const char *src = j == o->me ? (const char *)o->a.sbuf + off * o->es
                                     : xc__shm_src(o, j, xc__shm_g(o, k));
        if (dst != src) memcpy(dst, src, n * o->es);
    }
}

static const xc__shm_coll_t vt = {nchunks, reads_all, xc__shm_stage_input, NULL, out};

xc_result_t xc__build_shm_allgather(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    int tiny;
    size_t ce = xc__shm_ce(comm, a->count, xc_dtype_size(a->dtype), 1, &tiny);
    return xc__shm_op_init(comm, op, a, &vt, ce, tiny);
}
