/*
 * match.c -- matching arriving frames to posted receives, and posting sends
 * and receives for operations.
 *
 * Collective frames from one peer are consumed in the order that peer sent
 * them (one FIFO per peer): both ranks build the same schedule, so the n-th
 * receive this rank posts from peer p is the n-th frame p sends it.  Each
 * frame's header is checked against the receive (sequence number, collective,
 * dtype, op, count, root, algorithm, length); any difference poisons the
 * communicator with XC_ERR_MISMATCH before a byte of payload is written.
 * A frame for a collective this rank already completed can only mean the
 * ranks disagree too.  Point-to-point frames match the first posted receive
 * with the same tag, in posting order: the peer's own receives and the
 * any-source ones (comm->any_head) are ordered by one counter
 * (comm->p2p_order), which also numbers unexpected frames as they arrive,
 * so an any-source receive takes the earliest of them from any peer.
 */
#include "../algo/algos.h"
#include "../core/comm.h"
#include "../core/mem_share.h"
#include "../core/promote.h"
#include "../transport/shm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void xc__desc_str(const xc__desc_t *d, uint64_t seq, char *buf, size_t cap)
{
    const char *algo = xc_algo_name(d->algo);
    if (d->coll == XC_COLL_SEND || d->coll == XC_COLL_RECV)
        snprintf(buf, cap, "%s (%s, %" PRIu64 " elements)", xc_coll_name(d->coll),
                 xc_dtype_name(d->dtype), d->count);
    else {
        int reduces = d->coll == XC_COLL_ALLREDUCE || d->coll == XC_COLL_REDUCE_SCATTER ||
                      d->coll == XC_COLL_REDUCE;
        int rooted = d->coll == XC_COLL_REDUCE || d->coll == XC_COLL_BCAST;
        char root[24] = "";
        if (rooted) snprintf(root, sizeof root, ", root %d", (int)d->root);
        if (d->coll == XC_COLL_ALLTOALL && d->op == XC_PROD) /* (api_coll.c) */
            snprintf(root, sizeof root, ", in place");
        snprintf(buf, cap, "%s #%" PRIu64 " (%s%s%s, %" PRIu64 " elements%s, %s)",
                 xc_coll_name(d->coll), seq, xc_dtype_name(d->dtype), reduces ? " " : "",
                 reduces ? xc_op_name(d->op) : "", d->count, root, algo ? algo : "?");
    }
}

static void hdr_desc(const xc__hdr_t *h, xc__desc_t *d)
{
    d->coll = h->coll;
    d->dtype = h->dtype;
    d->op = h->op;
    d->algo = h->algo;
    d->root = h->root;
    d->count = h->count;
}

static int desc_eq(const xc__desc_t *a, const xc__desc_t *b)
{
    return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
           a->algo == b->algo && a->root == b->root && a->count == b->count;
}

/* Is `h` the frame `rx` waits for?  If not, poison with both descriptions. */
static int check_frame(xc_comm_t *comm, int peer, const xc__rx_t *rx,
                       const xc__hdr_t *h)
{
    xc__desc_t hd;
    hdr_desc(h, &hd);
    char want[200], got[200];
    /* A rendezvous frame carries an address, not the data (its length is
     * checked when the data is read). */
    int len_ok = (h->flags & XC__FL_RNDV) || h->len == rx->len;
    if (rx->kind == XC__F_P2P) {
        if (h->dtype == rx->desc.dtype && h->count == rx->desc.count && len_ok) return 1;
        xc__desc_str(&hd, 0, got, sizeof got);
        xc__desc_str(&rx->desc, 0, want, sizeof want);
        xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                        "rank %d sent a message with tag %d as %s but this rank "
                        "posted recv with tag %d as %s",
                        peer, (int)h->tag, got, (int)rx->tag, want);
        return 0;
    }
    if (h->seq == rx->seq && desc_eq(&hd, &rx->desc) && len_ok) return 1;
    xc__desc_str(&hd, h->seq, got, sizeof got);
    xc__desc_str(&rx->desc, rx->seq, want, sizeof want);
    if (h->seq == rx->seq && desc_eq(&hd, &rx->desc))
        xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                        "rank %d sent %" PRIu64 " bytes for %s but this rank "
                        "expected %zu bytes (per-rank counts disagree)",
                        peer, h->len, want, rx->len);
    else
        xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                        "rank %d called %s while this rank called %s", peer, got,
                        want);
    return 0;
}

