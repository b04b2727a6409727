/*
 * tcp.c -- the TCP transport: frames (stream.c) over non-blocking stream
 * sockets, written with sendmsg (header and payload in one call,
 * MSG_NOSIGNAL so a dead peer never raises SIGPIPE) and read with recv
 * straight into the frame's destination.
 *
 * A connection has one socket per pair of ranks, or several streams
 * (XCOLL_SOCKETS_PER_PEER; docs/tcp.md).  Several streams carry ONE logical
 * byte stream, the one a single socket would carry, cut up by a rule both
 * ends apply in the same order:
 *   - every frame header, and the whole payload of a frame of at most one
 *     chunk (XC__STRIPE_CHUNK), goes on stream 0;
 *   - a longer payload is cut into chunks, and the k-th striped chunk of the
 *     connection (counted over all frames, c->wchunk / c->rchunk) goes on
 *     stream k mod nstreams.
 * Both ends walk the logical stream in order, so frames arrive in exactly
 * the order they were sent (match.c's per-peer FIFO) and a payload still
 * lands straight in its destination.  The position is the one stream.c
 * keeps in the connection (rhdr, in_payload, roff when reading; the head
 * frame's off when writing): ms_get/ms_put map it to a stream.  The streams move in parallel because
 * the kernel buffers of the streams not being read at the moment keep
 * filling (and the one being read gets the link when those are full).
 *
 * With several streams, `fd` is an epoll set of them, so the engine polls
 * one descriptor per peer as before.  Interest is registered only where an
 * end waits: EPOLLIN on the stream the reader needs next, EPOLLOUT on the
 * stream the writer found full (a level-triggered set that listened to
 * every stream would wake the engine for data it cannot take yet).  Errors
 * and hang-ups are reported by epoll on every stream.
 */
#include "../core/comm.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

/* ------------------------------------------------------------ one stream */

/* Reads of at least this many bytes wake the reader only when that many
 * (up to XC__RCVLOWAT_MAX) are buffered; smaller ones on the first byte. */
#define XC__RCVLOWAT_MIN (16 * 1024)
#define XC__RCVLOWAT_MAX (64 * 1024)

/*
 * The reader of stream s (descriptor fd) found it empty and needs `want`
 * more bytes of the frame it is in: set the socket's receive low-water mark
 * so that poll reports it readable only once min(want, 64 KiB) bytes are
 * there.  Otherwise every arrival of a long payload on a slow link wakes
 * the engine (where a NIC hands over 1.5 KB segments, ~8000 times a second
 * at 100 Mbit/s; on the test bed's veth GSO packets of up to 64 KiB), each
 * a context switch taken from the compute on the same cores.  Those bytes
 * are certain to come (a dead peer's end of file or error still wakes the
 * poll), and every wait for input follows such an empty read, so the mark
 * never exceeds what is coming.  Capped at a quarter of a fixed receive
 * buffer (XCOLL_SOCKET_BUF_KB: the kernel grows only autotuned buffers to
 * hold the mark); small reads keep the mark at 1 and cost no system call.
 */
static void rx_lowat(const xc_comm_t *comm, xc__conn_t *c, int s, int fd, size_t want)
{
    if (!c->rlowat_cap) {
        int buf = 0;
        socklen_t l = sizeof buf;
        c->rlowat_cap = XC__RCVLOWAT_MAX;
        /* (a fixed buffer reads as twice what was set; half of that holds
         * data) */
        if (comm->cfg.socket_buf_kb > 0)
            c->rlowat_cap = getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, &l) == 0
                                ? XC__MIN(XC__MAX(buf / 4, 1), XC__RCVLOWAT_MAX)
                                : 1;
    }
    int v = want >= XC__RCVLOWAT_MIN ? (int)XC__MIN(want, (size_t)XC__RCVLOWAT_MAX) : 1;
    v = XC__MIN(v, c->rlowat_cap);
    if (v == (c->rlowat[s] ? c->rlowat[s] : 1)) return;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) c->rlowat[s] = v;
}

static ssize_t tcp_get(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n);

/* Read and dispatch what arrived.  A read can end without an empty read
 * (the poison of a malformed or mismatched frame returns at once), and
 * then a receive low-water mark set for a large payload would outlive it:
 * once poisoned, only small frames (error, goodbye, shrink) are still
 * awaited, so the marks go back to 1. */
static void tcp_read(xc_comm_t *comm, xc__conn_t *c, xc__io_fn get)
{
    xc__stream_read(comm, c, get);
    if (xc__comm_status(comm) == XC_OK) return;
    for (int s = 0; s < (c->nstreams > 1 ? c->nstreams : 1); s++)
        if (c->rlowat[s] > 1) rx_lowat(comm, c, s, c->nstreams > 1 ? c->sfd[s] : c->fd, 0);
}

