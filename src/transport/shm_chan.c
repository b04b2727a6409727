/*
 * shm_chan.c -- shared-memory channels: the transport of frames between
 * ranks of one node (point-to-point messages, schedule-based collectives,
 * rendezvous acknowledgements).
 *
 * Every ordered pair of ranks on one node has a single-producer single-
 * consumer byte ring in the node's segment (shm.h, shm_setup.c): the sender copies frames
 * (stream.c's framing, the same as on a socket) in at `head`, the receiver
 * copies them out at `tail`; each counter has one writer, on its own cache
 * line, published with release (and the peer woken if it sleeps), read
 * with acquire.  A frame larger than the free room goes in pieces as the
 * receiver makes room.  Costs: a message of n bytes is copied twice (in and
 * out, 2n of memory traffic plus the header), with one cache-line handoff
 * each way -- against two system calls and the kernel's two copies on
 * loopback TCP.  Large point-to-point payloads do not travel here at all:
 * the frame carries their address and the receiver reads them in one copy
 * (match.c's rendezvous).
 *
 * Channels have no descriptor: the engine services them on its turns
 * (xc__comm_advance, xc__comm_poll), so progress needs no system call.
 * Peers on other nodes have no channel (chans[p] == NULL): their frames
 * take the socket.  A dead peer is
 * noticed on its socket (end of file), which stays open beside the channel
 * and carries error and goodbye frames.
 */
#include "../core/comm.h"
#include "shm.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Copy `n` bytes between `buf` and the ring at stream position `pos`. */
static void ring_copy(char *ring, size_t size, uint64_t pos, void *buf, size_t n, int in)
{
    size_t at = (size_t)(pos & (size_t)(size - 1)), first = size - at < n ? size - at : n;
    if (in) {
        memcpy(ring + at, buf, first);
        memcpy(ring, (char *)buf + first, n - first);
    } else {
        memcpy(buf, ring + at, first);
        memcpy((char *)buf + first, ring, n - first);
    }
}

static ssize_t chan_put(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    uint64_t tail = xc__shm_load(&c->ctx->tail);
    size_t room = c->cbytes - (size_t)(c->chead - tail), total = 0;
    for (int i = 0; i < n && total < room; i++) {
        size_t len = iov[i].iov_len < room - total ? iov[i].iov_len : room - total;
        ring_copy(c->ctxd, c->cbytes, c->chead + total, iov[i].iov_base, len, 1);
        total += len;
    }
    if (!total) return 0;
    c->chead += total;
    xc__shm_publish_to(comm->node_shm, &c->ctx->head, c->chead, comm->local_of[c->peer]);
    return (ssize_t)total;
}

static ssize_t chan_get(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    (void)n;
    size_t avail = (size_t)(xc__shm_load(&c->crx->head) - c->ctail);
    size_t len = iov->iov_len < avail ? iov->iov_len : avail;
    if (!len) return 0;
    ring_copy(c->crxd, c->cbytes, c->ctail, iov->iov_base, len, 0);
    c->ctail += len;
    xc__shm_publish_to(comm->node_shm, &c->crx->tail, c->ctail, comm->local_of[c->peer]);
    return (ssize_t)len;
}

/* Frames left queued (the ring is full) make a backlog the engine keeps
 * servicing even with no operation pending (an ACK, for instance). */
static void chan_write(xc_comm_t *comm, xc__conn_t *c)
{
    xc__stream_write(comm, c, chan_put);
    if (c->sq_head && !comm->chan_backlog) {
        comm->chan_backlog = 1;
        if (comm->has_thread && comm->waiters == 0) xc__comm_kick(comm);
    }
}

static void chan_on_ready(xc_comm_t *comm, xc__conn_t *c, short revents)
{
    (void)revents;
    xc__stream_read(comm, c, chan_get);
    chan_write(comm, c);
}

static short chan_poll_events(const xc__conn_t *c)
{
    (void)c;
    return 0; /* nothing to poll: serviced on every engine turn */
}

const xc__transport_t xc__chan_transport = {
    .name = "shm",
    .kind = XC_TRANSPORT_SHM,
    .post_send = xc__stream_post,
    .write = chan_write,
    .on_ready = chan_on_ready,
    .poll_events = chan_poll_events,
};

xc_result_t xc__chan_open_all(xc_comm_t *comm)
{
    xc__shm_t *s = comm->node_shm;
    if (!s || !s->chan_bytes) return XC_OK;
    int me = comm->local_rank;
    xc__conn_t **chans = calloc((size_t)comm->size, sizeof *chans);
    if (!chans) return xc__err(XC_ERR_NOMEM, "out of memory (shared-memory channels)");
    for (int p = 0; p < comm->size; p++) {
        if (p == comm->rank || comm->node_of[p] != comm->node) continue;
        xc__conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            for (int q = 0; q < p; q++) free(chans[q]);
            free(chans);
            return xc__err(XC_ERR_NOMEM, "out of memory (shared-memory channels)");
        }
        c->tp = &xc__chan_transport;
        c->fd = -1;
        c->peer = p;
        if (comm->conns[p]) memcpy(c->addr, comm->conns[p]->addr, sizeof c->addr);
        int lp = comm->local_of[p];
        c->ctx = xc__shm_chan_ctl(s, me, lp);
        c->ctxd = xc__shm_chan_data(s, me, lp);
        c->crx = xc__shm_chan_ctl(s, lp, me);
        c->crxd = xc__shm_chan_data(s, lp, me);
        c->cbytes = s->chan_bytes;
        chans[p] = c;
    }
    comm->chans = chans;
    return XC_OK;
}

void xc__chan_service(xc_comm_t *comm)
{
    int backlog = 0;
    for (int p = 0; p < comm->size; p++) {
        xc__conn_t *c = comm->chans[p];
        if (!c || c->state == XC__CONN_CLOSED) continue;
        if (__atomic_load_n(&c->crx->head, __ATOMIC_RELAXED) != c->ctail)
            xc__stream_read(comm, c, chan_get);
        if (c->sq_head) chan_write(comm, c);
        backlog |= c->sq_head != NULL && c->state != XC__CONN_CLOSED;
    }
    comm->chan_backlog = backlog;
}

void xc__chan_drain(xc_comm_t *comm, int peer)
{
    xc__conn_t *c = comm->chans ? comm->chans[peer] : NULL;
    if (c && c->state != XC__CONN_CLOSED) xc__stream_read(comm, c, chan_get);
}

void xc__chan_flush(xc_comm_t *comm, uint64_t deadline_ns)
{
    if (!comm->chans) return;
    for (;;) {
        int pending = 0;
        xc__chan_service(comm);
        for (int p = 0; p < comm->size; p++)
            pending |= comm->chans[p] && comm->chans[p]->sq_head &&
                       comm->chans[p]->state != XC__CONN_CLOSED;
        if (!pending || xc__now_ns() >= deadline_ns) return;
        sched_yield();
    }
}

void xc__chan_free_all(xc_comm_t *comm)
{
    if (!comm->chans) return;
    for (int p = 0; p < comm->size; p++) xc__conn_free(comm->chans[p]);
    free(comm->chans);
    comm->chans = NULL;
}
