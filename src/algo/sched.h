/*
 * sched.h -- collective algorithms as schedules.
 *
 * An algorithm does not run: it *builds* a schedule, a list of rounds, each
 * holding sends, receives and local steps (copy, reduce, finalise).  The
 * engine executes it without blocking: it posts every send and receive of
 * the current round, and when all of them have completed it runs the round's
 * local steps in order and moves to the next round.  So within a round the
 * local steps see the round's received data, and a buffer that a round sends
 * from may be overwritten by that round's local steps.
 *
 * One schedule per operation; built at issue time with the caller's buffers
 * and a scratch area owned by the schedule while it runs, taken from and
 * given back to its communicator's scratch pool (one cached block, the
 * largest given back): glibc maps blocks of 32 MiB and more afresh on every
 * malloc, and faulting them in cost ~100 ms per 32 MiB call on a VM.
 */
#ifndef XC_SCHED_H
#define XC_SCHED_H

#include "../engine/msg.h"

enum xc__step_type {
    XC__S_SEND,
    XC__S_RECV,
    XC__S_COPY,     /* dst <- src, `bytes` bytes                    */
    XC__S_REDUCE,   /* dst <- src op src2, `count` elements          */
    XC__S_REDUCE_N, /* dst <- srcs[0] op ... op srcs[k-1], in order  */
    XC__S_FINALIZE  /* dst <- dst / nranks if op is avg              */
};

typedef struct xc__step {
    uint8_t type;
    int peer;
    const void *src, *src2;
    void *dst;
    size_t bytes;  /* payload bytes for send/recv/copy */
    size_t count;  /* elements for reduce/finalise     */
    union {
        xc__tx_t tx;
        xc__rx_t rx;
    } u;
} xc__step_t;

typedef struct xc__sched {
    xc__step_t *steps;
    int nsteps, cap;
    int *round_end;     /* steps of round r: [round_end[r-1], round_end[r]) */
    int nrounds, rcap;
    int cur;            /* round being executed            */
    int posted;         /* its sends/receives are posted   */
    void *scratch;      /* owned scratch memory            */
    void **pool;        /* the communicator's cached block (NULL: none) */
    int nomem;          /* a builder allocation failed     */
} xc__sched_t;

/* Segments of a pipelined schedule whose time is (c + S)·(α + (M/S)·β):
 * the least at S* = sqrt(c·M·β/α), with α/β taken as XC__PIPE_ALPHA_BYTES
 * -- floor(sqrt(c·floor(M / (α/β)))), clamped to 1..most.  One rule for
 * allreduce.dbtree and bcast.chain (their cost functions use it too). */
#define XC__PIPE_ALPHA_BYTES ((size_t)64 << 10)
XC__HIDDEN size_t xc__pipe_segments(size_t bytes, size_t c, size_t most);

/* `pool`: where the schedule takes its scratch from and gives it back to
 * (a communicator's; NULL: plain allocations). */
XC__HIDDEN void xc__sched_init(xc__sched_t *s, void **pool);
/* Frees the steps; the scratch goes back to the pool. */
XC__HIDDEN void xc__sched_free(xc__sched_t *s);
/* Scratch of `bytes` (64-byte aligned), valid until xc__sched_free.  May be
 * called once per schedule.  Lock-free: schedules of one communicator are
 * built and freed on any thread. */
XC__HIDDEN void *xc__sched_scratch(xc__sched_t *s, size_t bytes);
/* Free a pool's cached block (the communicator's destruction). */
XC__HIDDEN void xc__sched_pool_free(void **pool);

XC__HIDDEN void xc__sched_send(xc__sched_t *s, int peer, const void *buf,
                               size_t bytes);
XC__HIDDEN void xc__sched_recv(xc__sched_t *s, int peer, void *buf,
                               size_t bytes);
XC__HIDDEN void xc__sched_copy(xc__sched_t *s, void *dst, const void *src,
                               size_t bytes);
XC__HIDDEN void xc__sched_reduce(xc__sched_t *s, void *dst, const void *a,
                                 const void *b, size_t count);
XC__HIDDEN void xc__sched_finalize(xc__sched_t *s, void *buf, size_t count);
/* dst <- srcs[0] op srcs[1] op ... op srcs[k-1] left to right
 * (xc__reduce_many); `srcs` must live as long as the schedule (scratch). */
XC__HIDDEN void xc__sched_reduce_n(xc__sched_t *s, void *dst, const void *const *srcs, int k,
                                   size_t count);
/* The whole schedule of a reduction on one rank: dst <- src, finalised
 * (XC_AVG divides by 1: a no-op, kept for symmetry), one round. */
XC__HIDDEN void xc__sched_single(xc__sched_t *s, void *dst, const void *src, size_t count,
                                 size_t es);
/* Close the current round (no-op if it is empty). */
XC__HIDDEN void xc__sched_round(xc__sched_t *s);

/* A zero-byte exchange with the ring neighbours (send to rank+1, receive
 * from rank-1) carrying the operation's description, for rooted collectives
 * in which some ranks would otherwise receive nothing and so could not
 * notice that another rank disagrees (e.g. on the root).  Call before the
 * first send/receive of the first communication round. */
XC__HIDDEN void xc__sched_desc_check(xc__sched_t *s, int rank, int size);

/* Execute as far as possible without blocking: returns 1 when the whole
 * schedule has completed, 0 when it waits for communication. */
struct xc__op;
XC__HIDDEN int xc__sched_advance(xc_comm_t *comm, struct xc__op *op);

#endif
