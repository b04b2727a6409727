/*
 * shm_coll.h -- shared-memory-native collectives for communicators whose
 * ranks all share one node.
 *
 * The data moves in chunks through each rank's staging slots (shm.h).  For
 * chunk k (global number g) a rank
 *   0. makes sure its slot for g is free (every reader has finished chunk
 *      g - NSLOT; usually already known from the last chunk, see below),
 *   1. stages its contribution (copy-in) and publishes in = g,
 *   2. waits for the `in` of the ranks whose chunk it reads (and, at the
 *      first chunk of an operation, checks their description: a
 *      disagreement is XC_ERR_MISMATCH on the rank that sees it, broadcast
 *      to the others through the segment's poison word),
 *   3. optionally reduces its share of the chunk from every rank's slot into
 *      the shared result slot and publishes mid = g, then waits for every
 *      rank's mid,
 *   4. copies (or reduces) what it needs into the user's buffer and
 *      publishes out = g.
 * Two slots let a fast rank stage chunk k+1 while a slow one still reads
 * chunk k.  A rank that has seen every other rank's `in` reach g-1 knows
 * they all finished reading g-2 (a rank stages a chunk only after reading
 * the previous one), so step 0 costs nothing in the common case.
 * Rooted operations staged chunk by chunk (bcast, a reduce whose root
 * reads) go further: each slot is cut into XC__SHM_RING entries and their
 * chunk g (at most an entry: xc__shm_rooted_ce) uses entry (g / 2) % RING
 * of slot g % 2, so a rank may run 2 * RING chunks ahead of the slowest
 * reader -- with more ranks than cores a rank then does several small
 * operations per time slice instead of handing the core over at every
 * one, and a large one's copy-in of chunk k+1 overlaps the take of k.
 *
 * Each collective is a small vtable (one file each, shm_*.c) of chunk
 * geometry and the copy-in / reduce / copy-out of one chunk.
 */
#ifndef XC_SHM_COLL_H
#define XC_SHM_COLL_H

#include "../core/promote.h"
#include "../transport/shm.h"
#include "algos.h"

#include <string.h>

typedef struct xc__shm_op xc__shm_op_t;

typedef struct xc__shm_coll {
    /* Number of chunks (>= 1, also for empty operations). */
    uint64_t (*nchunks)(const xc__shm_op_t *o);
    /* Does this rank read rank j's staged chunks? */
    int (*reads)(const xc__shm_op_t *o, int j);
    /* Copy this rank's part of chunk k into `slot` (NULL: stages nothing). */
    void (*stage)(xc__shm_op_t *o, uint64_t k, char *slot);
    /* Reduce this rank's share of chunk k into the result slot (NULL: no
     * reduction phase). */
    void (*mid)(xc__shm_op_t *o, uint64_t k);
    /* Deliver chunk k into the user's buffers (NULL: nothing).  Sets
     * o->err (an errno) and o->err_peer if it cannot. */
    void (*out)(xc__shm_op_t *o, uint64_t k);
    /* Single copy: the ranks read (process_vm_readv) or write
     * (process_vm_writev) each other's user buffers directly, so a rank may
     * not return before every peer is done with its buffer: wait for all
     * `out` after the chunk. */
    int wait_out;
} xc__shm_coll_t;

