/*
 * model.h -- the alpha-beta-gamma cost model: the one place that predicts how
 * long an algorithm takes, used by the runtime selector (select.c) and, being
 * pure functions of (profile, topology, call), by tools that have no
 * communicator (the planner).  docs/cost-model.md has the formulas.
 *
 * Pieces:
 *  - a profile (xc__profile_t): the measured machine -- alpha/beta per link
 *    class, the shared-memory collectives' synchronisation cost, memcpy
 *    bandwidth and gamma per dtype x op class.  Filled by measurement
 *    (measure.c), read from / written to JSON (profile_io.c).  Never built
 *    from constants in the code.
 *  - a topology (xc__model_topo_t): ranks, nodes, ranks per node, whether
 *    shared memory and single-copy reads are available, the shm geometry.
 *  - cost functions, one per registered algorithm (cost_*.c), registered
 *    beside the builders in select.c's table (algos.h: xc__algo_t.cost).
 *  - xc__model_predict / xc__model_choose: one algorithm's predicted time,
 *    and the argmin over the algorithms valid for a call.
 *  - xc__model_init: a communicator's profile, agreed by all its ranks
 *    (rank 0's is broadcast), from XCOLL_PROFILE, the process's earlier
 *    profile, or a quick collective measurement (model_init.c).
 *
 * Invariants: every function here except xc__model_init and the measure.c
 * functions is pure (no communicator, no I/O besides the explicit file
 * functions, no global state), so all ranks holding the same profile and
 * topology choose the same algorithm.  Times are seconds, sizes bytes.
 */
#ifndef XC_MODEL_H
#define XC_MODEL_H

#include "../core/common.h"

/* Link classes: how a frame travels between two ranks. */
enum xc__link_class {
    XC__LINK_SHM = 0,    /* same node, shared-memory channel (shm_chan.c) */
    XC__LINK_TCP_LOCAL,  /* same node, TCP over loopback (no shared memory) */
    XC__LINK_TCP_NET,    /* different nodes, TCP */
    XC__LINK_COUNT
};

/* Reduction classes whose kernels cost alike (bitwise ops and avg cost as
 * sum; min and max alike). */
enum xc__gop { XC__GOP_SUM = 0, XC__GOP_PROD, XC__GOP_MINMAX, XC__GOP_COUNT };

#define XC__LADDER_MAX 8

/* What a profile holds (bits of xc__profile_t.have). */
enum {
    XC__HAVE_SHM = 1 << XC__LINK_SHM,             /* link + shm sync */
    XC__HAVE_TCP_LOCAL = 1 << XC__LINK_TCP_LOCAL,
    XC__HAVE_TCP_NET = 1 << XC__LINK_TCP_NET,
    XC__HAVE_HOST = 1 << 3                         /* memcpy + gamma */
};

/* One transfer pattern on a link class: m bytes cost alpha + m*beta; from
 * big_from bytes on (the rendezvous protocol of shared-memory channels; for
 * TCP simply where the bandwidth regime starts, fitted per pattern) big_alpha +
 * m*big_beta, and once the call's buffers no longer fit the cache mem_alpha +
 * m*mem_beta.  The line's big_from 0: the link's (xc__line_big_from). */
typedef struct xc__line {
    double alpha, beta;
    double big_alpha, big_beta;
    double mem_alpha, mem_beta;
    double big_from;
} xc__line_t;

/* Transfer patterns of a round, as seen by one rank: whether it only sends
 * or only receives (trees, chains) or does both (rings, recursive
 * doubling), and whether what it sends was written during the call (a
 * copy, a reduction, a block just received: still dirty in the writer's
 * cache, which a reader on another core pays for) or is the caller's
 * input. */
enum xc__xfer {
    XC__ONEWAY = 0,       /* only sends or only receives, the caller's data */
    XC__EXCHANGE,         /* sends and receives, the caller's data */
    XC__ONEWAY_FRESH,     /* only sends or receives, data written in the call */
    XC__EXCHANGE_FRESH,   /* sends and receives, data written in the call */
    XC__XFER_COUNT
};

#define XC__LINK_PTS 16

