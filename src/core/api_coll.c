/*
 * api_coll.c -- the public collective entry points: argument checks, then
 * one path for all of them -- select an algorithm, build its schedule,
 * enqueue it (xc__op_submit); the blocking forms wait on the request.
 *
 * Invalid arguments are reported before anything is sent and do not poison
 * the communicator.  "In place" is NCCL's pointer equality; buffers that
 * overlap in any other way are rejected.
 */
#include "../algo/algos.h"
#include "../reduce/reduce.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Do [a, a+na) and [b, b+nb) overlap? */
static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

static xc_result_t check_common(const xc_comm_t *comm, xc_dtype_t dtype, size_t count,
                                size_t mult, const char *fn)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "%s: comm is NULL", fn);
    size_t es = xc__dtype_size(dtype);
    if (es == 0) return xc__err(XC_ERR_INVALID, "%s: invalid dtype %d", fn, (int)dtype);
    size_t bytes; /* (no division on every call's path) */
    if (__builtin_mul_overflow(count, es * (mult ? mult : 1) * 2, &bytes))
        return xc__err(XC_ERR_INVALID, "%s: count %zu is too large", fn, count);
    return XC_OK;
}

static xc_result_t check_buf(const void *p, size_t count, const char *fn, const char *name)
{
    if (!p && count) return xc__err(XC_ERR_INVALID, "%s: %s is NULL with count %zu", fn, name, count);
    return XC_OK;
}

static xc_result_t check_root(const xc_comm_t *comm, int root, const char *fn)
{
    if (root < 0 || root >= comm->size)
        return xc__err(XC_ERR_INVALID, "%s: root %d out of range [0, %d)", fn, root, comm->size);
    return XC_OK;
}

/* Build `op` for `a`; then submit it (will_wait 0), or submit it and wait
 * for it (1: a blocking call, op in the caller's frame). */
static xc_result_t build_submit(xc_comm_t *comm, const xc__algo_t *algo, const xc__args_t *a,
                                xc__op_t *op, int will_wait)
{
    op->desc.dtype = (uint8_t)a->dtype;
    op->desc.op = (uint8_t)a->op;
    op->desc.count = a->coll == XC_COLL_ALLTOALLV ? 0 : a->count;
    op->desc.root = a->root;
    op->desc.algo = (uint16_t)algo->id;
    xc_result_t rc = algo->build(comm, op, a);
    if (rc != XC_OK) {
        xc__op_discard(op);
        return rc;
    }
    /* Both discard the op on failure. */
    return will_wait ? xc__op_run(comm, op) : xc__op_submit(comm, op, 0);
}

/* A collective this rank could not start for want of memory: the others
 * are in it or about to be, and this rank's next call would pair with it.
 * The communicator fails on every rank, naming this one (docs/engine.md
 * "Errors"). */
static xc_result_t nomem(xc_comm_t *comm, const xc__args_t *a, xc_result_t rc)
{
    if (rc != XC_ERR_NOMEM) return rc;
    xc_result_t st = xc__comm_status(comm);
    if (st != XC_OK) /* failed before: later calls keep its code */
        return xc__err(st, "communicator is unusable after an earlier error: %s", comm->errmsg);
    char why[XC__ERRMSG_LEN];
    snprintf(why, sizeof why, "%s", xc__tls_error());
    xc__comm_poison_now(comm, XC_ERR_NOMEM, XC__POISON_LOCAL,
                        "rank %d could not start %s (%zu elements): %s", comm->rank,
                        xc_coll_name(a->coll), a->count, why);
    return xc__err(XC_ERR_NOMEM, "%s", comm->errmsg);
}

/* Blocking (req == NULL: the operation lives in this frame, nothing is
 * allocated) or non-blocking entry. */