struct xc__shm_op {
    const xc__shm_coll_t *vt;
    xc__shm_t *shm;
    int L, me;
    xc__args_t a;
    size_t es;          /* element size */
    size_t ce;          /* elements per chunk (per block, for blocked layouts) */
    int ll;             /* payload carried in the flagged lines (shm.h) */
    int nt;             /* this rank's staged chunks written non-temporally
                         * (transport/wcopy.h) */
    size_t ll_bytes;    /* their payload: each rank's staged bytes less ll_gap */
    size_t ll_gap;      /* blocked layouts (all-to-all, reduce-scatter): the
                         * bytes of the block a rank sends itself, which it
                         * leaves out of its lines (rank j's lines carry its
                         * staging less block j); 0: none */
    int ring;           /* payload in a slot's ring entry (<= slot / XC__SHM_RING) */
    uint32_t t0;        /* the operation's start, low bits of the time-stamp
                         * counter (0: not timed; xc__wcopy_begin) */
    uint64_t base;      /* global chunk number before this operation */
    uint64_t n;         /* this rank's shared-memory operation number (its
                         * description ring entry: n % XC__SHM_DESC_RING) */
    uint64_t k, nk;
    uint64_t need;      /* phase 0: the `out` every other rank must reach */
    int phase;
    uint32_t staged;    /* bytes this rank staged, up to UINT32_MAX */
    uint64_t hash;      /* of (seq, description) */
    int err, err_peer;  /* a failed single-copy read or write */
    char *tmp;          /* single-copy reductions: (L-1) pieces of scratch */
    size_t share;       /* cooperative single-copy broadcast: bytes the root
                         * writes into each other rank (shm_bcast.c) */
    int promote;        /* XCOLL_SHM_PROMOTE (xc__shm_put_addr) */
    int fast;           /* this rank's input is on huge pages (xc__shm_op_offer;
                         * published in its description) */
    uint64_t xfer;      /* bytes moved single copy (stats.single_copy_bytes) */
    /* xc__shm_op_offer: the single-copy way this staged operation takes
     * when every rank's input was on huge pages in the last one like it */
    const xc__shm_coll_t *alt;
};

/* Reductions go single-copy from this many bytes (below, the staged
 * pipeline's cache-resident chunks win).  A reduce to a root on 2 ranks of
 * an uncrowded node does not (xc__shm_reduce_root_reads): there the root
 * reduces the other rank's staged chunks with its own input while that
 * rank stages the next one, which measured faster than the single copy at
 * 64 KiB-2 MiB (4.1 against 10.2 us at 64 KiB, 54-58 against 78-86 us at
 * 1 MiB) and no slower to 64 MiB (bench/RESULTS.md, sixteenth session).
 * Nor does one on a crowded node, where the root reads too: the other
 * ranks stage and leave, one sync a chunk instead of the chunked form's
 * two and its copy-out, and no rank waits for another's share -- 3, 4 and
 * 8 ranks on 2 cores, 32 KiB-512 KiB 1.1-2.7x faster by the mean, and
 * 1-16 MiB 1.1-1.7x faster than the single copy (bench/RESULTS.md,
 * forty-second session).  Nor, on a crowded node, an all-reduce or a
 * reduce-scatter: their chunked form, whose chunks stay in the caches
 * of the two cores, measured 1.2-1.6x faster than the single copy at
 * 1-2 MiB on 4 ranks on 2 cores, level or faster to 64 MiB, and
 * 1.5-2.8x faster at 1-16 MiB on 8 (its slot writes measured, where the
 * vCPUs sat far apart too; fifty-third session).
 * The runtime and the cost model use this one rule; `crowded` is the
 * agreed comm->oversub. */
#define XC__SHM_CMA_REDUCE_MIN (1024 * 1024)
/* Two ranks of an uncrowded node, each on a core of its own: the case
 * the pair rules below (reduce, all-reduce, broadcast) measured. */
static inline int xc__shm_pair(int nranks, int crowded)
{
    return nranks == 2 && !crowded;
}
static inline int xc__shm_reduce_root_reads(int nranks, int crowded)
{
    return xc__shm_pair(nranks, crowded) || (crowded && nranks > 1);
}
/* An all-reduce on 2 ranks of an uncrowded node runs one shot per
 * slot-sized chunk (each rank stages the chunk, both reduce both inputs):
 * one sync per chunk instead of the halves' two and their copy-out --
 * 1.15-2.1x faster from 32 KiB to 8 MiB, in place and not (bench/RESULTS.md,
 * sixteenth session).  Not single copy either (unless XCOLL_SHM_CMA_MIN_KB
 * is 0), except where the cost model prices that lower from
 * XC__SHM_PAIR_DIRECT_MIN (xc__model_shm_pair_direct, nineteenth session:
 * machines differ).  Measured one
 * shot per chunk / single copy, us, reused and fresh inputs: 128 KiB 18.8 /
 * 20.2, 17.7 / 16.4; 256 KiB 34.8 / 24.1, 34.5 / 30.6; 512 KiB 72.0 /
 * 47.5, 69.5 / 59.5 (bench/RESULTS.md, twenty-fifth session; the floor
 * was 1 MiB, XC__SHM_CMA_REDUCE_MIN). */
