/*
 * sched.c -- building and executing schedules (see sched.h).
 */
#include "../core/comm.h"
#include "../reduce/reduce.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void xc__sched_init(xc__sched_t *s, void **pool)
{
    memset(s, 0, sizeof *s);
    s->pool = pool;
}

/* Scratch blocks carry their capacity in a 64-byte header before them. */
#define HDR 64
static size_t cap_of(const void *p) { return *(const size_t *)((const char *)p - HDR); }
static void block_free(void *p)
{
    if (p) free((char *)p - HDR);
}

/* Give block p back to the pool, which keeps the larger of it and the one
 * it holds; every block taken out of the pool is either put back or freed,
 * whatever other threads do in between. */
static void give_back(void **pool, void *p)
{
    if (!p) return;
    if (!pool) {
        block_free(p);
        return;
    }
    size_t cap = cap_of(p); /* before p is in the pool: then it may be taken and freed */
    void *old = __atomic_exchange_n(pool, p, __ATOMIC_ACQ_REL);
    if (old && cap_of(old) > cap) old = __atomic_exchange_n(pool, old, __ATOMIC_ACQ_REL);
    block_free(old);
}

void xc__sched_pool_free(void **pool) { block_free(__atomic_exchange_n(pool, NULL, __ATOMIC_ACQ_REL)); }

void xc__sched_free(xc__sched_t *s)
{
    free(s->steps);
    free(s->round_end);
    give_back(s->pool, s->scratch);
    void **pool = s->pool;
    memset(s, 0, sizeof *s);
    s->pool = pool;
}

void *xc__sched_scratch(xc__sched_t *s, size_t bytes)
{
    bytes = bytes ? (bytes + 63) & ~(size_t)63 : 64;
    give_back(s->pool, s->scratch);
    s->scratch = NULL;
    void *p = s->pool ? __atomic_exchange_n(s->pool, NULL, __ATOMIC_ACQ_REL) : NULL;
    if (p && cap_of(p) < bytes) {
        block_free(p); /* too small: the larger one replaces it */
        p = NULL;
    }
    if (!p) {
        void *raw = NULL;
        if (bytes <= SIZE_MAX - HDR && posix_memalign(&raw, 64, HDR + bytes) == 0) {
            *(size_t *)raw = bytes;
            p = (char *)raw + HDR;
        }
    }
    if (!p) s->nomem = 1;
    s->scratch = p;
    return p;
}

static xc__step_t *add_step(xc__sched_t *s, int type)
{
    if (s->nsteps == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        xc__step_t *n = realloc(s->steps, (size_t)cap * sizeof *n);
        if (!n) {
            s->nomem = 1;
            return NULL;
        }
        s->steps = n;
        s->cap = cap;
    }
    xc__step_t *st = &s->steps[s->nsteps++];
    memset(st, 0, sizeof *st);
    st->type = (uint8_t)type;
    return st;
}

void xc__sched_round(xc__sched_t *s)
{
    int start = s->nrounds ? s->round_end[s->nrounds - 1] : 0;
    if (s->nsteps == start) return;
    if (s->nrounds == s->rcap) {
        int cap = s->rcap ? s->rcap * 2 : 8;
        int *n = realloc(s->round_end, (size_t)cap * sizeof *n);
        if (!n) {
            s->nomem = 1;
            return;
        }
        s->round_end = n;
        s->rcap = cap;
    }
    s->round_end[s->nrounds++] = s->nsteps;
}

void xc__sched_send(xc__sched_t *s, int peer, const void *buf, size_t bytes)
{
    xc__step_t *st = add_step(s, XC__S_SEND);
    if (st) st->peer = peer, st->src = buf, st->bytes = bytes;
}

void xc__sched_recv(xc__sched_t *s, int peer, void *buf, size_t bytes)
{
    xc__step_t *st = add_step(s, XC__S_RECV);
    if (st) st->peer = peer, st->dst = buf, st->bytes = bytes;
}