typedef struct xc__link_params {
    double big_from;
    xc__line_t line[XC__XFER_COUNT];
    /* A schedule algorithm's round on this link costs this much more
     * (signed; negative: less) than the lines say: they are measured with
     * point-to-point calls (a group send/receive each), a schedule's rounds
     * go to the channels from inside one call.  Measured on one node for
     * its intra-node class (measure.c), 0 elsewhere. */
    double round_delta;
    /* What the calibration measured below the bandwidth regime, per
     * pattern: npts (bytes, seconds) points, ascending in bytes.  With two
     * or more a transfer there is priced through them (linear in between,
     * the last segment's slope beyond, the first point's time below): the
     * channels' times do not lie on a line -- frames of 1 KiB and more go
     * in bulk, and an exchange took 0.50 us at 512 B, 0.72 at 1 KiB, 1.11
     * at 2 KiB and 1.18 at 4 KiB (twenty-second session), where the line
     * through them priced the schedule algorithms' 512 B-2 KiB rounds
     * 25-35 % low. */
    int npts[XC__XFER_COUNT];
    double pts[XC__XFER_COUNT][XC__LINK_PTS][2];
} xc__link_params_t;

/* Where pattern x's bandwidth regime starts on link lp. */
static inline double xc__line_big_from(const xc__link_params_t *lp, int x)
{
    return lp->line[x].big_from > 0 ? lp->line[x].big_from : lp->big_from;
}