#define XC__SHM_PAIR_DIRECT_MIN (256 * 1024)
static inline int xc__shm_allreduce_one_shot_all(int nranks, int crowded)
{
    return xc__shm_pair(nranks, crowded);
}
/* Whether a rank's slot writes for `coll` among `nranks` are measured
 * (transport/wcopy.h): where every rank stages and reads, and in a rooted
 * operation between two ranks (timed on its reader); not in a rooted one
 * among more.  The runtime (shm_coll.c) and the calibration's probes
 * (measure.c) ask this one rule. */
static inline int xc__shm_way_measured(xc_coll_t coll, int nranks)
{
    if (coll == XC_COLL_BCAST || coll == XC_COLL_REDUCE) return nranks == 2;
    return 1;
}
/* The reduction asking xc__shm_cma_reduce_min: reduce-scatter, reduce,
 * all-reduce. */
enum { XC__SHM_RED_SCATTER = 0, XC__SHM_RED_ROOTED = 1, XC__SHM_RED_ALL = 2 };
static inline size_t xc__shm_cma_reduce_min(int kind, int nranks, int crowded, size_t cfg_min)
{
    if (!cfg_min) return 0;
    if (crowded) return SIZE_MAX; /* XC__SHM_CMA_REDUCE_MIN: every reduction staged there */
    if (kind == XC__SHM_RED_ROOTED && xc__shm_reduce_root_reads(nranks, crowded)) return SIZE_MAX;
    if (kind == XC__SHM_RED_ALL && xc__shm_allreduce_one_shot_all(nranks, crowded)) return SIZE_MAX;
    /* A reduce-scatter on 2 ranks of an uncrowded node: from the
     * XCOLL_SHM_CMA_MIN_KB input (staged, each rank copies both its blocks
     * into its slot).  64 KiB-512 KiB inputs, us staged / single copy:
     * fresh 6.55 / 5.61, 12.4 / 9.76, 17.4 / 15.2, 34.5 / 29.1; reused 6.44
     * / 3.31 ... 34.9 / 17.4; 16 KiB fresh 2.03 / 2.41 (bench/RESULTS.md,
     * twenty-fourth session). */
    if (kind == XC__SHM_RED_SCATTER && xc__shm_pair(nranks, crowded)) return cfg_min;
    return XC__SHM_CMA_REDUCE_MIN;
}

/* Offer the staged operation `op` (just made by xc__shm_op_init) the
 * single-copy way `vt` (one chunk of all `count` elements, the addresses
 * in the flagged lines: XC__SHM_LINES_ADDRS) for when every
 * rank's input reads fast: `src` (`bytes`) is this rank's input, which
 * peers would read, in blocks of `block` bytes -- offered from
 * XC__SHM_FAST_MIN (and XCOLL_SHM_CMA_MIN_KB), not on a crowded node.  The ranks switch together, at the start of an
 * operation, when the shared-memory operation just before it was one like
 * it (the same description, offered too) in which every rank published
 * that its input was on huge pages (core/promote.c xc__promoted) -- each
 * rank read the others' descriptions of it before it could finish, so all
 * see the same.  The input counts as published for promotion meanwhile.
 * Where staging won on ordinary pages (the measured ceiling, the floors),
 * single copy of huge pages measured faster: docs/shm.md "Agreeing on
 * single copy for fast buffers". */
XC__HIDDEN void xc__shm_op_offer(xc_comm_t *comm, xc__op_t *op, const xc__shm_coll_t *vt,
                                 const void *src, size_t bytes, size_t block);
/* Blocks from this size are offered (xc__shm_op_offer): 2 ranks, medians
 * us, staged / single copy, all-gather of 1 MiB blocks 84-91 / 63-69 with
 * promoted malloc'd inputs; of 256 KiB total on huge pages staged led
 * (10-11 / 15) (bench/RESULTS.md, thirty-fourth session). */
#define XC__SHM_FAST_MIN (512 * 1024)

