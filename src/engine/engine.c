/*
 * engine.c -- operations, their completion, and the failure path.
 *
 * Collectives sit in a FIFO per communicator and run one at a time, in the
 * order they were issued; the head's schedule is advanced whenever the
 * engine runs.  Point-to-point operations are independent and complete as
 * soon as their one send or receive does.
 *
 * Failure: the first error that makes further progress impossible (a lost
 * peer, a timeout, a mismatch, an abort, a protocol violation) poisons the
 * communicator.  Poisoning fails every pending operation with that code,
 * detaches the transport from memory that belongs to them, and sends an
 * error frame to every peer so that all ranks fail with the same code and a
 * message naming the rank that saw the problem -- even ranks that were not
 * talking to the failed one.
 */
#include "../core/comm.h"
#include "../trace/trace.h"
#include "../transport/shm.h"
#include "../algo/shm_coll.h"
#include "bias.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* The communicator this thread is waiting on (a completion it causes need
 * not wake anybody). */
static _Thread_local xc_comm_t *tls_waiting;

void xc__comm_kick(xc_comm_t *comm)
{
    uint64_t one = 1;
    ssize_t w = write(comm->efd, &one, sizeof one);
    (void)w;
    /* This process's sleepers on a shared-memory communicator wait on
     * its bell (the kick is for them, not for the node); an idle progress
     * thread sleeps there unannounced (see progress_idle). */
    if (comm->node_shm) {
        if (__atomic_load_n(&comm->thread_idle, __ATOMIC_SEQ_CST))
            xc__shm_bump(comm->node_shm, comm->node_shm->me);
        else xc__shm_ring_rank(comm->node_shm, comm->node_shm->me);
    }
}

/* Arm / disarm the progress thread (called with the lock held): armed, it
 * is announced on this rank's bell, so the next frame a peer writes into
 * one of this rank's channels (a message, a rendezvous request, an ACK,
 * ring room) wakes it.  Operations that only a channel's traffic moves are
 * handed to the thread this way instead of by a kick: a kick wakes it at
 * once, and on a crowded node its wake-up takes a core the peers need
 * (an isend/irecv/waitall exchange of 64 B cost 2.5 us against 0.5
 * without the thread) though the caller usually waits a moment later. */
static void thread_disarm(xc_comm_t *comm)
{
    if (!comm->armed) return;
    comm->armed = 0;
    xc__shm_disarm(comm->node_shm);
}

static void thread_arm(xc_comm_t *comm)
{
    /* Take what has arrived first, unannounced: a peer's frame that comes
     * while this call reads (a single-copy read takes microseconds, and the
     * peer's answer to this rank's own request lands then) needs no ring,
     * which would cost the peer a system call and wake the thread. */
    if (!comm->armed) xc__chan_service(comm);
    if (comm->npending == 0) {
        thread_disarm(comm);
        return;
    }
    if (!comm->armed) {
        comm->armed = 1;
        xc__shm_arm(comm->node_shm); /* seq_cst: before the look below */
    }
    /* What arrived before the announcement rang nobody: take it now. */
    xc__chan_service(comm);
    if (comm->npending == 0) thread_disarm(comm);
}

/* Give pending work nobody is about to wait for to the progress thread. */
static void hand_to_thread(xc_comm_t *comm)
{
    if (comm->nwakes[XC__WAKE_KICK] > 0) xc__comm_kick(comm);
    else if (comm->nwakes[XC__WAKE_ARM] > 0 || comm->chan_backlog) thread_arm(comm);
}

void xc__comm_handoff(xc_comm_t *comm)
{
    xc__comm_lock(comm);
    if (comm->has_thread && comm->waiters == 0 && comm->npending > 0) hand_to_thread(comm);
    pthread_mutex_unlock(&comm->mu);
}

/* The class of `op` (before it is posted).  Over a channel: a send needs
 * nobody -- its frame is in the ring once posted (a single-copy one's
 * data is read by the receiver, who answers with an ACK that only
 * completes the request: a wait or a test takes it), and a frame the ring
 * could not take yet leaves a backlog, which arms the thread
 * (hand_to_thread); a receive no larger than the eager limit -- below the
 * single-copy size and a quarter of the ring, so its data moves without
 * this rank -- needs nobody either, a larger one (this rank reads it)
 * arms.  Everything else kicks. */
static uint8_t wake_class(const xc_comm_t *comm, const xc__op_t *op)
{
    if (!op->is_p2p || op->peer < 0 || !comm->chans || !comm->chans[op->peer])
        return XC__WAKE_KICK;
    if (op->desc.coll == XC_COLL_SEND) return XC__WAKE_NONE;
    return op->prx.len < xc__p2p_eager(comm) ? XC__WAKE_NONE : XC__WAKE_ARM;
}

size_t xc__p2p_eager(const xc_comm_t *comm)
{
    size_t eager = comm->p2p_cma_min;
    return eager < comm->node_shm->chan_bytes / 4 ? eager : comm->node_shm->chan_bytes / 4;
}

static void drain_efd(xc_comm_t *comm)
{
    uint64_t v;
    ssize_t r = read(comm->efd, &v, sizeof v);
    (void)r;
}