/*
 * Early messages' payloads are buffered in memory of their own, freed when
 * a receive takes them.  Where a peer is always ahead (a crowded node, a
 * pipeline) that is a malloc and a free of the same size per message, and
 * from 32-64 KiB glibc serves it from the top of the heap and gives it
 * back at once: each free shrinks the heap with brk (a TLB flush of every
 * CPU the process ran on) and each malloc grows it and faults its pages in
 * again.  4 ranks on 2 cores exchanging 64 KiB through 2 MiB rings took
 * 320-490 us a call instead of ~30 (perf: brk, flush_tlb_mm_range, page
 * faults in memmove; bench/RESULTS.md, fortieth session).  So the
 * communicator keeps up to XC__UBUF_KEEP such buffers, each at most UBUF_MAX,
 * for the next early messages; smaller ones are malloc's own bins' job.
 */
#define UBUF_MIN 4096
#define UBUF_MAX ((size_t)4 << 20)

/* A buffer of at least `len` bytes (its capacity in *cap), or NULL. */
static void *ubuf_get(xc_comm_t *comm, size_t len, size_t *cap)
{
    int best = -1;
    for (int i = 0; len >= UBUF_MIN && i < XC__UBUF_KEEP; i++)
        if (comm->ubuf[i].p && comm->ubuf[i].cap >= len &&
            (best < 0 || comm->ubuf[i].cap < comm->ubuf[best].cap))
            best = i;
    if (best < 0) {
        *cap = len;
        return malloc(len);
    }
    void *p = comm->ubuf[best].p;
    *cap = comm->ubuf[best].cap;
    comm->ubuf[best].p = NULL;
    return p;
}

/* Free the buffers kept. */
static void ubuf_release(xc_comm_t *comm)
{
    for (int i = 0; i < XC__UBUF_KEEP; i++) {
        free(comm->ubuf[i].p);
        comm->ubuf[i].p = NULL;
    }
}

/* Keep buffer `p` of capacity `cap` for the next early message, in an
 * empty slot or in place of a smaller one, or free it. */
static void ubuf_put(xc_comm_t *comm, void *p, size_t cap)
{
    if (!p) return;
    int slot = -1;
    for (int i = 0; cap >= UBUF_MIN && cap <= UBUF_MAX && i < XC__UBUF_KEEP; i++) {
        if (!comm->ubuf[i].p) {
            slot = i;
            break;
        }
        if (comm->ubuf[i].cap < cap && (slot < 0 || comm->ubuf[i].cap < comm->ubuf[slot].cap))
            slot = i;
    }
    if (slot < 0) {
        free(p);
        return;
    }
    free(comm->ubuf[slot].p);
    comm->ubuf[slot].p = p;
    comm->ubuf[slot].cap = cap;
}

static xc__unexp_t *unexp_new(xc_comm_t *comm, const xc__hdr_t *h)
{
    xc__unexp_t *u = calloc(1, sizeof *u);
    if (u && h->len) u->data = ubuf_get(comm, (size_t)h->len, &u->cap);
    if (!u || (h->len && !u->data)) {
        if (u) free(u);
        xc__comm_poison(comm, XC_ERR_NOMEM, 0,
                        "cannot buffer an early message of %" PRIu64 " bytes", h->len);
        return NULL;
    }
    u->hdr = *h;
    return u;
}

static void unexp_free(xc_comm_t *comm, xc__unexp_t *u)
{
    if (!u) return;
    ubuf_put(comm, u->data, u->cap);
    free(u);
}

#define Q_APPEND(head, tail, x)                                                \
    do {                                                                       \
        (x)->next = NULL;                                                      \
        if (tail) (tail)->next = (x);                                          \
        else (head) = (x);                                                     \
        (tail) = (x);                                                          \
    } while (0)