static xc_result_t run(xc_comm_t *comm, const xc__args_t *a, xc_request_t **req)
{
    const xc__algo_t *algo;
    if (xc__comm_forked(comm)) {
        char fn[32];
        snprintf(fn, sizeof fn, "xc_%s", xc_coll_name(a->coll));
        return xc__comm_forked_err(fn);
    }
    xc_result_t rc = xc__algo_select(comm, a, &algo);
    if (rc != XC_OK) return xc__comm_fail(comm, nomem(comm, a, rc));
    if (req) {
        xc__op_t *op;
        rc = xc__op_new(comm, a->coll, &op, req);
        if (rc == XC_OK) rc = build_submit(comm, algo, a, op, 0);
        if (rc != XC_OK) *req = NULL;
        return xc__comm_fail(comm, nomem(comm, a, rc));
    }
    if (algo->express && xc__op_express(comm, a, algo, &rc)) return xc__comm_fail(comm, rc);
    xc__op_t op;
    xc_request_t r;
    xc__op_init_stack(comm, a->coll, &op, &r);
    return xc__comm_fail(comm, nomem(comm, a, build_submit(comm, algo, a, &op, 1)));
}

static xc_result_t bad(xc_comm_t *comm, xc_result_t rc) { return xc__comm_fail(comm, rc); }

#define CHECK_REQ(fn)                                                          \
    do {                                                                       \
        if (nb && !req) return bad(comm, xc__err(XC_ERR_INVALID, fn ": req is NULL")); \
        if (req) *req = NULL;                                                  \
    } while (0)

#define ARGCHECK(call)                                                         \
    do {                                                                       \
        xc_result_t rc_ = (call);                                              \
        if (rc_ != XC_OK) return bad(comm, rc_);                               \
    } while (0)

static xc_result_t allreduce(const void *sbuf, void *rbuf, size_t count, xc_dtype_t dtype,
                             xc_op_t op, xc_comm_t *comm, xc_request_t **req, int nb)
{
    const char *fn = nb ? "xc_iallreduce" : "xc_allreduce";
    CHECK_REQ("xc_iallreduce");
    ARGCHECK(check_common(comm, dtype, count, 1, fn));
    ARGCHECK(xc__reduce_check(dtype, op));
    ARGCHECK(check_buf(sbuf, count, fn, "sendbuf"));
    ARGCHECK(check_buf(rbuf, count, fn, "recvbuf"));
    size_t b = count * xc__dtype_size(dtype);
    if (sbuf != rbuf && overlap(sbuf, b, rbuf, b))
        return bad(comm, xc__err(XC_ERR_INVALID, "%s: sendbuf and recvbuf overlap without being equal (in place)", fn));
    xc__args_t a = {.coll = XC_COLL_ALLREDUCE, .sbuf = sbuf, .rbuf = rbuf, .count = count,
                    .dtype = dtype, .op = op, .root = -1};
    return run(comm, &a, req);
}

xc_result_t xc_allreduce(const void *s, void *r, size_t n, xc_dtype_t d, xc_op_t o, xc_comm_t *c)
{
    return allreduce(s, r, n, d, o, c, NULL, 0);
}
xc_result_t xc_iallreduce(const void *s, void *r, size_t n, xc_dtype_t d, xc_op_t o, xc_comm_t *c,
                          xc_request_t **q)
{
    return allreduce(s, r, n, d, o, c, q, 1);
}

static xc_result_t reduce_scatter(const void *sbuf, void *rbuf, size_t rcount, xc_dtype_t dtype,
                                  xc_op_t op, xc_comm_t *comm, xc_request_t **req, int nb)
{
    const char *fn = nb ? "xc_ireduce_scatter" : "xc_reduce_scatter";
    CHECK_REQ("xc_ireduce_scatter");
    ARGCHECK(check_common(comm, dtype, rcount, (size_t)comm->size, fn));
    ARGCHECK(xc__reduce_check(dtype, op));
    ARGCHECK(check_buf(sbuf, rcount, fn, "sendbuf"));
    ARGCHECK(check_buf(rbuf, rcount, fn, "recvbuf"));
    size_t es = xc__dtype_size(dtype), b = rcount * es;
    const char *mine = (const char *)sbuf + (size_t)comm->rank * b;
    if ((const void *)mine != rbuf && overlap(sbuf, b * (size_t)comm->size, rbuf, b))
        return bad(comm, xc__err(XC_ERR_INVALID,
                                 "%s: recvbuf overlaps sendbuf but is not sendbuf + rank*recvcount (in place)", fn));
    xc__args_t a = {.coll = XC_COLL_REDUCE_SCATTER, .sbuf = sbuf, .rbuf = rbuf, .count = rcount,
                    .dtype = dtype, .op = op, .root = -1};
    return run(comm, &a, req);
}