static void request_release(xc_request_t *req)
{
    /* acq_rel: the last holder must see every write of the other. */
    if (__atomic_sub_fetch(&req->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(req->msg);
        free(req);
    }
}

/* A request pending (done 0), result XC_OK so far, held `refs` times. */
static void request_init(xc_request_t *req, xc_comm_t *comm, xc_coll_t coll, int refs)
{
    memset(req, 0, sizeof *req);
    req->comm = comm;
    req->refs = refs;
    req->coll = coll;
    req->source = -1;
    req->rc = XC_OK;
}

static void op_setup(xc_comm_t *comm, xc_coll_t coll, xc__op_t *op, xc_request_t *req)
{
    /* Everything but the point-to-point descriptors (set by xc__post_send /
     * xc__post_recv) and the inline state buffer, which their users set. */
    memset(op, 0, offsetof(xc__op_t, ptx));
    request_init(req, comm, coll, 2);
    op->req = req;
    op->desc.coll = (uint8_t)coll;
    op->is_p2p = coll == XC_COLL_SEND || coll == XC_COLL_RECV;
    xc__sched_init(&op->sched, &comm->scratch_pool);
}

xc_result_t xc__op_new(xc_comm_t *comm, xc_coll_t coll, xc__op_t **opp,
                       xc_request_t **reqp)
{
    xc__op_t *op = malloc(sizeof *op);
    xc_request_t *req = malloc(sizeof *req);
    if (!op || !req) {
        free(op);
        free(req);
        return xc__err(XC_ERR_NOMEM, "out of memory allocating an operation");
    }
    op_setup(comm, coll, op, req);
    *opp = op;
    *reqp = req;
    return XC_OK;
}

void xc__request_init_done(xc_request_t *req, xc_comm_t *comm, xc_coll_t coll, int source)
{
    request_init(req, comm, coll, 1); /* the caller's only: no operation holds it */
    req->source = source;
    req->done = 1;
}

xc_request_t *xc__request_new_done(xc_comm_t *comm, xc_coll_t coll)
{
    xc_request_t *req = malloc(sizeof *req);
    if (req) xc__request_init_done(req, comm, coll, -1);
    return req;
}

void xc__op_init(xc_comm_t *comm, xc_coll_t coll, xc__op_t *op, xc_request_t *req, int on_stack)
{
    op_setup(comm, coll, op, req);
    op->on_stack = (uint8_t)on_stack;
    req->on_stack = (uint8_t)on_stack;
}

void xc__op_init_stack(xc_comm_t *comm, xc_coll_t coll, xc__op_t *op, xc_request_t *req)
{
    xc__op_init(comm, coll, op, req, 1);
}

void xc__op_discard(xc__op_t *op)
{
    if (!op) return;
    xc__sched_free(&op->sched);
    free(op->priv);
    if (op->on_stack) return;
    free(op->req);
    free(op);
}

/* Enqueue and start `op` with the lock held; on failure the op is
 * discarded (the caller unlocks). */
static xc_result_t submit_locked(xc_comm_t *comm, xc__op_t *op, int will_wait)
{
    xc_result_t st = xc__comm_status(comm);
    if (st != XC_OK) {
        xc__op_discard(op);
        return xc__err(st, "communicator is unusable after an earlier error: %s",
                       comm->errmsg);
    }
    if (comm->trace_lane) op->t_issue = xc__now_ns();
    if (op->is_p2p) {
        xc__op_adopt_p2p(comm, op);
        if (op->desc.coll == XC_COLL_SEND)
            xc__post_send(comm, op, &op->ptx, op->peer, op->ptx.buf, op->ptx.hdr.len);
        else
            xc__post_recv(comm, op, &op->prx, op->peer, op->prx.buf, op->prx.len);
    } else {
        op->deadline_ns = 0; /* set when first looked at: xc__op_deadline */
        comm->npending++;
        op->wakes = wake_class(comm, op);
        comm->nwakes[op->wakes]++;
        if (!op->issued) { /* (run_direct issued it already) */
            op->seq = comm->next_seq++;
            xc__flight_issue(comm, op);
        }
        op->next = NULL;
        if (comm->coll_tail) comm->coll_tail->next = op;
        else comm->coll_head = op;
        comm->coll_tail = op;
        xc__comm_advance(comm);
    }
    /* Nobody is about to drive this operation: hand it to the thread. */
    if (!will_wait && comm->has_thread && comm->waiters == 0 && comm->npending > 0)
        hand_to_thread(comm);
    return XC_OK;
}

void xc__op_adopt_p2p(xc_comm_t *comm, xc__op_t *op)
{
    op->deadline_ns = 0; /* set when first looked at: xc__op_deadline */
    comm->npending++;
    op->wakes = wake_class(comm, op);
    comm->nwakes[op->wakes]++;
    xc__flight_issue(comm, op);
    op->next = comm->p2p_ops;
    op->prev = NULL;
    if (comm->p2p_ops) comm->p2p_ops->prev = op;
    comm->p2p_ops = op;
}

xc_result_t xc__op_submit(xc_comm_t *comm, xc__op_t *op, int will_wait)
{
    if (op->sched.nomem) {
        xc__op_discard(op);
        return xc__err(XC_ERR_NOMEM, "out of memory building a schedule");
    }
    xc__comm_lock(comm);
    xc_result_t rc = submit_locked(comm, op, will_wait);
    pthread_mutex_unlock(&comm->mu);
    return rc;
}

static void wait_locked(xc_comm_t *comm, xc_request_t *req, int handoff);
static int stale_frames(xc_comm_t *comm, uint64_t seq, const xc__desc_t *d);
static void op_record(xc_comm_t *comm, xc__op_t *op, xc_result_t rc);
static void count_done(xc_comm_t *comm, const xc__desc_t *d);

/* The result of an operation that ended without entering the queue
 * (run_direct, xc__op_express): what a queued one's request would say. */
xc_result_t xc__unqueued_result(const xc_comm_t *comm, xc_result_t st)
{
    if (st == XC_OK) return XC_OK;
    return xc__err(st, "%s", comm->errmsg[0] ? comm->errmsg : xc_strerror(st));
}

/* A blocking collective with an advance function (shared memory) on an
 * idle, healthy communicator: its first advance runs here, before it is
 * queued.  1: it completed -- no queue, no request, no count of pending
 * work; the operation started and ended in this call as it would have at
 * the head of the queue (*rc its result, an error if the advance found
 * one).  0: it must wait -- queue it as usual; the queued operation
 * resumes the advance's progress.  Small operations whose peers are
 * ahead -- a broadcast's reader, both sides of a loop of them -- end here
 * (docs/engine.md). */
static int run_direct(xc_comm_t *comm, xc__op_t *op, xc_result_t *rc)
{
    if (!op->advance || comm->npending || comm->trace_lane || xc__comm_status(comm) != XC_OK)
        return 0;
    op->seq = comm->next_seq++;
    xc__flight_issue(comm, op);
    op->issued = 1;
    int done = op->advance(comm, op);
    xc_result_t st = xc__comm_status(comm);
    if (st == XC_OK && done && stale_frames(comm, op->seq, &op->desc)) st = xc__comm_status(comm);
    if (st == XC_OK && !done) return 0;
    if (st == XC_OK) comm->done_seq = op->seq;
    op_record(comm, op, st);
    xc__sched_free(&op->sched);
    free(op->priv);
    *rc = xc__unqueued_result(comm, st);
    return 1;
}

int xc__op_express(xc_comm_t *comm, const xc__args_t *a, const xc__algo_t *algo, xc_result_t *rc)
{
    xc__desc_t d = {.coll = (uint8_t)a->coll, .dtype = (uint8_t)a->dtype, .op = (uint8_t)a->op,
                    .algo = (uint16_t)algo->id, .root = a->root, .count = a->count};
    /* The caller owns the bias: as if it held the lock (bias.h). */
    int biased = xc__bias_enter(comm);
    if (!biased) xc__comm_lock(comm);
    uint64_t seq = comm->next_seq;
    if (comm->npending || comm->trace_lane || xc__comm_status(comm) != XC_OK ||
        algo->express(comm, algo, a, &d, seq) != XC__EXPRESS_DONE) {
        if (biased) xc__bias_leave(comm);
        else pthread_mutex_unlock(&comm->mu);
        return 0;
    }
    comm->next_seq++;
    xc_result_t st = XC_OK;
    if (stale_frames(comm, seq, &d)) st = xc__comm_status(comm);
    xc__flight_express(comm, seq, &d, -1, -1, st);
    if (st == XC_OK) {
        comm->done_seq = seq;
        count_done(comm, &d);
        comm->stats.express_ops++;
    }
    if (biased) {
        xc__bias_leave(comm);
    } else {
        xc__bias_earn(comm);
        pthread_mutex_unlock(&comm->mu);
    }
    *rc = xc__unqueued_result(comm, st);
    return 1;
}

void xc__p2p_express_done(xc_comm_t *comm, const xc__desc_t *d, int peer, int tag,
                          xc_result_t rc)
{
    xc__flight_express(comm, 0, d, peer, tag, rc);
    if (rc != XC_OK) return;
    count_done(comm, d);
    comm->stats.express_p2p++;
}

xc_result_t xc__op_run(xc_comm_t *comm, xc__op_t *op)
{
    xc_request_t *req = op->req;
    if (op->sched.nomem) {
        xc__op_discard(op);
        return xc__err(XC_ERR_NOMEM, "out of memory building a schedule");
    }
    xc__comm_lock(comm);
    xc_result_t rc;
    if (run_direct(comm, op, &rc)) {
        pthread_mutex_unlock(&comm->mu);
        return rc;
    }
    rc = submit_locked(comm, op, 1);
    if (rc == XC_OK && !__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) wait_locked(comm, req, 1);
    pthread_mutex_unlock(&comm->mu);
    if (rc != XC_OK) return rc;
    return xc__request_wait_stack(req, NULL); /* done: collects the result */
}

/* Frames for collective `seq` still unconsumed after it completed mean the
 * ranks did not run the same operation. */
static int stale_frames(xc_comm_t *comm, uint64_t seq, const xc__desc_t *d)
{
    for (int p = 0; p < comm->size; p++) {
        xc__unexp_t *u = comm->pq[p].ucoll_head;
        if (u && u->hdr.seq <= seq) {
            char mine[200];
            xc__desc_str(d, seq, mine, sizeof mine);
            xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                            "rank %d sent more data for collective #%llu than this "
                            "rank's %s expects (ranks called different collectives)",
                            p, (unsigned long long)u->hdr.seq, mine);
            return 1;
        }
    }
    return 0;
}