/* A write failed (EPIPE, ECONNRESET): the peer may have left its cause, an
 * error frame, unread in this socket before it closed; read what is there
 * first, so that its cause, not "Broken pipe", is what this rank reports. */
static ssize_t write_failed(xc_comm_t *comm, xc__conn_t *c, int err)
{
    if (c->nstreams <= 1) tcp_read(comm, c, tcp_get);
    if (xc__comm_status(comm) == XC_OK) xc__comm_peer_lost(comm, c->peer, strerror(err));
    c->state = XC__CONN_CLOSED;
    return -1;
}

/* stream.c's `put`: one sendmsg (header and payload together). */
static ssize_t tcp_put(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    for (;;) {
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w >= 0) return w;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0; /* wait for POLLOUT */
        return write_failed(comm, c, errno);
    }
}

/* End of file (or a reset: `err`) on stream `s` (or on the only socket):
 * between frames after a goodbye it is the peer's close -- a reset too,
 * when one of this rank's frames reached the peer's closing socket --,
 * anywhere else a lost peer. */
static ssize_t got_eof(xc_comm_t *comm, xc__conn_t *c, int s, int err)
{
    if (s == 0 && c->state == XC__CONN_BYE && xc__stream_idle(c)) {
        c->state = XC__CONN_CLOSED;
        return -1;
    }
    xc__comm_peer_lost(comm, c->peer, err ? strerror(err) : "closed the connection");
    return -1;
}

/* stream.c's `get`: one recv. */
static ssize_t tcp_get(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    (void)n;
    for (;;) {
        ssize_t r = recv(c->fd, iov->iov_base, iov->iov_len, MSG_DONTWAIT);
        if (r > 0) return r;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            rx_lowat(comm, c, 0, c->fd, iov->iov_len);
            return 0;
        }
        return got_eof(comm, c, 0, r < 0 ? errno : 0);
    }
}

/* ------------------------------------------------------ several streams */

static int striped(const xc__conn_t *c, uint64_t len)
{
    return c->nstreams > 1 && len > XC__STRIPE_CHUNK;
}

static uint64_t nchunks(uint64_t len)
{
    return (len + XC__STRIPE_CHUNK - 1) / XC__STRIPE_CHUNK;
}

/* The stream holding the next byte the reader needs: stream 0 between
 * frames and for headers, else the one of the payload chunk being read. */
static int ms_rstream(const xc__conn_t *c)
{
    if (!c->in_payload || !striped(c, c->rhdr.len)) return 0;
    return (int)((c->rchunk + c->roff / XC__STRIPE_CHUNK) % (uint64_t)c->nstreams);
}

/* Register exactly the events the ends wait for (see the top). */
static void ms_arm(xc__conn_t *c)
{
    int rs = ms_rstream(c);
    for (int s = 0; s < c->nstreams; s++) {
        uint32_t ev = (s == rs ? EPOLLIN : 0u) |
                      (s == c->wblock && c->sq_head ? EPOLLOUT : 0u);
        if (ev == c->armed[s]) continue;
        struct epoll_event e = {.events = ev, .data.u32 = (uint32_t)s};
        if (epoll_ctl(c->fd, EPOLL_CTL_MOD, c->sfd[s], &e) == 0) c->armed[s] = ev;
    }
}

/* stream.c's `put` with several streams: writes the frame at the head of
 * the queue along the logical stream until it is done or a stream is full.
 * Returns the logical bytes written (0: the first stream was full). */
static ssize_t ms_put(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov_unused, int n_unused)
{
    (void)iov_unused;
    (void)n_unused;
    xc__tx_t *tx = c->sq_head;
    const size_t hl = sizeof tx->hdr;
    const uint64_t len = tx->hdr.len;
    const int str = striped(c, len);
    size_t done = 0;
    c->wblock = -1;
    while (tx->off + done < hl + len) {
        size_t pos = tx->off + done;
        struct iovec v[2];
        int nv = 0, s = 0;
        if (pos < hl) {
            v[nv].iov_base = (char *)&tx->hdr + pos;
            v[nv++].iov_len = hl - pos;
            /* The payload (or its first chunk) follows if it is on stream 0. */
            if (len && !str) {
                v[nv].iov_base = (void *)tx->buf;
                v[nv++].iov_len = len;
            } else if (str && c->wchunk % (uint64_t)c->nstreams == 0) {
                v[nv].iov_base = (void *)tx->buf;
                v[nv++].iov_len = XC__STRIPE_CHUNK;
            }
        } else {
            size_t p = pos - hl, end = len;
            if (str) {
                uint64_t k = p / XC__STRIPE_CHUNK;
                s = (int)((c->wchunk + k) % (uint64_t)c->nstreams);
                if ((k + 1) * XC__STRIPE_CHUNK < end) end = (k + 1) * XC__STRIPE_CHUNK;
            }
            v[nv].iov_base = (char *)tx->buf + p;
            v[nv++].iov_len = end - p;
        }
        size_t want = v[0].iov_len + (nv > 1 ? v[1].iov_len : 0);
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)nv};
        ssize_t w = sendmsg(c->sfd[s], &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->wblock = s;
                break;
            }
            return write_failed(comm, c, errno);
        }
        done += (size_t)w;
        if ((size_t)w < want) { /* that stream is full */
            c->wblock = s;
            break;
        }
    }
    if (str && tx->off + done == hl + len) c->wchunk += nchunks(len);
    return (ssize_t)done;
}