/* Unlink `x` (whose predecessor is `prev`, NULL if head). */
#define Q_UNLINK(head, tail, prev, x)                                          \
    do {                                                                       \
        if (prev) (prev)->next = (x)->next;                                    \
        else (head) = (x)->next;                                               \
        if ((tail) == (x)) (tail) = (prev);                                    \
        (x)->next = NULL;                                                      \
    } while (0)

/* The posted receive a point-to-point frame from `peer` on `tag` goes to:
 * that peer's first receive on the tag or the first any-source receive on
 * it, whichever was posted first; unlinked, its peer set.  NULL: none. */
static xc__rx_t *p2p_take(xc_comm_t *comm, int peer, int32_t tag)
{
    xc__peerq_t *q = &comm->pq[peer];
    xc__rx_t *pp = NULL, *p = q->p2p_head, *ap = NULL, *a = comm->any_head;
    while (p && p->tag != tag) pp = p, p = p->next;
    while (a && a->tag != tag) ap = a, a = a->next;
    if (a && (!p || a->order < p->order)) {
        Q_UNLINK(comm->any_head, comm->any_tail, ap, a);
        a->peer = peer;
        return a;
    }
    if (p) Q_UNLINK(q->p2p_head, q->p2p_tail, pp, p);
    return p;
}

/* Keep a point-to-point frame no receive waits for yet. */
static xc__unexp_t *p2p_early(xc_comm_t *comm, int peer, const xc__hdr_t *h)
{
    xc__unexp_t *u = unexp_new(comm, h);
    if (!u) return NULL;
    u->order = ++comm->p2p_order;
    xc__peerq_t *q = &comm->pq[peer];
    Q_APPEND(q->up2p_head, q->up2p_tail, u);
    return u;
}

int xc__no_remote_sender(const xc_comm_t *comm)
{
    if (comm->size < 2) return 0;
    for (int p = 0; p < comm->size; p++) {
        const xc__conn_t *c = comm->conns[p];
        if (p != comm->rank && c && c->state == XC__CONN_OPEN && !c->left) return 0;
    }
    return 1;
}

/* The connection data frames to `peer` take (see transport.h). */
static xc__conn_t *data_conn(xc_comm_t *comm, int peer)
{
    return comm->chans && comm->chans[peer] ? comm->chans[peer] : comm->conns[peer];
}

void xc__send_control(xc_comm_t *comm, int peer, int kind, uint64_t seq)
{
    xc__conn_t *c = kind == XC__F_ACK ? data_conn(comm, peer) : comm->conns[peer];
    if (!c || c->state == XC__CONN_CLOSED) return;
    xc__tx_t *tx = calloc(1, sizeof *tx);
    if (!tx) return;
    tx->hdr.magic = XC__FRAME_MAGIC;
    tx->hdr.kind = (uint8_t)kind;
    tx->hdr.comm_tag = (uint32_t)comm->uid;
    tx->hdr.seq = seq;
    c->tp->post_send(comm, c, tx);
}

/* Rendezvous: read the sender's buffer straight into the receive, then
 * tell the sender it may reuse it. */
static void rndv_pull(xc_comm_t *comm, int peer, const xc__hdr_t *h, const uint64_t pay[3],
                      xc__rx_t *rx)
{
    size_t len = (size_t)pay[1];
    if (len != rx->len) {
        char want[200];
        xc__desc_str(&rx->desc, rx->seq, want, sizeof want);
        if (rx->kind == XC__F_P2P)
            xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                            "rank %d sent %zu bytes with tag %d but this rank's recv expects %zu",
                            peer, len, (int)h->tag, rx->len);
        else
            xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                            "rank %d sent %zu bytes for %s but this rank expected %zu bytes "
                            "(per-rank counts disagree)",
                            peer, len, want, rx->len);
        return;
    }
    const xc__shm_ctl_t *pc = &comm->node_shm->ctl[comm->local_of[peer]];
    if (xc__peer_xfer((pid_t)pc->pid, pc->share_fd, pc->share_nonce, rx->buf, (uintptr_t)pay[0],
                      len, 0) != 0) {
        /* A sender that failed first poisoned the segment and may have
         * freed its buffer: report its cause, not a lost peer. */
        if (!xc__shm_adopt_poison(comm, comm->node_shm))
            xc__comm_peer_lost(comm, peer, "could not be read (process_vm_readv) for a message");
        return;
    }
    /* A sender that failed (abort, error) may reuse its buffer as soon as
     * its send has failed, which it does after poisoning the segment: look
     * after the copy, and fail rather than deliver what may be torn. */
    if (xc__shm_adopt_poison(comm, comm->node_shm)) return;
    comm->stats.single_copy_bytes += len;
    comm->stats.bytes_recv[XC_TRANSPORT_SHM] += rx->len;
    xc__send_control(comm, peer, XC__F_ACK, pay[2]);
    xc__rx_done(comm, rx);
}