/* The operation's span in the trace: "allreduce 4.0 MiB (allreduce.ring)". */
static void trace_op(const xc_comm_t *comm, const xc__op_t *op, xc_result_t rc)
{
    double b = (double)op->desc.count * (double)xc__dtype_size((xc_dtype_t)op->desc.dtype);
    const char *unit = "B";
    if (b >= 1024 * 1024) b /= 1024 * 1024, unit = "MiB";
    else if (b >= 1024) b /= 1024, unit = "KiB";
    const char *algo = xc_algo_name(op->desc.algo);
    char name[56];
    snprintf(name, sizeof name, "%s %.4g %s (%s)%s", xc_coll_name(op->desc.coll), b, unit,
             algo ? algo : "?", rc == XC_OK ? "" : " FAILED");
    xc__trace_comm_span(comm->trace_lane, op->t_issue, name);
}

/* What the end of an operation leaves behind, queued or run directly: its
 * trace span, its flight record, the statistics. */
static void count_done(xc_comm_t *comm, const xc__desc_t *d)
{
    comm->stats.ops[d->coll]++;
    if (d->algo < XC_STATS_MAX_ALGOS) comm->stats.algo_ops[d->algo]++;
}

static void op_record(xc_comm_t *comm, xc__op_t *op, xc_result_t rc)
{
    if (op->t_issue) trace_op(comm, op, rc);
    xc__flight_done(comm, op, rc);
    if (rc == XC_OK) count_done(comm, &op->desc);
}

void xc__op_complete(xc_comm_t *comm, xc__op_t *op, xc_result_t rc)
{
    if (op->is_p2p) {
        if (op->prev) op->prev->next = op->next;
        else comm->p2p_ops = op->next;
        if (op->next) op->next->prev = op->prev;
    } else {
        xc__op_t *prev = NULL, *o = comm->coll_head;
        while (o && o != op) prev = o, o = o->next;
        if (!o) return; /* not queued */
        if (prev) prev->next = op->next;
        else comm->coll_head = op->next;
        if (comm->coll_tail == op) comm->coll_tail = prev;
        if (rc == XC_OK) comm->done_seq = op->seq;
    }
    op_record(comm, op, rc);
    comm->npending--;
    comm->nwakes[op->wakes]--;
    if (comm->npending == 0) thread_disarm(comm);
    xc_request_t *req = op->req;
    req->rc = rc;
    if (rc != XC_OK) req->msg = strdup(comm->errmsg[0] ? comm->errmsg : xc_strerror(rc));
    xc__sched_free(&op->sched);
    free(op->priv);
    if (!op->on_stack) free(op);
    if (comm->waiters > (tls_waiting == comm ? 1 : 0)) xc__comm_kick(comm);
    if (req->on_stack) {
        /* The last touch: the blocking caller may return at once. */
        __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
        return;
    }
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
    request_release(req);
}

/* Does pending work need frames on the shared-memory channels?  (Shared-
 * memory collectives do not; their spin loop then skips the channels, which
 * are still drained on every poll so that a peer's send never stalls.) */
static int chans_needed(const xc_comm_t *comm)
{
    return comm->p2p_ops || comm->rndv_wait || comm->chan_backlog ||
           (comm->coll_head && !comm->coll_head->advance);
}

