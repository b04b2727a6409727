/*
 * tcp.c -- the TCP transport: frames over one non-blocking stream socket per
 * pair of ranks.
 *
 * Send side: a FIFO of frames per connection, written with sendmsg (header
 * and payload in one call, MSG_NOSIGNAL so a dead peer never raises SIGPIPE).
 * A frame, once started, is always finished, so the stream never
 * desynchronises.
 *
 * Receive side: a two-state machine, header then payload.  The payload is
 * read straight into its final buffer (the posted receive's, or an
 * unexpected message's copy) chosen by the engine's matcher when the header
 * is complete.  Input is always drained, whether or not a receive is posted,
 * so two ranks sending to each other at once can never deadlock on full
 * socket buffers.
 */
#include "../core/comm.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <stdio.h>
#include <unistd.h>

#define XC__DISCARD_LEN 16384

static void tcp_write(xc_comm_t *comm, xc__conn_t *c)
{
    while (c->sq_head && c->state != XC__CONN_CLOSED) {
        xc__tx_t *tx = c->sq_head;
        size_t hl = sizeof tx->hdr, total = hl + tx->hdr.len;
        struct iovec iov[2];
        int n = 0;
        if (tx->off < hl) {
            iov[n].iov_base = (char *)&tx->hdr + tx->off;
            iov[n++].iov_len = hl - tx->off;
            if (tx->hdr.len) {
                iov[n].iov_base = (void *)tx->buf;
                iov[n++].iov_len = tx->hdr.len;
            }
        } else {
            iov[n].iov_base = (char *)tx->buf + (tx->off - hl);
            iov[n++].iov_len = total - tx->off;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            xc__comm_peer_lost(comm, c->peer, strerror(errno));
            return;
        }
        tx->off += (size_t)w;
        if (tx->off < total) return; /* socket full: wait for POLLOUT */
        c->sq_head = tx->next;
        if (!c->sq_head) c->sq_tail = NULL;
        tx->next = NULL;
        comm->stats.bytes_sent[XC_TRANSPORT_TCP] += tx->hdr.len;
        comm->stats.msgs_sent[XC_TRANSPORT_TCP]++;
        xc__tx_done(comm, tx);
    }
}

static void tcp_post_send(xc_comm_t *comm, xc__conn_t *c, xc__tx_t *tx)
{
    tx->next = NULL;
    tx->off = 0;
    int was_empty = c->sq_head == NULL;
    if (c->sq_tail) c->sq_tail->next = tx;
    else c->sq_head = tx;
    c->sq_tail = tx;
    if (was_empty) tcp_write(comm, c);
}

static void reset_rx(xc__conn_t *c)
{
    c->rhdr_off = 0;
    c->in_payload = 0;
    c->rdst = NULL;
    c->roff = 0;
    c->rrx = NULL;
    c->rux = NULL;
}

/* Returns 1 if the connection should be read again, 0 to stop. */
static int handle_eof(xc_comm_t *comm, xc__conn_t *c, ssize_t r)
{
    if (r == 0 && c->state == XC__CONN_BYE && !c->in_payload && c->rhdr_off == 0) {
        c->state = XC__CONN_CLOSED; /* graceful: the peer destroyed its comm */
        return 0;
    }
    const char *why = r == 0 ? "closed the connection" : strerror(errno);
    xc__comm_peer_lost(comm, c->peer, why);
    return 0;
}

static void tcp_read(xc_comm_t *comm, xc__conn_t *c)
{
    static _Thread_local char discard[XC__DISCARD_LEN]; /* write-only sink */
    while (c->state != XC__CONN_CLOSED) {
        if (!c->in_payload) {
            ssize_t r = recv(c->fd, (char *)&c->rhdr + c->rhdr_off,
                             sizeof c->rhdr - c->rhdr_off, MSG_DONTWAIT);
            if (r <= 0) {
                if (r < 0 && errno == EINTR) continue;
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
                handle_eof(comm, c, r);
                return;
            }
            c->rhdr_off += (size_t)r;
            if (c->rhdr_off < sizeof c->rhdr) continue;
            if (c->rhdr.magic != XC__FRAME_MAGIC ||
                c->rhdr.comm_tag != (uint32_t)comm->uid) {
                xc__comm_poison(comm, XC_ERR_PROTOCOL, 0,
                                "rank %d (%s) sent a frame with a bad magic or "
                                "communicator id (foreign or corrupted stream)",
                                c->peer, c->addr);
                c->state = XC__CONN_CLOSED;
                return;
            }
            c->in_payload = 1;
            c->roff = 0;
            xc__match_header(comm, c); /* sets rdst/rrx/rux */
            if (xc__comm_status(comm) == XC_ERR_PROTOCOL) return;
        }
        if (c->roff < c->rhdr.len) {
            size_t want = c->rhdr.len - c->roff;
            char *dst = c->rdst ? c->rdst + c->roff : discard;
            if (!c->rdst && want > sizeof discard) want = sizeof discard;
            ssize_t r = recv(c->fd, dst, want, MSG_DONTWAIT);
            if (r <= 0) {
                if (r < 0 && errno == EINTR) continue;
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
                handle_eof(comm, c, r);
                return;
            }
            c->roff += (size_t)r;
            if (c->roff < c->rhdr.len) continue;
        }
        comm->stats.bytes_recv[XC_TRANSPORT_TCP] += c->rhdr.len;
        xc__match_done(comm, c);
        reset_rx(c);
    }
}

static void tcp_on_ready(xc_comm_t *comm, xc__conn_t *c, short revents)
{
    if (revents & (POLLIN | POLLERR | POLLHUP)) tcp_read(comm, c);
    if ((revents & (POLLOUT | POLLERR)) && c->state != XC__CONN_CLOSED) tcp_write(comm, c);
}

static short tcp_poll_events(const xc__conn_t *c)
{
    if (c->state == XC__CONN_CLOSED) return 0;
    return (short)(POLLIN | (c->sq_head ? POLLOUT : 0));
}

const xc__transport_t xc__tcp_transport = {
    .name = "tcp",
    .kind = XC_TRANSPORT_TCP,
    .post_send = tcp_post_send,
    .on_ready = tcp_on_ready,
    .poll_events = tcp_poll_events,
};

xc__conn_t *xc__tcp_conn_new(int fd, int peer, const char *addr)
{
    xc__conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->tp = &xc__tcp_transport;
    c->fd = fd;
    c->peer = peer;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    xc__set_nonblock(fd);
    return c;
}

void xc__conn_flush(xc_comm_t *comm, xc__conn_t *c, uint64_t deadline_ns)
{
    while (c->sq_head && c->state != XC__CONN_CLOSED) {
        tcp_write(comm, c);
        if (!c->sq_head || c->state == XC__CONN_CLOSED) break;
        int ms = xc__poll_ms_left(deadline_ns);
        if (ms == 0) break;
        /* Keep draining input too: the peer may be blocked writing to us. */
        struct pollfd p = {c->fd, POLLOUT | POLLIN, 0};
        if (poll(&p, 1, ms > 50 || ms < 0 ? 50 : ms) > 0 && (p.revents & POLLIN)) {
            char buf[4096];
            ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r == 0) break;
        }
    }
}

void xc__conn_free(xc__conn_t *c)
{
    if (!c) return;
    if (c->fd >= 0) {
        shutdown(c->fd, SHUT_WR);
        /* Read what is left so close() sends FIN, not RST (an RST could
         * destroy data the peer has not read yet). */
        char buf[4096];
        while (recv(c->fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
        }
        close(c->fd);
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