/* Single-copy (CMA) helpers: publish the address of a buffer of `bytes`
 * that peers will read or write in the flagged lines (a range published
 * again and again goes on huge pages: core/promote.c); read `len` bytes at
 * `off` of rank j's published buffer into `dst`. */
static inline void xc__shm_put_addr(const xc__shm_op_t *o, char *slot, const void *buf,
                                    size_t bytes)
{
    uint64_t a = (uint64_t)(uintptr_t)buf;
    memcpy(slot, &a, sizeof a);
    xc__promote(buf, bytes, o->promote);
}
/* Read from the `which`-th address (0, 1 or 2) rank j published. */
XC__HIDDEN void xc__shm_cma_read(xc__shm_op_t *o, int j, int which, size_t off, void *dst,
                                 size_t len);
/* Write `len` bytes of `src` at `off` of the `which`-th address rank j
 * published (process_vm_writev); a failure is reported as a failed read
 * is (o->err, o->err_peer). */
XC__HIDDEN void xc__shm_cma_write(xc__shm_op_t *o, int j, int which, size_t off, const void *src,
                                  size_t len);
/* A broadcast on 2 ranks of an uncrowded node stays staged below this
 * many bytes (also above XCOLL_SHM_CMA_MIN_KB, unless that is 0) until the
 * profile has measured where single copy starts to lead (`measured`, the
 * profile's shm_bcast_cma_min): the root runs ahead by ring entries, and
 * on the sixteenth session's AMD VM the staged copy measured 2.4-2.5
 * against 4.8 us at 64 KiB and 4.3-4.5 against 5.7 at 128 KiB, the
 * cooperative single copy winning from 256 KiB (bench/RESULTS.md); on the
 * forty-sixth session's, single copy led from 32-64 KiB.  The runtime and
 * the cost model use this one rule. */
#define XC__SHM_BCAST_CMA_MIN_2 (256 * 1024)
/* `cfg_min`: XCOLL_SHM_CMA_MIN_KB in bytes; 0 asks for single copy at
 * every size (so that tests meet every count), here and in
 * xc__shm_cma_reduce_min.  On a crowded node the broadcast stays staged
 * at every size: readers taking turns on the cores each read the root's
 * whole buffer while the root, which may not return before the last of
 * them, holds its own; staged, the root runs a slot ahead and each reader
 * copies out of the cache.  4 ranks on 2 cores, GB/s single copy /
 * staged: 64 KiB 5.0 / 15.8, 1 MiB 3.6 / 4.6, 16 MiB 4.2 / 5.1 (Open MPI
 * 4.3-4.7 at 1-16 MiB); 8 ranks 1.7 / 15.5, 1.05 / 2.7, 1.44 / 1.32
 * (bench/RESULTS.md, nineteenth session).  The all-gather stays staged
 * there too (xc__shm_allgather_cma_min); reduce keeps its single copy. */
static inline size_t xc__shm_bcast_cma_min(int nranks, int crowded, size_t cfg_min,
                                           size_t measured)
{
    if (!cfg_min) return 0;
    if (crowded) return SIZE_MAX;
    if (!xc__shm_pair(nranks, crowded)) return 0;
    return measured ? measured : XC__SHM_BCAST_CMA_MIN_2;
}

/* An all-to-all on 2 ranks of an uncrowded node reads its peer's block
 * single copy from a quarter of `cfg_min` (XCOLL_SHM_CMA_MIN_KB in bytes:
 * 16 KiB blocks by default).  Staged, each rank copies both its blocks
 * into its slot and the peer copies one out: 2 ranks, all-to-all of 32 /
 * 64 KiB, µs staged / single copy, fresh inputs 3.76 / 3.28, 7.15 / 5.05,
 * reused 3.66 / 1.94, 6.69 / 2.82 (8 KiB blocks: fresh 1.96 / 2.18).
 * Crowded, single copy from 16 KiB blocks was 1.3-2x slower with fresh
 * inputs (4 ranks on 2 cores 64 KiB: 16.2 / 22.2; 8 ranks 128 KiB: 43.6
 * / 86.5); bench/RESULTS.md, twenty-fourth session.
 * Crowded, from blocks of 1 MiB / L (at least `cfg_min`; none forced by
 * `cfg_min` 0): each rank's input is read by every other and its owner
 * may not return before the last of them, which on shared cores costs a
 * turn of the scheduler; staging wins until the input is ~1 MiB (4 / 8
 * ranks on 2 cores, medians us single copy / staged: 4 ranks, 64 / 128 /
 * 256 KiB blocks 64-89 / 55-64, 102-114 / 96-99, 127-209 / 168-182; 8
 * ranks, 64 / 128 KiB blocks 276 / 248-256, 401-524 / 496-562;
 * bench/RESULTS.md, thirty-ninth session). */