void xc__comm_advance(xc_comm_t *comm)
{
    xc__op_t *head;
    xc__shm_out_flush(comm);
    if (comm->chans && chans_needed(comm)) xc__chan_service(comm);
    while ((head = comm->coll_head) && xc__comm_status(comm) == XC_OK) {
        if (!(head->advance ? head->advance(comm, head) : xc__sched_advance(comm, head)))
            break;
        if (xc__comm_status(comm) != XC_OK) break;
        if (stale_frames(comm, head->seq, &head->desc)) break;
        xc__op_complete(comm, head, XC_OK);
    }
}

/* Queue an error frame to every open peer and push it out (bounded). */
static void tell_peers(xc_comm_t *comm, xc_result_t rc)
{
    size_t n = strlen(comm->errmsg);
    uint64_t deadline = xc__now_ns() + 1000000000ull; /* 1 s for all peers */
    for (int p = 0; p < comm->size; p++) {
        xc__conn_t *c = comm->conns[p];
        if (!c || c->state != XC__CONN_OPEN) continue;
        xc__tx_t *tx = calloc(1, sizeof *tx);
        char *buf = malloc(sizeof(int32_t) + n);
        if (!tx || !buf) {
            free(tx);
            free(buf);
            break;
        }
        int32_t code = rc;
        memcpy(buf, &code, sizeof code);
        memcpy(buf + sizeof code, comm->errmsg, n);
        tx->hdr.magic = XC__FRAME_MAGIC;
        tx->hdr.kind = XC__F_ERROR;
        tx->hdr.comm_tag = (uint32_t)comm->uid;
        tx->hdr.len = sizeof code + n;
        tx->buf = buf;
        tx->owned = buf;
        c->tp->post_send(comm, c, tx);
    }
    xc__conns_flush(comm, deadline);
}

/* Detach every send queue from operation memory: a frame already started
 * is finished from a private copy, frames not started are dropped. */
static void detach_sends(xc__conn_t **conns, int n)
{
    for (int p = 0; p < n; p++) {
        xc__conn_t *c = conns[p];
        if (!c) continue;
        xc__tx_t *keep_head = NULL, *keep_tail = NULL;
        for (xc__tx_t *tx = c->sq_head, *nx; tx; tx = nx) {
            nx = tx->next;
            tx->next = NULL;
            int keep = 0;
            if (!tx->op) {
                keep = 1; /* control frame */
            } else if (tx->off > 0) {
                /* Started: copy header and the rest of the payload. */
                xc__tx_t *cp = calloc(1, sizeof *cp);
                char *buf = tx->hdr.len ? malloc(tx->hdr.len) : NULL;
                if (cp && (buf || !tx->hdr.len)) {
                    *cp = *tx;
                    if (tx->hdr.len) xc__copy(buf, tx->buf, tx->hdr.len);
                    cp->buf = buf;
                    cp->owned = buf;
                    cp->op = NULL;
                    cp->next = NULL;
                    tx = cp;
                    keep = 1;
                } else {
                    free(cp);
                    free(buf);
                    /* Cannot finish the frame: end the stream, so that the
                     * peer, mid-frame, sees end-of-file now (it then reports
                     * this rank lost) rather than waiting for the rest. */
                    c->state = XC__CONN_CLOSED;
                    if (c->tp->kind == XC_TRANSPORT_TCP) {
                        if (c->nstreams <= 1) shutdown(c->fd, SHUT_RDWR);
                        for (int s = 0; c->nstreams > 1 && s < c->nstreams; s++)
                            shutdown(c->sfd[s], SHUT_RDWR);
                    }
                }
            }
            if (keep) {
                if (keep_tail) keep_tail->next = tx;
                else keep_head = tx;
                keep_tail = tx;
            }
        }
        c->sq_head = keep_head;
        c->sq_tail = keep_tail;
    }
}

