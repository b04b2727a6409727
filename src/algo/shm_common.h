/*
 * shm_common.h -- small helpers shared by the shared-memory collectives.
 */
#ifndef XC_SHM_COMMON_H
#define XC_SHM_COMMON_H

#include "../reduce/reduce.h"
#include "shm_coll.h"

#include <string.h>

static inline uint64_t xc__shm_g(const xc__shm_op_t *o, uint64_t k) { return o->base + k + 1; }

/* The kind table's common entries: chunks of the count, a single round, and
 * "reads every rank's stage". */
static inline uint64_t xc__shm_op_nchunks(const xc__shm_op_t *o)
{
    return xc__shm_nchunks(o->a.count, o->ce);
}
static inline uint64_t xc__shm_one(const xc__shm_op_t *o) { (void)o; return 1; }
static inline int xc__shm_reads_all(const xc__shm_op_t *o, int j) { (void)o, (void)j; return 1; }

/* dst = srcs[0] op ... op srcs[n-1] over `count` elements, any n >= 1,
 * left to right (so every rank computing it gets the same bits, and the
 * same as deterministic mode's exchange: xc__reduce_many). */
static inline void xc__shm_reduce(const xc__shm_op_t *o, void *dst, const void **srcs, int n,
                                  size_t count)
{
    xc__reduce_many(dst, srcs, n, count, o->a.dtype, o->a.op);
}

/* Copy a piece of this rank's input into its slot, the way the
 * operation writes (transport/wcopy.h). */
static inline void xc__shm_put(xc__shm_op_t *o, char *dst, const char *src, size_t bytes)
{
    xc__wcopy(dst, src, bytes, o->nt);
    o->staged = bytes < UINT32_MAX - o->staged ? o->staged + (uint32_t)bytes : UINT32_MAX;
}

/* Stage chunk k of each of the L blocks (of o->a.count elements) of the
 * input, packed block after block, but the own block (this rank reads it
 * from its input, xc__shm_block_src; its place in the slot is left as it
 * is): reduce-scatter and all-to-all. */
static inline void xc__shm_stage_blocks(xc__shm_op_t *o, uint64_t k, char *slot)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    const char *in = o->a.sbuf;
    if (!n) return; /* empty operations may pass NULL buffers */
    for (int b = 0; b < o->L; b++)
        if (b != o->me)
            xc__shm_put(o, slot + (size_t)b * n * o->es,
                        in + ((size_t)b * o->a.count + off) * o->es, n * o->es);
}

/* Chunk k of rank j's staged block `me` -- for j == me straight from the
 * input (never staged: xc__shm_stage_blocks), n elements at `off`. */
static inline const char *xc__shm_block_src(const xc__shm_op_t *o, int j, uint64_t k, size_t off,
                                            size_t n)
{
    if (j == o->me) return (const char *)o->a.sbuf + ((size_t)o->me * o->a.count + off) * o->es;
    return xc__shm_src(o, j, xc__shm_g(o, k)) + (size_t)o->me * n * o->es;
}

/* Single copy: publish the send buffer's address instead of staging. */
static inline void xc__shm_stage_addr(xc__shm_op_t *o, uint64_t k, char *slot)
{
    (void)k;
    xc__shm_put_addr(o, slot, o->a.sbuf, xc__shm_blocks(&o->a, o->L) * o->a.count * o->es);
}

/* Single-copy reductions (`kind`: XC__SHM_RED_*)
 * of `bytes` in all: from xc__shm_cma_reduce_min (below, the staged
 * pipeline's cache-resident chunks win) and XCOLL_SHM_CMA_MIN_KB (the
 * communicator's scratch, comm->cma_tmp, comes with comm->cma). */
static inline int xc__shm_use_cma_reduce(xc_comm_t *comm, size_t bytes, int kind)
{
    size_t min = xc__shm_cma_reduce_min(kind, comm->size, comm->oversub,
                                        (size_t)comm->cfg.shm_cma_min_kb * 1024);
    return bytes >= min && xc__shm_use_cma(comm, bytes);
}

/* One piece of a single-copy reduction: op over ranks of the n (at most
 * XC__SHM_CMA_PIECE bytes) elements at element offset `eoff` of every
 * rank's input -- the own one read in place, the others pulled with
 * process_vm_readv into the scratch -- in rank order, finalised, into dst;
 * dst NULL: into the scratch's first piece.  dst may be exactly the own
 * input piece (the kernels allow exact aliasing: every element is read
 * before it is written).  Returns where the result is, NULL if a read
 * failed (o->err). */
static inline char *xc__shm_cma_reduce_piece(xc__shm_op_t *o, char *dst, size_t eoff, size_t n)
{
    const void *srcs[XC__SHM_MAX_RANKS];
    for (int j = 0, t = 0; j < o->L; j++) {
        if (j == o->me) {
            srcs[j] = (const char *)o->a.sbuf + eoff * o->es;
            continue;
        }
        char *tmp = o->tmp + (size_t)t++ * XC__SHM_CMA_PIECE;
        xc__shm_cma_read(o, j, 0, eoff * o->es, tmp, n * o->es);
        srcs[j] = tmp;
    }
    if (o->err) return NULL;
    if (!dst) dst = o->tmp; /* exactly the first peer's piece */
    xc__shm_reduce(o, dst, srcs, o->L, n);
    xc__reduce_finalize(dst, n, o->a.dtype, o->a.op, o->L);
    return dst;
}

