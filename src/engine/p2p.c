/*
 * p2p.c -- tagged point-to-point operations and groups.
 *
 * A send or receive is an operation of its own, independent of the
 * collective queue, completed as soon as its frame is written or received.
 * Inside xc_group_start/xc_group_end the blocking forms only post their
 * operation; xc_group_end waits for all of them, so two ranks may send to
 * each other before receiving.  Outside a group that works only while the
 * messages are small enough to wait in the channel or socket: a
 * single-copy send completes when its receiver has read it, so two large
 * blocking sends towards each other wait for each other (xcoll.h promises
 * no deadlock inside a group only).
 *
 * Small ones between ranks that share memory take the express path
 * (p2p_express.c): a send writes its frame at the call (a nonblocking one
 * too: its request is then complete when returned); a receive on a
 * communicator with channels is recorded, with every receive after it in
 * the group, and run at xc_group_end (at once outside a group; a
 * nonblocking receive inside the group first posts those recorded before
 * it, so that matching keeps the calls' order); a nonblocking receive
 * looks once for its frame at the call.
 */
#include "../algo/algos.h"
#include "../reduce/reduce.h"
#include "p2p_express.h"

#include <pthread.h>
#include <stdlib.h>

/* A thread's group: the blocking sends and receives posted since
 * xc_group_start live in its slab -- chunks of operations with their
 * requests, kept between groups, so a group allocates nothing once warm.
 * They are "on the stack" for the engine (it frees neither); xc_group_end
 * waits for every one, then the slots are reused.  Chunks never move: the
 * engine links the operations into its lists.  One thread-local object,
 * so a call finds it in one look-up. */
#define GROUP_CHUNK 16
typedef struct group_chunk {
    struct group_chunk *next;
    struct {
        xc__op_t op;     /* op.req NULL: a receive recorded, not posted */
        xc_request_t req;
        xc_comm_t *comm; /* NULL: settled (a receive whose posting failed) */
    } slot[GROUP_CHUNK];
} group_chunk_t;

/* Recorded receives the express path takes in one go at xc_group_end. */
#define GROUP_EXPRESS_MAX 64

typedef struct {
    int depth;
    xc_result_t rc;     /* first failure of a call inside the group */
    size_t n;           /* slots in use */
    group_chunk_t *head, *cur; /* cur holds slot n (NULL: none yet) */
    size_t nrec;        /* receives recorded */
    xc_comm_t *rcomm;   /* their communicator (the first one's) */
    int mixed;          /* recorded on more than one communicator */
    xc_comm_t *handoff; /* a nonblocking call's communicator, handed to its
                         * progress thread at xc_group_end */
} group_t;

static _Thread_local group_t tls_group;
static pthread_key_t group_key;
static pthread_once_t group_once = PTHREAD_ONCE_INIT;

static void group_free(void *arg)
{
    group_t *g = arg;
    if (g->n) return; /* a group left open: its operations may still be queued */
    while (g->head) {
        group_chunk_t *c = g->head;
        g->head = c->next;
        free(c);
    }
    g->cur = NULL;
}

static void group_key_make(void) { (void)pthread_key_create(&group_key, group_free); }

/* The next free slot of `g`, or NULL (out of memory). */
static group_chunk_t *group_slot(group_t *g, size_t *i)
{
    *i = g->n % GROUP_CHUNK;
    if (*i == 0) {
        group_chunk_t *c = g->n == 0 ? g->head : g->cur->next;
        if (!c) {
            c = malloc(sizeof *c);
            if (!c) return NULL;
            c->next = NULL;
            if (g->n == 0) {
                /* The thread's first chunk: freed when the thread exits. */
                (void)pthread_once(&group_once, group_key_make);
                (void)pthread_setspecific(group_key, g);
                g->head = c;
            } else {
                g->cur->next = c;
            }
        }
        g->cur = c;
    }
    return g->cur;
}

static xc_result_t p2p_check(int is_send, const void *buf, size_t count, xc_dtype_t dtype,
                             int peer, int tag, const xc_comm_t *comm, const char *fn)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "%s: comm is NULL", fn);
    if (xc__comm_forked(comm))
        return xc__comm_forked_err(fn);
    if (xc__dtype_size(dtype) == 0) return xc__err(XC_ERR_INVALID, "%s: invalid dtype %d", fn, (int)dtype);
    if (!buf && count) return xc__err(XC_ERR_INVALID, "%s: buf is NULL with count %zu", fn, count);
    if ((peer < 0 || peer >= comm->size) && (is_send || peer != XC_ANY_SOURCE))
        return xc__err(XC_ERR_INVALID, "%s: peer %d out of range [0, %d)%s", fn, peer,
                       comm->size, is_send ? "" : " and not XC_ANY_SOURCE");
    if (tag < 0) return xc__err(XC_ERR_INVALID, "%s: tag must be >= 0 (got %d)", fn, tag);
    if (count > SIZE_MAX / 16) return xc__err(XC_ERR_INVALID, "%s: count %zu too large", fn, count);
    return XC_OK;
}