void xc__comm_poison_now(xc_comm_t *comm, xc_result_t rc, int from_peer, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[XC__ERRMSG_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    xc__comm_lock(comm);
    xc__comm_poison(comm, rc, from_peer, "%s", msg);
    pthread_mutex_unlock(&comm->mu);
}

void xc__comm_poison(xc_comm_t *comm, xc_result_t rc, int from_peer, const char *fmt, ...)
{
    if (xc__comm_status(comm) != XC_OK || rc == XC_OK) return;
    va_list ap;
    va_start(ap, fmt);
    char msg[XC__ERRMSG_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(comm->errmsg, sizeof comm->errmsg, "%s", msg);
    __atomic_store_n(&comm->status, rc, __ATOMIC_RELEASE);
    comm->shm_begun.on = 0; /* its operation fails, resumed or not */
    XC_WARN("communicator poisoned (%s): %s", xc_err_name(rc), msg);
    xc__flight_dump(comm, msg); /* before the pending operations are failed */

    detach_sends(comm->conns, comm->size);
    if (comm->chans) detach_sends(comm->chans, comm->size);
    xc__match_clear(comm);
    while (comm->coll_head) xc__op_complete(comm, comm->coll_head, rc);
    while (comm->p2p_ops) xc__op_complete(comm, comm->p2p_ops, rc);
    if (from_peer != XC__POISON_QUIET) {
        /* Local peers spinning on shared memory see this at once. */
        if (comm->node_shm) xc__shm_poison(comm->node_shm, rc, msg);
        tell_peers(comm, rc);
    }
    xc__comm_kick(comm);
}

int xc__shm_adopt_poison(xc_comm_t *comm, xc__shm_t *s)
{
    int32_t p = s ? __atomic_load_n(&s->hdr->poison, __ATOMIC_ACQUIRE) : 0;
    if (!p) return 0;
    if (xc__comm_status(comm) == XC_OK)
        xc__comm_poison(comm, (xc_result_t)p, XC__POISON_RELAY, "rank %d reported: %s",
                        s->hdr->poison_rank,
                        s->hdr->poison_msg);
    return 1;
}

/* The peer is declared failed and the communicator poisoned.  `tell`: its
 * connection still works (the peer fell silent), so it is sent the error
 * frame like every other peer before the connection is closed -- a peer
 * that was alive after all (resumed, a healed partition) learns why. */
static void peer_lost(xc_comm_t *comm, int peer, const char *why, int tell)
{
    xc__conn_t *c = comm->conns[peer];
    int bye = c && c->state == XC__CONN_BYE;
    if (c && !tell) c->state = XC__CONN_CLOSED;
    xc__failed_set(comm, peer); /* for xc_comm_shrink */
    char during[220] = "while idle";
    if (comm->coll_head) {
        char d[200];
        xc__desc_str(&comm->coll_head->desc, comm->coll_head->seq, d, sizeof d);
        snprintf(during, sizeof during, "during %s", d);
    } else if (comm->p2p_ops) {
        snprintf(during, sizeof during, "during point-to-point traffic");
    }
    xc__comm_poison(comm, XC_ERR_PEER_LOST, 0, "rank %d (%s) %s %s%s", peer,
                    c ? c->addr : "?", why, during,
                    bye && !strstr(why, "destroyed") ? " (it had destroyed its communicator)" : "");
    if (c) c->state = XC__CONN_CLOSED;
}

void xc__comm_peer_lost(xc_comm_t *comm, int peer, const char *why)
{
    peer_lost(comm, peer, why, 0);
}

/* Which rank an unfinished operation waits for, for timeout messages. */
static void waiting_for(const xc__op_t *op, char *buf, size_t cap)
{
    if (op->is_p2p && op->peer == XC_ANY_SOURCE) {
        snprintf(buf, cap, "receiving from any rank (tag %d)", op->prx.tag);
        return;
    }
    if (op->is_p2p) {
        snprintf(buf, cap, "%s rank %d (tag %d)",
                 op->desc.coll == XC_COLL_SEND ? "sending to" : "receiving from",
                 op->peer, op->desc.coll == XC_COLL_SEND ? op->ptx.hdr.tag : op->prx.tag);
        return;
    }
    if (op->waiting) {
        op->waiting(op, buf, cap);
        return;
    }
    const xc__sched_t *s = &op->sched;
    if (s->cur < s->nrounds && s->posted) {
        int first = s->cur ? s->round_end[s->cur - 1] : 0;
        for (int i = first; i < s->round_end[s->cur]; i++) {
            const xc__step_t *st = &s->steps[i];
            if (st->type == XC__S_RECV && !st->u.rx.done) {
                snprintf(buf, cap, "waiting for data from rank %d", st->peer);
                return;
            }
            if (st->type == XC__S_SEND && !st->u.tx.done) {
                snprintf(buf, cap, "waiting to send to rank %d", st->peer);
                return;
            }
        }
    }
    snprintf(buf, cap, "not started");
}

static void op_timed_out(xc_comm_t *comm, xc__op_t *op)
{
    char d[200], w[80];
    xc__desc_str(&op->desc, op->seq, d, sizeof d);
    waiting_for(op, w, sizeof w);
    xc__comm_poison(comm, XC_ERR_TIMEOUT, 0,
                    "rank %d: %s did not complete within %d ms (%s)", comm->rank, d,
                    comm->cfg.timeout_ms, w);
}

uint64_t xc__op_deadline(const xc_comm_t *comm, xc__op_t *op)
{
    if (!op->deadline_ns) op->deadline_ns = xc__deadline_ns(comm->cfg.timeout_ms);
    return op->deadline_ns;
}

/* Peers are watched only when every rank beats from a progress thread
 * (without one a rank in a long compute phase would fall silent). */
int xc__liveness_on(const xc_comm_t *comm)
{
    return comm->cfg.liveness_ms > 0 && comm->cfg.heartbeat_ms > 0 && comm->cfg.progress_thread;
}

/* The progress thread's heartbeat: an empty frame to every open peer that
 * has been sent nothing for a heartbeat interval.  A peer with frames
 * queued gets no beat but a write of the queue: with no operation pending
 * nobody else writes it (an idle thread polls no socket), and a beat that
 * met a full socket buffer would sit there while the peer, reading again,
 * heard nothing and declared this live rank lost. */
static void heartbeat(xc_comm_t *comm, uint64_t now)
{
    uint64_t hb = (uint64_t)comm->cfg.heartbeat_ms * 1000000ull;
    comm->beat_ns = now;
    for (int p = 0; p < comm->size; p++) {
        xc__conn_t *c = comm->conns[p];
        if (!c || c->state != XC__CONN_OPEN) continue;
        if (c->sq_head) {
            c->tp->write(comm, c);
            continue;
        }
        if (now - c->last_tx_ns < hb) continue;
        /* A peer that has closed its end is not beaten: the write would
         * fail here, on the progress thread, and report a broken pipe in
         * place of the cause the peer left unread in the socket (its error
         * frame), which this rank reads when it next calls in. */
        struct pollfd h = {c->nstreams > 1 ? c->sfd[0] : c->fd, POLLRDHUP, 0};
        if (poll(&h, 1, 0) > 0 && (h.revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
        xc__send_control(comm, p, XC__F_BEAT, 0);
    }
}

/* A peer whose socket stayed silent -- no frame, no heartbeat -- for the
 * liveness timeout, counted only over time in which this rank was reading
 * its sockets (polled_ns), is lost: stopped (SIGSTOP), frozen, or cut off
 * by the network.  Checked at most every 20 ms.  1 if it poisoned. */
static int check_liveness(xc_comm_t *comm, uint64_t now)
{
    if (!xc__liveness_on(comm) || now - comm->live_ns < 20000000ull) return 0;
    comm->live_ns = now;
    uint64_t lim = (uint64_t)comm->cfg.liveness_ms * 1000000ull, seen = comm->polled_ns;
    for (int p = 0; p < comm->size; p++) {
        xc__conn_t *c = comm->conns[p];
        if (!c || c->state != XC__CONN_OPEN) continue;
        if (!c->last_rx_ns) c->last_rx_ns = now; /* first look: the clock starts */
        if (seen > c->last_rx_ns && seen - c->last_rx_ns > lim) {
            char why[160];
            snprintf(why, sizeof why,
                     "sent nothing, not even a heartbeat, for %.1f s (stopped, frozen or cut off "
                     "by the network; XCOLL_LIVENESS_MS=%d)",
                     (double)(seen - c->last_rx_ns) * 1e-9, comm->cfg.liveness_ms);
            peer_lost(comm, p, why, 1);
            return 1;
        }
    }
    return 0;
}

/* The progress thread's periodic turn: heartbeats when due.  It does not
 * read the sockets of an idle communicator: what peers sent waits in the
 * kernel (a beat a second is 48 bytes) until this rank calls in again, so
 * an idle rank learns of a failure when it next uses the communicator,
 * with its own operation in the flight recorder. */
static void progress_tick(xc_comm_t *comm)
{
    if (comm->cfg.heartbeat_ms <= 0) return;
    uint64_t now = xc__now_ns();
    if (now - comm->beat_ns < (uint64_t)comm->cfg.heartbeat_ms * 1000000ull) return;
    heartbeat(comm, now);
}

/* Fail the first operation past its deadline (or on a silent peer);
 * return the nearest deadline. */
static uint64_t check_deadlines_at(xc_comm_t *comm, uint64_t now)
{
    uint64_t nearest = UINT64_MAX;
    if ((comm->coll_head || comm->p2p_ops) && check_liveness(comm, now)) return UINT64_MAX;
    if (comm->coll_head) {
        if (now >= xc__op_deadline(comm, comm->coll_head)) {
            op_timed_out(comm, comm->coll_head);
            return UINT64_MAX;
        }
        nearest = comm->coll_head->deadline_ns;
    }
    for (xc__op_t *op = comm->p2p_ops; op; op = op->next) {
        if (now >= xc__op_deadline(comm, op)) {
            op_timed_out(comm, op);
            return UINT64_MAX;
        }
        if (op->deadline_ns < nearest) nearest = op->deadline_ns;
    }
    return nearest;
}

static uint64_t check_deadlines(xc_comm_t *comm) { return check_deadlines_at(comm, xc__now_ns()); }

void xc__comm_poll(xc_comm_t *comm, int timeout_ms)
{
    enum { STACK_FDS = 65 };
    struct pollfd stack_pfd[STACK_FDS];
    int stack_peer[STACK_FDS];
    struct pollfd *pfd = stack_pfd;
    int *peer = stack_peer;
    int cap = comm->size + 1;
    if (cap > STACK_FDS) {
        pfd = malloc((size_t)cap * sizeof *pfd);
        peer = malloc((size_t)cap * sizeof *peer);
        if (!pfd || !peer) {
            free(pfd == stack_pfd ? NULL : pfd);
            free(peer == stack_peer ? NULL : peer);
            pfd = stack_pfd, peer = stack_peer, cap = STACK_FDS;
        }
    }
    int n = 0;
    pfd[n].fd = comm->efd, pfd[n].events = POLLIN, pfd[n].revents = 0, peer[n++] = -1;
    for (int p = 0; p < comm->size && n < cap; p++) {
        xc__conn_t *c = comm->conns[p];
        if (!c) continue;
        short ev = c->tp->poll_events(c);
        if (!ev) continue;
        pfd[n].fd = c->fd, pfd[n].events = ev, pfd[n].revents = 0, peer[n++] = p;
    }
    uint64_t t0 = xc__now_ns();
    pthread_mutex_unlock(&comm->mu);
    int r = poll(pfd, (nfds_t)n, timeout_ms);
    xc__comm_lock(comm);
    if (comm->chans) xc__chan_service(comm);
    if (r > 0) {
        if (pfd[0].revents) drain_efd(comm);
        for (int i = 1; i < n; i++) {
            if (!pfd[i].revents) continue;
            xc__conn_t *c = comm->conns[peer[i]];
            if (c && c->state != XC__CONN_CLOSED) c->tp->on_ready(comm, c, pfd[i].revents);
        }
    }
    /* Every socket was in the set: what arrived before t0 has been read. */
    if (cap >= comm->size + 1 && t0 > comm->polled_ns) comm->polled_ns = t0;
    xc__comm_advance(comm);
    if (pfd != stack_pfd) free(pfd);
    if (peer != stack_peer) free(peer);
}

/* Is work queued that makes progress without any descriptor becoming
 * ready (a shared-memory collective, or frames on the channels of a
 * communicator spanning several nodes)? */
static int shm_pending(const xc_comm_t *comm)
{
    return (comm->shm && comm->coll_head && comm->coll_head->advance) ||
           (comm->chans && chans_needed(comm));
}

/* Is all pending work moved through shared memory (so that the engine
 * spins on memory, not on sockets)?  With channels every frame is. */
static int shm_only(const xc_comm_t *comm)
{
    if (!comm->shm || comm->npending == 0) return 0;
    if (comm->chans) return 1;
    return comm->coll_head && comm->coll_head->advance && !comm->p2p_ops;
}

/* Give the core away once, without the communicator's lock (called and
 * returning with it held): a peer waiting for this core gets it, and
 * another thread of this process may progress the communicator. */
static void yield_unlocked(xc_comm_t *comm)
{
    pthread_mutex_unlock(&comm->mu);
    sched_yield();
    xc__comm_lock(comm);
}

/* Before sleeping on what peers must do: wake the progress thread of
 * every peer this rank waits for on a channel (its frames queued behind a
 * full ring, or a rendezvous send awaiting its ACK).  Their small
 * operations do not wake their threads (XC__WAKE_NONE), so a peer that
 * has posted receives and computes, or waits on another communicator,
 * would otherwise drain the ring only at its next call here. */
static void nudge_peers(xc_comm_t *comm)
{
    if (!comm->chans) return;
    xc__shm_t *s = comm->node_shm;
    if (comm->chan_backlog)
        for (int p = 0; p < comm->size; p++)
            if (comm->chans[p] && comm->chans[p]->sq_head) xc__shm_bump(s, comm->local_of[p]);
    for (xc__tx_t *tx = comm->rndv_wait; tx; tx = tx->next)
        if (comm->chans[tx->peer]) xc__shm_bump(s, comm->local_of[tx->peer]);
}

/*
 * Wait for shared-memory progress past the spin phase: yield until
 * `yield_until` (oversubscribed ranks need the core), then sleep on the
 * rank's bell (a futex word in its control block), bounded so sockets
 * (peer death, error frames) are still looked at.  Returns when the
 * engine may have work to do.
 */
static void shm_wait_step(xc_comm_t *comm, uint64_t now, uint64_t yield_until,
                          uint64_t nearest, int caller)
{
    xc__shm_t *s = comm->shm;
    if (now < yield_until) {
        yield_unlocked(comm);
        return; /* the caller polls the sockets every few turns */
    }
    if (caller) nudge_peers(comm); /* the thread's sleeps would ping-pong */
    pthread_mutex_unlock(&comm->mu);
    /* Dekker with the publishers: announce, then re-check, then sleep. */
    uint32_t seen = xc__shm_sleep_begin(s);
    xc__comm_lock(comm);
    xc__comm_advance(comm);
    int again = !shm_only(comm);
    pthread_mutex_unlock(&comm->mu);
    if (!again) {
        int ms = xc__poll_ms_left(nearest);
        xc__shm_sleep(s, seen, ms < 0 || ms > 20 ? 20 : ms);
    }
    xc__shm_sleep_end(s);
    xc__comm_lock(comm);
    xc__comm_poll(comm, 0); /* sockets: peer death, error frames */
}

/* This process's publications on the communicator's segments: changes
 * when a wait made progress. */
static uint64_t shm_moves(const xc_comm_t *comm)
{
    return xc__shm_pubs(comm->shm) + xc__shm_pubs(comm->node_shm);
}

/* Block until `req` completes (called with the lock held).  `handoff`:
 * afterwards, wake the progress thread for what is still pending (0: the
 * caller waits on this communicator again at once). */
static void wait_locked(xc_comm_t *comm, xc_request_t *req, int handoff)
{
    __atomic_add_fetch(&comm->waiters, 1, __ATOMIC_RELAXED); /* read unlocked: progress_idle */
    thread_disarm(comm); /* this caller drives the engine now */
    xc__shm_out_flush(comm); /* a peer ahead may wait for it (docs/shm.md) */
    xc_comm_t *saved = tls_waiting;
    tls_waiting = comm;
    /* The clock is first read after 64 turns: a wait that ends sooner (the
     * common case on shared memory) never reads it.  The spin and yield
     * budgets are the time without progress: a wait in which this rank
     * published (a chunk staged, reduced or copied out) starts them over,
     * so that a long operation moving chunk by chunk never sleeps between
     * its chunks (an 8-rank 16 MiB broadcast on 2 cores slept after 2 ms
     * and took 12-14 ms instead of 4.6); beside socket traffic too, where
     * a shared-memory stage would otherwise sleep in 1 ms polls.  Socket
     * frames do not count: poll() wakes on them. */
    uint64_t spin_until = 0, yield_until = 0, moves = shm_moves(comm);
    unsigned polls = 0;
    int spinning = comm->spin_ns > 0;
#define XC__WAIT_CLOCK(now)                                                    \
    do {                                                                       \
        uint64_t m_ = shm_moves(comm);                                         \
        if (m_ != moves) moves = m_, spin_until = 0;                           \
        if (!spin_until) {                                                     \
            spin_until = (now) + comm->spin_ns;                                \
            yield_until = spin_until + comm->yield_ns;                         \
        }                                                                      \
    } while (0)
    while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
        if (shm_only(comm)) {
            /* Spin on the engine alone (a peer's cache line arrives in
             * ~0.15 us); the clock, the deadline and the sockets only every
             * 64 / 1024 turns. */
            xc__comm_advance(comm);
            if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) break;
            if ((++polls & 63) != 0 && spinning) {
                __builtin_ia32_pause();
                continue;
            }
            /* One clock read a turn (a yielding rank's turns are many). */
            uint64_t now = xc__now_ns();
            XC__WAIT_CLOCK(now);
            uint64_t nearest = check_deadlines_at(comm, now);
            if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) break;
            /* Sockets (peer death, error frames): every 1024 turns of
             * spinning, every 16 of yielding. */
            if ((polls & (spinning ? 1023 : 15)) == 0) xc__comm_poll(comm, 0);
            spinning = now < spin_until;
            if (!spinning) shm_wait_step(comm, now, yield_until, nearest, 1);
            continue;
        }
        uint64_t now = xc__now_ns();
        XC__WAIT_CLOCK(now);
        uint64_t nearest = check_deadlines_at(comm, now);
        if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) break;
        int ms = 0;
        if (now >= spin_until && now < yield_until) {
            /* Past the spin, yield before sleeping, as on shared memory: a
             * sleep costs a wake-up (~30-80 us here) once the peer answers,
             * and the peer is often just as near as before.  Sleeping at
             * once trapped jobs whose spin budget had shrunk below the
             * round trip: every wait slept, outlasted the budget and shrank
             * it further (8-byte TCP exchanges at 35-90 us instead of 6). */
            yield_unlocked(comm);
            if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) break;
        } else if (now >= spin_until) {
            ms = xc__poll_ms_left(nearest);
            /* Bounded sleeps: another thread's completion or an abort may
             * not reach this poll (see docs/engine.md); a shared-memory
             * collective queued beside socket traffic moves without any
             * descriptor becoming ready, so look at it every millisecond. */
            int cap = shm_pending(comm) ? 1 : 100;
            if (ms < 0 || ms > cap) ms = cap;
        }
        xc__comm_poll(comm, ms);
    }
    tls_waiting = saved;
    __atomic_sub_fetch(&comm->waiters, 1, __ATOMIC_RELAXED);
    if (handoff && comm->waiters == 0 && comm->npending > 0 && comm->has_thread)
        hand_to_thread(comm);
    /* Adapt the spin budget: spinning pays when peers run on other cores
     * and arrive within it; when they do not (oversubscribed cores, ranks
     * far apart), every microsecond spun is taken from a rank that needs
     * the core, so fall back to yielding sooner. */
