/*
 * p2p_express.h -- the point-to-point express path (p2p_express.c,
 * docs/engine.md "Express point-to-point").  Arguments are checked by the
 * caller (p2p.c).
 */
#ifndef XC_P2P_EXPRESS_H
#define XC_P2P_EXPRESS_H

#include "../core/comm.h"

/* A send (blocking, or nonblocking with its request made complete by the
 * caller): 1 if its frame went into the peer's channel whole (it
 * is complete); 0: nothing done, take the ordinary path. */
XC__HIDDEN int xc__p2p_express_send(xc_comm_t *comm, const void *buf, size_t count,
                                    xc_dtype_t dtype, int peer, int tag);

/* Record a blocking receive in `op` (its receive descriptor; op->req
 * NULL) without posting it. */
XC__HIDDEN void xc__p2p_express_note(xc__op_t *op, void *buf, size_t count, xc_dtype_t dtype,
                                     int peer, int tag);

/* Run recorded receives ops[0..n), in posting order, all on `comm`.
 * 0: they do not qualify; nothing was done (post them the ordinary way).
 * 1: each is done (op->req still NULL) or adopted (op->req = reqs[i]: the
 * caller waits for it with xc__request_wait_stack); *rc is XC_OK or the
 * communicator's failure, which the unfinished ones share. */
XC__HIDDEN int xc__p2p_express_recvs(xc_comm_t *comm, xc__op_t *const *ops,
                                     xc_request_t *const *reqs, size_t n, xc_result_t *rc);

/* A nonblocking receive recorded (xc__p2p_express_note) in `op` with its
 * request `req`, both from xc__op_new: as xc__p2p_express_recvs for one,
 * with one look at its channel instead of the brief poll.
 * XC__P2P_DECLINED: nothing done (`op` as the note left it).
 * XC__P2P_FINISHED: done, or failed (*rc): `op` and `req` are the
 * caller's again.  XC__P2P_ADOPTED: `op` is an operation the engine owns
 * and may already have completed and freed -- the caller must not touch
 * it again; `req` is the caller's request for it. */
#define XC__P2P_DECLINED 0
#define XC__P2P_FINISHED 1
#define XC__P2P_ADOPTED 2
XC__HIDDEN int xc__p2p_express_irecv(xc_comm_t *comm, xc__op_t *op, xc_request_t *req,
                                     xc_result_t *rc);

#endif
