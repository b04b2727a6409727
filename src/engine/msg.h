/*
 * msg.h -- the engine's message descriptors.
 *
 * A send (xc__tx_t) is queued on the connection to its peer and completes
 * when its last byte has been handed to the transport.  A receive
 * (xc__rx_t) is posted on its peer's queue: collective receives match
 * frames in FIFO order per peer, point-to-point receives match by tag in
 * posting order (an any-source receive waits on the communicator's own
 * queue and takes the earliest-arrived match from any peer; a frame goes
 * to whichever matching receive, its peer's or an any-source one, was
 * posted first).  A frame that arrives before its receive is posted is kept
 * as an unexpected message (xc__unexp_t) with its own copy of the payload.
 * Both descriptors live inside the operation (or its schedule) that owns
 * them, except control frames (error, bye), which own themselves.
 */
#ifndef XC_MSG_H
#define XC_MSG_H

#include "../core/common.h"
#include "../transport/frame.h"

struct xc__op;

/* What a collective frame claims to be; every rank must agree on it. */
typedef struct xc__desc {
    uint8_t coll;   /* xc_coll_t */
    uint8_t dtype;
    uint8_t op;
    uint16_t algo;
    int32_t root;
    uint64_t count;
} xc__desc_t;

typedef struct xc__tx {
    struct xc__tx *next;  /* in the connection's send queue */
    xc__hdr_t hdr;
    const void *buf;      /* hdr.len payload bytes */
    size_t off;           /* header+payload bytes written so far */
    struct xc__op *op;    /* notified on completion; NULL = owned control frame */
    void *owned;          /* memory freed with a control frame */
    int peer;             /* destination rank */
    uint64_t rndv[3];     /* rendezvous payload: address, bytes, id */
    uint8_t done;
} xc__tx_t;

typedef struct xc__rx {
    struct xc__rx *next;  /* in the peer's posted queue */
    void *buf;
    size_t len;           /* exact payload length expected */
    int peer;             /* XC_ANY_SOURCE until an any-source receive matches */
    uint8_t kind;         /* XC__F_COLL or XC__F_P2P */
    int32_t tag;          /* p2p */
    uint64_t order;       /* p2p: posting order in the communicator */
    uint64_t seq;         /* collective */
    xc__desc_t desc;
    struct xc__op *op;
    uint8_t done;
} xc__rx_t;

typedef struct xc__unexp {
    struct xc__unexp *next;
    xc__hdr_t hdr;
    void *data;           /* hdr.len bytes (NULL if 0) */
    size_t cap;           /* data's capacity (>= hdr.len: a buffer reused) */
    uint8_t complete;     /* payload fully arrived */
    uint64_t order;       /* p2p: arrival order in the communicator */
    xc__rx_t *rx;         /* receive matched while the payload was arriving */
} xc__unexp_t;

/* Per-peer matching queues of a communicator. */
typedef struct xc__peerq {
    xc__rx_t *coll_head, *coll_tail;
    xc__unexp_t *ucoll_head, *ucoll_tail;
    xc__rx_t *p2p_head, *p2p_tail;
    xc__unexp_t *up2p_head, *up2p_tail;
} xc__peerq_t;

#endif