#undef XC__WAIT_CLOCK
    uint64_t max = comm->spin_max_ns;
    if (!spin_until || xc__now_ns() < spin_until)
        comm->spin_ns = XC__MIN(max, comm->spin_ns * 2 + 500);
    else comm->spin_ns = comm->spin_ns / 2 > 500 ? comm->spin_ns / 2 : XC__MIN(500, max);
}

/* xc_request_wait, then the caller waits for `next` (NULL: nothing).  On
 * the same communicator, what is still pending is not handed to the
 * progress thread in between (wait_locked's `handoff`): woken there, the
 * thread slept on the node's bell beside the next waiter, and every peer
 * publication cost a futex wake (32-64 KiB group send/recv 17-40 us
 * against 6-12). */
static xc_result_t request_wait(xc_request_t *req, const xc_request_t *next)
{
    if (!req) return xc__err(XC_ERR_INVALID, "xc_request_wait: req is NULL");
    if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
        xc_comm_t *comm = req->comm;
        if (xc__comm_forked(comm))
            return xc__comm_forked_err("xc_request_wait");
        xc__comm_lock(comm);
        wait_locked(comm, req, !next || next->comm != comm);
        pthread_mutex_unlock(&comm->mu);
    }
    if (req->rc != XC_OK)
        return xc__err(req->rc, "%s", req->msg ? req->msg : xc_strerror(req->rc));
    return XC_OK;
}