typedef struct xc__profile {
    uint32_t have;                       /* XC__HAVE_* */
    xc__link_params_t link[XC__LINK_COUNT];
    /* Shared-memory collectives: one all-ranks synchronisation of L ranks
     * costs sync_alpha + (L-1)*sync_per_rank. */
    double sync_alpha, sync_per_rank;
    /* ... and each round staged through the slots beyond its
     * synchronisation (the call, the staged lines' own transfer after the
     * counter's); rounds in the flagged lines (<= XC__SHM_LL_MAX bytes
     * per rank) have none. */
    double shm_stage;
    /* ... the same for the collectives that only move data (all-gather,
     * all-to-all, broadcast: a 512-byte broadcast less the rest of its
     * prediction); a file without it reads shm_stage's value. */
    double shm_stage_copy;
    /* ... and a round in more than one flagged line beyond the one-line
     * exchange the sync is (a 128-byte all-reduce less the rest of its
     * prediction): the one-line rounds became cheaper than the multi-line
     * ones when the lines were drained before `in` (twenty-first session:
     * 0.20-0.24 against 0.43-0.49 us with fresh inputs). */
    double shm_lines;
    /* ... and a broadcast's or reduce's round in the flagged lines (the
     * ring operations, docs/shm.md) beyond its sync, in place of the terms
     * above (an 8-byte reduce less the rest of its prediction): timed as
     * the grid times them, after a barrier, one rank waits for the other's
     * lines once it is through the barrier (twenty-second session: 8-128
     * bytes 0.31-0.42 us where an all-reduce took 0.20-0.24). */
    double shm_rooted;
    /* Seconds per byte of a chunk another rank just staged, taken out of
     * its slot by this rank's own code (a broadcast's reader, a 2-rank
     * reduce's root): measured with a 32 KiB reduce.shm on every
     * shared-memory communicator (0: not measured -- or its time below the
     * rest of its price, as on 8 ranks of 2 cores -- and priced as a fresh
     * single-copy read or the channels' rate).  The
     * kernel's copy of fresh lines ran 88 ps/B, the library's ~135
     * (twenty-second session). */
    double shm_take;
    /* ... and the same for a bigger chunk, measured with two chunks of a
     * ring entry, the largest a rooted operation stages (xc__shm_rooted_ce;
     * shm_take_big_bytes; 0: not measured, shm_take at every size):
     * between the two sizes the rate is interpolated.  On the Intel VM a
     * 32 KiB chunk took ~135 ps/B and a 256 KiB one ~90 (the stager's
     * memcpy runs 1.7x faster per byte from ~176 KiB, twenty-fourth
     * session). */
    double shm_take_big, shm_take_big_bytes;
    /* Seconds per byte of each later chunk of a pipelined rooted operation
     * (the stager puts chunk k+1 while the taker takes chunk k): the rate
     * that prices a reduce of two slots (eight ring entries) at its time, where the
     * reduction's own price does not already exceed it (0: not measured,
     * priced as the slower of the stager's copy and a single-copy read). */
    double shm_take_pipe;
    /* On 2 uncrowded ranks, seconds per byte the one-shot all-reduce's
     * chunks take beyond their formula (signed; cost_shm.c): measured at
     * 4 MiB, since what the two cores' concurrent staging and cross-core
     * reads cost differs between machines more than the formula's parts
     * say (this price decides between it and the single copy). */
    double pair_chunk;
    /* Likewise the single-copy all-reduce there (signed, per byte of the
     * call beyond allreduce_direct's formula), measured at the same size:
     * process_vm_readv's calls and page pinning cost machines differently
     * (on the AMD EPYC VM of the twenty-seventh session the formula priced
     * 256 KiB at 16.6 us; it took 41-52, one shot per chunk 30). */
    double pair_direct;
    /* The two corrections' constant parts (seconds a call, signed; 0 where
     * only the 2 MiB call was timed): with a second call of a slot (256
     * KiB) timed too, each correction is affine in the size, through
     * both.  Per byte alone, the single copy's (fitted at 2 MiB: the
     * formula priced it 330 us, it took 207) priced 256 KiB at 18 us on
     * the forty-sixth session's AMD VM, where it took 39 and
     * allreduce.rhd 22-26: allreduce.shm took that size from rhd. */
    double pair_chunk0, pair_direct0;
    /* On 2 uncrowded ranks, the largest block all-gather and all-to-all
     * read single copy (not the broadcast: shm_coll.h); 0:
     * no ceiling.  Measured at creation: an 8 MiB allgather.shm (4 MiB
     * blocks) single copy and staged; where staged was faster, half its
     * block.  On the AMD EPYC VM of the twenty-seventh session the kernel's
     * copy fell to about half the staged copies' rate beyond ~4 MiB blocks
     * (16 MiB all-gather: 1.7-2.3 ms single copy, 0.82-1.03 staged). */
    double shm_cma_max;
    /* On the same pair, the smallest block all-gather reads single copy
     * (0: XCOLL_SHM_CMA_MIN_KB's alone; XC__SHM_AG_CMA_NEVER: never).  Measured
     * at creation beside the ceiling: a 512 KiB allgather.shm (256 KiB
     * blocks, out of place) single copy and staged; where staged was
     * faster by 10 %, twice its block -- or never, where staged was faster
     * at the ceiling's 8 MiB too.  On the AMD EPYC VM (twenty-eighth session) staged led at every
     * block from 128 KiB to 2 MiB (256 KiB all-gather 10.0-10.6 us against
     * 11.9-14.4, 4 MiB 174-188 against 214-224), while all-to-all's single
     * copy still led at 2 MiB blocks: all-gather's floor, not the shared
     * ceiling. */
    double shm_ag_cma_min;
    /* ... and the smallest block all-to-all reads single copy (0: its
     * threshold alone, a quarter of XCOLL_SHM_CMA_MIN_KB on the pair):
     * a 64 KiB alltoall.shm (32 KiB blocks) both ways; where staged was
     * faster by 10 %, 64 KiB (the all-gather's floor asks the same lead).  On the AMD EPYC VM (twenty-eighth session) staging
     * led from 16 to 64 KiB blocks (32 KiB all-to-all 2.6 us against
     * 5.0-5.9), single copy from 128 KiB (256 KiB: 10.7-15.9 against
     * 15.7-20.9) -- the reverse of the Intel VM's, where single copy led
     * from 16 KiB blocks. */
    double shm_a2a_cma_min;
    /* ... and the smallest broadcast the pair reads single copy (0: not
     * measured, XC__SHM_BCAST_CMA_MIN_2; a page where single copy led at
     * the first probe, so XCOLL_SHM_CMA_MIN_KB alone decides): a
     * 64 KiB and a 256 KiB bcast.shm both ways, where staging stops
     * leading by 10 % (xc__lead_end).  The sixteenth session's AMD VM led
     * staged at 64-128 KiB (2.4 against 4.8 us at 64 KiB); the forty-sixth
     * session's led single copy from 32-64 KiB (64 KiB 4.3 against 7.1 us,
     * 128 KiB 6.4 against 13.7; fresh inputs 5.2-5.7 against 11). */
    double shm_bcast_cma_min;
    /* A schedule algorithm's call (select, build, queue, complete) beyond
     * its rounds' transfers. */
    double sched_call;
    /* A cold call -- one that follows a pause of compute or sleep, as in a
     * training step, rather than another call -- takes this much longer:
     * cold_alpha + cold_beta x its working set (bytes of its buffers on a
     * rank).  Measured by the calibration (an all-reduce after 50 ms
     * asleep against back to back); 0 in quick profiles and older files.
     * Priced only for calls marked cold (xcoll-plan). */
    double cold_alpha, cold_beta;
    /* The same for buffers from xc_mem_alloc (from 1 MiB on transparent
     * huge pages: fewer pages to walk, pin and miss in the TLB); measured
     * apart, with such buffers; when not measured (cold_xcmem 0) the term
     * above is used. */
    double cold_huge_alpha, cold_huge_beta;
    int cold_xcmem;
    /* memcpy, seconds per byte copied, for working sets within cache_bytes
     * and beyond (measured at twice the cache). */
    double copy_cache, copy_mem;
    double cache_bytes;
    /* memcpy per byte at larger working sets (bytes, seconds per byte),
     * ascending; nladder 0 or 1: no tier beyond copy_mem's.  Every cost
     * beyond the cache grows with the working set as this does. */
    double ladder[XC__LADDER_MAX][2];
    int nladder;
    /* Seconds per byte of touching fresh memory (page fault + zeroing):
     * paid by scratch buffers big enough to be a fresh mapping per call. */
    double fault;
    /* Reduction: seconds per byte of output of dst = a op b, [0] operands
     * cache-resident, [1] beyond the cache. */
    double gamma[XC_DTYPE_COUNT][XC__GOP_COUNT][2];
    /* Compression codecs (xc_allreduce_compressed): seconds per byte of
     * fp32 values, cache-resident, [0] encode with a residual, [1] decode
     * and add; [XC_COMPRESS_NONE] unused.  Beyond the cache a pass costs
     * at least 1.5 x memcpy's (as gamma). */
    double codec[XC_COMPRESS_COUNT][2];
    char source[48];                     /* "measured at creation", a path */
    /* --- not measured data: per-communicator selector state (select.c),
     * NULL in a standalone profile; everything above is broadcast. --- */
    struct xc__sel_state *sel;
} xc__profile_t;