xc_result_t xc_reduce_scatter(const void *s, void *r, size_t n, xc_dtype_t d, xc_op_t o,
                              xc_comm_t *c)
{
    return reduce_scatter(s, r, n, d, o, c, NULL, 0);
}
xc_result_t xc_ireduce_scatter(const void *s, void *r, size_t n, xc_dtype_t d, xc_op_t o,
                               xc_comm_t *c, xc_request_t **q)
{
    return reduce_scatter(s, r, n, d, o, c, q, 1);
}

static xc_result_t allgather(const void *sbuf, void *rbuf, size_t scount, xc_dtype_t dtype,
                             xc_comm_t *comm, xc_request_t **req, int nb)
{
    const char *fn = nb ? "xc_iallgather" : "xc_allgather";
    CHECK_REQ("xc_iallgather");
    ARGCHECK(check_common(comm, dtype, scount, (size_t)comm->size, fn));
    ARGCHECK(check_buf(sbuf, scount, fn, "sendbuf"));
    ARGCHECK(check_buf(rbuf, scount, fn, "recvbuf"));
    size_t es = xc__dtype_size(dtype), b = scount * es;
    const char *mine = (const char *)rbuf + (size_t)comm->rank * b;
    if ((const void *)mine != sbuf && overlap(sbuf, b, rbuf, b * (size_t)comm->size))
        return bad(comm, xc__err(XC_ERR_INVALID,
                                 "%s: sendbuf overlaps recvbuf but is not recvbuf + rank*sendcount (in place)", fn));
    xc__args_t a = {.coll = XC_COLL_ALLGATHER, .sbuf = sbuf, .rbuf = rbuf, .count = scount,
                    .dtype = dtype, .op = XC_SUM, .root = -1};
    return run(comm, &a, req);
}

xc_result_t xc_allgather(const void *s, void *r, size_t n, xc_dtype_t d, xc_comm_t *c)
{
    return allgather(s, r, n, d, c, NULL, 0);
}
xc_result_t xc_iallgather(const void *s, void *r, size_t n, xc_dtype_t d, xc_comm_t *c,
                          xc_request_t **q)
{
    return allgather(s, r, n, d, c, q, 1);
}

static xc_result_t reduce(const void *sbuf, void *rbuf, size_t count, xc_dtype_t dtype, xc_op_t op,
                          int root, xc_comm_t *comm, xc_request_t **req, int nb)
{
    const char *fn = nb ? "xc_ireduce" : "xc_reduce";
    CHECK_REQ("xc_ireduce");
    ARGCHECK(check_common(comm, dtype, count, 1, fn));
    ARGCHECK(xc__reduce_check(dtype, op));
    ARGCHECK(check_root(comm, root, fn));
    ARGCHECK(check_buf(sbuf, count, fn, "sendbuf"));
    if (comm->rank == root) {
        ARGCHECK(check_buf(rbuf, count, fn, "recvbuf (on the root)"));
        size_t b = count * xc__dtype_size(dtype);
        if (sbuf != rbuf && overlap(sbuf, b, rbuf, b))
            return bad(comm, xc__err(XC_ERR_INVALID, "%s: sendbuf and recvbuf overlap without being equal (in place)", fn));
    }
    xc__args_t a = {.coll = XC_COLL_REDUCE, .sbuf = sbuf, .rbuf = comm->rank == root ? rbuf : NULL,
                    .count = count, .dtype = dtype, .op = op, .root = root};
    return run(comm, &a, req);
}

