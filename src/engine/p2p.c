/*
 * p2p.c -- tagged point-to-point operations and groups.
 *
 * A send or receive is an operation of its own, independent of the
 * collective queue, completed as soon as its frame is written or received.
 * Inside xc_group_start/xc_group_end the blocking forms only post their
 * operation; xc_group_end waits for all of them.  Since input is always
 * drained, even two blocking sends towards each other would complete; the
 * group is what makes the intent explicit and the waits concurrent.
 */
#include "../algo/algos.h"
#include "../reduce/reduce.h"

#include <stdlib.h>

static _Thread_local int tls_group_depth;
static _Thread_local xc_request_t **tls_group_reqs;
static _Thread_local size_t tls_group_n, tls_group_cap;
static _Thread_local xc_result_t tls_group_rc;

static xc_result_t p2p_check(int is_send, const void *buf, size_t count, xc_dtype_t dtype,
                             int peer, int tag, const xc_comm_t *comm, const char *fn)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "%s: comm is NULL", fn);
    if (xc_dtype_size(dtype) == 0) return xc__err(XC_ERR_INVALID, "%s: invalid dtype %d", fn, (int)dtype);
    if (!buf && count) return xc__err(XC_ERR_INVALID, "%s: buf is NULL with count %zu", fn, count);
    if ((peer < 0 || peer >= comm->size) && (is_send || peer != XC_ANY_SOURCE))
        return xc__err(XC_ERR_INVALID, "%s: peer %d out of range [0, %d)%s", fn, peer,
                       comm->size, is_send ? "" : " and not XC_ANY_SOURCE");
    if (tag < 0) return xc__err(XC_ERR_INVALID, "%s: tag must be >= 0 (got %d)", fn, tag);
    if (count > SIZE_MAX / 16) return xc__err(XC_ERR_INVALID, "%s: count %zu too large", fn, count);
    return XC_OK;
}

/* Issue a send or receive: in `sop`/`sreq` (a blocking caller's frame:
 * then also wait for it) if given, else allocated, the request returned in
 * *req. */
static xc_result_t p2p_issue(int is_send, void *buf, size_t count, xc_dtype_t dtype, int peer,
                             int tag, xc_comm_t *comm, xc_request_t **req, xc__op_t *sop,
                             xc_request_t *sreq)
{
    const char *fn = is_send ? "xc_send" : "xc_recv";
    XC_CHECK(p2p_check(is_send, buf, count, dtype, peer, tag, comm, fn));
    xc__op_t *op = sop;
    xc_coll_t coll = is_send ? XC_COLL_SEND : XC_COLL_RECV;
    if (sop) xc__op_init_stack(comm, coll, sop, sreq);
    else XC_CHECK(xc__op_new(comm, coll, &op, req));
    op->desc.dtype = (uint8_t)dtype;
    op->desc.count = count;
    op->desc.algo = XC__ALGO_P2P;
    op->desc.root = -1;
    op->peer = peer;
    size_t len = count * xc_dtype_size(dtype);
    if (is_send) {
        op->ptx.buf = buf;
        op->ptx.hdr.len = len;
        op->ptx.hdr.tag = tag;
    } else {
        op->prx.buf = buf;
        op->prx.len = len;
        op->prx.tag = tag;
    }
    /* In a blocking caller's frame: submit and wait under one lock.  In a
     * group, xc_group_end is about to wait: no hand-off to the thread. */
    return sop ? xc__op_run(comm, op) : xc__op_submit(comm, op, tls_group_depth > 0);
}

/* Blocking form: inside a group, post and remember; else issue and wait. */
static xc_result_t p2p_blocking(int is_send, void *buf, size_t count, xc_dtype_t dtype, int peer,
                                int tag, xc_comm_t *comm)
{
    xc_request_t *req;
    if (tls_group_depth > 0) {
        if (tls_group_n == tls_group_cap) {
            size_t cap = tls_group_cap ? 2 * tls_group_cap : 16;
            xc_request_t **n = realloc(tls_group_reqs, cap * sizeof *n);
            if (!n) return xc__err(XC_ERR_NOMEM, "out of memory in a group");
            tls_group_reqs = n;
            tls_group_cap = cap;
        }
        xc_result_t rc = p2p_issue(is_send, buf, count, dtype, peer, tag, comm, &req, NULL, NULL);
        if (rc != XC_OK) {
            if (tls_group_rc == XC_OK) tls_group_rc = rc;
            return xc__comm_fail(comm, rc);
        }
        tls_group_reqs[tls_group_n++] = req;
        return XC_OK;
    }
    xc__op_t op;
    xc_request_t sreq;
    return xc__comm_fail(comm, p2p_issue(is_send, buf, count, dtype, peer, tag, comm, NULL, &op,
                                         &sreq));
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
    return xc__comm_fail(comm, p2p_issue(1, (void *)buf, count, dtype, peer, tag, comm, req,
                                         NULL, NULL));
}

xc_result_t xc_irecv(void *buf, size_t count, xc_dtype_t dtype, int peer, int tag,
                     xc_comm_t *comm, xc_request_t **req)
{
    if (!req) return xc__comm_fail(comm, xc__err(XC_ERR_INVALID, "xc_irecv: req is NULL"));
    *req = NULL;
    return xc__comm_fail(comm, p2p_issue(0, buf, count, dtype, peer, tag, comm, req, NULL,
                                         NULL));
}

xc_result_t xc_group_start(void)
{
    if (tls_group_depth++ == 0) tls_group_rc = XC_OK;
    return XC_OK;
}

xc_result_t xc_group_end(void)
{
    if (tls_group_depth == 0)
        return xc__err(XC_ERR_INVALID, "xc_group_end without xc_group_start");
    if (--tls_group_depth > 0) return XC_OK;
    xc_result_t rc = tls_group_rc;
    for (size_t i = 0; i < tls_group_n; i++) {
        xc_result_t r = xc__request_wait_free(tls_group_reqs[i]);
        if (r != XC_OK && rc == XC_OK) rc = r;
    }
    tls_group_n = 0;
    free(tls_group_reqs);
    tls_group_reqs = NULL;
    tls_group_cap = 0;
    return rc;
}