/* Bytes of a profile that ranks exchange (everything before `sel`). */
#define XC__PROFILE_DATA_BYTES offsetof(xc__profile_t, sel)

typedef struct xc__model_topo {
    int nranks, nnodes;
    int ppn;              /* most ranks on one node */
    int blocked;          /* each node's ranks are consecutive */
    int shm;              /* shared-memory collectives (all ranks on one node) */
    int chans;            /* same-node frames via shm channels, else TCP loopback */
    int cma;              /* single-copy reads (process_vm_readv) between local ranks */
    size_t slot_bytes;    /* shm staging slot (XCOLL_SHM_SLOT_KB) */
    size_t cma_min;       /* single copy from this block size (XCOLL_SHM_CMA_MIN_KB) */
    size_t cma_max;       /* ... and all-gather's and all-to-all's blocks up to this
                           * size (0: any; the profile's shm_cma_max, on the pair) */
    size_t ag_cma_min;    /* ... and all-gather's from this size (0: cma_min alone;
                           * the profile's shm_ag_cma_min, on the pair) */
    size_t a2a_cma_min;   /* ... and all-to-all's (shm_a2a_cma_min) */
    size_t bcast_cma_min; /* ... and broadcast's (shm_bcast_cma_min) */
    int cores;            /* cores of a node (0: unknown); more ranks than
                           * cores scale predictions, never choices */
    int crowded;          /* the runtime's agreed flag (comm->oversub: more
                           * local ranks than the union of their CPUs): picks
                           * the shm paths that depend on it (shm_coll.h),
                           * so it may change choices -- every rank has it */
    int coop;             /* the single-copy broadcast's root copies too
                           * (XCOLL_SHM_COOP, else !crowded; shm_bcast.c) */
} xc__model_topo_t;

