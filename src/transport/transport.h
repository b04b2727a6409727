/*
 * transport.h -- the seam between the engine and the wires.
 *
 * A connection joins this rank to one peer of one communicator.  A transport
 * is a vtable (one file each: tcp.c today; shm later) that moves frames on
 * its connections.  The engine calls post_send to queue a frame and
 * on_ready when poll() reports the connection's descriptor ready; the
 * transport hands every arriving frame to the engine's matcher
 * (xc__match_header / xc__match_done in engine.h) and reports a broken
 * connection with xc__comm_peer_lost.  All calls are made with the
 * communicator's lock held.
 */
#ifndef XC_TRANSPORT_H
#define XC_TRANSPORT_H

#include "../engine/msg.h"
#include "net.h"

typedef struct xc__conn xc__conn_t;

typedef struct xc__transport {
    const char *name;
    xc_transport_kind_t kind;
    /* Queue `tx` (and try to write it at once). */
    void (*post_send)(xc_comm_t *comm, xc__conn_t *conn, xc__tx_t *tx);
    /* Service the connection after poll() reported `revents`. */
    void (*on_ready)(xc_comm_t *comm, xc__conn_t *conn, short revents);
    /* Events to poll for (0: nothing to poll, e.g. closed). */
    short (*poll_events)(const xc__conn_t *conn);
} xc__transport_t;

enum xc__conn_state {
    XC__CONN_OPEN = 0,
    XC__CONN_BYE,     /* peer said goodbye; reading until EOF */
    XC__CONN_CLOSED   /* no more traffic either way */
};

struct xc__conn {
    const xc__transport_t *tp;
    int fd;
    int peer;
    int state;
    char addr[XC__ADDRSTR_LEN]; /* peer's advertised address, for messages */
    /* send side */
    xc__tx_t *sq_head, *sq_tail;
    /* receive side: header being read, then payload into `rdst` */
    xc__hdr_t rhdr;
    size_t rhdr_off;
    int in_payload;
    char *rdst;         /* NULL: discard the payload */
    size_t roff;
    xc__rx_t *rrx;      /* the posted receive being filled, or NULL */
    xc__unexp_t *rux;   /* the unexpected message being filled, or NULL */
    uint64_t rndv[2];   /* payload of a rendezvous frame for a posted receive */
};

XC__HIDDEN extern const xc__transport_t xc__tcp_transport;

/* Make a connection of `fd` (already connected and handshaken). */
XC__HIDDEN xc__conn_t *xc__tcp_conn_new(int fd, int peer, const char *addr);
/* Close and free (NULL ok).  Drains unread input first so that closing does
 * not reset the connection before the peer has read what we sent. */
XC__HIDDEN void xc__conn_free(xc__conn_t *conn);
/* Write queued frames until the queue is empty or `deadline_ns` passes
 * (used for the last frames before closing: errors, goodbyes). */
XC__HIDDEN void xc__conn_flush(xc_comm_t *comm, xc__conn_t *conn,
                               uint64_t deadline_ns);

#endif