void xc__sched_copy(xc__sched_t *s, void *dst, const void *src, size_t bytes)
{
    if (dst == src || bytes == 0) return;
    xc__step_t *st = add_step(s, XC__S_COPY);
    if (st) st->dst = dst, st->src = src, st->bytes = bytes;
}

void xc__sched_reduce(xc__sched_t *s, void *dst, const void *a, const void *b,
                      size_t count)
{
    if (count == 0) return;
    xc__step_t *st = add_step(s, XC__S_REDUCE);
    if (st) st->dst = dst, st->src = a, st->src2 = b, st->count = count;
}

void xc__sched_single(xc__sched_t *s, void *dst, const void *src, size_t count, size_t es)
{
    xc__sched_copy(s, dst, src, count * es);
    xc__sched_finalize(s, dst, count);
    xc__sched_round(s);
}

void xc__sched_reduce_n(xc__sched_t *s, void *dst, const void *const *srcs, int k, size_t count)
{
    if (count == 0) return;
    xc__step_t *st = add_step(s, XC__S_REDUCE_N);
    if (st) st->dst = dst, st->src = srcs, st->bytes = (size_t)k, st->count = count;
}

void xc__sched_finalize(xc__sched_t *s, void *buf, size_t count)
{
    if (count == 0) return;
    xc__step_t *st = add_step(s, XC__S_FINALIZE);
    if (st) st->dst = buf, st->count = count;
}

void xc__sched_desc_check(xc__sched_t *s, int rank, int size)
{
    if (size < 2) return;
    xc__sched_send(s, (rank + 1) % size, NULL, 0);
    xc__sched_recv(s, (rank + size - 1) % size, NULL, 0);
}

int xc__sched_advance(xc_comm_t *comm, xc__op_t *op)
{
    xc__sched_t *s = &op->sched;
    while (s->cur < s->nrounds) {
        int first = s->cur ? s->round_end[s->cur - 1] : 0;
        int last = s->round_end[s->cur];
        if (!s->posted) {
            s->posted = 1;
            for (int i = first; i < last; i++) {
                xc__step_t *st = &s->steps[i];
                if (st->type == XC__S_SEND)
                    xc__post_send(comm, op, &st->u.tx, st->peer, st->src, st->bytes);
                else if (st->type == XC__S_RECV)
                    xc__post_recv(comm, op, &st->u.rx, st->peer, st->dst, st->bytes);
                if (xc__comm_status(comm) != XC_OK) return 0;
            }
        }
        if (op->pending > 0) return 0;
        for (int i = first; i < last; i++) {
            xc__step_t *st = &s->steps[i];
            switch (st->type) {
            case XC__S_COPY: xc__move(st->dst, st->src, st->bytes); break;
            case XC__S_REDUCE:
                xc__reduce2(st->dst, st->src, st->src2, st->count,
                            (xc_dtype_t)op->desc.dtype, (xc_op_t)op->desc.op);
                break;
            case XC__S_REDUCE_N:
                xc__reduce_many(st->dst, st->src, (int)st->bytes, st->count,
                                (xc_dtype_t)op->desc.dtype, (xc_op_t)op->desc.op);
                break;
            case XC__S_FINALIZE:
                xc__reduce_finalize(st->dst, st->count, (xc_dtype_t)op->desc.dtype,
                                    (xc_op_t)op->desc.op, comm->size);
                break;
            default: break;
            }
        }
        s->cur++;
        s->posted = 0;
    }
    return 1;
}

size_t xc__pipe_segments(size_t bytes, size_t c, size_t most)
{
    if (most <= 1 || c == 0) return 1;
    size_t units = bytes / XC__PIPE_ALPHA_BYTES;
    size_t x = units > SIZE_MAX / c ? SIZE_MAX : units * c, s = 1;
    while (s < most && (s + 1) * (s + 1) <= x) s++;
    return s;
}