/* One call, as every rank sees it: `count` is the count argument of the
 * public call (all-reduce: elements; reduce-scatter: recvcount;
 * all-gather: sendcount; all-to-all: elements per block). */
typedef struct xc__model_call {
    xc_coll_t coll;
    size_t count;
    xc_dtype_t dtype;
    xc_op_t op;
    int cold; /* it follows compute, not another call (a training step's
                 calls; xcoll-plan's default): priced with the profile's
                 cold-call term; XC__COLD_XCMEM: its buffers come from
                 xc_mem_alloc (the huge-page term) */
} xc__model_call_t;

/* Predicted seconds of one algorithm for a call, or a negative value if it
 * cannot run there (e.g. needs shared memory the topology lacks). */
typedef double (*xc__cost_fn)(const xc__profile_t *p, const xc__model_topo_t *t,
                              const xc__model_call_t *c);

/* Predicted seconds of algorithm `algo_id` (algos.h) for `c`, or < 0 if the
 * algorithm is unknown, of another collective, or not valid here.  With
 * more ranks per node than cores every prediction is multiplied by
 * ppn/cores (the ranks take turns on the cores); the choice below compares
 * unscaled times, so ranks that count cores differently still agree. */
XC__HIDDEN double xc__model_predict(const xc__profile_t *p, const xc__model_topo_t *t,
                                    int algo_id, const xc__model_call_t *c);

/* What a cold call (c->cold) costs beyond the same call back to back: the
 * profile's cold_alpha + cold_beta x the call's working set (the
 * cold_huge_ pair for XC__COLD_XCMEM, when measured); 0 for a call not
 * marked cold.  Included in xc__model_predict. */
enum { XC__COLD_MALLOC = 1, XC__COLD_XCMEM = 2 };
XC__HIDDEN double xc__model_cold(const xc__profile_t *p, const xc__model_topo_t *t,
                                 const xc__model_call_t *c);

/* 1 if the 2-rank shared-memory all-reduce of `c` should run single copy
 * rather than one shot per chunk (cost_shm.c; the runtime and the model's
 * price of allreduce.shm use this one rule). */
XC__HIDDEN int xc__model_shm_pair_direct(const xc__profile_t *p, const xc__model_topo_t *t,
                                         const xc__model_call_t *c);
/* That all-reduce's price one shot per chunk (the calibration's reference
 * for the profile's pair_chunk). */
XC__HIDDEN double xc__model_shm_pair_one_shot(const xc__profile_t *p, const xc__model_topo_t *t,
                                              const xc__model_call_t *c);
/* ... and single copy (the reference for pair_direct). */
XC__HIDDEN double xc__model_shm_pair_single_copy(const xc__profile_t *p,
                                                 const xc__model_topo_t *t,
                                                 const xc__model_call_t *c);

/* The algorithm with the least predicted time for `c` (ties: registry
 * order); its id, or XC__ALGO_NONE (0) if no algorithm is valid.  *pred
 * (may be NULL) receives its time; *second / *second_pred (may be NULL) the
 * runner-up (0 / -1 if none). */
XC__HIDDEN int xc__model_choose(const xc__profile_t *p, const xc__model_topo_t *t,
                                const xc__model_call_t *c, double *pred, int *second,
                                double *second_pred);

/* Predicted seconds of xc_allreduce_compressed(count, dt, op, f) under t
 * (f = XC_COMPRESS_NONE: the plain all-reduce the selector would run),
 * not scaled for oversubscription, so that every rank decides alike; < 0
 * if nothing can run (cost_compress.c). */
XC__HIDDEN double xc__model_compressed(const xc__profile_t *p, const xc__model_topo_t *t,
                                       size_t count, xc_dtype_t dt, xc_op_t op,
                                       xc_compress_t f);