/* The sender's side: the receiver has read rendezvous `id`. */
static void rndv_acked(xc_comm_t *comm, int peer, uint64_t id)
{
    xc__tx_t *prev = NULL, *tx = comm->rndv_wait;
    while (tx && !(tx->rndv[2] == id && tx->peer == peer)) prev = tx, tx = tx->next;
    if (!tx) {
        xc__comm_poison(comm, XC_ERR_PROTOCOL, 0,
                        "rank %d acknowledged a message this rank never sent", peer);
        return;
    }
    if (prev) prev->next = tx->next;
    else comm->rndv_wait = tx->next;
    tx->next = NULL;
    comm->stats.bytes_sent[XC_TRANSPORT_SHM] += tx->rndv[1];
    xc__tx_done(comm, tx);
}

/* Deliver a complete (or still arriving) unexpected message to `rx`. */
static void deliver_unexp(xc_comm_t *comm, xc__unexp_t *u, xc__rx_t *rx)
{
    if (!u->complete) {
        u->rx = rx; /* match_done copies when the payload is complete */
        return;
    }
    if (u->hdr.flags & XC__FL_RNDV) {
        uint64_t pay[3];
        if (u->hdr.len != sizeof pay) {
            unexp_free(comm, u);
            xc__comm_poison(comm, XC_ERR_PROTOCOL, 0, "rank %d sent a malformed rendezvous frame",
                            rx->peer);
            return;
        }
        memcpy(pay, u->data, sizeof pay);
        xc__hdr_t h = u->hdr;
        unexp_free(comm, u);
        rndv_pull(comm, rx->peer, &h, pay, rx);
        return;
    }
    if (u->hdr.len) xc__copy(rx->buf, u->data, u->hdr.len);
    unexp_free(comm, u);
    xc__rx_done(comm, rx);
}

/* The arriving frame fills posted receive `rx` (with its data, or for a
 * rendezvous frame with the address the data is read from). */
static void take_rx(xc_comm_t *comm, xc__conn_t *c, xc__rx_t *rx)
{
    c->rrx = rx;
    c->rdst = rx->buf;
    if (c->rhdr.flags & XC__FL_RNDV) {
        if (c->rhdr.len != sizeof c->rndv) {
            c->rrx = NULL;
            c->rdst = NULL;
            xc__comm_poison(comm, XC_ERR_PROTOCOL, 0, "rank %d sent a malformed rendezvous frame",
                            c->peer);
            return;
        }
        c->rdst = (char *)c->rndv;
    }
}

