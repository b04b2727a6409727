/*
 * shm_common.h -- small helpers shared by the shared-memory collectives.
 */
#ifndef XC_SHM_COMMON_H
#define XC_SHM_COMMON_H

#include "../reduce/reduce.h"
#include "shm_coll.h"

#include <string.h>

static inline uint64_t xc__shm_g(const xc__shm_op_t *o, uint64_t k) { return o->base + k + 1; }

/* dst = srcs[0] op ... op srcs[n-1] over `count` elements, any n >= 1,
 * left to right (so every rank computing it gets the same bits). */
static inline void xc__shm_reduce(const xc__shm_op_t *o, void *dst, const void **srcs, int n,
                                  size_t count)
{
    int first = n < XC__REDUCE_MAX_K ? n : XC__REDUCE_MAX_K;
    xc__reduce_n(dst, srcs, first, count, o->a.dtype, o->a.op);
    for (int i = first; i < n; i += XC__REDUCE_MAX_K - 1) {
        const void *more[XC__REDUCE_MAX_K];
        int m = n - i < XC__REDUCE_MAX_K - 1 ? n - i : XC__REDUCE_MAX_K - 1;
        more[0] = dst;
        memcpy(more + 1, srcs + i, (size_t)m * sizeof *srcs);
        xc__reduce_n(dst, more, m + 1, count, o->a.dtype, o->a.op);
    }
}

/* Geometry shared by most collectives: `tiny` when the whole staged
 * payload fits the inline area, else chunks of `per` elements. */
static inline size_t xc__shm_ce(const xc_comm_t *comm, size_t count, size_t es, size_t blocks,
                                int *tiny)
{
    size_t staged = count * es * blocks;
    *tiny = staged <= XC__SHM_INLINE;
    if (*tiny) return count ? count : 1;
    size_t ce = comm->shm->slot_bytes / (es * blocks);
    ce &= ~(size_t)15; /* keep chunk edges vector- and line-friendly */
    return ce ? ce : 1;
}

#endif