/* Describe set-up operation `op` as a send or receive. */
static void p2p_fill(xc__op_t *op, int is_send, void *buf, size_t count, xc_dtype_t dtype,
                     int peer, int tag)
{
    op->desc.dtype = (uint8_t)dtype;
    op->desc.count = count;
    op->desc.algo = XC__ALGO_P2P;
    op->desc.root = -1;
    op->peer = peer;
    size_t len = count * xc__dtype_size(dtype);
    if (is_send) {
        op->ptx.buf = buf;
        op->ptx.hdr.len = len;
        op->ptx.hdr.tag = tag;
    } else {
        op->prx.buf = buf;
        op->prx.len = len;
        op->prx.tag = tag;
    }
}

/* Submit allocated operation `op` with its request `r`, returned in *req
 * (NULL on failure: both are discarded then). */
static xc_result_t p2p_submit_new(xc_comm_t *comm, xc__op_t *op, xc_request_t *r,
                                  xc_request_t **req)
{
    /* Nobody waits for it, xc_group_end neither: the progress thread must
     * get it -- once for the group, at its end (a call on a second
     * communicator in the group hands off at once). */
    group_t *g = &tls_group;
    int later = g->depth > 0 && (!g->handoff || g->handoff == comm);
    if (later) g->handoff = comm;
    xc_result_t rc = xc__op_submit(comm, op, later);
    *req = rc == XC_OK ? r : NULL;
    return rc;
}

/* Issue a send or receive (arguments checked): in `sop`/`sreq` if given
 * (a blocking caller's frame, then `wait` for it too; or a group's slot),
 * else allocated, the request returned in *req. */
static xc_result_t p2p_issue(int is_send, void *buf, size_t count, xc_dtype_t dtype, int peer,
                             int tag, xc_comm_t *comm, xc_request_t **req, xc__op_t *sop,
                             xc_request_t *sreq, int wait)
{
    xc_coll_t coll = is_send ? XC_COLL_SEND : XC_COLL_RECV;
    if (!sop) {
        xc__op_t *op;
        xc_request_t *r;
        XC_CHECK(xc__op_new(comm, coll, &op, &r));
        p2p_fill(op, is_send, buf, count, dtype, peer, tag);
        return p2p_submit_new(comm, op, r, req);
    }
    xc__op_init_stack(comm, coll, sop, sreq);
    p2p_fill(sop, is_send, buf, count, dtype, peer, tag);
    /* In a blocking caller's frame: submit and wait under one lock.  In a
     * group, xc_group_end is about to wait: no hand-off to the thread. */
    if (wait) return xc__op_run(comm, sop);
    return xc__op_submit(comm, sop, 1);
}

/* Post a receive recorded in `op` the ordinary way (in its group's slot,
 * to be waited for). */
static xc_result_t post_recorded(xc_comm_t *comm, xc__op_t *op, xc_request_t *req)
{
    const xc__rx_t *rx = &op->prx;
    return p2p_issue(0, rx->buf, rx->desc.count, (xc_dtype_t)rx->desc.dtype, rx->peer, rx->tag,
                     comm, NULL, op, req, 0);
}

/* Post the receives recorded and not yet posted the ordinary way, in
 * order; none is left recorded.  Returns the first failure. */
static xc_result_t group_post_recorded(group_t *g)
{
    xc_result_t rc = XC_OK;
    group_chunk_t *c = g->head;
    for (size_t i = 0; i < g->n; i++) {
        if (i && i % GROUP_CHUNK == 0) c = c->next;
        if (c->slot[i % GROUP_CHUNK].op.req || !c->slot[i % GROUP_CHUNK].comm) continue;
        xc_comm_t *comm = c->slot[i % GROUP_CHUNK].comm;
        xc_result_t r = post_recorded(comm, &c->slot[i % GROUP_CHUNK].op,
                                      &c->slot[i % GROUP_CHUNK].req);
        if (r != XC_OK) {
            /* Not posted: nothing to wait for in this slot. */
            c->slot[i % GROUP_CHUNK].op.req = NULL;
            c->slot[i % GROUP_CHUNK].comm = NULL;
            if (rc == XC_OK) rc = xc__comm_fail(comm, r);
        }
    }
    g->nrec = 0;
    g->mixed = 0;
    return rc;
}

