/*
 * flight.h -- the flight recorder: each communicator keeps its last N
 * operations (XCOLL_FLIGHT_RECORDER, default 256; 0 turns it off) -- what
 * they were, their state and when they were issued and finished -- and
 * dumps them to a file on any error that poisons it and on SIGUSR1, so
 * that `xcoll-doctor` can compare the ranks' dumps and name the rank that
 * is behind or missing and the operation it stopped at (flight.c,
 * tools/xcoll-doctor.c, docs/fault-tolerance.md).
 *
 * Recording costs a few stores and one time-stamp counter read per
 * operation at issue and at completion, under the communicator's lock.
 */
#ifndef XC_FLIGHT_H
#define XC_FLIGHT_H

#include "../core/common.h"

struct xc__op;
struct xc__desc;

enum xc__flight_state { XC__FL_ISSUED = 1, XC__FL_DONE, XC__FL_FAILED };

typedef struct xc__flight_rec {
    uint64_t id;        /* 1, 2, ... per communicator (0: empty slot) */
    uint64_t seq;       /* collective sequence number (0: point-to-point) */
    uint64_t count;
    uint64_t t_issue, t_done; /* time-stamp counter */
    int32_t root, peer, tag;
    int32_t rc;
    uint16_t algo;
    uint8_t coll, dtype, op, state;
} xc__flight_rec_t;

typedef struct xc__flight {
    xc__flight_rec_t *ring;
    uint32_t n;          /* slots */
    uint32_t pos;        /* next % n, kept without a division */
    uint64_t next;       /* id of the next operation */
} xc__flight_t;

/* Set up the recorder of `comm` (from XCOLL_FLIGHT_RECORDER) and register
 * it for SIGUSR1 dumps; free it.  Called at creation / destruction. */
XC__HIDDEN void xc__flight_init(xc_comm_t *comm);
XC__HIDDEN void xc__flight_fini(xc_comm_t *comm);
/* An operation was issued / completed (with the communicator's lock). */
XC__HIDDEN void xc__flight_issue(xc_comm_t *comm, struct xc__op *op);
XC__HIDDEN void xc__flight_done(xc_comm_t *comm, struct xc__op *op, xc_result_t rc);
/* An operation issued and completed in one step (an express path): a
 * collective (seq, peer and tag -1) or a point-to-point call (seq 0). */
XC__HIDDEN void xc__flight_express(xc_comm_t *comm, uint64_t seq, const struct xc__desc *d,
                                   int32_t peer, int32_t tag, xc_result_t rc);
/* Write this communicator's dump (lock held or not: a dump must also work
 * while a thread spins inside the engine); `why` goes into the header. */
XC__HIDDEN void xc__flight_dump(xc_comm_t *comm, const char *why);

#endif