static inline size_t xc__shm_alltoall_cma_min(int nranks, int crowded, size_t cfg_min)
{
    if (xc__shm_pair(nranks, crowded)) return cfg_min / 4;
    if (!crowded || !cfg_min || nranks < 1) return cfg_min;
    size_t c = ((size_t)1 << 20) / (size_t)nranks;
    return c > cfg_min ? c : cfg_min;
}

/* Whether the broadcast's root copies too: XCOLL_SHM_COOP (`cfg`: 1, 0,
 * or -1 for auto) or, by default, off a crowded node. */
static inline int xc__shm_coop(int cfg, int crowded) { return cfg >= 0 ? cfg : !crowded; }
/* Cooperative single-copy broadcast of `bytes` over L ranks: the bytes the
 * root itself writes into each other rank's buffer (the head, in whole
 * 4 KiB units) while each of them reads the rest, so that the root's core
 * copies too: (L-1) x share against bytes - share, balanced at bytes / L.
 * 0 without `coop` (XCOLL_SHM_COOP; by default off a crowded node, where
 * the root's core is someone's already).  The runtime (shm_bcast.c) and
 * the cost model use this one rule. */
static inline size_t xc__shm_bcast_share(size_t bytes, int L, int coop)
{
    if (!coop || L < 2) return 0;
    return bytes / (size_t)L & ~(size_t)4095;
}
/* The topology whose measured floors and ceiling (ag_cma_min, a2a_cma_min,
 * cma_max; bcast_cma_min) all-gather, all-to-all and the broadcast obey:
 * none before the profile, nor while the calibration probes them
 * (comm->shm_probing, measure.c). */
static inline const xc__model_topo_t *xc__shm_measured(const xc_comm_t *comm)
{
    return comm->shm_probing ? NULL : xc__algo_topo(comm);
}
/* Whether a block of `bytes` is read single copy: the ranks may read each
 * other's memory and it is not empty and at least `min` bytes (_from), or
 * at least XCOLL_SHM_CMA_MIN_KB. */
static inline int xc__shm_use_cma_from(const xc_comm_t *comm, size_t bytes, size_t min)
{
    return comm->cma && bytes >= min && bytes > 0;
}
static inline int xc__shm_use_cma(const xc_comm_t *comm, size_t bytes)
{
    return xc__shm_use_cma_from(comm, bytes, (size_t)comm->cfg.shm_cma_min_kb * 1024);
}
/* The all-gather's and all-to-all's ceiling: XCOLL_SHM_CMA_MAX_KB if given
 * (agreed), else the measured one of `t` (xc__shm_measured's cma_max; none
 * before the profile); none while the calibration probes. */
static inline size_t xc__shm_cma_ceiling(const xc_comm_t *comm, const xc__model_topo_t *t)
{
    if (comm->shm_probing) return 0;
    if (comm->cfg.shm_cma_max_kb >= 0) return (size_t)comm->cfg.shm_cma_max_kb * 1024;
    return t ? t->cma_max : 0;
}
/* The all-gather's and all-to-all's blocks: as xc__shm_use_cma_from, and
 * no larger than the ceiling (xc__shm_cma_ceiling).  Not the broadcast's: its root copies a share
 * too (xc__shm_bcast_share), and single copy kept up with staging there
 * at 16 MiB on the machine that set the ceiling (0.62-0.75 against
 * 0.64-0.68 ms) and led at 4 MiB (124-138 against 139-150 us). */
