/*
 * tcp.c -- the TCP transport: frames (stream.c) over one non-blocking
 * stream socket per pair of ranks, written with sendmsg (header and payload
 * in one call, MSG_NOSIGNAL so a dead peer never raises SIGPIPE) and read
 * with recv straight into the frame's destination.
 */
#include "../core/comm.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <stdio.h>
#include <unistd.h>

/* stream.c's `put`: one sendmsg (header and payload together). */
static ssize_t tcp_put(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    for (;;) {
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w >= 0) return w;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0; /* wait for POLLOUT */
        xc__comm_peer_lost(comm, c->peer, strerror(errno));
        return -1;
    }
}

static void tcp_write(xc_comm_t *comm, xc__conn_t *c) { xc__stream_write(comm, c, tcp_put); }

/* stream.c's `get`: one recv; end of file between frames after a goodbye
 * is the peer's graceful close, anywhere else a lost peer. */
static ssize_t tcp_get(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    (void)n;
    for (;;) {
        ssize_t r = recv(c->fd, iov->iov_base, iov->iov_len, MSG_DONTWAIT);
        if (r > 0) return r;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (r == 0 && c->state == XC__CONN_BYE && xc__stream_idle(c)) {
            c->state = XC__CONN_CLOSED;
            return -1;
        }
        xc__comm_peer_lost(comm, c->peer, r == 0 ? "closed the connection" : strerror(errno));
        return -1;
    }
}

static void tcp_on_ready(xc_comm_t *comm, xc__conn_t *c, short revents)
{
    if (revents & (POLLIN | POLLERR | POLLHUP)) xc__stream_read(comm, c, tcp_get);
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
    .post_send = xc__stream_post,
    .write = tcp_write,
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