void xc__match_header(xc_comm_t *comm, xc__conn_t *c)
{
    const xc__hdr_t *h = &c->rhdr;
    xc__peerq_t *q = &comm->pq[c->peer];
    c->rdst = NULL;
    c->rrx = NULL;
    c->rux = NULL;
    if (h->kind == XC__F_BYE) {
        /* The last frame it sends: receives still waiting on it never end
         * (once what it left in our channel is read), nor do rendezvous
         * sends waiting for its acknowledgement. */
        c->state = XC__CONN_BYE;
        xc__chan_drain(comm, c->peer);
        int acks = 0;
        for (xc__tx_t *tx = comm->rndv_wait; tx; tx = tx->next) acks |= tx->peer == c->peer;
        if (xc__comm_status(comm) == XC_OK &&
            (q->coll_head || q->p2p_head || acks ||
             (comm->any_head && xc__no_remote_sender(comm))))
            xc__comm_peer_lost(comm, c->peer, "destroyed its communicator");
        return;
    }
    if (h->kind == XC__F_ACK) {
        if (xc__comm_status(comm) == XC_OK) rndv_acked(comm, c->peer, h->seq);
        return;
    }
    if (h->kind == XC__F_ERROR) {
        if (h->len <= 4096 && (c->rux = unexp_new(comm, h))) c->rdst = c->rux->data;
        return;
    }
    if (h->kind == XC__F_SHRINK) { /* also on a poisoned communicator */
        xc__shrink_header(comm, c);
        return;
    }
    if (xc__comm_status(comm) != XC_OK) return; /* poisoned: discard */
    if ((h->flags & XC__FL_RNDV) && c->tp != &xc__chan_transport) {
        xc__comm_poison(comm, XC_ERR_PROTOCOL, 0,
                        "rank %d (%s) sent a single-copy frame over a socket", c->peer, c->addr);
        return;
    }
    if (h->kind == XC__F_COLL) {
        xc__rx_t *rx = q->coll_head;
        if (rx) {
            if (!check_frame(comm, c->peer, rx, h)) return;
            Q_UNLINK(q->coll_head, q->coll_tail, (xc__rx_t *)NULL, rx);
            take_rx(comm, c, rx);
            return;
        }
        xc__desc_t hd;
        hdr_desc(h, &hd);
        char got[200];
        if (h->seq <= comm->done_seq) {
            xc__desc_str(&hd, h->seq, got, sizeof got);
            xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                            "rank %d sent data for %s, which this rank already "
                            "completed with a different description",
                            c->peer, got);
            return;
        }
        xc__op_t *head = comm->coll_head;
        if (head && head->seq == h->seq && !desc_eq(&head->desc, &hd)) {
            char want[200];
            xc__desc_str(&hd, h->seq, got, sizeof got);
            xc__desc_str(&head->desc, head->seq, want, sizeof want);
            xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                            "rank %d called %s while this rank called %s", c->peer,
                            got, want);
            return;
        }
        xc__unexp_t *u = unexp_new(comm, h);
        if (!u) return;
        Q_APPEND(q->ucoll_head, q->ucoll_tail, u);
        c->rux = u;
        c->rdst = u->data;
        return;
    }
    if (h->kind == XC__F_P2P) {
        xc__rx_t *rx = p2p_take(comm, c->peer, h->tag);
        if (rx) {
            if (!check_frame(comm, c->peer, rx, h)) return;
            take_rx(comm, c, rx);
            return;
        }
        xc__unexp_t *u = p2p_early(comm, c->peer, h);
        if (!u) return;
        c->rux = u;
        c->rdst = u->data;
        return;
    }
    xc__comm_poison(comm, XC_ERR_PROTOCOL, 0, "rank %d (%s) sent a frame of unknown kind %d",
                    c->peer, c->addr, (int)h->kind);
}

void xc__match_done(xc_comm_t *comm, xc__conn_t *c)
{
    if (c->rhdr.kind == XC__F_SHRINK) {
        xc__shrink_done(comm, c);
        return;
    }
    if (c->rrx) {
        if (c->rhdr.flags & XC__FL_RNDV) rndv_pull(comm, c->peer, &c->rhdr, c->rndv, c->rrx);
        else xc__rx_done(comm, c->rrx);
        return;
    }
    xc__unexp_t *u = c->rux;
    if (!u) return;
    /* The frame is whole: the connection lets go of it before anything
     * below frees it or poisons (poisoning inspects the connection). */
    c->rux = NULL;
    c->rdst = NULL;
    if (u->hdr.kind == XC__F_ERROR) {
        int32_t code = XC_ERR_INTERNAL;
        char msg[XC__ERRMSG_LEN] = "";
        if (u->hdr.len >= sizeof code) {
            memcpy(&code, u->data, sizeof code);
            size_t n = u->hdr.len - sizeof code;
            if (n >= sizeof msg) n = sizeof msg - 1;
            memcpy(msg, (char *)u->data + sizeof code, n);
            msg[n] = 0;
        }
        if (!xc__wire_code_ok(code)) code = XC_ERR_INTERNAL;
        unexp_free(comm, u);
        xc__comm_poison(comm, (xc_result_t)code, XC__POISON_RELAY, "rank %d reported: %s",
                        c->peer, msg);
        return;
    }
    u->complete = 1;
    if (u->rx) {
        xc__rx_t *rx = u->rx;
        u->rx = NULL;
        deliver_unexp(comm, u, rx);
    }
}