static inline int xc__shm_move_cma_from(const xc_comm_t *comm, const xc__model_topo_t *t,
                                        size_t bytes, size_t min)
{
    size_t max = xc__shm_cma_ceiling(comm, t);
    return xc__shm_use_cma_from(comm, bytes, min) && (!max || bytes <= max);
}
/* All-gather's and all-to-all's single copy start at the larger of their
 * threshold `min` and the profile's measured floor (xc__model_topo_t's
 * ag_cma_min, a2a_cma_min: the pair's; XC__SHM_AG_CMA_NEVER: never).  The
 * runtime and the model use this one rule. */
#define XC__SHM_AG_CMA_NEVER ((size_t)1 << 40)
static inline size_t xc__shm_cma_floor(size_t min, size_t measured)
{
    return measured > min ? measured : min;
}
/* An all-gather on a crowded node stays staged at every size, for the
 * broadcast's reason (each rank's block is read by all the others, taking
 * turns on the cores, and its owner may not return before the last of
 * them): 4 / 8 ranks on 2 cores (AMD EPYC VM), medians us single copy /
 * staged: 256 KiB 94-95 / 48-51, 512 KiB 92-112 / 82-84 and 366-423 /
 * 181-198, 2 MiB 190-301 / 231-249 and 806-1032 / 494-509, 8 MiB
 * 996-1325 / 983-1002 and 4193-5215 / 2837-2886 (bench/RESULTS.md,
 * thirty-fourth session; an Intel host had measured single copy as fast,
 * nineteenth).  Elsewhere the measured floor (xc__shm_cma_floor) over
 * `cfg_min` (0, as for the tests: single copy unless measured
 * otherwise).  The runtime and the cost model use this one rule. */
static inline size_t xc__shm_allgather_cma_min(int crowded, size_t cfg_min, size_t measured)
{
    if (crowded && cfg_min) return SIZE_MAX;
    return xc__shm_cma_floor(cfg_min, measured);
}

/* Entries per staging slot of ring operations: such an operation's
 * chunk g may be staged once every other rank has finished chunk
 * g - NSLOT * RING (and the last whole-slot chunk of that parity), not
 * g - NSLOT.  Ranks may then be that many operations apart, which the
 * description ring must cover (see shm_coll.c). */
#define XC__SHM_RING 4

/* Elements per chunk of a staged rooted operation (broadcast, a reduce
 * whose root reads) of `count` elements of `es` bytes.  Beyond a ring
 * entry (slot / XC__SHM_RING, 64 KiB by default) an entry's worth, so
 * that the writer runs up to NSLOT x RING chunks ahead and its copy of
 * chunk k+1 overlaps the reader's take of chunk k (with slot-sized chunks
 * a message of one slot was one chunk, staged then taken in turn).  Within
 * an entry, on a node that is not crowded, pieces of about
 * XC__SHM_ROOTED_PIECE, for the same overlap: after a barrier with fresh
 * inputs (training's case, the cost model's) a 2-rank broadcast of 32 /
 * 48 / 64 KiB took 3.4 / 5.9 / 6.5 us in one chunk and 1.8 / 2.4 / 3.0 in
 * 8 KiB pieces (back to back, where operations overlap anyway, the pieces
 * cost up to 40 %: 1.1-1.4 / 1.9-2.1 / 2.1-2.3 against 1.4-1.9 / 2.0-2.8
 * / 2.6-3.2; 4 or 16 KiB pieces were slower in one regime or the other;
 * bench/RESULTS.md, fifty-first session).  A crowded node keeps one
 * chunk: a hand-over there may cost a turn of the scheduler.  At most one
 * chunk at or below a piece.  The runtime and the cost model use this one
 * rule. */
#define XC__SHM_ROOTED_PIECE ((size_t)8 << 10)
static inline size_t xc__shm_rooted_ce(size_t slot_bytes, size_t count, size_t es, int crowded)
{
    size_t entry = slot_bytes / XC__SHM_RING, bytes = count * es;
    if (bytes <= entry) {
        if (crowded || bytes <= XC__SHM_ROOTED_PIECE || !es) return count ? count : 1;
        size_t n = (bytes + XC__SHM_ROOTED_PIECE - 1) / XC__SHM_ROOTED_PIECE;
        size_t ce = ((count + n - 1) / n + 15) & ~(size_t)15;
        return ce < count ? ce : count;
    }
    size_t ce = entry / es & ~(size_t)15;
    return ce ? ce : 1;
}