xc_result_t xc_reduce(const void *s, void *r, size_t n, xc_dtype_t d, xc_op_t o, int root,
                      xc_comm_t *c)
{
    return reduce(s, r, n, d, o, root, c, NULL, 0);
}
xc_result_t xc_ireduce(const void *s, void *r, size_t n, xc_dtype_t d, xc_op_t o, int root,
                       xc_comm_t *c, xc_request_t **q)
{
    return reduce(s, r, n, d, o, root, c, q, 1);
}

static xc_result_t bcast(void *buf, size_t count, xc_dtype_t dtype, int root, xc_comm_t *comm,
                         xc_request_t **req, int nb)
{
    const char *fn = nb ? "xc_ibcast" : "xc_bcast";
    CHECK_REQ("xc_ibcast");
    ARGCHECK(check_common(comm, dtype, count, 1, fn));
    ARGCHECK(check_root(comm, root, fn));
    ARGCHECK(check_buf(buf, count, fn, "buf"));
    xc__args_t a = {.coll = XC_COLL_BCAST, .sbuf = buf, .rbuf = buf, .count = count,
                    .dtype = dtype, .op = XC_SUM, .root = root};
    return run(comm, &a, req);
}

xc_result_t xc_bcast(void *b, size_t n, xc_dtype_t d, int root, xc_comm_t *c)
{
    return bcast(b, n, d, root, c, NULL, 0);
}
xc_result_t xc_ibcast(void *b, size_t n, xc_dtype_t d, int root, xc_comm_t *c, xc_request_t **q)
{
    return bcast(b, n, d, root, c, q, 1);
}

static xc_result_t alltoall(const void *sbuf, void *rbuf, size_t count, xc_dtype_t dtype,
                            xc_comm_t *comm, xc_request_t **req, int nb)
{
    const char *fn = nb ? "xc_ialltoall" : "xc_alltoall";
    CHECK_REQ("xc_ialltoall");
    ARGCHECK(check_common(comm, dtype, count, (size_t)comm->size, fn));
    ARGCHECK(check_buf(sbuf, count, fn, "sendbuf"));
    ARGCHECK(check_buf(rbuf, count, fn, "recvbuf"));
    size_t b = count * xc__dtype_size(dtype) * (size_t)comm->size;
    if (sbuf != rbuf && overlap(sbuf, b, rbuf, b))
        return bad(comm, xc__err(XC_ERR_INVALID, "%s: sendbuf and recvbuf overlap without being equal (in place)", fn));
    /* An all-to-all reduces nothing: its op says "in place" (XC_PROD), so
     * that ranks that disagree on it -- the shared-memory paths differ --
     * fail with XC_ERR_MISMATCH like any other differing argument. */
    xc__args_t a = {.coll = XC_COLL_ALLTOALL, .sbuf = sbuf, .rbuf = rbuf, .count = count,
                    .dtype = dtype, .op = sbuf == rbuf ? XC_PROD : XC_SUM, .root = -1};
    return run(comm, &a, req);
}

xc_result_t xc_alltoall(const void *s, void *r, size_t n, xc_dtype_t d, xc_comm_t *c)
{
    return alltoall(s, r, n, d, c, NULL, 0);
}
xc_result_t xc_ialltoall(const void *s, void *r, size_t n, xc_dtype_t d, xc_comm_t *c,
                         xc_request_t **q)
{
    return alltoall(s, r, n, d, c, q, 1);
}

/* Extent in elements of a v-layout: max(displ + count). */
static xc_result_t v_extent(const size_t *counts, const size_t *displs, int n, size_t *ext,
                            const char *fn, const char *what)
{
    size_t e = 0;
    for (int i = 0; i < n; i++) {
        if (displs[i] > SIZE_MAX / 64 || counts[i] > SIZE_MAX / 64)
            return xc__err(XC_ERR_INVALID, "%s: %s[%d] is too large", fn, what, i);
        if (displs[i] + counts[i] > e) e = displs[i] + counts[i];
    }
    *ext = e;
    return XC_OK;
}

