/*
 * wcopy.h -- writing chunks into shared memory that another core reads
 * next (a staging slot): with ordinary or with non-temporal stores,
 * whichever this process's recent operations found faster.
 *
 * An ordinary store needs its line owned: where the reader still holds
 * it (it read the slot's previous chunk) that is an invalidation round
 * trip per line, whose price depends on where the hypervisor put the two
 * vCPUs.  On the 2-vCPU AMD EPYC VM (forty-seventh session) a 64 KiB
 * chunk written into lines the other core had just read took 1.2 us in
 * one placement, 7-10 us in another and 28-42 us in a third, against
 * 2-8 us with non-temporal stores in all three.  Those leave the lines in
 * memory, so the reader's take is slower where the two cores share a
 * cache: the whole operation, not the copy, decides.  The placement
 * changes every few seconds, so the choice is measured on the operations
 * themselves (docs/shm.md, "Writing a slot").
 *
 * The state is per process and per segment (xc__shm_t), touched under
 * the communicator's lock.  Either way the bytes are the same: the
 * readers cannot tell, so ranks need not agree.
 */
#ifndef XC_WCOPY_H
#define XC_WCOPY_H

#include <stddef.h>
#include <stdint.h>

/* Operations staging at least this many bytes are timed and may write
 * non-temporally; size classes double from there. */
#define XC__WCOPY_OP_MIN ((size_t)64 << 10)
#define XC__WCOPY_CLASSES 8
/* Pieces below this are copied ordinarily whatever the operation's way
 * (partial lines would flush the write-combining buffers half empty). */
#define XC__WCOPY_PIECE_MIN ((size_t)4 << 10)
/* Every this many operations of a size class, a run of XC__WCOPY_RUN
 * takes the way that is not the current choice.  The first
 * XC__WCOPY_SETTLE operations after a change of way are not timed: a
 * writer may run XC__SHM_NSLOT operations ahead of its readers, so its
 * first waits are for the operations before, written the other way. */
#define XC__WCOPY_EXPLORE 128
#define XC__WCOPY_RUN 6
#define XC__WCOPY_SETTLE 2
/* An operation timed each way this many times before the cheaper is
 * chosen, a way's cost the least of its first samples: one sample decided
 * before, and the first timed operation of a class (the third after a
 * buffer's allocation) read up to 45x its later ones -- non-temporal
 * stores were then taken until the next run of ordinary ones, 120 of a
 * 200-call benchmark's operations (4 ranks on 2 cores, 256 KiB all-reduce,
 * reduce-scatter and all-gather 9-16 % slower by medians; fifty-third
 * session). */
#define XC__WCOPY_TRIES 3
/* On a crowded node a rank's time of an operation is mostly its turns of
 * the core, bimodal with them, and its own share of the work only: non-
 * temporal stores, 1.7x slower there in all where the vCPUs sit near (8
 * ranks on 2 cores, 256 KiB all-reduce), measured level by the ranks' own
 * times, and where the vCPUs sit far apart, 2-3x faster in all, measured
 * only ~1.7x cheaper (4 ranks, 512 KiB all-to-all).  So they are taken
 * there only where they measured this much cheaper: 8 ranks 128-512 KiB
 * all-reduce 15-25 % slower than ordinary stores by medians with no lead,
 * 3-7 % with this one, level with 1.5 -- which missed the all-to-all's
 * far-state lead (fifty-third session). */
#define XC__WCOPY_CROWDED_LEAD 1.25
/* On a crowded node a way's sample is the mean time of this many of its
 * operations in a row -- an exploring run's timed ones -- not one
 * operation's: ranks sharing a core may lock into turns in which each
 * operation of a rank alternates fast and slow (4 ranks on 2 cores,
 * 256 KiB all-to-all, ordinary stores: 45 / 145 us in turn, mean 120,
 * for whole runs, against a steady 78 non-temporally), and a cost that
 * follows single samples quickly down took the fast half for the way's
 * cost and kept the slower way.  Means of 4: 4 ranks, 256 / 512 KiB
 * all-to-all 190 / 273 -> 125 / 234 us by medians; 8 ranks, all-to-all
 * 512 KiB 719 -> 508, all-gather 512 KiB / 1 MiB 333 / 648 -> 288 / 561,
 * all-reduce 1 MiB 2129 -> 1880; the rest level (fifty-fourth session). */
#define XC__WCOPY_CROWDED_MEAN (XC__WCOPY_RUN - XC__WCOPY_SETTLE)

/* The operations of one size class: how many, the way of the last one
 * and how many of that way since it changed, and each way's recent ticks
 * per KiB (0: untried). */