/* stream.c's `get` with several streams: reads from the stream that holds
 * the next byte of the logical stream, at most to the end of its chunk. */
static ssize_t ms_get(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    (void)n;
    size_t want = iov->iov_len;
    const uint64_t len = c->rhdr.len;
    const int str = c->in_payload && striped(c, len);
    const int s = ms_rstream(c);
    if (str) {
        uint64_t end = (c->roff / XC__STRIPE_CHUNK + 1) * XC__STRIPE_CHUNK;
        if (end > len) end = len;
        if (want > end - c->roff) want = (size_t)(end - c->roff);
    }
    for (;;) {
        ssize_t r = recv(c->sfd[s], iov->iov_base, want, MSG_DONTWAIT);
        if (r > 0) {
            if (str && c->roff + (uint64_t)r == len) c->rchunk += nchunks(len);
            return r;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            rx_lowat(comm, c, s, c->sfd[s], want);
            return 0;
        }
        return got_eof(comm, c, s, r < 0 ? errno : 0);
    }
}

/* Errors and hang-ups that epoll reports on streams nobody reads now. */
static void ms_check(xc_comm_t *comm, xc__conn_t *c)
{
    struct epoll_event ev[XC__MAX_STREAMS];
    int k = epoll_wait(c->fd, ev, XC__MAX_STREAMS, 0);
    for (int i = 0; i < k && c->state != XC__CONN_CLOSED; i++) {
        int s = (int)ev[i].data.u32;
        if (!(ev[i].events & (EPOLLERR | EPOLLHUP)) || s == ms_rstream(c)) continue;
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->sfd[s], SOL_SOCKET, SO_ERROR, &err, &el);
        if (c->state == XC__CONN_BYE && xc__stream_idle(c)) c->state = XC__CONN_CLOSED;
        else xc__comm_peer_lost(comm, c->peer, err ? strerror(err) : "closed a connection");
    }
}

/* ------------------------------------------------------------ vtable */

static void tcp_write(xc_comm_t *comm, xc__conn_t *c)
{
    if (c->nstreams <= 1) {
        xc__stream_write(comm, c, tcp_put);
        return;
    }
    xc__stream_write(comm, c, ms_put);
    if (c->state != XC__CONN_CLOSED) ms_arm(c);
}

static void tcp_on_ready(xc_comm_t *comm, xc__conn_t *c, short revents)
{
    if (c->nstreams <= 1) {
        if (revents & (POLLIN | POLLERR | POLLHUP)) tcp_read(comm, c, tcp_get);
        if ((revents & (POLLOUT | POLLERR)) && c->state != XC__CONN_CLOSED) tcp_write(comm, c);
        return;
    }
    /* The epoll set is readable: some stream has what an end waits for
     * (or an error).  Trying both ends costs a recv/sendmsg at most. */
    ms_check(comm, c);
    if (c->state != XC__CONN_CLOSED) tcp_read(comm, c, ms_get);
    if (c->state != XC__CONN_CLOSED && c->sq_head) tcp_write(comm, c);
    if (c->state != XC__CONN_CLOSED) ms_arm(c);
}

static short tcp_poll_events(const xc__conn_t *c)
{
    if (c->state == XC__CONN_CLOSED) return 0;
    if (c->nstreams > 1) return c->rx_dropped ? 0 : POLLIN; /* the epoll set */
    return (short)((c->rx_dropped ? 0 : POLLIN) | (c->sq_head ? POLLOUT : 0));
}

const xc__transport_t xc__tcp_transport = {
    .name = "tcp",
    .kind = XC_TRANSPORT_TCP,
    .post_send = xc__stream_post,
    .write = tcp_write,
    .on_ready = tcp_on_ready,
    .poll_events = tcp_poll_events,
};

xc__conn_t *xc__tcp_conn_open(const int *fds, int n, int peer, const char *addr)
{
    xc__conn_t *c = calloc(1, sizeof *c);
    int ep = -1;
    if (!c || n < 1 || n > XC__MAX_STREAMS) goto fail;
    c->tp = &xc__tcp_transport;
    c->peer = peer;
    c->nstreams = n;
    c->wblock = -1;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    for (int s = 0; s < n; s++) {
        c->sfd[s] = fds[s];
        xc__set_nonblock(fds[s]);
    }
    if (n == 1) {
        c->fd = fds[0];
        return c;
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) goto fail;
    for (int s = 0; s < n; s++) {
        struct epoll_event e = {.events = 0, .data.u32 = (uint32_t)s};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[s], &e) != 0) goto fail;
    }
    c->fd = ep;
    ms_arm(c); /* the reader waits for a header on stream 0 */
    return c;
