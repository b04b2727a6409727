/*
 * p2p_express.c -- small sends and receives between ranks that share
 * memory, without operations (docs/engine.md "Express point-to-point").
 *
 * A send writes its frame into the peer's channel whole or not at all; a
 * group's receives are posted bare (no operation, no request) through the
 * ordinary matcher, their peers' channels read for a brief poll, and what
 * is still unfinished then is adopted: given the operation it would have
 * had, so the caller waits for it as on the ordinary path.  A nonblocking
 * send or receive finished at the call returns a request born complete.
 * Everything the express path does not finish is the ordinary path's, so
 * matching, mismatch errors and liveness live in one place (match.c,
 * engine.c).
 */
#include "p2p_express.h"

#include "../algo/algos.h"
#include "../algo/shm_coll.h"
#include "bias.h"

#include <string.h>

/* Channel turns of a receive before it is adopted (one on an
 * oversubscribed node, where the peer needs this core to send). */
#define EXPRESS_POLLS 128

/* As if holding the lock: the bias (bias.h) or the mutex.  1: biased. */
static int express_lock(xc_comm_t *comm)
{
    if (xc__bias_enter(comm)) return 1;
    xc__comm_lock(comm);
    return 0;
}

/* `earn`: a locked call that ran on the express path may earn the bias. */
static void express_unlock(xc_comm_t *comm, int biased, int earn)
{
    if (biased) {
        xc__bias_leave(comm);
        return;
    }
    if (earn) xc__bias_earn(comm);
    pthread_mutex_unlock(&comm->mu);
}

/* The channel to `peer` if express traffic may use it: open both ways
 * (the socket too: its state is how a departed peer shows), else NULL --
 * the ordinary path then says why. */
static xc__conn_t *express_chan(xc_comm_t *comm, int peer)
{
    if (peer < 0 || peer >= comm->size) return NULL;
    xc__conn_t *c = comm->chans[peer], *s = comm->conns[peer];
    if (!c || c->state != XC__CONN_OPEN) return NULL;
    if (s && (s->state != XC__CONN_OPEN || s->left)) return NULL;
    return c;
}

/* Healthy, untraced, with channels (called as if holding the lock). */
static int express_ok(const xc_comm_t *comm)
{
    return comm->chans && !comm->trace_lane && xc__comm_status(comm) == XC_OK;
}

static xc__desc_t p2p_desc(xc_coll_t coll, xc_dtype_t dtype, size_t count)
{
    xc__desc_t d = {.coll = (uint8_t)coll, .dtype = (uint8_t)dtype, .algo = XC__ALGO_P2P,
                    .root = -1, .count = count};
    return d;
}

int xc__p2p_express_send(xc_comm_t *comm, const void *buf, size_t count, xc_dtype_t dtype,
                         int peer, int tag)
{
    if (!comm->chans) return 0; /* set at creation */
    size_t len = count * xc__dtype_size(dtype);
    int biased = express_lock(comm);
    xc__conn_t *c = express_ok(comm) && len < xc__p2p_eager(comm) ? express_chan(comm, peer)
                                                                 : NULL;
    int done = 0;
    /* Nothing of this rank's queued ahead of it on the channel: frames
     * leave in the order they were posted. */
    if (c && !c->sq_head) {
        xc__hdr_t h;
        xc__p2p_plain_hdr(comm, &h, dtype, count, tag);
        done = xc__chan_put_frame(comm, c, &h, buf);
    }
    if (done) {
        comm->stats.bytes_sent[XC_TRANSPORT_SHM] += len;
        comm->stats.msgs_sent[XC_TRANSPORT_SHM]++;
        xc__desc_t d = p2p_desc(XC_COLL_SEND, dtype, count);
        xc__p2p_express_done(comm, &d, peer, tag, XC_OK);
    }
    express_unlock(comm, biased, done);
    return done;
}

void xc__p2p_express_note(xc__op_t *op, void *buf, size_t count, xc_dtype_t dtype, int peer,
                          int tag)
{
    xc__rx_t *rx = &op->prx;
    rx->buf = buf;
    rx->len = count * xc__dtype_size(dtype);
    rx->peer = peer;
    rx->kind = XC__F_P2P;
    rx->tag = tag;
    rx->seq = 0;
    rx->desc = p2p_desc(XC_COLL_RECV, dtype, count);
    rx->op = NULL;
    rx->done = 0;
    op->req = NULL; /* not an operation (yet) */
}

/* Make receive `op`, posted bare, the operation it would have been (in
 * the caller's frame, or allocated: `on_stack`): its descriptor stays
 * where the matcher has it (queued, or being filled). */