/* Blocking form: inside a group, post into the group's slab (or write a
 * small send's frame, or record a receive); else issue and wait. */
static xc_result_t p2p_blocking(int is_send, void *buf, size_t count, xc_dtype_t dtype, int peer,
                                int tag, xc_comm_t *comm)
{
    group_t *g = &tls_group;
    xc_result_t rc = p2p_check(is_send, buf, count, dtype, peer, tag, comm,
                               is_send ? "xc_send" : "xc_recv");
    if (rc == XC_OK && is_send && xc__p2p_express_send(comm, buf, count, dtype, peer, tag))
        return XC_OK;
    if (g->depth > 0) {
        size_t i;
        group_chunk_t *c = rc == XC_OK ? group_slot(g, &i) : NULL;
        if (rc == XC_OK && !c) rc = xc__err(XC_ERR_NOMEM, "out of memory in a group");
        if (rc == XC_OK) {
            c->slot[i].comm = comm;
            if (!is_send && comm->chans) {
                xc__p2p_express_note(&c->slot[i].op, buf, count, dtype, peer, tag);
                g->mixed |= g->nrec && g->rcomm != comm;
                if (!g->nrec++) g->rcomm = comm;
            } else {
                rc = p2p_issue(is_send, buf, count, dtype, peer, tag, comm, NULL,
                               &c->slot[i].op, &c->slot[i].req, 0);
            }
        }
        if (rc != XC_OK) {
            if (g->rc == XC_OK) g->rc = rc;
            return xc__comm_fail(comm, rc);
        }
        g->n++;
        return XC_OK;
    }
    if (rc != XC_OK) return xc__comm_fail(comm, rc);
    xc__op_t op;
    xc_request_t sreq;
    if (!is_send && comm->chans) {
        xc__op_t *ops[1] = {&op};
        xc_request_t *reqs[1] = {&sreq};
        xc__p2p_express_note(&op, buf, count, dtype, peer, tag);
        if (xc__p2p_express_recvs(comm, ops, reqs, 1, &rc)) {
            if (op.req) rc = xc__request_wait_stack(&sreq, NULL);
            return xc__comm_fail(comm, rc);
        }
    }
    return xc__comm_fail(comm, p2p_issue(is_send, buf, count, dtype, peer, tag, comm, NULL, &op,
                                         &sreq, 1));
}

xc_result_t xc_send(const void *buf, size_t count, xc_dtype_t dtype, int peer, int tag,
                    xc_comm_t *comm)
{
    return p2p_blocking(1, (void *)buf, count, dtype, peer, tag, comm);
}

xc_result_t xc_recv(void *buf, size_t count, xc_dtype_t dtype, int peer, int tag,
                    xc_comm_t *comm)
{
    return p2p_blocking(0, buf, count, dtype, peer, tag, comm);
}

xc_result_t xc_isend(const void *buf, size_t count, xc_dtype_t dtype, int peer, int tag,
                     xc_comm_t *comm, xc_request_t **req)
{
    if (!req) return xc__comm_fail(comm, xc__err(XC_ERR_INVALID, "xc_isend: req is NULL"));
    *req = NULL;
    xc_result_t rc = p2p_check(1, buf, count, dtype, peer, tag, comm, "xc_isend");
    if (rc != XC_OK) return xc__comm_fail(comm, rc);
    /* A small one written whole into the peer's channel is complete at the
     * call, as the blocking form: its request is born done (no operation,
     * nothing for the engine to track). */
    xc_request_t *done = comm->chans ? xc__request_new_done(comm, XC_COLL_SEND) : NULL;
    if (done && xc__p2p_express_send(comm, buf, count, dtype, peer, tag)) {
        *req = done;
        return XC_OK;
    }
    free(done);
    return xc__comm_fail(comm, p2p_issue(1, (void *)buf, count, dtype, peer, tag, comm, req,
                                         NULL, NULL, 0));
}