void xc__tx_done(xc_comm_t *comm, xc__tx_t *tx)
{
    if (!tx->op) { /* control frame */
        free(tx->owned);
        free(tx);
        return;
    }
    if ((tx->hdr.flags & XC__FL_RNDV) && !tx->done && tx->off) {
        /* Written, but the receiver still reads our buffer: wait for its
         * ACK (rndv_acked calls us again with off = 0). */
        tx->off = 0;
        tx->next = comm->rndv_wait;
        comm->rndv_wait = tx;
        return;
    }
    tx->done = 1;
    xc__op_t *op = tx->op;
    op->pending--;
    if (op->is_p2p && op->pending == 0) xc__op_complete(comm, op, XC_OK);
}

void xc__rx_done(xc_comm_t *comm, xc__rx_t *rx)
{
    rx->done = 1;
    xc__op_t *op = rx->op;
    if (!op) return; /* a bare receive (the express path): its caller looks */
    if (op->is_p2p) op->req->source = rx->peer;
    op->pending--;
    if (op->is_p2p && op->pending == 0) xc__op_complete(comm, op, XC_OK);
}

static void fill_hdr(xc_comm_t *comm, const xc__op_t *op, xc__hdr_t *h, size_t len)
{
    memset(h, 0, sizeof *h);
    h->magic = XC__FRAME_MAGIC;
    h->kind = op->is_p2p ? XC__F_P2P : XC__F_COLL;
    h->coll = op->desc.coll;
    h->dtype = op->desc.dtype;
    h->op = op->desc.op;
    h->comm_tag = (uint32_t)comm->uid;
    h->root = op->desc.root;
    h->algo = op->desc.algo;
    h->tag = 0; /* the caller sets a point-to-point tag */
    h->seq = op->seq;
    h->count = op->desc.count;
    h->len = len;
}

/* Can traffic still flow to/from `peer`?  If not, poison and return 0. */
static int peer_usable(xc_comm_t *comm, int peer, const char *what)
{
    xc__conn_t *c = comm->conns[peer];
    if (!c || (c->state == XC__CONN_OPEN && !c->left)) return 1;
    if (c->left) {
        xc__comm_poison(comm, XC_ERR_ABORTED, 0,
                        "cannot %s rank %d (%s): it has left the communicator to shrink it "
                        "(xc_comm_shrink)",
                        what, peer, c->addr);
        return 0;
    }
    xc__comm_poison(comm, XC_ERR_PEER_LOST, 0,
                    "cannot %s rank %d (%s): it has destroyed its communicator or "
                    "closed its connection",
                    what, peer, c->addr);
    return 0;
}

