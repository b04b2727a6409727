/*
 * stream.c -- frames on a byte stream, for every transport that carries one
 * (TCP sockets, shared-memory channels).
 *
 * Send side: the connection's FIFO of frames is written in order through
 * the transport's `put`; a frame, once started, is always finished, so the
 * stream never desynchronises.  A frame completes (xc__tx_done) when its
 * last byte is in the transport's hands.
 *
 * Receive side: a two-state machine, header then payload.  A header is
 * checked (xc__frame_check: magic, communicator, kind, flags, length
 * bounds) before anything else is done with it.  The payload goes
 * straight into its final buffer (the posted receive's, or an unexpected
 * message's copy), chosen by the engine's matcher when the header is
 * complete.  Input is always drained, whether or not a receive is posted,
 * so two ranks sending to each other at once can never deadlock on full
 * buffers.
 */
#include "../core/comm.h"

#include <string.h>

/* Whether the connection's traffic is timed (last_rx_ns / last_tx_ns):
 * sockets, for heartbeats and the liveness check.  A shared-memory
 * channel's peer is watched through its socket and the shared segment,
 * and a clock read per frame cost a small exchange ~0.05 us (of 0.40). */
static inline int timed(const xc__conn_t *c) { return c->tp->kind != XC_TRANSPORT_SHM; }

#define XC__DISCARD_LEN 16384

void xc__stream_write(xc_comm_t *comm, xc__conn_t *c, xc__io_fn put)
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
        ssize_t w = put(comm, c, iov, n);
        if (w <= 0) return; /* full (wait for room) or broken (reported) */
        tx->off += (size_t)w;
        if (tx->off < total) return;
        c->sq_head = tx->next;
        if (!c->sq_head) c->sq_tail = NULL;
        tx->next = NULL;
        /* A rendezvous frame's data is counted when it has been read. */
        if (!(tx->hdr.flags & XC__FL_RNDV)) comm->stats.bytes_sent[c->tp->kind] += tx->hdr.len;
        comm->stats.msgs_sent[c->tp->kind]++;
        xc__tx_done(comm, tx);
    }
}

void xc__stream_post(xc_comm_t *comm, xc__conn_t *c, xc__tx_t *tx)
{
    tx->next = NULL;
    tx->off = 0;
    if (timed(c)) c->last_tx_ns = xc__now_ns();
    int was_empty = c->sq_head == NULL;
    if (c->sq_tail) c->sq_tail->next = tx;
    else c->sq_head = tx;
    c->sq_tail = tx;
    if (was_empty) c->tp->write(comm, c);
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

static int read_frames(xc_comm_t *comm, xc__conn_t *c, xc__io_fn get);

void xc__stream_read(xc_comm_t *comm, xc__conn_t *c, xc__io_fn get)
{
    /* A poison raised while a frame is dispatched flushes error frames,
     * and that flush reads whole frames from poisoned connections: never
     * from this one, which is in the middle of one -- nor does a goodbye
     * dispatched meanwhile drain it (xc__chan_drain): a read re-entered
     * returns, the outer one goes on.  Nor from a connection whose input a
     * goodbye's flush dropped (xc__conn_flush): mid-frame for all we know. */
    if (c->reading || c->rx_dropped) return;
    c->reading = 1;
    if (read_frames(comm, c, get) && timed(c)) c->last_rx_ns = xc__now_ns();
    c->reading = 0;
}

/* Read and dispatch frames; 1 if any bytes arrived. */
static int read_frames(xc_comm_t *comm, xc__conn_t *c, xc__io_fn get)
{
    int got = 0;
    static _Thread_local char discard[XC__DISCARD_LEN]; /* write-only sink */
    while (c->state != XC__CONN_CLOSED) {
        if (!c->in_payload) {
            struct iovec v = {(char *)&c->rhdr + c->rhdr_off, sizeof c->rhdr - c->rhdr_off};
            ssize_t r = get(comm, c, &v, 1);
            if (r <= 0) return got;
            got = 1;
            c->rhdr_off += (size_t)r;
            if (c->rhdr_off < sizeof c->rhdr) continue;
            const char *bad = xc__frame_check(&c->rhdr, (uint32_t)comm->uid);
            if (bad) {
                xc__comm_poison(comm, XC_ERR_PROTOCOL, 0,
                                "rank %d (%s) sent a malformed frame: %s (kind %d, "
                                "%llu bytes)",
                                c->peer, c->addr, bad, (int)c->rhdr.kind,
                                (unsigned long long)c->rhdr.len);
                c->state = XC__CONN_CLOSED;
                return got;
            }
            if (c->rhdr.kind == XC__F_BEAT) { /* liveness only (empty: checked) */
                reset_rx(c);
                continue;
            }
            c->in_payload = 1;
            c->roff = 0;
            xc__match_header(comm, c); /* sets rdst/rrx/rux */
            if (xc__comm_status(comm) == XC_ERR_PROTOCOL) return got;
        }
        if (c->roff < c->rhdr.len) {
            size_t want = c->rhdr.len - c->roff;
            char *dst = c->rdst ? c->rdst + c->roff : discard;
            if (!c->rdst && want > sizeof discard) want = sizeof discard;
            struct iovec v = {dst, want};
            ssize_t r = get(comm, c, &v, 1);
            if (r <= 0) return got;
            got = 1;
            c->roff += (size_t)r;
            if (c->roff < c->rhdr.len) continue;
        }
        if (!(c->rhdr.flags & XC__FL_RNDV)) comm->stats.bytes_recv[c->tp->kind] += c->rhdr.len;
        xc__match_done(comm, c);
        reset_rx(c);
        if (comm->read_stop && *comm->read_stop) break;
    }
    return got;
}

int xc__stream_idle(const xc__conn_t *c)
{
    return !c->in_payload && c->rhdr_off == 0;
}