/* A topology for nranks on nnodes nodes with ppn ranks each (block layout),
 * with the shared-memory settings of the environment (XCOLL_SHM_*) and
 * the measured single-copy thresholds of `p` (NULL: none), for tools that
 * have no communicator. */
XC__HIDDEN xc_result_t xc__model_topo_make(int nranks, int nnodes, int ppn,
                                           const xc__profile_t *p, xc__model_topo_t *t);
/* t's single-copy ceiling and floors (cma_max, ag_ / a2a_ / bcast_cma_min)
 * as the runtime takes them: the ceiling XCOLL_SHM_CMA_MAX_KB where set
 * (cma_max_kb >= 0), else measured; the floors measured.  Measured means
 * p's, on the pair alone (2 uncrowded ranks: xc__shm_pair of t's nranks
 * and crowded, which are set); elsewhere, or with p NULL, none.  The
 * communicator's topology (xc__model_topo_of), the planner's and the
 * tools' ask this one rule. */
XC__HIDDEN void xc__model_topo_measured(xc__model_topo_t *t, const xc__profile_t *p,
                                        int cma_max_kb);

/* Link class of a pair on the same node / different nodes under t. */
static inline int xc__model_intra(const xc__model_topo_t *t)
{
    return t->chans ? XC__LINK_SHM : XC__LINK_TCP_LOCAL;
}

static inline int xc__gop(xc_op_t op)
{
    return op == XC_PROD ? XC__GOP_PROD : op == XC_MIN || op == XC_MAX ? XC__GOP_MINMAX
                                                                       : XC__GOP_SUM;
}

/* ------------------------------------------------------- profile files */
/* Write `p` as JSON to `path` (XC_ERR_SYSTEM naming the path on failure). */
XC__HIDDEN xc_result_t xc__profile_write(const xc__profile_t *p, const char *path);
/* Read a profile from `path`: XC_ERR_INVALID naming the file and the
 * problem (line and column of a syntax error, or the key at fault). */
XC__HIDDEN xc_result_t xc__profile_read(const char *path, xc__profile_t *p);
/* The same from a string (`name` names it in messages). */
XC__HIDDEN xc_result_t xc__profile_parse(const char *text, size_t len, const char *name,
                                         xc__profile_t *p);
/* Free a heap profile (a communicator's holds its selector state in the
 * same block; NULL: no-op). */
XC__HIDDEN void xc__profile_free(xc__profile_t *p);

/* ------------------------------------------------------- measurement */
/* Where a staged way stops leading single copy: of n sizes m (ascending)
 * timed both ways, the first at which `staged` no longer leads `cma` by
 * 10 %, interpolated linearly from the size before; `from` where it does
 * not lead at the first, `beyond` where it leads at every one (measure.c:
 * the point-to-point threshold, the 2-rank all-to-all's floor). */
XC__HIDDEN double xc__lead_end(const double *m, const double *staged, const double *cma, int n,
                               double from, double beyond);

/* Fill the parts of rank 0's `p` named by `what` (XC__HAVE_* bits) by
 * measuring on `comm`; collective (every rank calls it with the same
 * `what`; only rank 0's `p` is written).  thorough: the calibration's
 * sizes and repetitions, else the few-millisecond creation-time run. */
struct xc_comm;
XC__HIDDEN xc_result_t xc__measure(struct xc_comm *comm, uint32_t what, int thorough,
                                   xc__profile_t *p);
/* The link classes (XC__HAVE_* bits) a communicator's traffic uses, and
 * its topology. */
XC__HIDDEN uint32_t xc__model_needs(const struct xc_comm *comm);
XC__HIDDEN void xc__model_topo_of(const struct xc_comm *comm, xc__model_topo_t *t);

/* ------------------------------------------------------- communicator */
/* Give a new communicator its profile (comm->profile), agreed by all ranks:
 * XCOLL_PROFILE if set (rank 0 reads it), else the profile this process
 * already uses (a child of xc_comm_split inherits its parent's), else a
 * quick measurement; parts missing for this communicator's link classes
 * are measured.  Collective. */
XC__HIDDEN xc_result_t xc__model_init(struct xc_comm *comm);

#endif