xc_result_t xc_request_wait(xc_request_t *req) { return request_wait(req, NULL); }

xc_result_t xc_request_test(xc_request_t *req, int *done)
{
    if (!req || !done)
        return xc__err(XC_ERR_INVALID, "xc_request_test: %s is NULL", req ? "done" : "req");
    if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
        xc_comm_t *comm = req->comm;
        if (xc__comm_forked(comm))
            return xc__comm_forked_err("xc_request_test");
        xc__comm_lock(comm);
        check_deadlines(comm);
        xc__comm_poll(comm, 0);
        pthread_mutex_unlock(&comm->mu);
    }
    *done = __atomic_load_n(&req->done, __ATOMIC_ACQUIRE);
    if (*done && req->rc != XC_OK)
        return xc__err(req->rc, "%s", req->msg ? req->msg : xc_strerror(req->rc));
    return XC_OK;
}

int xc_request_source(const xc_request_t *req)
{
    if (!req || !__atomic_load_n(&req->done, __ATOMIC_ACQUIRE) || req->rc != XC_OK) return -1;
    return req->source;
}

void xc_request_free(xc_request_t *req)
{
    if (req) request_release(req);
}

xc_result_t xc_request_waitall(xc_request_t **reqs, size_t n)
{
    if (!reqs && n) return xc__err(XC_ERR_INVALID, "xc_request_waitall: reqs is NULL");
    xc_result_t first = XC_OK;
    for (size_t i = 0; i < n; i++) {
        if (!reqs[i]) continue;
        size_t j = i + 1;
        while (j < n && !reqs[j]) j++;
        xc_result_t rc = request_wait(reqs[i], j < n ? reqs[j] : NULL);
        if (rc != XC_OK && first == XC_OK) first = rc;
    }
    return first;
}