xc_result_t xc_irecv(void *buf, size_t count, xc_dtype_t dtype, int peer, int tag,
                     xc_comm_t *comm, xc_request_t **req)
{
    if (!req) return xc__comm_fail(comm, xc__err(XC_ERR_INVALID, "xc_irecv: req is NULL"));
    *req = NULL;
    xc_result_t rc = p2p_check(0, buf, count, dtype, peer, tag, comm, "xc_irecv");
    if (rc != XC_OK) return xc__comm_fail(comm, rc);
    /* Inside a group, blocking receives called before it are only recorded
     * so far: post them first, so that matching follows the calls' order. */
    group_t *g = &tls_group;
    if (g->depth > 0 && g->nrec) {
        rc = group_post_recorded(g);
        if (rc != XC_OK && g->rc == XC_OK) g->rc = rc;
    }
    /* A small one whose frame is already here is complete at the call (a
     * request born done); else it is the operation the ordinary path posts,
     * from the same allocation.  (The eager limit is set before the
     * communicator is returned: read without the lock.) */
    xc__op_t *op;
    xc_request_t *r;
    XC_CHECK(xc__comm_fail(comm, xc__op_new(comm, XC_COLL_RECV, &op, &r)));
    if (comm->chans && peer != comm->rank && peer != XC_ANY_SOURCE &&
        count * xc__dtype_size(dtype) < xc__p2p_eager(comm)) {
        xc__p2p_express_note(op, buf, count, dtype, peer, tag);
        int x = xc__p2p_express_irecv(comm, op, r, &rc);
        if (x == XC__P2P_ADOPTED) { /* the engine's now: `op` is not touched again */
            *req = r;
            return XC_OK;
        }
        if (x == XC__P2P_FINISHED) {
            free(op);
            if (rc != XC_OK) {
                free(r);
                return xc__comm_fail(comm, rc);
            }
            xc__request_init_done(r, comm, XC_COLL_RECV, peer);
            *req = r;
            return XC_OK;
        }
        xc__op_init(comm, XC_COLL_RECV, op, r, 0); /* declined: undo the note */
    }
    p2p_fill(op, 0, buf, count, dtype, peer, tag);
    return xc__comm_fail(comm, p2p_submit_new(comm, op, r, req));
}

xc_result_t xc_group_start(void)
{
    group_t *g = &tls_group;
    if (g->depth++ == 0) {
        g->rc = XC_OK;
        g->nrec = 0;
        g->mixed = 0;
        g->handoff = NULL;
    }
    return XC_OK;
}

/* The recorded receives: on the express path if they qualify, else
 * posted the ordinary way, in order.  Returns the first failure. */
static xc_result_t group_receives(group_t *g)
{
    xc__op_t *ops[GROUP_EXPRESS_MAX];
    xc_request_t *reqs[GROUP_EXPRESS_MAX];
    size_t k = 0;
    xc_result_t rc = XC_OK;
    if (!g->mixed && g->nrec <= GROUP_EXPRESS_MAX) {
        group_chunk_t *c = g->head;
        for (size_t i = 0; i < g->n; i++) {
            if (i && i % GROUP_CHUNK == 0) c = c->next;
            if (c->slot[i % GROUP_CHUNK].op.req || !c->slot[i % GROUP_CHUNK].comm) continue;
            ops[k] = &c->slot[i % GROUP_CHUNK].op;
            reqs[k++] = &c->slot[i % GROUP_CHUNK].req;
        }
        if (xc__p2p_express_recvs(g->rcomm, ops, reqs, k, &rc)) return rc;
    }
    return group_post_recorded(g);
}

xc_result_t xc_group_end(void)
{
    group_t *g = &tls_group;
    if (g->depth == 0) return xc__err(XC_ERR_INVALID, "xc_group_end without xc_group_start");
    if (--g->depth > 0) return XC_OK;
    xc_result_t rc = g->rc;
    if (g->nrec) {
        xc_result_t r = group_receives(g);
        if (r != XC_OK && rc == XC_OK) rc = r;
    }
    /* Wait for every slot that holds an operation, telling each wait the
     * next one (the hand-off to the progress thread in between). */
    group_chunk_t *c = g->head;
    for (size_t i = 0; i < g->n; i++) {
        if (i && i % GROUP_CHUNK == 0) c = c->next;
        if (!c->slot[i % GROUP_CHUNK].op.req) continue;
        xc_request_t *req = &c->slot[i % GROUP_CHUNK].req;
        const xc_request_t *next = NULL;
        group_chunk_t *cj = c;
        for (size_t j = i + 1; j < g->n && !next; j++) {
            if (j % GROUP_CHUNK == 0) cj = cj->next;
            if (cj->slot[j % GROUP_CHUNK].op.req) next = &cj->slot[j % GROUP_CHUNK].req;
        }
        xc_result_t r = xc__request_wait_stack(req, next);
        if (r != XC_OK && rc == XC_OK) rc = r;
    }
    g->n = 0;
    g->nrec = 0;
    if (g->handoff) xc__comm_handoff(g->handoff);
    g->handoff = NULL;
    return rc;
}