static void adopt(xc_comm_t *comm, xc__op_t *op, xc_request_t *req, int on_stack)
{
    xc__op_init(comm, XC_COLL_RECV, op, req, on_stack); /* (leaves prx alone) */
    op->desc = op->prx.desc;
    op->peer = op->prx.peer;
    op->prx.op = op;
    op->pending = 1;
    xc__op_adopt_p2p(comm, op);
}

/* The receives: posted, their channels read for `polls` turns (0: the
 * brief poll), the unfinished adopted (`on_stack` as adopt's) -- counted
 * in *nadopted under the lock: an adopted allocated operation may be
 * completed and freed by another thread as soon as it is released. */
static int express_recvs(xc_comm_t *comm, xc__op_t *const *ops, xc_request_t *const *reqs,
                         size_t n, int polls, int on_stack, xc_result_t *rc, size_t *nadopted)
{
    if (!comm->chans) return 0;
    int biased = express_lock(comm);
    /* Nothing pending: no receive of this rank is posted ahead of these,
     * none waits on XC_ANY_SOURCE, no send of its is queued. */
    int ok = express_ok(comm) && !comm->p2p_ops;
    size_t eager = ok ? xc__p2p_eager(comm) : 0;
    for (size_t i = 0; ok && i < n; i++) {
        const xc__rx_t *rx = &ops[i]->prx;
        ok = rx->len < eager && rx->peer != comm->rank && express_chan(comm, rx->peer);
    }
    if (!ok) {
        express_unlock(comm, biased, 0);
        return 0;
    }
    xc__shm_out_flush(comm); /* a peer ahead may wait for it (docs/shm.md) */
    if (!polls) polls = comm->oversub || !comm->spin_ns ? 1 : EXPRESS_POLLS;
    /* Straight from the channel, in order, while each receive's frame is
     * the next its peer sent and nothing else could match it: no posting,
     * no stream machine, no matcher (a 2-rank send/receive of 8 bytes
     * 0.20 -> 0.16 us in the VM's quick placement; docs/engine.md).  The
     * first that cannot -- its frame not plain or not its own, or not
     * arrived within the turns -- is posted with the rest. */
    size_t direct = 0;
    int turn = 0;
    while (direct < n && turn < polls && xc__comm_status(comm) == XC_OK) {
        xc__rx_t *rx = &ops[direct]->prx;
        int r = xc__chan_take_p2p(comm, rx->peer, rx);
        if (r < 0) break;
        if (r > 0) direct++;
        else if (++turn < polls) __builtin_ia32_pause();
    }
    for (size_t i = direct; i < n && xc__comm_status(comm) == XC_OK; i++)
        xc__post_rx(comm, &ops[i]->prx); /* takes a frame kept early */
    size_t left = n - direct;
    for (; left && turn < polls; turn++) {
        left = 0;
        for (size_t i = 0; i < n && xc__comm_status(comm) == XC_OK; i++) {
            xc__rx_t *rx = &ops[i]->prx;
            if (rx->done) continue;
            comm->read_stop = &rx->done;
            xc__chan_drain(comm, rx->peer);
            comm->read_stop = NULL;
            left += !rx->done;
        }
        if (!left || xc__comm_status(comm) != XC_OK || turn + 1 >= polls) break;
        __builtin_ia32_pause();
    }
    xc_result_t st = xc__comm_status(comm);
    for (size_t i = 0; i < n; i++) {
        xc__rx_t *rx = &ops[i]->prx;
        if (rx->done || st != XC_OK) { /* a failure: poisoning forgot every receive */
            xc__p2p_express_done(comm, &rx->desc, rx->peer, rx->tag, rx->done ? XC_OK : st);
        } else {
            adopt(comm, ops[i], reqs[i], on_stack);
            ++*nadopted;
        }
    }
    *rc = xc__unqueued_result(comm, st);
    express_unlock(comm, biased, !left && st == XC_OK);
    return 1;
}

int xc__p2p_express_recvs(xc_comm_t *comm, xc__op_t *const *ops, xc_request_t *const *reqs,
                          size_t n, xc_result_t *rc)
{
    size_t adopted = 0;
    return express_recvs(comm, ops, reqs, n, 0, 1, rc, &adopted);
}

/* A nonblocking receive does not poll for its frame: one look (the frames
 * kept early, then its peer's channel), since its caller waits later. */
int xc__p2p_express_irecv(xc_comm_t *comm, xc__op_t *op, xc_request_t *req, xc_result_t *rc)
{
    size_t adopted = 0;
    if (!express_recvs(comm, &op, &req, 1, 1, 0, rc, &adopted)) return XC__P2P_DECLINED;
    return adopted ? XC__P2P_ADOPTED : XC__P2P_FINISHED;
}