/* The staged take's probe (the profile's shm_take): a reduce of this many
 * int32 whose first chunk is the whole call -- where the root reads
 * (xc__shm_reduce_root_reads) the first chunk of a reduce of
 * XC__SHM_TAKE_BYTES (one piece on an uncrowded node, the whole call on
 * a crowded one), elsewhere XC__SHM_TAKE_BYTES.  Priced from a 32 KiB
 * reduce in four pieces, the model put the later pieces' cost on the
 * first one: its take rate came out 350-480 ps/B on an Intel VM whose
 * 8 KiB piece took ~145, and every staged collective of 1-8 KiB was
 * priced 1.5-2.5x over (the 2-rank all-reduce of 1-4 KiB went to
 * allreduce.rd, 1.5-1.7x slower; bench/RESULTS.md, fifty-sixth
 * session).  The measurement and the price
 * (cost_shm.c take_rate) use this one rule. */
#define XC__SHM_TAKE_BYTES 32768
static inline size_t xc__shm_take_probe(size_t slot_bytes, int nranks, int crowded)
{
    size_t count = XC__SHM_TAKE_BYTES / 4;
    if (!xc__shm_reduce_root_reads(nranks, crowded)) return count;
    for (;;) { /* (small slots: the first chunk of an entry's first piece) */
        size_t ce = xc__shm_rooted_ce(slot_bytes, count, 4, crowded);
        if (ce >= count) return count;
        count = ce;
    }
}

/* Ask for the lines of `n` bytes another rank just wrote (up to 8 KiB),
 * all at once: the reduction's or copy's own loads reach them one after
 * another (a 1 KiB exchange between two cores 0.95-1.0 us, 0.64-0.77 with
 * the lines asked for first). */
static inline void xc__shm_prefetch(const void *p, size_t n)
{
    if (n > 8192) n = 8192;
    for (size_t i = 0; i < n; i += 64) __builtin_prefetch((const char *)p + i, 0, 3);
}

/* Where chunk g of a ring operation whose chunks hold up to `cb` bytes
 * starts in its parity's area of `n` entries of `eb` bytes: entry g / 2 %
 * n, and within it, for chunks of a page or more that are smaller than the
 * entry, at the next of its eb / cb places (cb rounded up to whole pages)
 * each time the entry comes round again.  The entries turn through 2 MiB a
 * rank so that the writer's stores find lines the reader no longer holds
 * (docs/shm.md "Turning the ring entries"); a chunk that used only the
 * head of its entry turned through 32 x cb instead (a 16 KiB broadcast:
 * 512 KiB, its lines still in the reader's cache: 2 ranks, 8 / 16 / 32
 * KiB broadcast 0.96 / 2.0 / 2.4 us back to back, 0.4-0.5 / 0.8 / 1.2
 * turned).  Below a page the few lines cost less to take back than to
 * fetch from further away (1-2 KiB level or slower turned).  Every rank
 * computes it from g and the operation's chunk size alone. */
static inline size_t xc__shm_ring_places(size_t eb, size_t cb)
{
    size_t places = cb >= 4096 ? eb / ((cb + 4095) & ~(size_t)4095) : 1;
    return places > 1 ? places : 1;
}
static inline size_t xc__shm_ring_off(size_t eb, size_t n, uint64_t g, size_t cb)
{
    size_t places = xc__shm_ring_places(eb, cb);
    size_t at = (size_t)(g / XC__SHM_NSLOT % n) * eb;
    if (places > 1) at += (size_t)(g / XC__SHM_NSLOT / n % places) * ((cb + 4095) & ~(size_t)4095);
    return at;
}
/* Chunks a writer stages before it uses a place of its ring entries again
 * (`rot` places per slot, chunks of up to `cb` bytes). */
static inline size_t xc__shm_ring_cycle(size_t slot_bytes, size_t rot, size_t cb)
{
    return XC__SHM_NSLOT * XC__SHM_RING * rot * xc__shm_ring_places(slot_bytes / XC__SHM_RING, cb);
}