static xc_result_t alltoallv(const void *sbuf, const size_t *sc, const size_t *sd, void *rbuf,
                             const size_t *rc, const size_t *rd, xc_dtype_t dtype,
                             xc_comm_t *comm, xc_request_t **req, int nb)
{
    const char *fn = nb ? "xc_ialltoallv" : "xc_alltoallv";
    CHECK_REQ("xc_ialltoallv");
    ARGCHECK(check_common(comm, dtype, 1, 1, fn));
    if (!sc || !sd || !rc || !rd)
        return bad(comm, xc__err(XC_ERR_INVALID, "%s: %s is NULL", fn,
                                 !sc ? "sendcounts" : !sd ? "sdispls" : !rc ? "recvcounts" : "rdispls"));
    int n = comm->size;
    size_t se = 0, re = 0, es = xc__dtype_size(dtype);
    ARGCHECK(v_extent(sc, sd, n, &se, fn, "sendcounts/sdispls"));
    ARGCHECK(v_extent(rc, rd, n, &re, fn, "recvcounts/rdispls"));
    ARGCHECK(check_buf(sbuf, se, fn, "sendbuf"));
    ARGCHECK(check_buf(rbuf, re, fn, "recvbuf"));
    if (sc[comm->rank] != rc[comm->rank])
        return bad(comm, xc__err(XC_ERR_INVALID, "%s: sendcounts[%d] = %zu but recvcounts[%d] = "
                                 "%zu: this rank's block to itself must have one size",
                                 fn, comm->rank, sc[comm->rank], comm->rank, rc[comm->rank]));
    if (overlap(sbuf, se * es, rbuf, re * es))
        return bad(comm, xc__err(XC_ERR_INVALID, "%s: sendbuf and recvbuf overlap (in place is not supported)", fn));
    /* The arrays are the caller's: keep copies for the schedule. */
    size_t *cp = malloc(4 * (size_t)n * sizeof *cp);
    if (!cp) return bad(comm, xc__err(XC_ERR_NOMEM, "out of memory"));
    memcpy(cp, sc, (size_t)n * sizeof *cp);
    memcpy(cp + n, sd, (size_t)n * sizeof *cp);
    memcpy(cp + 2 * n, rc, (size_t)n * sizeof *cp);
    memcpy(cp + 3 * n, rd, (size_t)n * sizeof *cp);
    xc__args_t a = {.coll = XC_COLL_ALLTOALLV, .sbuf = sbuf, .rbuf = rbuf, .count = 0,
                    .dtype = dtype, .op = XC_SUM, .root = -1, .scounts = cp,
                    .sdispls = cp + n, .rcounts = cp + 2 * n, .rdispls = cp + 3 * n};
    /* The schedule holds pointers and sizes, not the arrays: free after. */
    xc_result_t r = run(comm, &a, req);
    free(cp);
    return r;
}

xc_result_t xc_alltoallv(const void *s, const size_t *sc, const size_t *sd, void *r,
                         const size_t *rc, const size_t *rd, xc_dtype_t d, xc_comm_t *c)
{
    return alltoallv(s, sc, sd, r, rc, rd, d, c, NULL, 0);
}
xc_result_t xc_ialltoallv(const void *s, const size_t *sc, const size_t *sd, void *r,
                          const size_t *rc, const size_t *rd, xc_dtype_t d, xc_comm_t *c,
                          xc_request_t **q)
{
    return alltoallv(s, sc, sd, r, rc, rd, d, c, q, 1);
}

static xc_result_t barrier(xc_comm_t *comm, xc_request_t **req, int nb)
{
    CHECK_REQ("xc_ibarrier");
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_barrier: comm is NULL");
    xc__args_t a = {.coll = XC_COLL_BARRIER, .dtype = XC_UINT8, .op = XC_SUM, .root = -1};
    return run(comm, &a, req);
}

xc_result_t xc_barrier(xc_comm_t *c) { return barrier(c, NULL, 0); }
xc_result_t xc_ibarrier(xc_comm_t *c, xc_request_t **q) { return barrier(c, q, 1); }
