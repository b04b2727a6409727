/*
 * transport.h -- the seam between the engine and the wires.
 *
 * A connection joins this rank to one peer of one communicator.  A transport
 * is a vtable (one file each: tcp.c, shm_chan.c) that moves frames on its
 * connections; both carry a byte stream framed by stream.c.  The engine
 * calls post_send to queue a frame and on_ready when poll() reports the
 * connection's descriptor ready (shared-memory channels have none: the
 * engine services them on every turn, xc__chan_service); the transport
 * hands every arriving frame to the engine's matcher (xc__match_header /
 * xc__match_done) and reports a broken connection with xc__comm_peer_lost.
 * All calls are made with the communicator's lock held.
 *
 * Which connection a frame takes: between ranks of one node with shared
 * memory, data frames (collective, point-to-point, acknowledgements) use
 * the shared-memory channel (comm->chans); error and goodbye frames always
 * use the socket, whose end-of-file is also how a dead peer is noticed.
 */
#ifndef XC_TRANSPORT_H
#define XC_TRANSPORT_H

#include "../engine/msg.h"
#include "net.h"

#include <sys/uio.h>

typedef struct xc__conn xc__conn_t;

typedef struct xc__transport {
    const char *name;
    xc_transport_kind_t kind;
    /* Queue `tx` (and try to write it at once). */
    void (*post_send)(xc_comm_t *comm, xc__conn_t *conn, xc__tx_t *tx);
    /* Write queued frames as far as possible without blocking. */
    void (*write)(xc_comm_t *comm, xc__conn_t *conn);
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

/* TCP streams per peer (XCOLL_SOCKETS_PER_PEER) and the striping unit:
 * docs/tcp.md.  A frame whose payload is longer than one chunk is striped
 * when a connection has several streams. */
#define XC__MAX_STREAMS 16
#define XC__STRIPE_CHUNK (512u * 1024u)

struct xc__conn {
    const xc__transport_t *tp;
    int fd;             /* the socket; with several streams an epoll set of them */
    int peer;
    int state;
    int left;           /* the peer sent SHRINK: it sends nothing more here */
    int reading;        /* inside xc__stream_read (a flush must not re-enter) */
    int rx_dropped;     /* a goodbye's flush dropped raw input: the stream is
                         * no longer at a frame boundary, never parse it */
    char addr[XC__ADDRSTR_LEN]; /* peer's advertised address, for messages */
    uint64_t last_rx_ns;  /* when bytes last arrived (0: not yet looked at) */
    uint64_t last_tx_ns;  /* when a frame was last queued to it */
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
    uint64_t rndv[3];   /* payload of a rendezvous frame for a posted receive */
    /* shared-memory channel (shm_chan.c): outgoing and incoming rings */
    struct xc__chan_ctl *ctx, *crx;
    char *ctxd, *crxd;
    size_t cbytes;      /* ring size (a power of two) */
    uint64_t chead;     /* lines we wrote to ctx */
    uint64_t ctail;     /* lines we consumed from crx */
    size_t crx_off;     /* bytes consumed of crx's line `ctail` */
    uint64_t crx_pref;  /* last line of crx fetched ahead (shm_chan.c) */
    uint64_t ctx_tail;  /* ctx's tail as last read (the peer's, lags) */
    uint64_t ctail_pub; /* crx's tail as last published (lags ctail) */
    /* TCP with several streams (tcp.c, docs/tcp.md): one logical byte
     * stream cut into chunks; chunk k of the connection's striped payloads
     * travels on stream k mod nstreams, headers always on stream 0. */
    int nstreams;       /* 1: `fd` is the socket itself */
    int sfd[XC__MAX_STREAMS];
    uint64_t wchunk;    /* striped chunks written so far (whole frames) */
    uint64_t rchunk;    /* striped chunks read so far (whole frames) */
    int wblock;         /* stream the writer waits on (full), -1 none */
    uint32_t armed[XC__MAX_STREAMS]; /* epoll events registered per stream */
    int rlowat[XC__MAX_STREAMS];     /* SO_RCVLOWAT set per stream (0: 1)   */
    int rlowat_cap;                  /* its cap (0: not looked up yet)      */
};

/* Move bytes for stream.c: returns the bytes moved (> 0), 0 if nothing can
 * move now, -1 if the connection ended (already reported). */
typedef ssize_t (*xc__io_fn)(xc_comm_t *comm, xc__conn_t *conn, struct iovec *iov, int n);
/* Write queued frames through `put` until done or it cannot take more. */
XC__HIDDEN void xc__stream_write(xc_comm_t *comm, xc__conn_t *conn, xc__io_fn put);
/* Queue a frame and, if the queue was empty, write at once (post_send of
 * stream transports). */
XC__HIDDEN void xc__stream_post(xc_comm_t *comm, xc__conn_t *conn, xc__tx_t *tx);
/* Read and dispatch frames through `get` until it has no more bytes. */
XC__HIDDEN void xc__stream_read(xc_comm_t *comm, xc__conn_t *conn, xc__io_fn get);
/* Is the receive side between frames? */
XC__HIDDEN int xc__stream_idle(const xc__conn_t *conn);

XC__HIDDEN extern const xc__transport_t xc__tcp_transport;
XC__HIDDEN extern const xc__transport_t xc__chan_transport;

/* Shared-memory channels of a communicator with a segment that has them
 * (comm->chans): create / service every channel (write what is queued,
 * read what arrived) / read what peer `p` sent / free. */
XC__HIDDEN xc_result_t xc__chan_open_all(xc_comm_t *comm);
XC__HIDDEN void xc__chan_service(xc_comm_t *comm);
XC__HIDDEN void xc__chan_drain(xc_comm_t *comm, int peer);
/* Map every page of the two rings between this rank and `peer` now
 * (contents unchanged), so that their first lap costs no page faults. */
XC__HIDDEN void xc__chan_prefault(xc_comm_t *comm, int peer);
/* Write frame `h` and its h->len bytes at `buf` into channel `c` whole, if
 * the ring has room for all of it: 1; else nothing is written: 0.  The
 * caller has checked that nothing is queued on `c` (frame order). */
XC__HIDDEN int xc__chan_put_frame(xc_comm_t *comm, xc__conn_t *c, const struct xc__hdr *h,
                                  const void *buf);
/* Read the point-to-point frame at the head of `peer`'s incoming channel
 * straight into bare receive `rx` (xc__match_p2p_direct says whether it
 * may), when the channel is between frames and the frame has arrived
 * whole: 1, rx->done set; 0: nothing has arrived yet; -1: something the
 * ordinary path must read (another frame, a part).  Nothing is consumed
 * unless 1. */
XC__HIDDEN int xc__chan_take_p2p(xc_comm_t *comm, int peer, xc__rx_t *rx);
XC__HIDDEN void xc__chan_free_all(xc_comm_t *comm);
/* Push queued frames out until done or `deadline_ns` (before goodbye). */
XC__HIDDEN void xc__chan_flush(xc_comm_t *comm, uint64_t deadline_ns);

/* Make a connection of `fd` (already connected and handshaken). */
XC__HIDDEN xc__conn_t *xc__tcp_conn_new(int fd, int peer, const char *addr);
/* The same with `n` streams (1..XC__MAX_STREAMS), fds[0] carrying the
 * headers; the connection owns the descriptors from here on (also on
 * failure: NULL means out of memory or no epoll set, all closed). */
XC__HIDDEN xc__conn_t *xc__tcp_conn_open(const int *fds, int n, int peer,
                                         const char *addr);
/* Close and free (NULL ok).  Drains unread input first so that closing does
 * not reset the connection before the peer has read what we sent. */
XC__HIDDEN void xc__conn_free(xc__conn_t *conn);
/* Write queued frames until the queue is empty or `deadline_ns` passes
 * (used for the last frames before closing: errors, goodbyes). */
XC__HIDDEN void xc__conn_flush(xc_comm_t *comm, xc__conn_t *conn,
                               uint64_t deadline_ns);
/* xc__conn_flush of every connection of `comm` until `deadline_ns`, in
 * turns of at most 50 ms each: a peer that does not read (stopped, or its
 * buffer full) costs the others a turn, not the whole budget. */
XC__HIDDEN void xc__conns_flush(xc_comm_t *comm, uint64_t deadline_ns);

#endif