/* Single-copy reduction: dst[0..count) = op over ranks of the `count`
 * elements at element offset `eoff` of every rank's input, piece by piece
 * (see above).  dst may be the own input at eoff (in place): piece p of it
 * is written only after it has been read. */
static inline void xc__shm_cma_reduce(xc__shm_op_t *o, char *dst, size_t eoff, size_t count)
{
    size_t piece = XC__SHM_CMA_PIECE / o->es;
    for (size_t p = 0; p < count && !o->err; p += piece) {
        size_t n = count - p < piece ? count - p : piece;
        xc__shm_cma_reduce_piece(o, dst + p * o->es, eoff + p, n);
    }
}

/* Stage chunk k of a contiguous input. */
static inline void xc__shm_stage_input(xc__shm_op_t *o, uint64_t k, char *slot)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    if (n) xc__shm_put(o, slot, (const char *)o->a.sbuf + off * o->es, n * o->es);
}

/* Reduce chunk k of every rank's staged input (whole, in rank order) into
 * `dst`, then finalise (one-shot all-reduce, reduce).  `own`: this rank's
 * input, read in place instead of its staged copy (a reduce's root, which
 * stages nothing since nobody reads it); dst may be `own` (in place). */
static inline void xc__shm_reduce_all(xc__shm_op_t *o, uint64_t k, char *dst, const char *own)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    if (!n) return;
    const void *srcs[XC__SHM_MAX_RANKS];
    for (int j = 0; j < o->L; j++) srcs[j] = xc__shm_src(o, j, o->base + k + 1);
    if (own) srcs[o->me] = own + off * o->es;
    if (!o->ll)
        for (int j = 0; j < o->L; j++)
            if (j != o->me) xc__shm_prefetch(srcs[j], n * o->es);
    dst += off * o->es;
    xc__shm_reduce(o, dst, srcs, o->L, n);
    xc__reduce_finalize(dst, n, o->a.dtype, o->a.op, o->L);
}

/* This rank's 1/L share of chunk k, reduced from every rank's slot into the
 * shared result slot (chunked all-reduce and reduce). */
static inline void xc__shm_reduce_share(xc__shm_op_t *o, uint64_t k)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    size_t so, sc;
    xc__block(n, o->L, o->me, &so, &sc);
    if (!sc) return;
    uint64_t g = o->base + k + 1;
    const void *srcs[XC__SHM_MAX_RANKS];
    for (int j = 0; j < o->L; j++) srcs[j] = xc__shm_slot(o->shm, j, g) + so * o->es;
    char *dst = xc__shm_result(o->shm, g) + so * o->es;
    xc__shm_reduce(o, dst, srcs, o->L, sc);
    xc__reduce_finalize(dst, sc, o->a.dtype, o->a.op, o->L);
}

/* Copy the result slot's chunk k into the receive buffer. */
static inline void xc__shm_copy_result(xc__shm_op_t *o, uint64_t k)
{
    size_t off, n = xc__shm_chunk(o->a.count, o->ce, k, &off);
    if (n)
        xc__copy((char *)o->a.rbuf + off * o->es, xc__shm_result(o->shm, o->base + k + 1),
                 n * o->es);
}

/* XC__SHM_LINES_INPUT where a staged payload of `staged` bytes fits the
 * flagged lines, else 0. */
static inline int xc__shm_lines_for(const xc_comm_t *comm, size_t staged)
{
    return staged <= xc__shm_ll_max(comm->size) ? XC__SHM_LINES_INPUT : 0;
}
/* A reduce of `bytes` staged (not single copy) goes in ring entries
 * (xc__shm_rooted_ce's chunks): one within an entry that one shot takes,
 * or one past the flagged lines whose root reads the others' chunks.  The
 * builder (shm_reduce.c) and the calibration's warm-up (measure.c) ask
 * this one rule. */
static inline int xc__shm_reduce_in_ring(const xc_comm_t *comm, size_t bytes)
{
    size_t entry = comm->shm->slot_bytes / XC__SHM_RING;
    return (bytes <= xc__shm_one_shot_max(comm->size) && bytes <= entry) ||
           (!xc__shm_lines_for(comm, bytes) && xc__shm_reduce_root_reads(comm->size, comm->oversub));
}
/* Geometry shared by most collectives: one chunk in the flagged lines
 * (`lines` XC__SHM_LINES_INPUT) when the whole staged payload fits them,
 * else chunks of `per` elements through the slots (`lines` 0). */
static inline size_t xc__shm_ce(const xc_comm_t *comm, size_t count, size_t es, size_t blocks,
                                int *lines)
{
    size_t staged = count * es * blocks;
    *lines = xc__shm_lines_for(comm, staged);
    if (*lines) return count ? count : 1;
    size_t ce = comm->shm->slot_bytes / (es * blocks);
    ce &= ~(size_t)15; /* keep chunk edges vector- and line-friendly */
    return ce ? ce : 1;
}

#endif