void xc__post_send(xc_comm_t *comm, xc__op_t *op, xc__tx_t *tx, int peer,
                   const void *buf, size_t len)
{
    int32_t tag = op->is_p2p ? op->ptx.hdr.tag : 0;
    fill_hdr(comm, op, &tx->hdr, len);
    tx->hdr.tag = tag;
    tx->buf = buf;
    tx->op = op;
    tx->owned = NULL;
    tx->done = 0;
    tx->off = 0;
    tx->peer = peer;
    op->pending++;
    if (peer == comm->rank) { /* point-to-point to self */
        xc__rx_t *rx = p2p_take(comm, peer, tag);
        if (rx) {
            if (!check_frame(comm, peer, rx, &tx->hdr)) return;
            if (len) xc__copy(rx->buf, buf, len);
            comm->stats.bytes_sent[XC_TRANSPORT_SELF] += len;
            xc__rx_done(comm, rx);
        } else {
            xc__unexp_t *u = p2p_early(comm, peer, &tx->hdr);
            if (!u) return;
            if (len) xc__copy(u->data, buf, len);
            u->complete = 1;
            comm->stats.bytes_sent[XC_TRANSPORT_SELF] += len;
        }
        comm->stats.msgs_sent[XC_TRANSPORT_SELF]++;
        xc__tx_done(comm, tx);
        return;
    }
    if (!peer_usable(comm, peer, "send to")) return;
    xc__conn_t *c = data_conn(comm, peer);
    if (comm->cma && c->tp == &xc__chan_transport &&
        len >= comm->p2p_cma_min && len) {
        /* Same node, large: send the address and let the receiver read
         * (a buffer sent again and again goes on huge pages: promote.c). */
        xc__promote(buf, len, comm->cfg.shm_promote);
        tx->rndv[0] = (uint64_t)(uintptr_t)buf;
        tx->rndv[1] = (uint64_t)len;
        tx->rndv[2] = ++comm->rndv_id;
        tx->buf = tx->rndv;
        tx->hdr.len = sizeof tx->rndv;
        tx->hdr.flags |= XC__FL_RNDV;
    }
    c->tp->post_send(comm, c, tx);
}

/* An any-source receive: the earliest-arrived frame on its tag from any
 * peer, or wait on the communicator's any-source queue. */
static void post_any(xc_comm_t *comm, xc__rx_t *rx)
{
    xc__unexp_t *best = NULL, *best_prev = NULL;
    int from = -1;
    for (int p = 0; p < comm->size; p++) {
        xc__unexp_t *prev = NULL, *u = comm->pq[p].up2p_head;
        while (u && u->hdr.tag != rx->tag) prev = u, u = u->next;
        if (u && (!best || u->order < best->order)) best = u, best_prev = prev, from = p;
    }
    if (!best) {
        if (xc__no_remote_sender(comm)) {
            xc__comm_poison(comm, XC_ERR_PEER_LOST, 0,
                            "cannot receive from any source: every other rank has destroyed "
                            "its communicator, left it (xc_comm_shrink) or closed its "
                            "connection");
            return;
        }
        Q_APPEND(comm->any_head, comm->any_tail, rx);
        return;
    }
    rx->peer = from;
    if (!check_frame(comm, from, rx, &best->hdr)) return;
    Q_UNLINK(comm->pq[from].up2p_head, comm->pq[from].up2p_tail, best_prev, best);
    deliver_unexp(comm, best, rx);
}

void xc__post_recv(xc_comm_t *comm, xc__op_t *op, xc__rx_t *rx, int peer, void *buf,
                   size_t len)
{
    rx->buf = buf;
    rx->len = len;
    rx->peer = peer;
    rx->kind = op->is_p2p ? XC__F_P2P : XC__F_COLL;
    rx->tag = op->is_p2p ? op->prx.tag : 0;
    rx->seq = op->seq;
    rx->desc = op->desc;
    rx->op = op;
    op->pending++;
    xc__post_rx(comm, rx);
}

void xc__post_rx(xc_comm_t *comm, xc__rx_t *rx)
{
    int peer = rx->peer;
    rx->next = NULL;
    rx->done = 0;
    if (rx->kind == XC__F_P2P) rx->order = ++comm->p2p_order;
    if (peer == XC_ANY_SOURCE) {
        post_any(comm, rx);
        return;
    }
    xc__peerq_t *q = &comm->pq[peer];
    if (rx->kind == XC__F_COLL) {
        xc__unexp_t *u = q->ucoll_head;
        if (u) {
            if (!check_frame(comm, peer, rx, &u->hdr)) return;
            Q_UNLINK(q->ucoll_head, q->ucoll_tail, (xc__unexp_t *)NULL, u);
            deliver_unexp(comm, u, rx);
            return;
        }
        if (!peer_usable(comm, peer, "receive from")) return;
        Q_APPEND(q->coll_head, q->coll_tail, rx);
        return;
    }
    xc__unexp_t *prev = NULL, *u = q->up2p_head;
    while (u && u->hdr.tag != rx->tag) prev = u, u = u->next;
    if (u) {
        if (!check_frame(comm, peer, rx, &u->hdr)) return;
        Q_UNLINK(q->up2p_head, q->up2p_tail, prev, u);
        deliver_unexp(comm, u, rx);
        return;
    }
    if (peer != comm->rank && !peer_usable(comm, peer, "receive from")) return;
    Q_APPEND(q->p2p_head, q->p2p_tail, rx);
}