typedef struct xc__wcopy_series {
    uint32_t ops, run;
    int8_t way;
    uint8_t timed[2]; /* each way's samples, counted to XC__WCOPY_TRIES */
    uint8_t nacc[2];  /* a way's operations summed into acc, this run of it */
    double cost[2];
    double acc[2];    /* their ticks per KiB, summed */
} xc__wcopy_series_t;

typedef struct xc__wcopy {
    int mode;                               /* -1 measured, 0 ordinary, 1 non-temporal */
    /* operations every rank stages and reads, timed here */
    xc__wcopy_series_t own[XC__WCOPY_CLASSES];
    /* rooted operations between two ranks (broadcast, reduce), measured
     * on their reader, whose time covers the writer's chunks all taken:
     * `ops` counts those this process wrote (xc__wcopy_rooted_way, the
     * way its reader prefers); run, way and cost those it read, by the
     * way their writer published (xc__wcopy_read_end) */
    xc__wcopy_series_t rooted[XC__WCOPY_CLASSES];
    uint64_t nt_ops;                        /* operations written non-temporally */
    /* a crowded node (more ranks than cores): a sample of a way is the
     * mean of XC__WCOPY_CROWDED_MEAN operations in a row, and non-
     * temporal stores are chosen only XC__WCOPY_CROWDED_LEAD times
     * cheaper */
    int crowded;
    /* set by the calibration (model/measure.c) while it holds `mode` to
     * one way at a time: this process chooses at run time */
    int probing;
} xc__wcopy_t;

/* A reader's published preference per size class (xc__shm_ctl_t
 * nt_pref): 0 none yet, else the way + 1. */
#define XC__WCOPY_PREF_NONE 0

/* An operation staging `bytes` starts: the way its chunks take (1
 * non-temporal); *t0 the low 32 bits of the time-stamp counter at its
 * start (an operation is timed modulo 2^32 ticks, over a second), 0 when
 * it is not timed.  `symmetric`: every rank of it stages and reads, so its
 * end on this rank comes after the other ranks' chunks written their way
 * were read.  A rooted one (broadcast, reduce) is not measured here (see
 * xc__wcopy_rooted_way for one between two ranks), and writes ordinarily
 * unless the mode is forced: its writer may end before its readers took
 * the chunks, so its time would leave out what non-temporal stores cost
 * them (the writer of a 512 KiB reduce chose them between the
 * calibration's barriers, and the root took 2x longer). */
int xc__wcopy_begin(xc__wcopy_t *w, size_t bytes, int symmetric, uint32_t *t0);

/* It ended, having staged `staged` bytes with way `nt`: its time per KiB
 * of `bytes` joins that way's cost (nothing when t0 is 0 or it staged
 * less than XC__WCOPY_OP_MIN: a rank that only read learns nothing). */
void xc__wcopy_end(xc__wcopy_t *w, size_t bytes, size_t staged, int nt, uint32_t t0);

/* The size class of an operation of `bytes` (0 below 2 x XC__WCOPY_OP_MIN,
 * then one more per doubling, up to XC__WCOPY_CLASSES - 1). */
int xc__wcopy_class(size_t bytes);

/* The writer of a rooted operation of `bytes` between two ranks: its
 * way, from `pref` (its reader's published preference for the class,
 * XC__WCOPY_PREF_NONE or way + 1): while there is none, runs of
 * XC__WCOPY_RUN ordinary and non-temporal in turn (for the reader to time
 * both; ordinary after XC__WCOPY_ALTERNATE operations without one); then
 * the preferred way but for a run of the other every XC__WCOPY_EXPLORE
 * operations.  The mode, when forced, decides; small operations are
 * ordinary. */
int xc__wcopy_rooted_way(xc__wcopy_t *w, size_t bytes, int pref);
#define XC__WCOPY_ALTERNATE (8 * XC__WCOPY_RUN)

/* The reader of such an operation: *t0 its start (0: not timed: small, or
 * the mode forced). */
void xc__wcopy_read_begin(const xc__wcopy_t *w, size_t bytes, uint32_t *t0);

/* ... its end, the writer having written it `way`: the time joins that
 * way's cost once XC__WCOPY_SETTLE operations passed since the writer's
 * way changed.  Returns the preference to publish (XC__WCOPY_PREF_NONE
 * until both ways were timed). */
int xc__wcopy_read_end(xc__wcopy_t *w, size_t bytes, int way, uint32_t t0);

/* Copy a piece into a slot, the way given; the stores are visible before
 * the caller's next release store (the non-temporal way ends with a
 * store fence). */
void xc__wcopy(void *dst, const void *src, size_t bytes, int nt);

/* The way the next operation of `bytes` takes (xc__wcopy_begin's choice
 * without counting it). */
int xc__wcopy_pick(const xc__wcopy_t *w, size_t bytes);

#endif