fail:
    if (ep >= 0) close(ep);
    for (int s = 0; s < n; s++) close(fds[s]);
    free(c);
    return NULL;
}

xc__conn_t *xc__tcp_conn_new(int fd, int peer, const char *addr)
{
    return xc__tcp_conn_open(&fd, 1, peer, addr);
}

void xc__conn_flush(xc_comm_t *comm, xc__conn_t *c, uint64_t deadline_ns)
{
    while (c->sq_head && c->state != XC__CONN_CLOSED) {
        tcp_write(comm, c);
        if (!c->sq_head || c->state == XC__CONN_CLOSED) break;
        int ms = xc__poll_ms_left(deadline_ns);
        if (ms == 0) break;
        /* Keep draining input too: the peer may be blocked writing to us
         * (only error, goodbye and shrink frames are still sent when this
         * runs; what arrives is dropped). */
        int single = c->nstreams <= 1;
        int ns = single ? 1 : c->nstreams;
        struct pollfd p[XC__MAX_STREAMS];
        for (int s = 0; s < ns; s++) {
            p[s].fd = single ? c->fd : c->sfd[s];
            /* (no input while this connection is being read: see below) */
            p[s].events = (short)((c->reading ? 0 : POLLIN) |
                                  (single || s == c->wblock ? POLLOUT : 0));
            p[s].revents = 0;
        }
        if (poll(p, (nfds_t)ns, ms > 50 || ms < 0 ? 50 : ms) <= 0) continue;
        if (xc__comm_status(comm) != XC_OK) {
            /* Poisoned: read whole frames (the matcher discards them), so
             * the stream stays frame-synchronised for xc_comm_shrink --
             * unless this flush runs inside a read of this connection
             * (then only write, until the deadline). */
            if (c->reading) continue;
            for (int s = 0; s < ns; s++)
                if (p[s].revents & (POLLIN | POLLERR | POLLHUP)) {
                    if (single) tcp_read(comm, c, tcp_get);
                    else {
                        ms_check(comm, c);
                        if (c->state != XC__CONN_CLOSED) tcp_read(comm, c, ms_get);
                        if (c->state != XC__CONN_CLOSED) ms_arm(c);
                    }
                    break;
                }
            continue;
        }
        for (int s = 0; s < ns; s++) {
            if (!(p[s].revents & POLLIN)) continue;
            char buf[4096];
            ssize_t r = recv(p[s].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r == 0) { /* the peer closed: nothing more goes out */
                c->state = XC__CONN_CLOSED;
                return;
            }
            if (r > 0) c->rx_dropped = 1; /* see xc__stream_read */
        }
    }
}

void xc__conns_flush(xc_comm_t *comm, uint64_t deadline_ns)
{
    for (int pass = 0;; pass++) {
        int left = 0;
        for (int p = 0; p < comm->size; p++) {
            xc__conn_t *c = comm->conns[p];
            if (!c || !c->sq_head || c->state == XC__CONN_CLOSED) continue;
            /* A peer declared failed (silent: its buffer may stay full) gets
             * one turn, so the others' frames -- and the caller holding the
             * lock -- do not wait on it until the deadline. */
            if (pass && comm->failed && xc__failed_has(comm->failed, p)) continue;
            uint64_t turn = xc__now_ns() + 50000000ull;
            xc__conn_flush(comm, c, turn < deadline_ns ? turn : deadline_ns);
            left += c->sq_head && c->state != XC__CONN_CLOSED;
        }
        if (!left || xc__now_ns() >= deadline_ns) return;
    }
}

/* Close a socket without resetting it: read what is left so that close()
 * sends FIN, not RST (an RST could destroy data the peer has not read). */
static void close_gently(int fd)
{
    shutdown(fd, SHUT_WR);
    char buf[4096];
    while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
    close(fd);
}

void xc__conn_free(xc__conn_t *c)
{
    if (!c) return;
    if (c->nstreams > 1) {
        for (int s = 0; s < c->nstreams; s++) close_gently(c->sfd[s]);
        close(c->fd); /* the epoll set */
    } else if (c->fd >= 0) {
        close_gently(c->fd);
    }
    /* Control frames still queued own their memory. */
    for (xc__tx_t *tx = c->sq_head, *nx; tx; tx = nx) {
        nx = tx->next;
        if (!tx->op) {
            free(tx->owned);
            free(tx);
        }
    }
    free(c);
}