void xc__p2p_plain_hdr(const xc_comm_t *comm, xc__hdr_t *h, xc_dtype_t dtype, size_t count,
                       int32_t tag)
{
    memset(h, 0, sizeof *h);
    h->magic = XC__FRAME_MAGIC;
    h->kind = XC__F_P2P;
    h->coll = XC_COLL_SEND;
    h->dtype = (uint8_t)dtype;
    h->comm_tag = (uint32_t)comm->uid;
    h->root = -1;
    h->algo = XC__ALGO_P2P;
    h->tag = tag;
    h->count = count;
    h->len = count * xc__dtype_size(dtype);
}

int xc__p2p_is_plain(const xc_comm_t *comm, const xc__hdr_t *h)
{
    xc__hdr_t p;
    xc__p2p_plain_hdr(comm, &p, (xc_dtype_t)h->dtype, (size_t)h->count, h->tag);
    return memcmp(&p, h, sizeof p) == 0;
}

int xc__match_p2p_direct(const xc_comm_t *comm, int peer, const xc__rx_t *rx,
                         const xc__hdr_t *h)
{
    const xc__peerq_t *q = &comm->pq[peer];
    return h->kind == XC__F_P2P && h->flags == 0 && h->tag == rx->tag && !q->p2p_head &&
           !q->up2p_head && !comm->any_head && h->dtype == rx->desc.dtype &&
           h->count == rx->desc.count && h->len == rx->len && xc__comm_status(comm) == XC_OK;
}

/* A frame being read into memory that is going away is discarded. */
static void detach_reads(xc_comm_t *comm, xc__conn_t **conns, int n)
{
    for (int p = 0; p < n; p++) {
        xc__conn_t *c = conns[p];
        if (c && c->rrx) c->rrx = NULL, c->rdst = NULL;
        if (c && c->rux && c->rux->hdr.kind != XC__F_ERROR) {
            if (c->rux->rx) unexp_free(comm, c->rux); /* matched: in no queue */
            c->rux = NULL;
            c->rdst = NULL;
        }
    }
}

/* The error frames still being read (detach_reads keeps them: an error
 * frame is read to its end even on a poisoned communicator). */
static void drop_error_reads(xc_comm_t *comm, xc__conn_t **conns, int n)
{
    for (int p = 0; p < n; p++) {
        xc__conn_t *c = conns[p];
        if (c && c->rux) {
            unexp_free(comm, c->rux);
            c->rux = NULL;
            c->rdst = NULL;
        }
    }
}

void xc__match_free(xc_comm_t *comm)
{
    xc__match_clear(comm);
    drop_error_reads(comm, comm->conns, comm->size);
    if (comm->chans) drop_error_reads(comm, comm->chans, comm->size);
    ubuf_release(comm); /* the one just freed may be kept */
}

void xc__match_clear(xc_comm_t *comm)
{
    comm->rndv_wait = NULL; /* their operations are being failed */
    comm->any_head = comm->any_tail = NULL;
    detach_reads(comm, comm->conns, comm->size);
    if (comm->chans) detach_reads(comm, comm->chans, comm->size);
    for (int p = 0; p < comm->size; p++) {
        xc__peerq_t *q = &comm->pq[p];
        for (xc__unexp_t *u = q->ucoll_head, *n; u; u = n) n = u->next, unexp_free(comm, u);
        for (xc__unexp_t *u = q->up2p_head, *n; u; u = n) n = u->next, unexp_free(comm, u);
        memset(q, 0, sizeof *q);
    }
    ubuf_release(comm); /* and the buffers kept for early ones */
}