/* Where rank j's staged chunk g is (its flagged lines' payload, unpacked, a
 * ring entry for ring operations). */
static inline char *xc__shm_src(const xc__shm_op_t *o, int j, uint64_t g)
{
    if (o->ll) return o->shm->ll_buf + (size_t)j * XC__SHM_LL_MAX; /* unpacked */
    if (o->ring) /* entries across all places of the parity's area */
        return xc__shm_slot(o->shm, j, g) +
               xc__shm_ring_off(o->shm->slot_bytes / XC__SHM_RING, XC__SHM_RING * o->shm->rot, g,
                                o->ce * o->es);
    return xc__shm_slot(o->shm, j, g);
}

/* Elements in chunk k of a buffer of `count` elements cut in chunks of ce. */
static inline size_t xc__shm_chunk(size_t count, size_t ce, uint64_t k, size_t *off)
{
    *off = (size_t)k * ce;
    if (*off >= count) return 0;
    return count - *off < ce ? count - *off : ce;
}
static inline uint64_t xc__shm_nchunks(size_t count, size_t ce)
{
    return count == 0 ? 1 : (count + ce - 1) / ce;
}

/* Build a shared-memory operation of collective `vt` (the builder sets
 * ce/lines via the vt-specific setup).  `lines`: XC__SHM_LINES_INPUT
 * each rank's whole staged input (one chunk) in its flagged lines,
 * XC__SHM_LINES_ADDRS the single-copy addresses (3 x 8 bytes) there, 0
 * staged in slots. */
enum { XC__SHM_LINES_INPUT = 1, XC__SHM_LINES_ADDRS = 2 };
/* Blocks of `count` elements a rank stages per chunk: one per rank for
 * the collectives that send every rank its own block (reduce-scatter,
 * all-to-all), else one. */
static inline size_t xc__shm_blocks(const xc__args_t *a, int nranks)
{
    return a->coll == XC_COLL_ALLTOALL || a->coll == XC_COLL_REDUCE_SCATTER ? (size_t)nranks : 1;
}
#define XC__SHM_ADDR_BYTES 24
XC__HIDDEN /* The express path of a small blocking broadcast or reduce (shm_coll.c):
 * 1 done, 0 not started. */
int xc__shm_express(xc_comm_t *comm, const xc__args_t *a, const xc__desc_t *d, uint64_t seq,
                    int writes);
/* Publish this rank's `out` if a ring operation left it unpublished. */
void xc__shm_out_flush(xc_comm_t *comm);
xc_result_t xc__shm_op_init(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a,
                                       const xc__shm_coll_t *vt, size_t ce, int lines);

/* Largest payload of the one-shot path. */
XC__HIDDEN size_t xc__shm_one_shot_max(int nranks);


/* The shared-memory builders, registered in select.c. */
XC__HIDDEN xc_result_t xc__build_shm_allreduce(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_shm_reduce_scatter(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_shm_allgather(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_shm_bcast(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN int xc__express_shm_bcast(xc_comm_t *, const xc__algo_t *, const xc__args_t *,
                                     const xc__desc_t *, uint64_t);
XC__HIDDEN int xc__express_shm_reduce(xc_comm_t *, const xc__algo_t *, const xc__args_t *,
                                      const xc__desc_t *, uint64_t);
/* The all-reduce's: xc__shm_express_all for the calls built one shot. */
XC__HIDDEN int xc__express_shm_allreduce(xc_comm_t *, const xc__algo_t *, const xc__args_t *,
                                         const xc__desc_t *, uint64_t);
/* The express path of the small blocking all-reduce, reduce-scatter,
 * all-gather, all-to-all and barrier (shm_coll.c): XC__EXPRESS_*. */
XC__HIDDEN int xc__shm_express_all(xc_comm_t *, const xc__algo_t *, const xc__args_t *,
                                   const xc__desc_t *, uint64_t);
XC__HIDDEN xc_result_t xc__build_shm_reduce(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_shm_alltoall(xc_comm_t *, xc__op_t *, const xc__args_t *);
XC__HIDDEN xc_result_t xc__build_shm_barrier(xc_comm_t *, xc__op_t *, const xc__args_t *);

#endif