xc_result_t xc__request_wait_stack(xc_request_t *req, const xc_request_t *next)
{
    xc_result_t rc = request_wait(req, next);
    free(req->msg);
    return rc;
}

xc_result_t xc__request_wait_free(xc_request_t *req)
{
    xc_result_t rc = xc_request_wait(req);
    xc_request_free(req);
    return rc;
}

/* The progress thread's sleep with nothing to do (called and returning
 * with the lock held): on the bell of a shared-memory communicator, where
 * an armed thread hears its peers, else on the eventfd. */
static void progress_idle(xc_comm_t *comm, uint32_t seen, int tick_ms)
{
    if (comm->node_shm) {
        __atomic_store_n(&comm->thread_idle, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&comm->mu);
        uint64_t due = tick_ms < 0 ? 0 : xc__now_ns() + (uint64_t)tick_ms * 1000000u;
        for (int ms = tick_ms;;) {
            xc__shm_sleep(comm->node_shm, seen, ms);
            uint32_t bell = xc__shm_bell(comm->node_shm);
            /* Rung (the bell moved) while a caller drives the engine: not
             * for this thread -- a ring that arrived as the caller took
             * over, or a wake-up for the caller's fellow waiters -- and the
             * lock is the caller's.  The caller's hand-off, which moves the
             * bell after it leaves, ends this sleep; the heartbeat's tick
             * stays due when it was. */
            if (bell == seen || __atomic_load_n(&comm->stop, __ATOMIC_RELAXED) ||
                __atomic_load_n(&comm->waiters, __ATOMIC_RELAXED) == 0)
                break;
            if (due) {
                uint64_t now = xc__now_ns();
                if (now >= due) break;
                ms = (int)((due - now + 999999) / 1000000);
            }
            seen = bell;
        }
        xc__comm_lock(comm);
        __atomic_store_n(&comm->thread_idle, 0, __ATOMIC_RELAXED);
        return;
    }
    struct pollfd p = {comm->efd, POLLIN, 0};
    pthread_mutex_unlock(&comm->mu);
    poll(&p, 1, tick_ms);
    xc__comm_lock(comm);
    if (p.revents) drain_efd(comm);
}

void *xc__progress_main(void *arg)
{
    xc_comm_t *comm = arg;
    xc__comm_lock(comm);
    int tick_ms = comm->cfg.heartbeat_ms > 0 ? comm->cfg.heartbeat_ms : -1;
    while (!comm->stop) {
        /* Read before anything is looked at: a kick after this wakes the
         * sleep below (see xc__comm_kick). */
        uint32_t seen = comm->node_shm ? xc__shm_bell(comm->node_shm) : 0;
        thread_disarm(comm); /* awake: it looks for itself (and announces
                              * itself when it sleeps with work pending) */
        progress_tick(comm);
        /* Woken with nothing pending (a peer stuck on a full ring nudged
         * it, see nudge_peers): take what the channels hold. */
        if (comm->chans && comm->npending == 0 && comm->waiters == 0) xc__chan_service(comm);
        if ((comm->npending == 0 && !comm->chan_backlog) || comm->waiters > 0 ||
            xc__comm_status(comm) != XC_OK) {
            /* Idle, or a waiter drives progress: sleep until kicked (or,
             * armed, rung by a peer) or until the next heartbeat is due. */
            progress_idle(comm, seen, tick_ms);
            continue;
        }
        uint64_t nearest = check_deadlines(comm);
        if (shm_only(comm)) {
            xc__comm_advance(comm);
            if (!shm_only(comm) || comm->waiters > 0) continue;
            if (comm->chans && comm->nwakes[XC__WAKE_KICK] == 0) {
                /* Only channel traffic pending: sleep armed (a caller who
                 * comes disarms it, so the peers' frames stop ringing),
                 * or unannounced when none of it needs this rank.  Asleep
                 * announced instead, the thread was rung by every frame
                 * while the caller waited, woke between the caller's
                 * calls, took the lock and slept announced again: a
                 * regime of 10-30 us per 32 KiB exchange against 3. */
                if (comm->nwakes[XC__WAKE_ARM] > 0 || comm->chan_backlog) thread_arm(comm);
                if (comm->npending == 0 || comm->waiters > 0) continue;
                int ms = xc__poll_ms_left(nearest);
                if (ms < 0 || (tick_ms >= 0 && ms > tick_ms)) ms = tick_ms;
                progress_idle(comm, seen, ms);
                continue;
            }
            /* Nothing to spin for here: sleep on the bell at once. */
            shm_wait_step(comm, xc__now_ns(), 0, nearest, 0);
            continue;
        }
        int ms = xc__poll_ms_left(nearest);
        int cap = shm_pending(comm) ? 1 : 1000; /* see wait_locked */
        if (ms < 0 || ms > cap) ms = cap;
        xc__comm_poll(comm, ms);
    }
    thread_disarm(comm);
    pthread_mutex_unlock(&comm->mu);
    return NULL;
}
